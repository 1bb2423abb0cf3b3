//! The object checkers (DESIGN §9.6 and §5), each fed plain facts so that each can be
//! shown to fire on a hand-built bad history (tests at the bottom) and, in
//! `tests/objects.rs`, on the planted bug it is meant to catch:
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

use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use tenure_core::StoreId;
use tenure_core::lockctl::{FencingToken, LockMode};
use tenure_core::objects::{ChangeKind, Manifest, ManifestState, ObjectTable, Uuid, merge};

/// A broken object invariant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum ObjectViolation {
    /// Checker 1: a read returned an older revision than a change acknowledged before
    /// it was sent (`returned: None`: `NoSuchObject` with no later delete).
    ReadStale {
        /// Store.
        store: StoreId,
        /// Key.
        key: String,
        /// The revision read (none: no object).
        returned: Option<u64>,
        /// The newest change acknowledged before the read was sent.
        acked: u64,
        /// When the read was sent (µs).
        sent_us: u64,
    },
    /// Checker 1: a read's content does not match its description or its upload.
    ReadCorrupt {
        /// Store.
        store: StoreId,
        /// Key.
        key: String,
        /// The upload.
        uuid: Uuid,
        /// What was wrong.
        why: String,
    },
    /// Checker 1: a compare-and-set won although the key had changed since the revision
    /// it named.
    CasBroken {
        /// Store.
        store: StoreId,
        /// Key.
        key: String,
        /// The revision the put required (none: the key absent).
        expected: Option<u64>,
        /// The revision it was written at.
        revision: u64,
        /// The key's previous change in the history.
        previous: String,
    },
    /// Two sources disagree on what a revision of a store was.
    RevisionConflict {
        /// Store.
        store: StoreId,
        /// Revision.
        revision: u64,
        /// What the first source said, and which.
        first: String,
        /// What the other said.
        second: String,
    },
    /// An acknowledged change is missing from the store's final history.
    AckLost {
        /// Store.
        store: StoreId,
        /// Revision acknowledged.
        revision: u64,
        /// What was acknowledged.
        change: String,
        /// The final history's revision.
        final_revision: u64,
    },
    /// Checker 2: a block of an active manifest is on too few chunks, or missing from a
    /// chunk the manager counts complete.
    BlockLost {
        /// Store.
        store: StoreId,
        /// Key.
        key: String,
        /// The upload.
        uuid: Uuid,
        /// Which block, and where it is missing.
        why: String,
    },
    /// Checker 3: a block of an active manifest was deleted.
    ActiveBlockCollected {
        /// Store.
        store: StoreId,
        /// Key.
        key: String,
        /// The upload.
        uuid: Uuid,
        /// Who deleted it.
        by: String,
        /// When (µs).
        at_us: u64,
    },
    /// Checker 4 (liveness): a manifest was not collected, pruned or abandoned after
    /// faults stopped.
    NotCollected {
        /// Store.
        store: StoreId,
        /// Key.
        key: String,
        /// The upload.
        uuid: Uuid,
        /// Its state.
        state: String,
    },
    /// Checker 2 (liveness): a chunk of a layout still lacks blocks after faults stopped.
    RepairIncomplete {
        /// Store.
        store: StoreId,
        /// The chunk and what it lacks.
        why: String,
    },
    /// Checker 5: a fenced put with a superseded token landed.
    FencedStale {
        /// Store.
        store: StoreId,
        /// Key.
        key: String,
        /// The lock.
        lock: String,
        /// The token presented.
        token: FencingToken,
        /// When the token was known no longer held (µs).
        superseded_us: u64,
        /// When the put was sent (µs).
        sent_us: u64,
    },
    /// Checker 6: a watcher saw a gap, a duplicate, a change out of order or outside
    /// its prefix.
    WatchBroken {
        /// Store.
        store: StoreId,
        /// The watcher.
        watcher: usize,
        /// What happened.
        why: String,
    },
    /// Checker 6 (liveness): a watcher had not caught up when the run settled.
    WatchBehind {
        /// Store.
        store: StoreId,
        /// The watcher.
        watcher: usize,
        /// Its last revision.
        last: u64,
        /// The store's.
        current: u64,
    },
    /// The manifest merge broke a law on real manifests.
    MergeLaw {
        /// Store.
        store: StoreId,
        /// Key.
        key: String,
        /// The upload.
        uuid: Uuid,
        /// The law.
        law: &'static str,
    },
    /// An oversized put was not refused with `TooLarge`.
    TooLargeAccepted {
        /// Store.
        store: StoreId,
        /// The answer.
        answer: String,
    },
    /// Liveness: an object client got no answer after faults stopped.
    ClientStuck {
        /// The client.
        client: usize,
        /// What it was waiting for.
        why: String,
    },
}

impl ObjectViolation {
    /// Whether a violation is of liveness (else of safety).
    pub fn is_liveness(&self) -> bool {
        matches!(
            self,
            ObjectViolation::NotCollected { .. }
                | ObjectViolation::RepairIncomplete { .. }
                | ObjectViolation::WatchBehind { .. }
                | ObjectViolation::ClientStuck { .. }
        )
    }
}

impl std::fmt::Display for ObjectViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use ObjectViolation as V;
        match self {
            V::ReadStale {
                store,
                key,
                returned,
                acked,
                sent_us,
            } => write!(
                f,
                "objects {store} {key}: a read sent at {sent_us}us returned revision {returned:?}, older than revision {acked} acknowledged before"
            ),
            V::ReadCorrupt {
                store,
                key,
                uuid,
                why,
            } => write!(f, "objects {store} {key}: read of upload {uuid}: {why}"),
            V::CasBroken {
                store,
                key,
                expected,
                revision,
                previous,
            } => write!(
                f,
                "objects {store} {key}: compare-and-set on {expected:?} won at revision {revision}, but the key's previous change was {previous}"
            ),
            V::RevisionConflict {
                store,
                revision,
                first,
                second,
            } => write!(
                f,
                "objects {store} revision {revision}: {first} but {second}"
            ),
            V::AckLost {
                store,
                revision,
                change,
                final_revision,
            } => write!(
                f,
                "objects {store}: acknowledged {change} at revision {revision} is not in the final history (at revision {final_revision})"
            ),
            V::BlockLost {
                store,
                key,
                uuid,
                why,
            } => write!(
                f,
                "objects {store} {key}: active upload {uuid} lost a block: {why}"
            ),
            V::ActiveBlockCollected {
                store,
                key,
                uuid,
                by,
                at_us,
            } => write!(
                f,
                "objects {store} {key}: a block of active upload {uuid} deleted by {by} at {at_us}us"
            ),
            V::NotCollected {
                store,
                key,
                uuid,
                state,
            } => write!(
                f,
                "objects {store} {key}: upload {uuid} still {state} after faults stopped"
            ),
            V::RepairIncomplete { store, why } => {
                write!(f, "objects {store}: repair unfinished: {why}")
            }
            V::FencedStale {
                store,
                key,
                lock,
                token,
                superseded_us,
                sent_us,
            } => write!(
                f,
                "objects {store} {key}: a put fenced by {lock} {token:?} sent at {sent_us}us landed, but the token was superseded at {superseded_us}us"
            ),
            V::WatchBroken {
                store,
                watcher,
                why,
            } => write!(f, "objects {store}: watcher {watcher}: {why}"),
            V::WatchBehind {
                store,
                watcher,
                last,
                current,
            } => write!(
                f,
                "objects {store}: watcher {watcher} stayed at revision {last}, the store is at {current}"
            ),
            V::MergeLaw {
                store,
                key,
                uuid,
                law,
            } => write!(
                f,
                "objects {store} {key}: manifest merge of upload {uuid} is not {law}"
            ),
            V::TooLargeAccepted { store, answer } => {
                write!(f, "objects {store}: an oversized put was answered {answer}")
            }
            V::ClientStuck { client, why } => write!(
                f,
                "object client {client} got no answer after faults stopped: {why}"
            ),
        }
    }
}

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
                        key: key.clone(),
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

    /// At the end: the store's final (managed, confirmed) table. Every source must
    /// agree with its history; every acknowledged change must be in it; every missing
    /// read and CAS win must be explained by it.
    pub fn final_history(&mut self, store: StoreId, table: &ObjectTable) {
        for c in &table.history {
            let put = match &c.kind {
                ChangeKind::Put { uuid, .. } => Some(*uuid),
                ChangeKind::Delete => None,
            };
            let claim = Claim {
                key: c.key.clone(),
                put,
                source: "the final history",
            };
            self.claim(store, c.revision, claim);
        }
        let acked: Vec<(u64, Claim)> = (self.claims.get(&store).into_iter())
            .flat_map(|m| m.iter())
            .filter(|(_, c)| c.source.ends_with("acknowledgement"))
            .map(|(r, c)| (*r, c.clone()))
            .collect();
        for (revision, c) in acked {
            self.counts.ack_checks += 1;
            let present =
                revision <= table.compacted || table.history.iter().any(|h| h.revision == revision);
            if !present || revision > table.revision {
                self.violations.push(ObjectViolation::AckLost {
                    store,
                    revision,
                    change: c.describe(),
                    final_revision: table.revision,
                });
            }
        }
        // The key's change just before `revision` in the history, if the history
        // reaches back far enough to tell.
        let previous = |key: &str, revision: u64| -> Option<Option<(u64, bool)>> {
            let p = (table.history.iter().rev())
                .find(|h| h.key == key && h.revision < revision)
                .map(|h| (h.revision, matches!(h.kind, ChangeKind::Put { .. })));
            match p {
                Some(p) => Some(Some(p)),
                None if table.compacted == 0 => Some(None),
                None => None,
            }
        };
        for m in std::mem::take(&mut self.missing_reads) {
            if m.store != store || m.after <= table.compacted {
                continue;
            }
            self.counts.read_checks += 1;
            let deleted = (table.history.iter())
                .any(|h| h.key == m.key && h.revision > m.after && h.kind == ChangeKind::Delete);
            if !deleted {
                self.violations.push(ObjectViolation::ReadStale {
                    store,
                    key: m.key,
                    returned: None,
                    acked: m.after,
                    sent_us: m.sent_us,
                });
            }
        }
        for w in std::mem::take(&mut self.cas_wins) {
            if w.store != store {
                continue;
            }
            let Some(prev) = previous(&w.key, w.revision) else {
                continue;
            };
            self.counts.cas_checks += 1;
            let ok = match (w.expected, prev) {
                (Some(r), Some((p, true))) => r == p,
                (None, None | Some((_, false))) => true,
                _ => false,
            };
            if !ok {
                self.violations.push(ObjectViolation::CasBroken {
                    store,
                    key: w.key,
                    expected: w.expected,
                    revision: w.revision,
                    previous: match prev {
                        None => "none".into(),
                        Some((r, true)) => format!("a put at revision {r}"),
                        Some((r, false)) => format!("a delete at revision {r}"),
                    },
                });
            }
        }
    }

    /// Checker 4, at the end: nothing left to collect, prune or abandon in `table`.
    pub fn collected(&mut self, store: StoreId, table: &ObjectTable) {
        self.counts.collect_checks += 1;
        for (key, dict) in &table.keys {
            for m in dict.values() {
                let clean = m.state == ManifestState::Active
                    && m.remaining_delete.is_empty()
                    && (m.props.multipart.is_none() || m.props.multipart_clean);
                if !clean {
                    let state = format!(
                        "{} ({} blocks to delete, lease {:?})",
                        m.state.letter(),
                        m.remaining_delete.len(),
                        m.lease
                    );
                    self.violations.push(ObjectViolation::NotCollected {
                        store,
                        key: key.clone(),
                        uuid: m.uuid,
                        state,
                    });
                    return;
                }
            }
        }
    }

    /// The merge laws on copies of one upload's manifest held by different chunks.
    pub fn merge_laws(&mut self, store: StoreId, key: &str, copies: &[&Manifest]) {
        let Some(first) = copies.first() else {
            return;
        };
        let mut law = None;
        for a in copies {
            self.counts.merge_checks += 1;
            if merge(a, a) != **a {
                law = Some("idempotent");
            }
            for b in copies {
                if merge(a, b) != merge(b, a) {
                    law = Some("commutative");
                }
                for c in copies {
                    if merge(&merge(a, b), c) != merge(a, &merge(b, c)) {
                        law = Some("associative");
                    }
                }
            }
        }
        if let Some(law) = law {
            self.violations.push(ObjectViolation::MergeLaw {
                store,
                key: key.to_string(),
                uuid: first.uuid,
                law,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_core::Epoch;
    use tenure_core::objects::{Change, Manifest};
    use tenure_core::time::Instant;

    const S: StoreId = StoreId(3);

    fn put(revision: u64, key: &str, uuid: u128) -> Change {
        Change {
            revision,
            key: key.into(),
            kind: ChangeKind::Put {
                uuid: Uuid(uuid),
                size: 0,
                checksum: 0,
            },
        }
    }

    // Checker 1 (seed 001, DESIGN §9.6): a read older than an acknowledged put is stale;
    // one sent before the acknowledgement, or returning the newer revision, is not.
    #[test]
    fn a_stale_read_fires() {
        let mut c = ObjectChecker::default();
        c.put_acked(S, "/k", 1, Uuid(1), (7, 3), 100);
        c.put_acked(S, "/k", 2, Uuid(2), (8, 3), 200);
        c.read(S, "/k", 150, Some((1, Uuid(1), 7, 3)), Some((7, 3)));
        c.read(S, "/k", 250, Some((2, Uuid(2), 8, 3)), Some((8, 3)));
        assert!(c.violations.is_empty(), "{:?}", c.violations);
        c.read(S, "/k", 250, Some((1, Uuid(1), 7, 3)), Some((7, 3)));
        assert!(matches!(c.violations[0], ObjectViolation::ReadStale { .. }));
    }

    // Checker 1: content that does not match its description or its upload.
    #[test]
    fn a_corrupt_read_fires() {
        let mut c = ObjectChecker::default();
        c.put_acked(S, "/k", 1, Uuid(1), (7, 3), 100);
        c.read(S, "/k", 150, Some((1, Uuid(1), 7, 3)), Some((9, 3)));
        c.read(S, "/k", 150, Some((1, Uuid(1), 9, 3)), None);
        assert_eq!(c.violations.len(), 2);
    }

    // Checker 1: NoSuchObject after an acknowledged put needs a later delete; a CAS win
    // must follow the revision it named.
    #[test]
    fn missing_reads_and_cas_are_judged_by_the_history() {
        let mut t = ObjectTable::default();
        t.history
            .extend([put(1, "/k", 1), put(2, "/k", 2), put(3, "/j", 3)]);
        t.revision = 3;
        let mut c = ObjectChecker::default();
        c.put_acked(S, "/k", 1, Uuid(1), (0, 0), 10);
        c.read(S, "/k", 20, None, None);
        c.cas_won(S, "/k", Some(1), 2);
        c.final_history(S, &t);
        assert_eq!(c.violations.len(), 1, "{:?}", c.violations);
        assert!(matches!(c.violations[0], ObjectViolation::ReadStale { .. }));
        let mut c = ObjectChecker::default();
        c.cas_won(S, "/j", None, 3);
        c.cas_won(S, "/k", Some(2), 2);
        c.final_history(S, &t);
        assert!(matches!(c.violations[0], ObjectViolation::CasBroken { .. }));
        assert_eq!(c.violations.len(), 1);
    }

    // Sources must agree on a revision, and an acknowledged change must be in the final
    // history.
    #[test]
    fn conflicting_and_lost_revisions_fire() {
        let mut c = ObjectChecker::default();
        c.put_acked(S, "/k", 1, Uuid(1), (0, 0), 10);
        c.delete_acked(S, "/k", 1, 20);
        assert!(matches!(
            c.violations[0],
            ObjectViolation::RevisionConflict { .. }
        ));
        let mut c = ObjectChecker::default();
        c.put_acked(S, "/k", 2, Uuid(1), (0, 0), 10);
        let mut t = ObjectTable::default();
        t.history.push_back(put(1, "/k", 9));
        t.revision = 1;
        c.final_history(S, &t);
        assert!(matches!(c.violations[0], ObjectViolation::AckLost { .. }));
    }

    // Checker 5: a token released, or superseded by a conflicting grant, before the put
    // was sent must not land; the current token may.
    #[test]
    fn a_stale_fence_landing_fires() {
        let tok = |seq| FencingToken {
            epoch: Epoch(2),
            seq,
        };
        let mut c = ObjectChecker::default();
        c.granted(S, "/g/l0", tok(1), LockMode::Exclusive, 100);
        c.fenced_landed(S, "/g/o", "/g/l0", tok(1), 150);
        c.granted(S, "/g/l0", tok(2), LockMode::Exclusive, 200);
        c.fenced_landed(S, "/g/o", "/g/l0", tok(1), 190);
        c.fenced_landed(S, "/g/o", "/g/l0", tok(2), 250);
        assert!(c.violations.is_empty());
        c.fenced_landed(S, "/g/o", "/g/l0", tok(1), 250);
        assert!(matches!(
            c.violations[0],
            ObjectViolation::FencedStale { .. }
        ));
        c.released(S, "/g/l0", tok(2), 300);
        c.fenced_landed(S, "/g/o", "/g/l0", tok(2), 301);
        assert_eq!(c.violations.len(), 2);
        // Shared grants do not supersede each other.
        c.granted(S, "/g/l1", tok(3), LockMode::Shared, 400);
        c.granted(S, "/g/l1", tok(4), LockMode::Shared, 410);
        c.fenced_landed(S, "/g/o", "/g/l1", tok(3), 420);
        assert_eq!(c.violations.len(), 2);
    }

    // Checker 6: a gap on a whole-store watch, a duplicate, a change outside the prefix,
    // and (at the end) a change of a prefix watch never seen.
    #[test]
    fn broken_watches_fire() {
        let mut c = ObjectChecker::default();
        let mut last = 0;
        c.watch_events(
            S,
            0,
            "/",
            true,
            &mut last,
            &[put(1, "/a/k", 1), put(2, "/a/k", 2)],
        );
        assert!(c.violations.is_empty());
        c.watch_events(S, 0, "/", true, &mut last, &[put(4, "/a/k", 4)]);
        c.watch_events(S, 0, "/", true, &mut last, &[put(4, "/a/k", 4)]);
        let mut l2 = 0;
        c.watch_events(S, 1, "/a", false, &mut l2, &[put(5, "/b/k", 5)]);
        assert_eq!(c.violations.len(), 3, "{:?}", c.violations);
        let mut t = ObjectTable::default();
        t.history
            .extend([put(1, "/a/k", 1), put(2, "/b/k", 2), put(3, "/a/k", 3)]);
        let mut c = ObjectChecker::default();
        let seen: BTreeSet<u64> = [1].into();
        c.watch_complete(S, 1, "/a", 0, 3, &seen, &[], &t);
        assert_eq!(c.violations.len(), 1);
        c.watch_complete(S, 1, "/a", 0, 3, &seen, &[(2, 3)], &t);
        assert_eq!(c.violations.len(), 1, "an explicit re-read may skip");
    }

    // Checkers 3 and 4: deleting a block of an active manifest, and a manifest left
    // pending_delete at the end.
    #[test]
    fn collecting_active_blocks_and_leaving_garbage_fire() {
        let b = tenure_core::objects::BlockId {
            upload: Uuid(1),
            part: 0,
            generation: 0,
            index: 0,
        };
        let info = tenure_core::objects::BlockInfo::of(b"x");
        let mut m = Manifest::writing(Uuid(1), vec![(b, info)], Instant(0));
        m.state = ManifestState::Active;
        m.remaining_write.clear();
        let mut t = ObjectTable::default();
        t.keys
            .entry("/k".into())
            .or_default()
            .insert(Uuid(1), m.clone());
        let mut c = ObjectChecker::default();
        c.collected(S, &t);
        assert!(c.violations.is_empty());
        c.blocks_deleted(S, &[Uuid(1)].into(), &[b].into(), &t, "d1", 5);
        assert!(matches!(
            c.violations[0],
            ObjectViolation::ActiveBlockCollected { .. }
        ));
        m.state = ManifestState::PendingDelete;
        t.keys
            .get_mut("/k")
            .expect("key")
            .insert(Uuid(1), m.clone());
        let mut c = ObjectChecker::default();
        c.blocks_deleted(S, &[Uuid(1)].into(), &[b].into(), &t, "d1", 5);
        assert!(c.violations.is_empty());
        c.collected(S, &t);
        assert!(matches!(
            c.violations[0],
            ObjectViolation::NotCollected { .. }
        ));
        assert!(c.violations[0].is_liveness());
    }

    // The merge laws hold on copies of one upload at different stages.
    #[test]
    fn merge_laws_hold_on_progressing_copies() {
        let mk = |i| tenure_core::objects::BlockId {
            upload: Uuid(1),
            part: 0,
            generation: 0,
            index: i,
        };
        let info = tenure_core::objects::BlockInfo::of(b"x");
        let w = Manifest::writing(Uuid(1), vec![(mk(0), info), (mk(1), info)], Instant(5));
        let mut w2 = w.clone();
        w2.remaining_write.remove(&mk(0));
        w2.last_written = Instant(9);
        let mut p = w.clone();
        p.state = ManifestState::PendingDelete;
        p.remaining_delete = [mk(0), mk(1)].into();
        let mut c = ObjectChecker::default();
        c.merge_laws(S, "/k", &[&w, &w2, &p]);
        assert!(c.violations.is_empty(), "{:?}", c.violations);
        assert!(c.counts.merge_checks > 0);
    }
}
