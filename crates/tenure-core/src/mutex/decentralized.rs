//! Decentralized mutual exclusion by majority vote (lecture, seed 002 §14.4.2).
//!
//! Every process runs a coordinator that votes: *yes* if it has not given its vote to
//! another process, *no* otherwise. A process that wants the lock asks every coordinator
//! (its own answers locally, without a message) and enters once a strict majority
//! `m = ⌊n/2⌋ + 1` of the `n` coordinators — live or not — said yes; the majority
//! guarantees the lock is not granted twice. When enough said no that a majority is out
//! of reach, the attempt failed: the process gives back the votes it got, backs off for a
//! random time and tries again (attempt k + 1). On leaving, it gives back its votes.
//! A coordinator crash is survived as long as a majority answers; under contention a
//! process may fail attempt after attempt (starvation, Fig. 14.7).
//!
//! Votes carry the attempt they answer, so a late yes for an abandoned attempt is given
//! back at once and a coordinator that voted for an earlier attempt of the same process
//! moves its vote to the later one.

use super::{MutexError, MutexOut, MutualExclusion, Phase, others, sorted};
use crate::ids::DeviceId;
use crate::rng::Rng;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

/// Messages between requesters and coordinators.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum VoteMsg {
    /// A requester asks for a coordinator's vote.
    Request {
        /// The requester's attempt.
        attempt: u64,
    },
    /// A coordinator's answer.
    Vote {
        /// The attempt answered.
        attempt: u64,
        /// Yes or no.
        yes: bool,
    },
    /// A requester gives a vote back (after leaving, or after a failed attempt).
    Release {
        /// The attempt the vote was given to.
        attempt: u64,
    },
}

/// The requester's side.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Want {
    Idle,
    /// Votes requested; who said yes and who said no so far.
    Asking {
        yes: BTreeSet<DeviceId>,
        no: BTreeSet<DeviceId>,
        /// Coordinators that have not answered by then are taken as no (crashed).
        until: Instant,
    },
    /// The attempt failed; the next starts at `until`.
    Backoff {
        until: Instant,
    },
    /// In the critical section with these votes.
    Held {
        voters: BTreeSet<DeviceId>,
    },
}

/// Timing of the requester.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VoteSettings {
    /// A failed attempt k backs off for a random time in `[backoff, backoff · 2^k]`
    /// (k ≤ 6).
    pub backoff: Duration,
    /// An attempt not decided this long after it started has failed (coordinators that
    /// did not answer are down).
    pub answer_timeout: Duration,
}

/// One process: a requester and a coordinator.
#[derive(Clone, Debug)]
pub struct Decentralized {
    me: DeviceId,
    members: Vec<DeviceId>,
    want: Want,
    /// The current (or last) attempt; attempts count from 1 per request.
    attempt: u64,
    /// Coordinator: the vote given, to whom and for which attempt.
    voted_for: Option<(DeviceId, u64)>,
    settings: VoteSettings,
    rng: Rng,
    out: VecDeque<MutexOut<VoteMsg>>,
    /// Planted bug (lab checker test only): the coordinator says yes to every request,
    /// whoever holds its vote.
    pub plant_bug: bool,
}

impl Decentralized {
    /// Process `me` among `members` (which include `me`), drawing its back-off times
    /// from `seed`.
    pub fn new(
        me: DeviceId,
        members: impl IntoIterator<Item = DeviceId>,
        settings: VoteSettings,
        seed: u64,
    ) -> Decentralized {
        Decentralized {
            me,
            members: sorted(members),
            want: Want::Idle,
            attempt: 0,
            voted_for: None,
            settings,
            rng: Rng::new(seed),
            out: VecDeque::new(),
            plant_bug: false,
        }
    }

    /// The votes needed: a strict majority of all coordinators, live or not.
    pub fn majority(&self) -> usize {
        self.members.len() / 2 + 1
    }

    /// The attempt of the current (or last) request.
    pub fn attempt(&self) -> u64 {
        self.attempt
    }

    /// Coordinator: who holds this coordinator's vote.
    pub fn voted_for(&self) -> Option<DeviceId> {
        self.voted_for.map(|v| v.0)
    }

    fn send(&mut self, to: DeviceId, msg: VoteMsg) {
        self.out.push_back(MutexOut::Send { to, msg });
    }

    /// Coordinator: answer a request.
    fn vote(&mut self, from: DeviceId, attempt: u64) -> bool {
        let free = self.voted_for.is_none_or(|(p, _)| p == from);
        if free || self.plant_bug {
            self.voted_for = Some((from, attempt));
        }
        free || self.plant_bug
    }

    /// Coordinator: a vote given back.
    fn unvote(&mut self, from: DeviceId, attempt: u64) {
        if self.voted_for == Some((from, attempt)) {
            self.voted_for = None;
        }
    }

    fn start_attempt(&mut self, now: Instant) {
        self.attempt += 1;
        self.want = Want::Asking {
            yes: BTreeSet::new(),
            no: BTreeSet::new(),
            until: now + self.settings.answer_timeout,
        };
        let attempt = self.attempt;
        for m in others(&self.members, self.me) {
            self.send(m, VoteMsg::Request { attempt });
        }
        let own = self.vote(self.me, attempt);
        self.on_vote(now, self.me, attempt, own);
    }

    fn on_vote(&mut self, now: Instant, from: DeviceId, attempt: u64, yes: bool) {
        let (m, n) = (self.majority(), self.members.len());
        if attempt != self.attempt {
            if yes {
                self.give_back(from, attempt);
            }
            return;
        }
        match &mut self.want {
            Want::Asking { yes: ys, no, .. } => {
                if yes {
                    ys.insert(from);
                } else {
                    no.insert(from);
                }
                if ys.len() >= m {
                    let voters = std::mem::take(ys);
                    self.want = Want::Held { voters };
                    self.out.push_back(MutexOut::Enter);
                } else if no.len() > n - m {
                    self.fail(now);
                }
            }
            Want::Held { voters } if yes => {
                voters.insert(from);
            }
            // A yes for a failed attempt, or one that came after this process left.
            _ if yes => self.give_back(from, attempt),
            _ => {}
        }
    }

    /// A majority is out of reach: give the votes back and back off.
    fn fail(&mut self, now: Instant) {
        let Want::Asking { yes, .. } = std::mem::replace(&mut self.want, Want::Idle) else {
            return;
        };
        let attempt = self.attempt;
        for v in yes {
            self.give_back(v, attempt);
        }
        let k = attempt.min(6) as u32;
        let base = self.settings.backoff.as_micros() as u64;
        let wait = base + self.rng.below(base * ((1u64 << k) - 1) + 1);
        self.want = Want::Backoff {
            until: now + Duration::from_micros(wait),
        };
    }

    fn give_back(&mut self, to: DeviceId, attempt: u64) {
        if to == self.me {
            self.unvote(self.me, attempt);
        } else {
            self.send(to, VoteMsg::Release { attempt });
        }
    }
}

impl MutualExclusion for Decentralized {
    type Msg = VoteMsg;

    fn id(&self) -> DeviceId {
        self.me
    }

    fn phase(&self) -> Phase {
        match self.want {
            Want::Idle => Phase::Idle,
            Want::Asking { .. } | Want::Backoff { .. } => Phase::Wanting,
            Want::Held { .. } => Phase::Held,
        }
    }

    fn request(&mut self, now: Instant) -> Result<(), MutexError> {
        if self.want != Want::Idle {
            return Err(MutexError::AlreadyRequested(self.me));
        }
        self.attempt = 0;
        self.start_attempt(now);
        Ok(())
    }

    fn release(&mut self, _now: Instant) -> Result<(), MutexError> {
        let Want::Held { voters } = std::mem::replace(&mut self.want, Want::Idle) else {
            return Err(MutexError::NotHeld(self.me));
        };
        let attempt = self.attempt;
        for v in voters {
            self.give_back(v, attempt);
        }
        Ok(())
    }

    fn handle_msg(&mut self, now: Instant, from: DeviceId, msg: VoteMsg) {
        if !self.members.contains(&from) || from == self.me {
            return;
        }
        match msg {
            VoteMsg::Request { attempt } => {
                let yes = self.vote(from, attempt);
                self.send(from, VoteMsg::Vote { attempt, yes });
            }
            VoteMsg::Vote { attempt, yes } => self.on_vote(now, from, attempt, yes),
            VoteMsg::Release { attempt } => self.unvote(from, attempt),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        match self.want {
            Want::Backoff { until } if until <= now => self.start_attempt(now),
            Want::Asking { until, .. } if until <= now => self.fail(now),
            _ => {}
        }
    }

    fn poll_output(&mut self) -> Option<MutexOut<VoteMsg>> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self.want {
            Want::Backoff { until } | Want::Asking { until, .. } => Some(until),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
