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
use crate::driver::calls::Call;
use crate::driver::status::{StatusDetail, StatusView};
use crate::snapshots::SnapshotsApi;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tenure_client::lookup::convert::state_name as node_state_name;
use tenure_client::proto;
use tenure_client::proto::snapshots_server::Snapshots;
use tenure_client::status::{chunk_state_name, mgr_state_name};
use tenure_core::election::members::MemberState;
use tenure_core::ids::DeviceId;
use tenure_core::layout::MgrState;
use tenure_core::lockctl::LockMode;
use tokio::sync::{mpsc, oneshot};

mod html;
mod serve;
mod view;

pub use html::{esc, render};
pub use serve::{recorder, serve};
pub use view::{
    ChunkRow, DeviceRow, DeviceView, HolderRow, LockRow, LookupView, Page, SessionRow, SnapshotRow,
    StoreRow, TermView, WaiterRow,
};

/// How often the page reloads itself (seconds).
pub const REFRESH_SECS: u32 = 2;

/// The lock every election `NAME` is held as (`NAME/.election`, see [`crate::elections`]).
const ELECTION_SUFFIX: &str = "/.election";

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
    async fn view(&self) -> Result<StatusView, String> {
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
        let snap = self.view().await?;
        let snapshots = (self.snapshots)
            .list(tonic::Request::new(proto::ListSnapshotsRequest {}))
            .await
            .map(|r| r.into_inner().snapshots)
            .unwrap_or_default();
        Ok(self.page(&snap, snapshots))
    }

    fn page(&self, s: &StatusView, snapshots: Vec<proto::SnapshotEntry>) -> Page {
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
                    state: chunk_state_name(c.state).to_string(),
                    epoch: c.epoch.0,
                    lease_manager: c.lease_mgr.map(|d| d.0),
                })
                .collect(),
            sessions: sessions(detail),
            locks: locks(detail),
            lookup: detail.map(|d| LookupView {
                state: node_state_name(d.lookup.state).to_string(),
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

    fn devices(&self, s: &StatusView, detail: Option<&StatusDetail>) -> Vec<DeviceRow> {
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
fn stores(s: &StatusView, detail: Option<&StatusDetail>) -> Vec<StoreRow> {
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
        r.role = mgr_state_name(m.state).to_string();
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
