//! Sweeps: many seeds on worker threads, summarised.

use crate::checks::Violation;
use crate::world::{RunReport, SimConfig, run};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Summary of a sweep.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    /// Runs completed.
    pub runs: u64,
    /// Total simulated time (µs).
    pub sim_us: u64,
    /// Total events.
    pub events: u64,
    /// Faults by kind.
    pub faults: crate::world::Faults,
    /// Regenerations.
    pub regenerations: u64,
    /// Migrations.
    pub migrations: u64,
    /// Relayouts.
    pub relayouts: u64,
    /// Writes acknowledged.
    pub writes_acked: u64,
    /// Longest failover seen (µs).
    pub max_failover_us: u64,
    /// Longest liveness convergence (µs).
    pub max_liveness_us: u64,
    /// Failing seeds with their first violation.
    pub failures: Vec<(u64, Violation)>,
}

impl Summary {
    fn add(&mut self, r: &RunReport) {
        self.runs += 1;
        self.sim_us += r.sim_us;
        self.events += r.events;
        let f = &mut self.faults;
        f.partitions += r.faults.partitions;
        f.one_way += r.faults.one_way;
        f.crashes += r.faults.crashes;
        f.pauses += r.faults.pauses;
        f.lost += r.faults.lost;
        f.duplicated += r.faults.duplicated;
        self.regenerations += r.regenerations;
        self.migrations += r.migrations;
        self.relayouts += r.relayouts;
        self.writes_acked += r.writes_acked;
        self.max_failover_us = self.max_failover_us.max(r.max_failover_us);
        self.max_liveness_us = self.max_liveness_us.max(r.liveness_converged_us.unwrap_or(0));
        if let Some(v) = r.violations.first() {
            self.failures.push((r.seed, v.clone()));
        }
    }
}

/// Run seeds `from..from+count` on `threads` workers; `progress` is called after each run
/// with the number done. Stops early after `stop_after` failures (0 = never).
pub fn sweep(
    from: u64,
    count: u64,
    threads: usize,
    template: SimConfig,
    stop_after: usize,
    progress: impl Fn(u64) + Sync,
) -> Summary {
    let next = AtomicU64::new(from);
    let done = AtomicU64::new(0);
    let summary = Arc::new(Mutex::new(Summary::default()));
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= from + count {
                        break;
                    }
                    if stop_after > 0
                        && summary.lock().expect("summary").failures.len() >= stop_after
                    {
                        break;
                    }
                    let mut cfg = template.clone();
                    cfg.seed = seed;
                    cfg.trace = false;
                    let r = run(cfg);
                    summary.lock().expect("summary").add(&r);
                    progress(done.fetch_add(1, Ordering::Relaxed) + 1);
                }
            });
        }
    });
    let mut s = Arc::try_unwrap(summary).expect("threads joined").into_inner().expect("summary");
    s.failures.sort_by_key(|f| f.0);
    s
}
