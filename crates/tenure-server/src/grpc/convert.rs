//! Conversions between the core's types and the protobuf messages, and the typed errors
//! a response carries.

use crate::driver::status::StatusView;
use tenure_client::proto::{self, error::Kind};
use tenure_core::ids::StoreId;
use tenure_core::io::{ClientError, Response};
use tenure_core::lockctl::{HolderInfo, LockMode, WaiterInfo};
use tonic::Status;

/// The typed error of a request that is malformed as a whole (`InvalidRequest`).
pub(crate) fn invalid_request(reason: impl Into<String>) -> proto::Error {
    let reason = reason.into();
    proto::Error {
        message: format!("invalid request: {reason}"),
        kind: Some(Kind::InvalidRequest(proto::InvalidRequest { reason })),
    }
}

pub(crate) fn invalid_name(name: &str, reason: &str) -> proto::Error {
    proto::Error {
        message: format!("invalid name {name:?}: {reason}"),
        kind: Some(Kind::InvalidName(proto::InvalidName {
            name: name.chars().take(128).collect(),
            reason: reason.to_string(),
            store: None,
        })),
    }
}

pub(crate) use tenure_client::locks::convert::{mode_to_proto, token_from_proto, token_to_proto};

/// A lock mode from a request ([`tenure_client::locks::convert::mode_from_proto`]): an
/// unknown value is an invalid argument.
pub(super) fn mode_from_proto(m: i32) -> Result<LockMode, Status> {
    tenure_client::locks::convert::mode_from_proto(m).map_err(Status::invalid_argument)
}

pub(super) fn holder_to_proto(store: StoreId, h: &HolderInfo) -> proto::LockHolder {
    proto::LockHolder {
        session: Some(proto::SessionRef {
            store: store.0,
            id: h.session.0,
        }),
        mode: mode_to_proto(h.mode),
        token: Some(token_to_proto(h.token)),
    }
}

pub(super) fn waiter_to_proto(store: StoreId, w: &WaiterInfo) -> proto::SessionRef {
    proto::SessionRef {
        store: store.0,
        id: w.session.0,
    }
}

pub(crate) fn unexpected(what: &str, r: &Response) -> Status {
    Status::internal(format!("unexpected answer to {what}: {r:?}"))
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
pub(super) fn fill_name(e: &mut proto::Error, name: &str) {
    let named = match &mut e.kind {
        Some(Kind::WouldBlock(x)) => Some(&mut x.name),
        Some(Kind::Timeout(x)) => Some(&mut x.name),
        Some(Kind::Deadlock(x)) => Some(&mut x.name),
        Some(Kind::NotHeld(x)) => Some(&mut x.name),
        Some(Kind::InvalidName(x)) => {
            x.name = name.chars().take(128).collect();
            None
        }
        _ => None,
    };
    if let Some(n) = named {
        *n = name.to_string();
        // The message names the lock, as the CLI's does ("lock is held: /a/b").
        if !e.message.contains(name) {
            e.message = format!("{}: {name}", e.message);
        }
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
pub fn status_to_proto(s: &StatusView) -> proto::StatusResponse {
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
        version: env!("CARGO_PKG_VERSION").to_string(),
        data_bytes: None,
    }
}
