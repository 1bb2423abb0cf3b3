//! Every simulator knob, drawn from one sim seed (TigerBeetle's VOPR: one seed → one PRNG →
//! every fault probability and workload rate; printed at the start of a trace so a run
//! can be read). Ranges are chosen so that, across sim seeds, runs range from calm to
//! brutal: pauses and partitions long enough to outlast leases (2 s), loss up to 5 %,
//! duplication in some sim seeds only.

use serde::Serialize;
use tenure_core::rng::Rng;

/// Fault and workload parameters of one run.
#[derive(Clone, Debug, Serialize)]
pub struct Knobs {
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
    /// Probability a message is duplicated (0 unless the sim seed allows it).
    pub duplicate: f64,
    /// Mean time between nemesis actions (µs).
    pub nemesis_mean_us: u64,
    /// Weights of the nemesis actions, in [`crate::world::NemesisAction`] order:
    /// partition (random halves), partition (isolate one), heal, crash, pause.
    pub nemesis_weights: [u32; 5],
    /// Probability that a partition is one-way (0 unless the sim seed allows it).
    pub one_way_p: f64,
    /// Minimum time a partition stays before it may be healed or replaced (µs).
    pub partition_stability_min_us: u64,
    /// A partition heals by itself after at most this long (µs).
    pub partition_max_us: u64,
    /// Probability that a crash strikes in the middle of an output batch.
    pub torn_crash_p: f64,
    /// Restart delay bound after a crash (µs).
    pub restart_max_us: u64,
    /// Pause length bound (µs); pauses may outlast leases.
    pub pause_max_us: u64,
    /// At most this many devices down (crashed or paused) at once.
    pub down_max: u64,
    /// Mean time between client writes (µs).
    pub write_mean_us: u64,
    /// Keys per store the workload writes (small: keys are overwritten often).
    pub keys_per_store: u64,
    /// Mean time between outside-policy commands (µs).
    pub policy_mean_us: u64,
}

impl Knobs {
    /// Draw the knobs from the run's generator.
    pub fn draw(rng: &mut Rng, devices: u64) -> Knobs {
        let latency_min_us = 50 + rng.below(950);
        Knobs {
            latency_min_us,
            latency_max_us: latency_min_us + [500, 5_000, 30_000][rng.below(3) as usize],
            slow_p: [0.0, 0.001, 0.01][rng.below(3) as usize],
            slow_us: 50_000 + rng.below(500_000),
            loss: [0.0, 0.001, 0.01, 0.05][rng.below(4) as usize],
            duplicate: if rng.chance(0.3) { 0.01 } else { 0.0 },
            nemesis_mean_us: 200_000 + rng.below(1_500_000),
            nemesis_weights: [
                rng.below(4) as u32 + 1,
                rng.below(4) as u32 + 1,
                rng.below(3) as u32 + 1,
                rng.below(4) as u32,
                rng.below(4) as u32,
            ],
            one_way_p: if rng.chance(0.4) { 0.5 } else { 0.0 },
            partition_stability_min_us: 200_000 + rng.below(1_500_000),
            partition_max_us: 2_000_000 + rng.below(6_000_000),
            torn_crash_p: [0.0, 0.5][rng.below(2) as usize],
            restart_max_us: 100_000 + rng.below(5_000_000),
            pause_max_us: 100_000 + rng.below(5_000_000),
            down_max: 1 + rng.below(devices.max(1)),
            write_mean_us: 2_000 + rng.below(50_000),
            keys_per_store: 1 + rng.below(16),
            policy_mean_us: 300_000 + rng.below(3_000_000),
        }
    }
}

/// The lock workload of one run: clients with sessions acquiring, holding, releasing,
/// querying, closing, pausing past their TTL and crashing.
#[derive(Clone, Debug, Serialize)]
pub struct LockKnobs {
    /// Lock clients.
    pub clients: usize,
    /// The stores they use (few, so that they contend).
    pub stores_used: u32,
    /// Lock names per store (a pipelining client uses at least [`Self::pipeline_max`]).
    pub names_per_store: usize,
    /// Mean think time between a client's operations (µs).
    pub think_mean_us: u64,
    /// Mean time a client holds a lock before releasing it (µs).
    pub hold_mean_us: u64,
    /// Session TTLs clients ask for (ms), one per client in turn.
    pub ttl_ms: u64,
    /// Probability an acquire is a `try`.
    pub try_p: f64,
    /// Probability an acquire is shared.
    pub shared_p: f64,
    /// Probability an action is a holders query.
    pub holders_p: f64,
    /// Probability an action closes the session.
    pub close_p: f64,
    /// Probability, per action in the safety phase, that the client pauses (up to three
    /// TTLs, so past its deadline).
    pub pause_p: f64,
    /// Probability, per action in the safety phase, that the client crashes.
    pub crash_p: f64,
    /// Share of the clients that pipeline: each keeps up to [`Self::pipeline_max`]
    /// requests in flight on its session stream (DESIGN §8), on distinct names.
    pub pipelined_p: f64,
    /// Requests a pipelining client keeps in flight at most, keep-alive aside.
    pub pipeline_max: usize,
    /// Lock names are paths in a small tree per store (`/g`, `/g/a`, `/g/a/x`, ...), so
    /// some names cover others and the cover rule and intention modes run (seed 004 §9);
    /// otherwise they are siblings (`/g/l0`, `/g/l1`, ...).
    pub nested_names: bool,
    /// Every other client keeps its session in another store than its names (DESIGN
    /// §4, "One session per client").
    pub grouped: bool,
}

impl LockKnobs {
    /// Draw the lock workload from its own generator.
    pub fn draw(rng: &mut Rng, stores: u32) -> LockKnobs {
        LockKnobs {
            clients: 2 + rng.below(7) as usize,
            stores_used: 1 + rng.below(3.min(stores as u64)) as u32,
            names_per_store: 1 + rng.below(3) as usize,
            think_mean_us: 10_000 + rng.below(300_000),
            hold_mean_us: 10_000 + rng.below(1_000_000),
            ttl_ms: [1_000, 2_000, 4_000][rng.below(3) as usize],
            try_p: [0.1, 0.5][rng.below(2) as usize],
            shared_p: [0.0, 0.2, 0.5][rng.below(3) as usize],
            holders_p: 0.1 + 0.1 * rng.below(2) as f64,
            close_p: [0.0, 0.02][rng.below(2) as usize],
            pause_p: [0.0, 0.01, 0.03][rng.below(3) as usize],
            crash_p: [0.0, 0.005, 0.02][rng.below(3) as usize],
            pipelined_p: 0.0,
            pipeline_max: 1,
            nested_names: false,
            grouped: false,
        }
    }

    /// Draw the pipelining knobs from their own generator, so that a run in which no
    /// client pipelines is exactly the run its sim seed gave before clients could.
    pub fn draw_pipelining(&mut self, rng: &mut Rng, mode: Pipelining) {
        let share = [0.0, 0.5, 1.0][rng.below(3) as usize];
        let max = 1 + rng.below(8) as usize;
        (self.pipelined_p, self.pipeline_max) = match mode {
            Pipelining::Drawn => (share, max),
            Pipelining::Off => (0.0, 1),
            Pipelining::Forced => (1.0, max.max(2)),
        };
    }
}

impl LockKnobs {
    /// Draw the shape of lock names from its own generator (which also gives each client
    /// its names), so that a run with sibling names is exactly the run its sim seed gave
    /// before names had paths.
    pub fn draw_paths(&mut self, rng: &mut Rng, choice: LockPaths) {
        let nested = rng.chance(0.75);
        self.nested_names = match choice {
            LockPaths::Drawn => nested,
            LockPaths::Flat => false,
            LockPaths::Nested => true,
        };
    }
}

/// The shape of the lock clients' names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum LockPaths {
    /// The sim seed decides (nested in three runs out of four).
    #[default]
    Drawn,
    /// Sibling names only (`/g/l0`, `/g/l1`, ...): no name covers another.
    Flat,
    /// Names from a small tree per store, some ancestors of others.
    Nested,
}

/// Which lock clients pipeline requests on their session stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum Pipelining {
    /// The sim seed decides: none, half or all of the clients, 1 to 8 requests in flight.
    #[default]
    Drawn,
    /// No client pipelines: one request at a time per session.
    Off,
    /// Every client pipelines, with 2 to 8 requests in flight.
    Forced,
}

/// The disks of one run (DESIGN §10, durable before acknowledged): how long a group commit
/// takes, how often one stalls, and what a crash does to the commit it interrupts. Drawn
/// from their own generator, so that a run whose disk is synchronous is exactly the run
/// its seed gave before disks could fail.
#[derive(Clone, Debug, Serialize)]
pub struct DiskKnobs {
    /// A group commit takes up to this long (µs); 0: the disk is synchronous, every
    /// persist durable as the core outputs it (no lost or torn write, no stall).
    pub sync_max_us: u64,
    /// Probability, while faults are on, that a commit stalls.
    pub stall_p: f64,
    /// A stalled commit takes up to this much longer (µs): up to three leases.
    pub stall_max_us: u64,
    /// Probability that a crash during a commit leaves its record torn (a prefix of its
    /// bytes on the disk); otherwise the record is on the disk whole or not at all.
    pub torn_p: f64,
    /// Probability that the nemesis aims a crash at a device with writes not yet synced.
    pub aim_unsynced_p: f64,
}

impl DiskKnobs {
    /// Draw the disks from their own generator.
    pub fn draw(rng: &mut Rng, choice: DiskModel) -> DiskKnobs {
        let k = DiskKnobs {
            sync_max_us: [0, 300, 3_000, 20_000][rng.below(4) as usize],
            stall_p: [0.0, 0.002, 0.02][rng.below(3) as usize],
            stall_max_us: 100_000 + rng.below(6_000_000),
            torn_p: [0.3, 0.7][rng.below(2) as usize],
            aim_unsynced_p: [0.0, 0.3, 0.7][rng.below(3) as usize],
        };
        match choice {
            DiskModel::Drawn => k,
            DiskModel::Synchronous => DiskKnobs {
                sync_max_us: 0,
                ..k
            },
        }
    }

    /// Whether writes go through the asynchronous pipeline.
    pub fn asynchronous(&self) -> bool {
        self.sync_max_us > 0
    }
}

/// Which disks a run has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum DiskModel {
    /// The sim seed decides (synchronous in one run out of four).
    #[default]
    Drawn,
    /// Every persist is durable as the core outputs it: no lost or torn write, no stall.
    Synchronous,
}
