//! The session stream (DESIGN §8; `rpc Session` in `proto/tenure.proto`): one ordered
//! channel per client, the shape of ZooKeeper's and Chubby's sessions.
//!
//! A stream starts with `start` (its store, the home of its session, and the session it
//! resumes, if any). Its requests may name locks, prefixes and watches of any store: those
//! of another store run under the session's child there (DESIGN §4, "One session per
//! client"), as on the unary API. Then
//! requests are pipelined: each is checked here (request id, size, kind, store, session),
//! run through the same handler the unary RPC of its kind runs ([`Api`]'s `do_*`), and
//! answered with its id as soon as the core answers, in any order. At most
//! [`MAX_IN_FLIGHT`] requests run at once; one more is answered `TooManyRequests` and not
//! run. A request the device has no place for within `stream_admission_wait_ms` (1 s;
//! admission, see [`crate::admission`]) is answered `Overloaded`, not run, and the client sends it again
//! after a pause. Bad input
//! on one request gets a typed error on that request and changes nothing; the stream
//! stays up. A frame that cannot be decoded at all ends the stream with a
//! `stream_closed` reason.
//!
//! Any device serves the stream: requests for a store this device does not manage are
//! forwarded to the manager by the core, and watches are carried from it (DESIGN §8).
//! When a request is answered `NotManager` (no manager known), or the
//! driver reports that this device stopped managing the store, the stream sends
//! `redirect` and ends; requests not answered by then are not answered here, and the
//! client re-sends them, with their ids, on the new manager (acquires and releases are
//! idempotent by `(session, request id)` in the core, reads are re-run).
//!
//! Pushed events (request id 0): `ended` when the core has ended the stream's session
//! (expiry or a close from elsewhere; its locks are released), `expiring` when the
//! session has not been kept alive for two thirds of its TTL. `ended` comes from the
//! manager's device: a stream at another device learns of its session's end from the
//! answer to its next keep-alive (`SessionExpired`).
//!
//! Object watches (DESIGN §5): `watch_objects` registers a watch of a prefix (of the
//! prefix's store; `/` watches the stream's store) with the manager, as the stream's own watch client
//! ([`crate::driver::routes::WatchRoutes`]), and is answered `watching`; the changes follow as
//! pushed `object_events`, in revision order. When the watch ends at this device (the
//! manager stopped managing the store, or its history no longer reaches the watch's
//! position) a pushed `watch_ended` carries the typed reason (`NotManager` with the hint,
//! or `Compacted`); the client watches again elsewhere after the last revision it saw.
//! The stream's watches are removed when it ends.
//!
//! Authorization ([`crate::auth`]): the caller's token is checked when the stream opens;
//! each request naming a path is checked against it here, before it runs, and one the
//! token may not make is answered with the typed `PermissionDenied` error — nothing ran,
//! and the stream stays up.

use crate::auth::{Caller, Perm};
use crate::driver::calls::DeviceEvent;
use crate::grpc::Api;
use futures::stream::{FuturesUnordered, StreamExt};
use prost::Message;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::time::Duration;
use tenure_client::proto::{
    self, error::Kind, session_event::Kind as Ev, session_request::Kind as Rq,
};
use tenure_core::ids::SessionId;
use tenure_core::ids::{ClientId, StoreId};
use tenure_core::io::{ObjectRequest, Request, Response};
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};
use tracing::debug;

/// The events a stream sends.
pub type EventStream =
    Pin<Box<dyn futures::Stream<Item = Result<proto::SessionEvent, Status>> + Send>>;

/// Most requests one stream runs at once.
pub const MAX_IN_FLIGHT: usize = 512;

/// Answered request ids a stream remembers (with what they asked) to refuse an id reused
/// for a different request.
const REMEMBERED_IDS: usize = 4096;

/// Serve one stream: a task reads requests and writes events until either side ends.
pub fn serve(api: Api, caller: Caller, inbound: Streaming<proto::SessionRequest>) -> EventStream {
    let api = api.waiting_for_admission();
    let (tx, rx) = mpsc::channel(MAX_IN_FLIGHT + 16);
    tokio::spawn(async move {
        let events = api.subscribe();
        let mut watches = Watches::new(&api);
        let why = run(&api, &caller, inbound, &tx, events, &mut watches).await;
        watches.close(&api);
        debug!(?why, "session stream ended");
    });
    Box::pin(ReceiverStream::new(rx))
}

/// The kinds of request, for what an answer changes in the stream's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum What {
    Start,
    Open,
    KeepAlive,
    Close,
    Watch(u64),
    Unwatch(u64),
    Other,
}

/// A stream's object watches: its watch client, the watches asked for (until they end
/// or are removed) with their stores, and the channel the driver pushes their changes
/// into.
struct Watches {
    client: ClientId,
    asked: HashMap<u64, StoreId>,
    tx: mpsc::UnboundedSender<(u64, crate::driver::routes::WatchMsg)>,
    rx: mpsc::UnboundedReceiver<(u64, crate::driver::routes::WatchMsg)>,
}

impl Watches {
    fn new(api: &Api) -> Watches {
        let (tx, rx) = mpsc::unbounded_channel();
        Watches {
            client: api.watches().new_client(),
            asked: Default::default(),
            tx,
            rx,
        }
    }

    /// The stream ended: stop routing its watches and remove them from the manager (in
    /// the background; a watch whose request is still on its way is removed after it).
    fn close(&mut self, api: &Api) {
        for (watch, store) in std::mem::take(&mut self.asked) {
            api.watches().unregister(self.client, watch);
            let api = api.clone();
            let client = self.client;
            tokio::spawn(async move {
                let req = Request::Object {
                    store,
                    req: ObjectRequest::Unwatch { watch },
                };
                let _ = api.request_as(client, req).await;
            });
        }
    }
}

/// What one request's run gives back.
type Answer = (u64, What, Result<Ev, Status>);
type Running<'a> = Pin<Box<dyn Future<Output = Answer> + Send + 'a>>;

/// Why a stream ended (logged).
#[derive(Debug)]
enum End {
    ClientDone,
    ClientGone,
    Redirected,
    Malformed(#[allow(dead_code)] String),
    ShuttingDown,
}

/// A stream's state.
#[derive(Debug, Default)]
struct State {
    store: Option<StoreId>,
    starting: bool,
    session: Option<(SessionId, Duration)>,
    opening: bool,
    /// When the session was last kept alive (start, open or keep-alive answered), and
    /// whether `expiring` was pushed since.
    alive_at: Option<Instant>,
    warned: bool,
    /// Request ids in flight (true) or answered (false), with a hash of their request.
    ids: HashMap<u64, (u64, bool)>,
    answered: VecDeque<u64>,
    in_flight: usize,
}

async fn run(
    api: &Api,
    caller: &Caller,
    mut inbound: Streaming<proto::SessionRequest>,
    tx: &mpsc::Sender<Result<proto::SessionEvent, Status>>,
    mut events: broadcast::Receiver<DeviceEvent>,
    watches: &mut Watches,
) -> End {
    let mut st = State::default();
    let mut running: FuturesUnordered<Running<'_>> = FuturesUnordered::new();
    let mut inbound_open = true;
    let mut events_open = true;
    let mut buf = Vec::new();
    let send = |request_id: u64, kind: Ev| {
        tx.send(Ok(proto::SessionEvent {
            request_id,
            kind: Some(kind),
        }))
    };
    loop {
        if !inbound_open && running.is_empty() {
            return End::ClientDone;
        }
        let warn_at = match (st.session, st.alive_at, st.warned) {
            (Some((_, ttl)), Some(at), false) => Some(at + ttl * 2 / 3),
            _ => None,
        };
        tokio::select! {
            Some((id, what, result)) = running.next(), if !running.is_empty() => {
                st.in_flight -= 1;
                st.settle(id);
                let ev = match result {
                    Ok(ev) => ev,
                    Err(status) => match status_error(&st, status, api.admission_limit()) {
                        Ok(e) => Ev::Error(e),
                        Err(end) => {
                            let reason = format!("{end:?}");
                            let _ = send(0, Ev::StreamClosed(proto::StreamClosed { reason })).await;
                            return end;
                        }
                    },
                };
                if let Ev::Error(proto::Error { kind: Some(Kind::NotManager(n)), .. }) = &ev {
                    let redirect = proto::Redirect { not_manager: Some(n.clone()) };
                    let _ = send(0, Ev::Redirect(redirect)).await;
                    return End::Redirected;
                }
                st.answered(what, &ev);
                match (what, &ev) {
                    (What::Watch(_), Ev::Watching(_)) => {
                        metrics::counter!("tenure_object_watches_started_total").increment(1);
                    }
                    (What::Watch(w), _) | (What::Unwatch(w), _) => {
                        watches.asked.remove(&w);
                        api.watches().unregister(watches.client, w);
                    }
                    _ => {}
                }
                if send(id, ev).await.is_err() {
                    return End::ClientGone;
                }
            }
            msg = inbound.message(), if inbound_open => match msg {
                Ok(Some(req)) => match st.accept(api, caller, req, &mut buf, watches) {
                    Accepted::Run(id, what, fut) => {
                        st.in_flight += 1;
                        let fut: Running<'_> = Box::pin(async move { (id, what, fut.await) });
                        running.push(fut);
                    }
                    Accepted::Refused(id, e) => {
                        metrics::counter!("tenure_stream_refused_total", "reason" => refusal(&e))
                            .increment(1);
                        if send(id, Ev::Error(e)).await.is_err() {
                            return End::ClientGone;
                        }
                    }
                    Accepted::Duplicate => {}
                },
                Ok(None) => inbound_open = false,
                Err(status) => {
                    let reason = format!("malformed stream: {}", status.message());
                    let _ = send(0, Ev::StreamClosed(proto::StreamClosed { reason: reason.clone() })).await;
                    return End::Malformed(reason);
                }
            },
            Some((watch, msg)) = watches.rx.recv() => {
                let ev = match msg {
                    crate::driver::routes::WatchMsg::Events { changes, values } => {
                        Ev::ObjectEvents(proto::ObjectEvents {
                            watch,
                            changes: crate::objects::changes_to_proto(&changes, values),
                        })
                    }
                    crate::driver::routes::WatchMsg::Ended(reason) => {
                        let store = watches.asked.remove(&watch).or(st.store).unwrap_or(StoreId(0));
                        let kind = crate::grpc::error_kind(&reason);
                        metrics::counter!("tenure_object_watch_ends_total", "reason" => kind)
                            .increment(1);
                        Ev::WatchEnded(proto::WatchEnded {
                            watch,
                            error: Some(api.client_error(store, &reason)),
                        })
                    }
                };
                if send(0, ev).await.is_err() {
                    return End::ClientGone;
                }
            }
            ev = events.recv(), if events_open => match ev {
                Ok(DeviceEvent::StoppedManaging { store }) if Some(store) == st.store => {
                    let redirect = proto::Redirect {
                        not_manager: Some(proto::NotManager { store: store.0, ..Default::default() }),
                    };
                    let _ = send(0, Ev::Redirect(redirect)).await;
                    return End::Redirected;
                }
                Ok(DeviceEvent::SessionEnded { store, session, expired })
                    if Some(store) == st.store && st.session.map(|s| s.0) == Some(session) =>
                {
                    st.session = None;
                    st.alive_at = None;
                    let ended = proto::SessionEnded { session: session.0, expired };
                    if send(0, Ev::Ended(ended)).await.is_err() {
                        return End::ClientGone;
                    }
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => events_open = false,
            },
            _ = sleep_until(warn_at), if warn_at.is_some() => {
                st.warned = true;
                if let (Some((session, ttl)), Some(at)) = (st.session, st.alive_at) {
                    let remaining = (at + ttl).saturating_duration_since(Instant::now());
                    let expiring = proto::SessionExpiring {
                        session: session.0,
                        remaining_ms: remaining.as_millis() as u64,
                    };
                    if send(0, Ev::Expiring(expiring)).await.is_err() {
                        return End::ClientGone;
                    }
                }
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => futures::future::pending().await,
    }
}

/// What became of one incoming request.
enum Accepted<'a> {
    /// Run it; its answer comes later.
    Run(
        u64,
        What,
        Pin<Box<dyn Future<Output = Result<Ev, Status>> + Send + 'a>>,
    ),
    /// Answer it at once with this typed error; nothing ran.
    Refused(u64, proto::Error),
    /// The same request under the same id is in flight: its answer will come.
    Duplicate,
}

fn error(kind: Kind, message: String) -> proto::Error {
    proto::Error {
        kind: Some(kind),
        message,
    }
}

use crate::grpc::invalid_request as invalid;

/// A unary response as the stream's answer: its payload's event, or its typed error.
trait IntoEvent {
    fn into_event(self) -> Ev;
}

macro_rules! into_event {
    ($($resp:ident, $module:ident, $ev:ident;)*) => {$(
        impl IntoEvent for proto::$resp {
            fn into_event(self) -> Ev {
                match self.result {
                    Some(proto::$module::Result::Ok(x)) => Ev::$ev(x),
                    Some(proto::$module::Result::Error(e)) => Ev::Error(e),
                    None => Ev::Error(invalid("empty answer")),
                }
            }
        }
    )*};
}

into_event! {
    OpenSessionResponse, open_session_response, Opened;
    KeepAliveResponse, keep_alive_response, Alive;
    CloseSessionResponse, close_session_response, Closed;
    AcquireResponse, acquire_response, Granted;
    ReleaseResponse, release_response, Released;
    HolderResponse, holder_response, Holders;
    ListLocksResponse, list_locks_response, Locks;
    WriteResponse, write_response, Written;
}

/// A gRPC status from a shared handler as the request's typed error, or the end of the
/// stream (the device is going away, or the server broke).
/// The `reason` label of a refused request.
fn refusal(e: &proto::Error) -> &'static str {
    match e.kind {
        Some(Kind::TooManyRequests(_)) => "window",
        Some(Kind::TooLarge(_)) => "too_large",
        Some(Kind::WrongStore(_)) => "wrong_store",
        Some(Kind::RequestIdReused(_)) => "id_reused",
        Some(Kind::PermissionDenied(_)) => "permission",
        Some(Kind::InvalidName(_)) => "invalid_name",
        Some(Kind::InvalidRequest(_)) => "invalid",
        _ => "other",
    }
}

/// The answer to a request whose run failed with `s`, or why the stream ends. An
/// overloaded device's refusal is answered `Overloaded` on the stream, which the client
/// sends again after a pause: the stream goes on (`limit`: the device's admission limit).
fn status_error(st: &State, s: Status, limit: usize) -> Result<proto::Error, End> {
    match s.code() {
        tonic::Code::ResourceExhausted if s.metadata().contains_key(tenure_client::OVERLOADED) => {
            Ok(error(
                Kind::Overloaded(proto::Overloaded {
                    limit: limit.try_into().unwrap_or(u32::MAX),
                }),
                s.message().to_string(),
            ))
        }
        tonic::Code::DeadlineExceeded => {
            let store = st.store.map_or(0, |s| s.0);
            Ok(error(
                Kind::Unavailable(proto::Unavailable { store }),
                s.message().to_string(),
            ))
        }
        tonic::Code::InvalidArgument | tonic::Code::OutOfRange => Ok(invalid(s.message())),
        tonic::Code::Unavailable => Err(End::ShuttingDown),
        _ => Err(End::Malformed(format!("{s}"))),
    }
}

impl State {
    /// Check one request and turn it into a run of its shared handler.
    fn accept<'a>(
        &mut self,
        api: &'a Api,
        caller: &Caller,
        req: proto::SessionRequest,
        buf: &mut Vec<u8>,
        watches: &mut Watches,
    ) -> Accepted<'a> {
        let id = req.request_id;
        if id == 0 {
            return Accepted::Refused(0, invalid("request id 0 (ids are non-zero)"));
        }
        let len = req.encoded_len();
        if len > crate::MAX_REQUEST_BYTES {
            let limit = crate::MAX_REQUEST_BYTES as u64;
            return Accepted::Refused(
                id,
                error(
                    Kind::TooLarge(proto::TooLarge {
                        size: len as u64,
                        limit,
                    }),
                    format!("request of {len} bytes, limit {limit}"),
                ),
            );
        }
        buf.clear();
        req.encode(buf).expect("a Vec grows");
        let mut h = std::hash::DefaultHasher::new();
        buf.hash(&mut h);
        let hash = h.finish();
        match self.ids.get(&id) {
            Some((h, _)) if *h != hash => {
                return Accepted::Refused(
                    id,
                    error(
                        Kind::RequestIdReused(proto::RequestIdReused { request_id: id }),
                        format!("request id {id} was used on this stream for another request"),
                    ),
                );
            }
            Some((_, true)) => return Accepted::Duplicate,
            _ => {}
        }
        if self.in_flight >= MAX_IN_FLIGHT {
            let limit = MAX_IN_FLIGHT as u32;
            return Accepted::Refused(
                id,
                error(
                    Kind::TooManyRequests(proto::TooManyRequests { limit }),
                    format!("more than {limit} requests in flight on the stream"),
                ),
            );
        }
        let Some(kind) = req.kind else {
            return Accepted::Refused(
                id,
                invalid("no request kind, or a kind this server does not know"),
            );
        };
        let run = match self.check(api, caller, id, kind, watches) {
            Ok(run) => run,
            Err(e) => return Accepted::Refused(id, e),
        };
        self.ids.insert(id, (hash, true));
        Accepted::Run(id, run.0, run.1)
    }

    /// The checks that depend on the stream's binding, then the handler to run.
    #[allow(clippy::type_complexity)]
    fn check<'a>(
        &mut self,
        api: &'a Api,
        caller: &Caller,
        id: u64,
        kind: Rq,
        watches: &mut Watches,
    ) -> Result<
        (
            What,
            Pin<Box<dyn Future<Output = Result<Ev, Status>> + Send + 'a>>,
        ),
        proto::Error,
    > {
        use proto::*;
        let Some(store) = self.store else {
            let Rq::Start(s) = kind else {
                return Err(invalid("the first request of a stream is `start`"));
            };
            if self.starting {
                return Err(invalid("`start` is already running"));
            }
            let store = StoreId(s.store);
            if let Some(e) = api.unknown_store(store) {
                return Err(e);
            }
            self.starting = true;
            let me = api.device().map_or(0, |d| d.0);
            let started = move |session| {
                Ev::Started(StreamStarted {
                    store: store.0,
                    session,
                    max_in_flight: MAX_IN_FLIGHT as u32,
                    max_request_bytes: crate::MAX_REQUEST_BYTES as u32,
                    device: me,
                })
            };
            return Ok(match s.resume {
                None => (What::Start, Box::pin(async move { Ok(started(None)) })),
                Some(session) => (
                    What::Start,
                    Box::pin(async move {
                        let ev = api.do_keep_alive(store, SessionId(session)).await?;
                        Ok(match ev.into_event() {
                            Ev::Alive(a) => started(Some(a)),
                            other => other,
                        })
                    }),
                ),
            });
        };
        let wrong = |other: u32| {
            error(
                Kind::WrongStore(WrongStore {
                    stream_store: store.0,
                    request_store: other,
                }),
                format!("request for store {other} on a stream of store {}", store.0),
            )
        };
        let this_session = |r: &mut Option<SessionRef>| -> Result<(), proto::Error> {
            if r.as_ref().is_some_and(|s| s.store != store.0) {
                // A session of another store, named: the client's one session, its home
                // elsewhere (as on the unary API, the session id is the credential).
                return Ok(());
            }
            let Some((mine, _)) = self.session else {
                return Err(invalid("no session on this stream: open or resume one"));
            };
            match r {
                None => {
                    *r = Some(SessionRef {
                        store: store.0,
                        id: mine.0,
                    })
                }
                Some(s) if s.id != mine.0 => {
                    return Err(invalid(format!(
                        "session {} on the stream of session {}",
                        s.id, mine.0
                    )));
                }
                Some(_) => {}
            }
            Ok(())
        };
        let key = |inner: &mut u64| -> Result<(), proto::Error> {
            match *inner {
                0 => *inner = id,
                x if x == id => {}
                x => {
                    return Err(invalid(format!(
                        "inner request id {x} differs from the stream's request id {id}"
                    )));
                }
            }
            Ok(())
        };
        let may = |perm: Perm, path: &str| caller.check(perm, path).map_err(|d| d.to_proto());
        Ok(match kind {
            Rq::Start(_) => return Err(invalid("`start` twice on one stream")),
            Rq::Open(mut r) => {
                if self.session.is_some() || self.opening {
                    return Err(invalid("the stream already has a session"));
                }
                if let Some(other) = r.store.filter(|s| *s != store.0) {
                    return Err(wrong(other));
                }
                r.store = Some(store.0);
                r.request_id = id;
                self.opening = true;
                (
                    What::Open,
                    Box::pin(async move { Ok(api.do_open_session(r).await?.into_event()) }),
                )
            }
            Rq::KeepAlive(_) => {
                let Some((session, _)) = self.session else {
                    return Err(invalid("no session on this stream to keep alive"));
                };
                (
                    What::KeepAlive,
                    Box::pin(
                        async move { Ok(api.do_keep_alive(store, session).await?.into_event()) },
                    ),
                )
            }
            Rq::Close(_) => {
                let Some((session, _)) = self.session else {
                    return Err(invalid("no session on this stream to close"));
                };
                let r = CloseSessionRequest {
                    session: Some(SessionRef {
                        store: store.0,
                        id: session.0,
                    }),
                };
                (
                    What::Close,
                    Box::pin(async move { Ok(api.do_close_session(r).await?.into_event()) }),
                )
            }
            Rq::Acquire(mut r) => {
                may(Perm::Lock, &r.name)?;
                this_session(&mut r.session)?;
                key(&mut r.request_id)?;
                (
                    What::Other,
                    Box::pin(async move { Ok(api.do_acquire(r).await?.into_event()) }),
                )
            }
            Rq::Release(mut r) => {
                may(Perm::Lock, &r.name)?;
                // A release may name another session (an operator's unlock).
                if r.session.is_none() {
                    this_session(&mut r.session)?;
                }
                key(&mut r.request_id)?;
                (
                    What::Other,
                    Box::pin(async move { Ok(api.do_release(r).await?.into_event()) }),
                )
            }
            Rq::Holder(r) => {
                may(Perm::Read, &r.name)?;
                (
                    What::Other,
                    Box::pin(async move { Ok(api.do_holder(r).await?.into_event()) }),
                )
            }
            Rq::ListLocks(mut r) => {
                if r.prefix == "/" && r.store.is_none() {
                    r.store = Some(store.0);
                }
                may(Perm::Read, &r.prefix)?;
                (
                    What::Other,
                    Box::pin(async move { Ok(api.do_list_locks(r).await?.into_event()) }),
                )
            }
            Rq::Write(r) => {
                may(Perm::Admin, "/")?;
                (
                    What::Other,
                    Box::pin(async move { Ok(api.do_write(r).await?.into_event()) }),
                )
            }
            Rq::WatchObjects(w) => {
                let store = if w.prefix == "/" {
                    store
                } else {
                    api.name(&w.prefix)?.0
                };
                may(Perm::Read, &w.prefix)?;
                if watches.asked.contains_key(&w.watch) {
                    return Err(invalid(format!(
                        "watch {} is already on this stream",
                        w.watch
                    )));
                }
                // Registered before the request goes: the first changes follow its answer.
                watches.asked.insert(w.watch, store);
                let client = watches.client;
                api.watches()
                    .register(client, w.watch, store, watches.tx.clone());
                let req = Request::Object {
                    store,
                    req: ObjectRequest::Watch {
                        watch: w.watch,
                        prefix: w.prefix,
                        after: w.after,
                        values: w.include_values,
                    },
                };
                let watch = w.watch;
                (
                    What::Watch(watch),
                    Box::pin(async move {
                        Ok(match api.request_as(client, req).await? {
                            Ok(Response::Watching { revision }) => {
                                Ev::Watching(Watching { watch, revision })
                            }
                            Ok(other) => return Err(crate::grpc::unexpected("a watch", &other)),
                            Err(e) => Ev::Error(api.client_error(store, &e)),
                        })
                    }),
                )
            }
            Rq::UnwatchObjects(u) => {
                let client = watches.client;
                let watch = u.watch;
                let store = watches.asked.get(&watch).copied().unwrap_or(store);
                let req = Request::Object {
                    store,
                    req: ObjectRequest::Unwatch { watch },
                };
                (
                    What::Unwatch(watch),
                    Box::pin(async move {
                        Ok(match api.request_as(client, req).await? {
                            Ok(_) => Ev::Unwatched(Unwatched { watch }),
                            Err(e) => Ev::Error(api.client_error(store, &e)),
                        })
                    }),
                )
            }
        })
    }

    /// A request's run ended: its id is remembered as answered.
    fn settle(&mut self, id: u64) {
        if let Some(e) = self.ids.get_mut(&id) {
            e.1 = false;
        }
        self.answered.push_back(id);
        while self.answered.len() > REMEMBERED_IDS {
            if let Some(old) = self.answered.pop_front()
                && self.ids.get(&old).is_some_and(|e| !e.1)
            {
                self.ids.remove(&old);
            }
        }
    }

    /// What an answer changes: the stream's store and session binding, its keep-alive
    /// time.
    fn answered(&mut self, what: What, ev: &Ev) {
        let now = Instant::now();
        match (what, ev) {
            (What::Start, Ev::Started(s)) => {
                self.starting = false;
                self.store = Some(StoreId(s.store));
                if let Some(a) = &s.session {
                    let id = a.session.as_ref().map_or(0, |r| r.id);
                    self.bind(SessionId(id), a.ttl_ms, now);
                }
            }
            (What::Start, _) => self.starting = false,
            (What::Open, Ev::Opened(o)) => {
                self.opening = false;
                let id = o.session.as_ref().map_or(0, |r| r.id);
                self.bind(SessionId(id), o.ttl_ms, now);
            }
            (What::Open, _) => self.opening = false,
            (What::KeepAlive, Ev::Alive(_)) => {
                self.alive_at = Some(now);
                self.warned = false;
            }
            (What::KeepAlive | What::Close, Ev::Closed(_))
            | (
                What::KeepAlive,
                Ev::Error(proto::Error {
                    kind: Some(Kind::SessionExpired(_)),
                    ..
                }),
            ) => {
                self.session = None;
                self.alive_at = None;
            }
            _ => {}
        }
    }

    fn bind(&mut self, session: SessionId, ttl_ms: u64, now: Instant) {
        self.session = Some((session, Duration::from_millis(ttl_ms)));
        self.alive_at = Some(now);
        self.warned = false;
    }
}
