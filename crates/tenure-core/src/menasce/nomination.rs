//! Crash detection and nomination (seed 004 §4.1): the site that detects the LC's crash
//! nominates the next site up in the nomination order after the crashed LC with ACCEPT
//! NOMINATION; a nominee that does not acknowledge after the retransmissions is taken
//! for down, added to the trial sequence, and the next site is nominated.

use super::{MenasceMsg, Na, Nominating, Site, Status, Timer};
use crate::ids::DeviceId;
use crate::time::Instant;

impl Site {
    /// The LC is taken for crashed: an application program at this site timed out on it
    /// (or an LLC waited too long for a CONFIRM). This site becomes the nominator. Does
    /// nothing at the LC itself or when a recovery is already under way here.
    pub fn detect_lc_crash(&mut self, now: Instant) {
        let Some(old) = self.lc else { return };
        if self.status != Status::Normal || old == self.me {
            return;
        }
        self.status = Status::Recovery;
        self.old_lc = Some(old);
        self.trial = None;
        self.new_lc = None;
        self.nominate(now, old, Vec::new());
    }

    /// Nominate the first site after `after` in the nomination order that is neither the
    /// crashed LC nor in `trial` (the sites tried before).
    pub(super) fn nominate(&mut self, now: Instant, after: DeviceId, trial: Vec<DeviceId>) {
        let old_lc = self.old_lc.unwrap_or(after);
        let Some(k) = (self.order_after(after).into_iter())
            .find(|s| *s != old_lc && *s != after && !trial.contains(s))
        else {
            return;
        };
        if k == self.me {
            // The nominator is its own nominee: no message.
            self.nominating = None;
            self.timers.remove(&Timer::AnRetry);
            self.accept_nomination(now, old_lc, trial);
            return;
        }
        self.send(
            k,
            MenasceMsg::AcceptNomination {
                old_lc,
                trial: trial.clone(),
            },
        );
        self.nominating = Some(Nominating {
            old_lc,
            nominee: k,
            trial,
            tries: 0,
        });
        self.set_timer(Timer::AnRetry, now + self.settings.an_retry);
    }

    /// Nominator: no acknowledgment yet — retransmit, or after `an_retries`
    /// retransmissions take the nominee for down and nominate the next site.
    pub(super) fn an_timeout(&mut self, now: Instant) {
        let Some(mut n) = self.nominating.take() else {
            return;
        };
        if n.tries < self.settings.an_retries {
            n.tries += 1;
            self.send(
                n.nominee,
                MenasceMsg::AcceptNomination {
                    old_lc: n.old_lc,
                    trial: n.trial.clone(),
                },
            );
            self.nominating = Some(n);
            self.set_timer(Timer::AnRetry, now + self.settings.an_retry);
            return;
        }
        let mut trial = n.trial;
        trial.push(n.nominee);
        self.nominate(now, n.nominee, trial);
    }

    /// Nominator: the nominee acknowledged; wait for its NA (or, if none comes, take it
    /// for crashed and restart).
    pub(super) fn on_nomination_acknowledged(
        &mut self,
        now: Instant,
        from: DeviceId,
        trial: Vec<DeviceId>,
    ) {
        let Some(n) = &self.nominating else { return };
        if n.nominee != from || n.trial != trial {
            return;
        }
        self.timers.remove(&Timer::AnRetry);
        if self.new_lc.is_none() {
            self.set_timer(Timer::Recovery, now + self.settings.recovery_timeout);
        }
    }

    /// Nominee: AN from nominator `from`.
    pub(super) fn on_accept_nomination(
        &mut self,
        now: Instant,
        from: DeviceId,
        old_lc: DeviceId,
        trial: Vec<DeviceId>,
    ) {
        // The working LC refuses a nomination to replace itself (the seed's check that
        // the old LC is actually dead, answered by the old LC itself).
        if self.leads() && old_lc == self.me {
            return;
        }
        self.send(
            from,
            MenasceMsg::NominationAcknowledged {
                trial: trial.clone(),
            },
        );
        let same = (self.generating.as_ref()).is_some_and(|g| g.last.trial == trial);
        if same || self.leads() {
            return;
        }
        self.accept_nomination(now, old_lc, trial);
    }

    /// This site accepts its nomination: it becomes the new LC candidate and starts the
    /// NOMINATION ACCEPTED cycle through its up list.
    pub(super) fn accept_nomination(
        &mut self,
        now: Instant,
        old_lc: DeviceId,
        trial: Vec<DeviceId>,
    ) {
        self.status = Status::Recovery;
        self.old_lc = Some(old_lc);
        // The NA algorithm, run at the generator itself.
        self.trial = Some(trial.clone());
        self.new_lc = Some(self.me);
        self.timers.remove(&Timer::Recovery);
        // The cycle: the up list in the nomination order after this site, without the
        // crashed LC. The sites the nominator tried stay in it: a nominee that did not
        // answer in time may be up (it then adds its lists); one that is down is skipped
        // by the generator's timeout.
        let cycle: Vec<DeviceId> = (self.order_after(self.me).into_iter())
            .filter(|s| self.up.contains(s) && *s != old_lc)
            .collect();
        let mut na = Na {
            new_lc: self.me,
            old_lc,
            trial,
            cycle,
            visited: Vec::new(),
            l: Default::default(),
            r: Default::default(),
            max_seq: self.max_seq,
        };
        self.contribute(&mut na);
        self.forward_na(now, na);
    }

    /// A site in RECOVERY heard nothing from the new LC in time (or a nominator no NA
    /// from its nominee): the new LC is taken for crashed and LCR restarts, nominating
    /// the next site after it with the trial sequence extended by it (so the restarted
    /// NA kills the old one wherever they meet).
    pub(super) fn recovery_timeout(&mut self, now: Instant) {
        if self.status != Status::Recovery {
            return;
        }
        let (crashed, mut trial) = match (&self.new_lc, &self.trial, &self.nominating) {
            (Some(k), Some(t), _) if *k != self.me => (*k, t.clone()),
            (_, _, Some(n)) => (n.nominee, n.trial.clone()),
            _ => {
                // A candidate whose NA was killed, left out of the new LC's cycle: it
                // rejoins the component as a node coming up (single node recovery).
                self.status = Status::Joining;
                self.lc = None;
                self.recover(now);
                return;
            }
        };
        trial.push(crashed);
        self.generating = None;
        self.new_lc = None;
        self.nominate(now, crashed, trial);
    }
}
