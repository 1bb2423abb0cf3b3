//! The store host: replication of the store this device manages (SafeTalk group commit).
//! Changes are sequenced and decided on the speculative tables, queued, sent in batches
//! to every live chunk, and applied to the committed state when every one accepted them;
//! a read waits for a batch as its barrier.
//!
//! [`StoreHost`] holds that state and returns what happened (a change's [`OpResult`], a
//! completed batch's replies); it does not interpret lock results or send messages. The
//! manager ([`Manager`]) composes it with its role (which chunks are live, the epoch),
//! its clients ([`super::requests::Clients`]: who waits for what) and its objects.

use super::*;
use crate::config::PlantedBugs;
use crate::ctx::Ctx;
use crate::data::{OpResult, StoreOp};
use crate::error::ClientError;
use crate::ids::Version;
use crate::ids::{ChunkId, ClientId, Epoch, StoreId};
use crate::io::Output;
use crate::io::observation::Observation;
use crate::io::request::Response;
use crate::layout::ack_timer::AckTimer;
use crate::time::Instant;
use std::collections::BTreeSet;
use std::time::Duration;

/// One store's replication state at its manager.
#[derive(Clone, Debug, Default)]
pub struct StoreHost {
    /// The store's state as this manager knows it: every change every live chunk has
    /// accepted.
    pub data: StoreData,
    /// Sequence number of the last change ordered in this epoch.
    pub seq: u64,
    /// Changes waiting for the batch in flight to finish (group commit).
    pub queue: Vec<Queued>,
    /// The tables with every submitted change applied (the controller decides on this
    /// copy; `data` holds only what every live chunk has accepted).
    pub speculative: Tables,
    /// The batch in flight.
    pub inflight: Option<Batch>,
    /// The measured batch round times: how long the next batch waits for ACCEPTED.
    pub ack_timer: AckTimer,
    /// Batches completed since `speculative` last shared `data`'s tables
    /// ([`StoreHost::share_speculative`]).
    pub unshared: u32,
    /// Changes being submitted for one request are held until the last is queued, so
    /// they leave in one batch (an object upload's changes).
    pub hold: bool,
}

/// What a batch accepted by every live chunk released.
pub struct Completed {
    /// `WriteAcked` for each register write it applied (checkers' view), in order.
    pub acked: Vec<Observation>,
    /// The replies it held (durable before acknowledged).
    pub replies: Vec<Output>,
}

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

impl StoreHost {
    /// Whether changes are in flight or queued (layout changes wait for quiet).
    pub fn busy(&self) -> bool {
        self.inflight.is_some() || !self.queue.is_empty()
    }

    /// A new epoch managed from the committed state: sequence numbers start again, and
    /// the speculative tables are the committed ones.
    pub fn begin_epoch(&mut self) {
        self.seq = 0;
        self.speculative = self.data.table.clone();
    }

    /// Sequence a change and decide it on the speculative tables.
    pub fn sequence(
        &mut self,
        epoch: Epoch,
        op: &StoreOp,
        planted: &PlantedBugs,
    ) -> (Version, OpResult) {
        self.seq += 1;
        let version = Version {
            epoch,
            seq: self.seq,
        };
        let locks = &mut self.speculative.locks;
        locks.plant_skip_conflicts(planted.skip_conflict_check);
        locks.plant_ignore_cover(planted.ignore_cover);
        let result = self.speculative.execute(version, op);
        (version, result)
    }

    /// Queue a sequenced change with the replies it releases.
    pub fn enqueue(&mut self, version: Version, op: StoreOp, replies: Vec<Output>) {
        self.queue.push(Queued {
            version,
            op,
            replies,
        });
    }

    /// Whether the next batch may leave now.
    pub fn ready_to_send(&self) -> bool {
        self.inflight.is_none() && !self.hold
    }

    /// Release `out` with the last queued or sent change.
    ///
    /// # Panics
    /// If nothing is queued or in flight (callers queue a barrier first).
    pub fn attach(&mut self, out: Output) {
        match (self.queue.last_mut(), self.inflight.as_mut()) {
            (Some(q), _) => q.replies.push(out),
            (None, Some(b)) => b.replies.push(out),
            (None, None) => unreachable!("a barrier was just queued or sent"),
        }
    }

    /// The version of the last queued or sent change (the one a barrier rides on).
    pub fn barrier_version(&self) -> Option<Version> {
        match (self.queue.last(), self.inflight.as_ref()) {
            (Some(q), _) => Some(q.version),
            (None, Some(b)) => b.ops.last().map(|(v, _)| *v),
            (None, None) => None,
        }
    }

    /// Group commit: take the queued changes (block data bounded by `limit` bytes per
    /// batch, the rest waits) as the batch in flight, waiting for `live` until
    /// `now + wait`. Returns whether a batch left; the caller sends its ACCEPT.
    pub fn start_batch(
        &mut self,
        live: BTreeSet<ChunkId>,
        limit: usize,
        now: Instant,
        wait: Duration,
    ) -> bool {
        if self.queue.is_empty() || self.inflight.is_some() {
            return false;
        }
        let mut bytes = 0;
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
        self.inflight = Some(Batch {
            ops,
            replies,
            waiting: live,
            deadline: now + wait,
            sent: now,
        });
        true
    }

    /// A chunk's ACCEPTED up to `upto` in the current epoch: it no longer holds up the
    /// batch in flight if it covers the batch. `all` (a planted bug) counts it for every
    /// chunk. Returns whether it covered the batch.
    pub fn accepted(&mut self, chunk: ChunkId, upto: Version, all: bool) -> bool {
        let Some(b) = self.inflight.as_mut() else {
            return false;
        };
        if b.ops.last().is_none_or(|(v, _)| *v > upto) {
            return false;
        }
        b.waiting.remove(&chunk);
        if all {
            b.waiting.clear();
        }
        true
    }

    /// When the batch in flight was sent, if it ends at or below `upto` (an ACCEPTED up
    /// to `upto` in this epoch was then sent after that batch reached its chunk).
    pub fn sent_covered(&self, upto: Version) -> Option<Instant> {
        let b = self.inflight.as_ref()?;
        let (last, _) = b.ops.last()?;
        (*last <= upto).then_some(b.sent)
    }

    /// The tables a read is answered from: the committed ones (the speculative ones
    /// with the planted bug `lease_read_speculative`, which hold changes not yet
    /// acknowledged).
    pub fn read_tables(&self, planted: &PlantedBugs) -> &Tables {
        if planted.lease_read_speculative {
            &self.speculative
        } else {
            &self.data.table
        }
    }

    /// A chunk failed: batches no longer wait for it.
    pub fn forget_chunk(&mut self, chunk: ChunkId) {
        if let Some(b) = self.inflight.as_mut() {
            b.waiting.remove(&chunk);
        }
    }

    /// When every live chunk has accepted the batch in flight: apply it to the committed
    /// state and release its replies. `sample` feeds its round time to the ack timer.
    pub fn complete(&mut self, store: StoreId, now: Instant, sample: bool) -> Option<Completed> {
        if !self.inflight.as_ref().is_some_and(|b| b.waiting.is_empty()) {
            return None;
        }
        let b = self.inflight.take().expect("checked");
        if sample && now <= b.deadline {
            self.ack_timer.sample(b.sent, now);
        }
        let mut acked = Vec::new();
        for (v, op) in b.ops {
            if let StoreOp::Register { key, value } = op {
                acked.push(Observation::WriteAcked {
                    store,
                    key,
                    version: v,
                    value,
                });
            }
            self.data.accept(v, op);
            self.data.confirm(v);
        }
        self.unshared = self.unshared.saturating_add(1);
        Some(Completed {
            acked,
            replies: b.replies,
        })
    }

    /// Every reply still held by a queued or sent change (they were not acknowledged),
    /// emptying both.
    pub fn take_pending(&mut self) -> Vec<Output> {
        let mut pending: Vec<Output> = self.inflight.take().map(|b| b.replies).unwrap_or_default();
        for q in std::mem::take(&mut self.queue) {
            pending.extend(q.replies);
        }
        pending
    }

    /// With nothing queued or in flight, every change applied to the speculative tables
    /// has been applied, in the same order and by the same code (`Tables::execute`), to
    /// the committed ones: they hold the same. Every
    /// [`crate::io::persist::SHARE_TABLES_EVERY`] batches `speculative` takes `data`'s
    /// tables again (an O(1) clone of persistent maps), so the two share their nodes
    /// instead of drifting into two copies of the store. Not with a planted lock-table bug
    /// (`planted`), which acts on `speculative` only.
    pub fn share_speculative(&mut self, planted: bool) {
        if self.unshared < crate::io::persist::SHARE_TABLES_EVERY || self.busy() || planted {
            return;
        }
        self.unshared = 0;
        self.speculative = self.data.table.clone();
    }
}

/// The manager's use of its host, through [`StoreAccess`]: the role decides which chunks
/// are live and the epoch, the clients ([`super::requests::Clients`]) decide what each
/// result answers.
impl Manager {
    /// [`StoreAccess::answer_read`].
    pub(crate) fn answer_read(
        &mut self,
        ctx: &mut Ctx<'_>,
        client: ClientId,
        req_id: u64,
        result: Result<Response, ClientError>,
    ) {
        self.access().answer_read(ctx, client, req_id, result);
    }

    /// [`StoreAccess::after_barrier`].
    pub(crate) fn after_barrier(
        &mut self,
        ctx: &mut Ctx<'_>,
        client: ClientId,
        req_id: u64,
        result: Result<Response, ClientError>,
    ) {
        self.access().after_barrier(ctx, client, req_id, result);
    }

    /// [`StoreAccess::submit`].
    pub fn submit(&mut self, ctx: &mut Ctx<'_>, op: StoreOp, client: ClientId, req_id: u64) {
        self.access().submit(ctx, op, client, req_id);
    }

    /// [`StoreAccess::submit_op`].
    pub(crate) fn submit_op(&mut self, ctx: &mut Ctx<'_>, op: StoreOp, replies: Vec<Output>) {
        self.access().submit_op(ctx, op, replies);
    }

    /// [`StoreAccess::flush`].
    pub(crate) fn flush(&mut self, ctx: &mut Ctx<'_>) {
        self.access().flush(ctx);
    }

    /// When every live chunk has accepted the batch: apply it, answer the clients, and
    /// confirm (piggybacked on the next batch, or on its own if nothing is queued).
    pub(super) fn try_complete(&mut self, ctx: &mut Ctx<'_>) {
        let t = &ctx.cfg.timing;
        let sample = t.ack_timeout_max > t.ack_timeout;
        let Some(done) = self.host.complete(self.store, ctx.now, sample) else {
            return;
        };
        for o in done.acked {
            ctx.observe(o);
        }
        ctx.out.extend(done.replies);
        self.objects_applied(ctx);
        let planted = ctx.cfg.planted.skip_conflict_check || ctx.cfg.planted.ignore_cover;
        self.host.share_speculative(planted);
        if self.host.queue.is_empty() {
            self.access().confirm(ctx);
        } else {
            self.flush(ctx);
        }
        self.start_deferred(ctx);
    }
}
