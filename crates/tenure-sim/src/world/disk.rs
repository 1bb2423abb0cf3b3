//! The simulated disks: what a device's persists become when the disk is slow, stalls, or
//! the device crashes in the middle of writing (DESIGN §10: durable before acknowledged).
//!
//! With a synchronous disk ([`DiskKnobs::sync_max_us`] = 0) every `Persist` is durable
//! the moment the core outputs it and every other output leaves at once, as the
//! simulator always modelled it. Otherwise the disk works as the server's driver does
//! (`tenure-server/src/driver.rs`, pipelined group commit, with the same
//! [`tenure_core::pipeline`]):
//!
//! - a device's persists of one input join the *open group*, handed to the disk at the
//!   end of the input; a commit takes every group queued while the previous one ran, in
//!   one write, which becomes durable after a drawn latency — or, in the safety phase and
//!   with probability [`DiskKnobs::stall_p`], after a stall of up to three leases;
//! - a `Send`, `Reply` or watch event waits, in output order, until every persist it may
//!   depend on is durable: per store, the store's persists and the device-wide ones; for
//!   the lookup node, its persists and the device-wide ones; for anything else (elections,
//!   the coordinator, snapshots, policies), every persist. Other stores' outputs leave
//!   meanwhile. Unlike the server's, an output leaves as soon as its own group is durable,
//!   even ahead of an earlier one of its domain that waits for a later group
//!   ([`Release::OwnGroup`]);
//! - a crash loses every group not yet durable (a *lost unsynced write*). The commit in
//!   flight reached the disk whole (its sync had not returned: nothing was acknowledged),
//!   not at all, or — with probability [`DiskKnobs::torn_p`] — *torn*: a prefix of its
//!   record's bytes. The record is encoded with the server's write-ahead log codec
//!   ([`tenure_core::wal_record`]: length, CRC-32, generation, sequence number, postcard
//!   payload) and recovery reads it back; a torn record must fail its length or checksum
//!   test and count as never written.
//!
//! So after a crash the device boots from exactly the groups that became durable (plus,
//! perhaps, the one in flight), its peers and clients having seen nothing that depends on
//! the rest; every checker must still hold. One check is made here, at the moment a
//! message leaves: a chunk's ACCEPTED is sent only once the changes it accepts are on its
//! durable record (seed 004 §2: the LLC keeps the change "durably" before answering).

use super::{Event, World};
use crate::checks::Violation;
use tenure_core::gate::Domain;
use tenure_core::io::{ClientError, DevicePersist, PersistOp, Response};
use tenure_core::msg::{Msg, ToManager};
use tenure_core::pipeline::{Pipeline, Release};
use tenure_core::wal_record;
use tenure_core::{ChunkId, ClientId, DeviceId, StoreId};

/// An output that leaves the device once the persists it may depend on are durable.
#[derive(Clone, Debug)]
// Moved once into the outbox and once out, like the core's `Output`.
#[allow(clippy::large_enum_variant)]
pub(super) enum Held {
    Send {
        to: DeviceId,
        msg: Msg,
    },
    Reply {
        req_id: u64,
        result: Result<Response, ClientError>,
    },
    ObjectEvents {
        client: ClientId,
        watch: u64,
        changes: Vec<tenure_core::objects::Change>,
        values: Vec<Option<tenure_core::objects::Bytes>>,
    },
    WatchEnded {
        client: ClientId,
        watch: u64,
        reason: ClientError,
    },
}

/// One commit: the groups it writes, numbered in commit order.
#[derive(Clone, Debug)]
struct Commit {
    id: u64,
    groups: Vec<(u64, Vec<PersistOp>)>,
}

/// A device's write pipeline (asynchronous disks only): the server driver's group-commit
/// pipeline, in front of a simulated disk that writes one commit at a time.
#[derive(Clone, Debug, Default)]
pub(super) struct Pipe {
    /// The open group, the groups' durability, and the outputs waiting for their group
    /// (each released as soon as its group is durable).
    out: Pipeline<Held>,
    /// Groups handed to the disk, waiting for the commit in flight to end.
    queued: Vec<(u64, Vec<PersistOp>)>,
    /// The commit in flight.
    writing: Option<Commit>,
    /// Commits started (ids of commits, for the event that ends one).
    commits: u64,
}

impl Pipe {
    /// The newest write group handed to the disk (0: none in this boot).
    pub(super) fn groups(&self) -> u64 {
        self.out.sent()
    }

    /// Whether some persist is not durable yet.
    pub(super) fn unsynced(&self) -> bool {
        self.out.has_open() || !self.queued.is_empty() || self.writing.is_some()
    }

    /// The pipeline of a device booting from `disk`.
    pub(super) fn booted(disk: &DevicePersist, commits: u64) -> Pipe {
        Pipe {
            out: Pipeline::booted(
                disk.chunks.values().map(|c| (c.id, c.store)),
                Release::OwnGroup,
            ),
            commits,
            ..Pipe::default()
        }
    }

    /// The groups of `groups` are durable (they are in commit order).
    fn synced(&mut self, groups: &[(u64, Vec<PersistOp>)]) {
        if let Some((g, _)) = groups.last() {
            (self.out.synced(*g)).expect("simulator bug: a group made durable twice");
        }
    }
}

/// The log generation of the simulated disks' records (they never checkpoint).
const GENERATION: u64 = 0;

/// The log record a commit writes, encoded as the server's write-ahead log encodes one
/// ([`wal_record`]), its sequence number the commit's id.
fn encode_record(seq: u64, groups: &[(u64, Vec<PersistOp>)]) -> Vec<u8> {
    let ops: Vec<&PersistOp> = groups.iter().flat_map(|(_, ops)| ops).collect();
    let payload = postcard::to_allocvec(&ops).expect("persists encode");
    let mut out = Vec::with_capacity(wal_record::HEADER + payload.len());
    wal_record::encode(&mut out, GENERATION, seq, &payload);
    out
}

/// Recovery of one record: its persists if it is whole, has the expected sequence number
/// and a correct checksum, and decodes; `None` otherwise (never written, or torn).
pub(super) fn recover_record(bytes: &[u8], seq: u64) -> Option<Vec<PersistOp>> {
    let record = wal_record::decode(bytes, GENERATION, seq).ok()?;
    postcard::from_bytes(record.payload).ok()
}

impl World {
    pub(super) fn asynchronous_disk(&self) -> bool {
        self.disk_knobs.asynchronous()
    }

    /// A `Persist` output of `d`.
    pub(super) fn persist(&mut self, d: DeviceId, op: PersistOp) {
        match &op {
            PersistOp::PutChunk(_) => self.report.faults.records_whole += 1,
            PersistOp::PutChunkHead(_) => self.report.faults.record_heads += 1,
            _ => {}
        }
        let sync = !self.asynchronous_disk();
        let node = self.nodes.get_mut(&d).expect("node");
        // What was written is what a log replays: a delta applied, without the chunk's
        // tables it carries (the durable copy takes those, as the server's storage
        // does); the crash check compares the device's memory with it.
        match &op {
            PersistOp::Accept {
                chunk,
                ops,
                confirm,
                ..
            } => {
                if let Some(rec) = node.written.chunks.get_mut(chunk) {
                    rec.data.accept_batch(ops, *confirm);
                }
            }
            op => node.written.apply(op),
        }
        if sync {
            node.disk.apply(&op);
        } else {
            node.pipe.out.persist(op);
        }
    }

    /// The store a client request is about, if the simulator knows the request.
    fn request_store(&self, req_id: u64) -> Option<StoreId> {
        if let Some(r) = self.lock_reqs.get(&req_id) {
            return Some(r.req.store());
        }
        if let Some(w) = self.writes.get(&req_id) {
            return Some(w.store);
        }
        self.obj_req_store(req_id)
    }

    /// Let an output of `d` leave, now or once the persists it may depend on are durable.
    pub(super) fn let_out(&mut self, d: DeviceId, held: Held) {
        if let Held::Send { to, msg } = &held
            && crate::snapshot::carried(msg).is_some()
        {
            self.cuts.produced(d, *to);
        }
        if !self.asynchronous_disk() {
            return self.emit(d, held);
        }
        let domain = match &held {
            Held::Send { msg, .. } => Domain::of_msg(msg),
            Held::Reply { req_id, .. } => self
                .request_store(*req_id)
                .map_or(Domain::Device, Domain::Store),
            Held::ObjectEvents { client, .. } | Held::WatchEnded { client, .. } => self
                .watch_store(*client)
                .map_or(Domain::Device, Domain::Store),
        };
        let pipe = &mut self.nodes.get_mut(&d).expect("node").pipe;
        let to = match &held {
            Held::Send { to, .. } => Some(*to),
            _ => None,
        };
        if let Some(held) = pipe.out.hold(domain, to, held) {
            self.emit(d, held);
        }
    }

    /// The output leaves the device.
    fn emit(&mut self, d: DeviceId, held: Held) {
        match held {
            Held::Send { to, msg } => {
                self.check_accepted_durable(d, &msg);
                self.obj_on_send(d, &msg);
                self.send(d, to, msg)
            }
            Held::Reply { req_id, result } => {
                self.snap_note_reply(d, req_id, &result);
                self.reply(d, req_id, result)
            }
            Held::ObjectEvents {
                client,
                watch,
                changes,
                values,
            } => self.obj_events(d, client, watch, (changes, values)),
            Held::WatchEnded {
                client,
                watch,
                reason,
            } => self.obj_watch_ended(client, watch, reason),
        }
    }

    /// Durable before acknowledged, at the moment a chunk's ACCEPTED leaves: the change it
    /// answers for is on the chunk's durable record (pending or confirmed).
    fn check_accepted_durable(&mut self, d: DeviceId, msg: &Msg) {
        let mut msg = msg;
        while let Msg::Snapshot(tenure_core::snapshot::SnapMsg::Tagged { msg: inner, .. }) = msg {
            msg = inner;
        }
        let Msg::ToManager {
            chunk,
            msg: ToManager::Accepted { upto, .. },
            ..
        } = msg
        else {
            return;
        };
        let node = &self.nodes[&d];
        let durable = match node.disk.chunks.get(chunk) {
            Some(rec) => {
                let data = &rec.data;
                data.confirmed >= *upto
                    || data.l_list.contains_key(upto)
                    || data.r_list.contains_key(upto)
            }
            // Removed since (durably or not): nothing left to judge.
            None if !node.written.chunks.contains_key(chunk) => true,
            None => false,
        };
        self.checker.counts.durable_checks += 1;
        if !durable {
            self.checker.violations.push(Violation::AckedBeforeDurable {
                device: d,
                chunk: *chunk,
                upto: *upto,
            });
        }
    }

    /// The end of one input's outputs: the open group goes to the disk.
    pub(super) fn disk_turn_end(&mut self, d: DeviceId) {
        if !self.asynchronous_disk() {
            return;
        }
        let pipe = &mut self.nodes.get_mut(&d).expect("node").pipe;
        if let Some(group) = pipe.out.close_group() {
            pipe.queued.push(group);
        }
        self.start_commit(d);
    }

    /// If no commit is in flight, write every queued group in one commit.
    fn start_commit(&mut self, d: DeviceId) {
        let stall = self.faults_on && self.disk_rng.chance(self.disk_knobs.stall_p);
        let pipe = &mut self.nodes.get_mut(&d).expect("node").pipe;
        if pipe.writing.is_some() || pipe.queued.is_empty() {
            return;
        }
        pipe.commits += 1;
        let id = pipe.commits;
        pipe.writing = Some(Commit {
            id,
            groups: std::mem::take(&mut pipe.queued),
        });
        let mut took = 1 + self.disk_rng.below(self.disk_knobs.sync_max_us);
        if stall {
            let extra = 1 + self.disk_rng.below(self.disk_knobs.stall_max_us);
            took += extra;
            self.report.faults.disk_stalls += 1;
            self.trace(|| format!("{d} disk stalls: commit {id} takes {took}us"));
        }
        let boot = self.nodes[&d].boot;
        self.schedule(
            self.now + took,
            Event::DiskSynced {
                device: d,
                boot,
                commit: id,
            },
        );
    }

    /// The commit `commit` of `d` is durable: its groups are on the disk, and what waited
    /// for them leaves.
    pub(super) fn disk_synced(&mut self, d: DeviceId, boot: u64, commit: u64) {
        let node = self.nodes.get_mut(&d).expect("node");
        if node.boot != boot || node.device.is_none() {
            return;
        }
        if node.pipe.writing.as_ref().is_none_or(|c| c.id != commit) {
            return;
        }
        let done = node.pipe.writing.take().expect("checked");
        for (_, ops) in &done.groups {
            for op in ops {
                node.disk.apply(op);
            }
        }
        node.pipe.synced(&done.groups);
        self.cuts.synced(d, node.pipe.out.durable());
        self.flush_outbox(d);
        self.start_commit(d);
    }

    /// Let out every held output whose group is durable, in output order.
    fn flush_outbox(&mut self, d: DeviceId) {
        loop {
            let pipe = &mut self.nodes.get_mut(&d).expect("node").pipe;
            let Some(held) = pipe.out.next_ready() else {
                return;
            };
            self.emit(d, held);
            if self.nodes[&d].device.is_none() {
                return;
            }
        }
    }

    /// Make everything durable and let it out at once (a retiring device stops only then,
    /// as the server's driver does).
    pub(super) fn disk_drain(&mut self, d: DeviceId) {
        if !self.asynchronous_disk() {
            return;
        }
        self.disk_turn_end(d);
        let node = self.nodes.get_mut(&d).expect("node");
        let groups: Vec<(u64, Vec<PersistOp>)> = (node.pipe.writing.take())
            .map(|c| c.groups)
            .into_iter()
            .flatten()
            .chain(std::mem::take(&mut node.pipe.queued))
            .collect();
        for (_, ops) in &groups {
            for op in ops {
                node.disk.apply(op);
            }
        }
        node.pipe.synced(&groups);
        self.cuts.synced(d, node.pipe.out.durable());
        self.flush_outbox(d);
    }

    /// `d` crashed: what was not durable is lost, the commit in flight reached the disk
    /// whole, torn or not at all, and outputs still waiting never leave.
    pub(super) fn disk_crash(&mut self, d: DeviceId) {
        if !self.asynchronous_disk() {
            return;
        }
        let torn_p = self.disk_knobs.torn_p;
        let node = self.nodes.get_mut(&d).expect("node");
        let pipe = std::mem::take(&mut node.pipe);
        let mut lost = pipe.queued.len() as u64 + u64::from(pipe.out.has_open());
        let mut torn = false;
        let mut survived = false;
        let mut kept = pipe.out.durable();
        if let Some(commit) = pipe.writing {
            let fate = self.disk_rng.next_u64();
            let u = (fate >> 11) as f64 / (1u64 << 53) as f64;
            if u < torn_p {
                // A prefix of the record reached the disk: recovery must refuse it.
                let bytes = encode_record(commit.id, &commit.groups);
                let cut = self.disk_rng.below(bytes.len() as u64) as usize;
                assert!(
                    recover_record(&bytes[..cut], commit.id).is_none(),
                    "simulator bug: recovery accepted a torn record of {d}"
                );
                assert!(
                    recover_record(&bytes, commit.id).is_some(),
                    "simulator bug: recovery refused a whole record of {d}"
                );
                torn = true;
                lost += commit.groups.len() as u64;
            } else if u < torn_p + (1.0 - torn_p) / 2.0 {
                // Written whole, though its sync never returned: it survives, and nothing
                // was acknowledged on it.
                let node = self.nodes.get_mut(&d).expect("node");
                for (_, ops) in &commit.groups {
                    for op in ops {
                        node.disk.apply(op);
                    }
                }
                kept = commit.groups.last().map_or(kept, |(g, _)| *g);
                survived = true;
            } else {
                lost += commit.groups.len() as u64;
            }
        }
        let node = self.nodes.get_mut(&d).expect("node");
        let before = std::mem::replace(&mut node.written, node.disk.clone());
        // Snapshots it recorded only in memory: nothing of those records left the device.
        let unrecorded: Vec<tenure_core::snapshot::SnapshotId> = (before.snapshots.iter())
            .filter(|id| !node.disk.snapshots.contains(id))
            .copied()
            .collect();
        let boot = node.boot;
        node.pipe = Pipe::booted(&node.disk, pipe.commits);
        // Chunks whose newest epoch did not survive are back where their disk is.
        let reverted: Vec<(ChunkId, Option<tenure_core::Epoch>)> = (before.chunks.iter())
            .filter_map(|(id, rec)| {
                let kept = node.disk.chunks.get(id).map(|r| r.epoch);
                (kept != Some(rec.epoch)).then_some((*id, kept))
            })
            .collect();
        for (chunk, epoch) in reverted {
            self.checker.chunk_reverted(chunk, epoch);
        }
        self.cuts.lost(d, kept);
        if !unrecorded.is_empty() {
            self.cuts.unrecorded(d, boot, &unrecorded);
        }
        let f = &mut self.report.faults;
        f.unsynced_lost += lost;
        f.torn_records += u64::from(torn);
        f.unsynced_survived += u64::from(survived);
        if lost > 0 || torn || survived {
            self.trace(|| {
                format!(
                    "{d} disk at the crash: {lost} unsynced groups lost{}{}",
                    if torn { ", the last record torn" } else { "" },
                    if survived {
                        ", the commit in flight written whole"
                    } else {
                        ""
                    }
                )
            });
        }
    }

    /// The nemesis' crash target: with the seed's probability, a running device with
    /// writes not yet synced, when there is one.
    pub(super) fn aim_at_unsynced(&mut self, d: DeviceId) -> DeviceId {
        if !self.asynchronous_disk() || !self.disk_rng.chance(self.disk_knobs.aim_unsynced_p) {
            return d;
        }
        let candidates: Vec<DeviceId> = (self.nodes.iter())
            .filter(|(id, n)| self.running(**id) && n.pipe.unsynced())
            .map(|(id, _)| *id)
            .collect();
        if candidates.is_empty() {
            return d;
        }
        candidates[self.disk_rng.below(candidates.len() as u64) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops() -> Vec<(u64, Vec<PersistOp>)> {
        vec![
            (
                3,
                vec![
                    PersistOp::SetNextSerial(7),
                    PersistOp::LookupRemove("k".into()),
                ],
            ),
            (4, vec![PersistOp::SetNextSerial(9)]),
        ]
    }

    // A whole record is read back as written; every prefix of it, and a record whose
    // payload changed, is refused (a torn write is never taken for a durable one).
    #[test]
    fn recovery_refuses_torn_and_corrupt_records() {
        let bytes = encode_record(5, &ops());
        let back = recover_record(&bytes, 5).expect("whole record");
        assert_eq!(
            back,
            ops().into_iter().flat_map(|(_, o)| o).collect::<Vec<_>>()
        );
        for cut in 0..bytes.len() {
            assert_eq!(
                recover_record(&bytes[..cut], 5),
                None,
                "prefix of {cut} bytes"
            );
        }
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(recover_record(&flipped, 5), None);
        assert_eq!(
            recover_record(&bytes, 6),
            None,
            "a record of another commit"
        );
    }
}
