//! Concluding a lock request: what its answer (or none) tells the client, and what goes
//! into the lock history with the output the client can vouch for.

use super::{ClientSession, Kind, LockReq};
use crate::lincheck::LockOutput;
use crate::lockcheck::Interval;
use crate::world::{Event, World};
use tenure_core::io::{ClientError, Response};
use tenure_core::lockctl::{LockMode, SessionId};
use tenure_core::session::client_deadline;
use tenure_core::{DeviceId, Instant};

impl World {
    /// An answer from `from` to a lock client.
    pub(in crate::world) fn lock_reply(
        &mut self,
        from: DeviceId,
        id: u64,
        result: Result<Response, ClientError>,
    ) {
        let Some(r) = self.lock_reqs.get(&id) else {
            return;
        };
        let c = r.client;
        if r.incarnation != self.lock_clients[c].incarnation {
            self.lock_reqs.remove(&id);
            return;
        }
        let pipelined = self.lock_clients[c].pipeline.is_some();
        // A stream the client left delivers nothing more: the request was re-sent.
        if pipelined && from != r.sent_to {
            self.trace(|| format!("lock client {c}: answer to req {id} on a left stream"));
            return;
        }
        match result {
            Err(ClientError::NotManager { hint }) if pipelined => {
                self.resume_stream(c, hint, Some(id))
            }
            Err(ClientError::Unavailable { .. }) if pipelined => {
                self.resume_stream(c, None, Some(id))
            }
            Err(ClientError::NotManager { hint }) => {
                self.retarget(c, hint);
                self.lock_retry(id)
            }
            Err(ClientError::Unavailable { .. }) => {
                self.retarget(c, None);
                self.lock_retry(id)
            }
            result => {
                let r = self.lock_reqs.remove(&id).expect("present");
                self.lock_clients[c].answered |= !self.faults_on;
                self.note_out_of_order(c, id);
                self.lock_done(&r, Some(result));
            }
        }
    }

    /// Conclude a request: record the history output, update the client, go on.
    /// `result` is `None` when the client gave up without an answer it can use.
    pub(super) fn lock_done(&mut self, r: &LockReq, result: Option<Result<Response, ClientError>>) {
        let c = r.client;
        let now = self.now;
        let drift = self.clock_drift;
        match (&r.kind, result) {
            (Kind::Open, Some(Ok(Response::SessionOpened { session, ttl }))) => {
                let deadline = client_deadline(Instant(r.first_sent), ttl, drift).0;
                self.report.locks.sessions_opened += 1;
                let cl = &mut self.lock_clients[c];
                cl.session = Some(ClientSession {
                    id: session,
                    ttl,
                    deadline,
                });
                cl.held.clear();
                cl.tainted.clear();
                // A session of another store counts for the checker by its child, once
                // there is one.
                if cl.home.is_none() {
                    self.locks.set_deadline(cl.store, session, deadline);
                }
                let home = cl.session_store();
                self.locks.set_client_deadline(home, session, deadline);
                self.schedule(deadline, Event::ClientDeadline(c, session));
                let ka = ttl.as_micros() as u64 / 3;
                self.schedule(now + ka, Event::KeepAliveDue(c, session));
            }
            (Kind::Open, _) => {}
            (Kind::Attach, result) => {
                let cl = &mut self.lock_clients[c];
                match (cl.session.as_ref(), cl.home) {
                    (Some(s), Some(home)) if Some(s.id) == r.session => {
                        let (sid, deadline) = (s.id, s.deadline);
                        if matches!(result, Some(Err(ClientError::SessionExpired))) {
                            self.drop_session(c, now);
                        } else if let Some(child) =
                            self.session_children.get(&(home, sid, cl.store)).copied()
                        {
                            cl.child = Some(child);
                            self.locks.set_deadline(cl.store, child, deadline);
                            if matches!(result, Some(Ok(_) | Err(ClientError::NotHeld))) {
                                self.adopt_child(c);
                            }
                        }
                    }
                    _ => {}
                }
            }
            (Kind::KeepAlive, result) => {
                self.lock_clients[c].keepalive = None;
                let cl = &mut self.lock_clients[c];
                let Some(s) = cl.session.as_mut().filter(|s| Some(s.id) == r.session) else {
                    return;
                };
                let sid = s.id;
                match result {
                    Some(Ok(Response::KeptAlive { ttl, children })) if now < s.deadline => {
                        let d = client_deadline(Instant(r.first_sent), ttl, drift).0;
                        s.deadline = s.deadline.max(d);
                        s.ttl = ttl;
                        let (deadline, ka) = (s.deadline, ttl.as_micros() as u64 / 3);
                        let ck = (cl.home.is_none() || cl.child.is_some()).then(|| cl.ck(sid));
                        if let Some(ck) = ck {
                            self.locks.set_deadline(cl.store, ck, deadline);
                        }
                        self.locks
                            .set_client_deadline(cl.session_store(), sid, deadline);
                        if let Some(child) = cl.child.filter(|_| cl.home.is_some()) {
                            // Named: renewed after this keep-alive was sent.
                            cl.adopted |= children.get(&cl.store) == Some(&child);
                            if cl.adopted {
                                self.locks.set_client_deadline(cl.store, child, deadline);
                            }
                        }
                        self.schedule(deadline, Event::ClientDeadline(c, sid));
                        self.schedule(now + ka, Event::KeepAliveDue(c, sid));
                    }
                    Some(Err(ClientError::SessionExpired)) => self.drop_session(c, now),
                    _ => self.schedule(now + 50_000, Event::KeepAliveDue(c, sid)),
                }
                return;
            }
            (Kind::Close, _) => self.drop_session(c, now),
            (Kind::Acquire { name, mode }, result) => {
                let op = r.op.expect("acquires are recorded");
                match result {
                    Some(Ok(Response::Granted { token })) => {
                        self.report.locks.grants += 1;
                        self.avail.grant_times.push(now);
                        let store = self.lock_clients[c].store;
                        self.obj_note_grant(store, name, *mode, token);
                        self.locks.respond(op, now, LockOutput::Granted { token });
                        let cl = &mut self.lock_clients[c];
                        match cl.session.as_ref() {
                            Some(s) if Some(s.id) == r.session && now < s.deadline => {
                                self.adopt_child(c);
                                let cl = &mut self.lock_clients[c];
                                let Some(s) = cl.session.as_ref() else {
                                    unreachable!("matched above")
                                };
                                cl.held.insert(name.clone(), (*mode, token));
                                let iv = Interval {
                                    client: c as u64,
                                    store: cl.store,
                                    session: cl.ck(s.id),
                                    mode: *mode,
                                    token,
                                    start: now,
                                    end: None,
                                };
                                self.locks.hold(name, iv);
                                self.lock_clients[c].inflight.remove(&r.id);
                                let hold = self.lock_knobs.hold_mean_us;
                                return self.think(c, hold);
                            }
                            // Granted after the client's deadline: not a grant it may use.
                            _ => {
                                cl.tainted.insert(name.clone());
                            }
                        }
                    }
                    Some(Err(
                        ClientError::Timeout
                        | ClientError::Deadlock
                        | ClientError::WouldBlock
                        | ClientError::Rejected(_)
                        | ClientError::InvalidName(_)
                        | ClientError::NotHeld,
                    )) if !r.lost_attempt => {
                        self.report.locks.acquire_failures += 1;
                        self.locks.respond(op, now, LockOutput::Failed);
                    }
                    // Unknown outcome: the operation stays open in the history.
                    other => {
                        self.lock_clients[c].tainted.insert(name.clone());
                        if matches!(other, Some(Err(ClientError::SessionExpired))) {
                            self.drop_session(c, now);
                        }
                    }
                }
            }
            (Kind::Release { name, token }, result) => {
                let op = r.op.expect("releases are recorded");
                let clean = r.attempt == 1 && !r.lost_attempt;
                match result {
                    // A retry carries the first attempt's request id, so it answers
                    // `Released` whether this attempt or a lost earlier one released it.
                    Some(Ok(Response::Released)) => {
                        self.adopt_child(c);
                        self.report.locks.releases += 1;
                        if !clean {
                            self.report.locks.releases_retried += 1;
                        }
                        self.locks.respond(op, now, LockOutput::Released);
                        let store = self.lock_clients[c].store;
                        self.obj_note_release(store, name, *token);
                        if let Some(s) = r.session {
                            let ck = self.lock_clients[c].ck(s);
                            self.locks.release_acked(store, name, ck, *token);
                        }
                    }
                    Some(Err(ClientError::NotHeld)) if clean => {
                        self.adopt_child(c);
                        self.locks.respond(op, now, LockOutput::NotHeld)
                    }
                    Some(Err(ClientError::SessionExpired)) => {
                        if clean {
                            self.locks.drop_op(op);
                        }
                        self.drop_session(c, now);
                    }
                    _ => {
                        self.lock_clients[c].tainted.insert(name.clone());
                    }
                }
            }
            (Kind::Holders { .. }, result) => {
                let op = r.op.expect("queries are recorded");
                match result {
                    Some(Ok(Response::Holders(hs))) => {
                        let mut seen: Vec<(SessionId, LockMode)> =
                            hs.iter().map(|h| (h.session, h.mode)).collect();
                        seen.sort();
                        self.locks.respond(op, now, LockOutput::Holders(seen));
                    }
                    _ => self.locks.drop_op(op),
                }
            }
        }
        self.lock_clients[c].inflight.remove(&r.id);
        let think = self.lock_knobs.think_mean_us;
        self.think(c, think);
    }

    /// A request ran under the client's child (its answer came from the child's store):
    /// the child was renewed after home recorded it, so from now on it must outlive the
    /// client's deadline.
    fn adopt_child(&mut self, c: usize) {
        let cl = &mut self.lock_clients[c];
        let (Some(_), Some(child), Some(s)) = (cl.home, cl.child, cl.session.as_ref()) else {
            return;
        };
        if !cl.adopted {
            cl.adopted = true;
            self.locks.set_client_deadline(cl.store, child, s.deadline);
        }
    }
}
