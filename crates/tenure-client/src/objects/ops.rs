//! The calls of an [`Objects`] handle: get, put (whole or in slices), multipart uploads,
//! delete and list.

use super::{
    Condition, Listing, Multipart, Object, ObjectInfo, Objects, PUT_LIMIT, Progress, PutOptions,
    UPLOAD_SLICE, Written, conditions, unpack,
};
use crate::locks::LockGuard;
use crate::proto;
use crate::{Bounds, Error, Result};
use futures::StreamExt as _;
use prost::bytes::Bytes;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

impl Objects {
    /// The store of a key (its first path segment's).
    pub async fn store_of(&self, key: &str) -> Result<u32> {
        self.client.store_of(key).await
    }

    /// Bounds of one object request of about `size` bytes: the client's request timeout
    /// and a second more per MiB for one attempt (each block is a replicated durable
    /// write), within the retry deadline plus one attempt.
    fn bounds(&self, size: usize) -> Bounds {
        let o = &self.client.inner.opts;
        let per_call = o.request_timeout + Duration::from_secs(size.div_ceil(1 << 20) as u64);
        Bounds {
            per_call,
            deadline: Some(Instant::now() + o.retry_deadline + per_call),
            max_attempts: Some(o.max_attempts),
        }
    }

    /// The client's session (its home store and id; a write in another store runs
    /// under its child there) and a fresh request id: every attempt of one write carries
    /// both, so the store recognises a retry.
    async fn writer(&self, store: u32) -> Result<(proto::SessionRef, u64)> {
        let session = self.client.session(store).await?;
        let home = proto::SessionRef {
            store: session.store,
            id: session.id,
        };
        Ok((home, self.client.next_request_id()))
    }

    /// Write `data` under `key`.
    pub async fn put(&self, key: &str, data: impl Into<Bytes>) -> Result<Written> {
        self.put_with(key, data, PutOptions::default()).await
    }

    /// Write `data` under `key` if `cond` holds (checked atomically with the write).
    pub async fn put_if(
        &self,
        key: &str,
        data: impl Into<Bytes>,
        cond: Condition,
    ) -> Result<Written> {
        let opts = match cond {
            Condition::Absent => PutOptions {
                if_absent: true,
                ..Default::default()
            },
            Condition::Revision(r) => PutOptions {
                if_revision: Some(r),
                ..Default::default()
            },
        };
        self.put_with(key, data, opts).await
    }

    /// Write `data` under `key` only while `guard`'s lock is held with its fencing token
    /// (server-side fencing: a write after the lock moved is refused with
    /// [`Error::StaleToken`]). The lock must be in the key's store.
    pub async fn put_fenced(
        &self,
        guard: &LockGuard,
        key: &str,
        data: impl Into<Bytes>,
    ) -> Result<Written> {
        let opts = PutOptions {
            fence: Some((guard.name().to_string(), guard.token())),
            ..Default::default()
        };
        self.put_with(key, data, opts).await
    }

    /// Write `data` under `key` as `opts` says.
    pub async fn put_with(
        &self,
        key: &str,
        data: impl Into<Bytes>,
        opts: PutOptions,
    ) -> Result<Written> {
        let data: Bytes = data.into();
        let store = self.store_of(key).await?;
        if let Some((lock, _)) = &opts.fence {
            let lock_store = self.store_of(lock).await?;
            if lock_store != store {
                return Err(Error::InvalidName {
                    name: lock.clone(),
                    reason: format!(
                        "a fencing lock must be in the object's store (same first path \
                         segment as {key}): it is in store {lock_store}, the key in {store}"
                    ),
                });
            }
        }
        let (session, request_id) = self.writer(store).await?;
        if data.len() <= PUT_LIMIT {
            match self
                .put_small(store, key, &data, &opts, session, request_id)
                .await
            {
                // The server's value limit is lower than ours: stream it.
                Err(Error::TooLarge { .. }) => {}
                r => return r,
            }
        }
        self.upload(store, key, data, &opts, session, request_id)
            .await
    }

    async fn put_small(
        &self,
        store: u32,
        key: &str,
        data: &Bytes,
        opts: &PutOptions,
        session: proto::SessionRef,
        request_id: u64,
    ) -> Result<Written> {
        let req = proto::PutObjectRequest {
            session_store: Some(session.store),
            key: key.to_string(),
            data: data.clone(),
            conditions: Some(conditions(opts)),
            ephemeral: opts.ephemeral,
            session: session.id,
            request_id,
        };
        let total = data.len() as u64;
        let progress = opts.progress.clone();
        let r = self
            .client
            .routed_objects(store, self.bounds(data.len()), |mut c| {
                let req = req.clone();
                async move { Ok(written(c.put(req).await?.into_inner())) }
            })
            .await;
        if let (Ok(_), Some(p)) = (&r, progress) {
            p(total, total);
        }
        r
    }

    async fn upload(
        &self,
        store: u32,
        key: &str,
        data: Bytes,
        opts: &PutOptions,
        session: proto::SessionRef,
        request_id: u64,
    ) -> Result<Written> {
        let header = proto::UploadHeader {
            session_store: Some(session.store),
            key: key.to_string(),
            conditions: Some(conditions(opts)),
            ephemeral: opts.ephemeral,
            session: session.id,
            request_id,
            size: Some(data.len() as u64),
        };
        let progress = opts.progress.clone();
        self.client
            .routed_objects(store, self.bounds(data.len()), |mut c| {
                use proto::upload_request::Kind as U;
                let first = U::Header(header.clone());
                let stream = upload_stream(first, data.clone(), U::Data, progress.clone());
                async move {
                    let stream = stream.map(|kind| proto::UploadRequest { kind: Some(kind) });
                    Ok(written(c.upload(stream).await?.into_inner()))
                }
            })
            .await
    }

    /// Read the object under `key` (linearizable: the latest acknowledged content).
    pub async fn get(&self, key: &str) -> Result<Object> {
        let store = self.store_of(key).await?;
        let key = key.to_string();
        // A read of up to 64 MiB from the chunks.
        let bounds = self.bounds(64 << 20);
        self.client
            .routed_objects(store, bounds, |mut c| {
                let req = proto::GetObjectRequest { key: key.clone() };
                async move {
                    use futures::StreamExt;
                    use proto::get_object_response::Kind as G;
                    let mut s = c.get(req).await?.into_inner();
                    let mut info = None;
                    let mut buf = Vec::new();
                    while let Some(m) = s.next().await {
                        match m?.kind {
                            Some(G::Meta(m)) => {
                                buf.reserve(m.size as usize);
                                info = Some(ObjectInfo::from(m));
                            }
                            Some(G::Data(d)) => buf.extend_from_slice(&d),
                            Some(G::Error(e)) => return Ok(Err(Error::from_proto(e))),
                            None => return Ok(Err(Error::Malformed)),
                        }
                    }
                    let Some(info) = info else {
                        return Ok(Err(Error::Malformed));
                    };
                    if buf.len() as u64 != info.size || crc32(&buf) != info.checksum {
                        // Cut short: try again.
                        return Err(tonic::Status::unavailable(format!(
                            "object {} arrived incomplete or damaged ({} of {} bytes)",
                            info.key,
                            buf.len(),
                            info.size
                        )));
                    }
                    Ok(Ok(Object {
                        info,
                        data: Bytes::from(buf),
                    }))
                }
            })
            .await
    }

    /// Describe the object under `key` without its content.
    pub async fn head(&self, key: &str) -> Result<ObjectInfo> {
        let store = self.store_of(key).await?;
        let req = proto::HeadObjectRequest {
            key: key.to_string(),
        };
        self.client
            .routed_objects(store, self.bounds(0), |mut c| {
                let req = req.clone();
                async move {
                    use proto::head_object_response::Result as R;
                    Ok(match c.head(req).await?.into_inner().result {
                        Some(R::Ok(m)) => Ok(m.into()),
                        Some(R::Error(e)) => Err(Error::from_proto(e)),
                        None => Err(Error::Malformed),
                    })
                }
            })
            .await
    }

    /// Delete the object under `key`; the revision of the deletion.
    pub async fn delete(&self, key: &str) -> Result<u64> {
        self.delete_with(key, PutOptions::default()).await
    }

    /// Delete the object under `key` if the conditions of `opts` hold (`if_revision`,
    /// `fence`).
    pub async fn delete_with(&self, key: &str, opts: PutOptions) -> Result<u64> {
        let store = self.store_of(key).await?;
        let (session, request_id) = self.writer(store).await?;
        let req = proto::DeleteObjectRequest {
            session_store: Some(session.store),
            key: key.to_string(),
            conditions: Some(conditions(&opts)),
            session: session.id,
            request_id,
        };
        self.client
            .routed_objects(store, self.bounds(0), |mut c| {
                let req = req.clone();
                async move {
                    use proto::delete_object_response::Result as R;
                    Ok(match c.delete(req).await?.into_inner().result {
                        Some(R::Ok(d)) => Ok(d.revision),
                        Some(R::Error(e)) => Err(Error::from_proto(e)),
                        None => Err(Error::Malformed),
                    })
                }
            })
            .await
    }

    /// Objects at `prefix` or below (`/`: every store's), in key order.
    pub async fn list(&self, prefix: &str) -> Result<Listing> {
        let stores: Vec<u32> = if prefix == "/" {
            (0..self.client.stores().await?).collect()
        } else {
            vec![self.store_of(prefix).await?]
        };
        let mut out = Listing {
            revisions: Vec::new(),
            objects: Vec::new(),
        };
        for store in stores {
            let (revision, objects) = self.list_store(store, prefix).await?;
            out.revisions.push((store, revision));
            out.objects.extend(objects);
        }
        out.objects.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    /// Objects of one store at `prefix` or below, and the store's revision.
    pub(super) async fn list_store(
        &self,
        store: u32,
        prefix: &str,
    ) -> Result<(u64, Vec<ObjectInfo>)> {
        let req = proto::ListObjectsRequest {
            prefix: prefix.to_string(),
            store: Some(store),
            limit: 0,
        };
        self.client
            .routed_objects(store, self.bounds(0), |mut c| {
                let req = req.clone();
                async move {
                    use proto::list_objects_response::Result as R;
                    Ok(match c.list(req).await?.into_inner().result {
                        Some(R::Ok(l)) => {
                            Ok((l.revision, l.objects.into_iter().map(Into::into).collect()))
                        }
                        Some(R::Error(e)) => Err(Error::from_proto(e)),
                        None => Err(Error::Malformed),
                    })
                }
            })
            .await
    }

    /// Start a multipart upload to `key`.
    pub async fn initiate(&self, key: &str) -> Result<Multipart> {
        let store = self.store_of(key).await?;
        let (session, request_id) = self.writer(store).await?;
        let req = proto::MultipartInitiateRequest {
            session_store: Some(session.store),
            key: key.to_string(),
            session: session.id,
            request_id,
        };
        self.client
            .routed_objects(store, self.bounds(0), |mut c| {
                let req = req.clone();
                async move {
                    use proto::multipart_initiate_response::Result as R;
                    Ok(match c.multipart_initiate(req).await?.into_inner().result {
                        Some(R::Ok(u)) => Ok(Multipart {
                            key: u.key,
                            upload: u.upload,
                        }),
                        Some(R::Error(e)) => Err(Error::from_proto(e)),
                        None => Err(Error::Malformed),
                    })
                }
            })
            .await
    }

    /// Upload part `part` (1 and up) of `upload`; uploading a part again replaces it.
    /// The part's CRC-32.
    pub async fn upload_part(
        &self,
        upload: &Multipart,
        part: u32,
        data: impl Into<Bytes>,
    ) -> Result<u32> {
        let data: Bytes = data.into();
        let store = self.store_of(&upload.key).await?;
        let header = proto::PartHeader {
            key: upload.key.clone(),
            upload: upload.upload.clone(),
            part,
            size: Some(data.len() as u64),
        };
        self.client
            .routed_objects(store, self.bounds(data.len()), |mut c| {
                use proto::upload_part_request::Kind as U;
                let stream = upload_stream(U::Header(header.clone()), data.clone(), U::Data, None);
                async move {
                    let stream = stream.map(|kind| proto::UploadPartRequest { kind: Some(kind) });
                    use proto::upload_part_response::Result as R;
                    Ok(match c.upload_part(stream).await?.into_inner().result {
                        Some(R::Ok(p)) => Ok(p.checksum),
                        Some(R::Error(e)) => Err(Error::from_proto(e)),
                        None => Err(Error::Malformed),
                    })
                }
            })
            .await
    }

    /// Complete `upload` with these parts, in order (parts not named are collected).
    pub async fn complete(&self, upload: &Multipart, parts: &[u32]) -> Result<Written> {
        self.complete_with(upload, parts, PutOptions::default())
            .await
    }

    /// [`Objects::complete`] under the conditions of `opts`.
    pub async fn complete_with(
        &self,
        upload: &Multipart,
        parts: &[u32],
        opts: PutOptions,
    ) -> Result<Written> {
        let store = self.store_of(&upload.key).await?;
        let (session, request_id) = self.writer(store).await?;
        let req = proto::MultipartCompleteRequest {
            session_store: Some(session.store),
            key: upload.key.clone(),
            upload: upload.upload.clone(),
            parts: parts.to_vec(),
            conditions: Some(conditions(&opts)),
            session: session.id,
            request_id,
        };
        self.client
            .routed_objects(store, self.bounds(0), |mut c| {
                let req = req.clone();
                async move { Ok(written(c.multipart_complete(req).await?.into_inner())) }
            })
            .await
    }

    /// Abort `upload` (its parts are collected).
    pub async fn abort(&self, upload: &Multipart) -> Result<()> {
        let store = self.store_of(&upload.key).await?;
        let req = proto::MultipartAbortRequest {
            key: upload.key.clone(),
            upload: upload.upload.clone(),
        };
        self.client
            .routed_objects(store, self.bounds(0), |mut c| {
                let req = req.clone();
                async move {
                    use proto::multipart_abort_response::Result as R;
                    Ok(match c.multipart_abort(req).await?.into_inner().result {
                        Some(R::Ok(_)) => Ok(()),
                        Some(R::Error(e)) => Err(Error::from_proto(e)),
                        None => Err(Error::Malformed),
                    })
                }
            })
            .await
    }
}

/// The messages of an upload: the header, then the content in [`UPLOAD_SLICE`] slices.
/// A task feeds them to the connection one at a time and reports the bytes handed over
/// so far to `progress`; it owns what it sends, so the request's future borrows nothing.
pub(super) fn upload_stream<K: Send + 'static>(
    header: K,
    data: Bytes,
    wrap: fn(Bytes) -> K,
    progress: Option<Progress>,
) -> tokio_stream::wrappers::ReceiverStream<K> {
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        let total = data.len() as u64;
        if tx.send(header).await.is_err() {
            return;
        }
        let mut at = 0;
        while at < data.len() {
            let end = (at + UPLOAD_SLICE).min(data.len());
            if tx.send(wrap(data.slice(at..end))).await.is_err() {
                return;
            }
            if let Some(p) = &progress {
                p(end as u64, total);
            }
            at = end;
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

pub(super) fn written(r: proto::PutObjectResponse) -> Result<Written> {
    use proto::put_object_response::Result as R;
    match unpack(r.result)? {
        R::Ok(w) => Ok(Written {
            key: w.key,
            revision: w.revision,
            uuid: w.uuid,
        }),
        R::Error(e) => Err(Error::from_proto(e)),
    }
}

pub(super) fn crc32(data: &[u8]) -> u32 {
    // CRC-32 (ISO-HDLC), as the store computes it.
    tenure_core::objects::BlockInfo::of(data).checksum
}
