//! The lock calls of a [`Client`]: acquire (over the session stream or unary), release,
//! who holds a lock, listing locks, and closing the client's sessions.

use super::{FencingToken, LockGuard, LockMode, LockOptions, LockState, Session, Wait, holder};
use crate::Chan;
use crate::proto::{self, tenure_client::TenureClient};
use crate::stream::{Ev, Rq};
use crate::{Bounds, Client, Error, Result, Transport};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

impl Client {
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

    /// Open (or reuse) the client's session and acquire under it (in the name's store,
    /// under the session's child there when its home is another store); a session found
    /// expired is replaced once. On the stream, a timed wait keeps its end (the time spent
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
                self.acquire_stream(&session, store, name, mode, wait, options)
                    .await
            } else {
                self.acquire(&session, store, name, mode, wait, options)
                    .await
            };
            match acquired {
                Ok(token) => {
                    let guard = LockGuard {
                        client: self.clone(),
                        state: session.state.subscribe(),
                        session,
                        store,
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
        store: u32,
        name: &str,
        mode: LockMode,
        wait: Wait,
        options: LockOptions,
    ) -> Result<FencingToken> {
        let (no_wait, timeout_ms) = super::convert::wait_to_proto(wait);
        let id = self.next_request_id();
        let req = proto::AcquireRequest {
            session: Some(proto::SessionRef {
                store: session.store,
                id: session.id,
            }),
            name: name.to_string(),
            mode: super::convert::mode_to_proto(mode),
            r#try: no_wait,
            timeout_ms,
            request_id: id,
            lock_delay_ms: options.lock_delay.map(|d| d.as_millis() as u64),
            no_wait,
        };
        let quick = no_wait;
        match self
            .link(store)
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
        store: u32,
        name: &str,
        mode: LockMode,
        wait: Wait,
        options: LockOptions,
    ) -> Result<FencingToken> {
        let o = &self.inner.opts;
        let request_id = self.next_request_id();
        let now = Instant::now();
        let (no_wait, timeout_ms, bounds) = match wait {
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
            mode: super::convert::mode_to_proto(mode),
            r#try: no_wait,
            timeout_ms,
            request_id,
            lock_delay_ms: options.lock_delay.map(|d| d.as_millis() as u64),
            no_wait,
        };
        let watch = session.state.subscribe();
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

    /// Release `name` held by `session` of `store` (the lock of another process too, as
    /// an operator does with `tenure unlock`: a holder as listed, or a client's session
    /// whose home is another store than the name's). With `token`, the release happens
    /// only if the session's grant carries it ([`Error::StaleToken`] otherwise).
    pub async fn release_raw(
        &self,
        store: u32,
        session: u64,
        name: &str,
        token: Option<FencingToken>,
    ) -> Result<()> {
        let session_store = store;
        let store = self.store_of(name).await?;
        // Every attempt carries one request id: a retry after a lost answer gets the first
        // attempt's `Released` from the store (the id is replicated with the release).
        // Request ids are this client's, recorded under its own session: another
        // session's release (an operator's unlock) carries none (0), for an id of ours
        // could be one that session used for another request (refused) or for a release
        // of the same name (answered from that record, releasing nothing).
        let own = matches!(self.session_state().await, Some((st, id, _)) if (st, id) == (session_store, session));
        let request_id = if own { self.next_request_id() } else { 0 };
        let req = proto::ReleaseRequest {
            session: Some(proto::SessionRef {
                store: session_store,
                id: session,
            }),
            name: name.to_string(),
            request_id,
            token: token.map(Into::into),
        };
        // The stream matches answers by request id: another session's release goes as a
        // call of its own.
        if own && self.inner.opts.transport == Transport::Stream {
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

    /// Close this client's session: its locks in every store are released at once (no
    /// lock-delay) and its keep-alive task stops.
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
