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
//! `chunks`; opening one rewrites it as rows. Deltas in `chunk_deltas`, as format 2
//! wrote them, are replayed onto their record at load; only the tests write them now.)
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

use crate::wal::{self, Wal, WalError};
use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use tenure_core::election::Term;
use tenure_core::ids::{ChunkId, DeviceId};
use tenure_core::io::{ChunkPersist, DevicePersist, PersistOp};
use tenure_core::lookup::Entry;
use tenure_core::objects::{BlockId, Bytes, Uuid};
use tenure_core::rows::{self, RowChange, RowError};

/// Chunk records: `(device, serial)` → postcard(`ChunkPersist`).
const CHUNKS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("chunks");
/// Chunk deltas written after the chunk's record: `(device, serial, n)` →
/// postcard(`PersistOp::Accept`), applied in `n` order at load.
const DELTAS: TableDefinition<(u64, u64, u64), &[u8]> = TableDefinition::new("chunk_deltas");
/// A chunk's tables, one row per key ([`rows`]): `(device, serial, kind byte + key)` →
/// the row's value. The chunk's record in [`CHUNKS`] holds the rest (its head).
const ROWS: TableDefinition<(u64, u64, &[u8]), &[u8]> = TableDefinition::new("chunk_rows");
/// Persistent lookup entries and tombstones: key → postcard(`lookup::Entry`).
const LOOKUP: TableDefinition<&str, &[u8]> = TableDefinition::new("lookup_entries");
/// Object blocks: `(device, serial, upload, part, generation, index)` → the block's bytes.
const BLOCKS: TableDefinition<BlockKey, &[u8]> = TableDefinition::new("object_blocks");
/// Cluster-wide records this device keeps: `members` → postcard(`Members`).
const CLUSTER: TableDefinition<&str, &[u8]> = TableDefinition::new("cluster");
const KEY_MEMBERS: &str = "members";
/// `snapshots` → postcard(`Vec<SnapshotId>`): the snapshots this device recorded.
const KEY_SNAPSHOTS: &str = "snapshots";
/// Small scalars: format version, serial counter, owning device.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// On-disk format version written by this code.
pub const FORMAT_VERSION: u64 = 6;

const KEY_FORMAT: &str = "format_version";
const KEY_NEXT_SERIAL: &str = "next_serial";
/// The newest coordinator term seen: its counter and its coordinator.
const KEY_TERM_N: &str = "term_n";
const KEY_TERM_LEADER: &str = "term_leader";
const KEY_DEVICE: &str = "device";
/// Generation of the write-ahead log whose records follow what redb holds.
const KEY_WAL_GENERATION: &str = "wal_generation";

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
    /// The checkpoint under way: redb taking the spare log's groups.
    job: Option<std::thread::JoinHandle<Result<(), redb::Error>>>,
    /// Whether checkpoints run beside new commits (else each one holds commits up).
    background: bool,
    /// Tests: background checkpoints never reach redb (a device stopped before).
    #[cfg(test)]
    lose_checkpoints: bool,
    /// The durable state: redb's contents with the log's groups applied.
    state: DevicePersist,
    /// What the log changed since the last checkpoint.
    dirty: Dirty,
    /// Per chunk, the tables its rows in redb hold (a copy that shares structure with
    /// the state): a checkpoint writes the rows that differ from it.
    persisted: HashMap<ChunkId, tenure_core::data::Tables>,
    /// Checkpoints done since open.
    checkpoints: u64,
    /// Rows written by checkpoints since open.
    rows_written: u64,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage").field("path", &self.path).finish()
    }
}

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
        let (generation, upgrade) = {
            let (format, owner) = read_meta(&db)?;
            check_meta(format, owner, device)?;
            if format != Some(FORMAT_VERSION) || owner.is_none() {
                write_meta(&db, device)?;
            }
            // Before format 6 a chunk's record held its whole tables and no rows.
            let upgrade = format.is_some_and(|f| f < 6);
            (read_generation(&db)?, upgrade)
        };
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
            dirty: Dirty::default(),
            persisted: HashMap::new(),
            checkpoints: 0,
            rows_written: 0,
        };
        let (state, next_delta, persisted) = storage.load_with_counters()?;
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
            let ops: Vec<PersistOp> = postcard::from_bytes(bytes)
                .map_err(|source| StorageError::Record { seq, source })?;
            storage.apply(ops);
        }
        if !storage.dirty.is_empty() {
            storage.checkpoint(false)?;
        }
        let state = storage.state.clone();
        Ok((storage, state))
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

    /// Read the whole persistent state: each chunk's last whole record with the deltas
    /// written after it applied in order.
    pub fn load(&self) -> Result<DevicePersist, StorageError> {
        Ok(self.load_with_counters()?.0)
    }

    /// [`Self::load`], with the next delta number of each chunk that has deltas and,
    /// per chunk, the tables its rows hold (before any delta).
    #[allow(clippy::type_complexity)]
    fn load_with_counters(
        &self,
    ) -> Result<
        (
            DevicePersist,
            HashMap<(u64, u64), u64>,
            HashMap<ChunkId, tenure_core::data::Tables>,
        ),
        StorageError,
    > {
        let raw = self.load_raw()?;
        let members = match raw.members {
            Some(bytes) => Some(postcard::from_bytes(&bytes).map_err(StorageError::MembersDecode)?),
            None => None,
        };
        let snapshots = match raw.snapshots {
            Some(bytes) => postcard::from_bytes(&bytes).map_err(StorageError::SnapshotsDecode)?,
            None => Vec::new(),
        };
        let mut state = DevicePersist {
            next_serial: raw.next_serial,
            term: raw.term,
            members,
            snapshots,
            ..Default::default()
        };
        for (chunk, bytes) in raw.records {
            let rec: ChunkPersist = postcard::from_bytes(&bytes)
                .map_err(|source| StorageError::Decode { chunk, source })?;
            state.chunks.insert(chunk, rec);
        }
        for (chunk, k, v) in &raw.rows {
            if let Some(rec) = state.chunks.get_mut(chunk) {
                rows::insert(&mut rec.data.table, k, v).map_err(|source| StorageError::Row {
                    chunk: *chunk,
                    source,
                })?;
            }
        }
        let mut persisted = HashMap::new();
        for (id, rec) in state.chunks.iter_mut() {
            rows::finish(&mut rec.data.table);
            persisted.insert(*id, rec.data.table.clone());
        }
        for (chunk, bytes) in raw.deltas {
            let op: PersistOp = postcard::from_bytes(&bytes)
                .map_err(|source| StorageError::Decode { chunk, source })?;
            if let Some(rec) = state.chunks.get_mut(&chunk) {
                op.apply_delta(rec);
            }
        }
        for (key, bytes) in raw.lookup {
            let e: Entry =
                postcard::from_bytes(&bytes).map_err(|source| StorageError::LookupDecode {
                    key: key.clone(),
                    source,
                })?;
            state.lookup.insert(key, e);
        }
        for (chunk, id, bytes) in raw.blocks {
            state
                .blocks
                .entry(chunk)
                .or_default()
                .insert(id, Bytes::from(bytes));
        }
        Ok((state, raw.next_delta, persisted))
    }

    fn load_raw(&self) -> Result<Raw, redb::Error> {
        let tx = self.db.begin_read()?;
        let meta = tx.open_table(META)?;
        let next_serial = meta.get(KEY_NEXT_SERIAL)?.map(|g| g.value()).unwrap_or(0);
        let term = Term {
            n: meta.get(KEY_TERM_N)?.map(|g| g.value()).unwrap_or(0),
            leader: DeviceId(meta.get(KEY_TERM_LEADER)?.map(|g| g.value()).unwrap_or(0)),
        };
        let chunk_id = |device, serial| ChunkId {
            device: DeviceId(device),
            serial,
        };
        let mut records = Vec::new();
        for row in tx.open_table(CHUNKS)?.iter()? {
            let (k, v) = row?;
            let (device, serial) = k.value();
            records.push((chunk_id(device, serial), v.value().to_vec()));
        }
        let mut deltas = Vec::new();
        let mut next_delta = HashMap::new();
        for row in tx.open_table(DELTAS)?.iter()? {
            let (k, v) = row?;
            let (device, serial, n) = k.value();
            next_delta.insert((device, serial), n + 1);
            deltas.push((chunk_id(device, serial), v.value().to_vec()));
        }
        let mut rows = Vec::new();
        match tx.open_table(ROWS) {
            Ok(t) => {
                for row in t.iter()? {
                    let (k, v) = row?;
                    let (device, serial, key) = k.value();
                    rows.push((chunk_id(device, serial), key.to_vec(), v.value().to_vec()));
                }
            }
            Err(redb::TableError::TableDoesNotExist(_)) => {}
            Err(e) => return Err(e.into()),
        }
        let mut lookup = Vec::new();
        for row in tx.open_table(LOOKUP)?.iter()? {
            let (k, v) = row?;
            lookup.push((k.value().to_string(), v.value().to_vec()));
        }
        let mut blocks = Vec::new();
        for row in tx.open_table(BLOCKS)?.iter()? {
            let (k, v) = row?;
            let (chunk, id) = from_block_key(k.value());
            blocks.push((chunk, id, v.value().to_vec()));
        }
        let (members, snapshots) = match tx.open_table(CLUSTER) {
            Ok(t) => (
                t.get(KEY_MEMBERS)?.map(|v| v.value().to_vec()),
                t.get(KEY_SNAPSHOTS)?.map(|v| v.value().to_vec()),
            ),
            Err(redb::TableError::TableDoesNotExist(_)) => (None, None),
            Err(e) => return Err(e.into()),
        };
        Ok(Raw {
            next_serial,
            term,
            members,
            snapshots,
            records,
            rows,
            deltas,
            next_delta,
            lookup,
            blocks,
        })
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
        let record = postcard::to_stdvec(&ops).map_err(StorageError::Encode)?;
        if !self.wal.fits(record.len()) && self.wal.used() > 0 {
            // Hand the log to redb (in the background) and go on in the other one.
            let background = self.background;
            self.checkpoint(background)?;
        }
        if self.wal.fits(record.len()) {
            self.wal.append(&record)?;
            Ok(Logged(ops))
        } else {
            // Larger than the whole log: straight into redb.
            self.apply(ops);
            self.checkpoint(false)?;
            Ok(Logged(Vec::new()))
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
            self.state.apply_owned(op);
        }
    }

    /// Write the state of everything the log changed into redb (each changed chunk's
    /// head and changed rows, each removal, the serial counter) in one durable
    /// transaction that also records the log's next generation; new groups go to the
    /// other log meanwhile, under that generation. In the `background`, redb's commit
    /// runs beside new groups (the next checkpoint waits for it); else it is done on
    /// return. Its cost follows what changed, not the size of the state.
    fn checkpoint(&mut self, background: bool) -> Result<(), StorageError> {
        // The other log is free once redb holds its groups.
        self.wait_checkpoint()?;
        // Encoded straight from the state: no record is copied to be written.
        let encoded = self.encode_dirty(&self.dirty)?;
        let generation = self.wal.generation() + 1;
        self.rows_written += (encoded.iter())
            .filter(|e| matches!(e, Encoded::Row(..)))
            .count() as u64;
        for id in &self.dirty.removed {
            self.persisted.remove(id);
        }
        for id in &self.dirty.chunks {
            if let Some(rec) = self.state.chunks.get(id) {
                self.persisted.insert(*id, rec.data.table.clone());
            }
        }
        self.dirty = Dirty::default();
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
                    let r = commit_encoded(&db, &encoded, &mut HashMap::new(), generation);
                    metrics::histogram!("tenure_storage_checkpoint_seconds")
                        .record(started.elapsed().as_secs_f64());
                    r
                })
                .map_err(|source| StorageError::Io {
                    path: self.path.clone(),
                    source,
                })?;
            self.job = Some(job);
        } else {
            let mut next_delta = self.next_delta.clone();
            commit_encoded(&self.db, &encoded, &mut next_delta, generation)?;
            self.next_delta = next_delta;
            metrics::histogram!("tenure_storage_checkpoint_seconds")
                .record(started.elapsed().as_secs_f64());
        }
        Ok(())
    }

    /// Wait for the checkpoint under way, if one is.
    fn wait_checkpoint(&mut self) -> Result<(), StorageError> {
        if let Some(job) = self.job.take() {
            let waited = std::time::Instant::now();
            match job.join() {
                Ok(r) => r?,
                Err(_) => return Err(StorageError::CheckpointPanicked),
            }
            metrics::histogram!("tenure_storage_checkpoint_wait_seconds")
                .record(waited.elapsed().as_secs_f64());
        }
        Ok(())
    }

    /// What a checkpoint writes for `dirty`, encoded from the in-memory state.
    fn encode_dirty(&self, dirty: &Dirty) -> Result<Vec<Encoded>, StorageError> {
        fn enc<T: serde::Serialize>(v: &T) -> Result<Vec<u8>, StorageError> {
            postcard::to_stdvec(v).map_err(StorageError::Encode)
        }
        let mut out = Vec::with_capacity(dirty.chunks.len() + dirty.removed.len() + 1);
        for id in &dirty.removed {
            out.push(Encoded::Remove(key(*id)));
        }
        let empty = tenure_core::data::Tables::default();
        let mut changed = Vec::new();
        for id in &dirty.chunks {
            if let Some(rec) = self.state.chunks.get(id) {
                // The record without its rows, then the rows that changed.
                let head = rec.head();
                out.push(Encoded::Head(key(*id), enc(&head)?));
                let old = self.persisted.get(id).unwrap_or(&empty);
                changed.clear();
                rows::diff(old, &rec.data.table, &mut changed)
                    .map_err(|source| StorageError::Row { chunk: *id, source })?;
                for RowChange { key: k, value } in changed.drain(..) {
                    out.push(Encoded::Row(key(*id), k, value));
                }
            }
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
    /// (Only the tests write deltas now, as a format-2 data directory holds them.)
    #[cfg(test)]
    fn write_redb(&mut self, ops: &[PersistOp], generation: u64) -> Result<(), StorageError> {
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
            let record_op = matches!(op, PersistOp::PutChunk(_) | PersistOp::Accept { .. });
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

impl Drop for Storage {
    fn drop(&mut self) {
        // A checkpoint under way finishes (the logs hold its groups either way).
        let _ = self.wait_checkpoint();
    }
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

fn read_meta(db: &Database) -> Result<(Option<u64>, Option<u64>), redb::Error> {
    let tx = db.begin_read()?;
    let meta = match tx.open_table(META) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok((None, None)),
        Err(e) => return Err(e.into()),
    };
    let format = meta.get(KEY_FORMAT)?.map(|g| g.value());
    let owner = meta.get(KEY_DEVICE)?.map(|g| g.value());
    Ok((format, owner))
}

/// Refuse another format or another device's directory. Formats 1 (no deltas), 2 (no
/// log), 3 (no lookup table) and 4 (no block table) are this format without them:
/// opening one adds what is missing.
fn check_meta(
    format: Option<u64>,
    owner: Option<u64>,
    device: DeviceId,
) -> Result<(), StorageError> {
    if let Some(v) = format
        && v != FORMAT_VERSION
        && !(1..=5).contains(&v)
    {
        return Err(StorageError::Format { found: v });
    }
    if let Some(found) = owner
        && found != device.0
    {
        return Err(StorageError::WrongDevice {
            found,
            expected: device.0,
        });
    }
    Ok(())
}

fn write_meta(db: &Database, device: DeviceId) -> Result<(), redb::Error> {
    let mut tx = db.begin_write()?;
    tx.set_durability(Durability::Immediate)?;
    {
        let mut meta = tx.open_table(META)?;
        meta.insert(KEY_FORMAT, FORMAT_VERSION)?;
        meta.insert(KEY_DEVICE, device.0)?;
        tx.open_table(CHUNKS)?;
        tx.open_table(DELTAS)?;
        tx.open_table(LOOKUP)?;
        tx.open_table(BLOCKS)?;
        tx.open_table(ROWS)?;
    }
    tx.commit()?;
    Ok(())
}

/// The log generation redb's contents end at (0 before the first checkpoint).
fn read_generation(db: &Database) -> Result<u64, redb::Error> {
    let tx = db.begin_read()?;
    let meta = tx.open_table(META)?;
    Ok(meta
        .get(KEY_WAL_GENERATION)?
        .map(|g| g.value())
        .unwrap_or(0))
}

fn key(c: ChunkId) -> (u64, u64) {
    (c.device.0, c.serial)
}

/// A block's key: its chunk, then its id's fields in the id's order.
type BlockKey = (u64, u64, u128, u32, u32, u32);

fn block_key(c: ChunkId, id: BlockId) -> BlockKey {
    (
        c.device.0,
        c.serial,
        id.upload.0,
        id.part,
        id.generation,
        id.index,
    )
}

fn from_block_key(k: BlockKey) -> (ChunkId, BlockId) {
    let (device, serial, upload, part, generation, index) = k;
    (
        ChunkId {
            device: DeviceId(device),
            serial,
        },
        BlockId {
            upload: Uuid(upload),
            part,
            generation,
            index,
        },
    )
}

/// The first and last possible block keys of chunk `k`.
fn chunk_block_range(k: (u64, u64)) -> (BlockKey, BlockKey) {
    (
        (k.0, k.1, 0, 0, 0, 0),
        (k.0, k.1, u128::MAX, u32::MAX, u32::MAX, u32::MAX),
    )
}

/// What the database holds, undecoded.
struct Raw {
    next_serial: u64,
    term: Term,
    members: Option<Vec<u8>>,
    snapshots: Option<Vec<u8>>,
    records: Vec<(ChunkId, Vec<u8>)>,
    rows: Vec<(ChunkId, Vec<u8>, Vec<u8>)>,
    deltas: Vec<(ChunkId, Vec<u8>)>,
    next_delta: HashMap<(u64, u64), u64>,
    lookup: Vec<(String, Vec<u8>)>,
    blocks: Vec<(ChunkId, BlockId, Vec<u8>)>,
}

/// What the log changed since the last checkpoint.
#[derive(Default)]
struct Dirty {
    chunks: BTreeSet<ChunkId>,
    removed: BTreeSet<ChunkId>,
    serial: bool,
    term: bool,
    members: bool,
    snapshots: bool,
    /// Lookup keys written or removed (the state says which).
    lookup: BTreeSet<String>,
    /// Blocks written or deleted (the state says which).
    blocks: BTreeSet<(ChunkId, BlockId)>,
}

impl Dirty {
    fn is_empty(&self) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_core::ids::Epoch;
    use tenure_core::{ClusterConfig, Device, DeviceConfig, Instant, Output};

    /// Real chunk records, as a booting device's core produces them (serials 0..4).
    fn boot_records() -> Vec<ChunkPersist> {
        let cfg = DeviceConfig::new(DeviceId(1), ClusterConfig::new(1, 4, 1));
        let (_dev, out) = Device::new(cfg, DevicePersist::default(), Instant(0), 1);
        out.into_iter()
            .filter_map(|o| match o {
                Output::Persist(PersistOp::PutChunk(c)) => Some(*c),
                _ => None,
            })
            .collect()
    }

    fn chunk(serial: u64, epoch: u64) -> ChunkPersist {
        let mut c = boot_records()
            .into_iter()
            .find(|c| c.id.serial == serial)
            .expect("bootstrap chunk");
        c.epoch = Epoch(epoch);
        c
    }

    /// Chunk 0 at epoch 1 holding registers `0..n`.
    fn chunk_with_registers(n: u64) -> ChunkPersist {
        let mut c = chunk(0, 1);
        for k in 0..n {
            c.data
                .table
                .registers
                .entries
                .insert(k, (Default::default(), k));
        }
        c
    }

    #[test]
    fn fresh_directory_is_empty_state() {
        let dir = tempfile::tempdir().unwrap();
        let (_s, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
        assert_eq!(state, DevicePersist::default());
    }

    #[test]
    fn batch_survives_reopen_and_matches_apply() {
        let dir = tempfile::tempdir().unwrap();
        let ops = vec![
            PersistOp::PutChunk(Box::new(chunk(0, 1))),
            PersistOp::PutChunk(Box::new(chunk(1, 1))),
            PersistOp::SetNextSerial(64),
            PersistOp::PutChunk(Box::new(chunk(0, 2))),
            PersistOp::RemoveChunk(ChunkId {
                device: DeviceId(1),
                serial: 1,
            }),
        ];
        let mut expected = DevicePersist::default();
        for op in &ops {
            expected.apply(op);
        }
        {
            let (mut s, _) = Storage::open(dir.path(), DeviceId(1)).unwrap();
            s.commit(ops[..3].to_vec()).unwrap();
            s.commit(ops[3..].to_vec()).unwrap();
        }
        let (_s, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
        assert_eq!(state, expected);
        assert_eq!(state.next_serial, 64);
        assert_eq!(state.chunks.len(), 1);
        assert_eq!(state.chunks.values().next().unwrap().epoch, Epoch(2));
    }

    /// A SafeTalk ACCEPT of one register write at sequence `seq`, confirming `confirm`.
    fn accept(serial: u64, seq: u64, confirm: u64) -> PersistOp {
        use tenure_core::data::StoreOp;
        use tenure_core::ids::Version;
        let v = |seq| Version {
            epoch: Epoch(1),
            seq,
        };
        PersistOp::Accept {
            chunk: ChunkId {
                device: DeviceId(1),
                serial,
            },
            ops: vec![(
                v(seq),
                StoreOp::Register {
                    key: seq % 3,
                    value: seq,
                },
            )],
            confirm: v(confirm),
            after: Default::default(),
        }
    }

    #[test]
    fn deltas_replay_after_their_record_and_a_whole_record_drops_them() {
        // redb's delta table, as a format-2 directory holds it (this format's checkpoints
        // write whole records): deltas are replayed onto their record at load.
        let dir = tempfile::tempdir().unwrap();
        let c0 = ChunkId {
            device: DeviceId(1),
            serial: 0,
        };
        let groups: Vec<Vec<PersistOp>> = vec![
            vec![PersistOp::PutChunk(Box::new(chunk(0, 1))), accept(0, 1, 0)],
            vec![accept(0, 2, 1), accept(0, 3, 2)],
            vec![accept(0, 4, 3)],
            // A delta superseded by a whole record in the same group is not written.
            vec![
                accept(0, 5, 4),
                PersistOp::PutChunk(Box::new(chunk(0, 1))),
                accept(0, 1, 0),
            ],
            vec![accept(0, 2, 1)],
        ];
        let mut expected = DevicePersist::default();
        {
            let (mut s, _) = Storage::open(dir.path(), DeviceId(1)).unwrap();
            for (i, g) in groups.iter().enumerate() {
                s.write_redb(g, 0).unwrap();
                for op in g {
                    expected.apply(op);
                }
                // Reopening at any point gives the state the changes so far describe.
                if i == 2 {
                    drop(s);
                    let (s2, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
                    assert_eq!(state, expected, "after group {i}");
                    assert_eq!(state.chunks[&c0].data.table.registers.entries.len(), 3);
                    s = s2;
                }
            }
        }
        let (s, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
        assert_eq!(state, expected);
        // Opening wrote the chunk with its deltas applied as rows: none is left.
        assert!(s.next_delta.is_empty(), "{:?}", s.next_delta);
        drop(s);
        let (_s, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
        assert_eq!(state, expected);
    }

    #[test]
    fn a_checkpoint_writes_whole_records_not_deltas() {
        let dir = tempfile::tempdir().unwrap();
        let groups = many_groups(30);
        let (mut s, _) = Storage::open_with_log(dir.path(), DeviceId(1), 1024).unwrap();
        for g in &groups {
            s.commit(g.clone()).unwrap();
        }
        assert!(s.checkpoints() > 0);
        assert!(s.next_delta.is_empty(), "redb holds no deltas");
        drop(s);
        let (_s, state) = Storage::open_with_log(dir.path(), DeviceId(1), 1024).unwrap();
        assert_eq!(state, applied(&groups));
    }

    /// A checkpoint writes the rows that changed since the last one, not the tables: a
    /// store of 20,000 registers changed in three keys costs three rows per checkpoint.
    #[test]
    fn a_checkpoint_writes_the_changed_rows_only() {
        let dir = tempfile::tempdir().unwrap();
        let big = chunk_with_registers(20_000);
        let mut groups = vec![vec![PersistOp::PutChunk(Box::new(big))]];
        for i in 1..=2000 {
            groups.push(vec![accept(0, i, i - 1)]);
        }
        let (mut s, _) = Storage::open_with_log(dir.path(), DeviceId(1), 4096).unwrap();
        s.commit(groups[0].clone()).unwrap();
        let (rows0, cps0) = (s.rows_written(), s.checkpoints());
        assert!(
            rows0 >= 20_000,
            "the first checkpoint writes every row: {rows0}"
        );
        for g in &groups[1..] {
            s.commit(g.clone()).unwrap();
        }
        let cps = s.checkpoints() - cps0;
        assert!(cps >= 3, "{cps} checkpoints");
        let rows = s.rows_written() - rows0;
        assert!(rows <= 3 * cps, "{rows} rows in {cps} checkpoints");
        drop(s);
        let (_s, state) = Storage::open_with_log(dir.path(), DeviceId(1), 4096).unwrap();
        assert_eq!(state, applied(&groups));
    }

    /// A delta carrying its chunk's tables (as a serving chunk's ACCEPT does every
    /// `SHARE_TABLES_EVERY` deltas) leaves the storage's copy sharing the chunk's maps,
    /// not a second copy of them; what the log replays after a restart is the same.
    #[test]
    fn a_delta_with_the_chunk_tables_shares_them_and_replays_alike() {
        let dir = tempfile::tempdir().unwrap();
        let c0 = ChunkId {
            device: DeviceId(1),
            serial: 0,
        };
        let mut own = chunk_with_registers(5_000);
        let mut groups = vec![vec![PersistOp::PutChunk(Box::new(own.clone()))]];
        let mut at_294 = None;
        for i in 1..=300 {
            let mut op = accept(0, i, i - 1);
            op.apply_delta(&mut own);
            if let PersistOp::Accept { after, .. } = &mut op
                && i % 7 == 0
            {
                *after = tenure_core::io::TablesAfter(Some(std::sync::Arc::new((
                    own.data.confirmed,
                    own.data.table.clone(),
                ))));
            }
            if i == 294 {
                at_294 = Some(own.data.table.registers.entries.clone());
            }
            groups.push(vec![op]);
        }
        let at_294 = at_294.expect("built");
        let (mut s, _) = Storage::open_with_log(dir.path(), DeviceId(1), 1 << 20).unwrap();
        for g in &groups[..=294] {
            s.commit(g.clone()).unwrap();
        }
        let table = |s: &Storage| s.state.chunks[&c0].data.table.registers.entries.clone();
        assert!(
            table(&s).ptr_eq(&at_294),
            "the storage holds a copy of its own"
        );
        // Deltas without the tables are applied (copying only what they change).
        for g in &groups[295..] {
            s.commit(g.clone()).unwrap();
        }
        assert!(!table(&s).ptr_eq(&at_294));
        assert_eq!(s.state.chunks[&c0].data, own.data);
        drop(s);
        let (_s, state) = Storage::open_with_log(dir.path(), DeviceId(1), 1 << 20).unwrap();
        assert_eq!(state, applied(&groups));
        assert_eq!(state.chunks[&c0].data, own.data);
    }

    /// A device stopped while a checkpoint ran in the background (redb never took the
    /// full log's groups) boots from redb, the full log and the other one.
    #[test]
    fn a_checkpoint_interrupted_in_the_background_loses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let groups = many_groups(400);
        let (mut s, _) = Storage::open_with_log(dir.path(), DeviceId(1), 4096).unwrap();
        let mut done = 0;
        // A first checkpoint reaches redb.
        while s.checkpoints() < 1 {
            s.commit(groups[done].clone()).unwrap();
            done += 1;
        }
        // The next one never does, as if the device stopped before redb committed it;
        // a few groups follow in the other log.
        s.lose_checkpoints = true;
        while s.checkpoints() < 2 {
            s.commit(groups[done].clone()).unwrap();
            done += 1;
        }
        for _ in 0..5 {
            s.commit(groups[done].clone()).unwrap();
            done += 1;
        }
        drop(s);
        let (_s, state) = Storage::open_with_log(dir.path(), DeviceId(1), 4096).unwrap();
        assert_eq!(state, applied(&groups[..done]));
    }

    /// A format-5 directory (whole records in the chunk table, no rows) opens with the
    /// same state and is rewritten as rows at once.
    #[test]
    fn a_format_5_directory_is_upgraded_to_rows() {
        let dir = tempfile::tempdir().unwrap();
        let big = chunk_with_registers(50);
        let groups = vec![vec![PersistOp::PutChunk(Box::new(big))]];
        {
            let (mut s, _) = Storage::open(dir.path(), DeviceId(1)).unwrap();
            s.write_redb(&groups[0], 0).unwrap();
        }
        {
            let db = Database::create(dir.path().join("tenure.redb")).unwrap();
            let tx = db.begin_write().unwrap();
            tx.delete_table(ROWS).unwrap();
            tx.open_table(META).unwrap().insert(KEY_FORMAT, 5).unwrap();
            tx.commit().unwrap();
        }
        let (s, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
        assert_eq!(state, applied(&groups));
        assert!(
            s.rows_written() >= 50,
            "rewritten as rows: {}",
            s.rows_written()
        );
        drop(s);
        let (s, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
        assert_eq!(state, applied(&groups));
        assert_eq!(s.rows_written(), 0, "nothing left to upgrade");
    }

    #[test]
    fn empty_batch_is_a_no_op() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, _) = Storage::open(dir.path(), DeviceId(1)).unwrap();
        s.commit(Vec::new()).unwrap();
        assert_eq!(s.load().unwrap(), DevicePersist::default());
    }

    /// Groups of deltas and records over several chunks, as a serving device makes them.
    fn many_groups(n: u64) -> Vec<Vec<PersistOp>> {
        let mut groups = vec![vec![
            PersistOp::PutChunk(Box::new(chunk(0, 1))),
            PersistOp::PutChunk(Box::new(chunk(1, 1))),
            PersistOp::SetNextSerial(8),
        ]];
        for i in 1..=n {
            let mut g = vec![accept(0, i, i - 1), accept(1, i, i - 1)];
            if i % 7 == 0 {
                g.push(PersistOp::PutChunk(Box::new(chunk(1, 1 + i))));
            }
            groups.push(g);
        }
        groups
    }

    fn applied(groups: &[Vec<PersistOp>]) -> DevicePersist {
        let mut expected = DevicePersist::default();
        for op in groups.iter().flatten() {
            expected.apply(op);
        }
        expected
    }

    #[test]
    fn logged_groups_survive_a_crash_before_any_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let groups = many_groups(20);
        {
            let (mut s, _) = Storage::open(dir.path(), DeviceId(1)).unwrap();
            for g in &groups {
                s.commit(g.clone()).unwrap();
            }
            assert_eq!(s.checkpoints(), 0, "all of it is in the log");
            // Dropped without any flush: what a crash leaves.
        }
        let (s, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
        assert_eq!(state, applied(&groups));
        assert_eq!(s.checkpoints(), 1, "open moved the log into redb");
        // And once more, now from redb alone.
        drop(s);
        let (_s, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
        assert_eq!(state, applied(&groups));
    }

    #[test]
    fn recorded_snapshots_survive_reopen_through_the_log_and_redb() {
        use tenure_core::snapshot::SnapshotId;
        let id = |serial| SnapshotId {
            initiator: DeviceId(2),
            serial,
        };
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut s, _) = Storage::open(dir.path(), DeviceId(1)).unwrap();
            s.commit(vec![PersistOp::SetSnapshots(vec![id(1)])])
                .unwrap();
            s.commit(vec![PersistOp::SetSnapshots(vec![id(1), id(2)])])
                .unwrap();
        }
        // From the log (open checkpoints it), then from redb alone.
        for _ in 0..2 {
            let (_s, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
            assert_eq!(state.snapshots, vec![id(1), id(2)]);
        }
    }

    #[test]
    fn a_full_log_is_checkpointed_and_reopen_at_any_point_gives_the_state() {
        let dir = tempfile::tempdir().unwrap();
        let groups = many_groups(60);
        let (mut s, _) = Storage::open_with_log(dir.path(), DeviceId(1), 2048).unwrap();
        for (i, g) in groups.iter().enumerate() {
            s.commit(g.clone()).unwrap();
            if i % 9 == 4 {
                drop(s);
                let (s2, state) = Storage::open_with_log(dir.path(), DeviceId(1), 2048).unwrap();
                assert_eq!(state, applied(&groups[..=i]), "after group {i}");
                s = s2;
            }
        }
        assert!(s.checkpoints() > 0, "a 2 KiB log fills up");
        drop(s);
        let (_s, state) = Storage::open_with_log(dir.path(), DeviceId(1), 2048).unwrap();
        assert_eq!(state, applied(&groups));
    }

    #[test]
    fn a_group_larger_than_the_log_goes_straight_to_redb() {
        let dir = tempfile::tempdir().unwrap();
        let groups = many_groups(3);
        let big: Vec<PersistOp> = groups.concat();
        let (mut s, _) = Storage::open_with_log(dir.path(), DeviceId(1), 64).unwrap();
        s.commit(big.clone()).unwrap();
        assert_eq!(s.checkpoints(), 1);
        drop(s);
        let (_s, state) = Storage::open_with_log(dir.path(), DeviceId(1), 64).unwrap();
        assert_eq!(state, applied(&[big]));
    }

    #[test]
    fn a_torn_last_record_loses_only_its_own_group() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let groups = many_groups(5);
        {
            let (mut s, _) = Storage::open(dir.path(), DeviceId(1)).unwrap();
            for g in &groups {
                s.commit(g.clone()).unwrap();
            }
        }
        // The crash hit the last record's write: its tail never reached the disk.
        let wal = dir.path().join("tenure.wal");
        let last = postcard::to_stdvec(groups.last().unwrap()).unwrap().len();
        let end: usize = groups
            .iter()
            .map(|g| crate::wal::HEADER + postcard::to_stdvec(g).unwrap().len())
            .sum();
        let f = std::fs::OpenOptions::new().write(true).open(&wal).unwrap();
        f.write_all_at(&vec![0u8; last / 2], (end - last / 2) as u64)
            .unwrap();
        let (_s, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
        assert_eq!(state, applied(&groups[..groups.len() - 1]));
    }

    fn lookup_entry(key: &str, stamp: u64, value: Option<&[u8]>) -> tenure_core::lookup::Entry {
        use tenure_core::lookup::{Durability, EntryVersion, IntervalRange};
        let interval = std::time::Duration::from_secs(300);
        tenure_core::lookup::Entry {
            key: key.to_string(),
            value: value.map(|v| v.to_vec()),
            version: EntryVersion { stamp, provider: 7 },
            interval,
            durability: Durability::Persistent,
            adapt: IntervalRange::fixed(interval),
            deadline: Instant(stamp + 1_000_000),
            refreshed: Instant(stamp),
            changed: Instant(stamp),
            stable: 0,
        }
    }

    /// Persistent lookup entries and tombstones (seed 003) survive a reopen from the log
    /// and from redb after a checkpoint; a removal removes.
    #[test]
    fn lookup_entries_survive_reopen_through_the_log_and_checkpoints() {
        let dir = tempfile::tempdir().unwrap();
        let put = |k: &str, stamp, v: Option<&[u8]>| {
            PersistOp::LookupPut(Box::new(lookup_entry(k, stamp, v)))
        };
        let groups = vec![
            vec![
                put("/svc/a", 10, Some(b"one")),
                put("/svc/b", 11, Some(b"two")),
            ],
            vec![put("/svc/a", 12, Some(b"three")), put("/svc/c", 13, None)],
            vec![PersistOp::LookupRemove("/svc/b".into())],
        ];
        {
            let (mut s, _) = Storage::open(dir.path(), DeviceId(1)).unwrap();
            for g in &groups {
                s.commit(g.clone()).unwrap();
            }
        }
        let (s, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
        assert_eq!(state, applied(&groups));
        assert_eq!(state.lookup.len(), 2);
        assert_eq!(state.lookup["/svc/a"].value.as_deref(), Some(&b"three"[..]));
        assert_eq!(state.lookup["/svc/c"].value, None, "a tombstone is kept");
        assert_eq!(s.checkpoints(), 1, "open moved the log into redb");
        drop(s);
        // From redb alone.
        let (_s, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
        assert_eq!(state, applied(&groups));
        // Through a small log that checkpoints on its own.
        let dir = tempfile::tempdir().unwrap();
        let more: Vec<Vec<PersistOp>> = (0..20)
            .map(|i| vec![put(&format!("/svc/n{}", i % 5), 100 + i, Some(b"x"))])
            .chain([vec![PersistOp::LookupRemove("/svc/n0".into())]])
            .collect();
        let (mut s, _) = Storage::open_with_log(dir.path(), DeviceId(1), 256).unwrap();
        for g in &more {
            s.commit(g.clone()).unwrap();
        }
        assert!(s.checkpoints() > 0, "a 256-byte log fills up");
        drop(s);
        let (_s, state) = Storage::open_with_log(dir.path(), DeviceId(1), 256).unwrap();
        assert_eq!(state, applied(&more));
        assert_eq!(state.lookup.len(), 4);
        assert!(!state.lookup.contains_key("/svc/n0"));
    }

    fn block(upload: u128, index: u32) -> BlockId {
        BlockId {
            upload: Uuid(upload),
            part: 0,
            generation: 0,
            index,
        }
    }

    fn block_data(upload: u128, index: u32, len: usize) -> Bytes {
        Bytes::from(vec![(upload as u8) ^ (index as u8).wrapping_mul(31); len])
    }

    fn put_block(serial: u64, upload: u128, index: u32, len: usize) -> PersistOp {
        PersistOp::BlockPut {
            chunk: ChunkId {
                device: DeviceId(1),
                serial,
            },
            id: block(upload, index),
            data: block_data(upload, index, len),
        }
    }

    /// Object blocks (seed 001) survive a reopen from the log, from redb after a
    /// checkpoint, and through a small log that checkpoints on its own; deletions delete.
    #[test]
    fn blocks_survive_reopen_through_the_log_and_checkpoints() {
        let c0 = ChunkId {
            device: DeviceId(1),
            serial: 0,
        };
        let groups = vec![
            vec![
                PersistOp::PutChunk(Box::new(chunk(0, 1))),
                put_block(0, 7, 0, 1000),
                put_block(0, 7, 1, 10),
            ],
            vec![accept(0, 1, 0), put_block(0, 8, 0, 5000)],
            vec![PersistOp::BlockDelete {
                chunk: c0,
                ids: vec![block(7, 1), block(99, 0)],
            }],
            // A block put before its chunk's whole record in one group is kept.
            vec![
                put_block(0, 9, 0, 300),
                PersistOp::PutChunk(Box::new(chunk(0, 2))),
            ],
        ];
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut s, _) = Storage::open(dir.path(), DeviceId(1)).unwrap();
            for g in &groups {
                s.commit(g.clone()).unwrap();
            }
            assert_eq!(s.checkpoints(), 0, "all of it is in the log");
        }
        let (s, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
        assert_eq!(state, applied(&groups));
        let b = &state.blocks[&c0];
        assert_eq!(b.len(), 3);
        assert_eq!(b[&block(7, 0)], block_data(7, 0, 1000));
        assert!(!b.contains_key(&block(7, 1)), "deleted");
        assert_eq!(b[&block(9, 0)].len(), 300);
        assert_eq!(s.checkpoints(), 1, "open moved the log into redb");
        drop(s);
        let (_s, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
        assert_eq!(state, applied(&groups), "from redb alone");

        // A small log: blocks of 2 KiB fill it every few groups, and checkpoints write
        // them to redb.
        let dir = tempfile::tempdir().unwrap();
        let mut more = vec![vec![PersistOp::PutChunk(Box::new(chunk(0, 1)))]];
        for i in 0..30u32 {
            let mut g = vec![put_block(0, 1, i, 2048)];
            if i % 4 == 3 {
                g.push(PersistOp::BlockDelete {
                    chunk: c0,
                    ids: vec![block(1, i - 2)],
                });
            }
            more.push(g);
        }
        let (mut s, _) = Storage::open_with_log(dir.path(), DeviceId(1), 8192).unwrap();
        for (i, g) in more.iter().enumerate() {
            s.commit(g.clone()).unwrap();
            if i % 11 == 5 {
                drop(s);
                let (s2, state) = Storage::open_with_log(dir.path(), DeviceId(1), 8192).unwrap();
                assert_eq!(state, applied(&more[..=i]), "after group {i}");
                s = s2;
            }
        }
        drop(s);
        let (_s, state) = Storage::open_with_log(dir.path(), DeviceId(1), 8192).unwrap();
        assert_eq!(state, applied(&more));
        assert_eq!(state.blocks[&c0].len(), 30 - 7);
    }

    /// A group of block data larger than the whole log (a SafeTalk batch of several
    /// 1 MiB blocks) goes straight into redb, and reads back whole.
    #[test]
    fn a_group_of_blocks_larger_than_the_log_goes_straight_to_redb() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, _) = Storage::open_with_log(dir.path(), DeviceId(1), 1 << 20).unwrap();
        let small = vec![PersistOp::PutChunk(Box::new(chunk(0, 1))), accept(0, 1, 0)];
        s.commit(small.clone()).unwrap();
        assert_eq!(s.checkpoints(), 0);
        let big: Vec<PersistOp> = (0..3).map(|i| put_block(0, 5, i, 1 << 20)).collect();
        s.commit(big.clone()).unwrap();
        assert_eq!(s.checkpoints(), 2, "the log emptied first, then the group");
        drop(s);
        let (_s, state) = Storage::open_with_log(dir.path(), DeviceId(1), 1 << 20).unwrap();
        let all = [small, big];
        assert_eq!(state, applied(&all));
        let c0 = ChunkId {
            device: DeviceId(1),
            serial: 0,
        };
        assert_eq!(state.blocks[&c0][&block(5, 2)], block_data(5, 2, 1 << 20));
    }

    /// Removing a chunk drops its blocks (and only its), in the log and in redb.
    #[test]
    fn remove_chunk_drops_its_blocks() {
        let c = |serial| ChunkId {
            device: DeviceId(1),
            serial,
        };
        let setup = vec![
            PersistOp::PutChunk(Box::new(chunk(0, 1))),
            PersistOp::PutChunk(Box::new(chunk(1, 1))),
            put_block(0, 3, 0, 100),
            put_block(0, 3, 1, 100),
            put_block(1, 3, 0, 100),
        ];
        for through_redb in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            {
                let (mut s, _) = Storage::open(dir.path(), DeviceId(1)).unwrap();
                s.commit(setup.clone()).unwrap();
                if through_redb {
                    // Reopen: the blocks are checkpointed into redb before the removal.
                    drop(s);
                    s = Storage::open(dir.path(), DeviceId(1)).unwrap().0;
                }
                s.commit(vec![PersistOp::RemoveChunk(c(0))]).unwrap();
            }
            let (s, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
            assert!(
                !state.blocks.contains_key(&c(0)),
                "through redb: {through_redb}"
            );
            assert_eq!(state.blocks[&c(1)].len(), 1);
            assert!(!state.chunks.contains_key(&c(0)));
            drop(s);
            let (_s, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
            assert!(!state.blocks.contains_key(&c(0)));
            assert_eq!(state.blocks[&c(1)].len(), 1);
        }
    }

    /// A format-4 directory (no block table) opens, and takes blocks from then on.
    #[test]
    fn a_format_4_directory_is_upgraded() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut s, _) = Storage::open(dir.path(), DeviceId(1)).unwrap();
            s.commit(vec![PersistOp::PutChunk(Box::new(chunk(0, 1)))])
                .unwrap();
        }
        // Make it look like format 4: no block table, version 4.
        {
            let db = Database::create(dir.path().join("tenure.redb")).unwrap();
            let tx = db.begin_write().unwrap();
            tx.delete_table(BLOCKS).unwrap();
            tx.open_table(META).unwrap().insert(KEY_FORMAT, 4).unwrap();
            tx.commit().unwrap();
        }
        let (mut s, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
        assert_eq!(state.chunks.len(), 1);
        assert!(state.blocks.is_empty());
        s.commit(vec![put_block(0, 1, 0, 10)]).unwrap();
        drop(s);
        let (s, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
        assert_eq!(state.blocks.values().map(|b| b.len()).sum::<usize>(), 1);
        drop(s);
        let (format, _) =
            read_meta(&Database::create(dir.path().join("tenure.redb")).unwrap()).unwrap();
        assert_eq!(format, Some(FORMAT_VERSION));
    }

    #[test]
    fn another_devices_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        drop(Storage::open(dir.path(), DeviceId(1)).unwrap());
        let err = Storage::open(dir.path(), DeviceId(2)).unwrap_err();
        assert!(matches!(
            err,
            StorageError::WrongDevice {
                found: 1,
                expected: 2
            }
        ));
    }
}
