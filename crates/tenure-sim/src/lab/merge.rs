//! Menasce's logical component merge measured (seed 004 §4.5–§5.1), in the recovery
//! table. Runs are [`super::merge_sim`]'s.
//!
//! The seed gives no cost formula for the merge; the protocol text gives one. For two
//! components C1 (`n1` sites, LC1 probes first) and C2 (`n2` sites) and a network of
//! those `n1 + n2` sites: LC1's WYA round goes to the `n2` sites not in its up list,
//! each answers YIW (C2 is NORMAL); then one LUM, one MA, one RTM; the SYT visits
//! `TEMP_U = U1 ∪ U2` once (`n1 + n2` messages, the last back to LC1) with a source
//! acknowledgment to LC1 from every site it passes but the last, whose forward to LC1 is
//! its acknowledgment, as for the NA (`n1 + n2 − 2`). In all `2·n1 + 4·n2 + 1` messages, and `(n1 + n2 + 4)τ` from LC1's WYA to the
//! SYT's return (WYA, YIW, LUM, MA/RTM, then the cycle), plus up to `2τ` while the LCs
//! complete a request outstanding at the connection.
//!
//! When `k` components try to merge at once (every LC probes at the same instants, with
//! latency jitter) the count depends on the races — MAR and CC, attempts retried a
//! period later — so it is measured for comparison; what the seed does promise is that
//! merges are pairwise (so `k − 1` of them make one component) and that the P-S
//! connection protocol is deadlock-free (Theorem 7): the runs must end in one component
//! within the bound `k × (WYA period + (2n + 20)τ)`.

use super::merge_sim::{MT, MergeRun, MergeScenario, Phases, run};
use super::report::{Row, Verdict, exact, measured, median_max, num};
use std::collections::BTreeMap;

const EXP: &str = "recovery";

const NAMES: [&str; 9] = [
    "WYA", "YIW", "LUM", "MA", "MAR", "CC", "RTM", "SYT", "SYT-ack",
];

fn runs(sizes: Vec<u64>, phases: Phases, jitter_us: u64, seeds: u64) -> Vec<MergeRun> {
    let sc = MergeScenario {
        sizes,
        phases,
        copies: 2,
        jitter_us,
        planted: Default::default(),
    };
    (0..seeds).map(|seed| run(&sc, seed)).collect()
}

fn checked(rs: &[MergeRun]) -> bool {
    rs.iter()
        .all(|r| r.violations.is_empty() && r.installs_checked > 0)
}

/// Median count per message name, as "WYA 4, YIW 4, …" (names never sent left out).
fn breakdown(rs: &[MergeRun]) -> String {
    let mut parts = Vec::new();
    for name in NAMES {
        let v: Vec<f64> = (rs.iter())
            .map(|r| r.by_name.get(name).copied().unwrap_or(0) as f64)
            .collect();
        let (med, max) = median_max(&v);
        if max > 0.0 {
            parts.push(if med == max {
                format!("{name} {}", num(med))
            } else {
                format!("{name} {}…{}", num(med), num(max))
            });
        }
    }
    parts.join(", ")
}

fn checker_note(ok: bool) -> &'static str {
    if ok {
        "pairwise, union and one component held"
    } else {
        "VIOLATION"
    }
}

/// The merge rows: one merge of `n1 + n2` sites for each pair, and `k` components of
/// `n` sites merging at once for each `(k, n)`.
pub fn rows(pairs: &[(u64, u64)], many: &[(u64, u64)], seeds: u64) -> Vec<Row> {
    let mut out = Vec::new();
    for &(n1, n2) in pairs {
        let rs = runs(vec![n1, n2], Phases::FirstComponentFirst, 0, seeds);
        let ok = checked(&rs) && rs.iter().all(|r| r.first_merge == Some((n1, n2)));
        let msgs: Vec<f64> = rs.iter().map(|r| r.messages as f64).collect();
        let expected = 2 * n1 + 4 * n2 + 1;
        let mut row = exact(
            EXP,
            format!("LCM, n1={n1}, n2={n2}: messages per merge (M)"),
            format!("2·n1+4·n2+1 = {expected}"),
            &msgs,
            expected as f64,
            format!(
                "WYA ×n2, YIW ×n2, LUM, MA, RTM, SYT ×(n1+n2), SYT acks ×(n1+n2−2); measured {}; checkers: {}",
                breakdown(&rs),
                checker_note(ok)
            ),
        );
        if !ok {
            row.verdict = Verdict::Fails;
        }
        out.push(row);
        let tau: Vec<f64> = (rs.iter())
            .map(|r| r.first_merge_us.map_or(f64::NAN, |t| t as f64 / MT as f64))
            .collect();
        let (lo, hi) = ((n1 + n2 + 4) as f64, (n1 + n2 + 6) as f64);
        let in_bound = tau.iter().all(|t| *t >= lo && *t <= hi);
        out.push(measured(
            EXP,
            format!("LCM, n1={n1}, n2={n2}: LC1's WYA to the SYT's return (τ)"),
            format!("(n1+n2+4)τ, +≤2τ outstanding = [{}, {}]", num(lo), num(hi)),
            &tau,
            if in_bound && ok {
                Verdict::WithinBound
            } else {
                Verdict::Fails
            },
            "WYA, YIW, LUM, MA and RTM, then the cycle; an LC completes a request outstanding at the connection first".into(),
        ));
    }
    for &(k, n) in many {
        let sizes: Vec<u64> = (0..k).map(|i| n / k + u64::from(i < n % k)).collect();
        let rs = runs(sizes, Phases::Together, MT, seeds);
        let ok = checked(&rs);
        let merges: Vec<f64> = rs.iter().map(|r| r.merges as f64).collect();
        let mut row = exact(
            EXP,
            format!("LCM, k={k} components of n={n} at once: merges to one component"),
            format!("k − 1 = {} (pairwise, §4.5)", k - 1),
            &merges,
            (k - 1) as f64,
            format!(
                "every LC probes at the same instants, latency τ…2τ; checkers: {}",
                checker_note(ok)
            ),
        );
        if !ok {
            row.verdict = Verdict::Fails;
        }
        out.push(row);
        let period = rs.first().map_or(1, |r| r.wya_period_us) as f64;
        let bound = rs.first().map_or(0, |r| r.bound_us) as f64 / period;
        let periods: Vec<f64> = (rs.iter())
            .map(|r| r.one_component_us.map_or(f64::NAN, |t| t as f64 / period))
            .collect();
        let reached = rs.iter().all(|r| r.one_component_us.is_some());
        out.push(measured(
            EXP,
            format!("LCM, k={k}, n={n}: heal to one component (WYA periods)"),
            format!(
                "finite (Theorem 7, deadlock-free); bound k(P+(2n+20)τ) = {}",
                num(bound)
            ),
            &periods,
            if reached && ok {
                Verdict::WithinBound
            } else {
                Verdict::Fails
            },
            format!(
                "P = WYA period = {} ms; an attempt that meets MAR is retried at the LC's next round",
                num(period / 1_000.0)
            ),
        ));
        let msgs: Vec<f64> = rs.iter().map(|r| r.messages as f64).collect();
        let mut contention: BTreeMap<&str, u64> = BTreeMap::new();
        for r in &rs {
            for name in ["MAR", "CC"] {
                *contention.entry(name).or_default() += r.by_name.get(name).copied().unwrap_or(0);
            }
        }
        out.push(measured(
            EXP,
            format!("LCM, k={k}, n={n}: messages to one component (M)"),
            "no formula in the seed".into(),
            &msgs,
            if ok {
                Verdict::ForComparison
            } else {
                Verdict::Fails
            },
            format!(
                "per run: {}; {} MAR and {} CC over {seeds} runs",
                breakdown(&rs),
                contention["MAR"],
                contention["CC"]
            ),
        ));
    }
    out
}
