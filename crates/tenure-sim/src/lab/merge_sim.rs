//! The event loop the merge rows run in, and the merge checkers (seed 004 §4.5–§5.1).
//!
//! Sites are [`tenure_core::menasce::Site`] machines over the simulator's network
//! (per-pair FIFO channels, latency in `[MT, MT + jitter]`). One run: the sites are cut
//! into `k` logical components, each with its own LC and up list, and every LC probes
//! with WERE YOU ALIVE from a drawn phase on; each lock's data is on `copies` sites
//! (`LOC(P)`), so an LC grants only the locks local to its component. Application
//! programs send lock and release requests to the LCs at drawn times throughout. At a
//! drawn instant the partition heals; the run ends when every site is in one component
//! or at the liveness bound.
//!
//! The [`MergeChecker`] checks, on every event:
//! - **pairwise merge** (§4.5 C1, C2; §5.1 C1.1, C2.1): in the graph of established
//!   P-S connections (e-arcs, from an LC in CONNECTION ESTABLISHED or PRIMARY to its
//!   secondary) no LC has two primaries or is primary and secondary at once; and no site
//!   installs a SUBSTITUTE YOUR TABLE from a second merge before the first is complete;
//! - **lock table union** (§4.5): a ledger of the locks each LC granted (LOCK GRANTED and
//!   RELEASE GRANTED, moved to the primary when a merge completes) gives, at every SYT
//!   installation of merge (LC1, LC2), exactly the locks LC1 and LC2 hold — none lost,
//!   none invented — and no lock held in both components (a double holder the union would
//!   collapse; the seed rules it out by locality, §6 Theorem 8); and once the sites are
//!   one component, every LOCK table holds exactly the ledger's locks;
//! - **deadlock freedom** (§5.1 Theorem 7): once the partition heals, every site ends in
//!   one component — one LC, NORMAL everywhere, its up list every site — within the
//!   bound `k × (WYA period + (2n + 20)τ)`.

use crate::net::{Fate, Network};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tenure_core::DeviceId;
use tenure_core::Instant;
use tenure_core::menasce::{
    LockId, MenasceMsg, MenasceOut, PlantedBugs, PsState, Settings, Site, Status,
};
use tenure_core::rng::Rng;

/// One message time (µs): the base one-way latency.
pub const MT: u64 = 1_000;

/// What the merge checkers found wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum MergeViolation {
    /// An LC with two primaries, or primary and secondary at once (C1.1, C2.1).
    NotPairwise {
        /// The LC.
        lc: DeviceId,
        /// Its primaries (e-arcs into it).
        primaries: Vec<DeviceId>,
        /// Its secondary (e-arc out of it), if any.
        secondary: Option<DeviceId>,
    },
    /// A site installed a table from a second merge while the first was not complete.
    TwoMerges {
        /// The site.
        site: DeviceId,
        /// The first merge (primary, secondary).
        first: (DeviceId, DeviceId),
        /// The second.
        second: (DeviceId, DeviceId),
    },
    /// A lock held in one of the merging components is missing from an installed table.
    LostLock {
        /// The site.
        site: DeviceId,
        /// The lock.
        lock: LockId,
    },
    /// An installed table holds a lock neither component held.
    ExtraLock {
        /// The site.
        site: DeviceId,
        /// The lock.
        lock: LockId,
    },
    /// A lock held in both merging components: two holders for one lock.
    DoubleHolder {
        /// The lock.
        lock: LockId,
        /// The LCs that granted it.
        holders: Vec<DeviceId>,
    },
    /// The partition healed but the sites were not one component by the bound.
    NotOneComponent {
        /// The working LCs at the bound.
        lcs: Vec<DeviceId>,
        /// The bound, from the heal (µs).
        bound_us: u64,
    },
}

/// The merge checkers (see the module doc).
#[derive(Clone, Debug, Default)]
pub struct MergeChecker {
    /// Per lock, the LCs holding it (that granted it, or whose component merged into
    /// theirs).
    ledger: BTreeMap<LockId, BTreeSet<DeviceId>>,
    /// Per site, the merge whose SYT it installed, until that merge completes.
    installing: BTreeMap<DeviceId, (DeviceId, DeviceId)>,
    /// Locks compared at SYT installations.
    pub locks_checked: u64,
    /// SYT installations checked.
    pub installs_checked: u64,
    /// Violations found.
    pub violations: Vec<MergeViolation>,
}

impl MergeChecker {
    /// LC `lc` granted (`lock_request`) or released a lock.
    fn granted(&mut self, lc: DeviceId, lock: LockId, lock_request: bool) {
        let holders = self.ledger.entry(lock).or_default();
        if lock_request {
            holders.insert(lc);
        } else {
            holders.remove(&lc);
        }
    }

    /// The merge `(primary, secondary)` completed: the secondary's locks are the
    /// primary's.
    fn merged(&mut self, primary: DeviceId, secondary: DeviceId) {
        for holders in self.ledger.values_mut() {
            if holders.remove(&secondary) {
                holders.insert(primary);
            }
        }
        self.installing.retain(|_, m| *m != (primary, secondary));
    }

    /// `site` installed the SYT of merge `(primary, secondary)`.
    fn installed(&mut self, site: &Site, primary: DeviceId, secondary: DeviceId) {
        self.installs_checked += 1;
        let id = site.id();
        if let Some(first) = self.installing.insert(id, (primary, secondary))
            && first != (primary, secondary)
        {
            self.violations.push(MergeViolation::TwoMerges {
                site: id,
                first,
                second: (primary, secondary),
            });
        }
        let both = [primary, secondary];
        for (lock, holders) in &self.ledger {
            let held: Vec<DeviceId> = both
                .iter()
                .copied()
                .filter(|l| holders.contains(l))
                .collect();
            if held.len() > 1 {
                let v = MergeViolation::DoubleHolder {
                    lock: *lock,
                    holders: held.clone(),
                };
                if !self.violations.contains(&v) {
                    self.violations.push(v);
                }
            }
            self.locks_checked += 1;
            if !held.is_empty() && !site.table().contains_key(lock) {
                self.violations.push(MergeViolation::LostLock {
                    site: id,
                    lock: *lock,
                });
            }
        }
        for lock in site.table().keys() {
            let held = (self.ledger.get(lock)).is_some_and(|h| both.iter().any(|l| h.contains(l)));
            if !held {
                self.violations.push(MergeViolation::ExtraLock {
                    site: id,
                    lock: *lock,
                });
            }
        }
    }

    /// At the end, in one component: every site's LOCK table holds exactly the locks of
    /// the ledger.
    fn check_final<'a>(&mut self, sites: impl Iterator<Item = &'a Site>) {
        let held: BTreeSet<LockId> = (self.ledger.iter())
            .filter(|(_, h)| !h.is_empty())
            .map(|(l, _)| *l)
            .collect();
        for s in sites {
            let table: BTreeSet<LockId> = s.table().keys().copied().collect();
            for lock in held.difference(&table) {
                (self.violations).push(MergeViolation::LostLock {
                    site: s.id(),
                    lock: *lock,
                });
            }
            for lock in table.difference(&held) {
                (self.violations).push(MergeViolation::ExtraLock {
                    site: s.id(),
                    lock: *lock,
                });
            }
        }
    }

    /// The e-graph conditions C1.1 and C2.1 over the sites' P-S states.
    fn check_pairwise<'a>(&mut self, sites: impl Iterator<Item = &'a Site>) {
        let mut into: BTreeMap<DeviceId, Vec<DeviceId>> = BTreeMap::new();
        let mut out: BTreeMap<DeviceId, DeviceId> = BTreeMap::new();
        for s in sites {
            if let PsState::ConnectionEstablished { secondary } | PsState::Primary { secondary } =
                s.ps_state()
            {
                into.entry(secondary).or_default().push(s.id());
                out.insert(s.id(), secondary);
            }
        }
        for (lc, primaries) in into {
            let secondary = out.get(&lc).copied();
            if primaries.len() > 1 || secondary.is_some() {
                let v = MergeViolation::NotPairwise {
                    lc,
                    primaries,
                    secondary,
                };
                if !self.violations.contains(&v) {
                    self.violations.push(v);
                }
            }
        }
    }
}

/// When the LCs send their WERE YOU ALIVE rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phases {
    /// Component 0's LC probes first after the heal, the others half a period later:
    /// one merge at a time, the cost of one merge.
    FirstComponentFirst,
    /// Every LC at the same instants: all components try to merge at once.
    Together,
}

/// How one run is drawn.
#[derive(Clone, Debug)]
pub struct MergeScenario {
    /// The components' sizes (component 0 is C1 with [`Phases::FirstComponentFirst`]).
    pub sizes: Vec<u64>,
    /// When the LCs probe.
    pub phases: Phases,
    /// Sites holding each lock's data (`LOC(P)`).
    pub copies: u64,
    /// Latency jitter above `MT` (µs).
    pub jitter_us: u64,
    /// Planted bugs, at every site.
    pub planted: PlantedBugs,
}

/// What one run measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MergeRun {
    /// Merge protocol messages sent from the heal on, by the seed's name.
    pub by_name: BTreeMap<&'static str, u64>,
    /// Their total.
    pub messages: u64,
    /// Merges completed.
    pub merges: u64,
    /// From the heal to one component (µs), if reached.
    pub one_component_us: Option<u64>,
    /// The liveness bound, from the heal (µs).
    pub bound_us: u64,
    /// The WYA period (µs).
    pub wya_period_us: u64,
    /// Size of the first merge's primary and secondary components.
    pub first_merge: Option<(u64, u64)>,
    /// From the first WERE YOU ALIVE sent after the heal to the first merge's
    /// completion (the SYT back at LC1) (µs).
    pub first_merge_us: Option<u64>,
    /// Locks granted in the components before the heal.
    pub granted_before_heal: u64,
    /// SYT installations and locks checked.
    pub installs_checked: u64,
    /// Locks compared.
    pub locks_checked: u64,
    /// Violations.
    pub violations: Vec<MergeViolation>,
}

struct Flight {
    from: DeviceId,
    to: DeviceId,
    msg: MenasceMsg,
}

/// One run of the merge experiment.
pub fn run(sc: &MergeScenario, seed: u64) -> MergeRun {
    let mut rng = Rng::new(seed);
    let params = super::calm_net(sc.jitter_us);
    let mut net = Network::with_params(rng.fork(), &params);
    let n: u64 = sc.sizes.iter().sum();
    let k = sc.sizes.len() as u64;
    let order: Vec<DeviceId> = (1..=n).map(DeviceId).collect();
    // Sites to components at random; each component's LC a random member.
    let mut pool = order.clone();
    let mut groups: Vec<Vec<DeviceId>> = Vec::new();
    for &size in &sc.sizes {
        let mut g: Vec<DeviceId> = (0..size)
            .map(|_| pool.remove(rng.below(pool.len() as u64) as usize))
            .collect();
        g.sort();
        groups.push(g);
    }
    let lcs: Vec<DeviceId> = (groups.iter())
        .map(|g| g[rng.below(g.len() as u64) as usize])
        .collect();
    let mut settings = Settings::for_message_time(Duration::from_micros(MT + sc.jitter_us));
    settings.copies = Some(sc.copies);
    let period = settings.wya_period.as_micros() as u64;
    let mut sites: BTreeMap<DeviceId, Site> = BTreeMap::new();
    let mut component: BTreeMap<DeviceId, usize> = BTreeMap::new();
    for (i, g) in groups.iter().enumerate() {
        for s in g {
            let mut site =
                Site::in_component(*s, order.clone(), lcs[i], g.clone(), settings.clone());
            site.planted = sc.planted.clone();
            sites.insert(*s, site);
            component.insert(*s, i);
        }
    }
    // The heal, and the LCs' WYA phases.
    let o1 = rng.below(period);
    let heal_us = match sc.phases {
        // LC1's round at o1 + 2P is the first after the heal; the others' rounds fall
        // half a period after LC1's.
        Phases::FirstComponentFirst => o1 + 2 * period - 1 - rng.below(period / 2 - 5 * MT),
        Phases::Together => 2 * period + rng.below(period),
    };
    for (i, lc) in lcs.iter().enumerate() {
        let first = match sc.phases {
            Phases::FirstComponentFirst if i > 0 => o1 + period / 2,
            _ => o1,
        };
        sites
            .get_mut(lc)
            .expect("lc")
            .start_reconnection_detection(Instant(first));
    }
    let bound_us = k * (period + (2 * n + 20) * (MT + sc.jitter_us));
    let end_us = heal_us + bound_us;
    // The workload: requests at the LCs at drawn times, before and after the heal.
    let mut requests: Vec<(u64, usize)> = (0..6 * k + rng.below(6 * k))
        .map(|_| (rng.below(end_us), rng.below(k) as usize))
        .collect();
    requests.sort();
    let lock_pool = 3 * n;
    let mut checker = MergeChecker::default();
    let mut queue: BTreeMap<(u64, u64), Flight> = BTreeMap::new();
    let mut fseq = 0u64;
    let mut now = 0u64;
    let mut healed = false;
    let mut ri = 0;
    let mut out = MergeRun {
        bound_us,
        wya_period_us: period,
        ..Default::default()
    };
    // The LC each component's requests go to (the primary after a merge).
    let mut lc_of: Vec<DeviceId> = lcs.clone();
    let mut first_wya_us: Option<u64> = None;
    let mut size_of: BTreeMap<DeviceId, u64> =
        (lcs.iter().zip(&sc.sizes)).map(|(l, s)| (*l, *s)).collect();
    loop {
        let ev = queue.keys().next().map(|k| k.0);
        let timer = (sites.values())
            .filter_map(|p| p.poll_timeout().map(|t| t.0))
            .min();
        let app = requests.get(ri).map(|r| r.0);
        let heal = (!healed).then_some(heal_us);
        let Some(t) = [ev, timer, app, heal].into_iter().flatten().min() else {
            break;
        };
        if t > end_us {
            break;
        }
        now = now.max(t);
        let inst = Instant(now);
        let mut touched: Vec<DeviceId> = Vec::new();
        let mut syt_at: Option<(DeviceId, DeviceId, DeviceId)> = None;
        if heal == Some(t) {
            healed = true;
            out.granted_before_heal =
                checker.ledger.values().filter(|h| !h.is_empty()).count() as u64;
        } else if app == Some(t) {
            let c = requests[ri].1;
            ri += 1;
            let lc = lc_of[c];
            let p = sites.get_mut(&lc).expect("lc");
            let held: Vec<LockId> = p.table().keys().copied().collect();
            if !held.is_empty() && rng.chance(0.4) {
                let lock = held[rng.below(held.len() as u64) as usize];
                let _ = p.release(inst, lock);
            } else {
                let lock = LockId(1 + rng.below(lock_pool));
                let _ = p.lock(inst, lock);
            }
            touched.push(lc);
        } else if ev == Some(t) {
            let (_, f) = queue.pop_first().expect("event");
            if let MenasceMsg::SubstituteYourTable(syt) = &f.msg {
                syt_at = Some((f.to, syt.primary, syt.secondary));
            }
            let p = sites.get_mut(&f.to).expect("site");
            p.handle_msg(inst, f.from, f.msg);
            touched.push(f.to);
        } else {
            let due: Vec<DeviceId> = (sites.iter())
                .filter(|(_, p)| p.poll_timeout().is_some_and(|x| x.0 <= t))
                .map(|(s, _)| *s)
                .collect();
            for s in due {
                sites.get_mut(&s).expect("site").handle_timeout(inst);
                touched.push(s);
            }
        }
        let mut merged_now = false;
        for s in touched {
            while let Some(o) = sites.get_mut(&s).and_then(Site::poll_output) {
                match o {
                    MenasceOut::Send { to, msg } => {
                        if let (Some((at, primary, secondary)), MenasceMsg::SubstituteYourTable(_)) =
                            (syt_at, &msg)
                            && at == s
                        {
                            checker.installed(&sites[&s], primary, secondary);
                            syt_at = None;
                        }
                        if healed && matches!(msg, MenasceMsg::WereYouAlive) {
                            first_wya_us.get_or_insert(now);
                        }
                        if healed && msg.is_merge() {
                            out.messages += 1;
                            *out.by_name.entry(msg.name()).or_default() += 1;
                        }
                        let cut = !healed && component.get(&s) != component.get(&to);
                        if cut {
                            continue;
                        }
                        if let Fate::Deliver(times) = net.send(now, s, to) {
                            for at in times {
                                fseq += 1;
                                queue.insert(
                                    (at, fseq),
                                    Flight {
                                        from: s,
                                        to,
                                        msg: msg.clone(),
                                    },
                                );
                            }
                        }
                    }
                    MenasceOut::Granted { lock, lock_request } => {
                        checker.granted(s, lock, lock_request)
                    }
                    MenasceOut::Merged { secondary, .. } => {
                        checker.merged(s, secondary);
                        out.merges += 1;
                        let (a, b) = (size_of[&s], size_of[&secondary]);
                        out.first_merge.get_or_insert((a, b));
                        if let Some(w) = first_wya_us {
                            out.first_merge_us.get_or_insert(now - w);
                        }
                        size_of.insert(s, a + b);
                        for l in lc_of.iter_mut() {
                            if *l == secondary {
                                *l = s;
                            }
                        }
                        merged_now = true;
                    }
                    MenasceOut::BecameLc => {}
                }
            }
        }
        checker.check_pairwise(sites.values());
        if merged_now && one_component(&sites) {
            out.one_component_us = Some(now - heal_us);
            checker.check_final(sites.values());
            break;
        }
    }
    if out.one_component_us.is_none() {
        let lcs: Vec<DeviceId> = (sites.values())
            .filter(|p| p.is_lc())
            .map(Site::id)
            .collect();
        checker
            .violations
            .push(MergeViolation::NotOneComponent { lcs, bound_us });
    }
    out.installs_checked = checker.installs_checked;
    out.locks_checked = checker.locks_checked;
    out.violations = checker.violations;
    out
}

/// Every site NORMAL under one LC whose up list is every site.
fn one_component(sites: &BTreeMap<DeviceId, Site>) -> bool {
    let Some(lc) = sites.values().next().and_then(Site::lc) else {
        return false;
    };
    let all = sites.len();
    sites
        .values()
        .all(|p| p.status() == Status::Normal && p.lc() == Some(lc))
        && sites
            .get(&lc)
            .is_some_and(|p| p.is_lc() && p.up().len() == all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(sizes: &[u64], phases: Phases, planted: PlantedBugs) -> MergeScenario {
        MergeScenario {
            sizes: sizes.to_vec(),
            phases,
            copies: 2,
            jitter_us: MT,
            planted,
        }
    }

    // Seed 004 §4.5–§5.1: pairwise merges, the union of the LOCK tables and one
    // component at the end, whether one merge at a time or many components at once.
    #[test]
    fn the_merge_checkers_pass_the_protocol() {
        let mut contended = 0;
        for (sizes, phases) in [
            (vec![3, 2], Phases::FirstComponentFirst),
            (vec![2, 2, 2, 2], Phases::Together),
            (vec![3, 1, 2, 2, 1, 3], Phases::Together),
        ] {
            for seed in 0..30 {
                let r = run(&scenario(&sizes, phases, PlantedBugs::default()), seed);
                assert!(r.violations.is_empty(), "{sizes:?} seed={seed}: {r:?}");
                assert_eq!(r.merges, sizes.len() as u64 - 1);
                assert!(r.installs_checked > 0);
                contended += r.by_name.get("MAR").copied().unwrap_or(0)
                    + r.by_name.get("CC").copied().unwrap_or(0);
            }
        }
        assert!(contended > 0, "no run contended");
    }

    fn finds(
        sizes: &[u64],
        phases: Phases,
        planted: PlantedBugs,
        f: impl Fn(&MergeViolation) -> bool,
    ) -> bool {
        (0..200).any(|seed| {
            run(&scenario(sizes, phases, planted.clone()), seed)
                .violations
                .iter()
                .any(&f)
        })
    }

    // The planted bug `keep_attempt_on_lum` (no CLOSE CONNECTION): an LC becomes a
    // primary while it is a secondary — the pairwise checker reports it.
    #[test]
    fn the_pairwise_checker_reports_an_attempt_kept_without_cc() {
        let planted = PlantedBugs {
            keep_attempt_on_lum: true,
            ..Default::default()
        };
        assert!(finds(
            &[2, 2, 2, 2, 2],
            Phases::Together,
            planted,
            |v| matches!(v, MergeViolation::NotPairwise { .. })
        ));
    }

    // The planted bug `attempt_rejects_every_lum` (no LUM/CC;MA): a cycle of attempts
    // never breaks — the deadlock checker reports no single component by the bound.
    #[test]
    fn the_deadlock_checker_reports_attempts_that_reject_every_lum() {
        let planted = PlantedBugs {
            attempt_rejects_every_lum: true,
            ..Default::default()
        };
        assert!(finds(&[2, 2, 2], Phases::Together, planted, |v| matches!(
            v,
            MergeViolation::NotOneComponent { .. }
        )));
    }

    // The planted bug `ignore_locality`: two components grant the same lock — the union
    // checker reports a double holder.
    #[test]
    fn the_union_checker_reports_a_lock_held_in_both_components() {
        let planted = PlantedBugs {
            ignore_locality: true,
            ..Default::default()
        };
        assert!(finds(
            &[3, 3],
            Phases::FirstComponentFirst,
            planted,
            |v| matches!(v, MergeViolation::DoubleHolder { .. })
        ));
    }

    // The planted bug `syt_drops_secondary_table`: the union checker reports the
    // secondary's locks lost.
    #[test]
    fn the_union_checker_reports_the_secondary_table_dropped() {
        let planted = PlantedBugs {
            syt_drops_secondary_table: true,
            ..Default::default()
        };
        assert!(finds(
            &[3, 3],
            Phases::FirstComponentFirst,
            planted,
            |v| matches!(v, MergeViolation::LostLock { .. })
        ));
    }
}
