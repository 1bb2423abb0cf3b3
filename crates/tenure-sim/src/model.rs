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
//! `rebuild_is_faithful` (`tests/model_check.rs`) runs random schedules on long-lived
//! devices beside the rebuilt ones and compares every output, view and deadline
//! (nonces paired up, help destinations aside).
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
//! `tests/model_check.rs` for the bounds CI uses and the states they explore.

use stateright::{Model, Property};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;
use tenure_core::io::{DevicePersist, Request};
use tenure_core::layout::chunk::Chunk;
use tenure_core::layout::manager::Manager;
use tenure_core::layout::{ChunkState, MgrState};
use tenure_core::msg::{Msg, ToManager};
use tenure_core::{
    ChunkId, ClientId, ClusterConfig, Device, DeviceConfig, DeviceId, Epoch, Input, Instant,
    Observation, Output, PlantedBugs, StoreId, Timing,
};

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
                .filter(|r| d.up && r.state == MgrState::Manager)
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

impl PalladioModel {
    /// Build the model (runs the deterministic prefix for [`Start::Managed`]).
    pub fn new(cfg: ModelConfig) -> PalladioModel {
        let cluster = ClusterConfig {
            devices: DIRECTORS.to_vec(),
            stores: 1,
            replication: 3,
        };
        let dev_cfgs = (0..N_DEVICES)
            .map(|i| {
                let mut c = DeviceConfig::new(dev_id(i), cluster.clone());
                c.timing = cfg.timing.clone();
                c.run_policies = false;
                c.planted = cfg.planted.clone();
                c.lookup.enabled = false;
                c.election.enabled = false;
                c
            })
            .collect();
        let mut m = PalladioModel {
            cfg,
            dev_cfgs,
            init: Vec::new(),
        };
        let boot = m.bootstrap_state();
        let mut init = Vec::new();
        for s in m.cfg.starts.clone() {
            match s {
                Start::Bootstrap => init.push(boot.clone()),
                Start::Managed => init.push(m.managed_state(&boot)),
            }
        }
        m.init = init;
        m
    }

    fn seed(d: DeviceId) -> u64 {
        0x5eed_0000 + d.0
    }

    /// Every device's first boot at time 0 (plus one origin offset so nothing is at 0).
    fn bootstrap_state(&self) -> State {
        let director = self.dev_cfgs[0].cluster.preferred_manager(STORE);
        let mut s = State {
            now: Instant(1_000_000),
            devices: Vec::new(),
            net: Vec::new(),
            became: BTreeMap::new(),
            max_epoch: Epoch(0),
            epoch_regressed: false,
            first_mgr: None,
            first_mgr_crashed: false,
            regenerated: false,
            served: false,
            bad_serve: None,
            crashes: 0,
            glitches: 0,
            writes: 0,
            digest: 0,
        };
        // The chunk records come from the core's own first boot on a cluster of just the
        // chunk hosts (one chunk each, epoch 1); only the last lease manager is changed to
        // the preferred director. Directors boot with an empty disk past its first boot.
        let hosts = ClusterConfig::new(CHUNK_HOSTS.len() as u64, 1, CHUNK_HOSTS.len());
        for i in 0..N_DEVICES {
            let d = dev_id(i);
            let mut disk = if CHUNK_HOSTS.contains(&d) {
                let mut cfg = DeviceConfig::new(d, hosts.clone());
                cfg.lookup.enabled = false;
                cfg.election.enabled = false;
                let (dev, _) = Device::new(cfg, DevicePersist::default(), s.now, 0);
                dev.persistent()
            } else {
                DevicePersist {
                    next_serial: hosts.first_free_serial(),
                    chunks: BTreeMap::new(),
                    lookup: BTreeMap::new(),
                    blocks: BTreeMap::new(),
                    term: Default::default(),
                    members: None,
                    snapshots: Vec::new(),
                }
            };
            for c in disk.chunks.values_mut() {
                c.lease_mgr = Some(director);
            }
            s.devices.push(DeviceSnap {
                up: false,
                chunks: Vec::new(),
                manager: None,
                disk,
                deadline: None,
                digest: 0,
            });
        }
        for i in 0..N_DEVICES {
            self.boot(&mut s, dev_id(i), &mut None);
        }
        s.seal()
    }

    /// Deterministic, fault-free run from bootstrap until a director manages the store at
    /// epoch 2 with every chunk regularly leased and nothing in flight.
    fn managed_state(&self, boot: &State) -> State {
        let mut s = boot.clone();
        for _ in 0..10_000 {
            let mgr = s.live_managers();
            let leased = s
                .devices
                .iter()
                .flat_map(|d| &d.chunks)
                .filter(|c| c.state == ChunkState::RegularLease)
                .count();
            if mgr.len() == 1 && leased == CHUNK_HOSTS.len() && s.net.is_empty() {
                return s;
            }
            let mut acts = Vec::new();
            self.actions(&s, &mut acts);
            let a = acts
                .iter()
                .find(|a| matches!(a, Action::Deliver { .. }))
                .or_else(|| acts.iter().find(|a| matches!(a, Action::Advance)))
                .expect("the fault-free prefix got stuck")
                .clone();
            s = self.next_state(&s, a).expect("step");
        }
        panic!("no manager after the deterministic prefix");
    }

    /// Whether `a` and `b` can talk under the configured partition.
    pub fn connected(&self, a: DeviceId, b: DeviceId) -> bool {
        let p = &self.cfg.partition;
        p.is_empty() || p.iter().any(|g| g.contains(&a) && g.contains(&b))
    }

    /// The devices an in-flight message may be delivered to now.
    fn receivers(&self, s: &State, e: &Envelope) -> Vec<DeviceId> {
        let cands: &[DeviceId] = match &e.to {
            Dest::Device(d) => std::slice::from_ref(d),
            Dest::AnyDirector => &DIRECTORS,
        };
        cands
            .iter()
            .copied()
            .filter(|d| s.devices[idx(*d)].up && self.connected(e.from, *d))
            .collect()
    }

    /// The oldest in-flight message that some live device can receive.
    fn first_deliverable(&self, s: &State) -> Option<usize> {
        s.net.iter().position(|e| !self.receivers(s, e).is_empty())
    }

    fn cfg_of(&self, d: DeviceId) -> DeviceConfig {
        self.dev_cfgs[idx(d)].clone()
    }

    /// Boot `d` from its disk (first boot or restart).
    fn boot(&self, s: &mut State, d: DeviceId, mirror: &mut Option<&mut Mirror>) {
        let disk = s.devices[idx(d)].disk.clone();
        let (mut dev, out) = Device::new(self.cfg_of(d), disk.clone(), s.now, Self::seed(d));
        if let Some(m) = mirror {
            let (live, _) = Device::new(self.cfg_of(d), disk, s.now, Self::seed(d));
            m.devs[idx(d)] = Some(live);
        }
        s.devices[idx(d)].up = true;
        self.absorb(s, d, out, &[]);
        self.snapshot(s, d, &mut dev);
    }

    /// Rebuild a live device from its snapshot.
    fn rebuild(&self, s: &State, d: DeviceId) -> Device {
        let snap = &s.devices[idx(d)];
        let disk = DevicePersist {
            next_serial: snap.disk.next_serial,
            chunks: snap.chunks.iter().map(|c| (c.p.id, c.p.clone())).collect(),
            lookup: BTreeMap::new(),
            blocks: BTreeMap::new(),
            term: Default::default(),
            members: None,
            snapshots: Vec::new(),
        };
        // Transaction ids are nonces drawn from the device's generator: seeding it from the
        // device's state and the clock keeps them a function of the state (as stateright
        // needs) and distinct across the device's transactions.
        let seed = tenure_core::rng::mix64(snap.digest ^ s.now.0.rotate_left(32));
        let (mut dev, _) = Device::new(self.cfg_of(d), disk, s.now, seed);
        for c in &snap.chunks {
            *dev.chunk_mut(c.p.id).expect("chunk rebuilt") = c.clone();
        }
        if let Some(m) = &snap.manager {
            *dev.manager_mut(STORE) = m.clone();
        }
        dev
    }

    fn snapshot(&self, s: &mut State, d: DeviceId, dev: &mut Device) {
        let ids: Vec<ChunkId> = dev.chunk_views().iter().map(|v| v.id).collect();
        let chunks = ids
            .iter()
            .map(|id| dev.chunk_mut(*id).expect("chunk").clone())
            .collect();
        let deadline = dev.poll_timeout();
        let m = dev.manager_mut(STORE).clone();
        let manager = (m.state != MgrState::None || m.forwarding.is_some()).then_some(m);
        let snap = &mut s.devices[idx(d)];
        snap.chunks = chunks;
        snap.manager = manager;
        snap.deadline = deadline;
        snap.reseal();
    }

    /// One input to a live device.
    fn step(&self, s: &mut State, d: DeviceId, input: Input, mirror: &mut Option<&mut Mirror>) {
        let mut dev = self.rebuild(s, d);
        let before = s.devices[idx(d)].chunks.clone();
        let live_out = mirror.as_mut().map(|m| {
            let input = m.translate(input.clone());
            let live = m.devs[idx(d)].as_mut().expect("mirror device up");
            live.handle(s.now, input)
        });
        let out = dev.handle(s.now, input);
        if let (Some(m), Some(lo)) = (mirror.as_mut(), live_out) {
            m.compare(d, &dev, &out, &lo);
        }
        self.absorb(s, d, out, &before);
        self.snapshot(s, d, &mut dev);
    }

    /// Apply a device's outputs to the model: sends, persists, observations.
    fn absorb(&self, s: &mut State, d: DeviceId, out: Vec<Output>, before: &[Chunk]) {
        for o in out {
            match o {
                Output::Send { to, msg } => {
                    let to = match &msg {
                        Msg::ToManager {
                            msg: ToManager::Help { .. },
                            ..
                        } => Dest::AnyDirector,
                        _ => Dest::Device(to),
                    };
                    if let Dest::Device(t) = to
                        && (!s.devices[idx(t)].up || !self.connected(d, t))
                    {
                        continue;
                    }
                    let mut h = DefaultHasher::new();
                    debug_digest(&mut h, &(d, to, &msg));
                    let e = Envelope {
                        key: h.finish(),
                        from: d,
                        to,
                        msg,
                    };
                    s.net.push(e);
                }
                Output::Persist(op) => s.devices[idx(d)].disk.apply(&op),
                Output::Observe(Observation::BecameManager { store, epoch, .. }) => {
                    debug_assert_eq!(store, STORE);
                    s.became.entry(epoch).or_default().insert(d);
                    if epoch <= s.max_epoch {
                        s.epoch_regressed = true;
                    }
                    s.max_epoch = s.max_epoch.max(epoch);
                    if s.first_mgr.is_none() {
                        s.first_mgr = Some(d);
                    }
                    if s.first_mgr_crashed && epoch > Epoch(2) {
                        s.regenerated = true;
                    }
                }
                Output::Observe(Observation::ChunkServed { chunk, epoch }) => {
                    s.served = true;
                    let drift = self.cfg.timing.clock_drift;
                    let ok = before.iter().find(|c| c.p.id == chunk).is_some_and(|c| {
                        c.state == ChunkState::RegularLease
                            && c.p.epoch == epoch
                            && c.lease_expiry.is_some_and(|e| s.now < e - drift)
                    });
                    if !ok && s.bad_serve.is_none() {
                        let st = before.iter().find(|c| c.p.id == chunk).map(|c| c.view());
                        s.bad_serve = Some(format!("{chunk} served {epoch} while {st:?}"));
                    }
                }
                Output::Observe(_)
                | Output::Reply { .. }
                | Output::SetTimer(_)
                | Output::LookupEvent(_)
                | Output::ObjectEvents { .. }
                | Output::WatchEnded { .. }
                | Output::SnapshotStarted { .. }
                | Output::SnapshotPart(_)
                | Output::SnapshotEnded { .. } => {}
            }
        }
    }

    /// Path-independent checks of a state (used by the properties).
    pub fn one_manager_per_epoch(s: &State) -> bool {
        s.became.values().all(|ds| ds.len() <= 1)
            && s.live_managers().values().all(|ds| ds.len() <= 1)
    }
}

impl Model for PalladioModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        self.init.clone()
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let can_glitch = s.glitches < self.cfg.max_glitches;
        let first = self.first_deliverable(s);
        for (i, e) in s.net.iter().enumerate() {
            if Some(i) == first || can_glitch {
                for to in self.receivers(s, e) {
                    actions.push(Action::Deliver {
                        msg: i,
                        from: e.from,
                        to,
                    });
                }
            }
            if can_glitch {
                actions.push(Action::Drop { msg: i });
            }
        }
        if s.earliest_deadline().is_some() && (first.is_none() || can_glitch) {
            actions.push(Action::Advance);
        }
        for (i, d) in s.devices.iter().enumerate() {
            let id = dev_id(i);
            if d.up && s.crashes < self.cfg.max_crashes && self.cfg.crashable.contains(&id) {
                actions.push(Action::Crash(id));
            }
            if !d.up {
                actions.push(Action::Restart(id));
            }
        }
        if s.writes < self.cfg.max_writes {
            // A write at a device that is not the manager is only answered `NotManager`.
            for (i, d) in s.devices.iter().enumerate() {
                if d.up
                    && d.manager
                        .as_ref()
                        .is_some_and(|m| m.state == MgrState::Manager)
                {
                    actions.push(Action::Write(dev_id(i)));
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        self.apply(last, action, &mut None)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("at most one manager per (store, epoch)", |_, s: &State| {
                PalladioModel::one_manager_per_epoch(s)
            }),
            Property::always("manager epochs strictly increase", |_, s: &State| {
                !s.epoch_regressed
            }),
            Property::always(
                "a chunk serves only in regular lease for its epoch",
                |_, s: &State| s.bad_serve.is_none(),
            ),
            Property::sometimes(
                "a manager is regenerated after the first crashed",
                |_, s: &State| s.regenerated,
            ),
            Property::sometimes("a chunk serves a write", |_, s: &State| s.served),
            Property::sometimes("a store gets a manager", |_, s: &State| {
                !s.became.is_empty()
            }),
        ]
    }
}

impl PalladioModel {
    fn apply(
        &self,
        last: &State,
        action: Action,
        mirror: &mut Option<&mut Mirror>,
    ) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Deliver { msg, to, .. } => {
                if self.first_deliverable(&s) != Some(msg) {
                    s.glitches += 1;
                }
                let e = s.net.remove(msg);
                self.step(
                    &mut s,
                    to,
                    Input::Message {
                        from: e.from,
                        msg: e.msg,
                    },
                    mirror,
                );
            }
            Action::Drop { msg } => {
                s.net.remove(msg);
                s.glitches += 1;
            }
            Action::Advance => {
                let t = s.earliest_deadline()?;
                if self.first_deliverable(&s).is_some() {
                    s.glitches += 1;
                }
                s.now = s.now.max(t);
                for i in 0..N_DEVICES {
                    if s.devices[i].up && s.devices[i].deadline.is_some_and(|x| x <= t) {
                        self.step(&mut s, dev_id(i), Input::Tick, mirror);
                    }
                }
            }
            Action::Crash(d) => {
                let snap = &mut s.devices[idx(d)];
                snap.up = false;
                snap.chunks.clear();
                snap.manager = None;
                snap.deadline = None;
                snap.reseal();
                s.net.retain(|e| e.to != Dest::Device(d));
                s.crashes += 1;
                if let Some(m) = mirror {
                    m.devs[idx(d)] = None;
                }
                if s.first_mgr == Some(d) {
                    s.first_mgr_crashed = true;
                }
            }
            Action::Restart(d) => self.boot(&mut s, d, mirror),
            Action::Write(d) => {
                s.writes += 1;
                let n = s.writes as u64;
                let req = Request::Write {
                    store: STORE,
                    key: 1,
                    value: n,
                };
                self.step(
                    &mut s,
                    d,
                    Input::Request {
                        client: ClientId(0),
                        req_id: n,
                        req,
                    },
                    mirror,
                );
            }
        }
        Some(s.seal())
    }

    /// Fidelity check of the snapshot/rebuild scheme: a pseudo-random walk of `steps`
    /// model actions from every initial state, with long-lived devices run beside the
    /// rebuilt ones. After every input the outputs must match (`SetTimer` aside, and a
    /// `help`'s destination, which the model chooses) and so must the chunk and manager
    /// views and `poll_timeout`. Returns the number of inputs compared.
    pub fn fidelity_walk(&self, steps: usize, seed: u64) -> Result<usize, String> {
        let mut compared = 0;
        let mut rng = seed | 1;
        for init in &self.init {
            let mut mirror = Mirror {
                devs: (0..N_DEVICES).map(|_| None).collect(),
                err: None,
                compared: 0,
                tx_map: BTreeMap::new(),
            };
            // Long-lived twins of the initial devices: boot them where the model did, then
            // replay the state into them (their first inputs are compared from there on).
            for i in 0..N_DEVICES {
                if init.devices[i].up {
                    mirror.devs[i] = Some(self.rebuild(init, dev_id(i)));
                }
            }
            let mut s = init.clone();
            for _ in 0..steps {
                let mut acts = Vec::new();
                self.actions(&s, &mut acts);
                if acts.is_empty() {
                    break;
                }
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let a = acts[(rng % acts.len() as u64) as usize].clone();
                s = self.apply(&s, a, &mut Some(&mut mirror)).expect("step");
                if let Some(e) = mirror.err.take() {
                    return Err(e);
                }
            }
            compared += mirror.compared;
        }
        Ok(compared)
    }
}

/// Long-lived devices run beside the rebuilt ones ([`PalladioModel::fidelity_walk`]).
struct Mirror {
    devs: Vec<Option<Device>>,
    err: Option<String>,
    compared: usize,
    /// Transaction nonces: the model's (rebuilt devices') → the long-lived devices'.
    tx_map: BTreeMap<u64, u64>,
}

/// The transaction nonce a message carries, if any. (If the core adds a nonce to another
/// message, the fidelity walk reports a divergence until it is listed here.)
fn tx_of(msg: &mut Msg) -> Option<&mut u64> {
    use tenure_core::msg::{MgrMsg, ToChunk};
    match msg {
        Msg::ToChunk {
            msg:
                ToChunk::EpochTransition { tx, .. }
                | ToChunk::Commit { tx, .. }
                | ToChunk::Abort { tx, .. },
            ..
        } => Some(tx),
        Msg::ToManager {
            msg: ToManager::Vote { tx, .. } | ToManager::VoteAbort { tx, .. },
            ..
        } => Some(tx),
        Msg::Mgr {
            msg:
                MgrMsg::Handoff { tx, .. }
                | MgrMsg::HandoffReady { tx, .. }
                | MgrMsg::HandoffVote { tx, .. }
                | MgrMsg::HandoffCommit { tx, .. }
                | MgrMsg::HandoffAbort { tx, .. },
            ..
        } => Some(tx),
        _ => None,
    }
}

impl Mirror {
    /// A message for a long-lived device, with the model's nonces replaced by its own.
    fn translate(&self, input: Input) -> Input {
        let Input::Message { from, mut msg } = input else {
            return input;
        };
        if let Some(tx) = tx_of(&mut msg)
            && let Some(live) = self.tx_map.get(tx)
        {
            *tx = *live;
        }
        Input::Message { from, msg }
    }

    /// Pair up the nonces of matching sends.
    fn learn(&mut self, out: &[Output], live_out: &[Output]) {
        let sends = |o: &[Output]| -> Vec<Msg> {
            o.iter()
                .filter_map(|o| match o {
                    Output::Send { msg, .. } => Some(msg.clone()),
                    _ => None,
                })
                .collect()
        };
        for (mut a, mut b) in sends(out).into_iter().zip(sends(live_out)) {
            if let (Some(x), Some(y)) = (tx_of(&mut a), tx_of(&mut b)) {
                self.tx_map.entry(*x).or_insert(*y);
            }
        }
    }

    /// `tx: 123` → `tx: _` (nonces differ between the two worlds by construction).
    fn blank_tx(s: &str) -> String {
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(i) = rest.find("tx: ") {
            out.push_str(&rest[..i + 4]);
            rest = &rest[i + 4..];
            let digits = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            if digits > 0 {
                out.push('_');
                rest = &rest[digits..];
            }
        }
        out.push_str(rest);
        out
    }

    fn normalize(out: &[Output]) -> Vec<String> {
        out.iter()
            .filter(|o| !matches!(o, Output::SetTimer(_)))
            .map(|o| match o {
                Output::Send {
                    msg:
                        m @ Msg::ToManager {
                            msg: ToManager::Help { .. },
                            ..
                        },
                    ..
                } => Self::blank_tx(&format!("help {m:?}")),
                o => Self::blank_tx(&format!("{o:?}")),
            })
            .collect()
    }

    fn compare(&mut self, d: DeviceId, rebuilt: &Device, out: &[Output], live_out: &[Output]) {
        self.compared += 1;
        self.learn(out, live_out);
        let live = self.devs[idx(d)].as_ref().expect("mirror device up");
        let same = Self::normalize(out) == Self::normalize(live_out)
            && rebuilt.chunk_views() == live.chunk_views()
            && rebuilt.manager_views() == live.manager_views()
            && rebuilt.poll_timeout() == live.poll_timeout();
        if !same && self.err.is_none() {
            self.err = Some(format!(
                "{d}: rebuilt device diverged\nrebuilt: {:?}\nlive:    {:?}",
                Self::normalize(out),
                Self::normalize(live_out)
            ));
        }
    }
}
