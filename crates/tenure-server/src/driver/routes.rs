//! Where pushed events go: lookup subscription events to their Watch stream, object
//! watch changes to their session stream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tenure_core::ids::{ClientId, StoreId};
use tenure_core::io::ClientError;
use tenure_core::lookup::{SubEvent, SubId};
use tokio::sync::mpsc;
use tracing::debug;
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
    pub(super) fn route(&self, ev: SubEvent) {
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
    /// Changes, in revision order, and their values when the watch asked for them
    /// (one per change, else none).
    Events {
        /// The changes.
        changes: Vec<tenure_core::objects::Change>,
        /// Their values.
        values: Vec<Option<bytes::Bytes>>,
    },
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

    pub(super) fn store_of(&self, client: ClientId, watch: u64) -> Option<StoreId> {
        self.lock().get(&(client, watch)).map(|(s, _)| *s)
    }

    pub(super) fn route(&self, client: ClientId, watch: u64, msg: WatchMsg) {
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
