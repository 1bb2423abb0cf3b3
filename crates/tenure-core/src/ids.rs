//! Identifiers shared by every protocol (DESIGN §1).

use serde::{Deserialize, Serialize};
use std::fmt;

/// One Tenure server process (a node).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct DeviceId(pub u64);

/// A store: one shard of the keyspace, replicated as chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct StoreId(pub u32);

/// One replica of a store on one device. Unique and never reused: `serial` comes from a
/// per-device counter that is persisted before the id is made available (seed 000 §4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ChunkId {
    /// The device the chunk lives on (messages for the chunk go there).
    pub device: DeviceId,
    /// Per-device serial, never reused.
    pub serial: u64,
}

/// A store's layout version; strictly increases at every epoch transition.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Epoch(pub u64);

impl Epoch {
    /// The epoch after this one.
    pub fn next(self) -> Epoch {
        Epoch(self.0 + 1)
    }
}

/// Version of one write: the epoch it was ordered in, then the manager's sequence number.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Version {
    /// Epoch of the manager that ordered the write.
    pub epoch: Epoch,
    /// Sequence number within the epoch.
    pub seq: u64,
}

/// A session id: unique per store forever (it is the sequence number of its open).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SessionId(pub u64);

impl SessionId {
    /// The id of the session opened by the change sequenced `v`.
    pub fn from_version(v: Version) -> SessionId {
        SessionId((v.epoch.0 << 32) | (v.seq & 0xFFFF_FFFF))
    }
}

/// A client connection as seen by a device (the server maps connections to ids).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ClientId(pub u64);

impl ClientId {
    /// The ids a device gives the requests other devices forward to it
    /// ([`crate::msg::Msg::Forward`]): the top bit set, which no server or simulator
    /// client id has.
    pub const FORWARDED: u64 = 1 << 63;

    /// Whether this id stands for a request another device forwarded.
    pub fn is_forwarded(self) -> bool {
        self.0 & Self::FORWARDED != 0
    }

    /// The ids a device gives the requests it makes itself for a client's session that
    /// spans stores (`crate::device`'s sessions): the second bit from the top set, which
    /// no server or simulator client id has.
    pub const GROUPED: u64 = 1 << 62;

    /// Whether this id stands for such a request.
    pub fn is_grouped(self) -> bool {
        !self.is_forwarded() && self.0 & Self::GROUPED != 0
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "d{}", self.0)
    }
}
impl fmt::Display for StoreId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s{}", self.0)
    }
}
impl fmt::Display for ChunkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "c{}.{}", self.device.0, self.serial)
    }
}
impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "e{}", self.0)
    }
}
