//! Conflicts: whether a request can be granted now (modes, the cover rule over ancestors
//! and descendants, lock-delay ghosts) and the waits-for graph that refuses deadlocks.

use super::*;
use crate::ids::SessionId;
use crate::lockctl::mode::{LockMode, conflicts};
use crate::lockctl::name::LockName;
use crate::time::Instant;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

impl LockTable {
    /// `(name, mode)` for `session` can be granted now: no lock-delay forbids it, and it is
    /// either covered by a lock the session already holds, or conflicts with no other
    /// session's holder and no earlier (than `ticket`; `None`: than everything) wait.
    pub(super) fn grantable(
        &self,
        name: &LockName,
        mode: LockMode,
        session: SessionId,
        ticket: Option<Ticket>,
        now: Instant,
    ) -> bool {
        if self.delayed(name, mode, now) {
            return false;
        }
        self.covered_by_own(name, mode, session)
            || self.blockers(name, mode, session, ticket, now).is_empty()
    }

    /// A lock-delay forbids the name itself in any mode, and overlapping names in modes
    /// that conflict with the expired holder's.
    pub(super) fn delayed(&self, name: &LockName, mode: LockMode, now: Instant) -> bool {
        self.overlapping(name).any(|(n, e)| {
            e.ghost
                .as_ref()
                .is_some_and(|g| g.until > now && (n == name || conflicts(n, g.mode, name, mode)))
        })
    }

    /// HCLC cover rule (seed 004 §9): the session holds a lock on `name` or an ancestor in
    /// a mode not weaker than `mode`, so it already controls the resources asked for.
    fn covered_by_own(&self, name: &LockName, mode: LockMode, session: SessionId) -> bool {
        let Some(s) = self.sessions.get(&session) else {
            return false;
        };
        name.ancestors()
            .chain(std::iter::once(name.clone()))
            .filter(|a| s.held.contains(a))
            .any(|a| {
                self.entries
                    .get(&a)
                    .and_then(|e| e.holders.get(&session))
                    .is_some_and(|h| h.mode.covers(mode))
            })
    }

    /// The sessions `(name, mode, session)` would wait for: other sessions holding
    /// conflicting overlapping locks, and other sessions' earlier conflicting waits
    /// (unexpired) that FIFO order puts ahead of it. These are its waits-for edges.
    pub(super) fn blockers(
        &self,
        name: &LockName,
        mode: LockMode,
        session: SessionId,
        ticket: Option<Ticket>,
        now: Instant,
    ) -> BTreeSet<SessionId> {
        if self.planted_skip_conflicts || self.covered_by_own(name, mode, session) {
            return BTreeSet::new();
        }
        let mut out = BTreeSet::new();
        let judged = self
            .overlapping(name)
            .filter(|(n, _)| !self.planted_ignore_cover || *n == name);
        for (n, e) in judged {
            for (s, h) in &e.holders {
                if *s != session && conflicts(n, h.mode, name, mode) {
                    out.insert(*s);
                }
            }
            let earlier = match ticket {
                Some(t) => e.queue.range(..t),
                None => e.queue.range(..),
            };
            for t in earlier {
                let Some(w) = self.waiters.get(t) else {
                    continue;
                };
                if w.session != session && !w.expired(now) && conflicts(n, w.mode, name, mode) {
                    out.insert(w.session);
                }
            }
        }
        out
    }

    /// Entries whose names overlap `name`: its ancestors, itself, its descendants.
    pub(super) fn overlapping<'a>(
        &'a self,
        name: &'a LockName,
    ) -> impl Iterator<Item = (&'a LockName, &'a Entry)> + 'a {
        name.ancestors()
            .chain(std::iter::once(name.clone()))
            .filter_map(|a| self.entries.get_key_value(&a))
            .chain(self.descendants(name))
    }

    pub(super) fn descendants<'a>(
        &'a self,
        name: &LockName,
    ) -> impl Iterator<Item = (&'a LockName, &'a Entry)> + 'a {
        let (lo, hi) = name.descendant_range();
        self.entries
            .range::<_, str>((Bound::Included(lo.as_str()), Bound::Excluded(hi.as_str())))
    }

    /// Depth-first search of the waits-for graph from `first` (the new wait's blockers) back
    /// to `start`. Returns the cycle `start → … → start` (without repeating `start`).
    pub(super) fn find_cycle(
        &self,
        start: SessionId,
        first: &BTreeSet<SessionId>,
        now: Instant,
    ) -> Option<Vec<SessionId>> {
        let mut parent: BTreeMap<SessionId, SessionId> = BTreeMap::new();
        let mut stack: Vec<SessionId> = Vec::new();
        for b in first.iter().rev() {
            if parent.insert(*b, start).is_none() {
                stack.push(*b);
            }
        }
        while let Some(x) = stack.pop() {
            for y in self.waits_for(x, now) {
                if y == start {
                    let mut cycle = vec![x];
                    let mut cur = x;
                    while let Some(p) = parent.get(&cur).copied() {
                        if p == start {
                            break;
                        }
                        cycle.push(p);
                        cur = p;
                    }
                    cycle.push(start);
                    cycle.reverse();
                    return Some(cycle);
                }
                if y != start && !parent.contains_key(&y) {
                    parent.insert(y, x);
                    stack.push(y);
                }
            }
        }
        None
    }

    /// Out-edges of `session` in the waits-for graph: the union of its waits' blockers.
    fn waits_for(&self, session: SessionId, now: Instant) -> BTreeSet<SessionId> {
        let Some(s) = self.sessions.get(&session) else {
            return BTreeSet::new();
        };
        let mut out = BTreeSet::new();
        for t in s.waiting.keys() {
            if let Some(w) = self.waiters.get(t).filter(|w| !w.expired(now)) {
                out.extend(self.blockers(&w.name, w.mode, session, Some(*t), now));
            }
        }
        out
    }
}
