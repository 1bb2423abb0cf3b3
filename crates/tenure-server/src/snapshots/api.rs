//! `service Snapshots`: the gRPC API over the [`Book`] and the driver (create, list,
//! delete, fetch a part).

use super::book::{Book, Entry, Outcome, PartState};
use super::files::crc32;
use super::{CHUNK_BYTES, SnapshotError};
use crate::driver::calls::Call;
use futures::Stream;
use std::pin::Pin;
use std::time::Duration;
use tenure_client::proto::{self, snapshots_server::Snapshots};
use tenure_core::ids::DeviceId;
use tenure_core::snapshot::SnapshotId;
use tokio::sync::{mpsc, oneshot};
use tonic::{Request as GrpcRequest, Response as GrpcResponse, Status};

/// The snapshots service.
#[derive(Clone, Debug)]
pub struct SnapshotsApi {
    calls: mpsc::Sender<Call>,
    book: Book,
    device: DeviceId,
    /// How long `Create` waits for the result.
    wait: Duration,
    auth: crate::auth::Auth,
}

impl SnapshotsApi {
    /// A service that starts snapshots through the driver behind `calls` and reads their
    /// outcome from `book`; `Create` waits at most `wait` (the core fails a snapshot
    /// whose peers are silent past its `[snapshot] timeout`, so this is a backstop).
    pub fn new(calls: mpsc::Sender<Call>, book: Book, device: DeviceId, wait: Duration) -> Self {
        SnapshotsApi {
            calls,
            book,
            device,
            wait,
            auth: crate::auth::Auth::disabled(),
        }
    }

    /// Authorize calls with `auth`: every snapshot call needs `admin` on `/` (a part is
    /// a copy of everything the device holds).
    pub fn with_auth(mut self, auth: crate::auth::Auth) -> Self {
        self.auth = auth;
        self
    }

    #[allow(clippy::result_large_err)]
    fn admin<T>(&self, request: &GrpcRequest<T>) -> Result<(), Status> {
        self.auth
            .authorize(request, crate::auth::Perm::Admin, "/")
            .map(|_| ())
    }
}

pub(super) fn snap_error(k: proto::snapshot_error::Kind) -> proto::SnapshotError {
    proto::SnapshotError { kind: Some(k) }
}

pub(super) type FetchStream =
    Pin<Box<dyn Stream<Item = Result<proto::FetchPartResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Snapshots for SnapshotsApi {
    async fn create(
        &self,
        request: GrpcRequest<proto::CreateSnapshotRequest>,
    ) -> Result<GrpcResponse<proto::CreateSnapshotResponse>, Status> {
        self.admin(&request)?;
        use proto::create_snapshot_response::Result as R;
        use proto::snapshot_error::Kind as K;
        let gone = || Status::unavailable("device is shutting down");
        let (tx, rx) = oneshot::channel();
        (self.calls.send(Call::StartSnapshot { reply: tx }).await).map_err(|_| gone())?;
        let id = rx.await.map_err(|_| gone())?;
        let result = match tokio::time::timeout(self.wait, self.book.outcome(id)).await {
            Ok(Outcome {
                result: Ok(s),
                duration_us,
                ..
            }) => R::Ok(proto::SnapshotCreated {
                initiator: self.device.0,
                devices: s.devices.iter().map(|d| d.0).collect(),
                terminated: s.terminated,
                duration_us,
            }),
            Ok(Outcome {
                result: Err(why), ..
            }) => R::Error(snap_error(K::Failed(why))),
            Err(_) => R::Error(snap_error(K::Timeout(format!(
                "snapshot {id} did not end within {:?}",
                self.wait
            )))),
        };
        Ok(GrpcResponse::new(proto::CreateSnapshotResponse {
            id: id.to_string(),
            result: Some(result),
        }))
    }

    async fn list(
        &self,
        request: GrpcRequest<proto::ListSnapshotsRequest>,
    ) -> Result<GrpcResponse<proto::ListSnapshotsResponse>, Status> {
        self.admin(&request)?;
        let book = self.book.clone();
        let entries = tokio::task::spawn_blocking(move || book.list())
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        let snapshots = entries
            .into_iter()
            .map(|(id, e)| entry_to_proto(id, e))
            .collect();
        Ok(GrpcResponse::new(proto::ListSnapshotsResponse {
            device: self.device.0,
            snapshots,
        }))
    }

    async fn delete(
        &self,
        request: GrpcRequest<proto::DeleteSnapshotRequest>,
    ) -> Result<GrpcResponse<proto::DeleteSnapshotResponse>, Status> {
        self.admin(&request)?;
        let id = request.into_inner().id;
        Ok(GrpcResponse::new(self.delete_part(id).await?))
    }

    type FetchPartStream = FetchStream;

    async fn fetch_part(
        &self,
        request: GrpcRequest<proto::FetchPartRequest>,
    ) -> Result<GrpcResponse<Self::FetchPartStream>, Status> {
        use proto::fetch_part_response::Item;
        use proto::snapshot_error::Kind as K;
        let one = |k: K| -> FetchStream {
            let m = proto::FetchPartResponse {
                item: Some(Item::Error(snap_error(k))),
            };
            Box::pin(futures::stream::iter([Ok(m)]))
        };
        self.admin(&request)?;
        let raw = request.into_inner().id;
        let id: SnapshotId = match raw.parse() {
            Ok(id) => id,
            Err(e) => return Ok(GrpcResponse::new(one(K::InvalidId(e)))),
        };
        let book = self.book.clone();
        // The whole part is read before any of it is sent: a removal meanwhile (retention,
        // Delete) either leaves this read the whole file or takes its name away first.
        let read = tokio::task::spawn_blocking(move || {
            let path = book.part_path(id)?;
            match std::fs::read(&path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                r => Some(r.map_err(|e| format!("{}: {e}", path.display()))),
            }
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?;
        let bytes = match read {
            None => {
                let k = K::NoSuchPart(format!(
                    "device {} holds no part of snapshot {id}",
                    self.device.0
                ));
                return Ok(GrpcResponse::new(one(k)));
            }
            Some(Err(e)) => return Ok(GrpcResponse::new(one(K::Storage(e)))),
            Some(Ok(b)) => b,
        };
        let header = proto::FetchPartResponse {
            item: Some(Item::Header(proto::SnapshotPartHeader {
                id: id.to_string(),
                device: self.device.0,
                part: Some(proto::SnapshotPartInfo {
                    bytes: bytes.len() as u64,
                    crc32: crc32(&bytes),
                }),
            })),
        };
        let bytes = bytes::Bytes::from(bytes);
        let chunks = (0..bytes.len())
            .step_by(CHUNK_BYTES)
            .map(move |at| {
                let end = (at + CHUNK_BYTES).min(bytes.len());
                Ok(proto::FetchPartResponse {
                    item: Some(Item::Data(bytes.slice(at..end).to_vec())),
                })
            })
            .collect::<Vec<_>>();
        let all = std::iter::once(Ok(header)).chain(chunks);
        Ok(GrpcResponse::new(Box::pin(futures::stream::iter(all))))
    }
}

impl SnapshotsApi {
    /// `Delete` (see `proto/snapshots.proto`).
    pub(super) async fn delete_part(
        &self,
        raw: String,
    ) -> Result<proto::DeleteSnapshotResponse, Status> {
        use proto::delete_snapshot_response::Result as R;
        use proto::snapshot_error::Kind as K;
        let answer = |r: R| proto::DeleteSnapshotResponse {
            device: self.device.0,
            result: Some(r),
        };
        let id: SnapshotId = match raw.parse() {
            Ok(id) => id,
            Err(e) => return Ok(answer(R::Error(snap_error(K::InvalidId(e))))),
        };
        let book = self.book.clone();
        let removed = tokio::task::spawn_blocking(move || book.remove(id, "deleted"))
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(answer(match removed {
            Ok(deleted) => R::Deleted(deleted),
            Err(e @ SnapshotError::Busy { .. }) => R::Error(snap_error(K::Busy(format!(
                "device {}: {e}; try again when it has ended",
                self.device.0
            )))),
            Err(e) => R::Error(snap_error(K::Storage(format!(
                "device {}: {e}",
                self.device.0
            )))),
        }))
    }
}

pub(super) fn entry_to_proto(id: SnapshotId, e: Entry) -> proto::SnapshotEntry {
    let mut out = proto::SnapshotEntry {
        id: id.to_string(),
        initiated_here: e.initiated_here,
        unix_ms: e.unix_ms,
        ..Default::default()
    };
    if let PartState::Written { bytes, crc32 } = e.part {
        out.part = Some(proto::SnapshotPartInfo { bytes, crc32 });
    }
    let (status, error) = match (&e.outcome, &e.part) {
        (Some(o), _) => match &o.result {
            Ok(s) => {
                out.devices = s.devices.iter().map(|d| d.0).collect();
                out.terminated = s.terminated;
                ("complete", String::new())
            }
            Err(why) => ("failed", why.clone()),
        },
        (None, PartState::Failed(why)) => ("failed", why.clone()),
        (None, _) if e.initiated_here => ("running", String::new()),
        (None, PartState::Written { .. }) => ("recorded", String::new()),
        (None, PartState::Recording | PartState::Writing) => ("recording", String::new()),
    };
    out.status = status.to_string();
    out.error = error;
    out
}
