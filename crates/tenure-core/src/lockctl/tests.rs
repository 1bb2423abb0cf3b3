//! Unit tests of the LOCK table, one behaviour each, citing the seed section they check.

use super::*;
use crate::ids::Epoch;
use crate::time::Instant;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::time::Duration;

const S1: SessionId = SessionId(1);
const S2: SessionId = SessionId(2);
const S3: SessionId = SessionId(3);

fn table() -> LockTable {
    LockTable::new(LockTableConfig::default(), Epoch(1))
}

fn t(ms: u64) -> Instant {
    Instant(ms * 1000)
}

fn req(session: SessionId, id: u64, name: &str, mode: LockMode, wait: Wait) -> Acquire {
    Acquire {
        session,
        request_id: RequestId(id),
        name: name.to_owned(),
        mode,
        wait,
        lock_delay: None,
    }
}

fn granted(r: Result<Acquired, AcquireError>) -> Grant {
    match r {
        Ok(Acquired::Granted(g)) => g,
        other => panic!("expected a grant, got {other:?}"),
    }
}

fn queued(r: Result<Acquired, AcquireError>) -> Ticket {
    match r {
        Ok(Acquired::Queued { ticket, .. }) => ticket,
        other => panic!("expected a queued wait, got {other:?}"),
    }
}

use LockMode::{Exclusive as X, Shared as S};

// ---- names ----

#[test]
fn names_validate() {
    assert!(LockName::parse("/billing/invoices/42").is_ok());
    assert!(LockName::parse("/a b/c-d_e.f").is_ok());
    assert_eq!(LockName::parse(""), Err(InvalidName::Empty));
    assert_eq!(LockName::parse("a/b"), Err(InvalidName::NoLeadingSlash));
    assert_eq!(LockName::parse("/"), Err(InvalidName::Root));
    assert_eq!(
        LockName::parse("/a//b"),
        Err(InvalidName::EmptySegment { segment: 1 })
    );
    assert_eq!(
        LockName::parse("/a/"),
        Err(InvalidName::EmptySegment { segment: 1 })
    );
    assert_eq!(
        LockName::parse("/a/../b"),
        Err(InvalidName::DotSegment { segment: 1 })
    );
    assert_eq!(
        LockName::parse("/."),
        Err(InvalidName::DotSegment { segment: 0 })
    );
    assert_eq!(
        LockName::parse("/a\nb"),
        Err(InvalidName::NotPrintable { byte: 2 })
    );
    assert_eq!(
        LockName::parse("/a\tb"),
        Err(InvalidName::NotPrintable { byte: 2 })
    );
    let long = format!("/{}", "x".repeat(NAME_LEN_MAX));
    assert!(matches!(
        LockName::parse(&long),
        Err(InvalidName::TooLong { .. })
    ));
    let deep = "/a".repeat(NAME_DEPTH_MAX + 1);
    assert!(matches!(
        LockName::parse(&deep),
        Err(InvalidName::TooDeep { .. })
    ));
    assert!(LockName::parse(&"/a".repeat(NAME_DEPTH_MAX)).is_ok());
}

#[test]
fn name_ancestry() {
    let a = LockName::parse("/a").unwrap();
    let ab = LockName::parse("/a/b").unwrap();
    let abc = LockName::parse("/a/b/c").unwrap();
    let a2 = LockName::parse("/ab").unwrap();
    assert!(a.is_ancestor_of(&ab) && a.is_ancestor_of(&abc) && ab.is_ancestor_of(&abc));
    assert!(!a.is_ancestor_of(&a2) && !a.is_ancestor_of(&a) && !ab.is_ancestor_of(&a));
    assert_eq!(abc.ancestors().collect::<Vec<_>>(), vec![a.clone(), ab]);
    assert!(a.overlaps(&abc) && abc.overlaps(&a) && !a.overlaps(&a2));
    assert_eq!(abc.depth(), 3);
}

#[test]
fn invalid_name_is_typed_and_changes_nothing() {
    // DESIGN §10: bad input gets a typed error and changes nothing.
    let mut lt = table();
    let before = lt.clone();
    let r = lt.acquire(&req(S1, 1, "no-slash", X, Wait::Try), t(0));
    assert_eq!(
        r,
        Err(AcquireError::InvalidName(InvalidName::NoLeadingSlash))
    );
    assert!(matches!(
        lt.release("/a/../b", S1, t(0)),
        Err(ReleaseError::InvalidName(_))
    ));
    assert_eq!(lt, before);
}

// ---- modes and the cover rule ----

#[test]
fn compatibility_matrix() {
    use GranularMode::*;
    let all = [IS, IX, S, X];
    let expect = [
        [true, true, true, false],
        [true, true, false, false],
        [true, false, true, false],
        [false, false, false, false],
    ];
    for (i, a) in all.iter().enumerate() {
        for (j, b) in all.iter().enumerate() {
            assert_eq!(a.compatible(*b), expect[i][j], "{a:?} vs {b:?}");
            assert_eq!(a.compatible(*b), b.compatible(*a));
        }
    }
}

#[test]
fn cover_rule_conflicts_along_the_path() {
    // seed 004 §9: a lock on a path covers its descendants.
    let n = |s| LockName::parse(s).unwrap();
    assert!(conflicts(&n("/a"), X, &n("/a/b"), S));
    assert!(conflicts(&n("/a/b"), X, &n("/a"), S));
    assert!(conflicts(&n("/a"), S, &n("/a/b/c"), X));
    assert!(!conflicts(&n("/a"), S, &n("/a/b"), S));
    assert!(!conflicts(&n("/a/b"), X, &n("/a/c"), X));
    assert!(!conflicts(&n("/a"), X, &n("/ab"), X));
    assert!(conflicts(&n("/a"), X, &n("/a"), X));
    assert!(!conflicts(&n("/a"), S, &n("/a"), S));
}

#[test]
fn exclusive_on_parent_blocks_child_and_vice_versa() {
    // seed 004 §9 (HCLC cover): /a covers /a/b, so they conflict through IS/IX.
    let mut lt = table();
    granted(lt.acquire(&req(S1, 1, "/a", X, Wait::Try), t(0)));
    assert_eq!(
        lt.acquire(&req(S2, 1, "/a/b", S, Wait::Try), t(0)),
        Err(AcquireError::WouldBlock)
    );
    let mut lt = table();
    granted(lt.acquire(&req(S1, 1, "/a/b", S, Wait::Try), t(0)));
    assert_eq!(
        lt.acquire(&req(S2, 1, "/a", X, Wait::Try), t(0)),
        Err(AcquireError::WouldBlock)
    );
    // Shared on the parent and shared below are compatible (IS with S).
    granted(lt.acquire(&req(S2, 2, "/a", S, Wait::Try), t(0)));
    // Siblings do not conflict.
    granted(lt.acquire(&req(S3, 1, "/b", X, Wait::Try), t(0)));
}

#[test]
fn planted_ignore_cover_grants_across_the_path_but_not_on_one_name() {
    // The planted bug the simulator must catch: conflicts looked for on the exact name
    // only, so an ancestor and a descendant are both held in conflicting modes.
    let mut lt = table();
    lt.plant_ignore_cover(true);
    granted(lt.acquire(&req(S1, 1, "/a", X, Wait::Try), t(0)));
    granted(lt.acquire(&req(S2, 1, "/a/b", X, Wait::Try), t(0)));
    // On one name the check still holds.
    assert_eq!(
        lt.acquire(&req(S3, 1, "/a", S, Wait::Try), t(0)),
        Err(AcquireError::WouldBlock)
    );
    lt.plant_ignore_cover(false);
    assert_eq!(
        lt.acquire(&req(S3, 2, "/a/b/c", S, Wait::Try), t(0)),
        Err(AcquireError::WouldBlock)
    );
}

#[test]
fn shared_holders_coexist_exclusive_excludes() {
    // seed 004 §2: the LC does not grant conflicting locks.
    let mut lt = table();
    granted(lt.acquire(&req(S1, 1, "/a", S, Wait::Try), t(0)));
    granted(lt.acquire(&req(S2, 1, "/a", S, Wait::Try), t(0)));
    assert_eq!(
        lt.acquire(&req(S3, 1, "/a", X, Wait::Try), t(0)),
        Err(AcquireError::WouldBlock)
    );
    let holders = lt.holders("/a").unwrap();
    assert_eq!(
        holders.iter().map(|h| h.session).collect::<Vec<_>>(),
        vec![S1, S2]
    );
}

#[test]
fn covered_by_own_lock_is_granted_at_once() {
    // seed 004 §9: if the controller already holds a covering lock, the request is granted.
    let mut lt = table();
    granted(lt.acquire(&req(S1, 1, "/a", S, Wait::Try), t(0)));
    queued(lt.acquire(&req(S2, 1, "/a", X, Wait::Forever), t(0)));
    // S2's earlier exclusive wait would block a stranger's shared /a/b, but S1's own S /a
    // covers it, so it cannot deadlock S1 against its own lock.
    granted(lt.acquire(&req(S1, 2, "/a/b", S, Wait::Forever), t(0)));
    assert_eq!(
        lt.acquire(&req(S3, 1, "/a/c", S, Wait::Try), t(0)),
        Err(AcquireError::WouldBlock)
    );
}

#[test]
fn already_held_and_already_waiting() {
    let mut lt = table();
    let g = granted(lt.acquire(&req(S1, 1, "/a", S, Wait::Try), t(0)));
    assert_eq!(
        lt.acquire(&req(S1, 2, "/a", X, Wait::Forever), t(0)),
        Err(AcquireError::AlreadyHeld {
            mode: S,
            token: g.token
        })
    );
    let w = queued(lt.acquire(&req(S2, 1, "/a", X, Wait::Forever), t(0)));
    assert_eq!(
        lt.acquire(&req(S2, 2, "/a", X, Wait::Forever), t(0)),
        Err(AcquireError::AlreadyWaiting { ticket: w })
    );
}

// ---- FIFO queues ----

#[test]
fn release_grants_queue_in_fifo_order() {
    // seed 002 §14.4.1: the coordinator keeps a queue per lock; fair, first come first served.
    let mut lt = table();
    granted(lt.acquire(&req(S1, 1, "/a", X, Wait::Try), t(0)));
    let w2 = queued(lt.acquire(&req(S2, 1, "/a", X, Wait::Forever), t(1)));
    let w3 = queued(lt.acquire(&req(S3, 1, "/a", X, Wait::Forever), t(2)));
    assert!(w2 < w3);
    let g = lt.release("/a", S1, t(3)).unwrap();
    assert_eq!(g.len(), 1);
    assert_eq!((g[0].session, g[0].ticket), (S2, Some(w2)));
    let g = lt.release("/a", S2, t(4)).unwrap();
    assert_eq!((g[0].session, g[0].ticket), (S3, Some(w3)));
}

#[test]
fn later_compatible_request_does_not_jump_earlier_conflicting_wait() {
    // seed 002 §14.4.1 fairness: S3's shared request is compatible with holder S1 but
    // must queue behind S2's earlier exclusive wait.
    let mut lt = table();
    granted(lt.acquire(&req(S1, 1, "/a", S, Wait::Try), t(0)));
    queued(lt.acquire(&req(S2, 1, "/a", X, Wait::Forever), t(1)));
    assert_eq!(
        lt.acquire(&req(S3, 1, "/a", S, Wait::Try), t(2)),
        Err(AcquireError::WouldBlock)
    );
    // Also across the hierarchy: S2 waits for X on /a, so S on /a/b queues behind it.
    let w3 = queued(lt.acquire(&req(S3, 2, "/a/b", S, Wait::Forever), t(2)));
    let g = lt.release("/a", S1, t(3)).unwrap();
    assert_eq!(g.iter().map(|g| g.session).collect::<Vec<_>>(), vec![S2]);
    let g = lt.release("/a", S2, t(4)).unwrap();
    assert_eq!(g.len(), 1);
    assert_eq!((g[0].session, g[0].ticket), (S3, Some(w3)));
}

#[test]
fn compatible_waiters_are_granted_together() {
    let mut lt = table();
    granted(lt.acquire(&req(S1, 1, "/a", X, Wait::Try), t(0)));
    queued(lt.acquire(&req(S2, 1, "/a", S, Wait::Forever), t(1)));
    queued(lt.acquire(&req(S3, 1, "/a", S, Wait::Forever), t(2)));
    let g = lt.release("/a", S1, t(3)).unwrap();
    assert_eq!(
        g.iter().map(|g| g.session).collect::<Vec<_>>(),
        vec![S2, S3]
    );
    assert!(g[0].token < g[1].token);
}

#[test]
fn queue_positions_and_queries() {
    let mut lt = table();
    granted(lt.acquire(&req(S1, 1, "/a/x", X, Wait::Try), t(0)));
    granted(lt.acquire(&req(S1, 2, "/a/y", S, Wait::Try), t(0)));
    granted(lt.acquire(&req(S1, 3, "/b", S, Wait::Try), t(0)));
    assert_eq!(
        lt.acquire(&req(S2, 1, "/a/x", X, Wait::Forever), t(0)),
        Ok(Acquired::Queued {
            ticket: Ticket(0),
            position: 0
        })
    );
    assert_eq!(
        lt.acquire(&req(S3, 1, "/a/x", S, Wait::Forever), t(0)),
        Ok(Acquired::Queued {
            ticket: Ticket(1),
            position: 1
        })
    );
    let under = lt.locks_under("/a").unwrap();
    assert_eq!(
        under.iter().map(|l| l.name.as_str()).collect::<Vec<_>>(),
        vec!["/a/x", "/a/y"]
    );
    assert_eq!(under[0].waiters.len(), 2);
    assert_eq!(lt.locks_under("/").unwrap().len(), 3);
    assert_eq!(lt.locks_under("/ab").unwrap(), vec![]);
    assert!(lt.locks_under("a").is_err());
    assert_eq!(lt.session_locks(S1).len(), 3);
    assert_eq!(lt.waiters("/a/x").unwrap()[1].session, S3);
}

// ---- idempotency ----

#[test]
fn replayed_request_returns_existing_result() {
    // DESIGN §4 idempotent retries (cf. ZOOKEEPER-1262): a retry never acts twice.
    let mut lt = table();
    let r1 = req(S1, 7, "/a", X, Wait::Try);
    let g = granted(lt.acquire(&r1, t(0)));
    assert_eq!(lt.acquire(&r1, t(5)), Ok(Acquired::Granted(g.clone())));
    // Queued, then replayed while queued, then after the grant.
    let r2 = req(S2, 1, "/a", X, Wait::Forever);
    let w = queued(lt.acquire(&r2, t(1)));
    let before = lt.clone();
    assert_eq!(
        lt.acquire(&r2, t(2)),
        Ok(Acquired::Queued {
            ticket: w,
            position: 0
        })
    );
    assert_eq!(lt, before);
    let g2 = lt.release("/a", S1, t(3)).unwrap().remove(0);
    assert_eq!(lt.acquire(&r2, t(4)), Ok(Acquired::Granted(g2)));
    // An error is replayed as the same error, even once the lock would be free.
    let r3 = req(S3, 1, "/a", S, Wait::Try);
    assert_eq!(lt.acquire(&r3, t(5)), Err(AcquireError::WouldBlock));
    lt.release("/a", S2, t(6)).unwrap();
    assert_eq!(lt.acquire(&r3, t(7)), Err(AcquireError::WouldBlock));
    // A reused id with a different request is refused.
    assert_eq!(
        lt.acquire(&req(S3, 1, "/b", S, Wait::Try), t(8)),
        Err(AcquireError::RequestMismatch {
            request_id: RequestId(1)
        })
    );
}

#[test]
fn idempotency_window_forgets_old_results() {
    let mut lt = LockTable::new(
        LockTableConfig {
            request_window: 2,
            ..LockTableConfig::default()
        },
        Epoch(1),
    );
    for id in 1..=3 {
        granted(lt.acquire(&req(S1, id, &format!("/n{id}"), S, Wait::Try), t(0)));
    }
    assert_eq!(
        lt.acquire(&req(S1, 1, "/n1", S, Wait::Try), t(0)),
        Err(AcquireError::StaleRequest {
            request_id: RequestId(1)
        })
    );
    assert!(matches!(
        lt.acquire(&req(S1, 3, "/n3", S, Wait::Try), t(0)),
        Ok(Acquired::Granted(_))
    ));
}

#[test]
fn replayed_release_answers_released_and_changes_nothing() {
    // DESIGN §4 idempotent retries: a release retried after its answer was lost (a
    // failover in between) answers as the first attempt did, not `NotHeld`, and does not
    // release a later grant of the same name.
    let mut lt = table();
    granted(lt.acquire(&req(S1, 1, "/a", X, Wait::Try), t(0)));
    let w = queued(lt.acquire(&req(S2, 1, "/a", X, Wait::Forever), t(0)));
    let handed = lt.release_request("/a", S1, RequestId(2), t(1)).unwrap();
    assert_eq!(handed.len(), 1);
    assert_eq!(handed[0].ticket, Some(w));
    let before = lt.clone();
    assert_eq!(lt.release_request("/a", S1, RequestId(2), t(2)), Ok(vec![]));
    assert_eq!(lt, before, "a replay changes nothing");
    // S1 acquires again (queued behind S2): an old release id does not release it.
    queued(lt.acquire(&req(S1, 3, "/a", X, Wait::Forever), t(3)));
    lt.release("/a", S2, t(4)).unwrap();
    assert_eq!(lt.holders("/a").unwrap()[0].session, S1);
    assert_eq!(lt.release_request("/a", S1, RequestId(2), t(5)), Ok(vec![]));
    assert_eq!(lt.holders("/a").unwrap()[0].session, S1, "still held");
    // The id of a release is not an acquire's, nor a release of another name.
    assert_eq!(
        lt.release_request("/b", S1, RequestId(2), t(6)),
        Err(ReleaseError::RequestMismatch {
            request_id: RequestId(2)
        })
    );
    assert_eq!(
        lt.acquire(&req(S1, 2, "/a", X, Wait::Try), t(6)),
        Err(AcquireError::RequestMismatch {
            request_id: RequestId(2)
        })
    );
    assert_eq!(
        lt.release_request("/a", S1, RequestId(1), t(6)),
        Err(ReleaseError::RequestMismatch {
            request_id: RequestId(1)
        })
    );
}

#[test]
fn failed_release_is_not_recorded() {
    // A release that found nothing changed nothing: its replay runs again.
    let mut lt = table();
    let nothing = lt.release_request("/a", S1, RequestId(1), t(0));
    assert!(matches!(nothing, Err(ReleaseError::NotHeld { .. })));
    granted(lt.acquire(&req(S1, 2, "/a", X, Wait::Try), t(1)));
    assert_eq!(lt.release_request("/a", S1, RequestId(1), t(2)), Ok(vec![]));
    assert!(lt.holders("/a").unwrap().is_empty());
}

#[test]
fn release_ids_share_the_idempotency_window() {
    let mut lt = LockTable::new(
        LockTableConfig {
            request_window: 2,
            ..LockTableConfig::default()
        },
        Epoch(1),
    );
    for id in [1, 3, 5] {
        let name = format!("/n{id}");
        granted(lt.acquire(&req(S1, id, &name, S, Wait::Try), t(0)));
        lt.release_request(&name, S1, RequestId(id + 1), t(0))
            .unwrap();
    }
    assert_eq!(
        lt.release_request("/n1", S1, RequestId(2), t(0)),
        Err(ReleaseError::StaleRequest {
            request_id: RequestId(2)
        })
    );
    assert_eq!(
        lt.release_request("/n5", S1, RequestId(6), t(0)),
        Ok(vec![])
    );
}

// ---- timeouts ----

#[test]
fn waits_time_out() {
    let mut lt = table();
    granted(lt.acquire(&req(S1, 1, "/a", X, Wait::Try), t(0)));
    let w = queued(lt.acquire(&req(S2, 1, "/a", X, Wait::Until(t(10))), t(0)));
    assert_eq!(lt.next_deadline(), Some(t(10)));
    assert!(lt.expire_waits(t(9)).ended.is_empty());
    let wake = lt.expire_waits(t(10));
    assert_eq!(wake.ended.len(), 1);
    assert_eq!(
        (wake.ended[0].ticket, &wake.ended[0].error),
        (w, &AcquireError::Timeout)
    );
    assert!(lt.waiters("/a").unwrap().is_empty());
    // The replay reports the timeout.
    assert_eq!(
        lt.acquire(&req(S2, 1, "/a", X, Wait::Until(t(10))), t(11)),
        Err(AcquireError::Timeout)
    );
    // A deadline already past behaves as a failed try.
    assert_eq!(
        lt.acquire(&req(S3, 1, "/a", X, Wait::Until(t(5))), t(11)),
        Err(AcquireError::Timeout)
    );
}

#[test]
fn expired_wait_is_not_granted_and_does_not_block() {
    // DESIGN §4: a lock wait that ends after its deadline is not a grant (etcd #11456).
    let mut lt = table();
    granted(lt.acquire(&req(S1, 1, "/a", X, Wait::Try), t(0)));
    queued(lt.acquire(&req(S2, 1, "/a", X, Wait::Until(t(10))), t(0)));
    queued(lt.acquire(&req(S3, 1, "/a", X, Wait::Forever), t(1)));
    let g = lt.release("/a", S1, t(20)).unwrap();
    assert_eq!(g.iter().map(|g| g.session).collect::<Vec<_>>(), vec![S3]);
    let wake = lt.expire_waits(t(20));
    assert_eq!(wake.ended[0].session, S2);
}

#[test]
fn timeout_of_earlier_wait_unblocks_later_one() {
    let mut lt = table();
    granted(lt.acquire(&req(S1, 1, "/a", S, Wait::Try), t(0)));
    queued(lt.acquire(&req(S2, 1, "/a", X, Wait::Until(t(10))), t(0)));
    queued(lt.acquire(&req(S3, 1, "/a", S, Wait::Forever), t(1)));
    let wake = lt.tick(t(10));
    assert_eq!(wake.ended.len(), 1);
    assert_eq!(
        wake.granted.iter().map(|g| g.session).collect::<Vec<_>>(),
        vec![S3]
    );
}

// ---- sessions and lock-delay ----

#[test]
fn session_expiry_releases_with_lock_delay() {
    // seed 002 §14.4.1 "client process crashes while holding the lock" and Chubby's
    // lock-delay (§14.4.5): the lock is released, but not re-granted before the delay.
    let cfg = LockTableConfig {
        lock_delay: Duration::from_millis(100),
        ..LockTableConfig::default()
    };
    let mut lt = LockTable::new(cfg, Epoch(1));
    let g1 = granted(lt.acquire(&req(S1, 1, "/a", X, Wait::Try), t(0)));
    granted(lt.acquire(&req(S1, 2, "/b", S, Wait::Try), t(0)));
    let w2 = queued(lt.acquire(&req(S2, 1, "/a", X, Wait::Forever), t(5)));
    let out = lt.release_session(S1, t(10));
    assert_eq!(out.released.len(), 2);
    assert!(out.granted.is_empty());
    assert_eq!(lt.holders("/a").unwrap(), vec![]);
    // Nobody gets /a during the delay, not even by try, nor a conflicting descendant.
    assert_eq!(
        lt.acquire(&req(S3, 1, "/a", S, Wait::Try), t(50)),
        Err(AcquireError::WouldBlock)
    );
    assert_eq!(
        lt.acquire(&req(S3, 2, "/a/z", S, Wait::Try), t(50)),
        Err(AcquireError::WouldBlock)
    );
    // A shared ghost on /b still lets shared readers below it in, but not the name itself.
    granted(lt.acquire(&req(S3, 3, "/b/z", S, Wait::Try), t(50)));
    assert_eq!(lt.next_deadline(), Some(t(110)));
    assert!(lt.tick(t(109)).granted.is_empty());
    let wake = lt.tick(t(110));
    assert_eq!(wake.granted.len(), 1);
    assert_eq!(
        (wake.granted[0].session, wake.granted[0].ticket),
        (S2, Some(w2))
    );
    assert!(wake.granted[0].token > g1.token);
    assert_eq!(lt.locks_under("/b").unwrap().len(), 1);
}

#[test]
fn session_expiry_uses_each_holds_own_lock_delay() {
    // Chubby's lock-delay per lock: a hold that asked for none is free at once after its
    // session expires, one that asked for longer than the table's waits that long, and a
    // waiter's request carries its delay into the grant that serves it.
    let mut lt = table(); // default delay 1 s
    let mut zero = req(S1, 1, "/zero", X, Wait::Try);
    zero.lock_delay = Some(Duration::ZERO);
    granted(lt.acquire(&zero, t(0)));
    let mut long = req(S1, 2, "/long", X, Wait::Try);
    long.lock_delay = Some(Duration::from_secs(5));
    granted(lt.acquire(&long, t(0)));
    granted(lt.acquire(&req(S1, 3, "/plain", X, Wait::Try), t(0)));
    queued(lt.acquire(&req(S2, 1, "/zero", X, Wait::Forever), t(1)));
    let mut w = req(S3, 1, "/long", X, Wait::Forever);
    w.lock_delay = Some(Duration::ZERO);
    queued(lt.acquire(&w, t(1)));
    let out = lt.release_session(S1, t(10));
    assert_eq!(out.released.len(), 3);
    let now: Vec<_> = out.granted.iter().map(|g| g.name.to_string()).collect();
    assert_eq!(now, vec!["/zero".to_string()]);
    // The table's default for the hold that asked for nothing.
    assert_eq!(
        lt.acquire(&req(S2, 2, "/plain", X, Wait::Try), t(1009)),
        Err(AcquireError::WouldBlock)
    );
    granted(lt.acquire(&req(S2, 3, "/plain", X, Wait::Try), t(1010)));
    assert!(lt.tick(t(5009)).granted.is_empty());
    let wake = lt.tick(t(5010));
    assert_eq!(wake.granted.len(), 1);
    assert_eq!(wake.granted[0].session, S3);
    // S3's hold has no delay: its expiry frees /long at once.
    queued(lt.acquire(&req(S2, 4, "/long", X, Wait::Forever), t(5011)));
    let out = lt.release_session(S3, t(5020));
    assert_eq!(out.granted.len(), 1);
    assert_eq!(out.granted[0].session, S2);
}

#[test]
fn a_lock_delay_longer_than_the_maximum_is_capped() {
    let mut lt = table();
    let mut r = req(S1, 1, "/a", X, Wait::Try);
    r.lock_delay = Some(Duration::from_secs(3600));
    granted(lt.acquire(&r, t(0)));
    let _ = lt.release_session(S1, t(0));
    let free_at = t(MAX_LOCK_DELAY.as_millis() as u64);
    assert_eq!(lt.next_deadline(), Some(free_at));
}

#[test]
fn session_release_cancels_waits_and_close_has_no_delay() {
    let mut lt = table();
    granted(lt.acquire(&req(S2, 1, "/c", X, Wait::Try), t(0)));
    granted(lt.acquire(&req(S1, 1, "/a", X, Wait::Try), t(0)));
    let w = queued(lt.acquire(&req(S1, 2, "/c", X, Wait::Forever), t(0)));
    queued(lt.acquire(&req(S3, 1, "/a", X, Wait::Forever), t(0)));
    let out = lt.close_session(S1, t(1));
    assert_eq!(out.cancelled.len(), 1);
    assert_eq!(
        (out.cancelled[0].ticket, &out.cancelled[0].error),
        (w, &AcquireError::SessionEnded)
    );
    // Graceful close: no lock-delay, S3 is granted at once.
    assert_eq!(out.granted.len(), 1);
    assert_eq!(out.granted[0].session, S3);
    assert!(lt.waiters("/c").unwrap().is_empty());
}

// ---- fencing tokens ----

#[test]
fn fencing_tokens_increase_across_epochs() {
    // seed 004 §4 (LCR: a new LC takes over the LOCK table): tokens of the new manager's
    // grants are larger than every token of the old one.
    let mut lt = table();
    let g1 = granted(lt.acquire(&req(S1, 1, "/a", X, Wait::Try), t(0)));
    lt.release("/a", S1, t(1)).unwrap();
    lt.begin_epoch(Epoch(2)).unwrap();
    let g2 = granted(lt.acquire(&req(S2, 1, "/a", X, Wait::Try), t(2)));
    assert!(g2.token > g1.token);
    assert_eq!(g2.token.epoch, Epoch(2));
    assert_eq!(
        lt.begin_epoch(Epoch(1)),
        Err(StaleEpoch {
            current: Epoch(2),
            proposed: Epoch(1)
        })
    );
    // Token order is epoch first.
    assert!(
        FencingToken {
            epoch: Epoch(2),
            seq: 1
        } > FencingToken {
            epoch: Epoch(1),
            seq: 99
        }
    );
}

// ---- deadlock ----

#[test]
fn deadlock_between_two_sessions_is_detected() {
    // seed 004 §7: the LC has complete control over its component, so it can run deadlock
    // detection; the youngest waiter on the cycle gets a typed Deadlock error.
    let mut lt = table();
    granted(lt.acquire(&req(S1, 1, "/x", X, Wait::Try), t(0)));
    granted(lt.acquire(&req(S2, 1, "/y", X, Wait::Try), t(0)));
    queued(lt.acquire(&req(S1, 2, "/y", X, Wait::Forever), t(1)));
    let before = lt.clone();
    let r = lt.acquire(&req(S2, 2, "/x", X, Wait::Forever), t(2));
    assert_eq!(
        r,
        Err(AcquireError::Deadlock {
            cycle: vec![S2, S1]
        })
    );
    // The youngest wait was removed (never queued); S1's older wait is intact.
    assert_eq!(lt.waiters("/x").unwrap(), vec![]);
    assert_eq!(lt.waiters("/y").unwrap().len(), 1);
    assert_eq!(lt.holders("/x").unwrap(), before.holders("/x").unwrap());
    // S2 gives up /y, S1 gets it.
    let g = lt.release("/y", S2, t(3)).unwrap();
    assert_eq!(g[0].session, S1);
}

#[test]
fn deadlock_through_hierarchy_and_queue_order() {
    // A three-session cycle whose edges go through the cover rule and a FIFO edge.
    let mut lt = table();
    granted(lt.acquire(&req(S1, 1, "/a/b", X, Wait::Try), t(0)));
    granted(lt.acquire(&req(S2, 1, "/c", S, Wait::Try), t(0)));
    // S2 waits for /a (blocked by S1's /a/b).
    queued(lt.acquire(&req(S2, 2, "/a", S, Wait::Forever), t(1)));
    // S3 waits for /a/q exclusively: blocked by S2's earlier conflicting wait on /a.
    queued(lt.acquire(&req(S3, 1, "/a/q", X, Wait::Forever), t(2)));
    granted(lt.acquire(&req(S3, 2, "/d", X, Wait::Try), t(2)));
    // S1 asks for /d: S1 → S3 → S2 → S1.
    let r = lt.acquire(&req(S1, 2, "/d", S, Wait::Forever), t(3));
    assert_eq!(
        r,
        Err(AcquireError::Deadlock {
            cycle: vec![S1, S3, S2]
        })
    );
    // A try never deadlocks: it fails at once.
    assert_eq!(
        lt.acquire(&req(S1, 3, "/d", S, Wait::Try), t(3)),
        Err(AcquireError::WouldBlock)
    );
}

#[test]
fn no_false_deadlock_without_cycle() {
    let mut lt = table();
    granted(lt.acquire(&req(S1, 1, "/x", X, Wait::Try), t(0)));
    granted(lt.acquire(&req(S2, 1, "/y", X, Wait::Try), t(0)));
    queued(lt.acquire(&req(S2, 2, "/x", X, Wait::Forever), t(0)));
    // S3 waits behind S2 on /x and for S2's /y: a chain S3 → S2 → S1, no cycle.
    queued(lt.acquire(&req(S3, 1, "/x", X, Wait::Forever), t(0)));
    queued(lt.acquire(&req(S3, 2, "/y", X, Wait::Forever), t(0)));
}

#[test]
fn waiting_for_a_later_waiter_is_a_deadlock() {
    // FIFO edges count: S3 queues behind S2 on /x and holds /y; S2 asking for /y would wait
    // for S3 forever (when S1 releases /x, S2 gets it and S3 waits for S2).
    let mut lt = table();
    granted(lt.acquire(&req(S1, 1, "/x", X, Wait::Try), t(0)));
    queued(lt.acquire(&req(S2, 1, "/x", X, Wait::Forever), t(0)));
    queued(lt.acquire(&req(S3, 1, "/x", X, Wait::Forever), t(0)));
    granted(lt.acquire(&req(S3, 2, "/y", X, Wait::Try), t(0)));
    assert_eq!(
        lt.acquire(&req(S2, 2, "/y", X, Wait::Forever), t(0)),
        Err(AcquireError::Deadlock {
            cycle: vec![S2, S3]
        })
    );
}

#[test]
fn apply_matches_direct_calls() {
    let ops = [
        LockOp::Acquire(req(S1, 1, "/a", X, Wait::Try)),
        LockOp::Acquire(req(S2, 1, "/a", S, Wait::Forever)),
        LockOp::Release {
            name: "/a".into(),
            session: S1,
        },
        LockOp::Acquire(req(S1, 2, "/a", X, Wait::Forever)),
        LockOp::ReleaseRequest {
            name: "/a".into(),
            session: S1,
            request_id: RequestId(3),
        },
        LockOp::BeginEpoch(Epoch(3)),
        LockOp::ReleaseSession(S2),
        LockOp::Tick,
    ];
    let mut a = table();
    let mut b = table();
    for (i, op) in ops.iter().enumerate() {
        let now = t(i as u64);
        let ra = a.apply(op, now);
        let rb = match op {
            LockOp::Acquire(r) => LockOpResult::Acquire(b.acquire(r, now)),
            LockOp::Release { name, session } => {
                LockOpResult::Release(b.release(name, *session, now))
            }
            LockOp::ReleaseRequest {
                name,
                session,
                request_id,
            } => LockOpResult::Release(b.release_request(name, *session, *request_id, now)),
            LockOp::ReleaseSession(s) => LockOpResult::Session(b.release_session(*s, now)),
            LockOp::Tick => LockOpResult::Wakeups(b.tick(now)),
            LockOp::BeginEpoch(e) => LockOpResult::Epoch(b.begin_epoch(*e)),
            _ => unreachable!(),
        };
        assert_eq!(ra, rb);
        assert_eq!(a, b);
    }
}

// ---- property: random operation sequences ----

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        s: u64,
        id: u64,
        name: usize,
        excl: bool,
        wait: u8,
    },
    Release {
        s: u64,
        name: usize,
    },
    Expire {
        s: u64,
    },
    Close {
        s: u64,
    },
    Advance(u64),
    Epoch,
}

const NAMES: [&str; 6] = ["/a", "/a/b", "/a/c", "/a/b/d", "/b", "/b/e"];

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1..5u64, 0..12u64, 0..NAMES.len(), any::<bool>(), 0..3u8)
            .prop_map(|(s, id, name, excl, wait)| Op::Acquire { s, id, name, excl, wait }),
        4 => (1..5u64, 0..NAMES.len()).prop_map(|(s, name)| Op::Release { s, name }),
        1 => (1..5u64).prop_map(|s| Op::Expire { s }),
        1 => (1..5u64).prop_map(|s| Op::Close { s }),
        2 => (0..40u64).prop_map(Op::Advance),
        1 => Just(Op::Epoch),
    ]
}

struct Checker {
    last_token: BTreeMap<LockName, FencingToken>,
}

impl Checker {
    fn grants(&mut self, lt: &LockTable, gs: &[Grant]) {
        for g in gs {
            // Fencing tokens strictly increase per lock.
            if let Some(prev) = self.last_token.get(&g.name) {
                assert!(
                    g.token > *prev,
                    "token of {} went {prev:?} -> {:?}",
                    g.name,
                    g.token
                );
            }
            self.last_token.insert(g.name.clone(), g.token);
            // FIFO: a granted wait left no earlier, unexpired, conflicting wait of another
            // session queued on an overlapping name.
            if let Some(t) = g.ticket {
                for l in lt.locks_under("/").unwrap() {
                    for w in &l.waiters {
                        if w.ticket < t && w.session != g.session {
                            assert!(
                                !conflicts(&l.name, w.mode, &g.name, g.mode)
                                    || lt
                                        .session_locks(g.session)
                                        .iter()
                                        .any(|h| h.name != g.name && h.name.is_ancestor_of(&g.name)),
                                "grant {g:?} overtook earlier wait {w:?} on {}",
                                l.name
                            );
                        }
                    }
                }
            }
        }
    }
}

fn mutual_exclusion(lt: &LockTable) {
    let held: Vec<(LockName, HolderInfo)> = lt
        .locks_under("/")
        .unwrap()
        .into_iter()
        .flat_map(|l| l.holders.into_iter().map(move |h| (l.name.clone(), h)))
        .collect();
    for (i, (n1, h1)) in held.iter().enumerate() {
        for (n2, h2) in &held[i + 1..] {
            assert!(
                h1.session == h2.session || !conflicts(n1, h1.mode, n2, h2.mode),
                "{:?} on {n1} and {:?} on {n2} conflict",
                h1,
                h2
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// seed 004 §2 and Theorem 1's premise: "locks granted by an LC do not conflict with one
    /// another"; plus tokens strictly increasing per lock and FIFO order.
    #[test]
    fn random_sequences_keep_the_invariants(ops in proptest::collection::vec(op(), 1..80)) {
        let cfg = LockTableConfig { lock_delay: Duration::from_millis(15), request_window: 8 };
        let mut lt = LockTable::new(cfg, Epoch(1));
        let mut now = t(0);
        let mut epoch = 1;
        let mut ck = Checker { last_token: BTreeMap::new() };
        for op in ops {
            let grants: Vec<Grant> = match op {
                Op::Acquire { s, id, name, excl, wait } => {
                    let wait = match wait {
                        0 => Wait::Try,
                        1 => Wait::Forever,
                        _ => Wait::Until(now + Duration::from_millis(20)),
                    };
                    let mode = if excl { X } else { S };
                    let r = req(SessionId(s), id, NAMES[name], mode, wait);
                    let before = lt.clone();
                    match lt.acquire(&r, now) {
                        // A replay changes nothing; a new grant changes the table.
                        Ok(Acquired::Granted(g)) if lt != before => vec![g],
                        Ok(Acquired::Granted(_)) => vec![],
                        Ok(Acquired::Queued { .. }) => vec![],
                        Err(AcquireError::Deadlock { cycle }) => {
                            prop_assert_eq!(cycle[0], SessionId(s));
                            vec![]
                        }
                        Err(_) => vec![],
                    }
                }
                Op::Release { s, name } => lt.release(NAMES[name], SessionId(s), now).unwrap_or_default(),
                Op::Expire { s } => lt.release_session(SessionId(s), now).granted,
                Op::Close { s } => lt.close_session(SessionId(s), now).granted,
                Op::Advance(ms) => {
                    now = now + Duration::from_millis(ms);
                    lt.tick(now).granted
                }
                Op::Epoch => {
                    epoch += 1;
                    lt.begin_epoch(Epoch(epoch)).unwrap();
                    vec![]
                }
            };
            ck.grants(&lt, &grants);
            mutual_exclusion(&lt);
            // The deadline index is always what the entries and the waits say, and
            // survives the table's encoding (where it is rebuilt, never carried).
            prop_assert!(lt.deadlines_are_derived());
            // A table that skips looking over its waits at a tick with nothing due has
            // none to grant.
            prop_assert!(lt.settled_holds(now));
            let decoded: LockTable =
                postcard::from_bytes(&postcard::to_allocvec(&lt).unwrap()).unwrap();
            prop_assert_eq!(decoded.next_deadline(), lt.next_deadline());
            prop_assert!(decoded == lt);
        }
    }
}

/// The next deadline is found from the index, which every change keeps: lock-delays set
/// and cleared, waits queued and ended, in any order (seed 004 §2's timers).
#[test]
fn next_deadline_follows_lock_delays_and_waits_through_every_change() {
    let cfg = LockTableConfig {
        lock_delay: Duration::from_millis(100),
        request_window: 8,
    };
    let mut lt = LockTable::new(cfg, Epoch(1));
    assert_eq!(lt.next_deadline(), None);
    granted(lt.acquire(&req(S1, 1, "/a", X, Wait::Try), t(0)));
    queued(lt.acquire(&req(S2, 1, "/a", X, Wait::Until(t(50))), t(0)));
    assert_eq!(lt.next_deadline(), Some(t(50)));
    // The wait times out; the deadline goes with it.
    assert_eq!(lt.expire_waits(t(50)).ended.len(), 1);
    assert_eq!(lt.next_deadline(), None);
    // S1 expires holding /a: its lock-delay is the next deadline, until the tick ends it.
    let _ = lt.release_session(S1, t(60));
    assert_eq!(lt.next_deadline(), Some(t(160)));
    queued(lt.acquire(&req(S3, 1, "/a", X, Wait::Until(t(500))), t(70)));
    assert_eq!(lt.next_deadline(), Some(t(160)));
    let wake = lt.tick(t(160));
    assert_eq!(
        wake.granted.len(),
        1,
        "the wait is granted when the delay ends"
    );
    // The granted wait's deadline is gone too.
    assert_eq!(lt.next_deadline(), None);
    assert!(lt.deadlines_are_derived());
}

// ---- counting a slice at a time (a device's gauges) ----

/// `held_count_after` over successive slices adds up to `held_count`: names waited for
/// but not held are visited and not counted, and the last slice says nothing remains.
#[test]
fn held_count_after_adds_up_slice_by_slice() {
    let mut tab = table();
    for i in 0..7 {
        granted(tab.acquire(&req(S1, i, &format!("/n{i}"), X, Wait::Try), t(0)));
    }
    queued(tab.acquire(&req(S2, 1, "/n3", X, Wait::Until(t(9000))), t(0)));
    granted(tab.acquire(&req(S2, 2, "/z", S, Wait::Try), t(0)));
    assert_eq!((tab.held_count(), tab.entry_count()), (8, 8));
    let (mut held, mut after, mut slices) = (0, None, 0);
    loop {
        let (n, next) = tab.held_count_after(after.as_ref(), 3);
        held += n;
        slices += 1;
        match next {
            Some(name) => after = Some(name),
            None => break,
        }
    }
    assert_eq!((held, slices), (8, 3));
    assert_eq!(tab.held_count_after(None, 100), (8, None));
}
