//! The lookup nemesis: seed 003's failure classes as schedules.
//!
//! - **Common**: once the cluster is armed (stabilised after boot), one fault at a time:
//!   the loss of one message (chosen to hurt: an update, query or answer to or from the
//!   leader, a heartbeat, a join message, a subscription event, a client's request...),
//!   the crash of one node — the leader half the time — restarted after a short or long
//!   delay, or a short power outage that crashes every node but the UPS-designated one.
//!   The next fault comes only when every device runs, the leader predicate holds, `t`
//!   nodes are active, and `MPRI + 3 HB + RTT + Θ` (and a random extra) have passed since
//!   the last fault or repair: each fault is repaired before the next, as seed 003's
//!   common-case analysis assumes.
//! - **Rare**: bursts of partitions (halves or one node, one- or two-way), heals,
//!   crashes of one or several nodes, pauses longer than three heartbeats, state
//!   corruption and loss bursts, each burst ended by healing, restarting and resuming
//!   everything, followed by a calm as long as the stabilisation bound.

use super::knobs::{LookupKnobs, Profile};
use super::world::{Ev, World};
use crate::net::PartitionMode;
use tenure_core::lookup::node::Corruption;
use tenure_core::lookup::{Durability, LookupMsg, LookupRequest};
use tenure_core::msg::Msg;
use tenure_core::rng::Rng;
use tenure_core::{DeviceId, Instant};

/// Which message a targeted loss drops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Any,
    Heartbeat,
    ForwardUpdate,
    ForwardPersistent,
    ForwardQuery,
    ForwardSubscribe,
    Answer,
    Event,
    Join,
    Merge,
}

const KINDS: [Kind; 10] = [
    Kind::Any,
    Kind::Heartbeat,
    Kind::ForwardUpdate,
    Kind::ForwardPersistent,
    Kind::ForwardQuery,
    Kind::ForwardSubscribe,
    Kind::Answer,
    Kind::Event,
    Kind::Join,
    Kind::Merge,
];

/// One armed targeted loss.
#[derive(Clone, Copy, Debug)]
struct Drop {
    kind: Kind,
    from: Option<DeviceId>,
    to: Option<DeviceId>,
    /// It lapses unmatched at this real time.
    until: u64,
}

impl Kind {
    fn matches(self, msg: &Msg) -> bool {
        let Msg::Lookup(m) = msg else {
            return false;
        };
        let fwd = |f: &dyn Fn(&LookupRequest) -> bool| matches!(m, LookupMsg::Forward { req, .. } if f(req));
        match self {
            Kind::Any => true,
            Kind::Heartbeat => matches!(m, LookupMsg::Heartbeat { .. }),
            Kind::ForwardUpdate => fwd(&|r| {
                matches!(
                    r,
                    LookupRequest::Publish { .. } | LookupRequest::Revoke { .. }
                )
            }),
            Kind::ForwardPersistent => fwd(&|r| {
                matches!(
                    r,
                    LookupRequest::Publish {
                        durability: Durability::Persistent,
                        ..
                    } | LookupRequest::Revoke {
                        durability: Durability::Persistent,
                        ..
                    }
                )
            }),
            Kind::ForwardQuery => fwd(&|r| r.is_query()),
            Kind::ForwardSubscribe => fwd(&|r| matches!(r, LookupRequest::Subscribe { .. })),
            Kind::Answer => matches!(m, LookupMsg::Answer { .. }),
            Kind::Event => matches!(m, LookupMsg::Event(_)),
            Kind::Join => matches!(
                m,
                LookupMsg::CanIJoin { .. } | LookupMsg::Ack { .. } | LookupMsg::Nack { .. }
            ),
            Kind::Merge => matches!(m, LookupMsg::Merge { .. }),
        }
    }
}

/// The nemesis' state.
pub(super) struct Nemesis {
    rng: Rng,
    drop: Option<Drop>,
    /// Drop the next client request (a provider's, querier's or subscriber's).
    drop_request: bool,
    loss_until: u64,
    /// Common: the next fault not before this real time.
    next_at: u64,
    /// Rare: the burst in progress ends at this real time.
    burst_until: Option<u64>,
    /// Rare: the next burst starts at this real time.
    calm_until: u64,
}

impl Nemesis {
    pub(super) fn new(rng: Rng, _k: &LookupKnobs) -> Nemesis {
        Nemesis {
            rng,
            drop: None,
            drop_request: false,
            loss_until: 0,
            next_at: 0,
            burst_until: None,
            calm_until: 0,
        }
    }

    /// Whether the message `from → to` is the one the nemesis drops (or falls in a loss
    /// burst).
    pub(super) fn drops(&mut self, now: u64, from: DeviceId, to: DeviceId, msg: &Msg) -> bool {
        if let Some(d) = self.drop {
            if now > d.until {
                self.drop = None;
            } else if d.kind.matches(msg)
                && d.from.is_none_or(|f| f == from)
                && d.to.is_none_or(|t| t == to)
            {
                self.drop = None;
                return true;
            }
        }
        now < self.loss_until && self.rng.chance(0.3)
    }

    /// Whether the nemesis drops this client request.
    pub(super) fn drops_request(&mut self, _req: &LookupRequest) -> bool {
        std::mem::take(&mut self.drop_request)
    }

    /// No more targeted losses.
    pub(super) fn clear_drops(&mut self) {
        self.drop = None;
        self.drop_request = false;
        self.loss_until = 0;
    }

    fn below(&mut self, n: u64) -> u64 {
        self.rng.below(n.max(1))
    }
}

impl World {
    /// The nemesis' turn (every 100 ms of real time while faults are on).
    pub(super) fn nemesis_step(&mut self) {
        if !self.faults_on {
            return;
        }
        match self.k.profile {
            Profile::Common => self.common_step(),
            Profile::Rare => self.rare_step(),
        }
        if self.violations.is_empty() {
            let at = match self.k.profile {
                Profile::Common => self.now + 100_000,
                Profile::Rare => self.now + 1 + self.nemesis.below(2 * self.k.rare_mean_us),
            };
            self.schedule(at, Ev::Nemesis);
        }
    }

    /// The current leader, if exactly one.
    fn the_leader(&self) -> Option<DeviceId> {
        self.leader_state().ok()
    }

    // ---- common ---------------------------------------------------------------------

    fn common_step(&mut self) {
        if self.mon.armed_from.is_none() {
            // Armed once the boot's stabilisation has been checked and every boot-time
            // effect (first publishes before any node was active) has passed.
            if self.now >= self.mon.stable_from() && self.leader_state().is_ok() {
                let at = self.now + self.bounds.persistent_us;
                self.mon.armed_from = Some(at);
                self.mon.acked_armed = true;
                self.nemesis.next_at = at;
                self.log(|| format!("armed from {at}"));
            }
            return;
        }
        let healthy = self.devs.keys().all(|d| self.running(*d))
            && self.leader_state().is_ok()
            && self.active_count() >= self.k.settings.hot_spares.min(self.k.devices as usize)
            && !self.mon.outage_open()
            && self.nemesis.drop.is_none()
            && !self.nemesis.drop_request;
        if !healthy {
            self.nemesis.next_at = self.nemesis.next_at.max(self.now + self.common_gap());
            return;
        }
        if self.now < self.nemesis.next_at {
            return;
        }
        let w = self.k.common_weights;
        let mut pick = self.nemesis.below((w[0] + w[1] + w[2]) as u64) as u32;
        let which = if pick < w[0] {
            0
        } else {
            pick -= w[0];
            if pick < w[1] { 1 } else { 2 }
        };
        match which {
            0 => self.lose_one(),
            1 => self.crash_one(),
            _ => self.power_outage(),
        }
        self.fault_at(false);
        self.nemesis.next_at = self.now + self.common_gap();
    }

    fn common_gap(&mut self) -> u64 {
        let s = &self.k.settings;
        us(s.max_persistent_refresh_interval)
            + 3 * us(s.heartbeat_interval)
            + us(s.roundtrip_delay)
            + self.k.theta_us
            + self.nemesis.below(3_000_000)
    }

    fn lose_one(&mut self) {
        let leader = self.the_leader();
        if self.nemesis.rng.chance(0.15) {
            self.nemesis.drop_request = true;
            self.log(|| "nemesis: lose the next client request".into());
            return;
        }
        let kind = KINDS[self.nemesis.below(KINDS.len() as u64) as usize];
        let (from, to) = match self.nemesis.below(3) {
            0 => (None, leader),
            1 => (leader, None),
            _ => (None, None),
        };
        let until = self.now + us(self.k.settings.max_persistent_refresh_interval);
        self.nemesis.drop = Some(Drop {
            kind,
            from,
            to,
            until,
        });
        self.log(|| format!("nemesis: lose the next {kind:?} from {from:?} to {to:?}"));
    }

    fn restart_after(&mut self, d: DeviceId, delay: u64) {
        self.schedule(self.now + delay, Ev::Restart(d));
    }

    fn crash_one(&mut self) {
        let leader = self.the_leader();
        let d = match leader {
            Some(l) if self.nemesis.rng.chance(0.5) => l,
            _ => DeviceId(1 + self.nemesis.below(self.k.devices)),
        };
        let long = self.nemesis.rng.chance(self.k.long_down_p);
        let delay = if long {
            5_000_000 + self.nemesis.below(15_000_000)
        } else {
            100_000 + self.nemesis.below(2_900_000)
        };
        self.log(|| format!("nemesis: crash {d} for {delay}us"));
        self.crash(d);
        self.restart_after(d, delay);
        if Some(d) == leader {
            self.outage_start();
        }
    }

    fn power_outage(&mut self) {
        let Some(ups) = self.k.settings.ups else {
            return self.crash_one();
        };
        let leader = self.the_leader();
        self.stats.power_outages += 1;
        self.log(|| format!("nemesis: power outage (UPS {ups})"));
        for d in self.ids() {
            if d != ups {
                self.crash(d);
                let delay = 100_000 + self.nemesis.below(1_900_000);
                self.restart_after(d, delay);
            }
        }
        if leader.is_some_and(|l| l != ups) {
            self.outage_start();
        }
    }

    // ---- rare -----------------------------------------------------------------------

    fn rare_step(&mut self) {
        match self.nemesis.burst_until {
            Some(end) if self.now >= end => {
                self.end_burst();
                self.nemesis.burst_until = None;
                self.nemesis.calm_until = self.now + self.bounds.stabilisation_us + 1_000_000;
            }
            Some(_) => self.rare_action(),
            None if self.now >= self.nemesis.calm_until => {
                let len = 2_000_000 + self.nemesis.below(6_000_000);
                self.nemesis.burst_until = Some(self.now + len);
                self.net.faults_on = true;
                self.log(|| format!("nemesis: burst for {len}us"));
                self.rare_action();
            }
            None => {}
        }
    }

    /// Heal, restart and resume everything.
    fn end_burst(&mut self) {
        self.log(|| "nemesis: burst ends".into());
        // Calm means calm: no random loss or slow path until the next burst.
        self.net.faults_on = false;
        self.net.heal();
        self.nemesis.clear_drops();
        for d in self.ids() {
            if self.devs[&d].device.is_none() {
                self.boot(d);
            }
            if self.devs[&d].paused_until.is_some() {
                self.devs.get_mut(&d).expect("device").paused_until = Some(self.now);
                self.resume(d);
            }
        }
        self.fault_at(true);
    }

    fn rare_action(&mut self) {
        let w = self.k.rare_weights;
        let total: u32 = w.iter().sum();
        let mut pick = self.nemesis.below(total as u64) as u32;
        let mut i = 0;
        while pick >= w[i] {
            pick -= w[i];
            i += 1;
        }
        let ids = self.ids();
        let n = ids.len() as u64;
        let any = ids[self.nemesis.below(n) as usize];
        match i {
            0 => {
                let mode = if self.nemesis.rng.chance(0.5) {
                    PartitionMode::RandomHalves
                } else {
                    PartitionMode::IsolateOne
                };
                let one_way = self.nemesis.rng.chance(0.5);
                let p = (self.net)
                    .partition(&mut self.nemesis.rng, self.now, &ids, mode, one_way)
                    .clone();
                let dur = 300_000 + self.nemesis.below(3_000_000);
                self.schedule(self.now + dur, Ev::Heal(p.id));
                self.stats.partitions += 1;
                self.log(|| {
                    format!(
                        "nemesis: partition {:?} one_way={one_way} for {dur}us",
                        p.side
                    )
                });
            }
            1 => {
                self.net.heal();
                self.log(|| "nemesis: heal".into());
            }
            2 | 3 => {
                let k = if i == 2 {
                    1
                } else {
                    2 + self.nemesis.below(n - 1)
                };
                for _ in 0..k {
                    let d = ids[self.nemesis.below(n) as usize];
                    if self.devs[&d].device.is_some() {
                        self.crash(d);
                        let delay = 100_000 + self.nemesis.below(5_000_000);
                        self.restart_after(d, delay);
                    }
                }
            }
            4 => {
                if self.running(any) {
                    let hb3 = 3 * us(self.k.settings.heartbeat_interval);
                    let dur = hb3 + self.nemesis.below(self.k.pause_max_us - hb3);
                    self.devs.get_mut(&any).expect("device").paused_until = Some(self.now + dur);
                    self.schedule(self.now + dur, Ev::Resume(any));
                    self.stats.pauses += 1;
                    self.log(|| format!("nemesis: pause {any} for {dur}us"));
                }
            }
            5 => self.corrupt(),
            _ => {
                let dur = 500_000 + self.nemesis.below(2_500_000);
                self.nemesis.loss_until = self.now + dur;
                self.log(|| format!("nemesis: loss burst for {dur}us"));
            }
        }
        self.fault_at(true);
    }

    /// Transient state corruption (seed 003's rare failures): zero leaders, two leaders,
    /// a fake age, random flags, or every node passive.
    pub(super) fn corrupt(&mut self) {
        let running: Vec<DeviceId> = self
            .ids()
            .into_iter()
            .filter(|d| self.running(*d))
            .collect();
        if running.is_empty() {
            return;
        }
        self.stats.corruptions += 1;
        let variant = self.nemesis.below(5);
        let hb = us(self.k.settings.heartbeat_interval);
        let mut plan: Vec<(DeviceId, Corruption)> = Vec::new();
        let local = |w: &World, d: DeviceId| w.devs[&d].clock.local(w.now);
        let view = |w: &World, d: DeviceId| {
            let n = w.devs[&d].device.as_ref().expect("running").lookup();
            (n.view(), n.is_leader())
        };
        match variant {
            0 => {
                for &d in &running {
                    let (v, leader) = view(self, d);
                    if leader {
                        plan.push((d, flags(true, false, v.start)));
                    }
                }
            }
            1 => {
                let d = running[self.nemesis.below(running.len() as u64) as usize];
                let start = view(self, d).0.start.or(Some(local(self, d)));
                plan.push((d, flags(true, true, start)));
            }
            2 => {
                let d = running[self.nemesis.below(running.len() as u64) as usize];
                let of = DeviceId(1 + self.nemesis.below(self.k.devices + 1));
                let now = local(self, d);
                let start = match self.nemesis.below(4) {
                    0 => None,
                    1 => Some(Instant(now.0.saturating_sub(3_600_000_000))),
                    2 => Some(now + std::time::Duration::from_secs(3600)),
                    _ => Some(now),
                };
                // Arbitrary: even heard an hour from now (a node that is down, or is
                // not there, sends no heartbeat that would overwrite it).
                let heard = if self.nemesis.rng.chance(0.3) {
                    Instant(now.0 + self.nemesis.below(3_600_000_000))
                } else {
                    Instant(now.0.saturating_sub(self.nemesis.below(3 * hb)))
                };
                plan.push((d, Corruption::FakeAge { of, start, heard }));
            }
            3 => {
                let d = running[self.nemesis.below(running.len() as u64) as usize];
                let now = local(self, d);
                let start = match self.nemesis.below(3) {
                    0 => None,
                    1 => Some(Instant(
                        now.0.saturating_sub(self.nemesis.below(60_000_000)),
                    )),
                    _ => Some(Instant(now.0 + self.nemesis.below(60_000_000))),
                };
                let active = self.nemesis.rng.chance(0.5);
                let leader = self.nemesis.rng.chance(0.5);
                plan.push((d, flags(active, leader, start)));
            }
            _ => {
                for &d in &running {
                    plan.push((d, flags(false, false, None)));
                }
            }
        }
        for (d, c) in plan {
            self.log(|| format!("nemesis: corrupt {d}: {c:?}"));
            if let Some(dev) = self.devs.get_mut(&d).and_then(|n| n.device.as_mut()) {
                dev.lookup_mut().corrupt(c);
            }
            self.arm_timer(d);
        }
    }

    // ---- the final phase --------------------------------------------------------------

    /// Common profile: every device crashes and restarts within a second (a short
    /// blackout). Acknowledged persistent entries must survive it; the bounds are checked
    /// again once the cluster has stabilised and every entry lived a lifetime.
    pub(super) fn full_restart(&mut self) {
        self.stats.full_restarts += 1;
        self.log(|| "nemesis: full restart of every device".into());
        let mut first = u64::MAX;
        let mut last = 0;
        for d in self.ids() {
            self.crash(d);
            let at = self.now + 100_000 + self.nemesis.below(900_000);
            first = first.min(at);
            last = last.max(at);
            self.schedule(at, Ev::Restart(d));
        }
        self.mon.blackout = Some((self.now, first));
        self.mon.outage_cancel();
        let settle = self.settle_us();
        self.mon.armed_from = Some(last + settle);
        self.mon.final_end = Some(last + settle + 5_000_000);
        self.fault_at_time(true, last);
    }

    /// Rare profile: everything healed, faults off; the cluster must stabilise, then the
    /// bounds hold again once every entry had time to be refreshed or to expire.
    pub(super) fn rare_settle(&mut self) {
        self.fault_at(true);
        self.mon.forget_acks();
        let settle = self.settle_us();
        self.mon.armed_from = Some(self.now + settle);
        self.mon.acked_armed = true;
        self.mon.final_end = Some(self.now + settle + 10_000_000);
    }

    /// Stabilisation, then two persistent lifetimes and the persistent staleness bound.
    fn settle_us(&self) -> u64 {
        let s = &self.k.settings;
        self.bounds.stabilisation_us
            + 2 * us(s.lifetime(s.max_persistent_refresh_interval, Durability::Persistent))
            + self.bounds.persistent_us
    }

    /// How long the final phase runs.
    pub(super) fn final_phase_us(&self) -> u64 {
        self.mon
            .final_end
            .map_or(2_000_000, |e| e.saturating_sub(self.now).max(1_000_000))
    }
}

fn us(d: std::time::Duration) -> u64 {
    d.as_micros() as u64
}

fn flags(active: bool, leader: bool, start: Option<Instant>) -> Corruption {
    Corruption::Flags {
        active,
        leader,
        start,
    }
}
