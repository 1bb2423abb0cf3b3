//! The object checkers' hooks in the running world: block deletions (checker 3), the
//! managers' collected manifests, and the lock clients' grants and releases (checker
//! 5).

use crate::world::World;
use std::collections::BTreeSet;
use tenure_core::lockctl::{FencingToken, LockMode};
use tenure_core::msg::Msg;
use tenure_core::objects::Uuid;
use tenure_core::objects::msg::BlockMsg;
use tenure_core::{ChunkId, DeviceId, StoreId};

impl World {
    /// A device sends a message: a collector's block deletion is checked against its
    /// own view of the store's active manifests.
    pub(in crate::world) fn obj_on_send(&mut self, d: DeviceId, msg: &Msg) {
        let Msg::Blocks(BlockMsg::Delete { store, ids, .. }) = msg else {
            return;
        };
        self.report.objects.blocks_deleted += ids.len() as u64;
        if !self.cfg.objects_watch_deletes {
            return;
        }
        let Some(t) = (self.nodes[&d].device.as_ref()).and_then(|dev| dev.managed_tables(*store))
        else {
            return;
        };
        let uploads: BTreeSet<Uuid> = ids.iter().map(|b| b.upload).collect();
        let blocks = ids.iter().copied().collect();
        let by = format!("the collector on {d}");
        (self.obj.check).blocks_deleted(
            *store,
            &uploads,
            &blocks,
            &t.objects,
            &by,
            self.since_start(),
        );
    }

    /// A chunk deleted blocks durably: checked against the store's working manager's
    /// active manifests.
    pub(in crate::world) fn obj_on_block_delete(
        &mut self,
        d: DeviceId,
        chunk: ChunkId,
        ids: &[tenure_core::objects::BlockId],
    ) {
        if !self.cfg.objects_watch_deletes {
            return;
        }
        let Some(store) = (self.nodes[&d].written.chunks.get(&chunk)).map(|r| r.store) else {
            return;
        };
        let Some((m, _)) = self.manager_of(store) else {
            return;
        };
        let Some(t) = (self.nodes[&m].device.as_ref()).and_then(|dev| dev.managed_tables(store))
        else {
            return;
        };
        let uploads: BTreeSet<Uuid> = ids.iter().map(|b| b.upload).collect();
        let blocks = ids.iter().copied().collect();
        let by = format!("{chunk} on {d}");
        (self.obj.check).blocks_deleted(
            store,
            &uploads,
            &blocks,
            &t.objects,
            &by,
            self.since_start(),
        );
    }

    /// Sampling: count manifests the managers have collected.
    pub(in crate::world) fn obj_sample(&mut self) {
        for n in self.nodes.values() {
            let Some(dev) = n.device.as_ref() else {
                continue;
            };
            for v in dev.manager_views() {
                let Some(t) = dev.managed_tables(v.store) else {
                    continue;
                };
                let t = &t.objects;
                for key in &t.attention {
                    for m in t
                        .keys
                        .get(key.as_str())
                        .into_iter()
                        .flat_map(|d| d.values())
                    {
                        if m.state == tenure_core::objects::ManifestState::Deleted {
                            self.obj.collected.insert((v.store, m.uuid));
                        }
                    }
                }
            }
        }
    }

    /// A lock client's grant reached it (checker 5: fenced writes).
    pub(in crate::world) fn obj_note_grant(
        &mut self,
        store: StoreId,
        name: &str,
        mode: LockMode,
        token: FencingToken,
    ) {
        self.obj
            .check
            .granted(store, name, token, mode, self.since_start());
    }

    /// A lock client's release was acknowledged (checker 5).
    pub(in crate::world) fn obj_note_release(
        &mut self,
        store: StoreId,
        name: &str,
        token: FencingToken,
    ) {
        self.obj
            .check
            .released(store, name, token, self.since_start());
    }
}
