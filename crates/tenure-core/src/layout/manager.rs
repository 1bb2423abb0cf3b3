//! The manager state machine (seed 000 §5), including the outside policies a manager runs
//! for its own store (seed 000 §3: replace a failed chunk by relayout, migrate the manager
//! to the store's preferred device).
//!
//! A manager keeps no persistent state: a crash erases it (§5.3.2) and the chunks
//! regenerate a manager through `help`. Regeneration is the sequence gathering chunks →
//! gathered → gathering leases → recovery reconciling → recovery transition → manager.
//!
//! Where the seed leaves room, Tenure decides (each marked `Tenure:` below):
//! - **commit protocol**: the coordinator (the new epoch's manager) sends `epoch
//!   transition` (prepare), collects every participant's `Vote` (ACCEPTED, carrying its
//!   store state: the reconciliation input), merges them, and commits by sending the
//!   merged state; any `VoteAbort` or a missing vote by `transition_timeout` aborts;
//! - **prepared records**: a regenerating manager that learns of an uncommitted prepare
//!   for a newer epoch needs a quorum of *both* layouts (joint quorum) and commits to an
//!   epoch above it, so no epoch number is ever committed twice and no acknowledged write
//!   is lost whether or not that prepare committed somewhere. Attempts that aborted and
//!   one that committed can share an epoch number (a chunk that missed an abort keeps the
//!   stale prepare), so every distinct layout prepared for the newest such epoch is
//!   joined, not only the first one heard of. A report counts whenever it arrives: a late
//!   ack while gathering leases sends the manager back to gathering chunks if the won
//!   chunks lack a quorum of what it reports, and one while the recovery transition is
//!   being prepared aborts it if it would have changed that transition;
//! - **failed accounting**: after a recovery commit the chunks that did not take part are
//!   `failed` (the seed clears the set), so the quorum predicate in the manager state
//!   counts only chunks that really hold leases;
//! - **bounded contention**: after `gather_rounds_max` rounds without quorum a manager
//!   releases its chunks and gives up, so a minority partition never holds chunks forever;
//! - a `lose` goes only to chunks from an older epoch that are not in the layout.

// Each match arm is one (state, event) row of the seed; a row's condition stays inside
// its arm so the code reads like the seed's pseudo-code.
#![allow(clippy::collapsible_match)]

use crate::config::precedence;
use crate::ctx::Ctx;
use crate::data::{OpResult, StoreData, StoreOp, Tables, Version};
use crate::ids::{ChunkId, ClientId, DeviceId, Epoch, StoreId};
use crate::io::{ClientError, EpochCause, Observation, Output, Response};
use crate::io::{Request, WaitSpec};
use crate::layout::{LeaseType, ManagerView, Metadata, MgrState, Prepared};
use crate::lockctl::{
    Acquire, AcquireError, Acquired, LockOp, LockOpResult, ReleaseError, RequestId, Wait,
};
use crate::msg::{MgrMsg, Msg, PolicyMsg, ToChunk, ToManager};
use crate::session::{Liveness, SessionId};
use crate::time::Instant;
use std::collections::{BTreeMap, BTreeSet};

/// What kind of epoch transition a [`Tx`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxKind {
    /// End of regeneration (§5.3.13–14).
    Recovery,
    /// Relayout (§5.3.8–9).
    Relayout,
    /// Migration into this node (§5.3.3–4).
    Into,
}

/// An epoch transition this manager coordinates (SafeTalk).
#[derive(Clone, Debug)]
pub struct Tx {
    /// Identity of this attempt (carried by every message of it).
    pub id: u64,
    /// Kind.
    pub kind: TxKind,
    /// The epoch being committed.
    pub new_epoch: Epoch,
    /// Its layout.
    pub metadata: Metadata,
    /// Chunks that must vote.
    pub participants: BTreeSet<ChunkId>,
    /// Chunks that voted.
    pub votes: BTreeSet<ChunkId>,
    /// Reconciliation inputs so far (the voters' replicas, and this manager's own), each
    /// with the epoch its holder last committed.
    pub inputs: Vec<(Epoch, StoreData)>,
    /// Migration: the outgoing manager's vote is still awaited.
    pub await_mgr: Option<DeviceId>,
    /// When this manager began the attempt (migration: sent its `HandoffReady`).
    pub begun: Instant,
    /// Abort if not complete by then.
    pub deadline: Instant,
}

/// A change waiting to be sent: its sequence number and the replies it releases.
#[derive(Clone, Debug)]
pub struct Queued {
    version: Version,
    op: StoreOp,
    replies: Vec<Output>,
}

/// A SafeTalk batch in flight: ACCEPT sent, waiting for every live chunk's ACCEPTED.
#[derive(Clone, Debug)]
pub struct Batch {
    /// The changes with their sequence numbers.
    pub ops: Vec<(Version, StoreOp)>,
    /// Replies released when the batch is accepted everywhere (durable before
    /// acknowledged).
    replies: Vec<Output>,
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

/// Outside-policy work in progress for this store.
#[derive(Clone, Debug, Default)]
pub struct PolicyState {
    /// A chunk creation is outstanding: (chunk it replaces, device asked, deadline).
    pub creating: Option<(ChunkId, DeviceId, Instant)>,
    /// Devices already tried for the replacement of a chunk.
    pub tried: BTreeSet<DeviceId>,
    /// When each failed chunk was first marked failed.
    pub failed_at: BTreeMap<ChunkId, Instant>,
    /// No new policy action before this time (set when one aborts, so a change that
    /// keeps failing does not turn into a storm of epoch transitions).
    pub backoff_until: Instant,
    /// A transition asked for while a SafeTalk batch was queued or in flight, with the
    /// time it is given up at: it starts once the manager is idle (see
    /// [`Manager::relayout`]).
    pub deferred: Option<(Deferred, Instant)>,
}

/// An epoch transition waiting for the batch in flight (Tenure): a relayout or a
/// migration needs an idle manager, and under steady traffic — a barrier per lock
/// holders query — a manager is never idle between two batches, so one refused while
/// busy was refused forever (a retiring device's chunks never moved off it).
#[derive(Clone, Debug, PartialEq)]
pub enum Deferred {
    /// [`Manager::relayout`] onto this layout.
    Relayout(Metadata),
    /// [`Manager::migrate`] to this device.
    Migrate(DeviceId),
}

/// One device's manager role for one store: the variables of §5.1.
#[derive(Clone, Debug)]
pub struct Manager {
    /// The store.
    pub store: StoreId,
    /// State.
    pub state: MgrState,
    /// Epoch number.
    pub epoch: Epoch,
    /// Metadata.
    pub metadata: Metadata,
    /// Failed chunks.
    pub failed: BTreeSet<ChunkId>,
    /// Failed chunks that have since recovered (hold a recovery lease from us).
    pub recovered: BTreeSet<ChunkId>,
    /// Forwarding address (after migrating out).
    pub forwarding: Option<DeviceId>,
    /// Migration destination.
    pub new_mgr: Option<DeviceId>,
    /// Better managers seen while gathering.
    pub better: BTreeSet<DeviceId>,
    /// Lesser managers seen while gathering.
    pub lesser: BTreeSet<DeviceId>,
    /// New metadata log (relayout).
    pub new_metadata_log: Option<Metadata>,
    /// Chunks not yet heard from while gathering.
    pub outstanding: BTreeSet<ChunkId>,
    /// Chunks won while gathering.
    pub won: BTreeSet<ChunkId>,
    /// Lease transfers not yet acknowledged.
    pub renewal_iffy: BTreeSet<ChunkId>,
    /// chunkfail(c) timers.
    pub chunkfail: BTreeMap<ChunkId, Instant>,
    /// timeout(c) timers.
    pub timeout: BTreeMap<ChunkId, Instant>,
    /// Previous manager (migration).
    pub old_mgr: Option<DeviceId>,
    /// Tenure: the layouts prepared for the newest epoch above ours learned while
    /// gathering, one entry per distinct layout (joint quorum over all of them).
    pub joint: Vec<Prepared>,
    /// Tenure: gathering rounds so far.
    pub rounds: u32,
    /// Tenure: the epoch transition this manager coordinates.
    pub tx: Option<Tx>,
    /// Tenure: out-of-transition gives up at this time.
    pub out_deadline: Option<Instant>,
    /// Tenure: the migration attempt this manager is handing off.
    pub out_tx: Option<u64>,
    /// Tenure: the newest epoch a chunk reported prepared above ours while we manage
    /// (an attempt that aborted, lingering at a chunk that missed the abort). A chunk
    /// never votes twice for an epoch number, so the next transition starts above it.
    pub prepared_floor: Epoch,
    /// Tenure: transition attempts already committed or aborted here (replays of their
    /// messages change nothing). Survives state resets; lost on a crash.
    pub finished: BTreeSet<u64>,
    /// The store's state as this manager knows it.
    pub data: StoreData,
    /// Sequence number of the last write ordered in this epoch.
    pub seq: u64,
    /// Changes waiting for the batch in flight to finish (group commit).
    pub queue: Vec<Queued>,
    /// The tables with every submitted change applied (the controller decides on this
    /// copy; `data` holds only what every live chunk has accepted).
    pub spec: Tables,
    /// Session liveness (volatile; rebuilt with a grace period by a new manager).
    pub liveness: Liveness,
    /// When the lock table was last ticked (store time).
    pub lock_tick_at: Instant,
    /// The store's time ([`crate::time::StoreClock`]): what every change is stamped with
    /// and the tables' times are read on.
    /// None until this manager first manages the store.
    pub clock: Option<crate::time::StoreClock>,
    /// Clients waiting for a queued acquire: (session, request) → reply address.
    pub waiters: BTreeMap<(SessionId, u64), (ClientId, u64)>,
    /// The batch in flight.
    pub inflight: Option<Batch>,
    /// The measured batch round times: how long the next batch waits for ACCEPTED.
    pub ack_timer: super::ack_timer::AckTimer,
    /// Batches completed since `spec` last shared `data`'s tables ([`Self::share_spec`]).
    pub unshared: u32,
    /// When the outside policies next run.
    pub stable_since: Instant,
    /// When this manager last entered the manager state (or its layout last changed).
    pub entered_at: Instant,
    /// Outside policies.
    pub policy: PolicyState,
    /// Objects: complete chunks, reads, collectors, watches.
    pub objects: crate::objects::mgr::ObjMgr,
}

impl Manager {
    /// A role in the none state.
    pub fn new(store: StoreId) -> Manager {
        Manager {
            store,
            state: MgrState::None,
            epoch: Epoch(0),
            metadata: Metadata::default(),
            failed: BTreeSet::new(),
            recovered: BTreeSet::new(),
            forwarding: None,
            new_mgr: None,
            better: BTreeSet::new(),
            lesser: BTreeSet::new(),
            new_metadata_log: None,
            outstanding: BTreeSet::new(),
            won: BTreeSet::new(),
            renewal_iffy: BTreeSet::new(),
            chunkfail: BTreeMap::new(),
            timeout: BTreeMap::new(),
            old_mgr: None,
            joint: Vec::new(),
            rounds: 0,
            tx: None,
            out_deadline: None,
            out_tx: None,
            prepared_floor: Epoch::default(),
            finished: BTreeSet::new(),
            data: StoreData::default(),
            seq: 0,
            queue: Vec::new(),
            spec: Tables::default(),
            liveness: Liveness::default(),
            waiters: BTreeMap::new(),
            lock_tick_at: Instant(0),
            clock: Default::default(),
            inflight: None,
            ack_timer: Default::default(),
            unshared: 0,
            stable_since: Instant(0),
            entered_at: Instant(0),
            policy: PolicyState::default(),
            objects: Default::default(),
        }
    }

    /// Read-only view.
    pub fn view(&self) -> ManagerView {
        ManagerView {
            store: self.store,
            state: self.state,
            epoch: self.epoch,
            metadata: self.metadata.clone(),
            failed: self.failed.clone(),
        }
    }

    /// §5.3.2 newly awake: erase all state and go to none. Any writes still waiting
    /// are answered `Unavailable` (they were not acknowledged).
    pub fn newly_awake(&mut self, ctx: &mut Ctx<'_>) {
        if matches!(
            self.state,
            MgrState::Manager
                | MgrState::RelayoutReconciling
                | MgrState::RelayoutTransition
                | MgrState::OutOfReconciling
                | MgrState::OutOfTransition
        ) {
            ctx.observe(Observation::StoppedManaging {
                store: self.store,
                epoch: self.epoch,
            });
        }
        self.fail_writes(ctx);
        self.reset();
    }

    fn fail_writes(&mut self, ctx: &mut Ctx<'_>) {
        self.objects_stop(ctx);
        let store = self.store;
        let mut pending: Vec<Output> = self.inflight.take().map(|b| b.replies).unwrap_or_default();
        for q in std::mem::take(&mut self.queue) {
            pending.extend(q.replies);
        }
        for (_, (client, req_id)) in std::mem::take(&mut self.waiters) {
            pending.push(Output::Reply {
                client,
                req_id,
                result: Err(ClientError::Unavailable { store }),
            });
        }
        for r in pending {
            if let Output::Reply { client, req_id, .. } = r {
                ctx.out.push(Output::Reply {
                    client,
                    req_id,
                    result: Err(ClientError::Unavailable { store }),
                });
            }
        }
    }

    /// Erase all state (→ none), keeping only the forwarding address and the memory of
    /// finished transition attempts.
    fn reset(&mut self) {
        let forwarding = self.forwarding;
        let finished = std::mem::take(&mut self.finished);
        *self = Manager::new(self.store);
        self.forwarding = forwarding;
        self.finished = finished;
    }

    fn remember(&mut self, tx: u64) {
        if self.finished.len() >= 256 {
            self.finished.pop_first();
        }
        self.finished.insert(tx);
    }

    // ---- helpers -----------------------------------------------------------------

    fn to_chunk(&self, ctx: &mut Ctx<'_>, chunk: ChunkId, msg: ToChunk) {
        ctx.send(
            chunk.device,
            Msg::ToChunk {
                store: self.store,
                chunk,
                msg,
            },
        );
    }

    /// Every chunk regeneration must consider: the layout, plus the newer prepared ones.
    fn all_chunks(&self) -> BTreeSet<ChunkId> {
        let mut s = self.metadata.chunks.clone();
        for j in &self.joint {
            s.extend(j.metadata.chunks.iter().copied());
        }
        s
    }

    /// Quorum and coverage of `set` (joint with every newer prepared layout, if any).
    fn quorum_and_coverage(&self, ctx: &Ctx<'_>, set: &BTreeSet<ChunkId>) -> bool {
        if ctx.cfg.planted.broken_quorum {
            return !set.is_empty();
        }
        let ok = |m: &Metadata| m.quorum(set) && m.coverage(set);
        ok(&self.metadata) && self.joint.iter().all(|j| ok(&j.metadata))
    }

    pub(crate) fn live(&self) -> BTreeSet<ChunkId> {
        self.metadata
            .chunks
            .difference(&self.failed)
            .copied()
            .collect()
    }

    fn acquire(&mut self, ctx: &mut Ctx<'_>, c: ChunkId) {
        let msg = ToChunk::Acquire {
            lease: ctx.cfg.timing.lease,
            mgr: ctx.me(),
            epoch: self.epoch,
        };
        self.to_chunk(ctx, c, msg);
        self.timeout.insert(c, ctx.now + ctx.cfg.timing.msg_timeout);
        self.outstanding.insert(c);
    }

    /// The store's time at local time `now` ([`crate::time::StoreClock`]).
    pub fn store_now(&self, now: Instant) -> Instant {
        self.clock.map_or(self.spec.clock, |c| c.read(now))
    }

    /// The local time at which the store's time reaches `t`.
    pub fn local_at(&self, t: Instant) -> Instant {
        self.clock.map_or(t, |c| c.local(t))
    }

    fn renew(&mut self, ctx: &mut Ctx<'_>, c: ChunkId) {
        let lease = ctx.cfg.timing.lease;
        let epoch = self.epoch;
        self.to_chunk(ctx, c, ToChunk::Renewal { epoch, lease });
        self.chunkfail.insert(c, ctx.now + lease);
    }

    fn enter_manager(&mut self, ctx: &mut Ctx<'_>, cause: EpochCause) {
        self.state = MgrState::Manager;
        self.stable_since = ctx.now;
        self.entered_at = ctx.now;
        self.seq = 0;
        self.spec = self.data.table.clone();
        // Store time reads on from the newest the tables hold (and, for a manager that
        // goes on managing across a relayout, from its own reading if that is later).
        let held = (self.clock.map(|c| c.read(ctx.now)))
            .map_or(self.spec.clock, |t| t.max(self.spec.clock));
        self.clock = Some(crate::time::StoreClock::start(held, ctx.now));
        let grace = ctx.cfg.timing.session_grace;
        if cause == EpochCause::Relayout {
            self.liveness.relayout(&self.spec.sessions, ctx.now, grace);
        } else {
            let none = Default::default();
            let seen = ctx.epochs.get(&self.store).unwrap_or(&none);
            self.liveness = if ctx.cfg.planted.takeover_ignores_renewal {
                let mut sessions = self.spec.sessions.clone();
                sessions.open = (sessions.open.into_iter())
                    .map(|(id, mut r)| {
                        r.renewed = Default::default();
                        (id, r)
                    })
                    .collect();
                Liveness::take_over(&sessions, ctx.now, grace, seen)
            } else {
                Liveness::take_over(&self.spec.sessions, ctx.now, grace, seen)
            };
        }
        if ctx.cfg.planted.expire_without_grace {
            self.liveness.plant_no_grace(ctx.now);
        }
        self.waiters.clear();
        self.objects_enter(ctx);
        // Fencing tokens of this epoch's grants carry the epoch.
        let op = StoreOp::Lock {
            op: LockOp::BeginEpoch(self.epoch),
            at: self.store_now(ctx.now),
        };
        self.submit_op(ctx, op, Vec::new());
        ctx.observe(Observation::BecameManager {
            store: self.store,
            epoch: self.epoch,
            metadata: self.metadata.clone(),
            cause,
        });
    }

    /// A chunk is newly failed: report it to the outside policy; step down (suicide)
    /// if quorum or coverage is lost. Returns whether this manager is still manager.
    fn mark_failed(&mut self, ctx: &mut Ctx<'_>, c: ChunkId) -> bool {
        self.failed.insert(c);
        self.objects.complete.remove(&c);
        self.policy.failed_at.entry(c).or_insert(ctx.now);
        ctx.observe(Observation::ChunkFailed {
            store: self.store,
            chunk: c,
        });
        if self.quorum_and_coverage(ctx, &self.live()) {
            // Batches no longer wait for a chunk whose lease has expired.
            if let Some(b) = self.inflight.as_mut() {
                b.waiting.remove(&c);
            }
            self.try_complete(ctx);
            true
        } else {
            self.newly_awake(ctx);
            false
        }
    }

    // ---- events ------------------------------------------------------------------

    /// A message from a chunk of this store.
    pub fn on_msg(&mut self, ctx: &mut Ctx<'_>, from: DeviceId, c: ChunkId, msg: ToManager) {
        use MgrState as S;
        if from != c.device {
            // A device speaks only for its own chunks.
            return;
        }
        match (self.state, msg) {
            // §5.3.1 none: help → start regenerating.
            (S::None, ToManager::Help { epoch, metadata }) => {
                if !metadata.contains(c) {
                    // Tenure: a chunk created by a relayout, not in its own metadata until
                    // the commit reaches it. With no role here this manager cannot tell an
                    // orphan (the relayout aborted) from a member of a committed layout
                    // that missed the commit (simulator seed 80994: collecting such members
                    // left the store without a manager forever), so it ignores the help;
                    // a manager of the store answers it (lose, or acquire if a member).
                } else if let Some(f) = self.forwarding.take() {
                    // Tenure: we migrated out; point the chunk at the new manager once.
                    self.to_chunk(ctx, c, ToChunk::Redirect { new_mgr: f });
                } else {
                    self.start_gathering(ctx, epoch, metadata);
                }
            }
            // §5.3.7 manager: renewal request
            (S::Manager, ToManager::RenewalRequest { epoch }) => {
                if !self.failed.contains(&c) && epoch == self.epoch {
                    self.renew(ctx, c);
                }
            }
            // §5.3.7 manager: help
            (S::Manager, ToManager::Help { epoch, .. }) => {
                if self.metadata.contains(c) {
                    if !self.failed.contains(&c) && !self.mark_failed(ctx, c) {
                        return;
                    }
                    let msg = ToChunk::Acquire {
                        lease: ctx.cfg.timing.lease,
                        mgr: ctx.me(),
                        epoch: self.epoch,
                    };
                    self.to_chunk(ctx, c, msg);
                } else if epoch <= self.epoch {
                    self.to_chunk(ctx, c, ToChunk::Lose);
                }
            }
            // Tenure: an ack-conditional from a newer epoch means this manager is stale
            // (a successor committed while it was cut off): step down.
            (S::Manager, ToManager::AckConditional { chunk_epoch, .. })
                if chunk_epoch > self.epoch =>
            {
                self.newly_awake(ctx);
            }
            // §5.3.7 manager: ack / ack-conditional from a failed chunk → recovered
            (
                S::Manager,
                ToManager::Ack { prepared, .. } | ToManager::AckConditional { prepared, .. },
            ) => {
                if let Some(p) = prepared.filter(|p| p.new_epoch > self.epoch) {
                    self.prepared_floor = self.prepared_floor.max(p.new_epoch);
                }
                if self.failed.contains(&c) {
                    self.recovered.insert(c);
                    self.chunkfail.insert(c, ctx.now + ctx.cfg.timing.lease);
                }
            }
            // §5.3.7 manager: nack → do nothing
            (S::Manager, ToManager::Nack { .. }) => {}
            // §5.3.7 manager: recovery renewal request
            (S::Manager, ToManager::RecoveryRenewalRequest { .. }) => {
                if self.recovered.contains(&c) {
                    self.renew(ctx, c);
                }
            }
            // SafeTalk ACCEPTED (LA/RA).
            (S::Manager, ToManager::Accepted { epoch, upto }) => {
                if epoch == self.epoch
                    && let Some(b) = self.inflight.as_mut()
                    && b.ops.last().is_some_and(|(v, _)| *v <= upto)
                {
                    b.waiting.remove(&c);
                    if ctx.cfg.planted.confirm_before_all_accepted {
                        b.waiting.clear();
                    }
                    self.try_complete(ctx);
                }
            }
            // A chunk that cannot accept is failed (Menasce's up list, seed 004 §2).
            (S::Manager, ToManager::Refused { epoch }) => {
                if epoch == self.epoch && !self.failed.contains(&c) && self.metadata.contains(c) {
                    self.mark_failed(ctx, c);
                }
            }
            // §5.3.10 gathering chunks: ack
            (S::GatheringChunks, ToManager::Ack { prepared, .. }) => {
                self.won_chunk(ctx, c);
                self.note_prepared(ctx, prepared);
                self.check_gathered(ctx);
            }
            // §5.3.10 gathering chunks: ack-conditional
            (
                S::GatheringChunks,
                ToManager::AckConditional {
                    chunk_epoch,
                    metadata,
                    prepared,
                    ..
                },
            ) => {
                self.won_chunk(ctx, c);
                if chunk_epoch > self.epoch {
                    self.move_forward(ctx, chunk_epoch, metadata);
                }
                self.note_prepared(ctx, prepared);
                self.check_gathered(ctx);
            }
            // §5.3.10 gathering chunks: nochunk
            (S::GatheringChunks, ToManager::NoChunk) => {
                self.outstanding.remove(&c);
                self.timeout.remove(&c);
                self.check_gathered(ctx);
            }
            // §5.3.10 / §5.3.12: recovery renewal request
            (S::GatheringChunks, ToManager::RecoveryRenewalRequest { .. }) => {
                if self.won.contains(&c) {
                    self.renew(ctx, c);
                }
            }
            (S::GatheringLeases, ToManager::RecoveryRenewalRequest { .. }) => {
                if self.won.contains(&c) || self.renewal_iffy.contains(&c) {
                    self.renew(ctx, c);
                }
            }
            // §5.3.10 gathering chunks: help
            (S::GatheringChunks, ToManager::Help { epoch, .. }) => {
                if epoch < self.epoch && !self.all_chunks().contains(&c) {
                    self.to_chunk(ctx, c, ToChunk::Lose);
                } else if !self.outstanding.contains(&c) {
                    self.won.remove(&c);
                    self.acquire(ctx, c);
                }
            }
            // §5.3.10 gathering chunks: nack (precedence arbitration)
            (S::GatheringChunks, ToManager::Nack { mgr, lease, .. }) => {
                self.outstanding.remove(&c);
                self.timeout.remove(&c);
                let me = ctx.me();
                match (lease, mgr) {
                    (_, Some(m)) if m == me => {}
                    (LeaseType::Regular, Some(m)) => {
                        self.better.insert(m);
                    }
                    (_, Some(m)) => {
                        if precedence(self.store, m) > precedence(self.store, me) {
                            self.better.insert(m);
                        } else {
                            self.lesser.insert(m);
                        }
                    }
                    (_, None) => {}
                }
                self.check_gathered(ctx);
            }
            // §5.3.10 gathering chunks: transfernotice
            (S::GatheringChunks, ToManager::TransferNotice { epoch, .. }) => {
                if epoch == self.epoch {
                    self.newly_awake(ctx);
                }
            }
            // §5.3.12 gathering leases: transfer ack
            // Tenure: the ack reports the chunk's prepare, which this manager has not
            // seen (the chunk acked another manager); one it must join is weighed as a
            // late ack is.
            (
                S::GatheringLeases,
                ToManager::TransferAck {
                    epoch,
                    mgr,
                    prepared,
                },
            ) => {
                if epoch == self.epoch && mgr == ctx.me() && self.renewal_iffy.contains(&c) {
                    self.timeout.remove(&c);
                    if prepared.as_ref().is_some_and(|p| self.would_join(p)) {
                        self.late_ack_gathering_leases(ctx, c, None, prepared);
                    } else {
                        self.renewal_iffy.remove(&c);
                        self.won.insert(c);
                        self.check_leases_gathered(ctx);
                    }
                }
            }
            // Tenure: a refused transfer, or a refused acquire of a joined layout's chunk,
            // while gathering leases.
            (S::GatheringLeases, ToManager::Nack { .. } | ToManager::NoChunk) => {
                if self.renewal_iffy.remove(&c) {
                    self.timeout.remove(&c);
                    self.chunkfail.remove(&c);
                    self.check_leases_gathered(ctx);
                } else if self.outstanding.remove(&c) {
                    self.timeout.remove(&c);
                }
            }
            // Tenure: a late ack / ack-conditional (to an acquire of this regeneration)
            // while gathering leases wins the chunk, and what it reports is weighed as in
            // §5.3.10: a newer epoch moves the recovery forward, a prepare is joined. The
            // gathered decision (§5.3.11) stands only if the won chunks still hold a
            // quorum and coverage of every layout; otherwise back to gathering chunks,
            // where the joined layouts' chunks are being acquired.
            (S::GatheringLeases, ToManager::Ack { prepared, .. }) => {
                self.late_ack_gathering_leases(ctx, c, None, prepared);
            }
            (
                S::GatheringLeases,
                ToManager::AckConditional {
                    chunk_epoch,
                    metadata,
                    prepared,
                    ..
                },
            ) => {
                let newer = (chunk_epoch > self.epoch).then_some((chunk_epoch, metadata));
                self.late_ack_gathering_leases(ctx, c, newer, prepared);
            }
            // Tenure: a late ack / ack-conditional from a chunk that is not a participant
            // while the recovery transition is prepared. Nothing is committed yet; if what
            // it reports would have changed the gathered decision, abort tx (§5.3.14).
            (S::RecoveryReconciling, ToManager::Ack { prepared, .. }) => {
                self.late_ack_recovery(ctx, None, prepared);
            }
            (
                S::RecoveryReconciling,
                ToManager::AckConditional {
                    chunk_epoch,
                    metadata,
                    prepared,
                    ..
                },
            ) => {
                let newer = (chunk_epoch > self.epoch).then_some((chunk_epoch, metadata));
                self.late_ack_recovery(ctx, newer, prepared);
            }
            // Votes (done + vote commit) in any reconciling state.
            (
                S::RecoveryReconciling | S::RelayoutReconciling | S::IntoReconciling,
                ToManager::Vote {
                    new_epoch,
                    tx: id,
                    data,
                    committed,
                },
            ) => {
                if let Some(tx) = self
                    .tx
                    .as_mut()
                    .filter(|t| t.new_epoch == new_epoch && t.id == id)
                    && tx.participants.contains(&c)
                    && tx.votes.insert(c)
                {
                    tx.inputs.push((committed, data));
                    self.check_votes(ctx);
                }
            }
            (
                S::RecoveryReconciling | S::RelayoutReconciling | S::IntoReconciling,
                ToManager::VoteAbort { new_epoch, tx: id },
            ) => {
                if self
                    .tx
                    .as_ref()
                    .is_some_and(|t| t.new_epoch == new_epoch && t.id == id)
                {
                    self.abort_tx(ctx);
                }
            }
            _ => {}
        }
    }

    // ---- regeneration ------------------------------------------------------------

    /// §5.3.1 help: begin regenerating at the chunk's epoch and metadata.
    fn start_gathering(&mut self, ctx: &mut Ctx<'_>, epoch: Epoch, metadata: Metadata) {
        self.reset();
        self.epoch = epoch;
        self.metadata = metadata;
        self.rounds = 1;
        self.state = MgrState::GatheringChunks;
        for c in self.metadata.chunks.clone() {
            self.acquire(ctx, c);
        }
    }

    fn won_chunk(&mut self, ctx: &mut Ctx<'_>, c: ChunkId) {
        self.outstanding.remove(&c);
        self.won.insert(c);
        self.timeout.remove(&c);
        self.chunkfail.insert(c, ctx.now + ctx.cfg.timing.lease);
    }

    /// Tenure: a chunk voted for a newer epoch that may have committed elsewhere. Require
    /// a quorum of its layout too, and acquire its chunks. Several attempts can have
    /// prepared the same epoch number with different layouts (an aborted one lingers at a
    /// chunk that missed the abort); any of them may be the one that committed, so each
    /// distinct layout of the newest prepared epoch is joined.
    fn note_prepared(&mut self, ctx: &mut Ctx<'_>, prepared: Option<Prepared>) {
        for c in self.join_prepared(prepared).unwrap_or_default() {
            self.acquire(ctx, c);
        }
    }

    /// Whether [`Self::join_prepared`] would join `p`'s layout.
    fn would_join(&self, p: &Prepared) -> bool {
        p.new_epoch > self.epoch
            && match self.joint.first().map(|j| j.new_epoch) {
                Some(top) if top > p.new_epoch => false,
                Some(top) if top == p.new_epoch => {
                    !self.joint.iter().any(|j| j.metadata == p.metadata)
                }
                _ => true,
            }
    }

    /// The bookkeeping of [`Self::note_prepared`] without the acquires: joins the layout
    /// if it is new for the newest prepared epoch, and returns the chunks of it not yet
    /// known (`None` if nothing was joined).
    fn join_prepared(&mut self, prepared: Option<Prepared>) -> Option<Vec<ChunkId>> {
        let p = prepared?;
        if !self.would_join(&p) {
            return None;
        }
        if self
            .joint
            .first()
            .is_some_and(|j| j.new_epoch < p.new_epoch)
        {
            self.joint.clear();
        }
        let known = self.all_chunks();
        let fresh: Vec<ChunkId> = p
            .metadata
            .chunks
            .iter()
            .filter(|c| {
                !known.contains(*c) && !self.won.contains(c) && !self.outstanding.contains(c)
            })
            .copied()
            .collect();
        self.joint.push(p);
        Some(fresh)
    }

    /// §5.3.10 ack-conditional from a newer epoch: move the recovery attempt forward to
    /// the chunk's epoch and metadata, acquiring the chunks new to it.
    fn move_forward(&mut self, ctx: &mut Ctx<'_>, chunk_epoch: Epoch, metadata: Metadata) {
        self.epoch = chunk_epoch;
        let cnew: Vec<ChunkId> = metadata
            .chunks
            .difference(&self.metadata.chunks)
            .copied()
            .collect();
        self.metadata = metadata;
        self.joint.retain(|j| j.new_epoch > chunk_epoch);
        for n in cnew {
            if !self.won.contains(&n) {
                self.acquire(ctx, n);
            }
        }
    }

    /// §5.3.12 gathering leases: a late ack / ack-conditional (see the arm in
    /// [`Self::on_msg`]). `newer` is the chunk's epoch and metadata if newer than ours.
    fn late_ack_gathering_leases(
        &mut self,
        ctx: &mut Ctx<'_>,
        c: ChunkId,
        newer: Option<(Epoch, Metadata)>,
        prepared: Option<Prepared>,
    ) {
        self.renewal_iffy.remove(&c);
        self.won_chunk(ctx, c);
        if let Some((chunk_epoch, metadata)) = newer {
            // The transfers went out at the old epoch: drop them and regather.
            self.back_to_gathering_chunks();
            self.move_forward(ctx, chunk_epoch, metadata);
        }
        self.note_prepared(ctx, prepared);
        if self.state == MgrState::GatheringLeases && self.quorum_and_coverage(ctx, &self.won) {
            self.check_leases_gathered(ctx);
        } else {
            self.back_to_gathering_chunks();
            self.check_gathered(ctx);
        }
    }

    /// Tenure: leave gathering leases for gathering chunks, giving up the lease
    /// transfers in flight (the gathered decision will send them again if it still holds).
    fn back_to_gathering_chunks(&mut self) {
        self.state = MgrState::GatheringChunks;
        for c in std::mem::take(&mut self.renewal_iffy) {
            self.timeout.remove(&c);
            self.chunkfail.remove(&c);
        }
    }

    /// §5.3.13 recovery reconciling: a late ack / ack-conditional from a chunk that is
    /// not a participant. Abort if a newer epoch committed at it that the participants
    /// hold no quorum of (or at or above the epoch being prepared), or if it reports a
    /// prepare that would have changed the transition: a layout of the newest prepared
    /// epoch the participants hold no quorum of, or an epoch at or above the one being
    /// prepared.
    fn late_ack_recovery(
        &mut self,
        ctx: &mut Ctx<'_>,
        newer: Option<(Epoch, Metadata)>,
        prepared: Option<Prepared>,
    ) {
        let Some((tx_epoch, participants, tx_metadata)) = self
            .tx
            .as_ref()
            .map(|t| (t.new_epoch, t.participants.clone(), t.metadata.clone()))
        else {
            return;
        };
        // A participant's vote for this very transition (reported by a delayed ack) is
        // not news.
        let me = ctx.me();
        let prepared = prepared
            .filter(|p| !(p.new_epoch == tx_epoch && p.metadata == tx_metadata && p.new_mgr == me));
        let holds = |m: &Metadata| {
            ctx.cfg.planted.broken_quorum || (m.quorum(&participants) && m.coverage(&participants))
        };
        let stale = newer.is_some_and(|(e, m)| e >= tx_epoch || !holds(&m));
        let changed = self.join_prepared(prepared).is_some()
            && (self.recovery_target().0 > tx_epoch
                || !self.quorum_and_coverage(ctx, &participants));
        if stale || changed {
            self.abort_tx(ctx);
        }
    }

    fn check_gathered(&mut self, ctx: &mut Ctx<'_>) {
        if self.outstanding.is_empty() {
            self.gathered(ctx);
        }
    }

    /// §5.3.11 gathered: decide on entry.
    fn gathered(&mut self, ctx: &mut Ctx<'_>) {
        self.state = MgrState::Gathered;
        if self.quorum_and_coverage(ctx, &self.won) {
            self.gathering_leases(ctx);
        } else if self.better.is_empty() && self.rounds < ctx.cfg.timing.gather_rounds_max {
            // Not clearly lost: another round of acquisitions.
            self.rounds += 1;
            self.state = MgrState::GatheringChunks;
            let rest: Vec<ChunkId> = self.all_chunks().difference(&self.won).copied().collect();
            for c in rest {
                self.acquire(ctx, c);
            }
            if self.outstanding.is_empty() {
                self.newly_awake(ctx);
            }
        } else {
            let hints: Vec<DeviceId> = self.better.iter().copied().collect();
            let epoch = self.epoch;
            for c in self.won.clone() {
                self.to_chunk(
                    ctx,
                    c,
                    ToChunk::Release {
                        epoch,
                        hints: hints.clone(),
                    },
                );
            }
            self.newly_awake(ctx);
        }
    }

    /// §5.3.12 gathering leases: on entry, transfer every remaining lease to us.
    fn gathering_leases(&mut self, ctx: &mut Ctx<'_>) {
        self.state = MgrState::GatheringLeases;
        self.renewal_iffy.clear();
        let t: Vec<ChunkId> = self
            .all_chunks()
            .into_iter()
            .filter(|c| !self.failed.contains(c) && !self.won.contains(c))
            .collect();
        let me = ctx.me();
        for c in t {
            let lease = ctx.cfg.timing.lease;
            let epoch = self.epoch;
            self.to_chunk(
                ctx,
                c,
                ToChunk::TransferLease {
                    epoch,
                    new_mgr: me,
                    lease,
                },
            );
            self.renewal_iffy.insert(c);
            self.chunkfail.insert(c, ctx.now + lease);
            // Tenure: a transfer not acknowledged within a message timeout is given up.
            self.timeout.insert(c, ctx.now + ctx.cfg.timing.msg_timeout);
        }
        self.check_leases_gathered(ctx);
    }

    fn check_leases_gathered(&mut self, ctx: &mut Ctx<'_>) {
        if self.renewal_iffy.is_empty() && self.state == MgrState::GatheringLeases {
            self.start_recovery_transition(ctx);
        }
    }

    /// §5.3.12 → §5.3.13: send `epoch transition` to all won chunks.
    fn start_recovery_transition(&mut self, ctx: &mut Ctx<'_>) {
        let (new_epoch, metadata) = self.recovery_target();
        let won = self.won.clone();
        self.begin_tx(
            ctx,
            TxKind::Recovery,
            new_epoch,
            metadata,
            won,
            BTreeSet::new(),
        );
        self.state = MgrState::RecoveryReconciling;
    }

    /// The epoch and layout a recovery transition goes to: above the newest prepared
    /// epoch joined, with its first layout, or else the next epoch of our layout.
    fn recovery_target(&self) -> (Epoch, Metadata) {
        match self.joint.first() {
            Some(j) => (j.new_epoch.max(self.epoch).next(), j.metadata.clone()),
            None => (self.epoch.next(), self.metadata.clone()),
        }
    }

    fn begin_tx(
        &mut self,
        ctx: &mut Ctx<'_>,
        kind: TxKind,
        new_epoch: Epoch,
        metadata: Metadata,
        participants: BTreeSet<ChunkId>,
        reconcile: BTreeSet<ChunkId>,
    ) {
        let me = ctx.me();
        let old_epoch = self.epoch;
        let id = ctx.rng.next_u64();
        let state = (!reconcile.is_empty()).then(|| Box::new(self.data.clone()));
        for c in &participants {
            self.to_chunk(
                ctx,
                *c,
                ToChunk::EpochTransition {
                    old_epoch,
                    new_epoch,
                    metadata: metadata.clone(),
                    new_mgr: me,
                    tx: id,
                    data: state.clone().filter(|_| reconcile.contains(c)),
                },
            );
        }
        self.tx = Some(Tx {
            id,
            kind,
            new_epoch,
            metadata,
            participants,
            votes: BTreeSet::new(),
            // A regenerating manager's own state is empty: it holds no epoch.
            inputs: vec![(
                if kind == TxKind::Recovery {
                    Epoch::default()
                } else {
                    old_epoch
                },
                self.data.clone(),
            )],
            await_mgr: None,
            begun: ctx.now,
            deadline: ctx.now + ctx.cfg.timing.transition_timeout,
        });
    }

    /// `done`: every participant has reconciled and voted; commit.
    fn check_votes(&mut self, ctx: &mut Ctx<'_>) {
        let Some(tx) = self.tx.as_ref() else { return };
        if tx.deadline <= ctx.now {
            // Votes read only after the deadline (a paused device): the attempt is over,
            // whatever arrived meanwhile (an outgoing manager has stepped down by now).
            return self.abort_tx(ctx);
        }
        if !(tx.await_mgr.is_none() && tx.votes == tx.participants) {
            return;
        }
        // initiate commit, voting commit → * transition; as coordinator, commit at once.
        self.state = match self.state {
            MgrState::RecoveryReconciling => MgrState::RecoveryTransition,
            MgrState::RelayoutReconciling => MgrState::RelayoutTransition,
            _ => MgrState::IntoTransition,
        };
        self.commit_tx(ctx);
    }

    /// commit tx (§5.3.4, §5.3.9, §5.3.14).
    fn commit_tx(&mut self, ctx: &mut Ctx<'_>) {
        let tx = self.tx.take().expect("commit without a transaction");
        self.remember(tx.id);
        let expiry = ctx.now + ctx.cfg.timing.commit_window;
        // Reconciliation: Menasce's merge with maximum forward progress (seed 004 §4.1).
        let newest = tx.inputs.iter().map(|(e, _)| *e).max().unwrap_or_default();
        let replicas: Vec<StoreData> = tx.inputs.into_iter().map(|(_, d)| d).collect();
        let merged = crate::safetalk::merge(&replicas, newest);
        for c in &tx.participants {
            self.to_chunk(
                ctx,
                *c,
                ToChunk::Commit {
                    new_epoch: tx.new_epoch,
                    tx: tx.id,
                    data: merged.clone(),
                    lease: ctx.cfg.timing.commit_window,
                },
            );
        }
        self.epoch = tx.new_epoch;
        self.metadata = tx.metadata;
        self.data = merged;
        self.joint.clear();
        self.chunkfail.clear();
        self.timeout.clear();
        for c in tx
            .participants
            .iter()
            .filter(|c| self.metadata.contains(**c))
        {
            self.chunkfail.insert(*c, expiry);
        }
        // Chunks of the new layout that did not take part hold no lease from us.
        self.failed = self
            .metadata
            .chunks
            .difference(&tx.participants)
            .copied()
            .collect();
        self.recovered.clear();
        self.policy = PolicyState {
            failed_at: self.failed.iter().map(|c| (*c, ctx.now)).collect(),
            ..PolicyState::default()
        };
        match tx.kind {
            TxKind::Recovery => {
                self.won.clear();
                self.enter_manager(ctx, EpochCause::Regeneration);
            }
            TxKind::Relayout => {
                self.new_metadata_log = None;
                self.enter_manager(ctx, EpochCause::Relayout);
                ctx.observe(Observation::Relayout {
                    store: self.store,
                    committed: true,
                });
            }
            TxKind::Into => {
                if let Some(old) = self.old_mgr.take() {
                    let new_epoch = self.epoch;
                    ctx.send(
                        old,
                        Msg::Mgr {
                            store: self.store,
                            msg: MgrMsg::HandoffCommit {
                                new_epoch,
                                tx: tx.id,
                            },
                        },
                    );
                }
                self.enter_manager(ctx, EpochCause::Migration);
                ctx.observe(Observation::Migration {
                    store: self.store,
                    committed: true,
                });
            }
        }
    }

    /// abort tx (§5.3.4, §5.3.9, §5.3.14).
    fn abort_tx(&mut self, ctx: &mut Ctx<'_>) {
        let tx = self.tx.take().expect("abort without a transaction");
        self.remember(tx.id);
        let expiry = ctx.now + ctx.cfg.timing.abort_window;
        for c in &tx.participants {
            self.to_chunk(
                ctx,
                *c,
                ToChunk::Abort {
                    new_epoch: tx.new_epoch,
                    tx: tx.id,
                    lease: ctx.cfg.timing.abort_window,
                },
            );
        }
        match tx.kind {
            TxKind::Recovery => self.newly_awake(ctx),
            TxKind::Relayout => {
                self.new_metadata_log = None;
                for c in self.live() {
                    self.chunkfail.insert(c, expiry);
                }
                // Recovered chunks fall back to no lease on abort (§4.2.8).
                for c in std::mem::take(&mut self.recovered) {
                    self.chunkfail.remove(&c);
                }
                self.state = MgrState::Manager;
                self.stable_since = ctx.now;
                self.policy.backoff_until = ctx.now + ctx.cfg.timing.lease;
                ctx.observe(Observation::Relayout {
                    store: self.store,
                    committed: false,
                });
            }
            TxKind::Into => {
                if let Some(old) = self.old_mgr.take() {
                    ctx.send(
                        old,
                        Msg::Mgr {
                            store: self.store,
                            msg: MgrMsg::HandoffAbort {
                                new_epoch: tx.new_epoch,
                                tx: tx.id,
                            },
                        },
                    );
                }
                ctx.observe(Observation::Migration {
                    store: self.store,
                    committed: false,
                });
                // erase epoch number, metadata → none
                self.reset();
            }
        }
    }

    // ---- migration and relayout ----------------------------------------------------

    /// The epoch of the next transition this manager starts: above its own and above
    /// every epoch a chunk reported prepared ([`Self::prepared_floor`]).
    fn next_epoch(&self) -> Epoch {
        self.epoch.max(self.prepared_floor).next()
    }

    /// §5.3.7 migrate(node).
    pub fn migrate(&mut self, ctx: &mut Ctx<'_>, node: DeviceId) -> bool {
        if self.state != MgrState::Manager || node == ctx.me() {
            return false;
        }
        if self.busy() {
            self.defer(ctx, Deferred::Migrate(node));
            return false;
        }
        self.fail_writes(ctx);
        let new_epoch = self.next_epoch();
        let tx = ctx.rng.next_u64();
        self.out_tx = Some(tx);
        ctx.send(
            node,
            Msg::Mgr {
                store: self.store,
                msg: MgrMsg::Handoff {
                    tx,
                    old_epoch: self.epoch,
                    new_epoch,
                    metadata: self.metadata.clone(),
                    failed: self.failed.iter().copied().collect(),
                    data: self.data.clone(),
                },
            },
        );
        for c in self.live() {
            self.to_chunk(
                ctx,
                c,
                ToChunk::EpochTransition {
                    old_epoch: self.epoch,
                    new_epoch,
                    metadata: self.metadata.clone(),
                    new_mgr: node,
                    tx,
                    data: None,
                },
            );
        }
        self.new_mgr = Some(node);
        // Our state travels in the handoff; `done` (and the vote) when the incoming
        // manager says it holds it (HandoffReady), while this window is open.
        self.state = MgrState::OutOfReconciling;
        self.out_deadline = Some(ctx.now + ctx.cfg.timing.transition_wait);
        true
    }

    /// §5.3.7 relayout(new metadata).
    pub fn relayout(&mut self, ctx: &mut Ctx<'_>, new: Metadata) -> bool {
        if self.state != MgrState::Manager || new.chunks.is_empty() {
            return false;
        }
        if self.busy() {
            self.defer(ctx, Deferred::Relayout(new));
            return false;
        }
        // Participants: every live chunk, and every chunk of the new layout except those
        // failed and not recovered. They must hold a quorum of the new layout, or a
        // later regeneration could find a quorum that never received the state.
        let unreachable: BTreeSet<ChunkId> =
            self.failed.difference(&self.recovered).copied().collect();
        let live = self.live();
        let mut participants = live.clone();
        participants.extend(new.chunks.difference(&unreachable).copied());
        if !(new.quorum(&participants) && new.coverage(&participants)) {
            return false;
        }
        self.fail_writes(ctx);
        self.new_metadata_log = Some(new.clone());
        let new_epoch = self.next_epoch();
        // Tenure: reconciliation (§5.3.8) sends the store's state to the participants
        // that do not hold it — new chunks and recovered ones — and they vote only once
        // it is durable. Merging the votes at commit is not enough: if the commit then
        // reaches only some of the new layout, a later regeneration from a quorum of it
        // could find only chunks that never received the state (simulator seed 2847).
        let reconcile = participants.difference(&live).copied().collect();
        self.begin_tx(
            ctx,
            TxKind::Relayout,
            new_epoch,
            new,
            participants,
            reconcile,
        );
        self.state = MgrState::RelayoutReconciling;
        true
    }

    /// Manager-to-manager messages (§5.3.1 handoff, and the migration commit).
    pub fn on_mgr_msg(&mut self, ctx: &mut Ctx<'_>, from: DeviceId, msg: MgrMsg) {
        use MgrState as S;
        match (self.state, msg) {
            (
                S::None,
                MgrMsg::Handoff {
                    tx: id,
                    old_epoch,
                    new_epoch,
                    metadata,
                    failed,
                    data,
                },
            ) if !self.finished.contains(&id) && new_epoch > old_epoch => {
                self.reset();
                self.epoch = new_epoch;
                self.metadata = metadata.clone();
                self.old_mgr = Some(from);
                self.failed = failed.into_iter().collect();
                self.data = data;
                self.state = S::IntoReconciling;
                let participants = self.live();
                self.tx = Some(Tx {
                    id,
                    kind: TxKind::Into,
                    new_epoch: self.epoch,
                    metadata,
                    participants,
                    votes: BTreeSet::new(),
                    inputs: vec![(old_epoch, self.data.clone())],
                    await_mgr: Some(from),
                    begun: ctx.now,
                    // Until the outgoing manager's vote says how long it waits.
                    deadline: ctx.now + ctx.cfg.timing.transition_timeout,
                });
                let msg = MgrMsg::HandoffReady { new_epoch, tx: id };
                let store = self.store;
                ctx.send(from, Msg::Mgr { store, msg });
            }
            (_, MgrMsg::Handoff { tx, new_epoch, .. }) => {
                // Tenure: busy with this store, or a replay of a finished attempt;
                // refuse so the old manager resumes.
                ctx.send(
                    from,
                    Msg::Mgr {
                        store: self.store,
                        msg: MgrMsg::HandoffAbort { new_epoch, tx },
                    },
                );
            }
            // §5.3.6 out of reconciling: done (the incoming manager holds our state),
            // vote commit — only while our window is open, saying how long it stays so.
            (S::OutOfReconciling | S::OutOfTransition, MgrMsg::HandoffReady { new_epoch, tx }) => {
                let open = self.out_deadline.filter(|d| *d > ctx.now);
                if let Some(d) = open.filter(|_| {
                    Some(from) == self.new_mgr
                        && new_epoch == self.next_epoch()
                        && self.out_tx == Some(tx)
                }) {
                    self.state = S::OutOfTransition;
                    let within = d.saturating_since(ctx.now);
                    let msg = MgrMsg::HandoffVote {
                        new_epoch,
                        tx,
                        within,
                    };
                    ctx.send(
                        from,
                        Msg::Mgr {
                            store: self.store,
                            msg,
                        },
                    );
                }
            }
            (
                S::IntoReconciling,
                MgrMsg::HandoffVote {
                    new_epoch,
                    tx: id,
                    within,
                },
            ) => {
                if let Some(tx) = self
                    .tx
                    .as_mut()
                    .filter(|t| t.new_epoch == new_epoch && t.id == id && t.await_mgr == Some(from))
                {
                    tx.await_mgr = None;
                    // The vote left after our HandoffReady: counted from the ready's
                    // sending, less the drift bound, the outgoing manager still waits.
                    let by = (tx.begun + within).saturating_sub(ctx.cfg.timing.clock_drift);
                    tx.deadline = tx.deadline.min(by);
                    self.check_votes(ctx);
                }
            }
            // §5.3.6 out of transition: commit tx
            (S::OutOfTransition, MgrMsg::HandoffCommit { new_epoch, tx }) => {
                if Some(from) == self.new_mgr
                    && new_epoch == self.next_epoch()
                    && self.out_tx == Some(tx)
                {
                    self.newly_awake(ctx);
                    self.forwarding = Some(from);
                }
            }
            // §5.3.6 out of transition: abort tx (or refused before the vote)
            (S::OutOfReconciling | S::OutOfTransition, MgrMsg::HandoffAbort { new_epoch, tx }) => {
                if Some(from) == self.new_mgr
                    && new_epoch == self.next_epoch()
                    && self.out_tx == Some(tx)
                {
                    self.out_tx = None;
                    self.new_mgr = None;
                    self.out_deadline = None;
                    let expiry = ctx.now + ctx.cfg.timing.abort_window;
                    for c in self.live() {
                        self.chunkfail.insert(c, expiry);
                    }
                    self.state = S::Manager;
                    self.stable_since = ctx.now;
                    self.policy.backoff_until = ctx.now + ctx.cfg.timing.lease;
                }
            }
            _ => {}
        }
    }

    // ---- the access protocol (test payload) ---------------------------------------

    /// Whether changes are in flight or queued (layout changes wait for quiet).
    fn busy(&self) -> bool {
        self.inflight.is_some() || !self.queue.is_empty()
    }

    /// A transition asked for while busy waits until the batches under way are done
    /// (new client requests meanwhile are answered `Unavailable`, as during the
    /// transition itself), for a few acknowledgement timeouts at most.
    fn defer(&mut self, ctx: &mut Ctx<'_>, d: Deferred) {
        let until = ctx.now + ctx.cfg.timing.ack_timeout * 4;
        self.policy.deferred = Some((d, until));
    }

    /// Start the deferred transition if the manager is idle now (or drop it if its time
    /// passed).
    fn start_deferred(&mut self, ctx: &mut Ctx<'_>) {
        match &self.policy.deferred {
            Some((_, until)) if *until <= ctx.now => self.policy.deferred = None,
            Some(_) if self.state == MgrState::Manager && !self.busy() => {
                match self.policy.deferred.take().map(|d| d.0) {
                    Some(Deferred::Relayout(md)) => {
                        self.relayout(ctx, md);
                    }
                    Some(Deferred::Migrate(to)) => {
                        self.migrate(ctx, to);
                    }
                    None => {}
                }
            }
            _ => {}
        }
    }

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
        let margin = ctx.cfg.timing.clock_drift * 2;
        let held: BTreeSet<ChunkId> = self
            .live()
            .into_iter()
            .filter(|c| self.chunkfail.get(c).is_some_and(|t| ctx.now + margin < *t))
            .collect();
        self.metadata.quorum(&held)
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
        let refused = match self.state {
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
                    .liveness
                    .keep_alive(&self.spec.sessions, session, now)
                    .map(|_| Response::KeptAlive {
                        ttl: self.spec.sessions.open[&session].ttl,
                    })
                    .map_err(|_| ClientError::SessionExpired);
                // The first answer of this epoch waits for the renewal's note
                // (crate::session): the barrier below is the note's change or a later one.
                if r.is_ok() && self.spec.sessions.open[&session].renewed < self.epoch {
                    self.submit_op(ctx, StoreOp::SessionRenewed { session }, Vec::new());
                }
                return self.after_barrier(ctx, client, req_id, r);
            }
            Request::CloseSession { session, .. } => {
                if !self.spec.sessions.open.contains_key(&session) {
                    return reply(ctx, Err(ClientError::SessionExpired));
                }
                self.liveness.expiring.insert(session);
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
                if !self.liveness.alive(session, now) {
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
                if !self.liveness.alive(session, now) {
                    return reply(ctx, Err(ClientError::SessionExpired));
                }
                release_op(session, request_id, name, now)
            }
            Request::ReleaseFenced {
                session,
                request_id,
                name,
                token,
                ..
            } => {
                if !self.liveness.alive(session, now) {
                    return reply(ctx, Err(ClientError::SessionExpired));
                }
                let fence = crate::objects::Fence {
                    lock: name.clone(),
                    token,
                };
                StoreOp::Fenced {
                    fence,
                    op: Box::new(release_op(session, request_id, name, now)),
                }
            }
            Request::Holders { name, .. } => {
                let r = self
                    .data
                    .table
                    .locks
                    .holders(&name)
                    .map(Response::Holders)
                    .map_err(|e| ClientError::InvalidName(e.to_string()));
                return self.after_barrier(ctx, client, req_id, r);
            }
            Request::Object { req, .. } => {
                return self.object_request(ctx, client, req_id, req);
            }
            Request::LocksUnder { prefix, .. } => {
                let r = self
                    .data
                    .table
                    .locks
                    .locks_under(&prefix)
                    .map(Response::Locks)
                    .map_err(|e| ClientError::InvalidName(e.to_string()));
                return self.after_barrier(ctx, client, req_id, r);
            }
        };
        self.submit(ctx, op, client, req_id);
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
        self.spec
            .locks
            .plant_skip_conflicts(ctx.cfg.planted.skip_conflict_check);
        self.spec
            .locks
            .plant_ignore_cover(ctx.cfg.planted.ignore_cover);
        let result = self.spec.execute(version, &op);
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
    fn try_complete(&mut self, ctx: &mut Ctx<'_>) {
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
        self.share_spec(ctx);
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
    /// the committed ones: they hold the same. Every [`crate::io::SHARE_TABLES_EVERY`]
    /// batches `spec` takes `data`'s tables again (an O(1) clone of persistent maps),
    /// so the two share their nodes instead of drifting into two copies of the store.
    /// Not with a planted lock-table bug, which acts on `spec` only.
    fn share_spec(&mut self, ctx: &Ctx<'_>) {
        let planted = ctx.cfg.planted.skip_conflict_check || ctx.cfg.planted.ignore_cover;
        let pending = !self.queue.is_empty() || self.inflight.is_some();
        if self.unshared < crate::io::SHARE_TABLES_EVERY || pending || planted {
            return;
        }
        self.unshared = 0;
        self.spec = self.data.table.clone();
    }

    /// Time-driven changes: expire sessions past their deadline, and let the lock table
    /// act on its deadlines (wait timeouts, lock-delays).
    fn lock_timers(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        // The lock table's deadlines are store times (crate::time::StoreClock).
        let at = self.store_now(now);
        for session in self.liveness.due(now) {
            let op = StoreOp::SessionEnd {
                session,
                expired: true,
                at,
            };
            self.submit_op(ctx, op, Vec::new());
        }
        // At most one tick per instant: a deadline falling exactly on `at` is handled
        // by the next tick, a microsecond later.
        if self.spec.locks.next_deadline().is_some_and(|t| t <= at) && at > self.lock_tick_at {
            self.lock_tick_at = at;
            let op = StoreOp::Lock {
                op: LockOp::Tick,
                at,
            };
            self.submit_op(ctx, op, Vec::new());
        }
    }

    // ---- timers ------------------------------------------------------------------

    /// Earliest timer.
    pub fn next_timeout(&self) -> Option<Instant> {
        use crate::time::earliest;
        let mut t = None;
        match self.state {
            MgrState::Manager | MgrState::GatheringChunks | MgrState::GatheringLeases => {
                t = earliest(t, self.chunkfail.values().min().copied());
                t = earliest(t, self.timeout.values().min().copied());
            }
            _ => {}
        }
        t = earliest(t, self.tx.as_ref().map(|x| x.deadline));
        t = earliest(t, self.out_deadline);
        t = earliest(t, self.inflight.as_ref().map(|b| b.deadline));
        t = earliest(t, self.objects_next_timeout());
        if self.state == MgrState::Manager {
            // outside policies run periodically while managing
            t = earliest(t, Some(self.stable_since));
            t = earliest(t, self.policy.deferred.as_ref().map(|d| d.1));
            t = earliest(t, self.liveness.next_deadline());
            t = earliest(
                t,
                self.spec
                    .locks
                    .next_deadline()
                    .map(|d| d.max(self.lock_tick_at + std::time::Duration::from_micros(1)))
                    .map(|d| self.local_at(d)),
            );
        }
        t
    }

    /// Fire due timers.
    pub fn on_tick(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        if self.tx.as_ref().is_some_and(|t| t.deadline <= now) {
            self.abort_tx(ctx);
        }
        let out = matches!(
            self.state,
            MgrState::OutOfReconciling | MgrState::OutOfTransition
        );
        if out && self.out_deadline.is_some_and(|t| t <= now) {
            // Tenure: the incoming manager never answered; step down and let the chunks
            // regenerate (resuming could run beside a committed successor).
            let fwd = self.new_mgr;
            self.newly_awake(ctx);
            self.forwarding = fwd;
        }
        // SafeTalk: chunks that did not answer within the ack timeout are failed; the
        // manager goes on only while quorum and coverage hold (mark_failed).
        // Tenure: while this device's own chunk has not accepted either, the device is
        // slow (its disk, its CPU), not the peers: wait up to the longest ack timeout
        // before blaming any chunk.
        let t = &ctx.cfg.timing;
        let longest = t.ack_timeout_longest();
        let me = ctx.me();
        if let Some(b) = self.inflight.as_mut().filter(|b| b.deadline <= now)
            && b.waiting.iter().any(|c| c.device == me)
            && b.deadline < b.sent + longest
        {
            b.deadline = b.sent + longest;
        }
        if let Some(b) = self.inflight.as_ref().filter(|b| b.deadline <= now) {
            // Tenure: a chunk whose failure would cost the store its quorum or coverage
            // is given up to one lease from the batch's sending (and no longer than its
            // lease to this manager, `chunkfail`, §5.3.7) before it is blamed: a manager
            // without quorum steps down, and the store then waits for that same chunk to
            // regenerate. A chunk slowed by a failover elsewhere (its device taking over
            // a dead one's stores) answers late, not never; a lost ACCEPT is not sent
            // again, so the wait stays bounded. The chunk whose lease to this manager ends
            // first (renewed longest ago: a dead one stopped renewing) is blamed first,
            // so a dead one is marked and a slow one spared; this device's own chunk last.
            let (sent, lease) = (b.sent, t.lease);
            let mut silent: Vec<ChunkId> = b.waiting.iter().copied().collect();
            silent.sort_by_key(|c| (c.device == me, self.chunkfail.get(c).copied()));
            let mut spared_until: Option<Instant> = None;
            for c in silent {
                if self.state != MgrState::Manager {
                    return;
                }
                let mut rest = self.live();
                rest.remove(&c);
                let spare = (self.chunkfail.get(&c)).map(|&lease_end| lease_end.min(sent + lease));
                if let Some(until) = spare
                    && until > now
                    && !self.quorum_and_coverage(ctx, &rest)
                {
                    spared_until = Some(spared_until.map_or(until, |s: Instant| s.min(until)));
                    continue;
                }
                if !self.mark_failed(ctx, c) {
                    return;
                }
            }
            if let (Some(until), Some(b)) = (spared_until, self.inflight.as_mut()) {
                b.deadline = until;
            }
        }
        let due_timeouts: Vec<ChunkId> = self
            .timeout
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(c, _)| *c)
            .collect();
        for c in due_timeouts {
            self.timeout.remove(&c);
            match self.state {
                // §5.3.10 timeout(chunk)
                MgrState::GatheringChunks => {
                    self.outstanding.remove(&c);
                    self.check_gathered(ctx);
                }
                // Tenure: transfer never acknowledged (or, §5.3.10 timeout(chunk), an
                // acquire of a joined layout's chunk never answered)
                MgrState::GatheringLeases => {
                    self.renewal_iffy.remove(&c);
                    self.outstanding.remove(&c);
                    self.check_leases_gathered(ctx);
                }
                _ => {}
            }
        }
        let due_fails: Vec<ChunkId> = self
            .chunkfail
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(c, _)| *c)
            .collect();
        for c in due_fails {
            if self.chunkfail.get(&c).is_none_or(|t| *t > now) {
                continue;
            }
            match self.state {
                // §5.3.7 chunkfail(chunk)
                MgrState::Manager => {
                    self.chunkfail.remove(&c);
                    if !self.failed.contains(&c) {
                        if !self.mark_failed(ctx, c) {
                            return;
                        }
                    } else {
                        self.recovered.remove(&c);
                    }
                }
                // §5.3.10 chunkfail(c)
                MgrState::GatheringChunks => {
                    self.chunkfail.remove(&c);
                    self.won.remove(&c);
                }
                // §5.3.12 chunkfail(chunk)
                MgrState::GatheringLeases => {
                    self.chunkfail.remove(&c);
                    self.renewal_iffy.remove(&c);
                    self.won.remove(&c);
                    if !self.quorum_and_coverage(ctx, &self.won) {
                        self.newly_awake(ctx);
                        return;
                    }
                    self.check_leases_gathered(ctx);
                }
                _ => {}
            }
        }
        if self.state == MgrState::Manager {
            self.start_deferred(ctx);
        }
        if self.state == MgrState::Manager {
            self.lock_timers(ctx);
        }
        if self.state == MgrState::Manager && self.stable_since <= now {
            self.run_policies(ctx);
        }
        self.objects_tick(ctx);
    }

    // ---- outside policies (seed 000 §3) -------------------------------------------

    /// The outside policies this manager runs for itself; the cluster-wide ones
    /// (replacing failed chunks, spreading managers) are the coordinator's (DESIGN §6,
    /// [`crate::election::coordinator`]), which this manager reports to ([`Self::report`]).
    fn run_policies(&mut self, ctx: &mut Ctx<'_>) {
        let t = &ctx.cfg.timing;
        let now = ctx.now;
        // Check again after a while.
        self.stable_since = now + t.renewal_period;
        if !ctx.cfg.run_policies || now < self.policy.backoff_until {
            return;
        }
        if let Some((_, _, deadline)) = self.policy.creating
            && deadline <= now
        {
            self.policy.creating = None;
        }
        // A recovered chunk rejoins through a relayout onto the same layout.
        if !self.recovered.is_empty()
            && self.policy.creating.is_none()
            && self.policy.deferred.is_none()
            && self.state == MgrState::Manager
        {
            let md = self.metadata.clone();
            self.relayout(ctx, md);
        }
    }

    /// This manager's report to the coordinator (none unless it manages the store).
    pub fn report(&self, now: Instant) -> Option<crate::election::coordinator::StoreReport> {
        if self.state != MgrState::Manager {
            return None;
        }
        Some(crate::election::coordinator::StoreReport {
            store: self.store,
            epoch: self.epoch,
            chunks: self.metadata.chunks.iter().copied().collect(),
            failed: (self.failed.iter())
                .map(|c| {
                    let at = self.policy.failed_at.get(c).copied().unwrap_or(now);
                    (*c, now.saturating_since(at))
                })
                .collect(),
            managing_for: now.saturating_since(self.entered_at),
            busy: self.tx.is_some()
                || self.policy.creating.is_some()
                || self.policy.deferred.is_some()
                || !self.recovered.is_empty()
                || now < self.policy.backoff_until,
        })
    }

    /// Ask `device` for a new chunk to replace `old`.
    pub fn request_chunk(&mut self, ctx: &mut Ctx<'_>, old: ChunkId, device: DeviceId) {
        if self.state != MgrState::Manager {
            return;
        }
        self.policy.tried.insert(device);
        self.policy.creating = Some((old, device, ctx.now + ctx.cfg.timing.msg_timeout * 4));
        let msg = Msg::Policy(PolicyMsg::CreateChunk {
            store: self.store,
            mgr: ctx.me(),
            epoch: self.epoch,
            lease: ctx.cfg.timing.lease,
        });
        ctx.send(device, msg);
    }

    /// A chunk requested by [`Manager::request_chunk`] exists: relayout onto it.
    pub fn chunk_created(&mut self, ctx: &mut Ctx<'_>, chunk: ChunkId) {
        let Some((old, device, _)) = self.policy.creating else {
            return;
        };
        if device != chunk.device || self.state != MgrState::Manager {
            return;
        }
        self.policy.creating = None;
        self.policy.tried.clear();
        self.recovered.insert(chunk);
        self.chunkfail.insert(chunk, ctx.now + ctx.cfg.timing.lease);
        let mut md = self.metadata.clone();
        md.chunks.remove(&old);
        md.chunks.insert(chunk);
        self.relayout(ctx, md);
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
