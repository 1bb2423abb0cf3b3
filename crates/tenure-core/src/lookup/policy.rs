//! Meta-updates: the seed's adaptivity (seed 003, "The frequency of provider updates can be
//! tuned"). The leader proposes a new refresh interval for an entry within the range its
//! provider accepts; an interval longer than `MAX_VOLATILE_REFRESH_INTERVAL` makes the
//! entry low-frequency, hence acknowledged and persistent ("the lookup service protocol
//! adapts to give acknowledgements if need be").
//!
//! The seed's cases, in the order the policy applies them:
//! - (c) on demand — a subscriber watches the entry: refresh as often as the provider
//!   accepts;
//! - (a) demand is high — many queries of the entry lately: keep the frequency high;
//! - (d) the store is loaded — many entries: lengthen intervals (double, within range);
//! - (b) the entry is old — its value has not changed for many refreshes: lengthen.

use super::{Durability, Entry, LookupSettings, Meta};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The policy's thresholds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AdaptSettings {
    /// Queries of one key are counted over this window.
    #[serde(with = "crate::duration::millis")]
    pub demand_window: Duration,
    /// (a) this many queries in the window is high demand.
    pub demand_queries: u32,
    /// (b) an entry unchanged for this many refreshes is old.
    pub stable_refreshes: u32,
    /// (d) more entries than this is a loaded store.
    pub load_entries: usize,
}

impl Default for AdaptSettings {
    fn default() -> Self {
        AdaptSettings {
            demand_window: Duration::from_secs(10),
            demand_queries: 20,
            stable_refreshes: 10,
            load_entries: 100_000,
        }
    }
}

/// Which case a meta-update comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AdaptReason {
    /// (a) high demand: the interval stays short.
    Demand,
    /// (b) the entry is old: the interval grows.
    Age,
    /// (c) on demand (a subscriber): the interval shrinks.
    OnDemand,
    /// (d) the service is loaded: the interval grows.
    Load,
    /// No case applies: the provider's own interval.
    Requested,
}

/// What the leader knows about an entry's use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Signals {
    /// Queries of the key in the demand window.
    pub queries_in_window: u32,
    /// Whether a subscription or alert covers the key.
    pub subscribed: bool,
    /// Entries the node keeps.
    pub entries: usize,
}

/// The interval (and acknowledgement mode) the service wants for `e`.
pub fn suggest(s: &LookupSettings, e: &Entry, sig: Signals) -> Meta {
    let a = &s.adapt;
    let (lo, hi) = (e.adapt.min, e.adapt.max.max(e.adapt.min));
    let longer = (e.interval * 2).clamp(lo, hi);
    let (interval, reason) = if sig.subscribed {
        (lo, AdaptReason::OnDemand)
    } else if sig.queries_in_window >= a.demand_queries {
        (e.interval.clamp(lo, hi), AdaptReason::Demand)
    } else if sig.entries > a.load_entries {
        (longer, AdaptReason::Load)
    } else if e.stable >= a.stable_refreshes {
        (longer, AdaptReason::Age)
    } else {
        (e.interval, AdaptReason::Requested)
    };
    // A fixed persistent entry stays persistent; past MVRI an entry becomes one.
    let fixed_persistent = e.durability == Durability::Persistent && e.adapt.min == e.adapt.max;
    let durability = if fixed_persistent || interval > s.max_volatile_refresh_interval {
        Durability::Persistent
    } else {
        e.durability
    };
    Meta {
        interval,
        durability,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lookup::{EntryVersion, IntervalRange};
    use crate::time::Instant;

    fn entry(interval_ms: u64, min_ms: u64, max_ms: u64, stable: u32) -> Entry {
        Entry {
            key: "/svc/a".into(),
            value: Some(b"x".to_vec()),
            version: EntryVersion::default(),
            interval: Duration::from_millis(interval_ms),
            durability: Durability::Volatile,
            adapt: IntervalRange {
                min: Duration::from_millis(min_ms),
                max: Duration::from_millis(max_ms),
            },
            deadline: Instant(0),
            refreshed: Instant(0),
            changed: Instant(0),
            stable,
        }
    }

    /// Seed 003 adaptivity (a): high demand keeps the frequency high, even for an old entry.
    #[test]
    fn case_a_high_demand_keeps_the_interval_short() {
        let s = LookupSettings::default();
        let m = suggest(
            &s,
            &entry(500, 250, 8000, 100),
            Signals {
                queries_in_window: 50,
                ..Default::default()
            },
        );
        assert_eq!(m.reason, AdaptReason::Demand);
        assert_eq!(m.interval, Duration::from_millis(500));
    }

    /// (b): an entry unchanged for many refreshes gets a longer interval, and past the
    /// volatile maximum becomes acknowledged (persistent).
    #[test]
    fn case_b_an_old_entry_is_refreshed_less_often_and_becomes_acknowledged() {
        let s = LookupSettings::default();
        let m = suggest(&s, &entry(1000, 1000, 8000, 10), Signals::default());
        assert_eq!(
            (m.reason, m.interval),
            (AdaptReason::Age, Duration::from_secs(2))
        );
        assert_eq!(m.durability, Durability::Volatile);
        let m = suggest(&s, &entry(2000, 1000, 8000, 10), Signals::default());
        assert_eq!(m.interval, Duration::from_secs(4));
        assert_eq!(m.durability, Durability::Persistent, "4 s > MVRI 2 s");
        let young = suggest(&s, &entry(1000, 1000, 8000, 3), Signals::default());
        assert_eq!(
            (young.reason, young.interval),
            (AdaptReason::Requested, Duration::from_secs(1))
        );
    }

    /// (c): a subscriber watching the entry asks for the shortest interval accepted.
    #[test]
    fn case_c_on_demand_the_frequency_goes_up() {
        let s = LookupSettings::default();
        let m = suggest(
            &s,
            &entry(1000, 200, 8000, 50),
            Signals {
                subscribed: true,
                ..Default::default()
            },
        );
        assert_eq!(
            (m.reason, m.interval),
            (AdaptReason::OnDemand, Duration::from_millis(200))
        );
    }

    /// (d): a loaded service lengthens intervals within the provider's range.
    #[test]
    fn case_d_load_lengthens_intervals_within_range() {
        let s = LookupSettings::default();
        let sig = Signals {
            entries: 1_000_000,
            ..Default::default()
        };
        let m = suggest(&s, &entry(1000, 1000, 1500, 0), sig);
        assert_eq!(
            (m.reason, m.interval),
            (AdaptReason::Load, Duration::from_millis(1500))
        );
    }

    /// A fixed range never changes the interval.
    #[test]
    fn a_fixed_range_is_left_alone() {
        let s = LookupSettings::default();
        let m = suggest(
            &s,
            &entry(1000, 1000, 1000, 100),
            Signals {
                entries: 1_000_000,
                ..Default::default()
            },
        );
        assert_eq!(m.interval, Duration::from_secs(1));
    }
}
