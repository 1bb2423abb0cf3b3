//! Any device serves any request (DESIGN §8): a client request for a store this device
//! does not manage goes to the store's manager as a [`ForwardMsg::Request`], is served
//! there exactly as if its client had sent it there, and the answer comes back as a
//! [`ForwardMsg::Answer`] that this device gives its client.
//!
//! - **Where to.** The manager a local chunk's lease names, else the manager role's
//!   migration address, else the manager the lookup service publishes (DESIGN §3); never
//!   this device. With none known, the client gets `NotManager` without a hint, as
//!   before.
//! - **Forwarded once.** A device serving a forwarded request answers it itself (served,
//!   or `NotManager` with its own hint) and never forwards it on, so stale hints cannot
//!   make a loop; the forwarding device follows an answer's hint up to [`MAX_HOPS`]
//!   times, then gives the client that answer.
//! - **Idempotent through failovers.** The manager recognises a retry by the session and
//!   request id it carries, whichever device it came through; the manager's answer
//!   replaces the waiter of an earlier attempt (`Clients::waiters`).
//! - **A manager that does not answer.** A forward ends with `Unavailable` (the client
//!   retries, with the same request id) when nothing has been heard from the manager for
//!   `liveness_window` since it was sent, or at its deadline: a lease past the request's
//!   own wait, or [`LONGEST_WAIT`] for a wait without one.
//! - **Watches** are carried by polls, one round at a time ([`watch`]).
//! - **Not forwarded.** Payloads above one block: answered `NotManager` with the hint,
//!   which the client follows. Nothing is forwarded until every peer reads forwarded requests
//!   (a rolling upgrade is over) or when the configuration turns it off.
//! - **Volatile.** A crash of the forwarding device loses its forwards with its clients'
//!   connections; a crash of the manager is silence.

use super::{Device, Env};
use crate::error::ClientError;
use crate::generation::Generation;
use crate::ids::{ClientId, DeviceId, StoreId};
use crate::io::{ObjectRequest, Output, Request, WaitSpec};
use crate::layout::MgrState;
use crate::msg::{ForwardMsg, Msg};
use crate::time::Instant;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

mod watch;

/// How many times a forwarding device follows the hint of a `NotManager` answer.
pub(super) const MAX_HOPS: u8 = 2;

/// The longest a forwarded wait without a deadline of its own is kept: its client is
/// then answered `Unavailable` and asks again with the same request id (keeping its
/// place in the queue).
pub(super) const LONGEST_WAIT: Duration = Duration::from_secs(300);

/// Requests forwarded from here, and those served here for another device.
#[derive(Debug, Default)]
pub(super) struct Forwards {
    next_id: u64,
    /// Requests forwarded, by id.
    sent: BTreeMap<u64, Sent>,
    /// Their deadlines, earliest first.
    deadlines: BTreeSet<(Instant, u64)>,
    /// The devices forwarded to, while they have requests unanswered.
    targets: BTreeMap<DeviceId, Target>,
    /// Requests served here for another device, by the client id given to each.
    served: BTreeMap<ClientId, Served>,
    next_served: u64,
    /// Client watches carried by polls.
    watches: watch::FwdWatches,
}

#[derive(Debug)]
pub(super) struct Sent {
    client: ClientId,
    req_id: u64,
    req: Request,
    to: DeviceId,
    hops: u8,
    deadline: Instant,
}

#[derive(Debug)]
struct Target {
    /// Requests unanswered.
    pending: usize,
    /// When the oldest of them was sent.
    since: Instant,
}

#[derive(Debug)]
struct Served {
    origin: DeviceId,
    id: u64,
    store: StoreId,
}

/// Whether a request travels to another device: no payload above a block (a watch
/// travels as polls, an unwatch stays with the device carrying the watch).
fn forwardable(req: &Request, block_size: u32) -> bool {
    match req {
        Request::Object { req, .. } => match req {
            ObjectRequest::Unwatch { .. } | ObjectRequest::Poll { .. } => false,
            ObjectRequest::Put { data, .. } | ObjectRequest::MultipartPart { data, .. } => {
                data.len() <= block_size as usize
            }
            _ => true,
        },
        _ => true,
    }
}

/// When a forwarded request is given up: a lease past its own wait.
pub(super) fn deadline(now: Instant, req: &Request, lease: Duration) -> Instant {
    match req {
        Request::Acquire { wait, .. } => match wait {
            WaitSpec::Try => now + lease,
            WaitSpec::Timeout(t) => now + *t + lease,
            WaitSpec::Forever => now + LONGEST_WAIT,
        },
        _ => now + lease,
    }
}

impl Forwards {
    /// The earliest instant a forward may end unanswered.
    pub(super) fn next_timeout(&self, env: &Env) -> Option<Instant> {
        let silence = (self.targets.iter())
            .map(|(d, t)| Self::silent_at(env, *d, t))
            .min();
        let deadline = self.deadlines.first().map(|(t, _)| *t);
        crate::time::earliest(silence, deadline)
    }

    /// When `to` counts as silent if nothing more is heard from it.
    fn silent_at(env: &Env, to: DeviceId, t: &Target) -> Instant {
        let heard = env.heard.get(&to).copied().unwrap_or(t.since);
        heard.max(t.since) + env.cfg.timing.liveness_window
    }

    /// Answer `Unavailable` to the forwards past their deadline or whose device fell
    /// silent; the polls among them are returned, for their watches to poll again.
    pub(super) fn on_tick(
        &mut self,
        now: Instant,
        env: &Env,
        out: &mut Vec<Output>,
    ) -> Vec<(u64, Sent)> {
        let silent: Vec<DeviceId> = (self.targets.iter())
            .filter(|(d, t)| Self::silent_at(env, **d, t) <= now)
            .map(|(d, _)| *d)
            .collect();
        let mut ended: Vec<u64> = (self.deadlines.iter())
            .take_while(|(t, _)| *t <= now)
            .map(|(_, id)| *id)
            .collect();
        ended.extend(
            (self.sent.iter())
                .filter(|(_, s)| silent.contains(&s.to))
                .map(|(id, _)| *id),
        );
        let mut polls = Vec::new();
        for id in ended {
            if let Some(s) = self.take(id) {
                if watch::poll_key(&s.req).is_some() {
                    polls.push((id, s));
                    continue;
                }
                let store = s.req.store();
                out.push(Output::Reply {
                    client: s.client,
                    req_id: s.req_id,
                    result: Err(ClientError::Unavailable { store }),
                });
            }
        }
        polls
    }

    /// Record a forward of `req` to `to`; its id.
    fn add(
        &mut self,
        now: Instant,
        lease: Duration,
        sent: (ClientId, u64, Request),
        to: DeviceId,
        hops: u8,
    ) -> u64 {
        let (client, req_id, req) = sent;
        self.next_id += 1;
        let id = self.next_id;
        let deadline = deadline(now, &req, lease);
        self.deadlines.insert((deadline, id));
        let target = self.targets.entry(to).or_insert(Target {
            pending: 0,
            since: now,
        });
        target.pending += 1;
        self.sent.insert(
            id,
            Sent {
                client,
                req_id,
                req,
                to,
                hops,
                deadline,
            },
        );
        id
    }

    /// Remove a forward (answered or given up).
    fn take(&mut self, id: u64) -> Option<Sent> {
        let s = self.sent.remove(&id)?;
        self.deadlines.remove(&(s.deadline, id));
        if let Some(t) = self.targets.get_mut(&s.to) {
            t.pending -= 1;
            if t.pending == 0 {
                self.targets.remove(&s.to);
            }
        }
        Some(s)
    }

    /// The client id a request forwarded by `origin` is served under here.
    fn serve_for(&mut self, origin: DeviceId, id: u64, store: StoreId) -> ClientId {
        self.next_served += 1;
        let client = ClientId(ClientId::FORWARDED | self.next_served);
        self.served.insert(client, Served { origin, id, store });
        client
    }

    /// Turn the answers to requests served here for other devices into messages back
    /// to them, in place (a persist before an answer still goes first).
    pub(super) fn answer_served(&mut self, out: &mut [Output]) {
        if self.served.is_empty() {
            return;
        }
        for o in out.iter_mut() {
            let Output::Reply { client, .. } = o else {
                continue;
            };
            let Some(s) = self.served.remove(client) else {
                continue;
            };
            let Output::Reply { result, .. } = std::mem::replace(o, Output::SetTimer(Instant(0)))
            else {
                unreachable!("matched above")
            };
            *o = Output::Send {
                to: s.origin,
                msg: Msg::Forward(ForwardMsg::Answer {
                    id: s.id,
                    store: s.store,
                    result,
                }),
            };
        }
    }

    /// Requests forwarded and not answered yet (tests, status).
    pub(super) fn pending(&self) -> usize {
        self.sent.len()
    }

    /// Client watches carried from here by polls.
    pub(super) fn watches(&self) -> usize {
        self.watches.len()
    }
}

impl Device {
    /// Forward a client request to its store's manager if this device does not manage
    /// the store and knows another device that does; whether it did.
    pub(super) fn forward(
        &mut self,
        now: Instant,
        client: ClientId,
        req_id: u64,
        req: &Request,
        hops: u8,
        out: &mut Vec<Output>,
    ) -> bool {
        if let Request::Object {
            req: ObjectRequest::Watch { .. } | ObjectRequest::Unwatch { .. },
            ..
        } = req
        {
            return self.forward_watch(now, client, req_id, req, out);
        }
        let Some(to) = self.forward_target(client, req) else {
            return false;
        };
        let lease = self.env.cfg.timing.lease;
        let id = (self.forwards).add(now, lease, (client, req_id, req.clone()), to, hops);
        out.push(Output::Send {
            to,
            msg: Msg::Forward(ForwardMsg::Request {
                id,
                req: req.clone(),
            }),
        });
        self.refresh_role(super::Role::Forward);
        true
    }

    /// Where a request goes if it is forwarded (see the module's documentation).
    fn forward_target(&self, client: ClientId, req: &Request) -> Option<DeviceId> {
        let cfg = &self.env.cfg;
        let store = req.store();
        if !cfg.forward
            || self.env.peers < Generation::Forwarding
            || client.is_forwarded()
            || store.0 >= cfg.cluster.stores
            || !forwardable(req, cfg.objects.block_size)
        {
            return None;
        }
        self.target_of(store)
    }

    /// The manager of `store` a request for it goes to from here: none while this
    /// device holds a manager role for it.
    fn target_of(&self, store: StoreId) -> Option<DeviceId> {
        let role = self.managers.get(&store);
        if role.is_some_and(|m| m.state() != MgrState::None) {
            return None;
        }
        let me = self.id();
        (self.lease_hint(store))
            .or_else(|| role.and_then(|m| m.forwarding))
            .or_else(|| self.env.hints.get(&store).copied())
            .filter(|d| *d != me)
    }

    /// A forwarded request, or the answer to one this device forwarded.
    pub(super) fn on_forward_msg(
        &mut self,
        now: Instant,
        from: DeviceId,
        msg: ForwardMsg,
        out: &mut Vec<Output>,
    ) {
        match msg {
            ForwardMsg::Request { id, req } => {
                let client = self.forwards.serve_for(from, id, req.store());
                if self.env.cfg.planted.forward_ack_unserved
                    && let Request::Write { .. } = req
                {
                    let version = crate::ids::Version::default();
                    out.push(Output::Reply {
                        client,
                        req_id: id,
                        result: Ok(crate::io::Response::Written { version }),
                    });
                    return;
                }
                self.serve(now, client, id, req, out);
            }
            ForwardMsg::Answer { id, result, .. } => {
                if self.forwards.sent.get(&id).is_none_or(|s| s.to != from) {
                    return;
                }
                let Some(s) = self.forwards.take(id) else {
                    return;
                };
                if watch::poll_key(&s.req).is_some() {
                    return self.on_poll_end(now, (id, s), Some((from, result)), out);
                }
                let me = self.id();
                match result {
                    Err(ClientError::NotManager { hint: Some(h) }) if h == me => {
                        self.serve(now, s.client, s.req_id, s.req, out);
                    }
                    Err(ClientError::NotManager { hint: Some(h) })
                        if h != from && s.hops < MAX_HOPS =>
                    {
                        let lease = self.env.cfg.timing.lease;
                        let id = (self.forwards).add(
                            now,
                            lease,
                            (s.client, s.req_id, s.req.clone()),
                            h,
                            s.hops + 1,
                        );
                        out.push(Output::Send {
                            to: h,
                            msg: Msg::Forward(ForwardMsg::Request { id, req: s.req }),
                        });
                    }
                    result => out.push(Output::Reply {
                        client: s.client,
                        req_id: s.req_id,
                        result,
                    }),
                }
            }
        }
    }

    /// The device this device takes for the manager of `store`: itself while it
    /// manages it, else where it would forward a request for it (DESIGN §8; what a
    /// client that routes itself asks with `Resolve`).
    pub fn manager_hint(&self, store: StoreId) -> Option<DeviceId> {
        let role = self.managers.get(&store);
        if role.is_some_and(|m| m.state() == MgrState::Manager) {
            return Some(self.id());
        }
        (self.lease_hint(store))
            .or_else(|| role.and_then(|m| m.forwarding))
            .or_else(|| self.env.hints.get(&store).copied())
    }

    /// Requests forwarded and not answered yet.
    pub fn forwards_pending(&self) -> usize {
        self.forwards.pending()
    }

    /// Client requests under sessions that span stores in progress here (tests, status).
    pub fn session_jobs(&self) -> usize {
        self.groups.pending()
    }

    /// Client watches this device carries for another device's store.
    pub fn watches_forwarded(&self) -> usize {
        self.forwards.watches()
    }
}

#[cfg(test)]
#[path = "forward_tests.rs"]
mod tests;
