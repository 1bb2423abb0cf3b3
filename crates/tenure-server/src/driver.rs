//! The device driver task: quinn's `ConnectionDriver` shape around the sans-IO core.
//!
//! One task owns the [`Device`]. It waits for the first of: a peer message, a client call,
//! or the core's timer; then it drains whatever else is already queued (up to
//! [`MAX_BATCH`] inputs), feeding each to [`Device::handle`]. The outputs of the whole batch
//! are then released in the order the core requires:
//!
//! 1. every `Persist` of the batch is committed in ONE durable storage transaction (group
//!    commit: one fsync however many inputs the batch held);
//! 2. only then do the batch's `Send`s go to the transport and its `Reply`s to clients;
//! 3. `Observe`s become metrics. `SetTimer` needs no action: the driver asks
//!    [`Device::poll_timeout`] before every wait.
//!
//! A storage failure is fatal: a device that cannot make its state durable must stop
//! (crash-stop), never acknowledge.
//!
//! Local time: the core's [`Instant`] is microseconds since the Unix epoch read from the
//! system clock (so devices on one machine agree within δ_c), clamped to never go back.

use crate::storage::{Storage, StorageError};
use crate::transport::{Inbound, Transport};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tenure_core::ids::{ClientId, DeviceId, StoreId};
use tenure_core::io::{ClientError, EpochCause, Input, Observation, Output, Request, Response};
use tenure_core::layout::{ChunkView, ManagerView};
use tenure_core::{Device, DeviceConfig, Instant};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, error, info};

/// Most inputs handled before one group commit.
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
    /// A snapshot of the device's state.
    Status {
        /// Where it goes.
        reply: oneshot::Sender<StatusSnapshot>,
    },
}

/// What `Status` reports.
#[derive(Clone, Debug)]
pub struct StatusSnapshot {
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
}

/// Sizes of a managed store's tables, for status pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableCounts {
    /// Open sessions.
    pub sessions: u32,
    /// Locks with at least one holder.
    pub locks_held: u32,
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

/// Monotonic microsecond clock derived from the system clock.
#[derive(Debug, Default)]
pub struct Clock {
    last: u64,
}

impl Clock {
    /// Local time now.
    pub fn now(&mut self) -> Instant {
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        self.last = self.last.max(t);
        Instant(self.last)
    }
}

/// The driver.
pub struct Driver {
    device: Device,
    storage: Arc<Storage>,
    transport: Transport,
    peers: mpsc::Receiver<Inbound>,
    calls: mpsc::Receiver<Call>,
    pending: HashMap<u64, oneshot::Sender<Answer>>,
    next_client: u64,
    clock: Clock,
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
        let (device, out) = Device::new(cfg, state, clock.now(), rng_seed);
        info!(
            device = %device.id(),
            chunks_on_disk = chunks,
            "device booted"
        );
        let mut d = Driver {
            device,
            storage: Arc::new(storage),
            transport,
            peers,
            calls,
            pending: HashMap::new(),
            next_client: 1,
            clock,
        };
        d.release(out, Vec::new()).await?;
        Ok(d)
    }

    /// Run until the call channel closes (the server shut down) or storage fails.
    pub async fn run(mut self) -> Result<(), DriverError> {
        loop {
            let now = self.clock.now();
            let wait = self
                .device
                .poll_timeout()
                .map(|t| t.saturating_since(now))
                .unwrap_or(Duration::from_secs(1))
                .min(Duration::from_secs(1));
            let mut out = Vec::new();
            let mut statuses = Vec::new();
            tokio::select! {
                m = self.peers.recv() => match m {
                    Some((from, msg)) => self.input(Input::Message { from, msg }, &mut out),
                    None => return Ok(()),
                },
                c = self.calls.recv() => match c {
                    Some(c) => self.call(c, &mut out, &mut statuses),
                    None => return Ok(()),
                },
                _ = tokio::time::sleep(wait) => {}
            }
            // Group commit: take everything already queued into the same batch.
            let mut n = 1;
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
            metrics::histogram!("tenure_driver_batch_inputs").record(n as f64);
            self.release(out, statuses).await?;
            if self.pending.len() > 4096 {
                self.pending.retain(|_, tx| !tx.is_closed());
            }
        }
    }

    fn input(&mut self, input: Input, out: &mut Vec<Output>) {
        let now = self.clock.now();
        out.extend(self.device.handle(now, input));
    }

    fn call(
        &mut self,
        call: Call,
        out: &mut Vec<Output>,
        statuses: &mut Vec<oneshot::Sender<StatusSnapshot>>,
    ) {
        match call {
            Call::Request { req, reply } => {
                let id = self.next_client;
                self.next_client += 1;
                self.pending.insert(id, reply);
                self.input(
                    Input::Request {
                        client: ClientId(id),
                        req_id: id,
                        req,
                    },
                    out,
                );
            }
            Call::Status { reply } => statuses.push(reply),
        }
    }

    /// Release a batch's outputs: persist durably, then send and reply, then observe.
    async fn release(
        &mut self,
        out: Vec<Output>,
        statuses: Vec<oneshot::Sender<StatusSnapshot>>,
    ) -> Result<(), DriverError> {
        let mut persists = Vec::new();
        let mut rest = Vec::with_capacity(out.len());
        for o in out {
            match o {
                Output::Persist(op) => persists.push(op),
                other => rest.push(other),
            }
        }
        if !persists.is_empty() {
            let storage = self.storage.clone();
            let n = persists.len();
            let started = std::time::Instant::now();
            tokio::task::spawn_blocking(move || storage.commit(&persists))
                .await
                .map_err(|e| DriverError::Worker(e.to_string()))?
                .inspect_err(|e| error!("storage commit failed, stopping: {e}"))?;
            metrics::counter!("tenure_storage_commits_total").increment(1);
            metrics::counter!("tenure_storage_ops_total").increment(n as u64);
            metrics::histogram!("tenure_storage_commit_seconds")
                .record(started.elapsed().as_secs_f64());
        }
        for o in rest {
            match o {
                Output::Send { to, msg } => {
                    self.transport.send(to, msg);
                }
                Output::Reply { req_id, result, .. } => {
                    if let Some(tx) = self.pending.remove(&req_id) {
                        let _ = tx.send(result);
                    }
                }
                Output::Observe(obs) => observe(&obs),
                Output::SetTimer(_) | Output::Persist(_) => {}
            }
        }
        if !statuses.is_empty() {
            let snap = self.snapshot();
            for tx in statuses {
                let _ = tx.send(snap.clone());
            }
        }
        Ok(())
    }

    fn snapshot(&mut self) -> StatusSnapshot {
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
        StatusSnapshot {
            device: cfg.id,
            devices: cfg.cluster.devices.clone(),
            stores: cfg.cluster.stores,
            chunks: self.device.chunk_views(),
            managers,
            tables,
            now: self.clock.now(),
        }
    }
}

fn store_label(s: StoreId) -> String {
    s.0.to_string()
}

/// Turn an observation into metrics and logs.
fn observe(obs: &Observation) {
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
        Observation::WriteAcked { .. } => {
            metrics::counter!("tenure_writes_total").increment(1);
        }
        Observation::ChunkServed { .. } => {
            metrics::counter!("tenure_chunk_ops_served_total").increment(1);
        }
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
        // Observations the core adds later are logged until they get a metric.
        #[allow(unreachable_patterns)]
        _ => debug!(?obs, "observation"),
    }
}
