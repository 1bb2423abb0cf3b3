//! Providers: an entry kept refreshed from a background task (seed 003's provider side).
//!
//! A [`PublishHandle`] owns one entry. Its task publishes the entry again every refresh
//! interval with a newer version; a volatile refresh is optimistic (sent, not
//! acknowledged: a lost one is masked by the entry's lifetime of two intervals), a
//! persistent one is retried — on the next endpoint, with backoff — until the leader
//! acknowledges it. Meta-updates in the answers change the interval and the durability
//! of the following refreshes; when the interval grows, one more refresh goes out at the
//! old interval (carrying the new one), so the entry never outlives what the nodes were
//! last told.

use super::{Stamper, convert, error_from_proto};
use crate::proto;
use crate::{Client, Error, Result};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tenure_core::lookup::{Durability, EntryVersion, IntervalRange, Meta};
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;
use tracing::debug;

/// How an entry is published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PublishOptions {
    /// Refresh interval (volatile: at most the service's maximum volatile refresh
    /// interval, 2 s by default; persistent: at most an hour by default).
    pub interval: Duration,
    /// Acknowledged by the leader and kept in stable storage (survives full restarts).
    pub persistent: bool,
    /// Intervals the provider accepts in a meta-update (`None`: exactly `interval`).
    pub adapt: Option<(Duration, Duration)>,
}

impl PublishOptions {
    /// A volatile entry refreshed every `interval`.
    pub fn volatile(interval: Duration) -> PublishOptions {
        PublishOptions {
            interval,
            persistent: false,
            adapt: None,
        }
    }

    /// A persistent entry refreshed every `interval`.
    pub fn persistent(interval: Duration) -> PublishOptions {
        PublishOptions {
            interval,
            persistent: true,
            adapt: None,
        }
    }

    /// Accept meta-updates to any interval in `min..=max`.
    pub fn adapt(mut self, min: Duration, max: Duration) -> PublishOptions {
        self.adapt = Some((min, max));
        self
    }

    fn durability(&self) -> Durability {
        if self.persistent {
            Durability::Persistent
        } else {
            Durability::Volatile
        }
    }

    fn range(&self) -> IntervalRange {
        match self.adapt {
            Some((min, max)) => IntervalRange { min, max },
            None => IntervalRange::fixed(self.interval),
        }
    }
}

/// What a handle and its task share.
#[derive(Debug)]
struct State {
    value: Vec<u8>,
    interval: Duration,
    durability: Durability,
    adapt: IntervalRange,
    stamper: Stamper,
    /// The last version sent.
    last: EntryVersion,
    /// Whether the last publish was acknowledged (persistent) or sent (volatile).
    ok: bool,
    last_error: Option<String>,
    refreshes: u64,
    metas: u64,
}

#[derive(Debug)]
struct Shared {
    key: String,
    state: Mutex<State>,
    /// Publish now (the value changed).
    now: Notify,
}

/// A published entry, refreshed in the background until revoked or dropped.
#[derive(Debug)]
pub struct PublishHandle {
    client: Client,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

/// One publish of the entry as `st` describes it, with a new version.
fn request(key: &str, st: &mut State) -> proto::PublishRequest {
    let version = st.stamper.next();
    st.last = version;
    proto::PublishRequest {
        key: key.to_string(),
        value: st.value.clone(),
        version: Some(convert::version_to_proto(version)),
        interval_ms: st.interval.as_millis() as u64,
        durability: convert::durability_to_proto(st.durability),
        adapt_min_ms: st.adapt.min.as_millis() as u64,
        adapt_max_ms: st.adapt.max.as_millis() as u64,
    }
}

/// Send one publish (retried on other endpoints within `deadline`): whether it was
/// acknowledged, and the meta-update the answer carried.
async fn send(
    client: &Client,
    req: proto::PublishRequest,
    deadline: Instant,
) -> Result<(bool, Option<Meta>)> {
    client
        .lookup_call(deadline, |mut c| {
            let req = req.clone();
            async move {
                let r = c.publish(req).await?.into_inner();
                Ok(match r.result {
                    Some(proto::publish_response::Result::Ok(p)) => {
                        Ok((p.acked, p.meta.and_then(convert::meta_from_proto)))
                    }
                    Some(proto::publish_response::Result::Error(e)) => Err(error_from_proto(e)),
                    None => Err(Error::Malformed),
                })
            }
        })
        .await
}

/// Apply a meta-update: the interval and durability of the next refreshes. Returns the
/// delay until the next refresh (the shorter of the old and the new interval).
fn apply_meta(st: &mut State, meta: Option<Meta>) -> Duration {
    let old = st.interval;
    if let Some(m) = meta
        && (m.interval != st.interval || m.durability != st.durability)
    {
        debug!(interval = ?m.interval, durability = ?m.durability, reason = ?m.reason, "meta-update");
        st.interval = m.interval;
        st.durability = m.durability;
        st.metas += 1;
    }
    old.min(st.interval)
}

impl Client {
    /// Publish `key → value` and keep it refreshed every `opts.interval` until the
    /// handle is revoked or dropped. Returns once the first publish was sent (volatile)
    /// or acknowledged by the leader (persistent; retried on `NoLeader` and on transport
    /// failures, on the other endpoints, within `retry_deadline`).
    pub async fn publish(
        &self,
        key: &str,
        value: impl Into<Vec<u8>>,
        opts: PublishOptions,
    ) -> Result<PublishHandle> {
        super::check_key(key)?;
        let mut st = State {
            value: value.into(),
            interval: opts.interval,
            durability: opts.durability(),
            adapt: opts.range(),
            stamper: Stamper::new(),
            last: EntryVersion::default(),
            ok: false,
            last_error: None,
            refreshes: 0,
            metas: 0,
        };
        let req = request(key, &mut st);
        let (acked, meta) = send(self, req, self.quick_deadline()).await?;
        st.ok = acked || st.durability == Durability::Volatile;
        let first = apply_meta(&mut st, meta);
        let shared = Arc::new(Shared {
            key: key.to_string(),
            state: Mutex::new(st),
            now: Notify::new(),
        });
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(refresh(self.clone(), shared.clone(), first, stopped));
        Ok(PublishHandle {
            client: self.clone(),
            shared,
            stop: Some(stop),
            task: Some(task),
        })
    }
}

/// The refresh task: publish again every interval until stopped.
async fn refresh(
    client: Client,
    shared: Arc<Shared>,
    first: Duration,
    mut stopped: oneshot::Receiver<()>,
) {
    let o = client.options().clone();
    let mut next = tokio::time::Instant::now() + first;
    let mut backoff = o.backoff_min;
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            _ = tokio::time::sleep_until(next) => {}
            _ = shared.now.notified() => {}
        }
        let (req, interval, durability) = {
            let mut st = shared.state.lock().unwrap();
            (request(&shared.key, &mut st), st.interval, st.durability)
        };
        // A refresh may take up to its interval (then the next one is due anyway); a
        // persistent one is retried until acknowledged.
        let deadline = Instant::now() + interval.max(o.backoff_max);
        let r = tokio::select! {
            _ = &mut stopped => return,
            r = send(&client, req, deadline) => r,
        };
        let mut st = shared.state.lock().unwrap();
        match r {
            Ok((acked, meta)) => {
                st.ok = acked || durability == Durability::Volatile;
                st.refreshes += 1;
                st.last_error = None;
                backoff = o.backoff_min;
                let delay = apply_meta(&mut st, meta);
                if st.ok {
                    next = tokio::time::Instant::now() + delay;
                } else {
                    // Answered but not acknowledged: the service asked for
                    // acknowledgements from now on; send the next one at once.
                    next = tokio::time::Instant::now() + backoff;
                }
            }
            Err(e) => {
                debug!(key = %shared.key, "refresh failed: {e}");
                st.last_error = Some(e.to_string());
                if durability == Durability::Persistent {
                    // Retried until acknowledged.
                    st.ok = false;
                    next = tokio::time::Instant::now() + backoff;
                    backoff = (backoff * 2).min(o.backoff_max);
                } else {
                    // Optimistic: the next refresh is the retry.
                    next = tokio::time::Instant::now() + interval;
                }
            }
        }
    }
}

impl PublishHandle {
    /// The entry's key.
    pub fn key(&self) -> &str {
        &self.shared.key
    }

    /// The refresh interval now in use (a meta-update may have changed it).
    pub fn interval(&self) -> Duration {
        self.shared.state.lock().unwrap().interval
    }

    /// The durability now in use (a meta-update may have made the entry persistent).
    pub fn durability(&self) -> Durability {
        self.shared.state.lock().unwrap().durability
    }

    /// The version of the last publish sent.
    pub fn version(&self) -> EntryVersion {
        self.shared.state.lock().unwrap().last
    }

    /// Whether the last refresh went out (volatile) or was acknowledged (persistent).
    pub fn healthy(&self) -> bool {
        self.shared.state.lock().unwrap().ok
    }

    /// The last refresh's error, if it failed.
    pub fn last_error(&self) -> Option<String> {
        self.shared.state.lock().unwrap().last_error.clone()
    }

    /// Refreshes sent since the first publish, and meta-updates applied.
    pub fn counts(&self) -> (u64, u64) {
        let st = self.shared.state.lock().unwrap();
        (st.refreshes, st.metas)
    }

    /// Change the value: published at once (and by every refresh after).
    pub fn update(&self, value: impl Into<Vec<u8>>) {
        self.shared.state.lock().unwrap().value = value.into();
        self.shared.now.notify_one();
    }

    /// Stop refreshing and revoke the entry: a persistent revoke is retried until the
    /// leader acknowledges it (within `retry_deadline`), a volatile one is sent once.
    pub async fn revoke(mut self) -> Result<()> {
        self.stop_refreshing().await;
        let (version, durability) = self.next_revoke();
        let deadline = self.client.quick_deadline();
        self.client
            .revoke_version(&self.shared.key, version, durability, deadline)
            .await
            .map(|_| ())
    }

    /// Stop refreshing without revoking: the entry lives out its lifetime (two
    /// intervals and a round trip after the last refresh) at the nodes.
    pub async fn abandon(mut self) {
        self.stop_refreshing().await;
    }

    async fn stop_refreshing(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    fn next_revoke(&self) -> (EntryVersion, Durability) {
        let mut st = self.shared.state.lock().unwrap();
        let v = st.stamper.next();
        st.last = v;
        (v, st.durability)
    }
}

impl Drop for PublishHandle {
    /// Stop refreshing and revoke the entry from a spawned task (best effort: without a
    /// runtime, or if the revoke is lost, the entry expires on its own).
    fn drop(&mut self) {
        let Some(stop) = self.stop.take() else {
            return;
        };
        let _ = stop.send(());
        let (version, durability) = self.next_revoke();
        let client = self.client.clone();
        let key = self.shared.key.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let deadline = client.quick_deadline();
                if let Err(e) = client
                    .revoke_version(&key, version, durability, deadline)
                    .await
                {
                    debug!(%key, "revoke on drop failed: {e}");
                }
            });
        }
    }
}
