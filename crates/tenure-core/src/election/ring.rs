//! The ring algorithm (seed 002 §14.3.2).
//!
//! Members form a logical ring in id order. The initiator sends an election message to
//! its successor; every member appends its id and passes it on, skipping a successor
//! that does not acknowledge in time (it is down). When the next live successor is
//! already in the message, the circle is closed: the member holding it picks the
//! highest collected id as coordinator and circulates the announcement once around the
//! ring. That is 2(n − 1) messages for n live members (§14.3.3). An election whose
//! initiator crashed mid-way closes at whoever finds the next live successor already
//! collected, so it still completes.

use super::{ElectionId, ElectionMsg, Elector, Term};
use crate::ids::DeviceId;
use crate::time::Instant;
use std::collections::BTreeMap;

/// Ring messages waiting for their successor's acknowledgement, and this member's own
/// elections.
#[derive(Clone, Debug, Default)]
pub(super) struct Ring {
    /// (election, announcement?) → the message in flight.
    pending: BTreeMap<(ElectionId, bool), Pending>,
    /// Elections this member started, and when it gives up waiting for their result.
    own: BTreeMap<ElectionId, Instant>,
}

#[derive(Clone, Debug)]
struct Pending {
    msg: ElectionMsg,
    to: DeviceId,
    until: Instant,
    skipped: Vec<DeviceId>,
}

impl Ring {
    pub(super) fn running(&self) -> bool {
        !self.own.is_empty() || !self.pending.is_empty()
    }

    pub(super) fn next_timeout(&self) -> Option<Instant> {
        let a = self.pending.values().map(|p| p.until).min();
        crate::time::earliest(a, self.own.values().min().copied())
    }
}

impl Elector {
    /// The members after this one in ring order, wrapping, without `skipped`.
    fn successors(&self, skipped: &[DeviceId]) -> Vec<DeviceId> {
        let (after, before): (Vec<DeviceId>, Vec<DeviceId>) =
            self.others().into_iter().partition(|m| *m > self.me);
        (after.into_iter().chain(before))
            .filter(|m| !skipped.contains(m))
            .collect()
    }

    pub(super) fn ring_start(&mut self, now: Instant, id: ElectionId) {
        self.ring
            .own
            .insert(id, now + self.settings.result_timeout * 2);
        let msg = ElectionMsg::RingElection {
            id,
            ids: vec![self.me],
            max_n: self.max_n,
        };
        self.ring_forward(now, msg, Vec::new());
    }

    /// Pass a ring message to the next live successor, or close it here if that
    /// successor has already seen it.
    fn ring_forward(&mut self, now: Instant, msg: ElectionMsg, skipped: Vec<DeviceId>) {
        let next = self.successors(&skipped).into_iter().next();
        match msg {
            ElectionMsg::RingElection { id, ids, max_n } => match next {
                Some(to) if !ids.contains(&to) => {
                    let msg = ElectionMsg::RingElection { id, ids, max_n };
                    self.ring_send(now, (id, false), to, msg, skipped);
                }
                // The circle is closed: announce.
                _ => {
                    let leader = (ids.iter().copied().chain([self.me]))
                        .max_by_key(|d| self.rank(*d))
                        .unwrap_or(self.me);
                    self.ring.own.remove(&id);
                    if self.retiring.contains(&leader) {
                        // Only members being retired took part: none may lead.
                        return;
                    }
                    let term = Term {
                        n: max_n.max(self.max_n) + 1,
                        leader,
                    };
                    self.follow(now, term);
                    let msg = ElectionMsg::RingCoordinator {
                        id,
                        term,
                        seen: vec![self.me],
                    };
                    self.ring_forward(now, msg, Vec::new());
                }
            },
            ElectionMsg::RingCoordinator { id, term, seen } => {
                if let Some(to) = next.filter(|to| !seen.contains(to)) {
                    let msg = ElectionMsg::RingCoordinator { id, term, seen };
                    self.ring_send(now, (id, true), to, msg, skipped);
                }
            }
            _ => {}
        }
    }

    fn ring_send(
        &mut self,
        now: Instant,
        key: (ElectionId, bool),
        to: DeviceId,
        msg: ElectionMsg,
        skipped: Vec<DeviceId>,
    ) {
        self.send(to, msg.clone());
        let until = now + self.settings.answer_timeout;
        self.ring.pending.insert(
            key,
            Pending {
                msg,
                to,
                until,
                skipped,
            },
        );
    }

    pub(super) fn ring_on_election(
        &mut self,
        now: Instant,
        from: DeviceId,
        id: ElectionId,
        mut ids: Vec<DeviceId>,
        max_n: u64,
    ) {
        self.send(from, ElectionMsg::RingAck { id });
        if ids.contains(&self.me) {
            // Already passed here (a duplicate): nothing to do.
            return;
        }
        ids.push(self.me);
        let max_n = max_n.max(self.max_n);
        self.ring_forward(
            now,
            ElectionMsg::RingElection { id, ids, max_n },
            Vec::new(),
        );
    }

    pub(super) fn ring_on_coordinator(
        &mut self,
        now: Instant,
        from: DeviceId,
        id: ElectionId,
        term: Term,
        mut seen: Vec<DeviceId>,
    ) {
        self.send(from, ElectionMsg::RingAck { id });
        self.ring.own.remove(&id);
        if seen.contains(&self.me) {
            return;
        }
        self.follow(now, term);
        seen.push(self.me);
        self.ring_forward(
            now,
            ElectionMsg::RingCoordinator { id, term, seen },
            Vec::new(),
        );
    }

    pub(super) fn ring_on_ack(&mut self, from: DeviceId, id: ElectionId) {
        self.ring
            .pending
            .retain(|(e, _), p| !(*e == id && p.to == from));
    }

    pub(super) fn ring_timeout(&mut self, now: Instant) {
        let late: Vec<(ElectionId, bool)> = (self.ring.pending.iter())
            .filter(|(_, p)| p.until <= now)
            .map(|(k, _)| *k)
            .collect();
        for key in late {
            if let Some(mut p) = self.ring.pending.remove(&key) {
                // The successor is down: skip it.
                p.skipped.push(p.to);
                self.ring_forward(now, p.msg, p.skipped);
            }
        }
        let given_up: Vec<ElectionId> = (self.ring.own.iter())
            .filter(|(_, t)| **t <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in given_up {
            self.ring.own.remove(&id);
            // No result came back: elect again unless a coordinator is being followed.
            if self.current.is_none_or(|t| t.n == 0)
                || self.heard + self.settings.heartbeat * 3 <= now
            {
                self.start_election(now);
            }
        }
    }
}
