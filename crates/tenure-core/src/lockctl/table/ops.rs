//! The LOCK table's operations, their results, and the views it gives of itself.

use crate::ids::Epoch;
use crate::ids::SessionId;
use crate::lockctl::mode::LockMode;
use crate::lockctl::name::{InvalidName, LockName};
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use thiserror::Error;

/// A client-chosen id, unique per session, that makes a request idempotent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RequestId(pub u64);

/// Arrival order of a wait: global across the table, so "earlier" is well defined between
/// waits on different (overlapping) names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Ticket(pub u64);

/// A fencing token. Ordered by epoch, then sequence number; every grant of the table gets a
/// token larger than every earlier grant's, so tokens strictly increase per lock, across
/// manager changes too, since a new manager runs in a larger epoch.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct FencingToken {
    /// The store epoch of the manager that granted.
    pub epoch: Epoch,
    /// The table's grant counter.
    pub seq: u64,
}

/// `epoch.seq`, as clients and the CLI show a token.
impl std::fmt::Display for FencingToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.epoch.0, self.seq)
    }
}

/// How long an acquire may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Wait {
    /// Grant now or fail with [`AcquireError::WouldBlock`].
    Try,
    /// Queue until granted or until this deadline ([`AcquireError::Timeout`]).
    Until(Instant),
    /// Queue until granted, the session ends, or a deadlock picks this wait.
    Forever,
}

/// One acquire request, as replicated by the store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acquire {
    /// The requesting session.
    pub session: SessionId,
    /// Idempotency key within the session.
    pub request_id: RequestId,
    /// The lock name, validated by the table.
    pub name: String,
    /// Requested mode.
    pub mode: LockMode,
    /// Try, or wait with or without a deadline.
    pub wait: Wait,
    /// The lock-delay of this hold if its session expires (none: the table's
    /// [`LockTableConfig::lock_delay`]). At most [`MAX_LOCK_DELAY`]; longer values are
    /// capped.
    #[serde(default)]
    pub lock_delay: Option<Duration>,
}

/// The longest lock-delay a request may ask for (Chubby's limit).
pub const MAX_LOCK_DELAY: Duration = Duration::from_secs(60);

/// A granted lock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The lock.
    pub name: LockName,
    /// The new holder.
    pub session: SessionId,
    /// The request that asked for it.
    pub request_id: RequestId,
    /// The granted mode.
    pub mode: LockMode,
    /// The fencing token of this grant.
    pub token: FencingToken,
    /// The ticket of the wait, if the request was queued before being granted.
    pub ticket: Option<Ticket>,
}

/// The successful answer to an acquire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Acquired {
    /// Granted at once (or earlier, for a replayed request).
    Granted(Grant),
    /// Queued; a later `release`, `tick`, `expire_waits` or `release_session` grants it.
    Queued {
        /// The wait's ticket.
        ticket: Ticket,
        /// Number of waits ahead of it in this lock's FIFO queue.
        position: usize,
    },
}

/// Why an acquire failed, or why a wait ended without a grant.
#[derive(Clone, Debug, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum AcquireError {
    /// Malformed lock name.
    #[error("invalid lock name: {0}")]
    InvalidName(#[from] InvalidName),
    /// A `Try` acquire found a conflicting holder, an earlier conflicting waiter, or the
    /// lock-delay of an expired holder.
    #[error("lock is not available now")]
    WouldBlock,
    /// Waiting would close a cycle in the waits-for graph; this request is the youngest
    /// wait on the cycle (sessions listed from the requester along the blocking edges).
    #[error("deadlock: waiting would close the cycle {cycle:?}")]
    Deadlock {
        /// The sessions on the cycle, starting with the requester.
        cycle: Vec<SessionId>,
    },
    /// The wait's deadline passed before it could be granted.
    #[error("timed out waiting for the lock")]
    Timeout,
    /// The session was released (expired or closed) while the request waited.
    #[error("the session ended while waiting")]
    SessionEnded,
    /// The session already holds this lock (upgrades are not supported).
    #[error("the session already holds this lock in mode {mode:?}")]
    AlreadyHeld {
        /// The mode held.
        mode: LockMode,
        /// The token of the existing grant.
        token: FencingToken,
    },
    /// The session already waits for this lock.
    #[error("the session already waits for this lock")]
    AlreadyWaiting {
        /// The existing wait.
        ticket: Ticket,
    },
    /// The request id is older than the session's idempotency window: its result was
    /// forgotten, so it is neither replayed nor executed again.
    #[error("request id {} is older than the session's idempotency window", request_id.0)]
    StaleRequest {
        /// The rejected id.
        request_id: RequestId,
    },
    /// The request id was already used by this session for a different request.
    #[error("request id {} was used by this session for a different request", request_id.0)]
    RequestMismatch {
        /// The reused id.
        request_id: RequestId,
    },
}

/// Why a release failed. A failed release changes nothing.
#[derive(Clone, Debug, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum ReleaseError {
    /// Malformed lock name.
    #[error("invalid lock name: {0}")]
    InvalidName(#[from] InvalidName),
    /// The session does not hold the lock.
    #[error("session {} does not hold {name}", session.0)]
    NotHeld {
        /// The lock.
        name: LockName,
        /// The session.
        session: SessionId,
    },
    /// The request id is older than the session's idempotency window.
    #[error("request id {} is older than the session's idempotency window", request_id.0)]
    StaleRequest {
        /// The rejected id.
        request_id: RequestId,
    },
    /// The request id was already used by this session for a different request.
    #[error("request id {} was used by this session for a different request", request_id.0)]
    RequestMismatch {
        /// The reused id.
        request_id: RequestId,
    },
}

/// A manager tried to move the table to an older epoch.
#[derive(Clone, Debug, PartialEq, Eq, Error, Serialize, Deserialize)]
#[error("epoch {proposed} is older than the table's epoch {current}")]
pub struct StaleEpoch {
    /// The table's epoch.
    pub current: Epoch,
    /// The rejected epoch.
    pub proposed: Epoch,
}

/// A wait that ended without a grant; the client of `(session, request_id)` is told `error`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndedWait {
    /// The lock waited for.
    pub name: LockName,
    /// The waiting session.
    pub session: SessionId,
    /// The waiting request.
    pub request_id: RequestId,
    /// The wait's ticket.
    pub ticket: Ticket,
    /// [`AcquireError::Timeout`] or [`AcquireError::SessionEnded`].
    pub error: AcquireError,
}

/// Waits that a time-driven input granted or ended.
#[must_use]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wakeups {
    /// Newly granted waits, in grant (ticket) order.
    pub granted: Vec<Grant>,
    /// Waits that ended without a grant.
    pub ended: Vec<EndedWait>,
}

/// A lock a session held when it was released.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Released {
    /// The lock.
    pub name: LockName,
    /// Its mode.
    pub mode: LockMode,
    /// The token of the released grant.
    pub token: FencingToken,
}

/// Everything a session release changed.
#[must_use]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRelease {
    /// Locks the session held.
    pub released: Vec<Released>,
    /// The session's waits, ended with [`AcquireError::SessionEnded`].
    pub cancelled: Vec<EndedWait>,
    /// Other sessions' waits granted as a consequence (none on lock-delayed names).
    pub granted: Vec<Grant>,
}

/// A holder, as returned by queries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderInfo {
    /// The holding session.
    pub session: SessionId,
    /// Held mode.
    pub mode: LockMode,
    /// Fencing token of the grant.
    pub token: FencingToken,
    /// The request that was granted.
    pub request_id: RequestId,
    /// When it was granted (the manager's clock).
    pub granted_at: Instant,
}

/// A waiter, as returned by queries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaiterInfo {
    /// The waiting session.
    pub session: SessionId,
    /// The waiting request.
    pub request_id: RequestId,
    /// Requested mode.
    pub mode: LockMode,
    /// Arrival order.
    pub ticket: Ticket,
    /// Deadline, if any.
    pub deadline: Option<Instant>,
}

/// One lock's state, as returned by [`LockTable::locks_under`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockInfo {
    /// The lock.
    pub name: LockName,
    /// Current holders (several only when shared).
    pub holders: Vec<HolderInfo>,
    /// Its FIFO queue, oldest first.
    pub waiters: Vec<WaiterInfo>,
    /// End of the lock-delay after an expiry-release, if still in force at the last input.
    pub delayed_until: Option<Instant>,
}

/// Tunables of a lock table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LockTableConfig {
    /// After a session expiry releases a lock, nobody is granted that name (nor an
    /// overlapping name in a conflicting mode) for this long (Chubby's lock-delay).
    pub lock_delay: Duration,
    /// How many request results each session's idempotency record keeps. Older results
    /// are forgotten; a replay of a forgotten id gets [`AcquireError::StaleRequest`].
    pub request_window: usize,
}

impl Default for LockTableConfig {
    fn default() -> Self {
        LockTableConfig {
            lock_delay: Duration::from_secs(1),
            request_window: 1024,
        }
    }
}

/// The inputs of the table as one replicable value, for [`LockTable::apply`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockOp {
    /// [`LockTable::acquire`].
    Acquire(Acquire),
    /// [`LockTable::release`] (a release without an idempotency key).
    Release {
        /// The lock.
        name: String,
        /// The holder.
        session: SessionId,
    },
    /// [`LockTable::expire_waits`].
    ExpireWaits,
    /// [`LockTable::release_session`] (expiry: with lock-delay).
    ReleaseSession(SessionId),
    /// [`LockTable::close_session`] (graceful: no lock-delay).
    CloseSession(SessionId),
    /// [`LockTable::tick`].
    Tick,
    /// [`LockTable::begin_epoch`].
    BeginEpoch(Epoch),
    /// [`LockTable::release_request`]: a release keyed by `(session, request_id)`. A
    /// variant of its own, after the others, so that records written before it existed
    /// decode unchanged.
    ReleaseRequest {
        /// The lock.
        name: String,
        /// The holder.
        session: SessionId,
        /// Idempotency key within the session.
        request_id: RequestId,
    },
}

/// The answer to one [`LockOp`].
#[must_use]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockOpResult {
    /// Answer to [`LockOp::Acquire`].
    Acquire(Result<Acquired, AcquireError>),
    /// Answer to [`LockOp::Release`].
    Release(Result<Vec<Grant>, ReleaseError>),
    /// Answer to [`LockOp::ExpireWaits`] and [`LockOp::Tick`].
    Wakeups(Wakeups),
    /// Answer to [`LockOp::ReleaseSession`] and [`LockOp::CloseSession`].
    Session(SessionRelease),
    /// Answer to [`LockOp::BeginEpoch`].
    Epoch(Result<(), StaleEpoch>),
}
