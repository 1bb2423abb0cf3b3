//! The event loop the mutual-exclusion experiments run in, and their checker.
//!
//! Processes are [`MutualExclusion`] machines from `tenure-core`; messages travel over the
//! simulator's network ([`crate::net::Network`]: per-pair FIFO channels, seeded latency),
//! with one message time `MT` as the base latency and an optional jitter. Time is virtual
//! (µs) and every choice comes from the seed, so a run replays exactly. The application
//! side is plain: a process asked to request at a time does so, holds the critical section
//! for a drawn time once it may enter, releases it, and (under [`Demand::Again`]) asks
//! again after a drawn think time. At one instant, application requests come before
//! message deliveries (so a token arriving as the request is made is caught).
//!
//! The [`MutexChecker`] sees every entry and exit: two processes inside at once is a
//! violation. A crashed process leaves the critical section with its crash.

use crate::net::{Fate, Network};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use tenure_core::DeviceId;
use tenure_core::Instant;
use tenure_core::mutex::{MutexOut, MutualExclusion, Phase};
use tenure_core::rng::Rng;

/// One message time (µs): the base one-way latency.
pub const MT: u64 = 1_000;

/// Two processes in the critical section at once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MutexViolation {
    /// When (µs).
    pub at_us: u64,
    /// The process that entered.
    pub entering: DeviceId,
    /// Who was already inside.
    pub inside: Vec<DeviceId>,
}

/// Mutual exclusion: never two processes in the critical section.
#[derive(Clone, Debug, Default)]
pub struct MutexChecker {
    inside: BTreeSet<DeviceId>,
    /// Entries checked.
    pub entries: u64,
    /// Violations found.
    pub violations: Vec<MutexViolation>,
}

impl MutexChecker {
    /// `p` entered at `at_us`.
    pub fn enter(&mut self, at_us: u64, p: DeviceId) {
        self.entries += 1;
        if !self.inside.is_empty() {
            self.violations.push(MutexViolation {
                at_us,
                entering: p,
                inside: self.inside.iter().copied().collect(),
            });
        }
        self.inside.insert(p);
    }

    /// `p` left (released, or crashed).
    pub fn exit(&mut self, p: DeviceId) {
        self.inside.remove(&p);
    }
}

/// What a process does after leaving its critical section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Demand {
    /// Nothing, until asked again.
    Once,
    /// Request again after a think time drawn in `[0, think_max_us]`.
    Again {
        /// Longest think time (µs).
        think_max_us: u64,
    },
}

/// One entry into the critical section.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    /// Who entered.
    pub who: DeviceId,
    /// When it asked (µs).
    pub requested_us: u64,
    /// When it entered (µs).
    pub entered_us: u64,
    /// Messages sent in the whole run when it asked.
    pub sent_at_request: u64,
    /// Messages sent in the whole run when it entered.
    pub sent_before: u64,
    /// What the run's probe read from the machine at entry (the decentralized attempt).
    pub probe: u64,
}

#[derive(Clone, Debug)]
enum Ev<Msg> {
    Request(DeviceId),
    Release(DeviceId),
    Deliver {
        from: DeviceId,
        to: DeviceId,
        msg: Msg,
    },
}

/// A run of one algorithm.
pub struct MutexSim<M: MutualExclusion> {
    /// Virtual time (µs).
    pub now: u64,
    procs: BTreeMap<DeviceId, M>,
    crashed: BTreeSet<DeviceId>,
    /// (time, class: 0 request, 1 release, 2 delivery, sequence) → event.
    queue: BTreeMap<(u64, u8, u64), Ev<M::Msg>>,
    seq: u64,
    net: Network,
    rng: Rng,
    hold_max_us: u64,
    demand: Demand,
    requested: BTreeMap<DeviceId, (u64, u64)>,
    lose_next: u64,
    probe: fn(&M) -> u64,
    /// The checker.
    pub checker: MutexChecker,
    /// Messages sent.
    pub sent: u64,
    /// Messages lost on purpose.
    pub lost: u64,
    /// Every entry, in order.
    pub entries: Vec<Entry>,
}

impl<M: MutualExclusion> MutexSim<M> {
    /// Processes `procs`; latency `MT` plus up to `jitter_us`; a holder stays inside for
    /// `[1, hold_max_us]` µs; every draw from `seed`.
    pub fn new(
        procs: impl IntoIterator<Item = M>,
        seed: u64,
        jitter_us: u64,
        hold_max_us: u64,
        demand: Demand,
    ) -> MutexSim<M> {
        let mut rng = Rng::new(seed);
        let params = super::calm_net(jitter_us);
        let mut s = MutexSim {
            now: 0,
            procs: procs.into_iter().map(|p| (p.id(), p)).collect(),
            crashed: BTreeSet::new(),
            queue: BTreeMap::new(),
            seq: 0,
            net: Network::with_params(rng.fork(), &params),
            rng,
            hold_max_us: hold_max_us.max(1),
            demand,
            requested: BTreeMap::new(),
            lose_next: 0,
            probe: |_| 0,
            checker: MutexChecker::default(),
            sent: 0,
            lost: 0,
            entries: Vec::new(),
        };
        let ids: Vec<DeviceId> = s.procs.keys().copied().collect();
        for id in ids {
            s.drain(id);
        }
        s
    }

    /// Read `probe` from the machine at every entry (into [`Entry::probe`]).
    pub fn set_probe(&mut self, probe: fn(&M) -> u64) {
        self.probe = probe;
    }

    /// The process ids.
    pub fn ids(&self) -> Vec<DeviceId> {
        self.procs.keys().copied().collect()
    }

    /// A process's machine.
    pub fn process(&self, id: DeviceId) -> &M {
        &self.procs[&id]
    }

    /// Where process `id` stands.
    pub fn phase(&self, id: DeviceId) -> Phase {
        self.procs[&id].phase()
    }

    /// Process `id` asks to enter at `at_us`.
    pub fn request_at(&mut self, id: DeviceId, at_us: u64) {
        self.push(at_us, 0, Ev::Request(id));
    }

    /// Crash process `id` now: it stops, and what is sent to it is lost.
    pub fn crash(&mut self, id: DeviceId) {
        self.crashed.insert(id);
        self.checker.exit(id);
    }

    /// Whether process `id` has crashed.
    pub fn crashed(&self, id: DeviceId) -> bool {
        self.crashed.contains(&id)
    }

    /// Lose the next message sent (a lost token).
    pub fn lose_next_message(&mut self) {
        self.lose_next += 1;
    }

    /// Whether no message is in flight and no timer or application event is pending.
    pub fn quiet(&self) -> bool {
        self.queue.is_empty() && self.next_timer().is_none()
    }

    fn push(&mut self, at: u64, class: u8, ev: Ev<M::Msg>) {
        self.seq += 1;
        self.queue.insert((at, class, self.seq), ev);
    }

    fn next_timer(&self) -> Option<u64> {
        (self.procs.iter())
            .filter(|(id, _)| !self.crashed.contains(id))
            .filter_map(|(_, p)| p.poll_timeout().map(|t| t.0))
            .min()
    }

    fn drain(&mut self, id: DeviceId) {
        while let Some(o) = self.procs.get_mut(&id).and_then(|p| p.poll_output()) {
            match o {
                MutexOut::Send { to, msg } => {
                    self.sent += 1;
                    if self.lose_next > 0 {
                        self.lose_next -= 1;
                        self.lost += 1;
                        continue;
                    }
                    if let Fate::Deliver(times) = self.net.send(self.now, id, to) {
                        for at in times {
                            self.push(
                                at,
                                2,
                                Ev::Deliver {
                                    from: id,
                                    to,
                                    msg: msg.clone(),
                                },
                            );
                        }
                    }
                }
                MutexOut::Enter => {
                    self.checker.enter(self.now, id);
                    let (requested_us, sent_at_request) =
                        self.requested.remove(&id).unwrap_or((self.now, self.sent));
                    let probe = (self.probe)(&self.procs[&id]);
                    self.entries.push(Entry {
                        who: id,
                        requested_us,
                        sent_at_request,
                        entered_us: self.now,
                        sent_before: self.sent,
                        probe,
                    });
                    let hold = 1 + self.rng.below(self.hold_max_us);
                    self.push(self.now + hold, 1, Ev::Release(id));
                }
            }
        }
    }

    /// Run every event and timer due up to `end_us`.
    pub fn run_until(&mut self, end_us: u64) {
        loop {
            let next_ev = self.queue.keys().next().map(|k| k.0);
            let next_timer = self.next_timer();
            let t = match (next_ev, next_timer) {
                (Some(e), Some(t)) => e.min(t),
                (e, t) => match e.or(t) {
                    Some(x) => x,
                    None => break,
                },
            };
            if t > end_us {
                break;
            }
            self.now = self.now.max(t);
            if next_ev == Some(t) {
                let (_, ev) = self.queue.pop_first().expect("event");
                self.event(ev);
            } else {
                let now = Instant(self.now);
                let due: Vec<DeviceId> = (self.procs.iter())
                    .filter(|(id, p)| {
                        !self.crashed.contains(id) && p.poll_timeout().is_some_and(|x| x <= now)
                    })
                    .map(|(id, _)| *id)
                    .collect();
                for id in due {
                    self.procs
                        .get_mut(&id)
                        .expect("process")
                        .handle_timeout(now);
                    self.drain(id);
                }
            }
        }
        self.now = self.now.max(end_us);
    }

    /// Run until nothing is pending, or until `end_us`.
    pub fn run_until_quiet(&mut self, end_us: u64) {
        while !self.quiet() && self.now < end_us {
            let step = self.now + MT;
            self.run_until(step.min(end_us));
        }
    }

    fn event(&mut self, ev: Ev<M::Msg>) {
        let now = Instant(self.now);
        match ev {
            Ev::Deliver { from, to, msg } => {
                if self.crashed.contains(&to) {
                    return;
                }
                self.procs
                    .get_mut(&to)
                    .expect("process")
                    .handle_msg(now, from, msg);
                self.drain(to);
            }
            Ev::Request(id) => {
                if self.crashed.contains(&id) || self.phase(id) != Phase::Idle {
                    return;
                }
                self.requested.insert(id, (self.now, self.sent));
                let p = self.procs.get_mut(&id).expect("process");
                p.request(now).expect("an idle process may request");
                self.drain(id);
            }
            Ev::Release(id) => {
                if self.crashed.contains(&id) {
                    return;
                }
                self.checker.exit(id);
                let p = self.procs.get_mut(&id).expect("process");
                p.release(now).expect("a holder may release");
                self.drain(id);
                if let Demand::Again { think_max_us } = self.demand {
                    let think = self.rng.below(think_max_us + 1);
                    self.push(self.now + think, 0, Ev::Request(id));
                }
            }
        }
    }
}
