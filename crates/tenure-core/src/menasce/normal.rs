//! Normal operation (seed 004 §3, Appendix A): the lock granting and lock releasing
//! algorithms, both SafeTalk. The LC is the sender, the LLCs the destinations, the L-list
//! (R-list) the temp buffer and the LOCK table the final buffer.

use super::LockId;
use super::{MenasceError, MenasceMsg, MenasceOut, Outstanding, Seq, Site, Status, Timer};
use crate::ids::DeviceId;
use crate::time::Instant;
use std::collections::BTreeSet;

impl Site {
    /// LR: an application program asks the LC for `lock` (§3.1). The LC sends ACCEPT
    /// LOCK to every LLC in its up list; the lock is granted when all have accepted.
    pub fn lock(&mut self, now: Instant, lock: LockId) -> Result<Seq, MenasceError> {
        self.check_lc()?;
        if !self.is_local(lock, &self.up) {
            return Err(MenasceError::NotLocal(lock));
        }
        let busy =
            self.table.contains_key(&lock) || self.outstanding.values().any(|o| o.lock == lock);
        if busy {
            return Err(MenasceError::AlreadyLocked(lock));
        }
        Ok(self.start_request(now, lock, true))
    }

    /// RL: an application program asks the LC to release `lock` (§3.2).
    pub fn release(&mut self, now: Instant, lock: LockId) -> Result<Seq, MenasceError> {
        self.check_lc()?;
        let releasing = self.outstanding.values().any(|o| o.lock == lock);
        if !self.table.contains_key(&lock) || releasing {
            return Err(MenasceError::NotLocked(lock));
        }
        Ok(self.start_request(now, lock, false))
    }

    /// The requests the LC has sent and not yet seen accepted by every up LLC.
    pub fn outstanding(&self) -> impl Iterator<Item = (Seq, LockId, bool)> + '_ {
        (self.outstanding.iter()).map(|(s, o)| (*s, o.lock, o.lock_request))
    }

    fn check_lc(&self) -> Result<(), MenasceError> {
        if self.is_lc() {
            Ok(())
        } else {
            Err(MenasceError::NotLc {
                site: self.me,
                status: self.status,
            })
        }
    }

    pub(super) fn start_request(&mut self, _now: Instant, lock: LockId, lock_request: bool) -> Seq {
        let seq = self.next_seq;
        self.next_seq = Seq(seq.0 + 1);
        self.see_seq(seq);
        let waiting: BTreeSet<DeviceId> =
            self.up.iter().copied().filter(|s| *s != self.me).collect();
        for to in &waiting {
            let msg = self.accept_msg(lock, seq, lock_request);
            self.send(*to, msg);
        }
        self.outstanding.insert(
            seq,
            Outstanding {
                lock,
                lock_request,
                waiting,
            },
        );
        self.maybe_confirm(seq);
        seq
    }

    /// AL or AR for a request, with the up list.
    pub(super) fn accept_msg(&self, lock: LockId, seq: Seq, lock_request: bool) -> MenasceMsg {
        let up = self.up.clone();
        if lock_request {
            MenasceMsg::AcceptLock { lock, seq, up }
        } else {
            MenasceMsg::AcceptRelease { lock, seq, up }
        }
    }

    /// LLC: AL or AR from the LC — into the L-list (R-list), and LA (RA) back.
    pub(super) fn on_accept(
        &mut self,
        now: Instant,
        from: DeviceId,
        (lock, seq): (LockId, Seq),
        up: Vec<DeviceId>,
        lock_request: bool,
    ) {
        if self.status != Status::Normal || self.lc != Some(from) || from == self.me {
            return;
        }
        self.see_seq(seq);
        self.up = up;
        if lock_request {
            self.l_list.insert(lock, seq);
            self.send(from, MenasceMsg::LockAccepted { seq });
        } else {
            self.r_list.insert(lock, seq);
            self.send(from, MenasceMsg::ReleaseAccepted { seq });
        }
        if let Some(d) = self.settings.confirm_timeout
            && !self.timers.contains_key(&Timer::Confirm)
        {
            self.set_timer(Timer::Confirm, now + d);
        }
    }

    /// LC: LA or RA from an LLC.
    /// A merging LC (QUIESCENT) completes its outstanding requests (§4.5).
    pub(super) fn on_accepted(&mut self, now: Instant, from: DeviceId, seq: Seq) {
        if !self.leads() {
            return;
        }
        if let Some(o) = self.outstanding.get_mut(&seq) {
            o.waiting.remove(&from);
        }
        self.maybe_confirm(seq);
        self.merge_progress(now);
    }

    /// LC: every up LLC accepted `seq` — apply it, CONFIRM it, tell the application.
    pub(super) fn maybe_confirm(&mut self, seq: Seq) {
        if !self
            .outstanding
            .get(&seq)
            .is_some_and(|o| o.waiting.is_empty())
        {
            return;
        }
        let o = self.outstanding.remove(&seq).expect("outstanding");
        if o.lock_request {
            self.table.insert(o.lock, seq);
        } else {
            self.table.remove(&o.lock);
        }
        let others: Vec<DeviceId> = self.up.iter().copied().filter(|s| *s != self.me).collect();
        for to in others {
            let msg = if o.lock_request {
                MenasceMsg::ConfirmLock { lock: o.lock, seq }
            } else {
                MenasceMsg::ConfirmRelease { lock: o.lock, seq }
            };
            self.send(to, msg);
        }
        self.out.push_back(MenasceOut::Granted {
            lock: o.lock,
            lock_request: o.lock_request,
        });
    }

    /// LLC: CL or CR — the request moves from the L-list (R-list) into the LOCK table
    /// (out of it).
    pub(super) fn on_confirm(
        &mut self,
        from: DeviceId,
        lock: LockId,
        seq: Seq,
        lock_request: bool,
    ) {
        if self.status != Status::Normal || self.lc != Some(from) || from == self.me {
            return;
        }
        if lock_request {
            if self.l_list.get(&lock) == Some(&seq) {
                self.l_list.remove(&lock);
            }
            self.table.insert(lock, seq);
        } else {
            if self.r_list.get(&lock) == Some(&seq) {
                self.r_list.remove(&lock);
            }
            self.table.remove(&lock);
        }
        if self.l_list.is_empty() && self.r_list.is_empty() {
            self.timers.remove(&Timer::Confirm);
        }
    }

    /// LLC: a CONFIRM did not come in time — the LC is taken for crashed (§4.1: "a crash
    /// of the LC can be detected by any process engaged in a conversation ... with it").
    pub(super) fn confirm_timeout(&mut self, now: Instant) {
        let waiting = !self.l_list.is_empty() || !self.r_list.is_empty();
        if self.status == Status::Normal && waiting && self.lc != Some(self.me) {
            self.detect_lc_crash(now);
        }
    }
}
