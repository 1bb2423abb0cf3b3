//! Durable storage of one device's persistent state on redb.
//!
//! The core's persistent state is a [`DevicePersist`]: the chunk serial counter and one
//! [`ChunkPersist`] record per chunk. Each chunk is stored under its [`ChunkId`] as a
//! postcard-encoded record, so a `PutChunk` rewrites one chunk and nothing else. The
//! serial counter and a format version live in a small `meta` table.
//!
//! [`Storage::commit`] applies a whole group of [`PersistOp`]s in ONE redb write
//! transaction committed with [`Durability::Immediate`]: one fsync for every persist the
//! driver gathered while the previous commit ran (group commit). redb commits are atomic
//! and crash-safe (a torn commit is rolled back at the next open), so after a crash the
//! device boots from exactly the last committed group, which every acknowledgement that
//! left the device is covered by.
//!
//! redb was chosen over fjall because a commit is durable when `commit()` returns (no
//! separate `persist(SyncAll)` step to forget), it is pure Rust, and a single file per
//! device keeps data directories simple; see DESIGN §11.

use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tenure_core::ids::{ChunkId, DeviceId};
use tenure_core::io::{ChunkPersist, DevicePersist, PersistOp};

/// Chunk records: `(device, serial)` → postcard(`ChunkPersist`).
const CHUNKS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("chunks");
/// Small scalars: format version, serial counter, owning device.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// On-disk format version written by this code.
pub const FORMAT_VERSION: u64 = 1;

const KEY_FORMAT: &str = "format_version";
const KEY_NEXT_SERIAL: &str = "next_serial";
const KEY_DEVICE: &str = "device";

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
    /// A record could not be encoded.
    #[error("encoding a chunk record: {0}")]
    Encode(postcard::Error),
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
    /// Creating the data directory failed.
    #[error("data directory {path}: {source}")]
    Io {
        /// Path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// One device's durable state.
pub struct Storage {
    db: Database,
    path: PathBuf,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage").field("path", &self.path).finish()
    }
}

impl Storage {
    /// Open (or create) the database in `dir` for `device` and load its persistent state.
    pub fn open(dir: &Path, device: DeviceId) -> Result<(Storage, DevicePersist), StorageError> {
        std::fs::create_dir_all(dir).map_err(|source| StorageError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = dir.join("tenure.redb");
        let db = Database::create(&path).map_err(redb::Error::from)?;
        let storage = Storage { db, path };
        storage.init(device)?;
        let state = storage.load()?;
        Ok((storage, state))
    }

    /// Path of the database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn init(&self, device: DeviceId) -> Result<(), StorageError> {
        let (format, owner) = self.read_meta()?;
        match format {
            Some(v) if v != FORMAT_VERSION => return Err(StorageError::Format { found: v }),
            _ => {}
        }
        if let Some(found) = owner
            && found != device.0
        {
            return Err(StorageError::WrongDevice {
                found,
                expected: device.0,
            });
        }
        if format.is_none() || owner.is_none() {
            self.write_meta(device)?;
        }
        Ok(())
    }

    fn read_meta(&self) -> Result<(Option<u64>, Option<u64>), redb::Error> {
        let tx = self.db.begin_read()?;
        let meta = match tx.open_table(META) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok((None, None)),
            Err(e) => return Err(e.into()),
        };
        let format = meta.get(KEY_FORMAT)?.map(|g| g.value());
        let owner = meta.get(KEY_DEVICE)?.map(|g| g.value());
        Ok((format, owner))
    }

    fn write_meta(&self, device: DeviceId) -> Result<(), redb::Error> {
        let mut tx = self.db.begin_write()?;
        tx.set_durability(Durability::Immediate)?;
        {
            let mut meta = tx.open_table(META)?;
            meta.insert(KEY_FORMAT, FORMAT_VERSION)?;
            meta.insert(KEY_DEVICE, device.0)?;
            tx.open_table(CHUNKS)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Read the whole persistent state.
    pub fn load(&self) -> Result<DevicePersist, StorageError> {
        let raw = self.load_raw()?;
        let mut state = DevicePersist {
            next_serial: raw.0,
            ..Default::default()
        };
        for (chunk, bytes) in raw.1 {
            let rec: ChunkPersist = postcard::from_bytes(&bytes)
                .map_err(|source| StorageError::Decode { chunk, source })?;
            state.chunks.insert(chunk, rec);
        }
        Ok(state)
    }

    #[allow(clippy::type_complexity)]
    fn load_raw(&self) -> Result<(u64, Vec<(ChunkId, Vec<u8>)>), redb::Error> {
        let tx = self.db.begin_read()?;
        let meta = tx.open_table(META)?;
        let next_serial = meta.get(KEY_NEXT_SERIAL)?.map(|g| g.value()).unwrap_or(0);
        let chunks = tx.open_table(CHUNKS)?;
        let mut out = Vec::new();
        for row in chunks.iter()? {
            let (k, v) = row?;
            let (device, serial) = k.value();
            out.push((
                ChunkId {
                    device: DeviceId(device),
                    serial,
                },
                v.value().to_vec(),
            ));
        }
        Ok((next_serial, out))
    }

    /// Make a batch of changes durable in one write transaction (one fsync). Returns after
    /// the commit is durable. An empty batch does nothing.
    pub fn commit(&self, ops: &[PersistOp]) -> Result<(), StorageError> {
        if ops.is_empty() {
            return Ok(());
        }
        // Only the last change of each record in the batch matters (one transaction
        // applies them all): skip the encoding and writing of superseded ones.
        let key = |op: &PersistOp| match op {
            PersistOp::PutChunk(c) => Some((c.id.device.0, c.id.serial)),
            PersistOp::RemoveChunk(id) => Some((id.device.0, id.serial)),
            PersistOp::SetNextSerial(_) => None,
        };
        let mut last: HashMap<Option<(u64, u64)>, usize> = HashMap::with_capacity(ops.len());
        for (i, op) in ops.iter().enumerate() {
            last.insert(key(op), i);
        }
        // Encode first so an encoding failure leaves the database untouched.
        let mut encoded = Vec::with_capacity(last.len());
        for (i, op) in ops.iter().enumerate() {
            if last.get(&key(op)) != Some(&i) {
                continue;
            }
            encoded.push(match op {
                PersistOp::PutChunk(c) => Encoded::Put(
                    (c.id.device.0, c.id.serial),
                    postcard::to_stdvec(&**c).map_err(StorageError::Encode)?,
                ),
                PersistOp::RemoveChunk(id) => Encoded::Remove((id.device.0, id.serial)),
                PersistOp::SetNextSerial(n) => Encoded::Serial(*n),
            });
        }
        self.commit_encoded(&encoded)?;
        Ok(())
    }

    fn commit_encoded(&self, ops: &[Encoded]) -> Result<(), redb::Error> {
        let mut tx = self.db.begin_write()?;
        tx.set_durability(Durability::Immediate)?;
        {
            let mut chunks = tx.open_table(CHUNKS)?;
            let mut meta = tx.open_table(META)?;
            for op in ops {
                match op {
                    Encoded::Put(k, v) => {
                        chunks.insert(*k, v.as_slice())?;
                    }
                    Encoded::Remove(k) => {
                        chunks.remove(*k)?;
                    }
                    Encoded::Serial(n) => {
                        meta.insert(KEY_NEXT_SERIAL, *n)?;
                    }
                }
            }
        }
        tx.commit()?;
        Ok(())
    }
}

enum Encoded {
    Put((u64, u64), Vec<u8>),
    Remove((u64, u64)),
    Serial(u64),
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
            let (s, _) = Storage::open(dir.path(), DeviceId(1)).unwrap();
            s.commit(&ops[..3]).unwrap();
            s.commit(&ops[3..]).unwrap();
        }
        let (_s, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
        assert_eq!(state, expected);
        assert_eq!(state.next_serial, 64);
        assert_eq!(state.chunks.len(), 1);
        assert_eq!(state.chunks.values().next().unwrap().epoch, Epoch(2));
    }

    #[test]
    fn empty_batch_is_a_no_op() {
        let dir = tempfile::tempdir().unwrap();
        let (s, _) = Storage::open(dir.path(), DeviceId(1)).unwrap();
        s.commit(&[]).unwrap();
        assert_eq!(s.load().unwrap(), DevicePersist::default());
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
