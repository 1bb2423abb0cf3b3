//! A store's tables as rows, one per key, for storage that persists what changed rather
//! than whole tables (the server's checkpoints; DESIGN "Persistence").
//!
//! [`Tables`] splits into a *head* ([`head`]: every scalar, the SafeTalk lists around
//! it stay in the chunk record) and rows, each under a [`Kind`] and its key's encoding:
//! registers, sessions, the LOCK table's entries, waiters and per-session state, the
//! objects by key, the ephemeral and attention indexes, and the watch history by
//! revision. [`diff`] lists the rows that differ between two copies of the tables —
//! copies share structure ([`imbl`]), so its cost follows what changed, not the
//! tables' size — and [`insert`] puts one row back when a chunk is loaded.

use crate::data::Tables;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The maps a store's tables are made of (the first byte of a row's key).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Kind {
    /// Test registers, by key.
    Register = 0,
    /// Open sessions, by id.
    Session = 1,
    /// LOCK table entries, by lock name.
    LockEntry = 2,
    /// Waiting acquires, by ticket.
    LockWaiter = 3,
    /// Per-session lock state (held names, waits, idempotency records), by session.
    LockSession = 4,
    /// Objects' manifests, by key.
    Object = 5,
    /// Keys with an ephemeral object, by owning session.
    Owned = 6,
    /// Keys the spawn step looks at (a set: the row has no value).
    Attention = 7,
    /// The watch history, by revision.
    History = 8,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 9] = [
        Kind::Register,
        Kind::Session,
        Kind::LockEntry,
        Kind::LockWaiter,
        Kind::LockSession,
        Kind::Object,
        Kind::Owned,
        Kind::Attention,
        Kind::History,
    ];

    /// The kind a row key's first byte names.
    pub fn from_byte(b: u8) -> Option<Kind> {
        Kind::ALL.get(b as usize).copied()
    }
}

/// One row that differs: its key (kind byte, then the encoded key) and its encoded
/// value, none if the row is gone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowChange {
    /// The row's key.
    pub key: Vec<u8>,
    /// The row's value; none: delete the row.
    pub value: Option<Vec<u8>>,
}

/// Encoding or decoding a row failed.
#[derive(Debug, thiserror::Error)]
pub enum RowError {
    /// A key or value does not encode.
    #[error("encoding a row: {0}")]
    Encode(postcard::Error),
    /// A row does not decode.
    #[error("row of kind {kind} does not decode: {source}")]
    Decode {
        /// The kind byte.
        kind: u8,
        /// Why.
        source: postcard::Error,
    },
    /// A row key names no known kind.
    #[error("row key of unknown kind {0}")]
    UnknownKind(u8),
}

fn row_key<K: Serialize>(kind: Kind, k: &K) -> Result<Vec<u8>, RowError> {
    let mut out = vec![kind as u8];
    out.extend(postcard::to_stdvec(k).map_err(RowError::Encode)?);
    Ok(out)
}

fn value<V: Serialize>(v: &V) -> Result<Vec<u8>, RowError> {
    postcard::to_stdvec(v).map_err(RowError::Encode)
}

fn diff_map<K, V>(
    kind: Kind,
    old: &imbl::OrdMap<K, V>,
    new: &imbl::OrdMap<K, V>,
    out: &mut Vec<RowChange>,
) -> Result<(), RowError>
where
    K: Ord + Clone + Serialize,
    V: Clone + PartialEq + Serialize,
{
    use imbl::ordmap::DiffItem;
    for d in old.diff(new) {
        out.push(match d {
            DiffItem::Add(k, v) | DiffItem::Update { new: (k, v), .. } => RowChange {
                key: row_key(kind, k)?,
                value: Some(value(v)?),
            },
            DiffItem::Remove(k, _) => RowChange {
                key: row_key(kind, k)?,
                value: None,
            },
        });
    }
    Ok(())
}

fn diff_set<K>(
    kind: Kind,
    old: &imbl::OrdSet<K>,
    new: &imbl::OrdSet<K>,
    out: &mut Vec<RowChange>,
) -> Result<(), RowError>
where
    K: Ord + Clone + Serialize,
{
    use imbl::ordset::DiffItem;
    for d in old.diff(new) {
        out.push(match d {
            DiffItem::Add(k) => RowChange {
                key: row_key(kind, k)?,
                value: Some(Vec::new()),
            },
            DiffItem::Remove(k) => RowChange {
                key: row_key(kind, k)?,
                value: None,
            },
        });
    }
    Ok(())
}

/// The history's revisions are consecutive (one per change), so two copies line up by
/// revision: rows before the new first revision go, rows past the old last one come,
/// and the overlap is compared entry by entry (bounded by the history's limit, not by
/// the store's size).
fn diff_history(old: &Tables, new: &Tables, out: &mut Vec<RowChange>) -> Result<(), RowError> {
    let (o, n) = (&old.objects.history, &new.objects.history);
    let mut old_by_rev = o.iter().peekable();
    for c in n.iter() {
        // Old rows before this revision are gone.
        while let Some(x) = old_by_rev.next_if(|x| x.revision < c.revision) {
            out.push(RowChange {
                key: row_key(Kind::History, &x.revision)?,
                value: None,
            });
        }
        let same = old_by_rev.next_if(|x| x.revision == c.revision);
        if same.is_none_or(|x| x != c) {
            out.push(RowChange {
                key: row_key(Kind::History, &c.revision)?,
                value: Some(value(c)?),
            });
        }
    }
    for x in old_by_rev {
        out.push(RowChange {
            key: row_key(Kind::History, &x.revision)?,
            value: None,
        });
    }
    Ok(())
}

/// Append to `out` the rows in which `new` differs from `old` (to write `new` over
/// storage that holds `old`'s rows). Where the two share structure it is not visited.
pub fn diff(old: &Tables, new: &Tables, out: &mut Vec<RowChange>) -> Result<(), RowError> {
    diff_map(
        Kind::Register,
        &old.registers.entries,
        &new.registers.entries,
        out,
    )?;
    diff_map(Kind::Session, &old.sessions.open, &new.sessions.open, out)?;
    diff_map(Kind::LockEntry, &old.locks.entries, &new.locks.entries, out)?;
    diff_map(
        Kind::LockWaiter,
        &old.locks.waiters,
        &new.locks.waiters,
        out,
    )?;
    diff_map(
        Kind::LockSession,
        &old.locks.sessions,
        &new.locks.sessions,
        out,
    )?;
    diff_map(Kind::Object, &old.objects.keys, &new.objects.keys, out)?;
    diff_map(Kind::Owned, &old.objects.owned, &new.objects.owned, out)?;
    diff_set(
        Kind::Attention,
        &old.objects.attention,
        &new.objects.attention,
        out,
    )?;
    diff_history(old, new, out)
}

/// Whether `b` is `a` unchanged: every row map equal (at once when it is the same
/// shared map, as when nothing replaced it since; else row by row), and the heads equal.
/// What a chunk asks before persisting its record's head alone. The answer depends on
/// the rows alone, never on which maps happen to be shared: a device rebuilt from a
/// copy of the same state decides the same.
pub fn unchanged(a: &Tables, b: &Tables) -> bool {
    same(&a.registers.entries, &b.registers.entries)
        && same(&a.sessions.open, &b.sessions.open)
        && same(&a.locks.entries, &b.locks.entries)
        && same(&a.locks.waiters, &b.locks.waiters)
        && same(&a.locks.sessions, &b.locks.sessions)
        && same(&a.objects.keys, &b.objects.keys)
        && same(&a.objects.owned, &b.objects.owned)
        && (a.objects.attention.ptr_eq(&b.objects.attention)
            || a.objects.attention == b.objects.attention)
        && (a.objects.history.ptr_eq(&b.objects.history) || a.objects.history == b.objects.history)
        && head(a) == head(b)
}

/// Two persistent maps equal: the same shared map, or equal row by row.
fn same<K: Ord + Clone, V: Clone + PartialEq>(
    a: &imbl::OrdMap<K, V>,
    b: &imbl::OrdMap<K, V>,
) -> bool {
    a.ptr_eq(b) || a == b
}

/// The tables without their rows: what the chunk record keeps beside them.
pub fn head(t: &Tables) -> Tables {
    let mut h = t.clone();
    h.registers.entries = Default::default();
    h.sessions.open = Default::default();
    h.locks.entries = Default::default();
    h.locks.waiters = Default::default();
    h.locks.sessions = Default::default();
    h.locks.rebuild_deadlines();
    h.objects.keys = Default::default();
    h.objects.owned = Default::default();
    h.objects.attention = Default::default();
    h.objects.history = Default::default();
    h
}

fn de<T: DeserializeOwned>(kind: u8, b: &[u8]) -> Result<T, RowError> {
    postcard::from_bytes(b).map_err(|source| RowError::Decode { kind, source })
}

/// Put one row (as [`diff`] wrote it) back into `t`. History rows may come in any
/// order; [`finish`] puts them in revision order.
pub fn insert(t: &mut Tables, key: &[u8], val: &[u8]) -> Result<(), RowError> {
    let (&b, k) = key.split_first().ok_or(RowError::UnknownKind(u8::MAX))?;
    let kind = Kind::from_byte(b).ok_or(RowError::UnknownKind(b))?;
    match kind {
        Kind::Register => {
            t.registers.entries.insert(de(b, k)?, de(b, val)?);
        }
        Kind::Session => {
            t.sessions.open.insert(de(b, k)?, de(b, val)?);
        }
        Kind::LockEntry => {
            t.locks.entries.insert(de(b, k)?, de(b, val)?);
        }
        Kind::LockWaiter => {
            t.locks.waiters.insert(de(b, k)?, de(b, val)?);
        }
        Kind::LockSession => {
            t.locks.sessions.insert(de(b, k)?, de(b, val)?);
        }
        Kind::Object => {
            t.objects.keys.insert(de(b, k)?, de(b, val)?);
        }
        Kind::Owned => {
            t.objects.owned.insert(de(b, k)?, de(b, val)?);
        }
        Kind::Attention => {
            t.objects.attention.insert(de(b, k)?);
        }
        Kind::History => {
            t.objects.history.push_back(de(b, val)?);
        }
    }
    Ok(())
}

/// After the last [`insert`]: the history in revision order.
pub fn finish(t: &mut Tables) {
    t.locks.rebuild_deadlines();
    let h = &t.objects.history;
    if h.iter()
        .zip(h.iter().skip(1))
        .any(|(a, b)| a.revision > b.revision)
    {
        let mut v: Vec<_> = h.iter().cloned().collect();
        v.sort_by_key(|c| c.revision);
        t.objects.history = v.into_iter().collect();
    }
}

/// `base`'s tables with `changes` (as [`diff`] listed them from `base` to some `new`)
/// applied and the scalars of `head` (`new`'s [`head`]): `new` again, built from `base`
/// so that it shares every node the changes do not touch. What a chunk does with a
/// commit's patch (DESIGN "State at scale").
pub fn patch(base: &Tables, head: &Tables, changes: &[RowChange]) -> Result<Tables, RowError> {
    let mut t = head.clone();
    t.registers.entries = base.registers.entries.clone();
    t.sessions.open = base.sessions.open.clone();
    t.locks.entries = base.locks.entries.clone();
    t.locks.waiters = base.locks.waiters.clone();
    t.locks.sessions = base.locks.sessions.clone();
    t.objects.keys = base.objects.keys.clone();
    t.objects.owned = base.objects.owned.clone();
    t.objects.attention = base.objects.attention.clone();
    t.objects.history = base.objects.history.clone();
    let mut history = Vec::new();
    for c in changes {
        let (&b, k) = c.key.split_first().ok_or(RowError::UnknownKind(u8::MAX))?;
        let kind = Kind::from_byte(b).ok_or(RowError::UnknownKind(b))?;
        match (kind, &c.value) {
            (Kind::History, _) => history.push(c),
            (_, Some(v)) => insert(&mut t, &c.key, v)?,
            (Kind::Register, None) => {
                t.registers.entries.remove(&de::<u64>(b, k)?);
            }
            (Kind::Session, None) => {
                t.sessions.open.remove(&de::<crate::ids::SessionId>(b, k)?);
            }
            (Kind::LockEntry, None) => {
                t.locks
                    .entries
                    .remove(&de::<crate::lockctl::LockName>(b, k)?);
            }
            (Kind::LockWaiter, None) => {
                t.locks.waiters.remove(&de::<crate::lockctl::Ticket>(b, k)?);
            }
            (Kind::LockSession, None) => {
                t.locks.sessions.remove(&de::<crate::ids::SessionId>(b, k)?);
            }
            (Kind::Object, None) => {
                t.objects.keys.remove(&*de::<String>(b, k)?);
            }
            (Kind::Owned, None) => {
                t.objects.owned.remove(&de::<crate::ids::SessionId>(b, k)?);
            }
            (Kind::Attention, None) => {
                t.objects.attention.remove(&de::<String>(b, k)?);
            }
        }
    }
    if !history.is_empty() {
        // The history is bounded by its limit: rebuilt by revision.
        let mut by_rev: std::collections::BTreeMap<u64, crate::objects::table::Change> =
            (t.objects.history.iter())
                .map(|c| (c.revision, c.clone()))
                .collect();
        for c in history {
            let rev: u64 = de(Kind::History as u8, &c.key[1..])?;
            match &c.value {
                Some(v) => by_rev.insert(rev, de(Kind::History as u8, v)?),
                None => by_rev.remove(&rev),
            };
        }
        t.objects.history = by_rev.into_values().collect();
    }
    t.locks.rebuild_deadlines();
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::Epoch;
    use crate::ids::SessionId;
    use crate::ids::Version;
    use crate::lockctl::LockName;
    use crate::objects::table::{Change, ChangeKind};
    use crate::session::SessionRecord;
    use std::time::Duration;

    fn filled(n: u64) -> Tables {
        let mut t = Tables::default();
        for i in 0..n {
            let v = Version {
                epoch: Epoch(1),
                seq: i,
            };
            t.registers.entries.insert(i, (v, i * 7));
            t.sessions.open.insert(
                SessionId(i),
                SessionRecord {
                    ttl: Duration::from_secs(10),
                    renewed: Epoch(1),
                    children: [(crate::ids::StoreId(i as u32 % 3), SessionId(i + 100))]
                        .into_iter()
                        .filter(|_| i % 2 == 0)
                        .collect(),
                },
            );
            let name = LockName::parse(&format!("/l/{i}")).unwrap();
            t.locks.entries.insert(name, Default::default());
            t.objects
                .keys
                .insert(format!("/k/{i}").into(), Default::default());
            t.objects.attention.insert(format!("/k/{i}"));
            t.objects
                .owned
                .insert(SessionId(i), [format!("/k/{i}")].into());
            t.objects.revision = i + 1;
            t.objects.history.push_back(Change {
                revision: i + 1,
                key: format!("/k/{i}"),
                kind: ChangeKind::Delete,
            });
        }
        t
    }

    fn apply(t: &mut Tables, rows: &[RowChange]) {
        // A test model of storage: every row, applied over the head.
        let mut all: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = Default::default();
        diff_into(&Tables::default(), t, &mut all);
        for r in rows {
            match &r.value {
                Some(v) => all.insert(r.key.clone(), v.clone()),
                None => all.remove(&r.key),
            };
        }
        let mut back = head(t);
        for (k, v) in &all {
            insert(&mut back, k, v).unwrap();
        }
        finish(&mut back);
        *t = back;
    }

    fn diff_into(
        old: &Tables,
        new: &Tables,
        all: &mut std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
    ) {
        let mut rows = Vec::new();
        diff(old, new, &mut rows).unwrap();
        for r in rows {
            if let Some(v) = r.value {
                all.insert(r.key, v);
            }
        }
    }

    /// Every row written from empty, put back over the head, gives the tables back.
    #[test]
    fn rows_of_a_store_round_trip() {
        let t = filled(300);
        let mut rows = Vec::new();
        diff(&Tables::default(), &t, &mut rows).unwrap();
        let mut back = head(&t);
        for r in &rows {
            insert(&mut back, &r.key, r.value.as_ref().unwrap()).unwrap();
        }
        finish(&mut back);
        assert_eq!(back, t);
    }

    /// A copy changed in a few keys differs in those rows only, however large the
    /// tables, and the rows bring a stored copy up to date.
    #[test]
    fn diff_lists_only_the_changed_rows() {
        let old = filled(20_000);
        let mut new = old.clone();
        new.registers.entries.insert(5, (Version::default(), 1));
        new.sessions.open.remove(&SessionId(7));
        new.objects.keys.insert("/new".into(), Default::default());
        new.objects.history.pop_front();
        new.objects.history.push_back(Change {
            revision: 20_001,
            key: "/new".into(),
            kind: ChangeKind::Delete,
        });
        let mut rows = Vec::new();
        diff(&old, &new, &mut rows).unwrap();
        assert_eq!(rows.len(), 5, "{rows:?}");
        let mut stored = old.clone();
        apply(&mut stored, &rows);
        assert_eq!(stored, new);
    }

    /// A history rewritten in its overlap (a reconciled copy) rewrites those rows.
    #[test]
    fn history_rows_follow_a_rewritten_overlap() {
        let old = filled(10);
        let mut new = old.clone();
        let c = new.objects.history.get_mut(3).unwrap();
        c.key = "/other".into();
        let mut rows = Vec::new();
        diff(&old, &new, &mut rows).unwrap();
        assert_eq!(rows.len(), 1);
        let mut stored = old.clone();
        apply(&mut stored, &rows);
        assert_eq!(stored, new);
    }

    /// DESIGN "State at scale": a commit's patch (the rows from the base table to the
    /// merged one, with the merged head) rebuilds the merged table from the base, deletes,
    /// every kind of row and a rewritten history included.
    #[test]
    fn patch_of_the_diff_rebuilds_the_new_tables() {
        let old = filled(2_000);
        let mut new = old.clone();
        new.registers.entries.insert(5, (Version::default(), 1));
        new.registers.entries.remove(&6);
        new.sessions.open.remove(&SessionId(7));
        new.locks.entries.remove(&LockName::parse("/l/8").unwrap());
        new.objects.keys.remove("/k/9");
        new.objects.owned.remove(&SessionId(9));
        new.objects.attention.remove("/k/9");
        new.objects.keys.insert("/new".into(), Default::default());
        new.objects.history.pop_front();
        new.objects.history.get_mut(10).unwrap().key = "/other".into();
        new.objects.revision = 2_001;
        new.objects.history.push_back(Change {
            revision: 2_001,
            key: "/new".into(),
            kind: ChangeKind::Delete,
        });
        let mut rows = Vec::new();
        diff(&old, &new, &mut rows).unwrap();
        assert!(rows.len() < 20, "{rows:?}");
        let back = patch(&old, &head(&new), &rows).unwrap();
        assert_eq!(back, new);
        // Nothing differs: the base's rows under the new head.
        assert_eq!(patch(&new, &head(&new), &[]).unwrap(), new);
        // A row lost on the way leaves another table.
        rows.pop();
        assert_ne!(patch(&old, &head(&new), &rows).unwrap(), new);
    }

    #[test]
    fn a_patch_row_of_no_kind_is_a_typed_error() {
        let t = filled(3);
        let bad = [RowChange {
            key: vec![200, 1],
            value: None,
        }];
        assert!(matches!(
            patch(&t, &head(&t), &bad),
            Err(RowError::UnknownKind(200))
        ));
        let empty = [RowChange {
            key: vec![],
            value: None,
        }];
        assert!(patch(&t, &head(&t), &empty).is_err());
    }

    #[test]
    fn unknown_row_kinds_are_typed_errors() {
        let mut t = Tables::default();
        assert!(matches!(
            insert(&mut t, &[200, 1], &[]),
            Err(RowError::UnknownKind(200))
        ));
        assert!(matches!(
            insert(&mut t, &[Kind::Session as u8], &[0xff]),
            Err(RowError::Decode { .. })
        ));
    }
}
