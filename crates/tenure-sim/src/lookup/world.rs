//! The lookup world's machinery: devices under their own clocks, the network between
//! them, the links between clients and devices, and the event loop.
//!
//! Devices are full [`Device`]s (one small store besides the lookup node); they boot from
//! their simulated disk, so a crash loses exactly the volatile state. A client's request
//! travels to one device (its origin) over a FIFO client link; a device that is down
//! refuses the connection, and a crash resets the connections of every request and
//! subscription it served — the client hears of it one link latency later, as a gRPC
//! client would. A paused device answers nothing until it resumes.

use super::checks::{Bounds, LookupViolation};
use super::knobs::{LookupKnobs, Profile};
use super::nemesis::Nemesis;
use super::truth::Truth;
use super::workload::Workload;
use super::{LookupStats, monitor::Monitor};
use crate::clock::Clock;
use crate::net::{Fate, Network};
use crate::world::{START_US, SimConfig};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use tenure_core::io::{ClientError, DevicePersist, Input, Output, Response};
use tenure_core::lookup::{LookupRequest, SubEvent};
use tenure_core::msg::Msg;
use tenure_core::rng::{Rng, mix64};
use tenure_core::{ClientId, ClusterConfig, Device, DeviceConfig, DeviceId};

/// A run that processes more events than this is stuck in an event storm.
pub(super) const EVENTS_MAX: u64 = 10_000_000;
/// How often the checkers sample the cluster (µs).
pub(super) const SAMPLE_US: u64 = 50_000;

/// One device slot.
pub(super) struct Dev {
    pub(super) device: Option<Device>,
    pub(super) disk: DevicePersist,
    pub(super) cfg: DeviceConfig,
    pub(super) clock: Clock,
    /// Real time until which the process is paused.
    pub(super) paused_until: Option<u64>,
    /// Inputs that reached it while paused, in order: it handles them first when it
    /// resumes (early or not), so links stay FIFO.
    deferred: Vec<Ev>,
    timer_generation: u64,
    /// Incarnation: messages and requests addressed to an older one are dropped.
    pub(super) boot: u64,
    rng: Rng,
}

/// A client's request on its way or waiting for its answer.
#[derive(Clone, Debug)]
pub(super) struct InFlight {
    pub(super) client: usize,
    pub(super) device: DeviceId,
    /// Real time the client sent this attempt.
    pub(super) sent_us: u64,
}

/// Events, by real time.
#[derive(Clone, Debug)]
pub(super) enum Ev {
    Deliver {
        from: DeviceId,
        to: DeviceId,
        boot: u64,
        msg: Box<Msg>,
    },
    Timer {
        device: DeviceId,
        generation: u64,
    },
    /// A client's request reaches a device.
    Request {
        to: DeviceId,
        boot: u64,
        req_id: u64,
        req: Box<LookupRequest>,
    },
    /// A device's answer reaches its client.
    Reply {
        req_id: u64,
        from: DeviceId,
        result: Box<Result<Response, ClientError>>,
    },
    /// A subscription event reaches the subscriber attached at `from` over its
    /// connection `conn`.
    Event {
        client: usize,
        from: DeviceId,
        conn: u64,
        ev: Box<SubEvent>,
    },
    /// The request's device was down or crashed: the connection failed.
    Refused {
        req_id: u64,
    },
    /// The client stops waiting for an answer.
    ClientTimeout {
        req_id: u64,
    },
    /// A workload client's timer.
    Client(usize),
    Probe,
    Nemesis,
    Restart(DeviceId),
    Resume(DeviceId),
    Heal(u64),
    Sample,
}

impl Ev {
    /// The device an event is an input to (a paused device defers these).
    fn target(&self) -> Option<DeviceId> {
        match self {
            Ev::Deliver { to, .. } | Ev::Request { to, .. } => Some(*to),
            Ev::Timer { device, .. } => Some(*device),
            _ => None,
        }
    }

    fn tag(&self) -> u64 {
        match self {
            Ev::Deliver { from, to, .. } => 1 | from.0 << 8 | to.0 << 16,
            Ev::Timer { device, .. } => 2 | device.0 << 8,
            Ev::Request { to, req_id, .. } => 3 | to.0 << 8 | req_id << 16,
            Ev::Reply { req_id, .. } => 4 | req_id << 8,
            Ev::Event { client, .. } => 5 | (*client as u64) << 8,
            Ev::Refused { req_id } => 6 | req_id << 8,
            Ev::ClientTimeout { req_id } => 7 | req_id << 8,
            Ev::Client(c) => 8 | (*c as u64) << 8,
            Ev::Probe => 9,
            Ev::Nemesis => 10,
            Ev::Restart(d) => 11 | d.0 << 8,
            Ev::Resume(d) => 12 | d.0 << 8,
            Ev::Heal(id) => 13 | id << 8,
            Ev::Sample => 14,
        }
    }
}

/// The lookup world.
pub(super) struct World {
    pub(super) cfg: SimConfig,
    pub(super) k: LookupKnobs,
    pub(super) bounds: Bounds,
    pub(super) now: u64,
    seq: u64,
    queue: BTreeMap<(u64, u64), Ev>,
    pub(super) devs: BTreeMap<DeviceId, Dev>,
    pub(super) net: Network,
    /// Last scheduled delivery per client link and direction (FIFO).
    client_fifo: BTreeMap<(usize, DeviceId, bool), u64>,
    client_rng: Rng,
    pub(super) skew_max_us: u64,
    /// Requests in flight, by request id.
    pub(super) inflight: BTreeMap<u64, InFlight>,
    next_req: u64,
    pub(super) work: Workload,
    pub(super) nemesis: Nemesis,
    pub(super) truth: Truth,
    pub(super) mon: Monitor,
    pub(super) stats: LookupStats,
    pub(super) violations: Vec<LookupViolation>,
    /// Whether the faults of the profile are on (off in the final phase).
    pub(super) faults_on: bool,
    hash: u64,
    pub(super) trace: Option<String>,
}

impl World {
    /// Build the world for `cfg` (its seed draws everything else); `adjust` may change
    /// the drawn knobs before anything uses them.
    pub(super) fn new(cfg: SimConfig, adjust: impl FnOnce(&mut LookupKnobs)) -> World {
        let mut root = Rng::new(mix64(cfg.seed ^ 0x100c_0b00_0000_0003));
        let mut k = LookupKnobs::draw(&mut root, cfg.lookup_profile);
        adjust(&mut k);
        let mut net = Network::with_params(root.fork(), &k.net);
        // Random loss and slow messages belong to the rare profile's bursts.
        net.faults_on = false;
        let mut clock_rng = root.fork();
        let mut device_rng = root.fork();
        let client_rng = root.fork();
        let nemesis = Nemesis::new(root.fork(), &k);
        let work_rng = root.fork();
        let cluster = ClusterConfig::new(k.devices, 1, k.devices.min(2) as usize);
        let skew_max_us = k.clock_drift_us / 2;
        let horizon = START_US + cfg.safety_us + 10 * cfg.liveness_us.max(60_000_000);
        let mut devs = BTreeMap::new();
        for d in cluster.devices.clone() {
            let mut dc = DeviceConfig::new(d, cluster.clone());
            dc.planted = cfg.planted.clone();
            dc.lookup = k.settings.clone();
            dc.timing.clock_drift = std::time::Duration::from_micros(k.clock_drift_us);
            let clock = Clock::draw(&mut clock_rng, skew_max_us, horizon);
            let rng = device_rng.fork();
            devs.insert(
                d,
                Dev {
                    device: None,
                    disk: DevicePersist::default(),
                    cfg: dc,
                    clock,
                    paused_until: None,
                    deferred: Vec::new(),
                    timer_generation: 0,
                    boot: 0,
                    rng,
                },
            );
        }
        let bounds = Bounds::of(&k);
        let work = Workload::new(work_rng, &k);
        let mut w = World {
            stats: LookupStats {
                profile: Some(k.profile),
                bounds: bounds.clone(),
                ..LookupStats::default()
            },
            trace: cfg.trace.then(String::new),
            cfg,
            bounds,
            now: START_US,
            seq: 0,
            queue: BTreeMap::new(),
            devs,
            net,
            client_fifo: BTreeMap::new(),
            client_rng,
            skew_max_us,
            inflight: BTreeMap::new(),
            next_req: 0,
            work,
            nemesis,
            truth: Truth::default(),
            mon: Monitor::default(),
            violations: Vec::new(),
            faults_on: true,
            hash: 0xcbf2_9ce4_8422_2325,
            k,
        };
        let (knobs, bounds) = (format!("{:?}", w.k), format!("{:?}", w.bounds));
        w.log(|| format!("lookup knobs {knobs}"));
        w.log(|| format!("bounds {bounds}"));
        let clocks: Vec<String> = (w.devs.iter())
            .map(|(d, n)| format!("clock {d} {:?}", n.clock))
            .collect();
        for c in clocks {
            w.log(|| c);
        }
        let ids: Vec<DeviceId> = w.devs.keys().copied().collect();
        for d in ids {
            w.boot(d);
        }
        w.mon.boot(w.now, w.bounds.stabilisation_us);
        w.start_workload();
        w.schedule(w.now + SAMPLE_US, Ev::Sample);
        w.schedule(w.now + 100_000, Ev::Nemesis);
        w
    }

    pub(super) fn since_start(&self) -> u64 {
        self.now - START_US
    }

    /// Append a line to the trace (when tracing).
    pub(super) fn log(&mut self, f: impl FnOnce() -> String) {
        let t = self.since_start();
        if let Some(tr) = self.trace.as_mut() {
            let _ = writeln!(tr, "{:>6}.{:06} {}", t / 1_000_000, t % 1_000_000, f());
        }
    }

    pub(super) fn mix(&mut self, x: u64) {
        self.hash = mix64(self.hash ^ x);
    }

    pub(super) fn fingerprint(&self) -> u64 {
        self.hash
    }

    pub(super) fn schedule(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.queue.insert((at.max(self.now), self.seq), ev);
    }

    /// Whether `d` runs (booted and not paused).
    pub(super) fn running(&self, d: DeviceId) -> bool {
        let n = &self.devs[&d];
        n.device.is_some() && n.paused_until.is_none()
    }

    pub(super) fn ids(&self) -> Vec<DeviceId> {
        self.devs.keys().copied().collect()
    }

    // ---- devices ----------------------------------------------------------------------

    pub(super) fn boot(&mut self, d: DeviceId) {
        let now = self.now;
        let n = self.devs.get_mut(&d).expect("device");
        n.boot += 1;
        n.paused_until = None;
        let seed = n.rng.next_u64();
        let local = n.clock.local(now);
        let (dev, out) = Device::new(n.cfg.clone(), n.disk.clone(), local, seed);
        n.device = Some(dev);
        let boot = n.boot;
        self.log(|| format!("{d} boot #{boot}"));
        self.mix(0xb007 ^ d.0);
        self.process(d, out);
    }

    /// Crash `d`: its volatile state is gone, its connections reset.
    pub(super) fn crash(&mut self, d: DeviceId) {
        let n = self.devs.get_mut(&d).expect("device");
        if n.device.take().is_none() {
            return;
        }
        n.timer_generation += 1;
        n.paused_until = None;
        n.deferred.clear();
        self.stats.crashes += 1;
        self.log(|| format!("{d} crash"));
        let reset: Vec<u64> = (self.inflight.iter())
            .filter(|(_, f)| f.device == d)
            .map(|(r, _)| *r)
            .collect();
        for req_id in reset {
            let client = self.inflight[&req_id].client;
            let at = self.client_latency(client, d, false);
            self.schedule(at, Ev::Refused { req_id });
        }
        self.subscribers_lost(d);
    }

    /// One input to a running device, then its outputs.
    pub(super) fn input(&mut self, d: DeviceId, input: Input) {
        let n = self.devs.get_mut(&d).expect("device");
        let local = n.clock.local(self.now);
        let Some(dev) = n.device.as_mut() else {
            return;
        };
        let out = dev.handle(local, input);
        self.process(d, out);
    }

    fn process(&mut self, d: DeviceId, out: Vec<Output>) {
        for o in out {
            match o {
                Output::Persist(op) => self.devs.get_mut(&d).expect("device").disk.apply(&op),
                Output::Send { to, msg } => self.send(d, to, msg),
                Output::Reply {
                    client,
                    req_id,
                    result,
                } => self.reply_out(d, client, req_id, result),
                Output::SetTimer(_) => {}
                Output::Observe(ob) => {
                    if let tenure_core::io::Observation::LookupState { state, start } = &ob {
                        self.mix(0x5a7e ^ d.0 ^ (*state as u64) << 8);
                        let (state, start) = (*state, *start);
                        self.log(|| format!("{d} lookup {state:?} start {start:?}"));
                        if state == tenure_core::lookup::NodeState::Leader {
                            self.failover_ended();
                        }
                    }
                }
                Output::LookupEvent(ev) => self.event_out(d, ev),
                // The lookup world runs no object clients.
                Output::ObjectEvents { .. } | Output::WatchEnded { .. } => {}
                // Nor snapshots.
                Output::SnapshotStarted { .. }
                | Output::SnapshotPart(_)
                | Output::SnapshotEnded { .. } => {}
            }
        }
        self.arm_timer(d);
    }

    pub(super) fn arm_timer(&mut self, d: DeviceId) {
        let skew = self.skew_max_us;
        let n = self.devs.get_mut(&d).expect("device");
        n.timer_generation += 1;
        let generation = n.timer_generation;
        let Some(t) = n.device.as_ref().and_then(Device::poll_timeout) else {
            return;
        };
        let at = n.clock.real_at(t, skew).max(self.now + 1);
        self.schedule(
            at,
            Ev::Timer {
                device: d,
                generation,
            },
        );
    }

    fn send(&mut self, from: DeviceId, to: DeviceId, msg: Msg) {
        let Some(boot) = self.devs.get(&to).map(|n| n.boot) else {
            return;
        };
        if self.nemesis.drops(self.now, from, to, &msg) {
            self.stats.lost += 1;
            self.log(|| format!("{from}->{to} LOST (one message) {msg:?}"));
            return;
        }
        match self.net.send(self.now, from, to) {
            Fate::Lost => self.stats.lost += 1,
            Fate::Deliver(times) => {
                let msg = Box::new(msg);
                for at in times {
                    let ev = Ev::Deliver {
                        from,
                        to,
                        boot,
                        msg: msg.clone(),
                    };
                    self.schedule(at, ev);
                }
            }
        }
    }

    // ---- client links -------------------------------------------------------------------

    /// When a message on the link between `client` and `d` arrives (FIFO per direction).
    pub(super) fn client_latency(&mut self, client: usize, d: DeviceId, up: bool) -> u64 {
        let (lo, hi) = (self.k.client_latency_min_us, self.k.client_latency_max_us);
        let lat = lo + self.client_rng.below(hi - lo + 1);
        let last = self.client_fifo.get(&(client, d, up)).copied().unwrap_or(0);
        let at = (self.now + lat).max(last);
        self.client_fifo.insert((client, d, up), at);
        at
    }

    /// Send a request from `client` to device `d`; returns its request id.
    pub(super) fn request(&mut self, client: usize, d: DeviceId, req: LookupRequest) -> u64 {
        self.next_req += 1;
        let req_id = self.next_req;
        let boot = self.devs[&d].boot;
        self.inflight.insert(
            req_id,
            InFlight {
                client,
                device: d,
                sent_us: self.now,
            },
        );
        let at = self.client_latency(client, d, true);
        if self.devs[&d].device.is_none() {
            // Connection refused.
            let back = self.client_latency(client, d, false);
            self.schedule(back.max(at), Ev::Refused { req_id });
        } else if self.nemesis.drops_request(&req) {
            self.stats.lost += 1;
            self.log(|| format!("client {client} -> {d} req {req_id} LOST (one message)"));
        } else {
            let req = Box::new(req);
            self.schedule(
                at,
                Ev::Request {
                    to: d,
                    boot,
                    req_id,
                    req,
                },
            );
        }
        let timeout = self.client_timeout_us();
        self.schedule(self.now + timeout, Ev::ClientTimeout { req_id });
        req_id
    }

    /// How long a client waits for an answer: the origin waits a round-trip delay for the
    /// leader, plus both client hops and a margin.
    pub(super) fn client_timeout_us(&self) -> u64 {
        let rtt = self.k.settings.roundtrip_delay.as_micros() as u64;
        2 * rtt + 4 * self.k.client_latency_max_us + 50_000
    }

    fn reply_out(
        &mut self,
        d: DeviceId,
        client: ClientId,
        req_id: u64,
        result: Result<Response, ClientError>,
    ) {
        let c = client.0 as usize - 1;
        let at = self.client_latency(c, d, false);
        self.schedule(
            at,
            Ev::Reply {
                req_id,
                from: d,
                result: Box::new(result),
            },
        );
    }

    // ---- the event loop -------------------------------------------------------------------

    /// Process one event; false when the queue is empty.
    pub(super) fn step(&mut self) -> bool {
        let Some(((at, _), ev)) = self.queue.pop_first() else {
            return false;
        };
        self.now = at;
        if let Some(t) = ev.target()
            && self.devs[&t]
                .paused_until
                .is_some_and(|until| until > self.now)
        {
            self.devs.get_mut(&t).expect("device").deferred.push(ev);
            return true;
        }
        self.stats.events += 1;
        self.mix(at ^ ev.tag().rotate_left(17));
        match ev {
            Ev::Deliver {
                from,
                to,
                boot,
                msg,
            } => {
                let n = &self.devs[&to];
                if n.boot == boot && n.device.is_some() && self.net.open(from, to) {
                    self.log(|| format!("{from}->{to} {msg:?}"));
                    self.input(to, Input::Message { from, msg: *msg });
                } else if !self.net.open(from, to) {
                    self.stats.lost += 1;
                }
            }
            Ev::Timer { device, generation } => {
                if self.devs[&device].timer_generation == generation {
                    self.input(device, Input::Tick);
                }
            }
            Ev::Request {
                to,
                boot,
                req_id,
                req,
            } => {
                let Some(f) = self.inflight.get(&req_id) else {
                    return true;
                };
                if self.devs[&to].boot != boot || self.devs[&to].device.is_none() {
                    return true; // the crash already reset the connection
                }
                let c = f.client;
                let client = ClientId(c as u64 + 1);
                self.log(|| format!("client {c} -> {to} req {req_id} {req:?}"));
                self.input(
                    to,
                    Input::Lookup {
                        client,
                        req_id,
                        req: *req,
                    },
                );
            }
            Ev::Reply {
                req_id,
                from,
                result,
            } => {
                if let Some(f) = self.inflight.remove(&req_id) {
                    self.log(|| format!("{from} -> client {} req {req_id}: {result:?}", f.client));
                    self.on_reply(req_id, f, *result);
                }
            }
            Ev::Event {
                client,
                from,
                conn,
                ev,
            } => self.on_event(client, from, conn, *ev),
            Ev::Refused { req_id } | Ev::ClientTimeout { req_id } => {
                if let Some(f) = self.inflight.remove(&req_id) {
                    self.log(|| format!("client {} req {req_id} failed", f.client));
                    self.on_failed(req_id, f);
                }
            }
            Ev::Client(c) => self.client_timer(c),
            Ev::Probe => self.probe(),
            Ev::Nemesis => self.nemesis_step(),
            Ev::Restart(d) => {
                if self.devs[&d].device.is_none() {
                    self.boot(d);
                    self.fault_done("restart");
                }
            }
            Ev::Resume(d) => self.resume(d),
            Ev::Heal(id) => {
                if self.net.partition.as_ref().is_some_and(|p| p.id == id) {
                    self.net.heal();
                    self.log(|| format!("partition #{id} ends"));
                    self.fault_done("heal");
                }
            }
            Ev::Sample => {
                self.sample();
                self.schedule(self.now + SAMPLE_US, Ev::Sample);
            }
        }
        true
    }

    pub(super) fn resume(&mut self, d: DeviceId) {
        let n = self.devs.get_mut(&d).expect("device");
        if n.paused_until.is_some_and(|u| u <= self.now) {
            n.paused_until = None;
            for ev in std::mem::take(&mut n.deferred) {
                self.schedule(self.now, ev);
            }
            self.log(|| format!("{d} resumes"));
            if self.devs[&d].device.is_some() {
                self.input(d, Input::Tick);
            }
            self.fault_done("resume");
        }
    }

    /// Run until the end: the fault phase, then the final phase of the profile.
    pub(super) fn run(mut self) -> super::Outcome {
        let fault_end = START_US + self.cfg.safety_us;
        self.run_until(fault_end);
        if self.violations.is_empty() {
            self.final_phase();
        }
        self.stats.sim_us = self.since_start();
        super::Outcome {
            fingerprint: self.fingerprint(),
            trace: self.trace.take().unwrap_or_default(),
            stats: self.stats,
            knobs: self.k,
            violations: self.violations,
        }
    }

    /// Step until real time `until` (or a violation, or the event bound).
    pub(super) fn run_until(&mut self, until: u64) {
        while self.violations.is_empty()
            && self.stats.events <= EVENTS_MAX
            && self
                .queue
                .first_key_value()
                .is_some_and(|((t, _), _)| *t <= until)
        {
            self.step();
        }
        if self.violations.is_empty() {
            self.now = self.now.max(until);
        }
        if self.stats.events > EVENTS_MAX {
            self.violations.push(LookupViolation::NotStabilised {
                at_us: self.since_start(),
                since_us: 0,
                bound_us: 0,
                why: format!("event storm: more than {EVENTS_MAX} events"),
            });
        }
    }

    /// The common profile's ending (an optional full restart of every device) or the rare
    /// profile's (heal, restart, resume; faults off; stabilise).
    fn final_phase(&mut self) {
        self.faults_on = false;
        self.net.faults_on = false;
        self.net.heal();
        self.nemesis.clear_drops();
        for d in self.ids() {
            if self.devs[&d].paused_until.is_some() {
                self.devs.get_mut(&d).expect("device").paused_until = Some(self.now);
                self.resume(d);
            }
            if self.devs[&d].device.is_none() {
                self.boot(d);
            }
        }
        self.fault_done("final phase");
        if self.k.profile == Profile::Common && self.k.full_restart {
            self.full_restart();
        } else if self.k.profile == Profile::Rare {
            self.rare_settle();
        }
        let end = self.now + self.final_phase_us();
        self.run_until(end);
    }
}
