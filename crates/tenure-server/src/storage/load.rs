//! Reading what redb holds at open: the meta scalars, chunk heads and rows, deltas,
//! lookup entries, object blocks and cluster records, decoded into a `DevicePersist`.

use super::schema::*;
use super::{Storage, StorageError};
use redb::{ReadableDatabase, ReadableTable};
use std::collections::HashMap;
use tenure_core::election::Term;
use tenure_core::ids::{ChunkId, DeviceId};
use tenure_core::io::{ChunkPersist, DevicePersist, PersistOp};
use tenure_core::lookup::Entry;
use tenure_core::objects::{BlockId, Bytes};
use tenure_core::rows;

impl Storage {
    /// Read the whole persistent state: each chunk's last whole record with the deltas
    /// written after it applied in order.
    pub fn load(&self) -> Result<DevicePersist, StorageError> {
        Ok(self.load_with_counters()?.0)
    }

    /// [`Self::load`], with the next delta number of each chunk that has deltas and,
    /// per chunk, the tables its rows hold (before any delta).
    #[allow(clippy::type_complexity)]
    pub(super) fn load_with_counters(
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
