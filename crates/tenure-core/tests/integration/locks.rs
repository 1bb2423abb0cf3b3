//! Scenario tests for the lock service on stores (seed 004 with Chubby-style sessions from
//! seed 002), driven through whole devices with `tenure_core::testkit::Cluster`.

use std::time::Duration;
use tenure_core::config::store_of;
use tenure_core::ids::SessionId;
use tenure_core::io::{ClientError, Request, Response, WaitSpec};
use tenure_core::lockctl::{FencingToken, LockMode};
use tenure_core::testkit::Cluster;
use tenure_core::{DeviceId, StoreId};

const STORES: u32 = 4;
const NAME: &str = "/billing/invoices/42";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn store() -> StoreId {
    store_of(NAME, STORES)
}

fn settled() -> Cluster {
    settled_with(true)
}

/// [`settled`], forwarding requests to their manager or not (DESIGN §8).
fn settled_with(forward: bool) -> Cluster {
    let mut c = Cluster::with(5, STORES, |cfg| {
        cfg.run_policies = false;
        cfg.forward = forward;
    });
    c.run_for(Duration::from_secs(3));
    assert!(c.all_managed());
    c
}

fn manager(c: &Cluster) -> DeviceId {
    c.manager_of(store()).expect("manager").0
}

fn call(c: &mut Cluster, client: u64, req: Request) -> Result<Response, ClientError> {
    let m = manager(c);
    let r = c.request(m, client, req);
    c.run_for(ms(30));
    c.replies.get(&r).cloned().expect("answered")
}

fn open(c: &mut Cluster, client: u64, ttl: Duration) -> SessionId {
    match call(
        c,
        client,
        Request::OpenSession {
            store: store(),
            ttl,
        },
    ) {
        Ok(Response::SessionOpened { session, .. }) => session,
        other => panic!("open failed: {other:?}"),
    }
}

fn acquire(name: &str, session: SessionId, request_id: u64, wait: WaitSpec) -> Request {
    Request::Acquire {
        store: store(),
        session,
        request_id,
        name: name.into(),
        mode: LockMode::Exclusive,
        wait,
        lock_delay: None,
    }
}

fn token(r: &Result<Response, ClientError>) -> FencingToken {
    match r {
        Ok(Response::Granted { token }) => *token,
        other => panic!("not granted: {other:?}"),
    }
}

fn keep_alive(c: &mut Cluster, via: DeviceId, client: u64, session: SessionId) -> u64 {
    c.request(
        via,
        client,
        Request::KeepAlive {
            store: store(),
            session,
        },
    )
}

/// Ten seconds after a manager crash, keeping each `(client, session)` alive at whichever
/// device manages the store meanwhile, as the client library would.
fn ride_out_failover(c: &mut Cluster, sessions: &[(u64, SessionId)]) {
    for _ in 0..40 {
        c.run_for(ms(250));
        if let Some((m, _)) = c.manager_of(store()) {
            for &(client, session) in sessions {
                keep_alive(c, m, client, session);
            }
        }
    }
}

// seed 004 §2 + DESIGN §4: mutual exclusion, FIFO hand-over, and a larger fencing token for
// the next holder.
#[test]
fn exclusive_lock_is_held_by_one_and_handed_over_in_fifo_order() {
    let mut c = settled();
    let a = open(&mut c, 1, Duration::from_secs(10));
    let b = open(&mut c, 2, Duration::from_secs(10));
    let d = open(&mut c, 3, Duration::from_secs(10));
    let t1 = token(&call(&mut c, 1, acquire(NAME, a, 1, WaitSpec::Forever)));
    assert_eq!(
        call(&mut c, 2, acquire(NAME, b, 1, WaitSpec::Try)),
        Err(ClientError::WouldBlock)
    );
    let m = manager(&c);
    let wb = c.request(m, 2, acquire(NAME, b, 2, WaitSpec::Forever));
    let wd = c.request(m, 3, acquire(NAME, d, 1, WaitSpec::Forever));
    c.run_for(ms(30));
    assert!(
        !c.replies.contains_key(&wb) && !c.replies.contains_key(&wd),
        "both wait"
    );
    assert_eq!(
        call(
            &mut c,
            1,
            Request::Release {
                store: store(),
                session: a,
                request_id: 0,
                name: NAME.into()
            }
        ),
        Ok(Response::Released)
    );
    let t2 = token(c.replies.get(&wb).expect("b granted first"));
    assert!(!c.replies.contains_key(&wd), "d still waits behind b");
    assert!(t2 > t1);
    // idempotent retry returns the same grant
    assert_eq!(
        token(&call(&mut c, 2, acquire(NAME, b, 2, WaitSpec::Forever))),
        t2
    );
}

// seed 004 §4 (recovery) + DESIGN §4: the holder's manager crashes; the new manager keeps
// the lock, the holder keeps it by keep-alive, and the next grant's token is larger.
#[test]
fn manager_crash_holder_keeps_lock_and_next_token_is_larger() {
    let mut c = settled();
    let a = open(&mut c, 1, Duration::from_secs(5));
    let b = open(&mut c, 2, Duration::from_secs(5));
    let t1 = token(&call(&mut c, 1, acquire(NAME, a, 1, WaitSpec::Forever)));
    let old = manager(&c);
    c.crash(old);
    ride_out_failover(&mut c, &[(1, a), (2, b)]);
    let m = manager(&c);
    assert_ne!(m, old);
    let holders = call(
        &mut c,
        9,
        Request::Holders {
            store: store(),
            name: NAME.into(),
        },
    );
    match holders {
        Ok(Response::Holders(h)) => {
            assert_eq!(h.len(), 1);
            assert_eq!(
                h[0].session, a,
                "the holder kept its lock across the failover"
            );
        }
        other => panic!("{other:?}"),
    }
    let wb = c.request(m, 2, acquire(NAME, b, 1, WaitSpec::Forever));
    c.run_for(ms(30));
    assert!(!c.replies.contains_key(&wb));
    call(
        &mut c,
        1,
        Request::Release {
            store: store(),
            session: a,
            request_id: 0,
            name: NAME.into(),
        },
    )
    .expect("release");
    let t2 = token(c.replies.get(&wb).expect("b granted"));
    assert!(t2 > t1, "token after failover {t2:?} must exceed {t1:?}");
    assert!(t2.epoch > t1.epoch);
}

// DESIGN §4 idempotent retries + seed 004 §4.1: a release's request id is replicated with
// it, so a retry that reaches the next manager (the answer was lost in the failover)
// answers `Released` instead of `NotHeld`, and does not release anything else.
#[test]
fn release_retried_after_failover_answers_released() {
    let mut c = settled();
    let a = open(&mut c, 1, Duration::from_secs(5));
    token(&call(&mut c, 1, acquire(NAME, a, 1, WaitSpec::Forever)));
    let release = |request_id| Request::Release {
        store: store(),
        session: a,
        request_id,
        name: NAME.into(),
    };
    assert_eq!(call(&mut c, 1, release(2)), Ok(Response::Released));
    let old = manager(&c);
    c.crash(old);
    ride_out_failover(&mut c, &[(1, a)]);
    assert_ne!(manager(&c), old);
    assert_eq!(call(&mut c, 1, release(2)), Ok(Response::Released));
    assert_eq!(call(&mut c, 1, release(3)), Err(ClientError::NotHeld));
    // A later grant is not released by the old id.
    let t = token(&call(&mut c, 1, acquire(NAME, a, 4, WaitSpec::Try)));
    assert_eq!(call(&mut c, 1, release(2)), Ok(Response::Released));
    match call(
        &mut c,
        9,
        Request::Holders {
            store: store(),
            name: NAME.into(),
        },
    ) {
        Ok(Response::Holders(h)) => assert_eq!((h.len(), h[0].token), (1, t)),
        other => panic!("{other:?}"),
    }
}

// DESIGN §3 (finding a manager): a device that is not the manager, and does not forward
// (DESIGN §8: forwarding off), answers `NotManager` naming the manager whose lease its
// own chunk of the store holds (sim seed 180613: stale forwarding addresses of two former
// managers pointed at each other).
#[test]
fn chunk_holder_redirects_to_its_lease_manager() {
    let mut c = settled_with(false);
    let m = manager(&c);
    let mut hinted = 0;
    for d in (1..=5).map(DeviceId).filter(|d| *d != m) {
        let r = c.request(
            d,
            1,
            Request::OpenSession {
                store: store(),
                ttl: Duration::from_secs(5),
            },
        );
        c.run_for(ms(5));
        match c.replies.get(&r) {
            Some(Err(ClientError::NotManager { hint: Some(h) })) => {
                assert_eq!(*h, m, "d{} hints a device that is not the manager", d.0);
                hinted += 1;
            }
            Some(Err(ClientError::NotManager { hint: None })) => {}
            other => panic!("d{}: {other:?}", d.0),
        }
    }
    // Replication 3: the two other chunk holders know the manager from their leases.
    assert_eq!(hinted, 2);
}

// Chubby (seed 002) + DESIGN §4: a holder that stops sending keep-alives loses its lock
// after its TTL; the next holder waits out the lock-delay and gets a larger token.
#[test]
fn silent_holder_expires_and_waiter_gets_lock_after_lock_delay() {
    let mut c = settled();
    let a = open(&mut c, 1, Duration::from_millis(1000));
    let b = open(&mut c, 2, Duration::from_secs(30));
    let t1 = token(&call(&mut c, 1, acquire(NAME, a, 1, WaitSpec::Forever)));
    let m = manager(&c);
    let wb = c.request(m, 2, acquire(NAME, b, 1, WaitSpec::Forever));
    c.run_for(ms(900));
    assert!(!c.replies.contains_key(&wb), "not before the TTL");
    c.run_for(ms(500));
    assert!(!c.replies.contains_key(&wb), "not during the lock-delay");
    c.run_for(ms(1200));
    let t2 = token(
        c.replies
            .get(&wb)
            .expect("granted after expiry + lock-delay"),
    );
    assert!(t2 > t1);
    assert_eq!(
        call(
            &mut c,
            1,
            Request::KeepAlive {
                store: store(),
                session: a
            }
        ),
        Err(ClientError::SessionExpired)
    );
}

// DESIGN §4, Chubby's lock-delay as a per-lock option: a hold that asked for none is free
// as soon as its session expires; a device's `timing.lock_delay` applies to the others; a
// request asking for more than the maximum is rejected and changes nothing.
#[test]
fn lock_delay_is_per_lock_and_a_device_setting() {
    let mut c = Cluster::with(5, STORES, |cfg| {
        cfg.run_policies = false;
        cfg.timing.lock_delay = ms(3000);
    });
    c.run_for(Duration::from_secs(3));
    let a = open(&mut c, 1, Duration::from_millis(1000));
    let b = open(&mut c, 2, Duration::from_secs(30));
    let mut none = acquire(NAME, a, 1, WaitSpec::Forever);
    if let Request::Acquire { lock_delay, .. } = &mut none {
        *lock_delay = Some(Duration::ZERO);
    }
    let t1 = token(&call(&mut c, 1, none));
    let other = "/billing/invoices/43";
    assert_eq!(store_of(other, STORES), store(), "same store");
    token(&call(&mut c, 1, acquire(other, a, 2, WaitSpec::Forever)));
    let mut huge = acquire("/billing/invoices/44", b, 9, WaitSpec::Try);
    if let Request::Acquire { lock_delay, .. } = &mut huge {
        *lock_delay = Some(Duration::from_secs(61));
    }
    assert!(matches!(
        call(&mut c, 2, huge),
        Err(ClientError::Rejected(_))
    ));
    let m = manager(&c);
    let wb = c.request(m, 2, acquire(NAME, b, 1, WaitSpec::Forever));
    let wo = c.request(m, 2, acquire(other, b, 2, WaitSpec::Forever));
    // The session expires about 1 s after its last keep-alive (plus the manager's margin).
    let mut waited = Duration::ZERO;
    while !c.replies.contains_key(&wb) {
        c.run_for(ms(50));
        waited += ms(50);
        assert!(waited < ms(2500), "no grant soon after expiry");
    }
    assert!(token(&c.replies[&wb]) > t1);
    assert!(!c.replies.contains_key(&wo), "the other lock waits out 3 s");
    c.run_for(ms(2500));
    assert!(
        !c.replies.contains_key(&wo),
        "still within the device's lock-delay"
    );
    c.run_for(ms(1000));
    token(
        c.replies
            .get(&wo)
            .expect("granted after the device's lock-delay"),
    );
}

// DESIGN §4 locality: a client on the minority side of a partition gets Unavailable or a
// redirect, never a grant.
#[test]
fn minority_side_never_grants() {
    let mut c = settled();
    let a = open(&mut c, 1, Duration::from_secs(30));
    let m = manager(&c);
    let others: Vec<DeviceId> = (1..=5).map(DeviceId).filter(|d| *d != m).collect();
    c.groups = vec![[m].into(), others.iter().copied().collect()];
    for i in 0..30 {
        let r = c.request(m, 1, acquire(NAME, a, 100 + i, WaitSpec::Try));
        c.run_for(ms(200));
        match c.replies.get(&r) {
            None | Some(Err(_)) => {}
            Some(Ok(resp)) if i < 2 => {
                // within the first lease the old manager may still answer: it still holds
                // a quorum of leases no successor can break before they expire
                let _ = resp;
            }
            Some(Ok(resp)) => panic!("isolated manager answered {resp:?} at step {i}"),
        }
    }
}

// seed 004 §7 (waits-for graph): two sessions each waiting for the other's lock; the
// youngest waiter gets Deadlock.
#[test]
fn deadlock_between_two_sessions_is_detected() {
    let mut c = settled();
    let x = "/billing/x";
    let y = "/billing/y";
    let a = open(&mut c, 1, Duration::from_secs(30));
    let b = open(&mut c, 2, Duration::from_secs(30));
    token(&call(&mut c, 1, acquire(x, a, 1, WaitSpec::Forever)));
    token(&call(&mut c, 2, acquire(y, b, 1, WaitSpec::Forever)));
    let m = manager(&c);
    let wa = c.request(m, 1, acquire(y, a, 2, WaitSpec::Forever));
    c.run_for(ms(30));
    assert!(!c.replies.contains_key(&wa));
    assert_eq!(
        call(&mut c, 2, acquire(x, b, 2, WaitSpec::Forever)),
        Err(ClientError::Deadlock)
    );
}

// seed 004 §4.1 (maximum forward progress) + DESIGN §4 (idempotent retries): a waiter
// queued at a manager that crashes is not silently dropped. Its wait was replicated with
// the queueing change, so the new manager still has it queued; the client's retry with
// the same request id reattaches to that wait (no second queue entry), and is granted,
// with a larger token, when the holder releases.
#[test]
fn waiter_queued_at_crashed_manager_is_granted_after_retry() {
    let mut c = settled();
    let a = open(&mut c, 1, Duration::from_secs(5));
    let b = open(&mut c, 2, Duration::from_secs(5));
    let t1 = token(&call(&mut c, 1, acquire(NAME, a, 1, WaitSpec::Forever)));
    let old = manager(&c);
    let first = c.request(old, 2, acquire(NAME, b, 7, WaitSpec::Forever));
    c.run_for(ms(30));
    assert!(!c.replies.contains_key(&first), "b waits behind a");
    c.crash(old);
    ride_out_failover(&mut c, &[(1, a), (2, b)]);
    let m = manager(&c);
    assert_ne!(m, old);
    assert!(
        !c.replies.contains_key(&first),
        "the crashed manager answered nothing"
    );
    // The new manager still has b's wait queued.
    let retry = c.request(m, 2, acquire(NAME, b, 7, WaitSpec::Forever));
    c.run_for(ms(30));
    assert!(
        !c.replies.contains_key(&retry),
        "still waiting behind a: {:?}",
        c.replies.get(&retry)
    );
    call(
        &mut c,
        1,
        Request::Release {
            store: store(),
            session: a,
            request_id: 0,
            name: NAME.into(),
        },
    )
    .expect("release");
    let t2 = token(c.replies.get(&retry).expect("b granted after a released"));
    assert!(t2 > t1 && t2.epoch > t1.epoch, "{t2:?} after {t1:?}");
    match call(
        &mut c,
        9,
        Request::Holders {
            store: store(),
            name: NAME.into(),
        },
    ) {
        Ok(Response::Holders(h)) => {
            assert_eq!(h.len(), 1, "one grant, not two: {h:?}");
            assert_eq!(h[0].session, b);
        }
        other => panic!("{other:?}"),
    }
}

// DESIGN §4 group commit: changes submitted while a batch is in flight wait and travel
// together in the next ACCEPT, so twenty grants cost two SafeTalk rounds, not twenty.
#[test]
fn concurrent_acquires_share_one_accept_batch() {
    use tenure_core::msg::{Msg, ToChunk};
    let mut c = settled();
    let s = open(&mut c, 1, Duration::from_secs(10));
    let m = manager(&c);
    let is_accept = |msg: &Msg| {
        matches!(
            msg,
            Msg::ToChunk {
                msg: ToChunk::Accept { .. },
                ..
            }
        )
    };
    let before = c.count_delivered(is_accept);
    let reqs: Vec<u64> = (0..20)
        .map(|i| {
            let name = format!("/billing/batch/{i}");
            c.request(m, 1, acquire(&name, s, 100 + i, WaitSpec::Try))
        })
        .collect();
    c.run_for(ms(50));
    for r in &reqs {
        token(c.replies.get(r).expect("answered"));
    }
    let accepts = c.count_delivered(is_accept) - before;
    let chunks = c.chunks_of(store()).len();
    assert!(
        accepts <= 2 * chunks,
        "{accepts} ACCEPTs to {chunks} chunks for 20 grants"
    );
}

// DESIGN §4 (reads) + seed 000 §4.2 commit: a regenerated manager's merged state is
// durable on a quorum only once the epoch's first change has been accepted by every live
// chunk (a chunk accepts it only after committing the epoch with that state). Until then
// it must not answer reads from it (the read barrier waits for that batch): a commit lost on the way to a chunk, then a
// regeneration from chunks that missed it, would un-happen what the read showed.
#[test]
fn new_manager_answers_reads_only_after_its_first_batch_is_accepted() {
    use tenure_core::msg::{Msg, ToChunk};
    let mut c = settled();
    let a = open(&mut c, 1, Duration::from_secs(30));
    token(&call(&mut c, 1, acquire(NAME, a, 1, WaitSpec::Forever)));
    let old = manager(&c);
    // Hold back every ACCEPT (the new epoch's first batch among them).
    c.drop = Some(Box::new(|_, _, m: &Msg| {
        matches!(
            m,
            Msg::ToChunk {
                msg: ToChunk::Accept { .. },
                ..
            }
        )
    }));
    c.crash(old);
    let mut m = None;
    for _ in 0..200 {
        c.run_for(ms(50));
        if let Some((d, _)) = c.manager_of(store()) {
            m = Some(d);
            break;
        }
    }
    let m = m.expect("a new manager");
    let holders = Request::Holders {
        store: store(),
        name: NAME.into(),
    };
    let early = c.request(m, 9, holders.clone());
    c.run_for(ms(10));
    assert!(
        !matches!(c.replies.get(&early), Some(Ok(_))),
        "a read before the first batch is accepted: {:?}",
        c.replies.get(&early)
    );
    c.drop = None;
    let mut late = None;
    for _ in 0..100 {
        c.run_for(ms(100));
        if let Some((m, _)) = c.manager_of(store()) {
            keep_alive(&mut c, m, 1, a);
            let r = c.request(m, 9, holders.clone());
            c.run_for(ms(10));
            if let Some(Ok(Response::Holders(h))) = c.replies.get(&r) {
                late = Some(h.clone());
                break;
            }
        }
    }
    let h = late.expect("reads are answered once the first batch is accepted");
    assert_eq!(h[0].session, a, "the holder survived");
}

// DESIGN §4 sessions across failovers (tenure_core::session): a new manager counts a
// session's TTL + grace from the first epoch after the session's last renewal, not from
// its own takeover. A holder whose client went silent loses the lock TTL + grace (+
// lock-delay) after the first manager change, though the manager keeps moving every
// 1.5 s; counting from each takeover (5 s each here) it would never expire while the
// changes go on.
#[test]
fn silent_holder_expires_after_the_first_manager_change_however_many_follow() {
    use tenure_core::io::PolicyCommand;
    let mut c = settled();
    let a = open(&mut c, 1, ms(2000));
    let b = open(&mut c, 2, Duration::from_secs(30));
    token(&call(&mut c, 1, acquire(NAME, a, 1, WaitSpec::Forever)));
    let mut wb = c.request(manager(&c), 2, acquire(NAME, b, 1, WaitSpec::Forever));
    let start = c.now;
    let mut granted_after = None;
    for round in 0..8 {
        // Move the manager to another device holding a chunk of the store (which has
        // seen every epoch since the first change).
        let m = manager(&c);
        let to = (c.chunks_of(store()).iter())
            .map(|v| v.id.device)
            .filter(|d| *d != m)
            .nth(round % 2)
            .expect("another chunk");
        c.policy(m, PolicyCommand::Migrate { store: store(), to });
        for _ in 0..6 {
            c.run_for(ms(250));
            if let Some((m, _)) = c.manager_of(store()) {
                keep_alive(&mut c, m, 2, b);
                // The client library retries a wait the manager change cut off (the
                // request id makes it the same request).
                if let Some(Err(_)) = c.replies.get(&wb) {
                    wb = c.request(m, 2, acquire(NAME, b, 1, WaitSpec::Forever));
                }
            }
            if granted_after.is_none() && matches!(c.replies.get(&wb), Some(Ok(_))) {
                granted_after = Some(c.now.0 - start.0);
            }
        }
    }
    let after = granted_after.expect("the waiter was granted while the manager kept moving");
    // TTL 2 s + grace 3 s + lock-delay 1 s after the first change, and a round's slack.
    assert!(
        after <= 7_500_000,
        "granted {after} µs after the first change"
    );
    token(c.replies.get(&wb).unwrap());
}

// DESIGN §3 "Clocks": a release is applied at store time, as the wait it wakes was
// queued. After a failover store time lags the new manager's local clock by the time the
// store had no manager; a release stamped with local time made a timed wait look past
// its deadline, so it was not granted and timed out with the lock free (found by the
// Python client's tests against a real cluster).
#[test]
fn a_timed_wait_is_granted_at_the_release_after_a_failover() {
    let mut c = settled();
    let a = open(&mut c, 1, Duration::from_secs(5));
    let b = open(&mut c, 2, Duration::from_secs(5));
    let old = manager(&c);
    c.crash(old);
    ride_out_failover(&mut c, &[(1, a), (2, b)]);
    let m = manager(&c);
    token(&call(&mut c, 1, acquire(NAME, a, 1, WaitSpec::Forever)));
    let wb = c.request(m, 2, acquire(NAME, b, 1, WaitSpec::Timeout(ms(500))));
    c.run_for(ms(30));
    assert!(!c.replies.contains_key(&wb));
    let release = Request::Release {
        store: store(),
        session: a,
        request_id: 0,
        name: NAME.into(),
    };
    call(&mut c, 1, release).expect("release");
    token(c.replies.get(&wb).expect("b answered at the release"));
}
