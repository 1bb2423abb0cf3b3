//! Lock clients' sessions: keep-alives, the client's own deadline, dropping a session,
//! crashes and resumes; the liveness phase's healing and its check that every client
//! was answered; and the takeover of a store's sessions by a new manager.

use super::Kind;
use crate::world::{Event, World};
use std::time::Duration;
use tenure_core::io::Request;
use tenure_core::lockctl::SessionId;
use tenure_core::{DeviceId, StoreId};

impl World {
    /// The client forgets its session: its locks stop counting at its deadline (or now,
    /// if that is earlier).
    pub(super) fn drop_session(&mut self, c: usize, now: u64) {
        let cl = &mut self.lock_clients[c];
        let Some(s) = cl.session.take() else {
            return;
        };
        let ck = cl.ck(s.id);
        cl.child = None;
        cl.adopted = false;
        let end = now.min(s.deadline);
        let held: Vec<String> = std::mem::take(&mut cl.held).into_keys().collect();
        cl.tainted.clear();
        for name in held {
            self.locks.unhold(&name, ck, end);
        }
    }

    /// The client's deadline may have passed.
    pub(in crate::world) fn client_deadline_event(&mut self, c: usize, session: SessionId) {
        let cl = &self.lock_clients[c];
        if let Some(s) = cl.session.as_ref().filter(|s| s.id == session)
            && s.deadline <= self.now
        {
            self.report.locks.deadlines_passed += 1;
            self.drop_session(c, self.now);
        }
    }

    pub(in crate::world) fn keepalive_due(&mut self, c: usize, session: SessionId) {
        let cl = &self.lock_clients[c];
        if cl.down
            || cl.paused_until.is_some()
            || cl.keepalive.is_some()
            || cl.session.as_ref().is_none_or(|s| s.id != session)
        {
            return;
        }
        let store = cl.session_store();
        self.lock_request(
            c,
            Request::KeepAlive { store, session },
            Kind::KeepAlive,
            None,
        );
    }

    /// Client `c` crashes: it forgets its session and requests, and restarts later.
    pub(super) fn client_crash(&mut self, c: usize) {
        self.report.locks.client_crashes += 1;
        self.trace(|| format!("lock client {c} crashes"));
        self.drop_session(c, self.now);
        let cl = &mut self.lock_clients[c];
        cl.incarnation += 1;
        cl.inflight.clear();
        cl.keepalive = None;
        cl.down = true;
        let ttl = Duration::from_millis(self.lock_knobs.ttl_ms).as_micros() as u64;
        let delay = 1 + self.lock_rng.below(2 * ttl);
        self.schedule(self.now + delay, Event::ClientResume(c));
    }

    /// A paused client resumes, a crashed one restarts (without a session).
    pub(in crate::world) fn client_resume(&mut self, c: usize) {
        let cl = &mut self.lock_clients[c];
        if cl.paused_until.is_some_and(|t| t > self.now) {
            return;
        }
        cl.paused_until = None;
        cl.down = false;
        if let Some(s) = cl.session.as_ref().map(|s| s.id) {
            self.keepalive_due(c, s);
            // Its deadline may have passed while it slept.
            self.client_deadline_event(c, s);
        }
        let cl = &self.lock_clients[c];
        if cl.inflight.is_empty() || cl.pipeline.is_some() {
            self.lock_step(c);
        }
    }

    /// The liveness phase begins: clients stop failing and come back.
    pub(in crate::world) fn lock_clients_heal(&mut self) {
        for c in 0..self.lock_clients.len() {
            let cl = &mut self.lock_clients[c];
            cl.answered = false;
            if cl.down || cl.paused_until.is_some() {
                cl.paused_until = Some(self.now);
                self.client_resume(c);
            }
        }
    }

    /// Liveness: every client got an answer from a manager after faults stopped.
    pub(in crate::world) fn lock_clients_stuck(&self) -> Vec<(u64, String)> {
        self.lock_clients
            .iter()
            .enumerate()
            .filter(|(_, cl)| !cl.answered)
            .map(|(c, cl)| {
                (
                    c as u64,
                    format!(
                        "store {} target {} session {:?} in flight {:?}",
                        cl.store,
                        cl.target,
                        cl.session.as_ref().map(|s| s.id),
                        cl.inflight
                            .iter()
                            .filter_map(|m| self.lock_reqs.get(m))
                            .map(|r| &r.kind)
                            .collect::<Vec<_>>()
                    ),
                )
            })
            .collect()
    }

    /// A manager took over `store`: it must not have lost an acknowledged lock operation.
    pub(in crate::world) fn lock_takeover(&mut self, d: DeviceId, store: StoreId) {
        let Some(tables) = self.nodes[&d]
            .device
            .as_ref()
            .and_then(|dev| dev.managed_tables(store))
        else {
            return;
        };
        let stores = self.cfg.stores;
        let now = self.now;
        let locks = tables.locks.clone();
        self.locks.takeover(
            store,
            d,
            |name| Some(tenure_core::config::store_of(name, stores)),
            |name| locks.holders(name).unwrap_or_default(),
            now,
        );
    }
}
