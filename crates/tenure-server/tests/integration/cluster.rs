//! In-process clusters on 127.0.0.1 with ephemeral ports. Each device runs on its own
//! tokio runtime, so "crash" is dropping that runtime without any shutdown step (what
//! `kill -9` does to a process: no flush, no goodbye); the process-level tests live in
//! `crates/tenure/tests`. Every wait is bounded.

use crate::common::*;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tenure_client::Client;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[test]
fn three_devices_elect_managers_and_serve_writes() {
    let _turn = turn!();
    let cluster = Cluster::start(3);
    rt().block_on(async {
        let eps = cluster.endpoints();
        let c = client(eps.clone());
        let m = wait_all_managed(&c, &eps, Duration::from_secs(30)).await;
        assert_eq!(m.len(), STORES as usize);
        for store in 0..STORES {
            let v = c.write(store, 1, 100 + store as u64).await.unwrap();
            assert!(v.epoch >= 1);
            let v2 = c.write(store, 1, 200).await.unwrap();
            assert!(v2 > v, "versions increase: {v:?} then {v2:?}");
        }
    });
}

#[test]
fn crashed_manager_is_replaced_and_writes_continue() {
    let _turn = turn!();
    let mut cluster = Cluster::start(3);
    let r = rt();
    let _in_runtime = r.enter();
    let eps = cluster.endpoints();
    let c = client(eps.clone());
    let before = r.block_on(wait_all_managed(&c, &eps, Duration::from_secs(30)));
    let (victim, old_epoch) = before[&0];
    r.block_on(async { c.write(0, 7, 1).await.unwrap() });
    let idx = cluster
        .nodes
        .iter()
        .position(|n| n.cfg.id == victim)
        .unwrap();
    cluster.nodes[idx].crash();
    let survivors: Vec<String> = cluster
        .nodes
        .iter()
        .filter(|n| n.cfg.id != victim)
        .map(Node::client_endpoint)
        .collect();
    let started = Instant::now();
    let after = r.block_on(wait_all_managed(&c, &survivors, Duration::from_secs(40)));
    eprintln!("failover of store 0 took {:?}", started.elapsed());
    let (new_mgr, new_epoch) = after[&0];
    assert_ne!(new_mgr, victim);
    assert!(new_epoch > old_epoch, "epoch {old_epoch} → {new_epoch}");
    r.block_on(async {
        let v = c.write(0, 7, 2).await.unwrap();
        assert!(v.epoch >= new_epoch);
        for store in 0..STORES {
            c.write(store, 9, 9).await.unwrap();
        }
    });
}

#[test]
fn persisted_state_survives_a_full_restart() {
    let _turn = turn!();
    let mut cluster = Cluster::start(3);
    let r = rt();
    let _in_runtime = r.enter();
    let eps = cluster.endpoints();
    let c = client(eps.clone());
    r.block_on(wait_all_managed(&c, &eps, Duration::from_secs(30)));
    let mut acked = BTreeMap::new();
    r.block_on(async {
        for store in 0..STORES {
            acked.insert(store, c.write(store, 5, 55).await.unwrap());
        }
    });
    for n in &mut cluster.nodes {
        n.crash();
    }
    // Every acknowledged write's epoch is durable on a majority of its store's chunks.
    let mut chunk_epochs: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for i in 0..cluster.nodes.len() {
        let deadline = Instant::now() + Duration::from_secs(10);
        let state = loop {
            match tenure_server::storage::Storage::open(
                &cluster.data_dir(i),
                tenure_core::DeviceId(cluster.cfgs[i].id),
            ) {
                Ok((_, s)) => break s,
                Err(e) if Instant::now() < deadline => {
                    eprintln!("reopen: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("reopen: {e}"),
            }
        };
        for ch in state.chunks.values() {
            chunk_epochs.entry(ch.store.0).or_default().push(ch.epoch.0);
        }
    }
    for (store, v) in &acked {
        let eps = &chunk_epochs[store];
        let at_least = eps.iter().filter(|e| **e >= v.epoch).count();
        assert!(
            2 * at_least > eps.len(),
            "store {store}: acked {v:?}, chunks {eps:?}"
        );
    }
    let cfgs = cluster.cfgs.clone();
    cluster.nodes = cfgs.into_iter().map(Node::start).collect();
    r.block_on(async {
        let after = wait_all_managed(&c, &eps, Duration::from_secs(40)).await;
        for (store, v) in &acked {
            assert!(after[store].1 >= v.epoch, "epochs never go back");
            let w = c.write(*store, 5, 56).await.unwrap();
            assert!(w > *v, "store {store}: {v:?} then {w:?}");
        }
    });
}

#[test]
fn garbage_on_either_port_is_refused_and_the_cluster_keeps_serving() {
    let _turn = turn!();
    let cluster = Cluster::start(3);
    let r = rt();
    let _in_runtime = r.enter();
    let eps = cluster.endpoints();
    let c = client(eps.clone());
    r.block_on(async {
        wait_all_managed(&c, &eps, Duration::from_secs(30)).await;
        let peer = cluster.cfgs[0].peer_listen;
        // A frame whose body is not a valid frame: the connection is closed.
        let mut s = tokio::net::TcpStream::connect(peer).await.unwrap();
        s.write_all(&[0, 0, 0, 4, 0xde, 0xad, 0xbe, 0xef])
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("server closes a garbage connection");
        assert!(matches!(n, Ok(0) | Err(_)), "got {n:?}");
        // An oversized frame header: closed too.
        let mut s = tokio::net::TcpStream::connect(peer).await.unwrap();
        s.write_all(&[0xff, 0xff, 0xff, 0xff, 1, 2, 3])
            .await
            .unwrap();
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("server closes an oversized frame");
        assert!(matches!(n, Ok(0) | Err(_)), "got {n:?}");
        // A Hello claiming to be a device that does not exist.
        let hello = tenure_server::wire::encode_hello(
            tenure_core::DeviceId(99),
            tenure_core::DeviceId(1),
            tenure_server::wire::Versions::THIS_BUILD,
        )
        .unwrap();
        let mut s = tokio::net::TcpStream::connect(peer).await.unwrap();
        s.write_all(&(hello.len() as u32).to_be_bytes())
            .await
            .unwrap();
        s.write_all(&hello).await.unwrap();
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("server closes an unknown device");
        assert!(matches!(n, Ok(0) | Err(_)), "got {n:?}");

        // Not HTTP/2 at all on the client port.
        let mut s = tokio::net::TcpStream::connect(cluster.cfgs[1].client_listen)
            .await
            .unwrap();
        s.write_all(b"GET / HTTP/1.0\r\n\r\ngarbage\x00\x01")
            .await
            .unwrap();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
        // A well-formed request for a store that does not exist: a typed error.
        let err = c.write(STORES + 5, 1, 1).await.unwrap_err();
        assert!(
            matches!(err, tenure_client::Error::UnknownStore(s) if s == STORES + 5),
            "{err}"
        );
        // Lock RPCs: a request without a session is refused before the core...
        let mut raw = tenure_client::proto::tenure_client::TenureClient::connect(format!(
            "http://{}",
            cluster.cfgs[0].client_listen
        ))
        .await
        .unwrap();
        let st = raw
            .acquire(tenure_client::proto::AcquireRequest::default())
            .await
            .unwrap_err();
        assert_eq!(st.code(), tonic::Code::InvalidArgument, "{st}");
        // ...an invalid lock name gets a typed InvalidName...
        let bad = tenure_client::proto::AcquireRequest {
            session: Some(tenure_client::proto::SessionRef { store: 0, id: 1 }),
            name: "no-leading-slash//x".into(),
            request_id: 1,
            ..Default::default()
        };
        let r = raw.acquire(bad).await.unwrap().into_inner();
        assert!(
            matches!(
                r.result,
                Some(tenure_client::proto::acquire_response::Result::Error(
                    tenure_client::proto::Error {
                        kind: Some(tenure_client::proto::error::Kind::InvalidName(_)),
                        ..
                    }
                ))
            ),
            "{r:?}"
        );
        // ...request id 0 (no idempotency key) gets a typed InvalidRequest...
        let zero = tenure_client::proto::AcquireRequest {
            session: Some(tenure_client::proto::SessionRef { store: 0, id: 1 }),
            name: "/x".into(),
            ..Default::default()
        };
        let r = raw.acquire(zero).await.unwrap().into_inner();
        assert!(
            matches!(
                r.result,
                Some(tenure_client::proto::acquire_response::Result::Error(
                    tenure_client::proto::Error {
                        kind: Some(tenure_client::proto::error::Kind::InvalidRequest(_)),
                        ..
                    }
                ))
            ),
            "{r:?}"
        );
        // ...and an oversized request is refused by the transport.
        let huge = tenure_client::proto::AcquireRequest {
            session: Some(tenure_client::proto::SessionRef { store: 0, id: 1 }),
            name: format!("/{}", "x".repeat(200 * 1024)),
            request_id: 2,
            ..Default::default()
        };
        let st = raw.acquire(huge).await.unwrap_err();
        assert_eq!(st.code(), tonic::Code::OutOfRange, "{st}");

        // The cluster still serves.
        for store in 0..STORES {
            c.write(store, 3, 3).await.unwrap();
        }
    });
}

/// Wait (bounded) until `name`'s queue has `n` sessions.
async fn wait_queue(c: &Client, name: &str, n: usize) -> tenure_client::LockState {
    let start = Instant::now();
    loop {
        let s = c.holders(name).await.unwrap();
        if s.waiters.len() == n {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{name}: queue never reached {n}: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// DESIGN §4: one holder at a time, FIFO hand-over, fencing tokens increase, try/timeout
// fail with typed errors, shared holders coexist, a dropped guard releases.
#[test]
fn locks_are_exclusive_fifo_and_fenced_through_the_client() {
    let _turn = turn!();
    use tenure_client::{Error, LockMode, Wait};
    let cluster = Cluster::start(3);
    let r = rt();
    let eps = cluster.endpoints();
    r.block_on(async {
        let (a, b) = (client(eps.clone()), client(eps.clone()));
        // C shares A's connections and has its own sessions: to the service it is
        // another client.
        let c = a.new_sharing();
        wait_all_managed(&a, &eps, Duration::from_secs(30)).await;
        let name = "/jobs/nightly";
        let ga = a
            .lock(name, LockMode::Exclusive, Wait::Forever)
            .await
            .unwrap();
        assert!(ga.is_held());
        assert!(ga.deadline() > Instant::now() + Duration::from_secs(5));
        let err = b
            .lock(name, LockMode::Exclusive, Wait::Try)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::WouldBlock(_)), "{err}");
        let err = b
            .lock(
                name,
                LockMode::Shared,
                Wait::Timeout(Duration::from_millis(200)),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Timeout(_)), "{err}");

        let bw = tokio::spawn({
            let b = b.clone();
            async move { b.lock(name, LockMode::Exclusive, Wait::Forever).await }
        });
        let q = wait_queue(&a, name, 1).await;
        assert_eq!(q.holders.len(), 1);
        assert_eq!(q.holders[0].session, ga.session());
        assert_eq!(q.holders[0].token, ga.token());
        let cw = tokio::spawn({
            let c = c.clone();
            async move { c.lock(name, LockMode::Exclusive, Wait::Forever).await }
        });
        wait_queue(&a, name, 2).await;

        let t1 = ga.token();
        drop(ga); // released from a spawned task
        let gb = tokio::time::timeout(Duration::from_secs(10), bw)
            .await
            .expect("B granted after A's release")
            .unwrap()
            .unwrap();
        assert!(gb.token() > t1, "{:?} after {t1:?}", gb.token());
        assert!(!cw.is_finished(), "C waits behind B");
        let listed = a.locks("/jobs").await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].holders[0].session, gb.session());
        assert_eq!(listed[0].waiters.len(), 1);
        let t2 = gb.token();
        gb.release().await.unwrap();
        let gc = tokio::time::timeout(Duration::from_secs(10), cw)
            .await
            .expect("C granted after B's release")
            .unwrap()
            .unwrap();
        assert!(gc.token() > t2);

        // Shared holders coexist; an invalid name is a typed error.
        let s1 = a.lock("/cfg/x", LockMode::Shared, Wait::Try).await.unwrap();
        let s2 = b.lock("/cfg/x", LockMode::Shared, Wait::Try).await.unwrap();
        assert_eq!(a.holders("/cfg/x").await.unwrap().holders.len(), 2);
        drop((s1, s2));
        let err = a
            .lock("/bad//name", LockMode::Shared, Wait::Try)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidName { .. }), "{err}");

        // Closing C's sessions releases its lock at once, and leaves A's sessions and
        // the connections they share serving.
        assert_ne!(
            gc.session(),
            a.lock("/a/own", LockMode::Exclusive, Wait::Try)
                .await
                .unwrap()
                .session()
        );
        c.close().await.unwrap();
        let s = a.holders(name).await.unwrap();
        assert!(s.holders.is_empty(), "{s:?}");
        drop(gc);
        let ga = a.lock(name, LockMode::Exclusive, Wait::Try).await.unwrap();
        assert!(ga.is_held());
    });
}
