//! Concluding an object request: what its answer (or the client giving up) tells the
//! client and the object checkers.

use super::{ObjKind, ObjReq, Owner, Upload, sum};
use crate::objects::ObjectViolation;
use crate::world::{Event, START_US, World};
use std::collections::BTreeSet;
use tenure_core::DeviceId;
use tenure_core::io::{ClientError, Response};
use tenure_core::objects::ObjectError;

impl World {
    /// Conclude a request (`result` none: the client gave up).
    pub(super) fn obj_done(
        &mut self,
        id: u64,
        r: ObjReq,
        from: Option<DeviceId>,
        result: Option<Result<Response, ClientError>>,
    ) {
        let c = match r.owner {
            Owner::Watcher(w) => return self.watch_done(w, id, r, from, result),
            Owner::Client(c) => c,
        };
        let now = self.now;
        let store = r.store;
        let st = &mut self.report.objects;
        match (r.kind, result) {
            (ObjKind::Open, Some(Ok(Response::SessionOpened { session, ttl }))) => {
                self.obj.clients[c].session = Some((session, ttl));
                let ka = ttl.as_micros() as u64 / 3;
                self.schedule(now + ka, Event::ObjKeepAlive(c, session));
            }
            (ObjKind::KeepAlive, result) => {
                let cl = &mut self.obj.clients[c];
                cl.keepalive = None;
                let Some((s, ttl)) = cl.session else {
                    return;
                };
                match result {
                    Some(Err(ClientError::SessionExpired)) => cl.session = None,
                    Some(Ok(_)) => {
                        let ka = ttl.as_micros() as u64 / 3;
                        self.schedule(now + ka, Event::ObjKeepAlive(c, s));
                    }
                    _ => self.schedule(now + 50_000, Event::ObjKeepAlive(c, s)),
                }
                return;
            }
            (
                ObjKind::Put {
                    key,
                    content,
                    cas,
                    fence,
                    ephemeral,
                },
                result,
            ) => match result {
                Some(Ok(Response::ObjectWritten { revision, uuid })) => {
                    st.puts += 1;
                    let inline = content.1 <= self.obj.knobs.inline_max as u64;
                    st.inline += inline as u64;
                    st.multi_block +=
                        (!inline && content.1 > crate::objects::BLOCK_SIZE as u64) as u64;
                    st.ephemeral += ephemeral as u64;
                    self.obj
                        .check
                        .put_acked(store, &key, revision, uuid, content, now - START_US);
                    if let Some(expected) = cas {
                        self.report.objects.cas_wins += 1;
                        self.obj.check.cas_won(store, &key, expected, revision);
                    }
                    if let Some((lock, token)) = fence {
                        self.report.objects.fenced_landed += 1;
                        (self.obj.check).fenced_landed(
                            store,
                            &key,
                            &lock,
                            token,
                            r.first_sent - START_US,
                        );
                    }
                    self.obj.clients[c].known.insert(key, revision);
                }
                Some(Err(ClientError::Object(
                    ObjectError::Exists { revision: cur }
                    | ObjectError::RevisionMismatch { current: Some(cur) },
                ))) => {
                    st.cas_losses += 1;
                    self.obj.clients[c].known.insert(key, cur);
                }
                Some(Err(ClientError::Object(ObjectError::RevisionMismatch { current: None }))) => {
                    st.cas_losses += 1;
                    self.obj.clients[c].known.insert(key, 0);
                }
                Some(Err(ClientError::StaleToken { .. })) => st.fenced_refused += 1,
                Some(Err(ClientError::SessionExpired)) => self.obj.clients[c].session = None,
                _ => {}
            },
            (ObjKind::TooLarge, Some(result)) => match result {
                Err(ClientError::TooLarge { .. }) => st.too_large += 1,
                other => self
                    .obj
                    .check
                    .violations
                    .push(ObjectViolation::TooLargeAccepted {
                        store,
                        answer: format!("{other:?}"),
                    }),
            },
            (ObjKind::Get { key }, Some(result)) => match result {
                Ok(Response::Object { meta, data }) => {
                    st.gets += 1;
                    let found = (meta.revision, meta.uuid, meta.checksum, meta.size);
                    (self.obj.check).read(
                        store,
                        &key,
                        r.first_sent - START_US,
                        Some(found),
                        Some(sum(&data)),
                    );
                    self.obj.clients[c].known.insert(key, meta.revision);
                }
                Err(ClientError::Object(ObjectError::NoSuchObject)) => {
                    st.get_missing += 1;
                    self.obj
                        .check
                        .read(store, &key, r.first_sent - START_US, None, None);
                    self.obj.clients[c].known.insert(key, 0);
                }
                Err(ClientError::Object(ObjectError::DataUnavailable)) => st.get_unavailable += 1,
                _ => {}
            },
            (ObjKind::Head { key }, Some(result)) => match result {
                Ok(Response::ObjectMeta(meta)) => {
                    st.heads += 1;
                    let found = (meta.revision, meta.uuid, meta.checksum, meta.size);
                    (self.obj.check).read(store, &key, r.first_sent - START_US, Some(found), None);
                    self.obj.clients[c].known.insert(key, meta.revision);
                }
                Err(ClientError::Object(ObjectError::NoSuchObject)) => {
                    st.get_missing += 1;
                    self.obj
                        .check
                        .read(store, &key, r.first_sent - START_US, None, None);
                }
                _ => {}
            },
            (ObjKind::Delete { key }, Some(Ok(Response::ObjectDeleted { revision }))) => {
                st.deletes += 1;
                self.obj
                    .check
                    .delete_acked(store, &key, revision, now - START_US);
                self.obj.clients[c].known.insert(key, 0);
            }
            (ObjKind::Initiate { key }, Some(Ok(Response::UploadStarted { upload }))) => {
                st.multipart_started += 1;
                let parts = 1 + self.obj.rng.below(4) as u32;
                let seed = self.obj.rng.next_u64();
                self.obj.clients[c].upload = Some(Upload {
                    key,
                    id: upload,
                    parts,
                    seed,
                    stored: BTreeSet::new(),
                });
            }
            (ObjKind::Part { part }, Some(result)) => match result {
                Ok(Response::PartStored { .. }) => {
                    st.parts += 1;
                    if let Some(u) = self.obj.clients[c].upload.as_mut() {
                        u.stored.insert(part);
                    }
                }
                Err(ClientError::Object(_)) => self.obj.clients[c].upload = None,
                _ => {}
            },
            (ObjKind::Complete { key, content }, Some(result)) => {
                self.obj.clients[c].upload = None;
                if let Ok(Response::ObjectWritten { revision, uuid }) = result {
                    st.puts += 1;
                    st.multi_block += (content.1 > crate::objects::BLOCK_SIZE as u64) as u64;
                    st.multipart_completed += 1;
                    self.obj
                        .check
                        .put_acked(store, &key, revision, uuid, content, now - START_US);
                    self.obj.clients[c].known.insert(key, revision);
                }
            }
            // A completion the client gave up on may have landed, with its parts: the
            // client forgets the upload rather than complete it again with others (the
            // upload's completion answers every later completion with its own result).
            (ObjKind::Complete { .. }, None) => self.obj.clients[c].upload = None,
            (ObjKind::Abort, Some(result)) => {
                self.obj.clients[c].upload = None;
                if let Ok(Response::UploadAborted) = result {
                    st.multipart_aborted += 1;
                }
            }
            _ => {}
        }
        if self.obj.clients[c].inflight == Some(id) {
            self.obj.clients[c].inflight = None;
        }
        self.obj_think(c);
    }
}
