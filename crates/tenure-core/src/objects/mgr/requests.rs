//! Object requests at the store's manager: checked, turned into SafeTalk changes, answered
//! once durable (reads from complete chunks are in `reads`).

use super::*;
use crate::ctx::Ctx;
use crate::data::StoreOp;
use crate::error::ClientError;
use crate::ids::ClientId;
use crate::io::request::ObjectRequest;
use crate::io::request::Response;
use crate::layout::manager::StoreAccess;
use crate::lockctl::LockName;
use crate::objects::table::Access;
use crate::objects::{Bytes, ManifestState, ObjectError, ObjectOp, PartUpload, SmallPut, split};

impl ObjMgr {
    fn access(&self, st: &StoreAccess<'_>, ctx: &Ctx<'_>) -> Access {
        let s = &ctx.cfg.objects;
        let at = st.store_now(ctx.now);
        Access {
            at,
            prune_before: at.saturating_sub(s.prune_after),
            history: s.history,
        }
    }

    /// Sequence an object change; its result answers `client` if one is given.
    pub(super) fn submit_object(
        &mut self,
        st: &mut StoreAccess<'_>,
        ctx: &mut Ctx<'_>,
        op: ObjectOp,
        to: Option<(ClientId, u64)>,
    ) {
        let op = StoreOp::Object {
            op,
            acc: self.access(st, ctx),
        };
        match to {
            Some((client, req_id)) => st.submit(ctx, op, client, req_id),
            None => st.submit_op(ctx, op, Vec::new()),
        }
    }

    /// An object request, from a client of this manager (already known to be the
    /// manager with valid leases).
    pub(crate) fn request(
        &mut self,
        st: &mut StoreAccess<'_>,
        ctx: &mut Ctx<'_>,
        client: ClientId,
        req_id: u64,
        req: ObjectRequest,
    ) {
        st.host.hold = true;
        let r = self.object_request_inner(st, ctx, client, req_id, req);
        st.host.hold = false;
        if let Err(e) = r {
            reply(ctx, client, req_id, Err(e));
        }
        if st.host.inflight.is_none() {
            st.flush(ctx);
        }
    }

    fn object_request_inner(
        &mut self,
        st: &mut StoreAccess<'_>,
        ctx: &mut Ctx<'_>,
        client: ClientId,
        req_id: u64,
        req: ObjectRequest,
    ) -> Result<(), ClientError> {
        let store = st.store;
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
                    && !st.session_alive(s, now)
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
                    && let Some(m) = st.host.speculative.objects.by_request(&key, req)
                {
                    let (uuid, revision) = (m.uuid, m.revision);
                    if revision > 0 {
                        let r = Ok(Response::ObjectWritten { revision, uuid });
                        st.after_barrier(ctx, client, req_id, r);
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
                            self.submit_object(st, ctx, op, None);
                        }
                        let op = ObjectOp::Activate {
                            key,
                            uuid,
                            parts: None,
                            cond,
                        };
                        self.submit_object(st, ctx, op, to);
                        return Ok(());
                    }
                }
                if let Err(e) =
                    st.host
                        .speculative
                        .objects
                        .check(&key, &cond, &st.host.speculative.locks)
                {
                    // The speculative table holds changes not committed yet: a refusal
                    // judged on it leaves after a barrier, as a read does, so that no
                    // client learns of a change before it is acknowledged (found by
                    // `tenure chaos`, reordered peer links: a compare-and-set refused
                    // naming revision 1094 before the put making it was acknowledged, and
                    // a read after that refusal still answered 1088).
                    st.after_barrier(ctx, client, req_id, Err(e));
                    return Ok(());
                }
                let uuid = new_uuid(ctx);
                if data.len() <= ctx.cfg.objects.inline_max as usize && ctx.inline_values {
                    // One change, the value inline; copied out of the frame it arrived
                    // in, which it would otherwise keep alive (DESIGN, State at scale).
                    let op = ObjectOp::Put(SmallPut {
                        key,
                        uuid,
                        value: Bytes::copy_from_slice(&data),
                        owner: if ephemeral { writer.session } else { None },
                        request,
                        cond,
                    });
                    self.submit_object(st, ctx, op, to);
                    return Ok(());
                }
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
                self.submit_object(st, ctx, begin, None);
                for b in blocks {
                    let op = ObjectOp::Blocks {
                        key: key.clone(),
                        uuid,
                        part: None,
                        blocks: vec![b],
                    };
                    self.submit_object(st, ctx, op, None);
                }
                let op = ObjectOp::Activate {
                    key,
                    uuid,
                    parts: None,
                    cond,
                };
                self.submit_object(st, ctx, op, to);
            }
            ObjectRequest::Get { key } => {
                check_key(ctx, store, &key)?;
                let meta = if ctx.cfg.planted.objects_read_superseded {
                    self.superseded(st, &key)
                } else {
                    None
                };
                let committed = &st.host.read_tables(&ctx.cfg.planted).objects;
                if meta.is_none()
                    && let Some(r) = inline_object(committed, &key)
                {
                    st.answer_read(ctx, client, req_id, Ok(r));
                    return Ok(());
                }
                match meta.or_else(|| committed.meta(&key)) {
                    None => {
                        let r = Err(ObjectError::NoSuchObject.into());
                        st.answer_read(ctx, client, req_id, r);
                    }
                    Some(meta) => self.start_read(st, ctx, client, req_id, meta),
                }
            }
            ObjectRequest::Head { key } => {
                check_key(ctx, store, &key)?;
                let r = (st.host.read_tables(&ctx.cfg.planted).objects.meta(&key))
                    .map(Response::ObjectMeta)
                    .ok_or(ObjectError::NoSuchObject.into());
                st.answer_read(ctx, client, req_id, r);
            }
            ObjectRequest::List { prefix } => {
                LockName::parse_prefix(&prefix)
                    .map_err(|e| ClientError::InvalidName(e.to_string()))?;
                let t = &st.host.read_tables(&ctx.cfg.planted).objects;
                let r = Ok(Response::Objects {
                    revision: t.revision,
                    objects: t.list(&prefix),
                });
                st.answer_read(ctx, client, req_id, r);
            }
            ObjectRequest::Delete { key, writer, cond } => {
                check_key(ctx, store, &key)?;
                if let Some(s) = writer.session
                    && !st.session_alive(s, now)
                {
                    return Err(ClientError::SessionExpired);
                }
                let request = writer.request();
                if let Some(req) = request
                    && let Some(revision) = st.host.speculative.objects.deleted_by(&key, req)
                {
                    let r = Ok(Response::ObjectDeleted { revision });
                    st.after_barrier(ctx, client, req_id, r);
                    return Ok(());
                }
                let op = ObjectOp::Delete { key, request, cond };
                self.submit_object(st, ctx, op, to);
            }
            ObjectRequest::MultipartInitiate { key, writer } => {
                check_key(ctx, store, &key)?;
                let request = writer.request();
                if let Some(req) = request
                    && let Some(m) = st.host.speculative.objects.by_request(&key, req)
                {
                    let r = Ok(Response::UploadStarted { upload: m.uuid });
                    st.after_barrier(ctx, client, req_id, r);
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
                self.submit_object(st, ctx, op, to);
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
                let generation = match st
                    .host
                    .speculative
                    .objects
                    .keys
                    .get(key.as_str())
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
                    self.submit_object(st, ctx, op, to);
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
                    self.submit_object(st, ctx, op, if last { to } else { None });
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
                if let Some(m) = st
                    .host
                    .speculative
                    .objects
                    .keys
                    .get(key.as_str())
                    .and_then(|d| d.get(&upload))
                    && m.revision > 0
                {
                    let r = Ok(Response::ObjectWritten {
                        revision: m.revision,
                        uuid: upload,
                    });
                    st.after_barrier(ctx, client, req_id, r);
                    return Ok(());
                }
                let op = ObjectOp::Activate {
                    key,
                    uuid: upload,
                    parts: Some(parts),
                    cond,
                };
                self.submit_object(st, ctx, op, to);
            }
            ObjectRequest::MultipartAbort { key, upload } => {
                check_key(ctx, store, &key)?;
                match st
                    .host
                    .speculative
                    .objects
                    .keys
                    .get(key.as_str())
                    .and_then(|d| d.get(&upload))
                {
                    Some(m) if m.state == ManifestState::Writing => {
                        self.submit_object(st, ctx, ObjectOp::Abandon { key, uuid: upload }, to)
                    }
                    _ => return Err(ObjectError::NoSuchUpload(upload).into()),
                }
            }
            ObjectRequest::Watch {
                watch,
                prefix,
                after,
                values,
            } => {
                let ask = watches::Ask {
                    prefix,
                    after,
                    values,
                };
                self.watch(st, ctx, (client, req_id), watch, ask)?;
            }
            ObjectRequest::Poll {
                key,
                prefix,
                after,
                values,
                wait,
            } => {
                let ask = watches::Ask {
                    prefix,
                    after,
                    values,
                };
                self.poll(st, ctx, (client, req_id), (key, wait), ask)?;
            }
            ObjectRequest::Unwatch { watch } => self.unwatch(ctx, client, req_id, watch),
        }
        Ok(())
    }

    // ---- reads ---------------------------------------------------------------------
}
