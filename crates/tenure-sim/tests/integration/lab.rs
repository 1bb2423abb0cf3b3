//! The lab at small scale: every experiment runs and every verdict holds.

use tenure_sim::lab::{Experiment, Scale, run};

fn check(e: Experiment) {
    let rows = run(e, &Scale::small(3));
    assert!(!rows.is_empty());
    for r in &rows {
        println!(
            "{:<70} {:<24} {:>8} {:>8} {:<12} {}",
            r.what,
            r.paper,
            r.median,
            r.max,
            r.verdict.name(),
            r.note
        );
    }
    for r in &rows {
        assert!(r.verdict.holds(), "{}: {:?}", r.what, r);
    }
}

// Lecture (seed 002) §14.4, Fig. 14.7.
#[test]
fn mutex_verdicts_hold() {
    check(Experiment::Mutex);
}

// Lecture (seed 002) §14.3.3: bully n − 2 and O(n²), ring 2(n − 1).
#[test]
fn election_verdicts_hold() {
    check(Experiment::Election);
}

// Seed 004 §3: SafeTalk 3 messages per remote participant, two-phase commit 4.
#[test]
fn safetalk_verdicts_hold() {
    check(Experiment::SafeTalk);
}

// Seed 004 §8: C_updt = (3k − 1)M with the LC among the k sites, (3k + 2)M with the LC
// at none of them, and D_updt = 2τ + 3τ_max + W less the CONFIRM Tenure piggybacks.
#[test]
fn update_verdicts_hold() {
    check(Experiment::Update);
}

// Seed 004 §4.1, §8: (5n − 4)M ≤ C_rec < (6n − 6)M, R within its bounds, maximum forward
// progress and one LC in every run; Tenure's manager crash measured beside it.
#[test]
fn recovery_verdicts_hold() {
    check(Experiment::Recovery);
}

// Seed 003 (DESIGN §7): leader failover and outage within 3 SS_Heartbeat_Interval (or
// past it only by the measured heartbeat and query flights), volatile staleness within
// 2 × MVRI + δ, persistent within MPRI + 3 HB + Θ + RTT + δ, no lookup invariant broken.
#[test]
fn lookup_verdicts_hold() {
    check(Experiment::Lookup);
}
