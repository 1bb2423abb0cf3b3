//! Sessions: the client's clock for deadlines, opening the client's one session on first
//! use, and the keep-alive task that extends it until it is stopped or expires.

use super::{Session, SessionState};
use crate::proto;
use crate::suspend::Sent;
use crate::{Client, Error, Result, Transport};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tenure_core::session::client_deadline;
use tokio::sync::{Notify, mpsc, watch};
use tracing::{debug, info, trace};

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

    /// This client's live session, opened (with its keep-alive task) if there is none.
    /// One session serves names of every store (DESIGN §4, "One session per client"):
    /// it is opened in `store`, the store of the name that first needs it (its *home*),
    /// and a request for a name of another store runs under its child there.
    pub(crate) async fn session(&self, store: u32) -> Result<Arc<Session>> {
        let mut sessions = self.inner.sessions.lock().await;
        sessions.retain(|_, s| !s.is_expired());
        if let Some(s) = sessions.values().next() {
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
                            store: Some(store),
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

    /// This client's session, if it has one: its home store, id and state.
    pub async fn session_state(&self) -> Option<(u32, u64, SessionState)> {
        let sessions = self.inner.sessions.lock().await;
        (sessions.values().next()).map(|s| (s.store, s.id, *s.state.borrow()))
    }
}

/// `Unavailable` answers the keep-alive task takes in a row from one device before it
/// tries another.
pub(super) const MAX_UNAVAILABLE: u32 = 3;

/// The keep-alive task of one session: a stream to the store's manager, one request
/// every TTL/3, following redirects, until the session is stopped or expires. Holds the
/// client weakly: when every handle of the client is gone, the task ends.
pub(super) async fn keep_alive(
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
pub(super) async fn pause(session: &Session, d: Duration) {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = session.wake.notified() => {}
    }
}
