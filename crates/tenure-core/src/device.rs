//! The device: every protocol state machine of one node behind one entry point.
//!
//! A device holds its chunks (seed 000 §4) and one manager role per store it is or may
//! become manager of (§5). [`Device::handle`] routes an input to the right machine and
//! returns the outputs in order; [`Device::poll_timeout`] is the earliest deadline of
//! any machine. Persistent state lives in the chunks' [`ChunkPersist`] records and the
//! serial counter; everything else is volatile and is lost on a crash (`Device::new`
//! from the persisted state is a restart: every chunk is newly awake, §4.2.5).

use crate::config::DeviceConfig;
use crate::ctx::Ctx;
use crate::election::coordinator::{CoordMsg, Coordinator};
use crate::election::members::{MemberState, Members};
use crate::election::{ElectionMsg, Elector, ElectorOut, Term};
use crate::error::ClientError;
use crate::ids::{ChunkId, DeviceId, Epoch, StoreId};
use crate::io::observation::Observation;
use crate::io::persist::ChunkPersist;
use crate::io::persist::DevicePersist;
use crate::io::persist::PersistOp;
use crate::io::policy::PolicyCommand;
use crate::io::{Input, Output};
use crate::layout::chunk::Chunk;
use crate::layout::manager::Manager;
use crate::layout::{ChunkView, ManagerView, Metadata, MgrState};
use crate::lookup::Node;
use crate::msg::{Msg, PolicyMsg, ToChunk, ToManager};
use crate::rng::Rng;
use crate::snapshot::Snapshots;
use crate::time::Instant;
use std::collections::{BTreeMap, BTreeSet};

/// One device's protocol core.
pub struct Device {
    env: Env,
    next_serial: u64,
    chunks: BTreeMap<ChunkId, Chunk>,
    managers: BTreeMap<StoreId, Manager>,
    last_timer: Option<Instant>,
    /// The next timeout of every chunk and manager role, kept up to date per role: an
    /// input that reaches one role (a message to a chunk or a manager, a client request)
    /// refreshes that role's entry only; anything else (timers, policy, tests' direct
    /// access) refreshes them all. [`Self::poll_timeout`] is the earliest entry.
    timers: std::cell::RefCell<Timers>,
    /// Stores whose manager role a client request reached since the last garbage
    /// collection (a request can leave an empty role behind).
    requested: Vec<StoreId>,
    /// The device's lookup node (seed 003).
    lookup: Node,
    /// The coordinator's election (seed 002 §14.3; DESIGN §6).
    elector: Elector,
    /// The coordinator's view and decisions, used while this device is coordinator.
    coord: Coordinator,
    /// The newest coordinator term seen, persisted: commands of older terms are refused.
    term: Term,
    /// When this device next reports to the coordinator.
    next_report: Instant,
    /// The newest membership record seen (DESIGN §6).
    members: Members,
    /// This device's addresses, while a newer record left it out without retiring it:
    /// it was admitted by a record that lost to another of the same number, and asks
    /// to be admitted again (see [`Device::report`]).
    readmit: Option<(String, String)>,
    /// A record this device held whose decisions (an admission, a retirement) the newer
    /// record it adopted lacks: reported to the coordinator with every report until a
    /// record holds them again (a coordinator that never heard of an admission made a
    /// record without it, and every device adopting that record would forget the
    /// admission: simulator seed 10229).
    lost_record: Option<Members>,
    /// Snapshots this device takes part in (seed 002 §14.1).
    snaps: Snapshots,
    /// When the coordinator next starts a scheduled snapshot.
    next_snapshot: Option<Instant>,
}

/// Cached next timeouts, see [`Device::timers`].
#[derive(Default)]
struct Timers {
    /// Each role's next timeout (roles without one are absent).
    deadlines: BTreeMap<Role, Instant>,
    /// The same entries ordered by deadline: the first is [`Device::poll_timeout`].
    order: BTreeSet<(Instant, Role)>,
    stale: Stale,
}

/// A timer's owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Role {
    Chunk(ChunkId),
    Manager(StoreId),
    Lookup,
    Election,
    Snapshot,
}

/// Which cached timeouts may be out of date.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Stale {
    #[default]
    All,
    /// Only this role's.
    One(Role),
    None,
}

/// What every handler's [`Ctx`] is made of, kept apart from the state machines so a
/// context can be borrowed alongside them.
struct Env {
    cfg: DeviceConfig,
    rng: Rng,
    heard: BTreeMap<DeviceId, Instant>,
    hints: BTreeMap<StoreId, DeviceId>,
    /// The lookup data's generation `hints` was built from.
    hints_gen: u64,
    /// When this device's chunks first showed each recent epoch of their store.
    epochs: BTreeMap<StoreId, crate::session::EpochsSeen>,
}

impl Env {
    fn ctx<'a>(&'a mut self, now: Instant, out: &'a mut Vec<Output>) -> Ctx<'a> {
        Ctx {
            now,
            cfg: &self.cfg,
            rng: &mut self.rng,
            out,
            heard: &self.heard,
            hints: &self.hints,
            epochs: &self.epochs,
        }
    }
}

impl Device {
    /// Boot a device from its persistent state. An empty state with serial 0 is a first
    /// boot: the device creates its bootstrap chunks (epoch 1, the store's preferred
    /// device as last manager) and persists them before anything else happens.
    pub fn new(
        cfg: DeviceConfig,
        disk: DevicePersist,
        now: Instant,
        rng_seed: u64,
    ) -> (Device, Vec<Output>) {
        let mut cfg = cfg;
        let cfg_id = cfg.id;
        let record = disk.members.clone().unwrap_or_else(|| {
            let mut ids = cfg.cluster.devices.clone();
            if cfg.join {
                // Not a member until the coordinator admits it.
                ids.retain(|d| *d != cfg_id);
            }
            Members::bootstrap(&ids)
        });
        if disk.members.is_some() || cfg.join {
            cfg.cluster.devices = record.ids();
        }
        let members = record.ids();
        let retiring = record.retiring();
        let election = cfg.election.clone();
        let cfg_planted_forget = cfg.planted.snapshot_forget_recorded;
        let mut dev = Device {
            next_serial: disk.next_serial,
            env: Env {
                cfg,
                rng: Rng::new(rng_seed),
                heard: BTreeMap::new(),
                hints: BTreeMap::new(),
                hints_gen: 0,
                epochs: BTreeMap::new(),
            },
            chunks: BTreeMap::new(),
            managers: BTreeMap::new(),
            last_timer: None,
            timers: Default::default(),
            requested: Vec::new(),
            lookup: Node::placeholder(),
            elector: Elector::new(cfg_id, members, retiring, election, disk.term, now),
            coord: Coordinator::default(),
            term: disk.term,
            next_report: now,
            readmit: None,
            lost_record: None,
            members: record,
            snaps: if cfg_planted_forget {
                Snapshots::default()
            } else {
                Snapshots::boot(disk.snapshots.clone())
            },
            next_snapshot: None,
        };
        dev.snaps.plant_record_late = dev.env.cfg.planted.snapshot_record_late;
        dev.elector.plant_no_restart = dev.env.cfg.planted.election_no_restart;
        let mut out = Vec::new();
        dev.drain_elector(now, &mut out);
        dev.lookup = {
            let mut ctx = dev.env.ctx(now, &mut out);
            let mut node = Node::boot(&mut ctx, disk.lookup.into_values().collect());
            // DESIGN §3: every device publishes that it is alive, and where.
            let me = ctx.cfg.id;
            let addr = match ctx.cfg.advertise.as_str() {
                "" => me.to_string(),
                a => a.to_string(),
            };
            node.provide(&mut ctx, device_key(me), addr.into_bytes());
            node
        };
        let mut blocks = disk.blocks;
        let mut records: Vec<ChunkPersist> = disk.chunks.into_values().collect();
        if dev.next_serial == 0 && records.is_empty() {
            if dev.env.cfg.join {
                dev.next_serial = dev.env.cfg.cluster.first_free_serial();
                out.push(Output::Persist(PersistOp::SetNextSerial(dev.next_serial)));
            } else {
                records = dev.bootstrap(&mut out);
            }
        }
        for p in records {
            let id = p.id;
            let mut chunk = {
                let mut ctx = dev.env.ctx(now, &mut out);
                Chunk::boot(&mut ctx, p)
            };
            chunk.blocks =
                crate::objects::blocks::ChunkBlocks::new(blocks.remove(&id).unwrap_or_default());
            let v = chunk.view();
            dev.env.epochs.entry(v.store).or_default().saw(v.epoch, now);
            dev.chunks.insert(id, chunk);
        }
        dev.finish(&mut out);
        (dev, out)
    }

    fn bootstrap(&mut self, out: &mut Vec<Output>) -> Vec<ChunkPersist> {
        let cluster = &self.env.cfg.cluster;
        let mut records = Vec::new();
        for store in cluster.store_ids() {
            let chunks = cluster.bootstrap_chunks(store);
            if let Some(id) = chunks.iter().find(|c| c.device == self.env.cfg.id).copied() {
                let p = ChunkPersist {
                    id,
                    store,
                    epoch: Epoch(1),
                    metadata: Metadata::new(chunks),
                    lease_mgr: Some(cluster.preferred_manager(store)),
                    prepared: None,
                    known: None,
                    data: Default::default(),
                };
                out.push(Output::Persist(PersistOp::PutChunk(Box::new(p.clone()))));
                records.push(p);
            }
        }
        self.next_serial = cluster.first_free_serial();
        out.push(Output::Persist(PersistOp::SetNextSerial(self.next_serial)));
        records
    }

    /// Handle one input at local time `now`; returns the outputs in order.
    pub fn handle(&mut self, now: Instant, input: Input) -> Vec<Output> {
        let mut out = Vec::new();
        // Time passes before anything new happens: timers already due at `now` fire
        // first, so a device that was paused acts on its expired deadlines (an expired
        // commit window, a lapsed lease) before the messages that queued up meanwhile.
        let due = self.poll_timeout().is_some_and(|t| t <= now);
        self.timers.get_mut().stale = if due {
            Stale::All
        } else {
            Self::reaches(&input)
        };
        if !matches!(input, Input::Tick) && due {
            self.on_tick(now, &mut out);
        }
        match input {
            Input::Message { from, msg } => {
                self.env.heard.insert(from, now);
                self.on_message(now, from, msg, &mut out);
            }
            Input::Tick => self.on_tick(now, &mut out),
            Input::Request {
                client,
                req_id,
                req,
            } => {
                let store = req.store();
                if store.0 >= self.env.cfg.cluster.stores {
                    out.push(Output::Reply {
                        client,
                        req_id,
                        result: Err(ClientError::UnknownStore(store)),
                    });
                } else if let Some(hint) = self.lease_hint(store) {
                    // Tenure: this device does not manage the store but one of its chunks
                    // serves under a lease from the manager: point the client there. A
                    // manager role's forwarding address (left by a migration) can be long
                    // stale, and two of them can point at each other (seed 180613: clients
                    // bounced between d1 and d4 while d2 managed the store).
                    out.push(Output::Reply {
                        client,
                        req_id,
                        result: Err(ClientError::NotManager { hint: Some(hint) }),
                    });
                } else {
                    let Device {
                        env,
                        managers,
                        requested,
                        ..
                    } = self;
                    let mut ctx = env.ctx(now, &mut out);
                    requested.push(store);
                    managers
                        .entry(store)
                        .or_insert_with(|| Manager::new(store))
                        .request(&mut ctx, client, req_id, req);
                }
            }
            Input::Policy(cmd) => self.on_policy(now, cmd, &mut out),
            Input::Lookup {
                client,
                req_id,
                req,
            } => {
                let mut ctx = self.env.ctx(now, &mut out);
                self.lookup.on_request(&mut ctx, client, req_id, req);
            }
            Input::StartSnapshot => self.start_snapshot(now, &mut out),
        }
        self.publish_managers(now, &mut out);
        self.refresh_hints();
        self.snaps.tag(&mut out);
        self.finish(&mut out);
        out
    }

    /// Start a snapshot here (DESIGN §6).
    fn start_snapshot(&mut self, now: Instant, out: &mut Vec<Output>) {
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
    fn refresh_hints(&mut self) {
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
    fn publish_managers(&mut self, now: Instant, out: &mut Vec<Output>) {
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

    /// The one role an input can change, if it reaches only one (see [`Self::timers`]).
    fn reaches(input: &Input) -> Stale {
        match input {
            Input::Message {
                msg: Msg::ToChunk { chunk, .. },
                ..
            } => Stale::One(Role::Chunk(*chunk)),
            Input::Message {
                msg: Msg::ToManager { store, .. } | Msg::Mgr { store, .. },
                ..
            } => Stale::One(Role::Manager(*store)),
            Input::Request { req, .. } => Stale::One(Role::Manager(req.store())),
            Input::Lookup { .. }
            | Input::Message {
                msg: Msg::Lookup(_),
                ..
            } => Stale::One(Role::Lookup),
            Input::Message {
                msg: Msg::Blocks(b),
                ..
            } => Stale::One(block_role(b)),
            Input::Message {
                msg: Msg::Election(_),
                ..
            } => Stale::One(Role::Election),
            Input::Message {
                msg: Msg::Policy(_) | Msg::Coord(_) | Msg::Snapshot(_),
                ..
            }
            | Input::StartSnapshot
            | Input::Tick
            | Input::Policy(_) => Stale::All,
        }
    }

    fn finish(&mut self, out: &mut Vec<Output>) {
        let t = self.poll_timeout();
        if t != self.last_timer {
            self.last_timer = t;
            if let Some(t) = t {
                out.push(Output::SetTimer(t));
            }
        }
    }

    fn on_message(&mut self, now: Instant, from: DeviceId, msg: Msg, out: &mut Vec<Output>) {
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
            Msg::Lookup(_) | Msg::Election(_) | Msg::Coord(_) | Msg::Snapshot(_) => {
                unreachable!("handled above")
            }
        }
        if let Some((store, epoch)) = shown {
            env.epochs.entry(store).or_default().saw(epoch, now);
        }
        self.collect_garbage();
    }

    fn on_policy(&mut self, now: Instant, cmd: PolicyCommand, out: &mut Vec<Output>) {
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
                    && m.state == MgrState::Manager
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

    fn on_tick(&mut self, now: Instant, out: &mut Vec<Output>) {
        let drift = self.env.cfg.timing.clock_drift;
        let Device {
            env,
            managers,
            chunks,
            lookup,
            ..
        } = self;
        let mut ctx = env.ctx(now, out);
        if lookup
            .next_timeout(&ctx.cfg.lookup)
            .is_some_and(|t| t <= now)
        {
            lookup.on_tick(&mut ctx);
        }
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
        if self.election_timeout().is_some_and(|t| t <= now) {
            self.on_election_tick(now, out);
        }
        let me = self.id();
        if (self.snaps.next_timeout(&self.env.cfg.snapshot)).is_some_and(|t| t <= now) {
            (self.snaps).on_tick(now, me, &self.env.cfg.snapshot, out);
        }
        self.collect_garbage();
    }

    // ---- the coordinator (DESIGN §6) ----------------------------------------------

    /// The election role's next deadline: the elector's, the coordinator's next round,
    /// and the next report.
    fn election_timeout(&self) -> Option<Instant> {
        use crate::time::earliest;
        if !self.env.cfg.election.enabled {
            return None;
        }
        let t = earliest(self.elector.poll_timeout(), self.coord.next_timeout());
        let t = earliest(t, self.next_snapshot);
        earliest(t, Some(self.next_report))
    }

    fn on_election_tick(&mut self, now: Instant, out: &mut Vec<Output>) {
        if self.elector.poll_timeout().is_some_and(|t| t <= now) {
            self.elector.handle_timeout(now);
            self.drain_elector(now, out);
        }
        if self.next_report <= now {
            self.next_report = now + self.env.cfg.timing.renewal_period;
            self.report(now, out);
        }
        let every = self.env.cfg.snapshot.every;
        if self.coord.term().is_some() && !every.is_zero() {
            match self.next_snapshot {
                None => self.next_snapshot = Some(now + every),
                Some(t) if t <= now => {
                    self.next_snapshot = Some(now + every);
                    self.start_snapshot(now, out);
                }
                Some(_) => {}
            }
        } else {
            self.next_snapshot = None;
        }
        if self.coord.next_timeout().is_some_and(|t| t <= now) {
            let round = self.coord.on_tick(now, &self.env.cfg);
            let Some(term) = self.coord.term() else {
                return;
            };
            let me = self.id();
            if let Some((members, to)) = round.members {
                for d in to {
                    out.push(Output::Send {
                        to: d,
                        msg: Msg::Coord(CoordMsg::Members {
                            term,
                            members: members.clone(),
                        }),
                    });
                }
                self.adopt_members(now, members, out);
            }
            for d in round.decisions {
                out.push(Output::Observe(Observation::CommandSent {
                    term,
                    to: d.to,
                    cmd: d.cmd.clone(),
                }));
                let msg = CoordMsg::Command { term, cmd: d.cmd };
                if d.to == me {
                    self.on_coord(now, me, msg, out);
                } else {
                    out.push(Output::Send {
                        to: d.to,
                        msg: Msg::Coord(msg),
                    });
                }
            }
        }
    }

    /// Take the elector's outputs: messages go out; a newly followed term is persisted
    /// before anything of this batch leaves the device, and starts or stops this
    /// device's coordinator role.
    fn drain_elector(&mut self, now: Instant, out: &mut Vec<Output>) {
        if !self.env.cfg.election.enabled {
            while self.elector.poll_output().is_some() {}
            return;
        }
        while let Some(o) = self.elector.poll_output() {
            match o {
                ElectorOut::Send { to, msg } => out.push(Output::Send {
                    to,
                    msg: Msg::Election(msg),
                }),
                ElectorOut::Coordinator { term } => {
                    self.raise_term(term, out);
                    out.push(Output::Observe(Observation::Coordinator { term }));
                    let acts =
                        term.leader == self.id() || self.env.cfg.planted.election_follower_acts;
                    if acts {
                        self.coord.start(term, now, &self.env.cfg, &self.members);
                    } else {
                        self.coord.stop();
                    }
                    // Report to the new coordinator at once.
                    self.next_report = now;
                }
            }
        }
    }

    /// An announcement or Alive naming a coordinator this device's record does not list:
    /// one of the two records is out of date. The sender gets this device's record; if
    /// its own is newer it answers with it (see [`Device::on_coord`]), if older it
    /// adopts this one. Without this, a device that missed the record admitting the
    /// coordinator ignores it and calls elections without end, each raising the
    /// coordinator's term before its first decision round (simulator seed 2387: a
    /// retiring device, never told of the newer record, started a ring election every
    /// 0.9 s for 15 s after faults stopped).
    fn unknown_leader(&mut self, from: DeviceId, m: &ElectionMsg, out: &mut Vec<Output>) {
        let named = match m {
            ElectionMsg::Coordinator { term, .. }
            | ElectionMsg::RingCoordinator { term, .. }
            | ElectionMsg::Alive { term } => term.leader,
            _ => return,
        };
        if named == self.id() || self.members.contains(named) || from == self.id() {
            return;
        }
        out.push(Output::Send {
            to: from,
            msg: Msg::Coord(CoordMsg::Members {
                term: self.term,
                members: self.members.clone(),
            }),
        });
    }

    /// Record (durably) that `term` exists, if it is the newest seen.
    fn raise_term(&mut self, term: Term, out: &mut Vec<Output>) {
        if term > self.term {
            self.term = term;
            out.push(Output::Persist(PersistOp::SetTerm(term)));
        }
    }

    /// Report to the coordinator this device follows: the chunks it holds and the
    /// stores it manages.
    fn report(&mut self, now: Instant, out: &mut Vec<Output>) {
        self.ask_readmission(out);
        let Some(term) = self.elector.coordinator() else {
            return;
        };
        let mut msgs = vec![CoordMsg::Member {
            term,
            chunks: self.chunks.len() as u32,
            members: self.members.clone(),
        }];
        if let Some(lost) = &self.lost_record {
            msgs.push(CoordMsg::Member {
                term,
                chunks: self.chunks.len() as u32,
                members: lost.clone(),
            });
        }
        msgs.extend(
            (self.managers.values())
                .filter_map(|m| m.report(now))
                .map(|report| CoordMsg::Store { term, report }),
        );
        let me = self.id();
        for msg in msgs {
            if term.leader == me {
                self.on_coord(now, me, msg, out);
            } else {
                out.push(Output::Send {
                    to: term.leader,
                    msg: Msg::Coord(msg),
                });
            }
        }
    }

    /// A device an operator admitted whose admission was lost (a newer record of
    /// another coordinator left it out, not retired) asks every member of the record it
    /// has to admit it again, once a renewal period until a record lists it. Otherwise
    /// it follows no coordinator and reports nothing, and the stores it still manages
    /// are never reported: no retirement could be judged drained (simulator seeds
    /// 1455, 1565, 3275: a device admitted in a record that lost kept managing a store;
    /// the removals the operator asked for never completed).
    fn ask_readmission(&mut self, out: &mut Vec<Output>) {
        let me = self.id();
        if self.members.contains(me) || self.members.retired.contains(&me) {
            self.readmit = None;
        }
        let Some((peer_addr, client_addr)) = &self.readmit else {
            return;
        };
        let cmd = PolicyCommand::AddDevice {
            device: me,
            peer_addr: peer_addr.clone(),
            client_addr: client_addr.clone(),
        };
        for to in self.members.ids() {
            out.push(Output::Send {
                to,
                msg: Msg::Coord(CoordMsg::Request { cmd: cmd.clone() }),
            });
        }
    }

    fn on_coord(&mut self, now: Instant, from: DeviceId, msg: CoordMsg, out: &mut Vec<Output>) {
        match msg {
            CoordMsg::Member {
                term,
                chunks,
                members,
            } => {
                // A member that reports an older record than ours (it refused the newer
                // one from a coordinator since deposed, and now follows a term that has
                // ended) gets ours, under our term: otherwise it ignores the members it
                // does not know, the coordinator among them, and elects forever.
                if members.version < self.members.version && from != self.id() {
                    out.push(Output::Send {
                        to: from,
                        msg: Msg::Coord(CoordMsg::Members {
                            term: self.term,
                            members: self.members.clone(),
                        }),
                    });
                }
                self.coord.on_member(now, from, term, chunks, &members);
                self.adopt_members(now, members, out);
            }
            // DESIGN §6: a record from a deposed coordinator is refused, as its commands
            // are (its change may be lost: a device must not retire on it). The
            // coordinator this device follows is not deposed even when it writes an
            // older term: it can have been elected again under a newer one whose
            // announcement reached this device and not it (the members that carried it
            // had dropped this device from their record).
            // Nor is a record that leaves out the coordinator this device follows: that
            // coordinator's term counts for nothing in it (a device admitted by a record
            // that lost to another of the same number elects itself alone, and its terms
            // would otherwise keep the members that followed it from ever learning).
            CoordMsg::Members { term, members } => {
                let followed = self.elector.coordinator().is_some_and(|t| t.leader == from);
                let outside = (self.elector.coordinator())
                    .is_some_and(|t| !members.contains(t.leader))
                    && members.version > self.members.version;
                // Nor is a newer record that makes this device retiring: a retiring device
                // claims no term, and one that missed its retirement outranks, under
                // bully, the coordinator that decided it, which in turn outranks it — the
                // two would depose each other without end (simulator seed 1095).
                let retires_me = members.version > self.members.version
                    && members.retiring().contains(&self.id());
                if members.version < self.members.version && from != self.id() && !followed {
                    // A sender with an older record (a coordinator since deposed, or one
                    // elected by a record that lost) gets ours, under our term, as a
                    // member reporting an older record does: it learns of the devices it
                    // does not know and stops acting on a record no one else follows
                    // (simulator seed 1455).
                    out.push(Output::Send {
                        to: from,
                        msg: Msg::Coord(CoordMsg::Members {
                            term: self.term,
                            members: self.members.clone(),
                        }),
                    });
                } else if term >= self.term
                    || followed
                    || outside
                    || retires_me
                    || self.env.cfg.planted.members_adopt_older
                {
                    self.adopt_members(now, members, out)
                }
            }
            CoordMsg::Request { cmd } => self.membership_request(now, cmd, out),
            CoordMsg::Store { term, report } => self.coord.on_store(now, from, term, report),
            CoordMsg::Command { term, cmd } => {
                // A command of a coordinator this device's record lists as retired is
                // refused like a deposed one's (it was elected by a side of a partition
                // that had not heard of the retirement).
                let retired = self.members.retired.contains(&term.leader);
                if (term < self.term || retired) && !self.env.cfg.planted.election_ignore_term {
                    out.push(Output::Observe(Observation::CommandRefused {
                        term,
                        newest: self.term,
                    }));
                    return;
                }
                self.raise_term(term, out);
                out.push(Output::Observe(Observation::CommandApplied {
                    term,
                    cmd: cmd.clone(),
                }));
                self.on_policy(now, cmd, out);
            }
        }
    }

    /// An operator's membership request: the coordinator applies it, anyone else
    /// forwards it to the coordinator it follows.
    fn membership_request(&mut self, _now: Instant, cmd: PolicyCommand, out: &mut Vec<Output>) {
        if self.coord.term().is_some() {
            self.coord.on_request(cmd);
        } else if let Some(t) = self.elector.coordinator()
            && t.leader != self.id()
        {
            out.push(Output::Send {
                to: t.leader,
                msg: Msg::Coord(CoordMsg::Request { cmd }),
            });
        }
    }

    /// Adopt `members` if it is newer than the record this device has: persisted first,
    /// then the cluster's device list, the election and the lookup service follow it.
    fn adopt_members(&mut self, now: Instant, members: Members, out: &mut Vec<Output>) {
        let older = if self.env.cfg.planted.members_adopt_older {
            members.version == self.members.version
        } else {
            members.version <= self.members.version
        };
        if older {
            return;
        }
        out.push(Output::Persist(PersistOp::SetMembers(Box::new(
            members.clone(),
        ))));
        let me = self.id();
        let retired = members.retired.contains(&me) && !self.members.retired.contains(&me);
        if let Some(i) = self.members.devices.get(&me)
            && i.state == MemberState::Active
            && !members.contains(me)
            && !members.retired.contains(&me)
        {
            self.readmit = Some((i.peer_addr.clone(), i.client_addr.clone()));
        }
        if self.members.ahead_of(&members) {
            let mut lost = self.lost_record.take().unwrap_or_default();
            lost.merge(self.term, &self.members, usize::MAX);
            self.lost_record = Some(lost);
        }
        if self
            .lost_record
            .as_ref()
            .is_some_and(|l| !l.ahead_of(&members))
        {
            self.lost_record = None;
        }
        let ids = members.ids();
        if let Some(term) = self.coord.term() {
            let min_active = self.env.cfg.cluster.replication.max(1);
            self.coord.members.merge(term, &members, min_active);
        }
        self.members = members.clone();
        self.env.cfg.cluster.devices = ids.clone();
        self.lookup.set_devices(ids.clone());
        self.elector.set_members(now, ids);
        self.elector.set_retiring(now, self.members.retiring());
        self.drain_elector(now, out);
        out.push(Output::Observe(Observation::Members { members }));
        if retired {
            out.push(Output::Observe(Observation::Retired));
        }
        self.timers.get_mut().stale = Stale::All;
    }

    /// The membership record this device has.
    pub fn members(&self) -> &Members {
        &self.members
    }

    /// The election machine (read only).
    pub fn elector(&self) -> &Elector {
        &self.elector
    }

    /// The coordinator this device follows (or is), with its term.
    pub fn coordinator(&self) -> Option<Term> {
        self.elector.coordinator()
    }

    /// The term this device acts in as coordinator, if it does.
    pub fn acting_coordinator(&self) -> Option<Term> {
        self.coord.term()
    }

    /// For a store this device does not manage: the manager whose regular lease a local
    /// chunk of the store holds, if any.
    fn lease_hint(&self, store: StoreId) -> Option<DeviceId> {
        if self
            .managers
            .get(&store)
            .is_some_and(|m| m.state != MgrState::None)
        {
            return None;
        }
        if self.env.cfg.planted.redirect_to_self {
            return Some(self.id());
        }
        self.chunks
            .values()
            .filter(|c| c.p.store == store && c.state == crate::layout::ChunkState::RegularLease)
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
        let reached = self.timers.get_mut().stale;
        if let Stale::One(role) = reached {
            let mut removed = false;
            if let Role::Chunk(id) = role
                && self.chunks.get(&id).is_some_and(chunk_is_garbage)
            {
                removed |= self.chunks.remove(&id).is_some();
            }
            let reached_store = match role {
                Role::Manager(s) => Some(s),
                Role::Chunk(_) | Role::Lookup | Role::Election | Role::Snapshot => None,
            };
            for s in requested.into_iter().chain(reached_store) {
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

    /// Earliest timer deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut timers = self.timers.borrow_mut();
        self.refresh(&mut timers);
        timers.order.first().map(|(t, _)| *t)
    }

    /// Bring the stale entries of `timers` up to date.
    fn refresh(&self, timers: &mut Timers) {
        let drift = self.env.cfg.timing.clock_drift;
        let next = |role: Role| match role {
            Role::Chunk(id) => self.chunks.get(&id).and_then(|c| c.next_timeout(drift)),
            Role::Manager(s) => self.managers.get(&s).and_then(Manager::next_timeout),
            Role::Lookup => self.lookup.next_timeout(&self.env.cfg.lookup),
            Role::Election => self.election_timeout(),
            Role::Snapshot => self.snaps.next_timeout(&self.env.cfg.snapshot),
        };
        let role = match std::mem::replace(&mut timers.stale, Stale::None) {
            Stale::None => return,
            Stale::One(role) => role,
            Stale::All => {
                let roles = (self.chunks.keys().map(|id| Role::Chunk(*id)))
                    .chain(self.managers.keys().map(|s| Role::Manager(*s)))
                    .chain([Role::Lookup, Role::Election, Role::Snapshot]);
                timers.deadlines = roles.filter_map(|r| Some((r, next(r)?))).collect();
                timers.order = timers.deadlines.iter().map(|(r, t)| (*t, *r)).collect();
                return;
            }
        };
        let old = match next(role) {
            Some(t) => {
                timers.order.insert((t, role));
                timers.deadlines.insert(role, t).filter(|o| *o != t)
            }
            None => timers.deadlines.remove(&role),
        };
        if let Some(o) = old {
            timers.order.remove(&(o, role));
        }
    }

    /// This device.
    pub fn id(&self) -> DeviceId {
        self.env.cfg.id
    }

    /// Configuration.
    pub fn config(&self) -> &DeviceConfig {
        &self.env.cfg
    }

    /// Current persistent state (what a crash keeps).
    pub fn persistent(&self) -> DevicePersist {
        DevicePersist {
            next_serial: self.next_serial,
            chunks: self.chunks.iter().map(|(k, c)| (*k, c.p.clone())).collect(),
            lookup: (self.lookup.data().persistent_store().into_iter())
                .map(|e| (e.key.clone(), e))
                .collect(),
            blocks: (self.chunks.iter())
                .filter(|(_, c)| !c.blocks.data.is_empty())
                .map(|(k, c)| (*k, c.blocks.data.clone()))
                .collect(),
            term: self.term,
            members: (self.members.version != Default::default()).then(|| self.members.clone()),
            snapshots: self.snaps.recorded(),
        }
    }

    /// The lookup node.
    pub fn lookup(&self) -> &Node {
        &self.lookup
    }

    /// Direct access to the lookup node (tests and the simulator's state corruption).
    pub fn lookup_mut(&mut self) -> &mut Node {
        self.timers.get_mut().stale = Stale::All;
        &mut self.lookup
    }

    /// View of one chunk.
    pub fn chunk_view(&self, id: ChunkId) -> Option<ChunkView> {
        self.chunks.get(&id).map(Chunk::view)
    }

    /// Views of all chunks.
    pub fn chunk_views(&self) -> Vec<ChunkView> {
        self.chunks.values().map(Chunk::view).collect()
    }

    /// View of this device's manager role for a store (None if it has none).
    pub fn manager_view(&self, store: StoreId) -> Option<ManagerView> {
        self.managers
            .get(&store)
            .filter(|m| m.state != MgrState::None)
            .map(Manager::view)
    }

    /// Views of all manager roles that are not in the `None` state.
    pub fn manager_views(&self) -> Vec<ManagerView> {
        self.managers
            .values()
            .filter(|m| m.state != MgrState::None)
            .map(Manager::view)
            .collect()
    }

    /// The confirmed tables of a store this device manages (checkers look for lost
    /// operations right after a takeover).
    pub fn managed_tables(&self, store: StoreId) -> Option<&crate::data::Tables> {
        self.managers
            .get(&store)
            .filter(|m| m.state == MgrState::Manager)
            .map(|m| &m.data.table)
    }

    /// The session deadlines kept by the manager of a store this device manages (status
    /// pages show how long each session has left).
    pub fn managed_liveness(&self, store: StoreId) -> Option<&crate::session::Liveness> {
        self.managers
            .get(&store)
            .filter(|m| m.state == MgrState::Manager)
            .map(|m| &m.liveness)
    }

    /// A chunk's persistent record (checkers compare stored data).
    pub fn chunk_record(&self, id: ChunkId) -> Option<&ChunkPersist> {
        self.chunks.get(&id).map(|c| &c.p)
    }

    /// A chunk's object blocks (checkers compare them with the manifests).
    pub fn chunk_blocks(&self, id: ChunkId) -> Option<&crate::objects::blocks::ChunkBlocks> {
        self.chunks.get(&id).map(|c| &c.blocks)
    }

    /// The chunks the manager of `store` on this device knows to hold every object
    /// block (reads are served from these).
    pub fn complete_chunks(&self, store: StoreId) -> BTreeSet<ChunkId> {
        (self.managers.get(&store))
            .filter(|m| m.state == MgrState::Manager)
            .map(|m| m.objects.complete.clone())
            .unwrap_or_default()
    }

    /// Direct access to a chunk's state machine (tests).
    pub fn chunk_mut(&mut self, id: ChunkId) -> Option<&mut Chunk> {
        self.timers.get_mut().stale = Stale::All;
        self.chunks.get_mut(&id)
    }

    /// Direct access to a manager role (tests).
    pub fn manager_mut(&mut self, store: StoreId) -> &mut Manager {
        self.timers.get_mut().stale = Stale::All;
        self.managers
            .entry(store)
            .or_insert_with(|| Manager::new(store))
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
    m.state == MgrState::None && m.forwarding.is_none()
}

/// The one role a block message reaches (see [`Device::timers`]).
fn block_role(m: &crate::objects::msg::BlockMsg) -> Role {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClusterConfig;
    use crate::ids::ClientId;
    use crate::io::request::Request;

    /// A request to a store this device does not manage leaves an empty manager role
    /// behind; the next message, whatever role it reaches, collects it (as a full scan
    /// would).
    #[test]
    fn an_empty_manager_role_left_by_a_request_is_collected_by_the_next_message() {
        let cluster = ClusterConfig::new(5, 8, 3);
        let me = cluster.devices[4];
        let now = Instant(1_000_000);
        let (mut dev, _) = Device::new(
            DeviceConfig::new(me, cluster.clone()),
            DevicePersist::default(),
            now,
            7,
        );
        let store = (0..8)
            .map(StoreId)
            .find(|s| cluster.preferred_manager(*s) != me && !dev.managers.contains_key(s))
            .expect("a store without a role here");
        let before = dev.managers.len();
        let out = dev.handle(
            now,
            Input::Request {
                client: ClientId(1),
                req_id: 1,
                req: Request::Write {
                    store,
                    key: 1,
                    value: 1,
                },
            },
        );
        assert!(
            out.iter().any(|o| matches!(
                o,
                Output::Reply {
                    result: Err(crate::error::ClientError::NotManager { .. }),
                    ..
                }
            )),
            "{out:?}"
        );
        assert_eq!(dev.managers.len(), before + 1, "the request made a role");
        // A message to some chunk (this device has no such chunk).
        let chunk = ChunkId {
            device: me,
            serial: 999,
        };
        dev.handle(
            now,
            Input::Message {
                from: cluster.devices[0],
                msg: Msg::ToChunk {
                    store: StoreId(0),
                    chunk,
                    msg: ToChunk::Confirm {
                        epoch: Epoch(1),
                        upto: crate::ids::Version::default(),
                    },
                },
            },
        );
        assert_eq!(dev.managers.len(), before, "the empty role is collected");
        assert!(!dev.managers.contains_key(&store));
    }
}
