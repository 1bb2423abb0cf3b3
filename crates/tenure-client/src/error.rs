//! The client's [`Error`]: what failed and what to do, how a gRPC status or a typed
//! protocol error maps to it, and which errors are retried.

use crate::proto::error::Kind;
use crate::{proto, tls};
use std::time::Duration;

/// Client errors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No endpoint was given.
    #[error("no endpoints given")]
    NoEndpoints,
    /// An endpoint string is not a valid address.
    #[error("invalid endpoint {0:?}")]
    InvalidEndpoint(String),
    /// The token cannot travel in a header (a character outside visible ASCII, a space,
    /// or nothing at all).
    #[error("the token is not valid: tokens are visible ASCII characters without spaces")]
    InvalidToken,
    /// The cluster requires a token and the call had none it knows.
    #[error("not authenticated: {0}")]
    Unauthenticated(String),
    /// The call's token may not do this (the message names the token, the permission
    /// and the path).
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// An `https://` endpoint given to a client without TLS settings.
    #[error("endpoint {0} is https but no CA was given to trust (ClientOptions::tls)")]
    TlsNotConfigured(String),
    /// The contacted device does not manage the store (after following redirects).
    #[error("the device does not manage store {store}{}", match hint {
        Some(h) => format!("; its manager is at {h}"),
        None => String::new(),
    })]
    NotManager {
        /// Store.
        store: u32,
        /// Hinted endpoint.
        hint: Option<String>,
    },
    /// The store has no reachable quorum/coverage.
    #[error("store {store} is unavailable")]
    Unavailable {
        /// Store.
        store: u32,
    },
    /// The session expired.
    #[error("{}", if *.0 == 0 { "the session expired".to_string() } else { format!("session {} expired", .0) })]
    SessionExpired(u64),
    /// The request was the youngest in a deadlock cycle.
    #[error("deadlock on {0}")]
    Deadlock(String),
    /// The lock was not granted in time.
    #[error("timed out waiting for {0}")]
    Timeout(String),
    /// The name is not a valid path.
    #[error("invalid name {name:?}: {reason}")]
    InvalidName {
        /// Name.
        name: String,
        /// Why.
        reason: String,
    },
    /// A value is larger than the limit.
    #[error("too large: {size} bytes, limit {limit}")]
    TooLarge {
        /// Size.
        size: u64,
        /// Limit.
        limit: u64,
    },
    /// A fencing token is stale.
    #[error("stale fencing token")]
    StaleToken,
    /// The store does not exist.
    #[error("unknown store {0}")]
    UnknownStore(u32),
    /// A `try` acquire found the lock held.
    #[error("lock {0:?} is held")]
    WouldBlock(String),
    /// The session does not hold the lock.
    #[error("lock {0:?} not held")]
    NotHeld(String),
    /// The request conflicts with the session's other requests.
    #[error("rejected: {0}")]
    Rejected(String),
    /// The server does not serve this operation yet.
    #[error("not implemented by the server: {0}")]
    Unimplemented(String),
    /// The device has as many requests in flight as it takes: retried after a pause, on
    /// the same device (it is the right one, only busy).
    #[error("{0}")]
    Overloaded(String),
    /// A gRPC failure that is not one of the above: no device could be reached, no answer
    /// in time, or a status the client does not know (see [`describe_status`]).
    #[error("{}", describe_status(.0))]
    Rpc(Box<tonic::Status>),
    /// The server answered with an empty `oneof`.
    #[error("malformed answer from the server")]
    Malformed,
    /// More requests in flight on a session stream than the server allows.
    #[error("too many requests in flight (limit {0})")]
    TooManyRequests(u32),
    /// A request for another store than its session stream's.
    #[error("request for store {request_store} on a stream of store {stream_store}")]
    WrongStore {
        /// The stream's store.
        stream_store: u32,
        /// The request's.
        request_store: u32,
    },
    /// A request id was reused for a different request on a session stream.
    #[error("request id {0} reused for a different request")]
    RequestIdReused(u64),
    /// The server could not read the request.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A typed lookup error (seed 003): invalid key, value too large, interval out of
    /// range, no lookup leader (an outage: retried within the deadline), stale version,
    /// unknown subscription.
    #[error(transparent)]
    Lookup(tenure_core::lookup::LookupError),
    /// The lock was granted when the session's deadline had (nearly) passed, and no
    /// keep-alive could confirm the session in time: the lock was released, not taken.
    #[error("lock {0:?} was granted too late to be safe and was released")]
    GrantUnconfirmed(String),
    /// A create-only write found an active object under the key.
    #[error("object {key:?} exists (revision {revision})")]
    ObjectExists {
        /// Key.
        key: String,
        /// Its revision.
        revision: u64,
    },
    /// A compare-and-set found another revision (none: the key has no active object).
    #[error("object {key:?} {}, not the revision expected", match current {
        Some(r) => format!("is at revision {r}"),
        None => "does not exist".to_string(),
    })]
    RevisionMismatch {
        /// Key.
        key: String,
        /// The active revision, if any.
        current: Option<u64>,
    },
    /// No active object under the key.
    #[error("no object {0:?}")]
    NoSuchObject(String),
    /// No multipart upload in progress with this id.
    #[error("no upload {upload} in progress under {key:?}")]
    NoSuchUpload {
        /// Key.
        key: String,
        /// Upload id.
        upload: String,
    },
    /// A completion came before every block of the upload was written.
    #[error("upload incomplete: {0} blocks missing")]
    UploadIncomplete(u64),
    /// A multipart completion named a part that was not uploaded.
    #[error("no part {0} was uploaded")]
    NoSuchPart(u32),
    /// A watch's position is older than the history the store keeps: re-read.
    #[error("revision {asked} is compacted (history starts after {compacted}): re-read")]
    Compacted {
        /// The revision asked for.
        asked: u64,
        /// History is kept after this revision.
        compacted: u64,
    },
    /// No complete chunk could serve the object's data in time.
    #[error("the data of object {0:?} is unavailable right now")]
    DataUnavailable(String),
    /// The call's deadline passed before an answer came.
    #[error("no answer before the call's deadline")]
    DeadlinePassed,
    /// The client was shut down while the call ran.
    #[error("client closed")]
    Closed,
    /// Retries ran out.
    #[error("gave up after {attempts} attempts in {elapsed:?}; last error: {last}")]
    GaveUp {
        /// Attempts made.
        attempts: u32,
        /// Time spent.
        elapsed: Duration,
        /// The last error seen.
        last: Box<Error>,
    },
}

impl Error {
    /// Convert a protocol error.
    pub fn from_proto(e: proto::Error) -> Error {
        match e.kind {
            Some(Kind::PermissionDenied(_)) => Error::PermissionDenied(e.message),
            Some(Kind::NotManager(n)) => Error::NotManager {
                store: n.store,
                hint: (!n.hint_endpoint.is_empty()).then_some(n.hint_endpoint),
            },
            Some(Kind::Unavailable(u)) => Error::Unavailable { store: u.store },
            Some(Kind::SessionExpired(s)) => Error::SessionExpired(s.session),
            Some(Kind::Deadlock(d)) => Error::Deadlock(d.name),
            Some(Kind::Timeout(t)) => Error::Timeout(t.name),
            Some(Kind::InvalidName(n)) => Error::InvalidName {
                name: n.name,
                reason: n.reason,
            },
            Some(Kind::TooLarge(t)) => Error::TooLarge {
                size: t.size,
                limit: t.limit,
            },
            Some(Kind::StaleToken(_)) => Error::StaleToken,
            Some(Kind::UnknownStore(u)) => Error::UnknownStore(u.store),
            Some(Kind::WouldBlock(w)) => Error::WouldBlock(w.name),
            Some(Kind::NotHeld(n)) => Error::NotHeld(n.name),
            Some(Kind::Rejected(r)) => Error::Rejected(r.reason),
            Some(Kind::TooManyRequests(t)) => Error::TooManyRequests(t.limit),
            Some(Kind::Overloaded(o)) if e.message.is_empty() => Error::Overloaded(format!(
                "the device is overloaded ({} client requests in flight): retry after a pause",
                o.limit
            )),
            Some(Kind::Overloaded(_)) => Error::Overloaded(e.message),
            Some(Kind::WrongStore(w)) => Error::WrongStore {
                stream_store: w.stream_store,
                request_store: w.request_store,
            },
            Some(Kind::RequestIdReused(r)) => Error::RequestIdReused(r.request_id),
            Some(Kind::InvalidRequest(r)) => Error::InvalidRequest(r.reason),
            Some(Kind::ObjectExists(x)) => Error::ObjectExists {
                key: x.key,
                revision: x.revision,
            },
            Some(Kind::RevisionMismatch(x)) => Error::RevisionMismatch {
                key: x.key,
                current: x.current,
            },
            Some(Kind::NoSuchObject(x)) => Error::NoSuchObject(x.key),
            Some(Kind::NoSuchUpload(x)) => Error::NoSuchUpload {
                key: x.key,
                upload: x.upload,
            },
            Some(Kind::UploadIncomplete(x)) => Error::UploadIncomplete(x.missing),
            Some(Kind::NoSuchPart(x)) => Error::NoSuchPart(x.part),
            Some(Kind::Compacted(x)) => Error::Compacted {
                asked: x.asked,
                compacted: x.compacted,
            },
            Some(Kind::DataUnavailable(x)) => Error::DataUnavailable(x.key),
            None => Error::Malformed,
        }
    }

    pub(crate) fn from_status(s: tonic::Status) -> Error {
        // A status the device answered with; not one made from a broken connection
        // (an HTTP/2 refusal such as a TLS device's answer to plaintext also maps to
        // PERMISSION_DENIED, and keeps its cause for `describe_status`).
        let answered = std::error::Error::source(&s).is_none();
        match s.code() {
            tonic::Code::Unimplemented => Error::Unimplemented(s.message().to_string()),
            tonic::Code::ResourceExhausted if s.metadata().contains_key(OVERLOADED) => {
                Error::Overloaded(s.message().to_string())
            }
            tonic::Code::Unauthenticated if answered => {
                Error::Unauthenticated(s.message().to_string())
            }
            tonic::Code::PermissionDenied if answered => {
                Error::PermissionDenied(s.message().to_string())
            }
            _ => Error::Rpc(Box::new(s)),
        }
    }

    /// Whether another endpoint (or a later try) may succeed.
    pub fn retryable(&self) -> bool {
        match self {
            Error::NotManager { .. }
            | Error::Unavailable { .. }
            | Error::Overloaded(_)
            | Error::Lookup(tenure_core::lookup::LookupError::NoLeader) => true,
            Error::Rpc(s) => {
                matches!(
                    s.code(),
                    tonic::Code::Unavailable
                        | tonic::Code::DeadlineExceeded
                        | tonic::Code::Unknown
                        | tonic::Code::Cancelled
                        | tonic::Code::Aborted
                ) && !tls::permanent_failure(s)
            }
            _ => false,
        }
    }
}

impl Error {
    /// A gRPC failure that a later attempt may not see (a device down, a connection
    /// broken): not one that no attempt can fix (TLS refused: see
    /// [`tls::HandshakeError::permanent`]).
    pub(crate) fn transient_rpc(&self) -> bool {
        matches!(self, Error::Rpc(s) if !tls::permanent_failure(s))
    }
}

/// The metadata key a device's overload answer (`RESOURCE_EXHAUSTED`) carries, telling
/// it from a message too large, which has the same code and is not retried.
pub const OVERLOADED: &str = "tenure-overloaded";

/// A gRPC status for people: what failed and what to do, without the transport's debug
/// dump. A connection failure names its cause (the innermost error of the chain, e.g.
/// "Connection refused (os error 111)"), a missed deadline says so, anything else gives
/// its code and message.
pub fn describe_status(s: &tonic::Status) -> String {
    let mut causes: Vec<String> = Vec::new();
    let mut source = std::error::Error::source(s);
    while let Some(e) = source {
        let text = e.to_string();
        if !text.is_empty()
            && !causes
                .iter()
                .any(|c| c.contains(&text) || text.contains(c.as_str()))
        {
            causes.push(text);
        }
        source = e.source();
    }
    let cause = causes
        .last()
        .cloned()
        .unwrap_or_else(|| s.message().to_string());
    if causes.iter().any(|c| c.contains(tls::TLS_REQUIRED)) {
        return "the device requires TLS and this client speaks plaintext: give the cluster's \
                CA certificate (`--ca FILE` or TENURE_CA; a local cluster's is tls/ca.pem in its \
                data directory)"
            .to_string();
    }
    if let Some(c) = causes.iter().find(|c| c.starts_with("TLS handshake with")) {
        return c.clone();
    }
    match s.code() {
        tonic::Code::Unavailable if !causes.is_empty() || s.message().contains("connect") => {
            format!(
                "cannot connect ({cause}); is the cluster running? \
                 (`tenure cluster status`, or check --endpoints)"
            )
        }
        tonic::Code::Unavailable => format!("the device is unavailable: {cause}"),
        tonic::Code::DeadlineExceeded => format!("no answer in time: {}", s.message()),
        tonic::Code::Cancelled => format!("the request was cancelled: {}", s.message()),
        code => format!("request failed ({code:?}): {cause}"),
    }
}
