//! The object side of the manager's life: after each applied batch (watches, collectors),
//! on entering and leaving the manager state, and its timers.

use super::*;
use crate::ctx::Ctx;
use crate::error::ClientError;
use crate::layout::MgrState;
use crate::layout::manager::StoreAccess;
use crate::msg::Msg;
use crate::objects::Uuid;
use crate::objects::msg::BlockMsg;
use crate::time::Instant;
use std::time::Duration;

impl ObjMgr {
    /// This role stops managing: watches end with a redirect (the client resumes at the
    /// new manager from its last revision), reads in progress fail.
    pub(crate) fn stop(&mut self, st: &mut StoreAccess<'_>, ctx: &mut Ctx<'_>) {
        self.end_watches(st, ctx);
        let store = st.store;
        for r in std::mem::take(&mut self.reads).into_values() {
            reply(
                ctx,
                r.client,
                r.req_id,
                Err(ClientError::Unavailable { store }),
            );
        }
        self.gc.clear();
    }

    /// A new epoch began under this manager: completeness is learnt again.
    pub(crate) fn enter(&mut self, st: &mut StoreAccess<'_>, ctx: &Ctx<'_>) {
        self.complete.clear();
        self.probe_at = ctx.now;
        self.watched = st.host.data.table.objects.revision;
    }

    // ---- timers ------------------------------------------------------------------

    /// Earliest object timer, given whether the role is managing, its live chunks, and
    /// whether the committed objects table has objects needing attention.
    pub(crate) fn next_timeout(
        &self,
        managing: bool,
        live: &BTreeSet<ChunkId>,
        attention: bool,
    ) -> Option<Instant> {
        use crate::time::earliest;
        if !managing {
            return (!self.watches.is_empty() || !self.reads.is_empty()).then_some(Instant(0));
        }
        let mut t = self.reads.values().map(|r| r.deadline).min();
        t = earliest(t, self.poll_deadline());
        let gc_wait = self.gc.values().filter_map(|g| g.deleting.as_ref());
        t = earliest(t, gc_wait.map(|d| d.deadline).min());
        if live.iter().any(|c| !self.complete.contains(c)) {
            t = earliest(t, Some(self.probe_at));
        }
        if attention {
            t = earliest(t, Some(self.gc_at));
        }
        t
    }

    /// Fire due object timers: read timeouts, deletions not answered, completeness
    /// probes, and the collectors' spawn step.
    pub(crate) fn tick(&mut self, st: &mut StoreAccess<'_>, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        if st.state != MgrState::Manager {
            if !self.watches.is_empty() || !self.reads.is_empty() {
                self.stop(st, ctx);
            }
            return;
        }
        self.expire_polls(ctx);
        let due: Vec<u64> = (self.reads.iter())
            .filter(|(_, r)| r.deadline <= now)
            .map(|(t, _)| *t)
            .collect();
        for tag in due {
            if let Some(mut r) = self.reads.remove(&tag) {
                r.tried.insert(r.chunk);
                self.retry_read(st, ctx, tag, r);
            }
        }
        let late: Vec<(String, Uuid)> = (self.gc.iter())
            .filter(|(_, t)| t.deleting.as_ref().is_some_and(|d| d.deadline <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for id in late {
            self.deletion_late(st, ctx, id);
        }
        if self.probe_at <= now {
            self.probe_at = now + PROBE_EVERY;
            for c in st.live() {
                if !self.complete.contains(&c) {
                    ctx.send(
                        c.device,
                        Msg::Blocks(BlockMsg::Probe {
                            store: st.store,
                            chunk: c,
                            epoch: st.epoch,
                        }),
                    );
                }
            }
        }
        if self.gc_at <= now && st.leases_valid(ctx) {
            let every = (ctx.cfg.objects.checkin_interval / 2).max(Duration::from_millis(10));
            self.gc_at = now + every;
            self.spawn_collectors(st, ctx);
        }
    }
}
