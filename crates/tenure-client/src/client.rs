//! The [`Client`]: its shared state, its connections to the endpoints, status calls,
//! and the channels it dials.

use crate::error::Error;
use crate::options::{ClientOptions, Transport};
use crate::proto::tenure_client::TenureClient;
use crate::routing::within;
use crate::{Chan, Credentials, Result, conn, locks, proto, stream, tls};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::transport::Endpoint;

/// A write's version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Epoch of the manager that ordered it.
    pub epoch: u64,
    /// Sequence number in the epoch.
    pub seq: u64,
}

/// Largest lookup answer decoded (the server's bound on what it sends).
pub(crate) const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// The service clients on one endpoint's connection.
#[derive(Clone, Debug)]
pub(crate) struct Conns {
    pub(crate) tenure: TenureClient<Chan>,
    lookup: proto::lookup_client::LookupClient<Chan>,
    pub(crate) objects: proto::objects_client::ObjectsClient<Chan>,
    pub(crate) elections: proto::elections_client::ElectionsClient<Chan>,
}

/// A Tenure client. Cheap to clone: clones share connections, routes and sessions. Call
/// its methods inside a tokio runtime.
#[derive(Clone, Debug)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) opts: ClientOptions,
    pub(crate) endpoints: Mutex<Vec<String>>,
    /// Connections by endpoint; shared with the clients made by [`Client::new_sharing`].
    pub(crate) channels: Arc<Mutex<HashMap<String, Conns>>>,
    /// The endpoint that last answered a lookup request.
    pub(crate) lookup_route: Mutex<Option<String>>,
    pub(crate) routes: Mutex<HashMap<u32, String>>,
    /// Each store's manager endpoint as the lookup service last published it (DESIGN
    /// §3), and when that was asked (see [`Client::lookup_hint`]).
    pub(crate) lookup_hints: Mutex<(HashMap<u32, String>, Option<Instant>)>,
    pub(crate) stores: tokio::sync::OnceCell<u32>,
    pub(crate) sessions: tokio::sync::Mutex<HashMap<u32, Arc<locks::Session>>>,
    pub(crate) next_request: AtomicU64,
    /// The session stream of each store ([`Transport::Stream`]).
    pub(crate) links: Mutex<HashMap<u32, Arc<stream::Link>>>,
    /// Endpoints that did not answer an attempt, and until when they are tried last.
    pub(crate) slow: Arc<Mutex<HashMap<String, Instant>>>,
    /// Origin of the microsecond clock the deadline rule is computed on.
    pub(crate) origin: Instant,
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

    pub(crate) fn channel(&self, endpoint: &str) -> Result<TenureClient<Chan>> {
        self.conns(endpoint).map(|c| c.tenure)
    }

    /// The lookup service's client on `endpoint`'s connection.
    pub(crate) fn lookup_channel(
        &self,
        endpoint: &str,
    ) -> Result<proto::lookup_client::LookupClient<Chan>> {
        self.conns(endpoint).map(|c| c.lookup)
    }

    pub(crate) fn conns(&self, endpoint: &str) -> Result<Conns> {
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
