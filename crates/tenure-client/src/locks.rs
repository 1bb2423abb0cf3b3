//! Sessions, keep-alive and lock guards (DESIGN §4).
//!
//! A client opens one session per store it takes locks in, on first use, and keeps it
//! alive from a background task: one keep-alive stream to the store's manager, a request
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

use crate::Chan;
use crate::proto::{self, tenure_client::TenureClient};
use crate::stream::{Ev, Rq};
use crate::suspend::Sent;
use crate::{Bounds, Client, Error, Result, Transport};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tenure_core::session::client_deadline;
use tokio::sync::{Notify, mpsc, watch};
use tracing::{debug, info, trace, warn};

/// Lock modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockMode {
    /// Any number of sessions may hold it together.
    Shared,
    /// One session holds it alone.
    Exclusive,
}

impl LockMode {
    fn to_proto(self) -> i32 {
        match self {
            LockMode::Shared => proto::LockMode::Shared as i32,
            LockMode::Exclusive => proto::LockMode::Exclusive as i32,
        }
    }

    fn from_proto(m: i32) -> LockMode {
        if m == proto::LockMode::Shared as i32 {
            LockMode::Shared
        } else {
            LockMode::Exclusive
        }
    }
}

/// How long an acquire may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Grant now or fail with [`Error::WouldBlock`].
    Try,
    /// Wait in the lock's FIFO queue at most this long ([`Error::Timeout`]).
    Timeout(Duration),
    /// Wait until granted (or the session ends, or a deadlock picks this request).
    Forever,
}

/// A fencing token: strictly increasing per store across failovers. Resources remember
/// the largest token they saw and refuse requests carrying a smaller one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken {
    /// Epoch of the manager that granted.
    pub epoch: u64,
    /// Grant counter within the store.
    pub seq: u64,
}

impl std::fmt::Display for FencingToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.epoch, self.seq)
    }
}

impl From<proto::FencingToken> for FencingToken {
    fn from(t: proto::FencingToken) -> Self {
        FencingToken {
            epoch: t.epoch,
            seq: t.seq,
        }
    }
}

impl From<FencingToken> for proto::FencingToken {
    fn from(t: FencingToken) -> Self {
        proto::FencingToken {
            epoch: t.epoch,
            seq: t.seq,
        }
    }
}

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
        mode: LockMode::from_proto(h.mode),
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

    /// The holding session's id.
    pub fn session(&self) -> u64 {
        self.session.id
    }

    /// The store of the lock and its session.
    pub fn store(&self) -> u32 {
        self.session.store
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

    /// Release the lock and wait for the answer.
    pub async fn release(mut self) -> Result<()> {
        self.released = true;
        let (store, session, name) = (self.session.store, self.session.id, self.name.clone());
        self.client.release_raw(store, session, &name, None).await
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
        rt.spawn(async move {
            if let Err(e) = client.release_raw(store, session, &name, None).await {
                debug!(%name, "release on drop failed: {e}");
            }
        });
    }
}

impl Client {
    fn micros(&self, t: Instant) -> tenure_core::Instant {
        tenure_core::Instant(t.saturating_duration_since(self.inner.origin).as_micros() as u64)
    }

    fn instant_of(&self, t: tenure_core::Instant) -> Instant {
        self.inner.origin + Duration::from_micros(t.0)
    }

    /// The conservative deadline of a session whose keep-alive (or open) sent at
    /// `sent_at` was answered with `ttl`.
    pub(crate) fn deadline_of(&self, sent_at: Instant, ttl: Duration) -> Instant {
        let d = client_deadline(self.micros(sent_at), ttl, self.inner.opts.clock_drift);
        self.instant_of(d)
    }

    pub(crate) fn next_request_id(&self) -> u64 {
        self.inner.next_request.fetch_add(1, Ordering::Relaxed)
    }

    /// The store a lock name lives in.
    pub async fn store_of(&self, name: &str) -> Result<u32> {
        let stores = self.stores().await?;
        Ok(tenure_core::config::store_of(name, stores).0)
    }

    /// This client's live session in `store`, opened (with its keep-alive task) if there
    /// is none.
    pub(crate) async fn session(&self, store: u32) -> Result<Arc<Session>> {
        let mut sessions = self.inner.sessions.lock().await;
        if let Some(s) = sessions.get(&store)
            && !s.is_expired()
        {
            return Ok(s.clone());
        }
        let ttl_ms = self.inner.opts.session_ttl.as_millis() as u64;
        let client_name = self.inner.opts.client_name.clone();
        let request_id = self.next_request_id();
        if self.inner.opts.transport == Transport::Stream {
            let deadline = self.quick_deadline();
            let session = self
                .link(store)
                .open(request_id, ttl_ms, client_name, deadline)
                .await
                .map_err(|e| self.gave_up(e))?;
            if let Some(old) = sessions.insert(store, session.clone())
                && !Arc::ptr_eq(&old, &session)
            {
                old.stop();
            }
            return Ok(session);
        }
        let (sent, opened) = self
            .routed(store, |mut c| {
                let client_name = client_name.clone();
                async move {
                    let sent = Sent::now();
                    let r = c
                        .open_session(proto::OpenSessionRequest {
                            store,
                            ttl_ms,
                            client_name,
                            request_id,
                        })
                        .await?
                        .into_inner();
                    use proto::open_session_response::Result as R;
                    Ok(match r.result {
                        Some(R::Ok(o)) => Ok((sent, o)),
                        Some(R::Error(e)) => Err(Error::from_proto(e)),
                        None => Err(Error::Malformed),
                    })
                }
            })
            .await?;
        let id = opened.session.map(|s| s.id).ok_or(Error::Malformed)?;
        let ttl = Duration::from_millis(opened.ttl_ms);
        let (tx, _) = watch::channel(SessionState::new(self.deadline_of(sent.at, ttl), sent));
        let session = Arc::new(Session {
            store,
            id,
            ttl,
            state: tx,
            stopped: AtomicBool::new(false),
            wake: Notify::new(),
        });
        debug!(store, session = id, ?ttl, "session opened");
        tokio::spawn(keep_alive(
            Arc::downgrade(&self.inner),
            session.clone(),
            sent.at,
        ));
        if let Some(old) = sessions.insert(store, session.clone()) {
            old.stop();
        }
        Ok(session)
    }

    /// The state of this client's session in `store`, if it has one.
    pub async fn session_state(&self, store: u32) -> Option<(u64, SessionState)> {
        let sessions = self.inner.sessions.lock().await;
        sessions.get(&store).map(|s| (s.id, *s.state.borrow()))
    }

    /// Acquire `name` in `mode`, waiting as `wait` says. The guard carries the fencing
    /// token; dropping it releases the lock.
    pub async fn lock(&self, name: &str, mode: LockMode, wait: Wait) -> Result<LockGuard> {
        self.lock_with(name, mode, wait, LockOptions::default())
            .await
    }

    /// [`Client::lock`] with per-lock options (its lock-delay).
    pub async fn lock_with(
        &self,
        name: &str,
        mode: LockMode,
        wait: Wait,
        options: LockOptions,
    ) -> Result<LockGuard> {
        if self.inner.opts.transport == Transport::Unary {
            return self
                .lock_on(name, mode, wait, options, Instant::now())
                .await;
        }
        // The whole call is bounded: a try by the retry deadline, a timed wait by its
        // time plus a small slack, whatever the devices do (a frozen one included).
        let o = &self.inner.opts;
        let started = Instant::now();
        let deadline = match wait {
            Wait::Try => Some(started + o.retry_deadline),
            Wait::Timeout(d) => Some(started + d + o.wait_slack),
            Wait::Forever => None,
        };
        let run = self.lock_on(name, mode, wait, options, started);
        match deadline {
            None => run.await,
            Some(d) => match tokio::time::timeout_at(d.into(), run).await {
                Ok(r) => r,
                Err(_) => Err(match wait {
                    Wait::Timeout(_) => Error::Timeout(name.to_string()),
                    _ => self.gave_up(Error::DeadlinePassed),
                }),
            },
        }
    }

    /// Open (or reuse) the store's session and acquire on it; a session found expired
    /// is replaced once. On the stream, a timed wait keeps its end (the time spent
    /// finding the manager counts) and the grant is confirmed ([`Client::confirmed`]).
    async fn lock_on(
        &self,
        name: &str,
        mode: LockMode,
        wait: Wait,
        options: LockOptions,
        started: Instant,
    ) -> Result<LockGuard> {
        let store = self.store_of(name).await?;
        let stream = self.inner.opts.transport == Transport::Stream;
        let mut fresh_session_tried = false;
        loop {
            let session = self.session(store).await?;
            let acquired = if stream {
                let wait = match wait {
                    Wait::Timeout(d) => Wait::Timeout(
                        d.saturating_sub(started.elapsed())
                            .max(Duration::from_millis(1)),
                    ),
                    w => w,
                };
                self.acquire_stream(&session, name, mode, wait, options)
                    .await
            } else {
                self.acquire(&session, name, mode, wait, options).await
            };
            match acquired {
                Ok(token) => {
                    let guard = LockGuard {
                        client: self.clone(),
                        state: session.state.subscribe(),
                        session,
                        name: name.to_string(),
                        mode,
                        token,
                        released: false,
                    };
                    return if stream {
                        self.confirmed(guard).await
                    } else {
                        Ok(guard)
                    };
                }
                Err(Error::SessionExpired(_)) if !fresh_session_tried => {
                    // The cached session had ended before this request: nothing was
                    // queued for it, so a new session and a new request are safe.
                    session.expire();
                    fresh_session_tried = true;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A grant handed out only while its session is certainly alive: when the session's
    /// deadline is already within the loss warning (a failover outlasted it), a
    /// keep-alive must extend it first; if none does, the lock is released and the call
    /// reports it was not taken — the caller never starts work it must stop at once.
    async fn confirmed(&self, guard: LockGuard) -> Result<LockGuard> {
        let name = guard.name.clone();
        let safe = |g: &LockGuard| {
            let s = *g.state.borrow();
            !s.expired && s.until().saturating_duration_since(Instant::now()) > g.loss_warning()
        };
        if safe(&guard) {
            return Ok(guard);
        }
        let o = &self.inner.opts;
        let limit = (guard.session.ttl / 3).clamp(o.attempt_timeout, o.request_timeout);
        info!(
            name,
            "granted near the session's deadline: confirming the session first"
        );
        self.link(guard.session.store).confirm(limit).await;
        if safe(&guard) {
            return Ok(guard);
        }
        warn!(
            name,
            "the session could not be confirmed in time: releasing the grant"
        );
        drop(guard);
        Err(Error::GrantUnconfirmed(name))
    }

    async fn acquire_stream(
        &self,
        session: &Arc<Session>,
        name: &str,
        mode: LockMode,
        wait: Wait,
        options: LockOptions,
    ) -> Result<FencingToken> {
        let (r#try, timeout_ms) = match wait {
            Wait::Try => (true, 0),
            Wait::Timeout(d) => (false, (d.as_millis() as u64).max(1)),
            Wait::Forever => (false, 0),
        };
        let id = self.next_request_id();
        let req = proto::AcquireRequest {
            session: Some(proto::SessionRef {
                store: session.store,
                id: session.id,
            }),
            name: name.to_string(),
            mode: mode.to_proto(),
            r#try,
            timeout_ms,
            request_id: id,
            lock_delay_ms: options.lock_delay.map(|d| d.as_millis() as u64),
        };
        let quick = r#try;
        match self
            .link(session.store)
            .call(id, Rq::Acquire(req), quick, None)
            .await
        {
            Ok(Ev::Granted(g)) => Ok(FencingToken::from(g.token.unwrap_or_default())),
            Ok(_) => Err(Error::Malformed),
            Err(e) => {
                if matches!(e, Error::SessionExpired(_)) {
                    session.expire();
                }
                Err(e)
            }
        }
    }

    async fn acquire(
        &self,
        session: &Arc<Session>,
        name: &str,
        mode: LockMode,
        wait: Wait,
        options: LockOptions,
    ) -> Result<FencingToken> {
        let o = &self.inner.opts;
        let request_id = self.next_request_id();
        let now = Instant::now();
        let (r#try, timeout_ms, bounds) = match wait {
            Wait::Try => (
                true,
                0,
                Bounds {
                    per_call: o.request_timeout,
                    deadline: Some(now + o.retry_deadline),
                    max_attempts: Some(o.max_attempts),
                },
            ),
            Wait::Timeout(d) => (
                false,
                (d.as_millis() as u64).max(1),
                Bounds {
                    per_call: d + o.request_timeout,
                    deadline: Some(now + d + o.retry_deadline),
                    max_attempts: None,
                },
            ),
            Wait::Forever => (
                false,
                0,
                Bounds {
                    per_call: o.wait_poll,
                    deadline: None,
                    max_attempts: None,
                },
            ),
        };
        let req = proto::AcquireRequest {
            session: Some(proto::SessionRef {
                store: session.store,
                id: session.id,
            }),
            name: name.to_string(),
            mode: mode.to_proto(),
            r#try,
            timeout_ms,
            request_id,
            lock_delay_ms: options.lock_delay.map(|d| d.as_millis() as u64),
        };
        let watch = session.state.subscribe();
        let store = session.store;
        let call = |mut c: TenureClient<Chan>| {
            let req = req.clone();
            let expired = watch.borrow().expired;
            async move {
                if expired {
                    return Ok(Err(Error::SessionExpired(
                        req.session.unwrap_or_default().id,
                    )));
                }
                let r = c.acquire(req).await?.into_inner();
                use proto::acquire_response::Result as R;
                Ok(match r.result {
                    Some(R::Ok(g)) => Ok(FencingToken::from(g.token.unwrap_or_default())),
                    Some(R::Error(e)) => Err(Error::from_proto(e)),
                    None => Err(Error::Malformed),
                })
            }
        };
        self.routed_with(store, bounds, call).await.map_err(|e| {
            if matches!(e, Error::SessionExpired(_)) {
                session.expire();
            }
            e
        })
    }

    /// Release `name` held by `session` in `store` (the lock of another process too, as
    /// an operator does with `tenure unlock`). With `token`, the release happens only if
    /// the session's grant carries it ([`Error::StaleToken`] otherwise).
    pub async fn release_raw(
        &self,
        store: u32,
        session: u64,
        name: &str,
        token: Option<FencingToken>,
    ) -> Result<()> {
        // Every attempt carries one request id: a retry after a lost answer gets the first
        // attempt's `Released` from the store (the id is replicated with the release).
        let request_id = self.next_request_id();
        let req = proto::ReleaseRequest {
            session: Some(proto::SessionRef { store, id: session }),
            name: name.to_string(),
            request_id,
            token: token.map(Into::into),
        };
        if self.inner.opts.transport == Transport::Stream {
            let deadline = Some(self.quick_deadline());
            return match self
                .link(store)
                .call(request_id, Rq::Release(req), true, deadline)
                .await
            {
                Ok(Ev::Released(_)) => Ok(()),
                Ok(_) => Err(Error::Malformed),
                Err(e) => Err(self.gave_up(e)),
            };
        }
        self.routed(store, |mut c| {
            let req = req.clone();
            async move {
                let r = c.release(req).await?.into_inner();
                use proto::release_response::Result as R;
                Ok(match r.result {
                    Some(R::Ok(_)) => Ok(()),
                    Some(R::Error(e)) => Err(Error::from_proto(e)),
                    None => Err(Error::Malformed),
                })
            }
        })
        .await
    }

    /// Holders and queue of `name` (a linearizable read at the store's manager).
    pub async fn holders(&self, name: &str) -> Result<LockState> {
        let store = self.store_of(name).await?;
        let name = name.to_string();
        if self.inner.opts.transport == Transport::Stream {
            let id = self.next_request_id();
            let req = proto::HolderRequest { name };
            let deadline = Some(self.quick_deadline());
            return match self
                .link(store)
                .call(id, Rq::Holder(req), true, deadline)
                .await
            {
                Ok(Ev::Holders(h)) => Ok(LockState {
                    name: h.name,
                    holders: h.holders.into_iter().map(holder).collect(),
                    waiters: h.waiters.into_iter().map(|w| w.id).collect(),
                }),
                Ok(_) => Err(Error::Malformed),
                Err(e) => Err(self.gave_up(e)),
            };
        }
        self.routed(store, |mut c| {
            let name = name.clone();
            async move {
                let r = c.holder(proto::HolderRequest { name }).await?.into_inner();
                use proto::holder_response::Result as R;
                Ok(match r.result {
                    Some(R::Ok(h)) => Ok(LockState {
                        name: h.name,
                        holders: h.holders.into_iter().map(holder).collect(),
                        waiters: h.waiters.into_iter().map(|w| w.id).collect(),
                    }),
                    Some(R::Error(e)) => Err(Error::from_proto(e)),
                    None => Err(Error::Malformed),
                })
            }
        })
        .await
    }

    /// Locks held or waited for at and under `prefix` (`/` lists every store).
    pub async fn locks(&self, prefix: &str) -> Result<Vec<LockState>> {
        let stores: Vec<u32> = if prefix == "/" {
            (0..self.stores().await?).collect()
        } else {
            vec![self.store_of(prefix).await?]
        };
        let mut out = Vec::new();
        for store in stores {
            let req = proto::ListLocksRequest {
                prefix: prefix.to_string(),
                limit: 0,
                store: Some(store),
            };
            if self.inner.opts.transport == Transport::Stream {
                let id = self.next_request_id();
                let deadline = Some(self.quick_deadline());
                let list = match self
                    .link(store)
                    .call(id, Rq::ListLocks(req), true, deadline)
                    .await
                {
                    Ok(Ev::Locks(l)) => l.locks,
                    Ok(_) => return Err(Error::Malformed),
                    Err(e) => return Err(self.gave_up(e)),
                };
                out.extend(list.into_iter().map(|l| LockState {
                    name: l.name,
                    holders: l.holders.into_iter().map(holder).collect(),
                    waiters: l.waiters.into_iter().map(|w| w.id).collect(),
                }));
                continue;
            }
            let list = self
                .routed(store, |mut c| {
                    let req = req.clone();
                    async move {
                        let r = c.list_locks(req).await?.into_inner();
                        use proto::list_locks_response::Result as R;
                        Ok(match r.result {
                            Some(R::Ok(l)) => Ok(l.locks),
                            Some(R::Error(e)) => Err(Error::from_proto(e)),
                            None => Err(Error::Malformed),
                        })
                    }
                })
                .await?;
            out.extend(list.into_iter().map(|l| LockState {
                name: l.name,
                holders: l.holders.into_iter().map(holder).collect(),
                waiters: l.waiters.into_iter().map(|w| w.id).collect(),
            }));
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Close every session of this client: their locks are released at once (no
    /// lock-delay) and their keep-alive tasks stop.
    pub async fn close(&self) -> Result<()> {
        let sessions: HashMap<u32, Arc<Session>> =
            std::mem::take(&mut *self.inner.sessions.lock().await);
        let mut first_err = None;
        for (store, s) in sessions {
            s.stop();
            if s.is_expired() {
                continue;
            }
            if self.inner.opts.transport == Transport::Stream {
                let id = self.next_request_id();
                let deadline = Some(self.quick_deadline());
                let r = match self
                    .link(store)
                    .call(id, Rq::Close(proto::StreamClose {}), true, deadline)
                    .await
                {
                    Ok(_) | Err(Error::SessionExpired(_)) => Ok(()),
                    Err(e) => Err(self.gave_up(e)),
                };
                s.state.send_modify(|st| st.expired = true);
                if let Err(e) = r {
                    first_err.get_or_insert(e);
                }
                continue;
            }
            let req = proto::CloseSessionRequest {
                session: Some(proto::SessionRef { store, id: s.id }),
            };
            let r = self
                .routed(store, |mut c| {
                    async move {
                        let r = c.close_session(req).await?.into_inner();
                        use proto::close_session_response::Result as R;
                        Ok(match r.result {
                            Some(R::Ok(_)) => Ok(()),
                            // Already gone: what closing wanted.
                            Some(R::Error(proto::Error {
                                kind: Some(proto::error::Kind::SessionExpired(_)),
                                ..
                            })) => Ok(()),
                            Some(R::Error(e)) => Err(Error::from_proto(e)),
                            None => Err(Error::Malformed),
                        })
                    }
                })
                .await;
            s.state.send_modify(|st| st.expired = true);
            if let Err(e) = r {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

/// `Unavailable` answers the keep-alive task takes in a row from one device before it
/// tries another.
const MAX_UNAVAILABLE: u32 = 3;

/// The keep-alive task of one session: a stream to the store's manager, one request
/// every TTL/3, following redirects, until the session is stopped or expires. Holds the
/// client weakly: when every handle of the client is gone, the task ends.
async fn keep_alive(
    inner: std::sync::Weak<crate::Inner>,
    session: Arc<Session>,
    opened_at: Instant,
) {
    let period = session.ttl / 3;
    let retry_min = Duration::from_millis(50);
    let mut retry = retry_min;
    let mut next_at = opened_at + period;
    let mut rotate = 0usize;
    let mut redirects = crate::Redirects::default();
    // `Unavailable` answers taken in a row.
    let mut unavailable = 0u32;
    // The endpoint a redirect named, tried next.
    let mut follow: Option<String> = None;
    let store = session.store;
    'streams: while !session.stopped.load(Ordering::SeqCst) {
        let Some(client) = inner.upgrade().map(|inner| Client { inner }) else {
            return;
        };
        let target = follow.take().unwrap_or_else(|| client.route(store, rotate));
        let mut channel = match client.channel(&target) {
            Ok(c) => c,
            Err(_) => return,
        };
        let (req_tx, req_rx) = mpsc::channel(4);
        let opened = tokio::time::timeout(
            client.inner.opts.request_timeout,
            channel.keep_alive(tokio_stream::wrappers::ReceiverStream::new(req_rx)),
        )
        .await;
        let mut answers = match opened {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(e)) => {
                debug!(store, session = session.id, %target, "keep-alive stream refused: {e}");
                client.clear_route(store);
                rotate += 1;
                drop(client);
                pause(&session, retry).await;
                retry = (retry * 2).min(Duration::from_millis(500));
                continue;
            }
            Err(_) => {
                debug!(store, session = session.id, %target, "keep-alive stream not opened in time");
                client.clear_route(store);
                rotate += 1;
                drop(client);
                continue;
            }
        };
        let response_limit = client.inner.opts.request_timeout;
        drop(client);
        loop {
            let wait = next_at.saturating_duration_since(Instant::now());
            if !wait.is_zero() {
                pause(&session, wait).await;
            }
            if session.stopped.load(Ordering::SeqCst) {
                return;
            }
            let sent = Sent::now();
            let sent_at = sent.at;
            let req = proto::KeepAliveRequest {
                session: Some(proto::SessionRef {
                    store,
                    id: session.id,
                }),
            };
            if req_tx.send(req).await.is_err() {
                continue 'streams;
            }
            let answer = tokio::time::timeout(response_limit, answers.message()).await;
            let Some(client) = inner.upgrade().map(|inner| Client { inner }) else {
                return;
            };
            use proto::keep_alive_response::Result as R;
            match answer {
                Ok(Ok(Some(proto::KeepAliveResponse {
                    result: Some(R::Ok(alive)),
                }))) => {
                    let ttl = Duration::from_millis(alive.ttl_ms);
                    let deadline = client.deadline_of(sent_at, ttl);
                    trace!(store, session = session.id, %target, rtt = ?sent_at.elapsed(), "kept alive");
                    session.state.send_modify(|s| s.extend(deadline, sent));
                    client.set_route(store, &target);
                    retry = retry_min;
                    rotate = 0;
                    redirects.reset();
                    unavailable = 0;
                    next_at = sent_at + period;
                }
                Ok(Ok(Some(proto::KeepAliveResponse {
                    result: Some(R::Error(e)),
                }))) => match Error::from_proto(e) {
                    Error::SessionExpired(_) => {
                        info!(store, session = session.id, "session expired");
                        session.expire();
                        return;
                    }
                    Error::NotManager { hint, .. } => {
                        debug!(store, session = session.id, %target, ?hint, "keep-alive redirected");
                        client.clear_route(store);
                        follow = redirects.follow(hint.as_deref(), &target);
                        if follow.is_none() {
                            rotate += 1;
                        }
                        unavailable = 0;
                        next_at = Instant::now() + retry;
                        retry = (retry * 2).min(Duration::from_millis(500));
                        continue 'streams;
                    }
                    e => {
                        debug!(store, session = session.id, %target, "keep-alive refused: {e}");
                        next_at = Instant::now() + retry;
                        retry = (retry * 2).min(Duration::from_millis(500));
                        // A device between manager states answers `Unavailable`: wait
                        // there a little, then try the others.
                        unavailable += 1;
                        if !matches!(e, Error::Unavailable { .. }) || unavailable > MAX_UNAVAILABLE
                        {
                            unavailable = 0;
                            client.clear_route(store);
                            rotate += 1;
                            continue 'streams;
                        }
                    }
                },
                // The stream broke, or the manager did not answer in time: another one.
                other => {
                    debug!(store, session = session.id, %target, timed_out = other.is_err(), "keep-alive stream lost");
                    client.clear_route(store);
                    rotate += 1;
                    next_at = Instant::now() + retry;
                    retry = (retry * 2).min(Duration::from_millis(500));
                    continue 'streams;
                }
            }
        }
    }
}

/// Sleep `d`, or less if the session is stopped meanwhile.
async fn pause(session: &Session, d: Duration) {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = session.wake.notified() => {}
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
