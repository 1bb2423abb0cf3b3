//! Chaos tests: a bounded run on real processes (skipped where namespaces or nftables
//! are not available), and the checkers — locks, objects, lookup — catching doctored
//! histories with a planted violation: a checker that cannot fail proves nothing.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use tenure_chaos::check::{CheckResult, FinalRead, SearchBound, run_checks};
use tenure_chaos::history::{
    Fault, Hold, LookupKind, LookupOp, LookupOutcome, ObjChange, ObjHistory, ObjKind, ObjOp,
    ObjOutcome, ObjRead, Op, OpKind, Outcome,
};
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
    let _turn = turn!();
    const NAME: &str = "bounded_run_has_no_violation_and_every_fault_kind";
    if let Some(why) = net::unsupported() {
        skipped(NAME, &why);
        return;
    }
    let Some(bin) = tenure_bin() else {
        skipped(NAME, "no tenure binary (build it, or set TENURE_BIN)");
        return;
    };
    // One round of every kind fits: short faults and gaps (at most 1.6 s and 0.7 s);
    // pauses and disk stalls outlast the 2 s lease (at most 5 s each).
    let mut cfg = ChaosConfig::new(bin, 3, 7, Duration::from_secs(32));
    cfg.settle = Duration::from_secs(3);
    cfg.fault_ms = (1000, 1600);
    cfg.gap_ms = (300, 700);
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
    let ok = |kind: &str| {
        (s.ops.get(kind))
            .and_then(|o| o.get("ok"))
            .copied()
            .unwrap_or(0)
    };
    let acquired = ok("acquire");
    assert!(
        acquired > 20,
        "only {acquired} grants: the workload barely ran"
    );
    for kind in [
        "object put",
        "object cas",
        "object get",
        "publish (persistent)",
        "publish (volatile)",
        "lookup get",
    ] {
        assert!(ok(kind) > 0, "no {kind} succeeded: {:?}", s.ops);
    }
    for check in [
        "objects linearizable",
        "object upload ids unique",
        "object reads fresh and written",
        "compare-and-set wins unique",
        "no acknowledged put lost",
        "lookup persistent entries kept",
        "lookup volatile entries expire",
        "lookup answers were published",
    ] {
        assert!(
            s.checks.iter().any(|c| c.name == check),
            "no {check:?} check ran"
        );
    }
}

fn tok(seq: u64) -> tenure_core::lockctl::FencingToken {
    tenure_core::lockctl::FencingToken {
        epoch: tenure_core::Epoch(1),
        seq,
    }
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
    let _turn = turn!();
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
    let _turn = turn!();
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
    let _turn = turn!();
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
    let _turn = turn!();
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
    let _turn = turn!();
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
    // The run's time for searching has passed: unchecked too, whatever the step room.
    let past = SearchBound {
        steps: 100_000,
        deadline: Some(std::time::Instant::now()),
    };
    let r = run_checks(&ops, &[], None, past);
    assert_eq!(status(&r, "linearizable").status, "unchecked", "{r:?}");
    // A read of a holder no acquire could have made is a violation.
    if let Outcome::Holders(h) = &mut ops.last_mut().unwrap().outcome {
        h[0].0 = 999;
    }
    let r = run_checks(&ops, &[], None, 100_000);
    assert_eq!(status(&r, "linearizable").status, "fail", "{r:?}");
}

// ---- objects ----

const KEY: &str = "/chaosobj/k0";

fn uuid(n: u128) -> String {
    tenure_core::objects::Uuid(n).to_string()
}

fn obj(
    client: u64,
    kind: ObjKind,
    value: Option<u64>,
    t: (u64, u64),
    outcome: ObjOutcome,
) -> ObjOp {
    ObjOp {
        client,
        kind,
        key: KEY.into(),
        store: 5,
        value,
        expect: None,
        invoke_us: t.0,
        response_us: (!matches!(outcome, ObjOutcome::Unknown(_))).then_some(t.1),
        outcome,
    }
}

fn written(revision: u64, n: u128) -> ObjOutcome {
    ObjOutcome::Written {
        revision,
        uuid: uuid(n),
    }
}

/// A read of `value` at `revision` (upload `n`), content as its put wrote it.
fn read(value: u64, revision: u64, n: u128) -> ObjOutcome {
    let data = tenure_chaos::objects::content(value);
    let crc = tenure_core::objects::BlockInfo::of(&data).checksum;
    ObjOutcome::Read(Some(ObjRead {
        revision,
        uuid: uuid(n),
        size: data.len() as u64,
        checksum: crc,
        content: (data.len() as u64, crc),
        value: tenure_chaos::objects::value_of(&data),
    }))
}

fn cas(client: u64, expect: (u64, u64), value: u64, t: (u64, u64), outcome: ObjOutcome) -> ObjOp {
    ObjOp {
        expect: Some(expect),
        ..obj(client, ObjKind::Cas, Some(value), t, outcome)
    }
}

const A: u64 = (1 << 32) | 1;
const B: u64 = (2 << 32) | 1;
const C: u64 = (3 << 32) | 1;

/// Put A; read it; CAS A→B wins; CAS A→C loses; (after the restart at 75) read B.
fn clean_objects() -> (Vec<ObjOp>, BTreeMap<u32, ObjHistory>) {
    let ops = vec![
        obj(0, ObjKind::Put, Some(A), (0, 10), written(1, 11)),
        obj(1, ObjKind::Get, None, (20, 30), read(A, 1, 11)),
        cas(1, (1, A), B, (40, 50), written(2, 22)),
        cas(
            0,
            (1, A),
            C,
            (60, 70),
            ObjOutcome::Mismatch { current: Some(2) },
        ),
        obj(2, ObjKind::Get, None, (80, 90), read(B, 2, 22)),
    ];
    (
        ops,
        BTreeMap::from([(5, history(&[(1, A, 11), (2, B, 22)]))]),
    )
}

/// A store history of puts (revision, value, upload).
fn history(puts: &[(u64, u64, u128)]) -> ObjHistory {
    let changes = puts
        .iter()
        .map(|(r, v, n)| {
            let data = tenure_chaos::objects::content(*v);
            let crc = tenure_core::objects::BlockInfo::of(&data).checksum;
            ObjChange {
                revision: *r,
                key: KEY.into(),
                put: Some((uuid(*n), data.len() as u64, crc)),
            }
        })
        .collect();
    ObjHistory {
        compacted: 0,
        revision: puts.last().map_or(0, |p| p.0),
        changes,
    }
}

#[test]
fn clean_object_history_passes() {
    let _turn = turn!();
    let (ops, h) = clean_objects();
    let r = tenure_chaos::objects::checks(&ops, &h, Some(75), 100_000);
    assert_eq!(r.len(), 5);
    for c in &r {
        assert_eq!(c.status, "pass", "{c:?}");
    }
}

#[test]
fn stale_object_read_is_caught() {
    let _turn = turn!();
    let (mut ops, h) = clean_objects();
    // Read after B was acknowledged, and before any restart, but it returns A.
    ops[4] = obj(2, ObjKind::Get, None, (80, 90), read(A, 1, 11));
    let r = tenure_chaos::objects::checks(&ops, &h, None, 100_000);
    assert_eq!(
        status(&r, "object reads fresh and written").status,
        "fail",
        "{r:?}"
    );
    assert_eq!(status(&r, "objects linearizable").status, "fail", "{r:?}");
}

#[test]
fn object_read_of_a_value_never_written_is_caught() {
    let _turn = turn!();
    let (mut ops, h) = clean_objects();
    let mut never = read(B, 2, 22);
    if let ObjOutcome::Read(Some(r)) = &mut never {
        r.value = None;
    }
    ops[4] = obj(2, ObjKind::Get, None, (80, 90), never);
    let r = tenure_chaos::objects::checks(&ops, &h, None, 100_000);
    let c = status(&r, "object reads fresh and written");
    assert_eq!(c.status, "fail", "{r:?}");
    assert!(
        c.violations.iter().any(|v| v.contains("no put wrote")),
        "{c:?}"
    );
}

#[test]
fn two_compare_and_set_wins_on_one_revision_are_caught() {
    let _turn = turn!();
    let (mut ops, _) = clean_objects();
    // The second CAS on revision 1 also won, at revision 3.
    ops[3] = cas(0, (1, A), C, (60, 70), written(3, 33));
    ops[4] = obj(2, ObjKind::Get, None, (80, 90), read(C, 3, 33));
    let h = BTreeMap::from([(5, history(&[(1, A, 11), (2, B, 22), (3, C, 33)]))]);
    let r = tenure_chaos::objects::checks(&ops, &h, Some(75), 100_000);
    let c = status(&r, "compare-and-set wins unique");
    assert_eq!(c.status, "fail", "{r:?}");
    // Both ways: two wins named one revision, and the store's history shows the second
    // one followed revision 2, not the revision 1 it named.
    assert!(
        c.violations
            .iter()
            .any(|v| v.contains("2 compare-and-sets on revision 1")),
        "{c:?}"
    );
    assert!(
        c.violations
            .iter()
            .any(|v| v.contains("compare-and-set on Some(1) won at revision 3")),
        "{c:?}"
    );
    assert_eq!(status(&r, "objects linearizable").status, "fail", "{r:?}");
}

#[test]
fn upload_id_given_to_two_puts_is_caught() {
    let _turn = turn!();
    // The CAS that wrote B was acknowledged under A's upload id (as a device restarted
    // with a fixed PRNG seed drew it again).
    let (mut ops, _) = clean_objects();
    ops[2] = cas(1, (1, A), B, (40, 50), written(2, 11));
    ops[4] = obj(2, ObjKind::Get, None, (80, 90), read(B, 2, 11));
    let h = BTreeMap::from([(5, history(&[(1, A, 11), (2, B, 11)]))]);
    let r = tenure_chaos::objects::checks(&ops, &h, Some(75), 100_000);
    let c = status(&r, "object upload ids unique");
    assert_eq!(c.status, "fail", "{r:?}");
    assert!(c.violations[0].contains("2 different puts"), "{c:?}");
    // Explained there, not reported again as a read of a corrupt upload.
    assert_eq!(
        status(&r, "object reads fresh and written").status,
        "pass",
        "{r:?}"
    );
}

#[test]
fn acknowledged_put_lost_after_restart_is_caught() {
    let _turn = turn!();
    // The store's history after the restart ends at revision 1: B's put is gone.
    let (ops, _) = clean_objects();
    let h = BTreeMap::from([(5, history(&[(1, A, 11)]))]);
    let r = tenure_chaos::objects::checks(&ops, &h, Some(75), 100_000);
    assert_eq!(
        status(&r, "no acknowledged put lost").status,
        "fail",
        "{r:?}"
    );
    // And a read after the restart that finds nothing.
    let (mut ops, h) = clean_objects();
    ops[4] = obj(2, ObjKind::Get, None, (80, 90), ObjOutcome::Read(None));
    let r = tenure_chaos::objects::checks(&ops, &h, Some(75), 100_000);
    assert_eq!(
        status(&r, "no acknowledged put lost").status,
        "fail",
        "{r:?}"
    );
    assert_eq!(
        status(&r, "object reads fresh and written").status,
        "pass",
        "{r:?}"
    );
}

// ---- lookup ----

const P: &str = "/chaos/lookup/p0";
const V: &str = "/chaos/lookup/v0";

fn lk(
    kind: LookupKind,
    key: &str,
    value: Option<&str>,
    t: (u64, u64),
    outcome: LookupOutcome,
) -> LookupOp {
    let persistent = key == P;
    LookupOp {
        client: 200,
        kind,
        key: key.into(),
        persistent,
        interval_ms: if persistent { 60_000 } else { 500 },
        value: value.map(String::from),
        invoke_us: t.0,
        response_us: Some(t.1),
        outcome,
    }
}

fn found(entry: Option<(&str, (u64, u64))>) -> LookupOutcome {
    LookupOutcome::Found {
        entry: entry.map(|(v, ver)| (v.to_string(), ver)),
        leader: 1,
    }
}

/// A persistent value acknowledged and read; a volatile provider that stops at 1 s, its
/// value read 0.5 s later (within the bound) and gone at 10 s.
fn clean_lookups() -> Vec<LookupOp> {
    vec![
        lk(
            LookupKind::Publish,
            P,
            Some("c200-1"),
            (0, 100),
            LookupOutcome::Published { version: (1000, 7) },
        ),
        lk(
            LookupKind::Publish,
            V,
            Some("c200-2"),
            (0, 50),
            LookupOutcome::Published { version: (1100, 8) },
        ),
        lk(
            LookupKind::Get,
            P,
            None,
            (200, 300),
            found(Some(("c200-1", (1000, 7)))),
        ),
        lk(
            LookupKind::Stop,
            V,
            None,
            (1_000_000, 1_000_100),
            LookupOutcome::Stopped,
        ),
        lk(
            LookupKind::Get,
            V,
            None,
            (1_500_000, 1_500_100),
            found(Some(("c200-2", (1100, 8)))),
        ),
        lk(
            LookupKind::Get,
            V,
            None,
            (10_000_000, 10_000_100),
            found(None),
        ),
    ]
}

fn lookup_checks(ops: &[LookupOp], faults: &[Fault]) -> Vec<CheckResult> {
    tenure_chaos::lookup::checks(ops, faults, &tenure_core::lookup::LookupSettings::default())
}

#[test]
fn clean_lookup_history_passes() {
    let _turn = turn!();
    let r = lookup_checks(&clean_lookups(), &[]);
    assert_eq!(r.len(), 3);
    for c in &r {
        assert_eq!(c.status, "pass", "{c:?}");
    }
}

#[test]
fn lost_persistent_lookup_entry_is_caught() {
    let _turn = turn!();
    let mut ops = clean_lookups();
    ops[2] = lk(LookupKind::Get, P, None, (200, 300), found(None));
    let r = lookup_checks(&ops, &[]);
    assert_eq!(
        status(&r, "lookup persistent entries kept").status,
        "fail",
        "{r:?}"
    );
    // An older version than the acknowledged one is lost too.
    ops[2] = lk(
        LookupKind::Get,
        P,
        None,
        (200, 300),
        found(Some(("c200-1", (999, 7)))),
    );
    let r = lookup_checks(&ops, &[]);
    assert_eq!(
        status(&r, "lookup persistent entries kept").status,
        "fail",
        "{r:?}"
    );
    // Absent once the provider stopped refreshing for longer than the lifetime is fine.
    ops[2] = lk(
        LookupKind::Get,
        P,
        None,
        (70_000_000, 70_000_100),
        found(None),
    );
    let r = lookup_checks(&ops, &[]);
    assert_eq!(
        status(&r, "lookup persistent entries kept").status,
        "pass",
        "{r:?}"
    );
}

/// Seed 003's weak leader: a leader cut off keeps leading its side, and a client that
/// reaches it reads the older version while the fault lasts and until the nodes have met
/// again; after that an older answer is a loss.
#[test]
fn older_persistent_answer_is_allowed_only_while_a_fault_separates_the_leaders() {
    let _turn = turn!();
    let mut ops = clean_lookups();
    let isolate = Fault {
        kind: "isolate".into(),
        detail: "d1 | [2, 3, 4, 5]".into(),
        devices: vec![1],
        start_us: 150,
        end_us: Some(4_000_000),
    };
    ops[2] = lk(
        LookupKind::Get,
        P,
        None,
        (3_000_000, 3_000_100),
        found(Some(("c200-1", (999, 7)))),
    );
    let r = lookup_checks(&ops, std::slice::from_ref(&isolate));
    assert_eq!(
        status(&r, "lookup persistent entries kept").status,
        "pass",
        "{r:?}"
    );
    // Within the convergence bound after the heal (three heartbeats, a redial, two
    // round trips: 2.1 s with the default settings) too.
    ops[2] = lk(
        LookupKind::Get,
        P,
        None,
        (5_500_000, 5_500_100),
        found(Some(("c200-1", (999, 7)))),
    );
    let r = lookup_checks(&ops, std::slice::from_ref(&isolate));
    assert_eq!(
        status(&r, "lookup persistent entries kept").status,
        "pass",
        "{r:?}"
    );
    // Not later.
    ops[2] = lk(
        LookupKind::Get,
        P,
        None,
        (6_500_000, 6_500_100),
        found(Some(("c200-1", (999, 7)))),
    );
    let r = lookup_checks(&ops, &[isolate]);
    assert_eq!(
        status(&r, "lookup persistent entries kept").status,
        "fail",
        "{r:?}"
    );
}

#[test]
fn volatile_lookup_entry_outliving_its_bound_is_caught() {
    let _turn = turn!();
    let mut ops = clean_lookups();
    // 4 s after the provider stopped: its lifetime (1.1 s), a round trip and a second
    // of slack are long over.
    ops[5] = lk(
        LookupKind::Get,
        V,
        None,
        (5_000_000, 5_000_100),
        found(Some(("c200-2", (1100, 8)))),
    );
    let r = lookup_checks(&ops, &[]);
    assert_eq!(
        status(&r, "lookup volatile entries expire").status,
        "fail",
        "{r:?}"
    );
    // A node paused from 0.9 s to 4.5 s could have received the last refresh late.
    let pause = Fault {
        kind: "pause".into(),
        detail: "SIGSTOP d1".into(),
        devices: vec![1],
        start_us: 900_000,
        end_us: Some(4_500_000),
    };
    let r = lookup_checks(&ops, &[pause]);
    assert_eq!(
        status(&r, "lookup volatile entries expire").status,
        "pass",
        "{r:?}"
    );
}

#[test]
fn lookup_answer_never_published_is_caught() {
    let _turn = turn!();
    let mut ops = clean_lookups();
    ops[2] = lk(
        LookupKind::Get,
        P,
        None,
        (200, 300),
        found(Some(("nope", (1000, 7)))),
    );
    let r = lookup_checks(&ops, &[]);
    assert_eq!(
        status(&r, "lookup answers were published").status,
        "fail",
        "{r:?}"
    );
}
