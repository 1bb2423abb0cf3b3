//! The session stream (`rpc Session`, DESIGN §8) against an in-process cluster, spoken
//! raw: pipelined requests answered by id in any order, typed errors for bad input with
//! the stream kept up (and nothing changed), flow control, a device that does not manage
//! the store serving it, and pushed session events.

use crate::common::*;
use std::time::Duration;
use tenure_client::proto::{
    self, error::Kind, session_event::Kind as Ev, session_request::Kind as Rq,
    tenure_client::TenureClient,
};
use tenure_core::config::store_of;
use tokio::sync::mpsc;

/// One raw session stream.
struct Raw {
    tx: mpsc::Sender<proto::SessionRequest>,
    rx: tonic::Streaming<proto::SessionEvent>,
}

impl Raw {
    async fn open(endpoint: &str) -> Raw {
        let mut c = TenureClient::connect(format!("http://{endpoint}"))
            .await
            .unwrap()
            .max_encoding_message_size(4 << 20);
        let (tx, rx) = mpsc::channel(1024);
        let rx = c
            .session(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        Raw { tx, rx }
    }

    async fn send(&self, id: u64, kind: Rq) {
        self.send_raw(proto::SessionRequest {
            request_id: id,
            kind: Some(kind),
        })
        .await
    }

    async fn send_raw(&self, r: proto::SessionRequest) {
        self.tx.send(r).await.unwrap();
    }

    /// The next event (bounded wait).
    async fn next(&mut self) -> proto::SessionEvent {
        tokio::time::timeout(Duration::from_secs(10), self.rx.message())
            .await
            .expect("an event in time")
            .expect("the stream is up")
            .expect("the stream has not ended")
    }

    /// The next event that answers `id` (pushed events and other answers are returned
    /// in `others`).
    async fn answer(&mut self, id: u64, others: &mut Vec<proto::SessionEvent>) -> Ev {
        loop {
            let ev = self.next().await;
            if ev.request_id == id {
                return ev.kind.expect("an answer has a kind");
            }
            others.push(ev);
        }
    }

    /// Start on `store` without a session.
    async fn started(mut self, store: u32) -> Raw {
        self.send(1, Rq::Start(start(store, None))).await;
        assert!(matches!(self.answer(1, &mut vec![]).await, Ev::Started(_)));
        self
    }

    /// Start on `store` and open a session with `ttl_ms`: the session id.
    async fn start_with_session(&mut self, store: u32, ttl_ms: u64) -> u64 {
        self.send(1, Rq::Start(start(store, None))).await;
        assert!(matches!(self.answer(1, &mut vec![]).await, Ev::Started(_)));
        self.send(
            2,
            Rq::Open(proto::OpenSessionRequest {
                store: Some(store),
                ttl_ms,
                ..Default::default()
            }),
        )
        .await;
        match self.answer(2, &mut vec![]).await {
            Ev::Opened(o) => o.session.unwrap().id,
            other => panic!("open answered {other:?}"),
        }
    }
}

fn start(store: u32, resume: Option<u64>) -> proto::StreamStart {
    proto::StreamStart {
        store,
        resume,
        client_name: "test".into(),
    }
}

fn acquire(name: &str, wait: bool) -> Rq {
    Rq::Acquire(proto::AcquireRequest {
        name: name.into(),
        mode: proto::LockMode::Exclusive as i32,
        r#try: !wait,
        ..Default::default()
    })
}

fn holder(name: &str) -> Rq {
    Rq::Holder(proto::HolderRequest { name: name.into() })
}

fn error_kind(ev: &Ev) -> &Kind {
    match ev {
        Ev::Error(proto::Error { kind: Some(k), .. }) => k,
        other => panic!("expected a typed error, got {other:?}"),
    }
}

/// The store of the names under `/x`, and the client endpoint of its manager (and of a
/// device that does not manage it).
async fn placement(cluster: &Cluster) -> (u32, String, String) {
    let eps = cluster.endpoints();
    let c = client(eps.clone());
    let managed = wait_all_managed(&c, &eps, Duration::from_secs(30)).await;
    let store = store_of("/x", STORES).0;
    let (dev, _) = managed[&store];
    let manager = cluster.cfgs[dev as usize - 1].client_listen.to_string();
    let other = cluster
        .cfgs
        .iter()
        .find(|c| c.id != dev)
        .unwrap()
        .client_listen
        .to_string();
    (store, manager, other)
}

/// Requests pipelined on one stream are answered by id, in the order the store decides:
/// a wait queued behind another session's lock is answered after a read sent later.
#[test]
fn pipelined_requests_are_answered_by_id_in_any_order() {
    let _turn = turn!();
    let cluster = Cluster::start(3);
    rt().block_on(async {
        let (store, manager, _) = placement(&cluster).await;
        let mut a = Raw::open(&manager).await;
        let mut b = Raw::open(&manager).await;
        a.start_with_session(store, 10_000).await;
        let sb = b.start_with_session(store, 10_000).await;
        a.send(3, acquire("/x/held", false)).await;
        assert!(matches!(a.answer(3, &mut vec![]).await, Ev::Granted(_)));
        // b: a wait (id 3); then reads until the wait shows in the queue (requests on a
        // stream run concurrently: a read does not wait for an earlier change), a try on
        // a free name and a keep-alive, all answered while the wait goes on.
        b.send(3, acquire("/x/held", true)).await;
        let mut id = 10;
        loop {
            id += 1;
            b.send(id, holder("/x/held")).await;
            let mut others = Vec::new();
            let Ev::Holders(h) = b.answer(id, &mut others).await else {
                panic!("a read answered otherwise");
            };
            assert!(others.is_empty(), "{others:?}");
            if h.waiters.len() == 1 {
                assert_eq!(h.waiters[0].id, sb);
                break;
            }
            assert!(id < 200, "the wait never showed in the queue");
        }
        b.send(5, acquire("/x/free", false)).await;
        b.send(6, Rq::KeepAlive(proto::StreamKeepAlive {})).await;
        let mut order = Vec::new();
        for _ in 0..2 {
            let ev = b.next().await;
            order.push(ev.request_id);
            match (ev.request_id, ev.kind.unwrap()) {
                (5, Ev::Granted(_)) | (6, Ev::Alive(_)) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(
            !order.contains(&3),
            "the wait is not answered yet: {order:?}"
        );
        // a releases: b's wait is granted now, answered with its id.
        a.send(
            4,
            Rq::Release(proto::ReleaseRequest {
                name: "/x/held".into(),
                ..Default::default()
            }),
        )
        .await;
        assert!(matches!(a.answer(4, &mut vec![]).await, Ev::Released(_)));
        match b.answer(3, &mut vec![]).await {
            Ev::Granted(g) => assert_eq!(g.name, "/x/held"),
            other => panic!("the wait answered {other:?}"),
        }
    });
}

/// Bad input on one request gets a typed error on that request; the stream stays up and
/// nothing changes. A frame too large to decode closes the stream with a reason.
#[test]
fn bad_input_gets_typed_errors_and_the_stream_stays_up() {
    let _turn = turn!();
    let cluster = Cluster::start(3);
    rt().block_on(async {
        let (store, manager, _) = placement(&cluster).await;
        // Before `start`: refused, the stream stays up and can start.
        let mut s = Raw::open(&manager).await;
        s.send(1, holder("/x/a")).await;
        assert!(matches!(
            error_kind(&s.answer(1, &mut vec![]).await),
            Kind::InvalidRequest(_)
        ));
        s.send(
            2,
            Rq::Start(proto::StreamStart {
                store: STORES + 3,
                ..start(0, None)
            }),
        )
        .await;
        assert!(matches!(
            error_kind(&s.answer(2, &mut vec![]).await),
            Kind::UnknownStore(_)
        ));
        let mut s = Raw::open(&manager).await;
        s.start_with_session(store, 10_000).await;
        let mut id = 10;
        let mut expect = async |s: &mut Raw, r: proto::SessionRequest, what: &str| {
            id += 1;
            let rid = r.request_id;
            s.send_raw(r).await;
            let ev = s.answer(rid, &mut vec![]).await;
            let k = error_kind(&ev).clone();
            // The stream is still up: a read on it is answered.
            s.send(1000 + id, holder("/x/a")).await;
            assert!(
                matches!(s.answer(1000 + id, &mut vec![]).await, Ev::Holders(_)),
                "{what}"
            );
            k
        };
        // Request id 0.
        let k = expect(
            &mut s,
            proto::SessionRequest {
                request_id: 0,
                kind: Some(holder("/x/a")),
            },
            "id 0",
        )
        .await;
        assert!(matches!(k, Kind::InvalidRequest(_)), "{k:?}");
        // No kind (also what an unknown kind decodes to).
        let k = expect(
            &mut s,
            proto::SessionRequest {
                request_id: 20,
                kind: None,
            },
            "no kind",
        )
        .await;
        assert!(matches!(k, Kind::InvalidRequest(_)), "{k:?}");
        // A session of another store, named, runs under its child here (a client's one
        // session, its home elsewhere); one that does not exist has expired.
        let other = (0..STORES).find(|s| *s != store).unwrap();
        let k = expect(
            &mut s,
            proto::SessionRequest {
                request_id: 21,
                kind: Some(Rq::Acquire(proto::AcquireRequest {
                    session: Some(proto::SessionRef {
                        store: other,
                        id: 1 << 40,
                    }),
                    name: "/x/q".into(),
                    r#try: true,
                    ..Default::default()
                })),
            },
            "a session of another store",
        )
        .await;
        assert!(matches!(k, Kind::SessionExpired(_)), "{k:?}");
        // Opening a session in another store than the stream's.
        let k = expect(
            &mut Raw::open(&manager).await.started(store).await,
            proto::SessionRequest {
                request_id: 25,
                kind: Some(Rq::Open(proto::OpenSessionRequest {
                    store: Some(other),
                    ttl_ms: 10_000,
                    ..Default::default()
                })),
            },
            "open in another store",
        )
        .await;
        assert!(matches!(k, Kind::WrongStore(_)), "{k:?}");
        // A second `start`.
        let k = expect(
            &mut s,
            proto::SessionRequest {
                request_id: 22,
                kind: Some(Rq::Start(start(store, None))),
            },
            "start twice",
        )
        .await;
        assert!(matches!(k, Kind::InvalidRequest(_)), "{k:?}");
        // Oversized (over the request limit, under the frame limit).
        let k = expect(
            &mut s,
            proto::SessionRequest {
                request_id: 23,
                kind: Some(acquire(&format!("/x/{}", "n".repeat(100_000)), false)),
            },
            "oversized",
        )
        .await;
        assert!(matches!(k, Kind::TooLarge(_)), "{k:?}");
        // An id reused for another request: a wait is in flight under id 30 (its lock is
        // held by another session), then id 30 names another lock.
        let mut other_session = Raw::open(&manager).await;
        other_session.start_with_session(store, 10_000).await;
        other_session.send(3, acquire("/x/busy", false)).await;
        assert!(matches!(
            other_session.answer(3, &mut vec![]).await,
            Ev::Granted(_)
        ));
        s.send(30, acquire("/x/busy", true)).await;
        let k = expect(
            &mut s,
            proto::SessionRequest {
                request_id: 30,
                kind: Some(acquire("/x/else", false)),
            },
            "reused id",
        )
        .await;
        assert!(matches!(k, Kind::RequestIdReused(_)), "{k:?}");
        // Nothing changed: the session holds nothing and /x/else is free.
        s.send(40, holder("/x/else")).await;
        match s.answer(40, &mut vec![]).await {
            Ev::Holders(h) => assert!(h.holders.is_empty()),
            other => panic!("{other:?}"),
        }
        // A frame over the decode limit ends the stream, with a reason.
        s.send(50, acquire(&format!("/x/{}", "n".repeat(2 << 20)), false))
            .await;
        let mut ended = false;
        for _ in 0..4 {
            match tokio::time::timeout(Duration::from_secs(10), s.rx.message()).await {
                Ok(Ok(Some(proto::SessionEvent {
                    kind: Some(Ev::StreamClosed(c)),
                    ..
                }))) => {
                    assert!(!c.reason.is_empty());
                    ended = true;
                    break;
                }
                Ok(Ok(Some(_))) => continue,
                Ok(Ok(None)) | Ok(Err(_)) => {
                    ended = true;
                    break;
                }
                Err(_) => panic!("the stream neither closed nor answered"),
            }
        }
        assert!(ended);
    });
}

/// Flow control: one request more than the server runs at once is refused with
/// `TooManyRequests` (and not run); the others are answered.
#[test]
fn one_request_over_the_window_is_refused() {
    let _turn = turn!();
    let cluster = Cluster::start(3);
    rt().block_on(async {
        let (store, manager, _) = placement(&cluster).await;
        let mut a = Raw::open(&manager).await;
        a.start_with_session(store, 30_000).await;
        a.send(3, acquire("/x", false)).await;
        assert!(matches!(a.answer(3, &mut vec![]).await, Ev::Granted(_)));
        let mut b = Raw::open(&manager).await;
        let started = b.start_with_session(store, 30_000).await;
        assert!(started > 0);
        // Every wait is covered by a's lock on /x, so they stay in flight.
        const WINDOW: u64 = tenure_server::stream::MAX_IN_FLIGHT as u64;
        for i in 0..=WINDOW {
            b.send(100 + i, acquire(&format!("/x/{i}"), true)).await;
        }
        match b.next().await {
            proto::SessionEvent {
                request_id,
                kind:
                    Some(Ev::Error(proto::Error {
                        kind: Some(Kind::TooManyRequests(t)),
                        ..
                    })),
            } => {
                assert_eq!(request_id, 100 + WINDOW);
                assert_eq!(t.limit as u64, WINDOW);
            }
            other => panic!("expected TooManyRequests, got {other:?}"),
        }
        a.send(
            4,
            Rq::Release(proto::ReleaseRequest {
                name: "/x".into(),
                ..Default::default()
            }),
        )
        .await;
        let mut granted = 0;
        while granted < WINDOW {
            match b.next().await.kind {
                Some(Ev::Granted(_)) => granted += 1,
                other => panic!("expected a grant, got {other:?}"),
            }
        }
    });
}

/// Any device serves the stream (DESIGN §8): a device that does not manage the store
/// resumes the session and serves its requests through the manager, and carries a
/// watch from the manager, values included; the session resumes at the manager too.
#[test]
fn a_non_manager_serves_the_stream_and_carries_a_watch_from_the_manager() {
    let _turn = turn!();
    let cluster = Cluster::start(3);
    rt().block_on(async {
        let (store, manager, other) = placement(&cluster).await;
        let mut m = Raw::open(&manager).await;
        let session = m.start_with_session(store, 10_000).await;
        let mut s = Raw::open(&other).await;
        s.send(1, Rq::Start(start(store, Some(session)))).await;
        match s.answer(1, &mut vec![]).await {
            Ev::Started(st) => assert_eq!(st.session.unwrap().session.unwrap().id, session),
            other => panic!("expected the session resumed through the manager, got {other:?}"),
        }
        s.send(2, acquire("/x/forwarded", false)).await;
        match s.answer(2, &mut vec![]).await {
            Ev::Granted(g) => assert!(g.token.is_some()),
            other => panic!("expected a grant through the manager, got {other:?}"),
        }
        // A watch there is carried from the manager (DESIGN §8): answered `watching`,
        // then a put through the manager arrives on this stream, with its value.
        let watch = proto::WatchObjects {
            watch: 1,
            prefix: "/x".into(),
            after: None,
            include_values: true,
        };
        s.send(3, Rq::WatchObjects(watch)).await;
        match s.answer(3, &mut vec![]).await {
            Ev::Watching(w) => assert_eq!(w.watch, 1),
            other => panic!("expected the watch carried, got {other:?}"),
        }
        let mut objects =
            proto::objects_client::ObjectsClient::connect(format!("http://{manager}"))
                .await
                .unwrap();
        let put = proto::PutObjectRequest {
            key: "/x/watched".into(),
            data: b"seen".to_vec().into(),
            ..Default::default()
        };
        let written = objects.put(put).await.unwrap().into_inner();
        assert!(written.result.is_some(), "{written:?}");
        let events = loop {
            match s.next().await.kind {
                Some(Ev::ObjectEvents(e)) => break e,
                Some(Ev::Expiring(_)) => {}
                other => panic!("expected the watch's events, got {other:?}"),
            }
        };
        assert_eq!(events.watch, 1);
        assert_eq!(events.changes[0].key, "/x/watched");
        assert_eq!(events.changes[0].value.as_deref(), Some(&b"seen"[..]));
        // Resumed on the manager: the start answers with the session's lease.
        let mut r = Raw::open(&manager).await;
        r.send(1, Rq::Start(start(store, Some(session)))).await;
        match r.answer(1, &mut vec![]).await {
            Ev::Started(st) => {
                let alive = st.session.unwrap();
                assert_eq!(alive.session.unwrap().id, session);
                assert!(alive.ttl_ms > 0);
            }
            other => panic!("{other:?}"),
        }
        // A session that does not exist: SessionExpired naming it, and the stream can
        // start anew.
        r = Raw::open(&manager).await;
        r.send(1, Rq::Start(start(store, Some(session + 999))))
            .await;
        match error_kind(&r.answer(1, &mut vec![]).await) {
            Kind::SessionExpired(x) => assert_eq!(x.session, session + 999),
            other => panic!("{other:?}"),
        }
    });
}

/// One session per client on the stream (DESIGN §4): names of other stores than the
/// stream's are served under its session (by its child there), a watch of another
/// store's prefix is carried, and closing the session frees the locks everywhere.
#[test]
fn one_session_serves_names_of_every_store() {
    let _turn = turn!();
    let cluster = Cluster::start(3);
    rt().block_on(async {
        let (store, manager, _) = placement(&cluster).await;
        let elsewhere: Vec<String> = (0..200)
            .map(|i| format!("/e{i}"))
            .filter(|n| store_of(n, STORES).0 != store)
            .take(2)
            .collect();
        let (lock, watched) = (format!("{}/l", elsewhere[0]), elsewhere[1].clone());
        let mut s = Raw::open(&manager).await;
        s.start_with_session(store, 10_000).await;
        s.send(3, acquire(&lock, false)).await;
        assert!(
            matches!(s.answer(3, &mut vec![]).await, Ev::Granted(_)),
            "a lock of another store under the stream's session"
        );
        s.send(4, holder(&lock)).await;
        match s.answer(4, &mut vec![]).await {
            Ev::Holders(h) => {
                let held_by = h.holders[0].session.unwrap();
                assert_eq!(held_by.store, store_of(&lock, STORES).0, "by the child");
            }
            other => panic!("{other:?}"),
        }
        let watch = proto::WatchObjects {
            watch: 7,
            prefix: watched.clone(),
            after: None,
            include_values: true,
        };
        s.send(5, Rq::WatchObjects(watch)).await;
        assert!(matches!(s.answer(5, &mut vec![]).await, Ev::Watching(_)));
        let mut objects =
            proto::objects_client::ObjectsClient::connect(format!("http://{manager}"))
                .await
                .unwrap();
        let put = proto::PutObjectRequest {
            key: format!("{watched}/k"),
            data: b"v".to_vec().into(),
            ..Default::default()
        };
        let written = objects.put(put).await.unwrap().into_inner();
        assert!(written.result.is_some(), "{written:?}");
        let events = loop {
            match s.next().await.kind {
                Some(Ev::ObjectEvents(e)) => break e,
                Some(Ev::Expiring(_)) => {}
                other => panic!("expected the watch's events, got {other:?}"),
            }
        };
        assert_eq!(
            (events.watch, events.changes[0].key.clone()),
            (7, format!("{watched}/k"))
        );
        s.send(6, Rq::Close(proto::StreamClose {})).await;
        assert!(matches!(s.answer(6, &mut vec![]).await, Ev::Closed(_)));
        let mut t = Raw::open(&manager).await;
        t.send(1, Rq::Start(start(store, None))).await;
        assert!(matches!(t.answer(1, &mut vec![]).await, Ev::Started(_)));
        t.send(2, holder(&lock)).await;
        match t.answer(2, &mut vec![]).await {
            Ev::Holders(h) => assert!(h.holders.is_empty(), "freed by the close: {h:?}"),
            other => panic!("{other:?}"),
        }
    });
}

/// Pushed events: a session left without keep-alives is warned (`expiring`) and then
/// told it ended (`ended`, expired); a session closed from another stream is told too.
#[test]
fn session_expiry_and_close_are_pushed() {
    let _turn = turn!();
    let cluster = Cluster::start(3);
    rt().block_on(async {
        let (store, manager, _) = placement(&cluster).await;
        let mut s = Raw::open(&manager).await;
        let id = s.start_with_session(store, 600).await;
        let mut seen = Vec::new();
        loop {
            let ev = s.next().await;
            assert_eq!(ev.request_id, 0);
            match ev.kind.unwrap() {
                Ev::Expiring(e) => {
                    assert_eq!(e.session, id);
                    seen.push("expiring");
                }
                Ev::Ended(e) => {
                    assert_eq!(e.session, id);
                    assert!(e.expired);
                    seen.push("ended");
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(seen, ["expiring", "ended"]);
        // Requests that need the session are refused now.
        s.send(9, acquire("/x/a", false)).await;
        assert!(matches!(
            error_kind(&s.answer(9, &mut vec![]).await),
            Kind::InvalidRequest(_)
        ));
        // Closed from another stream (an operator's view of the same session).
        let mut a = Raw::open(&manager).await;
        let id = a.start_with_session(store, 10_000).await;
        let mut b = Raw::open(&manager).await;
        b.send(1, Rq::Start(start(store, Some(id)))).await;
        assert!(matches!(b.answer(1, &mut vec![]).await, Ev::Started(_)));
        b.send(2, Rq::Close(proto::StreamClose {})).await;
        assert!(matches!(b.answer(2, &mut vec![]).await, Ev::Closed(_)));
        loop {
            match a.next().await.kind.unwrap() {
                Ev::Ended(e) => {
                    assert_eq!(e.session, id);
                    assert!(!e.expired);
                    break;
                }
                Ev::Expiring(_) => {}
                other => panic!("{other:?}"),
            }
        }
    });
}

/// A request the device has no place for is answered `Overloaded` on the stream and not
/// run; the stream stays up, the session stays bound, and the request sent again later
/// runs (admission, DESIGN §8). With no wait for a place, to see the refusals.
#[test]
fn an_overloaded_request_is_answered_and_the_stream_stays_up() {
    let _turn = turn!();
    let cluster = Cluster::start_with(3, |c| {
        c.max_client_requests = 1;
        c.stream_admission_wait_ms = 0;
    });
    rt().block_on(async {
        let (store, manager, _) = placement(&cluster).await;
        let mut a = Raw::open(&manager).await;
        let session = a.start_with_session(store, 30_000).await;
        // Try-acquires are admitted one at a time here; pipelined, most find no place.
        const N: u64 = 16;
        for i in 0..N {
            a.send(100 + i, acquire(&format!("/x/{i}"), false)).await;
        }
        let mut refused = Vec::new();
        for _ in 0..N {
            let ev = a.next().await;
            match ev.kind.expect("an answer has a kind") {
                Ev::Granted(_) => {}
                Ev::Error(proto::Error {
                    kind: Some(Kind::Overloaded(o)),
                    message,
                }) => {
                    assert_eq!(o.limit, 1, "{message}");
                    assert!(message.contains("overloaded"), "{message}");
                    refused.push(ev.request_id - 100);
                }
                other => panic!("expected a grant or Overloaded, got {other:?}"),
            }
        }
        assert!(!refused.is_empty(), "{N} pipelined try-acquires, one place");
        // Not run: nobody holds a refused name. Sent again one by one, each is granted,
        // on the same stream and session.
        for (k, i) in refused.iter().enumerate() {
            let name = format!("/x/{i}");
            let id = 1_000 + 2 * k as u64;
            a.send(id, holder(&name)).await;
            match a.answer(id, &mut vec![]).await {
                Ev::Holders(h) => assert!(h.holders.is_empty(), "{name}: {h:?}"),
                other => panic!("holder answered {other:?}"),
            }
            a.send(id + 1, acquire(&name, false)).await;
            match a.answer(id + 1, &mut vec![]).await {
                Ev::Granted(g) => assert_eq!(g.name, name),
                other => panic!("{name}: the retry answered {other:?}"),
            }
        }
        a.send(5_000, Rq::KeepAlive(proto::StreamKeepAlive {}))
            .await;
        match a.answer(5_000, &mut vec![]).await {
            Ev::Alive(s) => assert_eq!(s.session.map(|r| r.id), Some(session)),
            other => panic!("keep-alive answered {other:?}"),
        }
    });
}

/// Pipelined requests beyond the device's places wait for one in turn (within
/// `stream_admission_wait_ms`) and all run.
#[test]
fn stream_requests_wait_in_turn_for_a_place() {
    let _turn = turn!();
    let cluster = Cluster::start_with(3, |c| c.max_client_requests = 1);
    rt().block_on(async {
        let (store, manager, _) = placement(&cluster).await;
        let mut a = Raw::open(&manager).await;
        a.start_with_session(store, 30_000).await;
        const N: u64 = 16;
        for i in 0..N {
            a.send(100 + i, acquire(&format!("/x/turn{i}"), false))
                .await;
        }
        for _ in 0..N {
            match a.next().await.kind {
                Some(Ev::Granted(_)) => {}
                other => panic!("expected a grant, got {other:?}"),
            }
        }
    });
}

/// The client sends a request answered `Overloaded` again after a pause, on the same
/// stream, so every try-acquire lands; a client allowed one attempt gets the typed error.
#[test]
fn the_client_retries_overloaded_stream_requests() {
    let _turn = turn!();
    let cluster = Cluster::start_with(3, |c| {
        c.max_client_requests = 1;
        c.stream_admission_wait_ms = 0;
    });
    let eps = cluster.endpoints();
    rt().block_on(async {
        let c = client(eps.clone());
        wait_all_managed(&c, &eps, Duration::from_secs(30)).await;
        let locks = (0..32).map(|i| {
            let c = c.clone();
            async move {
                c.lock(
                    &format!("/x/many{i}"),
                    tenure_client::LockMode::Exclusive,
                    tenure_client::Wait::Try,
                )
                .await
            }
        });
        let guards: Vec<_> = futures::future::join_all(locks)
            .await
            .into_iter()
            .map(|r| r.expect("retried through the overload"))
            .collect();
        assert_eq!(guards.len(), 32);
        let once = tenure_client::Client::with_options(
            eps.clone(),
            tenure_client::ClientOptions {
                max_attempts: 1,
                ..Default::default()
            },
        )
        .unwrap();
        let locks = (0..32).map(|i| {
            let once = once.clone();
            async move {
                once.lock(
                    &format!("/x/once{i}"),
                    tenure_client::LockMode::Exclusive,
                    tenure_client::Wait::Try,
                )
                .await
            }
        });
        let results = futures::future::join_all(locks).await;
        let refused = results
            .iter()
            .filter(|r| matches!(r, Err(tenure_client::Error::Overloaded(m)) if m.contains("overloaded")))
            .count();
        assert!(refused > 0, "32 try-acquires at once, one place, one attempt");
        // The others were granted: the stream carried them after the refusals.
        let errors: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
        assert_eq!(errors.len(), refused, "{errors:?}");
    });
}
