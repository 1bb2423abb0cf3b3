//! The lookup service (seed 003; DESIGN §7): publish, query, watch.

pub mod convert;

use crate::Error;
use crate::proto::{self, lookup_error::Kind as LKind};
use std::time::Duration;
use tenure_core::lookup::LookupError;

/// A typed lookup error from the wire.
pub fn error_from_proto(e: proto::LookupError) -> Error {
    match e.kind {
        Some(LKind::InvalidKey(k)) => Error::Lookup(LookupError::InvalidKey(if k.key.is_empty() {
            k.reason
        } else {
            format!("{:?}: {}", k.key, k.reason)
        })),
        Some(LKind::TooLarge(t)) => Error::Lookup(LookupError::TooLarge {
            len: t.size as usize,
            max: t.limit as usize,
        }),
        Some(LKind::BadInterval(b)) => Error::Lookup(LookupError::BadInterval {
            got: Duration::from_millis(b.got_ms),
            min: Duration::from_millis(b.min_ms),
            max: Duration::from_millis(b.max_ms),
        }),
        Some(LKind::NoLeader(_)) => Error::Lookup(LookupError::NoLeader),
        Some(LKind::StaleVersion(_)) => Error::Lookup(LookupError::StaleVersion),
        Some(LKind::UnknownSubscription(u)) => {
            Error::Lookup(LookupError::UnknownSubscription(u.sub))
        }
        Some(LKind::InvalidRequest(r)) => Error::InvalidRequest(r.reason),
        None => Error::Malformed,
    }
}
