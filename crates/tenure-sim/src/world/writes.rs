//! The register-write workload: clients writing random keys of random stores through
//! random devices, following `NotManager` hints for a few hops; and the routing of every
//! client reply to the workload it belongs to.

use super::{CLIENT_HOPS_MAX, CLIENT_TIMEOUT_US, Event, World};
use tenure_core::io::{ClientError, Response};
use tenure_core::{DeviceId, StoreId};

/// One register write in flight.
pub(super) struct ClientWrite {
    pub(super) store: StoreId,
    pub(super) key: u64,
    /// The value written: the request id, unique in the run.
    pub(super) value: u64,
    /// Attempts so far (a timeout of an older attempt is stale).
    pub(super) attempt: u32,
}

impl World {
    /// Start a register write of a random key of a random store, through a random device.
    pub(super) fn new_write(&mut self) {
        self.next_req += 1;
        let req = self.next_req;
        let r = &mut self.workload_rng;
        let store = StoreId(r.below(self.cfg.stores as u64) as u32);
        let key = r.below(self.knobs.keys_per_store);
        let via = DeviceId(1 + r.below(self.cfg.devices));
        let via = self.client_endpoint(via);
        self.writes.insert(
            req,
            ClientWrite {
                store,
                key,
                value: req,
                attempt: 0,
            },
        );
        self.report.writes_issued += 1;
        self.client_send(req, via);
    }

    /// Send (or resend) a write to `via`, with a client-side timeout.
    fn client_send(&mut self, req: u64, via: DeviceId) {
        let Some(w) = self.writes.get_mut(&req) else {
            return;
        };
        w.attempt += 1;
        let attempt = w.attempt;
        let boot = self.nodes[&via].boot;
        let lat = self.knobs.latency_min_us;
        self.schedule(self.now + lat, Event::ClientArrive { req, to: via, boot });
        self.schedule(
            self.now + CLIENT_TIMEOUT_US,
            Event::ClientTimeout { req, attempt },
        );
    }

    /// Retry a write at the hinted device, else a random one, or give up after
    /// [`CLIENT_HOPS_MAX`] attempts.
    pub(super) fn client_retry(&mut self, req: u64, hint: Option<DeviceId>) {
        let Some(w) = self.writes.get(&req) else {
            return;
        };
        if w.attempt >= CLIENT_HOPS_MAX {
            self.writes.remove(&req);
            return;
        }
        let via = match hint {
            Some(h) if self.nodes.contains_key(&h) => h,
            _ => {
                let drawn = DeviceId(1 + self.workload_rng.below(self.cfg.devices));
                self.client_endpoint(drawn)
            }
        };
        self.client_send(req, via);
    }

    /// A device answered request `req`: route the answer to its workload.
    pub(super) fn reply(&mut self, d: DeviceId, req: u64, result: Result<Response, ClientError>) {
        self.trace(|| format!("{d} reply req {req}: {result:?}"));
        if self.lock_reqs.contains_key(&req) {
            self.delay_answered(d, req, &result);
            return self.lock_reply(d, req, result);
        }
        if self.is_obj_req(req) {
            return self.obj_reply(d, req, result);
        }
        match result {
            Ok(_) => {
                self.writes.remove(&req);
            }
            Err(ClientError::NotManager { hint }) => self.client_retry(req, hint),
            Err(ClientError::Unavailable { .. }) => self.client_retry(req, None),
            // Unknown store, and the lock service's errors (not a write's): give up.
            Err(_) => {
                self.writes.remove(&req);
            }
        }
    }
}
