//! Leader election (DESIGN §6; `service Elections` in `proto/elections.proto`), in the
//! shape of etcd's `concurrency.Election`.
//!
//! [`Client::elections`] gives an [`Elections`] handle:
//!
//! - [`Elections::campaign`] waits until this client leads the election, then publishes
//!   its value, and returns a [`Leadership`] carrying the fencing token. The campaign runs
//!   under the client's one session (opened transparently, as for locks; in another
//!   store than its home, under its child there): the election is the lock `NAME/.election`, whose FIFO queue orders the
//!   candidates. If that session ends while the campaign waits, the campaign fails with
//!   [`Error::SessionExpired`] — it does not go on under a new session, and its place in
//!   the queue is gone with the session (no zombie candidate). Campaign again to stand
//!   again: a new session is opened.
//! - [`Leadership::lost`] resolves when leadership may be lost: a loss warning before the
//!   session's conservative deadline (send time of the last answered keep-alive + TTL −
//!   δ_c) unless a keep-alive extends it, or as soon as the session is known to have
//!   expired. Stop acting as leader then; pass [`Leadership::token`] to every resource
//!   the leader writes, so a deposed leader's late writes are refused.
//! - [`Leadership::resign`] (or dropping the leadership) deletes the record and releases
//!   the lock: observers see "no leader", then the next candidate leads.
//!   [`Leadership::proclaim`] replaces the value without an election.
//! - [`Elections::leader`] reads the current leader (linearizable), or none.
//! - [`Elections::observe`] reports the current leader, then every change: each new
//!   leader or value, and every "no leader" — a deletion of the record (resignation,
//!   session expiry) is reported, unlike etcd's `Observe`. It follows the store's manager
//!   when it moves and resumes after the last revision seen, so nothing is missed or
//!   repeated; a leader that came and went between two reads of the record (within
//!   milliseconds) is reported by its end only.
//!
//! Campaigns are retried with one request id: a retry after a redirect, a failover or a
//! long wait cut by the per-call bound continues the same campaign (the same place in the
//! queue), never a second one.

use crate::locks::{Loss, Session, SessionState, may_be_lost};
use crate::proto;
use crate::{Bounds, Client, Error, FencingToken, Result, Transport, Wait};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, info, warn};

/// The key of an election's lock and record: `NAME/.election` (a child of the name, so
/// the elections `/a` and `/a/b` do not cover each other).
pub fn election_key(name: &str) -> String {
    format!("{name}/.election")
}

/// A leader: its value, fencing token and session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// The election.
    pub name: String,
    /// The value the leader published.
    pub value: Vec<u8>,
    /// The leadership's fencing token (the election lock's grant).
    pub token: FencingToken,
    /// The store of the election and of the leader's session.
    pub store: u32,
    /// The leader's session.
    pub session: u64,
    /// The store's object revision at which this leader's record was written.
    pub revision: u64,
}

impl Leader {
    /// The value as text (invalid UTF-8 replaced).
    pub fn value_str(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.value)
    }

    fn from_proto(l: proto::LeaderInfo) -> Leader {
        let s = l.session.unwrap_or_default();
        Leader {
            name: l.name,
            value: l.value,
            token: l.token.unwrap_or_default().into(),
            store: s.store,
            session: s.id,
            revision: l.revision,
        }
    }
}

/// One change an observation reports: who leads from `revision` on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderChange {
    /// The store's object revision of the change.
    pub revision: u64,
    /// The leader (none: nobody leads).
    pub leader: Option<Leader>,
}

/// The client's election API (see the module docs). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Elections {
    client: Client,
}

impl Client {
    /// The election API.
    pub fn elections(&self) -> Elections {
        Elections {
            client: self.clone(),
        }
    }
}

/// Resolves when the session is known to have ended.
async fn ended(mut rx: watch::Receiver<SessionState>) {
    loop {
        if rx.borrow_and_update().expired {
            return;
        }
        if rx.changed().await.is_err() {
            // Nothing will report an expiry any more.
            futures::future::pending::<()>().await;
        }
    }
}

impl Elections {
    /// Bounds of a request that should be answered promptly.
    fn quick(&self) -> Bounds {
        let o = &self.client.inner.opts;
        Bounds {
            per_call: o.request_timeout,
            deadline: Some(Instant::now() + o.retry_deadline),
            max_attempts: Some(o.max_attempts),
        }
    }

    /// Wait until this client leads `name` (a path), then publish `value`. See the
    /// module docs.
    pub async fn campaign(&self, name: &str, value: impl Into<Vec<u8>>) -> Result<Leadership> {
        self.campaign_with(name, value, Wait::Forever).await
    }

    /// [`Elections::campaign`], waiting as `wait` says: [`Wait::Try`] fails with
    /// [`Error::WouldBlock`] when another session leads or campaigns first,
    /// [`Wait::Timeout`] with [`Error::Timeout`] when not elected in time.
    pub async fn campaign_with(
        &self,
        name: &str,
        value: impl Into<Vec<u8>>,
        wait: Wait,
    ) -> Result<Leadership> {
        let value = value.into();
        let client = &self.client;
        let o = &client.inner.opts;
        let store = client.store_of(name).await?;
        let session = client.session(store).await?;
        let request_id = client.next_request_id();
        let now = Instant::now();
        let (no_wait, timeout_ms, bounds) = match wait {
            Wait::Try => (true, 0, self.quick()),
            Wait::Timeout(d) => (
                false,
                (d.as_millis() as u64).max(1),
                Bounds {
                    per_call: d + o.request_timeout,
                    deadline: Some(now + d + o.retry_deadline),
                    max_attempts: None,
                },
            ),
            Wait::Forever => (
                false,
                0,
                Bounds {
                    per_call: o.wait_poll,
                    deadline: None,
                    max_attempts: None,
                },
            ),
        };
        let req = proto::CampaignRequest {
            name: name.to_string(),
            value,
            session: Some(proto::SessionRef {
                store: session.store,
                id: session.id,
            }),
            request_id,
            timeout_ms,
            r#try: no_wait,
            no_wait,
        };
        let call = client.routed_elections(store, bounds, |mut c| {
            let req = req.clone();
            async move {
                use proto::campaign_response::Result as R;
                Ok(match c.campaign(req).await?.into_inner().result {
                    Some(R::Ok(l)) => Ok(Leader::from_proto(l)),
                    Some(R::Error(e)) => Err(Error::from_proto(e)),
                    None => Err(Error::Malformed),
                })
            }
        });
        // A timed campaign returns within its time plus the client's slack, whatever the
        // devices do (as a timed lock wait does).
        let limit = async {
            match wait {
                Wait::Timeout(d) => tokio::time::sleep_until((now + d + o.wait_slack).into()).await,
                _ => futures::future::pending().await,
            }
        };
        let leader = tokio::select! {
            () = limit => return Err(Error::Timeout(name.to_string())),
            r = call => r.inspect_err(|e| {
                if matches!(e, Error::SessionExpired(_)) {
                    session.expire();
                }
            })?,
            // The session ended while the campaign waited: so did the campaign (the
            // store dropped its place in the queue with the session).
            () = ended(session.state.subscribe()) => {
                return Err(Error::SessionExpired(session.id));
            }
        };
        debug!(name, token = %leader.token, session = session.id, "elected");
        let leadership = Leadership {
            elections: self.clone(),
            state: session.state.subscribe(),
            session,
            store,
            leader,
            resigned: false,
        };
        self.confirmed(leadership).await
    }

    /// A leadership handed out only while its session is certainly alive: when the
    /// session's deadline is already within the loss warning (a failover outlasted it),
    /// a keep-alive must extend it first; if none does, the leadership is resigned and
    /// the call reports it was not taken ([`Error::GrantUnconfirmed`]).
    async fn confirmed(&self, l: Leadership) -> Result<Leadership> {
        let safe = |l: &Leadership| {
            let s = *l.state.borrow();
            !s.expired && s.until().saturating_duration_since(Instant::now()) > l.loss_warning()
        };
        if safe(&l) {
            return Ok(l);
        }
        let o = &self.client.inner.opts;
        if o.transport == Transport::Stream {
            let limit = (l.session.ttl / 3).clamp(o.attempt_timeout, o.request_timeout);
            info!(name = %l.leader.name, "elected near the session's deadline: confirming the session first");
            self.client.link(l.session.store).confirm(limit).await;
            if safe(&l) {
                return Ok(l);
            }
        }
        warn!(name = %l.leader.name, "the session could not be confirmed in time: resigning");
        let name = l.leader.name.clone();
        drop(l);
        Err(Error::GrantUnconfirmed(name))
    }

    /// The current leader of `name`, or none (a linearizable read at the store's
    /// manager).
    pub async fn leader(&self, name: &str) -> Result<Option<Leader>> {
        let store = self.client.store_of(name).await?;
        let req = proto::LeaderRequest {
            name: name.to_string(),
        };
        self.client
            .routed_elections(store, self.quick(), |mut c| {
                let req = req.clone();
                async move {
                    use proto::leader_response::Result as R;
                    Ok(match c.leader(req).await?.into_inner().result {
                        Some(R::Ok(l)) => Ok(l.leader.map(Leader::from_proto)),
                        Some(R::Error(e)) => Err(Error::from_proto(e)),
                        None => Err(Error::Malformed),
                    })
                }
            })
            .await
    }

    /// Resign the leadership of `name` that `session` (of `store`, its home) holds with
    /// `token` (none: whatever leadership of `name` it holds). Whether this ended a
    /// leadership.
    pub(crate) async fn resign_raw(
        &self,
        store: u32,
        session: u64,
        name: &str,
        token: Option<FencingToken>,
    ) -> Result<bool> {
        let session_store = store;
        let store = self.client.store_of(name).await?;
        let req = proto::ResignRequest {
            name: name.to_string(),
            session: Some(proto::SessionRef {
                store: session_store,
                id: session,
            }),
            token: token.map(Into::into),
            request_id: self.client.next_request_id(),
        };
        self.client
            .routed_elections(store, self.quick(), |mut c| {
                let req = req.clone();
                async move {
                    use proto::resign_response::Result as R;
                    Ok(match c.resign(req).await?.into_inner().result {
                        Some(R::Ok(r)) => Ok(r.was_leader),
                        Some(R::Error(e)) => Err(Error::from_proto(e)),
                        None => Err(Error::Malformed),
                    })
                }
            })
            .await
    }

    /// Observe `name`: the current leader (or none) first, then every change (see the
    /// module docs). Fails at once for an invalid name, or when no device answers
    /// within the retry deadline.
    pub async fn observe(&self, name: &str) -> Result<Observation> {
        let store = self.client.store_of(name).await?;
        let (tx, rx) = mpsc::channel(64);
        let (ready_tx, ready_rx) = oneshot::channel();
        let task = ObserveTask {
            client: self.client.clone(),
            store,
            name: name.to_string(),
            last: None,
            leaderless: None,
            tx,
            ready: Some(ready_tx),
            endpoint: String::new(),
        };
        tokio::spawn(task.run());
        match ready_rx.await {
            Ok(Ok(())) => Ok(Observation { rx }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Error::Closed),
        }
    }
}

/// Leadership of an election (see the module docs). Dropping it resigns (from a
/// spawned task); use [`Leadership::resign`] to wait for the resignation.
#[derive(Debug)]
pub struct Leadership {
    elections: Elections,
    session: Arc<Session>,
    /// The election's store.
    store: u32,
    leader: Leader,
    state: watch::Receiver<SessionState>,
    resigned: bool,
}

impl Leadership {
    /// The election.
    pub fn name(&self) -> &str {
        &self.leader.name
    }

    /// The leadership's fencing token: pass it to every resource the leader writes.
    pub fn token(&self) -> FencingToken {
        self.leader.token
    }

    /// The value published.
    pub fn value(&self) -> &[u8] {
        &self.leader.value
    }

    /// The leader as observers see it.
    pub fn leader(&self) -> &Leader {
        &self.leader
    }

    /// The leading session.
    pub fn session(&self) -> u64 {
        self.session.id
    }

    /// The store of the election.
    pub fn store(&self) -> u32 {
        self.store
    }

    /// The store of the client's session (its home; in another store than the
    /// election's, the session leads through its child there).
    pub fn session_store(&self) -> u32 {
        self.session.store
    }

    /// The session's TTL.
    pub fn ttl(&self) -> Duration {
        self.session.ttl
    }

    /// The election's lock (`NAME/.election`): writes fenced by it and
    /// [`Leadership::token`] are refused once this leadership has ended.
    pub fn lock_name(&self) -> String {
        election_key(&self.leader.name)
    }

    /// The conservative deadline: this client certainly leads until then. Keep-alives
    /// move it forward.
    pub fn deadline(&self) -> Instant {
        self.state.borrow().until()
    }

    /// Whether this client certainly leads now.
    pub fn is_leader(&self) -> bool {
        let s = *self.state.borrow();
        !s.expired && !self.resigned && Instant::now() < s.until()
    }

    /// How long before the deadline [`Leadership::lost`] resolves when not extended.
    pub fn loss_warning(&self) -> Duration {
        self.elections
            .client
            .options()
            .loss_warning
            .min(self.session.ttl / 2)
    }

    /// A watch of the session's state (deadline moves, expiry).
    pub fn watch(&self) -> watch::Receiver<SessionState> {
        self.state.clone()
    }

    /// Resolves when leadership may be lost: the loss warning before the deadline if no
    /// keep-alive has extended it by then, or as soon as the session is known to have
    /// expired. Cancel-safe; can be awaited again.
    pub async fn lost(&self) -> Loss {
        may_be_lost(self.state.clone(), self.loss_warning()).await
    }

    /// Publish a new value without giving up leadership (fenced by the token:
    /// [`Error::StaleToken`] when this client no longer leads).
    pub async fn proclaim(&mut self, value: impl Into<Vec<u8>>) -> Result<()> {
        let req = proto::ProclaimRequest {
            name: self.leader.name.clone(),
            value: value.into(),
            session: Some(proto::SessionRef {
                store: self.session.store,
                id: self.session.id,
            }),
            token: Some(self.leader.token.into()),
            request_id: self.elections.client.next_request_id(),
        };
        let leader = self
            .elections
            .client
            .routed_elections(self.store, self.elections.quick(), |mut c| {
                let req = req.clone();
                async move {
                    use proto::proclaim_response::Result as R;
                    Ok(match c.proclaim(req).await?.into_inner().result {
                        Some(R::Ok(l)) => Ok(Leader::from_proto(l)),
                        Some(R::Error(e)) => Err(Error::from_proto(e)),
                        None => Err(Error::Malformed),
                    })
                }
            })
            .await?;
        self.leader = leader;
        Ok(())
    }

    /// Give up leadership and wait for the answer: whether this ended it (false when it
    /// had already ended: the session expired, or the leader was deposed).
    pub async fn resign(mut self) -> Result<bool> {
        self.resigned = true;
        let (store, session) = (self.session.store, self.session.id);
        self.elections
            .resign_raw(store, session, &self.leader.name, Some(self.leader.token))
            .await
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if self.resigned || self.state.borrow().expired {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            warn!(name = %self.leader.name, "leadership dropped outside a runtime: it ends when its session does");
            return;
        };
        let elections = self.elections.clone();
        let (store, session) = (self.session.store, self.session.id);
        let (name, token) = (self.leader.name.clone(), self.leader.token);
        rt.spawn(async move {
            if let Err(e) = elections
                .resign_raw(store, session, &name, Some(token))
                .await
            {
                debug!(%name, "resignation on drop failed: {e}");
            }
        });
    }
}

/// A running observation: [`Observation::next`] gives its changes. Dropping it stops it.
#[derive(Debug)]
pub struct Observation {
    rx: mpsc::Receiver<Result<LeaderChange>>,
}

impl Observation {
    /// The next change; `None` when the observation stopped, an error when it cannot go
    /// on.
    pub async fn next(&mut self) -> Option<Result<LeaderChange>> {
        self.rx.recv().await
    }
}

/// The task behind an [`Observation`]: one `Observe` stream at the store's manager,
/// opened again wherever the manager goes, after the last revision reported.
struct ObserveTask {
    client: Client,
    store: u32,
    name: String,
    /// The last revision reported.
    last: Option<u64>,
    /// Whether the last report was "no leader".
    leaderless: Option<bool>,
    tx: mpsc::Sender<Result<LeaderChange>>,
    /// Where the first stream's outcome goes.
    ready: Option<oneshot::Sender<Result<()>>>,
    /// The endpoint of the last stream.
    endpoint: String,
}

/// Why an observation's stream ended.
#[derive(Debug)]
enum Resume {
    /// Open again at once, the hint first.
    Redirect(Option<String>),
    /// Open again after a backoff.
    Retry,
    /// Stop: the caller went away, or an error that no retry mends.
    Stop(Option<Error>),
}

impl ObserveTask {
    async fn run(mut self) {
        let mut hint = None;
        let mut rotate = 0;
        let mut failures = 0u32;
        let mut redirects = crate::Redirects::default();
        let started = Instant::now();
        loop {
            let delivered = self.last;
            let resume = self.once(hint.take(), rotate).await;
            if self.last != delivered {
                failures = 0;
                redirects.reset();
            }
            debug!(name = %self.name, last = ?self.last, ?resume, "observation stream ended");
            let client = self.client.clone();
            let o = &client.inner.opts;
            let backoff = |failures: u32| {
                o.backoff_min
                    .saturating_mul(1 << failures.min(10))
                    .min(o.backoff_max)
            };
            match resume {
                Resume::Redirect(h) => {
                    client.clear_route(self.store);
                    hint = redirects.follow(h.as_deref(), &self.endpoint);
                    if hint.is_none() {
                        rotate += 1;
                        failures += 1;
                        tokio::time::sleep(backoff(failures)).await;
                    }
                }
                Resume::Retry => {
                    redirects.reset();
                    failures += 1;
                    if failures.is_multiple_of(3) {
                        client.clear_route(self.store);
                        rotate += 1;
                    }
                    if self.ready.is_some() && started.elapsed() > o.retry_deadline {
                        self.fail(Error::GaveUp {
                            attempts: failures,
                            elapsed: started.elapsed(),
                            last: Box::new(Error::Unavailable { store: self.store }),
                        })
                        .await;
                        return;
                    }
                    tokio::time::sleep(backoff(failures)).await;
                }
                Resume::Stop(e) => {
                    if let Some(e) = e {
                        self.fail(e).await;
                    }
                    return;
                }
            }
        }
    }

    async fn fail(&mut self, e: Error) {
        match self.ready.take() {
            Some(r) => {
                let _ = r.send(Err(e));
            }
            None => {
                let _ = self.tx.send(Err(e)).await;
            }
        }
    }

    /// One stream: open it at an endpoint, report its changes until it ends.
    async fn once(&mut self, hint: Option<String>, rotate: usize) -> Resume {
        let client = self.client.clone();
        let o = client.inner.opts.clone();
        let endpoint = hint.unwrap_or_else(|| client.route(self.store, rotate));
        self.endpoint = endpoint.clone();
        let mut c = match client.elections_channel(&endpoint) {
            Ok(c) => c,
            Err(e) => return Resume::Stop(Some(e)),
        };
        let req = proto::ObserveRequest {
            name: self.name.clone(),
            after: self.last,
        };
        let opened = tokio::select! {
            r = tokio::time::timeout(o.request_timeout, c.observe(req)) => r,
            _ = self.tx.closed() => return Resume::Stop(None),
        };
        let mut stream = match opened {
            Ok(Ok(s)) => s.into_inner(),
            Ok(Err(s)) => {
                let e = Error::from_status(s);
                debug!(name = %self.name, %endpoint, "observe refused: {e}");
                return if e.retryable() || e.transient_rpc() {
                    Resume::Retry
                } else {
                    Resume::Stop(Some(e))
                };
            }
            Err(_) => {
                client.pass_over(&endpoint);
                return Resume::Retry;
            }
        };
        loop {
            // The first answer (the current state, or a redirect) comes within the request
            // timeout; changes come whenever they happen.
            let limit = if self.ready.is_some() {
                o.request_timeout
            } else {
                Duration::MAX
            };
            let msg = tokio::select! {
                m = tokio::time::timeout(limit, stream.message()) => m,
                _ = self.tx.closed() => return Resume::Stop(None),
            };
            let msg = match msg {
                Ok(Ok(Some(m))) => m,
                Ok(Ok(None)) => return Resume::Retry,
                Ok(Err(s)) => {
                    debug!(name = %self.name, %endpoint, "observation stream lost: {s}");
                    return Resume::Retry;
                }
                Err(_) => {
                    client.pass_over(&endpoint);
                    return Resume::Retry;
                }
            };
            use proto::observe_response::Kind;
            match msg.kind {
                Some(Kind::Change(c)) => {
                    client.set_route(self.store, &endpoint);
                    if self.last.is_some_and(|l| c.revision <= l) {
                        continue;
                    }
                    self.last = Some(c.revision);
                    if let Some(r) = self.ready.take() {
                        let _ = r.send(Ok(()));
                    }
                    let leader = c.leader.map(Leader::from_proto);
                    // Consecutive "no leader"s (across a resumption) are one.
                    if leader.is_none() && self.leaderless == Some(true) {
                        continue;
                    }
                    self.leaderless = Some(leader.is_none());
                    let change = LeaderChange {
                        revision: c.revision,
                        leader,
                    };
                    if self.tx.send(Ok(change)).await.is_err() {
                        return Resume::Stop(None);
                    }
                }
                Some(Kind::Error(e)) => {
                    return match Error::from_proto(e) {
                        Error::NotManager { hint, .. } => Resume::Redirect(hint),
                        e if e.retryable() => Resume::Retry,
                        e => Resume::Stop(Some(e)),
                    };
                }
                None => return Resume::Retry,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every election call can run in a spawned task with a borrowed name.
    #[allow(dead_code)]
    fn calls_are_spawnable(e: Elections) {
        tokio::spawn(async move {
            let n = String::from("/a/b");
            let mut l = e.campaign(&n, b"v".to_vec()).await.unwrap();
            let _ = l.proclaim(b"w".to_vec()).await;
            let _ = l.lost().await;
            let _ = l.resign().await;
            let _ = e.leader(&n).await;
            let mut o = e.observe(&n).await.unwrap();
            let _ = o.next().await;
        });
    }

    #[test]
    fn the_election_key_is_a_child_of_the_name() {
        assert_eq!(election_key("/svc/db"), "/svc/db/.election");
    }
}
