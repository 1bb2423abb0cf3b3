//! The checkers at work: what they remember of a run and how they judge each answer,
//! each subscription event and each sample of the cluster (see [`super::checks`] for the
//! invariants and their bounds).

use super::checks::LookupViolation;
use super::truth::Staleness;
use super::world::World;
use std::collections::BTreeMap;
use std::time::Duration;
use tenure_core::DeviceId;
use tenure_core::lookup::SubId;
use tenure_core::lookup::{Durability, EntryVersion, EntryView, LeaderId, NodeState, SubEvent};

/// An acknowledged persistent version.
#[derive(Clone, Debug)]
struct Acked {
    version: EntryVersion,
    /// Real time the provider first sent it.
    sent_us: u64,
    /// Real time the acknowledgement reached the provider.
    ack_us: u64,
    interval: Duration,
}

/// The checkers' memory.
#[derive(Clone, Debug, Default)]
pub(super) struct Monitor {
    /// From this real time on (until the next fault) the leader predicate must hold.
    stable_from: u64,
    /// The requirement comes from a rare fault, a boot or a full restart (7), not from a
    /// common fault (1).
    stab_rare: bool,
    last_fault: u64,
    /// A stabilisation time is to be recorded when `stable_from` is reached.
    measuring: bool,
    /// Since when the leader predicate has held without a break.
    holds_since: Option<u64>,
    /// Since when more than `t + 1` nodes have been active.
    too_many_since: Option<u64>,
    /// From this real time on, the bounds (2)–(4) and (6) are checked.
    pub(super) armed_from: Option<u64>,
    /// Whether (5) is checked.
    pub(super) acked_armed: bool,
    /// A leader crash whose outage is being measured (real time of the crash).
    outage: Option<u64>,
    /// A leader crash whose failover (the next node to declare itself leader) is being
    /// measured (real time of the crash).
    failover: Option<u64>,
    acked: BTreeMap<String, Acked>,
    /// The last full restart: when every device crashed, and its first reboot. Entries
    /// still alive at the crash live a lifetime past the reboot.
    pub(super) blackout: Option<(u64, u64)>,
    /// Last sequence number that arrived per (subscription, leader, device it came
    /// through).
    seqs: BTreeMap<(SubId, LeaderId, DeviceId), u64>,
    /// The end of the run's final phase.
    pub(super) final_end: Option<u64>,
}

impl Monitor {
    /// All devices booted at `now`: they must stabilise within `bound`.
    pub(super) fn boot(&mut self, now: u64, bound: u64) {
        self.last_fault = now;
        self.stable_from = now + bound;
        self.stab_rare = true;
        self.measuring = true;
    }

    /// The provider revoked `key`: nothing is owed any more.
    pub(super) fn revoked(&mut self, key: &str) {
        self.acked.remove(key);
    }

    /// A persistent version was acknowledged.
    pub(super) fn acked(
        &mut self,
        key: &str,
        version: EntryVersion,
        sent_us: u64,
        ack_us: u64,
        interval: Duration,
    ) {
        let a = Acked {
            version,
            sent_us,
            ack_us,
            interval,
        };
        match self.acked.get(key) {
            Some(old) if old.version > version => {}
            _ => {
                self.acked.insert(key.to_string(), a);
            }
        }
    }

    /// Forget every acknowledgement (rare profile, before its final phase).
    pub(super) fn forget_acks(&mut self) {
        self.acked.clear();
    }

    /// Stop measuring an outage (a fault outside the common profile follows).
    pub(super) fn outage_cancel(&mut self) {
        self.outage = None;
        self.failover = None;
    }

    /// From when the leader predicate must hold.
    pub(super) fn stable_from(&self) -> u64 {
        self.stable_from
    }

    /// Whether an outage is being measured.
    pub(super) fn outage_open(&self) -> bool {
        self.outage.is_some()
    }

    /// Whether the bounded checkers are armed now.
    pub(super) fn armed(&self, now: u64) -> bool {
        self.armed_from.is_some_and(|t| now >= t)
    }
}

impl World {
    /// A fault (or repair) just happened: the leader predicate must hold again after the
    /// quiet period of its class, and stabilisation is measured from here.
    pub(super) fn fault_at(&mut self, rare: bool) {
        self.fault_at_time(rare, self.now);
    }

    /// As [`Self::fault_at`], for a fault at real time `at` (not before now).
    pub(super) fn fault_at_time(&mut self, rare: bool, at: u64) {
        let need = if rare {
            self.bounds.stabilisation_us
        } else {
            self.bounds.quiet_us
        };
        let m = &mut self.mon;
        m.last_fault = at;
        if at + need >= m.stable_from {
            m.stable_from = at + need;
            m.stab_rare = rare;
        }
        m.measuring |= rare;
        m.holds_since = None;
        m.too_many_since = None;
    }

    /// A repair the world made (restart, heal, resume).
    pub(super) fn fault_done(&mut self, what: &str) {
        self.log(|| format!("repair: {what}"));
        let rare = self.k.profile == super::knobs::Profile::Rare;
        self.fault_at(rare);
    }

    /// A crash took the leader down: measure the outage.
    pub(super) fn outage_start(&mut self) {
        self.stats.leader_crashes += 1;
        if self.mon.armed(self.now) && self.mon.outage.is_none() {
            self.mon.outage = Some(self.now);
            self.mon.failover = Some(self.now);
            self.schedule(self.now, super::world::Ev::Probe);
        }
    }

    /// A node declared itself leader: the failover being measured, if any, ended.
    pub(super) fn failover_ended(&mut self) {
        let Some(since) = self.mon.failover.take() else {
            return;
        };
        let t = self.now - since;
        self.stats.failovers += 1;
        self.stats.max_failover_us = self.stats.max_failover_us.max(t);
        self.stats.failover_samples_us.push(t);
        self.log(|| format!("failover after {t}us"));
    }

    /// A probe sent at `sent_us` was answered by a leader.
    pub(super) fn outage_answered(&mut self, sent_us: u64) {
        let Some(since) = self.mon.outage else {
            return;
        };
        if sent_us < since {
            return;
        }
        self.mon.outage = None;
        let outage = self.now - since;
        self.stats.outages += 1;
        self.stats.max_outage_us = self.stats.max_outage_us.max(outage);
        self.stats.outage_samples_us.push(outage);
        self.log(|| format!("outage ended after {outage}us"));
        if outage > self.bounds.outage_us {
            self.violations.push(LookupViolation::Outage {
                at_us: since - crate::world::START_US,
                outage_us: Some(outage),
                bound_us: self.bounds.outage_us,
            });
        }
    }

    /// Judge one key of a leader's answer to a query issued at `issued_us`.
    pub(super) fn check_answer(
        &mut self,
        key: &str,
        entry: Option<&EntryView>,
        issued_us: u64,
        leader: LeaderId,
    ) {
        let answer = entry.map(|e| e.value.as_slice());
        let st = self.truth.staleness(key, answer, issued_us, self.now);
        let shown = || match entry {
            Some(e) => format!(
                "{:?}@{}",
                String::from_utf8_lossy(&e.value),
                e.version.stamp
            ),
            None => "absent".to_string(),
        };
        let at_us = self.since_start();
        let durability = (self.work.providers.iter())
            .find(|p| p.key == key)
            .map_or(Durability::Volatile, |p| p.durability);
        match st {
            Staleness::Fabricated => self.violations.push(LookupViolation::Fabricated {
                at_us,
                key: key.to_string(),
                answer: shown(),
            }),
            Staleness::Us(x) if self.mon.armed(self.now) => {
                let (bound, max, checks) = match durability {
                    Durability::Volatile => (
                        self.bounds.volatile_us,
                        &mut self.stats.max_volatile_staleness_us,
                        &mut self.stats.volatile_checks,
                    ),
                    Durability::Persistent => (
                        self.bounds.persistent_us,
                        &mut self.stats.max_persistent_staleness_us,
                        &mut self.stats.persistent_checks,
                    ),
                };
                *checks += 1;
                *max = (*max).max(x);
                if x > bound {
                    self.violations.push(LookupViolation::Stale {
                        at_us,
                        key: key.to_string(),
                        durability,
                        staleness_us: x,
                        bound_us: bound,
                        answer: shown(),
                        leader: leader.device,
                    });
                }
            }
            Staleness::Us(_) => {}
        }
        self.check_acked(key, entry, issued_us, leader);
    }

    /// (5): an acknowledged persistent version is in every later leader answer while its
    /// provider keeps it alive.
    fn check_acked(
        &mut self,
        key: &str,
        entry: Option<&EntryView>,
        issued_us: u64,
        leader: LeaderId,
    ) {
        if !self.mon.acked_armed {
            return;
        }
        let Some(a) = self.mon.acked.get(key) else {
            return;
        };
        let life = (self.k.settings)
            .lifetime(a.interval, Durability::Persistent)
            .as_micros() as u64;
        let mut end = a.sent_us + life;
        if let Some((down, up)) = self.mon.blackout
            && issued_us >= up
            && end > down
        {
            end = end.max(up + life);
        }
        if issued_us < a.ack_us || issued_us + self.bounds.delta_us >= end {
            return;
        }
        self.stats.acked_checks += 1;
        let held = entry.map(|e| e.version);
        if held.is_none_or(|v| v < a.version) {
            self.violations.push(LookupViolation::LostPersistent {
                at_us: self.since_start(),
                key: key.to_string(),
                acked: a.version,
                answer: held,
                leader: leader.device,
            });
        }
    }

    /// (6): events of one leader arrive through one device in strictly increasing
    /// sequence (the leader's and the device's links are FIFO; a subscriber that moves
    /// may get a late event through the device it left and came back to, which it drops
    /// as old). Syncs included: they continue the sequence, as does a subscription
    /// registered anew.
    pub(super) fn check_event_order(&mut self, ev: &SubEvent, via: DeviceId) {
        let k = (ev.sub, ev.leader, via);
        let prev = self.mon.seqs.get(&k).copied();
        if let Some(p) = prev
            && ev.seq <= p
        {
            self.violations.push(LookupViolation::EventOrder {
                at_us: self.since_start(),
                sub: ev.sub,
                leader: ev.leader.device,
                previous: p,
                seq: ev.seq,
            });
        }
        self.mon.seqs.insert(k, ev.seq);
    }

    /// The leader predicate of (1) and (7): exactly one running node leads, it is the
    /// oldest active one, and every running node is passive iff its age is infinite.
    /// Returns the leader, or what is wrong.
    pub(super) fn leader_state(&self) -> Result<DeviceId, String> {
        let mut leaders = Vec::new();
        let mut actives = Vec::new();
        for (d, n) in &self.devs {
            if !self.running(*d) {
                continue;
            }
            let node = n.device.as_ref().expect("running").lookup();
            let v = node.view();
            let passive = matches!(v.state, NodeState::Passive | NodeState::Joining);
            if passive != v.start.is_none() {
                return Err(format!(
                    "{d} is {:?} with start {:?} (I2a)",
                    v.state, v.start
                ));
            }
            if node.is_leader() {
                leaders.push(*d);
            }
            if let (NodeState::Active | NodeState::Leader, Some(s)) = (v.state, v.start) {
                actives.push((s, *d));
            }
        }
        actives.sort();
        let oldest = actives.first().map(|(_, d)| *d);
        match leaders.as_slice() {
            [l] if Some(*l) == oldest => Ok(*l),
            [l] => Err(format!(
                "{l} leads but the oldest active node is {oldest:?}"
            )),
            ls => Err(format!("{} leaders {ls:?}", ls.len())),
        }
    }

    /// Published active nodes among the running ones.
    pub(super) fn active_count(&self) -> usize {
        (self.devs.iter())
            .filter(|(d, _)| self.running(**d))
            .filter(|(_, n)| {
                let st = n.device.as_ref().expect("running").lookup().state();
                matches!(st, NodeState::Active | NodeState::Leader)
            })
            .count()
    }

    /// Every sample: the leader predicate after a quiet period (1, 7), the outage's bound
    /// (2), and subscriber views (6).
    pub(super) fn sample(&mut self) {
        let now = self.now;
        let verdict = self.leader_state();
        match verdict {
            Ok(_) => {
                self.mon.holds_since.get_or_insert(now);
            }
            Err(_) => self.mon.holds_since = None,
        }
        if now >= self.mon.stable_from {
            self.stats.leader_checks += 1;
            if self.mon.measuring && verdict.is_ok() {
                self.mon.measuring = false;
                let t = self.mon.holds_since.unwrap_or(now) - self.mon.last_fault;
                self.stats.stabilisations += 1;
                self.stats.max_stabilisation_us = self.stats.max_stabilisation_us.max(t);
            }
            if let Err(why) = &verdict {
                let (at_us, since_us) = (
                    self.since_start(),
                    self.mon.last_fault - crate::world::START_US,
                );
                self.violations.push(if self.mon.stab_rare {
                    LookupViolation::NotStabilised {
                        at_us,
                        since_us,
                        bound_us: self.bounds.stabilisation_us,
                        why: why.clone(),
                    }
                } else {
                    LookupViolation::Leaders {
                        at_us,
                        quiet_us: now - self.mon.last_fault,
                        why: why.clone(),
                    }
                });
                return;
            }
            self.check_active_count();
        }
        if let Some(since) = self.mon.outage
            && now > since + self.bounds.outage_us
        {
            self.violations.push(LookupViolation::Outage {
                at_us: since - crate::world::START_US,
                outage_us: None,
                bound_us: self.bounds.outage_us,
            });
            return;
        }
        if !self.mon.armed(now) {
            for s in &mut self.work.subscribers {
                s.diverged_since = None;
            }
        } else if let Ok(l) = verdict {
            self.check_views(l);
        }
    }

    /// Part of (1): at most `t + 1` active nodes, once a joining node had time to see
    /// the others and step down.
    fn check_active_count(&mut self) {
        let n = self.active_count();
        let max = self.k.settings.hot_spares + 1;
        if n <= max {
            self.mon.too_many_since = None;
            return;
        }
        let since = *self.mon.too_many_since.get_or_insert(self.now);
        if self.now > since + self.bounds.quiet_us {
            self.violations.push(LookupViolation::Leaders {
                at_us: self.since_start(),
                quiet_us: self.now - self.mon.last_fault,
                why: format!("{n} active nodes for {}us, t + 1 = {max}", self.now - since),
            });
        }
    }

    /// (6): every subscriber's view is the leader's state under its prefix, or becomes
    /// it within the bound.
    fn check_views(&mut self, leader: DeviceId) {
        let node = self.devs[&leader].device.as_ref().expect("leader").lookup();
        let state: BTreeMap<String, Vec<u8>> = (node.data().live())
            .map(|e| (e.key.clone(), e.value.clone().unwrap_or_default()))
            .collect();
        for i in 0..self.work.subscribers.len() {
            let s = &self.work.subscribers[i];
            if s.pos.is_none() {
                continue;
            }
            self.stats.view_checks += 1;
            let mut diff = None;
            for (k, v) in state
                .iter()
                .filter(|(k, _)| tenure_core::lookup::under(k, &s.prefix))
            {
                if s.view.get(k).map(|(x, _)| x) != Some(v) {
                    diff = Some(format!(
                        "{k} is {:?} at the leader, {:?} in the view",
                        String::from_utf8_lossy(v),
                        s.view.get(k).map(|(x, _)| String::from_utf8_lossy(x))
                    ));
                    break;
                }
            }
            if diff.is_none() {
                diff = (s.view.keys()).find(|k| !state.contains_key(*k)).map(|k| {
                    format!(
                        "{k} is gone at the leader but still in the view (removal not announced)"
                    )
                });
            }
            let s = &mut self.work.subscribers[i];
            match (diff, s.diverged_since) {
                (None, Some(since)) => {
                    s.diverged_since = None;
                    let d = self.now - since;
                    self.stats.max_divergence_us = self.stats.max_divergence_us.max(d);
                }
                (None, None) => {}
                (Some(why), since) => {
                    let since = *s.diverged_since.get_or_insert(since.unwrap_or(self.now));
                    if self.now > since + self.bounds.subscriber_us {
                        let sub = s.sub;
                        self.violations.push(LookupViolation::Diverged {
                            at_us: self.since_start(),
                            sub,
                            since_us: since - crate::world::START_US,
                            bound_us: self.bounds.subscriber_us,
                            why,
                        });
                        return;
                    }
                }
            }
        }
    }
}
