//! The client library's lookup API (`tenure_client::lookup`) against in-process devices:
//! a publish handle keeps its entry alive and revokes it when dropped; a persistent
//! publish is acknowledged and revoked with an acknowledgement; a watch reports puts,
//! revocations and expiries; across the lookup leader's crash a watch on the crashed
//! device reconnects elsewhere and a watch on a survivor gets the new leader's sync, and
//! both report the entry revoked during the outage (nothing silently dropped); queries
//! during the outage are retried until a leader answers; alerts fire on silence.

use crate::common::*;
use std::time::{Duration, Instant};
use tenure_client::lookup::{PublishOptions, Removal, WatchChange, WatchOptions, Watcher};
use tenure_client::{Client, ClientOptions};

fn lookup_cluster(n: u64) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let mut cfgs = configs(n, dir.path());
    for c in &mut cfgs {
        c.lookup.heartbeat_interval = Duration::from_millis(100);
        c.lookup.roundtrip_delay = Duration::from_millis(100);
        c.lookup.max_volatile_refresh_interval = Duration::from_secs(1);
        c.lookup.min_refresh_interval = Duration::from_millis(50);
        c.lookup.long_timeout = Duration::from_secs(1);
    }
    let nodes = cfgs.iter().cloned().map(Node::start).collect();
    Cluster {
        _dir: dir,
        nodes,
        cfgs,
    }
}

/// A client whose first endpoint is device index `first`.
fn client_at(cluster: &Cluster, first: usize) -> Client {
    let mut eps = cluster.endpoints();
    eps.rotate_left(first);
    let opts = ClientOptions {
        request_timeout: Duration::from_secs(3),
        retry_deadline: Duration::from_secs(20),
        attempt_timeout: Duration::from_millis(500),
        ..Default::default()
    };
    Client::with_options(eps, opts).unwrap()
}

/// Wait (bounded) until some lookup leader answers through `c`.
async fn wait_ready(c: &Client) {
    let started = Instant::now();
    while c.get("/ready").await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no lookup leader"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The device index of the agreed lookup leader (bounded wait).
async fn leader_index(cluster: &Cluster, c: &Client) -> usize {
    let started = Instant::now();
    loop {
        let all = c.node_status_all().await;
        let views: Vec<_> = all.into_iter().filter_map(|(_, r)| r.ok()).collect();
        let leaders: Vec<u64> = views
            .iter()
            .filter(|v| v.state == "Leader")
            .map(|v| v.device)
            .collect();
        if views.len() == cluster.nodes.len()
            && leaders.len() == 1
            && views.iter().all(|v| v.leader == Some(leaders[0]))
        {
            return cluster
                .cfgs
                .iter()
                .position(|c| c.id == leaders[0])
                .unwrap();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no agreed leader: {views:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The next change of a watch (bounded).
async fn next(w: &mut Watcher, limit: Duration) -> WatchChange {
    tokio::time::timeout(limit, w.next_change())
        .await
        .expect("a change in time")
        .expect("the watch is running")
        .expect("no error")
}

/// Changes until `pred` holds for one (bounded); returns that one.
async fn until(
    w: &mut Watcher,
    limit: Duration,
    pred: impl Fn(&WatchChange) -> bool,
) -> WatchChange {
    let started = Instant::now();
    loop {
        let left = limit.saturating_sub(started.elapsed());
        let c = next(w, left).await;
        if pred(&c) {
            return c;
        }
        eprintln!("(skipped {c:?})");
    }
}

fn is_put(key: &'static str) -> impl Fn(&WatchChange) -> bool {
    move |c| matches!(c, WatchChange::Put(e) if e.key == key)
}

fn is_removed(key: &'static str) -> impl Fn(&WatchChange) -> bool {
    move |c| matches!(c, WatchChange::Removed { key: k, .. } if k == key)
}

#[test]
fn a_publish_handle_keeps_its_entry_and_revokes_it_when_dropped() {
    let _turn = turn!();
    let cluster = lookup_cluster(3);
    rt().block_on(async {
        let provider = client_at(&cluster, 0);
        let reader = client_at(&cluster, 1);
        wait_ready(&reader).await;
        let mut w = reader.watch("/svc").unwrap();
        let interval = Duration::from_millis(200);
        let h = provider
            .publish("/svc/api", "10.0.0.1:80", PublishOptions::volatile(interval))
            .await
            .unwrap();
        let first = h.version();
        let c = until(&mut w, Duration::from_secs(10), is_put("/svc/api")).await;
        let WatchChange::Put(e) = c else { unreachable!() };
        assert_eq!(e.value, b"10.0.0.1:80");
        // Alive well past its lifetime (2 x 200 ms + 100 ms): the handle refreshes it.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let e = reader.get("/svc/api").await.unwrap().expect("kept alive");
        assert!(e.version > first, "refreshed with newer versions");
        assert!(h.counts().0 >= 4, "{:?}", h.counts());
        assert!(h.healthy());
        // A new value goes out at once and reaches the watch.
        h.update("10.0.0.2:80");
        let c = until(&mut w, Duration::from_secs(5), is_put("/svc/api")).await;
        assert!(matches!(c, WatchChange::Put(ref e) if e.value == b"10.0.0.2:80"), "{c:?}");
        // Dropped: revoked at once, long before it would expire.
        let dropped = Instant::now();
        drop(h);
        let c = until(&mut w, Duration::from_secs(5), is_removed("/svc/api")).await;
        assert_eq!(
            c,
            WatchChange::Removed {
                key: "/svc/api".into(),
                cause: Removal::Revoked
            }
        );
        eprintln!("revoked on drop, seen by the watch after {:?}", dropped.elapsed());
        assert_eq!(reader.get("/svc/api").await.unwrap(), None);
        // Abandoned: not revoked; it expires and the watch says so.
        let h = provider
            .publish("/svc/gone", "x", PublishOptions::volatile(interval))
            .await
            .unwrap();
        until(&mut w, Duration::from_secs(5), is_put("/svc/gone")).await;
        let stopped = Instant::now();
        h.abandon().await;
        let c = until(&mut w, Duration::from_secs(5), is_removed("/svc/gone")).await;
        assert_eq!(
            c,
            WatchChange::Removed {
                key: "/svc/gone".into(),
                cause: Removal::Expired
            }
        );
        eprintln!(
            "abandoned volatile entry (interval {interval:?}) reported expired {:?} after its last refresh",
            stopped.elapsed()
        );
    });
}

#[test]
fn a_persistent_publish_is_acknowledged_and_revoked_with_an_acknowledgement() {
    let _turn = turn!();
    let cluster = lookup_cluster(3);
    rt().block_on(async {
        let c = client_at(&cluster, 2);
        wait_ready(&c).await;
        let h = c
            .publish(
                "/cfg/primary",
                "d3",
                PublishOptions::persistent(Duration::from_secs(30)),
            )
            .await
            .unwrap();
        assert!(h.healthy(), "acknowledged before publish returned");
        let e = c.get("/cfg/primary").await.unwrap().unwrap();
        assert_eq!(e.durability, tenure_client::lookup::Durability::Persistent);
        h.revoke().await.unwrap();
        assert_eq!(c.get("/cfg/primary").await.unwrap(), None);
        // Revoke of someone else's entry, then bad input, typed.
        let h = c
            .publish(
                "/cfg/other",
                "x",
                PublishOptions::volatile(Duration::from_millis(500)),
            )
            .await
            .unwrap();
        h.abandon().await;
        c.revoke("/cfg/other").await.unwrap();
        assert_eq!(c.get("/cfg/other").await.unwrap(), None);
        let e = c.get("no-slash").await.unwrap_err();
        assert!(
            matches!(
                e,
                tenure_client::Error::Lookup(tenure_client::lookup::LookupError::InvalidKey(_))
            ),
            "{e}"
        );
        let e = c
            .publish(
                "/cfg/big",
                vec![0u8; 100_000],
                PublishOptions::volatile(Duration::from_secs(1)),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(
                e,
                tenure_client::Error::Lookup(tenure_client::lookup::LookupError::TooLarge {
                    len: 100_000,
                    ..
                })
            ),
            "{e}"
        );
        let e = c
            .publish(
                "/cfg/slow",
                "x",
                PublishOptions::volatile(Duration::from_secs(30)),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(
                e,
                tenure_client::Error::Lookup(
                    tenure_client::lookup::LookupError::BadInterval { .. }
                )
            ),
            "{e}"
        );
    });
}

#[test]
fn watches_report_what_changed_across_the_leaders_crash() {
    let _turn = turn!();
    let mut cluster = lookup_cluster(3);
    let r = rt();
    let _in_runtime = r.enter();
    let (leader, mut on_leader, mut on_survivor, keep, provider) = r.block_on(async {
        let c = client_at(&cluster, 0);
        wait_ready(&c).await;
        let leader = leader_index(&cluster, &c).await;
        let survivor = (leader + 1) % 3;
        let provider = client_at(&cluster, survivor);
        let keep = provider
            .publish(
                "/f/keep",
                "k",
                PublishOptions::volatile(Duration::from_millis(300)),
            )
            .await
            .unwrap();
        let doomed = provider
            .publish(
                "/f/doomed",
                "d",
                PublishOptions::volatile(Duration::from_millis(900)),
            )
            .await
            .unwrap();
        let opts = WatchOptions {
            interval: Duration::from_millis(300),
        };
        let mut on_leader = client_at(&cluster, leader).watch_with("/f", opts).unwrap();
        let mut on_survivor = client_at(&cluster, (leader + 2) % 3)
            .watch_with("/f", opts)
            .unwrap();
        for w in [&mut on_leader, &mut on_survivor] {
            let mut seen = std::collections::BTreeSet::new();
            while seen.len() < 2 {
                if let WatchChange::Put(e) = next(w, Duration::from_secs(10)).await {
                    seen.insert(e.key);
                }
            }
        }
        // Stop refreshing the doomed entry without revoking it; it is revoked below,
        // while there is no leader to tell anyone.
        doomed.abandon().await;
        (leader, on_leader, on_survivor, keep, provider)
    });
    let old = cluster.cfgs[leader].id;
    eprintln!("crashing device {old}, the lookup leader");
    cluster.nodes[leader].crash();
    let crashed = Instant::now();
    r.block_on(async {
        provider.revoke("/f/doomed").await.unwrap();
        let revoked = crashed.elapsed();
        // Queries are retried through the outage until the new leader answers.
        let c = client_at(&cluster, (leader + 1) % 3);
        let (e, by) = c.get_from_leader("/f/keep").await.unwrap();
        eprintln!(
            "revoke answered {revoked:?} after the crash; a get answered {:?} after it, by device {}",
            crashed.elapsed(),
            by.device
        );
        assert!(e.is_some());
        assert_ne!(by.device.0, old);
        for (name, w) in [("watch on the crashed device", &mut on_leader), ("watch on a survivor", &mut on_survivor)] {
            let c = until(w, Duration::from_secs(15), is_removed("/f/doomed")).await;
            let pos = w.position().expect("synced");
            eprintln!(
                "{name}: {c:?} {:?} after the crash; position {pos:?}, streams opened {}, endpoint {:?}",
                crashed.elapsed(),
                w.counts().0,
                w.endpoint()
            );
            assert_ne!(pos.leader.device.0, old, "{name} follows the new leader");
        }
        assert!(on_leader.counts().0 >= 2, "the watch on the crashed device reconnected");
        assert_ne!(
            on_leader.endpoint().unwrap(),
            format!("http://{}", cluster.cfgs[leader].client_listen)
        );
        // Both keep working: a change now reaches both, once.
        keep.update("k2");
        for w in [&mut on_leader, &mut on_survivor] {
            let c = until(w, Duration::from_secs(5), is_put("/f/keep")).await;
            assert!(matches!(c, WatchChange::Put(ref e) if e.value == b"k2"), "{c:?}");
        }
        drop(keep);
        for w in [&mut on_leader, &mut on_survivor] {
            until(w, Duration::from_secs(5), is_removed("/f/keep")).await;
        }
    });
}

#[test]
fn an_alert_fires_when_its_key_is_not_refreshed_in_time() {
    let _turn = turn!();
    let cluster = lookup_cluster(3);
    rt().block_on(async {
        let c = client_at(&cluster, 1);
        wait_ready(&c).await;
        // Refreshed every 150 ms, the entry lives 2 x 150 + 100 = 400 ms: an alert
        // within 300 ms fires while it is still there.
        let within = Duration::from_millis(300);
        let registered = Instant::now();
        let mut a = c.alert("/hb/worker", within).unwrap();
        // Absent: the alert fires `within` after registration.
        let first = next(&mut a, Duration::from_secs(10)).await;
        assert!(
            matches!(first, WatchChange::Alert { ref key, .. } if key == "/hb/worker"),
            "{first:?}"
        );
        eprintln!("alert for an absent key after {:?}", registered.elapsed());
        let h = c
            .publish(
                "/hb/worker",
                "up",
                PublishOptions::volatile(Duration::from_millis(150)),
            )
            .await
            .unwrap();
        let quiet = tokio::time::timeout(Duration::from_millis(1500), a.next_change()).await;
        assert!(quiet.is_err(), "no alert while refreshed: {quiet:?}");
        h.abandon().await;
        let stopped = Instant::now();
        let c2 = next(&mut a, Duration::from_secs(10)).await;
        let WatchChange::Alert { silent_for, .. } = c2 else {
            panic!("{c2:?}")
        };
        eprintln!(
            "alert {:?} after the last refresh (silent for {silent_for:?}, within {within:?})",
            stopped.elapsed()
        );
        assert!(silent_for >= within);
    });
}

/// An alert whose deadline is longer than the silent entry's lifetime: the entry
/// expires first. The core then measures the silence from the alert's registration,
/// which already fired, so no alert comes (reported to the core's owner).
#[test]
fn an_alert_fires_after_its_silent_key_expired() {
    let _turn = turn!();
    let cluster = lookup_cluster(3);
    rt().block_on(async {
        let c = client_at(&cluster, 1);
        wait_ready(&c).await;
        let mut a = c.alert("/hb/late", Duration::from_millis(600)).unwrap();
        next(&mut a, Duration::from_secs(10)).await;
        let h = c
            .publish(
                "/hb/late",
                "up",
                PublishOptions::volatile(Duration::from_millis(150)),
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        h.abandon().await;
        // Lifetime 400 ms < 600 ms: expired, then silent for 600 ms.
        next(&mut a, Duration::from_secs(5)).await;
    });
}

/// DESIGN §3: every store's manager publishes itself in the lookup service and every
/// device its client address; the client library maps them to an endpoint and tries it
/// before any other when it knows no manager for the store.
#[test]
fn the_client_finds_each_store_manager_through_the_lookup_service() {
    let _turn = turn!();
    let cluster = lookup_cluster(3);
    rt().block_on(async {
        let c = client_at(&cluster, 0);
        wait_ready(&c).await;
        let eps = cluster.endpoints();
        let managed = wait_all_managed(&c, &eps, Duration::from_secs(30)).await;
        let by_device: std::collections::HashMap<u64, String> = (cluster.cfgs.iter())
            .map(|cfg| {
                (
                    cfg.id,
                    format!(
                        "http://{}",
                        cfg.client_endpoint(tenure_core::DeviceId(cfg.id)).unwrap()
                    ),
                )
            })
            .collect();
        let started = Instant::now();
        loop {
            let agree = managed
                .iter()
                .filter(|(s, (d, _))| c.published_manager(**s).as_ref() == by_device.get(d))
                .count();
            if agree == managed.len() {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{agree} of {} stores published with their manager",
                managed.len()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
}
