//! The object clients' workload: creating the clients and watchers of a run, and
//! drawing each client's next operation (puts, conditional and fenced puts, gets, heads,
//! deletes, oversized puts, multipart uploads).

use super::{
    ObjClient, ObjKind, Owner, WATCH_CHECK_US, Watcher, content, part_data, segment_for, sum,
};
use crate::objects::sim_settings;
use crate::world::{Event, World, exp};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tenure_core::io::{ObjectRequest, Request, Writer};
use tenure_core::lockctl::FencingToken;
use tenure_core::objects::{Conditions, Fence, ObjectSettings};
use tenure_core::{DeviceId, StoreId};

impl World {
    /// The objects settings every device of this run gets.
    pub(in crate::world) fn object_settings(history: u32, inline_max: u32) -> ObjectSettings {
        sim_settings(history, inline_max)
    }

    /// Create the object clients and watchers of this run and start them.
    pub(in crate::world) fn start_object_clients(&mut self) {
        let k = self.obj.knobs.clone();
        let stores_used = self.lock_knobs.stores_used as u64;
        let mut watched = BTreeSet::new();
        for c in 0..k.clients {
            let store = StoreId(self.obj.rng.below(stores_used) as u32);
            let g = segment_for(store, self.cfg.stores);
            let keys = (0..k.keys_per_dir)
                .flat_map(|j| [format!("/{g}/a/o{j}"), format!("/{g}/b/o{j}")])
                .collect();
            let target = {
                let drawn = DeviceId(1 + self.obj.rng.below(self.cfg.devices));
                self.client_endpoint(drawn)
            };
            let with_session = self.obj.rng.chance(k.session_p);
            self.obj.clients.push(ObjClient {
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
            let t = self.now + exp(&mut self.obj.rng, k.think_mean_us);
            self.schedule(t, Event::ObjStep(c));
            watched.insert(store);
        }
        for store in watched {
            let g = segment_for(store, self.cfg.stores);
            for (prefix, whole) in [("/".to_string(), true), (format!("/{g}/a"), false)] {
                let w = self.obj.watchers.len();
                let target = {
                    let drawn = DeviceId(1 + self.obj.rng.below(self.cfg.devices));
                    self.client_endpoint(drawn)
                };
                self.obj.watchers.push(Watcher {
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
                let t = self.now + 1 + self.obj.rng.below(WATCH_CHECK_US);
                self.schedule(t, Event::WatchCheck(w));
            }
        }
    }

    /// Schedule client `c`'s next operation after a drawn think time.
    pub(super) fn obj_think(&mut self, c: usize) {
        let t = self.now + exp(&mut self.obj.rng, self.obj.knobs.think_mean_us);
        self.schedule(t, Event::ObjStep(c));
    }

    /// A client's next operation, drawn with the seed's weights.
    pub(in crate::world) fn obj_step(&mut self, c: usize) {
        if self.obj_quiet || self.obj.clients[c].inflight.is_some() {
            return;
        }
        let k = self.obj.knobs.clone();
        let cl = &self.obj.clients[c];
        let store = cl.store;
        if cl.with_session && cl.session.is_none() {
            let ttl = Duration::from_millis(k.ttl_ms);
            return self.obj_request(
                Owner::Client(c),
                Request::OpenSession { store, ttl },
                ObjKind::Open,
            );
        }
        if cl.session.is_some() && self.obj.rng.chance(k.lapse_p) {
            let ttl = k.ttl_ms * 1_000;
            self.obj.clients[c].lapse_until = self.now + 2 * ttl;
            self.report.objects.sessions_lapsed += 1;
        }
        let cl = &self.obj.clients[c];
        let key = cl.keys[self.obj.rng.below(cl.keys.len() as u64) as usize].clone();
        if cl.upload.is_some() && self.obj.rng.chance(0.7) {
            return self.multipart_step(c);
        }
        let total: u32 = k.weights.iter().sum::<u32>().max(1);
        let mut pick = self.obj.rng.below(total as u64) as u32;
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
                let cas = self.obj.clients[c].known.get(&key).copied().unwrap_or(0);
                self.put(c, key, Some(cas), None, false)
            }
            4 => {
                let fence = self.pick_fence(c);
                self.put(c, key, None, fence, false)
            }
            5 => {
                let eph = self.obj.clients[c].session.is_some();
                self.put(c, key, None, None, eph)
            }
            6 => self.multipart_step(c),
            7 => {
                let req = ObjectRequest::Head { key: key.clone() };
                self.obj_simple(c, req, ObjKind::Head { key })
            }
            _ if self.obj.rng.chance(0.02) => self.too_large(c, key),
            _ => self.put(c, key, None, None, false),
        }
    }

    /// The writer fields of client `c`'s next mutation (its session, if any).
    fn writer(&mut self, c: usize) -> Writer {
        Writer {
            session: self.obj.clients[c].session.map(|s| s.0),
            // Unique and stable across retries: the request's own id.
            request_id: self.next_req + 1,
        }
    }

    /// Send a request of client `c` to its store.
    fn obj_simple(&mut self, c: usize, req: ObjectRequest, kind: ObjKind) {
        let store = self.obj.clients[c].store;
        self.obj_request(Owner::Client(c), Request::Object { store, req }, kind);
    }

    /// A fencing token of a lock of the client's store: the newest known, or (as the
    /// knobs say) an older one.
    fn pick_fence(&mut self, c: usize) -> Option<(String, FencingToken)> {
        let store = self.obj.clients[c].store;
        let locks: BTreeSet<String> = (self.lock_clients.iter())
            .filter(|l| l.store == store)
            .flat_map(|l| l.names.iter().cloned())
            .collect();
        let with: Vec<(String, Vec<(FencingToken, bool)>)> = (locks.into_iter())
            .map(|l| {
                let t = self.obj.check.tokens(store, &l);
                (l, t)
            })
            .filter(|(_, t)| !t.is_empty())
            .collect();
        if with.is_empty() {
            return None;
        }
        let (lock, toks) = &with[self.obj.rng.below(with.len() as u64) as usize];
        let i = if toks.len() > 1 && self.obj.rng.chance(self.obj.knobs.stale_fence_p) {
            self.obj.rng.below(toks.len() as u64 - 1) as usize
        } else {
            toks.len() - 1
        };
        Some((lock.clone(), toks[i].0))
    }

    /// A put; `cas`: compare-and-set on this revision (0: the key absent, asked for
    /// with `if_absent` or `if_revision: 0`).
    pub(super) fn put(
        &mut self,
        c: usize,
        key: String,
        cas: Option<u64>,
        fence: Option<(String, FencingToken)>,
        ephemeral: bool,
    ) {
        let len = self.obj.rng.below(self.obj.knobs.put_max as u64 + 1) as usize;
        let data = content(self.obj.rng.next_u64(), len);
        let if_absent = cas == Some(0) && self.obj.rng.chance(0.5);
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

    /// A put of one byte or more over the object size limit (it must be refused).
    pub(super) fn too_large(&mut self, c: usize, key: String) {
        let len = crate::objects::MAX_OBJECT_SIZE as usize + 1 + self.obj.rng.below(64) as usize;
        let data = content(self.obj.rng.next_u64(), len);
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
        let cl = &self.obj.clients[c];
        let Some(u) = cl.upload.clone() else {
            let key = cl.keys[self.obj.rng.below(cl.keys.len() as u64) as usize].clone();
            let writer = self.writer(c);
            let req = ObjectRequest::MultipartInitiate {
                key: key.clone(),
                writer,
            };
            return self.obj_simple(c, req, ObjKind::Initiate { key });
        };
        let r = &mut self.obj.rng;
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
                s[self.obj.rng.below(s.len() as u64) as usize]
            }
        } else {
            missing[self.obj.rng.below(missing.len() as u64) as usize]
        };
        let req = ObjectRequest::MultipartPart {
            key: u.key.clone(),
            upload: u.id,
            part,
            data: part_data(u.seed, part),
        };
        self.obj_simple(c, req, ObjKind::Part { part })
    }
}
