//! Meta-updates through running nodes: seed 003's adaptivity ("The frequency of provider
//! updates can be tuned to suit system characteristics"), cases a, c and d, each driven by
//! requests to a settled cluster on the deterministic harness (case b:
//! `tests::an_old_entry_gets_a_meta_update_on_its_next_refresh`). The policy alone is
//! tested in [`super::policy`]; these show the leader sees the signal (queries,
//! subscriptions, its store's size), proposes the meta-update, and the provider hears it —
//! in the reply of its next refresh for a volatile entry (the origin answers at once, so
//! the leader's `Meta` message reaches the origin for the refresh after), in the
//! acknowledgement itself for a persistent one.

use super::policy::AdaptReason;
use super::tests::{answer, d, get, settled};
use super::*;
use crate::testkit::Cluster;
use std::time::Duration;

const MS: Duration = Duration::from_millis(1);

/// A refresh (a publish of the same value with a newer stamp) of `key` by provider 7
/// through `via`, accepting intervals in `range`; the reply after 10 ms.
fn refresh(
    c: &mut Cluster,
    via: DeviceId,
    key: &str,
    stamp: u64,
    interval: Duration,
    durability: Durability,
    range: (Duration, Duration),
) -> Result<LookupResponse, LookupError> {
    let id = c.lookup(
        via,
        1,
        LookupRequest::Publish {
            key: key.into(),
            value: b"same".to_vec(),
            version: EntryVersion { stamp, provider: 7 },
            interval,
            durability,
            adapt: IntervalRange {
                min: range.0,
                max: range.1,
            },
        },
    );
    c.run_for(10 * MS);
    answer(c, id)
}

/// The meta-update a publish's reply carries (panics on anything but `Published`).
fn meta_of(r: Result<LookupResponse, LookupError>) -> Option<Meta> {
    match r {
        Ok(LookupResponse::Published { meta, .. }) => meta,
        other => panic!("not a publish reply: {other:?}"),
    }
}

/// Seed 003 adaptivity (a): "If demand for a particular soft-state item increases, its
/// update frequency should stay high." Two entries, old by case b's measure (unchanged for
/// more refreshes than `stable_refreshes`), refreshed alike every 500 ms through d3: the
/// one clients query often through d2 keeps its interval (no meta-update), the other is
/// asked to slow down (b); once the queries stop for a demand window, the first is asked
/// to slow down too — the demand was what kept it fast.
#[test]
fn case_a_an_entry_in_demand_keeps_its_short_interval() {
    let mut c = settled(3, |s| {
        s.adapt.stable_refreshes = 3;
        s.adapt.demand_queries = 5;
        s.adapt.demand_window = Duration::from_secs(2);
    });
    let i = 500 * MS;
    let range = (i, Duration::from_secs(4));
    let v = Durability::Volatile;
    let mut stamp = 0;
    let mut both = |c: &mut Cluster| {
        stamp += 1;
        (
            refresh(c, d(3), "/svc/hot", stamp, i, v, range),
            refresh(c, d(3), "/svc/cold", stamp, i, v, range),
        )
    };
    let (hot, cold) = both(&mut c);
    assert!(hot.is_ok() && cold.is_ok(), "{hot:?} {cold:?}");
    for _ in 0..5 {
        assert!(get(&mut c, d(2), "/svc/hot").is_some());
    }
    let mut last = both(&mut c);
    for _ in 0..5 {
        last = both(&mut c);
    }
    assert_eq!(meta_of(last.0), None, "in demand: its interval stays");
    let cold = meta_of(last.1).expect("an old entry is asked to slow down");
    assert_eq!((cold.reason, cold.interval), (AdaptReason::Age, 2 * i));

    // No queries for a demand window (refreshed meanwhile, or it would expire).
    let mut quiet = None;
    for _ in 0..6 {
        c.run_for(400 * MS);
        quiet = Some(both(&mut c));
    }
    let hot = meta_of(quiet.unwrap().0).expect("demand gone: the age rule applies");
    assert_eq!((hot.reason, hot.interval), (AdaptReason::Age, 2 * i));
}

/// Seed 003 adaptivity (c): "On-demand, the update frequency of an item may be
/// increased." An entry refreshed every 2 s (its provider accepts 200 ms to 2 s) gets no
/// meta-update until a subscriber watches its prefix through d2; then the provider is asked
/// for the shortest interval it accepts, and once it refreshes at that interval it is asked
/// nothing more. A persistent entry hears it in the acknowledgement of its first refresh.
#[test]
fn case_c_a_subscriber_makes_the_provider_refresh_as_fast_as_it_accepts() {
    let mut c = settled(3, |_| {});
    let slow = Duration::from_secs(2);
    let fast = 200 * MS;
    let v = Durability::Volatile;
    for stamp in 1..=3 {
        let r = refresh(&mut c, d(3), "/dev/temp", stamp, slow, v, (fast, slow));
        assert_eq!(meta_of(r), None, "nobody watches it");
    }
    let p = Durability::Persistent;
    let r = refresh(&mut c, d(3), "/dev/cfg", 1, 60 * slow, p, (slow, 60 * slow));
    assert_eq!(meta_of(r), None);
    c.lookup(
        d(2),
        2,
        LookupRequest::Subscribe {
            sub: 41,
            watch: Watch::Prefix("/dev".into()),
            interval: Duration::from_secs(1),
            position: None,
        },
    );
    c.run_for(10 * MS);
    // Volatile: the leader's meta-update reaches d3 after the first refresh it judges.
    assert_eq!(
        meta_of(refresh(&mut c, d(3), "/dev/temp", 4, slow, v, (fast, slow))),
        None
    );
    let m = meta_of(refresh(&mut c, d(3), "/dev/temp", 5, slow, v, (fast, slow)))
        .expect("watched: asked to refresh faster");
    assert_eq!(
        (m.reason, m.interval, m.durability),
        (AdaptReason::OnDemand, fast, Durability::Volatile)
    );
    // The provider follows: nothing more to ask.
    for stamp in 6..=7 {
        let r = refresh(&mut c, d(3), "/dev/temp", stamp, fast, v, (fast, slow));
        assert_eq!(meta_of(r), None, "refreshing as asked");
    }
    // Persistent: in the leader's acknowledgement.
    match refresh(&mut c, d(3), "/dev/cfg", 2, 60 * slow, p, (slow, 60 * slow)) {
        Ok(LookupResponse::Published {
            acked: true,
            meta: Some(m),
        }) => assert_eq!(
            (m.reason, m.interval, m.durability),
            (AdaptReason::OnDemand, slow, Durability::Persistent)
        ),
        other => panic!("{other:?}"),
    }
}

/// Seed 003 adaptivity (d): "If SSS load increases, update frequency of a group of items
/// may be decreased" — and "when a new update frequency is negotiated, the lookup service
/// protocol adapts to give acknowledgements if need be". A group of three volatile
/// entries gets no meta-update while the leader keeps few entries; once it keeps more
/// than `load_entries`, each is asked to refresh half as often; followed past
/// MAX_VOLATILE_REFRESH_INTERVAL, the next one makes them persistent (acknowledged), and
/// the leader acknowledges the persistent refresh with the next doubling.
#[test]
fn case_d_load_lengthens_a_groups_intervals_until_they_are_acknowledged() {
    let mut c = settled(3, |s| s.adapt.load_entries = 12);
    let leader = c.devices[&d(1)].lookup();
    assert!(leader.is_leader());
    assert!(
        leader.data().live_entries() + 3 <= 12,
        "the settled cluster's own entries leave room"
    );
    let group = ["/grp/a", "/grp/b", "/grp/c"];
    let range = (Duration::from_secs(1), Duration::from_secs(8));
    let v = Durability::Volatile;
    let mut stamp = 0;
    let mut refresh_group = |c: &mut Cluster, interval: Duration, durability: Durability| {
        stamp += 1;
        (group.iter())
            .map(|k| refresh(c, d(3), k, stamp, interval, durability, range))
            .collect::<Vec<_>>()
    };
    for _ in 0..2 {
        for r in refresh_group(&mut c, Duration::from_secs(1), v) {
            assert_eq!(meta_of(r), None, "not loaded");
        }
    }
    // Load: ten more entries (persistent, so they stay while the test runs).
    for n in 0..10 {
        let key = format!("/load/{n}");
        let p = Durability::Persistent;
        let long = Duration::from_secs(60);
        refresh(&mut c, d(2), &key, 1, long, p, (long, long)).unwrap();
    }
    // (The leader's meta-update reaches d3 after this refresh.)
    for r in refresh_group(&mut c, Duration::from_secs(1), v) {
        assert_eq!(meta_of(r), None);
    }
    for r in refresh_group(&mut c, Duration::from_secs(1), v) {
        let m = meta_of(r).expect("loaded: asked to slow down");
        assert_eq!(
            (m.reason, m.interval, m.durability),
            (
                AdaptReason::Load,
                Duration::from_secs(2),
                Durability::Volatile
            )
        );
    }
    // Followed: 2 s is still volatile; the next doubling, 4 s, is past MVRI (2 s).
    for r in refresh_group(&mut c, Duration::from_secs(2), v) {
        assert_eq!(meta_of(r), None, "refreshing as asked");
    }
    for r in refresh_group(&mut c, Duration::from_secs(2), v) {
        let m = meta_of(r).expect("still loaded");
        assert_eq!(
            (m.reason, m.interval, m.durability),
            (
                AdaptReason::Load,
                Duration::from_secs(4),
                Durability::Persistent
            )
        );
    }
    let p = Durability::Persistent;
    for r in refresh_group(&mut c, Duration::from_secs(4), p) {
        match r {
            Ok(LookupResponse::Published {
                acked: true,
                meta: Some(m),
            }) => assert_eq!(
                (m.reason, m.interval),
                (AdaptReason::Load, Duration::from_secs(8))
            ),
            other => panic!("a persistent refresh is acknowledged: {other:?}"),
        }
    }
    for r in refresh_group(&mut c, Duration::from_secs(8), p) {
        assert!(
            matches!(
                r,
                Ok(LookupResponse::Published {
                    acked: true,
                    meta: None
                })
            ),
            "at the longest interval the provider accepts: {r:?}"
        );
    }
}
