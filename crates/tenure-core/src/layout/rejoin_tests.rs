//! A chunk that rejoins brought up to date by a patch (DESIGN "State at scale"): it names
//! the table it holds before its `ack`; the manager keeps the table each chunk was marked
//! failed at and each merge's base; a relayout (seed 000 §5.3.8, "chunks are being
//! reconciled") sends a rejoining chunk whose table it still has the rows that differ,
//! and the chunk ends with the manager's state and its stamp.

use super::manager::{Manager, TxKind};
use super::test_support::*;
use super::{ChunkState as S, MgrState};
use crate::data::{StoreData, StoreOp};
use crate::ids::Version;
use crate::msg::{Holding, ToChunk, ToManager};

/// The layout of these tests: chunks on devices 1, 2 and the manager's own (4), so a
/// chunk's vote to the manager may be a summary.
fn with_m() -> crate::layout::Metadata {
    md(&[1, 2, 4])
}

fn holding(d: &StoreData) -> Holding {
    let s = d.summary().expect("stamped");
    Holding {
        stamp: s.stamp,
        confirmed: s.confirmed,
        last_held: s.last_held(),
    }
}

fn ack(epoch: u64) -> ToManager {
    ToManager::Ack {
        epoch: e(epoch),
        prepared: None,
    }
}

/// The manager of [`with_m`] at epoch 3, its state stamped by the commit of epoch 3.
fn managing_with_m() -> Manager {
    let mut m = managing(3);
    m.metadata = with_m();
    m.chunkfail = (with_m().chunks.iter())
        .map(|k| (*k, T0 + timing().lease))
        .collect();
    m.objects.complete = with_m().chunks;
    m.host.data = stamped(data_with(3, 1, 9), 3);
    m
}

/// Register 2 = 5, accepted by every live chunk and confirmed at the manager.
fn write_on(m: &mut Manager) {
    let v = Version {
        epoch: e(3),
        seq: 2,
    };
    m.host
        .data
        .accept(v, StoreOp::Register { key: 2, value: 5 });
    m.host.data.confirm(v);
}

/// The batches a new epoch begins with, accepted by the live chunks (2 and 4).
fn settle(m: &mut Manager, env: &mut Env) {
    while let Some(upto) = (m.host.inflight.as_ref()).and_then(|b| b.ops.last().map(|(v, _)| *v)) {
        for n in [2, 4] {
            let epoch = m.epoch;
            let msg = ToManager::Accepted {
                epoch,
                upto,
                lease_left: None,
            };
            from_chunk(m, env, T0, n, msg);
        }
    }
}

/// Chunk c(1) rejoins: it names `held`, acks, and the manager relayouts onto its layout.
fn rejoin(m: &mut Manager, env: &mut Env, held: &StoreData) -> Vec<(crate::ids::ChunkId, ToChunk)> {
    from_chunk(m, env, T0, 1, ToManager::Holds(holding(held)));
    from_chunk(m, env, T0, 1, ack(3));
    assert_eq!(m.recovered, set(&[1]));
    let md = m.metadata.clone();
    assert!(m.relayout(&mut env.ctx(T0), md));
    to_chunks(&env.take())
}

/// c(1) marked failed holding the manager's state, register 2 written without it, then
/// rejoined: the manager, its environment, the table c(1) holds and what the relayout
/// sent.
fn failed_written_rejoined() -> (Manager, Env, StoreData, Vec<(crate::ids::ChunkId, ToChunk)>) {
    let mut env = Env::new(M);
    let mut m = managing_with_m();
    let held = m.host.data.clone();
    assert!(m.mark_failed(
        &mut env.ctx(T0),
        c(1),
        crate::io::observation::FailedWhy::LeaseExpired
    ));
    write_on(&mut m);
    env.take();
    let sent = rejoin(&mut m, &mut env, &held);
    (m, env, held, sent)
}

/// Chunk c(1) at epoch 3 under a recovery lease from the manager, and its environment.
fn recovery_leased_chunk() -> (crate::layout::chunk::Chunk, Env) {
    let mut cenv = Env::new(d(1));
    let k = chunk(&mut cenv, S::RecoveryLease, 3, M);
    (k, cenv)
}

fn patch_to_c1(sent: &[(crate::ids::ChunkId, ToChunk)]) -> Option<crate::msg::ReconcilePatch> {
    sent.iter().find_map(|(k, x)| match x {
        ToChunk::ReconcilePatch(p) if *k == c(1) => Some((**p).clone()),
        _ => None,
    })
}

#[test]
fn relayout_reconciling_patches_a_recovered_chunk_from_the_table_it_was_failed_at() {
    // seed 000 §5.3.7 manager: chunkfail → failed; ack from a failed chunk → recovered;
    // §5.3.8 relayout: the recovered chunk is reconciled. Tenure: with the rows that
    // changed since it was failed, not the state whole.
    let (mut m, mut env, held, sent) = failed_written_rejoined();
    let p = patch_to_c1(&sent).expect("a patch to the rejoining chunk");
    assert_eq!(p.patch.rows.len(), 1, "only register 2 changed");
    assert_eq!(p.stamp, m.host.data.stamp);
    // The chunk makes the state durable before it votes: the attempt waits as long as a
    // vote may still count.
    let t = timing();
    let deadline = m.tx.as_ref().unwrap().deadline;
    assert_eq!(deadline, T0 + t.transition_timeout_longest());
    assert!(t.transition_timeout_longest() > t.transition_timeout);
    assert!(t.transition_timeout_longest() + t.clock_drift * 2 < t.transition_wait);
    assert!(
        !(sent.iter()).any(|(_, x)| matches!(x, ToChunk::EpochTransition { data: Some(_), .. })),
        "nothing goes whole"
    );

    // §4.2.7 recovery lease: epoch transition → recovery reconciling, done → vote. The
    // chunk holds the manager's state, stamp and all, and names it in its vote.
    let (mut k, mut cenv) = recovery_leased_chunk();
    k.record.data = held;
    k.on_msg(&mut cenv.ctx(T0), M, ToChunk::ReconcilePatch(Box::new(p)));
    assert_eq!(k.state, S::RecoveryTransition);
    assert_eq!(k.record.data, m.host.data);
    let votes = to_mgrs(&cenv.take());
    assert!(
        matches!(&votes[..], [(to, ToManager::VoteSummary(v))] if *to == M && v.summary.stamp == m.host.data.stamp.unwrap()),
        "{votes:?}"
    );

    // The vote is placed against the manager's own state: the relayout commits, by patch.
    from_chunk(&mut m, &mut env, T0, 1, votes[0].1.clone());
    let id = m.tx.as_ref().unwrap().id;
    from_chunk(&mut m, &mut env, T0, 2, vote_of(4, id));
    from_chunk(&mut m, &mut env, T0, 4, vote_of(4, id));
    assert_eq!(m.state(), MgrState::Manager);
    let commits = to_chunks(&env.take());
    assert!(
        (commits.iter()).any(|(k, x)| *k == c(1) && matches!(x, ToChunk::CommitPatch(_))),
        "{commits:?}"
    );
}

#[test]
fn relayout_reconciling_patches_a_chunk_left_out_of_a_recovery_from_its_base() {
    // seed 000 §5.3.13 recovery reconciling → commit tx with the chunks won; a chunk of
    // the layout that did not take part (its device was still starting) is failed. The
    // merge's base is kept: the chunk holds it, and rejoins by a patch of it.
    let mut env = Env::new(M);
    let mut m = manager(MgrState::RecoveryReconciling, 3);
    m.metadata = with_m();
    m.regen_mut().rounds = 1;
    m.regen_mut().won = set(&[2, 4]);
    m.tx = Some(tx(TxKind::Recovery, 4, with_m(), set(&[2, 4])));
    let held = stamped(data_with(3, 1, 9), 3);
    let id = m.tx.as_ref().unwrap().id;
    let whole = |d: &StoreData| ToManager::Vote {
        new_epoch: e(4),
        tx: id,
        data: Box::new(d.clone()),
        committed: e(3),
    };
    from_chunk(&mut m, &mut env, T0, 2, whole(&held));
    from_chunk(&mut m, &mut env, T0, 4, whole(&held));
    assert_eq!(m.state(), MgrState::Manager);
    assert_eq!(m.failed, set(&[1]));
    settle(&mut m, &mut env);
    env.take();
    let sent = rejoin(&mut m, &mut env, &held);
    let p = patch_to_c1(&sent).expect("a patch of the base");
    assert!(p.patch.rows.is_empty(), "the chunk holds the merged table");
    let (mut k, mut cenv) = recovery_leased_chunk();
    k.record.data = held;
    k.on_msg(&mut cenv.ctx(T0), M, ToChunk::ReconcilePatch(Box::new(p)));
    assert_eq!(k.state, S::RecoveryTransition);
    assert_eq!(k.record.data, m.host.data);
}

#[test]
fn relayout_reconciling_sends_the_state_whole_to_a_chunk_of_another_lineage() {
    // A table the manager does not have (another commit's) cannot be patched: the
    // state goes whole, as seed 000 §5.3.8 has it.
    let mut env = Env::new(M);
    let mut m = managing_with_m();
    assert!(m.mark_failed(
        &mut env.ctx(T0),
        c(1),
        crate::io::observation::FailedWhy::LeaseExpired
    ));
    env.take();
    let other = stamped(data_with(3, 1, 9), 2);
    let sent = rejoin(&mut m, &mut env, &other);
    assert!(patch_to_c1(&sent).is_none());
    let deadline = m.tx.as_ref().unwrap().deadline;
    assert_eq!(deadline, T0 + timing().transition_timeout_longest());
    assert!(
        (sent.iter()).any(|(k, x)| *k == c(1)
            && matches!(x, ToChunk::EpochTransition { data: Some(d), .. } if **d == m.host.data)),
        "{sent:?}"
    );
}

#[test]
fn recovery_lease_reconcile_patch_of_a_table_not_held_is_refused_then_sent_whole() {
    // The chunk no longer holds the table it named: the patch changes nothing and the
    // chunk refuses the transition (vote abort). The attempt aborts, and the next
    // relayout sends the state whole.
    let (mut m, mut env, held, sent) = failed_written_rejoined();
    let p = patch_to_c1(&sent).expect("a patch");
    let (mut k, mut cenv) = recovery_leased_chunk();
    k.record.data = stamped(data_with(3, 1, 9), 2);
    let before = k.record.clone();
    k.on_msg(&mut cenv.ctx(T0), M, ToChunk::ReconcilePatch(Box::new(p)));
    assert_eq!((k.state, &k.record), (S::RecoveryLease, &before));
    let refusal = to_mgrs(&cenv.take());
    assert!(
        matches!(&refusal[..], [(to, ToManager::VoteAbort { .. })] if *to == M),
        "{refusal:?}"
    );
    from_chunk(&mut m, &mut env, T0, 1, refusal[0].1.clone());
    assert_eq!(m.state(), MgrState::Manager);
    assert!(m.tx.is_none(), "aborted");
    env.take();
    let sent = rejoin(&mut m, &mut env, &held);
    assert!(patch_to_c1(&sent).is_none());
    assert!(
        (sent.iter()).any(|(k, x)| *k == c(1)
            && matches!(x, ToChunk::EpochTransition { data: Some(_), .. })),
        "{sent:?}"
    );
}

#[test]
fn relayout_abort_keeps_the_table_it_began_with_for_the_chunks_that_took_it() {
    // §5.3.9 abort tx (relayout): Tenure: the rejoining chunk may have taken the state
    // before the attempt timed out; the manager goes on writing, and the next attempt
    // patches the chunk from the table the aborted one began with, not whole.
    let mut env = Env::new(M);
    let mut m = managing_with_m();
    let held = m.host.data.clone();
    assert!(m.mark_failed(
        &mut env.ctx(T0),
        c(1),
        crate::io::observation::FailedWhy::LeaseExpired
    ));
    env.take();
    let sent = rejoin(&mut m, &mut env, &held);
    let p = patch_to_c1(&sent).expect("a patch");
    let (mut k, mut cenv) = recovery_leased_chunk();
    k.record.data = held;
    k.on_msg(&mut cenv.ctx(T0), M, ToChunk::ReconcilePatch(Box::new(p)));
    assert_eq!(k.record.data, m.host.data, "taken");
    let deadline = m.tx.as_ref().unwrap().deadline;
    m.on_tick(&mut env.ctx(deadline));
    assert!(m.tx.is_none(), "aborted: its vote was lost");
    write_on(&mut m);
    env.take();
    let taken = k.record.data.clone();
    let sent = rejoin(&mut m, &mut env, &taken);
    let p = patch_to_c1(&sent).expect("a patch of the table the attempt began with");
    assert_eq!(p.patch.rows.len(), 1);
}

#[test]
fn recovery_lease_acquire_names_the_table_before_the_ack() {
    // §4.2.7 / §4.2.5 acquire → ack; Tenure: the stamped table goes first, named.
    let mut env = Env::new(d(1));
    let mut k = chunk(&mut env, S::NoLease, 3, M);
    k.record.data = stamped(data_with(3, 1, 9), 3);
    let acquire = ToChunk::Acquire {
        lease: timing().lease,
        mgr: M,
        epoch: e(3),
    };
    k.on_msg(&mut env.ctx(T0), M, acquire);
    let sent = to_mgrs(&env.take());
    assert!(
        matches!(&sent[..], [(_, ToManager::Holds(h)), (_, ToManager::Ack { .. })] if *h == holding(&k.record.data)),
        "{sent:?}"
    );
}
