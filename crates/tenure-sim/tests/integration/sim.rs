//! Simulator sweeps (DESIGN §9–10): a bounded sweep of the real core under faults — disk
//! faults and nested lock names included — finds no violation; one seed replays exactly;
//! and each planted bug is caught — which shows the nemesis creates partitions, pauses,
//! lease expiries and lost writes often enough for the checkers to bite. Runs are
//! shortened (10 s of faults, at most 30 s to converge) to keep the sweep well under a
//! minute in `--release` on two cores.

use crate::common;
use tenure_core::PlantedBugs;
use tenure_core::rng::mix64;
use tenure_sim::lincheck::{self, LockModel, Verdict};
use tenure_sim::{DiskModel, LockPaths, Outcome, Pipelining, SimConfig, Violation, run, sweep};

fn short(seed: u64) -> SimConfig {
    let mut c = SimConfig::new(seed);
    c.safety_us = 10_000_000;
    // Membership changes have their own tests (tests/integration/membership.rs).
    c.membership = false;
    c
}

/// A short run in which every lock client pipelines.
fn pipelined(seed: u64) -> SimConfig {
    let mut c = short(seed);
    c.pipelining = Pipelining::Forced;
    c
}

/// Seeds swept by `bounded_sweep_finds_no_violation` (override with `SIM_SEEDS`).
fn seeds() -> u64 {
    common::seeds_from_env("SIM_SEEDS", 450)
}

// DESIGN §9 (invariants 1, 2, 4) and the liveness rule: no seed of a bounded sweep breaks
// an invariant or fails to converge.
#[test]
fn bounded_sweep_finds_no_violation() {
    let s = sweep(0, seeds(), 2, &short(0), 0, |_, _| {});
    for f in &s.failures {
        eprintln!("seed {} {:?}: {}", f.seed, f.outcome, f.message);
    }
    assert!(
        s.regenerations > 0 && s.writes_acked > 0,
        "the sweep exercised nothing: {s:?}"
    );
    assert!(s.checks.served_checks > 0 && s.checks.write_checks > 0 && s.checks.manager_checks > 0);
    // DESIGN "State at scale": transitions crossed devices by summary and patch, and the
    // tables of one stamp were compared.
    let t = &s.transitions;
    assert!(
        t.votes_summary > 0 && t.commits_patch > 0 && s.checks.stamp_checks > 0,
        "{t:?}"
    );
    // ... and chunks rejoining in a relayout were patched from a table they held.
    assert!(t.reconciles_patch > 0 && t.reconcile_rows > 0, "{t:?}");
    assert!(s.faults.crashes > 0 && s.faults.pauses > 0 && s.faults.partitions_halves > 0);
    // DESIGN §10 under disk faults: crashes lost unsynced writes, tore records and kept
    // unacknowledged ones whole; commits stalled; ACCEPTEDs were checked as they left.
    let f = &s.faults;
    assert!(
        f.unsynced_lost > 0 && f.torn_records > 0 && f.unsynced_survived > 0,
        "{f:?}"
    );
    assert!(f.disk_stalls > 0 && s.checks.durable_checks > 0, "{f:?}");
    // DESIGN "State at scale": records whose tables were persisted went as heads.
    assert!(f.records_whole > 0 && f.record_heads > 0, "{f:?}");
    // DESIGN §9 (invariants 3–5): the lock checkers compared real grants.
    assert!(s.locks.grants > 0 && s.locks.releases > 0 && s.locks.session_ends > 0);
    assert!(s.locks.client_pauses > 0 && s.locks.deadlines_passed > 0);
    let lc = &s.lock_checks;
    assert!(lc.exclusion_checks > 0 && lc.fencing_checks > 0 && lc.takeover_checks > 0);
    assert!(lc.linearizable_ops > 0);
    assert_eq!(
        s.failures.len(),
        0,
        "failing seeds: {:?}",
        s.failures.iter().map(|f| f.seed).collect::<Vec<_>>()
    );
}

// Seeds that once failed, each with the default settings `tenure sim --seed N` uses and
// with pipelining off, sibling lock names and synchronous disks (the run they failed,
// before clients could pipeline or lock paths and before disks could fail), and what
// they found: 5094 and 35561 stale reads, 8842 and 10853 regeneration races, 32991 a
// checker bug, 46832 a vote committing an older layout behind a newer one, 80994 the
// members of a committed relayout collected as orphans (no manager ever again).
#[test]
fn seeds_that_once_failed_pass() {
    for seed in [5094, 8842, 10853, 32991, 35561, 46832, 80994, 180613] {
        for (pipelining, paths, disk) in [
            (Pipelining::Drawn, LockPaths::Drawn, DiskModel::Drawn),
            (Pipelining::Off, LockPaths::Flat, DiskModel::Synchronous),
        ] {
            let mut c = SimConfig::new(seed);
            c.pipelining = pipelining;
            c.lock_paths = paths;
            c.disk = disk;
            c.membership = false;
            let r = run(c);
            assert!(
                r.outcome == Outcome::Passed,
                "seed {seed} {pipelining:?} {paths:?} {disk:?}: {:?} {:?}",
                r.outcome,
                r.violations
            );
        }
    }
}

// A seed of the default sweep (`tenure sim --seeds N`, membership changes on) that once
// failed: 1147, an object read after three epoch transitions answered "no such object"
// for a key whose revision 2 had been acknowledged — seen with forwards that ended
// `Unavailable` as soon as their store's route changed (3b75f67, reverted until the
// cause is known); it passes without that change.
#[test]
fn default_sweep_seed_1147_passes() {
    let r = run(SimConfig::new(1147));
    assert!(
        r.outcome == Outcome::Passed,
        "seed 1147: {:?} {:?}",
        r.outcome,
        r.violations
    );
}

// DESIGN §10: `tenure sim --seed N` replays a run exactly — same trace, same fingerprint —
// whether or not its clients pipeline.
#[test]
fn same_seed_same_trace() {
    let once = |seed| {
        let mut c = if seed % 2 == 0 {
            pipelined(seed)
        } else {
            short(seed)
        };
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
    for seed in [1, 77, 4] {
        let a = once(seed);
        assert_eq!(a, once(seed), "seed {seed} did not replay");
        assert!(a.2 > 1000, "a run should do something");
    }
    assert_ne!(once(1).0, once(2).0, "different seeds, different runs");
}

/// A planted bug that expires a holder early shows as a session expired before its
/// client's deadline (the first sign, usually), two holders at once, or a lock history no
/// order explains.
fn assert_exclusion_broken(v: &Violation) {
    assert!(
        matches!(
            v,
            Violation::ExpiredBeforeClientDeadline { .. }
                | Violation::MutualExclusion { .. }
                | Violation::NotLinearizable { .. }
        ),
        "{v}"
    );
}

/// Sweep seeds with a planted bug until a correctness violation; return it.
fn first_violation(planted: PlantedBugs, limit: u64) -> Option<(u64, Violation)> {
    let mut c = short(0);
    c.planted = planted;
    first_violation_with(c, limit)
}

fn first_violation_with(c: SimConfig, limit: u64) -> Option<(u64, Violation)> {
    let s = sweep(0, limit, 2, &c, 1, |_, _| {});
    s.failures
        .into_iter()
        .find(|f| f.outcome == Outcome::Correctness)
        .map(|f| (f.seed, f.violation))
}

// DESIGN §9.1 planted bug: with a quorum predicate that accepts any non-empty set, two
// sides of a partition each regenerate a manager; the checkers must see it: the two
// managers themselves, or what one of them loses of what the other acknowledged (a write,
// or a lock client's grant or release: invariant 4), whichever a run reports first.
#[test]
fn planted_broken_quorum_is_caught() {
    let found = first_violation(
        PlantedBugs {
            broken_quorum: true,
            ..PlantedBugs::default()
        },
        200,
    );
    let (seed, v) = found.expect("broken quorum not caught within 200 seeds");
    eprintln!("broken quorum caught at seed {seed}: {v}");
    // (A lost write may also show in a snapshot restored by the snapshot checker: a
    // manager that took over without a key acknowledged before, sim seed 0 of this sweep.)
    assert!(matches!(
        v,
        Violation::TwoManagers { .. }
            | Violation::Snapshot(tenure_sim::snapshot::SnapshotViolation::Restore { .. })
            | Violation::EpochNotIncreasing { .. }
            | Violation::LostWrite { .. }
            | Violation::LostGrant { .. }
            | Violation::LostRelease { .. }
    ));
}

// DESIGN "State at scale" planted bug: a transition's patch that loses a row leaves the
// chunk that took it with another table than the chunks that took the same commit whole:
// the same-stamp checker sees it (directly, or in a cluster a snapshot restored).
#[test]
fn planted_patch_drops_a_row_is_caught() {
    let found = first_violation(
        PlantedBugs {
            patch_drops_a_row: true,
            ..PlantedBugs::default()
        },
        100,
    );
    let (seed, v) = found.expect("a patch dropping a row not caught within 100 seeds");
    eprintln!("patch dropping a row caught at seed {seed}: {v}");
    assert!(v.to_string().contains("into another table than"), "{v}");
}

// DESIGN "State at scale" planted bug: a relayout's patch for a rejoining chunk that loses a
// row leaves that chunk with another table than its stamp names: the same-stamp checker
// sees it when the relayout commits. (A run may first report what the lost row costs, an
// acknowledged write missing from that chunk: the first run the same-stamp checker
// reports is looked for.)
#[test]
fn planted_rejoin_patch_drops_a_row_is_caught() {
    let mut c = short(0);
    c.planted.rejoin_patch_drops_a_row = true;
    let s = sweep(0, 100, 2, &c, 100, |_, _| {});
    assert!(
        !s.failures.is_empty(),
        "a rejoin patch dropping a row not caught within 100 seeds"
    );
    let found = (s.failures.iter())
        .filter(|f| f.outcome == Outcome::Correctness)
        .find(|f| f.violation.to_string().contains("into another table than"));
    let f = found.expect("the same-stamp checker saw no rejoin patch dropping a row in 100 seeds");
    eprintln!(
        "rejoin patch dropping a row caught at seed {}: {}",
        f.seed, f.violation
    );
}

// DESIGN §9.2 planted bug: chunks that serve whatever their lease state are caught as soon
// as a stale manager's ACCEPT reaches a chunk whose lease expired or that moved epochs.
#[test]
fn planted_serve_without_lease_is_caught() {
    let found = first_violation(
        PlantedBugs {
            serve_without_lease: true,
            ..PlantedBugs::default()
        },
        200,
    );
    let (seed, v) = found.expect("serving without a lease not caught within 200 seeds");
    eprintln!("serve-without-lease caught at seed {seed}: {v}");
    assert!(matches!(
        v,
        Violation::ServedWithoutLease { .. } | Violation::LostWrite { .. }
    ));
}

// The liveness phase is a real check: with no time to converge a run fails as a
// liveness failure, not a correctness one.
#[test]
fn liveness_failure_is_reported_as_such() {
    let mut c = short(3);
    c.liveness_us = 1_000_000;
    c.safety_us = 3_000_000;
    // Enough faults that one second after healing some store is still regenerating:
    // try a few seeds and require the kind to be liveness whenever a run fails.
    let mut saw = false;
    for seed in 0..20 {
        c.seed = seed;
        let r = run(c.clone());
        assert_ne!(
            r.outcome,
            Outcome::Correctness,
            "seed {seed}: {:?}",
            r.violations
        );
        saw |= r.outcome == Outcome::Liveness;
    }
    assert!(saw, "no run failed to converge within 1 s");
}

// DESIGN §9.3 planted bug: a lock table that grants without checking conflicts gives one
// exclusive lock to two sessions; the real-time mutual exclusion checker must see it.
#[test]
fn planted_skip_conflict_check_is_caught_by_mutual_exclusion() {
    let found = first_violation(
        PlantedBugs {
            skip_conflict_check: true,
            ..PlantedBugs::default()
        },
        50,
    );
    let (seed, v) = found.expect("conflicting grants not caught within 50 seeds");
    eprintln!("skip-conflict-check caught at seed {seed}: {v}");
    assert!(matches!(v, Violation::MutualExclusion { .. }), "{v}");
}

// DESIGN §9.5 planted bug: the same run's lock history, handed to the linearizability
// checker alone, is not linearizable — so that checker catches the bug too.
#[test]
fn planted_skip_conflict_check_is_caught_by_linearizability() {
    let mut caught = None;
    for seed in 0..50 {
        let mut c = short(seed);
        c.planted.skip_conflict_check = true;
        c.keep_history = true;
        let r = run(c);
        if r.outcome != Outcome::Correctness {
            continue;
        }
        let v = lincheck::check(&LockModel::default(), &r.lock_history, &Default::default())
            .expect("well-formed history");
        if let Verdict::NotLinearizable(ce) = v {
            caught = Some((seed, ce));
            break;
        }
    }
    let (seed, ce) = caught.expect("no non-linearizable history within 50 seeds");
    eprintln!("seed {seed}: {}", ce.description);
    assert!(!ce.core.is_empty() || !ce.stuck.is_empty());
}

// DESIGN §4 (reads) planted bug: a manager that answers reads at once from its
// speculative tables (changes decided but not yet acknowledged) shows a lock holder or an
// object that a failover then loses, or one before it is granted. The lock history's
// linearizability checker, or the objects checker, must see it.
#[test]
fn planted_lease_read_speculative_is_caught_by_linearizability() {
    let found = first_violation(
        PlantedBugs {
            lease_read_speculative: true,
            ..PlantedBugs::default()
        },
        60,
    );
    let (seed, v) = found.expect("speculative reads not caught within 60 seeds");
    eprintln!("speculative reads caught at seed {seed}: {v}");
    assert!(
        matches!(v, Violation::NotLinearizable { .. } | Violation::Objects(_)),
        "{v}"
    );
}

// DESIGN §4 (reads) planted bug: a manager that takes the renewal it sends as proof of
// its chunk's lease keeps a read lease with no chunk's word for it, through a lost
// renewal or a partition, while another manager takes the store over: its reads show a
// holder the new manager released. The linearizability checker must see it.
// The window is narrow (a renewal lost or late just as the store changes hands, with a
// read landing in it): `tenure sim`'s default world shows it at seed 1, the unit test
// `planted_read_lease_from_sent_renewal_is_caught` at once.
#[test]
fn planted_read_lease_from_sent_renewal_is_caught_by_linearizability() {
    let mut c = SimConfig::new(0);
    c.planted.read_lease_from_sent_renewal = true;
    let found = first_violation_with(c, 4);
    let (seed, v) = found.expect("a read lease from sent renewals not caught within 4 seeds");
    eprintln!("a read lease from sent renewals caught at seed {seed}: {v}");
    assert!(
        matches!(v, Violation::NotLinearizable { .. } | Violation::Objects(_)),
        "{v}"
    );
}

// DESIGN §4 and §9.3 planted bug: a lock table that looks for conflicts on the requested
// name only (no cover rule, no intention modes) grants a path to one session and its
// ancestor or descendant to another. The mutual exclusion checker, judging the hierarchy,
// must see it; the same run's history alone is not linearizable (the model checks names
// that cover one another together); and with sibling names only the bug is invisible.
#[test]
fn planted_ignore_cover_is_caught_along_the_path() {
    let mut c = short(0);
    c.planted.ignore_cover = true;
    c.lock_paths = LockPaths::Nested;
    // The first seed at which the mutual exclusion checker sees two holders along a path
    // (a run may first report the bug otherwise: a grant its table lost, say).
    let s = sweep(0, 50, 2, &c, 50, |_, _| {});
    let (seed, v) = (s.failures.iter())
        .filter(|f| f.outcome == Outcome::Correctness)
        .filter(|f| {
            matches!(&f.violation,
                Violation::MutualExclusion { name, first_name, .. } if name != first_name)
        })
        .map(|f| (f.seed, f.violation.clone()))
        .min_by_key(|(seed, _)| *seed)
        .expect("no two holders along a path within 50 seeds");
    eprintln!("ignore-cover caught at seed {seed}: {v}");
    c.seed = seed;
    c.keep_history = true;
    let r = run(c.clone());
    let verdict = lincheck::check(&LockModel::default(), &r.lock_history, &Default::default())
        .expect("well-formed history");
    match verdict {
        Verdict::NotLinearizable(ce) => {
            eprintln!("seed {seed}: {}", ce.description);
            assert!(ce.partition.is_some_and(|p| p.contains(" + ")));
        }
        v => panic!("seed {seed}: {v:?}"),
    }
    c.lock_paths = LockPaths::Flat;
    c.keep_history = false;
    let r = run(c);
    assert_ne!(r.outcome, Outcome::Correctness, "{:?}", r.violations);
}

// DESIGN §10 planted bug: a chunk that outputs its ACCEPTED before the persist of what it
// accepts lets the answer leave before the change is durable; the check made as each
// ACCEPTED leaves must catch it (with a slow disk a crash then loses what the manager
// counted as accepted).
#[test]
fn planted_accepted_before_persist_is_caught() {
    let found = first_violation(
        PlantedBugs {
            accepted_before_persist: true,
            ..PlantedBugs::default()
        },
        20,
    );
    let (seed, v) = found.expect("not caught within 20 seeds");
    eprintln!("accepted-before-persist caught at seed {seed}: {v}");
    assert!(matches!(v, Violation::AckedBeforeDurable { .. }), "{v}");
}

// DESIGN §4 and §9.4 planted bug: a manager that answers after the first ACCEPTED loses
// acknowledged lock operations when it fails; with only lock clients running, the lock
// checkers (not the register checker) must catch it.
#[test]
fn planted_confirm_before_all_accepted_is_caught_by_lock_checkers() {
    let mut c = short(0);
    c.planted.confirm_before_all_accepted = true;
    c.writes = false;
    c.objects = false;
    let (seed, v) = first_violation_with(c, 100).expect("not caught within 100 seeds");
    eprintln!("confirm-before-all-accepted caught at seed {seed}: {v}");
    assert!(
        matches!(
            v,
            Violation::LostRelease { .. }
                | Violation::LostGrant { .. }
                | Violation::MutualExclusion { .. }
                | Violation::NotLinearizable { .. }
        ),
        "{v}"
    );
}

// Liveness planted bug: a device that does not manage a store redirects clients to
// itself, so a lock client that lands there after a failover never reaches the manager;
// the check that every lock client is answered once the faults stop must report it.
#[test]
fn planted_redirect_to_self_is_caught_as_a_stuck_client() {
    let mut c = short(0);
    c.planted.redirect_to_self = true;
    let s = sweep(0, 50, 2, &c, 1, |_, _| {});
    let stuck = s
        .failures
        .iter()
        .find(|f| matches!(f.violation, Violation::ClientStuck { .. }))
        .expect("no stuck lock client reported within 50 seeds");
    eprintln!(
        "redirect-to-self caught at seed {}: {}",
        stuck.seed, stuck.violation
    );
    assert_eq!(stuck.outcome, Outcome::Liveness);
    assert!(
        s.failures.iter().all(|f| f.outcome == Outcome::Liveness),
        "a misdirection is a liveness failure, never a correctness one"
    );
}

// DESIGN §8 planted bug ("Any device serves any request"): a device that acknowledges a
// forwarded register write without serving it; the sweep runs forwarding (three seeds in
// four), and a checker of acknowledged writes must see the write missing: the run's own
// register checker, or the restore check of a snapshot cut after the acknowledgement.
#[test]
fn planted_forward_ack_unserved_is_caught_as_a_lost_write() {
    let found = first_violation(
        PlantedBugs {
            forward_ack_unserved: true,
            ..PlantedBugs::default()
        },
        20,
    );
    let (seed, v) = found.expect("not caught within 20 seeds");
    eprintln!("forward-ack-unserved caught at seed {seed}: {v}");
    assert!(
        matches!(v, Violation::LostWrite { .. } | Violation::Snapshot(_)),
        "{v}"
    );
}

// DESIGN §4 planted bug: a new manager that gives sessions no grace expires a holder whose
// keep-alives went to the old manager while its client still holds the lock; mutual
// exclusion on the client's conservative deadline must catch the successor's grant.
#[test]
fn planted_expire_without_grace_is_caught() {
    let found = first_violation(
        PlantedBugs {
            expire_without_grace: true,
            ..PlantedBugs::default()
        },
        100,
    );
    let (seed, v) = found.expect("expiry without grace not caught within 100 seeds");
    eprintln!("expire-without-grace caught at seed {seed}: {v}");
    assert_exclusion_broken(&v);
}

// DESIGN §4, sessions across failovers (crate::session): a new manager counts a session's
// TTL + grace from the first epoch after its last renewal. One that ignores the renewal
// notes counts from the first epoch it ever saw and expires holders whose keep-alives the
// last manager answered; mutual exclusion on the clients' deadlines must catch it.
#[test]
fn planted_takeover_ignores_renewal_is_caught() {
    // The bug shows only in a rare conjunction: a takeover by a device that saw the
    // store's first epochs more than TTL + grace before, which expires every session at
    // once, while a holder has not yet heard of it and another client reopens and is
    // granted the name (about one 40 s run in fifty with membership changes, one 20 s
    // run in two hundred without: sim seeds 13 and 32 of 0..114). Since a manager spares a
    // slow chunk its quorum needs, fewer stores step down under faults and takeovers are
    // rarer: sim seed 94 is the first of this sweep (it passes without the bug).
    let mut c = SimConfig::new(0);
    c.safety_us = 40_000_000;
    c.planted.takeover_ignores_renewal = true;
    let (seed, v) = first_violation_with(c, 100).expect("not caught within 100 seeds");
    eprintln!("takeover-ignores-renewal caught at seed {seed}: {v}");
    // The sessions expired at once may show first in the object store (sim seed 53 of this
    // sweep: an object read older than a put acknowledged before it; the same seed
    // without the bug passes), else as two holders or a lock history no order explains.
    if !matches!(
        v,
        Violation::Objects(tenure_sim::objects::ObjectViolation::ReadStale { .. })
    ) {
        assert_exclusion_broken(&v);
    }
}

// Seed 004 §8: on the calm path (no faults, lock clients only) every change costs SafeTalk
// at most three messages per remote chunk (ACCEPT, ACCEPTED, CONFIRM; two-phase commit
// needs four), and the batches carry every change.
#[test]
fn calm_path_costs_at_most_three_messages_per_remote_chunk() {
    let mut c = short(5);
    c.faults = false;
    c.writes = false;
    let r = run(c);
    assert_eq!(r.outcome, Outcome::Passed, "{:?}", r.violations);
    let st = &r.safetalk;
    assert!(r.locks.grants > 10 && st.batches > 10);
    assert!(st.accepted_remote <= st.accept_remote);
    assert!(st.confirm_remote <= st.accept_remote);
    assert!(st.per_batch_per_chunk() <= 3.0, "{st:?}");
    assert_eq!(r.faults.crashes + r.faults.lost + r.locks.client_crashes, 0);
}

// DESIGN §8 and §9: with every lock client pipelining on its session stream (several
// requests in flight, answered in any order, all re-sent with their request ids wherever
// the stream resumes), a bounded sweep breaks no invariant and every client is answered
// after the faults stop. The figures show the pipelining happened. (Longer: 1,000 seeds
// of 20 s each, `tenure sim --seeds 1000` and `--pipelining forced`, found none either.)
#[test]
fn pipelined_sweep_finds_no_violation() {
    let seeds = std::env::var("SIM_PIPELINED_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let s = sweep(0, seeds, 2, &pipelined(0), 0, |_, _| {});
    for f in &s.failures {
        eprintln!("seed {} {:?}: {}", f.seed, f.outcome, f.message);
    }
    let l = &s.locks;
    assert!(
        l.pipelined > 0 && l.out_of_order > 0,
        "no pipelining: {l:?}"
    );
    assert!(
        l.stream_resumes > 0 && l.resent > 0,
        "no stream resumed: {l:?}"
    );
    assert!(l.grants > 0 && l.releases > 0 && l.deadlines_passed > 0);
    let lc = &s.lock_checks;
    assert!(lc.exclusion_checks > 0 && lc.fencing_checks > 0 && lc.takeover_checks > 0);
    assert!(lc.linearizable_ops > 0);
    assert_eq!(
        s.failures.len(),
        0,
        "failing seeds: {:?}",
        s.failures.iter().map(|f| f.seed).collect::<Vec<_>>()
    );
}

// DESIGN §9.3 and §9.5 planted bug, pipelined clients: conflicting grants are caught by
// mutual exclusion, and the same run's history alone is not linearizable.
#[test]
fn planted_skip_conflict_check_is_caught_with_pipelined_clients() {
    let mut c = pipelined(0);
    c.planted.skip_conflict_check = true;
    let (seed, v) = first_violation_with(c, 50).expect("not caught within 50 seeds");
    eprintln!("skip-conflict-check, pipelined, caught at seed {seed}: {v}");
    assert!(matches!(v, Violation::MutualExclusion { .. }), "{v}");
    let mut c = pipelined(seed);
    c.planted.skip_conflict_check = true;
    c.keep_history = true;
    let r = run(c);
    let verdict = lincheck::check(&LockModel::default(), &r.lock_history, &Default::default())
        .expect("well-formed history");
    assert!(
        matches!(verdict, Verdict::NotLinearizable(_)),
        "seed {seed}: {verdict:?}"
    );
}

// DESIGN §4 and §9.4 planted bug, pipelined clients: a manager that answers after the
// first ACCEPTED loses acknowledged lock operations when it fails; the lock checkers
// catch it though every client re-sends its whole stream after the failover.
#[test]
fn planted_confirm_before_all_accepted_is_caught_with_pipelined_clients() {
    let mut c = pipelined(0);
    c.planted.confirm_before_all_accepted = true;
    c.writes = false;
    c.objects = false;
    let (seed, v) = first_violation_with(c, 100).expect("not caught within 100 seeds");
    eprintln!("confirm-before-all-accepted, pipelined, caught at seed {seed}: {v}");
    assert!(
        matches!(
            v,
            Violation::LostRelease { .. }
                | Violation::LostGrant { .. }
                | Violation::MutualExclusion { .. }
                | Violation::NotLinearizable { .. }
        ),
        "{v}"
    );
}

// DESIGN §4 planted bug, pipelined clients: expiring sessions without grace after a
// failover is caught on the clients' conservative deadlines.
#[test]
fn planted_expire_without_grace_is_caught_with_pipelined_clients() {
    let mut c = pipelined(0);
    c.planted.expire_without_grace = true;
    let (seed, v) = first_violation_with(c, 100).expect("not caught within 100 seeds");
    eprintln!("expire-without-grace, pipelined, caught at seed {seed}: {v}");
    assert_exclusion_broken(&v);
}

// seed 000 §5.3.8 (relayout reconciling): sim seed 2847 once lost acknowledged writes. A
// relayout replaced a chunk by a new, empty one; its commit reached one chunk of the new
// layout only, and the next regeneration took a quorum of the new layout made of the new
// chunk (which had voted empty) and a stale one. A relayout now sends the store's state to
// the chunks that lack it, and they vote only once it is durable.
#[test]
fn seed_2847_a_relayout_reconciles_new_chunks_before_they_vote() {
    let r = run(SimConfig::new(2847));
    assert_eq!(r.outcome, Outcome::Passed, "{:?}", r.violations);
}

// DESIGN §3, "Clocks": with every device's wall clock stepping (forward and back, by 30 s,
// an hour, or beyond the lease and TTL) and devices restarting after their steps, the
// same seeds pass; a device that times its deadlines on its wall clock (the planted bug:
// the server's clock before it moved to the boot clock) is caught — its clock stands
// still after a step back and leaps after a step forward.
#[test]
fn planted_wall_clock_deadlines_is_caught_where_steps_alone_pass() {
    let mut c = short(0);
    c.safety_us = 20_000_000;
    c.clock_steps = Some(true);
    let calm = sweep(40_000, 8, 2, &c, 0, |_, _| {});
    assert!(
        calm.faults.boots_after_step > 0,
        "no device restarted after a step"
    );
    assert!(
        calm.failures.is_empty(),
        "steps alone: {:?}",
        (calm.failures.iter())
            .map(|f| (f.seed, f.violation.to_string()))
            .collect::<Vec<_>>()
    );
    // Every step is measured, and the same instants are measured without the steps.
    let steps = calm.faults.clock_steps_forward + calm.faults.clock_steps_back;
    assert_eq!(calm.step_windows.taken.len() as u64, steps);
    assert!(calm.step_windows.not_taken.is_empty());
    let mut off = c.clone();
    off.clock_steps = Some(false);
    let off = sweep(40_000, 8, 2, &off, 0, |_, _| {});
    assert_eq!(off.step_windows.not_taken.len() as u64, steps);
    assert!(off.step_windows.taken.is_empty());
    c.planted.wall_clock_deadlines = true;
    let planted = sweep(40_000, 8, 2, &c, 1, |_, _| {});
    let f = planted
        .failures
        .first()
        .expect("wall-clock deadlines not caught in 8 seeds");
    eprintln!(
        "wall-clock-deadlines caught at seed {}: {}",
        f.seed, f.violation
    );
}

// DESIGN §4 planted bug ("One session per client"): a device answers a keep-alive of a
// session spanning stores once home renewed it, without renewing the children. Half the
// runs have clients whose session is in another store than their names; such a client
// believes its session alive past its child's expiry: the check that no session expires
// before its client's deadline (or, when another client gets the lock meanwhile, mutual
// exclusion) must report it.
#[test]
fn planted_keep_alive_skips_children_is_caught() {
    let found = first_violation(
        PlantedBugs {
            keep_alive_skips_children: true,
            ..PlantedBugs::default()
        },
        200,
    );
    let (seed, v) = found.expect("a keep-alive that skips children not caught in 200 seeds");
    eprintln!("keep-alive skipping children caught at seed {seed}: {v}");
    assert!(
        matches!(
            v,
            Violation::ExpiredBeforeClientDeadline { .. }
                | Violation::MutualExclusion { .. }
                | Violation::NotLinearizable { .. }
                | Violation::LostGrant { .. }
        ),
        "{v}"
    );
}

// DESIGN "State at scale" planted bug: a chunk that persists its record's head alone
// (`PutChunkHead`) though its tables changed since it last persisted them loses those
// changes at its next restart; the checkers must see an acknowledged change missing.
#[test]
fn planted_head_record_loses_rows_is_caught() {
    let mut c = SimConfig::new(0);
    c.planted.head_record_loses_rows = true;
    let found = first_violation_with(c, 4);
    let (seed, v) = found.expect("a head record losing rows not caught within 4 seeds");
    eprintln!("a head record losing rows caught at seed {seed}: {v}");
}
