//! Palladio layout control (seed 000, Golding & Borowsky, HPL-SSP-99-1 rev. 2).
//!
//! A store is replicated as chunks on devices. A manager grants the chunks leases; a chunk
//! serves the access protocol only under a regular lease for its current epoch. When a
//! manager fails, the chunks' leases expire, they ask directors for `help`, and would-be
//! managers contend (`acquire`, `ack`, `ack-conditional`, `nack` with a well-known
//! precedence) until one holds a quorum and coverage of the chunks, gathers the remaining
//! leases (`transfer lease`) and takes the store through an epoch transition. Managers
//! migrate (`handoff`) and layouts change (`relayout`) through the same epoch transition.
//!
//! [`chunk`] holds the chunk state machine (§4), [`manager`] the manager's (§5). The commit
//! protocol the seed leaves open is SafeTalk (DESIGN §3): `epoch transition` is the
//! prepare, which a chunk logs durably before voting; the transition manager (the new
//! epoch's manager, SafeTalk's commit coordinator) commits only with every participant's
//! vote and ships the reconciled store state in the commit. "Coordinator" alone is the
//! cluster's coordinator (DESIGN §1).

pub mod ack_timer;
pub mod chunk;
pub mod manager;
pub use manager::RejoinMiss;

use crate::ids::{ChunkId, DeviceId, Epoch};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// The layout of a store in one epoch: its chunks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Metadata {
    /// Chunks of the store in this epoch.
    pub chunks: BTreeSet<ChunkId>,
}

impl Metadata {
    /// Metadata over these chunks.
    pub fn new(chunks: impl IntoIterator<Item = ChunkId>) -> Metadata {
        Metadata {
            chunks: chunks.into_iter().collect(),
        }
    }
    /// Whether `c` is in the layout.
    pub fn contains(&self, c: ChunkId) -> bool {
        self.chunks.contains(&c)
    }
    /// Quorum predicate: `set` holds a strict majority of the layout's chunks.
    pub fn quorum(&self, set: &BTreeSet<ChunkId>) -> bool {
        self.quorum_of(set.iter().filter(|c| self.chunks.contains(c)).count())
    }
    /// Whether `n` of this layout's chunks are a quorum of it (a strict majority).
    pub fn quorum_of(&self, n: usize) -> bool {
        2 * n > self.chunks.len()
    }
    /// Coverage predicate: with full replication, any one chunk holds all the data.
    pub fn coverage(&self, set: &BTreeSet<ChunkId>) -> bool {
        set.iter().any(|c| self.chunks.contains(c))
    }
}

/// Kinds of lease a chunk can hold (carried in `nack`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaseType {
    /// A regular lease from an active manager.
    Regular,
    /// A recovery lease from a regenerating manager.
    Recovery,
    /// No lease.
    None,
}

/// The SafeTalk prepare record: an epoch transition a chunk voted for and has not yet
/// seen committed or aborted. Kept durably; reported in `ack`/`ack-conditional` so a
/// regenerating manager moves past any epoch that may have committed elsewhere.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prepared {
    /// The epoch the transition would create.
    pub new_epoch: Epoch,
    /// Its layout.
    pub metadata: Metadata,
    /// Its manager.
    pub new_mgr: DeviceId,
}

/// Chunk states (seed 000 §4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ChunkState {
    /// §4.2.1: regular operation with a valid lease; the only serving state.
    RegularLease,
    /// §4.2.2: an epoch transition began; reconciling.
    Reconciling,
    /// §4.2.3: voted; waiting for commit/abort.
    RegularTransition,
    /// §4.2.4: not in the layout any more; deleting itself.
    GarbageCollect,
    /// §4.2.5: just restarted.
    NewlyAwake,
    /// §4.2.6: no manager; asking directors for help.
    NoLease,
    /// §4.2.7: acquired by a regenerating manager.
    RecoveryLease,
    /// §4.2.8: voted in a recovery epoch transition.
    RecoveryTransition,
    /// §4.2.9: reconciling at the end of recovery.
    RecoveryReconciling,
}

/// Manager states (seed 000 §5.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum MgrState {
    /// §5.3.1: not a manager of the store.
    None,
    /// §5.3.2: just restarted.
    NewlyAwake,
    /// §5.3.3: migrating in; reconciling.
    IntoReconciling,
    /// §5.3.4: migrating in; committing.
    IntoTransition,
    /// §5.3.5: migrating out; reconciling.
    OutOfReconciling,
    /// §5.3.6: migrating out; committing.
    OutOfTransition,
    /// §5.3.7: the one true manager.
    Manager,
    /// §5.3.8: relayout; reconciling.
    RelayoutReconciling,
    /// §5.3.9: relayout; committing.
    RelayoutTransition,
    /// §5.3.10: regenerating; contending for chunks.
    GatheringChunks,
    /// §5.3.11: a gathering round is over; deciding.
    Gathered,
    /// §5.3.12: won; transferring the remaining leases.
    GatheringLeases,
    /// §5.3.13: recovery epoch transition; reconciling.
    RecoveryReconciling,
    /// §5.3.14: recovery epoch transition; committing.
    RecoveryTransition,
}

/// A read-only view of a chunk for checkers and status pages.
#[derive(Clone, Debug, PartialEq)]
pub struct ChunkView {
    /// Identity.
    pub id: ChunkId,
    /// Store.
    pub store: crate::ids::StoreId,
    /// State.
    pub state: ChunkState,
    /// Epoch.
    pub epoch: Epoch,
    /// Lease expiry (lease manager's clock), if leased.
    pub lease_expiry: Option<crate::time::Instant>,
    /// Lease manager.
    pub lease_mgr: Option<DeviceId>,
}

/// A read-only view of a manager role for checkers and status pages.
#[derive(Clone, Debug, PartialEq)]
pub struct ManagerView {
    /// Store.
    pub store: crate::ids::StoreId,
    /// State.
    pub state: MgrState,
    /// Epoch.
    pub epoch: Epoch,
    /// Metadata.
    pub metadata: Metadata,
    /// Chunks believed failed.
    pub failed: BTreeSet<ChunkId>,
}

#[cfg(test)]
mod chunk_tests;
#[cfg(test)]
mod diff_tests;
#[cfg(test)]
mod manager_tests;
#[cfg(test)]
mod read_lease_tests;
#[cfg(test)]
mod rejoin_tests;
#[cfg(test)]
pub(crate) mod test_support;
