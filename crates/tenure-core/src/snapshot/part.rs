//! What one device records of a snapshot: its persistent state at the cut and the
//! messages it recorded in flight.

use crate::ids::DeviceId;
use crate::io::persist::DevicePersist;
use crate::msg::Msg;
use crate::snapshot::SnapshotId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One device's recorded part of a snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SnapshotPart {
    /// The snapshot.
    pub id: SnapshotId,
    /// The device.
    pub device: DeviceId,
    /// Its persistent state at the cut.
    pub state: DevicePersist,
    /// Messages recorded in flight on each incoming channel, by sender, in order: a
    /// restored device receives them before anything else.
    pub channels: BTreeMap<DeviceId, Vec<Msg>>,
}
