//! Objects (seed 001, DESIGN §5): a versioned object store under path keys.
//!
//! [`Client::objects`] gives an [`Objects`] handle. An object lives in the store of its
//! key's first path segment and is served by that store's manager, which the client
//! finds as it finds a lock's (remembered route, lookup hint, redirects). Writes are
//! made under the client's session in the store (opened transparently, as for locks) and
//! one request id for all their attempts: a retry after a redirect, a lost answer or a
//! failover of the manager in the middle of an upload returns the outcome of the first
//! attempt that took effect, or finishes it, never writing twice. Small values travel in
//! one message (`Put`); larger contents stream in 1 MiB messages (`Upload`), with an
//! optional progress callback.
//!
//! Conditions: [`PutOptions::if_absent`] (create only), [`PutOptions::if_revision`]
//! (compare-and-set on the active revision, 0 for "absent"), and fencing by a lock of
//! the same store ([`Objects::put_fenced`] with a [`LockGuard`], or
//! [`PutOptions::fence`] with a name and token): the store applies the write only if the
//! lock is held with exactly that token, else [`Error::StaleToken`].
//!
//! [`Objects::watch`] delivers the changes at a prefix in revision order on a session
//! stream of its own. When the store's manager moves, the watch resumes at the new one
//! from the last revision it delivered (nothing is lost or repeated); when the store's
//! history no longer reaches back that far, it re-reads the prefix and hands the caller
//! an explicit [`WatchEvent::Reset`] with the current objects before continuing: never a
//! silent gap.

use crate::locks::LockGuard;
use crate::proto;
use crate::stream::{Ev, Rq};
use crate::{Bounds, Client, Error, FencingToken, Result};
use prost::bytes::Bytes;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tracing::debug;

/// Largest content sent in one `Put` message; larger contents are uploaded in slices.
pub const PUT_LIMIT: usize = 1 << 20;
/// Size of an upload's data messages.
pub const UPLOAD_SLICE: usize = 1 << 20;

/// An active object's description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Key.
    pub key: String,
    /// The store's revision at which this content became active.
    pub revision: u64,
    /// The upload that wrote it.
    pub uuid: String,
    /// Length in bytes.
    pub size: u64,
    /// CRC-32 (ISO-HDLC) of the content.
    pub checksum: u32,
    /// Ephemeral: the session that owns it.
    pub owner_session: Option<u64>,
}

impl From<proto::ObjectInfo> for ObjectInfo {
    fn from(m: proto::ObjectInfo) -> Self {
        ObjectInfo {
            key: m.key,
            revision: m.revision,
            uuid: m.uuid,
            size: m.size,
            checksum: m.checksum,
            owner_session: m.owner_session,
        }
    }
}

/// An object with its content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object {
    /// Its description.
    pub info: ObjectInfo,
    /// Its content.
    pub data: Bytes,
}

/// A write that took effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// Key.
    pub key: String,
    /// The revision the content became active at.
    pub revision: u64,
    /// The upload.
    pub uuid: String,
}

/// Objects under a prefix, and the revision of their store they were read at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listing {
    /// The store's object revision (for a prefix spanning every store, per store).
    pub revisions: Vec<(u32, u64)>,
    /// The objects, in key order.
    pub objects: Vec<ObjectInfo>,
}

/// Reports an upload's progress: bytes handed to the connection, and the total. An
/// attempt that is retried starts again from 0.
pub type Progress = Arc<dyn Fn(u64, u64) + Send + Sync>;

/// How a put is made.
#[derive(Clone, Default)]
pub struct PutOptions {
    /// Create only: fail with [`Error::ObjectExists`] if the key has an active object.
    pub if_absent: bool,
    /// Compare-and-set: the active revision must be this one (0: no active object),
    /// else [`Error::RevisionMismatch`].
    pub if_revision: Option<u64>,
    /// Put only if this lock (of the key's store) is held with this token, else
    /// [`Error::StaleToken`].
    pub fence: Option<(String, FencingToken)>,
    /// Delete the object when this client's session in the store ends.
    pub ephemeral: bool,
    /// Upload progress.
    pub progress: Option<Progress>,
}

impl std::fmt::Debug for PutOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PutOptions")
            .field("if_absent", &self.if_absent)
            .field("if_revision", &self.if_revision)
            .field("fence", &self.fence)
            .field("ephemeral", &self.ephemeral)
            .finish()
    }
}

/// A condition for [`Objects::put_if`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    /// The key has no active object.
    Absent,
    /// The key's active revision is this one (0: no active object).
    Revision(u64),
}

/// A multipart upload in progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Multipart {
    /// Key.
    pub key: String,
    /// The upload's id.
    pub upload: String,
}

/// The client's object API (see the module docs). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Objects {
    client: Client,
}

impl Client {
    /// The object API.
    pub fn objects(&self) -> Objects {
        Objects {
            client: self.clone(),
        }
    }
}

fn conditions(o: &PutOptions) -> proto::WriteConditions {
    proto::WriteConditions {
        if_absent: o.if_absent,
        if_revision: o.if_revision,
        fence: o.fence.as_ref().map(|(lock, token)| proto::Fence {
            lock: lock.clone(),
            token: Some((*token).into()),
        }),
    }
}

fn unpack<T>(r: Option<T>) -> Result<T> {
    r.ok_or(Error::Malformed)
}

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

    /// The client's session in `store` and a fresh request id: every attempt of one
    /// write carries both, so the store recognises a retry.
    async fn writer(&self, store: u32) -> Result<(u64, u64)> {
        let session = self.client.session(store).await?;
        Ok((session.id, self.client.next_request_id()))
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
        session: u64,
        request_id: u64,
    ) -> Result<Written> {
        let req = proto::PutObjectRequest {
            key: key.to_string(),
            data: data.clone(),
            conditions: Some(conditions(opts)),
            ephemeral: opts.ephemeral,
            session,
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
        session: u64,
        request_id: u64,
    ) -> Result<Written> {
        let header = proto::UploadHeader {
            key: key.to_string(),
            conditions: Some(conditions(opts)),
            ephemeral: opts.ephemeral,
            session,
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
            key: key.to_string(),
            conditions: Some(conditions(&opts)),
            session,
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
    async fn list_store(&self, store: u32, prefix: &str) -> Result<(u64, Vec<ObjectInfo>)> {
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
            key: key.to_string(),
            session,
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
            key: upload.key.clone(),
            upload: upload.upload.clone(),
            parts: parts.to_vec(),
            conditions: Some(conditions(&opts)),
            session,
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

    /// Watch the changes at `prefix` or below (a path: revisions are per store, and a
    /// prefix's objects are in one store) after revision `after` (none: from now). See
    /// the module docs for how it resumes.
    pub async fn watch(&self, prefix: &str, after: Option<u64>) -> Result<ObjectWatch> {
        if prefix == "/" || prefix.is_empty() {
            return Err(Error::InvalidName {
                name: prefix.to_string(),
                reason: "watch a path with a first segment (e.g. /app): revisions are per \
                         store, and a path's objects all live in its first segment's store"
                    .into(),
            });
        }
        let store = self.store_of(prefix).await?;
        let (tx, rx) = mpsc::channel(64);
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let task = WatchTask {
            objects: self.clone(),
            store,
            prefix: prefix.to_string(),
            last: after,
            tx,
            ready: Some(ready_tx),
            endpoint: String::new(),
            established: false,
        };
        tokio::spawn(task.run());
        // The first registration's outcome: a bad prefix or a compacted `after` is the
        // caller's to see at once.
        match ready_rx.await {
            Ok(Ok(revision)) => Ok(ObjectWatch { rx, revision }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Error::Closed),
        }
    }
}

/// The messages of an upload: the header, then the content in [`UPLOAD_SLICE`] slices.
/// A task feeds them to the connection one at a time and reports the bytes handed over
/// so far to `progress`; it owns what it sends, so the request's future borrows nothing.
fn upload_stream<K: Send + 'static>(
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

use futures::StreamExt as _;

fn written(r: proto::PutObjectResponse) -> Result<Written> {
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

fn crc32(data: &[u8]) -> u32 {
    // CRC-32 (ISO-HDLC), as the store computes it.
    tenure_core::objects::BlockInfo::of(data).checksum
}

/// One change a watch delivers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The store's revision of the change.
    pub revision: u64,
    /// Key.
    pub key: String,
    /// The new content's description (none: the object was deleted).
    pub put: Option<ChangeInfo>,
}

/// A new content's description in a [`Change`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeInfo {
    /// The upload.
    pub uuid: String,
    /// Length.
    pub size: u64,
    /// CRC-32 of the content.
    pub checksum: u32,
}

impl From<proto::ObjectChange> for Change {
    fn from(c: proto::ObjectChange) -> Self {
        Change {
            revision: c.revision,
            key: c.key,
            put: (!c.deleted).then_some(ChangeInfo {
                uuid: c.uuid,
                size: c.size,
                checksum: c.checksum,
            }),
        }
    }
}

/// What a watch reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    /// Changes, in revision order.
    Changes(Vec<Change>),
    /// The store's history no longer reached the last revision delivered, so changes
    /// may have been missed: this is the prefix's current state, read at `revision`; the
    /// watch continues after it.
    Reset {
        /// The revision the objects were read at.
        revision: u64,
        /// The prefix's objects.
        objects: Vec<ObjectInfo>,
    },
}

/// A running watch: [`ObjectWatch::next`] gives its events. Dropping it stops it.
#[derive(Debug)]
pub struct ObjectWatch {
    rx: mpsc::Receiver<Result<WatchEvent>>,
    revision: u64,
}

impl ObjectWatch {
    /// The revision the watch started after.
    pub fn started_after(&self) -> u64 {
        self.revision
    }

    /// The next event; `None` when the watch stopped, an error when it cannot go on
    /// (the client closed, the prefix is refused).
    pub async fn next(&mut self) -> Option<Result<WatchEvent>> {
        self.rx.recv().await
    }
}

/// The watch id used on a watch's own stream.
const WATCH_ID: u64 = 1;

/// The task behind an [`ObjectWatch`]: one session stream to the store's manager, with
/// one watch on it, made again wherever the manager goes.
struct WatchTask {
    objects: Objects,
    store: u32,
    prefix: String,
    /// The last revision delivered (or asked for).
    last: Option<u64>,
    tx: mpsc::Sender<Result<WatchEvent>>,
    /// Where the first registration's outcome goes.
    ready: Option<tokio::sync::oneshot::Sender<Result<u64>>>,
    /// The endpoint of the last stream.
    endpoint: String,
    /// Whether the last stream's watch was registered.
    established: bool,
}

/// Why a watch's stream ended.
#[derive(Debug)]
enum Resume {
    /// Connect again at once, the hint first.
    Redirect(Option<String>),
    /// Connect again after a backoff.
    Retry,
    /// The history no longer reaches `last`: re-read.
    Reread,
    /// Stop: the caller went away, or an error that no retry mends.
    Stop(Option<Error>),
}

impl WatchTask {
    async fn run(mut self) {
        let mut hint = None;
        let mut rotate = 0;
        let mut failures = 0u32;
        let mut redirects = crate::Redirects::default();
        let started = Instant::now();
        loop {
            self.established = false;
            let resume = self.once(hint.take(), rotate).await;
            if self.established {
                // The watch ran: what follows is a new incident.
                failures = 0;
                redirects.reset();
            }
            debug!(store = self.store, prefix = %self.prefix, last = ?self.last, resume = ?resume, "watch stream ended");
            let client = &self.objects.client;
            match resume {
                Resume::Redirect(h) => {
                    client.clear_route(self.store);
                    hint = redirects.follow(h.as_deref(), &self.endpoint);
                    if hint.is_none() {
                        // No hint, or a chain of hints that led nowhere: the endpoints
                        // in turn, after a pause (a new manager may not be there yet).
                        rotate += 1;
                        failures += 1;
                        let o = &client.inner.opts;
                        let d = o
                            .backoff_min
                            .saturating_mul(1 << failures.min(10))
                            .min(o.backoff_max);
                        tokio::time::sleep(d).await;
                    }
                }
                Resume::Retry => {
                    redirects.reset();
                    failures += 1;
                    if failures.is_multiple_of(3) {
                        client.clear_route(self.store);
                        rotate += 1;
                    }
                    // Before the first registration, the usual retry deadline applies.
                    if self.ready.is_some() && started.elapsed() > client.inner.opts.retry_deadline
                    {
                        self.fail(Error::GaveUp {
                            attempts: failures,
                            elapsed: started.elapsed(),
                            last: Box::new(Error::Unavailable { store: self.store }),
                        })
                        .await;
                        return;
                    }
                    let o = &client.inner.opts;
                    let d = o
                        .backoff_min
                        .saturating_mul(1 << failures.min(10))
                        .min(o.backoff_max);
                    tokio::time::sleep(d).await;
                }
                Resume::Reread => {
                    if let Err(e) = self.reread().await {
                        if e.retryable() || matches!(e, Error::GaveUp { .. }) {
                            continue;
                        }
                        self.fail(e).await;
                        return;
                    }
                }
                Resume::Stop(e) => {
                    if let Some(e) = e {
                        self.fail(e).await;
                    }
                    return;
                }
            }
        }
    }

    async fn fail(&mut self, e: Error) {
        match self.ready.take() {
            Some(r) => {
                let _ = r.send(Err(e));
            }
            None => {
                let _ = self.tx.send(Err(e)).await;
            }
        }
    }

    /// Re-read the prefix and report it: the watch continues after the read's revision.
    async fn reread(&mut self) -> Result<()> {
        let (revision, objects) = self.objects.list_store(self.store, &self.prefix).await?;
        debug!(store = self.store, prefix = %self.prefix, revision, "watch re-read after compaction");
        self.last = Some(revision);
        if let Some(r) = self.ready.take() {
            // The caller's `after` was compacted: it learns the state from the Reset.
            let _ = r.send(Ok(revision));
        }
        if self
            .tx
            .send(Ok(WatchEvent::Reset { revision, objects }))
            .await
            .is_err()
        {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// One stream: connect, register the watch, deliver its changes until it ends.
    async fn once(&mut self, hint: Option<String>, rotate: usize) -> Resume {
        let client = self.objects.client.clone();
        let start_id = client.next_request_id();
        let conn = tokio::select! {
            c = crate::stream::connect(&client, self.store, None, hint, rotate, start_id) => c,
            _ = self.tx.closed() => return Resume::Stop(None),
        };
        let mut conn = match conn {
            Ok((conn, _)) => conn,
            Err(e) if e.retryable() || e.transient_rpc() || matches!(e, Error::NoEndpoints) => {
                debug!(store = self.store, "watch: could not connect: {e}");
                return Resume::Retry;
            }
            Err(e) => return Resume::Stop(Some(e)),
        };
        let id = client.next_request_id();
        let req = proto::SessionRequest {
            request_id: id,
            kind: Some(Rq::WatchObjects(proto::WatchObjects {
                watch: WATCH_ID,
                prefix: self.prefix.clone(),
                after: self.last,
            })),
        };
        if conn.tx.send(req).await.is_err() {
            return Resume::Retry;
        }
        let endpoint = conn.endpoint.clone();
        self.endpoint = endpoint.clone();
        loop {
            let msg = tokio::select! {
                m = conn.rx.message() => m,
                _ = self.tx.closed() => return Resume::Stop(None),
            };
            let ev = match msg {
                Ok(Some(ev)) => ev,
                Ok(None) => return Resume::Retry,
                Err(s) => {
                    debug!(store = self.store, %endpoint, "watch stream lost: {s}");
                    return Resume::Retry;
                }
            };
            tracing::trace!(store = self.store, %endpoint, request_id = ev.request_id, kind = ?ev.kind, "watch stream event");
            match ev.kind {
                Some(Ev::Watching(w)) if ev.request_id == id => {
                    client.set_route(self.store, &endpoint);
                    self.established = true;
                    if self.last.is_none() {
                        self.last = Some(w.revision);
                    }
                    if let Some(r) = self.ready.take() {
                        let _ = r.send(Ok(w.revision));
                    }
                }
                Some(Ev::Error(e)) if ev.request_id == id => {
                    return self.ended(Error::from_proto(e));
                }
                Some(Ev::ObjectEvents(evs)) if evs.watch == WATCH_ID => {
                    let last = self.last.unwrap_or(0);
                    let changes: Vec<Change> = (evs.changes.into_iter())
                        .filter(|c| c.revision > last)
                        .map(Change::from)
                        .collect();
                    let Some(top) = changes.last().map(|c| c.revision) else {
                        continue;
                    };
                    self.last = Some(top);
                    if self
                        .tx
                        .send(Ok(WatchEvent::Changes(changes)))
                        .await
                        .is_err()
                    {
                        return Resume::Stop(None);
                    }
                }
                Some(Ev::WatchEnded(w)) if w.watch == WATCH_ID => {
                    let e = w.error.map_or(Error::Malformed, Error::from_proto);
                    return self.ended(e);
                }
                Some(Ev::Redirect(r)) => {
                    return Resume::Redirect(crate::stream::redirect_hint(r));
                }
                Some(Ev::StreamClosed(_)) => return Resume::Retry,
                _ => {}
            }
        }
    }

    /// The watch ended (or was refused) with `e`: what to do next.
    fn ended(&self, e: Error) -> Resume {
        match e {
            Error::NotManager { hint, .. } => Resume::Redirect(hint),
            Error::Compacted { .. } => Resume::Reread,
            e if e.retryable() => Resume::Retry,
            e => Resume::Stop(Some(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every object call can run in a spawned task with a borrowed key (a future that
    /// holds a closure over a borrow can fail `Send` for all lifetimes).
    #[allow(dead_code)]
    fn calls_are_spawnable(o: Objects) {
        tokio::spawn(async move {
            let k = String::from("/a/b");
            let _ = o.put(&k, vec![1u8]).await;
            let _ = o.get(&k).await;
            let _ = o.head(&k).await;
            let _ = o.delete(&k).await;
            let _ = o.list(&k).await;
            let up = o.initiate(&k).await.unwrap();
            let _ = o.upload_part(&up, 1, vec![1u8]).await;
            let _ = o.complete(&up, &[1]).await;
            let _ = o.abort(&up).await;
            let _ = o.watch(&k, None).await;
        });
    }
}
