//! A sweep's lookup figures: the measured maxima beside the bounds of the runs that
//! reached them (each sim seed draws its own intervals, so each run has its own bounds),
//! the largest measured/bound ratio, and what the runs did.

use super::LookupStats;
use super::knobs::Profile;
use serde::Serialize;

/// The worst of one measure across runs.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Extreme {
    /// Runs that measured it at least once.
    pub runs: u64,
    /// The largest value (µs).
    pub max_us: u64,
    /// The bound of the run that measured it (µs).
    pub bound_us: u64,
    /// That run's sim seed.
    pub seed: u64,
    /// The largest measured/bound ratio.
    pub ratio: f64,
    /// The sim seed of that ratio.
    pub ratio_seed: u64,
}

impl Extreme {
    fn add(&mut self, seed: u64, measured: u64, bound: u64, measured_any: bool) {
        if !measured_any {
            return;
        }
        self.runs += 1;
        if measured > self.max_us {
            (self.max_us, self.bound_us, self.seed) = (measured, bound, seed);
        }
        let ratio = measured as f64 / bound.max(1) as f64;
        if ratio > self.ratio {
            (self.ratio, self.ratio_seed) = (ratio, seed);
        }
    }
}

/// A sweep's lookup figures.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LookupSummary {
    /// Runs of the common profile.
    pub common_runs: u64,
    /// Runs of the rare profile.
    pub rare_runs: u64,
    /// (2) Outage after a leader crash.
    pub outage: Extreme,
    /// (3) Volatile staleness.
    pub volatile: Extreme,
    /// (4) Persistent staleness.
    pub persistent: Extreme,
    /// (6) A subscriber's divergence from the leader.
    pub divergence: Extreme,
    /// (7) Stabilisation after a boot, a rare burst or a full restart.
    pub stabilisation: Extreme,
    /// Everything the runs did and checked, summed.
    pub totals: LookupStats,
}

impl LookupSummary {
    /// Add one run's figures.
    pub fn add(&mut self, seed: u64, s: &LookupStats) {
        match s.profile {
            Some(Profile::Common) => self.common_runs += 1,
            Some(Profile::Rare) => self.rare_runs += 1,
            None => return,
        }
        let b = &s.bounds;
        self.outage
            .add(seed, s.max_outage_us, b.outage_us, s.outages > 0);
        self.volatile.add(
            seed,
            s.max_volatile_staleness_us,
            b.volatile_us,
            s.volatile_checks > 0,
        );
        self.persistent.add(
            seed,
            s.max_persistent_staleness_us,
            b.persistent_us,
            s.persistent_checks > 0,
        );
        self.divergence.add(
            seed,
            s.max_divergence_us,
            b.subscriber_us,
            s.view_checks > 0,
        );
        self.stabilisation.add(
            seed,
            s.max_stabilisation_us,
            b.stabilisation_us,
            s.stabilisations > 0,
        );
        self.totals.add(s);
    }
}

impl LookupStats {
    /// Add another run's counts (maxima are kept by [`LookupSummary`]).
    pub fn add(&mut self, o: &LookupStats) {
        self.sim_us += o.sim_us;
        self.events += o.events;
        self.crashes += o.crashes;
        self.leader_crashes += o.leader_crashes;
        self.power_outages += o.power_outages;
        self.full_restarts += o.full_restarts;
        self.lost += o.lost;
        self.partitions += o.partitions;
        self.pauses += o.pauses;
        self.corruptions += o.corruptions;
        self.updates += o.updates;
        self.acks += o.acks;
        self.deaths += o.deaths;
        self.answers += o.answers;
        self.no_leader += o.no_leader;
        self.failed += o.failed;
        self.events_applied += o.events_applied;
        self.syncs += o.syncs;
        self.resubscribes += o.resubscribes;
        self.moves += o.moves;
        self.leader_checks += o.leader_checks;
        self.outages += o.outages;
        self.failovers += o.failovers;
        self.volatile_checks += o.volatile_checks;
        self.persistent_checks += o.persistent_checks;
        self.acked_checks += o.acked_checks;
        self.view_checks += o.view_checks;
        self.stabilisations += o.stabilisations;
    }
}
