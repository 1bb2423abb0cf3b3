//! The LOCK table proper: holders, FIFO wait queues, fencing tokens, lock-delay ghosts,
//! idempotency records and the waits-for graph. See the module docs of [`super`].

mod conflicts;
mod grant;
mod ops;

pub use ops::{
    Acquire, AcquireError, Acquired, EndedWait, FencingToken, Grant, HolderInfo, LockInfo, LockOp,
    LockOpResult, LockTableConfig, MAX_LOCK_DELAY, ReleaseError, Released, RequestId,
    SessionRelease, StaleEpoch, Ticket, Wait, WaiterInfo, Wakeups,
};

use crate::ids::Epoch;
pub use crate::ids::SessionId;
use crate::lockctl::mode::LockMode;
use crate::lockctl::name::{InvalidName, LockName};
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::time::Duration;

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

/// A session's locks, waits and request records. Persistent maps (encoded as the
/// standard ones): a change to a session shared with another copy of the table (the
/// chunk's durable copy, the manager's committed tables) copies the path to what it
/// changes, not the session's every lock and record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SessionState {
    #[serde(with = "crate::persist_serde::ord_set")]
    held: imbl::OrdSet<LockName>,
    #[serde(with = "crate::persist_serde::ord_map")]
    waiting: imbl::OrdMap<Ticket, LockName>,
    #[serde(with = "crate::persist_serde::ord_map")]
    requests: imbl::OrdMap<RequestId, Record>,
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
///   [`locks_under`](Self::locks_under), [`session_locks`](Self::session_locks),
///   [`held_count`](Self::held_count), [`held_count_after`](Self::held_count_after).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "LockTableRepr")]
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
    /// Every lock-delay end and wait deadline, earliest first: derived from `entries`
    /// and `waiters` (never encoded, rebuilt when a table is decoded or assembled from
    /// rows), so the next deadline and what is due are found without scanning every lock.
    #[serde(skip)]
    deadlines: imbl::OrdSet<(Instant, Due)>,
    /// No wait is grantable until a deadline of [`deadlines`](Self::deadlines) passes:
    /// the waits were last looked over after the table's last change that can unblock
    /// one (a release, an ended session, an ended wait or lock-delay), so a tick with
    /// nothing due grants nothing without looking at every wait again. Derived, never
    /// encoded, and false in a decoded or assembled table.
    #[serde(skip)]
    settled: Settled,
    /// Planted bug (tests only): grant without looking for conflicts. Not replicated.
    #[serde(skip)]
    planted_skip_conflicts: bool,
    /// Planted bug (tests only): look for conflicts on the requested name only, not on
    /// its ancestors and descendants (no cover, no intention modes). Not replicated.
    #[serde(skip)]
    planted_ignore_cover: bool,
}

/// [`LockTable::settled`]: a hint that tables compare equal whatever its value.
#[derive(Clone, Copy, Debug, Default)]
struct Settled(bool);

impl PartialEq for Settled {
    fn eq(&self, _: &Settled) -> bool {
        true
    }
}

impl Eq for Settled {}

/// What falls due at a deadline of [`LockTable::deadlines`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    /// The lock-delay of a name ends.
    Ghost(LockName),
    /// A wait's deadline passes.
    Wait(Ticket),
}

/// A [`LockTable`] as encoded: every field but the derived ones.
#[derive(Deserialize)]
struct LockTableRepr {
    config: LockTableConfig,
    epoch: Epoch,
    last_seq: u64,
    next_ticket: u64,
    #[serde(with = "crate::persist_serde::ord_map")]
    entries: imbl::OrdMap<LockName, Entry>,
    #[serde(with = "crate::persist_serde::ord_map")]
    waiters: imbl::OrdMap<Ticket, Waiter>,
    #[serde(with = "crate::persist_serde::ord_map")]
    sessions: imbl::OrdMap<SessionId, SessionState>,
}

impl From<LockTableRepr> for LockTable {
    fn from(r: LockTableRepr) -> LockTable {
        let mut t = LockTable {
            config: r.config,
            epoch: r.epoch,
            last_seq: r.last_seq,
            next_ticket: r.next_ticket,
            entries: r.entries,
            waiters: r.waiters,
            sessions: r.sessions,
            deadlines: imbl::OrdSet::new(),
            settled: Settled(false),
            planted_skip_conflicts: false,
            planted_ignore_cover: false,
        };
        t.rebuild_deadlines();
        t
    }
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
            deadlines: imbl::OrdSet::new(),
            settled: Settled(false),
            planted_skip_conflicts: false,
            planted_ignore_cover: false,
        }
    }

    /// Plant (or remove) the skip-the-conflict-check bug, so the simulator's mutual
    /// exclusion and linearizability checkers can be shown to catch it.
    pub fn plant_skip_conflicts(&mut self, on: bool) {
        self.planted_skip_conflicts = on;
        self.settled = Settled(false);
    }

    /// Plant (or remove) the ignore-the-cover-rule bug: conflicts are looked for on the
    /// requested name alone, so a lock on `/a` and a conflicting one on `/a/b` can both
    /// be granted. The simulator's checkers must judge the hierarchy to catch it.
    pub fn plant_ignore_cover(&mut self, on: bool) {
        self.planted_ignore_cover = on;
        self.settled = Settled(false);
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
            .due(now)
            .filter_map(|d| match d {
                Due::Wait(t) => Some(t),
                Due::Ghost(_) => None,
            })
            .collect();
        if !expired.is_empty() {
            self.settled = Settled(false);
        }
        let ended = expired
            .into_iter()
            .map(|t| self.end_wait(t, AcquireError::Timeout))
            .collect();
        let granted = match self.settled {
            Settled(true) => Vec::new(),
            Settled(false) => self.grant_waiters(now),
        };
        Wakeups { granted, ended }
    }

    /// Time passes: lock-delays that ended are dropped, expired waits end, and waits that
    /// became grantable are granted.
    pub fn tick(&mut self, now: Instant) -> Wakeups {
        let over: Vec<LockName> = self
            .due(now)
            .filter_map(|d| match d {
                Due::Ghost(n) => Some(n),
                Due::Wait(_) => None,
            })
            .collect();
        for name in over {
            self.set_ghost(&name, None);
            self.cleanup(&name);
            self.settled = Settled(false);
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
        self.deadlines.get_min().map(|(at, _)| *at)
    }

    /// What is due at or before `now`, earliest first.
    fn due(&self, now: Instant) -> impl Iterator<Item = Due> + '_ {
        self.deadlines
            .iter()
            .take_while(move |(at, _)| *at <= now)
            .map(|(_, d)| d.clone())
    }

    /// Set (or clear) the lock-delay of `name`, keeping [`deadlines`](Self::deadlines).
    fn set_ghost(&mut self, name: &LockName, ghost: Option<Ghost>) {
        let Some(e) = self.entries.get_mut(name) else {
            return;
        };
        if let Some(old) = e.ghost.take() {
            self.deadlines
                .remove(&(old.until, Due::Ghost(name.clone())));
        }
        if let Some(g) = &ghost {
            self.deadlines.insert((g.until, Due::Ghost(name.clone())));
        }
        e.ghost = ghost;
    }

    /// Add a wait, keeping [`deadlines`](Self::deadlines).
    fn insert_waiter(&mut self, ticket: Ticket, w: Waiter) {
        if let Some(d) = w.deadline {
            self.deadlines.insert((d, Due::Wait(ticket)));
        }
        if let Some(old) = self.waiters.insert(ticket, w)
            && let Some(d) = old.deadline
        {
            self.deadlines.remove(&(d, Due::Wait(ticket)));
        }
    }

    /// Remove a wait, keeping [`deadlines`](Self::deadlines).
    fn remove_waiter(&mut self, ticket: Ticket) -> Option<Waiter> {
        let w = self.waiters.remove(&ticket)?;
        if let Some(d) = w.deadline {
            self.deadlines.remove(&(d, Due::Wait(ticket)));
        }
        Some(w)
    }

    /// Whether [`settled`](Self::settled) tells the truth at `now`: a table that says no
    /// wait is grantable grants none when every wait is looked over (tests).
    #[cfg(test)]
    pub(crate) fn settled_holds(&self, now: Instant) -> bool {
        let mut fresh = self.clone();
        fresh.settled = Settled(false);
        !self.settled.0 || fresh.grant_waiters(now).is_empty()
    }

    /// Whether [`deadlines`](Self::deadlines) is what a rebuild from the entries and the
    /// waits gives (tests).
    #[cfg(test)]
    pub(crate) fn deadlines_are_derived(&self) -> bool {
        let mut fresh = self.clone();
        fresh.rebuild_deadlines();
        fresh.deadlines == self.deadlines
    }

    /// Derive [`deadlines`](Self::deadlines) from the entries and the waits again (after
    /// the table was decoded or assembled from rows).
    pub(crate) fn rebuild_deadlines(&mut self) {
        let ghosts = self
            .entries
            .iter()
            .filter_map(|(n, e)| e.ghost.as_ref().map(|g| (g.until, Due::Ghost(n.clone()))));
        let waits = self
            .waiters
            .iter()
            .filter_map(|(t, w)| w.deadline.map(|d| (d, Due::Wait(*t))));
        self.deadlines = ghosts.chain(waits).collect();
        self.settled = Settled(false);
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

    /// How many locks have at least one holder (without listing them).
    pub fn held_count(&self) -> usize {
        self.held_count_after(None, usize::MAX).0
    }

    /// How many of at most `budget` lock names, in name order after `after` (from the
    /// first with `None`), have a holder, and the last name visited if names remain after
    /// it: [`held_count`](Self::held_count) a slice at a time, for a device's gauges.
    pub fn held_count_after(
        &self,
        after: Option<&LockName>,
        budget: usize,
    ) -> (usize, Option<LockName>) {
        use std::ops::Bound;
        let from: Bound<&LockName> = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut range = self.entries.range::<_, LockName>((from, Bound::Unbounded));
        let mut held = 0;
        let mut last = None;
        for (name, e) in range.by_ref().take(budget.max(1)) {
            held += usize::from(!e.holders.is_empty());
            last = Some(name);
        }
        let more = range.next().is_some();
        (held, last.filter(|_| more).cloned())
    }

    /// How many lock names the table has an entry for (held, waited for, or in their
    /// lock-delay), without visiting them.
    pub fn entry_count(&self) -> usize {
        self.entries.len()
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
}
