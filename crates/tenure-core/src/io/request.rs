//! Client requests the core understands, and their successful answers (errors are
//! [`crate::error::ClientError`]).

use crate::ids::{SessionId, StoreId, Version};
use crate::lockctl::{FencingToken, HolderInfo, LockInfo, LockMode};
use serde::{Deserialize, Serialize};

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
    /// Ask for (`child: None`) or record a session's child session in another store
    /// (DESIGN §4, "One session per client"). Made by the device serving a client's
    /// request under the session, never by a client.
    #[serde(serialize_with = "crate::generation::only_groups")]
    AttachSession(AttachSession),
    /// A request under a client's session of another store (`home`): the request's own
    /// session field names that session, and the device serving it runs the request
    /// under the session's child in the request's store (DESIGN §4). Never forwarded.
    #[serde(serialize_with = "crate::generation::only_groups")]
    Under(Under),
}

/// [`Request::AttachSession`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachSession {
    /// The session's store.
    pub store: StoreId,
    /// The session.
    pub session: SessionId,
    /// The store of the child.
    pub child_store: StoreId,
    /// The child to record (none: only ask).
    pub child: Option<SessionId>,
}

/// [`Request::Under`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Under {
    /// The store of the client's session.
    pub home: StoreId,
    /// The request, its session field naming the client's session.
    pub req: Box<Request>,
}

/// [`Response::SessionAttached`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attached {
    /// The session's child in the store asked about (none: it has none yet).
    pub child: Option<SessionId>,
    /// The session's time to live.
    pub ttl: std::time::Duration,
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
        /// Carry each new content's value when the table holds it whole (an inline
        /// object not yet replaced).
        values: bool,
    },
    /// One round of a watch forwarded from another device (DESIGN §8): answered
    /// [`Response::Polled`] with the changes after `after` as soon as there are any, or
    /// empty after a while. Made by the forwarding device, never by a client.
    Poll {
        /// The forwarding device's key for the watch (unique per device; a newer poll
        /// with the same key replaces one still waiting).
        key: u64,
        /// Prefix path.
        prefix: String,
        /// Changes after this revision (none: answer the current revision at once).
        after: Option<u64>,
        /// As for [`ObjectRequest::Watch`].
        values: bool,
        /// Wait for a change when there is none yet (the first round of a watch does
        /// not: its answer tells the client the watch is registered).
        wait: bool,
    },
    /// Stop a watch.
    Unwatch {
        /// The watch.
        watch: u64,
    },
}

impl Request {
    /// Whether it only reads committed state (DESIGN §4, reads): object get, head and
    /// list, lock holders and listings.
    pub fn is_read(&self) -> bool {
        match self {
            Request::Holders { .. } | Request::LocksUnder { .. } => true,
            Request::Object { req, .. } => matches!(
                req,
                ObjectRequest::Get { .. } | ObjectRequest::Head { .. } | ObjectRequest::List { .. }
            ),
            _ => false,
        }
    }

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
            | Request::Object { store, .. }
            | Request::AttachSession(AttachSession { store, .. }) => *store,
            Request::Under(u) => u.req.store(),
        }
    }

    /// The session a request runs under, if it names one.
    pub fn session(&self) -> Option<SessionId> {
        match self {
            Request::KeepAlive { session, .. }
            | Request::CloseSession { session, .. }
            | Request::Acquire { session, .. }
            | Request::Release { session, .. }
            | Request::ReleaseFenced { session, .. } => Some(*session),
            Request::Object { req, .. } => req.writer().and_then(|w| w.session),
            Request::AttachSession(a) => Some(a.session),
            Request::Under(u) => u.req.session(),
            Request::Write { .. }
            | Request::OpenSession { .. }
            | Request::Holders { .. }
            | Request::LocksUnder { .. } => None,
        }
    }

    /// Run the request under another session (a child: [`Request::Under`]); a request
    /// that names none is unchanged.
    pub fn set_session(&mut self, to: SessionId) {
        match self {
            Request::KeepAlive { session, .. }
            | Request::CloseSession { session, .. }
            | Request::Acquire { session, .. }
            | Request::Release { session, .. }
            | Request::ReleaseFenced { session, .. } => *session = to,
            Request::Object { req, .. } => {
                if let Some(w) = req.writer_mut() {
                    w.session = w.session.map(|_| to);
                }
            }
            Request::AttachSession(a) => a.session = to,
            Request::Under(u) => u.req.set_session(to),
            Request::Write { .. }
            | Request::OpenSession { .. }
            | Request::Holders { .. }
            | Request::LocksUnder { .. } => {}
        }
    }
}

impl ObjectRequest {
    /// Who writes, for the requests that say.
    pub fn writer(&self) -> Option<&Writer> {
        match self {
            ObjectRequest::Put { writer, .. }
            | ObjectRequest::Delete { writer, .. }
            | ObjectRequest::MultipartInitiate { writer, .. }
            | ObjectRequest::MultipartComplete { writer, .. } => Some(writer),
            _ => None,
        }
    }

    /// [`Self::writer`], to change.
    pub fn writer_mut(&mut self) -> Option<&mut Writer> {
        match self {
            ObjectRequest::Put { writer, .. }
            | ObjectRequest::Delete { writer, .. }
            | ObjectRequest::MultipartInitiate { writer, .. }
            | ObjectRequest::MultipartComplete { writer, .. } => Some(writer),
            _ => None,
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
        /// The session's child sessions in other stores (DESIGN §4): the device that
        /// serves the client's keep-alive renews them too before it answers.
        #[serde(with = "crate::generation::session_children")]
        children: std::collections::BTreeMap<StoreId, SessionId>,
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
    /// The answer to a [`ObjectRequest::Poll`]: the changes after its `after` up to
    /// `revision` (none when it waited in vain).
    Polled {
        /// The store's object revision the changes reach.
        revision: u64,
        /// The changes, in revision order.
        changes: Vec<crate::objects::Change>,
        /// Their values, as for [`crate::io::Output::ObjectEvents`].
        values: Vec<Option<crate::objects::Bytes>>,
    },
    /// A session's child in a store ([`Request::AttachSession`]).
    #[serde(serialize_with = "crate::generation::only_groups")]
    SessionAttached(Attached),
}
