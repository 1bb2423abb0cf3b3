//! The election service over gRPC (`service Elections`, DESIGN §6) on an in-process
//! three-device cluster, driven with the generated client as another language's client
//! would: sessions opened with `OpenSession`, campaigns as unary `Campaign` RPCs.
//!
//! - a campaign whose RPC is cancelled, and that nobody rejoins, gives the lock back when
//!   it is elected: it never publishes a record, and the next candidate leads;
//! - a retry of a campaign with the same request id joins it (one place in the queue);
//! - observers see every leader and every gap; `try`, resignations, proclaims and bad
//!   names answer with typed errors.

use crate::common;

use crate::common::{Cluster, client, rt, wait_all_managed};
use std::time::{Duration, Instant};
use tenure_client::proto::{self, elections_client::ElectionsClient, tenure_client::TenureClient};
use tonic::transport::Channel;

const NAME: &str = "/rpc/lead";

async fn open(t: &mut TenureClient<Channel>, store: u32) -> proto::SessionRef {
    let r = t
        .open_session(proto::OpenSessionRequest {
            store: Some(store),
            ttl_ms: 60_000,
            client_name: "elections-test".into(),
            request_id: 1,
        })
        .await
        .unwrap()
        .into_inner();
    match r.result {
        Some(proto::open_session_response::Result::Ok(o)) => o.session.unwrap(),
        other => panic!("open: {other:?}"),
    }
}

fn campaign(session: &proto::SessionRef, id: u64, value: &str) -> proto::CampaignRequest {
    proto::CampaignRequest {
        name: NAME.into(),
        value: value.as_bytes().to_vec(),
        session: Some(*session),
        request_id: id,
        timeout_ms: 0,
        ..Default::default()
    }
}

fn elected(r: proto::CampaignResponse) -> proto::LeaderInfo {
    match r.result {
        Some(proto::campaign_response::Result::Ok(l)) => l,
        other => panic!("not elected: {other:?}"),
    }
}

fn error_of(r: proto::CampaignResponse) -> proto::error::Kind {
    match r.result {
        Some(proto::campaign_response::Result::Error(e)) => e.kind.unwrap(),
        other => panic!("elected: {other:?}"),
    }
}

async fn holders(t: &mut TenureClient<Channel>) -> proto::Holders {
    let name = tenure_client::elections::election_key(NAME);
    match t
        .holder(proto::HolderRequest { name })
        .await
        .unwrap()
        .into_inner()
        .result
    {
        Some(proto::holder_response::Result::Ok(h)) => h,
        other => panic!("holders: {other:?}"),
    }
}

async fn until<T, F, Fut>(limit: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn abandoned_and_retried_campaigns_observers_and_typed_errors() {
    let _turn = turn!();
    let cluster = Cluster::start(3);
    let eps = cluster.endpoints();
    rt().block_on(async {
        let c = client(eps.clone());
        let managers = wait_all_managed(&c, &eps, Duration::from_secs(30)).await;
        let store = tenure_core::config::store_of(NAME, common::STORES).0;
        let (mgr, _) = managers[&store];
        let ep = format!("http://{}", cluster.cfgs[(mgr - 1) as usize].client_listen);
        let mut t = TenureClient::connect(ep.clone()).await.unwrap();
        let e = ElectionsClient::connect(ep).await.unwrap();
        let (sa, sb, sc) = (
            open(&mut t, store).await,
            open(&mut t, store).await,
            open(&mut t, store).await,
        );

        // An observer from the start.
        let mut obs = e
            .clone()
            .observe(proto::ObserveRequest {
                name: NAME.into(),
                after: None,
            })
            .await
            .unwrap()
            .into_inner();
        let (obs_tx, mut obs_rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(Some(m)) = obs.message().await {
                if obs_tx.send(m).is_err() {
                    return;
                }
            }
        });

        let a = elected(e.clone().campaign(campaign(&sa, 1, "A")).await.unwrap().into_inner());
        let ta = a.token.unwrap();

        // B's campaign is cancelled by its caller while it waits.
        let cut = tokio::time::timeout(
            Duration::from_millis(300),
            e.clone().campaign(campaign(&sb, 1, "B")),
        )
        .await;
        assert!(cut.is_err(), "B waits behind A");
        // C's is cut too, then retried with the same request id: one place in the queue.
        let cut = tokio::time::timeout(
            Duration::from_millis(300),
            e.clone().campaign(campaign(&sc, 7, "C")),
        )
        .await;
        assert!(cut.is_err(), "C waits behind A and B");
        let mut retry = e.clone();
        let c_wins = tokio::spawn(async move { retry.campaign(campaign(&sc, 7, "C")).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let h = holders(&mut t).await;
        let waiters: Vec<u64> = h.waiters.iter().map(|w| w.id).collect();
        assert_eq!(waiters, vec![sb.id, sc.id], "one queue entry per campaign");

        // `try` while A leads (a session that already campaigns is refused another wait).
        let k = error_of(e.clone().campaign(campaign(&sc, 8, "C")).await.unwrap().into_inner());
        assert!(matches!(k, proto::error::Kind::Rejected(_)), "{k:?}");
        let sd = open(&mut t, store).await;
        let mut tried = campaign(&sd, 1, "D");
        tried.r#try = true;
        let k = error_of(e.clone().campaign(tried).await.unwrap().into_inner());
        assert!(matches!(k, proto::error::Kind::WouldBlock(ref w) if w.name == NAME), "{k:?}");

        // A proclaims a new value, then resigns.
        let p = e
            .clone()
            .proclaim(proto::ProclaimRequest {
                name: NAME.into(),
                value: b"A2".to_vec(),
                session: Some(sa),
                token: Some(ta),
                request_id: 2,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(matches!(p.result, Some(proto::proclaim_response::Result::Ok(ref l)) if l.value == b"A2"), "{p:?}");
        let resign = |s: proto::SessionRef, token: Option<proto::FencingToken>, id: u64| {
            let mut e = e.clone();
            async move {
                match e
                    .resign(proto::ResignRequest {
                        name: NAME.into(),
                        session: Some(s),
                        token,
                        request_id: id,
                    })
                    .await
                    .unwrap()
                    .into_inner()
                    .result
                {
                    Some(proto::resign_response::Result::Ok(r)) => r.was_leader,
                    other => panic!("resign: {other:?}"),
                }
            }
        };
        let resigned_at = Instant::now();
        assert!(resign(sa, Some(ta), 3).await);
        assert!(!resign(sa, Some(ta), 4).await, "a second resignation is a no-op");

        // B is elected with nobody waiting for the answer: it gives the lock back after
        // the grace, without a record, and C leads.
        let cl = elected(
            tokio::time::timeout(Duration::from_secs(15), c_wins)
                .await
                .expect("C is elected")
                .unwrap()
                .unwrap()
                .into_inner(),
        );
        let handover = resigned_at.elapsed();
        eprintln!("C elected {handover:?} after A resigned (B's abandoned grant in between)");
        assert!(handover >= Duration::from_secs(1), "{handover:?}");
        assert_eq!(cl.value, b"C");
        let tc = cl.token.unwrap();
        assert!((tc.epoch, tc.seq) > (ta.epoch, ta.seq));
        let l = match e
            .clone()
            .leader(proto::LeaderRequest { name: NAME.into() })
            .await
            .unwrap()
            .into_inner()
            .result
        {
            Some(proto::leader_response::Result::Ok(l)) => l.leader.unwrap(),
            other => panic!("leader: {other:?}"),
        };
        assert_eq!((l.value.as_slice(), l.session.unwrap().id), (&b"C"[..], sc.id));

        // The observer: nobody, A, A2, nobody, C — never B.
        // Every change received is kept across the polls (C's may come after the
        // campaign's answer: the events leave the driver's thread on their own).
        let mut got = Vec::new();
        let seen = until(Duration::from_secs(10), "the observer sees C", || {
            while let Ok(m) = obs_rx.try_recv() {
                got.push(m);
            }
            let done = got.iter().any(|m| {
                matches!(&m.kind, Some(proto::observe_response::Kind::Change(c))
                    if c.leader.as_ref().is_some_and(|l| l.value == b"C"))
            });
            let got = done.then(|| got.clone());
            async move { got }
        })
        .await;
        let values: Vec<String> = seen
            .iter()
            .map(|m| match &m.kind {
                Some(proto::observe_response::Kind::Change(c)) => c
                    .leader
                    .as_ref()
                    .map_or("none".into(), |l| String::from_utf8_lossy(&l.value).into_owned()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(values, ["none", "A", "A2", "none", "C"], "{seen:?}");

        // Resigning without a token ends whatever leadership the session holds.
        assert!(resign(sc, None, 9).await);
        assert!(!resign(sc, None, 10).await);

        // Typed errors: a bad name, a session of a store outside the cluster, a session
        // of another store that does not exist (a session of another store campaigns
        // under its child there: crates/tenure/tests/integration/one_session.rs).
        let mut bad = campaign(&sa, 20, "x");
        bad.name = "no-slash".into();
        let k = error_of(e.clone().campaign(bad).await.unwrap().into_inner());
        assert!(matches!(k, proto::error::Kind::InvalidName(_)), "{k:?}");
        let mut outside = campaign(&sa, 21, "x");
        outside.session = Some(proto::SessionRef {
            store: common::STORES,
            id: sa.id,
        });
        let k = error_of(e.clone().campaign(outside).await.unwrap().into_inner());
        assert!(matches!(k, proto::error::Kind::UnknownStore(_)), "{k:?}");
        let other = (0..common::STORES).find(|s| *s != store).unwrap();
        let mut unknown = campaign(&sa, 22, "x");
        unknown.session = Some(proto::SessionRef {
            store: other,
            id: 1 << 40,
        });
        let k = error_of(e.clone().campaign(unknown).await.unwrap().into_inner());
        assert!(
            matches!(k, proto::error::Kind::SessionExpired(_)),
            "{k:?}"
        );
    });
}
