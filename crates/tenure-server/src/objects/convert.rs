//! The object service's conversions between the wire and the core: typed errors with
//! their key filled in, descriptions and changes, write conditions (their fence's lock
//! name checked like a lock request's), and the writer of a request.

use crate::grpc::{invalid_name, invalid_request as invalid, token_to_proto};
use bytes::Bytes;
use tenure_client::proto::{self, error::Kind};
use tenure_core::ids::{SessionId, StoreId};
use tenure_core::io::{Request, Writer};
use tenure_core::lockctl::FencingToken;
use tenure_core::objects::{Conditions, Fence, ObjectError, ObjectMeta, Uuid};

/// The typed wire error of an object error.
pub(crate) fn object_error_kind(e: &ObjectError) -> Kind {
    match e {
        ObjectError::Exists { revision } => Kind::ObjectExists(proto::ObjectExists {
            key: String::new(),
            revision: *revision,
        }),
        ObjectError::RevisionMismatch { current } => {
            Kind::RevisionMismatch(proto::RevisionMismatch {
                key: String::new(),
                current: *current,
            })
        }
        ObjectError::NoSuchObject => Kind::NoSuchObject(proto::NoSuchObject::default()),
        ObjectError::NoSuchUpload(u) => Kind::NoSuchUpload(proto::NoSuchUpload {
            key: String::new(),
            upload: u.to_string(),
        }),
        ObjectError::Incomplete { missing } => Kind::UploadIncomplete(proto::UploadIncomplete {
            missing: *missing as u64,
        }),
        ObjectError::NoSuchPart(p) => Kind::NoSuchPart(proto::NoSuchPart { part: *p }),
        ObjectError::Compacted { asked, compacted } => Kind::Compacted(proto::Compacted {
            asked: *asked,
            compacted: *compacted,
        }),
        ObjectError::DataUnavailable => Kind::DataUnavailable(proto::DataUnavailable::default()),
    }
}

/// Put the key (and the presented fencing token) into the typed errors that carry them.
pub(super) fn fill_key(e: &mut proto::Error, key: &str, fence: Option<&Fence>) {
    let key = key.chars().take(1024).collect();
    match &mut e.kind {
        Some(Kind::ObjectExists(x)) => x.key = key,
        Some(Kind::RevisionMismatch(x)) => x.key = key,
        Some(Kind::NoSuchObject(x)) => x.key = key,
        Some(Kind::NoSuchUpload(x)) => x.key = key,
        Some(Kind::DataUnavailable(x)) => x.key = key,
        Some(Kind::InvalidName(x)) if x.name.is_empty() => x.name = key,
        Some(Kind::StaleToken(x)) => x.presented = fence.map(|f| token_to_proto(f.token)),
        _ => {}
    }
    if let Some(f) = fence
        && matches!(e.kind, Some(Kind::StaleToken(_)))
    {
        e.message = format!(
            "stale fencing token {}.{} for lock {} (the lock is held with another token, or \
             not at all)",
            f.token.epoch.0, f.token.seq, f.lock
        );
    }
}

/// An object's description on the wire.
pub(crate) fn meta_to_proto(m: &ObjectMeta) -> proto::ObjectInfo {
    proto::ObjectInfo {
        key: m.key.clone(),
        revision: m.revision,
        uuid: m.uuid.to_string(),
        size: m.size,
        checksum: m.checksum,
        owner_session: m.owner.map(|s| s.0),
        blocks: m.blocks.len() as u32,
    }
}

/// A change on the wire.
fn change_to_proto(c: &tenure_core::objects::Change) -> proto::ObjectChange {
    use tenure_core::objects::ChangeKind;
    let mut out = proto::ObjectChange {
        revision: c.revision,
        key: c.key.clone(),
        ..Default::default()
    };
    match &c.kind {
        ChangeKind::Put {
            uuid,
            size,
            checksum,
        } => {
            out.uuid = uuid.to_string();
            out.size = *size;
            out.checksum = *checksum;
        }
        ChangeKind::Delete => out.deleted = true,
    }
    out
}

/// Changes on the wire, with their values when the watch asked for them.
pub(crate) fn changes_to_proto(
    changes: &[tenure_core::objects::Change],
    values: Vec<Option<Bytes>>,
) -> Vec<proto::ObjectChange> {
    let mut wire: Vec<proto::ObjectChange> = changes.iter().map(change_to_proto).collect();
    for (c, v) in wire.iter_mut().zip(values) {
        c.value = v.map(|b| b.to_vec());
    }
    wire
}

/// A write's conditions from the wire.
pub(crate) fn conditions(c: Option<proto::WriteConditions>) -> Result<Conditions, proto::Error> {
    let c = c.unwrap_or_default();
    let fence = match c.fence {
        None => None,
        Some(f) => {
            let token = f.token.ok_or_else(|| invalid("a fence needs a token"))?;
            LockNameCheck::lock(&f.lock)?;
            Some(Fence {
                lock: f.lock,
                token: FencingToken {
                    epoch: tenure_core::ids::Epoch(token.epoch),
                    seq: token.seq,
                },
            })
        }
    };
    Ok(Conditions {
        if_absent: c.if_absent,
        if_revision: c.if_revision,
        fence,
    })
}

/// Lock names in conditions are checked like lock requests' names.
struct LockNameCheck;

impl LockNameCheck {
    fn lock(name: &str) -> Result<(), proto::Error> {
        tenure_core::lockctl::LockName::parse(name)
            .map(|_| ())
            .map_err(|e| invalid_name(name, &e.to_string()))
    }
}

/// A request under a session of another store (`home`) runs under the session's child
/// in the request's store (DESIGN §4).
pub(crate) fn under(home: Option<StoreId>, req: Request) -> Request {
    match home {
        Some(home) if home != req.store() => Request::Under(tenure_core::io::Under {
            home,
            req: Box::new(req),
        }),
        _ => req,
    }
}

pub(super) fn writer(session: u64, request_id: u64) -> Writer {
    Writer {
        session: (session != 0).then_some(SessionId(session)),
        request_id,
    }
}

pub(super) fn too_large(size: u64, limit: u64, what: &str) -> proto::Error {
    proto::Error {
        message: format!("{what} of {size} bytes is larger than the limit of {limit} bytes"),
        kind: Some(Kind::TooLarge(proto::TooLarge { size, limit })),
    }
}

pub(super) fn parse_upload(key: &str, s: &str) -> Result<Uuid, proto::Error> {
    s.parse().map_err(|_| proto::Error {
        message: format!("no such upload {s:?} under {key}"),
        kind: Some(Kind::NoSuchUpload(proto::NoSuchUpload {
            key: key.to_string(),
            upload: s.chars().take(64).collect(),
        })),
    })
}
