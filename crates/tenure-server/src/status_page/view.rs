//! What the status page shows, as plain serializable data: the [`Page`] and its rows,
//! which `/status.json` serves as is and [`super::render`] turns into HTML.

use serde::Serialize;

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
    pub(super) fn new(store: u32) -> StoreRow {
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
