//! The lookup service (seed 003, Aladdin; DESIGN §7): publish, query, watch.
//!
//! The service is cluster-wide: every device is a lookup node and any of them can take a
//! request (it multicasts it to the others; the lookup leader answers queries and
//! acknowledges persistent updates). So the client sends lookup requests to the endpoint
//! that answered last, and moves to the next one on a transport failure or when no
//! leader answered (`NoLeader`: an outage, retried with backoff within
//! `retry_deadline`).
//!
//! - [`Client::publish`] makes an entry available and keeps it refreshed from a
//!   background task: each refresh is a publish with a newer version (stamp =
//!   max(now in µs, last + 1), provider = a random id per handle), so updates are
//!   idempotent and commutative at the nodes. A persistent entry is acknowledged by the
//!   leader, and a refresh is retried until it is. A meta-update in an answer (the
//!   service asks for another interval, or for acknowledgements) is applied to the
//!   following refreshes. Dropping the [`PublishHandle`] revokes the entry (best effort);
//!   [`PublishHandle::revoke`] does it and waits for the answer.
//! - [`Client::get`] and [`Client::list`] ask the leader; [`Client::revoke`] removes an
//!   entry someone else published (acknowledged).
//! - [`Client::watch`] and [`Client::alert`] subscribe on a `Watch` stream; see [`watch`].

pub mod convert;
mod publish;
pub mod watch;

pub use publish::{PublishHandle, PublishOptions};
pub use tenure_core::lookup::{Durability, EntryVersion, EntryView, LeaderId, LookupError};
pub use watch::{Removal, WatchChange, WatchOptions, Watcher};

use crate::Chan;
use crate::proto::{self, lookup_client::LookupClient, lookup_error::Kind as LKind};
use crate::{Client, Error, Result};
use std::future::Future;
use std::time::{Duration, Instant};
use tracing::debug;

/// A typed lookup error from the wire.
pub fn error_from_proto(e: proto::LookupError) -> Error {
    match e.kind {
        Some(LKind::InvalidKey(k)) => Error::Lookup(LookupError::InvalidKey(if k.key.is_empty() {
            k.reason
        } else {
            format!("{:?}: {}", k.key, k.reason)
        })),
        Some(LKind::TooLarge(t)) => Error::Lookup(LookupError::TooLarge {
            len: t.size as usize,
            max: t.limit as usize,
        }),
        Some(LKind::BadInterval(b)) => Error::Lookup(LookupError::BadInterval {
            got: Duration::from_millis(b.got_ms),
            min: Duration::from_millis(b.min_ms),
            max: Duration::from_millis(b.max_ms),
        }),
        Some(LKind::NoLeader(_)) => Error::Lookup(LookupError::NoLeader),
        Some(LKind::StaleVersion(_)) => Error::Lookup(LookupError::StaleVersion),
        Some(LKind::UnknownSubscription(u)) => {
            Error::Lookup(LookupError::UnknownSubscription(u.sub))
        }
        Some(LKind::InvalidRequest(r)) => Error::InvalidRequest(r.reason),
        None => Error::Malformed,
    }
}

/// A random 64-bit id (providers, subscriptions) without a random-number crate: the
/// standard library's per-process random hash keys, mixed with the time and a counter.
pub(crate) fn random_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(now_micros() as u128);
    h.write_u32(std::process::id());
    h.finish().max(1)
}

/// Microseconds of the system clock (the stamp of an entry's version).
pub(crate) fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// A provider's versions: strictly increasing stamps (µs of its clock, at least one
/// more than the last), under one random provider id.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stamper {
    provider: u64,
    last: u64,
}

impl Stamper {
    pub(crate) fn new() -> Stamper {
        Stamper {
            provider: random_id(),
            last: 0,
        }
    }

    /// The next version: stamp = max(now, last + 1).
    pub(crate) fn next(&mut self) -> EntryVersion {
        self.last = now_micros().max(self.last + 1);
        EntryVersion {
            stamp: self.last,
            provider: self.provider,
        }
    }
}

/// Check a key before sending it (the server checks again).
fn check_key(key: &str) -> Result<()> {
    tenure_core::lookup::check_key(key).map_err(Error::Lookup)
}

/// Check a prefix before sending it (the server checks again).
fn check_prefix(prefix: &str) -> Result<()> {
    tenure_core::lookup::check_prefix(prefix).map_err(Error::Lookup)
}

impl Client {
    /// The endpoints to try for a lookup request, best first: the one that answered
    /// last, then every endpoint from the `rotate`th on; endpoints that recently did not
    /// answer go last.
    pub(crate) fn lookup_candidates(&self, rotate: usize) -> Vec<String> {
        let eps = self.endpoints();
        let mut out: Vec<String> = Vec::with_capacity(eps.len() + 1);
        if rotate == 0
            && let Some(e) = self.inner.lookup_route.lock().unwrap().clone()
        {
            out.push(e);
        }
        let n = eps.len().max(1);
        for i in 0..eps.len() {
            let e = &eps[(rotate + i) % n];
            if !out.contains(e) {
                out.push(e.clone());
            }
        }
        let now = Instant::now();
        let mut slow = self.inner.slow.lock().unwrap();
        slow.retain(|_, until| *until > now);
        out.sort_by_key(|e| slow.contains_key(e));
        out
    }

    /// Remember the endpoint that answered a lookup request (or forget it).
    pub(crate) fn set_lookup_route(&self, endpoint: Option<&str>) {
        *self.inner.lookup_route.lock().unwrap() = endpoint.map(str::to_string);
    }

    /// Run one lookup request: `call` issues the RPC and returns the protocol outcome.
    /// A transport failure, a call not answered within `request_timeout`, or `NoLeader`
    /// moves to the next endpoint after a backoff; no new attempt starts after
    /// `deadline`. Other errors are returned at once.
    pub(crate) async fn lookup_call<T, F, Fut>(&self, deadline: Instant, mut call: F) -> Result<T>
    where
        F: FnMut(LookupClient<Chan>) -> Fut,
        Fut: Future<Output = Result<Result<T>, tonic::Status>>,
    {
        let started = Instant::now();
        let o = &self.inner.opts;
        let mut backoff = o.backoff_min;
        let mut attempts = 0u32;
        let mut rotate = 0usize;
        loop {
            attempts += 1;
            let target = self
                .lookup_candidates(rotate)
                .into_iter()
                .next()
                .ok_or(Error::NoEndpoints)?;
            let lc = self.lookup_channel(&target)?;
            let err = match tokio::time::timeout(o.request_timeout, call(lc)).await {
                Ok(Ok(Ok(v))) => {
                    self.set_lookup_route(Some(&target));
                    return Ok(v);
                }
                Ok(Ok(Err(e))) => e,
                Ok(Err(s)) => Error::from_status(s),
                Err(_) => {
                    self.pass_over(&target);
                    Error::Rpc(Box::new(tonic::Status::deadline_exceeded(format!(
                        "no answer within {:?}",
                        o.request_timeout
                    ))))
                }
            };
            if !err.retryable() {
                return Err(err);
            }
            if Instant::now() + backoff >= deadline {
                return Err(Error::GaveUp {
                    attempts,
                    elapsed: started.elapsed(),
                    last: Box::new(err),
                });
            }
            debug!(%target, "lookup request retried: {err}");
            self.set_lookup_route(None);
            rotate += 1;
            tokio::time::sleep(backoff).await;
            // `NoLeader` already waited a round trip at the device: retry at the same
            // pace, so the client sees the service's outage and not its own backoff.
            backoff = if matches!(
                err,
                Error::Lookup(tenure_core::lookup::LookupError::NoLeader)
            ) {
                o.backoff_min
            } else {
                (backoff * 2).min(o.backoff_max)
            };
        }
    }

    /// The entry under `key`, as the lookup leader has it (`None`: absent).
    pub async fn get(&self, key: &str) -> Result<Option<EntryView>> {
        Ok(self.get_from_leader(key).await?.0)
    }

    /// [`Client::get`], with the leader that answered.
    pub async fn get_from_leader(&self, key: &str) -> Result<(Option<EntryView>, LeaderId)> {
        check_key(key)?;
        let deadline = self.quick_deadline();
        self.lookup_call(deadline, |mut c| async move {
            let r = c
                .get(proto::GetRequest {
                    key: key.to_string(),
                })
                .await?
                .into_inner();
            Ok(match r.result {
                Some(proto::get_response::Result::Ok(g)) => Ok((
                    g.entry.map(convert::entry_from_proto),
                    convert::leader_from_proto(g.leader),
                )),
                Some(proto::get_response::Result::Error(e)) => Err(error_from_proto(e)),
                None => Err(Error::Malformed),
            })
        })
        .await
    }

    /// The entries whose key is `prefix` or under it (`/`: all), in key order, as the
    /// lookup leader has them.
    pub async fn list(&self, prefix: &str) -> Result<Vec<EntryView>> {
        check_prefix(prefix)?;
        let deadline = self.quick_deadline();
        self.lookup_call(deadline, |mut c| async move {
            let r = c
                .list(proto::ListRequest {
                    prefix: prefix.to_string(),
                })
                .await?
                .into_inner();
            Ok(match r.result {
                Some(proto::list_response::Result::Ok(l)) => Ok(l
                    .entries
                    .into_iter()
                    .map(convert::entry_from_proto)
                    .collect()),
                Some(proto::list_response::Result::Error(e)) => Err(error_from_proto(e)),
                None => Err(Error::Malformed),
            })
        })
        .await
    }

    /// Remove an entry, whoever published it: a revoke stamped now, acknowledged by the
    /// leader. A provider that keeps refreshing the entry brings it back (soft state);
    /// a provider whose clock is ahead of this one's has a newer version, and the revoke
    /// is refused `StaleVersion`.
    pub async fn revoke(&self, key: &str) -> Result<()> {
        check_key(key)?;
        let version = Stamper::new().next();
        self.revoke_version(key, version, Durability::Persistent, self.quick_deadline())
            .await
            .map(|_| ())
    }

    /// Send a revoke with this version (retried within `deadline`); whether the leader
    /// acknowledged it.
    pub(crate) async fn revoke_version(
        &self,
        key: &str,
        version: EntryVersion,
        durability: Durability,
        deadline: Instant,
    ) -> Result<bool> {
        self.lookup_call(deadline, |mut c| async move {
            let r = c
                .revoke(proto::RevokeRequest {
                    key: key.to_string(),
                    version: Some(convert::version_to_proto(version)),
                    durability: convert::durability_to_proto(durability),
                })
                .await?
                .into_inner();
            Ok(match r.result {
                Some(proto::revoke_response::Result::Ok(r)) => Ok(r.acked),
                Some(proto::revoke_response::Result::Error(e)) => Err(error_from_proto(e)),
                None => Err(Error::Malformed),
            })
        })
        .await
    }

    /// The lookup node of the device at `endpoint`: its state (passive, joining,
    /// warming up, active, leader), the nodes its soft-state store shows up, its view of
    /// the leader, its entries and subscriptions.
    pub async fn node_status(&self, endpoint: &str) -> Result<proto::NodeStatusResponse> {
        let endpoint = crate::normalize(endpoint.to_string());
        let mut c = self.lookup_channel(&endpoint)?;
        let limit = self.inner.opts.attempt_timeout;
        crate::within(
            limit,
            "NodeStatus",
            c.node_status(proto::NodeStatusRequest {}),
        )
        .await
    }

    /// [`Client::node_status`] of every known endpoint, asked at once.
    pub async fn node_status_all(&self) -> Vec<(String, Result<proto::NodeStatusResponse>)> {
        self.ask_all(|e| async move { self.node_status(&e).await })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_strictly_increase_under_one_provider() {
        let mut s = Stamper::new();
        let mut last = s.next();
        for _ in 0..1000 {
            let v = s.next();
            assert!(v > last, "{v:?} after {last:?}");
            assert_eq!(v.provider, last.provider);
            last = v;
        }
        assert_ne!(Stamper::new().provider, Stamper::new().provider);
    }

    #[test]
    fn lookup_errors_map_to_typed_errors() {
        let e = error_from_proto(convert::error_to_proto(&LookupError::NoLeader, ""));
        assert!(matches!(e, Error::Lookup(LookupError::NoLeader)));
        assert!(e.retryable());
        let e = error_from_proto(convert::error_to_proto(
            &LookupError::TooLarge { len: 9, max: 4 },
            "/k",
        ));
        assert!(matches!(
            e,
            Error::Lookup(LookupError::TooLarge { len: 9, max: 4 })
        ));
        assert!(!e.retryable());
        let e = error_from_proto(convert::invalid_request("no kind"));
        assert!(matches!(e, Error::InvalidRequest(ref r) if r == "no kind"));
    }
}
