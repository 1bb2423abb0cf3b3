//! The manager's timers: the earliest deadline, and what happens when one passes.

use super::*;
use crate::ctx::Ctx;
use crate::ids::ChunkId;
use crate::io::observation::FailedWhy;
use crate::layout::MgrState;
use crate::time::Instant;

impl Manager {
    /// Earliest timer.
    pub fn next_timeout(&self) -> Option<Instant> {
        use crate::time::earliest;
        let mut t = None;
        match self.state() {
            MgrState::Manager | MgrState::GatheringChunks | MgrState::GatheringLeases => {
                t = earliest(t, self.chunkfail.values().min().copied());
                t = earliest(t, self.timeout.values().min().copied());
            }
            _ => {}
        }
        t = earliest(t, self.tx.as_ref().map(|x| x.deadline));
        t = earliest(t, self.stage.outgoing().map(|o| o.deadline));
        t = earliest(t, self.stage.early_votes().iter().map(|v| v.until).min());
        t = earliest(t, self.host.inflight.as_ref().map(|b| b.deadline));
        t = earliest(t, self.objects_next_timeout());
        if self.state() == MgrState::Manager {
            // outside policies run periodically while managing
            t = earliest(t, Some(self.stable_since));
            t = earliest(t, self.policy.deferred.as_ref().map(|d| d.1));
            t = earliest(t, self.clients.liveness.next_deadline());
            t = earliest(
                t,
                self.host
                    .speculative
                    .locks
                    .next_deadline()
                    .map(|d| d.max(self.clients.lock_tick_at + std::time::Duration::from_micros(1)))
                    .map(|d| self.local_at(d)),
            );
        }
        t
    }

    /// Fire due timers.
    pub fn on_tick(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        self.rejoin.expire(now);
        if let Stage::None(early) = &mut self.stage {
            early.retain(|v| v.until > now);
        }
        if self.tx.as_ref().is_some_and(|t| t.deadline <= now) {
            self.abort_tx(ctx);
        }
        if let Some(out) = self.stage.outgoing().filter(|o| o.deadline <= now) {
            // Tenure: the incoming manager never answered; step down and let the chunks
            // regenerate (resuming could run beside a committed successor).
            let fwd = out.new_mgr;
            self.newly_awake(ctx);
            self.forwarding = Some(fwd);
        }
        // SafeTalk: chunks that did not answer within the ack timeout are failed; the
        // manager goes on only while quorum and coverage hold (mark_failed).
        // Tenure: while this device's own chunk has not accepted either, the device is
        // slow (its disk, its CPU), not the peers: wait up to the longest ack timeout
        // before blaming any chunk.
        let t = &ctx.cfg.timing;
        let longest = t.ack_timeout_longest();
        let me = ctx.me();
        if let Some(b) = self.host.inflight.as_mut().filter(|b| b.deadline <= now)
            && b.waiting.iter().any(|c| c.device == me)
            && b.deadline < b.sent + longest
        {
            b.deadline = b.sent + longest;
        }
        if let Some(b) = self.host.inflight.as_ref().filter(|b| b.deadline <= now) {
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
                if self.state() != MgrState::Manager {
                    return;
                }
                // Tenure: a chunk whose device is still heard from is slow (its disk
                // stalled on a flush, its CPU loaded), not gone: it is spared until its
                // device falls silent (`Timing::silence` after the last message from
                // it), and no longer than one lease from the batch's sending. Blaming it
                // costs an epoch transition, which loads every device more; a dead or
                // cut-off device stops being heard and is blamed then. This device's own
                // chunk is heard as long as this manager runs: a late ACCEPTED of it is its
                // disk's flush, which every store of this device waits on alike (all three
                // devices once marked their own chunks failed together, each behind a
                // one-second flush while the disk took checkpoints).
                let heard = match c.device == me {
                    true => Some(sent + lease),
                    false => ctx.silent_at(c.device).map(|s| s.min(sent + lease)),
                };
                if let Some(until) = heard
                    && until > now
                {
                    spared_until = Some(spared_until.map_or(until, |s: Instant| s.min(until)));
                    continue;
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
                if !self.mark_failed(ctx, c, FailedWhy::AcceptLate) {
                    return;
                }
            }
            if let (Some(until), Some(b)) = (spared_until, self.host.inflight.as_mut()) {
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
            match self.state() {
                // §5.3.10 timeout(chunk)
                MgrState::GatheringChunks => {
                    self.regen_mut().outstanding.remove(&c);
                    self.regen_mut().awaiting.remove(&c);
                    self.check_gathered(ctx);
                }
                // Tenure: transfer never acknowledged (or, §5.3.10 timeout(chunk), an
                // acquire of a joined layout's chunk never answered)
                MgrState::GatheringLeases => {
                    self.regen_mut().renewal_iffy.remove(&c);
                    self.regen_mut().outstanding.remove(&c);
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
            match self.state() {
                // §5.3.7 chunkfail(chunk)
                MgrState::Manager => {
                    self.chunkfail.remove(&c);
                    if !self.failed.contains(&c) {
                        if !self.mark_failed(ctx, c, FailedWhy::LeaseExpired) {
                            return;
                        }
                    } else {
                        self.recovered.remove(&c);
                    }
                }
                // §5.3.10 chunkfail(c)
                MgrState::GatheringChunks => {
                    self.chunkfail.remove(&c);
                    self.regen_mut().won.remove(&c);
                }
                // §5.3.12 chunkfail(chunk)
                MgrState::GatheringLeases => {
                    self.chunkfail.remove(&c);
                    self.regen_mut().renewal_iffy.remove(&c);
                    self.regen_mut().won.remove(&c);
                    if !self.quorum_and_coverage(ctx, &self.regen().won) {
                        self.newly_awake(ctx);
                        return;
                    }
                    self.check_leases_gathered(ctx);
                }
                _ => {}
            }
        }
        if self.state() == MgrState::Manager {
            self.start_deferred(ctx);
        }
        if self.state() == MgrState::Manager {
            self.lock_timers(ctx);
        }
        if self.state() == MgrState::Manager && self.stable_since <= now {
            self.run_policies(ctx);
        }
        self.objects_tick(ctx);
    }
}
