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

mod conn;
pub mod locks;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint};
use tracing::debug;

pub use locks::{FencingToken, Holder, LockGuard, LockMode, LockState, Loss, SessionState, Wait};

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
    #[error("session {0} expired")]
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
    /// A gRPC failure that is not one of the above.
    #[error("rpc failed: {0}")]
    Rpc(Box<tonic::Status>),
    /// The server answered with an empty `oneof`.
    #[error("malformed answer from the server")]
    Malformed,
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
            None => Error::Malformed,
        }
    }

    fn from_status(s: tonic::Status) -> Error {
        match s.code() {
            tonic::Code::Unimplemented => Error::Unimplemented(s.message().to_string()),
            _ => Error::Rpc(Box::new(s)),
        }
    }

    /// Whether another endpoint (or a later try) may succeed.
    pub fn retryable(&self) -> bool {
        match self {
            Error::NotManager { .. } | Error::Unavailable { .. } => true,
            Error::Rpc(s) => matches!(
                s.code(),
                tonic::Code::Unavailable
                    | tonic::Code::DeadlineExceeded
                    | tonic::Code::Unknown
                    | tonic::Code::Cancelled
                    | tonic::Code::Aborted
            ),
            _ => false,
        }
    }
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

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
        }
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
    channels: Arc<Mutex<HashMap<String, TenureClient<Channel>>>>,
    routes: Mutex<HashMap<u32, String>>,
    stores: tokio::sync::OnceCell<u32>,
    sessions: tokio::sync::Mutex<HashMap<u32, Arc<locks::Session>>>,
    next_request: AtomicU64,
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
        let c = Client::on_channels(opts, Vec::new(), Arc::default());
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
        )
    }

    /// A client with no sessions or routes yet, on these connections.
    fn on_channels(
        opts: ClientOptions,
        endpoints: Vec<String>,
        channels: Arc<Mutex<HashMap<String, TenureClient<Channel>>>>,
    ) -> Client {
        Client {
            inner: Arc::new(Inner {
                opts,
                endpoints: Mutex::new(endpoints),
                channels,
                routes: Mutex::new(HashMap::new()),
                stores: tokio::sync::OnceCell::new(),
                sessions: tokio::sync::Mutex::new(HashMap::new()),
                next_request: AtomicU64::new(1),
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

    fn channel(&self, endpoint: &str) -> Result<TenureClient<Channel>> {
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
            .connect_with_connector_lazy(conn::Connector::new());
        let client = TenureClient::new(ch);
        self.inner
            .channels
            .lock()
            .unwrap()
            .insert(endpoint.to_string(), client.clone());
        let mut eps = self.inner.endpoints.lock().unwrap();
        if !eps.iter().any(|e| e == endpoint) {
            eps.push(endpoint.to_string());
        }
        Ok(client)
    }

    /// The number of stores of the cluster (asked once, from any endpoint).
    pub async fn stores(&self) -> Result<u32> {
        self.inner
            .stores
            .get_or_try_init(|| async {
                let mut last = Error::NoEndpoints;
                for e in self.endpoints() {
                    match self.status_of(&e).await {
                        Ok(s) => return Ok(s.stores),
                        Err(err) => last = err,
                    }
                }
                Err(last)
            })
            .await
            .copied()
    }

    /// Write a test register in `store`.
    pub async fn write(&self, store: u32, key: u64, value: u64) -> Result<Version> {
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
        let endpoint = normalize(endpoint.to_string());
        let mut c = self.channel(&endpoint)?;
        match tokio::time::timeout(
            self.inner.opts.request_timeout,
            c.status(proto::StatusRequest {}),
        )
        .await
        {
            Ok(r) => r.map(|r| r.into_inner()).map_err(Error::from_status),
            Err(_) => Err(Error::Rpc(Box::new(tonic::Status::deadline_exceeded(
                "no answer to Status in time",
            )))),
        }
    }

    /// Status of every known endpoint, in order.
    pub async fn status_all(&self) -> Vec<(String, Result<proto::StatusResponse>)> {
        let eps = self.endpoints();
        let mut out = Vec::with_capacity(eps.len());
        for e in eps {
            let r = self.status_of(&e).await;
            out.push((e, r));
        }
        out
    }

    /// Run one request against the manager of `store`: `call` issues the RPC on a channel
    /// and returns the protocol outcome; gRPC failures and retryable protocol errors move
    /// to the hinted or next endpoint, with backoff, within the configured bounds.
    pub async fn routed<T, F, Fut>(&self, store: u32, call: F) -> Result<T>
    where
        F: FnMut(TenureClient<Channel>) -> Fut,
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
        mut call: F,
    ) -> Result<T>
    where
        F: FnMut(TenureClient<Channel>) -> Fut,
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
            let client = self.channel(&target)?;
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
                _ => {
                    redirects.reset();
                    self.inner.routes.lock().unwrap().remove(&store);
                    rotate += 1;
                    target = self.route(store, rotate);
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(o.backoff_max);
        }
    }

    /// The endpoint to try for `store`: the remembered manager, or the endpoints in turn.
    fn route(&self, store: u32, rotate: usize) -> String {
        if rotate == 0
            && let Some(e) = self.inner.routes.lock().unwrap().get(&store)
        {
            return e.clone();
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

    /// Forget the manager of `store`.
    pub(crate) fn clear_route(&self, store: u32) {
        self.inner.routes.lock().unwrap().remove(&store);
    }
}

/// Redirect hints followed in a row before the endpoints are tried in turn instead.
const MAX_REDIRECTS: u32 = 3;

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
                ..Default::default()
            };
            let c = Client::with_options(["127.0.0.1:1"], opts).unwrap();
            let err = c.write(0, 1, 1).await.unwrap_err();
            assert!(matches!(err, Error::GaveUp { attempts: 4, .. }), "{err}");
        });
    }
}
