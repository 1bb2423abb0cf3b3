//! Objects: a versioned object store kept with Riak CS manifests (seed 001; DESIGN §5).
//!
//! An object lives in the store of its key's first path segment, beside that store's
//! locks, so a write can be made conditional on a lock in the same SafeTalk change
//! (put-if-token). Per key the store keeps a dict of manifests keyed by upload UUID
//! ([`manifest`]); every change to a key follows the seed's workflow — read, resolve
//! (dict merge), prune, spawn, add the new information (merged in with the seed's merge
//! function), write back — in [`table::ObjectTable::execute`], which every replica runs
//! on the same changes in the same order.
//!
//! Block data never travels in a vote: a SafeTalk change carrying blocks
//! ([`ObjectOp::Blocks`]) hands them to the chunk's block store ([`blocks`]) when it is
//! accepted and is kept pending without them. A chunk that lacks a block of a live
//! manifest (it missed writes, or a relayout just created it) copies it from a peer chunk
//! and tells the manager when it is complete; reads are served from complete chunks
//! only. The manager's side — uploads, reads, garbage collection under deletion leases,
//! watches — is in [`mgr`].

pub mod blocks;
pub mod manifest;
pub mod mgr;
pub mod msg;
pub mod table;

#[cfg(test)]
mod scenarios;
#[cfg(test)]
mod small_scenarios;
#[cfg(test)]
mod tests;

pub use manifest::{DeletionLease, Manifest, ManifestState, Part, Props, merge, merge_dict};
pub use table::{Change, ChangeKind, ObjectMeta, ObjectTable, ObjectTally};

use crate::ids::SessionId;
use crate::lockctl::FencingToken;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// Object block data (shared, cheap to clone).
pub type Bytes = bytes::Bytes;

/// An upload's UUID (random, drawn from the manager's seeded generator).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Uuid(pub u128);

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = format!("{:032x}", self.0);
        write!(
            f,
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }
}

impl std::str::FromStr for Uuid {
    type Err = std::num::ParseIntError;
    fn from_str(s: &str) -> Result<Uuid, Self::Err> {
        u128::from_str_radix(&s.replace('-', ""), 16).map(Uuid)
    }
}

/// One block of one upload: 1 MiB of content (the last one shorter).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct BlockId {
    /// The upload.
    pub upload: Uuid,
    /// Part number (0 for a single upload).
    pub part: u32,
    /// Attempt of that part (a retried part writes new blocks).
    pub generation: u32,
    /// Index within the part.
    pub index: u32,
}

/// What a manifest records about a block.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct BlockInfo {
    /// Length in bytes.
    pub len: u32,
    /// CRC-32 of the bytes.
    pub checksum: u32,
}

impl BlockInfo {
    /// The info of `data`.
    pub fn of(data: &[u8]) -> BlockInfo {
        BlockInfo {
            len: data.len() as u32,
            checksum: crc32fast::hash(data),
        }
    }
}

/// The CRC-32 of a content made of blocks with these infos, in order.
pub fn combine(blocks: impl IntoIterator<Item = BlockInfo>) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for b in blocks {
        h.combine(&crc32fast::Hasher::new_with_initial_len(
            b.checksum,
            b.len as u64,
        ));
    }
    h.finalize()
}

/// A block with its data, as a SafeTalk change carries it to the chunks. Kept pending
/// (and voted) without its data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockWrite {
    /// Identity.
    pub id: BlockId,
    /// Length and checksum.
    pub info: BlockInfo,
    /// The bytes (none once handed to the block store).
    pub data: Option<Bytes>,
}

/// Put-if-token: the write applies only if `lock` is held with exactly `token`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    /// The lock (in the same store as the object).
    pub lock: String,
    /// The fencing token the writer was granted.
    pub token: FencingToken,
}

/// Conditions of a write, checked atomically with it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conditions {
    /// Create only: the key must have no active object.
    pub if_absent: bool,
    /// Compare-and-set: the active object's revision must be this one.
    pub if_revision: Option<u64>,
    /// Server-side fencing.
    pub fence: Option<Fence>,
}

/// A multipart upload's part being written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartUpload {
    /// Part number (1 and up).
    pub number: u32,
    /// Attempt of this part number.
    pub generation: u32,
    /// Its length.
    pub size: u64,
    /// CRC-32 of its bytes.
    pub checksum: u32,
    /// Its blocks, in order.
    pub blocks: Vec<(BlockId, BlockInfo)>,
}

/// One replicated change to a store's objects.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ObjectOp {
    /// Start an upload: a manifest in `writing` with every block remaining (none, and
    /// `props.multipart`, for a multipart upload).
    Begin {
        /// Key.
        key: String,
        /// The upload.
        uuid: Uuid,
        /// The content's blocks (empty for multipart).
        blocks: Vec<(BlockId, BlockInfo)>,
        /// A multipart upload.
        multipart: bool,
        /// Ephemeral: deleted when this session ends.
        owner: Option<SessionId>,
        /// The creating request (idempotent retries).
        request: Option<(SessionId, u64)>,
        /// Conditions (checked here and again at activation).
        cond: Conditions,
    },
    /// Blocks written durably to every live chunk (the data rides on the change).
    Blocks {
        /// Key.
        key: String,
        /// The upload.
        uuid: Uuid,
        /// For a multipart upload: the part these blocks make up.
        part: Option<PartUpload>,
        /// The blocks.
        blocks: Vec<BlockWrite>,
    },
    /// Complete an upload: `writing` → `active`; older active manifests of the key
    /// become `pending_delete`. A multipart upload names the parts it keeps, in order.
    Activate {
        /// Key.
        key: String,
        /// The upload.
        uuid: Uuid,
        /// Multipart: the parts, in order.
        parts: Option<Vec<u32>>,
        /// Conditions, checked atomically with the activation.
        cond: Conditions,
    },
    /// Delete the key's active object (it becomes `pending_delete`).
    Delete {
        /// Key.
        key: String,
        /// The deleting request (idempotent retries).
        request: Option<(SessionId, u64)>,
        /// Conditions.
        cond: Conditions,
    },
    /// Give up an upload (a multipart abort, or an upload not finished in time):
    /// `writing` → `pending_delete`.
    Abandon {
        /// Key.
        key: String,
        /// The upload.
        uuid: Uuid,
    },
    /// Take (or take over) the deletion lease of a manifest with blocks to delete.
    GcLease {
        /// Key.
        key: String,
        /// The upload.
        uuid: Uuid,
        /// The new lease.
        lease: DeletionLease,
    },
    /// Blocks deleted at every live chunk; the lease's check-in.
    GcProgress {
        /// Key.
        key: String,
        /// The upload.
        uuid: Uuid,
        /// Blocks deleted.
        deleted: Vec<BlockId>,
        /// The lease, checked in.
        lease: DeletionLease,
    },
    /// Every block collected: `pending_delete` → `deleted` (an active multipart
    /// manifest gains `multipart_clean`).
    GcDone {
        /// Key.
        key: String,
        /// The upload.
        uuid: Uuid,
    },
    /// Prune the key's tombstones (deleted before the change's `prune_before`).
    Prune {
        /// Key.
        key: String,
    },
    /// A small object in one change: Begin, Blocks and Activate at once, its value
    /// carried inline by the manifest (and by the change, which chunks keep and vote
    /// with the value, as it is part of the table). An older content with no blocks is
    /// retired in the same change.
    #[serde(serialize_with = "crate::generation::only_inline")]
    Put(SmallPut),
}

/// The content of [`ObjectOp::Put`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmallPut {
    /// Key.
    pub key: String,
    /// The upload.
    pub uuid: Uuid,
    /// The whole content (at most `[objects] inline_max` bytes).
    pub value: Bytes,
    /// Ephemeral: deleted when this session ends.
    pub owner: Option<SessionId>,
    /// The creating request (idempotent retries).
    pub request: Option<(SessionId, u64)>,
    /// Conditions, checked atomically with the write.
    pub cond: Conditions,
}

impl ObjectOp {
    /// The key a change is about.
    pub fn key(&self) -> &str {
        match self {
            ObjectOp::Begin { key, .. }
            | ObjectOp::Blocks { key, .. }
            | ObjectOp::Activate { key, .. }
            | ObjectOp::Delete { key, .. }
            | ObjectOp::Abandon { key, .. }
            | ObjectOp::GcLease { key, .. }
            | ObjectOp::GcProgress { key, .. }
            | ObjectOp::GcDone { key, .. }
            | ObjectOp::Prune { key } => key,
            ObjectOp::Put(p) => &p.key,
        }
    }

    /// The change without block data (what a chunk keeps pending and votes).
    pub fn stripped(&self) -> ObjectOp {
        match self {
            ObjectOp::Blocks {
                key,
                uuid,
                part,
                blocks,
            } => ObjectOp::Blocks {
                key: key.clone(),
                uuid: *uuid,
                part: part.clone(),
                blocks: blocks
                    .iter()
                    .map(|b| BlockWrite {
                        id: b.id,
                        info: b.info,
                        data: None,
                    })
                    .collect(),
            },
            op => op.clone(),
        }
    }

    /// Bytes of object data the change carries (block data, or an inline value).
    pub fn data_len(&self) -> usize {
        match self {
            ObjectOp::Blocks { blocks, .. } => blocks
                .iter()
                .map(|b| b.data.as_ref().map_or(0, |d| d.len()))
                .sum(),
            ObjectOp::Put(p) => p.value.len(),
            _ => 0,
        }
    }
}

/// What a change to the objects did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjectOutcome {
    /// An upload began.
    Begun,
    /// Blocks were recorded written.
    BlocksWritten,
    /// An object became active at this revision.
    Written {
        /// Revision.
        revision: u64,
        /// The upload.
        uuid: Uuid,
    },
    /// The object was deleted at this revision.
    Deleted {
        /// Revision.
        revision: u64,
    },
    /// Collection or pruning progressed (or there was nothing to do).
    Collected,
}

/// Typed object errors (each one changes nothing).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ObjectError {
    /// Create-only, and the key has an active object.
    #[error("object exists (revision {revision})")]
    Exists {
        /// Its revision.
        revision: u64,
    },
    /// Compare-and-set failed.
    #[error("revision mismatch: {}", match current {
        Some(r) => format!("the object is at revision {r}"),
        None => "the key has no object".to_string(),
    })]
    RevisionMismatch {
        /// The active object's revision (none: absent).
        current: Option<u64>,
    },
    /// No active object under the key.
    #[error("no such object")]
    NoSuchObject,
    /// No writing multipart upload with this id under the key.
    #[error("no such upload {0}")]
    NoSuchUpload(Uuid),
    /// An upload was completed before all its blocks were written.
    #[error("upload incomplete: {missing} blocks missing")]
    Incomplete {
        /// Blocks not written.
        missing: usize,
    },
    /// A completion named a part that was not uploaded.
    #[error("no such part {0}")]
    NoSuchPart(u32),
    /// A watch asked to resume from a revision older than the kept history: re-read the
    /// current state, then watch from its revision.
    #[error("revision {asked} is compacted (history starts after {compacted}): re-read")]
    Compacted {
        /// The revision asked for.
        asked: u64,
        /// History is kept for revisions after this one.
        compacted: u64,
    },
    /// No complete chunk could serve the read in time.
    #[error("object data unavailable")]
    DataUnavailable,
}

/// Object service settings (`[objects]`): limits and the seed's intervals.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ObjectSettings {
    /// Block size (DESIGN §5: 1 MiB).
    pub block_size: u32,
    /// Largest object.
    pub max_object_size: u64,
    /// Largest value of a single-request put (one block by default).
    pub max_value_size: u64,
    /// Longest key, in bytes.
    pub max_key_len: usize,
    /// Tombstones (`deleted`) are pruned this long after deletion.
    #[serde(with = "crate::duration::millis")]
    pub prune_after: Duration,
    /// A deletion lease not checked in for this long is taken over (the seed's N).
    #[serde(with = "crate::duration::millis")]
    pub lease_timeout: Duration,
    /// A collector checks in this often.
    #[serde(with = "crate::duration::millis")]
    pub checkin_interval: Duration,
    /// An upload still writing this long after its last block is abandoned.
    #[serde(with = "crate::duration::millis")]
    pub writing_timeout: Duration,
    /// How many changes the watch history keeps per store.
    pub history: u32,
    /// Largest amount of block data in one SafeTalk batch.
    pub max_batch_bytes: usize,
    /// Largest value written as one change with the value inline in its manifest
    /// ([`ObjectOp::Put`]); larger ones are written as blocks. 0 turns inline values off.
    pub inline_max: u32,
}

impl Default for ObjectSettings {
    fn default() -> Self {
        ObjectSettings {
            block_size: 1 << 20,
            max_object_size: 64 << 20,
            max_value_size: 1 << 20,
            max_key_len: 1024,
            prune_after: Duration::from_secs(30),
            lease_timeout: Duration::from_secs(10),
            checkin_interval: Duration::from_secs(2),
            writing_timeout: Duration::from_secs(300),
            history: 10_000,
            max_batch_bytes: 8 << 20,
            inline_max: 64 << 10,
        }
    }
}

/// Split content into blocks of `block_size`.
pub fn split(
    upload: Uuid,
    part: u32,
    generation: u32,
    data: &Bytes,
    block_size: u32,
) -> Vec<BlockWrite> {
    let bs = block_size.max(1) as usize;
    (0..data.len().div_ceil(bs))
        .map(|i| {
            let d = data.slice(i * bs..((i + 1) * bs).min(data.len()));
            BlockWrite {
                id: BlockId {
                    upload,
                    part,
                    generation,
                    index: i as u32,
                },
                info: BlockInfo::of(&d),
                data: Some(d),
            }
        })
        .collect()
}

/// Whether `key` is `prefix` or below it (path semantics; `/` is everything).
pub fn under(key: &str, prefix: &str) -> bool {
    let p = prefix.trim_end_matches('/');
    p.is_empty() || key == p || (key.starts_with(p) && key.as_bytes().get(p.len()) == Some(&b'/'))
}
