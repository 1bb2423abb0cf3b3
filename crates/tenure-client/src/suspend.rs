//! Time the host spent suspended, so that a session's conservative deadline counts it.
//!
//! The client times its sessions on `std::time::Instant`, which on Linux is
//! `CLOCK_MONOTONIC`: it stands still while the host is suspended. The devices time
//! sessions on `CLOCK_BOOTTIME`, which goes on counting (DESIGN §3, "Clocks"). A laptop
//! that sleeps through its session's TTL would otherwise wake believing it still holds
//! its locks while their manager has expired the session and granted them to another.
//! So every deadline remembers how long the host had been asleep when the request behind
//! it was sent ([`Sent`]), and is read back earlier by whatever sleep came since
//! ([`crate::locks::SessionState::until`]).
//!
//! `CLOCK_BOOTTIME − CLOCK_MONOTONIC` is the host's total suspended time since boot; it
//! only grows. Where there is no boot clock it reads zero (suspension is then not
//! counted, as before).

use std::time::{Duration, Instant};

/// The host's suspended time since boot: `CLOCK_BOOTTIME − CLOCK_MONOTONIC`.
pub fn asleep() -> Duration {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use rustix::time::{ClockId, clock_gettime};
        let d = |ts: rustix::time::Timespec| {
            Duration::new(
                ts.tv_sec.max(0) as u64,
                ts.tv_nsec.clamp(0, 999_999_999) as u32,
            )
        };
        let mono = d(clock_gettime(ClockId::Monotonic));
        let boot = d(clock_gettime(ClockId::Boottime));
        // Read monotonic first: a boot reading taken after it is never behind it.
        boot.saturating_sub(mono)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        Duration::ZERO
    }
}

/// When a request was sent: the monotonic instant and the host's suspended time then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sent {
    /// The monotonic instant of the sending.
    pub at: Instant,
    /// [`asleep`] at the sending.
    pub asleep: Duration,
}

impl Sent {
    /// Now.
    pub fn now() -> Sent {
        Sent {
            at: Instant::now(),
            asleep: asleep(),
        }
    }
}

/// `deadline`, set when the host had slept `then`, read when it has slept `now`: earlier
/// by the sleep in between (a suspended host's monotonic clock did not count it).
pub fn shifted(deadline: Instant, then: Duration, now: Duration) -> Instant {
    let slept = now.saturating_sub(then);
    deadline
        .checked_sub(slept)
        .unwrap_or(deadline.min(Instant::now()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asleep_never_goes_back() {
        let a = asleep();
        let b = asleep();
        // Both clocks tick on; the difference moves only by suspension (and by the
        // reading's own jitter, well under a millisecond).
        assert!(b + Duration::from_millis(1) >= a, "{a:?} then {b:?}");
    }

    #[test]
    fn a_sleep_after_the_sending_brings_the_deadline_earlier() {
        let d = Instant::now() + Duration::from_secs(60);
        let then = Duration::from_secs(100);
        assert_eq!(shifted(d, then, then), d);
        assert_eq!(
            shifted(d, then, then + Duration::from_secs(45)),
            d - Duration::from_secs(45)
        );
        // Readings out of order (no sleep counted backwards) leave it as it is.
        assert_eq!(shifted(d, then, Duration::from_secs(1)), d);
    }
}
