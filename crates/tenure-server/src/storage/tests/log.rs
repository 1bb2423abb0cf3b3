//! The write-ahead log in front of redb: crashes before a checkpoint, full logs, groups
//! larger than the log, torn records.

use super::*;

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
