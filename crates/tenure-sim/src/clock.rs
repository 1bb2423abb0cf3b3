//! Per-device clocks (TigerBeetle's `testing/time.zig`: every replica has its own clock
//! with a drift model, and the clock ticks on while the replica is down or paused).
//!
//! A device's local clock reads `real + offset + model(real)` microseconds, where `real`
//! is the simulator's virtual real time. The skew `offset + model(real)` is kept within
//! `±skew_max_us` for the whole run, with `skew_max_us = δ_c / 2`, so any two devices'
//! clocks differ by at most `δ_c` — the bound the protocol is configured to trust (DESIGN
//! §3: a device never trusts a lease past `expiry - δ_c`). Inside that bound the
//! simulator is as unkind as it can be:
//!
//! - [`Drift::Linear`]: a constant rate error, sized so that it uses its share of the
//!   bound exactly at the end of the run;
//! - [`Drift::Periodic`]: a triangle wave (integer arithmetic only, so no platform
//!   floating-point differences can break replay);
//! - [`Drift::Step`]: the clock jumps forward once (an NTP correction), never backwards.
//!
//! Every model is monotonic non-decreasing: a protocol core may assume its `now` never
//! goes back.
//!
//! **Wall-clock steps** (DESIGN §3, "Clocks"). Beside its drift a device has a wall clock
//! that steps, forward and back, by any size ([`Clock::steps`]: an NTP step, `date -s`).
//! The server times everything on the boot clock and reads the wall clock once, at its
//! start, for its clock's origin (`tenure_server::clock`): so a step moves nothing while
//! the device runs, and a device that restarts after a step reads its clock from an
//! origin that far off the others' ([`Clock::life_us`]) — far beyond δ_c, which then
//! bounds only how much two devices' clocks *advance* differently over a lease. The
//! planted bug `wall-clock-deadlines` feeds the core the wall clock itself, steps and all
//! (made monotonic, as the server's clock once was).

use serde::Serialize;
use tenure_core::Instant;
use tenure_core::rng::Rng;

/// How a clock's rate error behaves over time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Drift {
    /// No rate error.
    None,
    /// `model(t) = t · ppm / 10⁶`.
    Linear {
        /// Parts per million, signed.
        ppm: i64,
    },
    /// A triangle wave of amplitude `amplitude_us` and period `period_us`.
    Periodic {
        /// Peak deviation.
        amplitude_us: i64,
        /// Full period.
        period_us: u64,
        /// Phase shift.
        phase_us: u64,
    },
    /// One forward jump of `jump_us` at real time `at_us`.
    Step {
        /// When.
        at_us: u64,
        /// How far.
        jump_us: i64,
    },
}

/// One device's clock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Clock {
    /// Constant offset from real time.
    pub offset_us: i64,
    /// Rate model.
    pub drift: Drift,
    /// A reading every clock of the world adds (not skew: a restored cluster's clocks
    /// read on from the snapshot's time).
    pub base_us: u64,
    /// Steps of the device's wall clock: (real time, jump in µs), in time order.
    pub steps: Vec<(u64, i64)>,
    /// How far this life's clock reads from the drift model: the wall clock's steps up
    /// to the device's last boot (its clock's origin is the wall clock then).
    pub life_us: i64,
    /// Planted bug `wall-clock-deadlines`: the core reads the wall clock, steps and all.
    pub wall_deadlines: bool,
}

/// A reading every clock adds in runs with wall-clock steps, so that a clock stepped
/// back by an hour still reads above zero.
pub const STEP_LIFT_US: u64 = 2 * 3_600_000_000;

impl Clock {
    /// This clock, reading `us` more at every instant.
    pub fn later(mut self, us: u64) -> Clock {
        self.base_us += us;
        self
    }

    /// The wall clock's steps up to real time `real`.
    pub fn stepped_us(&self, real: u64) -> i64 {
        (self.steps.iter())
            .take_while(|(at, _)| *at <= real)
            .map(|(_, j)| *j)
            .sum()
    }

    /// The device (re)boots at real time `real`: its clock's origin is its wall clock's.
    pub fn boot(&mut self, real: u64) {
        self.life_us = self.stepped_us(real);
    }

    /// The wall clock at `real` (drift, offset and steps).
    pub fn wall(&self, real: u64) -> Instant {
        let v = real as i64 + self.skew_us(real) + self.stepped_us(real) + self.base_us as i64;
        Instant(v.max(0) as u64)
    }

    /// How far readings can be from real time (the band and every step).
    fn spread_us(&self, skew_max_us: u64) -> u64 {
        let steps: u64 = self.steps.iter().map(|(_, j)| j.unsigned_abs()).sum();
        skew_max_us + steps + self.life_us.unsigned_abs() + 2
    }

    /// A perfect clock.
    pub fn perfect() -> Clock {
        Clock {
            offset_us: 0,
            drift: Drift::None,
            base_us: 0,
            steps: Vec::new(),
            life_us: 0,
            wall_deadlines: false,
        }
    }

    /// Draw a clock whose skew stays within `±skew_max_us` over `horizon_us` of real time.
    /// The offset takes up to half the bound and the drift model the other half.
    pub fn draw(rng: &mut Rng, skew_max_us: u64, horizon_us: u64) -> Clock {
        let half = (skew_max_us / 2) as i64;
        let offset_us = rng.below(2 * half as u64 + 1) as i64 - half;
        let drift = match rng.below(4) {
            0 => Drift::None,
            1 => {
                // |ppm| · horizon / 10⁶ ≤ half.
                let ppm_max = (half as u128 * 1_000_000 / horizon_us.max(1) as u128) as i64;
                Drift::Linear {
                    ppm: rng.below(2 * ppm_max as u64 + 1) as i64 - ppm_max,
                }
            }
            2 => Drift::Periodic {
                amplitude_us: rng.below(half as u64 + 1) as i64,
                period_us: 1_000_000 + rng.below(20_000_000),
                phase_us: rng.below(20_000_000),
            },
            _ => Drift::Step {
                at_us: rng.below(horizon_us.max(1)),
                // From the bottom of the band to at most its top.
                jump_us: rng.below(half as u64 + 1) as i64,
            },
        };
        let mut c = Clock {
            offset_us,
            drift,
            base_us: 0,
            steps: Vec::new(),
            life_us: 0,
            wall_deadlines: false,
        };
        if let Drift::Step { jump_us, .. } = c.drift {
            // Start low enough that the jump stays in the band.
            c.offset_us = c.offset_us.min(half - jump_us);
        }
        c
    }

    /// The model's contribution at real time `real`.
    fn model(&self, real: u64) -> i64 {
        match self.drift {
            Drift::None => 0,
            Drift::Linear { ppm } => match (real as i64).checked_mul(ppm) {
                Some(x) if real <= i64::MAX as u64 => x / 1_000_000,
                _ => (real as i128 * ppm as i128 / 1_000_000) as i64,
            },
            Drift::Periodic {
                amplitude_us,
                period_us,
                phase_us,
            } => {
                // Triangle wave in [-a, a]: up for half a period, down for the other.
                let p = period_us.max(2) as i128;
                let x = ((real + phase_us) as i128) % p;
                let a = amplitude_us as i128;
                let half = p / 2;
                let v = if x < half {
                    -a + 2 * a * x / half
                } else {
                    a - 2 * a * (x - half) / (p - half)
                };
                v as i64
            }
            Drift::Step { at_us, jump_us } => {
                if real >= at_us {
                    jump_us
                } else {
                    0
                }
            }
        }
    }

    /// Skew from real time at `real` (local − real).
    pub fn skew_us(&self, real: u64) -> i64 {
        self.offset_us + self.model(real)
    }

    /// The local reading at real time `real`. The simulator starts real time at a base
    /// well above any skew, so the reading never saturates at zero.
    pub fn local(&self, real: u64) -> Instant {
        if self.wall_deadlines {
            // The wall clock made monotonic: after a step back it stands still until it
            // reads again what it read before the step.
            let before = (self.steps.iter())
                .take_while(|(at, _)| *at <= real)
                .map(|(at, _)| self.wall(at.saturating_sub(1)));
            return before.fold(self.wall(real), Instant::max);
        }
        // The base is added before the clamp: a clock read from an origin an hour back
        // (a restart after a step back) reads below its base, and must still move.
        let v = real as i64 + self.skew_us(real) + self.life_us + self.base_us as i64;
        Instant(v.max(0) as u64)
    }

    /// The earliest real time at which the local clock reads at least `local`
    /// (binary search: every model is monotonic and its skew is bounded).
    pub fn real_at(&self, local: Instant, skew_max_us: u64) -> u64 {
        let l = local.0 as i64 - self.base_us as i64;
        let spread = self.spread_us(skew_max_us);
        let lo = (l - spread as i64).max(0) as u64;
        // Most answers are found by inverting the skew where it is read, then checked
        // exactly: the earliest real time reading `local` is the one whose previous
        // microsecond reads below it (the search below would return the same).
        if !self.wall_deadlines {
            let mut g = l - self.life_us;
            for _ in 0..3 {
                let r = g.max(lo as i64) as u64;
                let at = self.local(r);
                if at >= local && (r == lo || self.local(r - 1) < local) {
                    return r;
                }
                g = r as i64 + (local.0 as i64 - at.0 as i64);
            }
        }
        let mut lo = lo;
        let mut hi = (l + spread as i64).max(0) as u64 + 1;
        while self.local(hi) < local {
            hi += spread; // only if the band was violated; keeps it total
        }
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.local(mid) >= local {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // DESIGN §3: the clock-drift bound δ_c. Every drawn clock stays within ±δ_c/2 of real
    // time (so two clocks within δ_c), is monotonic, and `real_at` inverts `local`.
    #[test]
    fn clocks_stay_in_band_and_are_monotonic() {
        let skew = 25_000;
        let horizon = 60_000_000;
        let mut rng = Rng::new(7);
        for i in 0..200 {
            // Every other clock reads on from a snapshot's time (a restored cluster's).
            let c = Clock::draw(&mut rng, skew, horizon).later(i % 2 * 93_000_000);
            let mut last = c.local(1_000_000);
            for t in (1_000_000..horizon).step_by(99_991) {
                assert!(c.skew_us(t).unsigned_abs() <= skew, "{c:?} at {t}");
                let l = c.local(t);
                assert!(l >= last, "{c:?} went back at {t}");
                last = l;
                let r = c.real_at(l, skew);
                assert!(
                    r <= t && c.local(r) >= l,
                    "{c:?}: real_at({l:?}) = {r}, t = {t}"
                );
                // The earliest such instant (the direct inversion and the search agree).
                assert!(r == 0 || c.local(r - 1) < l, "{c:?}: real_at({l:?}) = {r}");
                let l1 = Instant(l.0 + 1 + t % 777);
                let r1 = c.real_at(l1, skew);
                assert!(c.local(r1) >= l1 && (r1 == 0 || c.local(r1 - 1) < l1));
            }
        }
    }

    // DESIGN §3, "Clocks": a wall-clock step moves a running device's clock not at all;
    // after a restart the clock reads from the stepped wall clock's origin, still
    // monotonic and still inverted by `real_at`; the planted wall-clock clock stands
    // still after a step back.
    #[test]
    fn steps_move_the_clock_only_from_the_next_boot() {
        let mut c = Clock::perfect().later(STEP_LIFT_US);
        c.steps = vec![(5_000_000, -3_600_000_000), (9_000_000, 30_000_000)];
        let before = c.local(6_000_000);
        assert_eq!(
            before.0,
            STEP_LIFT_US + 6_000_000,
            "a running device ignores steps"
        );
        assert_eq!(
            c.wall(6_000_000).0,
            STEP_LIFT_US + 6_000_000 - 3_600_000_000
        );
        c.boot(7_000_000);
        assert_eq!(c.life_us, -3_600_000_000);
        let mut last = c.local(7_000_000);
        for t in (7_000_000..12_000_000).step_by(333_333) {
            let l = c.local(t);
            assert!(
                l > last || t == 7_000_000,
                "the clock moves after a restart"
            );
            last = l;
            let r = c.real_at(l, 25_000);
            assert!(r <= t && c.local(r) >= l, "real_at({l:?}) = {r} at {t}");
        }
        let mut planted = c.clone();
        planted.wall_deadlines = true;
        let (a, b) = (planted.local(4_999_999), planted.local(6_000_000));
        assert_eq!(a, b, "the planted clock stands still after the step back");
        // An hour back, then 30 s forward: still below what it read before.
        assert_eq!(planted.local(9_000_000), a);
    }
}
