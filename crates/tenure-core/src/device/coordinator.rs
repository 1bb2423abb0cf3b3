//! The device's part in the cluster coordinator (DESIGN §6): its election, the
//! coordinator's rounds when this device is coordinator, the reports of the stores it
//! manages, and membership.

use super::*;
use crate::election::coordinator::CoordMsg;
use crate::election::members::{MemberState, Members};
use crate::election::{ElectionMsg, ElectorOut, Term};
use crate::ids::DeviceId;
use crate::io::Output;
use crate::io::observation::Observation;
use crate::io::persist::PersistOp;
use crate::io::policy::PolicyCommand;
use crate::msg::Msg;
use crate::time::Instant;

impl Device {
    /// The election role's next deadline: the elector's, the coordinator's next round,
    /// and the next report.
    pub(super) fn election_timeout(&self) -> Option<Instant> {
        use crate::time::earliest;
        if !self.env.cfg.election.enabled {
            return None;
        }
        let t = earliest(self.elector.poll_timeout(), self.coord.next_timeout());
        let t = earliest(t, self.next_snapshot);
        earliest(t, Some(self.next_report))
    }

    pub(super) fn on_election_tick(&mut self, now: Instant, out: &mut Vec<Output>) {
        if self.elector.poll_timeout().is_some_and(|t| t <= now) {
            self.elector.handle_timeout(now);
            self.drain_elector(now, out);
        }
        if self.next_report <= now {
            self.next_report = now + self.env.cfg.timing.renewal_period;
            self.report(now, out);
        }
        let every = self.env.cfg.snapshot.every;
        if self.coord.term().is_some() && !every.is_zero() {
            match self.next_snapshot {
                None => self.next_snapshot = Some(now + every),
                Some(t) if t <= now => {
                    self.next_snapshot = Some(now + every);
                    self.start_snapshot(now, out);
                }
                Some(_) => {}
            }
        } else {
            self.next_snapshot = None;
        }
        if self.coord.next_timeout().is_some_and(|t| t <= now) {
            let round = self.coord.on_tick(now, &self.env.cfg);
            let Some(term) = self.coord.term() else {
                return;
            };
            let me = self.id();
            if let Some((members, to)) = round.members {
                for d in to {
                    out.push(Output::Send {
                        to: d,
                        msg: Msg::Coord(CoordMsg::Members {
                            term,
                            members: members.clone(),
                        }),
                    });
                }
                self.adopt_members(now, members, out);
            }
            for d in round.decisions {
                out.push(Output::Observe(Observation::CommandSent {
                    term,
                    to: d.to,
                    cmd: d.cmd.clone(),
                }));
                let msg = CoordMsg::Command { term, cmd: d.cmd };
                if d.to == me {
                    self.on_coord(now, me, msg, out);
                } else {
                    out.push(Output::Send {
                        to: d.to,
                        msg: Msg::Coord(msg),
                    });
                }
            }
        }
    }

    /// Take the elector's outputs: messages go out; a newly followed term is persisted
    /// before anything of this batch leaves the device, and starts or stops this
    /// device's coordinator role.
    pub(super) fn drain_elector(&mut self, now: Instant, out: &mut Vec<Output>) {
        if !self.env.cfg.election.enabled {
            while self.elector.poll_output().is_some() {}
            return;
        }
        while let Some(o) = self.elector.poll_output() {
            match o {
                ElectorOut::Send { to, msg } => out.push(Output::Send {
                    to,
                    msg: Msg::Election(msg),
                }),
                ElectorOut::Coordinator { term } => {
                    self.raise_term(term, out);
                    out.push(Output::Observe(Observation::Coordinator { term }));
                    let acts =
                        term.leader == self.id() || self.env.cfg.planted.election_follower_acts;
                    if acts {
                        self.coord.start(term, now, &self.env.cfg, &self.members);
                    } else {
                        self.coord.stop();
                    }
                    // Report to the new coordinator at once.
                    self.next_report = now;
                }
            }
        }
    }

    /// An announcement or Alive naming a coordinator this device's record does not list:
    /// one of the two records is out of date. The sender gets this device's record; if
    /// its own is newer it answers with it (see [`Device::on_coord`]), if older it
    /// adopts this one. Without this, a device that missed the record admitting the
    /// coordinator ignores it and calls elections without end, each raising the
    /// coordinator's term before its first decision round (simulator seed 2387: a
    /// retiring device, never told of the newer record, started a ring election every
    /// 0.9 s for 15 s after faults stopped).
    pub(super) fn unknown_leader(
        &mut self,
        from: DeviceId,
        m: &ElectionMsg,
        out: &mut Vec<Output>,
    ) {
        let named = match m {
            ElectionMsg::Coordinator { term, .. }
            | ElectionMsg::RingCoordinator { term, .. }
            | ElectionMsg::Alive { term } => term.leader,
            _ => return,
        };
        if named == self.id() || self.members.contains(named) || from == self.id() {
            return;
        }
        out.push(Output::Send {
            to: from,
            msg: Msg::Coord(CoordMsg::Members {
                term: self.term,
                members: self.members.clone(),
            }),
        });
    }

    /// Record (durably) that `term` exists, if it is the newest seen.
    fn raise_term(&mut self, term: Term, out: &mut Vec<Output>) {
        if term > self.term {
            self.term = term;
            out.push(Output::Persist(PersistOp::SetTerm(term)));
        }
    }

    /// Report to the coordinator this device follows: the chunks it holds and the
    /// stores it manages.
    pub(super) fn report(&mut self, now: Instant, out: &mut Vec<Output>) {
        self.ask_readmission(out);
        let Some(term) = self.elector.coordinator() else {
            return;
        };
        let mut msgs = vec![CoordMsg::Member {
            term,
            chunks: self.chunks.len() as u32,
            members: self.members.clone(),
        }];
        if let Some(lost) = &self.lost_record {
            msgs.push(CoordMsg::Member {
                term,
                chunks: self.chunks.len() as u32,
                members: lost.clone(),
            });
        }
        msgs.extend(
            (self.managers.values())
                .filter_map(|m| m.report(now))
                .map(|report| CoordMsg::Store { term, report }),
        );
        let me = self.id();
        for msg in msgs {
            if term.leader == me {
                self.on_coord(now, me, msg, out);
            } else {
                out.push(Output::Send {
                    to: term.leader,
                    msg: Msg::Coord(msg),
                });
            }
        }
    }

    /// A device an operator admitted whose admission was lost (a newer record of
    /// another coordinator left it out, not retired) asks every member of the record it
    /// has to admit it again, once a renewal period until a record lists it. Otherwise
    /// it follows no coordinator and reports nothing, and the stores it still manages
    /// are never reported: no retirement could be judged drained (simulator seeds
    /// 1455, 1565, 3275: a device admitted in a record that lost kept managing a store;
    /// the removals the operator asked for never completed).
    fn ask_readmission(&mut self, out: &mut Vec<Output>) {
        let me = self.id();
        if self.members.contains(me) || self.members.retired.contains(&me) {
            self.readmit = None;
        }
        let Some((peer_addr, client_addr)) = &self.readmit else {
            return;
        };
        let cmd = PolicyCommand::AddDevice {
            device: me,
            peer_addr: peer_addr.clone(),
            client_addr: client_addr.clone(),
        };
        for to in self.members.ids() {
            out.push(Output::Send {
                to,
                msg: Msg::Coord(CoordMsg::Request { cmd: cmd.clone() }),
            });
        }
    }

    pub(super) fn on_coord(
        &mut self,
        now: Instant,
        from: DeviceId,
        msg: CoordMsg,
        out: &mut Vec<Output>,
    ) {
        match msg {
            CoordMsg::Member {
                term,
                chunks,
                members,
            } => {
                // A member that reports an older record than ours (it refused the newer
                // one from a coordinator since deposed, and now follows a term that has
                // ended) gets ours, under our term: otherwise it ignores the members it
                // does not know, the coordinator among them, and elects forever.
                if members.version < self.members.version && from != self.id() {
                    out.push(Output::Send {
                        to: from,
                        msg: Msg::Coord(CoordMsg::Members {
                            term: self.term,
                            members: self.members.clone(),
                        }),
                    });
                }
                self.coord.on_member(now, from, term, chunks, &members);
                self.adopt_members(now, members, out);
            }
            // DESIGN §6: a record from a deposed coordinator is refused, as its commands
            // are (its change may be lost: a device must not retire on it). The
            // coordinator this device follows is not deposed even when it writes an
            // older term: it can have been elected again under a newer one whose
            // announcement reached this device and not it (the members that carried it
            // had dropped this device from their record).
            // Nor is a record that leaves out the coordinator this device follows: that
            // coordinator's term counts for nothing in it (a device admitted by a record
            // that lost to another of the same number elects itself alone, and its terms
            // would otherwise keep the members that followed it from ever learning).
            CoordMsg::Members { term, members } => {
                let followed = self.elector.coordinator().is_some_and(|t| t.leader == from);
                let outside = (self.elector.coordinator())
                    .is_some_and(|t| !members.contains(t.leader))
                    && members.version > self.members.version;
                // Nor is a newer record that makes this device retiring: a retiring device
                // claims no term, and one that missed its retirement outranks, under
                // bully, the coordinator that decided it, which in turn outranks it — the
                // two would depose each other without end (simulator seed 1095).
                let retires_me = members.version > self.members.version
                    && members.retiring().contains(&self.id());
                if members.version < self.members.version && from != self.id() && !followed {
                    // A sender with an older record (a coordinator since deposed, or one
                    // elected by a record that lost) gets ours, under our term, as a
                    // member reporting an older record does: it learns of the devices it
                    // does not know and stops acting on a record no one else follows
                    // (simulator seed 1455).
                    out.push(Output::Send {
                        to: from,
                        msg: Msg::Coord(CoordMsg::Members {
                            term: self.term,
                            members: self.members.clone(),
                        }),
                    });
                } else if term >= self.term
                    || followed
                    || outside
                    || retires_me
                    || self.env.cfg.planted.members_adopt_older
                {
                    self.adopt_members(now, members, out)
                }
            }
            CoordMsg::Request { cmd } => self.membership_request(now, cmd, out),
            CoordMsg::Store { term, report } => self.coord.on_store(now, from, term, report),
            CoordMsg::Command { term, cmd } => {
                // A command of a coordinator this device's record lists as retired is
                // refused like a deposed one's (it was elected by a side of a partition
                // that had not heard of the retirement).
                let retired = self.members.retired.contains(&term.leader);
                if (term < self.term || retired) && !self.env.cfg.planted.election_ignore_term {
                    out.push(Output::Observe(Observation::CommandRefused {
                        term,
                        newest: self.term,
                    }));
                    return;
                }
                self.raise_term(term, out);
                out.push(Output::Observe(Observation::CommandApplied {
                    term,
                    cmd: cmd.clone(),
                }));
                self.on_policy(now, cmd, out);
            }
        }
    }

    /// An operator's membership request: the coordinator applies it, anyone else
    /// forwards it to the coordinator it follows.
    pub(super) fn membership_request(
        &mut self,
        _now: Instant,
        cmd: PolicyCommand,
        out: &mut Vec<Output>,
    ) {
        if self.coord.term().is_some() {
            self.coord.on_request(cmd);
        } else if let Some(t) = self.elector.coordinator()
            && t.leader != self.id()
        {
            out.push(Output::Send {
                to: t.leader,
                msg: Msg::Coord(CoordMsg::Request { cmd }),
            });
        }
    }

    /// Adopt `members` if it is newer than the record this device has: persisted first,
    /// then the cluster's device list, the election and the lookup service follow it.
    fn adopt_members(&mut self, now: Instant, members: Members, out: &mut Vec<Output>) {
        let older = if self.env.cfg.planted.members_adopt_older {
            members.version == self.members.version
        } else {
            members.version <= self.members.version
        };
        if older {
            return;
        }
        out.push(Output::Persist(PersistOp::SetMembers(Box::new(
            members.clone(),
        ))));
        let me = self.id();
        let retired = members.retired.contains(&me) && !self.members.retired.contains(&me);
        if let Some(i) = self.members.devices.get(&me)
            && i.state == MemberState::Active
            && !members.contains(me)
            && !members.retired.contains(&me)
        {
            self.readmit = Some((i.peer_addr.clone(), i.client_addr.clone()));
        }
        if self.members.ahead_of(&members) {
            let mut lost = self.lost_record.take().unwrap_or_default();
            lost.merge(self.term, &self.members, usize::MAX);
            self.lost_record = Some(lost);
        }
        if self
            .lost_record
            .as_ref()
            .is_some_and(|l| !l.ahead_of(&members))
        {
            self.lost_record = None;
        }
        let ids = members.ids();
        if let Some(term) = self.coord.term() {
            let min_active = self.env.cfg.cluster.replication.max(1);
            self.coord.members.merge(term, &members, min_active);
        }
        self.members = members.clone();
        self.env.cfg.cluster.devices = ids.clone();
        self.lookup.set_devices(ids.clone());
        self.elector.set_members(now, ids);
        self.elector.set_retiring(now, self.members.retiring());
        self.drain_elector(now, out);
        out.push(Output::Observe(Observation::Members { members }));
        if retired {
            out.push(Output::Observe(Observation::Retired));
        }
        self.timers.get_mut().stale = Stale::All;
    }
}
