//! Snapshots in the simulator (seed 002 §14.1–§14.2; DESIGN §6, §9.8): a bounded sweep
//! takes snapshots under faults and after them, finds every complete one a consistent cut
//! that restores into a working cluster holding what was acknowledged at the cut, and the
//! cut checker catches the planted bug of a device that records its state after
//! processing the message that carried the marker, on a seed that passes without it.
//! Runs are shortened (10 s of faults) to keep the file well under a minute in
//! `--release` on two cores.

use crate::common;
use tenure_core::PlantedBugs;
use tenure_sim::snapshot::SnapshotViolation;
use tenure_sim::{Outcome, SimConfig, Violation, run, sweep};

fn short(seed: u64) -> SimConfig {
    let mut c = SimConfig::new(seed);
    c.safety_us = 10_000_000;
    // Membership changes have their own tests (tests/integration/membership.rs).
    c.membership = false;
    c
}

/// Seeds swept by `bounded_snapshot_sweep_finds_no_violation` (override with `SIM_SEEDS`).
fn seeds() -> u64 {
    common::seeds_from_env("SIM_SEEDS", 40)
}

// DESIGN §9.8: no seed of a bounded sweep takes a snapshot that is not a consistent cut
// or does not restore, and the sweep exercised what the checkers look at: complete and
// failed snapshots, messages recorded in flight, terminated ones and restores; no device
// records a snapshot twice (a restarted device aborts one it recorded before).
#[test]
fn bounded_snapshot_sweep_finds_no_violation() {
    let n = seeds();
    let s = sweep(0, n, 2, &short(0), 0, |_, _| {});
    for f in &s.failures {
        eprintln!("seed {} {:?}: {}", f.seed, f.outcome, f.message);
    }
    let k = &s.snapshots;
    eprintln!("{k:#?}");
    assert!(k.started > 0 && k.completed > 0 && k.failed > 0 && k.terminated > 0);
    assert!(k.parts > 0 && k.channel_messages > 0);
    assert_eq!(k.rerecords, 0);
    assert!(k.pair_checks > 0 && k.channel_checks > 0 && k.state_checks > 0);
    assert!(k.restores >= 2 * n, "every run restores its calm snapshots");
    assert!(k.restore_events > 0 && k.restore_checks > 0);
    assert_eq!(
        s.failures.len(),
        0,
        "failing seeds: {:?}",
        s.failures.iter().map(|f| f.seed).collect::<Vec<_>>()
    );
}

// DESIGN §10: a run with snapshots (and their restores) replays exactly.
#[test]
fn a_seed_with_snapshots_replays() {
    let once = |seed| {
        let mut c = short(seed);
        c.trace = true;
        let r = run(c);
        (r.fingerprint, r.events, r.trace.len(), r.snapshots.restores)
    };
    let a = once(5);
    assert_eq!(a, once(5));
    assert!(a.3 > 0, "restores ran");
}

/// The first seed below `limit` where the short run with `planted` fails, and its
/// snapshot violation (panics if none fails, or the violation is not a snapshot's).
fn first_snapshot_violation(
    planted: PlantedBugs,
    limit: u64,
) -> (tenure_sim::sweep::Failure, SnapshotViolation) {
    let mut c = short(0);
    c.planted = planted;
    let s = sweep(0, limit, 2, &c, 1, |_, _| {});
    let Some(f) = s.failures.into_iter().next() else {
        panic!("no seed below {limit} caught the planted bug");
    };
    let Violation::Snapshot(v) = f.violation.clone() else {
        panic!(
            "seed {}: expected a snapshot violation, got {}",
            f.seed, f.message
        );
    };
    (f, v)
}

// The cut checker: a device that processes a tagged message before recording its state
// puts in its part (or in a channel it records) a message its sender sent after its own
// record.
#[test]
fn planted_record_late_is_caught_as_an_inconsistent_cut() {
    let planted = PlantedBugs {
        snapshot_record_late: true,
        ..Default::default()
    };
    let (f, v) = first_snapshot_violation(planted, 10);
    assert!(
        matches!(
            v,
            SnapshotViolation::ReceivedNotSent { .. } | SnapshotViolation::BadChannel { .. }
        ),
        "seed {}: {v}",
        f.seed
    );
    assert_eq!(f.outcome, Outcome::Correctness);
    let clean = run(short(f.seed));
    assert_eq!(
        clean.outcome,
        Outcome::Passed,
        "seed {} without the bug: {:?}",
        f.seed,
        clean.violations
    );
}

// Not a lucky seed: the bug shows in a third of the runs or more (as a message recorded in flight that its
// sender sent after recording, the common shape: the marker came first on that channel,
// and the late record let the tagged message into the channel's recording; the other
// shape, a tagged first marker whose message was processed before the record, is shown
// on hand-built records in the checker's unit tests).
#[test]
fn planted_record_late_is_caught_in_many_seeds() {
    let mut c = short(0);
    c.planted = PlantedBugs {
        snapshot_record_late: true,
        ..Default::default()
    };
    let n = 30;
    let s = sweep(0, n, 2, &c, 0, |_, _| {});
    let cut = (s.failures.iter())
        .filter(|f| {
            matches!(
                &f.violation,
                Violation::Snapshot(
                    SnapshotViolation::ReceivedNotSent { .. }
                        | SnapshotViolation::BadChannel { .. }
                )
            )
        })
        .count() as u64;
    assert!(3 * cut >= n, "{cut} of {n} seeds caught it");
}

// seed 002 §14.1 (one record per device and snapshot): sim seed 1891 once reported a cut in
// which a device had received messages sent after their sender's record. The device had
// recorded, crashed before its part was written, and recorded the same snapshot again
// after its restart — with a state that held what it received after the cut. The ids a
// device records are now durable, and a restarted device aborts such a snapshot.
#[test]
fn seed_1891_a_restarted_device_does_not_record_a_snapshot_twice() {
    let r = run(SimConfig::new(1891));
    assert_eq!(r.outcome, Outcome::Passed, "{:?}", r.violations);
}

// The checker for §14.1's one record per device and snapshot, with its planted bug: a
// restarted device that forgets which snapshots it recorded records one again, and the
// sweep reports it.
#[test]
fn planted_forget_recorded_is_caught_as_a_second_record() {
    let planted = PlantedBugs {
        snapshot_forget_recorded: true,
        ..Default::default()
    };
    let (f, v) = first_snapshot_violation(planted, 40);
    assert!(
        matches!(
            v,
            SnapshotViolation::RecordedTwice { .. } | SnapshotViolation::ReceivedNotSent { .. }
        ),
        "seed {}: {v}",
        f.seed
    );
}

// seed 002 §14.1 over a changing membership: sim seed 20530 once reported a cut in which an
// admitted device had processed a message that a restarted device (holding an older
// membership record) sent after its record; neither had recorded with the other among
// its peers, so no marker cut their channel. Devices now fail a snapshot recorded with
// different devices.
#[test]
fn seed_20530_devices_recording_with_different_members_fail_the_snapshot() {
    let r = run(SimConfig::new(20530));
    assert_eq!(r.outcome, Outcome::Passed, "{:?}", r.violations);
}

// The restore check counts a write acknowledged when its reply leaves the device: sim
// seed 20266's manager decided a write, then crashed before the write's persists were durable,
// and the reply never left; its restarted record lacked the write, which was only in
// flight at the cut. Sim seed 10341: a device crashed in the middle of a batch with unsynced
// writes; the checker now forgets what it processed in that lost state.
#[test]
fn seeds_20266_and_10341_crashes_with_unsynced_writes_are_judged_on_what_survived() {
    for seed in [20266, 10341] {
        let r = run(SimConfig::new(seed));
        assert_eq!(
            r.outcome,
            Outcome::Passed,
            "seed {seed}: {:?}",
            r.violations
        );
    }
}

// Sim seed 30996: a device recorded a snapshot and crashed in the same batch, before the
// persist of its record (a torn batch): nothing of that record left the device, so its
// second record after the restart is its only one, not a second.
#[test]
fn seed_30996_a_record_cut_off_by_a_torn_batch_is_not_a_first_record() {
    let r = run(SimConfig::new(30996));
    assert_eq!(r.outcome, Outcome::Passed, "{:?}", r.violations);
}
