//! A device's peer messages on their way into the simulated network, and the accounting
//! that watches them: SafeTalk's message cost, update delays, the manager crash's
//! messages, election and membership records, snapshot channel numbers.

use super::{Event, World};
use crate::net::Fate;
use tenure_core::DeviceId;
use tenure_core::msg::{Msg, ToChunk, ToManager};

impl World {
    /// Hand a message from `from` to the network (lost, delivered, perhaps twice).
    pub(super) fn send(&mut self, from: DeviceId, to: DeviceId, msg: Msg) {
        self.count_safetalk(from, to, &msg);
        if from != to {
            self.count_transition(&msg);
        }
        self.count_manager_crash(from, to, &msg);
        if let Msg::Coord(tenure_core::election::coordinator::CoordMsg::Members {
            members, ..
        }) = &msg
        {
            // The coordinator's record, as it sends it.
            self.members.sent(self.now, from, members);
        }
        if let Msg::Election(m) = &msg
            && let Some(id) = crate::election::counted_id(m)
        {
            let running: Vec<DeviceId> = (self.nodes.keys().copied())
                .filter(|d| self.running(*d))
                .collect();
            let boot = self.nodes.get(&id.initiator).map_or(0, |n| n.boot);
            self.elections.message(self.now, id, boot, &running);
        }
        let seq = match crate::snapshot::carried(&msg) {
            Some(_) => self.cuts.send(from, to),
            None => 0,
        };
        let msg = Box::new(msg);
        let Some(boot) = self.nodes.get(&to).map(|n| n.boot) else {
            return;
        };
        match self.net.send(self.now, from, to) {
            Fate::Lost => self.report.faults.lost += 1,
            Fate::Deliver(times) => {
                if times.len() > 1 {
                    self.report.faults.duplicated += 1;
                }
                if let Some(at) = times.first() {
                    self.delay_sent(from, to, &msg, at.saturating_sub(self.now));
                }
                for at in times {
                    self.schedule(
                        at,
                        Event::Deliver {
                            from,
                            to,
                            boot,
                            seq,
                            msg: msg.clone(),
                        },
                    );
                }
            }
        }
    }

    /// Epoch transitions between devices: whole states or summaries and patches.
    fn count_transition(&mut self, msg: &Msg) {
        let t = &mut self.report.transitions;
        match msg {
            Msg::ToManager { msg, .. } => match msg {
                ToManager::Vote { .. } => t.votes_whole += 1,
                ToManager::VoteSummary(_) => t.votes_summary += 1,
                _ => {}
            },
            Msg::ToChunk { msg, .. } => match msg {
                ToChunk::SendState(_) => t.states_asked += 1,
                ToChunk::Commit { .. } => t.commits_whole += 1,
                ToChunk::CommitPatch(c) => {
                    t.commits_patch += 1;
                    t.patch_rows += c.patch.rows.len() as u64;
                }
                ToChunk::EpochTransition { data: Some(_), .. } => t.reconciles_whole += 1,
                ToChunk::ReconcilePatch(r) => {
                    t.reconciles_patch += 1;
                    t.reconcile_rows += r.patch.rows.len() as u64;
                }
                _ => {}
            },
            _ => {}
        }
    }

    /// Message cost accounting (seed 004 §8): SafeTalk's messages, local or remote.
    fn count_safetalk(&mut self, from: DeviceId, to: DeviceId, msg: &Msg) {
        // A message sent while a snapshot's marker is unacknowledged travels tagged: it
        // is counted as what it carries.
        let mut msg = msg;
        while let Msg::Snapshot(tenure_core::snapshot::SnapMsg::Tagged { msg: inner, .. }) = msg {
            msg = inner;
        }
        let apart = match msg {
            Msg::ToChunk {
                store,
                msg: ToChunk::Accept { .. } | ToChunk::Confirm { .. },
                ..
            } => self.manager_apart(from, *store),
            Msg::ToManager {
                store,
                msg: ToManager::Accepted { .. },
                ..
            } => self.manager_apart(to, *store),
            _ => return,
        };
        let st = if apart {
            &mut self.report.safetalk_apart
        } else {
            &mut self.report.safetalk
        };
        let kind = match msg {
            Msg::ToChunk {
                msg: ToChunk::Accept { epoch, ops, .. },
                ..
            } => {
                // One flush sends the same batch to every live chunk in a row: count it
                // once, by its first sequence number.
                let first = (*epoch, ops.first().map(|(v, _)| *v));
                if self.last_batch.insert(from, first) != Some(first) {
                    st.batches += 1;
                    st.ops += ops.len() as u64;
                }
                1
            }
            Msg::ToChunk {
                msg: ToChunk::Confirm { .. },
                ..
            } => 2,
            Msg::ToManager {
                msg: ToManager::Accepted { .. },
                ..
            } => 3,
            _ => return,
        };
        if from == to {
            st.local += 1;
        } else {
            match kind {
                1 => st.accept_remote += 1,
                2 => st.confirm_remote += 1,
                _ => st.accepted_remote += 1,
            }
        }
    }
}
