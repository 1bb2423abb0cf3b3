//! The typed errors a client sees (DESIGN §8): one enum for every protocol's refusals, so
//! the server maps each to one wire status and the client back to one error.

use crate::ids::{DeviceId, StoreId};
use crate::lockctl::FencingToken;
use serde::{Deserialize, Serialize};

/// Typed client errors (DESIGN §8).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ClientError {
    /// This device does not manage the store; try `hint`.
    #[error("not the manager of this store (try {hint:?})")]
    NotManager {
        /// Where the manager may be.
        hint: Option<DeviceId>,
    },
    /// The store has no quorum or coverage reachable here, or is changing layout.
    #[error("store {store} is unavailable")]
    Unavailable {
        /// The store.
        store: StoreId,
    },
    /// Unknown store.
    #[error("unknown store {0}")]
    UnknownStore(StoreId),
    /// The session expired (or never existed in this store).
    #[error("session expired")]
    SessionExpired,
    /// The lock cannot be granted now (a `try` acquire).
    #[error("lock is held")]
    WouldBlock,
    /// This wait would close a cycle in the waits-for graph; it was refused.
    #[error("deadlock")]
    Deadlock,
    /// The wait timed out.
    #[error("timed out")]
    Timeout,
    /// Malformed lock name, or a name that does not belong to the store.
    #[error("invalid name: {0}")]
    InvalidName(String),
    /// The session does not hold the lock.
    #[error("lock not held")]
    NotHeld,
    /// The request conflicts with what the session already holds or asked for.
    #[error("rejected: {0}")]
    Rejected(String),
    /// A lookup error.
    #[error(transparent)]
    Lookup(#[from] crate::lookup::LookupError),
    /// A value, object or key larger than the configured limit.
    #[error("too large: {size} bytes (limit {limit})")]
    TooLarge {
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// A fenced write or release presented a token that is not the lock's current one.
    #[error("stale fencing token (current: {current:?})")]
    StaleToken {
        /// The lock's current holder's token, if it is held.
        current: Option<FencingToken>,
    },
    /// An object error.
    #[error(transparent)]
    Object(#[from] crate::objects::ObjectError),
}
