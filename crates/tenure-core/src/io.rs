//! What goes into and comes out of a [`crate::Device`]: inputs, outputs, the persistent
//! state and the operations that change it, observations for checkers, client requests.

use crate::data::{StoreData, Version};
use crate::ids::{ChunkId, ClientId, DeviceId, Epoch, StoreId};
use crate::layout::{Metadata, Prepared};
use crate::lockctl::{FencingToken, HolderInfo, LockInfo, LockMode};
use crate::msg::Msg;
use crate::session::SessionId;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One input to a device.
#[derive(Clone, Debug, PartialEq)]
// Values are moved, not copied, once each; boxing the large variant would add an
// allocation per message for no gain.
#[allow(clippy::large_enum_variant)]
pub enum Input {
    /// A message from another device (or from itself).
    Message {
        /// Sender.
        from: DeviceId,
        /// The message.
        msg: Msg,
    },
    /// Time has advanced; fire every timer due at `now`.
    Tick,
    /// A client request.
    Request {
        /// Client.
        client: ClientId,
        /// The client's request id (echoed in the reply).
        req_id: u64,
        /// The request.
        req: Request,
    },
    /// A command from an outside policy (an operator or the simulator's workload).
    Policy(PolicyCommand),
    /// A lookup request (seed 003): answered by this device, or multicast and answered
    /// when the lookup leader does.
    Lookup {
        /// Client.
        client: ClientId,
        /// The client's request id (echoed in the reply).
        req_id: u64,
        /// The request.
        req: crate::lookup::LookupRequest,
    },
    /// Start a consistent snapshot of the cluster from this device (seed 002 §14.1); the
    /// outputs say its id ([`Output::SnapshotStarted`]) and, later, its result.
    StartSnapshot,
}

/// Outside-policy commands (seed 000 §3: the interface the policies use).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PolicyCommand {
    /// `migrate(node)`: move management of `store` to `to`.
    Migrate {
        /// Store.
        store: StoreId,
        /// Destination device.
        to: DeviceId,
    },
    /// `relayout(new metadata)`.
    Relayout {
        /// Store.
        store: StoreId,
        /// New layout.
        metadata: Metadata,
    },
    /// Replace one chunk of `store` with a new chunk on `device` (allocates the chunk,
    /// then relayouts).
    ReplaceChunk {
        /// Store.
        store: StoreId,
        /// Chunk to drop from the layout.
        old: ChunkId,
        /// Device to put the new chunk on.
        device: DeviceId,
    },
    /// Admit a device to the cluster (DESIGN §6; applied by the coordinator).
    AddDevice {
        /// The device.
        device: DeviceId,
        /// Its peer address (opaque to the core).
        peer_addr: String,
        /// Its client address (opaque to the core).
        client_addr: String,
    },
    /// Drain a device and retire it (applied by the coordinator).
    RemoveDevice {
        /// The device.
        device: DeviceId,
    },
}

impl PolicyCommand {
    /// The store a store command is about (none for membership commands).
    pub fn store(&self) -> Option<StoreId> {
        match self {
            PolicyCommand::Migrate { store, .. }
            | PolicyCommand::Relayout { store, .. }
            | PolicyCommand::ReplaceChunk { store, .. } => Some(*store),
            PolicyCommand::AddDevice { .. } | PolicyCommand::RemoveDevice { .. } => None,
        }
    }
}

/// How long an acquire may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WaitSpec {
    /// Grant now or fail with `WouldBlock`.
    Try,
    /// Wait at most this long.
    Timeout(std::time::Duration),
    /// Wait until granted, the session ends, or a deadlock is detected.
    Forever,
}

/// Client requests the core understands. Every request names its store; lock names must
/// belong to it ([`crate::config::store_of`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// Write a test register (exercises the store access protocol).
    Write {
        /// Store.
        store: StoreId,
        /// Key.
        key: u64,
        /// Value.
        value: u64,
    },
    /// Open a session in a store.
    OpenSession {
        /// Store.
        store: StoreId,
        /// Time to live between keep-alives.
        ttl: std::time::Duration,
    },
    /// Keep a session alive.
    KeepAlive {
        /// Store.
        store: StoreId,
        /// Session.
        session: SessionId,
    },
    /// Close a session, releasing its locks without lock-delay.
    CloseSession {
        /// Store.
        store: StoreId,
        /// Session.
        session: SessionId,
    },
    /// Acquire a lock.
    Acquire {
        /// Store.
        store: StoreId,
        /// Holder session.
        session: SessionId,
        /// Idempotency key: a retry with the same id returns the same outcome.
        request_id: u64,
        /// Lock name (a path).
        name: String,
        /// Mode.
        mode: LockMode,
        /// Try, wait with a timeout, or wait.
        wait: WaitSpec,
        /// The hold's lock-delay if its session expires (none: the device's
        /// `timing.lock_delay`); longer than `lockctl::MAX_LOCK_DELAY` is rejected.
        #[serde(default)]
        lock_delay: Option<std::time::Duration>,
    },
    /// Release a lock.
    Release {
        /// Store.
        store: StoreId,
        /// Holder session.
        session: SessionId,
        /// Idempotency key (0: none): a retry of a release that succeeded answers
        /// `Released` again instead of `NotHeld`.
        request_id: u64,
        /// Lock name.
        name: String,
    },
    /// Release a lock only if it is held with exactly `token` (checked atomically with
    /// the release).
    ReleaseFenced {
        /// Store.
        store: StoreId,
        /// Holder session.
        session: SessionId,
        /// Idempotency key (0: none).
        request_id: u64,
        /// Lock name.
        name: String,
        /// The fencing token of the grant being released.
        token: FencingToken,
    },
    /// Who holds a lock (linearizable).
    Holders {
        /// Store.
        store: StoreId,
        /// Lock name.
        name: String,
    },
    /// Locks held under a prefix (linearizable).
    LocksUnder {
        /// Store.
        store: StoreId,
        /// Prefix path.
        prefix: String,
    },
    /// An object request (seed 001; DESIGN §5).
    Object {
        /// Store.
        store: StoreId,
        /// The request.
        req: ObjectRequest,
    },
}

/// Who makes an object change, for idempotent retries and ephemeral objects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Writer {
    /// The client's session in the store, if it has one.
    pub session: Option<SessionId>,
    /// Idempotency key (0: none): a retry with the same session and id returns the
    /// first attempt's outcome.
    pub request_id: u64,
}

impl Writer {
    /// The `(session, request id)` pair a retry is recognised by.
    pub fn request(&self) -> Option<(SessionId, u64)> {
        match (self.session, self.request_id) {
            (Some(s), r) if r != 0 => Some((s, r)),
            _ => None,
        }
    }
}

/// Object requests.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ObjectRequest {
    /// Upload a whole object (up to `max_object_size`).
    Put {
        /// Key (a path in the store).
        key: String,
        /// Content.
        data: crate::objects::Bytes,
        /// Who writes.
        writer: Writer,
        /// Conditions.
        cond: crate::objects::Conditions,
        /// Delete the object when the writer's session ends.
        ephemeral: bool,
    },
    /// Read the active object (linearizable).
    Get {
        /// Key.
        key: String,
    },
    /// Describe the active object without its data.
    Head {
        /// Key.
        key: String,
    },
    /// Delete the active object.
    Delete {
        /// Key.
        key: String,
        /// Who deletes.
        writer: Writer,
        /// Conditions.
        cond: crate::objects::Conditions,
    },
    /// Active objects at a prefix or below.
    List {
        /// Prefix path (`/` for every object of the store).
        prefix: String,
    },
    /// Start a multipart upload.
    MultipartInitiate {
        /// Key.
        key: String,
        /// Who uploads.
        writer: Writer,
    },
    /// Upload (or upload again) one part.
    MultipartPart {
        /// Key.
        key: String,
        /// The upload.
        upload: crate::objects::Uuid,
        /// Part number (1 and up).
        part: u32,
        /// Content of the part.
        data: crate::objects::Bytes,
    },
    /// Complete a multipart upload with these parts, in order.
    MultipartComplete {
        /// Key.
        key: String,
        /// The upload.
        upload: crate::objects::Uuid,
        /// Parts to keep, in order.
        parts: Vec<u32>,
        /// Who completes.
        writer: Writer,
        /// Conditions.
        cond: crate::objects::Conditions,
    },
    /// Abort a multipart upload.
    MultipartAbort {
        /// Key.
        key: String,
        /// The upload.
        upload: crate::objects::Uuid,
    },
    /// Watch changes at a prefix or below, after a revision (none: from now).
    Watch {
        /// The client's id for this watch (echoed in its events).
        watch: u64,
        /// Prefix path.
        prefix: String,
        /// Deliver changes after this revision.
        after: Option<u64>,
    },
    /// Stop a watch.
    Unwatch {
        /// The watch.
        watch: u64,
    },
}

impl Request {
    /// The store the request is for.
    pub fn store(&self) -> StoreId {
        match self {
            Request::Write { store, .. }
            | Request::OpenSession { store, .. }
            | Request::KeepAlive { store, .. }
            | Request::CloseSession { store, .. }
            | Request::Acquire { store, .. }
            | Request::Release { store, .. }
            | Request::ReleaseFenced { store, .. }
            | Request::Holders { store, .. }
            | Request::LocksUnder { store, .. }
            | Request::Object { store, .. } => *store,
        }
    }
}

/// Successful replies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Response {
    /// The write is durable on every live chunk of the store.
    Written {
        /// Version assigned.
        version: Version,
    },
    /// A session was opened.
    SessionOpened {
        /// Its id.
        session: SessionId,
        /// Its time to live.
        ttl: std::time::Duration,
    },
    /// A keep-alive was accepted: the session lives at least `ttl` past the request's
    /// arrival (the client's deadline is its send time + ttl − δ_c).
    KeptAlive {
        /// The session's time to live.
        ttl: std::time::Duration,
    },
    /// The session was closed.
    SessionClosed,
    /// The lock is held; resources should reject requests with an older token.
    Granted {
        /// The fencing token of this grant.
        token: FencingToken,
    },
    /// The lock was released.
    Released,
    /// Holders of a lock.
    Holders(Vec<HolderInfo>),
    /// Locks under a prefix.
    Locks(Vec<LockInfo>),
    /// A lookup reply.
    Lookup(crate::lookup::LookupResponse),
    /// An object became active.
    ObjectWritten {
        /// Its revision.
        revision: u64,
        /// Its upload.
        uuid: crate::objects::Uuid,
    },
    /// An object was deleted.
    ObjectDeleted {
        /// Revision of the deletion.
        revision: u64,
    },
    /// An object with its content.
    Object {
        /// Its description.
        meta: crate::objects::ObjectMeta,
        /// Its content.
        data: crate::objects::Bytes,
    },
    /// An object's description (`Head`).
    ObjectMeta(crate::objects::ObjectMeta),
    /// Objects under a prefix, and the store's object revision they were read at.
    Objects {
        /// The store's object revision.
        revision: u64,
        /// The objects.
        objects: Vec<crate::objects::ObjectMeta>,
    },
    /// A multipart upload started.
    UploadStarted {
        /// Its id.
        upload: crate::objects::Uuid,
    },
    /// A part is durable on every live chunk.
    PartStored {
        /// Part number.
        part: u32,
        /// CRC-32 of its content.
        checksum: u32,
    },
    /// A multipart upload was aborted.
    UploadAborted,
    /// A watch is registered; its events follow, from after `revision`.
    Watching {
        /// Changes after this revision are delivered.
        revision: u64,
    },
    /// A watch was removed.
    Unwatched,
}

/// Typed client errors (DESIGN §8).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ClientError {
    /// This device does not manage the store; try `hint`.
    #[error("not the manager of this store (try {hint:?})")]
    NotManager {
        /// Where the manager may be.
        hint: Option<DeviceId>,
    },
    /// The store has no quorum or coverage reachable here, or is changing layout.
    #[error("store {store} is unavailable")]
    Unavailable {
        /// The store.
        store: StoreId,
    },
    /// Unknown store.
    #[error("unknown store {0}")]
    UnknownStore(StoreId),
    /// The session expired (or never existed in this store).
    #[error("session expired")]
    SessionExpired,
    /// The lock cannot be granted now (a `try` acquire).
    #[error("lock is held")]
    WouldBlock,
    /// This wait would close a cycle in the waits-for graph; it was refused.
    #[error("deadlock")]
    Deadlock,
    /// The wait timed out.
    #[error("timed out")]
    Timeout,
    /// Malformed lock name, or a name that does not belong to the store.
    #[error("invalid name: {0}")]
    InvalidName(String),
    /// The session does not hold the lock.
    #[error("lock not held")]
    NotHeld,
    /// The request conflicts with what the session already holds or asked for.
    #[error("rejected: {0}")]
    Rejected(String),
    /// A lookup error.
    #[error(transparent)]
    Lookup(#[from] crate::lookup::LookupError),
    /// A value, object or key larger than the configured limit.
    #[error("too large: {size} bytes (limit {limit})")]
    TooLarge {
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// A fenced write or release presented a token that is not the lock's current one.
    #[error("stale fencing token (current: {current:?})")]
    StaleToken {
        /// The lock's current holder's token, if it is held.
        current: Option<FencingToken>,
    },
    /// An object error.
    #[error(transparent)]
    Object(#[from] crate::objects::ObjectError),
}

/// One output of a device. Outputs are ordered: a `Persist` must be durable before any
/// later `Send` or `Reply` of the same batch leaves the device.
#[derive(Clone, Debug, PartialEq)]
#[must_use]
// Values are moved, not copied, once each; boxing the large variant would add an
// allocation per message for no gain.
#[allow(clippy::large_enum_variant)]
pub enum Output {
    /// Send a message.
    Send {
        /// Destination.
        to: DeviceId,
        /// Message.
        msg: Msg,
    },
    /// Make a change to persistent state durable.
    Persist(PersistOp),
    /// Answer a client.
    Reply {
        /// Client.
        client: ClientId,
        /// Request id.
        req_id: u64,
        /// Result.
        result: Result<Response, ClientError>,
    },
    /// The earliest timer is now at this instant (call `handle(now, Tick)` then).
    SetTimer(Instant),
    /// Something checkers and metrics want to know about (no effect on the protocol).
    Observe(Observation),
    /// An event for a lookup subscription whose subscriber talks to this device.
    LookupEvent(crate::lookup::SubEvent),
    /// Object changes for a watch, in revision order.
    ObjectEvents {
        /// The watching client.
        client: ClientId,
        /// The client's watch id.
        watch: u64,
        /// The changes.
        changes: Vec<crate::objects::Change>,
    },
    /// A watch ended (its manager stopped managing the store): resume elsewhere from
    /// the last revision seen.
    WatchEnded {
        /// The watching client.
        client: ClientId,
        /// The client's watch id.
        watch: u64,
        /// Why, and where to go.
        reason: ClientError,
    },
    /// A snapshot started here ([`Input::StartSnapshot`], or scheduled by the
    /// coordinator).
    SnapshotStarted {
        /// Its id.
        id: crate::snapshot::SnapshotId,
    },
    /// This device's recorded part of a snapshot: made durable by the driver before any
    /// later output of the batch is sent.
    SnapshotPart(Box<crate::snapshot::SnapshotPart>),
    /// A snapshot this device initiated ended.
    SnapshotEnded {
        /// Its id.
        id: crate::snapshot::SnapshotId,
        /// The devices whose parts make it up, or why it failed.
        result: Result<SnapshotSummary, String>,
    },
}

/// A completed snapshot, as its initiator knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotSummary {
    /// Devices whose parts make up the snapshot.
    pub devices: Vec<DeviceId>,
    /// §14.2 termination detection: every device answered Done, so no message was in
    /// flight at the cut (the recorded channels are all empty).
    pub terminated: bool,
}

/// Persistent state of one chunk (the bold-face variables of seed 000 §4.1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChunkPersist {
    /// Identity.
    pub id: ChunkId,
    /// The store it replicates.
    pub store: StoreId,
    /// Current epoch.
    pub epoch: Epoch,
    /// Metadata of that epoch.
    pub metadata: Metadata,
    /// The manager that granted the last lease (seeds the regeneration queue on restart).
    pub lease_mgr: Option<DeviceId>,
    /// The uncommitted epoch transition this chunk voted for (SafeTalk prepare log).
    pub prepared: Option<Prepared>,
    /// The highest earlier transition it voted for and never saw committed: a vote for a
    /// newer one, later aborted, must not make the chunk forget that this one may have
    /// committed elsewhere.
    #[serde(default)]
    pub known: Option<Prepared>,
    /// The store's contents.
    pub data: StoreData,
}

impl ChunkPersist {
    /// The record without its tables' rows ([`crate::rows::head`]): what storage that
    /// keeps the rows apart writes as the chunk's record.
    pub fn head(&self) -> ChunkPersist {
        ChunkPersist {
            data: crate::data::StoreData {
                table: crate::rows::head(&self.data.table),
                confirmed: self.data.confirmed,
                l_list: self.data.l_list.clone(),
                r_list: self.data.r_list.clone(),
            },
            prepared: self.prepared.clone(),
            known: self.known.clone(),
            metadata: self.metadata.clone(),
            ..*self
        }
    }
}

/// How often (in deltas) a chunk hands its tables to its durable copy ([`TablesAfter`]).
pub const SHARE_TABLES_EVERY: u32 = 64;

/// A chunk's tables after an [`PersistOp::Accept`], with its confirmed number, handed to
/// whatever applies the delta to a copy of the chunk's record (the server's storage
/// thread, the simulator's disks): the copy takes these tables (an O(1) clone of
/// persistent maps, sharing every node with the chunk's) instead of applying the changes
/// again to tables of its own — a device held each chunk's tables twice before
/// ([`crate::safetalk::Replica::accept_batch_adopting`]). Not part of the change: never
/// encoded (a delta read back from the log has none and is applied), and ignored by
/// equality.
#[derive(Clone, Debug, Default)]
pub struct TablesAfter(pub Option<std::sync::Arc<(Version, crate::data::Tables)>>);

impl PartialEq for TablesAfter {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// A durable change.
///
/// The SafeTalk ACCEPTs of a serving chunk are persisted as deltas (`Accept`) rather than
/// whole records, so the bytes written per batch do not grow with the store's tables;
/// every [`CHECKPOINT_EVERY`] deltas the chunk writes its whole record again
/// (`PutChunk`), which supersedes the deltas before it. Applying a delta runs the same
/// deterministic code the chunk ran (`StoreData::accept_batch`), so a record rebuilt
/// from a checkpoint and its deltas equals the chunk's own, but for CONFIRMs received
/// since (which a chunk does not persist on their own).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PersistOp {
    /// Write (create or replace) a chunk's persistent state.
    PutChunk(Box<ChunkPersist>),
    /// SafeTalk ACCEPT at a chunk: keep `ops` pending, then confirm up to `confirm`.
    Accept {
        /// The chunk.
        chunk: ChunkId,
        /// The accepted changes, in sequence order.
        ops: Vec<(Version, crate::data::StoreOp)>,
        /// The piggybacked CONFIRM.
        confirm: Version,
        /// The chunk's own tables after the batch, for a durable copy to share
        /// ([`TablesAfter`]; never written).
        #[serde(skip)]
        after: TablesAfter,
    },
    /// Delete a chunk (garbage collect).
    RemoveChunk(ChunkId),
    /// Advance the device's chunk serial counter (before the serial is used).
    SetNextSerial(u64),
    /// Write (create or replace) a persistent lookup entry or tombstone.
    LookupPut(Box<crate::lookup::Entry>),
    /// Delete a persistent lookup entry.
    LookupRemove(String),
    /// Store an object block at a chunk.
    BlockPut {
        /// The chunk.
        chunk: ChunkId,
        /// The block.
        id: crate::objects::BlockId,
        /// Its data.
        data: crate::objects::Bytes,
    },
    /// Delete object blocks at a chunk.
    BlockDelete {
        /// The chunk.
        chunk: ChunkId,
        /// The blocks.
        ids: Vec<crate::objects::BlockId>,
    },
    /// The newest coordinator term this device has seen (DESIGN §6): commands of older
    /// terms are refused, also after a restart.
    SetTerm(crate::election::Term),
    /// The newest membership record seen (DESIGN §6).
    SetMembers(Box<crate::election::members::Members>),
    /// The snapshots this device has recorded, newest last (the most recent ones): a
    /// device restarted in the middle of one never records it a second time.
    SetSnapshots(Vec<crate::snapshot::SnapshotId>),
}

/// All persistent state of a device: what survives a crash.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DevicePersist {
    /// Next chunk serial to hand out.
    pub next_serial: u64,
    /// The device's chunks.
    pub chunks: BTreeMap<ChunkId, ChunkPersist>,
    /// Persistent lookup entries and tombstones, by key.
    #[serde(default)]
    pub lookup: BTreeMap<String, crate::lookup::Entry>,
    /// Object blocks, by chunk.
    #[serde(default)]
    pub blocks: BTreeMap<ChunkId, BTreeMap<crate::objects::BlockId, crate::objects::Bytes>>,
    /// The newest coordinator term seen ([`PersistOp::SetTerm`]).
    #[serde(default)]
    pub term: crate::election::Term,
    /// The newest membership record seen ([`PersistOp::SetMembers`]; none: the
    /// configured devices).
    #[serde(default)]
    pub members: Option<crate::election::members::Members>,
    /// The snapshots recorded here, newest last ([`PersistOp::SetSnapshots`]).
    #[serde(default)]
    pub snapshots: Vec<crate::snapshot::SnapshotId>,
}

/// By default, a chunk writes its whole record after this many delta persists in a row
/// ([`crate::DeviceConfig::whole_record_every`]).
///
/// The whole record holds the store's tables, idempotency records included (up to
/// `request_window` results per session), so it can be a megabyte where a delta is a few
/// hundred bytes; writing it every 64 batches cost the server about a tenth of its CPU
/// under lock load (cloning, encoding and logging it). The record only bounds how many
/// deltas a reader replays; the server's log checkpoints whole records on its own, and
/// which persist carries a chunk's state changes nothing the chunk decides.
pub const CHECKPOINT_EVERY: u32 = 1024;

impl PersistOp {
    /// The chunk a change is about (none for the device's serial counter).
    pub fn chunk(&self) -> Option<ChunkId> {
        match self {
            PersistOp::PutChunk(c) => Some(c.id),
            PersistOp::Accept { chunk, .. }
            | PersistOp::RemoveChunk(chunk)
            | PersistOp::BlockPut { chunk, .. }
            | PersistOp::BlockDelete { chunk, .. } => Some(*chunk),
            PersistOp::SetNextSerial(_)
            | PersistOp::LookupPut(_)
            | PersistOp::LookupRemove(_)
            | PersistOp::SetTerm(_)
            | PersistOp::SetMembers(_)
            | PersistOp::SetSnapshots(_) => None,
        }
    }

    /// Apply a delta (`Accept`) to a chunk record; other changes are not deltas and
    /// leave it alone.
    pub fn apply_delta(&self, rec: &mut ChunkPersist) {
        if let PersistOp::Accept {
            ops,
            confirm,
            after,
            ..
        } = self
        {
            match &after.0 {
                Some(a) => rec.data.accept_batch_adopting(ops, *confirm, a),
                None => rec.data.accept_batch(ops, *confirm),
            }
        }
    }
}

impl DevicePersist {
    /// [`Self::apply`], taking the change: a whole record is moved in, not copied.
    pub fn apply_owned(&mut self, op: PersistOp) {
        match op {
            PersistOp::PutChunk(c) => {
                self.chunks.insert(c.id, *c);
            }
            op => self.apply(&op),
        }
    }

    /// Apply a durable change.
    pub fn apply(&mut self, op: &PersistOp) {
        match op {
            PersistOp::PutChunk(c) => {
                self.chunks.insert(c.id, (**c).clone());
            }
            PersistOp::Accept { chunk, .. } => {
                // A delta for a chunk without a record cannot happen: a chunk persists
                // its record when it is created, before it serves.
                if let Some(rec) = self.chunks.get_mut(chunk) {
                    op.apply_delta(rec);
                }
            }
            PersistOp::RemoveChunk(id) => {
                self.chunks.remove(id);
                self.blocks.remove(id);
            }
            PersistOp::BlockPut { chunk, id, data } => {
                self.blocks
                    .entry(*chunk)
                    .or_default()
                    .insert(*id, data.clone());
            }
            PersistOp::BlockDelete { chunk, ids } => {
                if let Some(b) = self.blocks.get_mut(chunk) {
                    for id in ids {
                        b.remove(id);
                    }
                    // A chunk without blocks has no entry (as `Device::persistent` shows
                    // it).
                    if b.is_empty() {
                        self.blocks.remove(chunk);
                    }
                }
            }
            PersistOp::SetNextSerial(n) => self.next_serial = *n,
            PersistOp::LookupPut(e) => {
                self.lookup.insert(e.key.clone(), (**e).clone());
            }
            PersistOp::LookupRemove(k) => {
                self.lookup.remove(k);
            }
            PersistOp::SetTerm(t) => self.term = self.term.max(*t),
            PersistOp::SetMembers(m) => {
                if self.members.as_ref().is_none_or(|o| o.version < m.version) {
                    self.members = Some((**m).clone());
                }
            }
            PersistOp::SetSnapshots(ids) => self.snapshots = ids.clone(),
        }
    }
}

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
