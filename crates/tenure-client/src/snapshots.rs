//! Consistent snapshots of the cluster (DESIGN §6; `service Snapshots` in
//! `proto/snapshots.proto`).
//!
//! [`Snapshots::create`] asks one device to initiate a Chandy-Lamport snapshot and waits
//! until it has heard from every device (termination detection): by then every device's
//! part is durable in its own data directory. [`Snapshots::fetch_part`] brings one
//! device's part over, checked against the size and CRC-32 the device announced, so a
//! tool can collect a snapshot's directory; [`Snapshots::list`] says which snapshots a
//! device took part in and how those it initiated ended; [`Snapshots::delete`] removes a
//! device's part of one.
//!
//! These are administrative calls made to a named device, not routed by store: a
//! snapshot involves every device whichever one initiates it.

use crate::Chan;
use crate::proto::{self, snapshots_client::SnapshotsClient};
use crate::{Client, normalize};
use std::time::Duration;

/// How long `create` waits for a snapshot to end (the devices fail a snapshot whose peers
/// stay silent past their `[snapshot] timeout`, 10 s by default, long before this).
pub const CREATE_TIMEOUT: Duration = Duration::from_secs(60);

/// Largest part message decoded (the server sends 256 KiB of part per message).
const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// Snapshot call failures.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The device could not be reached, or the call failed below the snapshot API.
    #[error(transparent)]
    Client(#[from] crate::Error),
    /// The snapshot failed (a device stayed silent, or could not write its part).
    #[error("snapshot {id} failed: {reason}")]
    Failed {
        /// The snapshot.
        id: String,
        /// Why, as the initiator tells it.
        reason: String,
    },
    /// The snapshot did not end while the device waited (it may still end).
    #[error("snapshot {id}: {reason}")]
    Timeout {
        /// The snapshot.
        id: String,
        /// The device's words.
        reason: String,
    },
    /// The id is not `<initiator>-<serial>`.
    #[error("invalid snapshot id: {0}")]
    InvalidId(String),
    /// The device holds no part of the snapshot.
    #[error("{0}")]
    NoSuchPart(String),
    /// The device could not read (or remove) its part.
    #[error("reading the part on the device: {0}")]
    Storage(String),
    /// Delete: the device's part is still being written, or the snapshot it initiated is
    /// still running; nothing was removed.
    #[error("{0}")]
    Busy(String),
    /// What arrived is not what the device announced.
    #[error(
        "part of snapshot {id} from {endpoint} arrived damaged: {got} bytes with CRC-32 {got_crc:#010x}, \
         the device announced {bytes} bytes with CRC-32 {crc:#010x}"
    )]
    Transfer {
        /// The snapshot.
        id: String,
        /// The device's endpoint.
        endpoint: String,
        /// Bytes announced.
        bytes: u64,
        /// CRC-32 announced.
        crc: u32,
        /// Bytes received.
        got: u64,
        /// Their CRC-32.
        got_crc: u32,
    },
    /// The server's answer does not follow the protocol.
    #[error("malformed answer from the server: {0}")]
    Malformed(&'static str),
}

/// Result of the snapshot calls.
pub type Result<T> = std::result::Result<T, SnapshotError>;

/// A snapshot that completed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Created {
    /// Its id (`<initiator>-<serial>`).
    pub id: String,
    /// The endpoint of the device that initiated it.
    pub endpoint: String,
    /// That device's id.
    pub initiator: u64,
    /// The devices whose parts make it up, ascending.
    pub devices: Vec<u64>,
    /// Termination detection found no message in flight in the cut.
    pub terminated: bool,
    /// From its start to the initiator's result.
    pub duration: Duration,
}

/// One device's part of a snapshot, as fetched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// The snapshot.
    pub id: String,
    /// The device.
    pub device: u64,
    /// The part file's bytes.
    pub bytes: Vec<u8>,
    /// Their CRC-32 (checked against the device's).
    pub crc32: u32,
}

/// What one device answered a delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deleted {
    /// The device.
    pub device: u64,
    /// It held files of the snapshot and removed them (false: it held none).
    pub deleted: bool,
}

/// The snapshots API of a [`Client`].
#[derive(Clone, Debug)]
pub struct Snapshots {
    client: Client,
}

impl Client {
    /// The snapshots API.
    pub fn snapshots(&self) -> Snapshots {
        Snapshots {
            client: self.clone(),
        }
    }
}

fn error_of(id: &str, e: proto::SnapshotError) -> SnapshotError {
    use proto::snapshot_error::Kind as K;
    match e.kind {
        Some(K::InvalidId(s)) => SnapshotError::InvalidId(s),
        Some(K::NoSuchPart(s)) => SnapshotError::NoSuchPart(s),
        Some(K::Failed(reason)) => SnapshotError::Failed {
            id: id.to_string(),
            reason,
        },
        Some(K::Timeout(reason)) => SnapshotError::Timeout {
            id: id.to_string(),
            reason,
        },
        Some(K::Storage(s)) => SnapshotError::Storage(s),
        Some(K::Busy(s)) => SnapshotError::Busy(s),
        None => SnapshotError::Malformed("empty error"),
    }
}

impl Snapshots {
    fn channel(&self, endpoint: &str) -> Result<SnapshotsClient<Chan>> {
        let ep = normalize(endpoint.to_string());
        let ch = crate::lazy_channel(&ep, self.client.options())?;
        Ok(SnapshotsClient::new(ch)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    /// Start a snapshot on the first device that answers and wait for it to end.
    pub async fn create(&self) -> Result<Created> {
        let (endpoint, _) = self.client.first_status().await?;
        self.create_on(&endpoint).await
    }

    /// Start a snapshot on the device at `endpoint` and wait for it to end.
    pub async fn create_on(&self, endpoint: &str) -> Result<Created> {
        use proto::create_snapshot_response::Result as R;
        let mut c = self.channel(endpoint)?;
        let r = crate::within(
            CREATE_TIMEOUT,
            "Create",
            c.create(proto::CreateSnapshotRequest {}),
        )
        .await?;
        match r.result {
            Some(R::Ok(ok)) => Ok(Created {
                id: r.id,
                endpoint: endpoint.to_string(),
                initiator: ok.initiator,
                devices: ok.devices,
                terminated: ok.terminated,
                duration: Duration::from_micros(ok.duration_us),
            }),
            Some(R::Error(e)) => Err(error_of(&r.id, e)),
            None => Err(SnapshotError::Malformed("empty result")),
        }
    }

    /// The snapshots the device at `endpoint` took part in.
    pub async fn list(&self, endpoint: &str) -> Result<proto::ListSnapshotsResponse> {
        let mut c = self.channel(endpoint)?;
        let limit = self.client.options().request_timeout;
        Ok(crate::within(limit, "List", c.list(proto::ListSnapshotsRequest {})).await?)
    }

    /// [`Self::list`] of every known endpoint, at once, in endpoint order.
    pub async fn list_all(&self) -> Vec<(String, Result<proto::ListSnapshotsResponse>)> {
        let eps = self.client.endpoints();
        let answers = futures::future::join_all(eps.iter().map(|e| self.list(e))).await;
        eps.into_iter().zip(answers).collect()
    }

    /// The device at `endpoint`'s part of snapshot `id`, checked against the size and
    /// CRC-32 it announced.
    pub async fn fetch_part(&self, endpoint: &str, id: &str) -> Result<Part> {
        use futures::StreamExt;
        use proto::fetch_part_response::Item;
        let mut c = self.channel(endpoint)?;
        let limit = self.client.options().request_timeout;
        let req = proto::FetchPartRequest { id: id.to_string() };
        let mut stream = crate::within(limit, "FetchPart", c.fetch_part(req)).await?;
        let header = match stream.next().await {
            Some(Ok(proto::FetchPartResponse {
                item: Some(Item::Header(h)),
            })) => h,
            Some(Ok(proto::FetchPartResponse {
                item: Some(Item::Error(e)),
            })) => return Err(error_of(id, e)),
            Some(Ok(_)) => return Err(SnapshotError::Malformed("part data before its header")),
            Some(Err(s)) => return Err(crate::Error::from_status(s).into()),
            None => return Err(SnapshotError::Malformed("empty part stream")),
        };
        let info = header
            .part
            .ok_or(SnapshotError::Malformed("part header without size"))?;
        let mut bytes = Vec::with_capacity(info.bytes as usize);
        while let Some(m) = stream.next().await {
            match m.map_err(crate::Error::from_status)?.item {
                Some(Item::Data(d)) => bytes.extend_from_slice(&d),
                _ => return Err(SnapshotError::Malformed("a part stream holds data only")),
            }
        }
        let got_crc = crc32fast::hash(&bytes);
        if bytes.len() as u64 != info.bytes || got_crc != info.crc32 {
            return Err(SnapshotError::Transfer {
                id: id.to_string(),
                endpoint: endpoint.to_string(),
                bytes: info.bytes,
                crc: info.crc32,
                got: bytes.len() as u64,
                got_crc,
            });
        }
        Ok(Part {
            id: header.id,
            device: header.device,
            bytes,
            crc32: got_crc,
        })
    }

    /// Remove the device at `endpoint`'s files of snapshot `id` (idempotent: a device
    /// that holds none answers `deleted: false`).
    pub async fn delete(&self, endpoint: &str, id: &str) -> Result<Deleted> {
        use proto::delete_snapshot_response::Result as R;
        let mut c = self.channel(endpoint)?;
        let limit = self.client.options().request_timeout;
        let req = proto::DeleteSnapshotRequest { id: id.to_string() };
        let r = crate::within(limit, "Delete", c.delete(req)).await?;
        match r.result {
            Some(R::Deleted(deleted)) => Ok(Deleted {
                device: r.device,
                deleted,
            }),
            Some(R::Error(e)) => Err(error_of(id, e)),
            None => Err(SnapshotError::Malformed("empty result")),
        }
    }

    /// [`Self::delete`] at every known endpoint, at once, in endpoint order.
    pub async fn delete_all(&self, id: &str) -> Vec<(String, Result<Deleted>)> {
        let eps = self.client.endpoints();
        let answers = futures::future::join_all(eps.iter().map(|e| self.delete(e, id))).await;
        eps.into_iter().zip(answers).collect()
    }
}
