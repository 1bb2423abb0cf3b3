//! Lock requests on their way: sent to the client's target with a client-side timeout,
//! arriving at a device, retried with the same request id, redirected, given up.

use super::{Kind, LOCK_CLIENT_BASE, LockReq};
use crate::world::{CLIENT_HOPS_MAX, Event, World};
use tenure_core::DeviceId;
use tenure_core::io::Request;

impl World {
    /// Start a request of client `c` (`op`: its entry in the lock history) and send it.
    pub(super) fn lock_request(&mut self, c: usize, req: Request, kind: Kind, op: Option<usize>) {
        self.next_req += 1;
        let id = self.next_req;
        let timeout_us = self.request_timeout_us(c, &req);
        let cl = &mut self.lock_clients[c];
        let session = cl.session.as_ref().map(|s| s.id);
        if matches!(kind, Kind::KeepAlive) {
            cl.keepalive = Some(id);
        } else {
            self.note_pipelined(c, &kind);
            self.lock_clients[c].inflight.insert(id);
        }
        let cl = &self.lock_clients[c];
        self.lock_reqs.insert(
            id,
            LockReq {
                id,
                client: c,
                incarnation: cl.incarnation,
                req,
                kind,
                attempt: 0,
                first_sent: self.now,
                op,
                lost_attempt: false,
                session,
                sent_to: cl.target,
                timeout_us,
            },
        );
        self.lock_send(id);
    }

    /// Send (or resend) request `id` to its client's target, with a client-side timeout.
    fn lock_send(&mut self, id: u64) {
        let Some(r) = self.lock_reqs.get_mut(&id) else {
            return;
        };
        r.attempt += 1;
        let (attempt, timeout_us) = (r.attempt, r.timeout_us);
        let to = self.lock_clients[r.client].target;
        r.sent_to = to;
        let boot = self.nodes[&to].boot;
        let lat = self.knobs.latency_min_us;
        self.schedule(self.now + lat, Event::LockArrive { req: id, to, boot });
        self.schedule(
            self.now + timeout_us,
            Event::LockTimeout { req: id, attempt },
        );
    }

    /// A lock request reaches a device.
    pub(in crate::world) fn lock_arrive(&mut self, id: u64, to: DeviceId, boot: u64) {
        let node = &self.nodes[&to];
        if node.boot != boot || node.device.is_none() {
            return;
        }
        let Some(r) = self.lock_reqs.get(&id) else {
            return;
        };
        let (client, req) = (r.client, r.req.clone());
        self.trace(|| format!("lock client {client} -> {to} req {id} {req:?}"));
        self.delay_arrived(id);
        self.input(
            to,
            tenure_core::Input::Request {
                client: tenure_core::ClientId(LOCK_CLIENT_BASE + client as u64),
                req_id: id,
                req,
            },
        );
    }

    /// No answer in time: retry elsewhere, same idempotency key (a pipelining client
    /// resumes its whole stream there).
    pub(in crate::world) fn lock_timeout(&mut self, id: u64, attempt: u32) {
        let Some(r) = self.lock_reqs.get_mut(&id) else {
            return;
        };
        if r.attempt != attempt {
            return;
        }
        r.lost_attempt = true;
        let c = r.client;
        let cl = &self.lock_clients[c];
        if r.incarnation != cl.incarnation {
            // Sent before the client crashed: it has forgotten the request.
            self.lock_reqs.remove(&id);
            return;
        }
        if cl.pipeline.is_some() {
            return self.resume_stream(c, None, None);
        }
        self.retarget(c, None);
        self.lock_retry(id);
    }

    pub(in crate::world) fn retarget(&mut self, c: usize, hint: Option<DeviceId>) {
        let to = match hint {
            Some(h) if self.nodes.contains_key(&h) => h,
            _ => {
                let drawn = DeviceId(1 + self.lock_rng.below(self.cfg.devices));
                self.client_endpoint(drawn)
            }
        };
        self.lock_clients[c].target = to;
    }

    pub(in crate::world) fn lock_retry(&mut self, id: u64) {
        let Some(r) = self.lock_reqs.get(&id) else {
            return;
        };
        if r.attempt >= CLIENT_HOPS_MAX || r.incarnation != self.lock_clients[r.client].incarnation
        {
            return self.lock_give_up(id);
        }
        self.lock_send(id);
    }

    /// The client stops trying: the outcome stays unknown.
    fn lock_give_up(&mut self, id: u64) {
        let Some(r) = self.lock_reqs.remove(&id) else {
            return;
        };
        if r.incarnation != self.lock_clients[r.client].incarnation {
            // Sent before the client crashed: it has forgotten the request, whose
            // operation stays open in the history.
            return;
        }
        self.lock_done(&r, None);
    }
}
