//! # tenure-client
//!
//! The Rust client library for Tenure, and the gRPC code generated from
//! `proto/tenure.proto` ([`proto`], used by the server too).
//!
//! A [`Client`] is built from a list of device endpoints. Every request is routed by store:
//! the client remembers which endpoint managed each store last, follows `NotManager`
//! redirects (the hint names the manager's endpoint), and on `Unavailable` or a transport
//! failure tries the other endpoints with exponential backoff, within a bounded number of
//! attempts and a deadline. At most three redirects are followed in a row:
//! hints left by old managers can name each other, so a longer chain is left for the
//! endpoints in turn. The keep-alive tasks route the same way. Errors are typed
//! ([`Error`]), mirroring the protocol's.
//!
//! Every routed RPC goes through one generic loop ([`Client::routed`]), so adding an RPC
//! is one call with a closure that issues it and unpacks its `oneof result`.
//!
//! Locks ([`Client::lock`], module [`locks`]): the client opens one session per store it
//! uses, transparently, and keeps each alive from a background task over a keep-alive
//! stream. A [`LockGuard`] carries the grant's fencing token and the session's
//! conservative deadline (the local send time of the last answered keep-alive + TTL −
//! δ_c, [`tenure_core::session::client_deadline`]); [`LockGuard::lost`] resolves before
//! that deadline passes unless a keep-alive extends it. Dropping a guard releases the
//! lock from a spawned task. Acquires are retried with the same request id, which the
//! store replays as the same outcome, so a retry after a redirect or a failover never
//! grants twice.
//!
//! Lookup ([`lookup`], seed 003): [`Client::publish`] keeps an entry refreshed from a
//! background task ([`lookup::PublishHandle`]: newer versions, meta-updates applied,
//! persistent refreshes retried until acknowledged, revoked on drop);
//! [`Client::get`]/[`Client::list`]/[`Client::revoke`] go to any endpoint (the lookup
//! service is cluster-wide) and are retried on another one, and on `NoLeader`, within
//! the deadline; [`Client::watch`] and [`Client::alert`] keep a subscription on a `Watch`
//! stream and report every change, resynchronising after a gap, a failover or a
//! reconnection.
//!
//! Cluster membership ([`Client::cluster`], module [`cluster`], DESIGN §6): add a device
//! started to join, remove (drain and retire) one, read the membership record.
//!
//! Objects ([`Client::objects`], module [`objects`], seed 001): put (one message up to a
//! MiB, streamed above), get, head, conditional puts (create only, compare-and-set on
//! the revision, fenced by a lock guard's token), delete, list, multipart uploads, and
//! watches that resume from the last revision seen when the store's manager moves and
//! report a re-read explicitly when the history no longer reaches back. Writes carry the
//! client's session in the store and one request id for every attempt, so a retry after
//! a failover returns the first attempt's outcome.
//!
//! Snapshots ([`Client::snapshots`], module [`snapshots`], seed 002 §14.1): start a
//! consistent snapshot of the cluster on a device and wait for it to complete, list the
//! snapshots a device took part in, and fetch a device's part, checksummed.
//!
//! Elections ([`Client::elections`], module [`elections`], DESIGN §6): campaign (wait to
//! lead an election under the client's session in its store, publishing a value), a
//! [`elections::Leadership`] with its fencing token that tells the holder when leadership
//! may be lost before its conservative deadline (as a [`LockGuard`] does), proclaim,
//! resign, the current leader, and observations of every change, "no leader" included.

pub mod cluster;
mod conn;
pub mod elections;
pub mod locks;
pub mod lookup;
pub mod objects;
pub mod snapshots;
pub mod status;
mod stream;
pub mod suspend;
pub mod tls;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint};

/// The channel every service client of this crate uses: a connection to one device, with
/// the client's token attached to every call ([`Credentials`]).
pub type Chan = tonic::service::interceptor::InterceptedService<Channel, Credentials>;

/// What a client presents on every call when the cluster requires a token: the
/// `authorization: Bearer <token>` metadata, or nothing (see [`ClientOptions::token`]).
#[derive(Clone, Default)]
pub struct Credentials(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Credentials(token)"
        } else {
            "Credentials(none)"
        })
    }
}

impl Credentials {
    /// The credentials of `opts`: its token, if any.
    pub fn of(opts: &ClientOptions) -> Result<Credentials> {
        let Some(token) = &opts.token else {
            return Ok(Credentials(None));
        };
        let token = token.trim();
        let mut v: tonic::metadata::MetadataValue<tonic::metadata::Ascii> =
            format!("Bearer {token}")
                .parse()
                .map_err(|_| Error::InvalidToken)?;
        if token.is_empty() || token.contains(' ') {
            return Err(Error::InvalidToken);
        }
        v.set_sensitive(true);
        Ok(Credentials(Some(v)))
    }
}

impl tonic::service::Interceptor for Credentials {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}
use tracing::debug;

pub use locks::{
    FencingToken, Holder, LockGuard, LockMode, LockOptions, LockState, Loss, SessionState, Wait,
};

/// Code generated from `proto/tenure.proto`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("tenure.v1");
}

use proto::error::Kind;
use proto::tenure_client::TenureClient;

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
    #[error("device is not the manager of store {store} (hint: {hint:?})")]
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
    #[error("object {key:?} is at revision {current:?}, not the one expected")]
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

    fn from_status(s: tonic::Status) -> Error {
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

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

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

/// Retry and timeout settings.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Connecting to one endpoint.
    pub connect_timeout: Duration,
    /// One RPC.
    pub request_timeout: Duration,
    /// Most attempts of one routed request.
    pub max_attempts: u32,
    /// Total time one routed request may take.
    pub retry_deadline: Duration,
    /// First backoff; doubles up to `backoff_max`.
    pub backoff_min: Duration,
    /// Largest backoff.
    pub backoff_max: Duration,
    /// TTL asked for the sessions the client opens.
    pub session_ttl: Duration,
    /// `δ_c`: the bound on clock differences the cluster is configured with; the client's
    /// deadline for a session is this much earlier than the TTL alone would give.
    pub clock_drift: Duration,
    /// How long before a session's conservative deadline a guard reports that its lock
    /// may be lost ([`LockGuard::lost`]) when no keep-alive has extended it.
    pub loss_warning: Duration,
    /// Longest single wait RPC of a blocking acquire; the wait continues with a retry of
    /// the same request (the same place in the queue).
    pub wait_poll: Duration,
    /// Name reported to the servers (logs).
    pub client_name: String,
    /// How requests travel: a session stream per store (the default) or unary RPCs.
    pub transport: Transport,
    /// One attempt to reach a device (connect and first answer); a device that does not
    /// answer within it is passed over for `pass_over`.
    pub attempt_timeout: Duration,
    /// When an attempt has not answered within this, the next endpoint is tried too.
    pub hedge_after: Duration,
    /// How long an endpoint that did not answer is tried last.
    pub pass_over: Duration,
    /// Slack allowed past a timed wait before the client gives up on its own: a
    /// `Wait::Timeout(d)` call returns within `d` + this, whatever the devices do.
    pub wait_slack: Duration,
    /// TLS on every connection (the CA to trust, the certificate to present), or none:
    /// plaintext. A device with TLS refuses plaintext clients, and the reverse.
    pub tls: Option<tls::ClientTls>,
    /// The token presented on every call (`authorization: Bearer <token>`), for a
    /// cluster with authorization on; none: no token.
    pub token: Option<String>,
}

/// How a client's requests travel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transport {
    /// One session stream per store: pipelined requests, keep-alives and pushed events.
    #[default]
    Stream,
    /// One unary RPC per request and a keep-alive stream per session.
    Unary,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            connect_timeout: Duration::from_millis(500),
            request_timeout: Duration::from_secs(6),
            max_attempts: 60,
            retry_deadline: Duration::from_secs(20),
            backoff_min: Duration::from_millis(10),
            backoff_max: Duration::from_millis(500),
            session_ttl: Duration::from_secs(10),
            clock_drift: Duration::from_millis(50),
            loss_warning: Duration::from_secs(2),
            wait_poll: Duration::from_secs(30),
            client_name: format!("tenure-client/{}", std::process::id()),
            transport: Transport::Stream,
            attempt_timeout: Duration::from_secs(1),
            hedge_after: Duration::from_millis(150),
            pass_over: Duration::from_secs(5),
            wait_slack: Duration::from_millis(300),
            tls: None,
            token: None,
        }
    }
}

impl ClientOptions {
    /// These options with `token` presented on every call.
    pub fn with_token(mut self, token: impl Into<String>) -> ClientOptions {
        self.token = Some(token.into());
        self
    }
}

/// A write's version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Epoch of the manager that ordered it.
    pub epoch: u64,
    /// Sequence number in the epoch.
    pub seq: u64,
}

/// Largest lookup answer decoded (the server's bound on what it sends).
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// The service clients on one endpoint's connection.
#[derive(Clone, Debug)]
pub(crate) struct Conns {
    tenure: TenureClient<Chan>,
    lookup: proto::lookup_client::LookupClient<Chan>,
    objects: proto::objects_client::ObjectsClient<Chan>,
    elections: proto::elections_client::ElectionsClient<Chan>,
}

/// A Tenure client. Cheap to clone: clones share connections, routes and sessions. Call
/// its methods inside a tokio runtime.
#[derive(Clone, Debug)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    opts: ClientOptions,
    endpoints: Mutex<Vec<String>>,
    /// Connections by endpoint; shared with the clients made by [`Client::new_sharing`].
    channels: Arc<Mutex<HashMap<String, Conns>>>,
    /// The endpoint that last answered a lookup request.
    lookup_route: Mutex<Option<String>>,
    routes: Mutex<HashMap<u32, String>>,
    /// Each store's manager endpoint as the lookup service last published it (DESIGN
    /// §3), and when that was asked (see [`Client::lookup_hint`]).
    lookup_hints: Mutex<(HashMap<u32, String>, Option<Instant>)>,
    stores: tokio::sync::OnceCell<u32>,
    sessions: tokio::sync::Mutex<HashMap<u32, Arc<locks::Session>>>,
    next_request: AtomicU64,
    /// The session stream of each store ([`Transport::Stream`]).
    links: Mutex<HashMap<u32, Arc<stream::Link>>>,
    /// Endpoints that did not answer an attempt, and until when they are tried last.
    slow: Arc<Mutex<HashMap<String, Instant>>>,
    /// Origin of the microsecond clock the deadline rule is computed on.
    origin: Instant,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for s in self.sessions.get_mut().values() {
            s.stop();
        }
    }
}

impl Client {
    /// A client for these endpoints (`host:port`, or `http://host:port`). Connections are
    /// made lazily; call this inside a tokio runtime.
    pub fn new(endpoints: impl IntoIterator<Item = impl Into<String>>) -> Result<Client> {
        Client::with_options(endpoints, ClientOptions::default())
    }

    /// A client with explicit options.
    pub fn with_options(
        endpoints: impl IntoIterator<Item = impl Into<String>>,
        opts: ClientOptions,
    ) -> Result<Client> {
        let endpoints: Vec<String> = endpoints.into_iter().map(|e| normalize(e.into())).collect();
        if endpoints.is_empty() {
            return Err(Error::NoEndpoints);
        }
        if opts.tls.is_none()
            && let Some(e) = endpoints.iter().find(|e| e.starts_with("https://"))
        {
            return Err(Error::TlsNotConfigured(e.clone()));
        }
        Credentials::of(&opts)?;
        let c = Client::on_channels(opts, Vec::new(), Arc::default(), Arc::default());
        for e in endpoints {
            c.channel(&e)?;
        }
        Ok(c)
    }

    /// Another client on the same connections (one HTTP/2 connection per endpoint carries
    /// the calls of both) with its own sessions, routes and request ids: what many
    /// independent lock holders in one process use, as etcd clients share a connection.
    /// Requests of different clients then travel together in the connection's writes.
    pub fn new_sharing(&self) -> Client {
        Client::on_channels(
            self.inner.opts.clone(),
            self.endpoints(),
            self.inner.channels.clone(),
            self.inner.slow.clone(),
        )
    }

    /// A client with no sessions or routes yet, on these connections.
    fn on_channels(
        opts: ClientOptions,
        endpoints: Vec<String>,
        channels: Arc<Mutex<HashMap<String, Conns>>>,
        slow: Arc<Mutex<HashMap<String, Instant>>>,
    ) -> Client {
        Client {
            inner: Arc::new(Inner {
                opts,
                endpoints: Mutex::new(endpoints),
                channels,
                lookup_route: Mutex::new(None),
                routes: Mutex::new(HashMap::new()),
                lookup_hints: Mutex::new((HashMap::new(), None)),
                stores: tokio::sync::OnceCell::new(),
                sessions: tokio::sync::Mutex::new(HashMap::new()),
                next_request: AtomicU64::new(1),
                links: Mutex::new(HashMap::new()),
                slow,
                origin: Instant::now(),
            }),
        }
    }

    /// The options the client runs with.
    pub fn options(&self) -> &ClientOptions {
        &self.inner.opts
    }

    /// The endpoints known (configured plus learned from redirects).
    pub fn endpoints(&self) -> Vec<String> {
        self.inner.endpoints.lock().unwrap().clone()
    }

    fn channel(&self, endpoint: &str) -> Result<TenureClient<Chan>> {
        self.conns(endpoint).map(|c| c.tenure)
    }

    /// The lookup service's client on `endpoint`'s connection.
    pub(crate) fn lookup_channel(
        &self,
        endpoint: &str,
    ) -> Result<proto::lookup_client::LookupClient<Chan>> {
        self.conns(endpoint).map(|c| c.lookup)
    }

    fn conns(&self, endpoint: &str) -> Result<Conns> {
        if let Some(c) = self.inner.channels.lock().unwrap().get(endpoint) {
            return Ok(c.clone());
        }
        // No channel-wide timeout: unary calls are bounded in `routed`, keep-alive
        // streams live as long as the session.
        let ch = Endpoint::from_shared(endpoint.to_string())
            .map_err(|_| Error::InvalidEndpoint(endpoint.to_string()))?
            .connect_timeout(self.inner.opts.connect_timeout)
            .http2_keep_alive_interval(Duration::from_secs(5))
            .keep_alive_timeout(Duration::from_secs(5))
            .connect_with_connector_lazy(conn::Connector::new(self.inner.opts.tls.as_ref()));
        let ch = Chan::new(ch, Credentials::of(&self.inner.opts)?);
        let conns = Conns {
            tenure: TenureClient::new(ch.clone()),
            lookup: proto::lookup_client::LookupClient::new(ch.clone())
                .max_decoding_message_size(MAX_ANSWER_BYTES)
                .max_encoding_message_size(MAX_ANSWER_BYTES),
            elections: proto::elections_client::ElectionsClient::new(ch.clone()),
            objects: proto::objects_client::ObjectsClient::new(ch)
                .max_decoding_message_size(MAX_ANSWER_BYTES)
                .max_encoding_message_size(MAX_ANSWER_BYTES),
        };
        self.inner
            .channels
            .lock()
            .unwrap()
            .insert(endpoint.to_string(), conns.clone());
        let mut eps = self.inner.endpoints.lock().unwrap();
        if !eps.iter().any(|e| e == endpoint) {
            eps.push(endpoint.to_string());
        }
        Ok(conns)
    }

    /// The number of stores of the cluster (asked once, from the first endpoint that
    /// answers: the endpoints are raced, see [`Client::first_status`]).
    pub async fn stores(&self) -> Result<u32> {
        self.inner
            .stores
            .get_or_try_init(|| async { self.first_status().await.map(|(_, s)| s.stores) })
            .await
            .copied()
    }

    /// The status of the first device that answers: one endpoint is asked, and another
    /// each `hedge_after` while none has answered; a device silent for `attempt_timeout`
    /// is passed over for a while. Tried again, with backoff, within `retry_deadline`.
    pub async fn first_status(&self) -> Result<(String, proto::StatusResponse)> {
        use futures::stream::{FuturesUnordered, StreamExt};
        let o = &self.inner.opts;
        let deadline = Instant::now() + o.retry_deadline;
        let mut backoff = o.backoff_min;
        loop {
            let mut candidates = self.candidates(0, None, 0);
            candidates.reverse();
            let mut asks = FuturesUnordered::new();
            let mut last = Error::NoEndpoints;
            let ask = |ep: String| async move {
                let r = self.status_within(&ep, o.attempt_timeout).await;
                (ep, r)
            };
            loop {
                if asks.is_empty() {
                    match candidates.pop() {
                        Some(ep) => asks.push(ask(ep)),
                        None => break,
                    }
                }
                tokio::select! {
                    Some((ep, r)) = asks.next() => match r {
                        Ok(s) => return Ok((ep, s)),
                        Err(e) => {
                            if matches!(&e, Error::Rpc(s) if s.code() == tonic::Code::DeadlineExceeded) {
                                self.pass_over(&ep);
                            }
                            if matches!(&e, Error::Rpc(s) if tls::permanent_failure(s))
                                || matches!(e, Error::Unauthenticated(_) | Error::PermissionDenied(_))
                            {
                                // TLS or the token refused: no later attempt fares better.
                                return Err(e);
                            }
                            last = e;
                        }
                    },
                    _ = tokio::time::sleep(o.hedge_after), if !candidates.is_empty() => {
                        if let Some(ep) = candidates.pop() {
                            asks.push(ask(ep));
                        }
                    }
                }
            }
            if Instant::now() + backoff >= deadline {
                return Err(last);
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(o.backoff_max);
        }
    }

    /// The endpoints to try for `store`, best first: a redirect's hint, the remembered
    /// manager, then every endpoint starting at one picked by the store; endpoints that
    /// recently did not answer go last. `rotate` moves the starting endpoint on (after a
    /// redirect chain that led nowhere).
    pub(crate) fn candidates(
        &self,
        store: u32,
        hint: Option<String>,
        rotate: usize,
    ) -> Vec<String> {
        let eps = self.endpoints();
        let mut out: Vec<String> = Vec::with_capacity(eps.len() + 2);
        let route = self.inner.routes.lock().unwrap().get(&store).cloned();
        // With no manager remembered, the one the lookup service names comes next.
        let published = route.is_none().then(|| self.lookup_hint(store)).flatten();
        for e in hint.into_iter().chain(route).chain(published) {
            if !out.contains(&e) {
                out.push(e);
            }
        }
        let n = eps.len().max(1);
        for i in 0..eps.len() {
            let e = &eps[(store as usize + rotate + i) % n];
            if !out.contains(e) {
                out.push(e.clone());
            }
        }
        let now = Instant::now();
        let mut slow = self.inner.slow.lock().unwrap();
        slow.retain(|_, until| *until > now);
        // Stable: the order above is kept within each group.
        out.sort_by_key(|e| slow.contains_key(e));
        out
    }

    /// The manager endpoint of `store` as the lookup service publishes it
    /// (`/tenure/stores/<n>`, mapped to an endpoint through `/tenure/devices/<id>`), if
    /// known. A miss asks the lookup again in the background, at most once a second;
    /// until the answer arrives callers go on without it (redirects still work).
    pub fn published_manager(&self, store: u32) -> Option<String> {
        self.lookup_hint(store)
    }

    /// See [`Client::published_manager`].
    pub(crate) fn lookup_hint(&self, store: u32) -> Option<String> {
        let mut g = self.inner.lookup_hints.lock().unwrap();
        if let Some(e) = g.0.get(&store) {
            return Some(e.clone());
        }
        let now = Instant::now();
        if g.1
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            return None;
        }
        g.1 = Some(now);
        drop(g);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let weak = Arc::downgrade(&self.inner);
            rt.spawn(async move {
                let Some(inner) = weak.upgrade() else { return };
                let c = Client { inner };
                if let Ok(map) = c.published_managers().await {
                    c.inner.lookup_hints.lock().unwrap().0 = map;
                }
            });
        }
        None
    }

    /// `/tenure/stores/*` and `/tenure/devices/*` from the lookup leader, as store →
    /// endpoint.
    async fn published_managers(&self) -> Result<HashMap<u32, String>> {
        let entries = self.list("/tenure").await?;
        let mut addrs = HashMap::new();
        let mut managers = Vec::new();
        for e in &entries {
            let value = String::from_utf8_lossy(&e.value);
            if let Some(id) = e.key.strip_prefix("/tenure/devices/") {
                if let Ok(id) = id.parse::<u64>() {
                    addrs.insert(id, normalize(value.into_owned()));
                }
            } else if let Some(s) = e.key.strip_prefix("/tenure/stores/")
                && let Ok(s) = s.parse::<u32>()
                && let Some((mgr, _)) = tenure_core::device::parse_store_entry(&e.value)
            {
                managers.push((s, mgr.0));
            }
        }
        let known = self.endpoints();
        Ok(managers
            .into_iter()
            .filter_map(|(s, d)| Some((s, addrs.get(&d)?.clone())))
            .filter(|(_, e)| known.contains(e))
            .collect())
    }

    /// `endpoint` did not answer in time: try it last for a while.
    pub(crate) fn pass_over(&self, endpoint: &str) {
        if endpoint.is_empty() {
            return;
        }
        let until = Instant::now() + self.inner.opts.pass_over;
        debug!(%endpoint, "passed over: no answer in time");
        self.inner
            .slow
            .lock()
            .unwrap()
            .insert(endpoint.to_string(), until);
    }

    /// The session stream of `store` (started on first use).
    pub(crate) fn link(&self, store: u32) -> Arc<stream::Link> {
        let mut links = self.inner.links.lock().unwrap();
        links
            .entry(store)
            .or_insert_with(|| Arc::new(stream::Link::spawn(self, store)))
            .clone()
    }

    /// The deadline of a request that should be answered promptly.
    pub(crate) fn quick_deadline(&self) -> Instant {
        Instant::now() + self.inner.opts.retry_deadline
    }

    /// Write a test register in `store`.
    pub async fn write(&self, store: u32, key: u64, value: u64) -> Result<Version> {
        if self.inner.opts.transport == Transport::Stream {
            let req = proto::WriteRequest { store, key, value };
            let id = self.next_request_id();
            let deadline = Some(self.quick_deadline());
            return match self
                .link(store)
                .call(id, stream::Rq::Write(req), true, deadline)
                .await
            {
                Ok(stream::Ev::Written(w)) => {
                    let v = w.version.unwrap_or_default();
                    Ok(Version {
                        epoch: v.epoch,
                        seq: v.seq,
                    })
                }
                Ok(_) => Err(Error::Malformed),
                Err(e) => Err(self.gave_up(e)),
            };
        }
        self.routed(store, |mut c| async move {
            let r = c
                .write(proto::WriteRequest { store, key, value })
                .await?
                .into_inner();
            Ok(match r.result {
                Some(proto::write_response::Result::Ok(w)) => {
                    let v = w.version.unwrap_or_default();
                    Ok(Version {
                        epoch: v.epoch,
                        seq: v.seq,
                    })
                }
                Some(proto::write_response::Result::Error(e)) => Err(Error::from_proto(e)),
                None => Err(Error::Malformed),
            })
        })
        .await
    }

    /// Status of the device at `endpoint`.
    pub async fn status_of(&self, endpoint: &str) -> Result<proto::StatusResponse> {
        self.status_within(endpoint, self.inner.opts.attempt_timeout)
            .await
    }

    async fn status_within(
        &self,
        endpoint: &str,
        limit: Duration,
    ) -> Result<proto::StatusResponse> {
        let endpoint = normalize(endpoint.to_string());
        let mut c = self.channel(&endpoint)?;
        within(limit, "Status", c.status(proto::StatusRequest {})).await
    }

    /// Status of every known endpoint, in order (asked at once; each bounded by
    /// `attempt_timeout`).
    pub async fn status_all(&self) -> Vec<(String, Result<proto::StatusResponse>)> {
        self.ask_all(|e| async move { self.status_of(&e).await })
            .await
    }

    /// `ask` of every known endpoint, at once; the answers in endpoint order.
    pub(crate) async fn ask_all<T, Fut>(
        &self,
        ask: impl Fn(String) -> Fut,
    ) -> Vec<(String, Result<T>)>
    where
        Fut: Future<Output = Result<T>>,
    {
        let eps = self.endpoints();
        let answers = futures::future::join_all(eps.iter().cloned().map(ask)).await;
        eps.into_iter().zip(answers).collect()
    }

    /// A stream call's error as the routed path reports it: a deadline that passed is
    /// running out of retries.
    pub(crate) fn gave_up(&self, e: Error) -> Error {
        match e {
            Error::DeadlinePassed => Error::GaveUp {
                attempts: 0,
                elapsed: self.inner.opts.retry_deadline,
                last: Box::new(Error::DeadlinePassed),
            },
            e => e,
        }
    }

    /// Run one request against the manager of `store`: `call` issues the RPC on a channel
    /// and returns the protocol outcome; gRPC failures and retryable protocol errors move
    /// to the hinted or next endpoint, with backoff, within the configured bounds.
    pub async fn routed<T, F, Fut>(&self, store: u32, call: F) -> Result<T>
    where
        F: FnMut(TenureClient<Chan>) -> Fut,
        Fut: Future<Output = Result<Result<T>, tonic::Status>>,
    {
        let o = &self.inner.opts;
        let bounds = Bounds {
            per_call: o.request_timeout,
            deadline: Some(Instant::now() + o.retry_deadline),
            max_attempts: Some(o.max_attempts),
        };
        self.routed_with(store, bounds, call).await
    }

    /// [`Client::routed`] with explicit bounds. A call cut by `per_call` is retried on
    /// the same endpoint at once (a long wait continues); other failures move on.
    pub(crate) async fn routed_with<T, F, Fut>(
        &self,
        store: u32,
        bounds: Bounds,
        call: F,
    ) -> Result<T>
    where
        F: FnMut(TenureClient<Chan>) -> Fut,
        Fut: Future<Output = Result<Result<T>, tonic::Status>>,
    {
        self.routed_on(store, bounds, |c| c.tenure.clone(), call)
            .await
    }

    /// [`Client::routed_with`] on the object service of each endpoint's connection.
    pub(crate) async fn routed_objects<T, F, Fut>(
        &self,
        store: u32,
        bounds: Bounds,
        call: F,
    ) -> Result<T>
    where
        F: FnMut(proto::objects_client::ObjectsClient<Chan>) -> Fut,
        Fut: Future<Output = Result<Result<T>, tonic::Status>>,
    {
        self.routed_on(store, bounds, |c| c.objects.clone(), call)
            .await
    }

    /// [`Client::routed_with`] on the election service of each endpoint's connection.
    pub(crate) async fn routed_elections<T, F, Fut>(
        &self,
        store: u32,
        bounds: Bounds,
        call: F,
    ) -> Result<T>
    where
        F: FnMut(proto::elections_client::ElectionsClient<Chan>) -> Fut,
        Fut: Future<Output = Result<Result<T>, tonic::Status>>,
    {
        self.routed_on(store, bounds, |c| c.elections.clone(), call)
            .await
    }

    /// The election service's client on `endpoint`'s connection.
    pub(crate) fn elections_channel(
        &self,
        endpoint: &str,
    ) -> Result<proto::elections_client::ElectionsClient<Chan>> {
        self.conns(endpoint).map(|c| c.elections)
    }

    /// The routing loop of [`Client::routed_with`] over the service `pick` takes from an
    /// endpoint's connections.
    async fn routed_on<S, T, F, Fut>(
        &self,
        store: u32,
        bounds: Bounds,
        pick: impl Fn(&Conns) -> S,
        mut call: F,
    ) -> Result<T>
    where
        F: FnMut(S) -> Fut,
        Fut: Future<Output = Result<Result<T>, tonic::Status>>,
    {
        let started = Instant::now();
        let o = &self.inner.opts;
        let mut backoff = o.backoff_min;
        let mut attempts = 0u32;
        let mut target = self.route(store, 0);
        let mut rotate = 0usize;
        let mut redirects = Redirects::default();
        loop {
            attempts += 1;
            let client = pick(&self.conns(&target)?);
            let mut cut = false;
            let err = match tokio::time::timeout(bounds.per_call, call(client)).await {
                Ok(Ok(Ok(v))) => {
                    self.inner.routes.lock().unwrap().insert(store, target);
                    return Ok(v);
                }
                Ok(Ok(Err(e))) => e,
                Ok(Err(s)) => Error::from_status(s),
                Err(_) => {
                    cut = true;
                    Error::Rpc(Box::new(tonic::Status::deadline_exceeded(format!(
                        "no answer within {:?}",
                        bounds.per_call
                    ))))
                }
            };
            if !err.retryable() {
                return Err(err);
            }
            let out_of_time = bounds.deadline.is_some_and(|d| Instant::now() >= d);
            if bounds.max_attempts.is_some_and(|m| attempts >= m) || out_of_time {
                return Err(Error::GaveUp {
                    attempts,
                    elapsed: started.elapsed(),
                    last: Box::new(err),
                });
            }
            debug!(store, %target, "retrying: {err}");
            if let Error::NotManager { hint, .. } = &err
                && let Some(next) = redirects.follow(hint.as_deref(), &target)
            {
                // A redirect: follow it at once.
                target = next;
                continue;
            }
            match &err {
                // A long call cut by its own bound: the endpoint answered nothing wrong.
                _ if cut => continue,
                // The right device, busy: the same one again after the pause.
                Error::Overloaded(_) => {}
                _ => {
                    redirects.reset();
                    self.clear_route(store);
                    rotate += 1;
                    target = self.route(store, rotate);
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(o.backoff_max);
        }
    }

    /// The endpoint to try for `store`: the remembered manager, the one the lookup
    /// service names, or the endpoints in turn.
    fn route(&self, store: u32, rotate: usize) -> String {
        if rotate == 0 {
            let route = self.inner.routes.lock().unwrap().get(&store).cloned();
            if let Some(e) = route.or_else(|| self.lookup_hint(store)) {
                return e;
            }
        }
        let eps = self.inner.endpoints.lock().unwrap();
        eps[(store as usize + rotate) % eps.len()].clone()
    }

    /// Remember that `endpoint` answered for `store` as its manager.
    pub(crate) fn set_route(&self, store: u32, endpoint: &str) {
        self.inner
            .routes
            .lock()
            .unwrap()
            .insert(store, endpoint.to_string());
    }

    /// Forget the manager of `store` (and the lookup's word on it, which may be as old).
    pub(crate) fn clear_route(&self, store: u32) {
        self.inner.routes.lock().unwrap().remove(&store);
        self.inner.lookup_hints.lock().unwrap().0.remove(&store);
    }
}

/// One RPC bounded by `limit`: its answer, its error, or "no answer to `what` in time".
pub(crate) async fn within<T>(
    limit: Duration,
    what: &str,
    rpc: impl Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T> {
    match tokio::time::timeout(limit, rpc).await {
        Ok(r) => r.map(|r| r.into_inner()).map_err(Error::from_status),
        Err(_) => Err(Error::Rpc(Box::new(tonic::Status::deadline_exceeded(
            format!("no answer to {what} in time"),
        )))),
    }
}

/// Redirect hints followed in a row before the endpoints are tried in turn instead.
pub(crate) const MAX_REDIRECTS: u32 = 3;

/// The redirects a routing loop (a request's, or a keep-alive task's) has followed in a
/// row: stale hints can point at each other, so a chain longer than [`MAX_REDIRECTS`] is
/// left for the endpoints in turn.
#[derive(Debug, Default)]
pub(crate) struct Redirects(u32);

impl Redirects {
    /// Where to go after `target` answered `NotManager` with `hint`: the hint, unless
    /// there is none, it names `target` itself, or the chain is already as long as allowed
    /// (then `None`: try the endpoints in turn, and the count starts over).
    pub(crate) fn follow(&mut self, hint: Option<&str>, target: &str) -> Option<String> {
        match hint.map(|h| normalize(h.to_string())) {
            Some(h) if h != target && self.0 < MAX_REDIRECTS => {
                self.0 += 1;
                Some(h)
            }
            _ => {
                self.0 = 0;
                None
            }
        }
    }

    /// An answer or another failure ends the chain.
    pub(crate) fn reset(&mut self) {
        self.0 = 0;
    }
}

/// Retry bounds of one routed request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    /// One attempt.
    pub per_call: Duration,
    /// No new attempt after this.
    pub deadline: Option<Instant>,
    /// Most attempts.
    pub max_attempts: Option<u32>,
}

/// A gRPC channel to one device (`host:port` or `http(s)://host:port`), connected on first
/// use, with the client's connector and `opts`'s TLS settings: for calling the generated
/// `proto` clients directly.
pub fn channel(endpoint: &str, opts: &ClientOptions) -> Result<Chan> {
    let endpoint = normalize(endpoint.to_string());
    if opts.tls.is_none() && endpoint.starts_with("https://") {
        return Err(Error::TlsNotConfigured(endpoint));
    }
    lazy_channel(&endpoint, opts)
}

/// A lazily connected channel to `endpoint` with the client's connector (its TLS
/// settings), for the services that keep a channel of their own.
pub(crate) fn lazy_channel(endpoint: &str, opts: &ClientOptions) -> Result<Chan> {
    let ch = Endpoint::from_shared(endpoint.to_string())
        .map_err(|_| Error::InvalidEndpoint(endpoint.to_string()))?
        .connect_timeout(opts.connect_timeout)
        .connect_with_connector_lazy(conn::Connector::new(opts.tls.as_ref()));
    Ok(Chan::new(ch, Credentials::of(opts)?))
}

pub(crate) fn normalize(e: String) -> String {
    if e.starts_with("http://") || e.starts_with("https://") {
        e
    } else {
        format!("http://{e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_read_as_what_failed_and_what_to_do() {
        assert_eq!(Error::SessionExpired(0).to_string(), "the session expired");
        assert_eq!(Error::SessionExpired(7).to_string(), "session 7 expired");
        let refused = tonic::Status::unavailable("tcp connect error");
        let text = Error::from_status(refused).to_string();
        assert!(
            text.starts_with("cannot connect (tcp connect error)"),
            "{text}"
        );
        assert!(text.contains("tenure cluster status"), "{text}");
        let late = Error::from_status(tonic::Status::deadline_exceeded("store 3"));
        assert_eq!(late.to_string(), "no answer in time: store 3");
        let other = Error::from_status(tonic::Status::internal("boom"));
        assert_eq!(other.to_string(), "request failed (Internal): boom");
        // Authorization's answers are typed and final.
        let denied = Error::from_status(tonic::Status::permission_denied("token \"t\" has no"));
        assert!(matches!(&denied, Error::PermissionDenied(m) if m.contains("\"t\"")));
        assert!(!denied.retryable() && !denied.transient_rpc());
        let anon = Error::from_status(tonic::Status::unauthenticated("no token given"));
        assert!(matches!(anon, Error::Unauthenticated(_)));
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_names_the_cause_not_the_transport_dump() {
        let c = Client::with_options(
            vec!["127.0.0.1:1".to_string()],
            ClientOptions {
                retry_deadline: std::time::Duration::from_millis(300),
                ..Default::default()
            },
        )
        .unwrap();
        let e = c.status_of("127.0.0.1:1").await.unwrap_err().to_string();
        assert!(e.starts_with("cannot connect ("), "{e}");
        assert!(!e.contains("tonic::transport"), "{e}");
    }

    #[test]
    fn endpoints_are_normalized_and_required() {
        assert!(matches!(
            Client::new(Vec::<String>::new()),
            Err(Error::NoEndpoints)
        ));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let c = Client::new(["127.0.0.1:1", "http://127.0.0.1:2"]).unwrap();
            assert_eq!(
                c.endpoints(),
                vec!["http://127.0.0.1:1", "http://127.0.0.1:2"]
            );
        });
    }

    #[test]
    fn redirect_chains_are_cut_after_three_hops() {
        let mut r = Redirects::default();
        assert_eq!(
            r.follow(Some("a:1"), "http://a:1"),
            None,
            "a hint to itself"
        );
        for (hint, from) in [
            ("b:1", "http://a:1"),
            ("a:1", "http://b:1"),
            ("b:1", "http://a:1"),
        ] {
            assert_eq!(r.follow(Some(hint), from), Some(format!("http://{hint}")));
        }
        assert_eq!(r.follow(Some("a:1"), "http://b:1"), None, "a fourth hop");
        // The count started over: the next chain is followed again.
        assert_eq!(
            r.follow(Some("a:1"), "http://b:1"),
            Some("http://a:1".into())
        );
        r.reset();
        assert_eq!(r.follow(None, "http://b:1"), None);
    }

    #[test]
    fn protocol_errors_map_to_typed_errors() {
        let e = Error::from_proto(proto::Error {
            kind: Some(Kind::NotManager(proto::NotManager {
                store: 3,
                hint_device: Some(2),
                hint_endpoint: "127.0.0.1:9".into(),
            })),
            message: String::new(),
        });
        assert!(
            matches!(e, Error::NotManager { store: 3, hint: Some(ref h) } if h == "127.0.0.1:9")
        );
        assert!(e.retryable());
        let e = Error::from_proto(proto::Error {
            kind: Some(Kind::UnknownStore(proto::UnknownStore { store: 99 })),
            message: String::new(),
        });
        assert!(matches!(e, Error::UnknownStore(99)));
        assert!(!e.retryable());
    }

    #[test]
    fn an_overload_answer_is_retried_and_a_message_too_large_is_not() {
        let mut s = tonic::Status::resource_exhausted("device d1 is overloaded");
        s.metadata_mut()
            .insert(OVERLOADED, tonic::metadata::MetadataValue::from_static("1"));
        let e = Error::from_status(s);
        assert!(matches!(e, Error::Overloaded(_)) && e.retryable(), "{e}");
        let e = Error::from_status(tonic::Status::resource_exhausted("message too large"));
        assert!(!matches!(e, Error::Overloaded(_)) && !e.retryable(), "{e}");
    }

    #[test]
    fn unreachable_endpoints_give_up_within_bounds() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            // Port 1 on loopback: nothing listens, connections are refused at once.
            let opts = ClientOptions {
                max_attempts: 4,
                retry_deadline: Duration::from_secs(5),
                transport: Transport::Unary,
                ..Default::default()
            };
            let c = Client::with_options(["127.0.0.1:1"], opts).unwrap();
            let err = c.write(0, 1, 1).await.unwrap_err();
            assert!(matches!(err, Error::GaveUp { attempts: 4, .. }), "{err}");
            // The session stream keeps trying until the retry deadline.
            let opts = ClientOptions {
                retry_deadline: Duration::from_millis(500),
                ..Default::default()
            };
            let c = Client::with_options(["127.0.0.1:1"], opts).unwrap();
            let started = Instant::now();
            let err = c.write(0, 1, 1).await.unwrap_err();
            assert!(matches!(err, Error::GaveUp { .. }), "{err}");
            assert!(started.elapsed() < Duration::from_secs(2));
        });
    }
}
