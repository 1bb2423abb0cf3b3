//! The election calls as operations on the store: checking a name, campaigning (the
//! background task that waits for the lock), leader lookup, and the errors they answer.

use super::{
    ABANDON_GRACE, CampaignOutcome, Election, ElectionsApi, MAX_VALUE_BYTES, Running, error,
    invalid,
};
use crate::grpc::{invalid_name, token_from_proto, token_to_proto, unexpected};
use crate::objects::under;
use prost::Message;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tenure_client::elections::election_key;
use tenure_client::proto::{self, error::Kind};
use tenure_core::ids::SessionId;
use tenure_core::ids::StoreId;
use tenure_core::io::{AttachSession, ClientError, ObjectRequest, Request, Response, Writer};
use tenure_core::lockctl::FencingToken;
use tenure_core::objects::{Conditions, Fence, ObjectError};
use tonic::Status;
use tracing::info;

impl ElectionsApi {
    /// Check an election name (a lockable path whose election key is one too), used under
    /// a session of store `session` (of any store: in another one than the election's,
    /// its requests run under the session's child there, DESIGN §4).
    pub(super) fn election(
        &self,
        name: &str,
        session: Option<StoreId>,
    ) -> Result<Election, proto::Error> {
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
        if let Some(e) = session.and_then(|s| self.api.unknown_store(s)) {
            return Err(e);
        }
        Ok(Election {
            name: name.to_string(),
            store,
            key,
            home: session.unwrap_or(store),
        })
    }

    /// The session as the election's store knows it: itself, or its child there when it
    /// is of another store (none when it has no child there yet, so holds nothing).
    pub(super) async fn session_in_store(
        &self,
        e: &Election,
        session: SessionId,
    ) -> Result<Result<Option<SessionId>, proto::Error>, Status> {
        if e.home == e.store {
            return Ok(Ok(Some(session)));
        }
        let ask = Request::AttachSession(AttachSession {
            store: e.home,
            session,
            child_store: e.store,
            child: None,
        });
        Ok(match self.api.request(ask).await? {
            Ok(Response::SessionAttached(a)) => Ok(a.child),
            Ok(other) => return Err(unexpected("a session's child lookup", &other)),
            Err(err) => {
                let mut wire = self.api.client_error(e.home, &err);
                fill(&mut wire, e, session);
                Err(wire)
            }
        })
    }

    /// A value within [`MAX_VALUE_BYTES`], or the typed error.
    pub(super) fn value_size(value: &[u8]) -> Result<(), proto::Error> {
        if value.len() > MAX_VALUE_BYTES {
            let (size, limit) = (value.len() as u64, MAX_VALUE_BYTES as u64);
            return Err(error(
                Kind::TooLarge(proto::TooLarge { size, limit }),
                format!("a leader value of {size} bytes is larger than the limit of {limit}"),
            ));
        }
        Ok(())
    }

    /// Run an object request for the election's record (a write under the session's child
    /// when the session is of another store); a core error becomes the typed wire error.
    pub(super) async fn object(
        &self,
        e: &Election,
        req: ObjectRequest,
    ) -> Result<Result<Response, (ClientError, proto::Error)>, Status> {
        let home = req
            .writer()
            .and_then(|w| w.session)
            .is_some()
            .then_some(e.home);
        let req = Request::Object {
            store: e.store,
            req,
        };
        let answer = self.api.request(under(home, req)).await?;
        Ok(answer.map_err(|err| {
            let wire = self.api.client_error(e.store, &err);
            (err, wire)
        }))
    }

    /// The election's current record: its leader, or none.
    pub(super) async fn read(
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
    pub(super) async fn write_record(
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
            session_store: Some(e.home.0),
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
                store: e.home.0,
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
    pub(super) async fn resign_token(
        &self,
        e: &Election,
        session: SessionId,
        request_id: u64,
        token: FencingToken,
    ) -> Result<Result<bool, proto::Error>, Status> {
        let ours = |l: &proto::LeaderInfo| {
            l.session.as_ref().map(|s| (s.store, s.id)) == Some((e.home.0, session.0))
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
pub(super) fn leader_info(
    e: &Election,
    r: proto::LeaderRecord,
    revision: u64,
) -> proto::LeaderInfo {
    proto::LeaderInfo {
        name: e.name.clone(),
        value: r.value,
        token: r.token,
        session: Some(proto::SessionRef {
            store: r.session_store.unwrap_or(e.store.0),
            id: r.session,
        }),
        revision,
    }
}

/// The typed error of a request made with a token the session does not lead with.
pub(super) fn not_leader(e: &Election, session: SessionId, token: FencingToken) -> proto::Error {
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
pub(super) fn fill(err: &mut proto::Error, e: &Election, session: SessionId) {
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
pub(super) async fn campaign_task(
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
            store: e.home.0,
            id: session.0,
        }),
        name: e.key.clone(),
        mode: proto::LockMode::Exclusive as i32,
        r#try: r.r#try || r.no_wait,
        timeout_ms: r.timeout_ms,
        request_id: r.request_id,
        lock_delay_ms: None,
        no_wait: r.r#try || r.no_wait,
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
pub(super) fn abandoned(e: &Election) -> proto::Error {
    error(
        Kind::Rejected(proto::Rejected {
            reason: "abandoned".into(),
        }),
        format!("the campaign for {} was abandoned by its caller", e.name),
    )
}
