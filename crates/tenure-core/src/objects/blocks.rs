//! A chunk's block store and its background repair (DESIGN §5).
//!
//! Block data reaches a chunk inside the SafeTalk change that records it
//! ([`super::ObjectOp::Blocks`]); the chunk hands the data to its block store (durably,
//! before it answers ACCEPTED) and keeps the change pending without it, so votes and
//! commits carry manifests, never blocks. After an epoch commits, a chunk compares its
//! blocks with the live blocks of the committed manifests: blocks nobody names any more
//! are swept, missing ones are copied from peer chunks (checked against the manifest's
//! checksum), and when nothing is missing the chunk tells the manager it is complete.

use super::msg::{BlockMsg, Requester};
use super::{BlockId, BlockInfo, Bytes, ObjectOp};
use crate::ctx::Ctx;
use crate::data::StoreOp;
use crate::ids::Version;
use crate::ids::{ChunkId, DeviceId, Epoch, StoreId};
use crate::io::persist::PersistOp;
use crate::msg::Msg;
use crate::time::Instant;
use std::collections::BTreeMap;

/// Most blocks asked for in one read.
pub const READ_BATCH: usize = 8;

/// A repair in progress.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Repair {
    epoch: Epoch,
    missing: BTreeMap<BlockId, BlockInfo>,
    peers: Vec<ChunkId>,
    next_peer: usize,
    /// The read outstanding: (peer, tag, give up at).
    asked: Option<(ChunkId, u64, Instant)>,
}

/// Keep a block in `kept` and persist it. The chunk keeps its own bytes: block data
/// arrives as a slice of the buffer it was received in (a client's gRPC frame holds many
/// small puts), and a kept slice keeps that whole buffer alive: 3.2 KB per 256-byte
/// object, measured. The copy is also what is persisted (the device's durable state
/// shares it).
fn keep(
    kept: &mut BTreeMap<BlockId, Bytes>,
    ctx: &mut Ctx<'_>,
    chunk: ChunkId,
    id: BlockId,
    data: &Bytes,
) {
    let data = Bytes::copy_from_slice(data);
    kept.insert(id, data.clone());
    ctx.persist(PersistOp::BlockPut { chunk, id, data });
}

/// One chunk's blocks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChunkBlocks {
    /// The data, by block.
    pub data: BTreeMap<BlockId, Bytes>,
    repair: Option<Repair>,
    /// The epoch this chunk was last complete in.
    complete: Option<Epoch>,
    tag: u64,
}

impl ChunkBlocks {
    /// A block store loaded from stable storage.
    pub fn new(data: BTreeMap<BlockId, Bytes>) -> ChunkBlocks {
        ChunkBlocks {
            data,
            ..Default::default()
        }
    }

    /// Whether the chunk has no repair to do for `epoch`.
    pub fn is_complete(&self, epoch: Epoch) -> bool {
        self.complete == Some(epoch) && self.repair.is_none()
    }

    /// Take the block data out of an accepted batch: store it durably, and return the
    /// changes without it (what the chunk keeps pending and votes).
    pub fn take_data(
        &mut self,
        ctx: &mut Ctx<'_>,
        chunk: ChunkId,
        ops: Vec<(Version, StoreOp)>,
    ) -> Vec<(Version, StoreOp)> {
        ops.into_iter()
            .map(|(v, op)| match op {
                // (An inline value is part of the table: its change keeps it.)
                StoreOp::Object { op, acc }
                    if matches!(op, ObjectOp::Blocks { .. }) && op.data_len() > 0 =>
                {
                    if let ObjectOp::Blocks { blocks, .. } = &op {
                        for b in blocks {
                            if let Some(d) = &b.data {
                                keep(&mut self.data, ctx, chunk, b.id, d);
                            }
                        }
                    }
                    (
                        v,
                        StoreOp::Object {
                            op: op.stripped(),
                            acc,
                        },
                    )
                }
                op => (v, op),
            })
            .collect()
    }

    /// After an epoch committed at this chunk: sweep blocks no live manifest names,
    /// then repair the missing ones from `peers` (or report complete to `mgr`).
    #[allow(clippy::too_many_arguments)]
    pub fn after_commit(
        &mut self,
        ctx: &mut Ctx<'_>,
        store: StoreId,
        chunk: ChunkId,
        epoch: Epoch,
        live: BTreeMap<BlockId, BlockInfo>,
        peers: Vec<ChunkId>,
        mgr: DeviceId,
    ) {
        let garbage: Vec<BlockId> = (self.data.keys())
            .filter(|b| !live.contains_key(b))
            .copied()
            .collect();
        if !garbage.is_empty() {
            for b in &garbage {
                self.data.remove(b);
            }
            ctx.persist(PersistOp::BlockDelete {
                chunk,
                ids: garbage,
            });
        }
        let missing: BTreeMap<BlockId, BlockInfo> = (live.into_iter())
            .filter(|(id, info)| self.data.get(id).is_none_or(|d| BlockInfo::of(d) != *info))
            .collect();
        self.complete = Some(epoch);
        self.repair = None;
        if missing.is_empty() {
            complete(ctx, store, chunk, epoch, mgr);
        } else {
            self.repair = Some(Repair {
                epoch,
                missing,
                peers: peers.into_iter().filter(|p| *p != chunk).collect(),
                next_peer: 0,
                asked: None,
            });
            self.ask(ctx, store, chunk);
        }
    }

    fn ask(&mut self, ctx: &mut Ctx<'_>, store: StoreId, chunk: ChunkId) {
        let Some(r) = self.repair.as_mut() else {
            return;
        };
        if r.peers.is_empty() {
            return;
        }
        let peer = r.peers[r.next_peer % r.peers.len()];
        r.next_peer += 1;
        self.tag += 1;
        let ids: Vec<BlockId> = r.missing.keys().take(READ_BATCH).copied().collect();
        r.asked = Some((peer, self.tag, ctx.now + ctx.cfg.timing.ack_timeout));
        ctx.send(
            peer.device,
            Msg::Blocks(BlockMsg::Read {
                store,
                chunk: peer,
                ids,
                tag: self.tag,
                reply_to: Requester::Chunk(chunk),
            }),
        );
    }

    /// A peer's answer to this chunk's repair read: keep the blocks whose checksum
    /// matches the manifest, durably; ask again for the rest.
    pub fn on_data(
        &mut self,
        ctx: &mut Ctx<'_>,
        store: StoreId,
        chunk: ChunkId,
        mgr: Option<DeviceId>,
        tag: u64,
        blocks: Vec<(BlockId, Option<Bytes>)>,
    ) {
        let Some(r) = self.repair.as_mut() else {
            return;
        };
        if r.asked.map(|a| a.1) != Some(tag) {
            return;
        }
        r.asked = None;
        for (id, data) in blocks {
            if let (Some(info), Some(d)) = (r.missing.get(&id), data)
                && BlockInfo::of(&d) == *info
            {
                r.missing.remove(&id);
                keep(&mut self.data, ctx, chunk, id, &d);
            }
        }
        if r.missing.is_empty() {
            let epoch = r.epoch;
            self.repair = None;
            if let Some(m) = mgr {
                complete(ctx, store, chunk, epoch, m);
            }
        } else {
            self.ask(ctx, store, chunk);
        }
    }

    /// Answer a read with the data held.
    #[allow(clippy::too_many_arguments)]
    pub fn on_read(
        &self,
        ctx: &mut Ctx<'_>,
        store: StoreId,
        chunk: ChunkId,
        from: DeviceId,
        ids: Vec<BlockId>,
        tag: u64,
        to: Requester,
    ) {
        let blocks = (ids.into_iter())
            .take(READ_BATCH)
            .map(|id| (id, self.data.get(&id).cloned()))
            .collect();
        ctx.send(
            from,
            Msg::Blocks(BlockMsg::Data {
                store,
                from: chunk,
                to,
                tag,
                blocks,
            }),
        );
    }

    /// Delete blocks durably, then answer.
    pub fn on_delete(
        &mut self,
        ctx: &mut Ctx<'_>,
        store: StoreId,
        chunk: ChunkId,
        from: DeviceId,
        ids: Vec<BlockId>,
        tag: u64,
    ) {
        let ids: Vec<BlockId> = ids
            .into_iter()
            .filter(|b| self.data.remove(b).is_some())
            .collect();
        if !ids.is_empty() {
            ctx.persist(PersistOp::BlockDelete { chunk, ids });
        }
        ctx.send(from, Msg::Blocks(BlockMsg::Deleted { store, chunk, tag }));
    }

    /// Answer a manager's probe if complete in its epoch.
    pub fn on_probe(
        &self,
        ctx: &mut Ctx<'_>,
        store: StoreId,
        chunk: ChunkId,
        from: DeviceId,
        epoch: Epoch,
    ) {
        if self.is_complete(epoch) {
            complete(ctx, store, chunk, epoch, from);
        }
    }

    /// The repair's next deadline.
    pub fn next_timeout(&self) -> Option<Instant> {
        self.repair.as_ref()?.asked.map(|a| a.2)
    }

    /// A repair read that was not answered in time: ask the next peer.
    pub fn on_tick(&mut self, ctx: &mut Ctx<'_>, store: StoreId, chunk: ChunkId) {
        if self
            .repair
            .as_ref()
            .and_then(|r| r.asked)
            .is_some_and(|a| a.2 <= ctx.now)
        {
            self.ask(ctx, store, chunk);
        }
    }
}

fn complete(ctx: &mut Ctx<'_>, store: StoreId, chunk: ChunkId, epoch: Epoch, mgr: DeviceId) {
    ctx.send(
        mgr,
        Msg::Blocks(BlockMsg::Complete {
            store,
            chunk,
            epoch,
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::Output;
    use crate::layout::test_support::Env;
    use crate::objects::table::Access;
    use crate::objects::{BlockWrite, Uuid};

    /// A chunk keeps a block's own bytes, not the buffer it came in: a small put arrives
    /// as a slice of a client's frame, and the slice would keep the whole frame alive.
    #[test]
    fn a_kept_block_does_not_hold_the_buffer_it_arrived_in() {
        let frame = Bytes::from(vec![5u8; 64 * 1024]);
        let data = frame.slice(1000..1256);
        let id = BlockId {
            upload: Uuid(9),
            ..Default::default()
        };
        let op = StoreOp::Object {
            op: ObjectOp::Blocks {
                key: "/k".into(),
                uuid: Uuid(9),
                part: None,
                blocks: vec![BlockWrite {
                    id,
                    info: BlockInfo::of(&data),
                    data: Some(data.clone()),
                }],
            },
            acc: Access {
                at: Instant(1),
                prune_before: Instant(0),
                history: 10,
            },
        };
        let mut env = Env::new(DeviceId(1));
        let mut blocks = ChunkBlocks::default();
        let chunk = ChunkId {
            device: DeviceId(1),
            serial: 0,
        };
        let left = blocks.take_data(
            &mut env.ctx(Instant(1)),
            chunk,
            vec![(Version::default(), op)],
        );
        assert_eq!(left.len(), 1, "the change stays, without its data");
        let kept = &blocks.data[&id];
        assert_eq!(kept, &data);
        let range = frame.as_ptr() as usize..frame.as_ptr() as usize + frame.len();
        assert!(
            !range.contains(&(kept.as_ptr() as usize)),
            "the kept block points into the frame it arrived in"
        );
        let persisted: Vec<&Bytes> = (env.out.iter())
            .filter_map(|o| match o {
                Output::Persist(PersistOp::BlockPut { data, .. }) => Some(data),
                _ => None,
            })
            .collect();
        assert_eq!(persisted.len(), 1);
        assert_eq!(
            persisted[0].as_ptr(),
            kept.as_ptr(),
            "what is persisted (and held by the device's durable state) is the kept copy"
        );
    }
}
