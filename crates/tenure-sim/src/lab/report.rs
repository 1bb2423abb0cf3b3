//! A lab table: one row per measured figure, beside the seed's figure, with a verdict.

use serde::Serialize;

/// How a measured figure compares with the seed's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Equal to the seed's figure (or the seed's outcome was observed).
    Matches,
    /// Inside the seed's bound or range.
    WithinBound,
    /// Not the seed's figure, for the reason given, which the run also measured (the
    /// figure is explained, not merely different).
    Differs,
    /// Tenure's own figure, measured beside the seed's for comparison (no bound).
    ForComparison,
    /// Neither the seed's figure nor the explanation: something is wrong.
    Fails,
}

impl Verdict {
    /// Whether the row holds (every verdict but `Fails`).
    pub fn holds(self) -> bool {
        self != Verdict::Fails
    }

    /// The verdict's name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Matches => "matches",
            Verdict::WithinBound => "within bound",
            Verdict::Differs => "differs",
            Verdict::ForComparison => "for comparison",
            Verdict::Fails => "FAILS",
        }
    }
}

/// One row of a lab table.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// The experiment (`mutex`, `election`, `safetalk`, `update`).
    pub experiment: &'static str,
    /// What is measured.
    pub what: String,
    /// The seed's figure, written as the seed writes it, with its value where it has one.
    pub paper: String,
    /// Median over the runs (seeds, and entries or elections within a run).
    pub median: f64,
    /// Maximum over the runs.
    pub max: f64,
    /// The verdict.
    pub verdict: Verdict,
    /// Why: the observation behind the verdict, or the reason a figure differs.
    pub note: String,
}

/// Median (lower) and maximum of measured values; `(NaN, NaN)` when there are none.
pub fn median_max(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    (v[(v.len() - 1) / 2], v[v.len() - 1])
}

/// Minimum of measured values (`NaN` when there are none).
pub fn min(values: &[f64]) -> f64 {
    values.iter().copied().reduce(f64::min).unwrap_or(f64::NAN)
}

/// A row of measured `values` (their median and maximum) with its verdict.
pub fn measured(
    experiment: &'static str,
    what: String,
    paper: String,
    values: &[f64],
    verdict: Verdict,
    note: String,
) -> Row {
    let (median, max) = median_max(values);
    Row {
        experiment,
        what,
        paper,
        median,
        max,
        verdict,
        note,
    }
}

/// A row whose verdict is `Matches` when every value equals `expected`, else `Fails`.
pub fn exact(
    experiment: &'static str,
    what: String,
    paper: String,
    values: &[f64],
    expected: f64,
    note: String,
) -> Row {
    let ok = !values.is_empty() && values.iter().all(|v| *v == expected);
    let verdict = if ok { Verdict::Matches } else { Verdict::Fails };
    measured(experiment, what, paper, values, verdict, note)
}

/// Format a measured number: integers without decimals.
pub fn num(v: f64) -> String {
    if v.is_nan() {
        "—".into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}
