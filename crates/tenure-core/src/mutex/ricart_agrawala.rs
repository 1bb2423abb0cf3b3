//! Ricart and Agrawala's distributed mutual exclusion (lecture, seed 002 §14.4.3).
//!
//! Every process keeps a Lamport clock. To enter, process k takes a new timestamp, sends
//! request(k, TS_k) to the n − 1 others and waits for a *grant* (reply) from every one
//! of them. A process receiving a request replies at once if it neither holds nor wants
//! the critical section; if it holds it, it queues the request; if it wants it too, the
//! earlier request — smaller (timestamp, id), a total order — goes first: it replies
//! if the other's request is earlier, and queues it otherwise. On leaving, it replies
//! to every queued request. That is 2(n − 1) messages per entry; a process that has
//! crashed never replies, so every requester waits for it forever (n points of failure).

use super::{MutexError, MutexOut, MutualExclusion, Phase, others, sorted};
use crate::ids::DeviceId;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, VecDeque};

/// Ricart-Agrawala messages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RaMsg {
    /// request(k, TS_k).
    Request {
        /// The requester's Lamport timestamp.
        ts: u64,
    },
    /// The grant: the sender lets the requester go first.
    Reply,
}

/// One process.
#[derive(Clone, Debug)]
pub struct RicartAgrawala {
    me: DeviceId,
    members: Vec<DeviceId>,
    phase: Phase,
    /// Lamport clock.
    clock: u64,
    /// Timestamp of this process's pending request.
    my_ts: u64,
    /// Processes that granted the pending request.
    granted: BTreeSet<DeviceId>,
    /// Requests queued until this process leaves its critical section.
    deferred: BTreeSet<DeviceId>,
    out: VecDeque<MutexOut<RaMsg>>,
    /// Planted bug (lab checker test only): grant every request at once, even from
    /// inside the critical section.
    pub plant_bug: bool,
}

impl RicartAgrawala {
    /// Process `me` among `members` (which include `me`).
    pub fn new(me: DeviceId, members: impl IntoIterator<Item = DeviceId>) -> RicartAgrawala {
        RicartAgrawala {
            me,
            members: sorted(members),
            phase: Phase::Idle,
            clock: 0,
            my_ts: 0,
            granted: BTreeSet::new(),
            deferred: BTreeSet::new(),
            out: VecDeque::new(),
            plant_bug: false,
        }
    }

    /// The Lamport clock.
    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// Requests queued here.
    pub fn deferred(&self) -> impl Iterator<Item = DeviceId> + '_ {
        self.deferred.iter().copied()
    }

    fn send(&mut self, to: DeviceId, msg: RaMsg) {
        self.out.push_back(MutexOut::Send { to, msg });
    }

    fn maybe_enter(&mut self) {
        let all = others(&self.members, self.me).len();
        if self.phase == Phase::Wanting && self.granted.len() == all {
            self.phase = Phase::Held;
            self.out.push_back(MutexOut::Enter);
        }
    }

    fn on_request(&mut self, from: DeviceId, ts: u64) {
        self.clock = self.clock.max(ts) + 1;
        let mine_first = match self.phase {
            Phase::Idle => false,
            Phase::Held => true,
            Phase::Wanting => (self.my_ts, self.me) < (ts, from),
        };
        if mine_first && !self.plant_bug {
            self.deferred.insert(from);
        } else {
            self.send(from, RaMsg::Reply);
        }
    }
}

impl MutualExclusion for RicartAgrawala {
    type Msg = RaMsg;

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
        self.clock += 1;
        self.my_ts = self.clock;
        self.granted.clear();
        let ts = self.my_ts;
        for m in others(&self.members, self.me) {
            self.send(m, RaMsg::Request { ts });
        }
        self.maybe_enter();
        Ok(())
    }

    fn release(&mut self, _now: Instant) -> Result<(), MutexError> {
        if self.phase != Phase::Held {
            return Err(MutexError::NotHeld(self.me));
        }
        self.phase = Phase::Idle;
        for m in std::mem::take(&mut self.deferred) {
            self.send(m, RaMsg::Reply);
        }
        Ok(())
    }

    fn handle_msg(&mut self, _now: Instant, from: DeviceId, msg: RaMsg) {
        if !self.members.contains(&from) || from == self.me {
            return;
        }
        match msg {
            RaMsg::Request { ts } => self.on_request(from, ts),
            RaMsg::Reply => {
                if self.phase == Phase::Wanting {
                    self.granted.insert(from);
                    self.maybe_enter();
                }
            }
        }
    }

    fn poll_output(&mut self) -> Option<MutexOut<RaMsg>> {
        self.out.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::super::harness::{MT, Net, d};
    use super::*;

    fn net(n: u64) -> Net<RicartAgrawala> {
        Net::new((1..=n).map(|i| RicartAgrawala::new(d(i), (1..=n).map(d))))
    }

    // seed 002 §14.4.3: "needs 2(n−1) messages": n − 1 requests, n − 1 grants; the
    // requests and grants each travel in parallel, so entry comes 2 message times later.
    #[test]
    fn an_entry_costs_two_n_minus_one_messages() {
        for size in [2, 5, 9] {
            let mut n = net(size);
            n.request(d(2));
            n.run_for(10 * MT);
            assert_eq!(n.entries, vec![(2 * MT, d(2))]);
            n.release(d(2));
            n.run_for(10 * MT);
            assert_eq!(n.sent, 2 * (size - 1));
        }
    }

    // §14.4.3: "If already in the critical section: does not reply, queue request";
    // the queued request is granted on release.
    #[test]
    fn a_holder_queues_requests_until_it_leaves() {
        let mut n = net(3);
        n.request(d(1));
        n.run_for(3 * MT);
        n.request(d(3));
        n.run_for(10 * MT);
        assert_eq!(n.phase(d(3)), Phase::Wanting);
        assert_eq!(n.procs[&d(1)].deferred().collect::<Vec<_>>(), vec![d(3)]);
        n.release(d(1));
        n.run_for(3 * MT);
        assert_eq!(n.phase(d(3)), Phase::Held);
    }

    // §14.4.3: "If it wants to enter itself, compare TS_j with TS_k and send grant if
    // TS_k < TS_j, else queue": concurrent requests enter one at a time, earlier
    // (timestamp, id) first.
    #[test]
    fn concurrent_requests_go_in_timestamp_order() {
        let mut n = net(4);
        n.request(d(3));
        n.request(d(2));
        n.request(d(4));
        n.run_for(5 * MT);
        assert_eq!(n.entries.len(), 1);
        // Equal timestamps (1): the lower id goes first.
        assert_eq!(n.entries[0].1, d(2));
        for _ in 0..2 {
            let holder = *n.inside.iter().next().expect("one inside");
            n.release(holder);
            n.run_for(5 * MT);
        }
        let order: Vec<DeviceId> = n.entries.iter().map(|e| e.1).collect();
        assert_eq!(order, vec![d(2), d(3), d(4)]);
        assert_eq!(n.overlaps, 0);
    }

    // §14.4.3 "Crash of any process": a process that crashed never grants.
    #[test]
    fn a_crashed_process_blocks_every_requester() {
        let mut n = net(4);
        n.crashed.insert(d(4));
        n.request(d(1));
        n.run_for(1_000 * MT);
        assert_eq!(n.phase(d(1)), Phase::Wanting);
    }

    // The Lamport clock moves past every timestamp received.
    #[test]
    fn the_clock_moves_past_received_timestamps() {
        let mut p = RicartAgrawala::new(d(1), [d(1), d(2)]);
        p.handle_msg(Instant(0), d(2), RaMsg::Request { ts: 41 });
        assert_eq!(p.clock(), 42);
        assert_eq!(
            p.poll_output(),
            Some(MutexOut::Send {
                to: d(2),
                msg: RaMsg::Reply
            })
        );
    }

    #[test]
    fn planted_bug_lets_two_in() {
        let mut n = net(3);
        for p in n.procs.values_mut() {
            p.plant_bug = true;
        }
        n.request(d(1));
        n.request(d(2));
        n.run_for(5 * MT);
        assert_eq!(n.overlaps, 1);
    }
}
