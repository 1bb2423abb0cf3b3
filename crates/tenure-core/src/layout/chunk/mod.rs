//! The chunk state machine (seed 000 §4).
//!
//! A chunk holds a store's persistent state ([`ChunkPersist`]) and one of the nine states
//! of §4.1. It serves the access protocol only under a regular lease for its current
//! epoch, and never trusts a lease past `expiry - δ_c` on its own clock. When its lease
//! expires it asks directors for `help` until some manager acquires it (§4.2.6).
//!
//! Where the seed leaves room, Tenure decides (each marked `Tenure:` below):
//! - the epoch transition is the SafeTalk prepare: the chunk votes only for its current
//!   lease manager, only for an epoch above any it already voted for, and logs the vote
//!   durably (`prepared`) before sending it; the log is reported in `ack`s so a later
//!   regeneration never reuses an epoch number that may have committed;
//! - a chunk waiting in a transition state for longer than `transition_wait` gives up on
//!   its manager and enters the no-lease state (the seed assumes the commit protocol
//!   terminates; this is how it terminates when the transition manager dies);
//! - a no-lease chunk acquired for an older epoch answers `ack-conditional` with its
//!   newer epoch instead of `nack`, so the manager can move forward (§5.3.10);
//! - a recovery lease belongs to the epoch it was granted in (`lease_epoch`), which differs
//!   from the chunk's epoch after an `ack-conditional`; its manager may renew, re-acquire
//!   or release it at that epoch or a later one (it moves forward during regeneration).

// Each match arm is one (state, event) row of the seed; a row's condition stays inside
// its arm so the code reads like the seed's pseudo-code.
#![allow(clippy::collapsible_match)]

use crate::config::precedence;
use crate::ctx::Ctx;
use crate::ids::{ChunkId, DeviceId, Epoch, StoreId};
use crate::io::observation::Observation;
use crate::io::persist::ChunkPersist;
use crate::io::persist::PersistOp;
use crate::layout::{ChunkState, ChunkView, LeaseType, Metadata, Prepared};
use crate::msg::{Msg, ToChunk, ToManager};
use crate::time::Instant;

mod serving;
mod transition;

/// The transient epoch transition log of §4.1 (`epoch transition log`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransitionLog {
    /// Epoch the transition starts from.
    pub old_epoch: Epoch,
    /// Epoch it commits to.
    pub new_epoch: Epoch,
    /// Layout of the new epoch.
    pub metadata: Metadata,
    /// Manager of the new epoch, which runs the commit (the transition manager).
    pub new_mgr: DeviceId,
    /// Identity of the transition attempt.
    pub tx: u64,
}

/// One chunk: persistent state plus the volatile variables of §4.1.
#[derive(Clone, Debug)]
pub struct Chunk {
    /// Persistent state (bold face in the seed); changed only together with a `Persist`.
    pub record: ChunkPersist,
    /// State (volatile; reset to newly awake at restart).
    pub state: ChunkState,
    /// When the current lease expires (lease manager's clock).
    pub lease_expiry: Option<Instant>,
    /// When to ask for renewal.
    pub lease_renewal: Option<Instant>,
    /// The manager that granted the current lease.
    pub lease_mgr: Option<DeviceId>,
    /// Tenure: the epoch the current lease was granted in.
    pub lease_epoch: Epoch,
    /// Epoch transition log.
    pub log: Option<TransitionLog>,
    /// Managers to try during regeneration (popped in decreasing precedence).
    pub mgr_attempt_queue: Vec<DeviceId>,
    /// No lease: when to send the next `help`.
    pub help_at: Option<Instant>,
    /// `help` messages sent since the chunk entered the no-lease state.
    pub helps_sent: u32,
    /// Tenure: transition states give up on the transition manager at this time.
    pub transition_deadline: Option<Instant>,
    /// Tenure: recently finished transition attempts (a replayed prepare is refused).
    pub finished: Vec<u64>,
    /// Object blocks held, and the background repair.
    pub blocks: crate::objects::blocks::ChunkBlocks,
    /// Delta persists (`Accept`, `Confirm`) since the whole record was last written.
    pub deltas: u32,
    /// Changes persisted in deltas since the chunk last handed its tables to its
    /// durable copy ([`crate::io::TablesAfter`]).
    pub unshared: u32,
    /// Tenure: after a restart, until when (a lease after booting) the chunk acquires
    /// no lease from a manager other than its last lease manager: it forgot the regular
    /// lease it may have held, which its manager may still be answering reads under
    /// (DESIGN §4, reads). None for a chunk made at bootstrap (it never reported one:
    /// an ACCEPTED leaves only once its record is durable).
    pub boot_hold: Option<Instant>,
    /// Tenure: the last renewal applied under a regular lease: from whom, in which
    /// epoch, and when it was sent by its manager's clock. Echoed in renewal requests to
    /// that manager while the lease it gave runs ([`ToManager::RenewalRequest`]'s
    /// `renewed`; DESIGN §4, reads).
    pub renewal_sent: Option<(DeviceId, Epoch, Instant)>,
    /// Tenure: the tables as the chunk last persisted them, whole or by a delta, or as
    /// its durable copy makes them by confirming as far as the chunk did (an O(1) copy of
    /// persistent maps). While the record's tables are still these, a record persists as
    /// its head ([`PersistOp::PutChunkHead`]).
    pub durable_tables: Option<crate::data::Tables>,
}

impl Chunk {
    /// A chunk loaded from stable storage after a (re)boot: newly awake (§4.2.5), which
    /// immediately moves on to no lease.
    pub fn boot(ctx: &mut Ctx<'_>, p: ChunkPersist) -> Chunk {
        let mut c = Chunk {
            lease_mgr: p.lease_mgr,
            lease_epoch: p.epoch,
            record: p,
            state: ChunkState::NewlyAwake,
            lease_expiry: None,
            lease_renewal: None,
            log: None,
            mgr_attempt_queue: Vec::new(),
            help_at: None,
            helps_sent: 0,
            transition_deadline: None,
            finished: Vec::new(),
            deltas: 0,
            unshared: 0,
            blocks: Default::default(),
            boot_hold: Some(ctx.now + ctx.cfg.timing.lease),
            renewal_sent: None,
            durable_tables: None,
        };
        c.durable_tables = Some(c.record.data.table.clone());
        c.newly_awake(ctx);
        c
    }

    /// A chunk just created for `store` by an outside policy, already holding a recovery
    /// lease from `mgr` at `epoch` so the relayout that adds it can reach it.
    pub fn created(
        ctx: &mut Ctx<'_>,
        id: ChunkId,
        store: StoreId,
        mgr: DeviceId,
        epoch: Epoch,
        expiry: Instant,
    ) -> Chunk {
        let p = ChunkPersist {
            id,
            store,
            epoch,
            metadata: Metadata::default(),
            lease_mgr: Some(mgr),
            prepared: None,
            known: None,
            data: Default::default(),
        };
        ctx.persist(PersistOp::PutChunk(Box::new(p.clone())));
        let durable_tables = Some(p.data.table.clone());
        let mut c = Chunk {
            lease_mgr: Some(mgr),
            lease_epoch: epoch,
            record: p,
            state: ChunkState::RecoveryLease,
            lease_expiry: Some(expiry),
            lease_renewal: None,
            log: None,
            mgr_attempt_queue: Vec::new(),
            help_at: None,
            helps_sent: 0,
            transition_deadline: None,
            finished: Vec::new(),
            deltas: 0,
            unshared: 0,
            blocks: Default::default(),
            boot_hold: None,
            renewal_sent: None,
            durable_tables,
        };
        c.lease_renewal = Some(ctx.now + ctx.cfg.timing.renewal_period);
        c
    }

    /// This chunk's id.
    pub fn id(&self) -> ChunkId {
        self.record.id
    }

    /// Read-only view.
    pub fn view(&self) -> ChunkView {
        ChunkView {
            id: self.record.id,
            store: self.record.store,
            state: self.state,
            epoch: self.record.epoch,
            lease_expiry: self.lease_expiry,
            lease_mgr: self.lease_mgr,
        }
    }

    /// Whether the lease may still be trusted at `now` (never past `expiry - δ_c`).
    pub fn lease_valid(&self, ctx: &Ctx<'_>) -> bool {
        self.trusted_until(ctx).is_some_and(|t| ctx.now < t)
    }

    /// Until when the current lease is trusted: `δ_c` before its expiry.
    pub(super) fn trusted_until(&self, ctx: &Ctx<'_>) -> Option<Instant> {
        Some(
            self.lease_expiry?
                .saturating_sub(ctx.cfg.timing.clock_drift),
        )
    }

    fn persist(&mut self, ctx: &mut Ctx<'_>) {
        let table = &self.record.data.table;
        if (self.durable_tables.as_ref()).is_some_and(|d| crate::rows::unchanged(d, table))
            && !ctx.cfg.planted.head_record_loses_rows
        {
            // Only the head changed since the tables were last persisted: the deltas
            // since the last whole record stay, and so does their count.
            ctx.persist(PersistOp::PutChunkHead(Box::new(self.record.head())));
            return;
        }
        if ctx.cfg.planted.head_record_loses_rows && self.durable_tables.is_some() {
            // Planted: the head alone, whatever changed in the tables.
            ctx.persist(PersistOp::PutChunkHead(Box::new(self.record.head())));
            self.durable_tables = Some(self.record.data.table.clone());
            return;
        }
        self.persist_whole(ctx);
    }

    /// Persist the whole record, rows included: it supersedes the deltas before it.
    fn persist_whole(&mut self, ctx: &mut Ctx<'_>) {
        self.deltas = 0;
        self.unshared = 0;
        self.durable_tables = Some(self.record.data.table.clone());
        ctx.persist(PersistOp::PutChunk(Box::new(self.record.clone())));
    }

    /// Persist a SafeTalk change already applied to `self.p` as a delta, or, every
    /// `whole_record_every` deltas ([`crate::config::CHECKPOINT_EVERY`] by default), as the
    /// whole record.
    fn persist_delta(&mut self, ctx: &mut Ctx<'_>, delta: PersistOp) {
        if self.deltas.saturating_add(1) >= ctx.cfg.whole_record_every {
            self.persist_whole(ctx);
        } else {
            self.deltas += 1;
            self.durable_tables = Some(self.record.data.table.clone());
            ctx.persist(delta);
        }
    }

    fn to_mgr(&self, ctx: &mut Ctx<'_>, to: DeviceId, msg: ToManager) {
        ctx.send(
            to,
            Msg::ToManager {
                store: self.record.store,
                chunk: self.record.id,
                msg,
            },
        );
    }

    fn clear_lease(&mut self) {
        self.lease_expiry = None;
        self.lease_renewal = None;
    }

    // ---- state entries -------------------------------------------------------------

    /// §4.2.5 newly awake: clear the log and transient data, queue the last lease
    /// manager, and go to no lease.
    ///
    /// Tenure fills the seed's "(after some delay)": a chunk that crashed holding a vote
    /// it never saw decided (`prepared`) stays newly awake for `transition_wait` before
    /// it asks anyone for help. Its transition manager counts that vote only within
    /// `transition_timeout` of sending the prepare, which is shorter, so once the chunk
    /// moves on the vote can no longer make a layout commit behind a newer regeneration
    /// (found by the simulator: sim seed 46832: a manager of e4 appeared after one of e5).
    pub fn newly_awake(&mut self, ctx: &mut Ctx<'_>) {
        self.state = ChunkState::NewlyAwake;
        self.log = None;
        self.clear_lease();
        self.transition_deadline = None;
        self.help_at = None;
        self.mgr_attempt_queue = self.record.lease_mgr.into_iter().collect();
        if self.record.prepared.is_some() {
            self.transition_deadline = Some(ctx.now + ctx.cfg.timing.transition_wait);
        } else {
            self.enter_no_lease(ctx);
        }
    }

    /// §4.2.6 no lease: on entry, start the help loop.
    fn enter_no_lease(&mut self, ctx: &mut Ctx<'_>) {
        self.state = ChunkState::NoLease;
        self.clear_lease();
        self.log = None;
        self.transition_deadline = None;
        self.helps_sent = 0;
        self.send_help(ctx);
    }

    /// One iteration of the help loop: pop the best queued manager, or (first time round)
    /// the manager the lookup service names (DESIGN §3), or pick a director; send
    /// `help(epoch, metadata)`, and wait long enough for an answer.
    ///
    /// Tenure fills the seed's "an actual design will want to be more clever: attempting
    /// to only contact reachable director nodes": a device this one has heard from before
    /// but not for [`crate::config::Timing::silence`] is passed over (a queued manager that
    /// fell silent is dropped), and directors are tried in the store's precedence order
    /// rather than at random, so every chunk of a store asks the same live device and one
    /// regeneration, not several competing ones, follows a manager's death. The order
    /// turns with every help sent, so every director is still tried; when every device
    /// is silent, every device is a candidate.
    ///
    /// Tenure: while a restarted chunk answers only its last lease manager
    /// (`boot_hold`), it asks only that manager, as long as that device has not fallen
    /// silent: a whole cluster starting again has every chunk's last manager starting
    /// too, and a help it missed while it was still opening its storage would otherwise
    /// send the chunk to a director whose acquire it must leave unanswered until the hold
    /// ends (every store's regeneration waited out the hold, 2 s, at a cluster start).
    fn send_help(&mut self, ctx: &mut Ctx<'_>) {
        let store = self.record.store;
        self.helps_sent += 1;
        self.mgr_attempt_queue.retain(|d| !ctx.silent(*d));
        let hint = ctx.hints.get(&store).copied();
        let held_for = (self.record.lease_mgr).filter(|m| {
            self.boot_hold.is_some_and(|t| ctx.now < t)
                && !ctx.silent(*m)
                && !self.mgr_attempt_queue.contains(m)
        });
        let d = if let Some(m) = held_for {
            m
        } else if let Some(i) = (0..self.mgr_attempt_queue.len())
            .max_by_key(|&i| precedence(store, self.mgr_attempt_queue[i]))
        {
            self.mgr_attempt_queue.swap_remove(i)
        } else if let Some(h) = hint.filter(|h| self.helps_sent == 1 && !ctx.silent(*h)) {
            h
        } else {
            let ranked = ctx.cfg.cluster.ranked_devices(store);
            let live: Vec<DeviceId> = ranked.iter().copied().filter(|d| !ctx.silent(*d)).collect();
            let order = if live.is_empty() { ranked } else { live };
            order[(self.helps_sent as usize - 1) % order.len()]
        };
        let msg = ToManager::Help {
            epoch: self.record.epoch,
            metadata: self.record.metadata.clone(),
        };
        self.to_mgr(ctx, d, msg);
        self.help_at = Some(ctx.now + ctx.cfg.timing.help_wait);
    }

    fn garbage_collect(&mut self, ctx: &mut Ctx<'_>) {
        self.state = ChunkState::GarbageCollect;
        self.clear_lease();
        self.log = None;
        self.help_at = None;
        self.transition_deadline = None;
        ctx.persist(PersistOp::RemoveChunk(self.record.id));
        ctx.observe(Observation::ChunkCollected {
            chunk: self.record.id,
        });
    }

    /// The highest transition this chunk voted for and has not seen committed.
    pub fn highest_prepared(&self) -> Option<Prepared> {
        match (&self.record.prepared, &self.record.known) {
            (Some(a), Some(b)) => Some(if a.new_epoch >= b.new_epoch { a } else { b }.clone()),
            (a, b) => a.clone().or_else(|| b.clone()),
        }
    }

    /// §4.2.7: already held under a recovery lease by another manager (or epoch).
    fn nack_recovery(&self, ctx: &mut Ctx<'_>, to: DeviceId) {
        let msg = ToManager::Nack {
            epoch: self.record.epoch,
            mgr: self.lease_mgr,
            lease: LeaseType::Recovery,
        };
        self.to_mgr(ctx, to, msg);
    }

    fn send_ack(&mut self, ctx: &mut Ctx<'_>, mgr: DeviceId, epoch: Epoch) {
        // Tenure (DESIGN "State at scale"): the table held, named first, so that a
        // manager this chunk rejoins can bring it up to date by a patch.
        if ctx.rejoin_patches
            && let Some(summary) = self.record.data.summary()
        {
            let holding = crate::msg::Holding {
                stamp: summary.stamp,
                confirmed: summary.confirmed,
                last_held: summary.last_held(),
            };
            self.to_mgr(ctx, mgr, ToManager::Holds(holding));
        }
        let prepared = self.highest_prepared();
        let msg = if epoch == self.record.epoch {
            ToManager::Ack {
                epoch: self.record.epoch,
                prepared,
            }
        } else {
            ToManager::AckConditional {
                mgr_epoch: epoch,
                chunk_epoch: self.record.epoch,
                metadata: self.record.metadata.clone(),
                prepared,
            }
        };
        self.to_mgr(ctx, mgr, msg);
    }

    // ---- events ------------------------------------------------------------------

    /// Deliver a message addressed to this chunk.
    pub fn on_msg(&mut self, ctx: &mut Ctx<'_>, from: DeviceId, msg: ToChunk) {
        use ChunkState as S;
        match (self.state, msg) {
            // §4.2.1 regular lease: renewal
            (S::RegularLease, ToChunk::Renewal { epoch, lease, sent }) => {
                if epoch == self.record.epoch {
                    self.lease_expiry = Some(ctx.now + lease);
                    self.lease_renewal = Some(ctx.now + ctx.cfg.timing.renewal_period);
                    if let Some(sent) = sent {
                        self.renewal_sent = Some((from, epoch, sent));
                    }
                }
            }
            // §4.2.7 recovery lease: renewal (for the epoch the lease was granted in)
            (S::RecoveryLease, ToChunk::Renewal { epoch, lease, .. }) => {
                if epoch >= self.lease_epoch && Some(from) == self.lease_mgr {
                    self.lease_epoch = epoch;
                    self.lease_expiry = Some(ctx.now + lease);
                    self.lease_renewal = Some(ctx.now + ctx.cfg.timing.renewal_period);
                }
            }
            // §4.2.1 / §4.2.7: epoch transition
            (
                s @ (S::RegularLease | S::RecoveryLease),
                ToChunk::EpochTransition {
                    old_epoch,
                    new_epoch,
                    metadata,
                    new_mgr,
                    tx,
                    data,
                },
            ) => {
                let log = TransitionLog {
                    old_epoch,
                    new_epoch,
                    metadata,
                    new_mgr,
                    tx,
                };
                self.epoch_transition(ctx, from, log, data, s == S::RecoveryLease);
            }
            // §5.3.8, the state as a patch of this chunk's table (DESIGN "State at scale")
            (s @ (S::RegularLease | S::RecoveryLease), ToChunk::ReconcilePatch(p)) => {
                self.reconcile_patch(ctx, from, *p, s == S::RecoveryLease);
            }
            // §4.2.1: acquire while regularly leased → nack
            (S::RegularLease, ToChunk::Acquire { .. }) => {
                let msg = ToManager::Nack {
                    epoch: self.record.epoch,
                    mgr: self.lease_mgr,
                    lease: LeaseType::Regular,
                };
                self.to_mgr(ctx, from, msg);
            }
            // §4.2.1 lose / release: not expected under an active lease; ignored.
            (S::RegularLease, ToChunk::Lose | ToChunk::Release { .. }) => {}
            // the access protocol (SafeTalk)
            (
                _,
                ToChunk::Accept {
                    epoch,
                    ops,
                    confirm,
                },
            ) => self.accept(ctx, from, epoch, ops, confirm),
            (_, ToChunk::Confirm { epoch, upto }) => self.confirm(ctx, from, epoch, upto),
            // §4.2.3 / §4.2.8: commit tx
            (
                S::RegularTransition | S::RecoveryTransition,
                ToChunk::Commit {
                    new_epoch,
                    tx,
                    data,
                    lease,
                },
            ) => self.commit(ctx, from, new_epoch, tx, *data, lease),
            (S::RegularTransition | S::RecoveryTransition, ToChunk::CommitPatch(c)) => {
                self.commit_patch(ctx, from, *c)
            }
            (S::RegularTransition | S::RecoveryTransition, ToChunk::SendState(s)) => {
                self.send_state(ctx, from, s.new_epoch, s.tx)
            }
            // §4.2.3: abort tx → regular lease extended by the abort window
            (
                S::RegularTransition,
                ToChunk::Abort {
                    new_epoch,
                    tx,
                    lease,
                },
            ) => {
                if self.is_transition_manager(from, new_epoch, tx) {
                    self.finished_tx(tx);
                    self.log = None;
                    self.transition_deadline = None;
                    self.record.prepared = None;
                    self.persist(ctx);
                    self.lease_expiry = Some(ctx.now + lease);
                    self.lease_renewal = Some(ctx.now + ctx.cfg.timing.renewal_period);
                    self.state = S::RegularLease;
                }
            }
            // §4.2.8: abort tx → no lease
            (S::RecoveryTransition, ToChunk::Abort { new_epoch, tx, .. }) => {
                if self.is_transition_manager(from, new_epoch, tx) {
                    self.finished_tx(tx);
                    self.record.prepared = None;
                    self.persist(ctx);
                    self.enter_no_lease(ctx);
                }
            }
            // §4.2.3: release while in transition is ignored.
            (S::RegularTransition, ToChunk::Release { .. }) => {}
            // §4.2.4 garbage collect: answer acquire with nochunk, ignore the rest.
            (S::GarbageCollect, ToChunk::Acquire { .. }) => {
                self.to_mgr(ctx, from, ToManager::NoChunk);
            }
            (S::GarbageCollect, _) => {}
            // §4.2.6 no lease: lose → garbage collect
            (S::NoLease, ToChunk::Lose) => self.garbage_collect(ctx),
            // §4.2.6 no lease: acquire. Tenure: an acquire for an *older* epoch is
            // answered with ack-conditional carrying this chunk's newer epoch and
            // metadata (not nack), so the recovering manager moves forward as §5.3.10's
            // ack-conditional and help texts intend; a nack without metadata would leave
            // it unable to learn of the newer epoch.
            // Tenure: a chunk that restarted less than a lease ago answers only its
            // last lease manager (`boot_hold`); another's acquire goes unanswered, as if
            // the chunk were still down, and is asked again.
            (S::NoLease, ToChunk::Acquire { mgr, .. })
                if self.boot_hold.is_some_and(|t| ctx.now < t)
                    && Some(mgr) != self.record.lease_mgr => {}
            (S::NoLease, ToChunk::Acquire { lease, mgr, epoch }) => {
                self.send_ack(ctx, mgr, epoch);
                self.lease_expiry = Some(ctx.now + lease);
                self.lease_renewal = Some(ctx.now + ctx.cfg.timing.renewal_period);
                self.lease_mgr = Some(mgr);
                self.lease_epoch = epoch.max(self.record.epoch);
                self.mgr_attempt_queue.clear();
                self.help_at = None;
                self.state = S::RecoveryLease;
            }
            // §4.2.6 no lease: redirect
            (S::NoLease, ToChunk::Redirect { new_mgr }) => {
                if !self.mgr_attempt_queue.contains(&new_mgr) {
                    self.mgr_attempt_queue.push(new_mgr);
                }
            }
            // §4.2.7 recovery lease: release
            (S::RecoveryLease, ToChunk::Release { epoch, hints }) => {
                if epoch >= self.lease_epoch && Some(from) == self.lease_mgr {
                    for h in hints {
                        if !self.mgr_attempt_queue.contains(&h) {
                            self.mgr_attempt_queue.push(h);
                        }
                    }
                    self.enter_no_lease(ctx);
                }
            }
            // §4.2.7 recovery lease: lose → garbage collect
            (S::RecoveryLease, ToChunk::Lose) => self.garbage_collect(ctx),
            // §4.2.7 recovery lease: acquire by another manager → nack
            (S::RecoveryLease, ToChunk::Acquire { mgr, epoch, .. }) => {
                if Some(mgr) != self.lease_mgr {
                    self.nack_recovery(ctx, from);
                } else {
                    // Tenure: the same manager re-acquiring (it lost our ack, moved its
                    // recovery forward, or gave up and started over) gets it again.
                    self.lease_epoch = epoch.max(self.record.epoch);
                    self.send_ack(ctx, mgr, epoch);
                }
            }
            // §4.2.7 recovery lease: transfer lease
            (
                S::RecoveryLease,
                ToChunk::TransferLease {
                    epoch,
                    new_mgr,
                    lease,
                },
            ) => {
                if epoch != self.lease_epoch {
                    self.nack_recovery(ctx, from);
                } else {
                    if let Some(old) = self.lease_mgr.filter(|m| *m != new_mgr) {
                        self.to_mgr(
                            ctx,
                            old,
                            ToManager::TransferNotice {
                                epoch,
                                mgr: new_mgr,
                            },
                        );
                    }
                    self.to_mgr(
                        ctx,
                        from,
                        ToManager::TransferAck {
                            epoch,
                            mgr: new_mgr,
                            prepared: self.highest_prepared(),
                        },
                    );
                    self.lease_mgr = Some(new_mgr);
                    self.lease_expiry = Some(ctx.now + lease);
                    self.lease_renewal = Some(ctx.now + ctx.cfg.timing.renewal_period);
                }
            }
            // Anything else is not a transition of this state: ignored.
            _ => {}
        }
    }

    /// Earliest timer of this chunk.
    pub fn next_timeout(&self, ctx_drift: std::time::Duration) -> Option<Instant> {
        crate::time::earliest(self.layout_timeout(ctx_drift), self.blocks.next_timeout())
    }

    fn layout_timeout(&self, ctx_drift: std::time::Duration) -> Option<Instant> {
        use ChunkState as S;
        match self.state {
            S::RegularLease | S::RecoveryLease => crate::time::earliest(
                self.lease_renewal,
                self.lease_expiry.map(|e| e.saturating_sub(ctx_drift)),
            ),
            S::NoLease => self.help_at,
            S::Reconciling
            | S::RegularTransition
            | S::RecoveryReconciling
            | S::RecoveryTransition
            | S::NewlyAwake => self.transition_deadline,
            S::GarbageCollect => None,
        }
    }

    /// Fire due timers: lease expiry, lease renewal, the help loop, transition wait.
    pub fn on_tick(&mut self, ctx: &mut Ctx<'_>) {
        use ChunkState as S;
        let now = ctx.now;
        let (store, id) = (self.record.store, self.record.id);
        self.blocks.on_tick(ctx, store, id);
        match self.state {
            S::RegularLease | S::RecoveryLease => {
                if !self.lease_valid(ctx) {
                    // lease expiry: the manager is suspected failed.
                    self.mgr_attempt_queue = self.lease_mgr.into_iter().collect();
                    self.enter_no_lease(ctx);
                } else if self.lease_renewal.is_some_and(|t| t <= now) {
                    // lease renewal: ask the lease manager (again, until renewed).
                    let msg = if self.state == S::RegularLease {
                        ToManager::RenewalRequest {
                            epoch: self.record.epoch,
                            renewed: self.renewed(ctx),
                        }
                    } else {
                        ToManager::RecoveryRenewalRequest {
                            epoch: self.record.epoch,
                        }
                    };
                    if let Some(m) = self.lease_mgr {
                        self.to_mgr(ctx, m, msg);
                    }
                    self.lease_renewal = Some(now + ctx.cfg.timing.renewal_period / 2);
                }
            }
            S::NoLease => {
                if self.help_at.is_some_and(|t| t <= now) {
                    self.send_help(ctx);
                }
            }
            S::Reconciling
            | S::RegularTransition
            | S::RecoveryReconciling
            | S::RecoveryTransition => {
                if self.transition_deadline.is_some_and(|t| t <= now) {
                    // Tenure: the transition manager is gone; regenerate, keeping `prepared`.
                    let mut q: Vec<DeviceId> = self.lease_mgr.into_iter().collect();
                    if let Some(l) = self
                        .log
                        .as_ref()
                        .filter(|l| Some(l.new_mgr) != self.lease_mgr)
                    {
                        q.push(l.new_mgr);
                    }
                    self.mgr_attempt_queue = q;
                    self.enter_no_lease(ctx);
                }
            }
            S::NewlyAwake => {
                // Tenure: the vote's window has passed; start the help loop.
                if self.transition_deadline.is_some_and(|t| t <= now) {
                    self.enter_no_lease(ctx);
                }
            }
            S::GarbageCollect => {}
        }
    }
}
