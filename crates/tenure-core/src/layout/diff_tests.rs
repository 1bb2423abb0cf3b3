//! Epoch transitions that ship what differs (DESIGN "State at scale"): a chunk names its
//! stamped state to a transition manager on another device, the manager merges with the
//! summaries it can place and asks the rest whole, and commits by patch to every chunk
//! whose table is a prefix of the merge's base. Every chunk committing one transition then
//! holds the same table.

use super::manager::{Manager, TxKind};
use super::test_support::*;
use super::{ChunkState as S, MgrState};
use crate::data::{StoreData, StoreOp};
use crate::ids::Version;
use crate::msg::{ToChunk, ToManager, VoteSummary};

/// The state every chunk committed at epoch 3 (attempt [`TX`]): register 1 = 9.
fn committed_at_3() -> StoreData {
    stamped(data_with(3, 1, 9), 3)
}

/// `committed_at_3` with register 2 = 5 accepted (sequence e3/2) but not confirmed.
fn with_pending() -> StoreData {
    let mut d = committed_at_3();
    let v = Version {
        epoch: e(3),
        seq: 2,
    };
    d.accept(v, StoreOp::Register { key: 2, value: 5 });
    d
}

fn whole(data: StoreData) -> ToManager {
    ToManager::Vote {
        new_epoch: e(4),
        tx: TX,
        data: Box::new(data),
        committed: e(3),
    }
}

fn named(data: &StoreData) -> ToManager {
    ToManager::VoteSummary(Box::new(VoteSummary {
        new_epoch: e(4),
        tx: TX,
        summary: data.summary().expect("stamped"),
        committed: e(3),
    }))
}

fn recovering() -> Manager {
    let mut m = manager(MgrState::RecoveryReconciling, 3);
    m.regen_mut().rounds = 1;
    m.regen_mut().won = set(&[1, 2, 3]);
    m.tx = Some(tx(TxKind::Recovery, 4, layout(), set(&[1, 2, 3])));
    m
}

#[test]
fn reconciling_done_names_a_stamped_state_to_a_remote_transition_manager() {
    // seed 000 §4.2.2 reconciling: done → vote commit; Tenure: to another device, the
    // stamped state goes as its summary.
    // The manager's device holds a chunk of the new layout.
    let mut env = Env::new(d(1));
    let with_m = md(&[1, 2, 4]);
    let mut k = in_transition(&mut env, S::Reconciling, 3, M, tlog(4, with_m, M));
    k.record.data = with_pending();
    k.done(&mut env.ctx(T0));
    let votes = to_mgrs(&env.take());
    assert_eq!(votes, vec![(M, named(&with_pending()))]);
    assert_eq!(k.state, S::RegularTransition);
}

#[test]
fn reconciling_done_votes_whole_to_a_transition_manager_holding_no_chunk() {
    // A manager on a device with no chunk of the store, old layout or new, has no table
    // to place a summary against: it gets the state whole at once.
    let mut env = Env::new(d(1));
    let mut k = in_transition(&mut env, S::Reconciling, 3, M, tlog(4, layout(), M));
    k.record.data = with_pending();
    k.done(&mut env.ctx(T0));
    assert_eq!(to_mgrs(&env.take()), vec![(M, whole(with_pending()))]);
}

#[test]
fn reconciling_done_votes_whole_to_its_own_device_or_without_a_stamp() {
    // A transition manager on the chunk's own device takes the state whole (no copy
    // crosses a network); so does any manager when the state has no stamp yet.
    let mut env = Env::new(d(1));
    let mut k = in_transition(&mut env, S::Reconciling, 3, d(1), tlog(4, layout(), d(1)));
    k.record.data = committed_at_3();
    k.done(&mut env.ctx(T0));
    let votes = to_mgrs(&env.take());
    assert!(matches!(&votes[..], [(to, ToManager::Vote { .. })] if *to == d(1)));

    let mut env = Env::new(d(1));
    let mut k = in_transition(&mut env, S::Reconciling, 3, M, tlog(4, md(&[1, 4]), M));
    k.record.data = data_with(3, 1, 9);
    k.done(&mut env.ctx(T0));
    let votes = to_mgrs(&env.take());
    assert!(matches!(&votes[..], [(to, ToManager::Vote { .. })] if *to == M));
}

#[test]
fn transition_send_state_votes_whole_again_to_the_transition_manager_only() {
    // Tenure: the transition manager could not place a summary: the same vote, whole.
    let mut env = Env::new(d(1));
    let mut k = in_transition(&mut env, S::RecoveryTransition, 3, M, tlog(4, layout(), M));
    k.record.data = with_pending();
    let ask = ToChunk::SendState(crate::msg::SendState {
        new_epoch: e(4),
        tx: TX,
    });
    k.on_msg(&mut env.ctx(T0), N, ask.clone());
    assert!(
        env.take().is_empty(),
        "N does not coordinate the transition"
    );
    k.on_msg(&mut env.ctx(T0), M, ask);
    assert_eq!(to_mgrs(&env.take()), vec![(M, whole(with_pending()))]);
    assert_eq!(k.state, S::RecoveryTransition);
}

#[test]
fn recovery_reconciling_asks_whole_the_most_advanced_state_it_only_has_named() {
    // No whole input holds the highest confirmed number: the merge cannot start, and the
    // chunk that named it is asked for it.
    let mut env = Env::new(M);
    let mut m = recovering();
    let mut ahead = committed_at_3();
    let v = Version {
        epoch: e(3),
        seq: 2,
    };
    ahead.accept(v, StoreOp::Register { key: 2, value: 5 });
    ahead.confirm(v);
    from_chunk(&mut m, &mut env, T0, 1, whole(committed_at_3()));
    from_chunk(&mut m, &mut env, T0, 2, named(&ahead));
    from_chunk(&mut m, &mut env, T0, 3, named(&committed_at_3()));
    let out = env.take();
    assert_eq!(m.state(), MgrState::RecoveryReconciling);
    assert_eq!(
        chunks_sent(&out, |x| matches!(x, ToChunk::SendState(_))),
        set(&[2])
    );
    // The whole state arrives: the transition commits.
    from_chunk(&mut m, &mut env, T0, 2, whole(ahead));
    assert_eq!(m.state(), MgrState::Manager);
}

#[test]
fn recovery_commit_patches_chunks_of_the_base_lineage_into_the_merged_table() {
    // seed 000 §5.3.13 done → commit tx; Tenure: the chunk that voted whole gets the
    // merged state whole, the chunks that named a prefix of it get a patch; each ends
    // with the same table, stamped with this transition.
    let mut env = Env::new(M);
    let mut m = recovering();
    from_chunk(&mut m, &mut env, T0, 1, whole(committed_at_3()));
    from_chunk(&mut m, &mut env, T0, 2, named(&with_pending()));
    from_chunk(&mut m, &mut env, T0, 3, named(&committed_at_3()));
    let out = env.take();
    assert_eq!(m.state(), MgrState::Manager);
    let sent = to_chunks(&out);
    let merged = sent
        .iter()
        .find_map(|(k, x)| match x {
            ToChunk::Commit { data, .. } if *k == c(1) => Some((**data).clone()),
            _ => None,
        })
        .expect("a whole commit to c(1)");
    assert_eq!(
        merged.table.registers.entries.get(&2).map(|(_, v)| *v),
        Some(5),
        "the pending change"
    );
    let patches: Vec<_> = (sent.iter())
        .filter_map(|(k, x)| match x {
            ToChunk::CommitPatch(p) => Some((*k, p.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        patches.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
        [c(2), c(3)]
    );
    for (from, (_, p)) in [with_pending(), committed_at_3()].into_iter().zip(patches) {
        assert_eq!(p.patch.rows.len(), 1, "only register 2 differs");
        let mut env = Env::new(d(1));
        let mut k = in_transition(&mut env, S::RecoveryTransition, 3, M, tlog(4, layout(), M));
        k.record.data = from;
        k.on_msg(&mut env.ctx(T0), M, ToChunk::CommitPatch(p));
        assert_eq!(k.state, S::RegularLease);
        assert_eq!(k.record.epoch, e(4));
        assert_eq!(k.record.data, merged, "the same table as the whole commit");
    }
}

#[test]
fn transition_commit_patch_of_another_lineage_is_left_unapplied() {
    // A patch from a base the chunk does not hold changes nothing: the chunk stays in its
    // transition, as if the commit were lost (the manager never sends one: it matched the
    // summary).
    let mut env = Env::new(M);
    let mut m = recovering();
    from_chunk(&mut m, &mut env, T0, 1, whole(committed_at_3()));
    from_chunk(&mut m, &mut env, T0, 2, named(&committed_at_3()));
    from_chunk(&mut m, &mut env, T0, 3, named(&committed_at_3()));
    let p = to_chunks(&env.take())
        .into_iter()
        .find_map(|(_, x)| match x {
            ToChunk::CommitPatch(p) => Some(p),
            _ => None,
        })
        .expect("a patch");
    let mut env = Env::new(d(1));
    let mut k = in_transition(&mut env, S::RecoveryTransition, 3, M, tlog(4, layout(), M));
    k.record.data = stamped(data_with(3, 1, 9), 2);
    let before = k.record.clone();
    k.on_msg(&mut env.ctx(T0), M, ToChunk::CommitPatch(p));
    assert_eq!(k.state, S::RecoveryTransition);
    assert_eq!(k.record, before);
    assert!(env.take().is_empty());
}
