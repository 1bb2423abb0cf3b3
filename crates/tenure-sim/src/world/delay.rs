//! Update delay accounting (seed 004 §8: D_updt = 2τ + 3τ_max + W), measured in
//! simulated time on the messages the network actually delays:
//!
//! - τ: the one-way delay of every message between two distinct devices;
//! - τ_max: per ACCEPT batch of a manager, the largest delay to the batch's chunks on
//!   other devices (the seed's "maximum delay between a sender and just the several
//!   destinations involved in the update");
//! - per granted lock request, its time at the manager (Menasce's LC): from its arrival to
//!   the answer leaving, split into W — arrival to the ACCEPT batch whose completion
//!   grants it (waiting for the lock, and for the batch to go out) — and the SafeTalk
//!   round of that batch, ACCEPT out to the last ACCEPTED in.
//!
//! Each figure is kept twice: for managers holding a chunk of their store (the LC among
//! the k sites) and for managers on a device holding none of its chunks
//! ([`super::SimConfig::migrate_manager_apart_at_us`]).

use super::{START_US, World};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use tenure_core::ids::Version;
use tenure_core::io::{ClientError, PolicyCommand, Request, Response};
use tenure_core::msg::{Msg, ToChunk, ToManager};
use tenure_core::{DeviceId, StoreId};

/// How long the operator waits before asking again for a migration apart (µs).
const RETRY_US: u64 = 1_000_000;

/// Measured delays of one kind of manager (sums in µs, with their counts).
#[derive(Clone, Debug, Default, Serialize)]
pub struct UpdateDelay {
    /// One-way delays of messages between two distinct devices (the whole run).
    pub tau_sum_us: u64,
    /// How many.
    pub tau_n: u64,
    /// Per completed ACCEPT batch with remote chunks, its slowest remote delay.
    pub tau_max_sum_us: u64,
    /// How many batches.
    pub tau_max_n: u64,
    /// Granted lock requests measured.
    pub grants: u64,
    /// Their time at the manager, arrival to answer.
    pub at_lc_sum_us: u64,
    /// W: arrival to the ACCEPT batch that grants it.
    pub w_sum_us: u64,
    /// The SafeTalk round of that batch: ACCEPT out to the last ACCEPTED in.
    pub round_sum_us: u64,
}

fn mean(sum: u64, n: u64) -> f64 {
    if n == 0 {
        f64::NAN
    } else {
        sum as f64 / n as f64
    }
}

impl UpdateDelay {
    /// τ (µs).
    pub fn tau_us(&self) -> f64 {
        mean(self.tau_sum_us, self.tau_n)
    }
    /// τ_max (µs).
    pub fn tau_max_us(&self) -> f64 {
        mean(self.tau_max_sum_us, self.tau_max_n)
    }
    /// Mean W (µs).
    pub fn w_us(&self) -> f64 {
        mean(self.w_sum_us, self.grants)
    }
    /// Mean time at the manager (µs).
    pub fn at_lc_us(&self) -> f64 {
        mean(self.at_lc_sum_us, self.grants)
    }
    /// Mean SafeTalk round of the granting batch (µs).
    pub fn round_us(&self) -> f64 {
        mean(self.round_sum_us, self.grants)
    }
}

/// One ACCEPT batch in flight.
#[derive(Clone, Debug)]
struct Batch {
    sent_us: u64,
    /// Devices whose ACCEPTED is still due.
    waiting: BTreeSet<DeviceId>,
    /// Largest network delay to a chunk on another device.
    max_remote_us: Option<u64>,
    apart: bool,
}

/// The world's bookkeeping behind [`UpdateDelay`].
#[derive(Clone, Debug, Default)]
pub(super) struct DelayTracker {
    /// Open batches per (manager device, store), by their last sequence number.
    open: BTreeMap<(DeviceId, StoreId), BTreeMap<Version, Batch>>,
    /// The last completed batch per (manager device, store): sent and completed (µs).
    done: BTreeMap<(DeviceId, StoreId), (u64, u64)>,
    /// When each lock request last reached a device (µs).
    arrived: BTreeMap<u64, u64>,
}

impl World {
    /// Ask the manager of store 0 to migrate to a running device holding none of the
    /// store's chunks ([`super::SimConfig::migrate_manager_apart_at_us`]). The operator
    /// asks again every second for three seconds until the manager is there: a migration
    /// can abort (a chunk's vote that reaches the new manager before the old manager's
    /// handoff is dropped, and the vote deadline passes).
    pub(super) fn migrate_apart(&mut self) {
        let store = StoreId(0);
        let first = START_US + self.cfg.migrate_manager_apart_at_us.unwrap_or(0);
        let Some((mgr, _)) = self.manager_of(store) else {
            return;
        };
        if self.manager_apart(mgr, store) {
            return;
        }
        if self.now + RETRY_US <= first + 3 * RETRY_US {
            self.schedule(self.now + RETRY_US, super::Event::MigrateApart);
        }
        let Some(view) = (self.nodes[&mgr].device.as_ref()).and_then(|d| d.manager_view(store))
        else {
            return;
        };
        let holders: BTreeSet<DeviceId> = view.metadata.chunks.iter().map(|c| c.device).collect();
        let Some(to) =
            (self.nodes.keys().copied()).find(|d| !holders.contains(d) && self.running(*d))
        else {
            return;
        };
        self.trace(|| {
            format!("operator: migrate the manager of {store:?} to {to}, off its chunks")
        });
        let boot = self.nodes[&mgr].boot;
        let cmd = PolicyCommand::Migrate { store, to };
        let at = self.now + self.knobs.latency_min_us;
        self.schedule(at, super::Event::PolicyArrive { to: mgr, boot, cmd });
    }

    /// Whether `mgr` manages `store` from a device holding none of its chunks.
    pub(super) fn manager_apart(&self, mgr: DeviceId, store: StoreId) -> bool {
        (self.nodes.get(&mgr))
            .and_then(|n| n.device.as_ref())
            .and_then(|d| d.manager_view(store))
            .is_some_and(|v| v.metadata.chunks.iter().all(|c| c.device != mgr))
    }

    fn delays(&mut self, apart: bool) -> &mut UpdateDelay {
        if apart {
            &mut self.report.update_delay_apart
        } else {
            &mut self.report.update_delay
        }
    }

    /// A message leaves `from` for `to`, to arrive `delay_us` later.
    pub(super) fn delay_sent(&mut self, from: DeviceId, to: DeviceId, msg: &Msg, delay_us: u64) {
        if from != to {
            for apart in [false, true] {
                let d = self.delays(apart);
                d.tau_sum_us += delay_us;
                d.tau_n += 1;
            }
        }
        let Msg::ToChunk {
            store,
            msg: ToChunk::Accept { ops, .. },
            ..
        } = msg
        else {
            return;
        };
        let Some((last, _)) = ops.last() else {
            return;
        };
        let apart = self.manager_apart(from, *store);
        let now = self.now;
        let b = (self.delay.open.entry((from, *store)).or_default())
            .entry(*last)
            .or_insert_with(|| Batch {
                sent_us: now,
                waiting: BTreeSet::new(),
                max_remote_us: None,
                apart,
            });
        b.waiting.insert(to);
        if from != to {
            b.max_remote_us = Some(b.max_remote_us.unwrap_or(0).max(delay_us));
        }
    }

    /// A message is delivered (before the receiver handles it): an ACCEPTED may complete
    /// batches.
    pub(super) fn delay_delivered(&mut self, from: DeviceId, to: DeviceId, msg: &Msg) {
        let Msg::ToManager {
            store,
            msg: ToManager::Accepted { upto, .. },
            ..
        } = msg
        else {
            return;
        };
        let key = (to, *store);
        let Some(open) = self.delay.open.get_mut(&key) else {
            return;
        };
        let mut completed = Vec::new();
        for (last, b) in open.range_mut(..=*upto) {
            b.waiting.remove(&from);
            if b.waiting.is_empty() {
                completed.push(*last);
            }
        }
        let now = self.now;
        for last in completed {
            let b = open.remove(&last).expect("open batch");
            self.delay.done.insert(key, (b.sent_us, now));
            if let Some(m) = b.max_remote_us {
                let d = if b.apart {
                    &mut self.report.update_delay_apart
                } else {
                    &mut self.report.update_delay
                };
                d.tau_max_sum_us += m;
                d.tau_max_n += 1;
            }
        }
    }

    /// A lock request reaches a device.
    pub(super) fn delay_arrived(&mut self, req: u64) {
        self.delay.arrived.insert(req, self.now);
    }

    /// Device `d` answers lock request `req`: a grant completed by a batch just now is
    /// measured.
    pub(super) fn delay_answered(
        &mut self,
        d: DeviceId,
        req: u64,
        result: &Result<Response, ClientError>,
    ) {
        let Some(arrived) = self.delay.arrived.remove(&req) else {
            return;
        };
        if !matches!(result, Ok(Response::Granted { .. })) {
            return;
        }
        let Some(Request::Acquire { store, .. }) = self.lock_reqs.get(&req).map(|r| &r.req) else {
            return;
        };
        let store = *store;
        let Some((sent, done)) = self.delay.done.get(&(d, store)).copied() else {
            return;
        };
        if done != self.now || sent < arrived {
            return;
        }
        let apart = self.manager_apart(d, store);
        let now = self.now;
        let u = self.delays(apart);
        u.grants += 1;
        u.at_lc_sum_us += now - arrived;
        u.w_sum_us += sent - arrived;
        u.round_sum_us += now - sent;
    }
}
