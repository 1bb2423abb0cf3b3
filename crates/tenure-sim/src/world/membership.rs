//! Membership changes in the world (see [`crate::membership`]): spare devices, the
//! operator's add and remove requests (repeated until the record shows them), retired
//! devices stopping for good, and the liveness phase's check that every change
//! completed.

use super::{Event, World};
use crate::membership::MembershipViolation;
use std::collections::BTreeSet;
use tenure_core::DeviceId;
use tenure_core::io::PolicyCommand;
use tenure_core::layout::MgrState;

/// Membership changes: the world's part beside the checker.
pub(super) struct MembershipWorld {
    /// What the run seed drew for membership changes.
    pub(super) knobs: crate::membership::MembershipKnobs,
    /// Draws the operator's requests and when they come.
    pub(super) rng: tenure_core::rng::Rng,
    /// The operator's membership requests, in order.
    pub(super) requests: Vec<MemberRequest>,
}

/// One membership change the operator asked for.
#[derive(Clone, Debug)]
pub(super) struct MemberRequest {
    device: DeviceId,
    /// An add (else a remove).
    add: bool,
    /// When it was first asked for (µs).
    at: u64,
    /// Whether the record shows it.
    done: bool,
}

impl World {
    /// Whether `d` is a member of the newest record and has not retired.
    pub(super) fn is_member(&self, d: DeviceId) -> bool {
        self.members.newest().contains(d) && !self.nodes[&d].retired
    }

    /// The membership record device `d` holds (the newest record seen, if it has no
    /// running machine).
    pub(super) fn record_of(&self, d: DeviceId) -> tenure_core::election::members::Members {
        (self.nodes.get(&d))
            .and_then(|n| n.device.as_ref())
            .map(|dev| dev.members().clone())
            .unwrap_or_else(|| self.members.newest().clone())
    }

    /// A device the operator's outside-policy commands may name: `drawn` if it is an
    /// active member, else an active member chosen from it (no draw, so a run without
    /// membership changes draws as before).
    pub(super) fn policy_target(&self, drawn: DeviceId) -> DeviceId {
        let rec = self.members.newest();
        if rec.is_active(drawn) {
            return drawn;
        }
        let active = rec.active();
        if active.is_empty() {
            return drawn;
        }
        active[(drawn.0 % active.len() as u64) as usize]
    }

    /// The device a client addresses when it drew `drawn` from the bootstrap devices:
    /// `drawn` if it is in the newest record, else a member chosen from it (no draw, so a
    /// run without membership changes draws as before). Clients know the current member
    /// list, as etcd clients sync their endpoints from the cluster (simulator seed 1210:
    /// four of the five bootstrap devices retired, spares admitted, and a watcher drawing
    /// only among the bootstrap ids reached a running device too rarely to catch up).
    pub(super) fn client_endpoint(&self, drawn: DeviceId) -> DeviceId {
        let rec = self.members.newest();
        if rec.contains(drawn) {
            return drawn;
        }
        let ids = rec.ids();
        if ids.is_empty() {
            return drawn;
        }
        ids[(drawn.0 % ids.len() as u64) as usize]
    }

    /// The operator asks for a membership change: add a spare, or remove an active
    /// member if enough running active members stay.
    pub(super) fn membership_change(&mut self) {
        let rec = self.members.newest().clone();
        let asked: BTreeSet<DeviceId> = self.mem.requests.iter().map(|r| r.device).collect();
        let adds: Vec<DeviceId> = (self.nodes.iter())
            .filter(|(d, n)| n.cfg.join && !n.retired && !asked.contains(d) && !rec.contains(**d))
            .map(|(d, _)| *d)
            .collect();
        // Active members no removal was asked for: one of them may go if as many as the
        // replication factor stay, running (never below the replication factor of live
        // members).
        let staying: Vec<DeviceId> = (rec.active().into_iter())
            .filter(|d| !self.mem.requests.iter().any(|r| r.device == *d && !r.add))
            .collect();
        let running = staying.iter().filter(|d| self.running(**d)).count();
        let removes = if staying.len() > self.cfg.replication && running > self.cfg.replication {
            staying
        } else {
            Vec::new()
        };
        let r = &mut self.mem.rng;
        let remove = match (adds.is_empty(), removes.is_empty()) {
            (true, true) => return,
            (false, true) => false,
            (true, false) => true,
            (false, false) => r.chance(self.mem.knobs.remove_p),
        };
        let (device, add) = if remove {
            (removes[r.below(removes.len() as u64) as usize], false)
        } else {
            (adds[r.below(adds.len() as u64) as usize], true)
        };
        if add {
            self.members.stats.adds_requested += 1;
        } else {
            self.members.stats.removes_requested += 1;
        }
        self.trace(|| {
            format!(
                "operator asks to {} {device}",
                if add { "add" } else { "remove" }
            )
        });
        self.mem.requests.push(MemberRequest {
            device,
            add,
            at: self.now,
            done: false,
        });
        self.membership_send(self.mem.requests.len() - 1);
    }

    /// Send request `i` to a random running device (unless the record shows it already),
    /// and come back to it later.
    pub(super) fn membership_send(&mut self, i: usize) {
        self.membership_note_done();
        let r = self.mem.requests[i].clone();
        if r.done {
            return;
        }
        let running: Vec<DeviceId> = (self.nodes.keys().copied())
            .filter(|d| self.running(*d))
            .collect();
        if !running.is_empty() {
            let to = running[self.mem.rng.below(running.len() as u64) as usize];
            let d = r.device;
            let cmd = if r.add {
                PolicyCommand::AddDevice {
                    device: d,
                    peer_addr: format!("sim-peer-{}", d.0),
                    client_addr: format!("sim-client-{}", d.0),
                }
            } else {
                PolicyCommand::RemoveDevice { device: d }
            };
            self.members.stats.requests_sent += 1;
            let boot = self.nodes[&to].boot;
            let lat = self.knobs.latency_min_us;
            self.schedule(self.now + lat, Event::PolicyArrive { to, boot, cmd });
        }
        let t = self.now + self.mem.knobs.repeat_us;
        self.schedule(t, Event::MembershipRepeat(i));
    }

    /// Mark the requests the newest record shows as done.
    pub(super) fn membership_note_done(&mut self) {
        // Judged on the newest record on some device's disk, not the newest observed: a
        // coordinator that crashed before its record was durable lost the change with it
        // (simulator seed 10229: an admission observed, its record lost unsynced, and the
        // operator went on to remove a device that was no member).
        let durable = (self.nodes.values())
            .filter_map(|n| n.disk.members.as_ref())
            .max_by_key(|m| m.version)
            .cloned()
            .unwrap_or_default();
        let rec = &durable;
        let mut done = Vec::new();
        for (i, r) in self.mem.requests.iter().enumerate() {
            if r.done {
                continue;
            }
            let shows = if r.add {
                rec.contains(r.device) || rec.retired.contains(&r.device)
            } else {
                rec.retired.contains(&r.device)
            };
            if shows {
                done.push(i);
            }
        }
        for i in done {
            let r = &mut self.mem.requests[i];
            r.done = true;
            let ms = (self.now - r.at) / 1_000;
            let (device, add) = (r.device, r.add);
            let s = &mut self.members.stats;
            if add {
                s.adds_admitted += 1;
                s.add_ms.record(ms);
            } else {
                s.removes_retired += 1;
                s.remove_ms.record(ms);
            }
            self.trace(|| {
                let what = if add { "admitted" } else { "retired" };
                format!("membership: {device} {what} after {ms} ms")
            });
        }
    }

    /// `d` observed its retirement: its process stops for good (its outputs have left).
    pub(super) fn stop_retired(&mut self, d: DeviceId) {
        // What it produced becomes durable and leaves before it stops.
        if self.nodes[&d].device.is_some() {
            self.disk_drain(d);
        }
        let node = self.nodes.get_mut(&d).expect("node");
        node.retire_pending = false;
        if node.device.take().is_none() {
            return;
        }
        node.retired = true;
        node.timer_generation += 1;
        node.paused_until = None;
        node.deferred.clear();
        node.held = None;
        node.torn_crash = None;
        self.cuts.crashed(d);
        self.members.stats.retirements += 1;
        self.trace(|| format!("{d} retired: its process stops for good"));
    }

    /// Every working manager's layout: no chunk on a retired device.
    pub(super) fn check_retired_chunks(&mut self) {
        if self.members.newest().retired.is_empty() {
            return;
        }
        for (store, mgr, md) in self.working_layouts() {
            for c in &md.chunks {
                self.members.chunk_in_use(c.device, c, store, mgr);
            }
        }
    }

    /// Each store's working manager (running, `Manager`, at the highest epoch any running
    /// manager of the store has) and its layout.
    fn working_layouts(
        &self,
    ) -> Vec<(
        tenure_core::StoreId,
        DeviceId,
        tenure_core::layout::Metadata,
    )> {
        let mut best: std::collections::BTreeMap<
            tenure_core::StoreId,
            (tenure_core::Epoch, DeviceId, tenure_core::layout::Metadata),
        > = Default::default();
        for (id, n) in &self.nodes {
            if !self.running(*id) {
                continue;
            }
            for m in n.device.as_ref().expect("running").manager_views() {
                if m.state != MgrState::Manager {
                    continue;
                }
                let e = best
                    .entry(m.store)
                    .or_insert((m.epoch, *id, m.metadata.clone()));
                if m.epoch > e.0 {
                    *e = (m.epoch, *id, m.metadata);
                }
            }
        }
        (best.into_iter())
            .map(|(s, (_, d, md))| (s, d, md))
            .collect()
    }

    /// A liveness sample of membership: every change asked for is in the record, every
    /// retired device has stopped, every running member holds the newest record, and
    /// every store's working manager has the full replication on active members only.
    pub(super) fn membership_settled(&mut self) -> Result<(), String> {
        self.members.stats.convergence_checks += 1;
        self.membership_note_done();
        let rec = self.members.newest().clone();
        let pending: Vec<String> = (self.mem.requests.iter())
            .filter(|r| !r.done)
            .map(|r| {
                let d = r.device;
                let what = if r.add { "add" } else { "remove" };
                let state = match self.nodes[&d].device.as_ref() {
                    None if self.nodes[&d].retired => "retired, stopped".to_string(),
                    None => "down".to_string(),
                    Some(dev) => format!(
                        "holds {} chunks, manages {:?}, record {}/{}",
                        dev.chunk_views().len(),
                        (dev.manager_views().iter())
                            .filter(|m| m.state == MgrState::Manager)
                            .map(|m| m.store.0)
                            .collect::<Vec<_>>(),
                        dev.members().version.n,
                        dev.members().version.term.n
                    ),
                };
                format!("{what} {d} ({state})")
            })
            .collect();
        if !pending.is_empty() {
            return Err(format!("pending: {}", pending.join(", ")));
        }
        for d in &rec.retired {
            if self.nodes.get(d).is_some_and(|n| n.device.is_some()) {
                return Err(format!("{d} retired in the record but still runs"));
            }
        }
        for d in rec.ids() {
            if !self.running(d) {
                return Err(format!("member {d} is not running"));
            }
            let held = self.nodes[&d].device.as_ref().expect("running").members();
            if held.version != rec.version {
                return Err(format!(
                    "{d} holds record {}/{}, the newest is {}/{}",
                    held.version.n, held.version.term.n, rec.version.n, rec.version.term.n
                ));
            }
        }
        let layouts = self.working_layouts();
        let mut seen = BTreeSet::new();
        for (store, mgr, md) in &layouts {
            seen.insert(*store);
            let off: Vec<String> = (md.chunks.iter())
                .filter(|c| !rec.is_active(c.device))
                .map(|c| c.to_string())
                .collect();
            if !off.is_empty() {
                return Err(format!(
                    "{store} (managed by {mgr}) has chunks off the active members: {}",
                    off.join(", ")
                ));
            }
            let devices: BTreeSet<DeviceId> = md.chunks.iter().map(|c| c.device).collect();
            if devices.len() < self.cfg.replication {
                return Err(format!(
                    "{store} (managed by {mgr}) has {} chunks on distinct devices, replication is {}",
                    devices.len(),
                    self.cfg.replication
                ));
            }
        }
        if seen.len() < self.cfg.stores as usize {
            return Err("a store has no working manager".into());
        }
        Ok(())
    }

    /// The liveness phase begins: note the changes still pending.
    pub(super) fn liveness_membership_start(&mut self) {
        self.membership_note_done();
        if self.mem.requests.iter().any(|r| !r.done) {
            self.members.stats.pending_at_liveness += 1;
        }
    }

    /// The liveness bound passed with membership unsettled: say what is pending.
    pub(super) fn membership_not_converged(&mut self, start: u64) {
        if let Err(why) = self.membership_settled() {
            self.members
                .violations
                .push(MembershipViolation::NotConverged {
                    after_us: self.now - start,
                    bound_us: self.cfg.liveness_us,
                    why,
                });
        }
    }
}
