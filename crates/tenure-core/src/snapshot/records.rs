//! The invariants a cut's chunk records must hold, checked the same way by `tenure
//! snapshot verify` and by the simulator: one manager and one layout per (store, epoch),
//! the same tables wherever the same changes were confirmed (SafeTalk applies the same
//! changes in the same order everywhere), no two sessions holding conflicting locks in
//! one record, and no fencing token granted to two sessions.
//!
//! The conflict rule is stated here on its own rather than borrowed from the lock table
//! it checks: two sessions' locks conflict when one name covers the other (equal, or an
//! ancestor at a `/` boundary) and they are not both shared (seed 004 §9: the intention
//! modes a lock places on its ancestors are compatible only shared-under-shared). Each
//! holder is compared with the holders of its own name and of its ancestors only, so the
//! cost grows with the number of holders times the names' depth, not its square.

use crate::ids::{ChunkId, DeviceId, Epoch, SessionId, StoreId, Version};
use crate::io::persist::ChunkPersist;
use crate::layout::Metadata;
use crate::lockctl::{FencingToken, HolderInfo, LockInfo, LockMode};
use serde::Serialize;
use std::collections::BTreeMap;

/// One invariant a set of chunk records breaks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
pub enum RecordProblem {
    /// Two records of one store and epoch name different managers.
    #[error("{store} in {epoch}: {first} names manager {}, {second} names {}", show(.first_mgr), show(.second_mgr))]
    TwoManagers {
        /// The store.
        store: StoreId,
        /// The epoch.
        epoch: Epoch,
        /// The first record of that epoch.
        first: ChunkId,
        /// Its manager.
        first_mgr: Option<DeviceId>,
        /// A record that disagrees.
        second: ChunkId,
        /// Its manager.
        second_mgr: Option<DeviceId>,
    },
    /// Two records of one store and epoch hold different layouts (a record without a
    /// layout claims none).
    #[error("{store} in {epoch}: {first} and {second} record different layouts")]
    TwoLayouts {
        /// The store.
        store: StoreId,
        /// The epoch.
        epoch: Epoch,
        /// The first record of that epoch.
        first: ChunkId,
        /// A record that disagrees.
        second: ChunkId,
    },
    /// Two records confirmed the same changes but hold different tables.
    #[error(
        "{store}: {first} and {second} confirmed the same changes (in {epoch}, up to {}.{}) but hold different tables",
        .confirmed.epoch.0,
        .confirmed.seq
    )]
    DivergedTables {
        /// The store.
        store: StoreId,
        /// The records' epoch.
        epoch: Epoch,
        /// The last change both confirmed.
        confirmed: Version,
        /// One record.
        first: ChunkId,
        /// The other.
        second: ChunkId,
    },
    /// A record's lock table has two sessions holding conflicting locks.
    #[error("{store}: {chunk} recorded {name} held by {holders}")]
    ConflictingHolders {
        /// The store.
        store: StoreId,
        /// The record.
        chunk: ChunkId,
        /// The lock, or the two locks one of which covers the other.
        name: String,
        /// The two holders.
        holders: String,
    },
    /// One fencing token of a lock held by two sessions (in one record or two).
    #[error(
        "{store}: fencing token {token} of {name} is held by session {} in {first} and by session {} in {second}",
        .first_session.0,
        .second_session.0
    )]
    TokenTwice {
        /// The store.
        store: StoreId,
        /// The lock.
        name: String,
        /// The token.
        token: FencingToken,
        /// The first record holding it.
        first: ChunkId,
        /// Its session.
        first_session: SessionId,
        /// A record holding it for another session.
        second: ChunkId,
        /// That session.
        second_session: SessionId,
    },
}

fn show(m: &Option<DeviceId>) -> String {
    m.map_or_else(|| "none".to_string(), |d| d.to_string())
}

/// What the records checked so far hold, so that each further record is checked against
/// them once ([`RecordChecker::add`]).
#[derive(Debug, Default)]
pub struct RecordChecker<'a> {
    managers: BTreeMap<(StoreId, Epoch), (ChunkId, Option<DeviceId>)>,
    layouts: BTreeMap<(StoreId, Epoch), (ChunkId, &'a Metadata)>,
    tables: BTreeMap<(StoreId, Epoch, Version), &'a ChunkPersist>,
    tokens: BTreeMap<(StoreId, String, FencingToken), (ChunkId, SessionId)>,
    /// Everything found, in the order found.
    pub problems: Vec<RecordProblem>,
}

impl<'a> RecordChecker<'a> {
    /// A checker that has seen no record.
    pub fn new() -> Self {
        Self::default()
    }

    /// Check one more record against itself and the records added before it.
    pub fn add(&mut self, c: &'a ChunkPersist) {
        let (store, epoch) = (c.store, c.epoch);
        let (first, first_mgr) = *(self.managers)
            .entry((store, epoch))
            .or_insert((c.id, c.lease_mgr));
        if first_mgr != c.lease_mgr {
            self.problems.push(RecordProblem::TwoManagers {
                store,
                epoch,
                first,
                first_mgr,
                second: c.id,
                second_mgr: c.lease_mgr,
            });
        }
        if !c.metadata.chunks.is_empty() {
            let (first, md) = *(self.layouts)
                .entry((store, epoch))
                .or_insert((c.id, &c.metadata));
            if md != &c.metadata {
                self.problems.push(RecordProblem::TwoLayouts {
                    store,
                    epoch,
                    first,
                    second: c.id,
                });
            }
        }
        let confirmed = c.data.confirmed;
        match self.tables.get(&(store, epoch, confirmed)) {
            Some(other) if other.data.table != c.data.table => {
                self.problems.push(RecordProblem::DivergedTables {
                    store,
                    epoch,
                    confirmed,
                    first: other.id,
                    second: c.id,
                });
            }
            Some(_) => {}
            None => {
                self.tables.insert((store, epoch, confirmed), c);
            }
        }
        let locks = c.data.table.locks.locks_under("/").unwrap_or_default();
        let by_name = holders_by_name(&locks);
        if let Some((name, holders)) = first_conflict(&by_name) {
            self.problems.push(RecordProblem::ConflictingHolders {
                store,
                chunk: c.id,
                name,
                holders,
            });
        }
        for (name, hs) in &by_name {
            for h in hs.iter() {
                let (first, s) = *(self.tokens)
                    .entry((store, name.to_string(), h.token))
                    .or_insert((c.id, h.session));
                if s != h.session {
                    self.problems.push(RecordProblem::TokenTwice {
                        store,
                        name: name.to_string(),
                        token: h.token,
                        first,
                        first_session: s,
                        second: c.id,
                        second_session: h.session,
                    });
                }
            }
        }
    }
}

/// Check `records` ([`RecordChecker`]): everything found, in the order found.
pub fn check_records<'a>(
    records: impl IntoIterator<Item = &'a ChunkPersist>,
) -> Vec<RecordProblem> {
    let mut c = RecordChecker::new();
    for r in records {
        c.add(r);
    }
    c.problems
}

/// Two sessions' locks on `a` and `b` conflict: one name covers the other, and they are
/// not both shared.
pub fn locks_conflict(a: &str, ma: LockMode, b: &str, mb: LockMode) -> bool {
    let covers = |x: &str, y: &str| {
        x == y || (y.len() > x.len() && y.starts_with(x) && y.as_bytes()[x.len()] == b'/')
    };
    (covers(a, b) || covers(b, a)) && !(ma == LockMode::Shared && mb == LockMode::Shared)
}

/// The proper ancestors of a lock name (`/a` and `/a/b` of `/a/b/c`), nearest last.
fn ancestors(name: &str) -> impl Iterator<Item = &str> {
    (name.char_indices().skip(1))
        .filter(|(_, ch)| *ch == '/')
        .map(move |(i, _)| &name[..i])
}

/// The first two holders in `tables` of different sessions whose locks conflict, if any:
/// the name (or both names, the covering one first) and the two holders.
pub fn conflicting_holders(tables: &crate::data::Tables) -> Option<(String, String)> {
    let locks = tables.locks.locks_under("/").ok()?;
    first_conflict(&holders_by_name(&locks))
}

/// The holders of every held lock, by name.
fn holders_by_name(locks: &[LockInfo]) -> BTreeMap<&str, &[HolderInfo]> {
    (locks.iter())
        .filter(|l| !l.holders.is_empty())
        .map(|l| (l.name.as_str(), l.holders.as_slice()))
        .collect()
}

/// [`conflicting_holders`] over holders grouped by name.
fn first_conflict(by_name: &BTreeMap<&str, &[HolderInfo]>) -> Option<(String, String)> {
    let show =
        |h: &HolderInfo| format!("session {} ({:?}, token {})", h.session.0, h.mode, h.token);
    for (name, hs) in by_name {
        for (i, a) in hs.iter().enumerate() {
            for b in &hs[i + 1..] {
                if a.session != b.session && locks_conflict(name, a.mode, name, b.mode) {
                    return Some((name.to_string(), format!("{} and {}", show(a), show(b))));
                }
            }
            for up in ancestors(name) {
                for b in by_name.get(up).copied().unwrap_or_default() {
                    if a.session != b.session && locks_conflict(up, b.mode, name, a.mode) {
                        return Some((
                            format!("{up} and {name}"),
                            format!("{} and {}", show(b), show(a)),
                        ));
                    }
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    //! Each invariant, planted in a set of records, is reported; consistent records are
    //! not.
    use super::*;
    use crate::data::Tables;
    use crate::lockctl::{Acquire, RequestId, Wait};
    use crate::time::Instant;

    const S: StoreId = StoreId(3);

    fn chunk(d: u64) -> ChunkId {
        ChunkId {
            device: DeviceId(d),
            serial: 1,
        }
    }

    fn record(d: u64, epoch: u64, mgr: Option<u64>, tables: &Tables) -> ChunkPersist {
        ChunkPersist {
            id: chunk(d),
            store: S,
            epoch: Epoch(epoch),
            metadata: Metadata::new([chunk(1), chunk(2), chunk(3)]),
            lease_mgr: mgr.map(DeviceId),
            prepared: None,
            known: None,
            data: crate::data::StoreData {
                table: tables.clone(),
                ..Default::default()
            },
        }
    }

    /// Grant `name` to `session` whatever else is held (the conflict check switched off).
    fn grant(t: &mut Tables, session: u64, name: &str, mode: LockMode) {
        t.locks.plant_skip_conflicts(true);
        let req = Acquire {
            session: SessionId(session),
            request_id: RequestId(1),
            name: name.into(),
            mode,
            wait: Wait::Try,
            lock_delay: None,
        };
        assert!(t.locks.acquire(&req, Instant(0)).is_ok());
        t.locks.plant_skip_conflicts(false);
    }

    fn held() -> Tables {
        let mut t = Tables::default();
        grant(&mut t, 1, "/a", LockMode::Shared);
        grant(&mut t, 2, "/a/b", LockMode::Shared);
        grant(&mut t, 3, "/c/d", LockMode::Exclusive);
        t
    }

    #[test]
    fn consistent_records_have_no_problem() {
        let t = held();
        let rs = [record(1, 4, Some(1), &t), record(2, 4, Some(1), &t)];
        assert_eq!(check_records(&rs), vec![]);
    }

    #[test]
    fn two_managers_in_one_epoch_are_found() {
        let t = Tables::default();
        let rs = [record(1, 4, Some(1), &t), record(2, 4, Some(2), &t)];
        let p = check_records(&rs);
        assert!(
            matches!(
                p[..],
                [RecordProblem::TwoManagers {
                    epoch: Epoch(4),
                    ..
                }]
            ),
            "{p:?}"
        );
        // A record that names no manager disagrees with one that names one.
        let rs = [record(1, 4, Some(1), &t), record(2, 4, None, &t)];
        assert_eq!(check_records(&rs).len(), 1);
        // Different epochs may have different managers.
        let rs = [record(1, 4, Some(1), &t), record(2, 5, Some(2), &t)];
        assert_eq!(check_records(&rs), vec![]);
    }

    #[test]
    fn two_layouts_in_one_epoch_are_found_and_an_empty_one_claims_none() {
        let t = Tables::default();
        let a = record(1, 4, Some(1), &t);
        let mut b = record(2, 4, Some(1), &t);
        b.metadata = Metadata::new([chunk(2)]);
        let p = check_records([&a, &b]);
        assert!(matches!(p[..], [RecordProblem::TwoLayouts { .. }]), "{p:?}");
        b.metadata = Metadata::default();
        assert_eq!(check_records([&a, &b]), vec![]);
    }

    #[test]
    fn diverged_tables_at_the_same_confirmed_change_are_found() {
        let a = record(1, 4, Some(1), &held());
        let b = record(2, 4, Some(1), &Tables::default());
        let p = check_records([&a, &b]);
        assert!(
            matches!(p[..], [RecordProblem::DivergedTables { .. }]),
            "{p:?}"
        );
        // Records that confirmed different changes may differ.
        let mut b = b;
        b.data.confirmed.seq = 1;
        assert_eq!(check_records([&a, &b]), vec![]);
    }

    #[test]
    fn conflicting_holders_on_one_name_are_found() {
        let mut t = Tables::default();
        grant(&mut t, 1, "/x", LockMode::Exclusive);
        grant(&mut t, 2, "/x", LockMode::Shared);
        let p = check_records([&record(1, 4, Some(1), &t)]);
        assert!(
            matches!(&p[..], [RecordProblem::ConflictingHolders { name, .. }] if name == "/x"),
            "{p:?}"
        );
    }

    #[test]
    fn conflicting_holders_on_covering_names_are_found() {
        let mut t = held();
        assert_eq!(conflicting_holders(&t), None);
        grant(&mut t, 4, "/c", LockMode::Shared);
        let (name, holders) = conflicting_holders(&t).expect("found");
        assert_eq!(name, "/c and /c/d");
        assert!(holders.contains("Exclusive"), "{holders}");
        // Not a name that merely starts the same way.
        let mut t = Tables::default();
        grant(&mut t, 1, "/c", LockMode::Exclusive);
        grant(&mut t, 2, "/cd", LockMode::Exclusive);
        assert_eq!(conflicting_holders(&t), None);
    }

    #[test]
    fn a_token_held_by_two_sessions_is_found() {
        let mut a = Tables::default();
        grant(&mut a, 1, "/x", LockMode::Exclusive);
        let mut b = Tables::default();
        grant(&mut b, 2, "/x", LockMode::Exclusive);
        let (ra, mut rb) = (record(1, 4, Some(1), &a), record(2, 4, Some(1), &b));
        // Confirmed at different changes, so the tables may differ; the token may not.
        rb.data.confirmed.seq = 1;
        let p = check_records([&ra, &rb]);
        assert!(
            matches!(&p[..], [RecordProblem::TokenTwice { name, .. }] if name == "/x"),
            "{p:?}"
        );
        assert!(p[0].to_string().contains("is held by"), "{}", p[0]);
    }

    #[test]
    fn locks_conflict_follows_the_cover_rule() {
        use LockMode::{Exclusive as X, Shared as Sh};
        assert!(locks_conflict("/a", X, "/a", Sh));
        assert!(locks_conflict("/a", Sh, "/a/b", X));
        assert!(!locks_conflict("/a", Sh, "/a/b", Sh));
        assert!(!locks_conflict("/a", X, "/ab", X));
        assert!(!locks_conflict("/a/b", X, "/a/c", X));
    }
}
