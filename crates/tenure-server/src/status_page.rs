//! The metrics address (DESIGN §8): Prometheus metrics, a status page for people and the
//! same data as JSON for scripts, served by axum.
//!
//! - `/metrics`: the Prometheus text of the process's recorder
//!   (metrics-exporter-prometheus, installed once per process);
//! - `/`: the status page, server-rendered HTML with inline CSS and no script, which
//!   reloads itself every [`REFRESH_SECS`] seconds;
//! - `/status.json`: what the page shows, as JSON ([`Page`]).
//!
//! The page shows what this device knows, taken from the driver through the same
//! `Call::Status` the gRPC `Status` uses (with the detail the page needs), the
//! membership record `service Cluster` answers with, and the snapshot book
//! `service Snapshots` lists. Locks and sessions live at their store's manager, so a
//! device lists those of the stores it manages; for the other stores it shows the
//! manager and epoch its chunks know, and the page links to the other devices' pages
//! (their metrics addresses, from the `peers` of the configuration).
//!
//! With authorization on, every route needs a token with `read` on `/` (`/metrics` not
//! when `[metrics] public = true`): see [`crate::http_auth`].
//!
//! Every string that comes from a client (lock names, session ids, snapshot errors) is
//! HTML-escaped ([`esc`]).

use crate::cluster_api::MembersView;
use crate::config::PeerConfig;
use crate::driver::{Call, DETAIL_LOCKS_MAX, DETAIL_SESSIONS_MAX, StatusDetail, StatusSnapshot};
use crate::snapshots::SnapshotsApi;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tenure_client::proto;
use tenure_client::proto::snapshots_server::Snapshots;
use tenure_core::election::members::MemberState;
use tenure_core::ids::DeviceId;
use tenure_core::layout::{ChunkState, MgrState};
use tenure_core::lockctl::LockMode;
use tenure_core::lookup::NodeState;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

/// How often the page reloads itself (seconds).
pub const REFRESH_SECS: u32 = 2;

/// The lock every election `NAME` is held as (`NAME/.election`, see [`crate::elections`]).
const ELECTION_SUFFIX: &str = "/.election";

/// The process's Prometheus recorder: installed by the first device that serves a
/// metrics address, before its driver starts (what is recorded before the recorder is
/// installed is lost); every device of the process renders it (none: another recorder
/// was installed first).
pub fn recorder() -> Option<&'static PrometheusHandle> {
    static RECORDER: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    RECORDER
        .get_or_init(|| {
            let buckets = [
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                1.0,
            ];
            let built = metrics_exporter_prometheus::PrometheusBuilder::new()
                .set_buckets(&buckets)
                .and_then(|b| b.install_recorder());
            match built {
                Ok(handle) => {
                    // The recorder drains its histograms only when asked to (the exporter's
                    // own listener did this with a task of its own).
                    let h = handle.clone();
                    let spawned = std::thread::Builder::new()
                        .name("tenure-metrics-upkeep".into())
                        .spawn(move || {
                            loop {
                                std::thread::sleep(Duration::from_secs(5));
                                h.run_upkeep();
                            }
                        });
                    if let Err(e) = spawned {
                        warn!("metrics upkeep not started: {e}");
                    }
                    Some(handle)
                }
                Err(e) => {
                    warn!("metrics recorder not installed: {e}");
                    None
                }
            }
        })
        .as_ref()
}

/// What the page needs to gather its data.
#[derive(Clone, Debug)]
pub struct StatusPage {
    calls: mpsc::Sender<Call>,
    snapshots: SnapshotsApi,
    me: DeviceId,
    peer_addr: SocketAddr,
    client_addr: SocketAddr,
    metrics_addr: SocketAddr,
    /// The configured devices' addresses.
    peers: HashMap<DeviceId, PeerConfig>,
    timeout: Duration,
    started: std::time::Instant,
}

impl StatusPage {
    /// The page of device `me`, which asks its driver through `calls` (answers within
    /// `timeout`) and lists snapshots from `snapshots`; `peers` are the configured
    /// devices (their client addresses and status pages).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        calls: mpsc::Sender<Call>,
        snapshots: SnapshotsApi,
        me: DeviceId,
        peer_addr: SocketAddr,
        client_addr: SocketAddr,
        metrics_addr: SocketAddr,
        peers: &[PeerConfig],
        timeout: Duration,
    ) -> StatusPage {
        StatusPage {
            calls,
            snapshots,
            me,
            peer_addr,
            client_addr,
            metrics_addr,
            peers: peers.iter().map(|p| (DeviceId(p.id), p.clone())).collect(),
            timeout,
            started: std::time::Instant::now(),
        }
    }

    /// The driver's status answer, with the detail.
    async fn snapshot(&self) -> Result<StatusSnapshot, String> {
        let (tx, rx) = oneshot::channel();
        (self.calls.send(Call::Status {
            detail: true,
            reply: tx,
        }))
        .await
        .map_err(|_| "the device is shutting down".to_string())?;
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(_)) => Err("the device is shutting down".into()),
            Err(_) => Err(format!(
                "no answer from the device within {:?}",
                self.timeout
            )),
        }
    }

    /// Everything the page shows.
    pub async fn gather(&self) -> Result<Page, String> {
        let snap = self.snapshot().await?;
        let snapshots = (self.snapshots)
            .list(tonic::Request::new(proto::ListSnapshotsRequest {}))
            .await
            .map(|r| r.into_inner().snapshots)
            .unwrap_or_default();
        Ok(self.page(&snap, snapshots))
    }

    fn page(&self, s: &StatusSnapshot, snapshots: Vec<proto::SnapshotEntry>) -> Page {
        let detail = s.detail.as_deref();
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Page {
            device: DeviceView {
                id: self.me.0,
                version: env!("CARGO_PKG_VERSION"),
                peer_addr: self.peer_addr.to_string(),
                client_addr: self.client_addr.to_string(),
                metrics_addr: self.metrics_addr.to_string(),
                uptime_secs: self.started.elapsed().as_secs(),
            },
            generated_unix_ms: now_ms,
            stores_total: s.stores,
            coordinator: s.coordinator.map(|t| TermView {
                device: t.leader.0,
                term: t.n,
            }),
            acting_coordinator: s.acting_coordinator,
            membership_version: detail.map_or(0, |d| d.members.members.version.n),
            devices: self.devices(s, detail),
            stores: stores(s, detail),
            chunks: (s.chunks.iter())
                .map(|c| ChunkRow {
                    id: c.id.to_string(),
                    store: c.store.0,
                    state: format!("{:?}", c.state),
                    epoch: c.epoch.0,
                    lease_manager: c.lease_mgr.map(|d| d.0),
                })
                .collect(),
            sessions: sessions(detail),
            locks: locks(detail),
            lookup: detail.map(|d| LookupView {
                state: format!("{:?}", d.lookup.state),
                leader: d.lookup.leader.map(|l| l.0),
                entries: d.lookup.entries,
                subscriptions: d.lookup.subscriptions,
                up: d.lookup.up.iter().map(|(d, _)| d.0).collect(),
            }),
            snapshots: (snapshots.into_iter())
                .map(|e| SnapshotRow {
                    id: e.id,
                    status: e.status,
                    initiated_here: e.initiated_here,
                    devices: e.devices,
                    unix_ms: e.unix_ms,
                    part_bytes: e.part.map(|p| p.bytes),
                    error: e.error,
                })
                .collect(),
        }
    }

    fn devices(&self, s: &StatusSnapshot, detail: Option<&StatusDetail>) -> Vec<DeviceRow> {
        let up: Vec<DeviceId> = detail
            .map(|d| d.lookup.up.iter().map(|(d, _)| *d).collect())
            .unwrap_or_default();
        let lookup_leader = detail.and_then(|d| d.lookup.leader);
        let row = |id: DeviceId, state: &str, client_addr: String| DeviceRow {
            id: id.0,
            state: state.to_string(),
            me: id == self.me,
            coordinator: s.coordinator.is_some_and(|t| t.leader == id),
            lookup_leader: lookup_leader == Some(id),
            seen_by_lookup: id == self.me || up.contains(&id),
            client_addr,
            status_page: if id == self.me {
                Some(self.metrics_addr.to_string())
            } else {
                (self.peers.get(&id))
                    .and_then(|p| p.metrics_addr)
                    .map(|a| a.to_string())
            },
        };
        match detail {
            Some(StatusDetail {
                members: MembersView { members, .. },
                ..
            }) => {
                let mut rows: Vec<DeviceRow> = (members.devices.iter())
                    .map(|(id, info)| {
                        let state = match info.state {
                            MemberState::Active => "active",
                            MemberState::Retiring => "retiring",
                        };
                        // The record leaves the bootstrap devices' addresses empty.
                        let addr = match (info.client_addr.as_str(), *id == self.me) {
                            (_, true) => self.client_addr.to_string(),
                            ("", false) => (self.peers.get(id))
                                .map(|p| p.client_addr.to_string())
                                .unwrap_or_default(),
                            (a, false) => a.to_string(),
                        };
                        row(*id, state, addr)
                    })
                    .collect();
                rows.extend(
                    members
                        .retired
                        .iter()
                        .map(|d| row(*d, "retired", String::new())),
                );
                rows
            }
            None => (s.devices.iter())
                .map(|d| row(*d, "configured", String::new()))
                .collect(),
        }
    }
}

/// Every store: its manager and epoch as this device knows them (its manager role, or the
/// lease its chunk holds), and the counts of the stores it manages.
fn stores(s: &StatusSnapshot, detail: Option<&StatusDetail>) -> Vec<StoreRow> {
    let mut rows: BTreeMap<u32, StoreRow> = BTreeMap::new();
    for c in &s.chunks {
        let r = rows
            .entry(c.store.0)
            .or_insert_with(|| StoreRow::new(c.store.0));
        if c.epoch.0 >= r.epoch {
            r.epoch = c.epoch.0;
            r.manager = c.lease_mgr.map(|d| d.0);
            r.source = "chunk".into();
        }
        r.chunks_here += 1;
    }
    for m in &s.managers {
        let r = rows
            .entry(m.store.0)
            .or_insert_with(|| StoreRow::new(m.store.0));
        r.role = format!("{:?}", m.state);
        r.layout = m.metadata.chunks.iter().map(|c| c.to_string()).collect();
        r.failed = m.failed.iter().map(|c| c.to_string()).collect();
        if m.state == MgrState::Manager {
            r.manager = Some(s.device.0);
            r.epoch = m.epoch.0;
            r.source = "manager".into();
            if let Some(d) = detail.and_then(|d| d.stores.get(&m.store)) {
                r.sessions = Some(d.sessions_total);
                r.locks = Some(d.locks_total);
                r.objects = Some(d.objects);
                r.object_bytes = Some(d.object_bytes);
            }
        }
    }
    (0..s.stores)
        .map(|n| rows.remove(&n).unwrap_or_else(|| StoreRow::new(n)))
        .collect()
}

fn sessions(detail: Option<&StatusDetail>) -> Vec<SessionRow> {
    let Some(d) = detail else {
        return Vec::new();
    };
    (d.stores.iter())
        .flat_map(|(store, t)| {
            t.sessions.iter().map(|s| SessionRow {
                store: store.0,
                id: s.id.0,
                ttl_ms: s.ttl.as_millis() as u64,
                expires_in_ms: s.expires_in.map(|d| d.as_millis() as u64),
                locks_held: s.holds,
            })
        })
        .collect()
}

fn mode(m: LockMode) -> &'static str {
    match m {
        LockMode::Shared => "shared",
        LockMode::Exclusive => "exclusive",
    }
}

fn locks(detail: Option<&StatusDetail>) -> Vec<LockRow> {
    let Some(d) = detail else {
        return Vec::new();
    };
    (d.stores.iter())
        .flat_map(|(store, t)| {
            t.locks.iter().map(|l| LockRow {
                store: store.0,
                name: l.name.as_str().to_string(),
                holders: (l.holders.iter())
                    .map(|h| HolderRow {
                        session: h.session.0,
                        mode: mode(h.mode),
                        token: format!("{}.{}", h.token.epoch.0, h.token.seq),
                    })
                    .collect(),
                waiters: (l.waiters.iter())
                    .map(|w| WaiterRow {
                        session: w.session.0,
                        mode: mode(w.mode),
                    })
                    .collect(),
            })
        })
        .collect()
}

/// What the page shows; `/status.json` is this.
#[derive(Clone, Debug, Serialize)]
pub struct Page {
    /// This device.
    pub device: DeviceView,
    /// When the page was made (Unix time, milliseconds).
    pub generated_unix_ms: u64,
    /// Number of stores of the cluster.
    pub stores_total: u32,
    /// The coordinator this device follows (or is).
    pub coordinator: Option<TermView>,
    /// Whether this device acts as the coordinator.
    pub acting_coordinator: bool,
    /// Version of the membership record.
    pub membership_version: u64,
    /// The cluster's devices (the membership record, retired ones last).
    pub devices: Vec<DeviceRow>,
    /// Every store.
    pub stores: Vec<StoreRow>,
    /// The chunks held here.
    pub chunks: Vec<ChunkRow>,
    /// The open sessions of the stores managed here.
    pub sessions: Vec<SessionRow>,
    /// The locks with holders or waiters of the stores managed here.
    pub locks: Vec<LockRow>,
    /// The lookup node.
    pub lookup: Option<LookupView>,
    /// The snapshots this device took part in.
    pub snapshots: Vec<SnapshotRow>,
}

/// This device.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceView {
    /// Its id.
    pub id: u64,
    /// The server's version.
    pub version: &'static str,
    /// Peer transport address.
    pub peer_addr: String,
    /// Client API address.
    pub client_addr: String,
    /// Metrics and status page address.
    pub metrics_addr: String,
    /// Seconds since the status page started.
    pub uptime_secs: u64,
}

/// A coordinator and its term.
#[derive(Clone, Debug, Serialize)]
pub struct TermView {
    /// The coordinator.
    pub device: u64,
    /// Its term.
    pub term: u64,
}

/// One device of the cluster.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceRow {
    /// Its id.
    pub id: u64,
    /// active, retiring or retired.
    pub state: String,
    /// This device.
    pub me: bool,
    /// The coordinator this device follows.
    pub coordinator: bool,
    /// The lookup leader this device's lookup node knows.
    pub lookup_leader: bool,
    /// This device's lookup node hears it (the soft-state store lists it up).
    pub seen_by_lookup: bool,
    /// Its client address, if known.
    pub client_addr: String,
    /// Where its status page is, if known.
    pub status_page: Option<String>,
}

/// One store.
#[derive(Clone, Debug, Serialize)]
pub struct StoreRow {
    /// The store.
    pub store: u32,
    /// Its manager, as known here.
    pub manager: Option<u64>,
    /// Its epoch, as known here.
    pub epoch: u64,
    /// Where that comes from: "manager" (this device manages it), "chunk" (a chunk
    /// here holds a lease of that manager), or "" (nothing here knows).
    pub source: String,
    /// This device's manager role, if it has one.
    pub role: String,
    /// Chunks of the store held here.
    pub chunks_here: usize,
    /// Its chunks (managed here).
    pub layout: Vec<String>,
    /// Chunks believed failed (managed here).
    pub failed: Vec<String>,
    /// Open sessions (managed here).
    pub sessions: Option<usize>,
    /// Locks held or waited for (managed here).
    pub locks: Option<usize>,
    /// Active objects (managed here).
    pub objects: Option<u64>,
    /// Their bytes (managed here).
    pub object_bytes: Option<u64>,
}

impl StoreRow {
    fn new(store: u32) -> StoreRow {
        StoreRow {
            store,
            manager: None,
            epoch: 0,
            source: String::new(),
            role: String::new(),
            chunks_here: 0,
            layout: Vec::new(),
            failed: Vec::new(),
            sessions: None,
            locks: None,
            objects: None,
            object_bytes: None,
        }
    }
}

/// One chunk held here.
#[derive(Clone, Debug, Serialize)]
pub struct ChunkRow {
    /// `c<device>.<serial>`.
    pub id: String,
    /// Its store.
    pub store: u32,
    /// Its state (seed 000 §4.2).
    pub state: String,
    /// Its epoch.
    pub epoch: u64,
    /// The manager whose lease it holds.
    pub lease_manager: Option<u64>,
}

/// One open session.
#[derive(Clone, Debug, Serialize)]
pub struct SessionRow {
    /// Its store.
    pub store: u32,
    /// Its id.
    pub id: u64,
    /// Time to live between keep-alives (ms).
    pub ttl_ms: u64,
    /// Time left before its deadline (ms).
    pub expires_in_ms: Option<u64>,
    /// Locks it holds.
    pub locks_held: usize,
}

/// One lock with holders or waiters.
#[derive(Clone, Debug, Serialize)]
pub struct LockRow {
    /// Its store.
    pub store: u32,
    /// Its name.
    pub name: String,
    /// Who holds it.
    pub holders: Vec<HolderRow>,
    /// Its queue, oldest first.
    pub waiters: Vec<WaiterRow>,
}

/// One holder of a lock.
#[derive(Clone, Debug, Serialize)]
pub struct HolderRow {
    /// The session.
    pub session: u64,
    /// shared or exclusive.
    pub mode: &'static str,
    /// The fencing token, `epoch.seq`.
    pub token: String,
}

/// One waiter for a lock.
#[derive(Clone, Debug, Serialize)]
pub struct WaiterRow {
    /// The session.
    pub session: u64,
    /// shared or exclusive.
    pub mode: &'static str,
}

/// The lookup node.
#[derive(Clone, Debug, Serialize)]
pub struct LookupView {
    /// Passive, Joining, WarmingUp, Active or Leader.
    pub state: String,
    /// The leader it knows.
    pub leader: Option<u64>,
    /// Live entries it keeps.
    pub entries: usize,
    /// Subscriptions it keeps.
    pub subscriptions: usize,
    /// Devices its soft-state store shows up.
    pub up: Vec<u64>,
}

/// One snapshot.
#[derive(Clone, Debug, Serialize)]
pub struct SnapshotRow {
    /// Its id.
    pub id: String,
    /// running, complete, failed, recorded or recording.
    pub status: String,
    /// This device started it.
    pub initiated_here: bool,
    /// The devices of a complete snapshot started here.
    pub devices: Vec<u64>,
    /// When it started or was recorded here (Unix ms).
    pub unix_ms: u64,
    /// Size of this device's part, when on disk.
    pub part_bytes: Option<u64>,
    /// Why it failed.
    pub error: String,
}

/// Bind nothing: serve the metrics address on `listener` until `stop`.
/// Who may read it is `access`'s to say.
pub fn serve(
    listener: TcpListener,
    page: StatusPage,
    access: crate::http_auth::Access,
    stop: CancellationToken,
) {
    let addr = page.metrics_addr;
    let app = Router::new()
        .route("/", get(html))
        .route("/status.json", get(json))
        .route("/metrics", get(prometheus))
        .with_state(Arc::new(page))
        .layer(axum::middleware::from_fn_with_state(
            access,
            crate::http_auth::guard,
        ));
    tokio::spawn(async move {
        info!(%addr, "metrics and status page listening");
        let r = axum::serve(listener, app)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
        if let Err(e) = r {
            error!(%addr, "metrics endpoint stopped: {e}");
        }
    });
}

async fn prometheus() -> Response {
    match recorder() {
        Some(h) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            h.render(),
        )
            .into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "no Prometheus recorder in this process\n",
        )
            .into_response(),
    }
}

async fn json(State(page): State<Arc<StatusPage>>) -> Response {
    match page.gather().await {
        Ok(p) => match serde_json::to_string_pretty(&p) {
            Ok(text) => ([(header::CONTENT_TYPE, "application/json")], text).into_response(),
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
        },
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e).into_response(),
    }
}

async fn html(State(page): State<Arc<StatusPage>>) -> Response {
    let body = match page.gather().await {
        Ok(p) => render(&p),
        Err(e) => render_error(page.me, &e),
    };
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// `s` with the characters HTML gives a meaning escaped, for text and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const CSS: &str = r#"
:root { --ok:#1a7f37; --ok-bg:#dafbe1; --warn:#9a6700; --warn-bg:#fff8c5; --bad:#cf222e;
  --bad-bg:#ffebe9; --info:#0969da; --info-bg:#ddf4ff; --muted:#57606a; --line:#d0d7de; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
  color:#1f2328; background:#f6f8fa; }
header { background:#24292f; color:#fff; padding:12px 24px; display:flex; flex-wrap:wrap;
  align-items:baseline; gap:8px 24px; }
header h1 { font-size:20px; margin:0; font-weight:600; }
header .meta { color:#d0d7de; font-size:13px; }
header code { color:#fff; }
nav { padding:6px 24px; background:#32383f; font-size:13px; color:#d0d7de; }
nav a { color:#9cd0ff; margin-right:14px; text-decoration:none; }
nav a.here { color:#fff; font-weight:600; }
main { padding:16px 24px 24px; display:grid; grid-template-columns:repeat(auto-fit,minmax(480px,1fr));
  gap:16px; }
section { background:#fff; border:1px solid var(--line); border-radius:6px; padding:0 0 4px;
  overflow:auto; }
section.wide { grid-column:1/-1; }
section h2 { font-size:15px; margin:0; padding:10px 14px; border-bottom:1px solid var(--line);
  background:#f6f8fa; border-radius:6px 6px 0 0; }
section h2 small { color:var(--muted); font-weight:400; margin-left:6px; }
.cards { display:flex; flex-wrap:wrap; gap:12px; grid-column:1/-1; }
.card { background:#fff; border:1px solid var(--line); border-radius:6px; padding:8px 16px;
  min-width:130px; }
.card b { display:block; font-size:22px; }
.card span { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.04em; }
table { border-collapse:collapse; width:100%; }
th, td { text-align:left; padding:5px 14px; border-bottom:1px solid #eaeef2; vertical-align:top;
  white-space:nowrap; }
th { color:var(--muted); font-weight:600; font-size:12px; text-transform:uppercase; }
tr:last-child td { border-bottom:none; }
td.name { font-family:ui-monospace,SFMono-Regular,Menlo,monospace; white-space:normal;
  word-break:break-all; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
.pill { display:inline-block; padding:0 8px; border-radius:10px; font-size:12px; font-weight:600;
  margin-right:4px; }
.ok { color:var(--ok); background:var(--ok-bg); }
.warn { color:var(--warn); background:var(--warn-bg); }
.bad { color:var(--bad); background:var(--bad-bg); }
.info { color:var(--info); background:var(--info-bg); }
.muted { color:var(--muted); }
.pill.muted { background:#eaeef2; }
td.wrap { white-space:normal; }
td.mono { font-family:ui-monospace,SFMono-Regular,Menlo,monospace; }
p.empty { color:var(--muted); padding:6px 14px; margin:0; }
footer { color:var(--muted); font-size:12px; padding:0 24px 16px; }
footer a { color:var(--info); }
"#;

fn pill(class: &str, text: &str) -> String {
    format!(r#"<span class="pill {class}">{}</span>"#, esc(text))
}

fn mgr_class(state: &str) -> &'static str {
    match state {
        "Manager" => "ok",
        "" => "muted",
        _ => "warn",
    }
}

fn chunk_class(state: &str) -> &'static str {
    match state {
        s if s == format!("{:?}", ChunkState::RegularLease) => "ok",
        s if s == format!("{:?}", ChunkState::NoLease)
            || s == format!("{:?}", ChunkState::GarbageCollect) =>
        {
            "bad"
        }
        _ => "warn",
    }
}

fn lookup_class(state: &str) -> &'static str {
    match state {
        s if s == format!("{:?}", NodeState::Leader) => "ok",
        s if s == format!("{:?}", NodeState::Active) => "info",
        _ => "muted",
    }
}

fn snapshot_class(status: &str) -> &'static str {
    match status {
        "complete" | "recorded" => "ok",
        "failed" => "bad",
        _ => "warn",
    }
}

fn device_link(p: &Page, id: u64) -> String {
    match p
        .devices
        .iter()
        .find(|d| d.id == id)
        .and_then(|d| d.status_page.as_deref())
    {
        Some(addr) if id != p.device.id => {
            format!(r#"<a href="http://{}/">d{id}</a>"#, esc(addr))
        }
        _ => format!("d{id}"),
    }
}

fn duration_ms(ms: u64) -> String {
    match ms {
        0..1000 => format!("{ms} ms"),
        1000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{} min {} s", ms / 60_000, (ms / 1000) % 60),
        _ => format!("{} h {} min", ms / 3_600_000, (ms / 60_000) % 60),
    }
}

fn bytes(n: u64) -> String {
    match n {
        0..1024 => format!("{n} B"),
        1024..1_048_576 => format!("{:.1} KiB", n as f64 / 1024.0),
        _ => format!("{:.1} MiB", n as f64 / 1_048_576.0),
    }
}

/// How long before `now_ms` the moment `ms` was (both Unix ms).
fn ago(now_ms: u64, ms: u64) -> String {
    if ms == 0 {
        return "—".into();
    }
    match now_ms.saturating_sub(ms) {
        0..1000 => "just now".into(),
        d => format!("{} ago", duration_ms(d / 1000 * 1000)),
    }
}

fn unix_time(ms: u64) -> String {
    // UTC, from the civil-from-days algorithm (no calendar crate needed for one column).
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

fn head(title: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECS}\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>{CSS}</style></head><body>\n",
        esc(title)
    )
}

fn render_error(me: DeviceId, why: &str) -> String {
    let mut h = head(&format!("Tenure {me}: no answer"));
    let _ = writeln!(
        h,
        "<header><h1>Tenure · device {me}</h1></header><main><section class=\"wide\">\
         <h2>No status</h2><p class=\"empty\">{}</p></section></main></body></html>",
        esc(why)
    );
    h
}

/// The status page of `p`.
pub fn render(p: &Page) -> String {
    let me = p.device.id;
    let mut h = head(&format!("Tenure d{me} status"));
    // Header: who this is.
    let mut roles = String::new();
    if p.acting_coordinator {
        roles.push_str(&pill("ok", "coordinator"));
    }
    if let Some(l) = &p.lookup {
        roles.push_str(&pill(
            lookup_class(&l.state),
            &format!("lookup {}", l.state),
        ));
    }
    let _ = writeln!(
        h,
        "<header><h1>Tenure · device d{me}</h1>{roles}<span class=\"meta\">version {} · client \
         <code>{}</code> · peer <code>{}</code> · metrics <code>{}</code> · up {} · {}</span>\
         </header>",
        esc(p.device.version),
        esc(&p.device.client_addr),
        esc(&p.device.peer_addr),
        esc(&p.device.metrics_addr),
        duration_ms(p.device.uptime_secs * 1000),
        unix_time(p.generated_unix_ms),
    );
    // Links to every device's page.
    h.push_str("<nav>devices:");
    for d in &p.devices {
        match (&d.status_page, d.me) {
            (_, true) => {
                let _ = write!(h, r#" <a class="here" href="/">d{}</a>"#, d.id);
            }
            (Some(addr), false) => {
                let _ = write!(h, r#" <a href="http://{}/">d{}</a>"#, esc(addr), d.id);
            }
            (None, false) => {
                let _ = write!(h, r#" <span class="muted">d{}</span>"#, d.id);
            }
        }
    }
    h.push_str("</nav>\n<main>\n");
    cards(&mut h, p);
    devices_section(&mut h, p);
    lookup_section(&mut h, p);
    locks_section(&mut h, p);
    stores_section(&mut h, p);
    sessions_section(&mut h, p);
    elections_section(&mut h, p);
    snapshots_section(&mut h, p);
    chunks_section(&mut h, p);
    let _ = write!(
        h,
        "</main>\n<footer>Locks and sessions are those of the stores this device manages; \
         every other store's are on its manager's page. This page reloads every \
         {REFRESH_SECS} s · <a href=\"/status.json\">status.json</a> · \
         <a href=\"/metrics\">metrics</a></footer>\n</body></html>\n"
    );
    h
}

fn cards(h: &mut String, p: &Page) {
    let managed = p.stores.iter().filter(|s| s.source == "manager").count();
    let held: usize = (p.locks.iter()).filter(|l| !l.holders.is_empty()).count();
    let objects: u64 = p.stores.iter().filter_map(|s| s.objects).sum();
    let coordinator = match &p.coordinator {
        Some(t) => format!("d{} <small>term {}</small>", t.device, t.term),
        None => "none".into(),
    };
    let alive = p.devices.iter().filter(|d| d.seen_by_lookup).count();
    let members = p.devices.iter().filter(|d| d.state != "retired").count();
    h.push_str("<div class=\"cards\">");
    for (value, label) in [
        (format!("{alive} / {members}"), "devices up"),
        (coordinator, "coordinator"),
        (
            format!("{managed} / {}", p.stores_total),
            "stores managed here",
        ),
        (p.sessions.len().to_string(), "sessions here"),
        (held.to_string(), "locks held here"),
        (objects.to_string(), "objects here"),
        (p.snapshots.len().to_string(), "snapshots"),
    ] {
        let _ = write!(
            h,
            "<div class=\"card\"><b>{value}</b><span>{label}</span></div>"
        );
    }
    h.push_str("</div>\n");
}

fn devices_section(h: &mut String, p: &Page) {
    let _ = write!(
        h,
        "<section><h2>Devices<small>membership version {}</small></h2><table><tr><th>device</th>\
         <th>state</th><th>roles</th><th>client address</th></tr>",
        p.membership_version
    );
    for d in &p.devices {
        let member = match d.state.as_str() {
            "active" => pill("ok", "active"),
            "retiring" => pill("warn", "retiring"),
            other => pill("muted", other),
        };
        let heard = if d.seen_by_lookup {
            pill("ok", "up")
        } else {
            pill("bad", "not heard")
        };
        let mut roles = String::new();
        if d.me {
            roles.push_str(&pill("info", "this device"));
        }
        if d.coordinator {
            let term = p.coordinator.as_ref().map_or(0, |t| t.term);
            roles.push_str(&pill("ok", &format!("coordinator (term {term})")));
        }
        if d.lookup_leader {
            roles.push_str(&pill("ok", "lookup leader"));
        }
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{member}{heard}</td><td class=\"wrap\">{roles}</td><td class=\"mono\">{}</td></tr>",
            device_link(p, d.id),
            esc(&d.client_addr)
        );
    }
    h.push_str("</table></section>\n");
}

fn stores_section(h: &mut String, p: &Page) {
    let _ = write!(
        h,
        "<section class=\"wide\"><h2>Stores<small>{} in all; manager and epoch as this device knows them</small>\
         </h2><table><tr><th>store</th><th>manager</th><th class=\"num\">epoch</th><th>here</th>\
         <th class=\"num\">sessions</th><th class=\"num\">locks</th><th class=\"num\">objects</th>\
         <th>chunks</th></tr>",
        p.stores_total
    );
    for s in &p.stores {
        let manager = match s.manager {
            Some(m) => device_link(p, m),
            None => pill("bad", "unknown"),
        };
        let here = match (s.role.as_str(), s.chunks_here) {
            ("", 0) => String::from("<span class=\"muted\">—</span>"),
            ("", _) => pill("muted", "chunk"),
            (role, _) => pill(mgr_class(role), role),
        };
        let count = |v: Option<usize>| v.map_or(String::from("—"), |n| n.to_string());
        let objects = match (s.objects, s.object_bytes) {
            (Some(n), Some(b)) if n > 0 => format!("{n} ({})", bytes(b)),
            (Some(n), _) => n.to_string(),
            _ => "—".into(),
        };
        let mut chunks = esc(&s.layout.join(" "));
        if !s.failed.is_empty() {
            chunks.push(' ');
            chunks.push_str(&pill("bad", &format!("failed {}", s.failed.join(" "))));
        }
        let _ = write!(
            h,
            "<tr><td>s{}</td><td>{manager}</td><td class=\"num\">{}</td><td>{here}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{objects}</td>\
             <td class=\"name\">{chunks}</td></tr>",
            s.store,
            s.epoch,
            count(s.sessions),
            count(s.locks),
        );
    }
    h.push_str("</table></section>\n");
}

fn locks_section(h: &mut String, p: &Page) {
    let locks: Vec<&LockRow> = (p.locks.iter())
        .filter(|l| !l.name.ends_with(ELECTION_SUFFIX))
        .collect();
    let _ = write!(
        h,
        "<section class=\"wide\"><h2>Locks<small>{} held or waited for, in the stores managed \
         here{}</small></h2>",
        locks.len(),
        cut(
            p.locks.len(),
            p.stores.iter().filter_map(|s| s.locks).sum(),
            DETAIL_LOCKS_MAX
        )
    );
    if locks.is_empty() {
        h.push_str("<p class=\"empty\">No lock is held or waited for here.</p></section>\n");
        return;
    }
    h.push_str(
        "<table><tr><th>lock</th><th>store</th><th>holders (session · mode · fencing token)</th>\
         <th>queue (oldest first)</th></tr>",
    );
    for l in locks {
        let holders = if l.holders.is_empty() {
            pill("muted", "free")
        } else {
            (l.holders.iter())
                .map(|x| {
                    format!(
                        "{} session {} · token {}",
                        pill(if x.mode == "exclusive" { "bad" } else { "info" }, x.mode),
                        x.session,
                        esc(&x.token)
                    )
                })
                .collect::<Vec<_>>()
                .join("<br>")
        };
        let queue = if l.waiters.is_empty() {
            String::from("<span class=\"muted\">—</span>")
        } else {
            (l.waiters.iter().enumerate())
                .map(|(i, w)| format!("{}. session {} {}", i + 1, w.session, pill("warn", w.mode)))
                .collect::<Vec<_>>()
                .join("<br>")
        };
        let _ = write!(
            h,
            "<tr><td class=\"name\">{}</td><td>s{}</td><td>{holders}</td><td>{queue}</td></tr>",
            esc(&l.name),
            l.store
        );
    }
    h.push_str("</table></section>\n");
}

fn elections_section(h: &mut String, p: &Page) {
    let elections: Vec<&LockRow> = (p.locks.iter())
        .filter(|l| l.name.ends_with(ELECTION_SUFFIX))
        .collect();
    if elections.is_empty() {
        return;
    }
    h.push_str(
        "<section><h2>Elections<small>in the stores managed here</small></h2><table><tr>\
         <th>election</th><th>leader (session · token)</th><th class=\"num\">candidates</th></tr>",
    );
    for l in elections {
        let name = &l.name[..l.name.len() - ELECTION_SUFFIX.len()];
        let leader = match l.holders.first() {
            Some(x) => format!("session {} · token {}", x.session, esc(&x.token)),
            None => pill("warn", "none"),
        };
        let _ = write!(
            h,
            "<tr><td class=\"name\">{}</td><td>{leader}</td><td class=\"num\">{}</td></tr>",
            esc(name),
            l.waiters.len()
        );
    }
    h.push_str("</table></section>\n");
}

/// A note when a list is cut: `listed` of `total` rows, at most `max` per store.
fn cut(listed: usize, total: usize, max: usize) -> String {
    if listed >= total {
        return String::new();
    }
    format!(" (the first {max} of each store: {listed} of {total})")
}

fn sessions_section(h: &mut String, p: &Page) {
    let _ = write!(
        h,
        "<section><h2>Sessions<small>{} open in the stores managed here{}</small></h2>",
        p.sessions.len(),
        cut(
            p.sessions.len(),
            p.stores.iter().filter_map(|s| s.sessions).sum(),
            DETAIL_SESSIONS_MAX
        )
    );
    if p.sessions.is_empty() {
        h.push_str("<p class=\"empty\">No open session here.</p></section>\n");
        return;
    }
    h.push_str(
        "<table><tr><th>session</th><th>store</th><th class=\"num\">TTL</th>\
         <th class=\"num\">expires in</th><th class=\"num\">locks held</th></tr>",
    );
    for s in &p.sessions {
        let expires = match s.expires_in_ms {
            Some(0) => pill("bad", "expiring"),
            Some(ms) if ms < s.ttl_ms / 3 => pill("warn", &duration_ms(ms)),
            Some(ms) => duration_ms(ms),
            None => "—".into(),
        };
        let _ = write!(
            h,
            "<tr><td class=\"name\">{}</td><td>s{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{expires}</td><td class=\"num\">{}</td></tr>",
            s.id,
            s.store,
            duration_ms(s.ttl_ms),
            s.locks_held
        );
    }
    h.push_str("</table></section>\n");
}

fn lookup_section(h: &mut String, p: &Page) {
    let Some(l) = &p.lookup else {
        return;
    };
    let leader = match l.leader {
        Some(d) => device_link(p, d),
        None => pill("bad", "none"),
    };
    let up: Vec<String> = l.up.iter().map(|d| device_link(p, *d)).collect();
    let _ = writeln!(
        h,
        "<section><h2>Lookup node<small>seed 003</small></h2><table>\
         <tr><th>state</th><td>{}</td></tr><tr><th>leader</th><td>{leader}</td></tr>\
         <tr><th>live entries</th><td>{}</td></tr><tr><th>subscriptions</th><td>{}</td></tr>\
         <tr><th>nodes up</th><td>{}</td></tr></table></section>",
        pill(lookup_class(&l.state), &l.state),
        l.entries,
        l.subscriptions,
        up.join(" ")
    );
}

fn snapshots_section(h: &mut String, p: &Page) {
    let _ = write!(
        h,
        "<section><h2>Snapshots<small>{} this device took part in</small></h2>",
        p.snapshots.len()
    );
    if p.snapshots.is_empty() {
        h.push_str("<p class=\"empty\">No snapshot yet.</p></section>\n");
        return;
    }
    h.push_str(
        "<table><tr><th>snapshot</th><th>status</th><th>when</th><th>devices</th>\
         <th class=\"num\">part</th></tr>",
    );
    for s in p.snapshots.iter().rev() {
        let mut status = pill(snapshot_class(&s.status), &s.status);
        if s.initiated_here {
            status.push_str(&pill("info", "started here"));
        }
        if !s.error.is_empty() {
            let _ = write!(status, " <span class=\"muted\">{}</span>", esc(&s.error));
        }
        let devices: Vec<String> = s.devices.iter().map(|d| format!("d{d}")).collect();
        let _ = write!(
            h,
            "<tr><td class=\"mono\">{}</td><td>{status}</td><td>{}</td><td>{}</td>\
             <td class=\"num\">{}</td></tr>",
            esc(&s.id),
            ago(p.generated_unix_ms, s.unix_ms),
            devices.join(" "),
            s.part_bytes.map_or(String::from("—"), bytes)
        );
    }
    h.push_str("</table></section>\n");
}

fn chunks_section(h: &mut String, p: &Page) {
    let _ = write!(
        h,
        "<section><h2>Chunks<small>{} held here</small></h2>",
        p.chunks.len()
    );
    if p.chunks.is_empty() {
        h.push_str("<p class=\"empty\">No chunk here.</p></section>\n");
        return;
    }
    h.push_str(
        "<table><tr><th>chunk</th><th>store</th><th>state</th><th class=\"num\">epoch</th>\
         <th>lease from</th></tr>",
    );
    for c in &p.chunks {
        let lease = match c.lease_manager {
            Some(d) => device_link(p, d),
            None => "—".into(),
        };
        let _ = write!(
            h,
            "<tr><td>{}</td><td>s{}</td><td>{}</td><td class=\"num\">{}</td><td>{lease}</td></tr>",
            esc(&c.id),
            c.store,
            pill(chunk_class(&c.state), &c.state),
            c.epoch
        );
    }
    h.push_str("</table></section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> Page {
        Page {
            device: DeviceView {
                id: 1,
                version: "0.1.0",
                peer_addr: "127.0.0.1:1".into(),
                client_addr: "127.0.0.1:2".into(),
                metrics_addr: "127.0.0.1:3".into(),
                uptime_secs: 5,
            },
            generated_unix_ms: 1_767_225_600_000,
            stores_total: 2,
            coordinator: Some(TermView { device: 1, term: 3 }),
            acting_coordinator: true,
            membership_version: 0,
            devices: vec![DeviceRow {
                id: 1,
                state: "active".into(),
                me: true,
                coordinator: true,
                lookup_leader: true,
                seen_by_lookup: true,
                client_addr: "127.0.0.1:2".into(),
                status_page: Some("127.0.0.1:3".into()),
            }],
            stores: vec![StoreRow::new(0), StoreRow::new(1)],
            chunks: Vec::new(),
            sessions: Vec::new(),
            locks: vec![LockRow {
                store: 0,
                name: "/web/<script>alert(\"x\")</script>&co".into(),
                holders: vec![HolderRow {
                    session: 42,
                    mode: "exclusive",
                    token: "1.7".into(),
                }],
                waiters: vec![WaiterRow {
                    session: 43,
                    mode: "shared",
                }],
            }],
            lookup: None,
            snapshots: vec![SnapshotRow {
                id: "1-2".into(),
                status: "failed".into(),
                initiated_here: true,
                devices: Vec::new(),
                unix_ms: 0,
                part_bytes: None,
                error: "<img src=x>".into(),
            }],
        }
    }

    #[test]
    fn status_page_escapes_every_client_string() {
        let html = render(&page());
        assert!(!html.contains("<script>"), "a lock name is not markup");
        assert!(!html.contains("<img"), "an error text is not markup");
        assert!(html.contains("/web/&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;co"));
        assert!(html.contains("session 42"));
        assert!(html.contains("1. session 43"));
        assert!(html.contains(r#"<meta http-equiv="refresh" content="2">"#));
        assert!(!html.contains("the first"), "nothing was cut");
        let mut cut = page();
        cut.stores[0].locks = Some(250);
        assert!(render(&cut).contains("(the first 200 of each store: 1 of 250)"));
    }

    #[test]
    fn status_page_dates_are_utc_calendar_dates() {
        assert_eq!(unix_time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(unix_time(1_767_225_600_000), "2026-01-01 00:00:00 UTC");
        assert_eq!(
            unix_time(951_782_400_000 + 3_661_000),
            "2000-02-29 01:01:01 UTC"
        );
    }

    #[test]
    fn escaping_covers_text_and_attributes() {
        assert_eq!(
            esc(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(esc("/plain/name"), "/plain/name");
    }
}
