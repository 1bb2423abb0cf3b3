//! Menasce, Popek and Muntz's centralized lock controller with its logical component
//! recovery (seed 004 §3–§4), as a sans-IO machine for the lab (DESIGN §6).
//!
//! One [`Site`] runs at every node. A logical component has one lock controller (LC); the
//! other sites are local lock controllers (LLCs) holding a copy of the LOCK table.
//!
//! - **Normal operation** (§3, Appendix A; [`normal`]): the LC tags a lock (release)
//!   request with the next sequence number and sends ACCEPT LOCK (ACCEPT RELEASE) to every
//!   LLC in its up list; an LLC puts it in its L-list (R-list) and answers LOCK ACCEPTED
//!   (RELEASE ACCEPTED); when every up LLC has answered, the LC applies it and sends
//!   CONFIRM LOCK (CONFIRM RELEASE), which moves it into the LLC's LOCK table.
//! - **Logical component recovery** (§4.1; [`nomination`], [`na_cycle`], [`update`]): the
//!   site that detects the LC's crash nominates the next site in the nomination order with
//!   ACCEPT NOMINATION, trying the following one when the nominee does not acknowledge in
//!   time, and carrying the trial sequence of the sites it tried. The nominee sends
//!   NOMINATION ACCEPTED round its up list; each site keeps the NA of the most recently
//!   nominated LC (its trial list `T`), answers an older one with KILL NA, and adds its
//!   L- and R-lists to the NA's sets L and R by sequence number. Each site acknowledges
//!   the NA to its generator after forwarding it, so the generator can resume the cycle
//!   past a site that crashed. Then UPDATE TABLE sets every L- and R-list to L and R,
//!   READY TO UPDATE answers it, and RESUME NORMAL ACTIVITY, with the new up list, makes
//!   every site apply its lists to its LOCK table.
//! - **Single node recovery** (§4.3; [`snr`]): a site coming up asks WHO IS THE LC, says
//!   HI THERE to the LC named in a reply, and receives the LOCK table, the up list and an
//!   ACCEPT for each outstanding request. With no reply naming a component in NORMAL
//!   status it becomes the LC of a component of its own.
//!
//! - **Logical component merge** (§4.5; [`merge`], [`syt`]): an LC in NORMAL status
//!   sends WERE YOU ALIVE to every site not in its up list; a site of a NORMAL component
//!   answers YES I WAS with its LC's id. The LC then attempts a primary-secondary (P-S)
//!   connection with LET US MERGE; the other LC answers MERGE ACCEPTED, MERGE ATTEMPT
//!   REJECTED, or — when it was itself attempting a connection and the LUM comes from a
//!   higher-priority LC — breaks its own attempt with CLOSE CONNECTION and accepts
//!   (Figure 3). Both LCs stop taking requests, release the locks that are no longer
//!   local, complete the outstanding ones; the secondary sends READY TO MERGE with its
//!   up list and LOCK table, and the primary sends SUBSTITUTE YOUR TABLE round
//!   `TEMP_U = U1 ∪ U2` with the union of the LOCK tables, the new up list and itself as
//!   the new LC.
//!
//! Every lock is relevant to every site (full replication) unless [`Settings::copies`]
//! places each lock's data on a few sites (`LOC(P)`), so a request goes to the whole up
//! list. With `copies` set the LC grants only *local* locks (`LOC(P)` inside its up
//! list, §2), which is what keeps locks granted in different components from ever
//! conflicting (§6, Theorem 8); without it locality is not enforced, as the recovery
//! experiment needs no partitions. Contract, in the manner of quinn-proto: commands
//! [`Site::lock`], [`Site::release`] (an application program's LOCK REQUEST and RELEASE
//! REQUEST at the LC), [`Site::detect_lc_crash`] (an application program timed out on
//! the LC), [`Site::recover`] (the node came up) and
//! [`Site::start_reconnection_detection`] (the periodic WYA); inputs [`Site::handle_msg`] and
//! [`Site::handle_timeout`]; outputs [`Site::poll_output`] and [`Site::poll_timeout`]. A
//! driver drains `poll_output` after every call.

mod merge;
#[cfg(test)]
mod merge_tests;
mod na_cycle;
mod nomination;
mod normal;
mod snr;
mod syt;
#[cfg(test)]
mod tests;
mod update;

use crate::ids::DeviceId;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

mod msg;
pub use msg::MenasceMsg;

/// A lock, identified by its request: the seed's `(H, T, P)`. A lock granted again later
/// is a new request with a new id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LockId(pub u64);

/// A sequence number the LC tags a request with (§2): later requests have larger ones.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Seq(pub u64);

/// Pending lock (or release) requests: lock → the request's sequence number.
pub type Pending = BTreeMap<LockId, Seq>;

/// The NOMINATION ACCEPTED message (§4.1): it circulates once through the new LC's up
/// list, collecting the sets L and R.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Na {
    /// The nominee that generated it (the new LC `k`).
    pub new_lc: DeviceId,
    /// The crashed LC it replaces.
    pub old_lc: DeviceId,
    /// The trial sequence `T[j, k]` of its ACCEPT NOMINATION.
    pub trial: Vec<DeviceId>,
    /// The cycle's order: the new LC's up list, starting after the new LC.
    pub cycle: Vec<DeviceId>,
    /// Sites that added their lists, in order.
    pub visited: Vec<DeviceId>,
    /// Locks to add to every LOCK table.
    pub l: Pending,
    /// Locks to delete from every LOCK table.
    pub r: Pending,
    /// The highest sequence number any visited site has seen.
    pub max_seq: Seq,
}

/// The SUBSTITUTE YOUR TABLE message (§4.5): it circulates once through
/// `TEMP_U = U1 ∪ U2`, taking the merged LOCK table, the new up list and the new LC.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Syt {
    /// LC1, the primary: the new LC.
    pub primary: DeviceId,
    /// LC2, the secondary.
    pub secondary: DeviceId,
    /// The union of the two LOCK tables.
    pub table: Pending,
    /// `TEMP_U`, the new up list.
    pub up: Vec<DeviceId>,
    /// The cycle's order: LC2 first, then the rest of `TEMP_U` after LC1.
    pub cycle: Vec<DeviceId>,
    /// Sites that installed the table, in order.
    pub visited: Vec<DeviceId>,
    /// The highest sequence number either LC has used.
    pub max_seq: Seq,
}

/// What a site asks its driver to do, or tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum MenasceOut {
    /// Send a message.
    Send {
        /// Destination.
        to: DeviceId,
        /// Message.
        msg: MenasceMsg,
    },
    /// The LC applied a request (it is in the LC's LOCK table, or left it): the
    /// application program's LOCK GRANTED or RELEASE GRANTED.
    Granted {
        /// The lock.
        lock: LockId,
        /// True for a lock, false for a release.
        lock_request: bool,
    },
    /// This site became the LC of its logical component (it sent RNA, or started a
    /// component of its own).
    BecameLc,
    /// The SYT came back to this primary: the merge with `secondary`'s component is
    /// complete and this site is the LC of the merged component.
    Merged {
        /// LC2.
        secondary: DeviceId,
        /// The merged component's up list.
        up: Vec<DeviceId>,
    },
}

/// The status of a site's component as the site sees it (§5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Status {
    /// Neither LCR nor LCM in progress.
    Normal,
    /// LCR in progress.
    Recovery,
    /// Coming up: single node recovery in progress.
    Joining,
    /// QUIESCENT (§5.2): an LC in a P-S connection, rejecting further requests while it
    /// completes the outstanding ones and merges.
    Quiescent,
}

/// The P-S connection states of an LC (§4.5, Figure 3). The e-arcs of §5.1 go from an
/// LC in `ConnectionEstablished` or `Primary` to its secondary, the a-arcs from an LC in
/// `Attempt` to its intended secondary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum PsState {
    /// NORMAL: no connection attempted or established.
    Normal,
    /// ATTEMPT: LUM sent to `secondary`, MA or MAR awaited.
    Attempt {
        /// The intended secondary.
        secondary: DeviceId,
    },
    /// CONNECTION ESTABLISHED, as the primary: MA received; completing the outstanding
    /// requests and waiting for RTM.
    ConnectionEstablished {
        /// The secondary.
        secondary: DeviceId,
    },
    /// PRIMARY in the merge phase: the SYT is circulating.
    Primary {
        /// The secondary.
        secondary: DeviceId,
    },
    /// SECONDARY: MA sent; completing the outstanding requests, then RTM, then waiting
    /// for the SYT.
    Secondary {
        /// The primary.
        primary: DeviceId,
    },
}

/// A command given at the wrong moment.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MenasceError {
    /// LOCK REQUEST or RELEASE REQUEST at a site that is not a working LC.
    #[error("site {site} is not the working LC (status {status:?})")]
    NotLc {
        /// The site.
        site: DeviceId,
        /// Its status.
        status: Status,
    },
    /// A lock request for a lock already granted or pending.
    #[error("lock {0:?} is already granted or pending")]
    AlreadyLocked(LockId),
    /// A release for a lock that is not granted.
    #[error("lock {0:?} is not granted")]
    NotLocked(LockId),
    /// A lock request for data not all stored in the LC's component (§2: `LOC(P)` is not
    /// inside the up list).
    #[error("lock {0:?} is not local to the component")]
    NotLocal(LockId),
}

/// Timing settings (the seed's timeouts).
#[derive(Clone, Debug)]
pub struct Settings {
    /// How long a nominator waits for a nominee's acknowledgment before retransmitting
    /// the AN.
    pub an_retry: Duration,
    /// Retransmissions of an AN before the nominee is assumed down: the seed's `τ_out` is
    /// `an_retry × (an_retries + 1)`.
    pub an_retries: u32,
    /// How long the NA's generator waits for the next site's acknowledgment before
    /// resuming the cycle past it (and how long the new LC waits for RU answers).
    pub cycle_timeout: Duration,
    /// How long a site in RECOVERY waits for UPDATE TABLE or RESUME NORMAL ACTIVITY
    /// before it takes the new LC for crashed and restarts LCR.
    pub recovery_timeout: Duration,
    /// How long an LLC waits for the CONFIRM of a request it accepted before it takes the
    /// LC for crashed (`None`: only [`Site::detect_lc_crash`] detects it).
    pub confirm_timeout: Option<Duration>,
    /// How long a site coming up waits for answers to WLC and for the LOCK table.
    pub wlc_timeout: Duration,
    /// How often an LC sends WERE YOU ALIVE to the sites not in its up list, once
    /// [`Site::start_reconnection_detection`] has been called.
    pub wya_period: Duration,
    /// How long an LC waits in a P-S connection for the other LC's next message (MA or
    /// MAR in ATTEMPT, RTM in CONNECTION ESTABLISHED, SYT in SECONDARY) before it takes
    /// the other for crashed and aborts the merge; also how long the SYT's generator
    /// waits for the cycle to progress.
    pub merge_timeout: Duration,
    /// `LOC(P)` (§2): each lock's data is on this many sites, consecutive in the
    /// nomination order from site `P mod n`, and only local locks are granted. `None`:
    /// every site holds everything and locality is not enforced.
    pub copies: Option<u64>,
}

impl Settings {
    /// Timeouts as multiples of one message time `tau`.
    pub fn for_message_time(tau: Duration) -> Settings {
        Settings {
            an_retry: tau * 3,
            an_retries: 1,
            cycle_timeout: tau * 4,
            recovery_timeout: tau * 40,
            confirm_timeout: None,
            wlc_timeout: tau * 4,
            wya_period: tau * 40,
            merge_timeout: tau * 40,
            copies: None,
        }
    }

    /// The seed's `τ_out`: the time after which a nominator assumes the nominee is down.
    pub fn tau_out(&self) -> Duration {
        self.an_retry * (self.an_retries + 1)
    }
}

/// Planted bugs (lab checker tests only).
#[derive(Clone, Debug, Default)]
pub struct PlantedBugs {
    /// The NA merge ignores sequence numbers: a lock in an L-list is always added to L,
    /// even when its release is in R (loses maximum forward progress in cases 9–11).
    pub merge_ignores_seq: bool,
    /// A site accepts every NA, whatever its trial list says, and never sends KILL NA
    /// (two LCs can come out of one recovery).
    pub accept_every_na: bool,
    /// LCM: the LUM/CC;MA transition sends no CLOSE CONNECTION and keeps the attempt: an
    /// MA that arrives for it later makes the site a primary while it is a secondary.
    pub keep_attempt_on_lum: bool,
    /// LCM: an LC in ATTEMPT rejects every LUM, a higher-priority one too (no LUM/CC;MA
    /// transition), so a cycle of attempts never breaks.
    pub attempt_rejects_every_lum: bool,
    /// LCM: locality is not enforced — the LC grants locks that are not local to its
    /// component and keeps them at the merge.
    pub ignore_locality: bool,
    /// LCM: the SYT carries the primary's LOCK table only, not the union.
    pub syt_drops_secondary_table: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    /// Nominator: the nominee did not acknowledge the AN.
    AnRetry,
    /// NA generator: the cycle made no progress; new LC: RU answers are due.
    Cycle,
    /// A site in RECOVERY: UT or RNA is due.
    Recovery,
    /// An LLC: a CONFIRM is due.
    Confirm,
    /// A site coming up: answers to WLC or the LOCK table are due.
    Wlc,
    /// An LC: the next WERE YOU ALIVE round.
    Wya,
    /// An LC in a P-S connection: the other LC's next message is due.
    Merge,
    /// The SYT's generator: the cycle made no progress.
    Syt,
}

/// The LC's record of a request in SafeTalk.
#[derive(Clone, Debug)]
struct Outstanding {
    lock: LockId,
    lock_request: bool,
    waiting: BTreeSet<DeviceId>,
}

/// A nominator's attempt (§4.1): whom it nominated and whom it tried before.
#[derive(Clone, Debug)]
struct Nominating {
    old_lc: DeviceId,
    nominee: DeviceId,
    trial: Vec<DeviceId>,
    tries: u32,
}

/// The NA generator's view of its cycle.
#[derive(Clone, Debug)]
struct Generating {
    /// The last copy acknowledged (or the generator's own).
    last: Na,
    /// The site it was last forwarded to.
    sent_to: DeviceId,
    /// The cycle returned: UT sent, RU answers awaited from these sites.
    awaiting_ru: Option<BTreeSet<DeviceId>>,
    /// Sites that answered RU.
    ready: BTreeSet<DeviceId>,
}

/// An LC's part in a merge (§4.5) besides its P-S state.
#[derive(Clone, Debug, Default)]
struct Merging {
    /// The other LC's up list (U2 at the primary, U1 at the secondary).
    other_up: Vec<DeviceId>,
    /// Primary: the secondary's READY TO MERGE (its LOCK table and highest sequence
    /// number).
    rtm: Option<(Pending, Seq)>,
    /// Secondary: RTM sent.
    rtm_sent: bool,
    /// Primary in the merge phase: the last copy of the SYT acknowledged, and the site
    /// it was last forwarded to.
    syt: Option<(Syt, DeviceId)>,
    /// Planted bug `keep_attempt_on_lum`: the attempt kept.
    kept_attempt: Option<DeviceId>,
}

/// One site: its LLC, and its LC role when it is the LC.
#[derive(Clone, Debug)]
pub struct Site {
    me: DeviceId,
    /// Every site, in the nomination order.
    order: Vec<DeviceId>,
    settings: Settings,
    status: Status,
    /// The LC as this site knows it.
    lc: Option<DeviceId>,
    /// The up list `U`.
    up: Vec<DeviceId>,
    /// The LOCK table: lock → the sequence number that granted it.
    table: Pending,
    /// The L-list.
    l_list: Pending,
    /// The R-list.
    r_list: Pending,
    /// The highest sequence number this site has seen.
    max_seq: Seq,
    /// LC: requests sent in SafeTalk, not yet accepted by every up LLC.
    outstanding: BTreeMap<Seq, Outstanding>,
    /// LC: the next sequence number.
    next_seq: Seq,
    /// Trial list `T` of the present recovery (`None`: no NA received yet).
    trial: Option<Vec<DeviceId>>,
    /// `new_LC_i`.
    new_lc: Option<DeviceId>,
    /// The LC whose crash the present recovery repairs.
    old_lc: Option<DeviceId>,
    nominating: Option<Nominating>,
    generating: Option<Generating>,
    /// A site coming up: HI THERE sent to this LC.
    said_hi: Option<DeviceId>,
    /// The P-S connection state (Figure 3).
    ps: PsState,
    merging: Merging,
    /// WERE YOU ALIVE is sent periodically.
    detecting: bool,
    timers: BTreeMap<Timer, Instant>,
    out: VecDeque<MenasceOut>,
    /// Planted bugs.
    pub planted: PlantedBugs,
}

impl Site {
    /// Site `me` of the sites `order` (the nomination order), in a component whose LC is
    /// `lc` and whose up list is every site.
    pub fn new(me: DeviceId, order: Vec<DeviceId>, lc: DeviceId, settings: Settings) -> Site {
        Site {
            me,
            up: order.clone(),
            order,
            settings,
            status: Status::Normal,
            lc: Some(lc),
            table: Pending::new(),
            l_list: Pending::new(),
            r_list: Pending::new(),
            max_seq: Seq(0),
            outstanding: BTreeMap::new(),
            next_seq: Seq(1),
            trial: None,
            new_lc: None,
            old_lc: None,
            nominating: None,
            generating: None,
            said_hi: None,
            ps: PsState::Normal,
            merging: Merging::default(),
            detecting: false,
            timers: BTreeMap::new(),
            out: VecDeque::new(),
            planted: PlantedBugs::default(),
        }
    }

    /// This site.
    pub fn id(&self) -> DeviceId {
        self.me
    }

    /// The component's status as this site sees it.
    pub fn status(&self) -> Status {
        self.status
    }

    /// The LC as this site knows it.
    pub fn lc(&self) -> Option<DeviceId> {
        self.lc
    }

    /// Whether this site is a working LC (NORMAL status, and it is its own LC).
    pub fn is_lc(&self) -> bool {
        self.status == Status::Normal && self.lc == Some(self.me)
    }

    /// Whether this site leads its component: a working LC, or one in QUIESCENT status
    /// completing its outstanding requests for a merge.
    fn leads(&self) -> bool {
        self.lc == Some(self.me) && matches!(self.status, Status::Normal | Status::Quiescent)
    }

    /// The P-S connection state (§4.5, Figure 3).
    pub fn ps_state(&self) -> PsState {
        self.ps
    }

    /// The up list.
    pub fn up(&self) -> &[DeviceId] {
        &self.up
    }

    /// The LOCK table.
    pub fn table(&self) -> &Pending {
        &self.table
    }

    /// The L-list.
    pub fn l_list(&self) -> &Pending {
        &self.l_list
    }

    /// The R-list.
    pub fn r_list(&self) -> &Pending {
        &self.r_list
    }

    /// The trial list `T` of the present (or last) recovery.
    pub fn trial(&self) -> Option<&[DeviceId]> {
        self.trial.as_deref()
    }

    /// A message from `from`. Messages that do not fit the site's state are ignored
    /// (§5: "messages received by a node that are not compatible with the state of that
    /// node are ignored by it").
    pub fn handle_msg(&mut self, now: Instant, from: DeviceId, msg: MenasceMsg) {
        use MenasceMsg::*;
        match msg {
            AcceptLock { lock, seq, up } => self.on_accept(now, from, (lock, seq), up, true),
            AcceptRelease { lock, seq, up } => self.on_accept(now, from, (lock, seq), up, false),
            LockAccepted { seq } | ReleaseAccepted { seq } => self.on_accepted(now, from, seq),
            ConfirmLock { lock, seq } => self.on_confirm(from, lock, seq, true),
            ConfirmRelease { lock, seq } => self.on_confirm(from, lock, seq, false),
            AcceptNomination { old_lc, trial } => {
                self.on_accept_nomination(now, from, old_lc, trial)
            }
            NominationAcknowledged { trial } => self.on_nomination_acknowledged(now, from, trial),
            NominationAccepted(na) => self.on_na(now, *na),
            NaForwarded { na, to } => self.on_na_forwarded(now, *na, to),
            KillNa { trial } => self.on_kill_na(now, trial),
            UpdateTable { l, r } => self.on_update_table(now, from, l, r),
            ReadyToUpdate => self.on_ready_to_update(now, from),
            ResumeNormalActivity { up } => self.on_resume(from, up),
            WhoIsTheLc => self.on_who_is_the_lc(from),
            TheLcIs { lc, normal } => self.on_the_lc_is(now, lc, normal),
            HiThere => self.on_hi_there(from),
            LockTable { table, up } => self.on_lock_table(from, table, up),
            WereYouAlive => self.on_were_you_alive(from),
            YesIWas { lc } => self.on_yes_i_was(now, lc),
            LetUsMerge { up } => self.on_let_us_merge(now, from, up),
            MergeAccepted { up } => self.on_merge_accepted(now, from, up),
            MergeAttemptRejected => self.on_merge_attempt_rejected(from),
            CloseConnection => self.on_close_connection(from),
            ReadyToMerge { up, table, max_seq } => {
                self.on_ready_to_merge(now, from, up, table, max_seq)
            }
            SubstituteYourTable(syt) => self.on_syt(*syt),
            SytForwarded { visited, to } => self.on_syt_forwarded(now, visited, to),
        }
    }

    /// Fire every deadline due at `now` (extra calls are harmless).
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<Timer> = (self.timers.iter())
            .filter(|(_, at)| **at <= now)
            .map(|(t, _)| *t)
            .collect();
        for t in due {
            self.timers.remove(&t);
            match t {
                Timer::AnRetry => self.an_timeout(now),
                Timer::Cycle => self.cycle_timeout(now),
                Timer::Recovery => self.recovery_timeout(now),
                Timer::Confirm => self.confirm_timeout(now),
                Timer::Wlc => self.wlc_timeout(now),
                Timer::Wya => self.wya_round(now),
                Timer::Merge => self.merge_timeout(now),
                Timer::Syt => self.syt_timeout(now),
            }
        }
    }

    /// The next output, if any.
    pub fn poll_output(&mut self) -> Option<MenasceOut> {
        self.out.pop_front()
    }

    /// The earliest deadline, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.values().min().copied()
    }

    fn send(&mut self, to: DeviceId, msg: MenasceMsg) {
        self.out.push_back(MenasceOut::Send { to, msg });
    }

    fn set_timer(&mut self, t: Timer, at: Instant) {
        self.timers.insert(t, at);
    }

    fn see_seq(&mut self, seq: Seq) {
        self.max_seq = self.max_seq.max(seq);
    }

    /// The sites after `after` in the nomination order, wrapping round, `after` excluded.
    fn order_after(&self, after: DeviceId) -> Vec<DeviceId> {
        let i = self.order.iter().position(|s| *s == after).unwrap_or(0);
        let n = self.order.len();
        (1..n).map(|k| self.order[(i + k) % n]).collect()
    }
}
