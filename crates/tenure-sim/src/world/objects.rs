//! The store world's object clients and watchers ([`crate::objects`] describes the
//! workload and the checkers). A client sends one request at a time to its target,
//! follows `NotManager` hints, retries on `Unavailable` and on its own timeout with the
//! same request (the same request id, so a retry of a put with a session is recognised),
//! and gives up after [`CLIENT_HOPS_MAX`] attempts. Watchers keep one subscription at a
//! time, each with a fresh watch id, so events of a subscription they left are not
//! heard; they resume from their last revision.

use super::{CLIENT_HOPS_MAX, CLIENT_TIMEOUT_US, Event, World, exp};
use crate::objects::{ObjectViolation, sim_settings};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tenure_core::io::{ClientError, ObjectRequest, Request, Response, Writer};
use tenure_core::lockctl::{FencingToken, LockMode, SessionId};
use tenure_core::msg::Msg;
use tenure_core::objects::blocks::BlockMsg;
use tenure_core::objects::{
    BlockInfo, Bytes, Change, Conditions, Fence, ObjectError, ObjectSettings, Uuid,
};
use tenure_core::rng::{Rng, mix64};
use tenure_core::{ChunkId, ClientId, DeviceId, StoreId};

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

impl World {
    /// The objects settings every device of this run gets.
    pub(super) fn object_settings(history: u32) -> ObjectSettings {
        sim_settings(history)
    }

    /// Create the object clients and watchers of this run and start them.
    pub(super) fn start_object_clients(&mut self) {
        let k = self.obj_knobs.clone();
        let stores_used = self.lock_knobs.stores_used as u64;
        let mut watched = BTreeSet::new();
        for c in 0..k.clients {
            let store = StoreId(self.obj_rng.below(stores_used) as u32);
            let g = segment_for(store, self.cfg.stores);
            let keys = (0..k.keys_per_dir)
                .flat_map(|j| [format!("/{g}/a/o{j}"), format!("/{g}/b/o{j}")])
                .collect();
            let target = {
                let drawn = DeviceId(1 + self.obj_rng.below(self.cfg.devices));
                self.client_endpoint(drawn)
            };
            let with_session = self.obj_rng.chance(k.session_p);
            self.obj_clients.push(ObjClient {
                store,
                keys,
                target,
                with_session,
                session: None,
                lapse_until: 0,
                keepalive: None,
                inflight: None,
                known: BTreeMap::new(),
                upload: None,
            });
            let t = self.now + exp(&mut self.obj_rng, k.think_mean_us);
            self.schedule(t, Event::ObjStep(c));
            watched.insert(store);
        }
        for store in watched {
            let g = segment_for(store, self.cfg.stores);
            for (prefix, whole) in [("/".to_string(), true), (format!("/{g}/a"), false)] {
                let w = self.obj_watchers.len();
                let target = {
                    let drawn = DeviceId(1 + self.obj_rng.below(self.cfg.devices));
                    self.client_endpoint(drawn)
                };
                self.obj_watchers.push(Watcher {
                    store,
                    prefix,
                    whole,
                    target,
                    sub: 0,
                    live: false,
                    start: None,
                    last: 0,
                    heard_at: 0,
                    pending: None,
                    seen: BTreeSet::new(),
                    skipped: Vec::new(),
                });
                let t = self.now + 1 + self.obj_rng.below(WATCH_CHECK_US);
                self.schedule(t, Event::WatchCheck(w));
            }
        }
    }

    fn obj_think(&mut self, c: usize) {
        let t = self.now + exp(&mut self.obj_rng, self.obj_knobs.think_mean_us);
        self.schedule(t, Event::ObjStep(c));
    }

    /// A client's next operation, drawn with the seed's weights.
    pub(super) fn obj_step(&mut self, c: usize) {
        if self.obj_quiet || self.obj_clients[c].inflight.is_some() {
            return;
        }
        let k = self.obj_knobs.clone();
        let cl = &self.obj_clients[c];
        let store = cl.store;
        if cl.with_session && cl.session.is_none() {
            let ttl = Duration::from_millis(k.ttl_ms);
            return self.obj_request(
                Owner::Client(c),
                Request::OpenSession { store, ttl },
                ObjKind::Open,
            );
        }
        if cl.session.is_some() && self.obj_rng.chance(k.lapse_p) {
            let ttl = k.ttl_ms * 1_000;
            self.obj_clients[c].lapse_until = self.now + 2 * ttl;
            self.report.objects.sessions_lapsed += 1;
        }
        let cl = &self.obj_clients[c];
        let key = cl.keys[self.obj_rng.below(cl.keys.len() as u64) as usize].clone();
        if cl.upload.is_some() && self.obj_rng.chance(0.7) {
            return self.multipart_step(c);
        }
        let total: u32 = k.weights.iter().sum::<u32>().max(1);
        let mut pick = self.obj_rng.below(total as u64) as u32;
        let mut i = 0;
        while i + 1 < k.weights.len() && pick >= k.weights[i] {
            pick -= k.weights[i];
            i += 1;
        }
        match i {
            1 => self.obj_simple(
                c,
                ObjectRequest::Get { key: key.clone() },
                ObjKind::Get { key },
            ),
            2 => {
                let writer = self.writer(c);
                let req = ObjectRequest::Delete {
                    key: key.clone(),
                    writer,
                    cond: Conditions::default(),
                };
                self.obj_simple(c, req, ObjKind::Delete { key })
            }
            3 => {
                let cas = self.obj_clients[c].known.get(&key).copied().unwrap_or(0);
                self.put(c, key, Some(cas), None, false)
            }
            4 => {
                let fence = self.pick_fence(c);
                self.put(c, key, None, fence, false)
            }
            5 => {
                let eph = self.obj_clients[c].session.is_some();
                self.put(c, key, None, None, eph)
            }
            6 => self.multipart_step(c),
            7 => {
                let req = ObjectRequest::Head { key: key.clone() };
                self.obj_simple(c, req, ObjKind::Head { key })
            }
            _ if self.obj_rng.chance(0.02) => self.too_large(c, key),
            _ => self.put(c, key, None, None, false),
        }
    }

    fn writer(&mut self, c: usize) -> Writer {
        Writer {
            session: self.obj_clients[c].session.map(|s| s.0),
            // Unique and stable across retries: the request's own id.
            request_id: self.next_req + 1,
        }
    }

    fn obj_simple(&mut self, c: usize, req: ObjectRequest, kind: ObjKind) {
        let store = self.obj_clients[c].store;
        self.obj_request(Owner::Client(c), Request::Object { store, req }, kind);
    }

    /// A fencing token of a lock of the client's store: the newest known, or (as the
    /// knobs say) an older one.
    fn pick_fence(&mut self, c: usize) -> Option<(String, FencingToken)> {
        let store = self.obj_clients[c].store;
        let locks: BTreeSet<String> = (self.lock_clients.iter())
            .filter(|l| l.store == store)
            .flat_map(|l| l.names.iter().cloned())
            .collect();
        let with: Vec<(String, Vec<(FencingToken, bool)>)> = (locks.into_iter())
            .map(|l| {
                let t = self.objcheck.tokens(store, &l);
                (l, t)
            })
            .filter(|(_, t)| !t.is_empty())
            .collect();
        if with.is_empty() {
            return None;
        }
        let (lock, toks) = &with[self.obj_rng.below(with.len() as u64) as usize];
        let i = if toks.len() > 1 && self.obj_rng.chance(self.obj_knobs.stale_fence_p) {
            self.obj_rng.below(toks.len() as u64 - 1) as usize
        } else {
            toks.len() - 1
        };
        Some((lock.clone(), toks[i].0))
    }

    /// A put; `cas`: compare-and-set on this revision (0: the key absent, asked for
    /// with `if_absent` or `if_revision: 0`).
    fn put(
        &mut self,
        c: usize,
        key: String,
        cas: Option<u64>,
        fence: Option<(String, FencingToken)>,
        ephemeral: bool,
    ) {
        let len = self.obj_rng.below(self.obj_knobs.put_max as u64 + 1) as usize;
        let data = content(self.obj_rng.next_u64(), len);
        let if_absent = cas == Some(0) && self.obj_rng.chance(0.5);
        let cond = Conditions {
            if_absent,
            if_revision: cas.filter(|_| !if_absent),
            fence: fence.clone().map(|(lock, token)| Fence { lock, token }),
        };
        let kind = ObjKind::Put {
            key: key.clone(),
            content: sum(&data),
            cas: cas.map(|r| Some(r).filter(|r| *r > 0)),
            fence,
            ephemeral,
        };
        let writer = self.writer(c);
        let req = ObjectRequest::Put {
            key,
            data,
            writer,
            cond,
            ephemeral,
        };
        self.obj_simple(c, req, kind)
    }

    fn too_large(&mut self, c: usize, key: String) {
        let len = crate::objects::MAX_OBJECT_SIZE as usize + 1 + self.obj_rng.below(64) as usize;
        let data = content(self.obj_rng.next_u64(), len);
        let writer = self.writer(c);
        let req = ObjectRequest::Put {
            key,
            data,
            writer,
            cond: Conditions::default(),
            ephemeral: false,
        };
        self.obj_simple(c, req, ObjKind::TooLarge)
    }

    /// A step of a multipart upload: initiate one, upload a part (in any order, some
    /// again), complete with a subset of the stored parts, or abort.
    fn multipart_step(&mut self, c: usize) {
        let cl = &self.obj_clients[c];
        let Some(u) = cl.upload.clone() else {
            let key = cl.keys[self.obj_rng.below(cl.keys.len() as u64) as usize].clone();
            let writer = self.writer(c);
            let req = ObjectRequest::MultipartInitiate {
                key: key.clone(),
                writer,
            };
            return self.obj_simple(c, req, ObjKind::Initiate { key });
        };
        let r = &mut self.obj_rng;
        if r.chance(0.05) {
            let req = ObjectRequest::MultipartAbort {
                key: u.key.clone(),
                upload: u.id,
            };
            return self.obj_simple(c, req, ObjKind::Abort);
        }
        let missing: Vec<u32> = (1..=u.parts).filter(|p| !u.stored.contains(p)).collect();
        let complete = !u.stored.is_empty() && (missing.is_empty() || r.chance(0.2));
        if complete && !r.chance(0.15) {
            let mut chosen: Vec<u32> = (u.stored.iter().copied())
                .filter(|_| r.chance(0.7))
                .collect();
            if chosen.is_empty() {
                chosen.push(*u.stored.iter().next().expect("stored"));
            }
            let mut all = Vec::new();
            for p in &chosen {
                all.extend_from_slice(&part_data(u.seed, *p));
            }
            let writer = self.writer(c);
            let req = ObjectRequest::MultipartComplete {
                key: u.key.clone(),
                upload: u.id,
                parts: chosen,
                writer,
                cond: Conditions::default(),
            };
            let kind = ObjKind::Complete {
                key: u.key.clone(),
                content: sum(&all),
            };
            return self.obj_simple(c, req, kind);
        }
        // A missing part in random order, or one uploaded again.
        let part = if missing.is_empty() || (!u.stored.is_empty() && r.chance(0.15)) {
            let s: Vec<u32> = u.stored.iter().copied().collect();
            if s.is_empty() {
                1
            } else {
                self.report.objects.parts_again += 1;
                s[self.obj_rng.below(s.len() as u64) as usize]
            }
        } else {
            missing[self.obj_rng.below(missing.len() as u64) as usize]
        };
        let req = ObjectRequest::MultipartPart {
            key: u.key.clone(),
            upload: u.id,
            part,
            data: part_data(u.seed, part),
        };
        self.obj_simple(c, req, ObjKind::Part { part })
    }

    fn obj_request(&mut self, owner: Owner, req: Request, kind: ObjKind) {
        self.next_req += 1;
        let id = self.next_req;
        match owner {
            Owner::Client(c) if matches!(kind, ObjKind::KeepAlive) => {
                self.obj_clients[c].keepalive = Some(id)
            }
            Owner::Client(c) => self.obj_clients[c].inflight = Some(id),
            Owner::Watcher(w) => self.obj_watchers[w].pending = Some(id),
        }
        let store = req.store();
        self.obj_reqs.insert(
            id,
            ObjReq {
                owner,
                store,
                req,
                kind,
                attempt: 0,
                first_sent: self.now,
            },
        );
        self.obj_send(id);
    }

    fn obj_target(&self, owner: Owner) -> DeviceId {
        match owner {
            Owner::Client(c) => self.obj_clients[c].target,
            Owner::Watcher(w) => self.obj_watchers[w].target,
        }
    }

    fn obj_retarget(&mut self, owner: Owner, hint: Option<DeviceId>) {
        let to = match hint {
            Some(h) if self.nodes.contains_key(&h) => h,
            _ => {
                let drawn = DeviceId(1 + self.obj_rng.below(self.cfg.devices));
                self.client_endpoint(drawn)
            }
        };
        match owner {
            Owner::Client(c) => self.obj_clients[c].target = to,
            Owner::Watcher(w) => self.obj_watchers[w].target = to,
        }
    }

    fn obj_send(&mut self, id: u64) {
        let Some(r) = self.obj_reqs.get_mut(&id) else {
            return;
        };
        r.attempt += 1;
        let (attempt, owner) = (r.attempt, r.owner);
        let to = self.obj_target(owner);
        let boot = self.nodes[&to].boot;
        let lat = self.knobs.latency_min_us;
        self.schedule(self.now + lat, Event::ObjArrive { req: id, to, boot });
        self.schedule(
            self.now + CLIENT_TIMEOUT_US,
            Event::ObjTimeout { req: id, attempt },
        );
    }

    /// An object request reaches a device.
    pub(super) fn obj_arrive(&mut self, id: u64, to: DeviceId, boot: u64) {
        let node = &self.nodes[&to];
        if node.boot != boot || node.device.is_none() {
            return;
        }
        let Some(r) = self.obj_reqs.get(&id) else {
            return;
        };
        let client = match r.owner {
            Owner::Client(c) => ClientId(OBJ_CLIENT_BASE + c as u64),
            Owner::Watcher(w) => ClientId(OBJ_WATCH_BASE + w as u64),
        };
        let req = r.req.clone();
        self.trace(|| format!("object {client:?} -> {to} req {id} {}", brief(&req)));
        self.input(
            to,
            tenure_core::Input::Request {
                client,
                req_id: id,
                req,
            },
        );
    }

    /// No answer in time: retry elsewhere with the same request.
    pub(super) fn obj_timeout(&mut self, id: u64, attempt: u32) {
        let Some(r) = self.obj_reqs.get(&id) else {
            return;
        };
        if r.attempt != attempt {
            return;
        }
        let owner = r.owner;
        self.obj_retarget(owner, None);
        self.obj_retry(id);
    }

    fn obj_retry(&mut self, id: u64) {
        let Some(r) = self.obj_reqs.get(&id) else {
            return;
        };
        if r.attempt >= OBJ_ATTEMPTS_MAX {
            let r = self.obj_reqs.remove(&id).expect("present");
            self.report.objects.gave_up += 1;
            return self.obj_done(id, r, None, None);
        }
        self.obj_send(id);
    }

    /// Whether a reply is for an object request.
    pub(super) fn is_obj_req(&self, id: u64) -> bool {
        self.obj_reqs.contains_key(&id)
    }

    /// The store of an object request in flight.
    pub(super) fn obj_req_store(&self, id: u64) -> Option<StoreId> {
        self.obj_reqs.get(&id).map(|r| r.store)
    }

    /// The store a watcher watches.
    pub(super) fn watch_store(&self, client: ClientId) -> Option<StoreId> {
        let w = client.0.checked_sub(OBJ_WATCH_BASE)?;
        self.obj_watchers.get(w as usize).map(|w| w.store)
    }

    /// An answer from `from` to an object request.
    pub(super) fn obj_reply(
        &mut self,
        from: DeviceId,
        id: u64,
        result: Result<Response, ClientError>,
    ) {
        let Some(r) = self.obj_reqs.get(&id) else {
            return;
        };
        let owner = r.owner;
        let attempt = r.attempt;
        match result {
            Err(ClientError::NotManager { hint: Some(h) }) if h != from => {
                self.obj_retarget(owner, Some(h));
                self.obj_retry(id)
            }
            // No manager known here, or none available: ask another device a little
            // later (the store may be changing managers).
            Err(ClientError::NotManager { .. } | ClientError::Unavailable { .. }) => {
                let backoff = OBJ_BACKOFF_US / 2 + self.obj_rng.below(OBJ_BACKOFF_US);
                self.schedule(self.now + backoff, Event::ObjTimeout { req: id, attempt });
            }
            result => {
                let r = self.obj_reqs.remove(&id).expect("present");
                self.obj_done(id, r, Some(from), Some(result));
            }
        }
    }

    /// Conclude a request (`result` none: the client gave up).
    fn obj_done(
        &mut self,
        id: u64,
        r: ObjReq,
        from: Option<DeviceId>,
        result: Option<Result<Response, ClientError>>,
    ) {
        let c = match r.owner {
            Owner::Watcher(w) => return self.watch_done(w, id, r, from, result),
            Owner::Client(c) => c,
        };
        let now = self.now;
        let store = r.store;
        let st = &mut self.report.objects;
        match (r.kind, result) {
            (ObjKind::Open, Some(Ok(Response::SessionOpened { session, ttl }))) => {
                self.obj_clients[c].session = Some((session, ttl));
                let ka = ttl.as_micros() as u64 / 3;
                self.schedule(now + ka, Event::ObjKeepAlive(c, session));
            }
            (ObjKind::KeepAlive, result) => {
                let cl = &mut self.obj_clients[c];
                cl.keepalive = None;
                let Some((s, ttl)) = cl.session else {
                    return;
                };
                match result {
                    Some(Err(ClientError::SessionExpired)) => cl.session = None,
                    Some(Ok(_)) => {
                        let ka = ttl.as_micros() as u64 / 3;
                        self.schedule(now + ka, Event::ObjKeepAlive(c, s));
                    }
                    _ => self.schedule(now + 50_000, Event::ObjKeepAlive(c, s)),
                }
                return;
            }
            (
                ObjKind::Put {
                    key,
                    content,
                    cas,
                    fence,
                    ephemeral,
                },
                result,
            ) => match result {
                Some(Ok(Response::ObjectWritten { revision, uuid })) => {
                    st.puts += 1;
                    st.multi_block += (content.1 > crate::objects::BLOCK_SIZE as u64) as u64;
                    st.ephemeral += ephemeral as u64;
                    self.objcheck.put_acked(
                        store,
                        &key,
                        revision,
                        uuid,
                        content,
                        now - super::START_US,
                    );
                    if let Some(expected) = cas {
                        self.report.objects.cas_wins += 1;
                        self.objcheck.cas_won(store, &key, expected, revision);
                    }
                    if let Some((lock, token)) = fence {
                        self.report.objects.fenced_landed += 1;
                        (self.objcheck).fenced_landed(
                            store,
                            &key,
                            &lock,
                            token,
                            r.first_sent - super::START_US,
                        );
                    }
                    self.obj_clients[c].known.insert(key, revision);
                }
                Some(Err(ClientError::Object(
                    ObjectError::Exists { revision: cur }
                    | ObjectError::RevisionMismatch { current: Some(cur) },
                ))) => {
                    st.cas_losses += 1;
                    self.obj_clients[c].known.insert(key, cur);
                }
                Some(Err(ClientError::Object(ObjectError::RevisionMismatch { current: None }))) => {
                    st.cas_losses += 1;
                    self.obj_clients[c].known.insert(key, 0);
                }
                Some(Err(ClientError::StaleToken { .. })) => st.fenced_refused += 1,
                Some(Err(ClientError::SessionExpired)) => self.obj_clients[c].session = None,
                _ => {}
            },
            (ObjKind::TooLarge, Some(result)) => match result {
                Err(ClientError::TooLarge { .. }) => st.too_large += 1,
                other => self
                    .objcheck
                    .violations
                    .push(ObjectViolation::TooLargeAccepted {
                        store,
                        answer: format!("{other:?}"),
                    }),
            },
            (ObjKind::Get { key }, Some(result)) => match result {
                Ok(Response::Object { meta, data }) => {
                    st.gets += 1;
                    let found = (meta.revision, meta.uuid, meta.checksum, meta.size);
                    (self.objcheck).read(
                        store,
                        &key,
                        r.first_sent - super::START_US,
                        Some(found),
                        Some(sum(&data)),
                    );
                    self.obj_clients[c].known.insert(key, meta.revision);
                }
                Err(ClientError::Object(ObjectError::NoSuchObject)) => {
                    st.get_missing += 1;
                    self.objcheck
                        .read(store, &key, r.first_sent - super::START_US, None, None);
                    self.obj_clients[c].known.insert(key, 0);
                }
                Err(ClientError::Object(ObjectError::DataUnavailable)) => st.get_unavailable += 1,
                _ => {}
            },
            (ObjKind::Head { key }, Some(result)) => match result {
                Ok(Response::ObjectMeta(meta)) => {
                    st.heads += 1;
                    let found = (meta.revision, meta.uuid, meta.checksum, meta.size);
                    (self.objcheck).read(
                        store,
                        &key,
                        r.first_sent - super::START_US,
                        Some(found),
                        None,
                    );
                    self.obj_clients[c].known.insert(key, meta.revision);
                }
                Err(ClientError::Object(ObjectError::NoSuchObject)) => {
                    st.get_missing += 1;
                    self.objcheck
                        .read(store, &key, r.first_sent - super::START_US, None, None);
                }
                _ => {}
            },
            (ObjKind::Delete { key }, Some(Ok(Response::ObjectDeleted { revision }))) => {
                st.deletes += 1;
                self.objcheck
                    .delete_acked(store, &key, revision, now - super::START_US);
                self.obj_clients[c].known.insert(key, 0);
            }
            (ObjKind::Initiate { key }, Some(Ok(Response::UploadStarted { upload }))) => {
                st.multipart_started += 1;
                let parts = 1 + self.obj_rng.below(4) as u32;
                let seed = self.obj_rng.next_u64();
                self.obj_clients[c].upload = Some(Upload {
                    key,
                    id: upload,
                    parts,
                    seed,
                    stored: BTreeSet::new(),
                });
            }
            (ObjKind::Part { part }, Some(result)) => match result {
                Ok(Response::PartStored { .. }) => {
                    st.parts += 1;
                    if let Some(u) = self.obj_clients[c].upload.as_mut() {
                        u.stored.insert(part);
                    }
                }
                Err(ClientError::Object(_)) => self.obj_clients[c].upload = None,
                _ => {}
            },
            (ObjKind::Complete { key, content }, Some(result)) => {
                self.obj_clients[c].upload = None;
                if let Ok(Response::ObjectWritten { revision, uuid }) = result {
                    st.puts += 1;
                    st.multi_block += (content.1 > crate::objects::BLOCK_SIZE as u64) as u64;
                    st.multipart_completed += 1;
                    self.objcheck.put_acked(
                        store,
                        &key,
                        revision,
                        uuid,
                        content,
                        now - super::START_US,
                    );
                    self.obj_clients[c].known.insert(key, revision);
                }
            }
            // A completion the client gave up on may have landed, with its parts: the
            // client forgets the upload rather than complete it again with others (the
            // upload's completion answers every later completion with its own result).
            (ObjKind::Complete { .. }, None) => self.obj_clients[c].upload = None,
            (ObjKind::Abort, Some(result)) => {
                self.obj_clients[c].upload = None;
                if let Ok(Response::UploadAborted) = result {
                    st.multipart_aborted += 1;
                }
            }
            _ => {}
        }
        if self.obj_clients[c].inflight == Some(id) {
            self.obj_clients[c].inflight = None;
        }
        self.obj_think(c);
    }

    pub(super) fn obj_keepalive_due(&mut self, c: usize, session: SessionId) {
        let cl = &self.obj_clients[c];
        if cl.keepalive.is_some() || cl.session.is_none_or(|s| s.0 != session) {
            return;
        }
        if cl.lapse_until > self.now {
            let at = cl.lapse_until;
            return self.schedule(at, Event::ObjKeepAlive(c, session));
        }
        let store = cl.store;
        let req = Request::KeepAlive { store, session };
        self.obj_request(Owner::Client(c), req, ObjKind::KeepAlive);
    }

    // ---- watchers -------------------------------------------------------------------

    /// Subscribe again, from the last revision seen (or from now, the first time).
    fn subscribe(&mut self, w: usize) {
        self.next_watch += 1;
        let sub = self.next_watch;
        let wa = &mut self.obj_watchers[w];
        if wa.start.is_some() {
            self.report.objects.watch_resumes += 1;
        }
        wa.sub = sub;
        wa.live = false;
        wa.heard_at = self.now;
        let after = wa.start.map(|_| wa.last);
        let (store, prefix) = (wa.store, wa.prefix.clone());
        let req = ObjectRequest::Watch {
            watch: sub,
            prefix,
            after,
        };
        let req = Request::Object { store, req };
        self.obj_request(Owner::Watcher(w), req, ObjKind::Watch { sub });
    }

    /// Re-read after `Compacted`: list the prefix, then watch from the list's revision.
    fn relist(&mut self, w: usize) {
        self.report.objects.watch_compacted += 1;
        let wa = &self.obj_watchers[w];
        let (store, prefix, sub) = (wa.store, wa.prefix.clone(), wa.sub);
        let req = Request::Object {
            store,
            req: ObjectRequest::List { prefix },
        };
        self.obj_request(Owner::Watcher(w), req, ObjKind::Relist { sub });
    }

    /// A watcher's periodic look at its subscription.
    pub(super) fn watch_check(&mut self, w: usize) {
        let wa = &self.obj_watchers[w];
        if wa.pending.is_none() && (!wa.live || self.now >= wa.heard_at + WATCH_QUIET_US) {
            self.obj_retarget(Owner::Watcher(w), None);
            self.subscribe(w);
        }
        self.schedule(self.now + WATCH_CHECK_US, Event::WatchCheck(w));
    }

    fn watch_done(
        &mut self,
        w: usize,
        id: u64,
        r: ObjReq,
        from: Option<DeviceId>,
        result: Option<Result<Response, ClientError>>,
    ) {
        if self.obj_watchers[w].pending == Some(id) {
            self.obj_watchers[w].pending = None;
        }
        let wa = &mut self.obj_watchers[w];
        match (r.kind, result) {
            // Only from the device the latest attempt went to: a client's stream to an
            // endpoint it gave up on is closed, and a late answer there never reaches it
            // (simulator seed 10677: a manager whose disk stalled answered two seconds
            // late and replayed revisions 13-17 after the watcher had 20 from another).
            (ObjKind::Watch { sub }, Some(Ok(Response::Watching { revision })))
                if sub == wa.sub && from.is_none_or(|d| d == wa.target) =>
            {
                wa.live = true;
                wa.heard_at = self.now;
                if wa.start.is_none() {
                    wa.start = Some(revision);
                    wa.last = revision;
                }
            }
            (
                ObjKind::Watch { sub },
                Some(Err(ClientError::Object(ObjectError::Compacted { .. }))),
            ) if sub == wa.sub => self.relist(w),
            (ObjKind::Relist { sub }, Some(Ok(Response::Objects { revision, .. })))
                if sub == wa.sub =>
            {
                if revision > wa.last {
                    wa.skipped.push((wa.last, revision));
                    wa.last = revision;
                }
                self.subscribe(w);
            }
            // Anything else: the periodic check subscribes again.
            _ => {}
        }
    }

    /// Changes for a watch, from device `d` (dropped unless the watcher's subscription is
    /// at `d`: its stream to any other device is closed).
    pub(super) fn obj_events(
        &mut self,
        d: DeviceId,
        client: ClientId,
        watch: u64,
        changes: Vec<Change>,
    ) {
        let Some(w) = client.0.checked_sub(OBJ_WATCH_BASE).map(|w| w as usize) else {
            return;
        };
        let Some(wa) = self.obj_watchers.get_mut(w) else {
            return;
        };
        if wa.sub != watch || wa.start.is_none() || wa.target != d {
            return;
        }
        wa.heard_at = self.now;
        self.report.objects.watch_events += changes.len() as u64;
        wa.seen.extend(changes.iter().map(|c| c.revision));
        let (store, whole, prefix) = (wa.store, wa.whole, wa.prefix.clone());
        self.objcheck
            .watch_events(store, w, &prefix, whole, &mut wa.last, &changes);
    }

    /// A watch ended at its manager: resume (where the redirect points), or re-read.
    pub(super) fn obj_watch_ended(&mut self, client: ClientId, watch: u64, reason: ClientError) {
        let Some(w) = client.0.checked_sub(OBJ_WATCH_BASE).map(|w| w as usize) else {
            return;
        };
        if self.obj_watchers.get(w).is_none_or(|wa| wa.sub != watch) {
            return;
        }
        self.obj_watchers[w].live = false;
        if self.obj_watchers[w].pending.is_some() {
            return;
        }
        match reason {
            ClientError::Object(ObjectError::Compacted { .. }) => self.relist(w),
            ClientError::NotManager { hint } => {
                self.obj_retarget(Owner::Watcher(w), hint);
                self.subscribe(w)
            }
            _ => {
                self.obj_retarget(Owner::Watcher(w), None);
                self.subscribe(w)
            }
        }
    }

    // ---- checker 3 hooks --------------------------------------------------------------

    /// A device sends a message: a collector's block deletion is checked against its
    /// own view of the store's active manifests.
    pub(super) fn obj_on_send(&mut self, d: DeviceId, msg: &Msg) {
        let Msg::Blocks(BlockMsg::Delete { store, ids, .. }) = msg else {
            return;
        };
        self.report.objects.blocks_deleted += ids.len() as u64;
        if !self.cfg.objects_watch_deletes {
            return;
        }
        let Some(t) = (self.nodes[&d].device.as_ref()).and_then(|dev| dev.managed_tables(*store))
        else {
            return;
        };
        let uploads: BTreeSet<Uuid> = ids.iter().map(|b| b.upload).collect();
        let blocks = ids.iter().copied().collect();
        let by = format!("the collector on {d}");
        (self.objcheck).blocks_deleted(
            *store,
            &uploads,
            &blocks,
            &t.objects,
            &by,
            self.since_start(),
        );
    }

    /// A chunk deleted blocks durably: checked against the store's working manager's
    /// active manifests.
    pub(super) fn obj_on_block_delete(
        &mut self,
        d: DeviceId,
        chunk: ChunkId,
        ids: &[tenure_core::objects::BlockId],
    ) {
        if !self.cfg.objects_watch_deletes {
            return;
        }
        let Some(store) = (self.nodes[&d].written.chunks.get(&chunk)).map(|r| r.store) else {
            return;
        };
        let Some((m, _)) = self.manager_of(store) else {
            return;
        };
        let Some(t) = (self.nodes[&m].device.as_ref()).and_then(|dev| dev.managed_tables(store))
        else {
            return;
        };
        let uploads: BTreeSet<Uuid> = ids.iter().map(|b| b.upload).collect();
        let blocks = ids.iter().copied().collect();
        let by = format!("{chunk} on {d}");
        (self.objcheck).blocks_deleted(
            store,
            &uploads,
            &blocks,
            &t.objects,
            &by,
            self.since_start(),
        );
    }

    /// Sampling: count manifests the managers have collected.
    pub(super) fn obj_sample(&mut self) {
        for n in self.nodes.values() {
            let Some(dev) = n.device.as_ref() else {
                continue;
            };
            for v in dev.manager_views() {
                let Some(t) = dev.managed_tables(v.store) else {
                    continue;
                };
                let t = &t.objects;
                for key in &t.attention {
                    for m in t.keys.get(key).into_iter().flat_map(|d| d.values()) {
                        if m.state == tenure_core::objects::ManifestState::Deleted {
                            self.obj_collected.insert((v.store, m.uuid));
                        }
                    }
                }
            }
        }
    }

    // ---- the end of a run ---------------------------------------------------------------

    /// The stores the object clients use.
    fn obj_stores(&self) -> BTreeSet<StoreId> {
        self.obj_clients.iter().map(|c| c.store).collect()
    }

    /// Whether every store's objects are quiet: no client waiting, nothing to collect,
    /// every chunk complete, every watcher caught up.
    fn objects_quiet(&self) -> bool {
        if self.obj_clients.iter().any(|c| c.inflight.is_some()) {
            return false;
        }
        self.obj_stores().into_iter().all(|store| {
            let Some((m, _)) = self.manager_of(store) else {
                return false;
            };
            let dev = self.nodes[&m].device.as_ref().expect("running");
            let Some(t) = dev.managed_tables(store) else {
                return false;
            };
            let t = &t.objects;
            t.attention.is_empty()
                && self
                    .serving(store, m)
                    .is_subset(&dev.complete_chunks(store))
                && (self.obj_watchers.iter())
                    .filter(|w| w.store == store)
                    .all(|w| w.pending.is_none() && watch_behind(w, t).is_none())
        })
    }

    /// After faults stopped and every store has a manager: stop the clients, wait until
    /// the objects are quiet (at most [`OBJ_SETTLE_US`]), then run the end-of-run checks.
    pub(super) fn settle_objects(&mut self) {
        if self.obj_clients.is_empty() {
            return;
        }
        self.obj_quiet = true;
        let start = self.now;
        let until = start + OBJ_SETTLE_US;
        let mut next_look = self.now;
        while !self.failed() && self.report.events <= super::EVENTS_MAX {
            if self.now >= next_look {
                if self.objects_quiet() {
                    break;
                }
                next_look = self.now + OBJ_SETTLE_CHECK_US;
            }
            if self
                .queue
                .first_key_value()
                .is_none_or(|((t, _), _)| *t > until)
            {
                break;
            }
            self.step();
        }
        self.report.objects.settle_us = self.now - start;
        if self.failed() {
            return;
        }
        self.trace(|| "objects settled: end-of-run checks".to_string());
        self.objects_final_checks();
    }

    fn objects_final_checks(&mut self) {
        for store in self.obj_stores() {
            let Some((m, _)) = self.manager_of(store) else {
                continue;
            };
            let dev = self.nodes[&m].device.as_ref().expect("running");
            let (Some(t), Some(v)) = (dev.managed_tables(store), dev.manager_view(store)) else {
                continue;
            };
            let table = t.objects.clone();
            let chunks: Vec<ChunkId> = v.metadata.chunks.iter().copied().collect();
            let complete = dev.complete_chunks(store);
            let serving = self.serving(store, m);
            self.objcheck.final_history(store, &table);
            self.objcheck.collected(store, &table);
            self.check_blocks(store, &table, &chunks, &complete, &serving);
            self.check_merges(store, &table, &chunks);
            for (w, wa) in self.obj_watchers.iter().enumerate() {
                if wa.store != store {
                    continue;
                }
                if let Some(current) = watch_behind(wa, &table) {
                    self.objcheck.violations.push(ObjectViolation::WatchBehind {
                        store,
                        watcher: w,
                        last: wa.last,
                        current,
                    });
                }
                if let Some(start) = wa.start {
                    let (prefix, last) = (wa.prefix.clone(), wa.last);
                    (self.objcheck).watch_complete(
                        store,
                        w,
                        &prefix,
                        start,
                        last,
                        &wa.seen,
                        &wa.skipped,
                        &table,
                    );
                }
            }
        }
        for (c, cl) in self.obj_clients.iter().enumerate() {
            if let Some(id) = cl.inflight {
                let why = (self.obj_reqs.get(&id))
                    .map(|r| format!("{:?} to {}", r.kind, cl.target))
                    .unwrap_or_default();
                (self.objcheck.violations).push(ObjectViolation::ClientStuck { client: c, why });
            }
        }
        self.report.objects.gc_manifests = self.obj_collected.len() as u64;
    }

    /// The chunks of `store`'s layout serving under its manager `m`: in the regular
    /// lease of the manager's epoch. (A chunk of the layout in a recovery lease is not
    /// in the epoch, so it repairs nothing until an epoch transition takes it back.)
    fn serving(&self, store: StoreId, m: DeviceId) -> BTreeSet<ChunkId> {
        let Some(v) = self.nodes[&m]
            .device
            .as_ref()
            .and_then(|d| d.manager_view(store))
        else {
            return BTreeSet::new();
        };
        (v.metadata.chunks.iter())
            .filter(|c| {
                (self.nodes.get(&c.device))
                    .and_then(|n| n.device.as_ref()?.chunk_view(**c))
                    .is_some_and(|cv| {
                        cv.state == tenure_core::layout::ChunkState::RegularLease
                            && cv.epoch == v.epoch
                    })
            })
            .copied()
            .collect()
    }

    /// Checker 2: every block of every active manifest on a quorum of the layout's
    /// chunks and on every complete chunk, with its checksum (durably: the simulated
    /// disks); repair has made every serving chunk complete (liveness).
    fn check_blocks(
        &mut self,
        store: StoreId,
        table: &tenure_core::objects::ObjectTable,
        chunks: &[ChunkId],
        complete: &BTreeSet<ChunkId>,
        serving: &BTreeSet<ChunkId>,
    ) {
        let mut incomplete = None;
        for (key, dict) in &table.keys {
            for m in dict.values() {
                if m.state != tenure_core::objects::ManifestState::Active {
                    continue;
                }
                for (id, info) in &m.blocks {
                    self.objcheck.counts.block_checks += 1;
                    let has = |c: &ChunkId| {
                        (self.nodes.get(&c.device))
                            .and_then(|n| n.disk.blocks.get(c))
                            .and_then(|b| b.get(id))
                            .is_some_and(|d| BlockInfo::of(d) == *info)
                    };
                    let holders = chunks.iter().filter(|c| has(c)).count();
                    let bad_complete = complete.iter().find(|c| !has(c));
                    let why = if 2 * holders <= chunks.len() {
                        Some(format!(
                            "block {} on {holders} of {} chunks",
                            id.index,
                            chunks.len()
                        ))
                    } else {
                        bad_complete
                            .map(|c| format!("block {} missing from complete {c}", id.index))
                    };
                    if let Some(why) = why {
                        self.objcheck.violations.push(ObjectViolation::BlockLost {
                            store,
                            key: key.clone(),
                            uuid: m.uuid,
                            why,
                        });
                        return;
                    }
                    if incomplete.is_none()
                        && let Some(c) = serving.iter().find(|c| !has(c))
                    {
                        incomplete = Some(format!("{c} lacks block {} of {key}", id.index));
                    }
                }
            }
        }
        if let Some(why) = incomplete {
            (self.objcheck.violations).push(ObjectViolation::RepairIncomplete { store, why });
        }
    }

    /// The merge laws on the copies of each upload's manifest the layout's chunks hold.
    fn check_merges(
        &mut self,
        store: StoreId,
        table: &tenure_core::objects::ObjectTable,
        chunks: &[ChunkId],
    ) {
        let recs: Vec<_> = (chunks.iter())
            .filter_map(|c| self.nodes.get(&c.device)?.disk.chunks.get(c))
            .map(|r| r.data.table.objects.clone())
            .collect();
        for (key, dict) in &table.keys {
            for (uuid, m) in dict {
                let mut copies = vec![m];
                copies.extend(recs.iter().filter_map(|t| t.keys.get(key)?.get(uuid)));
                self.objcheck.merge_laws(store, key, &copies);
            }
        }
    }
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

/// Lock hooks (checker 5): grants and acknowledged releases of the lock clients.
impl World {
    pub(super) fn obj_note_grant(
        &mut self,
        store: StoreId,
        name: &str,
        mode: LockMode,
        token: FencingToken,
    ) {
        self.objcheck
            .granted(store, name, token, mode, self.since_start());
    }

    pub(super) fn obj_note_release(&mut self, store: StoreId, name: &str, token: FencingToken) {
        self.objcheck
            .released(store, name, token, self.since_start());
    }
}
