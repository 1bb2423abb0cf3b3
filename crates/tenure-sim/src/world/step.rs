//! One step of the event loop: the next event off the queue (deferred while the device
//! it is an input to is paused), dispatched to what handles it.

use super::{Event, SAMPLE_US, World, exp};
use tenure_core::io::{Input, Request};
use tenure_core::{ClientId, DeviceId};

impl World {
    /// Process one event. Returns false when the queue is empty.
    pub(super) fn step(&mut self) -> bool {
        let Some(((at, seq), ev)) = self.queue.pop_first() else {
            return false;
        };
        self.now = at;
        // A paused device handles nothing until it resumes: defer its inputs, in order.
        // At the end of the pause it resumes before the first of them (the rest of a batch
        // the pause stopped leaves first).
        if let Some(t) = ev.target()
            && self.nodes[&t].paused_until.is_some()
        {
            if self.nodes[&t].paused_until.is_some_and(|u| u <= self.now) {
                self.resume(t);
            }
            // Paused still, or again: the rest of a batch the pause stopped may have
            // stopped it again before its command left (simulator seed 1371: an input
            // handled then made the device coordinator of a newer term first).
            if let Some(until) = self.nodes[&t].paused_until
                && until > self.now
            {
                self.queue.insert((until, seq), ev);
                self.nodes
                    .get_mut(&t)
                    .expect("node")
                    .deferred
                    .push((until, seq));
                return true;
            }
        }
        self.report.events += 1;
        self.mix(at ^ ev.tag().rotate_left(17));
        match ev {
            Event::Deliver {
                from,
                to,
                boot,
                seq,
                msg,
            } => {
                let node = &self.nodes[&to];
                if node.boot != boot || node.device.is_none() {
                    self.trace(|| format!("{from}->{to} dropped (receiver restarted or down)"));
                } else if !self.net.open(from, to) {
                    self.report.faults.lost += 1;
                    self.trace(|| format!("{from}->{to} dropped (partition)"));
                } else {
                    self.trace(|| format!("{from}->{to} #{seq} {msg:?}"));
                    if seq > 0 {
                        // Timers already due fire first, as an input of their own: what
                        // leaves the device in the delivery's batch is then the message's
                        // doing (or the snapshot machine's).
                        self.fire_due_timers(to);
                        self.cuts.delivering(from, to, boot, seq, &msg);
                        self.delivering = Some((from, seq));
                    }
                    self.delay_delivered(from, to, &msg);
                    self.input(to, Input::Message { from, msg: *msg });
                    self.delivering = None;
                    let node = &self.nodes[&to];
                    let crashed = node.boot != boot || node.device.is_none();
                    // A crash in the middle of the batch (torn) lost what the batch had
                    // not yet written, and its observations (a snapshot recorded first
                    // among them): the message counts as processed only if the batch
                    // finished (simulator seed 1876: counted, it put a message sent after
                    // the sender's record before the receiver's record made on restart).
                    if seq > 0 && !crashed && !self.asynchronous_disk() {
                        self.cuts.processed(from, to, seq, None);
                    } else if seq > 0 && !crashed {
                        // The open write group may still be lost by a later crash.
                        let group = node.pipe.groups();
                        self.cuts.processed(from, to, seq, Some(group));
                    }
                }
            }
            Event::ClientArrive { req, to, boot } => {
                let node = &self.nodes[&to];
                if node.boot == boot
                    && node.device.is_some()
                    && let Some(w) = self.writes.get(&req)
                {
                    self.cuts.facts.write_received(to, self.tick, w.value);
                    let req_in = Request::Write {
                        store: w.store,
                        key: w.key,
                        value: w.value,
                    };
                    self.trace(|| format!("client -> {to} req {req} {req_in:?}"));
                    self.input(
                        to,
                        Input::Request {
                            client: ClientId(1),
                            req_id: req,
                            req: req_in,
                        },
                    );
                }
            }
            Event::ClientTimeout { req, attempt } => {
                if self.writes.get(&req).is_some_and(|w| w.attempt == attempt) {
                    self.client_retry(req, None);
                }
            }
            Event::PolicyArrive { to, boot, cmd } => {
                if self.nodes[&to].boot == boot {
                    self.trace(|| format!("operator -> {to} {cmd:?}"));
                    self.input(to, Input::Policy(cmd));
                }
            }
            Event::Timer { device, generation } => {
                if self.nodes[&device].timer_generation == generation {
                    self.input(device, Input::Tick);
                }
            }
            Event::Nemesis => {
                if self.faults_on {
                    self.nemesis();
                    let t = self.exp_nemesis();
                    self.schedule(t, Event::Nemesis);
                }
            }
            Event::Workload if self.obj_quiet => {}
            Event::Workload => {
                self.new_write();
                let t = self.exp_workload();
                self.schedule(t, Event::Workload);
            }
            Event::Policy => {
                if self.faults_on {
                    self.policy();
                    let t = self.now + exp(&mut self.policy_rng, self.knobs.policy_mean_us);
                    self.schedule(t, Event::Policy);
                }
            }
            Event::Restart(d) => {
                if self.nodes[&d].device.is_none() {
                    self.boot(d);
                }
            }
            Event::Resume(d) => self.resume(d),
            Event::HealPartition(id) => {
                if self.net.partition.as_ref().is_some_and(|p| p.id == id) {
                    self.net.heal();
                    self.trace(|| format!("partition #{id} ends"));
                }
            }
            Event::Sample => {
                self.sample();
                self.check_retired_chunks();
                let timeout = self.nodes[&DeviceId(1)].cfg.snapshot.timeout;
                self.cuts.prune(self.now, timeout.as_micros() as u64);
                if !self.obj.clients.is_empty() {
                    self.obj_sample();
                }
                self.schedule(self.now + SAMPLE_US, Event::Sample);
            }
            Event::LockStep(_) if self.obj_quiet => {}
            Event::LockStep(c) => self.lock_step(c),
            Event::LockArrive { req, to, boot } => self.lock_arrive(req, to, boot),
            Event::LockTimeout { req, attempt } => self.lock_timeout(req, attempt),
            Event::KeepAliveDue(c, s) => self.keepalive_due(c, s),
            Event::ClientDeadline(c, s) => self.client_deadline_event(c, s),
            Event::ClientResume(c) => self.client_resume(c),
            Event::ObjStep(c) => self.obj_step(c),
            Event::ObjArrive { req, to, boot } => self.obj_arrive(req, to, boot),
            Event::ObjTimeout { req, attempt } => self.obj_timeout(req, attempt),
            Event::ObjKeepAlive(c, s) => self.obj_keepalive_due(c, s),
            Event::WatchCheck(w) => self.watch_check(w),
            Event::Snapshot => {
                if self.faults_on {
                    self.start_snapshot();
                    let t = self.now + exp(&mut self.snap.rng, self.snap.knobs.mean_us);
                    self.schedule(t, Event::Snapshot);
                }
            }
            Event::MembershipChange => {
                if self.faults_on {
                    self.membership_change();
                    let t = self.now + exp(&mut self.mem.rng, self.mem.knobs.change_mean_us);
                    self.schedule(t, Event::MembershipChange);
                }
            }
            Event::MembershipRepeat(i) => self.membership_send(i),
            Event::CrashManager => self.crash_manager(),
            Event::MigrateApart => self.migrate_apart(),
            Event::DiskSynced {
                device,
                boot,
                commit,
            } => self.disk_synced(device, boot, commit),
        }
        self.restore_pending();
        true
    }
}
