//! The end-of-run checks on a store's final history: every source agrees with it, every
//! acknowledged change is in it, pending deletes are collected, and the merge function's
//! laws hold on the copies of each manifest.

use super::{Claim, ObjectChecker, ObjectViolation};
use tenure_core::StoreId;
use tenure_core::objects::{ChangeKind, Manifest, ManifestState, ObjectTable, merge};

impl ObjectChecker {
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
                        key: key.to_string(),
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
