//! Centralized mutual exclusion (lecture, seed 002 §14.4.1).
//!
//! A coordinator (elected beforehand, §14.3) keeps the lock's holder and a FIFO queue of
//! requests. A process sends *request* and blocks; the coordinator answers *grant* at once
//! if nobody holds the lock, and otherwise queues the request. The holder sends *release*
//! when done; the coordinator grants the lock to the head of the queue. Three messages per
//! entry and exit, two message times before entry; fair (first come, first served). A
//! coordinator that crashes leaves every waiting process blocked (Fig. 14.7, "Problems").
//! The coordinator itself may ask for the lock: its requests are handled locally.

use super::{MutexError, MutexOut, MutualExclusion, Phase};
use crate::ids::DeviceId;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// The centralized algorithm's messages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CentralMsg {
    /// A process asks the coordinator for the lock.
    Request,
    /// The coordinator grants the lock.
    Grant,
    /// The holder gives the lock back.
    Release,
}

/// One process, and the coordinator's role if it is the coordinator.
#[derive(Clone, Debug)]
pub struct Centralized {
    me: DeviceId,
    coordinator: DeviceId,
    phase: Phase,
    /// Coordinator: who holds the lock.
    holder: Option<DeviceId>,
    /// Coordinator: requests waiting, first come first served.
    queue: VecDeque<DeviceId>,
    out: VecDeque<MutexOut<CentralMsg>>,
    /// Planted bug (lab checker test only): the coordinator grants every request at once,
    /// whoever holds the lock.
    pub plant_bug: bool,
}

impl Centralized {
    /// Process `me`, whose coordinator is `coordinator`.
    pub fn new(me: DeviceId, coordinator: DeviceId) -> Centralized {
        Centralized {
            me,
            coordinator,
            phase: Phase::Idle,
            holder: None,
            queue: VecDeque::new(),
            out: VecDeque::new(),
            plant_bug: false,
        }
    }

    /// Coordinator: who holds the lock.
    pub fn holder(&self) -> Option<DeviceId> {
        self.holder
    }

    /// Coordinator: the waiting requests, in grant order.
    pub fn queue(&self) -> impl Iterator<Item = DeviceId> + '_ {
        self.queue.iter().copied()
    }

    fn on_request(&mut self, from: DeviceId) {
        if self.holder.is_none() || self.plant_bug {
            self.grant(from);
        } else if self.holder != Some(from) && !self.queue.contains(&from) {
            self.queue.push_back(from);
        }
    }

    fn on_release(&mut self, from: DeviceId) {
        if self.holder != Some(from) {
            return;
        }
        self.holder = None;
        if let Some(next) = self.queue.pop_front() {
            self.grant(next);
        }
    }

    fn grant(&mut self, to: DeviceId) {
        self.holder = Some(to);
        if to == self.me {
            self.enter();
        } else {
            self.out.push_back(MutexOut::Send {
                to,
                msg: CentralMsg::Grant,
            });
        }
    }

    fn enter(&mut self) {
        if self.phase == Phase::Wanting {
            self.phase = Phase::Held;
            self.out.push_back(MutexOut::Enter);
        }
    }
}

impl MutualExclusion for Centralized {
    type Msg = CentralMsg;

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
        if self.me == self.coordinator {
            self.on_request(self.me);
        } else {
            self.out.push_back(MutexOut::Send {
                to: self.coordinator,
                msg: CentralMsg::Request,
            });
        }
        Ok(())
    }

    fn release(&mut self, _now: Instant) -> Result<(), MutexError> {
        if self.phase != Phase::Held {
            return Err(MutexError::NotHeld(self.me));
        }
        self.phase = Phase::Idle;
        if self.me == self.coordinator {
            self.on_release(self.me);
        } else {
            self.out.push_back(MutexOut::Send {
                to: self.coordinator,
                msg: CentralMsg::Release,
            });
        }
        Ok(())
    }

    fn handle_msg(&mut self, _now: Instant, from: DeviceId, msg: CentralMsg) {
        match msg {
            CentralMsg::Request if self.me == self.coordinator => self.on_request(from),
            CentralMsg::Release if self.me == self.coordinator => self.on_release(from),
            CentralMsg::Grant if from == self.coordinator => self.enter(),
            _ => {}
        }
    }

    fn poll_output(&mut self) -> Option<MutexOut<CentralMsg>> {
        self.out.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::super::harness::{MT, Net, d};
    use super::*;

    fn net(n: u64) -> Net<Centralized> {
        Net::new((1..=n).map(|i| Centralized::new(d(i), d(1))))
    }

    // seed 002 §14.4.1, Fig. 14.7: request, grant, release — 3 messages per entry and
    // exit, 2 message times before entry.
    #[test]
    fn request_grant_release_is_three_messages_and_two_message_times() {
        let mut n = net(4);
        n.request(d(3));
        n.run_for(10 * MT);
        assert_eq!(n.entries, vec![(2 * MT, d(3))]);
        n.release(d(3));
        n.run_for(10 * MT);
        assert_eq!(n.sent, 3);
        assert_eq!(n.procs[&d(1)].holder(), None);
    }

    // §14.4.1: "if the queue is empty, it grants the lock ..., otherwise it adds the
    // request to the queue"; on release it grants the next request (first come, first
    // served).
    #[test]
    fn coordinator_queues_requests_while_held_and_grants_them_in_order() {
        let mut n = net(5);
        n.request(d(2));
        n.run_for(3 * MT);
        n.request(d(4));
        n.run_for(MT / 2);
        n.request(d(3));
        n.run_for(5 * MT);
        assert_eq!(n.phase(d(4)), Phase::Wanting);
        assert_eq!(n.procs[&d(1)].queue().collect::<Vec<_>>(), vec![d(4), d(3)]);
        n.release(d(2));
        n.run_for(5 * MT);
        n.release(d(4));
        n.run_for(5 * MT);
        let order: Vec<DeviceId> = n.entries.iter().map(|e| e.1).collect();
        assert_eq!(order, vec![d(2), d(4), d(3)]);
        assert_eq!(n.overlaps, 0);
    }

    // §14.4.1 "Coordinator crashes": a process waiting on its request is blocked.
    #[test]
    fn coordinator_crash_blocks_the_waiting_process() {
        let mut n = net(3);
        n.request(d(2));
        n.run_for(3 * MT);
        n.request(d(3));
        n.run_for(3 * MT);
        n.crashed.insert(d(1));
        n.release(d(2));
        n.run_for(1_000 * MT);
        assert_eq!(n.phase(d(3)), Phase::Wanting);
    }

    // The coordinator's own requests cost no message.
    #[test]
    fn the_coordinator_enters_locally() {
        let mut n = net(3);
        n.request(d(1));
        assert_eq!(n.phase(d(1)), Phase::Held);
        n.release(d(1));
        assert_eq!(n.sent, 0);
    }

    #[test]
    fn commands_at_the_wrong_moment_are_refused() {
        let mut p = Centralized::new(d(2), d(1));
        assert_eq!(p.release(Instant(0)), Err(MutexError::NotHeld(d(2))));
        p.request(Instant(0)).expect("idle");
        assert_eq!(
            p.request(Instant(0)),
            Err(MutexError::AlreadyRequested(d(2)))
        );
    }

    // The planted bug grants a second request while the lock is held.
    #[test]
    fn planted_bug_grants_twice() {
        let mut n = net(3);
        n.procs.get_mut(&d(1)).expect("coordinator").plant_bug = true;
        n.request(d(2));
        n.request(d(3));
        n.run_for(5 * MT);
        assert_eq!(n.overlaps, 1);
    }
}
