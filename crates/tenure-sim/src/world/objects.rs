//! The store world's object clients and watchers ([`crate::objects`] describes the
//! workload and the checkers). A client sends one request at a time to its target,
//! follows `NotManager` hints, retries on `Unavailable` and on its own timeout with the
//! same request (the same request id, so a retry of a put with a session is recognised),
//! and gives up after [`CLIENT_HOPS_MAX`] attempts. Watchers keep one subscription at a
//! time, each with a fresh watch id, so events of a subscription they left are not
//! heard; they resume from their last revision.
//!
//! This file holds the clients', watchers' and requests' state; the behaviour is split
//! into `clients` (drawing operations), `requests` (sending, retrying, routing answers),
//! `answers`, `watchers`, `hooks` (the checkers' hooks while the run goes) and `settle`
//! (the end of a run).

mod answers;
mod clients;
mod hooks;
mod requests;
mod settle;
mod watchers;

use super::CLIENT_HOPS_MAX;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tenure_core::io::{ObjectRequest, Request};
use tenure_core::lockctl::{FencingToken, SessionId};
use tenure_core::objects::{BlockInfo, Bytes, Uuid};
use tenure_core::rng::{Rng, mix64};
use tenure_core::{DeviceId, StoreId};

/// Client ids of object clients start here.
const OBJ_CLIENT_BASE: u64 = 2_000;
/// Client ids of watchers start here.
const OBJ_WATCH_BASE: u64 = 3_000;
/// A watcher that heard nothing from its subscription for this long resumes elsewhere
/// (a crashed or cut-off manager ends no stream explicitly).
const WATCH_QUIET_US: u64 = 3_000_000;
/// How often a watcher looks at its subscription.
const WATCH_CHECK_US: u64 = 1_000_000;
/// After faults stop, the objects must be quiet within this long.
const OBJ_SETTLE_US: u64 = 20_000_000;
/// A client asks again about this long after `Unavailable` or a redirect without a
/// hint (µs, mean).
const OBJ_BACKOFF_US: u64 = 150_000;
/// A request is given up after this many attempts.
const OBJ_ATTEMPTS_MAX: u32 = 2 * CLIENT_HOPS_MAX;
/// How often the settling world looks whether the objects are quiet.
const OBJ_SETTLE_CHECK_US: u64 = 100_000;

/// The object workload's and checkers' part of the world.
pub(super) struct ObjectWorld {
    /// What the run seed drew for the object workload.
    pub(super) knobs: crate::objects::ObjectKnobs,
    /// Draws the clients' and watchers' choices.
    pub(super) rng: Rng,
    /// The object clients, by number.
    pub(super) clients: Vec<ObjClient>,
    /// The watchers, by number.
    pub(super) watchers: Vec<Watcher>,
    /// Object requests in flight, by request id.
    pub(super) reqs: BTreeMap<u64, ObjReq>,
    /// The object checkers.
    pub(super) check: crate::objects::ObjectChecker,
    /// Manifests seen collected by a manager.
    pub(super) collected: BTreeSet<(StoreId, Uuid)>,
    /// The last watch id handed out.
    pub(super) next_watch: u64,
}

/// A multipart upload a client has in progress.
#[derive(Clone, Debug)]
struct Upload {
    key: String,
    id: Uuid,
    parts: u32,
    seed: u64,
    stored: BTreeSet<u32>,
}

/// One object client.
#[derive(Clone, Debug)]
pub(super) struct ObjClient {
    store: StoreId,
    keys: Vec<String>,
    target: DeviceId,
    with_session: bool,
    session: Option<(SessionId, Duration)>,
    /// Until this time (µs) the client sends no keep-alives.
    lapse_until: u64,
    keepalive: Option<u64>,
    inflight: Option<u64>,
    /// The last revision the client saw of each key (0: absent).
    known: BTreeMap<String, u64>,
    upload: Option<Upload>,
}

/// One watcher of a store's prefix.
#[derive(Clone, Debug)]
pub(super) struct Watcher {
    store: StoreId,
    prefix: String,
    whole: bool,
    target: DeviceId,
    /// The current subscription's watch id.
    sub: u64,
    live: bool,
    start: Option<u64>,
    last: u64,
    heard_at: u64,
    pending: Option<u64>,
    seen: BTreeSet<u64>,
    skipped: Vec<(u64, u64)>,
}

/// Who sent a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    Client(usize),
    Watcher(usize),
}

/// What a request is for.
#[derive(Clone, Debug)]
enum ObjKind {
    Open,
    KeepAlive,
    Put {
        key: String,
        content: (u32, u64),
        cas: Option<Option<u64>>,
        fence: Option<(String, FencingToken)>,
        ephemeral: bool,
    },
    TooLarge,
    Get {
        key: String,
    },
    Head {
        key: String,
    },
    Delete {
        key: String,
    },
    Initiate {
        key: String,
    },
    Part {
        part: u32,
    },
    Complete {
        key: String,
        content: (u32, u64),
    },
    Abort,
    Watch {
        sub: u64,
    },
    Relist {
        sub: u64,
    },
}

/// An object request in flight.
#[derive(Clone, Debug)]
pub(super) struct ObjReq {
    owner: Owner,
    store: StoreId,
    req: Request,
    kind: ObjKind,
    attempt: u32,
    first_sent: u64,
}

/// The first path segment that hashes to `store`.
fn segment_for(store: StoreId, stores: u32) -> String {
    (0u64..)
        .map(|i| format!("g{i}"))
        .find(|g| tenure_core::config::store_of(g, stores) == store)
        .expect("some segment hashes to every store")
}

/// `len` bytes drawn from `seed`.
fn content(seed: u64, len: usize) -> Bytes {
    let mut r = Rng::new(mix64(seed));
    Bytes::from((0..len).map(|_| r.next_u64() as u8).collect::<Vec<u8>>())
}

fn sum(data: &[u8]) -> (u32, u64) {
    (BlockInfo::of(data).checksum, data.len() as u64)
}

/// Whether a watcher is behind its store, and the revision it should have reached: a
/// whole-store watcher must be at the store's revision; a prefix watcher must have seen
/// every change of its prefix the history still holds.
fn watch_behind(w: &Watcher, t: &tenure_core::objects::ObjectTable) -> Option<u64> {
    if w.whole {
        return (w.last != t.revision).then_some(t.revision);
    }
    (t.history.iter().rev())
        .find(|c| tenure_core::objects::under(&c.key, &w.prefix))
        .map(|c| c.revision)
        .filter(|r| *r > w.last)
}

/// The content of part `part` of the upload with `seed` (0 to 150 bytes).
fn part_data(seed: u64, part: u32) -> Bytes {
    let s = mix64(seed ^ part as u64);
    content(s, (s % 151) as usize)
}

/// A short rendering of a request for traces (no block data).
fn brief(req: &Request) -> String {
    match req {
        Request::Object { store, req } => match req {
            ObjectRequest::Put {
                key, data, cond, ..
            } => format!("{store} put {key} ({} bytes) {cond:?}", data.len()),
            ObjectRequest::MultipartPart {
                key,
                upload,
                part,
                data,
            } => format!(
                "{store} part {part} of {upload} {key} ({} bytes)",
                data.len()
            ),
            r => format!("{store} {r:?}"),
        },
        r => format!("{r:?}"),
    }
}
