//! The client's lookup paths against scripted fake devices on 127.0.0.1: each fake
//! answers `service Lookup` calls as its script says (publish answers, watch events, a
//! stream that breaks), and records what it was sent, so each path is driven exactly:
//! a sequence gap makes the watch ask for a sync; a broken stream is resumed on another
//! endpoint with the same subscription id and position; a publish handle applies a
//! meta-update; a persistent publish is retried over `NoLeader` and a failing endpoint
//! until acknowledged.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tenure_client::lookup::{PublishOptions, Removal, WatchChange};
use tenure_client::proto::lookup_server::{Lookup, LookupServer};
use tenure_client::proto::{self, watch_event_msg::Event as E, watch_response::Kind as Ev};
use tenure_client::{Client, ClientOptions};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

type Stream<T> = Pin<Box<dyn tokio_stream::Stream<Item = Result<T, Status>> + Send>>;

/// What a fake does when a Watch stream sends `subscribe`.
#[derive(Clone, Debug)]
enum Act {
    /// Send this.
    Send(Ev),
    /// End the stream with an error (the device went away).
    Break,
}

/// What a fake answers a publish.
#[derive(Clone, Debug)]
enum Pub {
    /// A transport-level failure.
    Fail,
    /// No leader answered.
    NoLeader,
    /// Published, acknowledged or not, with an optional meta-update.
    Ok(bool, Option<proto::Meta>),
}

#[derive(Default)]
struct Script {
    /// Per fake: the reaction to each subscribe, in order (none left: `subscribed`).
    watch: [Mutex<VecDeque<Vec<Act>>>; 2],
    /// Per fake: the answer to each publish, in order (none left: acknowledged if
    /// persistent).
    publish: [Mutex<VecDeque<Pub>>; 2],
    /// What each fake was sent, with when.
    subscribes: Mutex<Vec<(usize, proto::Subscribe)>>,
    publishes: Mutex<Vec<(usize, Instant, proto::PublishRequest)>>,
}

#[derive(Clone)]
struct Fake {
    me: usize,
    script: Arc<Script>,
}

fn published(acked: bool, meta: Option<proto::Meta>) -> proto::PublishResponse {
    proto::PublishResponse {
        result: Some(proto::publish_response::Result::Ok(proto::Published {
            acked,
            meta,
        })),
    }
}

#[tonic::async_trait]
impl Lookup for Fake {
    async fn publish(
        &self,
        r: Request<proto::PublishRequest>,
    ) -> Result<Response<proto::PublishResponse>, Status> {
        let r = r.into_inner();
        let persistent = r.durability == proto::Durability::Persistent as i32;
        self.script
            .publishes
            .lock()
            .unwrap()
            .push((self.me, Instant::now(), r));
        let step = self.script.publish[self.me].lock().unwrap().pop_front();
        match step {
            Some(Pub::Fail) => Err(Status::unavailable("scripted failure")),
            Some(Pub::NoLeader) => Ok(Response::new(proto::PublishResponse {
                result: Some(proto::publish_response::Result::Error(proto::LookupError {
                    kind: Some(proto::lookup_error::Kind::NoLeader(proto::NoLeader {})),
                    message: "no leader".into(),
                })),
            })),
            Some(Pub::Ok(acked, meta)) => Ok(Response::new(published(acked, meta))),
            None => Ok(Response::new(published(persistent, None))),
        }
    }

    async fn revoke(
        &self,
        _r: Request<proto::RevokeRequest>,
    ) -> Result<Response<proto::RevokeResponse>, Status> {
        Ok(Response::new(proto::RevokeResponse {
            result: Some(proto::revoke_response::Result::Ok(proto::Revoked {
                acked: true,
            })),
        }))
    }

    async fn get(
        &self,
        _r: Request<proto::GetRequest>,
    ) -> Result<Response<proto::GetResponse>, Status> {
        Err(Status::unimplemented("not scripted"))
    }

    async fn list(
        &self,
        _r: Request<proto::ListRequest>,
    ) -> Result<Response<proto::ListResponse>, Status> {
        Err(Status::unimplemented("not scripted"))
    }

    type WatchStream = Stream<proto::WatchResponse>;

    async fn watch(
        &self,
        r: Request<tonic::Streaming<proto::WatchRequest>>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let mut inbound = r.into_inner();
        let (tx, rx) = mpsc::channel(64);
        let me = self.me;
        let script = self.script.clone();
        tokio::spawn(async move {
            while let Ok(Some(m)) = inbound.message().await {
                let Some(proto::watch_request::Kind::Subscribe(s)) = m.kind else {
                    continue;
                };
                let sub = s.sub;
                script.subscribes.lock().unwrap().push((me, s));
                let acts = script.watch[me]
                    .lock()
                    .unwrap()
                    .pop_front()
                    .unwrap_or_default();
                let answer = proto::WatchResponse {
                    request_id: m.request_id,
                    kind: Some(Ev::Subscribed(sub)),
                };
                if tx.send(Ok(answer)).await.is_err() {
                    return;
                }
                for a in acts {
                    let msg = match a {
                        Act::Send(Ev::Event(mut ev)) => {
                            ev.sub = sub;
                            Ok(proto::WatchResponse {
                                request_id: 0,
                                kind: Some(Ev::Event(ev)),
                            })
                        }
                        Act::Send(kind) => Ok(proto::WatchResponse {
                            request_id: 0,
                            kind: Some(kind),
                        }),
                        Act::Break => Err(Status::unavailable("device went away")),
                    };
                    let end = msg.is_err();
                    if tx.send(msg).await.is_err() || end {
                        return;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn node_status(
        &self,
        _r: Request<proto::NodeStatusRequest>,
    ) -> Result<Response<proto::NodeStatusResponse>, Status> {
        Err(Status::unimplemented("not scripted"))
    }
}

async fn start_fakes(script: Arc<Script>) -> Vec<String> {
    let mut eps = Vec::new();
    for me in 0..2 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        eps.push(listener.local_addr().unwrap().to_string());
        let fake = Fake {
            me,
            script: script.clone(),
        };
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(LookupServer::new(fake))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await
                .unwrap();
        });
    }
    eps
}

fn client(eps: Vec<String>) -> Client {
    let opts = ClientOptions {
        request_timeout: Duration::from_secs(2),
        retry_deadline: Duration::from_secs(10),
        attempt_timeout: Duration::from_millis(500),
        ..Default::default()
    };
    Client::with_options(eps, opts).unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn leader(device: u64) -> Option<proto::LeaderRef> {
    Some(proto::LeaderRef {
        start_micros: device * 1000,
        device,
    })
}

fn entry(key: &str, stamp: u64) -> proto::LookupEntry {
    proto::LookupEntry {
        key: key.into(),
        value: format!("v{stamp}").into_bytes(),
        version: Some(proto::EntryVersion { stamp, provider: 9 }),
        interval_ms: 1000,
        durability: proto::Durability::Volatile as i32,
        age_ms: 0,
    }
}

fn event(device: u64, seq: u64, e: E) -> Act {
    Act::Send(Ev::Event(proto::WatchEventMsg {
        sub: 0,
        leader: leader(device),
        seq,
        event: Some(e),
    }))
}

fn sync(device: u64, entries: Vec<proto::LookupEntry>) -> Act {
    event(device, 1, E::Sync(proto::Sync { entries }))
}

async fn next(w: &mut tenure_client::lookup::Watcher) -> WatchChange {
    tokio::time::timeout(Duration::from_secs(5), w.next_change())
        .await
        .expect("a change in time")
        .expect("running")
        .expect("no error")
}

fn put(key: &str, stamp: u64) -> WatchChange {
    let e = tenure_client::lookup::convert::entry_from_proto(entry(key, stamp));
    WatchChange::Put(e)
}

#[test]
fn a_sequence_gap_makes_the_watch_ask_for_a_sync() {
    let _turn = turn!();
    let script = Arc::new(Script::default());
    rt().block_on(async {
        let eps = start_fakes(script.clone()).await;
        script.watch[0].lock().unwrap().extend([
            vec![
                sync(1, vec![entry("/s/a", 1)]),
                event(1, 2, E::Put(entry("/s/b", 1))),
                // Event 3 (the removal of /s/a) is lost.
                event(1, 4, E::Put(entry("/s/c", 1))),
            ],
            // The resubscribe without a position gets a sync.
            vec![sync(1, vec![entry("/s/b", 1), entry("/s/c", 1)])],
        ]);
        let c = client(eps);
        let mut w = c.watch("/s").unwrap();
        assert_eq!(next(&mut w).await, put("/s/a", 1));
        assert_eq!(next(&mut w).await, put("/s/b", 1));
        // /s/c arrives through the sync, with the lost removal of /s/a.
        assert_eq!(next(&mut w).await, put("/s/c", 1));
        assert_eq!(
            next(&mut w).await,
            WatchChange::Removed {
                key: "/s/a".into(),
                cause: Removal::Resync
            }
        );
        let subs = script.subscribes.lock().unwrap().clone();
        assert_eq!(subs.len(), 2, "{subs:?}");
        assert!(subs[0].1.position.is_none(), "first registration");
        assert!(
            subs[1].1.position.is_none(),
            "the resubscribe forces a sync"
        );
        assert_eq!(subs[0].1.sub, subs[1].1.sub);
        assert_eq!(w.counts().1, 1, "one resync");
    });
}

#[test]
fn a_broken_stream_is_resumed_on_another_endpoint_with_the_same_subscription() {
    let _turn = turn!();
    let script = Arc::new(Script::default());
    rt().block_on(async {
        let eps = start_fakes(script.clone()).await;
        script.watch[0].lock().unwrap().push_back(vec![
            sync(1, vec![entry("/s/a", 1), entry("/s/b", 1)]),
            event(1, 2, E::Put(entry("/s/a", 2))),
            Act::Break,
        ]);
        // The other device: the nodes moved the subscription there; its leader syncs.
        script.watch[1]
            .lock()
            .unwrap()
            .push_back(vec![sync(1, vec![entry("/s/a", 2), entry("/s/d", 1)])]);
        let c = client(eps.clone());
        let mut w = c.watch("/s").unwrap();
        assert_eq!(next(&mut w).await, put("/s/a", 1));
        assert_eq!(next(&mut w).await, put("/s/b", 1));
        assert_eq!(next(&mut w).await, put("/s/a", 2));
        assert_eq!(next(&mut w).await, put("/s/d", 1));
        assert_eq!(
            next(&mut w).await,
            WatchChange::Removed {
                key: "/s/b".into(),
                cause: Removal::Resync
            }
        );
        let subs = script.subscribes.lock().unwrap().clone();
        assert_eq!(subs.len(), 2, "{subs:?}");
        assert_eq!(subs[1].0, 1, "resumed on the other endpoint");
        assert_eq!(subs[1].1.sub, subs[0].1.sub, "same subscription id");
        let pos = subs[1].1.position.expect("with its position");
        assert_eq!((pos.leader, pos.seq), (leader(1), 2));
        assert_eq!(w.endpoint().unwrap(), format!("http://{}", eps[1]));
        // Refreshed every interval with its position, on the new stream.
        let started = Instant::now();
        while script.subscribes.lock().unwrap().len() < 3 {
            assert!(started.elapsed() < Duration::from_secs(5), "no refresh");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let refresh = script.subscribes.lock().unwrap()[2].clone();
        assert_eq!(refresh.0, 1);
        let pos = refresh.1.position.expect("position");
        assert_eq!(pos.seq, 1, "the new leader's sync is the position now");
    });
}

#[test]
fn a_publish_handle_applies_meta_updates() {
    let _turn = turn!();
    let script = Arc::new(Script::default());
    rt().block_on(async {
        let eps = start_fakes(script.clone()).await;
        // The first answer asks for 400 ms; the second for a persistent 1.6 s.
        let meta = |ms: u64, d: proto::Durability| proto::Meta {
            interval_ms: ms,
            durability: d as i32,
            reason: "age".into(),
        };
        script.publish[0].lock().unwrap().extend([
            Pub::Ok(false, Some(meta(400, proto::Durability::Volatile))),
            Pub::Ok(false, Some(meta(1600, proto::Durability::Persistent))),
        ]);
        let c = client(eps);
        let opts = PublishOptions::volatile(Duration::from_millis(200))
            .adapt(Duration::from_millis(100), Duration::from_secs(2));
        let h = c.publish("/m/a", "x", opts).await.unwrap();
        assert_eq!(h.interval(), Duration::from_millis(400));
        let started = Instant::now();
        while script.publishes.lock().unwrap().len() < 4 {
            assert!(started.elapsed() < Duration::from_secs(10));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(h);
        let p = script.publishes.lock().unwrap().clone();
        let intervals: Vec<u64> = p.iter().map(|(_, _, r)| r.interval_ms).collect();
        assert_eq!(&intervals[..4], &[200, 400, 1600, 1600], "{intervals:?}");
        assert_eq!(p[0].2.adapt_min_ms, 100);
        assert_eq!(p[0].2.adapt_max_ms, 2000);
        assert_eq!(p[2].2.durability, proto::Durability::Persistent as i32);
        // Versions strictly increase under one provider.
        for w in p.windows(2) {
            let (a, b) = (w[0].2.version.unwrap(), w[1].2.version.unwrap());
            assert!(b.stamp > a.stamp && a.provider == b.provider);
        }
        // When the interval grew, one refresh still went out at the old one.
        let gap = |i: usize| p[i + 1].1 - p[i].1;
        eprintln!("refresh gaps: {:?} {:?} {:?}", gap(0), gap(1), gap(2));
        assert!(
            gap(0) < Duration::from_millis(390),
            "200 ms, not 400: {:?}",
            gap(0)
        );
        assert!(
            gap(1) < Duration::from_millis(1000),
            "400 ms, not 1.6 s: {:?}",
            gap(1)
        );
    });
}

#[test]
fn a_persistent_publish_is_retried_until_acknowledged() {
    let _turn = turn!();
    let script = Arc::new(Script::default());
    rt().block_on(async {
        let eps = start_fakes(script.clone()).await;
        // The first endpoint fails at the transport; the second has no leader twice.
        script.publish[0]
            .lock()
            .unwrap()
            .extend([Pub::Fail, Pub::Fail, Pub::Fail]);
        script.publish[1]
            .lock()
            .unwrap()
            .extend([Pub::NoLeader, Pub::NoLeader]);
        let c = client(eps);
        let h = c
            .publish(
                "/p/a",
                "x",
                PublishOptions::persistent(Duration::from_secs(60)),
            )
            .await
            .unwrap();
        assert!(h.healthy());
        let p = script.publishes.lock().unwrap().clone();
        let who: Vec<usize> = p.iter().map(|(m, _, _)| *m).collect();
        eprintln!("attempts went to {who:?}");
        assert!(p.len() >= 4, "{who:?}");
        assert!(who.contains(&0) && who.contains(&1));
        // Every attempt is the same request: a retry, idempotent at the nodes.
        assert!(p.windows(2).all(|w| w[0].2.version == w[1].2.version));
        h.revoke().await.unwrap();
    });
}
