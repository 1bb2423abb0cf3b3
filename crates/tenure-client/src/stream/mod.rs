//! The client side of the session stream (`rpc Session`, DESIGN §8).
//!
//! A [`Link`] is one client's channel to one store: a task that owns a session stream to
//! the store's manager, the client's session if its home is that store (if it opened
//! one; the links to other stores carry the session in each request, and the server runs
//! them under the session's child there), and every request not answered yet. Callers hand it requests with their ids and wait for the
//! answer; the task pipelines them on the stream (at most the server's `max_in_flight` at
//! once), matches answers by id, and sends a keep-alive every TTL/3, each answer moving
//! the session's conservative deadline to the keep-alive's send time + TTL − δ_c.
//!
//! When the stream ends — a `redirect` from a device that is not (or no longer) the
//! manager, an `Unavailable` answer, a broken connection, or a keep-alive or request not
//! answered in time (a frozen device) — the task connects again, `start`s the stream
//! with the session to resume (the server checks it is alive and extends it, as a
//! keep-alive does), and re-sends every unanswered request with its id. Acquires and
//! releases are idempotent by `(session, request id)` in the store, so a re-sent request
//! is answered exactly once, with the outcome of the first.
//!
//! Connecting races the endpoints ([`connect`]): the remembered manager (or the
//! redirect's hint) first; if it has not answered within `hedge_after`, the next one
//! too, and so on; the first stream started wins. An endpoint that did not answer within
//! `attempt_timeout` is passed over (tried last) for `pass_over`, so one frozen device —
//! its kernel accepts connections, the process never answers — costs new requests at
//! most one hedge delay, not a timeout.
//!
//! A caller that gives up on a request (its deadline passed, or it was dropped) tells the
//! task; if that request is granted later, the task releases the lock at once.

use crate::locks::Session;
use crate::proto;
pub(crate) use crate::proto::{session_event::Kind as Ev, session_request::Kind as Rq};
use crate::suspend::Sent;
use crate::{Client, Error, Inner, Result};
use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

mod connect;
mod task;

pub(crate) use connect::connect;
pub(crate) use task::redirect_hint;

/// Where a request's answer goes: the answer's event, or its typed error.
pub(crate) type Reply = oneshot::Sender<Result<Ev>>;

/// What callers ask of a link's task.
#[derive(Debug)]
pub(crate) enum Cmd {
    /// Run a request. `quick`: it should be answered promptly (not a wait in a lock's
    /// queue), so no answer within the request timeout means the device is stuck.
    Call {
        id: u64,
        kind: Rq,
        quick: bool,
        reply: Reply,
    },
    /// Open a session in the store (the link is then bound to it).
    Open {
        id: u64,
        ttl_ms: u64,
        client_name: String,
        reply: oneshot::Sender<Result<Arc<Session>>>,
    },
    /// The caller of `id` gave up: forget it, and release the lock if it is granted.
    Abandon { id: u64 },
    /// Keep the session alive now; answer when the keep-alive is answered (or failed).
    Confirm { reply: oneshot::Sender<()> },
}

/// One client's channel to one store.
#[derive(Debug)]
pub(crate) struct Link {
    tx: mpsc::UnboundedSender<Cmd>,
}

impl Link {
    /// Start the task of a link to `store`.
    pub(crate) fn spawn(client: &Client, store: u32) -> Link {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = Task {
            inner: Arc::downgrade(&client.inner),
            store,
            session: None,
            pending: BTreeMap::new(),
            conn: None,
            keep_alive: None,
            next_keep_alive: None,
            confirms: Vec::new(),
            hint: None,
            redirects: crate::Redirects::default(),
            failures: 0,
            rotate: 0,
        };
        tokio::spawn(task.run(rx));
        Link { tx }
    }

    /// Run `kind` as request `id` and wait for its answer until `deadline`; a caller that
    /// stops waiting (the deadline, or its future dropped) abandons the request.
    pub(crate) async fn call(
        &self,
        id: u64,
        kind: Rq,
        quick: bool,
        deadline: Option<Instant>,
    ) -> Result<Ev> {
        let (reply, rx) = oneshot::channel();
        let cmd = Cmd::Call {
            id,
            kind,
            quick,
            reply,
        };
        self.ask(id, cmd, rx, deadline).await
    }

    /// Open a session with this TTL, within `deadline`.
    pub(crate) async fn open(
        &self,
        id: u64,
        ttl_ms: u64,
        client_name: String,
        deadline: Instant,
    ) -> Result<Arc<Session>> {
        let (reply, rx) = oneshot::channel();
        let cmd = Cmd::Open {
            id,
            ttl_ms,
            client_name,
            reply,
        };
        self.ask(id, cmd, rx, Some(deadline)).await
    }

    /// Hand `cmd` (request `id`) to the task and wait for its answer on `rx` until
    /// `deadline`; the request is abandoned if the wait ends without one.
    async fn ask<T>(
        &self,
        id: u64,
        cmd: Cmd,
        rx: oneshot::Receiver<Result<T>>,
        deadline: Option<Instant>,
    ) -> Result<T> {
        self.tx.send(cmd).map_err(|_| Error::Closed)?;
        let mut guard = Abandon {
            tx: &self.tx,
            id,
            armed: true,
        };
        let r = match deadline {
            Some(d) => tokio::time::timeout_at(d.into(), rx)
                .await
                .map_err(|_| Error::DeadlinePassed)?,
            None => rx.await,
        };
        guard.armed = false;
        r.map_err(|_| Error::Closed)?
    }

    /// Keep the session alive now and wait (at most `limit`) for the answer.
    pub(crate) async fn confirm(&self, limit: Duration) {
        let (reply, rx) = oneshot::channel();
        if self.tx.send(Cmd::Confirm { reply }).is_ok() {
            let _ = tokio::time::timeout(limit, rx).await;
        }
    }
}

/// Abandons a request when dropped armed (its caller stopped waiting).
struct Abandon<'a> {
    tx: &'a mpsc::UnboundedSender<Cmd>,
    id: u64,
    armed: bool,
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.tx.send(Cmd::Abandon { id: self.id });
        }
    }
}

/// A request not answered yet.
#[derive(Debug)]
struct Pending {
    kind: Rq,
    quick: bool,
    reply: Option<Reply>,
    /// An open's answer goes here instead.
    open: Option<(String, oneshot::Sender<Result<Arc<Session>>>)>,
    /// Sent on the current stream, when.
    sent_at: Option<Sent>,
    /// Answered `Overloaded` this many times in a row: not sent again before `not_before`.
    overloaded: u32,
    not_before: Option<Instant>,
}

/// An open stream.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) endpoint: String,
    pub(crate) tx: mpsc::Sender<proto::SessionRequest>,
    pub(crate) rx: tonic::Streaming<proto::SessionEvent>,
    max_in_flight: usize,
    in_flight: usize,
}

/// The link's task.
struct Task {
    inner: Weak<Inner>,
    store: u32,
    session: Option<Arc<Session>>,
    pending: BTreeMap<u64, Pending>,
    conn: Option<Conn>,
    /// The keep-alive in flight: its id and send time.
    keep_alive: Option<(u64, Sent)>,
    next_keep_alive: Option<Instant>,
    confirms: Vec<oneshot::Sender<()>>,
    /// Where the last redirect pointed, tried first by the next connect.
    hint: Option<String>,
    /// Redirects followed in a row.
    redirects: crate::Redirects,
    /// Connects or streams that failed in a row (for the backoff).
    failures: u32,
    /// How far the endpoints in turn have moved on (after redirect chains that led
    /// nowhere, or streams that kept failing).
    rotate: usize,
}

/// What ended a stream, and what to do about it.
#[derive(Debug)]
enum Broken {
    /// Connect again at once, to the hint first.
    Redirect(Option<String>),
    /// Connect again after a backoff (the endpoint stays the first choice).
    Retry(String),
    /// The endpoint did not answer in time: pass it over, connect elsewhere.
    Stuck(String),
}

/// Requests buffered towards one stream.
pub(crate) const OUTBOX: usize = 1024;
