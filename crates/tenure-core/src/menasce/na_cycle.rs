//! The NOMINATION ACCEPTED cycle (seed 004 §4.1): the NA circulates once through the new
//! LC's up list, each site adding its L- and R-list to the sets L and R by sequence
//! number; a site keeps the NA of the most recently nominated LC (its trial list `T`)
//! and answers an older one with KILL NA. Each site acknowledges the NA to its generator
//! after forwarding it, so the generator can resume the cycle past a crashed site (the
//! last site's forward goes to the generator itself and is its acknowledgment).

use super::{Generating, MenasceMsg, Na, Site, Status, Timer};
use crate::ids::DeviceId;
use crate::time::Instant;

impl Site {
    /// Add this site's L- and R-lists to the NA's sets L and R — the seed's algorithm,
    /// verbatim: a lock request enters L unless its release in R is later; a release
    /// enters R (and removes its lock request from L) unless the lock request in L is
    /// later.
    pub(super) fn contribute(&mut self, na: &mut Na) {
        for (x, sx) in &self.l_list {
            match na.r.get(x) {
                Some(sy) if sx > sy || self.planted.merge_ignores_seq => {
                    na.l.insert(*x, *sx);
                    na.r.remove(x);
                }
                Some(_) => {}
                None => {
                    na.l.insert(*x, *sx);
                }
            }
        }
        for (y, sy) in &self.r_list {
            match na.l.get(y) {
                Some(sx) if self.planted.merge_ignores_seq || sx > sy => {}
                Some(_) => {
                    na.r.insert(*y, *sy);
                    na.l.remove(y);
                }
                None => {
                    na.r.insert(*y, *sy);
                }
            }
        }
        na.visited.push(self.me);
        na.max_seq = na.max_seq.max(self.max_seq);
    }

    /// The site after `after` in the NA's cycle (the generator when the cycle is done).
    fn next_in_cycle(na: &Na, after: DeviceId) -> DeviceId {
        let rest = match na.cycle.iter().position(|s| *s == after) {
            Some(i) => &na.cycle[i + 1..],
            None => &na.cycle[..],
        };
        (rest.iter())
            .find(|s| !na.visited.contains(s))
            .copied()
            .unwrap_or(na.new_lc)
    }

    /// Generator: send the NA to the first site of its cycle and watch its progress.
    pub(super) fn forward_na(&mut self, now: Instant, na: Na) {
        let to = Self::next_in_cycle(&na, self.me);
        self.generating = Some(Generating {
            last: na.clone(),
            sent_to: to,
            awaiting_ru: None,
            ready: Default::default(),
        });
        if to == self.me {
            self.cycle_complete(now, na);
            return;
        }
        self.send(to, MenasceMsg::NominationAccepted(Box::new(na)));
        self.set_timer(Timer::Cycle, now + self.settings.cycle_timeout);
    }

    /// NA at site `i`: the seed's "algorithm to process an NA message at site i".
    pub(super) fn on_na(&mut self, now: Instant, mut na: Na) {
        if na.new_lc == self.me {
            let mine = (self.generating.as_ref())
                .is_some_and(|g| g.last.trial == na.trial && g.awaiting_ru.is_none());
            if mine {
                self.cycle_complete(now, na);
            }
            return;
        }
        let k = na.new_lc;
        // A site in NORMAL status that no longer follows the crashed LC has finished that
        // recovery already: the NA is stale.
        let stale = self.status == Status::Normal && self.lc != Some(na.old_lc);
        let accept = self.planted.accept_every_na
            || match &self.trial {
                None => !stale,
                Some(t) => !t.contains(&k),
            };
        if !accept {
            self.send(
                k,
                MenasceMsg::KillNa {
                    trial: na.trial.clone(),
                },
            );
            return;
        }
        // Either no NA has been received in this recovery, or this one belongs to a more
        // recently nominated LC.
        if self.status == Status::Normal {
            self.old_lc = self.lc;
        }
        self.status = Status::Recovery;
        self.trial = Some(na.trial.clone());
        self.new_lc = Some(k);
        // A superseded candidate steps down; a nominator whose nominee (or an earlier
        // site) is the new LC stops nominating.
        if self.generating.is_some() {
            self.generating = None;
            self.timers.remove(&Timer::Cycle);
        }
        let done = (self.nominating.as_ref())
            .is_some_and(|n| n.nominee == k || na.trial.contains(&n.nominee));
        if done {
            self.nominating = None;
            self.timers.remove(&Timer::AnRetry);
        }
        if !na.visited.contains(&self.me) {
            self.contribute(&mut na);
        }
        let to = Self::next_in_cycle(&na, self.me);
        self.send(to, MenasceMsg::NominationAccepted(Box::new(na.clone())));
        // The last site forwards the NA to its generator itself: that is its
        // acknowledgment.
        if to != k {
            self.send(
                k,
                MenasceMsg::NaForwarded {
                    na: Box::new(na),
                    to,
                },
            );
        }
        self.set_timer(Timer::Recovery, now + self.settings.recovery_timeout);
    }

    /// Generator: a site forwarded the NA to `to`.
    pub(super) fn on_na_forwarded(&mut self, now: Instant, na: Na, to: DeviceId) {
        let Some(g) = self.generating.as_mut() else {
            return;
        };
        if g.last.trial != na.trial || g.awaiting_ru.is_some() {
            return;
        }
        if na.visited.len() >= g.last.visited.len() {
            g.last = na;
            g.sent_to = to;
        }
        if to != self.me {
            self.set_timer(Timer::Cycle, now + self.settings.cycle_timeout);
        }
    }

    /// Generator: the cycle made no progress (the site it went to crashed before
    /// forwarding it), or RU answers are overdue.
    pub(super) fn cycle_timeout(&mut self, now: Instant) {
        let Some(g) = self.generating.as_mut() else {
            return;
        };
        if g.awaiting_ru.is_some() {
            // The sites that did not answer RU are left out of the new up list.
            self.resume_normal_activity();
            return;
        }
        let dead = g.sent_to;
        let mut na = g.last.clone();
        // Skip the crashed site: resume the cycle at the site after it.
        na.cycle.retain(|s| *s != dead);
        let after = (na.visited.last().copied()).unwrap_or(self.me);
        let to = Self::next_in_cycle(&na, after);
        g.last = na.clone();
        g.sent_to = to;
        if to == self.me {
            self.cycle_complete(now, na);
            return;
        }
        self.send(to, MenasceMsg::NominationAccepted(Box::new(na)));
        self.set_timer(Timer::Cycle, now + self.settings.cycle_timeout);
    }

    /// Generator: KILL NA — a more recently nominated LC exists; this cycle is aborted.
    pub(super) fn on_kill_na(&mut self, now: Instant, trial: Vec<DeviceId>) {
        let mine = (self.generating.as_ref()).is_some_and(|g| g.last.trial == trial);
        if mine {
            self.generating = None;
            self.timers.remove(&Timer::Cycle);
            if self.new_lc == Some(self.me) {
                self.new_lc = None;
            }
            self.nominating = None;
            self.set_timer(Timer::Recovery, now + self.settings.recovery_timeout);
        }
    }
}
