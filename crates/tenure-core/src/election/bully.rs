//! The bully algorithm (seed 002 §14.3.1).
//!
//! 1. A process with id i initiates an election: it sends ELECTION to every higher id.
//! 2. A process receiving ELECTION answers OK and starts an election of its own.
//! 3. A process that gets no OK in time has won: it sends COORDINATOR ("I won") to all.
//! 4. One that got OK waits for COORDINATOR; if none comes in time, it starts again.
//!
//! A COORDINATOR from a lower id while this process is alive is bullied out by a new
//! election (§14.3.1: "the higher ID process ... can start a new election").

use super::{ElectionId, ElectionMsg, Elector};
use crate::ids::DeviceId;
use crate::time::Instant;

/// This member's own bully election, if one is running.
#[derive(Clone, Debug, Default)]
pub(super) struct Bully {
    own: Option<Own>,
}

#[derive(Clone, Copy, Debug)]
struct Own {
    id: ElectionId,
    phase: Phase,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// ELECTION sent to the higher ids; waiting for an OK.
    AwaitOk { until: Instant },
    /// A higher id answered OK; waiting for its COORDINATOR.
    AwaitWinner { until: Instant },
}

impl Bully {
    pub(super) fn running(&self) -> bool {
        self.own.is_some()
    }

    pub(super) fn next_timeout(&self) -> Option<Instant> {
        self.own.map(|o| match o.phase {
            Phase::AwaitOk { until } | Phase::AwaitWinner { until } => until,
        })
    }
}

impl Elector {
    pub(super) fn bully_start(&mut self, now: Instant, id: ElectionId) {
        let higher: Vec<DeviceId> = (self.members.iter())
            .copied()
            .filter(|m| self.outranks(*m, self.me))
            .collect();
        if higher.is_empty() {
            return self.bully_win(now, id);
        }
        let max_n = self.max_n;
        for h in higher {
            self.send(h, ElectionMsg::Election { id, max_n });
        }
        self.bully.own = Some(Own {
            id,
            phase: Phase::AwaitOk {
                until: now + self.settings.answer_timeout,
            },
        });
    }

    fn bully_win(&mut self, now: Instant, id: ElectionId) {
        self.bully.own = None;
        if !self.may_lead() {
            return;
        }
        let term = self.next_term(self.me);
        self.follow(now, term);
        for m in self.others() {
            self.send(m, ElectionMsg::Coordinator { id, term });
        }
    }

    pub(super) fn bully_on_election(
        &mut self,
        now: Instant,
        from: DeviceId,
        id: ElectionId,
        their_n: u64,
    ) {
        if !self.outranks(self.me, from) {
            return;
        }
        let max_n = self.max_n;
        self.send(from, ElectionMsg::Ok { id, max_n });
        // §14.3.1: the receiver takes over. A coordinator already in office whose term
        // is not behind the initiator's answers with its announcement instead of
        // holding a new election: a member that keeps calling elections (one that does
        // not hear the coordinator, say) would otherwise make every member above it
        // elect again, and the coordinator change terms, each time.
        // Not when a member being retired calls it with a term number equal to ours: it
        // may hold a term of that number it claimed itself before it was made retiring,
        // which outranks ours by id; it cannot lead and refuses an older term, so it would
        // follow nobody (simulator seed 20906). A new term above both ends that.
        let stale_claim = their_n == self.term.n && self.retiring.contains(&from);
        if self.is_coordinator()
            && self.bully.own.is_none()
            && their_n <= self.term.n
            && !stale_claim
        {
            let term = self.term;
            self.send(from, ElectionMsg::Coordinator { id, term });
            return;
        }
        if self.bully.own.is_none() {
            self.start_election(now);
        }
    }

    pub(super) fn bully_on_ok(&mut self, now: Instant, id: ElectionId) {
        if let Some(own) = self.bully.own.as_mut()
            && own.id == id
            && matches!(own.phase, Phase::AwaitOk { .. })
        {
            own.phase = Phase::AwaitWinner {
                until: now + self.settings.result_timeout,
            };
        }
    }

    pub(super) fn bully_on_coordinator(
        &mut self,
        now: Instant,
        from: DeviceId,
        _id: ElectionId,
        term: super::Term,
    ) {
        if term.leader != from {
            return;
        }
        if self.outranks(self.me, from) {
            if self.bully.own.is_none() {
                self.start_election(now);
            }
            return;
        }
        if self.follow(now, term) {
            self.bully.own = None;
        }
    }

    pub(super) fn bully_timeout(&mut self, now: Instant) {
        let Some(own) = self.bully.own else {
            return;
        };
        match own.phase {
            Phase::AwaitOk { until } if until <= now => self.bully_win(now, own.id),
            Phase::AwaitWinner { until } if until <= now => {
                self.bully.own = None;
                self.start_election(now);
            }
            _ => {}
        }
    }
}
