//! Token-ring mutual exclusion (lecture, seed 002 §14.4.4).
//!
//! The processes form a logical ring in id order. One token circulates: a process that
//! receives it keeps it only if it wants the critical section — it enters, and passes
//! the token to its successor when it leaves — and otherwise passes it on at once. A
//! process cannot ask for the lock; it waits for the token, 0 to n − 1 message times.
//! Each entry costs from one token message (every process wants the lock) to any
//! number (nobody does, and the token keeps circulating). A lost token, or a holder that
//! crashes, stops every entry: nothing here regenerates a token (§14.4.4: a timeout
//! cannot tell a lost token from a long critical section).

use super::{MutexError, MutexOut, MutualExclusion, Phase, others, sorted};
use crate::ids::DeviceId;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Token-ring messages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TokenMsg {
    /// The token.
    Token,
}

/// One process of the ring.
#[derive(Clone, Debug)]
pub struct TokenRing {
    me: DeviceId,
    successor: DeviceId,
    phase: Phase,
    has_token: bool,
    out: VecDeque<MutexOut<TokenMsg>>,
    /// Token messages this process has sent.
    pub passed: u64,
    /// Planted bug (lab checker test only): passing the token on leaves this process a
    /// copy, with which it enters again later.
    pub plant_bug: bool,
}

impl TokenRing {
    /// Process `me` of the ring of `members` (which include `me`); `holds_token` for the
    /// one process that starts with the token (it passes it on at once).
    pub fn new(
        me: DeviceId,
        members: impl IntoIterator<Item = DeviceId>,
        holds_token: bool,
    ) -> TokenRing {
        let members = sorted(members);
        let rest = others(&members, me);
        let successor = (rest.iter().copied())
            .find(|m| *m > me)
            .or(rest.first().copied())
            .unwrap_or(me);
        let mut p = TokenRing {
            me,
            successor,
            phase: Phase::Idle,
            has_token: holds_token,
            out: VecDeque::new(),
            passed: 0,
            plant_bug: false,
        };
        if holds_token {
            p.pass();
        }
        p
    }

    /// Whether this process holds the token.
    pub fn has_token(&self) -> bool {
        self.has_token
    }

    /// The next process on the ring.
    pub fn successor(&self) -> DeviceId {
        self.successor
    }

    fn pass(&mut self) {
        if self.successor == self.me {
            return;
        }
        self.has_token = self.plant_bug;
        self.passed += 1;
        self.out.push_back(MutexOut::Send {
            to: self.successor,
            msg: TokenMsg::Token,
        });
    }
}

impl MutualExclusion for TokenRing {
    type Msg = TokenMsg;

    fn id(&self) -> DeviceId {
        self.me
    }

    fn phase(&self) -> Phase {
        self.phase
    }

    fn request(&mut self, _now: Instant) -> Result<(), MutexError> {
        if self.phase != Phase::Idle {
            return Err(MutexError::AlreadyRequested(self.me));
        }
        self.phase = Phase::Wanting;
        if self.has_token {
            self.phase = Phase::Held;
            self.out.push_back(MutexOut::Enter);
        }
        Ok(())
    }

    fn release(&mut self, _now: Instant) -> Result<(), MutexError> {
        if self.phase != Phase::Held {
            return Err(MutexError::NotHeld(self.me));
        }
        self.phase = Phase::Idle;
        self.pass();
        Ok(())
    }

    fn handle_msg(&mut self, _now: Instant, _from: DeviceId, msg: TokenMsg) {
        match msg {
            TokenMsg::Token => {
                self.has_token = true;
                if self.phase == Phase::Wanting {
                    self.phase = Phase::Held;
                    self.out.push_back(MutexOut::Enter);
                } else if self.phase == Phase::Idle {
                    self.pass();
                }
            }
        }
    }

    fn poll_output(&mut self) -> Option<MutexOut<TokenMsg>> {
        self.out.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::super::harness::{MT, Net, d};
    use super::*;

    fn net(n: u64) -> Net<TokenRing> {
        Net::new((1..=n).map(|i| TokenRing::new(d(i), (1..=n).map(d), i == 1)))
    }

    // seed 002 §14.4.4: "The neighbor keeps the token only if it needs the lock at that
    // moment, otherwise, it passes it on": an idle ring circulates the token forever
    // (Fig. 14.7: 1 to ∞ messages per entry).
    #[test]
    fn an_idle_ring_keeps_passing_the_token() {
        let mut n = net(4);
        n.run_for(100 * MT);
        assert_eq!(n.sent, 101);
        assert!(n.entries.is_empty());
    }

    // §14.4.4, Fig. 14.7: a process waits for the token, 0 to n − 1 message times
    // (here less than n: the request comes half-way through a hop).
    #[test]
    fn a_requester_waits_at_most_n_minus_one_message_times() {
        for start in 0..4 {
            let mut n = net(4);
            n.run_for(start * MT + MT / 2);
            let at = n.now;
            n.request(d(1));
            n.run_for(10 * MT);
            let (t, who) = n.entries[0];
            assert_eq!(who, d(1));
            assert!(t - at < 4 * MT, "waited {} µs", t - at);
        }
    }

    // §14.4.4: when every process wants the lock, each entry costs one token message.
    #[test]
    fn under_full_demand_each_entry_costs_one_message() {
        let mut n = net(3);
        for i in 1..=3 {
            n.request(d(i));
        }
        let mut sent = n.sent;
        for _ in 0..9 {
            n.run_for(MT);
            let holder = *n.inside.iter().next().expect("holder");
            let before = n.sent;
            n.release(holder);
            n.request(holder);
            assert!(n.sent - before == 1);
            sent = n.sent;
        }
        assert_eq!(n.overlaps, 0);
        assert!(sent > 0);
    }

    // §14.4.4 "Lost token, process crash": a holder that crashes takes the token with it.
    #[test]
    fn a_crashed_holder_stops_every_entry() {
        let mut n = net(3);
        n.request(d(2));
        n.run_for(2 * MT);
        assert_eq!(n.phase(d(2)), Phase::Held);
        n.crashed.insert(d(2));
        n.request(d(3));
        n.run_for(1_000 * MT);
        assert_eq!(n.phase(d(3)), Phase::Wanting);
    }

    #[test]
    fn planted_bug_keeps_a_copy_of_the_token() {
        let mut n = net(3);
        n.procs.get_mut(&d(2)).expect("process").plant_bug = true;
        n.request(d(2));
        n.run_for(2 * MT);
        n.release(d(2));
        n.request(d(3));
        n.run_for(MT);
        n.request(d(2));
        assert_eq!(n.overlaps, 1);
    }
}
