//! Unit tests of the logical component merge, one per state and transition of seed 004
//! §4.5 (Figure 3) and per crash case of §4.6, on the driver of [`super::tests`].

use super::tests::{MT, Net, d, settings, x};
use super::*;

/// A network of `n` sites cut into logical components `groups` (each group's LC is
/// named first), with each lock's data on `copies` sites. The links between groups are
/// cut until [`heal`].
fn split(n: u64, groups: &[&[u64]], copies: Option<u64>) -> Net {
    let mut net = Net::new(n);
    let order: Vec<DeviceId> = (1..=n).map(d).collect();
    let mut s = settings();
    s.copies = copies;
    for g in groups {
        let mut up: Vec<DeviceId> = g.iter().copied().map(d).collect();
        up.sort();
        for &i in *g {
            *net.site(d(i)) =
                Site::in_component(d(i), order.clone(), d(g[0]), up.clone(), s.clone());
        }
    }
    for a in groups {
        for b in groups {
            if a != b {
                for &i in *a {
                    for &j in *b {
                        net.cut.insert((d(i), d(j)));
                    }
                }
            }
        }
    }
    net
}

fn heal(net: &mut Net) {
    net.cut.clear();
}

/// Start reconnection detection at `lc`, its first WYA `after` µs from now.
fn detect(net: &mut Net, lc: u64, after: u64) {
    let first = Instant(net.now + after);
    net.site(d(lc)).start_reconnection_detection(first);
}

fn grant(net: &mut Net, lc: u64, lock: u64) {
    net.call(d(lc), |p, now| {
        p.lock(now, x(lock)).expect("granted");
    });
}

fn inbox(site: &mut Site) -> Vec<MenasceOut> {
    std::iter::from_fn(|| site.poll_output()).collect()
}

fn sent(to: u64, msg: MenasceMsg) -> MenasceOut {
    MenasceOut::Send { to: d(to), msg }
}

/// Seed 004 §4.5 reconnection detection: an LC in NORMAL status sends WERE YOU ALIVE
/// periodically to every site not in its up list, and only to those.
#[test]
fn wya_goes_periodically_to_every_site_not_in_the_up_list() {
    let mut n = split(5, &[&[1, 2], &[3, 4, 5]], None);
    detect(&mut n, 1, MT);
    n.run_for(MT + MT / 2);
    assert_eq!(n.count("WYA"), 3);
    n.run_for(settings().wya_period.as_micros() as u64);
    assert_eq!(n.count("WYA"), 6, "a second round, a period later");
    // The cut kept every WYA from arriving: no YIW.
    assert_eq!(n.count("YIW"), 0);
}

/// Seed 004 §4.5: a site whose component is in NORMAL status answers WYA with YES I WAS,
/// carrying its LC's id; one in RECOVERY does not answer.
#[test]
fn yiw_names_lc2_and_only_from_a_normal_component() {
    let order: Vec<DeviceId> = (1..=4).map(d).collect();
    let mut s3 = Site::in_component(d(3), order.clone(), d(4), vec![d(3), d(4)], settings());
    s3.handle_msg(Instant(0), d(1), MenasceMsg::WereYouAlive);
    assert_eq!(
        inbox(&mut s3),
        vec![sent(1, MenasceMsg::YesIWas { lc: d(4) })]
    );
    s3.detect_lc_crash(Instant(0));
    let _ = inbox(&mut s3);
    assert_eq!(s3.status(), Status::Recovery);
    s3.handle_msg(Instant(1), d(1), MenasceMsg::WereYouAlive);
    assert_eq!(inbox(&mut s3), vec![]);
}

/// Seed 004 §4.5: YIW at LC1 in NORMAL — LET US MERGE with `U1` to LC2, status ATTEMPT;
/// an LC already in ATTEMPT ignores further YIWs (C1) and does not itself answer WYA
/// (LCM is in progress).
#[test]
fn yiw_at_normal_sends_lum_with_u1_and_enters_attempt() {
    let order: Vec<DeviceId> = (1..=4).map(d).collect();
    let mut lc1 = Site::in_component(d(1), order, d(1), vec![d(1), d(2)], settings());
    lc1.handle_msg(Instant(0), d(3), MenasceMsg::YesIWas { lc: d(4) });
    assert_eq!(
        inbox(&mut lc1),
        vec![sent(
            4,
            MenasceMsg::LetUsMerge {
                up: vec![d(1), d(2)]
            }
        )]
    );
    assert_eq!(lc1.ps_state(), PsState::Attempt { secondary: d(4) });
    assert_eq!(lc1.status(), Status::Normal, "ATTEMPT still takes requests");
    lc1.handle_msg(Instant(1), d(4), MenasceMsg::YesIWas { lc: d(4) });
    lc1.handle_msg(Instant(1), d(4), MenasceMsg::WereYouAlive);
    assert_eq!(inbox(&mut lc1), vec![]);
}

/// Seed 004 §4.5, Figure 3: LUM at an LC in NORMAL — MERGE ACCEPTED with `U2`,
/// SECONDARY, and QUIESCENT (§5.2): new requests are refused. With nothing outstanding
/// READY TO MERGE follows at once, with `U2` and the LOCK table.
#[test]
fn lum_at_normal_sends_ma_and_enters_secondary() {
    let mut n = split(4, &[&[3, 4]], None);
    grant(&mut n, 3, 7);
    n.run_for(5 * MT);
    let now = Instant(n.now);
    let lc2 = n.site(d(3));
    lc2.handle_msg(
        now,
        d(1),
        MenasceMsg::LetUsMerge {
            up: vec![d(1), d(2)],
        },
    );
    let up2 = vec![d(3), d(4)];
    let table: Pending = [(x(7), Seq(1))].into_iter().collect();
    assert_eq!(
        inbox(lc2),
        vec![
            sent(1, MenasceMsg::MergeAccepted { up: up2.clone() }),
            sent(
                1,
                MenasceMsg::ReadyToMerge {
                    up: up2,
                    table,
                    max_seq: Seq(1)
                }
            ),
        ]
    );
    assert_eq!(lc2.ps_state(), PsState::Secondary { primary: d(1) });
    assert_eq!(lc2.status(), Status::Quiescent);
    assert!(matches!(
        lc2.lock(Instant(0), x(8)),
        Err(MenasceError::NotLc {
            status: Status::Quiescent,
            ..
        })
    ));
}

/// Seed 004 §4.5: "LUM messages from lower priority LCs are rejected" — an LC in
/// ATTEMPT answers MERGE ATTEMPT REJECTED and keeps its attempt.
#[test]
fn lum_from_lower_priority_at_attempt_gets_mar() {
    let order: Vec<DeviceId> = (1..=6).map(d).collect();
    let mut b = Site::in_component(d(4), order, d(4), vec![d(4)], settings());
    b.handle_msg(Instant(0), d(5), MenasceMsg::YesIWas { lc: d(5) });
    let _ = inbox(&mut b);
    b.handle_msg(Instant(1), d(2), MenasceMsg::LetUsMerge { up: vec![d(2)] });
    assert_eq!(
        inbox(&mut b),
        vec![sent(2, MenasceMsg::MergeAttemptRejected)]
    );
    assert_eq!(b.ps_state(), PsState::Attempt { secondary: d(5) });
}

/// Seed 004 §4.5, §5.1 Theorem 6 case (d): LUM from a higher-priority LC while the
/// connection is not yet complete — the transition LUM/CC;MA from ATTEMPT to SECONDARY:
/// CLOSE CONNECTION to the intended secondary, MA to the new primary.
#[test]
fn lum_from_higher_priority_at_attempt_sends_cc_then_ma_and_enters_secondary() {
    let order: Vec<DeviceId> = (1..=6).map(d).collect();
    let mut b = Site::in_component(d(4), order, d(4), vec![d(4)], settings());
    b.handle_msg(Instant(0), d(2), MenasceMsg::YesIWas { lc: d(2) });
    let _ = inbox(&mut b);
    b.handle_msg(Instant(1), d(6), MenasceMsg::LetUsMerge { up: vec![d(6)] });
    let out = inbox(&mut b);
    assert_eq!(out[0], sent(2, MenasceMsg::CloseConnection));
    assert_eq!(
        out[1],
        sent(6, MenasceMsg::MergeAccepted { up: vec![d(4)] })
    );
    assert_eq!(b.ps_state(), PsState::Secondary { primary: d(6) });
    // The MA of the broken attempt, arriving late, is ignored.
    b.handle_msg(
        Instant(2),
        d(2),
        MenasceMsg::MergeAccepted { up: vec![d(2)] },
    );
    assert_eq!(b.ps_state(), PsState::Secondary { primary: d(6) });
}

/// Seed 004 §4.5, Figure 3: MA at ATTEMPT — CONNECTION ESTABLISHED (an e-arc, §5.1);
/// a LUM there takes the self-loop: MAR, whatever its priority (Theorem 6 case (c)).
#[test]
fn ma_at_attempt_establishes_the_connection_which_rejects_every_lum() {
    let order: Vec<DeviceId> = (1..=6).map(d).collect();
    let mut b = Site::in_component(d(4), order, d(4), vec![d(4)], settings());
    b.handle_msg(Instant(0), d(2), MenasceMsg::YesIWas { lc: d(2) });
    b.handle_msg(
        Instant(1),
        d(2),
        MenasceMsg::MergeAccepted { up: vec![d(2)] },
    );
    assert_eq!(
        b.ps_state(),
        PsState::ConnectionEstablished { secondary: d(2) }
    );
    assert_eq!(b.status(), Status::Quiescent);
    let _ = inbox(&mut b);
    b.handle_msg(Instant(2), d(6), MenasceMsg::LetUsMerge { up: vec![d(6)] });
    assert_eq!(
        inbox(&mut b),
        vec![sent(6, MenasceMsg::MergeAttemptRejected)]
    );
}

/// Seed 004 §4.5: MAR at ATTEMPT — back to NORMAL (the LC retries at a later WYA round,
/// perhaps with another LC).
#[test]
fn mar_at_attempt_returns_to_normal() {
    let order: Vec<DeviceId> = (1..=4).map(d).collect();
    let mut a = Site::in_component(d(1), order, d(1), vec![d(1)], settings());
    a.handle_msg(Instant(0), d(3), MenasceMsg::YesIWas { lc: d(3) });
    a.handle_msg(Instant(1), d(2), MenasceMsg::MergeAttemptRejected);
    assert_eq!(
        a.ps_state(),
        PsState::Attempt { secondary: d(3) },
        "not its secondary"
    );
    a.handle_msg(Instant(1), d(3), MenasceMsg::MergeAttemptRejected);
    assert_eq!(a.ps_state(), PsState::Normal);
    assert!(a.is_lc());
}

/// Seed 004 §4.5: CLOSE CONNECTION at SECONDARY — the connection is broken, NORMAL
/// again, taking requests.
#[test]
fn cc_at_secondary_returns_to_normal() {
    let order: Vec<DeviceId> = (1..=4).map(d).collect();
    let mut c = Site::in_component(d(1), order, d(1), vec![d(1)], settings());
    c.handle_msg(Instant(0), d(2), MenasceMsg::LetUsMerge { up: vec![d(2)] });
    assert_eq!(c.ps_state(), PsState::Secondary { primary: d(2) });
    c.handle_msg(Instant(1), d(2), MenasceMsg::CloseConnection);
    assert_eq!(c.ps_state(), PsState::Normal);
    assert!(c.is_lc());
    assert!(c.lock(Instant(2), x(1)).is_ok());
}

/// Seed 004 §4.5–§4.6, the whole merge with nothing outstanding: WYA to the n2 sites of
/// C2, n2 YIWs, LUM, MA, RTM, then SYT round `TEMP_U` (n1 + n2 messages) with n1 + n2 − 2
/// acknowledgments to the generator. Every site ends with the union of the LOCK tables,
/// `TEMP_U` as its up list and LC1 as its LC.
#[test]
fn merge_of_two_components_installs_the_union_everywhere() {
    let mut n = split(5, &[&[3, 1, 2], &[5, 4]], Some(1));
    grant(&mut n, 3, 1); // LOC = site 2 (lock 1 mod 5 = index 1): in C1.
    grant(&mut n, 5, 3); // LOC = site 4: in C2.
    n.run_for(5 * MT);
    heal(&mut n);
    detect(&mut n, 3, MT);
    detect(&mut n, 5, 20 * MT);
    n.run_for(15 * MT);
    assert_eq!(n.merged, vec![(d(3), d(5))]);
    assert_eq!(n.one_lc(), d(3));
    let names = [
        "WYA", "YIW", "LUM", "MA", "MAR", "CC", "RTM", "SYT", "SYT-ack",
    ];
    let counts: Vec<u64> = names.iter().map(|m| n.count(m)).collect();
    assert_eq!(counts, vec![2, 2, 1, 1, 0, 0, 1, 5, 3]);
    let total: u64 = counts.iter().sum();
    assert_eq!(total, 2 * 3 + 4 * 2 + 1, "2·n1 + 4·n2 + 1");
    for p in n.live() {
        assert_eq!(
            p.table().keys().copied().collect::<Vec<_>>(),
            vec![x(1), x(3)]
        );
        assert_eq!(p.up(), &(1..=5).map(d).collect::<Vec<_>>()[..]);
    }
    // The merged LC numbers requests after both LCs' sequence numbers, and grants over
    // the whole merged component.
    let now = Instant(n.now);
    let seq = n.site(d(3)).lock(now, x(10)).expect("lc");
    assert!(seq > Seq(1));
    n.drain(d(3));
    n.run_for(5 * MT);
    assert!(n.tables().iter().all(|t| t.contains(&x(10))));
}

/// Seed 004 §4.5: after the P-S connection both LCs refuse new requests and complete
/// the outstanding ones; the RTM comes only then, and the union has them.
#[test]
fn outstanding_requests_complete_before_rtm() {
    let mut n = split(4, &[&[2, 1], &[4, 3]], None);
    heal(&mut n);
    n.call(d(2), |p, now| {
        p.handle_msg(now, d(3), MenasceMsg::YesIWas { lc: d(4) })
    });
    // LC2 starts a request just before the LUM reaches it.
    n.run_for(MT / 2);
    grant(&mut n, 4, 9);
    n.run_for(MT);
    assert_eq!(
        n.site(d(4)).ps_state(),
        PsState::Secondary { primary: d(2) }
    );
    assert_eq!(n.site(d(4)).outstanding().count(), 1);
    assert_eq!(n.count("RTM"), 0, "RTM waits for the outstanding request");
    n.run_for(20 * MT);
    assert_eq!(n.merged, vec![(d(2), d(4))]);
    assert!(
        n.tables().iter().all(|t| t == &vec![x(9)]),
        "{:?}",
        n.tables()
    );
}

/// Seed 004 §4.5: `U2' = U2 ∩ U1` — LC2 had not yet sensed that the sites of U2' belong
/// to another component: they leave its up list, and the locks no longer local with
/// respect to `U2 − U1` are released (the transactions aborted) before RTM.
#[test]
fn sites_in_both_up_lists_are_dropped_and_non_local_locks_released() {
    // Lock 2: LOC = sites 3, 4. Lock 3: LOC = sites 4, 5. Both granted in C2 = {3, 4, 5}.
    let mut n = split(5, &[&[1, 2], &[5, 3, 4]], Some(2));
    grant(&mut n, 5, 2);
    grant(&mut n, 5, 3);
    n.run_for(5 * MT);
    // Site 3 then joined C1 (LC 1); LC2's up list still names it.
    let order: Vec<DeviceId> = (1..=5).map(d).collect();
    let mut s = settings();
    s.copies = Some(2);
    let u1 = vec![d(1), d(2), d(3)];
    for i in 1..=3 {
        *n.site(d(i)) = Site::in_component(d(i), order.clone(), d(1), u1.clone(), s.clone());
    }
    heal(&mut n);
    n.call(d(1), |p, now| {
        p.handle_msg(now, d(4), MenasceMsg::YesIWas { lc: d(5) })
    });
    n.run_for(30 * MT);
    assert_eq!(n.merged, vec![(d(1), d(5))]);
    assert_eq!(
        (n.count("AR"), n.count("CR")),
        (1, 1),
        "lock 2 released by SafeTalk"
    );
    for p in n.live() {
        assert_eq!(
            p.table().keys().copied().collect::<Vec<_>>(),
            vec![x(3)],
            "site {}",
            p.id()
        );
    }
    assert_eq!(n.site(d(1)).up().len(), 5);
}

/// Seed 004 §2: with `LOC(P)` set, the LC refuses a lock that is not local.
#[test]
fn a_lock_not_local_to_the_component_is_refused() {
    let mut n = split(4, &[&[1, 2], &[3, 4]], Some(1));
    let now = Instant(0);
    // Lock 2: LOC = site 3, in the other component.
    assert_eq!(
        n.site(d(1)).lock(now, x(2)),
        Err(MenasceError::NotLocal(x(2)))
    );
    assert!(n.site(d(1)).lock(now, x(1)).is_ok());
}

/// Seed 004 §4.6 Case 1: LC1 crashes in the reconnection detection phase — the merge is
/// aborted; LC2, waiting for the SYT, returns to NORMAL with C2's tables unchanged.
#[test]
fn lc1_crash_aborts_the_merge() {
    let mut n = split(4, &[&[2, 1], &[4, 3]], None);
    grant(&mut n, 4, 5);
    n.run_for(5 * MT);
    heal(&mut n);
    n.call(d(2), |p, now| {
        p.handle_msg(now, d(3), MenasceMsg::YesIWas { lc: d(4) })
    });
    n.run_for(MT + MT / 2);
    assert_eq!(
        n.site(d(4)).ps_state(),
        PsState::Secondary { primary: d(2) }
    );
    n.crash(d(2));
    n.run_for(100 * MT);
    assert!(n.merged.is_empty());
    let lc2 = n.site(d(4));
    assert!(lc2.is_lc() && lc2.ps_state() == PsState::Normal);
    assert_eq!(n.site(d(3)).lc(), Some(d(4)));
    assert_eq!(
        n.site(d(3)).table().keys().copied().collect::<Vec<_>>(),
        vec![x(5)]
    );
    assert_eq!(
        n.site(d(1)).lc(),
        Some(d(2)),
        "C1 untouched: LCR is its business"
    );
}

/// Seed 004 §4.6 Case 2: LC2 crashes after RTM (the reconnection detection phase is
/// over) — tolerated: the SYT cycle skips it, C2's other sites join LC1's component
/// with their locks, and the new up list leaves LC2 out.
#[test]
fn lc2_crash_after_rtm_is_tolerated() {
    let mut n = split(5, &[&[2, 1], &[5, 3, 4]], None);
    grant(&mut n, 5, 6);
    n.run_for(5 * MT);
    heal(&mut n);
    n.call(d(2), |p, now| {
        p.handle_msg(now, d(3), MenasceMsg::YesIWas { lc: d(5) })
    });
    // LUM reaches LC2 at 1 MT, its MA and RTM reach LC1 at 2 MT, and the SYT leaves
    // for LC2.
    n.run_for(2 * MT + MT / 2);
    assert_eq!(n.count("SYT"), 1);
    n.crash(d(5));
    n.run_for(200 * MT);
    assert_eq!(n.merged, vec![(d(2), d(5))]);
    assert_eq!(n.one_lc(), d(2));
    assert_eq!(n.site(d(2)).up(), &[d(1), d(2), d(3), d(4)]);
    assert!(
        n.tables().iter().all(|t| t == &vec![x(6)]),
        "{:?}",
        n.tables()
    );
}

/// Seed 004 §5.1 Theorem 7 (deadlock freedom): three LCs attempting one another in a
/// cycle (a-arcs 1→2, 2→3, 3→1) end, with the later WYA rounds, in one component.
#[test]
fn a_cycle_of_attempts_is_broken_and_ends_in_one_component() {
    let mut n = split(6, &[&[1, 4], &[2, 5], &[3, 6]], None);
    heal(&mut n);
    n.call(d(1), |p, now| {
        p.handle_msg(now, d(5), MenasceMsg::YesIWas { lc: d(2) })
    });
    n.call(d(2), |p, now| {
        p.handle_msg(now, d(6), MenasceMsg::YesIWas { lc: d(3) })
    });
    n.call(d(3), |p, now| {
        p.handle_msg(now, d(4), MenasceMsg::YesIWas { lc: d(1) })
    });
    for lc in 1..=3 {
        detect(&mut n, lc, 10 * MT + lc * 7 * MT);
    }
    n.run_for(300 * MT);
    assert!(n.count("CC") + n.count("MAR") > 0, "{:?}", n.sent);
    assert_eq!(n.merged.len(), 2, "k − 1 pairwise merges");
    let lc = n.one_lc();
    assert_eq!(n.site(lc).up().len(), 6);
}

/// The planted bug `attempt_rejects_every_lum`: without the LUM/CC;MA transition, a
/// cycle of simultaneous attempts rejects itself round after round.
#[test]
fn planted_attempt_rejects_every_lum_deadlocks_a_cycle() {
    let mut n = split(6, &[&[1, 4], &[2, 5], &[3, 6]], None);
    for i in 1..=6 {
        n.site(d(i)).planted.attempt_rejects_every_lum = true;
    }
    heal(&mut n);
    for lc in 1..=3 {
        detect(&mut n, lc, MT);
    }
    // Each LC's first YIW names the LC after it (sites 5, 6, 4 answer first).
    n.run_for(300 * MT);
    assert!(n.merged.is_empty(), "{:?}", n.merged);
}
