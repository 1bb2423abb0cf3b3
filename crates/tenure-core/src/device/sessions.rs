//! One session per client (DESIGN §4, "One session per client"): a client opens one
//! session, in its *home* store, and uses it for names in every store.
//!
//! - **Children.** A request under the session for a name in another store T
//!   ([`Request::Under`]) runs under the session's *child* in T: an ordinary session of
//!   T with the home session's TTL, its own locks and fencing (the seeds' per-store
//!   session rules are unchanged; only who renews the child changes). The device serving
//!   the client asks home for the child; when there is none it opens one in T and
//!   records it at home ([`crate::data::StoreOp::SessionAttach`], which keeps the first
//!   child recorded for a store), renews it, and only then sends the request under it:
//!   no request runs under a child that home does not name. The renewal matters: a
//!   keep-alive whose read of home came before the record did not renew the child, yet
//!   its client counts on its send time; a renewal received after the record outlasts
//!   every such keep-alive (simulator seed 1891 found the race).
//! - **Keep-alives.** A client's keep-alive renews home, whose answer names the
//!   children; this device then renews each child and answers alive only when every one
//!   answered alive. Each renewal arrives after the client sent its keep-alive, so the
//!   client's deadline (send time + TTL − δ_c, [`crate::session::client_deadline`]) is
//!   before every child's deadline, as with one store.
//! - **Expiry.** A child that expired (or that its store does not know) makes the whole
//!   session expired: the client is answered `SessionExpired` and this device renews the
//!   session no more. Nothing is closed early: home and the other children end at their
//!   own deadlines, with lock-delay, after the client's deadline has passed (closing them
//!   now would release locks the client may still believe it holds).
//! - **Close** closes every child, then home.
//! - **Volatile.** This device keeps a cache of children and the requests in progress; a
//!   crash loses them with its clients' connections. A request in progress past its
//!   deadline (as a forwarded one's, plus a lease) is answered `Unavailable`; its client
//!   asks again with the same request id.

use super::Device;
use crate::error::ClientError;
use crate::generation::Generation;
use crate::ids::{ClientId, SessionId, StoreId};
use crate::io::Output;
use crate::io::request::{AttachSession, Attached, Request, Response, Under};
use crate::time::Instant;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Children (and expired sessions) remembered; the oldest entries are forgotten first
/// (a forgotten child is asked of home again).
const CACHED: usize = 65_536;

/// A client session: its home store and id.
type Group = (StoreId, SessionId);

/// Requests under sessions spanning stores, in progress here.
#[derive(Debug, Default)]
pub(super) struct Groups {
    next: u64,
    jobs: BTreeMap<u64, Job>,
    /// Sub-requests in flight, by the internal client id each was sent under.
    subs: BTreeMap<ClientId, (u64, Sub)>,
    deadlines: BTreeSet<(Instant, u64)>,
    children: BTreeMap<(Group, StoreId), SessionId>,
    /// Sessions found expired through a child: not renewed from here again.
    dead: BTreeSet<Group>,
}

#[derive(Debug)]
struct Job {
    client: ClientId,
    req_id: u64,
    group: Group,
    deadline: Instant,
    subs: Vec<ClientId>,
    kind: Kind,
}

impl Job {
    /// The store its sub-requests' answers are about: the request's for a route, home's
    /// for a renewal.
    fn target(&self) -> StoreId {
        match &self.kind {
            Kind::Route(req) => req.store(),
            Kind::Renew { .. } => self.group.0,
        }
    }
}

#[derive(Debug)]
enum Kind {
    /// A request under the session for a name in another store.
    Route(Request),
    /// A keep-alive, or (`close`) a close, of the session and its children.
    Renew {
        close: bool,
        ttl: Duration,
        children: BTreeMap<StoreId, SessionId>,
        waiting: usize,
    },
}

/// What a sub-request is for.
#[derive(Clone, Copy, Debug)]
enum Sub {
    /// Home, asked for the child.
    Ask,
    /// The child's store, opening one.
    Open,
    /// Home, recording the child just opened.
    Attach(SessionId),
    /// The child's store, renewing the child just learned before the first request
    /// runs under it here.
    Fresh(SessionId),
    /// The client's request, under the child.
    Inner,
    /// Home's keep-alive (or, closing, the keep-alive that names the children).
    Home,
    /// A child's keep-alive or close (the child's store and id).
    Child(StoreId, SessionId),
    /// Home's close, after its children's.
    CloseHome,
    /// The close of a child opened in vain (another was recorded first): not answered.
    Orphan,
}

/// The job of sub-requests that answer no job.
const NO_JOB: u64 = u64::MAX;

impl Groups {
    /// The earliest instant a request in progress is given up.
    pub(super) fn next_timeout(&self) -> Option<Instant> {
        self.deadlines.first().map(|(t, _)| *t)
    }

    /// Requests in progress (tests, status).
    pub(super) fn pending(&self) -> usize {
        self.jobs.len()
    }

    fn remember(&mut self, group: Group, store: StoreId, child: SessionId) {
        if self.children.len() >= CACHED {
            self.children.pop_first();
        }
        self.children.insert((group, store), child);
    }

    fn forget(&mut self, group: Group) {
        let keys: Vec<_> = (self.children.range((group, StoreId(0))..))
            .take_while(|((g, _), _)| *g == group)
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            self.children.remove(&k);
        }
    }
}

impl Device {
    /// A client's request, if it concerns a session spanning stores, is taken on here
    /// (and `None` returned); any other is given back to be served as usual.
    pub(super) fn session_request(
        &mut self,
        now: Instant,
        client: ClientId,
        req_id: u64,
        req: Request,
        out: &mut Vec<Output>,
    ) -> Option<Request> {
        if client.is_forwarded() || client.is_grouped() {
            return Some(req);
        }
        let stores = self.env.cfg.cluster.stores;
        let reply = |out: &mut Vec<Output>, result| {
            out.push(Output::Reply {
                client,
                req_id,
                result,
            });
            None
        };
        match req {
            Request::Under(Under { home, req }) => {
                let store = req.store();
                let Some(session) = req.session() else {
                    return Some(*req);
                };
                if matches!(
                    *req,
                    Request::Under(_)
                        | Request::KeepAlive { .. }
                        | Request::CloseSession { .. }
                        | Request::AttachSession(_)
                ) {
                    let e = "keep-alives and closes name the session's own store".to_string();
                    return reply(out, Err(ClientError::Rejected(e)));
                }
                if home.0 >= stores {
                    return reply(out, Err(ClientError::UnknownStore(home)));
                }
                if store == home {
                    return Some(*req);
                }
                if store.0 >= stores {
                    return Some(*req);
                }
                if !self.env.cfg.forward {
                    let e = "a session serves other stores only where devices forward requests (forwarding is off)";
                    return reply(out, Err(ClientError::Rejected(e.into())));
                }
                if self.env.peers < Generation::SessionGroups {
                    // A rolling upgrade is not over: the client asks again later.
                    return reply(out, Err(ClientError::Unavailable { store }));
                }
                let lease = self.env.cfg.timing.lease;
                let deadline = super::forward::deadline(now, &req, lease) + lease;
                let group = (home, session);
                let job = self.start_job(client, req_id, group, deadline, Kind::Route(*req));
                match self.groups.children.get(&(group, store)).copied() {
                    Some(child) => self.send_inner(now, job, child, out),
                    None => {
                        let ask = AttachSession {
                            store: home,
                            session,
                            child_store: store,
                            child: None,
                        };
                        self.send(now, job, Sub::Ask, Request::AttachSession(ask), out);
                    }
                }
                None
            }
            Request::KeepAlive { store, session } | Request::CloseSession { store, session }
                if store.0 < stores =>
            {
                let close = matches!(req, Request::CloseSession { .. });
                let group = (store, session);
                if !close && self.groups.dead.contains(&group) {
                    return reply(out, Err(ClientError::SessionExpired));
                }
                let deadline = now + 2 * self.env.cfg.timing.lease;
                let kind = Kind::Renew {
                    close,
                    ttl: Duration::ZERO,
                    children: BTreeMap::new(),
                    waiting: 0,
                };
                let job = self.start_job(client, req_id, group, deadline, kind);
                let ka = Request::KeepAlive { store, session };
                self.send(now, job, Sub::Home, ka, out);
                None
            }
            other => Some(other),
        }
    }

    fn start_job(
        &mut self,
        client: ClientId,
        req_id: u64,
        group: Group,
        deadline: Instant,
        kind: Kind,
    ) -> u64 {
        let g = &mut self.groups;
        let id = g.next;
        g.next += 1;
        g.deadlines.insert((deadline, id));
        let job = Job {
            client,
            req_id,
            group,
            deadline,
            subs: Vec::new(),
            kind,
        };
        g.jobs.insert(id, job);
        self.refresh_role(super::Role::Sessions);
        id
    }

    /// Send one sub-request of `job`, forwarded to its store's manager or served here.
    fn send(&mut self, now: Instant, job: u64, sub: Sub, req: Request, out: &mut Vec<Output>) {
        let g = &mut self.groups;
        let id = ClientId(ClientId::GROUPED | g.next);
        g.next += 1;
        g.subs.insert(id, (job, sub));
        if let Some(j) = g.jobs.get_mut(&job) {
            j.subs.push(id);
        }
        let store = req.store();
        if !self.forward(now, id, 0, &req, 0, out) {
            self.serve(now, id, 0, req, out);
            // The input that led here may have reached another role only.
            self.refresh_role(super::Role::Manager(store));
        }
    }

    /// Send the client's request of a route job under `child`.
    fn send_inner(&mut self, now: Instant, job: u64, child: SessionId, out: &mut Vec<Output>) {
        let Some(Job {
            kind: Kind::Route(req),
            ..
        }) = self.groups.jobs.get(&job)
        else {
            return;
        };
        let mut req = req.clone();
        req.set_session(child);
        self.send(now, job, Sub::Inner, req, out);
    }

    /// Give the answers of sub-requests (replies to internal clients) to their jobs, until
    /// none is left in `out`.
    pub(super) fn answer_groups(&mut self, now: Instant, out: &mut Vec<Output>) {
        if self.groups.subs.is_empty() {
            return;
        }
        loop {
            let mut answers = Vec::new();
            out.retain_mut(|o| match o {
                Output::Reply { client, result, .. } if client.is_grouped() => {
                    let r = std::mem::replace(result, Err(ClientError::NotHeld));
                    answers.push((*client, r));
                    false
                }
                _ => true,
            });
            if answers.is_empty() {
                return;
            }
            for (client, result) in answers {
                self.on_sub_answer(now, client, result, out);
            }
        }
    }

    fn on_sub_answer(
        &mut self,
        now: Instant,
        client: ClientId,
        result: Result<Response, ClientError>,
        out: &mut Vec<Output>,
    ) {
        let Some((job, sub)) = self.groups.subs.remove(&client) else {
            return;
        };
        let Some(j) = self.groups.jobs.get_mut(&job) else {
            return;
        };
        j.subs.retain(|c| *c != client);
        let (group, target) = (j.group, j.target());
        let (home, session) = group;
        match (sub, result) {
            (Sub::Ask, Ok(Response::SessionAttached(Attached { child: Some(c), .. }))) => {
                self.renew_fresh(now, job, target, c, out);
            }
            (Sub::Ask, Ok(Response::SessionAttached(Attached { child: None, ttl }))) => {
                let open = Request::OpenSession { store: target, ttl };
                self.send(now, job, Sub::Open, open, out);
            }
            (Sub::Open, Ok(Response::SessionOpened { session: c, .. })) => {
                let attach = AttachSession {
                    store: home,
                    session,
                    child_store: target,
                    child: Some(c),
                };
                self.send(
                    now,
                    job,
                    Sub::Attach(c),
                    Request::AttachSession(attach),
                    out,
                );
            }
            (Sub::Attach(opened), Ok(Response::SessionAttached(Attached { child, .. }))) => {
                let c = child.unwrap_or(opened);
                if c != opened {
                    self.close_orphan(now, target, opened, out);
                }
                self.renew_fresh(now, job, target, c, out);
            }
            (Sub::Fresh(c), Ok(Response::KeptAlive { .. })) => {
                self.groups.remember(group, target, c);
                self.send_inner(now, job, c, out);
            }
            (Sub::Attach(opened), Err(e)) => {
                self.close_orphan(now, target, opened, out);
                self.end_job(job, Err(e), out);
            }
            (Sub::Inner, Err(ClientError::SessionExpired)) => {
                self.groups.children.remove(&(group, target));
                self.end_job(job, Err(ClientError::SessionExpired), out);
            }
            (Sub::Inner, result) | (Sub::CloseHome, result) => self.end_job(job, result, out),
            (Sub::Home, Ok(Response::KeptAlive { ttl, children })) => {
                let Some(Job {
                    kind: Kind::Renew { close, .. },
                    ..
                }) = self.groups.jobs.get(&job)
                else {
                    return;
                };
                let close = *close;
                let planted = !close && self.env.cfg.planted.keep_alive_skips_children;
                let reqs: Vec<(Sub, Request)> = (children.iter())
                    .filter(|_| !planted)
                    .map(|(&store, &session)| {
                        let req = match close {
                            true => Request::CloseSession { store, session },
                            false => Request::KeepAlive { store, session },
                        };
                        (Sub::Child(store, session), req)
                    })
                    .collect();
                if let Some(Job {
                    kind:
                        Kind::Renew {
                            ttl: t,
                            children: ch,
                            waiting,
                            ..
                        },
                    ..
                }) = self.groups.jobs.get_mut(&job)
                {
                    (*t, *ch, *waiting) = (ttl, children, reqs.len());
                }
                if reqs.is_empty() {
                    self.renewed(now, job, out);
                }
                for (sub, r) in reqs {
                    self.send(now, job, sub, r, out);
                }
            }
            (Sub::Child(store, child), result) => {
                let Some(Job {
                    kind: Kind::Renew { close, .. },
                    ..
                }) = self.groups.jobs.get(&job)
                else {
                    return;
                };
                match result {
                    // A child already gone is closed.
                    Ok(_) | Err(ClientError::SessionExpired) if *close => {}
                    // Renewed after home named it: requests may run under it from here
                    // without a fresh renewal (`renew_fresh`). A child whose renewal
                    // failed is not remembered: its deadline may still be its open's.
                    Ok(_) => self.groups.remember(group, store, child),
                    Err(ClientError::SessionExpired) => {
                        let g = &mut self.groups;
                        if g.dead.len() >= CACHED {
                            g.dead.pop_first();
                        }
                        g.dead.insert(group);
                        g.forget(group);
                        return self.end_job(job, Err(ClientError::SessionExpired), out);
                    }
                    Err(e) => return self.end_job(job, Err(e), out),
                }
                let Some(Job {
                    kind: Kind::Renew { waiting, .. },
                    ..
                }) = self.groups.jobs.get_mut(&job)
                else {
                    return;
                };
                *waiting -= 1;
                if *waiting == 0 {
                    self.renewed(now, job, out);
                }
            }
            (Sub::Orphan, _) => {}
            (_, Err(e)) => self.end_job(job, Err(e), out),
            (_, Ok(other)) => {
                let e = format!("unexpected answer {other:?} to a session's sub-request");
                self.end_job(job, Err(ClientError::Rejected(e)), out);
            }
        }
    }

    /// Home and every child of a renew job answered: answer its client, or close home.
    fn renewed(&mut self, now: Instant, job: u64, out: &mut Vec<Output>) {
        let Some(Job {
            group,
            kind:
                Kind::Renew {
                    close,
                    ttl,
                    children,
                    ..
                },
            ..
        }) = self.groups.jobs.get(&job)
        else {
            return;
        };
        if *close {
            let (store, session) = *group;
            self.groups.forget((store, session));
            let req = Request::CloseSession { store, session };
            return self.send(now, job, Sub::CloseHome, req, out);
        }
        let ok = Response::KeptAlive {
            ttl: *ttl,
            children: children.clone(),
        };
        self.end_job(job, Ok(ok), out);
    }

    /// A child learned from home (just recorded, or recorded by another device) is renewed
    /// before any request runs under it from here: a keep-alive of the session that read
    /// home's children before the child was recorded did not renew it, though its client
    /// counts on it (send time + TTL − δ_c); this renewal, received after the record,
    /// covers every such keep-alive, and every later one names the child.
    fn renew_fresh(
        &mut self,
        now: Instant,
        job: u64,
        store: StoreId,
        child: SessionId,
        out: &mut Vec<Output>,
    ) {
        let ka = Request::KeepAlive {
            store,
            session: child,
        };
        self.send(now, job, Sub::Fresh(child), ka, out);
    }

    fn close_orphan(
        &mut self,
        now: Instant,
        store: StoreId,
        session: SessionId,
        out: &mut Vec<Output>,
    ) {
        let req = Request::CloseSession { store, session };
        self.send(now, NO_JOB, Sub::Orphan, req, out);
    }

    /// Answer a job's client and forget the job (answers still due to it are dropped).
    fn end_job(&mut self, job: u64, result: Result<Response, ClientError>, out: &mut Vec<Output>) {
        let Some(j) = self.groups.jobs.remove(&job) else {
            return;
        };
        self.groups.deadlines.remove(&(j.deadline, job));
        for s in &j.subs {
            self.groups.subs.remove(s);
        }
        out.push(Output::Reply {
            client: j.client,
            req_id: j.req_id,
            result,
        });
    }

    /// Answer `Unavailable` to the jobs past their deadline.
    pub(super) fn sessions_tick(&mut self, now: Instant, out: &mut Vec<Output>) {
        let due: Vec<u64> = (self.groups.deadlines.iter())
            .take_while(|(t, _)| *t <= now)
            .map(|(_, j)| *j)
            .collect();
        for job in due {
            let store = self.groups.jobs.get(&job).map_or(StoreId(0), Job::target);
            self.end_job(job, Err(ClientError::Unavailable { store }), out);
        }
    }
}

#[cfg(test)]
#[path = "sessions_tests.rs"]
mod tests;
