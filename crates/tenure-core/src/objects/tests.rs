//! Seed 001: one test per row of the merge table, property tests of the merge, and the
//! per-key workflow of [`ObjectTable`].

use super::manifest::*;
use super::table::*;
use super::*;
use crate::ids::{DeviceId, Epoch};
use crate::lockctl::{Acquire, LockMode, LockTable, LockTableConfig, RequestId, Wait};
use crate::time::Instant;
use proptest::prelude::*;
use std::collections::BTreeSet;

const U: Uuid = Uuid(7);

fn t(s: u64) -> Instant {
    Instant(s * 1_000_000)
}

fn bid(i: u32) -> BlockId {
    BlockId {
        upload: U,
        part: 0,
        generation: 0,
        index: i,
    }
}

fn info() -> BlockInfo {
    BlockInfo {
        len: 10,
        checksum: 1,
    }
}

fn w(remaining: &[u32], at: u64) -> Manifest {
    let mut m = Manifest::writing(U, (0..4).map(|i| (bid(i), info())).collect(), t(at));
    m.remaining_write = remaining.iter().map(|i| bid(*i)).collect();
    m
}

fn a(revision: u64) -> Manifest {
    let mut m = w(&[], 1);
    m.state = ManifestState::Active;
    m.revision = revision;
    m
}

fn p(remaining: &[u32], at: u64) -> Manifest {
    let mut m = a(3);
    m.state = ManifestState::PendingDelete;
    m.remaining_delete = remaining.iter().map(|i| bid(*i)).collect();
    m.deleted_at = Some(t(at));
    m
}

fn d(at: u64) -> Manifest {
    let mut m = p(&[], at);
    m.state = ManifestState::Deleted;
    m
}

fn ids(m: &BTreeSet<BlockId>) -> Vec<u32> {
    m.iter().map(|b| b.index).collect()
}

// ---- the merge table, one row each (seed 001 "Merge Algorithm") ----

#[test]
fn merge_w_w_intersects_blocks_remaining_and_takes_latest_written_time() {
    let m = merge(&w(&[0, 1, 2], 5), &w(&[1, 2, 3], 9));
    assert_eq!(m.state, ManifestState::Writing);
    assert_eq!(ids(&m.remaining_write), vec![1, 2]);
    assert_eq!(m.last_written, t(9));
}

#[test]
fn merge_w_a_is_a() {
    assert_eq!(merge(&w(&[1], 5), &a(3)), a(3));
    assert_eq!(merge(&a(3), &w(&[1], 5)), a(3));
}

#[test]
fn merge_w_p_is_p() {
    assert_eq!(merge(&w(&[1], 5), &p(&[0], 6)), p(&[0], 6));
    assert_eq!(merge(&p(&[0], 6), &w(&[1], 5)), p(&[0], 6));
}

#[test]
fn merge_w_d_is_d() {
    assert_eq!(merge(&w(&[1], 5), &d(6)), d(6));
    assert_eq!(merge(&d(6), &w(&[1], 5)), d(6));
}

#[test]
fn merge_a_a_is_a_and_multipart_clean_is_newer() {
    assert_eq!(merge(&a(3), &a(3)), a(3));
    let mut dirty = a(3);
    dirty.props.multipart = Some(Default::default());
    dirty.remaining_delete = [bid(9)].into();
    let mut clean = dirty.clone();
    clean.props.multipart_clean = true;
    clean.remaining_delete.clear();
    assert_eq!(merge(&dirty, &clean), clean);
    assert_eq!(merge(&clean, &dirty), clean);
}

#[test]
#[should_panic(expected = "only one actor")]
fn merge_a_a_asserts_they_are_equal() {
    let _ = merge(&a(3), &a(4));
}

#[test]
fn merge_a_p_is_p() {
    assert_eq!(merge(&a(3), &p(&[0], 6)), p(&[0], 6));
    assert_eq!(merge(&p(&[0], 6), &a(3)), p(&[0], 6));
}

#[test]
fn merge_a_d_is_d() {
    assert_eq!(merge(&a(3), &d(6)), d(6));
    assert_eq!(merge(&d(6), &a(3)), d(6));
}

#[test]
fn merge_p_p_intersects_blocks_remaining_and_takes_latest_delete_time() {
    let m = merge(&p(&[0, 1, 2], 5), &p(&[1, 2, 3], 8));
    assert_eq!(m.state, ManifestState::PendingDelete);
    assert_eq!(ids(&m.remaining_delete), vec![1, 2]);
    assert_eq!(m.deleted_at, Some(t(8)));
}

#[test]
fn merge_p_p_keeps_the_latest_checked_in_lease() {
    let lease = |s, dev| DeletionLease {
        checked_in: t(s),
        holder: DeviceId(dev),
        epoch: Epoch(1),
    };
    let mut x = p(&[0], 5);
    x.lease = Some(lease(5, 1));
    let mut y = p(&[0], 5);
    y.lease = Some(lease(7, 2));
    assert_eq!(merge(&x, &y).lease, Some(lease(7, 2)));
    assert_eq!(merge(&y, &x).lease, Some(lease(7, 2)));
}

#[test]
fn merge_p_d_is_d() {
    assert_eq!(merge(&p(&[0], 5), &d(6)), d(6));
    assert_eq!(merge(&d(6), &p(&[0], 5)), d(6));
}

#[test]
fn merge_d_d_takes_earliest_delete_time() {
    assert_eq!(merge(&d(6), &d(4)).deleted_at, Some(t(4)));
    assert_eq!(merge(&d(4), &d(6)).deleted_at, Some(t(4)));
}

// ---- properties: the merge of any copies of one upload's manifest ----

/// A copy of the manifest as some replica saw it at some point of the upload's life:
/// writing with some blocks written, active, pending_delete with some blocks deleted
/// (and a lease), or deleted — times and sets drawn from the same life.
fn copy() -> impl Strategy<Value = Manifest> {
    let blocks = proptest::collection::btree_set(0u32..4, 0..=4);
    (
        0u8..4,
        blocks,
        1u64..20,
        proptest::option::of((1u64..20, 1u64..3)),
        any::<bool>(),
    )
        .prop_map(|(state, set, at, lease, clean)| {
            let list: Vec<u32> = set.into_iter().collect();
            let mut m = match state {
                0 => w(&list, at),
                1 => {
                    let mut m = a(3);
                    m.props.multipart = Some(Default::default());
                    m.props.multipart_clean = clean;
                    if !clean {
                        m.remaining_delete = [bid(9)].into();
                    }
                    m
                }
                2 => p(&list, at),
                _ => d(at),
            };
            if state == 2 {
                m.lease = lease.map(|(s, dev)| DeletionLease {
                    checked_in: t(s),
                    holder: DeviceId(dev),
                    epoch: Epoch(1),
                });
            }
            m
        })
}

proptest! {
    // DESIGN §9 invariant 6: manifest merge is commutative, associative, idempotent.
    #[test]
    fn merge_is_commutative(x in copy(), y in copy()) {
        prop_assert_eq!(merge(&x, &y), merge(&y, &x));
    }

    #[test]
    fn merge_is_associative(x in copy(), y in copy(), z in copy()) {
        prop_assert_eq!(merge(&merge(&x, &y), &z), merge(&x, &merge(&y, &z)));
    }

    #[test]
    fn merge_is_idempotent(x in copy(), y in copy()) {
        prop_assert_eq!(merge(&x, &x), x.clone());
        let xy = merge(&x, &y);
        prop_assert_eq!(merge(&xy, &y), xy.clone());
    }

    #[test]
    fn merge_never_goes_back_a_state(x in copy(), y in copy()) {
        prop_assert_eq!(merge(&x, &y).state, x.state.max(y.state));
    }
}

// ---- the workflow of ObjectTable ----

fn acc(s: u64) -> Access {
    Access {
        at: t(s),
        prune_before: t(s).saturating_sub(std::time::Duration::from_secs(60)),
        history: 100,
    }
}

fn locks() -> LockTable {
    LockTable::new(LockTableConfig::default(), Epoch(1))
}

fn upload(
    tab: &mut ObjectTable,
    key: &str,
    uuid: u128,
    data: &[u8],
    s: u64,
    cond: Conditions,
) -> Result<ObjectOutcome, crate::error::ClientError> {
    let uuid = Uuid(uuid);
    let blocks = split(uuid, 0, 0, &Bytes::copy_from_slice(data), 4);
    let l = locks();
    let begin = ObjectOp::Begin {
        key: key.into(),
        uuid,
        blocks: blocks.iter().map(|b| (b.id, b.info)).collect(),
        multipart: false,
        owner: None,
        request: None,
        cond: cond.clone(),
    };
    tab.execute(&begin, acc(s), &l)?;
    for b in blocks {
        let op = ObjectOp::Blocks {
            key: key.into(),
            uuid,
            part: None,
            blocks: vec![b],
        };
        tab.execute(&op, acc(s), &l)?;
    }
    let op = ObjectOp::Activate {
        key: key.into(),
        uuid,
        parts: None,
        cond,
    };
    tab.execute(&op, acc(s), &l)
}

#[test]
fn upload_goes_writing_then_active_and_supersedes_the_older_active() {
    let mut tab = ObjectTable::default();
    let r = upload(&mut tab, "/a/k", 1, b"hello world", 1, Default::default());
    assert_eq!(
        r,
        Ok(ObjectOutcome::Written {
            revision: 1,
            uuid: Uuid(1)
        })
    );
    let m = tab.active("/a/k").unwrap();
    assert_eq!((m.size, m.blocks.len()), (11, 3));
    assert_eq!(m.checksum, crc32fast::hash(b"hello world"));
    upload(&mut tab, "/a/k", 2, b"bye", 2, Default::default()).unwrap();
    assert_eq!(tab.active("/a/k").unwrap().uuid, Uuid(2));
    let old = &tab.keys["/a/k"][&Uuid(1)];
    assert_eq!(old.state, ManifestState::PendingDelete);
    assert_eq!(old.remaining_delete.len(), 3);
    assert!(tab.attention.contains("/a/k"));
    assert_eq!(
        tab.history.iter().map(|c| c.revision).collect::<Vec<_>>(),
        vec![1, 2]
    );
}

#[test]
fn activation_with_blocks_remaining_is_refused() {
    let mut tab = ObjectTable::default();
    let l = locks();
    let begin = ObjectOp::Begin {
        key: "/a/k".into(),
        uuid: U,
        blocks: vec![(bid(0), info())],
        multipart: false,
        owner: None,
        request: None,
        cond: Default::default(),
    };
    tab.execute(&begin, acc(1), &l).unwrap();
    let act = ObjectOp::Activate {
        key: "/a/k".into(),
        uuid: U,
        parts: None,
        cond: Default::default(),
    };
    assert_eq!(
        tab.execute(&act, acc(1), &l),
        Err(ObjectError::Incomplete { missing: 1 }.into())
    );
    assert_eq!(tab.keys["/a/k"][&U].state, ManifestState::Writing);
}

#[test]
fn conditions_if_absent_and_if_revision() {
    let mut tab = ObjectTable::default();
    let absent = Conditions {
        if_absent: true,
        ..Default::default()
    };
    upload(&mut tab, "/a/k", 1, b"x", 1, absent.clone()).unwrap();
    assert_eq!(
        upload(&mut tab, "/a/k", 2, b"y", 2, absent),
        Err(ObjectError::Exists { revision: 1 }.into())
    );
    let cas = |r| Conditions {
        if_revision: Some(r),
        ..Default::default()
    };
    assert_eq!(
        upload(&mut tab, "/a/k", 3, b"z", 3, cas(7)),
        Err(ObjectError::RevisionMismatch { current: Some(1) }.into())
    );
    assert_eq!(
        upload(&mut tab, "/a/k", 4, b"z", 4, cas(1)),
        Ok(ObjectOutcome::Written {
            revision: 2,
            uuid: Uuid(4)
        })
    );
    // Revision 0 means "absent".
    assert!(upload(&mut tab, "/a/new", 5, b"z", 5, cas(0)).is_ok());
}

#[test]
fn a_failed_condition_at_activation_abandons_the_upload() {
    let mut tab = ObjectTable::default();
    upload(&mut tab, "/a/k", 1, b"x", 1, Default::default()).unwrap();
    let r = upload(
        &mut tab,
        "/a/k",
        2,
        b"y",
        2,
        Conditions {
            if_revision: Some(9),
            ..Default::default()
        },
    );
    assert!(r.is_err());
    // Begin checked too (the manager checks first; the table checks at both points).
    assert!(
        !tab.keys["/a/k"].contains_key(&Uuid(2))
            || tab.keys["/a/k"][&Uuid(2)].state == ManifestState::PendingDelete
    );
    assert_eq!(tab.active("/a/k").unwrap().uuid, Uuid(1));
}

#[test]
fn put_if_token_checks_the_lock_atomically() {
    let tab = ObjectTable::default();
    let mut l = locks();
    let acq = Acquire {
        session: crate::ids::SessionId(1),
        request_id: RequestId(1),
        name: "/a/lock".into(),
        mode: LockMode::Exclusive,
        wait: Wait::Try,
        lock_delay: None,
    };
    let token = match l.acquire(&acq, t(1)) {
        Ok(crate::lockctl::Acquired::Granted(g)) => g.token,
        other => panic!("{other:?}"),
    };
    let fenced = |token| Conditions {
        fence: Some(Fence {
            lock: "/a/lock".into(),
            token,
        }),
        ..Default::default()
    };
    assert!(tab.check("/a/k", &fenced(token), &l).is_ok());
    let stale = crate::lockctl::FencingToken {
        epoch: token.epoch,
        seq: token.seq - 1,
    };
    assert_eq!(
        tab.check("/a/k", &fenced(stale), &l),
        Err(crate::error::ClientError::StaleToken {
            current: Some(token)
        })
    );
}

#[test]
fn delete_then_collect_then_prune() {
    let mut tab = ObjectTable::default();
    let l = locks();
    upload(&mut tab, "/a/k", 1, b"12345678", 1, Default::default()).unwrap();
    let del = ObjectOp::Delete {
        key: "/a/k".into(),
        request: None,
        cond: Default::default(),
    };
    assert_eq!(
        tab.execute(&del, acc(2), &l),
        Ok(ObjectOutcome::Deleted { revision: 2 })
    );
    assert!(tab.active("/a/k").is_none());
    let work = tab.gc_work(
        t(2),
        std::time::Duration::from_secs(60),
        std::time::Duration::from_secs(60),
    );
    let GcWork::Collect {
        blocks,
        lease: None,
        ..
    } = &work[0]
    else {
        panic!("{work:?}")
    };
    assert_eq!(blocks.len(), 2);
    let lease = DeletionLease {
        checked_in: t(3),
        holder: DeviceId(1),
        epoch: Epoch(1),
    };
    let key = "/a/k".to_string();
    tab.execute(
        &ObjectOp::GcLease {
            key: key.clone(),
            uuid: Uuid(1),
            lease,
        },
        acc(3),
        &l,
    )
    .unwrap();
    let deleted = blocks.iter().copied().collect();
    tab.execute(
        &ObjectOp::GcProgress {
            key: key.clone(),
            uuid: Uuid(1),
            deleted,
            lease,
        },
        acc(4),
        &l,
    )
    .unwrap();
    tab.execute(
        &ObjectOp::GcDone {
            key: key.clone(),
            uuid: Uuid(1),
        },
        acc(4),
        &l,
    )
    .unwrap();
    assert_eq!(tab.keys["/a/k"][&Uuid(1)].state, ManifestState::Deleted);
    // Pruned on the next access after prune_after (60 s here).
    tab.execute(&ObjectOp::Prune { key: key.clone() }, acc(30), &l)
        .unwrap();
    assert!(tab.keys.contains_key("/a/k"));
    tab.execute(&ObjectOp::Prune { key }, acc(65), &l).unwrap();
    assert!(!tab.keys.contains_key("/a/k") && tab.attention.is_empty());
}

#[test]
fn multipart_completion_keeps_a_subset_and_collects_the_rest() {
    let mut tab = ObjectTable::default();
    let l = locks();
    let key = "/a/mp".to_string();
    let begin = ObjectOp::Begin {
        key: key.clone(),
        uuid: U,
        blocks: vec![],
        multipart: true,
        owner: None,
        request: None,
        cond: Default::default(),
    };
    tab.execute(&begin, acc(1), &l).unwrap();
    let part = |n: u32, generation: u32, data: &[u8]| {
        let blocks = split(U, n, generation, &Bytes::copy_from_slice(data), 4);
        ObjectOp::Blocks {
            key: key.clone(),
            uuid: U,
            part: Some(PartUpload {
                number: n,
                generation,
                size: data.len() as u64,
                checksum: crc32fast::hash(data),
                blocks: blocks.iter().map(|b| (b.id, b.info)).collect(),
            }),
            blocks,
        }
    };
    // Parts in any order, part 2 retried.
    for op in [
        part(3, 1, b"cccc"),
        part(2, 1, b"bbbb"),
        part(1, 1, b"aaaa"),
        part(2, 2, b"BBBB"),
    ] {
        tab.execute(&op, acc(2), &l).unwrap();
    }
    let done = ObjectOp::Activate {
        key: key.clone(),
        uuid: U,
        parts: Some(vec![1, 2]),
        cond: Default::default(),
    };
    assert!(matches!(
        tab.execute(&done, acc(3), &l),
        Ok(ObjectOutcome::Written { .. })
    ));
    let m = tab.active(&key).unwrap();
    assert_eq!(m.size, 8);
    assert_eq!(m.checksum, crc32fast::hash(b"aaaaBBBB"));
    // Part 3 and part 2's first attempt are garbage; not clean until collected.
    assert_eq!(m.remaining_delete.len(), 2);
    assert!(!m.props.multipart_clean);
    let deleted: Vec<BlockId> = m.remaining_delete.iter().copied().collect();
    let lease = DeletionLease {
        checked_in: t(4),
        holder: DeviceId(1),
        epoch: Epoch(1),
    };
    tab.execute(
        &ObjectOp::GcProgress {
            key: key.clone(),
            uuid: U,
            deleted,
            lease,
        },
        acc(4),
        &l,
    )
    .unwrap();
    tab.execute(
        &ObjectOp::GcDone {
            key: key.clone(),
            uuid: U,
        },
        acc(4),
        &l,
    )
    .unwrap();
    let m = tab.active(&key).unwrap();
    assert!(m.props.multipart_clean && m.remaining_delete.is_empty());
    assert!(tab.attention.is_empty());
}

#[test]
fn ephemeral_objects_end_with_their_session() {
    let mut tab = ObjectTable::default();
    let l = locks();
    let s = crate::ids::SessionId(5);
    let begin = ObjectOp::Begin {
        key: "/a/e".into(),
        uuid: U,
        blocks: vec![],
        multipart: false,
        owner: Some(s),
        request: None,
        cond: Default::default(),
    };
    tab.execute(&begin, acc(1), &l).unwrap();
    let act = ObjectOp::Activate {
        key: "/a/e".into(),
        uuid: U,
        parts: None,
        cond: Default::default(),
    };
    tab.execute(&act, acc(1), &l).unwrap();
    assert!(tab.owned.contains_key(&s));
    assert_eq!(tab.session_ended(s, t(2)), vec![2]);
    assert!(tab.active("/a/e").is_none());
    assert!(tab.owned.is_empty());
    assert_eq!(tab.history.back().unwrap().kind, ChangeKind::Delete);
}

#[test]
fn watch_history_is_compacted_explicitly() {
    let mut tab = ObjectTable::default();
    let l = locks();
    for i in 0..5u128 {
        let mut a = acc(1);
        a.history = 3;
        let begin = ObjectOp::Begin {
            key: "/a/k".into(),
            uuid: Uuid(i + 1),
            blocks: vec![],
            multipart: false,
            owner: None,
            request: None,
            cond: Default::default(),
        };
        tab.execute(&begin, a, &l).unwrap();
        let act = ObjectOp::Activate {
            key: "/a/k".into(),
            uuid: Uuid(i + 1),
            parts: None,
            cond: Default::default(),
        };
        tab.execute(&act, a, &l).unwrap();
    }
    assert_eq!(tab.compacted, 2);
    assert_eq!(
        tab.changes_after("/a", 1),
        Err(ObjectError::Compacted {
            asked: 1,
            compacted: 2
        })
    );
    let revs: Vec<u64> = tab
        .changes_after("/a", 2)
        .unwrap()
        .iter()
        .map(|c| c.revision)
        .collect();
    assert_eq!(revs, vec![3, 4, 5]);
    assert!(tab.changes_after("/b", 2).unwrap().is_empty());
}

#[test]
fn reconcile_merges_known_uploads_and_does_not_resurrect_pruned_ones() {
    let mut newest = ObjectTable::default();
    upload(&mut newest, "/a/k", 1, b"x", 1, Default::default()).unwrap();
    let older = newest.clone();
    // In the newest copy, the upload is later superseded, collected and pruned.
    upload(&mut newest, "/a/k", 2, b"y", 2, Default::default()).unwrap();
    std::sync::Arc::make_mut(newest.keys.get_mut("/a/k").unwrap()).remove(&Uuid(1));
    newest.attention.remove("/a/k");
    let before = newest.clone();
    newest.reconcile(&older);
    assert_eq!(newest, before);
    // A copy that knows the same upload at an earlier point merges to the later state.
    let mut lagging = newest.clone();
    let m = std::sync::Arc::make_mut(lagging.keys.get_mut("/a/k").unwrap())
        .get_mut(&Uuid(2))
        .unwrap();
    m.state = ManifestState::Writing;
    let mut merged = newest.clone();
    merged.reconcile(&lagging);
    assert_eq!(merged, newest);
}

/// DESIGN "State at scale": a reconciliation costs what differs between the copies. A
/// copy that shares the table's structure leaves it untouched (visiting every key copied
/// every path: a regeneration rebuilt each store's whole table).
#[test]
fn reconcile_with_a_sharing_copy_copies_nothing() {
    let mut tab = ObjectTable::default();
    for i in 0..500u128 {
        upload(
            &mut tab,
            &format!("/a/k{i}"),
            i + 1,
            b"v",
            1,
            Default::default(),
        )
        .unwrap();
    }
    let before = tab.clone();
    let other = tab.clone();
    tab.reconcile(&other);
    assert!(tab.keys.ptr_eq(&before.keys), "a key's path was copied");
    assert_eq!(tab, before);
}

#[test]
fn list_is_by_path_prefix() {
    let mut tab = ObjectTable::default();
    for (i, k) in ["/a", "/a/b", "/a/b/c", "/ab", "/b"].iter().enumerate() {
        upload(&mut tab, k, i as u128 + 1, b"v", 1, Default::default()).unwrap();
    }
    let keys = |p: &str| tab.list(p).into_iter().map(|m| m.key).collect::<Vec<_>>();
    assert_eq!(keys("/a"), vec!["/a", "/a/b", "/a/b/c"]);
    assert_eq!(keys("/a/b"), vec!["/a/b", "/a/b/c"]);
    assert_eq!(keys("/").len(), 5);
}

#[test]
fn block_checksums_combine_to_the_content_checksum() {
    let data = Bytes::from_static(b"the quick brown fox jumps over the lazy dog");
    let blocks = split(U, 0, 0, &data, 5);
    assert_eq!(blocks.len(), 9);
    assert_eq!(
        combine(blocks.iter().map(|b| b.info)),
        crc32fast::hash(&data)
    );
    assert_eq!(combine([]), crc32fast::hash(b""));
}

// ---- the one-change put of a small object (ObjectOp::Put) ----

fn small(key: &str, uuid: u128, value: &'static [u8], cond: Conditions) -> ObjectOp {
    ObjectOp::Put(SmallPut {
        key: key.into(),
        uuid: Uuid(uuid),
        value: Bytes::from_static(value),
        owner: None,
        request: None,
        cond,
    })
}

#[test]
fn put_small_is_active_at_once_with_its_value_and_no_blocks() {
    let mut tab = ObjectTable::default();
    let l = locks();
    let r = tab.execute(
        &small("/s/k", 1, b"value", Conditions::default()),
        acc(1),
        &l,
    );
    assert_eq!(
        r,
        Ok(ObjectOutcome::Written {
            revision: 1,
            uuid: Uuid(1)
        })
    );
    let m = tab.active("/s/k").unwrap();
    assert_eq!(m.value.as_deref(), Some(&b"value"[..]));
    assert_eq!((m.size, m.checksum), (5, crc32fast::hash(b"value")));
    assert!(m.blocks.is_empty() && m.remaining_write.is_empty());
    assert!(tab.live_blocks().is_empty());
    assert!(tab.attention.is_empty(), "nothing to collect");
    assert_eq!(tab.history.len(), 1);
}

#[test]
fn put_small_replayed_answers_the_first_outcome_and_changes_nothing() {
    let mut tab = ObjectTable::default();
    let l = locks();
    let op = small("/s/k", 1, b"value", Conditions::default());
    tab.execute(&op, acc(1), &l).unwrap();
    let before = tab.clone();
    let r = tab.execute(&op, acc(2), &l);
    assert_eq!(
        r,
        Ok(ObjectOutcome::Written {
            revision: 1,
            uuid: Uuid(1)
        })
    );
    assert_eq!(tab, before);
}

#[test]
fn put_small_with_a_failed_condition_changes_nothing() {
    let mut tab = ObjectTable::default();
    let l = locks();
    tab.execute(&small("/s/k", 1, b"one", Conditions::default()), acc(1), &l)
        .unwrap();
    let before = tab.clone();
    let absent = Conditions {
        if_absent: true,
        ..Default::default()
    };
    let r = tab.execute(&small("/s/k", 2, b"two", absent), acc(2), &l);
    assert_eq!(r, Err(ObjectError::Exists { revision: 1 }.into()));
    let stale = Conditions {
        if_revision: Some(7),
        ..Default::default()
    };
    let r = tab.execute(&small("/s/k", 3, b"three", stale), acc(2), &l);
    assert_eq!(
        r,
        Err(ObjectError::RevisionMismatch { current: Some(1) }.into())
    );
    assert_eq!(tab, before);
}

#[test]
fn put_small_over_a_small_object_retires_it_in_the_same_change() {
    let mut tab = ObjectTable::default();
    let l = locks();
    tab.execute(&small("/s/k", 1, b"one", Conditions::default()), acc(1), &l)
        .unwrap();
    tab.execute(&small("/s/k", 2, b"two", Conditions::default()), acc(2), &l)
        .unwrap();
    assert_eq!(tab.keys["/s/k"].len(), 1);
    assert_eq!(
        tab.active("/s/k").unwrap().value.as_deref(),
        Some(&b"two"[..])
    );
    assert!(tab.attention.is_empty());
}

#[test]
fn put_small_over_a_block_object_leaves_its_blocks_to_collect() {
    let mut tab = ObjectTable::default();
    let l = locks();
    upload(&mut tab, "/s/k", 1, b"hello world", 1, Default::default()).unwrap();
    tab.execute(&small("/s/k", 2, b"two", Conditions::default()), acc(2), &l)
        .unwrap();
    let old = &tab.keys["/s/k"][&Uuid(1)];
    assert_eq!(old.state, ManifestState::PendingDelete);
    assert_eq!(old.remaining_delete.len(), 3);
    assert!(tab.attention.contains("/s/k"));
}

#[test]
fn merge_a_a_of_an_inline_manifest_keeps_its_value() {
    let m = Manifest::inline(U, Bytes::from_static(b"v"), 3, t(1));
    assert_eq!(merge(&m, &m.clone()), m);
    // A later state wins and a tombstone carries no value.
    let mut dead = m.clone();
    dead.state = ManifestState::Deleted;
    dead.value = None;
    assert_eq!(merge(&m, &dead), dead);
}

#[test]
fn an_inline_value_encodes_only_from_its_generation_on() {
    use crate::generation::{Generation, with};
    let inline = Manifest::inline(U, Bytes::from_static(b"v"), 3, t(1));
    let bytes = postcard::to_stdvec(&inline).unwrap();
    assert_eq!(postcard::from_bytes::<Manifest>(&bytes).unwrap(), inline);
    // The older layout cannot carry the value: an error, never a silent drop.
    assert!(
        with(Generation::BeforeInlineValues, || postcard::to_stdvec(
            &inline
        ))
        .is_err()
    );
    let op = small("/s/k", 1, b"v", Conditions::default());
    assert!(with(Generation::BeforeInlineValues, || postcard::to_stdvec(&op)).is_err());
    // A manifest without one reads and writes the older layout, one byte shorter.
    let plain = a(3);
    let old = with(Generation::BeforeInlineValues, || {
        postcard::to_stdvec(&plain)
    })
    .unwrap();
    assert_eq!(old.len() + 1, postcard::to_stdvec(&plain).unwrap().len());
    let back = with(Generation::BeforeInlineValues, || {
        postcard::from_bytes::<Manifest>(&old)
    });
    assert_eq!(back.unwrap(), plain);
}

/// `tally_after` over successive slices adds up to what `meta` and the pending
/// manifests say of the whole table: a key counts once, by its newest active content,
/// a key with only a tombstone is not an object, and every pending deletion is backlog.
#[test]
fn tally_after_adds_up_slice_by_slice() {
    let mut tab = ObjectTable::default();
    let dict = |ms: Vec<(u128, Manifest)>| {
        let mut d = crate::objects::manifest::Dict::default();
        for (u, mut m) in ms {
            m.uuid = Uuid(u);
            d.insert(Uuid(u), m);
        }
        std::sync::Arc::new(d)
    };
    let mut big = a(9);
    big.size = 100;
    tab.keys
        .insert("/a".into(), dict(vec![(1, a(2)), (2, big)]));
    tab.keys.insert("/b".into(), dict(vec![(1, d(5))]));
    tab.keys
        .insert("/c".into(), dict(vec![(1, p(&[1], 5)), (2, a(4))]));
    tab.keys.insert("/d".into(), dict(vec![(1, w(&[1], 1))]));
    tab.keys.insert("/e".into(), dict(vec![(1, a(7))]));
    let whole = ObjectTally {
        objects: 3,
        bytes: 100 + 2 * 40,
        gc_backlog: 1,
    };
    assert_eq!(tab.tally_after(None, 100), (whole, None));
    let (mut sum, mut after, mut slices) = (ObjectTally::default(), None, 0);
    loop {
        let (t, next) = tab.tally_after(after.as_deref(), 2);
        sum += t;
        slices += 1;
        match next {
            Some(k) => after = Some(k),
            None => break,
        }
    }
    assert_eq!((sum, slices), (whole, 3));
}
