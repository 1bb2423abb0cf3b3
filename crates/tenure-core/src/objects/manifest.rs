//! One upload's manifest and the seed's merge table (seed 001, "Merge Algorithm").
//!
//! A key's manifests are a dict keyed by upload UUID; two copies of the dict are merged
//! key by key with [`merge`], a pure function that is commutative, associative and
//! idempotent over the manifests one upload goes through (checked by property tests).
//! The states move one way, W → A → P → D (writing, active, pending_delete, deleted), so
//! a later state always wins over an earlier one; equal states merge their contents.

use super::{BlockId, BlockInfo, Uuid};
use crate::ids::SessionId;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A manifest's state (seed 001 legend: W, A, P, D). Ordered as they happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ManifestState {
    /// W: blocks are being written.
    Writing,
    /// A: the object's current (or a superseded, not yet collected) content.
    Active,
    /// P: superseded or deleted; its blocks are being collected.
    PendingDelete,
    /// D: every block collected; a tombstone until pruned.
    Deleted,
}

impl ManifestState {
    /// The seed's one-letter name.
    pub fn letter(self) -> char {
        match self {
            ManifestState::Writing => 'W',
            ManifestState::Active => 'A',
            ManifestState::PendingDelete => 'P',
            ManifestState::Deleted => 'D',
        }
    }
}

/// Who collects a pending_delete manifest's blocks (seed 001 workflow step 4): a
/// manager, in one epoch, with its last check-in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DeletionLease {
    /// Last check-in (the holder's clock, carried by the change that recorded it).
    pub checked_in: Instant,
    /// The collecting manager's device.
    pub holder: crate::ids::DeviceId,
    /// Its epoch.
    pub epoch: crate::ids::Epoch,
}

/// One uploaded part of a multipart upload.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Part {
    /// Upload attempt of this part number (a retried part gets a new generation; its
    /// earlier blocks become garbage).
    pub generation: u32,
    /// Its blocks in order.
    pub blocks: Vec<(BlockId, BlockInfo)>,
    /// Its length in bytes.
    pub size: u64,
    /// CRC-32 of its bytes.
    pub checksum: u32,
}

/// A manifest's `props` (seed 001, "Multipart uploads").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Props {
    /// A multipart upload: its parts by number (while writing; at completion the
    /// chosen parts' blocks move into the manifest's blocks).
    pub multipart: Option<BTreeMap<u32, Part>>,
    /// Every block of the parts left out at completion has been collected.
    pub multipart_clean: bool,
    /// Blocks of superseded part uploads (a part uploaded again), to collect.
    pub garbage: BTreeSet<BlockId>,
}

/// The record of one upload of one object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The upload's UUID (the dict key).
    pub uuid: Uuid,
    /// State.
    pub state: ManifestState,
    /// Content length in bytes.
    pub size: u64,
    /// CRC-32 of the content.
    pub checksum: u32,
    /// The content's blocks, in order, with their checksums.
    pub blocks: Vec<(BlockId, BlockInfo)>,
    /// Blocks not yet written to every chunk (W).
    pub remaining_write: BTreeSet<BlockId>,
    /// Blocks not yet deleted (P; and, on A, the garbage of a multipart upload).
    pub remaining_delete: BTreeSet<BlockId>,
    /// Last time blocks were written.
    pub last_written: Instant,
    /// P: last delete progress; D: when the deletion completed.
    pub deleted_at: Option<Instant>,
    /// The deletion lease (P).
    pub lease: Option<DeletionLease>,
    /// Multipart properties.
    pub props: Props,
    /// The store revision at which the manifest became active (0 before).
    pub revision: u64,
    /// The session whose end deletes the object (ephemeral objects).
    pub owner: Option<SessionId>,
    /// The request that created the upload (idempotent retries).
    pub request: Option<(SessionId, u64)>,
    /// The request that deleted the object, if a delete did, and the deletion's
    /// revision (idempotent retries).
    pub delete_request: Option<(SessionId, u64, u64)>,
    /// A small object's content, carried by its manifest instead of blocks (written by
    /// one change, [`super::ObjectOp::Put`]); none for block content.
    #[serde(with = "crate::generation::inline_value")]
    pub value: Option<super::Bytes>,
}

impl Manifest {
    /// A new manifest in `writing` with every block remaining.
    pub fn writing(uuid: Uuid, blocks: Vec<(BlockId, BlockInfo)>, at: Instant) -> Manifest {
        let size = blocks.iter().map(|(_, b)| b.len as u64).sum();
        Manifest {
            uuid,
            state: ManifestState::Writing,
            size,
            checksum: super::combine(blocks.iter().map(|(_, b)| *b)),
            remaining_write: blocks.iter().map(|(id, _)| *id).collect(),
            blocks,
            remaining_delete: BTreeSet::new(),
            last_written: at,
            deleted_at: None,
            lease: None,
            props: Props::default(),
            revision: 0,
            owner: None,
            request: None,
            delete_request: None,
            value: None,
        }
    }

    /// A small object's manifest, active at `revision` from its creation: the content is
    /// `value` itself, with no blocks to write or collect.
    pub fn inline(uuid: Uuid, value: super::Bytes, revision: u64, at: Instant) -> Manifest {
        Manifest {
            state: ManifestState::Active,
            size: value.len() as u64,
            checksum: crc32fast::hash(&value),
            revision,
            value: Some(value),
            remaining_write: BTreeSet::new(),
            ..Manifest::writing(uuid, Vec::new(), at)
        }
    }

    /// Whether the manifest names no block at all (inline or empty content): retiring it
    /// leaves nothing to collect.
    pub fn nothing_to_collect(&self) -> bool {
        self.blocks.is_empty()
            && self.remaining_delete.is_empty()
            && self.props.multipart.is_none()
            && self.props.garbage.is_empty()
    }

    /// Every block this manifest names: its content and its multipart parts.
    pub fn all_blocks(&self) -> BTreeSet<BlockId> {
        let mut ids: BTreeSet<BlockId> = self.blocks.iter().map(|(id, _)| *id).collect();
        if let Some(parts) = &self.props.multipart {
            ids.extend(
                parts
                    .values()
                    .flat_map(|p| p.blocks.iter().map(|(id, _)| *id)),
            );
        }
        ids.extend(self.remaining_delete.iter().copied());
        ids.extend(self.props.garbage.iter().copied());
        ids
    }

    /// The blocks whose data must be kept: an active manifest's content, and the
    /// written blocks of a writing one. Blocks of P and D manifests are garbage.
    pub fn live_blocks(&self) -> BTreeSet<BlockId> {
        match self.state {
            ManifestState::Active => self.blocks.iter().map(|(id, _)| *id).collect(),
            ManifestState::Writing => self
                .all_blocks()
                .into_iter()
                .filter(|b| !self.remaining_write.contains(b))
                .collect(),
            ManifestState::PendingDelete | ManifestState::Deleted => BTreeSet::new(),
        }
    }
}

fn latest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    a.max(b)
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Merge two copies of the same upload's manifest (same UUID): seed 001's table.
///
/// | pair | result |
/// | --- | --- |
/// | {W, W} | W: intersection of the blocks remaining to write, latest written time |
/// | {W, A}, {W, P}, {W, D} | the later state |
/// | {A, A} | A: equal (asserted); `multipart_clean` is newer |
/// | {A, P}, {A, D} | the later state |
/// | {P, P} | P: intersection of the blocks remaining to delete, latest delete time |
/// | {P, D} | D |
/// | {D, D} | D: earliest delete completion time |
///
/// Tenure adds, where the seed's table is silent: {P, P} keeps the deletion lease with
/// the latest check-in (so a collector that checked in is not taken over), and within
/// one state the multipart parts are united (a part uploaded at one chunk is kept).
pub fn merge(a: &Manifest, b: &Manifest) -> Manifest {
    use ManifestState::*;
    debug_assert_eq!(a.uuid, b.uuid, "merge is per upload");
    match (a.state, b.state) {
        (Writing, Writing) => {
            let mut m = a.clone();
            m.remaining_write = a
                .remaining_write
                .intersection(&b.remaining_write)
                .copied()
                .collect();
            m.last_written = a.last_written.max(b.last_written);
            m.props.multipart = merge_parts(&a.props.multipart, &b.props.multipart);
            m.props.garbage = a.props.garbage.union(&b.props.garbage).copied().collect();
            m
        }
        (Active, Active) => {
            assert_eq!(
                (&a.blocks, a.size, a.checksum, a.revision),
                (&b.blocks, b.size, b.checksum, b.revision),
                "only one actor takes a manifest from W to A"
            );
            // A manifest carrying multipart_clean is the newer one; otherwise the
            // collection of unused parts has progressed as far as both copies say.
            match (a.props.multipart_clean, b.props.multipart_clean) {
                (true, false) => a.clone(),
                (false, true) => b.clone(),
                _ => {
                    let mut m = a.clone();
                    m.remaining_delete = a
                        .remaining_delete
                        .intersection(&b.remaining_delete)
                        .copied()
                        .collect();
                    m.lease = a.lease.max(b.lease);
                    m.deleted_at = latest(a.deleted_at, b.deleted_at);
                    m
                }
            }
        }
        (PendingDelete, PendingDelete) => {
            let mut m = a.clone();
            m.remaining_delete = a
                .remaining_delete
                .intersection(&b.remaining_delete)
                .copied()
                .collect();
            m.deleted_at = latest(a.deleted_at, b.deleted_at);
            m.lease = a.lease.max(b.lease);
            m.delete_request = a.delete_request.or(b.delete_request);
            m
        }
        (Deleted, Deleted) => {
            let mut m = a.clone();
            m.deleted_at = earliest(a.deleted_at, b.deleted_at);
            m.delete_request = a.delete_request.or(b.delete_request);
            m
        }
        // Every other pair: the later state happened causally after the earlier one.
        (x, y) if x > y => a.clone(),
        _ => b.clone(),
    }
}

fn merge_parts(
    a: &Option<BTreeMap<u32, Part>>,
    b: &Option<BTreeMap<u32, Part>>,
) -> Option<BTreeMap<u32, Part>> {
    match (a, b) {
        (Some(x), Some(y)) => {
            let mut m = x.clone();
            for (n, p) in y {
                // The later generation of a part number wins.
                match m.get(n) {
                    Some(q) if q.generation >= p.generation => {}
                    _ => {
                        m.insert(*n, p.clone());
                    }
                }
            }
            Some(m)
        }
        (x, None) => x.clone(),
        (None, y) => y.clone(),
    }
}

/// A key's manifests by upload (seed 001's dict): almost always one or two.
pub type Dict = crate::vecmap::VecMap<Uuid, Manifest>;

/// Resolve two copies of a key's dict (seed 001 workflow step 2): `dict:merge/3` with
/// [`merge`] for UUIDs present in both.
pub fn merge_dict(a: &mut Dict, b: &Dict) {
    for (uuid, m) in b {
        match a.get_mut(uuid) {
            Some(x) => *x = merge(x, m),
            None => {
                a.insert(*uuid, m.clone());
            }
        }
    }
}
