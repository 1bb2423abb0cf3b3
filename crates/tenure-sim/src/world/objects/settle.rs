//! The end of a run's objects: once faults stop, the clients stop and the world runs
//! until the objects are quiet, then the final checks (histories, blocks on their
//! chunks, merge laws).

use super::{OBJ_SETTLE_CHECK_US, OBJ_SETTLE_US, watch_behind};
use crate::objects::ObjectViolation;
use crate::world::{EVENTS_MAX, World};
use std::collections::BTreeSet;
use tenure_core::objects::BlockInfo;
use tenure_core::{ChunkId, DeviceId, StoreId};

impl World {
    /// The stores the object clients use.
    fn obj_stores(&self) -> BTreeSet<StoreId> {
        self.obj.clients.iter().map(|c| c.store).collect()
    }

    /// Whether every store's objects are quiet: no client waiting, nothing to collect,
    /// every chunk complete, every watcher caught up.
    fn objects_quiet(&self) -> bool {
        if self.obj.clients.iter().any(|c| c.inflight.is_some()) {
            return false;
        }
        self.obj_stores().into_iter().all(|store| {
            let Some((m, _)) = self.manager_of(store) else {
                return false;
            };
            let dev = self.nodes[&m].device.as_ref().expect("running");
            let Some(t) = dev.managed_tables(store) else {
                return false;
            };
            let t = &t.objects;
            t.attention.is_empty()
                && self
                    .serving(store, m)
                    .is_subset(&dev.complete_chunks(store))
                && (self.obj.watchers.iter())
                    .filter(|w| w.store == store)
                    .all(|w| w.pending.is_none() && watch_behind(w, t).is_none())
        })
    }

    /// After faults stopped and every store has a manager: stop the clients, wait until
    /// the objects are quiet (at most [`OBJ_SETTLE_US`]), then run the end-of-run checks.
    pub(in crate::world) fn settle_objects(&mut self) {
        if self.obj.clients.is_empty() {
            return;
        }
        self.obj_quiet = true;
        let start = self.now;
        let until = start + OBJ_SETTLE_US;
        let mut next_look = self.now;
        while !self.failed() && self.report.events <= EVENTS_MAX {
            if self.now >= next_look {
                if self.objects_quiet() {
                    break;
                }
                next_look = self.now + OBJ_SETTLE_CHECK_US;
            }
            if self
                .queue
                .first_key_value()
                .is_none_or(|((t, _), _)| *t > until)
            {
                break;
            }
            self.step();
        }
        self.report.objects.settle_us = self.now - start;
        if self.failed() {
            return;
        }
        self.trace(|| "objects settled: end-of-run checks".to_string());
        self.objects_final_checks();
    }

    /// The end-of-run checks, store by store, on its working manager's tables.
    fn objects_final_checks(&mut self) {
        for store in self.obj_stores() {
            let Some((m, _)) = self.manager_of(store) else {
                continue;
            };
            let dev = self.nodes[&m].device.as_ref().expect("running");
            let (Some(t), Some(v)) = (dev.managed_tables(store), dev.manager_view(store)) else {
                continue;
            };
            let table = t.objects.clone();
            let chunks: Vec<ChunkId> = v.metadata.chunks.iter().copied().collect();
            let complete = dev.complete_chunks(store);
            let serving = self.serving(store, m);
            self.obj.check.final_history(store, &table);
            self.obj.check.collected(store, &table);
            self.check_blocks(store, &table, &chunks, &complete, &serving);
            self.check_merges(store, &table, &chunks);
            for (w, wa) in self.obj.watchers.iter().enumerate() {
                if wa.store != store {
                    continue;
                }
                if let Some(current) = watch_behind(wa, &table) {
                    self.obj
                        .check
                        .violations
                        .push(ObjectViolation::WatchBehind {
                            store,
                            watcher: w,
                            last: wa.last,
                            current,
                        });
                }
                if let Some(start) = wa.start {
                    let (prefix, last) = (wa.prefix.clone(), wa.last);
                    (self.obj.check).watch_complete(
                        store,
                        w,
                        &prefix,
                        start,
                        last,
                        &wa.seen,
                        &wa.skipped,
                        &table,
                    );
                }
            }
        }
        for (c, cl) in self.obj.clients.iter().enumerate() {
            if let Some(id) = cl.inflight {
                let why = (self.obj.reqs.get(&id))
                    .map(|r| format!("{:?} to {}", r.kind, cl.target))
                    .unwrap_or_default();
                (self.obj.check.violations).push(ObjectViolation::ClientStuck { client: c, why });
            }
        }
        self.report.objects.gc_manifests = self.obj.collected.len() as u64;
    }

    /// The chunks of `store`'s layout serving under its manager `m`: in the regular
    /// lease of the manager's epoch. (A chunk of the layout in a recovery lease is not
    /// in the epoch, so it repairs nothing until an epoch transition takes it back.)
    fn serving(&self, store: StoreId, m: DeviceId) -> BTreeSet<ChunkId> {
        let Some(v) = self.nodes[&m]
            .device
            .as_ref()
            .and_then(|d| d.manager_view(store))
        else {
            return BTreeSet::new();
        };
        (v.metadata.chunks.iter())
            .filter(|c| {
                (self.nodes.get(&c.device))
                    .and_then(|n| n.device.as_ref()?.chunk_view(**c))
                    .is_some_and(|cv| {
                        cv.state == tenure_core::layout::ChunkState::RegularLease
                            && cv.epoch == v.epoch
                    })
            })
            .copied()
            .collect()
    }

    /// Checker 2: every block of every active manifest on a quorum of the layout's
    /// chunks and on every complete chunk, with its checksum (durably: the simulated
    /// disks); repair has made every serving chunk complete (liveness).
    fn check_blocks(
        &mut self,
        store: StoreId,
        table: &tenure_core::objects::ObjectTable,
        chunks: &[ChunkId],
        complete: &BTreeSet<ChunkId>,
        serving: &BTreeSet<ChunkId>,
    ) {
        let mut incomplete = None;
        for (key, dict) in &table.keys {
            for m in dict.values() {
                if m.state != tenure_core::objects::ManifestState::Active {
                    continue;
                }
                for (id, info) in &m.blocks {
                    self.obj.check.counts.block_checks += 1;
                    let has = |c: &ChunkId| {
                        (self.nodes.get(&c.device))
                            .and_then(|n| n.disk.blocks.get(c))
                            .and_then(|b| b.get(id))
                            .is_some_and(|d| BlockInfo::of(d) == *info)
                    };
                    let holders = chunks.iter().filter(|c| has(c)).count();
                    let bad_complete = complete.iter().find(|c| !has(c));
                    let why = if 2 * holders <= chunks.len() {
                        Some(format!(
                            "block {} on {holders} of {} chunks",
                            id.index,
                            chunks.len()
                        ))
                    } else {
                        bad_complete
                            .map(|c| format!("block {} missing from complete {c}", id.index))
                    };
                    if let Some(why) = why {
                        self.obj.check.violations.push(ObjectViolation::BlockLost {
                            store,
                            key: key.to_string(),
                            uuid: m.uuid,
                            why,
                        });
                        return;
                    }
                    if incomplete.is_none()
                        && let Some(c) = serving.iter().find(|c| !has(c))
                    {
                        incomplete = Some(format!("{c} lacks block {} of {key}", id.index));
                    }
                }
            }
        }
        if let Some(why) = incomplete {
            (self.obj.check.violations).push(ObjectViolation::RepairIncomplete { store, why });
        }
    }

    /// The merge laws on the copies of each upload's manifest the layout's chunks hold.
    fn check_merges(
        &mut self,
        store: StoreId,
        table: &tenure_core::objects::ObjectTable,
        chunks: &[ChunkId],
    ) {
        let recs: Vec<_> = (chunks.iter())
            .filter_map(|c| self.nodes.get(&c.device)?.disk.chunks.get(c))
            .map(|r| r.data.table.objects.clone())
            .collect();
        for (key, dict) in &table.keys {
            for (uuid, m) in dict.iter() {
                let mut copies = vec![m];
                copies.extend(recs.iter().filter_map(|t| t.keys.get(key)?.get(uuid)));
                self.obj.check.merge_laws(store, key, &copies);
            }
        }
    }
}
