//! Consistent global snapshots (lecture, seed 002 §14.1; DESIGN §6): Chandy-Lamport over
//! the FIFO peer channels, with the lecture's termination detection (§14.2, Done /
//! Continue).
//!
//! - Any device can initiate ([`crate::io::Input::StartSnapshot`]); a snapshot's
//!   [`SnapshotId`] names its initiator and the initiator's serial, so several may run at
//!   once and each marker names the snapshot it belongs to.
//! - A device records its persistent state on the first marker of a snapshot (or when it
//!   initiates), then sends a marker on every outgoing channel, and records the messages
//!   arriving on each other incoming channel until that channel's marker. The first
//!   marker is a start and a stop for its own channel; every later one is a stop.
//! - Peer channels are FIFO but may lose messages (a connection that breaks drops what
//!   was queued on it). A lost marker would leave a channel open forever and let a
//!   message sent after the sender's cut be recorded as in flight, so until a peer
//!   acknowledges a snapshot's marker ([`SnapMsg::MarkerAck`]) every message to it travels
//!   tagged with the snapshots the sender has recorded ([`SnapMsg::Tagged`]): a tag is a
//!   marker that arrives with the message it precedes.
//! - Termination detection (§14.2): the device a device got its first marker from is its
//!   *predecessor*; the devices its markers made record are its *successors* (a device
//!   whose first marker came from elsewhere answers [`SnapMsg::NotSuccessor`]). When a
//!   device has closed every incoming channel and heard from each peer it sent a marker
//!   to, it sends its predecessor [`SnapMsg::Done`] if all its successors sent Done and it
//!   recorded no message on any channel, else [`SnapMsg::Continue`]. The initiator, once
//!   it has heard from everyone, knows the snapshot is complete, and whether the cut has
//!   no message in flight (all Done).
//!
//! - Chandy-Lamport needs every device to cut the same channels. A device's channels
//!   are those to its peers, the members of the record it holds, and records change
//!   (a device is admitted, or restarts holding an older record). So each device notes
//!   the devices it recorded with (its *view*) and its answer carries it: a device whose
//!   successor recorded with another view fails the snapshot (simulator seed 20530: a
//!   restarted device and an admitted one each recorded without the other, and the
//!   admitted one's state reflected a message the other sent after its cut).
//!
//! The recorded part of each device leaves the core as [`crate::io::Output::SnapshotPart`]
//! (the driver writes it durably before the device's Done/Continue is sent, so a complete
//! snapshot is on disk everywhere); the initiator's result is
//! [`crate::io::Output::SnapshotComplete`]. A peer that does not answer within
//! `[snapshot] timeout` ends the snapshot as failed there.

mod machine;
pub mod part;
pub mod records;
#[cfg(test)]
mod tests;

pub use machine::Snapshots;
pub use part::SnapshotPart;
pub use records::{RecordChecker, RecordProblem, check_records};

use crate::ids::DeviceId;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A snapshot's identity: its initiator and the initiator's serial.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct SnapshotId {
    /// Who started it.
    pub initiator: DeviceId,
    /// The initiator's serial (its local clock in µs when it started, made unique: above
    /// every serial it gave before, in this life and the recorded ones).
    pub serial: u64,
}

impl std::fmt::Display for SnapshotId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.initiator.0, self.serial)
    }
}

impl std::str::FromStr for SnapshotId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("{s:?} is not a snapshot id (<initiator>-<serial>)");
        let (a, b) = s.split_once('-').ok_or_else(bad)?;
        Ok(SnapshotId {
            initiator: DeviceId(a.parse().map_err(|_| bad())?),
            serial: b.parse().map_err(|_| bad())?,
        })
    }
}

/// Snapshot messages between devices. `M` is the device's message envelope
/// ([`crate::msg::Msg`]), which a tagged message carries and which carries these in turn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum SnapMsg<M> {
    /// The marker of snapshot `id` on this channel.
    Marker {
        /// The snapshot.
        id: SnapshotId,
    },
    /// A message sent after the sender recorded its state for `ids`, to a peer that had
    /// not acknowledged their markers yet: the tags are markers that precede `msg`.
    Tagged {
        /// Snapshots the sender has recorded.
        ids: Vec<SnapshotId>,
        /// The message.
        msg: Box<M>,
    },
    /// The marker (or a tag) of `id` arrived: no more tags for it on this channel.
    MarkerAck {
        /// The snapshot.
        id: SnapshotId,
    },
    /// §14.2 Done: the sender's subtree finished and recorded nothing in flight.
    Done {
        /// The snapshot.
        id: SnapshotId,
        /// Devices of the sender's subtree (itself included) that finished.
        devices: Vec<DeviceId>,
        /// The devices the subtree recorded with (each device's peers and itself: the
        /// channels of its cut). Every device of a snapshot must have recorded with the
        /// same, or the channels between them are not all cut.
        view: Vec<DeviceId>,
    },
    /// §14.2 Continue: the sender's subtree finished, with messages in flight recorded.
    Continue {
        /// The snapshot.
        id: SnapshotId,
        /// Devices of the sender's subtree (itself included) that finished.
        devices: Vec<DeviceId>,
        /// As in `Done`.
        view: Vec<DeviceId>,
    },
    /// The marker of `id` was not the receiver's first: it is not the sender's
    /// successor.
    NotSuccessor {
        /// The snapshot.
        id: SnapshotId,
    },
    /// The snapshot failed somewhere (a peer did not answer in time): stop recording it.
    Abort {
        /// The snapshot.
        id: SnapshotId,
    },
}

/// Snapshot settings (`[snapshot]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SnapshotSettings {
    /// A snapshot a device has recorded but not finished within this long fails there
    /// (a peer is down or cut off).
    #[serde(with = "crate::duration::millis")]
    pub timeout: Duration,
    /// The coordinator starts a snapshot this often (zero: never).
    #[serde(with = "crate::duration::millis")]
    pub every: Duration,
}

impl Default for SnapshotSettings {
    fn default() -> Self {
        SnapshotSettings {
            timeout: Duration::from_secs(10),
            every: Duration::ZERO,
        }
    }
}
