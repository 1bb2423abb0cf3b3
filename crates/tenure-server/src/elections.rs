//! The election service (`service Elections` in `proto/elections.proto`; DESIGN §6): leader
//! election for clients, built on the store's locks, sessions and objects, in the shape of
//! etcd's `concurrency.Election` (Campaign, Proclaim, Resign, Leader, Observe).
//!
//! An election `NAME` is the exclusive lock `NAME/.election` (its holder leads, its FIFO
//! queue is the candidates in campaign order) and the object `NAME/.election`, the
//! leader's [`proto::LeaderRecord`]: value, fencing token, session. The record is
//! ephemeral to the leader's session and written only with the lock's token (server-side
//! fencing), so:
//!
//! - a leader whose session ends loses the lock and the record in the same expiry, and
//!   a deposed leader cannot overwrite its successor's record (its token is stale);
//! - `Leader` is one linearizable read of the record; `Observe` is an object watch of it:
//!   a put is a new leader (or a new value), a deletion is "no leader" — observers see
//!   the gap between two leaders, unlike etcd's `Observe`, which reports new leaders only.
//!
//! Every handler runs the same code paths as the lock and object services: the lock
//! requests through [`Api`]'s shared handlers, the object requests as the core's
//! [`ObjectRequest`]s with the same error mapping ([`Api::client_error`]).
//!
//! **Campaigns** wait in the lock's queue, which can take any time, so a campaign runs in
//! a task of its own, registered by `(store, session, request_id)`: a retry of the same
//! campaign (after the client's RPC deadline cut a long wait, or a lost answer) joins the
//! running task instead of queueing twice; the core replays the acquire by its request id
//! after a failover, and the record's put by the same `(session, request_id)`. When the
//! campaign's session ends, the core ends its wait (`SessionExpired`) and its place in the
//! queue is gone: a campaign never outlives its session (no zombie candidate, etcd's
//! issue with campaigns whose lease expired). A campaign whose callers all went away
//! (the RPC cancelled) and that nobody rejoins within [`ABANDON_GRACE`] of its election
//! gives the lock back without writing a record; one abandoned while its record was being
//! written resigns at once.
//!
//! **Resign** deletes the record if it is still this leadership's (compare-and-set on the
//! record's revision after reading it, so a successor's record is never touched), then
//! releases the lock fenced by the token: observers see "no leader" before the next
//! candidate is elected. It is a no-op for a leadership that already ended.

use crate::auth::Perm;
use crate::grpc::{Api, invalid_name, sized, token_from_proto, token_to_proto, unexpected};
use prost::Message;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tenure_client::elections::election_key;
use tenure_client::proto::{self, elections_server::Elections, error::Kind};
use tenure_core::ids::StoreId;
use tenure_core::io::{ClientError, ObjectRequest, Request, Response, Writer};
use tenure_core::lockctl::FencingToken;
use tenure_core::objects::{Conditions, Fence, ObjectError};
use tenure_core::session::SessionId;
use tokio::sync::{Notify, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request as GrpcRequest, Response as GrpcResponse, Status};
use tracing::{debug, info};

/// How long an elected campaign whose callers all went away waits for a retry to rejoin
/// it before it gives the lock back.
pub const ABANDON_GRACE: Duration = Duration::from_secs(2);

/// Largest leader value, in bytes (a value is a name or an address, not content: larger
/// ones get a typed `TooLarge`).
pub const MAX_VALUE_BYTES: usize = 32 * 1024;

/// A campaign's identity: its session and request id within the session's store.
type CampaignKey = (StoreId, SessionId, u64);

/// What a campaign's task ends with.
type CampaignOutcome = Result<proto::CampaignResponse, Status>;

/// One running campaign: its request, its callers, and its outcome once there is one.
#[derive(Debug)]
struct Running {
    request: proto::CampaignRequest,
    callers: AtomicUsize,
    rejoined: Notify,
    done: watch::Sender<Option<CampaignOutcome>>,
}

impl Running {
    /// Wait (at most `grace`) until a caller is attached; whether one is.
    async fn wait_for_caller(&self, grace: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let notified = self.rejoined.notified();
            if self.callers.load(Ordering::SeqCst) > 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.callers.load(Ordering::SeqCst) > 0;
            }
        }
    }
}

/// A caller attached to a running campaign (detached when its RPC ends or is dropped).
struct Attached(Arc<Running>);

impl Attached {
    fn new(run: Arc<Running>) -> Attached {
        run.callers.fetch_add(1, Ordering::SeqCst);
        run.rejoined.notify_waiters();
        Attached(run)
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.0.callers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The election service over the client API's [`Api`].
#[derive(Clone, Debug)]
pub struct ElectionsApi {
    api: Api,
    campaigns: Arc<Mutex<HashMap<CampaignKey, Arc<Running>>>>,
}

impl ElectionsApi {
    /// The election service over `api`'s driver.
    pub fn new(api: Api) -> ElectionsApi {
        ElectionsApi {
            api,
            campaigns: Arc::default(),
        }
    }

    fn campaigns(&self) -> std::sync::MutexGuard<'_, HashMap<CampaignKey, Arc<Running>>> {
        // The map is consistent after any panic elsewhere: entries are inserted and
        // removed whole.
        self.campaigns.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An election name checked: its store and its lock's (and record's) key.
struct Election {
    name: String,
    store: StoreId,
    key: String,
}

fn error(kind: Kind, message: String) -> proto::Error {
    proto::Error {
        kind: Some(kind),
        message,
    }
}

fn invalid(reason: &str) -> proto::Error {
    error(
        Kind::InvalidRequest(proto::InvalidRequest {
            reason: reason.to_string(),
        }),
        format!("invalid request: {reason}"),
    )
}

impl ElectionsApi {
    /// Check an election name (a lockable path whose election key is one too); with
    /// `session`, check the session is in the name's store.
    fn election(&self, name: &str, session: Option<StoreId>) -> Result<Election, proto::Error> {
        if name.ends_with("/.election") {
            return Err(invalid_name(
                name,
                "an election name cannot end in /.election (that is its lock's name)",
            ));
        }
        self.api.name(name)?;
        let key = election_key(name);
        let (store, _) = self
            .api
            .name(&key)
            .map_err(|e| invalid_name(name, &format!("its election key {key}: {}", e.message)))?;
        if let Some(e) = self.api.unknown_store(store) {
            return Err(e);
        }
        if let Some(s) = session
            && s != store
        {
            return Err(invalid_name(
                name,
                &format!(
                    "the election is in store {store}; the session is in store {s} (campaign \
                     under a session of the election's store)"
                ),
            ));
        }
        Ok(Election {
            name: name.to_string(),
            store,
            key,
        })
    }

    /// A value within [`MAX_VALUE_BYTES`], or the typed error.
    fn value_size(value: &[u8]) -> Result<(), proto::Error> {
        if value.len() > MAX_VALUE_BYTES {
            let (size, limit) = (value.len() as u64, MAX_VALUE_BYTES as u64);
            return Err(error(
                Kind::TooLarge(proto::TooLarge { size, limit }),
                format!("a leader value of {size} bytes is larger than the limit of {limit}"),
            ));
        }
        Ok(())
    }

    /// Run an object request for the election's record; a core error becomes the typed
    /// wire error.
    async fn object(
        &self,
        e: &Election,
        req: ObjectRequest,
    ) -> Result<Result<Response, (ClientError, proto::Error)>, Status> {
        let answer = self
            .api
            .request(Request::Object {
                store: e.store,
                req,
            })
            .await?;
        Ok(answer.map_err(|err| {
            let wire = self.api.client_error(e.store, &err);
            (err, wire)
        }))
    }

    /// The election's current record: its leader, or none.
    async fn read(
        &self,
        e: &Election,
    ) -> Result<Result<Option<proto::LeaderInfo>, proto::Error>, Status> {
        let req = ObjectRequest::Get { key: e.key.clone() };
        Ok(match self.object(e, req).await? {
            Ok(Response::Object { meta, data }) => {
                match proto::LeaderRecord::decode(data.as_ref()) {
                    Ok(r) => Ok(Some(leader_info(e, r, meta.revision))),
                    Err(err) => Err(error(
                        Kind::Rejected(proto::Rejected {
                            reason: format!("{} is not an election record: {err}", e.key),
                        }),
                        format!(
                            "the object {} is not an election record (written by something \
                             other than the election API?)",
                            e.key
                        ),
                    )),
                }
            }
            Ok(other) => return Err(unexpected("an election read", &other)),
            Err((ClientError::Object(ObjectError::NoSuchObject), _)) => Ok(None),
            Err((_, wire)) => Err(wire),
        })
    }

    /// Write the leader's record, fenced by its token and ephemeral to its session.
    async fn write_record(
        &self,
        e: &Election,
        session: SessionId,
        request_id: u64,
        value: Vec<u8>,
        token: FencingToken,
    ) -> Result<Result<proto::LeaderInfo, proto::Error>, Status> {
        let record = proto::LeaderRecord {
            value,
            token: Some(token_to_proto(token)),
            session: session.0,
        };
        let req = ObjectRequest::Put {
            key: e.key.clone(),
            data: record.encode_to_vec().into(),
            writer: Writer {
                session: Some(session),
                request_id,
            },
            cond: Conditions {
                fence: Some(Fence {
                    lock: e.key.clone(),
                    token,
                }),
                ..Default::default()
            },
            ephemeral: true,
        };
        Ok(match self.object(e, req).await? {
            Ok(Response::ObjectWritten { revision, .. }) => Ok(leader_info(e, record, revision)),
            Ok(other) => return Err(unexpected("an election record's put", &other)),
            Err((ClientError::StaleToken { .. }, _)) => Err(not_leader(e, session, token)),
            Err((_, mut wire)) => {
                fill(&mut wire, e, session);
                Err(wire)
            }
        })
    }

    /// Release the election's lock if `session` holds it with `token`; whether it did.
    /// `request_id` is the release's idempotency key in the session (0: none; the token
    /// makes a repeated release harmless anyway).
    async fn release(
        &self,
        e: &Election,
        session: SessionId,
        request_id: u64,
        token: FencingToken,
    ) -> Result<Result<bool, proto::Error>, Status> {
        let r = proto::ReleaseRequest {
            session: Some(proto::SessionRef {
                store: e.store.0,
                id: session.0,
            }),
            name: e.key.clone(),
            request_id,
            token: Some(token_to_proto(token)),
        };
        use proto::release_response::Result as R;
        Ok(match self.api.do_release(r).await?.result {
            Some(R::Ok(_)) => Ok(true),
            Some(R::Error(proto::Error {
                kind: Some(Kind::NotHeld(_) | Kind::StaleToken(_) | Kind::SessionExpired(_)),
                ..
            })) => Ok(false),
            Some(R::Error(e)) => Err(e),
            None => Err(invalid("empty answer to a release")),
        })
    }

    /// Resign `token`'s leadership of `e` held by `session` (see the module docs), with
    /// `request_id` as the idempotency key of the record's deletion and the lock's
    /// release (0: none).
    async fn resign_token(
        &self,
        e: &Election,
        session: SessionId,
        request_id: u64,
        token: FencingToken,
    ) -> Result<Result<bool, proto::Error>, Status> {
        let ours = |l: &proto::LeaderInfo| {
            l.session.as_ref().map(|s| s.id) == Some(session.0)
                && l.token.map(token_from_proto) == Some(token)
        };
        let mut was_leader = false;
        match self.read(e).await? {
            Ok(Some(l)) if ours(&l) => {
                let req = ObjectRequest::Delete {
                    key: e.key.clone(),
                    writer: Writer {
                        session: Some(session),
                        request_id,
                    },
                    cond: Conditions {
                        if_revision: Some(l.revision),
                        ..Default::default()
                    },
                };
                match self.object(e, req).await? {
                    Ok(Response::ObjectDeleted { .. }) => was_leader = true,
                    Ok(other) => return Err(unexpected("an election record's delete", &other)),
                    // Replaced or deleted meanwhile: not ours to delete any more.
                    Err((
                        ClientError::Object(
                            ObjectError::RevisionMismatch { .. } | ObjectError::NoSuchObject,
                        ),
                        _,
                    )) => {}
                    Err((_, wire)) => return Ok(Err(wire)),
                }
            }
            Ok(_) => {}
            // Not a record: a resignation leaves it alone (and still releases the lock).
            Err(proto::Error {
                kind: Some(Kind::Rejected(_)),
                ..
            }) => {}
            Err(wire) => return Ok(Err(wire)),
        }
        Ok(self
            .release(e, session, request_id, token)
            .await?
            .map(|released| released || was_leader))
    }
}

/// A leader's description from its record.
fn leader_info(e: &Election, r: proto::LeaderRecord, revision: u64) -> proto::LeaderInfo {
    proto::LeaderInfo {
        name: e.name.clone(),
        value: r.value,
        token: r.token,
        session: Some(proto::SessionRef {
            store: e.store.0,
            id: r.session,
        }),
        revision,
    }
}

/// The typed error of a request made with a token the session does not lead with.
fn not_leader(e: &Election, session: SessionId, token: FencingToken) -> proto::Error {
    error(
        Kind::StaleToken(proto::StaleToken {
            presented: Some(token_to_proto(token)),
            current: None,
        }),
        format!(
            "session {} does not lead {} with token {}.{} (it resigned, its session ended, or \
             it was deposed)",
            session.0, e.name, token.epoch.0, token.seq
        ),
    )
}

/// Put the election's name (and the session) into the typed errors that carry them.
fn fill(err: &mut proto::Error, e: &Election, session: SessionId) {
    match &mut err.kind {
        Some(Kind::WouldBlock(x)) => {
            x.name = e.name.clone();
            err.message = format!("{} has a leader or an earlier candidate", e.name);
        }
        Some(Kind::Timeout(x)) => {
            x.name = e.name.clone();
            err.message = format!("not elected leader of {} in time", e.name);
        }
        Some(Kind::Deadlock(x)) => x.name = e.name.clone(),
        Some(Kind::SessionExpired(x)) => {
            x.session = session.0;
            err.message = format!(
                "session {} ended: its campaign or leadership of {} ended with it",
                session.0, e.name
            );
        }
        _ => {}
    }
}

/// The task of one campaign: wait in the lock's queue, then write the record (see the
/// module docs).
async fn campaign_task(
    svc: ElectionsApi,
    e: Election,
    session: SessionId,
    run: Arc<Running>,
) -> CampaignOutcome {
    use proto::campaign_response::Result as R;
    let reply = |result| {
        Ok(proto::CampaignResponse {
            result: Some(result),
        })
    };
    let r = &run.request;
    let acquire = proto::AcquireRequest {
        session: Some(proto::SessionRef {
            store: e.store.0,
            id: session.0,
        }),
        name: e.key.clone(),
        mode: proto::LockMode::Exclusive as i32,
        r#try: r.r#try,
        timeout_ms: r.timeout_ms,
        request_id: r.request_id,
        lock_delay_ms: None,
    };
    use proto::acquire_response::Result as A;
    let token = match svc.api.do_acquire(acquire).await?.result {
        Some(A::Ok(g)) => token_from_proto(g.token.unwrap_or_default()),
        Some(A::Error(mut err)) => {
            fill(&mut err, &e, session);
            metrics::counter!("tenure_election_campaigns_total", "outcome" => "failed")
                .increment(1);
            return reply(R::Error(err));
        }
        None => return Err(Status::internal("empty answer to an acquire")),
    };
    if !run.wait_for_caller(ABANDON_GRACE).await {
        info!(name = %e.name, session = session.0, "elected, but the campaign was abandoned: giving the lock back");
        // Request id 0: not the campaign's (the lock table knows that one as the acquire).
        svc.release(&e, session, 0, token).await?.ok();
        metrics::counter!("tenure_election_campaigns_total", "outcome" => "abandoned").increment(1);
        return reply(R::Error(abandoned(&e)));
    }
    let written = svc
        .write_record(&e, session, r.request_id, r.value.clone(), token)
        .await?;
    match written {
        Ok(_) if run.callers.load(Ordering::SeqCst) == 0 => {
            info!(name = %e.name, session = session.0, "elected after the campaign was abandoned: resigning");
            svc.resign_token(&e, session, 0, token).await?.ok();
            metrics::counter!("tenure_election_campaigns_total", "outcome" => "abandoned")
                .increment(1);
            reply(R::Error(abandoned(&e)))
        }
        Ok(leader) => {
            info!(name = %e.name, session = session.0, token = %format!("{}.{}", token.epoch.0, token.seq), "elected");
            metrics::counter!("tenure_election_campaigns_total", "outcome" => "elected")
                .increment(1);
            reply(R::Ok(leader))
        }
        Err(err) => {
            metrics::counter!("tenure_election_campaigns_total", "outcome" => "failed")
                .increment(1);
            reply(R::Error(err))
        }
    }
}

/// The answer of a campaign whose callers all went away (nobody reads it but a late
/// retry).
fn abandoned(e: &Election) -> proto::Error {
    error(
        Kind::Rejected(proto::Rejected {
            reason: "abandoned".into(),
        }),
        format!("the campaign for {} was abandoned by its caller", e.name),
    )
}

type ObserveStream =
    Pin<Box<dyn futures::Stream<Item = Result<proto::ObserveResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Elections for ElectionsApi {
    async fn campaign(
        &self,
        request: GrpcRequest<proto::CampaignRequest>,
    ) -> Result<GrpcResponse<proto::CampaignResponse>, Status> {
        use proto::campaign_response::Result as R;
        let caller = self.api.auth().caller(&request)?;
        let r = request.into_inner();
        caller.check(Perm::Lock, &r.name)?;
        let refuse = |err| {
            Ok(GrpcResponse::new(proto::CampaignResponse {
                result: Some(R::Error(err)),
            }))
        };
        if let Err(err) = Self::value_size(&r.value) {
            return refuse(err);
        }
        let r = sized(r)?;
        let (store, session) = self.api.session_ref(r.session)?;
        if r.request_id == 0 {
            return refuse(invalid("request id 0 (ids are non-zero)"));
        }
        let e = match self.election(&r.name, Some(store)) {
            Ok(e) => e,
            Err(err) => return refuse(err),
        };
        let key = (store, session, r.request_id);
        let (run, attached) = {
            let mut campaigns = self.campaigns();
            match campaigns.get(&key) {
                Some(run) if run.request != r => {
                    let id = r.request_id;
                    return refuse(error(
                        Kind::RequestIdReused(proto::RequestIdReused { request_id: id }),
                        format!(
                            "request id {id} of session {} is another campaign's",
                            session.0
                        ),
                    ));
                }
                Some(run) => {
                    debug!(name = %r.name, session = session.0, "a retry joins its campaign");
                    (run.clone(), Attached::new(run.clone()))
                }
                None => {
                    let (done, _) = watch::channel(None);
                    let run = Arc::new(Running {
                        request: r,
                        callers: AtomicUsize::new(0),
                        rejoined: Notify::new(),
                        done,
                    });
                    let attached = Attached::new(run.clone());
                    campaigns.insert(key, run.clone());
                    let svc = self.clone();
                    let task_run = run.clone();
                    tokio::spawn(async move {
                        let outcome =
                            campaign_task(svc.clone(), e, session, task_run.clone()).await;
                        svc.campaigns().remove(&key);
                        task_run.done.send_replace(Some(outcome));
                    });
                    (run, attached)
                }
            }
        };
        let mut done = run.done.subscribe();
        let outcome = loop {
            if let Some(o) = done.borrow_and_update().clone() {
                break o;
            }
            if done.changed().await.is_err() {
                break Err(Status::unavailable("device is shutting down"));
            }
        };
        drop(attached);
        outcome.map(GrpcResponse::new)
    }

    async fn proclaim(
        &self,
        request: GrpcRequest<proto::ProclaimRequest>,
    ) -> Result<GrpcResponse<proto::ProclaimResponse>, Status> {
        use proto::proclaim_response::Result as R;
        let caller = self.api.auth().caller(&request)?;
        let r = request.into_inner();
        caller.check(Perm::Lock, &r.name)?;
        let reply = |result| {
            Ok(GrpcResponse::new(proto::ProclaimResponse {
                result: Some(result),
            }))
        };
        if let Err(err) = Self::value_size(&r.value) {
            return reply(R::Error(err));
        }
        let r = sized(r)?;
        let (store, session) = self.api.session_ref(r.session)?;
        let Some(token) = r.token.map(token_from_proto) else {
            return reply(R::Error(invalid("proclaim needs the leadership's token")));
        };
        let e = match self.election(&r.name, Some(store)) {
            Ok(e) => e,
            Err(err) => return reply(R::Error(err)),
        };
        match self
            .write_record(&e, session, r.request_id, r.value, token)
            .await?
        {
            Ok(leader) => reply(R::Ok(leader)),
            Err(err) => reply(R::Error(err)),
        }
    }

    async fn resign(
        &self,
        request: GrpcRequest<proto::ResignRequest>,
    ) -> Result<GrpcResponse<proto::ResignResponse>, Status> {
        use proto::resign_response::Result as R;
        let caller = self.api.auth().caller(&request)?;
        let r = sized(request.into_inner())?;
        caller.check(Perm::Lock, &r.name)?;
        let reply = |result| {
            Ok(GrpcResponse::new(proto::ResignResponse {
                result: Some(result),
            }))
        };
        let (store, session) = self.api.session_ref(r.session)?;
        let e = match self.election(&r.name, Some(store)) {
            Ok(e) => e,
            Err(err) => return reply(R::Error(err)),
        };
        let token = match r.token {
            Some(t) => token_from_proto(t),
            None => {
                // Whatever leadership of the election the session holds.
                use proto::holder_response::Result as H;
                let holders = self
                    .api
                    .do_holder(proto::HolderRequest {
                        name: e.key.clone(),
                    })
                    .await?;
                match holders.result {
                    Some(H::Ok(h)) => {
                        match h
                            .holders
                            .iter()
                            .find(|h| h.session.as_ref().is_some_and(|s| s.id == session.0))
                        {
                            Some(h) => token_from_proto(h.token.unwrap_or_default()),
                            None => {
                                return reply(R::Ok(proto::Resigned { was_leader: false }));
                            }
                        }
                    }
                    Some(H::Error(err)) => return reply(R::Error(err)),
                    None => return Err(Status::internal("empty answer to a holder read")),
                }
            }
        };
        match self.resign_token(&e, session, r.request_id, token).await? {
            Ok(was_leader) => {
                if was_leader {
                    info!(name = %e.name, session = session.0, "resigned");
                    metrics::counter!("tenure_election_resignations_total").increment(1);
                }
                reply(R::Ok(proto::Resigned { was_leader }))
            }
            Err(mut err) => {
                fill(&mut err, &e, session);
                reply(R::Error(err))
            }
        }
    }

    async fn leader(
        &self,
        request: GrpcRequest<proto::LeaderRequest>,
    ) -> Result<GrpcResponse<proto::LeaderResponse>, Status> {
        use proto::leader_response::Result as R;
        let caller = self.api.auth().caller(&request)?;
        let r = sized(request.into_inner())?;
        caller.check(Perm::Read, &r.name)?;
        let reply = |result| {
            Ok(GrpcResponse::new(proto::LeaderResponse {
                result: Some(result),
            }))
        };
        let e = match self.election(&r.name, None) {
            Ok(e) => e,
            Err(err) => return reply(R::Error(err)),
        };
        match self.read(&e).await? {
            Ok(leader) => reply(R::Ok(proto::CurrentLeader { leader })),
            Err(err) => reply(R::Error(err)),
        }
    }

    type ObserveStream = ObserveStream;

    async fn observe(
        &self,
        request: GrpcRequest<proto::ObserveRequest>,
    ) -> Result<GrpcResponse<Self::ObserveStream>, Status> {
        let caller = self.api.auth().caller(&request)?;
        let r = sized(request.into_inner())?;
        caller.check(Perm::Read, &r.name)?;
        let (tx, rx) = mpsc::channel(64);
        match self.election(&r.name, None) {
            Ok(e) => {
                let svc = self.clone();
                tokio::spawn(async move {
                    let mut o = Observer::new(svc, e, tx);
                    let why = o.run(r.after).await;
                    o.close();
                    debug!(name = %o.e.name, ?why, "observation ended");
                });
            }
            Err(err) => {
                let _ = tx
                    .send(Ok(proto::ObserveResponse {
                        kind: Some(proto::observe_response::Kind::Error(err)),
                    }))
                    .await;
            }
        }
        Ok(GrpcResponse::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// The watch id an observation uses with its own watch client.
const OBSERVE_WATCH: u64 = 1;

/// One `Observe` call: an object watch of the election's record, as a watch client of
/// its own ([`crate::driver::WatchRoutes`]), turned into leader changes.
struct Observer {
    svc: ElectionsApi,
    e: Election,
    tx: mpsc::Sender<Result<proto::ObserveResponse, Status>>,
    client: tenure_core::ids::ClientId,
    routed: mpsc::UnboundedSender<(u64, crate::driver::WatchMsg)>,
    changes: mpsc::UnboundedReceiver<(u64, crate::driver::WatchMsg)>,
    /// The last revision reported (or resumed after).
    last: u64,
    /// Whether the last report was "no leader".
    leaderless: Option<bool>,
    watching: bool,
}

/// Why an observation ended (logged).
#[derive(Debug)]
enum ObserveEnd {
    CallerGone,
    Error(#[allow(dead_code)] String),
}

impl Observer {
    fn new(
        svc: ElectionsApi,
        e: Election,
        tx: mpsc::Sender<Result<proto::ObserveResponse, Status>>,
    ) -> Observer {
        let (routed, changes) = mpsc::unbounded_channel();
        let client = svc.api.watches().new_client();
        Observer {
            svc,
            e,
            tx,
            client,
            routed,
            changes,
            last: 0,
            leaderless: None,
            watching: false,
        }
    }

    async fn send(&self, kind: proto::observe_response::Kind) -> Result<(), ObserveEnd> {
        self.tx
            .send(Ok(proto::ObserveResponse { kind: Some(kind) }))
            .await
            .map_err(|_| ObserveEnd::CallerGone)
    }

    /// End the observation with a typed error.
    async fn fail(&self, err: proto::Error) -> ObserveEnd {
        let why = err.message.clone();
        let _ = self.send(proto::observe_response::Kind::Error(err)).await;
        ObserveEnd::Error(why)
    }

    /// Report the leader (or none) from `revision` on; consecutive "no leader"s are one.
    async fn report(
        &mut self,
        revision: u64,
        leader: Option<proto::LeaderInfo>,
    ) -> Result<(), ObserveEnd> {
        self.last = self.last.max(revision);
        let leaderless = leader.is_none();
        if leaderless && self.leaderless == Some(true) {
            return Ok(());
        }
        self.leaderless = Some(leaderless);
        self.send(proto::observe_response::Kind::Change(proto::LeaderChange {
            revision,
            leader,
        }))
        .await
    }

    /// Read the current state, report it, and return the revision to watch after.
    async fn reread(&mut self) -> Result<u64, ObserveEnd> {
        let req = ObjectRequest::List {
            prefix: self.e.key.clone(),
        };
        let revision = match self.svc.object(&self.e, req).await {
            Ok(Ok(Response::Objects { revision, .. })) => revision,
            Ok(Ok(other)) => return Err(ObserveEnd::Error(format!("{other:?}"))),
            Ok(Err((_, wire))) => return Err(self.fail(wire).await),
            Err(s) => return Err(ObserveEnd::Error(s.to_string())),
        };
        let leader = match self.svc.read(&self.e).await {
            Ok(Ok(l)) => l,
            Ok(Err(wire)) => return Err(self.fail(wire).await),
            Err(s) => return Err(ObserveEnd::Error(s.to_string())),
        };
        let at = leader
            .as_ref()
            .map_or(revision, |l| l.revision.max(revision));
        self.report(at, leader).await?;
        Ok(revision)
    }

    /// Register the watch after `after`; `Ok(false)` when the history no longer reaches
    /// back that far (re-read).
    async fn watch(&mut self, after: u64) -> Result<bool, ObserveEnd> {
        let routes = self.svc.api.watches();
        routes.unregister(self.client, OBSERVE_WATCH);
        routes.register(
            self.client,
            OBSERVE_WATCH,
            self.e.store,
            self.routed.clone(),
        );
        self.watching = true;
        let req = Request::Object {
            store: self.e.store,
            req: ObjectRequest::Watch {
                watch: OBSERVE_WATCH,
                prefix: self.e.key.clone(),
                after: Some(after),
            },
        };
        match self.svc.api.request_as(self.client, req).await {
            Ok(Ok(Response::Watching { .. })) => Ok(true),
            Ok(Ok(other)) => Err(ObserveEnd::Error(format!("{other:?}"))),
            Ok(Err(ClientError::Object(ObjectError::Compacted { .. }))) => Ok(false),
            Ok(Err(e)) => Err(self.fail(self.svc.api.client_error(self.e.store, &e)).await),
            Err(s) => Err(ObserveEnd::Error(s.to_string())),
        }
    }

    async fn run(&mut self, after: Option<u64>) -> ObserveEnd {
        let mut from = match after {
            Some(a) => {
                self.last = a;
                a
            }
            None => match self.reread().await {
                Ok(r) => r,
                Err(end) => return end,
            },
        };
        loop {
            match self.watch(from).await {
                Ok(true) => {}
                Ok(false) => match self.reread().await {
                    Ok(r) => {
                        from = r;
                        continue;
                    }
                    Err(end) => return end,
                },
                Err(end) => return end,
            }
            match self.follow().await {
                Ok(()) => match self.reread().await {
                    // The history no longer reached the watch's position.
                    Ok(r) => from = r,
                    Err(end) => return end,
                },
                Err(end) => return end,
            }
        }
    }

    /// Turn the watch's changes into reports until it ends; `Ok` when it ended because
    /// the history was compacted past it.
    async fn follow(&mut self) -> Result<(), ObserveEnd> {
        loop {
            let msg = tokio::select! {
                m = self.changes.recv() => m,
                _ = self.tx.closed() => return Err(ObserveEnd::CallerGone),
            };
            let Some((_, msg)) = msg else {
                return Err(ObserveEnd::Error("watch routes closed".into()));
            };
            match msg {
                crate::driver::WatchMsg::Events(changes) => {
                    for c in changes {
                        if c.revision <= self.last {
                            continue;
                        }
                        match c.kind {
                            tenure_core::objects::ChangeKind::Delete => {
                                self.report(c.revision, None).await?;
                            }
                            tenure_core::objects::ChangeKind::Put { .. } => {
                                match self.svc.read(&self.e).await {
                                    Ok(Ok(Some(l))) if l.revision == c.revision => {
                                        self.report(c.revision, Some(l)).await?;
                                    }
                                    // Replaced or deleted since: its successor's change
                                    // follows.
                                    Ok(Ok(_)) => {}
                                    Ok(Err(wire)) => return Err(self.fail(wire).await),
                                    Err(s) => return Err(ObserveEnd::Error(s.to_string())),
                                }
                            }
                        }
                    }
                }
                crate::driver::WatchMsg::Ended(reason) => {
                    self.watching = false;
                    if matches!(reason, ClientError::Object(ObjectError::Compacted { .. })) {
                        return Ok(());
                    }
                    let wire = self.svc.api.client_error(self.e.store, &reason);
                    return Err(self.fail(wire).await);
                }
            }
        }
    }

    /// Stop routing the watch and remove it from the manager (in the background).
    fn close(&mut self) {
        let routes = self.svc.api.watches();
        routes.unregister(self.client, OBSERVE_WATCH);
        if !self.watching {
            return;
        }
        let api = self.svc.api.clone();
        let (client, store) = (self.client, self.e.store);
        tokio::spawn(async move {
            let req = Request::Object {
                store,
                req: ObjectRequest::Unwatch {
                    watch: OBSERVE_WATCH,
                },
            };
            let _ = api.request_as(client, req).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_core::config::store_of;

    #[test]
    fn an_election_key_is_a_child_of_its_name() {
        assert_eq!(election_key("/svc/db"), "/svc/db/.election");
        assert_eq!(
            store_of("/svc/db", 64),
            store_of(&election_key("/svc/db"), 64)
        );
    }
}
