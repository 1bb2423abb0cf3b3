//! How the table decides: idempotent replays, new requests, grants, queued waiters,
//! ended waits and sessions, and removing what is left empty.

use super::*;
use crate::ids::SessionId;
use crate::lockctl::mode::LockMode;
use crate::lockctl::name::LockName;
use crate::time::Instant;
use std::time::Duration;

impl LockTable {
    pub(super) fn holder_infos(e: &Entry) -> Vec<HolderInfo> {
        e.holders
            .iter()
            .map(|(s, h)| HolderInfo {
                session: *s,
                mode: h.mode,
                token: h.token,
                request_id: h.request_id,
                granted_at: h.granted_at,
            })
            .collect()
    }

    pub(super) fn waiter_infos(&self, e: &Entry) -> Vec<WaiterInfo> {
        e.queue
            .iter()
            .filter_map(|t| {
                let w = self.waiters.get(t)?;
                Some(WaiterInfo {
                    session: w.session,
                    request_id: w.request_id,
                    mode: w.mode,
                    ticket: *t,
                    deadline: w.deadline,
                })
            })
            .collect()
    }

    pub(super) fn replay(
        &self,
        req: &Acquire,
        name: &LockName,
    ) -> Option<Result<Acquired, AcquireError>> {
        let s = self.sessions.get(&req.session)?;
        match s.requests.get(&req.request_id) {
            Some(r) if r.name != *name || r.mode != req.mode => {
                Some(Err(AcquireError::RequestMismatch {
                    request_id: req.request_id,
                }))
            }
            Some(r) => Some(match &r.outcome {
                Outcome::Granted(g) => Ok(Acquired::Granted(g.clone())),
                Outcome::Waiting(t) => Ok(Acquired::Queued {
                    ticket: *t,
                    position: self.position(*t),
                }),
                Outcome::Failed(e) => Err(e.clone()),
                Outcome::Released => Err(AcquireError::RequestMismatch {
                    request_id: req.request_id,
                }),
            }),
            None if req.request_id.0 < s.forgotten_below => Some(Err(AcquireError::StaleRequest {
                request_id: req.request_id,
            })),
            None => None,
        }
    }

    pub(super) fn remember(
        &mut self,
        session: SessionId,
        request_id: RequestId,
        name: LockName,
        mode: LockMode,
        outcome: Outcome,
    ) {
        let window = self.config.request_window.max(1);
        let s = self.sessions.entry(session).or_default();
        s.requests.insert(
            request_id,
            Record {
                name,
                mode,
                outcome,
            },
        );
        // Forget the oldest settled results beyond the window; a waiting request's record
        // is what lets its replay find the wait, so it is kept until the wait ends.
        while s.requests.len() > window {
            let Some(oldest) = s
                .requests
                .iter()
                .find(|(_, r)| !matches!(r.outcome, Outcome::Waiting(_)))
                .map(|(id, _)| *id)
            else {
                break;
            };
            s.requests.remove(&oldest);
            s.forgotten_below = s.forgotten_below.max(oldest.0 + 1);
        }
    }

    fn set_outcome(&mut self, session: SessionId, request_id: RequestId, outcome: Outcome) {
        if let Some(r) = self
            .sessions
            .get_mut(&session)
            .and_then(|s| s.requests.get_mut(&request_id))
        {
            r.outcome = outcome;
        }
    }

    pub(super) fn position(&self, ticket: Ticket) -> usize {
        self.waiters
            .get(&ticket)
            .and_then(|w| self.entries.get(&w.name))
            .map(|e| e.queue.range(..ticket).count())
            .unwrap_or(0)
    }

    pub(super) fn acquire_new(
        &mut self,
        req: &Acquire,
        name: &LockName,
        now: Instant,
    ) -> Result<Acquired, AcquireError> {
        let session = req.session;
        if let Some(h) = self.entries.get(name).and_then(|e| e.holders.get(&session)) {
            return Err(AcquireError::AlreadyHeld {
                mode: h.mode,
                token: h.token,
            });
        }
        if let Some((t, _)) = self
            .sessions
            .get(&session)
            .and_then(|s| s.waiting.iter().find(|(_, n)| *n == name))
        {
            return Err(AcquireError::AlreadyWaiting { ticket: *t });
        }
        let deadline = match req.wait {
            Wait::Until(d) => Some(d),
            Wait::Try | Wait::Forever => None,
        };
        let delay = req
            .lock_delay
            .unwrap_or(self.config.lock_delay)
            .min(MAX_LOCK_DELAY);
        if self.grantable(name, req.mode, session, None, now) {
            let g = self.grant(name, req.mode, session, req.request_id, None, delay, now);
            return Ok(Acquired::Granted(g));
        }
        match req.wait {
            Wait::Try => return Err(AcquireError::WouldBlock),
            Wait::Until(d) if d <= now => return Err(AcquireError::Timeout),
            Wait::Until(_) | Wait::Forever => {}
        }
        let blockers = self.blockers(name, req.mode, session, None, now);
        if let Some(cycle) = self.find_cycle(session, &blockers, now) {
            // The new wait has the largest ticket of all, so it is the youngest wait on
            // any cycle it closes: it is the one refused. (Cycles can only close when a
            // wait is added: grants and removals never add waits-for edges.)
            return Err(AcquireError::Deadlock { cycle });
        }
        let ticket = Ticket(self.next_ticket);
        self.next_ticket += 1;
        self.insert_waiter(
            ticket,
            Waiter {
                name: name.clone(),
                session,
                request_id: req.request_id,
                mode: req.mode,
                deadline,
                lock_delay: delay,
            },
        );
        self.entries
            .entry(name.clone())
            .or_default()
            .queue
            .insert(ticket);
        self.sessions
            .entry(session)
            .or_default()
            .waiting
            .insert(ticket, name.clone());
        Ok(Acquired::Queued {
            ticket,
            position: self.position(ticket),
        })
    }

    #[allow(clippy::too_many_arguments)] // the grant's fields, one by one
    pub(super) fn grant(
        &mut self,
        name: &LockName,
        mode: LockMode,
        session: SessionId,
        request_id: RequestId,
        ticket: Option<Ticket>,
        lock_delay: Duration,
        now: Instant,
    ) -> Grant {
        // Conservatively: the new lock may cover a name its session waits for (see
        // `grant_waiters`).
        self.settled = super::Settled(false);
        self.last_seq += 1;
        let token = FencingToken {
            epoch: self.epoch,
            seq: self.last_seq,
        };
        self.entries
            .entry(name.clone())
            .or_default()
            .holders
            .insert(
                session,
                Held {
                    mode,
                    token,
                    request_id,
                    granted_at: now,
                    lock_delay,
                },
            );
        self.sessions
            .entry(session)
            .or_default()
            .held
            .insert(name.clone());
        Grant {
            name: name.clone(),
            session,
            request_id,
            mode,
            token,
            ticket,
        }
    }

    /// Grants, in ticket order, every wait that is now grantable. Processing in ticket order
    /// and checking each wait against the earlier ones still queued is what makes the
    /// queues fair: a later compatible wait never overtakes an earlier conflicting one.
    pub(super) fn grant_waiters(&mut self, now: Instant) -> Vec<Grant> {
        let tickets: Vec<Ticket> = self.waiters.keys().copied().collect();
        let mut granted = Vec::new();
        for t in tickets {
            let Some(w) = self.waiters.get(&t).cloned() else {
                continue;
            };
            if w.expired(now) || !self.grantable(&w.name, w.mode, w.session, Some(t), now) {
                continue;
            }
            self.dequeue(t);
            let g = self.grant(
                &w.name,
                w.mode,
                w.session,
                w.request_id,
                Some(t),
                w.lock_delay,
                now,
            );
            self.set_outcome(w.session, w.request_id, Outcome::Granted(g.clone()));
            granted.push(g);
        }
        // A pass that granted nothing changed nothing: every wait left stays blocked
        // until the table changes or a deadline passes. After a grant the next tick
        // looks again, as it always did.
        self.settled = super::Settled(granted.is_empty());
        granted
    }

    fn dequeue(&mut self, ticket: Ticket) -> Option<Waiter> {
        let w = self.remove_waiter(ticket)?;
        if let Some(e) = self.entries.get_mut(&w.name) {
            e.queue.remove(&ticket);
        }
        if let Some(s) = self.sessions.get_mut(&w.session) {
            s.waiting.remove(&ticket);
        }
        self.cleanup(&w.name);
        Some(w)
    }

    pub(super) fn end_wait(&mut self, ticket: Ticket, error: AcquireError) -> EndedWait {
        let w = self.dequeue(ticket).expect("ended wait exists");
        self.set_outcome(w.session, w.request_id, Outcome::Failed(error.clone()));
        EndedWait {
            name: w.name,
            session: w.session,
            request_id: w.request_id,
            ticket,
            error,
        }
    }

    pub(super) fn end_session(
        &mut self,
        session: SessionId,
        now: Instant,
        delay: bool,
    ) -> SessionRelease {
        let Some(state) = self.sessions.get(&session).cloned() else {
            return SessionRelease {
                granted: self.grant_waiters(now),
                ..SessionRelease::default()
            };
        };
        let cancelled = state
            .waiting
            .keys()
            .map(|t| self.end_wait(*t, AcquireError::SessionEnded))
            .collect();
        let mut released = Vec::new();
        for name in &state.held {
            let Some(e) = self.entries.get_mut(name) else {
                continue;
            };
            let Some(h) = e.holders.remove(&session) else {
                continue;
            };
            let until = now + h.lock_delay;
            if delay && until > now {
                let ghost = match &e.ghost {
                    Some(g) if g.until > now => Ghost {
                        until: g.until.max(until),
                        mode: g.mode.max(h.mode),
                    },
                    _ => Ghost {
                        until,
                        mode: h.mode,
                    },
                };
                self.set_ghost(name, Some(ghost));
            }
            released.push(Released {
                name: name.clone(),
                mode: h.mode,
                token: h.token,
            });
            self.cleanup(name);
        }
        // The session's idempotency records go with it: the session layer refuses
        // requests of ended sessions before they reach the table.
        self.sessions.remove(&session);
        SessionRelease {
            released,
            cancelled,
            granted: self.grant_waiters(now),
        }
    }

    pub(super) fn cleanup(&mut self, name: &LockName) {
        if self.entries.get(name).is_some_and(Entry::is_empty) {
            self.entries.remove(name);
        }
    }
}
