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
//! The logical component merge (§4.5) is not built.
//!
//! Every lock is relevant to every site (full replication: `LOC(P)` is every site), so
//! a request goes to the whole up list. Contract, in the manner of quinn-proto: commands
//! [`Site::lock`], [`Site::release`] (an application program's LOCK REQUEST and RELEASE
//! REQUEST at the LC), [`Site::detect_lc_crash`] (an application program timed out on
//! the LC) and [`Site::recover`] (the node came up); inputs [`Site::handle_msg`] and
//! [`Site::handle_timeout`]; outputs [`Site::poll_output`] and [`Site::poll_timeout`]. A
//! driver drains `poll_output` after every call.

mod na_cycle;
mod nomination;
mod normal;
mod snr;
#[cfg(test)]
mod tests;
mod update;

use crate::ids::DeviceId;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

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

/// The protocol's messages, with the seed's names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MenasceMsg {
    /// AL: ACCEPT LOCK. The LC's up list rides on it (§3: "every update to the up list
    /// by the LC is transmitted to all LLCs ... piggyback on other messages").
    AcceptLock {
        /// The lock.
        lock: LockId,
        /// Its sequence number.
        seq: Seq,
        /// The LC's up list.
        up: Vec<DeviceId>,
    },
    /// LA: LOCK ACCEPTED.
    LockAccepted {
        /// The request's sequence number.
        seq: Seq,
    },
    /// CL: CONFIRM LOCK.
    ConfirmLock {
        /// The lock.
        lock: LockId,
        /// Its sequence number.
        seq: Seq,
    },
    /// AR: ACCEPT RELEASE, with the LC's up list.
    AcceptRelease {
        /// The lock released.
        lock: LockId,
        /// The release's sequence number.
        seq: Seq,
        /// The LC's up list.
        up: Vec<DeviceId>,
    },
    /// RA: RELEASE ACCEPTED.
    ReleaseAccepted {
        /// The request's sequence number.
        seq: Seq,
    },
    /// CR: CONFIRM RELEASE.
    ConfirmRelease {
        /// The lock released.
        lock: LockId,
        /// The release's sequence number.
        seq: Seq,
    },
    /// AN: ACCEPT NOMINATION, from nominator `j` to nominee `k`.
    AcceptNomination {
        /// The crashed LC.
        old_lc: DeviceId,
        /// `T[j, k]`: the sites `j` tried before `k`.
        trial: Vec<DeviceId>,
    },
    /// The nominee's acknowledgment of an AN (§4.1: "if this message is not acknowledged
    /// after a certain number of times it has been retransmitted ...").
    NominationAcknowledged {
        /// The trial sequence acknowledged.
        trial: Vec<DeviceId>,
    },
    /// NA: NOMINATION ACCEPTED.
    NominationAccepted(Box<Na>),
    /// A site's acknowledgment to the NA's generator, after forwarding it (§4.1, circular
    /// messages): the copy it forwarded and to whom.
    NaForwarded {
        /// The NA as forwarded.
        na: Box<Na>,
        /// The site it went to.
        to: DeviceId,
    },
    /// KILL NA: the generator's cycle was aborted (a more recently nominated LC exists).
    KillNa {
        /// The killed NA's trial sequence.
        trial: Vec<DeviceId>,
    },
    /// UT: UPDATE TABLE, with the sets L and R.
    UpdateTable {
        /// Locks to add.
        l: Pending,
        /// Locks to delete.
        r: Pending,
    },
    /// RU: READY TO UPDATE.
    ReadyToUpdate,
    /// RNA: RESUME NORMAL ACTIVITY, with the new up list.
    ResumeNormalActivity {
        /// The new up list `U`: the sites that answered RU, and the LC.
        up: Vec<DeviceId>,
    },
    /// WLC: WHO IS THE LC?
    WhoIsTheLc,
    /// The answer to WLC.
    TheLcIs {
        /// The LC the answering site knows, if any.
        lc: Option<DeviceId>,
        /// Whether the answering site's component is in NORMAL status.
        normal: bool,
    },
    /// HT: HI THERE, to the LC.
    HiThere,
    /// The LC's answer to HT: its LOCK table and up list (§4.3).
    LockTable {
        /// The LOCK table.
        table: Pending,
        /// The up list, with the new site.
        up: Vec<DeviceId>,
    },
}

impl MenasceMsg {
    /// Whether this message belongs to the recovery mechanisms (LCR or SNR) rather than
    /// to normal operation.
    pub fn is_recovery(&self) -> bool {
        !matches!(
            self,
            MenasceMsg::AcceptLock { .. }
                | MenasceMsg::LockAccepted { .. }
                | MenasceMsg::ConfirmLock { .. }
                | MenasceMsg::AcceptRelease { .. }
                | MenasceMsg::ReleaseAccepted { .. }
                | MenasceMsg::ConfirmRelease { .. }
        )
    }

    /// Whether the seed counts this as the underlying network's acknowledgment rather
    /// than a protocol message (§2: "a copy of a message is kept by its sender until an
    /// acknowledgment for it is received"): the nominee's acknowledgment of an AN.
    pub fn is_transport_ack(&self) -> bool {
        matches!(self, MenasceMsg::NominationAcknowledged { .. })
    }

    /// The seed's abbreviation.
    pub fn name(&self) -> &'static str {
        match self {
            MenasceMsg::AcceptLock { .. } => "AL",
            MenasceMsg::LockAccepted { .. } => "LA",
            MenasceMsg::ConfirmLock { .. } => "CL",
            MenasceMsg::AcceptRelease { .. } => "AR",
            MenasceMsg::ReleaseAccepted { .. } => "RA",
            MenasceMsg::ConfirmRelease { .. } => "CR",
            MenasceMsg::AcceptNomination { .. } => "AN",
            MenasceMsg::NominationAcknowledged { .. } => "AN-ack",
            MenasceMsg::NominationAccepted(_) => "NA",
            MenasceMsg::NaForwarded { .. } => "NA-ack",
            MenasceMsg::KillNa { .. } => "KILL NA",
            MenasceMsg::UpdateTable { .. } => "UT",
            MenasceMsg::ReadyToUpdate => "RU",
            MenasceMsg::ResumeNormalActivity { .. } => "RNA",
            MenasceMsg::WhoIsTheLc => "WLC",
            MenasceMsg::TheLcIs { .. } => "WLC-reply",
            MenasceMsg::HiThere => "HT",
            MenasceMsg::LockTable { .. } => "LOCK table",
        }
    }
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
            LockAccepted { seq } | ReleaseAccepted { seq } => self.on_accepted(from, seq),
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
