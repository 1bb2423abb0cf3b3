//! Single node recovery (seed 004 §4.3): a site coming up asks WHO IS THE LC?, says HI
//! THERE to an LC named by a site in NORMAL status, and gets the LOCK table, the up list
//! and an ACCEPT for every outstanding request. With no such answer it becomes the LC of
//! a logical component of its own, with empty tables.

use super::{MenasceMsg, MenasceOut, Pending, Settings, Site, Status, Timer};
use crate::ids::DeviceId;
use crate::time::Instant;

impl Site {
    /// Site `me` of the sites `order`, coming up after a crash: it knows no LC and keeps
    /// nothing (call [`Site::recover`] to start single node recovery).
    pub fn coming_up(me: DeviceId, order: Vec<DeviceId>, settings: Settings) -> Site {
        let mut s = Site::new(me, order, me, settings);
        s.status = Status::Joining;
        s.lc = None;
        s.up = vec![me];
        s
    }

    /// Start (or restart) single node recovery: WLC to every other site.
    pub fn recover(&mut self, now: Instant) {
        if self.status != Status::Joining {
            return;
        }
        self.said_hi = None;
        let others: Vec<DeviceId> = (self.order.iter().copied())
            .filter(|s| *s != self.me)
            .collect();
        for to in others {
            self.send(to, MenasceMsg::WhoIsTheLc);
        }
        self.set_timer(Timer::Wlc, now + self.settings.wlc_timeout);
    }

    /// WLC: name the LC this site knows, and whether its component is NORMAL.
    pub(super) fn on_who_is_the_lc(&mut self, from: DeviceId) {
        let lc = if self.status == Status::Joining {
            None
        } else {
            self.lc
        };
        self.send(
            from,
            MenasceMsg::TheLcIs {
                lc,
                normal: self.status == Status::Normal,
            },
        );
    }

    /// A site coming up: the first answer naming an LC of a NORMAL component gets HT.
    pub(super) fn on_the_lc_is(&mut self, now: Instant, lc: Option<DeviceId>, normal: bool) {
        if self.status != Status::Joining || self.said_hi.is_some() || !normal {
            return;
        }
        let Some(lc) = lc.filter(|l| *l != self.me) else {
            return;
        };
        self.said_hi = Some(lc);
        self.send(lc, MenasceMsg::HiThere);
        self.set_timer(Timer::Wlc, now + self.settings.wlc_timeout);
    }

    /// LC: HT from a site coming up — send it the LOCK table and the up list, and an
    /// ACCEPT for every outstanding request. Only a LC in NORMAL status answers.
    pub(super) fn on_hi_there(&mut self, from: DeviceId) {
        if !self.is_lc() {
            return;
        }
        if !self.up.contains(&from) {
            self.up.push(from);
            let order = self.order.clone();
            self.up
                .sort_by_key(|s| order.iter().position(|o| o == s).unwrap_or(usize::MAX));
        }
        self.send(
            from,
            MenasceMsg::LockTable {
                table: self.table.clone(),
                up: self.up.clone(),
            },
        );
        let pending: Vec<_> = (self.outstanding.iter())
            .map(|(s, o)| (*s, o.lock, o.lock_request))
            .collect();
        for (seq, lock, lock_request) in pending {
            if let Some(o) = self.outstanding.get_mut(&seq) {
                o.waiting.insert(from);
            }
            let msg = self.accept_msg(lock, seq, lock_request);
            self.send(from, msg);
        }
    }

    /// A site coming up: the LC's LOCK table — it is now an LLC of that component.
    pub(super) fn on_lock_table(&mut self, from: DeviceId, table: Pending, up: Vec<DeviceId>) {
        if self.status != Status::Joining || self.said_hi != Some(from) {
            return;
        }
        self.max_seq = table.values().copied().max().unwrap_or_default();
        self.table = table;
        self.up = up;
        self.lc = Some(from);
        self.status = Status::Normal;
        self.timers.remove(&Timer::Wlc);
    }

    /// A site coming up heard no usable answer: alone, it is the LC of its own
    /// component; if the LC it said HT to did not answer, SNR restarts (§4.4).
    pub(super) fn wlc_timeout(&mut self, now: Instant) {
        if self.status != Status::Joining {
            return;
        }
        if self.said_hi.is_some() {
            self.recover(now);
            return;
        }
        self.status = Status::Normal;
        self.lc = Some(self.me);
        self.up = vec![self.me];
        self.table.clear();
        self.l_list.clear();
        self.r_list.clear();
        self.out.push_back(MenasceOut::BecameLc);
    }
}
