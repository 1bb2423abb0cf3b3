//! `impl Elections for ElectionsApi`: the gRPC handlers (Campaign, Proclaim, Resign,
//! Leader, Observe).

use super::calls::{campaign_task, fill};
use super::observe::Observer;
use super::{Attached, ElectionsApi, Running, error, invalid};
use crate::auth::Perm;
use crate::grpc::{sized, token_from_proto};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use tenure_client::proto::{self, elections_server::Elections, error::Kind};
use tokio::sync::{Notify, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request as GrpcRequest, Response as GrpcResponse, Status};
use tracing::{debug, info};

pub(super) type ObserveStream =
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
                // Whatever leadership of the election the session holds (the lock
                // table names the session's child when it is of another store).
                let held_by = match self.session_in_store(&e, session).await? {
                    Ok(Some(s)) => s,
                    Ok(None) => return reply(R::Ok(proto::Resigned { was_leader: false })),
                    Err(err) => return reply(R::Error(err)),
                };
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
                            .find(|h| h.session.as_ref().is_some_and(|s| s.id == held_by.0))
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
