//! Every simulator knob, drawn from one seed (TigerBeetle's VOPR: one seed → one PRNG →
//! every fault probability and workload rate; printed at start so a run can be read).

use serde::Serialize;
use tenure_core::rng::Rng;

/// Fault and workload parameters of one run.
#[derive(Clone, Debug, Serialize)]
pub struct Knobs {
    /// One-way latency bounds (µs).
    pub latency_min_us: u64,
    /// Upper latency bound (µs).
    pub latency_max_us: u64,
    /// Probability a message is lost.
    pub loss: f64,
    /// Probability a message is duplicated (0 unless the seed allows it).
    pub duplicate: f64,
    /// Mean time between nemesis actions (µs).
    pub nemesis_mean_us: u64,
    /// Probability weights of nemesis actions: partition, crash, pause, heal.
    pub weights: [u32; 4],
    /// Whether partitions may be one-way.
    pub one_way: bool,
    /// Minimum time a partition stays (µs).
    pub partition_min_us: u64,
    /// Restart delay bounds after a crash (µs).
    pub restart_max_us: u64,
    /// Pause length bound (µs); pauses may outlast leases.
    pub pause_max_us: u64,
    /// Mean time between client writes (µs).
    pub write_mean_us: u64,
    /// Mean time between outside-policy commands (µs).
    pub policy_mean_us: u64,
    /// Per-device clock drift bound (parts per million).
    pub drift_ppm_max: u64,
}

impl Knobs {
    /// Draw the knobs from the run's generator.
    pub fn draw(rng: &mut Rng) -> Knobs {
        let latency_min_us = 100 + rng.below(900);
        Knobs {
            latency_min_us,
            latency_max_us: latency_min_us + rng.below(20_000),
            loss: [0.0, 0.001, 0.01, 0.05][rng.below(4) as usize],
            duplicate: if rng.chance(0.3) { 0.01 } else { 0.0 },
            nemesis_mean_us: 300_000 + rng.below(2_000_000),
            weights: [
                rng.below(4) as u32 + 1,
                rng.below(4) as u32 + 1,
                rng.below(3) as u32,
                2,
            ],
            one_way: rng.chance(0.3),
            partition_min_us: 200_000 + rng.below(3_000_000),
            restart_max_us: 100_000 + rng.below(5_000_000),
            pause_max_us: 100_000 + rng.below(5_000_000),
            write_mean_us: 5_000 + rng.below(100_000),
            policy_mean_us: 500_000 + rng.below(3_000_000),
            drift_ppm_max: rng.below(400),
        }
    }
}
