//! Membership changes in the store world (DESIGN §6): the set of devices is replicated
//! state, changed only by the elected coordinator — devices are admitted (`cluster add`)
//! and retired (`cluster remove`: chunks move, managers migrate, then the device retires
//! and its process stops for good).
//!
//! Some seeds start spare devices with `join` (running, not members). While faults are
//! on, an operator now and then asks for a change ([`MembershipKnobs`]): add a spare, or
//! remove a member (never leaving fewer running active members than the replication
//! factor). The request goes to a random running device and is repeated, as an operator
//! would, until the newest record shows it. Crashes, pauses, partitions and loss go on
//! meanwhile.
//!
//! - **Records move forward** (safety): the record a device holds never gets an older
//!   version, and two records with the same version are the same record.
//! - **Retired is retired** (safety): once a device's retirement is settled, that
//!   device never again applies a coordinator command, serves a chunk or holds one the
//!   store's working manager uses, and no other device follows it as coordinator of a
//!   term elected after its retirement. A retirement is settled when a majority of the
//!   members of the record that retired it hold a record listing it, or when the device
//!   itself holds one (it stops then). Before that the record may be lost with its
//!   coordinator (a new coordinator starts from the newest record among a majority's
//!   reports, DESIGN §6), and the device stays `Retiring` in every surviving record:
//!   drained, and a candidate for nothing until it is retired again.
//! - **Changes complete** (liveness): after faults stop, within the liveness bound,
//!   every requested add is admitted and every requested remove retired (its process
//!   stopped), every running member holds the same record, every store's working
//!   manager has the full replication on active members only, and one coordinator leads
//!   (the election checker's convergence, over members).

use crate::election::Histogram;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use tenure_core::DeviceId;
use tenure_core::election::Term;
use tenure_core::election::members::{Members, MembersVersion};
use tenure_core::rng::Rng;

/// What the seed draws for membership changes.
#[derive(Clone, Debug, Serialize)]
pub struct MembershipKnobs {
    /// Spare devices started with `join` (not members at the start).
    pub spares: u64,
    /// Mean time between the operator's membership changes while faults are on (µs;
    /// 0: none in this run).
    pub change_mean_us: u64,
    /// Probability that a change is a removal when an add is possible too.
    pub remove_p: f64,
    /// The operator repeats a request this often until the record shows it (µs).
    pub repeat_us: u64,
}

impl MembershipKnobs {
    /// Draw from the run's membership generator.
    pub fn draw(rng: &mut Rng) -> MembershipKnobs {
        MembershipKnobs {
            spares: [0, 0, 1, 2][rng.below(4) as usize],
            change_mean_us: if rng.chance(0.2) {
                0
            } else {
                1_500_000 + rng.below(6_000_000)
            },
            remove_p: [0.3, 0.5, 0.7][rng.below(3) as usize],
            repeat_us: 500_000 + rng.below(1_500_000),
        }
    }
}

/// A broken membership invariant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum MembershipViolation {
    /// A device took a record older than (or as old as) the one it held.
    VersionBackwards {
        /// The device.
        device: DeviceId,
        /// The version it held.
        held: MembersVersion,
        /// The version it took.
        took: MembersVersion,
    },
    /// Two devices held different records with the same version.
    SameVersionDiffers {
        /// The version.
        version: MembersVersion,
        /// The device that held the second one.
        device: DeviceId,
        /// The difference.
        why: String,
    },
    /// A retired device acted (applied a command, served or held a chunk in use, took
    /// part in an election).
    RetiredActed {
        /// The device.
        device: DeviceId,
        /// What it did.
        what: String,
    },
    /// After faults stopped, membership did not settle within the bound.
    NotConverged {
        /// How long since faults stopped (µs).
        after_us: u64,
        /// The bound (µs).
        bound_us: u64,
        /// What is still pending.
        why: String,
    },
}

impl MembershipViolation {
    /// Whether the violation is of liveness.
    pub fn is_liveness(&self) -> bool {
        matches!(self, MembershipViolation::NotConverged { .. })
    }
}

fn v(x: &MembersVersion) -> String {
    format!("{}/{}/{}", x.n, x.term.n, x.term.leader)
}

impl std::fmt::Display for MembershipViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MembershipViolation::VersionBackwards { device, held, took } => write!(
                f,
                "membership record went backwards at {device}: it held version {} and took {}",
                v(held),
                v(took)
            ),
            MembershipViolation::SameVersionDiffers {
                version,
                device,
                why,
            } => write!(
                f,
                "two membership records with version {}: {device}'s differs ({why})",
                v(version)
            ),
            MembershipViolation::RetiredActed { device, what } => {
                write!(f, "retired device {device} {what}")
            }
            MembershipViolation::NotConverged {
                after_us,
                bound_us,
                why,
            } => write!(
                f,
                "membership not settled {:.3} s after faults stopped (bound {:.3} s): {why}",
                *after_us as f64 / 1e6,
                *bound_us as f64 / 1e6
            ),
        }
    }
}

/// What the membership changes of a run (or a sweep) did, and how often the checkers
/// looked.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MembershipStats {
    /// Runs that started spare devices.
    pub runs_with_spares: u64,
    /// Adds the operator asked for.
    pub adds_requested: u64,
    /// Of those, admitted (the record showed the device).
    pub adds_admitted: u64,
    /// Removes the operator asked for.
    pub removes_requested: u64,
    /// Of those, retired in the record.
    pub removes_retired: u64,
    /// Retired devices whose process stopped (they observed their retirement).
    pub retirements: u64,
    /// Requests sent, repeats included.
    pub requests_sent: u64,
    /// Request to admission, per add (ms of simulated time).
    pub add_ms: Histogram,
    /// Request to retirement, per remove (ms of simulated time).
    pub remove_ms: Histogram,
    /// Liveness phases that began with a change pending.
    pub pending_at_liveness: u64,
    /// Longest time from faults stopping to settled membership (µs).
    pub max_settle_us: u64,
    /// Records adopted, checked against the device's previous one and every other
    /// record of their version.
    pub record_checks: u64,
    /// Actions and chunks checked against retirements.
    pub retired_checks: u64,
    /// Liveness samples of membership.
    pub convergence_checks: u64,
}

impl MembershipStats {
    /// Add another run's figures.
    pub fn add(&mut self, o: &MembershipStats) {
        self.runs_with_spares += o.runs_with_spares;
        self.adds_requested += o.adds_requested;
        self.adds_admitted += o.adds_admitted;
        self.removes_requested += o.removes_requested;
        self.removes_retired += o.removes_retired;
        self.retirements += o.retirements;
        self.requests_sent += o.requests_sent;
        self.add_ms.add(&o.add_ms);
        self.remove_ms.add(&o.remove_ms);
        self.pending_at_liveness += o.pending_at_liveness;
        self.max_settle_us = self.max_settle_us.max(o.max_settle_us);
        self.record_checks += o.record_checks;
        self.retired_checks += o.retired_checks;
        self.convergence_checks += o.convergence_checks;
    }
}

/// The membership checkers' memory of a run.
#[derive(Clone, Debug, Default)]
pub struct MembershipChecker {
    /// The version each device holds (its disk's at boot).
    held: BTreeMap<DeviceId, MembersVersion>,
    /// Every record seen, by version.
    records: BTreeMap<MembersVersion, Members>,
    /// The newest record seen anywhere.
    newest: Members,
    /// Devices whose retirement is settled: when (µs), and the highest term counter
    /// anyone had followed by then.
    retired: BTreeMap<DeviceId, (u64, u64)>,
    /// Retirements some record lists but not yet settled: the members of the first
    /// record that listed it, and the devices that hold a record listing it.
    unsettled: BTreeMap<DeviceId, (BTreeSet<DeviceId>, BTreeSet<DeviceId>)>,
    /// The highest term counter anyone followed.
    max_term_n: u64,
    /// The run's figures.
    pub stats: MembershipStats,
    /// Violations found.
    pub violations: Vec<MembershipViolation>,
}

impl MembershipChecker {
    /// A checker for a cluster whose bootstrap record is `bootstrap`.
    pub fn new(bootstrap: Members) -> MembershipChecker {
        MembershipChecker {
            records: BTreeMap::from([(bootstrap.version, bootstrap.clone())]),
            newest: bootstrap,
            ..Default::default()
        }
    }

    /// The newest record any device holds or held.
    pub fn newest(&self) -> &Members {
        &self.newest
    }

    /// Whether `d`'s retirement is settled (see the module's doc).
    pub fn is_retired(&self, d: DeviceId) -> bool {
        self.retired.contains_key(&d)
    }

    /// Device `d` booted holding `disk` (none: the bootstrap record).
    pub fn booted(&mut self, now: u64, d: DeviceId, disk: Option<&Members>) {
        let version = disk.map(|m| m.version).unwrap_or_default();
        self.held.insert(d, version);
        if let Some(m) = disk {
            self.note(now, d, m);
        }
    }

    /// Coordinator `d` sent its record `m`.
    pub fn sent(&mut self, now: u64, d: DeviceId, m: &Members) {
        self.stats.record_checks += 1;
        self.note(now, d, m);
    }

    /// Device `d` adopted `m` (an `Observation::Members`).
    pub fn adopted(&mut self, now: u64, d: DeviceId, m: &Members) {
        self.stats.record_checks += 1;
        let held = self.held.get(&d).copied().unwrap_or_default();
        if m.version <= held {
            self.push(MembershipViolation::VersionBackwards {
                device: d,
                held,
                took: m.version,
            });
        }
        self.held.insert(d, m.version);
        self.note(now, d, m);
    }

    /// A record `d` holds: the same as every other record of its version; the newest
    /// one and the retirements it lists are noted.
    fn note(&mut self, now: u64, d: DeviceId, m: &Members) {
        match self.records.get(&m.version) {
            Some(r) if r != m => {
                let why = format!(
                    "members {:?} retired {:?} against {:?} retired {:?}",
                    m.ids(),
                    m.retired,
                    r.ids(),
                    r.retired
                );
                self.push(MembershipViolation::SameVersionDiffers {
                    version: m.version,
                    device: d,
                    why,
                });
            }
            Some(_) => {}
            None => {
                self.records.insert(m.version, m.clone());
            }
        }
        if m.version > self.newest.version {
            self.newest = m.clone();
        }
        for r in &m.retired {
            if self.retired.contains_key(r) {
                continue;
            }
            let (voters, holders) = (self.unsettled.entry(*r))
                .or_insert_with(|| (m.ids().into_iter().collect(), BTreeSet::new()));
            holders.insert(d);
            let held = holders.intersection(voters).count();
            if d == *r || 2 * held > voters.len() {
                self.unsettled.remove(r);
                self.retired.insert(*r, (now, self.max_term_n));
            }
        }
    }

    /// Device `d`, holding `record`, follows (or is) the coordinator of `term`: no device
    /// follows a device its own record lists as retired. (Elections are not quorum
    /// votes, seed 002 §14.3: a side of a partition that has not heard of a retirement
    /// may elect the retired device; once a member holds the record it must not follow
    /// it, and the liveness check requires everyone to hold it after the faults stop.)
    pub fn coordinator(&mut self, d: DeviceId, term: Term, record: &Members) {
        self.stats.retired_checks += 1;
        let who = term.leader;
        if who != d && record.retired.contains(&who) {
            let what = format!(
                "is followed by {d} as coordinator of term {}, though {d}'s record (version {}/{}) says it retired",
                term.n, record.version.n, record.version.term.n
            );
            self.push(MembershipViolation::RetiredActed { device: who, what });
        }
        self.max_term_n = self.max_term_n.max(term.n);
    }

    /// Device `d`, holding `record`, applied a coordinator command of `term`: a retired
    /// device applies none, and no device applies one from a coordinator its record
    /// lists as retired.
    pub fn command_applied(&mut self, d: DeviceId, term: Term, record: &Members) {
        self.stats.retired_checks += 1;
        if self.is_retired(d) {
            self.push(MembershipViolation::RetiredActed {
                device: d,
                what: format!("applied a command of term {}/{}", term.n, term.leader),
            });
        }
        if term.leader != d && record.retired.contains(&term.leader) {
            self.push(MembershipViolation::RetiredActed {
                device: term.leader,
                what: format!(
                    "had its command of term {} applied by {d}, whose record says it retired",
                    term.n
                ),
            });
        }
    }

    /// Device `d` served an operation on one of its chunks.
    pub fn chunk_served(&mut self, d: DeviceId, chunk: impl std::fmt::Display) {
        self.stats.retired_checks += 1;
        if self.is_retired(d) {
            self.push(MembershipViolation::RetiredActed {
                device: d,
                what: format!("served an operation on chunk {chunk}"),
            });
        }
    }

    /// The working manager `mgr` of `store` uses `chunk`, on device `on`.
    pub fn chunk_in_use(
        &mut self,
        on: DeviceId,
        chunk: impl std::fmt::Display,
        store: impl std::fmt::Display,
        mgr: DeviceId,
    ) {
        self.stats.retired_checks += 1;
        if self.is_retired(on) {
            self.push(MembershipViolation::RetiredActed {
                device: on,
                what: format!("holds chunk {chunk}, in the layout {mgr} manages {store} with"),
            });
        }
    }

    fn push(&mut self, v: MembershipViolation) {
        if !self.violations.contains(&v) {
            self.violations.push(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u64, leader: u64) -> Term {
        Term {
            n,
            leader: DeviceId(leader),
        }
    }

    fn boot3() -> Members {
        Members::bootstrap(&[DeviceId(1), DeviceId(2), DeviceId(3)])
    }

    // DESIGN §6: records only move forward at a device, and a version names one record.
    #[test]
    fn an_older_record_or_a_second_record_of_a_version_is_caught() {
        let mut c = MembershipChecker::new(boot3());
        let mut a = boot3();
        assert!(a.admit(t(1, 3), DeviceId(4), "", ""));
        c.booted(0, DeviceId(1), None);
        c.adopted(1, DeviceId(1), &a);
        assert!(c.violations.is_empty());
        assert_eq!(c.newest().version, a.version);
        c.adopted(2, DeviceId(1), &boot3());
        assert!(matches!(
            c.violations[0],
            MembershipViolation::VersionBackwards { .. }
        ));
        let mut b = boot3();
        assert!(b.start_retiring(t(1, 3), DeviceId(2), 1));
        assert_eq!(b.version, a.version);
        c.adopted(3, DeviceId(2), &b);
        assert!(matches!(
            c.violations[1],
            MembershipViolation::SameVersionDiffers { .. }
        ));
    }

    // DESIGN §6: once retired, a device applies nothing and serves nothing, and no
    // member that knows it retired follows it or applies its commands; what happened
    // before does not count.
    #[test]
    fn a_retired_device_acting_is_caught() {
        let mut c = MembershipChecker::new(boot3());
        c.coordinator(DeviceId(2), t(4, 3), &boot3());
        c.command_applied(DeviceId(2), t(4, 3), &boot3());
        let mut m = boot3();
        assert!(m.start_retiring(t(4, 3), DeviceId(2), 1));
        m.retire(t(4, 3), DeviceId(2));
        c.adopted(10, DeviceId(3), &m);
        // Held by one of its record's two members: it may still be lost.
        assert!(!c.is_retired(DeviceId(2)));
        c.command_applied(DeviceId(2), t(4, 3), &boot3());
        c.adopted(11, DeviceId(1), &m);
        assert!(c.is_retired(DeviceId(2)));
        c.coordinator(DeviceId(2), t(4, 3), &boot3());
        c.coordinator(DeviceId(2), t(6, 2), &boot3());
        // A member that has not received the retirement may follow it (a partition).
        c.coordinator(DeviceId(1), t(5, 2), &boot3());
        assert!(c.violations.is_empty(), "{:?}", c.violations);
        c.coordinator(DeviceId(1), t(5, 2), &m);
        c.command_applied(DeviceId(3), t(5, 2), &m);
        c.command_applied(DeviceId(2), t(4, 3), &boot3());
        c.chunk_served(DeviceId(2), "c");
        c.chunk_in_use(DeviceId(2), "c", "s", DeviceId(1));
        assert_eq!(c.violations.len(), 5);
        assert!(c.violations.iter().all(|v| !v.is_liveness()));
    }

    // DESIGN §6: a retirement the retired device itself holds is settled at once (it
    // stops), whoever else holds it.
    #[test]
    fn a_retirement_the_device_holds_is_settled() {
        let mut c = MembershipChecker::new(boot3());
        let mut m = boot3();
        assert!(m.start_retiring(t(4, 3), DeviceId(2), 1));
        m.retire(t(4, 3), DeviceId(2));
        c.sent(10, DeviceId(3), &m);
        assert!(!c.is_retired(DeviceId(2)));
        c.adopted(11, DeviceId(2), &m);
        assert!(c.is_retired(DeviceId(2)));
        c.chunk_served(DeviceId(2), "c");
        assert_eq!(c.violations.len(), 1);
    }
}
