//! The LOCK table update phase (seed 004 §4.1): UPDATE TABLE makes every L-list (R-list)
//! equal to the set L (R); READY TO UPDATE answers it; RESUME NORMAL ACTIVITY, with the
//! new up list — the sites that answered RU — makes every site apply its lists to its
//! LOCK table. It is SafeTalk, so a crash in the middle leaves states a crash in normal
//! operation could have left, and LCR simply restarts.

use super::{MenasceMsg, MenasceOut, Na, Pending, Seq, Site, Status, Timer};
use crate::ids::DeviceId;
use crate::time::Instant;

impl Site {
    /// Generator: the NA came back — L and R are complete. Send UT to every site the NA
    /// visited.
    pub(super) fn cycle_complete(&mut self, now: Instant, na: Na) {
        self.l_list = na.l.clone();
        self.r_list = na.r.clone();
        self.max_seq = self.max_seq.max(na.max_seq);
        let others: Vec<DeviceId> = (na.visited.iter().copied())
            .filter(|s| *s != self.me)
            .collect();
        for to in &others {
            self.send(
                *to,
                MenasceMsg::UpdateTable {
                    l: na.l.clone(),
                    r: na.r.clone(),
                },
            );
        }
        let Some(g) = self.generating.as_mut() else {
            return;
        };
        g.last = na;
        g.awaiting_ru = Some(others.into_iter().collect());
        if g.awaiting_ru.as_ref().is_some_and(|w| w.is_empty()) {
            self.resume_normal_activity();
        } else {
            self.set_timer(Timer::Cycle, now + self.settings.cycle_timeout);
        }
    }

    /// UT from the new LC: set the lists, answer RU.
    pub(super) fn on_update_table(&mut self, now: Instant, from: DeviceId, l: Pending, r: Pending) {
        if self.status != Status::Recovery || self.new_lc != Some(from) {
            return;
        }
        self.l_list = l;
        self.r_list = r;
        self.send(from, MenasceMsg::ReadyToUpdate);
        self.set_timer(Timer::Recovery, now + self.settings.recovery_timeout);
    }

    /// New LC: RU from a site.
    pub(super) fn on_ready_to_update(&mut self, _now: Instant, from: DeviceId) {
        let Some(g) = self.generating.as_mut() else {
            return;
        };
        let Some(w) = g.awaiting_ru.as_mut() else {
            return;
        };
        if w.remove(&from) {
            g.ready.insert(from);
        }
        if w.is_empty() {
            self.resume_normal_activity();
        }
    }

    /// New LC: every site answered RU (or the rest timed out) — RNA with the new up list;
    /// this site is the LC.
    pub(super) fn resume_normal_activity(&mut self) {
        let Some(g) = self.generating.take() else {
            return;
        };
        self.timers.remove(&Timer::Cycle);
        let up: Vec<DeviceId> = (self.order.iter().copied())
            .filter(|s| *s == self.me || g.ready.contains(s))
            .collect();
        for to in &g.ready {
            self.send(*to, MenasceMsg::ResumeNormalActivity { up: up.clone() });
        }
        self.apply_lists();
        self.up = up;
        self.lc = Some(self.me);
        self.status = Status::Normal;
        self.next_seq = Seq(self.max_seq.0 + 1);
        self.outstanding.clear();
        self.end_recovery();
        self.out.push_back(MenasceOut::BecameLc);
    }

    /// RNA from the new LC: apply the lists, resume.
    pub(super) fn on_resume(&mut self, from: DeviceId, up: Vec<DeviceId>) {
        if self.status != Status::Recovery || self.new_lc != Some(from) {
            return;
        }
        self.apply_lists();
        self.up = up;
        self.lc = Some(from);
        self.status = Status::Normal;
        self.end_recovery();
    }

    /// The L-list into the LOCK table, the R-list out of it.
    fn apply_lists(&mut self) {
        for (x, s) in std::mem::take(&mut self.l_list) {
            self.table.insert(x, s);
        }
        for (y, _) in std::mem::take(&mut self.r_list) {
            self.table.remove(&y);
        }
    }

    fn end_recovery(&mut self) {
        self.trial = None;
        self.new_lc = None;
        self.old_lc = None;
        self.nominating = None;
        self.generating = None;
        self.timers.remove(&Timer::Recovery);
        self.timers.remove(&Timer::AnRetry);
        self.timers.remove(&Timer::Confirm);
    }
}
