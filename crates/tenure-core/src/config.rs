//! Configuration of one device's core. Every timing constant of seed 000 §2 is a named
//! setting with a default; the driver (server or simulator) fills it from TOML or the seed.

use crate::ids::{ChunkId, DeviceId, StoreId};
use crate::rng::mix64;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Timing constants (seed 000 §2 and the commit/ack windows Tenure adds).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Timing {
    /// `d_l`: the length of a lease granted by a renewal or an acquire.
    pub lease: Duration,
    /// How long after a grant a chunk asks for renewal (must be well below `lease`).
    pub renewal_period: Duration,
    /// Lease extension after an epoch transition commits (`> ctc_end`).
    pub commit_window: Duration,
    /// Lease extension after an epoch transition aborts (`> cta_end`).
    pub abort_window: Duration,
    /// `δ_c`: bound on the difference between any two clocks. A device never trusts a
    /// lease for longer than `expiry - δ_c`.
    pub clock_drift: Duration,
    /// "A reasonable message timeout": acquire replies, transfer acks, chunk creation.
    pub msg_timeout: Duration,
    /// How long a chunk in the no-lease state waits for a director to answer `help`.
    pub help_wait: Duration,
    /// How long a commit coordinator waits for every vote before aborting.
    pub transition_timeout: Duration,
    /// How long a chunk in a transition state waits for commit/abort before giving up on
    /// its manager (it then behaves as on lease expiry, keeping its prepared record), and
    /// how long a chunk that rebooted holding such a record stays newly awake. Must exceed
    /// `transition_timeout + 2·clock_drift`: a coordinator counts a vote only within
    /// `transition_timeout` of its prepare, so a vote is dead before its chunk moves on.
    pub transition_wait: Duration,
    /// How long a manager waits for a chunk's ACCEPTED before marking it failed, at
    /// least: the wait follows the round times the manager measured
    /// ([`crate::layout::ack_timer`]), up to `ack_timeout_max`.
    pub ack_timeout: Duration,
    /// The longest a manager waits for a chunk's ACCEPTED (at most half the lease). At
    /// or below `ack_timeout`: a fixed wait, nothing measured.
    pub ack_timeout_max: Duration,
    /// Gathering rounds a regenerating manager tries before releasing its chunks.
    pub gather_rounds_max: u32,
    /// A manager migrates back to a store's preferred device only after the store has been
    /// stable this long and the device was heard from within `liveness_window`.
    pub migrate_after: Duration,
    /// How recently a device must have been heard from to count as live for policies.
    pub liveness_window: Duration,
    /// After a manager change, every session is extended by this before any expires.
    pub session_grace: Duration,
    /// After a session expiry releases a lock, nobody is granted its name for this long
    /// (Chubby's lock-delay), so that a holder that does not yet know it lost the lock
    /// cannot overlap with the next one. An acquire may ask for its own (0 included).
    pub lock_delay: Duration,
    /// Whether a manager answers linearizable reads (object get, head and list, lock
    /// holders and listings) under its chunks' leases, without a round through them
    /// (DESIGN §4, reads). Off: every read waits for a barrier.
    pub lease_reads: bool,
}

impl Timing {
    /// The longest a manager waits for a chunk's ACCEPTED: `ack_timeout_max`, at most
    /// half the lease.
    pub fn ack_timeout_longest(&self) -> Duration {
        self.ack_timeout_max.min(self.lease / 2)
    }

    /// How long a device that was heard from may go unheard before it counts as silent
    /// ([`crate::ctx::Ctx::silent`]): two renewal periods. A live peer sharing a store
    /// with this device is heard at least once a renewal period (a renewal request or
    /// its answer), and a dead manager's chunks lose their lease only `lease -
    /// renewal_period` after its last renewal, by which time it is silent.
    pub fn silence(&self) -> Duration {
        self.renewal_period * 2
    }

    /// The longest a commit coordinator may wait for the votes of a transition that ships
    /// a store's whole state to a chunk (which must make it durable before it votes):
    /// short of `transition_wait − 2·clock_drift`, so that every vote it counts is still
    /// dead before its chunk moves on, and never less than `transition_timeout`.
    pub fn transition_timeout_longest(&self) -> Duration {
        let bound = self.clock_drift * 2 + Duration::from_millis(1);
        (self.transition_wait.saturating_sub(bound)).max(self.transition_timeout)
    }
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            lease: Duration::from_millis(2000),
            renewal_period: Duration::from_millis(600),
            commit_window: Duration::from_millis(2000),
            abort_window: Duration::from_millis(2000),
            clock_drift: Duration::from_millis(50),
            msg_timeout: Duration::from_millis(200),
            help_wait: Duration::from_millis(300),
            transition_timeout: Duration::from_millis(600),
            transition_wait: Duration::from_millis(1500),
            ack_timeout: Duration::from_millis(300),
            ack_timeout_max: Duration::from_millis(1000),
            gather_rounds_max: 6,
            migrate_after: Duration::from_millis(5000),
            liveness_window: Duration::from_millis(1500),
            session_grace: Duration::from_millis(3000),
            lock_delay: Duration::from_secs(1),
            lease_reads: true,
        }
    }
}

/// Test-only switches that plant known bugs, so the simulator's checkers can be shown to
/// catch them. All off by default; nothing outside tests turns them on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PlantedBugs {
    /// The quorum predicate accepts any non-empty set of chunks.
    pub broken_quorum: bool,
    /// A commit's patch leaves out one row of what differs from the base table.
    pub patch_drops_a_row: bool,
    /// A relayout's patch for a rejoining chunk loses a row
    /// (`ToChunk::ReconcilePatch`).
    pub rejoin_patch_drops_a_row: bool,
    /// A chunk applies operations whatever its lease state.
    pub serve_without_lease: bool,
    /// A manager answers reads at once, without its read lease or a barrier, and even
    /// when its chunk leases have run out.
    pub lease_read_unchecked: bool,
    /// A manager takes a renewal it merely sent as proof of its chunk's lease (the
    /// read lease's bound from the send time, without the chunk's echo).
    pub read_lease_from_sent_renewal: bool,
    /// A chunk persists its record's head alone (`PersistOp::PutChunkHead`) even when its
    /// tables changed since it last persisted them: what changed is lost at a restart.
    pub head_record_loses_rows: bool,
    /// A manager answers reads from its speculative tables (changes decided but not
    /// yet acknowledged).
    pub lease_read_speculative: bool,
    /// The lock table grants without checking conflicting holders or waiters.
    pub skip_conflict_check: bool,
    /// The lock table looks for conflicts on the requested name only: a lock on a path
    /// and a conflicting lock on its ancestor or descendant can both be granted.
    pub ignore_cover: bool,
    /// The manager answers a SafeTalk batch after the first ACCEPTED instead of all.
    pub confirm_before_all_accepted: bool,
    /// A chunk outputs its ACCEPTED before the persist of the changes it accepts, so the
    /// answer may leave before they are durable.
    pub accepted_before_persist: bool,
    /// A new manager gives sessions no grace: every session expires at takeover.
    pub expire_without_grace: bool,
    /// A new manager ignores the sessions' renewal notes: it counts every session's TTL
    /// and grace from the first epoch it saw, as if none had been renewed since.
    pub takeover_ignores_renewal: bool,
    /// (Simulator) a device times its leases, deadlines and timers on its wall clock,
    /// steps and all, made monotonic — as the server's clock once was.
    pub wall_clock_deadlines: bool,
    /// A device that does not manage a store answers `NotManager` naming itself.
    pub redirect_to_self: bool,
    /// A device answers a client's keep-alive of a session spanning stores once home
    /// renewed it, without renewing its children (DESIGN §4).
    pub keep_alive_skips_children: bool,
    /// A device acknowledges a register write forwarded to it without serving it (as if
    /// it had been the store's manager).
    pub forward_ack_unserved: bool,
    /// The lookup service keeps no `t + 1` bound: the leader admits every node that asks
    /// to join, and no surplus active node steps down.
    pub lookup_admit_all: bool,
    /// A lookup leader keeps its leadership when an older active node appears.
    pub lookup_keep_leadership: bool,
    /// A lookup node reacts to "node down" only at its next LONG_TIMEOUT maintainer run.
    pub lookup_lazy_failover: bool,
    /// Volatile lookup entries live four intervals after their last refresh, not two.
    pub lookup_long_volatile_lifetime: bool,
    /// Persistent lookup entries live two intervals and a round trip (as volatile ones).
    pub lookup_long_persistent_lifetime: bool,
    /// A booting lookup node ignores the persistent entries on its disk.
    pub lookup_forget_on_restart: bool,
    /// A lookup leader drops expired entries without telling subscribers.
    pub lookup_silent_expiry: bool,
    /// A lookup leader restarts a subscription's sequence at 1 with every Sync.
    pub lookup_sync_restarts_seq: bool,
    /// The lookup maintainer runs only on soft-state changes, never on LONG_TIMEOUT.
    pub lookup_no_long_timeout: bool,
    /// A lookup leader answers a `Get` of a live entry with a value nobody published (the
    /// entry's value with a byte appended).
    pub lookup_fabricated_answer: bool,
    /// Lookup: a leader does not ask a node that comes up for its persistent store
    /// before answering queries (an update acknowledged across a partition is answered
    /// older after the heal).
    pub lookup_no_pull: bool,
    /// The object collector also deletes the blocks of active objects.
    pub objects_collect_active: bool,
    /// Fenced object writes are applied without checking the token.
    pub objects_ignore_fence: bool,
    /// A get returns the object's previous (superseded) content when there is one.
    pub objects_read_superseded: bool,
    /// Watches skip every change with an even revision.
    pub objects_watch_drop: bool,
    /// A watch asked for values gets each key's active value, whichever change it is.
    pub objects_watch_active_value: bool,
    /// The collector never runs: pending_delete manifests stay forever.
    pub objects_never_collect: bool,
    /// A device applies coordinator commands whatever their term (no fencing).
    pub election_ignore_term: bool,
    /// A device that follows a coordinator acts as coordinator too, under its term.
    pub election_follower_acts: bool,
    /// A member never starts an election when the coordinator falls silent.
    pub election_no_restart: bool,
    /// A device processes a message tagged with a snapshot's marker before recording
    /// its state for that snapshot.
    pub snapshot_record_late: bool,
    /// A device forgets, when it restarts, which snapshots it recorded.
    pub snapshot_forget_recorded: bool,
    /// A device adopts any membership record whose version differs from its own, older
    /// ones too.
    pub members_adopt_older: bool,
    /// The coordinator retires a retiring device at once, before its chunks have moved
    /// and its managers migrated.
    pub members_retire_undrained: bool,
    /// The coordinator never retires a drained device (it stays retiring).
    pub members_never_retire: bool,
    /// The coordinator changes the membership record without a new version.
    pub members_same_version: bool,
}

/// The static shape of a cluster, fixed at bootstrap.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterConfig {
    /// Every device of the cluster (the directors a chunk may ask for help).
    pub devices: Vec<DeviceId>,
    /// Number of stores (DESIGN §1, default 64).
    pub stores: u32,
    /// Chunks per store at bootstrap.
    pub replication: usize,
}

impl ClusterConfig {
    /// A cluster of devices `1..=n`.
    pub fn new(n: u64, stores: u32, replication: usize) -> ClusterConfig {
        ClusterConfig {
            devices: (1..=n).map(DeviceId).collect(),
            stores,
            replication,
        }
    }

    /// The stores, in order.
    pub fn store_ids(&self) -> impl Iterator<Item = StoreId> + use<> {
        (0..self.stores).map(StoreId)
    }

    /// Bootstrap layout of a store: `replication` devices chosen by rendezvous hashing.
    /// Bootstrap chunk serials are the store index (serials below `stores` are reserved).
    pub fn bootstrap_chunks(&self, store: StoreId) -> Vec<ChunkId> {
        let mut ranked = self.ranked_devices(store);
        ranked.truncate(self.replication.min(self.devices.len()));
        ranked
            .into_iter()
            .map(|device| ChunkId {
                device,
                serial: store.0 as u64,
            })
            .collect()
    }

    /// Devices ranked by precedence for managing `store` (highest first). This is the
    /// well-known precedence relation of seed 000 §5.3.10 (nack arbitration).
    pub fn ranked_devices(&self, store: StoreId) -> Vec<DeviceId> {
        let mut ds = self.devices.clone();
        ds.sort_by_key(|d| std::cmp::Reverse(precedence(store, *d)));
        ds
    }

    /// The device that bootstraps as a store's manager and that policies prefer.
    pub fn preferred_manager(&self, store: StoreId) -> DeviceId {
        self.ranked_devices(store)[0]
    }

    /// First serial a device may allocate for new chunks.
    pub fn first_free_serial(&self) -> u64 {
        self.stores as u64
    }
}

/// The store a name lives in: a hash of its first path segment, so a name and all its
/// descendants share a store (DESIGN §1).
pub fn store_of(name: &str, stores: u32) -> StoreId {
    let first = name.trim_start_matches('/').split('/').next().unwrap_or("");
    // FNV-1a: fixed, so every client and server agrees.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in first.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    StoreId((mix64(h) % stores.max(1) as u64) as u32)
}

/// Precedence of a device as manager of a store: larger wins.
pub fn precedence(store: StoreId, device: DeviceId) -> (u64, u64) {
    (
        mix64(mix64(store.0 as u64 ^ 0x5741_5245) ^ device.0),
        device.0,
    )
}

/// Everything a device's core is configured with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceConfig {
    /// This device.
    pub id: DeviceId,
    /// The cluster's shape.
    pub cluster: ClusterConfig,
    /// Timing constants.
    pub timing: Timing,
    /// Whether this device runs the outside policies (relayout, migration).
    pub run_policies: bool,
    /// Planted bugs (tests only).
    pub planted: PlantedBugs,
    /// The address this device publishes in the lookup service (`/tenure/devices/<id>`;
    /// empty: its id).
    #[serde(default)]
    pub advertise: String,
    /// The lookup service's intervals and limits (`[lookup]`).
    pub lookup: crate::lookup::LookupSettings,
    /// The object service's limits and intervals (`[objects]`).
    #[serde(default)]
    pub objects: crate::objects::ObjectSettings,
    /// Elections of the coordinator (`[election]`).
    #[serde(default)]
    pub election: crate::election::ElectionSettings,
    /// Snapshots (`[snapshot]`).
    #[serde(default)]
    pub snapshot: crate::snapshot::SnapshotSettings,
    /// This device joins a running cluster (`tenure cluster add`): it creates no
    /// bootstrap chunks and waits for the coordinator to admit it.
    #[serde(default)]
    pub join: bool,
    /// A chunk persists its whole record after this many delta persists in a row
    /// (default [`CHECKPOINT_EVERY`]); `u32::MAX` never does, for storage that
    /// compacts deltas on its own.
    pub whole_record_every: u32,
    /// Forward a client request for a store this device does not manage to the store's
    /// manager and relay its answer, rather than answer `NotManager` (once every peer
    /// reads forwarded requests).
    #[serde(default = "forwarding_on")]
    pub forward: bool,
}

fn forwarding_on() -> bool {
    true
}

impl DeviceConfig {
    /// Defaults for device `id` in `cluster`.
    pub fn new(id: DeviceId, cluster: ClusterConfig) -> DeviceConfig {
        DeviceConfig {
            id,
            cluster,
            timing: Timing::default(),
            run_policies: true,
            planted: PlantedBugs::default(),
            lookup: crate::lookup::LookupSettings::default(),
            objects: crate::objects::ObjectSettings::default(),
            election: crate::election::ElectionSettings::default(),
            snapshot: crate::snapshot::SnapshotSettings::default(),
            join: false,
            advertise: String::new(),
            whole_record_every: CHECKPOINT_EVERY,
            forward: true,
        }
    }
}

/// By default, a chunk writes its whole record after this many delta persists in a row
/// ([`crate::DeviceConfig::whole_record_every`]).
///
/// The whole record holds the store's tables, idempotency records included (up to
/// `request_window` results per session), so it can be a megabyte where a delta is a few
/// hundred bytes; writing it every 64 batches cost the server about a tenth of its CPU
/// under lock load (cloning, encoding and logging it). The record only bounds how many
/// deltas a reader replays; the server's log checkpoints whole records on its own, and
/// which persist carries a chunk's state changes nothing the chunk decides.
pub const CHECKPOINT_EVERY: u32 = 1024;
