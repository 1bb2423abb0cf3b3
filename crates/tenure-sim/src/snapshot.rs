//! Snapshots in the store world (lecture, seed 002 §14.1–§14.2; DESIGN §6, §9.8): the
//! checker that every snapshot is a consistent cut, and that restoring one yields a
//! working cluster holding exactly what was acknowledged or in flight at the cut.
//!
//! The world starts snapshots at random devices at random times while faults are on, and
//! two (concurrently) once the liveness phase has converged; those two must complete.
//!
//! **Consistent cut.** The simulator numbers the regular messages of every directed
//! channel (a tagged message counts as the message it carries; markers and the other
//! snapshot messages are not numbered). When device Q records its state for snapshot S
//! (`SnapshotRecorded`, emitted at the moment it records) the tracker notes, for every
//! peer P, the number of the last P→Q message Q has processed — the message a tag rode
//! on counts as processed when any of its effects (a persist, a send, a reply, an
//! observation) left Q before the record — and, for every peer, the number of the last
//! message Q has sent it (sends of the same batch before the record are before the cut).
//! The cut made of the parts (the latest part of each device) is consistent iff, for
//! every pair, `processed(Q from P at Q's record) ≤ sent(P to Q at P's record)` —
//! nothing is recorded as received that was not sent — and every message Q recorded on
//! its channel from P is, in order, a message P sent to Q before P's record and Q
//! received after its own. A snapshot reported terminated (§14.2, every device Done) must
//! have recorded no message at all.
//!
//! **Invariants in the cut.** Per store, the recorded chunks of one epoch name one
//! manager (the lease holder of the epoch) and one layout; no recorded lock table shows
//! two holders of a lock unless all hold it shared.
//!
//! **Restore.** A complete snapshot is restored the way `tenure snapshot restore` does:
//! a fresh cluster whose devices boot from the parts' states, receiving the recorded
//! channel messages before anything else, with no faults and no clients. Every store must
//! regain a working manager within the liveness bound, the store checkers run on the
//! restored cluster, and at every takeover the new manager's tables must hold every write
//! acknowledged at the cut (acknowledged by a device before it recorded), none of the
//! releases acknowledged at the cut, no two conflicting holders, and no write that had
//! not reached its manager before that manager recorded (acknowledged or in flight at
//! the cut, nothing else); the first takeover of each store must also hold every lock
//! grant acknowledged at the cut (later ones may follow expiries: the restored cluster
//! has no clients to keep sessions alive).
//!
//! This file holds the knobs, the violations, the counts and the tracker's state; the
//! tracker's work is split into `channels` (numbering messages, records, parts, ends),
//! `cut` (consistency and the invariants in the recorded states) and `restore`.

mod channels;
mod cut;
mod restore;
#[cfg(test)]
mod tests;

pub use tenure_core::snapshot::records::conflicting_holders;

use serde::Serialize;
use std::collections::BTreeMap;
use tenure_core::data::Tables;
use tenure_core::ids::Version;
use tenure_core::io::DevicePersist;
use tenure_core::lockctl::{FencingToken, SessionId};
use tenure_core::msg::Msg;
use tenure_core::rng::Rng;
use tenure_core::snapshot::{SnapMsg, SnapshotId, SnapshotPart};
use tenure_core::{DeviceId, StoreId};

/// What the seed draws for snapshots.
#[derive(Clone, Debug, Serialize)]
pub struct SnapshotKnobs {
    /// Mean time between snapshots started while faults are on (µs).
    pub mean_us: u64,
    /// Complete snapshots of the safety phase restored (the liveness phase's two always
    /// are).
    pub restores_max: u32,
}

impl SnapshotKnobs {
    /// Draw from the run's snapshot generator.
    pub fn draw(rng: &mut Rng) -> SnapshotKnobs {
        SnapshotKnobs {
            mean_us: 1_000_000 + rng.below(6_000_000),
            restores_max: 1 + rng.below(2) as u32,
        }
    }
}

/// A broken snapshot invariant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum SnapshotViolation {
    /// Q processed a message from P before recording that P sent after recording.
    ReceivedNotSent {
        /// The snapshot.
        id: SnapshotId,
        /// Sender.
        from: DeviceId,
        /// Receiver.
        to: DeviceId,
        /// The last message (number on the channel) the receiver had processed.
        processed: u64,
        /// The last message the sender had sent when it recorded.
        sent: u64,
    },
    /// A message recorded on a channel was not one the sender sent before its record and
    /// the receiver received after its own.
    BadChannel {
        /// The snapshot.
        id: SnapshotId,
        /// Sender.
        from: DeviceId,
        /// Receiver (the recording device).
        to: DeviceId,
        /// What is wrong.
        why: String,
    },
    /// The recorded chunk states break a store invariant (two managers or layouts in one
    /// epoch, diverged tables, conflicting holders, a fencing token held twice).
    InCut {
        /// The snapshot.
        id: SnapshotId,
        /// What is wrong.
        problem: tenure_core::snapshot::RecordProblem,
    },
    /// A device recorded one snapshot twice (after a restart): its second state holds
    /// messages received after the cut.
    RecordedTwice {
        /// The snapshot.
        id: SnapshotId,
        /// The device.
        device: DeviceId,
    },
    /// A snapshot reported complete (or terminated) that is not.
    Incomplete {
        /// The snapshot.
        id: SnapshotId,
        /// What is missing.
        why: String,
    },
    /// A snapshot started after faults stopped did not complete.
    NotCompleted {
        /// The snapshot.
        id: SnapshotId,
        /// Its result, or that it had none.
        why: String,
    },
    /// The cluster restored from a snapshot broke an invariant.
    Restore {
        /// The snapshot.
        id: SnapshotId,
        /// What went wrong.
        why: String,
    },
}

impl SnapshotViolation {
    /// Whether the violation is of liveness.
    pub fn is_liveness(&self) -> bool {
        matches!(self, SnapshotViolation::NotCompleted { .. })
    }
}

impl std::fmt::Display for SnapshotViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SnapshotViolation::ReceivedNotSent {
                id,
                from,
                to,
                processed,
                sent,
            } => write!(
                f,
                "snapshot {id} is not a consistent cut: {to} had processed message #{processed} from {from} when it recorded, but {from} recorded after sending #{sent} to {to}"
            ),
            SnapshotViolation::BadChannel { id, from, to, why } => write!(
                f,
                "snapshot {id}: channel {from}->{to} recorded at {to}: {why}"
            ),
            SnapshotViolation::InCut { id, problem } => write!(f, "snapshot {id}: {problem}"),
            SnapshotViolation::RecordedTwice { id, device } => write!(
                f,
                "snapshot {id}: {device} recorded it twice (again after a restart)"
            ),
            SnapshotViolation::Incomplete { id, why } => {
                write!(f, "snapshot {id} reported complete: {why}")
            }
            SnapshotViolation::NotCompleted { id, why } => {
                write!(
                    f,
                    "snapshot {id} started after faults stopped did not complete: {why}"
                )
            }
            SnapshotViolation::Restore { id, why } => {
                write!(f, "cluster restored from snapshot {id}: {why}")
            }
        }
    }
}

/// What the snapshots of a run (or a sweep) did, and how often the checkers looked.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SnapshotStats {
    /// Snapshots started.
    pub started: u64,
    /// Completed (every device recorded and answered).
    pub completed: u64,
    /// Of those, reported terminated (no message in flight at the cut).
    pub terminated: u64,
    /// Failed (a device did not answer in time).
    pub failed: u64,
    /// Parts recorded.
    pub parts: u64,
    /// Messages recorded in flight.
    pub channel_messages: u64,
    /// Records made by a device in a later boot than its first record of a snapshot.
    pub rerecords: u64,
    /// Channel pairs compared (processed at the receiver's record vs sent at the
    /// sender's).
    pub pair_checks: u64,
    /// Recorded channel messages matched with the messages delivered.
    pub channel_checks: u64,
    /// Recorded chunks and lock tables checked.
    pub state_checks: u64,
    /// Snapshots restored.
    pub restores: u64,
    /// Events the restored clusters ran.
    pub restore_events: u64,
    /// Longest a restored cluster took to give every store a working manager (µs).
    pub restore_max_us: u64,
    /// Acknowledged writes and grants, releases, restored registers and holders checked
    /// against the cut.
    pub restore_checks: u64,
}

impl SnapshotStats {
    /// Add another run's figures.
    pub fn add(&mut self, o: &SnapshotStats) {
        self.started += o.started;
        self.completed += o.completed;
        self.terminated += o.terminated;
        self.failed += o.failed;
        self.parts += o.parts;
        self.channel_messages += o.channel_messages;
        self.rerecords += o.rerecords;
        self.pair_checks += o.pair_checks;
        self.channel_checks += o.channel_checks;
        self.state_checks += o.state_checks;
        self.restores += o.restores;
        self.restore_events += o.restore_events;
        self.restore_max_us = self.restore_max_us.max(o.restore_max_us);
        self.restore_checks += o.restore_checks;
    }
}

/// One device's record of one snapshot.
#[derive(Clone, Debug)]
struct Record {
    boot: u64,
    /// The world's output counter at the record (orders it against acknowledgements).
    tick: u64,
    /// Per peer P: the last P→me message processed.
    processed: BTreeMap<DeviceId, u64>,
    /// Per peer Q: the last me→Q message sent.
    sent: BTreeMap<DeviceId, u64>,
}

/// The latest part of a device, with the numbers of its recorded messages.
#[derive(Clone, Debug)]
struct PartInfo {
    record: Record,
    part: SnapshotPart,
    /// Per sender: the numbers of the messages recorded on its channel.
    seqs: BTreeMap<DeviceId, Vec<u64>>,
}

/// Messages a device received after recording a snapshot, until its part.
#[derive(Clone, Debug)]
struct Log {
    boot: u64,
    since_us: u64,
    from: BTreeMap<DeviceId, Vec<(u64, Msg)>>,
}

/// A snapshot's life as the world saw it.
#[derive(Clone, Debug)]
struct Started {
    /// Started after faults stopped (must complete).
    calm: bool,
    result: Option<Result<(), String>>,
}

/// What happened on the channels and at the devices that a restore is judged by.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// Writes acknowledged: (device, tick, store, key, version).
    acked_writes: Vec<(DeviceId, u64, StoreId, u64, Version)>,
    /// Write (value) → where and when (tick) it reached a device.
    received_writes: BTreeMap<u64, Vec<(DeviceId, u64)>>,
    /// Grants acknowledged: (device, tick, store, name, session, token).
    grants: Vec<(DeviceId, u64, StoreId, String, SessionId, FencingToken)>,
    /// Releases acknowledged: (device, tick, store, name, session).
    releases: Vec<(DeviceId, u64, StoreId, String, SessionId)>,
    /// Requests or decisions that may end a session's grants: (tick, store, session).
    session_touches: Vec<(u64, StoreId, SessionId)>,
}

impl Facts {
    /// A write was acknowledged by `d`.
    pub fn write_acked(&mut self, d: DeviceId, tick: u64, store: StoreId, key: u64, v: Version) {
        self.acked_writes.push((d, tick, store, key, v));
    }

    /// Write `value` reached `d`.
    pub fn write_received(&mut self, d: DeviceId, tick: u64, value: u64) {
        self.received_writes
            .entry(value)
            .or_default()
            .push((d, tick));
    }

    /// `d` answered a grant.
    #[allow(clippy::too_many_arguments)]
    pub fn granted(
        &mut self,
        d: DeviceId,
        tick: u64,
        store: StoreId,
        name: &str,
        session: SessionId,
        token: FencingToken,
    ) {
        self.grants
            .push((d, tick, store, name.to_string(), session, token));
    }

    /// `d` answered a release.
    pub fn released(
        &mut self,
        d: DeviceId,
        tick: u64,
        store: StoreId,
        name: &str,
        session: SessionId,
    ) {
        self.releases
            .push((d, tick, store, name.to_string(), session));
    }

    /// A release or close of `session` reached a device, or a manager decided its end.
    pub fn session_touched(&mut self, tick: u64, store: StoreId, session: SessionId) {
        self.session_touches.push((tick, store, session));
    }
}

/// A complete snapshot to restore.
#[derive(Clone, Debug)]
pub struct Cut {
    /// The snapshot.
    pub id: SnapshotId,
    /// Each device's part.
    pub parts: BTreeMap<DeviceId, SnapshotPart>,
    /// Each device's record tick.
    ticks: BTreeMap<DeviceId, u64>,
}

impl Cut {
    /// The states to boot from.
    pub fn states(&self) -> BTreeMap<DeviceId, DevicePersist> {
        (self.parts.iter())
            .map(|(d, p)| (*d, p.state.clone()))
            .collect()
    }
}

/// The snapshot checker's memory of a run.
#[derive(Clone, Debug, Default)]
pub struct CutTracker {
    sent: BTreeMap<(DeviceId, DeviceId), u64>,
    /// Regular messages a device output but holds until persists they may depend on are
    /// durable: sent, as far as its state goes, and they leave before any later one.
    held: BTreeMap<(DeviceId, DeviceId), u64>,
    processed: BTreeMap<(DeviceId, DeviceId), u64>,
    /// Asynchronous disks: per receiver, the messages it processed whose effects are not
    /// all durable yet — (sender, number, the newest write group when it was processed).
    unsynced: BTreeMap<DeviceId, Vec<(DeviceId, u64, u64)>>,
    /// Per channel, the last message processed whose effects are durable.
    durable: BTreeMap<(DeviceId, DeviceId), u64>,
    records: BTreeMap<(SnapshotId, DeviceId), Vec<Record>>,
    logs: BTreeMap<(SnapshotId, DeviceId), Log>,
    parts: BTreeMap<SnapshotId, BTreeMap<DeviceId, PartInfo>>,
    started: BTreeMap<SnapshotId, Started>,
    /// Facts a restore is judged by.
    pub facts: Facts,
    /// Counts.
    pub stats: SnapshotStats,
    /// Violations found.
    pub violations: Vec<SnapshotViolation>,
}

/// Whether a message is one of the snapshot protocol's own (not numbered).
pub fn carried(msg: &Msg) -> Option<&Msg> {
    match msg {
        Msg::Snapshot(SnapMsg::Tagged { msg, .. }) => Some(msg),
        Msg::Snapshot(_) => None,
        m => Some(m),
    }
}

/// What the world's restored cluster gives the restore check.
#[derive(Clone, Debug, Default)]
pub struct Restored {
    /// Every takeover's tables: (store, manager, tables at the takeover).
    pub takeovers: Vec<(StoreId, DeviceId, Tables)>,
    /// Why some store has no working manager at the bound, if one has none.
    pub unmanaged: Option<String>,
    /// Violations of the store checkers in the restored cluster.
    pub violations: Vec<String>,
    /// Events it ran.
    pub events: u64,
    /// Time until every store had a working manager (µs).
    pub converged_us: Option<u64>,
    /// Its event trace (when the run traces).
    pub trace: String,
}
