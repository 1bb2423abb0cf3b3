//! Releasing the core's outputs: the storage thread that commits groups of persists,
//! and sends, replies and events held until the persists before them are durable.

use super::calls::{Answer, DeviceEvent};
use super::observe::observe;
use super::routes::WatchMsg;
use super::status::StatusView;
use super::{Driver, DriverError};
use crate::storage::{Storage, StorageError};
use std::time::Duration;
use tenure_core::gate::Domain;
use tenure_core::ids::{ClientId, DeviceId};
use tenure_core::io::{Observation, Output, PersistOp};
use tenure_core::lookup::SubEvent;
use tenure_core::msg::{Msg, ToChunk};
use tokio::sync::{mpsc, oneshot};
use tracing::{error, info};

/// An output that leaves the device once the persists before it are durable.
// Moved once into the queue and once out, like the core's `Output`.
#[allow(clippy::large_enum_variant)]
pub(super) enum Held {
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
pub(super) struct Committer {
    pub(super) jobs: Option<std::sync::mpsc::Sender<(u64, Vec<PersistOp>)>>,
    pub(super) done: mpsc::UnboundedReceiver<(u64, Result<(), StorageError>)>,
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
    pub(super) fn start(storage: Storage) -> Result<Committer, DriverError> {
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
                let apply_seconds = metrics::histogram!("tenure_storage_apply_seconds");
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
                    let applying = std::time::Instant::now();
                    storage.apply_logged(logged);
                    apply_seconds.record(applying.elapsed().as_secs_f64());
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
    /// Take a batch's outputs in order: persists join the open group, sends and replies
    /// wait behind the persists produced before them, observations become metrics.
    pub(super) fn release(&mut self, out: Vec<Output>) {
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
                    values,
                } => self.hold_watch(client, watch, WatchMsg::Events { changes, values }),
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
    pub(super) async fn retire(&mut self) -> Result<(), DriverError> {
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

    /// Queue an output behind every persist of its domain produced so far.
    pub(super) fn hold(&mut self, domain: Domain, h: Held) {
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
    pub(super) fn flush_held(&mut self) {
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
    pub(super) fn start_commit(&mut self) {
        let Some((group, ops)) = self.pipe.close_group() else {
            return;
        };
        // A closed channel means the storage thread stopped: `committed` reports it.
        if let Some(jobs) = &self.committer.jobs {
            let _ = jobs.send((group, ops));
        }
    }

    /// Wait for the running commit to end.
    pub(super) async fn await_commit(&mut self) -> Result<(), DriverError> {
        let r = self.committer.done.recv().await;
        self.committed(r)?;
        self.flush_held();
        Ok(())
    }

    /// The running commit ended: record it durable (or stop the device).
    pub(super) fn committed(
        &mut self,
        r: Option<(u64, Result<(), StorageError>)>,
    ) -> Result<(), DriverError> {
        let Some((group, result)) = r else {
            return Err(DriverError::Worker("storage thread stopped".into()));
        };
        result.inspect_err(|e| error!("storage commit failed, stopping: {e}"))?;
        (self.pipe.synced(group)).map_err(|e| DriverError::Worker(e.to_string()))
    }
}
