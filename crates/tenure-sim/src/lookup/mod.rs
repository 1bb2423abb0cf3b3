//! The lookup world: the Aladdin lookup service (seed 003, DESIGN §7) under the seed's
//! failure classes, with checkers for its invariants and its bounds (DESIGN §9.7).
//!
//! Every device is a full [`tenure_core::Device`] (one small store besides its lookup
//! node). One sim seed draws everything ([`knobs`]): the profile, the cluster (2–6 devices,
//! `t`, the UPS-designated node), seed 003's intervals, δ_c and every clock, the network,
//! the workload and the nemesis.
//!
//! - **Common profile** ([`knobs::Profile::Common`]): after the cluster first stabilises,
//!   one fault at a time, each only once the previous one is repaired and the service is
//!   healthy again, spaced by at least `MPRI + 3 HB + RTT + Θ`: the loss of one message
//!   (often the worst one: a refresh, query or answer to or from the leader), the crash of
//!   one node — the leader in half the crashes — restarted after a short or a long time,
//!   or a short power outage (every node but the UPS one crashes and restarts). Half the
//!   runs end with a full restart of every device. Every checker of [`checks`] is armed.
//! - **Rare profile** ([`knobs::Profile::Rare`]): bursts of loss, one-way and two-way
//!   partitions, pauses longer than three heartbeats, crashes of several nodes and state
//!   corruption through [`tenure_core::lookup::Node::corrupt`] (zero leaders, two
//!   leaders, fake ages, random flags), separated by calm periods as long as the
//!   stabilisation bound, then a final calm phase. Safety (integrity, event order) always;
//!   stabilisation within its bound after each burst; the bounds again once the final
//!   phase has stabilised and every entry had time to be refreshed or to expire.
//!
//! The workload ([`workload`]): providers of volatile and persistent entries (refreshing,
//! changing values, revoking, dying, reborn; persistent updates retried within Θ until
//! acknowledged), queriers (Get and List through random devices, retrying `NoLeader`),
//! subscribers on prefixes that keep a view, detect sequence gaps, refresh their
//! subscription with their position and move between devices; and a prober that measures
//! the outage after each leader crash.

pub mod checks;
pub mod knobs;
mod monitor;
mod nemesis;
pub mod summary;
pub mod truth;
pub mod workload;
mod world;

use crate::checks::Violation;
use crate::world::{Outcome as RunOutcome, RunReport, SimConfig};
use checks::{Bounds, LookupViolation};
use knobs::{LookupKnobs, Profile};
use serde::Serialize;

/// What a lookup run measured and did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LookupStats {
    /// The profile the sim seed chose.
    pub profile: Option<Profile>,
    /// The bounds the run was held to.
    pub bounds: Bounds,
    /// Simulated time (µs).
    pub sim_us: u64,
    /// Events processed.
    pub events: u64,
    /// Device crashes.
    pub crashes: u64,
    /// Crashes of the leader (outages measured).
    pub leader_crashes: u64,
    /// Power outages (every node but the UPS one).
    pub power_outages: u64,
    /// Full restarts of every device.
    pub full_restarts: u64,
    /// Messages lost (targeted losses, random loss and partitions).
    pub lost: u64,
    /// Partitions.
    pub partitions: u64,
    /// Pauses.
    pub pauses: u64,
    /// State corruptions.
    pub corruptions: u64,
    /// Updates sent by providers (publishes and revokes, first attempts).
    pub updates: u64,
    /// Persistent updates acknowledged.
    pub acks: u64,
    /// Provider deaths.
    pub deaths: u64,
    /// Queries answered by a leader.
    pub answers: u64,
    /// Queries answered `NoLeader`.
    pub no_leader: u64,
    /// Requests whose connection failed or timed out.
    pub failed: u64,
    /// Subscription events applied.
    pub events_applied: u64,
    /// Syncs applied.
    pub syncs: u64,
    /// Subscription refreshes after a gap or a new leader.
    pub resubscribes: u64,
    /// Subscribers that moved to another device.
    pub moves: u64,
    /// (1)/(7) samples of the leader predicate under a quiet-period requirement.
    pub leader_checks: u64,
    /// (2) Outages measured.
    pub outages: u64,
    /// (2) The longest (µs).
    pub max_outage_us: u64,
    /// (2) Every outage measured, in order (µs).
    #[serde(skip)]
    pub outage_samples_us: Vec<u64>,
    /// Leader failovers measured: a leader crash to the next node declaring itself
    /// leader (seed 003's Lemma: within 3 heartbeat intervals).
    pub failovers: u64,
    /// The longest (µs).
    pub max_failover_us: u64,
    /// Every failover measured, in order (µs).
    #[serde(skip)]
    pub failover_samples_us: Vec<u64>,
    /// (3) Volatile answers checked.
    pub volatile_checks: u64,
    /// (3) The stalest (µs).
    pub max_volatile_staleness_us: u64,
    /// (4) Persistent answers checked.
    pub persistent_checks: u64,
    /// (4) The stalest (µs).
    pub max_persistent_staleness_us: u64,
    /// (5) Answers checked against an acknowledged persistent version.
    pub acked_checks: u64,
    /// (6) Subscriber views compared with the leader's state.
    pub view_checks: u64,
    /// (6) The longest divergence that ended (µs).
    pub max_divergence_us: u64,
    /// (7) Stabilisations measured (boot, bursts, restarts).
    pub stabilisations: u64,
    /// (7) The longest (µs): last fault to the start of the stable stretch.
    pub max_stabilisation_us: u64,
}

/// What [`world::World::run`] hands back.
pub(crate) struct Outcome {
    fingerprint: u64,
    trace: String,
    stats: LookupStats,
    knobs: LookupKnobs,
    violations: Vec<LookupViolation>,
}

/// Run one sim seed of the lookup world.
pub fn run(cfg: SimConfig) -> RunReport {
    run_with(cfg, |_| {})
}

/// Run one sim seed of the lookup world with its drawn knobs changed by `adjust` first (the
/// lab fixes seed 003's intervals this way, so every run is held to the same bounds).
pub fn run_with(cfg: SimConfig, adjust: impl FnOnce(&mut LookupKnobs)) -> RunReport {
    let seed = cfg.seed;
    let out = world::World::new(cfg, adjust).run();
    let failed_at_us = out.violations.first().map(LookupViolation::at_us);
    let violations: Vec<Violation> = out.violations.into_iter().map(Violation::Lookup).collect();
    let outcome = match violations.first().map(Violation::kind) {
        None => RunOutcome::Passed,
        Some(crate::checks::ViolationKind::Correctness) => RunOutcome::Correctness,
        Some(crate::checks::ViolationKind::Liveness) => RunOutcome::Liveness,
    };
    RunReport {
        seed,
        outcome,
        sim_us: out.stats.sim_us,
        events: out.stats.events,
        failed_at_us,
        violations,
        trace: out.trace,
        fingerprint: out.fingerprint,
        lookup: Some(out.stats),
        lookup_knobs: Some(out.knobs),
        ..RunReport::default()
    }
}
