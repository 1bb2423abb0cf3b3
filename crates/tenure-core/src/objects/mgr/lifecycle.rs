//! The object side of the manager's life: after each applied batch (watches, collectors),
//! on entering and leaving the manager state, and its timers.

use super::*;
use crate::ctx::Ctx;
use crate::error::ClientError;
use crate::io::Output;
use crate::layout::MgrState;
use crate::layout::manager::Manager;
use crate::msg::Msg;
use crate::objects::Uuid;
use crate::objects::msg::BlockMsg;
use crate::time::Instant;
use std::time::Duration;

impl Manager {
    /// Changes were applied: deliver them to the watches, in revision order.
    pub(crate) fn objects_applied(&mut self, ctx: &mut Ctx<'_>) {
        let t = &self.host.data.table.objects;
        let confirmed = self.host.data.confirmed;
        let changed = t.revision != self.objects.watched;
        self.objects.watched = t.revision;
        let drop = ctx.cfg.planted.objects_watch_drop;
        let mut ended = Vec::new();
        for ((client, watch), w) in self.objects.watches.iter_mut() {
            if w.held.is_some_and(|v| v > confirmed) {
                continue;
            }
            // Released now: it missed what earlier batches changed.
            let released = w.held.take().is_some();
            if !changed && !released {
                continue;
            }
            match t.changes_after(&w.prefix, w.last) {
                Ok(mut changes) => {
                    if drop {
                        changes.retain(|c| c.revision % 2 == 1);
                    }
                    w.last = t.revision;
                    if !changes.is_empty() {
                        ctx.out.push(Output::ObjectEvents {
                            client: *client,
                            watch: *watch,
                            changes,
                        });
                    }
                }
                Err(e) => {
                    ended.push((*client, *watch));
                    ctx.out.push(Output::WatchEnded {
                        client: *client,
                        watch: *watch,
                        reason: e.into(),
                    });
                }
            }
        }
        for k in ended {
            self.objects.watches.remove(&k);
        }
    }

    /// This role stops managing: watches end with a redirect (the client resumes at the
    /// new manager from its last revision), reads in progress fail.
    pub(crate) fn objects_stop(&mut self, ctx: &mut Ctx<'_>) {
        let hint = self.migration.forwarding;
        for (client, watch) in std::mem::take(&mut self.objects.watches).into_keys() {
            ctx.out.push(Output::WatchEnded {
                client,
                watch,
                reason: ClientError::NotManager { hint },
            });
        }
        let store = self.store;
        for r in std::mem::take(&mut self.objects.reads).into_values() {
            reply(
                ctx,
                r.client,
                r.req_id,
                Err(ClientError::Unavailable { store }),
            );
        }
        self.objects.gc.clear();
    }

    /// A new epoch began under this manager: completeness is learnt again.
    pub(crate) fn objects_enter(&mut self, ctx: &Ctx<'_>) {
        self.objects.complete.clear();
        self.objects.probe_at = ctx.now;
        self.objects.watched = self.host.data.table.objects.revision;
    }

    // ---- timers ------------------------------------------------------------------

    /// Earliest object timer.
    pub(crate) fn objects_next_timeout(&self) -> Option<Instant> {
        use crate::time::earliest;
        if self.state != MgrState::Manager {
            return (!self.objects.watches.is_empty() || !self.objects.reads.is_empty())
                .then_some(Instant(0));
        }
        let mut t = self.objects.reads.values().map(|r| r.deadline).min();
        let gc_wait = self.objects.gc.values().filter_map(|g| g.deleting.as_ref());
        t = earliest(t, gc_wait.map(|d| d.deadline).min());
        if self
            .live()
            .iter()
            .any(|c| !self.objects.complete.contains(c))
        {
            t = earliest(t, Some(self.objects.probe_at));
        }
        if !self.host.data.table.objects.attention.is_empty() {
            t = earliest(t, Some(self.objects.gc_at));
        }
        t
    }

    /// Fire due object timers: read timeouts, deletions not answered, completeness
    /// probes, and the collectors' spawn step.
    pub(crate) fn objects_tick(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        if self.state != MgrState::Manager {
            if !self.objects.watches.is_empty() || !self.objects.reads.is_empty() {
                self.objects_stop(ctx);
            }
            return;
        }
        let due: Vec<u64> = (self.objects.reads.iter())
            .filter(|(_, r)| r.deadline <= now)
            .map(|(t, _)| *t)
            .collect();
        for tag in due {
            if let Some(mut r) = self.objects.reads.remove(&tag) {
                r.tried.insert(r.chunk);
                self.retry_read(ctx, tag, r);
            }
        }
        let late: Vec<(String, Uuid)> = (self.objects.gc.iter())
            .filter(|(_, t)| t.deleting.as_ref().is_some_and(|d| d.deadline <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for id in late {
            self.deletion_late(ctx, id);
        }
        if self.objects.probe_at <= now {
            self.objects.probe_at = now + PROBE_EVERY;
            for c in self.live() {
                if !self.objects.complete.contains(&c) {
                    ctx.send(
                        c.device,
                        Msg::Blocks(BlockMsg::Probe {
                            store: self.store,
                            chunk: c,
                            epoch: self.epoch,
                        }),
                    );
                }
            }
        }
        if self.objects.gc_at <= now && self.leases_valid(ctx) {
            let every = (ctx.cfg.objects.checkin_interval / 2).max(Duration::from_millis(10));
            self.objects.gc_at = now + every;
            self.spawn_collectors(ctx);
        }
    }
}
