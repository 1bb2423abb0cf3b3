//! The coordinator on the test cluster (DESIGN §6): elected, it replaces failed chunks,
//! admits and retires devices; its commands are fenced by its term.

use super::Term;
use super::coordinator::CoordMsg;
use crate::ids::{DeviceId, Epoch, StoreId};
use crate::io::Input;
use crate::io::observation::Observation;
use crate::io::policy::PolicyCommand;
use crate::msg::Msg;
use crate::testkit::Cluster;
use std::time::Duration;

const S: Duration = Duration::from_secs(1);

fn d(n: u64) -> DeviceId {
    DeviceId(n)
}

fn coordinators(c: &Cluster) -> Vec<(DeviceId, Option<Term>)> {
    (c.devices.iter())
        .map(|(id, dev)| (*id, dev.coordinator()))
        .collect()
}

/// §14.3.1: after boot every device follows the highest id, which acts as coordinator.
#[test]
fn coordinator_bully_elects_the_highest_id_and_everyone_follows_it() {
    let mut c = Cluster::new(5, 8);
    c.run_for(3 * S);
    for (id, t) in coordinators(&c) {
        assert_eq!(t.map(|t| t.leader), Some(d(5)), "device {id}");
    }
    assert!(c.devices[&d(5)].acting_coordinator().is_some());
    assert!(c.devices[&d(1)].acting_coordinator().is_none());
}

/// A coordinator that crashes is replaced by the next highest id with a larger term.
#[test]
fn coordinator_crash_elects_a_successor_with_a_larger_term() {
    let mut c = Cluster::new(5, 8);
    c.run_for(3 * S);
    let before = c.devices[&d(1)].coordinator().expect("term");
    c.crash(d(5));
    c.run_for(3 * S);
    for (id, t) in coordinators(&c) {
        let t = t.expect("a coordinator");
        assert_eq!(t.leader, d(4), "device {id}");
        assert!(t > before);
    }
}

/// DESIGN §6: a command from an older term is refused, and changes nothing.
#[test]
fn coordinator_command_of_an_older_term_is_refused() {
    let mut c = Cluster::new(3, 4);
    c.run_for(3 * S);
    let term = c.devices[&d(1)].coordinator().expect("term");
    let old = Term {
        n: term.n - 1,
        leader: d(2),
    };
    let (store, mgr) = (0..4)
        .map(StoreId)
        .find_map(|s| c.manager_of(s).map(|(m, _)| (s, m)))
        .expect("a managed store");
    let to = [d(1), d(2), d(3)].into_iter().find(|x| *x != mgr).unwrap();
    let epoch = c.manager_of(store).map(|(_, e)| e).unwrap_or(Epoch(0));
    c.input(
        mgr,
        Input::Message {
            from: d(2),
            msg: Msg::Coord(CoordMsg::Command {
                term: old,
                cmd: PolicyCommand::Migrate { store, to },
            }),
        },
    );
    assert_eq!(
        c.observed(|o| matches!(o, Observation::CommandRefused { term: t, .. } if *t == old)),
        1
    );
    c.run_for(2 * S);
    assert_eq!(c.manager_of(store), Some((mgr, epoch)), "nothing moved");
}

/// The coordinator replaces the chunks a crashed device held, on other devices.
#[test]
fn coordinator_replaces_the_chunks_of_a_device_that_stays_down() {
    let mut c = Cluster::new(5, 8);
    c.run_for(3 * S);
    c.crash(d(2));
    c.run_for(30 * S);
    assert!(c.all_managed());
    for s in 0..8 {
        let chunks = c.chunks_of(StoreId(s));
        let live = chunks.iter().filter(|ch| ch.id.device != d(2)).count();
        assert!(live >= 3, "store {s}: {chunks:?}");
    }
    assert!(
        c.observed(|o| matches!(o, Observation::CommandSent { term, .. } if term.leader == d(5)))
            > 0
    );
}

/// `tenure cluster add`: a joining device is admitted, takes chunks and, being the
/// highest id, becomes coordinator.
#[test]
fn membership_add_admits_the_device_which_takes_its_share_of_chunks() {
    let mut c = Cluster::new(4, 16);
    c.run_for(3 * S);
    c.join(d(5));
    c.run_for(2 * S);
    assert!(
        c.devices[&d(5)].chunk_views().is_empty(),
        "not admitted yet"
    );
    assert_eq!(
        c.devices[&d(5)].coordinator(),
        None,
        "no election before it is a member"
    );
    c.policy(
        d(1),
        PolicyCommand::AddDevice {
            device: d(5),
            peer_addr: "127.0.0.1:7105".into(),
            client_addr: "127.0.0.1:7205".into(),
        },
    );
    c.run_for(90 * S);
    for (id, dev) in &c.devices {
        assert!(dev.members().is_active(d(5)), "device {id} admits 5");
        assert_eq!(
            dev.coordinator().map(|t| t.leader),
            Some(d(5)),
            "device {id}"
        );
    }
    let mine = c.devices[&d(5)].chunk_views().len();
    assert!(mine >= 16 * 3 / 5 - 3, "device 5 holds {mine} chunks");
    assert!(c.all_managed());
}

/// `tenure cluster remove`: the device's chunks move, its managers migrate, then it
/// retires and is told so.
#[test]
fn membership_remove_drains_the_device_then_retires_it() {
    let mut c = Cluster::new(5, 16);
    c.run_for(3 * S);
    c.policy(d(3), PolicyCommand::RemoveDevice { device: d(2) });
    c.run_for(90 * S);
    assert!(c.devices[&d(2)].chunk_views().is_empty());
    assert!(c.devices[&d(2)].manager_views().is_empty());
    for (id, dev) in &c.devices {
        assert!(!dev.members().contains(d(2)), "device {id}");
    }
    assert!(
        c.observations
            .iter()
            .any(|(_, who, o)| *who == d(2) && matches!(o, Observation::Retired))
    );
    assert!(c.all_managed());
    for s in 0..16 {
        let n = c
            .chunks_of(StoreId(s))
            .iter()
            .filter(|ch| ch.id.device != d(2))
            .count();
        assert!(n >= 3, "store {s} keeps three chunks");
    }
}

/// DESIGN §6: a membership record from a deposed coordinator is refused, as its
/// commands are — a device acting on it could retire on a change the cluster's record
/// never holds, and stop for good while the record still counts it (simulator seeds 58,
/// 144: a member that is not running after faults stop).
#[test]
fn membership_record_of_an_older_term_is_refused() {
    let mut c = Cluster::new(3, 4);
    c.run_for(3 * S);
    let term = c.devices[&d(1)].coordinator().expect("term");
    let old = Term {
        n: term.n - 1,
        leader: d(2),
    };
    let mut record = c.devices[&d(1)].members().clone();
    assert!(record.start_retiring(old, d(1), 1));
    record.retire(old, d(1));
    c.input(
        d(1),
        Input::Message {
            from: d(2),
            msg: Msg::Coord(CoordMsg::Members {
                term: old,
                members: record,
            }),
        },
    );
    assert!(c.devices[&d(1)].members().contains(d(1)));
    assert_eq!(
        c.observed(|o| matches!(o, Observation::Retired)),
        0,
        "no retirement on a deposed coordinator's record"
    );
}

/// DESIGN §6: a retirement decided by another coordinator (in a record that lost to a
/// newer one) reaches the current coordinator's record through a member's report: the
/// retired device has stopped for good and must not stay a member.
#[test]
fn membership_retirement_in_a_reported_record_is_kept_by_the_coordinator() {
    use super::coordinator::Coordinator;
    use crate::config::{ClusterConfig, DeviceConfig};
    use crate::time::Instant;
    let cfg = DeviceConfig::new(d(3), ClusterConfig::new(4, 4, 3));
    let boot = super::members::Members::bootstrap(&[d(1), d(2), d(3), d(4)]);
    let t5 = Term { n: 5, leader: d(3) };
    // This coordinator's record is newer than the reported one, which loses.
    let mut mine = boot.clone();
    assert!(mine.admit(t5, d(5), "", ""));
    assert!(mine.admit(t5, d(6), "", ""));
    let mut co = Coordinator::default();
    co.start(t5, Instant(0), &cfg, &mine);
    let mut other = boot.clone();
    let t4 = Term { n: 4, leader: d(2) };
    assert!(other.start_retiring(t4, d(4), 3));
    other.retire(t4, d(4));
    assert!(other.version < mine.version);
    co.on_member(Instant(1), d(1), t5, 2, &other);
    assert!(co.members.contains(d(6)), "the newer record stays");
    assert!(!co.members.contains(d(4)));
    assert!(co.members.retired.contains(&d(4)));
}

/// DESIGN §6: a member whose report carries an older record than the receiver's gets the
/// receiver's record back, under the receiver's term. A device that refused a newer
/// record from a deposed coordinator otherwise kept following an ended term and ignored
/// the coordinator it did not know as a member (simulator seed 1043).
#[test]
fn membership_a_report_with_an_older_record_is_answered_with_the_newer_one() {
    use crate::io::Output;
    let mut c = Cluster::new(4, 4);
    c.run_for(3 * S);
    let old = c.devices[&d(1)].members().clone();
    c.policy(d(1), PolicyCommand::RemoveDevice { device: d(4) });
    c.run_for(90 * S);
    let newer = c.devices[&d(1)].members().clone();
    assert!(
        newer.version > old.version,
        "the removal changed the record"
    );
    let term = c.devices[&d(1)].coordinator().expect("term");
    let now = c.now;
    let dev = c.devices.get_mut(&d(1)).unwrap();
    let report = |members| Input::Message {
        from: d(2),
        msg: Msg::Coord(CoordMsg::Member {
            term,
            chunks: 1,
            members,
        }),
    };
    let answers = |out: &[Output]| {
        out.iter()
            .filter_map(|o| match o {
                Output::Send {
                    to,
                    msg: Msg::Coord(CoordMsg::Members { term, members }),
                } if *to == d(2) => Some((*term, members.clone())),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let out = dev.handle(now, report(old));
    let sent = answers(&out);
    assert_eq!(sent.len(), 1, "{out:?}");
    assert_eq!(sent[0].1, newer);
    assert!(sent[0].0 >= term);
    // A report with the same record gets no answer.
    let out = dev.handle(now, report(newer));
    assert!(answers(&out).is_empty());
}

/// DESIGN §6: a device whose admission was lost — a newer record of another
/// coordinator leaves it out without retiring it — asks the record's members to admit it
/// again, and is admitted (simulator seeds 1455, 1565, 3275: such a device kept managing
/// a store no coordinator heard of, and no removal could ever be judged drained).
#[test]
fn membership_a_device_left_out_by_a_newer_record_is_admitted_again() {
    let mut c = Cluster::new(4, 8);
    c.run_for(3 * S);
    let before = c.devices[&d(1)].members().clone();
    c.join(d(5));
    c.policy(
        d(1),
        PolicyCommand::AddDevice {
            device: d(5),
            peer_addr: "127.0.0.1:7105".into(),
            client_addr: "127.0.0.1:7205".into(),
        },
    );
    c.run_for(10 * S);
    assert!(c.devices[&d(5)].members().is_active(d(5)), "admitted");
    let term = c.devices[&d(5)].coordinator().expect("term");
    // A record of a later term that never heard of the admission: the same devices as
    // before it, one address changed.
    let later = Term {
        n: term.n + 1,
        leader: d(4),
    };
    let mut lost = before.clone();
    assert!(lost.admit(later, d(1), "127.0.0.1:7101", ""));
    assert!(lost.version > c.devices[&d(5)].members().version);
    c.input(
        d(5),
        Input::Message {
            from: d(4),
            msg: Msg::Coord(CoordMsg::Members {
                term: later,
                members: lost,
            }),
        },
    );
    assert!(!c.devices[&d(5)].members().contains(d(5)), "left out");
    c.run_for(30 * S);
    for (id, dev) in &c.devices {
        assert!(dev.members().is_active(d(5)), "device {id} admits 5 again");
        assert!(
            dev.coordinator().is_some(),
            "device {id} follows a coordinator"
        );
    }
}

/// DESIGN §6: an Alive or announcement naming a coordinator this device's record does
/// not list gets this device's record back, so whichever side is out of date learns the
/// other's (simulator seed 2387: a device that missed the record admitting the
/// coordinator ignored it and called ring elections every 0.9 s, each raising the
/// coordinator's term before it could run a decision round).
#[test]
fn election_an_alive_naming_an_unknown_coordinator_is_answered_with_the_record() {
    use super::ElectionMsg;
    use crate::io::Output;
    let mut c = Cluster::new(3, 4);
    c.run_for(3 * S);
    let mine = c.devices[&d(1)].members().clone();
    let now = c.now;
    let dev = c.devices.get_mut(&d(1)).unwrap();
    let alive = |leader| Input::Message {
        from: d(2),
        msg: Msg::Election(ElectionMsg::Alive {
            term: Term { n: 40, leader },
        }),
    };
    let records = |out: &[Output]| {
        (out.iter())
            .filter(|o| {
                matches!(o, Output::Send { to, msg: Msg::Coord(CoordMsg::Members { members, .. }) }
                    if *to == d(2) && *members == mine)
            })
            .count()
    };
    assert_eq!(records(&dev.handle(now, alive(d(6)))), 1);
    assert_eq!(records(&dev.handle(now, alive(d(3)))), 0, "a known member");
}
