//! The outside policies a manager runs for its own store (seed 000 §3): replace a failed
//! chunk by relayout, rejoin recovered chunks, defer a transition until the store is idle,
//! report to the coordinator.

use super::*;
use crate::ctx::Ctx;
use crate::ids::{ChunkId, DeviceId};
use crate::layout::{Metadata, MgrState};
use crate::msg::{Msg, PolicyMsg};
use crate::time::Instant;
use std::collections::{BTreeMap, BTreeSet};

/// Outside-policy work in progress for this store.
#[derive(Clone, Debug, Default)]
pub struct PolicyState {
    /// A chunk creation is outstanding: (chunk it replaces, device asked, deadline).
    pub creating: Option<(ChunkId, DeviceId, Instant)>,
    /// Devices already tried for the replacement of a chunk.
    pub tried: BTreeSet<DeviceId>,
    /// When each failed chunk was first marked failed.
    pub failed_at: BTreeMap<ChunkId, Instant>,
    /// No new policy action before this time (set when one aborts, so a change that
    /// keeps failing does not turn into a storm of epoch transitions).
    pub backoff_until: Instant,
    /// A transition asked for while a SafeTalk batch was queued or in flight, with the
    /// time it is given up at: it starts once the manager is idle (see
    /// [`Manager::relayout`]).
    pub deferred: Option<(Deferred, Instant)>,
}

/// An epoch transition waiting for the batch in flight (Tenure): a relayout or a
/// migration needs an idle manager, and under steady traffic — a barrier per lock
/// holders query — a manager is never idle between two batches, so one refused while
/// busy was refused forever (a retiring device's chunks never moved off it).
#[derive(Clone, Debug, PartialEq)]
pub enum Deferred {
    /// [`Manager::relayout`] onto this layout.
    Relayout(Metadata),
    /// [`Manager::migrate`] to this device.
    Migrate(DeviceId),
}

impl Manager {
    /// A transition asked for while busy waits until the batches under way are done
    /// (new client requests meanwhile are answered `Unavailable`, as during the
    /// transition itself), for a few acknowledgement timeouts at most.
    pub(super) fn defer(&mut self, ctx: &mut Ctx<'_>, d: Deferred) {
        let until = ctx.now + ctx.cfg.timing.ack_timeout * 4;
        self.policy.deferred = Some((d, until));
    }

    /// Start the deferred transition if the manager is idle now (or drop it if its time
    /// passed).
    pub(super) fn start_deferred(&mut self, ctx: &mut Ctx<'_>) {
        match &self.policy.deferred {
            Some((_, until)) if *until <= ctx.now => self.policy.deferred = None,
            Some(_) if self.state() == MgrState::Manager && !self.host.busy() => {
                match self.policy.deferred.take().map(|d| d.0) {
                    Some(Deferred::Relayout(md)) => {
                        self.relayout(ctx, md);
                    }
                    Some(Deferred::Migrate(to)) => {
                        self.migrate(ctx, to);
                    }
                    None => {}
                }
            }
            _ => {}
        }
    }

    /// The outside policies this manager runs for itself; the cluster-wide ones
    /// (replacing failed chunks, spreading managers) are the coordinator's (DESIGN §6,
    /// [`crate::election::coordinator`]), which this manager reports to ([`Self::report`]).
    pub(super) fn run_policies(&mut self, ctx: &mut Ctx<'_>) {
        let t = &ctx.cfg.timing;
        let now = ctx.now;
        // Check again after a while.
        self.stable_since = now + t.renewal_period;
        if !ctx.cfg.run_policies || now < self.policy.backoff_until {
            return;
        }
        if let Some((_, _, deadline)) = self.policy.creating
            && deadline <= now
        {
            self.policy.creating = None;
        }
        // A recovered chunk rejoins through a relayout onto the same layout.
        if !self.recovered.is_empty()
            && self.policy.creating.is_none()
            && self.policy.deferred.is_none()
            && self.state() == MgrState::Manager
        {
            let md = self.metadata.clone();
            self.relayout(ctx, md);
        }
    }

    /// This manager's report to the coordinator (none unless it manages the store).
    pub fn report(&self, now: Instant) -> Option<crate::election::coordinator::StoreReport> {
        if self.state() != MgrState::Manager {
            return None;
        }
        Some(crate::election::coordinator::StoreReport {
            store: self.store,
            epoch: self.epoch,
            chunks: self.metadata.chunks.iter().copied().collect(),
            failed: (self.failed.iter())
                .map(|c| {
                    let at = self.policy.failed_at.get(c).copied().unwrap_or(now);
                    (*c, now.saturating_since(at))
                })
                .collect(),
            managing_for: now.saturating_since(self.entered_at),
            busy: self.tx.is_some()
                || self.policy.creating.is_some()
                || self.policy.deferred.is_some()
                || !self.recovered.is_empty()
                || now < self.policy.backoff_until,
        })
    }

    /// Ask `device` for a new chunk to replace `old`.
    pub fn request_chunk(&mut self, ctx: &mut Ctx<'_>, old: ChunkId, device: DeviceId) {
        if self.state() != MgrState::Manager {
            return;
        }
        self.policy.tried.insert(device);
        self.policy.creating = Some((old, device, ctx.now + ctx.cfg.timing.msg_timeout * 4));
        let msg = Msg::Policy(PolicyMsg::CreateChunk {
            store: self.store,
            mgr: ctx.me(),
            epoch: self.epoch,
            lease: ctx.cfg.timing.lease,
        });
        ctx.send(device, msg);
    }

    /// A chunk requested by [`Manager::request_chunk`] exists: relayout onto it.
    pub fn chunk_created(&mut self, ctx: &mut Ctx<'_>, chunk: ChunkId) {
        let Some((old, device, _)) = self.policy.creating else {
            return;
        };
        if device != chunk.device || self.state() != MgrState::Manager {
            return;
        }
        self.policy.creating = None;
        self.policy.tried.clear();
        self.recovered.insert(chunk);
        self.chunkfail.insert(chunk, ctx.now + ctx.cfg.timing.lease);
        let mut md = self.metadata.clone();
        md.chunks.remove(&old);
        md.chunks.insert(chunk);
        self.relayout(ctx, md);
    }
}
