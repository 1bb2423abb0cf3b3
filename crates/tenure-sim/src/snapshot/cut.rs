//! Judging a snapshot's parts: the cut is consistent (nothing recorded as received that
//! was not sent, channel contents in order), and the recorded states hold the store
//! invariants (one manager and one layout per epoch, no conflicting lock holders: the
//! core's [`tenure_core::snapshot::records`], which `tenure snapshot verify` runs too).

use super::{Cut, CutTracker, PartInfo, SnapshotViolation};
use std::collections::{BTreeMap, BTreeSet};
use tenure_core::DeviceId;
use tenure_core::snapshot::{RecordChecker, SnapshotId};

impl CutTracker {
    /// Judge a completed snapshot's parts: all there, a consistent cut, the invariants in
    /// its states. The cut to restore, unless a part is missing or the cut is inconsistent.
    pub(super) fn check_cut(
        &mut self,
        id: SnapshotId,
        summary: &tenure_core::io::SnapshotSummary,
        devices: &[DeviceId],
    ) -> Option<Cut> {
        let parts = self.parts.remove(&id).unwrap_or_default();
        let missing: Vec<String> = (devices.iter())
            .filter(|d| !parts.contains_key(d))
            .map(|d| d.to_string())
            .collect();
        if !missing.is_empty() {
            self.violations.push(SnapshotViolation::Incomplete {
                id,
                why: format!("no part from {}", missing.join(", ")),
            });
            return None;
        }
        let listed: BTreeSet<DeviceId> = summary.devices.iter().copied().collect();
        let all: BTreeSet<DeviceId> = devices.iter().copied().collect();
        if listed != all {
            self.violations.push(SnapshotViolation::Incomplete {
                id,
                why: format!("the result names {listed:?}, the cluster is {all:?}"),
            });
        }
        if summary.terminated
            && let Some((d, p)) = parts
                .iter()
                .find(|(_, p)| p.part.channels.values().any(|c| !c.is_empty()))
        {
            self.violations.push(SnapshotViolation::Incomplete {
                id,
                why: format!(
                    "reported terminated (all Done) but {d} recorded {} message(s) in flight",
                    p.part.channels.values().map(Vec::len).sum::<usize>()
                ),
            });
        }
        // Nothing recorded as received that was not sent.
        for (q, qi) in &parts {
            for (p, pi) in &parts {
                if p == q {
                    continue;
                }
                self.stats.pair_checks += 1;
                let processed = qi.record.processed.get(p).copied().unwrap_or(0);
                let sent = pi.record.sent.get(q).copied().unwrap_or(0);
                if processed > sent {
                    self.violations.push(SnapshotViolation::ReceivedNotSent {
                        id,
                        from: *p,
                        to: *q,
                        processed,
                        sent,
                    });
                    return None;
                }
                // Recorded in flight: sent before P's record, received after Q's.
                for seq in qi.seqs.get(p).into_iter().flatten() {
                    if *seq > sent || *seq <= processed {
                        self.violations.push(SnapshotViolation::BadChannel {
                            id,
                            from: *p,
                            to: *q,
                            why: format!(
                                "message #{seq} recorded in flight, but {p} recorded after sending #{sent} and {q} after processing #{processed}"
                            ),
                        });
                        return None;
                    }
                }
            }
        }
        self.check_states(id, &parts);
        Some(Cut {
            id,
            ticks: (parts.iter()).map(|(d, p)| (*d, p.record.tick)).collect(),
            parts: parts.into_iter().map(|(d, p)| (d, p.part)).collect(),
        })
    }

    /// Invariants in the recorded states, checked as `tenure snapshot verify` checks
    /// them ([`tenure_core::snapshot::records`]): one manager and one layout per (store,
    /// epoch), the same tables wherever the same changes were confirmed, no conflicting
    /// holders in any recorded lock table, no fencing token held by two sessions.
    fn check_states(&mut self, id: SnapshotId, parts: &BTreeMap<DeviceId, PartInfo>) {
        let mut records = RecordChecker::new();
        for pi in parts.values() {
            for c in pi.part.state.chunks.values() {
                self.stats.state_checks += 1;
                records.add(c);
            }
        }
        for problem in records.problems {
            self.violations
                .push(SnapshotViolation::InCut { id, problem });
        }
    }
}
