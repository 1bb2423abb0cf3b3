//! A chunk's side of an epoch transition (seed 000 §4.2.1–§4.2.9): the prepare from the
//! new epoch's manager, the vote, reconciling, `done`, and the commit or abort.

use super::*;
use crate::ctx::Ctx;
use crate::ids::{DeviceId, Epoch};
use crate::io::observation::Observation;
use crate::layout::{ChunkState, Prepared};
use crate::msg::ToManager;

impl Chunk {
    pub(super) fn is_transition_manager(&self, from: DeviceId, new_epoch: Epoch, tx: u64) -> bool {
        self.log
            .as_ref()
            .is_some_and(|l| l.new_mgr == from && l.new_epoch == new_epoch && l.tx == tx)
    }

    /// Remember a finished transition attempt, so a replay of its prepare is refused.
    pub(super) fn finished_tx(&mut self, tx: u64) {
        if self.finished.len() >= 16 {
            self.finished.remove(0);
        }
        self.finished.push(tx);
    }

    /// §4.2.1 / §4.2.7 epoch transition, then §4.2.2 / §4.2.9 reconciling and `done`.
    pub(super) fn epoch_transition(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: DeviceId,
        log: TransitionLog,
        data: Option<Box<crate::data::StoreData>>,
        recovery: bool,
    ) {
        // Tenure: vote only for the lease manager, and never twice for an epoch number.
        let fresh = self
            .highest_prepared()
            .is_none_or(|p| log.new_epoch > p.new_epoch);
        let acceptable = !self.finished.contains(&log.tx)
            && log.old_epoch >= self.record.epoch
            && log.new_epoch > self.record.epoch
            && Some(from) == self.lease_mgr
            && fresh;
        if !acceptable {
            self.to_mgr(
                ctx,
                log.new_mgr,
                ToManager::VoteAbort {
                    new_epoch: log.new_epoch,
                    tx: log.tx,
                },
            );
            return;
        }
        self.state = if recovery {
            ChunkState::RecoveryReconciling
        } else {
            ChunkState::Reconciling
        };
        self.transition_deadline = Some(ctx.now + ctx.cfg.timing.transition_wait);
        // §5.3.8 "chunks are being reconciled": a relayout brings a chunk that does not
        // hold the old epoch's state up to date before it votes (`done` persists it).
        if let Some(d) = data {
            let newest = self.record.epoch.max(log.old_epoch);
            let d = *d;
            let mut merged = crate::safetalk::merge(&[self.record.data.clone(), d.clone()], newest);
            // Tenure (DESIGN "State at scale"): where the merge took the manager's state
            // as it is, this chunk holds the table of its stamp and number, and names it
            // so (its vote can then be a summary).
            let as_is = d.l_list.is_empty()
                && d.r_list.is_empty()
                && merged.confirmed == d.confirmed
                && merged.table == d.table;
            if as_is {
                merged.stamp = d.stamp;
            }
            // Tenure: a merge that leaves this chunk's tables as they were keeps them
            // (the same shared maps), so the vote persists the record's head alone.
            if merged.table == self.record.data.table {
                merged.table = self.record.data.table.clone();
            }
            self.record.data = merged;
        }
        self.log = Some(log);
        self.done(ctx);
    }

    /// §5.3.8 epoch transition of a relayout with the state as a patch of this chunk's
    /// table (DESIGN "State at scale"). The chunk confirms its pending changes up to the
    /// patch's base, which makes its table the one the manager named, takes the rows,
    /// and goes on as with the state whole. A chunk that cannot (it no longer holds that
    /// table) refuses the transition (`VoteAbort`, as for a prepare it cannot accept):
    /// the attempt aborts, and the manager sends the state whole the next time.
    pub(super) fn reconcile_patch(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: DeviceId,
        r: crate::msg::ReconcilePatch,
        recovery: bool,
    ) {
        let Some(state) = self.patched(&r.patch, r.stamp) else {
            let msg = ToManager::VoteAbort {
                new_epoch: r.new_epoch,
                tx: r.tx,
            };
            return self.to_mgr(ctx, r.new_mgr, msg);
        };
        let log = TransitionLog {
            old_epoch: r.old_epoch,
            new_epoch: r.new_epoch,
            metadata: r.metadata,
            new_mgr: r.new_mgr,
            tx: r.tx,
        };
        self.epoch_transition(ctx, from, log, Some(Box::new(state)), recovery);
    }

    /// `done`: reconciliation input is ready. Initiate the commit protocol voting commit:
    /// the prepare is made durable, then the vote (carrying this chunk's state) is sent.
    pub fn done(&mut self, ctx: &mut Ctx<'_>) {
        // §4.2.2 / §4.2.9: done is a transition of the reconciling states only.
        if !matches!(
            self.state,
            ChunkState::Reconciling | ChunkState::RecoveryReconciling
        ) {
            return;
        }
        let Some(log) = self.log.clone() else { return };
        // Remember the earlier vote: if this one aborts, that one may still have
        // committed somewhere.
        if let Some(prev) = self.record.prepared.take()
            && self
                .record
                .known
                .as_ref()
                .is_none_or(|k| k.new_epoch < prev.new_epoch)
        {
            self.record.known = Some(prev);
        }
        self.record.prepared = Some(Prepared {
            new_epoch: log.new_epoch,
            metadata: log.metadata.clone(),
            new_mgr: log.new_mgr,
        });
        self.persist(ctx);
        // Tenure (DESIGN "State at scale"): to another device that holds a chunk of the
        // store itself (whose state it takes whole, and can place this one against), a
        // stamped table is named rather than shipped; the transition manager asks for it
        // whole if it must. A manager holding no chunk would have to ask every time.
        let mgr_holds_a_chunk = (log.metadata.chunks.iter())
            .chain(&self.record.metadata.chunks)
            .any(|c| c.device == log.new_mgr);
        let summary = (ctx.diff_transitions && log.new_mgr != ctx.me() && mgr_holds_a_chunk)
            .then(|| self.record.data.summary())
            .flatten();
        let vote = match summary {
            Some(summary) => ToManager::VoteSummary(Box::new(crate::msg::VoteSummary {
                new_epoch: log.new_epoch,
                tx: log.tx,
                summary,
                committed: self.record.epoch,
            })),
            None => self.whole_vote(&log),
        };
        self.to_mgr(ctx, log.new_mgr, vote);
        self.state = match self.state {
            ChunkState::RecoveryReconciling => ChunkState::RecoveryTransition,
            _ => ChunkState::RegularTransition,
        };
    }

    /// A vote carrying this chunk's whole state.
    fn whole_vote(&self, log: &TransitionLog) -> ToManager {
        ToManager::Vote {
            new_epoch: log.new_epoch,
            tx: log.tx,
            data: Box::new(self.record.data.clone()),
            committed: self.record.epoch,
        }
    }

    /// Tenure: the transition manager could not merge with this chunk's summary: the
    /// vote again, whole (the prepare is durable already).
    pub(super) fn send_state(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: DeviceId,
        new_epoch: Epoch,
        tx: u64,
    ) {
        if !self.is_transition_manager(from, new_epoch, tx) {
            return;
        }
        let Some(log) = self.log.clone() else { return };
        let vote = self.whole_vote(&log);
        self.to_mgr(ctx, from, vote);
    }

    /// §4.2.3 / §4.2.8 commit tx, with the merged state as a patch of the table this
    /// chunk's summary named (DESIGN "State at scale"). The chunk confirms its pending
    /// changes up to the patch's base, which makes its table the base's, and takes the
    /// rows. A chunk that cannot (it does not hold the base: never so for a summary the
    /// manager matched) leaves the commit unapplied, as if the message were lost.
    pub(super) fn commit_patch(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: DeviceId,
        c: crate::msg::CommitPatch,
    ) {
        if !self.is_transition_manager(from, c.new_epoch, c.tx) {
            return;
        }
        let stamp = crate::safetalk::Stamp {
            epoch: c.new_epoch,
            tx: c.tx,
        };
        let Some(data) = self.patched(&c.patch, Some(stamp)) else {
            return;
        };
        self.commit(ctx, from, c.new_epoch, c.tx, data, c.lease);
    }

    /// This chunk's state with patch `p` applied, stamped `stamp`: its pending changes
    /// confirmed up to the patch's base, which makes its table the one the patch names,
    /// then the rows. None if it does not hold that table (or a row does not decode).
    fn patched(
        &self,
        p: &crate::msg::Patch,
        stamp: Option<crate::safetalk::Stamp>,
    ) -> Option<crate::data::StoreData> {
        let mut d = self.record.data.clone();
        if d.stamp != Some(p.from) || d.confirmed > p.upto || d.last_held() < p.upto {
            return None;
        }
        d.confirm(p.upto);
        let table = crate::rows::patch(&d.table, &p.head, &p.rows).ok()?;
        Some(crate::data::StoreData {
            table,
            confirmed: p.confirmed,
            l_list: Default::default(),
            r_list: Default::default(),
            stamp,
        })
    }

    /// §4.2.3 / §4.2.8 commit tx.
    pub(super) fn commit(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: DeviceId,
        new_epoch: Epoch,
        tx: u64,
        data: crate::data::StoreData,
        lease: std::time::Duration,
    ) {
        if !self.is_transition_manager(from, new_epoch, tx) {
            return;
        }
        self.finished_tx(tx);
        let log = self.log.take().expect("transition manager checked");
        self.transition_deadline = None;
        if log.metadata.contains(self.record.id) {
            self.record.epoch = log.new_epoch;
            self.record.metadata = log.metadata;
            self.record.data = data;
            self.record.lease_mgr = Some(log.new_mgr);
            self.record.prepared = None;
            if self
                .record
                .known
                .as_ref()
                .is_some_and(|k| k.new_epoch <= log.new_epoch)
            {
                self.record.known = None;
            }
            self.persist(ctx);
            self.lease_expiry = Some(ctx.now + lease);
            self.lease_renewal = Some(ctx.now + ctx.cfg.timing.renewal_period);
            self.lease_mgr = Some(log.new_mgr);
            self.lease_epoch = log.new_epoch;
            self.state = ChunkState::RegularLease;
            ctx.observe(Observation::ChunkCommitted {
                chunk: self.record.id,
                epoch: log.new_epoch,
            });
            let live = self.record.data.table.objects.live_blocks();
            let peers = self.record.metadata.chunks.iter().copied().collect();
            let (store, id, epoch) = (self.record.store, self.record.id, self.record.epoch);
            self.blocks
                .after_commit(ctx, store, id, epoch, live, peers, log.new_mgr);
        } else {
            self.garbage_collect(ctx);
        }
    }
}
