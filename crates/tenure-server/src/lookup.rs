//! The lookup service's gRPC API (`service Lookup` in `proto/tenure.proto`; seed 003,
//! DESIGN §7–§8).
//!
//! Every request becomes a [`Call::Lookup`] for the device driver, the path the lock
//! service's requests take ([`crate::grpc`]): the core validates it (a rejected request
//! changes nothing), multicasts it to the lookup nodes, and answers at once (volatile
//! updates, queries when this node leads, `NodeStatus`) or when the lookup leader does
//! (queries, acknowledged persistent updates), or `NoLeader` after the round-trip delay
//! (an outage: clients retry). Answers map to the RPC's `oneof result`: the payload or a
//! typed [`proto::LookupError`].
//!
//! `Watch` is one bidirectional stream per subscriber. `subscribe` and `unsubscribe` run
//! as lookup requests; before a subscription is requested, the stream registers its id
//! in the driver's [`SubRoutes`], so every event the core hands out for it
//! (`Output::LookupEvent`, from the leader through this device, the subscription's
//! origin) reaches the stream, in the leader's order. When the stream ends, its
//! subscriptions are unregistered and, best effort, unsubscribed; a subscriber that
//! reconnected elsewhere refreshes its subscription there within its interval (and gets a
//! `sync` if the unsubscribe got there first).
//!
//! Sizes: the service decodes requests up to [`max_request_bytes`] — room for twice the
//! configured value limit, so an oversized value still gets the typed `TooLarge` — and a
//! `List` answer larger than [`crate::MAX_ANSWER_BYTES`] is refused with `OUT_OF_RANGE`
//! (list a narrower prefix) rather than failing on the wire.

use crate::auth::{Auth, Caller, Perm};
use crate::driver::calls::{Answer, Call};
use crate::driver::routes::SubRoutes;
use futures::stream::{FuturesUnordered, StreamExt};
use prost::Message;
use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tenure_client::lookup::convert::{
    durability_from_proto, entry_to_proto, error_to_proto, event_to_proto, invalid_request,
    leader_to_proto, meta_to_proto, node_view_to_proto, position_from_proto, version_from_proto,
};
use tenure_client::proto::{self, lookup_server::Lookup};
use tenure_core::io::{ClientError, Response};
use tenure_core::lookup::{
    EntryVersion, IntervalRange, LookupError, LookupRequest, LookupResponse, SubEvent, SubId, Watch,
};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request as GrpcRequest, Response as GrpcResponse, Status, Streaming};
use tracing::debug;

/// Most subscriptions one Watch stream holds.
pub const MAX_SUBS_PER_STREAM: usize = 1024;

/// Events queued for one Watch stream; past this the driver drops events for it (the
/// subscriber sees a gap in the sequence and asks for a sync).
const STREAM_EVENTS: usize = 1024;

/// Largest request the lookup service decodes, for a value limit of `max_value_bytes`.
pub fn max_request_bytes(max_value_bytes: usize) -> usize {
    (2 * max_value_bytes + 64 * 1024).max(crate::MAX_FRAME_BYTES)
}

/// The lookup service.
#[derive(Clone, Debug)]
pub struct LookupApi {
    calls: mpsc::Sender<Call>,
    routes: SubRoutes,
    request_timeout: Duration,
    auth: Auth,
    admission: crate::admission::Admission,
}

/// The core's answer to a lookup request: its response, or its typed error.
type LookupAnswer = Result<LookupResponse, LookupError>;

impl LookupApi {
    /// A service that sends calls to a driver whose subscription events go through
    /// `routes`.
    pub fn new(calls: mpsc::Sender<Call>, routes: SubRoutes, request_timeout: Duration) -> Self {
        LookupApi {
            calls,
            routes,
            request_timeout,
            auth: Auth::disabled(),
            admission: Default::default(),
        }
    }

    /// Admit requests through `admission` (shared with the other services).
    pub fn with_admission(mut self, admission: crate::admission::Admission) -> Self {
        self.admission = admission;
        self
    }

    /// Authorize calls with `auth` (publish and revoke need `write` on the key; get,
    /// list and subscriptions `read` on the key or prefix, except under
    /// [`crate::auth::SYSTEM_PREFIX`]).
    pub fn with_auth(mut self, auth: Auth) -> Self {
        self.auth = auth;
        self
    }

    /// Run one lookup request through the core.
    async fn ask(&self, req: LookupRequest) -> Result<LookupAnswer, Status> {
        let _admitted = self.admission.take()?;
        let (tx, rx) = oneshot::channel();
        self.calls
            .send(Call::Lookup { req, reply: tx })
            .await
            .map_err(|_| Status::unavailable("device is shutting down"))?;
        let limit = self.request_timeout;
        let answer: Answer = tokio::time::timeout(limit, rx)
            .await
            .map_err(|_| {
                Status::deadline_exceeded(format!("no answer from the device within {limit:?}"))
            })?
            .map_err(|_| Status::unavailable("device is shutting down"))?;
        match answer {
            Ok(Response::Lookup(r)) => Ok(Ok(r)),
            Err(ClientError::Lookup(e)) => {
                metrics::counter!("tenure_lookup_errors_total", "kind" => error_kind(&e))
                    .increment(1);
                Ok(Err(e))
            }
            Ok(other) => Err(Status::internal(format!(
                "unexpected answer to a lookup request: {other:?}"
            ))),
            Err(e) => Err(Status::internal(format!(
                "unexpected error for a lookup request: {e}"
            ))),
        }
    }
}

pub(crate) fn error_kind(e: &LookupError) -> &'static str {
    match e {
        LookupError::InvalidKey(_) => "invalid_key",
        LookupError::TooLarge { .. } => "too_large",
        LookupError::BadInterval { .. } => "bad_interval",
        LookupError::NoLeader => "no_leader",
        LookupError::StaleVersion => "stale_version",
        LookupError::UnknownSubscription(_) => "unknown_subscription",
    }
}

/// A version stamped with this device's clock, for requests that carry none.
/// The device's clock (never moved by a wall-clock step: a version stamped after a step
/// back is still newer than one stamped before it).
fn stamp_now() -> EntryVersion {
    let stamp = crate::clock::now_us();
    EntryVersion { stamp, provider: 0 }
}

fn unexpected(what: &str, r: &LookupResponse) -> Status {
    Status::internal(format!("unexpected answer to {what}: {r:?}"))
}

/// A Publish request as the core's request.
pub(crate) fn publish_request(
    r: proto::PublishRequest,
) -> Result<LookupRequest, proto::LookupError> {
    let durability = durability_from_proto(r.durability).map_err(invalid_request)?;
    let interval = Duration::from_millis(r.interval_ms);
    let bound = |ms: u64| {
        if ms == 0 {
            interval
        } else {
            Duration::from_millis(ms)
        }
    };
    Ok(LookupRequest::Publish {
        key: r.key,
        value: r.value,
        version: r.version.map(version_from_proto).unwrap_or_else(stamp_now),
        interval,
        durability,
        adapt: IntervalRange {
            min: bound(r.adapt_min_ms),
            max: bound(r.adapt_max_ms),
        },
    })
}

/// A Subscribe request as the core's request.
pub(crate) fn subscribe_request(s: proto::Subscribe) -> Result<LookupRequest, proto::LookupError> {
    use proto::subscribe::Watch as W;
    let watch = match s.watch {
        Some(W::Prefix(p)) => Watch::Prefix(p),
        Some(W::Alert(a)) => Watch::Alert {
            key: a.key,
            within: Duration::from_millis(a.within_ms),
        },
        None => return Err(invalid_request("subscribe names no prefix and no alert")),
    };
    Ok(LookupRequest::Subscribe {
        sub: s.sub,
        watch,
        interval: Duration::from_millis(s.interval_ms),
        position: s.position.map(position_from_proto),
    })
}

/// The key or prefix a request names (for typed `InvalidKey` errors).
fn key_of(req: &LookupRequest) -> &str {
    match req {
        LookupRequest::Publish { key, .. }
        | LookupRequest::Revoke { key, .. }
        | LookupRequest::Get { key } => key,
        LookupRequest::List { prefix } => prefix,
        LookupRequest::Subscribe {
            watch: Watch::Prefix(p),
            ..
        } => p,
        LookupRequest::Subscribe {
            watch: Watch::Alert { key, .. },
            ..
        } => key,
        LookupRequest::Unsubscribe { .. } | LookupRequest::Status => "",
    }
}

type WatchStream =
    Pin<Box<dyn futures::Stream<Item = Result<proto::WatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Lookup for LookupApi {
    async fn publish(
        &self,
        request: GrpcRequest<proto::PublishRequest>,
    ) -> Result<GrpcResponse<proto::PublishResponse>, Status> {
        use proto::publish_response::Result as R;
        let reply = |r| {
            Ok(GrpcResponse::new(proto::PublishResponse {
                result: Some(r),
            }))
        };
        let caller = self.auth.caller(&request)?;
        let r = request.into_inner();
        caller.check(Perm::Write, &r.key)?;
        let req = match publish_request(r) {
            Ok(r) => r,
            Err(e) => return reply(R::Error(e)),
        };
        let key = key_of(&req).to_string();
        let durability = match &req {
            LookupRequest::Publish { durability, .. } => *durability,
            _ => unreachable!("a publish request"),
        };
        match self.ask(req).await? {
            Ok(LookupResponse::Published { acked, meta }) => {
                let d = match durability {
                    tenure_core::lookup::Durability::Volatile => "volatile",
                    tenure_core::lookup::Durability::Persistent => "persistent",
                };
                metrics::counter!("tenure_lookup_publishes_total", "durability" => d).increment(1);
                if meta.is_some() {
                    metrics::counter!("tenure_lookup_meta_updates_total").increment(1);
                }
                reply(R::Ok(proto::Published {
                    acked,
                    meta: meta.as_ref().map(meta_to_proto),
                }))
            }
            Ok(other) => Err(unexpected("Publish", &other)),
            Err(e) => reply(R::Error(error_to_proto(&e, &key))),
        }
    }

    async fn revoke(
        &self,
        request: GrpcRequest<proto::RevokeRequest>,
    ) -> Result<GrpcResponse<proto::RevokeResponse>, Status> {
        use proto::revoke_response::Result as R;
        let reply = |r| Ok(GrpcResponse::new(proto::RevokeResponse { result: Some(r) }));
        let caller = self.auth.caller(&request)?;
        let r = request.into_inner();
        caller.check(Perm::Write, &r.key)?;
        let durability = match durability_from_proto(r.durability) {
            Ok(d) => d,
            Err(e) => return reply(R::Error(invalid_request(e))),
        };
        let key = r.key;
        let req = LookupRequest::Revoke {
            key: key.clone(),
            version: r.version.map(version_from_proto).unwrap_or_else(stamp_now),
            durability,
        };
        match self.ask(req).await? {
            Ok(LookupResponse::Revoked { acked }) => {
                metrics::counter!("tenure_lookup_revokes_total").increment(1);
                reply(R::Ok(proto::Revoked { acked }))
            }
            Ok(other) => Err(unexpected("Revoke", &other)),
            Err(e) => reply(R::Error(error_to_proto(&e, &key))),
        }
    }

    async fn get(
        &self,
        request: GrpcRequest<proto::GetRequest>,
    ) -> Result<GrpcResponse<proto::GetResponse>, Status> {
        use proto::get_response::Result as R;
        let reply = |r| Ok(GrpcResponse::new(proto::GetResponse { result: Some(r) }));
        let started = std::time::Instant::now();
        let caller = self.auth.caller(&request)?;
        let key = request.into_inner().key;
        caller.check_lookup_read(&key)?;
        match self.ask(LookupRequest::Get { key: key.clone() }).await? {
            Ok(LookupResponse::Entry { entry, leader }) => {
                metrics::histogram!("tenure_lookup_query_seconds", "kind" => "get")
                    .record(started.elapsed().as_secs_f64());
                // Measured staleness: how long before the answer the entry was last
                // refreshed at the leader (bounded by its interval without faults, by
                // two intervals and a round trip under one lost refresh).
                if let Some(e) = &entry {
                    metrics::histogram!("tenure_lookup_answer_age_seconds")
                        .record(e.age.as_secs_f64());
                }
                reply(R::Ok(proto::GotEntry {
                    entry: entry.as_ref().map(entry_to_proto),
                    leader: Some(leader_to_proto(leader)),
                }))
            }
            Ok(other) => Err(unexpected("Get", &other)),
            Err(e) => reply(R::Error(error_to_proto(&e, &key))),
        }
    }

    async fn list(
        &self,
        request: GrpcRequest<proto::ListRequest>,
    ) -> Result<GrpcResponse<proto::ListResponse>, Status> {
        use proto::list_response::Result as R;
        let reply = |r| Ok(GrpcResponse::new(proto::ListResponse { result: Some(r) }));
        let started = std::time::Instant::now();
        let caller = self.auth.caller(&request)?;
        let prefix = request.into_inner().prefix;
        caller.check_lookup_read(&prefix)?;
        let req = LookupRequest::List {
            prefix: prefix.clone(),
        };
        match self.ask(req).await? {
            Ok(LookupResponse::Entries { entries, leader }) => {
                metrics::histogram!("tenure_lookup_query_seconds", "kind" => "list")
                    .record(started.elapsed().as_secs_f64());
                let list = proto::EntryList {
                    entries: entries.iter().map(entry_to_proto).collect(),
                    leader: Some(leader_to_proto(leader)),
                };
                let len = list.encoded_len();
                if len > crate::MAX_ANSWER_BYTES {
                    return Err(Status::out_of_range(format!(
                        "the entries under {prefix:?} take {len} bytes, more than an answer \
                         may ({}): list a narrower prefix",
                        crate::MAX_ANSWER_BYTES
                    )));
                }
                reply(R::Ok(list))
            }
            Ok(other) => Err(unexpected("List", &other)),
            Err(e) => reply(R::Error(error_to_proto(&e, &prefix))),
        }
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: GrpcRequest<Streaming<proto::WatchRequest>>,
    ) -> Result<GrpcResponse<Self::WatchStream>, Status> {
        let caller = self.auth.caller(&request)?;
        let (tx, rx) = mpsc::channel(256);
        let api = self.clone();
        let inbound = request.into_inner();
        tokio::spawn(async move {
            metrics::gauge!("tenure_lookup_watch_streams").increment(1.0);
            let why = serve_watch(&api, &caller, inbound, &tx).await;
            metrics::gauge!("tenure_lookup_watch_streams").decrement(1.0);
            debug!(?why, "watch stream ended");
        });
        Ok(GrpcResponse::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn node_status(
        &self,
        request: GrpcRequest<proto::NodeStatusRequest>,
    ) -> Result<GrpcResponse<proto::NodeStatusResponse>, Status> {
        self.auth.caller(&request)?;
        match self.ask(LookupRequest::Status).await? {
            Ok(LookupResponse::Status(view)) => Ok(GrpcResponse::new(node_view_to_proto(&view))),
            Ok(other) => Err(unexpected("NodeStatus", &other)),
            Err(e) => Err(Status::unavailable(format!("lookup node: {e}"))),
        }
    }
}

/// Why a Watch stream ended (logged).
#[derive(Debug)]
enum End {
    ClientDone,
    ClientGone,
    Denied,
    Malformed(#[allow(dead_code)] String),
}

/// What a Watch request was, for what its answer changes in the stream's state.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// A subscribe; `fresh` when the stream did not hold the subscription before.
    Subscribe {
        sub: SubId,
        fresh: bool,
    },
    Unsubscribe {
        sub: SubId,
    },
}

type Answered = (u64, Kind, Result<LookupAnswer, Status>, String);
type Running<'a> = Pin<Box<dyn Future<Output = Answered> + Send + 'a>>;

/// Serve one Watch stream until the client ends it or goes away.
async fn serve_watch(
    api: &LookupApi,
    caller: &Caller,
    mut inbound: Streaming<proto::WatchRequest>,
    tx: &mpsc::Sender<Result<proto::WatchResponse, Status>>,
) -> End {
    use proto::watch_request::Kind as Rq;
    use proto::watch_response::Kind as Ev;
    let (ev_tx, mut ev_rx) = mpsc::channel::<SubEvent>(STREAM_EVENTS);
    let mut subs: HashSet<SubId> = HashSet::new();
    let mut running: FuturesUnordered<Running<'_>> = FuturesUnordered::new();
    let mut inbound_open = true;
    let send = |request_id: u64, kind: Ev| {
        tx.send(Ok(proto::WatchResponse {
            request_id,
            kind: Some(kind),
        }))
    };
    let end = loop {
        if !inbound_open && running.is_empty() {
            break End::ClientDone;
        }
        tokio::select! {
            // Events first: an answer never overtakes the events before it.
            biased;
            Some(ev) = ev_rx.recv() => {
                if !subs.contains(&ev.sub) {
                    continue;
                }
                if send(0, Ev::Event(event_to_proto(ev))).await.is_err() {
                    break End::ClientGone;
                }
            }
            Some((id, kind, answer, key)) = running.next(), if !running.is_empty() => {
                let ev = match (kind, answer) {
                    (_, Err(status)) => {
                        // The device did not answer (shutting down, or overloaded): the
                        // stream's client retries the request.
                        if let Kind::Subscribe { sub, fresh: true } = kind {
                            subs.remove(&sub);
                            api.routes.unregister(sub, &ev_tx);
                        }
                        let _ = tx.send(Err(status)).await;
                        break End::ClientGone;
                    }
                    (Kind::Subscribe { sub, .. }, Ok(Ok(LookupResponse::Subscribed))) => {
                        Ev::Subscribed(sub)
                    }
                    (Kind::Unsubscribe { sub }, Ok(Ok(LookupResponse::Unsubscribed))) => {
                        subs.remove(&sub);
                        api.routes.unregister(sub, &ev_tx);
                        Ev::Unsubscribed(sub)
                    }
                    (kind, Ok(Ok(other))) => {
                        let _ = tx.send(Err(Status::internal(format!(
                            "unexpected answer to {kind:?}: {other:?}"
                        )))).await;
                        break End::ClientGone;
                    }
                    (kind, Ok(Err(e))) => {
                        match kind {
                            Kind::Subscribe { sub, fresh: true } => {
                                subs.remove(&sub);
                                api.routes.unregister(sub, &ev_tx);
                            }
                            Kind::Unsubscribe { sub } => {
                                subs.remove(&sub);
                                api.routes.unregister(sub, &ev_tx);
                            }
                            Kind::Subscribe { .. } => {}
                        }
                        Ev::Error(error_to_proto(&e, &key))
                    }
                };
                if id != 0 && send(id, ev).await.is_err() {
                    break End::ClientGone;
                }
            }
            msg = inbound.message(), if inbound_open => match msg {
                Ok(Some(m)) => {
                    let id = m.request_id;
                    let (req, kind) = match m.kind {
                        Some(Rq::Subscribe(s)) => {
                            // A subscription the token may not read ends the stream
                            // with PERMISSION_DENIED (the lookup's typed errors have
                            // no kind for it); nothing was subscribed.
                            let watched = match &s.watch {
                                Some(proto::subscribe::Watch::Prefix(p)) => p.as_str(),
                                Some(proto::subscribe::Watch::Alert(a)) => a.key.as_str(),
                                None => "",
                            };
                            if !watched.is_empty()
                                && let Err(d) = caller.check_lookup_read(watched)
                            {
                                let _ = tx.send(Err(d.status())).await;
                                break End::Denied;
                            }
                            let sub = s.sub;
                            let fresh = !subs.contains(&sub);
                            if fresh && subs.len() >= MAX_SUBS_PER_STREAM {
                                let e = invalid_request(format!(
                                    "a watch stream holds at most {MAX_SUBS_PER_STREAM} subscriptions"
                                ));
                                if id != 0 && send(id, Ev::Error(e)).await.is_err() {
                                    break End::ClientGone;
                                }
                                continue;
                            }
                            match subscribe_request(s) {
                                Ok(req) => (req, Kind::Subscribe { sub, fresh }),
                                Err(e) => {
                                    if id != 0 && send(id, Ev::Error(e)).await.is_err() {
                                        break End::ClientGone;
                                    }
                                    continue;
                                }
                            }
                        }
                        Some(Rq::Unsubscribe(u)) => (
                            LookupRequest::Unsubscribe { sub: u.sub },
                            Kind::Unsubscribe { sub: u.sub },
                        ),
                        None => {
                            let e = invalid_request("a watch request names no subscribe or unsubscribe");
                            if id != 0 && send(id, Ev::Error(e)).await.is_err() {
                                break End::ClientGone;
                            }
                            continue;
                        }
                    };
                    if let Kind::Subscribe { sub, .. } = kind {
                        // Registered before the core sees the request: its first events
                        // (the registration's sync) may come before its answer.
                        subs.insert(sub);
                        api.routes.register(sub, ev_tx.clone());
                        metrics::counter!("tenure_lookup_subscribes_total").increment(1);
                    }
                    let key = key_of(&req).to_string();
                    running.push(Box::pin(async move {
                        let answer = api.ask(req).await;
                        (id, kind, answer, key)
                    }));
                }
                Ok(None) => inbound_open = false,
                Err(status) => break End::Malformed(status.message().to_string()),
            },
        }
    };
    // The stream is gone: its subscriptions stop here, and are dropped at every node
    // (best effort; a subscription another stream took over stays).
    for sub in subs {
        if api.routes.routes_to(sub, &ev_tx) {
            api.routes.unregister(sub, &ev_tx);
            let (reply, _) = oneshot::channel();
            let _ = api.calls.try_send(Call::Lookup {
                req: LookupRequest::Unsubscribe { sub },
                reply,
            });
        }
    }
    end
}
