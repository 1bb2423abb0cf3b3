//! Client requests to the store this device manages: locks, sessions, registers, and the
//! lock table's timers. [`Clients`] holds what the manager knows of its clients (session
//! liveness, acquires waiting for a grant) and turns a change's result into the replies
//! it releases.

use super::*;
use crate::ctx::Ctx;
use crate::data::{OpResult, SessionAttach, StoreOp};
use crate::error::ClientError;
use crate::ids::ClientId;
use crate::ids::{SessionId, StoreId, Version};
use crate::io::Output;
use crate::io::observation::Observation;
use crate::io::request::Request;
use crate::io::request::WaitSpec;
use crate::io::request::{AttachSession, Attached, Response};
use crate::layout::MgrState;
use crate::lockctl::{Acquire, AcquireError, Acquired, LockOp, LockOpResult, ReleaseError};
use crate::lockctl::{RequestId, Wait};
use crate::time::Instant;

/// The manager's clients: volatile, rebuilt by a new manager.
#[derive(Clone, Debug, Default)]
pub struct Clients {
    /// Session liveness (volatile; rebuilt with a grace period by a new manager).
    pub liveness: Liveness,
    /// Clients waiting for a queued acquire: (session, request) → reply address.
    pub waiters: BTreeMap<(SessionId, u64), (ClientId, u64)>,
    /// When the lock table was last ticked (store time).
    pub lock_tick_at: Instant,
}

impl Clients {
    /// The replies a change releases, given its result on the speculative tables: the
    /// first of `replies` (a placeholder, if any) gets the change's own result; the
    /// acquires it grants or ends are answered too. Sessions it opens or ends update
    /// liveness.
    pub fn answers(
        &mut self,
        ctx: &mut Ctx<'_>,
        store: StoreId,
        op: &StoreOp,
        version: Version,
        result: OpResult,
        mut replies: Vec<Output>,
    ) -> Vec<Output> {
        let (own, grants, ended) = match result {
            OpResult::Written => (Ok(Response::Written { version }), vec![], vec![]),
            OpResult::SessionOpened(session) => {
                let StoreOp::SessionOpen { ttl } = op else {
                    unreachable!("session opened by its op")
                };
                self.liveness.opened(session, *ttl, ctx.now);
                (
                    Ok(Response::SessionOpened { session, ttl: *ttl }),
                    vec![],
                    vec![],
                )
            }
            OpResult::SessionEnded(r) => {
                if let StoreOp::SessionEnd {
                    session, expired, ..
                } = op
                {
                    self.liveness.expired(*session);
                    // Checkers see the end decided (its locks will be released by this
                    // change, before any message carries it) and, once durable, applied.
                    ctx.observe(Observation::SessionEnding {
                        store,
                        session: *session,
                        expired: *expired,
                        released: r.released.iter().map(|x| x.name.to_string()).collect(),
                        epoch: version.epoch,
                    });
                    replies.push(Output::Observe(Observation::SessionEnded {
                        store,
                        session: *session,
                        expired: *expired,
                    }));
                }
                (Ok(Response::SessionClosed), r.granted, r.cancelled)
            }
            OpResult::Lock(LockOpResult::Acquire(Ok(Acquired::Granted(g)))) => {
                (Ok(Response::Granted { token: g.token }), vec![], vec![])
            }
            OpResult::Lock(LockOpResult::Acquire(Ok(Acquired::Queued { .. }))) => {
                // Answered when granted (or when the wait ends).
                if let (
                    StoreOp::Lock {
                        op: LockOp::Acquire(a),
                        ..
                    },
                    Some(Output::Reply { client, req_id, .. }),
                ) = (op, replies.first())
                {
                    self.waiters
                        .insert((a.session, a.request_id.0), (*client, *req_id));
                }
                replies.clear();
                (Err(ClientError::Unavailable { store }), vec![], vec![])
            }
            OpResult::Lock(LockOpResult::Acquire(Err(e))) => (Err(lock_error(&e)), vec![], vec![]),
            OpResult::Lock(LockOpResult::Release(Ok(grants))) => {
                (Ok(Response::Released), grants, vec![])
            }
            OpResult::Lock(LockOpResult::Release(Err(e))) => {
                (Err(release_error(&e)), vec![], vec![])
            }
            OpResult::Lock(LockOpResult::Wakeups(w)) => {
                (Err(ClientError::Unavailable { store }), w.granted, w.ended)
            }
            OpResult::Lock(LockOpResult::Session(r)) => (
                Err(ClientError::Unavailable { store }),
                r.granted,
                r.cancelled,
            ),
            OpResult::Attached(Some((child, ttl))) => {
                if let StoreOp::SessionAttach(a) = op {
                    replies.push(Output::Observe(Observation::SessionAttached {
                        store,
                        session: a.session,
                        child_store: a.store,
                        child,
                    }));
                }
                (
                    Ok(Response::SessionAttached(Attached {
                        child: Some(child),
                        ttl,
                    })),
                    vec![],
                    vec![],
                )
            }
            OpResult::Attached(None) => (Err(ClientError::SessionExpired), vec![], vec![]),
            OpResult::Lock(LockOpResult::Epoch(_)) | OpResult::Renewed => {
                (Err(ClientError::Unavailable { store }), vec![], vec![])
            }
            OpResult::Refused(e) => (Err(e), vec![], vec![]),
            OpResult::Object(r) => (crate::objects::mgr::object_response(op, r), vec![], vec![]),
        };
        if let Some(Output::Reply { result, .. }) = replies.first_mut() {
            *result = own;
        }
        let now = ctx.now;
        for g in grants {
            if let Some((client, req_id)) = self.waiters.remove(&(g.session, g.request_id.0)) {
                // A wait that ends after the session's deadline is not a grant.
                let result = if self.liveness.alive(g.session, now) {
                    Ok(Response::Granted { token: g.token })
                } else {
                    Err(ClientError::SessionExpired)
                };
                replies.push(Output::Reply {
                    client,
                    req_id,
                    result,
                });
            }
        }
        for e in ended {
            if let Some((client, req_id)) = self.waiters.remove(&(e.session, e.request_id.0)) {
                replies.push(Output::Reply {
                    client,
                    req_id,
                    result: Err(lock_error(&e.error)),
                });
            }
        }
        replies
    }

    /// Every waiting acquire's reply address, emptying the list.
    pub fn take_waiters(&mut self) -> Vec<(ClientId, u64)> {
        std::mem::take(&mut self.waiters).into_values().collect()
    }
}

impl Manager {
    /// A client write: queue it; it goes out in the next SafeTalk batch.
    pub fn write(
        &mut self,
        ctx: &mut Ctx<'_>,
        client: ClientId,
        req_id: u64,
        key: u64,
        value: u64,
    ) {
        let req = Request::Write {
            store: self.store,
            key,
            value,
        };
        self.request(ctx, client, req_id, req);
    }

    /// Whether this manager may answer from its own state: it holds unexpired leases, by
    /// its clock with a margin of 2·δ_c, on a quorum of the store's chunks — no other
    /// manager can exist before they expire (DESIGN §4, reads).
    pub fn leases_valid(&self, ctx: &Ctx<'_>) -> bool {
        super::access::leases_valid(ctx, &self.metadata, &self.failed, &self.chunkfail)
    }

    /// A client request for this store.
    pub fn request(&mut self, ctx: &mut Ctx<'_>, client: ClientId, req_id: u64, req: Request) {
        let reply = |ctx: &mut Ctx<'_>, result| {
            ctx.out.push(Output::Reply {
                client,
                req_id,
                result,
            })
        };
        let refused = match self.state() {
            MgrState::Manager if ctx.cfg.planted.lease_read_unchecked && req.is_read() => None,
            MgrState::Manager if !self.leases_valid(ctx) || self.policy.deferred.is_some() => {
                Some(ClientError::Unavailable { store: self.store })
            }
            MgrState::Manager => None,
            MgrState::None => Some(ClientError::NotManager {
                hint: self.forwarding,
            }),
            _ => Some(ClientError::Unavailable { store: self.store }),
        };
        if let Some(e) = refused {
            return reply(ctx, Err(e));
        }
        let now = ctx.now;
        let op = match req {
            Request::Write { key, value, .. } => StoreOp::Register { key, value },
            Request::OpenSession { ttl, .. } => {
                if let Err(e) = crate::session::check_ttl(ttl) {
                    return reply(ctx, Err(ClientError::Rejected(e.to_string())));
                }
                StoreOp::SessionOpen { ttl }
            }
            Request::KeepAlive { session, .. } => {
                let r = self
                    .clients
                    .liveness
                    .keep_alive(&self.host.speculative.sessions, session, now)
                    .map(|_| {
                        let rec = &self.host.speculative.sessions.open[&session];
                        Response::KeptAlive {
                            ttl: rec.ttl,
                            children: rec.children.clone(),
                        }
                    })
                    .map_err(|_| ClientError::SessionExpired);
                // Alive, and the session's note of this epoch committed: the answer is
                // read from the committed record, at once under the read lease (DESIGN
                // §4, "Keep-alives under the read lease"): no later epoch exists before
                // the lease runs out, which is all the grace argument asks of a barrier.
                // Its children are the committed ones; a child recorded later is
                // renewed after its record commits (`renew_fresh`).
                let committed = (self.host.read_tables(&ctx.cfg.planted).sessions.open)
                    .get(&session)
                    .filter(|rec| r.is_ok() && rec.renewed >= self.epoch);
                if let Some(rec) = committed {
                    let ok = Response::KeptAlive {
                        ttl: rec.ttl,
                        children: rec.children.clone(),
                    };
                    return self.answer_read(ctx, client, req_id, Ok(ok));
                }
                // The first answer of this epoch waits for the renewal's note
                // (crate::session): the barrier below is the note's change or a later one.
                if r.is_ok() && self.host.speculative.sessions.open[&session].renewed < self.epoch {
                    self.submit_op(ctx, StoreOp::SessionRenewed { session }, Vec::new());
                }
                return self.after_barrier(ctx, client, req_id, r);
            }
            Request::AttachSession(AttachSession {
                session,
                child_store,
                child,
                ..
            }) => {
                let open = &self.host.speculative.sessions.open;
                let rec = match open.get(&session) {
                    Some(rec) if self.clients.liveness.alive(session, now) => rec,
                    _ => return reply(ctx, Err(ClientError::SessionExpired)),
                };
                let known = rec.children.get(&child_store).copied();
                match (known, child) {
                    (None, Some(child)) => StoreOp::SessionAttach(SessionAttach {
                        session,
                        store: child_store,
                        child,
                    }),
                    // Asked, or already recorded: answered once what was read is
                    // committed.
                    (known, _) => {
                        let r = Ok(Response::SessionAttached(Attached {
                            child: known,
                            ttl: rec.ttl,
                        }));
                        return self.after_barrier(ctx, client, req_id, r);
                    }
                }
            }
            Request::Under(_) => {
                // Resolved by the device that received it (crate::device::sessions).
                return reply(
                    ctx,
                    Err(ClientError::Rejected(
                        "a request under another store's session reached a manager".into(),
                    )),
                );
            }
            Request::CloseSession { session, .. } => {
                if !self.host.speculative.sessions.open.contains_key(&session) {
                    return reply(ctx, Err(ClientError::SessionExpired));
                }
                self.clients.liveness.expiring.insert(session);
                StoreOp::SessionEnd {
                    session,
                    expired: false,
                    at: self.store_now(now),
                }
            }
            Request::Acquire {
                session,
                request_id,
                name,
                mode,
                wait,
                lock_delay,
                ..
            } => {
                if lock_delay.is_some_and(|d| d > crate::lockctl::MAX_LOCK_DELAY) {
                    return reply(
                        ctx,
                        Err(ClientError::Rejected(format!(
                            "lock_delay {:?} is longer than the maximum {:?}",
                            lock_delay.unwrap_or_default(),
                            crate::lockctl::MAX_LOCK_DELAY
                        ))),
                    );
                }
                if crate::config::store_of(&name, ctx.cfg.cluster.stores) != self.store {
                    return reply(
                        ctx,
                        Err(ClientError::InvalidName(format!(
                            "{name} does not belong to store {}",
                            self.store
                        ))),
                    );
                }
                if !self.clients.liveness.alive(session, now) {
                    return reply(ctx, Err(ClientError::SessionExpired));
                }
                let wait = match wait {
                    WaitSpec::Try => Wait::Try,
                    WaitSpec::Timeout(d) => Wait::Until(self.store_now(now) + d),
                    WaitSpec::Forever => Wait::Forever,
                };
                StoreOp::Lock {
                    op: LockOp::Acquire(Acquire {
                        session,
                        request_id: RequestId(request_id),
                        name,
                        mode,
                        wait,
                        // Resolved here, so that every replica applies the same.
                        lock_delay: Some(lock_delay.unwrap_or(ctx.cfg.timing.lock_delay)),
                    }),
                    at: self.store_now(now),
                }
            }
            Request::Release {
                session,
                request_id,
                name,
                ..
            } => {
                if !self.clients.liveness.alive(session, now) {
                    return reply(ctx, Err(ClientError::SessionExpired));
                }
                release_op(session, request_id, name, self.store_now(now))
            }
            Request::ReleaseFenced {
                session,
                request_id,
                name,
                token,
                ..
            } => {
                if !self.clients.liveness.alive(session, now) {
                    return reply(ctx, Err(ClientError::SessionExpired));
                }
                let fence = crate::objects::Fence {
                    lock: name.clone(),
                    token,
                };
                StoreOp::Fenced {
                    fence,
                    op: Box::new(release_op(session, request_id, name, self.store_now(now))),
                }
            }
            Request::Holders { name, .. } => {
                let r = (self.host.read_tables(&ctx.cfg.planted).locks)
                    .holders(&name)
                    .map(Response::Holders)
                    .map_err(|e| ClientError::InvalidName(e.to_string()));
                return self.answer_read(ctx, client, req_id, r);
            }
            Request::Object { req, .. } => {
                return self.object_request(ctx, client, req_id, req);
            }
            Request::LocksUnder { prefix, .. } => {
                let r = (self.host.read_tables(&ctx.cfg.planted).locks)
                    .locks_under(&prefix)
                    .map(Response::Locks)
                    .map_err(|e| ClientError::InvalidName(e.to_string()));
                return self.answer_read(ctx, client, req_id, r);
            }
        };
        self.submit(ctx, op, client, req_id);
    }

    /// Time-driven changes: expire sessions past their deadline, and let the lock table
    /// act on its deadlines (wait timeouts, lock-delays).
    pub(super) fn lock_timers(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        // The lock table's deadlines are store times (crate::time::StoreClock).
        let at = self.store_now(now);
        for session in self.clients.liveness.due(now) {
            let op = StoreOp::SessionEnd {
                session,
                expired: true,
                at,
            };
            self.submit_op(ctx, op, Vec::new());
        }
        // At most one tick per instant: a deadline falling exactly on `at` is handled
        // by the next tick, a microsecond later.
        if self
            .host
            .speculative
            .locks
            .next_deadline()
            .is_some_and(|t| t <= at)
            && at > self.clients.lock_tick_at
        {
            self.clients.lock_tick_at = at;
            let op = StoreOp::Lock {
                op: LockOp::Tick,
                at,
            };
            self.submit_op(ctx, op, Vec::new());
        }
    }
}

/// The client-facing error for a refused release.
/// The lock table change of a release (with its idempotency key, if any).
fn release_op(session: SessionId, request_id: u64, name: String, at: Instant) -> StoreOp {
    StoreOp::Lock {
        op: match request_id {
            0 => LockOp::Release { name, session },
            id => LockOp::ReleaseRequest {
                name,
                session,
                request_id: RequestId(id),
            },
        },
        at,
    }
}

fn release_error(e: &ReleaseError) -> ClientError {
    match e {
        ReleaseError::NotHeld { .. } => ClientError::NotHeld,
        ReleaseError::InvalidName(n) => ClientError::InvalidName(n.to_string()),
        other => ClientError::Rejected(other.to_string()),
    }
}

/// The client-facing error for a lock table refusal.
fn lock_error(e: &AcquireError) -> ClientError {
    match e {
        AcquireError::InvalidName(n) => ClientError::InvalidName(n.to_string()),
        AcquireError::WouldBlock => ClientError::WouldBlock,
        AcquireError::Deadlock { .. } => ClientError::Deadlock,
        AcquireError::Timeout => ClientError::Timeout,
        AcquireError::SessionEnded => ClientError::SessionExpired,
        other => ClientError::Rejected(other.to_string()),
    }
}
