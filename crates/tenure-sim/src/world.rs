//! The deterministic simulator: devices running the real `tenure-core` under a virtual
//! clock, a faulty network and a nemesis, with the checkers run on every event.
//!
//! One `u64` seed drives everything (TigerBeetle's VOPR): the knobs, the network, the
//! nemesis, the workload, every clock and every device's own generator are forks of one
//! PRNG, and the event queue is a `BTreeMap` ordered by (real time, sequence number), so
//! [`run`] is a pure function of its [`SimConfig`]. No `HashMap` anywhere.
//!
//! - **Time**: virtual real time in µs, starting at [`START_US`]. Each device reads its
//!   own [`Clock`] (offset plus a linear, periodic or step drift model), all within `δ_c`
//!   of each other; clocks run on while a device is down or paused. A device's timer
//!   (`poll_timeout`, a local instant) is converted back to real time to schedule it.
//! - **Devices**: `Device::new` boots from the simulated disk — the `Persist` outputs that
//!   became durable, applied in order — so a crash loses the volatile state and, with
//!   the seed's slow disks (`world/disk.rs`), the writes not yet synced (the last record
//!   perhaps torn), while what waited for them never left. A pause freezes a device:
//!   every input addressed to it waits, in order, until it resumes.
//! - **Network**: see [`crate::net`] (per-pair FIFO, latency, loss, duplication,
//!   partitions, connections that die with a crash).
//! - **Nemesis**: a Poisson process of actions drawn with the seed's weights: partition
//!   (random halves or isolate one; symmetric or one-way; healed after a stability time),
//!   heal, crash (restart after a delay; aimed, as the seed says, at a device with writes
//!   not yet synced), pause (long enough to outlast leases); and disks whose commits
//!   stall, up to three leases.
//! - **Workload**: clients write random keys of random stores through random devices and
//!   follow `NotManager` hints (a few hops, then retry elsewhere after a timeout); lock
//!   clients hold sessions and locks, one request at a time or pipelined
//!   ([`SimConfig::pipelining`]); an operator sends outside-policy commands (migrate,
//!   replace a chunk, relayout) to a store's manager at random times.
//! - **Checkers** ([`crate::checks`]) run on every observation and after every device
//!   event: one manager per (store, epoch) and increasing epochs, serving only under a
//!   valid regular lease, no acknowledged write lost, durable before acknowledged.
//! - **Phases**: a safety phase with faults, then a liveness phase — partitions healed,
//!   crashed devices restarted, paused ones resumed, faults and operator commands off —
//!   in which every store must regain a working manager within `liveness_us`.

mod clients;
mod delay;
mod disk;
mod elections;
mod membership;
mod mgr_crash;
mod objects;
mod pipeline;
mod snapshots;

use crate::checks::{CheckCounts, Checker, Violation, ViolationKind};
use crate::clock::Clock;
use crate::knobs::Knobs;
use crate::knobs::{DiskKnobs, DiskModel, LockKnobs, LockPaths, Pipelining};
use crate::lockcheck::{LockCheckCounts, LockChecker};
use crate::net::{Fate, Network, PartitionMode};
use clients::{LockClient, LockReq};
pub use delay::UpdateDelay;
pub use mgr_crash::ManagerCrash;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use tenure_core::io::{
    ClientError, DevicePersist, EpochCause, Input, Observation, Output, PolicyCommand, Request,
    Response,
};
use tenure_core::layout::{ChunkState, Metadata, MgrState};
use tenure_core::lockctl::SessionId;
use tenure_core::msg::{Msg, ToChunk, ToManager};
use tenure_core::rng::{Rng, mix64};
use tenure_core::{
    ClientId, ClusterConfig, Device, DeviceConfig, DeviceId, Epoch, PlantedBugs, StoreId,
};

/// Virtual real time at which a run starts (µs). Starting above zero keeps every clock's
/// reading positive whatever its (negative) skew.
pub const START_US: u64 = 1_000_000;

/// How long after a snapshot's start its restored cluster's clocks read (see
/// [`World::build`]).
const RESTORE_LATER_US: u64 = 60_000_000;
/// How often the failover/liveness sampler looks at the cluster (µs).
const SAMPLE_US: u64 = 100_000;
/// A client follows at most this many redirects or retries per write.
const CLIENT_HOPS_MAX: u32 = 6;
/// A client gives up waiting for a reply after this long and retries elsewhere (µs).
const CLIENT_TIMEOUT_US: u64 = 1_500_000;
/// After every store has a manager again, lock clients get this long to be answered.
const LOCK_SETTLE_US: u64 = 10_000_000;
/// Step bound of the linearizability search per lock name.
const LIN_STEPS_MAX: u64 = 200_000;
/// A run that processes more events than this is stuck in an event storm.
const EVENTS_MAX: u64 = 20_000_000;

/// Invalid simulator configuration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// Fewer than one device.
    #[error("a cluster needs at least one device")]
    NoDevices,
    /// No stores.
    #[error("a cluster needs at least one store")]
    NoStores,
    /// Replication factor out of range.
    #[error("replication {replication} must be between 1 and the number of devices ({devices})")]
    Replication {
        /// Requested replication.
        replication: usize,
        /// Devices.
        devices: u64,
    },
    /// The liveness phase must have room to converge.
    #[error("the liveness phase must last at least one second")]
    LivenessTooShort,
}

/// What a run is asked to do.
#[derive(Clone, Debug, Serialize)]
pub struct SimConfig {
    /// The seed.
    pub seed: u64,
    /// Devices.
    pub devices: u64,
    /// Stores.
    pub stores: u32,
    /// Chunks per store at bootstrap.
    pub replication: usize,
    /// Length of the safety phase (µs of simulated time).
    pub safety_us: u64,
    /// Bound on the liveness phase (µs).
    pub liveness_us: u64,
    /// Planted bugs.
    pub planted: PlantedBugs,
    /// A chunk persists its whole record after this many ACCEPT deltas in a row
    /// ([`DeviceConfig::whole_record_every`]; the server runs with `u32::MAX`).
    pub whole_record_every: u32,
    /// Inject faults (nemesis, lossy network, operator commands, client pauses and
    /// crashes) in the safety phase; without them a run measures the calm path.
    pub faults: bool,
    /// Run the register-write workload beside the lock clients.
    pub writes: bool,
    /// Which lock clients pipeline requests on their session stream.
    pub pipelining: Pipelining,
    /// Whether lock names are paths that cover one another, or siblings.
    pub lock_paths: LockPaths,
    /// Whether disks are drawn by the seed (slow, stalling, losing and tearing unsynced
    /// writes at crashes) or synchronous.
    pub disk: DiskModel,
    /// Run the object clients and watchers beside the lock clients ([`crate::objects`]).
    pub objects: bool,
    /// Check every block deletion against the manifests active at that moment (object
    /// checker 3). Off only to show that checker 2 finds, at the end of a run, the loss
    /// checker 3 would report at once.
    pub objects_watch_deletes: bool,
    /// Membership changes in the store world (spare devices, adds and removes,
    /// [`crate::membership`]); off, the seed's runs are the ones it gave before them.
    pub membership: bool,
    /// Which world runs: the stores (layout, locks, registers) or the lookup service.
    pub world: WorldKind,
    /// The lookup world's failure class (drawn by the seed unless forced).
    pub lookup_profile: crate::lookup::knobs::ProfileChoice,
    /// Crash the manager of store 0 once, this long (µs) after the start, and measure
    /// what it takes until a new manager serves the store ([`ManagerCrash`]). Meant for
    /// calm runs (`faults` off): the crashed device stays down until the liveness phase.
    pub crash_manager_at_us: Option<u64>,
    /// Migrate the manager of store 0 once, this long (µs) after the start, to a device
    /// holding none of the store's chunks, if there is one (the lab's update cost with
    /// the LC outside the k sites). Meant for calm runs; the coordinator later moves it
    /// back to its preferred device.
    pub migrate_manager_apart_at_us: Option<u64>,
    /// Wall-clock steps ([`crate::clock`]): `None` (the default) lets the seed draw them
    /// (a third of the runs with faults; DESIGN §3, "Clocks").
    pub clock_steps: Option<bool>,
    /// Record an event trace.
    #[serde(skip)]
    pub trace: bool,
    /// Return the lock history in the report.
    #[serde(skip)]
    pub keep_history: bool,
    /// Keep up to this many peer messages and persistence records of each shape in the
    /// report ([`Captured`]): real encodings for the decoders' fuzzing corpus.
    #[serde(skip)]
    pub capture: usize,
}

/// Peer messages and persistence records a run produced, a few of each shape (its
/// `Debug` text without digits).
#[derive(Clone, Debug, Default)]
pub struct Captured {
    /// Messages devices sent each other.
    pub msgs: Vec<tenure_core::msg::Msg>,
    /// Records devices persisted.
    pub persists: Vec<tenure_core::PersistOp>,
    shapes: BTreeMap<String, usize>,
}

impl Captured {
    /// Whether another value of this shape is kept (at most `per_shape`).
    fn wants(&mut self, debug: String, per_shape: usize) -> bool {
        let shape: String = debug
            .chars()
            .filter(|c| !c.is_ascii_digit())
            .take(160)
            .collect();
        let n = self.shapes.entry(shape).or_default();
        *n += 1;
        *n <= per_shape
    }
}

impl SimConfig {
    /// Defaults for one seed: 5 devices, 16 stores of 3 chunks, 20 s of faults, then at
    /// most 30 s to converge.
    pub fn new(seed: u64) -> SimConfig {
        SimConfig {
            seed,
            devices: 5,
            stores: 16,
            replication: 3,
            safety_us: 20_000_000,
            liveness_us: 30_000_000,
            planted: PlantedBugs::default(),
            whole_record_every: tenure_core::io::CHECKPOINT_EVERY,
            faults: true,
            writes: true,
            pipelining: Pipelining::Drawn,
            lock_paths: LockPaths::Drawn,
            disk: DiskModel::Drawn,
            objects: true,
            objects_watch_deletes: true,
            membership: true,
            world: WorldKind::Stores,
            lookup_profile: Default::default(),
            crash_manager_at_us: None,
            migrate_manager_apart_at_us: None,
            clock_steps: None,
            trace: false,
            keep_history: false,
            capture: 0,
        }
    }

    /// Check the configuration.
    pub fn validate(&self) -> Result<(), SimError> {
        if self.devices == 0 {
            return Err(SimError::NoDevices);
        }
        if self.stores == 0 {
            return Err(SimError::NoStores);
        }
        if self.replication == 0 || self.replication as u64 > self.devices {
            return Err(SimError::Replication {
                replication: self.replication,
                devices: self.devices,
            });
        }
        if self.liveness_us < 1_000_000 {
            return Err(SimError::LivenessTooShort);
        }
        Ok(())
    }
}

/// Which world a run simulates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum WorldKind {
    /// Stores: layout control, locks and sessions, registers (every device also runs
    /// its lookup node, unchecked).
    #[default]
    Stores,
    /// The lookup service (seed 003) under its failure classes ([`crate::lookup`]).
    Lookup,
}

/// Faults injected, by kind.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Faults {
    /// Partitions into random halves.
    pub partitions_halves: u64,
    /// Partitions isolating one device.
    pub partitions_isolate: u64,
    /// One-way partitions among them.
    pub one_way: u64,
    /// Heals by the nemesis (not counting partitions that ended by themselves).
    pub heals: u64,
    /// Crashes.
    pub crashes: u64,
    /// Among them, crashes in the middle of an output batch (only a prefix of the
    /// outputs of the device's last input happened).
    pub torn_crashes: u64,
    /// Groups of persists lost at crashes before their sync completed (lost unsynced
    /// writes; nothing acknowledged depended on them).
    pub unsynced_lost: u64,
    /// Commits in flight at a crash whose record reached the disk torn (a prefix of its
    /// bytes), refused by recovery's checksum.
    pub torn_records: u64,
    /// Commits in flight at a crash whose record reached the disk whole, though their
    /// sync never returned.
    pub unsynced_survived: u64,
    /// Commits that stalled (up to three leases) before becoming durable.
    pub disk_stalls: u64,
    /// Pauses.
    pub pauses: u64,
    /// Messages lost (random loss and partitions).
    pub lost: u64,
    /// Messages duplicated.
    pub duplicated: u64,
    /// Wall-clock steps forward ([`crate::clock`]).
    pub clock_steps_forward: u64,
    /// Wall-clock steps back.
    pub clock_steps_back: u64,
    /// Boots of a device whose wall clock had stepped: its clock reads from an origin off
    /// the others' by the steps.
    pub boots_after_step: u64,
}

impl Faults {
    /// Add another run's counts.
    pub fn add(&mut self, o: &Faults) {
        self.clock_steps_forward += o.clock_steps_forward;
        self.clock_steps_back += o.clock_steps_back;
        self.boots_after_step += o.boots_after_step;
        self.partitions_halves += o.partitions_halves;
        self.partitions_isolate += o.partitions_isolate;
        self.one_way += o.one_way;
        self.heals += o.heals;
        self.crashes += o.crashes;
        self.torn_crashes += o.torn_crashes;
        self.unsynced_lost += o.unsynced_lost;
        self.torn_records += o.torn_records;
        self.unsynced_survived += o.unsynced_survived;
        self.disk_stalls += o.disk_stalls;
        self.pauses += o.pauses;
        self.lost += o.lost;
        self.duplicated += o.duplicated;
    }
}

/// How a run ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum Outcome {
    /// Every invariant held and every store converged.
    #[default]
    Passed,
    /// A safety invariant broke.
    Correctness,
    /// A store did not regain a manager within the liveness bound.
    Liveness,
}

/// What one run did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunReport {
    /// The seed.
    pub seed: u64,
    /// How it ended.
    pub outcome: Outcome,
    /// The knobs the seed chose.
    pub knobs: Option<Knobs>,
    /// Each device's clock.
    pub clocks: BTreeMap<u64, Clock>,
    /// Simulated time (µs).
    pub sim_us: u64,
    /// Events processed.
    pub events: u64,
    /// Faults injected.
    pub faults: Faults,
    /// Manager regenerations (`BecameManager` with cause `Regeneration`).
    pub regenerations: u64,
    /// Committed migrations.
    pub migrations: u64,
    /// Committed relayouts.
    pub relayouts: u64,
    /// Operator policy commands sent.
    pub policy_commands: u64,
    /// Client writes issued.
    pub writes_issued: u64,
    /// Writes acknowledged (observed at managers).
    pub writes_acked: u64,
    /// Longest time a store was without a working manager, ended by regaining one (µs).
    pub max_failover_us: u64,
    /// Time the liveness phase took to converge (µs).
    pub liveness_converged_us: Option<u64>,
    /// How often each checker compared something.
    pub checks: CheckCounts,
    /// The lock workload this seed chose.
    pub lock_knobs: Option<LockKnobs>,
    /// The disks this seed chose.
    pub disk_knobs: Option<DiskKnobs>,
    /// What the lock clients did.
    pub locks: LockStats,
    /// How often the lock checkers compared something.
    pub lock_checks: LockCheckCounts,
    /// SafeTalk messages sent by managers holding a chunk of their store.
    pub safetalk: SafeTalkCost,
    /// SafeTalk messages sent by managers on a device holding none of their store's
    /// chunks.
    pub safetalk_apart: SafeTalkCost,
    /// Update delays under managers holding a chunk of their store.
    pub update_delay: UpdateDelay,
    /// Update delays under managers holding none.
    pub update_delay_apart: UpdateDelay,
    /// The windows after each wall-clock step the seed drew ([`StepWindow`]).
    pub step_windows: Vec<StepWindow>,
    /// Violations (empty on success).
    pub violations: Vec<Violation>,
    /// Simulated time of the first violation (µs since the start).
    pub failed_at_us: Option<u64>,
    /// The event trace, if asked for.
    #[serde(skip)]
    pub trace: String,
    /// Messages and records kept for a fuzzing corpus ([`SimConfig::capture`]).
    #[serde(skip)]
    pub captured: Captured,
    /// The lock history (operations as clients saw them), if asked for.
    #[serde(skip)]
    pub lock_history:
        Vec<crate::lincheck::Operation<crate::lincheck::LockInput, crate::lincheck::LockOutput>>,
    /// A hash of every event and observation (determinism check).
    pub fingerprint: u64,
    /// The object workload this seed chose (when object clients ran).
    pub object_knobs: Option<crate::objects::ObjectKnobs>,
    /// What the object clients and watchers did, and how often the object checkers
    /// compared something.
    pub objects: crate::objects::ObjectStats,
    /// The election knobs this seed chose.
    pub election_knobs: Option<crate::election::ElectionKnobs>,
    /// What the elections did, and how often the election checkers looked.
    pub elections: crate::election::ElectionStats,
    /// The snapshot knobs this seed chose.
    pub snapshot_knobs: Option<crate::snapshot::SnapshotKnobs>,
    /// What the snapshots did, and how often the snapshot checkers looked.
    pub snapshots: crate::snapshot::SnapshotStats,
    /// The membership knobs this seed chose.
    pub membership_knobs: Option<crate::membership::MembershipKnobs>,
    /// What the membership changes did, and how often the membership checkers looked.
    pub membership: crate::membership::MembershipStats,
    /// The measured manager crash ([`SimConfig::crash_manager_at_us`]).
    pub manager_crash: Option<ManagerCrash>,
    /// The lookup world's knobs.
    pub lookup_knobs: Option<crate::lookup::knobs::LookupKnobs>,
    /// What the lookup world measured.
    pub lookup: Option<crate::lookup::LookupStats>,
}

/// How long after a wall-clock step its window is measured: five leases, past the
/// step's possible effects on the stepped device's timers (none, its deadlines being on
/// its monotonic clock) and on a failover it might start.
pub const STEP_WINDOW_US: u64 = 10_000_000;

/// The [`STEP_WINDOW_US`] after one wall-clock step the seed drew.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct StepWindow {
    /// The device whose clock stepped.
    pub device: u64,
    /// When (µs since the start).
    pub at_us: u64,
    /// By how much (µs; negative is back).
    pub jump_us: i64,
    /// Whether the step was taken (else the same window without it).
    pub taken: bool,
    /// The longest any store was without a working manager within the window (µs),
    /// whatever the cause (the run's other faults go on meanwhile).
    pub longest_outage_us: u64,
    /// Lock grants that reached their clients within the window, in every store.
    pub grants: u64,
}

/// What the lock clients did in a run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LockStats {
    /// Sessions opened.
    pub sessions_opened: u64,
    /// Grants received.
    pub grants: u64,
    /// Acknowledged releases.
    pub releases: u64,
    /// Of those, acknowledged to a retry (the same request id after a lost attempt).
    pub releases_retried: u64,
    /// Acquires answered without a grant (try, timeout, deadlock...).
    pub acquire_failures: u64,
    /// Session ends applied by managers (expiries and closes).
    pub session_ends: u64,
    /// Client deadlines that passed (the client dropped its session).
    pub deadlines_passed: u64,
    /// Client pauses.
    pub client_pauses: u64,
    /// Client crashes.
    pub client_crashes: u64,
    /// Operations in the history.
    pub history_ops: u64,
    /// Requests sent while another request of the same client was in flight (keep-alives
    /// aside): pipelining at work.
    pub pipelined: u64,
    /// Answers that arrived while a request the client sent earlier was still unanswered.
    pub out_of_order: u64,
    /// Session streams resumed on another target with requests in flight (after a
    /// redirect, `Unavailable` or a client-side timeout).
    pub stream_resumes: u64,
    /// Requests re-sent, with their request ids, on a resumed stream.
    pub resent: u64,
}

impl LockStats {
    /// Add another run's figures.
    pub fn add(&mut self, o: &LockStats) {
        self.sessions_opened += o.sessions_opened;
        self.grants += o.grants;
        self.releases += o.releases;
        self.releases_retried += o.releases_retried;
        self.acquire_failures += o.acquire_failures;
        self.session_ends += o.session_ends;
        self.deadlines_passed += o.deadlines_passed;
        self.client_pauses += o.client_pauses;
        self.client_crashes += o.client_crashes;
        self.history_ops += o.history_ops;
        self.pipelined += o.pipelined;
        self.out_of_order += o.out_of_order;
        self.stream_resumes += o.stream_resumes;
        self.resent += o.resent;
    }
}

/// SafeTalk messages (seed 004 §3): ACCEPT, ACCEPTED and standalone CONFIRM, to or from a
/// chunk on another device (remote) or on the manager's own device (local).
#[derive(Clone, Debug, Default, Serialize)]
pub struct SafeTalkCost {
    /// ACCEPT messages to remote chunks.
    pub accept_remote: u64,
    /// ACCEPTED messages from remote chunks.
    pub accepted_remote: u64,
    /// Standalone CONFIRM messages to remote chunks.
    pub confirm_remote: u64,
    /// SafeTalk messages between a manager and its own device's chunk.
    pub local: u64,
    /// Batches (ACCEPT rounds), counted once per manager.
    pub batches: u64,
    /// Changes carried by those batches.
    pub ops: u64,
}

impl SafeTalkCost {
    /// Add another run's counts.
    pub fn add(&mut self, o: &SafeTalkCost) {
        self.accept_remote += o.accept_remote;
        self.accepted_remote += o.accepted_remote;
        self.confirm_remote += o.confirm_remote;
        self.local += o.local;
        self.batches += o.batches;
        self.ops += o.ops;
    }

    /// Remote messages per batch and remote chunk.
    pub fn per_batch_per_chunk(&self) -> f64 {
        let m = (self.accept_remote + self.accepted_remote + self.confirm_remote) as f64;
        m / self.accept_remote.max(1) as f64
    }
}

#[derive(Clone, Debug)]
enum Event {
    Deliver {
        from: DeviceId,
        to: DeviceId,
        boot: u64,
        /// The message's number on its channel (0: a snapshot protocol message).
        seq: u64,
        msg: Box<Msg>,
    },
    ClientArrive {
        req: u64,
        to: DeviceId,
        boot: u64,
    },
    ClientTimeout {
        req: u64,
        attempt: u32,
    },
    PolicyArrive {
        to: DeviceId,
        boot: u64,
        cmd: PolicyCommand,
    },
    Timer {
        device: DeviceId,
        generation: u64,
    },
    Nemesis,
    Workload,
    Policy,
    Restart(DeviceId),
    Resume(DeviceId),
    HealPartition(u64),
    Sample,
    LockStep(usize),
    LockArrive {
        req: u64,
        to: DeviceId,
        boot: u64,
    },
    LockTimeout {
        req: u64,
        attempt: u32,
    },
    KeepAliveDue(usize, SessionId),
    ClientDeadline(usize, SessionId),
    ClientResume(usize),
    ObjStep(usize),
    ObjArrive {
        req: u64,
        to: DeviceId,
        boot: u64,
    },
    ObjTimeout {
        req: u64,
        attempt: u32,
    },
    ObjKeepAlive(usize, SessionId),
    WatchCheck(usize),
    /// Start a snapshot at a random running device (while faults are on).
    Snapshot,
    /// The operator asks for a membership change (while faults are on).
    MembershipChange,
    /// The operator repeats membership request `i` unless the record shows it.
    MembershipRepeat(usize),
    /// Crash the manager of store 0 ([`SimConfig::crash_manager_at_us`]).
    CrashManager,
    /// Migrate the manager of store 0 off its chunks
    /// ([`SimConfig::migrate_manager_apart_at_us`]).
    MigrateApart,
    /// A commit of a device's disk is durable ([`disk`]).
    DiskSynced {
        device: DeviceId,
        boot: u64,
        commit: u64,
    },
}

impl Event {
    /// The device an event is an input to (paused devices defer these).
    fn target(&self) -> Option<DeviceId> {
        match self {
            Event::Deliver { to, .. }
            | Event::ClientArrive { to, .. }
            | Event::LockArrive { to, .. }
            | Event::ObjArrive { to, .. }
            | Event::PolicyArrive { to, .. } => Some(*to),
            Event::Timer { device, .. } | Event::DiskSynced { device, .. } => Some(*device),
            _ => None,
        }
    }

    fn tag(&self) -> u64 {
        match self {
            Event::Deliver { from, to, .. } => 1 | from.0 << 8 | to.0 << 24,
            Event::ClientArrive { req, to, .. } => 2 | to.0 << 8 | req << 24,
            Event::ClientTimeout { req, .. } => 3 | req << 8,
            Event::PolicyArrive { to, .. } => 4 | to.0 << 8,
            Event::Timer { device, .. } => 5 | device.0 << 8,
            Event::Nemesis => 6,
            Event::Workload => 7,
            Event::Policy => 8,
            Event::Restart(d) => 9 | d.0 << 8,
            Event::Resume(d) => 10 | d.0 << 8,
            Event::HealPartition(id) => 11 | id << 8,
            Event::Sample => 12,
            Event::LockStep(c) => 13 | (*c as u64) << 8,
            Event::LockArrive { req, to, .. } => 14 | to.0 << 8 | req << 24,
            Event::LockTimeout { req, .. } => 15 | req << 8,
            Event::KeepAliveDue(c, s) => 16 | (*c as u64) << 8 | s.0 << 24,
            Event::ClientDeadline(c, s) => 17 | (*c as u64) << 8 | s.0 << 24,
            Event::ClientResume(c) => 18 | (*c as u64) << 8,
            Event::ObjStep(c) => 19 | (*c as u64) << 8,
            Event::ObjArrive { req, to, .. } => 20 | to.0 << 8 | req << 24,
            Event::ObjTimeout { req, .. } => 21 | req << 8,
            Event::ObjKeepAlive(c, s) => 22 | (*c as u64) << 8 | s.0 << 24,
            Event::WatchCheck(w) => 23 | (*w as u64) << 8,
            Event::Snapshot => 24,
            Event::MembershipChange => 25,
            Event::MembershipRepeat(i) => 26 | (*i as u64) << 8,
            Event::CrashManager => 27,
            Event::MigrateApart => 28,
            Event::DiskSynced { device, commit, .. } => 29 | device.0 << 8 | commit << 24,
        }
    }
}

/// The nemesis' repertoire (weights in [`Knobs::nemesis_weights`], in this order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NemesisAction {
    /// Cut the cluster into random halves.
    PartitionHalves,
    /// Cut one device off.
    PartitionIsolate,
    /// End the partition in force (once it has been stable long enough).
    Heal,
    /// Crash a device; it restarts after a delay.
    Crash,
    /// Pause a device's process; it resumes after a delay.
    Pause,
}

const NEMESIS_ACTIONS: [NemesisAction; 5] = [
    NemesisAction::PartitionHalves,
    NemesisAction::PartitionIsolate,
    NemesisAction::Heal,
    NemesisAction::Crash,
    NemesisAction::Pause,
];

struct Node {
    device: Option<Device>,
    /// What survives a crash: the persists that became durable.
    disk: DevicePersist,
    /// Every persist the device output, durable or not: what its memory holds.
    written: DevicePersist,
    /// Persists and outputs on their way to the disk and out ([`disk`]).
    pipe: disk::Pipe,
    cfg: DeviceConfig,
    clock: Clock,
    /// Real time until which the process is paused.
    paused_until: Option<u64>,
    /// Bumped whenever a timer is armed or the device crashes; stale timers are ignored.
    timer_generation: u64,
    /// Incarnation: bumped at every boot; messages to an older one are dropped.
    boot: u64,
    /// Seeds for the device's generator at each boot.
    rng: Rng,
    /// A crash armed to strike in the middle of the device's next output batch, with the
    /// restart delay to use.
    torn_crash: Option<u64>,
    /// The rest of an output batch a pause stopped (it leaves when the device resumes).
    held: Option<Vec<Output>>,
    /// Queue keys of the inputs a pause deferred (moved up if it ends early).
    deferred: Vec<(u64, u64)>,
    /// The device observed its retirement in the batch being processed.
    retire_pending: bool,
    /// The device retired: its process stopped for good.
    retired: bool,
}

struct ClientWrite {
    store: StoreId,
    key: u64,
    value: u64,
    attempt: u32,
}

/// The simulated world.
pub struct World {
    cfg: SimConfig,
    knobs: Knobs,
    nemesis_rng: Rng,
    workload_rng: Rng,
    policy_rng: Rng,
    net: Network,
    skew_max_us: u64,
    clock_drift: std::time::Duration,
    now: u64,
    seq: u64,
    queue: BTreeMap<(u64, u64), Event>,
    nodes: BTreeMap<DeviceId, Node>,
    faults_on: bool,
    checker: Checker,
    report: RunReport,
    next_req: u64,
    writes: BTreeMap<u64, ClientWrite>,
    lock_knobs: LockKnobs,
    lock_rng: Rng,
    /// Picks the clients that pipeline (their own stream, so that runs where none does
    /// draw everything else as before).
    pipe_rng: Rng,
    /// Picks each client's names when they are paths (their own stream, likewise).
    paths_rng: Rng,
    disk_knobs: DiskKnobs,
    /// Draws commit latencies, stalls and crash fates (its own stream, likewise).
    disk_rng: Rng,
    lock_clients: Vec<LockClient>,
    lock_reqs: BTreeMap<u64, LockReq>,
    locks: LockChecker,
    /// Per manager device, the last SafeTalk batch counted (epoch, first version).
    last_batch: BTreeMap<DeviceId, (Epoch, Option<tenure_core::data::Version>)>,
    /// Update delay bookkeeping ([`delay`]).
    delay: delay::DelayTracker,
    obj_knobs: crate::objects::ObjectKnobs,
    obj_rng: Rng,
    obj_clients: Vec<objects::ObjClient>,
    obj_watchers: Vec<objects::Watcher>,
    obj_reqs: BTreeMap<u64, objects::ObjReq>,
    objcheck: crate::objects::ObjectChecker,
    /// The run is settling its objects: object clients, lock clients and the register
    /// workload start nothing new (the lock history was already checked).
    obj_quiet: bool,
    /// Manifests seen collected by a manager.
    obj_collected: BTreeSet<(StoreId, tenure_core::objects::Uuid)>,
    next_watch: u64,
    /// Stores that have had a working manager at least once.
    ever_managed: BTreeSet<StoreId>,
    /// store → real time it lost its working manager (while without one).
    unmanaged_since: BTreeMap<StoreId, u64>,
    /// Every ended stretch of a store without a working manager: (since, until) µs.
    outages: Vec<(u64, u64)>,
    /// When each lock grant reached its client (µs).
    grant_times: Vec<u64>,
    /// The wall-clock steps the seed drew, per device, taken or not (`--clock-steps off`
    /// measures the same windows without them): (device, at µs, jump µs).
    drawn_steps: Vec<(u64, u64, i64)>,
    hash: u64,
    /// Counts every input and output the devices handle: orders records of snapshots
    /// against acknowledgements.
    tick: u64,
    /// The message being delivered, while its receiver handles it: (sender, number).
    delivering: Option<(DeviceId, u64)>,
    el_knobs: crate::election::ElectionKnobs,
    el_rng: Rng,
    elections: crate::election::ElectionChecker,
    /// The liveness phase's crash of the coordinator.
    coord_down: elections::CoordDown,
    /// When the liveness phase last disturbed the election (its start, a restart).
    disturbed_at: u64,
    /// Whether the election has converged since that disturbance.
    el_converged: bool,
    snap_knobs: crate::snapshot::SnapshotKnobs,
    snap_rng: Rng,
    cuts: crate::snapshot::CutTracker,
    /// Complete snapshots waiting for their restore.
    to_restore: Vec<crate::snapshot::Cut>,
    /// Restores of snapshots started while faults were on, so far.
    restores_faulty: u32,
    /// This world is a cluster restored from a snapshot: no clients, no snapshots, and
    /// every takeover's tables kept for the restore check.
    restore: Option<crate::snapshot::Restored>,
    mem_knobs: crate::membership::MembershipKnobs,
    mem_rng: Rng,
    members: crate::membership::MembershipChecker,
    /// The operator's membership requests, in order.
    mem_requests: Vec<membership::MemberRequest>,
    /// The snapshots started, with the members of their initiator's record then.
    snap_members: BTreeMap<tenure_core::snapshot::SnapshotId, Vec<DeviceId>>,
}

impl World {
    /// Build the world for a configuration (which must be valid, see
    /// [`SimConfig::validate`]).
    pub fn new(cfg: SimConfig) -> World {
        World::build(cfg, None)
    }

    /// Build a world; with `restore`, a cluster booting from a snapshot's parts (see
    /// [`crate::snapshot`]).
    fn build(cfg: SimConfig, restore: Option<&crate::snapshot::Cut>) -> World {
        let mut root = Rng::new(mix64(cfg.seed ^ 0x7e4e_5e1d_0000_0001));
        let knobs = Knobs::draw(&mut root, cfg.devices);
        let mut net = Network::new(root.fork(), &knobs);
        net.faults_on = cfg.faults;
        let faults_on = cfg.faults;
        let nemesis_rng = root.fork();
        let workload_rng = root.fork();
        let policy_rng = root.fork();
        let mut clock_rng = root.fork();
        let mut device_rng = root.fork();
        let mut lock_rng = root.fork();
        let mut lock_knobs = LockKnobs::draw(&mut lock_rng, cfg.stores);
        let mut pipe_rng = root.fork();
        lock_knobs.draw_pipelining(&mut pipe_rng, cfg.pipelining);
        let mut obj_rng = root.fork();
        let obj_knobs = crate::objects::ObjectKnobs::draw(&mut obj_rng);
        let mut el_rng = root.fork();
        let el_knobs = crate::election::ElectionKnobs::draw(&mut el_rng);
        let mut snap_rng = root.fork();
        let snap_knobs = crate::snapshot::SnapshotKnobs::draw(&mut snap_rng);
        let mut mem_rng = root.fork();
        let mut mem_knobs = crate::membership::MembershipKnobs::draw(&mut mem_rng);
        if !cfg.faults || !cfg.membership || restore.is_some() {
            mem_knobs.spares = 0;
            mem_knobs.change_mean_us = 0;
        }
        let mut paths_rng = root.fork();
        lock_knobs.draw_paths(&mut paths_rng, cfg.lock_paths);
        let mut disk_rng = root.fork();
        let disk_knobs = DiskKnobs::draw(&mut disk_rng, cfg.disk);
        let mut cluster = ClusterConfig::new(cfg.devices, cfg.stores, cfg.replication);
        if let Some(cut) = restore {
            // A restored cluster is the snapshot's devices (a device whose disk holds no
            // record boots with them as its bootstrap record).
            cluster.devices = cut.parts.keys().copied().collect();
        }
        let bootstrap = tenure_core::election::members::Members::bootstrap(&cluster.devices);
        // Spare devices, started to join: ids above the members'.
        let top = cluster.devices.iter().map(|d| d.0).max().unwrap_or(0);
        let spares: Vec<DeviceId> = (1..=mem_knobs.spares).map(|i| DeviceId(top + i)).collect();
        let timing = tenure_core::Timing::default();
        let skew_max_us = timing.clock_drift.as_micros() as u64 / 2;
        let horizon = START_US + cfg.safety_us + cfg.liveness_us + 1_000_000;
        // A restored cluster's clocks went on after the cut, as the server's wall clocks
        // do: the times in the snapshot's state and in its replayed messages (a recovery
        // lease's expiry) lie in its past. Restarted from zero, a replayed lease taken at
        // 33 s held every chunk of a store for 33 s (seeds 42, 46 with 30 s of faults).
        let later_us = restore.map_or(0, |cut| cut.id.serial + RESTORE_LATER_US);
        // Wall-clock steps, from a generator of their own (the seed's other draws are
        // those it made before steps existed).
        let mut step_rng = Rng::new(mix64(cfg.seed ^ 0xc10c_57e9_0000_0001));
        let drawn = step_rng.below(3) == 0;
        let stepping = cfg.planted.wall_clock_deadlines
            || (cfg.faults && restore.is_none() && cfg.clock_steps.unwrap_or(drawn));
        let step_limit_us = cfg.safety_us;
        let ttl_us = lock_knobs.ttl_ms * 1000;
        let lease_us = timing.lease.as_micros() as u64;
        let mut nodes = BTreeMap::new();
        let mut drawn_steps = Vec::new();
        for d in cluster.devices.iter().chain(&spares).copied() {
            let mut dc = DeviceConfig::new(d, cluster.clone());
            if spares.contains(&d) {
                dc.join = true;
                dc.cluster.devices.push(d);
            }
            dc.planted = cfg.planted.clone();
            dc.whole_record_every = cfg.whole_record_every;
            dc.objects = World::object_settings(obj_knobs.history);
            dc.election.algorithm = el_knobs.algorithm;
            let disk = restore
                .and_then(|c| c.parts.get(&d))
                .map(|p| p.state.clone())
                .unwrap_or_default();
            nodes.insert(
                d,
                Node {
                    device: None,
                    written: disk.clone(),
                    pipe: disk::Pipe::booted(&disk, 0),
                    disk,
                    cfg: dc,
                    clock: {
                        let mut c =
                            Clock::draw(&mut clock_rng, skew_max_us, horizon).later(later_us);
                        // Drawn whether taken or not: the generator serves nothing else,
                        // and the same windows are measured without the steps.
                        let steps = draw_steps(&mut step_rng, step_limit_us, lease_us, ttl_us);
                        if cfg.faults {
                            drawn_steps.extend(steps.iter().map(|&(at, j)| (d.0, at, j)));
                        }
                        if stepping {
                            c = c.later(crate::clock::STEP_LIFT_US);
                            c.steps = steps;
                            c.wall_deadlines = cfg.planted.wall_clock_deadlines;
                        }
                        c
                    },
                    paused_until: None,
                    timer_generation: 0,
                    boot: 0,
                    rng: device_rng.fork(),
                    torn_crash: None,
                    held: None,
                    deferred: Vec::new(),
                    retire_pending: false,
                    retired: false,
                },
            );
        }
        let election = tenure_core::election::ElectionSettings {
            algorithm: el_knobs.algorithm,
            ..Default::default()
        };
        let mut w = World {
            report: RunReport {
                seed: cfg.seed,
                knobs: Some(knobs.clone()),
                lock_knobs: Some(lock_knobs.clone()),
                disk_knobs: Some(disk_knobs.clone()),
                object_knobs: cfg.objects.then(|| obj_knobs.clone()),
                election_knobs: Some(el_knobs.clone()),
                snapshot_knobs: restore.is_none().then(|| snap_knobs.clone()),
                membership_knobs: restore.is_none().then(|| mem_knobs.clone()),
                clocks: nodes
                    .iter()
                    .map(|(d, n): (&DeviceId, &Node)| (d.0, n.clock.clone()))
                    .collect(),
                faults: Faults {
                    clock_steps_forward: (nodes.values().flat_map(|n: &Node| &n.clock.steps))
                        .filter(|(_, j)| *j > 0)
                        .count() as u64,
                    clock_steps_back: (nodes.values().flat_map(|n: &Node| &n.clock.steps))
                        .filter(|(_, j)| *j < 0)
                        .count() as u64,
                    ..Faults::default()
                },
                ..RunReport::default()
            },
            clock_drift: timing.clock_drift,
            cfg,
            knobs,
            nemesis_rng,
            workload_rng,
            policy_rng,
            net,
            skew_max_us,
            now: START_US,
            seq: 0,
            queue: BTreeMap::new(),
            nodes,
            faults_on,
            checker: Checker::default(),
            next_req: 0,
            writes: BTreeMap::new(),
            lock_knobs,
            lock_rng,
            pipe_rng,
            paths_rng,
            disk_knobs,
            disk_rng,
            lock_clients: Vec::new(),
            lock_reqs: BTreeMap::new(),
            locks: LockChecker::default(),
            last_batch: BTreeMap::new(),
            delay: Default::default(),
            obj_knobs,
            obj_rng,
            obj_clients: Vec::new(),
            obj_watchers: Vec::new(),
            obj_reqs: BTreeMap::new(),
            objcheck: Default::default(),
            obj_quiet: false,
            obj_collected: BTreeSet::new(),
            next_watch: 0,
            ever_managed: BTreeSet::new(),
            unmanaged_since: BTreeMap::new(),
            outages: Vec::new(),
            grant_times: Vec::new(),
            drawn_steps,
            hash: 0xcbf2_9ce4_8422_2325,
            tick: 0,
            delivering: None,
            el_knobs,
            el_rng,
            elections: crate::election::ElectionChecker::new(&election),
            coord_down: elections::CoordDown::Done,
            disturbed_at: 0,
            el_converged: false,
            snap_knobs,
            snap_rng,
            cuts: Default::default(),
            to_restore: Vec::new(),
            restores_faulty: 0,
            restore: restore.map(|_| Default::default()),
            mem_knobs,
            mem_rng,
            members: crate::membership::MembershipChecker::new(bootstrap),
            mem_requests: Vec::new(),
            snap_members: BTreeMap::new(),
        };
        if w.cfg.trace {
            let line = format!("config {:?}", w.cfg);
            w.trace(|| line);
            let line = format!("knobs {:?}", w.knobs);
            w.trace(|| line);
            let line = format!("lock knobs {:?}", w.lock_knobs);
            w.trace(|| line);
            let line = format!("disk knobs {:?}", w.disk_knobs);
            w.trace(|| line);
            if w.cfg.objects {
                let line = format!("object knobs {:?}", w.obj_knobs);
                w.trace(|| line);
            }
            let line = format!("election knobs {:?}", w.el_knobs);
            w.trace(|| line);
            let line = format!("snapshot knobs {:?}", w.snap_knobs);
            w.trace(|| line);
            let line = format!("membership knobs {:?}", w.mem_knobs);
            w.trace(|| line);
            let clocks: Vec<String> = w
                .nodes
                .iter()
                .map(|(d, n)| format!("{d} {:?}", n.clock))
                .collect();
            for c in clocks {
                w.trace(|| format!("clock {c}"));
            }
        }
        w.members.stats.runs_with_spares = (w.mem_knobs.spares > 0) as u64;
        let ids: Vec<DeviceId> = w.nodes.keys().copied().collect();
        for d in ids {
            w.boot(d);
        }
        if let Some(cut) = restore {
            w.deliver_recorded(cut);
            w.schedule(w.now + SAMPLE_US, Event::Sample);
            return w;
        }
        let t = w.exp_nemesis();
        w.schedule(t, Event::Nemesis);
        if let Some(at) = w.cfg.crash_manager_at_us {
            w.schedule(START_US + at, Event::CrashManager);
        }
        if let Some(at) = w.cfg.migrate_manager_apart_at_us {
            w.schedule(START_US + at, Event::MigrateApart);
        }
        if w.cfg.writes {
            let t = w.exp_workload();
            w.schedule(t, Event::Workload);
        }
        let t = w.now + exp(&mut w.policy_rng, w.knobs.policy_mean_us);
        w.schedule(t, Event::Policy);
        w.schedule(w.now + SAMPLE_US, Event::Sample);
        w.start_lock_clients();
        if w.cfg.objects {
            w.start_object_clients();
        }
        if w.cfg.faults {
            let t = w.now + exp(&mut w.snap_rng, w.snap_knobs.mean_us);
            w.schedule(t, Event::Snapshot);
        }
        if w.mem_knobs.change_mean_us > 0 {
            let t = w.now + exp(&mut w.mem_rng, w.mem_knobs.change_mean_us);
            w.schedule(t, Event::MembershipChange);
        }
        w
    }

    /// The knobs this seed chose.
    pub fn knobs(&self) -> &Knobs {
        &self.knobs
    }

    fn since_start(&self) -> u64 {
        self.now - START_US
    }

    fn trace(&mut self, f: impl FnOnce() -> String) {
        if self.cfg.trace {
            let line = f();
            let t = self.since_start();
            let _ = writeln!(
                self.report.trace,
                "{:>6}.{:06} {line}",
                t / 1_000_000,
                t % 1_000_000
            );
        }
    }

    fn mix(&mut self, x: u64) {
        self.hash = mix64(self.hash ^ x);
    }

    fn exp_nemesis(&mut self) -> u64 {
        self.now + exp(&mut self.nemesis_rng, self.knobs.nemesis_mean_us)
    }

    fn exp_workload(&mut self) -> u64 {
        self.now + exp(&mut self.workload_rng, self.knobs.write_mean_us)
    }

    fn schedule(&mut self, at: u64, ev: Event) {
        self.seq += 1;
        self.queue.insert((at.max(self.now), self.seq), ev);
    }

    fn running(&self, d: DeviceId) -> bool {
        let n = &self.nodes[&d];
        n.device.is_some() && n.paused_until.is_none()
    }

    fn down_count(&self) -> u64 {
        self.nodes
            .values()
            .filter(|n| !n.retired && (n.device.is_none() || n.paused_until.is_some()))
            .count() as u64
    }

    fn boot(&mut self, d: DeviceId) {
        let now = self.now;
        let node = self.nodes.get_mut(&d).expect("node");
        node.retire_pending = false;
        // A retired device is never started again (the server exits at boot).
        if node.retired || (node.disk.members.as_ref()).is_some_and(|m| m.retired.contains(&d)) {
            node.retired = true;
            return;
        }
        node.boot += 1;
        node.paused_until = None;
        node.held = None;
        node.deferred.clear();
        let seed = node.rng.next_u64();
        node.clock.boot(now);
        if node.clock.life_us != 0 {
            self.report.faults.boots_after_step += 1;
        }
        let node = self.nodes.get_mut(&d).expect("node");
        let local = node.clock.local(now);
        let (dev, out) = Device::new(node.cfg.clone(), node.disk.clone(), local, seed);
        node.device = Some(dev);
        let boot = node.boot;
        let term = node.disk.term;
        let record = node.disk.members.clone();
        self.elections.booted(d, term);
        self.members.booted(now, d, record.as_ref());
        self.trace(|| format!("{d} boot #{boot}"));
        self.mix(0xb007 ^ d.0);
        self.process(d, out);
    }

    /// Crash a device between two inputs (`torn`: in the middle of an output batch, so
    /// its memory may legitimately be ahead of its disk).
    fn crash(&mut self, d: DeviceId, torn: bool) {
        let node = self.nodes.get_mut(&d).expect("node");
        node.torn_crash = None;
        // A batch a pause stopped half-way is torn by the crash.
        let torn = torn || node.held.take().is_some();
        self.cuts.crashed(d);
        let node = self.nodes.get_mut(&d).expect("node");
        if let Some(dev) = node.device.take() {
            node.timer_generation += 1;
            node.paused_until = None;
            node.deferred.clear();
            if !torn {
                let memory = dev.persistent();
                self.checker.persisted(d, &memory, &self.nodes[&d].written);
            }
            self.report.faults.crashes += 1;
            self.trace(|| format!("{d} crash{}", if torn { " (mid-batch)" } else { "" }));
            self.disk_crash(d);
        }
    }

    /// One input to a running device, then its outputs.
    fn input(&mut self, d: DeviceId, input: Input) {
        let node = self.nodes.get_mut(&d).expect("node");
        let local = node.clock.local(self.now);
        if node.device.is_none() {
            return;
        }
        self.tick += 1;
        self.snap_note_request(&input);
        let node = self.nodes.get_mut(&d).expect("node");
        let dev = node.device.as_mut().expect("running");
        let out = dev.handle(local, input);
        self.process(d, out);
    }

    /// Give `d` a tick if a timer of its is due (at most a few times in a row).
    fn fire_due_timers(&mut self, d: DeviceId) {
        for _ in 0..3 {
            let node = &self.nodes[&d];
            let local = node.clock.local(self.now);
            let due = (node.device.as_ref())
                .and_then(Device::poll_timeout)
                .is_some_and(|t| t <= local);
            if !due {
                return;
            }
            self.input(d, Input::Tick);
        }
    }

    /// Apply one device's outputs in order (persist to its disk, send, reply), then run
    /// the checkers on its observations — after the whole batch, so they see what it made
    /// durable — and on its manager roles, then re-arm its timer.
    fn process(&mut self, d: DeviceId, mut out: Vec<Output>) {
        // A torn crash: only a prefix of the batch happens (a `Persist` reached the disk
        // or not, a message left or not), in order — the core promises nothing depends
        // on a later output.
        let torn = match self.nodes[&d].torn_crash {
            Some(delay) if !out.is_empty() => {
                let k = self.nemesis_rng.below(out.len() as u64 + 1) as usize;
                out.truncate(k);
                Some(delay)
            }
            _ => None,
        };
        // A pause that waits for a coordinator command stops the process between
        // deciding it and sending it: the rest of the batch leaves when it resumes.
        let held = match torn {
            None => self.hold_at_command(d, &mut out),
            Some(_) => None,
        };
        // The message being delivered: whether any of its effects left before a record.
        let delivering = self.delivering.take();
        let mut effects = false;
        let mut observed = Vec::new();
        for o in out {
            self.tick += 1;
            match o {
                Output::Persist(op) => {
                    // The snapshot machine's own record of what it recorded is not an
                    // effect of the message being processed.
                    effects |= !matches!(op, tenure_core::PersistOp::SetSnapshots(_));
                    if self.cfg.capture > 0
                        && (self.report.captured).wants(format!("{op:?}"), self.cfg.capture)
                    {
                        self.report.captured.persists.push(op.clone());
                    }
                    if let tenure_core::PersistOp::BlockDelete { chunk, ids } = &op {
                        self.obj_on_block_delete(d, *chunk, ids);
                    }
                    self.persist(d, op);
                }
                Output::Send { to, msg } => {
                    effects |= crate::snapshot::carried(&msg).is_some();
                    if self.cfg.capture > 0
                        && (self.report.captured).wants(format!("{msg:?}"), self.cfg.capture)
                    {
                        self.report.captured.msgs.push(msg.clone());
                    }
                    self.let_out(d, disk::Held::Send { to, msg })
                }
                Output::Reply { req_id, result, .. } => {
                    effects = true;
                    self.let_out(d, disk::Held::Reply { req_id, result })
                }
                Output::SetTimer(_) => {}
                Output::Observe(Observation::SnapshotRecorded { id }) => {
                    let at = delivering.map(|(from, seq)| (from, seq, effects));
                    self.snap_recorded(d, id, at);
                    observed.push((self.tick, Observation::SnapshotRecorded { id }));
                }
                Output::Observe(ob) => {
                    effects = true;
                    observed.push((self.tick, ob))
                }
                Output::LookupEvent(_) => effects = true,
                Output::ObjectEvents {
                    client,
                    watch,
                    changes,
                } => {
                    effects = true;
                    let held = disk::Held::ObjectEvents {
                        client,
                        watch,
                        changes,
                    };
                    self.let_out(d, held)
                }
                Output::WatchEnded {
                    client,
                    watch,
                    reason,
                } => {
                    effects = true;
                    let held = disk::Held::WatchEnded {
                        client,
                        watch,
                        reason,
                    };
                    self.let_out(d, held)
                }
                Output::SnapshotStarted { id } => self.snap_started(d, id),
                Output::SnapshotPart(part) => self.snap_part(d, *part),
                Output::SnapshotEnded { id, result } => self.snap_ended(id, result),
            }
        }
        // A record whose persist a tear cut off never happened as far as anyone can tell
        // (its markers wait for that persist): the device may record it again (seed
        // 30996).
        let written = &self.nodes[&d].written.snapshots;
        let cut_off: Vec<tenure_core::snapshot::SnapshotId> = (observed.iter())
            .filter_map(|(_, ob)| match ob {
                Observation::SnapshotRecorded { id } if torn.is_some() && !written.contains(id) => {
                    Some(*id)
                }
                _ => None,
            })
            .collect();
        for (tick, ob) in observed {
            self.observe(d, tick, ob);
        }
        if let Some(delay) = torn {
            self.report.faults.torn_crashes += 1;
            if !cut_off.is_empty() {
                let boot = self.nodes[&d].boot;
                self.cuts.unrecorded(d, boot, &cut_off);
            }
            self.crash(d, true);
            self.schedule(self.now + delay, Event::Restart(d));
            return;
        }
        self.disk_turn_end(d);
        if self.nodes[&d].retire_pending {
            self.stop_retired(d);
            return;
        }
        if let Some(rest) = held {
            self.nodes.get_mut(&d).expect("node").held = Some(rest);
        }
        if let Some(dev) = self.nodes[&d].device.as_ref() {
            let acting = dev.acting_coordinator();
            self.elections.acting(d, acting);
        }
        if let Some(dev) = self.nodes[&d].device.as_ref() {
            for v in dev.manager_views() {
                if v.state == MgrState::Manager {
                    self.checker.manager_role(d, v.store, v.epoch);
                }
            }
        }
        self.arm_timer(d);
    }

    fn arm_timer(&mut self, d: DeviceId) {
        let skew = self.skew_max_us;
        let node = self.nodes.get_mut(&d).expect("node");
        node.timer_generation += 1;
        let generation = node.timer_generation;
        let Some(t) = node.device.as_ref().and_then(Device::poll_timeout) else {
            return;
        };
        let at = node.clock.real_at(t, skew).max(self.now + 1);
        self.schedule(
            at,
            Event::Timer {
                device: d,
                generation,
            },
        );
    }

    fn observe(&mut self, d: DeviceId, tick: u64, ob: Observation) {
        self.trace(|| format!("{d} observe {ob:?}"));
        match ob {
            Observation::BecameManager {
                store,
                epoch,
                cause,
                ..
            } => {
                self.mix(0x1000 ^ d.0 ^ (store.0 as u64) << 8 ^ epoch.0 << 32);
                self.checker.became_manager(d, store, epoch);
                self.lock_takeover(d, store);
                if let Some(r) = self.restore.as_mut()
                    && let Some(t) =
                        (self.nodes[&d].device.as_ref()).and_then(|dev| dev.managed_tables(store))
                {
                    r.takeovers.push((store, d, t.clone()));
                }
                match cause {
                    EpochCause::Regeneration => self.report.regenerations += 1,
                    EpochCause::Migration => self.report.migrations += 1,
                    EpochCause::Relayout => self.report.relayouts += 1,
                }
            }
            Observation::ChunkServed { chunk, epoch } => {
                self.mix(0x2000 ^ chunk.serial << 8 ^ epoch.0 << 32);
                self.members.chunk_served(d, chunk);
                let node = &self.nodes[&d];
                let view = node.device.as_ref().and_then(|x| x.chunk_view(chunk));
                let local = node.clock.local(self.now);
                self.checker
                    .chunk_served(chunk, epoch, view, local, self.clock_drift);
            }
            Observation::WriteAcked {
                store,
                key,
                version,
                ..
            } => {
                self.mix(0x3000 ^ key << 8 ^ version.seq << 24 ^ version.epoch.0 << 48);
                self.report.writes_acked += 1;
                let chunks = self.nodes.values().flat_map(|n| n.written.chunks.values());
                self.checker.write_acked(store, key, version, chunks);
            }
            Observation::ChunkCommitted { chunk, epoch } => {
                self.mix(0x4000 ^ chunk.serial << 8 ^ epoch.0 << 32);
                if let Some(rec) = self.nodes[&d].written.chunks.get(&chunk) {
                    self.checker
                        .chunk_committed(chunk, rec.store, epoch, &rec.data);
                }
            }
            Observation::ChunkCollected { chunk } => {
                self.mix(0x5000 ^ chunk.serial);
                self.checker.chunk_collected(chunk);
            }
            Observation::SessionEnding {
                store,
                session,
                released,
                ..
            } => {
                self.mix(0x7000 ^ session.0 << 8);
                self.cuts.facts.session_touched(tick, store, session);
                self.locks
                    .session_ending(store, d, session, &released, self.now);
            }
            Observation::SessionEnded { store, session, .. } => {
                self.mix(0x8000 ^ session.0 << 8);
                self.report.locks.session_ends += 1;
                self.locks.session_ended(store, d, session, self.now);
            }
            Observation::Coordinator { term } => {
                self.mix(0x9000 ^ term.n << 8 ^ term.leader.0 << 40);
                self.elections.coordinator(d, term);
                let record = self.record_of(d);
                self.members.coordinator(d, term, &record);
            }
            Observation::CommandSent { term, .. } => {
                self.mix(0xa000 ^ term.n << 8);
                self.elections.command_sent(d, term);
            }
            Observation::CommandApplied { term, .. } => {
                self.mix(0xb000 ^ term.n << 8);
                self.elections.command_applied(d, term);
                let record = self.record_of(d);
                self.members.command_applied(d, term, &record);
            }
            Observation::CommandRefused { .. } => {
                self.mix(0xc000);
                self.elections.command_refused();
            }
            Observation::Members { members } => {
                self.mix(0xd000 ^ members.version.n << 8 ^ members.version.term.n << 32);
                self.members.adopted(self.now, d, &members);
                self.membership_note_done();
            }
            Observation::Retired => {
                self.mix(0xe000 ^ d.0);
                self.nodes.get_mut(&d).expect("node").retire_pending = true;
            }
            _ => self.mix(0x6000),
        }
    }

    fn send(&mut self, from: DeviceId, to: DeviceId, msg: Msg) {
        self.count_safetalk(from, to, &msg);
        self.count_manager_crash(from, to, &msg);
        if let Msg::Coord(tenure_core::election::coordinator::CoordMsg::Members {
            members, ..
        }) = &msg
        {
            // The coordinator's record, as it sends it.
            self.members.sent(self.now, from, members);
        }
        if let Msg::Election(m) = &msg
            && let Some(id) = crate::election::counted_id(m)
        {
            let running: Vec<DeviceId> = (self.nodes.keys().copied())
                .filter(|d| self.running(*d))
                .collect();
            let boot = self.nodes.get(&id.initiator).map_or(0, |n| n.boot);
            self.elections.message(self.now, id, boot, &running);
        }
        let seq = match crate::snapshot::carried(&msg) {
            Some(_) => self.cuts.send(from, to),
            None => 0,
        };
        let msg = Box::new(msg);
        let Some(boot) = self.nodes.get(&to).map(|n| n.boot) else {
            return;
        };
        match self.net.send(self.now, from, to) {
            Fate::Lost => self.report.faults.lost += 1,
            Fate::Deliver(times) => {
                if times.len() > 1 {
                    self.report.faults.duplicated += 1;
                }
                if let Some(at) = times.first() {
                    self.delay_sent(from, to, &msg, at.saturating_sub(self.now));
                }
                for at in times {
                    self.schedule(
                        at,
                        Event::Deliver {
                            from,
                            to,
                            boot,
                            seq,
                            msg: msg.clone(),
                        },
                    );
                }
            }
        }
    }

    /// Message cost accounting (seed 004 §8): SafeTalk's messages, local or remote.
    fn count_safetalk(&mut self, from: DeviceId, to: DeviceId, msg: &Msg) {
        // A message sent while a snapshot's marker is unacknowledged travels tagged: it
        // is counted as what it carries.
        let mut msg = msg;
        while let Msg::Snapshot(tenure_core::snapshot::SnapMsg::Tagged { msg: inner, .. }) = msg {
            msg = inner;
        }
        let apart = match msg {
            Msg::ToChunk {
                store,
                msg: ToChunk::Accept { .. } | ToChunk::Confirm { .. },
                ..
            } => self.manager_apart(from, *store),
            Msg::ToManager {
                store,
                msg: ToManager::Accepted { .. },
                ..
            } => self.manager_apart(to, *store),
            _ => return,
        };
        let st = if apart {
            &mut self.report.safetalk_apart
        } else {
            &mut self.report.safetalk
        };
        let kind = match msg {
            Msg::ToChunk {
                msg: ToChunk::Accept { epoch, ops, .. },
                ..
            } => {
                // One flush sends the same batch to every live chunk in a row: count it
                // once, by its first sequence number.
                let first = (*epoch, ops.first().map(|(v, _)| *v));
                if self.last_batch.insert(from, first) != Some(first) {
                    st.batches += 1;
                    st.ops += ops.len() as u64;
                }
                1
            }
            Msg::ToChunk {
                msg: ToChunk::Confirm { .. },
                ..
            } => 2,
            Msg::ToManager {
                msg: ToManager::Accepted { .. },
                ..
            } => 3,
            _ => return,
        };
        if from == to {
            st.local += 1;
        } else {
            match kind {
                1 => st.accept_remote += 1,
                2 => st.confirm_remote += 1,
                _ => st.accepted_remote += 1,
            }
        }
    }

    // ---- clients ------------------------------------------------------------------

    fn new_write(&mut self) {
        self.next_req += 1;
        let req = self.next_req;
        let r = &mut self.workload_rng;
        let store = StoreId(r.below(self.cfg.stores as u64) as u32);
        let key = r.below(self.knobs.keys_per_store);
        let via = DeviceId(1 + r.below(self.cfg.devices));
        let via = self.client_endpoint(via);
        self.writes.insert(
            req,
            ClientWrite {
                store,
                key,
                value: req,
                attempt: 0,
            },
        );
        self.report.writes_issued += 1;
        self.client_send(req, via);
    }

    /// Send (or resend) a write to `via`, with a client-side timeout.
    fn client_send(&mut self, req: u64, via: DeviceId) {
        let Some(w) = self.writes.get_mut(&req) else {
            return;
        };
        w.attempt += 1;
        let attempt = w.attempt;
        let boot = self.nodes[&via].boot;
        let lat = self.knobs.latency_min_us;
        self.schedule(self.now + lat, Event::ClientArrive { req, to: via, boot });
        self.schedule(
            self.now + CLIENT_TIMEOUT_US,
            Event::ClientTimeout { req, attempt },
        );
    }

    fn client_retry(&mut self, req: u64, hint: Option<DeviceId>) {
        let Some(w) = self.writes.get(&req) else {
            return;
        };
        if w.attempt >= CLIENT_HOPS_MAX {
            self.writes.remove(&req);
            return;
        }
        let via = match hint {
            Some(h) if self.nodes.contains_key(&h) => h,
            _ => {
                let drawn = DeviceId(1 + self.workload_rng.below(self.cfg.devices));
                self.client_endpoint(drawn)
            }
        };
        self.client_send(req, via);
    }

    fn reply(&mut self, d: DeviceId, req: u64, result: Result<Response, ClientError>) {
        self.trace(|| format!("{d} reply req {req}: {result:?}"));
        if self.lock_reqs.contains_key(&req) {
            self.delay_answered(d, req, &result);
            return self.lock_reply(d, req, result);
        }
        if self.is_obj_req(req) {
            return self.obj_reply(d, req, result);
        }
        match result {
            Ok(_) => {
                self.writes.remove(&req);
            }
            Err(ClientError::NotManager { hint }) => self.client_retry(req, hint),
            Err(ClientError::Unavailable { .. }) => self.client_retry(req, None),
            // Unknown store, and the lock service's errors (not a write's): give up.
            Err(_) => {
                self.writes.remove(&req);
            }
        }
    }

    // ---- the event loop -----------------------------------------------------------

    /// Process one event. Returns false when the queue is empty.
    fn step(&mut self) -> bool {
        let Some(((at, seq), ev)) = self.queue.pop_first() else {
            return false;
        };
        self.now = at;
        // A paused device handles nothing until it resumes: defer its inputs, in order.
        // At the end of the pause it resumes before the first of them (the rest of a batch
        // the pause stopped leaves first).
        if let Some(t) = ev.target()
            && self.nodes[&t].paused_until.is_some()
        {
            if self.nodes[&t].paused_until.is_some_and(|u| u <= self.now) {
                self.resume(t);
            }
            // Paused still, or again: the rest of a batch the pause stopped may have
            // stopped it again before its command left (simulator seed 1371: an input
            // handled then made the device coordinator of a newer term first).
            if let Some(until) = self.nodes[&t].paused_until
                && until > self.now
            {
                self.queue.insert((until, seq), ev);
                self.nodes
                    .get_mut(&t)
                    .expect("node")
                    .deferred
                    .push((until, seq));
                return true;
            }
        }
        self.report.events += 1;
        self.mix(at ^ ev.tag().rotate_left(17));
        match ev {
            Event::Deliver {
                from,
                to,
                boot,
                seq,
                msg,
            } => {
                let node = &self.nodes[&to];
                if node.boot != boot || node.device.is_none() {
                    self.trace(|| format!("{from}->{to} dropped (receiver restarted or down)"));
                } else if !self.net.open(from, to) {
                    self.report.faults.lost += 1;
                    self.trace(|| format!("{from}->{to} dropped (partition)"));
                } else {
                    self.trace(|| format!("{from}->{to} #{seq} {msg:?}"));
                    if seq > 0 {
                        // Timers already due fire first, as an input of their own: what
                        // leaves the device in the delivery's batch is then the message's
                        // doing (or the snapshot machine's).
                        self.fire_due_timers(to);
                        self.cuts.delivering(from, to, boot, seq, &msg);
                        self.delivering = Some((from, seq));
                    }
                    self.delay_delivered(from, to, &msg);
                    self.input(to, Input::Message { from, msg: *msg });
                    self.delivering = None;
                    let node = &self.nodes[&to];
                    let crashed = node.boot != boot || node.device.is_none();
                    if seq > 0 && !self.asynchronous_disk() {
                        self.cuts.processed(from, to, seq, None);
                    } else if seq > 0 && !crashed {
                        // A crash in the middle of the batch lost its open write group.
                        let group = node.pipe.groups();
                        self.cuts.processed(from, to, seq, Some(group));
                    }
                }
            }
            Event::ClientArrive { req, to, boot } => {
                let node = &self.nodes[&to];
                if node.boot == boot
                    && node.device.is_some()
                    && let Some(w) = self.writes.get(&req)
                {
                    self.cuts.facts.write_received(to, self.tick, w.value);
                    let req_in = Request::Write {
                        store: w.store,
                        key: w.key,
                        value: w.value,
                    };
                    self.trace(|| format!("client -> {to} req {req} {req_in:?}"));
                    self.input(
                        to,
                        Input::Request {
                            client: ClientId(1),
                            req_id: req,
                            req: req_in,
                        },
                    );
                }
            }
            Event::ClientTimeout { req, attempt } => {
                if self.writes.get(&req).is_some_and(|w| w.attempt == attempt) {
                    self.client_retry(req, None);
                }
            }
            Event::PolicyArrive { to, boot, cmd } => {
                if self.nodes[&to].boot == boot {
                    self.trace(|| format!("operator -> {to} {cmd:?}"));
                    self.input(to, Input::Policy(cmd));
                }
            }
            Event::Timer { device, generation } => {
                if self.nodes[&device].timer_generation == generation {
                    self.input(device, Input::Tick);
                }
            }
            Event::Nemesis => {
                if self.faults_on {
                    self.nemesis();
                    let t = self.exp_nemesis();
                    self.schedule(t, Event::Nemesis);
                }
            }
            Event::Workload if self.obj_quiet => {}
            Event::Workload => {
                self.new_write();
                let t = self.exp_workload();
                self.schedule(t, Event::Workload);
            }
            Event::Policy => {
                if self.faults_on {
                    self.policy();
                    let t = self.now + exp(&mut self.policy_rng, self.knobs.policy_mean_us);
                    self.schedule(t, Event::Policy);
                }
            }
            Event::Restart(d) => {
                if self.nodes[&d].device.is_none() {
                    self.boot(d);
                }
            }
            Event::Resume(d) => self.resume(d),
            Event::HealPartition(id) => {
                if self.net.partition.as_ref().is_some_and(|p| p.id == id) {
                    self.net.heal();
                    self.trace(|| format!("partition #{id} ends"));
                }
            }
            Event::Sample => {
                self.sample();
                self.check_retired_chunks();
                let timeout = self.nodes[&DeviceId(1)].cfg.snapshot.timeout;
                self.cuts.prune(self.now, timeout.as_micros() as u64);
                if !self.obj_clients.is_empty() {
                    self.obj_sample();
                }
                self.schedule(self.now + SAMPLE_US, Event::Sample);
            }
            Event::LockStep(_) if self.obj_quiet => {}
            Event::LockStep(c) => self.lock_step(c),
            Event::LockArrive { req, to, boot } => self.lock_arrive(req, to, boot),
            Event::LockTimeout { req, attempt } => self.lock_timeout(req, attempt),
            Event::KeepAliveDue(c, s) => self.keepalive_due(c, s),
            Event::ClientDeadline(c, s) => self.client_deadline_event(c, s),
            Event::ClientResume(c) => self.client_resume(c),
            Event::ObjStep(c) => self.obj_step(c),
            Event::ObjArrive { req, to, boot } => self.obj_arrive(req, to, boot),
            Event::ObjTimeout { req, attempt } => self.obj_timeout(req, attempt),
            Event::ObjKeepAlive(c, s) => self.obj_keepalive_due(c, s),
            Event::WatchCheck(w) => self.watch_check(w),
            Event::Snapshot => {
                if self.faults_on {
                    self.start_snapshot();
                    let t = self.now + exp(&mut self.snap_rng, self.snap_knobs.mean_us);
                    self.schedule(t, Event::Snapshot);
                }
            }
            Event::MembershipChange => {
                if self.faults_on {
                    self.membership_change();
                    let t = self.now + exp(&mut self.mem_rng, self.mem_knobs.change_mean_us);
                    self.schedule(t, Event::MembershipChange);
                }
            }
            Event::MembershipRepeat(i) => self.membership_send(i),
            Event::CrashManager => self.crash_manager(),
            Event::MigrateApart => self.migrate_apart(),
            Event::DiskSynced {
                device,
                boot,
                commit,
            } => self.disk_synced(device, boot, commit),
        }
        self.restore_pending();
        true
    }

    /// End a pause early: the inputs it deferred move up to now, in their order, so
    /// that nothing sent later overtakes them (channels are FIFO).
    fn resume_now(&mut self, d: DeviceId) {
        let node = self.nodes.get_mut(&d).expect("node");
        node.paused_until = Some(self.now);
        for key in std::mem::take(&mut node.deferred) {
            if let Some(ev) = self.queue.remove(&key) {
                self.queue.insert((self.now, key.1), ev);
            }
        }
        self.resume(d);
    }

    fn resume(&mut self, d: DeviceId) {
        let node = self.nodes.get_mut(&d).expect("node");
        if node.paused_until.is_some_and(|u| u <= self.now) {
            node.paused_until = None;
            node.deferred.clear();
            let held = node.held.take();
            self.trace(|| format!("{d} resumes"));
            // The rest of a batch the pause stopped leaves first.
            if let Some(rest) = held {
                self.process(d, rest);
            }
            // Let it notice how much time passed — unless the rest of the batch paused it
            // again, still holding a command: nothing after it may happen first
            // (simulator seed 1371: a tick run then made the device coordinator of a
            // newer term before its older term's command had left).
            let n = &self.nodes[&d];
            if n.device.is_some() && n.paused_until.is_none() {
                self.input(d, Input::Tick);
            }
        }
    }

    fn nemesis(&mut self) {
        let w = self.knobs.nemesis_weights;
        let total: u32 = w.iter().sum();
        if total == 0 {
            return;
        }
        let mut pick = self.nemesis_rng.below(total as u64) as u32;
        let mut i = 0;
        while pick >= w[i] {
            pick -= w[i];
            i += 1;
        }
        let ids: Vec<DeviceId> = self.nodes.keys().copied().collect();
        let n = ids.len() as u64;
        let stable = self
            .net
            .partition
            .as_ref()
            .is_none_or(|p| self.now >= p.since_us + self.knobs.partition_stability_min_us);
        match NEMESIS_ACTIONS[i] {
            a @ (NemesisAction::PartitionHalves | NemesisAction::PartitionIsolate) => {
                if !stable || n < 2 {
                    return;
                }
                let (mode, count) = if a == NemesisAction::PartitionHalves {
                    (
                        PartitionMode::RandomHalves,
                        &mut self.report.faults.partitions_halves,
                    )
                } else {
                    (
                        PartitionMode::IsolateOne,
                        &mut self.report.faults.partitions_isolate,
                    )
                };
                *count += 1;
                let one_way = self.nemesis_rng.chance(self.knobs.one_way_p);
                if one_way {
                    self.report.faults.one_way += 1;
                }
                let p = self
                    .net
                    .partition(&mut self.nemesis_rng, self.now, &ids, mode, one_way)
                    .clone();
                let dur = self.knobs.partition_stability_min_us
                    + self.nemesis_rng.below(self.knobs.partition_max_us);
                self.schedule(self.now + dur, Event::HealPartition(p.id));
                self.trace(|| {
                    format!(
                        "partition #{} {mode:?} side {:?} one_way={one_way} for {dur}us",
                        p.id, p.side
                    )
                });
            }
            NemesisAction::Heal => {
                if stable && self.net.partition.is_some() {
                    self.net.heal();
                    self.report.faults.heals += 1;
                    self.trace(|| "heal".to_string());
                }
            }
            NemesisAction::Crash => {
                let d = ids[self.nemesis_rng.below(n) as usize];
                let d = self.aim_at_coordinator(d);
                let d = self.aim_at_unsynced(d);
                if self.nodes[&d].device.is_none()
                    || (self.nodes[&d].paused_until.is_none()
                        && self.down_count() >= self.knobs.down_max)
                {
                    return;
                }
                let delay = 1 + self.nemesis_rng.below(self.knobs.restart_max_us);
                if self.nemesis_rng.chance(self.knobs.torn_crash_p) {
                    self.nodes.get_mut(&d).expect("node").torn_crash = Some(delay);
                    self.trace(|| format!("{d} will crash in its next batch"));
                } else {
                    self.crash(d, false);
                    self.schedule(self.now + delay, Event::Restart(d));
                }
            }
            NemesisAction::Pause => {
                let d = ids[self.nemesis_rng.below(n) as usize];
                let aimed = self.aim_at_coordinator(d);
                if !self.running(aimed) || self.down_count() >= self.knobs.down_max {
                    return;
                }
                let d = aimed;
                let dur = 1 + self.nemesis_rng.below(self.knobs.pause_max_us);
                self.nodes.get_mut(&d).expect("node").paused_until = Some(self.now + dur);
                self.report.faults.pauses += 1;
                self.schedule(self.now + dur, Event::Resume(d));
                self.trace(|| format!("{d} pauses for {dur}us"));
            }
        }
    }

    /// An operator's outside-policy command to a store's manager: migrate it to a random
    /// device, replace one of its chunks with a new one on a random device, or relayout
    /// (same chunks, or one fewer when it has more than the bootstrap replication).
    fn policy(&mut self) {
        let r = &mut self.policy_rng;
        let store = StoreId(r.below(self.cfg.stores as u64) as u32);
        let target = DeviceId(1 + r.below(self.cfg.devices));
        let kind = r.below(3);
        let pick = r.next_u64();
        let target = self.policy_target(target);
        let Some((mgr, _)) = self.manager_of(store) else {
            return;
        };
        let Some(view) = self.nodes[&mgr]
            .device
            .as_ref()
            .and_then(|d| d.manager_view(store))
        else {
            return;
        };
        let chunks: Vec<_> = view.metadata.chunks.iter().copied().collect();
        if chunks.is_empty() {
            return;
        }
        let cmd = match kind {
            0 => PolicyCommand::Migrate { store, to: target },
            1 => PolicyCommand::ReplaceChunk {
                store,
                old: chunks[(pick % chunks.len() as u64) as usize],
                device: target,
            },
            _ => {
                let mut md: Metadata = view.metadata.clone();
                if chunks.len() > self.cfg.replication {
                    md.chunks
                        .remove(&chunks[(pick % chunks.len() as u64) as usize]);
                }
                PolicyCommand::Relayout {
                    store,
                    metadata: md,
                }
            }
        };
        self.report.policy_commands += 1;
        let boot = self.nodes[&mgr].boot;
        let lat = self.knobs.latency_min_us;
        self.schedule(self.now + lat, Event::PolicyArrive { to: mgr, boot, cmd });
    }

    /// The running device in the `Manager` state for `store` with the highest epoch.
    pub fn manager_of(&self, store: StoreId) -> Option<(DeviceId, Epoch)> {
        self.nodes
            .iter()
            .filter(|(id, _)| self.running(**id))
            .filter_map(|(id, n)| {
                n.device
                    .as_ref()
                    .and_then(|d| d.manager_view(store))
                    .filter(|m| m.state == MgrState::Manager)
                    .map(|m| (*id, m.epoch))
            })
            .max_by_key(|(_, e)| *e)
    }

    /// Which stores have a working manager, and why the others do not: a running device
    /// in the `Manager` state whose epoch is the highest epoch any running chunk of the
    /// store holds, with a quorum of its layout in the regular-lease state for that epoch
    /// under it.
    pub fn managed(&self) -> BTreeMap<StoreId, Result<(), String>> {
        // store → highest epoch among running chunks, and per chunk (state, epoch, mgr).
        let mut top: BTreeMap<StoreId, Epoch> = BTreeMap::new();
        let mut chunks = BTreeMap::new();
        let mut managers: BTreeMap<StoreId, Vec<(DeviceId, Epoch, Metadata)>> = BTreeMap::new();
        for (id, n) in &self.nodes {
            if !self.running(*id) {
                continue;
            }
            let dev = n.device.as_ref().expect("running");
            for v in dev.chunk_views() {
                let e = top.entry(v.store).or_default();
                *e = (*e).max(v.epoch);
                chunks.insert(v.id, (v.state, v.epoch, v.lease_mgr));
            }
            for m in dev.manager_views() {
                if m.state == MgrState::Manager {
                    managers
                        .entry(m.store)
                        .or_default()
                        .push((*id, m.epoch, m.metadata));
                }
            }
        }
        let mut out = BTreeMap::new();
        for s in 0..self.cfg.stores {
            let store = StoreId(s);
            let epoch = top.get(&store).copied().unwrap_or_default();
            let verdict = match managers
                .get(&store)
                .and_then(|ms| ms.iter().find(|m| m.1 == epoch))
            {
                None => Err(format!("no running device manages it at {epoch}")),
                Some((mgr, _, md)) => {
                    let leased = md
                        .chunks
                        .iter()
                        .filter(|c| {
                            chunks.get(*c).is_some_and(|(st, e, m)| {
                                *st == ChunkState::RegularLease && *e == epoch && *m == Some(*mgr)
                            })
                        })
                        .count();
                    if 2 * leased > md.chunks.len() {
                        Ok(())
                    } else {
                        Err(format!(
                            "{mgr} manages {epoch} but only {leased} of {} chunks are leased",
                            md.chunks.len()
                        ))
                    }
                }
            };
            out.insert(store, verdict);
        }
        out
    }

    /// What happened in the [`STEP_WINDOW_US`] after each wall-clock step the seed drew
    /// (taken, or with `--clock-steps off` the same instants without a step).
    fn step_windows(&self) -> Vec<StepWindow> {
        let open = self
            .unmanaged_since
            .values()
            .map(|&since| (since, self.now));
        let outages: Vec<(u64, u64)> = self.outages.iter().copied().chain(open).collect();
        let stepped = self.nodes.values().any(|n| !n.clock.steps.is_empty());
        (self.drawn_steps.iter())
            .filter(|&&(_, at, _)| at < self.now)
            .map(|&(device, at, jump_us)| {
                let end = at + STEP_WINDOW_US;
                let longest_outage_us = (outages.iter())
                    .map(|&(since, until)| until.min(end).saturating_sub(since.max(at)))
                    .max()
                    .unwrap_or(0);
                let grants = (self.grant_times.iter())
                    .filter(|&&t| (at..end).contains(&t))
                    .count() as u64;
                StepWindow {
                    device,
                    at_us: at - START_US,
                    jump_us,
                    taken: stepped,
                    longest_outage_us,
                    grants,
                }
            })
            .collect()
    }

    /// Failover accounting (and, in the liveness phase, convergence): returns whether
    /// every store has a working manager.
    fn sample(&mut self) -> bool {
        let skews: Vec<i64> = self
            .nodes
            .values()
            .map(|n| n.clock.skew_us(self.now))
            .collect();
        let spread = skews.iter().max().unwrap_or(&0) - skews.iter().min().unwrap_or(&0);
        assert!(
            spread.unsigned_abs() <= self.clock_drift.as_micros() as u64,
            "simulator bug: clocks {spread}us apart, more than δ_c"
        );
        let managed = self.managed();
        let mut all = true;
        for (store, verdict) in managed {
            if verdict.is_ok() {
                self.ever_managed.insert(store);
                if let Some(since) = self.unmanaged_since.remove(&store) {
                    self.report.max_failover_us = self.report.max_failover_us.max(self.now - since);
                    self.outages.push((since, self.now));
                }
            } else {
                all = false;
                if self.ever_managed.contains(&store) {
                    self.unmanaged_since.entry(store).or_insert(self.now);
                }
            }
        }
        all
    }

    fn failed(&self) -> bool {
        !self.checker.violations.is_empty()
            || !self.locks.violations.is_empty()
            || !self.objcheck.violations.is_empty()
            || !self.elections.violations.is_empty()
            || !self.cuts.violations.is_empty()
            || !self.members.violations.is_empty()
    }

    /// Run both phases and return the report.
    pub fn run(mut self) -> RunReport {
        // Safety phase: faults on.
        let safety_end = START_US + self.cfg.safety_us;
        while self
            .queue
            .first_key_value()
            .is_some_and(|((t, _), _)| *t <= safety_end)
        {
            self.step();
            self.probe_manager_crash();
            if self.report.events > EVENTS_MAX && !self.failed() {
                self.event_storm();
            }
            if self.failed() {
                return self.finish();
            }
        }
        // Liveness phase: heal, restart, resume, faults off.
        self.now = self.now.max(safety_end);
        self.faults_on = false;
        self.net.faults_on = false;
        self.net.heal();
        self.trace(|| "liveness phase: heal, restart, resume; faults off".to_string());
        let ids: Vec<DeviceId> = self.nodes.keys().copied().collect();
        for d in ids {
            self.nodes.get_mut(&d).expect("node").torn_crash = None;
            if self.nodes[&d].device.is_none() {
                self.boot(d);
            } else if self.nodes[&d].paused_until.is_some() {
                self.resume_now(d);
            }
        }
        self.lock_clients_heal();
        self.liveness_election_start();
        self.liveness_membership_start();
        let start = self.now;
        let deadline = start + self.cfg.liveness_us;
        while self.now < deadline && !self.failed() && self.report.events <= EVENTS_MAX {
            let Some(((t, _), ev)) = self.queue.first_key_value() else {
                break;
            };
            let is_sample = matches!(ev, Event::Sample);
            let t = *t;
            if is_sample && t <= deadline {
                self.queue.pop_first();
                self.now = t;
                self.report.events += 1;
                let stores = self.sample();
                self.check_retired_chunks();
                let settled = self.membership_settled();
                if self.sample_election() && stores && settled.is_ok() {
                    let m = &mut self.members.stats.max_settle_us;
                    *m = (*m).max(self.now - start);
                    self.report.liveness_converged_us = Some(self.now - start);
                    self.trace(|| {
                        "liveness: every store has a working manager, one coordinator".to_string()
                    });
                    self.start_calm_snapshots();
                    self.settle_lock_clients();
                    if !self.failed() {
                        self.settle_objects();
                    }
                    if !self.failed() {
                        self.settle_snapshots();
                    }
                    return self.finish();
                }
                self.schedule(self.now + SAMPLE_US, Event::Sample);
                continue;
            }
            self.step();
        }
        if !self.failed() {
            self.election_not_converged();
            self.membership_not_converged(start);
            for (store, verdict) in self.managed() {
                if let Err(why) = verdict {
                    self.checker
                        .violations
                        .push(Violation::NoManager { store, why });
                }
            }
            if self.report.events > EVENTS_MAX {
                self.event_storm();
            }
        }
        self.finish()
    }

    /// Too many events: the run is stuck in a storm (a timer firing at once forever, a
    /// message loop), which no deployment would survive.
    fn event_storm(&mut self) {
        self.checker.violations.push(Violation::NoManager {
            store: StoreId(0),
            why: format!("event storm: more than {EVENTS_MAX} events"),
        });
    }

    /// Once every store has a manager again, lock clients must be answered within
    /// [`LOCK_SETTLE_US`]; then the whole lock history must be linearizable.
    fn settle_lock_clients(&mut self) {
        let until = self.now + LOCK_SETTLE_US;
        while !self.failed()
            && self.report.events <= EVENTS_MAX
            && self
                .queue
                .first_key_value()
                .is_some_and(|((t, _), _)| *t <= until)
        {
            if self.lock_clients.iter().all(|c| c.answered) {
                break;
            }
            self.step();
        }
        if self.failed() {
            return;
        }
        for (client, why) in self.lock_clients_stuck() {
            self.checker
                .violations
                .push(Violation::ClientStuck { client, why });
        }
        if !self.failed() {
            self.locks.linearizable(&crate::lincheck::Limits {
                max_steps: LIN_STEPS_MAX,
                ..Default::default()
            });
        }
    }

    fn finish(mut self) -> RunReport {
        self.report.sim_us = self.since_start();
        self.checker
            .violations
            .extend(std::mem::take(&mut self.locks.violations));
        // Correctness before liveness: the first violation decides the outcome.
        let (live, safe): (Vec<_>, Vec<_>) = std::mem::take(&mut self.objcheck.violations)
            .into_iter()
            .partition(|v| v.is_liveness());
        let (el_live, el_safe): (Vec<_>, Vec<_>) = std::mem::take(&mut self.elections.violations)
            .into_iter()
            .partition(|v| v.is_liveness());
        let (snap_live, snap_safe): (Vec<_>, Vec<_>) = std::mem::take(&mut self.cuts.violations)
            .into_iter()
            .partition(|v| v.is_liveness());
        let (mem_live, mem_safe): (Vec<_>, Vec<_>) = std::mem::take(&mut self.members.violations)
            .into_iter()
            .partition(|v| v.is_liveness());
        (self.checker.violations).extend(mem_safe.into_iter().map(Violation::Membership));
        (self.checker.violations).extend(el_safe.into_iter().map(Violation::Election));
        (self.checker.violations).extend(snap_safe.into_iter().map(Violation::Snapshot));
        (self.checker.violations).extend(safe.into_iter().map(Violation::Objects));
        (self.checker.violations).extend(live.into_iter().map(Violation::Objects));
        (self.checker.violations).extend(el_live.into_iter().map(Violation::Election));
        (self.checker.violations).extend(snap_live.into_iter().map(Violation::Snapshot));
        (self.checker.violations).extend(mem_live.into_iter().map(Violation::Membership));
        // Correctness first, in the order found.
        let (safe, live): (Vec<_>, Vec<_>) = std::mem::take(&mut self.checker.violations)
            .into_iter()
            .partition(|v| v.kind() == ViolationKind::Correctness);
        self.checker.violations = safe.into_iter().chain(live).collect();
        self.elections.finish();
        self.report.elections = self.elections.stats.clone();
        self.report.snapshots = self.cuts.stats.clone();
        self.report.membership = self.members.stats.clone();
        self.report.objects.checks = self.objcheck.counts.clone();
        self.report.lock_checks = self.locks.counts.clone();
        self.report.locks.history_ops = self.locks.ops.len() as u64;
        if self.cfg.keep_history {
            self.report.lock_history = self.locks.history();
        }
        self.report.violations = std::mem::take(&mut self.checker.violations);
        self.report.checks = self.checker.counts.clone();
        self.report.step_windows = self.step_windows();
        if let Some(v) = self.report.violations.first() {
            self.report.failed_at_us = Some(self.now - START_US);
            self.report.outcome = match v.kind() {
                ViolationKind::Correctness => Outcome::Correctness,
                ViolationKind::Liveness => Outcome::Liveness,
            };
            let vs: Vec<String> = self
                .report
                .violations
                .iter()
                .map(|v| v.to_string())
                .collect();
            for v in vs {
                self.trace(|| format!("VIOLATION {v}"));
            }
        }
        self.report.fingerprint = self.hash;
        self.report
    }
}

/// An exponentially distributed delay with mean `mean` (µs), at least 1.
fn exp(rng: &mut Rng, mean: u64) -> u64 {
    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    (-(1.0 - u).ln() * mean as f64) as u64 + 1
}

/// Run one seed. The configuration must be valid ([`SimConfig::validate`]).
pub fn run(cfg: SimConfig) -> RunReport {
    match cfg.world {
        WorldKind::Stores => World::new(cfg).run(),
        WorldKind::Lookup => crate::lookup::run(cfg),
    }
}

/// A device's wall-clock steps ([`crate::clock`]): one or two in the safety phase, each
/// forward or back by 30 s, an hour, or a length between the lease and three session
/// TTLs.
fn draw_steps(rng: &mut Rng, within_us: u64, lease_us: u64, ttl_us: u64) -> Vec<(u64, i64)> {
    let mut steps: Vec<(u64, i64)> = (0..1 + rng.below(2))
        .map(|_| {
            let at = START_US + rng.below(within_us.max(1));
            let size = match rng.below(3) {
                0 => 30_000_000,
                1 => 3_600_000_000,
                _ => lease_us + rng.below(3 * ttl_us.max(1)),
            } as i64;
            (at, if rng.below(2) == 0 { size } else { -size })
        })
        .collect();
    steps.sort_unstable();
    steps
}
