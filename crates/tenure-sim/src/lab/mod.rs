//! The lab: the seeds' analytic tables reproduced by measurement (DESIGN §6). Each
//! experiment runs real state machines — the mutual-exclusion machines of
//! `tenure_core::mutex`, the election machines of `tenure_core::election`, Tenure's store
//! and lock service — in a seeded, deterministic simulation, counts what they do, and sets
//! the count beside the seed's figure with a verdict ([`report::Verdict`]).
//!
//! - [`mutex`], [`mutex_problems`]: lecture Fig. 14.7 (seed 002 §14.4).
//! - [`election`]: lecture §14.3.3, bully and ring message counts.
//! - [`safetalk`] (with [`twopc`]): seed 004 §3 and §8, SafeTalk against two-phase commit
//!   and Menasce's update cost C_updt.
//! - [`recovery`] (with [`recovery_sim`]): seed 004 §4.1 and §8, Menasce's logical
//!   component recovery C_rec and R, with its checkers, beside Tenure's own recovery from
//!   a manager crash; and [`merge`] (with [`merge_sim`]): seed 004 §4.5–§5.1, the logical
//!   component merge — messages and time per merge of two components against the counts
//!   the protocol text gives, and many components merging at once, with the pairwise,
//!   lock table union and deadlock-freedom checkers.
//! - [`lookup`]: seed 003, Aladdin's leader failover, outage and staleness bounds, read
//!   from the lookup world's checkers ([`crate::lookup`]) under the common failure case.

pub mod election;
pub mod lookup;
pub mod merge;
pub mod merge_sim;
pub mod mutex;
pub mod mutex_problems;
pub mod mutex_sim;
pub mod recovery;
pub mod recovery_sim;
pub mod report;
pub mod safetalk;
pub mod twopc;

pub use report::{Row, Verdict};

/// The lab's calm network: nothing lost, duplicated or slowed; each message takes one
/// message time (`MT`, 1 ms) plus up to `jitter_us`.
pub(crate) fn calm_net(jitter_us: u64) -> crate::net::NetParams {
    crate::net::NetParams {
        latency_min_us: mutex_sim::MT,
        latency_max_us: mutex_sim::MT + jitter_us,
        slow_p: 0.0,
        slow_us: 0,
        loss: 0.0,
        duplicate: 0.0,
    }
}
use serde::Serialize;

/// An experiment of the lab.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Experiment {
    /// Lecture Fig. 14.7: mutual exclusion.
    Mutex,
    /// Lecture §14.3.3: bully and ring elections.
    Election,
    /// Seed 004 §3: SafeTalk against two-phase commit.
    SafeTalk,
    /// Seed 004 §8: Menasce's update cost.
    Update,
    /// Seed 004 §4.1, §8: logical component recovery, and Tenure's; §4.5: logical
    /// component merge.
    Recovery,
    /// Seed 003: Aladdin's outage and staleness bounds.
    Lookup,
}

impl Experiment {
    /// Every experiment, in table order.
    pub const ALL: [Experiment; 6] = [
        Experiment::Mutex,
        Experiment::Election,
        Experiment::SafeTalk,
        Experiment::Update,
        Experiment::Recovery,
        Experiment::Lookup,
    ];

    /// The experiment's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Experiment::Mutex => "mutex",
            Experiment::Election => "election",
            Experiment::SafeTalk => "safetalk",
            Experiment::Update => "update",
            Experiment::Recovery => "recovery",
            Experiment::Lookup => "lookup",
        }
    }
}

/// How large a lab run is.
#[derive(Clone, Debug, Serialize)]
pub struct Scale {
    /// Seeds per measured figure.
    pub seeds: u64,
    /// Process counts of the mutual-exclusion figures.
    pub mutex_sizes: Vec<u64>,
    /// Process count of the "Problems" and checker runs.
    pub problems_n: u64,
    /// Process counts of the election figures.
    pub election_sizes: Vec<u64>,
    /// Those shown row by row (the others in the summary rows).
    pub election_shown: Vec<u64>,
    /// Chunks per store of the SafeTalk rows.
    pub safetalk_k: u64,
    /// Chunks per store of the update-cost rows.
    pub update_ks: Vec<u64>,
    /// Sites taking part in the recovery rows (`n`).
    pub recovery_sizes: Vec<u64>,
    /// Those shown row by row (the others in the summary rows).
    pub recovery_shown: Vec<u64>,
    /// `n` of Tenure's manager-crash rows (`n + 1` devices).
    pub tenure_recovery_sizes: Vec<u64>,
    /// Component sizes `(n1, n2)` of the rows of one merge.
    pub merge_pairs: Vec<(u64, u64)>,
    /// `(k, n)`: `k` components of `n` sites in all, merging at once.
    pub merge_many: Vec<(u64, u64)>,
    /// Simulated seconds of common failures per sim seed of the lookup rows.
    pub lookup_sim_s: u64,
}

impl Scale {
    /// The full run of `tenure lab`.
    pub fn full(seeds: u64) -> Scale {
        Scale {
            seeds,
            mutex_sizes: vec![3, 8, 16],
            problems_n: 5,
            election_sizes: (3..=32).collect(),
            election_shown: vec![3, 4, 8, 16, 32],
            safetalk_k: 3,
            update_ks: (2..=9).collect(),
            recovery_sizes: (3..=16).collect(),
            recovery_shown: vec![3, 4, 8, 16],
            tenure_recovery_sizes: vec![3, 4, 8, 16],
            merge_pairs: vec![(1, 1), (2, 2), (4, 4), (8, 8), (4, 12), (12, 4)],
            merge_many: vec![(4, 16), (8, 16), (8, 32)],
            lookup_sim_s: 600,
        }
    }

    /// A small run for tests.
    pub fn small(seeds: u64) -> Scale {
        Scale {
            seeds,
            mutex_sizes: vec![3, 5],
            problems_n: 3,
            election_sizes: (3..=6).collect(),
            election_shown: vec![3, 6],
            safetalk_k: 3,
            update_ks: vec![2, 3],
            recovery_sizes: (3..=5).collect(),
            recovery_shown: vec![3, 5],
            tenure_recovery_sizes: vec![3],
            merge_pairs: vec![(1, 1), (2, 3)],
            merge_many: vec![(3, 6)],
            lookup_sim_s: 120,
        }
    }
}

/// Run one experiment.
pub fn run(e: Experiment, scale: &Scale) -> Vec<Row> {
    match e {
        Experiment::Mutex => {
            let mut rows = mutex::rows(&scale.mutex_sizes, scale.seeds);
            rows.extend(mutex_problems::rows(scale.problems_n, scale.seeds));
            rows
        }
        Experiment::Election => {
            election::rows(&scale.election_sizes, &scale.election_shown, scale.seeds)
        }
        Experiment::SafeTalk => safetalk::rows(scale.safetalk_k, scale.seeds),
        Experiment::Update => safetalk::update_rows(&scale.update_ks, scale.seeds),
        Experiment::Recovery => {
            let mut rows = recovery::rows(
                &scale.recovery_sizes,
                &scale.recovery_shown,
                &scale.tenure_recovery_sizes,
                scale.seeds,
            );
            rows.extend(merge::rows(
                &scale.merge_pairs,
                &scale.merge_many,
                scale.seeds,
            ));
            rows
        }
        Experiment::Lookup => lookup::rows(scale.lookup_sim_s, scale.seeds),
    }
}
