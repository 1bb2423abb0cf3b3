//! Invariant checkers, run on every simulator event (DESIGN §9 items 1, 2 and 4 for the
//! store layer). Each takes plain facts, so each can be shown to fire on a hand-built bad
//! history (the `tests` module). The violations of every checker of the simulator are in
//! `violation`.

#[cfg(test)]
mod tests;
mod violation;

pub use violation::{Violation, ViolationKind};

use serde::Serialize;
use std::collections::BTreeMap;
use tenure_core::data::StoreData;
use tenure_core::ids::Version;
use tenure_core::io::{ChunkPersist, DevicePersist};
use tenure_core::layout::{ChunkState, ChunkView};
use tenure_core::{ChunkId, DeviceId, Epoch, Instant, StoreId};

/// The checkers' memory of a run.
#[derive(Clone, Debug, Default)]
pub struct Checker {
    /// (store, epoch) → the device that managed it.
    managers: BTreeMap<(StoreId, Epoch), DeviceId>,
    /// Highest epoch a `BecameManager` announced per store.
    last_epoch: BTreeMap<StoreId, Epoch>,
    /// Highest acknowledged version per (store, key).
    acked: BTreeMap<StoreId, BTreeMap<u64, Version>>,
    /// The epoch each chunk last reached through a commit.
    committed: BTreeMap<ChunkId, Epoch>,
    /// Per store, the newest stamped table a chunk committed and the first chunk that
    /// did: every other chunk committing the same stamp must hold the same table.
    stamped: BTreeMap<StoreId, (ChunkId, StoreData)>,
    /// How many times each checker compared something (proof the checks are not
    /// vacuous).
    pub counts: CheckCounts,
    /// Violations found so far.
    pub violations: Vec<Violation>,
}

/// How often the checkers looked (a sweep that never compares is no evidence).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CheckCounts {
    /// Manager announcements and manager roles checked (invariant 1).
    pub manager_checks: u64,
    /// Served operations checked against the chunk's lease (invariant 2).
    pub served_checks: u64,
    /// Acknowledged writes looked up in a later epoch's chunk (invariant 4).
    pub write_checks: u64,
    /// Committed tables compared with another chunk's of the same stamp.
    pub stamp_checks: u64,
    /// ACCEPTEDs checked, as they left, against their chunk's durable record.
    pub durable_checks: u64,
}

impl CheckCounts {
    /// Add another run's counts.
    pub fn add(&mut self, o: &CheckCounts) {
        self.manager_checks += o.manager_checks;
        self.served_checks += o.served_checks;
        self.write_checks += o.write_checks;
        self.stamp_checks += o.stamp_checks;
        self.durable_checks += o.durable_checks;
    }
}

impl Checker {
    /// Invariant 1, from a `BecameManager` observation: first manager of (store, epoch)
    /// wins, any other is a violation; and epochs announced per store strictly increase.
    pub fn became_manager(&mut self, device: DeviceId, store: StoreId, epoch: Epoch) {
        self.manager_role(device, store, epoch);
        let prev = self.last_epoch.entry(store).or_default();
        if epoch <= *prev {
            self.violations.push(Violation::EpochNotIncreasing {
                store,
                previous: *prev,
                epoch,
            });
        }
        *prev = (*prev).max(epoch);
    }

    /// A later epoch than `epoch` has had a manager of `store`: a change of `epoch` can
    /// no longer commit (the later epoch's regeneration moved a quorum of its chunks on).
    pub fn superseded(&self, store: StoreId, epoch: Epoch) -> bool {
        self.last_epoch.get(&store).is_some_and(|e| *e > epoch)
    }

    /// Invariant 1, from a manager view in the `Manager` state after an event.
    pub fn manager_role(&mut self, device: DeviceId, store: StoreId, epoch: Epoch) {
        self.counts.manager_checks += 1;
        let first = *self.managers.entry((store, epoch)).or_insert(device);
        if first != device {
            let v = Violation::TwoManagers {
                store,
                epoch,
                first,
                second: device,
            };
            if !self.violations.contains(&v) {
                self.violations.push(v);
            }
        }
    }

    /// Invariant 2, from a `ChunkServed` observation: the chunk's own view right after
    /// it served, on its own clock. Serving needs the regular-lease state, the
    /// operation's epoch equal to the chunk's, and `local_now < expiry − δ_c`.
    pub fn chunk_served(
        &mut self,
        chunk: ChunkId,
        epoch: Epoch,
        view: Option<ChunkView>,
        local_now: Instant,
        clock_drift: std::time::Duration,
    ) {
        self.counts.served_checks += 1;
        let why = match view {
            None => Some("chunk does not exist".to_string()),
            Some(v) if v.state != ChunkState::RegularLease => Some(format!("state {:?}", v.state)),
            Some(v) if v.epoch != epoch => {
                Some(format!("chunk epoch {} op epoch {epoch}", v.epoch))
            }
            Some(v) => match v.lease_expiry {
                Some(e) if local_now < e.saturating_sub(clock_drift) => None,
                e => Some(format!("lease expiry {e:?} at local time {local_now:?}")),
            },
        };
        if let Some(why) = why {
            self.violations
                .push(Violation::ServedWithoutLease { chunk, epoch, why });
        }
    }

    /// Invariant 4: a write was acknowledged by the manager of `version.epoch`. Remember
    /// it, and check every chunk that already committed a later epoch: it must hold it
    /// (else the acknowledging manager was stale). `chunks` are the persisted records of
    /// every device, up or down.
    pub fn write_acked<'a>(
        &mut self,
        store: StoreId,
        key: u64,
        version: Version,
        chunks: impl Iterator<Item = &'a ChunkPersist>,
    ) {
        let e = self.acked.entry(store).or_default().entry(key).or_default();
        *e = (*e).max(version);
        for rec in chunks {
            if rec.store != store {
                continue;
            }
            if let Some(epoch) = self.committed.get(&rec.id).copied()
                && epoch > version.epoch
            {
                self.check_holds(store, key, version, rec.id, epoch, &rec.data);
            }
        }
    }

    /// Invariant 4: a chunk committed `epoch` and persisted `data`: it must hold every
    /// write acknowledged in an earlier epoch.
    pub fn chunk_committed(
        &mut self,
        chunk: ChunkId,
        store: StoreId,
        epoch: Epoch,
        data: &StoreData,
    ) {
        self.committed.insert(chunk, epoch);
        self.same_stamp_same_table(chunk, store, data);
        let acked: Vec<(u64, Version)> = self
            .acked
            .get(&store)
            .map(|m| m.iter().map(|(k, v)| (*k, *v)).collect())
            .unwrap_or_default();
        for (key, version) in acked {
            if version.epoch < epoch {
                self.check_holds(store, key, version, chunk, epoch, data);
            }
        }
    }

    /// DESIGN "State at scale": a stamp names one table. Every chunk that commits a
    /// transition installs the table its manager merged (whole or as a patch of the
    /// table its summary named), so two chunks committing one stamp hold equal state.
    fn same_stamp_same_table(&mut self, chunk: ChunkId, store: StoreId, data: &StoreData) {
        let Some(stamp) = data.stamp else { return };
        match self.stamped.get(&store) {
            Some((first, d)) if d.stamp == Some(stamp) => {
                self.counts.stamp_checks += 1;
                if d != data {
                    let why = stamp_difference(d, data);
                    self.violations.push(Violation::StampDiverged {
                        store,
                        epoch: stamp.epoch,
                        tx: stamp.tx,
                        first: *first,
                        chunk,
                        why,
                    });
                }
            }
            Some((_, d)) if d.stamp > Some(stamp) => {}
            _ => {
                self.stamped.insert(store, (chunk, data.clone()));
            }
        }
    }

    /// A chunk was garbage-collected: forget it.
    pub fn chunk_collected(&mut self, chunk: ChunkId) {
        self.committed.remove(&chunk);
    }

    /// A crash lost a chunk's newest records before they were durable: it is back at
    /// `epoch` (none: its record never became durable). An epoch it committed only in
    /// memory no longer binds it; what it committed durably before still does.
    pub fn chunk_reverted(&mut self, chunk: ChunkId, epoch: Option<Epoch>) {
        match (epoch, self.committed.get_mut(&chunk)) {
            (Some(e), Some(c)) if e < *c => *c = e,
            (None, Some(_)) => {
                self.committed.remove(&chunk);
            }
            _ => {}
        }
    }

    /// Durable before acknowledged: compare a device's in-memory persistent records with
    /// its disk at a crash. The one thing memory may hold beyond the disk is a CONFIRM a
    /// chunk has not persisted yet (it rides on the next ACCEPT): the disk's copy is
    /// confirmed up to memory's before comparing, so a confirmed change missing from the
    /// disk's L/R-lists still shows as a divergence of the tables.
    pub fn persisted(&mut self, device: DeviceId, memory: &DevicePersist, disk: &DevicePersist) {
        let mut disk = disk.clone();
        for (id, m) in &memory.chunks {
            if let Some(c) = disk.chunks.get_mut(id)
                && c.data.confirmed < m.data.confirmed
            {
                c.data.confirm(m.data.confirmed);
            }
        }
        let disk = &disk;
        if memory != disk {
            let chunk = memory
                .chunks
                .iter()
                .find(|(id, c)| disk.chunks.get(id) != Some(c))
                .map(|(id, _)| *id)
                .or_else(|| {
                    disk.chunks
                        .keys()
                        .find(|id| !memory.chunks.contains_key(id))
                        .copied()
                });
            self.violations.push(Violation::PersistDivergence {
                device,
                chunk,
                what: persist_difference(memory, disk),
            });
        }
    }

    fn check_holds(
        &mut self,
        store: StoreId,
        key: u64,
        version: Version,
        chunk: ChunkId,
        epoch: Epoch,
        data: &StoreData,
    ) {
        self.counts.write_checks += 1;
        let held = data.table.registers.entries.get(&key).map(|(v, _)| *v);
        if held.is_none_or(|h| h < version) {
            self.violations.push(Violation::LostWrite {
                store,
                key,
                version,
                chunk,
                epoch,
                held,
            });
        }
    }
}

/// What differs between a device's in-memory persistent records and its disk.
/// The first way two committed tables of one stamp differ.
fn stamp_difference(a: &StoreData, b: &StoreData) -> String {
    if a.confirmed != b.confirmed {
        return format!("confirmed {:?} and {:?}", a.confirmed, b.confirmed);
    }
    if a.l_list != b.l_list || a.r_list != b.r_list {
        return "pending lists differ".into();
    }
    let (x, y) = (&a.table, &b.table);
    let parts = [
        ("registers", x.registers != y.registers),
        ("sessions", x.sessions != y.sessions),
        ("locks", x.locks != y.locks),
        ("objects", x.objects != y.objects),
        ("clocks", x.clock != y.clock),
    ];
    match parts.iter().find(|(_, differ)| *differ) {
        Some((what, _)) => format!("{what} differ"),
        None => "tables differ".into(),
    }
}

fn persist_difference(memory: &DevicePersist, disk: &DevicePersist) -> String {
    if memory.chunks != disk.chunks {
        return "chunk records".into();
    }
    if memory.blocks != disk.blocks {
        let chunks: std::collections::BTreeSet<&ChunkId> =
            memory.blocks.keys().chain(disk.blocks.keys()).collect();
        for c in chunks {
            let (m, d) = (memory.blocks.get(c), disk.blocks.get(c));
            if m != d {
                let count = |b: Option<&BTreeMap<_, _>>| b.map(|b| b.len());
                return format!(
                    "object blocks of {c}: {:?} in memory, {:?} on disk",
                    count(m),
                    count(d)
                );
            }
        }
    }
    if memory.lookup != disk.lookup {
        return "lookup entries".into();
    }
    format!(
        "serial counter {} in memory, {} on disk",
        memory.next_serial, disk.next_serial
    )
}
