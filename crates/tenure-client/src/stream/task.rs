//! The [`Task`] behind a [`Link`]: sends commands and keep-alives on the session stream,
//! matches answers to requests, and reconnects after a break.

use super::connect::connect;
use super::{Broken, Cmd, Conn, Pending, Task};
use super::{Ev, Rq};
use crate::locks::{Session, SessionState};
use crate::proto;
use crate::suspend::Sent;
use crate::{Client, Error};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tracing::{debug, info, trace};

impl Task {
    fn client(&self) -> Option<Client> {
        self.inner.upgrade().map(|inner| Client { inner })
    }

    pub(super) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Cmd>) {
        let mut cmds_open = true;
        loop {
            if !cmds_open && self.pending.is_empty() {
                return;
            }
            if let Some(s) = &self.session
                && s.stopped.load(Ordering::SeqCst)
            {
                self.session = None;
                self.next_keep_alive = None;
                self.keep_alive = None;
            }
            if self.conn.is_none() && (!self.pending.is_empty() || self.session.is_some()) {
                if !self.connect().await {
                    // Nothing to connect for (the client is gone), or the session ended.
                    if self.client().is_none() {
                        return;
                    }
                }
                continue;
            }
            let ka_due = self.keep_alive_due();
            let stuck_at = self.stuck_at();
            let retry_due = self.retry_due();
            let broken = tokio::select! {
                cmd = rx.recv(), if cmds_open => {
                    match cmd {
                        Some(cmd) => self.command(cmd).await,
                        None => {
                            cmds_open = false;
                            // Nobody can wait for answers any more; requests that change
                            // nothing need not run.
                            self.pending.retain(|_, p| p.reply.as_ref().is_some_and(|r| !r.is_closed()));
                            None
                        }
                    }
                }
                ev = next_event(&mut self.conn), if self.conn.is_some() => self.event(ev).await,
                _ = sleep_until(ka_due), if ka_due.is_some() => self.send_keep_alive().await,
                _ = sleep_until(retry_due), if retry_due.is_some() => self.send_pending().await,
                _ = sleep_until(stuck_at), if stuck_at.is_some() => {
                    let ep = self.conn.as_ref().map(|c| c.endpoint.clone()).unwrap_or_default();
                    debug!(store = self.store, endpoint = %ep, "no answer in time: the device is stuck");
                    Some(Broken::Stuck(ep))
                }
            };
            if let Some(b) = broken {
                self.broken(b).await;
            }
        }
    }

    /// When the next keep-alive is due (none while one is in flight or unconnected).
    fn keep_alive_due(&self) -> Option<Instant> {
        if self.keep_alive.is_some() || self.conn.is_none() {
            return None;
        }
        self.session.as_ref().and(self.next_keep_alive)
    }

    /// When the next request answered `Overloaded` may be sent again (none unconnected).
    fn retry_due(&self) -> Option<Instant> {
        self.conn.as_ref()?;
        let now = Instant::now();
        (self.pending.values())
            .filter(|p| p.sent_at.is_none())
            .filter_map(|p| p.not_before)
            .filter(|t| *t > now)
            .min()
    }

    /// When the device is considered stuck: a keep-alive, or a quick request, not
    /// answered within its bound.
    fn stuck_at(&self) -> Option<Instant> {
        let client = self.client()?;
        let o = &client.inner.opts;
        let ka = self.keep_alive.map(|(_, sent)| {
            let at = sent.at;
            let ttl = self.session.as_ref().map_or(o.session_ttl, |s| s.ttl);
            at + (ttl / 3).clamp(o.attempt_timeout, o.request_timeout)
        });
        let quick = self
            .pending
            .values()
            .filter(|p| p.quick)
            .filter_map(|p| p.sent_at.map(|s| s.at))
            .min()
            .map(|at| at + o.request_timeout);
        match (ka, quick) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    async fn command(&mut self, cmd: Cmd) -> Option<Broken> {
        match cmd {
            Cmd::Call {
                id,
                kind,
                quick,
                reply,
            } => {
                if needs_session(&kind) && self.session.is_none() {
                    let _ = reply.send(Err(Error::SessionExpired(0)));
                    return None;
                }
                self.pending.insert(
                    id,
                    Pending {
                        kind,
                        quick,
                        reply: Some(reply),
                        open: None,
                        sent_at: None,
                        overloaded: 0,
                        not_before: None,
                    },
                );
                self.send_pending().await
            }
            Cmd::Open {
                id,
                ttl_ms,
                client_name,
                reply,
            } => {
                if let Some(s) = &self.session {
                    let _ = reply.send(Ok(s.clone()));
                    return None;
                }
                let kind = Rq::Open(proto::OpenSessionRequest {
                    store: Some(self.store),
                    ttl_ms,
                    client_name: client_name.clone(),
                    request_id: id,
                });
                self.pending.insert(
                    id,
                    Pending {
                        kind,
                        quick: true,
                        reply: None,
                        open: Some((client_name, reply)),
                        sent_at: None,
                        overloaded: 0,
                        not_before: None,
                    },
                );
                self.send_pending().await
            }
            Cmd::Abandon { id } => {
                if let Some(p) = self.pending.get_mut(&id) {
                    p.reply = None;
                    p.open = None;
                    if !matches!(p.kind, Rq::Acquire(_) | Rq::Open(_)) {
                        // Its answer changes nothing the client keeps.
                        self.pending.remove(&id);
                    }
                }
                None
            }
            Cmd::Confirm { reply } => {
                self.session.as_ref()?;
                self.confirms.push(reply);
                if self.keep_alive.is_none() && self.conn.is_some() {
                    self.send_keep_alive().await
                } else {
                    None
                }
            }
        }
    }

    /// Send what is pending and not sent on this stream, oldest first, within the
    /// server's window.
    async fn send_pending(&mut self) -> Option<Broken> {
        let conn = self.conn.as_mut()?;
        let now = Sent::now();
        let mut out = Vec::new();
        for (id, p) in self.pending.iter_mut() {
            if conn.in_flight >= conn.max_in_flight {
                break;
            }
            if p.sent_at.is_some() || p.not_before.is_some_and(|t| t > now.at) {
                continue;
            }
            p.sent_at = Some(now);
            conn.in_flight += 1;
            out.push(proto::SessionRequest {
                request_id: *id,
                kind: Some(p.kind.clone()),
            });
        }
        for req in out {
            if conn.tx.send(req).await.is_err() {
                return Some(Broken::Retry(conn.endpoint.clone()));
            }
        }
        None
    }

    async fn send_keep_alive(&mut self) -> Option<Broken> {
        let client = self.client()?;
        let conn = self.conn.as_mut()?;
        self.session.as_ref()?;
        let id = client.next_request_id();
        self.keep_alive = Some((id, Sent::now()));
        let req = proto::SessionRequest {
            request_id: id,
            kind: Some(Rq::KeepAlive(proto::StreamKeepAlive {})),
        };
        if conn.tx.send(req).await.is_err() {
            return Some(Broken::Retry(conn.endpoint.clone()));
        }
        None
    }

    /// One event from the stream.
    async fn event(
        &mut self,
        ev: Option<std::result::Result<proto::SessionEvent, tonic::Status>>,
    ) -> Option<Broken> {
        let endpoint = self.conn.as_ref()?.endpoint.clone();
        let ev = match ev {
            Some(Ok(ev)) => ev,
            Some(Err(s)) => {
                debug!(store = self.store, %endpoint, "session stream failed: {s}");
                return Some(Broken::Retry(endpoint));
            }
            None => return Some(Broken::Retry(endpoint)),
        };
        let kind = ev.kind?;
        if ev.request_id == 0 {
            return self.pushed(kind, endpoint);
        }
        if let Some((ka, sent_at)) = self.keep_alive
            && ka == ev.request_id
        {
            self.keep_alive = None;
            return self.kept_alive(kind, sent_at, endpoint);
        }
        let client = self.client();
        let p = self.pending.get_mut(&ev.request_id)?;
        if let Some(c) = self.conn.as_mut() {
            c.in_flight = c.in_flight.saturating_sub(1);
        }
        if let Ev::Error(e) = &kind {
            match Error::from_proto(e.clone()) {
                Error::Unavailable { .. } => {
                    p.sent_at = None;
                    return Some(Broken::Retry(endpoint));
                }
                Error::NotManager { hint, .. } => {
                    p.sent_at = None;
                    return Some(Broken::Redirect(hint));
                }
                Error::TooManyRequests(_) => {
                    p.sent_at = None;
                    return None;
                }
                // Not run: the same device again after a pause, on this stream, up to
                // the client's attempts (then the caller gets the error).
                Error::Overloaded(_)
                    if (client.as_ref())
                        .is_some_and(|c| p.overloaded + 1 < c.inner.opts.max_attempts) =>
                {
                    p.sent_at = None;
                    p.overloaded += 1;
                    let pause = client.as_ref().map_or(Duration::from_millis(100), |c| {
                        overload_pause(&c.inner.opts, p.overloaded, ev.request_id)
                    });
                    p.not_before = Some(Instant::now() + pause);
                    trace!(store = self.store, id = ev.request_id, ?pause, "overloaded");
                    return None;
                }
                _ => {}
            }
        }
        let p = self.pending.remove(&ev.request_id)?;
        self.failures = 0;
        self.redirects.reset();
        if let Some(client) = self.client() {
            client.set_route(self.store, &endpoint);
        }
        if let Some((name, reply)) = p.open {
            let answer = match &kind {
                Ev::Opened(o) => {
                    let session = self.bind(o, p.sent_at.unwrap_or_else(Sent::now));
                    debug!(store = self.store, session = session.id, client = %name, "session opened");
                    Ok(session)
                }
                Ev::Error(e) => Err(Error::from_proto(e.clone())),
                _ => Err(Error::Malformed),
            };
            let _ = reply.send(answer);
        } else if let Some(reply) = p.reply.filter(|r| !r.is_closed()) {
            let answer = match kind {
                Ev::Error(e) => {
                    let e = Error::from_proto(e);
                    if matches!(e, Error::SessionExpired(_)) && needs_session(&p.kind) {
                        self.expired();
                    }
                    Err(e)
                }
                other => Ok(other),
            };
            if let Err(Ok(Ev::Granted(g))) = reply.send(answer) {
                // The caller stopped waiting just now.
                return self.release_unwanted(&p.kind, g).await;
            }
        } else if let Ev::Granted(g) = kind {
            return self.release_unwanted(&p.kind, g).await;
        } else if let Ev::Opened(o) = &kind
            && self.session.is_none()
        {
            // Its caller gave up, but the session exists: keep it for the next open
            // rather than leave it to expire.
            self.bind(o, p.sent_at.unwrap_or_else(Sent::now));
        }
        self.send_pending().await
    }

    /// An answer to the keep-alive in flight.
    fn kept_alive(&mut self, kind: Ev, sent_at: Sent, endpoint: String) -> Option<Broken> {
        match kind {
            Ev::Alive(a) => {
                self.extend(sent_at, Duration::from_millis(a.ttl_ms));
                for c in self.confirms.drain(..) {
                    let _ = c.send(());
                }
                None
            }
            Ev::Error(e) => match Error::from_proto(e) {
                Error::SessionExpired(_) => {
                    self.expired();
                    None
                }
                Error::NotManager { hint, .. } => Some(Broken::Redirect(hint)),
                _ => Some(Broken::Retry(endpoint)),
            },
            _ => None,
        }
    }

    /// An event the server pushed.
    fn pushed(&mut self, kind: Ev, endpoint: String) -> Option<Broken> {
        match kind {
            Ev::Redirect(r) => {
                let hint = redirect_hint(r);
                debug!(store = self.store, %endpoint, ?hint, "redirected");
                Some(Broken::Redirect(hint))
            }
            Ev::Expiring(e) => {
                debug!(
                    store = self.store,
                    session = e.session,
                    remaining_ms = e.remaining_ms,
                    "the manager warns the session is expiring"
                );
                self.next_keep_alive = Some(Instant::now());
                None
            }
            Ev::Ended(e) => {
                if self.session.as_ref().is_some_and(|s| s.id == e.session) {
                    info!(
                        store = self.store,
                        session = e.session,
                        expired = e.expired,
                        "session ended at the manager"
                    );
                    self.expired();
                }
                None
            }
            Ev::StreamClosed(c) => {
                debug!(store = self.store, %endpoint, reason = %c.reason, "the server closed the stream");
                Some(Broken::Retry(endpoint))
            }
            _ => None,
        }
    }

    /// A grant nobody waits for any more: release it.
    async fn release_unwanted(&mut self, kind: &Rq, g: proto::Granted) -> Option<Broken> {
        let (Rq::Acquire(a), Some(client)) = (kind, self.client()) else {
            return None;
        };
        debug!(store = self.store, name = %g.name, "releasing a grant its caller gave up on");
        let id = client.next_request_id();
        self.pending.insert(
            id,
            Pending {
                kind: Rq::Release(proto::ReleaseRequest {
                    session: a.session,
                    name: g.name,
                    request_id: id,
                    // Fenced: this release ends the grant given up on and no later one.
                    token: g.token,
                }),
                quick: true,
                reply: None,
                open: None,
                sent_at: None,
                overloaded: 0,
                not_before: None,
            },
        );
        self.send_pending().await
    }

    /// The session opened by an answer.
    fn bind(&mut self, o: &proto::SessionOpened, sent: Sent) -> Arc<Session> {
        let id = o.session.as_ref().map_or(0, |s| s.id);
        let ttl = Duration::from_millis(o.ttl_ms);
        let deadline = self
            .client()
            .map_or(sent.at, |c| c.deadline_of(sent.at, ttl));
        let state = SessionState::new(deadline, sent);
        let session = Arc::new(Session::new(self.store, id, ttl, state));
        self.session = Some(session.clone());
        self.next_keep_alive = Some(sent.at + ttl / 3);
        session
    }

    /// A keep-alive (or a resume) sent at `sent_at` was answered with `ttl`.
    fn extend(&mut self, sent: Sent, ttl: Duration) {
        let Some(client) = self.client() else {
            return;
        };
        if let Some(s) = &self.session {
            let deadline = client.deadline_of(sent.at, ttl);
            trace!(store = self.store, session = s.id, rtt = ?sent.at.elapsed(), "kept alive");
            s.state.send_modify(|st| st.extend(deadline, sent));
            self.next_keep_alive = Some(sent.at + s.ttl / 3);
        }
    }

    /// The session is gone: requests that need it fail, the link goes on without one.
    fn expired(&mut self) {
        let Some(s) = self.session.take() else {
            return;
        };
        s.expire();
        self.keep_alive = None;
        self.next_keep_alive = None;
        self.confirms.clear();
        let ids: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| needs_session(&p.kind))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if let Some(p) = self.pending.remove(&id)
                && let Some(r) = p.reply
            {
                let _ = r.send(Err(Error::SessionExpired(s.id)));
            }
        }
    }

    /// The stream ended: forget it; the next loop connects again.
    async fn broken(&mut self, b: Broken) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        let endpoint = conn.endpoint.clone();
        drop(conn);
        self.keep_alive = None;
        for p in self.pending.values_mut() {
            p.sent_at = None;
        }
        let Some(client) = self.client() else {
            return;
        };
        match b {
            Broken::Redirect(hint) => {
                client.clear_route(self.store);
                self.hint = self.redirects.follow(hint.as_deref(), &endpoint);
                if self.hint.is_none() {
                    self.rotate += 1;
                    self.backoff(&client).await;
                }
            }
            Broken::Retry(ep) => {
                debug!(store = self.store, endpoint = %ep, failures = self.failures, "session stream lost");
                if self.failures >= 3 {
                    client.clear_route(self.store);
                    self.rotate += 1;
                }
                self.backoff(&client).await;
            }
            Broken::Stuck(ep) => {
                client.clear_route(self.store);
                client.pass_over(&ep);
            }
        }
    }

    async fn backoff(&mut self, client: &Client) {
        let o = &client.inner.opts;
        let d = o
            .backoff_min
            .saturating_mul(1 << self.failures.min(10))
            .min(o.backoff_max);
        self.failures += 1;
        tokio::time::sleep(d).await;
    }

    /// Connect (racing the endpoints), start the stream with the session to resume, and
    /// re-send what is pending. False when there is nothing to connect for.
    async fn connect(&mut self) -> bool {
        let Some(client) = self.client() else {
            return false;
        };
        let resume = self.session.as_ref().map(|s| s.id);
        let hint = self.hint.take();
        let start_id = client.next_request_id();
        let sent_at = Sent::now();
        match connect(&client, self.store, resume, hint, self.rotate, start_id).await {
            Ok((conn, started)) => {
                self.failures = 0;
                if let Some(a) = started.session {
                    self.extend(sent_at, Duration::from_millis(a.ttl_ms));
                }
                trace!(store = self.store, endpoint = %conn.endpoint, "session stream started");
                self.conn = Some(conn);
                if self.send_pending().await.is_some() {
                    self.conn = None;
                }
                true
            }
            Err(Error::SessionExpired(_)) => {
                info!(store = self.store, "session expired (found when resuming)");
                self.expired();
                true
            }
            Err(e) if !e.retryable() && !e.transient_rpc() && !matches!(e, Error::NoEndpoints) => {
                // Every device refuses the stream itself (an unknown store): its requests
                // fail with that error.
                debug!(store = self.store, "session stream refused: {e}");
                for (_, p) in std::mem::take(&mut self.pending) {
                    let err = match &e {
                        Error::UnknownStore(s) => Error::UnknownStore(*s),
                        Error::InvalidRequest(r) => Error::InvalidRequest(r.clone()),
                        Error::Rpc(s) => Error::Rpc(s.clone()),
                        Error::Unauthenticated(m) => Error::Unauthenticated(m.clone()),
                        Error::PermissionDenied(m) => Error::PermissionDenied(m.clone()),
                        other => Error::Rejected(other.to_string()),
                    };
                    if let Some(r) = p.reply {
                        let _ = r.send(Err(err));
                    } else if let Some((_, r)) = p.open {
                        let _ = r.send(Err(err));
                    }
                }
                true
            }
            Err(e) => {
                debug!(store = self.store, "could not start a session stream: {e}");
                self.backoff(&client).await;
                true
            }
        }
    }
}

/// The manager's endpoint a redirect names, if any.
pub(crate) fn redirect_hint(r: proto::Redirect) -> Option<String> {
    r.not_manager
        .map(|n| n.hint_endpoint)
        .filter(|h| !h.is_empty())
}

/// Whether a request needs the link's session.
pub(super) fn needs_session(kind: &Rq) -> bool {
    match kind {
        Rq::Acquire(a) => a.session.is_none(),
        Rq::Release(r) => r.session.is_none(),
        Rq::KeepAlive(_) | Rq::Close(_) => true,
        _ => false,
    }
}

pub(super) async fn next_event(
    conn: &mut Option<Conn>,
) -> Option<std::result::Result<proto::SessionEvent, tonic::Status>> {
    match conn {
        Some(c) => c.rx.message().await.transpose(),
        None => futures::future::pending().await,
    }
}

/// The pause before a request answered `Overloaded` for the `n`th time in a row is sent
/// again: the client's backoff, doubling, spread over half to all of it by the request id
/// (requests refused together come back apart).
fn overload_pause(o: &crate::ClientOptions, n: u32, id: u64) -> Duration {
    let full = (o.backoff_min.max(Duration::from_millis(1)))
        .saturating_mul(1 << n.saturating_sub(1).min(10))
        .min(o.backoff_max);
    let spread = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54; // 0..1024
    full / 2 + full / 2 * spread as u32 / 1024
}

pub(super) async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => futures::future::pending().await,
    }
}
