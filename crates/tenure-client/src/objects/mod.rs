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
//! the same store ([`Objects::put_fenced`] with a [`LockGuard`](crate::LockGuard), or
//! [`PutOptions::fence`] with a name and token): the store applies the write only if the
//! lock is held with exactly that token, else [`Error::StaleToken`].
//!
//! [`Objects::watch`] delivers the changes at a prefix in revision order on a session
//! stream of its own. When the store's manager moves, the watch resumes at the new one
//! from the last revision it delivered (nothing is lost or repeated); when the store's
//! history no longer reaches back that far, it re-reads the prefix and hands the caller
//! an explicit [`WatchEvent::Reset`] with the current objects before continuing: never a
//! silent gap.

use crate::proto;
use crate::{Client, Error, FencingToken, Result};
use prost::bytes::Bytes;
use std::sync::Arc;

mod ops;
mod watch;

pub use watch::{Change, ChangeInfo, ObjectWatch, WatchEvent};

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
