//! Garbage collection (seed 001 workflow step 4): collectors under deletion leases delete
//! the blocks of superseded and abandoned uploads, then retire their manifests.

use super::*;
use crate::ctx::Ctx;
use crate::ids::ChunkId;
use crate::io::observation::Observation;
use crate::layout::manager::StoreAccess;
use crate::msg::Msg;
use crate::objects::msg::BlockMsg;
use crate::objects::table::GcWork;
use crate::objects::{BlockId, DeletionLease, ObjectOp, Uuid};
use std::collections::BTreeSet;

impl ObjMgr {
    pub(super) fn spawn_collectors(&mut self, st: &mut StoreAccess<'_>, ctx: &mut Ctx<'_>) {
        if ctx.cfg.planted.objects_never_collect {
            return;
        }
        if ctx.cfg.planted.objects_collect_active {
            self.plant_collect_active(st, ctx);
        }
        let s = ctx.cfg.objects.clone();
        let now = ctx.now;
        // The manifests' times are store times (crate::time::StoreClock); the
        // collector's own tasks are timed on the local clock.
        let at = st.store_now(now);
        let work = (st.host.data.table.objects).gc_work(at, s.prune_after, s.writing_timeout);
        let me = (ctx.me(), st.epoch);
        let listed: BTreeSet<(String, Uuid)> = work.iter().map(work_id).collect();
        self.gc.retain(|k, _| listed.contains(k));
        for w in work {
            let id = work_id(&w);
            let stale = |t: Option<&GcTask>| t.is_none_or(|t| t.since + s.lease_timeout < now);
            match w {
                GcWork::Collect {
                    key,
                    uuid,
                    blocks,
                    lease,
                } => {
                    let mine = lease.is_some_and(|l| (l.holder, l.epoch) == me);
                    if mine {
                        let task = self.gc.get(&id);
                        match task.and_then(|t| t.deleting.as_ref()) {
                            Some(_) => {
                                // Still deleting: check in so nobody takes over.
                                if task.is_some_and(|t| t.since + s.checkin_interval <= now) {
                                    let op = ObjectOp::GcProgress {
                                        key,
                                        uuid,
                                        deleted: Vec::new(),
                                        lease: self.lease(st, ctx),
                                    };
                                    self.submit_object(st, ctx, op, None);
                                    if let Some(t) = self.gc.get_mut(&id) {
                                        t.since = now;
                                    }
                                }
                            }
                            None => self.start_deleting(st, ctx, id, blocks.into_iter().collect()),
                        }
                    } else if lease.is_none_or(|l| l.checked_in + s.lease_timeout < at)
                        && stale(self.gc.get(&id))
                    {
                        if lease.is_some() {
                            ctx.observe(Observation::GcLeaseTakeover { store: st.store });
                        }
                        let op = ObjectOp::GcLease {
                            key,
                            uuid,
                            lease: self.lease(st, ctx),
                        };
                        self.submit_gc(st, ctx, id, op, &|_| true);
                    }
                }
                // Finishing, abandoning and pruning are one change each, submitted
                // again only if the last one has not shown in the tables for a while.
                GcWork::Finish { key, uuid } => {
                    self.submit_gc(st, ctx, id, ObjectOp::GcDone { key, uuid }, &stale)
                }
                GcWork::Abandon { key, uuid } => {
                    self.submit_gc(st, ctx, id, ObjectOp::Abandon { key, uuid }, &stale)
                }
                GcWork::Prune { key } => {
                    self.submit_gc(st, ctx, id, ObjectOp::Prune { key }, &stale)
                }
            }
        }
    }

    /// Submit a collector's change and remember when, unless `stale` says the last one
    /// for this manifest is still recent.
    fn submit_gc(
        &mut self,
        st: &mut StoreAccess<'_>,
        ctx: &mut Ctx<'_>,
        id: (String, Uuid),
        op: ObjectOp,
        stale: &dyn Fn(Option<&GcTask>) -> bool,
    ) {
        if !stale(self.gc.get(&id)) {
            return;
        }
        self.submit_object(st, ctx, op, None);
        let task = GcTask {
            since: ctx.now,
            deleting: None,
        };
        self.gc.insert(id, task);
    }

    /// Planted bug `objects_collect_active`: delete the blocks of one active object.
    fn plant_collect_active(&mut self, st: &mut StoreAccess<'_>, ctx: &mut Ctx<'_>) {
        let t = &st.host.data.table.objects;
        let victim = (t.keys.keys()).find_map(|k| {
            let m = t.active(k)?;
            let id = (k.to_string(), m.uuid);
            (!m.blocks.is_empty() && !self.gc.contains_key(&id))
                .then(|| (id, m.blocks.iter().map(|(b, _)| *b).collect::<Vec<_>>()))
        });
        if let Some((id, ids)) = victim {
            self.start_deleting(st, ctx, id, ids);
        }
    }

    pub(super) fn lease(&self, st: &StoreAccess<'_>, ctx: &Ctx<'_>) -> DeletionLease {
        DeletionLease {
            checked_in: st.store_now(ctx.now),
            holder: ctx.me(),
            epoch: st.epoch,
        }
    }

    /// Delete blocks at every live chunk (idempotent: another collector doing the same
    /// is harmless).
    fn start_deleting(
        &mut self,
        st: &mut StoreAccess<'_>,
        ctx: &mut Ctx<'_>,
        id: (String, Uuid),
        ids: Vec<BlockId>,
    ) {
        self.tag += 1;
        let tag = self.tag;
        let live = st.live();
        for c in &live {
            ctx.send(
                c.device,
                Msg::Blocks(BlockMsg::Delete {
                    store: st.store,
                    chunk: *c,
                    ids: ids.clone(),
                    tag,
                }),
            );
        }
        self.gc.insert(
            id,
            GcTask {
                since: ctx.now,
                deleting: Some(Deleting {
                    tag,
                    ids,
                    waiting: live,
                    deadline: ctx.now + ctx.cfg.timing.ack_timeout,
                }),
            },
        );
    }

    pub(super) fn on_deleted(
        &mut self,
        st: &mut StoreAccess<'_>,
        ctx: &mut Ctx<'_>,
        chunk: ChunkId,
        tag: u64,
    ) {
        let Some(id) = (self.gc.iter())
            .find(|(_, t)| t.deleting.as_ref().is_some_and(|d| d.tag == tag))
            .map(|(k, _)| k.clone())
        else {
            return;
        };
        if let Some(d) = self.gc.get_mut(&id).and_then(|t| t.deleting.as_mut()) {
            d.waiting.remove(&chunk);
            if d.waiting.is_empty() {
                self.finish_deleting(st, ctx, id);
            }
        }
    }

    /// Chunks that did not answer a deletion in time: those no longer live (failed:
    /// they sweep the blocks when they next commit an epoch) are not waited for; live
    /// ones are asked again.
    pub(super) fn deletion_late(
        &mut self,
        st: &mut StoreAccess<'_>,
        ctx: &mut Ctx<'_>,
        id: (String, Uuid),
    ) {
        let live = st.live();
        let store = st.store;
        let Some(d) = self.gc.get_mut(&id).and_then(|t| t.deleting.as_mut()) else {
            return;
        };
        d.waiting.retain(|c| live.contains(c));
        if d.waiting.is_empty() {
            return self.finish_deleting(st, ctx, id);
        }
        d.deadline = ctx.now + ctx.cfg.timing.ack_timeout;
        for c in &d.waiting {
            ctx.send(
                c.device,
                Msg::Blocks(BlockMsg::Delete {
                    store,
                    chunk: *c,
                    ids: d.ids.clone(),
                    tag: d.tag,
                }),
            );
        }
    }

    /// The blocks are deleted at every live chunk that answered (one that did not is
    /// failed or will be, and sweeps them when it next commits an epoch): record the
    /// progress and finish.
    fn finish_deleting(&mut self, st: &mut StoreAccess<'_>, ctx: &mut Ctx<'_>, id: (String, Uuid)) {
        let Some(task) = self.gc.get_mut(&id) else {
            return;
        };
        let Some(d) = task.deleting.take() else {
            return;
        };
        task.since = ctx.now;
        let (key, uuid) = id;
        let op = ObjectOp::GcProgress {
            key: key.clone(),
            uuid,
            deleted: d.ids,
            lease: self.lease(st, ctx),
        };
        self.submit_object(st, ctx, op, None);
        self.submit_object(st, ctx, ObjectOp::GcDone { key, uuid }, None);
    }

    // ---- watches -----------------------------------------------------------------
}
