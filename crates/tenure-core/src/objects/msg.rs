//! Block traffic of the object store: reads, deletions and repair probes between a
//! store's manager and its chunks, and between chunks.

use super::{BlockId, Bytes};
use crate::ids::{ChunkId, Epoch, StoreId};
use serde::{Deserialize, Serialize};

/// Who asked for blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Requester {
    /// The store's manager (serving a get).
    Manager,
    /// A chunk repairing itself.
    Chunk(ChunkId),
}

/// Block traffic between a store's manager and its chunks, and between chunks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum BlockMsg {
    /// Read blocks from `chunk`.
    Read {
        /// Store.
        store: StoreId,
        /// The chunk asked.
        chunk: ChunkId,
        /// Blocks wanted.
        ids: Vec<BlockId>,
        /// Echoed in the answer.
        tag: u64,
        /// Where the answer goes.
        reply_to: Requester,
    },
    /// The answer to a read: the data of each block asked for, or none.
    Data {
        /// Store.
        store: StoreId,
        /// The chunk that answered.
        from: ChunkId,
        /// Who asked.
        to: Requester,
        /// The read's tag.
        tag: u64,
        /// Each block asked for, with its data if the chunk has it.
        blocks: Vec<(BlockId, Option<Bytes>)>,
    },
    /// Delete blocks (garbage collection; idempotent).
    Delete {
        /// Store.
        store: StoreId,
        /// The chunk.
        chunk: ChunkId,
        /// Blocks to delete.
        ids: Vec<BlockId>,
        /// Echoed in the answer.
        tag: u64,
    },
    /// The deletion is durable.
    Deleted {
        /// Store.
        store: StoreId,
        /// The chunk.
        chunk: ChunkId,
        /// The deletion's tag.
        tag: u64,
    },
    /// The manager asks whether a chunk holds every live block of its epoch.
    Probe {
        /// Store.
        store: StoreId,
        /// The chunk.
        chunk: ChunkId,
        /// The manager's epoch.
        epoch: Epoch,
    },
    /// The chunk holds every live block of `epoch`'s committed manifests and every
    /// block accepted since.
    Complete {
        /// Store.
        store: StoreId,
        /// The chunk.
        chunk: ChunkId,
        /// Its epoch.
        epoch: Epoch,
    },
}

impl BlockMsg {
    /// The store the message is about.
    pub fn store(&self) -> StoreId {
        match self {
            BlockMsg::Read { store, .. }
            | BlockMsg::Data { store, .. }
            | BlockMsg::Delete { store, .. }
            | BlockMsg::Deleted { store, .. }
            | BlockMsg::Probe { store, .. }
            | BlockMsg::Complete { store, .. } => *store,
        }
    }
}
