//! Each object checker fires on a hand-built bad history.

use super::*;
use tenure_core::Epoch;
use tenure_core::objects::{Change, Manifest};
use tenure_core::time::Instant;

const S: StoreId = StoreId(3);

fn put(revision: u64, key: &str, uuid: u128) -> Change {
    Change {
        revision,
        key: key.into(),
        kind: ChangeKind::Put {
            uuid: Uuid(uuid),
            size: 0,
            checksum: 0,
        },
    }
}

// Checker 1 (seed 001, DESIGN §9.6): a read older than an acknowledged put is stale;
// one sent before the acknowledgement, or returning the newer revision, is not.
#[test]
fn a_stale_read_fires() {
    let mut c = ObjectChecker::default();
    c.put_acked(S, "/k", 1, Uuid(1), (7, 3), 100);
    c.put_acked(S, "/k", 2, Uuid(2), (8, 3), 200);
    c.read(S, "/k", 150, Some((1, Uuid(1), 7, 3)), Some((7, 3)));
    c.read(S, "/k", 250, Some((2, Uuid(2), 8, 3)), Some((8, 3)));
    assert!(c.violations.is_empty(), "{:?}", c.violations);
    c.read(S, "/k", 250, Some((1, Uuid(1), 7, 3)), Some((7, 3)));
    assert!(matches!(c.violations[0], ObjectViolation::ReadStale { .. }));
}

// Checker 1: content that does not match its description or its upload.
#[test]
fn a_corrupt_read_fires() {
    let mut c = ObjectChecker::default();
    c.put_acked(S, "/k", 1, Uuid(1), (7, 3), 100);
    c.read(S, "/k", 150, Some((1, Uuid(1), 7, 3)), Some((9, 3)));
    c.read(S, "/k", 150, Some((1, Uuid(1), 9, 3)), None);
    assert_eq!(c.violations.len(), 2);
}

// Checker 1: NoSuchObject after an acknowledged put needs a later delete; a CAS win
// must follow the revision it named.
#[test]
fn missing_reads_and_cas_are_judged_by_the_history() {
    let mut t = ObjectTable::default();
    t.history
        .extend([put(1, "/k", 1), put(2, "/k", 2), put(3, "/j", 3)]);
    t.revision = 3;
    let mut c = ObjectChecker::default();
    c.put_acked(S, "/k", 1, Uuid(1), (0, 0), 10);
    c.read(S, "/k", 20, None, None);
    c.cas_won(S, "/k", Some(1), 2);
    c.final_history(S, &t);
    assert_eq!(c.violations.len(), 1, "{:?}", c.violations);
    assert!(matches!(c.violations[0], ObjectViolation::ReadStale { .. }));
    let mut c = ObjectChecker::default();
    c.cas_won(S, "/j", None, 3);
    c.cas_won(S, "/k", Some(2), 2);
    c.final_history(S, &t);
    assert!(matches!(c.violations[0], ObjectViolation::CasBroken { .. }));
    assert_eq!(c.violations.len(), 1);
}

// Sources must agree on a revision, and an acknowledged change must be in the final
// history.
#[test]
fn conflicting_and_lost_revisions_fire() {
    let mut c = ObjectChecker::default();
    c.put_acked(S, "/k", 1, Uuid(1), (0, 0), 10);
    c.delete_acked(S, "/k", 1, 20);
    assert!(matches!(
        c.violations[0],
        ObjectViolation::RevisionConflict { .. }
    ));
    let mut c = ObjectChecker::default();
    c.put_acked(S, "/k", 2, Uuid(1), (0, 0), 10);
    let mut t = ObjectTable::default();
    t.history.push_back(put(1, "/k", 9));
    t.revision = 1;
    c.final_history(S, &t);
    assert!(matches!(c.violations[0], ObjectViolation::AckLost { .. }));
}

// Checker 5: a token released, or superseded by a conflicting grant, before the put
// was sent must not land; the current token may.
#[test]
fn a_stale_fence_landing_fires() {
    let tok = |seq| FencingToken {
        epoch: Epoch(2),
        seq,
    };
    let mut c = ObjectChecker::default();
    c.granted(S, "/g/l0", tok(1), LockMode::Exclusive, 100);
    c.fenced_landed(S, "/g/o", "/g/l0", tok(1), 150);
    c.granted(S, "/g/l0", tok(2), LockMode::Exclusive, 200);
    c.fenced_landed(S, "/g/o", "/g/l0", tok(1), 190);
    c.fenced_landed(S, "/g/o", "/g/l0", tok(2), 250);
    assert!(c.violations.is_empty());
    c.fenced_landed(S, "/g/o", "/g/l0", tok(1), 250);
    assert!(matches!(
        c.violations[0],
        ObjectViolation::FencedStale { .. }
    ));
    c.released(S, "/g/l0", tok(2), 300);
    c.fenced_landed(S, "/g/o", "/g/l0", tok(2), 301);
    assert_eq!(c.violations.len(), 2);
    // Shared grants do not supersede each other.
    c.granted(S, "/g/l1", tok(3), LockMode::Shared, 400);
    c.granted(S, "/g/l1", tok(4), LockMode::Shared, 410);
    c.fenced_landed(S, "/g/o", "/g/l1", tok(3), 420);
    assert_eq!(c.violations.len(), 2);
}

// Checker 6: a gap on a whole-store watch, a duplicate, a change outside the prefix,
// and (at the end) a change of a prefix watch never seen.
#[test]
fn broken_watches_fire() {
    let mut c = ObjectChecker::default();
    let mut last = 0;
    c.watch_events(
        S,
        0,
        "/",
        true,
        &mut last,
        &[put(1, "/a/k", 1), put(2, "/a/k", 2)],
    );
    assert!(c.violations.is_empty());
    c.watch_events(S, 0, "/", true, &mut last, &[put(4, "/a/k", 4)]);
    c.watch_events(S, 0, "/", true, &mut last, &[put(4, "/a/k", 4)]);
    let mut l2 = 0;
    c.watch_events(S, 1, "/a", false, &mut l2, &[put(5, "/b/k", 5)]);
    assert_eq!(c.violations.len(), 3, "{:?}", c.violations);
    let mut t = ObjectTable::default();
    t.history
        .extend([put(1, "/a/k", 1), put(2, "/b/k", 2), put(3, "/a/k", 3)]);
    let mut c = ObjectChecker::default();
    let seen: BTreeSet<u64> = [1].into();
    c.watch_complete(S, 1, "/a", 0, 3, &seen, &[], &t);
    assert_eq!(c.violations.len(), 1);
    c.watch_complete(S, 1, "/a", 0, 3, &seen, &[(2, 3)], &t);
    assert_eq!(c.violations.len(), 1, "an explicit re-read may skip");
}

// Checkers 3 and 4: deleting a block of an active manifest, and a manifest left
// pending_delete at the end.
#[test]
fn collecting_active_blocks_and_leaving_garbage_fire() {
    let b = tenure_core::objects::BlockId {
        upload: Uuid(1),
        part: 0,
        generation: 0,
        index: 0,
    };
    let info = tenure_core::objects::BlockInfo::of(b"x");
    let mut m = Manifest::writing(Uuid(1), vec![(b, info)], Instant(0));
    m.state = ManifestState::Active;
    m.remaining_write.clear();
    let mut t = ObjectTable::default();
    std::sync::Arc::make_mut(t.keys.entry("/k".into()).or_default()).insert(Uuid(1), m.clone());
    let mut c = ObjectChecker::default();
    c.collected(S, &t);
    assert!(c.violations.is_empty());
    c.blocks_deleted(S, &[Uuid(1)].into(), &[b].into(), &t, "d1", 5);
    assert!(matches!(
        c.violations[0],
        ObjectViolation::ActiveBlockCollected { .. }
    ));
    m.state = ManifestState::PendingDelete;
    std::sync::Arc::make_mut(t.keys.get_mut("/k").expect("key")).insert(Uuid(1), m.clone());
    let mut c = ObjectChecker::default();
    c.blocks_deleted(S, &[Uuid(1)].into(), &[b].into(), &t, "d1", 5);
    assert!(c.violations.is_empty());
    c.collected(S, &t);
    assert!(matches!(
        c.violations[0],
        ObjectViolation::NotCollected { .. }
    ));
    assert!(c.violations[0].is_liveness());
}

// The merge laws hold on copies of one upload at different stages.
#[test]
fn merge_laws_hold_on_progressing_copies() {
    let mk = |i| tenure_core::objects::BlockId {
        upload: Uuid(1),
        part: 0,
        generation: 0,
        index: i,
    };
    let info = tenure_core::objects::BlockInfo::of(b"x");
    let w = Manifest::writing(Uuid(1), vec![(mk(0), info), (mk(1), info)], Instant(5));
    let mut w2 = w.clone();
    w2.remaining_write.remove(&mk(0));
    w2.last_written = Instant(9);
    let mut p = w.clone();
    p.state = ManifestState::PendingDelete;
    p.remaining_delete = [mk(0), mk(1)].into();
    let mut c = ObjectChecker::default();
    c.merge_laws(S, "/k", &[&w, &w2, &p]);
    assert!(c.violations.is_empty(), "{:?}", c.violations);
    assert!(c.counts.merge_checks > 0);
}
