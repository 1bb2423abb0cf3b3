//! `impl Tenure for Api` and the request handlers it shares with the session stream.

use super::Api;
use super::convert::{
    fill_name, holder_to_proto, invalid_name, mode_from_proto, mode_to_proto, sized,
    status_to_proto, token_from_proto, token_to_proto, unexpected, waiter_to_proto,
};
use crate::auth::Perm;
use crate::objects::under;
use std::pin::Pin;
use std::time::Duration;
use tenure_client::proto::{self, error::Kind, tenure_server::Tenure};
use tenure_core::ids::SessionId;
use tenure_core::ids::StoreId;
use tenure_core::io::{ClientError, Request, Response, WaitSpec};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request as GrpcRequest, Response as GrpcResponse, Status};
use tracing::{debug, info};

pub(super) type KeepAliveStream =
    Pin<Box<dyn futures::Stream<Item = Result<proto::KeepAliveResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Tenure for Api {
    async fn write(
        &self,
        request: GrpcRequest<proto::WriteRequest>,
    ) -> Result<GrpcResponse<proto::WriteResponse>, Status> {
        // The test register is an operator's check of a store, not a path of the tree.
        self.auth.authorize(&request, Perm::Admin, "/")?;
        self.do_write(sized(request.into_inner())?)
            .await
            .map(GrpcResponse::new)
    }

    async fn status(
        &self,
        request: GrpcRequest<proto::StatusRequest>,
    ) -> Result<GrpcResponse<proto::StatusResponse>, Status> {
        self.auth.caller(&request)?;
        let s = self.view().await?;
        let mut answer = status_to_proto(&s);
        if let Some(dir) = self.data_dir.clone() {
            let bytes =
                tokio::task::spawn_blocking(move || crate::telemetry::process::dir_bytes(&dir));
            answer.data_bytes = bytes.await.ok().and_then(Result::ok);
        }
        Ok(GrpcResponse::new(answer))
    }

    async fn resolve(
        &self,
        request: GrpcRequest<proto::ResolveRequest>,
    ) -> Result<GrpcResponse<proto::ResolveResponse>, Status> {
        self.auth.caller(&request)?;
        self.do_resolve(sized(request.into_inner())?)
            .await
            .map(GrpcResponse::new)
    }

    async fn open_session(
        &self,
        request: GrpcRequest<proto::OpenSessionRequest>,
    ) -> Result<GrpcResponse<proto::OpenSessionResponse>, Status> {
        self.auth.caller(&request)?;
        self.do_open_session(sized(request.into_inner())?)
            .await
            .map(GrpcResponse::new)
    }

    type KeepAliveStream = KeepAliveStream;

    async fn keep_alive(
        &self,
        request: GrpcRequest<tonic::Streaming<proto::KeepAliveRequest>>,
    ) -> Result<GrpcResponse<Self::KeepAliveStream>, Status> {
        self.auth.caller(&request)?;
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(8);
        let api = self.clone();
        // Answers go out in the order the keep-alives came in: the client matches each
        // answer to the send time of its request (its deadline rule needs that time).
        tokio::spawn(async move {
            loop {
                let msg = match inbound.message().await {
                    Ok(Some(m)) => m,
                    Ok(None) => break,
                    Err(e) => {
                        debug!("keep-alive stream ended: {e}");
                        break;
                    }
                };
                let resp = match api.session_ref(msg.session) {
                    Ok((store, session)) => api.do_keep_alive(store, session).await,
                    Err(s) => Err(s),
                };
                let end = resp.is_err();
                if tx.send(resp).await.is_err() || end {
                    break;
                }
            }
        });
        Ok(GrpcResponse::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn close_session(
        &self,
        request: GrpcRequest<proto::CloseSessionRequest>,
    ) -> Result<GrpcResponse<proto::CloseSessionResponse>, Status> {
        self.auth.caller(&request)?;
        self.do_close_session(sized(request.into_inner())?)
            .await
            .map(GrpcResponse::new)
    }

    async fn acquire(
        &self,
        request: GrpcRequest<proto::AcquireRequest>,
    ) -> Result<GrpcResponse<proto::AcquireResponse>, Status> {
        let caller = self.auth.caller(&request)?;
        let r = sized(request.into_inner())?;
        caller.check(Perm::Lock, &r.name)?;
        self.do_acquire(r).await.map(GrpcResponse::new)
    }

    async fn release(
        &self,
        request: GrpcRequest<proto::ReleaseRequest>,
    ) -> Result<GrpcResponse<proto::ReleaseResponse>, Status> {
        let caller = self.auth.caller(&request)?;
        let r = sized(request.into_inner())?;
        caller.check(Perm::Lock, &r.name)?;
        self.do_release(r).await.map(GrpcResponse::new)
    }

    async fn holder(
        &self,
        request: GrpcRequest<proto::HolderRequest>,
    ) -> Result<GrpcResponse<proto::HolderResponse>, Status> {
        let caller = self.auth.caller(&request)?;
        let r = sized(request.into_inner())?;
        caller.check(Perm::Read, &r.name)?;
        self.do_holder(r).await.map(GrpcResponse::new)
    }

    async fn list_locks(
        &self,
        request: GrpcRequest<proto::ListLocksRequest>,
    ) -> Result<GrpcResponse<proto::ListLocksResponse>, Status> {
        let caller = self.auth.caller(&request)?;
        let r = sized(request.into_inner())?;
        caller.check(Perm::Read, &r.prefix)?;
        self.do_list_locks(r).await.map(GrpcResponse::new)
    }

    type SessionStream = crate::stream::EventStream;

    async fn session(
        &self,
        request: GrpcRequest<tonic::Streaming<proto::SessionRequest>>,
    ) -> Result<GrpcResponse<Self::SessionStream>, Status> {
        // The token is checked once, here; each request against its path on the stream.
        let caller = self.auth.caller(&request)?;
        Ok(GrpcResponse::new(crate::stream::serve(
            self.clone(),
            caller,
            request.into_inner(),
        )))
    }
}

/// The request handlers, shared by the unary RPCs and the session stream: one code path,
/// so the two cannot drift. Each returns the RPC's response (payload or typed error), or
/// a gRPC status for a request that never reached the protocol.
impl Api {
    pub(crate) async fn do_write(
        &self,
        r: proto::WriteRequest,
    ) -> Result<proto::WriteResponse, Status> {
        let store = StoreId(r.store);
        let started = std::time::Instant::now();
        let answer = self
            .request(Request::Write {
                store,
                key: r.key,
                value: r.value,
            })
            .await?;
        use proto::write_response::Result as R;
        let result = match answer {
            Ok(Response::Written { version }) => {
                metrics::histogram!("tenure_write_latency_seconds")
                    .record(started.elapsed().as_secs_f64());
                R::Ok(proto::Written {
                    version: Some(proto::Version {
                        epoch: version.epoch.0,
                        seq: version.seq,
                    }),
                })
            }
            Err(e) => R::Error(self.client_error(store, &e)),
            Ok(other) => return Err(unexpected("a write", &other)),
        };
        Ok(proto::WriteResponse {
            result: Some(result),
        })
    }

    pub(crate) async fn do_open_session(
        &self,
        r: proto::OpenSessionRequest,
    ) -> Result<proto::OpenSessionResponse, Status> {
        // Without a store the session's home is chosen in turn among the stores, which
        // spreads sessions (and their keep-alives) over the managers.
        let store = StoreId(r.store.unwrap_or_else(|| self.next_home()));
        use proto::open_session_response::Result as R;
        let reply = |result| {
            Ok(proto::OpenSessionResponse {
                result: Some(result),
            })
        };
        if let Some(e) = self.unknown_store(store) {
            return reply(R::Error(e));
        }
        let ttl = Duration::from_millis(r.ttl_ms);
        let answer = self.request(Request::OpenSession { store, ttl }).await?;
        match answer {
            Ok(Response::SessionOpened { session, ttl }) => {
                metrics::counter!("tenure_sessions_opened_total").increment(1);
                debug!(%store, session = session.0, client = %r.client_name, request_id = r.request_id, "session opened");
                reply(R::Ok(proto::SessionOpened {
                    session: Some(proto::SessionRef {
                        store: store.0,
                        id: session.0,
                    }),
                    ttl_ms: ttl.as_millis() as u64,
                }))
            }
            Err(e) => reply(R::Error(self.client_error(store, &e))),
            Ok(other) => Err(unexpected("OpenSession", &other)),
        }
    }

    /// One keep-alive: the session's remaining lease, or a typed error.
    pub(crate) async fn do_keep_alive(
        &self,
        store: StoreId,
        session: SessionId,
    ) -> Result<proto::KeepAliveResponse, Status> {
        use proto::keep_alive_response::Result as R;
        let result = match self.unknown_store(store) {
            Some(e) => R::Error(e),
            None => match self.request(Request::KeepAlive { store, session }).await? {
                Ok(Response::KeptAlive { ttl, .. }) => {
                    metrics::counter!("tenure_keepalives_total").increment(1);
                    R::Ok(proto::SessionAlive {
                        session: Some(proto::SessionRef {
                            store: store.0,
                            id: session.0,
                        }),
                        ttl_ms: ttl.as_millis() as u64,
                    })
                }
                Err(e) => {
                    if e == ClientError::SessionExpired {
                        info!(%store, session = session.0, "keep-alive for an expired session");
                        metrics::counter!("tenure_keepalive_expired_total").increment(1);
                    }
                    R::Error(self.session_error(store, session, &e))
                }
                Ok(other) => return Err(unexpected("KeepAlive", &other)),
            },
        };
        Ok(proto::KeepAliveResponse {
            result: Some(result),
        })
    }

    pub(crate) async fn do_close_session(
        &self,
        r: proto::CloseSessionRequest,
    ) -> Result<proto::CloseSessionResponse, Status> {
        let (store, session) = self.session_ref(r.session)?;
        use proto::close_session_response::Result as R;
        let reply = |result| {
            Ok(proto::CloseSessionResponse {
                result: Some(result),
            })
        };
        if let Some(e) = self.unknown_store(store) {
            return reply(R::Error(e));
        }
        match self
            .request(Request::CloseSession { store, session })
            .await?
        {
            Ok(Response::SessionClosed) => {
                metrics::counter!("tenure_sessions_closed_total").increment(1);
                reply(R::Ok(proto::SessionClosed {}))
            }
            Err(e) => reply(R::Error(self.session_error(store, session, &e))),
            Ok(other) => Err(unexpected("CloseSession", &other)),
        }
    }

    pub(crate) async fn do_acquire(
        &self,
        r: proto::AcquireRequest,
    ) -> Result<proto::AcquireResponse, Status> {
        let started = std::time::Instant::now();
        let (store, session) = self.session_ref(r.session)?;
        let mode = mode_from_proto(r.mode)?;
        use proto::acquire_response::Result as R;
        let reply = |result| {
            Ok(proto::AcquireResponse {
                result: Some(result),
            })
        };
        if let Some(e) = self.unknown_store(store) {
            return reply(R::Error(e));
        }
        if r.request_id == 0 {
            // The idempotency key of the acquire in its session: 0 is no key (two
            // acquires with it would be taken for one).
            return reply(R::Error(crate::grpc::invalid_request(
                "request id 0 (ids are non-zero and increase per session)",
            )));
        }
        let name_store = match self.name(&r.name) {
            Ok((s, _)) => s,
            Err(e) => {
                metrics::counter!("tenure_client_errors_total", "kind" => "invalid_name")
                    .increment(1);
                return reply(R::Error(e));
            }
        };
        // A name in another store than the session's runs under the session's child
        // there (DESIGN §4, "One session per client").
        let wait =
            tenure_client::locks::convert::wait_from_proto(r.r#try || r.no_wait, r.timeout_ms);
        let limit = match wait {
            WaitSpec::Try => Some(self.request_timeout),
            WaitSpec::Timeout(d) => Some(d + self.request_timeout),
            WaitSpec::Forever => None,
        };
        let answer = self
            .request_within(
                under(
                    Some(store),
                    Request::Acquire {
                        store: name_store,
                        session,
                        request_id: r.request_id,
                        name: r.name.clone(),
                        mode,
                        wait,
                        lock_delay: r.lock_delay_ms.map(Duration::from_millis),
                    },
                ),
                limit,
            )
            .await?;
        match answer {
            Ok(Response::Granted { token }) => {
                metrics::counter!("tenure_lock_grants_total").increment(1);
                metrics::histogram!("tenure_acquire_seconds")
                    .record(started.elapsed().as_secs_f64());
                debug!(%store, session = session.0, name = %r.name, ?token, "granted");
                reply(R::Ok(proto::Granted {
                    name: r.name,
                    mode: mode_to_proto(mode),
                    token: Some(token_to_proto(token)),
                }))
            }
            Err(e) => {
                let mut err = self.session_error(store, session, &e);
                fill_name(&mut err, &r.name);
                reply(R::Error(err))
            }
            Ok(other) => Err(unexpected("Acquire", &other)),
        }
    }

    pub(crate) async fn do_release(
        &self,
        r: proto::ReleaseRequest,
    ) -> Result<proto::ReleaseResponse, Status> {
        let (store, session) = self.session_ref(r.session)?;
        use proto::release_response::Result as R;
        let reply = |result| {
            Ok(proto::ReleaseResponse {
                result: Some(result),
            })
        };
        if let Some(e) = self.unknown_store(store) {
            return reply(R::Error(e));
        }
        let home = store;
        let store = match self.name(&r.name) {
            Ok((s, _)) => s,
            Err(e) => return reply(R::Error(e)),
        };
        // Server-side fencing of the release: with a token, the session's grant must
        // carry it, checked in the same replicated change as the release.
        let req = match r.token {
            Some(presented) => Request::ReleaseFenced {
                store,
                session,
                request_id: r.request_id,
                name: r.name.clone(),
                token: token_from_proto(presented),
            },
            None => Request::Release {
                store,
                session,
                request_id: r.request_id,
                name: r.name.clone(),
            },
        };
        let answer = self.request(under(Some(home), req)).await?;
        match answer {
            Ok(Response::Released) => {
                metrics::counter!("tenure_lock_releases_total").increment(1);
                debug!(%store, session = session.0, name = %r.name, "released");
                reply(R::Ok(proto::Released {}))
            }
            Err(e) => {
                let mut err = self.session_error(store, session, &e);
                fill_name(&mut err, &r.name);
                if let Some(Kind::StaleToken(st)) = err.kind.as_mut() {
                    st.presented = r.token;
                    err.message = format!("stale fencing token for {}", r.name);
                }
                reply(R::Error(err))
            }
            Ok(other) => Err(unexpected("Release", &other)),
        }
    }

    pub(crate) async fn do_holder(
        &self,
        r: proto::HolderRequest,
    ) -> Result<proto::HolderResponse, Status> {
        use proto::holder_response::Result as R;
        let reply = |result| {
            Ok(proto::HolderResponse {
                result: Some(result),
            })
        };
        let store = match self.name(&r.name) {
            Ok((s, _)) => s,
            Err(e) => return reply(R::Error(e)),
        };
        // One linearizable read gives the holders and the queue of the name.
        let answer = self
            .request(Request::LocksUnder {
                store,
                prefix: r.name.clone(),
            })
            .await?;
        match answer {
            Ok(Response::Locks(locks)) => {
                let entry = locks.iter().find(|l| l.name.as_str() == r.name);
                reply(R::Ok(proto::Holders {
                    name: r.name.clone(),
                    holders: entry
                        .map(|l| {
                            l.holders
                                .iter()
                                .map(|h| holder_to_proto(store, h))
                                .collect()
                        })
                        .unwrap_or_default(),
                    waiters: entry
                        .map(|l| {
                            l.waiters
                                .iter()
                                .map(|w| waiter_to_proto(store, w))
                                .collect()
                        })
                        .unwrap_or_default(),
                }))
            }
            Err(e) => reply(R::Error(self.client_error(store, &e))),
            Ok(other) => Err(unexpected("Holder", &other)),
        }
    }

    pub(crate) async fn do_list_locks(
        &self,
        r: proto::ListLocksRequest,
    ) -> Result<proto::ListLocksResponse, Status> {
        use proto::list_locks_response::Result as R;
        let reply = |result| {
            Ok(proto::ListLocksResponse {
                result: Some(result),
            })
        };
        let store = if r.prefix == "/" {
            let Some(s) = r.store else {
                return reply(R::Error(invalid_name(
                    "/",
                    "listing '/' spans every store: set `store`",
                )));
            };
            StoreId(s)
        } else {
            match self.name(&r.prefix) {
                Ok((s, _)) => s,
                Err(e) => return reply(R::Error(e)),
            }
        };
        if let Some(e) = self.unknown_store(store) {
            return reply(R::Error(e));
        }
        let answer = self
            .request(Request::LocksUnder {
                store,
                prefix: r.prefix.clone(),
            })
            .await?;
        match answer {
            Ok(Response::Locks(locks)) => {
                let limit = if r.limit == 0 {
                    usize::MAX
                } else {
                    r.limit as usize
                };
                reply(R::Ok(proto::LockList {
                    locks: locks
                        .iter()
                        .filter(|l| !l.holders.is_empty() || !l.waiters.is_empty())
                        .take(limit)
                        .map(|l| proto::LockEntry {
                            name: l.name.to_string(),
                            holders: l
                                .holders
                                .iter()
                                .map(|h| holder_to_proto(store, h))
                                .collect(),
                            waiters: l
                                .waiters
                                .iter()
                                .map(|w| waiter_to_proto(store, w))
                                .collect(),
                        })
                        .collect(),
                }))
            }
            Err(e) => reply(R::Error(self.client_error(store, &e))),
            Ok(other) => Err(unexpected("ListLocks", &other)),
        }
    }
}
