//! Authorization (DESIGN §8, Security; `tenure_server::auth`) against an in-process
//! cluster with `[auth]` on: a read-only token reads but may not lock (and the lock stays
//! free), a token limited to `/jobs/` locks there and nowhere else, the session stream
//! answers a refused request with the typed `PermissionDenied` and stays up, a call
//! without a known token is `UNAUTHENTICATED` — on every RPC of every service — and a
//! refused write changes nothing.

use crate::common::*;
use std::collections::BTreeSet;
use std::time::Duration;
use tenure_client::proto::{
    self, cluster_client::ClusterClient, elections_client::ElectionsClient, error::Kind,
    lookup_client::LookupClient, objects_client::ObjectsClient, session_event::Kind as Ev,
    session_request::Kind as Rq, snapshots_client::SnapshotsClient, tenure_client::TenureClient,
};
use tenure_client::{Client, ClientOptions, Error, LockMode, Transport, Wait};
use tenure_server::auth::{AuthConfig, Perm};
use tenure_server::config::ServerConfig;

const ROOT: &str = "secret-root";
const READER: &str = "secret-reader";
const WORKER: &str = "secret-worker";

fn with_auth(c: &mut ServerConfig) {
    c.auth = AuthConfig {
        enabled: true,
        tokens: vec![
            token("root", ROOT, &[("/", &[Perm::Admin])]),
            token("reader", READER, &[("/", &[Perm::Read])]),
            token("worker", WORKER, &[("/jobs/", &[Perm::Lock])]),
        ],
        ..Default::default()
    };
}

fn client_as(c: &Cluster, token: Option<&str>) -> Client {
    Client::with_options(c.endpoints(), opts(token)).unwrap()
}

/// The same for the services with error types of their own.
fn denied_text<T: std::fmt::Debug, E: std::fmt::Display>(r: Result<T, E>, what: &[&str]) {
    match r {
        Err(e) => {
            let m = e.to_string();
            assert!(m.contains("permission denied"), "{m}");
            for w in what {
                assert!(m.contains(w), "{m:?} does not name {w:?}");
            }
        }
        Ok(v) => panic!("expected a refusal naming {what:?}, got {v:?}"),
    }
}

#[test]
fn tokens_get_what_their_rules_grant_and_nothing_else() {
    let _turn = turn!();
    let c = Cluster::start_with(3, with_auth);
    let rt = rt();
    rt.block_on(async {
        let root = client_as(&c, Some(ROOT));
        wait_all_managed(&root, &c.endpoints(), Duration::from_secs(30)).await;

        // No token, or one the devices do not know: UNAUTHENTICATED, with what to do.
        for t in [None, Some("not-a-token")] {
            let anon = client_as(&c, t);
            match anon.first_status().await {
                Err(Error::Unauthenticated(m)) => assert!(m.contains("TENURE_TOKEN"), "{m}"),
                other => panic!("{t:?}: expected Unauthenticated, got {other:?}"),
            }
        }

        // A read-only token reads, and its acquire is refused: the lock stays free.
        for transport in [Transport::Stream, Transport::Unary] {
            let reader = Client::with_options(
                c.endpoints(),
                ClientOptions {
                    transport,
                    ..opts(Some(READER))
                },
            )
            .unwrap();
            assert!(reader.holders("/jobs/a").await.unwrap().holders.is_empty());
            denied(
                reader.lock("/jobs/a", LockMode::Exclusive, Wait::Try).await,
                &["reader", "lock", "/jobs/a"],
            );
            assert!(
                root.holders("/jobs/a").await.unwrap().holders.is_empty(),
                "{transport:?}: a refused acquire left a holder"
            );
            // Reads still work on the same client (its stream is still up).
            assert!(reader.locks("/jobs").await.is_ok());
        }

        // A token limited to /jobs/ locks there, not elsewhere, and its stream stays up.
        let worker = client_as(&c, Some(WORKER));
        let g = worker
            .lock("/jobs/a", LockMode::Exclusive, Wait::Try)
            .await
            .unwrap();
        denied(
            worker.lock("/other", LockMode::Exclusive, Wait::Try).await,
            &["worker", "lock", "/other"],
        );
        denied(
            worker.lock("/jobsx", LockMode::Exclusive, Wait::Try).await,
            &["/jobsx"],
        );
        assert!(root.holders("/other").await.unwrap().holders.is_empty());
        let g2 = worker
            .lock("/jobs/b", LockMode::Exclusive, Wait::Try)
            .await
            .unwrap();
        assert_eq!(root.holders("/jobs/a").await.unwrap().holders.len(), 1);
        // Lock implies read, inside its prefix only.
        assert!(worker.holders("/jobs/a").await.is_ok());
        denied(worker.holders("/other").await, &["read", "/other"]);
        // Listing `/` needs read on all of it.
        denied(worker.locks("/").await, &["read"]);
        g.release().await.unwrap();
        g2.release().await.unwrap();

        // Objects: a refused put changes nothing; read-only tokens read.
        let reader = client_as(&c, Some(READER));
        let objects = root.objects();
        objects.put("/cfg/a", &b"one"[..]).await.unwrap();
        denied(
            reader.objects().put("/cfg/a", &b"two"[..]).await,
            &["reader", "write", "/cfg/a"],
        );
        denied(worker.objects().delete("/cfg/a").await, &["worker"]);
        let got = reader.objects().get("/cfg/a").await.unwrap();
        assert_eq!(&got.data[..], b"one");

        // Lookup: publishing needs write; the cluster's own entries are readable by any
        // token (clients route by them).
        denied(worker.revoke("/jobs/x").await, &["write"]);
        assert!(worker.list("/tenure").await.is_ok());
        denied(worker.list("/").await, &["read"]);
        // A watch the token may not read ends with the refusal (it is not retried).
        let mut w = worker.watch("/secrets").unwrap();
        let first = tokio::time::timeout(Duration::from_secs(10), w.next_change())
            .await
            .expect("the refusal comes in time");
        denied(first.expect("an item").map(|_| ()), &["read", "/secrets"]);

        // Elections need lock on the name; snapshots and membership admin.
        let leader = worker.elections().campaign("/jobs/leader", "w").await;
        assert!(leader.is_ok(), "{leader:?}");
        denied(
            worker.elections().campaign("/other/leader", "w").await,
            &["lock", "/other/leader"],
        );
        denied_text(worker.snapshots().create().await, &["worker", "admin"]);
        denied_text(
            worker.cluster().remove_device(3, &[]).await,
            &["worker", "admin"],
        );
        assert!(worker.cluster().members().await.is_ok());
    });
}

/// Every RPC of `proto/*.proto`: one without a token must be refused as
/// UNAUTHENTICATED before it does anything. The list is checked against the `.proto`
/// files, so an RPC added later without a check here fails this test.
#[test]
fn every_rpc_refuses_a_call_without_a_token() {
    let _turn = turn!();
    let c = Cluster::start_with(3, with_auth);
    let rt = rt();
    rt.block_on(async {
        let root = client_as(&c, Some(ROOT));
        wait_all_managed(&root, &c.endpoints(), Duration::from_secs(30)).await;
        let ch = tenure_client::channel(&c.endpoints()[0], &opts(None)).unwrap();
        let mut t = TenureClient::new(ch.clone());
        let mut l = LookupClient::new(ch.clone());
        let mut o = ObjectsClient::new(ch.clone());
        let mut e = ElectionsClient::new(ch.clone());
        let mut s = SnapshotsClient::new(ch.clone());
        let mut m = ClusterClient::new(ch);
        fn code<T>(r: Result<T, tonic::Status>) -> tonic::Code {
            match r {
                Ok(_) => tonic::Code::Ok,
                Err(s) => s.code(),
            }
        }
        fn none<T: Send + 'static>() -> tokio_stream::Iter<std::vec::IntoIter<T>> {
            tokio_stream::iter(Vec::new())
        }
        let answers = vec![
            (
                "Tenure.Write",
                code(t.write(proto::WriteRequest::default()).await),
            ),
            (
                "Tenure.Status",
                code(t.status(proto::StatusRequest {}).await),
            ),
            (
                "Tenure.Resolve",
                code(t.resolve(proto::ResolveRequest::default()).await),
            ),
            (
                "Tenure.OpenSession",
                code(t.open_session(proto::OpenSessionRequest::default()).await),
            ),
            ("Tenure.KeepAlive", code(t.keep_alive(none()).await)),
            (
                "Tenure.CloseSession",
                code(t.close_session(proto::CloseSessionRequest::default()).await),
            ),
            (
                "Tenure.Acquire",
                code(t.acquire(proto::AcquireRequest::default()).await),
            ),
            (
                "Tenure.Release",
                code(t.release(proto::ReleaseRequest::default()).await),
            ),
            (
                "Tenure.Holder",
                code(t.holder(proto::HolderRequest::default()).await),
            ),
            (
                "Tenure.ListLocks",
                code(t.list_locks(proto::ListLocksRequest::default()).await),
            ),
            ("Tenure.Session", code(t.session(none()).await)),
            (
                "Lookup.Publish",
                code(l.publish(proto::PublishRequest::default()).await),
            ),
            (
                "Lookup.Revoke",
                code(l.revoke(proto::RevokeRequest::default()).await),
            ),
            (
                "Lookup.Get",
                code(l.get(proto::GetRequest::default()).await),
            ),
            (
                "Lookup.List",
                code(l.list(proto::ListRequest::default()).await),
            ),
            ("Lookup.Watch", code(l.watch(none()).await)),
            (
                "Lookup.NodeStatus",
                code(l.node_status(proto::NodeStatusRequest::default()).await),
            ),
            (
                "Objects.Put",
                code(o.put(proto::PutObjectRequest::default()).await),
            ),
            ("Objects.Upload", code(o.upload(none()).await)),
            (
                "Objects.Get",
                code(o.get(proto::GetObjectRequest::default()).await),
            ),
            (
                "Objects.Head",
                code(o.head(proto::HeadObjectRequest::default()).await),
            ),
            (
                "Objects.Delete",
                code(o.delete(proto::DeleteObjectRequest::default()).await),
            ),
            (
                "Objects.List",
                code(o.list(proto::ListObjectsRequest::default()).await),
            ),
            (
                "Objects.Watch",
                code(o.watch(proto::WatchObjectsRequest::default()).await),
            ),
            (
                "Objects.MultipartInitiate",
                code(
                    o.multipart_initiate(proto::MultipartInitiateRequest::default())
                        .await,
                ),
            ),
            ("Objects.UploadPart", code(o.upload_part(none()).await)),
            (
                "Objects.MultipartComplete",
                code(
                    o.multipart_complete(proto::MultipartCompleteRequest::default())
                        .await,
                ),
            ),
            (
                "Objects.MultipartAbort",
                code(
                    o.multipart_abort(proto::MultipartAbortRequest::default())
                        .await,
                ),
            ),
            (
                "Elections.Campaign",
                code(e.campaign(proto::CampaignRequest::default()).await),
            ),
            (
                "Elections.Proclaim",
                code(e.proclaim(proto::ProclaimRequest::default()).await),
            ),
            (
                "Elections.Resign",
                code(e.resign(proto::ResignRequest::default()).await),
            ),
            (
                "Elections.Leader",
                code(e.leader(proto::LeaderRequest::default()).await),
            ),
            (
                "Elections.Observe",
                code(e.observe(proto::ObserveRequest::default()).await),
            ),
            (
                "Snapshots.Create",
                code(s.create(proto::CreateSnapshotRequest::default()).await),
            ),
            (
                "Snapshots.List",
                code(s.list(proto::ListSnapshotsRequest::default()).await),
            ),
            (
                "Snapshots.FetchPart",
                code(s.fetch_part(proto::FetchPartRequest::default()).await),
            ),
            (
                "Snapshots.Delete",
                code(s.delete(proto::DeleteSnapshotRequest::default()).await),
            ),
            (
                "Cluster.AddDevice",
                code(m.add_device(proto::AddDeviceRequest::default()).await),
            ),
            (
                "Cluster.RemoveDevice",
                code(m.remove_device(proto::RemoveDeviceRequest::default()).await),
            ),
            (
                "Cluster.Members",
                code(m.members(proto::MembersRequest::default()).await),
            ),
        ];
        for (rpc, code) in &answers {
            assert_eq!(*code, tonic::Code::Unauthenticated, "{rpc}");
        }
        let checked: BTreeSet<String> = answers.iter().map(|(r, _)| r.to_string()).collect();
        assert_eq!(
            checked,
            rpcs_of_the_protos(),
            "the RPCs checked are not the API's"
        );
    });
}

/// `Service.Rpc` for every `rpc` of every `.proto` file of the API.
fn rpcs_of_the_protos() -> BTreeSet<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let mut service = None;
        for line in text.lines().map(str::trim) {
            if let Some(rest) = line.strip_prefix("service ") {
                service = rest.split_whitespace().next().map(str::to_string);
            } else if let Some(rest) = line.strip_prefix("rpc ") {
                let name: String = rest.chars().take_while(|c| c.is_alphanumeric()).collect();
                out.insert(format!("{}.{name}", service.as_deref().unwrap()));
            }
        }
    }
    out
}

/// The session stream, spoken raw: the token is checked when it opens; a request the
/// token may not make is answered with the typed error, and the stream goes on.
#[test]
fn the_session_stream_refuses_a_request_and_stays_up() {
    let _turn = turn!();
    let c = Cluster::start_with(3, with_auth);
    let rt = rt();
    rt.block_on(async {
        let root = client_as(&c, Some(ROOT));
        let managers = wait_all_managed(&root, &c.endpoints(), Duration::from_secs(30)).await;
        let name = "/jobs/raw";
        let store = tenure_core::config::store_of(name, STORES);
        let (mgr, _) = managers[&store.0];
        let ep = c.cfgs[(mgr - 1) as usize].client_listen.to_string();

        // No token: the stream does not open.
        let mut anon = TenureClient::new(tenure_client::channel(&ep, &opts(None)).unwrap());
        let (_tx, rx) = tokio::sync::mpsc::channel::<proto::SessionRequest>(8);
        let r = anon
            .session(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await;
        assert_eq!(
            r.err().map(|s| s.code()),
            Some(tonic::Code::Unauthenticated)
        );

        let mut t = TenureClient::new(tenure_client::channel(&ep, &opts(Some(READER))).unwrap());
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        let mut events = t
            .session(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        let send = |id: u64, kind: Rq| {
            let tx = tx.clone();
            async move {
                tx.send(proto::SessionRequest {
                    request_id: id,
                    kind: Some(kind),
                })
                .await
                .unwrap()
            }
        };
        let mut answer = async |id: u64| loop {
            let ev = tokio::time::timeout(Duration::from_secs(10), events.message())
                .await
                .expect("an answer in time")
                .expect("the stream is up")
                .expect("the stream has not ended");
            if ev.request_id == id {
                return ev.kind.unwrap();
            }
        };
        send(
            1,
            Rq::Start(proto::StreamStart {
                store: store.0,
                resume: None,
                client_name: "auth-test".into(),
            }),
        )
        .await;
        assert!(matches!(answer(1).await, Ev::Started(_)));
        send(
            2,
            Rq::Open(proto::OpenSessionRequest {
                store: Some(store.0),
                ttl_ms: 10_000,
                ..Default::default()
            }),
        )
        .await;
        assert!(matches!(answer(2).await, Ev::Opened(_)));
        send(
            3,
            Rq::Acquire(proto::AcquireRequest {
                name: name.into(),
                r#try: true,
                ..Default::default()
            }),
        )
        .await;
        match answer(3).await {
            Ev::Error(proto::Error {
                kind: Some(Kind::PermissionDenied(p)),
                message,
            }) => {
                assert_eq!(p.token, "reader");
                assert_eq!(p.permission, "lock");
                assert_eq!(p.path, name);
                assert!(message.contains("reader"), "{message}");
            }
            other => panic!("expected PermissionDenied, got {other:?}"),
        }
        // The stream is still up: a read on it is answered, and the lock is free.
        send(4, Rq::Holder(proto::HolderRequest { name: name.into() })).await;
        match answer(4).await {
            Ev::Holders(h) => assert!(h.holders.is_empty(), "{h:?}"),
            other => panic!("expected the holders, got {other:?}"),
        }
        send(5, Rq::KeepAlive(proto::StreamKeepAlive::default())).await;
        assert!(matches!(answer(5).await, Ev::Alive(_)));
    });
}

/// Without `[auth]` nothing changes: no token is needed, and one given is ignored.
#[test]
fn without_auth_no_token_is_needed() {
    let _turn = turn!();
    let c = Cluster::start(3);
    let rt = rt();
    rt.block_on(async {
        for t in [None, Some("anything")] {
            let client = client_as(&c, t);
            wait_all_managed(&client, &c.endpoints(), Duration::from_secs(30)).await;
            let g = client
                .lock("/free/for/all", LockMode::Exclusive, Wait::Try)
                .await
                .unwrap();
            g.release().await.unwrap();
            client.objects().put("/free/x", &b"x"[..]).await.unwrap();
        }
    });
}
