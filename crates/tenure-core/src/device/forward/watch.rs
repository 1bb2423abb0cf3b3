//! Watches forwarded to the store's manager (DESIGN §8): a client's watch at a device
//! that does not manage its store is kept here and carried by *polls*, one at a time:
//! each asks the manager for the changes after the last revision this device gave its
//! client ([`ObjectRequest::Poll`]), and is answered with them as soon as there are any
//! (or empty after half a lease). A poll that is lost, or whose manager falls silent,
//! ends as any forward does, and the next one asks again from the same revision, so a
//! change is never skipped nor given twice; the manager keeps nothing for a watch
//! between polls. A poll answered `NotManager` follows the hint ([`MAX_HOPS`] times);
//! when no manager is known, or this device has become the manager, the watch ends with
//! `NotManager` and its client watches again from its last revision, as after a
//! failover at the manager.

use super::{Forwards, MAX_HOPS, Sent};
use crate::error::ClientError;
use crate::ids::{ClientId, DeviceId, StoreId};
use crate::io::{ObjectRequest, Output, Request, Response};
use crate::msg::{ForwardMsg, Msg};
use crate::time::Instant;
use std::collections::BTreeMap;

/// Client watches carried by polls from this device.
#[derive(Debug, Default)]
pub(in crate::device) struct FwdWatches {
    next: u64,
    by_client: BTreeMap<(ClientId, u64), FwdWatch>,
    /// Poll key → the watch.
    by_key: BTreeMap<u64, (ClientId, u64)>,
}

#[derive(Debug)]
struct FwdWatch {
    store: StoreId,
    prefix: String,
    values: bool,
    key: u64,
    /// The client's request that asked for the watch (answered `Watching` once).
    req_id: u64,
    /// The revision the client asked to watch after (none: from now).
    asked: Option<u64>,
    /// The last revision given to the client (none before the first answer of a watch
    /// from now).
    after: Option<u64>,
    /// The revision the client was answered `Watching` with, once it was.
    started: Option<u64>,
    /// The poll in flight (its forward id).
    poll: Option<u64>,
}

impl FwdWatches {
    /// Watches carried from here (tests, status).
    pub(in crate::device) fn len(&self) -> usize {
        self.by_client.len()
    }
}

/// The poll key a forwarded request carries, if it is a poll.
pub(super) fn poll_key(req: &Request) -> Option<u64> {
    match req {
        Request::Object {
            req: ObjectRequest::Poll { key, .. },
            ..
        } => Some(*key),
        _ => None,
    }
}

impl Forwards {
    /// Stop carrying a watch; whether it was carried from here.
    fn drop_watch(&mut self, k: (ClientId, u64)) -> bool {
        let Some(w) = self.watches.by_client.remove(&k) else {
            return false;
        };
        self.watches.by_key.remove(&w.key);
        if let Some(id) = w.poll {
            self.take(id);
        }
        true
    }

    /// Send the next poll of watch `k` to `to`.
    fn send_poll(
        &mut self,
        now: Instant,
        lease: std::time::Duration,
        k: (ClientId, u64),
        (to, hops): (DeviceId, u8),
        out: &mut Vec<Output>,
    ) {
        let Some(w) = self.watches.by_client.get(&k) else {
            return;
        };
        let req = Request::Object {
            store: w.store,
            req: ObjectRequest::Poll {
                key: w.key,
                prefix: w.prefix.clone(),
                after: w.after,
                values: w.values,
                wait: w.started.is_some(),
            },
        };
        let req_id = w.req_id;
        let id = self.add(now, lease, (k.0, req_id, req.clone()), to, hops);
        if let Some(w) = self.watches.by_client.get_mut(&k) {
            w.poll = Some(id);
        }
        out.push(Output::Send {
            to,
            msg: Msg::Forward(ForwardMsg::Request { id, req }),
        });
    }
}

impl crate::device::Device {
    /// A client's watch or unwatch at a device that may carry it for another (see the
    /// module's documentation); whether it was handled here.
    pub(in crate::device) fn forward_watch(
        &mut self,
        now: Instant,
        client: ClientId,
        req_id: u64,
        req: &Request,
        out: &mut Vec<Output>,
    ) -> bool {
        let Request::Object { store, req: oreq } = req else {
            return false;
        };
        match oreq {
            ObjectRequest::Unwatch { watch } => {
                if !self.forwards.drop_watch((client, *watch)) {
                    return false;
                }
                let result = Ok(Response::Unwatched);
                out.push(Output::Reply {
                    client,
                    req_id,
                    result,
                });
                true
            }
            ObjectRequest::Watch {
                watch,
                prefix,
                after,
                values,
            } => {
                let Some(to) = self.forward_target(client, req) else {
                    return false;
                };
                let k = (client, *watch);
                // A retried subscription (same watch, request and revision) is the
                // watch already carried: answered again if it was answered, else by
                // its poll. Carrying a second one would give its changes twice.
                if let Some(w) = self.forwards.watches.by_client.get(&k)
                    && (w.req_id, &w.prefix, w.asked, w.values) == (req_id, prefix, *after, *values)
                {
                    if let Some(revision) = w.started {
                        let result = Ok(Response::Watching { revision });
                        out.push(Output::Reply {
                            client,
                            req_id,
                            result,
                        });
                    }
                    return true;
                }
                let me = self.id();
                self.forwards.drop_watch(k);
                let w = &mut self.forwards.watches;
                w.next += 1;
                let key = (me.0 << 40) | w.next;
                w.by_key.insert(key, k);
                let fw = FwdWatch {
                    store: *store,
                    prefix: prefix.clone(),
                    values: *values,
                    key,
                    req_id,
                    asked: *after,
                    after: *after,
                    started: None,
                    poll: None,
                };
                w.by_client.insert(k, fw);
                let lease = self.env.cfg.timing.lease;
                self.forwards.send_poll(now, lease, k, (to, 0), out);
                self.refresh_role(crate::device::Role::Forward);
                true
            }
            _ => false,
        }
    }

    /// A poll ended: answered by `from` (`Some`), or given up (`None`: its device fell
    /// silent or its deadline passed).
    pub(in crate::device) fn on_poll_end(
        &mut self,
        now: Instant,
        (id, s): (u64, Sent),
        answer: Option<(DeviceId, Result<Response, ClientError>)>,
        out: &mut Vec<Output>,
    ) {
        let Some(key) = poll_key(&s.req) else { return };
        let Some(&k) = self.forwards.watches.by_key.get(&key) else {
            return;
        };
        let store = s.req.store();
        let me = self.id();
        let target = self.target_of(store);
        let hint = self.manager_hint(store);
        let Some(w) = self.forwards.watches.by_client.get_mut(&k) else {
            return;
        };
        if w.poll != Some(id) {
            return;
        }
        w.poll = None;
        let lease = self.env.cfg.timing.lease;
        let next = match answer {
            Some((
                from,
                Ok(Response::Polled {
                    revision,
                    changes,
                    values,
                }),
            )) => {
                if w.started.is_none() {
                    let revision = w.after.unwrap_or(revision);
                    w.started = Some(revision);
                    out.push(Output::Reply {
                        client: k.0,
                        req_id: w.req_id,
                        result: Ok(Response::Watching { revision }),
                    });
                }
                if !changes.is_empty() {
                    out.push(Output::ObjectEvents {
                        client: k.0,
                        watch: k.1,
                        changes,
                        values,
                    });
                }
                w.after = Some(w.after.map_or(revision, |a| a.max(revision)));
                Ok((from, 0))
            }
            Some((from, Err(ClientError::NotManager { hint: Some(h) })))
                if h != me && h != from && s.hops < MAX_HOPS =>
            {
                Ok((h, s.hops + 1))
            }
            Some((
                _,
                Err(e @ (ClientError::NotManager { .. } | ClientError::Unavailable { .. })),
            )) if w.started.is_none() => Err(e),
            Some((_, Err(ClientError::NotManager { .. } | ClientError::Unavailable { .. })))
            | None => match target {
                Some(to) => Ok((to, 0)),
                None if w.started.is_some() => Err(ClientError::NotManager { hint }),
                None => Err(ClientError::Unavailable { store }),
            },
            Some((_, Err(e))) => Err(e),
            Some((_, Ok(other))) => Err(ClientError::InvalidName(format!(
                "unexpected answer to a watch: {other:?}"
            ))),
        };
        match next {
            Ok(to) => self.forwards.send_poll(now, lease, k, to, out),
            Err(reason) => self.end_forwarded_watch(k, reason, out),
        }
        self.refresh_role(crate::device::Role::Forward);
    }

    /// A carried watch ends: its request is answered with `reason` if it was not yet,
    /// else the watch ends with it.
    fn end_forwarded_watch(
        &mut self,
        k: (ClientId, u64),
        reason: ClientError,
        out: &mut Vec<Output>,
    ) {
        let Some(w) = self.forwards.watches.by_client.get(&k) else {
            return;
        };
        let (started, req_id) = (w.started.is_some(), w.req_id);
        self.forwards.drop_watch(k);
        if started {
            out.push(Output::WatchEnded {
                client: k.0,
                watch: k.1,
                reason,
            });
        } else {
            out.push(Output::Reply {
                client: k.0,
                req_id,
                result: Err(reason),
            });
        }
    }
}
