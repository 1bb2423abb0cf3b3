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

use crate::auth::Auth;
use crate::driver::calls::{Answer, Call, DeviceEvent};
use crate::driver::status::StatusView;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;
use tenure_client::proto::{self, error::Kind};
use tenure_core::config::store_of;
use tenure_core::ids::SessionId;
use tenure_core::ids::{DeviceId, StoreId};
use tenure_core::io::{ClientError, Request};
use tenure_core::lockctl::LockName;
use tokio::sync::{broadcast, mpsc, oneshot};
use tonic::Status;

mod convert;
mod service;

pub use convert::status_to_proto;
pub(crate) use convert::{
    error_kind, invalid_name, invalid_request, sized, token_from_proto, token_to_proto, unexpected,
};

/// The service.
#[derive(Clone, Debug)]
pub struct Api {
    calls: mpsc::Sender<Call>,
    /// Where keep-alives and Status go: a lane the driver reads before `calls`, so
    /// that they do not wait behind queued requests (none: `calls`).
    urgent: Option<mpsc::Sender<Call>>,
    /// Client endpoints for redirect hints (configured, then the membership record's).
    endpoints: crate::cluster_api::Endpoints,
    request_timeout: Duration,
    stores: u32,
    events: broadcast::Sender<DeviceEvent>,
    me: Option<DeviceId>,
    watches: crate::driver::routes::WatchRoutes,
    auth: Auth,
    admission: crate::admission::Admission,
    /// How long a request waits for a place in the admission (none: refused at once,
    /// as unary calls are; a session stream's: [`crate::admission::STREAM_ADMISSION_WAIT`]).
    admission_wait: Option<Duration>,
    /// The device's data directory, whose size the Status answer reports.
    pub(super) data_dir: Option<std::path::PathBuf>,
    /// Sessions opened here without a store so far (their homes are chosen in turn).
    homes: std::sync::Arc<std::sync::atomic::AtomicU64>,
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
            urgent: None,
            endpoints: endpoints.into(),
            request_timeout,
            stores,
            events,
            me: None,
            watches: Default::default(),
            auth: Auth::disabled(),
            admission: Default::default(),
            admission_wait: None,
            data_dir: None,
            homes: Default::default(),
        }
    }

    /// The home store of the next session opened without one: the stores in turn,
    /// from an offset of this device's own.
    pub(crate) fn next_home(&self) -> u32 {
        let n = (self.homes).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let me = self.me.map_or(0, |d| d.0);
        (n.wrapping_add(me.wrapping_mul(7)) % u64::from(self.stores.max(1))) as u32
    }

    /// Send keep-alives and Status to the driver through `urgent`, which it reads
    /// before the other calls ([`crate::driver::Driver::with_urgent`]).
    pub fn with_urgent(mut self, urgent: mpsc::Sender<Call>) -> Api {
        self.urgent = Some(urgent);
        self
    }

    /// The channel a call for `req` goes through: the urgent lane for keep-alives (a
    /// session's life hangs on them; they are cheap and never refused), the rest in
    /// order.
    fn lane(&self, req: Option<&Request>) -> &mpsc::Sender<Call> {
        match (&self.urgent, req) {
            (Some(u), None | Some(Request::KeepAlive { .. })) => u,
            _ => &self.calls,
        }
    }

    /// Report the size of `dir` (the device's data directory) in Status answers.
    pub fn with_data_dir(mut self, dir: std::path::PathBuf) -> Api {
        self.data_dir = Some(dir);
        self
    }

    /// This service for a session stream: its requests wait for admission in turn, up
    /// to the admission's stream wait.
    pub(crate) fn waiting_for_admission(mut self) -> Api {
        self.admission_wait = Some(self.admission.stream_wait());
        self
    }

    /// How many client requests the device takes at once.
    pub(crate) fn admission_limit(&self) -> usize {
        self.admission.limit()
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
    pub fn with_watches(mut self, routes: crate::driver::routes::WatchRoutes) -> Api {
        self.watches = routes;
        self
    }

    /// Where object watch events go.
    pub(crate) fn watches(&self) -> &crate::driver::routes::WatchRoutes {
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
            self.lane(Some(&req))
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
        let _admitted = match self.admission_wait {
            Some(wait) => self.admission.wait_within(&req, wait).await?,
            None => self.admission.request(&req)?,
        };
        let (tx, rx) = oneshot::channel();
        self.lane(Some(&req))
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

    /// `Resolve`: the store of a name and its manager as this device knows it.
    pub(crate) async fn do_resolve(
        &self,
        r: proto::ResolveRequest,
    ) -> Result<proto::ResolveResponse, Status> {
        use proto::resolve_response::Result as R;
        let store = match self.name(&r.name) {
            Ok((store, _)) => store,
            Err(e) => {
                return Ok(proto::ResolveResponse {
                    result: Some(R::Error(e)),
                });
            }
        };
        let (tx, rx) = oneshot::channel();
        self.calls
            .send(Call::Resolve { store, reply: tx })
            .await
            .map_err(|_| Status::unavailable("device is shutting down"))?;
        let manager = (rx.await).map_err(|_| Status::unavailable("device is shutting down"))?;
        let endpoint = (manager.and_then(|d| self.endpoints.get(d)))
            .map(|a| a.to_string())
            .unwrap_or_default();
        let resolved = proto::Resolved {
            name: r.name,
            store: store.0,
            manager: manager.map(|d| d.0),
            endpoint,
        };
        Ok(proto::ResolveResponse {
            result: Some(R::Ok(resolved)),
        })
    }

    /// The device's status view.
    pub async fn view(&self) -> Result<StatusView, Status> {
        let (tx, rx) = oneshot::channel();
        self.lane(None)
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
                store: None,
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
