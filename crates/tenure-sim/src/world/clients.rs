//! The simulator's lock clients. Each client opens a session in one of a few contended
//! stores, keeps it alive, acquires (try or wait with a timeout, shared or exclusive),
//! holds, releases, asks who holds a lock, sometimes closes its session, pauses past its
//! TTL, or crashes. Its names are siblings, or, in most runs, paths drawn from a small
//! tree per store ([`NAME_TREE`]), so that one client's lock covers another's and the
//! table's cover rule and intention modes decide. It follows `NotManager` hints, retries
//! on `Unavailable` and client-side timeouts with the same idempotency key, and keeps its
//! own conservative session deadline (send time of the last answered keep-alive + TTL −
//! δ_c): a lock counts as held by the client only before it.
//! A client sends one request at a time unless the run seed makes it pipeline
//! ([`super::pipeline`]): then it keeps several in flight on its session stream and
//! re-sends them all wherever the stream resumes.
//!
//! Every operation goes into the [`LockChecker`](crate::lockcheck::LockChecker)'s history
//! with the output the client can vouch for: an answer that proves the request had no
//! effect is `Failed` (or left out), an answer that does not (no reply, `Unavailable`
//! after a retry, `SessionExpired` for a queued wait) is unknown, as Knossos' `:info`.
//!
//! This file holds the clients' and requests' state; the behaviour is split into `ops`
//! (drawing operations), `requests`, `answers` and `sessions`.

mod answers;
mod ops;
mod requests;
mod sessions;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tenure_core::io::Request;
use tenure_core::lockctl::{FencingToken, LockMode, SessionId};
use tenure_core::rng::Rng;
use tenure_core::{DeviceId, StoreId};

/// Client ids of lock clients start here (write clients use 1).
pub(super) const LOCK_CLIENT_BASE: u64 = 1_000;

/// A client's session as it sees it.
#[derive(Clone, Debug)]
pub(super) struct ClientSession {
    pub(super) id: SessionId,
    ttl: Duration,
    /// Conservative deadline (real µs): the client stops using its locks here.
    deadline: u64,
}

/// One lock client.
#[derive(Clone, Debug)]
pub(super) struct LockClient {
    /// The store of the client's names.
    pub(super) store: StoreId,
    /// The store of its session, when it is another (DESIGN §4, "One session per
    /// client"): its lock requests run under the session's child in `store`.
    pub(super) home: Option<StoreId>,
    /// That child, once home recorded it (learned from the attach's observation): the
    /// session the lock checker knows the client's holds by.
    pub(super) child: Option<SessionId>,
    /// The child is known to have been renewed after home recorded it (a request ran
    /// under it, or a keep-alive's answer named it): from then on its deadline covers
    /// the client's. Until then (the attach's answer was lost or an error) no request
    /// ran under it and its deadline may still be its open's, so the checker does not
    /// hold it to the client's deadline.
    pub(super) adopted: bool,
    pub(super) names: Vec<String>,
    pub(super) target: DeviceId,
    /// Bumped at every client crash: answers to an older incarnation are ignored.
    incarnation: u64,
    pub(super) session: Option<ClientSession>,
    pub(super) held: BTreeMap<String, (LockMode, FencingToken)>,
    /// Names whose acquire or release outcome this session does not know.
    pub(super) tainted: BTreeSet<String>,
    /// Requests in flight, keep-alive aside: at most one unless the client pipelines.
    pub(super) inflight: BTreeSet<u64>,
    /// `Some(n)`: the client pipelines up to `n` requests on its session stream
    /// ([`super::pipeline`]); `None`: one request at a time, each retried on its own.
    pub(super) pipeline: Option<usize>,
    /// A pipelining client's next burst is not before this (real µs): one burst per
    /// drawn think time, however fast its answers come (reads under the manager's lease
    /// come back at once, and a client that refilled on every answer would spin).
    pub(super) burst_at: u64,
    pub(super) keepalive: Option<u64>,
    paused_until: Option<u64>,
    down: bool,
    next_request_id: u64,
    /// Answered by a manager since faults stopped (liveness).
    pub(super) answered: bool,
}

/// What a request is for.
#[derive(Clone, Debug)]
pub(super) enum Kind {
    Open,
    /// A first request under the session in the names' store, which makes its child.
    Attach,
    KeepAlive,
    Close,
    Acquire {
        name: String,
        mode: LockMode,
    },
    Release {
        name: String,
        token: FencingToken,
    },
    Holders {
        name: String,
    },
}

impl Kind {
    /// The lock name the request is about, if any.
    pub(super) fn name(&self) -> Option<&str> {
        match self {
            Kind::Acquire { name, .. } | Kind::Release { name, .. } | Kind::Holders { name } => {
                Some(name)
            }
            Kind::Open | Kind::Attach | Kind::KeepAlive | Kind::Close => None,
        }
    }
}

impl LockClient {
    /// The store of the client's session.
    pub(super) fn session_store(&self) -> StoreId {
        self.home.unwrap_or(self.store)
    }

    /// The session the lock checker knows the holds of session `s` by: its child in the
    /// names' store for a session of another store.
    pub(super) fn ck(&self, s: SessionId) -> SessionId {
        match self.home {
            Some(_) => self.child.unwrap_or(s),
            None => s,
        }
    }

    /// A lock request as the client sends it: under its session of another store, if so.
    pub(super) fn wrap(&self, req: Request) -> Request {
        match self.home {
            Some(home) => Request::Under(tenure_core::io::Under {
                home,
                req: Box::new(req),
            }),
            None => req,
        }
    }
}

/// A request in flight.
#[derive(Clone, Debug)]
pub(super) struct LockReq {
    pub(super) id: u64,
    pub(super) client: usize,
    incarnation: u64,
    pub(super) req: Request,
    pub(super) kind: Kind,
    attempt: u32,
    /// First send (real µs): deadlines are computed from it, conservatively.
    first_sent: u64,
    /// History operation, if any.
    op: Option<usize>,
    /// Some attempt went unanswered (it may have taken effect).
    pub(super) lost_attempt: bool,
    session: Option<SessionId>,
    /// Where the last attempt went.
    sent_to: DeviceId,
    /// How long the client waits for an answer to one attempt (µs).
    timeout_us: u64,
}

/// The first path segment of the lock names of `store` (every name under it is in the
/// store: [`tenure_core::config::store_of`] hashes the first segment).
fn store_segment(store: StoreId, stores: u32) -> String {
    (0u64..)
        .map(|i| format!("g{i}"))
        .find(|g| tenure_core::config::store_of(g, stores) == store)
        .expect("some segment hashes to every store")
}

/// `n` sibling lock names of `store`: no name covers another.
fn names_for(store: StoreId, stores: u32, n: usize) -> Vec<String> {
    let first = store_segment(store, stores);
    (0..n).map(|j| format!("/{first}/l{j}")).collect()
}

/// The tree of nested lock names of a store, below its first segment `/g`: the segment
/// itself (which covers every name of the store), two levels of children and a third
/// level under `/g/a/x`, so that names are ancestors, descendants or siblings of one
/// another (seed 004 §9: a lock on a path covers its descendants).
const NAME_TREE: [&str; 9] = [
    "/a", "/a/x", "", "/b", "/a/x/1", "/a/y", "/b/z", "/a/x/2", "/c",
];

/// `n` distinct names of `store`'s tree, drawn at random (all of them if `n` is larger).
fn nested_names_for(store: StoreId, stores: u32, n: usize, rng: &mut Rng) -> Vec<String> {
    let first = store_segment(store, stores);
    let mut pool: Vec<&str> = NAME_TREE.to_vec();
    let mut names = Vec::new();
    while names.len() < n && !pool.is_empty() {
        let suffix = pool.remove(rng.below(pool.len() as u64) as usize);
        names.push(format!("/{first}{suffix}"));
    }
    names
}
