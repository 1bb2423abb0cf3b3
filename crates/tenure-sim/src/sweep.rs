//! Sweeps: many seeds on worker threads (each run is independent and deterministic, so
//! the order in which workers finish does not matter), summarised.

use crate::checks::Violation;
use crate::world::{Faults, Outcome, RunReport, SimConfig, run};
use serde::Serialize;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// One failing seed.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// Correctness or liveness.
    pub outcome: Outcome,
    /// Simulated time of the failure (µs since the start).
    pub at_us: u64,
    /// The first violation.
    pub violation: Violation,
    /// Its human rendering.
    pub message: String,
}

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
    pub faults: Faults,
    /// Manager regenerations.
    pub regenerations: u64,
    /// Client requests forwarded between devices.
    pub forwarded: u64,
    /// Committed migrations.
    pub migrations: u64,
    /// Committed relayouts.
    pub relayouts: u64,
    /// Operator policy commands sent.
    pub policy_commands: u64,
    /// Client writes issued.
    pub writes_issued: u64,
    /// Writes acknowledged.
    pub writes_acked: u64,
    /// Longest failover seen (µs).
    pub max_failover_us: u64,
    /// Longest liveness convergence (µs).
    pub max_liveness_us: u64,
    /// How often each checker compared something.
    pub checks: crate::checks::CheckCounts,
    /// What the lock clients did.
    pub locks: crate::world::LockStats,
    /// How often the lock checkers compared something.
    pub lock_checks: crate::lockcheck::LockCheckCounts,
    /// SafeTalk messages.
    pub safetalk: crate::world::SafeTalkCost,
    /// Epoch transitions' votes and commits between devices.
    pub transitions: crate::world::TransitionCost,
    /// What the object clients and watchers did, and the object checkers' counts.
    pub objects: crate::objects::ObjectStats,
    /// What the elections did (message counts per algorithm), and the election
    /// checkers' counts.
    pub elections: crate::election::ElectionStats,
    /// What the snapshots did, and the snapshot checkers' counts.
    pub snapshots: crate::snapshot::SnapshotStats,
    /// What the membership changes did, and the membership checkers' counts.
    pub membership: crate::membership::MembershipStats,
    /// The lookup world's figures (runs of `WorldKind::Lookup`).
    pub lookup: crate::lookup::summary::LookupSummary,
    /// The windows after the wall-clock steps the seeds drew.
    pub step_windows: StepWindows,
    /// Runs with a correctness violation.
    pub correctness_failures: u64,
    /// Runs with a liveness failure.
    pub liveness_failures: u64,
    /// Failing seeds with their first violation, by seed.
    pub failures: Vec<Failure>,
}

/// The windows after the wall-clock steps the seeds drew ([`crate::world::StepWindow`]),
/// over a sweep's runs with faults: with the steps taken, and at the same instants of
/// the runs that took none (two in three draw none; `--clock-steps off` takes none).
#[derive(Clone, Debug, Default, Serialize)]
pub struct StepWindows {
    /// Windows after a step taken.
    pub taken: WindowFigures,
    /// Windows at a drawn step's instant with no step taken.
    pub not_taken: WindowFigures,
}

/// Per window: the longest a store was without a working manager, and the lock grants.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WindowFigures {
    /// Per window, the longest a store was without a working manager (µs).
    pub longest_outage_us: Vec<u64>,
    /// Per window, the lock grants within it.
    pub grants: Vec<u64>,
}

impl WindowFigures {
    /// Windows measured.
    pub fn len(&self) -> usize {
        self.grants.len()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.grants.is_empty()
    }

    /// Median and largest outage (µs), median and total grants.
    pub fn figures(&self) -> (u64, u64, u64, u64) {
        let (om, ox) = median_max(&self.longest_outage_us);
        let (gm, _) = median_max(&self.grants);
        (om, ox, gm, self.grants.iter().sum())
    }
}

fn median_max(xs: &[u64]) -> (u64, u64) {
    let mut v = xs.to_vec();
    v.sort_unstable();
    (
        v.get(v.len() / 2).copied().unwrap_or(0),
        v.last().copied().unwrap_or(0),
    )
}

impl StepWindows {
    fn add(&mut self, ws: &[crate::world::StepWindow]) {
        for w in ws {
            let f = if w.taken {
                &mut self.taken
            } else {
                &mut self.not_taken
            };
            f.longest_outage_us.push(w.longest_outage_us);
            f.grants.push(w.grants);
        }
    }
}

impl Summary {
    /// Add one run.
    pub fn add(&mut self, r: &RunReport) {
        self.runs += 1;
        self.sim_us += r.sim_us;
        self.events += r.events;
        self.faults.add(&r.faults);
        self.checks.add(&r.checks);
        self.locks.add(&r.locks);
        self.lock_checks.add(&r.lock_checks);
        // Every manager's messages, holding a chunk of its store or not.
        self.safetalk.add(&r.safetalk);
        self.safetalk.add(&r.safetalk_apart);
        self.transitions.add(&r.transitions);
        self.objects.add(&r.objects);
        self.elections.add(&r.elections);
        self.snapshots.add(&r.snapshots);
        self.membership.add(&r.membership);
        if let Some(l) = &r.lookup {
            self.lookup.add(r.seed, l);
        }
        self.step_windows.add(&r.step_windows);
        self.regenerations += r.regenerations;
        self.forwarded += r.forwarded;
        self.migrations += r.migrations;
        self.relayouts += r.relayouts;
        self.policy_commands += r.policy_commands;
        self.writes_issued += r.writes_issued;
        self.writes_acked += r.writes_acked;
        self.max_failover_us = self.max_failover_us.max(r.max_failover_us);
        self.max_liveness_us = self
            .max_liveness_us
            .max(r.liveness_converged_us.unwrap_or(0));
        match r.outcome {
            Outcome::Passed => {}
            Outcome::Correctness => self.correctness_failures += 1,
            Outcome::Liveness => self.liveness_failures += 1,
        }
        if let Some(v) = r.violations.first() {
            self.failures.push(Failure {
                seed: r.seed,
                outcome: r.outcome,
                at_us: r.failed_at_us.unwrap_or(r.sim_us),
                violation: v.clone(),
                message: v.to_string(),
            });
        }
    }

    /// The overall outcome: correctness failures dominate liveness failures.
    pub fn outcome(&self) -> Outcome {
        if self.correctness_failures > 0 {
            Outcome::Correctness
        } else if self.liveness_failures > 0 {
            Outcome::Liveness
        } else {
            Outcome::Passed
        }
    }
}

/// Run seeds `from..from + count` on `threads` workers with `template`'s other settings.
/// `progress` is called after each run with the number done and that run's report.
/// Stops handing out seeds after `stop_after` failures (0 = never).
pub fn sweep(
    from: u64,
    count: u64,
    threads: usize,
    template: &SimConfig,
    stop_after: usize,
    progress: impl Fn(u64, &RunReport) + Sync,
) -> Summary {
    let next = AtomicU64::new(from);
    let done = AtomicU64::new(0);
    let failures = AtomicU64::new(0);
    let summary = Mutex::new(Summary::default());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                loop {
                    if stop_after > 0 && failures.load(Ordering::Relaxed) >= stop_after as u64 {
                        break;
                    }
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= from.saturating_add(count) {
                        break;
                    }
                    let mut cfg = template.clone();
                    cfg.seed = seed;
                    cfg.trace = false;
                    let r = run(cfg);
                    if r.outcome != Outcome::Passed {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                    summary.lock().expect("summary").add(&r);
                    progress(done.fetch_add(1, Ordering::Relaxed) + 1, &r);
                }
            });
        }
    });
    let mut s = summary.into_inner().expect("summary");
    s.failures.sort_by_key(|f| f.seed);
    s
}
