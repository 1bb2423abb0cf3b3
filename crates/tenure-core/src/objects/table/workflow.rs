//! Seed 001's workflow for one change to one key ([`ObjectTable::execute`]): read the
//! key's dict, prune its old tombstones, add the new information, write back; and the
//! small steps the workflow and the session and reconcile paths share.

use super::*;

impl ObjectTable {
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
                    new.checksum = crate::objects::combine(blocks.iter().map(|(_, b)| *b));
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
                let change = ChangeKind::Put {
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
                let change = ChangeKind::Put {
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

    pub(super) fn get(&self, key: &str, uuid: Uuid) -> Option<&Manifest> {
        self.keys.get(key)?.get(&uuid)
    }

    /// Merge new information about one upload into the key's dict (workflow step 5).
    pub(super) fn put(&mut self, key: &str, m: Manifest) {
        let Some(dict) = self.keys.get_mut(key) else {
            let mut dict = crate::objects::manifest::Dict::default();
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
    pub(super) fn pend(&mut self, key: &str, uuid: Uuid, at: Instant) {
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
    pub(super) fn supersede(&mut self, key: &str, at: Instant) {
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
    pub(super) fn retire_or_pend(&mut self, key: &str, uuid: Uuid, at: Instant, tombstone: bool) {
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

    pub(super) fn delete(
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
        self.record(key, ChangeKind::Delete);
        revision
    }

    pub(super) fn record(&mut self, key: &str, kind: ChangeKind) {
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
    pub(super) fn settle(&mut self, key: &str) {
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
    pub(super) fn disown(&mut self, key: &str, drop: impl Fn(&SessionId) -> bool) {
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

    pub(super) fn settle_key_only(&mut self, key: &str) {
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
