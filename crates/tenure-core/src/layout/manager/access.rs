//! [`StoreAccess`]: the store host together with what it needs from the role (the live
//! chunks, the epoch, the store's time) and from the clients (what a change's result
//! answers). It is the one way to submit a change, ask for a read barrier or send the
//! next batch: the manager's own requests go through it, and the objects manager
//! ([`crate::objects::mgr::ObjMgr`]) sees the manager through it only.

use super::*;
use crate::ctx::Ctx;
use crate::data::StoreOp;
use crate::error::ClientError;
use crate::ids::{ChunkId, ClientId, SessionId, Version};
use crate::io::Output;
use crate::io::request::Response;
use crate::lockctl::LockOp;
use crate::msg::ToChunk;
use crate::time::{Instant, StoreClock};

/// A manager's store host, with what it needs of the role and the clients (disjoint
/// borrows of the [`Manager`]'s parts: [`Manager::access`], [`Manager::split`]).
pub struct StoreAccess<'a> {
    /// The store.
    pub store: StoreId,
    /// The role's state.
    pub state: MgrState,
    /// The role's epoch.
    pub epoch: Epoch,
    /// Where the role went, if it migrated out (the hint for clients).
    pub forwarding: Option<DeviceId>,
    /// The role's layout.
    pub metadata: &'a Metadata,
    /// Chunks the role holds failed.
    pub failed: &'a BTreeSet<ChunkId>,
    chunkfail: &'a BTreeMap<ChunkId, Instant>,
    read_lease: &'a BTreeMap<ChunkId, Instant>,
    clock: Option<StoreClock>,
    /// Replication: the committed and speculative tables, the queue, the batch in flight.
    pub host: &'a mut StoreHost,
    clients: &'a mut Clients,
}

/// The chunks of `metadata` not failed.
pub(super) fn live_chunks(metadata: &Metadata, failed: &BTreeSet<ChunkId>) -> BTreeSet<ChunkId> {
    metadata.chunks.difference(failed).copied().collect()
}

/// Whether the role holds unexpired leases, by its clock with a margin of 2·δ_c, on a
/// quorum of the store's chunks: no other manager can exist before they expire (DESIGN
/// §4, reads).
pub(super) fn leases_valid(
    ctx: &Ctx<'_>,
    metadata: &Metadata,
    failed: &BTreeSet<ChunkId>,
    chunkfail: &BTreeMap<ChunkId, Instant>,
) -> bool {
    let margin = ctx.cfg.timing.clock_drift * 2;
    let held: BTreeSet<ChunkId> = live_chunks(metadata, failed)
        .into_iter()
        .filter(|c| chunkfail.get(c).is_some_and(|t| ctx.now + margin < *t))
        .collect();
    metadata.quorum(&held)
}

/// Whether a read may be answered now from the committed tables (DESIGN §4, reads): a
/// quorum of the layout's chunks reported, in ACCEPTED of this epoch, a regular lease
/// from this manager that by its clock, with a margin of 2·δ_c, still runs. Until then
/// each of them refuses every other manager, and a new manager needs a quorum, so none
/// exists and nothing was acknowledged that the committed tables lack. (An ACCEPTED of
/// this epoch also means its chunk committed the epoch's merged state, so a quorum of
/// them hold it.) A chunk that restarts forgets its lease, so it helps no other manager
/// for a lease after it boots ([`crate::layout::chunk::Chunk::boot`]).
pub(super) fn read_lease_valid(
    ctx: &Ctx<'_>,
    metadata: &Metadata,
    read_lease: &BTreeMap<ChunkId, Instant>,
) -> bool {
    let margin = ctx.cfg.timing.clock_drift * 2;
    let held = (metadata.chunks.iter())
        .filter(|c| read_lease.get(c).is_some_and(|t| ctx.now + margin < *t))
        .count();
    metadata.quorum_of(held)
}

/// The store's time at local time `now` ([`StoreClock`]); before the role first manages
/// the store, the newest the tables hold.
pub(super) fn store_time(clock: Option<StoreClock>, speculative: &Tables, now: Instant) -> Instant {
    clock.map_or(speculative.clock, |c| c.read(now))
}

impl Manager {
    /// The store host with what it needs of the role and the clients.
    pub(crate) fn access(&mut self) -> StoreAccess<'_> {
        self.split().1
    }

    /// The objects manager and the store host it works through.
    pub(crate) fn split(&mut self) -> (&mut crate::objects::mgr::ObjMgr, StoreAccess<'_>) {
        let access = StoreAccess {
            store: self.store,
            state: self.state(),
            epoch: self.epoch,
            forwarding: self.forwarding,
            metadata: &self.metadata,
            failed: &self.failed,
            chunkfail: &self.chunkfail,
            read_lease: &self.read_lease,
            clock: self.clock,
            host: &mut self.host,
            clients: &mut self.clients,
        };
        (&mut self.objects, access)
    }
}

impl StoreAccess<'_> {
    /// The chunks of the layout not failed.
    pub fn live(&self) -> BTreeSet<ChunkId> {
        live_chunks(self.metadata, self.failed)
    }

    /// Whether the role may answer from its own state ([`leases_valid`]).
    pub fn leases_valid(&self, ctx: &Ctx<'_>) -> bool {
        leases_valid(ctx, self.metadata, self.failed, self.chunkfail)
    }

    /// The store's time at local time `now`.
    pub fn store_now(&self, now: Instant) -> Instant {
        store_time(self.clock, &self.host.speculative, now)
    }

    /// Whether `session` is alive at `now` as far as this manager knows.
    pub fn session_alive(&self, session: SessionId, now: Instant) -> bool {
        self.clients.liveness.alive(session, now)
    }

    fn to_chunk(&self, ctx: &mut Ctx<'_>, chunk: ChunkId, msg: ToChunk) {
        let store = self.store;
        ctx.send(chunk.device, Msg::ToChunk { store, chunk, msg });
    }

    /// Answer a read (or a keep-alive) only after a SafeTalk batch sent after it arrived
    /// has been accepted by every live chunk, in this epoch (a read barrier, like etcd's
    /// ReadIndex). The answer is taken now from the applied tables, which hold every
    /// change answered so far; the barrier proves that no newer manager had committed
    /// an epoch when the chunks accepted it, so nothing newer was answered elsewhere.
    /// A chunk accepts in this epoch only after committing it with the merged state, so
    /// the barrier also waits out the epoch's first batch. Without it, a manager deposed
    /// while paused or cut off kept answering from old state, and a new manager could
    /// show state durable on one chunk only.
    ///
    /// The barrier rides on the next queued change if there is one, else on a lock-table
    /// tick (which acts on due deadlines and changes nothing else).
    pub fn after_barrier(
        &mut self,
        ctx: &mut Ctx<'_>,
        client: ClientId,
        req_id: u64,
        result: Result<Response, ClientError>,
    ) {
        if self.host.queue.is_empty() {
            let at = self.store_now(ctx.now);
            self.clients.lock_tick_at = self.clients.lock_tick_at.max(at);
            let op = StoreOp::Lock {
                op: LockOp::Tick,
                at,
            };
            self.submit_op(ctx, op, Vec::new());
        }
        self.host.attach(Output::Reply {
            client,
            req_id,
            result,
        });
    }

    /// Answer a read taken from the committed tables: at once while this manager's read
    /// lease holds ([`read_lease_valid`], `[timing] lease_reads`), else after a barrier
    /// ([`StoreAccess::after_barrier`]). Only for answers read from the committed tables:
    /// one judged on the speculative tables waits for the barrier that commits them.
    pub fn answer_read(
        &mut self,
        ctx: &mut Ctx<'_>,
        client: ClientId,
        req_id: u64,
        result: Result<Response, ClientError>,
    ) {
        let planted = ctx.cfg.planted.lease_read_unchecked;
        let lease = ctx.cfg.timing.lease_reads
            && self.state == MgrState::Manager
            && read_lease_valid(ctx, self.metadata, self.read_lease);
        if lease || planted {
            ctx.out.push(Output::Reply {
                client,
                req_id,
                result,
            });
        } else {
            self.after_barrier(ctx, client, req_id, result);
        }
    }

    /// Release `out` with the last barrier's answer ([`StoreAccess::after_barrier`],
    /// which must have just been called).
    pub fn with_barrier(&mut self, out: Output) {
        self.host.attach(out);
    }

    /// The version of the change the last barrier rides on.
    pub fn barrier_version(&self) -> Option<Version> {
        self.host.barrier_version()
    }

    /// Submit a change for a client: decided now on the speculative tables, answered
    /// once every live chunk has it durably.
    pub fn submit(&mut self, ctx: &mut Ctx<'_>, op: StoreOp, client: ClientId, req_id: u64) {
        let placeholder = Output::Reply {
            client,
            req_id,
            result: Err(ClientError::Unavailable { store: self.store }),
        };
        self.submit_op(ctx, op, vec![placeholder]);
    }

    /// Sequence a change, decide it on the speculative tables, and queue it with the
    /// replies it releases (the first placeholder reply, if any, is filled in with the
    /// change's own result; waiters it grants or ends are answered too).
    pub fn submit_op(&mut self, ctx: &mut Ctx<'_>, op: StoreOp, replies: Vec<Output>) {
        let (version, result) = self.host.sequence(self.epoch, &op, &ctx.cfg.planted);
        let replies = (self.clients).answers(ctx, self.store, &op, version, result, replies);
        self.host.enqueue(version, op, replies);
        if self.host.ready_to_send() {
            self.flush(ctx);
        }
    }

    /// Group commit: send every queued change in one ACCEPT, with a piggybacked CONFIRM.
    pub fn flush(&mut self, ctx: &mut Ctx<'_>) {
        let t = &ctx.cfg.timing;
        let wait = (self.host.ack_timer).timeout(t.ack_timeout, t.ack_timeout_longest());
        let limit = ctx.cfg.objects.max_batch_bytes;
        if !(self.host).start_batch(self.live(), limit, ctx.now, wait) {
            return;
        }
        let b = self.host.inflight.as_ref().expect("just started");
        let (epoch, confirm) = (self.epoch, self.host.data.confirmed);
        for c in &b.waiting {
            let ops = b.ops.clone();
            self.to_chunk(
                ctx,
                *c,
                ToChunk::Accept {
                    epoch,
                    ops,
                    confirm,
                },
            );
        }
    }

    /// Confirm up to what the host has applied to every live chunk (when nothing is
    /// queued to carry the CONFIRM).
    pub fn confirm(&self, ctx: &mut Ctx<'_>) {
        let (epoch, upto) = (self.epoch, self.host.data.confirmed);
        for c in self.live() {
            self.to_chunk(ctx, c, ToChunk::Confirm { epoch, upto });
        }
    }
}
