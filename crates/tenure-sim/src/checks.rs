//! Invariant checkers, run on every simulator event (DESIGN §9 items 1, 2 and 4 for the
//! store layer). Each takes plain facts, so each can be shown to fire on a hand-built bad
//! history (see the tests at the bottom).

use serde::Serialize;
use std::collections::BTreeMap;
use tenure_core::data::{StoreData, Version};
use tenure_core::layout::{ChunkState, ChunkView};
use tenure_core::{ChunkId, DeviceId, Epoch, Instant, StoreId};

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
        /// The chunk's epoch.
        epoch: Epoch,
    },
    /// Liveness: a store had no manager at the end of the liveness phase.
    NoManager {
        /// Store.
        store: StoreId,
    },
}

/// The checkers' memory of a run.
#[derive(Clone, Debug, Default)]
pub struct Checker {
    managers: BTreeMap<(StoreId, Epoch), DeviceId>,
    last_epoch: BTreeMap<StoreId, Epoch>,
    acked: BTreeMap<StoreId, BTreeMap<u64, Version>>,
    /// Violations found so far.
    pub violations: Vec<Violation>,
}

impl Checker {
    /// Invariant 1, from a `BecameManager` observation.
    pub fn became_manager(&mut self, device: DeviceId, store: StoreId, epoch: Epoch) {
        if let Some(first) = self.managers.insert((store, epoch), device)
            && first != device
        {
            self.violations.push(Violation::TwoManagers {
                store,
                epoch,
                first,
                second: device,
            });
        }
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

    /// Invariant 2, from a `ChunkServed` observation: the chunk's own view at that instant,
    /// on its own clock.
    pub fn chunk_served(
        &mut self,
        chunk: ChunkId,
        epoch: Epoch,
        view: Option<ChunkView>,
        local_now: Instant,
        clock_drift: std::time::Duration,
    ) {
        let why = match view {
            None => Some("chunk does not exist".to_string()),
            Some(v) if v.state != ChunkState::RegularLease => Some(format!("state {:?}", v.state)),
            Some(v) if v.epoch != epoch => Some(format!("chunk epoch {} op epoch {epoch}", v.epoch)),
            Some(v) => match v.lease_expiry {
                Some(e) if local_now < e.saturating_sub(clock_drift) => None,
                e => Some(format!("lease expiry {e:?} at local time {local_now:?}")),
            },
        };
        if let Some(why) = why {
            self.violations.push(Violation::ServedWithoutLease { chunk, epoch, why });
        }
    }

    /// Invariant 4: a write was acknowledged. Every chunk already in a later epoch must
    /// hold it (else the acknowledging manager was stale).
    pub fn write_acked<'a>(
        &mut self,
        store: StoreId,
        key: u64,
        version: Version,
        chunks: impl Iterator<Item = (ChunkId, StoreId, Epoch, &'a StoreData)>,
    ) {
        let e = self.acked.entry(store).or_default().entry(key).or_default();
        *e = (*e).max(version);
        for (chunk, s, epoch, data) in chunks {
            if s == store && epoch > version.epoch {
                self.check_holds(store, key, version, chunk, epoch, data);
            }
        }
    }

    /// Invariant 4: a chunk committed `epoch`: it must hold every write acknowledged in
    /// an earlier epoch.
    pub fn chunk_committed(&mut self, chunk: ChunkId, store: StoreId, epoch: Epoch, data: &StoreData) {
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

    fn check_holds(
        &mut self,
        store: StoreId,
        key: u64,
        version: Version,
        chunk: ChunkId,
        epoch: Epoch,
        data: &StoreData,
    ) {
        let held = data
            .table
            .registers
            .entries
            .get(&key)
            .is_some_and(|(v, _)| *v >= version);
        if !held {
            self.violations.push(Violation::LostWrite {
                store,
                key,
                version,
                chunk,
                epoch,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
        assert!(matches!(c.violations[0], Violation::EpochNotIncreasing { .. }));
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
        c.chunk_served(chunk(), Epoch(2), Some(view(ChunkState::RegularLease, 2, 1_000_000)), Instant(900_000), d);
        assert!(c.violations.is_empty());
        c.chunk_served(chunk(), Epoch(2), Some(view(ChunkState::NoLease, 2, 1_000_000)), Instant(900_000), d);
        c.chunk_served(chunk(), Epoch(3), Some(view(ChunkState::RegularLease, 2, 1_000_000)), Instant(900_000), d);
        c.chunk_served(chunk(), Epoch(2), Some(view(ChunkState::RegularLease, 2, 1_000_000)), Instant(960_000), d);
        assert_eq!(c.violations.len(), 3);
    }

    // DESIGN §9.4: an acknowledged write missing from a later epoch is caught, both when
    // the later epoch commits after the ack and when it already existed.
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
        c.write_acked(S, 7, v, std::iter::once((chunk(), S, Epoch(2), &empty)));
        assert!(c.violations.is_empty(), "same epoch: not yet required");
        c.chunk_committed(chunk(), S, Epoch(3), &holding);
        assert!(c.violations.is_empty());
        c.chunk_committed(chunk(), S, Epoch(3), &empty);
        assert_eq!(c.violations.len(), 1);
        c.write_acked(S, 7, v, std::iter::once((chunk(), S, Epoch(4), &empty)));
        assert_eq!(c.violations.len(), 2);
    }
}
