//! The checks on a real history, with the simulator's own checkers
//! ([`tenure_sim::lockcheck::LockChecker`], [`tenure_sim::lincheck`]) fed the real
//! operations in real-time order:
//!
//! - **mutual exclusion** over the clients' conservative holding intervals;
//! - **fencing**: a grant answered before another was invoked has the smaller token, and
//!   no two grants of a name share one;
//! - **linearizability** of the lock history against `LockModel`, per name, bounded by
//!   a step budget per name and a time budget for the whole run's searches
//!   ([`SearchBound`]): a name whose search hits either is reported unchecked, never passed;
//! - **nothing acknowledged is lost** after the final heal and full restart: every lock
//!   a client still holds (its session alive) is held by that session with that token,
//!   and no acknowledged release shows up again.
//!
//! Session ids are per store, so every (store, session) pair gets a run-wide id before
//! the checkers see it.

use crate::history::{Hold, Op, OpKind, Outcome};
use serde::Serialize;
use std::collections::BTreeMap;
use tenure_core::lockctl::{FencingToken, HolderInfo, LockMode, RequestId, SessionId};
use tenure_core::{DeviceId, StoreId};
use tenure_sim::Violation;
use tenure_sim::lincheck::{self, LockInput, LockModel, LockOutput, Operation, Verdict};
use tenure_sim::lockcheck::{Interval, LockChecker};

/// One check's verdict.
#[derive(Clone, Debug, Serialize)]
pub struct CheckResult {
    /// Check name.
    pub name: String,
    /// `pass`, `fail` or `unchecked`.
    pub status: String,
    /// Comparisons made or operations covered.
    pub detail: String,
    /// Violations (human-readable).
    pub violations: Vec<String>,
}

impl CheckResult {
    /// A verdict: `fail` with violations, else `unchecked` if the check could not be
    /// completed, else `pass`.
    pub fn new(name: &str, violations: Vec<String>, unchecked: bool, detail: String) -> Self {
        let status = if !violations.is_empty() {
            "fail"
        } else if unchecked {
            "unchecked"
        } else {
            "pass"
        };
        CheckResult {
            name: name.to_string(),
            status: status.to_string(),
            detail,
            violations,
        }
    }
}

/// What the final check read after the full restart: per name, the holders.
#[derive(Clone, Debug, Default)]
pub struct FinalRead {
    /// When the reads were made (µs).
    pub at_us: u64,
    /// name → holders (session, token); a name missing could not be read.
    pub holders: BTreeMap<String, Vec<(u64, FencingToken)>>,
    /// Sessions (store, id) known to live at `at_us` (the client's deadline is ahead and
    /// the session was not reported expired), with that deadline.
    pub live: BTreeMap<(u32, u64), u64>,
}

/// Maps (store, session) to run-wide ids.
#[derive(Default)]
struct Ids(BTreeMap<(u32, u64), u64>);

impl Ids {
    fn get(&mut self, store: u32, session: u64) -> SessionId {
        let n = self.0.len() as u64 + 1;
        SessionId(*self.0.entry((store, session)).or_insert(n))
    }
}

fn show(v: &Violation) -> String {
    v.to_string()
}

/// The lock history in the linearizability checker's form (holders' sessions mapped).
fn lin_ops(ops: &[Op], ids: &mut Ids) -> Vec<Operation<LockInput, LockOutput>> {
    let mut out = Vec::new();
    for o in ops {
        let session = ids.get(o.store, o.session);
        let input = match o.kind {
            OpKind::Acquire => LockInput::Acquire {
                name: o.name.clone(),
                session,
                mode: LockMode::Exclusive,
            },
            OpKind::Release | OpKind::Expiry => LockInput::Release {
                name: o.name.clone(),
                session,
            },
            OpKind::Holders => LockInput::Holders {
                name: o.name.clone(),
            },
        };
        let output = match &o.outcome {
            Outcome::Granted { token } => Some(LockOutput::Granted { token: *token }),
            Outcome::Released => Some(LockOutput::Released),
            Outcome::NotHeld => Some(LockOutput::NotHeld),
            Outcome::Holders(h) => {
                let mut v: Vec<(SessionId, LockMode)> = h
                    .iter()
                    .map(|(s, _)| (ids.get(o.store, *s), LockMode::Exclusive))
                    .collect();
                v.sort();
                Some(LockOutput::Holders(v))
            }
            Outcome::Fail(_) => Some(LockOutput::Failed),
            Outcome::Unknown(_) => None,
        };
        // An acquire that failed had no effect and says nothing.
        if matches!(output, Some(LockOutput::Failed)) {
            continue;
        }
        out.push(Operation {
            client: o.client,
            input,
            invoke: o.invoke_us,
            response: match (o.response_us, output) {
                (Some(t), Some(out)) => Some((t.max(o.invoke_us), out)),
                _ => None,
            },
        });
    }
    out.sort_by_key(|o| o.invoke);
    out
}

/// How far the linearizability searches may go: `steps` per name (or key), and until
/// `deadline` for all of them together. A search stopped by either leaves its name
/// unchecked. A bare step count has no deadline.
#[derive(Clone, Copy, Debug)]
pub struct SearchBound {
    /// Search steps per name.
    pub steps: u64,
    /// When every search stops.
    pub deadline: Option<std::time::Instant>,
}

impl From<u64> for SearchBound {
    fn from(steps: u64) -> Self {
        SearchBound {
            steps,
            deadline: None,
        }
    }
}

impl SearchBound {
    /// The simulator's limits for one search under this bound.
    pub fn limits(&self) -> lincheck::Limits {
        lincheck::Limits {
            max_steps: self.steps,
            deadline: self.deadline,
            ..Default::default()
        }
    }
}

/// Run every check. `final_read` is the read after the full restart, if it was made.
pub fn run_checks(
    ops: &[Op],
    holds: &[Hold],
    final_read: Option<&FinalRead>,
    bound: impl Into<SearchBound>,
) -> Vec<CheckResult> {
    let mut ids = Ids::default();
    let mut results = Vec::new();

    // Mutual exclusion: intervals in start order, each checked against the earlier ones.
    let mut mx = LockChecker::default();
    let mut sorted: Vec<&Hold> = holds.iter().collect();
    sorted.sort_by_key(|h| h.start_us);
    for h in &sorted {
        let session = ids.get(h.store, h.session);
        mx.hold(
            &h.name,
            Interval {
                client: h.client,
                store: StoreId(h.store),
                session,
                mode: LockMode::Exclusive,
                token: h.token,
                start: h.start_us,
                end: h.end_us,
            },
        );
    }
    results.push(CheckResult::new(
        "mutual exclusion",
        mx.violations.iter().map(show).collect(),
        false,
        format!(
            "{} holding intervals, {} pairs compared",
            holds.len(),
            mx.counts.exclusion_checks
        ),
    ));

    // Fencing: grants invoked in invoke order, answered in answer order.
    let mut fc = LockChecker::default();
    let mut grants: Vec<(&Op, FencingToken)> = ops
        .iter()
        .filter_map(|o| match o.outcome {
            Outcome::Granted { token } if o.kind == OpKind::Acquire => Some((o, token)),
            _ => None,
        })
        .collect();
    grants.sort_by_key(|(o, _)| o.invoke_us);
    let idx: Vec<usize> = grants
        .iter()
        .map(|(o, _)| {
            fc.invoke(
                o.client,
                LockInput::Acquire {
                    name: o.name.clone(),
                    session: ids.get(o.store, o.session),
                    mode: LockMode::Exclusive,
                },
                o.invoke_us,
            )
        })
        .collect();
    let mut order: Vec<usize> = (0..grants.len()).collect();
    order.sort_by_key(|i| grants[*i].0.response_us);
    for i in order {
        let (o, t) = grants[i];
        fc.respond(
            idx[i],
            o.response_us.unwrap_or(o.invoke_us),
            LockOutput::Granted { token: t },
        );
    }
    results.push(CheckResult::new(
        "fencing tokens increase",
        fc.violations.iter().map(show).collect(),
        false,
        format!(
            "{} grants, {} pairs compared",
            grants.len(),
            fc.counts.fencing_checks
        ),
    ));

    // Linearizability, per name.
    let history = lin_ops(ops, &mut ids);
    let mut by_name: BTreeMap<String, Vec<Operation<LockInput, LockOutput>>> = BTreeMap::new();
    for o in history {
        let name = match &o.input {
            LockInput::Acquire { name, .. }
            | LockInput::Release { name, .. }
            | LockInput::Holders { name } => name.clone(),
        };
        by_name.entry(name).or_default().push(o);
    }
    let limits = bound.into().limits();
    let mut lin_violations = Vec::new();
    let mut unchecked = Vec::new();
    let mut checked_ops = 0;
    for (name, h) in &by_name {
        // An operation whose outcome is unknown may or may not have taken effect, so a
        // history without it that is linearizable proves the whole one is (each unknown
        // op taking no effect). That search is cheap; the full one, where every unknown
        // op stays a candidate to the end, is needed only when it fails.
        let completed: Vec<_> = h.iter().filter(|o| o.response.is_some()).cloned().collect();
        if completed.len() < h.len()
            && matches!(
                lincheck::check(&LockModel::default(), &completed, &limits),
                Ok(Verdict::Linearizable)
            )
        {
            checked_ops += h.len();
            continue;
        }
        match lincheck::check(&LockModel::default(), h, &limits) {
            Ok(Verdict::Linearizable) => checked_ops += h.len(),
            Ok(Verdict::Unknown { steps }) => {
                unchecked.push(format!("{name} ({} ops, {steps} steps)", h.len()))
            }
            Ok(Verdict::NotLinearizable(c)) => {
                lin_violations.push(format!("{name}: {}", c.description))
            }
            Err(e) => lin_violations.push(format!("{name}: malformed history: {e}")),
        }
    }
    let mut detail = format!(
        "{checked_ops} operations on {} names linearizable",
        by_name.len() - unchecked.len()
    );
    if !unchecked.is_empty() {
        detail += &format!("; search bound reached on {}", unchecked.join(", "));
    }
    results.push(CheckResult::new(
        "linearizable",
        lin_violations,
        !unchecked.is_empty(),
        detail,
    ));

    // Nothing acknowledged lost across the final heal and full restart.
    match final_read {
        None => results.push(CheckResult::new(
            "no acknowledged grant or release lost",
            Vec::new(),
            true,
            "no read after the full restart".into(),
        )),
        Some(fr) => results.push(lost_check(ops, holds, fr, &mut ids)),
    }
    results
}

fn lost_check(ops: &[Op], holds: &[Hold], fr: &FinalRead, ids: &mut Ids) -> CheckResult {
    let mut c = LockChecker::default();
    let store_of: BTreeMap<String, u32> = holds
        .iter()
        .map(|h| (h.name.clone(), h.store))
        .chain(ops.iter().map(|o| (o.name.clone(), o.store)))
        .collect();
    let mut skipped = 0;
    for h in holds {
        let session = ids.get(h.store, h.session);
        let live = fr.live.get(&(h.store, h.session));
        // A hold still open belongs to a session that lives, or it cannot be judged.
        let mut end = h.end_us;
        if end.is_none() && live.is_none() {
            end = Some(h.start_us);
            skipped += 1;
        }
        if let Some(d) = live {
            c.set_deadline(StoreId(h.store), session, *d);
        }
        c.hold(
            &h.name,
            Interval {
                client: h.client,
                store: StoreId(h.store),
                session,
                mode: LockMode::Exclusive,
                token: h.token,
                start: h.start_us,
                end,
            },
        );
    }
    // Mutual exclusion was judged above; only the takeover comparison counts here.
    c.violations.clear();
    // Releases acknowledged by the store.
    for o in ops {
        if o.kind == OpKind::Release && o.outcome == Outcome::Released {
            // The release frees the session's latest grant of the name before it.
            if let Some(t) = holds
                .iter()
                .filter(|h| {
                    h.store == o.store
                        && h.session == o.session
                        && h.name == o.name
                        && h.start_us <= o.invoke_us
                })
                .max_by_key(|h| h.start_us)
                .map(|h| h.token)
            {
                c.release_acked(StoreId(o.store), &o.name, ids.get(o.store, o.session), t);
            }
        }
    }
    let mut checked = 0;
    let stores: std::collections::BTreeSet<u32> = store_of.values().copied().collect();
    for store in stores {
        let holders = |name: &str| -> Vec<HolderInfo> {
            fr.holders
                .get(name)
                .into_iter()
                .flatten()
                .map(|(s, t)| HolderInfo {
                    session: SessionId(
                        // Unknown sessions get an id no client has.
                        ids.0.get(&(store, *s)).copied().unwrap_or(u64::MAX),
                    ),
                    mode: LockMode::Exclusive,
                    token: *t,
                    request_id: RequestId(0),
                    granted_at: tenure_core::Instant(0),
                })
                .collect()
        };
        let names = |name: &str| {
            fr.holders
                .contains_key(name)
                .then(|| store_of.get(name).map(|s| StoreId(*s)))
                .flatten()
        };
        c.takeover(StoreId(store), DeviceId(0), names, holders, fr.at_us);
        checked += 1;
    }
    CheckResult::new(
        "no acknowledged grant or release lost",
        c.violations.iter().map(show).collect(),
        fr.holders.is_empty(),
        format!(
            "{} sessions alive at the end, {checked} stores read ({} comparisons; {skipped} locks held by sessions not known to live)",
            fr.live.len(),
            c.counts.takeover_checks
        ),
    )
}

#[cfg(test)]
mod recheck {
    /// Re-runs the lock checks on a kept run's history (`TENURE_HISTORY=/tmp/tenure-chaos-…/
    /// history.json cargo test --release -p tenure-chaos -- --ignored recheck`), e.g. with
    /// a larger step bound (`TENURE_MAX_STEPS`). The final read's live sessions are not
    /// in the history, so the lost-grant check is left out.
    #[test]
    #[ignore = "needs a kept history: TENURE_HISTORY"]
    fn recheck_a_kept_history() {
        #[derive(serde::Deserialize)]
        struct Kept {
            ops: Vec<crate::history::Op>,
            holds: Vec<crate::history::Hold>,
        }
        let path = std::env::var("TENURE_HISTORY").expect("TENURE_HISTORY");
        let kept: Kept = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let steps = std::env::var("TENURE_MAX_STEPS").map_or(2_000_000, |s| s.parse().unwrap());
        let results = super::run_checks(&kept.ops, &kept.holds, None, steps);
        for r in &results {
            println!("{r:?}");
        }
        assert!(results.iter().all(|r| r.violations.is_empty()));
    }
}
