//! Object requests on their way: sending to the client's target, arrival at a device,
//! timeouts and retries (the same request id), redirects, and the routing of answers;
//! and a session's keep-alives.

use super::{
    OBJ_ATTEMPTS_MAX, OBJ_BACKOFF_US, OBJ_CLIENT_BASE, OBJ_WATCH_BASE, ObjKind, ObjReq, Owner,
    brief,
};
use crate::world::{CLIENT_TIMEOUT_US, Event, World};
use tenure_core::io::{ClientError, Request, Response};
use tenure_core::lockctl::SessionId;
use tenure_core::{ClientId, DeviceId, StoreId};

impl World {
    /// Start a request for `owner` and send its first attempt.
    pub(super) fn obj_request(&mut self, owner: Owner, req: Request, kind: ObjKind) {
        self.next_req += 1;
        let id = self.next_req;
        match owner {
            Owner::Client(c) if matches!(kind, ObjKind::KeepAlive) => {
                self.obj.clients[c].keepalive = Some(id)
            }
            Owner::Client(c) => self.obj.clients[c].inflight = Some(id),
            Owner::Watcher(w) => self.obj.watchers[w].pending = Some(id),
        }
        let store = req.store();
        self.obj.reqs.insert(
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

    /// The device `owner` sends to.
    fn obj_target(&self, owner: Owner) -> DeviceId {
        match owner {
            Owner::Client(c) => self.obj.clients[c].target,
            Owner::Watcher(w) => self.obj.watchers[w].target,
        }
    }

    /// Point `owner` at the hinted device, else at a random one.
    pub(super) fn obj_retarget(&mut self, owner: Owner, hint: Option<DeviceId>) {
        let to = match hint {
            Some(h) if self.nodes.contains_key(&h) => h,
            _ => {
                let drawn = DeviceId(1 + self.obj.rng.below(self.cfg.devices));
                self.client_endpoint(drawn)
            }
        };
        match owner {
            Owner::Client(c) => self.obj.clients[c].target = to,
            Owner::Watcher(w) => self.obj.watchers[w].target = to,
        }
    }

    /// Send (or resend) request `id` to its owner's target, with a client-side timeout.
    fn obj_send(&mut self, id: u64) {
        let Some(r) = self.obj.reqs.get_mut(&id) else {
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
    pub(in crate::world) fn obj_arrive(&mut self, id: u64, to: DeviceId, boot: u64) {
        let node = &self.nodes[&to];
        if node.boot != boot || node.device.is_none() {
            return;
        }
        let Some(r) = self.obj.reqs.get(&id) else {
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
    pub(in crate::world) fn obj_timeout(&mut self, id: u64, attempt: u32) {
        let Some(r) = self.obj.reqs.get(&id) else {
            return;
        };
        if r.attempt != attempt {
            return;
        }
        let owner = r.owner;
        self.obj_retarget(owner, None);
        self.obj_retry(id);
    }

    /// Send request `id` again, or give up after [`OBJ_ATTEMPTS_MAX`] attempts.
    fn obj_retry(&mut self, id: u64) {
        let Some(r) = self.obj.reqs.get(&id) else {
            return;
        };
        if r.attempt >= OBJ_ATTEMPTS_MAX {
            let r = self.obj.reqs.remove(&id).expect("present");
            self.report.objects.gave_up += 1;
            return self.obj_done(id, r, None, None);
        }
        self.obj_send(id);
    }

    /// Whether a reply is for an object request.
    pub(in crate::world) fn is_obj_req(&self, id: u64) -> bool {
        self.obj.reqs.contains_key(&id)
    }

    /// The store of an object request in flight.
    pub(in crate::world) fn obj_req_store(&self, id: u64) -> Option<StoreId> {
        self.obj.reqs.get(&id).map(|r| r.store)
    }

    /// The store a watcher watches.
    pub(in crate::world) fn watch_store(&self, client: ClientId) -> Option<StoreId> {
        let w = client.0.checked_sub(OBJ_WATCH_BASE)?;
        self.obj.watchers.get(w as usize).map(|w| w.store)
    }

    /// An answer from `from` to an object request.
    pub(in crate::world) fn obj_reply(
        &mut self,
        from: DeviceId,
        id: u64,
        result: Result<Response, ClientError>,
    ) {
        let Some(r) = self.obj.reqs.get(&id) else {
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
                let backoff = OBJ_BACKOFF_US / 2 + self.obj.rng.below(OBJ_BACKOFF_US);
                self.schedule(self.now + backoff, Event::ObjTimeout { req: id, attempt });
            }
            result => {
                let r = self.obj.reqs.remove(&id).expect("present");
                self.obj_done(id, r, Some(from), Some(result));
            }
        }
    }

    pub(in crate::world) fn obj_keepalive_due(&mut self, c: usize, session: SessionId) {
        let cl = &self.obj.clients[c];
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
}
