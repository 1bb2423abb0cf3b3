//! The simulated network between devices (TigerBeetle's `testing/packet_simulator.zig`:
//! network faults are plain data).
//!
//! - **Channels** are per ordered pair of devices and FIFO, like the one TCP connection
//!   per device pair Tenure's transport keeps (DESIGN §6 relies on it): each message draws
//!   its own latency but is never delivered before an earlier message of the same channel.
//! - **Latency** is uniform in `[min, max]`, with an occasional slow path (`slow_p`:
//!   `slow_us` more) — a congested link, a retransmission.
//! - **Loss** drops a message; **duplication** (only when the seed allows it) delivers a
//!   second copy right after the first, so FIFO order still holds.
//! - **Partitions** block channels: symmetric or one-way, isolating one device or cutting
//!   the cluster into random halves. A partition stays at least `stability_min_us` before
//!   the nemesis may heal or replace it. A message is dropped if its channel is blocked
//!   when it is sent or when it would arrive (the connection broke).
//! - **Incarnations**: a message is addressed to one boot of its receiver; if the receiver
//!   crashed in the meantime, the message dies with the old connection.

use crate::knobs::Knobs;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use tenure_core::DeviceId;
use tenure_core::rng::Rng;

/// How a partition cuts the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum PartitionMode {
    /// One device against the rest.
    IsolateOne,
    /// Each device on a random side.
    RandomHalves,
}

/// A partition in force.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Partition {
    /// Serial of this partition (a heal event names the partition it ends).
    pub id: u64,
    /// One side.
    pub side: BTreeSet<DeviceId>,
    /// Whether only messages from `side` to the rest are blocked.
    pub one_way: bool,
    /// Real time it started.
    pub since_us: u64,
}

/// A network's latency and fault parameters.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NetParams {
    /// Lower bound of one-way latency (µs).
    pub latency_min_us: u64,
    /// Upper bound of one-way latency, slow path aside (µs).
    pub latency_max_us: u64,
    /// Probability a message takes the slow path.
    pub slow_p: f64,
    /// Extra delay bound on the slow path (µs).
    pub slow_us: u64,
    /// Probability a message is lost.
    pub loss: f64,
    /// Probability a message is duplicated.
    pub duplicate: f64,
}

/// What the network decided for one message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Dropped (loss or partition).
    Lost,
    /// Delivered at these real times (two when duplicated).
    Deliver(Vec<u64>),
}

/// Network state.
#[derive(Clone, Debug)]
pub struct Network {
    rng: Rng,
    latency_min_us: u64,
    latency_max_us: u64,
    slow_p: f64,
    slow_us: u64,
    loss: f64,
    duplicate: f64,
    /// Last scheduled delivery per channel (FIFO).
    fifo: BTreeMap<(DeviceId, DeviceId), u64>,
    blocked: BTreeSet<(DeviceId, DeviceId)>,
    /// The partition in force, if any.
    pub partition: Option<Partition>,
    next_partition: u64,
    /// Whether loss and duplication apply (off in the liveness phase).
    pub faults_on: bool,
}

impl Network {
    /// A network with the knobs' fault parameters.
    pub fn new(rng: Rng, k: &Knobs) -> Network {
        Network {
            rng,
            latency_min_us: k.latency_min_us,
            latency_max_us: k.latency_max_us,
            slow_p: k.slow_p,
            slow_us: k.slow_us,
            loss: k.loss,
            duplicate: k.duplicate,
            fifo: BTreeMap::new(),
            blocked: BTreeSet::new(),
            partition: None,
            next_partition: 0,
            faults_on: true,
        }
    }

    /// A network with explicit parameters (the lookup world draws its own; see
    /// [`crate::lookup::knobs`]).
    pub fn with_params(rng: Rng, p: &NetParams) -> Network {
        Network {
            rng,
            latency_min_us: p.latency_min_us,
            latency_max_us: p.latency_max_us,
            slow_p: p.slow_p,
            slow_us: p.slow_us,
            loss: p.loss,
            duplicate: p.duplicate,
            fifo: BTreeMap::new(),
            blocked: BTreeSet::new(),
            partition: None,
            next_partition: 0,
            faults_on: true,
        }
    }

    /// Whether `from → to` is currently open.
    pub fn open(&self, from: DeviceId, to: DeviceId) -> bool {
        !self.blocked.contains(&(from, to))
    }

    /// Decide the fate of a message sent now.
    pub fn send(&mut self, now: u64, from: DeviceId, to: DeviceId) -> Fate {
        if !self.open(from, to) || (self.faults_on && self.rng.chance(self.loss)) {
            return Fate::Lost;
        }
        let mut lat = self.latency_min_us
            + self
                .rng
                .below(self.latency_max_us - self.latency_min_us + 1);
        if self.faults_on && self.rng.chance(self.slow_p) {
            lat += self.rng.below(self.slow_us + 1);
        }
        if from == to {
            lat = 1;
        }
        let last = self.fifo.get(&(from, to)).copied().unwrap_or(0);
        let at = (now + lat).max(last);
        self.fifo.insert((from, to), at);
        if self.faults_on && self.rng.chance(self.duplicate) {
            Fate::Deliver(vec![at, at])
        } else {
            Fate::Deliver(vec![at])
        }
    }

    /// Start a partition over `devices` (replacing any in force). Returns it.
    pub fn partition(
        &mut self,
        rng: &mut Rng,
        now: u64,
        devices: &[DeviceId],
        mode: PartitionMode,
        one_way: bool,
    ) -> &Partition {
        let mut side = BTreeSet::new();
        match mode {
            PartitionMode::IsolateOne => {
                side.insert(devices[rng.below(devices.len() as u64) as usize]);
            }
            PartitionMode::RandomHalves => {
                for d in devices {
                    if rng.chance(0.5) {
                        side.insert(*d);
                    }
                }
                // A cut with an empty side is no cut: isolate one instead.
                if side.is_empty() || side.len() == devices.len() {
                    side.clear();
                    side.insert(devices[rng.below(devices.len() as u64) as usize]);
                }
            }
        }
        self.blocked.clear();
        for a in devices {
            for b in devices {
                if side.contains(a) != side.contains(b) && (!one_way || side.contains(a)) {
                    self.blocked.insert((*a, *b));
                }
            }
        }
        self.next_partition += 1;
        self.partition.insert(Partition {
            id: self.next_partition,
            side,
            one_way,
            since_us: now,
        })
    }

    /// Remove every partition.
    pub fn heal(&mut self) {
        self.blocked.clear();
        self.partition = None;
    }
}
