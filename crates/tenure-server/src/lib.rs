//! # tenure-server
//!
//! The tokio shell that hosts one device's sans-IO core (`tenure-core`) as a real server
//! process (DESIGN §2, §8, §10):
//!
//! - [`storage`]: durable state on redb, one durable commit per group of persists;
//! - [`wire`] and [`transport`]: one ordered TCP connection per device pair, versioned
//!   length-delimited frames, handshake, reconnect with backoff;
//! - [`driver`]: the task that owns the [`tenure_core::Device`] and enforces "durable before
//!   sent" for every output, with group commits pipelined on a storage thread;
//! - [`grpc`]: the client API of `proto/tenure.proto`;
//! - [`lookup`]: the lookup service's API (`service Lookup`, seed 003);
//! - [`objects`]: the object service's API (`service Objects`, seed 001);
//! - [`cluster_api`]: cluster membership's API (`service Cluster`) and the driver's part in it;
//! - [`snapshots`]: consistent snapshots' files and API (`service Snapshots`, seed 002);
//! - [`elections`]: the election service's API (`service Elections`, DESIGN §6);
//! - [`tls`] and [`certs`]: TLS on the client port, mutual TLS on the peer port, and the
//!   local CA that `tenure cluster up` makes;
//! - [`auth`]: authorization — named tokens and client certificates with permissions per
//!   path prefix; [`http_auth`]: the same for the metrics address;
//! - [`config`]: the TOML configuration;
//! - [`status_page`]: the metrics address, with Prometheus metrics, the status page and
//!   its JSON; logs go through `tracing`; [`telemetry`]: the list of every exported
//!   metric, and the process's own.
//!
//! [`start`] binds the configured addresses and runs a device until
//! [`ServerHandle::shutdown`] (or a fatal storage error).

pub mod admission;
pub mod auth;
pub mod certs;
pub mod clock;
pub mod cluster_api;
pub mod config;
mod core_thread;
pub mod driver;
pub mod elections;
pub mod fuzz;
pub mod grpc;
pub mod http_auth;
pub mod lookup;
pub mod object_watch;
pub mod objects;
pub mod snapshots;
pub mod status_page;
pub mod storage;
pub mod stream;
pub mod telemetry;
pub mod tls;
pub mod transport;
pub mod wal;
pub mod wire;

use crate::config::ServerConfig;
use crate::storage::Storage;
use crate::transport::TransportConfig;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tenure_client::proto::cluster_server::ClusterServer;
use tenure_client::proto::elections_server::ElectionsServer;
use tenure_client::proto::lookup_server::LookupServer;
use tenure_client::proto::objects_server::ObjectsServer;
use tenure_client::proto::snapshots_server::SnapshotsServer;
use tenure_client::proto::tenure_server::TenureServer;
use tenure_core::ids::DeviceId;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

pub use config::ConfigError;

/// Largest client request accepted (a request is a few names and ids; anything larger
/// is refused with `OUT_OF_RANGE` before it reaches the core).
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;
/// Largest message decoded at all. A session stream's request between
/// [`MAX_REQUEST_BYTES`] and this gets a typed `TooLarge` error and the stream stays up;
/// a larger frame ends the stream (OUT_OF_RANGE), as it ends a unary call.
pub const MAX_FRAME_BYTES: usize = 1024 * 1024;
/// Largest answer sent (a lock listing is truncated by its `limit` well below this).
pub const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// The environment variable that overrides the wire versions a device speaks
/// ([`wire::Versions`]), for upgrade tests.
pub const WIRE_VERSIONS_ENV: &str = "TENURE_WIRE_VERSIONS";

/// Server failures.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Bad configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Storage failed.
    #[error(transparent)]
    Storage(#[from] storage::StorageError),
    /// The driver stopped on a fatal error.
    #[error(transparent)]
    Driver(#[from] driver::DriverError),
    /// The `[tls]` files could not be loaded.
    #[error("TLS: {0}")]
    Tls(#[from] tenure_client::tls::TlsError),
    /// A snapshot file (a restored device's replay) could not be read.
    #[error(transparent)]
    Snapshot(#[from] snapshots::SnapshotError),
    /// Binding a listener failed.
    #[error("binding {addr}: {source}")]
    Bind {
        /// Address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The gRPC server failed.
    #[error("gRPC server: {0}")]
    Grpc(#[from] tonic::transport::Error),
    /// A server task panicked.
    #[error("server task failed: {0}")]
    Task(String),
    /// The clock's origin could not be kept in the data directory.
    #[error("keeping the clock's origin in {path}: {source}")]
    Clock {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// A running device.
#[derive(Debug)]
pub struct ServerHandle {
    /// Where the peer transport listens.
    pub peer_addr: SocketAddr,
    /// Where the gRPC API listens.
    pub client_addr: SocketAddr,
    /// Where the metrics and the status page are served (none: not configured, or the
    /// address could not be bound).
    pub metrics_addr: Option<SocketAddr>,
    stop: CancellationToken,
    driver: JoinHandle<Result<(), ServerError>>,
    auth: auth::Auth,
}

impl ServerHandle {
    /// Stop serving and wait for the device to stop.
    pub async fn shutdown(self) -> Result<(), ServerError> {
        self.stop.cancel();
        self.wait().await
    }

    /// Wait until the device stops (a fatal error, or shutdown from elsewhere).
    pub async fn wait(self) -> Result<(), ServerError> {
        let r = self
            .driver
            .await
            .map_err(|e| ServerError::Task(e.to_string()))?;
        self.stop.cancel();
        r
    }

    /// A token that stops the server when cancelled.
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Re-read the `[auth]` section of the configuration file `path` and authorize every
    /// call by it from now on (what SIGHUP does; see [`auth`]). A file that does not
    /// parse, or whose section is not valid, changes nothing. Either outcome is logged.
    pub fn reload_auth(&self, path: &Path) -> Result<(), ConfigError> {
        reload_auth(&self.auth, path)
    }

    /// [`ServerHandle::reload_auth`] from `path` on every SIGHUP, until the device stops.
    /// Call it on the runtime that runs the device.
    pub fn reload_auth_on_hangup(&self, path: PathBuf) -> std::io::Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangups = signal(SignalKind::hangup())?;
        let (auth, stop) = (self.auth.clone(), self.stop.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    s = hangups.recv() => if s.is_none() { return },
                }
                let _ = reload_auth(&auth, &path);
            }
        });
        Ok(())
    }
}

fn reload_auth(auth: &auth::Auth, path: &Path) -> Result<(), ConfigError> {
    let r = ServerConfig::load(path).and_then(|c| auth.reload(&c.auth));
    let path = path.display();
    match (&r, auth.summary()) {
        (Ok(()), Some((tokens, certs))) => {
            info!(%path, tokens, certs, "authorization reloaded")
        }
        (Ok(()), None) => info!(%path, "authorization reloaded: off"),
        (Err(e), _) => warn!(%path, "authorization not reloaded, the rules stay as they were: {e}"),
    }
    r
}

/// Bind the configured addresses and start the device.
pub async fn start(cfg: ServerConfig) -> Result<ServerHandle, ServerError> {
    let peer = TcpListener::bind(cfg.peer_listen)
        .await
        .map_err(|source| ServerError::Bind {
            addr: cfg.peer_listen,
            source,
        })?;
    let client = TcpListener::bind(cfg.client_listen)
        .await
        .map_err(|source| ServerError::Bind {
            addr: cfg.client_listen,
            source,
        })?;
    start_with_listeners(cfg, peer, client).await
}

/// Start the device on listeners the caller bound (tests bind port 0 first).
pub async fn start_with_listeners(
    cfg: ServerConfig,
    peer_listener: TcpListener,
    client_listener: TcpListener,
) -> Result<ServerHandle, ServerError> {
    cfg.validate()?;
    let me = DeviceId(cfg.id);
    let peer_addr = peer_listener
        .local_addr()
        .map_err(|source| ServerError::Bind {
            addr: cfg.peer_listen,
            source,
        })?;
    let client_addr = client_listener
        .local_addr()
        .map_err(|source| ServerError::Bind {
            addr: cfg.client_listen,
            source,
        })?;
    let tls = cfg.tls.as_ref().map(tls::DeviceTls::load).transpose()?;
    let auth = auth::Auth::new(&cfg.auth)?;
    // A metrics address that cannot be bound costs the device its metrics, not its service.
    let metrics_listener = match cfg.metrics_listen {
        Some(addr) => match TcpListener::bind(addr).await {
            Ok(l) => {
                status_page::recorder();
                Some(l)
            }
            Err(e) => {
                warn!(%addr, "metrics endpoint not started: {e}");
                None
            }
        },
        None => None,
    };

    // The device's clock reads on from the origin its data directory keeps (a restart
    // on the same host boot neither extends nor cuts what it persisted).
    let origin = clock::init(&cfg.data_dir).map_err(|source| ServerError::Clock {
        path: cfg.data_dir.join("clock"),
        source,
    })?;
    info!(device = %me, origin_us = origin, "clock origin");
    let dir = cfg.data_dir.clone();
    let (storage, state) = tokio::task::spawn_blocking(move || Storage::open(&dir, me))
        .await
        .map_err(|e| ServerError::Task(e.to_string()))??;
    info!(device = %me, path = %storage.path().display(), chunks = state.chunks.len(), "storage opened");
    if let Some(f) = storage.upgraded_from() {
        info!(
            device = %me,
            "data directory upgraded in place from format {f} to format {}",
            storage::FORMAT_VERSION
        );
    }

    let stop = CancellationToken::new();
    let (inbox_tx, inbox_rx) = mpsc::channel(16 * 1024);
    let (calls_tx, calls_rx) = mpsc::channel(16 * 1024);
    // Keep-alives and Status go before the queued requests (sessions had expired
    // while their keep-alives waited behind thousands of acquires).
    let (urgent_tx, urgent_rx) = mpsc::channel(4 * 1024);
    let peers: Vec<(DeviceId, SocketAddr)> = cfg
        .peers
        .iter()
        .map(|p| (DeviceId(p.id), p.peer_addr))
        .collect();
    let mut tcfg = TransportConfig::new(me, peers);
    tcfg.max_frame_bytes = cfg.max_frame_bytes;
    tcfg.tls = tls.as_ref().map(tls::DeviceTls::peer);
    // A stand-in for a device of another build in upgrade tests: the wire versions it
    // claims to speak (`N` or `OLDEST-NEWEST`; this build writes each the same way).
    if let Ok(v) = std::env::var(WIRE_VERSIONS_ENV) {
        tcfg.versions = wire::Versions::parse(&v)
            .map_err(|e| ConfigError::Invalid(format!("{WIRE_VERSIONS_ENV}: {e}")))?;
        warn!(versions = %tcfg.versions, "speaking the wire versions {WIRE_VERSIONS_ENV} names");
    }

    let seed = cfg.rng_seed.unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        t ^ cfg.id.rotate_left(32)
    });
    let (events, _) = tokio::sync::broadcast::channel(1024);
    let sub_routes = driver::routes::SubRoutes::default();
    let watch_routes = driver::routes::WatchRoutes::default();
    let object_settings = cfg.objects.clone();
    let max_value_bytes = cfg.lookup.max_value_bytes;
    let snapshot_book = snapshots::Book::open(&cfg.data_dir, cfg.snapshot.keep);
    let replay = snapshots::take_replay(&cfg.data_dir)?;
    let device_config = cfg.device_config();
    let snapshot_wait = 2 * device_config.snapshot.timeout + Duration::from_secs(5);

    let endpoints: HashMap<DeviceId, SocketAddr> = cfg
        .peers
        .iter()
        .map(|p| (DeviceId(p.id), p.client_addr))
        .collect();
    let admission = admission::Admission::new(cfg.max_client_requests, Some(me))
        .with_stream_wait(Duration::from_millis(cfg.stream_admission_wait_ms));
    let api = grpc::Api::new(
        calls_tx.clone(),
        endpoints,
        Duration::from_millis(cfg.request_timeout_ms),
        cfg.cluster.stores,
        events.clone(),
    )
    .with_device(me)
    .with_urgent(urgent_tx)
    .with_watches(watch_routes.clone())
    .with_auth(auth.clone())
    .with_admission(admission.clone())
    .with_data_dir(cfg.data_dir.clone());
    let peer_listener = peer_listener
        .into_std()
        .map_err(|source| ServerError::Bind {
            addr: peer_addr,
            source,
        })?;
    let driver = core_thread::spawn(core_thread::CoreParts {
        device_config,
        storage,
        state,
        seed,
        transport: tcfg,
        peer_listener,
        peer_addr,
        inbox_tx,
        inbox_rx,
        calls_rx,
        urgent_rx,
        events,
        sub_routes: sub_routes.clone(),
        watch_routes,
        snapshot_book: snapshot_book.clone(),
        replay,
        endpoints: api.endpoints().clone(),
        stop: stop.clone(),
    })
    .await?;
    let cluster_api = cluster_api::ClusterApi::new(
        calls_tx.clone(),
        Duration::from_millis(cfg.request_timeout_ms),
    )
    .with_auth(auth.clone());
    let objects_api = objects::ObjectsApi::new(api.clone(), object_settings.clone());
    let snapshots_api =
        snapshots::SnapshotsApi::new(calls_tx.clone(), snapshot_book, me, snapshot_wait)
            .with_auth(auth.clone());
    let metrics_addr = metrics_listener.and_then(|l| {
        let addr = l.local_addr().ok()?;
        let page = status_page::StatusPage::new(
            calls_tx.clone(),
            snapshots_api.clone(),
            me,
            peer_addr,
            client_addr,
            addr,
            &cfg.peers,
            Duration::from_millis(cfg.request_timeout_ms),
        );
        let access = http_auth::Access {
            auth: auth.clone(),
            metrics_public: cfg.metrics.public,
        };
        status_page::serve(l, page, access, stop.clone());
        Some(addr)
    });
    let elections_api = elections::ElectionsApi::new(api.clone());
    let lookup_api = lookup::LookupApi::new(
        calls_tx,
        sub_routes,
        Duration::from_millis(cfg.request_timeout_ms),
    )
    .with_auth(auth.clone())
    .with_admission(admission);
    let grpc_stop = stop.clone();
    tokio::spawn(async move {
        let incoming = tls::client_incoming(
            client_listener,
            tls.map(|t| t.client_port),
            grpc_stop.clone(),
        );
        let service = TenureServer::new(api)
            .max_decoding_message_size(MAX_FRAME_BYTES)
            .max_encoding_message_size(MAX_ANSWER_BYTES);
        let lookup_service = LookupServer::new(lookup_api)
            .max_decoding_message_size(lookup::max_request_bytes(max_value_bytes))
            .max_encoding_message_size(MAX_ANSWER_BYTES);
        let objects_service = ObjectsServer::new(objects_api)
            .max_decoding_message_size(objects::max_request_bytes(&object_settings))
            .max_encoding_message_size(MAX_ANSWER_BYTES);
        let r = tonic::transport::Server::builder()
            .add_service(service)
            .add_service(lookup_service)
            .add_service(objects_service)
            .add_service(ClusterServer::new(cluster_api))
            .add_service(SnapshotsServer::new(snapshots_api))
            .add_service(
                ElectionsServer::new(elections_api).max_decoding_message_size(MAX_FRAME_BYTES),
            )
            .serve_with_incoming_shutdown(incoming, grpc_stop.clone().cancelled_owned())
            .await;
        if let Err(e) = r {
            error!("gRPC server stopped: {e}");
            grpc_stop.cancel();
        }
    });

    info!(device = %me, %peer_addr, %client_addr, tls = cfg.tls.is_some(), auth = auth.enabled(), "device serving");
    Ok(ServerHandle {
        peer_addr,
        client_addr,
        metrics_addr,
        stop,
        driver,
        auth,
    })
}
