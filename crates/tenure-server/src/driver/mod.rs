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

//!
//! This file holds the [`Driver`] and its loop; [`calls`] what the client APIs send it,
//! [`status`] the status answer, [`routes`] where pushed events go, `release` the
//! storage thread and the held outputs, `observe` the metrics.

use crate::storage::{Storage, StorageError};
use crate::transport::{Inbound, Transport};
use std::collections::HashMap;
use std::time::Duration;

pub use crate::clock::Clock;
use tenure_core::gate::Domain;
use tenure_core::ids::{ChunkId, DeviceId};
use tenure_core::io::{Input, Output};
use tenure_core::msg::{Msg, ToManager};
use tenure_core::pipeline::{Pipeline, Release};
use tenure_core::{Device, DeviceConfig};
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};

pub mod calls;
mod observe;
mod release;
pub mod routes;
pub mod status;
mod tally;

use calls::Answer;
pub(crate) use calls::{Call, DeviceEvent};
use observe::{HotMetrics, RequestMetrics, coordinator_gauges, lookup_gauges};
use release::{Committer, Held};
use routes::{SubRoutes, WatchRoutes};
use status::StatusView;

/// Most inputs handled in one turn of the driver loop.
pub const MAX_BATCH: usize = 512;

/// A driver turn this long is logged.
const SLOW_TURN: Duration = Duration::from_millis(500);

/// Pending requests at which the driver first drops those whose callers left.
const PENDING_SWEPT_FROM: usize = 4096;

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
    /// Calls read before `calls` and peer messages: keep-alives and Status
    /// ([`Driver::with_urgent`]).
    urgent: Option<mpsc::Receiver<Call>>,
    pending: HashMap<u64, Pending>,
    /// Above this many pending requests, those whose callers left are dropped.
    pending_swept: usize,
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
    /// The managed stores' table sizes, counted a slice per tick (gauges, status).
    tallies: tally::Tallies,
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
            urgent: None,
            pending: HashMap::new(),
            pending_swept: PENDING_SWEPT_FROM,
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
            tallies: tally::Tallies::default(),
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
    /// Read `urgent` before everything else each turn: keep-alives and Status, which
    /// waited behind thousands of queued requests (sessions expired and operators saw
    /// no answer under 10,000 sessions taking locks).
    pub fn with_urgent(mut self, urgent: mpsc::Receiver<Call>) -> Driver {
        self.urgent = Some(urgent);
        self
    }

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
            let mut began = None;
            // (Not biased: a turn that starts on a peer message or a call still takes
            // every urgent call first, below; a biased select starved the committer's
            // results while peer messages kept coming.)
            tokio::select! {
                c = recv_urgent(&mut self.urgent) => match c {
                    Some(c) => {
                        began = Some(std::time::Instant::now());
                        self.call(c, &mut out, &mut statuses);
                        n += 1;
                    }
                    None => self.urgent = None,
                },
                m = self.peers.recv() => match m {
                    Some((from, msg)) => {
                        began = Some(std::time::Instant::now());
                        self.input(Input::Message { from, msg }, &mut out);
                        n += 1;
                    }
                    None => return Ok(()),
                },
                c = self.calls.recv() => match c {
                    Some(c) => {
                        began = Some(std::time::Instant::now());
                        self.call(c, &mut out, &mut statuses);
                        n += 1;
                    }
                    None => return Ok(()),
                },
                r = self.committer.done.recv(), if !self.pipe.all_durable() => {
                    began = Some(std::time::Instant::now());
                    self.committed(r)?;
                }
                _ = tokio::time::sleep(wait) => {}
            }
            let began = began.unwrap_or_else(std::time::Instant::now);
            // Take everything already queued into the same batch.
            while n < MAX_BATCH {
                if let Some(c) = self.urgent.as_mut().and_then(|u| u.try_recv().ok()) {
                    self.call(c, &mut out, &mut statuses);
                } else if let Ok((from, msg)) = self.peers.try_recv() {
                    self.input(Input::Message { from, msg }, &mut out);
                } else if let Ok(c) = self.calls.try_recv() {
                    self.call(c, &mut out, &mut statuses);
                } else {
                    break;
                }
                n += 1;
            }
            // Small puts become one change, and requests are forwarded, once every peer
            // reads them.
            let oldest = self.transport.oldest_peer_version();
            (self.device).set_peer_generation(crate::wire::generation(oldest));
            let connected = self.transport.oldest_connected_peer_version();
            (self.device).set_connected_generation(crate::wire::generation(connected));
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
                self.tallies.tick(&self.device, tally::BUDGET);
                lookup_gauges(&self.device.lookup().view());
                coordinator_gauges(&self.device);
                self.object_gauges();
                self.table_gauges();
            }
            let turn = began.elapsed();
            self.metrics.turn_seconds.record(turn.as_secs_f64());
            if turn >= SLOW_TURN {
                warn!(
                    turn_ms = turn.as_millis() as u64,
                    inputs = n,
                    "a driver turn took long: peer messages and timers waited behind it"
                );
            }
            // Requests whose callers left are dropped when the map has doubled since the
            // last look (every turn above 4,096 walked them all: 7% of a loaded driver).
            if self.pending.len() > self.pending_swept {
                self.pending.retain(|_, p| !p.reply.is_closed());
                self.pending_swept = (2 * self.pending.len()).max(PENDING_SWEPT_FROM);
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
        if let Input::Message {
            msg:
                Msg::ToManager {
                    chunk,
                    msg:
                        ToManager::RenewalRequest {
                            renewed: Some(r), ..
                        },
                    ..
                },
            ..
        } = &input
        {
            // The echoed renewal left this device: its age is the renewal's trip out,
            // the chunk's period, and the request's trip back.
            let h = if chunk.device == self.device.id() {
                &self.metrics.renewal_age_local
            } else {
                &self.metrics.renewal_age_remote
            };
            h.record(now.saturating_since(r.sent).as_secs_f64());
        }
        out.extend(self.device.handle(now, input));
    }
}

/// The next urgent call; never, without an urgent lane.
async fn recv_urgent(urgent: &mut Option<mpsc::Receiver<Call>>) -> Option<Call> {
    match urgent {
        Some(u) => u.recv().await,
        None => std::future::pending().await,
    }
}
