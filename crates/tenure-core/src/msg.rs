//! Messages between devices. Names follow the seeds: seed 000 §4–§5 for layout control,
//! and the SafeTalk commit Tenure uses for epoch transitions (DESIGN §3–4).
//!
//! Messages addressed to a chunk carry its [`ChunkId`] (the device holding it is
//! `chunk.device`); messages addressed to a store's manager carry the [`StoreId`] and the
//! sending chunk.

use crate::data::{StoreData, StoreOp};
use crate::ids::Version;
use crate::ids::{ChunkId, DeviceId, Epoch, StoreId};
use crate::layout::{LeaseType, Metadata, Prepared};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Every message a device sends to another.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Msg {
    /// Seed 000 messages from a manager to a chunk.
    ToChunk {
        /// The chunk's store.
        store: StoreId,
        /// Addressed chunk.
        chunk: ChunkId,
        /// The message.
        msg: ToChunk,
    },
    /// Seed 000 messages from a chunk to a (would-be) manager of its store.
    ToManager {
        /// The store being managed.
        store: StoreId,
        /// The chunk that sent it.
        chunk: ChunkId,
        /// The message.
        msg: ToManager,
    },
    /// Manager-to-manager messages (migration).
    Mgr {
        /// The store being managed.
        store: StoreId,
        /// The message.
        msg: MgrMsg,
    },
    /// Outside-policy requests between devices.
    Policy(PolicyMsg),
    /// The lookup service (seed 003).
    Lookup(crate::lookup::LookupMsg),
    /// Object block traffic (seed 001; DESIGN §5).
    Blocks(crate::objects::msg::BlockMsg),
    /// Elections of the cluster's coordinator (seed 002 §14.3; DESIGN §6).
    Election(crate::election::ElectionMsg),
    /// Reports to the coordinator and its commands (DESIGN §6).
    Coord(crate::election::coordinator::CoordMsg),
    /// Snapshot markers, tags and termination detection (seed 002 §14.1–§14.2).
    Snapshot(crate::snapshot::SnapMsg<Msg>),
    /// A client request forwarded to the store's manager, and its answer (DESIGN §8,
    /// "Any device serves any request"). Only sent when every peer reads it.
    #[serde(serialize_with = "crate::generation::only_forwarding")]
    Forward(ForwardMsg),
}

/// A forwarded client request and its answer ([`Msg::Forward`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
// Moved once each, like the other message enums.
#[allow(clippy::large_enum_variant)]
pub enum ForwardMsg {
    /// Serve `req` as if its client had sent it here, and answer with `id`.
    Request {
        /// The forwarding device's id for the request (echoed in the answer).
        id: u64,
        /// The request.
        req: crate::io::request::Request,
    },
    /// The answer to the forwarded request `id`.
    Answer {
        /// The forwarding device's id for the request.
        id: u64,
        /// The request's store (its answer waits for the store's persists).
        store: StoreId,
        /// The answer, as the manager would have given it to the client.
        result: Result<crate::io::request::Response, crate::error::ClientError>,
    },
}

impl ForwardMsg {
    /// The store of the forwarded request.
    pub fn store(&self) -> StoreId {
        match self {
            ForwardMsg::Request { req, .. } => req.store(),
            ForwardMsg::Answer { store, .. } => *store,
        }
    }
}

/// Messages a chunk receives (seed 000 §4.2).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
// Moved once each, like the other message enums: boxing the commit's merged state would
// add an allocation per message for no gain.
#[allow(clippy::large_enum_variant)]
pub enum ToChunk {
    /// `renewal(mgr epoch, new expiry time)`. The expiry travels as a length
    /// ([`crate::time`]): the chunk's lease runs `lease` from when the renewal arrives.
    Renewal {
        /// The manager's epoch.
        epoch: Epoch,
        /// The new lease's length, from receipt.
        lease: Duration,
        /// When the manager sent it, by its clock: the chunk echoes it in its next
        /// renewal request (none from a manager of an older build).
        #[serde(with = "crate::generation::renewal_echo")]
        sent: Option<crate::time::Instant>,
    },
    /// `epoch transition(old epoch, new epoch, new metadata, new mgr id)`: the SafeTalk
    /// prepare. The chunk logs it durably and votes to `new_mgr`, the transition manager.
    EpochTransition {
        /// Epoch the transition starts from.
        old_epoch: Epoch,
        /// Epoch it commits to.
        new_epoch: Epoch,
        /// Identity of this transition attempt (replays of another attempt change nothing).
        tx: u64,
        /// Layout of the new epoch.
        metadata: Metadata,
        /// Manager of the new epoch (also the transition manager, which runs the commit).
        new_mgr: DeviceId,
        /// Reconciliation input (§5.3.8: "as the first step, chunks are being
        /// reconciled"): the old epoch's state, sent by a relayout to every participant
        /// that does not hold it (a new chunk, a recovered stale one). The chunk merges it
        /// into its own state durably before it votes, so every voter of the new layout
        /// holds each acknowledged write whether or not the commit reaches it.
        data: Option<Box<StoreData>>,
    },
    /// `commit tx`: SafeTalk confirm, carrying the reconciled store state.
    Commit {
        /// Epoch being committed.
        new_epoch: Epoch,
        /// Identity of this transition attempt (replays of another attempt change nothing).
        tx: u64,
        /// Merged store state.
        data: Box<StoreData>,
        /// Lease after the commit (commit lease window), from receipt.
        lease: Duration,
    },
    /// `abort tx`.
    Abort {
        /// Epoch whose transition aborted.
        new_epoch: Epoch,
        /// Identity of this transition attempt (replays of another attempt change nothing).
        tx: u64,
        /// Lease after the abort (abort lease window), from receipt.
        lease: Duration,
    },
    /// `acquire(new lease expiry, new mgr, new epoch number)`.
    Acquire {
        /// Recovery lease, from receipt.
        lease: Duration,
        /// The acquiring manager.
        mgr: DeviceId,
        /// The epoch the manager is recovering.
        epoch: Epoch,
    },
    /// `lose`: the chunk is no longer in the layout and should garbage-collect itself.
    Lose,
    /// `release(epoch number, new mgr hint set)`.
    Release {
        /// Epoch of the abandoned regeneration.
        epoch: Epoch,
        /// Managers with higher precedence to try next.
        hints: Vec<DeviceId>,
    },
    /// `transfer lease(epoch number, new mgr, expiry)`.
    TransferLease {
        /// Epoch being recovered.
        epoch: Epoch,
        /// The winning manager.
        new_mgr: DeviceId,
        /// New recovery lease, from receipt.
        lease: Duration,
    },
    /// `redirect(new mgr)`: try this manager next.
    Redirect {
        /// Where the manager may be found.
        new_mgr: DeviceId,
    },
    /// SafeTalk ACCEPT (AL/AR) of a batch of changes, with a piggybacked CONFIRM (CL/CR)
    /// of everything up to `confirm`. Served only under a regular lease.
    Accept {
        /// The manager's epoch.
        epoch: Epoch,
        /// Consecutive changes with their sequence numbers.
        ops: Vec<(Version, StoreOp)>,
        /// Everything up to here is confirmed.
        confirm: Version,
    },
    /// A standalone CONFIRM (CL/CR), when no ACCEPT is going out to carry it.
    Confirm {
        /// The manager's epoch.
        epoch: Epoch,
        /// Everything up to here is confirmed.
        upto: Version,
    },
    /// `commit tx` carrying the reconciled state as a patch of the table the chunk's
    /// summary named (Tenure, DESIGN "State at scale").
    #[serde(serialize_with = "crate::generation::only_diff")]
    CommitPatch(Box<CommitPatch>),
    /// The transition manager cannot merge without this chunk's whole state: vote again,
    /// whole.
    #[serde(serialize_with = "crate::generation::only_diff")]
    SendState(SendState),
    /// §5.3.8 `epoch transition` of a relayout to a chunk that rejoins (Tenure, DESIGN
    /// "State at scale"): the store's state as a patch of a table the chunk said it
    /// holds ([`ToManager::Holds`]) instead of whole.
    #[serde(serialize_with = "crate::generation::only_rejoin")]
    ReconcilePatch(Box<ReconcilePatch>),
}

/// [`ToChunk::ReconcilePatch`]: the fields of [`ToChunk::EpochTransition`], with the
/// state as a patch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReconcilePatch {
    /// The manager's current epoch.
    pub old_epoch: Epoch,
    /// The epoch being prepared.
    pub new_epoch: Epoch,
    /// Its layout.
    pub metadata: Metadata,
    /// The manager coordinating the transition.
    pub new_mgr: DeviceId,
    /// Identity of this transition attempt.
    pub tx: u64,
    /// The manager's state, as rows that differ from a table the chunk holds.
    pub patch: Patch,
    /// The stamp of the manager's state.
    pub stamp: Option<crate::safetalk::Stamp>,
}

/// [`ToChunk::CommitPatch`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommitPatch {
    /// Epoch being committed.
    pub new_epoch: Epoch,
    /// Identity of this transition attempt.
    pub tx: u64,
    /// Lease after the commit (commit lease window), from receipt.
    pub lease: Duration,
    /// The merged state, as rows that differ from a table the chunk holds.
    pub patch: Patch,
}

/// The merged state of an epoch transition as what differs from a table a voter named
/// ([`crate::safetalk::Summary`]): the chunk confirms its pending changes up to `upto`,
/// which makes its table the one stamped `from` at `upto` (the merge's base), then takes
/// the rows and scalars ([`crate::rows::patch`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Patch {
    /// The stamp of the base table.
    pub from: crate::safetalk::Stamp,
    /// Its confirmed number.
    pub upto: Version,
    /// The merged state's confirmed number.
    pub confirmed: Version,
    /// The merged tables' scalars ([`crate::rows::head`]).
    pub head: Box<crate::data::Tables>,
    /// The rows in which the merged tables differ from the base's ([`crate::rows::diff`]).
    pub rows: Vec<crate::rows::RowChange>,
}

/// [`ToChunk::SendState`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SendState {
    /// The epoch being prepared.
    pub new_epoch: Epoch,
    /// Identity of the transition attempt.
    pub tx: u64,
}

/// A chunk's echo of a renewal it applied ([`ToManager::RenewalRequest`]): the renewal
/// reached it after `sent` (the manager's clock), and when the request left, it would go
/// on refusing every other manager for `lease_left` more (its own clock), as
/// [`ToManager::Accepted`]'s `lease_left`. So it refuses them until at least
/// `sent + lease_left` by the manager's clock, give or take `δ_c`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Renewed {
    /// The applied renewal's `sent`.
    pub sent: crate::time::Instant,
    /// What is left of the regular lease when the request leaves.
    pub lease_left: Duration,
}

/// Messages a manager receives from chunks (seed 000 §5.3).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
// Moved once each, like the other message enums: boxing a vote's store state would add
// an allocation per message for no gain.
#[allow(clippy::large_enum_variant)]
pub enum ToManager {
    /// `renewal request(chunk epoch)`.
    RenewalRequest {
        /// The chunk's epoch.
        epoch: Epoch,
        /// The last renewal the chunk applied from the recipient in that epoch, while
        /// still under the regular lease it gave (none otherwise, or from a chunk of an
        /// older build): the manager's read lease is extended from it as from an
        /// ACCEPTED (DESIGN §4, reads).
        #[serde(with = "crate::generation::renewal_echo")]
        renewed: Option<Renewed>,
    },
    /// `recovery renewal request(chunk epoch)`.
    RecoveryRenewalRequest {
        /// The chunk's epoch.
        epoch: Epoch,
    },
    /// `help(epoch number, metadata)`.
    Help {
        /// The chunk's epoch.
        epoch: Epoch,
        /// The chunk's metadata for that epoch.
        metadata: Metadata,
    },
    /// `ack(epoch)`: the chunk accepts the recovery lease.
    Ack {
        /// The chunk's epoch (equal to the manager's).
        epoch: Epoch,
        /// An uncommitted epoch transition the chunk voted for, if any.
        prepared: Option<Prepared>,
    },
    /// `ack-conditional(mgr epoch, chunk epoch, chunk metadata)`.
    AckConditional {
        /// The epoch the manager asked for.
        mgr_epoch: Epoch,
        /// The chunk's epoch.
        chunk_epoch: Epoch,
        /// The chunk's metadata.
        metadata: Metadata,
        /// An uncommitted epoch transition the chunk voted for, if any.
        prepared: Option<Prepared>,
    },
    /// `nack(chunk epoch, chunk mgr, lease type)`.
    Nack {
        /// The chunk's epoch.
        epoch: Epoch,
        /// The manager the chunk is leased to (none under no lease).
        mgr: Option<DeviceId>,
        /// The chunk's lease type.
        lease: LeaseType,
    },
    /// `nochunk(chunk)`: the device does not hold (or has garbage-collected) the chunk.
    NoChunk,
    /// `transfer ack(chunk epoch number, chunk mgr)`.
    TransferAck {
        /// Epoch.
        epoch: Epoch,
        /// The manager the lease now belongs to.
        mgr: DeviceId,
        /// Tenure: the chunk's highest undecided prepare, as in `ack` (the manager the
        /// lease moves to never saw the chunk's first ack).
        prepared: Option<Prepared>,
    },
    /// `transfernotice(chunk epoch number, chunk mgr)`: sent to the manager a chunk leaves.
    TransferNotice {
        /// Epoch.
        epoch: Epoch,
        /// The manager that won.
        mgr: DeviceId,
    },
    /// `done` + vote commit: the chunk's reconciliation input for an epoch transition
    /// (SafeTalk ACCEPTED), sent after the prepare is durable.
    Vote {
        /// The epoch being prepared.
        new_epoch: Epoch,
        /// Identity of this transition attempt (replays of another attempt change nothing).
        tx: u64,
        /// The chunk's store state.
        data: Box<StoreData>,
        /// The epoch the chunk last committed (pending changes of older epochs were
        /// decided by that epoch's merge).
        committed: Epoch,
    },
    /// The chunk cannot take part in the epoch transition (wrong state or epoch).
    VoteAbort {
        /// The epoch being prepared.
        new_epoch: Epoch,
        /// Identity of this transition attempt (replays of another attempt change nothing).
        tx: u64,
    },
    /// SafeTalk ACCEPTED (LA/RA): every change up to `upto` is durable in the L/R-lists.
    Accepted {
        /// The manager's epoch.
        epoch: Epoch,
        /// Highest sequence number accepted.
        upto: Version,
        /// How long, by the chunk's clock from sending this, it goes on refusing every
        /// other manager under its regular lease from the recipient: until `δ_c` before
        /// its expiry, when it stops serving (none: not under that lease, or a chunk of
        /// an older build). The manager's read lease is taken from it (DESIGN §4, reads).
        #[serde(with = "crate::generation::lease_left")]
        lease_left: Option<Duration>,
    },
    /// The chunk cannot accept changes for this epoch (no regular lease from the sender,
    /// or a gap in the sequence): the manager treats it as failed.
    Refused {
        /// The manager's epoch.
        epoch: Epoch,
    },
    /// A vote that names the chunk's tables instead of shipping them (Tenure, DESIGN
    /// "State at scale"): sent to a transition manager on another device when every
    /// peer reads it.
    #[serde(serialize_with = "crate::generation::only_diff")]
    VoteSummary(Box<VoteSummary>),
    /// Tenure (DESIGN "State at scale"): the table this chunk holds, named, sent with
    /// each `ack` so that a manager can bring it up to date by a patch when it rejoins.
    #[serde(serialize_with = "crate::generation::only_rejoin")]
    Holds(Holding),
}

/// [`ToManager::Holds`]: a chunk's table named by its stamp and confirmed number, and
/// the last change it holds pending.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holding {
    /// The commit that installed its table.
    pub stamp: crate::safetalk::Stamp,
    /// Highest sequence number applied to its table.
    pub confirmed: Version,
    /// The highest sequence number it holds, confirmed or pending.
    pub last_held: Version,
}

/// [`ToManager::VoteSummary`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VoteSummary {
    /// The epoch being prepared.
    pub new_epoch: Epoch,
    /// Identity of this transition attempt.
    pub tx: u64,
    /// The chunk's state, named.
    pub summary: crate::data::StoreSummary,
    /// The epoch the chunk last committed.
    pub committed: Epoch,
}

/// Manager-to-manager messages of manager migration (seed 000 §5.3.1, §5.3.3–§5.3.7).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
// The store state travels boxed (as in `ToChunk::Commit` and `ToManager::Vote`), which
// keeps every `Msg` small to move.
#[allow(clippy::large_enum_variant)]
pub enum MgrMsg {
    /// `handoff(old epoch number, new metadata, failed chunks)`.
    Handoff {
        /// Identity of this migration attempt.
        tx: u64,
        /// The old manager's epoch.
        old_epoch: Epoch,
        /// The epoch the migration commits: above the old one and above every epoch a
        /// chunk of the store is known to have prepared (an aborted attempt can linger
        /// at a chunk that missed the abort, and a chunk never votes twice for an epoch).
        new_epoch: Epoch,
        /// Layout.
        metadata: Metadata,
        /// Chunks the old manager believes failed.
        failed: Vec<ChunkId>,
        /// The old manager's copy of the store state.
        data: Box<StoreData>,
    },
    /// The incoming manager holds the handoff and asks for the outgoing manager's vote
    /// (Tenure: the vote is a round trip, so that no device reads another's clock).
    HandoffReady {
        /// Epoch being prepared.
        new_epoch: Epoch,
        /// Identity of this transition attempt (replays of another attempt change nothing).
        tx: u64,
    },
    /// The outgoing manager's vote (it has reconciled: `done`), sent only in answer to
    /// [`MgrMsg::HandoffReady`] while its window is open.
    HandoffVote {
        /// Epoch being prepared.
        new_epoch: Epoch,
        /// Identity of this transition attempt (replays of another attempt change nothing).
        tx: u64,
        /// How long, from this vote's sending, the outgoing manager keeps waiting for
        /// the commit: the incoming manager counts it from its `HandoffReady`'s sending
        /// (earlier in real time), less the drift bound, and aborts past it (DESIGN §3,
        /// "Clocks").
        within: Duration,
    },
    /// Commit of the migration, from the incoming manager to the outgoing one.
    HandoffCommit {
        /// Epoch committed.
        new_epoch: Epoch,
        /// Identity of this transition attempt (replays of another attempt change nothing).
        tx: u64,
    },
    /// Abort of the migration.
    HandoffAbort {
        /// Epoch aborted.
        new_epoch: Epoch,
        /// Identity of this transition attempt (replays of another attempt change nothing).
        tx: u64,
    },
}

/// Requests between devices on behalf of the outside policies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PolicyMsg {
    /// Allocate a new chunk for `store` (policy: replace a failed chunk).
    CreateChunk {
        /// Store the chunk will belong to.
        store: StoreId,
        /// The manager asking (the chunk's first lease manager).
        mgr: DeviceId,
        /// The manager's current epoch.
        epoch: Epoch,
        /// Recovery lease for the new chunk, from receipt.
        lease: Duration,
    },
    /// The chunk was created and persisted.
    ChunkCreated {
        /// Store.
        store: StoreId,
        /// The new chunk.
        chunk: ChunkId,
    },
}
