//! The object service end to end on an in-process three-device cluster (seed 001,
//! DESIGN §5): the client library against real servers over gRPC.

use crate::common::{Cluster, client, rt, wait_all_managed};
use std::time::Duration;
use tenure_client::objects::{Condition, PutOptions, WatchEvent};
use tenure_client::{Error, LockMode, Wait};

fn content(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 13) as u8)
        .collect()
}

#[test]
fn put_get_head_list_delete_conditions_and_multipart() {
    let _turn = turn!();
    let cluster = Cluster::start(3);
    let eps = cluster.endpoints();
    rt().block_on(async {
        let c = client(eps.clone());
        wait_all_managed(&c, &eps, Duration::from_secs(30)).await;
        let o = c.objects();

        // Round trip, small and streamed.
        let w = o.put("/app/a", b"hello".to_vec()).await.unwrap();
        assert!(w.revision > 0);
        let got = o.get("/app/a").await.unwrap();
        assert_eq!(&got.data[..], b"hello");
        assert_eq!(got.info.revision, w.revision);
        let big = content(3 * (1 << 20) + 17, 1);
        let wb = o.put("/app/big", big.clone()).await.unwrap();
        let got = o.get("/app/big").await.unwrap();
        assert_eq!(got.data.len(), big.len());
        assert!(got.data[..] == big[..], "streamed content reads back");
        let head = o.head("/app/big").await.unwrap();
        assert_eq!((head.revision, head.size), (wb.revision, big.len() as u64));

        // Listing.
        let l = o.list("/app").await.unwrap();
        let keys: Vec<&str> = l.objects.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(keys, vec!["/app/a", "/app/big"]);
        let all = o.list("/").await.unwrap();
        assert!(all.objects.len() >= 2);

        // Conditions.
        let e = o
            .put_if("/app/a", b"x".to_vec(), Condition::Absent)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::ObjectExists { ref key, revision } if key == "/app/a" && revision == w.revision), "{e}");
        let e = o
            .put_if("/app/a", b"x".to_vec(), Condition::Revision(w.revision + 100))
            .await
            .unwrap_err();
        assert!(matches!(e, Error::RevisionMismatch { current: Some(r), .. } if r == w.revision), "{e}");
        let w2 = o
            .put_if("/app/a", b"v2".to_vec(), Condition::Revision(w.revision))
            .await
            .unwrap();
        assert!(w2.revision > w.revision);
        o.put_if("/app/new", b"n".to_vec(), Condition::Absent)
            .await
            .unwrap();

        // Delete.
        let d = o.delete("/app/a").await.unwrap();
        assert!(d > w2.revision);
        let e = o.get("/app/a").await.unwrap_err();
        assert!(matches!(e, Error::NoSuchObject(ref k) if k == "/app/a"), "{e}");
        let e = o.delete("/app/a").await.unwrap_err();
        assert!(matches!(e, Error::NoSuchObject(_)), "{e}");

        // Bad input gets typed errors.
        let e = o.put("no-slash", b"x".to_vec()).await.unwrap_err();
        assert!(matches!(e, Error::InvalidName { .. }), "{e}");
        let e = o.put("/app/huge", vec![0u8; 65 << 20]).await.unwrap_err();
        assert!(matches!(e, Error::TooLarge { limit, .. } if limit == 64 << 20), "{e}");

        // Multipart: parts 1..3, completed with 1 and 3.
        let up = o.initiate("/app/mp").await.unwrap();
        let p1 = content(1 << 20, 7);
        let p2 = content(1000, 8);
        let p3 = content(5000, 9);
        o.upload_part(&up, 1, p1.clone()).await.unwrap();
        o.upload_part(&up, 2, p2).await.unwrap();
        o.upload_part(&up, 3, p3.clone()).await.unwrap();
        o.complete(&up, &[1, 3]).await.unwrap();
        let got = o.get("/app/mp").await.unwrap();
        assert_eq!(got.data[..], [p1, p3].concat()[..]);
        let up2 = o.initiate("/app/mp2").await.unwrap();
        o.abort(&up2).await.unwrap();
        let e = o.complete(&up2, &[1]).await.unwrap_err();
        assert!(matches!(e, Error::NoSuchUpload { .. }), "{e}");
        c.close().await.unwrap();
    });
}

#[test]
fn fenced_puts_cas_races_and_watches() {
    let _turn = turn!();
    let cluster = Cluster::start(3);
    let eps = cluster.endpoints();
    rt().block_on(async {
        let c = client(eps.clone());
        wait_all_managed(&c, &eps, Duration::from_secs(30)).await;
        let o = c.objects();

        // A watch from now.
        let mut watch = o.watch("/fence", None).await.unwrap();
        let start = watch.started_after();

        // Fenced by a lock of the same store.
        let g = c
            .lock("/fence/lock", LockMode::Exclusive, Wait::Try)
            .await
            .unwrap();
        o.put_fenced(&g, "/fence/data", b"one".to_vec())
            .await
            .unwrap();
        let stale = g.token();
        g.release().await.unwrap();
        let other = client(eps.clone());
        let g2 = other
            .lock("/fence/lock", LockMode::Exclusive, Wait::Try)
            .await
            .unwrap();
        assert!(g2.token() > stale);
        let opts = PutOptions {
            fence: Some(("/fence/lock".into(), stale)),
            ..Default::default()
        };
        let e = o
            .put_with("/fence/data", b"two".to_vec(), opts)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::StaleToken), "{e}");
        assert_eq!(&o.get("/fence/data").await.unwrap().data[..], b"one");
        // A fenced release checks the token in the same change as the release: the
        // stale token is refused and the lock stays held; the current one releases.
        let (store, session) = (g2.store(), g2.session());
        let e = other
            .release_raw(store, session, "/fence/lock", Some(stale))
            .await
            .unwrap_err();
        assert!(matches!(e, Error::StaleToken), "{e}");
        assert_eq!(c.holders("/fence/lock").await.unwrap().holders.len(), 1);
        // A guard releases fenced by its own token (DESIGN §4, idempotent retries): an
        // operator unlocked its hold and the same session took the name again; the old
        // guard's release is refused and cannot end the newer hold.
        let old = c
            .lock("/fence/guard", LockMode::Exclusive, Wait::Try)
            .await
            .unwrap();
        let (store, session) = (old.store(), old.session());
        other
            .release_raw(store, session, "/fence/guard", None)
            .await
            .unwrap();
        let new = c
            .lock("/fence/guard", LockMode::Exclusive, Wait::Try)
            .await
            .unwrap();
        assert!(new.token() > old.token());
        let e = old.release().await.unwrap_err();
        assert!(matches!(e, Error::StaleToken), "{e}");
        let holders = c.holders("/fence/guard").await.unwrap().holders;
        assert_eq!(holders.len(), 1, "{holders:?}");
        new.release().await.unwrap();
        // A lock in another store cannot fence.
        let e = o
            .put_fenced(&g2, "/elsewhere/data", b"x".to_vec())
            .await
            .unwrap_err();
        assert!(matches!(e, Error::InvalidName { .. }), "{e}");

        // Two clients race a compare-and-set: exactly one wins.
        let base = o.put("/fence/cas", b"0".to_vec()).await.unwrap().revision;
        let (a, b) = (c.objects(), other.objects());
        let (ra, rb) = tokio::join!(
            a.put_if("/fence/cas", b"a".to_vec(), Condition::Revision(base)),
            b.put_if("/fence/cas", b"b".to_vec(), Condition::Revision(base)),
        );
        assert!(ra.is_ok() != rb.is_ok(), "{ra:?} {rb:?}");
        let loser = if ra.is_ok() { rb } else { ra };
        assert!(matches!(loser, Err(Error::RevisionMismatch { .. })));

        // The watch saw every change, in order.
        let mut seen = Vec::new();
        while seen.len() < 3 {
            match tokio::time::timeout(Duration::from_secs(10), watch.next()).await {
                Ok(Some(Ok(WatchEvent::Changes(cs)))) => seen.extend(cs),
                other => panic!("watch: {other:?}"),
            }
        }
        assert!(seen.iter().all(|c| c.revision > start));
        assert!(seen.windows(2).all(|w| w[0].revision < w[1].revision));
        let keys: Vec<&str> = seen.iter().map(|c| c.key.as_str()).collect();
        assert_eq!(keys, vec!["/fence/data", "/fence/cas", "/fence/cas"]);
        drop(g2);
        c.close().await.unwrap();
        other.close().await.unwrap();
    });
}

/// A watch asked to resume from a revision the store's history no longer holds is told
/// so explicitly: the client re-reads the prefix, reports the current objects as a
/// `Reset`, and goes on after the read's revision (no silent gap).
#[test]
fn a_compacted_watch_position_is_reported_as_a_reread() {
    let _turn = turn!();
    let cluster = Cluster::start_with(3, |c| c.objects.history = 4);
    let eps = cluster.endpoints();
    rt().block_on(async {
        let c = client(eps.clone());
        wait_all_managed(&c, &eps, Duration::from_secs(30)).await;
        let o = c.objects();
        let first = o.put("/hist/k0", b"0".to_vec()).await.unwrap().revision;
        for i in 1..10 {
            o.put(&format!("/hist/k{}", i % 3), vec![i as u8])
                .await
                .unwrap();
        }
        let mut w = o.watch("/hist", Some(first)).await.unwrap();
        let (revision, objects) =
            match tokio::time::timeout(Duration::from_secs(10), w.next()).await {
                Ok(Some(Ok(WatchEvent::Reset { revision, objects }))) => (revision, objects),
                other => panic!("expected a re-read, got {other:?}"),
            };
        assert!(revision >= first + 9, "read at {revision}");
        let keys: Vec<&str> = objects.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(keys, vec!["/hist/k0", "/hist/k1", "/hist/k2"]);
        // The watch goes on after the read.
        let next = o.put("/hist/k9", b"x".to_vec()).await.unwrap().revision;
        match tokio::time::timeout(Duration::from_secs(10), w.next()).await {
            Ok(Some(Ok(WatchEvent::Changes(cs)))) => {
                assert_eq!(
                    cs.iter().map(|c| c.revision).collect::<Vec<_>>(),
                    vec![next]
                );
            }
            other => panic!("expected the next change, got {other:?}"),
        }
        c.close().await.unwrap();
    });
}

/// A device takes only `max_client_requests` requests at once and refuses one more with
/// the typed overload answer at once; a client retries it on the same device after a
/// pause, so every put lands; a client that may not retry sees the overload.
#[test]
fn an_overloaded_device_refuses_at_once_and_clients_retry_through() {
    let _turn = turn!();
    let cluster = Cluster::start_with(3, |c| c.max_client_requests = 2);
    let eps = cluster.endpoints();
    rt().block_on(async {
        let c = client(eps.clone());
        wait_all_managed(&c, &eps, Duration::from_secs(30)).await;
        let puts = (0..48).map(|i| {
            let o = c.objects();
            async move { o.put(&format!("/load/k{i}"), vec![i as u8; 300]).await }
        });
        for r in futures::future::join_all(puts).await {
            r.unwrap();
        }
        let once = tenure_client::Client::with_options(
            eps.clone(),
            tenure_client::ClientOptions {
                max_attempts: 1,
                transport: tenure_client::Transport::Unary,
                ..Default::default()
            },
        )
        .unwrap();
        let puts = (0..48).map(|i| {
            let o = once.objects();
            async move { o.put(&format!("/load/once{i}"), vec![i as u8; 300]).await }
        });
        let refused = futures::future::join_all(puts)
            .await
            .into_iter()
            .filter_map(Result::err)
            .filter(|e| {
                let last = match e {
                    Error::GaveUp { last, .. } => last.as_ref(),
                    e => e,
                };
                matches!(last, Error::Overloaded(m) if m.contains("is overloaded"))
            })
            .count();
        assert!(refused > 0, "48 puts at once to devices taking 2 each");
        // Everything the first client wrote is there.
        let l = c.objects().list("/load").await.unwrap();
        assert!(l.objects.len() >= 48);
    });
}
