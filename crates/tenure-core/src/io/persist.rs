//! A device's persistent state and the operations that change it: what a driver makes
//! durable before anything that depends on it leaves the device.

use crate::data::StoreData;
use crate::ids::{ChunkId, DeviceId, Epoch, StoreId, Version};
use crate::layout::{Metadata, Prepared};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Persistent state of one chunk (the bold-face variables of seed 000 §4.1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChunkPersist {
    /// Identity.
    pub id: ChunkId,
    /// The store it replicates.
    pub store: StoreId,
    /// Current epoch.
    pub epoch: Epoch,
    /// Metadata of that epoch.
    pub metadata: Metadata,
    /// The manager that granted the last lease (seeds the regeneration queue on restart).
    pub lease_mgr: Option<DeviceId>,
    /// The uncommitted epoch transition this chunk voted for (SafeTalk prepare log).
    pub prepared: Option<Prepared>,
    /// The highest earlier transition it voted for and never saw committed: a vote for a
    /// newer one, later aborted, must not make the chunk forget that this one may have
    /// committed elsewhere.
    #[serde(default)]
    pub known: Option<Prepared>,
    /// The store's contents.
    pub data: StoreData,
}

impl ChunkPersist {
    /// The record without its tables' rows ([`crate::rows::head`]): what storage that
    /// keeps the rows apart writes as the chunk's record.
    pub fn head(&self) -> ChunkPersist {
        ChunkPersist {
            data: crate::data::StoreData {
                table: crate::rows::head(&self.data.table),
                confirmed: self.data.confirmed,
                l_list: self.data.l_list.clone(),
                r_list: self.data.r_list.clone(),
                stamp: self.data.stamp,
            },
            prepared: self.prepared.clone(),
            known: self.known.clone(),
            metadata: self.metadata.clone(),
            ..*self
        }
    }
}

/// How often (in deltas) a chunk hands its tables to its durable copy ([`TablesAfter`]).
pub const SHARE_TABLES_EVERY: u32 = 64;

/// ... or after this many changes in deltas since it last did, whichever comes first.
pub const SHARE_TABLES_OPS: u32 = 1024;

/// A chunk's tables after an [`PersistOp::Accept`], with its confirmed number, handed to
/// whatever applies the delta to a copy of the chunk's record (the server's storage
/// thread, the simulator's disks): the copy takes these tables (an O(1) clone of
/// persistent maps, sharing every node with the chunk's) instead of applying the changes
/// again to tables of its own — a device held each chunk's tables twice before
/// ([`crate::safetalk::Replica::accept_batch_adopting`]). Not part of the change: never
/// encoded (a delta read back from the log has none and is applied), and ignored by
/// equality.
#[derive(Clone, Debug, Default)]
pub struct TablesAfter(pub Option<std::sync::Arc<(Version, crate::data::Tables)>>);

impl PartialEq for TablesAfter {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// A durable change.
///
/// The SafeTalk ACCEPTs of a serving chunk are persisted as deltas (`Accept`) rather than
/// whole records, so the bytes written per batch do not grow with the store's tables;
/// every [`crate::config::CHECKPOINT_EVERY`] deltas the chunk writes its whole record again
/// (`PutChunk`), which supersedes the deltas before it. Applying a delta runs the same
/// deterministic code the chunk ran (`StoreData::accept_batch`), so a record rebuilt
/// from a checkpoint and its deltas equals the chunk's own, but for CONFIRMs received
/// since (which a chunk does not persist on their own).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PersistOp {
    /// Write (create or replace) a chunk's persistent state.
    PutChunk(Box<ChunkPersist>),
    /// SafeTalk ACCEPT at a chunk: keep `ops` pending, then confirm up to `confirm`.
    Accept {
        /// The chunk.
        chunk: ChunkId,
        /// The accepted changes, in sequence order.
        ops: Vec<(Version, crate::data::StoreOp)>,
        /// The piggybacked CONFIRM.
        confirm: Version,
        /// The chunk's own tables after the batch, for a durable copy to share
        /// ([`TablesAfter`]; never written).
        #[serde(skip)]
        after: TablesAfter,
    },
    /// Delete a chunk (garbage collect).
    RemoveChunk(ChunkId),
    /// Advance the device's chunk serial counter (before the serial is used).
    SetNextSerial(u64),
    /// Tenure: replace a chunk's record but its tables' rows, which stay those of its
    /// durable record once it confirmed as far as the head says: what a chunk writes when
    /// its tables did not change since it last persisted them but by CONFIRMs (an epoch
    /// transition, a vote, a lease manager). The record carries
    /// its tables' head only ([`ChunkPersist::head`]), so the write does not grow with
    /// the store: whole records of stores of 40,000 rows each, written at every epoch
    /// transition of a failover, kept a survivor's storage thread busy for 10 s.
    /// Appended last, so the encoding of the other changes is unchanged.
    PutChunkHead(Box<ChunkPersist>),
    /// Write (create or replace) a persistent lookup entry or tombstone.
    LookupPut(Box<crate::lookup::Entry>),
    /// Delete a persistent lookup entry.
    LookupRemove(String),
    /// Store an object block at a chunk.
    BlockPut {
        /// The chunk.
        chunk: ChunkId,
        /// The block.
        id: crate::objects::BlockId,
        /// Its data.
        data: crate::objects::Bytes,
    },
    /// Delete object blocks at a chunk.
    BlockDelete {
        /// The chunk.
        chunk: ChunkId,
        /// The blocks.
        ids: Vec<crate::objects::BlockId>,
    },
    /// The newest coordinator term this device has seen (DESIGN §6): commands of older
    /// terms are refused, also after a restart.
    SetTerm(crate::election::Term),
    /// The newest membership record seen (DESIGN §6).
    SetMembers(Box<crate::election::members::Members>),
    /// The snapshots this device has recorded, newest last (the most recent ones): a
    /// device restarted in the middle of one never records it a second time.
    SetSnapshots(Vec<crate::snapshot::SnapshotId>),
}

/// All persistent state of a device: what survives a crash.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DevicePersist {
    /// Next chunk serial to hand out.
    pub next_serial: u64,
    /// The device's chunks.
    pub chunks: BTreeMap<ChunkId, ChunkPersist>,
    /// Persistent lookup entries and tombstones, by key.
    #[serde(default)]
    pub lookup: BTreeMap<String, crate::lookup::Entry>,
    /// Object blocks, by chunk.
    #[serde(default)]
    pub blocks: BTreeMap<ChunkId, BTreeMap<crate::objects::BlockId, crate::objects::Bytes>>,
    /// The newest coordinator term seen ([`PersistOp::SetTerm`]).
    #[serde(default)]
    pub term: crate::election::Term,
    /// The newest membership record seen ([`PersistOp::SetMembers`]; none: the
    /// configured devices).
    #[serde(default)]
    pub members: Option<crate::election::members::Members>,
    /// The snapshots recorded here, newest last ([`PersistOp::SetSnapshots`]).
    #[serde(default)]
    pub snapshots: Vec<crate::snapshot::SnapshotId>,
}

impl PersistOp {
    /// The chunk a change is about (none for the device's serial counter).
    pub fn chunk(&self) -> Option<ChunkId> {
        match self {
            PersistOp::PutChunk(c) | PersistOp::PutChunkHead(c) => Some(c.id),
            PersistOp::Accept { chunk, .. }
            | PersistOp::RemoveChunk(chunk)
            | PersistOp::BlockPut { chunk, .. }
            | PersistOp::BlockDelete { chunk, .. } => Some(*chunk),
            PersistOp::SetNextSerial(_)
            | PersistOp::LookupPut(_)
            | PersistOp::LookupRemove(_)
            | PersistOp::SetTerm(_)
            | PersistOp::SetMembers(_)
            | PersistOp::SetSnapshots(_) => None,
        }
    }

    /// Apply a delta (`Accept`, or a record's head: `PutChunkHead`) to a chunk record;
    /// other changes are not deltas and leave it alone.
    pub fn apply_delta(&self, rec: &mut ChunkPersist) {
        if let PersistOp::PutChunkHead(head) = self {
            // The chunk may have confirmed further (a CONFIRM applies pending changes
            // without a persist): the rows come out the same by confirming as far.
            rec.data.confirm(head.data.confirmed);
            let table = std::mem::take(&mut rec.data.table);
            *rec = (**head).clone();
            rec.data.table = table;
            return;
        }
        if let PersistOp::Accept {
            ops,
            confirm,
            after,
            ..
        } = self
        {
            match &after.0 {
                Some(a) => rec.data.accept_batch_adopting(ops, *confirm, a),
                None => rec.data.accept_batch(ops, *confirm),
            }
        }
    }
}

impl DevicePersist {
    /// [`Self::apply`], taking the change: a whole record is moved in, not copied.
    pub fn apply_owned(&mut self, op: PersistOp) {
        match op {
            PersistOp::PutChunk(c) => {
                self.chunks.insert(c.id, *c);
            }
            op => self.apply(&op),
        }
    }

    /// Apply a durable change.
    pub fn apply(&mut self, op: &PersistOp) {
        match op {
            PersistOp::PutChunk(c) => {
                self.chunks.insert(c.id, (**c).clone());
            }
            PersistOp::PutChunkHead(head) => {
                if let Some(rec) = self.chunks.get_mut(&head.id) {
                    op.apply_delta(rec);
                }
            }
            PersistOp::Accept { chunk, .. } => {
                // A delta for a chunk without a record cannot happen: a chunk persists
                // its record when it is created, before it serves.
                if let Some(rec) = self.chunks.get_mut(chunk) {
                    op.apply_delta(rec);
                }
            }
            PersistOp::RemoveChunk(id) => {
                self.chunks.remove(id);
                self.blocks.remove(id);
            }
            PersistOp::BlockPut { chunk, id, data } => {
                self.blocks
                    .entry(*chunk)
                    .or_default()
                    .insert(*id, data.clone());
            }
            PersistOp::BlockDelete { chunk, ids } => {
                if let Some(b) = self.blocks.get_mut(chunk) {
                    for id in ids {
                        b.remove(id);
                    }
                    // A chunk without blocks has no entry (as `Device::persistent` shows
                    // it).
                    if b.is_empty() {
                        self.blocks.remove(chunk);
                    }
                }
            }
            PersistOp::SetNextSerial(n) => self.next_serial = *n,
            PersistOp::LookupPut(e) => {
                self.lookup.insert(e.key.clone(), (**e).clone());
            }
            PersistOp::LookupRemove(k) => {
                self.lookup.remove(k);
            }
            PersistOp::SetTerm(t) => self.term = self.term.max(*t),
            PersistOp::SetMembers(m) => {
                if self.members.as_ref().is_none_or(|o| o.version < m.version) {
                    self.members = Some((**m).clone());
                }
            }
            PersistOp::SetSnapshots(ids) => self.snapshots = ids.clone(),
        }
    }
}
