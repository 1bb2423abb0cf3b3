//! The typed errors a client sees (DESIGN §8): one enum for every protocol's refusals, so
//! the server maps each to one wire status and the client back to one error.

use crate::ids::{DeviceId, StoreId};
use crate::lockctl::FencingToken;
use serde::{Deserialize, Serialize};

/// Typed client errors (DESIGN §8).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ClientError {
    /// This device does not manage the store; try `hint`.
    #[error("this device does not manage the store; {}", manager_text(*hint))]
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
    #[error("stale fencing token; {}", current_token_text(current))]
    StaleToken {
        /// The lock's current holder's token, if it is held.
        current: Option<FencingToken>,
    },
    /// An object error.
    #[error(transparent)]
    Object(#[from] crate::objects::ObjectError),
}

/// Where the manager is, in words.
fn manager_text(hint: Option<DeviceId>) -> String {
    match hint {
        Some(d) => format!("its manager is {d}"),
        None => "its manager is not known here".into(),
    }
}

/// The lock's current token, in words.
fn current_token_text(current: &Option<FencingToken>) -> String {
    match current {
        Some(t) => format!("the lock's current token is {t}"),
        None => "the lock is not held".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages read as the CLI's: no Rust formatting (`Some(..)`, `DeviceId(..)`).
    #[test]
    fn messages_name_devices_tokens_and_revisions_in_words() {
        let cases = [
            ClientError::NotManager {
                hint: Some(DeviceId(3)),
            },
            ClientError::NotManager { hint: None },
            ClientError::StaleToken {
                current: Some(FencingToken {
                    epoch: crate::ids::Epoch(2),
                    seq: 7,
                }),
            },
            ClientError::StaleToken { current: None },
            crate::objects::ObjectError::RevisionMismatch { current: Some(4) }.into(),
            crate::objects::ObjectError::RevisionMismatch { current: None }.into(),
        ];
        let texts: Vec<String> = cases.iter().map(|e| e.to_string()).collect();
        for t in &texts {
            assert!(
                !t.contains("Some(") && !t.contains("None") && !t.contains("Id("),
                "{t}"
            );
        }
        assert_eq!(
            texts[0],
            "this device does not manage the store; its manager is d3"
        );
        assert_eq!(texts[4], "revision mismatch: the object is at revision 4");
        assert_eq!(texts[5], "revision mismatch: the key has no object");
    }
}
