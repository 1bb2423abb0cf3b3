//! Regression tests for lookup bugs the simulator's lookup world found (each names the
//! seed-003 rule it checks and fails without its fix), kept beside the scenario tests
//! instead of at the end of the machine's files.

mod sync_seq_tests {
    use crate::DeviceId;
    use crate::lookup::*;
    use crate::testkit::Cluster;
    use std::time::Duration;

    // Seed 003 subscriptions, found by the simulator's lookup world: a `Sync` used to
    // restart the sequence at 1, so a subscriber whose Sync was lost took the next Put
    // (seq 2, after a 3 it had) for an old one, and later applied events on a view that
    // lacked the Sync's state. A Sync now takes the next number.
    #[test]
    fn a_sync_continues_the_subscription_sequence() {
        let mut c = Cluster::with(2, 1, |_| {});
        c.run_for(Duration::from_secs(8));
        let subscribe = |c: &mut Cluster| {
            let req = LookupRequest::Subscribe {
                sub: 7,
                watch: Watch::Prefix("/a".into()),
                interval: Duration::from_secs(1),
                position: None,
            };
            c.lookup(DeviceId(1), 1, req);
            c.run_for(Duration::from_millis(50));
        };
        subscribe(&mut c);
        let publish = LookupRequest::Publish {
            key: "/a/x".into(),
            value: b"v1".to_vec(),
            version: EntryVersion {
                stamp: 1,
                provider: 1,
            },
            interval: Duration::from_secs(1),
            durability: Durability::Volatile,
            adapt: IntervalRange::fixed(Duration::from_secs(1)),
        };
        c.lookup(DeviceId(1), 2, publish);
        c.run_for(Duration::from_millis(50));
        subscribe(&mut c);
        let seqs: Vec<(u64, bool)> = (c.events.iter())
            .filter(|(_, _, e)| e.sub == 7)
            .map(|(_, _, e)| (e.seq, matches!(e.event, WatchEvent::Sync { .. })))
            .collect();
        let first = seqs[0].0;
        let seqs: Vec<(u64, bool)> = seqs.iter().map(|(s, y)| (s - first, *y)).collect();
        assert_eq!(seqs, vec![(0, true), (1, false), (2, true)]);
    }

    // The same, for a subscription registered anew under the same leader (it lapsed
    // during a partition, say): its sequence starts above every number used before,
    // so a subscriber that misses the new Sync sees a gap (found by the simulator's
    // lookup world, rare profile: a Put numbered 2 after a 7 it had).
    #[test]
    fn a_subscription_registered_anew_does_not_reuse_sequence_numbers() {
        let mut c = Cluster::with(2, 1, |_| {});
        c.run_for(Duration::from_secs(8));
        let subscribe = |c: &mut Cluster| {
            let req = LookupRequest::Subscribe {
                sub: 8,
                watch: Watch::Prefix("/a".into()),
                interval: Duration::from_secs(1),
                position: None,
            };
            c.lookup(DeviceId(1), 1, req);
            c.run_for(Duration::from_millis(50));
        };
        subscribe(&mut c);
        // Unrefreshed, it lapses after two intervals and a round trip.
        c.run_for(Duration::from_secs(3));
        subscribe(&mut c);
        let seqs: Vec<u64> = (c.events.iter())
            .filter(|(_, _, e)| e.sub == 8)
            .map(|(_, _, e)| e.seq)
            .collect();
        assert_eq!(seqs.len(), 2, "{seqs:?}");
        assert!(seqs[1] > seqs[0], "{seqs:?}");
    }
}

mod restore_tests {
    use crate::DeviceId;
    use crate::io::request::Response;
    use crate::lookup::*;
    use crate::testkit::Cluster;
    use std::time::Duration;

    fn publish(c: &mut Cluster, via: u64, interval: Duration) {
        let req = LookupRequest::Publish {
            key: "/a/x".into(),
            value: b"v1".to_vec(),
            version: EntryVersion {
                stamp: 1,
                provider: 1,
            },
            interval,
            durability: Durability::Persistent,
            adapt: IntervalRange::fixed(interval),
        };
        let r = c.lookup(DeviceId(via), 1, req);
        c.run_for(Duration::from_millis(50));
        assert!(matches!(
            c.replies.get(&r),
            Some(Ok(Response::Lookup(LookupResponse::Published {
                acked: true,
                ..
            })))
        ));
    }

    fn get(c: &mut Cluster, via: u64) -> Option<Vec<u8>> {
        let r = c.lookup(DeviceId(via), 2, LookupRequest::Get { key: "/a/x".into() });
        c.run_for(Duration::from_millis(50));
        match c.replies.get(&r) {
            Some(Ok(Response::Lookup(LookupResponse::Entry { entry, .. }))) => {
                entry.as_ref().map(|e| e.value.clone())
            }
            other => panic!("{other:?}"),
        }
    }

    // Seed 003 soft state, found by the simulator's lookup world: a node down longer than
    // an entry's lifetime used to restore it from disk with a fresh lifetime and hand it
    // back to the leader in the Ack's anti-entropy, so an entry whose provider had died
    // was answered again seconds after it expired everywhere.
    #[test]
    fn a_node_back_from_a_long_crash_does_not_bring_expired_entries_back() {
        let mut c = Cluster::with(3, 1, |_| {});
        c.run_for(Duration::from_secs(8));
        publish(&mut c, 1, Duration::from_secs(1));
        c.crash(DeviceId(3));
        c.run_for(Duration::from_secs(5));
        assert_eq!(get(&mut c, 1), None, "expired at the live nodes");
        c.restart(DeviceId(3));
        c.run_for(Duration::from_millis(500));
        assert_eq!(
            get(&mut c, 1),
            None,
            "not brought back by the rebooted node"
        );
        assert!(
            c.disks[&DeviceId(3)].lookup.is_empty(),
            "gone from its disk"
        );
    }

    // Seed 003: "all low frequency state be persisted" so that it survives a long power
    // outage: when no leader answers a rebooted node (every node was down), the entries
    // it booted with live a fresh lifetime, though theirs ended during the outage.
    #[test]
    fn after_a_full_outage_restored_entries_live_a_fresh_lifetime() {
        let mut c = Cluster::with(3, 1, |_| {});
        c.run_for(Duration::from_secs(8));
        // Lifetime: 2 × 10 s + a round trip; the outage lasts longer.
        publish(&mut c, 1, Duration::from_secs(10));
        for d in 1..=3 {
            c.crash(DeviceId(d));
        }
        c.run_for(Duration::from_secs(25));
        for d in 1..=3 {
            c.restart(DeviceId(d));
        }
        c.run_for(Duration::from_secs(6));
        let leader = (c.devices.iter())
            .find(|(_, d)| d.lookup().is_leader())
            .map(|(id, _)| id.0)
            .expect("a leader");
        assert_eq!(get(&mut c, leader), Some(b"v1".to_vec()));
    }
}

mod merge_notify_tests {
    use crate::DeviceId;
    use crate::io::Input;
    use crate::lookup::*;
    use crate::msg::Msg;
    use crate::testkit::Cluster;
    use std::time::Duration;

    // Seed 003 subscriptions, found by the simulator's lookup world after a full restart:
    // the new leader synced its subscribers at once, then the other nodes' persistent
    // stores (anti-entropy) brought it entries it lacked, silently — a subscriber never
    // learned of them. A leader announces what a merge changes.
    #[test]
    fn a_leader_announces_what_a_merge_brings() {
        let mut c = Cluster::with(2, 1, |_| {});
        c.run_for(Duration::from_secs(8));
        let (leader, other) = match c.devices[&DeviceId(1)].lookup().is_leader() {
            true => (DeviceId(1), DeviceId(2)),
            false => (DeviceId(2), DeviceId(1)),
        };
        let sub = LookupRequest::Subscribe {
            sub: 9,
            watch: Watch::Prefix("/a".into()),
            interval: Duration::from_secs(1),
            position: None,
        };
        c.lookup(leader, 1, sub);
        c.run_for(Duration::from_millis(20));
        let now = c.now;
        let entry = Entry {
            key: "/a/y".into(),
            value: Some(b"v1".to_vec()),
            version: EntryVersion {
                stamp: 1,
                provider: 1,
            },
            interval: Duration::from_secs(5),
            durability: Durability::Persistent,
            adapt: IntervalRange::fixed(Duration::from_secs(5)),
            deadline: now + Duration::from_secs(10),
            refreshed: now,
            changed: now,
            stable: 0,
        };
        let msg = Msg::Lookup(LookupMsg::Merge {
            persistent: vec![entry],
        });
        c.input(leader, Input::Message { from: other, msg });
        let puts: Vec<String> = (c.events.iter())
            .filter_map(|(_, _, e)| match &e.event {
                WatchEvent::Put { entry } if e.sub == 9 => Some(entry.key.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(puts, vec!["/a/y".to_string()]);
    }

    // Found by the simulator's lookup world after a full restart: a node got a version
    // from a node still in its Join() (not yet restored with a fresh lifetime) and kept
    // that copy's deadline when the revived copy came, so it expired the entry while
    // every other node kept it. A merge of the same version takes the later deadline.
    #[test]
    fn a_merge_of_the_same_version_keeps_the_later_deadline() {
        let mut c = Cluster::with(2, 1, |_| {});
        c.run_for(Duration::from_secs(8));
        let (leader, other) = match c.devices[&DeviceId(1)].lookup().is_leader() {
            true => (DeviceId(1), DeviceId(2)),
            false => (DeviceId(2), DeviceId(1)),
        };
        let now = c.now;
        let entry = |deadline| Entry {
            key: "/a/y".into(),
            value: Some(b"v1".to_vec()),
            version: EntryVersion {
                stamp: 1,
                provider: 1,
            },
            interval: Duration::from_secs(1),
            durability: Durability::Persistent,
            adapt: IntervalRange::fixed(Duration::from_secs(1)),
            deadline,
            refreshed: now,
            changed: now,
            stable: 0,
        };
        for deadline in [now + Duration::from_secs(2), now + Duration::from_secs(20)] {
            let msg = Msg::Lookup(LookupMsg::Merge {
                // Entries travel with times relative to the sender's clock.
                persistent: crate::lookup::to_wire(vec![entry(deadline)], now),
            });
            c.input(leader, Input::Message { from: other, msg });
        }
        c.run_for(Duration::from_secs(5));
        let kept = c.devices[&leader].lookup().data().get("/a/y").cloned();
        assert_eq!(
            kept.map(|e| e.deadline),
            Some(now + Duration::from_secs(20))
        );
    }
}

mod persistent_lifetime_tests {
    use crate::DeviceId;
    use crate::io::request::Response;
    use crate::lookup::*;
    use crate::testkit::Cluster;
    use std::time::Duration;

    fn get(c: &mut Cluster, via: DeviceId) -> bool {
        let r = c.lookup(via, 2, LookupRequest::Get { key: "/a/p".into() });
        c.run_for(Duration::from_millis(10));
        match c.replies.get(&r) {
            Some(Ok(Response::Lookup(LookupResponse::Entry { entry, .. }))) => entry.is_some(),
            other => panic!("{other:?}"),
        }
    }

    // Seed 003: "maximum staleness of low-frequency information is
    // Max_Persistent_Refresh_Interval + 3 SS-heartbeat-interval + Θ + RTT + δ". Found by
    // the simulator's lookup world: persistent entries lived two intervals like volatile
    // ones, so a provider that died right after a refresh was answered for up to an
    // interval past that bound. Acknowledged refreshes need no lost one masked: a
    // persistent entry lives its interval plus a failover, a retry and two round trips.
    #[test]
    fn a_persistent_entry_lives_its_interval_plus_a_failover_and_a_retry() {
        let mut c = Cluster::with(2, 1, |_| {});
        c.run_for(Duration::from_secs(8));
        let leader = match c.devices[&DeviceId(1)].lookup().is_leader() {
            true => DeviceId(1),
            false => DeviceId(2),
        };
        let s = c.configs[&leader].lookup.clone();
        let interval = Duration::from_secs(5);
        let req = LookupRequest::Publish {
            key: "/a/p".into(),
            value: b"v".to_vec(),
            version: EntryVersion {
                stamp: 1,
                provider: 1,
            },
            interval,
            durability: Durability::Persistent,
            adapt: IntervalRange::fixed(interval),
        };
        c.lookup(leader, 1, req);
        let life =
            interval + s.heartbeat_interval * 3 + s.max_retry_interval + s.roundtrip_delay * 2;
        assert_eq!(s.lifetime(interval, Durability::Persistent), life);
        c.run_for(life - Duration::from_millis(100));
        assert!(get(&mut c, leader), "alive within its lifetime");
        c.run_for(Duration::from_millis(200));
        assert!(
            !get(&mut c, leader),
            "gone after it, not two intervals later"
        );
    }
}

mod multicast_tests {
    use crate::DeviceId;
    use crate::lookup::*;
    use crate::testkit::Cluster;
    use std::time::Duration;

    // Seed 003's provider multicasts to every node. Found by the simulator's lookup world
    // (a power outage, then refreshes through rebooted devices): an origin forwarded
    // requests only to the nodes its soft-state store showed up, which right after a boot
    // is none, so a volatile refresh it accepted reached no node and the entry expired at
    // the leader while its provider was refreshing it.
    #[test]
    fn a_device_that_just_booted_forwards_updates_to_every_node() {
        let mut c = Cluster::with(3, 1, |_| {});
        c.run_for(Duration::from_secs(8));
        c.crash(DeviceId(3));
        c.run_for(Duration::from_millis(100));
        c.restart(DeviceId(3));
        let publish = LookupRequest::Publish {
            key: "/a/x".into(),
            value: b"v1".to_vec(),
            version: EntryVersion {
                stamp: 1,
                provider: 1,
            },
            interval: Duration::from_secs(1),
            durability: Durability::Volatile,
            adapt: IntervalRange::fixed(Duration::from_secs(1)),
        };
        c.lookup(DeviceId(3), 1, publish);
        c.run_for(Duration::from_millis(20));
        let get = c.lookup(DeviceId(1), 2, LookupRequest::Get { key: "/a/x".into() });
        c.run_for(Duration::from_millis(20));
        let got = match c.replies.get(&get) {
            Some(Ok(crate::io::request::Response::Lookup(LookupResponse::Entry {
                entry, ..
            }))) => entry.as_ref().map(|e| e.value.clone()),
            other => panic!("{other:?}"),
        };
        assert_eq!(got, Some(b"v1".to_vec()));
    }
}

mod merge_request_tests {
    use crate::DeviceId;
    use crate::io::request::Response;
    use crate::lookup::*;
    use crate::testkit::Cluster;
    use std::time::Duration;

    // Seed 003: "all low frequency state be persisted" to survive a long power outage.
    // Found by the simulator's lookup world (a full restart): the first node to lead after
    // the outage had been passive, lacked an acknowledged entry that only another node
    // kept, and answered without it until that node saw the new leader and sent its store.
    // A node that becomes active without a leader now asks every node for what it lacks
    // during its warm-up.
    #[test]
    fn after_a_full_outage_the_first_leader_has_every_nodes_persistent_entries() {
        let mut c = Cluster::with(3, 1, |_| {});
        c.run_for(Duration::from_secs(8));
        c.crash(DeviceId(1));
        c.crash(DeviceId(2));
        c.run_for(Duration::from_secs(2));
        assert!(c.devices[&DeviceId(3)].lookup().is_leader());
        let interval = Duration::from_secs(10);
        let req = LookupRequest::Publish {
            key: "/a/z".into(),
            value: b"v".to_vec(),
            version: EntryVersion {
                stamp: 1,
                provider: 1,
            },
            interval,
            durability: Durability::Persistent,
            adapt: IntervalRange::fixed(interval),
        };
        c.lookup(DeviceId(3), 1, req);
        c.run_for(Duration::from_millis(10));
        c.crash(DeviceId(3));
        c.run_for(Duration::from_secs(1));
        for d in 1..=3 {
            c.restart(DeviceId(d));
        }
        // The moment a leader answers, it has the entry.
        let leader = loop {
            c.run_for(Duration::from_millis(1));
            let l = (c.devices.iter()).find(|(_, d)| d.lookup().is_leader());
            if let Some((id, _)) = l {
                break *id;
            }
        };
        let r = c.lookup(leader, 2, LookupRequest::Get { key: "/a/z".into() });
        let got = match c.replies.get(&r) {
            Some(Ok(Response::Lookup(LookupResponse::Entry { entry, .. }))) => entry.clone(),
            other => panic!("{other:?}"),
        };
        assert_ne!(
            leader,
            DeviceId(3),
            "the test wants a leader that lacked the entry"
        );
        assert_eq!(got.map(|e| e.value), Some(b"v".to_vec()));
    }
}

mod stabilise_tests {
    use crate::DeviceId;
    use crate::lookup::node::Corruption;
    use crate::lookup::*;
    use crate::testkit::Cluster;
    use std::time::Duration;

    // Seed 003 self-stabilisation, I2a's first conjunct (st.j = passive ⇔ age.j = ∞).
    // Found by the simulator's lookup world (rare profile): a node corrupted to active
    // with an infinite age stayed so for good — in no soft-state store, it never led nor
    // stepped down. The maintainer (run at least every LONG_TIMEOUT) makes it passive.
    #[test]
    fn an_active_node_with_an_infinite_age_becomes_passive() {
        let mut c = Cluster::with(3, 1, |_| {});
        c.run_for(Duration::from_secs(8));
        let corrupt = Corruption::Flags {
            active: true,
            leader: false,
            start: None,
        };
        let d = c.devices.get_mut(&DeviceId(3)).expect("d3");
        d.lookup_mut().corrupt(corrupt);
        let lt = c.configs[&DeviceId(3)].lookup.long_timeout;
        c.run_for(lt + Duration::from_millis(100));
        let v = c.devices[&DeviceId(3)].lookup().view();
        let passive = matches!(v.state, NodeState::Passive | NodeState::Joining);
        let active = matches!(v.state, NodeState::Active | NodeState::WarmingUp);
        assert!(
            (passive && v.start.is_none()) || (active && v.start.is_some()),
            "{v:?}"
        );
    }
}

mod partition_tests {
    use crate::DeviceId;
    use crate::io::request::Response;
    use crate::lookup::*;
    use crate::testkit::Cluster;
    use std::collections::BTreeSet;
    use std::time::Duration;

    fn publish(c: &mut Cluster, via: u64, value: &[u8], stamp: u64) -> bool {
        let req = LookupRequest::Publish {
            key: "/p/x".into(),
            value: value.to_vec(),
            version: EntryVersion { stamp, provider: 1 },
            interval: Duration::from_secs(30),
            durability: Durability::Persistent,
            adapt: IntervalRange::fixed(Duration::from_secs(30)),
        };
        let r = c.lookup(DeviceId(via), 1, req);
        c.run_for(Duration::from_millis(200));
        matches!(
            c.replies.get(&r),
            Some(Ok(Response::Lookup(LookupResponse::Published {
                acked: true,
                ..
            })))
        )
    }

    fn get(c: &mut Cluster, via: u64) -> Option<Vec<u8>> {
        let r = c.lookup(DeviceId(via), 2, LookupRequest::Get { key: "/p/x".into() });
        c.run_for(Duration::from_millis(200));
        match c.replies.get(&r) {
            Some(Ok(Response::Lookup(LookupResponse::Entry { entry, .. }))) => {
                entry.as_ref().map(|e| e.value.clone())
            }
            other => panic!("{other:?}"),
        }
    }

    fn leaders(c: &Cluster) -> Vec<DeviceId> {
        (c.devices.iter())
            .filter(|(_, d)| d.lookup().is_leader())
            .map(|(id, _)| *id)
            .collect()
    }

    // Seed 003 persistent entries ("acknowledged by the leader, kept in stable storage"),
    // found by `tenure chaos`: the leader, cut off alone, kept leading its side; the other
    // side's new leader acknowledged a newer value; after the heal the old leader, the
    // oldest active node, led again and answered the value from before the partition.
    // The nodes that see a leader come back hand it their persistent stores, and an
    // acknowledged update is never answered older.
    //
    // The old leader asks each node that comes back for its store and holds queries
    // until it has them; each node also sends its store to every new leader in its view,
    // again with its heartbeats until answered. The first store each node sends the old
    // leader is lost here (as when a connection broken by the partition takes it down).
    #[test]
    fn an_update_acknowledged_while_the_leader_was_cut_off_survives_the_heal() {
        assert_eq!(cut_off_leader_after_heal(false), None);
    }

    /// Planted: without the old leader's pull, it answers the value from before the
    /// partition until a store reaches it.
    #[test]
    fn without_the_pull_the_old_leader_answers_an_older_value() {
        let stale = cut_off_leader_after_heal(true);
        assert_eq!(stale, Some(b"v1".to_vec()));
    }

    /// The first answer after the heal that is not `v2`, if any.
    fn cut_off_leader_after_heal(no_pull: bool) -> Option<Vec<u8>> {
        let mut c = Cluster::with(5, 1, |cfg| cfg.planted.lookup_no_pull = no_pull);
        c.run_for(Duration::from_secs(10));
        let old = leaders(&c);
        assert_eq!(old.len(), 1, "{old:?}");
        let old = old[0];
        let via = (1..=5).find(|d| DeviceId(*d) != old).expect("another");
        assert!(publish(&mut c, via, b"v1", 1));
        let rest: BTreeSet<DeviceId> = (1..=5).map(DeviceId).filter(|d| *d != old).collect();
        c.groups = vec![BTreeSet::from([old]), rest];
        c.run_for(Duration::from_secs(10));
        let new = leaders(&c);
        assert!(new.len() == 2 && new.contains(&old), "{new:?}");
        assert!(
            publish(&mut c, via, b"v2", 2),
            "acknowledged on the majority side"
        );
        let mut lost = BTreeSet::new();
        c.drop = Some(Box::new(move |from, to, msg| {
            let store = matches!(
                msg,
                crate::msg::Msg::Lookup(LookupMsg::Merge { .. } | LookupMsg::MergeRequest { .. })
            );
            to == old && store && lost.insert(from)
        }));
        c.groups.clear();
        // Queries from every device, through the heal.
        for _ in 0..100 {
            c.run_for(Duration::from_millis(50));
            if leaders(&c).len() == 1 {
                for d in 1..=5 {
                    let v = get(&mut c, d);
                    if v != Some(b"v2".to_vec()) {
                        return v;
                    }
                }
            }
        }
        assert_eq!(leaders(&c).len(), 1);
        None
    }
}
