//! Time as a value passed in. The core never reads a clock: every `handle` call carries the
//! device's local `now`, which may drift from other devices' clocks by up to `δ_c`.

use serde::{Deserialize, Serialize};
use std::ops::{Add, Sub};
use std::time::Duration;

/// A point on one device's local clock, in microseconds since an arbitrary origin.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Instant(pub u64);

impl Instant {
    /// Microseconds since the origin.
    pub fn as_micros(self) -> u64 {
        self.0
    }
    /// `self - earlier`, or zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }
    /// `self - d`, clamped at the origin.
    pub fn saturating_sub(self, d: Duration) -> Instant {
        Instant(self.0.saturating_sub(d.as_micros() as u64))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d.as_micros() as u64))
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, d: Duration) -> Instant {
        self.saturating_sub(d)
    }
}

/// Earliest of two optional deadlines.
pub fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// A store's time: what the times a store's tables hold (lock-delays, wait deadlines,
/// manifests' write, check-in and deletion times, tombstone pruning) are read on.
///
/// A device's local clock is monotonic but its origin is its own (DESIGN §3, "Clocks"):
/// a time one manager wrote is meaningless on another device's clock, and on the same
/// device after a restart. So a store keeps its own time. The tables hold the newest store
/// time any applied change carried ([`crate::data::Tables::clock`]); a manager reads the
/// store's time on from there at the rate of its own clock, starting when it takes the
/// store over. Store time never goes back, and it stands still while the store has no
/// manager: a lock-delay, a deletion lease or a tombstone's age only ever lasts longer
/// across a failover or a restart, never shorter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreClock {
    /// Store time at `anchor`.
    base: Instant,
    /// Local time when the manager started reading the store's time.
    anchor: Instant,
}

impl StoreClock {
    /// Read on from `held` (the newest store time the tables hold) from local time `now`.
    pub fn start(held: Instant, now: Instant) -> StoreClock {
        StoreClock {
            base: held,
            anchor: now,
        }
    }

    /// Store time at local time `now`.
    pub fn read(&self, now: Instant) -> Instant {
        self.base + now.saturating_since(self.anchor)
    }

    /// The local time at which store time reaches `t` (now or earlier for a store time
    /// already passed: the anchor at the latest).
    pub fn local(&self, t: Instant) -> Instant {
        self.anchor + t.saturating_since(self.base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // DESIGN §3, "Clocks": store time reads on from the newest time the tables hold, at
    // the manager's rate, and maps back to the manager's clock for its timers.
    #[test]
    fn store_time_reads_on_from_the_tables_and_maps_back() {
        // The tables hold store time 50 s; a manager whose clock reads 7 s takes over.
        let c = StoreClock::start(Instant(50_000_000), Instant(7_000_000));
        assert_eq!(c.read(Instant(7_000_000)), Instant(50_000_000));
        assert_eq!(c.read(Instant(9_500_000)), Instant(52_500_000));
        // A lock-delay ending at store time 51 s fires at local 8 s.
        assert_eq!(c.local(Instant(51_000_000)), Instant(8_000_000));
        // A store time already past maps to the takeover, never before it.
        assert_eq!(c.local(Instant(10_000_000)), Instant(7_000_000));
    }
}
