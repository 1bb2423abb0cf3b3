//! The devices' lives: boot from the durable disk, crash (between two inputs or in the
//! middle of an output batch), inputs and due timers, the processing of one output batch
//! (persists, messages, replies, observations, checks), and pauses ending.

use super::{Event, World, disk};
use tenure_core::io::{Input, Observation, Output};
use tenure_core::msg::{ForwardMsg, Msg};
use tenure_core::{Device, DeviceId};

impl World {
    /// Start `d` from its durable disk (a retired device stays down).
    pub(super) fn boot(&mut self, d: DeviceId) {
        let now = self.now;
        let node = self.nodes.get_mut(&d).expect("node");
        node.retire_pending = false;
        // A retired device is never started again (the server exits at boot).
        if node.retired || (node.disk.members.as_ref()).is_some_and(|m| m.retired.contains(&d)) {
            node.retired = true;
            return;
        }
        node.boot += 1;
        node.paused_until = None;
        node.held = None;
        node.deferred.clear();
        let seed = node.rng.next_u64();
        node.clock.boot(now);
        if node.clock.life_us != 0 {
            self.report.faults.boots_after_step += 1;
        }
        let node = self.nodes.get_mut(&d).expect("node");
        let local = node.clock.local(now);
        let (dev, out) = Device::new(node.cfg.clone(), node.disk.clone(), local, seed);
        node.device = Some(dev);
        let boot = node.boot;
        let term = node.disk.term;
        let record = node.disk.members.clone();
        self.elections.booted(d, term);
        self.members.booted(now, d, record.as_ref());
        self.trace(|| format!("{d} boot #{boot}"));
        self.mix(0xb007 ^ d.0);
        self.process(d, out);
    }

    /// Crash a device between two inputs (`torn`: in the middle of an output batch, so
    /// its memory may legitimately be ahead of its disk).
    pub(super) fn crash(&mut self, d: DeviceId, torn: bool) {
        let node = self.nodes.get_mut(&d).expect("node");
        node.torn_crash = None;
        // A batch a pause stopped half-way is torn by the crash.
        let torn = torn || node.held.take().is_some();
        self.cuts.crashed(d);
        let node = self.nodes.get_mut(&d).expect("node");
        if let Some(dev) = node.device.take() {
            node.timer_generation += 1;
            node.paused_until = None;
            node.deferred.clear();
            if !torn {
                let memory = dev.persistent();
                self.checker.persisted(d, &memory, &self.nodes[&d].written);
            }
            self.report.faults.crashes += 1;
            self.trace(|| format!("{d} crash{}", if torn { " (mid-batch)" } else { "" }));
            self.disk_crash(d);
        }
    }

    /// One input to a running device, then its outputs.
    pub(super) fn input(&mut self, d: DeviceId, input: Input) {
        let node = self.nodes.get_mut(&d).expect("node");
        let local = node.clock.local(self.now);
        if node.device.is_none() {
            return;
        }
        self.tick += 1;
        self.snap_note_request(&input);
        let node = self.nodes.get_mut(&d).expect("node");
        let dev = node.device.as_mut().expect("running");
        let out = dev.handle(local, input);
        self.process(d, out);
    }

    /// Give `d` a tick if a timer of its is due (at most a few times in a row).
    pub(super) fn fire_due_timers(&mut self, d: DeviceId) {
        for _ in 0..3 {
            let node = &self.nodes[&d];
            let local = node.clock.local(self.now);
            let due = (node.device.as_ref())
                .and_then(Device::poll_timeout)
                .is_some_and(|t| t <= local);
            if !due {
                return;
            }
            self.input(d, Input::Tick);
        }
    }

    /// Apply one device's outputs in order (persist to its disk, send, reply), then run
    /// the checkers on its observations — after the whole batch, so they see what it made
    /// durable — and on its manager roles, then re-arm its timer.
    fn process(&mut self, d: DeviceId, mut out: Vec<Output>) {
        // A torn crash: only a prefix of the batch happens (a `Persist` reached the disk
        // or not, a message left or not), in order — the core promises nothing depends
        // on a later output.
        let torn = match self.nodes[&d].torn_crash {
            Some(delay) if !out.is_empty() => {
                let k = self.nemesis_rng.below(out.len() as u64 + 1) as usize;
                out.truncate(k);
                Some(delay)
            }
            _ => None,
        };
        // A pause that waits for a coordinator command stops the process between
        // deciding it and sending it: the rest of the batch leaves when it resumes.
        let held = match torn {
            None => self.hold_at_command(d, &mut out),
            Some(_) => None,
        };
        // The message being delivered: whether any of its effects left before a record.
        let delivering = self.delivering.take();
        let mut effects = false;
        let mut observed = Vec::new();
        for o in out {
            self.tick += 1;
            match o {
                Output::Persist(op) => {
                    // The snapshot machine's own record of what it recorded is not an
                    // effect of the message being processed.
                    effects |= !matches!(op, tenure_core::PersistOp::SetSnapshots(_));
                    if self.cfg.capture > 0
                        && (self.report.captured).wants(format!("{op:?}"), self.cfg.capture)
                    {
                        self.report.captured.persists.push(op.clone());
                    }
                    if let tenure_core::PersistOp::BlockDelete { chunk, ids } = &op {
                        self.obj_on_block_delete(d, *chunk, ids);
                    }
                    self.persist(d, op);
                }
                Output::Send { to, msg } => {
                    effects |= crate::snapshot::carried(&msg).is_some();
                    if let Msg::Forward(ForwardMsg::Request { .. }) = &msg {
                        self.report.forwarded += 1;
                    }
                    if self.cfg.capture > 0
                        && (self.report.captured).wants(format!("{msg:?}"), self.cfg.capture)
                    {
                        self.report.captured.msgs.push(msg.clone());
                    }
                    self.let_out(d, disk::Held::Send { to, msg })
                }
                Output::Reply { req_id, result, .. } => {
                    effects = true;
                    self.let_out(d, disk::Held::Reply { req_id, result })
                }
                Output::SetTimer(_) => {}
                Output::Observe(Observation::SnapshotRecorded { id }) => {
                    let at = delivering.map(|(from, seq)| (from, seq, effects));
                    self.snap_recorded(d, id, at);
                    observed.push((self.tick, Observation::SnapshotRecorded { id }));
                }
                Output::Observe(ob) => {
                    effects = true;
                    observed.push((self.tick, ob))
                }
                Output::LookupEvent(_) => effects = true,
                Output::ObjectEvents {
                    client,
                    watch,
                    changes,
                    values,
                } => {
                    effects = true;
                    let held = disk::Held::ObjectEvents {
                        client,
                        watch,
                        changes,
                        values,
                    };
                    self.let_out(d, held)
                }
                Output::WatchEnded {
                    client,
                    watch,
                    reason,
                } => {
                    effects = true;
                    let held = disk::Held::WatchEnded {
                        client,
                        watch,
                        reason,
                    };
                    self.let_out(d, held)
                }
                Output::SnapshotStarted { id } => self.snap_started(d, id),
                Output::SnapshotPart(part) => self.snap_part(d, *part),
                Output::SnapshotEnded { id, result } => self.snap_ended(id, result),
            }
        }
        // A record whose persist a tear cut off never happened as far as anyone can tell
        // (its markers wait for that persist): the device may record it again (sim seed
        // 30996).
        let written = &self.nodes[&d].written.snapshots;
        let cut_off: Vec<tenure_core::snapshot::SnapshotId> = (observed.iter())
            .filter_map(|(_, ob)| match ob {
                Observation::SnapshotRecorded { id } if torn.is_some() && !written.contains(id) => {
                    Some(*id)
                }
                _ => None,
            })
            .collect();
        for (tick, ob) in observed {
            self.observe(d, tick, ob);
        }
        if let Some(delay) = torn {
            self.report.faults.torn_crashes += 1;
            if !cut_off.is_empty() {
                let boot = self.nodes[&d].boot;
                self.cuts.unrecorded(d, boot, &cut_off);
            }
            self.crash(d, true);
            self.schedule(self.now + delay, Event::Restart(d));
            return;
        }
        self.disk_turn_end(d);
        if self.nodes[&d].retire_pending {
            self.stop_retired(d);
            return;
        }
        if let Some(rest) = held {
            self.nodes.get_mut(&d).expect("node").held = Some(rest);
        }
        if let Some(dev) = self.nodes[&d].device.as_ref() {
            let acting = dev.acting_coordinator();
            self.elections.acting(d, acting);
        }
        if let Some(dev) = self.nodes[&d].device.as_ref() {
            for (store, epoch) in dev.managing() {
                self.checker.manager_role(d, store, epoch);
            }
        }
        self.arm_timer(d);
    }

    /// Schedule `d`'s next timer at the real time its clock reaches it; older timers
    /// go stale.
    fn arm_timer(&mut self, d: DeviceId) {
        let skew = self.skew_max_us;
        let node = self.nodes.get_mut(&d).expect("node");
        node.timer_generation += 1;
        let generation = node.timer_generation;
        let Some(t) = node.device.as_ref().and_then(Device::poll_timeout) else {
            return;
        };
        let at = node.clock.real_at(t, skew).max(self.now + 1);
        self.schedule(
            at,
            Event::Timer {
                device: d,
                generation,
            },
        );
    }

    /// End a pause early: the inputs it deferred move up to now, in their order, so
    /// that nothing sent later overtakes them (channels are FIFO).
    pub(super) fn resume_now(&mut self, d: DeviceId) {
        let node = self.nodes.get_mut(&d).expect("node");
        node.paused_until = Some(self.now);
        for key in std::mem::take(&mut node.deferred) {
            if let Some(ev) = self.queue.remove(&key) {
                self.queue.insert((self.now, key.1), ev);
            }
        }
        self.resume(d);
    }

    /// End `d`'s pause if it is over: the rest of a held batch leaves, then a tick.
    pub(super) fn resume(&mut self, d: DeviceId) {
        let node = self.nodes.get_mut(&d).expect("node");
        if node.paused_until.is_some_and(|u| u <= self.now) {
            node.paused_until = None;
            node.deferred.clear();
            let held = node.held.take();
            self.trace(|| format!("{d} resumes"));
            // The rest of a batch the pause stopped leaves first.
            if let Some(rest) = held {
                self.process(d, rest);
            }
            // Let it notice how much time passed — unless the rest of the batch paused it
            // again, still holding a command: nothing after it may happen first
            // (simulator seed 1371: a tick run then made the device coordinator of a
            // newer term before its older term's command had left).
            let n = &self.nodes[&d];
            if n.device.is_some() && n.paused_until.is_none() {
                self.input(d, Input::Tick);
            }
        }
    }
}
