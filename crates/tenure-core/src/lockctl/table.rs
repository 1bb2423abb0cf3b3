//! The LOCK table proper: holders, FIFO wait queues, fencing tokens, lock-delay ghosts,
//! idempotency records and the waits-for graph. See the module docs of [`super`].

use super::mode::{LockMode, conflicts};
use super::name::{InvalidName, LockName};
use crate::ids::Epoch;
pub use crate::ids::SessionId;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
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
    #[error("request {request_id:?} is older than the idempotency window")]
    StaleRequest {
        /// The rejected id.
        request_id: RequestId,
    },
    /// The request id was already used by this session for a different request.
    #[error("request {request_id:?} was used for a different request")]
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
    #[error("session {session:?} does not hold {name}")]
    NotHeld {
        /// The lock.
        name: LockName,
        /// The session.
        session: SessionId,
    },
    /// The request id is older than the session's idempotency window.
    #[error("request {request_id:?} is older than the idempotency window")]
    StaleRequest {
        /// The rejected id.
        request_id: RequestId,
    },
    /// The request id was already used by this session for a different request.
    #[error("request {request_id:?} was used for a different request")]
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

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Held {
    mode: LockMode,
    token: FencingToken,
    request_id: RequestId,
    granted_at: Instant,
    /// How long the name stays unavailable if the session expires holding it.
    lock_delay: Duration,
}

/// What is left of a lock released by a session expiry, during its lock-delay.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Ghost {
    until: Instant,
    mode: LockMode,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Entry {
    holders: crate::vecmap::VecMap<SessionId, Held>,
    queue: BTreeSet<Ticket>,
    ghost: Option<Ghost>,
}

impl Entry {
    fn is_empty(&self) -> bool {
        self.holders.is_empty() && self.queue.is_empty() && self.ghost.is_none()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Waiter {
    name: LockName,
    session: SessionId,
    request_id: RequestId,
    mode: LockMode,
    deadline: Option<Instant>,
    lock_delay: Duration,
}

impl Waiter {
    fn expired(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|d| d <= now)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Outcome {
    Granted(Grant),
    Waiting(Ticket),
    Failed(AcquireError),
    /// A keyed release that succeeded.
    Released,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    name: LockName,
    mode: LockMode,
    outcome: Outcome,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SessionState {
    held: BTreeSet<LockName>,
    waiting: BTreeMap<Ticket, LockName>,
    requests: BTreeMap<RequestId, Record>,
    /// Ids below this that are not in `requests` were forgotten.
    forgotten_below: u64,
}

/// The LOCK table of one store (seed 004 §2): a pure, deterministic state machine that the
/// store's manager (the lock controller) applies operations to after SafeTalk replicated
/// them, and that ships between replicas as a value.
///
/// - **inputs**: [`acquire`](Self::acquire), [`release`](Self::release),
///   [`release_session`](Self::release_session), [`close_session`](Self::close_session),
///   [`begin_epoch`](Self::begin_epoch), and the time-driven
///   [`expire_waits`](Self::expire_waits) and [`tick`](Self::tick) — or all of them as one
///   [`LockOp`] through [`apply`](Self::apply). Each takes the manager's `now`.
/// - **outputs**: each input's return value lists every grant and every ended wait it caused;
///   nothing is granted behind the caller's back.
/// - **timer**: [`next_deadline`](Self::next_deadline) is the earliest wait deadline or
///   lock-delay end; call [`tick`](Self::tick) at or after it (extra ticks are harmless).
/// - **getters**: [`holders`](Self::holders), [`waiters`](Self::waiters),
///   [`locks_under`](Self::locks_under), [`session_locks`](Self::session_locks).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockTable {
    config: LockTableConfig,
    epoch: Epoch,
    last_seq: u64,
    next_ticket: u64,
    #[serde(with = "crate::persist_serde::ord_map")]
    pub(crate) entries: imbl::OrdMap<LockName, Entry>,
    #[serde(with = "crate::persist_serde::ord_map")]
    pub(crate) waiters: imbl::OrdMap<Ticket, Waiter>,
    #[serde(with = "crate::persist_serde::ord_map")]
    pub(crate) sessions: imbl::OrdMap<SessionId, SessionState>,
    /// Planted bug (tests only): grant without looking for conflicts. Not replicated.
    #[serde(skip)]
    planted_skip_conflicts: bool,
    /// Planted bug (tests only): look for conflicts on the requested name only, not on
    /// its ancestors and descendants (no cover, no intention modes). Not replicated.
    #[serde(skip)]
    planted_ignore_cover: bool,
}

impl LockTable {
    /// An empty table whose grants carry `epoch` until [`begin_epoch`](Self::begin_epoch).
    pub fn new(config: LockTableConfig, epoch: Epoch) -> Self {
        LockTable {
            config,
            epoch,
            last_seq: 0,
            next_ticket: 0,
            entries: imbl::OrdMap::new(),
            waiters: imbl::OrdMap::new(),
            sessions: imbl::OrdMap::new(),
            planted_skip_conflicts: false,
            planted_ignore_cover: false,
        }
    }

    /// Plant (or remove) the skip-the-conflict-check bug, so the simulator's mutual
    /// exclusion and linearizability checkers can be shown to catch it.
    pub fn plant_skip_conflicts(&mut self, on: bool) {
        self.planted_skip_conflicts = on;
    }

    /// Plant (or remove) the ignore-the-cover-rule bug: conflicts are looked for on the
    /// requested name alone, so a lock on `/a` and a conflicting one on `/a/b` can both
    /// be granted. The simulator's checkers must judge the hierarchy to catch it.
    pub fn plant_ignore_cover(&mut self, on: bool) {
        self.planted_ignore_cover = on;
    }

    /// The configuration.
    pub fn config(&self) -> &LockTableConfig {
        &self.config
    }

    /// The epoch stamped on new fencing tokens.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// Applies one replicated operation.
    pub fn apply(&mut self, op: &LockOp, now: Instant) -> LockOpResult {
        match op {
            LockOp::Acquire(req) => LockOpResult::Acquire(self.acquire(req, now)),
            LockOp::Release { name, session } => {
                LockOpResult::Release(self.release(name, *session, now))
            }
            LockOp::ReleaseRequest {
                name,
                session,
                request_id,
            } => LockOpResult::Release(self.release_request(name, *session, *request_id, now)),
            LockOp::ExpireWaits => LockOpResult::Wakeups(self.expire_waits(now)),
            LockOp::ReleaseSession(s) => LockOpResult::Session(self.release_session(*s, now)),
            LockOp::CloseSession(s) => LockOpResult::Session(self.close_session(*s, now)),
            LockOp::Tick => LockOpResult::Wakeups(self.tick(now)),
            LockOp::BeginEpoch(e) => LockOpResult::Epoch(self.begin_epoch(*e)),
        }
    }

    /// A new manager stamps its (larger) epoch on every later token. The sequence counter
    /// is kept, so tokens increase even if a caller reuses an epoch.
    pub fn begin_epoch(&mut self, epoch: Epoch) -> Result<(), StaleEpoch> {
        if epoch < self.epoch {
            return Err(StaleEpoch {
                current: self.epoch,
                proposed: epoch,
            });
        }
        self.epoch = epoch;
        Ok(())
    }

    /// Asks for a lock. A replayed `(session, request_id)` returns the request's current
    /// result — its grant, its queue position while it waits, or its error — and changes
    /// nothing (DESIGN §4, idempotent retries).
    pub fn acquire(&mut self, req: &Acquire, now: Instant) -> Result<Acquired, AcquireError> {
        let name = LockName::parse(&req.name)?;
        if let Some(replayed) = self.replay(req, &name) {
            return replayed;
        }
        let result = self.acquire_new(req, &name, now);
        let outcome = match &result {
            Ok(Acquired::Granted(g)) => Outcome::Granted(g.clone()),
            Ok(Acquired::Queued { ticket, .. }) => Outcome::Waiting(*ticket),
            Err(e) => Outcome::Failed(e.clone()),
        };
        self.remember(req.session, req.request_id, name, req.mode, outcome);
        result
    }

    /// A release keyed by `(session, request_id)`: a replay of a release that succeeded
    /// answers `Ok` again and changes nothing (its grants were handed out the first time),
    /// instead of `NotHeld` (DESIGN §4, idempotent retries). A failed release is not
    /// recorded: it changed nothing, so its replay fails the same way or, if the lock was
    /// granted in between, releases it — as the first attempt arriving then would.
    pub fn release_request(
        &mut self,
        name: &str,
        session: SessionId,
        request_id: RequestId,
        now: Instant,
    ) -> Result<Vec<Grant>, ReleaseError> {
        let parsed = LockName::parse(name)?;
        if let Some(s) = self.sessions.get(&session) {
            match s.requests.get(&request_id) {
                Some(r) if r.name == parsed && r.outcome == Outcome::Released => {
                    return Ok(Vec::new());
                }
                Some(_) => return Err(ReleaseError::RequestMismatch { request_id }),
                None if request_id.0 < s.forgotten_below => {
                    return Err(ReleaseError::StaleRequest { request_id });
                }
                None => {}
            }
        }
        let mode = self
            .entries
            .get(&parsed)
            .and_then(|e| e.holders.get(&session))
            .map(|h| h.mode);
        let grants = self.release(name, session, now)?;
        // A release that succeeded found the session holding the lock, in `mode`.
        if let Some(mode) = mode {
            self.remember(session, request_id, parsed, mode, Outcome::Released);
        }
        Ok(grants)
    }

    /// Releases `session`'s lock on `name` and grants the waits this unblocks, in FIFO order.
    pub fn release(
        &mut self,
        name: &str,
        session: SessionId,
        now: Instant,
    ) -> Result<Vec<Grant>, ReleaseError> {
        let name = LockName::parse(name)?;
        let held = self
            .entries
            .get_mut(&name)
            .and_then(|e| e.holders.remove(&session));
        if held.is_none() {
            return Err(ReleaseError::NotHeld { name, session });
        }
        if let Some(s) = self.sessions.get_mut(&session) {
            s.held.remove(&name);
        }
        self.cleanup(&name);
        Ok(self.grant_waiters(now))
    }

    /// Ends every wait whose deadline is at or before `now` with [`AcquireError::Timeout`],
    /// then grants what that unblocked.
    pub fn expire_waits(&mut self, now: Instant) -> Wakeups {
        let expired: Vec<Ticket> = self
            .waiters
            .iter()
            .filter(|(_, w)| w.expired(now))
            .map(|(t, _)| *t)
            .collect();
        let ended = expired
            .into_iter()
            .map(|t| self.end_wait(t, AcquireError::Timeout))
            .collect();
        Wakeups {
            granted: self.grant_waiters(now),
            ended,
        }
    }

    /// Time passes: lock-delays that ended are dropped, expired waits end, and waits that
    /// became grantable are granted.
    pub fn tick(&mut self, now: Instant) -> Wakeups {
        let over: Vec<LockName> = self
            .entries
            .iter()
            .filter(|(_, e)| e.ghost.as_ref().is_some_and(|g| g.until <= now))
            .map(|(n, _)| n.clone())
            .collect();
        for name in over {
            if let Some(e) = self.entries.get_mut(&name) {
                e.ghost = None;
            }
            self.cleanup(&name);
        }
        self.expire_waits(now)
    }

    /// A session expired: releases all its locks and ends its waits. Each released name
    /// stays unavailable until `now + lock_delay` (Chubby's lock-delay), so that a holder
    /// that does not yet know it lost the lock cannot overlap with the next one.
    pub fn release_session(&mut self, session: SessionId, now: Instant) -> SessionRelease {
        self.end_session(session, now, true)
    }

    /// A session closed gracefully: like [`release_session`](Self::release_session) without
    /// lock-delay.
    pub fn close_session(&mut self, session: SessionId, now: Instant) -> SessionRelease {
        self.end_session(session, now, false)
    }

    /// The earliest instant at which [`tick`](Self::tick) has something to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        let ghosts = self
            .entries
            .values()
            .filter_map(|e| e.ghost.as_ref().map(|g| g.until));
        let waits = self.waiters.values().filter_map(|w| w.deadline);
        ghosts.chain(waits).min()
    }

    /// Holders of `name` (several only when shared), in session order.
    pub fn holders(&self, name: &str) -> Result<Vec<HolderInfo>, InvalidName> {
        let name = LockName::parse(name)?;
        Ok(self
            .entries
            .get(&name)
            .map(Self::holder_infos)
            .unwrap_or_default())
    }

    /// The FIFO queue of `name`, oldest first.
    pub fn waiters(&self, name: &str) -> Result<Vec<WaiterInfo>, InvalidName> {
        let name = LockName::parse(name)?;
        Ok(self
            .entries
            .get(&name)
            .map(|e| self.waiter_infos(e))
            .unwrap_or_default())
    }

    /// Every lock with holders, waiters or a lock-delay at `prefix` or below it, in name
    /// order. `prefix` may be `/` for the whole table.
    pub fn locks_under(&self, prefix: &str) -> Result<Vec<LockInfo>, InvalidName> {
        let range: Box<dyn Iterator<Item = (&LockName, &Entry)>> =
            match LockName::parse_prefix(prefix)? {
                None => Box::new(self.entries.iter()),
                Some(p) => Box::new(
                    self.entries
                        .get_key_value(&p)
                        .into_iter()
                        .chain(self.descendants(&p)),
                ),
            };
        Ok(range
            .map(|(n, e)| LockInfo {
                name: n.clone(),
                holders: Self::holder_infos(e),
                waiters: self.waiter_infos(e),
                delayed_until: e.ghost.as_ref().map(|g| g.until),
            })
            .collect())
    }

    /// The locks `session` holds, in name order.
    pub fn session_locks(&self, session: SessionId) -> Vec<Released> {
        let Some(s) = self.sessions.get(&session) else {
            return Vec::new();
        };
        s.held
            .iter()
            .filter_map(|n| {
                let h = self.entries.get(n)?.holders.get(&session)?;
                Some(Released {
                    name: n.clone(),
                    mode: h.mode,
                    token: h.token,
                })
            })
            .collect()
    }

    // ---- internals ----

    fn holder_infos(e: &Entry) -> Vec<HolderInfo> {
        e.holders
            .iter()
            .map(|(s, h)| HolderInfo {
                session: *s,
                mode: h.mode,
                token: h.token,
                request_id: h.request_id,
                granted_at: h.granted_at,
            })
            .collect()
    }

    fn waiter_infos(&self, e: &Entry) -> Vec<WaiterInfo> {
        e.queue
            .iter()
            .filter_map(|t| {
                let w = self.waiters.get(t)?;
                Some(WaiterInfo {
                    session: w.session,
                    request_id: w.request_id,
                    mode: w.mode,
                    ticket: *t,
                    deadline: w.deadline,
                })
            })
            .collect()
    }

    fn replay(&self, req: &Acquire, name: &LockName) -> Option<Result<Acquired, AcquireError>> {
        let s = self.sessions.get(&req.session)?;
        match s.requests.get(&req.request_id) {
            Some(r) if r.name != *name || r.mode != req.mode => {
                Some(Err(AcquireError::RequestMismatch {
                    request_id: req.request_id,
                }))
            }
            Some(r) => Some(match &r.outcome {
                Outcome::Granted(g) => Ok(Acquired::Granted(g.clone())),
                Outcome::Waiting(t) => Ok(Acquired::Queued {
                    ticket: *t,
                    position: self.position(*t),
                }),
                Outcome::Failed(e) => Err(e.clone()),
                Outcome::Released => Err(AcquireError::RequestMismatch {
                    request_id: req.request_id,
                }),
            }),
            None if req.request_id.0 < s.forgotten_below => Some(Err(AcquireError::StaleRequest {
                request_id: req.request_id,
            })),
            None => None,
        }
    }

    fn remember(
        &mut self,
        session: SessionId,
        request_id: RequestId,
        name: LockName,
        mode: LockMode,
        outcome: Outcome,
    ) {
        let window = self.config.request_window.max(1);
        let s = self.sessions.entry(session).or_default();
        s.requests.insert(
            request_id,
            Record {
                name,
                mode,
                outcome,
            },
        );
        // Forget the oldest settled results beyond the window; a waiting request's record
        // is what lets its replay find the wait, so it is kept until the wait ends.
        while s.requests.len() > window {
            let Some(oldest) = s
                .requests
                .iter()
                .find(|(_, r)| !matches!(r.outcome, Outcome::Waiting(_)))
                .map(|(id, _)| *id)
            else {
                break;
            };
            s.requests.remove(&oldest);
            s.forgotten_below = s.forgotten_below.max(oldest.0 + 1);
        }
    }

    fn set_outcome(&mut self, session: SessionId, request_id: RequestId, outcome: Outcome) {
        if let Some(r) = self
            .sessions
            .get_mut(&session)
            .and_then(|s| s.requests.get_mut(&request_id))
        {
            r.outcome = outcome;
        }
    }

    fn position(&self, ticket: Ticket) -> usize {
        self.waiters
            .get(&ticket)
            .and_then(|w| self.entries.get(&w.name))
            .map(|e| e.queue.range(..ticket).count())
            .unwrap_or(0)
    }

    fn acquire_new(
        &mut self,
        req: &Acquire,
        name: &LockName,
        now: Instant,
    ) -> Result<Acquired, AcquireError> {
        let session = req.session;
        if let Some(h) = self.entries.get(name).and_then(|e| e.holders.get(&session)) {
            return Err(AcquireError::AlreadyHeld {
                mode: h.mode,
                token: h.token,
            });
        }
        if let Some((t, _)) = self
            .sessions
            .get(&session)
            .and_then(|s| s.waiting.iter().find(|(_, n)| *n == name))
        {
            return Err(AcquireError::AlreadyWaiting { ticket: *t });
        }
        let deadline = match req.wait {
            Wait::Until(d) => Some(d),
            Wait::Try | Wait::Forever => None,
        };
        let delay = req
            .lock_delay
            .unwrap_or(self.config.lock_delay)
            .min(MAX_LOCK_DELAY);
        if self.grantable(name, req.mode, session, None, now) {
            let g = self.grant(name, req.mode, session, req.request_id, None, delay, now);
            return Ok(Acquired::Granted(g));
        }
        match req.wait {
            Wait::Try => return Err(AcquireError::WouldBlock),
            Wait::Until(d) if d <= now => return Err(AcquireError::Timeout),
            Wait::Until(_) | Wait::Forever => {}
        }
        let blockers = self.blockers(name, req.mode, session, None, now);
        if let Some(cycle) = self.find_cycle(session, &blockers, now) {
            // The new wait has the largest ticket of all, so it is the youngest wait on
            // any cycle it closes: it is the one refused. (Cycles can only close when a
            // wait is added: grants and removals never add waits-for edges.)
            return Err(AcquireError::Deadlock { cycle });
        }
        let ticket = Ticket(self.next_ticket);
        self.next_ticket += 1;
        self.waiters.insert(
            ticket,
            Waiter {
                name: name.clone(),
                session,
                request_id: req.request_id,
                mode: req.mode,
                deadline,
                lock_delay: delay,
            },
        );
        self.entries
            .entry(name.clone())
            .or_default()
            .queue
            .insert(ticket);
        self.sessions
            .entry(session)
            .or_default()
            .waiting
            .insert(ticket, name.clone());
        Ok(Acquired::Queued {
            ticket,
            position: self.position(ticket),
        })
    }

    #[allow(clippy::too_many_arguments)] // the grant's fields, one by one
    fn grant(
        &mut self,
        name: &LockName,
        mode: LockMode,
        session: SessionId,
        request_id: RequestId,
        ticket: Option<Ticket>,
        lock_delay: Duration,
        now: Instant,
    ) -> Grant {
        self.last_seq += 1;
        let token = FencingToken {
            epoch: self.epoch,
            seq: self.last_seq,
        };
        self.entries
            .entry(name.clone())
            .or_default()
            .holders
            .insert(
                session,
                Held {
                    mode,
                    token,
                    request_id,
                    granted_at: now,
                    lock_delay,
                },
            );
        self.sessions
            .entry(session)
            .or_default()
            .held
            .insert(name.clone());
        Grant {
            name: name.clone(),
            session,
            request_id,
            mode,
            token,
            ticket,
        }
    }

    /// Grants, in ticket order, every wait that is now grantable. Processing in ticket order
    /// and checking each wait against the earlier ones still queued is what makes the
    /// queues fair: a later compatible wait never overtakes an earlier conflicting one.
    fn grant_waiters(&mut self, now: Instant) -> Vec<Grant> {
        let tickets: Vec<Ticket> = self.waiters.keys().copied().collect();
        let mut granted = Vec::new();
        for t in tickets {
            let Some(w) = self.waiters.get(&t).cloned() else {
                continue;
            };
            if w.expired(now) || !self.grantable(&w.name, w.mode, w.session, Some(t), now) {
                continue;
            }
            self.dequeue(t);
            let g = self.grant(
                &w.name,
                w.mode,
                w.session,
                w.request_id,
                Some(t),
                w.lock_delay,
                now,
            );
            self.set_outcome(w.session, w.request_id, Outcome::Granted(g.clone()));
            granted.push(g);
        }
        granted
    }

    /// `(name, mode)` for `session` can be granted now: no lock-delay forbids it, and it is
    /// either covered by a lock the session already holds, or conflicts with no other
    /// session's holder and no earlier (than `ticket`; `None`: than everything) wait.
    fn grantable(
        &self,
        name: &LockName,
        mode: LockMode,
        session: SessionId,
        ticket: Option<Ticket>,
        now: Instant,
    ) -> bool {
        if self.delayed(name, mode, now) {
            return false;
        }
        self.covered_by_own(name, mode, session)
            || self.blockers(name, mode, session, ticket, now).is_empty()
    }

    /// A lock-delay forbids the name itself in any mode, and overlapping names in modes
    /// that conflict with the expired holder's.
    fn delayed(&self, name: &LockName, mode: LockMode, now: Instant) -> bool {
        self.overlapping(name).any(|(n, e)| {
            e.ghost
                .as_ref()
                .is_some_and(|g| g.until > now && (n == name || conflicts(n, g.mode, name, mode)))
        })
    }

    /// HCLC cover rule (seed 004 §9): the session holds a lock on `name` or an ancestor in
    /// a mode not weaker than `mode`, so it already controls the resources asked for.
    fn covered_by_own(&self, name: &LockName, mode: LockMode, session: SessionId) -> bool {
        let Some(s) = self.sessions.get(&session) else {
            return false;
        };
        name.ancestors()
            .chain(std::iter::once(name.clone()))
            .filter(|a| s.held.contains(a))
            .any(|a| {
                self.entries
                    .get(&a)
                    .and_then(|e| e.holders.get(&session))
                    .is_some_and(|h| h.mode.covers(mode))
            })
    }

    /// The sessions `(name, mode, session)` would wait for: other sessions holding
    /// conflicting overlapping locks, and other sessions' earlier conflicting waits
    /// (unexpired) that FIFO order puts ahead of it. These are its waits-for edges.
    fn blockers(
        &self,
        name: &LockName,
        mode: LockMode,
        session: SessionId,
        ticket: Option<Ticket>,
        now: Instant,
    ) -> BTreeSet<SessionId> {
        if self.planted_skip_conflicts || self.covered_by_own(name, mode, session) {
            return BTreeSet::new();
        }
        let mut out = BTreeSet::new();
        let judged = self
            .overlapping(name)
            .filter(|(n, _)| !self.planted_ignore_cover || *n == name);
        for (n, e) in judged {
            for (s, h) in &e.holders {
                if *s != session && conflicts(n, h.mode, name, mode) {
                    out.insert(*s);
                }
            }
            let earlier = match ticket {
                Some(t) => e.queue.range(..t),
                None => e.queue.range(..),
            };
            for t in earlier {
                let Some(w) = self.waiters.get(t) else {
                    continue;
                };
                if w.session != session && !w.expired(now) && conflicts(n, w.mode, name, mode) {
                    out.insert(w.session);
                }
            }
        }
        out
    }

    /// Entries whose names overlap `name`: its ancestors, itself, its descendants.
    fn overlapping<'a>(
        &'a self,
        name: &'a LockName,
    ) -> impl Iterator<Item = (&'a LockName, &'a Entry)> + 'a {
        name.ancestors()
            .chain(std::iter::once(name.clone()))
            .filter_map(|a| self.entries.get_key_value(&a))
            .chain(self.descendants(name))
    }

    fn descendants<'a>(
        &'a self,
        name: &LockName,
    ) -> impl Iterator<Item = (&'a LockName, &'a Entry)> + 'a {
        let (lo, hi) = name.descendant_range();
        self.entries
            .range::<_, str>((Bound::Included(lo.as_str()), Bound::Excluded(hi.as_str())))
    }

    /// Depth-first search of the waits-for graph from `first` (the new wait's blockers) back
    /// to `start`. Returns the cycle `start → … → start` (without repeating `start`).
    fn find_cycle(
        &self,
        start: SessionId,
        first: &BTreeSet<SessionId>,
        now: Instant,
    ) -> Option<Vec<SessionId>> {
        let mut parent: BTreeMap<SessionId, SessionId> = BTreeMap::new();
        let mut stack: Vec<SessionId> = Vec::new();
        for b in first.iter().rev() {
            if parent.insert(*b, start).is_none() {
                stack.push(*b);
            }
        }
        while let Some(x) = stack.pop() {
            for y in self.waits_for(x, now) {
                if y == start {
                    let mut cycle = vec![x];
                    let mut cur = x;
                    while let Some(p) = parent.get(&cur).copied() {
                        if p == start {
                            break;
                        }
                        cycle.push(p);
                        cur = p;
                    }
                    cycle.push(start);
                    cycle.reverse();
                    return Some(cycle);
                }
                if y != start && !parent.contains_key(&y) {
                    parent.insert(y, x);
                    stack.push(y);
                }
            }
        }
        None
    }

    /// Out-edges of `session` in the waits-for graph: the union of its waits' blockers.
    fn waits_for(&self, session: SessionId, now: Instant) -> BTreeSet<SessionId> {
        let Some(s) = self.sessions.get(&session) else {
            return BTreeSet::new();
        };
        let mut out = BTreeSet::new();
        for t in s.waiting.keys() {
            if let Some(w) = self.waiters.get(t).filter(|w| !w.expired(now)) {
                out.extend(self.blockers(&w.name, w.mode, session, Some(*t), now));
            }
        }
        out
    }

    fn dequeue(&mut self, ticket: Ticket) -> Option<Waiter> {
        let w = self.waiters.remove(&ticket)?;
        if let Some(e) = self.entries.get_mut(&w.name) {
            e.queue.remove(&ticket);
        }
        if let Some(s) = self.sessions.get_mut(&w.session) {
            s.waiting.remove(&ticket);
        }
        self.cleanup(&w.name);
        Some(w)
    }

    fn end_wait(&mut self, ticket: Ticket, error: AcquireError) -> EndedWait {
        let w = self.dequeue(ticket).expect("ended wait exists");
        self.set_outcome(w.session, w.request_id, Outcome::Failed(error.clone()));
        EndedWait {
            name: w.name,
            session: w.session,
            request_id: w.request_id,
            ticket,
            error,
        }
    }

    fn end_session(&mut self, session: SessionId, now: Instant, delay: bool) -> SessionRelease {
        let Some(state) = self.sessions.get(&session).cloned() else {
            return SessionRelease {
                granted: self.grant_waiters(now),
                ..SessionRelease::default()
            };
        };
        let cancelled = state
            .waiting
            .keys()
            .map(|t| self.end_wait(*t, AcquireError::SessionEnded))
            .collect();
        let mut released = Vec::new();
        for name in &state.held {
            let Some(e) = self.entries.get_mut(name) else {
                continue;
            };
            let Some(h) = e.holders.remove(&session) else {
                continue;
            };
            let until = now + h.lock_delay;
            if delay && until > now {
                let ghost = match e.ghost.take() {
                    Some(g) if g.until > now => Ghost {
                        until: g.until.max(until),
                        mode: g.mode.max(h.mode),
                    },
                    _ => Ghost {
                        until,
                        mode: h.mode,
                    },
                };
                e.ghost = Some(ghost);
            }
            released.push(Released {
                name: name.clone(),
                mode: h.mode,
                token: h.token,
            });
            self.cleanup(name);
        }
        // The session's idempotency records go with it: the session layer refuses
        // requests of ended sessions before they reach the table.
        self.sessions.remove(&session);
        SessionRelease {
            released,
            cancelled,
            granted: self.grant_waiters(now),
        }
    }

    fn cleanup(&mut self, name: &LockName) {
        if self.entries.get(name).is_some_and(Entry::is_empty) {
            self.entries.remove(name);
        }
    }
}
