//! Watches: the [`ObjectWatch`] a client reads changes from, and the task that keeps its
//! stream open across redirects and resumes after the last revision seen.

use super::{ObjectInfo, Objects};
use crate::proto;
use crate::stream::{Ev, Rq};
use crate::{Error, Result};
use std::time::Instant;
use tokio::sync::mpsc;
use tracing::debug;

/// One change a watch delivers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The store's revision of the change.
    pub revision: u64,
    /// Key.
    pub key: String,
    /// The new content's description (none: the object was deleted).
    pub put: Option<ChangeInfo>,
}

/// A new content's description in a [`Change`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeInfo {
    /// The upload.
    pub uuid: String,
    /// Length.
    pub size: u64,
    /// CRC-32 of the content.
    pub checksum: u32,
}

impl From<proto::ObjectChange> for Change {
    fn from(c: proto::ObjectChange) -> Self {
        Change {
            revision: c.revision,
            key: c.key,
            put: (!c.deleted).then_some(ChangeInfo {
                uuid: c.uuid,
                size: c.size,
                checksum: c.checksum,
            }),
        }
    }
}

/// What a watch reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    /// Changes, in revision order.
    Changes(Vec<Change>),
    /// The store's history no longer reached the last revision delivered, so changes
    /// may have been missed: this is the prefix's current state, read at `revision`; the
    /// watch continues after it.
    Reset {
        /// The revision the objects were read at.
        revision: u64,
        /// The prefix's objects.
        objects: Vec<ObjectInfo>,
    },
}

/// A running watch: [`ObjectWatch::next`] gives its events. Dropping it stops it.
#[derive(Debug)]
pub struct ObjectWatch {
    rx: mpsc::Receiver<Result<WatchEvent>>,
    revision: u64,
}

impl ObjectWatch {
    /// The revision the watch started after.
    pub fn started_after(&self) -> u64 {
        self.revision
    }

    /// The next event; `None` when the watch stopped, an error when it cannot go on
    /// (the client closed, the prefix is refused).
    pub async fn next(&mut self) -> Option<Result<WatchEvent>> {
        self.rx.recv().await
    }
}

/// The watch id used on a watch's own stream.
pub(super) const WATCH_ID: u64 = 1;

impl Objects {
    /// Watch the changes at `prefix` or below (a path: revisions are per store, and a
    /// prefix's objects are in one store) after revision `after` (none: from now). See
    /// the module docs for how it resumes.
    pub async fn watch(&self, prefix: &str, after: Option<u64>) -> Result<ObjectWatch> {
        if prefix == "/" || prefix.is_empty() {
            return Err(Error::InvalidName {
                name: prefix.to_string(),
                reason: "watch a path with a first segment (e.g. /app): revisions are per \
                         store, and a path's objects all live in its first segment's store"
                    .into(),
            });
        }
        let store = self.store_of(prefix).await?;
        let (tx, rx) = mpsc::channel(64);
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let task = WatchTask {
            objects: self.clone(),
            store,
            prefix: prefix.to_string(),
            last: after,
            tx,
            ready: Some(ready_tx),
            endpoint: String::new(),
            established: false,
        };
        tokio::spawn(task.run());
        // The first registration's outcome: a bad prefix or a compacted `after` is the
        // caller's to see at once.
        match ready_rx.await {
            Ok(Ok(revision)) => Ok(ObjectWatch { rx, revision }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Error::Closed),
        }
    }
}

/// The task behind an [`ObjectWatch`]: one session stream to the store's manager, with
/// one watch on it, made again wherever the manager goes.
pub(super) struct WatchTask {
    objects: Objects,
    store: u32,
    prefix: String,
    /// The last revision delivered (or asked for).
    last: Option<u64>,
    tx: mpsc::Sender<Result<WatchEvent>>,
    /// Where the first registration's outcome goes.
    ready: Option<tokio::sync::oneshot::Sender<Result<u64>>>,
    /// The endpoint of the last stream.
    endpoint: String,
    /// Whether the last stream's watch was registered.
    established: bool,
}

/// Why a watch's stream ended.
#[derive(Debug)]
pub(super) enum Resume {
    /// Connect again at once, the hint first.
    Redirect(Option<String>),
    /// Connect again after a backoff.
    Retry,
    /// The history no longer reaches `last`: re-read.
    Reread,
    /// Stop: the caller went away, or an error that no retry mends.
    Stop(Option<Error>),
}

impl WatchTask {
    pub(super) async fn run(mut self) {
        let mut hint = None;
        let mut rotate = 0;
        let mut failures = 0u32;
        let mut redirects = crate::Redirects::default();
        let started = Instant::now();
        loop {
            self.established = false;
            let resume = self.once(hint.take(), rotate).await;
            if self.established {
                // The watch ran: what follows is a new incident.
                failures = 0;
                redirects.reset();
            }
            debug!(store = self.store, prefix = %self.prefix, last = ?self.last, resume = ?resume, "watch stream ended");
            let client = &self.objects.client;
            match resume {
                Resume::Redirect(h) => {
                    client.clear_route(self.store);
                    hint = redirects.follow(h.as_deref(), &self.endpoint);
                    if hint.is_none() {
                        // No hint, or a chain of hints that led nowhere: the endpoints
                        // in turn, after a pause (a new manager may not be there yet).
                        rotate += 1;
                        failures += 1;
                        let o = &client.inner.opts;
                        let d = o
                            .backoff_min
                            .saturating_mul(1 << failures.min(10))
                            .min(o.backoff_max);
                        tokio::time::sleep(d).await;
                    }
                }
                Resume::Retry => {
                    redirects.reset();
                    failures += 1;
                    if failures.is_multiple_of(3) {
                        client.clear_route(self.store);
                        rotate += 1;
                    }
                    // Before the first registration, the usual retry deadline applies.
                    if self.ready.is_some() && started.elapsed() > client.inner.opts.retry_deadline
                    {
                        self.fail(Error::GaveUp {
                            attempts: failures,
                            elapsed: started.elapsed(),
                            last: Box::new(Error::Unavailable { store: self.store }),
                        })
                        .await;
                        return;
                    }
                    let o = &client.inner.opts;
                    let d = o
                        .backoff_min
                        .saturating_mul(1 << failures.min(10))
                        .min(o.backoff_max);
                    tokio::time::sleep(d).await;
                }
                Resume::Reread => {
                    if let Err(e) = self.reread().await {
                        if e.retryable() || matches!(e, Error::GaveUp { .. }) {
                            continue;
                        }
                        self.fail(e).await;
                        return;
                    }
                }
                Resume::Stop(e) => {
                    if let Some(e) = e {
                        self.fail(e).await;
                    }
                    return;
                }
            }
        }
    }

    async fn fail(&mut self, e: Error) {
        match self.ready.take() {
            Some(r) => {
                let _ = r.send(Err(e));
            }
            None => {
                let _ = self.tx.send(Err(e)).await;
            }
        }
    }

    /// Re-read the prefix and report it: the watch continues after the read's revision.
    async fn reread(&mut self) -> Result<()> {
        let (revision, objects) = self.objects.list_store(self.store, &self.prefix).await?;
        debug!(store = self.store, prefix = %self.prefix, revision, "watch re-read after compaction");
        self.last = Some(revision);
        if let Some(r) = self.ready.take() {
            // The caller's `after` was compacted: it learns the state from the Reset.
            let _ = r.send(Ok(revision));
        }
        if self
            .tx
            .send(Ok(WatchEvent::Reset { revision, objects }))
            .await
            .is_err()
        {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// One stream: connect, register the watch, deliver its changes until it ends.
    async fn once(&mut self, hint: Option<String>, rotate: usize) -> Resume {
        let client = self.objects.client.clone();
        let start_id = client.next_request_id();
        let conn = tokio::select! {
            c = crate::stream::connect(&client, self.store, None, hint, rotate, start_id) => c,
            _ = self.tx.closed() => return Resume::Stop(None),
        };
        let mut conn = match conn {
            Ok((conn, _)) => conn,
            Err(e) if e.retryable() || e.transient_rpc() || matches!(e, Error::NoEndpoints) => {
                debug!(store = self.store, "watch: could not connect: {e}");
                return Resume::Retry;
            }
            Err(e) => return Resume::Stop(Some(e)),
        };
        let id = client.next_request_id();
        let req = proto::SessionRequest {
            request_id: id,
            kind: Some(Rq::WatchObjects(proto::WatchObjects {
                watch: WATCH_ID,
                prefix: self.prefix.clone(),
                after: self.last,
                include_values: false,
            })),
        };
        if conn.tx.send(req).await.is_err() {
            return Resume::Retry;
        }
        let endpoint = conn.endpoint.clone();
        self.endpoint = endpoint.clone();
        loop {
            let msg = tokio::select! {
                m = conn.rx.message() => m,
                _ = self.tx.closed() => return Resume::Stop(None),
            };
            let ev = match msg {
                Ok(Some(ev)) => ev,
                Ok(None) => return Resume::Retry,
                Err(s) => {
                    debug!(store = self.store, %endpoint, "watch stream lost: {s}");
                    return Resume::Retry;
                }
            };
            tracing::trace!(store = self.store, %endpoint, request_id = ev.request_id, kind = ?ev.kind, "watch stream event");
            match ev.kind {
                Some(Ev::Watching(w)) if ev.request_id == id => {
                    client.set_route(self.store, &endpoint);
                    self.established = true;
                    if self.last.is_none() {
                        self.last = Some(w.revision);
                    }
                    if let Some(r) = self.ready.take() {
                        let _ = r.send(Ok(w.revision));
                    }
                }
                Some(Ev::Error(e)) if ev.request_id == id => {
                    return self.ended(Error::from_proto(e));
                }
                Some(Ev::ObjectEvents(evs)) if evs.watch == WATCH_ID => {
                    let last = self.last.unwrap_or(0);
                    let changes: Vec<Change> = (evs.changes.into_iter())
                        .filter(|c| c.revision > last)
                        .map(Change::from)
                        .collect();
                    let Some(top) = changes.last().map(|c| c.revision) else {
                        continue;
                    };
                    self.last = Some(top);
                    if self
                        .tx
                        .send(Ok(WatchEvent::Changes(changes)))
                        .await
                        .is_err()
                    {
                        return Resume::Stop(None);
                    }
                }
                Some(Ev::WatchEnded(w)) if w.watch == WATCH_ID => {
                    let e = w.error.map_or(Error::Malformed, Error::from_proto);
                    return self.ended(e);
                }
                Some(Ev::Redirect(r)) => {
                    return Resume::Redirect(crate::stream::redirect_hint(r));
                }
                Some(Ev::StreamClosed(_)) => return Resume::Retry,
                _ => {}
            }
        }
    }

    /// The watch ended (or was refused) with `e`: what to do next.
    fn ended(&self, e: Error) -> Resume {
        match e {
            Error::NotManager { hint, .. } => Resume::Redirect(hint),
            Error::Compacted { .. } => Resume::Reread,
            e if e.retryable() => Resume::Retry,
            e => Resume::Stop(Some(e)),
        }
    }
}
