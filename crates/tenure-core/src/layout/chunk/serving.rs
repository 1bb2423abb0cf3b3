//! The access protocol at a chunk (SafeTalk, seed 004 §2, Appendix A): served only under a
//! regular lease for the current epoch; ACCEPT kept durably before ACCEPTED, CONFIRM applied.

use super::*;
use crate::ctx::Ctx;
use crate::data::StoreOp;
use crate::ids::Version;
use crate::ids::{DeviceId, Epoch};
use crate::io::observation::Observation;
use crate::io::persist::PersistOp;
use crate::layout::ChunkState;
use crate::msg::ToManager;

impl Chunk {
    /// Whether this chunk serves the access protocol for `from` in `epoch` now: only
    /// under a regular lease for its current epoch, granted by the sender, and trusted
    /// only until `expiry - δ_c` (seed 000 §4.1: "the access protocol blocks unless the
    /// state is regular").
    pub(super) fn serving(&self, ctx: &Ctx<'_>, from: DeviceId, epoch: Epoch) -> bool {
        (self.state == ChunkState::RegularLease
            && epoch == self.record.epoch
            && Some(from) == self.lease_mgr
            && self.lease_valid(ctx))
            || ctx.cfg.planted.serve_without_lease
    }

    /// How long from now this chunk goes on refusing every manager but `from` under
    /// `from`'s regular lease: until `δ_c` before the lease's expiry, when it stops
    /// serving and may help another ([`ToManager::Accepted`]'s `lease_left`).
    fn lease_left(&self, ctx: &Ctx<'_>, from: DeviceId) -> Option<std::time::Duration> {
        if self.state != ChunkState::RegularLease || Some(from) != self.lease_mgr {
            return None;
        }
        let until = self.trusted_until(ctx)?;
        (until > ctx.now).then(|| until.saturating_since(ctx.now))
    }

    /// The echo of the last renewal applied, for a renewal request to the lease
    /// manager: only from that manager, in the epoch the chunk serves, while its regular
    /// lease runs. Any renewal the manager sent in that epoch left before this request,
    /// so the lease left now bounds, from its send time, how long the chunk goes on
    /// refusing other managers (DESIGN §4, reads).
    pub(super) fn renewed(&self, ctx: &Ctx<'_>) -> Option<crate::msg::Renewed> {
        let (from, epoch, sent) = self.renewal_sent?;
        if epoch != self.record.epoch || Some(from) != self.lease_mgr {
            return None;
        }
        let lease_left = self.lease_left(ctx, from)?;
        Some(crate::msg::Renewed { sent, lease_left })
    }

    /// The highest sequence number this chunk holds (confirmed or pending).
    fn last_accepted(&self) -> Version {
        let d = &self.record.data;
        let l = d.l_list.keys().next_back().copied().unwrap_or_default();
        let r = d.r_list.keys().next_back().copied().unwrap_or_default();
        d.confirmed.max(l).max(r)
    }

    /// SafeTalk ACCEPT (seed 004 §2, Appendix A: AL/AR): keep the batch in the L/R-lists
    /// durably, apply the piggybacked CONFIRM, then answer ACCEPTED. A batch that does
    /// not follow the last accepted change without a gap is refused (a lost ACCEPT).
    pub(super) fn accept(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: DeviceId,
        epoch: Epoch,
        ops: Vec<(Version, StoreOp)>,
        confirm: Version,
    ) {
        let Some(first) = ops.first().map(|o| o.0) else {
            return;
        };
        let last_op = ops.last().map(|o| o.0).unwrap_or(first);
        let last = self.last_accepted();
        let expected = if last.epoch == first.epoch {
            last.seq + 1
        } else {
            1
        };
        if !self.serving(ctx, from, epoch) || first.epoch != epoch {
            self.to_mgr(ctx, from, ToManager::Refused { epoch });
            return;
        }
        if last_op <= last {
            // A duplicate of a batch already accepted: answer again, change nothing.
            let lease_left = self.lease_left(ctx, from);
            let msg = ToManager::Accepted {
                epoch,
                upto: last,
                lease_left,
            };
            self.to_mgr(ctx, from, msg);
            return;
        }
        if first.seq != expected {
            self.to_mgr(ctx, from, ToManager::Refused { epoch });
            return;
        }
        let chunk = self.record.id;
        let accepted = ToManager::Accepted {
            epoch,
            upto: last_op,
            lease_left: self.lease_left(ctx, from),
        };
        let early = ctx.cfg.planted.accepted_before_persist;
        if early {
            self.to_mgr(ctx, from, accepted.clone());
        }
        // Block data goes to the block store; the change is kept pending without it.
        let ops = self.blocks.take_data(ctx, chunk, ops);
        self.record.data.accept_batch(&ops, confirm);
        // Every few deltas or changes the durable copy takes the chunk's tables (and
        // shares their nodes); in between it defers or applies the changes, copying only
        // the nodes they touch. Not at every delta: a node shared is copied by whichever
        // side changes it next, and the chunk would copy each node it changes once per
        // batch. Not only by deltas: a busy store's batches carry a hundred changes, and
        // 64 of them made deferred lists a server's checkpoints applied by the thousand.
        use crate::io::persist::{SHARE_TABLES_EVERY, SHARE_TABLES_OPS};
        self.unshared = self.unshared.saturating_add(ops.len() as u32);
        let share =
            self.deltas.is_multiple_of(SHARE_TABLES_EVERY) || self.unshared >= SHARE_TABLES_OPS;
        if share {
            self.unshared = 0;
        }
        let after = crate::io::persist::TablesAfter(share.then(|| {
            std::sync::Arc::new((self.record.data.confirmed, self.record.data.table.clone()))
        }));
        // The delta confirms what the chunk has confirmed, its CONFIRMs received on their
        // own since the last delta included: a copy applying it comes out at the chunk's
        // number and can take the tables handed with it. (With the batch's piggybacked
        // number, a chunk that had confirmed further handed tables no copy could take,
        // and the server's storage thread deferred changes by the thousand, which its
        // checkpoints then applied on the thread that commits groups, for a second.)
        let confirm = confirm.max(self.record.data.confirmed);
        self.persist_delta(
            ctx,
            PersistOp::Accept {
                chunk,
                ops,
                confirm,
                after,
            },
        );
        ctx.observe(Observation::ChunkServed {
            chunk: self.record.id,
            epoch,
        });
        if !early {
            self.to_mgr(ctx, from, accepted);
        }
    }

    /// SafeTalk CONFIRM (CL/CR): move confirmed changes into the tables.
    ///
    /// Tenure: a CONFIRM on its own is not persisted; it reaches the disk with the next
    /// ACCEPT (which carries a CONFIRM at least as high) or whole record. Losing it in a
    /// crash is losing the message: the changes stay durable in the L/R-lists, and the
    /// recovery merge applies every pending change anyway (seed 004 §4.1), so nothing
    /// confirmed is lost — and a SafeTalk round costs one durable write per chunk.
    pub(super) fn confirm(
        &mut self,
        ctx: &mut Ctx<'_>,
        from: DeviceId,
        epoch: Epoch,
        upto: Version,
    ) {
        if self.serving(ctx, from, epoch) && upto > self.record.data.confirmed {
            let durable = (self.durable_tables.as_ref())
                .is_some_and(|d| crate::rows::unchanged(d, &self.record.data.table));
            self.record.data.confirm(upto.min(self.last_accepted()));
            if durable {
                // The durable copy comes to these tables by confirming as far (what a
                // record's head asks of it: `PersistOp::PutChunkHead`).
                self.durable_tables = Some(self.record.data.table.clone());
            }
        }
    }

    // ---- timers ------------------------------------------------------------------
}
