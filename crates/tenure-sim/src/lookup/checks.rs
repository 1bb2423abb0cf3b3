//! The lookup checkers (DESIGN §9.7, seed 003) and what they report.
//!
//! 1. **Leaders** (I2c/I2d): after a quiet period of at least `3 HB + RTT + δ_c` with no
//!    fault (common profile), exactly one running node is the leader, it is the oldest
//!    active node by `<activeStartTime, id>`, and at most `t + 1` nodes are active.
//! 2. **Outage**: after a crash that takes the leader down (common profile), a query
//!    answers again within `3 HB` plus the detection's own slack (the last heartbeat's
//!    flight and δ_c) and the query's round trip and probing period.
//! 3. **Volatile staleness** ≤ `2 × MVRI + δ` (common profile).
//! 4. **Persistent staleness** ≤ `MPRI + 3 HB + Θ + RTT + δ` (common profile).
//! 5. **No acknowledged persistent entry lost**: every leader answer to a query issued
//!    after the acknowledgement of a persistent version carries that version or a newer
//!    one, until the provider revokes it or fails to refresh it within its lifetime —
//!    through failovers and full restarts of every device.
//! 6. **Subscribers**: events from one leader arrive through one device in strictly
//!    increasing sequence order (gaps only where messages were lost), the subscriber
//!    applies them in order, and its view converges to the leader's state within the
//!    volatile staleness bound — every removal is announced.
//! 7. **Self-stabilisation**: from any state (boot, corruption, rare faults), within
//!    `3 × (3 HB + LONG_TIMEOUT + MVRI) + 3 RTT + δ_c` of the last fault exactly one node
//!    leads, it is the oldest active one, and every node satisfies I2a's first conjunct
//!    (passive ⇔ `activeStartTime` = ∞).
//!
//! Besides: an answer never carries a value its provider did not publish (integrity).
//!
//! The stabilisation bound follows seed 003's proof, one `3 HB + LONG_TIMEOUT + MVRI`
//! per step: (a) fake ages and entries of nodes that send no heartbeat time out within
//! 3 HB, and every node runs its maintainer within LONG_TIMEOUT, which repairs its own
//! flags (passive ⇔ INFINITE age; a leader that is not the oldest steps down); (b) if no
//! node is active, the passive ones notice at their next maintainer run and join — three
//! Can-I-Join round trips and two `3 HB` back-offs, then the MVRI warm-up — and the
//! oldest of them leads as soon as the others hear its heartbeat; (c) the surplus active
//! nodes step down, one soft-state change each. Three steps, three round trips of
//! Can-I-Join and the clocks' disagreement δ_c.
//!
//! δ, the slack of the staleness bounds, is `RTT + δ_c + ℓc + ℓ`: a round trip, the clock
//! drift bound, and the longest one-way latency of a client link (ℓc) and of a device link
//! (ℓ) — the query's own way to the leader, which seed 003's δ ("a statistical minimum on
//! the time difference between query initiation time and the most recent refresh")
//! leaves to the deployment.

use super::knobs::LookupKnobs;
use crate::checks::ViolationKind;
use serde::Serialize;
use tenure_core::DeviceId;
use tenure_core::lookup::{Durability, EntryVersion, SubId};

/// The bounds a run is held to, from its knobs (µs).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Bounds {
    /// δ: `RTT + δ_c + ℓc + ℓ`.
    pub delta_us: u64,
    /// (1) Quiet period after which exactly one leader must exist: `3 HB + RTT + δ_c`.
    pub quiet_us: u64,
    /// (2) Outage after a leader crash: `3 HB + ℓ + δ_c` (detection) `+ probe + 2ℓc + 2ℓ`
    /// (the answering query's period and round trip).
    pub outage_us: u64,
    /// (3) `2 × MVRI + δ`.
    pub volatile_us: u64,
    /// (4) `MPRI + 3 HB + Θ + RTT + δ`.
    pub persistent_us: u64,
    /// (6) A subscriber's view differs from the leader's state at most this long: the
    /// volatile staleness bound.
    pub subscriber_us: u64,
    /// (7) `3 × (3 HB + LONG_TIMEOUT + MVRI) + 3 RTT + δ_c`.
    pub stabilisation_us: u64,
}

impl Bounds {
    /// The bounds for these knobs.
    pub fn of(k: &LookupKnobs) -> Bounds {
        let s = &k.settings;
        let us = |d: std::time::Duration| d.as_micros() as u64;
        let (hb, rtt) = (us(s.heartbeat_interval), us(s.roundtrip_delay));
        let (mvri, mpri, lt) = (
            us(s.max_volatile_refresh_interval),
            us(s.max_persistent_refresh_interval),
            us(s.long_timeout),
        );
        let (lc, l, dc) = (
            k.client_latency_max_us,
            k.net.latency_max_us,
            k.clock_drift_us,
        );
        let delta_us = rtt + dc + lc + l;
        let volatile_us = 2 * mvri + delta_us;
        Bounds {
            delta_us,
            quiet_us: 3 * hb + rtt + dc,
            outage_us: 3 * hb + l + dc + k.probe_us + 2 * lc + 2 * l,
            volatile_us,
            persistent_us: mpri + 3 * hb + k.theta_us + rtt + delta_us,
            subscriber_us: volatile_us,
            stabilisation_us: 3 * (3 * hb + lt + mvri) + 3 * rtt + dc,
        }
    }
}

/// A broken lookup invariant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum LookupViolation {
    /// (1) After a quiet period, not exactly one leader, or not the oldest active node,
    /// or more than `t + 1` active nodes.
    Leaders {
        /// When (µs since the start).
        at_us: u64,
        /// How long the cluster had been quiet.
        quiet_us: u64,
        /// What was wrong.
        why: String,
    },
    /// (2) A query answered only this long after the leader crashed.
    Outage {
        /// When the leader crashed (µs since the start).
        at_us: u64,
        /// Crash to the first answer (µs; `None`: none before the next fault).
        outage_us: Option<u64>,
        /// The bound.
        bound_us: u64,
    },
    /// (3), (4) An answer staler than the bound.
    Stale {
        /// When it was answered.
        at_us: u64,
        /// Key.
        key: String,
        /// The key's durability.
        durability: Durability,
        /// Staleness (µs).
        staleness_us: u64,
        /// The bound.
        bound_us: u64,
        /// The answer.
        answer: String,
        /// The leader that answered.
        leader: DeviceId,
    },
    /// An answer that never was the key's true state.
    Fabricated {
        /// When.
        at_us: u64,
        /// Key.
        key: String,
        /// The answer.
        answer: String,
    },
    /// (5) A leader answered without an acknowledged persistent version.
    LostPersistent {
        /// When.
        at_us: u64,
        /// Key.
        key: String,
        /// The acknowledged version.
        acked: EntryVersion,
        /// What the leader had.
        answer: Option<EntryVersion>,
        /// The leader.
        leader: DeviceId,
    },
    /// (6) Events of one leader out of sequence.
    EventOrder {
        /// When.
        at_us: u64,
        /// Subscription.
        sub: SubId,
        /// Leader.
        leader: DeviceId,
        /// The previous sequence number.
        previous: u64,
        /// This one.
        seq: u64,
    },
    /// (6) A subscriber's view differed from the leader's state too long.
    Diverged {
        /// When.
        at_us: u64,
        /// Subscription.
        sub: SubId,
        /// Since when (µs since the start).
        since_us: u64,
        /// The bound.
        bound_us: u64,
        /// The difference.
        why: String,
    },
    /// (7) Not stabilised within the bound after the last fault.
    NotStabilised {
        /// When the bound ran out.
        at_us: u64,
        /// The last fault.
        since_us: u64,
        /// The bound.
        bound_us: u64,
        /// What was still wrong.
        why: String,
    },
}

impl LookupViolation {
    /// When it was found (µs since the start).
    pub fn at_us(&self) -> u64 {
        use LookupViolation as V;
        match self {
            V::Leaders { at_us, .. }
            | V::Outage { at_us, .. }
            | V::Stale { at_us, .. }
            | V::Fabricated { at_us, .. }
            | V::LostPersistent { at_us, .. }
            | V::EventOrder { at_us, .. }
            | V::Diverged { at_us, .. }
            | V::NotStabilised { at_us, .. } => *at_us,
        }
    }

    /// Safety or liveness.
    pub fn kind(&self) -> ViolationKind {
        match self {
            LookupViolation::NotStabilised { .. } => ViolationKind::Liveness,
            _ => ViolationKind::Correctness,
        }
    }
}

fn s(us: u64) -> String {
    format!("{:.3}s", us as f64 / 1e6)
}

impl std::fmt::Display for LookupViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use LookupViolation as V;
        match self {
            V::Leaders {
                at_us,
                quiet_us,
                why,
            } => write!(
                f,
                "lookup at {}: after {} quiet, {why}",
                s(*at_us),
                s(*quiet_us)
            ),
            V::Outage {
                at_us,
                outage_us,
                bound_us,
            } => write!(
                f,
                "lookup: leader crashed at {}, outage {} > bound {}",
                s(*at_us),
                outage_us.map_or("unended".into(), s),
                s(*bound_us)
            ),
            V::Stale {
                at_us,
                key,
                durability,
                staleness_us,
                bound_us,
                answer,
                leader,
            } => write!(
                f,
                "lookup at {}: {durability:?} {key} answered {answer} by {leader}, stale by {} > bound {}",
                s(*at_us),
                s(*staleness_us),
                s(*bound_us)
            ),
            V::Fabricated { at_us, key, answer } => write!(
                f,
                "lookup at {}: {key} answered {answer}, never its provider's value",
                s(*at_us)
            ),
            V::LostPersistent {
                at_us,
                key,
                acked,
                answer,
                leader,
            } => write!(
                f,
                "lookup at {}: leader {leader} answered {key} at {answer:?} after {acked:?} was acknowledged",
                s(*at_us)
            ),
            V::EventOrder {
                at_us,
                sub,
                leader,
                previous,
                seq,
            } => write!(
                f,
                "lookup at {}: subscription {sub:x} got seq {seq} from {leader} after {previous}",
                s(*at_us)
            ),
            V::Diverged {
                at_us,
                sub,
                since_us,
                bound_us,
                why,
            } => write!(
                f,
                "lookup at {}: subscription {sub:x} differs from the leader since {} (bound {}): {why}",
                s(*at_us),
                s(*since_us),
                s(*bound_us)
            ),
            V::NotStabilised {
                at_us,
                since_us,
                bound_us,
                why,
            } => write!(
                f,
                "lookup at {}: not stabilised {} after the last fault at {}: {why}",
                s(*at_us),
                s(*bound_us),
                s(*since_us)
            ),
        }
    }
}
