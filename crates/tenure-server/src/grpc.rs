//! The gRPC client API (`proto/tenure.proto`), served with tonic.
//!
//! Each handler checks what it can without the core (the lock name is a valid path, the
//! store exists), turns the request into a [`Call`] for the device driver, and maps the
//! core's answer to the response's `oneof result`: the payload, or a typed
//! [`proto::Error`] (`NotManager` carries the hinted device's client endpoint when this
//! device knows it). Every protocol decision — who is manager, what is granted, when a
//! session expires — is the core's; this module only translates.
//!
//! Waiting acquires get no server-side deadline of their own: the core answers when the
//! wait ends (grant, timeout, deadlock, session end) or when the manager steps down
//! (`Unavailable`), and a client whose RPC deadline cuts a long wait retries with the same
//! `request_id`, which the core replays as the same place in the queue.

use crate::auth::{Auth, Perm};
use crate::driver::{Answer, Call, DeviceEvent, StatusSnapshot};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;
use tenure_client::proto::{self, error::Kind, tenure_server::Tenure};
use tenure_core::config::store_of;
use tenure_core::ids::{DeviceId, StoreId};
use tenure_core::io::{ClientError, Request, Response, WaitSpec};
use tenure_core::lockctl::{FencingToken, HolderInfo, LockMode, LockName, WaiterInfo};
use tenure_core::session::SessionId;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request as GrpcRequest, Response as GrpcResponse, Status};
use tracing::{debug, info};

/// The service.
#[derive(Clone, Debug)]
pub struct Api {
    calls: mpsc::Sender<Call>,
    /// Client endpoints for redirect hints (configured, then the membership record's).
    endpoints: crate::cluster_api::Endpoints,
    request_timeout: Duration,
    stores: u32,
    events: broadcast::Sender<DeviceEvent>,
    me: Option<DeviceId>,
    watches: crate::driver::WatchRoutes,
    auth: Auth,
    admission: crate::admission::Admission,
}

impl Api {
    /// A service that sends calls to a driver.
    pub fn new(
        calls: mpsc::Sender<Call>,
        endpoints: HashMap<DeviceId, SocketAddr>,
        request_timeout: Duration,
        stores: u32,
        events: broadcast::Sender<DeviceEvent>,
    ) -> Api {
        Api {
            calls,
            endpoints: endpoints.into(),
            request_timeout,
            stores,
            events,
            me: None,
            watches: Default::default(),
            auth: Auth::disabled(),
            admission: Default::default(),
        }
    }

    /// Admit client requests through `admission` (shared with the other services).
    pub fn with_admission(mut self, admission: crate::admission::Admission) -> Api {
        self.admission = admission;
        self
    }

    /// Authorize calls with `auth` (shared with the services built over this one).
    pub fn with_auth(mut self, auth: Auth) -> Api {
        self.auth = auth;
        self
    }

    /// The authorization policy.
    pub(crate) fn auth(&self) -> &Auth {
        &self.auth
    }

    /// The redirect hints' endpoints (the driver adds the members admitted at runtime).
    pub fn endpoints(&self) -> &crate::cluster_api::Endpoints {
        &self.endpoints
    }

    /// The device serving (reported to session streams).
    pub fn with_device(mut self, me: DeviceId) -> Api {
        self.me = Some(me);
        self
    }

    /// Route object watch events through `routes` (shared with the driver).
    pub fn with_watches(mut self, routes: crate::driver::WatchRoutes) -> Api {
        self.watches = routes;
        self
    }

    /// Where object watch events go.
    pub(crate) fn watches(&self) -> &crate::driver::WatchRoutes {
        &self.watches
    }

    /// The device serving, if known.
    pub(crate) fn device(&self) -> Option<DeviceId> {
        self.me
    }

    /// Events for the session streams.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<DeviceEvent> {
        self.events.subscribe()
    }

    /// The number of stores of the cluster.
    pub(crate) fn stores(&self) -> u32 {
        self.stores
    }

    /// The configured request timeout.
    pub(crate) fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// A request made as `client` (a session stream's, an object watch's), answered
    /// within the configured request timeout. On a device with as many requests in
    /// flight as it takes, the request waits for a place (within the same timeout): a
    /// stream's window bounds what waits, and a full window stops its client sending.
    pub(crate) async fn request_as(
        &self,
        client: tenure_core::ids::ClientId,
        req: Request,
    ) -> Result<Answer, Status> {
        let limit = self.request_timeout;
        let asked = async {
            let _admitted = self.admission.wait(&req).await;
            let (tx, rx) = oneshot::channel();
            self.calls
                .send(Call::RequestAs {
                    client,
                    req,
                    reply: tx,
                })
                .await
                .map_err(|_| Status::unavailable("device is shutting down"))?;
            rx.await
                .map_err(|_| Status::unavailable("device is shutting down"))
        };
        tokio::time::timeout(limit, asked).await.map_err(|_| {
            Status::deadline_exceeded(format!("no answer from the device within {limit:?}"))
        })?
    }

    /// A request answered within the configured request timeout.
    pub(crate) async fn request(&self, req: Request) -> Result<Answer, Status> {
        self.request_within(req, Some(self.request_timeout)).await
    }

    /// A request answered within `limit` (`None`: whenever the core answers).
    pub(crate) async fn request_within(
        &self,
        req: Request,
        limit: Option<Duration>,
    ) -> Result<Answer, Status> {
        let _admitted = self.admission.request(&req)?;
        let (tx, rx) = oneshot::channel();
        self.calls
            .send(Call::Request { req, reply: tx })
            .await
            .map_err(|_| Status::unavailable("device is shutting down"))?;
        let answer = match limit {
            Some(limit) => tokio::time::timeout(limit, rx).await.map_err(|_| {
                Status::deadline_exceeded(format!("no answer from the device within {limit:?}"))
            })?,
            None => rx.await,
        };
        answer.map_err(|_| Status::unavailable("device is shutting down"))
    }

    /// The store of a session reference, checked.
    pub(crate) fn session_ref(
        &self,
        r: Option<proto::SessionRef>,
    ) -> Result<(StoreId, SessionId), Status> {
        let r = r.ok_or_else(|| Status::invalid_argument("missing session"))?;
        Ok((StoreId(r.store), SessionId(r.id)))
    }

    /// A typed error for a store outside the cluster, if it is.
    pub(crate) fn unknown_store(&self, store: StoreId) -> Option<proto::Error> {
        (store.0 >= self.stores).then(|| self.error(store, &ClientError::UnknownStore(store)))
    }

    /// Parse a lock name, or the typed error the client gets.
    pub(crate) fn name(&self, name: &str) -> Result<(StoreId, LockName), proto::Error> {
        let n = LockName::parse(name).map_err(|e| invalid_name(name, &e.to_string()))?;
        Ok((store_of(name, self.stores), n))
    }

    /// The device's status snapshot.
    pub async fn snapshot(&self) -> Result<StatusSnapshot, Status> {
        let (tx, rx) = oneshot::channel();
        self.calls
            .send(Call::Status {
                detail: false,
                reply: tx,
            })
            .await
            .map_err(|_| Status::unavailable("device is shutting down"))?;
        rx.await
            .map_err(|_| Status::unavailable("device is shutting down"))
    }

    /// Map a core error to the wire error, counting it.
    pub(crate) fn client_error(&self, store: StoreId, e: &ClientError) -> proto::Error {
        metrics::counter!("tenure_client_errors_total", "kind" => error_kind(e)).increment(1);
        self.error(store, e)
    }

    /// [`Api::client_error`] for a request of `session`: an expiry names the session.
    pub(crate) fn session_error(
        &self,
        store: StoreId,
        session: SessionId,
        e: &ClientError,
    ) -> proto::Error {
        let mut err = self.client_error(store, e);
        if let Some(Kind::SessionExpired(x)) = err.kind.as_mut() {
            x.session = session.0;
            err.message = format!("session {} expired", session.0);
        }
        err
    }

    /// Map a core error to the wire error.
    pub fn error(&self, store: StoreId, e: &ClientError) -> proto::Error {
        let kind = match e {
            ClientError::NotManager { hint } => Kind::NotManager(proto::NotManager {
                store: store.0,
                hint_device: hint.map(|d| d.0),
                hint_endpoint: hint
                    .and_then(|d| self.endpoints.get(d))
                    .map(|a| a.to_string())
                    .unwrap_or_default(),
            }),
            ClientError::Unavailable { store } => {
                Kind::Unavailable(proto::Unavailable { store: store.0 })
            }
            ClientError::UnknownStore(s) => Kind::UnknownStore(proto::UnknownStore { store: s.0 }),
            ClientError::SessionExpired => {
                Kind::SessionExpired(proto::SessionExpired { session: 0 })
            }
            ClientError::WouldBlock => Kind::WouldBlock(proto::WouldBlock::default()),
            ClientError::Deadlock => Kind::Deadlock(proto::Deadlock::default()),
            ClientError::Timeout => Kind::Timeout(proto::Timeout::default()),
            ClientError::InvalidName(reason) => Kind::InvalidName(proto::InvalidName {
                name: String::new(),
                reason: reason.clone(),
            }),
            ClientError::NotHeld => Kind::NotHeld(proto::NotHeld::default()),
            ClientError::Rejected(reason) => Kind::Rejected(proto::Rejected {
                reason: reason.clone(),
            }),
            // Lock requests never get a lookup error; the lookup service has its own
            // typed errors (`proto::LookupError`, crate::lookup).
            ClientError::Lookup(e) => Kind::Rejected(proto::Rejected {
                reason: e.to_string(),
            }),
            ClientError::TooLarge { size, limit } => Kind::TooLarge(proto::TooLarge {
                size: *size,
                limit: *limit,
            }),
            ClientError::StaleToken { current } => Kind::StaleToken(proto::StaleToken {
                presented: None,
                current: current.map(token_to_proto),
            }),
            ClientError::Object(e) => crate::objects::object_error_kind(e),
        };
        proto::Error {
            kind: Some(kind),
            message: e.to_string(),
        }
    }
}

pub(crate) fn invalid_name(name: &str, reason: &str) -> proto::Error {
    proto::Error {
        message: format!("invalid name {name:?}: {reason}"),
        kind: Some(Kind::InvalidName(proto::InvalidName {
            name: name.chars().take(128).collect(),
            reason: reason.to_string(),
        })),
    }
}

fn mode_from_proto(m: i32) -> Result<LockMode, Status> {
    match proto::LockMode::try_from(m) {
        Ok(proto::LockMode::Shared) => Ok(LockMode::Shared),
        // Unspecified means exclusive: the safe default.
        Ok(proto::LockMode::Exclusive | proto::LockMode::Unspecified) => Ok(LockMode::Exclusive),
        Err(_) => Err(Status::invalid_argument(format!("unknown lock mode {m}"))),
    }
}

fn mode_to_proto(m: LockMode) -> i32 {
    match m {
        LockMode::Shared => proto::LockMode::Shared as i32,
        LockMode::Exclusive => proto::LockMode::Exclusive as i32,
    }
}

pub(crate) fn token_from_proto(t: proto::FencingToken) -> FencingToken {
    FencingToken {
        epoch: tenure_core::Epoch(t.epoch),
        seq: t.seq,
    }
}

pub(crate) fn token_to_proto(t: FencingToken) -> proto::FencingToken {
    proto::FencingToken {
        epoch: t.epoch.0,
        seq: t.seq,
    }
}

fn holder_to_proto(store: StoreId, h: &HolderInfo) -> proto::LockHolder {
    proto::LockHolder {
        session: Some(proto::SessionRef {
            store: store.0,
            id: h.session.0,
        }),
        mode: mode_to_proto(h.mode),
        token: Some(token_to_proto(h.token)),
    }
}

fn waiter_to_proto(store: StoreId, w: &WaiterInfo) -> proto::SessionRef {
    proto::SessionRef {
        store: store.0,
        id: w.session.0,
    }
}

pub(crate) fn unexpected(what: &str, r: &Response) -> Status {
    Status::internal(format!("unexpected answer to {what}: {r:?}"))
}

type KeepAliveStream =
    Pin<Box<dyn futures::Stream<Item = Result<proto::KeepAliveResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Tenure for Api {
    async fn write(
        &self,
        request: GrpcRequest<proto::WriteRequest>,
    ) -> Result<GrpcResponse<proto::WriteResponse>, Status> {
        // The test register is an operator's check of a store, not a path of the tree.
        self.auth.authorize(&request, Perm::Admin, "/")?;
        self.do_write(sized(request.into_inner())?)
            .await
            .map(GrpcResponse::new)
    }

    async fn status(
        &self,
        request: GrpcRequest<proto::StatusRequest>,
    ) -> Result<GrpcResponse<proto::StatusResponse>, Status> {
        self.auth.caller(&request)?;
        let s = self.snapshot().await?;
        Ok(GrpcResponse::new(status_to_proto(&s)))
    }

    async fn open_session(
        &self,
        request: GrpcRequest<proto::OpenSessionRequest>,
    ) -> Result<GrpcResponse<proto::OpenSessionResponse>, Status> {
        self.auth.caller(&request)?;
        self.do_open_session(sized(request.into_inner())?)
            .await
            .map(GrpcResponse::new)
    }

    type KeepAliveStream = KeepAliveStream;

    async fn keep_alive(
        &self,
        request: GrpcRequest<tonic::Streaming<proto::KeepAliveRequest>>,
    ) -> Result<GrpcResponse<Self::KeepAliveStream>, Status> {
        self.auth.caller(&request)?;
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(8);
        let api = self.clone();
        // Answers go out in the order the keep-alives came in: the client matches each
        // answer to the send time of its request (its deadline rule needs that time).
        tokio::spawn(async move {
            loop {
                let msg = match inbound.message().await {
                    Ok(Some(m)) => m,
                    Ok(None) => break,
                    Err(e) => {
                        debug!("keep-alive stream ended: {e}");
                        break;
                    }
                };
                let resp = match api.session_ref(msg.session) {
                    Ok((store, session)) => api.do_keep_alive(store, session).await,
                    Err(s) => Err(s),
                };
                let end = resp.is_err();
                if tx.send(resp).await.is_err() || end {
                    break;
                }
            }
        });
        Ok(GrpcResponse::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn close_session(
        &self,
        request: GrpcRequest<proto::CloseSessionRequest>,
    ) -> Result<GrpcResponse<proto::CloseSessionResponse>, Status> {
        self.auth.caller(&request)?;
        self.do_close_session(sized(request.into_inner())?)
            .await
            .map(GrpcResponse::new)
    }

    async fn acquire(
        &self,
        request: GrpcRequest<proto::AcquireRequest>,
    ) -> Result<GrpcResponse<proto::AcquireResponse>, Status> {
        let caller = self.auth.caller(&request)?;
        let r = sized(request.into_inner())?;
        caller.check(Perm::Lock, &r.name)?;
        self.do_acquire(r).await.map(GrpcResponse::new)
    }

    async fn release(
        &self,
        request: GrpcRequest<proto::ReleaseRequest>,
    ) -> Result<GrpcResponse<proto::ReleaseResponse>, Status> {
        let caller = self.auth.caller(&request)?;
        let r = sized(request.into_inner())?;
        caller.check(Perm::Lock, &r.name)?;
        self.do_release(r).await.map(GrpcResponse::new)
    }

    async fn holder(
        &self,
        request: GrpcRequest<proto::HolderRequest>,
    ) -> Result<GrpcResponse<proto::HolderResponse>, Status> {
        let caller = self.auth.caller(&request)?;
        let r = sized(request.into_inner())?;
        caller.check(Perm::Read, &r.name)?;
        self.do_holder(r).await.map(GrpcResponse::new)
    }

    async fn list_locks(
        &self,
        request: GrpcRequest<proto::ListLocksRequest>,
    ) -> Result<GrpcResponse<proto::ListLocksResponse>, Status> {
        let caller = self.auth.caller(&request)?;
        let r = sized(request.into_inner())?;
        caller.check(Perm::Read, &r.prefix)?;
        self.do_list_locks(r).await.map(GrpcResponse::new)
    }

    type SessionStream = crate::stream::EventStream;

    async fn session(
        &self,
        request: GrpcRequest<tonic::Streaming<proto::SessionRequest>>,
    ) -> Result<GrpcResponse<Self::SessionStream>, Status> {
        // The token is checked once, here; each request against its path on the stream.
        let caller = self.auth.caller(&request)?;
        Ok(GrpcResponse::new(crate::stream::serve(
            self.clone(),
            caller,
            request.into_inner(),
        )))
    }
}

/// The request handlers, shared by the unary RPCs and the session stream: one code path,
/// so the two cannot drift. Each returns the RPC's response (payload or typed error), or
/// a gRPC status for a request that never reached the protocol.
impl Api {
    pub(crate) async fn do_write(
        &self,
        r: proto::WriteRequest,
    ) -> Result<proto::WriteResponse, Status> {
        let store = StoreId(r.store);
        let started = std::time::Instant::now();
        let answer = self
            .request(Request::Write {
                store,
                key: r.key,
                value: r.value,
            })
            .await?;
        use proto::write_response::Result as R;
        let result = match answer {
            Ok(Response::Written { version }) => {
                metrics::histogram!("tenure_write_latency_seconds")
                    .record(started.elapsed().as_secs_f64());
                R::Ok(proto::Written {
                    version: Some(proto::Version {
                        epoch: version.epoch.0,
                        seq: version.seq,
                    }),
                })
            }
            Err(e) => R::Error(self.client_error(store, &e)),
            Ok(other) => return Err(unexpected("a write", &other)),
        };
        Ok(proto::WriteResponse {
            result: Some(result),
        })
    }

    pub(crate) async fn do_open_session(
        &self,
        r: proto::OpenSessionRequest,
    ) -> Result<proto::OpenSessionResponse, Status> {
        let store = StoreId(r.store);
        use proto::open_session_response::Result as R;
        let reply = |result| {
            Ok(proto::OpenSessionResponse {
                result: Some(result),
            })
        };
        if let Some(e) = self.unknown_store(store) {
            return reply(R::Error(e));
        }
        let ttl = Duration::from_millis(r.ttl_ms);
        let answer = self.request(Request::OpenSession { store, ttl }).await?;
        match answer {
            Ok(Response::SessionOpened { session, ttl }) => {
                metrics::counter!("tenure_sessions_opened_total").increment(1);
                debug!(%store, session = session.0, client = %r.client_name, request_id = r.request_id, "session opened");
                reply(R::Ok(proto::SessionOpened {
                    session: Some(proto::SessionRef {
                        store: store.0,
                        id: session.0,
                    }),
                    ttl_ms: ttl.as_millis() as u64,
                }))
            }
            Err(e) => reply(R::Error(self.client_error(store, &e))),
            Ok(other) => Err(unexpected("OpenSession", &other)),
        }
    }

    /// One keep-alive: the session's remaining lease, or a typed error.
    pub(crate) async fn do_keep_alive(
        &self,
        store: StoreId,
        session: SessionId,
    ) -> Result<proto::KeepAliveResponse, Status> {
        use proto::keep_alive_response::Result as R;
        let result = match self.unknown_store(store) {
            Some(e) => R::Error(e),
            None => match self.request(Request::KeepAlive { store, session }).await? {
                Ok(Response::KeptAlive { ttl }) => {
                    metrics::counter!("tenure_keepalives_total").increment(1);
                    R::Ok(proto::SessionAlive {
                        session: Some(proto::SessionRef {
                            store: store.0,
                            id: session.0,
                        }),
                        ttl_ms: ttl.as_millis() as u64,
                    })
                }
                Err(e) => {
                    if e == ClientError::SessionExpired {
                        info!(%store, session = session.0, "keep-alive for an expired session");
                        metrics::counter!("tenure_keepalive_expired_total").increment(1);
                    }
                    R::Error(self.session_error(store, session, &e))
                }
                Ok(other) => return Err(unexpected("KeepAlive", &other)),
            },
        };
        Ok(proto::KeepAliveResponse {
            result: Some(result),
        })
    }

    pub(crate) async fn do_close_session(
        &self,
        r: proto::CloseSessionRequest,
    ) -> Result<proto::CloseSessionResponse, Status> {
        let (store, session) = self.session_ref(r.session)?;
        use proto::close_session_response::Result as R;
        let reply = |result| {
            Ok(proto::CloseSessionResponse {
                result: Some(result),
            })
        };
        if let Some(e) = self.unknown_store(store) {
            return reply(R::Error(e));
        }
        match self
            .request(Request::CloseSession { store, session })
            .await?
        {
            Ok(Response::SessionClosed) => {
                metrics::counter!("tenure_sessions_closed_total").increment(1);
                reply(R::Ok(proto::SessionClosed {}))
            }
            Err(e) => reply(R::Error(self.session_error(store, session, &e))),
            Ok(other) => Err(unexpected("CloseSession", &other)),
        }
    }

    pub(crate) async fn do_acquire(
        &self,
        r: proto::AcquireRequest,
    ) -> Result<proto::AcquireResponse, Status> {
        let started = std::time::Instant::now();
        let (store, session) = self.session_ref(r.session)?;
        let mode = mode_from_proto(r.mode)?;
        use proto::acquire_response::Result as R;
        let reply = |result| {
            Ok(proto::AcquireResponse {
                result: Some(result),
            })
        };
        if let Some(e) = self.unknown_store(store) {
            return reply(R::Error(e));
        }
        let name_store = match self.name(&r.name) {
            Ok((s, _)) => s,
            Err(e) => {
                metrics::counter!("tenure_client_errors_total", "kind" => "invalid_name")
                    .increment(1);
                return reply(R::Error(e));
            }
        };
        if name_store != store {
            let e = ClientError::InvalidName(format!(
                "{} belongs to store {name_store}, not {store}",
                r.name
            ));
            return reply(R::Error(self.client_error(store, &e)));
        }
        let (wait, limit) = if r.r#try {
            (WaitSpec::Try, Some(self.request_timeout))
        } else if r.timeout_ms > 0 {
            let d = Duration::from_millis(r.timeout_ms);
            (WaitSpec::Timeout(d), Some(d + self.request_timeout))
        } else {
            (WaitSpec::Forever, None)
        };
        let answer = self
            .request_within(
                Request::Acquire {
                    store,
                    session,
                    request_id: r.request_id,
                    name: r.name.clone(),
                    mode,
                    wait,
                    lock_delay: r.lock_delay_ms.map(Duration::from_millis),
                },
                limit,
            )
            .await?;
        match answer {
            Ok(Response::Granted { token }) => {
                metrics::counter!("tenure_lock_grants_total").increment(1);
                metrics::histogram!("tenure_acquire_seconds")
                    .record(started.elapsed().as_secs_f64());
                debug!(%store, session = session.0, name = %r.name, ?token, "granted");
                reply(R::Ok(proto::Granted {
                    name: r.name,
                    mode: mode_to_proto(mode),
                    token: Some(token_to_proto(token)),
                }))
            }
            Err(e) => {
                let mut err = self.session_error(store, session, &e);
                fill_name(&mut err, &r.name);
                reply(R::Error(err))
            }
            Ok(other) => Err(unexpected("Acquire", &other)),
        }
    }

    pub(crate) async fn do_release(
        &self,
        r: proto::ReleaseRequest,
    ) -> Result<proto::ReleaseResponse, Status> {
        let (store, session) = self.session_ref(r.session)?;
        use proto::release_response::Result as R;
        let reply = |result| {
            Ok(proto::ReleaseResponse {
                result: Some(result),
            })
        };
        if let Some(e) = self.unknown_store(store) {
            return reply(R::Error(e));
        }
        match self.name(&r.name) {
            Ok((s, _)) if s == store => {}
            Ok((s, _)) => {
                let e = ClientError::InvalidName(format!(
                    "{} belongs to store {s}, not {store}",
                    r.name
                ));
                return reply(R::Error(self.client_error(store, &e)));
            }
            Err(e) => return reply(R::Error(e)),
        }
        // Server-side fencing of the release: with a token, the session's grant must
        // carry it, checked in the same replicated change as the release.
        let req = match r.token {
            Some(presented) => Request::ReleaseFenced {
                store,
                session,
                request_id: r.request_id,
                name: r.name.clone(),
                token: token_from_proto(presented),
            },
            None => Request::Release {
                store,
                session,
                request_id: r.request_id,
                name: r.name.clone(),
            },
        };
        let answer = self.request(req).await?;
        match answer {
            Ok(Response::Released) => {
                metrics::counter!("tenure_lock_releases_total").increment(1);
                debug!(%store, session = session.0, name = %r.name, "released");
                reply(R::Ok(proto::Released {}))
            }
            Err(e) => {
                let mut err = self.session_error(store, session, &e);
                fill_name(&mut err, &r.name);
                if let Some(Kind::StaleToken(st)) = err.kind.as_mut() {
                    st.presented = r.token;
                    err.message = format!("stale fencing token for {}", r.name);
                }
                reply(R::Error(err))
            }
            Ok(other) => Err(unexpected("Release", &other)),
        }
    }

    pub(crate) async fn do_holder(
        &self,
        r: proto::HolderRequest,
    ) -> Result<proto::HolderResponse, Status> {
        use proto::holder_response::Result as R;
        let reply = |result| {
            Ok(proto::HolderResponse {
                result: Some(result),
            })
        };
        let store = match self.name(&r.name) {
            Ok((s, _)) => s,
            Err(e) => return reply(R::Error(e)),
        };
        // One linearizable read gives the holders and the queue of the name.
        let answer = self
            .request(Request::LocksUnder {
                store,
                prefix: r.name.clone(),
            })
            .await?;
        match answer {
            Ok(Response::Locks(locks)) => {
                let entry = locks.iter().find(|l| l.name.as_str() == r.name);
                reply(R::Ok(proto::Holders {
                    name: r.name.clone(),
                    holders: entry
                        .map(|l| {
                            l.holders
                                .iter()
                                .map(|h| holder_to_proto(store, h))
                                .collect()
                        })
                        .unwrap_or_default(),
                    waiters: entry
                        .map(|l| {
                            l.waiters
                                .iter()
                                .map(|w| waiter_to_proto(store, w))
                                .collect()
                        })
                        .unwrap_or_default(),
                }))
            }
            Err(e) => reply(R::Error(self.client_error(store, &e))),
            Ok(other) => Err(unexpected("Holder", &other)),
        }
    }

    pub(crate) async fn do_list_locks(
        &self,
        r: proto::ListLocksRequest,
    ) -> Result<proto::ListLocksResponse, Status> {
        use proto::list_locks_response::Result as R;
        let reply = |result| {
            Ok(proto::ListLocksResponse {
                result: Some(result),
            })
        };
        let store = if r.prefix == "/" {
            let Some(s) = r.store else {
                return reply(R::Error(invalid_name(
                    "/",
                    "listing '/' spans every store: set `store`",
                )));
            };
            StoreId(s)
        } else {
            match self.name(&r.prefix) {
                Ok((s, _)) => s,
                Err(e) => return reply(R::Error(e)),
            }
        };
        if let Some(e) = self.unknown_store(store) {
            return reply(R::Error(e));
        }
        let answer = self
            .request(Request::LocksUnder {
                store,
                prefix: r.prefix.clone(),
            })
            .await?;
        match answer {
            Ok(Response::Locks(locks)) => {
                let limit = if r.limit == 0 {
                    usize::MAX
                } else {
                    r.limit as usize
                };
                reply(R::Ok(proto::LockList {
                    locks: locks
                        .iter()
                        .filter(|l| !l.holders.is_empty() || !l.waiters.is_empty())
                        .take(limit)
                        .map(|l| proto::LockEntry {
                            name: l.name.to_string(),
                            holders: l
                                .holders
                                .iter()
                                .map(|h| holder_to_proto(store, h))
                                .collect(),
                            waiters: l
                                .waiters
                                .iter()
                                .map(|w| waiter_to_proto(store, w))
                                .collect(),
                        })
                        .collect(),
                }))
            }
            Err(e) => reply(R::Error(self.client_error(store, &e))),
            Ok(other) => Err(unexpected("ListLocks", &other)),
        }
    }
}

/// A unary request no larger than [`crate::MAX_REQUEST_BYTES`] (tonic decodes up to
/// [`crate::MAX_FRAME_BYTES`], for the session stream's typed `TooLarge`).
pub(crate) fn sized<T: prost::Message>(r: T) -> Result<T, Status> {
    let len = r.encoded_len();
    if len > crate::MAX_REQUEST_BYTES {
        return Err(Status::out_of_range(format!(
            "request of {len} bytes, limit {}",
            crate::MAX_REQUEST_BYTES
        )));
    }
    Ok(r)
}

/// Put the lock name into the typed errors that carry one.
fn fill_name(e: &mut proto::Error, name: &str) {
    match &mut e.kind {
        Some(Kind::WouldBlock(x)) => x.name = name.to_string(),
        Some(Kind::Timeout(x)) => x.name = name.to_string(),
        Some(Kind::Deadlock(x)) => x.name = name.to_string(),
        Some(Kind::NotHeld(x)) => x.name = name.to_string(),
        Some(Kind::InvalidName(x)) => x.name = name.chars().take(128).collect(),
        _ => {}
    }
}

pub(crate) fn error_kind(e: &ClientError) -> &'static str {
    match e {
        ClientError::NotManager { .. } => "not_manager",
        ClientError::Unavailable { .. } => "unavailable",
        ClientError::UnknownStore(_) => "unknown_store",
        ClientError::SessionExpired => "session_expired",
        ClientError::WouldBlock => "would_block",
        ClientError::Deadlock => "deadlock",
        ClientError::Timeout => "timeout",
        ClientError::InvalidName(_) => "invalid_name",
        ClientError::NotHeld => "not_held",
        ClientError::Rejected(_) => "rejected",
        ClientError::Lookup(_) => "lookup",
        ClientError::TooLarge { .. } => "too_large",
        ClientError::StaleToken { .. } => "stale_token",
        ClientError::Object(e) => {
            use tenure_core::objects::ObjectError as O;
            match e {
                O::Exists { .. } => "object_exists",
                O::RevisionMismatch { .. } => "revision_mismatch",
                O::NoSuchObject => "no_such_object",
                O::NoSuchUpload(_) => "no_such_upload",
                O::Incomplete { .. } => "upload_incomplete",
                O::NoSuchPart(_) => "no_such_part",
                O::Compacted { .. } => "compacted",
                O::DataUnavailable => "data_unavailable",
            }
        }
    }
}

/// Render a status snapshot for the wire.
pub fn status_to_proto(s: &StatusSnapshot) -> proto::StatusResponse {
    let cref = |c: &tenure_core::ids::ChunkId| proto::ChunkRef {
        device: c.device.0,
        serial: c.serial,
    };
    proto::StatusResponse {
        device: s.device.0,
        stores: s.stores,
        devices: s.devices.iter().map(|d| d.0).collect(),
        chunks: s
            .chunks
            .iter()
            .map(|c| proto::ChunkStatus {
                device: c.id.device.0,
                serial: c.id.serial,
                store: c.store.0,
                state: tenure_client::status::chunk_state_name(c.state).to_string(),
                epoch: c.epoch.0,
                lease_manager: c.lease_mgr.map(|d| d.0),
            })
            .collect(),
        managers: s
            .managers
            .iter()
            .map(|m| proto::ManagerStatus {
                store: m.store.0,
                state: tenure_client::status::mgr_state_name(m.state).to_string(),
                epoch: m.epoch.0,
                chunks: m.metadata.chunks.iter().map(cref).collect(),
                failed: m.failed.iter().map(cref).collect(),
                sessions: s.tables.get(&m.store).map_or(0, |t| t.sessions),
                locks_held: s.tables.get(&m.store).map_or(0, |t| t.locks_held),
            })
            .collect(),
        now_micros: s.now.0,
        coordinator: s.coordinator.map(|t| t.leader.0),
        coordinator_term: s.coordinator.map_or(0, |t| t.n),
        acting_coordinator: s.acting_coordinator,
    }
}
