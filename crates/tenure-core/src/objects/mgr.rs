//! The manager's side of objects: uploads (a manifest in `writing`, the blocks, the
//! activation, each a SafeTalk change), linearizable reads from complete chunks,
//! collectors under deletion leases (seed 001 workflow step 4), and watches.

use super::blocks::READ_BATCH;
use super::msg::BlockMsg;
use super::msg::Requester;
use super::table::{Access, GcWork};
use super::{
    BlockId, Bytes, DeletionLease, ManifestState, ObjectError, ObjectMeta, ObjectOp, ObjectOutcome,
    PartUpload, Uuid, split,
};
use crate::ctx::Ctx;
use crate::data::StoreOp;
use crate::error::ClientError;
use crate::ids::{ChunkId, ClientId, DeviceId};
use crate::io::Output;
use crate::io::observation::Observation;
use crate::io::request::ObjectRequest;
use crate::io::request::Response;
use crate::layout::MgrState;
use crate::layout::manager::Manager;
use crate::lockctl::LockName;
use crate::msg::Msg;
use crate::time::Instant;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How often the manager asks chunks not known complete whether they are.
const PROBE_EVERY: Duration = Duration::from_millis(500);

/// The manager's volatile object state.
#[derive(Clone, Debug, Default)]
pub struct ObjMgr {
    /// Chunks known to hold every live block (reads are served from these).
    pub complete: BTreeSet<ChunkId>,
    probe_at: Instant,
    reads: BTreeMap<u64, PendingRead>,
    gc: BTreeMap<(String, Uuid), GcTask>,
    gc_at: Instant,
    watches: BTreeMap<(ClientId, u64), Watch>,
    /// The revision watches were last brought up to.
    watched: u64,
    /// Changes being submitted for one request: hold them until the last is queued, so
    /// they leave in one batch.
    pub(crate) hold: bool,
    tag: u64,
}

#[derive(Clone, Debug)]
struct PendingRead {
    client: ClientId,
    req_id: u64,
    meta: ObjectMeta,
    got: BTreeMap<BlockId, Bytes>,
    chunk: ChunkId,
    tried: BTreeSet<ChunkId>,
    deadline: Instant,
    restarted: bool,
}

#[derive(Clone, Debug)]
struct Watch {
    prefix: String,
    last: u64,
    /// Held until the change carrying its read barrier is confirmed: nothing is sent
    /// before the subscription's answer and its replay.
    held: Option<crate::ids::Version>,
    /// The `after` it was asked with (a retry asks the same).
    asked: Option<u64>,
}

#[derive(Clone, Debug)]
struct GcTask {
    since: Instant,
    deleting: Option<Deleting>,
}

#[derive(Clone, Debug)]
struct Deleting {
    tag: u64,
    ids: Vec<BlockId>,
    waiting: BTreeSet<ChunkId>,
    deadline: Instant,
}

fn reply(ctx: &mut Ctx<'_>, client: ClientId, req_id: u64, result: Result<Response, ClientError>) {
    ctx.out.push(Output::Reply {
        client,
        req_id,
        result,
    });
}

/// Check an object key: a path of the store, within the length limit.
fn check_key(ctx: &Ctx<'_>, store: crate::ids::StoreId, key: &str) -> Result<(), ClientError> {
    let limit = ctx.cfg.objects.max_key_len;
    if key.len() > limit {
        return Err(ClientError::InvalidName(format!(
            "key is {} bytes long (limit {limit})",
            key.len()
        )));
    }
    LockName::parse(key).map_err(|e| ClientError::InvalidName(e.to_string()))?;
    if crate::config::store_of(key, ctx.cfg.cluster.stores) != store {
        return Err(ClientError::InvalidName(format!(
            "{key} does not belong to store {store}"
        )));
    }
    Ok(())
}

fn check_size(len: usize, limit: u64) -> Result<(), ClientError> {
    if len as u64 > limit {
        return Err(ClientError::TooLarge {
            size: len as u64,
            limit,
        });
    }
    Ok(())
}

/// The answer to an object change, from what it did.
pub(crate) fn object_response(
    op: &StoreOp,
    r: Result<ObjectOutcome, ClientError>,
) -> Result<Response, ClientError> {
    let StoreOp::Object { op, .. } = op else {
        return Err(ClientError::Rejected("not an object change".into()));
    };
    Ok(match (r?, op) {
        (ObjectOutcome::Written { revision, uuid }, _) => {
            Response::ObjectWritten { revision, uuid }
        }
        (ObjectOutcome::Deleted { revision }, _) => Response::ObjectDeleted { revision },
        (ObjectOutcome::Begun, ObjectOp::Begin { uuid, .. }) => {
            Response::UploadStarted { upload: *uuid }
        }
        (ObjectOutcome::BlocksWritten, ObjectOp::Blocks { part: Some(p), .. }) => {
            Response::PartStored {
                part: p.number,
                checksum: p.checksum,
            }
        }
        (_, ObjectOp::Abandon { .. }) => Response::UploadAborted,
        _ => Response::Unwatched,
    })
}

impl Manager {
    fn access(&self, ctx: &Ctx<'_>) -> Access {
        let s = &ctx.cfg.objects;
        let at = self.store_now(ctx.now);
        Access {
            at,
            prune_before: at.saturating_sub(s.prune_after),
            history: s.history,
        }
    }

    /// Sequence an object change; its result answers `client` if one is given.
    fn submit_object(&mut self, ctx: &mut Ctx<'_>, op: ObjectOp, to: Option<(ClientId, u64)>) {
        let op = StoreOp::Object {
            op,
            acc: self.access(ctx),
        };
        match to {
            Some((client, req_id)) => self.submit(ctx, op, client, req_id),
            None => self.submit_op(ctx, op, Vec::new()),
        }
    }

    /// An object request, from a client of this manager (already known to be the
    /// manager with valid leases).
    pub(crate) fn object_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        client: ClientId,
        req_id: u64,
        req: ObjectRequest,
    ) {
        self.objects.hold = true;
        let r = self.object_request_inner(ctx, client, req_id, req);
        self.objects.hold = false;
        if let Err(e) = r {
            reply(ctx, client, req_id, Err(e));
        }
        if self.inflight.is_none() {
            self.flush(ctx);
        }
    }

    fn object_request_inner(
        &mut self,
        ctx: &mut Ctx<'_>,
        client: ClientId,
        req_id: u64,
        req: ObjectRequest,
    ) -> Result<(), ClientError> {
        let store = self.store;
        let now = ctx.now;
        let bs = ctx.cfg.objects.block_size;
        let to = Some((client, req_id));
        match req {
            ObjectRequest::Put {
                key,
                data,
                writer,
                mut cond,
                ephemeral,
            } => {
                if ctx.cfg.planted.objects_ignore_fence {
                    cond.fence = None;
                }
                check_key(ctx, store, &key)?;
                check_size(data.len(), ctx.cfg.objects.max_object_size)?;
                if let Some(s) = writer.session
                    && !self.liveness.alive(s, now)
                {
                    return Err(ClientError::SessionExpired);
                }
                if ephemeral && writer.session.is_none() {
                    return Err(ClientError::Rejected(
                        "an ephemeral object needs a session".into(),
                    ));
                }
                let request = writer.request();
                if let Some(req) = request
                    && let Some(m) = self.spec.objects.by_request(&key, req)
                {
                    let (uuid, revision) = (m.uuid, m.revision);
                    if revision > 0 {
                        let r = Ok(Response::ObjectWritten { revision, uuid });
                        self.after_barrier(ctx, client, req_id, r);
                        return Ok(());
                    }
                    if m.state == ManifestState::Writing {
                        // A retry of an upload a failover interrupted: write the blocks
                        // that are missing and activate it.
                        let blocks = split(uuid, 0, 0, &data, bs);
                        let same = blocks.len() == m.blocks.len()
                            && blocks
                                .iter()
                                .zip(&m.blocks)
                                .all(|(b, (id, i))| b.id == *id && b.info == *i);
                        if !same {
                            return Err(ClientError::Rejected(
                                "request id reused with different content".into(),
                            ));
                        }
                        let remaining = m.remaining_write.clone();
                        for b in blocks.into_iter().filter(|b| remaining.contains(&b.id)) {
                            let op = ObjectOp::Blocks {
                                key: key.clone(),
                                uuid,
                                part: None,
                                blocks: vec![b],
                            };
                            self.submit_object(ctx, op, None);
                        }
                        let op = ObjectOp::Activate {
                            key,
                            uuid,
                            parts: None,
                            cond,
                        };
                        self.submit_object(ctx, op, to);
                        return Ok(());
                    }
                }
                if let Err(e) = self.spec.objects.check(&key, &cond, &self.spec.locks) {
                    // The speculative table holds changes not committed yet: a refusal
                    // judged on it leaves after a barrier, as a read does, so that no
                    // client learns of a change before it is acknowledged (found by
                    // `tenure chaos`, reordered peer links: a compare-and-set refused
                    // naming revision 1094 before the put making it was acknowledged, and
                    // a read after that refusal still answered 1088).
                    self.after_barrier(ctx, client, req_id, Err(e));
                    return Ok(());
                }
                let uuid = new_uuid(ctx);
                let blocks = split(uuid, 0, 0, &data, bs);
                let begin = ObjectOp::Begin {
                    key: key.clone(),
                    uuid,
                    blocks: blocks.iter().map(|b| (b.id, b.info)).collect(),
                    multipart: false,
                    owner: if ephemeral { writer.session } else { None },
                    request,
                    cond: cond.clone(),
                };
                self.submit_object(ctx, begin, None);
                for b in blocks {
                    let op = ObjectOp::Blocks {
                        key: key.clone(),
                        uuid,
                        part: None,
                        blocks: vec![b],
                    };
                    self.submit_object(ctx, op, None);
                }
                let op = ObjectOp::Activate {
                    key,
                    uuid,
                    parts: None,
                    cond,
                };
                self.submit_object(ctx, op, to);
            }
            ObjectRequest::Get { key } => {
                check_key(ctx, store, &key)?;
                let meta = if ctx.cfg.planted.objects_read_superseded {
                    self.superseded(&key)
                } else {
                    None
                };
                match meta.or_else(|| self.data.table.objects.meta(&key)) {
                    None => {
                        let r = Err(ObjectError::NoSuchObject.into());
                        self.after_barrier(ctx, client, req_id, r);
                    }
                    Some(meta) => self.start_read(ctx, client, req_id, meta),
                }
            }
            ObjectRequest::Head { key } => {
                check_key(ctx, store, &key)?;
                let r = (self.data.table.objects.meta(&key))
                    .map(Response::ObjectMeta)
                    .ok_or(ObjectError::NoSuchObject.into());
                self.after_barrier(ctx, client, req_id, r);
            }
            ObjectRequest::List { prefix } => {
                LockName::parse_prefix(&prefix)
                    .map_err(|e| ClientError::InvalidName(e.to_string()))?;
                let t = &self.data.table.objects;
                let r = Ok(Response::Objects {
                    revision: t.revision,
                    objects: t.list(&prefix),
                });
                self.after_barrier(ctx, client, req_id, r);
            }
            ObjectRequest::Delete { key, writer, cond } => {
                check_key(ctx, store, &key)?;
                if let Some(s) = writer.session
                    && !self.liveness.alive(s, now)
                {
                    return Err(ClientError::SessionExpired);
                }
                let request = writer.request();
                if let Some(req) = request
                    && let Some(revision) = self.spec.objects.deleted_by(&key, req)
                {
                    let r = Ok(Response::ObjectDeleted { revision });
                    self.after_barrier(ctx, client, req_id, r);
                    return Ok(());
                }
                let op = ObjectOp::Delete { key, request, cond };
                self.submit_object(ctx, op, to);
            }
            ObjectRequest::MultipartInitiate { key, writer } => {
                check_key(ctx, store, &key)?;
                let request = writer.request();
                if let Some(req) = request
                    && let Some(m) = self.spec.objects.by_request(&key, req)
                {
                    let r = Ok(Response::UploadStarted { upload: m.uuid });
                    self.after_barrier(ctx, client, req_id, r);
                    return Ok(());
                }
                let op = ObjectOp::Begin {
                    key,
                    uuid: new_uuid(ctx),
                    blocks: Vec::new(),
                    multipart: true,
                    owner: None,
                    request,
                    cond: Default::default(),
                };
                self.submit_object(ctx, op, to);
            }
            ObjectRequest::MultipartPart {
                key,
                upload,
                part,
                data,
            } => {
                check_key(ctx, store, &key)?;
                check_size(data.len(), ctx.cfg.objects.max_object_size)?;
                if part == 0 {
                    return Err(ClientError::Rejected("part numbers start at 1".into()));
                }
                let generation = match self
                    .spec
                    .objects
                    .keys
                    .get(&key)
                    .and_then(|d| d.get(&upload))
                {
                    Some(m) if m.state == ManifestState::Writing => (m.props.multipart.as_ref())
                        .ok_or(ObjectError::NoSuchUpload(upload))?
                        .get(&part)
                        .map_or(1, |p| p.generation + 1),
                    _ => return Err(ObjectError::NoSuchUpload(upload).into()),
                };
                let blocks = split(upload, part, generation, &data, bs);
                let info = PartUpload {
                    number: part,
                    generation,
                    size: data.len() as u64,
                    checksum: crc32fast::hash(&data),
                    blocks: blocks.iter().map(|b| (b.id, b.info)).collect(),
                };
                let n = blocks.len();
                if n == 0 {
                    let op = ObjectOp::Blocks {
                        key,
                        uuid: upload,
                        part: Some(info),
                        blocks: Vec::new(),
                    };
                    self.submit_object(ctx, op, to);
                    return Ok(());
                }
                for (i, b) in blocks.into_iter().enumerate() {
                    let last = i + 1 == n;
                    let op = ObjectOp::Blocks {
                        key: key.clone(),
                        uuid: upload,
                        part: last.then(|| info.clone()),
                        blocks: vec![b],
                    };
                    self.submit_object(ctx, op, if last { to } else { None });
                }
            }
            ObjectRequest::MultipartComplete {
                key,
                upload,
                parts,
                writer: _,
                cond,
            } => {
                check_key(ctx, store, &key)?;
                if let Some(m) = self
                    .spec
                    .objects
                    .keys
                    .get(&key)
                    .and_then(|d| d.get(&upload))
                    && m.revision > 0
                {
                    let r = Ok(Response::ObjectWritten {
                        revision: m.revision,
                        uuid: upload,
                    });
                    self.after_barrier(ctx, client, req_id, r);
                    return Ok(());
                }
                let op = ObjectOp::Activate {
                    key,
                    uuid: upload,
                    parts: Some(parts),
                    cond,
                };
                self.submit_object(ctx, op, to);
            }
            ObjectRequest::MultipartAbort { key, upload } => {
                check_key(ctx, store, &key)?;
                match self
                    .spec
                    .objects
                    .keys
                    .get(&key)
                    .and_then(|d| d.get(&upload))
                {
                    Some(m) if m.state == ManifestState::Writing => {
                        self.submit_object(ctx, ObjectOp::Abandon { key, uuid: upload }, to)
                    }
                    _ => return Err(ObjectError::NoSuchUpload(upload).into()),
                }
            }
            ObjectRequest::Watch {
                watch,
                prefix,
                after,
            } => {
                LockName::parse_prefix(&prefix)
                    .map_err(|e| ClientError::InvalidName(e.to_string()))?;
                // A retried subscription (same watch id and request) is answered again;
                // the registration already made delivers everything after its revision.
                if let Some(w) = self.objects.watches.get(&(client, watch))
                    && w.prefix == prefix
                    && w.asked == after
                {
                    let revision = after.unwrap_or(w.last);
                    let r = Ok(Response::Watching { revision });
                    self.after_barrier(ctx, client, req_id, r);
                    return Ok(());
                }
                let asked = after;
                let t = &self.data.table.objects;
                let after = after.unwrap_or(t.revision);
                let changes = t.changes_after(&prefix, after)?;
                let current = t.revision.max(after);
                // The answer and the replay leave after a read barrier, as reads do: a
                // new manager's tables may hold changes durable on one chunk only until
                // the epoch's first batch is accepted everywhere (simulator seed 28: a
                // watcher was shown a put a regeneration had taken from one chunk's
                // unconfirmed ACCEPT; the manager failed before any chunk but its own
                // had the epoch's commit, and the next epoch rightly lost the put).
                self.after_barrier(
                    ctx,
                    client,
                    req_id,
                    Ok(Response::Watching { revision: after }),
                );
                if !changes.is_empty() {
                    self.with_barrier(Output::ObjectEvents {
                        client,
                        watch,
                        changes,
                    });
                }
                let held = self.barrier_version();
                self.objects.watches.insert(
                    (client, watch),
                    Watch {
                        prefix,
                        last: current,
                        held,
                        asked,
                    },
                );
            }
            ObjectRequest::Unwatch { watch } => {
                self.objects.watches.remove(&(client, watch));
                reply(ctx, client, req_id, Ok(Response::Unwatched));
            }
        }
        Ok(())
    }

    // ---- reads ---------------------------------------------------------------------

    fn start_read(&mut self, ctx: &mut Ctx<'_>, client: ClientId, req_id: u64, meta: ObjectMeta) {
        if meta.blocks.is_empty() {
            let r = Ok(Response::Object {
                meta,
                data: Bytes::new(),
            });
            return self.after_barrier(ctx, client, req_id, r);
        }
        let Some(chunk) = self.pick_chunk(ctx, &BTreeSet::new()) else {
            let store = self.store;
            return reply(ctx, client, req_id, Err(ClientError::Unavailable { store }));
        };
        self.objects.tag += 1;
        let tag = self.objects.tag;
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
        self.ask_blocks(ctx, tag, &read);
        self.objects.reads.insert(tag, read);
    }

    /// The key's previous content, if its manifest still names its blocks (planted bug
    /// `objects_read_superseded`).
    fn superseded(&self, key: &str) -> Option<ObjectMeta> {
        let t = &self.data.table.objects;
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
    fn pick_chunk(&self, ctx: &Ctx<'_>, tried: &BTreeSet<ChunkId>) -> Option<ChunkId> {
        let usable: Vec<ChunkId> = (self.objects.complete.iter())
            .filter(|c| !self.failed.contains(c) && self.metadata.contains(**c))
            .filter(|c| !tried.contains(c))
            .copied()
            .collect();
        (usable.iter().find(|c| c.device == ctx.me()))
            .or(usable.first())
            .copied()
    }

    fn ask_blocks(&self, ctx: &mut Ctx<'_>, tag: u64, read: &PendingRead) {
        let ids: Vec<BlockId> = (read.meta.blocks.iter())
            .map(|(id, _)| *id)
            .filter(|id| !read.got.contains_key(id))
            .take(READ_BATCH)
            .collect();
        ctx.send(
            read.chunk.device,
            Msg::Blocks(BlockMsg::Read {
                store: self.store,
                chunk: read.chunk,
                ids,
                tag,
                reply_to: Requester::Manager,
            }),
        );
    }

    fn on_read_data(
        &mut self,
        ctx: &mut Ctx<'_>,
        tag: u64,
        from: ChunkId,
        blocks: Vec<(BlockId, Option<Bytes>)>,
    ) {
        let Some(mut read) = self.objects.reads.remove(&tag) else {
            return;
        };
        if read.chunk != from {
            self.objects.reads.insert(tag, read);
            return;
        }
        let infos: BTreeMap<BlockId, super::BlockInfo> = read.meta.blocks.iter().copied().collect();
        let mut bad = false;
        for (id, data) in blocks {
            match data {
                Some(d) if infos.get(&id) == Some(&super::BlockInfo::of(&d)) => {
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
            return self.after_barrier(ctx, read.client, read.req_id, r);
        }
        if bad {
            read.tried.insert(from);
            return self.retry_read(ctx, tag, read);
        }
        read.deadline = ctx.now + ctx.cfg.timing.ack_timeout;
        self.ask_blocks(ctx, tag, &read);
        self.objects.reads.insert(tag, read);
    }

    /// The chunk did not have (good copies of) the blocks, or did not answer: try
    /// another complete chunk; when none is left, read the key again once (the object
    /// may have been replaced and collected meanwhile), then give up.
    fn retry_read(&mut self, ctx: &mut Ctx<'_>, tag: u64, mut read: PendingRead) {
        if let Some(c) = self.pick_chunk(ctx, &read.tried) {
            read.chunk = c;
            read.deadline = ctx.now + ctx.cfg.timing.ack_timeout;
            self.ask_blocks(ctx, tag, &read);
            self.objects.reads.insert(tag, read);
            return;
        }
        let current = self.data.table.objects.meta(&read.meta.key);
        match current {
            Some(m) if !read.restarted && m.uuid != read.meta.uuid => {
                read.meta = m;
                read.got.clear();
                read.tried.clear();
                read.restarted = true;
                self.retry_read(ctx, tag, read);
            }
            None if !read.restarted => {
                let r = Err(ObjectError::NoSuchObject.into());
                self.after_barrier(ctx, read.client, read.req_id, r);
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
    pub(crate) fn on_block_msg(&mut self, ctx: &mut Ctx<'_>, from: DeviceId, msg: BlockMsg) {
        match msg {
            BlockMsg::Data {
                from: chunk,
                tag,
                blocks,
                ..
            } if chunk.device == from => self.on_read_data(ctx, tag, chunk, blocks),
            BlockMsg::Deleted { chunk, tag, .. } if chunk.device == from => {
                self.on_deleted(ctx, chunk, tag)
            }
            BlockMsg::Complete { chunk, epoch, .. }
                if chunk.device == from
                    && self.state == MgrState::Manager
                    && epoch == self.epoch
                    && self.live().contains(&chunk) =>
            {
                self.objects.complete.insert(chunk);
            }
            _ => {}
        }
    }

    // ---- garbage collection (seed 001 workflow step 4) -----------------------------------

    fn spawn_collectors(&mut self, ctx: &mut Ctx<'_>) {
        if ctx.cfg.planted.objects_never_collect {
            return;
        }
        if ctx.cfg.planted.objects_collect_active {
            self.plant_collect_active(ctx);
        }
        let s = ctx.cfg.objects.clone();
        let now = ctx.now;
        // The manifests' times are store times (crate::time::StoreClock); the
        // collector's own tasks are timed on the local clock.
        let at = self.store_now(now);
        let work = (self.data.table.objects).gc_work(at, s.prune_after, s.writing_timeout);
        let me = (ctx.me(), self.epoch);
        let listed: BTreeSet<(String, Uuid)> = work.iter().map(work_id).collect();
        self.objects.gc.retain(|k, _| listed.contains(k));
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
                        let task = self.objects.gc.get(&id);
                        match task.and_then(|t| t.deleting.as_ref()) {
                            Some(_) => {
                                // Still deleting: check in so nobody takes over.
                                if task.is_some_and(|t| t.since + s.checkin_interval <= now) {
                                    let op = ObjectOp::GcProgress {
                                        key,
                                        uuid,
                                        deleted: Vec::new(),
                                        lease: self.lease(ctx),
                                    };
                                    self.submit_object(ctx, op, None);
                                    if let Some(t) = self.objects.gc.get_mut(&id) {
                                        t.since = now;
                                    }
                                }
                            }
                            None => self.start_deleting(ctx, id, blocks.into_iter().collect()),
                        }
                    } else if lease.is_none_or(|l| l.checked_in + s.lease_timeout < at)
                        && stale(self.objects.gc.get(&id))
                    {
                        if lease.is_some() {
                            ctx.observe(Observation::GcLeaseTakeover { store: self.store });
                        }
                        let op = ObjectOp::GcLease {
                            key,
                            uuid,
                            lease: self.lease(ctx),
                        };
                        self.submit_gc(ctx, id, op, &|_| true);
                    }
                }
                // Finishing, abandoning and pruning are one change each, submitted
                // again only if the last one has not shown in the tables for a while.
                GcWork::Finish { key, uuid } => {
                    self.submit_gc(ctx, id, ObjectOp::GcDone { key, uuid }, &stale)
                }
                GcWork::Abandon { key, uuid } => {
                    self.submit_gc(ctx, id, ObjectOp::Abandon { key, uuid }, &stale)
                }
                GcWork::Prune { key } => self.submit_gc(ctx, id, ObjectOp::Prune { key }, &stale),
            }
        }
    }

    /// Submit a collector's change and remember when, unless `stale` says the last one
    /// for this manifest is still recent.
    fn submit_gc(
        &mut self,
        ctx: &mut Ctx<'_>,
        id: (String, Uuid),
        op: ObjectOp,
        stale: &dyn Fn(Option<&GcTask>) -> bool,
    ) {
        if !stale(self.objects.gc.get(&id)) {
            return;
        }
        self.submit_object(ctx, op, None);
        let task = GcTask {
            since: ctx.now,
            deleting: None,
        };
        self.objects.gc.insert(id, task);
    }

    /// Planted bug `objects_collect_active`: delete the blocks of one active object.
    fn plant_collect_active(&mut self, ctx: &mut Ctx<'_>) {
        let t = &self.data.table.objects;
        let victim = (t.keys.keys()).find_map(|k| {
            let m = t.active(k)?;
            let id = (k.clone(), m.uuid);
            (!m.blocks.is_empty() && !self.objects.gc.contains_key(&id))
                .then(|| (id, m.blocks.iter().map(|(b, _)| *b).collect::<Vec<_>>()))
        });
        if let Some((id, ids)) = victim {
            self.start_deleting(ctx, id, ids);
        }
    }

    fn lease(&self, ctx: &Ctx<'_>) -> DeletionLease {
        DeletionLease {
            checked_in: self.store_now(ctx.now),
            holder: ctx.me(),
            epoch: self.epoch,
        }
    }

    /// Delete blocks at every live chunk (idempotent: another collector doing the same
    /// is harmless).
    fn start_deleting(&mut self, ctx: &mut Ctx<'_>, id: (String, Uuid), ids: Vec<BlockId>) {
        self.objects.tag += 1;
        let tag = self.objects.tag;
        let live = self.live();
        for c in &live {
            ctx.send(
                c.device,
                Msg::Blocks(BlockMsg::Delete {
                    store: self.store,
                    chunk: *c,
                    ids: ids.clone(),
                    tag,
                }),
            );
        }
        self.objects.gc.insert(
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

    fn on_deleted(&mut self, ctx: &mut Ctx<'_>, chunk: ChunkId, tag: u64) {
        let Some(id) = (self.objects.gc.iter())
            .find(|(_, t)| t.deleting.as_ref().is_some_and(|d| d.tag == tag))
            .map(|(k, _)| k.clone())
        else {
            return;
        };
        if let Some(d) = self
            .objects
            .gc
            .get_mut(&id)
            .and_then(|t| t.deleting.as_mut())
        {
            d.waiting.remove(&chunk);
            if d.waiting.is_empty() {
                self.finish_deleting(ctx, id);
            }
        }
    }

    /// Chunks that did not answer a deletion in time: those no longer live (failed:
    /// they sweep the blocks when they next commit an epoch) are not waited for; live
    /// ones are asked again.
    fn deletion_late(&mut self, ctx: &mut Ctx<'_>, id: (String, Uuid)) {
        let live = self.live();
        let store = self.store;
        let Some(d) = self
            .objects
            .gc
            .get_mut(&id)
            .and_then(|t| t.deleting.as_mut())
        else {
            return;
        };
        d.waiting.retain(|c| live.contains(c));
        if d.waiting.is_empty() {
            return self.finish_deleting(ctx, id);
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
    fn finish_deleting(&mut self, ctx: &mut Ctx<'_>, id: (String, Uuid)) {
        let Some(task) = self.objects.gc.get_mut(&id) else {
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
            lease: self.lease(ctx),
        };
        self.submit_object(ctx, op, None);
        self.submit_object(ctx, ObjectOp::GcDone { key, uuid }, None);
    }

    // ---- watches -----------------------------------------------------------------

    /// Changes were applied: deliver them to the watches, in revision order.
    pub(crate) fn objects_applied(&mut self, ctx: &mut Ctx<'_>) {
        let t = &self.data.table.objects;
        let confirmed = self.data.confirmed;
        let changed = t.revision != self.objects.watched;
        self.objects.watched = t.revision;
        let drop = ctx.cfg.planted.objects_watch_drop;
        let mut ended = Vec::new();
        for ((client, watch), w) in self.objects.watches.iter_mut() {
            if w.held.is_some_and(|v| v > confirmed) {
                continue;
            }
            // Released now: it missed what earlier batches changed.
            let released = w.held.take().is_some();
            if !changed && !released {
                continue;
            }
            match t.changes_after(&w.prefix, w.last) {
                Ok(mut changes) => {
                    if drop {
                        changes.retain(|c| c.revision % 2 == 1);
                    }
                    w.last = t.revision;
                    if !changes.is_empty() {
                        ctx.out.push(Output::ObjectEvents {
                            client: *client,
                            watch: *watch,
                            changes,
                        });
                    }
                }
                Err(e) => {
                    ended.push((*client, *watch));
                    ctx.out.push(Output::WatchEnded {
                        client: *client,
                        watch: *watch,
                        reason: e.into(),
                    });
                }
            }
        }
        for k in ended {
            self.objects.watches.remove(&k);
        }
    }

    /// This role stops managing: watches end with a redirect (the client resumes at the
    /// new manager from its last revision), reads in progress fail.
    pub(crate) fn objects_stop(&mut self, ctx: &mut Ctx<'_>) {
        let hint = self.forwarding;
        for (client, watch) in std::mem::take(&mut self.objects.watches).into_keys() {
            ctx.out.push(Output::WatchEnded {
                client,
                watch,
                reason: ClientError::NotManager { hint },
            });
        }
        let store = self.store;
        for r in std::mem::take(&mut self.objects.reads).into_values() {
            reply(
                ctx,
                r.client,
                r.req_id,
                Err(ClientError::Unavailable { store }),
            );
        }
        self.objects.gc.clear();
    }

    /// A new epoch began under this manager: completeness is learnt again.
    pub(crate) fn objects_enter(&mut self, ctx: &Ctx<'_>) {
        self.objects.complete.clear();
        self.objects.probe_at = ctx.now;
        self.objects.watched = self.data.table.objects.revision;
    }

    // ---- timers ------------------------------------------------------------------

    /// Earliest object timer.
    pub(crate) fn objects_next_timeout(&self) -> Option<Instant> {
        use crate::time::earliest;
        if self.state != MgrState::Manager {
            return (!self.objects.watches.is_empty() || !self.objects.reads.is_empty())
                .then_some(Instant(0));
        }
        let mut t = self.objects.reads.values().map(|r| r.deadline).min();
        let gc_wait = self.objects.gc.values().filter_map(|g| g.deleting.as_ref());
        t = earliest(t, gc_wait.map(|d| d.deadline).min());
        if self
            .live()
            .iter()
            .any(|c| !self.objects.complete.contains(c))
        {
            t = earliest(t, Some(self.objects.probe_at));
        }
        if !self.data.table.objects.attention.is_empty() {
            t = earliest(t, Some(self.objects.gc_at));
        }
        t
    }

    /// Fire due object timers: read timeouts, deletions not answered, completeness
    /// probes, and the collectors' spawn step.
    pub(crate) fn objects_tick(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        if self.state != MgrState::Manager {
            if !self.objects.watches.is_empty() || !self.objects.reads.is_empty() {
                self.objects_stop(ctx);
            }
            return;
        }
        let due: Vec<u64> = (self.objects.reads.iter())
            .filter(|(_, r)| r.deadline <= now)
            .map(|(t, _)| *t)
            .collect();
        for tag in due {
            if let Some(mut r) = self.objects.reads.remove(&tag) {
                r.tried.insert(r.chunk);
                self.retry_read(ctx, tag, r);
            }
        }
        let late: Vec<(String, Uuid)> = (self.objects.gc.iter())
            .filter(|(_, t)| t.deleting.as_ref().is_some_and(|d| d.deadline <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for id in late {
            self.deletion_late(ctx, id);
        }
        if self.objects.probe_at <= now {
            self.objects.probe_at = now + PROBE_EVERY;
            for c in self.live() {
                if !self.objects.complete.contains(&c) {
                    ctx.send(
                        c.device,
                        Msg::Blocks(BlockMsg::Probe {
                            store: self.store,
                            chunk: c,
                            epoch: self.epoch,
                        }),
                    );
                }
            }
        }
        if self.objects.gc_at <= now && self.leases_valid(ctx) {
            let every = (ctx.cfg.objects.checkin_interval / 2).max(Duration::from_millis(10));
            self.objects.gc_at = now + every;
            self.spawn_collectors(ctx);
        }
    }
}

fn work_id(w: &GcWork) -> (String, Uuid) {
    match w {
        GcWork::Collect { key, uuid, .. }
        | GcWork::Finish { key, uuid }
        | GcWork::Abandon { key, uuid } => (key.clone(), *uuid),
        GcWork::Prune { key } => (key.clone(), Uuid(0)),
    }
}

/// A new upload id, time-ordered like a version 7 UUID: the device's clock (µs) in the
/// high half, the seeded generator's draw in the low half. A device restarted with the
/// same configured seed (`rng_seed`) draws the same numbers again; the clock has moved
/// on, so its ids do not repeat the ones its previous life gave.
fn new_uuid(ctx: &mut Ctx<'_>) -> Uuid {
    Uuid(((ctx.now.0 as u128) << 64) | ctx.rng.next_u64() as u128)
}

fn assemble(read: &PendingRead) -> Bytes {
    if let [(id, _)] = read.meta.blocks.as_slice() {
        return read.got[id].clone();
    }
    let mut v = Vec::with_capacity(read.meta.size as usize);
    for (id, _) in &read.meta.blocks {
        v.extend_from_slice(&read.got[id]);
    }
    Bytes::from(v)
}

#[cfg(test)]
mod uuid_tests {
    use super::*;
    use crate::config::{ClusterConfig, DeviceConfig};
    use crate::ids::DeviceId;
    use crate::rng::Rng;
    use std::collections::BTreeMap;

    fn ids(now: Instant, seed: u64) -> Vec<Uuid> {
        let cfg = DeviceConfig::new(DeviceId(1), ClusterConfig::new(3, 1, 3));
        let (mut rng, mut out) = (Rng::new(seed), Vec::new());
        let (heard, hints, epochs) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        let mut ctx = Ctx {
            now,
            cfg: &cfg,
            rng: &mut rng,
            out: &mut out,
            heard: &heard,
            hints: &hints,
            epochs: &epochs,
        };
        (0..3).map(|_| new_uuid(&mut ctx)).collect()
    }

    /// Seed 001 keys manifests by upload id: a device restarted with the same configured
    /// seed must not give an id its previous life gave (found by `tenure chaos` before its
    /// devices were seeded anew at each start).
    #[test]
    fn upload_ids_of_a_restart_with_the_same_seed_do_not_repeat() {
        let first = ids(Instant(5_000_000), 7);
        let again = ids(Instant(9_000_000), 7);
        assert!(
            first.iter().all(|u| !again.contains(u)),
            "{first:?} {again:?}"
        );
        let distinct: std::collections::BTreeSet<_> = first.iter().collect();
        assert_eq!(distinct.len(), 3, "ids drawn at the same instant differ");
    }
}
