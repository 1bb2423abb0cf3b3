//! Subscribers: a prefix watch or an alert over one `Watch` stream (seed 003's client
//! subscriptions; DESIGN §8: lookup subscriptions have a stream of their own).
//!
//! The subscription is soft state at the lookup nodes: the library refreshes it every
//! interval, with its position — the leader whose events it last applied and that
//! event's sequence number. The leader answers a position behind its own (or from
//! another leader) with a `sync`: its whole state under the prefix. The library keeps
//! the subscriber's view of the prefix and turns every event into changes:
//!
//! - a `sync` is diffed against the view: entries new or with another version are
//!   [`WatchChange::Put`], entries of the view missing from it are
//!   [`WatchChange::Removed`] with [`Removal::Resync`] (revoked or expired while the
//!   subscriber could not be told — after a failover, a lost event, a reconnection), so
//!   nothing disappears silently;
//! - `put`, `removed` and `alert` events must follow the position (same leader, the next
//!   sequence number). A gap means an event was lost: the library re-subscribes with no
//!   position, which forces a sync, and ignores events until the sync arrives;
//! - when the stream breaks, the library reconnects to another endpoint and
//!   re-subscribes with the same subscription id and its position (the nodes move the
//!   subscription to the new device, and its leader sends a sync).
//!
//! Alerts ([`Client::alert`]) carry no state: their events are passed on as they come.

use super::{convert, error_from_proto, random_id};
use crate::proto::{self, watch_request::Kind as Rq, watch_response::Kind as Ev};
use crate::{Client, Error, Result};
use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tenure_core::lookup::{
    EntryView, RemoveCause, SubEvent, SubId, SubPosition, Watch, WatchEvent,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tracing::debug;

/// Why an entry left the subscriber's view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    /// Its provider revoked it.
    Revoked,
    /// It was not refreshed within its lifetime.
    Expired,
    /// A sync no longer had it: it was revoked or expired while events could not reach
    /// the subscriber (a failover, a lost event, a reconnection).
    Resync,
}

/// A change to what a watch sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchChange {
    /// An entry appeared or changed.
    Put(EntryView),
    /// An entry went away.
    Removed {
        /// Its key.
        key: String,
        /// Why.
        cause: Removal,
    },
    /// An alert's key was not refreshed in time.
    Alert {
        /// The key.
        key: String,
        /// Time since its last refresh (or since the alert was registered).
        silent_for: Duration,
    },
}

/// How a subscription is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchOptions {
    /// The subscription's refresh interval: it lapses at the nodes two intervals after
    /// its last refresh, so a subscriber that went away stops costing anything.
    pub interval: Duration,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            interval: Duration::from_secs(1),
        }
    }
}

/// The subscriber's side of one subscription: its view and position.
#[derive(Clone, Debug)]
pub(crate) struct Subscription {
    pub(crate) id: SubId,
    pub(crate) watch: Watch,
    pub(crate) interval: Duration,
    pub(crate) view: BTreeMap<String, EntryView>,
    pub(crate) pos: Option<SubPosition>,
}

/// What one event did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Applied {
    pub(crate) changes: Vec<WatchChange>,
    /// An event was lost: re-subscribe with no position to get a sync.
    pub(crate) resync: bool,
}

impl Subscription {
    pub(crate) fn new(watch: Watch, interval: Duration) -> Subscription {
        Subscription {
            id: random_id(),
            watch,
            interval,
            view: BTreeMap::new(),
            pos: None,
        }
    }

    fn is_alert(&self) -> bool {
        matches!(self.watch, Watch::Alert { .. })
    }

    /// The subscribe request that registers or refreshes the subscription.
    pub(crate) fn subscribe(&self, request_id: u64) -> proto::WatchRequest {
        use proto::subscribe::Watch as W;
        let watch = match &self.watch {
            Watch::Prefix(p) => W::Prefix(p.clone()),
            Watch::Alert { key, within } => W::Alert(proto::AlertSpec {
                key: key.clone(),
                within_ms: within.as_millis() as u64,
            }),
        };
        proto::WatchRequest {
            request_id,
            kind: Some(Rq::Subscribe(proto::Subscribe {
                sub: self.id,
                watch: Some(watch),
                interval_ms: self.interval.as_millis() as u64,
                position: self.pos.map(convert::position_to_proto),
            })),
        }
    }

    /// Apply one pushed event.
    pub(crate) fn apply(&mut self, ev: SubEvent) -> Applied {
        let mut out = Applied::default();
        let here = SubPosition {
            leader: ev.leader,
            seq: ev.seq,
        };
        if let WatchEvent::Sync { entries } = ev.event {
            // A sync replaces the view, whatever the position: report the difference.
            let mut next = BTreeMap::new();
            for e in entries {
                let same = self
                    .view
                    .get(&e.key)
                    .is_some_and(|v| v.version == e.version && v.value == e.value);
                if !same {
                    out.changes.push(WatchChange::Put(e.clone()));
                }
                next.insert(e.key.clone(), e);
            }
            for key in self.view.keys() {
                if !next.contains_key(key) {
                    out.changes.push(WatchChange::Removed {
                        key: key.clone(),
                        cause: Removal::Resync,
                    });
                }
            }
            self.view = next;
            self.pos = Some(here);
            return out;
        }
        if !self.is_alert() {
            match self.pos {
                // Waiting for a sync: events until then cannot be placed.
                None => return out,
                Some(p) if p.leader == ev.leader && ev.seq <= p.seq => return out,
                Some(p) if p.leader == ev.leader && ev.seq == p.seq + 1 => {}
                Some(_) => {
                    debug!(sub = self.id, "event gap: asking for a sync");
                    self.pos = None;
                    out.resync = true;
                    return out;
                }
            }
        }
        self.pos = Some(here);
        match ev.event {
            WatchEvent::Put { entry } => {
                let same = self
                    .view
                    .get(&entry.key)
                    .is_some_and(|v| v.version == entry.version && v.value == entry.value);
                self.view.insert(entry.key.clone(), entry.clone());
                if !same {
                    out.changes.push(WatchChange::Put(entry));
                }
            }
            WatchEvent::Removed { key, cause } => {
                if self.view.remove(&key).is_some() {
                    out.changes.push(WatchChange::Removed {
                        key,
                        cause: match cause {
                            RemoveCause::Revoked => Removal::Revoked,
                            RemoveCause::Expired => Removal::Expired,
                        },
                    });
                }
            }
            WatchEvent::Alert { key, silent_for } => {
                out.changes.push(WatchChange::Alert { key, silent_for });
            }
            WatchEvent::Sync { .. } => unreachable!("handled above"),
        }
        out
    }
}

/// Where a watch has got to (shared with its [`Watcher`]).
#[derive(Clone, Debug, Default)]
struct Progress {
    pos: Option<SubPosition>,
    endpoint: Option<String>,
    connections: u64,
    resyncs: u64,
}

/// A subscription's changes, as a stream. Dropping it ends the subscription (the
/// nodes drop it at once, or when it lapses).
#[derive(Debug)]
pub struct Watcher {
    rx: mpsc::Receiver<Result<WatchChange>>,
    sub: SubId,
    progress: Arc<Mutex<Progress>>,
}

impl Watcher {
    /// The subscription's id (the same at every node, across reconnections).
    pub fn sub(&self) -> SubId {
        self.sub
    }

    /// The last event applied: its leader and sequence number (`None` before the first
    /// sync, or while waiting for one).
    pub fn position(&self) -> Option<SubPosition> {
        self.progress.lock().unwrap().pos
    }

    /// The endpoint the stream is on.
    pub fn endpoint(&self) -> Option<String> {
        self.progress.lock().unwrap().endpoint.clone()
    }

    /// Streams opened so far, and syncs asked for after a gap.
    pub fn counts(&self) -> (u64, u64) {
        let p = self.progress.lock().unwrap();
        (p.connections, p.resyncs)
    }

    /// The next change (`None` once the watch has ended after an error).
    pub async fn next_change(&mut self) -> Option<Result<WatchChange>> {
        self.rx.recv().await
    }
}

impl futures::Stream for Watcher {
    type Item = Result<WatchChange>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

impl Client {
    /// Watch every entry whose key is `prefix` or under it (`/`: all). The first changes
    /// are the entries present (one `Put` each, from the first sync); then every change,
    /// in the leader's order. Must be called inside a tokio runtime.
    pub fn watch(&self, prefix: &str) -> Result<Watcher> {
        self.watch_with(prefix, WatchOptions::default())
    }

    /// [`Client::watch`] with explicit options.
    pub fn watch_with(&self, prefix: &str, opts: WatchOptions) -> Result<Watcher> {
        super::check_prefix(prefix)?;
        Ok(self.subscribe(Watch::Prefix(prefix.to_string()), opts))
    }

    /// Be alerted whenever `key` goes `within` without a refresh (counted from its last
    /// refresh, or from now while it is absent): one [`WatchChange::Alert`] per silence.
    pub fn alert(&self, key: &str, within: Duration) -> Result<Watcher> {
        super::check_key(key)?;
        let watch = Watch::Alert {
            key: key.to_string(),
            within,
        };
        Ok(self.subscribe(watch, WatchOptions::default()))
    }

    fn subscribe(&self, watch: Watch, opts: WatchOptions) -> Watcher {
        let sub = Subscription::new(watch, opts.interval);
        let (tx, rx) = mpsc::channel(1024);
        let progress = Arc::new(Mutex::new(Progress::default()));
        let id = sub.id;
        tokio::spawn(run(self.clone(), sub, tx, progress.clone()));
        Watcher {
            rx,
            sub: id,
            progress,
        }
    }
}

/// The next endpoint to open a stream on: the best candidate that is not the one that
/// just failed (unless it is the only one).
fn next_target(client: &Client, rotate: usize, failed: Option<&str>) -> Option<String> {
    let c = client.lookup_candidates(rotate);
    c.iter()
        .find(|e| Some(e.as_str()) != failed)
        .or(c.first())
        .cloned()
}

/// The watch task: keep a stream open and the subscription refreshed until the
/// [`Watcher`] is dropped, or no endpoint could be reached for `retry_deadline`.
async fn run(
    client: Client,
    mut sub: Subscription,
    out: mpsc::Sender<Result<WatchChange>>,
    progress: Arc<Mutex<Progress>>,
) {
    let o = client.options().clone();
    let mut rotate = 0usize;
    let mut backoff = o.backoff_min;
    let mut failing_since: Option<Instant> = None;
    let mut failed: Option<String> = None;
    let mut last_error = Error::NoEndpoints;
    let mut req_id = 0u64;
    loop {
        if let Some(since) = failing_since
            && since.elapsed() >= o.retry_deadline
        {
            let _ = out
                .send(Err(Error::GaveUp {
                    attempts: rotate as u32,
                    elapsed: since.elapsed(),
                    last: Box::new(last_error),
                }))
                .await;
            return;
        }
        let Some(target) = next_target(&client, rotate, failed.as_deref()) else {
            let _ = out.send(Err(Error::NoEndpoints)).await;
            return;
        };
        let mut lc = match client.lookup_channel(&target) {
            Ok(c) => c,
            Err(e) => {
                let _ = out.send(Err(e)).await;
                return;
            }
        };
        let (tx, rx) = mpsc::channel::<proto::WatchRequest>(64);
        req_id += 1;
        let _ = tx.try_send(sub.subscribe(req_id));
        let opened = tokio::select! {
            _ = out.closed() => return,
            r = tokio::time::timeout(o.attempt_timeout, lc.watch(ReceiverStream::new(rx))) => r,
        };
        let mut events = match opened {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(status)) => {
                let e = Error::from_status(status);
                if matches!(
                    e,
                    Error::Unimplemented(_)
                        | Error::Unauthenticated(_)
                        | Error::PermissionDenied(_)
                ) {
                    let _ = out.send(Err(e)).await;
                    return;
                }
                last_error = e;
                failing_since.get_or_insert_with(Instant::now);
                failed = Some(target);
                rotate += 1;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(o.backoff_max);
                continue;
            }
            Err(_) => {
                client.pass_over(&target);
                last_error = Error::Rpc(Box::new(tonic::Status::deadline_exceeded(
                    "the watch stream did not open in time",
                )));
                failing_since.get_or_insert_with(Instant::now);
                failed = Some(target);
                rotate += 1;
                continue;
            }
        };
        {
            let mut p = progress.lock().unwrap();
            p.endpoint = Some(target.clone());
            p.connections += 1;
        }
        let start = tokio::time::Instant::now() + sub.interval;
        let mut refresh = tokio::time::interval_at(start, sub.interval);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let broke: Error = loop {
            tokio::select! {
                _ = out.closed() => {
                    unsubscribe(&sub, &tx, &mut events, req_id + 1).await;
                    return;
                }
                _ = refresh.tick() => {
                    req_id += 1;
                    if tx.send(sub.subscribe(req_id)).await.is_err() {
                        break Error::Closed;
                    }
                }
                m = events.message() => match m {
                    Ok(Some(resp)) => match resp.kind {
                        Some(Ev::Event(ev)) => {
                            let Some(ev) = convert::event_from_proto(ev) else { continue };
                            if ev.sub != sub.id {
                                continue;
                            }
                            let applied = sub.apply(ev);
                            {
                                let mut p = progress.lock().unwrap();
                                p.pos = sub.pos;
                                p.resyncs += u64::from(applied.resync);
                            }
                            for c in applied.changes {
                                if out.send(Ok(c)).await.is_err() {
                                    unsubscribe(&sub, &tx, &mut events, req_id + 1).await;
                                    return;
                                }
                            }
                            if applied.resync {
                                req_id += 1;
                                if tx.send(sub.subscribe(req_id)).await.is_err() {
                                    break Error::Closed;
                                }
                            }
                        }
                        Some(Ev::Subscribed(_)) => {
                            failing_since = None;
                            backoff = o.backoff_min;
                            client.set_lookup_route(Some(&target));
                        }
                        Some(Ev::Unsubscribed(_)) | None => {}
                        Some(Ev::Error(e)) => {
                            let e = error_from_proto(e);
                            if !e.retryable() {
                                let _ = out.send(Err(e)).await;
                                return;
                            }
                            // No leader: the next refresh asks again.
                        }
                    },
                    Ok(None) => break Error::Rpc(Box::new(tonic::Status::unavailable("the watch stream ended"))),
                    Err(status) => break Error::from_status(status),
                },
            }
        };
        if matches!(
            broke,
            Error::Unauthenticated(_) | Error::PermissionDenied(_)
        ) {
            // The token may not watch this: no device will say otherwise.
            let _ = out.send(Err(broke)).await;
            return;
        }
        debug!(sub = sub.id, %target, "watch stream broke: {broke}; reconnecting");
        last_error = broke;
        failing_since.get_or_insert_with(Instant::now);
        client.set_lookup_route(None);
        failed = Some(target);
        rotate += 1;
    }
}

/// Drop the subscription at the nodes (best effort, bounded): ask, and wait a little for
/// the answer. The server also unsubscribes a stream's subscriptions when it ends.
async fn unsubscribe(
    sub: &Subscription,
    tx: &mpsc::Sender<proto::WatchRequest>,
    events: &mut tonic::Streaming<proto::WatchResponse>,
    request_id: u64,
) {
    let req = proto::WatchRequest {
        request_id,
        kind: Some(Rq::Unsubscribe(proto::Unsubscribe { sub: sub.id })),
    };
    if tx.send(req).await.is_err() {
        return;
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while let Ok(Some(m)) = events.message().await {
            if m.request_id == request_id {
                return;
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_core::Instant as CoreInstant;
    use tenure_core::ids::DeviceId;
    use tenure_core::lookup::{Durability, EntryVersion, LeaderId};

    fn leader(d: u64) -> LeaderId {
        LeaderId {
            start: CoreInstant(d * 10),
            device: DeviceId(d),
        }
    }

    fn entry(key: &str, stamp: u64) -> EntryView {
        EntryView {
            key: key.into(),
            value: format!("v{stamp}").into_bytes(),
            version: EntryVersion { stamp, provider: 1 },
            interval: Duration::from_secs(1),
            durability: Durability::Volatile,
            age: Duration::ZERO,
        }
    }

    fn ev(l: u64, seq: u64, event: WatchEvent) -> SubEvent {
        SubEvent {
            sub: 1,
            leader: leader(l),
            seq,
            event,
        }
    }

    fn sub() -> Subscription {
        let mut s = Subscription::new(Watch::Prefix("/s".into()), Duration::from_secs(1));
        s.id = 1;
        s
    }

    fn put(key: &str, stamp: u64) -> WatchEvent {
        WatchEvent::Put {
            entry: entry(key, stamp),
        }
    }

    #[test]
    fn a_sync_is_diffed_against_the_view() {
        let mut s = sub();
        let a = s.apply(ev(
            1,
            1,
            WatchEvent::Sync {
                entries: vec![entry("/s/a", 1), entry("/s/b", 1)],
            },
        ));
        assert_eq!(
            a.changes,
            vec![
                WatchChange::Put(entry("/s/a", 1)),
                WatchChange::Put(entry("/s/b", 1))
            ]
        );
        // A new leader's sync after a failover: /s/a changed, /s/b went while nobody
        // could say so, /s/c is new.
        let a = s.apply(ev(
            2,
            1,
            WatchEvent::Sync {
                entries: vec![entry("/s/a", 2), entry("/s/c", 1)],
            },
        ));
        assert_eq!(
            a.changes,
            vec![
                WatchChange::Put(entry("/s/a", 2)),
                WatchChange::Put(entry("/s/c", 1)),
                WatchChange::Removed {
                    key: "/s/b".into(),
                    cause: Removal::Resync
                },
            ]
        );
        assert_eq!(
            s.pos,
            Some(SubPosition {
                leader: leader(2),
                seq: 1
            })
        );
        // The same sync again changes nothing.
        let a = s.apply(ev(
            2,
            1,
            WatchEvent::Sync {
                entries: vec![entry("/s/a", 2), entry("/s/c", 1)],
            },
        ));
        assert!(a.changes.is_empty() && !a.resync);
    }

    #[test]
    fn events_in_order_apply_and_a_gap_asks_for_a_sync() {
        let mut s = sub();
        // Before the first sync nothing can be placed.
        assert_eq!(s.apply(ev(1, 3, put("/s/x", 1))), Applied::default());
        s.apply(ev(1, 1, WatchEvent::Sync { entries: vec![] }));
        let a = s.apply(ev(1, 2, put("/s/a", 1)));
        assert_eq!(a.changes, vec![WatchChange::Put(entry("/s/a", 1))]);
        // A duplicate is ignored.
        assert_eq!(s.apply(ev(1, 2, put("/s/a", 1))), Applied::default());
        let a = s.apply(ev(
            1,
            3,
            WatchEvent::Removed {
                key: "/s/a".into(),
                cause: RemoveCause::Expired,
            },
        ));
        assert_eq!(
            a.changes,
            vec![WatchChange::Removed {
                key: "/s/a".into(),
                cause: Removal::Expired
            }]
        );
        // Event 4 was lost: 5 is a gap.
        let a = s.apply(ev(1, 5, put("/s/b", 1)));
        assert!(a.resync && a.changes.is_empty());
        assert_eq!(s.pos, None);
        // Events until the sync are ignored; the sync reports what was missed.
        assert_eq!(s.apply(ev(1, 6, put("/s/c", 1))), Applied::default());
        let a = s.apply(ev(
            1,
            1,
            WatchEvent::Sync {
                entries: vec![entry("/s/b", 1), entry("/s/c", 1)],
            },
        ));
        assert_eq!(a.changes.len(), 2);
        // An event from another leader without its sync is a gap too.
        assert!(s.apply(ev(3, 2, put("/s/d", 1))).resync);
    }

    #[test]
    fn alerts_pass_through() {
        let mut s = Subscription::new(
            Watch::Alert {
                key: "/s/a".into(),
                within: Duration::from_secs(1),
            },
            Duration::from_secs(1),
        );
        s.id = 1;
        for (l, seq) in [(1, 1), (1, 2), (2, 1)] {
            let a = s.apply(ev(
                l,
                seq,
                WatchEvent::Alert {
                    key: "/s/a".into(),
                    silent_for: Duration::from_secs(2),
                },
            ));
            assert_eq!(a.changes.len(), 1);
            assert!(!a.resync);
        }
    }
}
