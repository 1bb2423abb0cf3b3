//! A lock client's operations: creating the clients of a run, drawing each one's next
//! step (open, acquire, release, ask who holds, close), and its own faults (pauses past
//! its TTL, crashes).

use super::{Kind, LOCK_CLIENT_BASE, LockClient, names_for, nested_names_for};
use crate::lincheck::LockInput;
use crate::world::{Event, World, exp};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tenure_core::io::{Request, WaitSpec};
use tenure_core::lockctl::{LockMode, SessionId};
use tenure_core::{DeviceId, StoreId};

impl World {
    /// Create the lock clients of this run and start them.
    pub(in crate::world) fn start_lock_clients(&mut self) {
        let k = self.lock_knobs.clone();
        for c in 0..k.clients {
            let store = StoreId(self.lock_rng.below(k.stores_used as u64) as u32);
            let target = {
                let drawn = DeviceId(1 + self.lock_rng.below(self.cfg.devices));
                self.client_endpoint(drawn)
            };
            let pipeline = self
                .pipe_rng
                .chance(k.pipelined_p)
                .then_some(k.pipeline_max);
            // Every other client of a run with grouped sessions keeps its session in
            // another store than its names' (and does not pipeline: a stream is bound to
            // one store).
            let stores = self.cfg.stores;
            let home = (k.grouped && c % 2 == 1 && stores >= 2)
                .then(|| StoreId((store.0 + 1 + (c as u32 / 2) % (stores - 1)) % stores));
            let pipeline = pipeline.filter(|_| home.is_none());
            // A pipelining client needs as many names as it keeps requests in flight.
            let names = k.names_per_store.max(pipeline.unwrap_or(0));
            let names = if k.nested_names {
                nested_names_for(store, self.cfg.stores, names, &mut self.paths_rng)
            } else {
                names_for(store, self.cfg.stores, names)
            };
            self.lock_clients.push(LockClient {
                store,
                home,
                child: None,
                adopted: false,
                names,
                target,
                incarnation: 0,
                session: None,
                held: BTreeMap::new(),
                tainted: BTreeSet::new(),
                inflight: BTreeSet::new(),
                pipeline,
                burst_at: 0,
                keepalive: None,
                paused_until: None,
                down: false,
                next_request_id: 0,
                answered: false,
            });
            let t = self.now + exp(&mut self.lock_rng, k.think_mean_us);
            self.schedule(t, Event::LockStep(c));
        }
    }

    /// Schedule client `c`'s next step after a drawn think time of mean `mean` (µs).
    pub(super) fn think(&mut self, c: usize, mean: u64) {
        let t = self.now + exp(&mut self.lock_rng, mean);
        self.schedule(t, Event::LockStep(c));
    }

    /// A client's next action.
    pub(in crate::world) fn lock_step(&mut self, c: usize) {
        let cl = &self.lock_clients[c];
        if cl.down || cl.paused_until.is_some() {
            return;
        }
        if let Some(depth) = cl.pipeline {
            return self.pipe_step(c, depth);
        }
        if !cl.inflight.is_empty() || self.client_fault(c) {
            return;
        }
        let k = self.lock_knobs.clone();
        let cl = &self.lock_clients[c];
        let Some(session) = cl.session.clone() else {
            return self.open(c);
        };
        if cl.home.is_some() && cl.child.is_none() {
            return self.attach(c, session.id);
        }
        let held: Vec<String> = cl.held.keys().cloned().collect();
        let free: Vec<String> = cl
            .names
            .iter()
            .filter(|n| !cl.held.contains_key(*n) && !cl.tainted.contains(*n))
            .cloned()
            .collect();
        let r = &mut self.lock_rng;
        if !held.is_empty() && (free.is_empty() || r.chance(0.6)) {
            let name = held[r.below(held.len() as u64) as usize].clone();
            return self.release(c, name);
        }
        if r.chance(k.holders_p) || free.is_empty() {
            let names = &self.lock_clients[c].names;
            let name = names[self.lock_rng.below(names.len() as u64) as usize].clone();
            return self.holders(c, name);
        }
        if r.chance(k.close_p) {
            return self.close(c, session.id);
        }
        let name = free[r.below(free.len() as u64) as usize].clone();
        self.acquire(c, session.id, name);
    }

    /// In the safety phase, the client may crash or pause (up to three TTLs, so past its
    /// deadline) instead of acting; returns whether it did.
    pub(in crate::world) fn client_fault(&mut self, c: usize) -> bool {
        let k = &self.lock_knobs;
        let (crash_p, pause_p, ttl_ms) = (k.crash_p, k.pause_p, k.ttl_ms);
        if self.faults_on && self.lock_rng.chance(crash_p) {
            self.client_crash(c);
            return true;
        }
        if self.faults_on && self.lock_rng.chance(pause_p) {
            let ttl = Duration::from_millis(ttl_ms).as_micros() as u64;
            let len = 1 + self.lock_rng.below(3 * ttl);
            self.lock_clients[c].paused_until = Some(self.now + len);
            self.report.locks.client_pauses += 1;
            self.trace(|| format!("lock client {c} pauses for {len}us"));
            self.schedule(self.now + len, Event::ClientResume(c));
            return true;
        }
        false
    }

    pub(in crate::world) fn open(&mut self, c: usize) {
        let ttl = Duration::from_millis(self.lock_knobs.ttl_ms);
        let store = self.lock_clients[c].session_store();
        self.lock_request(c, Request::OpenSession { store, ttl }, Kind::Open, None);
    }

    /// A client whose session is in another store than its names makes the session's
    /// child there with a first request under it: a release of a name under its first
    /// one (same store) that no client ever locks. Retried late, after the client was
    /// granted its names, it ends nothing; a release of a name the client uses would end
    /// that hold behind its back (sim seed 298 at a 1.5 s lease).
    fn attach(&mut self, c: usize, session: SessionId) {
        let cl = &mut self.lock_clients[c];
        cl.next_request_id += 1;
        let req = cl.wrap(Request::Release {
            store: cl.store,
            session,
            request_id: cl.next_request_id,
            name: format!("{}/attach-{c}", cl.names[0]),
        });
        self.lock_request(c, req, Kind::Attach, None);
    }

    /// Close the session: the client stops using its locks when it sends the close.
    pub(in crate::world) fn close(&mut self, c: usize, session: SessionId) {
        let cl = &mut self.lock_clients[c];
        let store = cl.session_store();
        let ck = cl.ck(session);
        let held: Vec<String> = std::mem::take(&mut cl.held).into_keys().collect();
        for name in held {
            self.locks.unhold(&name, ck, self.now);
        }
        let req = Request::CloseSession { store, session };
        self.lock_request(c, req, Kind::Close, None);
    }

    pub(in crate::world) fn holders(&mut self, c: usize, name: String) {
        let store = self.lock_clients[c].store;
        let op = self.locks.invoke(
            LOCK_CLIENT_BASE + c as u64,
            LockInput::Holders { name: name.clone() },
            self.now,
        );
        let req = Request::Holders {
            store,
            name: name.clone(),
        };
        self.lock_request(c, req, Kind::Holders { name }, Some(op));
    }

    /// Acquire `name`: shared or exclusive, try or wait with a timeout, as the knobs say.
    pub(in crate::world) fn acquire(&mut self, c: usize, session: SessionId, name: String) {
        let k = &self.lock_knobs;
        let (shared_p, try_p) = (k.shared_p, k.try_p);
        let r = &mut self.lock_rng;
        let mode = if r.chance(shared_p) {
            LockMode::Shared
        } else {
            LockMode::Exclusive
        };
        let wait = if r.chance(try_p) {
            WaitSpec::Try
        } else {
            WaitSpec::Timeout(Duration::from_micros(50_000 + r.below(2_000_000)))
        };
        // Some holds ask for no lock-delay: mutual exclusion must then rest on the
        // clients' conservative deadlines alone.
        let lock_delay = r.chance(0.25).then_some(Duration::ZERO);
        let cl = &mut self.lock_clients[c];
        cl.next_request_id += 1;
        let request_id = cl.next_request_id;
        let store = cl.store;
        let op = self.locks.invoke(
            LOCK_CLIENT_BASE + c as u64,
            LockInput::Acquire {
                name: name.clone(),
                session: cl.ck(session),
                mode,
            },
            self.now,
        );
        let req = Request::Acquire {
            store,
            session,
            request_id,
            name: name.clone(),
            mode,
            wait,
            lock_delay,
        };
        let req = self.lock_clients[c].wrap(req);
        self.lock_request(c, req, Kind::Acquire { name, mode }, Some(op));
    }

    pub(in crate::world) fn release(&mut self, c: usize, name: String) {
        let cl = &mut self.lock_clients[c];
        let session = cl.session.as_ref().expect("releases need a session").id;
        let (_, token) = cl.held.remove(&name).expect("held");
        let store = cl.store;
        cl.next_request_id += 1;
        let request_id = cl.next_request_id;
        let ck = cl.ck(session);
        // The client stops using the lock when it sends the release.
        self.locks.unhold(&name, ck, self.now);
        let op = self.locks.invoke(
            LOCK_CLIENT_BASE + c as u64,
            LockInput::Release {
                name: name.clone(),
                session: ck,
            },
            self.now,
        );
        // Fenced by the hold's token, as every client library releases (DESIGN §4,
        // "Idempotent retries").
        let req = self.lock_clients[c].wrap(Request::ReleaseFenced {
            store,
            session,
            request_id,
            name: name.clone(),
            token,
        });
        self.lock_request(c, req, Kind::Release { name, token }, Some(op));
    }
}
