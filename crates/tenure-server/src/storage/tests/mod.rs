//! Storage tests: chunk records, deltas, checkpoints and format upgrades; the log and
//! the lookup and block tables in their own files.

use super::schema::{BLOCKS, KEY_FORMAT, META, ROWS};
use super::*;
use tenure_core::ids::Epoch;
use tenure_core::io::ChunkPersist;
use tenure_core::objects::{BlockId, Bytes, Uuid};
use tenure_core::{ClusterConfig, Device, DeviceConfig, Instant, Output};

mod log;
mod lookup_and_blocks;

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

/// Chunk 0 with 5,000 registers, then 300 deltas of which every 7th carries the chunk's
/// tables (as a serving chunk's ACCEPT does every `SHARE_TABLES_EVERY` deltas): the
/// groups, the chunk as it ends, and its registers after delta 294 (the last handed).
fn handed_every_seventh() -> (Vec<Vec<PersistOp>>, ChunkPersist, Registers) {
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
    (groups, own, at_294.expect("built"))
}

const C0: ChunkId = ChunkId {
    device: DeviceId(1),
    serial: 0,
};

/// A chunk's test registers.
type Registers = imbl::OrdMap<u64, (tenure_core::ids::Version, u64)>;

fn registers(s: &Storage) -> Registers {
    s.state.chunks[&C0].data.table.registers.entries.clone()
}

/// A delta carrying its chunk's tables leaves the storage's copy sharing the chunk's
/// maps, not a second copy of them; what the log replays after a restart is the same.
#[test]
fn a_delta_with_the_chunk_tables_shares_them_and_replays_alike() {
    let dir = tempfile::tempdir().unwrap();
    let (groups, own, at_294) = handed_every_seventh();
    let (mut s, _) = Storage::open_with_log(dir.path(), DeviceId(1), 1 << 20).unwrap();
    for g in &groups[..=294] {
        s.commit(g.clone()).unwrap();
    }
    assert!(
        registers(&s).ptr_eq(&at_294),
        "the storage holds a copy of its own"
    );
    // Deltas without the tables are deferred until the record is read, then applied
    // (copying only what they change).
    for g in &groups[295..] {
        s.commit(g.clone()).unwrap();
    }
    assert!(registers(&s).ptr_eq(&at_294), "applied before it was read");
    assert_eq!(
        s.deferred[&C0].ops.len(),
        6,
        "the changes deltas 295-300 confirm"
    );
    s.catch_up(C0);
    assert!(!registers(&s).ptr_eq(&at_294));
    assert_eq!(s.state.chunks[&C0].data, own.data);
    drop(s);
    let (_s, state) = Storage::open_with_log(dir.path(), DeviceId(1), 1 << 20).unwrap();
    assert_eq!(state, applied(&groups));
    assert_eq!(state.chunks[&C0].data, own.data);
}

/// A checkpoint writes a chunk's deferred changes as they are — the rows of the tables
/// the chunk last handed, and the changes since as one delta — without applying them;
/// the next open applies the delta after the rows and has the chunk's state. A later
/// checkpoint of a chunk with nothing deferred drops that delta.
#[test]
fn a_checkpoint_writes_deferred_changes_as_a_delta_and_an_open_applies_them() {
    let dir = tempfile::tempdir().unwrap();
    let (groups, own, at_294) = handed_every_seventh();
    let (mut s, _) = Storage::open_with_log(dir.path(), DeviceId(1), 1 << 20).unwrap();
    for g in &groups {
        s.commit(g.clone()).unwrap();
    }
    assert_eq!(s.deferred[&C0].ops.len(), 6);
    s.checkpoint(false).unwrap();
    assert!(
        registers(&s).ptr_eq(&at_294),
        "the checkpoint applied the deferred changes"
    );
    assert_eq!(s.next_delta.get(&(1, 0)), Some(&1), "one delta in redb");
    drop(s);
    // Nothing left in the log: the state comes from redb's rows and its delta.
    let (mut s, state) = Storage::open_with_log(dir.path(), DeviceId(1), 1 << 20).unwrap();
    assert_eq!(state, applied(&groups));
    assert_eq!(state.chunks[&C0].data, own.data);
    // The open wrote the chunk again as rows: its delta is gone, and stays gone.
    assert_eq!(s.next_delta.get(&(1, 0)), None);
    s.checkpoint(false).unwrap();
    drop(s);
    let (s, state) = Storage::open_with_log(dir.path(), DeviceId(1), 1 << 20).unwrap();
    assert_eq!(state.chunks[&C0].data, own.data);
    assert_eq!(s.next_delta.get(&(1, 0)), None);
}

/// A chunk whose deferred changes reached [`Deferred::CATCH_UP_FROM`] is caught up by
/// the checkpoint that writes it, and written without a delta.
#[test]
fn a_long_deferred_list_is_applied_by_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let own = chunk_with_registers(10);
    let (mut s, _) = Storage::open_with_log(dir.path(), DeviceId(1), 1 << 24).unwrap();
    s.commit(vec![PersistOp::PutChunk(Box::new(own))]).unwrap();
    let n = super::Deferred::CATCH_UP_FROM as u64;
    for i in 1..=n + 1 {
        s.commit(vec![accept(0, i, i - 1)]).unwrap();
    }
    assert_eq!(s.deferred[&C0].ops.len() as u64, n);
    s.checkpoint(false).unwrap();
    assert!(!s.deferred.contains_key(&C0));
    assert_eq!(s.next_delta.get(&(1, 0)), None);
    let expect = s.state.clone();
    drop(s);
    let (_s, state) = Storage::open_with_log(dir.path(), DeviceId(1), 1 << 24).unwrap();
    assert_eq!(state, expect);
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

/// A serving device's directory rewritten as format 5 (whole records, no rows, nothing
/// in the logs) opens with the same state, says it was upgraded, and is rows again.
#[test]
fn a_directory_rewritten_as_format_5_is_upgraded_back_with_the_same_state() {
    let dir = tempfile::tempdir().unwrap();
    let groups = many_groups(200);
    {
        let (mut s, _) = Storage::open_with_log(dir.path(), DeviceId(1), 4096).unwrap();
        for g in &groups {
            s.commit(g.clone()).unwrap();
        }
        assert!(s.checkpoints() > 0);
    }
    super::rewrite_as_format_5(dir.path(), DeviceId(1)).unwrap();
    {
        let db = Database::create(dir.path().join("tenure.redb")).unwrap();
        let (format, _) = super::schema::read_meta(&db).unwrap();
        assert_eq!(format, Some(5));
    }
    let (s, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
    assert_eq!(state, applied(&groups));
    assert_eq!(s.upgraded_from(), Some(5));
    assert!(s.rows_written() > 0, "rewritten as rows");
    drop(s);
    let (s, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
    assert_eq!(state, applied(&groups));
    assert_eq!(s.upgraded_from(), None);
}

/// Chunk 0 at epoch 1 holding `n` active objects of blocks, and `inline` small ones.
pub(crate) fn chunk_with_objects(n: u64, inline: u64) -> ChunkPersist {
    use tenure_core::objects::{BlockId, BlockInfo, Bytes, Manifest, ManifestState, Uuid};
    let mut c = chunk(0, 1);
    let objects = &mut c.data.table.objects;
    for k in 0..n + inline {
        let uuid = Uuid(k as u128 + 1);
        let m = if k < n {
            let block = BlockId {
                upload: uuid,
                ..Default::default()
            };
            let mut m =
                Manifest::writing(uuid, vec![(block, BlockInfo::of(b"x"))], Default::default());
            m.remaining_write.clear();
            m.state = ManifestState::Active;
            m
        } else {
            Manifest::inline(
                uuid,
                Bytes::from_static(b"small"),
                k + 1,
                Default::default(),
            )
        };
        let mut dict = tenure_core::objects::manifest::Dict::default();
        dict.insert(uuid, m);
        objects.keys.insert(format!("/o/{k}").into(), dict.into());
    }
    c
}

/// A directory of the build before inline object values (format 6) opens with the same
/// state, says it was upgraded, and is of this format afterwards; one holding an inline
/// value cannot be written as format 6 at all.
#[test]
fn a_directory_rewritten_as_format_6_is_upgraded_with_the_same_state() {
    let dir = tempfile::tempdir().unwrap();
    let groups = vec![vec![PersistOp::PutChunk(Box::new(chunk_with_objects(
        20, 0,
    )))]];
    {
        let (mut s, _) = Storage::open(dir.path(), DeviceId(1)).unwrap();
        s.commit(groups[0].clone()).unwrap();
    }
    super::rewrite_as_format_6(dir.path(), DeviceId(1)).unwrap();
    {
        let db = Database::create(dir.path().join("tenure.redb")).unwrap();
        assert_eq!(super::schema::read_meta(&db).unwrap().0, Some(6));
    }
    let (s, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
    assert_eq!(state, applied(&groups));
    assert_eq!(s.upgraded_from(), Some(6));
    drop(s);
    {
        let db = Database::create(dir.path().join("tenure.redb")).unwrap();
        assert_eq!(
            super::schema::read_meta(&db).unwrap().0,
            Some(FORMAT_VERSION)
        );
    }
    let (s, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
    assert_eq!(state, applied(&groups));
    assert_eq!(s.upgraded_from(), None);
    drop(s);

    let dir = tempfile::tempdir().unwrap();
    let groups = vec![vec![PersistOp::PutChunk(Box::new(chunk_with_objects(
        2, 3,
    )))]];
    {
        let (mut s, _) = Storage::open(dir.path(), DeviceId(1)).unwrap();
        s.commit(groups[0].clone()).unwrap();
    }
    let e = super::rewrite_as_format_6(dir.path(), DeviceId(1)).unwrap_err();
    assert!(
        matches!(e, StorageError::Row { .. } | StorageError::Encode(_)),
        "{e}"
    );
    let (_, state) = Storage::open(dir.path(), DeviceId(1)).unwrap();
    assert_eq!(state, applied(&groups), "inline values kept in format 7");
}

/// A directory of a newer format than this build knows is refused at open with the
/// format it has, and left as it is.
#[test]
fn a_newer_format_is_refused_and_left_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut s, _) = Storage::open(dir.path(), DeviceId(1)).unwrap();
        s.commit(many_groups(3).remove(0)).unwrap();
    }
    let newer = FORMAT_VERSION + 1;
    {
        let db = Database::create(dir.path().join("tenure.redb")).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(META)
            .unwrap()
            .insert(KEY_FORMAT, newer)
            .unwrap();
        tx.commit().unwrap();
    }
    let e = Storage::open(dir.path(), DeviceId(1)).unwrap_err();
    assert!(
        matches!(e, StorageError::Format { found } if found == newer),
        "{e}"
    );
    assert!(
        e.to_string().contains(&format!("format version {newer}")),
        "{e}"
    );
    let db = Database::create(dir.path().join("tenure.redb")).unwrap();
    assert_eq!(super::schema::read_meta(&db).unwrap().0, Some(newer));
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

/// A record's head (`PutChunkHead`) replaces the record but its rows, which stay those
/// of the durable record, deltas included; it encodes in a fraction of the whole record,
/// and the state reads back the same after reopening, from the log and from a
/// checkpoint.
#[test]
fn a_record_head_keeps_the_rows_and_is_small() {
    let big = chunk_with_registers(5_000);
    let mut groups = vec![vec![PersistOp::PutChunk(Box::new(big.clone()))]];
    let mut own = big;
    for i in 1..=5 {
        let op = accept(0, i, i - 1);
        op.apply_delta(&mut own);
        groups.push(vec![op]);
    }
    own.epoch = Epoch(7);
    own.lease_mgr = Some(DeviceId(3));
    let head = PersistOp::PutChunkHead(Box::new(own.head()));
    let whole = postcard::to_stdvec(&PersistOp::PutChunk(Box::new(own.clone()))).unwrap();
    let small = postcard::to_stdvec(&head).unwrap();
    assert!(
        small.len() * 50 < whole.len(),
        "head {} bytes, whole {}",
        small.len(),
        whole.len()
    );
    groups.push(vec![head]);
    groups.push(vec![accept(0, 6, 5)]);
    let expected = applied(&groups);
    let rec = &expected.chunks[&own.id];
    assert_eq!((rec.epoch, rec.lease_mgr), (Epoch(7), Some(DeviceId(3))));
    assert_eq!(rec.data.table.registers.entries.len(), 5_000);
    for log in [1 << 16, 1 << 24] {
        // A small log checkpoints on the way; a large one replays everything.
        let dir = tempfile::tempdir().unwrap();
        let (mut s, _) = Storage::open_with_log(dir.path(), DeviceId(1), log).unwrap();
        for g in &groups {
            s.commit(g.clone()).unwrap();
        }
        drop(s);
        let (_s, state) = Storage::open_with_log(dir.path(), DeviceId(1), log).unwrap();
        assert_eq!(state, expected, "log of {log} bytes");
    }
}
