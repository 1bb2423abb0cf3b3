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

use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use tenure_core::data::{Tables, Version};
use tenure_core::io::DevicePersist;
use tenure_core::lockctl::{FencingToken, SessionId};
use tenure_core::msg::Msg;
use tenure_core::rng::Rng;
use tenure_core::snapshot::{SnapMsg, SnapshotId, SnapshotPart};
use tenure_core::{ChunkId, DeviceId, Epoch, StoreId};

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
    /// Two managers (or layouts) of one store and epoch in the cut.
    TwoManagersInCut {
        /// The snapshot.
        id: SnapshotId,
        /// Store.
        store: StoreId,
        /// Epoch.
        epoch: Epoch,
        /// What differs.
        why: String,
    },
    /// A recorded lock table with conflicting holders.
    ConflictingHoldersInCut {
        /// The snapshot.
        id: SnapshotId,
        /// The chunk.
        chunk: ChunkId,
        /// The lock.
        name: String,
        /// The holders.
        holders: String,
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
            SnapshotViolation::TwoManagersInCut {
                id,
                store,
                epoch,
                why,
            } => write!(f, "snapshot {id}: {store} in {epoch}: {why}"),
            SnapshotViolation::ConflictingHoldersInCut {
                id,
                chunk,
                name,
                holders,
            } => write!(
                f,
                "snapshot {id}: {chunk} recorded {name} held by {holders}"
            ),
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

impl CutTracker {
    /// A regular message leaves `from` for `to`: its number on the channel.
    pub fn send(&mut self, from: DeviceId, to: DeviceId) -> u64 {
        if let Some(h) = self.held.get_mut(&(from, to)) {
            *h = h.saturating_sub(1);
        }
        let s = self.sent.entry((from, to)).or_default();
        *s += 1;
        *s
    }

    /// `from` output a regular message for `to`, which leaves (is [`send`](Self::send))
    /// now or once what it may depend on is durable, before any message output after
    /// it. A record in between counts it as sent: the state recorded is past it.
    pub fn produced(&mut self, from: DeviceId, to: DeviceId) {
        *self.held.entry((from, to)).or_default() += 1;
    }

    /// Message `seq` of `from → to` is delivered to `to` (boot `boot`), which processes
    /// it now: log it for the snapshots `to` is recording.
    pub fn delivering(&mut self, from: DeviceId, to: DeviceId, boot: u64, seq: u64, msg: &Msg) {
        let Some(inner) = carried(msg) else {
            return;
        };
        for ((_, d), log) in self.logs.iter_mut() {
            if *d == to && log.boot == boot {
                log.from.entry(from).or_default().push((seq, inner.clone()));
            }
        }
    }

    /// Message `seq` of `from → to` was processed. With an asynchronous disk, `group` is
    /// the newest write group of `to` when it was: its effects are durable once that group
    /// is ([`synced`](Self::synced)), and lost with it ([`lost`](Self::lost)).
    pub fn processed(&mut self, from: DeviceId, to: DeviceId, seq: u64, group: Option<u64>) {
        let p = self.processed.entry((from, to)).or_default();
        *p = (*p).max(seq);
        match group {
            Some(g) => self.unsynced.entry(to).or_default().push((from, seq, g)),
            None => {
                let p = self.durable.entry((from, to)).or_default();
                *p = (*p).max(seq);
            }
        }
    }

    /// Every write group of `d` up to `group` is durable.
    pub fn synced(&mut self, d: DeviceId, group: u64) {
        let Some(list) = self.unsynced.get_mut(&d) else {
            return;
        };
        for (from, seq, _) in list.iter().filter(|(_, _, g)| *g <= group) {
            let p = self.durable.entry((*from, d)).or_default();
            *p = (*p).max(*seq);
        }
        list.retain(|(_, _, g)| *g > group);
    }

    /// `d` crashed and only its write groups up to `kept` reached the disk: the state it
    /// restarts from reflects no message it processed after them, so as far as its cut
    /// can go those were never processed (their effects that had left wait for nothing
    /// the crash lost).
    pub fn lost(&mut self, d: DeviceId, kept: u64) {
        self.synced(d, kept);
        self.unsynced.remove(&d);
        for ((from, to), n) in self.processed.iter_mut() {
            if *to == d {
                *n = self.durable.get(&(*from, d)).copied().unwrap_or(0);
            }
        }
    }

    /// A snapshot started at its initiator.
    pub fn started(&mut self, id: SnapshotId, calm: bool) {
        self.stats.started += 1;
        self.started.insert(id, Started { calm, result: None });
    }

    /// `d` (boot `boot`) recorded `id` at output `tick`, at real time `now`. `delivering`
    /// is the message being processed, if any: (sender, number, whether any of its
    /// effects already left before the record).
    #[allow(clippy::too_many_arguments)]
    pub fn recorded(
        &mut self,
        id: SnapshotId,
        d: DeviceId,
        boot: u64,
        tick: u64,
        now: u64,
        peers: &[DeviceId],
        delivering: Option<(DeviceId, u64, bool)>,
    ) {
        let mut processed = BTreeMap::new();
        let mut sent = BTreeMap::new();
        for p in peers.iter().copied().filter(|p| *p != d) {
            let mut n = self.processed.get(&(p, d)).copied().unwrap_or(0);
            if let Some((from, seq, true)) = delivering
                && from == p
            {
                n = n.max(seq);
            }
            processed.insert(p, n);
            let held = self.held.get(&(d, p)).copied().unwrap_or(0);
            sent.insert(p, self.sent.get(&(d, p)).copied().unwrap_or(0) + held);
        }
        let recs = self.records.entry((id, d)).or_default();
        if !recs.is_empty() {
            self.stats.rerecords += 1;
            self.violations
                .push(SnapshotViolation::RecordedTwice { id, device: d });
        }
        recs.push(Record {
            boot,
            tick,
            processed,
            sent,
        });
        self.logs.insert(
            (id, d),
            Log {
                boot,
                since_us: now,
                from: BTreeMap::new(),
            },
        );
    }

    /// `d` (boot `boot`) emitted its part of a snapshot: match its recorded channels with
    /// the messages it received since it recorded.
    pub fn part(&mut self, d: DeviceId, boot: u64, part: SnapshotPart) {
        self.stats.parts += 1;
        let id = part.id;
        let record = self
            .records
            .get(&(id, d))
            .and_then(|r| r.iter().rev().find(|r| r.boot == boot))
            .cloned();
        let log = self.logs.remove(&(id, d)).filter(|l| l.boot == boot);
        let (Some(record), Some(log)) = (record, log) else {
            self.violations.push(SnapshotViolation::Incomplete {
                id,
                why: format!("{d} emitted a part without recording in this boot"),
            });
            return;
        };
        let mut seqs = BTreeMap::new();
        for (from, msgs) in &part.channels {
            self.stats.channel_messages += msgs.len() as u64;
            let got = log.from.get(from).map(Vec::as_slice).unwrap_or(&[]);
            let mut nums = Vec::new();
            for (i, m) in msgs.iter().enumerate() {
                self.stats.channel_checks += 1;
                match got.get(i) {
                    Some((seq, delivered)) if delivered == m => nums.push(*seq),
                    Some((seq, _)) => {
                        self.violations.push(SnapshotViolation::BadChannel {
                            id,
                            from: *from,
                            to: d,
                            why: format!(
                                "message {i} recorded differs from message #{seq} delivered"
                            ),
                        });
                        return;
                    }
                    None => {
                        self.violations.push(SnapshotViolation::BadChannel {
                            id,
                            from: *from,
                            to: d,
                            why: format!(
                                "{} messages recorded but {} delivered after the record",
                                msgs.len(),
                                got.len()
                            ),
                        });
                        return;
                    }
                }
            }
            seqs.insert(*from, nums);
        }
        self.parts
            .entry(id)
            .or_default()
            .insert(d, PartInfo { record, part, seqs });
    }

    /// A crash lost the persist by which `d` (boot `boot`) remembered recording `ids`
    /// before it became durable: nothing that followed those records left the device (its
    /// markers, tagged messages and Done/Continue wait for that persist), so as far as
    /// anyone can tell they never happened, and `d` may record the snapshots once more.
    /// Every persist after that one was lost too: the state `d` restarts from reflects
    /// no message it processed after those records, whatever it processed since.
    pub fn unrecorded(&mut self, d: DeviceId, boot: u64, ids: &[SnapshotId]) {
        for id in ids {
            if let Some(recs) = self.records.get_mut(&(*id, d)) {
                for r in recs.iter().filter(|r| r.boot == boot) {
                    for (p, n) in &r.processed {
                        let seen = self.processed.entry((*p, d)).or_default();
                        *seen = (*seen).min(*n);
                    }
                }
                recs.retain(|r| r.boot != boot);
            }
            if let Some(parts) = self.parts.get_mut(id)
                && parts.get(&d).is_some_and(|p| p.record.boot == boot)
            {
                parts.remove(&d);
            }
            self.logs.remove(&(*id, d));
        }
    }

    /// Device `d` crashed: it records nothing more in that boot.
    pub fn crashed(&mut self, d: DeviceId) {
        self.logs.retain(|(_, x), _| *x != d);
        // What it held never leaves.
        self.held.retain(|(from, _), _| *from != d);
    }

    /// Forget logs of snapshots a device must have given up on by now.
    pub fn prune(&mut self, now: u64, timeout_us: u64) {
        self.logs
            .retain(|_, l| now.saturating_sub(l.since_us) <= timeout_us + 1_000_000);
    }

    /// A snapshot ended at its initiator. A complete one is checked as a cut; returned
    /// for a restore if it passed.
    pub fn ended(
        &mut self,
        id: SnapshotId,
        result: Result<tenure_core::io::SnapshotSummary, String>,
        devices: &[DeviceId],
    ) -> Option<Cut> {
        let entry = self.started.entry(id).or_insert(Started {
            calm: false,
            result: None,
        });
        match result {
            Err(why) => {
                self.stats.failed += 1;
                entry.result = Some(Err(why));
                self.parts.remove(&id);
                None
            }
            Ok(summary) => {
                entry.result = Some(Ok(()));
                self.stats.completed += 1;
                self.stats.terminated += summary.terminated as u64;
                let before = self.violations.len();
                let cut = self.check_cut(id, &summary, devices);
                (self.violations.len() == before).then_some(cut).flatten()
            }
        }
    }

    /// Snapshots started after faults stopped that have not completed (at the end of the
    /// run).
    pub fn calm_unfinished(&self) -> Vec<(SnapshotId, String)> {
        (self.started.iter())
            .filter(|(_, s)| s.calm)
            .filter_map(|(id, s)| match &s.result {
                Some(Ok(())) => None,
                Some(Err(why)) => Some((*id, why.clone())),
                None => Some((*id, "no result".to_string())),
            })
            .collect()
    }

    /// Whether `id` was started after faults stopped.
    pub fn is_calm(&self, id: SnapshotId) -> bool {
        self.started.get(&id).is_some_and(|s| s.calm)
    }

    /// Whether every snapshot started after faults stopped has a result.
    pub fn calm_all_ended(&self) -> bool {
        (self.started.values())
            .filter(|s| s.calm)
            .all(|s| s.result.is_some())
    }

    fn check_cut(
        &mut self,
        id: SnapshotId,
        summary: &tenure_core::io::SnapshotSummary,
        devices: &[DeviceId],
    ) -> Option<Cut> {
        let parts = self.parts.remove(&id).unwrap_or_default();
        let missing: Vec<String> = (devices.iter())
            .filter(|d| !parts.contains_key(d))
            .map(|d| d.to_string())
            .collect();
        if !missing.is_empty() {
            self.violations.push(SnapshotViolation::Incomplete {
                id,
                why: format!("no part from {}", missing.join(", ")),
            });
            return None;
        }
        let listed: BTreeSet<DeviceId> = summary.devices.iter().copied().collect();
        let all: BTreeSet<DeviceId> = devices.iter().copied().collect();
        if listed != all {
            self.violations.push(SnapshotViolation::Incomplete {
                id,
                why: format!("the result names {listed:?}, the cluster is {all:?}"),
            });
        }
        if summary.terminated
            && let Some((d, p)) = parts
                .iter()
                .find(|(_, p)| p.part.channels.values().any(|c| !c.is_empty()))
        {
            self.violations.push(SnapshotViolation::Incomplete {
                id,
                why: format!(
                    "reported terminated (all Done) but {d} recorded {} message(s) in flight",
                    p.part.channels.values().map(Vec::len).sum::<usize>()
                ),
            });
        }
        // Nothing recorded as received that was not sent.
        for (q, qi) in &parts {
            for (p, pi) in &parts {
                if p == q {
                    continue;
                }
                self.stats.pair_checks += 1;
                let processed = qi.record.processed.get(p).copied().unwrap_or(0);
                let sent = pi.record.sent.get(q).copied().unwrap_or(0);
                if processed > sent {
                    self.violations.push(SnapshotViolation::ReceivedNotSent {
                        id,
                        from: *p,
                        to: *q,
                        processed,
                        sent,
                    });
                    return None;
                }
                // Recorded in flight: sent before P's record, received after Q's.
                for seq in qi.seqs.get(p).into_iter().flatten() {
                    if *seq > sent || *seq <= processed {
                        self.violations.push(SnapshotViolation::BadChannel {
                            id,
                            from: *p,
                            to: *q,
                            why: format!(
                                "message #{seq} recorded in flight, but {p} recorded after sending #{sent} and {q} after processing #{processed}"
                            ),
                        });
                        return None;
                    }
                }
            }
        }
        self.check_states(id, &parts);
        Some(Cut {
            id,
            ticks: (parts.iter()).map(|(d, p)| (*d, p.record.tick)).collect(),
            parts: parts.into_iter().map(|(d, p)| (d, p.part)).collect(),
        })
    }

    /// Invariants in the recorded states: one manager and one layout per (store, epoch);
    /// no conflicting holders in any recorded lock table.
    fn check_states(&mut self, id: SnapshotId, parts: &BTreeMap<DeviceId, PartInfo>) {
        let mut epochs: BTreeMap<(StoreId, Epoch), (ChunkId, Option<DeviceId>)> = BTreeMap::new();
        let mut layouts: BTreeMap<(StoreId, Epoch), (ChunkId, &tenure_core::layout::Metadata)> =
            BTreeMap::new();
        for pi in parts.values() {
            for c in pi.part.state.chunks.values() {
                self.stats.state_checks += 1;
                let (first, mgr) = *epochs
                    .entry((c.store, c.epoch))
                    .or_insert((c.id, c.lease_mgr));
                if mgr != c.lease_mgr {
                    self.violations.push(SnapshotViolation::TwoManagersInCut {
                        id,
                        store: c.store,
                        epoch: c.epoch,
                        why: format!(
                            "{first} names manager {mgr:?}, {} names {:?}",
                            c.id, c.lease_mgr
                        ),
                    });
                }
                if !c.metadata.chunks.is_empty() {
                    let (first, md) = *layouts
                        .entry((c.store, c.epoch))
                        .or_insert((c.id, &c.metadata));
                    if md != &c.metadata {
                        self.violations.push(SnapshotViolation::TwoManagersInCut {
                            id,
                            store: c.store,
                            epoch: c.epoch,
                            why: format!("{first} and {} record different layouts", c.id),
                        });
                    }
                }
                if let Some((name, holders)) = conflicting_holders(&c.data.table) {
                    self.violations
                        .push(SnapshotViolation::ConflictingHoldersInCut {
                            id,
                            chunk: c.id,
                            name,
                            holders,
                        });
                }
            }
        }
    }
}

/// The first two holders in `tables` of different sessions whose locks conflict — on one
/// name, or on names one of which covers the other (seed 004 §9,
/// [`crate::lincheck::locks_conflict`]) — if any: the name(s) and the two holders.
pub fn conflicting_holders(tables: &Tables) -> Option<(String, String)> {
    let locks = tables.locks.locks_under("/").ok()?;
    let held: Vec<(&str, &tenure_core::lockctl::HolderInfo)> = (locks.iter())
        .flat_map(|l| l.holders.iter().map(move |h| (l.name.as_str(), h)))
        .collect();
    let show = |h: &tenure_core::lockctl::HolderInfo| {
        format!("{:?} ({:?}, {:?})", h.session, h.mode, h.token)
    };
    for (i, (a, ha)) in held.iter().enumerate() {
        for (b, hb) in &held[i + 1..] {
            if ha.session != hb.session && crate::lincheck::locks_conflict(a, ha.mode, b, hb.mode) {
                let name = if a == b {
                    a.to_string()
                } else {
                    format!("{a} and {b}")
                };
                return Some((name, format!("{} and {}", show(ha), show(hb))));
            }
        }
    }
    None
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

/// What the cut recorded of `store`'s chunks, and of lock `name` in them (for a
/// violation's message).
fn cut_store(cut: &Cut, store: StoreId, name: Option<&str>) -> String {
    let mut out = Vec::new();
    for p in cut.parts.values() {
        for c in p.state.chunks.values().filter(|c| c.store == store) {
            let holders = name
                .map(|n| {
                    let h = c.data.table.locks.holders(n).unwrap_or_default();
                    let hs: Vec<String> = h
                        .iter()
                        .map(|h| format!("{:?}/{:?}", h.session, h.token))
                        .collect();
                    format!(" holders [{}]", hs.join(", "))
                })
                .unwrap_or_default();
            out.push(format!(
                "{} {} mgr {:?} confirmed {:?} L-list {:?}{holders}",
                c.id,
                c.epoch,
                c.lease_mgr,
                c.data.confirmed,
                c.data.l_list.keys().collect::<Vec<_>>()
            ));
        }
        for (from, msgs) in &p.channels {
            let n = msgs
                .iter()
                .filter(|m| match m {
                    Msg::ToChunk { store: s, .. }
                    | Msg::ToManager { store: s, .. }
                    | Msg::Mgr { store: s, .. } => *s == store,
                    _ => false,
                })
                .count();
            if n > 0 {
                out.push(format!(
                    "{n} message(s) of it in flight {from}->{}",
                    p.device
                ));
            }
        }
    }
    format!("the cut has {}", out.join("; "))
}

impl CutTracker {
    /// Judge the cluster restored from `cut` (see the module documentation).
    pub fn judge_restore(&mut self, cut: &Cut, r: &Restored) {
        let id = cut.id;
        self.stats.restores += 1;
        self.stats.restore_events += r.events;
        self.stats.restore_max_us = self.stats.restore_max_us.max(r.converged_us.unwrap_or(0));
        let fail = |why: String| SnapshotViolation::Restore { id, why };
        let mut found = Vec::new();
        if let Some(v) = r.violations.first() {
            found.push(fail(format!("store checker: {v}")));
        }
        if let Some(why) = &r.unmanaged {
            found.push(fail(format!("no working manager: {why}")));
        }
        // A device with no part (retired, down, or not a member the initiator asked): what
        // it did before the first record of the cut came before the cut — nothing after a
        // record can have caused it (simulator seed 1320: a manager received a write,
        // crashed, restarted and was retired; a cut taken then held the write through the
        // chunks it had reached, and its part was rightly missing).
        let first_record = cut.ticks.values().copied().min().unwrap_or(0);
        let before = |d: &DeviceId, tick: u64| match cut.ticks.get(d) {
            Some(t) => tick < *t,
            None => tick < first_record,
        };
        let last = cut.ticks.values().copied().max().unwrap_or(0);
        let f = &self.facts;
        let mut first = BTreeSet::new();
        for (store, mgr, tables) in &r.takeovers {
            // Sessions of the restored cluster expire (it has no clients): the grants are
            // looked for at each store's first takeover only.
            let first_takeover = first.insert(*store);
            // Every write acknowledged at the cut is there.
            for (d, tick, s, key, version) in &f.acked_writes {
                if s != store || !before(d, *tick) {
                    continue;
                }
                self.stats.restore_checks += 1;
                let held = tables.registers.entries.get(key).map(|(v, _)| *v);
                if held.is_none_or(|h| h < *version) {
                    found.push(fail(format!(
                        "{mgr} took over {store} without key {key} at {version:?} acknowledged by {d} before its record (holds {held:?}); {}",
                        cut_store(cut, *store, None)
                    )));
                }
            }
            // Every write there had reached its manager before the manager recorded.
            for (key, (version, value)) in &tables.registers.entries {
                self.stats.restore_checks += 1;
                let reached = (f.received_writes.get(value).into_iter().flatten())
                    .any(|(d, tick)| before(d, *tick));
                if !reached {
                    found.push(fail(format!(
                        "{mgr} took over {store} with key {key} = {value} at {version:?}, a write no device had received before recording"
                    )));
                }
            }
            // Grants acknowledged at the cut are held, unless their session may have
            // released them by then.
            for (d, tick, s, name, session, token) in &f.grants {
                if !first_takeover || s != store || !before(d, *tick) {
                    continue;
                }
                let touched = (f.session_touches.iter())
                    .any(|(t, st, se)| *t < last && st == s && se == session);
                if touched {
                    continue;
                }
                self.stats.restore_checks += 1;
                let held = tables.locks.holders(name).unwrap_or_default();
                if !held
                    .iter()
                    .any(|h| h.session == *session && h.token == *token)
                {
                    found.push(fail(format!(
                        "{mgr} took over {store} without the grant of {name} to {session:?} ({token:?}) acknowledged by {d} before its record; {}",
                        cut_store(cut, *store, Some(name))
                    )));
                }
            }
            // Releases acknowledged at the cut are not undone.
            for (d, tick, s, name, session) in &f.releases {
                if s != store || !before(d, *tick) {
                    continue;
                }
                let Some(token) = (f.grants.iter())
                    .filter(|g| g.1 < *tick && g.2 == *s && g.3 == *name && g.4 == *session)
                    .map(|g| g.5)
                    .next_back()
                else {
                    continue;
                };
                self.stats.restore_checks += 1;
                let held = tables.locks.holders(name).unwrap_or_default();
                if held
                    .iter()
                    .any(|h| h.session == *session && h.token == token)
                {
                    found.push(fail(format!(
                        "{mgr} took over {store} with {name} held by {session:?} ({token:?}), released by {d} before its record"
                    )));
                }
            }
            self.stats.restore_checks += 1;
            if let Some((name, holders)) = conflicting_holders(tables) {
                found.push(fail(format!(
                    "{mgr} took over {store} with {name} held by {holders}"
                )));
            }
        }
        if let Some(v) = found.into_iter().next() {
            self.violations.push(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_core::io::SnapshotSummary;

    const P: DeviceId = DeviceId(1);
    const Q: DeviceId = DeviceId(2);

    fn sid() -> SnapshotId {
        SnapshotId {
            initiator: P,
            serial: 1,
        }
    }

    fn part(d: DeviceId, channels: BTreeMap<DeviceId, Vec<Msg>>) -> SnapshotPart {
        SnapshotPart {
            id: sid(),
            device: d,
            state: DevicePersist::default(),
            channels,
        }
    }

    fn done(t: &mut CutTracker, terminated: bool) -> Option<Cut> {
        t.ended(
            sid(),
            Ok(SnapshotSummary {
                devices: vec![P, Q],
                terminated,
            }),
            &[P, Q],
        )
    }

    fn msg() -> Msg {
        Msg::Election(tenure_core::election::ElectionMsg::Alive {
            term: Default::default(),
        })
    }

    // Seed 002 §14.1: a message P sent before recording and Q received after its record
    // is in flight, recorded on Q's channel: a consistent cut.
    #[test]
    fn a_message_in_flight_recorded_on_its_channel_is_consistent() {
        let mut t = CutTracker::default();
        let peers = [P, Q];
        let s1 = t.send(P, Q);
        t.recorded(sid(), P, 1, 10, 0, &peers, None);
        t.recorded(sid(), Q, 1, 11, 0, &peers, None);
        t.delivering(P, Q, 1, s1, &msg());
        t.processed(P, Q, s1, None);
        t.part(P, 1, part(P, BTreeMap::new()));
        t.part(Q, 1, part(Q, BTreeMap::from([(P, vec![msg()])])));
        assert!(done(&mut t, false).is_some());
        assert!(t.violations.is_empty(), "{:?}", t.violations);
        assert_eq!(t.stats.pair_checks, 2);
    }

    // A message P sent after recording that Q processed before recording (the planted
    // bug's shape: a tag processed before the state is recorded) is caught.
    #[test]
    fn a_message_received_but_not_sent_in_the_cut_is_caught() {
        let mut t = CutTracker::default();
        let peers = [P, Q];
        t.recorded(sid(), P, 1, 10, 0, &peers, None);
        let s1 = t.send(P, Q);
        t.delivering(P, Q, 1, s1, &msg());
        // Q's record comes after the tagged message's effects left Q.
        t.recorded(sid(), Q, 1, 11, 0, &peers, Some((P, s1, true)));
        t.processed(P, Q, s1, None);
        t.part(P, 1, part(P, BTreeMap::new()));
        t.part(Q, 1, part(Q, BTreeMap::new()));
        assert!(done(&mut t, true).is_none());
        assert!(matches!(
            t.violations[0],
            SnapshotViolation::ReceivedNotSent {
                processed: 1,
                sent: 0,
                ..
            }
        ));
        // Recorded before its effects: consistent.
        let mut t = CutTracker::default();
        t.recorded(sid(), P, 1, 10, 0, &peers, None);
        let s1 = t.send(P, Q);
        t.recorded(sid(), Q, 1, 11, 0, &peers, Some((P, s1, false)));
        t.processed(P, Q, s1, None);
        t.part(P, 1, part(P, BTreeMap::new()));
        t.part(Q, 1, part(Q, BTreeMap::new()));
        assert!(done(&mut t, true).is_some());
    }

    // Asynchronous disks (seed 10341): a message whose effects were only in writes a
    // crash lost is not processed as far as the state the device restarts from goes; one
    // whose write group survived stays processed.
    #[test]
    fn a_crash_forgets_the_messages_whose_writes_it_lost() {
        let peers = [P, Q];
        // P sends #1, records, sends #2; Q processes both (write groups 1 and 2), then
        // crashes with only the groups up to `kept` durable, restarts and records.
        let run = |kept: u64| {
            let mut t = CutTracker::default();
            let s1 = t.send(P, Q);
            t.recorded(sid(), P, 1, 10, 0, &peers, None);
            let s2 = t.send(P, Q);
            t.processed(P, Q, s1, Some(1));
            t.processed(P, Q, s2, Some(2));
            t.synced(Q, 1);
            t.lost(Q, kept);
            t.recorded(sid(), Q, 2, 11, 0, &peers, None);
            t.part(P, 1, part(P, BTreeMap::new()));
            t.part(Q, 2, part(Q, BTreeMap::new()));
            (done(&mut t, true).is_some(), t.violations)
        };
        // #2's write was lost: Q's state does not reflect it, the cut is consistent.
        let (ok, v) = run(1);
        assert!(ok, "{v:?}");
        // It survived (the commit in flight was written whole): caught.
        let (ok, v) = run(2);
        assert!(
            !ok && matches!(v[0], SnapshotViolation::ReceivedNotSent { .. }),
            "{v:?}"
        );
    }

    // A recorded message that was sent after the sender's record, or never delivered,
    // is caught; so is a terminated snapshot with messages in flight.
    #[test]
    fn bad_channel_contents_are_caught() {
        let peers = [P, Q];
        let mut t = CutTracker::default();
        t.recorded(sid(), P, 1, 10, 0, &peers, None);
        t.recorded(sid(), Q, 1, 11, 0, &peers, None);
        let s1 = t.send(P, Q);
        t.delivering(P, Q, 1, s1, &msg());
        t.part(P, 1, part(P, BTreeMap::new()));
        t.part(Q, 1, part(Q, BTreeMap::from([(P, vec![msg()])])));
        assert!(done(&mut t, false).is_none());
        assert!(matches!(
            t.violations[0],
            SnapshotViolation::BadChannel { .. }
        ));
        let mut t = CutTracker::default();
        t.send(P, Q);
        t.recorded(sid(), P, 1, 10, 0, &peers, None);
        t.recorded(sid(), Q, 1, 11, 0, &peers, None);
        t.part(Q, 1, part(Q, BTreeMap::from([(P, vec![msg()])])));
        assert!(matches!(
            t.violations[0],
            SnapshotViolation::BadChannel { .. }
        ));
        let mut t = CutTracker::default();
        let s1 = t.send(P, Q);
        t.recorded(sid(), P, 1, 10, 0, &peers, None);
        t.recorded(sid(), Q, 1, 11, 0, &peers, None);
        t.delivering(P, Q, 1, s1, &msg());
        t.part(P, 1, part(P, BTreeMap::new()));
        t.part(Q, 1, part(Q, BTreeMap::from([(P, vec![msg()])])));
        done(&mut t, true);
        assert!(matches!(
            t.violations[0],
            SnapshotViolation::Incomplete { .. }
        ));
    }

    // A complete snapshot must have a part from every device.
    #[test]
    fn a_missing_part_is_caught() {
        let mut t = CutTracker::default();
        t.recorded(sid(), P, 1, 10, 0, &[P, Q], None);
        t.part(P, 1, part(P, BTreeMap::new()));
        assert!(done(&mut t, true).is_none());
        assert!(matches!(
            t.violations[0],
            SnapshotViolation::Incomplete { .. }
        ));
    }

    // A message a device output before it recorded, but held until the persists it may
    // depend on were durable, counts as sent before the record: its receiver may process
    // it before recording (the cut is consistent), though it left after the record.
    #[test]
    fn a_message_held_across_the_record_counts_as_sent_before_it() {
        let mut t = CutTracker::default();
        t.produced(P, Q);
        t.recorded(sid(), P, 1, 10, 0, &[P, Q], None);
        let s1 = t.send(P, Q);
        t.processed(P, Q, s1, None);
        t.recorded(sid(), Q, 1, 11, 0, &[P, Q], None);
        t.part(P, 1, part(P, BTreeMap::new()));
        t.part(Q, 1, part(Q, BTreeMap::new()));
        assert!(done(&mut t, false).is_some(), "{:?}", t.violations);
        assert!(t.violations.is_empty(), "{:?}", t.violations);
    }

    // The lock invariant in a recorded table judges the cover rule: /a and /a/b held
    // exclusively by two sessions conflict; shared under shared does not.
    #[test]
    fn conflicting_holders_on_covering_names_are_found() {
        use tenure_core::lockctl::{Acquire, LockMode, RequestId, Wait};
        let acquire = |t: &mut Tables, s: u64, name: &str, mode: LockMode| {
            let req = Acquire {
                session: SessionId(s),
                request_id: RequestId(1),
                name: name.into(),
                mode,
                wait: Wait::Try,
                lock_delay: None,
            };
            assert!(t.locks.acquire(&req, tenure_core::Instant(0)).is_ok());
        };
        let mut t = Tables::default();
        t.locks.plant_ignore_cover(true);
        acquire(&mut t, 1, "/a", LockMode::Shared);
        acquire(&mut t, 2, "/a/b", LockMode::Shared);
        acquire(&mut t, 3, "/c/d", LockMode::Exclusive);
        assert_eq!(conflicting_holders(&t), None);
        acquire(&mut t, 4, "/c", LockMode::Shared);
        let (name, _) = conflicting_holders(&t).expect("found");
        assert_eq!(name, "/c and /c/d");
    }

    // A record whose persist a crash lost before it was durable never showed outside the
    // device: recording the snapshot again after the restart is no second record. One
    // kept durably across the restart still is.
    #[test]
    fn a_record_lost_with_its_unsynced_persist_may_be_made_again() {
        let mut t = CutTracker::default();
        t.recorded(sid(), P, 1, 10, 0, &[P, Q], None);
        // After its record, P processes a message Q sent after Q's own record.
        t.recorded(sid(), Q, 1, 11, 0, &[P, Q], None);
        let s1 = t.send(Q, P);
        t.processed(Q, P, s1, None);
        t.crashed(P);
        t.unrecorded(P, 1, &[sid()]);
        // Its restarted state reflects none of that: recording again is consistent.
        t.recorded(sid(), P, 2, 20, 0, &[P, Q], None);
        t.part(P, 2, part(P, BTreeMap::new()));
        t.part(Q, 1, part(Q, BTreeMap::new()));
        assert!(done(&mut t, false).is_some(), "{:?}", t.violations);
        assert!(t.violations.is_empty(), "{:?}", t.violations);
        t.crashed(P);
        t.recorded(sid(), P, 3, 30, 0, &[P, Q], None);
        assert!(matches!(
            t.violations[..],
            [SnapshotViolation::RecordedTwice { .. }]
        ));
    }
}
