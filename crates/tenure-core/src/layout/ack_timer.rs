//! How long a manager waits for its chunks' ACCEPTED before marking the late ones failed
//! (SafeTalk over seed 000's chunks). A fixed timeout declares a busy but healthy chunk
//! failed as soon as its device is loaded past it — and a failed chunk costs an epoch
//! transition, which loads every device more. The timeout follows the batch round times
//! the manager measured instead (the estimator of RFC 6298: smoothed round time plus four
//! times its mean deviation), between the configured `ack_timeout` and `ack_timeout_max`.

use crate::time::Instant;
use std::time::Duration;

/// A manager's measure of its batches' round times.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AckTimer {
    /// Smoothed round time, once one was measured.
    srtt: Option<Duration>,
    /// Mean deviation of the round time.
    rttvar: Duration,
}

impl AckTimer {
    /// A batch sent at `sent` was accepted by every live chunk at `now`.
    pub fn sample(&mut self, sent: Instant, now: Instant) {
        let r = now.saturating_since(sent);
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                let dev = s.abs_diff(r);
                self.rttvar = (self.rttvar * 3 + dev) / 4;
                self.srtt = Some((s * 7 + r) / 8);
            }
        }
    }

    /// The timeout of the next batch: the measured round time with its deviation, no
    /// less than `floor` and no more than `cap`.
    pub fn timeout(&self, floor: Duration, cap: Duration) -> Duration {
        let t = self.srtt.map_or(floor, |s| s + self.rttvar * 4);
        t.clamp(floor, cap.max(floor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn no_measure_means_the_floor() {
        assert_eq!(AckTimer::default().timeout(ms(300), ms(1000)), ms(300));
    }

    /// Round times of 200-260 ms (a loaded device) raise the timeout past a 300 ms floor;
    /// fast rounds bring it back down to the floor.
    #[test]
    fn the_timeout_follows_measured_rounds_within_its_bounds() {
        let mut t = AckTimer::default();
        for i in 0..50u64 {
            t.sample(Instant(0), Instant(0) + ms(200 + (i % 4) * 20));
        }
        let loaded = t.timeout(ms(300), ms(1000));
        assert!(loaded > ms(300) && loaded <= ms(1000), "{loaded:?}");
        for _ in 0..100 {
            t.sample(Instant(0), Instant(0) + ms(2));
        }
        assert_eq!(t.timeout(ms(300), ms(1000)), ms(300));
        for _ in 0..100 {
            t.sample(Instant(0), Instant(0) + ms(5000));
        }
        assert_eq!(t.timeout(ms(300), ms(1000)), ms(1000), "capped");
    }
}
