//! The on-disk layout: redb's tables and keys, the meta scalars (format version, owner,
//! serial counter, term, log generation) and how chunk and block ids map to keys.

use super::StorageError;
use redb::{Database, Durability, ReadableDatabase, TableDefinition};
use tenure_core::ids::{ChunkId, DeviceId};
use tenure_core::objects::{BlockId, Uuid};

/// Chunk records: `(device, serial)` → postcard(`ChunkPersist`).
pub(super) const CHUNKS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("chunks");
/// Chunk deltas written after the chunk's record: `(device, serial, n)` →
/// postcard(`PersistOp::Accept`), applied in `n` order at load.
pub(super) const DELTAS: TableDefinition<(u64, u64, u64), &[u8]> =
    TableDefinition::new("chunk_deltas");
/// A chunk's tables, one row per key ([`rows`]): `(device, serial, kind byte + key)` →
/// the row's value. The chunk's record in [`CHUNKS`] holds the rest (its head).
pub(super) const ROWS: TableDefinition<(u64, u64, &[u8]), &[u8]> =
    TableDefinition::new("chunk_rows");
/// Persistent lookup entries and tombstones: key → postcard(`lookup::Entry`).
pub(super) const LOOKUP: TableDefinition<&str, &[u8]> = TableDefinition::new("lookup_entries");
/// Object blocks: `(device, serial, upload, part, generation, index)` → the block's bytes.
pub(super) const BLOCKS: TableDefinition<BlockKey, &[u8]> = TableDefinition::new("object_blocks");
/// Cluster-wide records this device keeps: `members` → postcard(`Members`).
pub(super) const CLUSTER: TableDefinition<&str, &[u8]> = TableDefinition::new("cluster");
pub(super) const KEY_MEMBERS: &str = "members";
/// `snapshots` → postcard(`Vec<SnapshotId>`): the snapshots this device recorded.
pub(super) const KEY_SNAPSHOTS: &str = "snapshots";
/// Small scalars: format version, serial counter, owning device.
pub(super) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// On-disk format version written by this code. Format 7 added inline object values and
/// format 8 sessions' child sessions, format 9 the stamp of a chunk's state
/// ([`tenure_core::generation`]); format 6 is the layout without any of them.
pub const FORMAT_VERSION: u64 = 9;

/// The layout of the values a data directory of `format` holds.
pub fn generation(format: u64) -> tenure_core::generation::Generation {
    tenure_core::generation::Generation::of(format, 7, 8, 8, 8, 9, 9, 9)
}

pub(super) const KEY_FORMAT: &str = "format_version";
pub(super) const KEY_NEXT_SERIAL: &str = "next_serial";
/// The newest coordinator term seen: its counter and its coordinator.
pub(super) const KEY_TERM_N: &str = "term_n";
pub(super) const KEY_TERM_LEADER: &str = "term_leader";
pub(super) const KEY_DEVICE: &str = "device";
/// Generation of the write-ahead log whose records follow what redb holds.
pub(super) const KEY_WAL_GENERATION: &str = "wal_generation";

pub(super) fn read_meta(db: &Database) -> Result<(Option<u64>, Option<u64>), redb::Error> {
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
/// log), 3 (no lookup table), 4 (no block table), 5 (whole records, no rows) and 6 (no
/// inline values) are this format without them: opening one rewrites it.
pub(super) fn check_meta(
    format: Option<u64>,
    owner: Option<u64>,
    device: DeviceId,
) -> Result<(), StorageError> {
    if let Some(v) = format
        && v != FORMAT_VERSION
        && !(1..FORMAT_VERSION).contains(&v)
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

/// Write the meta table (and create every table) for a directory of `format`.
pub(super) fn write_meta(db: &Database, device: DeviceId, format: u64) -> Result<(), redb::Error> {
    let mut tx = db.begin_write()?;
    tx.set_durability(Durability::Immediate)?;
    {
        let mut meta = tx.open_table(META)?;
        meta.insert(KEY_FORMAT, format)?;
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
pub(super) fn read_generation(db: &Database) -> Result<u64, redb::Error> {
    let tx = db.begin_read()?;
    let meta = tx.open_table(META)?;
    Ok(meta
        .get(KEY_WAL_GENERATION)?
        .map(|g| g.value())
        .unwrap_or(0))
}

pub(super) fn key(c: ChunkId) -> (u64, u64) {
    (c.device.0, c.serial)
}

/// A block's key: its chunk, then its id's fields in the id's order.
pub(super) type BlockKey = (u64, u64, u128, u32, u32, u32);

pub(super) fn block_key(c: ChunkId, id: BlockId) -> BlockKey {
    (
        c.device.0,
        c.serial,
        id.upload.0,
        id.part,
        id.generation,
        id.index,
    )
}

pub(super) fn from_block_key(k: BlockKey) -> (ChunkId, BlockId) {
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
pub(super) fn chunk_block_range(k: (u64, u64)) -> (BlockKey, BlockKey) {
    (
        (k.0, k.1, 0, 0, 0, 0),
        (k.0, k.1, u128::MAX, u32::MAX, u32::MAX, u32::MAX),
    )
}
