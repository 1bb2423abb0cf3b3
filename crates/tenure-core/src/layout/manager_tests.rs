//! One test per (state, event) row of the manager transitions of seed 000 §5.3, plus one
//! per `Tenure:` rule of `manager.rs`. Each test builds a [`Manager`] for store 0 on
//! device `M` directly in the state under test (layout `c(1), c(2), c(3)`), delivers one
//! event, and checks the state, the variables and the outputs.
//!
//! The manager is the transition manager (runs the SafeTalk commit) of every epoch
//! transition it starts, so the seed's `done` (every participant reconciled and voted)
//! is the last vote arriving, and `commit tx` follows at once: the
//! into/relayout/recovery *transition* states are passed through within that event. `abort tx` is a vote to abort or the vote deadline.

use super::manager::{Incoming, Manager, Stage, TxKind};
use super::test_support::*;
use super::{LeaseType, MgrState as S, Prepared};
use crate::data::StoreData;
use crate::error::ClientError;
use crate::ids::StoreId;
use crate::ids::{ChunkId, ClientId, DeviceId};
use crate::io::Output;
use crate::io::observation::EpochCause;
use crate::io::observation::Observation;
use crate::msg::{MgrMsg, ToChunk, ToManager};
use crate::time::Instant;
use std::collections::BTreeSet;
use std::time::Duration;

fn acquire(epoch: u64) -> ToChunk {
    ToChunk::Acquire {
        lease: timing().lease,
        mgr: M,
        epoch: e(epoch),
    }
}

/// A renewal of `epoch` the manager sent at `sent`.
fn renewal(epoch: u64, sent: Instant) -> ToChunk {
    ToChunk::Renewal {
        epoch: e(epoch),
        lease: timing().lease,
        sent: Some(sent),
    }
}

/// The outgoing manager's handoff of attempt `tx`, from epoch `old` to `old + 1` over
/// [`layout`], with the chunks `failed` (by device) and the store's state `data`.
fn handoff(tx: u64, old: u64, failed: &[u64], data: StoreData) -> MgrMsg {
    MgrMsg::Handoff {
        tx,
        old_epoch: e(old),
        new_epoch: e(old + 1),
        metadata: layout(),
        failed: failed.iter().map(|n| c(*n)).collect(),
        data: Box::new(data),
    }
}

fn help(epoch: u64) -> ToManager {
    ToManager::Help {
        epoch: e(epoch),
        metadata: layout(),
    }
}

fn ack(epoch: u64) -> ToManager {
    ToManager::Ack {
        epoch: e(epoch),
        prepared: None,
    }
}

fn ack_conditional(mgr_epoch: u64, chunk_epoch: u64, metadata: super::Metadata) -> ToManager {
    ToManager::AckConditional {
        mgr_epoch: e(mgr_epoch),
        chunk_epoch: e(chunk_epoch),
        metadata,
        prepared: None,
    }
}

fn nack(mgr: Option<DeviceId>, lease: LeaseType) -> ToManager {
    ToManager::Nack {
        epoch: e(3),
        mgr,
        lease,
    }
}

fn stopped(epoch: u64) -> Observation {
    Observation::StoppedManaging {
        store: STORE,
        epoch: e(epoch),
    }
}

use crate::io::observation::FailedWhy;

fn chunk_failed(n: u64, why: FailedWhy) -> Observation {
    Observation::ChunkFailed {
        store: STORE,
        chunk: c(n),
        why,
    }
}

/// The role is in the none state with all state erased.
fn assert_erased(m: &Manager) {
    assert_eq!(m.state(), S::None);
    assert_eq!(m.epoch, e(0));
    assert_eq!(m.metadata, super::Metadata::default());
    assert!(m.failed.is_empty());
    assert!(m.recovered.is_empty());
    assert!(m.stage.regeneration().is_none());
    assert!(m.chunkfail.is_empty() && m.timeout.is_empty());
    assert!(m.tx.is_none());
    assert!(m.stage.outgoing().is_none());
    assert_eq!(m.next_timeout(), None);
}

/// The transition's id, read from the epoch transitions sent (all must agree).
fn sent_tx_id(out: &[Output]) -> u64 {
    let ids: BTreeSet<u64> = to_chunks(out)
        .into_iter()
        .filter_map(|(_, m)| match m {
            ToChunk::EpochTransition { tx, .. } => Some(tx),
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), 1, "{out:?}");
    ids.into_iter().next().expect("one id")
}

/// Epoch transitions sent, as (chunk, old, new, metadata, new mgr).
fn epoch_transitions(out: &[Output]) -> Vec<(ChunkId, u64, u64, super::Metadata, DeviceId)> {
    to_chunks(out)
        .into_iter()
        .filter_map(|(k, m)| match m {
            ToChunk::EpochTransition {
                old_epoch,
                new_epoch,
                metadata,
                new_mgr,
                ..
            } => Some((k, old_epoch.0, new_epoch.0, metadata, new_mgr)),
            _ => None,
        })
        .collect()
}

// ---- fail (every state), §5.3.2 newly awake ------------------------------------------

#[test]
fn manager_fail_erases_state_and_reports_stopped_managing() {
    // seed 000 §5.3 fail → newly awake (§5.3.2: erase all state → none). Writes waiting
    // for a batch are answered unavailable; checkers learn the role stopped managing.
    let mut env = Env::new(M);
    let mut m = managing(3);
    m.failed.insert(c(3));
    m.write(&mut env.ctx(T0), ClientId(1), 9, 1, 1);
    let accepts = chunks_sent(&env.take(), |x| matches!(x, ToChunk::Accept { .. }));
    assert_eq!(accepts, set(&[1, 2]));
    m.newly_awake(&mut env.ctx(T0 + ms(1)));
    let out = env.take();
    assert_erased(&m);
    assert_eq!(observations(&out), vec![stopped(3)]);
    assert_eq!(
        out.iter()
            .filter(|o| matches!(o, Output::Reply { .. }))
            .collect::<Vec<_>>(),
        vec![&Output::Reply {
            client: ClientId(1),
            req_id: 9,
            result: Err(ClientError::Unavailable { store: STORE })
        }]
    );
    assert!(sends(&out).is_empty());
}

#[test]
fn gathering_chunks_fail_erases_state_keeping_forwarding_address() {
    // seed 000 §5.3 fail → newly awake → none. The forwarding address (§5.1: "where a
    // manager can be found (if none or newly awake)") is kept.
    let mut env = Env::new(M);
    let mut m = gathering(3, &[2, 3], &[1]);
    m.forwarding = Some(N);
    m.newly_awake(&mut env.ctx(T0));
    let out = env.take();
    assert_erased(&m);
    assert_eq!(m.forwarding, Some(N));
    assert!(
        out.is_empty(),
        "a regenerating role was not managing: {out:?}"
    );
}

#[test]
fn newly_awake_erases_all_state_and_goes_to_none() {
    // seed 000 §5.3.2 newly awake: erase all state, state ← none.
    let mut env = Env::new(M);
    let mut m = manager(S::NewlyAwake, 3);
    m.failed.insert(c(2));
    m.newly_awake(&mut env.ctx(T0));
    assert_erased(&m);
    assert!(env.take().is_empty());
}

// ---- §5.3.1 none -----------------------------------------------------------------------

#[test]
fn none_handoff_enters_into_reconciling() {
    // seed 000 §5.3.1 none: handoff(old epoch, new metadata, failed chunks) → epoch ←
    // old + 1, metadata, old mgr ← sender, failed, into reconciling. Tenure: the incoming
    // manager coordinates the commit, awaiting every live chunk's vote and the old
    // manager's.
    let mut env = Env::new(M);
    let mut m = Manager::new(STORE);
    let data = data_with(3, 1, 5);
    let handoff = handoff(TX, 3, &[3], data.clone());
    m.on_mgr_msg(&mut env.ctx(T0), N, handoff);
    // Tenure: it tells the outgoing manager it holds the handoff, asking for its vote.
    assert_eq!(
        mgr_msgs(&env.take()),
        vec![(
            N,
            MgrMsg::HandoffReady {
                new_epoch: e(4),
                tx: TX
            }
        )]
    );
    assert_eq!(m.state(), S::IntoReconciling);
    assert_eq!(m.epoch, e(4));
    assert_eq!(m.metadata, layout());
    assert_eq!(m.stage.incoming().and_then(|i| i.old_mgr), Some(N));
    assert_eq!(m.failed, set(&[3]));
    assert_eq!(m.host.data, data);
    let tx = m.tx.as_ref().expect("a transition");
    assert_eq!(tx.kind, TxKind::Into);
    assert_eq!(tx.id, TX);
    assert_eq!(tx.new_epoch, e(4));
    assert_eq!(tx.participants, set(&[1, 2]));
    assert_eq!(tx.await_mgr, Some(N));
    assert_eq!(tx.begun, T0);
    assert_eq!(tx.deadline, T0 + timing().transition_timeout);
}

#[test]
fn none_vote_before_the_handoff_is_counted_when_it_comes() {
    // seed 000 §5.3.1 none, as Tenure fills it: a chunk's vote for the migration into
    // this device can outrun the old manager's handoff (which carries the store's state);
    // it is kept and counted when the handoff of the same attempt arrives, within a
    // transition timeout (simulator seed 1870: dropped, the migration aborted forever).
    // A vote of another attempt, or one kept too long, is not counted.
    let mut env = Env::new(M);
    let mut m = Manager::new(STORE);
    from_chunk(&mut m, &mut env, T0, 1, vote(4));
    let other_attempt = vote_of(4, TX + 1);
    from_chunk(&mut m, &mut env, T0, 2, other_attempt);
    assert_eq!(m.state(), S::None);
    assert!(env.take().is_empty());
    let handoff = handoff(TX, 3, &[3], data_with(3, 1, 5));
    m.on_mgr_msg(&mut env.ctx(T0 + ms(5)), N, handoff.clone());
    assert_eq!(m.state(), S::IntoReconciling);
    assert_eq!(m.tx.as_ref().map(|t| t.votes.clone()), Some(set(&[1])));
    assert_eq!(m.tx.as_ref().map(|t| t.inputs.len()), Some(2));
    assert!(m.stage.early_votes().is_empty());
    // Kept past a transition timeout: not counted.
    let mut m = Manager::new(STORE);
    from_chunk(&mut m, &mut env, T0, 1, vote(4));
    let late = T0 + timing().transition_timeout;
    m.on_mgr_msg(&mut env.ctx(late), N, handoff);
    assert_eq!(
        m.tx.as_ref().map(|t| t.votes.clone()),
        Some(BTreeSet::new())
    );
}

#[test]
fn none_handoff_replay_of_finished_attempt_is_refused() {
    // seed 000 §5.3.1 none: handoff. Tenure: a replayed handoff of an attempt already
    // finished here is refused, so the old manager resumes.
    let mut env = Env::new(M);
    let mut m = Manager::new(STORE);
    m.finished.insert(TX);
    let handoff = handoff(TX, 3, &[], StoreData::default());
    m.on_mgr_msg(&mut env.ctx(T0), N, handoff);
    assert_eq!(m.state(), S::None);
    assert_eq!(
        mgr_msgs(&env.take()),
        vec![(
            N,
            MgrMsg::HandoffAbort {
                new_epoch: e(4),
                tx: TX
            }
        )]
    );
}

#[test]
fn manager_handoff_while_busy_is_refused() {
    // seed 000 §5.3.1: handoff is a transition of the none state only. Tenure: a role
    // busy with the store refuses it so the old manager resumes.
    let mut env = Env::new(M);
    let mut m = managing(3);
    let handoff = handoff(TX, 5, &[], StoreData::default());
    m.on_mgr_msg(&mut env.ctx(T0), N, handoff);
    assert_eq!(m.state(), S::Manager);
    assert_eq!(m.epoch, e(3));
    assert_eq!(
        mgr_msgs(&env.take()),
        vec![(
            N,
            MgrMsg::HandoffAbort {
                new_epoch: e(6),
                tx: TX
            }
        )]
    );
}

#[test]
fn none_help_starts_gathering_chunks() {
    // seed 000 §5.3.1 none: help(epoch, metadata) → outstanding ← chunks(metadata), won ←
    // nil, acquire(me, epoch) to each with a timeout, better/lesser ← nil, epoch
    // and metadata from the help, gathering chunks.
    let mut env = Env::new(M);
    let mut m = Manager::new(STORE);
    let now = T0 + ms(3);
    from_chunk(&mut m, &mut env, now, 2, help(3));
    let out = env.take();
    assert_eq!(m.state(), S::GatheringChunks);
    assert_eq!(m.epoch, e(3));
    assert_eq!(m.metadata, layout());
    assert_eq!(m.regen().outstanding, set(&[1, 2, 3]));
    assert!(m.regen().won.is_empty() && m.regen().better.is_empty() && m.regen().lesser.is_empty());
    assert_eq!(m.regen().rounds, 1);
    for k in layout().chunks {
        assert_eq!(m.timeout.get(&k), Some(&(now + timing().msg_timeout)));
    }
    assert_eq!(
        to_chunks(&out),
        vec![(c(1), acquire(3)), (c(2), acquire(3)), (c(3), acquire(3)),]
    );
}

#[test]
fn none_help_from_chunk_not_in_its_metadata_is_ignored() {
    // seed 000 §5.3.1 none: help. Tenure: a chunk not in its own metadata (created by a
    // relayout that may or may not have committed) is neither collected nor gathered
    // around by a manager with no role: a manager of the store decides (sim seed 80994).
    let mut env = Env::new(M);
    let mut m = Manager::new(STORE);
    let created = ToManager::Help {
        epoch: e(3),
        metadata: md(&[2, 3]),
    };
    from_chunk(&mut m, &mut env, T0, 1, created);
    assert_eq!(m.state(), S::None);
    assert!(to_chunks(&env.take()).is_empty());
}

#[test]
fn none_help_after_migrating_out_redirects_once() {
    // seed 000 §5.3.1 none: help. Tenure: a role that migrated out points the chunk at
    // the new manager (§4.2.6 redirect) once, then regenerates on the next help.
    let mut env = Env::new(M);
    let mut m = Manager::new(STORE);
    m.forwarding = Some(N);
    from_chunk(&mut m, &mut env, T0, 1, help(3));
    assert_eq!(m.state(), S::None);
    assert_eq!(m.forwarding, None);
    assert_eq!(
        to_chunks(&env.take()),
        vec![(c(1), ToChunk::Redirect { new_mgr: N })]
    );
    from_chunk(&mut m, &mut env, T0, 1, help(3));
    assert_eq!(m.state(), S::GatheringChunks);
}

#[test]
fn none_help_from_another_device_for_chunk_is_ignored() {
    // seed 000 §5.3.1 none: help. A device speaks only for its own chunks.
    let mut env = Env::new(M);
    let mut m = Manager::new(STORE);
    m.on_msg(&mut env.ctx(T0), d(2), c(1), help(3));
    assert_eq!(m.state(), S::None);
    assert!(env.take().is_empty());
}

// ---- §5.3.3 into reconciling, §5.3.4 into transition -------------------------------

fn migrating_in() -> Manager {
    let mut m = manager(S::IntoReconciling, 4);
    m.failed = set(&[3]);
    m.stage = Stage::IntoReconciling(Incoming { old_mgr: Some(N) });
    let mut t = tx(TxKind::Into, 4, layout(), set(&[1, 2]));
    t.await_mgr = Some(N);
    m.tx = Some(t);
    m
}

#[test]
fn into_reconciling_done_waits_for_every_vote_and_the_old_manager() {
    // seed 000 §5.3.3 into reconciling: done (reconciliation complete) needs every live
    // chunk's vote and the outgoing manager's; until then nothing is committed.
    let mut env = Env::new(M);
    let mut m = migrating_in();
    from_chunk(&mut m, &mut env, T0, 1, vote(4));
    from_chunk(&mut m, &mut env, T0, 3, vote(4)); // not a participant
    let other_attempt = vote_of(4, TX + 1);
    from_chunk(&mut m, &mut env, T0, 2, other_attempt);
    assert_eq!(m.state(), S::IntoReconciling);
    assert_eq!(m.tx.as_ref().map(|t| t.votes.clone()), Some(set(&[1])));
    from_chunk(&mut m, &mut env, T0, 2, vote(4));
    assert_eq!(
        m.state(),
        S::IntoReconciling,
        "the old manager has not voted"
    );
    assert!(env.take().is_empty());
}

#[test]
fn into_transition_commit_enters_manager_and_tells_old_manager() {
    // seed 000 §5.3.3 done → §5.3.4 into transition: commit tx → failed ← nil (Tenure:
    // the chunks that took no part stay failed), manager. The commit goes to the chunks
    // and the old manager.
    let mut env = Env::new(M);
    let mut m = migrating_in();
    from_chunk(&mut m, &mut env, T0, 1, vote(4));
    from_chunk(&mut m, &mut env, T0, 2, vote(4));
    let now = T0 + ms(40);
    let hv = MgrMsg::HandoffVote {
        new_epoch: e(4),
        tx: TX,
        within: timing().transition_wait,
    };
    m.on_mgr_msg(&mut env.ctx(now), N, hv);
    let out = env.take();
    assert_eq!(m.state(), S::Manager);
    assert_eq!(m.epoch, e(4));
    assert_eq!(m.metadata, layout());
    assert_eq!(m.failed, set(&[3]));
    assert!(m.tx.is_none());
    assert_eq!(m.stage.incoming().and_then(|i| i.old_mgr), None);
    assert!(m.finished.contains(&TX));
    let expiry = now + timing().commit_window;
    // (entering the manager state also replicates BeginEpoch; only the commits here)
    let commits: Vec<_> = to_chunks(&out)
        .into_iter()
        .filter(|(_, m)| matches!(m, ToChunk::Commit { .. }))
        .collect();
    assert_eq!(
        commits,
        vec![
            (
                c(1),
                commit_msg(4, StoreData::default(), expiry.saturating_since(now))
            ),
            (
                c(2),
                commit_msg(4, StoreData::default(), expiry.saturating_since(now))
            ),
        ]
    );
    assert_eq!(
        mgr_msgs(&out),
        vec![(
            N,
            MgrMsg::HandoffCommit {
                new_epoch: e(4),
                tx: TX
            }
        )]
    );
    assert_eq!(
        observations(&out),
        vec![
            Observation::BecameManager {
                store: STORE,
                epoch: e(4),
                metadata: layout(),
                cause: EpochCause::Migration
            },
            Observation::Migration {
                store: STORE,
                committed: true
            }
        ]
    );
    assert_eq!(
        m.chunkfail.keys().copied().collect::<BTreeSet<_>>(),
        set(&[1, 2])
    );
}

#[test]
fn into_transition_abort_erases_epoch_and_goes_to_none() {
    // seed 000 §5.3.4 into transition: abort tx → erase epoch and metadata, none. The
    // abort goes to the chunks and the old manager.
    let mut env = Env::new(M);
    let mut m = migrating_in();
    from_chunk(&mut m, &mut env, T0, 1, vote(4));
    let now = T0 + ms(10);
    from_chunk(&mut m, &mut env, now, 2, vote_abort(4));
    let out = env.take();
    assert_erased(&m);
    assert!(m.finished.contains(&TX));
    let expiry = now + timing().abort_window;
    assert_eq!(
        to_chunks(&out),
        vec![
            (c(1), abort_msg(4, expiry.saturating_since(now))),
            (c(2), abort_msg(4, expiry.saturating_since(now)))
        ]
    );
    assert_eq!(
        mgr_msgs(&out),
        vec![(
            N,
            MgrMsg::HandoffAbort {
                new_epoch: e(4),
                tx: TX
            }
        )]
    );
    assert_eq!(
        observations(&out),
        vec![Observation::Migration {
            store: STORE,
            committed: false
        }]
    );
}

#[test]
fn into_transition_abort_on_vote_timeout() {
    // seed 000 §5.3.4 into transition: abort tx. Tenure: a vote missing at the
    // transition deadline aborts.
    let mut env = Env::new(M);
    let mut m = migrating_in();
    let deadline = T0 + timing().transition_timeout;
    assert_eq!(m.next_timeout(), Some(deadline));
    m.on_tick(&mut env.ctx(deadline - ms(1)));
    assert_eq!(m.state(), S::IntoReconciling);
    m.on_tick(&mut env.ctx(deadline));
    let out = env.take();
    assert_erased(&m);
    assert_eq!(mgr_msgs(&out).len(), 1);
    assert_eq!(
        chunks_sent(&out, |x| matches!(x, ToChunk::Abort { .. })),
        set(&[1, 2])
    );
}

// ---- §5.3.5 out of reconciling, §5.3.6 out of transition ---------------------------

fn migrating_out() -> Manager {
    let mut m = managing(3);
    m.stage = stage(S::OutOfTransition);
    m
}

#[test]
fn out_of_reconciling_done_votes_and_enters_out_of_transition() {
    // seed 000 §5.3.5 out of reconciling: done → initiate commit voting commit, out of
    // transition. The outgoing manager's state travelled in the handoff; it is reconciled
    // when the incoming manager says it holds it (Tenure: HandoffReady), and votes in
    // answer, saying how long its window stays open.
    let mut env = Env::new(M);
    let mut m = managing(3);
    assert!(m.migrate(&mut env.ctx(T0), N));
    let out = env.take();
    let id = sent_tx_id(&out);
    assert_eq!(m.state(), S::OutOfReconciling);
    assert_eq!(m.stage.outgoing().map(|o| o.tx), Some(id));
    assert_eq!(
        m.stage.outgoing().map(|o| o.deadline),
        Some(T0 + timing().transition_wait)
    );
    assert!(
        !mgr_msgs(&out)
            .iter()
            .any(|(_, x)| matches!(x, MgrMsg::HandoffVote { .. })),
        "no vote before the incoming manager is ready"
    );
    // A ready for another attempt or from another device changes nothing.
    let other = MgrMsg::HandoffReady {
        new_epoch: e(4),
        tx: id + 1,
    };
    m.on_mgr_msg(&mut env.ctx(T0 + ms(5)), N, other);
    let ready = MgrMsg::HandoffReady {
        new_epoch: e(4),
        tx: id,
    };
    m.on_mgr_msg(&mut env.ctx(T0 + ms(5)), d(2), ready.clone());
    assert!(env.take().is_empty());
    assert_eq!(m.state(), S::OutOfReconciling);
    m.on_mgr_msg(&mut env.ctx(T0 + ms(10)), N, ready);
    assert_eq!(m.state(), S::OutOfTransition);
    assert_eq!(
        mgr_msgs(&env.take()),
        vec![(
            N,
            MgrMsg::HandoffVote {
                new_epoch: e(4),
                tx: id,
                within: timing().transition_wait - ms(10),
            }
        )]
    );
}

#[test]
fn out_of_reconciling_ready_after_the_window_gets_no_vote() {
    // seed 000 §5.3.5 out of reconciling. Tenure: a HandoffReady read after the window
    // closed (the outgoing manager's timer not yet fired) is not answered: the incoming
    // manager could otherwise commit after this one stepped down.
    let mut env = Env::new(M);
    let mut m = managing(3);
    assert!(m.migrate(&mut env.ctx(T0), N));
    let id = sent_tx_id(&env.take());
    let ready = MgrMsg::HandoffReady {
        new_epoch: e(4),
        tx: id,
    };
    m.on_mgr_msg(&mut env.ctx(T0 + timing().transition_wait), N, ready);
    assert!(env.take().is_empty());
    assert_eq!(m.state(), S::OutOfReconciling);
}

#[test]
fn into_reconciling_vote_bounds_the_deadline_by_the_outgoing_window() {
    // seed 000 §5.3.3 into reconciling. Tenure: the outgoing manager's vote says how long
    // it still waits; counted from our HandoffReady (sent earlier in real time) less the
    // drift bound, it can end the attempt before our own timeout — and votes read after
    // that deadline (a paused device) abort instead of committing.
    let mut env = Env::new(M);
    let mut m = migrating_in();
    let within = ms(300);
    let hv = MgrMsg::HandoffVote {
        new_epoch: e(4),
        tx: TX,
        within,
    };
    m.on_mgr_msg(&mut env.ctx(T0 + ms(100)), N, hv);
    let by = T0 + within - timing().clock_drift;
    assert_eq!(m.tx.as_ref().map(|t| t.deadline), Some(by));
    assert_eq!(m.state(), S::IntoReconciling);
    from_chunk(&mut m, &mut env, by, 1, vote(4));
    from_chunk(&mut m, &mut env, by, 2, vote(4));
    let out = env.take();
    assert_erased(&m);
    assert!(
        chunks_sent(&out, |x| matches!(x, ToChunk::Commit { .. })).is_empty(),
        "nothing committed after the deadline"
    );
    assert_eq!(
        chunks_sent(&out, |x| matches!(x, ToChunk::Abort { .. })),
        set(&[1, 2])
    );
}

#[test]
fn out_of_transition_commit_forwards_and_goes_to_none() {
    // seed 000 §5.3.6 out of transition: commit tx → erase epoch and metadata,
    // forwarding address ← new mgr id, none.
    let mut env = Env::new(M);
    let mut m = migrating_out();
    let commit = MgrMsg::HandoffCommit {
        new_epoch: e(4),
        tx: TX,
    };
    m.on_mgr_msg(&mut env.ctx(T0 + ms(30)), N, commit);
    let out = env.take();
    assert_erased(&m);
    assert_eq!(m.forwarding, Some(N));
    assert_eq!(observations(&out), vec![stopped(3)]);
    assert!(sends(&out).is_empty());
}

#[test]
fn out_of_transition_commit_of_another_attempt_is_ignored() {
    // seed 000 §5.3.6 out of transition: commit tx. Only the incoming manager's commit of
    // this attempt (Tenure: by id) for the next epoch counts.
    let mut env = Env::new(M);
    let msgs = [
        (
            d(2),
            MgrMsg::HandoffCommit {
                new_epoch: e(4),
                tx: TX,
            },
        ),
        (
            N,
            MgrMsg::HandoffCommit {
                new_epoch: e(5),
                tx: TX,
            },
        ),
        (
            N,
            MgrMsg::HandoffCommit {
                new_epoch: e(4),
                tx: TX + 1,
            },
        ),
        (
            N,
            MgrMsg::HandoffAbort {
                new_epoch: e(4),
                tx: TX + 1,
            },
        ),
    ];
    for (from, msg) in msgs {
        let mut m = migrating_out();
        m.on_mgr_msg(&mut env.ctx(T0), from, msg.clone());
        assert_eq!(m.state(), S::OutOfTransition, "{msg:?}");
        assert_eq!(m.epoch, e(3));
        assert!(env.take().is_empty());
    }
}

#[test]
fn out_of_transition_abort_returns_to_manager() {
    // seed 000 §5.3.6 out of transition: abort tx → erase new mgr id, manager. The chunks'
    // leases run for the abort window (§4.2.3 abort tx).
    let mut env = Env::new(M);
    let mut m = migrating_out();
    let now = T0 + ms(30);
    let abort = MgrMsg::HandoffAbort {
        new_epoch: e(4),
        tx: TX,
    };
    m.on_mgr_msg(&mut env.ctx(now), N, abort);
    assert_eq!(m.state(), S::Manager);
    assert_eq!(m.epoch, e(3));
    assert!(m.stage.outgoing().is_none());
    for k in layout().chunks {
        assert_eq!(m.chunkfail.get(&k), Some(&(now + timing().abort_window)));
    }
    assert!(env.take().is_empty());
}

#[test]
fn out_of_transition_without_answer_steps_down() {
    // seed 000 §5.3.6 out of transition. Tenure: if the incoming manager never answers
    // within `transition_wait`, step down (resuming could run beside a committed
    // successor) and let the chunks regenerate, forwarding to the incoming manager.
    // The same out of reconciling, when no HandoffReady came.
    for state in [S::OutOfReconciling, S::OutOfTransition] {
        let mut env = Env::new(M);
        let mut m = migrating_out();
        m.stage.advance(state);
        let deadline = T0 + timing().transition_wait;
        m.on_tick(&mut env.ctx(deadline - ms(1)));
        assert_eq!(m.state(), state);
        m.on_tick(&mut env.ctx(deadline));
        let out = env.take();
        assert_erased(&m);
        assert_eq!(m.forwarding, Some(N));
        assert_eq!(observations(&out), vec![stopped(3)]);
    }
}

// ---- §5.3.7 manager --------------------------------------------------------------------

#[test]
fn manager_migrate_sends_handoff_and_epoch_transitions() {
    // seed 000 §5.3.7 manager: migrate(node) → handoff(epoch, metadata, failed) to node,
    // epoch transition(epoch, epoch + 1, metadata, node) to all chunks ∈ metadata −
    // failed, new mgr id ← node, out of transition.
    let mut env = Env::new(M);
    let mut m = managing(3);
    m.failed = set(&[3]);
    m.host.data = data_with(3, 1, 4);
    let now = T0 + ms(7);
    assert!(m.migrate(&mut env.ctx(now), N));
    let out = env.take();
    let id = sent_tx_id(&out);
    assert_eq!(m.stage.outgoing().map(|o| o.new_mgr), Some(N));
    // Tenure: out of reconciling until the incoming manager holds the state.
    assert_eq!(m.state(), S::OutOfReconciling);
    assert_eq!(
        mgr_msgs(&out)[0],
        (N, handoff(id, 3, &[3], data_with(3, 1, 4)))
    );
    assert_eq!(
        epoch_transitions(&out),
        vec![(c(1), 3, 4, layout(), N), (c(2), 3, 4, layout(), N)]
    );
    assert_eq!(m.epoch, e(3), "the epoch changes only at commit");
}

#[test]
fn manager_migrate_to_self_or_when_not_manager_is_refused() {
    // seed 000 §5.3.7: migrate is a transition of the manager state only (and to another
    // node).
    let mut env = Env::new(M);
    let mut m = managing(3);
    assert!(!m.migrate(&mut env.ctx(T0), M));
    assert_eq!(m.state(), S::Manager);
    let mut g = gathering(3, &[1], &[2, 3]);
    assert!(!g.migrate(&mut env.ctx(T0), N));
    assert_eq!(g.state(), S::GatheringChunks);
    assert!(env.take().is_empty());
}

#[test]
fn manager_chunkfail_new_failure_keeping_quorum_stays_manager() {
    // seed 000 §5.3.7 manager: chunkfail(chunk ∉ failed) → failed += chunk, chunkfail to
    // the outside policy; coverage and quorum hold → manager.
    let mut env = Env::new(M);
    let mut m = managing(3);
    let at = T0 + ms(100);
    m.chunkfail.insert(c(3), at);
    assert_eq!(m.next_timeout(), Some(T0), "policies are due; harmless");
    m.on_tick(&mut env.ctx(at));
    let out = env.take();
    assert_eq!(m.state(), S::Manager);
    assert_eq!(m.failed, set(&[3]));
    assert!(!m.chunkfail.contains_key(&c(3)));
    assert_eq!(m.policy.failed_at.get(&c(3)), Some(&at));
    assert_eq!(
        observations(&out),
        vec![chunk_failed(3, FailedWhy::LeaseExpired)]
    );
    assert!(sends(&out).is_empty());
}

#[test]
fn manager_chunkfail_new_failure_losing_quorum_suicides() {
    // seed 000 §5.3.7 manager: chunkfail(chunk ∉ failed) without coverage and quorum →
    // newly awake (suicide).
    let mut env = Env::new(M);
    let mut m = managing(3);
    m.failed = set(&[2]);
    m.chunkfail.remove(&c(2));
    m.chunkfail.insert(c(3), T0 + ms(100));
    m.on_tick(&mut env.ctx(T0 + ms(100)));
    let out = env.take();
    assert_erased(&m);
    assert_eq!(
        observations(&out),
        vec![chunk_failed(3, FailedWhy::LeaseExpired), stopped(3)]
    );
}

#[test]
fn manager_chunkfail_of_recovered_chunk_drops_it_from_recovered() {
    // seed 000 §5.3.7 manager: chunkfail(chunk ∈ failed) — failure of a recovered chunk →
    // recovered -= chunk, manager.
    let mut env = Env::new(M);
    let mut m = managing(3);
    m.failed = set(&[3]);
    m.recovered = set(&[3]);
    m.chunkfail.insert(c(3), T0 + ms(100));
    m.on_tick(&mut env.ctx(T0 + ms(100)));
    let out = env.take();
    assert_eq!(m.state(), S::Manager);
    assert!(m.recovered.is_empty());
    assert_eq!(m.failed, set(&[3]));
    assert!(!m.chunkfail.contains_key(&c(3)));
    assert!(observations(&out).is_empty());
}

#[test]
fn manager_renewal_request_renews_lease() {
    // seed 000 §5.3.7 manager: renewal request(chunk epoch == epoch) from a chunk ∉
    // failed → renewal(now + d_l), chunkfail(sender) ← that time.
    let mut env = Env::new(M);
    let mut m = managing(3);
    let now = T0 + ms(600);
    from_chunk(
        &mut m,
        &mut env,
        now,
        1,
        ToManager::RenewalRequest {
            epoch: e(3),
            renewed: None,
        },
    );
    assert_eq!(to_chunks(&env.take()), vec![(c(1), renewal(3, now))]);
    assert_eq!(m.chunkfail.get(&c(1)), Some(&(now + timing().lease)));
    assert_eq!(m.state(), S::Manager);
}

#[test]
fn manager_renewal_request_from_failed_chunk_or_other_epoch_is_ignored() {
    // seed 000 §5.3.7 manager: renewal request from a failed chunk, or for another epoch
    // → ignore.
    let mut env = Env::new(M);
    let mut m = managing(3);
    m.failed = set(&[3]);
    from_chunk(
        &mut m,
        &mut env,
        T0,
        3,
        ToManager::RenewalRequest {
            epoch: e(3),
            renewed: None,
        },
    );
    from_chunk(
        &mut m,
        &mut env,
        T0,
        1,
        ToManager::RenewalRequest {
            epoch: e(2),
            renewed: None,
        },
    );
    assert!(env.take().is_empty());
    assert_eq!(m.chunkfail.get(&c(1)), Some(&(T0 + timing().lease)));
    assert!(m.recovered.is_empty());
}

#[test]
fn manager_relayout_sends_epoch_transition_and_enters_relayout_reconciling() {
    // seed 000 §5.3.7 manager: relayout(new metadata) → epoch transition(epoch, epoch +
    // 1, new metadata, me) to (chunks ∈ metadata − failed) ∪ (chunks ∈ new metadata),
    // new metadata log ← new metadata, relayout reconciling.
    let mut env = Env::new(M);
    let mut m = managing(3);
    let new = md(&[1, 2, 5]);
    assert!(m.relayout(&mut env.ctx(T0), new.clone()));
    let out = env.take();
    let id = sent_tx_id(&out);
    assert_eq!(m.state(), S::RelayoutReconciling);
    assert_eq!(m.stage.new_metadata_log().cloned(), Some(new.clone()));
    assert_eq!(m.epoch, e(3));
    assert_eq!(
        epoch_transitions(&out),
        vec![
            (c(1), 3, 4, new.clone(), M),
            (c(2), 3, 4, new.clone(), M),
            (c(3), 3, 4, new.clone(), M),
            (c(5), 3, 4, new.clone(), M),
        ]
    );
    let tx = m.tx.as_ref().expect("a transition");
    assert_eq!((tx.id, tx.kind, tx.new_epoch), (id, TxKind::Relayout, e(4)));
    assert_eq!(tx.participants, set(&[1, 2, 3, 5]));
}

#[test]
fn manager_relayout_reconciles_chunks_that_lack_the_state() {
    // seed 000 §5.3.8 relayout reconciling: "chunks are being reconciled". Tenure sends
    // the store's state in the epoch transition to the participants that do not hold
    // it — a new chunk (5) and a recovered one (3) — and not to the live ones (1, 2).
    // Sim seed 2847: the commit of a relayout reached only one chunk of the new
    // layout; the next regeneration found the new chunk (voted empty) and a stale one,
    // and lost acknowledged writes.
    let mut env = Env::new(M);
    let mut m = managing(3);
    m.host.data = data_with(3, 7, 42);
    m.failed = set(&[3]);
    m.recovered = set(&[3]);
    assert!(m.relayout(&mut env.ctx(T0), md(&[1, 3, 5])));
    let out = env.take();
    let sent: Vec<(ChunkId, Option<StoreData>)> = to_chunks(&out)
        .into_iter()
        .filter_map(|(k, x)| match x {
            ToChunk::EpochTransition { data, .. } => Some((k, data.map(|d| *d))),
            _ => None,
        })
        .collect();
    let state = Some(data_with(3, 7, 42));
    assert_eq!(
        sent,
        vec![
            (c(1), None),
            (c(2), None),
            (c(3), state.clone()),
            (c(5), state)
        ]
    );
}

#[test]
fn manager_relayout_leaves_out_failed_unrecovered_chunks() {
    // seed 000 §5.3.7 manager: relayout sends to (metadata − failed) ∪ new metadata. A
    // failed chunk that is also in the new layout would be sent the transition by the
    // seed; the implementation leaves it out unless it has recovered, since the commit
    // waits for every participant's vote.
    let mut env = Env::new(M);
    let mut m = managing(3);
    m.failed = set(&[2, 3]);
    m.recovered = set(&[2]);
    let new = md(&[1, 2, 3, 5]);
    assert!(m.relayout(&mut env.ctx(T0), new));
    let out = env.take();
    assert_eq!(
        chunks_sent(&out, |x| matches!(x, ToChunk::EpochTransition { .. })),
        set(&[1, 2, 5])
    );
}

#[test]
fn manager_relayout_without_quorum_of_new_layout_is_refused() {
    // seed 000 §5.3.7 manager: relayout. Tenure (relayout's comment): the participants
    // must hold quorum and coverage of the new layout, or a later regeneration could find
    // a quorum that never received the state; an empty layout and a relayout outside the
    // manager state are refused too.
    let mut env = Env::new(M);
    let mut m = managing(3);
    m.failed = set(&[3]);
    assert!(!m.relayout(&mut env.ctx(T0), md(&[2, 3])));
    assert!(!m.relayout(&mut env.ctx(T0), md(&[])));
    assert_eq!(m.state(), S::Manager);
    assert_eq!(m.stage.new_metadata_log().cloned(), None);
    let mut g = gathering(3, &[1], &[2, 3]);
    assert!(!g.relayout(&mut env.ctx(T0), md(&[1, 2, 5])));
    assert!(env.take().is_empty());
}

#[test]
fn manager_help_from_live_chunk_marks_failed_and_acquires() {
    // seed 000 §5.3.7 manager: help from a chunk ∈ chunks(metadata), ∉ failed → failed
    // += sender, chunkfail to the outside policy, acquire(me, epoch) to it.
    let mut env = Env::new(M);
    let mut m = managing(3);
    let now = T0 + ms(5);
    from_chunk(&mut m, &mut env, now, 1, help(3));
    let out = env.take();
    assert_eq!(m.state(), S::Manager);
    assert_eq!(m.failed, set(&[1]));
    assert_eq!(observations(&out), vec![chunk_failed(1, FailedWhy::Help)]);
    assert_eq!(to_chunks(&out), vec![(c(1), acquire(3))]);
}

#[test]
fn manager_help_losing_quorum_suicides() {
    // seed 000 §5.3.7 manager: help from a live chunk when, with it failed, coverage and
    // quorum no longer hold → newly awake (suicide).
    let mut env = Env::new(M);
    let mut m = managing(3);
    m.failed = set(&[3]);
    from_chunk(&mut m, &mut env, T0, 1, help(3));
    let out = env.take();
    assert_erased(&m);
    assert_eq!(
        observations(&out),
        vec![chunk_failed(1, FailedWhy::Help), stopped(3)]
    );
    assert!(sends(&out).is_empty());
}

#[test]
fn manager_help_from_failed_chunk_acquires_again() {
    // seed 000 §5.3.7 manager: help from a chunk ∈ chunks(metadata) already failed →
    // acquire it (no new failure).
    let mut env = Env::new(M);
    let mut m = managing(3);
    m.failed = set(&[3]);
    from_chunk(&mut m, &mut env, T0, 3, help(3));
    let out = env.take();
    assert_eq!(m.failed, set(&[3]));
    assert!(observations(&out).is_empty());
    assert_eq!(to_chunks(&out), vec![(c(3), acquire(3))]);
}

#[test]
fn manager_help_from_chunk_not_in_layout_sends_lose() {
    // seed 000 §5.3.7 manager: help from a chunk ∉ chunks(metadata) → lose, manager.
    let mut env = Env::new(M);
    for epoch in [2, 3] {
        let mut m = managing(3);
        from_chunk(&mut m, &mut env, T0, 5, help(epoch));
        assert_eq!(m.state(), S::Manager);
        assert!(m.failed.is_empty());
        assert_eq!(to_chunks(&env.take()), vec![(c(5), ToChunk::Lose)]);
    }
}

#[test]
fn manager_help_from_newer_chunk_not_in_layout_is_ignored() {
    // seed 000 §5.3.7 manager: help from a chunk ∉ chunks(metadata). Tenure: lose goes only
    // to chunks from an older epoch; a chunk from a newer epoch is not ours to delete.
    let mut env = Env::new(M);
    let mut m = managing(3);
    from_chunk(&mut m, &mut env, T0, 5, help(4));
    assert_eq!(m.state(), S::Manager);
    assert!(env.take().is_empty());
}

#[test]
fn manager_ack_timeout_spares_for_a_lease_the_chunk_quorum_needs() {
    // SafeTalk: chunks silent past the ack timeout are failed (seed 000 §5.3.7 manager then
    // goes on only with quorum and coverage). Tenure: the chunk renewed longest ago first
    // (its lease to the manager, `chunkfail`, ends first), and
    // a chunk whose failure would cost the quorum waits up to one lease from the batch's
    // sending (a failover elsewhere slows its device; it answers late, not never).
    let lease = timing().lease;
    let mut env = Env::new(M);
    let mut m = managing(3);
    // c3 renewed its lease since; c1 (a dead device) did not.
    m.chunkfail.insert(c(3), T0 + lease + ms(700));
    m.host.inflight = Some(super::manager::Batch::waiting_for(
        set(&[1, 3]),
        T0,
        T0 + ms(300),
    ));
    m.on_tick(&mut env.ctx(T0 + ms(300)));
    assert_eq!(m.state(), S::Manager);
    assert_eq!(
        m.failed,
        set(&[1]),
        "the chunk renewed longest ago is blamed"
    );
    let b = m.host.inflight.as_ref().expect("the batch still waits");
    assert_eq!(b.waiting, set(&[3]));
    assert_eq!(b.deadline, T0 + lease);
    m.on_tick(&mut env.ctx(T0 + lease - ms(1)));
    assert_eq!((m.state(), m.failed.clone()), (S::Manager, set(&[1])));
    env.take();
    m.on_tick(&mut env.ctx(T0 + lease));
    assert_eq!(
        m.state(),
        S::None,
        "a lease without an answer: failed, quorum lost"
    );
    assert!(observations(&env.take()).contains(&chunk_failed(3, FailedWhy::AcceptLate)));
}

#[test]
fn manager_ack_timeout_spares_its_own_chunk_for_a_lease() {
    // SafeTalk: chunks silent past the ack timeout are failed. Tenure: this device's own
    // chunk is heard as long as its manager runs; a late ACCEPTED of it is the device's
    // disk flush, which every store here waits on alike. It is blamed only one lease
    // after the batch's sending.
    let t = timing();
    let mut env = Env::new(d(1));
    let mut m = managing(3);
    for k in layout().chunks {
        m.chunkfail.insert(k, T0 + ms(10_000));
    }
    m.host.inflight = Some(super::manager::Batch::waiting_for(
        set(&[1]),
        T0,
        T0 + ms(300),
    ));
    m.on_tick(&mut env.ctx(T0 + ms(300)));
    assert!(
        m.failed.is_empty(),
        "its own chunk, blamed at the ack timeout"
    );
    let longest = t.ack_timeout_longest();
    let b = m.host.inflight.as_ref().expect("the batch still waits");
    assert_eq!(
        b.deadline,
        T0 + longest,
        "no chunk blamed before the longest"
    );
    m.on_tick(&mut env.ctx(T0 + longest));
    assert!(
        m.failed.is_empty(),
        "its own chunk, blamed at the longest ack timeout"
    );
    let b = m.host.inflight.as_ref().expect("the batch still waits");
    assert_eq!(b.deadline, T0 + t.lease);
    m.on_tick(&mut env.ctx(T0 + t.lease));
    assert_eq!(m.failed, set(&[1]), "a lease without an answer: blamed");
}

#[test]
fn manager_ack_timeout_spares_a_chunk_whose_device_is_still_heard() {
    // SafeTalk: chunks silent past the ack timeout are failed. Tenure: a chunk whose device
    // is still heard from is slow (a disk flush stalled, a loaded CPU), not gone: it is
    // spared until its device falls silent (`Timing::silence` after the last message
    // from it), and no longer than one lease from the batch's sending.
    let t = timing();
    let mut env = Env::new(M);
    let mut m = managing(3);
    // Every chunk renewed its lease to this manager since (no `chunkfail` is due).
    for k in layout().chunks {
        m.chunkfail.insert(k, T0 + ms(10_000));
    }
    env.heard.insert(d(1), T0 + ms(100));
    m.host.inflight = Some(super::manager::Batch::waiting_for(
        set(&[1]),
        T0,
        T0 + ms(300),
    ));
    m.on_tick(&mut env.ctx(T0 + ms(300)));
    assert!(m.failed.is_empty(), "heard 200 ms ago: not blamed");
    let b = m.host.inflight.as_ref().expect("the batch still waits");
    assert_eq!(b.deadline, T0 + ms(100) + t.silence());
    // Heard again: spared again, up to one lease from the sending.
    env.heard.insert(d(1), T0 + ms(1400));
    m.on_tick(&mut env.ctx(T0 + ms(100) + t.silence()));
    assert!(m.failed.is_empty());
    let b = m.host.inflight.as_ref().expect("the batch still waits");
    assert_eq!(b.deadline, T0 + t.lease);
    m.on_tick(&mut env.ctx(T0 + t.lease));
    assert_eq!(m.failed, set(&[1]), "a lease without an answer: blamed");
    // A device that fell silent is blamed at the ack timeout.
    let mut m = managing(3);
    env.heard.insert(d(1), T0);
    m.host.inflight = Some(super::manager::Batch::waiting_for(
        set(&[1]),
        T0 + t.silence(),
        T0 + t.silence() + ms(300),
    ));
    m.on_tick(&mut env.ctx(T0 + t.silence() + ms(300)));
    assert_eq!(m.failed, set(&[1]), "silent: blamed at once");
}

#[test]
fn manager_ack_from_failed_chunk_marks_recovered() {
    // seed 000 §5.3.7 manager: ack from a sender ∈ failed → recovered += sender,
    // chunkfail(sender) ← now + d_l.
    let mut env = Env::new(M);
    let mut m = managing(3);
    m.failed = set(&[3]);
    m.chunkfail.remove(&c(3));
    let now = T0 + ms(9);
    from_chunk(&mut m, &mut env, now, 3, ack(3));
    assert_eq!(m.recovered, set(&[3]));
    assert_eq!(m.failed, set(&[3]));
    assert_eq!(m.chunkfail.get(&c(3)), Some(&(now + timing().lease)));
    assert_eq!(m.state(), S::Manager);
    assert!(env.take().is_empty());
}

#[test]
fn manager_ack_from_live_chunk_changes_nothing() {
    // seed 000 §5.3.7 manager: ack from a sender ∉ failed → nothing.
    let mut env = Env::new(M);
    let mut m = managing(3);
    from_chunk(&mut m, &mut env, T0 + ms(9), 1, ack(3));
    assert!(m.recovered.is_empty());
    assert_eq!(m.chunkfail.get(&c(1)), Some(&(T0 + timing().lease)));
    assert!(env.take().is_empty());
}

#[test]
fn manager_ack_conditional_from_failed_chunk_marks_recovered() {
    // seed 000 §5.3.7 manager: ack-conditional (chunk from a previous epoch) from a sender
    // ∈ failed → as ack: recovered += sender, chunkfail(sender) ← now + d_l.
    let mut env = Env::new(M);
    let mut m = managing(3);
    m.failed = set(&[3]);
    let now = T0 + ms(9);
    from_chunk(&mut m, &mut env, now, 3, ack_conditional(3, 2, md(&[3, 4])));
    assert_eq!(m.recovered, set(&[3]));
    assert_eq!(m.chunkfail.get(&c(3)), Some(&(now + timing().lease)));
    assert_eq!(m.state(), S::Manager);
    assert_eq!(m.epoch, e(3));
    assert_eq!(m.metadata, layout());
}

#[test]
fn manager_ack_conditional_from_newer_epoch_steps_down() {
    // seed 000 §5.3.7 manager: ack-conditional. Tenure: a chunk from a *newer* epoch
    // means a successor committed while this manager was cut off: step down.
    let mut env = Env::new(M);
    let mut m = managing(3);
    m.failed = set(&[3]);
    from_chunk(&mut m, &mut env, T0, 3, ack_conditional(3, 5, layout()));
    let out = env.take();
    assert_erased(&m);
    assert_eq!(observations(&out), vec![stopped(3)]);
}

#[test]
fn manager_nack_does_nothing() {
    // seed 000 §5.3.7 manager: nack(chunk epoch, chunk mgr, lease type) → do nothing.
    let mut env = Env::new(M);
    let mut m = managing(3);
    m.failed = set(&[3]);
    from_chunk(&mut m, &mut env, T0, 3, nack(Some(N), LeaseType::Recovery));
    assert_eq!(m.state(), S::Manager);
    assert!(m.recovered.is_empty());
    assert_eq!(m.failed, set(&[3]));
    assert!(env.take().is_empty());
}

#[test]
fn manager_recovery_renewal_request_from_recovered_chunk_renews() {
    // seed 000 §5.3.7 manager: recovery renewal request from a sender ∈ recovered →
    // renewal(now + d_l), chunkfail(sender) ← that time.
    let mut env = Env::new(M);
    let mut m = managing(3);
    m.failed = set(&[3]);
    m.recovered = set(&[3]);
    let now = T0 + ms(600);
    let req = ToManager::RecoveryRenewalRequest { epoch: e(3) };
    from_chunk(&mut m, &mut env, now, 3, req);
    assert_eq!(to_chunks(&env.take()), vec![(c(3), renewal(3, now))]);
    assert_eq!(m.chunkfail.get(&c(3)), Some(&(now + timing().lease)));
}

#[test]
fn manager_recovery_renewal_request_from_unrecovered_chunk_is_ignored() {
    // seed 000 §5.3.7 manager: recovery renewal request from a sender ∉ recovered →
    // ignore.
    let mut env = Env::new(M);
    let mut m = managing(3);
    m.failed = set(&[3]);
    let req = ToManager::RecoveryRenewalRequest { epoch: e(3) };
    from_chunk(&mut m, &mut env, T0, 3, req.clone());
    from_chunk(&mut m, &mut env, T0, 1, req);
    assert!(env.take().is_empty());
}

// ---- §5.3.8 relayout reconciling, §5.3.9 relayout transition -----------------------

fn relayouting() -> Manager {
    let mut m = managing(3);
    m.stage = Stage::RelayoutReconciling(md(&[1, 2, 5]));
    m.tx = Some(tx(TxKind::Relayout, 4, md(&[1, 2, 5]), set(&[1, 2, 3, 5])));
    m
}

#[test]
fn relayout_reconciling_done_waits_for_every_vote() {
    // seed 000 §5.3.8 relayout reconciling: done (every participant reconciled) — until
    // the last vote, nothing is committed.
    let mut env = Env::new(M);
    let mut m = relayouting();
    for n in [1, 2, 3] {
        from_chunk(&mut m, &mut env, T0, n, vote(4));
    }
    from_chunk(&mut m, &mut env, T0, 1, vote(4)); // a duplicate
    assert_eq!(m.state(), S::RelayoutReconciling);
    assert_eq!(
        m.tx.as_ref().map(|t| t.votes.clone()),
        Some(set(&[1, 2, 3]))
    );
    assert!(env.take().is_empty());
}

#[test]
fn relayout_transition_commit_installs_new_metadata_and_increments_epoch() {
    // seed 000 §5.3.8 done → §5.3.9 relayout transition: commit tx → metadata ← new
    // metadata, erase the log, increment epoch, relayout commit to the outside policy,
    // manager.
    let mut env = Env::new(M);
    let mut m = relayouting();
    for n in [1, 2, 3] {
        from_chunk(&mut m, &mut env, T0, n, vote(4));
    }
    let now = T0 + ms(50);
    from_chunk(&mut m, &mut env, now, 5, vote(4));
    let out = env.take();
    assert_eq!(m.state(), S::Manager);
    assert_eq!(m.epoch, e(4));
    assert_eq!(m.metadata, md(&[1, 2, 5]));
    assert_eq!(m.stage.new_metadata_log().cloned(), None);
    assert!(m.failed.is_empty());
    assert!(m.tx.is_none());
    let expiry = now + timing().commit_window;
    assert_eq!(
        chunks_sent(&out, |x| *x
            == commit_msg(4, StoreData::default(), expiry.saturating_since(now))),
        set(&[1, 2, 3, 5]),
        "c(3) learns it is out of the layout from the commit"
    );
    assert_eq!(
        m.chunkfail.keys().copied().collect::<BTreeSet<_>>(),
        set(&[1, 2, 5])
    );
    assert_eq!(
        observations(&out),
        vec![
            Observation::BecameManager {
                store: STORE,
                epoch: e(4),
                metadata: md(&[1, 2, 5]),
                cause: EpochCause::Relayout
            },
            Observation::Relayout {
                store: STORE,
                committed: true
            }
        ]
    );
}

#[test]
fn relayout_transition_abort_returns_to_manager() {
    // seed 000 §5.3.9 relayout transition: abort tx → erase the log, relayout abort to
    // the outside policy, manager (same epoch and layout).
    let mut env = Env::new(M);
    let mut m = relayouting();
    from_chunk(&mut m, &mut env, T0, 1, vote(4));
    let now = T0 + ms(50);
    from_chunk(&mut m, &mut env, now, 5, vote_abort(4));
    let out = env.take();
    assert_eq!(m.state(), S::Manager);
    assert_eq!(m.epoch, e(3));
    assert_eq!(m.metadata, layout());
    assert_eq!(m.stage.new_metadata_log().cloned(), None);
    assert!(m.tx.is_none());
    let expiry = now + timing().abort_window;
    assert_eq!(
        chunks_sent(&out, |x| *x == abort_msg(4, expiry.saturating_since(now))),
        set(&[1, 2, 3, 5])
    );
    for k in layout().chunks {
        assert_eq!(m.chunkfail.get(&k), Some(&expiry));
    }
    assert_eq!(
        observations(&out),
        vec![Observation::Relayout {
            store: STORE,
            committed: false
        }]
    );
}

#[test]
fn relayout_transition_abort_on_vote_timeout() {
    // seed 000 §5.3.9 relayout transition: abort tx. Tenure: a vote missing at the
    // transition deadline aborts.
    let mut env = Env::new(M);
    let mut m = relayouting();
    from_chunk(&mut m, &mut env, T0, 1, vote(4));
    let deadline = T0 + timing().transition_timeout;
    m.on_tick(&mut env.ctx(deadline));
    let out = env.take();
    assert_eq!(m.state(), S::Manager);
    assert_eq!(m.epoch, e(3));
    assert_eq!(
        chunks_sent(&out, |x| matches!(x, ToChunk::Abort { .. })),
        set(&[1, 2, 3, 5])
    );
}

#[test]
fn relayout_transition_abort_drops_recovered_chunks() {
    // seed 000 §5.3.9 relayout transition: abort tx. Recovered chunks that took part fall
    // back to no lease on abort (§4.2.8), so the manager stops counting them recovered.
    let mut env = Env::new(M);
    let mut m = relayouting();
    m.failed = set(&[3]);
    m.recovered = set(&[3]);
    from_chunk(&mut m, &mut env, T0, 3, vote_abort(4));
    assert!(m.recovered.is_empty());
    assert!(!m.chunkfail.contains_key(&c(3)));
    assert_eq!(m.failed, set(&[3]));
}

// ---- §5.3.10 gathering chunks ------------------------------------------------------

#[test]
fn gathering_chunks_ack_with_more_outstanding_stays() {
    // seed 000 §5.3.10 gathering chunks: ack → outstanding -= sender, won += sender,
    // cancel timeout(sender), chunkfail(sender) ← now + d_l; outstanding ≠ nil →
    // gathering chunks.
    let mut env = Env::new(M);
    let mut m = gathering(3, &[1, 2, 3], &[]);
    let now = T0 + ms(2);
    from_chunk(&mut m, &mut env, now, 1, ack(3));
    assert_eq!(m.state(), S::GatheringChunks);
    assert_eq!(m.regen().won, set(&[1]));
    assert_eq!(m.regen().outstanding, set(&[2, 3]));
    assert!(!m.timeout.contains_key(&c(1)));
    assert_eq!(m.chunkfail.get(&c(1)), Some(&(now + timing().lease)));
    assert!(env.take().is_empty());
}

#[test]
fn gathering_chunks_ack_last_outstanding_enters_gathered() {
    // seed 000 §5.3.10 gathering chunks: ack, outstanding = nil → gathered (§5.3.11),
    // which, with coverage and quorum, goes on to gathering leases.
    let mut env = Env::new(M);
    let mut m = gathering(3, &[3], &[1]);
    from_chunk(&mut m, &mut env, T0, 3, ack(3));
    let out = env.take();
    assert_eq!(m.regen().won, set(&[1, 3]));
    assert!(m.regen().outstanding.is_empty());
    assert_eq!(m.state(), S::GatheringLeases);
    assert_eq!(
        chunks_sent(&out, |x| matches!(x, ToChunk::TransferLease { .. })),
        set(&[2])
    );
}

#[test]
fn gathering_chunks_ack_conditional_newer_epoch_moves_recovery_forward() {
    // seed 000 §5.3.10 gathering chunks: ack-conditional(old epoch, chunk epoch > epoch,
    // chunk metadata) → won += sender; acquire the chunks of the chunk's metadata not in
    // ours at the chunk's epoch; metadata, epoch ← the chunk's.
    let mut env = Env::new(M);
    let mut m = gathering(3, &[1, 2, 3], &[]);
    let now = T0 + ms(4);
    from_chunk(
        &mut m,
        &mut env,
        now,
        1,
        ack_conditional(3, 5, md(&[1, 2, 5])),
    );
    let out = env.take();
    assert_eq!(m.state(), S::GatheringChunks);
    assert_eq!(m.epoch, e(5));
    assert_eq!(m.metadata, md(&[1, 2, 5]));
    assert_eq!(m.regen().won, set(&[1]));
    assert_eq!(m.regen().outstanding, set(&[2, 3, 5]));
    assert_eq!(to_chunks(&out), vec![(c(5), acquire(5))]);
    assert_eq!(m.timeout.get(&c(5)), Some(&(now + timing().msg_timeout)));
    assert_eq!(m.chunkfail.get(&c(1)), Some(&(now + timing().lease)));
}

#[test]
fn gathering_chunks_ack_conditional_older_epoch_counts_as_ack() {
    // seed 000 §5.3.10 gathering chunks: ack-conditional(.., chunk epoch <= epoch, ..) →
    // as ack; epoch and metadata unchanged.
    let mut env = Env::new(M);
    let mut m = gathering(3, &[1, 2], &[3]);
    from_chunk(&mut m, &mut env, T0, 1, ack_conditional(3, 2, md(&[1, 4])));
    assert_eq!(m.state(), S::GatheringChunks);
    assert_eq!(m.epoch, e(3));
    assert_eq!(m.metadata, layout());
    assert_eq!(m.regen().won, set(&[1, 3]));
    assert_eq!(m.regen().outstanding, set(&[2]));
    assert!(env.take().is_empty());
}

#[test]
fn gathering_chunks_timeout_drops_outstanding() {
    // seed 000 §5.3.10 gathering chunks: timeout(chunk) → outstanding -= chunk;
    // outstanding ≠ nil → gathering chunks.
    let mut env = Env::new(M);
    let mut m = gathering(3, &[2, 3], &[1]);
    let at = T0 + ms(100);
    m.timeout.insert(c(3), at);
    assert_eq!(m.next_timeout(), Some(at));
    m.on_tick(&mut env.ctx(at));
    assert_eq!(m.state(), S::GatheringChunks);
    assert_eq!(m.regen().outstanding, set(&[2]));
    assert!(!m.timeout.contains_key(&c(3)));
    assert_eq!(m.regen().won, set(&[1]));
    assert!(env.take().is_empty());
}

#[test]
fn gathering_chunks_nochunk_drops_outstanding() {
    // seed 000 §5.3.10 gathering chunks: nochunk(chunk) → outstanding -= chunk, cancel
    // timeout; outstanding ≠ nil → gathering chunks.
    let mut env = Env::new(M);
    let mut m = gathering(3, &[2, 3], &[1]);
    from_chunk(&mut m, &mut env, T0, 3, ToManager::NoChunk);
    assert_eq!(m.state(), S::GatheringChunks);
    assert_eq!(m.regen().outstanding, set(&[2]));
    assert!(!m.timeout.contains_key(&c(3)));
    assert_eq!(m.regen().won, set(&[1]));
    assert!(env.take().is_empty());
}

#[test]
fn gathering_chunks_recovery_renewal_request_from_won_chunk_renews() {
    // seed 000 §5.3.10 gathering chunks: recovery renewal request from a sender ∈ won →
    // renewal(now + d_l), chunkfail(sender) ← that time.
    let mut env = Env::new(M);
    let mut m = gathering(3, &[3], &[1, 2]);
    let now = T0 + ms(600);
    let req = ToManager::RecoveryRenewalRequest { epoch: e(3) };
    from_chunk(&mut m, &mut env, now, 1, req);
    assert_eq!(to_chunks(&env.take()), vec![(c(1), renewal(3, now))]);
    assert_eq!(m.chunkfail.get(&c(1)), Some(&(now + timing().lease)));
    assert_eq!(m.state(), S::GatheringChunks);
}

#[test]
fn gathering_chunks_recovery_renewal_request_from_unwon_chunk_is_ignored() {
    // seed 000 §5.3.10 gathering chunks: recovery renewal request from a sender ∉ won →
    // nothing.
    let mut env = Env::new(M);
    let mut m = gathering(3, &[3], &[1, 2]);
    let req = ToManager::RecoveryRenewalRequest { epoch: e(3) };
    from_chunk(&mut m, &mut env, T0, 3, req);
    assert!(env.take().is_empty());
    assert_eq!(m.state(), S::GatheringChunks);
}

#[test]
fn gathering_chunks_chunkfail_drops_won() {
    // seed 000 §5.3.10 gathering chunks: chunkfail(c) → won -= c, gathering chunks.
    let mut env = Env::new(M);
    let mut m = gathering(3, &[3], &[1, 2]);
    m.chunkfail.insert(c(2), T0 + ms(50));
    m.on_tick(&mut env.ctx(T0 + ms(50)));
    assert_eq!(m.state(), S::GatheringChunks);
    assert_eq!(m.regen().won, set(&[1]));
    assert_eq!(m.regen().outstanding, set(&[3]));
    assert!(!m.chunkfail.contains_key(&c(2)));
    assert!(env.take().is_empty());
}

#[test]
fn gathering_chunks_help_from_removed_older_chunk_sends_lose() {
    // seed 000 §5.3.10 gathering chunks: help(chunk epoch < epoch) from a sender ∉
    // chunks(metadata) → lose.
    let mut env = Env::new(M);
    let mut m = gathering(3, &[3], &[1, 2]);
    from_chunk(&mut m, &mut env, T0, 5, help(2));
    assert_eq!(to_chunks(&env.take()), vec![(c(5), ToChunk::Lose)]);
    assert_eq!(m.state(), S::GatheringChunks);
    assert_eq!(m.regen().outstanding, set(&[3]));
}

#[test]
fn gathering_chunks_help_from_won_chunk_reacquires() {
    // seed 000 §5.3.10 gathering chunks: help from a sender ∉ outstanding (here ∈ won: it
    // failed since) → won -= sender, acquire(me, epoch), timeout, outstanding
    // += sender.
    let mut env = Env::new(M);
    let mut m = gathering(3, &[3], &[1, 2]);
    let now = T0 + ms(8);
    from_chunk(&mut m, &mut env, now, 1, help(3));
    assert_eq!(to_chunks(&env.take()), vec![(c(1), acquire(3))]);
    assert_eq!(m.regen().won, set(&[2]));
    assert_eq!(m.regen().outstanding, set(&[1, 3]));
    assert_eq!(m.timeout.get(&c(1)), Some(&(now + timing().msg_timeout)));
    assert_eq!(m.state(), S::GatheringChunks);
}

#[test]
fn gathering_chunks_help_from_newer_chunk_acquires_it() {
    // seed 000 §5.3.10 gathering chunks: help from a chunk of another (newer) epoch, even
    // one not in our metadata → acquire it (its ack-conditional may move us forward).
    let mut env = Env::new(M);
    let mut m = gathering(3, &[3], &[1, 2]);
    from_chunk(&mut m, &mut env, T0, 5, help(4));
    assert_eq!(to_chunks(&env.take()), vec![(c(5), acquire(3))]);
    assert_eq!(m.regen().outstanding, set(&[3, 5]));
}

#[test]
fn gathering_chunks_help_from_outstanding_chunk_is_ignored() {
    // seed 000 §5.3.10 gathering chunks: help from a sender ∈ outstanding (an acquire is
    // on its way) → nothing.
    let mut env = Env::new(M);
    let mut m = gathering(3, &[3], &[1, 2]);
    from_chunk(&mut m, &mut env, T0 + ms(8), 3, help(3));
    assert!(env.take().is_empty());
    assert_eq!(m.timeout.get(&c(3)), Some(&(T0 + timing().msg_timeout)));
    assert_eq!(m.regen().outstanding, set(&[3]));
}

#[test]
fn gathering_chunks_nack_from_a_silent_lease_holder_is_set_aside() {
    // Tenure (seed 000 §5.3.10 gathering chunks: nack): the chunk's lease holder N has
    // fallen silent, so the chunk will ask for help when that lease runs out. The nack
    // is not an answer (still outstanding, timeout kept), N is not a better manager, and
    // the chunk's later help is answered with an acquire at once.
    let mut env = Env::new(M);
    let t = timing();
    let mut m = gathering(3, &[2, 3], &[1]);
    let now = T0 + ms(5);
    env.heard.insert(N, now.saturating_sub(t.silence()));
    from_chunk(&mut m, &mut env, now, 3, nack(Some(N), LeaseType::Regular));
    assert!(m.regen().better.is_empty() && m.regen().lesser.is_empty());
    assert_eq!(m.regen().outstanding, set(&[2, 3]));
    assert_eq!(m.timeout.get(&c(3)), Some(&(T0 + t.msg_timeout)));
    assert_eq!(m.regen().awaiting, set(&[3]));
    assert!(env.take().is_empty());
    let later = now + ms(40);
    from_chunk(&mut m, &mut env, later, 3, help(3));
    assert_eq!(to_chunks(&env.take()), vec![(c(3), acquire(3))]);
    assert_eq!(m.timeout.get(&c(3)), Some(&(later + t.msg_timeout)));
    assert!(m.regen().awaiting.is_empty());
    // A second help while that acquire is out: nothing, as the seed says.
    from_chunk(&mut m, &mut env, later + ms(1), 3, help(3));
    assert!(env.take().is_empty());
}

#[test]
fn gathering_chunks_silent_chunks_are_not_waited_for_once_a_quorum_is_won() {
    // Tenure (seed 000 §5.3.10 timeout(chunk), early): once the won chunks hold a
    // quorum, an acquire still outstanding to a silent device is given up; without a
    // quorum it waits its timeout (a cut-off manager does not spin through rounds).
    let mut env = Env::new(M);
    let t = timing();
    let now = T0 + ms(20);
    env.heard.insert(d(3), now.saturating_sub(t.silence()));
    let mut m = gathering(3, &[2, 3], &[]);
    from_chunk(&mut m, &mut env, now, 1, ack(3));
    assert_eq!(
        m.state(),
        S::GatheringChunks,
        "no quorum yet: c3's timeout runs"
    );
    from_chunk(&mut m, &mut env, now, 2, ack(3));
    // Gathered with c1 and c2; the transfer to silent c3 is not waited for either.
    assert_eq!(m.state(), S::RecoveryReconciling, "{:?}", m.state());
    assert!(m.regen().renewal_iffy.contains(&c(3)));
    // Gathering leases: once the live chunk's transfer is acknowledged, only the silent
    // one is left, and it is not waited for; a live one is.
    let transfer_ack = ToManager::TransferAck {
        epoch: e(3),
        mgr: M,
        prepared: None,
    };
    let mut k = gathering_leases(3, layout(), &[1], &[2, 3]);
    from_chunk(&mut k, &mut env, now, 2, transfer_ack.clone());
    assert_eq!(k.state(), S::RecoveryReconciling);
    env.heard.clear();
    let mut k = gathering_leases(3, layout(), &[1], &[2, 3]);
    from_chunk(&mut k, &mut env, now, 2, transfer_ack);
    assert_eq!(k.state(), S::GatheringLeases);
}

#[test]
fn gathering_chunks_nack_regular_lease_adds_better_manager() {
    // seed 000 §5.3.10 gathering chunks: nack(.., chunk mgr ≠ me, regular lease) →
    // outstanding -= sender, cancel timeout, better mgr id += chunk mgr.
    let mut env = Env::new(M);
    let mut m = gathering(3, &[2, 3], &[1]);
    from_chunk(&mut m, &mut env, T0, 3, nack(Some(N), LeaseType::Regular));
    assert_eq!(m.regen().better, BTreeSet::from([N]));
    assert!(m.regen().lesser.is_empty());
    assert_eq!(m.regen().outstanding, set(&[2]));
    assert!(!m.timeout.contains_key(&c(3)));
    assert_eq!(m.state(), S::GatheringChunks);
    assert!(env.take().is_empty());
}

#[test]
fn gathering_chunks_nack_regular_lease_from_this_manager_does_nothing() {
    // seed 000 §5.3.10 gathering chunks: nack(.., chunk mgr = this mgr, regular lease) →
    // (do nothing) beyond outstanding -= sender.
    let mut env = Env::new(M);
    let mut m = gathering(3, &[2, 3], &[1]);
    from_chunk(&mut m, &mut env, T0, 3, nack(Some(M), LeaseType::Regular));
    assert!(m.regen().better.is_empty() && m.regen().lesser.is_empty());
    assert_eq!(m.regen().outstanding, set(&[2]));
    assert_eq!(m.regen().won, set(&[1]));
}

#[test]
fn gathering_chunks_nack_recovery_or_no_lease_arbitrates_by_precedence() {
    // seed 000 §5.3.10 gathering chunks: nack(.., chunk mgr, recovery lease or no lease) →
    // better mgr id += chunk mgr if it has precedence over this manager, else lesser mgr
    // id += chunk mgr.
    let ranked = Env::new(M).cfg.cluster.ranked_devices(STORE);
    let (higher, me, lower) = (ranked[0], ranked[2], ranked[4]);
    let mut env = Env::new(me);
    for lease in [LeaseType::Recovery, LeaseType::None] {
        // (c(5) stays outstanding so the round does not end.)
        let mut m = gathering(3, &[1, 2, 3, 5], &[]);
        from_chunk(&mut m, &mut env, T0, 1, nack(Some(higher), lease));
        from_chunk(&mut m, &mut env, T0, 2, nack(Some(lower), lease));
        assert_eq!(m.regen().better, BTreeSet::from([higher]), "{lease:?}");
        assert_eq!(m.regen().lesser, BTreeSet::from([lower]), "{lease:?}");
        assert_eq!(m.regen().outstanding, set(&[3, 5]));
        assert_eq!(m.state(), S::GatheringChunks);
        // The same manager on a recovery lease: "shouldn't happen"; nothing recorded.
        from_chunk(&mut m, &mut env, T0, 3, nack(Some(me), lease));
        assert_eq!(m.regen().better.len() + m.regen().lesser.len(), 2);
    }
}

#[test]
fn gathering_chunks_nack_no_lease_without_manager_only_drops_outstanding() {
    // seed 000 §5.3.10 gathering chunks: nack(.., nil, no lease) (§4.2.6's nack names no
    // manager) → outstanding -= sender; nothing to arbitrate.
    let mut env = Env::new(M);
    let mut m = gathering(3, &[2, 3], &[1]);
    from_chunk(&mut m, &mut env, T0, 3, nack(None, LeaseType::None));
    assert!(m.regen().better.is_empty() && m.regen().lesser.is_empty());
    assert_eq!(m.regen().outstanding, set(&[2]));
}

#[test]
fn gathering_chunks_transfernotice_same_epoch_goes_newly_awake() {
    // seed 000 §5.3.10 gathering chunks: transfernotice(chunk epoch == epoch, ..) →
    // newly awake (another manager won).
    let mut env = Env::new(M);
    let mut m = gathering(3, &[3], &[1, 2]);
    let notice = ToManager::TransferNotice {
        epoch: e(3),
        mgr: N,
    };
    from_chunk(&mut m, &mut env, T0, 1, notice);
    assert_erased(&m);
    assert!(env.take().is_empty());
}

#[test]
fn gathering_chunks_transfernotice_other_epoch_is_ignored() {
    // seed 000 §5.3.10 gathering chunks: transfernotice(chunk epoch != epoch, ..) →
    // gathering chunks.
    let mut env = Env::new(M);
    let mut m = gathering(3, &[3], &[1, 2]);
    let notice = ToManager::TransferNotice {
        epoch: e(2),
        mgr: N,
    };
    from_chunk(&mut m, &mut env, T0, 1, notice);
    assert_eq!(m.state(), S::GatheringChunks);
    assert_eq!(m.regen().won, set(&[1, 2]));
}

#[test]
fn gathering_chunks_ack_with_newer_prepared_requires_joint_quorum() {
    // seed 000 §5.3.10–11. Tenure (joint quorum): a chunk that voted for an uncommitted
    // transition to a newer epoch reports it; the manager then acquires that layout's
    // chunks too and needs quorum and coverage of both layouts.
    let mut env = Env::new(M);
    let mut m = gathering(3, &[1, 2, 3], &[]);
    let p = Prepared {
        new_epoch: e(4),
        metadata: md(&[1, 4, 5]),
        new_mgr: N,
    };
    let now = T0 + ms(1);
    let with_prepared = ToManager::Ack {
        epoch: e(3),
        prepared: Some(p.clone()),
    };
    from_chunk(&mut m, &mut env, now, 1, with_prepared);
    assert_eq!(m.regen().joint, vec![p]);
    assert_eq!(
        to_chunks(&env.take()),
        vec![(c(4), acquire(3)), (c(5), acquire(3))]
    );
    assert_eq!(m.regen().outstanding, set(&[2, 3, 4, 5]));
    from_chunk(&mut m, &mut env, now, 2, ack(3));
    from_chunk(&mut m, &mut env, now, 3, ack(3));
    from_chunk(&mut m, &mut env, now, 4, ToManager::NoChunk);
    env.take();
    from_chunk(&mut m, &mut env, now, 5, ToManager::NoChunk);
    // A quorum of the old layout but not of the prepared one: another round.
    assert_eq!(m.state(), S::GatheringChunks);
    assert_eq!(m.regen().rounds, 2);
    assert_eq!(m.regen().outstanding, set(&[4, 5]));
    env.take();
    from_chunk(&mut m, &mut env, now, 4, ack(3));
    from_chunk(&mut m, &mut env, now, 5, ack(3));
    // Quorum of both: the recovery transition goes to an epoch above the prepared one,
    // with the prepared layout.
    let out = env.take();
    assert_eq!(m.state(), S::RecoveryReconciling);
    assert_eq!(
        epoch_transitions(&out),
        [1, 2, 3, 4, 5]
            .iter()
            .map(|n| (c(*n), 3, 5, md(&[1, 4, 5]), M))
            .collect::<Vec<_>>()
    );
}

#[test]
fn gathering_chunks_two_prepares_of_one_epoch_require_quorum_of_each_layout() {
    // seed 000 §5.3.10 gathering chunks: ack / ack-conditional, §5.3.11 gathered.
    // Tenure (joint quorum). Two relayouts by N prepared the same epoch 4 from epoch 3:
    // the first, over c(1), c(2), c(3), aborted, but c(3) missed the abort and still
    // reports its prepare; the second replaced c(3) by c(4) and committed at c(2) and
    // c(4), while c(1) voted for it and missed the commit. A regenerating manager that
    // hears of both must need a quorum of the committed layout too: c(1) and c(3) are a
    // quorum of the old layout and of the aborted one, and must not be enough (sim
    // seed 8842: two managers of one store in one epoch).
    let mut env = Env::new(M);
    let mut m = gathering(3, &[1, 2, 3], &[]);
    let now = T0 + ms(1);
    let aborted = Prepared {
        new_epoch: e(4),
        metadata: md(&[1, 2, 3]),
        new_mgr: N,
    };
    let committed = Prepared {
        new_epoch: e(4),
        metadata: md(&[1, 2, 4]),
        new_mgr: N,
    };
    let ack_with = |p: &Prepared| ToManager::Ack {
        epoch: e(3),
        prepared: Some(p.clone()),
    };
    from_chunk(&mut m, &mut env, now, 3, ack_with(&aborted));
    assert_eq!(m.regen().joint, vec![aborted.clone()]);
    assert!(to_chunks(&env.take()).is_empty());
    from_chunk(&mut m, &mut env, now, 1, ack_with(&committed));
    // The second layout of epoch 4 is joined and its new chunk acquired.
    assert_eq!(m.regen().joint, vec![aborted.clone(), committed.clone()]);
    assert_eq!(to_chunks(&env.take()), vec![(c(4), acquire(3))]);
    assert_eq!(m.regen().outstanding, set(&[2, 4]));
    assert_eq!(m.state(), S::GatheringChunks);
    // c(2) and c(4) are regularly leased by the manager of epoch 4.
    let nack4 = ToManager::Nack {
        epoch: e(4),
        mgr: Some(N),
        lease: LeaseType::Regular,
    };
    from_chunk(&mut m, &mut env, now, 2, nack4.clone());
    from_chunk(&mut m, &mut env, now, 4, nack4);
    // Won c(1), c(3): no quorum of c(1), c(2), c(4), and a better manager exists →
    // release the won chunks and go newly awake; no epoch transition is started.
    let out = env.take();
    assert!(epoch_transitions(&out).is_empty());
    assert_erased(&m);
    assert_eq!(
        chunks_sent(&out, |k| matches!(k, ToChunk::Release { .. })),
        set(&[1, 3])
    );
}

#[test]
fn gathering_chunks_prepare_of_a_newer_epoch_replaces_the_joined_ones() {
    // seed 000 §5.3.10. Tenure (joint quorum): the joined layouts are those of the newest
    // prepared epoch; an older prepare heard later adds nothing, a newer one replaces them.
    let mut env = Env::new(M);
    let mut m = gathering(3, &[1, 2, 3], &[]);
    let p = |epoch: u64, devices: &[u64]| Prepared {
        new_epoch: e(epoch),
        metadata: md(devices),
        new_mgr: N,
    };
    let ack_with = |p: Prepared| ToManager::Ack {
        epoch: e(3),
        prepared: Some(p),
    };
    from_chunk(&mut m, &mut env, T0, 1, ack_with(p(5, &[1, 2, 4])));
    from_chunk(&mut m, &mut env, T0, 2, ack_with(p(4, &[1, 2, 5])));
    assert_eq!(m.regen().joint, vec![p(5, &[1, 2, 4])]);
    from_chunk(&mut m, &mut env, T0, 3, ack_with(p(6, &[1, 2, 3])));
    assert_eq!(m.regen().joint, vec![p(6, &[1, 2, 3])]);
}

// ---- §5.3.11 gathered --------------------------------------------------------------

#[test]
fn gathered_quorum_and_coverage_enters_gathering_leases() {
    // seed 000 §5.3.11 gathered: coverage and quorum → gathering leases.
    let mut env = Env::new(M);
    let mut m = gathering(3, &[3], &[1, 2]);
    from_chunk(&mut m, &mut env, T0, 3, ToManager::NoChunk);
    assert_eq!(m.state(), S::GatheringLeases);
    assert_eq!(m.regen().renewal_iffy, set(&[3]));
}

#[test]
fn gathered_no_quorum_no_better_starts_new_round() {
    // seed 000 §5.3.11 gathered: no coverage and quorum, |better| = 0 → acquire every
    // chunk ∈ chunks(metadata) − won (outstanding, timeouts), gathering chunks.
    let mut env = Env::new(M);
    let mut m = gathering(3, &[3], &[1]);
    let now = T0 + ms(20);
    from_chunk(&mut m, &mut env, now, 3, ToManager::NoChunk);
    let out = env.take();
    assert_eq!(m.state(), S::GatheringChunks);
    assert_eq!(m.regen().rounds, 2);
    assert_eq!(m.regen().won, set(&[1]));
    assert_eq!(m.regen().outstanding, set(&[2, 3]));
    assert_eq!(
        to_chunks(&out),
        vec![(c(2), acquire(3)), (c(3), acquire(3))]
    );
    assert_eq!(m.timeout.get(&c(2)), Some(&(now + timing().msg_timeout)));
}

#[test]
fn gathered_no_quorum_with_better_manager_releases_and_goes_newly_awake() {
    // seed 000 §5.3.11 gathered: otherwise (a better manager exists) → release(better mgr
    // ids, epoch) to all chunks ∈ won, newly awake.
    let mut env = Env::new(M);
    let mut m = gathering(3, &[3], &[1]);
    m.regen_mut().better.insert(N);
    from_chunk(&mut m, &mut env, T0, 3, ToManager::NoChunk);
    let out = env.take();
    assert_erased(&m);
    assert_eq!(
        to_chunks(&out),
        vec![(
            c(1),
            ToChunk::Release {
                epoch: e(3),
                hints: vec![N]
            }
        )]
    );
}

#[test]
fn gathered_after_max_rounds_releases_and_gives_up() {
    // seed 000 §5.3.11 gathered. Tenure (bounded contention): after `gather_rounds_max`
    // rounds without quorum, release the won chunks and give up, so a minority partition
    // never holds chunks forever.
    let mut env = Env::new(M);
    let mut m = gathering(3, &[3], &[1]);
    m.regen_mut().rounds = timing().gather_rounds_max;
    from_chunk(&mut m, &mut env, T0, 3, ToManager::NoChunk);
    let out = env.take();
    assert_erased(&m);
    assert_eq!(
        to_chunks(&out),
        vec![(
            c(1),
            ToChunk::Release {
                epoch: e(3),
                hints: vec![]
            }
        )]
    );
}

// ---- §5.3.12 gathering leases ------------------------------------------------------

#[test]
fn gathering_leases_entry_transfers_remaining_leases() {
    // seed 000 §5.3.12 gathering leases, on entry: for each chunk ∈ metadata − (failed ∪
    // won): transfer lease(epoch, me, now + d_l), renewal iffy += c, chunkfail(c) ← that
    // time; gathering leases. Tenure: a transfer not acknowledged within a message
    // timeout is given up.
    let mut env = Env::new(M);
    let mut m = gathering(3, &[3], &[1, 2]);
    let now = T0 + timing().msg_timeout;
    m.on_tick(&mut env.ctx(now));
    let out = env.take();
    assert_eq!(m.state(), S::GatheringLeases);
    assert_eq!(
        to_chunks(&out),
        vec![(
            c(3),
            ToChunk::TransferLease {
                epoch: e(3),
                new_mgr: M,
                lease: timing().lease
            }
        )]
    );
    assert_eq!(m.regen().renewal_iffy, set(&[3]));
    assert_eq!(m.chunkfail.get(&c(3)), Some(&(now + timing().lease)));
    assert_eq!(m.timeout.get(&c(3)), Some(&(now + timing().msg_timeout)));
}

#[test]
fn gathering_leases_entry_with_nothing_to_transfer_starts_recovery_transition() {
    // seed 000 §5.3.12 gathering leases, on entry, nothing left to transfer → epoch
    // transition(epoch, epoch + 1, metadata, me) to all chunks in won → recovery
    // reconciling (§5.3.13; the seed names recovery transition here).
    let mut env = Env::new(M);
    let mut m = gathering(3, &[3], &[1, 2]);
    from_chunk(&mut m, &mut env, T0, 3, ack(3));
    let out = env.take();
    assert_eq!(m.state(), S::RecoveryReconciling);
    assert_eq!(
        epoch_transitions(&out),
        vec![
            (c(1), 3, 4, layout(), M),
            (c(2), 3, 4, layout(), M),
            (c(3), 3, 4, layout(), M)
        ]
    );
    let tx = m.tx.as_ref().expect("a transition");
    assert_eq!(tx.kind, TxKind::Recovery);
    assert_eq!(tx.participants, set(&[1, 2, 3]));
    assert_eq!(tx.id, sent_tx_id(&out));
}

#[test]
fn gathering_leases_recovery_renewal_request_renews() {
    // seed 000 §5.3.12 gathering leases: recovery renewal request(chunk epoch) from a
    // sender ∉ failed → renewal(now + d_l), chunkfail; stay in gathering leases
    // (the seed's "state ← gathering chunks" is a slip: "the same as ... gathering
    // chunks"). The implementation renews only chunks won or being transferred.
    let mut env = Env::new(M);
    let mut m = gathering_leases(3, layout(), &[1, 2], &[3]);
    let now = T0 + ms(600);
    let req = ToManager::RecoveryRenewalRequest { epoch: e(3) };
    from_chunk(&mut m, &mut env, now, 1, req.clone());
    from_chunk(&mut m, &mut env, now, 3, req.clone());
    from_chunk(&mut m, &mut env, now, 5, req);
    assert_eq!(
        to_chunks(&env.take()),
        vec![(c(1), renewal(3, now)), (c(3), renewal(3, now))]
    );
    assert_eq!(m.chunkfail.get(&c(1)), Some(&(now + timing().lease)));
    assert_eq!(m.state(), S::GatheringLeases);
}

#[test]
fn gathering_leases_chunkfail_keeping_quorum_stays() {
    // seed 000 §5.3.12 gathering leases: chunkfail(chunk) → renewal iffy -= chunk, won -=
    // chunk; coverage and quorum hold → gathering leases.
    let mut env = Env::new(M);
    let mut m = gathering_leases(3, md(&[1, 2, 3, 4, 5]), &[1, 2, 3], &[4, 5]);
    m.chunkfail.insert(c(5), T0 + ms(50));
    m.on_tick(&mut env.ctx(T0 + ms(50)));
    assert_eq!(m.state(), S::GatheringLeases);
    assert_eq!(m.regen().renewal_iffy, set(&[4]));
    assert_eq!(m.regen().won, set(&[1, 2, 3]));
    assert!(env.take().is_empty());
}

#[test]
fn gathering_leases_chunkfail_losing_quorum_goes_newly_awake() {
    // seed 000 §5.3.12 gathering leases: chunkfail(chunk) without coverage and quorum →
    // newly awake.
    let mut env = Env::new(M);
    let mut m = gathering_leases(3, md(&[1, 2, 3, 4, 5]), &[1, 2, 3], &[4, 5]);
    m.chunkfail.insert(c(1), T0 + ms(50));
    m.on_tick(&mut env.ctx(T0 + ms(50)));
    assert_erased(&m);
}

#[test]
fn gathering_leases_chunkfail_of_last_transfer_starts_recovery_transition() {
    // seed 000 §5.3.12 gathering leases: chunkfail of the last chunk in renewal iffy. The
    // seed stays in gathering leases (and would wait forever); the implementation goes on
    // as after the last transfer ack.
    let mut env = Env::new(M);
    let mut m = gathering_leases(3, layout(), &[1, 2], &[3]);
    m.timeout.clear();
    m.chunkfail.insert(c(3), T0 + ms(50));
    m.on_tick(&mut env.ctx(T0 + ms(50)));
    assert_eq!(m.state(), S::RecoveryReconciling);
    assert_eq!(
        m.tx.as_ref().map(|t| t.participants.clone()),
        Some(set(&[1, 2]))
    );
}

#[test]
fn gathering_leases_transfer_ack_last_starts_recovery_transition() {
    // seed 000 §5.3.12 gathering leases: transfer ack(epoch, me) → renewal iffy -=
    // sender, won += sender; renewal iffy = nil → epoch transition(epoch, epoch + 1,
    // metadata, me) to all chunks in won → recovery transition (via reconciling).
    let mut env = Env::new(M);
    let mut m = gathering_leases(3, layout(), &[1, 2], &[3]);
    let tack = ToManager::TransferAck {
        epoch: e(3),
        mgr: M,
        prepared: None,
    };
    from_chunk(&mut m, &mut env, T0, 3, tack);
    let out = env.take();
    assert_eq!(m.regen().won, set(&[1, 2, 3]));
    assert!(m.regen().renewal_iffy.is_empty());
    assert_eq!(m.state(), S::RecoveryReconciling);
    assert_eq!(
        epoch_transitions(&out),
        vec![
            (c(1), 3, 4, layout(), M),
            (c(2), 3, 4, layout(), M),
            (c(3), 3, 4, layout(), M)
        ]
    );
}

#[test]
fn gathering_leases_transfer_ack_reporting_a_prepare_joins_its_layout() {
    // seed 000 §5.3.12 gathering leases: transfer ack. Tenure: the ack carries the chunk's
    // undecided prepare (it acked another manager, so this one never saw it). A layout
    // prepared for a newer epoch is joined as a late ack's would be: its new chunk is
    // acquired and the manager goes back to gathering chunks, since the won chunks hold
    // no quorum of that layout; it does not start a transition that ignores it.
    let mut env = Env::new(M);
    let mut m = gathering_leases(3, layout(), &[1, 2], &[3]);
    let p = Prepared {
        new_epoch: e(4),
        metadata: md(&[1, 4, 5]),
        new_mgr: N,
    };
    let tack = ToManager::TransferAck {
        epoch: e(3),
        mgr: M,
        prepared: Some(p.clone()),
    };
    from_chunk(&mut m, &mut env, T0, 3, tack);
    let out = env.take();
    assert_eq!(m.regen().joint, vec![p]);
    assert_eq!(m.state(), S::GatheringChunks);
    assert_eq!(m.regen().won, set(&[1, 2, 3]));
    assert!(epoch_transitions(&out).is_empty());
    assert_eq!(
        chunks_sent(&out, |x| matches!(x, ToChunk::Acquire { .. })),
        set(&[4, 5])
    );
}

#[test]
fn gathering_leases_transfer_ack_with_more_outstanding_stays() {
    // seed 000 §5.3.12 gathering leases: transfer ack, renewal iffy ≠ nil → gathering
    // leases.
    let mut env = Env::new(M);
    let mut m = gathering_leases(3, md(&[1, 2, 3, 4, 5]), &[1, 2, 3], &[4, 5]);
    let tack = ToManager::TransferAck {
        epoch: e(3),
        mgr: M,
        prepared: None,
    };
    from_chunk(&mut m, &mut env, T0, 5, tack);
    assert_eq!(m.state(), S::GatheringLeases);
    assert_eq!(m.regen().renewal_iffy, set(&[4]));
    assert_eq!(m.regen().won, set(&[1, 2, 3, 5]));
    assert!(!m.timeout.contains_key(&c(5)));
    assert!(env.take().is_empty());
}

#[test]
fn gathering_leases_transfer_ack_for_other_epoch_or_manager_is_ignored() {
    // seed 000 §5.3.12 gathering leases: transfer ack — "assert that epoch number and mgr
    // match this mgr": a mismatching one is ignored.
    let mut env = Env::new(M);
    let mut m = gathering_leases(3, layout(), &[1, 2], &[3]);
    for (epoch, mgr) in [(2, M), (3, N)] {
        let tack = ToManager::TransferAck {
            epoch: e(epoch),
            mgr,
            prepared: None,
        };
        from_chunk(&mut m, &mut env, T0, 3, tack);
    }
    assert_eq!(m.state(), S::GatheringLeases);
    assert_eq!(m.regen().renewal_iffy, set(&[3]));
    assert!(env.take().is_empty());
}

#[test]
fn gathering_leases_nack_gives_up_the_transfer() {
    // seed 000 §5.3.12 gathering leases. Tenure: a refused transfer (nack from §4.2.7
    // transfer lease) is given up; the chunk is not won.
    let mut env = Env::new(M);
    let mut m = gathering_leases(3, layout(), &[1, 2], &[3]);
    from_chunk(&mut m, &mut env, T0, 3, nack(Some(N), LeaseType::Recovery));
    assert_eq!(m.state(), S::RecoveryReconciling);
    assert_eq!(m.regen().won, set(&[1, 2]));
    assert_eq!(
        m.tx.as_ref().map(|t| t.participants.clone()),
        Some(set(&[1, 2]))
    );
}

#[test]
fn gathering_leases_transfer_timeout_gives_up_the_transfer() {
    // seed 000 §5.3.12 gathering leases. Tenure: a transfer not acknowledged within a
    // message timeout is given up.
    let mut env = Env::new(M);
    let mut m = gathering_leases(3, layout(), &[1, 2], &[3]);
    m.on_tick(&mut env.ctx(T0 + timing().msg_timeout - ms(1)));
    assert_eq!(m.state(), S::GatheringLeases);
    m.on_tick(&mut env.ctx(T0 + timing().msg_timeout));
    assert_eq!(m.state(), S::RecoveryReconciling);
    assert_eq!(
        m.tx.as_ref().map(|t| t.participants.clone()),
        Some(set(&[1, 2]))
    );
}

#[test]
fn gathering_leases_late_ack_wins_the_chunk() {
    // seed 000 §5.3.12 gathering leases. Tenure: a late ack (to an earlier acquire) while
    // gathering leases wins the chunk.
    let mut env = Env::new(M);
    let mut m = gathering_leases(3, layout(), &[1, 2], &[3]);
    from_chunk(&mut m, &mut env, T0, 3, ack(3));
    assert_eq!(m.state(), S::RecoveryReconciling);
    assert_eq!(
        m.tx.as_ref().map(|t| t.participants.clone()),
        Some(set(&[1, 2, 3]))
    );
}

#[test]
fn gathering_leases_late_ack_with_unknown_prepared_layout_joins_it() {
    // seed 000 §5.3.12 gathering leases: ack (late). Tenure (joint quorum, as in §5.3.10
    // gathering chunks): every layout prepared for the newest prepared epoch may have
    // committed, so the recovery transition needs a quorum of each, whenever the report
    // arrives. Here c(1) reported an aborted prepare of epoch 4 over the manager's own
    // layout, the gathered decision (§5.3.11) was taken on c(1), c(2), and c(3)'s ack to
    // the first acquire arrives only now, reporting another prepare of epoch 4, over
    // c(3), c(4), c(5), which may be the one that committed. Taking c(3) and going on
    // would commit epoch 5 (c(3) votes: 5 is above its prepare) with one chunk of that
    // layout. The manager joins the layout instead: it acquires c(4) and c(5) and goes
    // back to gathering chunks, so the gathered decision is taken again.
    let mut env = Env::new(M);
    let mut m = gathering_leases(3, layout(), &[1, 2], &[3]);
    let aborted = Prepared {
        new_epoch: e(4),
        metadata: layout(),
        new_mgr: N,
    };
    let other = Prepared {
        new_epoch: e(4),
        metadata: md(&[3, 4, 5]),
        new_mgr: N,
    };
    m.regen_mut().joint = vec![aborted.clone()];
    let now = T0 + ms(5);
    let late = ToManager::Ack {
        epoch: e(3),
        prepared: Some(other.clone()),
    };
    from_chunk(&mut m, &mut env, now, 3, late);
    let out = env.take();
    assert!(epoch_transitions(&out).is_empty(), "{out:?}");
    assert!(m.tx.is_none());
    assert_eq!(m.state(), S::GatheringChunks);
    assert_eq!(m.regen().joint, vec![aborted, other]);
    assert_eq!(m.regen().won, set(&[1, 2, 3]));
    assert!(m.regen().renewal_iffy.is_empty());
    assert_eq!(m.regen().outstanding, set(&[4, 5]));
    assert_eq!(
        to_chunks(&out),
        vec![(c(4), acquire(3)), (c(5), acquire(3))]
    );
    // c(4) and c(5) are regularly leased by the manager of epoch 4 (it committed): no
    // quorum of its layout, a better manager exists → release the won chunks, newly
    // awake; still no epoch transition.
    let nack4 = ToManager::Nack {
        epoch: e(4),
        mgr: Some(N),
        lease: LeaseType::Regular,
    };
    from_chunk(&mut m, &mut env, now, 4, nack4.clone());
    from_chunk(&mut m, &mut env, now, 5, nack4);
    let out = env.take();
    assert!(epoch_transitions(&out).is_empty());
    assert_erased(&m);
    assert_eq!(
        chunks_sent(&out, |k| matches!(k, ToChunk::Release { .. })),
        set(&[1, 2, 3])
    );
}

#[test]
fn gathering_leases_late_ack_with_unknown_prepared_layout_won_goes_on_above_it() {
    // seed 000 §5.3.12 gathering leases: ack (late), then §5.3.11 gathered again. Tenure
    // (joint quorum): once the joined layout's chunks are won, the gathered decision
    // holds a quorum of every layout of epoch 4 and the recovery transition goes above
    // it.
    let mut env = Env::new(M);
    let mut m = gathering_leases(3, layout(), &[1, 2], &[3]);
    let other = Prepared {
        new_epoch: e(4),
        metadata: md(&[3, 4, 5]),
        new_mgr: N,
    };
    let late = ToManager::Ack {
        epoch: e(3),
        prepared: Some(other.clone()),
    };
    from_chunk(&mut m, &mut env, T0, 3, late);
    assert_eq!(m.state(), S::GatheringChunks);
    assert_eq!(m.regen().outstanding, set(&[4, 5]));
    env.take();
    from_chunk(&mut m, &mut env, T0, 4, ack(3));
    assert!(epoch_transitions(&env.take()).is_empty());
    from_chunk(&mut m, &mut env, T0, 5, ack(3));
    let out = env.take();
    assert_eq!(m.state(), S::RecoveryReconciling);
    assert_eq!(
        epoch_transitions(&out),
        [1, 2, 3, 4, 5]
            .iter()
            .map(|n| (c(*n), 3, 5, md(&[3, 4, 5]), M))
            .collect::<Vec<_>>()
    );
}

#[test]
fn gathering_leases_late_ack_with_prepared_layout_already_held_goes_on() {
    // seed 000 §5.3.12 gathering leases: ack (late). Tenure (joint quorum): a prepare
    // whose layout the won chunks already hold a quorum and coverage of is joined, and
    // the lease gathering goes on; the recovery transition goes above its epoch.
    let mut env = Env::new(M);
    let mut m = gathering_leases(3, layout(), &[1, 2], &[3]);
    let p = Prepared {
        new_epoch: e(4),
        metadata: md(&[1, 2, 4]),
        new_mgr: N,
    };
    let late = ToManager::Ack {
        epoch: e(3),
        prepared: Some(p.clone()),
    };
    from_chunk(&mut m, &mut env, T0, 3, late);
    let out = env.take();
    assert_eq!(m.state(), S::RecoveryReconciling);
    assert_eq!(
        m.tx.as_ref().map(|t| (t.new_epoch, t.participants.clone())),
        Some((e(5), set(&[1, 2, 3])))
    );
    assert_eq!(
        epoch_transitions(&out)
            .into_iter()
            .map(|(k, old, new, meta, _)| (k, old, new, meta))
            .collect::<Vec<_>>(),
        [1, 2, 3]
            .iter()
            .map(|n| (c(*n), 3, 5, md(&[1, 2, 4])))
            .collect::<Vec<_>>()
    );
}

#[test]
fn gathering_leases_late_ack_conditional_from_newer_epoch_moves_recovery_forward() {
    // seed 000 §5.3.12 gathering leases: ack-conditional (late) from a chunk of a newer
    // epoch. Tenure: as in §5.3.10 gathering chunks, the recovery moves forward to the
    // chunk's epoch and metadata; the transfers sent at the old epoch are dropped and the
    // manager goes back to gathering chunks, acquiring the new layout's other chunks.
    let mut env = Env::new(M);
    let mut m = gathering_leases(3, layout(), &[1, 2], &[3]);
    let now = T0 + ms(5);
    from_chunk(
        &mut m,
        &mut env,
        now,
        4,
        ack_conditional(3, 4, md(&[2, 4, 5])),
    );
    let out = env.take();
    assert!(epoch_transitions(&out).is_empty());
    assert_eq!(m.state(), S::GatheringChunks);
    assert_eq!((m.epoch, m.metadata.clone()), (e(4), md(&[2, 4, 5])));
    assert_eq!(m.regen().won, set(&[1, 2, 4]));
    assert!(m.regen().renewal_iffy.is_empty());
    assert!(!m.timeout.contains_key(&c(3)));
    assert_eq!(m.regen().outstanding, set(&[5]));
    assert_eq!(to_chunks(&out), vec![(c(5), acquire(4))]);
}

#[test]
fn gathering_leases_timeout_of_a_joined_chunk_drops_it_from_outstanding() {
    // seed 000 §5.3.12 gathering leases (§5.3.10 timeout(chunk)). Tenure: an acquire sent
    // to a joined layout's chunk while gathering leases that is not answered in time is
    // no longer outstanding, so a later return to gathering chunks does not wait for it.
    let mut env = Env::new(M);
    let mut m = gathering_leases(3, md(&[1, 2, 3, 4, 5]), &[1, 2, 3], &[]);
    m.regen_mut().outstanding.insert(c(4));
    m.timeout.insert(c(4), T0 + timing().msg_timeout);
    m.on_tick(&mut env.ctx(T0 + timing().msg_timeout));
    assert!(m.regen().outstanding.is_empty());
}

// ---- §5.3.13 recovery reconciling, §5.3.14 recovery transition ---------------------

fn recovering(participants: &[u64]) -> Manager {
    let mut m = manager(S::RecoveryReconciling, 3);
    m.regen_mut().rounds = 1;
    m.regen_mut().won = set(participants);
    m.tx = Some(tx(TxKind::Recovery, 4, layout(), set(participants)));
    m
}

#[test]
fn recovery_reconciling_done_waits_for_every_vote() {
    // seed 000 §5.3.13 recovery reconciling: done (reconciliation complete) needs every
    // participant's vote; votes for another epoch or attempt do not count.
    let mut env = Env::new(M);
    let mut m = recovering(&[1, 2, 3]);
    from_chunk(&mut m, &mut env, T0, 1, vote(4));
    from_chunk(&mut m, &mut env, T0, 2, vote(4));
    from_chunk(&mut m, &mut env, T0, 3, vote(5));
    assert_eq!(m.state(), S::RecoveryReconciling);
    assert_eq!(m.tx.as_ref().map(|t| t.votes.clone()), Some(set(&[1, 2])));
    assert!(env.take().is_empty());
}

#[test]
fn recovery_transition_commit_enters_manager_in_next_epoch() {
    // seed 000 §5.3.13 done → §5.3.14 recovery transition: commit tx → increment epoch,
    // failed ← nil, manager.
    let mut env = Env::new(M);
    let mut m = recovering(&[1, 2, 3]);
    from_chunk(&mut m, &mut env, T0, 1, vote(4));
    from_chunk(&mut m, &mut env, T0, 2, vote(4));
    let now = T0 + ms(30);
    from_chunk(&mut m, &mut env, now, 3, vote(4));
    let out = env.take();
    assert_eq!(m.state(), S::Manager);
    assert_eq!(m.epoch, e(4));
    assert!(m.failed.is_empty());
    // The won chunks and the rest of regeneration's data went with its states.
    assert!(m.stage.regeneration().is_none());
    assert!(m.tx.is_none());
    let expiry = now + timing().commit_window;
    assert_eq!(
        chunks_sent(&out, |x| *x
            == commit_msg(4, StoreData::default(), expiry.saturating_since(now))),
        set(&[1, 2, 3])
    );
    for k in layout().chunks {
        assert_eq!(m.chunkfail.get(&k), Some(&expiry));
    }
    assert_eq!(
        observations(&out),
        vec![Observation::BecameManager {
            store: STORE,
            epoch: e(4),
            metadata: layout(),
            cause: EpochCause::Regeneration
        }]
    );
}

#[test]
fn recovery_transition_commit_marks_non_participants_failed() {
    // seed 000 §5.3.14 recovery transition: commit tx → failed ← nil. Tenure (failed
    // accounting): the layout's chunks that took no part hold no lease from this
    // manager, so they are failed, and the quorum predicate counts only leased chunks.
    let mut env = Env::new(M);
    let mut m = recovering(&[1, 2]);
    from_chunk(&mut m, &mut env, T0, 1, vote(4));
    from_chunk(&mut m, &mut env, T0, 2, vote(4));
    assert_eq!(m.state(), S::Manager);
    assert_eq!(m.failed, set(&[3]));
    assert!(!m.chunkfail.contains_key(&c(3)));
}

#[test]
fn recovery_transition_abort_goes_newly_awake() {
    // seed 000 §5.3.14 recovery transition: abort tx → newly awake. The abort goes to
    // every participant (which falls back to no lease, §4.2.8).
    let mut env = Env::new(M);
    let mut m = recovering(&[1, 2, 3]);
    let now = T0 + ms(30);
    from_chunk(&mut m, &mut env, now, 2, vote_abort(4));
    let out = env.take();
    assert_erased(&m);
    assert!(m.finished.contains(&TX));
    let expiry = now + timing().abort_window;
    assert_eq!(
        chunks_sent(&out, |x| *x == abort_msg(4, expiry.saturating_since(now))),
        set(&[1, 2, 3])
    );
}

#[test]
fn recovery_transition_abort_on_vote_timeout() {
    // seed 000 §5.3.14 recovery transition: abort tx. Tenure: a vote missing at the
    // transition deadline aborts.
    let mut env = Env::new(M);
    let mut m = recovering(&[1, 2, 3]);
    from_chunk(&mut m, &mut env, T0, 1, vote(4));
    let deadline = T0 + timing().transition_timeout;
    assert_eq!(m.next_timeout(), Some(deadline));
    m.on_tick(&mut env.ctx(deadline));
    let out = env.take();
    assert_erased(&m);
    assert_eq!(
        chunks_sent(&out, |x| matches!(x, ToChunk::Abort { .. })),
        set(&[1, 2, 3])
    );
}

#[test]
fn recovery_reconciling_late_ack_with_unknown_prepared_layout_aborts() {
    // seed 000 §5.3.13 recovery reconciling: ack (late, from a chunk that is not a
    // participant). Tenure (joint quorum): it reports a prepare of a layout the
    // participants hold no quorum of, which may have committed; had it come before the
    // gathered decision it would have been joined. Nothing is committed yet: abort tx
    // (§5.3.14 → newly awake).
    let mut env = Env::new(M);
    let mut m = recovering(&[1, 2]);
    let late = ToManager::Ack {
        epoch: e(3),
        prepared: Some(Prepared {
            new_epoch: e(4),
            metadata: md(&[3, 4, 5]),
            new_mgr: N,
        }),
    };
    from_chunk(&mut m, &mut env, T0, 3, late);
    let out = env.take();
    assert_erased(&m);
    assert!(
        to_chunks(&out)
            .iter()
            .all(|(_, k)| !matches!(k, ToChunk::Commit { .. }))
    );
    assert_eq!(
        chunks_sent(&out, |k| matches!(k, ToChunk::Abort { .. })),
        set(&[1, 2])
    );
}

#[test]
fn recovery_reconciling_late_ack_conditional_from_epoch_being_prepared_aborts() {
    // seed 000 §5.3.13 recovery reconciling: ack-conditional (late) from a chunk already
    // at the epoch being prepared: that epoch number committed elsewhere. Abort tx.
    let mut env = Env::new(M);
    let mut m = recovering(&[1, 2]);
    from_chunk(&mut m, &mut env, T0, 3, ack_conditional(3, 4, layout()));
    assert_erased(&m);
}

#[test]
fn recovery_reconciling_late_ack_with_known_or_held_prepare_goes_on() {
    // seed 000 §5.3.13 recovery reconciling: ack (late). A prepare of an epoch already
    // passed, of a layout the participants hold a quorum of below the epoch being
    // prepared, or of this very transition, changes nothing.
    let mut env = Env::new(M);
    let mut m = recovering(&[1, 2]);
    m.tx.as_mut().expect("tx").new_epoch = e(5);
    m.regen_mut().joint = vec![Prepared {
        new_epoch: e(4),
        metadata: layout(),
        new_mgr: N,
    }];
    let reports = [
        (3, 3, &[3, 4, 5][..], N),
        (3, 4, &[1, 2, 4][..], N),
        (4, 4, &[1, 2, 3][..], N),
        // A participant's own vote for this transition, reported by a delayed ack.
        (1, 5, &[1, 2, 3][..], M),
    ];
    for (n, epoch, devices, new_mgr) in reports {
        let p = Prepared {
            new_epoch: e(epoch),
            metadata: md(devices),
            new_mgr,
        };
        let late = ToManager::Ack {
            epoch: e(3),
            prepared: Some(p),
        };
        from_chunk(&mut m, &mut env, T0, n, late);
    }
    assert_eq!(m.state(), S::RecoveryReconciling);
    assert!(m.tx.is_some());
    assert!(to_chunks(&env.take()).is_empty());
    from_chunk(&mut m, &mut env, T0, 1, vote(5));
    from_chunk(&mut m, &mut env, T0, 2, vote(5));
    assert_eq!((m.state(), m.epoch), (S::Manager, e(5)));
}

// ---- reads: the SafeTalk read barrier (DESIGN §4, §9.5) ------------------------------

fn replies(out: &[Output]) -> Vec<&Output> {
    out.iter()
        .filter(|o| matches!(o, Output::Reply { .. }))
        .collect()
}

#[test]
fn manager_answers_a_read_only_after_a_later_batch_is_accepted_everywhere() {
    // A read is answered once every live chunk has accepted, in this epoch, a batch sent
    // after the read arrived: a manager deposed while paused or cut off (its chunks
    // committed a newer epoch) can no longer answer from old state (sim seed 35561).
    use crate::io::request::Request;
    let mut env = Env::new(M);
    let mut m = managing(3);
    let read = Request::Holders {
        store: STORE,
        name: "/a".into(),
    };
    m.request(&mut env.ctx(T0), ClientId(1), 7, read);
    let out = env.take();
    assert!(replies(&out).is_empty(), "no answer before the barrier");
    let accepts: Vec<_> = to_chunks(&out)
        .into_iter()
        .filter_map(|(k, x)| match x {
            ToChunk::Accept { ops, .. } => Some((k, ops.last().map(|o| o.0))),
            _ => None,
        })
        .collect();
    assert_eq!(accepts.len(), 3, "the barrier goes to every live chunk");
    let upto = accepts[0].1.expect("the barrier is a sequenced change");
    from_chunk(&mut m, &mut env, T0 + ms(1), 1, accepted(3, upto));
    from_chunk(&mut m, &mut env, T0 + ms(1), 2, accepted(3, upto));
    assert!(replies(&env.take()).is_empty(), "one chunk still missing");
    // The third chunk moved on to a newer epoch: it refuses, and the read is never
    // answered from this manager's tables.
    from_chunk(
        &mut m,
        &mut env,
        T0 + ms(2),
        3,
        ToManager::Refused { epoch: e(3) },
    );
    let out = env.take();
    assert_eq!(
        replies(&out),
        vec![&Output::Reply {
            client: ClientId(1),
            req_id: 7,
            result: Ok(crate::io::request::Response::Holders(vec![]))
        }],
        "two of three accepted after the third failed: quorum holds, the read is answered"
    );
    // Same again, but two chunks refuse: no quorum, the manager steps down and the read
    // gets Unavailable.
    let mut m = managing(3);
    m.request(
        &mut env.ctx(T0),
        ClientId(1),
        8,
        Request::Holders {
            store: STORE,
            name: "/a".into(),
        },
    );
    env.take();
    for n in [2, 3] {
        from_chunk(
            &mut m,
            &mut env,
            T0 + ms(1),
            n,
            ToManager::Refused { epoch: e(3) },
        );
    }
    let out = env.take();
    assert_eq!(
        replies(&out),
        vec![&Output::Reply {
            client: ClientId(1),
            req_id: 8,
            result: Err(ClientError::Unavailable { store: STORE })
        }]
    );
    assert_eq!(m.state(), S::None);
}

fn accepted(epoch: u64, upto: crate::ids::Version) -> ToManager {
    ToManager::Accepted {
        epoch: e(epoch),
        upto,
        lease_left: None,
    }
}

#[test]
fn manager_relayout_asked_while_a_batch_is_in_flight_starts_when_it_completes() {
    // seed 000 §5.3.7 manager: relayout. Tenure: a relayout needs an idle manager; under
    // steady lock traffic (a barrier batch per holders query) the manager is never idle
    // between batches, so a relayout refused while busy was refused forever and a
    // retiring device's chunks never moved off it (simulator seed 1, membership on). It
    // now waits for the batch in flight, answering new requests Unavailable meanwhile.
    use crate::io::request::Request;
    let mut env = Env::new(M);
    let mut m = managing(3);
    m.write(&mut env.ctx(T0), ClientId(1), 9, 1, 1);
    let accepts: Vec<_> = to_chunks(&env.take())
        .into_iter()
        .filter_map(|(k, x)| match x {
            ToChunk::Accept { ops, .. } => Some((k, ops.last().map(|o| o.0))),
            _ => None,
        })
        .collect();
    let upto = accepts[0].1.expect("a sequenced change");
    let new = md(&[1, 2, 5]);
    assert!(!m.relayout(&mut env.ctx(T0), new.clone()), "busy: deferred");
    assert_eq!(m.state(), S::Manager);
    assert!(m.report(T0).expect("managing").busy);
    let read = Request::Holders {
        store: STORE,
        name: "/a".into(),
    };
    m.request(&mut env.ctx(T0), ClientId(1), 10, read);
    assert_eq!(
        replies(&env.take()),
        vec![&Output::Reply {
            client: ClientId(1),
            req_id: 10,
            result: Err(ClientError::Unavailable { store: STORE })
        }],
        "no new work while the relayout waits"
    );
    for n in [1, 2, 3] {
        from_chunk(&mut m, &mut env, T0 + ms(1), n, accepted(3, upto));
    }
    let out = env.take();
    assert_eq!(replies(&out).len(), 1, "the write is answered");
    assert_eq!(m.state(), S::RelayoutReconciling);
    assert_eq!(m.stage.new_metadata_log().cloned(), Some(new));
    assert_eq!(m.policy.deferred, None);
}

#[test]
fn manager_deferred_relayout_is_dropped_when_its_time_passes() {
    // Tenure: a deferred transition whose batch never completes (here no chunk answers)
    // is given up after a few acknowledgement timeouts: it cannot hold requests off for
    // ever.
    let mut env = Env::new(M);
    let mut m = managing(3);
    m.write(&mut env.ctx(T0), ClientId(1), 9, 1, 1);
    env.take();
    assert!(!m.relayout(&mut env.ctx(T0), md(&[1, 2, 5])));
    let until = m.policy.deferred.as_ref().expect("deferred").1;
    assert!(m.next_timeout().is_some_and(|t| t <= until));
    m.on_tick(&mut env.ctx(until));
    assert_eq!(m.policy.deferred, None);
}

#[test]
fn manager_ack_with_a_lingering_prepare_moves_the_next_transition_above_it() {
    // seed 000 §5.3.7 manager: ack from a failed chunk → recovered. Tenure: the chunk
    // still holds the prepare of an attempt at epoch 4 that aborted (it missed the
    // abort) and never votes twice for an epoch number, so the next relayout and the
    // next migration prepare epoch 5 (simulator seed 1070: a store retried a relayout
    // to epoch 4 forever and its retiring chunks never moved).
    let mut env = Env::new(M);
    let mut m = managing(3);
    m.failed = set(&[3]);
    let lingering = ToManager::Ack {
        epoch: e(3),
        prepared: Some(Prepared {
            new_epoch: e(4),
            metadata: layout(),
            new_mgr: M,
        }),
    };
    from_chunk(&mut m, &mut env, T0 + ms(9), 3, lingering);
    assert_eq!(m.recovered, set(&[3]));
    env.take();
    let mut relayout = m.clone();
    assert!(relayout.relayout(&mut env.ctx(T0 + ms(10)), md(&[1, 2, 3])));
    let out = env.take();
    assert!(!epoch_transitions(&out).is_empty());
    assert!(epoch_transitions(&out).iter().all(|t| (t.1, t.2) == (3, 5)));
    assert!(m.migrate(&mut env.ctx(T0 + ms(10)), N));
    let out = env.take();
    assert!(!epoch_transitions(&out).is_empty());
    assert!(epoch_transitions(&out).iter().all(|t| (t.1, t.2) == (3, 5)));
    let handoff = mgr_msgs(&out).into_iter().find_map(|(_, msg)| match msg {
        MgrMsg::Handoff { new_epoch, .. } => Some(new_epoch),
        _ => None,
    });
    assert_eq!(handoff, Some(e(5)));
}

#[test]
fn manager_ack_conditional_with_a_lingering_prepare_moves_the_next_transition_above_it() {
    // seed 000 §5.3.7 manager: ack-conditional from a failed chunk → recovered; the
    // same lingering prepare as above, reported by a chunk that also missed a commit
    // (simulator seed 1086).
    let mut env = Env::new(M);
    let mut m = managing(3);
    m.failed = set(&[3]);
    let lingering = ToManager::AckConditional {
        mgr_epoch: e(3),
        chunk_epoch: e(2),
        metadata: layout(),
        prepared: Some(Prepared {
            new_epoch: e(4),
            metadata: layout(),
            new_mgr: M,
        }),
    };
    from_chunk(&mut m, &mut env, T0 + ms(9), 3, lingering);
    assert_eq!(m.recovered, set(&[3]));
    env.take();
    assert!(m.relayout(&mut env.ctx(T0 + ms(10)), md(&[1, 2, 3])));
    let out = env.take();
    assert!(!epoch_transitions(&out).is_empty());
    assert!(epoch_transitions(&out).iter().all(|t| (t.1, t.2) == (3, 5)));
}

// Tenure (DESIGN "State at scale"): once everything submitted is committed, a manager's
// speculative tables share the committed ones' nodes again, every SHARE_TABLES_EVERY
// batches, rather than growing into a second copy of the store.
#[test]
fn speculative_tables_share_the_committed_ones_once_everything_is_committed() {
    use crate::testkit::Cluster;
    let store = StoreId(0);
    let mut c = Cluster::new(3, 1);
    c.run_for(Duration::from_secs(5));
    let (d, _) = c.manager_of(store).expect("managed");
    let mut shared = 0;
    for i in 0..(3 * crate::io::persist::SHARE_TABLES_EVERY as u64) {
        c.write(d, store, i % 7, i);
        c.run_for(Duration::from_millis(20));
        let m = c.devices.get_mut(&d).expect("device").manager_mut(store);
        assert!(
            m.host.queue.is_empty() && m.host.inflight.is_none(),
            "write {i} not committed"
        );
        assert_eq!(m.host.speculative, m.host.data.table);
        if m.host
            .speculative
            .registers
            .entries
            .ptr_eq(&m.host.data.table.registers.entries)
        {
            shared += 1;
        }
    }
    assert!(shared >= 2, "shared after {shared} of the writes");
}
