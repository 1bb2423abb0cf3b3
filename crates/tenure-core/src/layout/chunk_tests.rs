//! One test per (state, event) row of the chunk transitions of seed 000 §4.2, plus one
//! per `Tenure:` rule of `chunk.rs`. Each test builds a [`Chunk`] directly in the state
//! under test (chunk `c(1)` of a three-chunk layout, leased from manager `M`), delivers
//! one event, and checks the state, the variables and the outputs.
//!
//! In Tenure the reconciliation input of a chunk is its own store state (the manager
//! merges), so `done` follows `epoch transition` at once: the reconciling states are
//! passed through within one event, and their `done` row is tested by calling
//! [`Chunk::done`] on a chunk built in the reconciling state.

use super::chunk::Chunk;
use super::test_support::*;
use super::{ChunkState as S, LeaseType, Prepared};
use crate::io::Output;
use crate::io::observation::Observation;
use crate::io::persist::PersistOp;
use crate::msg::{ToChunk, ToManager};

fn help(epoch: u64) -> ToManager {
    ToManager::Help {
        epoch: e(epoch),
        metadata: layout(),
    }
}

fn epoch_transition(old: u64, new: u64, new_mgr: crate::ids::DeviceId) -> ToChunk {
    et(old, new, layout(), new_mgr)
}

fn prepared(new_epoch: u64, new_mgr: crate::ids::DeviceId) -> Prepared {
    Prepared {
        new_epoch: e(new_epoch),
        metadata: layout(),
        new_mgr,
    }
}

/// The chunk's persisted records, in order (whole, or their heads: the rows are not
/// what these tests look at).
fn put_chunks(out: &[Output]) -> Vec<crate::io::persist::ChunkPersist> {
    persists(out)
        .into_iter()
        .filter_map(|p| match p {
            PersistOp::PutChunk(c) | PersistOp::PutChunkHead(c) => Some(*c),
            _ => None,
        })
        .collect()
}

/// Index in `out` of the first output matching `f`.
fn position(out: &[Output], f: impl Fn(&Output) -> bool) -> usize {
    out.iter().position(f).expect("output present")
}

/// The chunk voted for `new_epoch` to `transition_mgr`, after making the vote durable.
fn assert_voted_after_persist(
    out: &[Output],
    new_epoch: u64,
    transition_mgr: crate::ids::DeviceId,
) {
    let put = put_chunks(out);
    assert_eq!(put.len(), 1, "{out:?}");
    assert_eq!(
        put[0].prepared.as_ref().map(|p| p.new_epoch),
        Some(e(new_epoch))
    );
    let votes: Vec<_> = to_mgrs(out)
        .into_iter()
        .filter(|(_, m)| matches!(m, ToManager::Vote { .. }))
        .collect();
    assert_eq!(votes.len(), 1, "{out:?}");
    assert_eq!(votes[0].0, transition_mgr);
    assert!(
        matches!(votes[0].1, ToManager::Vote { new_epoch: v, tx, .. } if v == e(new_epoch) && tx == TX)
    );
    let p = position(out, |o| matches!(o, Output::Persist(_)));
    let v = position(out, |o| matches!(o, Output::Send { .. }));
    assert!(
        p < v,
        "the prepare is durable before the vote leaves: {out:?}"
    );
}

/// The chunk is in no lease, has just sent help to `to`, and waits `help_wait` for it.
fn assert_no_lease_asked(
    k: &Chunk,
    out: &[Output],
    now: crate::time::Instant,
    to: crate::ids::DeviceId,
) {
    assert_eq!(k.state, S::NoLease);
    assert_eq!(k.lease_expiry, None);
    assert_eq!(k.lease_renewal, None);
    assert_eq!(k.log, None);
    assert_eq!(to_mgrs(out), vec![(to, help(k.record.epoch.0))]);
    assert_eq!(k.help_at, Some(now + timing().help_wait));
}

/// The chunk deleted itself.
fn assert_collected(k: &Chunk, out: &[Output]) {
    assert_eq!(k.state, S::GarbageCollect);
    assert_eq!(persists(out), vec![PersistOp::RemoveChunk(c(1))]);
    assert_eq!(
        observations(out),
        vec![Observation::ChunkCollected { chunk: c(1) }]
    );
    assert_eq!(k.lease_expiry, None);
    assert_eq!(k.help_at, None);
    assert!(sends(out).is_empty());
}

// ---- §4.2.1 regular lease --------------------------------------------------------------

#[test]
fn regular_lease_renewal_same_epoch_extends_lease() {
    // seed 000 §4.2.1 regular lease: renewal(mgr epoch == current epoch)
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RegularLease, 3, M);
    let now = T0 + ms(500);
    let expiry = now + timing().lease;
    k.on_msg(
        &mut env.ctx(now),
        M,
        ToChunk::Renewal {
            epoch: e(3),
            lease: expiry.saturating_since(now),
            sent: None,
        },
    );
    assert_eq!(k.state, S::RegularLease);
    assert_eq!(k.lease_expiry, Some(expiry));
    assert_eq!(k.lease_renewal, Some(now + timing().renewal_period));
    assert!(env.take().is_empty());
}

#[test]
fn regular_lease_renewal_other_epoch_is_ignored() {
    // seed 000 §4.2.1 regular lease: renewal(mgr epoch != current epoch)
    let mut env = Env::new(d(1));
    for epoch in [2, 4] {
        let mut k = chunk(&mut env, S::RegularLease, 3, M);
        let now = T0 + ms(500);
        let renewal = ToChunk::Renewal {
            epoch: e(epoch),
            lease: timing().lease,
            sent: None,
        };
        k.on_msg(&mut env.ctx(now), M, renewal);
        assert_eq!(k.state, S::RegularLease);
        assert_eq!(k.lease_expiry, Some(T0 + timing().lease));
        assert_eq!(k.lease_renewal, Some(T0 + timing().renewal_period));
        assert!(env.take().is_empty());
    }
}

#[test]
fn regular_lease_epoch_transition_logs_and_reconciles() {
    // seed 000 §4.2.1 regular lease: epoch transition(old epoch >= curr epoch)
    // → log, reconciling; Tenure's reconciliation input is ready at once, so done
    // (§4.2.2) follows: the vote is durable, then sent, and the chunk waits in regular
    // transition.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RegularLease, 3, M);
    let now = T0 + ms(100);
    k.on_msg(&mut env.ctx(now), M, epoch_transition(3, 4, M));
    let out = env.take();
    assert_eq!(k.state, S::RegularTransition);
    assert_eq!(k.log, Some(tlog(4, layout(), M)));
    assert_eq!(k.record.prepared, Some(prepared(4, M)));
    assert_eq!(k.record.epoch, e(3), "the epoch changes only at commit");
    assert_eq!(k.transition_deadline, Some(now + timing().transition_wait));
    assert_voted_after_persist(&out, 4, M);
}

#[test]
fn regular_lease_epoch_transition_for_migration_votes_to_new_manager() {
    // seed 000 §4.2.1 regular lease: epoch transition(.., new mgr id) sent by the
    // current manager on migrate (§5.3.7): the vote goes to the new manager, which
    // coordinates the commit.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RegularLease, 3, M);
    k.on_msg(&mut env.ctx(T0), M, epoch_transition(3, 4, N));
    let out = env.take();
    assert_eq!(k.state, S::RegularTransition);
    assert_eq!(k.log, Some(tlog(4, layout(), N)));
    assert_voted_after_persist(&out, 4, N);
}

#[test]
fn regular_lease_epoch_transition_older_epoch_votes_abort() {
    // seed 000 §4.2.1 regular lease: epoch transition(old epoch < curr epoch) is not
    // taken; Tenure (SafeTalk) answers it with a vote to abort.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RegularLease, 3, M);
    k.on_msg(&mut env.ctx(T0), M, epoch_transition(2, 3, M));
    let out = env.take();
    assert_eq!(k.state, S::RegularLease);
    assert_eq!(k.log, None);
    assert_eq!(k.record.prepared, None);
    assert!(persists(&out).is_empty());
    assert_eq!(to_mgrs(&out), vec![(M, vote_abort(3))]);
}

#[test]
fn regular_lease_epoch_transition_from_other_manager_votes_abort() {
    // seed 000 §4.2.1 regular lease: epoch transition. Tenure: vote only for the lease
    // manager.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RegularLease, 3, M);
    k.on_msg(&mut env.ctx(T0), N, epoch_transition(3, 4, N));
    let out = env.take();
    assert_eq!(k.state, S::RegularLease);
    assert_eq!(k.log, None);
    assert!(persists(&out).is_empty());
    assert_eq!(to_mgrs(&out), vec![(N, vote_abort(4))]);
}

#[test]
fn regular_lease_lease_renewal_sends_renewal_request() {
    // seed 000 §4.2.1 regular lease: lease renewal → renewal request(curr epoch) to
    // manager, stay in regular lease (Tenure asks again every half period until renewed).
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RegularLease, 3, M);
    let now = T0 + timing().renewal_period;
    assert_eq!(k.next_timeout(timing().clock_drift), Some(now));
    k.on_tick(&mut env.ctx(now));
    let out = env.take();
    assert_eq!(k.state, S::RegularLease);
    assert_eq!(
        to_mgrs(&out),
        vec![(
            M,
            ToManager::RenewalRequest {
                epoch: e(3),
                renewed: None
            }
        )]
    );
    assert_eq!(k.lease_renewal, Some(now + timing().renewal_period / 2));
    assert_eq!(k.lease_expiry, Some(T0 + timing().lease));
}

#[test]
fn regular_lease_lease_expiry_enters_no_lease() {
    // seed 000 §4.2.1 regular lease: lease expiry → no lease (which asks for help, the
    // suspected manager first).
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RegularLease, 3, M);
    k.lease_renewal = None;
    let now = T0 + timing().lease;
    k.on_tick(&mut env.ctx(now));
    let out = env.take();
    assert_no_lease_asked(&k, &out, now, M);
    assert!(persists(&out).is_empty());
}

#[test]
fn regular_lease_lease_expiry_is_detected_clock_drift_early() {
    // seed 000 §4.2.1 regular lease: lease expiry, with §2's δ_c: the chunk never trusts
    // its lease past `expiry - δ_c` on its own clock.
    let mut env = Env::new(d(1));
    let t = timing();
    let mut k = chunk(&mut env, S::RegularLease, 3, M);
    k.lease_renewal = None;
    let edge = T0 + t.lease - t.clock_drift;
    assert_eq!(k.next_timeout(t.clock_drift), Some(edge));
    assert!(k.lease_valid(&env.ctx(edge - ms(1))));
    assert!(!k.lease_valid(&env.ctx(edge)));
    k.on_tick(&mut env.ctx(edge - ms(1)));
    assert_eq!(k.state, S::RegularLease);
    assert!(env.take().is_empty());
    k.on_tick(&mut env.ctx(edge));
    assert_eq!(k.state, S::NoLease);
}

#[test]
fn regular_lease_fail_goes_newly_awake() {
    // seed 000 §4.2.1 regular lease: fail → newly awake (§4.2.5) → no lease.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RegularLease, 3, M);
    let now = T0 + ms(10);
    k.newly_awake(&mut env.ctx(now));
    let out = env.take();
    assert_no_lease_asked(&k, &out, now, M);
    assert!(k.mgr_attempt_queue.is_empty(), "M was popped");
    assert_eq!(k.record.epoch, e(3));
    assert!(persists(&out).is_empty());
}

#[test]
fn regular_lease_acquire_nacks_with_regular_lease() {
    // seed 000 §4.2.1 regular lease: acquire → nack(.., current manager, regular lease)
    // to the sender; stay in regular lease. (The nack carries the chunk's epoch, which
    // is what §5.3.10's nack(chunk epoch number, ..) expects; the receiver ignores it.)
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RegularLease, 3, M);
    let acquire = ToChunk::Acquire {
        lease: timing().lease,
        mgr: N,
        epoch: e(3),
    };
    k.on_msg(&mut env.ctx(T0), N, acquire);
    let out = env.take();
    assert_eq!(k.state, S::RegularLease);
    assert_eq!(k.lease_mgr, Some(M));
    assert_eq!(k.lease_expiry, Some(T0 + timing().lease));
    assert_eq!(
        to_mgrs(&out),
        vec![(
            N,
            ToManager::Nack {
                epoch: e(3),
                mgr: Some(M),
                lease: LeaseType::Regular
            }
        )]
    );
}

#[test]
fn regular_lease_lose_is_ignored() {
    // seed 000 §4.2.1 regular lease: lose → ignore, stay in regular lease.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RegularLease, 3, M);
    k.on_msg(&mut env.ctx(T0), M, ToChunk::Lose);
    assert_eq!(k.state, S::RegularLease);
    assert_eq!(k.lease_expiry, Some(T0 + timing().lease));
    assert!(env.take().is_empty());
}

#[test]
fn regular_lease_release_is_ignored() {
    // seed 000 §4.2.1 regular lease: release → ignore, stay in regular lease.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RegularLease, 3, M);
    let release = ToChunk::Release {
        epoch: e(3),
        hints: vec![N],
    };
    k.on_msg(&mut env.ctx(T0), M, release);
    assert_eq!(k.state, S::RegularLease);
    assert!(k.mgr_attempt_queue.is_empty());
    assert_eq!(k.lease_expiry, Some(T0 + timing().lease));
    assert!(env.take().is_empty());
}

// ---- §4.2.2 reconciling ------------------------------------------------------------

#[test]
fn reconciling_done_votes_commit_and_enters_regular_transition() {
    // seed 000 §4.2.2 reconciling: done → initiate commit protocol voting commit,
    // regular transition.
    let mut env = Env::new(d(1));
    let mut k = in_transition(&mut env, S::Reconciling, 3, M, tlog(4, layout(), M));
    k.done(&mut env.ctx(T0));
    let out = env.take();
    assert_eq!(k.state, S::RegularTransition);
    assert_eq!(k.record.prepared, Some(prepared(4, M)));
    assert_eq!(k.log, Some(tlog(4, layout(), M)));
    assert_voted_after_persist(&out, 4, M);
}

// ---- §4.2.3 regular transition -----------------------------------------------------

#[test]
fn regular_transition_commit_member_enters_regular_lease_in_new_epoch() {
    // seed 000 §4.2.3 regular transition: commit tx, self ∈ logged new metadata → take
    // the logged epoch, metadata and manager, lease for the commit window, clear the log,
    // regular lease.
    let mut env = Env::new(d(1));
    let new_md = md(&[1, 2, 5]);
    let mut k = in_transition(
        &mut env,
        S::RegularTransition,
        3,
        M,
        tlog(4, new_md.clone(), N),
    );
    let now = T0 + ms(200);
    let expiry = now + timing().commit_window;
    let data = data_with(3, 1, 9);
    let commit = commit_msg(4, data.clone(), expiry.saturating_since(now));
    k.on_msg(&mut env.ctx(now), N, commit);
    let out = env.take();
    assert_eq!(k.state, S::RegularLease);
    assert_eq!(k.record.epoch, e(4));
    assert_eq!(k.record.metadata, new_md);
    assert_eq!(k.record.data, stamped(data, 4));
    assert_eq!(k.record.lease_mgr, Some(N));
    assert_eq!(k.record.prepared, None);
    assert_eq!(k.lease_mgr, Some(N));
    assert_eq!(k.lease_epoch, e(4));
    assert_eq!(k.lease_expiry, Some(expiry));
    assert_eq!(k.lease_renewal, Some(now + timing().renewal_period));
    assert_eq!(k.log, None);
    assert_eq!(k.transition_deadline, None);
    assert_eq!(put_chunks(&out), vec![k.record.clone()]);
    assert_eq!(
        observations(&out),
        vec![Observation::ChunkCommitted {
            chunk: c(1),
            epoch: e(4)
        }]
    );
    assert!(sends(&out).is_empty());
}

#[test]
fn regular_transition_commit_non_member_garbage_collects() {
    // seed 000 §4.2.3 regular transition: commit tx, self ∉ logged new metadata →
    // garbage collect.
    let mut env = Env::new(d(1));
    let mut k = in_transition(
        &mut env,
        S::RegularTransition,
        3,
        M,
        tlog(4, md(&[2, 3, 5]), M),
    );
    let commit = commit_msg(4, Default::default(), timing().commit_window);
    k.on_msg(&mut env.ctx(T0), M, commit);
    let out = env.take();
    assert_collected(&k, &out);
    assert_eq!(k.log, None);
}

#[test]
fn regular_transition_commit_from_non_transition_manager_is_ignored() {
    // seed 000 §4.2.3 regular transition: commit tx / abort tx. Tenure (SafeTalk): only
    // the transition manager of the logged transition, for that epoch, commits or aborts it.
    let mut env = Env::new(d(1));
    let events = [
        (N, commit_msg(4, Default::default(), timing().commit_window)),
        (M, commit_msg(5, Default::default(), timing().commit_window)),
        (N, abort_msg(4, timing().abort_window)),
    ];
    for (from, msg) in events {
        let mut k = in_transition(&mut env, S::RegularTransition, 3, M, tlog(4, layout(), M));
        k.on_msg(&mut env.ctx(T0), from, msg);
        assert_eq!(k.state, S::RegularTransition);
        assert_eq!(k.record.epoch, e(3));
        assert_eq!(k.log, Some(tlog(4, layout(), M)));
        assert!(env.take().is_empty());
    }
}

#[test]
fn regular_transition_abort_returns_to_regular_lease() {
    // seed 000 §4.2.3 regular transition: abort tx → lease for the abort window, clear
    // the log, regular lease (in the old epoch). Tenure: the prepare record is cleared
    // durably.
    let mut env = Env::new(d(1));
    let mut k = in_transition(&mut env, S::RegularTransition, 3, M, tlog(4, layout(), M));
    let now = T0 + ms(300);
    let expiry = now + timing().abort_window;
    let abort = abort_msg(4, expiry.saturating_since(now));
    k.on_msg(&mut env.ctx(now), M, abort);
    let out = env.take();
    assert_eq!(k.state, S::RegularLease);
    assert_eq!(k.record.epoch, e(3));
    assert_eq!(k.lease_mgr, Some(M));
    assert_eq!(k.lease_expiry, Some(expiry));
    assert_eq!(k.lease_renewal, Some(now + timing().renewal_period));
    assert_eq!(k.log, None);
    assert_eq!(k.transition_deadline, None);
    assert_eq!(k.record.prepared, None);
    assert_eq!(put_chunks(&out).len(), 1);
    assert!(sends(&out).is_empty());
}

#[test]
fn regular_transition_fail_goes_newly_awake() {
    // seed 000 §4.2.3 regular transition: fail → newly awake → no lease. The log is
    // transient and lost; the prepare record is durable and kept.
    let mut env = Env::new(d(1));
    let mut k = in_transition(&mut env, S::RegularTransition, 3, M, tlog(4, layout(), M));
    k.newly_awake(&mut env.ctx(T0));
    assert!(
        env.take().is_empty(),
        "the vote's window is waited out first"
    );
    assert_eq!(k.state, S::NewlyAwake);
    let now = T0 + timing().transition_wait;
    k.on_tick(&mut env.ctx(now));
    let out = env.take();
    assert_no_lease_asked(&k, &out, now, M);
    assert_eq!(k.transition_deadline, None);
    assert_eq!(k.record.prepared, Some(prepared(4, M)));
}

#[test]
fn regular_transition_release_is_ignored() {
    // seed 000 §4.2.3 regular transition: release → "ignored in this state". (The seed's
    // action line says `state ← regular lease`, which contradicts "ignored" and would
    // leave the chunk serving mid-commit; the implementation stays in regular transition.)
    let mut env = Env::new(d(1));
    let mut k = in_transition(&mut env, S::RegularTransition, 3, M, tlog(4, layout(), M));
    let release = ToChunk::Release {
        epoch: e(3),
        hints: vec![N],
    };
    k.on_msg(&mut env.ctx(T0), M, release);
    assert_eq!(k.state, S::RegularTransition);
    assert_eq!(k.log, Some(tlog(4, layout(), M)));
    assert!(k.mgr_attempt_queue.is_empty());
    assert!(env.take().is_empty());
}

// ---- §4.2.4 garbage collect --------------------------------------------------------

#[test]
fn garbage_collect_acquire_answers_nochunk() {
    // seed 000 §4.2.4 garbage collect: acquire → nochunk(chunk) to the sender.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::GarbageCollect, 3, M);
    let acquire = ToChunk::Acquire {
        lease: timing().lease,
        mgr: N,
        epoch: e(3),
    };
    k.on_msg(&mut env.ctx(T0), N, acquire);
    assert_eq!(k.state, S::GarbageCollect);
    assert_eq!(to_mgrs(&env.take()), vec![(N, ToManager::NoChunk)]);
}

#[test]
fn garbage_collect_other_messages_are_ignored() {
    // seed 000 §4.2.4 garbage collect: all other messages are ignored.
    let mut env = Env::new(d(1));
    let t = timing();
    let msgs = vec![
        ToChunk::Renewal {
            epoch: e(3),
            lease: t.lease,
            sent: None,
        },
        epoch_transition(3, 4, M),
        commit_msg(4, Default::default(), t.lease),
        abort_msg(4, t.lease),
        ToChunk::Lose,
        ToChunk::Release {
            epoch: e(3),
            hints: vec![N],
        },
        ToChunk::TransferLease {
            epoch: e(3),
            new_mgr: N,
            lease: t.lease,
        },
        ToChunk::Redirect { new_mgr: N },
    ];
    for msg in msgs {
        let mut k = chunk(&mut env, S::GarbageCollect, 3, M);
        k.on_msg(&mut env.ctx(T0), M, msg.clone());
        assert_eq!(k.state, S::GarbageCollect, "{msg:?}");
        assert!(env.take().is_empty(), "{msg:?}");
        k.on_tick(&mut env.ctx(T0 + t.lease * 10));
        assert!(env.take().is_empty());
    }
}

// ---- §4.2.5 newly awake ------------------------------------------------------------

#[test]
fn newly_awake_boot_clears_transient_state_and_asks_last_manager() {
    // seed 000 §4.2.5 newly awake: on entry, clear the log and transient data,
    // mgr_attempt_queue ← lease mgr, no lease (whose loop asks that manager first).
    let mut env = Env::new(d(1));
    let p = chunk(&mut env, S::RegularLease, 3, M).record;
    let k = Chunk::boot(&mut env.ctx(T0), p.clone());
    let out = env.take();
    assert_no_lease_asked(&k, &out, T0, M);
    assert_eq!(k.record, p, "persistent state survives the restart");
    assert_eq!(k.lease_mgr, Some(M));
    assert_eq!(k.lease_epoch, e(3));
    assert_eq!(k.transition_deadline, None);
    assert!(k.mgr_attempt_queue.is_empty());
    assert!(persists(&out).is_empty());
}

#[test]
fn no_lease_after_a_restart_asks_only_its_last_manager_until_the_hold_ends() {
    // seed 000 §4.2.6 no lease: the help loop; Tenure: while the restarted chunk answers
    // only its last lease manager (boot hold, a lease long), every help goes to that
    // manager, which may be starting as well; after the hold, the loop goes on as the
    // seed has it (the queue, popped by the first help, is empty: directors).
    let mut env = Env::new(d(1));
    let t = timing();
    let p = chunk(&mut env, S::RegularLease, 3, M).record;
    let mut k = Chunk::boot(&mut env.ctx(T0), p);
    assert_no_lease_asked(&k, &env.take(), T0, M);
    let mut now = T0;
    while now + t.help_wait < T0 + t.lease {
        now = now + t.help_wait;
        k.on_tick(&mut env.ctx(now));
        assert_no_lease_asked(&k, &env.take(), now, M);
    }
    now = now + t.help_wait;
    assert!(now >= T0 + t.lease, "the hold is over");
    k.on_tick(&mut env.ctx(now));
    let helps = to_mgrs(&env.take());
    assert!(
        matches!(&helps[..], [(to, _)] if *to != M),
        "a director: {helps:?}"
    );
}

#[test]
fn no_lease_after_a_restart_passes_over_a_silent_last_manager() {
    // The hold keeps the chunk from answering others, not from asking them: a last
    // manager that has fallen silent is passed over as before.
    let mut env = Env::new(d(1));
    let t = timing();
    env.heard.insert(M, T0);
    let p = chunk(&mut env, S::RegularLease, 3, M).record;
    let now = T0 + t.silence();
    let _k = Chunk::boot(&mut env.ctx(now), p);
    let helps = to_mgrs(&env.take());
    assert!(matches!(&helps[..], [(to, _)] if *to != M), "{helps:?}");
}

#[test]
fn newly_awake_holding_a_vote_waits_out_its_window_before_asking() {
    // seed 000 §4.2.5 newly awake "(after some delay)", as Tenure fills it: a chunk that
    // rebooted with a prepare record it never saw decided ignores every message for
    // `transition_wait`, longer than any transition manager counts the vote, then asks its last
    // manager. (sim seed 46832: the rebooted chunk joined an e5 regeneration while its e4
    // vote was still counted, and a manager of e4 appeared after the manager of e5.)
    let mut env = Env::new(d(1));
    let t = timing();
    assert!(t.transition_wait > t.transition_timeout + t.clock_drift * 2);
    let mut p = chunk(&mut env, S::RegularLease, 3, M).record;
    p.prepared = Some(prepared(4, N));
    let mut k = Chunk::boot(&mut env.ctx(T0), p.clone());
    assert_eq!(k.state, S::NewlyAwake);
    assert_eq!(k.next_timeout(t.clock_drift), Some(T0 + t.transition_wait));
    assert!(env.take().is_empty());
    let acquire = ToChunk::Acquire {
        lease: t.lease,
        mgr: d(2),
        epoch: e(3),
    };
    k.on_msg(&mut env.ctx(T0 + ms(10)), d(2), acquire);
    k.on_tick(&mut env.ctx(T0 + t.transition_wait - ms(1)));
    assert!(env.take().is_empty(), "no ack, no help inside the window");
    assert_eq!(k.state, S::NewlyAwake);
    let now = T0 + t.transition_wait;
    k.on_tick(&mut env.ctx(now));
    let out = env.take();
    assert_no_lease_asked(&k, &out, now, M);
    assert_eq!(
        k.record, p,
        "the prepare record is still reported afterwards"
    );
}

#[test]
fn newly_awake_without_lease_manager_asks_a_random_director() {
    // seed 000 §4.2.5 newly awake: mgr_attempt_queue ← lease mgr (none) → the no-lease
    // loop picks a director at random.
    let mut env = Env::new(d(1));
    let mut p = chunk(&mut env, S::RegularLease, 3, M).record;
    p.lease_mgr = None;
    let k = Chunk::boot(&mut env.ctx(T0), p);
    let out = env.take();
    let helps = to_mgrs(&out);
    assert_eq!(helps.len(), 1);
    assert!(env.cfg.cluster.devices.contains(&helps[0].0));
    assert_eq!(helps[0].1, help(3));
    assert_eq!(k.state, S::NoLease);
}

// ---- §4.2.6 no lease ---------------------------------------------------------------

#[test]
fn no_lease_help_loop_pops_queue_by_precedence_then_picks_directors() {
    // seed 000 §4.2.6 no lease: repeatedly pop mgr_attempt_queue (decreasing precedence)
    // or, when it is empty, pick a director at random; send help(epoch, metadata);
    // wait long enough for an answer (one help outstanding at a time).
    let mut env = Env::new(d(1));
    let t = timing();
    let mut k = chunk(&mut env, S::NoLease, 3, M);
    k.mgr_attempt_queue = vec![d(2), M, N];
    let ranked: Vec<_> = env
        .cfg
        .cluster
        .ranked_devices(STORE)
        .into_iter()
        .filter(|x| [d(2), M, N].contains(x))
        .collect();
    // Not yet: the previous help may still be answered.
    k.on_tick(&mut env.ctx(T0 + t.help_wait - ms(1)));
    assert!(env.take().is_empty());
    let mut now = T0 + t.help_wait;
    for want in ranked {
        assert_eq!(k.next_timeout(t.clock_drift), Some(now));
        k.on_tick(&mut env.ctx(now));
        assert_eq!(to_mgrs(&env.take()), vec![(want, help(3))]);
        assert_eq!(k.help_at, Some(now + t.help_wait));
        now = now + t.help_wait;
    }
    assert!(k.mgr_attempt_queue.is_empty());
    // Tenure: the directors in the store's precedence order, turning with each help
    // (every one is tried), rather than at random.
    let order = env.cfg.cluster.ranked_devices(STORE);
    let mut asked = Vec::new();
    for _ in 0..2 * order.len() {
        k.on_tick(&mut env.ctx(now));
        let out = to_mgrs(&env.take());
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].1, help(3));
        asked.push(out[0].0);
        now = now + t.help_wait;
    }
    let n = order.len();
    let turn = (k.helps_sent as usize - 2 * n) % n;
    let want: Vec<_> = (0..2 * n).map(|i| order[(turn + i) % n]).collect();
    assert_eq!(asked, want);
    assert_eq!(k.state, S::NoLease);
}

#[test]
fn no_lease_help_loop_passes_over_silent_devices() {
    // seed 000 §4.2.6 ("an actual design will want ... to only contact reachable director
    // nodes"): at lease expiry the lease manager has fallen silent (heard from before,
    // not for `silence`): it is dropped from the queue, and the help goes to the
    // store's first live device by precedence. Every chunk of the store asks that one.
    let mut env = Env::new(d(1));
    let t = timing();
    let mut k = chunk(&mut env, S::RegularLease, 3, M);
    k.lease_renewal = None;
    let now = T0 + t.lease;
    env.heard.insert(M, now.saturating_sub(t.silence()));
    let live: Vec<_> = env
        .cfg
        .cluster
        .ranked_devices(STORE)
        .into_iter()
        .filter(|x| *x != M)
        .collect();
    k.on_tick(&mut env.ctx(now));
    assert_eq!(k.state, S::NoLease);
    assert_eq!(to_mgrs(&env.take()), vec![(live[0], help(3))]);
    assert!(k.mgr_attempt_queue.is_empty());
    // Heard from just inside the window: not silent, asked first as the seed says.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RegularLease, 3, M);
    k.lease_renewal = None;
    env.heard.insert(M, now.saturating_sub(t.silence()) + ms(1));
    k.on_tick(&mut env.ctx(now));
    assert_eq!(to_mgrs(&env.take()), vec![(M, help(3))]);
}

#[test]
fn no_lease_help_loop_asks_the_lookup_hint_first_then_directors() {
    // DESIGN §3 (Tenure fills seed 000's open "finding a manager"): with an empty
    // mgr_attempt_queue, the first help after entering no lease goes to the manager the
    // lookup service names for the store; later ones to random directors.
    let mut env = Env::new(d(1));
    let t = timing();
    let hinted = d(4);
    env.hints.insert(STORE, hinted);
    let mut k = chunk(&mut env, S::RegularLease, 3, M);
    k.lease_renewal = None;
    k.mgr_attempt_queue.clear();
    let now = T0 + t.lease;
    k.on_tick(&mut env.ctx(now));
    let out = to_mgrs(&env.take());
    assert_eq!(k.state, S::NoLease);
    let mut asked: Vec<crate::ids::DeviceId> = out.iter().map(|(to, _)| *to).collect();
    let mut now = now;
    for _ in 0..4 {
        now = now + t.help_wait;
        k.on_tick(&mut env.ctx(now));
        asked.extend(to_mgrs(&env.take()).iter().map(|(to, _)| *to));
    }
    // Right after the queued managers (none here), the hint; then random directors.
    assert_eq!(asked[0], hinted, "{asked:?}");
    assert_eq!(k.helps_sent, 5);
}

#[test]
fn no_lease_fail_goes_newly_awake() {
    // seed 000 §4.2.6 no lease: fail → newly awake (which queues the last lease manager).
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::NoLease, 3, M);
    k.mgr_attempt_queue = vec![N];
    k.newly_awake(&mut env.ctx(T0));
    let out = env.take();
    assert_no_lease_asked(&k, &out, T0, M);
    assert!(k.mgr_attempt_queue.is_empty(), "the queue was reset to [M]");
}

#[test]
fn no_lease_lose_garbage_collects() {
    // seed 000 §4.2.6 no lease: lose → garbage collect.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::NoLease, 3, M);
    k.on_msg(&mut env.ctx(T0), N, ToChunk::Lose);
    let out = env.take();
    assert_collected(&k, &out);
    k.on_tick(&mut env.ctx(T0 + timing().help_wait));
    assert!(env.take().is_empty(), "the help loop has stopped");
}

#[test]
fn no_lease_acquire_same_epoch_acks_and_takes_recovery_lease() {
    // seed 000 §4.2.6 no lease: acquire(new epoch number == current) → ack(current
    // epoch) to the new manager; lease expiry, renewal, mgr ← new mgr, queue ← nil,
    // recovery lease.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::NoLease, 3, M);
    k.mgr_attempt_queue = vec![d(2)];
    let now = T0 + ms(50);
    let expiry = now + timing().lease;
    let acquire = ToChunk::Acquire {
        lease: expiry.saturating_since(now),
        mgr: N,
        epoch: e(3),
    };
    k.on_msg(&mut env.ctx(now), N, acquire);
    let out = env.take();
    assert_eq!(
        to_mgrs(&out),
        vec![(
            N,
            ToManager::Ack {
                epoch: e(3),
                prepared: None
            }
        )]
    );
    assert_eq!(k.state, S::RecoveryLease);
    assert_eq!(k.lease_expiry, Some(expiry));
    assert_eq!(k.lease_renewal, Some(now + timing().renewal_period));
    assert_eq!(k.lease_mgr, Some(N));
    assert_eq!(k.lease_epoch, e(3));
    assert!(k.mgr_attempt_queue.is_empty());
    assert_eq!(k.help_at, None);
    assert_eq!(k.record.epoch, e(3));
    assert!(persists(&out).is_empty());
}

#[test]
fn no_lease_acquire_newer_epoch_acks_conditional_and_takes_recovery_lease() {
    // seed 000 §4.2.6 no lease: acquire(new epoch number > current) →
    // ack-conditional(new epoch, current epoch, metadata) to mgr, recovery lease.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::NoLease, 3, M);
    let expiry = T0 + timing().lease;
    let acquire = ToChunk::Acquire {
        lease: expiry.saturating_since(T0),
        mgr: N,
        epoch: e(5),
    };
    k.on_msg(&mut env.ctx(T0), N, acquire);
    let out = env.take();
    assert_eq!(
        to_mgrs(&out),
        vec![(
            N,
            ToManager::AckConditional {
                mgr_epoch: e(5),
                chunk_epoch: e(3),
                metadata: layout(),
                prepared: None
            }
        )]
    );
    assert_eq!(k.state, S::RecoveryLease);
    assert_eq!(k.lease_mgr, Some(N));
    assert_eq!(k.lease_expiry, Some(expiry));
    assert_eq!(
        k.lease_epoch,
        e(5),
        "Tenure: the lease belongs to the epoch granted"
    );
    assert_eq!(k.record.epoch, e(3));
}

#[test]
fn no_lease_acquire_older_epoch_acks_conditional_not_nack() {
    // seed 000 §4.2.6 no lease: acquire(new epoch number < current). The seed sends
    // nack(current epoch, nil, no lease) and stays in no lease. Tenure (documented): answer
    // ack-conditional with the newer epoch and metadata and take the recovery lease, so the
    // recovering manager moves forward (§5.3.10 ack-conditional).
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::NoLease, 3, M);
    let expiry = T0 + timing().lease;
    let acquire = ToChunk::Acquire {
        lease: expiry.saturating_since(T0),
        mgr: N,
        epoch: e(2),
    };
    k.on_msg(&mut env.ctx(T0), N, acquire);
    let out = env.take();
    assert_eq!(
        to_mgrs(&out),
        vec![(
            N,
            ToManager::AckConditional {
                mgr_epoch: e(2),
                chunk_epoch: e(3),
                metadata: layout(),
                prepared: None
            }
        )]
    );
    assert_eq!(k.state, S::RecoveryLease);
    assert_eq!(k.lease_mgr, Some(N));
    assert_eq!(
        k.lease_epoch,
        e(3),
        "the lease is at the chunk's (newer) epoch"
    );
}

#[test]
fn no_lease_acquire_reports_prepared_vote() {
    // seed 000 §4.2.6 no lease: acquire → ack. Tenure: the ack carries the uncommitted
    // transition the chunk voted for, so a regenerating manager never reuses its epoch.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::NoLease, 3, M);
    k.record.prepared = Some(prepared(4, M));
    let acquire = ToChunk::Acquire {
        lease: timing().lease,
        mgr: N,
        epoch: e(3),
    };
    k.on_msg(&mut env.ctx(T0), N, acquire);
    assert_eq!(
        to_mgrs(&env.take()),
        vec![(
            N,
            ToManager::Ack {
                epoch: e(3),
                prepared: Some(prepared(4, M))
            }
        )]
    );
}

#[test]
fn no_lease_redirect_appends_to_attempt_queue() {
    // seed 000 §4.2.6 no lease: redirect(new mgr) → append to mgr_attempt_queue, stay in
    // no lease; the next help goes there.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::NoLease, 3, M);
    k.on_msg(&mut env.ctx(T0), M, ToChunk::Redirect { new_mgr: N });
    k.on_msg(&mut env.ctx(T0), M, ToChunk::Redirect { new_mgr: N });
    assert_eq!(k.state, S::NoLease);
    assert_eq!(k.mgr_attempt_queue, vec![N], "appended once");
    assert!(env.take().is_empty(), "waits for the outstanding help");
    let now = T0 + timing().help_wait;
    k.on_tick(&mut env.ctx(now));
    assert_eq!(to_mgrs(&env.take()), vec![(N, help(3))]);
}

// ---- §4.2.7 recovery lease ---------------------------------------------------------

#[test]
fn recovery_lease_epoch_transition_enters_recovery_reconciling() {
    // seed 000 §4.2.7 recovery lease: epoch transition(old epoch >= curr epoch) → log,
    // recovery reconciling; done (§4.2.9) follows at once → recovery transition.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RecoveryLease, 3, M);
    k.on_msg(&mut env.ctx(T0), M, epoch_transition(3, 4, M));
    let out = env.take();
    assert_eq!(k.state, S::RecoveryTransition);
    assert_eq!(k.log, Some(tlog(4, layout(), M)));
    assert_eq!(k.record.prepared, Some(prepared(4, M)));
    assert_eq!(k.transition_deadline, Some(T0 + timing().transition_wait));
    assert_voted_after_persist(&out, 4, M);
}

#[test]
fn recovery_lease_epoch_transition_with_state_reconciles_before_voting() {
    // seed 000 §5.3.8 relayout reconciling ("chunks are being reconciled") seen from a
    // chunk that does not hold the store's state (new, or recovered and stale): the
    // relayout's epoch transition carries it; the chunk merges it into its own, makes
    // it durable with the prepare, and votes with it.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RecoveryLease, 3, M);
    let state = data_with(3, 7, 42);
    let ToChunk::EpochTransition {
        old_epoch,
        new_epoch,
        tx,
        metadata,
        new_mgr,
        ..
    } = epoch_transition(3, 4, M)
    else {
        unreachable!()
    };
    let msg = ToChunk::EpochTransition {
        old_epoch,
        new_epoch,
        tx,
        metadata,
        new_mgr,
        data: Some(Box::new(state.clone())),
    };
    k.on_msg(&mut env.ctx(T0), M, msg);
    let out = env.take();
    assert_eq!(k.state, S::RecoveryTransition);
    assert_eq!(k.record.data, state, "the chunk holds the store's state");
    assert_eq!(put_chunks(&out)[0].data, state, "durable with the prepare");
    assert_voted_after_persist(&out, 4, M);
    let voted = to_mgrs(&out).into_iter().find_map(|(_, m)| match m {
        ToManager::Vote { data, .. } => Some(*data),
        _ => None,
    });
    assert_eq!(voted, Some(state), "the vote carries it");
}

#[test]
fn recovery_lease_epoch_transition_older_epoch_votes_abort() {
    // seed 000 §4.2.7 recovery lease: epoch transition(old epoch < curr epoch) is not
    // taken; Tenure answers with a vote to abort.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RecoveryLease, 3, M);
    k.on_msg(&mut env.ctx(T0), M, epoch_transition(2, 3, M));
    let out = env.take();
    assert_eq!(k.state, S::RecoveryLease);
    assert_eq!(k.log, None);
    assert!(persists(&out).is_empty());
    assert_eq!(to_mgrs(&out), vec![(M, vote_abort(3))]);
}

#[test]
fn recovery_lease_epoch_transition_never_votes_twice_for_an_epoch() {
    // seed 000 §4.2.7 recovery lease: epoch transition. Tenure: never vote twice for an
    // epoch number — a chunk that voted for epoch 4 (outcome unknown) refuses another
    // transition to 4 but takes one to 5.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RecoveryLease, 3, M);
    k.record.prepared = Some(prepared(4, N));
    k.on_msg(&mut env.ctx(T0), M, epoch_transition(3, 4, M));
    let out = env.take();
    assert_eq!(k.state, S::RecoveryLease);
    assert_eq!(to_mgrs(&out), vec![(M, vote_abort(4))]);
    assert_eq!(k.record.prepared, Some(prepared(4, N)));
    k.on_msg(&mut env.ctx(T0), M, epoch_transition(3, 5, M));
    let out = env.take();
    assert_eq!(k.state, S::RecoveryTransition);
    assert_voted_after_persist(&out, 5, M);
}

#[test]
fn recovery_lease_lease_renewal_sends_recovery_renewal_request() {
    // seed 000 §4.2.7 recovery lease: lease renewal → recovery renewal request(curr
    // epoch) to mgr, stay in recovery lease.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RecoveryLease, 3, M);
    let now = T0 + timing().renewal_period;
    k.on_tick(&mut env.ctx(now));
    assert_eq!(k.state, S::RecoveryLease);
    assert_eq!(
        to_mgrs(&env.take()),
        vec![(M, ToManager::RecoveryRenewalRequest { epoch: e(3) })]
    );
}

#[test]
fn recovery_lease_lease_expiry_enters_no_lease() {
    // seed 000 §4.2.7 recovery lease: lease expiry → no lease.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RecoveryLease, 3, M);
    let now = T0 + timing().lease - timing().clock_drift;
    k.on_tick(&mut env.ctx(now));
    let out = env.take();
    assert_no_lease_asked(&k, &out, now, M);
}

#[test]
fn recovery_lease_fail_goes_newly_awake() {
    // seed 000 §4.2.7 recovery lease: fail → newly awake → no lease, asking the last
    // *persisted* lease manager (the recovery lease's manager is volatile).
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RecoveryLease, 3, M);
    k.lease_mgr = Some(N);
    k.newly_awake(&mut env.ctx(T0));
    let out = env.take();
    assert_no_lease_asked(&k, &out, T0, M);
}

#[test]
fn recovery_lease_renewal_same_epoch_extends_lease() {
    // seed 000 §4.2.7 recovery lease: renewal(mgr epoch == curr epoch) → lease expiry,
    // renewal, stay. (The seed's `lease renewal ← lease renewal period` means
    // now + period.)
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RecoveryLease, 3, M);
    let now = T0 + ms(600);
    let expiry = now + timing().lease;
    k.on_msg(
        &mut env.ctx(now),
        M,
        ToChunk::Renewal {
            epoch: e(3),
            lease: expiry.saturating_since(now),
            sent: None,
        },
    );
    assert_eq!(k.state, S::RecoveryLease);
    assert_eq!(k.lease_expiry, Some(expiry));
    assert_eq!(k.lease_renewal, Some(now + timing().renewal_period));
    assert!(env.take().is_empty());
}

#[test]
fn recovery_lease_renewal_older_epoch_or_other_manager_is_ignored() {
    // seed 000 §4.2.7 recovery lease: renewal(mgr epoch != curr epoch) is ignored.
    // Tenure: a renewal from another manager than the lease's is ignored too.
    let mut env = Env::new(d(1));
    for (from, epoch) in [(M, 2), (N, 3)] {
        let mut k = chunk(&mut env, S::RecoveryLease, 3, M);
        let renewal = ToChunk::Renewal {
            epoch: e(epoch),
            lease: timing().lease * 3,
            sent: None,
        };
        k.on_msg(&mut env.ctx(T0 + ms(600)), from, renewal);
        assert_eq!(k.lease_expiry, Some(T0 + timing().lease));
        assert_eq!(k.lease_mgr, Some(M));
        assert!(env.take().is_empty());
    }
}

#[test]
fn recovery_lease_renewal_newer_epoch_from_lease_manager_moves_lease_epoch() {
    // seed 000 §4.2.7 recovery lease: renewal. Tenure: the lease belongs to the epoch it
    // was granted in; its manager may renew it at a later epoch (it moved its recovery
    // forward, §5.3.10 ack-conditional).
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RecoveryLease, 3, M);
    let expiry = T0 + timing().lease * 2;
    k.on_msg(
        &mut env.ctx(T0),
        M,
        ToChunk::Renewal {
            epoch: e(5),
            lease: expiry.saturating_since(T0),
            sent: None,
        },
    );
    assert_eq!(k.lease_expiry, Some(expiry));
    assert_eq!(k.lease_epoch, e(5));
    assert_eq!(k.record.epoch, e(3));
}

#[test]
fn recovery_lease_release_from_lease_manager_enters_no_lease_with_hints() {
    // seed 000 §4.2.7 recovery lease: release(epoch == current, from current mgr) →
    // append the hints to mgr_attempt_queue, no lease (which asks the best hint first).
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RecoveryLease, 3, M);
    let release = ToChunk::Release {
        epoch: e(3),
        hints: vec![N],
    };
    let now = T0 + ms(5);
    k.on_msg(&mut env.ctx(now), M, release);
    let out = env.take();
    assert_no_lease_asked(&k, &out, now, N);
}

#[test]
fn recovery_lease_release_other_epoch_or_sender_is_ignored() {
    // seed 000 §4.2.7 recovery lease: release with (epoch != current) or (sender !=
    // current mgr) → stay in recovery lease.
    let mut env = Env::new(d(1));
    for (from, epoch) in [(M, 2), (N, 3)] {
        let mut k = chunk(&mut env, S::RecoveryLease, 3, M);
        let release = ToChunk::Release {
            epoch: e(epoch),
            hints: vec![d(2)],
        };
        k.on_msg(&mut env.ctx(T0), from, release);
        assert_eq!(k.state, S::RecoveryLease);
        assert_eq!(k.lease_mgr, Some(M));
        assert!(k.mgr_attempt_queue.is_empty());
        assert!(env.take().is_empty());
    }
}

#[test]
fn recovery_lease_release_at_later_epoch_from_lease_manager_is_honoured() {
    // seed 000 §4.2.7 recovery lease: release. Tenure: the lease's manager may release
    // it at a later epoch than the chunk's (it moved its recovery forward).
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RecoveryLease, 3, M);
    let release = ToChunk::Release {
        epoch: e(5),
        hints: vec![],
    };
    k.on_msg(&mut env.ctx(T0), M, release);
    assert_eq!(k.state, S::NoLease);
}

#[test]
fn recovery_lease_lose_garbage_collects() {
    // seed 000 §4.2.7 recovery lease: lose → garbage collect.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RecoveryLease, 3, M);
    k.on_msg(&mut env.ctx(T0), M, ToChunk::Lose);
    let out = env.take();
    assert_collected(&k, &out);
}

#[test]
fn recovery_lease_acquire_by_other_manager_nacks() {
    // seed 000 §4.2.7 recovery lease: acquire(new mgr != current mgr) →
    // nack(current epoch, current mgr, recovery lease) to the sender; stay.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RecoveryLease, 3, M);
    for epoch in [2, 3, 4] {
        let acquire = ToChunk::Acquire {
            lease: timing().lease * 2,
            mgr: N,
            epoch: e(epoch),
        };
        k.on_msg(&mut env.ctx(T0), N, acquire);
        assert_eq!(
            to_mgrs(&env.take()),
            vec![(
                N,
                ToManager::Nack {
                    epoch: e(3),
                    mgr: Some(M),
                    lease: LeaseType::Recovery
                }
            )]
        );
        assert_eq!(k.state, S::RecoveryLease);
        assert_eq!(k.lease_mgr, Some(M));
        assert_eq!(k.lease_expiry, Some(T0 + timing().lease));
    }
}

#[test]
fn recovery_lease_acquire_by_same_manager_acks_again() {
    // seed 000 §4.2.7 recovery lease: acquire(new mgr == current mgr, epoch != current)
    // — the seed nacks. Tenure (documented): the same manager re-acquiring (it lost the
    // ack, moved its recovery forward, or started over) gets an ack again.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RecoveryLease, 3, M);
    let acquire = |epoch| ToChunk::Acquire {
        lease: timing().lease,
        mgr: M,
        epoch: e(epoch),
    };
    k.on_msg(&mut env.ctx(T0), M, acquire(3));
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
    k.on_msg(&mut env.ctx(T0), M, acquire(5));
    assert_eq!(
        to_mgrs(&env.take()),
        vec![(
            M,
            ToManager::AckConditional {
                mgr_epoch: e(5),
                chunk_epoch: e(3),
                metadata: layout(),
                prepared: None
            }
        )]
    );
    assert_eq!(k.lease_epoch, e(5));
    assert_eq!(k.state, S::RecoveryLease);
    assert_eq!(k.lease_mgr, Some(M));
}

#[test]
fn recovery_lease_transfer_lease_same_epoch_moves_lease() {
    // seed 000 §4.2.7 recovery lease: transfer lease(epoch == current, new mgr, expiry) →
    // transfernotice to the old lease mgr, transferack to the sender, lease mgr ← new mgr,
    // new expiry and renewal; stay in recovery lease.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RecoveryLease, 3, M);
    // Tenure: the transfer ack reports the chunk's undecided prepare, as an ack does.
    k.record.prepared = Some(prepared(4, M));
    let now = T0 + ms(20);
    let expiry = now + timing().lease;
    let transfer = ToChunk::TransferLease {
        epoch: e(3),
        new_mgr: N,
        lease: expiry.saturating_since(now),
    };
    k.on_msg(&mut env.ctx(now), N, transfer);
    assert_eq!(
        to_mgrs(&env.take()),
        vec![
            (
                M,
                ToManager::TransferNotice {
                    epoch: e(3),
                    mgr: N
                }
            ),
            (
                N,
                ToManager::TransferAck {
                    epoch: e(3),
                    mgr: N,
                    prepared: Some(prepared(4, M))
                }
            ),
        ]
    );
    assert_eq!(k.state, S::RecoveryLease);
    assert_eq!(k.lease_mgr, Some(N));
    assert_eq!(k.lease_expiry, Some(expiry));
    assert_eq!(k.lease_renewal, Some(now + timing().renewal_period));
}

#[test]
fn recovery_lease_transfer_lease_other_epoch_nacks() {
    // seed 000 §4.2.7 recovery lease: transfer lease(epoch != current) → nack(current
    // epoch, current mgr) to the sender; stay, lease unchanged.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RecoveryLease, 3, M);
    let transfer = ToChunk::TransferLease {
        epoch: e(4),
        new_mgr: N,
        lease: timing().lease * 2,
    };
    k.on_msg(&mut env.ctx(T0), N, transfer);
    assert_eq!(
        to_mgrs(&env.take()),
        vec![(
            N,
            ToManager::Nack {
                epoch: e(3),
                mgr: Some(M),
                lease: LeaseType::Recovery
            }
        )]
    );
    assert_eq!(k.state, S::RecoveryLease);
    assert_eq!(k.lease_mgr, Some(M));
    assert_eq!(k.lease_expiry, Some(T0 + timing().lease));
}

#[test]
fn recovery_lease_access_protocol_blocks() {
    // seed 000 §4.1: the access protocol blocks unless the state is regular lease.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RecoveryLease, 3, M);
    let v = crate::ids::Version {
        epoch: e(3),
        seq: 1,
    };
    let accept = ToChunk::Accept {
        epoch: e(3),
        ops: vec![(v, crate::data::StoreOp::Register { key: 1, value: 1 })],
        confirm: Default::default(),
    };
    k.on_msg(&mut env.ctx(T0), M, accept.clone());
    let out = env.take();
    assert_eq!(to_mgrs(&out), vec![(M, ToManager::Refused { epoch: e(3) })]);
    assert!(persists(&out).is_empty());
    // The same batch is served under a regular lease.
    let mut k = chunk(&mut env, S::RegularLease, 3, M);
    k.on_msg(&mut env.ctx(T0), M, accept);
    let out = env.take();
    assert_eq!(
        to_mgrs(&out),
        vec![(
            M,
            ToManager::Accepted {
                epoch: e(3),
                upto: v,
                // DESIGN §4, reads: how long it refuses other managers from now.
                lease_left: Some(timing().lease - timing().clock_drift),
            }
        )]
    );
}

// ---- §4.2.8 recovery transition ----------------------------------------------------

#[test]
fn recovery_transition_commit_member_enters_regular_lease() {
    // seed 000 §4.2.8 recovery transition: commit tx, self ∈ logged new metadata →
    // new epoch, metadata, manager; lease for the commit window; regular lease.
    let mut env = Env::new(d(1));
    let mut k = in_transition(&mut env, S::RecoveryTransition, 3, M, tlog(4, layout(), M));
    let now = T0 + ms(100);
    let expiry = now + timing().commit_window;
    let commit = commit_msg(4, data_with(3, 2, 7), expiry.saturating_since(now));
    k.on_msg(&mut env.ctx(now), M, commit);
    let out = env.take();
    assert_eq!(k.state, S::RegularLease);
    assert_eq!(k.record.epoch, e(4));
    assert_eq!(k.record.metadata, layout());
    assert_eq!(k.record.data, stamped(data_with(3, 2, 7), 4));
    assert_eq!(k.record.lease_mgr, Some(M));
    assert_eq!(k.record.prepared, None);
    assert_eq!(k.lease_expiry, Some(expiry));
    assert_eq!(k.lease_renewal, Some(now + timing().renewal_period));
    assert_eq!(k.log, None);
    assert_eq!(put_chunks(&out), vec![k.record.clone()]);
    assert_eq!(
        observations(&out),
        vec![Observation::ChunkCommitted {
            chunk: c(1),
            epoch: e(4)
        }]
    );
}

#[test]
fn recovery_transition_commit_non_member_garbage_collects() {
    // seed 000 §4.2.8 recovery transition: commit tx, self ∉ logged new metadata →
    // garbage collect.
    let mut env = Env::new(d(1));
    let mut k = in_transition(
        &mut env,
        S::RecoveryTransition,
        3,
        M,
        tlog(4, md(&[2, 3]), M),
    );
    let commit = commit_msg(4, Default::default(), timing().commit_window);
    k.on_msg(&mut env.ctx(T0), M, commit);
    let out = env.take();
    assert_collected(&k, &out);
}

#[test]
fn recovery_transition_abort_enters_no_lease() {
    // seed 000 §4.2.8 recovery transition: abort tx → clear log, no lease. Tenure: the
    // prepare record is cleared durably before help goes out.
    let mut env = Env::new(d(1));
    let mut k = in_transition(&mut env, S::RecoveryTransition, 3, M, tlog(4, layout(), M));
    let now = T0 + ms(100);
    let abort = abort_msg(4, timing().abort_window);
    k.on_msg(&mut env.ctx(now), M, abort);
    let out = env.take();
    assert_eq!(k.state, S::NoLease);
    assert_eq!(k.log, None);
    assert_eq!(k.record.prepared, None);
    assert_eq!(k.record.epoch, e(3));
    assert_eq!(k.lease_expiry, None);
    assert_eq!(put_chunks(&out).len(), 1);
    let helps = to_mgrs(&out);
    assert_eq!(helps.len(), 1);
    assert_eq!(helps[0].1, help(3));
    let p = position(&out, |o| matches!(o, Output::Persist(_)));
    let s = position(&out, |o| matches!(o, Output::Send { .. }));
    assert!(p < s);
}

#[test]
fn recovery_transition_fail_goes_newly_awake() {
    // seed 000 §4.2.8 recovery transition: fail → newly awake → no lease; the prepare
    // record is durable and kept.
    let mut env = Env::new(d(1));
    let mut k = in_transition(&mut env, S::RecoveryTransition, 3, M, tlog(4, layout(), M));
    k.newly_awake(&mut env.ctx(T0));
    assert!(
        env.take().is_empty(),
        "the vote's window is waited out first"
    );
    let now = T0 + timing().transition_wait;
    k.on_tick(&mut env.ctx(now));
    let out = env.take();
    assert_no_lease_asked(&k, &out, now, M);
    assert_eq!(k.record.prepared, Some(prepared(4, M)));
}

// ---- §4.2.9 recovery reconciling ---------------------------------------------------

#[test]
fn recovery_reconciling_done_votes_commit_and_enters_recovery_transition() {
    // seed 000 §4.2.9 recovery reconciling: done → initiate commit protocol voting
    // commit, recovery transition.
    let mut env = Env::new(d(1));
    let mut k = in_transition(&mut env, S::RecoveryReconciling, 3, M, tlog(4, layout(), M));
    k.done(&mut env.ctx(T0));
    let out = env.take();
    assert_eq!(k.state, S::RecoveryTransition);
    assert_eq!(k.record.prepared, Some(prepared(4, M)));
    assert_voted_after_persist(&out, 4, M);
}

// ---- Tenure gap fillers ------------------------------------------------------------

#[test]
fn transition_wait_expiry_gives_up_on_transition_manager_keeping_prepared() {
    // Tenure (chunk.rs): a chunk waiting in a transition state longer than
    // `transition_wait` gives up on its manager and enters no lease, asking its lease
    // manager and the transition's manager first, and keeping its durable vote.
    let t = timing();
    for state in [
        S::Reconciling,
        S::RegularTransition,
        S::RecoveryReconciling,
        S::RecoveryTransition,
    ] {
        let mut env = Env::new(d(1));
        let mut k = in_transition(&mut env, state, 3, M, tlog(4, layout(), N));
        let before = k.record.prepared.clone();
        let deadline = T0 + t.transition_wait;
        assert_eq!(k.next_timeout(t.clock_drift), Some(deadline), "{state:?}");
        k.on_tick(&mut env.ctx(deadline - ms(1)));
        assert_eq!(k.state, state);
        assert!(env.take().is_empty());
        k.on_tick(&mut env.ctx(deadline));
        let out = env.take();
        assert_eq!(k.state, S::NoLease, "{state:?}");
        assert_eq!(k.log, None);
        assert_eq!(k.transition_deadline, None);
        assert_eq!(k.record.prepared, before, "{state:?}: the vote is kept");
        assert!(persists(&out).is_empty());
        let first = to_mgrs(&out);
        assert_eq!(first.len(), 1);
        k.on_tick(&mut env.ctx(deadline + t.help_wait));
        let second = to_mgrs(&env.take());
        let mut asked = vec![first[0].0, second[0].0];
        let best = if crate::config::precedence(STORE, M) > crate::config::precedence(STORE, N) {
            vec![M, N]
        } else {
            vec![N, M]
        };
        assert_eq!(asked, best, "{state:?}: queued by precedence");
        asked.sort();
        assert_eq!(asked, vec![M, N]);
    }
}

#[test]
fn epoch_transition_replay_of_finished_attempt_votes_abort() {
    // seed 000 §4.2.1 regular lease: epoch transition. Tenure (`finished`): a replayed
    // prepare of an attempt this chunk already saw committed or aborted is refused.
    let mut env = Env::new(d(1));
    let mut k = in_transition(&mut env, S::RegularTransition, 3, M, tlog(4, layout(), M));
    k.on_msg(&mut env.ctx(T0), M, abort_msg(4, timing().abort_window));
    assert_eq!(k.state, S::RegularLease);
    env.take();
    k.on_msg(&mut env.ctx(T0), M, epoch_transition(3, 4, M));
    assert_eq!(k.state, S::RegularLease);
    assert_eq!(to_mgrs(&env.take()), vec![(M, vote_abort(4))]);
}

#[test]
fn aborted_later_vote_does_not_hide_an_earlier_vote() {
    // seed 000 §4.2.7–§4.2.8 (epoch transition, abort tx, then §4.2.6 acquire). Tenure
    // (`done` remembers the earlier vote): a chunk that voted for epoch 4 (outcome
    // unknown), then for epoch 5, which aborted, still reports the vote for 4 in its ack,
    // since 4 may have committed elsewhere.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::RecoveryLease, 3, M);
    k.record.prepared = Some(prepared(4, N));
    k.on_msg(&mut env.ctx(T0), M, epoch_transition(3, 5, M));
    assert_eq!(k.state, S::RecoveryTransition);
    k.on_msg(&mut env.ctx(T0), M, abort_msg(5, timing().abort_window));
    assert_eq!(k.state, S::NoLease);
    env.take();
    let acquire = ToChunk::Acquire {
        lease: timing().lease,
        mgr: N,
        epoch: e(3),
    };
    k.on_msg(&mut env.ctx(T0), N, acquire);
    assert_eq!(
        to_mgrs(&env.take()),
        vec![(
            N,
            ToManager::Ack {
                epoch: e(3),
                prepared: Some(prepared(4, N))
            }
        )]
    );
}

#[test]
fn done_outside_the_reconciling_states_is_ignored() {
    // seed 000 §4.2.2 / §4.2.9: done is a row of the reconciling states only. In a
    // transition state it must change nothing (it used to turn recovery transition into
    // regular transition, so a later abort would have left a regular lease).
    let mut env = Env::new(d(1));
    for state in [S::RegularTransition, S::RecoveryTransition] {
        let mut k = in_transition(&mut env, state, 3, M, tlog(4, layout(), M));
        k.done(&mut env.ctx(T0));
        assert_eq!(k.state, state);
        assert!(env.take().is_empty(), "{state:?}");
    }
    let mut k = chunk(&mut env, S::RegularLease, 3, M);
    k.log = Some(tlog(4, layout(), M));
    k.done(&mut env.ctx(T0));
    assert_eq!(k.state, S::RegularLease);
    assert!(env.take().is_empty());
}

// ---- Tenure: how an ACCEPT's persist is written -------------------------------------

/// The kinds of the persists of `n` ACCEPTs served in regular lease, in order: `D` for a
/// delta, `W` for a whole record.
fn accept_persists(whole_record_every: u32, n: u64) -> String {
    let mut env = Env::new(d(1));
    env.cfg.whole_record_every = whole_record_every;
    let mut k = chunk(&mut env, S::RegularLease, 3, M);
    let mut kinds = String::new();
    for seq in 1..=n {
        let v = crate::ids::Version { epoch: e(3), seq };
        let accept = ToChunk::Accept {
            epoch: e(3),
            ops: vec![(v, crate::data::StoreOp::Register { key: 1, value: seq })],
            confirm: Default::default(),
        };
        k.on_msg(&mut env.ctx(T0), M, accept);
        for p in persists(&env.take()) {
            kinds.push(match p {
                PersistOp::PutChunk(_) => 'W',
                PersistOp::Accept { .. } => 'D',
                other => panic!("unexpected persist {other:?}"),
            });
        }
    }
    kinds
}

#[test]
fn regular_lease_accept_persists_a_whole_record_every_whole_record_every_deltas() {
    // Tenure: an ACCEPT is persisted as a delta, and every `whole_record_every`-th in a
    // row as the chunk's whole record (the same state either way).
    assert_eq!(accept_persists(4, 9), "DDDWDDDWD");
    assert_eq!(accept_persists(1, 3), "WWW");
}

/// The kinds of the persists in `out`: `H` for a record's head, `W` for a whole record,
/// `D` for a delta.
fn persist_kinds(out: &[Output]) -> String {
    persists(out)
        .iter()
        .map(|p| match p {
            PersistOp::PutChunkHead(_) => 'H',
            PersistOp::PutChunk(_) => 'W',
            PersistOp::Accept { .. } => 'D',
            other => panic!("unexpected persist {other:?}"),
        })
        .collect()
}

#[test]
fn regular_lease_epoch_transition_persists_the_head_alone_when_the_tables_are_persisted() {
    // Tenure: a vote whose tables the chunk already persisted (whole or by deltas, then
    // perhaps confirmed further on a CONFIRM) is written as the record's head: the
    // durable record, confirming as far, comes out as the chunk's record.
    for confirmed_since in [false, true] {
        let mut env = Env::new(d(1));
        env.cfg.whole_record_every = u32::MAX;
        let mut k = chunk(&mut env, S::RegularLease, 3, M);
        let mut durable = k.record.clone();
        let v = crate::ids::Version {
            epoch: e(3),
            seq: 1,
        };
        let accept = ToChunk::Accept {
            epoch: e(3),
            ops: vec![(v, crate::data::StoreOp::Register { key: 1, value: 1 })],
            confirm: Default::default(),
        };
        k.on_msg(&mut env.ctx(T0), M, accept);
        let out = env.take();
        assert_eq!(persist_kinds(&out), "D");
        persists(&out)[0].apply_delta(&mut durable);
        if confirmed_since {
            k.on_msg(
                &mut env.ctx(T0),
                M,
                ToChunk::Confirm {
                    epoch: e(3),
                    upto: v,
                },
            );
            assert_eq!(persist_kinds(&env.take()), "", "a CONFIRM is not persisted");
            assert_eq!(k.record.data.table.registers.entries.len(), 1);
        }
        k.on_msg(&mut env.ctx(T0 + ms(100)), M, epoch_transition(3, 4, M));
        let out = env.take();
        assert_eq!(k.state, S::RegularTransition);
        let p = persists(&out);
        let [head @ PersistOp::PutChunkHead(h)] = p.as_slice() else {
            panic!("confirmed since: {confirmed_since}, persisted {p:?}");
        };
        assert_eq!(h.prepared, Some(prepared(4, M)));
        assert_eq!(**h, k.record.head(), "the head of the record voted with");
        head.apply_delta(&mut durable);
        assert_eq!(durable, k.record, "confirmed since: {confirmed_since}");
    }
}

#[test]
fn regular_lease_accept_never_persists_a_whole_record_when_told_not_to() {
    // Tenure: `u32::MAX` (the server's setting, whose storage compacts deltas itself)
    // never rewrites the whole record for an ACCEPT.
    assert_eq!(accept_persists(u32::MAX, 300), "D".repeat(300));
}

#[test]
fn regular_lease_accept_persists_the_chunks_own_confirmed_number() {
    // Tenure: a chunk that confirmed further on a CONFIRM of its own than the next
    // ACCEPT's piggybacked number persists that ACCEPT with its own number, so a copy
    // applying the delta comes out where the chunk is and can take the tables it hands.
    let mut env = Env::new(d(1));
    env.cfg.whole_record_every = u32::MAX;
    let mut k = chunk(&mut env, S::RegularLease, 3, M);
    let v = |seq| crate::ids::Version { epoch: e(3), seq };
    let op = |seq| {
        (
            v(seq),
            crate::data::StoreOp::Register { key: 1, value: seq },
        )
    };
    let accept = |ops, confirm| ToChunk::Accept {
        epoch: e(3),
        ops,
        confirm,
    };
    k.on_msg(&mut env.ctx(T0), M, accept(vec![op(1), op(2)], v(0)));
    let confirm = ToChunk::Confirm {
        epoch: e(3),
        upto: v(2),
    };
    k.on_msg(&mut env.ctx(T0), M, confirm);
    env.take();
    k.on_msg(&mut env.ctx(T0), M, accept(vec![op(3)], v(1)));
    let persisted: Vec<_> = persists(&env.take())
        .into_iter()
        .filter_map(|p| match p {
            PersistOp::Accept { confirm, .. } => Some(confirm),
            _ => None,
        })
        .collect();
    assert_eq!(persisted, vec![v(2)]);
    assert_eq!(k.record.data.confirmed, v(2));
}

#[test]
fn regular_lease_accept_hands_the_tables_after_many_changes_or_many_deltas() {
    // Tenure: a chunk hands its tables to its durable copy every SHARE_TABLES_EVERY
    // deltas, or sooner once SHARE_TABLES_OPS changes were persisted since it last did
    // (a busy store's large batches made long deferred lists otherwise).
    use crate::io::{SHARE_TABLES_EVERY, SHARE_TABLES_OPS};
    let mut env = Env::new(d(1));
    env.cfg.whole_record_every = u32::MAX;
    let mut k = chunk(&mut env, S::RegularLease, 3, M);
    let v = |seq| crate::ids::Version { epoch: e(3), seq };
    let mut seq = 0;
    let mut handed = |k: &mut Chunk, env: &mut Env, n: u64| {
        let ops = (0..n)
            .map(|_| {
                seq += 1;
                (
                    v(seq),
                    crate::data::StoreOp::Register { key: 1, value: seq },
                )
            })
            .collect();
        let msg = ToChunk::Accept {
            epoch: e(3),
            ops,
            confirm: v(0),
        };
        k.on_msg(&mut env.ctx(T0), M, msg);
        let after: Vec<bool> = persists(&env.take())
            .into_iter()
            .filter_map(|p| match p {
                PersistOp::Accept { after, .. } => Some(after.0.is_some()),
                _ => None,
            })
            .collect();
        assert_eq!(after.len(), 1);
        after[0]
    };
    // The first delta hands them (none were handed yet).
    assert!(handed(&mut k, &mut env, 1));
    // Small batches: handed again at the SHARE_TABLES_EVERY-th delta.
    let small: Vec<bool> = (1..=SHARE_TABLES_EVERY)
        .map(|_| handed(&mut k, &mut env, 1))
        .collect();
    assert_eq!(small.iter().filter(|h| **h).count(), 1);
    assert!(small[SHARE_TABLES_EVERY as usize - 1]);
    // Large batches: handed once SHARE_TABLES_OPS changes went by, well before.
    let per = u64::from(SHARE_TABLES_OPS) / 4;
    let large: Vec<bool> = (0..4).map(|_| handed(&mut k, &mut env, per)).collect();
    assert_eq!(large, vec![false, false, false, true]);
}
