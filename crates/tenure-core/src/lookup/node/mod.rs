//! A lookup node (seed 003): its states, `Join()`, the leader thread and the maintainer.
//!
//! The seed's threads become one event-driven machine:
//! - `main()` starts passive and calls `Join()`; the maintainer then runs on every
//!   `LS_start_time` change and "node down" of the soft-state store and every
//!   `LONG_TIMEOUT` (the self-stabilising variant);
//! - `Join()` multicasts Can-I-Join and waits `ROUNDTRIP_COMMUNICATION_DELAY` for Ack or
//!   Nack; a timeout is retried twice after `3 × SS_HEARTBEAT_INTERVAL` each, then (the
//!   self-stabilising variant) the node assumes there is no leader and becomes active;
//!   an active node sleeps `MAX_VOLATILE_REFRESH_INTERVAL` (warm-up: it applies updates,
//!   but its `LS_start_time` is not yet published) before `SSS_Update`;
//! - the leader thread answers Can-I-Join: Ack (with the persistent store) while fewer
//!   than `t` nodes are active or when the sender is the UPS-designated node, else Nack;
//! - the main thread applies updates when active and answers queries when leader
//!   ([`super::entries`]).

use super::entries::Entries;
use super::sss::{Peer, Sss};
use super::{
    Entry, LeaderId, LookupError, LookupMsg, LookupRequest, LookupResponse, LookupSettings,
    NodeView,
};
use crate::ctx::Ctx;
use crate::ids::{ClientId, DeviceId};
use crate::io::Output;
use crate::io::request::Response;
use crate::msg::Msg;
use crate::time::{Instant, earliest};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod join;
mod maintainer;

/// A node's state, as the seed names it (plus the phases of `Join()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeState {
    /// Passive, not joining.
    Passive,
    /// Passive, in `Join()`: Can-I-Join sent, or sleeping before a retry.
    Joining,
    /// `bIsActive` but still sleeping `MAX_VOLATILE_REFRESH_INTERVAL` (building up
    /// volatile state; `LS_start_time` not yet published).
    WarmingUp,
    /// Active (a hot spare).
    Active,
    /// Active and the leader.
    Leader,
}

/// Where `Join()` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Join {
    /// Can-I-Join multicast; waiting `ROUNDTRIP_COMMUNICATION_DELAY` for an answer.
    Asking {
        attempt: u64,
        retry: u32,
        until: Instant,
    },
    /// `Sleep(3 * SS_HEARTBEAT_INTERVAL)` before the next try.
    Backoff { retry: u32, until: Instant },
    /// `Sleep(MAX_VOLATILE_REFRESH_INTERVAL)`: building up volatile state.
    WarmingUp { until: Instant },
}

/// A request this node multicast for a client, waiting for the leader's answer.
#[derive(Clone, Debug)]
pub(super) struct Pending {
    pub(super) deadline: Instant,
}

/// One lookup node.
pub struct Node {
    /// Off: the device runs no lookup node (`[lookup] enabled = false`).
    enabled: bool,
    pub(super) me: DeviceId,
    /// Every device of the cluster (the multicast group).
    pub(super) devices: Vec<DeviceId>,
    /// `bIsActive`.
    pub(super) active: bool,
    /// `bIsLeader`.
    pub(super) leader: bool,
    /// `activeStartTime` (`None`: INFINITE).
    pub(super) start: Option<Instant>,
    join: Option<Join>,
    attempts: u64,
    pub(super) sss: Sss,
    pub(super) data: Entries,
    next_heartbeat: Option<Instant>,
    next_maintain: Option<Instant>,
    /// Requests multicast by this node as origin, by (client, request id).
    pub(super) pending: BTreeMap<(ClientId, u64), Pending>,
    /// The leader this node last saw in its soft-state store (anti-entropy of the
    /// persistent store goes to each new one).
    seen_leader: Option<(Instant, DeviceId)>,
    /// The leader this node's persistent store was last sent to and when, until that
    /// leader answers (its `Merge`, possibly empty, acknowledges it). The store is sent
    /// again with the heartbeats meanwhile: a single message lost at a partition's heal
    /// left the old leader answering values from before it (found by `tenure chaos`).
    merge_to: Option<(DeviceId, Instant)>,
    /// As leader, the nodes that came up (back from a partition or a restart) whose
    /// persistent stores it asked for: each with its deadline and whether it was asked
    /// again. Queries wait until they have answered (or their deadlines pass), so that an
    /// update acknowledged on the other side of a partition is not answered older.
    awaiting: BTreeMap<DeviceId, (Instant, bool)>,
    /// Queries held meanwhile: (origin, client, request id, request).
    held: Vec<(DeviceId, ClientId, u64, LookupRequest)>,
    /// Entries this device provides itself (DESIGN §3: where it manages stores, that it
    /// is alive), refreshed by the node like any provider's.
    own: BTreeMap<String, Own>,
    /// The last version stamp this device gave one of its own entries.
    own_stamp: u64,
}

/// One of the device's own entries.
#[derive(Clone, Debug)]
struct Own {
    value: Vec<u8>,
    next: Instant,
}

/// The client id a device's own updates carry (no client waits for them).
pub const OWN_CLIENT: ClientId = ClientId(u64::MAX);

impl Node {
    /// An empty node, replaced by [`Node::boot`] before the device handles anything.
    pub(crate) fn placeholder() -> Node {
        Node {
            enabled: false,
            me: DeviceId(0),
            devices: Vec::new(),
            active: false,
            leader: false,
            start: None,
            join: None,
            attempts: 0,
            sss: Sss::default(),
            data: Entries::default(),
            next_heartbeat: None,
            next_maintain: None,
            pending: BTreeMap::new(),
            seen_leader: None,
            merge_to: None,
            awaiting: BTreeMap::new(),
            held: Vec::new(),
            own: BTreeMap::new(),
            own_stamp: 0,
        }
    }

    /// The cluster's devices changed (membership, DESIGN §6): heartbeats and multicasts
    /// go to the new set.
    pub fn set_devices(&mut self, devices: Vec<DeviceId>) {
        if self.enabled {
            self.devices = devices;
        }
    }

    /// `main()`: a node boots passive with its persistent entries and calls `Join()`.
    pub fn boot(ctx: &mut Ctx, persistent: Vec<Entry>) -> Node {
        if !ctx.cfg.lookup.enabled {
            return Node::placeholder();
        }
        let devices = ctx.cfg.cluster.devices.clone();
        let mut n = Node {
            enabled: true,
            me: ctx.me(),
            devices,
            active: false,
            leader: false,
            start: None,
            join: None,
            attempts: 0,
            sss: Sss::default(),
            data: Entries::restored(ctx, persistent),
            next_heartbeat: Some(ctx.now),
            next_maintain: Some(ctx.now + ctx.cfg.lookup.long_timeout),
            pending: BTreeMap::new(),
            seen_leader: None,
            merge_to: None,
            awaiting: BTreeMap::new(),
            held: Vec::new(),
            own: BTreeMap::new(),
            own_stamp: 0,
        };
        n.join_start(ctx);
        n
    }

    fn s<'a>(ctx: &'a Ctx) -> &'a LookupSettings {
        &ctx.cfg.lookup
    }

    /// The node's state.
    pub fn state(&self) -> NodeState {
        match (self.join, self.active, self.leader) {
            (Some(Join::WarmingUp { .. }), _, _) => NodeState::WarmingUp,
            (Some(_), _, _) => NodeState::Joining,
            (None, true, true) => NodeState::Leader,
            (None, true, false) => NodeState::Active,
            (None, false, _) => NodeState::Passive,
        }
    }

    /// Whether this node is the UPS-designated one.
    fn is_ups(&self, ctx: &Ctx) -> bool {
        Self::s(ctx).ups == Some(self.me)
    }

    /// Whether the node's `LS_start_time` is published (active and past the warm-up).
    fn published(&self) -> bool {
        self.active && self.join.is_none()
    }

    /// `set_of_LS_active_nodes` as this node's SSS shows it, itself included.
    pub(super) fn active_nodes(&self) -> Vec<(Instant, DeviceId)> {
        let mut v: Vec<_> = self.sss.active().collect();
        if let (true, Some(s)) = (self.published(), self.start) {
            v.push((s, self.me));
        }
        v.sort();
        v
    }

    /// The oldest active node by `<activeStartTime, id>`: the weak leader.
    pub fn oldest_active(&self) -> Option<DeviceId> {
        self.active_nodes().first().map(|(_, d)| *d)
    }

    /// This node as a leader names itself in answers and events.
    pub(super) fn leader_id(&self) -> LeaderId {
        LeaderId {
            start: self.start.unwrap_or_default(),
            device: self.me,
        }
    }

    /// Whether the node applies updates (`bIsActive`, warm-up included: the sleep builds
    /// up volatile state).
    pub(in crate::lookup) fn applies_updates(&self) -> bool {
        self.active
    }

    /// Every other device of the cluster.
    pub(in crate::lookup) fn others(&self) -> impl Iterator<Item = DeviceId> + '_ {
        self.devices.iter().copied().filter(|d| *d != self.me)
    }

    fn multicast(&self, ctx: &mut Ctx, msg: LookupMsg) {
        let targets: Vec<DeviceId> = self.others().collect();
        for d in targets {
            ctx.send(d, Msg::Lookup(msg.clone()));
        }
    }

    // ---- inputs ----------------------------------------------------------------------

    /// A message from another node.
    pub fn on_msg(&mut self, ctx: &mut Ctx, from: DeviceId, msg: LookupMsg) {
        if !self.enabled {
            return;
        }
        match msg {
            LookupMsg::Heartbeat { start, leader } => {
                if from == self.me {
                    return;
                }
                let arrived = !self.sss.is_up(from);
                let change = self.sss.heartbeat(ctx.now, from, start, leader);
                self.sss_changed(ctx, change.as_slice());
                if arrived && self.is_leader() && !ctx.cfg.planted.lookup_no_pull {
                    self.pull_store(ctx, from, false);
                }
            }
            LookupMsg::CanIJoin { attempt, .. } => self.on_can_i_join(ctx, from, attempt),
            LookupMsg::Ack {
                attempt,
                persistent,
            } => self.on_ack(ctx, from, attempt, persistent),
            LookupMsg::Nack { attempt } => self.on_nack(ctx, attempt),
            LookupMsg::Merge { persistent } => {
                if self.merge_to.is_some_and(|(d, _)| d == from) {
                    self.merge_to = None;
                }
                if self.active {
                    let lid = self.is_leader().then(|| self.leader_id());
                    let persistent = super::from_wire(persistent, ctx.now);
                    self.data.merge_persistent(ctx, persistent, lid);
                }
                if self.awaiting.remove(&from).is_some() && self.awaiting.is_empty() {
                    self.release_held(ctx);
                }
            }
            LookupMsg::MergeRequest { persistent } => {
                // Every node answers (a passive one may hold what the others lost).
                let lid = self.is_leader().then(|| self.leader_id());
                let persistent = super::from_wire(persistent, ctx.now);
                let back = self.data.merge_persistent(ctx, persistent, lid);
                // Answered even when empty: the answer acknowledges the store.
                if from != self.me || !back.is_empty() {
                    let back = super::to_wire(back, ctx.now);
                    ctx.send(from, Msg::Lookup(LookupMsg::Merge { persistent: back }));
                }
            }
            LookupMsg::Forward {
                origin,
                client,
                req_id,
                req,
            } => {
                // The origin validated it; a request that fails here comes from a
                // misbehaving peer and changes nothing.
                if super::entries::validate(Self::s(ctx), &req).is_err()
                    || matches!(req, LookupRequest::Status)
                {
                    return;
                }
                let query = matches!(req, LookupRequest::Get { .. } | LookupRequest::List { .. });
                if query && self.is_leader() && !self.awaiting.is_empty() {
                    self.held.push((origin, client, req_id, req));
                    return;
                }
                self.answer(ctx, origin, client, req_id, &req);
            }
            LookupMsg::Answer {
                client,
                req_id,
                result,
            } => {
                if self.pending.remove(&(client, req_id)).is_some() {
                    reply(ctx, client, req_id, result);
                }
            }
            LookupMsg::Event(ev) => ctx.out.push(Output::LookupEvent(ev)),
            LookupMsg::Meta { key, meta } => self.data.cache_meta(key, meta),
        }
    }

    /// A client request at this device (its origin): validate, multicast, and answer now
    /// (volatile updates, or this node is the leader) or when the leader answers.
    pub fn on_request(&mut self, ctx: &mut Ctx, client: ClientId, req_id: u64, req: LookupRequest) {
        if !self.enabled {
            return reply(ctx, client, req_id, Err(LookupError::NoLeader));
        }
        if let Err(e) = super::entries::validate(Self::s(ctx), &req) {
            return reply(ctx, client, req_id, Err(e));
        }
        if let LookupRequest::Status = req {
            let v = self.view();
            return reply(ctx, client, req_id, Ok(LookupResponse::Status(v)));
        }
        let me = self.me;
        // Apply here first (this node is one of the multicast's recipients).
        let local = self.deliver(ctx, me, &req);
        // The multicast goes to every other node, not only to those the soft-state store
        // shows up: for a heartbeat after a boot that store is empty, and an update
        // multicast to nobody is lost at every node though the origin accepted it.
        let forward = LookupMsg::Forward {
            origin: me,
            client,
            req_id,
            req: req.clone(),
        };
        self.multicast(ctx, forward);
        if let Some(result) = local {
            return reply(ctx, client, req_id, result);
        }
        if let Some(result) = self.data.unacknowledged(&req) {
            // An unacknowledged update is only worth "sent" if some node applies it.
            if !self.applies_updates() && self.active_nodes().is_empty() {
                return reply(ctx, client, req_id, Err(LookupError::NoLeader));
            }
            return reply(ctx, client, req_id, result);
        }
        let deadline = ctx.now + Self::s(ctx).roundtrip_delay;
        self.pending.insert((client, req_id), Pending { deadline });
    }

    /// Provide an entry of the device's own (volatile, refreshed every half
    /// `MAX_VOLATILE_REFRESH_INTERVAL` until withdrawn): multicast it now.
    pub fn provide(&mut self, ctx: &mut Ctx, key: String, value: Vec<u8>) {
        if !self.enabled {
            return;
        }
        self.own.insert(
            key.clone(),
            Own {
                value,
                next: ctx.now,
            },
        );
        self.refresh_own(ctx, &key);
    }

    /// Stop providing an entry and revoke it.
    pub fn withdraw(&mut self, ctx: &mut Ctx, key: &str) {
        if self.own.remove(key).is_none() {
            return;
        }
        let version = self.own_version(ctx);
        let req = LookupRequest::Revoke {
            key: key.to_string(),
            version,
            durability: super::Durability::Volatile,
        };
        self.multicast_own(ctx, req);
    }

    fn own_version(&mut self, ctx: &Ctx) -> super::EntryVersion {
        self.own_stamp = ctx.now.as_micros().max(self.own_stamp + 1);
        super::EntryVersion {
            stamp: self.own_stamp,
            provider: self.me.0,
        }
    }

    fn refresh_own(&mut self, ctx: &mut Ctx, key: &str) {
        let interval = Self::s(ctx).max_volatile_refresh_interval / 2;
        let version = self.own_version(ctx);
        let Some(own) = self.own.get_mut(key) else {
            return;
        };
        own.next = ctx.now + interval;
        let req = LookupRequest::Publish {
            key: key.to_string(),
            value: own.value.clone(),
            version,
            interval,
            durability: super::Durability::Volatile,
            adapt: super::IntervalRange::fixed(interval),
        };
        self.multicast_own(ctx, req);
    }

    /// Apply an own update here and multicast it; nobody waits for an answer.
    fn multicast_own(&mut self, ctx: &mut Ctx, req: LookupRequest) {
        let me = self.me;
        let _ = self.deliver(ctx, me, &req);
        let forward = LookupMsg::Forward {
            origin: me,
            client: OWN_CLIENT,
            req_id: 0,
            req,
        };
        self.multicast(ctx, forward);
    }

    /// Timers.
    pub fn on_tick(&mut self, ctx: &mut Ctx) {
        let now = ctx.now;
        let due: Vec<String> = (self.own.iter())
            .filter(|(_, o)| o.next <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for k in due {
            self.refresh_own(ctx, &k);
        }
        if self.next_heartbeat.is_some_and(|t| t <= now) {
            self.heartbeat(ctx);
        }
        self.expire_awaiting(ctx);
        let down = self.sss.expire(now, Self::s(ctx).down_after());
        if !ctx.cfg.planted.lookup_lazy_failover {
            self.sss_changed(ctx, &down);
        }
        let join_due = match self.join {
            Some(Join::Asking { until, .. })
            | Some(Join::Backoff { until, .. })
            | Some(Join::WarmingUp { until }) => until <= now,
            None => false,
        };
        if join_due {
            self.join_timeout(ctx);
        }
        if self.next_maintain.is_some_and(|t| t <= now) {
            self.maintain(ctx);
        }
        let expired: Vec<(ClientId, u64)> = (self.pending.iter())
            .filter(|(_, p)| p.deadline <= now)
            .map(|(k, _)| *k)
            .collect();
        for (client, req_id) in expired {
            self.pending.remove(&(client, req_id));
            reply(ctx, client, req_id, Err(LookupError::NoLeader));
        }
        let (leader, lid) = (self.leader && self.published(), self.leader_id());
        self.data.on_tick(ctx, leader, lid);
    }

    /// The earliest timer.
    pub fn next_timeout(&self, s: &LookupSettings) -> Option<Instant> {
        let join = match self.join {
            Some(Join::Asking { until, .. })
            | Some(Join::Backoff { until, .. })
            | Some(Join::WarmingUp { until }) => Some(until),
            None => None,
        };
        let pending = (self.pending.values().map(|p| p.deadline))
            .chain(self.own.values().map(|o| o.next))
            .min();
        [
            self.next_heartbeat,
            self.next_maintain,
            self.awaiting.values().map(|(until, _)| *until).min(),
            self.sss.next_expiry(s.down_after()),
            join,
            pending,
            self.data.next_timeout(self.is_leader()),
        ]
        .into_iter()
        .fold(None, earliest)
    }

    /// The node as status pages and checkers see it.
    pub fn view(&self) -> NodeView {
        let mut up: Vec<(DeviceId, Option<Instant>)> = (self.sss.peers().iter())
            .map(|(d, p)| (*d, p.start))
            .collect();
        up.push((self.me, if self.published() { self.start } else { None }));
        up.sort();
        NodeView {
            device: self.me,
            state: self.state(),
            start: self.start,
            up,
            leader: self.oldest_active(),
            entries: self.data.live_entries(),
            subscriptions: self.data.subscriptions(),
        }
    }

    /// Whether this node answers queries.
    pub fn is_leader(&self) -> bool {
        self.leader && self.published()
    }

    /// The lookup data (checkers).
    pub fn data(&self) -> &Entries {
        &self.data
    }

    /// Put the node in an arbitrary state, as transient state corruption would (the
    /// simulator's self-stabilisation runs and tests only).
    pub fn corrupt(&mut self, c: Corruption) {
        match c {
            Corruption::Flags {
                active,
                leader,
                start,
            } => {
                self.active = active;
                self.leader = leader;
                self.start = start;
                self.join = None;
            }
            Corruption::FakeAge { of, start, heard } => self.sss.corrupt(
                of,
                Some(Peer {
                    heard,
                    start,
                    leader: false,
                }),
            ),
        }
    }
}

/// Transient state corruption (seed 003's rare failures).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Corruption {
    /// Overwrite `bIsActive`, `bIsLeader` and `activeStartTime`.
    Flags {
        /// `bIsActive`.
        active: bool,
        /// `bIsLeader`.
        leader: bool,
        /// `activeStartTime`.
        start: Option<Instant>,
    },
    /// Plant an age for another node in the soft-state store.
    FakeAge {
        /// The node.
        of: DeviceId,
        /// The fake `LS_start_time`.
        start: Option<Instant>,
        /// When it was "heard".
        heard: Instant,
    },
}

/// Answer a client at this device.
pub(super) fn reply(
    ctx: &mut Ctx,
    client: ClientId,
    req_id: u64,
    result: Result<LookupResponse, LookupError>,
) {
    ctx.out.push(Output::Reply {
        client,
        req_id,
        result: result
            .map(Response::Lookup)
            .map_err(crate::error::ClientError::Lookup),
    });
}
