//! The violations every checker of the simulator reports, whether each is of safety or
//! of liveness, and how each reads.

use serde::Serialize;
use tenure_core::ids::Version;
use tenure_core::lockctl::{FencingToken, SessionId};
use tenure_core::{ChunkId, DeviceId, Epoch, StoreId};

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
    /// Two chunks committed the same transition (the same stamp) into different tables:
    /// a stamp no longer names one table, so a summary naming it could be patched into a
    /// wrong one (DESIGN "State at scale").
    StampDiverged {
        /// Store.
        store: StoreId,
        /// The epoch the transition committed.
        epoch: Epoch,
        /// The transition attempt.
        tx: u64,
        /// The first chunk that committed it.
        first: ChunkId,
        /// The chunk whose table differs.
        chunk: ChunkId,
        /// How the tables differ.
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
    /// DESIGN §4: a session expired at its manager while its client, by its own
    /// conservative deadline, still believed it alive (a keep-alive answered alive that
    /// did not renew it, as a session spanning stores whose child was not renewed).
    ExpiredBeforeClientDeadline {
        /// The session's store.
        store: StoreId,
        /// The session.
        session: SessionId,
        /// When it expired (µs).
        at_us: u64,
        /// The client's deadline (µs).
        deadline_us: u64,
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
            Violation::StampDiverged {
                store,
                epoch,
                tx,
                first,
                chunk,
                why,
            } => write!(
                f,
                "{store}: {chunk} committed transition {epoch} attempt {tx} into another table than {first} ({why})"
            ),
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
            Violation::ExpiredBeforeClientDeadline {
                store,
                session,
                at_us,
                deadline_us,
            } => write!(
                f,
                "{store} session {}: expired at {at_us}us, before its client's deadline {deadline_us}us",
                session.0
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
