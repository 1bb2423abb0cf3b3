//! The client's routing against scripted devices on 127.0.0.1: three fake Tenure
//! endpoints answer as a script says (which one manages the store, which one is down,
//! what hint a non-manager gives), so each path of the keep-alive task's routing is
//! driven exactly, with no cluster behind it.
//!
//! The failure this guards against: the manager of a held lock's store dies, the
//! keep-alive task moves on to the next endpoint, and that endpoint answers `NotManager`
//! with a hint to the new manager. The task used to record the hint but then route by
//! its rotation counter, which ignores the hint, so it went back to the same device
//! forever and the session expired while its holder was alive.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tenure_client::proto::tenure_server::{Tenure, TenureServer};
use tenure_client::{Client, ClientOptions, LockMode, Transport, Wait, proto};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

type Stream<T> = Pin<Box<dyn tokio_stream::Stream<Item = Result<T, Status>> + Send>>;

/// What every fake device reads: the script.
struct Script {
    /// `host:port` of each device.
    endpoints: Vec<String>,
    /// The device that manages store 0.
    manager: AtomicUsize,
    /// Devices that answer every call with a transport-level failure.
    down: [AtomicBool; 3],
    /// The device each non-manager names in its hint (`usize::MAX`: the manager).
    hints: [AtomicUsize; 3],
    /// Keep-alives each device answered as manager.
    kept: [AtomicU64; 3],
    /// Keep-alives each device refused with `NotManager`.
    redirected: [AtomicU64; 3],
    /// Devices that accept connections and never answer (a stopped process).
    frozen: [AtomicBool; 3],
    /// The lease the session stream's answers give (0: 3 s), before and after the
    /// device has granted a lock: a short one leaves the client's deadline already
    /// passed when a grant arrives, as after a long failover.
    lease_ms: AtomicU64,
    lease_after_grant_ms: AtomicU64,
    granted: AtomicBool,
    /// Releases the stream served.
    released: AtomicU64,
}

#[derive(Clone)]
struct Fake {
    me: usize,
    script: Arc<Script>,
}

impl Fake {
    fn is_down(&self) -> bool {
        self.script.down[self.me].load(Ordering::SeqCst)
    }
    fn manages(&self) -> bool {
        self.script.manager.load(Ordering::SeqCst) == self.me
    }
    fn not_manager(&self) -> proto::Error {
        let hint = match self.script.hints[self.me].load(Ordering::SeqCst) {
            usize::MAX => self.script.manager.load(Ordering::SeqCst),
            h => h,
        };
        proto::Error {
            kind: Some(proto::error::Kind::NotManager(proto::NotManager {
                store: 0,
                hint_device: Some(hint as u64 + 1),
                hint_endpoint: self.script.endpoints[hint].clone(),
            })),
            message: "not the manager".into(),
        }
    }
    /// A call to the store's manager: `ok` at the manager, `NotManager` elsewhere, a
    /// transport failure when down.
    fn routed<T>(&self, ok: impl FnOnce() -> T, err: fn(proto::Error) -> T) -> Result<T, Status> {
        self.check()?;
        Ok(if self.manages() {
            ok()
        } else {
            err(self.not_manager())
        })
    }
    /// A call any device answers the same way (a transport failure when down).
    fn answer<T>(&self, v: T) -> Result<Response<T>, Status> {
        self.check()?;
        Ok(Response::new(v))
    }
    async fn check_frozen(&self) {
        while self.script.frozen[self.me].load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    fn check(&self) -> Result<(), Status> {
        if self.is_down() {
            Err(Status::unavailable("device is down"))
        } else {
            Ok(())
        }
    }
}

#[tonic::async_trait]
impl Tenure for Fake {
    async fn write(
        &self,
        _: Request<proto::WriteRequest>,
    ) -> Result<Response<proto::WriteResponse>, Status> {
        Err(Status::unimplemented("write"))
    }

    async fn resolve(
        &self,
        _: Request<proto::ResolveRequest>,
    ) -> Result<Response<proto::ResolveResponse>, Status> {
        Err(Status::unimplemented("resolve"))
    }

    async fn status(
        &self,
        _: Request<proto::StatusRequest>,
    ) -> Result<Response<proto::StatusResponse>, Status> {
        self.check()?;
        Ok(Response::new(proto::StatusResponse {
            device: self.me as u64 + 1,
            stores: 1,
            ..Default::default()
        }))
    }

    async fn open_session(
        &self,
        request: Request<proto::OpenSessionRequest>,
    ) -> Result<Response<proto::OpenSessionResponse>, Status> {
        use proto::open_session_response::Result as R;
        let ttl_ms = request.into_inner().ttl_ms;
        let session = Some(proto::SessionRef { store: 0, id: 7 });
        let result = self.routed(|| R::Ok(proto::SessionOpened { session, ttl_ms }), R::Error)?;
        Ok(Response::new(proto::OpenSessionResponse {
            result: Some(result),
        }))
    }

    type KeepAliveStream = Stream<proto::KeepAliveResponse>;

    async fn keep_alive(
        &self,
        request: Request<tonic::Streaming<proto::KeepAliveRequest>>,
    ) -> Result<Response<Self::KeepAliveStream>, Status> {
        use proto::keep_alive_response::Result as R;
        self.check()?;
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(4);
        let me = self.clone();
        tokio::spawn(async move {
            while let Ok(Some(m)) = inbound.message().await {
                if me.is_down() {
                    let _ = tx.send(Err(Status::unavailable("device is down"))).await;
                    return;
                }
                let result = if me.manages() {
                    me.script.kept[me.me].fetch_add(1, Ordering::SeqCst);
                    R::Ok(proto::SessionAlive {
                        session: m.session,
                        ttl_ms: 3_000,
                    })
                } else {
                    me.script.redirected[me.me].fetch_add(1, Ordering::SeqCst);
                    R::Error(me.not_manager())
                };
                let answer = proto::KeepAliveResponse {
                    result: Some(result),
                };
                if tx.send(Ok(answer)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn close_session(
        &self,
        _: Request<proto::CloseSessionRequest>,
    ) -> Result<Response<proto::CloseSessionResponse>, Status> {
        use proto::close_session_response::Result as R;
        self.answer(proto::CloseSessionResponse {
            result: Some(R::Ok(proto::SessionClosed {})),
        })
    }

    async fn acquire(
        &self,
        request: Request<proto::AcquireRequest>,
    ) -> Result<Response<proto::AcquireResponse>, Status> {
        use proto::acquire_response::Result as R;
        let r = request.into_inner();
        let token = Some(proto::FencingToken { epoch: 1, seq: 1 });
        let (name, mode) = (r.name, r.mode);
        let result = self.routed(|| R::Ok(proto::Granted { name, mode, token }), R::Error)?;
        Ok(Response::new(proto::AcquireResponse {
            result: Some(result),
        }))
    }

    async fn release(
        &self,
        _: Request<proto::ReleaseRequest>,
    ) -> Result<Response<proto::ReleaseResponse>, Status> {
        use proto::release_response::Result as R;
        self.answer(proto::ReleaseResponse {
            result: Some(R::Ok(proto::Released {})),
        })
    }

    async fn holder(
        &self,
        _: Request<proto::HolderRequest>,
    ) -> Result<Response<proto::HolderResponse>, Status> {
        Err(Status::unimplemented("holder"))
    }

    async fn list_locks(
        &self,
        _: Request<proto::ListLocksRequest>,
    ) -> Result<Response<proto::ListLocksResponse>, Status> {
        Err(Status::unimplemented("list_locks"))
    }

    type SessionStream = Stream<proto::SessionEvent>;

    /// The session stream as a device speaks it: `start` (a resume counts as a
    /// keep-alive), then opens, keep-alives, acquires and releases; a non-manager sends
    /// `redirect` and ends the stream; a device that goes down fails the stream.
    async fn session(
        &self,
        request: Request<tonic::Streaming<proto::SessionRequest>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        use proto::session_event::Kind as Ev;
        use proto::session_request::Kind as Rq;
        self.check_frozen().await;
        self.check()?;
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(64);
        let me = self.clone();
        tokio::spawn(async move {
            while let Ok(Some(m)) = inbound.message().await {
                me.check_frozen().await;
                if me.is_down() {
                    let _ = tx.send(Err(Status::unavailable("device is down"))).await;
                    return;
                }
                let keep_alive = matches!(
                    m.kind,
                    Some(Rq::KeepAlive(_))
                        | Some(Rq::Start(proto::StreamStart {
                            resume: Some(_),
                            ..
                        }))
                );
                if !me.manages()
                    && !matches!(
                        m.kind,
                        Some(Rq::Start(proto::StreamStart { resume: None, .. }))
                    )
                {
                    if keep_alive {
                        me.script.redirected[me.me].fetch_add(1, Ordering::SeqCst);
                    }
                    let redirect = proto::Redirect {
                        not_manager: me.not_manager().kind.and_then(|k| match k {
                            proto::error::Kind::NotManager(n) => Some(n),
                            _ => None,
                        }),
                    };
                    let ev = proto::SessionEvent {
                        request_id: 0,
                        kind: Some(Ev::Redirect(redirect)),
                    };
                    let _ = tx.send(Ok(ev)).await;
                    return;
                }
                if keep_alive {
                    me.script.kept[me.me].fetch_add(1, Ordering::SeqCst);
                }
                let lease = if me.script.granted.load(Ordering::SeqCst) {
                    &me.script.lease_after_grant_ms
                } else {
                    &me.script.lease_ms
                };
                let ttl_ms = match lease.load(Ordering::SeqCst) {
                    0 => 3_000,
                    ms => ms,
                };
                let alive = proto::SessionAlive {
                    session: Some(proto::SessionRef { store: 0, id: 7 }),
                    ttl_ms,
                };
                let kind = match m.kind {
                    Some(Rq::Start(s)) => Ev::Started(proto::StreamStarted {
                        store: 0,
                        session: s.resume.map(|_| alive),
                        max_in_flight: 64,
                        max_request_bytes: 65_536,
                        device: me.me as u64 + 1,
                    }),
                    Some(Rq::Open(o)) => Ev::Opened(proto::SessionOpened {
                        session: Some(proto::SessionRef { store: 0, id: 7 }),
                        ttl_ms: if lease.load(Ordering::SeqCst) == 0 {
                            o.ttl_ms
                        } else {
                            ttl_ms
                        },
                    }),
                    Some(Rq::KeepAlive(_)) => Ev::Alive(alive),
                    Some(Rq::Acquire(a)) => Ev::Granted(proto::Granted {
                        name: {
                            me.script.granted.store(true, Ordering::SeqCst);
                            a.name
                        },
                        mode: a.mode,
                        token: Some(proto::FencingToken { epoch: 1, seq: 1 }),
                    }),
                    Some(Rq::Release(_)) => {
                        me.script.released.fetch_add(1, Ordering::SeqCst);
                        Ev::Released(proto::Released {})
                    }
                    Some(Rq::Close(_)) => Ev::Closed(proto::SessionClosed {}),
                    _ => continue,
                };
                let ev = proto::SessionEvent {
                    request_id: m.request_id,
                    kind: Some(kind),
                };
                if tx.send(Ok(ev)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }
}

/// Three fake devices on loopback; device 0 manages the store.
async fn fakes() -> Arc<Script> {
    let mut listeners = Vec::new();
    for _ in 0..3 {
        listeners.push(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let script = Arc::new(Script {
        endpoints: listeners
            .iter()
            .map(|l| l.local_addr().unwrap().to_string())
            .collect(),
        manager: AtomicUsize::new(0),
        down: Default::default(),
        hints: [(); 3].map(|_| AtomicUsize::new(usize::MAX)),
        kept: Default::default(),
        redirected: Default::default(),
        frozen: Default::default(),
        lease_ms: AtomicU64::new(0),
        lease_after_grant_ms: AtomicU64::new(0),
        granted: AtomicBool::new(false),
        released: AtomicU64::new(0),
    });
    for (me, l) in listeners.into_iter().enumerate() {
        let fake = Fake {
            me,
            script: script.clone(),
        };
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(TenureServer::new(fake))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(l)),
        );
    }
    script
}

fn client(script: &Script, transport: Transport) -> Client {
    let opts = ClientOptions {
        request_timeout: Duration::from_secs(2),
        retry_deadline: Duration::from_secs(10),
        session_ttl: Duration::from_secs(3),
        transport,
        ..Default::default()
    };
    Client::with_options(script.endpoints.clone(), opts).unwrap()
}

/// Wait until `f` holds, at most `limit`.
async fn until(limit: Duration, what: &str, f: impl Fn() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The manager dies; the next endpoint in turn is not the manager and names the new one:
/// the keep-alive follows the hint and the session's deadline moves on.
#[tokio::test]
async fn keep_alive_follows_a_hint_after_its_manager_died() {
    let _turn = turn!();
    for t in [Transport::Stream, Transport::Unary] {
        keep_alive_follows_a_hint_after_its_manager_died_on(t).await;
    }
}

async fn keep_alive_follows_a_hint_after_its_manager_died_on(transport: Transport) {
    let script = fakes().await;
    let c = client(&script, transport);
    let guard = c.lock("/a", LockMode::Exclusive, Wait::Try).await.unwrap();
    until(Duration::from_secs(5), "a keep-alive at device 0", || {
        script.kept[0].load(Ordering::SeqCst) > 0
    })
    .await;
    // Device 0 dies; device 2 manages the store now. Device 1 (next in turn) knows.
    script.manager.store(2, Ordering::SeqCst);
    script.down[0].store(true, Ordering::SeqCst);
    until(Duration::from_secs(5), "a keep-alive at device 2", || {
        script.kept[2].load(Ordering::SeqCst) > 0
    })
    .await;
    // The deadline is extended from a keep-alive sent after the failover.
    until(Duration::from_secs(3), "the deadline extended", || {
        guard.deadline() > Instant::now() + Duration::from_secs(2)
    })
    .await;
    assert!(guard.is_held());
    assert!(script.redirected[1].load(Ordering::SeqCst) >= 1);
}

/// Two non-managers name each other (stale hints): the keep-alive stops following after a
/// few hops and tries the endpoints in turn, so it reaches the manager.
#[tokio::test]
async fn keep_alive_leaves_a_redirect_cycle() {
    let _turn = turn!();
    for t in [Transport::Stream, Transport::Unary] {
        keep_alive_leaves_a_redirect_cycle_on(t).await;
    }
}

async fn keep_alive_leaves_a_redirect_cycle_on(transport: Transport) {
    let script = fakes().await;
    let c = client(&script, transport);
    let guard = c.lock("/a", LockMode::Exclusive, Wait::Try).await.unwrap();
    until(Duration::from_secs(5), "a keep-alive at device 0", || {
        script.kept[0].load(Ordering::SeqCst) > 0
    })
    .await;
    // Device 2 manages now; devices 0 and 1 name each other.
    script.manager.store(2, Ordering::SeqCst);
    script.hints[0].store(1, Ordering::SeqCst);
    script.hints[1].store(0, Ordering::SeqCst);
    let before = script.kept[2].load(Ordering::SeqCst);
    until(Duration::from_secs(8), "a keep-alive at device 2", || {
        script.kept[2].load(Ordering::SeqCst) > before
    })
    .await;
    until(Duration::from_secs(3), "the deadline extended", || {
        guard.deadline() > Instant::now() + Duration::from_secs(2)
    })
    .await;
}

/// The same cycle met by a request: it follows a few hints, then tries the endpoints in
/// turn and is granted by the manager.
#[tokio::test]
async fn request_leaves_a_redirect_cycle() {
    let _turn = turn!();
    for t in [Transport::Stream, Transport::Unary] {
        request_leaves_a_redirect_cycle_on(t).await;
    }
}

async fn request_leaves_a_redirect_cycle_on(transport: Transport) {
    let script = fakes().await;
    script.manager.store(2, Ordering::SeqCst);
    script.hints[0].store(1, Ordering::SeqCst);
    script.hints[1].store(0, Ordering::SeqCst);
    let c = client(&script, transport);
    let guard = c.lock("/a", LockMode::Exclusive, Wait::Try).await.unwrap();
    assert_eq!(guard.token().seq, 1);
}

/// One device is frozen (it accepts connections and never answers) and it is the first
/// endpoint the client would try for the store: a lock in the store managed by another
/// device is still granted within a second, because the client races the next endpoint
/// after a short delay and passes the frozen one over.
#[tokio::test]
async fn a_frozen_device_costs_new_requests_less_than_a_second() {
    let _turn = turn!();
    let script = fakes().await;
    script.manager.store(1, Ordering::SeqCst);
    script.frozen[0].store(true, Ordering::SeqCst);
    let c = client(&script, Transport::Stream);
    let started = Instant::now();
    let guard = c.lock("/a", LockMode::Exclusive, Wait::Try).await.unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(1), "granted after {took:?}");
    assert!(guard.is_held());
    // A second client finds the frozen device passed over? No: each client keeps its
    // own view; it races past it the same way.
    let c2 = client(&script, Transport::Stream);
    let started = Instant::now();
    let _g = c2.lock("/b", LockMode::Exclusive, Wait::Try).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
}

/// The manager freezes while a lock is held: the keep-alive goes unanswered, the client
/// moves on and (once another device manages the store) its session lives on there; the
/// guard reported the possible loss before its deadline.
#[tokio::test]
async fn a_frozen_manager_is_left_for_the_new_one() {
    let _turn = turn!();
    let script = fakes().await;
    let c = client(&script, Transport::Stream);
    let guard = c.lock("/a", LockMode::Exclusive, Wait::Try).await.unwrap();
    until(Duration::from_secs(5), "a keep-alive at device 0", || {
        script.kept[0].load(Ordering::SeqCst) > 0
    })
    .await;
    script.frozen[0].store(true, Ordering::SeqCst);
    let frozen_at = Instant::now();
    let deadline = guard.deadline();
    let loss = tokio::time::timeout(Duration::from_secs(4), guard.lost())
        .await
        .expect("the loss is reported");
    assert_eq!(loss, tenure_client::Loss::DeadlineNear);
    assert!(Instant::now() < deadline, "reported before the deadline");
    script.manager.store(2, Ordering::SeqCst);
    until(Duration::from_secs(6), "a keep-alive at device 2", || {
        script.kept[2].load(Ordering::SeqCst) > 0
    })
    .await;
    assert!(guard.deadline() > frozen_at + Duration::from_secs(2));
    script.frozen[0].store(false, Ordering::SeqCst);
}

/// A grant that arrives when the session's conservative deadline has (nearly) passed —
/// every answer so far gave a lease too short to cover it, as when a failover outlasts
/// the TTL — is confirmed by a keep-alive before it is handed out. When the keep-alive
/// gives a real lease, the caller gets the lock; when it does not, the lock is released
/// and the call says it was not taken.
#[tokio::test]
async fn a_grant_past_the_session_deadline_is_confirmed_or_released() {
    let _turn = turn!();
    // Confirmed: after the grant, the device's leases are 3 s again.
    let script = fakes().await;
    script.lease_ms.store(60, Ordering::SeqCst);
    script.lease_after_grant_ms.store(3_000, Ordering::SeqCst);
    let c = client(&script, Transport::Stream);
    let guard = c.lock("/a", LockMode::Exclusive, Wait::Try).await.unwrap();
    assert!(guard.is_held());
    assert!(guard.deadline() > Instant::now() + Duration::from_secs(2));
    assert_eq!(script.released.load(Ordering::SeqCst), 0);
    // Not confirmed: every lease stays too short; the grant is released, not returned.
    let script = fakes().await;
    script.lease_ms.store(60, Ordering::SeqCst);
    script.lease_after_grant_ms.store(60, Ordering::SeqCst);
    let c = client(&script, Transport::Stream);
    let err = c
        .lock("/a", LockMode::Exclusive, Wait::Try)
        .await
        .unwrap_err();
    assert!(
        matches!(err, tenure_client::Error::GrantUnconfirmed(ref n) if n == "/a"),
        "{err}"
    );
    until(
        Duration::from_secs(5),
        "the unconfirmed grant released",
        || script.released.load(Ordering::SeqCst) == 1,
    )
    .await;
}
