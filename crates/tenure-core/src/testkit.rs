//! A small deterministic harness for scenario tests: N devices, one shared clock, fixed
//! latency, FIFO delivery, crash/restart and partitions. (The full simulator with drift,
//! loss, nemesis and checkers is `tenure-sim`; this is quinn-proto's `Pair` for N.)

use crate::config::{ClusterConfig, DeviceConfig};
use crate::device::Device;
use crate::error::ClientError;
use crate::ids::{ClientId, DeviceId, StoreId};
use crate::io::observation::Observation;
use crate::io::persist::DevicePersist;
use crate::io::policy::PolicyCommand;
use crate::io::request::Request;
use crate::io::request::Response;
use crate::io::{Input, Output};
use crate::layout::{ChunkState, MgrState};
use crate::msg::Msg;
use crate::time::Instant;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// A cluster of devices driven in virtual time.
pub struct Cluster {
    /// Current time (all clocks agree here).
    pub now: Instant,
    /// Live devices.
    pub devices: BTreeMap<DeviceId, Device>,
    /// Every device's stable storage.
    pub disks: BTreeMap<DeviceId, DevicePersist>,
    /// Configurations.
    pub configs: BTreeMap<DeviceId, DeviceConfig>,
    /// Messages in flight: (deliver at, seq) → (from, to, msg).
    pub queue: BTreeMap<(Instant, u64), (DeviceId, DeviceId, Msg)>,
    seq: u64,
    /// One-way latency.
    pub latency: Duration,
    /// Partition: devices in different groups cannot talk. Empty = fully connected.
    pub groups: Vec<BTreeSet<DeviceId>>,
    /// Everything observed: (time, device, observation).
    pub observations: Vec<(Instant, DeviceId, Observation)>,
    /// Client replies: req_id → result.
    pub replies: BTreeMap<u64, Result<Response, ClientError>>,
    next_req: u64,
    boots: u64,
    /// Every message delivered: (time, from, to, msg).
    pub delivered: Vec<(Instant, DeviceId, DeviceId, Msg)>,
    /// Messages for which this returns true are dropped.
    pub drop: Option<DropFn>,
    /// Lookup events handed to each device's driver: (time, device, event).
    pub events: Vec<(Instant, DeviceId, crate::lookup::SubEvent)>,
    /// Object watch outputs (events and ends), in order.
    pub watch_outputs: Vec<(Instant, DeviceId, Output)>,
    /// Snapshot outputs (started, parts, ended), in order.
    pub snapshot_outputs: Vec<(Instant, DeviceId, Output)>,
}

/// A message filter: `(from, to, msg) -> drop?`.
pub type DropFn = Box<dyn FnMut(DeviceId, DeviceId, &Msg) -> bool>;

impl Cluster {
    /// `n` devices, `stores` stores, 3-way replication, default timing.
    pub fn new(n: u64, stores: u32) -> Cluster {
        Self::with(n, stores, |_| {})
    }

    /// As [`Cluster::new`], with a hook to adjust each device's configuration.
    pub fn with(n: u64, stores: u32, tweak: impl Fn(&mut DeviceConfig)) -> Cluster {
        let cluster = ClusterConfig::new(n, stores, 3);
        let mut c = Cluster {
            now: Instant(1_000_000),
            devices: BTreeMap::new(),
            disks: BTreeMap::new(),
            configs: BTreeMap::new(),
            queue: BTreeMap::new(),
            seq: 0,
            latency: Duration::from_millis(1),
            groups: Vec::new(),
            observations: Vec::new(),
            replies: BTreeMap::new(),
            next_req: 0,
            boots: 0,
            delivered: Vec::new(),
            drop: None,
            events: Vec::new(),
            watch_outputs: Vec::new(),
            snapshot_outputs: Vec::new(),
        };
        for d in cluster.devices.clone() {
            let mut cfg = DeviceConfig::new(d, cluster.clone());
            tweak(&mut cfg);
            c.configs.insert(d, cfg);
            c.disks.insert(d, DevicePersist::default());
            c.boot(d);
        }
        c
    }

    fn boot(&mut self, d: DeviceId) {
        self.boots += 1;
        let (dev, out) = Device::new(
            self.configs[&d].clone(),
            self.disks[&d].clone(),
            self.now,
            d.0 * 1_000_003 + self.boots,
        );
        self.devices.insert(d, dev);
        self.process(d, out);
    }

    /// Start a new device `d` that joins the running cluster (`tenure cluster add`): it
    /// knows every configured device and waits to be admitted.
    pub fn join(&mut self, d: DeviceId) {
        let mut cfg = self.configs.values().next().expect("devices").clone();
        cfg.id = d;
        cfg.join = true;
        if !cfg.cluster.devices.contains(&d) {
            cfg.cluster.devices.push(d);
        }
        self.configs.insert(d, cfg);
        self.disks.insert(d, DevicePersist::default());
        self.boot(d);
    }

    /// Crash a device: volatile state is lost, its disk is kept.
    pub fn crash(&mut self, d: DeviceId) {
        self.devices.remove(&d);
    }

    /// Restart a crashed device from its disk.
    pub fn restart(&mut self, d: DeviceId) {
        self.boot(d);
    }

    /// Whether `a` can reach `b`.
    pub fn connected(&self, a: DeviceId, b: DeviceId) -> bool {
        self.groups.is_empty() || self.groups.iter().any(|g| g.contains(&a) && g.contains(&b))
    }

    fn process(&mut self, d: DeviceId, out: Vec<Output>) {
        for o in out {
            match o {
                Output::Send { to, msg } => {
                    self.seq += 1;
                    self.queue
                        .insert((self.now + self.latency, self.seq), (d, to, msg));
                }
                Output::Persist(op) => self.disks.get_mut(&d).expect("disk").apply(&op),
                Output::Reply { req_id, result, .. } => {
                    self.replies.insert(req_id, result);
                }
                Output::SetTimer(_) => {}
                Output::Observe(ob) => self.observations.push((self.now, d, ob)),
                Output::LookupEvent(ev) => self.events.push((self.now, d, ev)),
                o @ (Output::ObjectEvents { .. } | Output::WatchEnded { .. }) => {
                    self.watch_outputs.push((self.now, d, o))
                }
                o @ (Output::SnapshotStarted { .. }
                | Output::SnapshotPart(_)
                | Output::SnapshotEnded { .. }) => self.snapshot_outputs.push((self.now, d, o)),
            }
        }
    }

    /// Feed one input to a device now.
    pub fn input(&mut self, d: DeviceId, input: Input) {
        if let Some(dev) = self.devices.get_mut(&d) {
            let out = dev.handle(self.now, input);
            self.process(d, out);
        }
    }

    /// Submit a write through device `d`; returns the request id.
    pub fn write(&mut self, d: DeviceId, store: StoreId, key: u64, value: u64) -> u64 {
        self.next_req += 1;
        let req_id = self.next_req;
        self.input(
            d,
            Input::Request {
                client: ClientId(0),
                req_id,
                req: Request::Write { store, key, value },
            },
        );
        req_id
    }

    /// Submit any request through device `d` as client `client`; returns the request id.
    pub fn request(&mut self, d: DeviceId, client: u64, req: Request) -> u64 {
        self.next_req += 1;
        let req_id = self.next_req;
        self.input(
            d,
            Input::Request {
                client: ClientId(client),
                req_id,
                req,
            },
        );
        req_id
    }

    /// Submit a lookup request through device `d` as client `client`; returns the request
    /// id.
    pub fn lookup(&mut self, d: DeviceId, client: u64, req: crate::lookup::LookupRequest) -> u64 {
        self.next_req += 1;
        let req_id = self.next_req;
        self.input(
            d,
            Input::Lookup {
                client: ClientId(client),
                req_id,
                req,
            },
        );
        req_id
    }

    /// Issue a policy command at device `d`.
    pub fn policy(&mut self, d: DeviceId, cmd: PolicyCommand) {
        self.input(d, Input::Policy(cmd));
    }

    /// Advance virtual time by `dt`, delivering messages and firing timers in order.
    pub fn run_for(&mut self, dt: Duration) {
        let end = self.now + dt;
        loop {
            let next_msg = self.queue.keys().next().map(|k| k.0);
            let next_timer = self.devices.values().filter_map(|d| d.poll_timeout()).min();
            let next = crate::time::earliest(next_msg, next_timer);
            match next {
                Some(t) if t <= end => {
                    self.now = self.now.max(t);
                    if next_msg == Some(t) {
                        let (k, (from, to, msg)) = self.queue.pop_first().expect("msg");
                        let _ = k;
                        let dropped = self.drop.as_mut().is_some_and(|f| f(from, to, &msg));
                        if !dropped && self.devices.contains_key(&to) && self.connected(from, to) {
                            self.delivered.push((self.now, from, to, msg.clone()));
                            self.input(to, Input::Message { from, msg });
                        }
                    } else {
                        let due: Vec<DeviceId> = self
                            .devices
                            .iter()
                            .filter(|(_, d)| d.poll_timeout().is_some_and(|x| x <= t))
                            .map(|(id, _)| *id)
                            .collect();
                        for d in due {
                            self.input(d, Input::Tick);
                        }
                    }
                }
                _ => break,
            }
        }
        self.now = end;
    }

    /// The device managing `store` in the manager state with the highest epoch, if any.
    pub fn manager_of(&self, store: StoreId) -> Option<(DeviceId, crate::ids::Epoch)> {
        self.devices
            .iter()
            .filter_map(|(id, d)| {
                d.manager_view(store)
                    .filter(|m| m.state == MgrState::Manager)
                    .map(|m| (*id, m.epoch))
            })
            .max_by_key(|(_, e)| *e)
    }

    /// Whether every store has a manager whose chunks (a quorum) are regularly leased.
    pub fn all_managed(&self) -> bool {
        let stores = self
            .configs
            .values()
            .next()
            .expect("devices")
            .cluster
            .stores;
        (0..stores).all(|s| {
            let store = StoreId(s);
            let Some((_, epoch)) = self.manager_of(store) else {
                return false;
            };
            let serving = self
                .devices
                .values()
                .flat_map(|d| d.chunk_views())
                .filter(|c| {
                    c.store == store && c.epoch == epoch && c.state == ChunkState::RegularLease
                })
                .count();
            serving >= 2
        })
    }

    /// Messages delivered, by predicate.
    pub fn count_delivered(&self, f: impl Fn(&Msg) -> bool) -> usize {
        self.delivered.iter().filter(|(_, _, _, m)| f(m)).count()
    }

    /// The chunks of `store` across live devices.
    pub fn chunks_of(&self, store: StoreId) -> Vec<crate::layout::ChunkView> {
        self.devices
            .values()
            .flat_map(|d| d.chunk_views())
            .filter(|c| c.store == store)
            .collect()
    }

    /// Observations of one kind, by predicate.
    pub fn observed(&self, f: impl Fn(&Observation) -> bool) -> usize {
        self.observations.iter().filter(|(_, _, o)| f(o)).count()
    }
}
