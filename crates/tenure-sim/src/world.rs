//! The deterministic simulator: devices running the real `tenure-core` under a virtual
//! clock, a faulty network, and a nemesis, with the checkers run on every event.
//!
//! One `u64` seed drives everything (TigerBeetle's VOPR): the knobs, the network, the
//! nemesis, the workload and every device's own generator are forks of one PRNG, and the
//! event queue is ordered by (time, sequence), so `run(seed)` is a pure function.
//!
//! - **Clocks**: each device has its own clock, `local = real·(1+drift) + offset`, with
//!   offset and drift bounded so any two clocks stay within `δ_c` over the run; clocks
//!   run on while a device is down or paused.
//! - **Network**: per-pair FIFO channels (a message never overtakes an earlier one on the
//!   same pair, even when delayed), latency drawn per message, loss, duplication where
//!   the seed allows it, symmetric and one-way partitions.
//! - **Nemesis**: partitions (random halves, isolate one), crash (volatile state lost, the
//!   simulated disk kept) with restart after a delay, process pause (no input handled,
//!   clock running, possibly past every lease), heal.
//! - **Workload**: client writes through random devices (following `NotManager` hints),
//!   and outside-policy commands (migrations, chunk replacements).
//! - **Phases**: a safety phase with faults, then a liveness phase (heal, restart, resume,
//!   faults off) in which every store must regain a manager within a bound.

use crate::checks::{Checker, Violation};
use crate::knobs::Knobs;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use tenure_core::io::{
    ClientError, DevicePersist, EpochCause, Input, Observation, Output, PolicyCommand, Request,
};
use tenure_core::layout::{ChunkState, MgrState};
use tenure_core::msg::Msg;
use tenure_core::rng::Rng;
use tenure_core::{ClientId, ClusterConfig, Device, DeviceConfig, DeviceId, Epoch, Instant, PlantedBugs, StoreId};

/// What a run is asked to do.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The seed.
    pub seed: u64,
    /// Devices.
    pub devices: u64,
    /// Stores.
    pub stores: u32,
    /// Length of the safety phase (µs of simulated time).
    pub safety_us: u64,
    /// Bound on the liveness phase (µs).
    pub liveness_us: u64,
    /// Planted bugs.
    pub planted: PlantedBugs,
    /// Record an event trace.
    pub trace: bool,
}

impl SimConfig {
    /// Defaults for one seed.
    pub fn new(seed: u64) -> SimConfig {
        SimConfig {
            seed,
            devices: 5,
            stores: 16,
            safety_us: 20_000_000,
            liveness_us: 30_000_000,
            planted: PlantedBugs::default(),
            trace: false,
        }
    }
}

/// Faults injected, by kind.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Faults {
    /// Partitions started.
    pub partitions: u64,
    /// One-way partitions among them.
    pub one_way: u64,
    /// Crashes.
    pub crashes: u64,
    /// Pauses.
    pub pauses: u64,
    /// Messages lost.
    pub lost: u64,
    /// Messages duplicated.
    pub duplicated: u64,
}

/// What one run did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunReport {
    /// The seed.
    pub seed: u64,
    /// Simulated time (µs).
    pub sim_us: u64,
    /// Events processed.
    pub events: u64,
    /// Faults injected.
    pub faults: Faults,
    /// Manager regenerations.
    pub regenerations: u64,
    /// Committed migrations.
    pub migrations: u64,
    /// Committed relayouts.
    pub relayouts: u64,
    /// Writes acknowledged.
    pub writes_acked: u64,
    /// Longest time a store was without a manager, ended by a regained manager (µs).
    pub max_failover_us: u64,
    /// Time the liveness phase took to converge (µs).
    pub liveness_converged_us: Option<u64>,
    /// Violations (empty on success).
    pub violations: Vec<Violation>,
    /// The event trace, if asked for.
    #[serde(skip)]
    pub trace: String,
    /// A hash of the trace of events (determinism check).
    pub fingerprint: u64,
}

#[derive(Clone, Debug)]
enum Event {
    Deliver { from: DeviceId, to: DeviceId, msg: Msg },
    Timer { device: DeviceId, generation: u64 },
    Nemesis,
    Workload,
    Policy,
    Restart(DeviceId),
    Resume(DeviceId),
    EndPartition(u64),
    Sample,
}

struct Node {
    device: Option<Device>,
    disk: DevicePersist,
    cfg: DeviceConfig,
    offset_us: i64,
    drift_ppm: i64,
    paused_until: Option<u64>,
    generation: u64,
    boots: u64,
}

impl Node {
    fn local(&self, real: u64) -> Instant {
        let skew = (real as i128 * self.drift_ppm as i128 / 1_000_000) as i64 + self.offset_us;
        Instant((real as i64 + skew).max(0) as u64)
    }
    /// Earliest real time at which the local clock reads at least `local`.
    fn real_at(&self, local: Instant) -> u64 {
        let l = local.0 as f64 - self.offset_us as f64;
        let r = (l / (1.0 + self.drift_ppm as f64 / 1e6)).ceil().max(0.0) as u64;
        let mut r = r.saturating_sub(2);
        while self.local(r) < local {
            r += 1;
        }
        r
    }
}

/// The simulated world.
pub struct World {
    cfg: SimConfig,
    knobs: Knobs,
    rng: Rng,
    net_rng: Rng,
    now: u64,
    seq: u64,
    queue: BTreeMap<(u64, u64), Event>,
    nodes: BTreeMap<DeviceId, Node>,
    fifo: BTreeMap<(DeviceId, DeviceId), u64>,
    blocked: BTreeSet<(DeviceId, DeviceId)>,
    partition_id: u64,
    faults_on: bool,
    checker: Checker,
    report: RunReport,
    next_req: u64,
    /// store → real time it lost its manager (while without one).
    unmanaged_since: BTreeMap<StoreId, u64>,
    hasher: u64,
}

impl World {
    /// Build the world for a configuration.
    pub fn new(cfg: SimConfig) -> World {
        let mut rng = Rng::new(cfg.seed ^ 0x7e4e_5e1d_0000_0001);
        let knobs = Knobs::draw(&mut rng);
        let net_rng = rng.fork();
        let cluster = ClusterConfig::new(cfg.devices, cfg.stores, 3);
        let drift = tenure_core::Timing::default().clock_drift.as_micros() as u64;
        let horizon = cfg.safety_us + cfg.liveness_us + 1;
        // |offset| ≤ δ/4 and drift·horizon ≤ δ/4, so any two clocks differ by ≤ δ.
        let drift_ppm_cap = ((drift / 4) as u128 * 1_000_000 / horizon as u128) as u64;
        let mut nodes = BTreeMap::new();
        for d in cluster.devices.clone() {
            let mut dc = DeviceConfig::new(d, cluster.clone());
            dc.planted = cfg.planted.clone();
            let ppm = knobs.drift_ppm_max.min(drift_ppm_cap);
            nodes.insert(
                d,
                Node {
                    device: None,
                    disk: DevicePersist::default(),
                    cfg: dc,
                    offset_us: rng.below(drift / 2 + 1) as i64 - (drift / 4) as i64,
                    drift_ppm: if ppm == 0 { 0 } else { rng.below(2 * ppm + 1) as i64 - ppm as i64 },
                    paused_until: None,
                    generation: 0,
                    boots: 0,
                },
            );
        }
        let mut w = World {
            report: RunReport {
                seed: cfg.seed,
                ..RunReport::default()
            },
            cfg,
            knobs,
            rng,
            net_rng,
            now: 0,
            seq: 0,
            queue: BTreeMap::new(),
            nodes,
            fifo: BTreeMap::new(),
            blocked: BTreeSet::new(),
            partition_id: 0,
            faults_on: true,
            checker: Checker::default(),
            next_req: 0,
            unmanaged_since: BTreeMap::new(),
            hasher: 0xcbf2_9ce4_8422_2325,
        };
        let ids: Vec<DeviceId> = w.nodes.keys().copied().collect();
        for d in ids {
            w.boot(d);
        }
        let knobs = format!("knobs {:?}", w.knobs);
        w.trace(|| knobs);
        let t = w.exp(w.knobs.nemesis_mean_us);
        w.schedule(t, Event::Nemesis);
        let t = w.exp(w.knobs.write_mean_us);
        w.schedule(t, Event::Workload);
        let t = w.exp(w.knobs.policy_mean_us);
        w.schedule(t, Event::Policy);
        w.schedule(100_000, Event::Sample);
        w
    }

    /// The knobs this seed chose.
    pub fn knobs(&self) -> &Knobs {
        &self.knobs
    }

    fn trace(&mut self, f: impl FnOnce() -> String) {
        if self.cfg.trace {
            let line = f();
            let _ = writeln!(self.report.trace, "{:>12} {line}", self.now);
        }
    }

    fn exp(&mut self, mean: u64) -> u64 {
        let u = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        self.now + (-(1.0 - u).ln() * mean as f64) as u64 + 1
    }

    fn schedule(&mut self, at: u64, ev: Event) {
        self.seq += 1;
        self.queue.insert((at.max(self.now), self.seq), ev);
    }

    fn boot(&mut self, d: DeviceId) {
        let now = self.now;
        let seed = self.rng.next_u64();
        let node = self.nodes.get_mut(&d).expect("node");
        node.boots += 1;
        let local = node.local(now);
        let (dev, out) = Device::new(node.cfg.clone(), node.disk.clone(), local, seed);
        node.device = Some(dev);
        node.paused_until = None;
        self.trace(|| format!("{d} boot"));
        self.process(d, out);
    }

    fn crash(&mut self, d: DeviceId) {
        let node = self.nodes.get_mut(&d).expect("node");
        if node.device.take().is_some() {
            node.generation += 1;
            self.report.faults.crashes += 1;
            self.trace(|| format!("{d} crash"));
        }
    }

    fn reachable(&self, from: DeviceId, to: DeviceId) -> bool {
        !self.blocked.contains(&(from, to))
    }

    /// Handle one device's outputs: persist, send, reply, observe (and check), timers.
    fn process(&mut self, d: DeviceId, out: Vec<Output>) {
        for o in out {
            match o {
                Output::Persist(op) => {
                    self.nodes.get_mut(&d).expect("node").disk.apply(&op);
                }
                Output::Send { to, msg } => self.send(d, to, msg),
                Output::Reply { req_id, result, .. } => {
                    if let Err(ClientError::NotManager { hint: Some(h) }) = &result {
                        // The client follows the hint once, to exercise redirects.
                        if req_id % 2 == 0 {
                            let store = StoreId((req_id / 2 % self.cfg.stores as u64) as u32);
                            self.request(*h, store, req_id + 1);
                        }
                    }
                }
                Output::SetTimer(_) => {}
                Output::Observe(ob) => self.observe(d, ob),
            }
        }
        self.arm_timer(d);
    }

    fn arm_timer(&mut self, d: DeviceId) {
        let node = self.nodes.get_mut(&d).expect("node");
        node.generation += 1;
        let generation = node.generation;
        let Some(dev) = node.device.as_ref() else { return };
        if let Some(t) = dev.poll_timeout() {
            let at = node.real_at(t).max(self.now + 1);
            self.schedule(at, Event::Timer { device: d, generation });
        }
    }

    fn observe(&mut self, d: DeviceId, ob: Observation) {
        self.trace(|| format!("{d} {ob:?}"));
        let drift = tenure_core::Timing::default().clock_drift;
        match ob {
            Observation::BecameManager { store, epoch, cause, .. } => {
                self.checker.became_manager(d, store, epoch);
                match cause {
                    EpochCause::Regeneration => self.report.regenerations += 1,
                    EpochCause::Migration => self.report.migrations += 1,
                    EpochCause::Relayout => self.report.relayouts += 1,
                }
            }
            Observation::ChunkServed { chunk, epoch } => {
                let node = &self.nodes[&d];
                let view = node.device.as_ref().and_then(|x| x.chunk_view(chunk));
                let local = node.local(self.now);
                self.checker.chunk_served(chunk, epoch, view, local, drift);
            }
            Observation::WriteAcked { store, key, version, .. } => {
                self.report.writes_acked += 1;
                let chunks = self.nodes.values().filter_map(|n| n.device.as_ref()).flat_map(|dev| {
                    dev.chunk_views().into_iter().filter_map(move |v| {
                        dev.chunk_record(v.id).map(|r| (v.id, r.store, r.epoch, &r.data))
                    })
                });
                let chunks: Vec<_> = chunks.collect();
                self.checker.write_acked(store, key, version, chunks.into_iter());
            }
            Observation::ChunkCommitted { chunk, epoch } => {
                if let Some(rec) = self.nodes[&d].device.as_ref().and_then(|x| x.chunk_record(chunk)) {
                    let (store, data) = (rec.store, rec.data.clone());
                    self.checker.chunk_committed(chunk, store, epoch, &data);
                }
            }
            _ => {}
        }
    }

    fn send(&mut self, from: DeviceId, to: DeviceId, msg: Msg) {
        if !self.nodes.contains_key(&to) {
            return;
        }
        if self.faults_on && self.net_rng.chance(self.knobs.loss) {
            self.report.faults.lost += 1;
            return;
        }
        let k = &self.knobs;
        let lat = k.latency_min_us + self.net_rng.below(k.latency_max_us - k.latency_min_us + 1);
        // FIFO per pair: never deliver before an earlier message on the same channel.
        let last = self.fifo.get(&(from, to)).copied().unwrap_or(0);
        let at = (self.now + lat).max(last);
        self.fifo.insert((from, to), at);
        let dup = self.faults_on && self.net_rng.chance(self.knobs.duplicate);
        self.schedule(at, Event::Deliver { from, to, msg: msg.clone() });
        if dup {
            self.report.faults.duplicated += 1;
            self.schedule(at, Event::Deliver { from, to, msg });
        }
    }

    fn request(&mut self, via: DeviceId, store: StoreId, req_id: u64) {
        let key = self.rng.below(64);
        let value = self.rng.next_u64();
        self.input(
            via,
            Input::Request {
                client: ClientId(0),
                req_id,
                req: Request::Write { store, key, value },
            },
        );
    }

    fn input(&mut self, d: DeviceId, input: Input) {
        let node = self.nodes.get_mut(&d).expect("node");
        let local = node.local(self.now);
        let Some(dev) = node.device.as_mut() else { return };
        let out = dev.handle(local, input);
        self.process(d, out);
    }

    fn fingerprint(&mut self, a: u64, b: u64) {
        for x in [a, b] {
            self.hasher ^= x;
            self.hasher = self.hasher.wrapping_mul(0x0100_0000_01b3);
        }
    }

    /// Process one event. Returns false when the queue is empty.
    fn step(&mut self) -> bool {
        let Some(((at, seq), ev)) = self.queue.pop_first() else {
            return false;
        };
        self.now = at;
        self.report.events += 1;
        self.fingerprint(at, seq);
        // A paused device handles nothing until it resumes: defer its inputs, in order.
        let target = match &ev {
            Event::Deliver { to, .. } => Some(*to),
            Event::Timer { device, .. } => Some(*device),
            _ => None,
        };
        if let Some(t) = target
            && let Some(until) = self.nodes[&t].paused_until
            && until > self.now
        {
            self.queue.insert((until, seq), ev);
            return true;
        }
        match ev {
            Event::Deliver { from, to, msg } => {
                if self.reachable(from, to) && self.nodes[&to].device.is_some() {
                    self.trace(|| format!("{from}->{to} {msg:?}"));
                    self.input(to, Input::Message { from, msg });
                }
            }
            Event::Timer { device, generation } => {
                if self.nodes[&device].generation == generation {
                    self.input(device, Input::Tick);
                }
            }
            Event::Nemesis => {
                if self.faults_on {
                    self.nemesis();
                    let t = self.exp(self.knobs.nemesis_mean_us);
                    self.schedule(t, Event::Nemesis);
                }
            }
            Event::Workload => {
                self.next_req += 2;
                let req_id = self.next_req;
                let store = StoreId((req_id / 2 % self.cfg.stores as u64) as u32);
                let via = DeviceId(1 + self.rng.below(self.cfg.devices));
                self.request(via, store, req_id);
                let t = self.exp(self.knobs.write_mean_us);
                self.schedule(t, Event::Workload);
            }
            Event::Policy => {
                if self.faults_on {
                    self.policy();
                    let t = self.exp(self.knobs.policy_mean_us);
                    self.schedule(t, Event::Policy);
                }
            }
            Event::Restart(d) => {
                if self.nodes[&d].device.is_none() {
                    self.boot(d);
                }
            }
            Event::Resume(d) => {
                let node = self.nodes.get_mut(&d).expect("node");
                if node.paused_until.is_some_and(|u| u <= self.now) {
                    node.paused_until = None;
                    self.trace(|| format!("{d} resume"));
                    // Let it notice how much time passed.
                    self.input(d, Input::Tick);
                }
            }
            Event::EndPartition(id) => {
                if id == self.partition_id {
                    self.blocked.clear();
                    self.trace(|| "heal".to_string());
                }
            }
            Event::Sample => {
                self.sample();
                self.schedule(self.now + 100_000, Event::Sample);
            }
        }
        true
    }

    fn nemesis(&mut self) {
        let w = self.knobs.weights;
        let total: u32 = w.iter().sum();
        let mut pick = self.rng.below(total as u64) as u32;
        let mut action = 0;
        while pick >= w[action] {
            pick -= w[action];
            action += 1;
        }
        let ids: Vec<DeviceId> = self.nodes.keys().copied().collect();
        let n = ids.len() as u64;
        match action {
            0 => {
                // partition: isolate one device, or random halves; maybe one-way
                let mut side: BTreeSet<DeviceId> = BTreeSet::new();
                if self.rng.chance(0.5) {
                    side.insert(ids[self.rng.below(n) as usize]);
                } else {
                    for d in &ids {
                        if self.rng.chance(0.5) {
                            side.insert(*d);
                        }
                    }
                }
                let one_way = self.knobs.one_way && self.rng.chance(0.5);
                self.blocked.clear();
                for a in &ids {
                    for b in &ids {
                        if side.contains(a) != side.contains(b) && (!one_way || side.contains(a)) {
                            self.blocked.insert((*a, *b));
                        }
                    }
                }
                self.partition_id += 1;
                self.report.faults.partitions += 1;
                if one_way {
                    self.report.faults.one_way += 1;
                }
                let id = self.partition_id;
                let dur = self.knobs.partition_min_us + self.rng.below(4_000_000);
                self.schedule(self.now + dur, Event::EndPartition(id));
                self.trace(|| format!("partition {side:?} one_way={one_way}"));
            }
            1 => {
                let d = ids[self.rng.below(n) as usize];
                self.crash(d);
                let delay = 1 + self.rng.below(self.knobs.restart_max_us);
                self.schedule(self.now + delay, Event::Restart(d));
            }
            2 => {
                let d = ids[self.rng.below(n) as usize];
                let dur = 1 + self.rng.below(self.knobs.pause_max_us);
                let node = self.nodes.get_mut(&d).expect("node");
                if node.device.is_some() && node.paused_until.is_none() {
                    node.paused_until = Some(self.now + dur);
                    self.report.faults.pauses += 1;
                    self.schedule(self.now + dur, Event::Resume(d));
                    self.trace(|| format!("{d} pause {dur}"));
                }
            }
            _ => {
                self.blocked.clear();
                self.trace(|| "heal".to_string());
            }
        }
    }

    /// Outside-policy commands from an operator: migrate a store, or replace a chunk.
    fn policy(&mut self) {
        let store = StoreId(self.rng.below(self.cfg.stores as u64) as u32);
        let Some((mgr, _)) = self.manager_of(store) else { return };
        let target = DeviceId(1 + self.rng.below(self.cfg.devices));
        let cmd = if self.rng.chance(0.5) {
            PolicyCommand::Migrate { store, to: target }
        } else {
            let md = self.nodes[&mgr].device.as_ref().and_then(|d| d.manager_view(store));
            let Some(md) = md else { return };
            let chunks: Vec<_> = md.metadata.chunks.iter().copied().collect();
            let old = chunks[self.rng.below(chunks.len() as u64) as usize];
            PolicyCommand::ReplaceChunk { store, old, device: target }
        };
        self.trace(|| format!("policy {mgr} {cmd:?}"));
        self.input(mgr, Input::Policy(cmd));
    }

    /// The device managing `store` with the highest epoch (Manager state), if any.
    pub fn manager_of(&self, store: StoreId) -> Option<(DeviceId, Epoch)> {
        self.nodes
            .iter()
            .filter_map(|(id, n)| {
                n.device
                    .as_ref()
                    .and_then(|d| d.manager_view(store))
                    .filter(|m| m.state == MgrState::Manager)
                    .map(|m| (*id, m.epoch))
            })
            .max_by_key(|(_, e)| *e)
    }

    /// Stores that have a working manager: in the manager state, at the newest epoch any
    /// chunk holds, with a quorum of that epoch's chunks regularly leased to it.
    fn managed(&self) -> BTreeSet<StoreId> {
        let mut best: BTreeMap<StoreId, (Epoch, usize, usize)> = BTreeMap::new();
        for n in self.nodes.values() {
            let Some(d) = n.device.as_ref() else { continue };
            if n.paused_until.is_some() {
                continue;
            }
            for v in d.chunk_views() {
                let e = best.entry(v.store).or_insert((v.epoch, 0, 0));
                if v.epoch > e.0 {
                    *e = (v.epoch, 0, 0);
                }
                if v.epoch == e.0 && v.state == ChunkState::RegularLease {
                    e.1 += 1;
                }
            }
        }
        let mut out = BTreeSet::new();
        for (store, (epoch, serving, _)) in best {
            if let Some((m, e)) = self.manager_of(store)
                && e == epoch
                && self.nodes[&m].paused_until.is_none()
            {
                let size = self.nodes[&m]
                    .device
                    .as_ref()
                    .and_then(|d| d.manager_view(store))
                    .map(|v| v.metadata.chunks.len())
                    .unwrap_or(3);
                if 2 * serving > size {
                    out.insert(store);
                }
            }
        }
        out
    }

    fn sample(&mut self) {
        let managed = self.managed();
        for s in 0..self.cfg.stores {
            let store = StoreId(s);
            if managed.contains(&store) {
                if let Some(since) = self.unmanaged_since.remove(&store) {
                    self.report.max_failover_us = self.report.max_failover_us.max(self.now - since);
                }
            } else {
                self.unmanaged_since.entry(store).or_insert(self.now);
            }
        }
    }

    /// Run both phases and return the report.
    pub fn run(mut self) -> RunReport {
        // Safety phase: faults on.
        while self.queue.first_key_value().is_some_and(|((t, _), _)| *t <= self.cfg.safety_us) {
            self.step();
            if !self.checker.violations.is_empty() {
                return self.finish();
            }
        }
        // Liveness phase: heal, restart, resume, faults off.
        self.now = self.now.max(self.cfg.safety_us);
        self.faults_on = false;
        self.blocked.clear();
        self.trace(|| "liveness phase".to_string());
        let ids: Vec<DeviceId> = self.nodes.keys().copied().collect();
        for d in ids {
            if self.nodes[&d].device.is_none() {
                self.boot(d);
            } else if self.nodes[&d].paused_until.is_some() {
                self.nodes.get_mut(&d).expect("node").paused_until = Some(self.now);
                self.schedule(self.now, Event::Resume(d));
            }
        }
        let start = self.now;
        let deadline = start + self.cfg.liveness_us;
        let stores = self.cfg.stores as usize;
        let mut converged = None;
        while self.now < deadline {
            if !self.step() {
                break;
            }
            if !self.checker.violations.is_empty() {
                return self.finish();
            }
            if self.now >= start + 1_000_000 && self.report.events % 64 == 0 && self.managed().len() == stores {
                converged = Some(self.now - start);
                break;
            }
        }
        self.report.liveness_converged_us = converged;
        if converged.is_none() {
            let managed = self.managed();
            for s in 0..self.cfg.stores {
                if !managed.contains(&StoreId(s)) {
                    self.checker.violations.push(Violation::NoManager { store: StoreId(s) });
                }
            }
        }
        self.finish()
    }

    fn finish(mut self) -> RunReport {
        self.sample();
        self.report.sim_us = self.now;
        self.report.violations = std::mem::take(&mut self.checker.violations);
        self.report.fingerprint = self.hasher;
        self.report
    }
}

/// Run one seed.
pub fn run(cfg: SimConfig) -> RunReport {
    World::new(cfg).run()
}
