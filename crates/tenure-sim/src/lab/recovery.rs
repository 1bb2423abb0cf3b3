//! Menasce's logical component recovery measured (seed 004 §4.1, §8), beside Tenure's own
//! recovery from the same failure.
//!
//! **Menasce.** Each run ([`super::recovery_sim`]) is a network of `n + 1` sites — `n`
//! that take part in the recovery and the LC — or `n + 1 + f` when the `f` sites after
//! the LC in the nomination order crash with it (down nominees). The LC crashes during
//! a drawn lock workload, an application program at a surviving site other than the
//! nominee detects it, and the run ends when nothing is pending. One message time `τ`
//! of fixed latency, so `τ_max = τ` and the seed's averages are exact.
//!
//! - C_rec (§8): `(5n − 4)M ≤ C_rec < (6n − 6)M`, counting the recovery's protocol
//!   messages from the detection on: AN, NA, the NA acknowledgments to the generator,
//!   KILL NA, UT, RU, RNA. The network's acknowledgment of an AN and its retransmissions
//!   are the transport's (§2), as are every other message's, and are shown apart. A down
//!   nominee stays in the NA cycle (the seed's cycle is the whole up list) and costs the
//!   NA sent to it besides its AN, so its rows start at n = 5.
//! - R (§8): `(n + 1)τ + 3τ_max ≤ R < [a(n − 2) + n + 1]τ + 3τ_max`, `a = τ_out/τ`,
//!   from the detection to the last RNA delivered, `τ` and `τ_max` measured in the run.
//! - The checkers ([`super::recovery_sim::RecoveryChecker`]): maximum forward progress
//!   and exactly one LC, in every run.
//!
//! **Tenure.** The store world of the simulator ([`crate::world`]) in calm conditions
//! with one store's manager crashed once: `n + 1` devices, stores of `n + 1` chunks (one
//! per device, as every Menasce site holds the LOCK table), the manager's device crashes
//! and stays down; counted are the messages about the store between devices (seed 000
//! manager ↔ chunk messages) and the time until a new manager serves the store (quorum
//! of its chunks in regular lease) — Palladio regeneration with the reconciliation
//! merge. Measured, not a formula: printed "for comparison".

use super::recovery_sim::{RecoveryRun, Scenario, run};
use super::report::{Row, Verdict, median_max, num};
use crate::world::{SimConfig, run as run_world};

const EXP: &str = "recovery";

/// When the manager crashes in the Tenure runs (µs after the start).
const TENURE_CRASH_US: u64 = 3_000_000;

fn row(what: String, paper: String, v: &[f64], verdict: Verdict, note: String) -> Row {
    super::report::measured(EXP, what, paper, v, verdict, note)
}

fn runs(n: u64, f: u64, seeds: u64) -> Vec<RecoveryRun> {
    let sc = Scenario {
        n,
        down_nominees: f,
        jitter_us: 0,
        hasty_nominator: false,
        planted: Default::default(),
    };
    (0..seeds).map(|seed| run(&sc, seed)).collect()
}

/// The C_rec and R verdicts of runs with `n` taking part and `f` down nominees.
struct Measured {
    c: Vec<f64>,
    r_tau: Vec<f64>,
    c_ok: bool,
    r_ok: bool,
    checked: bool,
    transport: Vec<f64>,
    mid_safetalk: u64,
    r_bounds: (f64, f64),
    a: f64,
}

fn measure(n: u64, f: u64, seeds: u64) -> Measured {
    let rs = runs(n, f, seeds);
    let (lo, hi) = ((5 * n - 4) as f64, (6 * n - 6) as f64);
    let c: Vec<f64> = rs.iter().map(|r| r.c_rec as f64).collect();
    let c_ok = c.iter().all(|v| *v >= lo && *v < hi);
    let mut r_ok = true;
    let mut r_tau = Vec::new();
    let mut r_bounds = (f64::INFINITY, 0.0f64);
    let mut a = f64::NAN;
    for r in &rs {
        let (tau, tmax) = (r.tau_us, r.tau_max_us);
        a = r.tau_out_us as f64 / tau;
        let lower = (n + 1) as f64 * tau + 3.0 * tmax;
        let upper = (a * (n - 2) as f64 + (n + 1) as f64) * tau + 3.0 * tmax;
        r_bounds = (r_bounds.0.min(lower / tau), r_bounds.1.max(upper / tau));
        let rv = r.r_us as f64;
        r_ok &= rv >= lower && rv < upper;
        r_tau.push(rv / tau);
    }
    Measured {
        c,
        r_tau,
        c_ok,
        r_ok,
        checked: rs
            .iter()
            .all(|r| r.violations.is_empty() && r.locks_checked > 0),
        transport: rs.iter().map(|r| r.transport as f64).collect(),
        mid_safetalk: rs.iter().filter(|r| r.pending_at_detection > 0).count() as u64,
        r_bounds,
        a,
    }
}

fn verdict(ok: bool) -> Verdict {
    if ok {
        Verdict::WithinBound
    } else {
        Verdict::Fails
    }
}

/// The Menasce rows for `n` in `sizes` (those in `shown` row by row, the rest in the
/// summary rows), and Tenure's rows for `tenure_sizes`.
pub fn rows(sizes: &[u64], shown: &[u64], tenure_sizes: &[u64], seeds: u64) -> Vec<Row> {
    let mut out = Vec::new();
    let (mut c_all, mut r_all, mut chk_all, mut total) = (0, 0, 0, 0);
    let mut mid = 0;
    for &n in sizes {
        for f in [0, 1] {
            // A down nominee costs its AN and the NA sent to it before the generator
            // skips it, two messages where the bound leaves n − 2 in all: n ≥ 5.
            if f > 0 && n < 5 {
                continue;
            }
            let m = measure(n, f, seeds);
            total += 1;
            c_all += m.c_ok as u64;
            r_all += m.r_ok as u64;
            chk_all += m.checked as u64;
            mid += m.mid_safetalk;
            if !shown.contains(&n) {
                continue;
            }
            let case = if f == 0 {
                "LC crash".to_string()
            } else {
                format!("LC and {f} nominee down")
            };
            let (tmed, _) = median_max(&m.transport);
            out.push(row(
                format!("C_rec, n={n}, {case} (M)"),
                format!("[5n−4, 6n−6) = [{}, {})", 5 * n - 4, 6 * n - 6),
                &m.c,
                verdict(m.c_ok),
                format!(
                    "AN, NA ×n, NA acks ×(n−2), UT/RU/RNA ×(n−1){}; +{} AN acknowledgment and retransmissions by the network; {} of {seeds} crashes mid-SafeTalk; checkers: {}",
                    if f > 0 { ", + AN and NA to the down nominee" } else { "" },
                    num(tmed),
                    m.mid_safetalk,
                    if m.checked {
                        "max forward progress and one LC held"
                    } else {
                        "VIOLATION"
                    }
                ),
            ));
            out.push(row(
                format!("R, n={n}, {case} (τ)"),
                format!(
                    "[(n+1)τ+3τmax, (a(n−2)+n+1)τ+3τmax) = [{}, {})",
                    num(m.r_bounds.0),
                    num(m.r_bounds.1)
                ),
                &m.r_tau,
                verdict(m.r_ok && m.checked),
                format!("τ = τmax = one message time; a = τ_out/τ = {}", num(m.a)),
            ));
        }
    }
    let first = sizes.first().copied().unwrap_or(0);
    let last = sizes.last().copied().unwrap_or(0);
    out.push(row(
        format!("C_rec, n={first}…{last}: cases within [5n−4, 6n−6)"),
        format!("{total} of {total}"),
        &[c_all as f64],
        if c_all == total {
            Verdict::Matches
        } else {
            Verdict::Fails
        },
        format!(
            "{} seeds per case; LC crash alone and with a down nominee",
            seeds
        ),
    ));
    out.push(row(
        format!("R, n={first}…{last}: cases within the bounds"),
        format!("{total} of {total}"),
        &[r_all as f64],
        if r_all == total {
            Verdict::Matches
        } else {
            Verdict::Fails
        },
        format!(
            "{mid} of {} runs crashed the LC mid-SafeTalk",
            total * seeds
        ),
    ));
    out.push(row(
        format!("checkers, n={first}…{last}: runs with max forward progress and one LC"),
        format!("{total} of {total} cases"),
        &[chk_all as f64],
        if chk_all == total {
            Verdict::Matches
        } else {
            Verdict::Fails
        },
        "the new LC's and every survivor's table hold a lock iff the latest request any survivor accepted was its grant".into(),
    ));
    out.extend(tenure_rows(tenure_sizes, seeds));
    out
}

/// One calm Tenure run: `devices` devices, stores of one chunk per device, the manager
/// of store 0 crashed once.
pub fn tenure_run(devices: u64, seed: u64) -> Option<crate::world::ManagerCrash> {
    let mut c = SimConfig::new(seed);
    c.devices = devices;
    c.stores = 2;
    c.replication = devices as usize;
    c.safety_us = TENURE_CRASH_US + 12_000_000;
    c.liveness_us = 2_000_000;
    c.faults = false;
    c.objects = false;
    c.membership = false;
    c.writes = false;
    c.crash_manager_at_us = Some(TENURE_CRASH_US);
    run_world(c).manager_crash
}

fn tenure_rows(sizes: &[u64], seeds: u64) -> Vec<Row> {
    let mut out = Vec::new();
    for &n in sizes {
        let (mut msgs, mut ms, mut served) = (Vec::new(), Vec::new(), 0);
        let mut kinds = std::collections::BTreeMap::<String, u64>::new();
        for seed in 0..seeds {
            let Some(mc) = tenure_run(n + 1, seed) else {
                continue;
            };
            if let Some(t) = mc.served_at_us {
                served += 1;
                msgs.push(mc.messages as f64);
                ms.push((t - mc.at_us) as f64 / 1_000.0);
                for (k, v) in mc.by_kind {
                    *kinds.entry(k).or_default() += v;
                }
            }
        }
        let ok = served == seeds;
        let verdict = if ok {
            Verdict::ForComparison
        } else {
            Verdict::Fails
        };
        let mut top: Vec<(String, u64)> = kinds.into_iter().collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let top: Vec<String> = (top.iter().take(4))
            .map(|(k, v)| format!("{k} {}", num(*v as f64 / served.max(1) as f64)))
            .collect();
        out.push(row(
            format!("Tenure, n={n}: messages until a new manager serves the store"),
            format!("Menasce: [{}, {})", 5 * n - 4, 6 * n - 6),
            &msgs,
            verdict,
            format!(
                "store of n+1 chunks, its manager's device crashed; per run: {}; served in {served} of {seeds} runs",
                top.join(", ")
            ),
        ));
        out.push(row(
            format!("Tenure, n={n}: time until a new manager serves the store (ms)"),
            "Menasce: (n+4)τ, τ one-way latency".into(),
            &ms,
            verdict,
            format!(
                "Palladio waits out the crashed manager's chunk leases (d_l = {} ms) before regenerating, so no store ever has two managers",
                tenure_core::Timing::default().lease.as_millis()
            ),
        ));
    }
    out
}
