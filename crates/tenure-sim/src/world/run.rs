//! A run's two phases: the safety phase with faults, then the liveness phase, in which
//! every store must regain a working manager, the lock clients be answered and the lock
//! history be linearizable.

use super::{
    EVENTS_MAX, Event, LIN_STEPS_MAX, LOCK_SETTLE_US, RunReport, SAMPLE_US, START_US, World,
};
use crate::checks::Violation;
use tenure_core::{DeviceId, StoreId};

impl World {
    /// Whether any checker has found a violation.
    pub(super) fn failed(&self) -> bool {
        !self.checker.violations.is_empty()
            || !self.locks.violations.is_empty()
            || !self.obj.check.violations.is_empty()
            || !self.elections.violations.is_empty()
            || !self.cuts.violations.is_empty()
            || !self.members.violations.is_empty()
    }

    /// Run both phases and return the report.
    pub fn run(mut self) -> RunReport {
        // Safety phase: faults on.
        let safety_end = START_US + self.cfg.safety_us;
        while self
            .queue
            .first_key_value()
            .is_some_and(|((t, _), _)| *t <= safety_end)
        {
            self.step();
            self.probe_manager_crash();
            if self.report.events > EVENTS_MAX && !self.failed() {
                self.event_storm();
            }
            if self.failed() {
                return self.finish();
            }
        }
        // Liveness phase: heal, restart, resume, faults off.
        self.now = self.now.max(safety_end);
        self.faults_on = false;
        self.net.faults_on = false;
        self.net.heal();
        self.trace(|| "liveness phase: heal, restart, resume; faults off".to_string());
        let ids: Vec<DeviceId> = self.nodes.keys().copied().collect();
        for d in ids {
            self.nodes.get_mut(&d).expect("node").torn_crash = None;
            if self.nodes[&d].device.is_none() {
                self.boot(d);
            } else if self.nodes[&d].paused_until.is_some() {
                self.resume_now(d);
            }
        }
        self.lock_clients_heal();
        self.liveness_election_start();
        self.liveness_membership_start();
        let start = self.now;
        let deadline = start + self.cfg.liveness_us;
        while self.now < deadline && !self.failed() && self.report.events <= EVENTS_MAX {
            let Some(((t, _), ev)) = self.queue.first_key_value() else {
                break;
            };
            let is_sample = matches!(ev, Event::Sample);
            let t = *t;
            if is_sample && t <= deadline {
                self.queue.pop_first();
                self.now = t;
                self.report.events += 1;
                let stores = self.sample();
                self.check_retired_chunks();
                let settled = self.membership_settled();
                if self.sample_election() && stores && settled.is_ok() {
                    let m = &mut self.members.stats.max_settle_us;
                    *m = (*m).max(self.now - start);
                    self.report.liveness_converged_us = Some(self.now - start);
                    self.trace(|| {
                        "liveness: every store has a working manager, one coordinator".to_string()
                    });
                    self.start_calm_snapshots();
                    self.settle_lock_clients();
                    if !self.failed() {
                        self.settle_objects();
                    }
                    if !self.failed() {
                        self.settle_snapshots();
                    }
                    return self.finish();
                }
                self.schedule(self.now + SAMPLE_US, Event::Sample);
                continue;
            }
            self.step();
        }
        if !self.failed() {
            self.election_not_converged();
            self.membership_not_converged(start);
            for (store, verdict) in self.managed() {
                if let Err(why) = verdict {
                    self.checker
                        .violations
                        .push(Violation::NoManager { store, why });
                }
            }
            if self.report.events > EVENTS_MAX {
                self.event_storm();
            }
        }
        self.finish()
    }

    /// Too many events: the run is stuck in a storm (a timer firing at once forever, a
    /// message loop), which no deployment would survive.
    fn event_storm(&mut self) {
        self.checker.violations.push(Violation::NoManager {
            store: StoreId(0),
            why: format!("event storm: more than {EVENTS_MAX} events"),
        });
    }

    /// Once every store has a manager again, lock clients must be answered within
    /// [`LOCK_SETTLE_US`]; then the whole lock history must be linearizable.
    fn settle_lock_clients(&mut self) {
        let until = self.now + LOCK_SETTLE_US;
        while !self.failed()
            && self.report.events <= EVENTS_MAX
            && self
                .queue
                .first_key_value()
                .is_some_and(|((t, _), _)| *t <= until)
        {
            if self.lock_clients.iter().all(|c| c.answered) {
                break;
            }
            self.step();
        }
        if self.failed() {
            return;
        }
        for (client, why) in self.lock_clients_stuck() {
            self.checker
                .violations
                .push(Violation::ClientStuck { client, why });
        }
        if !self.failed() {
            self.locks.linearizable(&crate::lincheck::Limits {
                max_steps: LIN_STEPS_MAX,
                ..Default::default()
            });
        }
    }
}
