//! A test driver for the mutual-exclusion machines: every message takes one message
//! time (`MT` µs), channels are FIFO, timers fire in order, crashed processes drop what
//! they are sent. It records entries and counts messages.

use super::{MutexOut, MutualExclusion, Phase};
use crate::ids::DeviceId;
use crate::time::Instant;
use std::collections::{BTreeMap, BTreeSet};

/// One message time (µs).
pub const MT: u64 = 1_000;

pub struct Net<M: MutualExclusion> {
    pub now: u64,
    pub procs: BTreeMap<DeviceId, M>,
    pub crashed: BTreeSet<DeviceId>,
    queue: BTreeMap<(u64, u64), (DeviceId, DeviceId, M::Msg)>,
    seq: u64,
    /// Messages sent.
    pub sent: u64,
    /// (time, process) of every entry into the critical section.
    pub entries: Vec<(u64, DeviceId)>,
    /// Processes in the critical section now.
    pub inside: BTreeSet<DeviceId>,
    /// Times two processes were inside at once.
    pub overlaps: u64,
}

impl<M: MutualExclusion> Net<M> {
    pub fn new(procs: impl IntoIterator<Item = M>) -> Net<M> {
        let mut n = Net {
            now: 0,
            procs: procs.into_iter().map(|p| (p.id(), p)).collect(),
            crashed: BTreeSet::new(),
            queue: BTreeMap::new(),
            seq: 0,
            sent: 0,
            entries: Vec::new(),
            inside: BTreeSet::new(),
            overlaps: 0,
        };
        let ids: Vec<DeviceId> = n.procs.keys().copied().collect();
        for id in ids {
            n.drain(id);
        }
        n
    }

    fn drain(&mut self, id: DeviceId) {
        while let Some(o) = self.procs.get_mut(&id).and_then(|p| p.poll_output()) {
            match o {
                MutexOut::Send { to, msg } => {
                    self.sent += 1;
                    self.seq += 1;
                    self.queue.insert((self.now + MT, self.seq), (id, to, msg));
                }
                MutexOut::Enter => {
                    if !self.inside.is_empty() {
                        self.overlaps += 1;
                    }
                    self.inside.insert(id);
                    self.entries.push((self.now, id));
                }
            }
        }
    }

    pub fn request(&mut self, id: DeviceId) {
        let now = Instant(self.now);
        self.procs
            .get_mut(&id)
            .expect("process")
            .request(now)
            .expect("idle");
        self.drain(id);
    }

    pub fn release(&mut self, id: DeviceId) {
        let now = Instant(self.now);
        self.procs
            .get_mut(&id)
            .expect("process")
            .release(now)
            .expect("held");
        self.inside.remove(&id);
        self.drain(id);
    }

    pub fn phase(&self, id: DeviceId) -> Phase {
        self.procs[&id].phase()
    }

    /// Deliver messages and fire timers until nothing is due before `now + dt`.
    pub fn run_for(&mut self, dt: u64) {
        let end = self.now + dt;
        loop {
            let next_msg = self.queue.keys().next().map(|k| k.0);
            let next_timer = (self.procs.iter())
                .filter(|(id, _)| !self.crashed.contains(id))
                .filter_map(|(_, p)| p.poll_timeout().map(|t| t.0))
                .min();
            let next = [next_msg, next_timer].into_iter().flatten().min();
            let Some(t) = next.filter(|t| *t <= end) else {
                break;
            };
            self.now = self.now.max(t);
            if next_msg == Some(t) {
                let (_, (from, to, msg)) = self.queue.pop_first().expect("message");
                if !self.crashed.contains(&to) {
                    let now = Instant(self.now);
                    self.procs
                        .get_mut(&to)
                        .expect("process")
                        .handle_msg(now, from, msg);
                    self.drain(to);
                }
            } else {
                let due: Vec<DeviceId> = (self.procs.iter())
                    .filter(|(id, p)| {
                        !self.crashed.contains(id) && p.poll_timeout().is_some_and(|x| x.0 <= t)
                    })
                    .map(|(id, _)| *id)
                    .collect();
                for id in due {
                    self.procs
                        .get_mut(&id)
                        .expect("process")
                        .handle_timeout(Instant(t));
                    self.drain(id);
                }
            }
        }
        self.now = end;
    }
}

pub fn d(n: u64) -> DeviceId {
    DeviceId(n)
}
