//! Checkpoints: writing what the log changed (heads, changed rows, removals, scalars,
//! lookup entries, blocks) into redb in one durable transaction, in the background or not.

use super::schema::*;
use super::{Deferred, Storage, StorageError};
use redb::{Database, Durability};
use std::collections::{BTreeSet, HashMap};
use tenure_core::data::StoreOp;
use tenure_core::election::Term;
use tenure_core::ids::{ChunkId, Version};
use tenure_core::io::PersistOp;
use tenure_core::objects::{BlockId, Bytes};
use tenure_core::rows::{self, RowChange};

impl Storage {
    /// Write the state of everything the log changed into redb (each changed chunk's
    /// head and changed rows, each removal, the serial counter) in one durable
    /// transaction that also records the log's next generation; new groups go to the
    /// other log meanwhile, under that generation. In the `background`, redb's commit
    /// runs beside new groups (the next checkpoint waits for it); else it is done on
    /// return. Its cost follows what changed, not the size of the state.
    pub(super) fn checkpoint(&mut self, background: bool) -> Result<(), StorageError> {
        // The other log is free once redb holds its groups.
        self.wait_checkpoint()?;
        let encoding = std::time::Instant::now();
        // A chunk's deferred changes are written as they are (a delta after its rows),
        // unless there are many.
        let long: Vec<ChunkId> = (self.dirty.chunks.iter())
            .filter(|c| {
                (self.deferred.get(c)).is_some_and(|d| d.ops.len() >= Deferred::CATCH_UP_FROM)
            })
            .copied()
            .collect();
        let mut caught_up = 0;
        for c in long {
            caught_up += self.deferred.get(&c).map_or(0, |d| d.ops.len());
            self.catch_up(c);
        }
        let caught_up_in = encoding.elapsed();
        // The chunks' rows are found and encoded with redb's commit, off the thread
        // that commits groups (a checkpoint on it took over a second under 10,000
        // sessions taking locks, and every ACCEPTED waited): from O(1) copies of their
        // records and of the tables redb holds, whose maps are persistent.
        let chunks: Vec<ChunkRows> = (self.dirty.chunks.iter())
            .filter_map(|id| {
                let rec = self.state.chunks.get(id)?;
                Some(ChunkRows {
                    id: *id,
                    rec: rec.clone(),
                    deferred: (self.deferred.get(id)).map(|d| (d.table_confirmed, d.ops.clone())),
                    old: self.persisted.get(id).cloned(),
                })
            })
            .collect();
        let copied_in = encoding.elapsed();
        let mut encoded = self.encode_dirty(&self.dirty)?;
        let generation = self.wal.generation() + 1;
        for id in &self.dirty.removed {
            self.persisted.remove(id);
        }
        for c in &chunks {
            self.persisted.insert(c.id, c.rec.data.table.clone());
        }
        self.dirty = Dirty::default();
        let encoded_in = encoding.elapsed();
        metrics::histogram!("tenure_storage_checkpoint_encode_seconds")
            .record(encoded_in.as_secs_f64());
        if encoded_in >= super::SLOW_COMMIT / 3 {
            tracing::warn!(
                chunks = chunks.len(),
                caught_up,
                catch_up_ms = caught_up_in.as_millis() as u64,
                copy_ms = (copied_in - caught_up_in).as_millis() as u64,
                rest_ms = (encoded_in - copied_in).as_millis() as u64,
                deferred = chunks
                    .iter()
                    .filter_map(|c| c.deferred.as_ref())
                    .map(|d| d.1.len())
                    .sum::<usize>(),
                pending = chunks
                    .iter()
                    .map(|c| c.rec.data.l_list.len() + c.rec.data.r_list.len())
                    .sum::<usize>(),
                "a checkpoint took long to start"
            );
        }
        // New groups go to the other log, under the next generation; this one stays as
        // it is until redb holds its groups.
        std::mem::swap(&mut self.wal, &mut self.spare);
        self.wal.reset(generation);
        self.checkpoints += 1;
        let started = std::time::Instant::now();
        // (Deltas in redb, format 2, are the tests' only: their counters stay here.)
        #[cfg(test)]
        if background && self.lose_checkpoints {
            return Ok(());
        }
        if background && self.next_delta.is_empty() {
            let db = self.db.clone();
            let job = std::thread::Builder::new()
                .name("checkpoint".into())
                .spawn(move || {
                    let rows = encode_chunks(chunks, &mut encoded)?;
                    commit_encoded(&db, &encoded, &mut HashMap::new(), generation)?;
                    metrics::histogram!("tenure_storage_checkpoint_seconds")
                        .record(started.elapsed().as_secs_f64());
                    Ok(rows)
                })
                .map_err(|source| StorageError::Io {
                    path: self.path.clone(),
                    source,
                })?;
            self.job = Some(job);
        } else {
            self.rows_written += encode_chunks(chunks, &mut encoded)?;
            let mut next_delta = self.next_delta.clone();
            commit_encoded(&self.db, &encoded, &mut next_delta, generation)?;
            self.next_delta = next_delta;
            metrics::histogram!("tenure_storage_checkpoint_seconds")
                .record(started.elapsed().as_secs_f64());
        }
        Ok(())
    }

    /// Wait for the checkpoint under way, if one is.
    pub(super) fn wait_checkpoint(&mut self) -> Result<(), StorageError> {
        if let Some(job) = self.job.take() {
            let waited = std::time::Instant::now();
            match job.join() {
                Ok(r) => self.rows_written += r?,
                Err(_) => return Err(StorageError::CheckpointPanicked),
            }
            metrics::histogram!("tenure_storage_checkpoint_wait_seconds")
                .record(waited.elapsed().as_secs_f64());
        }
        Ok(())
    }

    /// What a checkpoint writes for `dirty`, encoded from the in-memory state, but for
    /// the changed chunks' heads and rows ([`encode_chunks`]).
    fn encode_dirty(&self, dirty: &Dirty) -> Result<Vec<Encoded>, StorageError> {
        let mut out = Vec::with_capacity(dirty.removed.len() + 1);
        for id in &dirty.removed {
            out.push(Encoded::Remove(key(*id)));
        }
        if dirty.serial {
            out.push(Encoded::Serial(self.state.next_serial));
        }
        if dirty.term {
            out.push(Encoded::Term(self.state.term));
        }
        if dirty.members
            && let Some(m) = &self.state.members
        {
            out.push(Encoded::Members(enc(m)?));
        }
        if dirty.snapshots {
            out.push(Encoded::Snapshots(enc(&self.state.snapshots)?));
        }
        for k in &dirty.lookup {
            out.push(match self.state.lookup.get(k) {
                Some(e) => Encoded::LookupPut(k.clone(), enc(e)?),
                None => Encoded::LookupRemove(k.clone()),
            });
        }
        for (chunk, id) in &dirty.blocks {
            let data = self.state.blocks.get(chunk).and_then(|b| b.get(id));
            out.push(match data {
                Some(data) => Encoded::BlockPut(block_key(*chunk, *id), data.clone()),
                None => Encoded::BlockRemove(vec![block_key(*chunk, *id)]),
            });
        }
        Ok(out)
    }

    /// Apply `ops` to redb in one write transaction (one fsync) that records the log's
    /// `generation`. Per chunk, only the last whole record (or removal) is written, then
    /// the deltas that follow it; a whole record deletes the chunk's older deltas. Block
    /// writes and deletions are applied in order (a removal drops the chunk's blocks).
    /// (Only the tests write deltas now, as a format-2 data directory holds them, and
    /// whole records as a format-5 one does.)
    pub(super) fn write_redb(
        &mut self,
        ops: &[PersistOp],
        generation: u64,
    ) -> Result<(), StorageError> {
        // Index of the last whole record or removal of each chunk in the batch.
        let mut base: HashMap<(u64, u64), usize> = HashMap::new();
        for (i, op) in ops.iter().enumerate() {
            if let PersistOp::PutChunk(_) | PersistOp::RemoveChunk(_) = op {
                base.insert(key(op.chunk().expect("chunk op")), i);
            }
        }
        // Encode first so an encoding failure leaves the database untouched.
        let mut encoded = Vec::with_capacity(ops.len());
        for (i, op) in ops.iter().enumerate() {
            let record_op = matches!(
                op,
                PersistOp::PutChunk(_) | PersistOp::Accept { .. } | PersistOp::PutChunkHead(_)
            );
            let k = op.chunk().map(key).filter(|_| record_op);
            let superseded = k.and_then(|k| base.get(&k)).is_some_and(|b| *b > i);
            if superseded {
                continue;
            }
            encoded.push(match op {
                PersistOp::PutChunk(c) => Encoded::Put(
                    key(c.id),
                    postcard::to_stdvec(&**c).map_err(StorageError::Encode)?,
                ),
                PersistOp::RemoveChunk(id) => Encoded::Remove(key(*id)),
                PersistOp::Accept { chunk, .. } => Encoded::Delta(
                    key(*chunk),
                    postcard::to_stdvec(op).map_err(StorageError::Encode)?,
                ),
                PersistOp::PutChunkHead(c) => Encoded::Delta(
                    key(c.id),
                    postcard::to_stdvec(op).map_err(StorageError::Encode)?,
                ),
                PersistOp::SetNextSerial(n) => Encoded::Serial(*n),
                PersistOp::SetTerm(t) => Encoded::Term(*t),
                PersistOp::SetMembers(m) => {
                    Encoded::Members(postcard::to_stdvec(&**m).map_err(StorageError::Encode)?)
                }
                PersistOp::SetSnapshots(ids) => {
                    Encoded::Snapshots(postcard::to_stdvec(ids).map_err(StorageError::Encode)?)
                }
                PersistOp::LookupPut(e) => Encoded::LookupPut(
                    e.key.clone(),
                    postcard::to_stdvec(&**e).map_err(StorageError::Encode)?,
                ),
                PersistOp::LookupRemove(k) => Encoded::LookupRemove(k.clone()),
                PersistOp::BlockPut { chunk, id, data } => {
                    Encoded::BlockPut(block_key(*chunk, *id), data.clone())
                }
                PersistOp::BlockDelete { chunk, ids } => {
                    Encoded::BlockRemove(ids.iter().map(|id| block_key(*chunk, *id)).collect())
                }
            });
        }
        let mut next_delta = self.next_delta.clone();
        commit_encoded(&self.db, &encoded, &mut next_delta, generation)?;
        self.next_delta = next_delta;
        Ok(())
    }
}

/// A changed chunk as a checkpoint writes it: copies of its record and of the tables
/// redb holds for it, and its deferred changes (the tables' confirmed number, then
/// the changes).
struct ChunkRows {
    id: ChunkId,
    rec: tenure_core::io::ChunkPersist,
    deferred: Option<(Version, imbl::Vector<(Version, StoreOp)>)>,
    old: Option<tenure_core::data::Tables>,
}

/// Append to `out` each chunk's head, the rows that differ from what redb holds, and its
/// deferred changes as one delta that the next open applies after the rows (the head
/// names the tables' own confirmed number, so the delta's changes are taken and
/// confirmed again); the number of rows.
fn encode_chunks(chunks: Vec<ChunkRows>, out: &mut Vec<Encoded>) -> Result<u64, StorageError> {
    let empty = tenure_core::data::Tables::default();
    let mut changed = Vec::new();
    let mut rows = 0;
    for c in chunks {
        let mut head = c.rec.head();
        let deferred = match c.deferred {
            Some((table_confirmed, ops)) => {
                head.data.confirmed = table_confirmed;
                Some(enc(&PersistOp::Accept {
                    chunk: c.id,
                    ops: ops.into_iter().collect(),
                    confirm: c.rec.data.confirmed,
                    after: Default::default(),
                })?)
            }
            None => None,
        };
        out.push(Encoded::Head(key(c.id), enc(&head)?));
        out.push(Encoded::Deferred(key(c.id), deferred));
        changed.clear();
        rows::diff(
            c.old.as_ref().unwrap_or(&empty),
            &c.rec.data.table,
            &mut changed,
        )
        .map_err(|source| StorageError::Row {
            chunk: c.id,
            source,
        })?;
        for RowChange { key: k, value } in changed.drain(..) {
            out.push(Encoded::Row(key(c.id), k, value));
            rows += 1;
        }
    }
    Ok(rows)
}

/// `v` as redb holds it.
fn enc<T: serde::Serialize>(v: &T) -> Result<Vec<u8>, StorageError> {
    postcard::to_stdvec(v).map_err(StorageError::Encode)
}

/// Apply `ops` to redb in one write transaction (one fsync) that records the log's
/// `generation`.
fn commit_encoded(
    db: &Database,
    ops: &[Encoded],
    next_delta: &mut HashMap<(u64, u64), u64>,
    generation: u64,
) -> Result<(), redb::Error> {
    let mut tx = db.begin_write()?;
    tx.set_durability(Durability::Immediate)?;
    {
        let mut chunks = tx.open_table(CHUNKS)?;
        let mut deltas = tx.open_table(DELTAS)?;
        let mut meta = tx.open_table(META)?;
        let mut lookup = tx.open_table(LOOKUP)?;
        let mut blocks = tx.open_table(BLOCKS)?;
        let mut cluster = tx.open_table(CLUSTER)?;
        let mut rows = tx.open_table(ROWS)?;
        for op in ops {
            match op {
                Encoded::Put(k, v) => {
                    chunks.insert(*k, v.as_slice())?;
                    drop_deltas(&mut deltas, next_delta, *k)?;
                    drop_rows(&mut rows, *k)?;
                }
                Encoded::Head(k, v) => {
                    chunks.insert(*k, v.as_slice())?;
                    drop_deltas(&mut deltas, next_delta, *k)?;
                }
                Encoded::Row(k, row, value) => match value {
                    Some(v) => {
                        rows.insert((k.0, k.1, row.as_slice()), v.as_slice())?;
                    }
                    None => {
                        rows.remove((k.0, k.1, row.as_slice()))?;
                    }
                },
                Encoded::Remove(k) => {
                    chunks.remove(*k)?;
                    drop_deltas(&mut deltas, next_delta, *k)?;
                    drop_rows(&mut rows, *k)?;
                    let (lo, hi) = chunk_block_range(*k);
                    blocks.retain_in(lo..=hi, |_, _| false)?;
                }
                Encoded::Deferred(k, v) => {
                    // The chunk's only delta, or none.
                    deltas.retain_in((k.0, k.1, 0)..=(k.0, k.1, u64::MAX), |_, _| false)?;
                    next_delta.remove(k);
                    if let Some(v) = v {
                        deltas.insert((k.0, k.1, 0), v.as_slice())?;
                        next_delta.insert(*k, 1);
                    }
                }
                Encoded::Delta(k, v) => {
                    let n = next_delta.entry(*k).or_insert(0);
                    deltas.insert((k.0, k.1, *n), v.as_slice())?;
                    *n += 1;
                }
                Encoded::Serial(n) => {
                    meta.insert(KEY_NEXT_SERIAL, *n)?;
                }
                Encoded::Term(t) => {
                    meta.insert(KEY_TERM_N, t.n)?;
                    meta.insert(KEY_TERM_LEADER, t.leader.0)?;
                }
                Encoded::Members(v) => {
                    cluster.insert(KEY_MEMBERS, v.as_slice())?;
                }
                Encoded::Snapshots(v) => {
                    cluster.insert(KEY_SNAPSHOTS, v.as_slice())?;
                }
                Encoded::LookupPut(k, v) => {
                    lookup.insert(k.as_str(), v.as_slice())?;
                }
                Encoded::LookupRemove(k) => {
                    lookup.remove(k.as_str())?;
                }
                Encoded::BlockPut(k, data) => {
                    blocks.insert(*k, &data[..])?;
                }
                Encoded::BlockRemove(ks) => {
                    for k in ks {
                        blocks.remove(*k)?;
                    }
                }
            }
        }
        meta.insert(KEY_WAL_GENERATION, generation)?;
    }
    tx.commit()?;
    Ok(())
}

/// Delete every row of chunk `k` (its whole record was just written, or it was removed).
fn drop_rows(
    rows: &mut redb::Table<(u64, u64, &[u8]), &[u8]>,
    k: (u64, u64),
) -> Result<(), redb::Error> {
    let (lo, hi): (&[u8], &[u8]) = (&[], &[]);
    rows.retain_in((k.0, k.1, lo)..(k.0, k.1.saturating_add(1), hi), |_, _| {
        false
    })?;
    Ok(())
}

/// Delete every delta of chunk `k` (its whole record was just written or removed).
fn drop_deltas(
    deltas: &mut redb::Table<(u64, u64, u64), &[u8]>,
    next_delta: &mut HashMap<(u64, u64), u64>,
    k: (u64, u64),
) -> Result<(), redb::Error> {
    if next_delta.remove(&k).is_some() {
        deltas.retain_in((k.0, k.1, 0)..=(k.0, k.1, u64::MAX), |_, _| false)?;
    }
    Ok(())
}

/// What the log changed since the last checkpoint.
#[derive(Default)]
pub(super) struct Dirty {
    pub(super) chunks: BTreeSet<ChunkId>,
    pub(super) removed: BTreeSet<ChunkId>,
    pub(super) serial: bool,
    pub(super) term: bool,
    pub(super) members: bool,
    pub(super) snapshots: bool,
    /// Lookup keys written or removed (the state says which).
    pub(super) lookup: BTreeSet<String>,
    /// Blocks written or deleted (the state says which).
    pub(super) blocks: BTreeSet<(ChunkId, BlockId)>,
}

impl Dirty {
    pub(super) fn is_empty(&self) -> bool {
        self.chunks.is_empty()
            && self.removed.is_empty()
            && !self.serial
            && !self.term
            && !self.members
            && !self.snapshots
            && self.lookup.is_empty()
            && self.blocks.is_empty()
    }
}

enum Encoded {
    /// A chunk's whole record (tables included; the tests' format-2 path): its rows go.
    #[cfg_attr(not(test), allow(dead_code))]
    Put((u64, u64), Vec<u8>),
    /// A chunk's record without its rows.
    Head((u64, u64), Vec<u8>),
    /// One row of a chunk's tables; none: delete it.
    Row((u64, u64), Vec<u8>, Option<Vec<u8>>),
    Remove((u64, u64)),
    /// A chunk's deferred changes as its one delta (`PersistOp::Accept`), replacing the
    /// deltas it had; none: it has none.
    Deferred((u64, u64), Option<Vec<u8>>),
    /// A delta in redb's delta table (format 2; written by the tests only).
    #[cfg_attr(not(test), allow(dead_code))]
    Delta((u64, u64), Vec<u8>),
    Serial(u64),
    Term(Term),
    Members(Vec<u8>),
    Snapshots(Vec<u8>),
    LookupPut(String, Vec<u8>),
    LookupRemove(String),
    BlockPut(BlockKey, Bytes),
    BlockRemove(Vec<BlockKey>),
}
