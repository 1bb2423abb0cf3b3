//! The event loop the recovery experiment runs in, and its checkers.
//!
//! Sites are [`tenure_core::menasce::Site`] machines; messages travel over the
//! simulator's network ([`crate::net::Network`]: per-pair FIFO channels, latency drawn in
//! `[MT, MT + jitter]`). One run: application programs send lock and release requests to
//! the LC at drawn times; at a drawn instant the LC crashes — usually in the middle of a
//! SafeTalk round — with, on request, the sites that follow it in the nomination order
//! (down nominees); what a crashed site had not yet sent is lost (seed 004 §2). An
//! application program at a drawn surviving site times out on the LC a drawn time later
//! and detects the crash. The run ends when nothing is pending.
//!
//! The [`RecoveryChecker`] watches every ACCEPT a surviving site takes before the
//! recovery and, at the end, checks **maximum forward progress** as the seed defines it
//! (§4.1, Assertion 4): a lock is in every surviving site's LOCK table iff the latest
//! request for it that any surviving site accepted is a lock request — and **exactly one
//! LC**, known to every surviving site (Theorem 3).

use crate::net::{Fate, Network};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tenure_core::DeviceId;
use tenure_core::Instant;
use tenure_core::menasce::{
    LockId, MenasceMsg, MenasceOut, PlantedBugs, Seq, Settings, Site, Status,
};
use tenure_core::rng::Rng;

/// One message time (µs): the base one-way latency.
pub const MT: u64 = 1_000;

/// What the recovery checker found wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum RecoveryViolation {
    /// A surviving site's LOCK table disagrees with maximum forward progress.
    ForwardProgress {
        /// The site.
        site: DeviceId,
        /// The lock.
        lock: LockId,
        /// Whether the lock should be in the table.
        expected: bool,
    },
    /// Not exactly one working LC among the surviving sites.
    LcCount {
        /// The working LCs.
        lcs: Vec<DeviceId>,
    },
    /// A surviving site is not in NORMAL status under the one LC.
    Disagrees {
        /// The site.
        site: DeviceId,
        /// The LC it knows.
        lc: Option<DeviceId>,
        /// Its status.
        status: Status,
    },
}

/// Maximum forward progress and one LC (seed 004 §4.1–§4.2).
#[derive(Clone, Debug, Default)]
pub struct RecoveryChecker {
    /// Per lock, the latest request any surviving site accepted: (seq, lock request?).
    latest: BTreeMap<LockId, (Seq, bool)>,
    /// Per site, what it accepted: (lock, seq, lock request?).
    accepted: BTreeMap<DeviceId, Vec<(LockId, Seq, bool)>>,
    /// Locks compared.
    pub locks_checked: u64,
    /// Violations found.
    pub violations: Vec<RecoveryViolation>,
}

impl RecoveryChecker {
    /// `site` accepted a request (AL or AR delivered while it followed the sender).
    fn accepted(&mut self, site: DeviceId, lock: LockId, seq: Seq, lock_request: bool) {
        (self.accepted.entry(site).or_default()).push((lock, seq, lock_request));
    }

    /// Check the end state: `sites` are the surviving sites.
    pub fn check<'a>(&mut self, sites: impl IntoIterator<Item = &'a Site> + Clone) {
        let alive: BTreeSet<DeviceId> = sites.clone().into_iter().map(Site::id).collect();
        for (site, reqs) in &self.accepted {
            if !alive.contains(site) {
                continue;
            }
            for (lock, seq, lr) in reqs {
                let e = self.latest.entry(*lock).or_insert((*seq, *lr));
                if *seq > e.0 {
                    *e = (*seq, *lr);
                }
            }
        }
        for s in sites.clone() {
            for (lock, (_, lr)) in &self.latest {
                self.locks_checked += 1;
                if s.table().contains_key(lock) != *lr {
                    self.violations.push(RecoveryViolation::ForwardProgress {
                        site: s.id(),
                        lock: *lock,
                        expected: *lr,
                    });
                }
            }
        }
        let lcs: Vec<DeviceId> = (sites.clone().into_iter())
            .filter(|s| s.is_lc())
            .map(Site::id)
            .collect();
        if lcs.len() != 1 {
            self.violations.push(RecoveryViolation::LcCount { lcs });
            return;
        }
        for s in sites {
            if s.status() != Status::Normal || s.lc() != Some(lcs[0]) {
                self.violations.push(RecoveryViolation::Disagrees {
                    site: s.id(),
                    lc: s.lc(),
                    status: s.status(),
                });
            }
        }
    }
}

/// How one run is drawn.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Sites that take part in the recovery (`n`): the network has these, the LC and the
    /// down nominees.
    pub n: u64,
    /// Sites after the LC in the nomination order that crash with it.
    pub down_nominees: u64,
    /// Latency jitter above `MT` (µs).
    pub jitter_us: u64,
    /// The nominator gives up on a nominee after half a message time, without
    /// retransmitting: nominees race (the seed's "more than one LC could be nominated").
    pub hasty_nominator: bool,
    /// Planted bugs, at every site.
    pub planted: PlantedBugs,
}

/// What one run measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RecoveryRun {
    /// Recovery messages (LCR), from detection to the end, without the network's
    /// acknowledgments and retransmissions of ACCEPT NOMINATION.
    pub c_rec: u64,
    /// The network's acknowledgments and retransmissions of ACCEPT NOMINATION.
    pub transport: u64,
    /// The same, by the seed's message name.
    pub by_name: BTreeMap<&'static str, u64>,
    /// From detection to the last RESUME NORMAL ACTIVITY delivered, or to the new LC's
    /// taking over when no other site survives (µs).
    pub r_us: u64,
    /// Mean one-way latency of the recovery messages (µs): the seed's `τ`.
    pub tau_us: f64,
    /// Mean over the UT, RU and RNA broadcasts of their slowest message (µs): `τ_max`.
    pub tau_max_us: f64,
    /// The nominator's `τ_out` (µs).
    pub tau_out_us: u64,
    /// Locks compared by the checker, and its violations.
    pub locks_checked: u64,
    /// Violations.
    pub violations: Vec<RecoveryViolation>,
    /// The new LC.
    pub new_lc: Option<DeviceId>,
    /// Requests the LC had started (AL or AR sent) when it crashed.
    pub requests: u64,
    /// Requests in some surviving site's L- or R-list when the crash was detected (the
    /// LC crashed in the middle of SafeTalk).
    pub pending_at_detection: u64,
}

struct Flight {
    from: DeviceId,
    to: DeviceId,
    sent_us: u64,
    msg: MenasceMsg,
}

/// One run of the recovery experiment.
pub fn run(sc: &Scenario, seed: u64) -> RecoveryRun {
    let mut rng = Rng::new(seed);
    let params = super::calm_net(sc.jitter_us);
    let mut net = Network::with_params(rng.fork(), &params);
    let total = sc.n + 1 + sc.down_nominees;
    let order: Vec<DeviceId> = (1..=total).map(DeviceId).collect();
    let lc = order[rng.below(total) as usize];
    let mut settings = Settings::for_message_time(Duration::from_micros(MT + sc.jitter_us));
    if sc.hasty_nominator {
        settings.an_retry = Duration::from_micros(MT / 2);
        settings.an_retries = 0;
    }
    let tau_out_us = settings.tau_out().as_micros() as u64;
    let mut sites: BTreeMap<DeviceId, Site> = (order.iter())
        .map(|s| {
            let mut site = Site::new(*s, order.clone(), lc, settings.clone());
            site.planted = sc.planted.clone();
            (*s, site)
        })
        .collect();
    // The crashed sites: the LC and the nominees after it.
    let li = order.iter().position(|s| *s == lc).expect("lc");
    let down: BTreeSet<DeviceId> = (0..=sc.down_nominees)
        .map(|k| order[(li + k as usize) % order.len()])
        .collect();
    let survivors: Vec<DeviceId> = order
        .iter()
        .copied()
        .filter(|s| !down.contains(s))
        .collect();
    // The workload: requests at drawn times, the crash at a drawn instant.
    let crash_us = 20 * MT + rng.below(20 * MT);
    // The detector: an application program at any surviving site but the nominee (the
    // seed's figures have a nominator other than the nominee).
    let nominee = survivors
        .iter()
        .copied()
        .find(|s| order[(li + sc.down_nominees as usize + 1) % order.len()] == *s)
        .expect("nominee");
    let others: Vec<DeviceId> = survivors
        .iter()
        .copied()
        .filter(|s| *s != nominee)
        .collect();
    let detector = others[rng.below(others.len() as u64) as usize];
    let detect_us = crash_us + 5 * MT + rng.below(5 * MT);
    let mut requests_at: Vec<u64> = (0..8 + rng.below(8)).map(|_| rng.below(crash_us)).collect();
    requests_at.sort();
    let mut checker = RecoveryChecker::default();
    let mut queue: BTreeMap<(u64, u64), Flight> = BTreeMap::new();
    let mut seq = 0u64;
    let mut now = 0u64;
    let mut crashed: BTreeSet<DeviceId> = BTreeSet::new();
    let mut out = RecoveryRun {
        tau_out_us,
        ..Default::default()
    };
    let mut next_lock = 1u64;
    let mut held: Vec<LockId> = Vec::new();
    let mut lat = Vec::new();
    let mut phase_max: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut detected = false;
    let mut last_rna = 0u64;
    let mut an_seen: BTreeSet<(DeviceId, Vec<DeviceId>)> = BTreeSet::new();
    let mut ri = 0;
    let bound_us = detect_us + 10_000 * MT;
    loop {
        let ev = queue.keys().next().map(|k| k.0);
        let timer = (sites.iter())
            .filter(|(s, _)| !crashed.contains(s))
            .filter_map(|(_, p)| p.poll_timeout().map(|t| t.0))
            .min();
        let app = requests_at.get(ri).copied();
        let crash = (crashed.is_empty()).then_some(crash_us);
        let detect = (!detected).then_some(detect_us);
        let Some(t) = [ev, timer, app, crash, detect].into_iter().flatten().min() else {
            break;
        };
        if t > bound_us {
            break;
        }
        now = now.max(t);
        let inst = Instant(now);
        let mut touched: Vec<DeviceId> = Vec::new();
        if app == Some(t) && crash != Some(t) {
            ri += 1;
            if !crashed.contains(&lc) {
                let p = sites.get_mut(&lc).expect("lc");
                let release = !held.is_empty() && rng.chance(0.5);
                if release {
                    let lock = held.remove(rng.below(held.len() as u64) as usize);
                    if p.release(inst, lock).is_ok() {
                        out.requests += 1;
                    }
                } else {
                    let lock = LockId(next_lock);
                    next_lock += 1;
                    if p.lock(inst, lock).is_ok() {
                        out.requests += 1;
                    }
                }
                touched.push(lc);
            }
        } else if crash == Some(t) {
            crashed.extend(down.iter().copied());
            queue.retain(|_, f| !down.contains(&f.from));
        } else if detect == Some(t) {
            detected = true;
            let pending: BTreeSet<LockId> = (sites.iter())
                .filter(|(s, _)| !crashed.contains(s))
                .flat_map(|(_, p)| p.l_list().keys().chain(p.r_list().keys()).copied())
                .collect();
            out.pending_at_detection = pending.len() as u64;
            sites
                .get_mut(&detector)
                .expect("detector")
                .detect_lc_crash(inst);
            touched.push(detector);
        } else if ev == Some(t) {
            let (_, f) = queue.pop_first().expect("event");
            if crashed.contains(&f.to) {
                continue;
            }
            let p = sites.get_mut(&f.to).expect("site");
            if detected && f.msg.is_recovery() {
                lat.push((now - f.sent_us) as f64);
                let name = f.msg.name();
                if matches!(name, "UT" | "RU" | "RNA") {
                    let m = phase_max.entry(name).or_default();
                    *m = (*m).max(now - f.sent_us);
                }
                if name == "RNA" {
                    last_rna = now;
                }
            }
            let follows = p.status() == Status::Normal && p.lc() == Some(f.from);
            match &f.msg {
                MenasceMsg::AcceptLock { lock, seq, .. } if follows => {
                    checker.accepted(f.to, *lock, *seq, true)
                }
                MenasceMsg::AcceptRelease { lock, seq, .. } if follows => {
                    checker.accepted(f.to, *lock, *seq, false)
                }
                _ => {}
            }
            p.handle_msg(inst, f.from, f.msg);
            touched.push(f.to);
        } else {
            let due: Vec<DeviceId> = (sites.iter())
                .filter(|(s, p)| !crashed.contains(s) && p.poll_timeout().is_some_and(|x| x.0 <= t))
                .map(|(s, _)| *s)
                .collect();
            for s in due {
                sites.get_mut(&s).expect("site").handle_timeout(inst);
                touched.push(s);
            }
        }
        for s in touched {
            while let Some(o) = sites.get_mut(&s).and_then(Site::poll_output) {
                match o {
                    MenasceOut::Send { to, msg } => {
                        if detected && msg.is_recovery() {
                            let again = match &msg {
                                MenasceMsg::AcceptNomination { trial, .. } => {
                                    !an_seen.insert((to, trial.clone()))
                                }
                                _ => false,
                            };
                            if again || msg.is_transport_ack() {
                                out.transport += 1;
                            } else {
                                out.c_rec += 1;
                                *out.by_name.entry(msg.name()).or_default() += 1;
                            }
                        }
                        if let Fate::Deliver(times) = net.send(now, s, to) {
                            for at in times {
                                seq += 1;
                                queue.insert(
                                    (at, seq),
                                    Flight {
                                        from: s,
                                        to,
                                        sent_us: now,
                                        msg: msg.clone(),
                                    },
                                );
                            }
                        }
                    }
                    MenasceOut::Granted { lock, lock_request } => {
                        if lock_request {
                            held.push(lock);
                        }
                    }
                    MenasceOut::Merged { .. } => {}
                    MenasceOut::BecameLc => {
                        if detected {
                            out.new_lc = Some(s);
                            last_rna = last_rna.max(now);
                        }
                    }
                }
            }
        }
    }
    out.r_us = last_rna.saturating_sub(detect_us);
    out.tau_us = if lat.is_empty() {
        f64::NAN
    } else {
        lat.iter().sum::<f64>() / lat.len() as f64
    };
    out.tau_max_us = if phase_max.is_empty() {
        f64::NAN
    } else {
        phase_max.values().sum::<u64>() as f64 / phase_max.len() as f64
    };
    let alive: Vec<&Site> = (sites.iter())
        .filter(|(s, _)| !crashed.contains(s))
        .map(|(_, p)| p)
        .collect();
    checker.check(alive.iter().copied());
    out.locks_checked = checker.locks_checked;
    out.violations = checker.violations;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(n: u64, jitter_us: u64, hasty: bool, planted: PlantedBugs) -> Scenario {
        Scenario {
            n,
            down_nominees: 0,
            jitter_us,
            hasty_nominator: hasty,
            planted,
        }
    }

    // Seed 004 §4.1 Assertion 4 and Theorem 3, under races: latency jitter and a hasty
    // nominator (several nominees, KILL NA) — every run keeps maximum forward progress
    // and ends with one LC.
    #[test]
    fn the_checkers_pass_the_protocol_under_races() {
        let mut killed = 0;
        for n in [3, 5, 8] {
            for seed in 0..40 {
                let r = run(
                    &scenario(n, MT, seed % 2 == 0, PlantedBugs::default()),
                    seed,
                );
                assert!(r.violations.is_empty(), "n={n} seed={seed}: {r:?}");
                assert!(r.locks_checked > 0);
                killed += r.by_name.get("KILL NA").copied().unwrap_or(0);
            }
        }
        assert!(killed > 0, "no run raced two nominees");
    }

    // The planted bug of the NA merge (sequence numbers ignored): the forward-progress
    // checker reports a released lock kept in the tables.
    #[test]
    fn the_checker_reports_a_merge_that_ignores_sequence_numbers() {
        let planted = PlantedBugs {
            merge_ignores_seq: true,
            ..Default::default()
        };
        let found = (0..200).find_map(|seed| {
            let r = run(&scenario(5, MT, false, planted.clone()), seed);
            r.violations
                .iter()
                .find(|v| matches!(v, RecoveryViolation::ForwardProgress { .. }))
                .cloned()
        });
        assert!(found.is_some(), "the planted merge bug went unnoticed");
    }

    // The planted bug of the NA algorithm (every NA accepted, no KILL NA): with racing
    // nominees the one-LC checker reports two LCs or sites that disagree.
    #[test]
    fn the_checker_reports_two_lcs_when_every_na_is_accepted() {
        let planted = PlantedBugs {
            accept_every_na: true,
            ..Default::default()
        };
        let found = (0..200).find_map(|seed| {
            let r = run(&scenario(6, MT, true, planted.clone()), seed);
            r.violations
                .iter()
                .find(|v| {
                    matches!(
                        v,
                        RecoveryViolation::LcCount { .. } | RecoveryViolation::Disagrees { .. }
                    )
                })
                .cloned()
        });
        assert!(found.is_some(), "the planted NA bug went unnoticed");
    }
}
