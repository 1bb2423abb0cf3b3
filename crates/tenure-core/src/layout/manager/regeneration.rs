//! Regeneration (seed 000 §5.3.10–14): gathering chunks, gathering leases, recovery, and
//! the epoch transition this manager coordinates (prepare, votes, commit, abort).

use super::*;
use crate::ctx::Ctx;
use crate::data::StoreData;
use crate::ids::{ChunkId, DeviceId, Epoch};
use crate::io::observation::EpochCause;
use crate::io::observation::Observation;
use crate::layout::{Metadata, MgrState, Prepared};
use crate::msg::{MgrMsg, Msg, ToChunk};
use std::collections::BTreeSet;

/// The variables of §5.1 that regeneration works with, carried by the regeneration
/// states of [`Stage`]: set while gathering chunks and leases, read by the recovery
/// transition, dropped when the role leaves those states; `joint` is emptied when the
/// recovery commits, so a manager's quorum is that of its own layout.
#[derive(Clone, Debug, Default)]
pub struct Regeneration {
    /// Better managers seen while gathering.
    pub better: BTreeSet<DeviceId>,
    /// Lesser managers seen while gathering.
    pub lesser: BTreeSet<DeviceId>,
    /// Chunks not yet heard from while gathering.
    pub outstanding: BTreeSet<ChunkId>,
    /// Chunks won while gathering.
    pub won: BTreeSet<ChunkId>,
    /// Lease transfers not yet acknowledged.
    pub renewal_iffy: BTreeSet<ChunkId>,
    /// Tenure: the layouts prepared for the newest epoch above ours learned while
    /// gathering, one entry per distinct layout (joint quorum over all of them).
    pub joint: Vec<Prepared>,
    /// Tenure: gathering rounds so far.
    pub rounds: u32,
    /// Tenure: chunks whose refusal named a silent lease holder ([`Ctx::silent`]): their
    /// help is answered with an acquire even while one is outstanding.
    pub awaiting: BTreeSet<ChunkId>,
}

impl Manager {
    /// §5.3.1 help: begin regenerating at the chunk's epoch and metadata.
    pub(super) fn start_gathering(&mut self, ctx: &mut Ctx<'_>, epoch: Epoch, metadata: Metadata) {
        self.reset();
        self.epoch = epoch;
        self.metadata = metadata;
        self.stage = Stage::GatheringChunks(Regeneration {
            rounds: 1,
            ..Regeneration::default()
        });
        for c in self.metadata.chunks.clone() {
            self.acquire(ctx, c);
        }
    }

    pub(super) fn won_chunk(&mut self, ctx: &mut Ctx<'_>, c: ChunkId) {
        self.regen_mut().outstanding.remove(&c);
        self.regen_mut().awaiting.remove(&c);
        self.regen_mut().won.insert(c);
        self.timeout.remove(&c);
        self.chunkfail.insert(c, ctx.now + ctx.cfg.timing.lease);
    }

    /// Tenure: a chunk voted for a newer epoch that may have committed elsewhere. Require
    /// a quorum of its layout too, and acquire its chunks. Several attempts can have
    /// prepared the same epoch number with different layouts (an aborted one lingers at a
    /// chunk that missed the abort); any of them may be the one that committed, so each
    /// distinct layout of the newest prepared epoch is joined.
    pub(super) fn note_prepared(&mut self, ctx: &mut Ctx<'_>, prepared: Option<Prepared>) {
        for c in self.join_prepared(prepared).unwrap_or_default() {
            self.acquire(ctx, c);
        }
    }

    /// Whether [`Self::join_prepared`] would join `p`'s layout.
    pub(super) fn would_join(&self, p: &Prepared) -> bool {
        p.new_epoch > self.epoch
            && match self.joint().first().map(|j| j.new_epoch) {
                Some(top) if top > p.new_epoch => false,
                Some(top) if top == p.new_epoch => {
                    !self.joint().iter().any(|j| j.metadata == p.metadata)
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
            .joint()
            .first()
            .is_some_and(|j| j.new_epoch < p.new_epoch)
        {
            self.regen_mut().joint.clear();
        }
        let known = self.all_chunks();
        let fresh: Vec<ChunkId> = p
            .metadata
            .chunks
            .iter()
            .filter(|c| {
                !known.contains(*c)
                    && !self.regen().won.contains(c)
                    && !self.regen().outstanding.contains(c)
            })
            .copied()
            .collect();
        self.regen_mut().joint.push(p);
        Some(fresh)
    }

    /// §5.3.10 ack-conditional from a newer epoch: move the recovery attempt forward to
    /// the chunk's epoch and metadata, acquiring the chunks new to it.
    pub(super) fn move_forward(
        &mut self,
        ctx: &mut Ctx<'_>,
        chunk_epoch: Epoch,
        metadata: Metadata,
    ) {
        self.epoch = chunk_epoch;
        let cnew: Vec<ChunkId> = metadata
            .chunks
            .difference(&self.metadata.chunks)
            .copied()
            .collect();
        self.metadata = metadata;
        self.regen_mut().joint.retain(|j| j.new_epoch > chunk_epoch);
        for n in cnew {
            if !self.regen().won.contains(&n) {
                self.acquire(ctx, n);
            }
        }
    }

    /// §5.3.12 gathering leases: a late ack / ack-conditional (see the arm in
    /// [`Self::on_msg`]). `newer` is the chunk's epoch and metadata if newer than ours.
    pub(super) fn late_ack_gathering_leases(
        &mut self,
        ctx: &mut Ctx<'_>,
        c: ChunkId,
        newer: Option<(Epoch, Metadata)>,
        prepared: Option<Prepared>,
    ) {
        self.regen_mut().renewal_iffy.remove(&c);
        self.won_chunk(ctx, c);
        if let Some((chunk_epoch, metadata)) = newer {
            // The transfers went out at the old epoch: drop them and regather.
            self.back_to_gathering_chunks();
            self.move_forward(ctx, chunk_epoch, metadata);
        }
        self.note_prepared(ctx, prepared);
        if self.state() == MgrState::GatheringLeases
            && self.quorum_and_coverage(ctx, &self.regen().won)
        {
            self.check_leases_gathered(ctx);
        } else {
            self.back_to_gathering_chunks();
            self.check_gathered(ctx);
        }
    }

    /// Tenure: leave gathering leases for gathering chunks, giving up the lease
    /// transfers in flight (the gathered decision will send them again if it still holds).
    fn back_to_gathering_chunks(&mut self) {
        self.stage.advance(MgrState::GatheringChunks);
        for c in std::mem::take(&mut self.regen_mut().renewal_iffy) {
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
    pub(super) fn late_ack_recovery(
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

    /// Tenure: gathered once nothing is outstanding, or once the won chunks already
    /// hold a quorum and coverage and every chunk still outstanding is one no answer
    /// is worth waiting for: its device has fallen silent ([`Ctx::silent`]), or it
    /// refused for a silent lease holder. Giving up on those now is their timeout come
    /// early; a late answer is taken as after any timeout. Without a quorum the
    /// timeouts run their course, so a cut-off device does not spin through rounds.
    pub(super) fn check_gathered(&mut self, ctx: &mut Ctx<'_>) {
        let hopeless = |c: &ChunkId| ctx.silent(c.device) || self.regen().awaiting.contains(c);
        if self.regen().outstanding.is_empty()
            || (self.regen().outstanding.iter().all(hopeless)
                && self.quorum_and_coverage(ctx, &self.regen().won))
        {
            self.gathered(ctx);
        }
    }

    /// §5.3.11 gathered: decide on entry.
    pub(super) fn gathered(&mut self, ctx: &mut Ctx<'_>) {
        self.stage.advance(MgrState::Gathered);
        if self.quorum_and_coverage(ctx, &self.regen().won) {
            self.gathering_leases(ctx);
        } else if self.regen().better.is_empty()
            && self.regen().rounds < ctx.cfg.timing.gather_rounds_max
        {
            // Not clearly lost: another round of acquisitions.
            self.regen_mut().rounds += 1;
            self.stage.advance(MgrState::GatheringChunks);
            let rest: Vec<ChunkId> = self
                .all_chunks()
                .difference(&self.regen().won)
                .copied()
                .collect();
            for c in rest {
                self.acquire(ctx, c);
            }
            if self.regen().outstanding.is_empty() {
                self.newly_awake(ctx);
            }
        } else {
            let hints: Vec<DeviceId> = self.regen().better.iter().copied().collect();
            let epoch = self.epoch;
            for c in self.regen().won.clone() {
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
        self.stage.advance(MgrState::GatheringLeases);
        self.regen_mut().renewal_iffy.clear();
        let t: Vec<ChunkId> = self
            .all_chunks()
            .into_iter()
            .filter(|c| !self.failed.contains(c) && !self.regen().won.contains(c))
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
            self.regen_mut().renewal_iffy.insert(c);
            self.chunkfail.insert(c, ctx.now + lease);
            // Tenure: a transfer not acknowledged within a message timeout is given up.
            self.timeout.insert(c, ctx.now + ctx.cfg.timing.msg_timeout);
        }
        self.check_leases_gathered(ctx);
    }

    /// Tenure: also once every transfer still unacknowledged went to a silent device
    /// (the won chunks hold a quorum since §5.3.11): their timeouts come early.
    pub(super) fn check_leases_gathered(&mut self, ctx: &mut Ctx<'_>) {
        if self.state() == MgrState::GatheringLeases
            && self
                .regen()
                .renewal_iffy
                .iter()
                .all(|c| ctx.silent(c.device))
        {
            self.start_recovery_transition(ctx);
        }
    }

    /// §5.3.12 → §5.3.13: send `epoch transition` to all won chunks.
    fn start_recovery_transition(&mut self, ctx: &mut Ctx<'_>) {
        let (new_epoch, metadata) = self.recovery_target();
        let won = self.regen().won.clone();
        self.begin_tx(
            ctx,
            TxKind::Recovery,
            new_epoch,
            metadata,
            won,
            BTreeSet::new(),
        );
        self.stage.advance(MgrState::RecoveryReconciling);
    }

    /// The epoch and layout a recovery transition goes to: above the newest prepared
    /// epoch joined, with its first layout, or else the next epoch of our layout.
    fn recovery_target(&self) -> (Epoch, Metadata) {
        match self.joint().first() {
            Some(j) => (j.new_epoch.max(self.epoch).next(), j.metadata.clone()),
            None => (self.epoch.next(), self.metadata.clone()),
        }
    }

    pub(super) fn begin_tx(
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
        let state = (!reconcile.is_empty()).then(|| Box::new(self.host.data.clone()));
        let mut whole_sent = false;
        let (mut patched, mut whole) = (0, Vec::new());
        for c in &participants {
            // A chunk that rejoins holding a table the manager still has gets the state
            // as a patch of it (DESIGN "State at scale").
            let patch = match reconcile.contains(c).then(|| self.rejoin_patch(ctx, *c)) {
                Some(Ok(p)) => {
                    patched += 1;
                    Some(p)
                }
                Some(Err(miss)) => {
                    whole.push((*c, miss));
                    None
                }
                None => None,
            };
            let msg = match patch {
                Some(patch) => ToChunk::ReconcilePatch(Box::new(crate::msg::ReconcilePatch {
                    old_epoch,
                    new_epoch,
                    metadata: metadata.clone(),
                    new_mgr: me,
                    tx: id,
                    patch,
                    stamp: self.host.data.stamp,
                })),
                None => {
                    let data = state.clone().filter(|_| reconcile.contains(c));
                    whole_sent |= data.is_some();
                    ToChunk::EpochTransition {
                        old_epoch,
                        new_epoch,
                        metadata: metadata.clone(),
                        new_mgr: me,
                        tx: id,
                        data,
                    }
                }
            };
            self.to_chunk(ctx, *c, msg);
        }
        if !reconcile.is_empty() {
            ctx.observe(Observation::RelayoutBegun {
                store: self.store,
                patched,
                whole,
            });
        }
        self.tx = Some(Tx {
            id,
            kind,
            new_epoch,
            metadata,
            participants,
            votes: BTreeSet::new(),
            // A regenerating manager's own state is empty: it holds no epoch.
            inputs: Tx::own_input(
                if kind == TxKind::Recovery {
                    Epoch::default()
                } else {
                    old_epoch
                },
                self.host.data.clone(),
            ),
            sources: vec![None],
            asked: BTreeSet::new(),
            await_mgr: None,
            begun: ctx.now,
            // A chunk given the state, whole or as a patch, makes it durable before it
            // votes: right after a device restarted, with every store doing the same,
            // that took longer than `transition_timeout`, and the attempts aborted over
            // and over (a store of ~15,000 objects, whole, even with a longer deadline).
            deadline: ctx.now
                + if whole_sent || patched > 0 {
                    ctx.cfg.timing.transition_timeout_longest()
                } else {
                    ctx.cfg.timing.transition_timeout
                },
        });
    }

    /// `done`: every participant has reconciled and voted; commit.
    pub(super) fn check_votes(&mut self, ctx: &mut Ctx<'_>) {
        let Some(tx) = self.tx.as_ref() else { return };
        if tx.deadline <= ctx.now {
            // Votes read only after the deadline (a paused device): the attempt is over,
            // whatever arrived meanwhile (an outgoing manager has stepped down by now).
            return self.abort_tx(ctx);
        }
        if !(tx.await_mgr.is_none() && tx.votes == tx.participants) {
            return;
        }
        // Reconciliation: Menasce's merge with maximum forward progress (seed 004 §4.1),
        // once every table it needs is at hand: a summary it cannot place is asked whole.
        let merged = match crate::safetalk::merge_inputs(&tx.inputs) {
            Ok(m) => m,
            Err(ask) => {
                let (new_epoch, id) = (tx.new_epoch, tx.id);
                let ask: Vec<ChunkId> = (ask.iter())
                    .filter_map(|i| tx.sources.get(*i).copied().flatten())
                    .collect();
                let tx = self.tx.as_mut().expect("checked above");
                let ask: Vec<ChunkId> = ask.into_iter().filter(|c| tx.asked.insert(*c)).collect();
                for c in ask {
                    let msg = ToChunk::SendState(crate::msg::SendState { new_epoch, tx: id });
                    self.to_chunk(ctx, c, msg);
                }
                return;
            }
        };
        // initiate commit, voting commit → * transition; as transition manager, commit at once.
        self.stage.advance(match self.state() {
            MgrState::RecoveryReconciling => MgrState::RecoveryTransition,
            MgrState::RelayoutReconciling => MgrState::RelayoutTransition,
            _ => MgrState::IntoTransition,
        });
        self.commit_tx(ctx, merged);
    }

    /// commit tx (§5.3.4, §5.3.9, §5.3.14), shipping the merged state whole, or as a
    /// patch to a chunk on another device whose summary the merge's base extends.
    fn commit_tx(&mut self, ctx: &mut Ctx<'_>, m: crate::safetalk::Merged<StoreOp, Tables>) {
        let tx = self.tx.take().expect("commit without a transaction");
        self.remember(tx.id);
        // The merge's base table, kept for the chunks of the layout that did not take
        // part: they may hold it, and be patched from it when they rejoin.
        if let Some((_, crate::safetalk::Input::Whole(base))) = tx.inputs.get(m.base) {
            (self.rejoin).keep(base.stamp, base.confirmed, &base.table, ctx.now);
        }
        self.rejoin.committed(&tx.participants);
        let expiry = ctx.now + ctx.cfg.timing.commit_window;
        let mut merged = m.data.clone();
        merged.stamp = Some(crate::safetalk::Stamp {
            epoch: tx.new_epoch,
            tx: tx.id,
        });
        let mut patch: Option<Option<crate::msg::Patch>> = None;
        let lease = ctx.cfg.timing.commit_window;
        for c in &tx.participants {
            let summary = (tx.sources.iter().position(|s| *s == Some(*c)))
                .and_then(|i| match &tx.inputs[i].1 {
                    crate::safetalk::Input::Summary(s) => Some(s),
                    crate::safetalk::Input::Whole(_) => None,
                })
                .filter(|s| c.device != ctx.me() && m.can_patch(&tx.inputs, s));
            let patch = summary.and_then(|_| {
                patch
                    .get_or_insert_with(|| patch_of(&tx.inputs, &m, &merged, ctx))
                    .clone()
            });
            let msg = match patch {
                Some(patch) => ToChunk::CommitPatch(Box::new(crate::msg::CommitPatch {
                    new_epoch: tx.new_epoch,
                    tx: tx.id,
                    lease,
                    patch,
                })),
                None => ToChunk::Commit {
                    new_epoch: tx.new_epoch,
                    tx: tx.id,
                    data: Box::new(merged.clone()),
                    lease,
                },
            };
            self.to_chunk(ctx, *c, msg);
        }
        self.epoch = tx.new_epoch;
        self.metadata = tx.metadata;
        self.host.data = merged;
        if let Some(r) = self.stage.regeneration_mut() {
            r.joint.clear();
        }
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
        if self.failed.is_empty() {
            // No chunk left to rejoin: no earlier table is needed.
            self.rejoin.ancestors.clear();
        }
        self.policy = PolicyState {
            failed_at: self.failed.iter().map(|c| (*c, ctx.now)).collect(),
            ..PolicyState::default()
        };
        match tx.kind {
            TxKind::Recovery => {
                self.enter_manager(ctx, EpochCause::Regeneration);
            }
            TxKind::Relayout => {
                self.enter_manager(ctx, EpochCause::Relayout);
                ctx.observe(Observation::Relayout {
                    store: self.store,
                    committed: true,
                });
            }
            TxKind::Into => {
                if let Some(old) = self.stage.incoming_mut().and_then(|i| i.old_mgr.take()) {
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
    pub(super) fn abort_tx(&mut self, ctx: &mut Ctx<'_>) {
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
                // A rejoining chunk that took the state before the attempt aborted
                // holds the manager's table as it was when the attempt began.
                if let Some((_, crate::safetalk::Input::Whole(d))) = tx.inputs.first() {
                    (self.rejoin).keep(d.stamp, d.confirmed, &d.table, ctx.now);
                }
                for c in self.live() {
                    self.chunkfail.insert(c, expiry);
                }
                // Recovered chunks fall back to no lease on abort (§4.2.8).
                for c in std::mem::take(&mut self.recovered) {
                    self.chunkfail.remove(&c);
                }
                // A chunk that missed the abort may have given up on this manager.
                self.read_lease.clear();
                self.stage = Stage::Manager;
                self.stable_since = ctx.now;
                self.policy.backoff_until = ctx.now + ctx.cfg.timing.lease;
                ctx.observe(Observation::Relayout {
                    store: self.store,
                    committed: false,
                });
            }
            TxKind::Into => {
                if let Some(old) = self.stage.incoming_mut().and_then(|i| i.old_mgr.take()) {
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
}

/// The merged state as a patch of the merge's base table ([`crate::msg::Patch`]); none if
/// a row does not encode (the commit then goes whole).
fn patch_of(
    inputs: &[(Epoch, crate::data::StoreInput)],
    m: &crate::safetalk::Merged<StoreOp, Tables>,
    merged: &StoreData,
    ctx: &Ctx<'_>,
) -> Option<crate::msg::Patch> {
    let crate::safetalk::Input::Whole(base) = &inputs.get(m.base)?.1 else {
        return None;
    };
    let mut rows = Vec::new();
    crate::rows::diff(&base.table, &merged.table, &mut rows).ok()?;
    if ctx.cfg.planted.patch_drops_a_row {
        rows.pop();
    }
    Some(crate::msg::Patch {
        from: base.stamp?,
        upto: base.confirmed,
        confirmed: merged.confirmed,
        head: Box::new(crate::rows::head(&merged.table)),
        rows,
    })
}
