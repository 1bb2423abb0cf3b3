//! Membership changes in the simulator (DESIGN §6): a bounded sweep adds spare devices
//! and removes members under crashes, pauses, partitions and loss, and finds no
//! violation; a seed replays exactly; and each membership checker catches the planted
//! bug it is meant for, on a seed that passes without it. Runs are shortened (10 s of
//! faults) to keep the file well under a minute in `--release` on two cores.

use crate::common;
use tenure_core::PlantedBugs;
use tenure_sim::membership::MembershipViolation;
use tenure_sim::{Outcome, SimConfig, Violation, run, sweep};

fn short(seed: u64) -> SimConfig {
    let mut c = SimConfig::new(seed);
    c.safety_us = 10_000_000;
    c
}

/// Seeds swept by `bounded_membership_sweep_finds_no_violation` (override with
/// `SIM_SEEDS`).
fn seeds() -> u64 {
    common::seeds_from_env("SIM_SEEDS", 32)
}

// DESIGN §6: no seed of a bounded sweep breaks a safety invariant (membership or any
// other), and the sweep did add and remove devices: spares were admitted, members
// retired and their processes stopped, records were checked.
#[test]
fn bounded_membership_sweep_finds_no_safety_violation() {
    let s = sweep(0, seeds(), 2, &short(0), 0, |_, _| {});
    for f in &s.failures {
        eprintln!("seed {} {:?}: {}", f.seed, f.outcome, f.message);
    }
    let m = &s.membership;
    eprintln!("{m:#?}");
    assert!(m.runs_with_spares > 0);
    assert!(m.adds_requested > 0 && m.adds_admitted > 0, "adds happened");
    assert!(
        m.removes_requested > 0 && m.removes_retired > 0,
        "removes happened"
    );
    assert!(m.retirements > 0, "retired processes stopped");
    assert!(m.record_checks > 0 && m.retired_checks > 0 && m.convergence_checks > 0);
    assert_eq!(
        s.correctness_failures,
        0,
        "failing seeds: {:?}",
        s.failures.iter().map(|f| f.seed).collect::<Vec<_>>()
    );
}

// DESIGN §6, §10: the same sweep, liveness included: every change settles after the
// faults stop (a retiring device drained and stopped, every member on the newest record
// and one coordinator).
#[test]
fn bounded_membership_sweep_finds_no_violation() {
    let s = sweep(0, seeds(), 2, &short(0), 0, |_, _| {});
    for f in &s.failures {
        eprintln!("seed {} {:?}: {}", f.seed, f.outcome, f.message);
    }
    assert_eq!(
        s.failures.len(),
        0,
        "failing seeds: {:?}",
        s.failures.iter().map(|f| f.seed).collect::<Vec<_>>()
    );
}

// DESIGN §10: a run with membership changes replays exactly.
#[test]
fn a_seed_with_membership_changes_replays() {
    let once = |seed| {
        let mut c = short(seed);
        c.trace = true;
        let r = run(c);
        let m = r.membership.clone();
        (
            r.fingerprint,
            r.events,
            r.trace.len(),
            m.adds_requested + m.removes_requested,
        )
    };
    let a = once(2);
    assert_eq!(a, once(2));
    assert!(a.3 > 0, "membership changes asked for");
}

/// Sweep seeds with a planted bug until a violation; return the seed and the violation,
/// after checking that the same seed passes without the bug.
fn caught(p: PlantedBugs, limit: u64) -> (u64, Outcome, MembershipViolation) {
    let mut c = short(0);
    c.planted = p;
    let s = sweep(0, limit, 2, &c, 1, |_, _| {});
    let Some(f) = s.failures.into_iter().next() else {
        panic!("no seed below {limit} caught the planted bug");
    };
    let Violation::Membership(v) = f.violation else {
        panic!(
            "seed {}: expected a membership violation, got {}",
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

// Checker 1a (records move forward): a device that takes an older record — a member's
// report to the coordinator, or a deposed coordinator's broadcast.
#[test]
fn planted_adopt_older_is_caught_as_a_record_going_backwards() {
    let (seed, outcome, v) = caught(
        PlantedBugs {
            members_adopt_older: true,
            ..Default::default()
        },
        20,
    );
    assert!(
        matches!(v, MembershipViolation::VersionBackwards { .. }),
        "seed {seed}: {v}"
    );
    assert_eq!(outcome, Outcome::Correctness);
}

// Checker 1b (one record per version): a coordinator that changes the record without a
// new version.
#[test]
fn planted_same_version_is_caught_as_two_records_of_one_version() {
    let (seed, outcome, v) = caught(
        PlantedBugs {
            members_same_version: true,
            ..Default::default()
        },
        20,
    );
    assert!(
        matches!(v, MembershipViolation::SameVersionDiffers { .. }),
        "seed {seed}: {v}"
    );
    assert_eq!(outcome, Outcome::Correctness);
}

// Checker 2 (retired is retired): a coordinator that retires a device before its chunks
// have moved — the store's manager still uses a chunk on it (or it serves one).
#[test]
fn planted_retire_undrained_is_caught_as_a_retired_device_holding_a_chunk() {
    let (seed, outcome, v) = caught(
        PlantedBugs {
            members_retire_undrained: true,
            ..Default::default()
        },
        20,
    );
    assert!(
        matches!(v, MembershipViolation::RetiredActed { .. }),
        "seed {seed}: {v}"
    );
    assert_eq!(outcome, Outcome::Correctness);
}

// Checker 3 (changes complete): a coordinator that never retires a drained device leaves
// the remove pending after faults stop.
#[test]
fn planted_never_retire_is_caught_as_membership_not_settled() {
    let (seed, outcome, v) = caught(
        PlantedBugs {
            members_never_retire: true,
            ..Default::default()
        },
        20,
    );
    assert!(
        matches!(v, MembershipViolation::NotConverged { .. }),
        "seed {seed}: {v}"
    );
    assert_eq!(outcome, Outcome::Liveness);
}

// DESIGN §6 (a drained device retires): sim seed 3598 once retired the coordinator itself
// 46 ms after it was asked to remove it, holding two chunks it had just had created on
// itself; the stores' reports from before those relayouts were still fresh. Drained is
// now judged on reports newer than the retirement, with no move onto the device under
// way.
#[test]
fn seed_3598_a_device_retires_only_on_reports_newer_than_its_retirement() {
    let r = run(SimConfig::new(3598));
    assert_eq!(r.outcome, Outcome::Passed, "{:?}", r.violations);
}

// DESIGN §6, sim seeds 1455 and 3275: a device admitted by a record that then lost to
// another of the same number was left out of the cluster's record, not retired; it kept
// managing a store whose reports no coordinator received, so no removal could be judged
// drained. Such a device now asks to be admitted again, and a device holding an older
// record than a sender's gets the newer one back.
#[test]
fn seeds_1455_3275_a_device_left_out_of_the_record_is_admitted_again() {
    for seed in [1455, 3275] {
        let r = run(SimConfig::new(seed));
        assert_eq!(
            r.outcome,
            Outcome::Passed,
            "seed {seed}: {:?}",
            r.violations
        );
    }
}
