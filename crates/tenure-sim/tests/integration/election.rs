//! The coordinator's election in the simulator (seed 002 §14.3; DESIGN §6): a bounded
//! sweep elects with both algorithms under faults aimed at the coordinator and finds no
//! violation; the message counts sit where §14.3.3 puts them; a seed replays exactly; and
//! each election checker catches the planted bug it is meant for, on a seed that passes
//! without it. Runs are shortened (10 s of faults) to keep the file well under a minute
//! in `--release` on two cores.

use crate::common;
use tenure_core::PlantedBugs;
use tenure_sim::election::ElectionViolation;
use tenure_sim::{Outcome, SimConfig, Violation, run, sweep};

fn short(seed: u64) -> SimConfig {
    let mut c = SimConfig::new(seed);
    c.safety_us = 10_000_000;
    // Membership changes have their own tests (tests/integration/membership.rs).
    c.membership = false;
    c
}

/// Seeds swept by `bounded_election_sweep_finds_no_violation` (override with `SIM_SEEDS`).
fn seeds() -> u64 {
    common::seeds_from_env("SIM_SEEDS", 40)
}

// DESIGN §6: no seed of a bounded sweep breaks an election invariant, and the sweep
// exercised both algorithms, the coordinator's commands (some refused as stale), the
// faults aimed at the coordinator and the liveness phase's crash of it.
#[test]
fn bounded_election_sweep_finds_no_violation() {
    let s = sweep(0, seeds(), 2, &short(0), 0, |_, _| {});
    for f in &s.failures {
        eprintln!("seed {} {:?}: {}", f.seed, f.outcome, f.message);
    }
    let e = &s.elections;
    eprintln!("{e:#?}");
    assert!(e.bully.runs > 0 && e.ring.runs > 0, "both algorithms ran");
    assert!(e.commands_sent > 0 && e.commands_applied > 0 && e.commands_refused > 0);
    assert!(e.coordinator_faults > 0 && e.paused_at_command > 0);
    assert!(e.coordinator_kept_down > 0);
    assert!(e.coordinator_checks > 0 && e.fencing_checks > 0 && e.convergence_checks > 0);
    assert_eq!(
        s.failures.len(),
        0,
        "failing seeds: {:?}",
        s.failures.iter().map(|f| f.seed).collect::<Vec<_>>()
    );
    // §14.3.3 with n = 5: a ring election takes 2(n − 1) = 8 messages when every process
    // is live (the median: faults add retries and skipped successors to some); a bully
    // election started by the highest running process is its COORDINATOR to the others,
    // plus ELECTION to crashed higher ones: n − 2 to live processes when the top one is
    // down, n − 1 when it initiates itself.
    let n = 5;
    assert_eq!(e.ring.per_election.median(), Some(2 * (n - 1)));
    let best = e.bully.per_election_highest.median().expect("counted");
    assert!((n - 2..=n).contains(&best), "bully best case: {best}");
    // A cascade started by the lowest process is the quadratic case.
    let worst = e.bully.per_episode_lowest.max().expect("counted");
    assert!(worst >= (n - 1) * (n - 2), "bully worst case: {worst}");
}

// DESIGN §10: a run replays exactly.
#[test]
fn a_seed_with_elections_replays() {
    let once = |seed| {
        let mut c = short(seed);
        c.trace = true;
        let r = run(c);
        (r.fingerprint, r.events, r.trace.len(), r.elections.terms)
    };
    let a = once(3);
    assert_eq!(a, once(3));
    assert!(a.3 > 0, "terms followed");
}

/// Sweep seeds with a planted bug until a violation; return the seed and the violation,
/// after checking that the same seed passes without the bug.
fn caught(p: PlantedBugs, limit: u64) -> (u64, Outcome, ElectionViolation) {
    let mut c = short(0);
    c.planted = p;
    let s = sweep(0, limit, 2, &c, 1, |_, _| {});
    let Some(f) = s.failures.into_iter().next() else {
        panic!("no seed below {limit} caught the planted bug");
    };
    let Violation::Election(v) = f.violation else {
        panic!(
            "seed {}: expected an election violation, got {}",
            f.seed, f.message
        );
    };
    let clean = run(short(f.seed));
    assert_eq!(
        clean.outcome,
        Outcome::Passed,
        "seed {} without the bug: {:?}",
        f.seed,
        clean.violations
    );
    (f.seed, f.outcome, v)
}

// Checker 1 (one coordinator per term): a follower acting as coordinator under its
// leader's term.
#[test]
fn planted_follower_acts_is_caught_as_two_coordinators_in_a_term() {
    let (seed, outcome, v) = caught(
        PlantedBugs {
            election_follower_acts: true,
            ..Default::default()
        },
        10,
    );
    assert!(
        matches!(v, ElectionViolation::TwoCoordinators { .. }),
        "seed {seed}: {v}"
    );
    assert_eq!(outcome, Outcome::Correctness);
}

// Checker 2 (fencing): a device applying a deposed coordinator's command.
#[test]
fn planted_ignore_term_is_caught_as_a_stale_command_applied() {
    let (seed, outcome, v) = caught(
        PlantedBugs {
            election_ignore_term: true,
            ..Default::default()
        },
        30,
    );
    assert!(
        matches!(v, ElectionViolation::StaleCommandApplied { .. }),
        "seed {seed}: {v}"
    );
    assert_eq!(outcome, Outcome::Correctness);
}

// Checker 3 (convergence): members that never elect when the coordinator falls silent
// leave the cluster without one after the liveness phase crashes it.
#[test]
fn planted_no_restart_is_caught_as_no_coordinator_after_faults_stop() {
    let (seed, outcome, v) = caught(
        PlantedBugs {
            election_no_restart: true,
            ..Default::default()
        },
        30,
    );
    assert!(
        matches!(v, ElectionViolation::NoCoordinator { .. }),
        "seed {seed}: {v}"
    );
    assert_eq!(outcome, Outcome::Liveness);
}

// DESIGN §6 (terms fence commands): sim seed 1371 once reported a device applying its own
// older term's command after it saw a newer term of its own. The simulator let an input
// in while the device, paused again between deciding a command and sending it, still
// held that command; a paused device now handles nothing until the command has left.
#[test]
fn seed_1371_a_held_command_leaves_before_anything_newer() {
    let r = run(SimConfig::new(1371));
    assert_eq!(r.outcome, Outcome::Passed, "{:?}", r.violations);
}

// DESIGN §6 (a retiring device claims no term): sim seed 1095 once ran an election storm after
// faults stopped, terms into the thousands. The coordinator's record made d5 retiring;
// d5 refused that record because it came from a term older than its own, so each of the
// two outranked the other under bully and answered the other's COORDINATOR with a new
// election. A newer record that makes a device retiring is now adopted whatever its term.
#[test]
fn seed_1095_a_device_adopts_the_record_that_retires_it() {
    let r = run(SimConfig::new(1095));
    assert_eq!(r.outcome, Outcome::Passed, "{:?}", r.violations);
}

// DESIGN §6, sim seed 3353: two devices each held a record (of the same change number)
// that made the other retiring; each outranked the other under bully and deposed it,
// and each new term restarted the coordinator's wait for its first round, so the
// record that settles it was never sent — terms ran into the thousands and the Alives
// answering older Alives grew by thousands a second. A coordinator elected again keeps
// its round schedule, and answers an older Alive at most once a heartbeat.
#[test]
fn seed_3353_a_coordinator_elected_again_keeps_its_rounds() {
    let r = run(SimConfig::new(3353));
    assert_eq!(r.outcome, Outcome::Passed, "{:?}", r.violations);
}

// DESIGN §6 (a retiring device claims no term), sim seed 20906: a spare had claimed term
// (10, d6) before it was made retiring; d5 was then elected under (10, d5), lower by id.
// d6 refused the lower term and could not lead, so it followed nobody and called an
// election every second, which d5, in office under a term of the same number, answered
// with its announcement. A coordinator now answers a retiring member's election of its
// own term number with a new term above both.
#[test]
fn seed_20906_a_retiring_device_with_an_equal_term_gets_a_newer_one() {
    let r = run(SimConfig::new(20906));
    assert_eq!(r.outcome, Outcome::Passed, "{:?}", r.violations);
}
