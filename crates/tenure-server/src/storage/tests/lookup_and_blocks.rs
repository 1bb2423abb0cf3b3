//! Lookup entries (seed 003) and object blocks (seed 001) through the log and checkpoints.

use super::*;

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
