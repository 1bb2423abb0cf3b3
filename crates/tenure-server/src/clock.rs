//! The device's clock (DESIGN §3, "Clocks").
//!
//! Every lease, session deadline and timer of a device is timed on `CLOCK_BOOTTIME`: a
//! monotonic clock that no wall-clock step moves (an NTP step, `date -s`) and that, unlike
//! `CLOCK_MONOTONIC`, goes on counting while the host is suspended — a manager whose host
//! slept through its lease must see the lease as passed when it wakes.
//!
//! Its readings start, once per process, at the wall clock's reading: a device's
//! `tenure_core::Instant` is the wall time of its start plus the boot clock's progress
//! since. Nothing that decides safety compares those readings across devices or across
//! restarts (leases travel as lengths, a store's tables hold the store's own time); the
//! wall-clock origin only keeps the readings near wall time for what is stamped with
//! them and read by people and other hosts (lookup versions and start times, upload ids).
//! A step of the wall clock after the start changes none of them.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// (wall time at the first reading, boot clock at the first reading), in µs.
static ORIGIN: OnceLock<(u64, u64)> = OnceLock::new();

/// `CLOCK_BOOTTIME` in µs.
fn boottime_us() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

/// The wall clock in µs since the Unix epoch (for people and other hosts only).
pub fn wall_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// The device's time now, in µs: monotonic, never moved by the wall clock.
pub fn now_us() -> u64 {
    let (wall0, boot0) = *ORIGIN.get_or_init(|| (wall_us(), boottime_us()));
    wall0 + boottime_us().saturating_sub(boot0)
}

/// The device's clock as the core reads it.
#[derive(Debug, Default)]
pub struct Clock {
    last: u64,
}

impl Clock {
    /// Local time now (never behind an earlier reading).
    pub fn now(&mut self) -> tenure_core::Instant {
        self.last = self.last.max(now_us());
        tenure_core::Instant(self.last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // DESIGN §3, "Clocks": readings start at the wall clock and go on at the boot
    // clock's rate, never backwards.
    #[test]
    fn readings_start_at_the_wall_clock_and_never_go_back() {
        let a = now_us();
        assert!(a.abs_diff(wall_us()) < 60_000_000, "{a} vs {}", wall_us());
        let mut c = Clock::default();
        let mut last = c.now();
        for _ in 0..1000 {
            let t = c.now();
            assert!(t >= last);
            last = t;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(c.now().0 >= a + 20_000);
    }
}
