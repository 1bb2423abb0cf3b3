//! The gRPC client API (`proto/tenure.proto`), served with tonic.
//!
//! Each handler turns a request into a [`Call`] for the device driver and maps the core's
//! answer to the response's `oneof result`: the payload, or a typed [`proto::Error`]
//! (`NotManager` carries the hinted device's client endpoint when this device knows it).
//! Lock and session RPCs are defined in the protocol but answer `UNIMPLEMENTED` until the
//! core serves them: no made-up results.

use crate::driver::{Answer, Call, StatusSnapshot};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;
use tenure_client::proto::{self, error::Kind, tenure_server::Tenure};
use tenure_core::ids::{DeviceId, StoreId};
use tenure_core::io::{ClientError, Request, Response};
use tokio::sync::{mpsc, oneshot};
use tonic::{Request as GrpcRequest, Response as GrpcResponse, Status};

/// The service.
#[derive(Clone, Debug)]
pub struct Api {
    calls: mpsc::Sender<Call>,
    endpoints: HashMap<DeviceId, SocketAddr>,
    request_timeout: Duration,
}

impl Api {
    /// A service that sends calls to a driver.
    pub fn new(
        calls: mpsc::Sender<Call>,
        endpoints: HashMap<DeviceId, SocketAddr>,
        request_timeout: Duration,
    ) -> Api {
        Api {
            calls,
            endpoints,
            request_timeout,
        }
    }

    async fn request(&self, req: Request) -> Result<Answer, Status> {
        let (tx, rx) = oneshot::channel();
        self.calls
            .send(Call::Request { req, reply: tx })
            .await
            .map_err(|_| Status::unavailable("device is shutting down"))?;
        match tokio::time::timeout(self.request_timeout, rx).await {
            Ok(Ok(a)) => Ok(a),
            Ok(Err(_)) => Err(Status::unavailable("device is shutting down")),
            Err(_) => Err(Status::deadline_exceeded(format!(
                "no answer from the device within {:?}",
                self.request_timeout
            ))),
        }
    }

    /// The device's status snapshot.
    pub async fn snapshot(&self) -> Result<StatusSnapshot, Status> {
        let (tx, rx) = oneshot::channel();
        self.calls
            .send(Call::Status { reply: tx })
            .await
            .map_err(|_| Status::unavailable("device is shutting down"))?;
        rx.await
            .map_err(|_| Status::unavailable("device is shutting down"))
    }

    /// Map a core error to the wire error.
    pub fn error(&self, store: StoreId, e: &ClientError) -> proto::Error {
        let kind = match e {
            ClientError::NotManager { hint } => Kind::NotManager(proto::NotManager {
                store: store.0,
                hint_device: hint.map(|d| d.0),
                hint_endpoint: hint
                    .and_then(|d| self.endpoints.get(&d))
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
        };
        proto::Error {
            kind: Some(kind),
            message: e.to_string(),
        }
    }
}

fn not_yet(what: &str) -> Status {
    Status::unimplemented(format!(
        "{what} is defined in the API but not served yet: the protocol core has no lock \
         controller/session table wired to clients in this version"
    ))
}

type KeepAliveStream =
    Pin<Box<dyn futures::Stream<Item = Result<proto::KeepAliveResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Tenure for Api {
    async fn write(
        &self,
        request: GrpcRequest<proto::WriteRequest>,
    ) -> Result<GrpcResponse<proto::WriteResponse>, Status> {
        let r = request.into_inner();
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
            Err(e) => {
                metrics::counter!("tenure_client_errors_total", "kind" => error_kind(&e))
                    .increment(1);
                R::Error(self.error(store, &e))
            }
            #[allow(unreachable_patterns)]
            Ok(other) => {
                return Err(Status::internal(format!(
                    "unexpected answer to a write: {other:?}"
                )));
            }
        };
        Ok(GrpcResponse::new(proto::WriteResponse {
            result: Some(result),
        }))
    }

    async fn status(
        &self,
        _request: GrpcRequest<proto::StatusRequest>,
    ) -> Result<GrpcResponse<proto::StatusResponse>, Status> {
        let s = self.snapshot().await?;
        Ok(GrpcResponse::new(status_to_proto(&s)))
    }

    async fn open_session(
        &self,
        _request: GrpcRequest<proto::OpenSessionRequest>,
    ) -> Result<GrpcResponse<proto::OpenSessionResponse>, Status> {
        Err(not_yet("OpenSession"))
    }

    type KeepAliveStream = KeepAliveStream;

    async fn keep_alive(
        &self,
        _request: GrpcRequest<tonic::Streaming<proto::KeepAliveRequest>>,
    ) -> Result<GrpcResponse<Self::KeepAliveStream>, Status> {
        Err(not_yet("KeepAlive"))
    }

    async fn close_session(
        &self,
        _request: GrpcRequest<proto::CloseSessionRequest>,
    ) -> Result<GrpcResponse<proto::CloseSessionResponse>, Status> {
        Err(not_yet("CloseSession"))
    }

    async fn acquire(
        &self,
        _request: GrpcRequest<proto::AcquireRequest>,
    ) -> Result<GrpcResponse<proto::AcquireResponse>, Status> {
        Err(not_yet("Acquire"))
    }

    async fn release(
        &self,
        _request: GrpcRequest<proto::ReleaseRequest>,
    ) -> Result<GrpcResponse<proto::ReleaseResponse>, Status> {
        Err(not_yet("Release"))
    }

    async fn holder(
        &self,
        _request: GrpcRequest<proto::HolderRequest>,
    ) -> Result<GrpcResponse<proto::HolderResponse>, Status> {
        Err(not_yet("Holder"))
    }

    async fn list_locks(
        &self,
        _request: GrpcRequest<proto::ListLocksRequest>,
    ) -> Result<GrpcResponse<proto::ListLocksResponse>, Status> {
        Err(not_yet("ListLocks"))
    }
}

fn error_kind(e: &ClientError) -> &'static str {
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
                state: format!("{:?}", c.state),
                epoch: c.epoch.0,
                lease_manager: c.lease_mgr.map(|d| d.0),
            })
            .collect(),
        managers: s
            .managers
            .iter()
            .map(|m| proto::ManagerStatus {
                store: m.store.0,
                state: format!("{:?}", m.state),
                epoch: m.epoch.0,
                chunks: m.metadata.chunks.iter().map(cref).collect(),
                failed: m.failed.iter().map(cref).collect(),
            })
            .collect(),
        now_micros: s.now.0,
    }
}
