//! Judging a cluster restored from a snapshot: every acknowledged write and release at
//! the cut, the grants at the first takeover, nothing that had not reached its manager.

use super::{Cut, CutTracker, Restored, SnapshotViolation, conflicting_holders};
use std::collections::BTreeSet;
use tenure_core::msg::Msg;
use tenure_core::{DeviceId, StoreId};

/// What the cut recorded of `store`'s chunks, and of lock `name` in them (for a
/// violation's message).
fn cut_store(cut: &Cut, store: StoreId, name: Option<&str>) -> String {
    let mut out = Vec::new();
    for p in cut.parts.values() {
        for c in p.state.chunks.values().filter(|c| c.store == store) {
            let holders = name
                .map(|n| {
                    let h = c.data.table.locks.holders(n).unwrap_or_default();
                    let hs: Vec<String> = h
                        .iter()
                        .map(|h| format!("{:?}/{:?}", h.session, h.token))
                        .collect();
                    format!(" holders [{}]", hs.join(", "))
                })
                .unwrap_or_default();
            out.push(format!(
                "{} {} mgr {:?} confirmed {:?} L-list {:?}{holders}",
                c.id,
                c.epoch,
                c.lease_mgr,
                c.data.confirmed,
                c.data.l_list.keys().collect::<Vec<_>>()
            ));
        }
        for (from, msgs) in &p.channels {
            let n = msgs
                .iter()
                .filter(|m| match m {
                    Msg::ToChunk { store: s, .. }
                    | Msg::ToManager { store: s, .. }
                    | Msg::Mgr { store: s, .. } => *s == store,
                    _ => false,
                })
                .count();
            if n > 0 {
                out.push(format!(
                    "{n} message(s) of it in flight {from}->{}",
                    p.device
                ));
            }
        }
    }
    format!("the cut has {}", out.join("; "))
}

impl CutTracker {
    /// Judge the cluster restored from `cut` (see the module documentation).
    pub fn judge_restore(&mut self, cut: &Cut, r: &Restored) {
        let id = cut.id;
        self.stats.restores += 1;
        self.stats.restore_events += r.events;
        self.stats.restore_max_us = self.stats.restore_max_us.max(r.converged_us.unwrap_or(0));
        let fail = |why: String| SnapshotViolation::Restore { id, why };
        let mut found = Vec::new();
        if let Some(v) = r.violations.first() {
            found.push(fail(format!("store checker: {v}")));
        }
        if let Some(why) = &r.unmanaged {
            found.push(fail(format!("no working manager: {why}")));
        }
        // A device with no part (retired, down, or not a member the initiator asked): what
        // it did before the first record of the cut came before the cut — nothing after a
        // record can have caused it (simulator seed 1320: a manager received a write,
        // crashed, restarted and was retired; a cut taken then held the write through the
        // chunks it had reached, and its part was rightly missing).
        let first_record = cut.ticks.values().copied().min().unwrap_or(0);
        let before = |d: &DeviceId, tick: u64| match cut.ticks.get(d) {
            Some(t) => tick < *t,
            None => tick < first_record,
        };
        let last = cut.ticks.values().copied().max().unwrap_or(0);
        let f = &self.facts;
        let mut first = BTreeSet::new();
        for (store, mgr, tables) in &r.takeovers {
            // Sessions of the restored cluster expire (it has no clients): the grants are
            // looked for at each store's first takeover only.
            let first_takeover = first.insert(*store);
            // Every write acknowledged at the cut is there.
            for (d, tick, s, key, version) in &f.acked_writes {
                if s != store || !before(d, *tick) {
                    continue;
                }
                self.stats.restore_checks += 1;
                let held = tables.registers.entries.get(key).map(|(v, _)| *v);
                if held.is_none_or(|h| h < *version) {
                    found.push(fail(format!(
                        "{mgr} took over {store} without key {key} at {version:?} acknowledged by {d} before its record (holds {held:?}); {}",
                        cut_store(cut, *store, None)
                    )));
                }
            }
            // Every write there had reached its manager before the manager recorded.
            for (key, (version, value)) in &tables.registers.entries {
                self.stats.restore_checks += 1;
                let reached = (f.received_writes.get(value).into_iter().flatten())
                    .any(|(d, tick)| before(d, *tick));
                if !reached {
                    found.push(fail(format!(
                        "{mgr} took over {store} with key {key} = {value} at {version:?}, a write no device had received before recording"
                    )));
                }
            }
            // Grants acknowledged at the cut are held, unless their session may have
            // released them by then.
            for (d, tick, s, name, session, token) in &f.grants {
                if !first_takeover || s != store || !before(d, *tick) {
                    continue;
                }
                let touched = (f.session_touches.iter())
                    .any(|(t, st, se)| *t < last && st == s && se == session);
                if touched {
                    continue;
                }
                self.stats.restore_checks += 1;
                let held = tables.locks.holders(name).unwrap_or_default();
                if !held
                    .iter()
                    .any(|h| h.session == *session && h.token == *token)
                {
                    found.push(fail(format!(
                        "{mgr} took over {store} without the grant of {name} to {session:?} ({token:?}) acknowledged by {d} before its record; {}",
                        cut_store(cut, *store, Some(name))
                    )));
                }
            }
            // Releases acknowledged at the cut are not undone.
            for (d, tick, s, name, session) in &f.releases {
                if s != store || !before(d, *tick) {
                    continue;
                }
                let Some(token) = (f.grants.iter())
                    .filter(|g| g.1 < *tick && g.2 == *s && g.3 == *name && g.4 == *session)
                    .map(|g| g.5)
                    .next_back()
                else {
                    continue;
                };
                self.stats.restore_checks += 1;
                let held = tables.locks.holders(name).unwrap_or_default();
                if held
                    .iter()
                    .any(|h| h.session == *session && h.token == token)
                {
                    found.push(fail(format!(
                        "{mgr} took over {store} with {name} held by {session:?} ({token:?}), released by {d} before its record"
                    )));
                }
            }
            self.stats.restore_checks += 1;
            if let Some((name, holders)) = conflicting_holders(tables) {
                found.push(fail(format!(
                    "{mgr} took over {store} with {name} held by {holders}"
                )));
            }
        }
        if let Some(v) = found.into_iter().next() {
            self.violations.push(v);
        }
    }
}
