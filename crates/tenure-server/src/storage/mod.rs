//! Durable storage of one device's persistent state on redb.
//!
//! The core's persistent state is a [`DevicePersist`]: the chunk serial counter and one
//! [`ChunkPersist`] record per chunk. A chunk is stored as its *head* (the record with
//! empty tables, postcard-encoded, under its [`ChunkId`] in `chunks`) and its tables'
//! *rows*, one per key ([`tenure_core::rows`]: sessions, lock entries, waiters and
//! per-session lock state, objects, indexes, the watch history) in `chunk_rows` under
//! `(chunk, kind + key)`. A checkpoint writes, per changed chunk, its head and the rows
//! that differ from what redb holds — found by comparing the state with the copy of
//! it taken at the previous checkpoint, which shares structure with it, so the cost
//! follows the changes and not the tables' size. (Formats 1-5 kept whole records in
//! `chunks`; opening one rewrites it as rows. Deltas in `chunk_deltas` are replayed onto
//! their record at load: a checkpoint writes there, as one delta, the confirmed changes
//! a chunk's rows lack ([`Deferred`]), and format 2 wrote every delta there.)
//! The serial counter and a format version live in a small `meta` table; formats 1 (no
//! deltas), 2 (no log) and 3 (no lookup table) are upgraded in place. Persistent lookup
//! entries and tombstones (seed 003, `PersistOp::LookupPut`/`LookupRemove`) live in the
//! `lookup_entries` table under their key, postcard-encoded; they go through the same
//! log and checkpoints as chunks. Object blocks (seed 001, `PersistOp::BlockPut`/
//! `BlockDelete`) live in the `object_blocks` table under `(chunk, block id)`, raw bytes
//! (up to a block, 1 MiB by default); they go through the log and checkpoints too, a
//! `RemoveChunk` drops the chunk's blocks and rows with its record, and format 4 (no
//! block table) is upgraded in place.
//!
//! [`Storage::commit`] makes a whole group of [`PersistOp`]s durable at once (group
//! commit): the driver hands it every persist gathered while the previous commit ran.
//! The group is appended to the device's write-ahead log ([`crate::wal`]) as one record
//! in one durable write, and applied to an in-memory copy of the durable state.
//! When the log is full, a *checkpoint* writes the changed rows and the head of every
//! chunk the logged groups changed (and their removals and the serial counter) into
//! redb in ONE write transaction committed with [`Durability::Immediate`], which also
//! records the log's next generation; the log then starts over. A checkpoint costs the
//! rows that changed, however many deltas the log held. A group too large for the log goes
//! straight into redb the same way. At open, the log's records of redb's generation are
//! replayed onto the state redb holds and checkpointed at once. redb commits are atomic and crash-safe (a torn commit
//! is rolled back at the next open) and a torn log record is never replayed, so after a
//! crash the device boots from exactly the groups whose commit returned, which every
//! acknowledgement that left the device is covered by.
//!
//! redb was chosen over fjall because a commit is durable when `commit()` returns (no
//! separate `persist(SyncAll)` step to forget), it is pure Rust, and a single file per
//! device keeps data directories simple; see DESIGN §11. The log in front of it exists
//! because a redb commit costs about eight page writes and ~0.25 ms on this class of
//! machine, where a one-record overwrite plus fdatasync costs ~0.13 ms.
//!
//! This file holds [`Storage`], its opening and group commits; `schema` the tables and
//! keys on disk and the meta scalars, `load` the reading of it all at open, and
//! `checkpoint` the writing of what the log changed into redb.

use crate::wal::{self, Wal, WalError};
use redb::Database;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tenure_core::ids::{ChunkId, DeviceId};
use tenure_core::io::{DevicePersist, PersistOp};
use tenure_core::rows::RowError;

mod checkpoint;
mod load;
mod schema;
#[cfg(test)]
pub(crate) mod tests;

use checkpoint::Dirty;
pub use schema::FORMAT_VERSION;
use schema::{KEY_FORMAT, META, ROWS, check_meta, key, read_generation, read_meta, write_meta};

/// Storage failures.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The storage engine failed (I/O, corruption).
    #[error("storage engine: {0}")]
    Engine(#[from] redb::Error),
    /// A chunk record does not decode.
    #[error("chunk record {chunk} does not decode: {source}")]
    Decode {
        /// The chunk.
        chunk: ChunkId,
        /// Why.
        source: postcard::Error,
    },
    /// The membership record does not decode.
    #[error("decoding the membership record: {0}")]
    MembersDecode(postcard::Error),
    /// The list of recorded snapshots does not decode.
    #[error("decoding the list of recorded snapshots: {0}")]
    SnapshotsDecode(postcard::Error),
    /// A persistent lookup entry does not decode.
    #[error("lookup entry {key:?} does not decode: {source}")]
    LookupDecode {
        /// The entry's key.
        key: String,
        /// Why.
        source: postcard::Error,
    },
    /// The thread of a background checkpoint panicked.
    #[error("the checkpoint thread panicked")]
    CheckpointPanicked,
    /// A record could not be encoded.
    #[error("encoding a chunk record: {0}")]
    Encode(postcard::Error),
    /// A row of a chunk's tables does not encode or decode.
    #[error("chunk {chunk}: {source}")]
    Row {
        /// The chunk.
        chunk: ChunkId,
        /// Why.
        source: RowError,
    },
    /// The data was written by an unknown format version.
    #[error("data directory has format version {found}; this build reads {FORMAT_VERSION}")]
    Format {
        /// Version found on disk.
        found: u64,
    },
    /// The data directory belongs to another device.
    #[error("data directory belongs to device {found}, not {expected}")]
    WrongDevice {
        /// Device recorded on disk.
        found: u64,
        /// Device this process is configured as.
        expected: u64,
    },
    /// The write-ahead log failed.
    #[error(transparent)]
    Wal(#[from] WalError),
    /// A log record does not decode.
    #[error("write-ahead log record {seq} does not decode: {source}")]
    Record {
        /// The record's position in its generation.
        seq: usize,
        /// Why.
        source: postcard::Error,
    },
    /// Creating the data directory failed.
    #[error("data directory {path}: {source}")]
    Io {
        /// Path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// A group that is durable in the log but not yet applied to the in-memory copy.
#[must_use = "pass it to Storage::apply_logged before the next commit"]
#[derive(Debug)]
pub struct Logged(Vec<PersistOp>);

/// One device's durable state.
pub struct Storage {
    db: std::sync::Arc<Database>,
    path: PathBuf,
    /// Next delta number of each chunk that has deltas in redb.
    next_delta: HashMap<(u64, u64), u64>,
    /// The log new groups go to.
    wal: Wal,
    /// The other log: the groups of the checkpoint under way, if one is.
    spare: Wal,
    /// The checkpoint under way: redb taking the spare log's groups (the rows it wrote).
    job: Option<std::thread::JoinHandle<Result<u64, StorageError>>>,
    /// Whether checkpoints run beside new commits (else each one holds commits up).
    background: bool,
    /// Tests: background checkpoints never reach redb (a device stopped before).
    #[cfg(test)]
    lose_checkpoints: bool,
    /// The durable state: redb's contents with the log's groups applied — but for the
    /// changes in `deferred`, which a chunk's record gets only when it is read whole.
    state: DevicePersist,
    /// Per chunk, the changes its logged groups confirmed that its record's tables do not
    /// have yet (`Replica::accept_batch_deferring`): the chunk hands its own tables every
    /// few deltas, which supersede them, so most are never applied here — applying every
    /// change a second time was most of this thread's work under a lock load (perf,
    /// 10,000 sessions taking locks), and each group commit waited behind it. A
    /// checkpoint writes them as they are, as a delta in redb's delta table that the
    /// next open applies after the rows ([`Deferred`]); only a list grown past
    /// [`Deferred::CATCH_UP_FROM`] is applied here first.
    deferred: HashMap<ChunkId, Deferred>,
    /// What the log changed since the last checkpoint.
    dirty: Dirty,
    /// Per chunk, the tables its rows in redb hold (a copy that shares structure with
    /// the state): a checkpoint writes the rows that differ from it.
    persisted: HashMap<ChunkId, tenure_core::data::Tables>,
    /// Checkpoints done since open.
    checkpoints: u64,
    /// Rows written by checkpoints since open.
    rows_written: u64,
    /// The older format the directory had at open (upgraded in place).
    upgraded_from: Option<u64>,
}

/// A chunk's confirmed changes its record's tables lack ([`Storage::deferred`]).
#[derive(Debug, Default)]
pub(super) struct Deferred {
    /// The confirmed number of the record's tables (before the first change here).
    pub(super) table_confirmed: tenure_core::ids::Version,
    /// The changes, in sequence order.
    /// A persistent vector, so that a checkpoint's copy of it is O(1).
    pub(super) ops: imbl::Vector<(tenure_core::ids::Version, tenure_core::data::StoreOp)>,
}

impl Deferred {
    /// A checkpoint applies a chunk's deferred changes first when there are this many:
    /// the chunk's tables, handed every few deltas, did not come for long (the chunk
    /// confirmed further on CONFIRMs of its own, which it does not persist), and an
    /// open would replay them all.
    pub(super) const CATCH_UP_FROM: usize = 4096;
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage").field("path", &self.path).finish()
    }
}

/// A group commit this long is logged with where its time went.
const SLOW_COMMIT: std::time::Duration = std::time::Duration::from_millis(300);

/// redb's page cache. The device holds its state in memory and reads redb only when it
/// starts; a checkpoint writes the rows that changed. redb's default (1 GiB) kept every
/// page it had read or written, about 1.5 KB per object of a device's resident memory.
pub const REDB_CACHE_BYTES: usize = 32 << 20;

impl Storage {
    /// Open (or create) the database in `dir` for `device` and load its persistent state.
    pub fn open(dir: &Path, device: DeviceId) -> Result<(Storage, DevicePersist), StorageError> {
        Self::open_with_log(dir, device, wal::DEFAULT_CAPACITY)
    }

    /// [`Self::open`] with a write-ahead log of `log_bytes` (at least; an existing larger
    /// log keeps its size).
    pub fn open_with_log(
        dir: &Path,
        device: DeviceId,
        log_bytes: u64,
    ) -> Result<(Storage, DevicePersist), StorageError> {
        std::fs::create_dir_all(dir).map_err(|source| StorageError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = dir.join("tenure.redb");
        let db = Database::builder()
            .set_cache_size(REDB_CACHE_BYTES)
            .create(&path)
            .map_err(redb::Error::from)?;
        let (generation, upgraded_from) = {
            let (format, owner) = read_meta(&db)?;
            check_meta(format, owner, device)?;
            if format != Some(FORMAT_VERSION) || owner.is_none() {
                // An older directory keeps its format number until it is rewritten
                // below: a device stopped before then reads it as that format again.
                write_meta(&db, device, format.unwrap_or(FORMAT_VERSION))?;
            }
            (
                read_generation(&db)?,
                format.filter(|f| *f < FORMAT_VERSION),
            )
        };
        // What the directory and its logs hold is in the layout of its format.
        let layout = schema::generation(upgraded_from.unwrap_or(FORMAT_VERSION));
        // Before format 6 (every older format) a chunk's record held its whole tables
        // and no rows.
        let upgrade = upgraded_from.is_some();
        // Two logs take turns: while redb takes one's groups in the background, the
        // other takes new groups. A device stopped in the middle of a checkpoint left the
        // groups of redb's generation in one and those of the next in the other.
        let paths = [dir.join("tenure.wal"), dir.join("tenure.wal.b")];
        let (mut logged, mut used, mut last) = (Vec::new(), None, generation);
        for g in [generation, generation + 1] {
            for (i, p) in paths.iter().enumerate() {
                if used == Some(i) {
                    continue;
                }
                let (_, records) = Wal::open(p, log_bytes, g)?;
                if !records.is_empty() {
                    logged.extend(records);
                    (used, last) = (Some(i), g);
                    break;
                }
            }
        }
        let (wal, _) = Wal::open(&paths[0], log_bytes, last)?;
        let (spare, _) = Wal::open(&paths[1], log_bytes, last)?;
        let records = logged;
        let mut storage = Storage {
            db: std::sync::Arc::new(db),
            path,
            next_delta: HashMap::new(),
            wal,
            spare,
            job: None,
            background: true,
            #[cfg(test)]
            lose_checkpoints: false,
            state: DevicePersist::default(),
            deferred: HashMap::new(),
            dirty: Dirty::default(),
            persisted: HashMap::new(),
            checkpoints: 0,
            rows_written: 0,
            upgraded_from,
        };
        let (state, next_delta, persisted) =
            tenure_core::generation::with(layout, || storage.load_with_counters())?;
        storage.state = state;
        storage.persisted = persisted;
        storage.next_delta = next_delta;
        // A chunk with deltas, or of an older format, is written as rows at once.
        for id in storage.state.chunks.keys() {
            if upgrade || storage.next_delta.contains_key(&key(*id)) {
                storage.dirty.chunks.insert(*id);
            }
        }
        if upgrade {
            storage.persisted.clear();
        }
        for (seq, bytes) in records.iter().enumerate() {
            let ops: Vec<PersistOp> =
                tenure_core::generation::with(layout, || postcard::from_bytes(bytes))
                    .map_err(|source| StorageError::Record { seq, source })?;
            storage.apply(ops);
        }
        if !storage.dirty.is_empty() {
            storage.checkpoint(false)?;
        }
        if upgrade {
            // Everything is rewritten in this build's layout (the checkpoint above, with
            // nothing in the background): now the directory is of this format.
            storage.wait_checkpoint()?;
            write_meta(&storage.db, device, FORMAT_VERSION)?;
        }
        storage.catch_up_all();
        let state = storage.state.clone();
        Ok((storage, state))
    }

    /// The format the data directory had when it was opened, when it was older than
    /// [`FORMAT_VERSION`] and was upgraded in place.
    pub fn upgraded_from(&self) -> Option<u64> {
        self.upgraded_from
    }

    /// Checkpoints done since open (each a redb commit of the logged groups).
    pub fn checkpoints(&self) -> u64 {
        self.checkpoints
    }

    /// Rows of chunks' tables written by checkpoints since open.
    pub fn rows_written(&self) -> u64 {
        self.rows_written
    }

    /// Path of the database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Make a group of changes durable (one log record, written durably).
    /// Returns after it is durable. An empty group does nothing.
    pub fn commit(&mut self, ops: Vec<PersistOp>) -> Result<(), StorageError> {
        let logged = self.commit_logged(ops)?;
        self.apply_logged(logged);
        Ok(())
    }

    /// [`Self::commit`] in two steps, so that the caller can announce durability before
    /// the in-memory copy catches up: this one returns once the group is durable, with
    /// what [`Self::apply_logged`] must apply before the next commit.
    pub fn commit_logged(&mut self, ops: Vec<PersistOp>) -> Result<Logged, StorageError> {
        if ops.is_empty() {
            return Ok(Logged(Vec::new()));
        }
        let started = std::time::Instant::now();
        let record = postcard::to_stdvec(&ops).map_err(StorageError::Encode)?;
        let encoded = started.elapsed();
        if !self.wal.fits(record.len()) && self.wal.used() > 0 {
            // Hand the log to redb (in the background) and go on in the other one.
            let background = self.background;
            self.checkpoint(background)?;
        }
        let checkpointed = started.elapsed();
        if self.wal.fits(record.len()) {
            self.wal.append(&record)?;
            let done = started.elapsed();
            metrics::histogram!("tenure_wal_write_seconds")
                .record((done - checkpointed).as_secs_f64());
            if done >= SLOW_COMMIT {
                tracing::warn!(
                    ops = ops.len(),
                    bytes = record.len(),
                    encode_ms = encoded.as_millis() as u64,
                    checkpoint_ms = (checkpointed - encoded).as_millis() as u64,
                    write_ms = (done - checkpointed).as_millis() as u64,
                    "a group commit took long: what waits for it (acknowledgements, ACCEPTED) waited"
                );
            }
            Ok(Logged(ops))
        } else {
            // Larger than the whole log: straight into redb.
            self.apply(ops);
            self.checkpoint(false)?;
            Ok(Logged(Vec::new()))
        }
    }

    /// Apply what is deferred for `chunk` to its record, before it is read.
    fn catch_up(&mut self, chunk: ChunkId) {
        if let Some(mut deferred) = self.deferred.remove(&chunk)
            && let Some(rec) = self.state.chunks.get_mut(&chunk)
        {
            rec.data.apply_deferred(&mut deferred.ops);
        }
    }

    /// [`Self::catch_up`] for every chunk.
    fn catch_up_all(&mut self) {
        let chunks: Vec<ChunkId> = self.deferred.keys().copied().collect();
        for c in chunks {
            self.catch_up(c);
        }
    }

    /// Bring the in-memory copy of the durable state up to date with a logged group.
    pub fn apply_logged(&mut self, logged: Logged) {
        self.apply(logged.0);
    }

    /// Apply a durable group to the in-memory state and note what it changed.
    fn apply(&mut self, ops: Vec<PersistOp>) {
        for op in ops {
            match &op {
                PersistOp::PutChunk(c) => {
                    self.dirty.removed.remove(&c.id);
                    self.dirty.chunks.insert(c.id);
                }
                PersistOp::Accept { chunk, .. } => {
                    self.dirty.chunks.insert(*chunk);
                }
                PersistOp::PutChunkHead(c) => {
                    self.dirty.chunks.insert(c.id);
                }
                PersistOp::RemoveChunk(id) => {
                    self.dirty.chunks.remove(id);
                    self.dirty.removed.insert(*id);
                }
                PersistOp::SetNextSerial(_) => self.dirty.serial = true,
                PersistOp::SetTerm(_) => self.dirty.term = true,
                PersistOp::SetMembers(_) => self.dirty.members = true,
                PersistOp::SetSnapshots(_) => self.dirty.snapshots = true,
                PersistOp::LookupPut(e) => {
                    self.dirty.lookup.insert(e.key.clone());
                }
                PersistOp::LookupRemove(k) => {
                    self.dirty.lookup.insert(k.clone());
                }
                PersistOp::BlockPut { chunk, id, .. } => {
                    self.dirty.blocks.insert((*chunk, *id));
                }
                PersistOp::BlockDelete { chunk, ids } => {
                    for id in ids {
                        self.dirty.blocks.insert((*chunk, *id));
                    }
                }
            }
            match op {
                PersistOp::Accept {
                    chunk,
                    ops,
                    confirm,
                    after,
                } => {
                    if let Some(rec) = self.state.chunks.get_mut(&chunk) {
                        let table_confirmed = rec.data.confirmed;
                        let deferred = self.deferred.entry(chunk).or_insert_with(|| Deferred {
                            table_confirmed,
                            ops: imbl::Vector::new(),
                        });
                        let after = after.0.as_deref();
                        (rec.data).accept_batch_deferring(&ops, confirm, after, &mut deferred.ops);
                        if deferred.ops.is_empty() {
                            self.deferred.remove(&chunk);
                        }
                    }
                }
                PersistOp::PutChunkHead(head) => {
                    // The rows stay: what is deferred for them is applied first, then
                    // the head replaces the rest of the record.
                    let id = head.id;
                    self.catch_up(id);
                    if let Some(rec) = self.state.chunks.get_mut(&id) {
                        PersistOp::PutChunkHead(head).apply_delta(rec);
                    }
                }
                op => {
                    // A record put or removed has nothing deferred.
                    if let PersistOp::PutChunk(c) = &op {
                        self.deferred.remove(&c.id);
                    }
                    if let PersistOp::RemoveChunk(id) = &op {
                        self.deferred.remove(id);
                    }
                    self.state.apply_owned(op);
                }
            }
        }
    }
}

/// Rewrite the stopped device `device`'s data directory `dir` as format 5 left it: each
/// chunk's record whole in the chunk table, no rows, nothing in the logs. What a device
/// of a build before format 6 leaves; tests of the upgrade in place start from it.
#[doc(hidden)]
pub fn rewrite_as_format_5(dir: &Path, device: DeviceId) -> Result<(), StorageError> {
    let (mut s, state) = Storage::open(dir, device)?;
    // What the logs hold goes into redb first.
    s.checkpoint(false)?;
    let ops: Vec<PersistOp> = (state.chunks.values())
        .map(|c| PersistOp::PutChunk(Box::new(c.clone())))
        .collect();
    let generation = s.wal.generation();
    s.write_redb(&ops, generation)?;
    let db = s.db.clone();
    drop(s);
    let tx = db.begin_write().map_err(redb::Error::from)?;
    tx.delete_table(ROWS).map_err(redb::Error::from)?;
    tx.open_table(META)
        .map_err(redb::Error::from)?
        .insert(KEY_FORMAT, 5)
        .map_err(redb::Error::from)?;
    tx.commit().map_err(redb::Error::from)?;
    Ok(())
}

/// Rewrite the stopped device `device`'s data directory `dir` as format 6 left it: the
/// same rows and records in the layout from before inline object values. What a device
/// of a build before format 7 leaves; tests of the upgrade in place start from it. Fails
/// if the directory holds an inline value, which format 6 cannot express.
#[doc(hidden)]
pub fn rewrite_as_format_6(dir: &Path, device: DeviceId) -> Result<(), StorageError> {
    let (mut s, state) = Storage::open(dir, device)?;
    s.dirty.chunks.extend(state.chunks.keys().copied());
    s.persisted.clear();
    tenure_core::generation::with(
        tenure_core::generation::Generation::BeforeInlineValues,
        || s.checkpoint(false),
    )?;
    s.wait_checkpoint()?;
    let db = s.db.clone();
    drop(s);
    write_meta(&db, device, 6)?;
    Ok(())
}

impl Drop for Storage {
    fn drop(&mut self) {
        // A checkpoint under way finishes (the logs hold its groups either way).
        let _ = self.wait_checkpoint();
    }
}
