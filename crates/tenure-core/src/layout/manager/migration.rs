//! Migration of the manager role and relayout (seed 000 §5.3.3–9), and the messages
//! between managers.

use super::*;
use crate::ctx::Ctx;
use crate::ids::{ChunkId, DeviceId, Epoch};
use crate::layout::{Metadata, MgrState};
use crate::msg::{MgrMsg, Msg, ToChunk};
use std::collections::BTreeSet;

/// How many early votes a role keeps (the newest).
pub const EARLY_VOTES_MAX: usize = 8;

/// A chunk's vote that arrived before the handoff it belongs to ([`Stage::None`]).
#[derive(Clone, Debug)]
pub struct EarlyVote {
    /// The chunk.
    pub chunk: ChunkId,
    /// The epoch being prepared.
    pub new_epoch: Epoch,
    /// The transition attempt.
    pub tx: u64,
    /// The epoch the chunk last committed.
    pub committed: Epoch,
    /// The chunk's store state, whole or named.
    pub data: crate::data::StoreInput,
    /// Until when it counts: a transition timeout after it arrived.
    pub until: Instant,
}

impl Manager {
    /// Whether a message about a migration out names this one: its destination, the
    /// epoch it prepares and its attempt.
    fn is_outgoing(&self, from: DeviceId, new_epoch: Epoch, tx: u64) -> bool {
        self.stage
            .outgoing()
            .is_some_and(|o| from == o.new_mgr && new_epoch == self.next_epoch() && o.tx == tx)
    }

    /// The epoch of the next transition this manager starts: above its own and above
    /// every epoch a chunk reported prepared ([`Self::prepared_floor`]).
    fn next_epoch(&self) -> Epoch {
        self.epoch.max(self.prepared_floor).next()
    }

    /// §5.3.7 migrate(node).
    pub fn migrate(&mut self, ctx: &mut Ctx<'_>, node: DeviceId) -> bool {
        if self.state() != MgrState::Manager || node == ctx.me() {
            return false;
        }
        if self.host.busy() {
            self.defer(ctx, Deferred::Migrate(node));
            return false;
        }
        self.fail_writes(ctx);
        let new_epoch = self.next_epoch();
        let tx = ctx.rng.next_u64();
        ctx.send(
            node,
            Msg::Mgr {
                store: self.store,
                msg: MgrMsg::Handoff {
                    tx,
                    old_epoch: self.epoch,
                    new_epoch,
                    metadata: self.metadata.clone(),
                    failed: self.failed.iter().copied().collect(),
                    data: Box::new(self.host.data.clone()),
                },
            },
        );
        for c in self.live() {
            self.to_chunk(
                ctx,
                c,
                ToChunk::EpochTransition {
                    old_epoch: self.epoch,
                    new_epoch,
                    metadata: self.metadata.clone(),
                    new_mgr: node,
                    tx,
                    data: None,
                },
            );
        }
        // Our state travels in the handoff; `done` (and the vote) when the incoming
        // manager says it holds it (HandoffReady), while this window is open.
        self.stage = Stage::OutOfReconciling(Outgoing {
            new_mgr: node,
            tx,
            deadline: ctx.now + ctx.cfg.timing.transition_wait,
        });
        true
    }

    /// §5.3.7 relayout(new metadata).
    pub fn relayout(&mut self, ctx: &mut Ctx<'_>, new: Metadata) -> bool {
        if self.state() != MgrState::Manager || new.chunks.is_empty() {
            return false;
        }
        if self.host.busy() {
            self.defer(ctx, Deferred::Relayout(new));
            return false;
        }
        // Participants: every live chunk, and every chunk of the new layout except those
        // failed and not recovered. They must hold a quorum of the new layout, or a
        // later regeneration could find a quorum that never received the state.
        let unreachable: BTreeSet<ChunkId> =
            self.failed.difference(&self.recovered).copied().collect();
        let live = self.live();
        let mut participants = live.clone();
        participants.extend(new.chunks.difference(&unreachable).copied());
        if !(new.quorum(&participants) && new.coverage(&participants)) {
            return false;
        }
        self.fail_writes(ctx);
        let new_metadata_log = new.clone();
        let new_epoch = self.next_epoch();
        // Tenure: reconciliation (§5.3.8) sends the store's state to the participants
        // that do not hold it — new chunks and recovered ones — and they vote only once
        // it is durable. Merging the votes at commit is not enough: if the commit then
        // reaches only some of the new layout, a later regeneration from a quorum of it
        // could find only chunks that never received the state (simulator seed 2847).
        let reconcile = participants.difference(&live).copied().collect();
        self.begin_tx(
            ctx,
            TxKind::Relayout,
            new_epoch,
            new,
            participants,
            reconcile,
        );
        self.stage = Stage::RelayoutReconciling(new_metadata_log);
        true
    }

    /// Manager-to-manager messages (§5.3.1 handoff, and the migration commit).
    pub fn on_mgr_msg(&mut self, ctx: &mut Ctx<'_>, from: DeviceId, msg: MgrMsg) {
        use MgrState as S;
        match (self.state(), msg) {
            (
                S::None,
                MgrMsg::Handoff {
                    tx: id,
                    old_epoch,
                    new_epoch,
                    metadata,
                    failed,
                    data,
                },
            ) if !self.finished.contains(&id) && new_epoch > old_epoch => {
                let early = match std::mem::take(&mut self.stage) {
                    Stage::None(early) => early,
                    _ => unreachable!("a handoff is taken in the none state only"),
                };
                self.reset();
                self.epoch = new_epoch;
                self.metadata = metadata.clone();
                self.failed = failed.into_iter().collect();
                self.host.data = *data;
                self.stage = Stage::IntoReconciling(Incoming {
                    old_mgr: Some(from),
                });
                let participants = self.live();
                self.tx = Some(Tx {
                    id,
                    kind: TxKind::Into,
                    new_epoch: self.epoch,
                    metadata,
                    participants,
                    votes: BTreeSet::new(),
                    inputs: Tx::own_input(old_epoch, self.host.data.clone()),
                    sources: vec![None],
                    asked: BTreeSet::new(),
                    await_mgr: Some(from),
                    begun: ctx.now,
                    // Until the outgoing manager's vote says how long it waits.
                    deadline: ctx.now + ctx.cfg.timing.transition_timeout,
                });
                let msg = MgrMsg::HandoffReady { new_epoch, tx: id };
                let store = self.store;
                ctx.send(from, Msg::Mgr { store, msg });
                // Votes of this attempt that outran the handoff count as if they came now.
                let tx = self.tx.as_mut().expect("just begun");
                for v in early {
                    if v.tx == id && v.new_epoch == new_epoch && v.until > ctx.now {
                        tx.vote(v.chunk, v.committed, v.data);
                    }
                }
                self.check_votes(ctx);
            }
            (_, MgrMsg::Handoff { tx, new_epoch, .. }) => {
                // Tenure: busy with this store, or a replay of a finished attempt;
                // refuse so the old manager resumes.
                ctx.send(
                    from,
                    Msg::Mgr {
                        store: self.store,
                        msg: MgrMsg::HandoffAbort { new_epoch, tx },
                    },
                );
            }
            // §5.3.6 out of reconciling: done (the incoming manager holds our state),
            // vote commit — only while our window is open, saying how long it stays so.
            (S::OutOfReconciling | S::OutOfTransition, MgrMsg::HandoffReady { new_epoch, tx }) => {
                let out = *self.stage.outgoing().expect("migrating out");
                if out.deadline > ctx.now
                    && from == out.new_mgr
                    && new_epoch == self.next_epoch()
                    && out.tx == tx
                {
                    let d = out.deadline;
                    self.stage.advance(S::OutOfTransition);
                    let within = d.saturating_since(ctx.now);
                    let msg = MgrMsg::HandoffVote {
                        new_epoch,
                        tx,
                        within,
                    };
                    ctx.send(
                        from,
                        Msg::Mgr {
                            store: self.store,
                            msg,
                        },
                    );
                }
            }
            (
                S::IntoReconciling,
                MgrMsg::HandoffVote {
                    new_epoch,
                    tx: id,
                    within,
                },
            ) => {
                if let Some(tx) = self
                    .tx
                    .as_mut()
                    .filter(|t| t.new_epoch == new_epoch && t.id == id && t.await_mgr == Some(from))
                {
                    tx.await_mgr = None;
                    // The vote left after our HandoffReady: counted from the ready's
                    // sending, less the drift bound, the outgoing manager still waits.
                    let by = (tx.begun + within).saturating_sub(ctx.cfg.timing.clock_drift);
                    tx.deadline = tx.deadline.min(by);
                    self.check_votes(ctx);
                }
            }
            // §5.3.6 out of transition: commit tx
            (S::OutOfTransition, MgrMsg::HandoffCommit { new_epoch, tx }) => {
                if self.is_outgoing(from, new_epoch, tx) {
                    self.newly_awake(ctx);
                    self.forwarding = Some(from);
                }
            }
            // §5.3.6 out of transition: abort tx (or refused before the vote)
            (S::OutOfReconciling | S::OutOfTransition, MgrMsg::HandoffAbort { new_epoch, tx }) => {
                if self.is_outgoing(from, new_epoch, tx) {
                    let expiry = ctx.now + ctx.cfg.timing.abort_window;
                    for c in self.live() {
                        self.chunkfail.insert(c, expiry);
                    }
                    self.stage = Stage::Manager;
                    self.stable_since = ctx.now;
                    self.policy.backoff_until = ctx.now + ctx.cfg.timing.lease;
                }
            }
            _ => {}
        }
    }
}
