//! Logical component merge, the reconnection detection phase (seed 004 §4.5, Figure 3).
//!
//! An LC in NORMAL status sends WERE YOU ALIVE (WYA) periodically to every site not in
//! its up list; a site of a NORMAL component answers YES I WAS (YIW) with its LC's id.
//! The LC (LC1) then attempts a primary-secondary (P-S) connection: LET US MERGE (LUM)
//! with its up list `U1`, and its status becomes ATTEMPT. The other LC (LC2) answers:
//!
//! | LC2's state              | LUM from LC1                           | next state  |
//! |--------------------------|----------------------------------------|-------------|
//! | NORMAL                   | MA (with `U2`)                         | SECONDARY   |
//! | ATTEMPT, LC1 higher      | CC to its intended secondary; MA       | SECONDARY   |
//! | ATTEMPT, LC1 lower       | MAR                                    | ATTEMPT     |
//! | CONNECTION ESTABLISHED, PRIMARY, SECONDARY, not a working LC | MAR | unchanged |
//!
//! LC1 in ATTEMPT: MA → CONNECTION ESTABLISHED (an e-arc, §5.1); MAR → NORMAL (it tries
//! again at a later WYA round, perhaps with another LC). A secondary that receives CC
//! from its primary goes back to NORMAL. The seed's priorities are site-dependent and
//! distinct; here a site's priority is its id (the larger id is the higher priority).
//!
//! Once connected, both LCs are QUIESCENT (§5.2): they take no new lock or release
//! requests and complete the outstanding ones. Each drops from its up list the sites the
//! other's up list also names (`U2' = U2 ∩ U1`: sites it had not yet sensed belonged to
//! another component) and releases, by SafeTalk, the locks that are then no longer local
//! — an outstanding request completed like the others. When none is left the secondary
//! sends READY TO MERGE (RTM) with `U2` and its LOCK table, which ends this phase. The
//! merge phase — the SUBSTITUTE YOUR TABLE cycle — is in [`super::syt`].
//!
//! Crashes (§4.6, Case 1): no LOCK table or up list outside the two LCs has changed yet,
//! so a crash of either LC aborts the merge: the other LC, waiting for MA, RTM or the
//! SYT, times out and returns to NORMAL (a primary that gives up on RTM sends CC, in case
//! the secondary was only slow).

use super::{LockId, MenasceMsg, PsState, Site, Status, Timer};
use crate::ids::DeviceId;
use crate::time::Instant;

impl Site {
    /// Site `me` of the sites `order`, in a logical component whose LC is `lc` and whose
    /// up list is `up` (as left by a partition and LCR).
    pub fn in_component(
        me: DeviceId,
        order: Vec<DeviceId>,
        lc: DeviceId,
        up: Vec<DeviceId>,
        settings: super::Settings,
    ) -> Site {
        let mut s = Site::new(me, order, lc, settings);
        s.up = up;
        s
    }

    /// Start reconnection detection (§4.5): while this site is a working LC in NORMAL
    /// status it sends WERE YOU ALIVE to every site not in its up list, first at `first`,
    /// then every [`super::Settings::wya_period`]. The timer keeps running at every site
    /// that called this, so an LLC that later becomes an LC (LCR, or alone after SNR)
    /// probes too.
    pub fn start_reconnection_detection(&mut self, first: Instant) {
        self.detecting = true;
        self.set_timer(Timer::Wya, first);
    }

    /// The sites holding lock `lock`'s data (`LOC(P)`, §2): with
    /// [`super::Settings::copies`] `c`, the `c` sites from `P mod n` on in the nomination
    /// order; otherwise every site.
    pub fn loc(&self, lock: LockId) -> Vec<DeviceId> {
        let n = self.order.len() as u64;
        match self.settings.copies {
            Some(c) if n > 0 => (0..c.min(n))
                .map(|i| self.order[((lock.0 + i) % n) as usize])
                .collect(),
            _ => self.order.clone(),
        }
    }

    /// Whether `lock` is local to a component whose up list is `up` (§2: `LOC(P)` is
    /// contained in it). Always true when locality is not enforced.
    pub fn is_local(&self, lock: LockId, up: &[DeviceId]) -> bool {
        self.settings.copies.is_none()
            || self.planted.ignore_locality
            || self.loc(lock).iter().all(|s| up.contains(s))
    }

    /// A site's priority in the P-S connection protocol: distinct per site.
    fn priority(s: DeviceId) -> u64 {
        s.0
    }

    /// The periodic WYA round.
    pub(super) fn wya_round(&mut self, now: Instant) {
        if !self.detecting {
            return;
        }
        self.set_timer(Timer::Wya, now + self.settings.wya_period);
        if !self.is_lc() || self.ps != PsState::Normal {
            return;
        }
        let outside: Vec<DeviceId> = (self.order.iter().copied())
            .filter(|s| !self.up.contains(s))
            .collect();
        for to in outside {
            self.send(to, MenasceMsg::WereYouAlive);
        }
    }

    /// WYA from an LC: a site of a NORMAL component answers YIW with its LC's id. The
    /// LC itself answers only when it is attempting no connection (ATTEMPT is LCM in
    /// progress, so not NORMAL).
    pub(super) fn on_were_you_alive(&mut self, from: DeviceId) {
        let Some(lc) = self.lc else { return };
        if self.status != Status::Normal || lc == from || from == self.me {
            return;
        }
        if lc == self.me && self.ps != PsState::Normal {
            return;
        }
        self.send(from, MenasceMsg::YesIWas { lc });
    }

    /// YIW at LC1: attempt a P-S connection with LC2 — LUM with `U1`, status ATTEMPT.
    /// Further YIWs are ignored while a connection is attempted or established (C1).
    pub(super) fn on_yes_i_was(&mut self, now: Instant, lc2: DeviceId) {
        if !self.is_lc() || self.ps != PsState::Normal || lc2 == self.me {
            return;
        }
        self.send(
            lc2,
            MenasceMsg::LetUsMerge {
                up: self.up.clone(),
            },
        );
        self.ps = PsState::Attempt { secondary: lc2 };
        self.set_timer(Timer::Merge, now + self.settings.merge_timeout);
    }

    /// LUM at LC2 (Figure 3).
    pub(super) fn on_let_us_merge(&mut self, now: Instant, from: DeviceId, u1: Vec<DeviceId>) {
        if from == self.me {
            return;
        }
        if !self.is_lc() {
            // Not a working LC (an LLC, recovering, or quiescent in a connection): no
            // NORMAL LC here to merge with.
            self.send(from, MenasceMsg::MergeAttemptRejected);
            return;
        }
        match self.ps {
            PsState::Normal => self.accept_merge(now, from, u1),
            PsState::Attempt { secondary }
                if Self::priority(from) > Self::priority(self.me)
                    && !self.planted.attempt_rejects_every_lum =>
            {
                // LUM/CC;MA: the higher-priority LC wins; the attempt is broken.
                if self.planted.keep_attempt_on_lum {
                    self.merging.kept_attempt = Some(secondary);
                } else {
                    self.send(secondary, MenasceMsg::CloseConnection);
                }
                self.accept_merge(now, from, u1);
            }
            _ => self.send(from, MenasceMsg::MergeAttemptRejected),
        }
    }

    /// LC2 accepts: MA with `U2`, SECONDARY, QUIESCENT; the sites of `U2 ∩ U1` leave its
    /// up list and the locks no longer local are released.
    fn accept_merge(&mut self, now: Instant, primary: DeviceId, u1: Vec<DeviceId>) {
        self.send(
            primary,
            MenasceMsg::MergeAccepted {
                up: self.up.clone(),
            },
        );
        self.ps = PsState::Secondary { primary };
        self.status = Status::Quiescent;
        let kept = self.merging.kept_attempt.take();
        self.merging = Default::default();
        self.merging.kept_attempt = kept;
        self.merging.other_up = u1.clone();
        self.drop_sites_of(now, &u1);
        self.set_timer(Timer::Merge, now + self.settings.merge_timeout);
        self.merge_progress(now);
    }

    /// MA at LC1: CONNECTION ESTABLISHED, QUIESCENT; the same up list and locality
    /// procedure with `U2`.
    pub(super) fn on_merge_accepted(&mut self, now: Instant, from: DeviceId, u2: Vec<DeviceId>) {
        let attempted = self.ps == PsState::Attempt { secondary: from };
        let kept = self.merging.kept_attempt == Some(from);
        if !(attempted || kept) || !self.leads() {
            return;
        }
        self.ps = PsState::ConnectionEstablished { secondary: from };
        self.status = Status::Quiescent;
        self.merging = Default::default();
        self.merging.other_up = u2.clone();
        self.drop_sites_of(now, &u2);
        self.set_timer(Timer::Merge, now + self.settings.merge_timeout);
        self.merge_progress(now);
    }

    /// MAR at LC1: the attempt failed; NORMAL again.
    pub(super) fn on_merge_attempt_rejected(&mut self, from: DeviceId) {
        if self.merging.kept_attempt == Some(from) {
            self.merging.kept_attempt = None;
        }
        if self.ps == (PsState::Attempt { secondary: from }) {
            self.ps = PsState::Normal;
            self.timers.remove(&Timer::Merge);
        }
    }

    /// CC at an intended secondary: the primary broke the connection; NORMAL again.
    pub(super) fn on_close_connection(&mut self, from: DeviceId) {
        if self.ps == (PsState::Secondary { primary: from }) {
            self.abort_merge();
        }
    }

    /// RTM at LC1: the end of the reconnection detection phase.
    pub(super) fn on_ready_to_merge(
        &mut self,
        now: Instant,
        from: DeviceId,
        u2: Vec<DeviceId>,
        table: super::Pending,
        max_seq: super::Seq,
    ) {
        if self.ps != (PsState::ConnectionEstablished { secondary: from }) {
            return;
        }
        // `TEMP_U = U1 ∪ U2` keeps the sites both LCs dropped from their up lists.
        for site in u2 {
            if !self.merging.other_up.contains(&site) {
                self.merging.other_up.push(site);
            }
        }
        self.merging.rtm = Some((table, max_seq));
        self.merge_progress(now);
    }

    /// The other LC did not answer in time: it is taken for crashed and the merge is
    /// aborted (§4.6, Case 1; a secondary whose primary crashed in the merge phase, Case
    /// 2, likewise).
    pub(super) fn merge_timeout(&mut self, _now: Instant) {
        match self.ps {
            PsState::Attempt { .. } => self.ps = PsState::Normal,
            PsState::ConnectionEstablished { secondary } => {
                self.send(secondary, MenasceMsg::CloseConnection);
                self.abort_merge();
            }
            PsState::Secondary { .. } => self.abort_merge(),
            PsState::Normal | PsState::Primary { .. } => {}
        }
    }

    /// Back to NORMAL, taking requests again.
    pub(super) fn abort_merge(&mut self) {
        self.ps = PsState::Normal;
        self.merging = Default::default();
        self.timers.remove(&Timer::Merge);
        if self.status == Status::Quiescent {
            self.status = Status::Normal;
        }
    }

    /// The sites of this LC's up list that `other` (the other LC's up list) also names
    /// leave it: the outstanding requests stop waiting for them, and the locks that are
    /// no longer local are released.
    fn drop_sites_of(&mut self, now: Instant, other: &[DeviceId]) {
        let gone: Vec<DeviceId> = (self.up.iter().copied())
            .filter(|s| *s != self.me && other.contains(s))
            .collect();
        if gone.is_empty() {
            return;
        }
        self.up.retain(|s| !gone.contains(s));
        let seqs: Vec<_> = self.outstanding.keys().copied().collect();
        for seq in seqs {
            if let Some(o) = self.outstanding.get_mut(&seq) {
                o.waiting.retain(|s| !gone.contains(s));
            }
            self.maybe_confirm(seq);
        }
        self.release_non_local(now);
    }

    /// Release, by SafeTalk, every lock in the LOCK table that is not local to the up
    /// list and not already being released.
    fn release_non_local(&mut self, now: Instant) {
        let releasing: Vec<LockId> = (self.outstanding.values())
            .filter(|o| !o.lock_request)
            .map(|o| o.lock)
            .collect();
        let non_local: Vec<LockId> = (self.table.keys().copied())
            .filter(|l| !releasing.contains(l) && !self.is_local(*l, &self.up))
            .collect();
        for lock in non_local {
            self.start_request(now, lock, false);
        }
    }

    /// A connected LC's next step once its outstanding requests are complete: the
    /// secondary sends RTM; the primary, with the RTM in hand, starts the SYT cycle.
    pub(super) fn merge_progress(&mut self, now: Instant) {
        match self.ps {
            PsState::Secondary { primary } if !self.merging.rtm_sent => {
                self.release_non_local(now);
                if !self.outstanding.is_empty() {
                    return;
                }
                self.merging.rtm_sent = true;
                self.send(
                    primary,
                    MenasceMsg::ReadyToMerge {
                        up: self.up.clone(),
                        table: self.table.clone(),
                        max_seq: self.max_seq,
                    },
                );
                self.set_timer(Timer::Merge, now + self.settings.merge_timeout);
            }
            PsState::ConnectionEstablished { secondary } => {
                self.release_non_local(now);
                if !self.outstanding.is_empty() {
                    return;
                }
                if let Some((table, max_seq)) = self.merging.rtm.take() {
                    self.start_syt(now, secondary, table, max_seq);
                }
            }
            _ => {}
        }
    }
}
