//! The seed's maintainer (seed 003): heartbeats, reactions to the soft-state store's
//! changes, the persistent store sent to and pulled from nodes, and answers held until then.

use super::*;
use crate::ctx::Ctx;
use crate::ids::{ClientId, DeviceId};
use crate::lookup::sss::SssChange;
use crate::lookup::{LookupMsg, LookupRequest};
use crate::msg::Msg;

impl Node {
    // ---- maintainer ------------------------------------------------------------------

    /// The maintainer, with the self-stabilising checks of seed 003.
    pub(super) fn maintain(&mut self, ctx: &mut Ctx) {
        self.next_maintain = Some(ctx.now + Self::s(ctx).long_timeout);
        if ctx.cfg.planted.lookup_no_long_timeout {
            self.next_maintain = None;
        }
        if self.join.is_some() {
            // Join() blocks the maintainer in the seed.
            return;
        }
        let t = Self::s(ctx).hot_spares;
        let was = (self.active, self.leader, self.start);
        if self.active && self.start.is_none() {
            // I2a's first conjunct (passive ⇔ activeStartTime = INFINITE), which the
            // seed's self-stabilising maintainer checks for passive nodes only: an active
            // node with an infinite age (state corruption) is in no soft-state store, so
            // it would neither lead nor step down, ever. It becomes passive (and joins
            // again below if the service needs it).
            self.active = false;
            self.leader = false;
            self.data.step_down(ctx);
        }
        if !self.active {
            if self.start.is_some() || self.leader {
                self.start = None;
                self.leader = false;
            }
            let count = self.active_nodes().len();
            if count < t || self.is_ups(ctx) {
                self.join_start(ctx);
            }
        } else {
            let nodes = self.active_nodes();
            let mine = (self.start.unwrap_or_default(), self.me);
            let earliest = nodes.first() == Some(&mine);
            if self.leader && !earliest && !ctx.cfg.planted.lookup_keep_leadership {
                self.leader = false;
            }
            let youngest_non_ups = nodes
                .iter()
                .filter(|(_, d)| Self::s(ctx).ups != Some(*d))
                .max()
                == Some(&mine);
            let surplus = nodes.len() > t + 1 && !ctx.cfg.planted.lookup_admit_all;
            if surplus && !self.is_ups(ctx) && youngest_non_ups {
                self.active = false;
                self.start = None;
                self.leader = false;
                // SSS_Delete("LS_start_time"): volatile state goes stale from here.
                self.data.step_down(ctx);
            } else if !self.leader && earliest {
                self.leader = true;
                self.data.became_leader(ctx, self.leader_id());
            }
        }
        if (self.active, self.leader, self.start) != was {
            self.heartbeat(ctx);
            self.observe(ctx);
        }
    }

    pub(super) fn observe(&self, ctx: &mut Ctx) {
        ctx.observe(crate::io::observation::Observation::LookupState {
            state: self.state(),
            start: self.start,
        });
    }

    pub(super) fn heartbeat(&mut self, ctx: &mut Ctx) {
        let start = if self.published() { self.start } else { None };
        self.multicast(
            ctx,
            LookupMsg::Heartbeat {
                start,
                leader: self.leader,
            },
        );
        self.next_heartbeat = Some(ctx.now + Self::s(ctx).heartbeat_interval);
        self.resend_store(ctx);
    }

    pub(super) fn sss_changed(&mut self, ctx: &mut Ctx, changes: &[SssChange]) {
        if changes.is_empty() {
            return;
        }
        self.maintain(ctx);
        // A new leader in this node's view gets this node's persistent store: what an
        // acknowledged update left only here reaches whoever answers queries. Passive
        // nodes send theirs too (a node that was leader when it acknowledged an update may
        // come back passive, Nacked because `t` nodes are active).
        let now_leader = self.active_nodes().first().copied();
        if now_leader != self.seen_leader {
            self.seen_leader = now_leader;
            self.merge_to = None;
            if let Some((_, d)) = now_leader
                && d != self.me
            {
                self.send_store(ctx, d);
            }
        }
    }

    /// Send this node's persistent store to the leader `d` (as a `MergeRequest`, which
    /// it acknowledges with what this node lacks), until it answers.
    fn send_store(&mut self, ctx: &mut Ctx, d: DeviceId) {
        let persistent = self.data.persistent_store();
        if persistent.is_empty() {
            self.merge_to = None;
            return;
        }
        let persistent = crate::lookup::to_wire(persistent, ctx.now);
        ctx.send(d, Msg::Lookup(LookupMsg::MergeRequest { persistent }));
        self.merge_to = Some((d, ctx.now));
    }

    /// As leader, ask `d`, which just came up, for its persistent store (sending this
    /// node's, so that it learns what it lacks too).
    pub(super) fn pull_store(&mut self, ctx: &mut Ctx, d: DeviceId, again: bool) {
        let persistent = crate::lookup::to_wire(self.data.persistent_store(), ctx.now);
        ctx.send(d, Msg::Lookup(LookupMsg::MergeRequest { persistent }));
        let until = ctx.now + Self::s(ctx).roundtrip_delay;
        self.awaiting.insert(d, (until, again));
    }

    /// Stores asked for and not answered within a round trip are asked for once more;
    /// after that the held queries are answered without them.
    pub(super) fn expire_awaiting(&mut self, ctx: &mut Ctx) {
        let now = ctx.now;
        let due: Vec<(DeviceId, bool)> = (self.awaiting.iter())
            .filter(|(_, (until, _))| *until <= now)
            .map(|(d, (_, again))| (*d, *again))
            .collect();
        if due.is_empty() {
            return;
        }
        for (d, again) in due {
            self.awaiting.remove(&d);
            if !again && self.is_leader() && self.sss.is_up(d) {
                self.pull_store(ctx, d, true);
            }
        }
        if self.awaiting.is_empty() {
            self.release_held(ctx);
        }
    }

    /// Answer the queries held while stores were awaited (dropped if this node no longer
    /// leads: their origins answer "no leader" at their deadlines).
    pub(super) fn release_held(&mut self, ctx: &mut Ctx) {
        for (origin, client, req_id, req) in std::mem::take(&mut self.held) {
            self.answer(ctx, origin, client, req_id, &req);
        }
    }

    /// Deliver a forwarded request and send the answer this node gives, if any.
    pub(super) fn answer(
        &mut self,
        ctx: &mut Ctx,
        origin: DeviceId,
        client: ClientId,
        req_id: u64,
        req: &LookupRequest,
    ) {
        if let Some(result) = self.deliver(ctx, origin, req) {
            ctx.send(
                origin,
                Msg::Lookup(LookupMsg::Answer {
                    client,
                    req_id,
                    result,
                }),
            );
        }
    }

    /// The heartbeat's retry of an unanswered store: while `d` is still the leader in
    /// this node's view and a round trip has passed since the last send.
    fn resend_store(&mut self, ctx: &mut Ctx) {
        let Some((d, at)) = self.merge_to else {
            return;
        };
        if self.seen_leader.map(|(_, l)| l) != Some(d) {
            self.merge_to = None;
        } else if ctx.now.saturating_since(at) >= Self::s(ctx).roundtrip_delay {
            self.send_store(ctx, d);
        }
    }
}
