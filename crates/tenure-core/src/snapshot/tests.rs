//! Snapshots on the test cluster: seed 002 §14.1 (Chandy-Lamport) and §14.2 (Done /
//! Continue termination detection).

use super::*;
use crate::io::{Input, Output, SnapshotSummary};
use crate::msg::Msg;
use crate::testkit::Cluster;

const D1: DeviceId = DeviceId(1);

fn ended(c: &Cluster) -> Vec<(SnapshotId, Result<SnapshotSummary, String>)> {
    (c.snapshot_outputs.iter())
        .filter_map(|(_, _, o)| match o {
            Output::SnapshotEnded { id, result } => Some((*id, result.clone())),
            _ => None,
        })
        .collect()
}

fn parts(c: &Cluster, id: SnapshotId) -> Vec<SnapshotPart> {
    (c.snapshot_outputs.iter())
        .filter_map(|(_, _, o)| match o {
            Output::SnapshotPart(p) if p.id == id => Some((**p).clone()),
            _ => None,
        })
        .collect()
}

fn started(c: &Cluster) -> Vec<SnapshotId> {
    (c.snapshot_outputs.iter())
        .filter_map(|(_, _, o)| match o {
            Output::SnapshotStarted { id } => Some(*id),
            _ => None,
        })
        .collect()
}

/// §14.1: the initiator records, every device records at its first marker and sends one
/// part; §14.2: the initiator learns the snapshot is complete with every device in it.
#[test]
fn snapshot_every_device_records_one_part_and_the_initiator_learns_completion() {
    let mut c = Cluster::new(5, 8);
    c.run_for(Duration::from_secs(3));
    c.input(D1, Input::StartSnapshot);
    c.run_for(Duration::from_secs(1));
    let ids = started(&c);
    assert_eq!(ids.len(), 1);
    let id = ids[0];
    assert_eq!(id.initiator, D1);
    let ended = ended(&c);
    assert_eq!(ended.len(), 1, "{ended:?}");
    let summary = ended[0].1.clone().expect("completed");
    assert_eq!(summary.devices, (1..=5).map(DeviceId).collect::<Vec<_>>());
    let parts = parts(&c, id);
    let mut devs: Vec<DeviceId> = parts.iter().map(|p| p.device).collect();
    devs.sort();
    assert_eq!(devs, summary.devices, "one part per device");
    // Each part holds the device's chunks at the cut.
    for p in &parts {
        assert!(!p.state.chunks.is_empty(), "device {} has chunks", p.device);
    }
    // Termination detection agrees with the recorded channels.
    let quiet = parts.iter().all(|p| p.channels.values().all(Vec::is_empty));
    assert_eq!(summary.terminated, quiet);
}

/// §14.1 "as many checkpoints going on simultaneously as you want": two snapshots from
/// two initiators at the same instant both complete, each with its own parts.
#[test]
fn snapshot_two_at_once_from_two_initiators_both_complete() {
    let mut c = Cluster::new(5, 8);
    c.run_for(Duration::from_secs(3));
    c.input(D1, Input::StartSnapshot);
    c.input(DeviceId(4), Input::StartSnapshot);
    c.run_for(Duration::from_secs(1));
    let ids = started(&c);
    assert_eq!(ids.len(), 2);
    let ended = ended(&c);
    assert_eq!(ended.len(), 2, "{ended:?}");
    for (id, r) in ended {
        assert_eq!(r.expect("completed").devices.len(), 5);
        assert_eq!(parts(&c, id).len(), 5);
    }
}

/// A device that is down never answers: the snapshot fails at the initiator after the
/// timeout, naming the silent device.
#[test]
fn snapshot_with_a_device_down_fails_naming_it() {
    let mut c = Cluster::new(5, 8);
    c.run_for(Duration::from_secs(3));
    c.crash(DeviceId(3));
    c.input(D1, Input::StartSnapshot);
    c.run_for(Duration::from_secs(12));
    let ended = ended(&c);
    assert_eq!(ended.len(), 1, "{ended:?}");
    let why = ended[0].1.clone().expect_err("failed");
    assert!(why.contains('3'), "{why}");
}

/// A lost marker: messages to the peer travel tagged until it acknowledges, so the
/// peer still records and the snapshot completes.
#[test]
fn snapshot_lost_marker_is_replaced_by_the_tag_on_the_next_message() {
    let mut c = Cluster::new(5, 8);
    c.run_for(Duration::from_secs(3));
    let mut dropped = 0;
    c.drop = Some(Box::new(move |from, to, msg| {
        let lose = from == D1
            && to == DeviceId(2)
            && matches!(msg, Msg::Snapshot(SnapMsg::Marker { .. }))
            && dropped == 0;
        if lose {
            dropped += 1;
        }
        lose
    }));
    c.input(D1, Input::StartSnapshot);
    c.run_for(Duration::from_secs(2));
    assert!(
        c.count_delivered(|m| matches!(m, Msg::Snapshot(SnapMsg::Tagged { .. }))) > 0,
        "a tagged message carried the marker"
    );
    let ended = ended(&c);
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!(ended[0].1.clone().expect("completed").devices.len(), 5);
}

#[test]
fn snapshot_id_round_trips_through_its_text_form() {
    let id = SnapshotId {
        initiator: DeviceId(3),
        serial: 1_234_567,
    };
    assert_eq!(id.to_string(), "3-1234567");
    assert_eq!("3-1234567".parse::<SnapshotId>(), Ok(id));
    assert!("x-1".parse::<SnapshotId>().is_err());
    assert!("31234567".parse::<SnapshotId>().is_err());
}

/// §14.2 over a lossy channel: a successor whose Done was lost answers its predecessor's
/// repeated marker (a tag on the predecessor's next message, sent because the
/// predecessor never heard back) with the same Done again. Answering NotSuccessor made
/// the predecessor drop the successor's whole subtree: the simulator's seed 406 saw an
/// initiator report a complete snapshot naming two devices of five.
#[test]
fn a_finished_successor_repeats_its_answer_to_a_repeated_marker_of_its_predecessor() {
    use crate::time::Instant;
    let (d2, d3) = (DeviceId(2), DeviceId(3));
    let peers = [D1, d3];
    let id = SnapshotId {
        initiator: D1,
        serial: 7,
    };
    let now = Instant(1_000);
    let mut s = Snapshots::default();
    let mut out = Vec::new();
    let state = Some(crate::io::persist::DevicePersist::default());
    s.on_marker(now, d2, &peers, D1, id, state, &mut out);
    s.on_marker(now, d2, &peers, d3, id, None, &mut out);
    s.on_msg(d2, D1, SnapMsg::NotSuccessor { id }, &mut out);
    s.on_msg(d2, d3, SnapMsg::NotSuccessor { id }, &mut out);
    let answers = |out: &[Output], to: DeviceId| -> Vec<SnapMsg<Msg>> {
        (out.iter())
            .filter_map(|o| match o {
                Output::Send {
                    to: t,
                    msg: Msg::Snapshot(m),
                } if *t == to
                    && !matches!(m, SnapMsg::Marker { .. } | SnapMsg::MarkerAck { .. }) =>
                {
                    Some(m.clone())
                }
                _ => None,
            })
            .collect()
    };
    let done = SnapMsg::Done {
        id,
        devices: vec![d2],
        view: vec![D1, d2, d3],
    };
    assert_eq!(answers(&out, D1), vec![done.clone()]);
    // The Done is lost; the predecessor tags its next message to this device.
    let mut again = Vec::new();
    s.on_marker(now, d2, &peers, D1, id, None, &mut again);
    assert_eq!(answers(&again, D1), vec![done]);
    // A device that is not the sender's successor still says so.
    let mut other = Vec::new();
    s.on_marker(now, d2, &peers, d3, id, None, &mut other);
    assert_eq!(answers(&other, d3), vec![SnapMsg::NotSuccessor { id }]);
}

/// §14.1 records a device's state once per snapshot. A device that restarts while it
/// takes part has lost the recording (its channels, its part) and its state now holds
/// messages received after the cut: it must not record the snapshot again. The ids it
/// recorded are durable before its markers leave; after a restart a marker of one of
/// them is answered with Abort, to the sender and to the initiator.
#[test]
fn snapshot_a_restarted_device_never_records_again_and_aborts() {
    let (d2, d3) = (DeviceId(2), DeviceId(3));
    let id = SnapshotId {
        initiator: D1,
        serial: 7,
    };
    let peers = [D1, d2, d3];
    let mut s = crate::snapshot::Snapshots::default();
    let mut out = Vec::new();
    let now = crate::time::Instant(1_000);
    s.on_marker(now, d2, &peers, D1, id, Some(Default::default()), &mut out);
    let at = |f: &dyn Fn(&Output) -> bool| out.iter().position(f).expect("present");
    let recorded = at(&|o| matches!(o, Output::Observe(_)));
    let persisted = at(
        &|o| matches!(o, Output::Persist(crate::io::persist::PersistOp::SetSnapshots(v)) if *v == vec![id]),
    );
    let marker = at(&|o| {
        matches!(
            o,
            Output::Send {
                msg: Msg::Snapshot(SnapMsg::Marker { .. }),
                ..
            }
        )
    });
    assert!(recorded < persisted && persisted < marker, "{out:?}");

    // Restart: the machine boots from what is on disk.
    let mut s = crate::snapshot::Snapshots::boot(s.recorded());
    assert!(s.knows(id), "no state is taken for it");
    let mut out = Vec::new();
    s.on_marker(now, d2, &peers, d3, id, None, &mut out);
    assert!(
        !out.iter()
            .any(|o| matches!(o, Output::Observe(_) | Output::SnapshotPart(_))),
        "{out:?}"
    );
    let aborts: Vec<DeviceId> = (out.iter())
        .filter_map(|o| match o {
            Output::Send {
                to,
                msg: Msg::Snapshot(SnapMsg::Abort { id: a }),
            } if *a == id => Some(*to),
            _ => None,
        })
        .collect();
    assert_eq!(aborts, vec![d3, D1]);
}

/// §14.1 on a changing membership: a message tagged with a snapshot, from a device this
/// device's record does not list yet, is processed without recording (no peer recorded
/// it); a later marker of the same snapshot must not make this device record, or its
/// state would hold a message sent after the sender's cut. It gives the snapshot up,
/// telling the sender and the initiator (simulator seed 1565).
#[test]
fn snapshot_a_tag_from_outside_the_record_gives_the_snapshot_up() {
    let (d2, d3, d7) = (DeviceId(2), DeviceId(3), DeviceId(7));
    let id = SnapshotId {
        initiator: D1,
        serial: 7,
    };
    let peers = [D1, d3];
    let mut s = crate::snapshot::Snapshots::default();
    let now = crate::time::Instant(1_000);
    let mut out = Vec::new();
    s.on_tag_from_outside(d2, &peers, d7, id, &mut out);
    let sent: Vec<(DeviceId, SnapMsg<Msg>)> = (out.iter())
        .filter_map(|o| match o {
            Output::Send {
                to,
                msg: Msg::Snapshot(m),
            } => Some((*to, m.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        sent,
        vec![
            (d7, SnapMsg::MarkerAck { id }),
            (d7, SnapMsg::Abort { id }),
            (D1, SnapMsg::Abort { id }),
        ]
    );
    // The marker of a peer that comes later records nothing.
    let mut later = Vec::new();
    s.on_marker(now, d2, &peers, d3, id, None, &mut later);
    assert!(
        !later
            .iter()
            .any(|o| matches!(o, Output::Observe(_) | Output::SnapshotPart(_))),
        "{later:?}"
    );
    assert!(!s.is_active(id));
}

/// Chandy-Lamport over a changing membership (module documentation; simulator seed
/// 20530): a successor that recorded with other devices than its predecessor — here it
/// lacks a device its predecessor has — makes the predecessor fail the snapshot; one that
/// recorded with the same devices does not.
#[test]
fn a_successor_that_recorded_with_other_devices_fails_the_snapshot() {
    use crate::time::Instant;
    let (d2, d3) = (DeviceId(2), DeviceId(3));
    let now = Instant(1_000);
    let run = |view: Vec<DeviceId>| {
        let mut s = Snapshots::default();
        let mut out = Vec::new();
        s.start(
            now,
            D1,
            &[d2, d3],
            crate::io::persist::DevicePersist::default(),
            &mut out,
        );
        let id = s.active().next().expect("started");
        s.on_marker(now, D1, &[d2, d3], d2, id, None, &mut out);
        s.on_marker(now, D1, &[d2, d3], d3, id, None, &mut out);
        s.on_msg(D1, d3, SnapMsg::NotSuccessor { id }, &mut out);
        let devices = vec![d2];
        s.on_msg(D1, d2, SnapMsg::Done { id, devices, view }, &mut out);
        (out.into_iter())
            .find_map(|o| match o {
                Output::SnapshotEnded { result, .. } => Some(result),
                _ => None,
            })
            .expect("the snapshot ended")
    };
    let same = run(vec![D1, d2, d3]);
    assert!(same.is_ok(), "{same:?}");
    let other = run(vec![D1, d2]);
    let why = other.expect_err("a successor with another view fails the snapshot");
    assert!(why.contains("membership changed"), "{why}");
}

/// `[snapshot] every` (DESIGN §6: the coordinator schedules snapshots): only the
/// coordinator starts them, one per period, and each completes with every device.
#[test]
fn snapshot_the_coordinator_starts_one_every_period_and_each_completes() {
    let every = Duration::from_secs(2);
    let mut c = Cluster::with(3, 8, |cfg| cfg.snapshot.every = every);
    c.run_for(Duration::from_secs(11));
    let ids = started(&c);
    // The coordinator is elected within the first seconds; then one start per period.
    assert!((3..=5).contains(&ids.len()), "{ids:?}");
    let initiators: std::collections::BTreeSet<DeviceId> =
        ids.iter().map(|id| id.initiator).collect();
    assert_eq!(initiators.len(), 1, "only the coordinator starts: {ids:?}");
    let starts: Vec<_> = (c.snapshot_outputs.iter())
        .filter(|(_, _, o)| matches!(o, Output::SnapshotStarted { .. }))
        .map(|(t, _, _)| *t)
        .collect();
    for w in starts.windows(2) {
        let gap = w[1].saturating_since(w[0]);
        assert!(
            gap >= every && gap < every + Duration::from_millis(500),
            "{gap:?}"
        );
    }
    let ended = ended(&c);
    let done: Vec<_> = ended.iter().filter(|(_, r)| r.is_ok()).collect();
    assert!(done.len() + 1 >= ids.len(), "{ended:?}");
    for (_, r) in done {
        let devices = &r.as_ref().expect("ok").devices;
        assert_eq!(devices, &(1..=3).map(DeviceId).collect::<Vec<_>>());
    }
}

/// DESIGN §3, "Clocks": a device restarted with its clock read from an earlier origin
/// (its wall clock was stepped back) gives a new snapshot an id above every one it
/// recorded in its earlier lives, not the id its clock reading would make.
#[test]
fn a_restart_on_an_earlier_clock_does_not_repeat_a_snapshot_id() {
    use crate::time::Instant;
    let (d2, d3) = (DeviceId(2), DeviceId(3));
    let mut first = Snapshots::default();
    let mut out = Vec::new();
    let old = first.start(
        Instant(7_200_000_000),
        D1,
        &[d2, d3],
        crate::io::persist::DevicePersist::default(),
        &mut out,
    );
    // Restarted an hour back on its new clock.
    let mut s = Snapshots::boot(first.recorded());
    let new = s.start(
        Instant(3_600_000_000),
        D1,
        &[d2, d3],
        crate::io::persist::DevicePersist::default(),
        &mut out,
    );
    assert!(new.serial > old.serial, "{new} after {old}");
}
