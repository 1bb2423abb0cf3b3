//! The coordinator (DESIGN §6): the device the election made coordinator runs the outside
//! policies for the whole cluster (seed 000 §3), instead of each store's manager for
//! itself.
//!
//! Every member reports to the coordinator it follows, once a renewal period: how many
//! chunks it holds ([`CoordMsg::Member`]) and, for each store it manages, the store's
//! layout and failed chunks ([`CoordMsg::Store`]). From the latest reports the
//! coordinator decides, a round per renewal period:
//!
//! - **replace failed chunks**: a chunk failed for two lease lengths is replaced by a new
//!   chunk on the live device holding the fewest chunks that does not hold one of the
//!   store's chunks already (spreading chunks over devices);
//! - **spread managers**: a store whose layout is whole and that has been stable for
//!   `migrate_after` migrates to its preferred device when that device is live.
//!
//! Each decision is a [`CoordMsg::Command`] to the store's manager, carrying the
//! coordinator's [`Term`]. A device refuses a command whose term is older than the
//! newest term it has seen (and persisted), so a deposed coordinator can do no harm; the
//! commands are idempotent (the manager re-checks their preconditions), so a command
//! repeated, or sent by two coordinators of different terms, changes nothing twice.

use super::Term;
use crate::config::DeviceConfig;
use crate::ids::{ChunkId, DeviceId, Epoch, StoreId};
use crate::io::PolicyCommand;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Messages between members and the coordinator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CoordMsg {
    /// A member's report to the coordinator of `term`.
    Member {
        /// The term the member follows.
        term: Term,
        /// Chunks the member holds.
        chunks: u32,
    },
    /// A store manager's report to the coordinator of `term`.
    Store {
        /// The term the manager follows.
        term: Term,
        /// The report.
        report: StoreReport,
    },
    /// A decision of the coordinator of `term`, to the store's manager.
    Command {
        /// The coordinator's term.
        term: Term,
        /// The decision.
        cmd: PolicyCommand,
    },
}

/// What a manager tells the coordinator about its store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreReport {
    /// The store.
    pub store: StoreId,
    /// Its epoch.
    pub epoch: Epoch,
    /// Its layout.
    pub chunks: Vec<ChunkId>,
    /// Chunks marked failed, with how long ago.
    pub failed: Vec<(ChunkId, Duration)>,
    /// How long this device has managed the store.
    pub managing_for: Duration,
    /// Whether a layout change is in progress (a chunk being created, a recovered chunk
    /// to rejoin, a transition): no new command until it is done.
    pub busy: bool,
}

/// The coordinator's view, kept on every device and used while it is coordinator.
#[derive(Clone, Debug, Default)]
pub struct Coordinator {
    /// Latest report per store: (from, received, report).
    stores: BTreeMap<StoreId, (DeviceId, Instant, StoreReport)>,
    /// Latest member report: (received, chunks held).
    members: BTreeMap<DeviceId, (Instant, u32)>,
    /// No new command for a store before this time (the last one is under way).
    pending: BTreeMap<StoreId, Instant>,
    /// The term the view was gathered in (reports of another term are not used).
    term: Option<Term>,
    /// The next decision round.
    next_round: Option<Instant>,
}

/// A decision: send `cmd` to `to`.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The store's manager.
    pub to: DeviceId,
    /// The command.
    pub cmd: PolicyCommand,
}

impl Coordinator {
    /// Start (or keep) acting as coordinator of `term` at `now`. A new term starts from an
    /// empty view: reports gathered for another term may be out of date.
    pub fn start(&mut self, term: Term, now: Instant, cfg: &DeviceConfig) {
        if self.term != Some(term) {
            *self = Coordinator {
                term: Some(term),
                // The first round waits for a full set of reports.
                next_round: Some(now + cfg.timing.renewal_period * 2),
                ..Coordinator::default()
            };
        }
    }

    /// Stop acting as coordinator.
    pub fn stop(&mut self) {
        *self = Coordinator::default();
    }

    /// The term acted in, if coordinator.
    pub fn term(&self) -> Option<Term> {
        self.term
    }

    /// The next decision round.
    pub fn next_timeout(&self) -> Option<Instant> {
        self.next_round
    }

    /// A member's report.
    pub fn on_member(&mut self, now: Instant, from: DeviceId, term: Term, chunks: u32) {
        if self.term == Some(term) {
            self.members.insert(from, (now, chunks));
        }
    }

    /// A manager's report.
    pub fn on_store(&mut self, now: Instant, from: DeviceId, term: Term, report: StoreReport) {
        if self.term != Some(term) {
            return;
        }
        let newer = self
            .stores
            .get(&report.store)
            .is_none_or(|(_, _, old)| old.epoch <= report.epoch);
        if newer {
            self.stores.insert(report.store, (from, now, report));
        }
    }

    /// Run a decision round if one is due; returns the commands to send.
    pub fn on_tick(&mut self, now: Instant, cfg: &DeviceConfig) -> Vec<Decision> {
        let Some(round) = self.next_round else {
            return Vec::new();
        };
        if round > now {
            return Vec::new();
        }
        let t = &cfg.timing;
        self.next_round = Some(now + t.renewal_period);
        if !cfg.run_policies {
            return Vec::new();
        }
        let fresh = t.renewal_period * 3;
        let me = cfg.id;
        // Live members: this device, and those that reported recently.
        let live: BTreeMap<DeviceId, u32> = (self.members.iter())
            .filter(|(d, (at, _))| **d == me || now.saturating_since(*at) <= fresh)
            .map(|(d, (_, n))| (*d, *n))
            .chain([(me, self.members.get(&me).map_or(0, |m| m.1))])
            .collect();
        self.pending.retain(|_, until| *until > now);
        let mut load = live.clone();
        let mut out = Vec::new();
        for (store, (from, at, r)) in &self.stores {
            if now.saturating_since(*at) > fresh || r.busy || self.pending.contains_key(store) {
                continue;
            }
            let d = decide(cfg, &live, &load, *from, r);
            if let Some(d) = d {
                if let PolicyCommand::ReplaceChunk { device, .. } = &d.cmd {
                    *load.entry(*device).or_default() += 1;
                }
                out.push(d);
            }
        }
        for d in &out {
            let store = match &d.cmd {
                PolicyCommand::Migrate { store, .. }
                | PolicyCommand::ReplaceChunk { store, .. }
                | PolicyCommand::Relayout { store, .. } => *store,
            };
            // A chunk creation takes up to four message timeouts and a relayout; a
            // migration a transition.
            self.pending
                .insert(store, now + t.msg_timeout * 4 + t.lease + t.renewal_period);
        }
        out
    }
}

/// The decision for one store, if any (see the module documentation).
fn decide(
    cfg: &DeviceConfig,
    live: &BTreeMap<DeviceId, u32>,
    load: &BTreeMap<DeviceId, u32>,
    manager: DeviceId,
    r: &StoreReport,
) -> Option<Decision> {
    let t = &cfg.timing;
    let replace_after = t.lease * 2;
    if let Some((old, _)) = r.failed.iter().find(|(_, age)| *age >= replace_after) {
        let holders: BTreeSet<DeviceId> = r.chunks.iter().map(|c| c.device).collect();
        let ranked = cfg.cluster.ranked_devices(r.store);
        let device = (ranked.iter().enumerate())
            .filter(|(_, d)| live.contains_key(d) && !holders.contains(d))
            .min_by_key(|(rank, d)| (load.get(d).copied().unwrap_or(0), *rank))
            .map(|(_, d)| *d)?;
        return Some(Decision {
            to: manager,
            cmd: PolicyCommand::ReplaceChunk {
                store: r.store,
                old: *old,
                device,
            },
        });
    }
    let preferred = cfg.cluster.preferred_manager(r.store);
    if r.failed.is_empty()
        && preferred != manager
        && live.contains_key(&preferred)
        && r.managing_for >= t.migrate_after
    {
        return Some(Decision {
            to: manager,
            cmd: PolicyCommand::Migrate {
                store: r.store,
                to: preferred,
            },
        });
    }
    None
}
