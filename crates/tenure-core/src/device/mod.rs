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
use crate::election::coordinator::Coordinator;
use crate::election::members::Members;
use crate::election::{Elector, Term};
use crate::error::ClientError;
use crate::ids::{ChunkId, DeviceId, Epoch, StoreId};
use crate::io::persist::ChunkPersist;
use crate::io::persist::DevicePersist;
use crate::io::persist::PersistOp;
use crate::io::{Input, Output};
use crate::layout::chunk::Chunk;
use crate::layout::manager::Manager;
use crate::layout::{ChunkView, ManagerView, Metadata, MgrState};
use crate::lookup::Node;
use crate::msg::Msg;
use crate::rng::Rng;
use crate::snapshot::Snapshots;
use crate::time::Instant;
use std::collections::{BTreeMap, BTreeSet};

mod coordinator;
mod forward;
mod routing;
mod sessions;

use routing::block_role;
pub use routing::{device_key, parse_store_entry, store_key};

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
    /// Requests forwarded to their store's manager, and those served here for another
    /// device ([`forward`]).
    forwards: forward::Forwards,
    /// Client requests under sessions that span stores, in progress ([`sessions`]).
    groups: sessions::Groups,
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
    /// The chunk and manager roles whose timers were due when the input arrived (only
    /// they are ticked), then those requests were served by: what [`Stale::Due`] names.
    due: Vec<Role>,
}

/// A timer's owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Role {
    Chunk(ChunkId),
    Manager(StoreId),
    Lookup,
    Election,
    Snapshot,
    Forward,
    Sessions,
}

/// Which cached timeouts may be out of date.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Stale {
    #[default]
    All,
    /// Only this role's.
    One(Role),
    /// The chunk and manager roles listed in [`Timers::due`] (those a tick reached, and
    /// the manager roles [`Device::serve`] served a request by), the device-wide roles
    /// (lookup, election, snapshot, forwards, sessions), and `also` if any: a tick calls
    /// only the roles whose timers are due, and a chunk's or a manager's timeout depends
    /// on its own state only.
    Due {
        also: Option<Role>,
    },
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
    /// The oldest encoding every peer reads: whether small puts are one change
    /// ([`Ctx::inline_values`]) and requests may be forwarded ([`forward`]).
    peers: crate::generation::Generation,
    /// The oldest encoding every peer connected so far reads: whether epoch transitions
    /// may ship what differs ([`Ctx::diff_transitions`], [`Ctx::rejoin_patches`]). A
    /// peer never connected is not counted: its messages only change how a state
    /// travels, and one it cannot read is dropped at encoding like a lost message.
    connected: crate::generation::Generation,
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
            inline_values: self.peers.inline_values(),
            diff_transitions: self.connected >= crate::generation::Generation::DiffTransitions,
            rejoin_patches: self.connected >= crate::generation::Generation::RejoinPatches,
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
                peers: crate::generation::Generation::CURRENT,
                connected: crate::generation::Generation::CURRENT,
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
            forwards: Default::default(),
            groups: Default::default(),
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
        // Chunks made now, at bootstrap, never reported a lease: no hold after boot.
        let mut fresh = false;
        if dev.next_serial == 0 && records.is_empty() {
            if dev.env.cfg.join {
                dev.next_serial = dev.env.cfg.cluster.first_free_serial();
                out.push(Output::Persist(PersistOp::SetNextSerial(dev.next_serial)));
            } else {
                records = dev.bootstrap(&mut out);
                fresh = true;
            }
        }
        for p in records {
            let id = p.id;
            let mut chunk = {
                let mut ctx = dev.env.ctx(now, &mut out);
                Chunk::boot(&mut ctx, p)
            };
            if fresh {
                chunk.boot_hold = None;
            }
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
        let reached = Self::reaches(&input);
        let tick = matches!(input, Input::Tick);
        let timers = self.timers.get_mut();
        timers.stale = match (due || tick, reached) {
            (_, Stale::All) => Stale::All,
            (false, Stale::Due { also }) => {
                timers.due.clear();
                Stale::Due { also }
            }
            (false, reached) => reached,
            (true, reached) => {
                // The cache is fresh here (`poll_timeout` refreshed it): the roles due
                // at `now` are those `on_tick` will call.
                timers.due.clear();
                (timers.due).extend(
                    (timers.order.range(..=(now, Role::Sessions)))
                        .map(|(_, r)| *r)
                        .filter(|r| matches!(r, Role::Chunk(_) | Role::Manager(_))),
                );
                // In the order `on_tick` calls them: chunks, then managers, by id.
                timers.due.sort_unstable();
                // A tick reaches nothing but the roles due.
                let also = match reached {
                    Stale::One(r) if !tick => Some(r),
                    Stale::Due { also } => also,
                    _ => None,
                };
                Stale::Due { also }
            }
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
                if let Some(req) = self.session_request(now, client, req_id, req, &mut out)
                    && !self.forward(now, client, req_id, &req, 0, &mut out)
                {
                    self.serve(now, client, req_id, req, &mut out);
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
        self.answer_groups(now, &mut out);
        self.publish_managers(now, &mut out);
        self.refresh_hints();
        self.forwards.answer_served(&mut out);
        self.snaps.tag(&mut out);
        self.finish(&mut out);
        out
    }

    /// Serve a client request here: by the store's manager role, or with a redirect to
    /// the manager a local chunk's lease names.
    fn serve(
        &mut self,
        now: Instant,
        client: crate::ids::ClientId,
        req_id: u64,
        req: crate::io::Request,
        out: &mut Vec<Output>,
    ) {
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
            // stale, and two of them can point at each other (sim seed 180613: clients
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
                timers,
                ..
            } = self;
            let mut ctx = env.ctx(now, out);
            requested.push(store);
            let timers = timers.get_mut();
            if let Stale::Due { .. } = timers.stale {
                timers.due.push(Role::Manager(store));
            }
            managers
                .entry(store)
                .or_insert_with(|| Manager::new(store))
                .request(&mut ctx, client, req_id, req);
        }
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
            // A keep-alive may start a session's renewal here (`sessions`), as may any
            // request under a session of another store, and a forwarded request is
            // served here: the device-wide roles, and each manager role a request is
            // served by (`serve` lists it).
            Input::Request {
                req:
                    crate::io::Request::KeepAlive { .. }
                    | crate::io::Request::CloseSession { .. }
                    | crate::io::Request::Under(_),
                ..
            }
            | Input::Message {
                msg: Msg::Forward(_),
                ..
            } => Stale::Due { also: None },
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
            | Input::Policy(_) => Stale::All,
            // Only the roles whose timers are due (see `handle`).
            Input::Tick => Stale::None,
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

    /// Earliest timer deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut timers = self.timers.borrow_mut();
        self.refresh(&mut timers);
        #[cfg(debug_assertions)]
        {
            // The cache against every role's timeout worked out afresh: a cached deadline
            // may be early (the role is ticked, finds nothing due and is looked at
            // again: the forwards' deadlines move later whenever a peer is heard from),
            // never late or missing.
            let mut fresh = Timers::default();
            self.refresh(&mut fresh);
            for (role, t) in &fresh.deadlines {
                let cached = timers.deadlines.get(role);
                assert!(
                    cached.is_some_and(|c| c <= t),
                    "{role:?}: cached timer {cached:?}, due at {t:?}"
                );
            }
        }
        timers.order.first().map(|(t, _)| *t)
    }

    /// Bring one role's entry up to date now, besides the one the input reached.
    fn refresh_role(&self, role: Role) {
        let mut timers = self.timers.borrow_mut();
        if timers.stale == Stale::All {
            return;
        }
        let pending = std::mem::replace(&mut timers.stale, Stale::One(role));
        self.refresh(&mut timers);
        timers.stale = pending;
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
            Role::Forward => self.forwards.next_timeout(&self.env),
            Role::Sessions => self.groups.next_timeout(),
        };
        let role = match std::mem::replace(&mut timers.stale, Stale::None) {
            Stale::None => return,
            Stale::One(role) => role,
            Stale::Due { also } => {
                let due = std::mem::take(&mut timers.due);
                let global = [Role::Lookup, Role::Election, Role::Snapshot, Role::Forward];
                let roles = (due.iter().copied())
                    .chain(global)
                    .chain([Role::Sessions])
                    .chain(also);
                for role in roles {
                    timers.stale = Stale::One(role);
                    self.refresh(timers);
                }
                timers.due = due;
                return;
            }
            Stale::All => {
                let roles = (self.chunks.keys().map(|id| Role::Chunk(*id)))
                    .chain(self.managers.keys().map(|s| Role::Manager(*s)))
                    .chain([Role::Lookup, Role::Election, Role::Snapshot, Role::Forward])
                    .chain([Role::Sessions]);
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
            chunks: self
                .chunks
                .iter()
                .map(|(k, c)| (*k, c.record.clone()))
                .collect(),
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

    /// The oldest encoding every peer reads: whether small puts are one change
    /// ([`Ctx::inline_values`]) and requests are forwarded ([`forward`]). The driver says
    /// so from the wire versions its peers negotiated.
    pub fn set_peer_generation(&mut self, oldest: crate::generation::Generation) {
        self.env.peers = oldest;
        self.env.connected = self.env.connected.min(oldest);
    }

    /// The oldest encoding every peer that has connected reads (at least the one
    /// [`Self::set_peer_generation`] was given): whether epoch transitions ship what
    /// differs. At a cluster's start the peers still opening their storage have not
    /// connected; the stores' first transitions need not ship whole states for them.
    pub fn set_connected_generation(&mut self, oldest: crate::generation::Generation) {
        self.env.connected = oldest.max(self.env.peers);
    }

    /// View of this device's manager role for a store (None if it has none).
    pub fn manager_view(&self, store: StoreId) -> Option<ManagerView> {
        self.managers
            .get(&store)
            .filter(|m| m.state() != MgrState::None)
            .map(Manager::view)
    }

    /// (store, epoch) of every store this device is the manager of (in the `Manager`
    /// state), in store order: what the simulator's checkers read after every event,
    /// without copying the views' metadata.
    pub fn managing(&self) -> impl Iterator<Item = (StoreId, Epoch)> + '_ {
        (self.managers.values())
            .filter(|m| m.state() == MgrState::Manager)
            .map(|m| (m.store, m.epoch))
    }

    /// Views of all manager roles that are not in the `None` state.
    pub fn manager_views(&self) -> Vec<ManagerView> {
        self.managers
            .values()
            .filter(|m| m.state() != MgrState::None)
            .map(Manager::view)
            .collect()
    }

    /// The confirmed tables of a store this device manages (checkers look for lost
    /// operations right after a takeover).
    pub fn managed_tables(&self, store: StoreId) -> Option<&crate::data::Tables> {
        self.managers
            .get(&store)
            .filter(|m| m.state() == MgrState::Manager)
            .map(|m| &m.host.data.table)
    }

    /// The session deadlines kept by the manager of a store this device manages (status
    /// pages show how long each session has left).
    pub fn managed_liveness(&self, store: StoreId) -> Option<&crate::session::Liveness> {
        self.managers
            .get(&store)
            .filter(|m| m.state() == MgrState::Manager)
            .map(|m| &m.clients.liveness)
    }

    /// A chunk's persistent record (checkers compare stored data).
    pub fn chunk_record(&self, id: ChunkId) -> Option<&ChunkPersist> {
        self.chunks.get(&id).map(|c| &c.record)
    }

    /// A chunk's object blocks (checkers compare them with the manifests).
    pub fn chunk_blocks(&self, id: ChunkId) -> Option<&crate::objects::blocks::ChunkBlocks> {
        self.chunks.get(&id).map(|c| &c.blocks)
    }

    /// The chunks the manager of `store` on this device knows to hold every object
    /// block (reads are served from these).
    pub fn complete_chunks(&self, store: StoreId) -> BTreeSet<ChunkId> {
        (self.managers.get(&store))
            .filter(|m| m.state() == MgrState::Manager)
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClusterConfig;
    use crate::ids::ClientId;
    use crate::io::request::Request;
    use crate::msg::ToChunk;

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
