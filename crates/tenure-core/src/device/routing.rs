//! Routing: each input to the machine it reaches (chunks, manager roles, block traffic,
//! lookup, snapshots, policies), the managers' hints in the lookup service, and the
//! collection of empty roles.

use super::*;
use crate::ctx::Ctx;
use crate::ids::{ChunkId, DeviceId, Epoch, StoreId};
use crate::io::Output;
use crate::io::observation::Observation;
use crate::io::persist::PersistOp;
use crate::io::policy::PolicyCommand;
use crate::layout::MgrState;
use crate::layout::chunk::Chunk;
use crate::layout::manager::Manager;
use crate::msg::{Msg, PolicyMsg, ToChunk, ToManager};
use crate::time::Instant;
use std::collections::BTreeMap;

impl Device {
    /// Start a snapshot here (DESIGN §6).
    pub(super) fn start_snapshot(&mut self, now: Instant, out: &mut Vec<Output>) {
        let me = self.id();
        let peers = self.peers();
        let state = self.persistent();
        let id = self.snaps.start(now, me, &peers, state, out);
        out.push(Output::SnapshotStarted { id });
        self.timers.get_mut().stale = Stale::All;
    }

    /// Every other device of the cluster (the peer channels).
    fn peers(&self) -> Vec<DeviceId> {
        let me = self.id();
        (self.env.cfg.cluster.devices.iter())
            .copied()
            .filter(|d| *d != me)
            .collect()
    }

    /// A snapshot message from `from`. A tag is a marker that arrived with a message: the
    /// state is recorded before the message is processed.
    fn on_snapshot_msg(
        &mut self,
        now: Instant,
        from: DeviceId,
        msg: crate::snapshot::SnapMsg<Msg>,
        out: &mut Vec<Output>,
    ) {
        use crate::snapshot::SnapMsg;
        let me = self.id();
        let peers = self.peers();
        match msg {
            SnapMsg::Marker { id } => {
                let state = (!self.snaps.knows(id)).then(|| self.persistent());
                self.snaps.on_marker(now, me, &peers, from, id, state, out);
            }
            SnapMsg::Tagged { ids, msg } => {
                let mut msg = Some(*msg);
                if self.snaps.plant_record_late
                    && let Some(m) = msg.take()
                {
                    self.on_message(now, from, m, out);
                }
                for id in ids {
                    if !peers.contains(&from) {
                        self.snaps.on_tag_from_outside(me, &peers, from, id, out);
                        continue;
                    }
                    let state = (!self.snaps.knows(id)).then(|| self.persistent());
                    self.snaps.on_marker(now, me, &peers, from, id, state, out);
                }
                if let Some(m) = msg {
                    self.on_message(now, from, m, out);
                }
            }
            other => self.snaps.on_msg(me, from, other, out),
        }
        self.timers.get_mut().stale = Stale::All;
    }

    /// Rebuild the store → manager hints when the lookup data changed.
    pub(super) fn refresh_hints(&mut self) {
        let data = self.lookup.data();
        if data.generation() == self.env.hints_gen {
            return;
        }
        self.env.hints_gen = data.generation();
        self.env.hints = (data.live_under("/tenure/stores/"))
            .filter_map(|e| {
                let store = e.key.strip_prefix("/tenure/stores/")?.parse().ok()?;
                let (mgr, _) = parse_store_entry(e.value.as_deref()?)?;
                Some((StoreId(store), mgr))
            })
            .collect();
    }

    /// DESIGN §3: a manager publishes `store → (manager, epoch)` in the lookup service as
    /// soft state while it manages the store, and revokes it when it stops.
    pub(super) fn publish_managers(&mut self, now: Instant, out: &mut Vec<Output>) {
        let changes: Vec<(StoreId, Option<Epoch>)> = (out.iter())
            .filter_map(|o| match o {
                Output::Observe(Observation::BecameManager { store, epoch, .. }) => {
                    Some((*store, Some(*epoch)))
                }
                Output::Observe(Observation::StoppedManaging { store, .. }) => Some((*store, None)),
                _ => None,
            })
            .collect();
        if changes.is_empty() {
            return;
        }
        let me = self.id();
        let mut ctx = self.env.ctx(now, out);
        for (store, epoch) in changes {
            match epoch {
                Some(e) => self.lookup.provide(
                    &mut ctx,
                    store_key(store),
                    format!("manager={} epoch={}", me.0, e.0).into_bytes(),
                ),
                None => self.lookup.withdraw(&mut ctx, &store_key(store)),
            }
        }
        self.timers.get_mut().stale = Stale::All;
    }

    pub(super) fn on_message(
        &mut self,
        now: Instant,
        from: DeviceId,
        msg: Msg,
        out: &mut Vec<Output>,
    ) {
        if !matches!(msg, Msg::Snapshot(_)) {
            self.snaps.on_regular(from, &msg);
        }
        let msg = match msg {
            Msg::Lookup(m) => {
                let mut ctx = self.env.ctx(now, out);
                self.lookup.on_msg(&mut ctx, from, m);
                return;
            }
            Msg::Election(m) => {
                self.unknown_leader(from, &m, out);
                self.elector.handle_msg(now, from, m);
                self.drain_elector(now, out);
                return;
            }
            Msg::Coord(m) => {
                self.on_coord(now, from, m, out);
                return;
            }
            Msg::Snapshot(m) => {
                self.on_snapshot_msg(now, from, m, out);
                return;
            }
            Msg::Forward(m) => {
                self.on_forward_msg(now, from, m, out);
                return;
            }
            other => other,
        };
        let Device {
            env,
            managers,
            chunks,
            next_serial,
            ..
        } = self;
        let mut ctx = env.ctx(now, out);
        // The epoch a chunk shows after a message (crate::session::EpochsSeen).
        let mut shown = None;
        match msg {
            Msg::ToChunk { store, chunk, msg } => match chunks.get_mut(&chunk) {
                Some(c) if chunk.device == ctx.me() => {
                    c.on_msg(&mut ctx, from, msg);
                    shown = Some((store, c.view().epoch));
                }
                _ => {
                    // §4.2.4: a device answers acquire for a chunk it no longer has.
                    if matches!(msg, ToChunk::Acquire { .. }) {
                        ctx.send(
                            from,
                            Msg::ToManager {
                                store,
                                chunk,
                                msg: ToManager::NoChunk,
                            },
                        );
                    }
                }
            },
            Msg::ToManager { store, chunk, msg } => {
                if store.0 < ctx.cfg.cluster.stores {
                    managers
                        .entry(store)
                        .or_insert_with(|| Manager::new(store))
                        .on_msg(&mut ctx, from, chunk, msg);
                }
            }
            Msg::Mgr { store, msg } => {
                if store.0 < ctx.cfg.cluster.stores {
                    managers
                        .entry(store)
                        .or_insert_with(|| Manager::new(store))
                        .on_mgr_msg(&mut ctx, from, msg);
                }
            }
            Msg::Policy(PolicyMsg::CreateChunk {
                store,
                mgr,
                epoch,
                lease,
            }) => {
                if store.0 < ctx.cfg.cluster.stores {
                    // The serial is durable before the chunk id leaves the device.
                    let id = ChunkId {
                        device: ctx.me(),
                        serial: *next_serial,
                    };
                    *next_serial += 1;
                    ctx.persist(PersistOp::SetNextSerial(*next_serial));
                    let expiry = ctx.now + lease;
                    let c = Chunk::created(&mut ctx, id, store, mgr, epoch, expiry);
                    shown = Some((store, c.view().epoch));
                    chunks.insert(id, c);
                    ctx.send(
                        from,
                        Msg::Policy(PolicyMsg::ChunkCreated { store, chunk: id }),
                    );
                }
            }
            Msg::Policy(PolicyMsg::ChunkCreated { store, chunk }) => {
                if let Some(m) = managers.get_mut(&store) {
                    m.chunk_created(&mut ctx, chunk);
                }
            }
            Msg::Blocks(m) => on_block_msg(&mut ctx, chunks, managers, from, m),
            Msg::Lookup(_)
            | Msg::Election(_)
            | Msg::Coord(_)
            | Msg::Snapshot(_)
            | Msg::Forward(_) => {
                unreachable!("handled above")
            }
        }
        if let Some((store, epoch)) = shown {
            env.epochs.entry(store).or_default().saw(epoch, now);
        }
        self.collect_garbage();
    }

    pub(super) fn on_policy(&mut self, now: Instant, cmd: PolicyCommand, out: &mut Vec<Output>) {
        if cmd.store().is_none() {
            return self.membership_request(now, cmd, out);
        }
        let Device { env, managers, .. } = self;
        let mut ctx = env.ctx(now, out);
        match cmd {
            PolicyCommand::Migrate { store, to } => {
                if let Some(m) = managers.get_mut(&store) {
                    let _ = m.migrate(&mut ctx, to);
                }
            }
            PolicyCommand::Relayout { store, metadata } => {
                if let Some(m) = managers.get_mut(&store) {
                    let _ = m.relayout(&mut ctx, metadata);
                }
            }
            PolicyCommand::ReplaceChunk { store, old, device } => {
                if let Some(m) = managers.get_mut(&store)
                    && m.state() == MgrState::Manager
                    && m.metadata.contains(old)
                    && m.policy.creating.is_none()
                    // One chunk per device, counting the new one in place of `old`.
                    && !m.metadata.chunks.iter().any(|c| c.device == device && *c != old)
                {
                    m.request_chunk(&mut ctx, old, device);
                }
            }
            PolicyCommand::AddDevice { .. } | PolicyCommand::RemoveDevice { .. } => {
                unreachable!("membership requests are handled above")
            }
        }
    }

    pub(super) fn on_tick(&mut self, now: Instant, out: &mut Vec<Output>) {
        let drift = self.env.cfg.timing.clock_drift;
        let Device {
            env,
            managers,
            chunks,
            lookup,
            timers,
            ..
        } = self;
        let mut ctx = env.ctx(now, out);
        if lookup
            .next_timeout(&ctx.cfg.lookup)
            .is_some_and(|t| t <= now)
        {
            lookup.on_tick(&mut ctx);
        }
        // The chunk and manager roles whose timers are due, when `handle` listed them;
        // every role otherwise.
        let timers = timers.get_mut();
        if let Stale::Due { .. } = timers.stale {
            for role in &timers.due {
                match role {
                    Role::Chunk(id) => {
                        if let Some(c) = chunks.get_mut(id)
                            && c.next_timeout(drift).is_some_and(|t| t <= now)
                        {
                            c.on_tick(&mut ctx);
                        }
                    }
                    Role::Manager(s) => {
                        if let Some(m) = managers.get_mut(s)
                            && m.next_timeout().is_some_and(|t| t <= now)
                        {
                            m.on_tick(&mut ctx);
                        }
                    }
                    _ => {}
                }
            }
        } else {
            for c in chunks.values_mut() {
                if c.next_timeout(drift).is_some_and(|t| t <= now) {
                    c.on_tick(&mut ctx);
                }
            }
            for m in managers.values_mut() {
                if m.next_timeout().is_some_and(|t| t <= now) {
                    m.on_tick(&mut ctx);
                }
            }
        }
        if self.election_timeout().is_some_and(|t| t <= now) {
            self.on_election_tick(now, out);
        }
        let me = self.id();
        if (self.snaps.next_timeout(&self.env.cfg.snapshot)).is_some_and(|t| t <= now) {
            (self.snaps).on_tick(now, me, &self.env.cfg.snapshot, out);
        }
        if (self.groups.next_timeout()).is_some_and(|t| t <= now) {
            self.sessions_tick(now, out);
        }
        if (self.forwards.next_timeout(&self.env)).is_some_and(|t| t <= now) {
            for poll in self.forwards.on_tick(now, &self.env, out) {
                self.on_poll_end(now, poll, None, out);
            }
        }
        self.collect_garbage();
    }

    /// For a store this device does not manage: the manager whose regular lease a local
    /// chunk of the store holds, if any.
    pub(super) fn lease_hint(&self, store: StoreId) -> Option<DeviceId> {
        if self
            .managers
            .get(&store)
            .is_some_and(|m| m.state() != MgrState::None)
        {
            return None;
        }
        if self.env.cfg.planted.redirect_to_self {
            return Some(self.id());
        }
        self.chunks
            .values()
            .filter(|c| {
                c.record.store == store && c.state == crate::layout::ChunkState::RegularLease
            })
            .find_map(|c| c.lease_mgr.filter(|m| *m != self.id()))
    }

    /// Drop chunks that garbage-collected themselves and manager roles with nothing in
    /// them. A garbage-collected chunk's id is answered with `nochunk` from then on.
    ///
    /// Only a role an input reached can have become garbage: after an input that reached
    /// one role, that role and the manager roles requests reached are checked; after
    /// anything else, every role.
    fn collect_garbage(&mut self) {
        let requested = std::mem::take(&mut self.requested);
        let timers = self.timers.get_mut();
        let reached: Vec<Role> = match timers.stale {
            Stale::One(role) => vec![role],
            Stale::Due { also } => timers.due.iter().copied().chain(also).collect(),
            Stale::All | Stale::None => Vec::new(),
        };
        if matches!(timers.stale, Stale::One(_) | Stale::Due { .. }) {
            let mut removed = false;
            let mut stores = requested;
            for role in reached {
                match role {
                    Role::Chunk(id) => {
                        if self.chunks.get(&id).is_some_and(chunk_is_garbage) {
                            removed |= self.chunks.remove(&id).is_some();
                        }
                    }
                    Role::Manager(s) => stores.push(s),
                    Role::Lookup
                    | Role::Election
                    | Role::Snapshot
                    | Role::Forward
                    | Role::Sessions => {}
                }
            }
            for s in stores {
                if self.managers.get(&s).is_some_and(manager_is_garbage) {
                    removed |= self.managers.remove(&s).is_some();
                }
            }
            if removed {
                self.timers.get_mut().stale = Stale::All;
            }
            return;
        }
        let before = (self.chunks.len(), self.managers.len());
        self.chunks.retain(|_, c| !chunk_is_garbage(c));
        self.managers.retain(|_, m| !manager_is_garbage(m));
        if (self.chunks.len(), self.managers.len()) != before {
            self.timers.get_mut().stale = Stale::All;
        }
    }
}

/// The lookup key where a store's manager publishes itself (DESIGN §3).
pub fn store_key(store: StoreId) -> String {
    format!("/tenure/stores/{}", store.0)
}

/// The lookup key where a device publishes its address.
pub fn device_key(d: DeviceId) -> String {
    format!("/tenure/devices/{}", d.0)
}

/// Parse a store entry's value (`manager=<device> epoch=<epoch>`).
pub fn parse_store_entry(value: &[u8]) -> Option<(DeviceId, Epoch)> {
    let s = std::str::from_utf8(value).ok()?;
    let mut manager = None;
    let mut epoch = None;
    for part in s.split_whitespace() {
        match part.split_once('=')? {
            ("manager", v) => manager = v.parse().ok().map(DeviceId),
            ("epoch", v) => epoch = v.parse().ok().map(Epoch),
            _ => {}
        }
    }
    Some((manager?, epoch?))
}

/// A chunk that garbage-collected itself.
fn chunk_is_garbage(c: &Chunk) -> bool {
    c.state == crate::layout::ChunkState::GarbageCollect
}

/// A manager role with nothing in it: not managing, and no forwarding address.
fn manager_is_garbage(m: &Manager) -> bool {
    m.state() == MgrState::None && m.forwarding.is_none() && m.stage.early_votes().is_empty()
}

/// The one role a block message reaches (see [`Device::timers`]).
pub(super) fn block_role(m: &crate::objects::msg::BlockMsg) -> Role {
    use crate::objects::msg::BlockMsg;
    use crate::objects::msg::Requester;
    match m {
        BlockMsg::Read { chunk, .. }
        | BlockMsg::Delete { chunk, .. }
        | BlockMsg::Probe { chunk, .. }
        | BlockMsg::Data {
            to: Requester::Chunk(chunk),
            ..
        } => Role::Chunk(*chunk),
        BlockMsg::Data { store, .. }
        | BlockMsg::Deleted { store, .. }
        | BlockMsg::Complete { store, .. } => Role::Manager(*store),
    }
}

/// Route block traffic (DESIGN §5): reads, deletions and probes to the chunk named,
/// answers to the chunk or manager role that asked. A read or deletion for a chunk this
/// device does not hold is answered at once (with nothing, or as done), so the asker
/// moves on.
fn on_block_msg(
    ctx: &mut Ctx<'_>,
    chunks: &mut BTreeMap<ChunkId, Chunk>,
    managers: &mut BTreeMap<StoreId, Manager>,
    from: DeviceId,
    msg: crate::objects::msg::BlockMsg,
) {
    use crate::objects::msg::BlockMsg;
    use crate::objects::msg::Requester;
    let mine = |c: &ChunkId, ctx: &Ctx<'_>| c.device == ctx.me();
    match msg {
        BlockMsg::Read {
            store,
            chunk,
            ids,
            tag,
            reply_to,
        } => match chunks.get(&chunk).filter(|_| mine(&chunk, ctx)) {
            Some(c) => c
                .blocks
                .on_read(ctx, store, chunk, from, ids, tag, reply_to),
            None => {
                let blocks = ids.into_iter().map(|id| (id, None)).collect();
                let msg = BlockMsg::Data {
                    store,
                    from: chunk,
                    to: reply_to,
                    tag,
                    blocks,
                };
                ctx.send(from, Msg::Blocks(msg));
            }
        },
        BlockMsg::Data {
            store,
            to: Requester::Chunk(c),
            tag,
            blocks,
            ..
        } => {
            if let Some(ch) = chunks.get_mut(&c).filter(|_| mine(&c, ctx)) {
                let mgr = ch.lease_mgr;
                ch.blocks.on_data(ctx, store, c, mgr, tag, blocks);
            }
        }
        BlockMsg::Delete {
            store,
            chunk,
            ids,
            tag,
        } => match chunks.get_mut(&chunk).filter(|_| mine(&chunk, ctx)) {
            Some(c) => c.blocks.on_delete(ctx, store, chunk, from, ids, tag),
            None => ctx.send(from, Msg::Blocks(BlockMsg::Deleted { store, chunk, tag })),
        },
        BlockMsg::Probe {
            store,
            chunk,
            epoch,
        } => {
            if let Some(c) = chunks.get(&chunk).filter(|_| mine(&chunk, ctx)) {
                c.blocks.on_probe(ctx, store, chunk, from, epoch);
            }
        }
        m @ (BlockMsg::Data { .. } | BlockMsg::Deleted { .. } | BlockMsg::Complete { .. }) => {
            if let Some(mgr) = managers.get_mut(&m.store()) {
                mgr.on_block_msg(ctx, from, m);
            }
        }
    }
}
