//! The messages between sites (seed 004): normal operation, crash detection and nomination,
//! table update, single node recovery and logical component merge.

use super::*;
use crate::ids::DeviceId;
use serde::{Deserialize, Serialize};

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
    /// WYA: WERE YOU ALIVE, from an LC to a site not in its up list (§4.5).
    WereYouAlive,
    /// YIW: YES I WAS, from a site of a NORMAL component, with its LC.
    YesIWas {
        /// The answering site's LC (LC2).
        lc: DeviceId,
    },
    /// LUM: LET US MERGE, from the would-be primary, with its up list `U1`.
    LetUsMerge {
        /// `U1`.
        up: Vec<DeviceId>,
    },
    /// MA: MERGE ACCEPTED, from the secondary, with its up list `U2`.
    MergeAccepted {
        /// `U2`.
        up: Vec<DeviceId>,
    },
    /// MAR: MERGE ATTEMPT REJECTED.
    MergeAttemptRejected,
    /// CC: CLOSE CONNECTION, from a would-be primary to its intended secondary.
    CloseConnection,
    /// RTM: READY TO MERGE, from the secondary once its outstanding requests are
    /// complete: its up list and its LOCK table (the same at every site of C2).
    ReadyToMerge {
        /// `U2`.
        up: Vec<DeviceId>,
        /// LC2's LOCK table.
        table: Pending,
        /// LC2's highest sequence number.
        max_seq: Seq,
    },
    /// SYT: SUBSTITUTE YOUR TABLE.
    SubstituteYourTable(Box<Syt>),
    /// A site's acknowledgment to the SYT's generator, after forwarding it (the circular
    /// messages' source acknowledgment, §4.1).
    SytForwarded {
        /// The sites that installed the table, this one last.
        visited: Vec<DeviceId>,
        /// The site it went to.
        to: DeviceId,
    },
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
    /// Whether this message belongs to the recovery mechanisms (LCR, SNR or LCM) rather
    /// than to normal operation.
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

    /// Whether this message belongs to the logical component merge (§4.5).
    pub fn is_merge(&self) -> bool {
        matches!(
            self,
            MenasceMsg::WereYouAlive
                | MenasceMsg::YesIWas { .. }
                | MenasceMsg::LetUsMerge { .. }
                | MenasceMsg::MergeAccepted { .. }
                | MenasceMsg::MergeAttemptRejected
                | MenasceMsg::CloseConnection
                | MenasceMsg::ReadyToMerge { .. }
                | MenasceMsg::SubstituteYourTable(_)
                | MenasceMsg::SytForwarded { .. }
        )
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
            MenasceMsg::WereYouAlive => "WYA",
            MenasceMsg::YesIWas { .. } => "YIW",
            MenasceMsg::LetUsMerge { .. } => "LUM",
            MenasceMsg::MergeAccepted { .. } => "MA",
            MenasceMsg::MergeAttemptRejected => "MAR",
            MenasceMsg::CloseConnection => "CC",
            MenasceMsg::ReadyToMerge { .. } => "RTM",
            MenasceMsg::SubstituteYourTable(_) => "SYT",
            MenasceMsg::SytForwarded { .. } => "SYT-ack",
        }
    }
}
