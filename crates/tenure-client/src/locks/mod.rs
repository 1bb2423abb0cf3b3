//! Sessions, keep-alive and lock guards (DESIGN §4).
//!
//! A client opens one session, on first use, in the store of the first name that needs it
//! (its *home*), and uses it for names of every store: in another store a request runs
//! under the session's child there, which the server keeps alive with the session (DESIGN
//! §4, "One session per client"). It keeps the session alive from a background task: one
//! keep-alive stream to the home store's manager, a request
//! every TTL/3, each answer extending the session's conservative deadline to the local
//! *send* time of the answered request + TTL − δ_c
//! ([`tenure_core::session::client_deadline`]). The manager set its own deadline on
//! receipt, on a clock at most δ_c away, so the client's deadline never falls after the
//! manager's: an application that stops using a lock at the client's deadline never
//! overlaps the next holder. When the manager changes, the stream follows the redirect;
//! the new manager extended every session by its grace period, so a keep-alive that
//! reaches it in time finds the session alive.
//!
//! [`LockGuard`] is a granted lock: its fencing token, its session's deadline (a
//! [`tokio::sync::watch`] of [`SessionState`]), [`LockGuard::lost`] — a future that
//! resolves [`LockGuard::loss_warning`] before the deadline unless a keep-alive extends
//! it, or at once when the manager reports the session expired — and an explicit
//! [`LockGuard::release`]; dropping the guard releases from a spawned task.
//!
//! Retries: an acquire keeps its request id across every retry (redirect, failover, a
//! long wait cut by the client's per-call bound); the store replicates the id with the
//! operation and replays the recorded outcome, so the lock is never granted twice to one
//! request. A release retried after a lost answer may find the lock already released:
//! `NotHeld` on a retry counts as released.

use crate::proto;
use crate::suspend::Sent;
use crate::{Client, Result};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, watch};
use tracing::{debug, warn};

pub mod convert;
mod ops;
mod session;

/// Lock modes (the core's): shared or exclusive.
pub use tenure_core::lockctl::LockMode;

/// How long an acquire (or a campaign) may wait: `Try` (grant now or fail with
/// [`Error::WouldBlock`](crate::Error::WouldBlock)), `Timeout(d)` (wait in the lock's FIFO
/// queue at most `d`, [`Error::Timeout`](crate::Error::Timeout)), `Forever` (until
/// granted, the session ends, or a deadlock picks this request). The core's
/// [`tenure_core::io::request::WaitSpec`], which the devices receive.
pub use tenure_core::io::request::WaitSpec as Wait;

/// A fencing token (the core's): strictly increasing per store across failovers,
/// shown as `epoch.seq`. Resources remember the largest token they saw and refuse
/// requests carrying a smaller one.
pub use tenure_core::lockctl::FencingToken;

/// A session's state as the client sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionState {
    /// The conservative deadline as it was set: the session (and every lock it holds) is
    /// certainly alive until then, unless the host was suspended since — read it with
    /// [`SessionState::until`], which counts that.
    pub deadline: Instant,
    /// How long the host had been suspended when `deadline` was set
    /// ([`crate::suspend::asleep`]).
    pub asleep: Duration,
    /// The manager reported the session expired: its locks are released.
    pub expired: bool,
}

impl SessionState {
    /// A new session's state: `deadline` from a request sent at `sent`.
    pub(crate) fn new(deadline: Instant, sent: Sent) -> SessionState {
        SessionState {
            deadline,
            asleep: sent.asleep,
            expired: false,
        }
    }

    /// The conservative deadline now: [`Self::deadline`], earlier by any time the host
    /// spent suspended since it was set (the devices count that time; a monotonic clock
    /// does not).
    pub fn until(&self) -> Instant {
        crate::suspend::shifted(self.deadline, self.asleep, crate::suspend::asleep())
    }

    /// A keep-alive sent at `sent` was answered: the deadline moves to `deadline` if
    /// that is later (both read with the suspensions since their sending).
    pub(crate) fn extend(&mut self, deadline: Instant, sent: Sent) {
        let now = crate::suspend::asleep();
        let new = crate::suspend::shifted(deadline, sent.asleep, now);
        let old = crate::suspend::shifted(self.deadline, self.asleep, now);
        self.deadline = new.max(old);
        self.asleep = now;
    }
}

/// Why [`LockGuard::lost`] resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// The session's deadline is near (within the loss warning) and no keep-alive has
    /// extended it: stop using the lock by [`LockGuard::deadline`].
    DeadlineNear,
    /// The manager reported the session expired: the lock is gone.
    Expired,
}

/// One holder of a lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Store of the session.
    pub store: u32,
    /// Holding session.
    pub session: u64,
    /// Mode held.
    pub mode: LockMode,
    /// Fencing token of the grant.
    pub token: FencingToken,
}

/// A lock's holders and queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockState {
    /// The lock.
    pub name: String,
    /// Current holders.
    pub holders: Vec<Holder>,
    /// Queued sessions, oldest first.
    pub waiters: Vec<u64>,
}

fn holder(h: proto::LockHolder) -> Holder {
    let s = h.session.unwrap_or_default();
    Holder {
        store: s.store,
        session: s.id,
        mode: convert::mode_from_proto(h.mode).unwrap_or(LockMode::Exclusive),
        token: h.token.unwrap_or_default().into(),
    }
}

/// One open session and its keep-alive task's controls.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) store: u32,
    pub(crate) id: u64,
    pub(crate) ttl: Duration,
    pub(crate) state: watch::Sender<SessionState>,
    pub(crate) stopped: AtomicBool,
    wake: Notify,
}

impl Session {
    pub(crate) fn new(store: u32, id: u64, ttl: Duration, state: SessionState) -> Session {
        let (tx, _) = watch::channel(state);
        Session {
            store,
            id,
            ttl,
            state: tx,
            stopped: AtomicBool::new(false),
            wake: Notify::new(),
        }
    }

    /// Stop the keep-alive task.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.wake.notify_waiters();
        self.wake.notify_one();
    }

    fn is_expired(&self) -> bool {
        self.state.borrow().expired
    }

    pub(crate) fn expire(&self) {
        self.state.send_modify(|s| s.expired = true);
        self.stop();
    }
}

/// Per-lock options of [`Client::lock_with`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockOptions {
    /// If the session expires while holding the lock, nobody gets the name for this long
    /// (Chubby's lock-delay; `None`: the server's, 1 s by default; at most 60 s). Zero
    /// suits locks whose holders check fencing tokens, which need no delay.
    pub lock_delay: Option<Duration>,
}

/// A granted lock. Dropping it releases the lock (from a spawned task); use
/// [`LockGuard::release`] to wait for the release and see its outcome.
#[derive(Debug)]
pub struct LockGuard {
    client: Client,
    session: Arc<Session>,
    /// The store of the lock's name.
    store: u32,
    name: String,
    mode: LockMode,
    token: FencingToken,
    state: watch::Receiver<SessionState>,
    released: bool,
}

impl LockGuard {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The mode granted.
    pub fn mode(&self) -> LockMode {
        self.mode
    }

    /// The grant's fencing token: pass it to every resource the lock protects.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The client's session's id (its home store: [`LockGuard::session_store`]).
    pub fn session(&self) -> u64 {
        self.session.id
    }

    /// The store of the client's session. When it is not [`LockGuard::store`], the lock
    /// is held in its store by the session's child there (holder listings name the
    /// child).
    pub fn session_store(&self) -> u32 {
        self.session.store
    }

    /// The store of the lock.
    pub fn store(&self) -> u32 {
        self.store
    }

    /// The session's TTL.
    pub fn ttl(&self) -> Duration {
        self.session.ttl
    }

    /// The conservative deadline: the lock is certainly held until then. Keep-alives
    /// move it forward.
    pub fn deadline(&self) -> Instant {
        self.state.borrow().until()
    }

    /// Whether the lock is certainly held now (before the deadline, session not expired).
    pub fn is_held(&self) -> bool {
        let s = *self.state.borrow();
        !s.expired && Instant::now() < s.until()
    }

    /// How long before the deadline [`LockGuard::lost`] resolves when not extended.
    pub fn loss_warning(&self) -> Duration {
        self.client.options().loss_warning.min(self.session.ttl / 2)
    }

    /// A watch of the session's state (deadline moves, expiry).
    pub fn watch(&self) -> watch::Receiver<SessionState> {
        self.state.clone()
    }

    /// Resolves when the lock may be lost: [`LossWarning`](Self::loss_warning) before
    /// the deadline if no keep-alive has extended it by then, or as soon as the manager
    /// reports the session expired. Cancel-safe; can be awaited again.
    pub async fn lost(&self) -> Loss {
        may_be_lost(self.state.clone(), self.loss_warning()).await
    }

    /// Release the lock and wait for the answer. The release is fenced by the grant's
    /// token: a late retry of it can never end a newer grant of the same name to the same
    /// session ([`Error::StaleToken`](crate::Error::StaleToken) instead; DESIGN §4, "Idempotent retries").
    pub async fn release(mut self) -> Result<()> {
        self.released = true;
        let (store, session, name) = (self.session.store, self.session.id, self.name.clone());
        (self.client)
            .release_raw(store, session, &name, Some(self.token))
            .await
    }
}

/// Resolves when what a session holds may be lost: `warn` before the session's deadline
/// if no keep-alive has extended it by then, or as soon as the session is known to have
/// expired. Shared by [`LockGuard::lost`] and the elections' leaderships.
pub(crate) async fn may_be_lost(mut rx: watch::Receiver<SessionState>, warn: Duration) -> Loss {
    // Timers run on the monotonic clock, which a suspended host does not advance: wake at
    // least this often, so that a deadline a suspension brought earlier is seen soon after
    // the host resumes.
    const LOOK_AGAIN: Duration = Duration::from_millis(250);
    let mut alive = true;
    loop {
        let s = *rx.borrow_and_update();
        if s.expired {
            return Loss::Expired;
        }
        let until = s.until();
        let at = until.checked_sub(warn).unwrap_or(until);
        let now = Instant::now();
        if now >= at {
            return Loss::DeadlineNear;
        }
        let wake = at.min(now + LOOK_AGAIN);
        if !alive {
            // The keep-alive task is gone: nothing will extend the deadline.
            tokio::time::sleep_until(wake.into()).await;
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(wake.into()) => {}
            r = rx.changed() => alive = r.is_ok(),
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released || self.session.is_expired() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            warn!(name = %self.name, "lock guard dropped outside a runtime: the lock is released when its session ends");
            return;
        };
        let client = self.client.clone();
        let (store, session, name) = (self.session.store, self.session.id, self.name.clone());
        let token = Some(self.token);
        rt.spawn(async move {
            if let Err(e) = client.release_raw(store, session, &name, token).await {
                debug!(%name, "release on drop failed: {e}");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Seed 002 §14.4.5 (sessions), DESIGN §3 "Clocks": a keep-alive's answer moves the
    // conservative deadline only forward; one that was sent when the host had slept less
    // than it has now is read earlier by the difference.
    #[test]
    fn session_state_extend_keeps_the_later_deadline_counting_suspension() {
        let now = Sent::now();
        let d = now.at + Duration::from_secs(10);
        let mut s = SessionState::new(d, now);
        s.extend(d - Duration::from_secs(3), Sent::now());
        assert!(s.until() >= d - Duration::from_millis(5), "moved back");
        s.extend(d + Duration::from_secs(3), Sent::now());
        assert!(s.until() >= d + Duration::from_secs(3) - Duration::from_millis(5));
        // A deadline recorded as set before a (pretended) 2 s suspension reads 2 s
        // earlier.
        let then = Sent {
            at: now.at,
            asleep: crate::suspend::asleep() + Duration::from_secs(2),
        };
        let late = SessionState::new(d, then);
        assert_eq!(late.until(), d, "no sleep counted backwards");
        // (Only on a host that has slept 2 s since its boot can the pretence go back.)
        let asleep = crate::suspend::asleep();
        if asleep >= Duration::from_secs(2) {
            let early = SessionState {
                asleep: asleep - Duration::from_secs(2),
                ..late
            };
            assert!(early.until() <= d - Duration::from_secs(2) + Duration::from_millis(5));
        }
    }
}
