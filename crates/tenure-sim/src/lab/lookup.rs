//! Aladdin's bounds (seed 003, DESIGN §7) measured on Tenure's lookup service: the
//! lookup world ([`crate::lookup`]) under seed 003's common failure case, with its
//! intervals fixed to one configuration ([`Intervals`]) so that every run is held to the
//! same bounds.
//!
//! Each sim seed is one run of the common profile: after the cluster (2–6 devices, `t` ≥ 2, a
//! UPS-designated node) first stabilises, one fault at a time — the loss of one message,
//! the crash of one node (the leader in half the crashes), a short power outage — each
//! repaired before the next. The world's checkers ([`crate::lookup::checks`]) judge every
//! answer; the lab reads what they measured:
//!
//! - **Leader failover** (seed 003's Lemma: "leader failover occurs within 3
//!   SS-heartbeat-interval time"): a crash that takes the leader down, to the next node
//!   declaring itself leader. Detection is three heartbeat intervals after the last
//!   heartbeat *heard*, which may have left the leader just before the crash and still be
//!   on its way: seed 003 counts from the crash, so a failover may exceed 3 HB by that
//!   heartbeat's flight ℓ and the clocks' disagreement δ_c.
//! - **Outage** ("the maximum outage time is 3 SS-heartbeat-interval"; the hot-start
//!   protocol keeps active nodes warm, so no `MAX_VOLATILE_REFRESH_INTERVAL` warm-up is
//!   added): the same crash to the first query a leader answers. A prober queries every
//!   20 ms; the answering query's own way to and from the leader comes on top.
//! - **Volatile staleness** ≤ `2 × MVRI + δ` and **persistent staleness** ≤
//!   `MPRI + 3 HB + Θ + RTT + δ`, over every answer the checkers judged. δ, which
//!   seed 003 leaves as "a statistical minimum" of the deployment, is `RTT + δ_c + ℓc + ℓ`
//!   (see [`crate::lookup::checks`]).
//!
//! Medians and maxima are over every failover and outage measured (there are one to a
//! few per run), and over the runs' largest staleness.

use super::report::{Row, Verdict, measured, num};
use crate::lookup::checks::Bounds;
use crate::lookup::knobs::{LookupKnobs, ProfileChoice};
use crate::world::{SimConfig, WorldKind};
use std::time::Duration;

const EXP: &str = "lookup";

/// Seed 003's intervals every run of the lab uses (ms).
#[derive(Clone, Copy, Debug)]
pub struct Intervals {
    /// `SS_HEARTBEAT_INTERVAL`.
    pub heartbeat_ms: u64,
    /// `ROUNDTRIP_COMMUNICATION_DELAY`.
    pub roundtrip_ms: u64,
    /// `MAX_VOLATILE_REFRESH_INTERVAL`.
    pub mvri_ms: u64,
    /// `Max_Persistent_Refresh_Interval`.
    pub mpri_ms: u64,
    /// Θ: providers retry an unacknowledged persistent update within this.
    pub theta_ms: u64,
    /// `LONG_TIMEOUT`.
    pub long_timeout_ms: u64,
    /// δ_c: the clocks' disagreement bound.
    pub clock_drift_ms: u64,
    /// ℓ and ℓc: the longest one-way latency of a device link and of a client link.
    pub latency_max_ms: u64,
}

/// The lab's configuration.
pub const INTERVALS: Intervals = Intervals {
    heartbeat_ms: 200,
    roundtrip_ms: 100,
    mvri_ms: 2_000,
    mpri_ms: 4_000,
    theta_ms: 100,
    long_timeout_ms: 2_000,
    clock_drift_ms: 20,
    latency_max_ms: 10,
};

impl Intervals {
    /// Set these intervals on a run's drawn knobs; crashes weigh a little more than
    /// the other common faults, so that most runs see a leader crash.
    fn apply(self, k: &mut LookupKnobs) {
        let ms = Duration::from_millis;
        let s = &mut k.settings;
        s.heartbeat_interval = ms(self.heartbeat_ms);
        s.roundtrip_delay = ms(self.roundtrip_ms);
        s.max_volatile_refresh_interval = ms(self.mvri_ms);
        s.max_persistent_refresh_interval = ms(self.mpri_ms);
        s.max_retry_interval = ms(self.theta_ms);
        s.long_timeout = ms(self.long_timeout_ms);
        k.theta_us = self.theta_ms * 1_000;
        k.clock_drift_us = self.clock_drift_ms * 1_000;
        let lat = self.latency_max_ms * 1_000;
        k.net.latency_min_us = 1_000;
        k.net.latency_max_us = lat;
        k.client_latency_min_us = 1_000;
        k.client_latency_max_us = lat;
        k.common_weights = [1, 2, 1];
    }
}

/// What the runs measured (µs).
#[derive(Default)]
struct Measured {
    failovers: Vec<f64>,
    outages: Vec<f64>,
    /// Outage minus failover, per crash: the answering query's part.
    query_part: Vec<f64>,
    volatile: Vec<f64>,
    persistent: Vec<f64>,
    /// Runs, and those with a checker violation (the first one's text).
    runs: u64,
    violations: Vec<String>,
    leader_crashes: u64,
    answers: u64,
}

fn measure(sim_s: u64, seeds: u64) -> (Measured, Bounds) {
    let mut m = Measured::default();
    let mut bounds = Bounds::default();
    for seed in 0..seeds {
        let mut c = SimConfig::new(seed);
        c.world = WorldKind::Lookup;
        c.lookup_profile = ProfileChoice::Common;
        c.safety_us = sim_s * 1_000_000;
        let r = crate::lookup::run_with(c, |k| INTERVALS.apply(k));
        let Some(s) = r.lookup else { continue };
        m.runs += 1;
        bounds = s.bounds.clone();
        if let Some(v) = r.violations.first() {
            m.violations.push(format!("sim seed {seed}: {v}"));
        }
        if s.failover_samples_us.len() == s.outage_samples_us.len() {
            let pairs = s.outage_samples_us.iter().zip(&s.failover_samples_us);
            m.query_part
                .extend(pairs.map(|(o, f)| o.saturating_sub(*f) as f64));
        }
        m.failovers
            .extend(s.failover_samples_us.iter().map(|x| *x as f64));
        m.outages
            .extend(s.outage_samples_us.iter().map(|x| *x as f64));
        if s.volatile_checks > 0 {
            m.volatile.push(s.max_volatile_staleness_us as f64);
        }
        if s.persistent_checks > 0 {
            m.persistent.push(s.max_persistent_staleness_us as f64);
        }
        m.leader_crashes += s.leader_crashes;
        m.answers += s.answers;
    }
    (m, bounds)
}

fn ms(us: f64) -> f64 {
    (us / 1_000.0 * 100.0).round() / 100.0
}

fn to_ms(v: &[f64]) -> Vec<f64> {
    v.iter().map(|x| ms(*x)).collect()
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max)
}

/// `within` if every value is at most `bound`, `Differs` if the ones above are at most
/// `explained` (the reason being measured), else `Fails`; `Fails` too when nothing was
/// measured.
fn judge(v: &[f64], bound: f64, explained: f64) -> Verdict {
    let worst = max(v);
    if v.is_empty() || worst > explained {
        Verdict::Fails
    } else if worst <= bound {
        Verdict::WithinBound
    } else {
        Verdict::Differs
    }
}

/// Aladdin's outage and staleness bounds; each sim seed runs `sim_s` simulated seconds of
/// common failures.
pub fn rows(sim_s: u64, seeds: u64) -> Vec<Row> {
    let (m, b) = measure(sim_s, seeds);
    let i = INTERVALS;
    let us = |x: u64| x * 1_000;
    let hb3 = us(3 * i.heartbeat_ms) as f64;
    let flight = us(i.latency_max_ms + i.clock_drift_ms) as f64;
    let mut out = Vec::new();

    let fo = judge(&m.failovers, hb3, hb3 + flight);
    let over: Vec<f64> = m.failovers.iter().filter(|x| **x > hb3).copied().collect();
    out.push(measured(
        EXP,
        format!(
            "leader failover: leader crash → a new leader (ms), {} failovers",
            m.failovers.len()
        ),
        format!("3 × SS_Heartbeat_Interval = {}", num(ms(hb3))),
        &to_ms(&m.failovers),
        fo,
        if over.is_empty() {
            "detection 3 HB after the last heartbeat heard, then weak-leader election at once (the oldest active node by <activeStartTime, id>)".into()
        } else {
            format!(
                "{} of {} past 3 HB, by at most {} ms ≤ ℓ + δ_c = {} ms: detection runs 3 HB from the last heartbeat heard, which left the leader before the crash and was still in flight",
                over.len(),
                m.failovers.len(),
                num(ms(max(&over) - hb3)),
                num(ms(flight))
            )
        },
    ));

    let excess = b.outage_us.saturating_sub(us(3 * i.heartbeat_ms)) as f64;
    let ov = judge(&m.outages, hb3, b.outage_us as f64);
    out.push(measured(
        EXP,
        format!(
            "outage: leader crash → a query answered (ms), {} outages",
            m.outages.len()
        ),
        format!("3 × SS_Heartbeat_Interval = {}", num(ms(hb3))),
        &to_ms(&m.outages),
        ov,
        match ov {
            Verdict::WithinBound => "hot spares: the new leader answers at once (no warm-up); measured by a query every 20 ms".into(),
            _ => format!(
                "past 3 HB by at most {} ms ≤ {} ms: the failover above, plus the answering query's own way to the leader and back (2ℓc + 2ℓ) and the prober's 20 ms period — outage − failover measured at most {} ms",
                num(ms(max(&m.outages) - hb3)),
                num(ms(excess)),
                num(ms(max(&m.query_part)))
            ),
        },
    ));

    let delta = b.delta_us as f64;
    out.push(measured(
        EXP,
        format!(
            "volatile staleness, worst answer per run (ms), {} runs",
            m.volatile.len()
        ),
        format!(
            "2 × MVRI + δ = {} (δ = {})",
            num(ms(b.volatile_us as f64)),
            num(ms(delta))
        ),
        &to_ms(&m.volatile),
        judge(&m.volatile, b.volatile_us as f64, b.volatile_us as f64),
        format!(
            "providers refresh every MVRI/4…MVRI (MVRI = {} ms); a lost refresh costs one more interval; δ = RTT + δ_c + ℓc + ℓ",
            i.mvri_ms
        ),
    ));

    out.push(measured(
        EXP,
        format!(
            "persistent staleness, worst answer per run (ms), {} runs",
            m.persistent.len()
        ),
        format!(
            "MPRI + 3 HB + Θ + RTT + δ = {}",
            num(ms(b.persistent_us as f64))
        ),
        &to_ms(&m.persistent),
        judge(&m.persistent, b.persistent_us as f64, b.persistent_us as f64),
        format!(
            "MPRI = {} ms, HB = {} ms, Θ = {} ms, RTT = {} ms: acknowledged updates, retried within Θ, survive failovers",
            i.mpri_ms, i.heartbeat_ms, i.theta_ms, i.roundtrip_ms
        ),
    ));

    let bad = m.violations.len() as f64;
    out.push(measured(
        EXP,
        format!(
            "runs breaking a lookup invariant, of {} ({} leader crashes, {} answers)",
            m.runs, m.leader_crashes, m.answers
        ),
        "0".into(),
        &[bad],
        if m.violations.is_empty() && m.runs > 0 {
            Verdict::Matches
        } else {
            Verdict::Fails
        },
        m.violations.first().cloned().unwrap_or_else(|| {
            "one leader once stable, the oldest active; no acknowledged persistent entry lost; subscribers converge".into()
        }),
    ));
    out
}
