//! Invariant checkers, run on every simulator event (DESIGN §9 items 1, 2 and 4 for the
//! store layer). Each takes plain facts, so each can be shown to fire on a hand-built bad
//! history (see the tests at the bottom).

use serde::Serialize;
use std::collections::BTreeMap;
use tenure_core::data::{StoreData, Version};
use tenure_core::io::{ChunkPersist, DevicePersist};
use tenure_core::layout::{ChunkState, ChunkView};
use tenure_core::lockctl::{FencingToken, SessionId};
use tenure_core::{ChunkId, DeviceId, Epoch, Instant, StoreId};

/// Whether a violation is of safety (a correctness failure) or of liveness.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ViolationKind {
    /// A safety invariant broke: the run is wrong whatever happens next.
    Correctness,
    /// The system did not converge after faults stopped.
    Liveness,
}

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Violation {
    /// Invariant 1: two managers in one epoch of a store.
    TwoManagers {
        /// Store.
        store: StoreId,
        /// Epoch.
        epoch: Epoch,
        /// First manager.
        first: DeviceId,
        /// Second manager.
        second: DeviceId,
    },
    /// Invariant 1: a store's manager epochs did not strictly increase.
    EpochNotIncreasing {
        /// Store.
        store: StoreId,
        /// Previous epoch.
        previous: Epoch,
        /// New epoch.
        epoch: Epoch,
    },
    /// Invariant 2: a chunk served outside a valid regular lease for its epoch.
    ServedWithoutLease {
        /// Chunk.
        chunk: ChunkId,
        /// Epoch of the operation.
        epoch: Epoch,
        /// What was wrong.
        why: String,
    },
    /// Invariant 4: an acknowledged write is missing from a later epoch's state.
    LostWrite {
        /// Store.
        store: StoreId,
        /// Key.
        key: u64,
        /// Version acknowledged.
        version: Version,
        /// Chunk that lacks it.
        chunk: ChunkId,
        /// The epoch that chunk committed.
        epoch: Epoch,
        /// What the chunk holds for the key.
        held: Option<Version>,
    },
    /// Durable before acknowledged (DESIGN §10): at a crash, a device's in-memory
    /// persistent records differ from what its `Persist` outputs made durable.
    PersistDivergence {
        /// Device.
        device: DeviceId,
        /// First differing chunk, if the chunks differ.
        chunk: Option<ChunkId>,
        /// What differs (chunk records, a chunk's object blocks, lookup entries, the
        /// serial counter).
        what: String,
    },
    /// Durable before acknowledged (DESIGN §10, seed 004 §2): a chunk's ACCEPTED left its
    /// device before the changes it answers for were on the chunk's durable record.
    AckedBeforeDurable {
        /// Device.
        device: DeviceId,
        /// The chunk.
        chunk: ChunkId,
        /// The change ACCEPTED answered for.
        upto: Version,
    },
    /// Invariant 3: two sessions believed they held conflicting locks at one instant.
    MutualExclusion {
        /// The lock granted second.
        name: String,
        /// The lock the earlier holder held: `name`, or a name that covers it or that it
        /// covers (an ancestor or a descendant).
        first_name: String,
        /// The earlier holder.
        first: SessionId,
        /// Its token.
        first_token: FencingToken,
        /// Since when it held (µs).
        first_since_us: u64,
        /// The later holder.
        second: SessionId,
        /// Its token.
        second_token: FencingToken,
        /// When the later grant reached its client (µs).
        at_us: u64,
    },
    /// Invariant 3: fencing tokens of a lock did not strictly increase.
    FencingOrder {
        /// The lock.
        name: String,
        /// Token of the grant answered first.
        earlier: FencingToken,
        /// Token of the later grant.
        later: FencingToken,
        /// When (µs).
        at_us: u64,
    },
    /// Invariant 4: a new manager lacks a grant a client still believes it holds.
    LostGrant {
        /// Store.
        store: StoreId,
        /// The new manager.
        manager: DeviceId,
        /// The lock.
        name: String,
        /// Holder.
        session: SessionId,
        /// Token.
        token: FencingToken,
        /// When (µs).
        at_us: u64,
    },
    /// Invariant 4: a new manager still holds a grant whose release was acknowledged.
    LostRelease {
        /// Store.
        store: StoreId,
        /// The new manager.
        manager: DeviceId,
        /// The lock.
        name: String,
        /// Holder.
        session: SessionId,
        /// Token.
        token: FencingToken,
        /// When (µs).
        at_us: u64,
    },
    /// Invariant 5: the lock history is not linearizable.
    NotLinearizable {
        /// The lock whose history failed.
        name: String,
        /// The counterexample.
        description: String,
    },
    /// Liveness: a lock client got no answer from a manager after faults stopped.
    ClientStuck {
        /// The client.
        client: u64,
        /// What it was waiting for.
        why: String,
    },
    /// Liveness: a store had no working manager at the end of the liveness phase.
    NoManager {
        /// Store.
        store: StoreId,
        /// Why it does not count as managed.
        why: String,
    },
    /// Invariant 7: a lookup invariant or bound (seed 003).
    Lookup(crate::lookup::checks::LookupViolation),
    /// Invariant 6 and DESIGN §5: an object invariant (seed 001).
    Objects(crate::objects::ObjectViolation),
    /// DESIGN §6: an election invariant (one coordinator per term, fencing by term,
    /// convergence after faults stop).
    Election(crate::election::ElectionViolation),
    /// Invariant 8: a snapshot is not a consistent cut, or its restore fails.
    Snapshot(crate::snapshot::SnapshotViolation),
    /// DESIGN §6: a membership invariant (records move forward, retired devices stay
    /// out, changes complete after faults stop).
    Membership(crate::membership::MembershipViolation),
}

impl Violation {
    /// Safety or liveness.
    pub fn kind(&self) -> ViolationKind {
        match self {
            Violation::NoManager { .. } | Violation::ClientStuck { .. } => ViolationKind::Liveness,
            Violation::Lookup(v) => v.kind(),
            Violation::Objects(v) if v.is_liveness() => ViolationKind::Liveness,
            Violation::Election(v) if v.is_liveness() => ViolationKind::Liveness,
            Violation::Snapshot(v) if v.is_liveness() => ViolationKind::Liveness,
            Violation::Membership(v) if v.is_liveness() => ViolationKind::Liveness,
            _ => ViolationKind::Correctness,
        }
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Violation::TwoManagers {
                store,
                epoch,
                first,
                second,
            } => write!(
                f,
                "two managers of {store} in {epoch}: {first} and {second}"
            ),
            Violation::EpochNotIncreasing {
                store,
                previous,
                epoch,
            } => write!(f, "{store}: manager epoch {epoch} after {previous}"),
            Violation::ServedWithoutLease { chunk, epoch, why } => {
                write!(
                    f,
                    "{chunk} served an operation of {epoch} without a lease: {why}"
                )
            }
            Violation::LostWrite {
                store,
                key,
                version,
                chunk,
                epoch,
                held,
            } => write!(
                f,
                "{store} key {key}: write acked at {version:?} missing from {chunk} in {epoch} (holds {held:?})"
            ),
            Violation::PersistDivergence {
                device,
                chunk,
                what,
            } => {
                write!(
                    f,
                    "{device}: volatile persistent state not on disk (chunk {chunk:?}): {what}"
                )
            }
            Violation::AckedBeforeDurable {
                device,
                chunk,
                upto,
            } => write!(
                f,
                "{device}: {chunk} answered ACCEPTED up to {upto:?} before its ACCEPT was durable"
            ),
            Violation::MutualExclusion {
                name,
                first_name,
                first,
                first_token,
                first_since_us,
                second,
                second_token,
                at_us,
            } if first_name == name => write!(
                f,
                "{name}: {second:?} ({second_token:?}) granted at {at_us}us while {first:?} ({first_token:?}) held it since {first_since_us}us"
            ),
            Violation::MutualExclusion {
                name,
                first_name,
                first,
                first_token,
                first_since_us,
                second,
                second_token,
                at_us,
            } => write!(
                f,
                "{name}: {second:?} ({second_token:?}) granted at {at_us}us while {first:?} ({first_token:?}) held {first_name}, which overlaps it, since {first_since_us}us"
            ),
            Violation::FencingOrder {
                name,
                earlier,
                later,
                at_us,
            } => write!(
                f,
                "{name}: token {later:?} at {at_us}us is not above {earlier:?} of an earlier grant"
            ),
            Violation::LostGrant {
                store,
                manager,
                name,
                session,
                token,
                at_us,
            } => write!(
                f,
                "{store}: new manager {manager} at {at_us}us lost the grant of {name} to {session:?} ({token:?})"
            ),
            Violation::LostRelease {
                store,
                manager,
                name,
                session,
                token,
                at_us,
            } => write!(
                f,
                "{store}: new manager {manager} at {at_us}us still has {name} held by {session:?} ({token:?}) after its release was acknowledged"
            ),
            Violation::NotLinearizable { name, description } => {
                write!(
                    f,
                    "lock history of {name} is not linearizable: {description}"
                )
            }
            Violation::ClientStuck { client, why } => {
                write!(
                    f,
                    "lock client {client} got no answer after faults stopped: {why}"
                )
            }
            Violation::Lookup(v) => v.fmt(f),
            Violation::Objects(v) => v.fmt(f),
            Violation::Election(v) => v.fmt(f),
            Violation::Snapshot(v) => v.fmt(f),
            Violation::Membership(v) => v.fmt(f),
            Violation::NoManager { store, why } => {
                write!(
                    f,
                    "{store} has no working manager after the liveness bound: {why}"
                )
            }
        }
    }
}

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
    /// ACCEPTEDs checked, as they left, against their chunk's durable record.
    pub durable_checks: u64,
}

impl CheckCounts {
    /// Add another run's counts.
    pub fn add(&mut self, o: &CheckCounts) {
        self.manager_checks += o.manager_checks;
        self.served_checks += o.served_checks;
        self.write_checks += o.write_checks;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tenure_core::data::StoreOp;

    const S: StoreId = StoreId(0);
    fn chunk() -> ChunkId {
        ChunkId {
            device: DeviceId(1),
            serial: 0,
        }
    }

    // DESIGN §9.1: two devices becoming manager of the same epoch is caught.
    #[test]
    fn two_managers_in_one_epoch_fire() {
        let mut c = Checker::default();
        c.became_manager(DeviceId(1), S, Epoch(2));
        c.became_manager(DeviceId(2), S, Epoch(3));
        assert!(c.violations.is_empty());
        c.became_manager(DeviceId(3), S, Epoch(3));
        assert!(matches!(c.violations[0], Violation::TwoManagers { .. }));
    }

    // DESIGN §9.1: epochs must strictly increase.
    #[test]
    fn epoch_regression_fires() {
        let mut c = Checker::default();
        c.became_manager(DeviceId(1), S, Epoch(4));
        c.became_manager(DeviceId(1), S, Epoch(3));
        assert!(matches!(
            c.violations[0],
            Violation::EpochNotIncreasing { .. }
        ));
    }

    fn view(state: ChunkState, epoch: u64, expiry: u64) -> ChunkView {
        ChunkView {
            id: chunk(),
            store: S,
            state,
            epoch: Epoch(epoch),
            lease_expiry: Some(Instant(expiry)),
            lease_mgr: Some(DeviceId(2)),
        }
    }

    // DESIGN §9.2: serving outside the regular lease, in another epoch, or past
    // expiry − δ_c is caught; serving inside it is not.
    #[test]
    fn serving_without_lease_fires() {
        let d = Duration::from_millis(50);
        let mut c = Checker::default();
        c.chunk_served(
            chunk(),
            Epoch(2),
            Some(view(ChunkState::RegularLease, 2, 1_000_000)),
            Instant(900_000),
            d,
        );
        assert!(c.violations.is_empty());
        c.chunk_served(
            chunk(),
            Epoch(2),
            Some(view(ChunkState::NoLease, 2, 1_000_000)),
            Instant(900_000),
            d,
        );
        c.chunk_served(
            chunk(),
            Epoch(3),
            Some(view(ChunkState::RegularLease, 2, 1_000_000)),
            Instant(900_000),
            d,
        );
        c.chunk_served(
            chunk(),
            Epoch(2),
            Some(view(ChunkState::RegularLease, 2, 1_000_000)),
            Instant(960_000),
            d,
        );
        assert_eq!(c.violations.len(), 3);
    }

    fn record(epoch: u64, data: StoreData) -> ChunkPersist {
        ChunkPersist {
            id: chunk(),
            store: S,
            epoch: Epoch(epoch),
            metadata: Default::default(),
            lease_mgr: None,
            prepared: None,
            known: None,
            data,
        }
    }

    // DESIGN §9.4 (seed 004 §4.1, maximum forward progress): a write acked by the manager
    // of epoch e must be in every chunk that commits an epoch > e — whether the commit
    // comes after the ack, or came before it (then the acking manager was stale).
    #[test]
    fn lost_acknowledged_write_fires() {
        let v = Version {
            epoch: Epoch(2),
            seq: 1,
        };
        let mut holding = StoreData::default();
        holding.table.registers.apply(7, v, 70);
        let empty = StoreData::default();
        let mut c = Checker::default();
        c.chunk_committed(chunk(), S, Epoch(2), &empty);
        c.write_acked(S, 7, v, std::iter::once(&record(2, empty.clone())));
        assert!(c.violations.is_empty(), "same epoch: not yet required");
        c.chunk_committed(chunk(), S, Epoch(3), &holding);
        assert!(c.violations.is_empty());
        c.chunk_committed(chunk(), S, Epoch(3), &empty);
        assert_eq!(c.violations.len(), 1);
        // A stale manager of epoch 2 acks a write after a chunk committed epoch 4.
        let mut c = Checker::default();
        c.chunk_committed(chunk(), S, Epoch(4), &empty);
        c.write_acked(S, 7, v, std::iter::once(&record(4, empty.clone())));
        assert!(matches!(c.violations[0], Violation::LostWrite { .. }));
        // A newer version of the key satisfies an older ack.
        let mut newer = StoreData::default();
        newer.table.registers.apply(
            7,
            Version {
                epoch: Epoch(3),
                seq: 9,
            },
            1,
        );
        let mut c = Checker::default();
        c.write_acked(S, 7, v, std::iter::empty());
        c.chunk_committed(chunk(), S, Epoch(4), &newer);
        assert!(c.violations.is_empty());
    }

    // DESIGN §10 durable before acknowledged: volatile "persistent" state that never
    // reached the disk is caught at a crash.
    #[test]
    fn persist_divergence_fires() {
        let mut c = Checker::default();
        let mut disk = DevicePersist::default();
        disk.apply(&tenure_core::PersistOp::PutChunk(Box::new(record(
            2,
            StoreData::default(),
        ))));
        let mut memory = disk.clone();
        c.persisted(DeviceId(1), &memory, &disk);
        assert!(c.violations.is_empty());
        // A CONFIRM not yet on disk is allowed: the change is durable in the L-list.
        let v = |seq| Version {
            epoch: Epoch(2),
            seq,
        };
        let accept = |seq| tenure_core::PersistOp::Accept {
            chunk: chunk(),
            ops: vec![(v(seq), StoreOp::Register { key: 1, value: seq })],
            confirm: Version::default(),
            after: Default::default(),
        };
        disk.apply(&accept(1));
        memory.apply(&accept(1));
        memory
            .chunks
            .get_mut(&chunk())
            .expect("chunk")
            .data
            .confirm(v(1));
        c.persisted(DeviceId(1), &memory, &disk);
        assert!(c.violations.is_empty(), "{:?}", c.violations);
        // A confirmed change whose ACCEPT never reached the disk is not.
        memory.apply(&accept(2));
        memory
            .chunks
            .get_mut(&chunk())
            .expect("chunk")
            .data
            .confirm(v(2));
        c.persisted(DeviceId(1), &memory, &disk);
        assert_eq!(c.violations.len(), 1);
        c.violations.clear();
        memory = disk.clone();
        memory.chunks.get_mut(&chunk()).expect("chunk").epoch = Epoch(3);
        c.persisted(DeviceId(1), &memory, &disk);
        assert_eq!(
            c.violations,
            vec![Violation::PersistDivergence {
                device: DeviceId(1),
                chunk: Some(chunk()),
                what: "chunk records".into(),
            }]
        );
    }

    // DESIGN §9.1 from manager roles: a second device in the Manager state for an
    // (store, epoch) already managed elsewhere is caught even without an announcement.
    #[test]
    fn two_manager_roles_fire() {
        let mut c = Checker::default();
        c.became_manager(DeviceId(1), S, Epoch(5));
        c.manager_role(DeviceId(1), S, Epoch(5));
        assert!(c.violations.is_empty());
        c.manager_role(DeviceId(2), S, Epoch(5));
        assert!(matches!(c.violations[0], Violation::TwoManagers { .. }));
        assert_eq!(c.violations[0].kind(), ViolationKind::Correctness);
    }
}
