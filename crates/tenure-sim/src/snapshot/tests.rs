//! Tests of the cut tracker on hand-made channels, records and parts.

use super::*;
use tenure_core::io::SnapshotSummary;

const P: DeviceId = DeviceId(1);
const Q: DeviceId = DeviceId(2);

fn sid() -> SnapshotId {
    SnapshotId {
        initiator: P,
        serial: 1,
    }
}

fn part(d: DeviceId, channels: BTreeMap<DeviceId, Vec<Msg>>) -> SnapshotPart {
    SnapshotPart {
        id: sid(),
        device: d,
        state: DevicePersist::default(),
        channels,
    }
}

fn done(t: &mut CutTracker, terminated: bool) -> Option<Cut> {
    t.ended(
        sid(),
        Ok(SnapshotSummary {
            devices: vec![P, Q],
            terminated,
        }),
        &[P, Q],
    )
}

fn msg() -> Msg {
    Msg::Election(tenure_core::election::ElectionMsg::Alive {
        term: Default::default(),
    })
}

// Seed 002 §14.1: a message P sent before recording and Q received after its record
// is in flight, recorded on Q's channel: a consistent cut.
#[test]
fn a_message_in_flight_recorded_on_its_channel_is_consistent() {
    let mut t = CutTracker::default();
    let peers = [P, Q];
    let s1 = t.send(P, Q);
    t.recorded(sid(), P, 1, 10, 0, &peers, None);
    t.recorded(sid(), Q, 1, 11, 0, &peers, None);
    t.delivering(P, Q, 1, s1, &msg());
    t.processed(P, Q, s1, None);
    t.part(P, 1, part(P, BTreeMap::new()));
    t.part(Q, 1, part(Q, BTreeMap::from([(P, vec![msg()])])));
    assert!(done(&mut t, false).is_some());
    assert!(t.violations.is_empty(), "{:?}", t.violations);
    assert_eq!(t.stats.pair_checks, 2);
}

// A message P sent after recording that Q processed before recording (the planted
// bug's shape: a tag processed before the state is recorded) is caught.
#[test]
fn a_message_received_but_not_sent_in_the_cut_is_caught() {
    let mut t = CutTracker::default();
    let peers = [P, Q];
    t.recorded(sid(), P, 1, 10, 0, &peers, None);
    let s1 = t.send(P, Q);
    t.delivering(P, Q, 1, s1, &msg());
    // Q's record comes after the tagged message's effects left Q.
    t.recorded(sid(), Q, 1, 11, 0, &peers, Some((P, s1, true)));
    t.processed(P, Q, s1, None);
    t.part(P, 1, part(P, BTreeMap::new()));
    t.part(Q, 1, part(Q, BTreeMap::new()));
    assert!(done(&mut t, true).is_none());
    assert!(matches!(
        t.violations[0],
        SnapshotViolation::ReceivedNotSent {
            processed: 1,
            sent: 0,
            ..
        }
    ));
    // Recorded before its effects: consistent.
    let mut t = CutTracker::default();
    t.recorded(sid(), P, 1, 10, 0, &peers, None);
    let s1 = t.send(P, Q);
    t.recorded(sid(), Q, 1, 11, 0, &peers, Some((P, s1, false)));
    t.processed(P, Q, s1, None);
    t.part(P, 1, part(P, BTreeMap::new()));
    t.part(Q, 1, part(Q, BTreeMap::new()));
    assert!(done(&mut t, true).is_some());
}

// Asynchronous disks (sim seed 10341): a message whose effects were only in writes a
// crash lost is not processed as far as the state the device restarts from goes; one
// whose write group survived stays processed.
#[test]
fn a_crash_forgets_the_messages_whose_writes_it_lost() {
    let peers = [P, Q];
    // P sends #1, records, sends #2; Q processes both (write groups 1 and 2), then
    // crashes with only the groups up to `kept` durable, restarts and records.
    let run = |kept: u64| {
        let mut t = CutTracker::default();
        let s1 = t.send(P, Q);
        t.recorded(sid(), P, 1, 10, 0, &peers, None);
        let s2 = t.send(P, Q);
        t.processed(P, Q, s1, Some(1));
        t.processed(P, Q, s2, Some(2));
        t.synced(Q, 1);
        t.lost(Q, kept);
        t.recorded(sid(), Q, 2, 11, 0, &peers, None);
        t.part(P, 1, part(P, BTreeMap::new()));
        t.part(Q, 2, part(Q, BTreeMap::new()));
        (done(&mut t, true).is_some(), t.violations)
    };
    // #2's write was lost: Q's state does not reflect it, the cut is consistent.
    let (ok, v) = run(1);
    assert!(ok, "{v:?}");
    // It survived (the commit in flight was written whole): caught.
    let (ok, v) = run(2);
    assert!(
        !ok && matches!(v[0], SnapshotViolation::ReceivedNotSent { .. }),
        "{v:?}"
    );
}

// A recorded message that was sent after the sender's record, or never delivered,
// is caught; so is a terminated snapshot with messages in flight.
#[test]
fn bad_channel_contents_are_caught() {
    let peers = [P, Q];
    let mut t = CutTracker::default();
    t.recorded(sid(), P, 1, 10, 0, &peers, None);
    t.recorded(sid(), Q, 1, 11, 0, &peers, None);
    let s1 = t.send(P, Q);
    t.delivering(P, Q, 1, s1, &msg());
    t.part(P, 1, part(P, BTreeMap::new()));
    t.part(Q, 1, part(Q, BTreeMap::from([(P, vec![msg()])])));
    assert!(done(&mut t, false).is_none());
    assert!(matches!(
        t.violations[0],
        SnapshotViolation::BadChannel { .. }
    ));
    let mut t = CutTracker::default();
    t.send(P, Q);
    t.recorded(sid(), P, 1, 10, 0, &peers, None);
    t.recorded(sid(), Q, 1, 11, 0, &peers, None);
    t.part(Q, 1, part(Q, BTreeMap::from([(P, vec![msg()])])));
    assert!(matches!(
        t.violations[0],
        SnapshotViolation::BadChannel { .. }
    ));
    let mut t = CutTracker::default();
    let s1 = t.send(P, Q);
    t.recorded(sid(), P, 1, 10, 0, &peers, None);
    t.recorded(sid(), Q, 1, 11, 0, &peers, None);
    t.delivering(P, Q, 1, s1, &msg());
    t.part(P, 1, part(P, BTreeMap::new()));
    t.part(Q, 1, part(Q, BTreeMap::from([(P, vec![msg()])])));
    done(&mut t, true);
    assert!(matches!(
        t.violations[0],
        SnapshotViolation::Incomplete { .. }
    ));
}

// A complete snapshot must have a part from every device.
#[test]
fn a_missing_part_is_caught() {
    let mut t = CutTracker::default();
    t.recorded(sid(), P, 1, 10, 0, &[P, Q], None);
    t.part(P, 1, part(P, BTreeMap::new()));
    assert!(done(&mut t, true).is_none());
    assert!(matches!(
        t.violations[0],
        SnapshotViolation::Incomplete { .. }
    ));
}

// A message a device output before it recorded, but held until the persists it may
// depend on were durable, counts as sent before the record: its receiver may process
// it before recording (the cut is consistent), though it left after the record.
#[test]
fn a_message_held_across_the_record_counts_as_sent_before_it() {
    let mut t = CutTracker::default();
    t.produced(P, Q);
    t.recorded(sid(), P, 1, 10, 0, &[P, Q], None);
    let s1 = t.send(P, Q);
    t.processed(P, Q, s1, None);
    t.recorded(sid(), Q, 1, 11, 0, &[P, Q], None);
    t.part(P, 1, part(P, BTreeMap::new()));
    t.part(Q, 1, part(Q, BTreeMap::new()));
    assert!(done(&mut t, false).is_some(), "{:?}", t.violations);
    assert!(t.violations.is_empty(), "{:?}", t.violations);
}

// A record whose persist a crash lost before it was durable never showed outside the
// device: recording the snapshot again after the restart is no second record. One
// kept durably across the restart still is.
#[test]
fn a_record_lost_with_its_unsynced_persist_may_be_made_again() {
    let mut t = CutTracker::default();
    t.recorded(sid(), P, 1, 10, 0, &[P, Q], None);
    // After its record, P processes a message Q sent after Q's own record.
    t.recorded(sid(), Q, 1, 11, 0, &[P, Q], None);
    let s1 = t.send(Q, P);
    t.processed(Q, P, s1, None);
    t.crashed(P);
    t.unrecorded(P, 1, &[sid()]);
    // Its restarted state reflects none of that: recording again is consistent.
    t.recorded(sid(), P, 2, 20, 0, &[P, Q], None);
    t.part(P, 2, part(P, BTreeMap::new()));
    t.part(Q, 1, part(Q, BTreeMap::new()));
    assert!(done(&mut t, false).is_some(), "{:?}", t.violations);
    assert!(t.violations.is_empty(), "{:?}", t.violations);
    t.crashed(P);
    t.recorded(sid(), P, 3, 30, 0, &[P, Q], None);
    assert!(matches!(
        t.violations[..],
        [SnapshotViolation::RecordedTwice { .. }]
    ));
}
