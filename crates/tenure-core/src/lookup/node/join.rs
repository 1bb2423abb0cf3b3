//! The seed's `Join()` (a node asking the leader to become active) and the leader thread's
//! answer to it (seed 003).

use super::*;
use crate::ctx::Ctx;
use crate::ids::DeviceId;
use crate::lookup::{Entry, LookupMsg};
use crate::msg::Msg;

impl Node {
    // ---- Join() --------------------------------------------------------------------

    pub(super) fn join_start(&mut self, ctx: &mut Ctx) {
        self.join_ask(ctx, 0);
    }

    fn join_ask(&mut self, ctx: &mut Ctx, retry: u32) {
        self.attempts += 1;
        let attempt = self.attempts;
        let ups = self.is_ups(ctx);
        self.multicast(ctx, LookupMsg::CanIJoin { attempt, ups });
        self.join = Some(Join::Asking {
            attempt,
            retry,
            until: ctx.now + Self::s(ctx).roundtrip_delay,
        });
        if self.devices.iter().all(|d| *d == self.me) {
            // Nobody to ask: the timeout path, at once.
            self.join_timeout(ctx);
        }
    }

    /// `bIsActive = TRUE; activeStartTime = GetLocalTime(); Sleep(MVRI)`.
    fn join_activate(&mut self, ctx: &mut Ctx) {
        self.active = true;
        self.start = Some(ctx.now);
        self.join = Some(Join::WarmingUp {
            until: ctx.now + Self::s(ctx).max_volatile_refresh_interval,
        });
        self.observe(ctx);
    }

    pub(super) fn join_timeout(&mut self, ctx: &mut Ctx) {
        match self.join {
            Some(Join::Asking { retry, .. }) if retry < 2 => {
                self.join = Some(Join::Backoff {
                    retry,
                    until: ctx.now + Self::s(ctx).heartbeat_interval * 3,
                });
            }
            // The self-stabilising variant: no answer after three tries — assume there is
            // no leader and become active (and, once published, leader), with the
            // persistent entries this node booted with (a full outage is over).
            Some(Join::Asking { .. }) => {
                self.data.revive_restored(ctx);
                let persistent = crate::lookup::to_wire(self.data.persistent_store(), ctx.now);
                self.multicast(ctx, LookupMsg::MergeRequest { persistent });
                self.join_activate(ctx)
            }
            Some(Join::Backoff { retry, .. }) => self.join_ask(ctx, retry + 1),
            Some(Join::WarmingUp { .. }) => {
                // SSS_Update("LS_start_time", activeStartTime): publish at once.
                self.join = None;
                self.heartbeat(ctx);
                self.maintain(ctx);
            }
            None => {}
        }
    }

    pub(super) fn on_ack(
        &mut self,
        ctx: &mut Ctx,
        from: DeviceId,
        attempt: u64,
        persistent: Vec<Entry>,
    ) {
        if !matches!(self.join, Some(Join::Asking { attempt: a, .. }) if a == attempt) {
            return;
        }
        // "streamed persistent store and ack(UPS_token)": take the leader's store, and
        // send back what it lacks (anti-entropy, so an acknowledged entry kept only here
        // is not lost to a leader that missed it).
        let persistent = crate::lookup::from_wire(persistent, ctx.now);
        let back = self.data.merge_persistent(ctx, persistent, None);
        self.data.forget_restored(ctx);
        if !back.is_empty() {
            let back = crate::lookup::to_wire(back, ctx.now);
            ctx.send(from, Msg::Lookup(LookupMsg::Merge { persistent: back }));
        }
        self.join_activate(ctx);
    }

    pub(super) fn on_nack(&mut self, ctx: &mut Ctx, attempt: u64) {
        if matches!(self.join, Some(Join::Asking { attempt: a, .. }) if a == attempt) {
            // "t+1 active nodes are already running": Join() returns.
            self.join = None;
            self.data.forget_restored(ctx);
        }
    }

    // ---- leader thread ---------------------------------------------------------------

    pub(super) fn on_can_i_join(&mut self, ctx: &mut Ctx, from: DeviceId, attempt: u64) {
        if !(self.leader && self.published()) {
            return;
        }
        let sender_ups = Self::s(ctx).ups == Some(from);
        let admit = if ctx.cfg.planted.lookup_admit_all {
            true
        } else {
            self.active_nodes().len() < Self::s(ctx).hot_spares || sender_ups
        };
        let msg = if admit {
            LookupMsg::Ack {
                attempt,
                persistent: crate::lookup::to_wire(self.data.persistent_store(), ctx.now),
            }
        } else {
            LookupMsg::Nack { attempt }
        };
        ctx.send(from, Msg::Lookup(msg));
    }
}
