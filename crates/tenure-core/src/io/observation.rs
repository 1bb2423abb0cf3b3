//! Observations: what a device tells checkers, traces and metrics about its decisions.

use super::policy::PolicyCommand;
use crate::ids::{ChunkId, DeviceId, Epoch, SessionId, StoreId, Version};
use crate::layout::Metadata;
use crate::time::Instant;
use serde::{Deserialize, Serialize};

/// Observations for checkers, traces and metrics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Observation {
    /// This device became the manager of `store` in `epoch` (a commit completed).
    BecameManager {
        /// Store.
        store: StoreId,
        /// Epoch.
        epoch: Epoch,
        /// Layout of the epoch.
        metadata: Metadata,
        /// How the epoch came to be.
        cause: EpochCause,
    },
    /// This device stopped managing `store`.
    StoppedManaging {
        /// Store.
        store: StoreId,
        /// Epoch it was managing.
        epoch: Epoch,
    },
    /// A chunk applied an operation (the access protocol served it).
    ChunkServed {
        /// Chunk.
        chunk: ChunkId,
        /// Epoch of the operation.
        epoch: Epoch,
    },
    /// A chunk committed a new epoch.
    ChunkCommitted {
        /// Chunk.
        chunk: ChunkId,
        /// New epoch.
        epoch: Epoch,
    },
    /// A chunk garbage-collected itself.
    ChunkCollected {
        /// Chunk.
        chunk: ChunkId,
    },
    /// A write was acknowledged to its client.
    WriteAcked {
        /// Store.
        store: StoreId,
        /// Key.
        key: u64,
        /// Version.
        version: Version,
        /// Value.
        value: u64,
    },
    /// A manager decided to end a session (expiry or close) and sequenced the change
    /// that releases its locks; emitted before the change leaves the device.
    SessionEnding {
        /// Store.
        store: StoreId,
        /// Session.
        session: SessionId,
        /// Expired (true) or closed by its client.
        expired: bool,
        /// Names of the locks the change releases.
        released: Vec<String>,
        /// The epoch of the manager that decided it (the change's): a manager deposed
        /// by a later epoch decides in vain, since its change can no longer commit.
        epoch: Epoch,
    },
    /// A session's child in another store is recorded at home, durably (DESIGN §4).
    SessionAttached {
        /// The session's store.
        store: StoreId,
        /// The session.
        session: SessionId,
        /// The child's store.
        child_store: StoreId,
        /// The child.
        child: SessionId,
    },
    /// The session end announced by `SessionEnding` is durable on every live chunk and
    /// applied at the manager.
    SessionEnded {
        /// Store.
        store: StoreId,
        /// Session.
        session: SessionId,
        /// Expired (true) or closed by its client, as announced.
        expired: bool,
    },
    /// A manager marked a chunk failed (reported to the outside policy).
    ChunkFailed {
        /// Store.
        store: StoreId,
        /// Chunk.
        chunk: ChunkId,
        /// What the manager saw.
        why: FailedWhy,
    },
    /// A relayout began (Tenure, DESIGN "State at scale"): how many of the chunks that
    /// lack the store's state got it as a patch, and why each other one got it whole.
    RelayoutBegun {
        /// Store.
        store: StoreId,
        /// Chunks sent a patch of a table they hold.
        patched: u32,
        /// Chunks sent the whole state, with the reason a patch could not be made.
        whole: Vec<(ChunkId, crate::layout::RejoinMiss)>,
    },
    /// A relayout committed or aborted.
    Relayout {
        /// Store.
        store: StoreId,
        /// Whether it committed.
        committed: bool,
    },
    /// The lookup node changed state (seed 003: passive, joining, warming up, active,
    /// leader).
    LookupState {
        /// The new state.
        state: crate::lookup::NodeState,
        /// `activeStartTime`.
        start: Option<Instant>,
    },
    /// A live lookup entry was dropped by this node because it was not refreshed within
    /// its lifetime.
    LookupExpired {
        /// Whether the entry was persistent.
        persistent: bool,
    },
    /// A manager took over a deletion lease that was not checked in in time.
    GcLeaseTakeover {
        /// Store.
        store: StoreId,
    },
    /// A migration committed or aborted (reported by the incoming manager).
    Migration {
        /// Store.
        store: StoreId,
        /// Whether it committed.
        committed: bool,
    },
    /// This device now follows (or is) the coordinator of `term` (DESIGN §6).
    Coordinator {
        /// The term, naming the coordinator.
        term: crate::election::Term,
    },
    /// This device, as coordinator of `term`, sent a command.
    CommandSent {
        /// The coordinator's term.
        term: crate::election::Term,
        /// The store's manager it went to.
        to: DeviceId,
        /// The command.
        cmd: PolicyCommand,
    },
    /// A coordinator's command was applied here (its preconditions are checked next).
    CommandApplied {
        /// The command's term.
        term: crate::election::Term,
        /// The command.
        cmd: PolicyCommand,
    },
    /// This device recorded its state for a snapshot (before it processes the message
    /// that brought the marker).
    SnapshotRecorded {
        /// The snapshot.
        id: crate::snapshot::SnapshotId,
    },
    /// This device adopted a newer membership record (drivers connect to new members'
    /// addresses).
    Members {
        /// The record.
        members: crate::election::members::Members,
    },
    /// This device retired: it left the membership (drivers may stop it).
    Retired,
    /// A coordinator's command was refused: its term is older than `newest`.
    CommandRefused {
        /// The command's term.
        term: crate::election::Term,
        /// The newest term this device has seen.
        newest: crate::election::Term,
    },
}

/// Why a manager's epoch began.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EpochCause {
    /// Manager regeneration (recovery transition).
    Regeneration,
    /// Manager migration (handoff).
    Migration,
    /// Relayout.
    Relayout,
}

/// Why a manager marked a chunk failed ([`Observation::ChunkFailed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum FailedWhy {
    /// Its ACCEPTED did not come within the batch's timeout (its device fell silent or
    /// the store could not wait).
    AcceptLate,
    /// Its lease ran out without a renewal request (seed 000 §5.3.7 chunkfail).
    LeaseExpired,
    /// It asked for help: it had lost its lease (§5.3.7 help).
    Help,
    /// It refused a batch it could not accept.
    Refused,
}

impl std::fmt::Display for FailedWhy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FailedWhy::AcceptLate => "accept_late",
            FailedWhy::LeaseExpired => "lease_expired",
            FailedWhy::Help => "help",
            FailedWhy::Refused => "refused",
        })
    }
}
