//! One session per client (DESIGN §4), with real processes on 127.0.0.1 and only the
//! generated stubs: a session opened without a store holds locks, an ephemeral object
//! and an election's leadership in other stores; its keep-alives (one loop, to one device) keep all of them;
//! closing it frees them at once; a session left without keep-alives loses its locks in
//! every store and then answers `SessionExpired`. Every wait is bounded; a guard kills
//! the processes.

use std::time::{Duration, Instant};
use tenure_client::proto::{
    self, acquire_response, close_session_response, holder_response, open_session_response,
    put_object_response, tenure_client::TenureClient,
};
use tenure_core::config::store_of;

use crate::common;
use crate::common::{Guard, STORES, keep_alive, up, with_tls};

const TTL_MS: u64 = 3_000;

type Stub = TenureClient<tenure_client::Chan>;
type Objects = proto::objects_client::ObjectsClient<tenure_client::Chan>;
type Elections = proto::elections_client::ElectionsClient<tenure_client::Chan>;

/// Names in distinct stores, none of them `home`.
fn names_outside(home: u32, n: usize, what: &str) -> Vec<String> {
    let mut taken = vec![home];
    let mut names = Vec::new();
    for i in 0.. {
        let name = format!("/one{i}/{what}");
        let s = store_of(&name, STORES).0;
        if !taken.contains(&s) {
            taken.push(s);
            names.push(name);
            if names.len() == n {
                break;
            }
        }
    }
    names
}

async fn open(stub: &mut Stub) -> proto::SessionRef {
    let opened = (stub.open_session(proto::OpenSessionRequest {
        ttl_ms: TTL_MS,
        ..Default::default()
    }))
    .await
    .unwrap()
    .into_inner();
    match opened.result {
        Some(open_session_response::Result::Ok(o)) => o.session.unwrap(),
        other => panic!("open: {other:?}"),
    }
}

/// Acquire `name` under `session`, asking again (same request id) while the cluster
/// answers `Unavailable`.
async fn acquire(stub: &mut Stub, session: proto::SessionRef, name: &str, id: u64) {
    let start = Instant::now();
    loop {
        let a = (stub.acquire(proto::AcquireRequest {
            session: Some(session),
            name: name.into(),
            mode: proto::LockMode::Exclusive as i32,
            no_wait: true,
            request_id: id,
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner();
        match a.result {
            Some(acquire_response::Result::Ok(_)) => return,
            other => {
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "{name}: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

async fn holders(stub: &mut Stub, name: &str) -> Vec<proto::SessionRef> {
    let r = (stub.holder(proto::HolderRequest { name: name.into() }))
        .await
        .unwrap()
        .into_inner();
    match r.result {
        Some(holder_response::Result::Ok(h)) => {
            h.holders.into_iter().filter_map(|h| h.session).collect()
        }
        other => panic!("holders of {name}: {other:?}"),
    }
}

async fn campaign(elections: &mut Elections, session: proto::SessionRef, name: &str, id: u64) {
    let r = (elections.campaign(proto::CampaignRequest {
        session: Some(session),
        name: name.into(),
        value: b"me".to_vec(),
        request_id: id,
        ..Default::default()
    }))
    .await
    .unwrap()
    .into_inner();
    match r.result {
        Some(proto::campaign_response::Result::Ok(l)) => {
            assert_eq!(l.session, Some(session), "{l:?}")
        }
        other => panic!("campaign {name}: {other:?}"),
    }
}

async fn leader(elections: &mut Elections, name: &str) -> Option<proto::SessionRef> {
    let r = (elections.leader(proto::LeaderRequest { name: name.into() }))
        .await
        .unwrap()
        .into_inner();
    match r.result {
        Some(proto::leader_response::Result::Ok(l)) => l.leader.and_then(|l| l.session),
        other => panic!("leader of {name}: {other:?}"),
    }
}

async fn exists(objects: &mut Objects, key: &str) -> bool {
    let r = (objects.head(proto::HeadObjectRequest { key: key.into() }))
        .await
        .unwrap()
        .into_inner();
    match r.result {
        Some(proto::head_object_response::Result::Ok(_)) => true,
        Some(proto::head_object_response::Result::Error(e))
            if matches!(e.kind, Some(proto::error::Kind::NoSuchObject(_))) =>
        {
            false
        }
        other => panic!("head {key}: {other:?}"),
    }
}

#[test]
fn one_session_holds_locks_and_objects_in_every_store_with_one_keep_alive_loop() {
    let _turn = turn!();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    up(&data);
    let file = common::cluster_file(&data);
    let addr = file["devices"][0]["client_addr"]
        .as_str()
        .unwrap()
        .to_string();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let opts = with_tls(&data, Default::default());
    rt.block_on(async {
        let chan = tenure_client::channel(&addr, &opts).unwrap();
        let mut stub = TenureClient::new(chan.clone());
        let mut objects = proto::objects_client::ObjectsClient::new(chan.clone());
        let mut elections = proto::elections_client::ElectionsClient::new(chan);

        // One session, its home chosen by the server; two locks and an ephemeral
        // object in three other stores.
        let session = open(&mut stub).await;
        let home = session.store;
        let names = names_outside(home, 4, "x");
        let (locks, key, election) = (&names[..2], names[2].clone(), names[3].clone());
        for (i, name) in locks.iter().enumerate() {
            acquire(&mut stub, session, name, i as u64 + 1).await;
        }
        let put = (objects.put(proto::PutObjectRequest {
            key: key.clone(),
            data: b"mine".to_vec().into(),
            ephemeral: true,
            session: session.id,
            session_store: Some(home),
            request_id: 3,
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner();
        assert!(
            matches!(put.result, Some(put_object_response::Result::Ok(_))),
            "{put:?}"
        );
        // An election in a fourth store: led under the session (the leader named by its
        // client's session), resigned without a token, led again.
        campaign(&mut elections, session, &election, 4).await;
        assert_eq!(leader(&mut elections, &election).await, Some(session));
        let resigned = (elections.resign(proto::ResignRequest {
            session: Some(session),
            name: election.clone(),
            request_id: 5,
            token: None,
        }))
        .await
        .unwrap()
        .into_inner();
        assert!(
            matches!(
                resigned.result,
                Some(proto::resign_response::Result::Ok(proto::Resigned {
                    was_leader: true
                }))
            ),
            "{resigned:?}"
        );
        assert_eq!(leader(&mut elections, &election).await, None);
        campaign(&mut elections, session, &election, 6).await;
        let mut children = Vec::new();
        for name in locks {
            let h = holders(&mut stub, name).await;
            assert_eq!(h.len(), 1, "{name}: {h:?}");
            // By the session's child, a session of the name's store (its id may equal
            // the home session's: ids are numbered per store).
            assert_eq!(
                h[0].store,
                store_of(name, STORES).0,
                "held in the name's store"
            );
            assert_ne!(h[0].store, home);
            children.push(h[0]);
        }
        eprintln!(
            "session s{home}/{} holds {locks:?} through {children:?}",
            session.id
        );

        // One keep-alive loop (TTL / 3) for three TTLs: everything is kept.
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(3 * TTL_MS) {
            let ttl = keep_alive(&mut stub, session).await.expect("alive");
            assert_eq!(ttl, TTL_MS);
            tokio::time::sleep(Duration::from_millis(TTL_MS / 3)).await;
        }
        for (name, child) in locks.iter().zip(&children) {
            assert_eq!(holders(&mut stub, name).await, vec![*child], "{name}");
        }
        assert!(exists(&mut objects, &key).await);
        assert_eq!(leader(&mut elections, &election).await, Some(session));

        // Closing the session frees the locks and ends the ephemeral object at once.
        let closed = (stub.close_session(proto::CloseSessionRequest {
            session: Some(session),
        }))
        .await
        .unwrap()
        .into_inner();
        assert!(
            matches!(closed.result, Some(close_session_response::Result::Ok(_))),
            "{closed:?}"
        );
        for name in locks {
            assert!(holders(&mut stub, name).await.is_empty(), "{name} freed");
        }
        assert!(!exists(&mut objects, &key).await, "ephemeral object gone");
        assert_eq!(
            leader(&mut elections, &election).await,
            None,
            "leadership gone"
        );
        assert!(keep_alive(&mut stub, session).await.is_err());

        // A session left without keep-alives loses its locks in every store.
        let session = open(&mut stub).await;
        let names = names_outside(session.store, 2, "y");
        for (i, name) in names.iter().enumerate() {
            acquire(&mut stub, session, name, i as u64 + 1).await;
        }
        let silent = Instant::now();
        for name in &names {
            while !holders(&mut stub, name).await.is_empty() {
                assert!(
                    silent.elapsed() < Duration::from_secs(30),
                    "{name} still held"
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
        eprintln!("locks freed {:?} after the last request", silent.elapsed());
        assert!(silent.elapsed() >= Duration::from_millis(TTL_MS - 500));
        let e = keep_alive(&mut stub, session).await.unwrap_err();
        assert!(e.contains("SessionExpired"), "{e}");
    });
}

/// The Rust client (both transports) holds names of three stores, an ephemeral object and
/// a leadership under ONE session, homed in the store of its first name; the holders
/// of the other names are the session's children; closing the client frees everything.
#[test]
fn the_rust_client_uses_one_session_for_names_of_every_store() {
    let _turn = turn!();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    up(&data);
    let file = common::cluster_file(&data);
    let endpoints: Vec<String> = file["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["client_addr"].as_str().unwrap().to_string())
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for (round, transport) in [
            tenure_client::Transport::Stream,
            tenure_client::Transport::Unary,
        ]
        .into_iter()
        .enumerate()
        {
            let opts = with_tls(
                &data,
                tenure_client::ClientOptions {
                    transport,
                    session_ttl: Duration::from_millis(TTL_MS),
                    ..Default::default()
                },
            );
            let client = tenure_client::Client::with_options(endpoints.clone(), opts).unwrap();
            let first = format!("/rust{round}/first");
            let home = store_of(&first, STORES).0;
            let others = names_outside(home, 4, &format!("r{round}"));
            let mut guards = vec![
                client
                    .lock(
                        &first,
                        tenure_client::LockMode::Exclusive,
                        tenure_client::Wait::Try,
                    )
                    .await
                    .unwrap(),
            ];
            for name in &others[..2] {
                guards.push(
                    client
                        .lock(
                            name,
                            tenure_client::LockMode::Exclusive,
                            tenure_client::Wait::Try,
                        )
                        .await
                        .unwrap(),
                );
            }
            let session = guards[0].session();
            for g in &guards {
                assert_eq!(
                    (g.session_store(), g.session()),
                    (home, session),
                    "{}",
                    g.name()
                );
                assert_eq!(g.store(), store_of(g.name(), STORES).0);
            }
            for g in &guards[1..] {
                let h = client.holders(g.name()).await.unwrap();
                assert_eq!(h.holders.len(), 1, "{h:?}");
                assert_eq!(h.holders[0].store, g.store(), "held by the child: {h:?}");
            }
            let key = format!("{}/k", others[2]);
            let opts = tenure_client::objects::PutOptions {
                ephemeral: true,
                ..Default::default()
            };
            client
                .objects()
                .put_with(&key, &b"v"[..], opts)
                .await
                .unwrap();
            let leadership = client.elections().campaign(&others[3], "me").await.unwrap();
            assert_eq!(
                (leadership.session_store(), leadership.session()),
                (home, session)
            );
            assert_eq!(leadership.store(), store_of(&others[3], STORES).0);
            // Two TTLs: the one keep-alive loop keeps everything.
            tokio::time::sleep(Duration::from_millis(2 * TTL_MS)).await;
            for g in &guards {
                assert!(g.is_held(), "{}", g.name());
                let h = client.holders(g.name()).await.unwrap();
                assert_eq!(h.holders.len(), 1, "{h:?}");
            }
            assert!(client.objects().get(&key).await.is_ok());
            client.close().await.unwrap();
            // Dropped after the close: their session has ended, nothing is sent.
            drop((leadership, guards));
            let probe = tenure_client::Client::with_options(
                endpoints.clone(),
                with_tls(&data, Default::default()),
            )
            .unwrap();
            for name in std::iter::once(&first).chain(&others[..2]) {
                let h = probe.holders(name).await.unwrap();
                assert!(h.holders.is_empty(), "{name} freed by the close: {h:?}");
            }
            assert!(probe.objects().get(&key).await.is_err(), "ephemeral gone");
            let leader = probe.elections().leader(&others[3]).await.unwrap();
            assert!(leader.is_none(), "leadership gone: {leader:?}");
        }
    });
}
