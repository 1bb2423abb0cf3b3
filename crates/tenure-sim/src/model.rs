//! Exhaustive (depth-bounded) model check of Palladio layout control (seed 000 §4–§5,
//! DESIGN §3 and §9 invariants 1–2) with [stateright].
//!
//! **Configuration.** One store ([`STORE`]) with three chunks, one on each of devices 1–3
//! ([`CHUNK_HOSTS`]), and two directors, devices 4 and 5 ([`DIRECTORS`]), which are the
//! only would-be managers: `ClusterConfig.devices` lists just the directors, so every
//! chunk's `help` goes to one of them and they contend for the store (precedence order,
//! better/lesser sets, `release`, `transfer lease`, `ack-conditional`). Persistent
//! records are built by hand (epoch 1, the directors' preferred device as last lease
//! manager) rather than by the rendezvous bootstrap, so the placement is exactly this.
//! Outside policies are off (`run_policies = false`): no relayout or migration.
//!
//! **What runs.** The real `tenure-core` [`Device`]s, unmodified. A model state holds, per
//! device, a snapshot of its chunk and manager state machines (`Chunk` and `Manager` are
//! `Clone + Debug`), its disk ([`DevicePersist`]) and whether it is up. Each step rebuilds
//! the one device it touches: `Device::new` from the snapshot's chunk records, then the
//! snapshot's `Chunk`s and `Manager` are put back in place through `chunk_mut` /
//! `manager_mut`; the device handles one input; its new state is snapshotted again. The
//! device's remaining private fields do not change behaviour here: `heard` is read only
//! by the outside policies (off), `last_timer` only decides whether a `SetTimer` is emitted
//! (ignored: the model asks `poll_timeout`), `next_serial` is on the disk, and the random
//! generator draws (a) the director a `help` goes to, which the model makes an explicit
//! choice instead (below), and (b) transaction nonces (`tx`), for which the rebuilt
//! device's generator is seeded from a digest of its snapshot and the clock, so nonces
//! are a function of the state yet differ between the device's transactions. The test
//! `rebuild_is_faithful` (`tests/integration/model_check.rs`) runs random schedules on
//! long-lived devices beside the rebuilt ones and compares every output, view and
//! deadline (nonces paired up, help destinations aside).
//!
//! **Nondeterminism (the actions).**
//! - `Deliver`: the network is *unordered* and *lossy*; every message sent is kept in
//!   send order. Delivering the oldest deliverable message is free; delivering any other
//!   (a reordering), dropping any message (`Drop`), or moving the clock on while a
//!   deliverable message is in flight (a delay past a timer) is a *glitch*, and a path
//!   may hold at most [`ModelConfig::max_glitches`] of them. This is delay-bounded search
//!   (as in CHESS's preemption bounding): the fault-free schedule is cheap, so the depth
//!   bound reaches whole regenerations, and every placement of the glitches along it is
//!   explored. A `help` is *anycast*: it may go to either live director whatever the
//!   chunk's generator picked (a free choice that over-approximates every seed), which is
//!   where the two would-be managers contend. Messages to a device that is down, or
//!   across the optional [`ModelConfig::partition`], are lost when sent; those in flight
//!   to a device when it crashes are lost too (its connections reset).
//! - `Advance`: time is one global virtual clock (perfect clocks, so `δ_c` is slack). The
//!   clock moves forward (never back) to the earliest `poll_timeout` of the live devices
//!   and every device due then handles `Tick`, in device order. Timers therefore fire in
//!   deadline order and time takes only the finitely many values deadlines produce.
//! - `Crash` (volatile state lost, disk kept; at most [`ModelConfig::max_crashes`], of
//!   the devices in [`ModelConfig::crashable`]), `Restart` (boot from the disk: every
//!   chunk newly awake, §4.2.5) and `Write` (a client write at the device managing the
//!   store, at most [`ModelConfig::max_writes`]) so the access protocol runs.
//!
//! **State identity.** stateright needs `State: Clone + Debug + Hash`; the core's types
//! are not `Hash`, so a state carries a 64-bit digest of the `Debug` rendering of
//! everything in it (clock, every device's snapshot and disk, the in-flight messages in
//! send order, the observation history the properties read, the budgets used), computed
//! once when the state is made (a device's part only when that device ran); `Hash` and
//! `Eq` use the digest. The core's maps are `BTreeMap`s, so the rendering is
//! deterministic.
//!
//! **Initial states.** [`Start::Bootstrap`]: every chunk has just booted (newly awake →
//! no lease) with its `help` in flight, so the directors contend for epoch 2.
//! [`Start::Managed`]: the state the fault-free schedule from bootstrap reaches once a
//! director manages the store at epoch 2 with all three chunks regularly leased
//! (renewals, writes, crashes and regeneration to epoch 3 are explored from there).
//!
//! **Properties.** `always` at most one manager per (store, epoch) — from every
//! `BecameManager` observed on the path and from the live manager roles; `always` the
//! epochs of successive `BecameManager`s strictly increase; `always` a chunk serves
//! (emits `ChunkServed`) only in the regular-lease state, for its current epoch, with a
//! lease still trusted (`now < expiry − δ_c`). `sometimes` a store gets a manager,
//! `sometimes` a manager is regenerated (a `BecameManager` at an epoch > 2 after the
//! first manager crashed) and `sometimes` a chunk serves a write, so no `always` passes
//! vacuously.
//!
//! **Bounds.** Depth (`target_max_depth`), the glitch, crash and write budgets. See
//! `tests/integration/model_check.rs` for the bounds CI uses and the states they explore.
//!
//! This file holds the configuration and the state; `devices` rebuilds and steps the
//! devices, `actions` is the stateright model, `fidelity` the rebuild scheme's check.
//!
//! [`Device`]: tenure_core::Device

mod actions;
mod devices;
mod fidelity;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;
use tenure_core::io::DevicePersist;
use tenure_core::layout::MgrState;
use tenure_core::layout::chunk::Chunk;
use tenure_core::layout::manager::Manager;
use tenure_core::msg::Msg;
use tenure_core::{DeviceConfig, DeviceId, Epoch, Instant, PlantedBugs, StoreId, Timing};

/// The one store of the model.
pub const STORE: StoreId = StoreId(0);
/// Devices holding the store's three chunks (one each).
pub const CHUNK_HOSTS: [DeviceId; 3] = [DeviceId(1), DeviceId(2), DeviceId(3)];
/// The two directors: the only devices chunks ask for help, hence the would-be managers.
pub const DIRECTORS: [DeviceId; 2] = [DeviceId(4), DeviceId(5)];
const N_DEVICES: usize = 5;

fn idx(d: DeviceId) -> usize {
    (d.0 - 1) as usize
}
fn dev_id(i: usize) -> DeviceId {
    DeviceId(i as u64 + 1)
}

/// Where the model starts exploring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Every chunk just booted at epoch 1; the directors contend for epoch 2.
    Bootstrap,
    /// A director manages the store at epoch 2, all chunks regularly leased (reached by a
    /// deterministic fault-free run from `Bootstrap`).
    Managed,
}

/// The model's bounds and switches.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    /// Timing of every device (small values keep the clock's range small).
    pub timing: Timing,
    /// Planted bugs (for the checker's own test).
    pub planted: PlantedBugs,
    /// Crashes allowed on a path.
    pub max_crashes: u8,
    /// Client writes allowed on a path.
    pub max_writes: u8,
    /// Network glitches allowed on a path: each loss of a message, each delivery of a
    /// message other than the oldest deliverable one, and each clock advance while a
    /// deliverable message is in flight (delaying it past a timer) costs one.
    pub max_glitches: u8,
    /// Devices that may crash.
    pub crashable: Vec<DeviceId>,
    /// Initial states.
    pub starts: Vec<Start>,
    /// A permanent partition: devices in different groups never hear each other (their
    /// messages are lost when sent). Empty: fully connected.
    pub partition: Vec<BTreeSet<DeviceId>>,
}

impl ModelConfig {
    /// Small timing: leases of 10 ms renewed after 6 ms, message timeouts of 2 ms; the
    /// help loop (5 ms) is slower than a manager's acquire timeout so contention settles.
    // The core's `Timing` grows new settings; those not listed keep their defaults.
    #[allow(clippy::needless_update)]
    pub fn small_timing() -> Timing {
        let ms = Duration::from_millis;
        Timing {
            lease: ms(10),
            renewal_period: ms(6),
            commit_window: ms(10),
            abort_window: ms(10),
            clock_drift: ms(1),
            msg_timeout: ms(2),
            help_wait: ms(5),
            transition_timeout: ms(4),
            transition_wait: ms(8),
            ack_timeout: ms(3),
            gather_rounds_max: 2,
            migrate_after: ms(1_000_000),
            liveness_window: ms(1_000_000),
            ..Timing::default()
        }
    }
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            timing: Self::small_timing(),
            planted: PlantedBugs::default(),
            max_crashes: 1,
            max_writes: 1,
            max_glitches: 2,
            crashable: CHUNK_HOSTS.iter().chain(&DIRECTORS).copied().collect(),
            starts: vec![Start::Bootstrap, Start::Managed],
            partition: Vec::new(),
        }
    }
}

/// Destination of an in-flight message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Dest {
    /// One device.
    Device(DeviceId),
    /// A `help`: whichever live director the model chooses.
    AnyDirector,
}

/// A message in flight.
#[derive(Clone, Debug)]
pub struct Envelope {
    /// Digest of the rest (hashed, in send order, into the state's digest).
    key: u64,
    /// Sender.
    pub from: DeviceId,
    /// Destination.
    pub to: Dest,
    /// The message.
    pub msg: Msg,
}

impl fmt::Debug for DeviceSnap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("up", &self.up)
            .field("chunks", &self.chunks)
            .field("manager", &self.manager)
            .field("disk", &self.disk)
            .finish()
    }
}

/// One device's state between steps.
#[derive(Clone)]
pub struct DeviceSnap {
    /// Whether the device is running.
    pub up: bool,
    /// Its chunks' state machines (empty while down).
    pub chunks: Vec<Chunk>,
    /// Its manager role for [`STORE`] (`None`: none, equivalent to `Manager::new`).
    pub manager: Option<Manager>,
    /// Its stable storage (survives a crash).
    pub disk: DevicePersist,
    /// `poll_timeout()` (derived; cached for `actions`).
    pub deadline: Option<Instant>,
    /// Digest of the rest (derived; cached so a step re-renders only the device it ran).
    digest: u64,
}

impl DeviceSnap {
    fn reseal(&mut self) {
        let mut h = DefaultHasher::new();
        debug_digest(&mut h, self);
        self.digest = h.finish();
    }
}

/// A state of the model.
#[derive(Clone, Debug)]
pub struct State {
    /// The global virtual clock.
    pub now: Instant,
    /// Devices 1..=5 (index = id − 1).
    pub devices: Vec<DeviceSnap>,
    /// Messages in flight, in send order.
    pub net: Vec<Envelope>,
    /// Every `BecameManager` observed on the path: epoch → devices.
    pub became: BTreeMap<Epoch, BTreeSet<DeviceId>>,
    /// Highest epoch a `BecameManager` has reported.
    pub max_epoch: Epoch,
    /// A `BecameManager` did not increase the epoch.
    pub epoch_regressed: bool,
    /// The first device observed (or set up) as manager.
    pub first_mgr: Option<DeviceId>,
    /// Whether it has crashed.
    pub first_mgr_crashed: bool,
    /// A `BecameManager` at epoch > 2 after the first manager crashed.
    pub regenerated: bool,
    /// A chunk emitted `ChunkServed`.
    pub served: bool,
    /// A chunk served outside a trusted regular lease for its epoch (description).
    pub bad_serve: Option<String>,
    /// Faults and writes so far.
    pub crashes: u8,
    /// Network glitches so far (see [`ModelConfig::max_glitches`]).
    pub glitches: u8,
    /// Writes submitted so far.
    pub writes: u8,
    digest: u64,
}

impl Hash for State {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.digest.hash(h);
    }
}
impl PartialEq for State {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest
    }
}
impl Eq for State {}

/// Feeds a `Debug` rendering into a hasher without allocating it.
struct HashWriter<'a>(&'a mut DefaultHasher);
impl fmt::Write for HashWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.write(s.as_bytes());
        Ok(())
    }
}
fn debug_digest(h: &mut DefaultHasher, v: &impl fmt::Debug) {
    write!(HashWriter(h), "{v:?}").expect("hash writer");
}

impl State {
    fn seal(mut self) -> State {
        let mut h = DefaultHasher::new();
        self.now.hash(&mut h);
        for d in &self.devices {
            d.digest.hash(&mut h);
        }
        for e in &self.net {
            e.key.hash(&mut h);
        }
        debug_digest(
            &mut h,
            &(
                &self.became,
                self.max_epoch,
                self.epoch_regressed,
                self.first_mgr,
                self.first_mgr_crashed,
                self.regenerated,
                self.served,
                &self.bad_serve,
            ),
        );
        (self.crashes, self.glitches, self.writes).hash(&mut h);
        self.digest = h.finish();
        self
    }

    /// Live devices in the manager state at each epoch.
    pub fn live_managers(&self) -> BTreeMap<Epoch, BTreeSet<DeviceId>> {
        let mut m: BTreeMap<Epoch, BTreeSet<DeviceId>> = BTreeMap::new();
        for (i, d) in self.devices.iter().enumerate() {
            if let Some(r) = d
                .manager
                .as_ref()
                .filter(|r| d.up && r.state() == MgrState::Manager)
            {
                m.entry(r.epoch).or_default().insert(dev_id(i));
            }
        }
        m
    }

    fn earliest_deadline(&self) -> Option<Instant> {
        self.devices
            .iter()
            .filter(|d| d.up)
            .filter_map(|d| d.deadline)
            .min()
    }
}

/// Nondeterministic steps.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Deliver in-flight message `msg` (an index into `State::net`) to `to`.
    Deliver {
        /// Index into `State::net`.
        msg: usize,
        /// Sender (for reading paths).
        from: DeviceId,
        /// Receiver.
        to: DeviceId,
    },
    /// Lose in-flight message `msg`.
    Drop {
        /// Index into `State::net`.
        msg: usize,
    },
    /// Move the clock forward to the earliest deadline of the live devices and fire the
    /// timers of every device due then (in device order).
    Advance,
    /// Crash a device (volatile state lost, disk kept).
    Crash(DeviceId),
    /// Restart a crashed device from its disk.
    Restart(DeviceId),
    /// A client write submitted at a director.
    Write(DeviceId),
}

/// The model: configuration plus the precomputed initial states.
pub struct PalladioModel {
    /// Bounds and switches.
    pub cfg: ModelConfig,
    dev_cfgs: Vec<DeviceConfig>,
    init: Vec<State>,
}
