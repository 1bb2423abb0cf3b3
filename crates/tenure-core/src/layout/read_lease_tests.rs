//! Reads under the manager's lease (DESIGN §4, reads): the chunk reports in ACCEPTED how
//! long it goes on refusing other managers, the manager answers a read at once while a
//! quorum of those reports still run, and a restarted chunk helps no other manager for
//! a lease. A renewal request echoes the last renewal the chunk applied, which keeps the
//! read lease without a batch.

use super::chunk::Chunk;
use super::manager::Manager;
use super::test_support::*;
use super::{ChunkState, MgrState};
use crate::ids::{ClientId, Version};
use crate::io::Output;
use crate::io::request::Request;
use crate::msg::{Renewed, ToChunk, ToManager};
use crate::time::Instant;
use std::time::Duration;

fn holders() -> Request {
    Request::Holders {
        store: STORE,
        name: "/a".into(),
    }
}

fn replies(out: &[Output]) -> Vec<(u64, bool)> {
    (out.iter())
        .filter_map(|o| match o {
            Output::Reply { req_id, result, .. } => Some((*req_id, result.is_ok())),
            _ => None,
        })
        .collect()
}

fn accepts(out: &[Output]) -> usize {
    (to_chunks(out).iter())
        .filter(|(_, m)| matches!(m, ToChunk::Accept { .. }))
        .count()
}

fn accepted(upto: Version, lease_left: Option<Duration>) -> ToManager {
    ToManager::Accepted {
        epoch: e(3),
        upto,
        lease_left,
    }
}

/// What a chunk under a fresh regular lease reports: the lease less `δ_c`.
fn full() -> Option<Duration> {
    Some(timing().lease - timing().clock_drift)
}

/// The manager of epoch 3 after a write sent at `T0` that every chunk accepted at
/// `T0 + 1 ms`, chunk `n` reporting `leases[n - 1]`.
fn after_write(env: &mut Env, leases: [Option<Duration>; 3]) -> Manager {
    let mut m = managing(3);
    m.write(&mut env.ctx(T0), ClientId(1), 1, 1, 1);
    let upto = (to_chunks(&env.take()).into_iter())
        .find_map(|(_, x)| match x {
            ToChunk::Accept { ops, .. } => ops.last().map(|o| o.0),
            _ => None,
        })
        .expect("the write's batch");
    for (n, lease) in (1..=3).zip(leases) {
        from_chunk(&mut m, env, T0 + ms(1), n, accepted(upto, lease));
    }
    assert_eq!(
        replies(&env.take()),
        vec![(1, true)],
        "the write is answered"
    );
    m
}

fn read_at(m: &mut Manager, env: &mut Env, at: Instant, req_id: u64) -> Vec<Output> {
    m.request(&mut env.ctx(at), ClientId(2), req_id, holders());
    env.take()
}

#[test]
fn manager_answers_a_read_at_once_under_its_read_lease() {
    // DESIGN §4, reads: every chunk reported its regular lease in ACCEPTED; the read is
    // answered from the committed tables in the same step, with no batch sent.
    let mut env = Env::new(M);
    let mut m = after_write(&mut env, [full(), full(), full()]);
    let out = read_at(&mut m, &mut env, T0 + ms(2), 7);
    assert_eq!(replies(&out), vec![(7, true)]);
    assert_eq!(accepts(&out), 0, "no barrier");
    assert_eq!(
        m.read_lease.values().copied().collect::<Vec<_>>(),
        vec![T0 + timing().lease - timing().clock_drift; 3],
        "counted from when the batch was sent, not from when ACCEPTED arrived"
    );
}

#[test]
fn manager_read_lease_needs_a_quorum_of_chunks() {
    // Two of three chunks did not report a lease (an older build, or not under this
    // manager's regular lease): one chunk is no quorum, the read waits for a barrier.
    let mut env = Env::new(M);
    let mut m = after_write(&mut env, [full(), None, None]);
    let out = read_at(&mut m, &mut env, T0 + ms(2), 7);
    assert!(replies(&out).is_empty());
    assert_eq!(accepts(&out), 3, "a barrier to every live chunk");
    // Two of three are a quorum.
    let mut m = after_write(&mut env, [full(), None, full()]);
    assert_eq!(
        replies(&read_at(&mut m, &mut env, T0 + ms(2), 8)),
        vec![(8, true)]
    );
}

#[test]
fn manager_read_lease_ends_two_drift_bounds_before_the_reported_end() {
    // The reported lease ends at T0 + lease − δ_c (counted from the batch's sending);
    // the manager trusts it until 2·δ_c before that, then reads wait for a barrier
    // (the chunk leases still hold for requests until T0 + lease − 2·δ_c).
    let t = timing();
    let end = T0 + t.lease - t.clock_drift;
    let mut env = Env::new(M);
    let mut m = after_write(&mut env, [full(), full(), full()]);
    let last = end.saturating_sub(t.clock_drift * 2) - ms(1);
    assert_eq!(
        replies(&read_at(&mut m, &mut env, last, 7)),
        vec![(7, true)]
    );
    let out = read_at(&mut m, &mut env, last + ms(2), 8);
    assert!(replies(&out).is_empty(), "past the read lease");
    assert_eq!(accepts(&out), 3);
}

#[test]
fn manager_accepted_of_an_earlier_batch_gives_no_read_lease() {
    // An ACCEPTED that does not cover the batch in flight (a duplicate, or a late one)
    // says nothing about when it was sent relative to that batch: no read lease.
    let mut env = Env::new(M);
    let mut m = after_write(&mut env, [None, None, None]);
    let first = m.host.data.confirmed;
    m.write(&mut env.ctx(T0 + ms(2)), ClientId(1), 2, 1, 2);
    env.take();
    for n in 1..=3 {
        from_chunk(&mut m, &mut env, T0 + ms(3), n, accepted(first, full()));
    }
    assert!(m.read_lease.is_empty());
    assert!(replies(&env.take()).is_empty());
}

#[test]
fn manager_with_lease_reads_off_waits_for_a_barrier() {
    // `[timing] lease_reads = false`: every read waits for a barrier.
    let mut env = Env::new(M);
    env.cfg.timing.lease_reads = false;
    let mut m = after_write(&mut env, [full(), full(), full()]);
    let out = read_at(&mut m, &mut env, T0 + ms(2), 7);
    assert!(replies(&out).is_empty());
    assert_eq!(accepts(&out), 3);
}

#[test]
fn manager_entering_an_epoch_forgets_the_read_lease() {
    // A new epoch (regeneration, migration, relayout) starts without a read lease: the
    // chunks' reports were for the old one.
    let mut env = Env::new(M);
    let mut m = after_write(&mut env, [full(), full(), full()]);
    assert_eq!(m.read_lease.len(), 3);
    m.enter_manager(
        &mut env.ctx(T0 + ms(2)),
        crate::io::observation::EpochCause::Relayout,
    );
    assert!(m.read_lease.is_empty());
    assert_eq!(m.state(), MgrState::Manager);
}

#[test]
fn regular_lease_accept_reports_the_lease_left_until_it_stops_serving() {
    // seed 004 §2 AL/AR, with DESIGN §4 reads: ACCEPTED carries how long the chunk goes
    // on refusing other managers, from now: its lease less δ_c.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, ChunkState::RegularLease, 3, M);
    let v = Version {
        epoch: e(3),
        seq: 1,
    };
    let accept = ToChunk::Accept {
        epoch: e(3),
        ops: vec![(v, crate::data::StoreOp::Register { key: 1, value: 1 })],
        confirm: Default::default(),
    };
    // Past δ_c before expiry it no longer serves, and reports nothing.
    let late = T0 + timing().lease - timing().clock_drift;
    k.on_msg(&mut env.ctx(late), M, accept.clone());
    assert_eq!(
        to_mgrs(&env.take()),
        vec![(M, ToManager::Refused { epoch: e(3) })]
    );
    k.on_msg(&mut env.ctx(T0 + ms(500)), M, accept);
    let left = timing().lease - ms(500) - timing().clock_drift;
    assert_eq!(to_mgrs(&env.take()), vec![(M, accepted(v, Some(left)))]);
}

fn acquire_from(mgr: crate::ids::DeviceId) -> ToChunk {
    ToChunk::Acquire {
        lease: timing().lease,
        mgr,
        epoch: e(3),
    }
}

#[test]
fn newly_awake_chunk_helps_no_other_manager_for_a_lease() {
    // seed 000 §4.2.5 newly awake, as Tenure fills it: a restarted chunk forgot the
    // regular lease it may have held, under which its manager may still answer reads;
    // for a lease after booting it answers no other manager's acquire.
    let mut env = Env::new(d(1));
    let p = chunk(&mut env, ChunkState::RegularLease, 3, M).record;
    let mut k = Chunk::boot(&mut env.ctx(T0), p);
    env.take();
    assert_eq!(k.state, ChunkState::NoLease);
    k.on_msg(&mut env.ctx(T0 + ms(100)), N, acquire_from(N));
    assert!(to_mgrs(&env.take()).is_empty(), "as if still down");
    assert_eq!(k.state, ChunkState::NoLease);
    // After the lease it does.
    k.on_msg(&mut env.ctx(T0 + timing().lease), N, acquire_from(N));
    assert_eq!(
        to_mgrs(&env.take()),
        vec![(
            N,
            ToManager::Ack {
                epoch: e(3),
                prepared: None
            }
        )]
    );
    assert_eq!(k.state, ChunkState::RecoveryLease);
}

#[test]
fn newly_awake_chunk_answers_its_last_lease_manager_at_once() {
    // Its last lease manager is the one that may hold a read lease over it: answering
    // it at once keeps that lease its own.
    let mut env = Env::new(d(1));
    let p = chunk(&mut env, ChunkState::RegularLease, 3, M).record;
    let mut k = Chunk::boot(&mut env.ctx(T0), p);
    env.take();
    k.on_msg(&mut env.ctx(T0 + ms(100)), M, acquire_from(M));
    assert_eq!(
        to_mgrs(&env.take()),
        vec![(
            M,
            ToManager::Ack {
                epoch: e(3),
                prepared: None
            }
        )]
    );
    assert_eq!(k.state, ChunkState::RecoveryLease);
}

// ---- DESIGN §4, reads: the read lease kept by renewals -----------------------------

fn renewal_request(epoch: u64, renewed: Option<Renewed>) -> ToManager {
    ToManager::RenewalRequest {
        epoch: e(epoch),
        renewed,
    }
}

/// The echo of a renewal sent at `sent`, with a fresh lease's report.
fn echo(sent: Instant) -> Option<Renewed> {
    Some(Renewed {
        sent,
        lease_left: full().expect("a lease"),
    })
}

#[test]
fn manager_renewal_request_echo_keeps_the_read_lease_without_a_batch() {
    // seed 000 §5.3.7 manager: renewal request, with DESIGN §4 reads: each chunk echoes
    // a renewal sent at T0 and the lease it has left; with no write at all, a read is
    // answered at once from the committed tables, and the bound counts from the
    // renewal's sending, not from the request's arrival.
    let mut env = Env::new(M);
    let mut m = managing(3);
    for n in 1..=3 {
        from_chunk(
            &mut m,
            &mut env,
            T0 + ms(300),
            n,
            renewal_request(3, echo(T0)),
        );
    }
    let renewed = to_chunks(&env.take());
    assert_eq!(renewed.len(), 3, "each chunk renewed as before");
    assert!((renewed.iter()).all(|(_, r)| matches!(r,
            ToChunk::Renewal { sent, .. } if *sent == Some(T0 + ms(300)))));
    assert_eq!(
        m.read_lease.values().copied().collect::<Vec<_>>(),
        vec![T0 + timing().lease - timing().clock_drift; 3]
    );
    let out = read_at(&mut m, &mut env, T0 + ms(301), 7);
    assert_eq!(replies(&out), vec![(7, true)]);
    assert_eq!(accepts(&out), 0, "no barrier");
}

#[test]
fn manager_renewal_request_without_an_echo_gives_no_read_lease() {
    // A renewal request without an echo (a chunk of an older build, or not under this
    // manager's regular lease), one of another epoch, or one whose echo names a time
    // this manager has not reached (not a renewal it sent) extends nothing: a renewal
    // merely sent proves nothing, and the read waits for a barrier.
    let mut env = Env::new(M);
    let mut m = managing(3);
    let now = T0 + ms(300);
    from_chunk(&mut m, &mut env, now, 1, renewal_request(3, None));
    from_chunk(&mut m, &mut env, now, 2, renewal_request(2, echo(T0)));
    from_chunk(
        &mut m,
        &mut env,
        now,
        3,
        renewal_request(3, echo(now + ms(1))),
    );
    env.take();
    assert!(m.read_lease.is_empty());
    let out = read_at(&mut m, &mut env, now, 7);
    assert!(replies(&out).is_empty());
    assert_eq!(accepts(&out), 3, "a barrier to every live chunk");
}

#[test]
fn planted_read_lease_from_sent_renewal_is_caught() {
    // The planted bug takes the renewal it sends as proof of the chunk's lease: a
    // read lease without any chunk's echo, which the check above refuses.
    let mut env = Env::new(M);
    env.cfg.planted.read_lease_from_sent_renewal = true;
    let mut m = managing(3);
    for n in 1..=3 {
        from_chunk(&mut m, &mut env, T0 + ms(300), n, renewal_request(3, None));
    }
    env.take();
    assert_eq!(
        m.read_lease.len(),
        3,
        "the planted bug trusts a renewal only sent"
    );
    let out = read_at(&mut m, &mut env, T0 + ms(301), 7);
    assert_eq!(
        replies(&out),
        vec![(7, true)],
        "answered with no lease proved"
    );
}

#[test]
fn regular_lease_renewal_request_echoes_the_last_renewal_applied() {
    // seed 000 §4.2.1 regular lease: renewal, then lease renewal: the request echoes
    // when the applied renewal was sent and how long the chunk still refuses other
    // managers (its lease less δ_c).
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, ChunkState::RegularLease, 3, M);
    let at = T0 + ms(500);
    let renewal = ToChunk::Renewal {
        epoch: e(3),
        lease: timing().lease,
        sent: Some(T0 + ms(400)),
    };
    k.on_msg(&mut env.ctx(at), M, renewal);
    let due = at + timing().renewal_period;
    k.on_tick(&mut env.ctx(due));
    let left = timing().lease - timing().renewal_period - timing().clock_drift;
    assert_eq!(
        to_mgrs(&env.take()),
        vec![(
            M,
            renewal_request(
                3,
                Some(Renewed {
                    sent: T0 + ms(400),
                    lease_left: left
                })
            )
        )]
    );
}

#[test]
fn regular_lease_renewal_request_echoes_nothing_without_a_renewal_of_its_epoch() {
    // A chunk that applied no renewal in its epoch (one of another epoch is ignored,
    // seed 000 §4.2.1), or one from a manager of an older build, echoes nothing; nor
    // does a chunk under a recovery lease (§4.2.7: it serves no reads' manager).
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, ChunkState::RegularLease, 3, M);
    let other = ToChunk::Renewal {
        epoch: e(4),
        lease: timing().lease,
        sent: Some(T0 + ms(100)),
    };
    k.on_msg(&mut env.ctx(T0 + ms(100)), M, other);
    let unstamped = ToChunk::Renewal {
        epoch: e(3),
        lease: timing().lease,
        sent: None,
    };
    k.on_msg(&mut env.ctx(T0 + ms(200)), M, unstamped);
    k.on_tick(&mut env.ctx(T0 + ms(200) + timing().renewal_period));
    assert_eq!(to_mgrs(&env.take()), vec![(M, renewal_request(3, None))]);
    let mut k = chunk(&mut env, ChunkState::RecoveryLease, 3, M);
    let stamped = ToChunk::Renewal {
        epoch: e(3),
        lease: timing().lease,
        sent: Some(T0 + ms(100)),
    };
    k.on_msg(&mut env.ctx(T0 + ms(100)), M, stamped);
    k.on_tick(&mut env.ctx(T0 + ms(100) + timing().renewal_period));
    assert_eq!(
        to_mgrs(&env.take()),
        vec![(M, ToManager::RecoveryRenewalRequest { epoch: e(3) })]
    );
}
