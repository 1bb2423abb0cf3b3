//! The device driver task: quinn's `ConnectionDriver` shape around the sans-IO core.
//!
//! One task owns the [`Device`]. It waits for the first of: a peer message, a client call,
//! the core's timer, or the end of a storage commit; then it drains whatever else is
//! already queued (up to [`MAX_BATCH`] inputs), feeding each to [`Device::handle`].
//!
//! Outputs are released in the order the core requires, without ever blocking the task on
//! the disk (pipelined group commit; the groups and the held outputs are
//! [`tenure_core::pipeline`]'s, which the simulator runs too):
//!
//! 1. every `Persist` joins the *open commit group*, which is handed to the storage thread
//!    at the end of each turn of the loop. The storage thread commits in order, and each
//!    commit takes every group that queued up while the previous one ran, in ONE durable
//!    write (one disk flush however many persists it holds). It never waits for the driver
//!    between commits, and the driver never waits for the disk.
//! 2. every `Send` and `Reply` (and status answer) waits, in output order, until every
//!    `Persist` it may depend on is durable: it is tagged with the newest group holding
//!    such a persist and held in a FIFO queue until that group's commit returns.
//!
//!    What an output may depend on is decided per store. A device's stores are
//!    independent state machines (each store's chunk and manager roles read and write
//!    only that store's state, and reach each other only by messages), so an output of
//!    store S waits for every earlier persist of S and every earlier device-wide persist
//!    (the chunk serial counter, or a persist of a chunk whose store is unknown), but not
//!    for other stores' persists. A crash then loses, per store, a suffix of that store's
//!    persists that nothing which left the device depends on: for each store it is the
//!    torn crash the simulator exercises. The lookup node (seed 003) is one more such
//!    domain: its messages, replies and subscription events wait for its own persists
//!    (persistent entries and tombstones) and device-wide ones, and no store waits for
//!    them. Outputs that belong to no store (policy messages, status answers) wait for
//!    every earlier persist. Each domain's outputs leave in output order (per store and
//!    per peer FIFO, which SafeTalk needs), outputs ready at once leave in output order,
//!    and nothing overtakes a device-wide send to the same peer: a snapshot's marker
//!    separates what was sent before its cut from what was sent after on the whole
//!    channel, as Chandy-Lamport needs.
//! 3. `Observe`s become metrics at once. `SetTimer` needs no action: the driver asks
//!    [`Device::poll_timeout`] before every wait.
//!
//! So a crash loses at most a suffix of the persists, and nothing that left the device
//! depends on a lost one: what peers and clients saw is what they would have seen had the
//! device crashed in the middle of an output batch (which the simulator exercises).
//!
//! A storage failure is fatal: a device that cannot make its state durable must stop
//! (crash-stop), never acknowledge.
//!
//! Local time: the core's [`Instant`] is microseconds since the Unix epoch read from the
//! system clock (so devices on one machine agree within δ_c), clamped to never go back.

use crate::storage::{Storage, StorageError};
use crate::transport::{Inbound, Transport};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use crate::clock::Clock;
use tenure_core::gate::Domain;
use tenure_core::ids::{ChunkId, ClientId, DeviceId, StoreId};
use tenure_core::io::{
    ClientError, EpochCause, Input, Observation, Output, PersistOp, Request, Response,
};
use tenure_core::layout::{ChunkView, ManagerView};
use tenure_core::lookup::{SubEvent, SubId};
use tenure_core::msg::{Msg, ToChunk, ToManager};
use tenure_core::pipeline::{Pipeline, Release};
use tenure_core::{Device, DeviceConfig, Instant};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, error, info};

/// Most inputs handled in one turn of the driver loop.
pub const MAX_BATCH: usize = 512;

/// A client's answer.
pub type Answer = Result<Response, ClientError>;

/// A call from the client API into the driver.
#[derive(Debug)]
pub enum Call {
    /// A protocol request; the answer comes when the core replies.
    Request {
        /// The request.
        req: Request,
        /// Where the answer goes.
        reply: oneshot::Sender<Answer>,
    },
    /// A lookup request (seed 003); the answer comes when the core replies (at once, or
    /// when the lookup leader answers, or `NoLeader` after the round-trip delay).
    Lookup {
        /// The request.
        req: tenure_core::lookup::LookupRequest,
        /// Where the answer goes.
        reply: oneshot::Sender<Answer>,
    },
    /// A protocol request made as an existing client: the object watches of a session
    /// stream are made and removed as the stream's watch client ([`WatchRoutes`]), so
    /// the core's `(client, watch)` names the same watch in both.
    RequestAs {
        /// The client.
        client: ClientId,
        /// The request.
        req: Request,
        /// Where the answer goes.
        reply: oneshot::Sender<Answer>,
    },
    /// A snapshot of the device's state.
    Status {
        /// Whether to include the tables of the stores managed here and the device's
        /// other state ([`StatusDetail`], for the status page); the gRPC `Status` takes
        /// the counts only.
        detail: bool,
        /// Where it goes.
        reply: oneshot::Sender<StatusView>,
    },
    /// The membership record (DESIGN §6), after `cmd` is handed to the core as
    /// `Input::Policy`, if there is one ([`crate::cluster_api`]).
    Membership {
        /// An operator's `AddDevice` or `RemoveDevice`.
        cmd: Option<tenure_core::io::PolicyCommand>,
        /// Where the record goes.
        reply: oneshot::Sender<crate::cluster_api::MembersView>,
    },
    /// Start a consistent snapshot of the cluster here (`Input::StartSnapshot`); the
    /// reply is its id, at once ([`crate::snapshots::Book`] follows it).
    StartSnapshot {
        /// Where the id goes.
        reply: oneshot::Sender<tenure_core::snapshot::SnapshotId>,
    },
}

/// What the driver tells the client API's session streams (a broadcast: every stream
/// sees every event and keeps those of its store and session).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceEvent {
    /// This device stopped managing `store`: its streams end with a redirect.
    StoppedManaging {
        /// The store.
        store: StoreId,
    },
    /// A session's end is durable and applied at its manager (this device).
    SessionEnded {
        /// The store.
        store: StoreId,
        /// The session.
        session: tenure_core::ids::SessionId,
        /// Expired (true) or closed.
        expired: bool,
    },
}

/// What `Status` reports.
#[derive(Clone, Debug)]
pub struct StatusView {
    /// This device.
    pub device: DeviceId,
    /// Every device of the cluster.
    pub devices: Vec<DeviceId>,
    /// Number of stores.
    pub stores: u32,
    /// Chunks held here.
    pub chunks: Vec<ChunkView>,
    /// Manager roles held here.
    pub managers: Vec<ManagerView>,
    /// Open sessions and held locks of each store managed here.
    pub tables: BTreeMap<StoreId, TableCounts>,
    /// Local time.
    pub now: Instant,
    /// The coordinator this device follows (or is), if it knows one.
    pub coordinator: Option<tenure_core::election::Term>,
    /// Whether this device acts as the coordinator.
    pub acting_coordinator: bool,
    /// The rest of what the device knows, when it was asked for.
    pub detail: Option<Box<StatusDetail>>,
}

/// What the status page shows beyond [`StatusView`]'s counts: the membership record,
/// the lookup node, and the sessions, locks and objects of every store managed here.
#[derive(Clone, Debug)]
pub struct StatusDetail {
    /// The membership record and the coordinator (the same view `service Cluster` gives).
    pub members: crate::cluster_api::MembersView,
    /// The lookup node (seed 003).
    pub lookup: tenure_core::lookup::NodeView,
    /// The stores managed here.
    pub stores: BTreeMap<StoreId, StoreDetail>,
}

/// Most locks of one store a [`StoreDetail`] lists (the rest are counted only), so a
/// status answer stays small whatever the table holds.
pub const DETAIL_LOCKS_MAX: usize = 200;
/// Most sessions of one store a [`StoreDetail`] lists.
pub const DETAIL_SESSIONS_MAX: usize = 200;

/// The tables of one store managed here.
#[derive(Clone, Debug, Default)]
pub struct StoreDetail {
    /// Open sessions (at most [`DETAIL_SESSIONS_MAX`]), by id.
    pub sessions: Vec<SessionDetail>,
    /// Open sessions in all.
    pub sessions_total: usize,
    /// Locks with holders or waiters (at most [`DETAIL_LOCKS_MAX`]), by name.
    pub locks: Vec<tenure_core::lockctl::LockInfo>,
    /// Locks with holders or waiters in all.
    pub locks_total: usize,
    /// Active objects.
    pub objects: u64,
    /// Their bytes.
    pub object_bytes: u64,
    /// The store's object revision.
    pub object_revision: u64,
}

/// One open session of a store managed here.
#[derive(Clone, Debug)]
pub struct SessionDetail {
    /// Its id.
    pub id: tenure_core::ids::SessionId,
    /// Its time to live between keep-alives.
    pub ttl: Duration,
    /// Time left before its deadline on the manager's clock (none: no deadline known;
    /// zero: past it, its expiry under way).
    pub expires_in: Option<Duration>,
    /// Locks it holds.
    pub holds: usize,
}

/// Sizes of a managed store's tables, for status pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableCounts {
    /// Open sessions.
    pub sessions: u32,
    /// Locks with at least one holder.
    pub locks_held: u32,
}

/// Where each lookup subscription's pushed events go: the Watch stream that subscribed
/// registers its subscription ids here (before it subscribes) and removes them when it
/// ends. Shared by the driver, which routes every `Output::LookupEvent` by its
/// subscription id, and the client API.
#[derive(Clone, Debug, Default)]
pub struct SubRoutes {
    inner: Arc<Mutex<HashMap<SubId, mpsc::Sender<SubEvent>>>>,
}

impl SubRoutes {
    /// Send `sub`'s events to `tx` (replacing an earlier stream's registration: a
    /// subscriber that reconnected takes its subscription along).
    pub fn register(&self, sub: SubId, tx: mpsc::Sender<SubEvent>) {
        self.lock().insert(sub, tx);
    }

    /// Stop routing `sub`'s events, if they still go to `tx` (a stream that took the
    /// subscription over keeps it).
    pub fn unregister(&self, sub: SubId, tx: &mpsc::Sender<SubEvent>) {
        let mut m = self.lock();
        if m.get(&sub).is_some_and(|t| t.same_channel(tx)) {
            m.remove(&sub);
        }
    }

    /// Whether `sub` is routed to `tx`.
    pub fn routes_to(&self, sub: SubId, tx: &mpsc::Sender<SubEvent>) -> bool {
        self.lock().get(&sub).is_some_and(|t| t.same_channel(tx))
    }

    /// Hand an event to its stream. A stream that is gone or too far behind loses the
    /// event: the subscriber sees the gap in the sequence numbers and asks for a sync.
    fn route(&self, ev: SubEvent) {
        let tx = self.lock().get(&ev.sub).cloned();
        match tx {
            Some(tx) => {
                if tx.try_send(ev).is_err() {
                    metrics::counter!("tenure_lookup_events_dropped_total").increment(1);
                }
            }
            None => {
                debug!(sub = ev.sub, "lookup event for no stream here");
                metrics::counter!("tenure_lookup_events_unrouted_total").increment(1);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SubId, mpsc::Sender<SubEvent>>> {
        // The map is always consistent: a panic elsewhere cannot leave it half-changed.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What a watch's stream is told.
#[derive(Clone, Debug, PartialEq)]
pub enum WatchMsg {
    /// Changes, in revision order.
    Events(Vec<tenure_core::objects::Change>),
    /// The watch ended at this device (its manager stopped managing the store, or its
    /// history no longer reaches back to where it was): resume from the last revision
    /// seen, elsewhere, or re-read.
    Ended(ClientError),
}

/// A watch's destination: its store and its stream's channel.
type WatchRoute = (StoreId, mpsc::UnboundedSender<(u64, WatchMsg)>);

/// Where the object watches' pushed changes go (`Output::ObjectEvents`, `WatchEnded`):
/// each session stream that watches takes a client id of its own here
/// ([`WatchRoutes::new_client`]) and registers every watch it makes under it. The
/// channel is unbounded: the driver never waits for a stream, and a watch must not lose
/// a change (a slow stream costs memory until its client reads or goes away).
#[derive(Clone, Debug, Default)]
pub struct WatchRoutes {
    inner: Arc<Mutex<HashMap<(ClientId, u64), WatchRoute>>>,
    next: Arc<std::sync::atomic::AtomicU64>,
}

impl WatchRoutes {
    /// A client id for a stream's watches (disjoint from the driver's request ids).
    pub fn new_client(&self) -> ClientId {
        let n = (self.next).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        ClientId((1 << 62) | n)
    }

    /// Send the events of `(client, watch)` in `store` to `tx`.
    pub fn register(
        &self,
        client: ClientId,
        watch: u64,
        store: StoreId,
        tx: mpsc::UnboundedSender<(u64, WatchMsg)>,
    ) {
        self.lock().insert((client, watch), (store, tx));
    }

    /// Stop routing the events of `(client, watch)`.
    pub fn unregister(&self, client: ClientId, watch: u64) {
        self.lock().remove(&(client, watch));
    }

    /// Watches routed (the watch-stream gauge).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no watch is routed.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn store_of(&self, client: ClientId, watch: u64) -> Option<StoreId> {
        self.lock().get(&(client, watch)).map(|(s, _)| *s)
    }

    fn route(&self, client: ClientId, watch: u64, msg: WatchMsg) {
        let mut m = self.lock();
        let ended = matches!(msg, WatchMsg::Ended(_));
        let gone = match m.get(&(client, watch)) {
            Some((_, tx)) => tx.send((watch, msg)).is_err(),
            None => {
                debug!(
                    client = client.0,
                    watch, "object watch event for no stream here"
                );
                false
            }
        };
        if ended || gone {
            m.remove(&(client, watch));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(ClientId, u64), WatchRoute>> {
        // The map is always consistent: a panic elsewhere cannot leave it half-changed.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Driver failures (all fatal for the device).
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// Storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The storage worker panicked or was cancelled.
    #[error("storage worker failed: {0}")]
    Worker(String),
}

/// The driver.
pub struct Driver {
    device: Device,
    committer: Committer,
    transport: Transport,
    peers: mpsc::Receiver<Inbound>,
    calls: mpsc::Receiver<Call>,
    pending: HashMap<u64, Pending>,
    next_client: u64,
    clock: Clock,
    /// The open commit group, the groups' durability, and the sends, replies and status
    /// answers waiting for their group (released per domain in output order).
    pipe: Pipeline<Held>,
    /// Membership calls of the batch being handled, answered after its outputs.
    member_replies: Vec<oneshot::Sender<crate::cluster_api::MembersView>>,
    /// When the last SafeTalk ACCEPT to each chunk was produced, for the round-trip
    /// histogram (ACCEPT out to ACCEPTED in).
    accept_sent: HashMap<ChunkId, std::time::Instant>,
    metrics: HotMetrics,
    /// Events for the session streams.
    events: tokio::sync::broadcast::Sender<DeviceEvent>,
    /// Where each lookup subscription's events go (its Watch stream).
    lookup_subs: SubRoutes,
    /// Where each object watch's changes go (its session stream).
    watches: WatchRoutes,
    /// When the lookup node's gauges were last set.
    gauges_at: std::time::Instant,
    /// Redirect hints, kept in line with the membership record.
    endpoints: crate::cluster_api::Endpoints,
    /// This device retired from the cluster: it stops once its outputs are out.
    retired: bool,
    /// The snapshots this device takes part in (their parts are written on a thread of
    /// their own; a Done/Continue leaves once its part is durable).
    snapshots: crate::snapshots::Book,
}

/// Handles of the metrics recorded for every request, message or turn: looked up in the
/// registry once, not at each use.
struct HotMetrics {
    batch_inputs: metrics::Histogram,
    accept_local: metrics::Histogram,
    accept_remote: metrics::Histogram,
    writes: metrics::Counter,
    chunk_ops_served: metrics::Counter,
    /// Latency histograms per request kind.
    requests: HashMap<&'static str, RequestMetrics>,
}

impl HotMetrics {
    fn new() -> HotMetrics {
        // Counters that may stay at zero for a long time are shown from the start.
        metrics::counter!("tenure_object_gc_lease_takeovers_total").increment(0);
        for outcome in ["sent", "applied", "refused"] {
            metrics::counter!("tenure_coordinator_commands_total", "outcome" => outcome)
                .increment(0);
        }
        HotMetrics {
            batch_inputs: metrics::histogram!("tenure_driver_batch_inputs"),
            accept_local: metrics::histogram!("tenure_safetalk_accept_seconds", "chunk" => "local"),
            accept_remote: metrics::histogram!("tenure_safetalk_accept_seconds", "chunk" => "remote"),
            writes: metrics::counter!("tenure_writes_total"),
            chunk_ops_served: metrics::counter!("tenure_chunk_ops_served_total"),
            requests: HashMap::new(),
        }
    }

    /// The latency histograms of requests of `kind`.
    fn request(&mut self, kind: &'static str) -> RequestMetrics {
        self.requests
            .entry(kind)
            .or_insert_with(|| RequestMetrics {
                answered: metrics::histogram!("tenure_request_answered_seconds", "kind" => kind),
                seconds: metrics::histogram!("tenure_request_seconds", "kind" => kind),
            })
            .clone()
    }
}

/// The latency histograms of one kind of request.
#[derive(Clone)]
struct RequestMetrics {
    /// Until the core answered.
    answered: metrics::Histogram,
    /// Until the answer left (durable).
    seconds: metrics::Histogram,
}

/// A client request the core has not answered yet.
struct Pending {
    /// The persists its answer waits for.
    domain: Domain,
    /// The latency histograms of the request's kind.
    metrics: RequestMetrics,
    reply: oneshot::Sender<Answer>,
    started: std::time::Instant,
}

/// The metric label of a request.
fn request_kind(req: &Request) -> &'static str {
    match req {
        Request::Write { .. } => "write",
        Request::OpenSession { .. } => "open_session",
        Request::KeepAlive { .. } => "keep_alive",
        Request::CloseSession { .. } => "close_session",
        Request::Acquire { .. } => "acquire",
        Request::Release { .. } => "release",
        Request::ReleaseFenced { .. } => "release_fenced",
        Request::Holders { .. } => "holders",
        Request::LocksUnder { .. } => "locks_under",
        Request::Object { req, .. } => {
            use tenure_core::io::ObjectRequest as O;
            match req {
                O::Put { .. } => "object_put",
                O::Get { .. } => "object_get",
                O::Head { .. } => "object_head",
                O::Delete { .. } => "object_delete",
                O::List { .. } => "object_list",
                O::MultipartInitiate { .. } => "object_multipart_initiate",
                O::MultipartPart { .. } => "object_multipart_part",
                O::MultipartComplete { .. } => "object_multipart_complete",
                O::MultipartAbort { .. } => "object_multipart_abort",
                O::Watch { .. } => "object_watch",
                O::Unwatch { .. } => "object_unwatch",
            }
        }
    }
}

/// The metric label of a lookup request.
fn lookup_kind(req: &tenure_core::lookup::LookupRequest) -> &'static str {
    use tenure_core::lookup::LookupRequest as L;
    match req {
        L::Publish { .. } => "lookup_publish",
        L::Revoke { .. } => "lookup_revoke",
        L::Get { .. } => "lookup_get",
        L::List { .. } => "lookup_list",
        L::Subscribe { .. } => "lookup_subscribe",
        L::Unsubscribe { .. } => "lookup_unsubscribe",
        L::Status => "lookup_status",
    }
}

/// An output that leaves the device once the persists before it are durable.
// Moved once into the queue and once out, like the core's `Output`.
#[allow(clippy::large_enum_variant)]
enum Held {
    Send(DeviceId, tenure_core::msg::Msg),
    Reply(u64, Answer),
    Status(oneshot::Sender<StatusView>, bool),
    /// A membership call's answer: the record as it stands once what the call changed
    /// is durable.
    Members(oneshot::Sender<crate::cluster_api::MembersView>),
    LookupEvent(SubEvent),
    Watch(ClientId, u64, WatchMsg),
}

/// The storage thread: commits groups of persists in the order received (all the groups
/// queued at once in one commit), and reports the newest group number each commit made
/// durable.
struct Committer {
    jobs: Option<std::sync::mpsc::Sender<(u64, Vec<PersistOp>)>>,
    done: mpsc::UnboundedReceiver<(u64, Result<(), StorageError>)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Committer {
    /// Let the running commit finish and close the database before the driver is gone,
    /// so the same data directory can be opened again at once.
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Committer {
    fn start(storage: Storage) -> Result<Committer, DriverError> {
        let (jobs, rx) = std::sync::mpsc::channel::<(u64, Vec<PersistOp>)>();
        let (tx, done) = mpsc::unbounded_channel();
        let thread = std::thread::Builder::new()
            .name("tenure-storage".into())
            .spawn(move || {
                let mut storage = storage;
                let commit_seconds = metrics::histogram!("tenure_storage_commit_seconds");
                let commits = metrics::counter!("tenure_storage_commits_total");
                let committed_ops = metrics::counter!("tenure_storage_ops_total");
                let checkpoints = metrics::counter!("tenure_storage_checkpoints_total");
                while let Ok((mut group, mut ops)) = rx.recv() {
                    // Every group queued meanwhile joins this commit (in order).
                    while let Ok((g, more)) = rx.try_recv() {
                        group = g;
                        ops.extend(more);
                    }
                    let n = ops.len();
                    let started = std::time::Instant::now();
                    let r = storage.commit_logged(ops);
                    commit_seconds.record(started.elapsed().as_secs_f64());
                    commits.increment(1);
                    committed_ops.increment(n as u64);
                    checkpoints.absolute(storage.checkpoints());
                    let logged = match r {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = tx.send((group, Err(e)));
                            return;
                        }
                    };
                    // Durable: announce it first, then bring the in-memory copy up to
                    // date (it is only read by the next commit's checkpoint).
                    if tx.send((group, Ok(()))).is_err() {
                        return;
                    }
                    storage.apply_logged(logged);
                }
            })
            .map_err(|e| DriverError::Worker(e.to_string()))?;
        Ok(Committer {
            jobs: Some(jobs),
            done,
            thread: Some(thread),
        })
    }
}

impl Driver {
    /// Boot the core from `storage`'s state and make the boot outputs durable/sent.
    pub async fn boot(
        cfg: DeviceConfig,
        storage: Storage,
        state: tenure_core::io::DevicePersist,
        rng_seed: u64,
        transport: Transport,
        peers: mpsc::Receiver<Inbound>,
        calls: mpsc::Receiver<Call>,
    ) -> Result<Driver, DriverError> {
        let mut clock = Clock::default();
        let chunks = state.chunks.len();
        let pipe = Pipeline::booted(
            state.chunks.values().map(|c| (c.id, c.store)),
            Release::DomainOrder,
        );
        let (device, out) = Device::new(cfg, state, clock.now(), rng_seed);
        info!(
            device = %device.id(),
            chunks_on_disk = chunks,
            "device booted"
        );
        let mut d = Driver {
            device,
            committer: Committer::start(storage)?,
            transport,
            peers,
            calls,
            pending: HashMap::new(),
            next_client: 1,
            clock,
            pipe,
            member_replies: Vec::new(),
            accept_sent: HashMap::new(),
            metrics: HotMetrics::new(),
            events: tokio::sync::broadcast::channel(1).0,
            lookup_subs: SubRoutes::default(),
            watches: WatchRoutes::default(),
            gauges_at: std::time::Instant::now(),
            endpoints: Default::default(),
            retired: false,
            snapshots: crate::snapshots::Book::default(),
        };
        d.release(out);
        d.flush_held();
        d.start_commit();
        while !d.pipe.all_durable() {
            d.await_commit().await?;
            d.start_commit();
        }
        Ok(d)
    }

    /// Send session-stream events to `events` (booting sends none: no stream exists yet).
    pub fn with_events(mut self, events: tokio::sync::broadcast::Sender<DeviceEvent>) -> Driver {
        self.events = events;
        self
    }

    /// Route lookup subscription events through `routes` (the Watch streams register
    /// their subscriptions there).
    pub fn with_lookup_routes(mut self, routes: SubRoutes) -> Driver {
        self.lookup_subs = routes;
        self
    }

    /// Route object watch changes through `routes` (the session streams register their
    /// watches there).
    pub fn with_watch_routes(mut self, routes: WatchRoutes) -> Driver {
        self.watches = routes;
        self
    }

    /// Write snapshot parts into `book`'s directory and keep the results there.
    pub fn with_snapshots(mut self, book: crate::snapshots::Book) -> Driver {
        book.attach(self.transport.clone());
        self.snapshots = book;
        self
    }

    /// Feed a restored device the messages its snapshot recorded in flight towards it,
    /// before any other input ([`crate::snapshots::take_replay`]), and wait until what
    /// they changed is durable.
    pub async fn replay(&mut self, msgs: Vec<(DeviceId, Msg)>) -> Result<(), DriverError> {
        let mut out = Vec::new();
        for (from, msg) in msgs {
            self.input(Input::Message { from, msg }, &mut out);
        }
        self.release(out);
        self.flush_held();
        self.start_commit();
        while !self.pipe.all_durable() {
            self.await_commit().await?;
            self.start_commit();
        }
        Ok(())
    }

    /// Keep the transport's peers and the redirect hints in `endpoints` in line with the
    /// membership record, from the record the device booted with on.
    pub fn with_members(mut self, endpoints: crate::cluster_api::Endpoints) -> Driver {
        self.endpoints = endpoints;
        let me = self.device.id();
        let members = self.device.members();
        crate::cluster_api::apply_members(me, members, &self.transport, &self.endpoints);
        self
    }

    /// Run until the call channel closes (the server shut down), storage fails, or the
    /// device retires from the cluster.
    pub async fn run(mut self) -> Result<(), DriverError> {
        let me = self.device.id();
        if self.device.members().retired.contains(&me) {
            info!(device = %me, "this device retired from the cluster (a retired id never returns); not serving");
            return Ok(());
        }
        loop {
            let now = self.clock.now();
            let wait = self
                .device
                .poll_timeout()
                .map(|t| t.saturating_since(now))
                .unwrap_or(Duration::from_secs(1))
                .min(Duration::from_secs(1));
            let mut out = Vec::new();
            let mut statuses: Vec<(oneshot::Sender<StatusView>, bool)> = Vec::new();
            let mut n = 0;
            tokio::select! {
                m = self.peers.recv() => match m {
                    Some((from, msg)) => {
                        self.input(Input::Message { from, msg }, &mut out);
                        n += 1;
                    }
                    None => return Ok(()),
                },
                c = self.calls.recv() => match c {
                    Some(c) => {
                        self.call(c, &mut out, &mut statuses);
                        n += 1;
                    }
                    None => return Ok(()),
                },
                r = self.committer.done.recv(), if !self.pipe.all_durable() => {
                    self.committed(r)?;
                }
                _ = tokio::time::sleep(wait) => {}
            }
            // Take everything already queued into the same batch.
            while n < MAX_BATCH {
                if let Ok((from, msg)) = self.peers.try_recv() {
                    self.input(Input::Message { from, msg }, &mut out);
                } else if let Ok(c) = self.calls.try_recv() {
                    self.call(c, &mut out, &mut statuses);
                } else {
                    break;
                }
                n += 1;
            }
            let now = self.clock.now();
            if self.device.poll_timeout().is_some_and(|t| t <= now) {
                self.input(Input::Tick, &mut out);
            }
            if n > 0 {
                self.metrics.batch_inputs.record(n as f64);
            }
            self.release(out);
            // Status answers come after every output of the batch.
            for (tx, detail) in statuses {
                self.hold(Domain::Device, Held::Status(tx, detail));
            }
            for tx in std::mem::take(&mut self.member_replies) {
                self.hold(Domain::Device, Held::Members(tx));
            }
            self.flush_held();
            self.start_commit();
            if self.gauges_at.elapsed() >= Duration::from_secs(1) {
                self.gauges_at = std::time::Instant::now();
                lookup_gauges(&self.device.lookup().view());
                coordinator_gauges(&self.device);
                self.object_gauges();
            }
            if self.pending.len() > 4096 {
                self.pending.retain(|_, p| !p.reply.is_closed());
            }
            if self.retired {
                return self.retire().await;
            }
        }
    }

    fn input(&mut self, input: Input, out: &mut Vec<Output>) {
        if let Input::Message {
            msg:
                Msg::ToManager {
                    chunk,
                    msg: ToManager::Accepted { .. },
                    ..
                },
            ..
        } = &input
            && let Some(t) = self.accept_sent.remove(chunk)
        {
            let h = if chunk.device == self.device.id() {
                &self.metrics.accept_local
            } else {
                &self.metrics.accept_remote
            };
            h.record(t.elapsed().as_secs_f64());
        }
        let now = self.clock.now();
        out.extend(self.device.handle(now, input));
    }

    fn call(
        &mut self,
        call: Call,
        out: &mut Vec<Output>,
        statuses: &mut Vec<(oneshot::Sender<StatusView>, bool)>,
    ) {
        match call {
            Call::Request { req, reply } => {
                let id = self.next_client;
                self.call(
                    Call::RequestAs {
                        client: ClientId(id),
                        req,
                        reply,
                    },
                    out,
                    statuses,
                );
            }
            Call::RequestAs { client, req, reply } => {
                let id = self.next_client;
                self.next_client += 1;
                self.pending.insert(
                    id,
                    Pending {
                        domain: Domain::Store(req.store()),
                        metrics: self.metrics.request(request_kind(&req)),
                        reply,
                        started: std::time::Instant::now(),
                    },
                );
                self.input(
                    Input::Request {
                        client,
                        req_id: id,
                        req,
                    },
                    out,
                );
            }
            Call::Lookup { req, reply } => {
                let id = self.next_client;
                self.next_client += 1;
                self.pending.insert(
                    id,
                    Pending {
                        domain: Domain::Lookup,
                        metrics: self.metrics.request(lookup_kind(&req)),
                        reply,
                        started: std::time::Instant::now(),
                    },
                );
                self.input(
                    Input::Lookup {
                        client: ClientId(id),
                        req_id: id,
                        req,
                    },
                    out,
                );
            }
            Call::Status { detail, reply } => statuses.push((reply, detail)),
            Call::Membership { cmd, reply } => {
                if let Some(cmd) = cmd {
                    self.input(Input::Policy(cmd), out);
                }
                // Answered after the batch's outputs, once they are durable: an operator
                // is never shown a record its coordinator could still lose in a crash.
                self.member_replies.push(reply);
            }
            Call::StartSnapshot { reply } => {
                let from = out.len();
                self.input(Input::StartSnapshot, out);
                if let Some(id) = out[from..].iter().find_map(|o| match o {
                    Output::SnapshotStarted { id } => Some(*id),
                    _ => None,
                }) {
                    let _ = reply.send(id);
                }
            }
        }
    }

    /// Take a batch's outputs in order: persists join the open group, sends and replies
    /// wait behind the persists produced before them, observations become metrics.
    fn release(&mut self, out: Vec<Output>) {
        for o in out {
            match o {
                Output::Persist(op) => {
                    if let PersistOp::LookupRemove(_) = &op {
                        metrics::counter!("tenure_lookup_persistent_removals_total").increment(1);
                    }
                    self.pipe.persist(op);
                }
                Output::Send { to, msg } => {
                    if let Msg::ToChunk {
                        chunk,
                        msg: ToChunk::Accept { .. },
                        ..
                    } = &msg
                    {
                        self.accept_sent.insert(*chunk, std::time::Instant::now());
                    }
                    self.hold(Domain::of_msg(&msg), Held::Send(to, msg))
                }
                Output::Reply { req_id, result, .. } => {
                    let domain = match self.pending.get(&req_id) {
                        Some(p) => {
                            p.metrics.answered.record(p.started.elapsed().as_secs_f64());
                            p.domain
                        }
                        None => Domain::Device,
                    };
                    self.hold(domain, Held::Reply(req_id, result))
                }
                Output::Observe(obs) => {
                    self.event(&obs);
                    self.membership(&obs);
                    observe(&obs, &self.metrics)
                }
                Output::SetTimer(_) => {}
                Output::LookupEvent(ev) => self.hold(Domain::Lookup, Held::LookupEvent(ev)),
                Output::SnapshotStarted { id } => self.snapshots.started(id),
                // Written on the book's thread; the device's Done/Continue for it waits
                // until it is durable (`pass` below).
                Output::SnapshotPart(part) => self.snapshots.record(part),
                Output::SnapshotEnded { id, result } => self.snapshots.ended(id, result),
                Output::ObjectEvents {
                    client,
                    watch,
                    changes,
                } => self.hold_watch(client, watch, WatchMsg::Events(changes)),
                Output::WatchEnded {
                    client,
                    watch,
                    reason,
                } => self.hold_watch(client, watch, WatchMsg::Ended(reason)),
            }
        }
    }

    /// Follow a membership change: new members become peers and redirect targets, retired
    /// ones are dropped; this device's own retirement stops it after this turn.
    fn membership(&mut self, obs: &Observation) {
        match obs {
            Observation::Members { members } => {
                info!(
                    "membership record {}",
                    crate::cluster_api::describe(members)
                );
                let me = self.device.id();
                crate::cluster_api::apply_members(me, members, &self.transport, &self.endpoints);
            }
            Observation::Retired => self.retired = true,
            _ => {}
        }
    }

    /// This device retired: make what it produced durable and let it out, then stop.
    async fn retire(&mut self) -> Result<(), DriverError> {
        while !self.pipe.all_durable() {
            self.await_commit().await?;
            self.start_commit();
        }
        self.flush_held();
        // The transport writes what was just queued before it closes.
        tokio::time::sleep(Duration::from_millis(200)).await;
        info!(device = %self.device.id(), "this device retired from the cluster: it holds no chunks and manages no stores; stopping");
        Ok(())
    }

    /// Tell the session streams what concerns them. A session's end goes out once it is
    /// applied: the change that releases its locks is durable on every live chunk by then.
    fn event(&self, obs: &Observation) {
        let ev = match obs {
            Observation::StoppedManaging { store, .. } => {
                DeviceEvent::StoppedManaging { store: *store }
            }
            Observation::SessionEnded {
                store,
                session,
                expired,
            } => DeviceEvent::SessionEnded {
                store: *store,
                session: *session,
                expired: *expired,
            },
            _ => return,
        };
        // No stream listening is not an error.
        let _ = self.events.send(ev);
    }

    /// Queue a watch's message behind the persists of its store (after the answer to the
    /// watch request, which is held the same way).
    fn hold_watch(&mut self, client: ClientId, watch: u64, msg: WatchMsg) {
        let domain = self
            .watches
            .store_of(client, watch)
            .map_or(Domain::Device, Domain::Store);
        self.hold(domain, Held::Watch(client, watch, msg));
    }

    /// The object gauges of the stores managed here: active objects and their bytes, the
    /// collector's backlog (manifests pending deletion), and the watches served.
    fn object_gauges(&self) {
        use tenure_core::objects::ManifestState;
        let (mut objects, mut bytes, mut backlog) = (0u64, 0u64, 0u64);
        for m in self.device.manager_views() {
            let Some(t) = self.device.managed_tables(m.store) else {
                continue;
            };
            let t = &t.objects;
            for dict in t.keys.values() {
                backlog += (dict.values())
                    .filter(|m| m.state == ManifestState::PendingDelete)
                    .count() as u64;
            }
            for key in t.keys.keys() {
                if let Some(a) = t.active(key) {
                    objects += 1;
                    bytes += a.size;
                }
            }
        }
        metrics::gauge!("tenure_objects").set(objects as f64);
        metrics::gauge!("tenure_object_bytes").set(bytes as f64);
        metrics::gauge!("tenure_object_gc_backlog").set(backlog as f64);
        metrics::gauge!("tenure_object_watches").set(self.watches.len() as f64);
    }

    /// Queue an output behind every persist of its domain produced so far.
    fn hold(&mut self, domain: Domain, h: Held) {
        // Behind its domain's persists, and a peer channel stays FIFO where a snapshot
        // needs it (see `tenure_core::gate`).
        let to = match &h {
            Held::Send(to, _) => Some(*to),
            _ => None,
        };
        // Nothing waits and nothing is ahead of it in its domain: it leaves now.
        if let Some(h) = self.pipe.hold(domain, to, h) {
            self.emit(h);
        }
    }

    /// Let out every held output whose persists are durable, in order per domain.
    fn flush_held(&mut self) {
        // In output order across domains (per peer FIFO where floors joined them).
        for h in self.pipe.ready() {
            self.emit(h);
        }
    }

    fn emit(&mut self, h: Held) {
        match h {
            Held::Send(to, msg) => {
                if let Some(msg) = self.snapshots.pass(to, msg) {
                    self.transport.send(to, msg);
                }
            }
            Held::Reply(req_id, result) => {
                if let Some(p) = self.pending.remove(&req_id) {
                    p.metrics.seconds.record(p.started.elapsed().as_secs_f64());
                    let _ = p.reply.send(result);
                }
            }
            Held::Status(tx, detail) => {
                let mut view = self.status_view();
                if detail {
                    view.detail = Some(Box::new(self.detail()));
                }
                let _ = tx.send(view);
            }
            Held::Members(tx) => {
                let _ = tx.send(crate::cluster_api::MembersView::of(&self.device));
            }
            Held::LookupEvent(ev) => self.lookup_subs.route(ev),
            Held::Watch(client, watch, msg) => self.watches.route(client, watch, msg),
        }
    }

    /// Hand the open group to the storage thread. Groups queue there while a commit runs,
    /// and the next commit takes all of them at once.
    fn start_commit(&mut self) {
        let Some((group, ops)) = self.pipe.close_group() else {
            return;
        };
        // A closed channel means the storage thread stopped: `committed` reports it.
        if let Some(jobs) = &self.committer.jobs {
            let _ = jobs.send((group, ops));
        }
    }

    /// Wait for the running commit to end.
    async fn await_commit(&mut self) -> Result<(), DriverError> {
        let r = self.committer.done.recv().await;
        self.committed(r)?;
        self.flush_held();
        Ok(())
    }

    /// The running commit ended: record it durable (or stop the device).
    fn committed(&mut self, r: Option<(u64, Result<(), StorageError>)>) -> Result<(), DriverError> {
        let Some((group, result)) = r else {
            return Err(DriverError::Worker("storage thread stopped".into()));
        };
        result.inspect_err(|e| error!("storage commit failed, stopping: {e}"))?;
        (self.pipe.synced(group)).map_err(|e| DriverError::Worker(e.to_string()))
    }

    fn status_view(&mut self) -> StatusView {
        let managers = self.device.manager_views();
        let tables = managers
            .iter()
            .filter_map(|m| {
                let t = self.device.managed_tables(m.store)?;
                let locks_held = t
                    .locks
                    .locks_under("/")
                    .map(|l| l.iter().filter(|i| !i.holders.is_empty()).count())
                    .unwrap_or(0);
                Some((
                    m.store,
                    TableCounts {
                        sessions: t.sessions.open.len() as u32,
                        locks_held: locks_held as u32,
                    },
                ))
            })
            .collect();
        let cfg = self.device.config();
        StatusView {
            device: cfg.id,
            devices: cfg.cluster.devices.clone(),
            stores: cfg.cluster.stores,
            chunks: self.device.chunk_views(),
            managers,
            tables,
            now: self.clock.now(),
            coordinator: self.device.coordinator(),
            acting_coordinator: self.device.acting_coordinator().is_some(),
            detail: None,
        }
    }

    /// The status page's part of a status answer ([`StatusDetail`]).
    fn detail(&mut self) -> StatusDetail {
        let now = self.clock.now();
        let mut stores = BTreeMap::new();
        for m in self.device.manager_views() {
            let Some(t) = self.device.managed_tables(m.store) else {
                continue;
            };
            let liveness = self.device.managed_liveness(m.store);
            let locks: Vec<_> = (t.locks.locks_under("/").unwrap_or_default().into_iter())
                .filter(|l| !l.holders.is_empty() || !l.waiters.is_empty())
                .collect();
            let mut holds: BTreeMap<tenure_core::ids::SessionId, usize> = BTreeMap::new();
            for l in &locks {
                for h in &l.holders {
                    *holds.entry(h.session).or_default() += 1;
                }
            }
            let sessions = (t.sessions.open.iter().take(DETAIL_SESSIONS_MAX))
                .map(|(id, r)| SessionDetail {
                    id: *id,
                    ttl: r.ttl,
                    expires_in: liveness
                        .and_then(|l| l.deadline.get(id))
                        .map(|d| d.saturating_since(now)),
                    holds: holds.get(id).copied().unwrap_or(0),
                })
                .collect();
            let (mut objects, mut object_bytes) = (0, 0);
            for key in t.objects.keys.keys() {
                if let Some(a) = t.objects.active(key) {
                    objects += 1;
                    object_bytes += a.size;
                }
            }
            let locks_total = locks.len();
            stores.insert(
                m.store,
                StoreDetail {
                    sessions,
                    sessions_total: t.sessions.open.len(),
                    locks: locks.into_iter().take(DETAIL_LOCKS_MAX).collect(),
                    locks_total,
                    objects,
                    object_bytes,
                    object_revision: t.objects.revision,
                },
            );
        }
        StatusDetail {
            members: crate::cluster_api::MembersView::of(&self.device),
            lookup: self.device.lookup().view(),
            stores,
        }
    }
}

/// The coordinator's gauges (set about once a second): its term as this device knows
/// it, and whether this device acts as the coordinator.
fn coordinator_gauges(d: &tenure_core::Device) {
    metrics::gauge!("tenure_coordinator_term").set(d.coordinator().map_or(0.0, |t| t.n as f64));
    metrics::gauge!("tenure_is_coordinator")
        .set(f64::from(u8::from(d.acting_coordinator().is_some())));
}

/// The lookup node's gauges (set about once a second from its view).
fn lookup_gauges(v: &tenure_core::lookup::NodeView) {
    use tenure_core::lookup::NodeState;
    metrics::gauge!("tenure_lookup_entries").set(v.entries as f64);
    metrics::gauge!("tenure_lookup_subscriptions").set(v.subscriptions as f64);
    let active = v.up.iter().filter(|(_, s)| s.is_some()).count();
    metrics::gauge!("tenure_lookup_active_nodes").set(active as f64);
    metrics::gauge!("tenure_lookup_up_nodes").set(v.up.len() as f64);
    let state = match v.state {
        NodeState::Passive => 0.0,
        NodeState::Joining => 1.0,
        NodeState::WarmingUp => 2.0,
        NodeState::Active => 3.0,
        NodeState::Leader => 4.0,
    };
    metrics::gauge!("tenure_lookup_state").set(state);
}

fn store_label(s: StoreId) -> String {
    s.0.to_string()
}

/// Turn an observation into metrics and logs.
fn observe(obs: &Observation, hot: &HotMetrics) {
    match obs {
        Observation::BecameManager {
            store,
            epoch,
            cause,
            ..
        } => {
            let cause = match cause {
                EpochCause::Regeneration => "regeneration",
                EpochCause::Migration => "migration",
                EpochCause::Relayout => "relayout",
            };
            info!(%store, %epoch, cause, "became manager");
            metrics::counter!("tenure_epochs_total", "cause" => cause).increment(1);
            if cause == "regeneration" {
                metrics::counter!("tenure_regenerations_total").increment(1);
            }
            metrics::gauge!("tenure_store_epoch", "store" => store_label(*store))
                .set(epoch.0 as f64);
            metrics::gauge!("tenure_managed_stores").increment(1.0);
        }
        Observation::StoppedManaging { store, epoch } => {
            info!(%store, %epoch, "stopped managing");
            metrics::gauge!("tenure_managed_stores").decrement(1.0);
        }
        Observation::ChunkFailed { store, chunk } => {
            info!(%store, %chunk, "chunk marked failed");
            metrics::counter!("tenure_chunk_failures_total").increment(1);
        }
        Observation::ChunkCommitted { chunk, epoch } => {
            debug!(%chunk, %epoch, "chunk committed epoch");
            metrics::counter!("tenure_chunk_commits_total").increment(1);
        }
        Observation::ChunkCollected { chunk } => {
            info!(%chunk, "chunk garbage-collected");
            metrics::counter!("tenure_chunks_collected_total").increment(1);
        }
        Observation::WriteAcked { .. } => hot.writes.increment(1),
        Observation::ChunkServed { .. } => hot.chunk_ops_served.increment(1),
        Observation::Relayout { store, committed } => {
            info!(%store, committed, "relayout finished");
            metrics::counter!("tenure_relayouts_total", "committed" => committed.to_string())
                .increment(1);
        }
        Observation::Migration { store, committed } => {
            info!(%store, committed, "migration finished");
            metrics::counter!("tenure_migrations_total", "committed" => committed.to_string())
                .increment(1);
        }
        Observation::SessionEnding {
            store,
            session,
            expired,
            released,
        } => {
            let how = if *expired { "expired" } else { "closed" };
            info!(%store, session = session.0, how, locks = released.len(), "session ending");
            metrics::counter!("tenure_session_ends_total", "how" => how).increment(1);
            if *expired {
                metrics::counter!("tenure_session_expiries_total").increment(1);
                metrics::counter!("tenure_expiry_released_locks_total")
                    .increment(released.len() as u64);
            }
        }
        Observation::LookupState { state, start } => {
            use tenure_core::lookup::NodeState;
            info!(?state, start = start.map(|s| s.0), "lookup node state");
            let label = tenure_client::lookup::convert::state_name(*state);
            metrics::counter!("tenure_lookup_state_changes_total", "state" => label).increment(1);
            if *state == NodeState::Leader {
                metrics::counter!("tenure_lookup_leader_changes_total").increment(1);
            }
            metrics::gauge!("tenure_lookup_leader")
                .set(f64::from(u8::from(*state == NodeState::Leader)));
        }
        Observation::LookupExpired { persistent } => {
            let d = if *persistent {
                "persistent"
            } else {
                "volatile"
            };
            metrics::counter!("tenure_lookup_expiries_total", "durability" => d).increment(1);
        }
        Observation::GcLeaseTakeover { store } => {
            info!(%store, "deletion lease taken over");
            metrics::counter!("tenure_object_gc_lease_takeovers_total").increment(1);
        }
        Observation::Coordinator { term } => {
            info!(coordinator = %term.leader, term = term.n, "coordinator elected");
            metrics::gauge!("tenure_coordinator_term").set(term.n as f64);
            metrics::counter!("tenure_coordinator_changes_total").increment(1);
        }
        Observation::CommandSent { term, to, cmd } => {
            debug!(term = term.n, %to, ?cmd, "coordinator command sent");
            metrics::counter!("tenure_coordinator_commands_total", "outcome" => "sent")
                .increment(1);
        }
        Observation::CommandApplied { term, cmd } => {
            info!(term = term.n, coordinator = %term.leader, ?cmd, "coordinator command applied");
            metrics::counter!("tenure_coordinator_commands_total", "outcome" => "applied")
                .increment(1);
        }
        Observation::CommandRefused { term, newest } => {
            info!(
                term = term.n,
                newest = newest.n,
                "coordinator command of an older term refused"
            );
            metrics::counter!("tenure_coordinator_commands_total", "outcome" => "refused")
                .increment(1);
        }
        // Observations the core adds later are logged until they get a metric.
        #[allow(unreachable_patterns)]
        _ => debug!(?obs, "observation"),
    }
}
