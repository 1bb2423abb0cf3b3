//! The object checkers (DESIGN §9.6 and §5), each fed plain facts so that each can be
//! shown to fire on a hand-built bad history (the `tests` module) and, in
//! `tests/integration/objects.rs`, on the planted bug it is meant to catch:
//!
//! 1. **Reads are linearizable**: a get (or head) returns a revision no older than the
//!    newest change of its key acknowledged before it was sent, with the content that
//!    revision's put uploaded (checksums and length); `NoSuchObject` after an
//!    acknowledged put needs a later delete in the store's history. A compare-and-set
//!    that won must have followed exactly the revision it named.
//! 2. **No active object loses a block**: after the run settles, every block of every
//!    active manifest is on a quorum of its store's chunks and on every chunk the
//!    manager counts complete, with the manifest's checksum (and, liveness, repair has
//!    made every chunk of the layout complete).
//! 3. **No block of an active manifest is ever collected**: every block deletion a
//!    collector sends, and every block a chunk deletes, is checked against the manifests
//!    active at that moment in the store's working manager.
//! 4. **Every pending_delete is collected**: after the run settles no manifest is
//!    pending_delete, deleted (unpruned) or writing.
//! 5. **A fenced put with a stale token never lands**: a fenced put acknowledged as
//!    written must not carry a token whose release, or a conflicting later grant, was
//!    acknowledged before the put was sent.
//! 6. **Watches**: a watcher sees every change of its prefix in revision order, with no
//!    gap (but an explicit `Compacted` re-read) and no duplicate, across manager moves.
//!
//! Every source that names a revision — acknowledgements, reads, watch events, the final
//! history — must agree on what that revision was, and every acknowledged change must be
//! in the store's final history (no acknowledged object change lost). The seed's merge
//! function is also checked, on the real manifests the chunks hold at the end:
//! commutative, associative and idempotent.
//!
//! This file holds the checker's state and the checks made while a run goes; the
//! end-of-run checks are in `history`, the violations in `violation`.

mod history;
#[cfg(test)]
mod tests;
mod violation;

pub use violation::ObjectViolation;

use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use tenure_core::StoreId;
use tenure_core::lockctl::{FencingToken, LockMode};
use tenure_core::objects::{ChangeKind, ManifestState, ObjectTable, Uuid};

/// How often the object checkers compared something.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ObjectCheckCounts {
    /// Reads checked against acknowledged changes (checker 1).
    pub read_checks: u64,
    /// Compare-and-set wins checked against the history (checker 1).
    pub cas_checks: u64,
    /// Revisions compared between two sources.
    pub revision_checks: u64,
    /// Acknowledged changes found in the final history.
    pub ack_checks: u64,
    /// Blocks of active manifests found on chunks at the end (checker 2).
    pub block_checks: u64,
    /// Deleted blocks checked against active manifests (checker 3).
    pub delete_checks: u64,
    /// Stores checked for uncollected manifests at the end (checker 4).
    pub collect_checks: u64,
    /// Fenced puts that landed, checked against their token (checker 5).
    pub fence_checks: u64,
    /// Watch events checked (checker 6).
    pub watch_checks: u64,
    /// Manifest merges checked on real manifests.
    pub merge_checks: u64,
}

impl ObjectCheckCounts {
    /// Add another run's counts.
    pub fn add(&mut self, o: &ObjectCheckCounts) {
        self.read_checks += o.read_checks;
        self.cas_checks += o.cas_checks;
        self.revision_checks += o.revision_checks;
        self.ack_checks += o.ack_checks;
        self.block_checks += o.block_checks;
        self.delete_checks += o.delete_checks;
        self.collect_checks += o.collect_checks;
        self.fence_checks += o.fence_checks;
        self.watch_checks += o.watch_checks;
        self.merge_checks += o.merge_checks;
    }
}

/// What a revision of a store was, as one source tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Claim {
    key: String,
    /// The upload that became active (none: a delete).
    put: Option<Uuid>,
    source: &'static str,
}

impl Claim {
    fn describe(&self) -> String {
        match self.put {
            Some(u) => format!("{} says put {} of {u}", self.source, self.key),
            None => format!("{} says delete {}", self.source, self.key),
        }
    }
}

/// A fencing token the lock clients were granted.
#[derive(Clone, Copy, Debug)]
struct TokenRec {
    mode: LockMode,
    /// From this time on (µs) the token is known no longer held.
    superseded_us: Option<u64>,
}

/// A `NoSuchObject` read after an acknowledged put, to check against the history.
#[derive(Clone, Debug)]
struct MissingRead {
    store: StoreId,
    key: String,
    after: u64,
    sent_us: u64,
}

/// A compare-and-set that won, to check against the history.
#[derive(Clone, Debug)]
struct CasWin {
    store: StoreId,
    key: String,
    expected: Option<u64>,
    revision: u64,
}

/// An acknowledged change of a key: (ack time µs, revision, a put).
type Ack = (u64, u64, bool);

/// The object checkers' memory of a run.
#[derive(Clone, Debug, Default)]
pub struct ObjectChecker {
    claims: BTreeMap<StoreId, BTreeMap<u64, Claim>>,
    /// Per (store, key): acknowledged changes as (ack time µs, revision, a put).
    acked: BTreeMap<(StoreId, String), Vec<Ack>>,
    /// Expected content checksum and length per upload that became active.
    contents: BTreeMap<Uuid, (u32, u64)>,
    missing_reads: Vec<MissingRead>,
    cas_wins: Vec<CasWin>,
    tokens: BTreeMap<(StoreId, String), BTreeMap<FencingToken, TokenRec>>,
    /// How often each checker compared something.
    pub counts: ObjectCheckCounts,
    /// Violations found so far.
    pub violations: Vec<ObjectViolation>,
}

impl ObjectChecker {
    fn claim(&mut self, store: StoreId, revision: u64, c: Claim) {
        let known = self.claims.entry(store).or_default();
        match known.get(&revision) {
            None => {
                known.insert(revision, c);
            }
            Some(k) => {
                self.counts.revision_checks += 1;
                if (&k.key, k.put) != (&c.key, c.put) {
                    let v = ObjectViolation::RevisionConflict {
                        store,
                        revision,
                        first: k.describe(),
                        second: c.describe(),
                    };
                    self.violations.push(v);
                }
            }
        }
    }

    /// The newest change of `key` acknowledged before `sent_us`: its revision, and
    /// whether it was a put.
    fn floor(&self, store: StoreId, key: &str, sent_us: u64) -> Option<(u64, bool)> {
        (self.acked.get(&(store, key.to_string()))?.iter())
            .filter(|(t, _, _)| *t < sent_us)
            .map(|(_, r, p)| (*r, *p))
            .max()
    }

    /// A put (plain, CAS, fenced, ephemeral or a multipart completion) was acknowledged:
    /// `uuid` became active at `revision` with content of this checksum and length.
    #[allow(clippy::too_many_arguments)]
    pub fn put_acked(
        &mut self,
        store: StoreId,
        key: &str,
        revision: u64,
        uuid: Uuid,
        content: (u32, u64),
        now_us: u64,
    ) {
        let c = Claim {
            key: key.to_string(),
            put: Some(uuid),
            source: "a put's acknowledgement",
        };
        self.claim(store, revision, c);
        self.contents.insert(uuid, content);
        (self.acked.entry((store, key.to_string())).or_default()).push((now_us, revision, true));
    }

    /// A compare-and-set put won: it required `expected` (none: the key absent).
    pub fn cas_won(&mut self, store: StoreId, key: &str, expected: Option<u64>, revision: u64) {
        self.cas_wins.push(CasWin {
            store,
            key: key.to_string(),
            expected,
            revision,
        });
    }

    /// A delete was acknowledged at `revision`.
    pub fn delete_acked(&mut self, store: StoreId, key: &str, revision: u64, now_us: u64) {
        let c = Claim {
            key: key.to_string(),
            put: None,
            source: "a delete's acknowledgement",
        };
        self.claim(store, revision, c);
        (self.acked.entry((store, key.to_string())).or_default()).push((now_us, revision, false));
    }

    /// Checker 1: a read sent at `sent_us` found `found`: the object's (revision, upload,
    /// checksum, size) and the content's (checksum, length) — `None` for the content
    /// of a head — or nothing (`NoSuchObject`).
    pub fn read(
        &mut self,
        store: StoreId,
        key: &str,
        sent_us: u64,
        found: Option<(u64, Uuid, u32, u64)>,
        content: Option<(u32, u64)>,
    ) {
        self.counts.read_checks += 1;
        let floor = self.floor(store, key, sent_us);
        match found {
            Some((revision, uuid, checksum, size)) => {
                if let Some((f, _)) = floor
                    && revision < f
                {
                    self.violations.push(ObjectViolation::ReadStale {
                        store,
                        key: key.to_string(),
                        returned: Some(revision),
                        acked: f,
                        sent_us,
                    });
                }
                let why = match (content, self.contents.get(&uuid)) {
                    (Some(c), _) if c != (checksum, size) => Some(format!(
                        "content (crc {:08x}, {} bytes) differs from its description (crc {checksum:08x}, {size} bytes)",
                        c.0, c.1
                    )),
                    (_, Some(e)) if *e != (checksum, size) => Some(format!(
                        "described as (crc {checksum:08x}, {size} bytes), uploaded as (crc {:08x}, {} bytes)",
                        e.0, e.1
                    )),
                    _ => None,
                };
                if let Some(why) = why {
                    self.violations.push(ObjectViolation::ReadCorrupt {
                        store,
                        key: key.to_string(),
                        uuid,
                        why,
                    });
                }
                let c = Claim {
                    key: key.to_string(),
                    put: Some(uuid),
                    source: "a read",
                };
                self.claim(store, revision, c);
            }
            None => {
                if let Some((after, true)) = floor {
                    self.missing_reads.push(MissingRead {
                        store,
                        key: key.to_string(),
                        after,
                        sent_us,
                    });
                }
            }
        }
    }

    /// Checker 5: the lock clients were granted `token` on `lock`. Earlier tokens of the
    /// lock that conflict with it are no longer held from now on.
    pub fn granted(
        &mut self,
        store: StoreId,
        lock: &str,
        token: FencingToken,
        mode: LockMode,
        now_us: u64,
    ) {
        let toks = self.tokens.entry((store, lock.to_string())).or_default();
        for (t, rec) in toks.range_mut(..token) {
            let _ = t;
            if mode == LockMode::Exclusive || rec.mode == LockMode::Exclusive {
                rec.superseded_us = Some(rec.superseded_us.map_or(now_us, |s| s.min(now_us)));
            }
        }
        toks.entry(token).or_insert(TokenRec {
            mode,
            superseded_us: None,
        });
    }

    /// Checker 5: the release of `token` was acknowledged.
    pub fn released(&mut self, store: StoreId, lock: &str, token: FencingToken, now_us: u64) {
        if let Some(rec) =
            (self.tokens.get_mut(&(store, lock.to_string()))).and_then(|t| t.get_mut(&token))
        {
            rec.superseded_us = Some(rec.superseded_us.map_or(now_us, |s| s.min(now_us)));
        }
    }

    /// Tokens known for a lock, oldest first, with whether each is known superseded.
    pub fn tokens(&self, store: StoreId, lock: &str) -> Vec<(FencingToken, bool)> {
        (self.tokens.get(&(store, lock.to_string())).into_iter())
            .flat_map(|t| t.iter().map(|(k, r)| (*k, r.superseded_us.is_some())))
            .collect()
    }

    /// Checker 5: a put fenced by `token` on `lock`, sent at `sent_us`, landed.
    pub fn fenced_landed(
        &mut self,
        store: StoreId,
        key: &str,
        lock: &str,
        token: FencingToken,
        sent_us: u64,
    ) {
        self.counts.fence_checks += 1;
        let rec = (self.tokens.get(&(store, lock.to_string()))).and_then(|t| t.get(&token));
        if let Some(s) = rec.and_then(|r| r.superseded_us)
            && s < sent_us
        {
            self.violations.push(ObjectViolation::FencedStale {
                store,
                key: key.to_string(),
                lock: lock.to_string(),
                token,
                superseded_us: s,
                sent_us,
            });
        }
    }

    /// Checker 3: `by` deleted blocks of `uploads`; `table` is the store's working
    /// manager's view at that moment.
    pub fn blocks_deleted(
        &mut self,
        store: StoreId,
        uploads: &BTreeSet<Uuid>,
        blocks: &BTreeSet<tenure_core::objects::BlockId>,
        table: &ObjectTable,
        by: &str,
        now_us: u64,
    ) {
        for (key, dict) in &table.keys {
            for u in uploads {
                let Some(m) = dict.get(u) else {
                    continue;
                };
                self.counts.delete_checks += 1;
                if m.state == ManifestState::Active
                    && m.blocks.iter().any(|(id, _)| blocks.contains(id))
                {
                    self.violations.push(ObjectViolation::ActiveBlockCollected {
                        store,
                        key: key.to_string(),
                        uuid: *u,
                        by: by.to_string(),
                        at_us: now_us,
                    });
                }
            }
        }
    }

    /// Checker 6: `changes` reached watcher `w` of `prefix` (`whole`: the whole store,
    /// so revisions must follow each other), whose last revision was `*last`.
    pub fn watch_events(
        &mut self,
        store: StoreId,
        w: usize,
        prefix: &str,
        whole: bool,
        last: &mut u64,
        changes: &[tenure_core::objects::Change],
    ) {
        for c in changes {
            self.counts.watch_checks += 1;
            let why = if c.revision <= *last {
                Some(format!(
                    "revision {} after {} (duplicate or out of order)",
                    c.revision, *last
                ))
            } else if whole && c.revision != *last + 1 {
                Some(format!("revision {} after {} (a gap)", c.revision, *last))
            } else if !tenure_core::objects::under(&c.key, prefix) {
                Some(format!("{} is not under {prefix}", c.key))
            } else {
                None
            };
            if let Some(why) = why {
                self.violations.push(ObjectViolation::WatchBroken {
                    store,
                    watcher: w,
                    why,
                });
            }
            let put = match &c.kind {
                ChangeKind::Put { uuid, .. } => Some(*uuid),
                ChangeKind::Delete => None,
            };
            let claim = Claim {
                key: c.key.clone(),
                put,
                source: "a watch event",
            };
            self.claim(store, c.revision, claim);
            *last = (*last).max(c.revision);
        }
    }

    /// Checker 6, values: a value a watch event carries is the content its change
    /// describes (its length and CRC-32).
    pub fn watch_values(
        &mut self,
        store: StoreId,
        w: usize,
        changes: &[tenure_core::objects::Change],
        values: &[Option<tenure_core::objects::Bytes>],
    ) {
        for (c, v) in changes.iter().zip(values) {
            let (Some(v), ChangeKind::Put { size, checksum, .. }) = (v, &c.kind) else {
                continue;
            };
            self.counts.watch_checks += 1;
            let crc = tenure_core::objects::BlockInfo::of(v).checksum;
            if v.len() as u64 != *size || crc != *checksum {
                self.violations.push(ObjectViolation::WatchBroken {
                    store,
                    watcher: w,
                    why: format!(
                        "the value of revision {} ({} bytes, crc {:08x}) is not the content \
                         its change describes ({size} bytes, crc {checksum:08x})",
                        c.revision,
                        v.len(),
                        crc
                    ),
                });
            }
        }
    }

    /// Checker 6, at the end: a watcher of `prefix` that saw `seen` must have seen every
    /// change of the final history under its prefix after `start` up to `last`, but
    /// those in `skipped` (explicit re-reads).
    #[allow(clippy::too_many_arguments)]
    pub fn watch_complete(
        &mut self,
        store: StoreId,
        w: usize,
        prefix: &str,
        start: u64,
        last: u64,
        seen: &BTreeSet<u64>,
        skipped: &[(u64, u64)],
        table: &ObjectTable,
    ) {
        for c in &table.history {
            let skip = skipped
                .iter()
                .any(|(a, b)| c.revision > *a && c.revision <= *b);
            if c.revision <= start
                || c.revision > last
                || skip
                || !tenure_core::objects::under(&c.key, prefix)
            {
                continue;
            }
            self.counts.watch_checks += 1;
            if !seen.contains(&c.revision) {
                self.violations.push(ObjectViolation::WatchBroken {
                    store,
                    watcher: w,
                    why: format!("never saw revision {} ({})", c.revision, c.key),
                });
                return;
            }
        }
    }
}
