//! The lock service's checkers (DESIGN §9 items 3–5), fed by the simulator's lock
//! clients on the virtual clock:
//!
//! - **Mutual exclusion on the real-time history.** A client *believes* it holds a lock
//!   from the moment the grant reaches it until it sends the release, or until its
//!   conservative session deadline passes (send time of the last answered keep-alive +
//!   TTL − δ_c, [`tenure_core::session::client_deadline`]), whichever comes first. Two
//!   such intervals of different sessions must never overlap when their locks conflict:
//!   on one name, or on two names one of which covers the other (an ancestor, seed 004
//!   §9), unless both are shared ([`crate::lincheck::locks_conflict`]). Checked when an
//!   interval opens, against every interval on the name, its ancestors and descendants.
//! - **Fencing tokens strictly increase per lock**: a grant that completed before another
//!   was invoked has the smaller token, and no two grants of a name share a token.
//!   Checked when a grant's answer arrives.
//! - **No acknowledged grant or release is lost** across failovers: whenever a manager
//!   takes over a store, its table must still hold every grant a client believes it
//!   holds (unless the session's end was decided) and none that a client was told
//!   was released (maximum forward progress, seed 004 §4.1).
//! - **Linearizability** of the whole history against [`crate::lincheck::LockModel`],
//!   with the Wing–Gong/Porcupine search of [`crate::lincheck`], at the end of the run:
//!   names that cover one another together, or, where that search is beyond its bound,
//!   name by name ([`crate::lincheck::check_locks`]). Session
//!   ends decided by a manager are recorded as one release per lock they free, invoked
//!   when the manager decided the end and answered when it was applied.
//!
//! Each check takes plain facts, so the tests below show each one firing on a hand-built
//! bad history; the simulator tests show them firing on planted bugs in the core.

use crate::checks::Violation;
use crate::lincheck::{self, LockInput, LockOutput, Operation, Verdict, locks_conflict};
use serde::Serialize;
use std::collections::BTreeMap;
use tenure_core::lockctl::{FencingToken, HolderInfo, LockMode, SessionId};
use tenure_core::{DeviceId, StoreId};

/// One belief of a client that it holds a lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interval {
    /// Client.
    pub client: u64,
    /// The store of the session (ids are numbered per store).
    pub store: StoreId,
    /// Session that holds it.
    pub session: SessionId,
    /// Mode.
    pub mode: LockMode,
    /// Fencing token of the grant.
    pub token: FencingToken,
    /// When the grant reached the client (µs).
    pub start: u64,
    /// When the client stopped believing (release sent, or deadline); `None` while open.
    pub end: Option<u64>,
}

/// How often the lock checkers compared something.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LockCheckCounts {
    /// Pairs of intervals compared for mutual exclusion.
    pub exclusion_checks: u64,
    /// Pairs of grants compared for token order.
    pub fencing_checks: u64,
    /// Believed grants and acknowledged releases looked up in a new manager's table.
    pub takeover_checks: u64,
    /// Operations found linearizable, names that cover one another judged together.
    pub linearizable_ops: u64,
    /// Operations found linearizable name by name, where the joint search of their group
    /// of covering names hit its step bound.
    pub linearizable_ops_alone: u64,
    /// Groups of covering names whose joint search hit its step bound.
    pub linearizability_groups_unknown: u64,
    /// Histories (runs) with a group beyond the step bound even name by name.
    pub linearizability_unknown: u64,
}

impl LockCheckCounts {
    /// Add another run's counts.
    pub fn add(&mut self, o: &LockCheckCounts) {
        self.exclusion_checks += o.exclusion_checks;
        self.fencing_checks += o.fencing_checks;
        self.takeover_checks += o.takeover_checks;
        self.linearizable_ops += o.linearizable_ops;
        self.linearizable_ops_alone += o.linearizable_ops_alone;
        self.linearizability_groups_unknown += o.linearizability_groups_unknown;
        self.linearizability_unknown += o.linearizability_unknown;
    }
}

/// A release a client was told happened.
#[derive(Clone, Debug)]
struct AckedRelease {
    store: StoreId,
    name: String,
    session: SessionId,
    token: FencingToken,
}

/// The lock checkers' memory of a run.
#[derive(Clone, Debug, Default)]
pub struct LockChecker {
    /// The history, in invoke order.
    pub ops: Vec<Operation<LockInput, LockOutput>>,
    /// Operations that provably had no effect and say nothing (left out of the check).
    dropped: Vec<bool>,
    /// name → the answered grants of that name: operation → (answer time, token).
    granted: BTreeMap<String, BTreeMap<usize, (u64, FencingToken)>>,
    /// name → every interval, in start order.
    intervals: BTreeMap<String, Vec<Interval>>,
    /// Each session's current client deadline (µs), by store and session; intervals of
    /// a session end there.
    deadlines: BTreeMap<(StoreId, SessionId), u64>,
    /// The releases of the last session end each manager decided, per (manager,
    /// session). An end decided by a manager that lost its role before applying it may
    /// or may not take effect, so its releases stay unanswered.
    ending: BTreeMap<(StoreId, DeviceId, SessionId), Vec<usize>>,
    /// Sessions whose end some manager decided.
    ended: std::collections::BTreeSet<(StoreId, SessionId)>,
    /// Releases clients were told about.
    released: Vec<AckedRelease>,
    /// Counts.
    pub counts: LockCheckCounts,
    /// Each client session's conservative deadline, by store and session (real µs):
    /// a session may expire at its manager only after it.
    client_deadlines: BTreeMap<(StoreId, SessionId), u64>,
    /// Violations found.
    pub violations: Vec<Violation>,
}

impl LockChecker {
    /// An operation was invoked at `now`; returns its index.
    pub fn invoke(&mut self, client: u64, input: LockInput, now: u64) -> usize {
        self.ops.push(Operation {
            client,
            input,
            invoke: now,
            response: None,
        });
        self.dropped.push(false);
        self.ops.len() - 1
    }

    /// Operation `op` was answered at `now` with `output`.
    pub fn respond(&mut self, op: usize, now: u64, output: LockOutput) {
        if let LockOutput::Granted { token } = &output
            && let LockInput::Acquire { name, .. } = &self.ops[op].input
        {
            let name = name.clone();
            self.check_token(op, &name, *token, now);
            self.granted
                .entry(name)
                .or_default()
                .insert(op, (now, *token));
        }
        self.ops[op].response = Some((now, output));
    }

    /// Operation `op` had no effect and tells nothing: leave it out.
    pub fn drop_op(&mut self, op: usize) {
        self.dropped[op] = true;
    }

    /// Fencing: against every grant of `name` already answered.
    fn check_token(&mut self, op: usize, name: &str, token: FencingToken, now: u64) {
        let invoke = self.ops[op].invoke;
        for (i, (resp, t)) in self.granted.get(name).into_iter().flatten() {
            if *i == op {
                continue;
            }
            self.counts.fencing_checks += 1;
            if *t == token || (*resp < invoke && *t > token) {
                self.violations.push(Violation::FencingOrder {
                    name: name.to_string(),
                    earlier: *t,
                    later: token,
                    at_us: now,
                });
                return;
            }
        }
    }

    /// A client's session of `store` has its deadline at `deadline` (µs) now.
    pub fn set_deadline(&mut self, store: StoreId, session: SessionId, deadline: u64) {
        self.deadlines.insert((store, session), deadline);
    }

    /// The client of `session` in `store` believes it alive until `deadline` (real µs).
    pub fn set_client_deadline(&mut self, store: StoreId, session: SessionId, deadline: u64) {
        self.client_deadlines.insert((store, session), deadline);
    }

    /// When an interval stops counting: its end, or its session's deadline.
    fn effective_end(&self, iv: &Interval) -> u64 {
        let d = (self.deadlines.get(&(iv.store, iv.session)).copied()).unwrap_or(u64::MAX);
        iv.end.unwrap_or(u64::MAX).min(d)
    }

    /// The names with intervals that `name` covers or is covered by: its ancestors,
    /// itself, its descendants. (Names that overlap share their first segment, hence
    /// their store, so a session id means the same session on all of them.)
    fn overlapping(&self, name: &str) -> Vec<String> {
        let ancestors = (name.char_indices().skip(1))
            .filter(|(_, c)| *c == '/')
            .map(|(i, _)| &name[..i]);
        let (lo, hi) = (format!("{name}/"), format!("{name}0"));
        let descendants = self.intervals.range(lo..hi).map(|(n, _)| n.clone());
        ancestors
            .chain(std::iter::once(name))
            .filter(|n| self.intervals.contains_key(*n))
            .map(str::to_string)
            .chain(descendants)
            .collect()
    }

    /// A grant reached a client whose deadline has not passed: it believes it holds the
    /// lock from `now`. Checks mutual exclusion against every other belief on a name
    /// that covers `name` or that it covers.
    pub fn hold(&mut self, name: &str, iv: Interval) {
        let mut found = None;
        let mut compared = 0;
        'names: for other_name in self.overlapping(name) {
            for other in &self.intervals[&other_name] {
                if other.session == iv.session {
                    continue;
                }
                compared += 1;
                if locks_conflict(&other_name, other.mode, name, iv.mode)
                    && self.effective_end(other) > iv.start
                {
                    found = Some((other_name.clone(), other.clone()));
                    break 'names;
                }
            }
        }
        self.counts.exclusion_checks += compared;
        if let Some((first_name, first)) = found {
            self.violations.push(Violation::MutualExclusion {
                name: name.to_string(),
                first_name,
                first: first.session,
                first_token: first.token,
                first_since_us: first.start,
                second: iv.session,
                second_token: iv.token,
                at_us: iv.start,
            });
        }
        self.intervals.entry(name.to_string()).or_default().push(iv);
    }

    /// The client of `session` stops believing it holds `name` at `now` (it sends the
    /// release, or forgets the session).
    pub fn unhold(&mut self, name: &str, session: SessionId, now: u64) {
        if let Some(iv) = self
            .intervals
            .get_mut(name)
            .and_then(|v| v.iter_mut().rev().find(|i| i.session == session))
            && iv.end.is_none()
        {
            iv.end = Some(now);
        }
    }

    /// A client was told its release of `name` (granted with `token`) happened.
    pub fn release_acked(
        &mut self,
        store: StoreId,
        name: &str,
        session: SessionId,
        token: FencingToken,
    ) {
        self.released.push(AckedRelease {
            store,
            name: name.to_string(),
            session,
            token,
        });
    }

    /// `manager` decided to end `session`, releasing `names`: one release each, answered
    /// when [`session_ended`](Self::session_ended) reports that manager applied it.
    /// Session ids are per store: two stores may both have a session 7.
    pub fn session_ending(
        &mut self,
        store: StoreId,
        manager: DeviceId,
        session: SessionId,
        names: &[String],
        now: u64,
    ) {
        let ops = names
            .iter()
            .map(|name| {
                self.invoke(
                    u64::MAX,
                    LockInput::Release {
                        name: name.clone(),
                        session,
                    },
                    now,
                )
            })
            .collect();
        self.ending.insert((store, manager, session), ops);
        self.ended.insert((store, session));
    }

    /// `session` of `store` expired at `now` (real µs): its client's deadline must have
    /// passed.
    pub fn session_expired(&mut self, store: StoreId, session: SessionId, now: u64) {
        if let Some(deadline) = self.client_deadlines.remove(&(store, session))
            && deadline > now
        {
            self.violations
                .push(Violation::ExpiredBeforeClientDeadline {
                    store,
                    session,
                    at_us: now,
                    deadline_us: deadline,
                });
        }
    }

    /// `manager` applied its end of `session`.
    pub fn session_ended(
        &mut self,
        store: StoreId,
        manager: DeviceId,
        session: SessionId,
        now: u64,
    ) {
        for op in self
            .ending
            .remove(&(store, manager, session))
            .unwrap_or_default()
        {
            self.respond(op, now, LockOutput::Released);
        }
    }

    /// A manager of `store` took over at `now` with `holders(name)` as its table: it must
    /// hold every lock a client believes it holds there (unless the session's end was
    /// decided) and none a client was told was released.
    pub fn takeover(
        &mut self,
        store: StoreId,
        manager: DeviceId,
        names: impl Fn(&str) -> Option<StoreId>,
        holders: impl Fn(&str) -> Vec<HolderInfo>,
        now: u64,
    ) {
        let mut missing = Vec::new();
        for (name, ivs) in &self.intervals {
            if names(name) != Some(store) {
                continue;
            }
            for iv in ivs {
                if self.effective_end(iv) <= now || self.ended.contains(&(store, iv.session)) {
                    continue;
                }
                self.counts.takeover_checks += 1;
                let h = holders(name);
                if !h
                    .iter()
                    .any(|x| x.session == iv.session && x.token == iv.token)
                {
                    missing.push(Violation::LostGrant {
                        store,
                        manager,
                        name: name.clone(),
                        session: iv.session,
                        token: iv.token,
                        at_us: now,
                    });
                }
            }
        }
        for r in &self.released {
            if r.store != store {
                continue;
            }
            self.counts.takeover_checks += 1;
            if holders(&r.name)
                .iter()
                .any(|x| x.session == r.session && x.token == r.token)
            {
                missing.push(Violation::LostRelease {
                    store,
                    manager,
                    name: r.name.clone(),
                    session: r.session,
                    token: r.token,
                    at_us: now,
                });
            }
        }
        self.violations.extend(missing);
    }

    /// The history to check: every operation not provably without effect.
    pub fn history(&self) -> Vec<Operation<LockInput, LockOutput>> {
        self.ops
            .iter()
            .zip(&self.dropped)
            .filter(|(_, d)| !**d)
            .map(|(o, _)| o.clone())
            .collect()
    }

    /// Check the whole history for linearizability (at the end of a run): names that
    /// cover one another together, or name by name where that search is beyond the bound.
    pub fn linearizable(&mut self, limits: &lincheck::Limits) {
        let history = self.history();
        match lincheck::check_locks(&history, limits) {
            Ok(v) => {
                self.counts.linearizable_ops += v.ops_linearizable;
                self.counts.linearizable_ops_alone += v.ops_linearizable_alone;
                self.counts.linearizability_groups_unknown += v.groups_unknown;
                match v.verdict {
                    Verdict::Linearizable => {}
                    Verdict::Unknown { .. } => self.counts.linearizability_unknown += 1,
                    Verdict::NotLinearizable(c) => {
                        self.violations.push(Violation::NotLinearizable {
                            name: c.partition.clone().unwrap_or_default(),
                            description: c.description.clone(),
                        })
                    }
                }
            }
            Err(e) => self.violations.push(Violation::NotLinearizable {
                name: String::new(),
                description: format!("malformed history: {e}"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_core::Epoch;
    use tenure_core::lockctl::RequestId;

    fn tok(seq: u64) -> FencingToken {
        FencingToken {
            epoch: Epoch(1),
            seq,
        }
    }

    fn iv(session: u64, mode: LockMode, seq: u64, start: u64) -> Interval {
        Interval {
            client: session,
            store: StoreId(0),
            session: SessionId(session),
            mode,
            token: tok(seq),
            start,
            end: None,
        }
    }

    fn acquire(c: &mut LockChecker, s: u64, invoke: u64, resp: u64, seq: u64) {
        let op = c.invoke(
            s,
            LockInput::Acquire {
                name: "/a/x".into(),
                session: SessionId(s),
                mode: LockMode::Exclusive,
            },
            invoke,
        );
        c.respond(op, resp, LockOutput::Granted { token: tok(seq) });
    }

    // DESIGN §9.3: two exclusive beliefs overlap → violation.
    #[test]
    fn mutual_exclusion_catches_overlapping_holders() {
        let mut c = LockChecker::default();
        c.hold("/a/x", iv(1, LockMode::Exclusive, 1, 10));
        c.hold("/a/x", iv(2, LockMode::Exclusive, 2, 20));
        assert!(matches!(
            c.violations.as_slice(),
            [Violation::MutualExclusion { .. }]
        ));
    }

    #[test]
    fn mutual_exclusion_allows_released_deadlined_and_shared() {
        let mut c = LockChecker::default();
        c.hold("/a/x", iv(1, LockMode::Exclusive, 1, 10));
        c.unhold("/a/x", SessionId(1), 15);
        c.hold("/a/x", iv(2, LockMode::Exclusive, 2, 20));
        c.set_deadline(StoreId(0), SessionId(2), 25);
        c.hold("/a/x", iv(3, LockMode::Shared, 3, 30));
        c.hold("/a/x", iv(4, LockMode::Shared, 4, 31));
        assert!(c.violations.is_empty(), "{:?}", c.violations);
        assert!(c.counts.exclusion_checks >= 3);
        // ... but an exclusive belief next to the shared ones is not.
        c.hold("/a/x", iv(5, LockMode::Exclusive, 5, 40));
        assert_eq!(c.violations.len(), 1);
    }

    // DESIGN §9.3: session ids are numbered per store, so the deadline of session 2 of
    // another store does not end the belief of session 2 of this one.
    #[test]
    fn a_deadline_ends_the_beliefs_of_its_own_store_s_session_only() {
        let mut c = LockChecker::default();
        c.hold("/a/x", iv(2, LockMode::Exclusive, 1, 10));
        c.set_deadline(StoreId(5), SessionId(2), 15);
        c.hold("/a/x", iv(3, LockMode::Exclusive, 2, 20));
        assert!(
            matches!(c.violations.as_slice(), [Violation::MutualExclusion { .. }]),
            "{:?}",
            c.violations
        );
        let mut c = LockChecker::default();
        c.hold("/a/x", iv(2, LockMode::Exclusive, 1, 10));
        c.set_deadline(StoreId(0), SessionId(2), 15);
        c.hold("/a/x", iv(3, LockMode::Exclusive, 2, 20));
        assert!(c.violations.is_empty(), "{:?}", c.violations);
    }

    // DESIGN §9.3 with the cover rule (seed 004 §9): a lock on /a covers /a/x, so
    // beliefs on the two conflict unless both are shared; siblings never do.
    #[test]
    fn mutual_exclusion_judges_ancestors_and_descendants() {
        let mut c = LockChecker::default();
        c.hold("/a", iv(1, LockMode::Shared, 1, 10));
        c.hold("/a/x", iv(2, LockMode::Shared, 2, 11));
        c.hold("/a/y/z", iv(3, LockMode::Exclusive, 3, 12));
        c.hold("/ab", iv(4, LockMode::Exclusive, 4, 13));
        assert_eq!(c.violations.len(), 1, "{:?}", c.violations);
        assert!(matches!(
            &c.violations[0],
            Violation::MutualExclusion { name, first_name, .. } if name == "/a/y/z" && first_name == "/a"
        ));
        // The descendant first, then the ancestor.
        let mut c = LockChecker::default();
        c.hold("/a/x/1", iv(1, LockMode::Exclusive, 1, 10));
        c.hold("/a/y", iv(2, LockMode::Exclusive, 2, 11));
        c.unhold("/a/y", SessionId(2), 12);
        assert!(c.violations.is_empty());
        c.hold("/a", iv(3, LockMode::Shared, 3, 13));
        assert!(matches!(
            &c.violations[..],
            [Violation::MutualExclusion { first_name, .. }] if first_name == "/a/x/1"
        ));
        // The same session may hold overlapping locks.
        let mut c = LockChecker::default();
        c.hold("/a", iv(1, LockMode::Exclusive, 1, 10));
        c.hold("/a/x", iv(1, LockMode::Exclusive, 2, 11));
        assert!(c.violations.is_empty());
    }

    // DESIGN §9.3: fencing tokens strictly increase per lock.
    #[test]
    fn fencing_catches_a_smaller_token_after_a_completed_grant() {
        let mut c = LockChecker::default();
        acquire(&mut c, 1, 0, 10, 5);
        acquire(&mut c, 2, 20, 30, 6);
        assert!(c.violations.is_empty());
        acquire(&mut c, 3, 40, 50, 4);
        assert!(matches!(
            c.violations.as_slice(),
            [Violation::FencingOrder { .. }]
        ));
    }

    #[test]
    fn fencing_catches_a_reused_token() {
        let mut c = LockChecker::default();
        acquire(&mut c, 1, 0, 10, 5);
        acquire(&mut c, 2, 5, 12, 5);
        assert_eq!(c.violations.len(), 1);
    }

    fn holder(session: u64, seq: u64) -> HolderInfo {
        HolderInfo {
            session: SessionId(session),
            mode: LockMode::Exclusive,
            token: tok(seq),
            request_id: RequestId(1),
            granted_at: tenure_core::Instant(0),
        }
    }

    // DESIGN §9.4: a new manager must keep every believed grant and no acked release.
    #[test]
    fn takeover_catches_lost_grant_and_lost_release() {
        let store = |_: &str| Some(StoreId(0));
        let mut c = LockChecker::default();
        c.hold("/a/x", iv(1, LockMode::Exclusive, 1, 10));
        c.takeover(StoreId(0), DeviceId(1), store, |_| vec![holder(1, 1)], 20);
        assert!(c.violations.is_empty());
        c.takeover(StoreId(0), DeviceId(2), store, |_| vec![], 30);
        assert!(matches!(
            c.violations.as_slice(),
            [Violation::LostGrant { .. }]
        ));

        let mut c = LockChecker::default();
        c.release_acked(StoreId(0), "/a/x", SessionId(1), tok(1));
        c.takeover(StoreId(0), DeviceId(2), store, |_| vec![holder(1, 1)], 30);
        assert!(matches!(
            c.violations.as_slice(),
            [Violation::LostRelease { .. }]
        ));
    }

    #[test]
    fn takeover_skips_sessions_whose_end_was_decided() {
        let mut c = LockChecker::default();
        c.hold("/a/x", iv(1, LockMode::Exclusive, 1, 10));
        c.session_ending(
            StoreId(0),
            DeviceId(1),
            SessionId(1),
            &["/a/x".to_string()],
            15,
        );
        c.takeover(
            StoreId(0),
            DeviceId(2),
            |_| Some(StoreId(0)),
            |_| vec![],
            30,
        );
        assert!(c.violations.is_empty());
    }

    /// A client asks who holds `/a/x` and hears: nobody.
    fn read_no_holder(c: &mut LockChecker, invoke: u64, resp: u64) {
        let q = c.invoke(
            2,
            LockInput::Holders {
                name: "/a/x".into(),
            },
            invoke,
        );
        c.respond(q, resp, LockOutput::Holders(vec![]));
    }

    // DESIGN §9.5: a history where a holder vanished without a release is caught.
    #[test]
    fn linearizability_catches_a_vanished_holder() {
        let mut c = LockChecker::default();
        acquire(&mut c, 1, 0, 10, 1);
        read_no_holder(&mut c, 20, 25);
        c.linearizable(&lincheck::Limits::default());
        assert!(matches!(
            c.violations.as_slice(),
            [Violation::NotLinearizable { .. }]
        ));
        // With the expiry recorded, the same answer is fine.
        let mut c = LockChecker::default();
        acquire(&mut c, 1, 0, 10, 1);
        c.session_ending(
            StoreId(0),
            DeviceId(1),
            SessionId(1),
            &["/a/x".to_string()],
            12,
        );
        c.session_ended(StoreId(0), DeviceId(1), SessionId(1), 14);
        read_no_holder(&mut c, 20, 25);
        c.linearizable(&lincheck::Limits::default());
        assert!(c.violations.is_empty(), "{:?}", c.violations);
        assert_eq!(c.counts.linearizable_ops, 3);
    }

    // Session ids are per store (sim seed 32991: a session 8589934596 ended in store 2 while
    // the session of the same number in store 1 was still ending; the checker answered
    // store 1's release when store 2's end was applied and flagged a correct read).
    #[test]
    fn session_ends_are_told_apart_by_store() {
        let mut c = LockChecker::default();
        acquire(&mut c, 1, 0, 10, 1);
        let b = c.invoke(
            3,
            LockInput::Acquire {
                name: "/b/y".into(),
                session: SessionId(1),
                mode: LockMode::Exclusive,
            },
            0,
        );
        c.respond(b, 10, LockOutput::Granted { token: tok(2) });
        c.session_ending(
            StoreId(1),
            DeviceId(1),
            SessionId(1),
            &["/b/y".to_string()],
            12,
        );
        c.session_ending(
            StoreId(0),
            DeviceId(1),
            SessionId(1),
            &["/a/x".to_string()],
            13,
        );
        c.session_ended(StoreId(1), DeviceId(1), SessionId(1), 14);
        // Store 0's end is still in flight: a read may still see the holder.
        let q = c.invoke(
            2,
            LockInput::Holders {
                name: "/a/x".into(),
            },
            20,
        );
        c.respond(
            q,
            25,
            LockOutput::Holders(vec![(SessionId(1), LockMode::Exclusive)]),
        );
        c.session_ended(StoreId(0), DeviceId(1), SessionId(1), 30);
        read_no_holder(&mut c, 40, 45);
        c.linearizable(&lincheck::Limits::default());
        assert!(c.violations.is_empty(), "{:?}", c.violations);
    }
}
