//! The simulator's lock clients (issue: the lock service on stores). Each client opens a
//! session in one of a few contended stores, keeps it alive, acquires (try or wait with a
//! timeout, shared or exclusive), holds, releases, asks who holds a lock, sometimes
//! closes its session, pauses past its TTL, or crashes. Its names are siblings, or, in
//! most runs, paths drawn from a small tree per store ([`NAME_TREE`]), so that one
//! client's lock covers another's and the table's cover rule and intention modes decide. It follows `NotManager` hints,
//! retries on `Unavailable` and client-side timeouts with the same idempotency key, and
//! keeps its own conservative session deadline (send time of the last answered
//! keep-alive + TTL − δ_c): a lock counts as held by the client only before it.
//! A client sends one request at a time unless the seed makes it pipeline
//! ([`super::pipeline`]): then it keeps several in flight on its session stream and
//! re-sends them all wherever the stream resumes.
//!
//! Every operation goes into the [`LockChecker`](crate::lockcheck::LockChecker)'s history
//! with the output the client can vouch for: an answer that proves the request had no
//! effect is `Failed` (or left out), an answer that does not (no reply, `Unavailable`
//! after a retry, `SessionExpired` for a queued wait) is unknown, as Knossos' `:info`.

use super::{CLIENT_HOPS_MAX, Event, World, exp};
use crate::lincheck::{LockInput, LockOutput};
use crate::lockcheck::Interval;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tenure_core::io::{ClientError, Request, Response, WaitSpec};
use tenure_core::lockctl::{FencingToken, LockMode, SessionId};
use tenure_core::rng::Rng;
use tenure_core::session::client_deadline;
use tenure_core::{DeviceId, Instant, StoreId};

/// Client ids of lock clients start here (write clients use 1).
pub(super) const LOCK_CLIENT_BASE: u64 = 1_000;

/// A client's session as it sees it.
#[derive(Clone, Debug)]
pub(super) struct ClientSession {
    pub(super) id: SessionId,
    ttl: Duration,
    /// Conservative deadline (real µs): the client stops using its locks here.
    deadline: u64,
}

/// One lock client.
#[derive(Clone, Debug)]
pub(super) struct LockClient {
    pub(super) store: StoreId,
    pub(super) names: Vec<String>,
    pub(super) target: DeviceId,
    /// Bumped at every client crash: answers to an older incarnation are ignored.
    incarnation: u64,
    pub(super) session: Option<ClientSession>,
    pub(super) held: BTreeMap<String, (LockMode, FencingToken)>,
    /// Names whose acquire or release outcome this session does not know.
    pub(super) tainted: BTreeSet<String>,
    /// Requests in flight, keep-alive aside: at most one unless the client pipelines.
    pub(super) inflight: BTreeSet<u64>,
    /// `Some(n)`: the client pipelines up to `n` requests on its session stream
    /// ([`super::pipeline`]); `None`: one request at a time, each retried on its own.
    pub(super) pipeline: Option<usize>,
    pub(super) keepalive: Option<u64>,
    paused_until: Option<u64>,
    down: bool,
    next_request_id: u64,
    /// Answered by a manager since faults stopped (liveness).
    pub(super) answered: bool,
}

/// What a request is for.
#[derive(Clone, Debug)]
pub(super) enum Kind {
    Open,
    KeepAlive,
    Close,
    Acquire { name: String, mode: LockMode },
    Release { name: String, token: FencingToken },
    Holders { name: String },
}

impl Kind {
    /// The lock name the request is about, if any.
    pub(super) fn name(&self) -> Option<&str> {
        match self {
            Kind::Acquire { name, .. } | Kind::Release { name, .. } | Kind::Holders { name } => {
                Some(name)
            }
            Kind::Open | Kind::KeepAlive | Kind::Close => None,
        }
    }
}

/// A request in flight.
#[derive(Clone, Debug)]
pub(super) struct LockReq {
    pub(super) id: u64,
    pub(super) client: usize,
    incarnation: u64,
    pub(super) req: Request,
    pub(super) kind: Kind,
    attempt: u32,
    /// First send (real µs): deadlines are computed from it, conservatively.
    first_sent: u64,
    /// History operation, if any.
    op: Option<usize>,
    /// Some attempt went unanswered (it may have taken effect).
    pub(super) lost_attempt: bool,
    session: Option<SessionId>,
    /// Where the last attempt went.
    sent_to: DeviceId,
    /// How long the client waits for an answer to one attempt (µs).
    timeout_us: u64,
}

/// The first path segment of the lock names of `store` (every name under it is in the
/// store: [`tenure_core::config::store_of`] hashes the first segment).
fn store_segment(store: StoreId, stores: u32) -> String {
    (0u64..)
        .map(|i| format!("g{i}"))
        .find(|g| tenure_core::config::store_of(g, stores) == store)
        .expect("some segment hashes to every store")
}

/// `n` sibling lock names of `store`: no name covers another.
fn names_for(store: StoreId, stores: u32, n: usize) -> Vec<String> {
    let first = store_segment(store, stores);
    (0..n).map(|j| format!("/{first}/l{j}")).collect()
}

/// The tree of nested lock names of a store, below its first segment `/g`: the segment
/// itself (which covers every name of the store), two levels of children and a third
/// level under `/g/a/x`, so that names are ancestors, descendants or siblings of one
/// another (seed 004 §9: a lock on a path covers its descendants).
const NAME_TREE: [&str; 9] = [
    "/a", "/a/x", "", "/b", "/a/x/1", "/a/y", "/b/z", "/a/x/2", "/c",
];

/// `n` distinct names of `store`'s tree, drawn at random (all of them if `n` is larger).
fn nested_names_for(store: StoreId, stores: u32, n: usize, rng: &mut Rng) -> Vec<String> {
    let first = store_segment(store, stores);
    let mut pool: Vec<&str> = NAME_TREE.to_vec();
    let mut names = Vec::new();
    while names.len() < n && !pool.is_empty() {
        let suffix = pool.remove(rng.below(pool.len() as u64) as usize);
        names.push(format!("/{first}{suffix}"));
    }
    names
}

impl World {
    /// Create the lock clients of this run and start them.
    pub(super) fn start_lock_clients(&mut self) {
        let k = self.lock_knobs.clone();
        for c in 0..k.clients {
            let store = StoreId(self.lock_rng.below(k.stores_used as u64) as u32);
            let target = {
                let drawn = DeviceId(1 + self.lock_rng.below(self.cfg.devices));
                self.client_endpoint(drawn)
            };
            let pipeline = self
                .pipe_rng
                .chance(k.pipelined_p)
                .then_some(k.pipeline_max);
            // A pipelining client needs as many names as it keeps requests in flight.
            let names = k.names_per_store.max(pipeline.unwrap_or(0));
            let names = if k.nested_names {
                nested_names_for(store, self.cfg.stores, names, &mut self.paths_rng)
            } else {
                names_for(store, self.cfg.stores, names)
            };
            self.lock_clients.push(LockClient {
                store,
                names,
                target,
                incarnation: 0,
                session: None,
                held: BTreeMap::new(),
                tainted: BTreeSet::new(),
                inflight: BTreeSet::new(),
                pipeline,
                keepalive: None,
                paused_until: None,
                down: false,
                next_request_id: 0,
                answered: false,
            });
            let t = self.now + exp(&mut self.lock_rng, k.think_mean_us);
            self.schedule(t, Event::LockStep(c));
        }
    }

    pub(super) fn think(&mut self, c: usize, mean: u64) {
        let t = self.now + exp(&mut self.lock_rng, mean);
        self.schedule(t, Event::LockStep(c));
    }

    /// A client's next action.
    pub(super) fn lock_step(&mut self, c: usize) {
        let cl = &self.lock_clients[c];
        if cl.down || cl.paused_until.is_some() {
            return;
        }
        if let Some(depth) = cl.pipeline {
            return self.pipe_step(c, depth);
        }
        if !cl.inflight.is_empty() || self.client_fault(c) {
            return;
        }
        let k = self.lock_knobs.clone();
        let cl = &self.lock_clients[c];
        let Some(session) = cl.session.clone() else {
            return self.open(c);
        };
        let held: Vec<String> = cl.held.keys().cloned().collect();
        let free: Vec<String> = cl
            .names
            .iter()
            .filter(|n| !cl.held.contains_key(*n) && !cl.tainted.contains(*n))
            .cloned()
            .collect();
        let r = &mut self.lock_rng;
        if !held.is_empty() && (free.is_empty() || r.chance(0.6)) {
            let name = held[r.below(held.len() as u64) as usize].clone();
            return self.release(c, name);
        }
        if r.chance(k.holders_p) || free.is_empty() {
            let names = &self.lock_clients[c].names;
            let name = names[self.lock_rng.below(names.len() as u64) as usize].clone();
            return self.holders(c, name);
        }
        if r.chance(k.close_p) {
            return self.close(c, session.id);
        }
        let name = free[r.below(free.len() as u64) as usize].clone();
        self.acquire(c, session.id, name);
    }

    /// In the safety phase, the client may crash or pause (up to three TTLs, so past its
    /// deadline) instead of acting; returns whether it did.
    pub(super) fn client_fault(&mut self, c: usize) -> bool {
        let k = &self.lock_knobs;
        let (crash_p, pause_p, ttl_ms) = (k.crash_p, k.pause_p, k.ttl_ms);
        if self.faults_on && self.lock_rng.chance(crash_p) {
            self.client_crash(c);
            return true;
        }
        if self.faults_on && self.lock_rng.chance(pause_p) {
            let ttl = Duration::from_millis(ttl_ms).as_micros() as u64;
            let len = 1 + self.lock_rng.below(3 * ttl);
            self.lock_clients[c].paused_until = Some(self.now + len);
            self.report.locks.client_pauses += 1;
            self.trace(|| format!("lock client {c} pauses for {len}us"));
            self.schedule(self.now + len, Event::ClientResume(c));
            return true;
        }
        false
    }

    pub(super) fn open(&mut self, c: usize) {
        let ttl = Duration::from_millis(self.lock_knobs.ttl_ms);
        let store = self.lock_clients[c].store;
        self.lock_request(c, Request::OpenSession { store, ttl }, Kind::Open, None);
    }

    /// Close the session: the client stops using its locks when it sends the close.
    pub(super) fn close(&mut self, c: usize, session: SessionId) {
        let cl = &mut self.lock_clients[c];
        let store = cl.store;
        let held: Vec<String> = std::mem::take(&mut cl.held).into_keys().collect();
        for name in held {
            self.locks.unhold(&name, session, self.now);
        }
        let req = Request::CloseSession { store, session };
        self.lock_request(c, req, Kind::Close, None);
    }

    pub(super) fn holders(&mut self, c: usize, name: String) {
        let store = self.lock_clients[c].store;
        let op = self.locks.invoke(
            LOCK_CLIENT_BASE + c as u64,
            LockInput::Holders { name: name.clone() },
            self.now,
        );
        let req = Request::Holders {
            store,
            name: name.clone(),
        };
        self.lock_request(c, req, Kind::Holders { name }, Some(op));
    }

    /// Acquire `name`: shared or exclusive, try or wait with a timeout, as the knobs say.
    pub(super) fn acquire(&mut self, c: usize, session: SessionId, name: String) {
        let k = &self.lock_knobs;
        let (shared_p, try_p) = (k.shared_p, k.try_p);
        let r = &mut self.lock_rng;
        let mode = if r.chance(shared_p) {
            LockMode::Shared
        } else {
            LockMode::Exclusive
        };
        let wait = if r.chance(try_p) {
            WaitSpec::Try
        } else {
            WaitSpec::Timeout(Duration::from_micros(50_000 + r.below(2_000_000)))
        };
        // Some holds ask for no lock-delay: mutual exclusion must then rest on the
        // clients' conservative deadlines alone.
        let lock_delay = r.chance(0.25).then_some(Duration::ZERO);
        let cl = &mut self.lock_clients[c];
        cl.next_request_id += 1;
        let request_id = cl.next_request_id;
        let store = cl.store;
        let op = self.locks.invoke(
            LOCK_CLIENT_BASE + c as u64,
            LockInput::Acquire {
                name: name.clone(),
                session,
                mode,
            },
            self.now,
        );
        let req = Request::Acquire {
            store,
            session,
            request_id,
            name: name.clone(),
            mode,
            wait,
            lock_delay,
        };
        self.lock_request(c, req, Kind::Acquire { name, mode }, Some(op));
    }

    pub(super) fn release(&mut self, c: usize, name: String) {
        let cl = &mut self.lock_clients[c];
        let session = cl.session.as_ref().expect("releases need a session").id;
        let (_, token) = cl.held.remove(&name).expect("held");
        let store = cl.store;
        cl.next_request_id += 1;
        let request_id = cl.next_request_id;
        // The client stops using the lock when it sends the release.
        self.locks.unhold(&name, session, self.now);
        let op = self.locks.invoke(
            LOCK_CLIENT_BASE + c as u64,
            LockInput::Release {
                name: name.clone(),
                session,
            },
            self.now,
        );
        let req = Request::Release {
            store,
            session,
            request_id,
            name: name.clone(),
        };
        self.lock_request(c, req, Kind::Release { name, token }, Some(op));
    }

    fn lock_request(&mut self, c: usize, req: Request, kind: Kind, op: Option<usize>) {
        self.next_req += 1;
        let id = self.next_req;
        let timeout_us = self.request_timeout_us(c, &req);
        let cl = &mut self.lock_clients[c];
        let session = cl.session.as_ref().map(|s| s.id);
        if matches!(kind, Kind::KeepAlive) {
            cl.keepalive = Some(id);
        } else {
            self.note_pipelined(c, &kind);
            self.lock_clients[c].inflight.insert(id);
        }
        let cl = &self.lock_clients[c];
        self.lock_reqs.insert(
            id,
            LockReq {
                id,
                client: c,
                incarnation: cl.incarnation,
                req,
                kind,
                attempt: 0,
                first_sent: self.now,
                op,
                lost_attempt: false,
                session,
                sent_to: cl.target,
                timeout_us,
            },
        );
        self.lock_send(id);
    }

    fn lock_send(&mut self, id: u64) {
        let Some(r) = self.lock_reqs.get_mut(&id) else {
            return;
        };
        r.attempt += 1;
        let (attempt, timeout_us) = (r.attempt, r.timeout_us);
        let to = self.lock_clients[r.client].target;
        r.sent_to = to;
        let boot = self.nodes[&to].boot;
        let lat = self.knobs.latency_min_us;
        self.schedule(self.now + lat, Event::LockArrive { req: id, to, boot });
        self.schedule(
            self.now + timeout_us,
            Event::LockTimeout { req: id, attempt },
        );
    }

    /// A lock request reaches a device.
    pub(super) fn lock_arrive(&mut self, id: u64, to: DeviceId, boot: u64) {
        let node = &self.nodes[&to];
        if node.boot != boot || node.device.is_none() {
            return;
        }
        let Some(r) = self.lock_reqs.get(&id) else {
            return;
        };
        let (client, req) = (r.client, r.req.clone());
        self.trace(|| format!("lock client {client} -> {to} req {id} {req:?}"));
        self.delay_arrived(id);
        self.input(
            to,
            tenure_core::Input::Request {
                client: tenure_core::ClientId(LOCK_CLIENT_BASE + client as u64),
                req_id: id,
                req,
            },
        );
    }

    /// No answer in time: retry elsewhere, same idempotency key (a pipelining client
    /// resumes its whole stream there).
    pub(super) fn lock_timeout(&mut self, id: u64, attempt: u32) {
        let Some(r) = self.lock_reqs.get_mut(&id) else {
            return;
        };
        if r.attempt != attempt {
            return;
        }
        r.lost_attempt = true;
        let c = r.client;
        let cl = &self.lock_clients[c];
        if r.incarnation != cl.incarnation {
            // Sent before the client crashed: it has forgotten the request.
            self.lock_reqs.remove(&id);
            return;
        }
        if cl.pipeline.is_some() {
            return self.resume_stream(c, None, None);
        }
        self.retarget(c, None);
        self.lock_retry(id);
    }

    pub(super) fn retarget(&mut self, c: usize, hint: Option<DeviceId>) {
        let to = match hint {
            Some(h) if self.nodes.contains_key(&h) => h,
            _ => {
                let drawn = DeviceId(1 + self.lock_rng.below(self.cfg.devices));
                self.client_endpoint(drawn)
            }
        };
        self.lock_clients[c].target = to;
    }

    pub(super) fn lock_retry(&mut self, id: u64) {
        let Some(r) = self.lock_reqs.get(&id) else {
            return;
        };
        if r.attempt >= CLIENT_HOPS_MAX || r.incarnation != self.lock_clients[r.client].incarnation
        {
            return self.lock_give_up(id);
        }
        self.lock_send(id);
    }

    /// The client stops trying: the outcome stays unknown.
    fn lock_give_up(&mut self, id: u64) {
        let Some(r) = self.lock_reqs.remove(&id) else {
            return;
        };
        if r.incarnation != self.lock_clients[r.client].incarnation {
            // Sent before the client crashed: it has forgotten the request, whose
            // operation stays open in the history.
            return;
        }
        self.lock_done(&r, None);
    }

    /// An answer from `from` to a lock client.
    pub(super) fn lock_reply(
        &mut self,
        from: DeviceId,
        id: u64,
        result: Result<Response, ClientError>,
    ) {
        let Some(r) = self.lock_reqs.get(&id) else {
            return;
        };
        let c = r.client;
        if r.incarnation != self.lock_clients[c].incarnation {
            self.lock_reqs.remove(&id);
            return;
        }
        let pipelined = self.lock_clients[c].pipeline.is_some();
        // A stream the client left delivers nothing more: the request was re-sent.
        if pipelined && from != r.sent_to {
            self.trace(|| format!("lock client {c}: answer to req {id} on a left stream"));
            return;
        }
        match result {
            Err(ClientError::NotManager { hint }) if pipelined => {
                self.resume_stream(c, hint, Some(id))
            }
            Err(ClientError::Unavailable { .. }) if pipelined => {
                self.resume_stream(c, None, Some(id))
            }
            Err(ClientError::NotManager { hint }) => {
                self.retarget(c, hint);
                self.lock_retry(id)
            }
            Err(ClientError::Unavailable { .. }) => {
                self.retarget(c, None);
                self.lock_retry(id)
            }
            result => {
                let r = self.lock_reqs.remove(&id).expect("present");
                self.lock_clients[c].answered |= !self.faults_on;
                self.note_out_of_order(c, id);
                self.lock_done(&r, Some(result));
            }
        }
    }

    /// Conclude a request: record the history output, update the client, go on.
    /// `result` is `None` when the client gave up without an answer it can use.
    fn lock_done(&mut self, r: &LockReq, result: Option<Result<Response, ClientError>>) {
        let c = r.client;
        let now = self.now;
        let drift = self.clock_drift;
        match (&r.kind, result) {
            (Kind::Open, Some(Ok(Response::SessionOpened { session, ttl }))) => {
                let deadline = client_deadline(Instant(r.first_sent), ttl, drift).0;
                self.report.locks.sessions_opened += 1;
                let cl = &mut self.lock_clients[c];
                cl.session = Some(ClientSession {
                    id: session,
                    ttl,
                    deadline,
                });
                cl.held.clear();
                cl.tainted.clear();
                self.locks.set_deadline(session, deadline);
                self.schedule(deadline, Event::ClientDeadline(c, session));
                let ka = ttl.as_micros() as u64 / 3;
                self.schedule(now + ka, Event::KeepAliveDue(c, session));
            }
            (Kind::Open, _) => {}
            (Kind::KeepAlive, result) => {
                self.lock_clients[c].keepalive = None;
                let cl = &mut self.lock_clients[c];
                let Some(s) = cl.session.as_mut().filter(|s| Some(s.id) == r.session) else {
                    return;
                };
                let sid = s.id;
                match result {
                    Some(Ok(Response::KeptAlive { ttl })) if now < s.deadline => {
                        let d = client_deadline(Instant(r.first_sent), ttl, drift).0;
                        s.deadline = s.deadline.max(d);
                        s.ttl = ttl;
                        let (deadline, ka) = (s.deadline, ttl.as_micros() as u64 / 3);
                        self.locks.set_deadline(sid, deadline);
                        self.schedule(deadline, Event::ClientDeadline(c, sid));
                        self.schedule(now + ka, Event::KeepAliveDue(c, sid));
                    }
                    Some(Err(ClientError::SessionExpired)) => self.drop_session(c, now),
                    _ => self.schedule(now + 50_000, Event::KeepAliveDue(c, sid)),
                }
                return;
            }
            (Kind::Close, _) => self.drop_session(c, now),
            (Kind::Acquire { name, mode }, result) => {
                let op = r.op.expect("acquires are recorded");
                match result {
                    Some(Ok(Response::Granted { token })) => {
                        self.report.locks.grants += 1;
                        self.grant_times.push(now);
                        let store = self.lock_clients[c].store;
                        self.obj_note_grant(store, name, *mode, token);
                        self.locks.respond(op, now, LockOutput::Granted { token });
                        let cl = &mut self.lock_clients[c];
                        match cl.session.as_ref() {
                            Some(s) if Some(s.id) == r.session && now < s.deadline => {
                                cl.held.insert(name.clone(), (*mode, token));
                                let iv = Interval {
                                    client: c as u64,
                                    session: s.id,
                                    mode: *mode,
                                    token,
                                    start: now,
                                    end: None,
                                };
                                self.locks.hold(name, iv);
                                self.lock_clients[c].inflight.remove(&r.id);
                                let hold = self.lock_knobs.hold_mean_us;
                                return self.think(c, hold);
                            }
                            // Granted after the client's deadline: not a grant it may use.
                            _ => {
                                cl.tainted.insert(name.clone());
                            }
                        }
                    }
                    Some(Err(
                        ClientError::Timeout
                        | ClientError::Deadlock
                        | ClientError::WouldBlock
                        | ClientError::Rejected(_)
                        | ClientError::InvalidName(_)
                        | ClientError::NotHeld,
                    )) if !r.lost_attempt => {
                        self.report.locks.acquire_failures += 1;
                        self.locks.respond(op, now, LockOutput::Failed);
                    }
                    // Unknown outcome: the operation stays open in the history.
                    other => {
                        self.lock_clients[c].tainted.insert(name.clone());
                        if matches!(other, Some(Err(ClientError::SessionExpired))) {
                            self.drop_session(c, now);
                        }
                    }
                }
            }
            (Kind::Release { name, token }, result) => {
                let op = r.op.expect("releases are recorded");
                let clean = r.attempt == 1 && !r.lost_attempt;
                match result {
                    // A retry carries the first attempt's request id, so it answers
                    // `Released` whether this attempt or a lost earlier one released it.
                    Some(Ok(Response::Released)) => {
                        self.report.locks.releases += 1;
                        if !clean {
                            self.report.locks.releases_retried += 1;
                        }
                        self.locks.respond(op, now, LockOutput::Released);
                        let store = self.lock_clients[c].store;
                        self.obj_note_release(store, name, *token);
                        if let Some(s) = r.session {
                            self.locks.release_acked(store, name, s, *token);
                        }
                    }
                    Some(Err(ClientError::NotHeld)) if clean => {
                        self.locks.respond(op, now, LockOutput::NotHeld)
                    }
                    Some(Err(ClientError::SessionExpired)) => {
                        if clean {
                            self.locks.drop_op(op);
                        }
                        self.drop_session(c, now);
                    }
                    _ => {
                        self.lock_clients[c].tainted.insert(name.clone());
                    }
                }
            }
            (Kind::Holders { .. }, result) => {
                let op = r.op.expect("queries are recorded");
                match result {
                    Some(Ok(Response::Holders(hs))) => {
                        let mut seen: Vec<(SessionId, LockMode)> =
                            hs.iter().map(|h| (h.session, h.mode)).collect();
                        seen.sort();
                        self.locks.respond(op, now, LockOutput::Holders(seen));
                    }
                    _ => self.locks.drop_op(op),
                }
            }
        }
        self.lock_clients[c].inflight.remove(&r.id);
        let think = self.lock_knobs.think_mean_us;
        self.think(c, think);
    }

    /// The client forgets its session: its locks stop counting at its deadline (or now,
    /// if that is earlier).
    fn drop_session(&mut self, c: usize, now: u64) {
        let cl = &mut self.lock_clients[c];
        let Some(s) = cl.session.take() else {
            return;
        };
        let end = now.min(s.deadline);
        let held: Vec<String> = std::mem::take(&mut cl.held).into_keys().collect();
        cl.tainted.clear();
        for name in held {
            self.locks.unhold(&name, s.id, end);
        }
    }

    /// The client's deadline may have passed.
    pub(super) fn client_deadline_event(&mut self, c: usize, session: SessionId) {
        let cl = &self.lock_clients[c];
        if let Some(s) = cl.session.as_ref().filter(|s| s.id == session)
            && s.deadline <= self.now
        {
            self.report.locks.deadlines_passed += 1;
            self.drop_session(c, self.now);
        }
    }

    pub(super) fn keepalive_due(&mut self, c: usize, session: SessionId) {
        let cl = &self.lock_clients[c];
        if cl.down
            || cl.paused_until.is_some()
            || cl.keepalive.is_some()
            || cl.session.as_ref().is_none_or(|s| s.id != session)
        {
            return;
        }
        let store = cl.store;
        self.lock_request(
            c,
            Request::KeepAlive { store, session },
            Kind::KeepAlive,
            None,
        );
    }

    fn client_crash(&mut self, c: usize) {
        self.report.locks.client_crashes += 1;
        self.trace(|| format!("lock client {c} crashes"));
        self.drop_session(c, self.now);
        let cl = &mut self.lock_clients[c];
        cl.incarnation += 1;
        cl.inflight.clear();
        cl.keepalive = None;
        cl.down = true;
        let ttl = Duration::from_millis(self.lock_knobs.ttl_ms).as_micros() as u64;
        let delay = 1 + self.lock_rng.below(2 * ttl);
        self.schedule(self.now + delay, Event::ClientResume(c));
    }

    /// A paused client resumes, a crashed one restarts (without a session).
    pub(super) fn client_resume(&mut self, c: usize) {
        let cl = &mut self.lock_clients[c];
        if cl.paused_until.is_some_and(|t| t > self.now) {
            return;
        }
        cl.paused_until = None;
        cl.down = false;
        if let Some(s) = cl.session.as_ref().map(|s| s.id) {
            self.keepalive_due(c, s);
            // Its deadline may have passed while it slept.
            self.client_deadline_event(c, s);
        }
        let cl = &self.lock_clients[c];
        if cl.inflight.is_empty() || cl.pipeline.is_some() {
            self.lock_step(c);
        }
    }

    /// The liveness phase begins: clients stop failing and come back.
    pub(super) fn lock_clients_heal(&mut self) {
        for c in 0..self.lock_clients.len() {
            let cl = &mut self.lock_clients[c];
            cl.answered = false;
            if cl.down || cl.paused_until.is_some() {
                cl.paused_until = Some(self.now);
                self.client_resume(c);
            }
        }
    }

    /// Liveness: every client got an answer from a manager after faults stopped.
    pub(super) fn lock_clients_stuck(&self) -> Vec<(u64, String)> {
        self.lock_clients
            .iter()
            .enumerate()
            .filter(|(_, cl)| !cl.answered)
            .map(|(c, cl)| {
                (
                    c as u64,
                    format!(
                        "store {} target {} session {:?} in flight {:?}",
                        cl.store,
                        cl.target,
                        cl.session.as_ref().map(|s| s.id),
                        cl.inflight
                            .iter()
                            .filter_map(|m| self.lock_reqs.get(m))
                            .map(|r| &r.kind)
                            .collect::<Vec<_>>()
                    ),
                )
            })
            .collect()
    }

    /// A manager took over `store`: it must not have lost an acknowledged lock operation.
    pub(super) fn lock_takeover(&mut self, d: DeviceId, store: StoreId) {
        let Some(tables) = self.nodes[&d]
            .device
            .as_ref()
            .and_then(|dev| dev.managed_tables(store))
        else {
            return;
        };
        let stores = self.cfg.stores;
        let now = self.now;
        let locks = tables.locks.clone();
        self.locks.takeover(
            store,
            d,
            |name| Some(tenure_core::config::store_of(name, stores)),
            |name| locks.holders(name).unwrap_or_default(),
            now,
        );
    }
}
