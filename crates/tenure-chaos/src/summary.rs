//! The run's summary, Jepsen-style: operations by kind and outcome, faults by kind, the
//! checks, and availability — the longest time each store answered no operation while
//! some client was trying, and how long after each fault's end every store answered
//! again.

use crate::check::CheckResult;
use crate::history::{Fault, Op, OpKind, Outcome, Recorded};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Longest unavailability of one store.
#[derive(Clone, Debug, Serialize)]
pub struct StoreGap {
    /// Store.
    pub store: u32,
    /// Names of the workload in it.
    pub names: Vec<String>,
    /// Longest interval without a successful operation while some client was trying (ms).
    pub longest_ms: u64,
    /// Its start (ms since the run started).
    pub from_ms: u64,
}

/// Recovery after one fault.
#[derive(Clone, Debug, Serialize)]
pub struct Recovery {
    /// Fault index.
    pub fault: usize,
    /// Its kind.
    pub kind: String,
    /// Longest time, over the stores, from the fault's end to that store's first
    /// successful operation (ms); none if some store never answered again in the run.
    pub ms: Option<u64>,
}

/// Everything the run reports.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// The seed.
    pub seed: u64,
    /// Devices.
    pub devices: usize,
    /// Clients.
    pub clients: usize,
    /// Length of the faulty phase (s).
    pub fault_secs: f64,
    /// Operations: kind → outcome → count.
    pub ops: BTreeMap<String, BTreeMap<String, u64>>,
    /// Faults: kind → count.
    pub faults: BTreeMap<String, u64>,
    /// Kinds of fault this machine cannot inject: kind → why.
    pub unavailable: BTreeMap<String, String>,
    /// Every fault.
    pub fault_log: Vec<Fault>,
    /// Why operations ended unknown or failed: reason → count.
    pub reasons: BTreeMap<String, u64>,
    /// The checks.
    pub checks: Vec<CheckResult>,
    /// Per-store unavailability.
    pub unavailability: Vec<StoreGap>,
    /// Recovery after each fault.
    pub recovery: Vec<Recovery>,
    /// From killing every device to every name's holders read again (ms).
    pub full_restart_ms: Option<u64>,
    /// The run's data (logs) if kept.
    pub data_dir: Option<String>,
}

impl Summary {
    /// Whether some check failed.
    pub fn violations(&self) -> usize {
        self.checks.iter().map(|c| c.violations.len()).sum()
    }
}

fn outcome_name(o: &Outcome) -> &'static str {
    match o {
        Outcome::Granted { .. } | Outcome::Released | Outcome::Holders(_) => "ok",
        Outcome::NotHeld => "not-held",
        Outcome::Fail(_) => "fail",
        Outcome::Unknown(_) => "unknown",
    }
}

fn kind_name(k: &OpKind) -> &'static str {
    match k {
        OpKind::Acquire => "acquire",
        OpKind::Release => "release",
        OpKind::Expiry => "session-end",
        OpKind::Holders => "holders",
    }
}

/// Per store: longest stretch with no successful operation while some client tried,
/// over the operations invoked before the workload stopped at `end_us` (the final
/// phase's acquires wait for locks held on purpose).
pub fn unavailability(ops: &[Op], end_us: u64) -> Vec<StoreGap> {
    let mut by_store: BTreeMap<u32, Vec<&Op>> = BTreeMap::new();
    for o in ops
        .iter()
        .filter(|o| o.kind != OpKind::Expiry && o.invoke_us < end_us)
    {
        by_store.entry(o.store).or_default().push(o);
    }
    let mut out = Vec::new();
    for (store, ops) in by_store {
        // Busy periods: the union of [invoke, response] (unknown: to the run's end).
        let mut spans: Vec<(u64, u64)> = ops
            .iter()
            .map(|o| {
                (
                    o.invoke_us,
                    o.response_us.unwrap_or(end_us).clamp(o.invoke_us, end_us),
                )
            })
            .collect();
        spans.sort();
        let mut oks: Vec<u64> = ops
            .iter()
            .filter(|o| o.ok())
            .filter_map(|o| o.response_us)
            .collect();
        oks.sort();
        let (mut longest, mut from) = (0, 0);
        let mut i = 0;
        while i < spans.len() {
            let (a, mut b) = spans[i];
            while i + 1 < spans.len() && spans[i + 1].0 <= b {
                i += 1;
                b = b.max(spans[i].1);
            }
            i += 1;
            let mut last = a;
            for t in oks.iter().copied().filter(|t| *t >= a && *t <= b) {
                if t - last > longest {
                    (longest, from) = (t - last, last);
                }
                last = t;
            }
            if b - last > longest {
                (longest, from) = (b - last, last);
            }
        }
        let mut names: Vec<String> = ops.iter().map(|o| o.name.clone()).collect();
        names.sort();
        names.dedup();
        out.push(StoreGap {
            store,
            names,
            longest_ms: longest / 1000,
            from_ms: from / 1000,
        });
    }
    out
}

/// Per fault: the longest time over the stores from its end to a successful operation.
pub fn recovery(ops: &[Op], faults: &[Fault]) -> Vec<Recovery> {
    let mut oks: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for o in ops.iter().filter(|o| o.ok()) {
        if let Some(t) = o.response_us {
            oks.entry(o.store).or_default().push(t);
        }
    }
    for v in oks.values_mut() {
        v.sort();
    }
    faults
        .iter()
        .enumerate()
        .filter_map(|(i, f)| {
            let end = f.end_us?;
            let mut worst = Some(0);
            for v in oks.values() {
                match v.iter().find(|t| **t >= end) {
                    Some(t) => worst = worst.map(|w: u64| w.max(t - end)),
                    None => worst = None,
                }
            }
            Some(Recovery {
                fault: i,
                kind: f.kind.clone(),
                ms: worst.map(|w| w / 1000),
            })
        })
        .collect()
}

/// Why operations failed or ended unknown, by kind and reason (numbers and names
/// blanked so that reasons group).
pub fn reasons(ops: &[Op]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for o in ops {
        let (what, why) = match &o.outcome {
            Outcome::Fail(w) => ("fail", w),
            Outcome::Unknown(w) => ("unknown", w),
            _ => continue,
        };
        let why: String = why
            .chars()
            .map(|c| if c.is_ascii_digit() { '#' } else { c })
            .collect::<String>()
            .replace(&o.name, "NAME");
        let why: String = why.chars().take(110).collect();
        *out.entry(format!("{} {what}: {why}", kind_name(&o.kind)))
            .or_default() += 1;
    }
    out
}

/// Counts of operations and faults.
pub fn counts(
    r: &Recorded,
) -> (
    BTreeMap<String, BTreeMap<String, u64>>,
    BTreeMap<String, u64>,
) {
    let mut ops: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for o in &r.ops {
        *ops.entry(kind_name(&o.kind).into())
            .or_default()
            .entry(outcome_name(&o.outcome).into())
            .or_default() += 1;
    }
    let mut faults = BTreeMap::new();
    for f in &r.faults {
        *faults.entry(f.kind.clone()).or_default() += 1;
    }
    (ops, faults)
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "chaos run: seed {}, {} devices, {} clients, {:.0} s of faults",
            self.seed, self.devices, self.clients, self.fault_secs
        );
        let _ = writeln!(s, "\noperations:");
        for (kind, outs) in &self.ops {
            let total: u64 = outs.values().sum();
            let parts: Vec<String> = outs.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let _ = writeln!(s, "  {kind:<12} {total:>6}  ({})", parts.join(", "));
        }
        if !self.reasons.is_empty() {
            let _ = writeln!(s, "  fail/unknown reasons:");
            for (r, n) in &self.reasons {
                let _ = writeln!(s, "    {n:>6}  {r}");
            }
        }
        let _ = writeln!(s, "\nfaults:");
        for kind in crate::nemesis::KINDS {
            match (self.faults.get(kind), self.unavailable.get(kind)) {
                (_, Some(why)) => {
                    let _ = writeln!(s, "  {kind:<12}      -  (unavailable here: {why})");
                }
                (n, None) => {
                    let _ = writeln!(s, "  {kind:<12} {:>6}", n.copied().unwrap_or(0));
                }
            }
        }
        for (i, fl) in self.fault_log.iter().enumerate() {
            let rec = self
                .recovery
                .iter()
                .find(|r| r.fault == i)
                .and_then(|r| r.ms)
                .map_or("-".to_string(), |m| format!("{m} ms"));
            let _ = writeln!(
                s,
                "    {:>7.1}s-{:<7} {:<8} {:<40} recovered in {rec}",
                fl.start_us as f64 / 1e6,
                fl.end_us
                    .map_or("?".into(), |e| format!("{:.1}s", e as f64 / 1e6)),
                fl.kind,
                fl.detail,
            );
        }
        let _ = writeln!(
            s,
            "\nunavailability (longest stretch without a success while clients tried):"
        );
        for g in &self.unavailability {
            let _ = writeln!(
                s,
                "  store {:<4} {:>6} ms from {:.1}s  {:?}",
                g.store,
                g.longest_ms,
                g.from_ms as f64 / 1000.0,
                g.names
            );
        }
        if let Some(worst) = self.recovery.iter().filter_map(|r| r.ms).max() {
            let _ = writeln!(s, "  worst recovery after a fault's end: {worst} ms");
        }
        if let Some(ms) = self.full_restart_ms {
            let _ = writeln!(
                s,
                "  full restart of every device: every lock readable after {ms} ms"
            );
        }
        let _ = writeln!(s, "\nchecks:");
        for c in &self.checks {
            let _ = writeln!(
                s,
                "  {:<40} {:<9} {}",
                c.name,
                c.status.to_uppercase(),
                c.detail
            );
            for v in c.violations.iter().take(10) {
                let _ = writeln!(s, "      {v}");
            }
        }
        let v = self.violations();
        let _ = writeln!(
            s,
            "\n{}",
            if v == 0 {
                "no violations".to_string()
            } else {
                format!("{v} VIOLATIONS (seed {})", self.seed)
            }
        );
        if let Some(d) = &self.data_dir {
            let _ = writeln!(s, "logs kept in {d}");
        }
        f.write_str(&s)
    }
}
