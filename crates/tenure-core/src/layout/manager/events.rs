//! The manager's events from its chunks (seed 000 §5.3): one match arm per (state, event)
//! row of the seed's table.

#![allow(clippy::collapsible_match)]

use super::*;
use crate::config::precedence;
use crate::ctx::Ctx;
use crate::ids::{ChunkId, DeviceId, Epoch};
use crate::io::observation::FailedWhy;
use crate::layout::{LeaseType, MgrState};
use crate::msg::{ToChunk, ToManager};
use crate::safetalk::Input;

impl Manager {
    /// A message from a chunk of this store.
    pub fn on_msg(&mut self, ctx: &mut Ctx<'_>, from: DeviceId, c: ChunkId, msg: ToManager) {
        use MgrState as S;
        if from != c.device {
            // A device speaks only for its own chunks.
            return;
        }
        match (self.state(), msg) {
            // Tenure (DESIGN "State at scale"): the table a chunk holds, named before
            // its ack, in whatever state.
            (_, ToManager::Holds(h)) => self.note_holding(c, h),
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
            (S::Manager, ToManager::RenewalRequest { epoch, renewed }) => {
                if epoch == self.epoch
                    && let Some(r) = renewed
                    && r.sent <= ctx.now
                {
                    // The chunk applied a renewal this manager sent at `r.sent`, and
                    // goes on refusing others for `lease_left` from sending this, so
                    // after `r.sent` (DESIGN §4, reads).
                    self.extend_read_lease(c, r.sent + r.lease_left);
                }
                if !self.failed.contains(&c) && epoch == self.epoch {
                    self.renew(ctx, c);
                }
            }
            // §5.3.7 manager: help
            (S::Manager, ToManager::Help { epoch, .. }) => {
                if self.metadata.contains(c) {
                    if !self.failed.contains(&c) && !self.mark_failed(ctx, c, FailedWhy::Help) {
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
            (
                S::Manager,
                ToManager::Accepted {
                    epoch,
                    upto,
                    lease_left,
                },
            ) => {
                if epoch == self.epoch
                    && let Some(left) = lease_left
                    && let Some(sent) = self.host.sent_covered(upto)
                {
                    // The chunk sent this after the batch reached it, so after `sent`.
                    self.extend_read_lease(c, sent + left);
                }
                let all = ctx.cfg.planted.confirm_before_all_accepted;
                if epoch == self.epoch && self.host.accepted(c, upto, all) {
                    self.try_complete(ctx);
                }
            }
            // A chunk that cannot accept is failed (Menasce's up list, seed 004 §2).
            (S::Manager, ToManager::Refused { epoch }) => {
                if epoch == self.epoch && !self.failed.contains(&c) && self.metadata.contains(c) {
                    self.mark_failed(ctx, c, FailedWhy::Refused);
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
                self.regen_mut().outstanding.remove(&c);
                self.timeout.remove(&c);
                self.check_gathered(ctx);
            }
            // §5.3.10 / §5.3.12: recovery renewal request
            (S::GatheringChunks, ToManager::RecoveryRenewalRequest { .. }) => {
                if self.regen().won.contains(&c) {
                    self.renew(ctx, c);
                }
            }
            (S::GatheringLeases, ToManager::RecoveryRenewalRequest { .. }) => {
                if self.regen().won.contains(&c) || self.regen().renewal_iffy.contains(&c) {
                    self.renew(ctx, c);
                }
            }
            // §5.3.10 gathering chunks: help
            // (Tenure: a chunk whose refusal was set aside, below, is free now: asked again.)
            (S::GatheringChunks, ToManager::Help { epoch, .. }) => {
                if epoch < self.epoch && !self.all_chunks().contains(&c) {
                    self.to_chunk(ctx, c, ToChunk::Lose);
                } else if self.regen_mut().awaiting.remove(&c)
                    || !self.regen().outstanding.contains(&c)
                {
                    self.regen_mut().won.remove(&c);
                    self.acquire(ctx, c);
                }
            }
            // Tenure: a chunk still leased to a manager that has fallen silent (dead, or
            // cut off from this device) will ask for help once that lease runs out. Its
            // refusal is set aside: the acquire stays outstanding until its timeout, the
            // silent manager is not weighed as a better one (the won chunks are not
            // released to it), and the chunk's help is answered at once.
            (S::GatheringChunks, ToManager::Nack { mgr: Some(m), .. })
                if m != ctx.me() && ctx.silent(m) =>
            {
                if self.regen().outstanding.contains(&c) {
                    self.regen_mut().awaiting.insert(c);
                }
            }
            // §5.3.10 gathering chunks: nack (precedence arbitration)
            (S::GatheringChunks, ToManager::Nack { mgr, lease, .. }) => {
                self.regen_mut().outstanding.remove(&c);
                self.timeout.remove(&c);
                let me = ctx.me();
                match (lease, mgr) {
                    (_, Some(m)) if m == me => {}
                    (LeaseType::Regular, Some(m)) => {
                        self.regen_mut().better.insert(m);
                    }
                    (_, Some(m)) => {
                        if precedence(self.store, m) > precedence(self.store, me) {
                            self.regen_mut().better.insert(m);
                        } else {
                            self.regen_mut().lesser.insert(m);
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
                if epoch == self.epoch && mgr == ctx.me() && self.regen().renewal_iffy.contains(&c)
                {
                    self.timeout.remove(&c);
                    if prepared.as_ref().is_some_and(|p| self.would_join(p)) {
                        self.late_ack_gathering_leases(ctx, c, None, prepared);
                    } else {
                        self.regen_mut().renewal_iffy.remove(&c);
                        self.regen_mut().won.insert(c);
                        self.check_leases_gathered(ctx);
                    }
                }
            }
            // Tenure: a refused transfer, or a refused acquire of a joined layout's chunk,
            // while gathering leases.
            (S::GatheringLeases, ToManager::Nack { .. } | ToManager::NoChunk) => {
                if self.regen_mut().renewal_iffy.remove(&c) {
                    self.timeout.remove(&c);
                    self.chunkfail.remove(&c);
                    self.check_leases_gathered(ctx);
                } else if self.regen_mut().outstanding.remove(&c) {
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
            ) => self.count_vote(ctx, c, new_epoch, id, committed, Input::Whole(*data)),
            (
                S::RecoveryReconciling | S::RelayoutReconciling | S::IntoReconciling,
                ToManager::VoteSummary(v),
            ) => {
                let v = *v;
                let input = Input::Summary(v.summary);
                self.count_vote(ctx, c, v.new_epoch, v.tx, v.committed, input)
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
                    // Tenure: a rejoining chunk refuses a patch of a table it no longer
                    // holds; the next attempt sends it the state whole.
                    self.rejoin.whole_next.insert(c);
                    self.abort_tx(ctx);
                }
            }
            // Tenure: a vote for a migration into this device that outran the old
            // manager's handoff: kept until the handoff comes (simulator seed 1870: the
            // handoff, carrying the store's state, arrived after a chunk's vote every
            // time, and the migration off a retiring device aborted forever).
            (
                S::None,
                ToManager::Vote {
                    new_epoch,
                    tx,
                    data,
                    committed,
                },
            ) if !self.finished.contains(&tx) => {
                self.early_vote(ctx, c, new_epoch, tx, committed, Input::Whole(*data))
            }
            (S::None, ToManager::VoteSummary(v)) if !self.finished.contains(&v.tx) => {
                let v = *v;
                let input = Input::Summary(v.summary);
                self.early_vote(ctx, c, v.new_epoch, v.tx, v.committed, input)
            }
            _ => {}
        }
    }
}

impl Manager {
    /// A vote (whole or named) for the transition this manager coordinates.
    fn count_vote(
        &mut self,
        ctx: &mut Ctx<'_>,
        c: ChunkId,
        new_epoch: Epoch,
        id: u64,
        committed: Epoch,
        input: crate::data::StoreInput,
    ) {
        if let Some(tx) = (self.tx.as_mut()).filter(|t| t.new_epoch == new_epoch && t.id == id)
            && tx.vote(c, committed, input)
        {
            self.check_votes(ctx);
        }
    }

    /// Tenure: a vote for a migration into this device that outran the old manager's
    /// handoff, kept until the handoff comes.
    fn early_vote(
        &mut self,
        ctx: &mut Ctx<'_>,
        c: ChunkId,
        new_epoch: Epoch,
        tx: u64,
        committed: Epoch,
        data: crate::data::StoreInput,
    ) {
        let Stage::None(early) = &mut self.stage else {
            unreachable!("the arm of the none state")
        };
        if early.len() >= super::migration::EARLY_VOTES_MAX {
            early.remove(0);
        }
        early.push(super::migration::EarlyVote {
            chunk: c,
            new_epoch,
            tx,
            committed,
            data,
            until: ctx.now + ctx.cfg.timing.transition_timeout,
        });
    }
}
