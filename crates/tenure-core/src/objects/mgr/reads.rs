//! Linearizable object reads: the manifest from the committed tables, the blocks from a
//! complete chunk, retried on another when one does not answer.

use super::*;
use crate::ctx::Ctx;
use crate::error::ClientError;
use crate::ids::{ChunkId, ClientId, DeviceId};
use crate::io::request::Response;
use crate::layout::MgrState;
use crate::layout::manager::StoreAccess;
use crate::msg::Msg;
use crate::objects::blocks::READ_BATCH;
use crate::objects::msg::BlockMsg;
use crate::objects::msg::Requester;
use crate::objects::{BlockId, Bytes, ManifestState, ObjectError, ObjectMeta};
use std::collections::{BTreeMap, BTreeSet};

impl ObjMgr {
    pub(super) fn start_read(
        &mut self,
        st: &mut StoreAccess<'_>,
        ctx: &mut Ctx<'_>,
        client: ClientId,
        req_id: u64,
        meta: ObjectMeta,
    ) {
        if meta.blocks.is_empty() {
            let r = Ok(Response::Object {
                meta,
                data: Bytes::new(),
            });
            return st.answer_read(ctx, client, req_id, r);
        }
        let Some(chunk) = self.pick_chunk(st, ctx, &BTreeSet::new()) else {
            let store = st.store;
            return reply(ctx, client, req_id, Err(ClientError::Unavailable { store }));
        };
        self.tag += 1;
        let tag = self.tag;
        let read = PendingRead {
            client,
            req_id,
            meta,
            got: BTreeMap::new(),
            chunk,
            tried: BTreeSet::new(),
            deadline: ctx.now + ctx.cfg.timing.ack_timeout,
            restarted: false,
        };
        self.ask_blocks(st, ctx, tag, &read);
        self.reads.insert(tag, read);
    }

    /// The key's previous content, if its manifest still names its blocks (planted bug
    /// `objects_read_superseded`).
    pub(super) fn superseded(&self, st: &StoreAccess<'_>, key: &str) -> Option<ObjectMeta> {
        let t = &st.host.data.table.objects;
        let current = t.active(key)?.revision;
        let m = (t.keys.get(key)?.values())
            .filter(|m| m.revision > 0 && m.revision < current)
            .filter(|m| m.state == ManifestState::PendingDelete && m.lease.is_none())
            .max_by_key(|m| m.revision)?;
        Some(ObjectMeta {
            key: key.to_string(),
            revision: m.revision,
            uuid: m.uuid,
            size: m.size,
            checksum: m.checksum,
            owner: m.owner,
            blocks: m.blocks.clone(),
        })
    }

    /// A complete live chunk not yet tried, this device's own first.
    fn pick_chunk(
        &self,
        st: &StoreAccess<'_>,
        ctx: &Ctx<'_>,
        tried: &BTreeSet<ChunkId>,
    ) -> Option<ChunkId> {
        let usable: Vec<ChunkId> = (self.complete.iter())
            .filter(|c| !st.failed.contains(c) && st.metadata.contains(**c))
            .filter(|c| !tried.contains(c))
            .copied()
            .collect();
        (usable.iter().find(|c| c.device == ctx.me()))
            .or(usable.first())
            .copied()
    }

    fn ask_blocks(&self, st: &StoreAccess<'_>, ctx: &mut Ctx<'_>, tag: u64, read: &PendingRead) {
        let ids: Vec<BlockId> = (read.meta.blocks.iter())
            .map(|(id, _)| *id)
            .filter(|id| !read.got.contains_key(id))
            .take(READ_BATCH)
            .collect();
        ctx.send(
            read.chunk.device,
            Msg::Blocks(BlockMsg::Read {
                store: st.store,
                chunk: read.chunk,
                ids,
                tag,
                reply_to: Requester::Manager,
            }),
        );
    }

    fn on_read_data(
        &mut self,
        st: &mut StoreAccess<'_>,
        ctx: &mut Ctx<'_>,
        tag: u64,
        from: ChunkId,
        blocks: Vec<(BlockId, Option<Bytes>)>,
    ) {
        let Some(mut read) = self.reads.remove(&tag) else {
            return;
        };
        if read.chunk != from {
            self.reads.insert(tag, read);
            return;
        }
        let infos: BTreeMap<BlockId, crate::objects::BlockInfo> =
            read.meta.blocks.iter().copied().collect();
        let mut bad = false;
        for (id, data) in blocks {
            match data {
                Some(d) if infos.get(&id) == Some(&crate::objects::BlockInfo::of(&d)) => {
                    read.got.insert(id, d);
                }
                _ => bad = true,
            }
        }
        if read.got.len() == read.meta.blocks.len() {
            let data = assemble(&read);
            let r = Ok(Response::Object {
                meta: read.meta,
                data,
            });
            return st.after_barrier(ctx, read.client, read.req_id, r);
        }
        if bad {
            read.tried.insert(from);
            return self.retry_read(st, ctx, tag, read);
        }
        read.deadline = ctx.now + ctx.cfg.timing.ack_timeout;
        self.ask_blocks(st, ctx, tag, &read);
        self.reads.insert(tag, read);
    }

    /// The chunk did not have (good copies of) the blocks, or did not answer: try
    /// another complete chunk; when none is left, read the key again once (the object
    /// may have been replaced and collected meanwhile), then give up.
    pub(super) fn retry_read(
        &mut self,
        st: &mut StoreAccess<'_>,
        ctx: &mut Ctx<'_>,
        tag: u64,
        mut read: PendingRead,
    ) {
        if let Some(c) = self.pick_chunk(st, ctx, &read.tried) {
            read.chunk = c;
            read.deadline = ctx.now + ctx.cfg.timing.ack_timeout;
            self.ask_blocks(st, ctx, tag, &read);
            self.reads.insert(tag, read);
            return;
        }
        let current = st.host.data.table.objects.meta(&read.meta.key);
        match current {
            Some(m) if !read.restarted && m.uuid != read.meta.uuid => {
                // The key was replaced since: an inline value is answered from the
                // committed table, never assembled from (no) blocks.
                let t = &st.host.data.table.objects;
                if let Some(r) = inline_object(t, &read.meta.key) {
                    return st.after_barrier(ctx, read.client, read.req_id, Ok(r));
                }
                read.meta = m;
                read.got.clear();
                read.tried.clear();
                read.restarted = true;
                self.retry_read(st, ctx, tag, read);
            }
            None if !read.restarted => {
                let r = Err(ObjectError::NoSuchObject.into());
                st.after_barrier(ctx, read.client, read.req_id, r);
            }
            _ => reply(
                ctx,
                read.client,
                read.req_id,
                Err(ObjectError::DataUnavailable.into()),
            ),
        }
    }

    // ---- block messages ---------------------------------------------------------------

    /// Block traffic addressed to this manager role.
    pub(crate) fn on_block_msg(
        &mut self,
        st: &mut StoreAccess<'_>,
        ctx: &mut Ctx<'_>,
        from: DeviceId,
        msg: BlockMsg,
    ) {
        match msg {
            BlockMsg::Data {
                from: chunk,
                tag,
                blocks,
                ..
            } if chunk.device == from => self.on_read_data(st, ctx, tag, chunk, blocks),
            BlockMsg::Deleted { chunk, tag, .. } if chunk.device == from => {
                self.on_deleted(st, ctx, chunk, tag)
            }
            BlockMsg::Complete { chunk, epoch, .. }
                if chunk.device == from
                    && st.state == MgrState::Manager
                    && epoch == st.epoch
                    && st.live().contains(&chunk) =>
            {
                self.complete.insert(chunk);
            }
            _ => {}
        }
    }

    // ---- garbage collection (seed 001 workflow step 4) -----------------------------------
}

/// The answer to a get of `key` when its active content is an inline value, which the
/// committed table holds whole: no chunk is read.
pub(super) fn inline_object(t: &crate::objects::table::ObjectTable, key: &str) -> Option<Response> {
    let data = t.active(key)?.value.clone()?;
    let meta = t.meta(key)?;
    Some(Response::Object { meta, data })
}
