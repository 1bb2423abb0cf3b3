//! Conversions between the lock service's wire messages (`proto/tenure.proto`) and the
//! core's lock types ([`tenure_core::lockctl`], [`tenure_core::io::request::WaitSpec`]).
//! The server reads requests and renders answers with these, and the client does the
//! reverse, so both sides share one mapping (as [`crate::lookup::convert`] does for
//! lookup).

use crate::proto;
use std::time::Duration;
use tenure_core::Epoch;
use tenure_core::io::request::WaitSpec;
use tenure_core::lockctl::{FencingToken, LockMode};

/// A lock mode on the wire.
pub fn mode_to_proto(m: LockMode) -> i32 {
    match m {
        LockMode::Shared => proto::LockMode::Shared as i32,
        LockMode::Exclusive => proto::LockMode::Exclusive as i32,
    }
}

/// A lock mode from the wire: unspecified means exclusive (the safe default); an
/// unknown value is an error.
pub fn mode_from_proto(m: i32) -> Result<LockMode, String> {
    match proto::LockMode::try_from(m) {
        Ok(proto::LockMode::Shared) => Ok(LockMode::Shared),
        Ok(proto::LockMode::Exclusive | proto::LockMode::Unspecified) => Ok(LockMode::Exclusive),
        Err(_) => Err(format!("unknown lock mode {m}")),
    }
}

/// A fencing token on the wire.
pub fn token_to_proto(t: FencingToken) -> proto::FencingToken {
    proto::FencingToken {
        epoch: t.epoch.0,
        seq: t.seq,
    }
}

/// A fencing token from the wire.
pub fn token_from_proto(t: proto::FencingToken) -> FencingToken {
    FencingToken {
        epoch: Epoch(t.epoch),
        seq: t.seq,
    }
}

impl From<proto::FencingToken> for FencingToken {
    fn from(t: proto::FencingToken) -> Self {
        token_from_proto(t)
    }
}

impl From<FencingToken> for proto::FencingToken {
    fn from(t: FencingToken) -> Self {
        token_to_proto(t)
    }
}

/// How an acquire (or a campaign) waits, as the wire's `try` and `timeout_ms` fields: a
/// timeout is at least 1 ms (0 means forever).
pub fn wait_to_proto(w: WaitSpec) -> (bool, u64) {
    match w {
        WaitSpec::Try => (true, 0),
        WaitSpec::Timeout(d) => (
            false,
            (d.as_millis().min(u128::from(u64::MAX)) as u64).max(1),
        ),
        WaitSpec::Forever => (false, 0),
    }
}

/// How an acquire waits, from the wire's `no_wait` (or the older `try`) and
/// `timeout_ms` fields.
pub fn wait_from_proto(no_wait: bool, timeout_ms: u64) -> WaitSpec {
    if no_wait {
        WaitSpec::Try
    } else if timeout_ms > 0 {
        WaitSpec::Timeout(Duration::from_millis(timeout_ms))
    } else {
        WaitSpec::Forever
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_tokens_and_waits_go_to_the_wire_and_back() {
        for m in [LockMode::Shared, LockMode::Exclusive] {
            assert_eq!(mode_from_proto(mode_to_proto(m)), Ok(m));
        }
        assert_eq!(mode_from_proto(0), Ok(LockMode::Exclusive));
        assert!(mode_from_proto(99).is_err());
        let t = FencingToken {
            epoch: Epoch(4),
            seq: 17,
        };
        assert_eq!(token_from_proto(token_to_proto(t)), t);
        for w in [
            WaitSpec::Try,
            WaitSpec::Forever,
            WaitSpec::Timeout(Duration::from_millis(250)),
        ] {
            let (t, ms) = wait_to_proto(w);
            assert_eq!(wait_from_proto(t, ms), w);
        }
        // A timeout under a millisecond still waits (0 on the wire would be forever).
        let (t, ms) = wait_to_proto(WaitSpec::Timeout(Duration::from_micros(10)));
        assert_eq!(
            wait_from_proto(t, ms),
            WaitSpec::Timeout(Duration::from_millis(1))
        );
    }
}
