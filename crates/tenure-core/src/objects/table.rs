//! A store's objects as replicated state: per key the dict of manifests, the store's
//! object revision counter, the watch history, and the index of ephemeral objects.
//!
//! [`ObjectTable::execute`] is seed 001's workflow for one change to one key: read the
//! key's dict, resolve (it is kept resolved: every new piece of information is merged
//! in with [`merge`]), prune tombstones, add the new information, write back. Spawning
//! collectors (step 4) is the manager's: it asks [`ObjectTable::gc_work`].
//! The workflow itself is in `workflow`.

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

mod workflow;

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

/// A key's active manifest in its dict: the active one with the highest revision.
fn active_in(dict: &super::manifest::Dict) -> Option<&Manifest> {
    (dict.values())
        .filter(|m| m.state == ManifestState::Active)
        .max_by_key(|m| m.revision)
}

/// What a device's gauges count in its managed stores' object tables
/// ([`ObjectTable::tally_after`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObjectTally {
    /// Keys with an active object.
    pub objects: u64,
    /// Their active contents' bytes.
    pub bytes: u64,
    /// Manifests pending deletion (blocks still to collect).
    pub gc_backlog: u64,
}

impl std::ops::AddAssign for ObjectTally {
    fn add_assign(&mut self, o: ObjectTally) {
        self.objects += o.objects;
        self.bytes += o.bytes;
        self.gc_backlog += o.gc_backlog;
    }
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
        active_in(self.keys.get(key)?)
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

    /// The status gauges of at most `budget` keys, in key order after `after` (from the
    /// first key with `None`), and the last key visited if keys remain after it: a
    /// device counts a large table a slice per tick instead of scanning it whole on its
    /// event loop.
    pub fn tally_after(
        &self,
        after: Option<&str>,
        budget: usize,
    ) -> (ObjectTally, Option<Arc<str>>) {
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut tally = ObjectTally::default();
        let mut last = None;
        let mut range = self.keys.range::<_, str>((from, Bound::Unbounded));
        for (key, dict) in range.by_ref().take(budget.max(1)) {
            tally.gc_backlog += (dict.values())
                .filter(|m| m.state == ManifestState::PendingDelete)
                .count() as u64;
            if let Some(a) = active_in(dict) {
                tally.objects += 1;
                tally.bytes += a.size;
            }
            last = Some(key.clone());
        }
        let more = range.next().is_some();
        (tally, last.filter(|_| more))
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
