//! The deterministic simulator: devices running the real `tenure-core` under a virtual
//! clock, a faulty network and a nemesis, with the checkers run on every event.
//!
//! One `u64` run seed drives everything (TigerBeetle's VOPR): the knobs, the network, the
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
//!   the run seed's slow disks (`world/disk.rs`), the writes not yet synced (the last
//!   record perhaps torn), while what waited for them never left. A pause freezes a
//!   device: every input addressed to it waits, in order, until it resumes.
//! - **Network**: see [`crate::net`] (per-pair FIFO, latency, loss, duplication,
//!   partitions, connections that die with a crash).
//! - **Nemesis**: a Poisson process of actions drawn with the run seed's weights:
//!   partition (random halves or isolate one; symmetric or one-way; healed after a
//!   stability time), heal, crash (restart after a delay; aimed, as the run seed says, at
//!   a device with writes not yet synced), pause (long enough to outlast leases); and
//!   disks whose commits stall, up to three leases.
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
//!
//! This file holds the world's state ([`World`], one `Node` per device), its constants
//! and the helpers every part uses (scheduling, tracing, the fingerprint). The rest, by
//! concern: `config` and `report` (what a run is asked and what it answers), `build`
//! (the world from its run seed), `event` and `step` (the queue and its dispatch), `run`
//! and `managed` (the phases and the working-manager sampler), `devices`, `observe` and
//! `send` (a device's inputs, outputs and messages), `nemesis` (faults and operator
//! commands), `disk` (slow and torn disks), and the workloads and their checkers'
//! glue: `writes`, `clients` and `pipeline` (locks), `objects`, `elections`,
//! `snapshots`, `membership`, `delay` and `mgr_crash` (measurements).

mod build;
mod clients;
mod config;
mod delay;
mod devices;
mod disk;
mod elections;
mod event;
mod managed;
mod membership;
mod mgr_crash;
mod nemesis;
mod objects;
mod observe;
mod pipeline;
mod report;
mod run;
mod send;
mod snapshots;
mod step;
mod writes;

use crate::checks::Checker;
use crate::clock::Clock;
use crate::knobs::{DiskKnobs, Knobs, LockKnobs};
use crate::lockcheck::LockChecker;
use crate::net::Network;
use clients::{LockClient, LockReq};
pub use config::{Captured, SimConfig, SimError, WorldKind};
pub use delay::UpdateDelay;
use event::Event;
pub use mgr_crash::ManagerCrash;
pub use nemesis::NemesisAction;
pub use report::{
    Faults, LockStats, Outcome, RunReport, STEP_WINDOW_US, SafeTalkCost, StepWindow, TransitionCost,
};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use tenure_core::io::{DevicePersist, Output};
use tenure_core::lockctl::SessionId;
use tenure_core::rng::{Rng, mix64};
use tenure_core::{Device, DeviceConfig, DeviceId, Epoch};
use writes::ClientWrite;

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

/// One simulated device: its process (while running), its disk, its clock and what
/// the world keeps about its incarnations.
struct Node {
    /// The running process (`None` while crashed or retired).
    device: Option<Device>,
    /// What survives a crash: the persists that became durable.
    disk: DevicePersist,
    /// Every persist the device output, durable or not: what its memory holds.
    written: DevicePersist,
    /// Persists and outputs on their way to the disk and out ([`disk`]).
    pipe: disk::Pipe,
    /// The configuration it boots with.
    cfg: DeviceConfig,
    /// Its wall and monotonic clocks.
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

/// The simulated world.
pub struct World {
    /// What the run was asked to do.
    cfg: SimConfig,
    /// What the run seed drew for the cluster, the network, the nemesis and the writes.
    knobs: Knobs,
    /// Draws the nemesis' actions and their targets.
    nemesis_rng: Rng,
    /// Draws the register writes.
    workload_rng: Rng,
    /// Draws the operator's commands.
    policy_rng: Rng,
    /// The simulated network.
    net: Network,
    /// Half the bound on two clocks' difference, `δ_c / 2` (µs).
    skew_max_us: u64,
    /// The bound on two clocks' difference, `δ_c`.
    clock_drift: std::time::Duration,
    /// Virtual real time (µs).
    now: u64,
    /// The last event sequence number handed out.
    seq: u64,
    /// The events to come, by (time, sequence number).
    queue: BTreeMap<(u64, u64), Event>,
    /// The devices.
    nodes: BTreeMap<DeviceId, Node>,
    /// Faults are on (the safety phase of a run with faults): the nemesis, the operator's
    /// commands, snapshots and membership changes act.
    faults_on: bool,
    /// The store checkers.
    checker: Checker,
    /// The report being filled.
    report: RunReport,
    /// The last request id handed out (shared by every workload).
    next_req: u64,
    /// Register writes in flight, by request id.
    writes: BTreeMap<u64, ClientWrite>,
    /// What the run seed drew for the lock clients.
    lock_knobs: LockKnobs,
    /// Draws the lock clients' choices.
    lock_rng: Rng,
    /// Picks the clients that pipeline (a stream of its own: whether any client pipelines
    /// changes no other draw).
    pipe_rng: Rng,
    /// Picks each client's names when they are paths (a stream of its own, likewise).
    paths_rng: Rng,
    /// What the run seed drew for the disks.
    disk_knobs: DiskKnobs,
    /// Draws commit latencies, stalls and crash fates (a stream of its own, likewise).
    disk_rng: Rng,
    /// The lock clients, by number.
    lock_clients: Vec<LockClient>,
    /// The children recorded for sessions spanning stores, from the managers'
    /// observations: (home, session, child's store) → child.
    session_children: BTreeMap<(tenure_core::StoreId, SessionId, tenure_core::StoreId), SessionId>,
    /// Lock requests in flight, by request id.
    lock_reqs: BTreeMap<u64, LockReq>,
    /// The lock checkers and the lock history.
    locks: LockChecker,
    /// Per manager device, the last SafeTalk batch counted (epoch, first version).
    last_batch: BTreeMap<DeviceId, (Epoch, Option<tenure_core::ids::Version>)>,
    /// Update delay bookkeeping ([`delay`]).
    delay: delay::DelayTracker,
    /// The object clients, watchers and checkers ([`objects`]).
    obj: objects::ObjectWorld,
    /// The run is settling its objects: object clients, lock clients and the register
    /// workload start nothing new (the lock history was already checked).
    obj_quiet: bool,
    /// Stores without a working manager, and what the step windows are measured on
    /// ([`managed`]).
    avail: managed::Availability,
    /// The run's fingerprint so far (every event and observation mixed in).
    hash: u64,
    /// Counts every input and output the devices handle: orders records of snapshots
    /// against acknowledgements.
    tick: u64,
    /// The message being delivered, while its receiver handles it: (sender, number).
    delivering: Option<(DeviceId, u64)>,
    /// The election checker.
    elections: crate::election::ElectionChecker,
    /// The coordinator's election in the world ([`elections`]).
    el: elections::ElectionWorld,
    /// The snapshot checker.
    cuts: crate::snapshot::CutTracker,
    /// Snapshots and their restores in the world ([`snapshots`]).
    snap: snapshots::SnapshotWorld,
    /// This world is a cluster restored from a snapshot: no clients, no snapshots, and
    /// every takeover's tables kept for the restore check.
    restore: Option<crate::snapshot::Restored>,
    /// The membership checker.
    members: crate::membership::MembershipChecker,
    /// Membership changes in the world ([`membership`]).
    mem: membership::MembershipWorld,
}

impl World {
    /// The knobs this seed chose.
    pub fn knobs(&self) -> &Knobs {
        &self.knobs
    }

    /// Simulated time since the start of the run (µs).
    fn since_start(&self) -> u64 {
        self.now - START_US
    }

    /// Append a line to the trace, if one is recorded.
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

    /// Mix a value into the run's fingerprint.
    fn mix(&mut self, x: u64) {
        self.hash = mix64(self.hash ^ x);
    }

    /// When the nemesis acts next.
    fn exp_nemesis(&mut self) -> u64 {
        self.now + exp(&mut self.nemesis_rng, self.knobs.nemesis_mean_us)
    }

    /// When the next register write starts.
    fn exp_workload(&mut self) -> u64 {
        self.now + exp(&mut self.workload_rng, self.knobs.write_mean_us)
    }

    /// Queue an event at `at` (never in the past), after those already queued then.
    fn schedule(&mut self, at: u64, ev: Event) {
        self.seq += 1;
        self.queue.insert((at.max(self.now), self.seq), ev);
    }

    /// Whether `d`'s process is up and not paused.
    fn running(&self, d: DeviceId) -> bool {
        let n = &self.nodes[&d];
        n.device.is_some() && n.paused_until.is_none()
    }

    /// Devices crashed or paused (retired ones aside).
    fn down_count(&self) -> u64 {
        self.nodes
            .values()
            .filter(|n| !n.retired && (n.device.is_none() || n.paused_until.is_some()))
            .count() as u64
    }
}

/// An exponentially distributed delay with mean `mean` (µs), at least 1.
fn exp(rng: &mut Rng, mean: u64) -> u64 {
    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    (-(1.0 - u).ln() * mean as f64) as u64 + 1
}

/// Run one sim seed. The configuration must be valid ([`SimConfig::validate`]).
pub fn run(cfg: SimConfig) -> RunReport {
    match cfg.world {
        WorldKind::Stores => World::new(cfg).run(),
        WorldKind::Lookup => crate::lookup::run(cfg),
    }
}
