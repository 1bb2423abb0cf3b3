//! Which stores have a working manager: the sampler behind failover times, step windows
//! and the liveness phase's convergence.

use super::World;
use std::collections::{BTreeMap, BTreeSet};
use tenure_core::layout::{ChunkState, Metadata, MgrState};
use tenure_core::{DeviceId, Epoch, StoreId};

/// What the sampler records of stores without a working manager, and what the windows
/// after wall-clock steps are measured on.
#[derive(Default)]
pub(super) struct Availability {
    /// Stores that have had a working manager at least once.
    pub(super) ever_managed: BTreeSet<StoreId>,
    /// store → real time it lost its working manager (while without one).
    pub(super) unmanaged_since: BTreeMap<StoreId, u64>,
    /// Every ended stretch of a store without a working manager: (since, until) µs.
    pub(super) outages: Vec<(u64, u64)>,
    /// When each lock grant reached its client (µs).
    pub(super) grant_times: Vec<u64>,
    /// The wall-clock steps the run seed drew, per device, taken or not
    /// (`--clock-steps off` measures the same windows without them): (device, at µs,
    /// jump µs).
    pub(super) drawn_steps: Vec<(u64, u64, i64)>,
}

impl World {
    /// The running device in the `Manager` state for `store` with the highest epoch.
    pub fn manager_of(&self, store: StoreId) -> Option<(DeviceId, Epoch)> {
        self.nodes
            .iter()
            .filter(|(id, _)| self.running(**id))
            .filter_map(|(id, n)| {
                n.device
                    .as_ref()
                    .and_then(|d| d.manager_view(store))
                    .filter(|m| m.state == MgrState::Manager)
                    .map(|m| (*id, m.epoch))
            })
            .max_by_key(|(_, e)| *e)
    }

    /// Which stores have a working manager, and why the others do not: a running device
    /// in the `Manager` state whose epoch is the highest epoch any running chunk of the
    /// store holds, with a quorum of its layout in the regular-lease state for that epoch
    /// under it.
    pub fn managed(&self) -> BTreeMap<StoreId, Result<(), String>> {
        // store → highest epoch among running chunks, and per chunk (state, epoch, mgr).
        let mut top: BTreeMap<StoreId, Epoch> = BTreeMap::new();
        let mut chunks = BTreeMap::new();
        let mut managers: BTreeMap<StoreId, Vec<(DeviceId, Epoch, Metadata)>> = BTreeMap::new();
        for (id, n) in &self.nodes {
            if !self.running(*id) {
                continue;
            }
            let dev = n.device.as_ref().expect("running");
            for v in dev.chunk_views() {
                let e = top.entry(v.store).or_default();
                *e = (*e).max(v.epoch);
                chunks.insert(v.id, (v.state, v.epoch, v.lease_mgr));
            }
            for m in dev.manager_views() {
                if m.state == MgrState::Manager {
                    managers
                        .entry(m.store)
                        .or_default()
                        .push((*id, m.epoch, m.metadata));
                }
            }
        }
        let mut out = BTreeMap::new();
        for s in 0..self.cfg.stores {
            let store = StoreId(s);
            let epoch = top.get(&store).copied().unwrap_or_default();
            let verdict = match managers
                .get(&store)
                .and_then(|ms| ms.iter().find(|m| m.1 == epoch))
            {
                None => Err(format!("no running device manages it at {epoch}")),
                Some((mgr, _, md)) => {
                    let leased = md
                        .chunks
                        .iter()
                        .filter(|c| {
                            chunks.get(*c).is_some_and(|(st, e, m)| {
                                *st == ChunkState::RegularLease && *e == epoch && *m == Some(*mgr)
                            })
                        })
                        .count();
                    if 2 * leased > md.chunks.len() {
                        Ok(())
                    } else {
                        Err(format!(
                            "{mgr} manages {epoch} but only {leased} of {} chunks are leased",
                            md.chunks.len()
                        ))
                    }
                }
            };
            out.insert(store, verdict);
        }
        out
    }

    /// Failover accounting (and, in the liveness phase, convergence): returns whether
    /// every store has a working manager.
    pub(super) fn sample(&mut self) -> bool {
        let skews: Vec<i64> = self
            .nodes
            .values()
            .map(|n| n.clock.skew_us(self.now))
            .collect();
        let spread = skews.iter().max().unwrap_or(&0) - skews.iter().min().unwrap_or(&0);
        assert!(
            spread.unsigned_abs() <= self.clock_drift.as_micros() as u64,
            "simulator bug: clocks {spread}us apart, more than δ_c"
        );
        let managed = self.managed();
        let mut all = true;
        for (store, verdict) in managed {
            if verdict.is_ok() {
                self.avail.ever_managed.insert(store);
                if let Some(since) = self.avail.unmanaged_since.remove(&store) {
                    self.report.max_failover_us = self.report.max_failover_us.max(self.now - since);
                    self.avail.outages.push((since, self.now));
                }
            } else {
                all = false;
                if self.avail.ever_managed.contains(&store) {
                    self.avail.unmanaged_since.entry(store).or_insert(self.now);
                }
            }
        }
        all
    }
}
