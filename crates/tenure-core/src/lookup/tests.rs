//! Scenario tests of the lookup node, one per rule of seed 003 (named after the seed's
//! state and event), on the deterministic harness ([`crate::testkit::Cluster`]).

use super::*;
use crate::error::ClientError;
use crate::ids::DeviceId;
use crate::io::Output;
use crate::io::persist::PersistOp;
use crate::io::request::Response;
use crate::lookup::node::Corruption;
use crate::testkit::Cluster;
use std::time::Duration;

const MS: Duration = Duration::from_millis(1);

pub(super) fn d(n: u64) -> DeviceId {
    DeviceId(n)
}

/// A cluster of `n` devices with one store (the lookup service is what is under test).
pub(super) fn cluster(n: u64, tweak: impl Fn(&mut LookupSettings)) -> Cluster {
    Cluster::with(n, 1, |c| tweak(&mut c.lookup))
}

fn states(c: &Cluster) -> Vec<(DeviceId, NodeState)> {
    c.devices
        .iter()
        .map(|(id, dev)| (*id, dev.lookup().state()))
        .collect()
}

pub(super) fn leaders(c: &Cluster) -> Vec<DeviceId> {
    (c.devices.iter())
        .filter(|(_, dev)| dev.lookup().is_leader())
        .map(|(id, _)| *id)
        .collect()
}

fn active_count(c: &Cluster) -> usize {
    (c.devices.values())
        .filter(|dev| matches!(dev.lookup().state(), NodeState::Active | NodeState::Leader))
        .count()
}

/// Cold start of every node at once: nobody answers Can-I-Join, so after three tries
/// every node becomes active (the self-stabilising variant), warms up, and the oldest
/// by `<activeStartTime, id>` leads.
pub(super) fn settled(n: u64, tweak: impl Fn(&mut LookupSettings)) -> Cluster {
    let mut c = cluster(n, tweak);
    c.run_for(Duration::from_secs(8));
    c
}

fn publish(
    key: &str,
    value: &[u8],
    stamp: u64,
    interval: Duration,
    durability: Durability,
) -> LookupRequest {
    LookupRequest::Publish {
        key: key.into(),
        value: value.to_vec(),
        version: EntryVersion { stamp, provider: 7 },
        interval,
        durability,
        adapt: IntervalRange::fixed(interval),
    }
}

pub(super) fn answer(c: &Cluster, req_id: u64) -> Result<LookupResponse, LookupError> {
    match c.replies.get(&req_id).cloned().expect("answered") {
        Ok(Response::Lookup(r)) => Ok(r),
        Err(ClientError::Lookup(e)) => Err(e),
        other => panic!("not a lookup reply: {other:?}"),
    }
}

pub(super) fn get(c: &mut Cluster, via: DeviceId, key: &str) -> Option<Vec<u8>> {
    let id = c.lookup(via, 1, LookupRequest::Get { key: key.into() });
    c.run_for(Duration::from_millis(150));
    match answer(c, id) {
        Ok(LookupResponse::Entry { entry, .. }) => entry.map(|e| e.value),
        other => panic!("get: {other:?}"),
    }
}

/// Seed 003 `Join()`, case ROUNDTRIP_COMMUNICATION_DELAY with `retry_cnt == 2`: with no
/// leader anywhere, every node becomes active after three Can-I-Join attempts
/// (3 × RTT + 2 × 3 × HB), sleeps MAX_VOLATILE_REFRESH_INTERVAL, and publishes its
/// LS_start_time; the maintainer then makes exactly the oldest node leader.
#[test]
fn join_timeout_after_three_tries_becomes_active_and_one_leader_emerges() {
    let mut c = cluster(3, |_| {});
    // 3 × 100 ms + 2 × 900 ms = 2.1 s: still joining just before.
    c.run_for(Duration::from_millis(2050));
    assert!(
        states(&c).iter().all(|(_, s)| *s == NodeState::Joining),
        "{:?}",
        states(&c)
    );
    c.run_for(Duration::from_millis(100));
    assert!(
        states(&c).iter().all(|(_, s)| *s == NodeState::WarmingUp),
        "{:?}",
        states(&c)
    );
    assert!(leaders(&c).is_empty(), "no leader while warming up");
    c.run_for(Duration::from_secs(2));
    assert_eq!(leaders(&c), vec![d(1)], "{:?}", states(&c));
    // t = 2: at most t + 1 = 3 active nodes.
    assert_eq!(active_count(&c), 3);
}

/// Leader thread, "Can I join" with `number of LS_active_nodes < t`: Ack, carrying the
/// persistent store; the joiner warms up and becomes a hot spare (not leader: it is the
/// youngest).
#[test]
fn can_i_join_below_t_is_acked_with_the_persistent_store() {
    let mut c = settled(3, |s| s.hot_spares = 3);
    let p = c.lookup(
        d(1),
        1,
        publish(
            "/cfg/a",
            b"1",
            10,
            Duration::from_secs(60),
            Durability::Persistent,
        ),
    );
    c.run_for(Duration::from_millis(50));
    assert!(matches!(
        answer(&c, p),
        Ok(LookupResponse::Published { acked: true, .. })
    ));
    // d3 crashes, loses nothing persistent but is behind: d2 publishes while it is down.
    c.crash(d(3));
    let p2 = c.lookup(
        d(2),
        1,
        publish(
            "/cfg/b",
            b"2",
            11,
            Duration::from_secs(60),
            Durability::Persistent,
        ),
    );
    c.run_for(Duration::from_millis(50));
    assert!(matches!(
        answer(&c, p2),
        Ok(LookupResponse::Published { acked: true, .. })
    ));
    // Once the leader's soft-state store has timed d3 out (3 heartbeat intervals), two
    // nodes are active: fewer than t = 3.
    c.run_for(Duration::from_millis(1000));
    c.restart(d(3));
    c.run_for(Duration::from_millis(50));
    assert_eq!(
        c.devices[&d(3)].lookup().state(),
        NodeState::WarmingUp,
        "acked at once"
    );
    assert!(
        c.devices[&d(3)].lookup().data().get("/cfg/b").is_some(),
        "streamed with the ack"
    );
    assert!(
        c.disks[&d(3)].lookup.contains_key("/cfg/b"),
        "and persisted"
    );
    c.run_for(Duration::from_secs(3));
    assert_eq!(c.devices[&d(3)].lookup().state(), NodeState::Active);
    assert_eq!(leaders(&c), vec![d(1)]);
}

/// Leader thread, "Can I join" with `t` or more active nodes and a non-UPS sender: Nack;
/// `Join()` returns and the node stays passive.
#[test]
fn can_i_join_at_t_active_is_nacked_and_the_node_stays_passive() {
    let mut c = settled(3, |s| s.hot_spares = 2);
    c.crash(d(3));
    c.run_for(Duration::from_secs(2));
    c.restart(d(3));
    c.run_for(Duration::from_millis(50));
    // Two active nodes (d1, d2) = t: Nack.
    assert_eq!(c.devices[&d(3)].lookup().state(), NodeState::Passive);
    c.run_for(Duration::from_secs(5));
    assert_eq!(c.devices[&d(3)].lookup().state(), NodeState::Passive);
    assert_eq!(active_count(&c), 2);
}

/// Leader thread, `sender_is_UPS_designated_node`: the UPS node is admitted even when
/// `t` nodes are active, and never steps down.
#[test]
fn the_ups_node_is_always_admitted_and_never_steps_down() {
    let mut c = settled(4, |s| {
        s.hot_spares = 1;
        s.ups = Some(DeviceId(4));
    });
    assert!(matches!(
        c.devices[&d(4)].lookup().state(),
        NodeState::Active | NodeState::Leader
    ));
    c.crash(d(4));
    c.run_for(Duration::from_secs(2));
    c.restart(d(4));
    c.run_for(Duration::from_secs(4));
    assert!(
        matches!(
            c.devices[&d(4)].lookup().state(),
            NodeState::Active | NodeState::Leader
        ),
        "{:?}",
        states(&c)
    );
    // t + 1 = 2 active at most once stable, the UPS node among them.
    c.run_for(Duration::from_secs(4));
    assert!(active_count(&c) <= 2, "{:?}", states(&c));
}

/// Maintainer, active node with `number of LS_active_nodes > t+1` and the latest
/// activeStartTime among non-UPS nodes: it becomes passive (SSS_Delete).
#[test]
fn too_many_active_nodes_the_youngest_non_ups_steps_down() {
    let c = settled(4, |s| s.hot_spares = 2);
    // Cold start made all four active at the same instant; the youngest by id stepped down.
    assert_eq!(active_count(&c), 3, "{:?}", states(&c));
    assert_eq!(c.devices[&d(4)].lookup().state(), NodeState::Passive);
    assert_eq!(leaders(&c), vec![d(1)]);
}

/// "node down" after three missed heartbeats: the next-oldest active node becomes leader
/// within 3 × SS_HEARTBEAT_INTERVAL of the leader's crash, and queries are answered again
/// (the seed's outage bound).
#[test]
fn leader_crash_fails_over_within_three_heartbeat_intervals() {
    let mut c = settled(3, |_| {});
    let p = c.lookup(
        d(2),
        1,
        publish(
            "/svc/x",
            b"a",
            1,
            Duration::from_secs(1),
            Durability::Volatile,
        ),
    );
    c.run_for(Duration::from_millis(10));
    assert!(matches!(
        answer(&c, p),
        Ok(LookupResponse::Published { acked: false, .. })
    ));
    c.crash(d(1));
    let crashed = c.now;
    let mut back = None;
    for _ in 0..40 {
        let id = c.lookup(
            d(3),
            1,
            LookupRequest::Get {
                key: "/svc/x".into(),
            },
        );
        c.run_for(Duration::from_millis(50));
        if let Some(Ok(_)) = c.replies.get(&id) {
            back = Some(c.now.saturating_since(crashed));
            break;
        }
    }
    let outage = back.expect("a leader answers again");
    assert!(
        outage <= Duration::from_millis(900 + 100),
        "outage {outage:?}"
    );
    assert_eq!(leaders(&c), vec![d(2)]);
    assert_eq!(
        get(&mut c, d(3), "/svc/x"),
        Some(b"a".to_vec()),
        "the hot spare had it"
    );
}

/// Self-stabilisation, multiple leaders: the maintainer of an active leader whose
/// activeStartTime is not the earliest gives leadership up; a passive node with a leader
/// flag or an age clears them (`if (INFINITE != activeStartTime || bIsLeader)`).
#[test]
fn corrupted_leaders_are_repaired_by_the_maintainer() {
    let mut c = settled(3, |_| {});
    let start = c.devices[&d(2)].lookup().view().start;
    c.devices
        .get_mut(&d(2))
        .unwrap()
        .lookup_mut()
        .corrupt(Corruption::Flags {
            active: true,
            leader: true,
            start,
        });
    c.devices
        .get_mut(&d(3))
        .unwrap()
        .lookup_mut()
        .corrupt(Corruption::Flags {
            active: false,
            leader: true,
            start: Some(c.now),
        });
    assert_eq!(leaders(&c), vec![d(1), d(2)]);
    c.run_for(Duration::from_millis(2100));
    assert_eq!(leaders(&c), vec![d(1)]);
    let v3 = c.devices[&d(3)].lookup().view();
    assert!(v3.state != NodeState::Leader);
}

/// Self-stabilisation, fake ages: a fake `LS_start_time` older than every real one,
/// planted for a node that sends no heartbeats, times out after three heartbeat
/// intervals ("fake ages time out") and the oldest real node leads.
#[test]
fn a_fake_age_times_out_and_leadership_returns() {
    let mut c = settled(3, |_| {});
    let now = c.now;
    for n in 1..=3 {
        c.devices
            .get_mut(&d(n))
            .unwrap()
            .lookup_mut()
            .corrupt(Corruption::FakeAge {
                of: d(9),
                start: Some(crate::Instant(1)),
                heard: now,
            });
    }
    assert_eq!(c.devices[&d(2)].lookup().oldest_active(), Some(d(9)));
    c.run_for(Duration::from_millis(950));
    for n in 1..=3 {
        let v = c.devices[&d(n)].lookup().view();
        assert!(v.up.iter().all(|(id, _)| *id != d(9)), "d{n}: {v:?}");
        assert_eq!(v.leader, Some(d(1)));
    }
    assert_eq!(leaders(&c), vec![d(1)]);
}

/// Main thread, "update" while active; "query" answered only by the leader; a volatile
/// entry expires when not refreshed for two intervals plus a round trip.
#[test]
fn volatile_entries_are_applied_everywhere_answered_by_the_leader_and_expire() {
    let mut c = settled(3, |_| {});
    let i = Duration::from_millis(500);
    c.lookup(
        d(3),
        1,
        publish("/svc/web/1", b"10.0.0.1", 1, i, Durability::Volatile),
    );
    c.run_for(Duration::from_millis(10));
    for n in 1..=3 {
        assert!(
            c.devices[&d(n)].lookup().data().get("/svc/web/1").is_some(),
            "d{n} applied it"
        );
    }
    assert!(
        c.disks.values().all(|disk| disk.lookup.is_empty()),
        "volatile: never persisted"
    );
    assert_eq!(get(&mut c, d(2), "/svc/web/1"), Some(b"10.0.0.1".to_vec()));
    let id = c.lookup(
        d(3),
        1,
        LookupRequest::List {
            prefix: "/svc".into(),
        },
    );
    c.run_for(Duration::from_millis(50));
    assert!(
        matches!(answer(&c, id), Ok(LookupResponse::Entries { entries, .. }) if entries.len() == 1)
    );
    // No refresh: gone 2 × 500 ms + 100 ms after the publish (minus the 160 ms spent).
    c.run_for(Duration::from_millis(900));
    assert_eq!(get(&mut c, d(2), "/svc/web/1"), None);
    // Every node that kept it reports the expiry (metrics count them).
    let expired = (c.observations.iter())
        .filter(|(_, _, o)| {
            matches!(
                o,
                crate::io::observation::Observation::LookupExpired { persistent: false }
            )
        })
        .count();
    assert_eq!(expired, 3);
}

/// Pessimistic update: `if (bIsLeader && update_needs_acknowledgement) reply(status)`, and
/// the status is that of the update on the persistent state — the Persist precedes the
/// acknowledgement in the leader's outputs.
#[test]
fn a_persistent_update_is_acknowledged_by_the_leader_after_it_is_durable() {
    let mut c = settled(3, |_| {});
    let now = c.now;
    let out = c.devices.get_mut(&d(1)).unwrap().handle(
        now,
        crate::io::Input::Lookup {
            client: crate::ClientId(1),
            req_id: 99,
            req: publish(
                "/cfg/x",
                b"v",
                5,
                Duration::from_secs(60),
                Durability::Persistent,
            ),
        },
    );
    let persist = out
        .iter()
        .position(|o| matches!(o, Output::Persist(PersistOp::LookupPut(_))));
    let ack = out
        .iter()
        .position(|o| matches!(o, Output::Reply { req_id: 99, .. }));
    assert!(
        persist.is_some() && ack.is_some() && persist < ack,
        "{out:?}"
    );
    // Through a non-leader: the leader's answer is the acknowledgement.
    let id = c.lookup(
        d(3),
        1,
        publish(
            "/cfg/y",
            b"w",
            6,
            Duration::from_secs(60),
            Durability::Persistent,
        ),
    );
    assert!(
        !c.replies.contains_key(&id),
        "no answer before the leader's"
    );
    c.run_for(Duration::from_millis(10));
    assert!(matches!(
        answer(&c, id),
        Ok(LookupResponse::Published { acked: true, .. })
    ));
    assert!(
        c.disks
            .values()
            .all(|disk| disk.lookup.contains_key("/cfg/y")),
        "on every active node"
    );
}

/// Persistent entries survive a full restart (a long power outage): every node boots from
/// its disk, the self-stabilising join makes one leader, and it answers with the entry.
#[test]
fn persistent_entries_survive_a_full_restart() {
    let mut c = settled(3, |_| {});
    let id = c.lookup(
        d(2),
        1,
        publish(
            "/cfg/db",
            b"primary=d2",
            5,
            Duration::from_secs(300),
            Durability::Persistent,
        ),
    );
    c.run_for(Duration::from_millis(10));
    assert!(matches!(
        answer(&c, id),
        Ok(LookupResponse::Published { acked: true, .. })
    ));
    for n in 1..=3 {
        c.crash(d(n));
    }
    c.run_for(Duration::from_secs(30));
    for n in 1..=3 {
        c.restart(d(n));
    }
    c.run_for(Duration::from_secs(8));
    assert_eq!(leaders(&c).len(), 1);
    assert_eq!(get(&mut c, d(3), "/cfg/db"), Some(b"primary=d2".to_vec()));
}

/// An acknowledged entry that only the old leader stored (the update's multicast to the
/// others was lost) reaches the next leader: a node sends its persistent store to each
/// new leader it sees (anti-entropy), so a full restart after which another node leads
/// does not lose it.
#[test]
fn an_acked_entry_kept_only_by_one_node_reaches_the_next_leader() {
    let mut c = settled(3, |_| {});
    c.drop = Some(Box::new(|_, _, m| {
        matches!(m, crate::msg::Msg::Lookup(LookupMsg::Forward { .. }))
    }));
    let id = c.lookup(
        d(1),
        1,
        publish(
            "/cfg/only",
            b"1",
            5,
            Duration::from_secs(300),
            Durability::Persistent,
        ),
    );
    c.run_for(Duration::from_millis(10));
    assert!(matches!(
        answer(&c, id),
        Ok(LookupResponse::Published { acked: true, .. })
    ));
    c.drop = None;
    assert!(!c.disks[&d(2)].lookup.contains_key("/cfg/only"));
    // d1 restarts: it rejoins as the youngest; d2 leads and d1 hands it its store.
    c.crash(d(1));
    c.run_for(Duration::from_secs(2));
    c.restart(d(1));
    c.run_for(Duration::from_secs(4));
    assert_eq!(leaders(&c), vec![d(2)]);
    assert_eq!(get(&mut c, d(3), "/cfg/only"), Some(b"1".to_vec()));
    assert!(c.disks[&d(2)].lookup.contains_key("/cfg/only"));
}

/// Updates are idempotent and commutative: an older version arriving late changes
/// nothing (the acknowledged path reports `StaleVersion`), a repeat is a no-op success.
#[test]
fn older_versions_are_ignored_and_repeats_are_idempotent() {
    let mut c = settled(3, |_| {});
    let i = Duration::from_secs(60);
    let a = c.lookup(
        d(1),
        1,
        publish("/k", b"new", 20, i, Durability::Persistent),
    );
    let b = c.lookup(
        d(1),
        1,
        publish("/k", b"old", 10, i, Durability::Persistent),
    );
    let r = c.lookup(
        d(1),
        1,
        publish("/k", b"new", 20, i, Durability::Persistent),
    );
    c.run_for(Duration::from_millis(10));
    assert!(matches!(
        answer(&c, a),
        Ok(LookupResponse::Published { acked: true, .. })
    ));
    assert_eq!(answer(&c, b), Err(LookupError::StaleVersion));
    assert!(matches!(
        answer(&c, r),
        Ok(LookupResponse::Published { acked: true, .. })
    ));
    assert_eq!(get(&mut c, d(2), "/k"), Some(b"new".to_vec()));
    // A revoke with an older version is stale too; a newer one removes it.
    let rv = c.lookup(
        d(2),
        1,
        LookupRequest::Revoke {
            key: "/k".into(),
            version: EntryVersion {
                stamp: 15,
                provider: 7,
            },
            durability: Durability::Persistent,
        },
    );
    c.run_for(Duration::from_millis(10));
    assert_eq!(answer(&c, rv), Err(LookupError::StaleVersion));
    let rv = c.lookup(
        d(2),
        1,
        LookupRequest::Revoke {
            key: "/k".into(),
            version: EntryVersion {
                stamp: 30,
                provider: 7,
            },
            durability: Durability::Persistent,
        },
    );
    c.run_for(Duration::from_millis(10));
    assert_eq!(answer(&c, rv), Ok(LookupResponse::Revoked { acked: true }));
    assert_eq!(get(&mut c, d(2), "/k"), None);
    // The publish at version 20 replayed after the revoke is ignored (tombstone).
    c.lookup(
        d(3),
        1,
        publish("/k", b"new", 20, i, Durability::Persistent),
    );
    c.run_for(Duration::from_millis(10));
    assert_eq!(get(&mut c, d(2), "/k"), None);
}

/// Bad input gets a typed error and changes nothing: nothing is sent, nothing persisted.
#[test]
fn bad_requests_are_refused_before_anything_changes() {
    let mut c = settled(3, |s| s.max_value_bytes = 16);
    let cases = [
        publish(
            "no-slash",
            b"v",
            1,
            Duration::from_secs(1),
            Durability::Volatile,
        ),
        publish(
            "/a//b",
            b"v",
            1,
            Duration::from_secs(1),
            Durability::Volatile,
        ),
        publish(
            "/big",
            &[0u8; 17],
            1,
            Duration::from_secs(1),
            Durability::Volatile,
        ),
        publish(
            "/slow",
            b"v",
            1,
            Duration::from_secs(30),
            Durability::Volatile,
        ),
        publish(
            "/fast",
            b"v",
            1,
            Duration::from_millis(5),
            Durability::Persistent,
        ),
        LookupRequest::List {
            prefix: "bad".into(),
        },
        LookupRequest::Get { key: "".into() },
    ];
    for req in cases {
        let now = c.now;
        let out = c.devices.get_mut(&d(2)).unwrap().handle(
            now,
            crate::io::Input::Lookup {
                client: crate::ClientId(1),
                req_id: 1,
                req: req.clone(),
            },
        );
        let replies: Vec<_> = out
            .iter()
            .filter_map(|o| match o {
                Output::Reply {
                    result: Err(ClientError::Lookup(e)),
                    ..
                } => Some(e.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(replies.len(), 1, "{req:?} → {out:?}");
        assert!(
            !out.iter()
                .any(|o| matches!(o, Output::Send { .. } | Output::Persist(_))),
            "{req:?} changed something: {out:?}"
        );
        let ok = matches!(
            replies[0],
            LookupError::InvalidKey(_)
                | LookupError::TooLarge { .. }
                | LookupError::BadInterval { .. }
        );
        assert!(ok, "{:?}", replies[0]);
    }
    // Unsubscribe of an unknown subscription: answered by the leader.
    let id = c.lookup(d(2), 1, LookupRequest::Unsubscribe { sub: 4242 });
    c.run_for(Duration::from_millis(10));
    assert_eq!(answer(&c, id), Err(LookupError::UnknownSubscription(4242)));
}

fn subscribe(
    c: &mut Cluster,
    via: DeviceId,
    sub: SubId,
    watch: Watch,
    position: Option<SubPosition>,
) {
    c.lookup(
        via,
        1,
        LookupRequest::Subscribe {
            sub,
            watch,
            interval: Duration::from_secs(1),
            position,
        },
    );
}

fn events(c: &Cluster, sub: SubId) -> Vec<(DeviceId, SubEvent)> {
    c.events
        .iter()
        .filter(|(_, _, e)| e.sub == sub)
        .map(|(_, d, e)| (*d, e.clone()))
        .collect()
}

/// Subscriptions are soft state at every active node; the leader pushes a Sync on
/// registration, then Put and Removed (revoked, expired) in sequence to the origin.
#[test]
fn a_subscription_gets_a_sync_then_changes_in_order_at_its_origin() {
    let mut c = settled(3, |_| {});
    subscribe(&mut c, d(3), 1, Watch::Prefix("/svc".into()), None);
    c.run_for(Duration::from_millis(10));
    let i = Duration::from_millis(500);
    c.lookup(d(2), 1, publish("/svc/a", b"1", 1, i, Durability::Volatile));
    c.lookup(d(2), 1, publish("/other", b"1", 1, i, Durability::Volatile));
    c.run_for(Duration::from_millis(10));
    c.lookup(d(2), 1, publish("/svc/a", b"1", 2, i, Durability::Volatile)); // refresh: no event
    c.lookup(d(2), 1, publish("/svc/b", b"2", 3, i, Durability::Volatile));
    c.run_for(Duration::from_millis(10));
    c.lookup(
        d(2),
        1,
        LookupRequest::Revoke {
            key: "/svc/b".into(),
            version: EntryVersion {
                stamp: 4,
                provider: 7,
            },
            durability: Durability::Volatile,
        },
    );
    c.run_for(Duration::from_millis(1200));
    let ev = events(&c, 1);
    assert!(
        ev.iter().all(|(dev, _)| *dev == d(3)),
        "delivered at the origin"
    );
    let kinds: Vec<String> = ev
        .iter()
        .map(|(_, e)| match &e.event {
            WatchEvent::Sync { entries } => format!("sync{}", entries.len()),
            WatchEvent::Put { entry } => format!("put {}", entry.key),
            WatchEvent::Removed { key, cause } => format!("rm {key} {cause:?}"),
            WatchEvent::Alert { key, .. } => format!("alert {key}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "sync0",
            "put /svc/a",
            "put /svc/b",
            "rm /svc/b Revoked",
            "rm /svc/a Expired"
        ]
    );
    let seqs: Vec<u64> = ev.iter().map(|(_, e)| e.seq - ev[0].1.seq).collect();
    assert_eq!(seqs, [0, 1, 2, 3, 4], "consecutive");
    assert!(ev.iter().all(|(_, e)| e.leader.device == d(1)));
}

/// A new leader takes every subscription over with a Sync (the subscriber replaces its
/// view, so nothing is silently dropped); a subscriber that reports a position behind
/// the leader's gets a Sync too.
#[test]
fn a_new_leader_syncs_every_subscription_and_a_lagging_subscriber_is_resynced() {
    let mut c = settled(3, |_| {});
    c.lookup(
        d(2),
        1,
        publish(
            "/svc/a",
            b"1",
            1,
            Duration::from_secs(2),
            Durability::Volatile,
        ),
    );
    subscribe(&mut c, d(3), 5, Watch::Prefix("/svc".into()), None);
    c.run_for(Duration::from_millis(10));
    c.crash(d(1));
    c.run_for(Duration::from_millis(1000));
    let ev = events(&c, 5);
    let last = ev.last().unwrap().1.clone();
    assert_eq!(last.leader.device, d(2));
    assert!(
        matches!(&last.event, WatchEvent::Sync { entries } if entries.len() == 1),
        "{last:?}"
    );
    // The subscriber says it saw seq 0 of this leader while seq 1 went out long ago.
    let before = ev.len();
    c.run_for(Duration::from_millis(200));
    subscribe(
        &mut c,
        d(3),
        5,
        Watch::Prefix("/svc".into()),
        Some(SubPosition {
            leader: last.leader,
            seq: 0,
        }),
    );
    c.run_for(Duration::from_millis(10));
    let ev = events(&c, 5);
    assert_eq!(ev.len(), before + 1);
    assert!(matches!(
        ev.last().unwrap().1.event,
        WatchEvent::Sync { .. }
    ));
    // Up to date: a refresh brings nothing.
    let pos = SubPosition {
        leader: last.leader,
        seq: ev.last().unwrap().1.seq,
    };
    subscribe(&mut c, d(3), 5, Watch::Prefix("/svc".into()), Some(pos));
    c.run_for(Duration::from_millis(10));
    assert_eq!(events(&c, 5).len(), before + 1);
}

/// Alerts: "raise an alert if this information is not refreshed by" its deadline — once
/// per missed deadline, re-armed by the next refresh.
#[test]
fn an_alert_fires_once_when_its_key_is_not_refreshed_in_time() {
    let mut c = settled(3, |_| {});
    let i = Duration::from_millis(500);
    c.lookup(
        d(2),
        1,
        publish("/dev/sensor", b"21C", 1, i, Durability::Volatile),
    );
    subscribe(
        &mut c,
        d(2),
        9,
        Watch::Alert {
            key: "/dev/sensor".into(),
            within: Duration::from_millis(300),
        },
        None,
    );
    c.run_for(Duration::from_millis(250));
    c.lookup(
        d(2),
        1,
        publish("/dev/sensor", b"21C", 2, i, Durability::Volatile),
    );
    c.run_for(Duration::from_millis(250));
    assert!(events(&c, 9).is_empty(), "refreshed in time");
    c.run_for(Duration::from_millis(300));
    let ev = events(&c, 9);
    assert_eq!(ev.len(), 1);
    assert!(
        matches!(&ev[0].1.event, WatchEvent::Alert { key, silent_for } if key == "/dev/sensor" && *silent_for >= 300 * MS)
    );
    c.run_for(Duration::from_millis(500));
    assert_eq!(events(&c, 9).len(), 1, "once per missed deadline");
}

/// Meta-update (adaptivity case b): an entry whose value does not change for many
/// refreshes is asked to refresh less often; the provider learns it from the reply of
/// its next refresh through the same device.
#[test]
fn an_old_entry_gets_a_meta_update_on_its_next_refresh() {
    let mut c = settled(3, |s| s.adapt.stable_refreshes = 3);
    let i = Duration::from_millis(500);
    let mut last = None;
    for stamp in 1..=6 {
        let id = c.lookup(
            d(3),
            1,
            LookupRequest::Publish {
                key: "/svc/quiet".into(),
                value: b"same".to_vec(),
                version: EntryVersion { stamp, provider: 7 },
                interval: i,
                durability: Durability::Volatile,
                adapt: IntervalRange {
                    min: i,
                    max: Duration::from_secs(2),
                },
            },
        );
        c.run_for(Duration::from_millis(10));
        last = Some(answer(&c, id));
    }
    match last.unwrap() {
        Ok(LookupResponse::Published {
            acked: false,
            meta: Some(m),
        }) => {
            assert_eq!(m.interval, Duration::from_secs(1));
            assert_eq!(m.reason, policy::AdaptReason::Age);
        }
        other => panic!("{other:?}"),
    }
}

/// During an outage (no leader), a query through any device answers `NoLeader` after the
/// round-trip delay instead of hanging.
#[test]
fn a_query_with_no_leader_answers_no_leader_after_a_round_trip() {
    let mut c = cluster(3, |_| {});
    c.run_for(Duration::from_millis(10));
    let id = c.lookup(d(2), 1, LookupRequest::Get { key: "/x".into() });
    c.run_for(Duration::from_millis(99));
    assert!(!c.replies.contains_key(&id));
    c.run_for(Duration::from_millis(2));
    assert_eq!(answer(&c, id), Err(LookupError::NoLeader));
}

/// DESIGN §3: every device publishes its address, and each store's manager publishes
/// `store → (manager, epoch)` while it manages the store; the entry follows a failover
/// and the old one expires or is replaced. Chunks read it as a hint.
#[test]
fn managers_and_devices_publish_themselves_in_the_lookup_service() {
    let mut c = settled(3, |_| {});
    let key = crate::device::store_key(crate::StoreId(0));
    let v = get(&mut c, d(2), &key).expect("the store's manager is published");
    let (mgr, epoch) = crate::device::parse_store_entry(&v).expect("parses");
    assert!(c.devices[&mgr].manager_view(crate::StoreId(0)).is_some());
    for n in 1..=3 {
        assert_eq!(
            get(&mut c, d(1), &crate::device::device_key(d(n))),
            Some(format!("d{n}").into_bytes())
        );
    }
    c.crash(mgr);
    c.run_for(Duration::from_secs(10));
    let other = if mgr == d(1) { d(2) } else { d(1) };
    let v = get(&mut c, other, &key).expect("the new manager is published");
    let (mgr2, epoch2) = crate::device::parse_store_entry(&v).unwrap();
    assert_ne!(mgr2, mgr);
    assert!(epoch2 > epoch);
    assert_eq!(
        get(&mut c, other, &crate::device::device_key(mgr)),
        None,
        "the crashed device's entry expired"
    );
}

/// An alert registered before its key existed fires once for the registration; when the
/// key is later published and then expires unrefreshed, the deadline runs from its last
/// refresh and the alert fires again (it is not stuck on the registration it already
/// fired for).
#[test]
fn an_alert_fires_again_after_its_key_expired() {
    let mut c = settled(3, |_| {});
    let within = Duration::from_millis(800);
    subscribe(
        &mut c,
        d(2),
        11,
        Watch::Alert {
            key: "/dev/t".into(),
            within,
        },
        None,
    );
    c.run_for(Duration::from_millis(900));
    assert_eq!(events(&c, 11).len(), 1, "fired for the registration");
    let i = Duration::from_millis(200);
    c.lookup(d(2), 1, publish("/dev/t", b"1", 1, i, Durability::Volatile));
    let published = c.now;
    // Keep the subscription alive (1 s interval) without refreshing the key.
    c.run_for(Duration::from_millis(600));
    subscribe(
        &mut c,
        d(2),
        11,
        Watch::Alert {
            key: "/dev/t".into(),
            within,
        },
        None,
    );
    assert!(
        c.devices[&d(1)]
            .lookup()
            .data()
            .get("/dev/t")
            .is_none_or(|e| e.value.is_none()),
        "expired"
    );
    c.run_for(Duration::from_millis(300));
    let ev = events(&c, 11);
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert!(
        matches!(&ev[1].1.event, WatchEvent::Alert { silent_for, .. } if *silent_for >= within)
    );
    let fired_at = c
        .events
        .iter()
        .rev()
        .find(|(_, _, e)| e.sub == 11)
        .unwrap()
        .0;
    assert!(fired_at.saturating_since(published) < within + Duration::from_millis(50));
}

/// A subscriber that moved to another device re-registered there; the unsubscribe its
/// old device sends when the old stream ends does not drop the moved subscription.
#[test]
fn an_unsubscribe_from_a_former_origin_keeps_the_moved_subscription() {
    let mut c = settled(3, |_| {});
    subscribe(&mut c, d(3), 21, Watch::Prefix("/svc".into()), None);
    c.run_for(Duration::from_millis(10));
    subscribe(&mut c, d(2), 21, Watch::Prefix("/svc".into()), None);
    c.run_for(Duration::from_millis(10));
    let id = c.lookup(d(3), 1, LookupRequest::Unsubscribe { sub: 21 });
    c.run_for(Duration::from_millis(10));
    assert_eq!(answer(&c, id), Ok(LookupResponse::Unsubscribed));
    assert!(c.devices[&d(1)].lookup().data().subs().contains_key(&21));
    let id = c.lookup(d(2), 1, LookupRequest::Unsubscribe { sub: 21 });
    c.run_for(Duration::from_millis(10));
    assert_eq!(answer(&c, id), Ok(LookupResponse::Unsubscribed));
    assert!(!c.devices[&d(1)].lookup().data().subs().contains_key(&21));
}

/// A forwarded request that fails validation (a misbehaving peer: the origin validates
/// every request it multicasts) changes nothing at the receiving node.
#[test]
fn an_invalid_forwarded_request_is_ignored() {
    let mut c = settled(3, |s| s.max_value_bytes = 8);
    let now = c.now;
    let out = c.devices.get_mut(&d(1)).unwrap().handle(
        now,
        crate::io::Input::Message {
            from: d(2),
            msg: crate::msg::Msg::Lookup(LookupMsg::Forward {
                origin: d(2),
                client: crate::ClientId(1),
                req_id: 1,
                req: publish(
                    "/x",
                    &[1; 64],
                    1,
                    Duration::from_secs(60),
                    Durability::Persistent,
                ),
            }),
        },
    );
    assert!(
        !out.iter()
            .any(|o| matches!(o, Output::Send { .. } | Output::Persist(_))),
        "{out:?}"
    );
    assert!(c.devices[&d(1)].lookup().data().get("/x").is_none());
}

/// An unacknowledged update through a device that knows no active node (the service is
/// still starting) answers `NoLeader` instead of "sent": nobody would apply it.
#[test]
fn a_volatile_publish_with_no_active_node_answers_no_leader() {
    let mut c = cluster(3, |_| {});
    c.run_for(Duration::from_millis(10));
    let id = c.lookup(
        d(1),
        1,
        publish(
            "/early",
            b"1",
            1,
            Duration::from_secs(1),
            Durability::Volatile,
        ),
    );
    c.run_for(Duration::from_millis(1));
    assert_eq!(answer(&c, id), Err(LookupError::NoLeader));
    c.run_for(Duration::from_secs(8));
    let id = c.lookup(
        d(1),
        1,
        publish(
            "/early",
            b"1",
            2,
            Duration::from_secs(1),
            Durability::Volatile,
        ),
    );
    c.run_for(Duration::from_millis(1));
    assert!(matches!(
        answer(&c, id),
        Ok(LookupResponse::Published { acked: false, .. })
    ));
}
