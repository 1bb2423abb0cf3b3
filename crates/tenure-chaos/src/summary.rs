//! The run's summary, Jepsen-style: operations (locks, objects, lookup) by kind and
//! outcome, faults by kind (and the kinds this machine cannot inject), the checks, and
//! availability — the longest time each store answered no lock or object operation
//! while some client was trying, and how long after each fault's end every store
//! answered again — and for clock steps, how long a store answered nothing while a
//! device's wall clock was stepped and how many locks were granted meanwhile.

use crate::check::CheckResult;
use crate::history::{
    Fault, LookupKind, LookupOutcome, ObjKind, ObjOutcome, OpKind, Outcome, Recorded,
};
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

/// One clock step (a `clock-step` fault) and the service while it was on.
#[derive(Clone, Debug, Serialize)]
pub struct ClockStep {
    /// Fault index.
    pub fault: usize,
    /// Which device and how far (`d2 wall clock -30s`).
    pub detail: String,
    /// Start (ms since the run started): from here every wall-clock read of the device
    /// returns the stepped time (the shim reads its control file once a second).
    pub from_ms: u64,
    /// End (ms): from here every read returns true time again (some may have, up to a
    /// second before).
    pub to_ms: u64,
    /// The longest stretch, over the stores, in which a store answered no operation
    /// while some client tried, within the step (ms).
    pub longest_ms: u64,
    /// That store (none: no client tried any store during the step).
    pub store: Option<u32>,
    /// When that stretch began before the step (ms before its start): the store was
    /// already out when the step began (the previous fault's recovery), none if it
    /// began within the step.
    pub carried_ms: Option<u64>,
    /// The longest stretch, over the stores, that began within the step (ms): the
    /// outage the step itself may have caused.
    pub began_ms: u64,
    /// That store.
    pub began_store: Option<u32>,
    /// Lock grants the clients received during the step.
    pub grants: u64,
}

/// The clock steps of a run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ClockSteps {
    /// Each step.
    pub steps: Vec<ClockStep>,
    /// Per store, its longest stretch without a success (while clients tried) within
    /// some step.
    pub per_store: Vec<StoreGap>,
    /// Lock grants received during steps, in all: the stores — the stepped device's
    /// among them — kept granting.
    pub grants: u64,
}

/// Everything the run reports.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// The seed.
    pub seed: u64,
    /// Devices.
    pub devices: usize,
    /// Whether they served TLS (and mutual TLS between peers).
    pub tls: bool,
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
    /// Service during clock steps.
    pub clock_steps: ClockSteps,
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

/// One operation on a store, for availability: locks and objects alike.
#[derive(Clone, Debug)]
pub struct Span {
    /// Store.
    pub store: u32,
    /// Lock name or object key.
    pub name: String,
    /// Invoke (µs).
    pub invoke_us: u64,
    /// Response (µs); none: unknown.
    pub response_us: Option<u64>,
    /// Whether it succeeded.
    pub ok: bool,
}

/// The operations of a run on stores (a session's end is not one).
pub fn spans(r: &Recorded) -> Vec<Span> {
    let locks = (r.ops.iter())
        .filter(|o| o.kind != OpKind::Expiry)
        .map(|o| Span {
            store: o.store,
            name: o.name.clone(),
            invoke_us: o.invoke_us,
            response_us: o.response_us,
            ok: o.ok(),
        });
    let objects = r.objects.iter().map(|o| Span {
        store: o.store,
        name: o.key.clone(),
        invoke_us: o.invoke_us,
        response_us: o.response_us,
        ok: matches!(
            o.outcome,
            ObjOutcome::Written { .. } | ObjOutcome::Mismatch { .. } | ObjOutcome::Read(_)
        ),
    });
    locks.chain(objects).collect()
}

/// Per store: longest stretch with no successful operation while some client tried,
/// over the operations invoked before the workload stopped at `end_us` (the final
/// phase's acquires wait for locks held on purpose).
pub fn unavailability(ops: &[Span], end_us: u64) -> Vec<StoreGap> {
    unavailability_in(ops, 0, end_us)
}

/// [`unavailability`] within `[from_us, to_us]`: operations are cut to the window, and a
/// store that answered nothing since before it counts from its start.
pub fn unavailability_in(ops: &[Span], from_us: u64, to_us: u64) -> Vec<StoreGap> {
    let mut out: Vec<StoreGap> = Vec::new();
    for (store, names, gaps) in gaps_in(ops, from_us, to_us) {
        let (from, longest) = (gaps.iter().copied())
            .max_by_key(|(a, len)| (*len, std::cmp::Reverse(*a)))
            .unwrap_or((0, 0));
        out.push(StoreGap {
            store,
            names,
            longest_ms: longest / 1000,
            from_ms: from / 1000,
        });
    }
    out
}

/// Per store (with the names its operations used): every stretch `(start, length)` (µs)
/// within `[from_us, to_us]` in which it answered no operation while some client tried.
/// A stretch that began before the window starts at the window's start.
#[allow(clippy::type_complexity)]
fn gaps_in(ops: &[Span], from_us: u64, to_us: u64) -> Vec<(u32, Vec<String>, Vec<(u64, u64)>)> {
    let mut by_store: BTreeMap<u32, Vec<&Span>> = BTreeMap::new();
    for o in
        (ops.iter()).filter(|o| o.invoke_us < to_us && o.response_us.unwrap_or(to_us) >= from_us)
    {
        by_store.entry(o.store).or_default().push(o);
    }
    let mut out = Vec::new();
    for (store, ops) in by_store {
        // Busy periods: the union of [invoke, response] (unknown: to the window's end).
        let mut spans: Vec<(u64, u64)> = ops
            .iter()
            .map(|o| {
                (
                    o.invoke_us.max(from_us),
                    (o.response_us.unwrap_or(to_us).clamp(o.invoke_us, to_us)).max(from_us),
                )
            })
            .collect();
        spans.sort();
        let mut oks: Vec<u64> = ops
            .iter()
            .filter(|o| o.ok)
            .filter_map(|o| o.response_us)
            .collect();
        oks.sort();
        let mut gaps = Vec::new();
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
                gaps.push((last, t - last));
                last = t;
            }
            gaps.push((last, b - last));
        }
        let mut names: Vec<String> = ops.iter().map(|o| o.name.clone()).collect();
        names.sort();
        names.dedup();
        out.push((store, names, gaps));
    }
    out
}

/// How far before a clock step its window looks, to tell a stretch that began before the
/// step (the previous fault's recovery) from one that began within it.
const LOOKBACK_US: u64 = 30_000_000;

/// A stretch that began this long before a step is shown as carried over (a shorter
/// lead is an operation's own latency).
const CARRIED_SHOWN_MS: u64 = 500;

/// The clock steps among `r`'s faults: per step, the longest a store answered nothing
/// while clients tried and the lock grants received within it; per store, its longest
/// such stretch in any step. Windows end at `end_us` at the latest (the workload's stop).
pub fn clock_steps(r: &Recorded, ops: &[Span], end_us: u64) -> ClockSteps {
    let mut out = ClockSteps::default();
    let mut per_store: BTreeMap<u32, StoreGap> = BTreeMap::new();
    for (i, f) in r.faults.iter().enumerate() {
        if f.kind != "clock-step" {
            continue;
        }
        let (from, to) = (f.start_us, f.end_us.unwrap_or(end_us).min(end_us));
        let gaps = unavailability_in(ops, from, to);
        let worst = gaps.iter().max_by_key(|g| g.longest_ms);
        // Seen from further back, a stretch that covers the step's start began before it.
        let wide = gaps_in(ops, from.saturating_sub(LOOKBACK_US), to);
        let carried_ms = worst.and_then(|w| {
            let (_, _, g) = wide.iter().find(|(s, _, _)| *s == w.store)?;
            let (a, _) = g.iter().find(|(a, len)| *a < from && a + len > from)?;
            Some((from - a) / 1000)
        });
        let began = (wide.iter())
            .flat_map(|(s, _, g)| g.iter().map(move |(a, len)| (*s, *a, *len)))
            .filter(|(_, a, _)| *a >= from)
            .max_by_key(|(_, a, len)| (*len, std::cmp::Reverse(*a)));
        let grants = (r.ops.iter())
            .filter(|o| o.kind == OpKind::Acquire && matches!(o.outcome, Outcome::Granted { .. }))
            .filter(|o| o.response_us.is_some_and(|t| t >= from && t <= to))
            .count() as u64;
        out.steps.push(ClockStep {
            fault: i,
            detail: f.detail.clone(),
            from_ms: from / 1000,
            to_ms: to / 1000,
            longest_ms: worst.map_or(0, |g| g.longest_ms),
            store: worst.map(|g| g.store),
            carried_ms,
            began_ms: began.map_or(0, |(_, _, len)| len / 1000),
            began_store: began.map(|(s, _, _)| s),
            grants,
        });
        out.grants += grants;
        for g in gaps {
            match per_store.get(&g.store) {
                Some(had) if had.longest_ms >= g.longest_ms => {}
                _ => {
                    per_store.insert(g.store, g);
                }
            }
        }
    }
    out.per_store = per_store.into_values().collect();
    out
}

/// Per fault: the longest time over the stores from its end to a successful operation.
pub fn recovery(ops: &[Span], faults: &[Fault]) -> Vec<Recovery> {
    let mut oks: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for o in ops.iter().filter(|o| o.ok) {
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

/// Every operation of a run as (kind, outcome, why it failed or is unknown, name): locks,
/// objects and lookup alike.
fn labelled(r: &Recorded) -> Vec<(&'static str, &'static str, Option<&str>, &str)> {
    let mut out = Vec::new();
    for o in &r.ops {
        let why = match &o.outcome {
            Outcome::Fail(w) | Outcome::Unknown(w) => Some(w.as_str()),
            _ => None,
        };
        out.push((
            kind_name(&o.kind),
            outcome_name(&o.outcome),
            why,
            o.name.as_str(),
        ));
    }
    for o in &r.objects {
        let kind = match o.kind {
            ObjKind::Put => "object put",
            ObjKind::Cas => "object cas",
            ObjKind::Get => "object get",
        };
        let (outcome, why) = match &o.outcome {
            ObjOutcome::Written { .. } => ("ok", None),
            ObjOutcome::Mismatch { .. } => ("mismatch", None),
            ObjOutcome::Read(Some(_)) => ("ok", None),
            ObjOutcome::Read(None) => ("absent", None),
            ObjOutcome::Fail(w) => ("fail", Some(w.as_str())),
            ObjOutcome::Unknown(w) => ("unknown", Some(w.as_str())),
        };
        out.push((kind, outcome, why, o.key.as_str()));
    }
    for o in &r.lookups {
        let kind = match (&o.kind, o.persistent) {
            (LookupKind::Publish, true) => "publish (persistent)",
            (LookupKind::Publish, false) => "publish (volatile)",
            (LookupKind::Stop, _) => "provider stop",
            (LookupKind::Get, _) => "lookup get",
        };
        let (outcome, why) = match &o.outcome {
            LookupOutcome::Published { .. } | LookupOutcome::Stopped => ("ok", None),
            LookupOutcome::Found { entry: Some(_), .. } => ("ok", None),
            LookupOutcome::Found { entry: None, .. } => ("absent", None),
            LookupOutcome::Fail(w) => ("fail", Some(w.as_str())),
            LookupOutcome::Unknown(w) => ("unknown", Some(w.as_str())),
        };
        out.push((kind, outcome, why, o.key.as_str()));
    }
    out
}

/// Names for a line of the summary: the generations of a lock name (`/a/lock.0`,
/// `/a/lock.1`, …) as one `/a/lock.* (n generations)`.
fn brief(names: &[String]) -> String {
    let mut stems: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for n in names {
        let stem = match n.rsplit_once('.') {
            Some((stem, g)) if !g.is_empty() && g.bytes().all(|b| b.is_ascii_digit()) => stem,
            _ => n.as_str(),
        };
        stems.entry(stem).or_default().push(n);
    }
    let parts: Vec<String> = (stems.into_iter())
        .map(|(stem, ns)| match ns.as_slice() {
            [one] => one.to_string(),
            _ => format!("{stem}.* ({} generations)", ns.len()),
        })
        .collect();
    parts.join(", ")
}

/// Why operations failed or ended unknown, by kind and reason (numbers and names
/// blanked so that reasons group).
pub fn reasons(r: &Recorded) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (kind, what, why, name) in labelled(r) {
        let Some(why) = why else {
            continue;
        };
        let why: String = why
            .replace(name, "NAME")
            .chars()
            .map(|c| if c.is_ascii_digit() { '#' } else { c })
            .take(110)
            .collect();
        *out.entry(format!("{kind} {what}: {why}")).or_default() += 1;
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
    for (kind, outcome, _, _) in labelled(r) {
        *ops.entry(kind.into())
            .or_default()
            .entry(outcome.into())
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
            "chaos run: seed {}, {} devices ({}), {} clients, {:.0} s of faults",
            self.seed,
            self.devices,
            if self.tls {
                "TLS, mutual TLS between peers"
            } else {
                "plaintext"
            },
            self.clients,
            self.fault_secs
        );
        let _ = writeln!(s, "\noperations:");
        for (kind, outs) in &self.ops {
            let total: u64 = outs.values().sum();
            let parts: Vec<String> = outs.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let _ = writeln!(s, "  {kind:<21} {total:>6}  ({})", parts.join(", "));
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
                    let _ = writeln!(s, "  {kind:<12}      -  (left out: {why})");
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
                "    {:>7.1}s-{:<7} {:<11} {:<40} recovered in {rec}",
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
                "  store {:<4} {:>6} ms from {:.1}s  {}",
                g.store,
                g.longest_ms,
                g.from_ms as f64 / 1000.0,
                brief(&g.names)
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
        let steps = &self.clock_steps;
        if !steps.steps.is_empty() {
            let _ = writeln!(
                s,
                "\nclock steps (one device's wall clock; its monotonic clocks untouched):"
            );
            for st in &steps.steps {
                let _ = writeln!(
                    s,
                    "    {:>7.1}s-{:<7} {:<24} longest without a success {:>6} ms{}{}, {} grants",
                    st.from_ms as f64 / 1000.0,
                    format!("{:.1}s", st.to_ms as f64 / 1000.0),
                    st.detail,
                    st.longest_ms,
                    st.store.map_or(String::new(), |x| format!(" (store {x})")),
                    (st.carried_ms.filter(|c| *c >= CARRIED_SHOWN_MS)).map_or(
                        String::new(),
                        |c| format!(
                            ", already out {c} ms before; longest begun within {} ms",
                            st.began_ms
                        )
                    ),
                    st.grants
                );
            }
            if let Some(w) = steps.steps.iter().max_by_key(|st| st.longest_ms) {
                let _ = writeln!(
                    s,
                    "  longest a store served nothing during a step: {} ms{}; lock grants during steps: {}",
                    w.longest_ms,
                    w.store
                        .map_or(String::new(), |x| format!(" (store {x}, {})", w.detail)),
                    steps.grants
                );
            }
            if let Some(w) = steps.steps.iter().max_by_key(|st| st.began_ms) {
                let _ = writeln!(
                    s,
                    "  longest a store served nothing, begun within a step: {} ms{}",
                    w.began_ms,
                    (w.began_store)
                        .map_or(String::new(), |x| format!(" (store {x}, {})", w.detail)),
                );
            }
            let per: Vec<String> = (steps.per_store.iter())
                .map(|g| format!("{}:{}", g.store, g.longest_ms))
                .collect();
            let _ = writeln!(s, "  per store during steps (store:ms): {}", per.join(" "));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn span(store: u32, invoke_ms: u64, response_ms: u64) -> Span {
        Span {
            store,
            name: format!("/s{store}"),
            invoke_us: invoke_ms * 1000,
            response_us: Some(response_ms * 1000),
            ok: true,
        }
    }

    /// A store already out when a clock step begins is reported as carried over, and
    /// the longest stretch begun within the step is told apart.
    #[test]
    fn clock_step_outage_carried_from_before_is_told_apart() {
        let mut ops = Vec::new();
        for t in (0..9000).step_by(100) {
            ops.push(span(1, t, t + 50));
        }
        // Store 1: out from 9.0 s to 12.0 s (one operation waits it out).
        ops.push(span(1, 9000, 12_000));
        // Store 2: serves until 11.0 s, then waits 500 ms.
        for t in (0..11_000).step_by(100) {
            ops.push(span(2, t, t + 10));
        }
        ops.push(span(2, 11_000, 11_500));
        let r = Recorded {
            ops: Vec::new(),
            holds: Vec::new(),
            faults: vec![Fault {
                kind: "clock-step".into(),
                detail: "d1 wall clock +30s".into(),
                devices: vec![1],
                start_us: 10_000_000,
                end_us: Some(13_000_000),
            }],
            objects: Vec::new(),
            object_histories: Default::default(),
            lookups: Vec::new(),
        };
        let steps = clock_steps(&r, &ops, 20_000_000);
        let st = &steps.steps[0];
        assert_eq!((st.longest_ms, st.store), (2000, Some(1)));
        assert_eq!(
            st.carried_ms,
            Some(1000),
            "store 1 was tried and out from 9.0 s"
        );
        assert_eq!((st.began_ms, st.began_store), (500, Some(2)));
    }

    #[test]
    fn generations_of_a_name_show_as_one() {
        let names: Vec<String> = [
            "/chaos0/lock.0",
            "/chaos0/lock.1",
            "/chaos0/lock.10",
            "/k/v1",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            super::brief(&names),
            "/chaos0/lock.* (3 generations), /k/v1"
        );
        assert_eq!(super::brief(&["/a/lock.4".into()]), "/a/lock.4");
    }
}
