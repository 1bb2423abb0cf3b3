//! The manager state machine (seed 000 §5), including the outside policies a manager runs
//! for its own store (seed 000 §3: replace a failed chunk by relayout, migrate the manager
//! to the store's preferred device).
//!
//! A manager keeps no persistent state: a crash erases it (§5.3.2) and the chunks
//! regenerate a manager through `help`. Regeneration is the sequence gathering chunks →
//! gathered → gathering leases → recovery reconciling → recovery transition → manager.
//!
//! Where the seed leaves room, Tenure decides (each marked `Tenure:` below):
//! - **commit protocol**: the transition manager (the new epoch's manager) sends `epoch
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
//!
//! The role's state is a [`Stage`]: each state carries the variables only it uses (a
//! regenerating manager its [`Regeneration`], a migrating one where the role goes or came
//! from, a relayout its new layout), so leaving a state drops them.
//!
//! The role is split by what it does: `events` (messages from chunks, one arm per row of
//! the seed's table), `regeneration` (gathering, recovery, the transition commit),
//! `migration` (handoff and relayout), `host` (replication: group commit, batches,
//! barriers), `requests` (client requests), `timers` and `policy` (the outside
//! policies for this store). Objects are in [`crate::objects::mgr`].

// Each match arm is one (state, event) row of the seed; a row's condition stays inside
// its arm so the code reads like the seed's pseudo-code.
#![allow(clippy::collapsible_match)]

use crate::ctx::Ctx;
use crate::data::{StoreData, StoreOp, Tables};
use crate::error::ClientError;
use crate::ids::{ChunkId, DeviceId, Epoch, StoreId};
use crate::io::Output;
use crate::io::observation::EpochCause;
use crate::io::observation::Observation;
use crate::layout::{ManagerView, Metadata, MgrState};
use crate::lockctl::LockOp;
use crate::msg::{Msg, ToChunk};
use crate::session::Liveness;
use crate::time::Instant;
use std::collections::{BTreeMap, BTreeSet};

mod access;
mod events;
mod host;
mod migration;
mod objects;
mod policy;
mod regeneration;
mod rejoin;
pub use rejoin::RejoinMiss;
mod requests;
mod stage;
mod timers;

pub use access::StoreAccess;
pub use host::{Batch, Completed, Queued, StoreHost};
pub use migration::EarlyVote;
pub use policy::{Deferred, PolicyState};
pub use regeneration::Regeneration;
pub use requests::Clients;
pub use stage::{Incoming, Outgoing, Stage};

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
    /// Reconciliation inputs so far (the voters' replicas, whole or named, and this
    /// manager's own), each with the epoch its holder last committed.
    pub inputs: Vec<(Epoch, crate::data::StoreInput)>,
    /// The chunk each input came from (none: this manager's own), in the same order.
    pub sources: Vec<Option<ChunkId>>,
    /// Chunks asked for their whole state ([`crate::msg::SendState`]).
    pub asked: BTreeSet<ChunkId>,
    /// Migration: the outgoing manager's vote is still awaited.
    pub await_mgr: Option<DeviceId>,
    /// When this manager began the attempt (migration: sent its `HandoffReady`).
    pub begun: Instant,
    /// Abort if not complete by then.
    pub deadline: Instant,
}

impl Tx {
    /// A transition's inputs before any vote: this manager's own state, with the epoch
    /// it last committed.
    pub fn own_input(committed: Epoch, data: StoreData) -> Vec<(Epoch, crate::data::StoreInput)> {
        vec![(committed, crate::safetalk::Input::Whole(data))]
    }

    /// Count chunk `c`'s vote. A participant's first vote counts; a whole vote replaces
    /// its summary (the answer to [`crate::msg::SendState`]). Returns whether anything
    /// changed.
    pub fn vote(&mut self, c: ChunkId, committed: Epoch, input: crate::data::StoreInput) -> bool {
        use crate::safetalk::Input;
        if !self.participants.contains(&c) {
            return false;
        }
        if self.votes.insert(c) {
            self.inputs.push((committed, input));
            self.sources.push(Some(c));
            return true;
        }
        let Some(i) = self.sources.iter().position(|s| *s == Some(c)) else {
            return false;
        };
        match (&self.inputs[i].1, input) {
            (Input::Summary(_), whole @ Input::Whole(_)) => {
                self.inputs[i] = (committed, whole);
                true
            }
            _ => false,
        }
    }
}

/// One device's manager role for one store: the variables of §5.1.
#[derive(Clone, Debug)]
pub struct Manager {
    /// The store.
    pub store: StoreId,
    /// State, with the variables only that state uses ([`Stage`]).
    pub stage: Stage,
    /// Forwarding address: where the role went when it migrated out. It outlives the
    /// migration (a reset keeps it), so chunks that ask are pointed at the new manager.
    pub forwarding: Option<DeviceId>,
    /// Epoch number.
    pub epoch: Epoch,
    /// Metadata.
    pub metadata: Metadata,
    /// Failed chunks.
    pub failed: BTreeSet<ChunkId>,
    /// Failed chunks that have since recovered (hold a recovery lease from us).
    pub recovered: BTreeSet<ChunkId>,
    /// chunkfail(c) timers.
    pub chunkfail: BTreeMap<ChunkId, Instant>,
    /// timeout(c) timers.
    pub timeout: BTreeMap<ChunkId, Instant>,
    /// Tenure: until when (by this device's clock) each chunk refuses every other
    /// manager, at least, as its ACCEPTED of this epoch reported (`lease_left`, counted
    /// from when the batch it answered was sent). Reads are answered under these leases
    /// ([`access::read_lease_valid`], DESIGN §4, reads); emptied whenever the chunks
    /// may have left this manager's regular lease (a new epoch, an aborted relayout).
    pub read_lease: BTreeMap<ChunkId, Instant>,
    /// Tenure: the epoch transition this manager coordinates.
    pub tx: Option<Tx>,
    /// Tenure: the newest epoch a chunk reported prepared above ours while we manage
    /// (an attempt that aborted, lingering at a chunk that missed the abort). A chunk
    /// never votes twice for an epoch number, so the next transition starts above it.
    pub prepared_floor: Epoch,
    /// Tenure: transition attempts already committed or aborted here (replays of their
    /// messages change nothing). Survives state resets; lost on a crash.
    pub finished: BTreeSet<u64>,
    /// Replication of the store: committed and speculative tables, queued changes, the
    /// batch in flight.
    pub host: StoreHost,
    /// What this manager knows of its clients: session liveness, waiting acquires.
    pub clients: Clients,
    /// The store's time ([`crate::time::StoreClock`]): what every change is stamped with
    /// and the tables' times are read on.
    /// None until this manager first manages the store.
    pub clock: Option<crate::time::StoreClock>,
    /// When the outside policies next run.
    pub stable_since: Instant,
    /// When this manager last entered the manager state (or its layout last changed).
    pub entered_at: Instant,
    /// Outside policies.
    pub policy: PolicyState,
    /// Objects: complete chunks, reads, collectors, watches.
    pub objects: crate::objects::mgr::ObjMgr,
    /// Tenure: what rejoining chunks hold, and earlier tables to patch them from.
    pub rejoin: rejoin::Rejoin,
}

impl Manager {
    /// A role in the none state.
    pub fn new(store: StoreId) -> Manager {
        Manager {
            store,
            stage: Stage::default(),
            forwarding: None,
            epoch: Epoch(0),
            metadata: Metadata::default(),
            failed: BTreeSet::new(),
            recovered: BTreeSet::new(),
            chunkfail: BTreeMap::new(),
            timeout: BTreeMap::new(),
            read_lease: BTreeMap::new(),
            tx: None,
            prepared_floor: Epoch::default(),
            finished: BTreeSet::new(),
            host: StoreHost::default(),
            clients: Clients::default(),
            clock: Default::default(),
            stable_since: Instant(0),
            entered_at: Instant(0),
            policy: PolicyState::default(),
            objects: Default::default(),
            rejoin: Default::default(),
        }
    }

    /// The role's state (§5.1), by name.
    pub fn state(&self) -> MgrState {
        self.stage.name()
    }

    /// What regeneration works with. Only the rows of §5.3.10–14 ask for it.
    ///
    /// # Panics
    /// Outside those states.
    pub(super) fn regen(&self) -> &Regeneration {
        (self.stage.regeneration()).expect("regeneration data outside regeneration")
    }

    /// [`Self::regen`], to change.
    pub(super) fn regen_mut(&mut self) -> &mut Regeneration {
        (self.stage.regeneration_mut()).expect("regeneration data outside regeneration")
    }

    /// The layouts prepared for the newest epoch above ours that regeneration joined
    /// (none outside regeneration: the recovery commit clears them).
    pub(super) fn joint(&self) -> &[crate::layout::Prepared] {
        self.stage.regeneration().map_or(&[], |r| &r.joint)
    }

    /// Read-only view.
    pub fn view(&self) -> ManagerView {
        ManagerView {
            store: self.store,
            state: self.state(),
            epoch: self.epoch,
            metadata: self.metadata.clone(),
            failed: self.failed.clone(),
        }
    }

    /// §5.3.2 newly awake: erase all state and go to none. Any writes still waiting
    /// are answered `Unavailable` (they were not acknowledged).
    pub fn newly_awake(&mut self, ctx: &mut Ctx<'_>) {
        if matches!(
            self.state(),
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

    pub(super) fn fail_writes(&mut self, ctx: &mut Ctx<'_>) {
        self.objects_stop(ctx);
        let store = self.store;
        let mut pending = self.host.take_pending();
        for (client, req_id) in self.clients.take_waiters() {
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
    pub(super) fn reset(&mut self) {
        let forwarding = self.forwarding;
        let finished = std::mem::take(&mut self.finished);
        *self = Manager::new(self.store);
        self.forwarding = forwarding;
        self.finished = finished;
    }

    pub(super) fn remember(&mut self, tx: u64) {
        if self.finished.len() >= 256 {
            self.finished.pop_first();
        }
        self.finished.insert(tx);
    }

    pub(super) fn to_chunk(&self, ctx: &mut Ctx<'_>, chunk: ChunkId, msg: ToChunk) {
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
    pub(super) fn all_chunks(&self) -> BTreeSet<ChunkId> {
        let mut s = self.metadata.chunks.clone();
        for j in self.joint() {
            s.extend(j.metadata.chunks.iter().copied());
        }
        s
    }

    /// Quorum and coverage of `set` (joint with every newer prepared layout, if any).
    pub(super) fn quorum_and_coverage(&self, ctx: &Ctx<'_>, set: &BTreeSet<ChunkId>) -> bool {
        if ctx.cfg.planted.broken_quorum {
            return !set.is_empty();
        }
        let ok = |m: &Metadata| m.quorum(set) && m.coverage(set);
        ok(&self.metadata) && self.joint().iter().all(|j| ok(&j.metadata))
    }

    /// The chunks of the layout not failed.
    pub(crate) fn live(&self) -> BTreeSet<ChunkId> {
        access::live_chunks(&self.metadata, &self.failed)
    }

    pub(super) fn acquire(&mut self, ctx: &mut Ctx<'_>, c: ChunkId) {
        let msg = ToChunk::Acquire {
            lease: ctx.cfg.timing.lease,
            mgr: ctx.me(),
            epoch: self.epoch,
        };
        self.to_chunk(ctx, c, msg);
        self.timeout.insert(c, ctx.now + ctx.cfg.timing.msg_timeout);
        self.regen_mut().outstanding.insert(c);
    }

    /// The store's time at local time `now` ([`crate::time::StoreClock`]).
    pub fn store_now(&self, now: Instant) -> Instant {
        access::store_time(self.clock, &self.host.speculative, now)
    }

    /// The local time at which the store's time reaches `t`.
    pub fn local_at(&self, t: Instant) -> Instant {
        self.clock.map_or(t, |c| c.local(t))
    }

    /// Chunk `c` refuses every other manager until at least `until` (by this manager's
    /// clock, give or take `δ_c`): keep the later bound ([`Self::read_lease`]).
    pub(super) fn extend_read_lease(&mut self, c: ChunkId, until: Instant) {
        let t = self.read_lease.entry(c).or_insert(until);
        *t = (*t).max(until);
    }

    pub(super) fn renew(&mut self, ctx: &mut Ctx<'_>, c: ChunkId) {
        let lease = ctx.cfg.timing.lease;
        let epoch = self.epoch;
        let sent = Some(ctx.now);
        self.to_chunk(ctx, c, ToChunk::Renewal { epoch, lease, sent });
        self.chunkfail.insert(c, ctx.now + lease);
        if ctx.cfg.planted.read_lease_from_sent_renewal {
            // Planted: a renewal merely sent taken as proof of the lease.
            self.extend_read_lease(c, ctx.now + (lease - ctx.cfg.timing.clock_drift));
        }
    }

    pub(super) fn enter_manager(&mut self, ctx: &mut Ctx<'_>, cause: EpochCause) {
        self.stage = Stage::Manager;
        self.stable_since = ctx.now;
        self.entered_at = ctx.now;
        self.read_lease.clear();
        self.host.begin_epoch();
        // Store time reads on from the newest the tables hold (and, for a manager that
        // goes on managing across a relayout, from its own reading if that is later).
        let held = (self.clock.map(|c| c.read(ctx.now))).map_or(self.host.speculative.clock, |t| {
            t.max(self.host.speculative.clock)
        });
        self.clock = Some(crate::time::StoreClock::start(held, ctx.now));
        let grace = ctx.cfg.timing.session_grace;
        if cause == EpochCause::Relayout {
            self.clients
                .liveness
                .relayout(&self.host.speculative.sessions, ctx.now, grace);
        } else {
            let none = Default::default();
            let seen = ctx.epochs.get(&self.store).unwrap_or(&none);
            self.clients.liveness = if ctx.cfg.planted.takeover_ignores_renewal {
                let mut sessions = self.host.speculative.sessions.clone();
                sessions.open = (sessions.open.into_iter())
                    .map(|(id, mut r)| {
                        r.renewed = Default::default();
                        (id, r)
                    })
                    .collect();
                Liveness::take_over(&sessions, ctx.now, grace, seen)
            } else {
                Liveness::take_over(&self.host.speculative.sessions, ctx.now, grace, seen)
            };
        }
        if ctx.cfg.planted.expire_without_grace {
            self.clients.liveness.plant_no_grace(ctx.now);
        }
        self.clients.waiters.clear();
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
    pub(super) fn mark_failed(
        &mut self,
        ctx: &mut Ctx<'_>,
        c: ChunkId,
        why: crate::io::observation::FailedWhy,
    ) -> bool {
        self.failed.insert(c);
        // The chunk has accepted every change of the state as it is now (each was
        // confirmed only once every live chunk had): kept, to patch it when it rejoins.
        let d = &self.host.data;
        (self.rejoin).keep(d.stamp, d.confirmed, &d.table, ctx.now);
        self.objects.complete.remove(&c);
        self.policy.failed_at.entry(c).or_insert(ctx.now);
        ctx.observe(Observation::ChunkFailed {
            store: self.store,
            chunk: c,
            why,
        });
        if self.quorum_and_coverage(ctx, &self.live()) {
            // Batches no longer wait for a chunk whose lease has expired.
            self.host.forget_chunk(c);
            self.try_complete(ctx);
            true
        } else {
            self.newly_awake(ctx);
            false
        }
    }
}
