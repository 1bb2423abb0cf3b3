//! The coordinator's election in the store world (lecture, seed 002 §14.3; DESIGN §6):
//! the checkers that judge it, and the message counts of §14.3.3 measured on every run.
//!
//! Every run elects its coordinator with the algorithm its seed draws (bully or ring,
//! [`ElectionKnobs`]), under every fault of the nemesis, which now and then aims at the
//! current coordinator (crashes or pauses it). Now and then, too, a coordinator's process
//! stops between deciding a command and sending it, long enough for the others to elect
//! another coordinator: the command arrives from a deposed coordinator — what the terms
//! exist for.
//!
//! - **One coordinator per term**: a term names its coordinator, so every command sent
//!   under term T comes from `T.leader`, and no other device acts as coordinator of T
//!   (checked on every `CommandSent` and after every event of every device).
//! - **Fencing**: a device never applies a command whose term is older than a term it
//!   has seen — the term on its disk at boot, every coordinator it followed and every
//!   command it applied since.
//! - **Convergence** (liveness): after faults stop, within [`convergence_bound_us`] of the
//!   last disturbance every running device follows the same term, whose coordinator is
//!   running and acts in it — with bully, the highest running id. In some seeds the
//!   liveness phase begins by crashing the coordinator and keeps it down until the others
//!   have elected another one, then restarts it (it must then win again under bully).
//! - **Message counts**: counted election messages (ELECTION, OK, COORDINATOR; ring
//!   election and announcement — not heartbeats or the ring's acknowledgements) are
//!   summed per election id, and per *episode* (every election from the first message
//!   after a quiet spell until the next quiet spell: the cascade the lecture's worst case
//!   counts), and printed beside §14.3.3's figures.

use serde::Serialize;
use std::collections::BTreeMap;
use tenure_core::DeviceId;
use tenure_core::election::{Algorithm, ElectionId, ElectionMsg, ElectionSettings, Term};
use tenure_core::rng::Rng;

/// What the seed draws for elections.
#[derive(Clone, Debug, Serialize)]
pub struct ElectionKnobs {
    /// The algorithm every device runs.
    pub algorithm: Algorithm,
    /// Probability that a crash or a pause of the nemesis strikes the current coordinator
    /// instead of a random device.
    pub coordinator_target_p: f64,
    /// Probability, per command a coordinator sends while faults are on, that its process
    /// stops between deciding the command and sending it (for longer than it takes the
    /// others to elect another coordinator).
    pub command_pause_p: f64,
    /// Whether the liveness phase starts by crashing the coordinator and keeping it down
    /// until the others elect another one.
    pub liveness_coordinator_down: bool,
}

impl ElectionKnobs {
    /// Draw from the run's election generator.
    pub fn draw(rng: &mut Rng) -> ElectionKnobs {
        ElectionKnobs {
            algorithm: if rng.chance(0.5) {
                Algorithm::Bully
            } else {
                Algorithm::Ring
            },
            coordinator_target_p: [0.0, 0.3, 0.6][rng.below(3) as usize],
            command_pause_p: [0.0, 0.1, 0.3][rng.below(3) as usize],
            liveness_coordinator_down: rng.chance(0.4),
        }
    }
}

/// The bound within which the election must converge after a disturbance (µs), from the
/// `[election]` settings: three missed heartbeats to notice a silent coordinator, then,
/// for each of the `n` members in turn, an answer timeout and a result timeout (a bully
/// candidate waiting for OK, then for COORDINATOR; a ring sender skipping a silent
/// successor, an initiator waiting for its election to come back), twice over.
pub fn convergence_bound_us(s: &ElectionSettings, n: u64) -> u64 {
    let us = |d: std::time::Duration| d.as_micros() as u64;
    3 * us(s.heartbeat) + 2 * n * (us(s.answer_timeout) + us(s.result_timeout))
}

/// A broken election invariant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum ElectionViolation {
    /// A device other than the term's coordinator acted as coordinator in it (sent a
    /// command, or ran the coordinator's role).
    TwoCoordinators {
        /// The term.
        term: Term,
        /// The device that acted in it without being its coordinator.
        device: DeviceId,
        /// What it did.
        what: String,
    },
    /// A device applied a command of a term older than one it had already seen.
    StaleCommandApplied {
        /// The device.
        device: DeviceId,
        /// The command's term.
        term: Term,
        /// The newest term the device had seen.
        newest: Term,
    },
    /// After faults stopped, the devices did not agree on a running, acting coordinator
    /// within the bound.
    NoCoordinator {
        /// How long since the liveness phase last changed the cluster (µs).
        after_us: u64,
        /// The bound (µs).
        bound_us: u64,
        /// What the devices follow.
        why: String,
    },
}

impl ElectionViolation {
    /// Whether the violation is of liveness.
    pub fn is_liveness(&self) -> bool {
        matches!(self, ElectionViolation::NoCoordinator { .. })
    }
}

impl std::fmt::Display for ElectionViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ElectionViolation::TwoCoordinators { term, device, what } => write!(
                f,
                "two coordinators in term {}/{}: {device} {what} though the term's coordinator is {}",
                term.n, term.leader, term.leader
            ),
            ElectionViolation::StaleCommandApplied {
                device,
                term,
                newest,
            } => write!(
                f,
                "{device} applied a command of term {}/{} after seeing term {}/{}",
                term.n, term.leader, newest.n, newest.leader
            ),
            ElectionViolation::NoCoordinator {
                after_us,
                bound_us,
                why,
            } => write!(
                f,
                "no agreed coordinator {:.3} s after the liveness phase last changed the cluster (faults stopped, or its coordinator crashed or restarted; bound {:.3} s): {why}",
                *after_us as f64 / 1e6,
                *bound_us as f64 / 1e6
            ),
        }
    }
}

/// A count distribution: value → how many times it was seen (mergeable across runs).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Histogram(pub BTreeMap<u64, u64>);

impl Histogram {
    /// Count one value.
    pub fn record(&mut self, v: u64) {
        *self.0.entry(v).or_default() += 1;
    }

    /// Add another histogram.
    pub fn add(&mut self, o: &Histogram) {
        for (v, n) in &o.0 {
            *self.0.entry(*v).or_default() += n;
        }
    }

    /// Values counted.
    pub fn count(&self) -> u64 {
        self.0.values().sum()
    }

    /// The median (lower), if any value was counted.
    pub fn median(&self) -> Option<u64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let mut seen = 0;
        for (v, c) in &self.0 {
            seen += c;
            if 2 * seen >= n {
                return Some(*v);
            }
        }
        None
    }

    /// The largest value counted.
    pub fn max(&self) -> Option<u64> {
        self.0.keys().next_back().copied()
    }
}

/// Message counts of one algorithm.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ElectionCounts {
    /// Runs that used the algorithm.
    pub runs: u64,
    /// Counted messages per election id.
    pub per_election: Histogram,
    /// Counted messages per election whose initiator was the highest running device when
    /// it started (bully's best case).
    pub per_election_highest: Histogram,
    /// Counted messages per election whose initiator was the lowest running device when
    /// it started, with every device running (bully's worst case starts there).
    pub per_election_lowest: Histogram,
    /// Counted messages per episode (every election from the first message after a quiet
    /// spell to the next quiet spell).
    pub per_episode: Histogram,
    /// Counted messages per episode begun by the lowest device with every device running.
    pub per_episode_lowest: Histogram,
}

impl ElectionCounts {
    /// Add another run's counts.
    pub fn add(&mut self, o: &ElectionCounts) {
        self.runs += o.runs;
        self.per_election.add(&o.per_election);
        self.per_election_highest.add(&o.per_election_highest);
        self.per_election_lowest.add(&o.per_election_lowest);
        self.per_episode.add(&o.per_episode);
        self.per_episode_lowest.add(&o.per_episode_lowest);
    }
}

/// What the elections of a run (or a sweep) did, and how often the checkers looked.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ElectionStats {
    /// Bully runs' counts.
    pub bully: ElectionCounts,
    /// Ring runs' counts.
    pub ring: ElectionCounts,
    /// Distinct terms devices followed.
    pub terms: u64,
    /// Commands sent by coordinators.
    pub commands_sent: u64,
    /// Commands applied.
    pub commands_applied: u64,
    /// Commands refused as stale.
    pub commands_refused: u64,
    /// Nemesis crashes and pauses aimed at the coordinator.
    pub coordinator_faults: u64,
    /// Pauses that stopped a coordinator between deciding a command and sending it.
    pub paused_at_command: u64,
    /// Liveness phases that began with the coordinator kept down.
    pub coordinator_kept_down: u64,
    /// Longest convergence after a disturbance in the liveness phase (µs).
    pub max_convergence_us: u64,
    /// Commands and acting roles checked against their term's coordinator.
    pub coordinator_checks: u64,
    /// Applied commands checked against the newest term their device had seen.
    pub fencing_checks: u64,
    /// Liveness samples of the election.
    pub convergence_checks: u64,
}

impl ElectionStats {
    /// Add another run's figures.
    pub fn add(&mut self, o: &ElectionStats) {
        self.bully.add(&o.bully);
        self.ring.add(&o.ring);
        self.terms += o.terms;
        self.commands_sent += o.commands_sent;
        self.commands_applied += o.commands_applied;
        self.commands_refused += o.commands_refused;
        self.coordinator_faults += o.coordinator_faults;
        self.paused_at_command += o.paused_at_command;
        self.coordinator_kept_down += o.coordinator_kept_down;
        self.max_convergence_us = self.max_convergence_us.max(o.max_convergence_us);
        self.coordinator_checks += o.coordinator_checks;
        self.fencing_checks += o.fencing_checks;
        self.convergence_checks += o.convergence_checks;
    }
}

/// The election a counted message belongs to (none for heartbeats and acknowledgements).
pub fn counted_id(msg: &ElectionMsg) -> Option<ElectionId> {
    match msg {
        ElectionMsg::Election { id, .. }
        | ElectionMsg::Ok { id, .. }
        | ElectionMsg::Coordinator { id, .. }
        | ElectionMsg::RingElection { id, .. }
        | ElectionMsg::RingCoordinator { id, .. } => Some(*id),
        ElectionMsg::RingAck { .. } | ElectionMsg::Alive { .. } => None,
    }
}

/// Where an election id started: whether its initiator was then the highest, or the
/// lowest (with every device running), of the running devices.
#[derive(Clone, Copy, Debug, Default)]
struct Start {
    highest: bool,
    lowest_all: bool,
}

/// One device's state as the convergence check sees it.
#[derive(Clone, Copy, Debug)]
pub struct MemberView {
    /// The device.
    pub device: DeviceId,
    /// The coordinator it follows.
    pub follows: Option<Term>,
    /// The term it acts in as coordinator.
    pub acting: Option<Term>,
    /// Whether its own membership record says it is being retired (it then ranks below
    /// every other member and is never elected).
    pub retiring: bool,
}

/// The election checkers' memory of a run.
#[derive(Clone, Debug, Default)]
pub struct ElectionChecker {
    /// The newest term each device has seen since its boot (its disk's term at boot).
    newest: BTreeMap<DeviceId, Term>,
    /// Terms followed by anyone.
    terms: std::collections::BTreeSet<Term>,
    /// Counted messages per election (and its initiator's boot), and how it started.
    per_id: BTreeMap<(ElectionId, u64), (u64, Start)>,
    /// The episode in progress: (messages, last message time, begun by the lowest device
    /// with every device running).
    episode: Option<(u64, u64, bool)>,
    /// Quiet spell that ends an episode (µs).
    episode_gap_us: u64,
    /// The run's algorithm.
    algorithm: Algorithm,
    /// The run's message counts, filed under its algorithm at the end.
    counts: ElectionCounts,
    /// The run's figures.
    pub stats: ElectionStats,
    /// Violations found.
    pub violations: Vec<ElectionViolation>,
}

impl ElectionChecker {
    /// A checker for a run whose devices use `settings`.
    pub fn new(settings: &ElectionSettings) -> ElectionChecker {
        let gap = settings.answer_timeout + settings.result_timeout;
        ElectionChecker {
            episode_gap_us: gap.as_micros() as u64,
            algorithm: settings.algorithm,
            ..Default::default()
        }
    }

    /// Device `d` booted with `disk` as the newest term on its disk.
    pub fn booted(&mut self, d: DeviceId, disk: Term) {
        self.newest.insert(d, disk);
    }

    /// Device `d` follows (or is) the coordinator of `term`.
    pub fn coordinator(&mut self, d: DeviceId, term: Term) {
        if self.terms.insert(term) {
            self.stats.terms += 1;
        }
        let n = self.newest.entry(d).or_default();
        *n = (*n).max(term);
    }

    /// Device `d` sent a command under `term`: only the term's coordinator may.
    pub fn command_sent(&mut self, d: DeviceId, term: Term) {
        self.stats.commands_sent += 1;
        self.stats.coordinator_checks += 1;
        if term.leader != d {
            self.push(ElectionViolation::TwoCoordinators {
                term,
                device: d,
                what: "sent a command".into(),
            });
        }
    }

    /// After an event of device `d`: the term it acts in as coordinator, if any.
    pub fn acting(&mut self, d: DeviceId, acting: Option<Term>) {
        let Some(term) = acting else {
            return;
        };
        self.stats.coordinator_checks += 1;
        if term.leader != d {
            self.push(ElectionViolation::TwoCoordinators {
                term,
                device: d,
                what: "acts as coordinator".into(),
            });
        }
    }

    /// Device `d` applied a command of `term`: not older than any term it has seen.
    pub fn command_applied(&mut self, d: DeviceId, term: Term) {
        self.stats.commands_applied += 1;
        self.stats.fencing_checks += 1;
        let n = self.newest.entry(d).or_default();
        if term < *n {
            let newest = *n;
            self.push(ElectionViolation::StaleCommandApplied {
                device: d,
                term,
                newest,
            });
        }
        let n = self.newest.entry(d).or_default();
        *n = (*n).max(term);
    }

    /// Device `d` refused a command as stale.
    pub fn command_refused(&mut self) {
        self.stats.commands_refused += 1;
    }

    /// A counted message of election `id` was sent at `now` (µs), while the initiator was
    /// in boot `boot` (an id's serial starts again at every boot) and `running` were the
    /// devices running, ascending.
    pub fn message(&mut self, now: u64, id: ElectionId, boot: u64, running: &[DeviceId]) {
        let all = self.newest.len().max(running.len());
        let lowest_all = running.len() == all && running.first() == Some(&id.initiator);
        let e = self.per_id.entry((id, boot)).or_insert_with(|| {
            let start = Start {
                highest: running.last() == Some(&id.initiator),
                lowest_all,
            };
            (0, start)
        });
        e.0 += 1;
        let fresh = e.0 == 1;
        match &mut self.episode {
            Some((count, last, _)) if now.saturating_sub(*last) < self.episode_gap_us => {
                *count += 1;
                *last = now;
            }
            _ => {
                self.close_episode();
                self.episode = Some((1, now, fresh && lowest_all));
            }
        }
    }

    fn close_episode(&mut self) {
        if let Some((count, _, lowest)) = self.episode.take() {
            self.counts.per_episode.record(count);
            if lowest {
                self.counts.per_episode_lowest.record(count);
            }
        }
    }

    /// End of the run: file the counts under the run's algorithm.
    pub fn finish(&mut self) {
        self.close_episode();
        let per_id = std::mem::take(&mut self.per_id);
        let mut counts = std::mem::take(&mut self.counts);
        counts.runs = 1;
        for (count, start) in per_id.values() {
            counts.per_election.record(*count);
            if start.highest {
                counts.per_election_highest.record(*count);
            }
            if start.lowest_all {
                counts.per_election_lowest.record(*count);
            }
        }
        match self.algorithm {
            Algorithm::Bully => self.stats.bully = counts,
            Algorithm::Ring => self.stats.ring = counts,
        }
    }

    /// Whether the running devices agree on a running coordinator that acts in the term
    /// they follow (with bully, the highest running id). `members` are the running
    /// devices, ascending.
    pub fn converged(&mut self, members: &[MemberView]) -> Result<Term, String> {
        let algorithm = self.algorithm;
        self.stats.convergence_checks += 1;
        let follows: std::collections::BTreeSet<Option<Term>> =
            members.iter().map(|m| m.follows).collect();
        let term = match follows.into_iter().collect::<Vec<_>>().as_slice() {
            [Some(t)] => *t,
            _ => {
                let list: Vec<String> = (members.iter())
                    .map(|m| match m.follows {
                        Some(t) => format!("{} follows {}/{}", m.device, t.n, t.leader),
                        None => format!("{} follows nobody", m.device),
                    })
                    .collect();
                return Err(list.join(", "));
            }
        };
        let Some(leader) = members.iter().find(|m| m.device == term.leader) else {
            return Err(format!(
                "every running device follows {}/{}, which is not running",
                term.n, term.leader
            ));
        };
        if leader.acting != Some(term) {
            return Err(format!(
                "{} is followed in term {} but does not act as coordinator ({:?})",
                term.leader, term.n, leader.acting
            ));
        }
        // Bully elects the highest-ranked running member: members being retired rank
        // below the others (DESIGN §6).
        if algorithm == Algorithm::Bully
            && let Some(top) = members.iter().max_by_key(|m| (!m.retiring, m.device))
            && top.device != term.leader
        {
            return Err(format!(
                "bully elected {} while {} runs",
                term.leader, top.device
            ));
        }
        Ok(term)
    }

    fn push(&mut self, v: ElectionViolation) {
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

    // Seed 002 §14.3 / DESIGN §6: a command sent under a term by another device than its
    // coordinator, or a follower acting in it, is two coordinators in one term.
    #[test]
    fn a_second_coordinator_in_a_term_is_caught() {
        let mut c = ElectionChecker::default();
        c.command_sent(DeviceId(5), t(3, 5));
        c.acting(DeviceId(5), Some(t(3, 5)));
        c.acting(DeviceId(2), None);
        assert!(c.violations.is_empty());
        c.command_sent(DeviceId(4), t(3, 5));
        c.acting(DeviceId(2), Some(t(3, 5)));
        assert_eq!(c.violations.len(), 2);
        assert!(!c.violations[0].is_liveness());
    }

    // DESIGN §6: a command of an older term than one the device saw — at boot, followed,
    // or applied — is caught; commands of the newest term are not.
    #[test]
    fn a_stale_command_applied_is_caught() {
        let mut c = ElectionChecker::default();
        c.booted(DeviceId(1), t(2, 5));
        c.command_applied(DeviceId(1), t(2, 5));
        c.coordinator(DeviceId(1), t(4, 3));
        c.command_applied(DeviceId(1), t(4, 3));
        assert!(c.violations.is_empty());
        c.command_applied(DeviceId(1), t(3, 5));
        assert!(matches!(
            c.violations[0],
            ElectionViolation::StaleCommandApplied { .. }
        ));
        // The disk's term at boot counts.
        let mut c = ElectionChecker::default();
        c.booted(DeviceId(1), t(7, 2));
        c.command_applied(DeviceId(1), t(6, 5));
        assert_eq!(c.violations.len(), 1);
    }

    fn view(d: u64, follows: Option<Term>, acting: Option<Term>) -> MemberView {
        MemberView {
            retiring: false,
            device: DeviceId(d),
            follows,
            acting,
        }
    }

    // Liveness: agreement on a running, acting coordinator (the highest id under bully).
    #[test]
    fn convergence_needs_one_running_acting_coordinator() {
        let ring = ElectionSettings {
            algorithm: Algorithm::Ring,
            ..Default::default()
        };
        let mut c = ElectionChecker::new(&ElectionSettings::default());
        let mut r = ElectionChecker::new(&ring);
        let t5 = Some(t(2, 3));
        let ok = [view(1, t5, None), view(2, t5, None), view(3, t5, t5)];
        assert_eq!(c.converged(&ok), Ok(t(2, 3)));
        let split = [
            view(1, Some(t(1, 3)), None),
            view(2, t5, None),
            view(3, t5, t5),
        ];
        assert!(c.converged(&split).is_err());
        let idle = [view(1, t5, None), view(2, t5, None), view(3, t5, None)];
        assert!(c.converged(&idle).is_err());
        let gone = [view(1, t5, None), view(2, t5, None)];
        assert!(r.converged(&gone).is_err());
        let t2 = Some(t(4, 2));
        let low = [view(1, t2, None), view(2, t2, t2), view(3, t2, None)];
        assert!(c.converged(&low).is_err());
        assert!(r.converged(&low).is_ok());
    }

    #[test]
    fn counts_per_election_and_per_episode() {
        let mut c = ElectionChecker::new(&ElectionSettings::default());
        let running = [DeviceId(1), DeviceId(2), DeviceId(3)];
        let id = |i, s| ElectionId {
            initiator: DeviceId(i),
            serial: s,
        };
        let e = |i, s| ElectionMsg::Election {
            id: id(i, s),
            max_n: 0,
        };
        let alive = ElectionMsg::Alive { term: t(1, 3) };
        assert_eq!(counted_id(&alive), None);
        for (at, m) in [(1_000, e(1, 1)), (1_100, e(1, 1)), (1_200, e(2, 1))] {
            c.message(at, counted_id(&m).expect("counted"), 1, &running);
        }
        // A quiet spell, then the highest starts one.
        c.message(9_000_000, id(3, 1), 1, &running);
        // The same id in a later boot of its initiator is another election.
        c.message(9_000_100, id(3, 1), 2, &running);
        c.finish();
        let b = &c.stats.bully;
        assert_eq!(b.per_election.count(), 4);
        assert_eq!(b.per_election.max(), Some(2));
        assert_eq!(b.per_election_lowest.count(), 1);
        assert_eq!(b.per_election_highest.count(), 2);
        assert_eq!(b.per_episode.0, BTreeMap::from([(2, 1), (3, 1)]));
        assert_eq!(b.per_episode_lowest.count(), 1);
        assert_eq!(b.per_episode.median(), Some(2));
    }

    #[test]
    fn the_bound_grows_with_the_settings() {
        let s = ElectionSettings::default();
        let b = convergence_bound_us(&s, 5);
        assert!(b > 3 * s.heartbeat.as_micros() as u64);
        let mut slow = s.clone();
        slow.result_timeout *= 2;
        assert!(convergence_bound_us(&slow, 5) > b);
    }
}
