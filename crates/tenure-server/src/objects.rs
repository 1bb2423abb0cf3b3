//! The object service (`service Objects` in `proto/tenure.proto`; seed 001, DESIGN §5).
//!
//! Each handler checks what it can without the core (the key is a path, the size is
//! within the configured limits, the stream is well formed), turns the request into an
//! [`ObjectRequest`] for the store of the key, and maps the core's answer to the
//! response's payload or typed [`proto::Error`] with the same mapping as the lock service
//! ([`Api::client_error`]), so a client decodes every error the same way. Contents
//! travel in messages of at most [`DATA_CHUNK`] bytes: an `Upload` is gathered here
//! (up to `max_object_size`) and handed to the core in one request, which splits it into
//! blocks; a `Get` answers the description, then the content in slices.
//!
//! `Watch` is a plain server-streaming call ([`crate::object_watch`]); object watches
//! also ride on the session stream ([`crate::stream`]).

use crate::auth::Perm;
use crate::grpc::{Api, invalid_name, sized, unexpected};
use bytes::{Bytes, BytesMut};
use std::pin::Pin;
use std::time::Duration;
use tenure_client::proto::{self, error::Kind, objects_server::Objects};
use tenure_core::ids::StoreId;
use tenure_core::io::{ObjectRequest, Request, Response, Writer};
use tenure_core::objects::{Conditions, Fence, ObjectSettings};
use tonic::{Request as GrpcRequest, Response as GrpcResponse, Status, Streaming};

mod convert;
use crate::grpc::invalid_request as invalid;
pub(crate) use convert::{changes_to_proto, conditions, meta_to_proto, object_error_kind, under};
use convert::{fill_key, parse_upload, too_large, writer};

/// Largest content slice in one `Get` or `Upload` message.
pub const DATA_CHUNK: usize = 1 << 20;

/// Largest message the object service decodes: a `Put` up to twice the value limit (so
/// a value over the limit gets a typed `TooLarge`), an upload's data slice, and room for
/// the rest of the message.
pub fn max_request_bytes(s: &ObjectSettings) -> usize {
    let value = (s.max_value_size as usize).max(DATA_CHUNK);
    (2 * value + 64 * 1024).max(crate::MAX_FRAME_BYTES)
}

/// The object service: the client API's [`Api`] with the object limits.
#[derive(Clone, Debug)]
pub struct ObjectsApi {
    api: Api,
    settings: ObjectSettings,
}

impl ObjectsApi {
    /// The object service over `api`'s driver, with these limits.
    pub fn new(api: Api, settings: ObjectSettings) -> ObjectsApi {
        ObjectsApi { api, settings }
    }
}

/// How long the core may take to store `size` bytes: the request timeout, and a second
/// more per MiB (each block is a SafeTalk round with durable writes at every chunk).
fn write_limit(api: &Api, size: usize) -> Duration {
    api.request_timeout() + Duration::from_secs(size.div_ceil(1 << 20) as u64)
}

/// The outcome of a request as either the core's answer or a typed error.
type Outcome = Result<Result<Response, proto::Error>, Status>;

impl ObjectsApi {
    /// The store of an object key, or the typed error (a key is a lock-style path).
    fn key_store(&self, key: &str) -> Result<StoreId, proto::Error> {
        let (store, _) = self.api.name(key)?;
        Ok(store)
    }

    /// The store of a listing's or watch's prefix: its path's, or `store` for "/".
    fn prefix_store(
        &self,
        prefix: &str,
        store: Option<u32>,
        what: &str,
    ) -> Result<StoreId, proto::Error> {
        let store = if prefix == "/" {
            let Some(s) = store else {
                let reason = format!("{what} '/' spans every store: set `store`");
                return Err(invalid_name("/", &reason));
            };
            StoreId(s)
        } else {
            self.key_store(prefix)?
        };
        match self.api.unknown_store(store) {
            Some(e) => Err(e),
            None => Ok(store),
        }
    }

    /// Run an object request in `store` within `limit`; a core error becomes the typed
    /// wire error with the key (and the presented token) filled in.
    async fn run(
        &self,
        store: StoreId,
        home: Option<StoreId>,
        req: ObjectRequest,
        limit: Duration,
        fence: Option<&Fence>,
    ) -> Outcome {
        let key = match &req {
            ObjectRequest::Put { key, .. }
            | ObjectRequest::Get { key }
            | ObjectRequest::Head { key }
            | ObjectRequest::Delete { key, .. }
            | ObjectRequest::MultipartInitiate { key, .. }
            | ObjectRequest::MultipartPart { key, .. }
            | ObjectRequest::MultipartComplete { key, .. }
            | ObjectRequest::MultipartAbort { key, .. } => key.clone(),
            ObjectRequest::List { prefix }
            | ObjectRequest::Watch { prefix, .. }
            | ObjectRequest::Poll { prefix, .. } => prefix.clone(),
            ObjectRequest::Unwatch { .. } => String::new(),
        };
        let answer = self
            .api
            .request_within(under(home, Request::Object { store, req }), Some(limit))
            .await?;
        Ok(answer.map_err(|e| {
            let mut err = self.api.client_error(store, &e);
            fill_key(&mut err, &key, fence);
            err
        }))
    }

    /// Store a whole content (from `Put` or `Upload`).
    #[allow(clippy::too_many_arguments)]
    async fn write(
        &self,
        store: StoreId,
        home: Option<StoreId>,
        key: String,
        data: Bytes,
        cond: Conditions,
        ephemeral: bool,
        w: Writer,
    ) -> Result<proto::PutObjectResponse, Status> {
        use proto::put_object_response::Result as R;
        let started = std::time::Instant::now();
        let size = data.len();
        let fence = cond.fence.clone();
        let limit = write_limit(&self.api, size);
        let req = ObjectRequest::Put {
            key: key.clone(),
            data,
            writer: w,
            cond,
            ephemeral,
        };
        let result = match self.run(store, home, req, limit, fence.as_ref()).await? {
            Ok(Response::ObjectWritten { revision, uuid }) => {
                metrics::counter!("tenure_object_puts_total").increment(1);
                metrics::counter!("tenure_object_put_bytes_total").increment(size as u64);
                metrics::histogram!("tenure_object_put_seconds")
                    .record(started.elapsed().as_secs_f64());
                R::Ok(proto::ObjectWritten {
                    key,
                    revision,
                    uuid: uuid.to_string(),
                })
            }
            Ok(other) => return Err(unexpected("an object put", &other)),
            Err(e) => R::Error(e),
        };
        Ok(proto::PutObjectResponse {
            result: Some(result),
        })
    }

    /// Whether this device can take a write for `key` now: a cheap `Head` before a large
    /// upload is read, so that a client sent to the wrong device is redirected at once
    /// instead of after sending the whole content. `Some(error)` for a routing error.
    async fn routing_error(
        &self,
        store: StoreId,
        key: &str,
    ) -> Result<Option<proto::Error>, Status> {
        let req = ObjectRequest::Head {
            key: key.to_string(),
        };
        let limit = self.api.request_timeout();
        Ok(match self.run(store, None, req, limit, None).await? {
            Err(e) if is_routing(&e) => Some(e),
            _ => None,
        })
    }
}

/// Errors that say "not here, not now" rather than anything about the request.
fn is_routing(e: &proto::Error) -> bool {
    matches!(
        e.kind,
        Some(Kind::NotManager(_) | Kind::Unavailable(_) | Kind::UnknownStore(_))
    )
}

type GetStream =
    Pin<Box<dyn futures::Stream<Item = Result<proto::GetObjectResponse, Status>> + Send>>;

/// Read an upload's stream: its header (first), then data up to `limit` bytes.
/// `Ok(Err(e))` is a typed refusal (too large, malformed).
async fn gather<H>(
    inbound: &mut Streaming<H>,
    expected: Option<u64>,
    limit: u64,
    data_of: impl Fn(H) -> Option<Bytes>,
) -> Result<Result<Bytes, proto::Error>, Status>
where
    H: Send + 'static,
{
    if let Some(size) = expected
        && size > limit
    {
        return Ok(Err(too_large(size, limit, "content")));
    }
    let cap = expected.unwrap_or(0).min(limit) as usize;
    let mut buf = BytesMut::with_capacity(cap);
    while let Some(m) = inbound.message().await? {
        let Some(d) = data_of(m) else {
            return Ok(Err(invalid("a header after the first message")));
        };
        let size = (buf.len() + d.len()) as u64;
        if size > limit {
            return Ok(Err(too_large(size, limit, "content")));
        }
        buf.extend_from_slice(&d);
    }
    Ok(Ok(buf.freeze()))
}

#[tonic::async_trait]
impl Objects for ObjectsApi {
    async fn put(
        &self,
        request: GrpcRequest<proto::PutObjectRequest>,
    ) -> Result<GrpcResponse<proto::PutObjectResponse>, Status> {
        use proto::put_object_response::Result as R;
        let caller = self.api.auth().caller(&request)?;
        let r = request.into_inner();
        caller.check(Perm::Write, &r.key)?;
        let refuse = |e| {
            Ok(GrpcResponse::new(proto::PutObjectResponse {
                result: Some(R::Error(e)),
            }))
        };
        let limit = self.settings.max_value_size;
        if r.data.len() as u64 > limit {
            return refuse(too_large(r.data.len() as u64, limit, "value (use Upload)"));
        }
        let store = match self.key_store(&r.key) {
            Ok(s) => s,
            Err(e) => return refuse(e),
        };
        let cond = match conditions(r.conditions) {
            Ok(c) => c,
            Err(e) => return refuse(e),
        };
        let w = writer(r.session, r.request_id);
        let home = r.session_store.map(StoreId);
        self.write(store, home, r.key, r.data, cond, r.ephemeral, w)
            .await
            .map(GrpcResponse::new)
    }

    async fn upload(
        &self,
        request: GrpcRequest<Streaming<proto::UploadRequest>>,
    ) -> Result<GrpcResponse<proto::PutObjectResponse>, Status> {
        use proto::put_object_response::Result as R;
        use proto::upload_request::Kind as U;
        let caller = self.api.auth().caller(&request)?;
        let mut inbound = request.into_inner();
        let refuse = |e| {
            Ok(GrpcResponse::new(proto::PutObjectResponse {
                result: Some(R::Error(e)),
            }))
        };
        let h = match inbound.message().await?.and_then(|m| m.kind) {
            Some(U::Header(h)) => h,
            _ => return refuse(invalid("the first message of an upload is its header")),
        };
        caller.check(Perm::Write, &h.key)?;
        let store = match self.key_store(&h.key) {
            Ok(s) => s,
            Err(e) => return refuse(e),
        };
        let cond = match conditions(h.conditions) {
            Ok(c) => c,
            Err(e) => return refuse(e),
        };
        if let Some(e) = self.routing_error(store, &h.key).await? {
            return refuse(e);
        }
        let limit = self.settings.max_object_size;
        let data = match gather(
            &mut inbound,
            h.size,
            limit,
            |m: proto::UploadRequest| match m.kind {
                Some(U::Data(d)) => Some(d),
                _ => None,
            },
        )
        .await?
        {
            Ok(d) => d,
            Err(e) => return refuse(e),
        };
        let w = writer(h.session, h.request_id);
        let home = h.session_store.map(StoreId);
        self.write(store, home, h.key, data, cond, h.ephemeral, w)
            .await
            .map(GrpcResponse::new)
    }

    type GetStream = GetStream;
    type WatchStream = crate::object_watch::WatchStream;

    async fn watch(
        &self,
        request: GrpcRequest<proto::WatchObjectsRequest>,
    ) -> Result<GrpcResponse<Self::WatchStream>, Status> {
        use proto::watch_objects_response::Kind;
        let caller = self.api.auth().caller(&request)?;
        let r = sized(request.into_inner())?;
        caller.check(Perm::Read, &r.prefix)?;
        let one = |e: proto::Error| -> Self::WatchStream {
            let m = proto::WatchObjectsResponse {
                kind: Some(Kind::Error(e)),
            };
            Box::pin(futures::stream::iter([Ok(m)]))
        };
        let store = match self.prefix_store(&r.prefix, r.store, "watching") {
            Ok(s) => s,
            Err(e) => return Ok(GrpcResponse::new(one(e))),
        };
        let ask = crate::object_watch::Ask {
            store,
            prefix: r.prefix,
            after: r.after,
            values: r.include_values,
        };
        Ok(GrpcResponse::new(crate::object_watch::start(
            self.api.clone(),
            ask,
        )))
    }

    async fn get(
        &self,
        request: GrpcRequest<proto::GetObjectRequest>,
    ) -> Result<GrpcResponse<Self::GetStream>, Status> {
        use proto::get_object_response::Kind as G;
        let caller = self.api.auth().caller(&request)?;
        let r = sized(request.into_inner())?;
        caller.check(Perm::Read, &r.key)?;
        let one = |k: G| -> GetStream {
            Box::pin(futures::stream::iter([Ok(proto::GetObjectResponse {
                kind: Some(k),
            })]))
        };
        let store = match self.key_store(&r.key) {
            Ok(s) => s,
            Err(e) => return Ok(GrpcResponse::new(one(G::Error(e)))),
        };
        let started = std::time::Instant::now();
        let req = ObjectRequest::Get { key: r.key.clone() };
        // Reading many blocks from a peer chunk: a second per MiB on top, as for writes.
        let limit = write_limit(&self.api, self.settings.max_object_size as usize);
        let (meta, data) = match self.run(store, None, req, limit, None).await? {
            Ok(Response::Object { meta, data }) => (meta, data),
            Ok(other) => return Err(unexpected("an object get", &other)),
            Err(e) => return Ok(GrpcResponse::new(one(G::Error(e)))),
        };
        metrics::counter!("tenure_object_gets_total").increment(1);
        metrics::histogram!("tenure_object_get_seconds").record(started.elapsed().as_secs_f64());
        let mut out = vec![Ok(proto::GetObjectResponse {
            kind: Some(G::Meta(meta_to_proto(&meta))),
        })];
        let mut at = 0;
        while at < data.len() {
            let end = (at + DATA_CHUNK).min(data.len());
            out.push(Ok(proto::GetObjectResponse {
                kind: Some(G::Data(data.slice(at..end))),
            }));
            at = end;
        }
        Ok(GrpcResponse::new(Box::pin(futures::stream::iter(out))))
    }

    async fn head(
        &self,
        request: GrpcRequest<proto::HeadObjectRequest>,
    ) -> Result<GrpcResponse<proto::HeadObjectResponse>, Status> {
        use proto::head_object_response::Result as R;
        let caller = self.api.auth().caller(&request)?;
        let r = sized(request.into_inner())?;
        caller.check(Perm::Read, &r.key)?;
        let reply = |result| {
            Ok(GrpcResponse::new(proto::HeadObjectResponse {
                result: Some(result),
            }))
        };
        let store = match self.key_store(&r.key) {
            Ok(s) => s,
            Err(e) => return reply(R::Error(e)),
        };
        let req = ObjectRequest::Head { key: r.key };
        match self
            .run(store, None, req, self.api.request_timeout(), None)
            .await?
        {
            Ok(Response::ObjectMeta(m)) => reply(R::Ok(meta_to_proto(&m))),
            Ok(other) => Err(unexpected("an object head", &other)),
            Err(e) => reply(R::Error(e)),
        }
    }

    async fn delete(
        &self,
        request: GrpcRequest<proto::DeleteObjectRequest>,
    ) -> Result<GrpcResponse<proto::DeleteObjectResponse>, Status> {
        use proto::delete_object_response::Result as R;
        let caller = self.api.auth().caller(&request)?;
        let r = sized(request.into_inner())?;
        caller.check(Perm::Write, &r.key)?;
        let reply = |result| {
            Ok(GrpcResponse::new(proto::DeleteObjectResponse {
                result: Some(result),
            }))
        };
        let store = match self.key_store(&r.key) {
            Ok(s) => s,
            Err(e) => return reply(R::Error(e)),
        };
        let cond = match conditions(r.conditions) {
            Ok(c) => c,
            Err(e) => return reply(R::Error(e)),
        };
        let fence = cond.fence.clone();
        let req = ObjectRequest::Delete {
            key: r.key.clone(),
            writer: writer(r.session, r.request_id),
            cond,
        };
        let limit = self.api.request_timeout();
        match self
            .run(
                store,
                r.session_store.map(StoreId),
                req,
                limit,
                fence.as_ref(),
            )
            .await?
        {
            Ok(Response::ObjectDeleted { revision }) => {
                metrics::counter!("tenure_object_deletes_total").increment(1);
                reply(R::Ok(proto::ObjectDeleted {
                    key: r.key,
                    revision,
                }))
            }
            Ok(other) => Err(unexpected("an object delete", &other)),
            Err(e) => reply(R::Error(e)),
        }
    }

    async fn list(
        &self,
        request: GrpcRequest<proto::ListObjectsRequest>,
    ) -> Result<GrpcResponse<proto::ListObjectsResponse>, Status> {
        use proto::list_objects_response::Result as R;
        let caller = self.api.auth().caller(&request)?;
        let r = sized(request.into_inner())?;
        caller.check(Perm::Read, &r.prefix)?;
        let reply = |result| {
            Ok(GrpcResponse::new(proto::ListObjectsResponse {
                result: Some(result),
            }))
        };
        let store = match self.prefix_store(&r.prefix, r.store, "listing") {
            Ok(s) => s,
            Err(e) => return reply(R::Error(e)),
        };
        let req = ObjectRequest::List {
            prefix: r.prefix.clone(),
        };
        match self
            .run(store, None, req, self.api.request_timeout(), None)
            .await?
        {
            Ok(Response::Objects { revision, objects }) => {
                let limit = if r.limit == 0 {
                    usize::MAX
                } else {
                    r.limit as usize
                };
                reply(R::Ok(proto::ObjectList {
                    store: store.0,
                    revision,
                    objects: objects.iter().take(limit).map(meta_to_proto).collect(),
                }))
            }
            Ok(other) => Err(unexpected("an object list", &other)),
            Err(e) => reply(R::Error(e)),
        }
    }

    async fn multipart_initiate(
        &self,
        request: GrpcRequest<proto::MultipartInitiateRequest>,
    ) -> Result<GrpcResponse<proto::MultipartInitiateResponse>, Status> {
        use proto::multipart_initiate_response::Result as R;
        let caller = self.api.auth().caller(&request)?;
        let r = sized(request.into_inner())?;
        caller.check(Perm::Write, &r.key)?;
        let reply = |result| {
            Ok(GrpcResponse::new(proto::MultipartInitiateResponse {
                result: Some(result),
            }))
        };
        let store = match self.key_store(&r.key) {
            Ok(s) => s,
            Err(e) => return reply(R::Error(e)),
        };
        let req = ObjectRequest::MultipartInitiate {
            key: r.key.clone(),
            writer: writer(r.session, r.request_id),
        };
        match self
            .run(
                store,
                r.session_store.map(StoreId),
                req,
                self.api.request_timeout(),
                None,
            )
            .await?
        {
            Ok(Response::UploadStarted { upload }) => reply(R::Ok(proto::UploadStarted {
                key: r.key,
                upload: upload.to_string(),
            })),
            Ok(other) => Err(unexpected("a multipart initiate", &other)),
            Err(e) => reply(R::Error(e)),
        }
    }

    async fn upload_part(
        &self,
        request: GrpcRequest<Streaming<proto::UploadPartRequest>>,
    ) -> Result<GrpcResponse<proto::UploadPartResponse>, Status> {
        use proto::upload_part_request::Kind as U;
        use proto::upload_part_response::Result as R;
        let caller = self.api.auth().caller(&request)?;
        let mut inbound = request.into_inner();
        let reply = |result| {
            Ok(GrpcResponse::new(proto::UploadPartResponse {
                result: Some(result),
            }))
        };
        let h = match inbound.message().await?.and_then(|m| m.kind) {
            Some(U::Header(h)) => h,
            _ => {
                return reply(R::Error(invalid(
                    "the first message of a part upload is its header",
                )));
            }
        };
        caller.check(Perm::Write, &h.key)?;
        let store = match self.key_store(&h.key) {
            Ok(s) => s,
            Err(e) => return reply(R::Error(e)),
        };
        let upload = match parse_upload(&h.key, &h.upload) {
            Ok(u) => u,
            Err(e) => return reply(R::Error(e)),
        };
        if let Some(e) = self.routing_error(store, &h.key).await? {
            return reply(R::Error(e));
        }
        let limit = self.settings.max_object_size;
        let data = match gather(
            &mut inbound,
            h.size,
            limit,
            |m: proto::UploadPartRequest| match m.kind {
                Some(U::Data(d)) => Some(d),
                _ => None,
            },
        )
        .await?
        {
            Ok(d) => d,
            Err(e) => return reply(R::Error(e)),
        };
        let limit = write_limit(&self.api, data.len());
        let req = ObjectRequest::MultipartPart {
            key: h.key,
            upload,
            part: h.part,
            data,
        };
        match self.run(store, None, req, limit, None).await? {
            Ok(Response::PartStored { part, checksum }) => {
                reply(R::Ok(proto::PartStored { part, checksum }))
            }
            Ok(other) => Err(unexpected("a part upload", &other)),
            Err(e) => reply(R::Error(e)),
        }
    }

    async fn multipart_complete(
        &self,
        request: GrpcRequest<proto::MultipartCompleteRequest>,
    ) -> Result<GrpcResponse<proto::PutObjectResponse>, Status> {
        use proto::put_object_response::Result as R;
        let caller = self.api.auth().caller(&request)?;
        let r = sized(request.into_inner())?;
        caller.check(Perm::Write, &r.key)?;
        let reply = |result| {
            Ok(GrpcResponse::new(proto::PutObjectResponse {
                result: Some(result),
            }))
        };
        let store = match self.key_store(&r.key) {
            Ok(s) => s,
            Err(e) => return reply(R::Error(e)),
        };
        let (upload, cond) = match (parse_upload(&r.key, &r.upload), conditions(r.conditions)) {
            (Ok(u), Ok(c)) => (u, c),
            (Err(e), _) | (_, Err(e)) => return reply(R::Error(e)),
        };
        let fence = cond.fence.clone();
        let req = ObjectRequest::MultipartComplete {
            key: r.key.clone(),
            upload,
            parts: r.parts,
            writer: writer(r.session, r.request_id),
            cond,
        };
        let limit = self.api.request_timeout();
        match self
            .run(
                store,
                r.session_store.map(StoreId),
                req,
                limit,
                fence.as_ref(),
            )
            .await?
        {
            Ok(Response::ObjectWritten { revision, uuid }) => reply(R::Ok(proto::ObjectWritten {
                key: r.key,
                revision,
                uuid: uuid.to_string(),
            })),
            Ok(other) => Err(unexpected("a multipart completion", &other)),
            Err(e) => reply(R::Error(e)),
        }
    }

    async fn multipart_abort(
        &self,
        request: GrpcRequest<proto::MultipartAbortRequest>,
    ) -> Result<GrpcResponse<proto::MultipartAbortResponse>, Status> {
        use proto::multipart_abort_response::Result as R;
        let caller = self.api.auth().caller(&request)?;
        let r = sized(request.into_inner())?;
        caller.check(Perm::Write, &r.key)?;
        let reply = |result| {
            Ok(GrpcResponse::new(proto::MultipartAbortResponse {
                result: Some(result),
            }))
        };
        let store = match self.key_store(&r.key) {
            Ok(s) => s,
            Err(e) => return reply(R::Error(e)),
        };
        let upload = match parse_upload(&r.key, &r.upload) {
            Ok(u) => u,
            Err(e) => return reply(R::Error(e)),
        };
        let req = ObjectRequest::MultipartAbort { key: r.key, upload };
        match self
            .run(store, None, req, self.api.request_timeout(), None)
            .await?
        {
            Ok(Response::UploadAborted) => reply(R::Ok(proto::UploadAborted {})),
            Ok(other) => Err(unexpected("a multipart abort", &other)),
            Err(e) => reply(R::Error(e)),
        }
    }
}
