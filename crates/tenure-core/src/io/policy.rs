//! Outside-policy commands: the interface the coordinator's policies and operators use
//! to change a store's layout or the cluster's membership (seed 000 §3).

use crate::ids::{ChunkId, DeviceId, StoreId};
use crate::layout::Metadata;
use serde::{Deserialize, Serialize};

/// Outside-policy commands (seed 000 §3: the interface the policies use).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PolicyCommand {
    /// `migrate(node)`: move management of `store` to `to`.
    Migrate {
        /// Store.
        store: StoreId,
        /// Destination device.
        to: DeviceId,
    },
    /// `relayout(new metadata)`.
    Relayout {
        /// Store.
        store: StoreId,
        /// New layout.
        metadata: Metadata,
    },
    /// Replace one chunk of `store` with a new chunk on `device` (allocates the chunk,
    /// then relayouts).
    ReplaceChunk {
        /// Store.
        store: StoreId,
        /// Chunk to drop from the layout.
        old: ChunkId,
        /// Device to put the new chunk on.
        device: DeviceId,
    },
    /// Admit a device to the cluster (DESIGN §6; applied by the coordinator).
    AddDevice {
        /// The device.
        device: DeviceId,
        /// Its peer address (opaque to the core).
        peer_addr: String,
        /// Its client address (opaque to the core).
        client_addr: String,
    },
    /// Drain a device and retire it (applied by the coordinator).
    RemoveDevice {
        /// The device.
        device: DeviceId,
    },
}

impl PolicyCommand {
    /// The store a store command is about (none for membership commands).
    pub fn store(&self) -> Option<StoreId> {
        match self {
            PolicyCommand::Migrate { store, .. }
            | PolicyCommand::Relayout { store, .. }
            | PolicyCommand::ReplaceChunk { store, .. } => Some(*store),
            PolicyCommand::AddDevice { .. } | PolicyCommand::RemoveDevice { .. } => None,
        }
    }
}
