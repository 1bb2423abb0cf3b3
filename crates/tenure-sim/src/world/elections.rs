//! The coordinator's election in the world (see [`crate::election`]): the nemesis aiming
//! at the coordinator, the pause between deciding a command and sending it, and the
//! liveness phase's convergence check.

use super::{Event, World};

/// The liveness phase's crash of the coordinator (in the seeds that draw it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CoordDown {
    /// Once the election has converged, crash its coordinator.
    Pending,
    /// Crashed, kept down until the others agree on another one.
    Down(DeviceId),
    /// Restarted (or never drawn).
    Done,
}
use crate::checks::Violation;
use crate::election::{ElectionViolation, MemberView, convergence_bound_us};
use tenure_core::DeviceId;
use tenure_core::io::{Observation, Output};

/// The coordinator's election: the world's part beside the checker.
pub(super) struct ElectionWorld {
    /// What the run seed drew for the election.
    pub(super) knobs: crate::election::ElectionKnobs,
    /// Draws whether a fault aims at the coordinator, and its pauses before a command.
    pub(super) rng: tenure_core::rng::Rng,
    /// The liveness phase's crash of the coordinator.
    pub(super) coord_down: CoordDown,
    /// When the liveness phase last disturbed the election (its start, a restart).
    pub(super) disturbed_at: u64,
    /// Whether the election has converged since that disturbance.
    pub(super) converged: bool,
}

/// A pause that stops the coordinator before a command leaves lasts at least this long,
/// so that the others notice the silence (three heartbeats) and elect another one (µs).
const COMMAND_PAUSE_MIN_US: u64 = 1_500_000;

impl World {
    /// The running device that acts as coordinator in the newest term, if any.
    pub(super) fn current_coordinator(&self) -> Option<DeviceId> {
        (self.nodes.iter())
            .filter(|(d, _)| self.running(**d))
            .filter_map(|(d, n)| {
                let t = n.device.as_ref()?.acting_coordinator()?;
                Some((t, *d))
            })
            .max()
            .map(|(_, d)| d)
    }

    /// The device a crash or a pause strikes: `drawn`, or now and then the coordinator.
    pub(super) fn aim_at_coordinator(&mut self, drawn: DeviceId) -> DeviceId {
        if !self.el.rng.chance(self.el.knobs.coordinator_target_p) {
            return drawn;
        }
        match self.current_coordinator() {
            Some(c) => {
                self.elections.stats.coordinator_faults += 1;
                self.trace(|| format!("nemesis aims at the coordinator {c}"));
                c
            }
            None => drawn,
        }
    }

    /// If `out` sends a coordinator command, now and then pause `d` right before it (see
    /// [`crate::election`]): the outputs from the command on are returned, to leave when
    /// `d` resumes. A batch that records a snapshot is left whole (the record's place in
    /// it matters).
    pub(super) fn hold_at_command(
        &mut self,
        d: DeviceId,
        out: &mut Vec<Output>,
    ) -> Option<Vec<Output>> {
        if !self.faults_on || self.el.knobs.command_pause_p == 0.0 {
            return None;
        }
        let k = out
            .iter()
            .position(|o| matches!(o, Output::Observe(Observation::CommandSent { .. })))?;
        if (out.iter()).any(|o| matches!(o, Output::Observe(Observation::SnapshotRecorded { .. })))
            || self.down_count() >= self.knobs.down_max
            || !self.el.rng.chance(self.el.knobs.command_pause_p)
        {
            return None;
        }
        let dur = COMMAND_PAUSE_MIN_US + self.el.rng.below(self.knobs.pause_max_us);
        let rest = out.split_off(k);
        let until = self.now + dur;
        self.nodes.get_mut(&d).expect("node").paused_until = Some(until);
        self.report.faults.pauses += 1;
        self.elections.stats.paused_at_command += 1;
        self.schedule(until, Event::Resume(d));
        self.trace(|| format!("{d} pauses for {dur}us with a command not yet sent"));
        Some(rest)
    }

    /// The liveness phase begins: the election must converge within the bound (and, in
    /// some seeds, converge again after its coordinator is crashed, then again after it
    /// restarts).
    pub(super) fn liveness_election_start(&mut self) {
        self.el.disturbed_at = self.now;
        self.el.converged = false;
        self.el.coord_down = if self.cfg.faults && self.el.knobs.liveness_coordinator_down {
            CoordDown::Pending
        } else {
            CoordDown::Done
        };
    }

    /// Running members (spares not admitted take no part in elections).
    fn election_views(&self) -> Vec<MemberView> {
        (self.nodes.iter())
            .filter(|(d, _)| self.running(**d) && self.is_member(**d))
            .filter_map(|(d, n)| {
                let dev = n.device.as_ref()?;
                Some(MemberView {
                    device: *d,
                    follows: dev.coordinator(),
                    acting: dev.acting_coordinator(),
                    retiring: dev.members().retiring().contains(d),
                })
            })
            .collect()
    }

    fn election_bound_us(&self) -> u64 {
        let s = &self.nodes.values().next().expect("a device").cfg.election;
        convergence_bound_us(s, self.nodes.len() as u64)
    }

    /// A liveness sample of the election: whether the running devices agree on a running,
    /// acting coordinator (and the kept-down coordinator is back). Past the bound since
    /// the last disturbance, disagreement is a violation.
    pub(super) fn sample_election(&mut self) -> bool {
        let views = self.election_views();
        match self.elections.converged(&views) {
            Ok(term) => {
                if !self.el.converged {
                    self.el.converged = true;
                    let took = self.now - self.el.disturbed_at;
                    let m = &mut self.elections.stats.max_convergence_us;
                    *m = (*m).max(took);
                    self.trace(|| {
                        format!(
                            "liveness: every running device follows {}/{} after {took}us",
                            term.n, term.leader
                        )
                    });
                }
                match self.el.coord_down {
                    CoordDown::Done => return true,
                    CoordDown::Pending => {
                        // The others must notice its silence and elect another one.
                        let c = term.leader;
                        self.crash(c, false);
                        self.el.coord_down = CoordDown::Down(c);
                        self.elections.stats.coordinator_kept_down += 1;
                        self.trace(|| format!("liveness: coordinator {c} crashed, kept down"));
                    }
                    CoordDown::Down(c) => {
                        // Unless a restart the nemesis had scheduled already booted it: a
                        // second boot of a running device (no crash between) kept the old
                        // disk pipeline, whose commit in flight belonged to the earlier
                        // boot, and everything it sent waited forever (sim seed 10276).
                        if self.nodes[&c].device.is_none() {
                            self.boot(c);
                        }
                        self.el.coord_down = CoordDown::Done;
                        self.trace(|| format!("liveness: the old coordinator {c} restarts"));
                    }
                }
                self.el.disturbed_at = self.now;
                self.el.converged = false;
                false
            }
            Err(why) => {
                self.el.converged = false;
                let after_us = self.now - self.el.disturbed_at;
                let bound_us = self.election_bound_us();
                if after_us > bound_us {
                    self.elections
                        .violations
                        .push(ElectionViolation::NoCoordinator {
                            after_us,
                            bound_us,
                            why,
                        });
                }
                false
            }
        }
    }

    /// The liveness bound passed without convergence: if the election is one reason, say
    /// so.
    pub(super) fn election_not_converged(&mut self) {
        let views = self.election_views();
        if let Err(why) = self.elections.converged(&views) {
            let after_us = self.now - self.el.disturbed_at;
            let bound_us = self.election_bound_us();
            self.checker
                .violations
                .push(Violation::Election(ElectionViolation::NoCoordinator {
                    after_us,
                    bound_us,
                    why,
                }));
        }
    }
}
