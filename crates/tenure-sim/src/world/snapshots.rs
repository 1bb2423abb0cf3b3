//! Snapshots in the world (see [`crate::snapshot`]): starting them, following their
//! records, parts and results, and restoring complete ones into a fresh cluster.

use super::{EVENTS_MAX, Event, SAMPLE_US, SimConfig, World};
use crate::snapshot::{Cut, Restored, SnapshotViolation};
use tenure_core::DeviceId;
use tenure_core::io::{ClientError, Input, Request, Response, SnapshotSummary};
use tenure_core::rng::mix64;
use tenure_core::snapshot::{SnapshotId, SnapshotPart};

/// After the liveness phase's snapshots start, they get the snapshot timeout and this
/// much more to complete (µs).
const SNAPSHOT_SETTLE_SLACK_US: u64 = 2_000_000;
/// Every store of a restored cluster regains a manager within this long at least (µs).
const RESTORE_BOUND_US: u64 = 30_000_000;

/// Snapshots and their restores: the world's part beside the checker.
pub(super) struct SnapshotWorld {
    /// What the run seed drew for snapshots.
    pub(super) knobs: crate::snapshot::SnapshotKnobs,
    /// Draws when snapshots start and where.
    pub(super) rng: tenure_core::rng::Rng,
    /// Complete snapshots waiting for their restore.
    pub(super) to_restore: Vec<Cut>,
    /// Restores of snapshots started while faults were on, so far.
    pub(super) restores_faulty: u32,
    /// The snapshots started, with the members of their initiator's record then.
    pub(super) members: std::collections::BTreeMap<SnapshotId, Vec<DeviceId>>,
}

impl World {
    fn device_ids(&self) -> Vec<DeviceId> {
        self.nodes.keys().copied().collect()
    }

    fn snapshot_timeout_us(&self) -> u64 {
        let s = &self.nodes.values().next().expect("a device").cfg.snapshot;
        s.timeout.as_micros() as u64
    }

    /// Start a snapshot at a random running member.
    pub(super) fn start_snapshot(&mut self) {
        let running: Vec<DeviceId> = (self.device_ids().into_iter())
            .filter(|d| self.running(*d) && self.is_member(*d))
            .collect();
        if running.is_empty() {
            return;
        }
        let d = running[self.snap.rng.below(running.len() as u64) as usize];
        self.trace(|| format!("{d} starts a snapshot"));
        self.input(d, Input::StartSnapshot);
    }

    /// Once the liveness phase has converged: two snapshots at once, at two devices.
    pub(super) fn start_calm_snapshots(&mut self) {
        if self.restore.is_some() {
            return;
        }
        self.start_snapshot();
        self.start_snapshot();
    }

    /// Wait for the liveness phase's snapshots to end; each must have completed.
    pub(super) fn settle_snapshots(&mut self) {
        let until = self.now + self.snapshot_timeout_us() + SNAPSHOT_SETTLE_SLACK_US;
        while !self.failed()
            && self.report.events <= EVENTS_MAX
            && !self.cuts.calm_all_ended()
            && self
                .queue
                .first_key_value()
                .is_some_and(|((t, _), _)| *t <= until)
        {
            self.step();
        }
        if self.failed() {
            return;
        }
        for (id, why) in self.cuts.calm_unfinished() {
            self.cuts
                .violations
                .push(SnapshotViolation::NotCompleted { id, why });
        }
    }

    /// A request reached a device: note what may end a session's grants.
    pub(super) fn snap_note_request(&mut self, input: &Input) {
        if let Input::Request {
            req:
                Request::Release { store, session, .. }
                | Request::ReleaseFenced { store, session, .. }
                | Request::CloseSession { store, session },
            ..
        } = input
        {
            self.cuts.facts.session_touched(self.tick, *store, *session)
        }
    }

    /// A device answered a client: note acknowledged writes, grants and releases.
    pub(super) fn snap_note_reply(
        &mut self,
        d: DeviceId,
        req_id: u64,
        result: &Result<Response, ClientError>,
    ) {
        if let (Some(w), Ok(Response::Written { version })) = (self.writes.get(&req_id), result) {
            // Acknowledged when the reply leaves, not when the manager decides: a crash
            // before the write's persists are durable loses the reply with them (sim seed
            // 20266), and the write is then only in flight at a cut.
            let (store, key) = (w.store, w.key);
            self.cuts
                .facts
                .write_acked(d, self.tick, store, key, *version);
            return;
        }
        let Some(r) = self.lock_reqs.get(&req_id) else {
            return;
        };
        match (&r.req, result) {
            (
                Request::Acquire {
                    store,
                    session,
                    name,
                    ..
                },
                Ok(Response::Granted { token }),
            ) => self
                .cuts
                .facts
                .granted(d, self.tick, *store, name, *session, *token),
            (
                Request::Release {
                    store,
                    session,
                    name,
                    ..
                }
                | Request::ReleaseFenced {
                    store,
                    session,
                    name,
                    ..
                },
                Ok(Response::Released),
            ) => self
                .cuts
                .facts
                .released(d, self.tick, *store, name, *session),
            _ => {}
        }
    }

    /// `d` recorded snapshot `id` (at the current output). `at` is the message being
    /// delivered: (sender, number, whether any of its effects already left).
    pub(super) fn snap_recorded(
        &mut self,
        d: DeviceId,
        id: SnapshotId,
        at: Option<(DeviceId, u64, bool)>,
    ) {
        let boot = self.nodes[&d].boot;
        let peers = self.device_ids();
        (self.cuts).recorded(id, d, boot, self.tick, self.now, &peers, at);
    }

    pub(super) fn snap_started(&mut self, d: DeviceId, id: SnapshotId) {
        self.trace(|| format!("{d} started snapshot {id}"));
        let members = (self.nodes[&d].device.as_ref()).map(|dev| dev.members().ids());
        self.snap.members.insert(id, members.unwrap_or_default());
        self.cuts.started(id, !self.faults_on);
    }

    pub(super) fn snap_part(&mut self, d: DeviceId, part: SnapshotPart) {
        let boot = self.nodes[&d].boot;
        self.cuts.part(d, boot, part);
    }

    /// A snapshot ended at its initiator: a complete one is checked as a cut, then
    /// restored (every one started after faults stopped; a few of the others).
    pub(super) fn snap_ended(&mut self, id: SnapshotId, result: Result<SnapshotSummary, String>) {
        self.trace(|| format!("snapshot {id} ended: {result:?}"));
        let calm = self.cuts.is_calm(id);
        let devices = self.snapshot_devices(id, &result);
        let Some(cut) = self.cuts.ended(id, result, &devices) else {
            return;
        };
        if self.restore.is_some() {
            return;
        }
        if !calm {
            if self.snap.restores_faulty >= self.snap.knobs.restores_max {
                return;
            }
            self.snap.restores_faulty += 1;
        }
        self.snap.to_restore.push(cut);
    }

    /// The devices a complete snapshot must have a part from: the members of its
    /// initiator's record when it started — or, when membership changed while it ran,
    /// the devices it names, which must include every one of those still a member.
    fn snapshot_devices(
        &mut self,
        id: SnapshotId,
        result: &Result<SnapshotSummary, String>,
    ) -> Vec<DeviceId> {
        let start = self.snap.members.remove(&id).unwrap_or_default();
        let (Ok(summary), false) = (result, start.is_empty()) else {
            return self.device_ids();
        };
        let newest = self.members.newest();
        let changed = start != newest.ids();
        if !changed {
            return start;
        }
        let mut named = summary.devices.clone();
        for d in start {
            if newest.contains(d) && !named.contains(&d) {
                named.push(d);
            }
        }
        named.sort();
        named
    }

    /// Restore the complete snapshots waiting, each into a fresh cluster, and judge it.
    pub(super) fn restore_pending(&mut self) {
        while let Some(cut) = self.snap.to_restore.pop() {
            if self.failed() {
                return;
            }
            let r = World::restored(&self.cfg, &cut);
            self.trace(|| {
                format!(
                    "restore of snapshot {}: {} events, every store managed after {:?}us, {} takeovers",
                    cut.id,
                    r.events,
                    r.converged_us,
                    r.takeovers.len()
                )
            });
            if self.cfg.trace {
                for line in r.trace.lines() {
                    self.trace(|| format!("  restore {}: {line}", cut.id));
                }
            }
            self.cuts.judge_restore(&cut, &r);
        }
    }

    /// In a restored cluster: the messages recorded in flight arrive before anything
    /// else, in order.
    pub(super) fn deliver_recorded(&mut self, cut: &Cut) {
        for (to, part) in &cut.parts {
            let boot = self.nodes[to].boot;
            for (from, msgs) in &part.channels {
                for m in msgs {
                    self.schedule(
                        self.now + 1,
                        Event::Deliver {
                            from: *from,
                            to: *to,
                            boot,
                            seq: 0,
                            msg: Box::new(m.clone()),
                        },
                    );
                }
            }
        }
    }

    /// A cluster booted from `cut`, run without faults or clients until every store has
    /// a working manager (or the liveness bound passes).
    fn restored(parent: &SimConfig, cut: &Cut) -> Restored {
        let mut cfg = parent.clone();
        cfg.seed = mix64(parent.seed ^ cut.id.serial.rotate_left(17) ^ cut.id.initiator.0);
        cfg.faults = false;
        cfg.writes = false;
        cfg.objects = false;
        cfg.keep_history = false;
        let mut w = World::build(cfg, Some(cut));
        let start = w.now;
        // A restore is judged on its own bound: a run whose liveness phase is made short
        // (to show liveness failures) must not turn a slow restore into a broken cut.
        let deadline = start + w.cfg.liveness_us.max(RESTORE_BOUND_US);
        let mut converged = None;
        while w.now < deadline && !w.failed() && w.report.events <= EVENTS_MAX {
            let Some(((t, _), ev)) = w.queue.first_key_value() else {
                break;
            };
            if matches!(ev, Event::Sample) {
                let t = *t;
                w.queue.pop_first();
                w.now = t;
                w.report.events += 1;
                if w.sample() {
                    converged = Some(w.now - start);
                    break;
                }
                w.schedule(w.now + SAMPLE_US, Event::Sample);
                continue;
            }
            w.step();
        }
        let mut r = w.restore.take().unwrap_or_default();
        r.trace = std::mem::take(&mut w.report.trace);
        r.events = w.report.events;
        r.converged_us = converged;
        if converged.is_none() {
            let why: Vec<String> = (w.managed().into_iter())
                .filter_map(|(s, v)| v.err().map(|e| format!("{s}: {e}")))
                .collect();
            r.unmanaged = Some(why.join("; "));
        }
        let mut vs: Vec<String> = (w.checker.violations.iter())
            .map(|v| v.to_string())
            .collect();
        vs.extend(w.locks.violations.iter().map(|v| v.to_string()));
        vs.extend(w.elections.violations.iter().map(|v| v.to_string()));
        r.violations = vs;
        r
    }
}
