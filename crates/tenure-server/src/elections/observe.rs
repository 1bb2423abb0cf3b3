//! Observe: the [`Observer`] that follows an election's leader record through a watch
//! and streams every change of leader to the client.

use super::{Election, ElectionsApi};
use tenure_client::proto;
use tenure_core::io::{ClientError, ObjectRequest, Request, Response};
use tenure_core::objects::ObjectError;
use tokio::sync::mpsc;
use tonic::Status;

/// The watch id an observation uses with its own watch client.
pub(super) const OBSERVE_WATCH: u64 = 1;

/// One `Observe` call: an object watch of the election's record, as a watch client of
/// its own ([`crate::driver::routes::WatchRoutes`]), turned into leader changes.
pub(super) struct Observer {
    svc: ElectionsApi,
    pub(super) e: Election,
    tx: mpsc::Sender<Result<proto::ObserveResponse, Status>>,
    client: tenure_core::ids::ClientId,
    routed: mpsc::UnboundedSender<(u64, crate::driver::routes::WatchMsg)>,
    changes: mpsc::UnboundedReceiver<(u64, crate::driver::routes::WatchMsg)>,
    /// The last revision reported (or resumed after).
    last: u64,
    /// Whether the last report was "no leader".
    leaderless: Option<bool>,
    watching: bool,
}

/// Why an observation ended (logged).
#[derive(Debug)]
pub(super) enum ObserveEnd {
    CallerGone,
    Error(#[allow(dead_code)] String),
}

impl Observer {
    pub(super) fn new(
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
                values: false,
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

    pub(super) async fn run(&mut self, after: Option<u64>) -> ObserveEnd {
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
                crate::driver::routes::WatchMsg::Events { changes, .. } => {
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
                crate::driver::routes::WatchMsg::Ended(reason) => {
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
    pub(super) fn close(&mut self) {
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
