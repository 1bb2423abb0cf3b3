//! A store's objects as replicated state: per key the dict of manifests, the store's
//! object revision counter, the watch history, and the index of ephemeral objects.
//!
//! [`ObjectTable::execute`] is seed 001's workflow for one change to one key: read the
//! key's dict, resolve (it is kept resolved: every new piece of information is merged
//! in with [`merge`]), prune tombstones, add the new information, write back. Spawning
//! collectors (step 4) is the manager's: it asks [`ObjectTable::gc_work`].

use super::manifest::{Manifest, ManifestState, Part, merge, merge_dict};
use super::{BlockId, BlockInfo, Conditions, ObjectError, ObjectOp, ObjectOutcome, Uuid, under};
use crate::error::ClientError;
use crate::ids::SessionId;
use crate::lockctl::LockTable;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

/// One change a watcher sees.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// The store's object revision of the change.
    pub revision: u64,
    /// Key.
    pub key: String,
    /// What happened.
    pub kind: ChangeKind,
}

/// What a change did to a key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChangeKind {
    /// A new content became active.
    Put {
        /// The upload.
        uuid: Uuid,
        /// Length.
        size: u64,
        /// CRC-32 of the content.
        checksum: u32,
    },
    /// The object was deleted (by a client, or its session ended).
    Delete,
}

/// An active object's description (list and get answers).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    /// Key.
    pub key: String,
    /// Revision at which this content became active.
    pub revision: u64,
    /// The upload.
    pub uuid: Uuid,
    /// Length.
    pub size: u64,
    /// CRC-32 of the content.
    pub checksum: u32,
    /// Ephemeral: the owning session.
    pub owner: Option<SessionId>,
    /// The blocks, in order.
    pub blocks: Vec<(BlockId, BlockInfo)>,
}

/// Collection work the manager's spawn step finds (seed 001 workflow step 4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GcWork {
    /// Blocks to delete under a lease (a pending_delete manifest, or the unused parts
    /// of an active multipart one). `lease` is the current lease, if any.
    Collect {
        /// Key.
        key: String,
        /// Upload.
        uuid: Uuid,
        /// Blocks still to delete.
        blocks: BTreeSet<BlockId>,
        /// The current lease.
        lease: Option<super::DeletionLease>,
    },
    /// Every block is deleted: finish (`deleted`, or `multipart_clean`).
    Finish {
        /// Key.
        key: String,
        /// Upload.
        uuid: Uuid,
    },
    /// An upload writing for too long.
    Abandon {
        /// Key.
        key: String,
        /// Upload.
        uuid: Uuid,
    },
    /// Tombstones to prune.
    Prune {
        /// Key.
        key: String,
    },
}

/// A store's objects.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectTable {
    /// Per key, the manifests by upload UUID. Keys and dicts are shared pointers: the
    /// persistent map's copies (a vote's, the storage thread's, a checkpoint's base) copy
    /// the nodes a change touches, and a node's entries are then two pointers each, never
    /// a key's text and manifests (encoded as a plain map of strings to dicts).
    #[serde(with = "crate::persist_serde::ord_map")]
    pub keys: imbl::OrdMap<Arc<str>, Arc<super::manifest::Dict>>,
    /// The store's object revision: one more at every visible change.
    pub revision: u64,
    /// The latest changes, oldest first.
    #[serde(with = "crate::persist_serde::vector")]
    pub history: imbl::Vector<Change>,
    /// History is kept for revisions after this one.
    pub compacted: u64,
    /// How many changes the history keeps (set by the changes, so every replica keeps
    /// the same).
    pub history_limit: u32,
    /// Keys with an ephemeral object, by owning session.
    #[serde(with = "crate::persist_serde::ord_map")]
    pub owned: imbl::OrdMap<SessionId, BTreeSet<String>>,
    /// Keys with a manifest that is not a clean active one (writing, pending_delete,
    /// deleted, or active with garbage): where the spawn step looks.
    #[serde(with = "crate::persist_serde::ord_set")]
    pub attention: imbl::OrdSet<String>,
}

impl Default for ObjectTable {
    fn default() -> Self {
        ObjectTable {
            keys: imbl::OrdMap::new(),
            revision: 0,
            history: imbl::Vector::new(),
            compacted: 0,
            history_limit: super::ObjectSettings::default().history,
            owned: imbl::OrdMap::new(),
            attention: imbl::OrdSet::new(),
        }
    }
}

/// The context of one change: the store's time and decisions every replica repeats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Access {
    /// Store time of the change ([`crate::time::StoreClock`]).
    pub at: Instant,
    /// Tombstones deleted before this are pruned.
    pub prune_before: Instant,
    /// History length to keep.
    pub history: u32,
}

impl ObjectTable {
    /// The key's active manifest: the active one with the highest revision.
    pub fn active(&self, key: &str) -> Option<&Manifest> {
        (self.keys.get(key)?.values())
            .filter(|m| m.state == ManifestState::Active)
            .max_by_key(|m| m.revision)
    }

    /// The key's active object.
    pub fn meta(&self, key: &str) -> Option<ObjectMeta> {
        self.active(key).map(|m| meta(key, m))
    }

    /// Active objects at `prefix` or below, in key order.
    pub fn list(&self, prefix: &str) -> Vec<ObjectMeta> {
        let start = prefix.trim_end_matches('/');
        (self
            .keys
            .range::<_, str>((Bound::Included(start), Bound::Unbounded)))
        .take_while(|(k, _)| k.starts_with(start))
        .filter(|(k, _)| under(k, prefix))
        .filter_map(|(k, _)| self.meta(k))
        .collect()
    }

    /// Changes at `prefix` or below after revision `after`, in revision order; an
    /// explicit [`ObjectError::Compacted`] when the history no longer reaches back there.
    pub fn changes_after(&self, prefix: &str, after: u64) -> Result<Vec<Change>, ObjectError> {
        if after < self.compacted {
            return Err(ObjectError::Compacted {
                asked: after,
                compacted: self.compacted,
            });
        }
        // Revisions in the history are consecutive (every change records one), so the
        // changes after `after` start at a known index.
        let start = (after - self.compacted) as usize;
        Ok((self.history.skip(start.min(self.history.len())).iter())
            .filter(|c| c.revision > after && under(&c.key, prefix))
            .cloned()
            .collect())
    }

    /// The manifest a request created, if one did.
    pub fn by_request(&self, key: &str, request: (SessionId, u64)) -> Option<&Manifest> {
        (self.keys.get(key)?.values()).find(|m| m.request == Some(request))
    }

    /// The revision at which a request deleted the key, if one did.
    pub fn deleted_by(&self, key: &str, request: (SessionId, u64)) -> Option<u64> {
        (self.keys.get(key)?.values())
            .filter_map(|m| m.delete_request)
            .find(|(s, r, _)| (*s, *r) == request)
            .map(|(_, _, rev)| rev)
    }

    /// Every block a live manifest names (active content, written blocks of uploads in
    /// progress), with its info: what a complete chunk holds.
    pub fn live_blocks(&self) -> BTreeMap<BlockId, BlockInfo> {
        let mut out = BTreeMap::new();
        for m in self.keys.values().flat_map(|d| d.values()) {
            let live = m.live_blocks();
            let named = (m.blocks.iter()).chain(
                (m.props.multipart.iter()).flat_map(|p| p.values().flat_map(|p| p.blocks.iter())),
            );
            for (id, info) in named {
                if live.contains(id) {
                    out.insert(*id, *info);
                }
            }
        }
        out
    }

    /// Check a write's conditions against the key's active object and the lock table.
    pub fn check(
        &self,
        key: &str,
        cond: &Conditions,
        locks: &LockTable,
    ) -> Result<(), ClientError> {
        let current = self.active(key).map(|m| m.revision);
        if cond.if_absent
            && let Some(revision) = current
        {
            return Err(ObjectError::Exists { revision }.into());
        }
        if let Some(want) = cond.if_revision
            && current.unwrap_or(0) != want
        {
            return Err(ObjectError::RevisionMismatch { current }.into());
        }
        if let Some(f) = &cond.fence {
            check_fence(f, locks)?;
        }
        Ok(())
    }

    /// Apply one change (seed 001's workflow for its key). Deterministic: every replica
    /// applying the same changes in the same order holds the same table. A refused
    /// change (a failed condition, an unknown upload) changes nothing, except a failed
    /// activation, which abandons its upload.
    pub fn execute(
        &mut self,
        op: &ObjectOp,
        acc: Access,
        locks: &LockTable,
    ) -> Result<ObjectOutcome, ClientError> {
        self.history_limit = acc.history;
        let key = op.key();
        // Step 1–3: read the key's (resolved) dict and prune its old tombstones.
        let old = |m: &Manifest| {
            m.state == ManifestState::Deleted && m.deleted_at.is_some_and(|t| t < acc.prune_before)
        };
        if self.keys.get(key).is_some_and(|d| d.values().any(old))
            && let Some(dict) = self.keys.get_mut(key)
        {
            Arc::make_mut(dict).retain(|_, m| !old(m));
        }
        // Step 5: add the new information.
        let r = self.add(op, acc, locks);
        // Step 6: write back.
        self.settle(key);
        r
    }

    fn add(
        &mut self,
        op: &ObjectOp,
        acc: Access,
        locks: &LockTable,
    ) -> Result<ObjectOutcome, ClientError> {
        use ManifestState::*;
        let at = acc.at;
        match op {
            ObjectOp::Begin {
                key,
                uuid,
                blocks,
                multipart,
                owner,
                request,
                cond,
            } => {
                if self.get(key, *uuid).is_some() {
                    return Ok(ObjectOutcome::Begun);
                }
                self.check(key, cond, locks)?;
                let mut m = Manifest::writing(*uuid, blocks.clone(), at);
                m.owner = *owner;
                m.request = *request;
                if *multipart {
                    m.props.multipart = Some(BTreeMap::new());
                }
                self.put(key, m);
                Ok(ObjectOutcome::Begun)
            }
            ObjectOp::Blocks {
                key,
                uuid,
                part,
                blocks,
            } => {
                let Some(m) = self.get(key, *uuid) else {
                    return Err(ObjectError::NoSuchUpload(*uuid).into());
                };
                if m.state != Writing {
                    return Ok(ObjectOutcome::BlocksWritten);
                }
                let mut new = m.clone();
                for b in blocks {
                    new.remaining_write.remove(&b.id);
                }
                release_if_empty(&mut new.remaining_write);
                new.last_written = at;
                if let (Some(p), Some(parts)) = (part, new.props.multipart.as_mut()) {
                    let fresh = Part {
                        generation: p.generation,
                        blocks: p.blocks.clone(),
                        size: p.size,
                        checksum: p.checksum,
                    };
                    match parts.get(&p.number) {
                        Some(old) if old.generation >= p.generation => {}
                        old => {
                            if let Some(old) = old {
                                new.props
                                    .garbage
                                    .extend(old.blocks.iter().map(|(id, _)| *id));
                            }
                            parts.insert(p.number, fresh);
                        }
                    }
                }
                self.put(key, new);
                Ok(ObjectOutcome::BlocksWritten)
            }
            ObjectOp::Activate {
                key,
                uuid,
                parts,
                cond,
            } => {
                let Some(m) = self.get(key, *uuid).cloned() else {
                    return Err(ObjectError::NoSuchUpload(*uuid).into());
                };
                if m.state != Writing {
                    // A replay of an activation that happened.
                    return match m.revision {
                        0 => Err(ObjectError::NoSuchUpload(*uuid).into()),
                        revision => Ok(ObjectOutcome::Written {
                            revision,
                            uuid: *uuid,
                        }),
                    };
                }
                let mut new = m.clone();
                if let Some(chosen) = parts {
                    let all = new.props.multipart.clone().unwrap_or_default();
                    let mut blocks = Vec::new();
                    for n in chosen {
                        let p = all.get(n).ok_or(ObjectError::NoSuchPart(*n))?;
                        blocks.extend(p.blocks.iter().copied());
                    }
                    let used: BTreeSet<BlockId> = blocks.iter().map(|(id, _)| *id).collect();
                    new.remaining_delete = (m.all_blocks().into_iter())
                        .chain(m.props.garbage.iter().copied())
                        .filter(|b| !used.contains(b))
                        .collect();
                    new.size = blocks.iter().map(|(_, b)| b.len as u64).sum();
                    new.checksum = super::combine(blocks.iter().map(|(_, b)| *b));
                    new.blocks = blocks;
                    new.props.multipart_clean = new.remaining_delete.is_empty();
                } else if !m.remaining_write.is_empty() {
                    return Err(ObjectError::Incomplete {
                        missing: m.remaining_write.len(),
                    }
                    .into());
                }
                if let Err(e) = self.check(key, cond, locks) {
                    self.pend(key, *uuid, at);
                    return Err(e);
                }
                self.revision += 1;
                new.state = Active;
                new.revision = self.revision;
                self.supersede(key, at);
                if let Some(s) = new.owner {
                    self.owned.entry(s).or_default().insert(key.clone());
                }
                let change = super::ChangeKind::Put {
                    uuid: *uuid,
                    size: new.size,
                    checksum: new.checksum,
                };
                self.put(key, new);
                self.record(key, change);
                Ok(ObjectOutcome::Written {
                    revision: self.revision,
                    uuid: *uuid,
                })
            }
            ObjectOp::Delete { key, request, cond } => {
                if let Some(req) = request
                    && let Some(revision) = self.deleted_by(key, *req)
                {
                    return Ok(ObjectOutcome::Deleted { revision });
                }
                let Some(m) = self.active(key) else {
                    return Err(ObjectError::NoSuchObject.into());
                };
                let uuid = m.uuid;
                self.check(key, cond, locks)?;
                Ok(ObjectOutcome::Deleted {
                    revision: self.delete(key, uuid, *request, at),
                })
            }
            ObjectOp::Abandon { key, uuid } => {
                if self.get(key, *uuid).is_some_and(|m| m.state == Writing) {
                    self.pend(key, *uuid, at);
                }
                Ok(ObjectOutcome::Collected)
            }
            ObjectOp::GcLease { key, uuid, lease } => {
                if let Some(m) = self.get(key, *uuid)
                    && !m.remaining_delete.is_empty()
                {
                    let mut new = m.clone();
                    new.lease = Some(*lease);
                    self.put(key, new);
                }
                Ok(ObjectOutcome::Collected)
            }
            ObjectOp::GcProgress {
                key,
                uuid,
                deleted,
                lease,
            } => {
                if let Some(m) = self.get(key, *uuid)
                    && matches!(m.state, Active | PendingDelete)
                {
                    let mut new = m.clone();
                    for b in deleted {
                        new.remaining_delete.remove(b);
                    }
                    release_if_empty(&mut new.remaining_delete);
                    new.lease = Some(*lease);
                    new.deleted_at = Some(at);
                    self.put(key, new);
                }
                Ok(ObjectOutcome::Collected)
            }
            ObjectOp::GcDone { key, uuid } => {
                if let Some(m) = self.get(key, *uuid)
                    && m.remaining_delete.is_empty()
                {
                    let mut new = m.clone();
                    match m.state {
                        PendingDelete => {
                            new.state = Deleted;
                            new.deleted_at = Some(at);
                            new.lease = None;
                        }
                        Active => new.props.multipart_clean = true,
                        Writing | Deleted => {}
                    }
                    self.put(key, new);
                }
                Ok(ObjectOutcome::Collected)
            }
            ObjectOp::Prune { .. } => Ok(ObjectOutcome::Collected),
            ObjectOp::Put(p) => {
                if let Some(m) = self.get(&p.key, p.uuid) {
                    // A replay of a put that happened.
                    return match m.revision {
                        0 => Err(ObjectError::NoSuchUpload(p.uuid).into()),
                        revision => Ok(ObjectOutcome::Written {
                            revision,
                            uuid: p.uuid,
                        }),
                    };
                }
                self.check(&p.key, &p.cond, locks)?;
                self.revision += 1;
                let mut m = Manifest::inline(p.uuid, p.value.clone(), self.revision, at);
                m.owner = p.owner;
                m.request = p.request;
                self.supersede(&p.key, at);
                if let Some(s) = m.owner {
                    self.owned.entry(s).or_default().insert(p.key.clone());
                }
                let change = super::ChangeKind::Put {
                    uuid: p.uuid,
                    size: m.size,
                    checksum: m.checksum,
                };
                self.put(&p.key, m);
                self.record(&p.key, change);
                Ok(ObjectOutcome::Written {
                    revision: self.revision,
                    uuid: p.uuid,
                })
            }
        }
    }

    /// Delete every ephemeral object `session` owns (its session ended). Returns the
    /// revisions of the deletions.
    pub fn session_ended(&mut self, session: SessionId, at: Instant) -> Vec<u64> {
        let keys = self.owned.remove(&session).unwrap_or_default();
        let mut revs = Vec::new();
        for key in keys {
            if let Some(m) = self.active(&key)
                && m.owner == Some(session)
            {
                let uuid = m.uuid;
                revs.push(self.delete(&key, uuid, None, at));
                self.settle(&key);
            }
        }
        revs
    }

    /// Reconcile with another chunk's copy of the same store's objects (DESIGN §3
    /// `done`): the seed's dict merge, key by key. `self` is the most advanced copy (the
    /// recovery merge starts from it), so a UUID absent from it was pruned there and is
    /// not let back in.
    pub fn reconcile(&mut self, other: &ObjectTable) {
        // Only keys whose dicts differ: where the copies share structure the diff does not
        // look, and an equal dict merges to itself. Visiting (and so copying) every key
        // made a regeneration cost the whole table, in time and memory, per chunk.
        // Of their dict, the uploads this copy knows.
        let differing: Vec<(Arc<str>, super::manifest::Dict)> = (self.keys.diff(&other.keys))
            .filter_map(|d| match d {
                imbl::ordmap::DiffItem::Update {
                    old: (key, mine),
                    new: (_, theirs),
                } => Some((
                    key.clone(),
                    (theirs.iter())
                        .filter(|(u, _)| mine.contains_key(u))
                        .map(|(u, m)| (*u, m.clone()))
                        .collect(),
                )),
                _ => None,
            })
            .collect();
        for (key, known) in differing {
            let Some(mine) = self.keys.get_mut(&*key) else {
                continue;
            };
            merge_dict(Arc::make_mut(mine), &known);
            self.settle_key_only(&key);
        }
    }

    /// Collection work, for the manager's spawn step.
    pub fn gc_work(
        &self,
        now: Instant,
        prune_after: Duration,
        writing_timeout: Duration,
    ) -> Vec<GcWork> {
        let mut work = Vec::new();
        for key in &self.attention {
            let Some(dict) = self.keys.get(key.as_str()) else {
                continue;
            };
            let mut prune = false;
            for m in dict.values() {
                let (key, uuid) = (key.clone(), m.uuid);
                match m.state {
                    ManifestState::Writing if m.last_written + writing_timeout < now => {
                        work.push(GcWork::Abandon { key, uuid })
                    }
                    ManifestState::Active | ManifestState::PendingDelete
                        if !m.remaining_delete.is_empty() =>
                    {
                        work.push(GcWork::Collect {
                            key,
                            uuid,
                            blocks: m.remaining_delete.clone(),
                            lease: m.lease,
                        })
                    }
                    ManifestState::PendingDelete => work.push(GcWork::Finish { key, uuid }),
                    ManifestState::Active
                        if !m.props.multipart_clean && m.props.multipart.is_some() =>
                    {
                        work.push(GcWork::Finish { key, uuid })
                    }
                    ManifestState::Deleted => {
                        prune |= m.deleted_at.is_some_and(|t| t + prune_after < now)
                    }
                    _ => {}
                }
            }
            if prune {
                work.push(GcWork::Prune { key: key.clone() });
            }
        }
        work
    }

    // ---- helpers --------------------------------------------------------------------

    fn get(&self, key: &str, uuid: Uuid) -> Option<&Manifest> {
        self.keys.get(key)?.get(&uuid)
    }

    /// Merge new information about one upload into the key's dict (workflow step 5).
    fn put(&mut self, key: &str, m: Manifest) {
        let Some(dict) = self.keys.get_mut(key) else {
            let mut dict = super::manifest::Dict::default();
            dict.insert(m.uuid, m);
            self.keys.insert(Arc::from(key), Arc::new(dict));
            return;
        };
        let dict = Arc::make_mut(dict);
        match dict.get_mut(&m.uuid) {
            Some(old) => *old = merge(old, &m),
            None => {
                dict.insert(m.uuid, m);
            }
        }
    }

    /// A manifest becomes pending_delete: every block it names is to be deleted.
    fn pend(&mut self, key: &str, uuid: Uuid, at: Instant) {
        if let Some(m) = self.get(key, uuid) {
            let mut new = m.clone();
            new.remaining_delete = m.all_blocks();
            new.state = ManifestState::PendingDelete;
            new.deleted_at = Some(at);
            new.lease = None;
            self.put(key, new);
        }
    }

    /// The key's active manifests are superseded (a new content became active): each is
    /// retired at once if it names no block, else becomes pending_delete. One that a
    /// request created leaves a tombstone: a retry of that request must find it and be
    /// answered, not write the old content again over the new one.
    fn supersede(&mut self, key: &str, at: Instant) {
        let older: Vec<(Uuid, bool)> = (self.keys.get(key).into_iter())
            .flat_map(|d| d.values())
            .filter(|o| o.state == ManifestState::Active)
            .map(|o| (o.uuid, o.request.is_some()))
            .collect();
        for (o, requested) in older {
            self.retire_or_pend(key, o, at, requested);
        }
    }

    /// An active manifest leaves: with no block to collect it is retired in this change
    /// (dropped, or a tombstone without its value when `tombstone`, which a retry of the
    /// request that made or deleted it needs, pruned after `prune_after`); otherwise it
    /// becomes pending_delete for the collector.
    fn retire_or_pend(&mut self, key: &str, uuid: Uuid, at: Instant, tombstone: bool) {
        let Some(m) = self.get(key, uuid) else {
            return;
        };
        if !m.nothing_to_collect() {
            return self.pend(key, uuid, at);
        }
        let Some(dict) = self.keys.get_mut(key) else {
            return;
        };
        let dict = Arc::make_mut(dict);
        if tombstone {
            if let Some(m) = dict.get_mut(&uuid) {
                m.state = ManifestState::Deleted;
                m.deleted_at = Some(at);
                m.lease = None;
                m.value = None;
            }
        } else {
            dict.remove(&uuid);
        }
    }

    fn delete(
        &mut self,
        key: &str,
        uuid: Uuid,
        request: Option<(SessionId, u64)>,
        at: Instant,
    ) -> u64 {
        self.revision += 1;
        let revision = self.revision;
        let requested = self.get(key, uuid).is_some_and(|m| m.request.is_some());
        self.retire_or_pend(key, uuid, at, request.is_some() || requested);
        if let (Some((s, r)), Some(m)) = (
            request,
            (self.keys.get_mut(key)).and_then(|d| Arc::make_mut(d).get_mut(&uuid)),
        ) {
            m.delete_request = Some((s, r, revision));
        }
        self.record(key, super::ChangeKind::Delete);
        revision
    }

    fn record(&mut self, key: &str, kind: ChangeKind) {
        self.history.push_back(Change {
            revision: self.revision,
            key: key.to_string(),
            kind,
        });
        while self.history.len() > self.history_limit.max(1) as usize {
            if let Some(c) = self.history.pop_front() {
                self.compacted = c.revision;
            }
        }
    }

    /// Write back: drop an empty dict, keep the attention index and the ephemeral index
    /// in step with the key's manifests.
    fn settle(&mut self, key: &str) {
        self.settle_key_only(key);
        if let Some(dict) = self.keys.get(key) {
            let owners: BTreeSet<SessionId> = (dict.values())
                .filter(|m| m.state == ManifestState::Active)
                .filter_map(|m| m.owner)
                .collect();
            self.disown(key, |s| !owners.contains(s));
        } else {
            self.disown(key, |_| true);
        }
    }

    /// Take `key` out of the ephemeral index of every session `drop` picks; a session
    /// left with no key leaves the index.
    fn disown(&mut self, key: &str, drop: impl Fn(&SessionId) -> bool) {
        let stale: Vec<SessionId> = (self.owned.iter())
            .filter(|(s, keys)| keys.contains(key) && drop(s))
            .map(|(s, _)| *s)
            .collect();
        for s in stale {
            if let Some(keys) = self.owned.get_mut(&s) {
                keys.remove(key);
                if keys.is_empty() {
                    self.owned.remove(&s);
                }
            }
        }
    }

    fn settle_key_only(&mut self, key: &str) {
        match self.keys.get(key) {
            Some(d) if d.is_empty() => {
                self.keys.remove(key);
                self.attention.remove(key);
            }
            Some(d) => {
                let clean = d.values().all(|m| {
                    m.state == ManifestState::Active
                        && m.remaining_delete.is_empty()
                        && (m.props.multipart.is_none() || m.props.multipart_clean)
                });
                if clean {
                    self.attention.remove(key);
                } else {
                    self.attention.insert(key.to_string());
                }
            }
            None => {
                self.attention.remove(key);
            }
        }
    }
}

/// An emptied `BTreeSet` keeps its leaf node (room for eleven block ids, ~370 B) until it
/// is dropped; a table holds one per object, so give it back.
fn release_if_empty(set: &mut BTreeSet<BlockId>) {
    if set.is_empty() {
        *set = BTreeSet::new();
    }
}

/// Server-side fencing: `fence.lock` must be held with exactly `fence.token`, else
/// `StaleToken` with the current holder's token.
pub fn check_fence(fence: &super::Fence, locks: &LockTable) -> Result<(), ClientError> {
    let holders = locks
        .holders(&fence.lock)
        .map_err(|e| ClientError::InvalidName(e.to_string()))?;
    if holders.iter().any(|h| h.token == fence.token) {
        Ok(())
    } else {
        Err(ClientError::StaleToken {
            current: holders.first().map(|h| h.token),
        })
    }
}

fn meta(key: &str, m: &Manifest) -> ObjectMeta {
    ObjectMeta {
        key: key.to_string(),
        revision: m.revision,
        uuid: m.uuid,
        size: m.size,
        checksum: m.checksum,
        owner: m.owner,
        blocks: m.blocks.clone(),
    }
}
