//! Chaos tests: a bounded run on real processes (skipped where namespaces or nftables
//! are not available), and the checkers catching doctored histories — a checker that
//! cannot fail proves nothing.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use tenure_chaos::check::{CheckResult, FinalRead, run_checks};
use tenure_chaos::history::{Hold, Op, OpKind, Outcome, Token};
use tenure_chaos::nemesis::KINDS;
use tenure_chaos::{ChaosConfig, net};

/// The `tenure` binary: `TENURE_BIN`, or the one built beside this test
/// (`cargo test --workspace` builds it).
fn tenure_bin() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("TENURE_BIN") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?.parent()?;
    let bin = dir.join("tenure");
    bin.exists().then_some(bin)
}

/// Say that a test skipped, and why, where the runner shows it: `eprintln!` (kept with
/// the test's output) and straight onto the process's stderr, which the test harness does
/// not capture, so a plain `cargo test` run shows it too.
fn skipped(test: &str, why: &str) {
    use std::io::Write;
    eprintln!("SKIPPED {test}: {why}");
    let _ = writeln!(std::io::stderr().lock(), "test {test} ... SKIPPED: {why}");
}

#[test]
fn bounded_run_has_no_violation_and_every_fault_kind() {
    const NAME: &str = "bounded_run_has_no_violation_and_every_fault_kind";
    if let Some(why) = net::unsupported() {
        skipped(NAME, &why);
        return;
    }
    let Some(bin) = tenure_bin() else {
        skipped(NAME, "no tenure binary (build it, or set TENURE_BIN)");
        return;
    };
    // One round of every kind fits: short faults and gaps; pauses outlast the lease.
    let mut cfg = ChaosConfig::new(bin, 3, 7, Duration::from_secs(38));
    cfg.settle = Duration::from_secs(3);
    cfg.fault_ms = (1200, 2000);
    cfg.gap_ms = (500, 1000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let s = rt.block_on(tenure_chaos::run(&cfg)).expect("chaos run");
    print!("{s}");
    assert_eq!(s.violations(), 0, "violations (seed {})", cfg.seed);
    for kind in KINDS {
        if let Some(why) = s.unavailable.get(kind) {
            skipped(&format!("{NAME} ({kind} faults)"), why);
            continue;
        }
        assert!(
            s.faults.get(kind).copied().unwrap_or(0) > 0,
            "no {kind} fault in {:?}",
            s.faults
        );
    }
    for c in &s.checks {
        assert_ne!(c.status, "fail", "{c:?}");
    }
    let acquired = s.ops["acquire"].get("ok").copied().unwrap_or(0);
    assert!(
        acquired > 20,
        "only {acquired} grants: the workload barely ran"
    );
}

fn tok(seq: u64) -> Token {
    Token { epoch: 1, seq }
}

fn acquire(client: u64, session: u64, invoke: u64, resp: u64, seq: u64) -> Op {
    Op {
        client,
        kind: OpKind::Acquire,
        name: "/a/x".into(),
        store: 3,
        session,
        invoke_us: invoke,
        response_us: Some(resp),
        outcome: Outcome::Granted { token: tok(seq) },
    }
}

fn release(client: u64, session: u64, invoke: u64, resp: u64) -> Op {
    Op {
        client,
        kind: OpKind::Release,
        name: "/a/x".into(),
        store: 3,
        session,
        invoke_us: invoke,
        response_us: Some(resp),
        outcome: Outcome::Released,
    }
}

fn hold(client: u64, session: u64, seq: u64, start: u64, end: Option<u64>) -> Hold {
    Hold {
        client,
        name: "/a/x".into(),
        store: 3,
        session,
        token: tok(seq),
        start_us: start,
        end_us: end,
    }
}

fn status<'a>(r: &'a [CheckResult], name: &str) -> &'a CheckResult {
    r.iter().find(|c| c.name == name).expect("check ran")
}

/// A clean history: two clients take turns.
fn clean() -> (Vec<Op>, Vec<Hold>) {
    let ops = vec![
        acquire(0, 10, 0, 10, 1),
        release(0, 10, 100, 110),
        acquire(1, 20, 50, 120, 2),
        release(1, 20, 200, 210),
    ];
    let holds = vec![
        hold(0, 10, 1, 10, Some(100)),
        hold(1, 20, 2, 120, Some(200)),
    ];
    (ops, holds)
}

#[test]
fn clean_history_passes() {
    let (ops, holds) = clean();
    let fr = FinalRead {
        at_us: 1000,
        holders: BTreeMap::from([("/a/x".to_string(), vec![])]),
        live: BTreeMap::new(),
    };
    let r = run_checks(&ops, &holds, Some(&fr), 100_000);
    for c in &r {
        assert_eq!(c.status, "pass", "{c:?}");
    }
}

#[test]
fn overlapping_holders_are_caught() {
    let (mut ops, mut holds) = clean();
    // Client 1 was granted while client 0 still believed it held the lock.
    ops[2] = acquire(1, 20, 50, 60, 2);
    holds[1] = hold(1, 20, 2, 60, Some(200));
    let r = run_checks(&ops, &holds, None, 100_000);
    assert_eq!(status(&r, "mutual exclusion").status, "fail", "{r:?}");
    assert_eq!(status(&r, "linearizable").status, "fail", "{r:?}");
}

#[test]
fn token_going_backwards_is_caught() {
    let (mut ops, mut holds) = clean();
    ops[2] = acquire(1, 20, 115, 120, 0);
    holds[1] = hold(1, 20, 0, 120, Some(200));
    let r = run_checks(&ops, &holds, None, 100_000);
    assert_eq!(
        status(&r, "fencing tokens increase").status,
        "fail",
        "{r:?}"
    );
    assert_eq!(status(&r, "mutual exclusion").status, "pass", "{r:?}");
}

#[test]
fn lost_grant_and_lost_release_after_restart_are_caught() {
    let (mut ops, mut holds) = clean();
    // Client 1 still holds the lock, its session alive; the restarted cluster says free.
    ops.pop();
    holds[1].end_us = None;
    let fr = FinalRead {
        at_us: 1000,
        holders: BTreeMap::from([("/a/x".to_string(), vec![])]),
        live: BTreeMap::from([((3, 20), 5000)]),
    };
    let r = run_checks(&ops, &holds, Some(&fr), 100_000);
    let c = status(&r, "no acknowledged grant or release lost");
    assert_eq!(c.status, "fail", "{r:?}");
    // Client 0's acknowledged release comes back after the restart.
    let (ops, holds) = clean();
    let fr = FinalRead {
        at_us: 1000,
        holders: BTreeMap::from([("/a/x".to_string(), vec![(10, tok(1))])]),
        live: BTreeMap::new(),
    };
    let r = run_checks(&ops, &holds, Some(&fr), 100_000);
    let c = status(&r, "no acknowledged grant or release lost");
    assert_eq!(c.status, "fail", "{r:?}");
}

#[test]
fn unfinished_linearizability_search_is_unchecked_not_pass() {
    // Concurrent acquires whose outcome is unknown, then a read that saw one of them
    // holding: only a search that keeps the unknown ops explains it.
    let mut ops: Vec<Op> = (0..12)
        .map(|i| Op {
            outcome: Outcome::Unknown("gave up".into()),
            response_us: None,
            ..acquire(i, 100 + i, i, i, 0)
        })
        .collect();
    ops.push(Op {
        client: 50,
        kind: OpKind::Holders,
        name: "/a/x".into(),
        store: 3,
        session: 0,
        invoke_us: 50,
        response_us: Some(60),
        outcome: Outcome::Holders(vec![(105, tok(0))]),
    });
    let r = run_checks(&ops, &[], None, 1);
    assert_eq!(status(&r, "linearizable").status, "unchecked", "{r:?}");
    let r = run_checks(&ops, &[], None, 100_000);
    assert_eq!(status(&r, "linearizable").status, "pass", "{r:?}");
    // A read of a holder no acquire could have made is a violation.
    if let Outcome::Holders(h) = &mut ops.last_mut().unwrap().outcome {
        h[0].0 = 999;
    }
    let r = run_checks(&ops, &[], None, 100_000);
    assert_eq!(status(&r, "linearizable").status, "fail", "{r:?}");
}
