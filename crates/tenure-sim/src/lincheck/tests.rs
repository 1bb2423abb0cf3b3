//! Tests of the checker on lock and register histories, hand-made and from the real
//! lock table.

use super::*;
use tenure_core::Epoch;
use tenure_core::lockctl::{
    Acquire, AcquireError, Acquired, FencingToken, LockMode, LockTable, LockTableConfig, RequestId,
    SessionId, Wait,
};

type LockOp = Operation<LockInput, LockOutput>;

const A: SessionId = SessionId(1);
const B: SessionId = SessionId(2);
const X: LockMode = LockMode::Exclusive;
const S: LockMode = LockMode::Shared;

fn tok(seq: u64) -> FencingToken {
    FencingToken {
        epoch: Epoch(1),
        seq,
    }
}

fn op(client: u64, input: LockInput, invoke: u64, resp: Option<(u64, LockOutput)>) -> LockOp {
    Operation {
        client,
        input,
        invoke,
        response: resp,
    }
}

fn acq(s: SessionId, mode: LockMode, at: (u64, u64), out: LockOutput) -> LockOp {
    let input = LockInput::Acquire {
        name: "/l".into(),
        session: s,
        mode,
    };
    op(s.0, input, at.0, Some((at.1, out)))
}

fn rel(s: SessionId, at: (u64, u64)) -> LockOp {
    let input = LockInput::Release {
        name: "/l".into(),
        session: s,
    };
    op(s.0, input, at.0, Some((at.1, LockOutput::Released)))
}

fn holders(client: u64, at: (u64, u64), seen: Vec<(SessionId, LockMode)>) -> LockOp {
    let input = LockInput::Holders { name: "/l".into() };
    op(client, input, at.0, Some((at.1, LockOutput::Holders(seen))))
}

fn granted(seq: u64) -> LockOutput {
    LockOutput::Granted { token: tok(seq) }
}

fn verdict(h: &[LockOp]) -> Verdict {
    check(&LockModel::default(), h, &Limits::default()).unwrap()
}

fn violation(h: &[LockOp]) -> Counterexample {
    match verdict(h) {
        Verdict::NotLinearizable(c) => *c,
        v => panic!("expected a violation, got {v:?}"),
    }
}

#[test]
fn planted_bug_double_exclusive_grant_is_rejected() {
    // seed 004 §2: "locks granted by an LC do not conflict with one another". Two
    // sessions are granted the same exclusive lock with overlapping intervals and
    // neither released before the other's grant.
    let h = vec![
        acq(A, X, (0, 2), granted(1)),
        acq(B, X, (1, 4), granted(2)),
        rel(A, (6, 7)),
        rel(B, (8, 9)),
    ];
    let c = violation(&h);
    assert_eq!(c.partition.as_deref(), Some("/l"));
    // The core is two operations (B's grant and one of A's, whose grant the release
    // implies); everything else may be uncertain.
    assert_eq!(c.core.len(), 2, "{c:?}");
    assert!(c.core.contains(&1), "{c:?}");
    assert!(c.description.contains("core"), "{}", c.description);
}

/// A holds the lock and closes its client after an unknown outcome (an unknown
/// release); meanwhile 24 clients each try, give up (an unknown acquire) and close (an
/// unknown release), as a chaos run's clients do while a failover keeps A's session
/// alive. Reads see A holding throughout. Each of the 24 pairs could be granted and
/// released between any two reads, all giving the same state: without subsumption
/// the search visits ~3^24 configurations.
fn abandoned(tail: Vec<LockOp>) -> Vec<LockOp> {
    let mut h = vec![acq(A, X, (0, 1), granted(1))];
    h.push(op(
        A.0,
        LockInput::Release {
            name: "/l".into(),
            session: A,
        },
        2,
        None,
    ));
    for i in 0..24u64 {
        let s = SessionId(10 + i);
        let input = LockInput::Acquire {
            name: "/l".into(),
            session: s,
            mode: X,
        };
        h.push(op(s.0, input, 3 + 2 * i, None));
        h.push(op(
            s.0,
            LockInput::Release {
                name: "/l".into(),
                session: s,
            },
            4 + 2 * i,
            None,
        ));
    }
    h.push(holders(99, (100, 101), vec![(A, X)]));
    h.extend(tail);
    h
}

#[test]
fn unknown_outcomes_of_clients_that_gave_up_are_subsumed() {
    let limits = Limits {
        max_steps: 200_000,
        ..Default::default()
    };
    // A's close takes effect after the read; B is granted a newer token.
    let ok = abandoned(vec![acq(B, X, (200, 201), granted(5))]);
    assert_eq!(
        check(&LockModel::default(), &ok, &limits),
        Ok(Verdict::Linearizable)
    );
    // B is granted, then a read sees A holding again: A's only acquire was long
    // linearized, so no order explains it.
    let bad = abandoned(vec![
        acq(B, X, (200, 201), granted(5)),
        holders(99, (202, 203), vec![(A, X)]),
    ]);
    let v = check(&LockModel::default(), &bad, &limits).unwrap();
    assert!(matches!(v, Verdict::NotLinearizable(_)), "{v:?}");
}

#[test]
fn grant_respecting_real_time_order_passes() {
    // B's grant overlaps A's release in real time: the release linearizes first.
    let h = vec![
        acq(A, X, (0, 2), granted(1)),
        rel(A, (3, 6)),
        acq(B, X, (4, 8), granted(2)),
        rel(B, (9, 10)),
        acq(A, S, (11, 12), granted(3)),
        acq(B, S, (11, 13), granted(4)),
    ];
    assert_eq!(verdict(&h), Verdict::Linearizable);
}

#[test]
fn grant_before_release_started_is_rejected() {
    // B's grant completed before A's release was even invoked.
    let h = vec![
        acq(A, X, (0, 1), granted(1)),
        acq(B, X, (2, 3), granted(2)),
        rel(A, (4, 5)),
    ];
    assert!(!verdict(&h).is_linearizable());
}

#[test]
fn planted_bug_stale_holder_read_is_rejected() {
    // DESIGN §4 "reads from a manager that may have been replaced": a holder query
    // that starts after a release completed must not return the old holder.
    let stale = vec![
        acq(A, X, (0, 1), granted(1)),
        rel(A, (2, 3)),
        holders(9, (4, 5), vec![(A, X)]),
    ];
    let c = violation(&stale);
    assert!(c.stuck.contains(&2), "{c:?}");
    // Concurrent with the release, the old holder is a legal answer.
    let concurrent = vec![
        acq(A, X, (0, 1), granted(1)),
        rel(A, (2, 4)),
        holders(9, (3, 5), vec![(A, X)]),
        holders(9, (6, 7), vec![]),
    ];
    assert_eq!(verdict(&concurrent), Verdict::Linearizable);
}

#[test]
fn fencing_tokens_must_increase_per_lock() {
    // seed 002 §14.4.5 (Chubby sequencers) / DESIGN §4 fencing: a later grant with a
    // smaller token is not linearizable.
    let h = vec![
        acq(A, X, (0, 1), granted(5)),
        rel(A, (2, 3)),
        acq(B, X, (4, 5), granted(3)),
    ];
    assert!(!verdict(&h).is_linearizable());
}

#[test]
fn refused_only_while_a_conflicting_holder_exists() {
    let ok = vec![
        acq(A, X, (0, 1), granted(1)),
        acq(B, S, (2, 3), LockOutput::Refused),
        acq(B, S, (2, 3), LockOutput::Failed),
    ];
    assert_eq!(verdict(&ok), Verdict::Linearizable);
    let bad = vec![acq(B, S, (2, 3), LockOutput::Refused)];
    assert!(!verdict(&bad).is_linearizable());
}

#[test]
fn pending_operations_may_or_may_not_take_effect() {
    // A's release never answered, yet B was granted later: the release took effect.
    let mut h = vec![acq(A, X, (0, 1), granted(1)), acq(B, X, (5, 6), granted(2))];
    h.push(op(
        1,
        LockInput::Release {
            name: "/l".into(),
            session: A,
        },
        2,
        None,
    ));
    assert_eq!(verdict(&h), Verdict::Linearizable);
    // B's acquire never answered and A was granted afterwards: it did not take effect.
    let h = vec![
        op(
            2,
            LockInput::Acquire {
                name: "/l".into(),
                session: B,
                mode: X,
            },
            0,
            None,
        ),
        acq(A, X, (1, 2), granted(1)),
        holders(9, (3, 4), vec![(A, X)]),
    ];
    assert_eq!(verdict(&h), Verdict::Linearizable);
}

#[test]
fn names_are_checked_independently() {
    let mut h = vec![acq(A, X, (0, 1), granted(1))];
    h.push(op(
        2,
        LockInput::Acquire {
            name: "/m".into(),
            session: B,
            mode: X,
        },
        0,
        Some((1, granted(1))),
    ));
    assert_eq!(verdict(&h), Verdict::Linearizable);
    assert_eq!(partitions::<LockModel>(&h).len(), 2);
}

fn acq_on(name: &str, s: SessionId, mode: LockMode, at: (u64, u64), out: LockOutput) -> LockOp {
    let input = LockInput::Acquire {
        name: name.into(),
        session: s,
        mode,
    };
    op(s.0, input, at.0, Some((at.1, out)))
}

#[test]
fn planted_bug_conflicting_grants_on_a_path_are_rejected() {
    // seed 004 §9 (HCLC cover): an exclusive lock on /l covers /l/c, so a second
    // session's grant on /l/c while the first still holds /l is not linearizable,
    // although each name's history alone is.
    let h = vec![
        acq_on("/l", A, X, (0, 2), granted(1)),
        acq_on("/l/c", B, S, (3, 4), granted(2)),
        acq_on("/m", B, X, (3, 4), granted(3)),
    ];
    let c = violation(&h);
    assert_eq!(c.partition.as_deref(), Some("/l + /l/c"));
    assert_eq!(c.core, vec![0, 1], "{c:?}");
    // Each name's history alone passes: only the hierarchy catches it.
    for name in ["/l", "/l/c"] {
        let alone: Vec<LockOp> = h
            .iter()
            .filter(|o| LockModel::partition_key(&o.input).as_deref() == Some(name))
            .cloned()
            .collect();
        assert_eq!(verdict(&alone), Verdict::Linearizable);
    }
}

#[test]
fn shared_under_shared_and_siblings_pass() {
    // IS on /l is compatible with S on /l; /l/c and /l/d are disjoint.
    let h = vec![
        acq_on("/l", A, S, (0, 2), granted(1)),
        acq_on("/l/c", B, S, (3, 4), granted(2)),
        acq_on("/l/c/e", B, S, (3, 4), granted(3)),
        acq_on("/l/d", A, X, (5, 6), granted(4)),
        // The same session may hold overlapping locks.
        acq_on("/l/d/f", A, X, (7, 8), granted(5)),
    ];
    assert_eq!(verdict(&h), Verdict::Linearizable);
    // But an exclusive lock under another session's shared one is refused.
    let mut bad = h.clone();
    bad.push(acq_on("/l/c/g", SessionId(3), X, (9, 10), granted(6)));
    assert!(!verdict(&bad).is_linearizable());
    let mut ok = h;
    ok.push(acq_on(
        "/l/c/g",
        SessionId(3),
        X,
        (9, 10),
        LockOutput::Refused,
    ));
    assert_eq!(verdict(&ok), Verdict::Linearizable);
}

#[test]
fn overlapping_names_share_a_partition_and_others_do_not() {
    let names = ["/a/x", "/b", "/a", "/a/x/1", "/c/y", "/ab"];
    let h: Vec<LockOp> = names
        .iter()
        .enumerate()
        .map(|(i, n)| acq_on(n, SessionId(i as u64), S, (0, 1), LockOutput::Failed))
        .collect();
    let parts: Vec<Option<String>> = partitions::<LockModel>(&h)
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(
        parts,
        vec![
            Some("/a + /a/x + /a/x/1".to_string()),
            Some("/ab".to_string()),
            Some("/b".to_string()),
            Some("/c/y".to_string()),
        ]
    );
}

// The specification's conflict rule agrees with the lock table's compatibility matrix
// and cover rule on every pair of a small tree of names and every pair of modes.
#[test]
fn the_conflict_rule_agrees_with_the_lock_tables() {
    use tenure_core::lockctl::{LockName, conflicts};
    let names = ["/a", "/a/b", "/a/b/c", "/a/d", "/ab", "/e"];
    for a in names {
        for b in names {
            for ma in [S, X] {
                for mb in [S, X] {
                    let (na, nb) = (LockName::parse(a).unwrap(), LockName::parse(b).unwrap());
                    assert_eq!(
                        locks_conflict(a, ma, b, mb),
                        conflicts(&na, ma, &nb, mb),
                        "{a} {ma:?} / {b} {mb:?}"
                    );
                }
            }
        }
    }
}

// A group whose joint search hits the step bound is checked name by name: a
// violation on one name is still found, and the group counts as unknown.
#[test]
fn a_group_beyond_the_bound_is_checked_name_by_name() {
    // Concurrent shared grants on /l and /l/c: 24 operations to linearize together,
    // more than the bound allows, 12 on each name alone.
    let mut h = Vec::new();
    for s in 1..=12u64 {
        h.push(acq_on("/l", SessionId(s), S, (0, 100), granted(s)));
        h.push(acq_on("/l/c", SessionId(s), S, (0, 100), granted(100 + s)));
    }
    let limits = Limits {
        max_steps: 20,
        core_max_ops: 0,
        deadline: None,
    };
    let v = check_locks(&h, &limits).unwrap();
    assert_eq!(v.verdict, Verdict::Linearizable);
    assert_eq!((v.groups_unknown, v.ops_linearizable_alone), (1, 24));
    // With room to search, the group is judged together.
    let v = check_locks(&h, &Limits::default()).unwrap();
    assert_eq!((v.verdict, v.ops_linearizable), (Verdict::Linearizable, 24));
    // Two exclusive grants of /m/d without a release between them, in a group beyond
    // the bound: still found.
    for s in 1..=12u64 {
        h.push(acq_on("/m", SessionId(s), S, (0, 100), granted(200 + s)));
        h.push(acq_on("/m/e", SessionId(s), S, (0, 100), granted(300 + s)));
    }
    h.push(acq_on("/m/d", SessionId(20), X, (200, 201), granted(400)));
    h.push(acq_on("/m/d", SessionId(21), X, (202, 203), granted(401)));
    let v = check_locks(&h, &limits).unwrap();
    match v.verdict {
        Verdict::NotLinearizable(c) => assert_eq!(c.partition.as_deref(), Some("/m/d")),
        other => panic!("expected a violation, got {other:?}"),
    }
}

#[test]
fn malformed_history_is_an_error() {
    let h = vec![acq(A, X, (5, 1), granted(1))];
    assert_eq!(
        check(&LockModel::default(), &h, &Limits::default()),
        Err(HistoryError::ResponseBeforeInvoke {
            op: 0,
            invoke: 5,
            response: 1
        })
    );
}

#[test]
fn step_limit_answers_unknown() {
    // Many fully concurrent shared grants and holder reads: a large search space.
    let mut h = Vec::new();
    for s in 1..=12u64 {
        h.push(acq(SessionId(s), S, (0, 100), granted(s)));
    }
    h.push(holders(99, (0, 100), vec![(SessionId(13), S)]));
    let limits = Limits {
        max_steps: 50,
        core_max_ops: 0,
        deadline: None,
    };
    assert!(matches!(
        check(&LockModel::default(), &h, &limits).unwrap(),
        Verdict::Unknown { .. }
    ));
}

#[test]
fn time_limit_answers_unknown_and_none_changes_nothing() {
    // The same history passes with room to search and no deadline; with a deadline that
    // has passed, the search stops as unknown, never as a pass.
    let mut h = Vec::new();
    for s in 1..=6u64 {
        h.push(acq(SessionId(s), S, (0, 100), granted(s)));
    }
    assert_eq!(
        check(&LockModel::default(), &h, &Limits::default()).unwrap(),
        Verdict::Linearizable
    );
    let limits = Limits {
        deadline: Some(std::time::Instant::now()),
        ..Default::default()
    };
    assert!(matches!(
        check(&LockModel::default(), &h, &limits).unwrap(),
        Verdict::Unknown { .. }
    ));
}

fn reg(
    client: u64,
    input: RegisterInput,
    at: (u64, u64),
    out: RegisterOutput,
) -> Operation<RegisterInput, RegisterOutput> {
    Operation {
        client,
        input,
        invoke: at.0,
        response: Some((at.1, out)),
    }
}

#[test]
fn register_histories() {
    use RegisterInput::*;
    use RegisterOutput as O;
    let ok = vec![
        reg(1, Write(1), (0, 10), O::Ok),
        reg(2, Read, (1, 2), O::Value(0)),
        reg(3, Read, (3, 4), O::Value(1)),
        reg(2, Read, (5, 6), O::Value(1)),
        reg(4, Cas { expect: 1, new: 2 }, (11, 12), O::Ok),
        reg(5, Cas { expect: 1, new: 3 }, (13, 14), O::CasFailed),
    ];
    let r = check(&RegisterModel(0), &ok, &Limits::default()).unwrap();
    assert_eq!(r, Verdict::Linearizable);
    // Stale read: 1 was read, then a later read saw 0 again.
    let stale = vec![
        reg(1, Write(1), (0, 10), O::Ok),
        reg(3, Read, (3, 4), O::Value(1)),
        reg(2, Read, (5, 6), O::Value(0)),
    ];
    match check(&RegisterModel(0), &stale, &Limits::default()).unwrap() {
        Verdict::NotLinearizable(c) => {
            assert_eq!(c.partition, None);
            assert_eq!(c.core, vec![1, 2]);
        }
        v => panic!("expected a violation, got {v:?}"),
    }
}

/// Drives the real lock table (tenure-core lockctl) sequentially on a small tree of
/// names, giving each operation an interval around its instant of execution; every
/// such history is linearizable by construction, so the checker must accept it (no
/// false alarms, cover rule included).
#[test]
fn histories_of_the_real_lock_table_pass() {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    for _round in 0..30 {
        let mut table = LockTable::new(LockTableConfig::default(), Epoch(1));
        let mut h: Vec<LockOp> = Vec::new();
        for i in 0..24u64 {
            let at = 10 * i + 5;
            let (lo, hi) = (at - next(6), at + next(6));
            let s = SessionId(1 + next(3));
            let name = ["/p", "/q", "/p/x", "/p/x/y", "/p/z"][next(5) as usize].to_string();
            let now = tenure_core::Instant(at);
            let (input, out) = match next(3) {
                0 => {
                    let mode = if next(2) == 0 { S } else { X };
                    let r = table.acquire(
                        &Acquire {
                            session: s,
                            request_id: RequestId(i),
                            name: name.clone(),
                            mode,
                            wait: Wait::Try,
                            lock_delay: None,
                        },
                        now,
                    );
                    let out = match r {
                        Ok(Acquired::Granted(g)) => LockOutput::Granted { token: g.token },
                        Err(AcquireError::WouldBlock | AcquireError::AlreadyHeld { .. }) => {
                            LockOutput::Refused
                        }
                        other => panic!("unexpected {other:?}"),
                    };
                    (
                        LockInput::Acquire {
                            name,
                            session: s,
                            mode,
                        },
                        out,
                    )
                }
                1 => {
                    let out = match table.release(&name, s, now) {
                        Ok(_) => LockOutput::Released,
                        Err(_) => LockOutput::NotHeld,
                    };
                    (LockInput::Release { name, session: s }, out)
                }
                _ => {
                    let seen = table
                        .holders(&name)
                        .unwrap()
                        .into_iter()
                        .map(|h| (h.session, h.mode))
                        .collect();
                    (LockInput::Holders { name }, LockOutput::Holders(seen))
                }
            };
            h.push(op(s.0, input, lo, Some((hi, out))));
        }
        let v = check(&LockModel::default(), &h, &Limits::default()).unwrap();
        assert_eq!(v, Verdict::Linearizable, "{h:#?}");
        // The table ships between replicas: it survives a serde round trip.
        let json = serde_json::to_string(&table).unwrap();
        assert_eq!(serde_json::from_str::<LockTable>(&json).unwrap(), table);
    }
}

// The search's successors, scanned from cursors over sorted orders, are exactly the
// plain statement's: the same ops in the same order with the same states, for random
// histories (completed, pending and relaxed ops, ties in time) and random linearized
// sets, from a fresh cursor and from a parent's.
#[test]
fn fast_successors_match_the_plain_statement() {
    let mut rng = tenure_core::rng::Rng::new(37);
    for _ in 0..400 {
        let n = 1 + rng.below(90) as usize;
        let names = ["/l", "/l/c", "/m"];
        let h: Vec<LockOp> = (0..n)
            .map(|i| {
                let name = names[rng.below(3) as usize].to_string();
                let session = SessionId(1 + rng.below(4));
                let input = match rng.below(3) {
                    0 => LockInput::Release { name, session },
                    _ => LockInput::Acquire {
                        name,
                        session,
                        mode: if rng.below(2) == 0 { S } else { X },
                    },
                };
                let invoke = rng.below(40);
                let response = (rng.below(4) != 0).then(|| {
                    let out = match &input {
                        LockInput::Acquire { .. } if rng.below(2) == 0 => granted(i as u64 + 1),
                        LockInput::Acquire { .. } => LockOutput::Failed,
                        _ => LockOutput::Released,
                    };
                    (invoke + rng.below(10), out)
                });
                op(1, input, invoke, response)
            })
            .collect();
        let mut h = h;
        if rng.below(2) == 0 {
            // As the simulator records them: in invoke order.
            h.sort_by_key(|o| o.invoke);
        }
        let part: Vec<usize> = (0..n).filter(|_| rng.below(5) != 0).collect();
        let relaxed: Vec<bool> = part.iter().map(|_| rng.below(6) == 0).collect();
        let p = Part::<LockModel>::new(&h, &part, &relaxed);
        let words = part.len().div_ceil(64).max(1);
        let state = LockModel::default();
        let mut lin = vec![0u64; words];
        let (_, mut cursor) = p.successors(&state, &lin, Cursor::default());
        for _ in 0..part.len() {
            let c = rng.below(part.len().max(1) as u64) as usize;
            if !part.is_empty() {
                lin[c / 64] |= 1 << (c % 64);
            }
            let want = successors(&state, &lin, &h, &part, &relaxed);
            assert_eq!(p.successors(&state, &lin, Cursor::default()).0, want);
            let (got, next) = p.successors(&state, &lin, cursor);
            assert_eq!(got, want);
            cursor = next;
        }
    }
}
