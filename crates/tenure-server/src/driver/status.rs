//! The device's status answer ([`StatusView`], with the status page's [`StatusDetail`])
//! and how the driver builds it from the core's views.

use super::Driver;
use std::collections::BTreeMap;
use std::time::Duration;
use tenure_core::Instant;
use tenure_core::ids::{DeviceId, StoreId};
use tenure_core::layout::{ChunkView, ManagerView};

/// What `Status` reports.
#[derive(Clone, Debug)]
pub struct StatusView {
    /// This device.
    pub device: DeviceId,
    /// Every device of the cluster.
    pub devices: Vec<DeviceId>,
    /// Number of stores.
    pub stores: u32,
    /// Chunks held here.
    pub chunks: Vec<ChunkView>,
    /// Manager roles held here.
    pub managers: Vec<ManagerView>,
    /// Open sessions and held locks of each store managed here.
    pub tables: BTreeMap<StoreId, TableCounts>,
    /// Local time.
    pub now: Instant,
    /// The coordinator this device follows (or is), if it knows one.
    pub coordinator: Option<tenure_core::election::Term>,
    /// Whether this device acts as the coordinator.
    pub acting_coordinator: bool,
    /// The rest of what the device knows, when it was asked for.
    pub detail: Option<Box<StatusDetail>>,
}

/// What the status page shows beyond [`StatusView`]'s counts: the membership record,
/// the lookup node, and the sessions, locks and objects of every store managed here.
#[derive(Clone, Debug)]
pub struct StatusDetail {
    /// The membership record and the coordinator (the same view `service Cluster` gives).
    pub members: crate::cluster_api::MembersView,
    /// The lookup node (seed 003).
    pub lookup: tenure_core::lookup::NodeView,
    /// The stores managed here.
    pub stores: BTreeMap<StoreId, StoreDetail>,
}

/// Most locks of one store a [`StoreDetail`] lists (the rest are counted only), so a
/// status answer stays small whatever the table holds.
pub const DETAIL_LOCKS_MAX: usize = 200;
/// Most sessions of one store a [`StoreDetail`] lists.
pub const DETAIL_SESSIONS_MAX: usize = 200;

/// The tables of one store managed here.
#[derive(Clone, Debug, Default)]
pub struct StoreDetail {
    /// Open sessions (at most [`DETAIL_SESSIONS_MAX`]), by id.
    pub sessions: Vec<SessionDetail>,
    /// Open sessions in all.
    pub sessions_total: usize,
    /// Locks with holders or waiters (at most [`DETAIL_LOCKS_MAX`]), by name.
    pub locks: Vec<tenure_core::lockctl::LockInfo>,
    /// Locks with holders or waiters in all.
    pub locks_total: usize,
    /// Active objects.
    pub objects: u64,
    /// Their bytes.
    pub object_bytes: u64,
    /// The store's object revision.
    pub object_revision: u64,
}

/// One open session of a store managed here.
#[derive(Clone, Debug)]
pub struct SessionDetail {
    /// Its id.
    pub id: tenure_core::ids::SessionId,
    /// Its time to live between keep-alives.
    pub ttl: Duration,
    /// Time left before its deadline on the manager's clock (none: no deadline known;
    /// zero: past it, its expiry under way).
    pub expires_in: Option<Duration>,
    /// Locks it holds.
    pub holds: usize,
}

/// Sizes of a managed store's tables, for status pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableCounts {
    /// Open sessions.
    pub sessions: u32,
    /// Locks with at least one holder.
    pub locks_held: u32,
}

/// Lock names a Status answer counts itself, over every managed store (see
/// [`Driver::status_view`]).
const STATUS_SCAN_BUDGET: usize = 4096;

impl Driver {
    pub(super) fn status_view(&mut self) -> StatusView {
        let managers = self.device.manager_views();
        // Lock names scanned for this answer, over every store: a table that does not
        // fit in what is left is not scanned here, on the driver's loop, and its count is
        // the last complete pass of the gauges' tally. (Scanning every table of up to the
        // tally's budget cost 400,000 names per Status at 1,000,000 locks, and every
        // client that starts asks for one: half of a driver's time with 10,000 starting.)
        let mut budget = STATUS_SCAN_BUDGET;
        let tables = managers
            .iter()
            .filter_map(|m| {
                let t = self.device.managed_tables(m.store)?;
                let entries = t.locks.entry_count();
                let locks_held = if entries <= budget {
                    budget -= entries;
                    t.locks.held_count()
                } else {
                    (self.tallies.store_locks_held(m.store)).unwrap_or_default()
                };
                Some((
                    m.store,
                    TableCounts {
                        sessions: t.sessions.open.len() as u32,
                        locks_held: locks_held as u32,
                    },
                ))
            })
            .collect();
        let cfg = self.device.config();
        StatusView {
            device: cfg.id,
            devices: cfg.cluster.devices.clone(),
            stores: cfg.cluster.stores,
            chunks: self.device.chunk_views(),
            managers,
            tables,
            now: self.clock.now(),
            coordinator: self.device.coordinator(),
            acting_coordinator: self.device.acting_coordinator().is_some(),
            detail: None,
        }
    }

    /// The status page's part of a status answer ([`StatusDetail`]).
    pub(super) fn detail(&mut self) -> StatusDetail {
        let now = self.clock.now();
        let mut stores = BTreeMap::new();
        for m in self.device.manager_views() {
            let Some(t) = self.device.managed_tables(m.store) else {
                continue;
            };
            let liveness = self.device.managed_liveness(m.store);
            let locks: Vec<_> = (t.locks.locks_under("/").unwrap_or_default().into_iter())
                .filter(|l| !l.holders.is_empty() || !l.waiters.is_empty())
                .collect();
            let mut holds: BTreeMap<tenure_core::ids::SessionId, usize> = BTreeMap::new();
            for l in &locks {
                for h in &l.holders {
                    *holds.entry(h.session).or_default() += 1;
                }
            }
            let sessions = (t.sessions.open.iter().take(DETAIL_SESSIONS_MAX))
                .map(|(id, r)| SessionDetail {
                    id: *id,
                    ttl: r.ttl,
                    expires_in: liveness
                        .and_then(|l| l.deadline.get(id))
                        .map(|d| d.saturating_since(now)),
                    holds: holds.get(id).copied().unwrap_or(0),
                })
                .collect();
            let (mut objects, mut object_bytes) = (0, 0);
            for key in t.objects.keys.keys() {
                if let Some(a) = t.objects.active(key) {
                    objects += 1;
                    object_bytes += a.size;
                }
            }
            let locks_total = locks.len();
            stores.insert(
                m.store,
                StoreDetail {
                    sessions,
                    sessions_total: t.sessions.open.len(),
                    locks: locks.into_iter().take(DETAIL_LOCKS_MAX).collect(),
                    locks_total,
                    objects,
                    object_bytes,
                    object_revision: t.objects.revision,
                },
            );
        }
        StatusDetail {
            members: crate::cluster_api::MembersView::of(&self.device),
            lookup: self.device.lookup().view(),
            stores,
        }
    }
}
