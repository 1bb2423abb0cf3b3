//! Replication of the store (SafeTalk group commit): changes queued, sent in batches to
//! every live chunk, answered when every one accepted them; barriers for reads.

use super::requests::{lock_error, release_error};
use super::*;
use crate::ctx::Ctx;
use crate::data::{OpResult, StoreOp};
use crate::error::ClientError;
use crate::ids::Version;
use crate::ids::{ChunkId, ClientId};
use crate::io::Output;
use crate::io::observation::Observation;
use crate::io::request::Response;
use crate::lockctl::{Acquired, LockOp, LockOpResult};
use crate::msg::ToChunk;
use crate::time::Instant;
use std::collections::BTreeSet;

/// A change waiting to be sent: its sequence number and the replies it releases.
#[derive(Clone, Debug)]
pub struct Queued {
    pub(super) version: Version,
    pub(super) op: StoreOp,
    pub(super) replies: Vec<Output>,
}

/// A SafeTalk batch in flight: ACCEPT sent, waiting for every live chunk's ACCEPTED.
#[derive(Clone, Debug)]
pub struct Batch {
    /// The changes with their sequence numbers.
    pub ops: Vec<(Version, StoreOp)>,
    /// Replies released when the batch is accepted everywhere (durable before
    /// acknowledged).
    pub(super) replies: Vec<Output>,
    /// Chunks whose ACCEPTED is still missing.
    pub waiting: BTreeSet<ChunkId>,
    /// Chunks that do not answer by then are marked failed.
    pub deadline: Instant,
    /// When it was sent (its round time feeds the ack timeout).
    pub sent: Instant,
}

#[cfg(test)]
impl Batch {
    /// An empty batch sent at `sent`, waiting for `waiting` until `deadline`.
    pub(crate) fn waiting_for(
        waiting: BTreeSet<ChunkId>,
        sent: Instant,
        deadline: Instant,
    ) -> Batch {
        Batch {
            ops: Vec::new(),
            replies: Vec::new(),
            waiting,
            deadline,
            sent,
        }
    }
}

impl Manager {
    /// Whether changes are in flight or queued (layout changes wait for quiet).
    pub(super) fn busy(&self) -> bool {
        self.inflight.is_some() || !self.queue.is_empty()
    }

    /// Answer a read (or a keep-alive) only after a SafeTalk batch sent after it arrived
    /// has been accepted by every live chunk, in this epoch (a read barrier, like etcd's
    /// ReadIndex). The answer is taken now from the applied tables, which hold every
    /// change answered so far; the barrier proves that no newer manager had committed
    /// an epoch when the chunks accepted it, so nothing newer was answered elsewhere.
    /// A chunk accepts in this epoch only after committing it with the merged state, so
    /// the barrier also waits out the epoch's first batch. Without it, a manager deposed
    /// while paused or cut off kept answering from old state (seed 35561) and a new
    /// manager could show state durable on one chunk only (seed 5094).
    ///
    /// The barrier rides on the next queued change if there is one, else on a lock-table
    /// tick (which acts on due deadlines and changes nothing else).
    pub(crate) fn after_barrier(
        &mut self,
        ctx: &mut Ctx<'_>,
        client: ClientId,
        req_id: u64,
        result: Result<Response, ClientError>,
    ) {
        let reply = Output::Reply {
            client,
            req_id,
            result,
        };
        if self.queue.is_empty() {
            let at = self.store_now(ctx.now);
            self.lock_tick_at = self.lock_tick_at.max(at);
            let op = StoreOp::Lock {
                op: LockOp::Tick,
                at,
            };
            self.submit_op(ctx, op, Vec::new());
        }
        match (self.queue.last_mut(), self.inflight.as_mut()) {
            (Some(q), _) => q.replies.push(reply),
            (None, Some(b)) => b.replies.push(reply),
            (None, None) => unreachable!("the barrier was just queued or sent"),
        }
    }

    /// Release `out` with the last barrier's answer ([`Manager::after_barrier`], which
    /// must have just been called).
    pub(crate) fn with_barrier(&mut self, out: Output) {
        match (self.queue.last_mut(), self.inflight.as_mut()) {
            (Some(q), _) => q.replies.push(out),
            (None, Some(b)) => b.replies.push(out),
            (None, None) => unreachable!("a barrier was just queued or sent"),
        }
    }

    /// The version of the change the last barrier rides on.
    pub(crate) fn barrier_version(&self) -> Option<Version> {
        match (self.queue.last(), self.inflight.as_ref()) {
            (Some(q), _) => Some(q.version),
            (None, Some(b)) => b.ops.last().map(|(v, _)| *v),
            (None, None) => None,
        }
    }

    /// Submit a change for a client: decided now on the speculative tables, answered
    /// once every live chunk has it durably.
    pub fn submit(&mut self, ctx: &mut Ctx<'_>, op: StoreOp, client: ClientId, req_id: u64) {
        self.submit_op(
            ctx,
            op,
            vec![Output::Reply {
                client,
                req_id,
                result: Err(ClientError::Unavailable { store: self.store }),
            }],
        );
    }

    /// Sequence a change, decide it on the speculative tables, and queue it with the
    /// replies it releases (the first placeholder reply, if any, is filled in with the
    /// change's own result; waiters it grants or ends are answered too).
    pub(crate) fn submit_op(&mut self, ctx: &mut Ctx<'_>, op: StoreOp, mut replies: Vec<Output>) {
        self.seq += 1;
        let version = Version {
            epoch: self.epoch,
            seq: self.seq,
        };
        self.speculative
            .locks
            .plant_skip_conflicts(ctx.cfg.planted.skip_conflict_check);
        self.speculative
            .locks
            .plant_ignore_cover(ctx.cfg.planted.ignore_cover);
        let result = self.speculative.execute(version, &op);
        let store = self.store;
        let (own, grants, ended) = match result {
            OpResult::Written => (Ok(Response::Written { version }), vec![], vec![]),
            OpResult::SessionOpened(session) => {
                let StoreOp::SessionOpen { ttl } = op else {
                    unreachable!("session opened by its op")
                };
                self.liveness.opened(session, ttl, ctx.now);
                (Ok(Response::SessionOpened { session, ttl }), vec![], vec![])
            }
            OpResult::SessionEnded(r) => {
                if let StoreOp::SessionEnd {
                    session, expired, ..
                } = &op
                {
                    self.liveness.expired(*session);
                    // Checkers see the end decided (its locks will be released by this
                    // change, before any message carries it) and, once durable, applied.
                    ctx.observe(Observation::SessionEnding {
                        store,
                        session: *session,
                        expired: *expired,
                        released: r.released.iter().map(|x| x.name.to_string()).collect(),
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
                ) = (&op, replies.first())
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
            OpResult::Lock(LockOpResult::Epoch(_)) | OpResult::Renewed => {
                (Err(ClientError::Unavailable { store }), vec![], vec![])
            }
            OpResult::Refused(e) => (Err(e), vec![], vec![]),
            OpResult::Object(r) => (crate::objects::mgr::object_response(&op, r), vec![], vec![]),
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
        self.queue.push(Queued {
            version,
            op,
            replies,
        });
        // An object upload's changes are queued together and leave in one batch.
        if self.inflight.is_none() && !self.objects.hold {
            self.flush(ctx);
        }
    }

    /// Group commit: send every queued change in one ACCEPT, with a piggybacked CONFIRM.
    pub(crate) fn flush(&mut self, ctx: &mut Ctx<'_>) {
        if self.queue.is_empty() || self.inflight.is_some() {
            return;
        }
        // Block data is bounded per batch (a frame must stay well under the transport's
        // limit); the rest waits for the next batch.
        let mut bytes = 0;
        let limit = ctx.cfg.objects.max_batch_bytes;
        let take = (self.queue.iter())
            .take_while(|q| {
                let first = bytes == 0;
                bytes += q.op.data_len().max(1);
                first || bytes <= limit
            })
            .count();
        let rest = self.queue.split_off(take);
        let queued = std::mem::replace(&mut self.queue, rest);
        let mut ops = Vec::with_capacity(queued.len());
        let mut replies = Vec::new();
        for q in queued {
            ops.push((q.version, q.op));
            replies.extend(q.replies);
        }
        let live = self.live();
        let (epoch, confirm) = (self.epoch, self.data.confirmed);
        for c in &live {
            self.to_chunk(
                ctx,
                *c,
                ToChunk::Accept {
                    epoch,
                    ops: ops.clone(),
                    confirm,
                },
            );
        }
        let t = &ctx.cfg.timing;
        let wait = (self.ack_timer).timeout(t.ack_timeout, t.ack_timeout_longest());
        self.inflight = Some(Batch {
            ops,
            replies,
            waiting: live,
            deadline: ctx.now + wait,
            sent: ctx.now,
        });
    }

    /// When every live chunk has accepted the batch: apply it, answer the clients, and
    /// confirm (piggybacked on the next batch, or on its own if nothing is queued).
    pub(super) fn try_complete(&mut self, ctx: &mut Ctx<'_>) {
        if !self.inflight.as_ref().is_some_and(|b| b.waiting.is_empty()) {
            return;
        }
        let b = self.inflight.take().expect("checked");
        let t = &ctx.cfg.timing;
        if t.ack_timeout_max > t.ack_timeout && ctx.now <= b.deadline {
            self.ack_timer.sample(b.sent, ctx.now);
        }
        for (v, op) in b.ops {
            if let StoreOp::Register { key, value } = op {
                ctx.observe(Observation::WriteAcked {
                    store: self.store,
                    key,
                    version: v,
                    value,
                });
            }
            self.data.accept(v, op);
            self.data.confirm(v);
        }
        ctx.out.extend(b.replies);
        self.objects_applied(ctx);
        self.unshared = self.unshared.saturating_add(1);
        self.share_speculative(ctx);
        if self.queue.is_empty() {
            let (epoch, upto) = (self.epoch, self.data.confirmed);
            for c in self.live() {
                self.to_chunk(ctx, c, ToChunk::Confirm { epoch, upto });
            }
        } else {
            self.flush(ctx);
        }
        self.start_deferred(ctx);
    }

    /// With nothing queued or in flight, every change applied to the speculative tables
    /// has been applied, in the same order and by the same code (`Tables::execute`), to
    /// the committed ones: they hold the same. Every [`crate::io::persist::SHARE_TABLES_EVERY`]
    /// batches `speculative` takes `data`'s tables again (an O(1) clone of persistent maps),
    /// so the two share their nodes instead of drifting into two copies of the store.
    /// Not with a planted lock-table bug, which acts on `speculative` only.
    pub(super) fn share_speculative(&mut self, ctx: &Ctx<'_>) {
        let planted = ctx.cfg.planted.skip_conflict_check || ctx.cfg.planted.ignore_cover;
        let pending = !self.queue.is_empty() || self.inflight.is_some();
        if self.unshared < crate::io::persist::SHARE_TABLES_EVERY || pending || planted {
            return;
        }
        self.unshared = 0;
        self.speculative = self.data.table.clone();
    }
}
