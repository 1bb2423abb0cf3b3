//! The lookup world (seed 003, DESIGN §7 and §9.7): a bounded sweep of both failure
//! classes breaks no invariant and measures within the seed's bounds; one seed replays
//! exactly; and each checker catches the planted bug meant for it. Runs have 40 s of
//! faults, to keep the file well under a minute in `--release` on two cores.

use crate::common;
use tenure_core::PlantedBugs;
use tenure_core::rng::mix64;
use tenure_sim::lookup::checks::LookupViolation;
use tenure_sim::lookup::knobs::ProfileChoice;
use tenure_sim::{Outcome, SimConfig, Violation, WorldKind, run, sweep};

fn lookup(seed: u64, profile: ProfileChoice) -> SimConfig {
    let mut c = SimConfig::new(seed);
    c.world = WorldKind::Lookup;
    c.lookup_profile = profile;
    c.safety_us = 40_000_000;
    c
}

/// Seeds swept by `lookup_bounded_sweep_finds_no_violation` (override with
/// `LOOKUP_SEEDS`).
fn seeds() -> u64 {
    common::seeds_from_env("LOOKUP_SEEDS", 300)
}

// DESIGN §9.7: at most one leader once stable; the seed's outage and staleness bounds
// hold under common failures; acknowledged persistent entries survive failovers and
// full restarts; subscribers converge; the service stabilises after rare failures. The
// figures show every fault class and every checker was exercised.
#[test]
fn lookup_bounded_sweep_finds_no_violation() {
    let s = sweep(
        0,
        seeds(),
        2,
        &lookup(0, ProfileChoice::Drawn),
        0,
        |_, _| {},
    );
    for f in &s.failures {
        eprintln!("seed {} {:?}: {}", f.seed, f.outcome, f.message);
    }
    let l = &s.lookup;
    let t = &l.totals;
    assert!(l.common_runs > 0 && l.rare_runs > 0, "{l:?}");
    assert!(t.leader_crashes > 0 && t.power_outages > 0 && t.full_restarts > 0);
    assert!(t.partitions > 0 && t.pauses > 0 && t.corruptions > 0 && t.lost > 0);
    assert!(t.deaths > 0 && t.acks > 0 && t.no_leader > 0 && t.syncs > 0 && t.moves > 0);
    assert!(t.leader_checks > 0 && t.acked_checks > 0 && t.view_checks > 0);
    for (name, e) in [
        ("outage", &l.outage),
        ("volatile staleness", &l.volatile),
        ("persistent staleness", &l.persistent),
        ("divergence", &l.divergence),
        ("stabilisation", &l.stabilisation),
    ] {
        eprintln!(
            "{name}: max {} us (bound {} us), worst ratio {:.2} (seed {}), {} runs",
            e.max_us, e.bound_us, e.ratio, e.ratio_seed, e.runs
        );
        assert!(e.runs > 0, "{name} never measured");
        assert!(e.ratio <= 1.0, "{name} past its bound: {e:?}");
    }
    assert_eq!(
        s.failures.len(),
        0,
        "failing seeds: {:?}",
        s.failures.iter().map(|f| f.seed).collect::<Vec<_>>()
    );
}

// DESIGN §10: `tenure sim --world lookup --seed N` replays a run exactly.
#[test]
fn lookup_same_seed_same_trace() {
    let once = |seed| {
        let mut c = lookup(seed, ProfileChoice::Drawn);
        c.trace = true;
        let r = run(c);
        let mut h = 0u64;
        for b in r.trace.as_bytes().chunks(8) {
            let mut w = [0u8; 8];
            w[..b.len()].copy_from_slice(b);
            h = mix64(h ^ u64::from_le_bytes(w));
        }
        (r.fingerprint, h, r.events, r.trace.len())
    };
    for seed in [3, 4] {
        let a = once(seed);
        assert_eq!(a, once(seed), "seed {seed} did not replay");
        assert!(a.2 > 1000, "a run should do something");
    }
    assert_ne!(once(3).0, once(4).0, "different seeds, different runs");
}

/// Sweep seeds of `profile` with `planted` until a violation `wanted` accepts.
fn caught(
    planted: PlantedBugs,
    profile: ProfileChoice,
    limit: u64,
    wanted: impl Fn(&LookupViolation) -> bool,
) -> (u64, Outcome, LookupViolation) {
    let mut c = lookup(0, profile);
    c.planted = planted;
    let s = sweep(0, limit, 2, &c, 0, |_, _| {});
    let found = s.failures.into_iter().find_map(|f| match f.violation {
        Violation::Lookup(v) if wanted(&v) => Some((f.seed, f.outcome, v)),
        _ => None,
    });
    let (seed, outcome, v) = found.expect("planted bug not caught");
    eprintln!("caught at seed {seed} ({outcome:?}): {v}");
    (seed, outcome, v)
}

// Checker (1), the t + 1 part, planted bug: the service keeps no t + 1 bound — the
// leader admits every node that asks to join and no surplus node steps down — so more
// than t + 1 nodes stay active past the quiet period (seed 003: "the protocol attempts to
// maintain at most t+1 hot nodes").
#[test]
fn planted_admit_all_is_caught_by_the_leader_checkers_t_plus_one_part() {
    let planted = PlantedBugs {
        lookup_admit_all: true,
        ..PlantedBugs::default()
    };
    let (_, outcome, v) = caught(
        planted,
        ProfileChoice::Common,
        50,
        |v| matches!(v, LookupViolation::Leaders { why, .. } if why.contains("t + 1 =")),
    );
    assert_eq!(outcome, Outcome::Correctness);
    assert!(v.to_string().contains("active nodes"), "{v}");
}

// Integrity (besides the numbered checkers), planted bug: the leader answers a Get of a
// live entry with its value and a byte more, a value no provider ever published. The
// answer is fabricated, not merely stale.
#[test]
fn planted_fabricated_answer_is_caught_by_the_integrity_checker() {
    let planted = PlantedBugs {
        lookup_fabricated_answer: true,
        ..PlantedBugs::default()
    };
    let (_, outcome, v) = caught(planted, ProfileChoice::Common, 20, |v| {
        matches!(v, LookupViolation::Fabricated { .. })
    });
    assert_eq!(outcome, Outcome::Correctness);
    assert!(v.to_string().contains("never its provider's value"), "{v}");
}

// Checkers (1) and (2), planted bug: nodes react to "node down" only at their next
// LONG_TIMEOUT maintainer run, so after the leader crashes nobody leads for up to a
// LONG_TIMEOUT. The outage checker must see a query unanswered past 3 HB (+ slack and
// the query's round trip), and the leader checker no leader after the quiet period.
#[test]
fn planted_lazy_failover_is_caught_by_the_outage_and_leader_checkers() {
    let planted = PlantedBugs {
        lookup_lazy_failover: true,
        ..PlantedBugs::default()
    };
    let common = ProfileChoice::Common;
    caught(planted.clone(), common, 50, |v| {
        matches!(v, LookupViolation::Outage { .. })
    });
    let (_, outcome, _) = caught(planted, common, 50, |v| {
        matches!(v, LookupViolation::Leaders { .. })
    });
    assert_eq!(outcome, Outcome::Correctness);
}

// Checker (3), planted bug: volatile entries live four intervals instead of two, so a
// provider that dies right after a refresh is answered past 2 × MVRI + δ.
#[test]
fn planted_long_volatile_lifetime_is_caught_by_the_volatile_staleness_checker() {
    let planted = PlantedBugs {
        lookup_long_volatile_lifetime: true,
        ..PlantedBugs::default()
    };
    caught(planted, ProfileChoice::Common, 100, |v| {
        matches!(
            v,
            LookupViolation::Stale {
                durability: tenure_core::lookup::Durability::Volatile,
                ..
            }
        )
    });
}

// Checker (4), planted bug: persistent entries live two intervals and a round trip (the
// volatile rule, which the core used to apply to both), so a dead provider's persistent
// entry is answered past MPRI + 3 HB + Θ + RTT + δ.
#[test]
fn planted_long_persistent_lifetime_is_caught_by_the_persistent_staleness_checker() {
    let planted = PlantedBugs {
        lookup_long_persistent_lifetime: true,
        ..PlantedBugs::default()
    };
    caught(planted, ProfileChoice::Common, 300, |v| {
        matches!(
            v,
            LookupViolation::Stale {
                durability: tenure_core::lookup::Durability::Persistent,
                ..
            }
        )
    });
}

// Checker (5), planted bug: a booting node ignores the persistent entries on its disk, so
// after a full restart of every device the leader answers without acknowledged entries.
#[test]
fn planted_forget_on_restart_is_caught_by_the_acknowledged_entry_checker() {
    let planted = PlantedBugs {
        lookup_forget_on_restart: true,
        ..PlantedBugs::default()
    };
    caught(planted, ProfileChoice::Common, 100, |v| {
        matches!(v, LookupViolation::LostPersistent { .. })
    });
}

// Checker (6), planted bugs: a leader that drops expired entries without telling its
// subscribers leaves them a view with the entry (every removal must be announced); one
// that restarts a subscription's sequence with each Sync sends numbers out of order.
#[test]
fn planted_subscription_bugs_are_caught_by_the_subscriber_checkers() {
    let silent = PlantedBugs {
        lookup_silent_expiry: true,
        ..PlantedBugs::default()
    };
    let (_, _, v) = caught(silent, ProfileChoice::Common, 50, |v| {
        matches!(v, LookupViolation::Diverged { .. })
    });
    assert!(v.to_string().contains("removal not announced"), "{v}");
    let restarts = PlantedBugs {
        lookup_sync_restarts_seq: true,
        ..PlantedBugs::default()
    };
    caught(restarts, ProfileChoice::Common, 50, |v| {
        matches!(v, LookupViolation::EventOrder { .. })
    });
}

// Checker (7), planted bugs: without the maintainer's LONG_TIMEOUT runs, a corrupted
// state that changes nothing in the soft-state stores (a second leader) is never
// repaired; a leader that keeps its leadership when an older active node appears leaves
// two leaders after the boot's concurrent self-activations. Both are liveness failures
// of self-stabilisation.
#[test]
fn planted_stabilisation_bugs_are_caught_by_the_stabilisation_checker() {
    for planted in [
        PlantedBugs {
            lookup_no_long_timeout: true,
            ..PlantedBugs::default()
        },
        PlantedBugs {
            lookup_keep_leadership: true,
            ..PlantedBugs::default()
        },
    ] {
        let (_, outcome, _) = caught(planted, ProfileChoice::Rare, 150, |v| {
            matches!(v, LookupViolation::NotStabilised { .. })
        });
        assert_eq!(outcome, Outcome::Liveness);
    }
}
