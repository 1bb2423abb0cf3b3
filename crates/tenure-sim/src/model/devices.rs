//! The model's devices: building the initial states, rebuilding the one device a step
//! touches from its state's snapshot, stepping it with one input and absorbing its
//! outputs into the state.

use super::fidelity::Mirror;
use super::{
    Action, CHUNK_HOSTS, DIRECTORS, Dest, DeviceSnap, Envelope, ModelConfig, N_DEVICES,
    PalladioModel, STORE, Start, State, debug_digest, dev_id, idx,
};
use stateright::Model;
use std::collections::BTreeMap;
use std::hash::DefaultHasher;
use std::hash::Hasher;
use tenure_core::io::DevicePersist;
use tenure_core::layout::chunk::Chunk;
use tenure_core::layout::{ChunkState, MgrState};
use tenure_core::msg::{Msg, ToManager};
use tenure_core::{
    ChunkId, ClusterConfig, Device, DeviceConfig, DeviceId, Epoch, Input, Instant, Observation,
    Output,
};

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

    /// The value a device's generator starts from (a constant: a state determines the
    /// device).
    pub(super) fn seed(d: DeviceId) -> u64 {
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
        // A first boot: the chunks never reported a lease, so they hold off no manager
        // (as the core's own bootstrap, `Chunk::boot_hold`).
        for d in &mut s.devices {
            for c in &mut d.chunks {
                c.boot_hold = None;
            }
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
    pub(super) fn receivers(&self, s: &State, e: &Envelope) -> Vec<DeviceId> {
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
    pub(super) fn first_deliverable(&self, s: &State) -> Option<usize> {
        s.net.iter().position(|e| !self.receivers(s, e).is_empty())
    }

    /// Device `d`'s configuration.
    fn cfg_of(&self, d: DeviceId) -> DeviceConfig {
        self.dev_cfgs[idx(d)].clone()
    }

    /// Boot `d` from its disk (first boot or restart).
    pub(super) fn boot(&self, s: &mut State, d: DeviceId, mirror: &mut Option<&mut Mirror>) {
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
    pub(super) fn rebuild(&self, s: &State, d: DeviceId) -> Device {
        let snap = &s.devices[idx(d)];
        let disk = DevicePersist {
            next_serial: snap.disk.next_serial,
            chunks: snap
                .chunks
                .iter()
                .map(|c| (c.record.id, c.record.clone()))
                .collect(),
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
            *dev.chunk_mut(c.record.id).expect("chunk rebuilt") = c.clone();
        }
        if let Some(m) = &snap.manager {
            *dev.manager_mut(STORE) = m.clone();
        }
        dev
    }

    /// Store `d`'s chunk and manager state machines, and its next deadline, into `s`.
    pub(super) fn snapshot(&self, s: &mut State, d: DeviceId, dev: &mut Device) {
        let ids: Vec<ChunkId> = dev.chunk_views().iter().map(|v| v.id).collect();
        let chunks = ids
            .iter()
            .map(|id| dev.chunk_mut(*id).expect("chunk").clone())
            .collect();
        let deadline = dev.poll_timeout();
        let m = dev.manager_mut(STORE).clone();
        let manager = (m.state() != MgrState::None || m.forwarding.is_some()).then_some(m);
        let snap = &mut s.devices[idx(d)];
        snap.chunks = chunks;
        snap.manager = manager;
        snap.deadline = deadline;
        snap.reseal();
    }

    /// One input to a live device.
    pub(super) fn step(
        &self,
        s: &mut State,
        d: DeviceId,
        input: Input,
        mirror: &mut Option<&mut Mirror>,
    ) {
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
                    let ok = before
                        .iter()
                        .find(|c| c.record.id == chunk)
                        .is_some_and(|c| {
                            c.state == ChunkState::RegularLease
                                && c.record.epoch == epoch
                                && c.lease_expiry.is_some_and(|e| s.now < e - drift)
                        });
                    if !ok && s.bad_serve.is_none() {
                        let st = before
                            .iter()
                            .find(|c| c.record.id == chunk)
                            .map(|c| c.view());
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
