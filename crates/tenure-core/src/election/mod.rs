//! Elections (lecture, seed 002 §14.3; DESIGN §6): the bully algorithm (ELECTION / OK /
//! COORDINATOR, "I won") and the ring algorithm (an election message collecting the live
//! ids around the ring, skipping dead successors, then the announcement), both with
//! election ids and several elections at once.
//!
//! [`Elector`] is one device's machine, sans-IO in the manner of quinn-proto: feed it
//! messages ([`Elector::handle_msg`]) and timeouts ([`Elector::handle_timeout`]) with the
//! local time, take its outputs with [`Elector::poll_output`], and its next deadline from
//! [`Elector::poll_timeout`]. The winner of an election is the cluster's *coordinator*
//! for a [`Term`]; terms strictly increase and name their coordinator, so a command
//! carrying an older term can be refused.
//!
//! Failure detection is by time-outs (§14.3.1: a stopped process is an infinitely slow
//! one): the coordinator sends `Alive` every heartbeat; a member that hears nothing for
//! three heartbeats starts an election, as does a member that just booted.

mod bully;
pub mod coordinator;
pub mod members;
mod ring;

#[cfg(test)]
mod scenarios;
#[cfg(test)]
mod tests;

use crate::ids::DeviceId;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

/// Which algorithm elects the coordinator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// §14.3.1: the highest live id bullies the others out.
    #[default]
    Bully,
    /// §14.3.2: a message collects the live ids around the ring.
    Ring,
}

/// A coordinator's term: a counter, and the coordinator it names. Ordered by counter,
/// then id, so two winners never share a term and a later election's term is larger.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Term {
    /// Election counter.
    pub n: u64,
    /// The coordinator of this term.
    pub leader: DeviceId,
}

/// An election's identity: its initiator and the initiator's serial.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct ElectionId {
    /// Who started it.
    pub initiator: DeviceId,
    /// The initiator's count of elections it started.
    pub serial: u64,
}

/// Election messages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ElectionMsg {
    /// Bully: ELECTION, to every higher id.
    Election {
        /// The election.
        id: ElectionId,
        /// The highest term counter the sender has seen (a winner's term is above every
        /// counter it heard of, even after it lost its own record).
        max_n: u64,
    },
    /// Bully: OK, a higher id is alive and takes over.
    Ok {
        /// The election answered.
        id: ElectionId,
        /// The highest term counter the sender has seen.
        max_n: u64,
    },
    /// Bully: COORDINATOR ("I won"), to everyone.
    Coordinator {
        /// The election won.
        id: ElectionId,
        /// The new term (naming the winner).
        term: Term,
    },
    /// Ring: the election message, with the ids it collected so far.
    RingElection {
        /// The election.
        id: ElectionId,
        /// Live ids collected around the ring, initiator first.
        ids: Vec<DeviceId>,
        /// The highest term counter seen by the members passed (the new term is above).
        max_n: u64,
    },
    /// Ring: the announcement, circulated once around the ring.
    RingCoordinator {
        /// The election.
        id: ElectionId,
        /// The new term (naming the coordinator).
        term: Term,
        /// Members the announcement has passed through.
        seen: Vec<DeviceId>,
    },
    /// Ring: the successor received a ring message (a successor that does not answer
    /// in time is skipped).
    RingAck {
        /// The election.
        id: ElectionId,
    },
    /// The coordinator's heartbeat.
    Alive {
        /// Its term.
        term: Term,
    },
}

impl ElectionMsg {
    /// Whether the message is one the lecture counts (heartbeats and the ring's
    /// transport acknowledgements are not).
    pub fn counted(&self) -> bool {
        !matches!(
            self,
            ElectionMsg::Alive { .. } | ElectionMsg::RingAck { .. }
        )
    }
}

/// Election settings (`[election]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ElectionSettings {
    /// Whether the device takes part in elections (off only in the model checker, whose
    /// state space has no room for them). Set in code, not in a configuration file: a
    /// device that ignores elections would leave its cluster without a coordinator. It is
    /// not written out, and reading accepts only `enabled = true` (which configurations
    /// written by earlier versions hold), so a file cannot turn elections off.
    #[serde(
        default = "enabled_by_default",
        skip_serializing,
        deserialize_with = "always_enabled"
    )]
    pub enabled: bool,
    /// The algorithm.
    pub algorithm: Algorithm,
    /// How long a bully candidate waits for OK, and a ring sender for its successor's
    /// acknowledgement.
    #[serde(with = "crate::duration::millis")]
    pub answer_timeout: Duration,
    /// How long a bully candidate that got OK waits for COORDINATOR, and a ring
    /// initiator for its election to come back.
    #[serde(with = "crate::duration::millis")]
    pub result_timeout: Duration,
    /// The coordinator's heartbeat interval; a member starts an election after three
    /// missed heartbeats.
    #[serde(with = "crate::duration::millis")]
    pub heartbeat: Duration,
}

fn enabled_by_default() -> bool {
    true
}

fn always_enabled<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    match bool::deserialize(d)? {
        true => Ok(true),
        false => Err(serde::de::Error::custom(
            "elections cannot be turned off in a configuration (every device must take part)",
        )),
    }
}

impl Default for ElectionSettings {
    fn default() -> Self {
        ElectionSettings {
            enabled: true,
            algorithm: Algorithm::Bully,
            answer_timeout: Duration::from_millis(200),
            result_timeout: Duration::from_secs(1),
            heartbeat: Duration::from_millis(300),
        }
    }
}

/// What the machine asks its driver to do, or tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ElectorOut {
    /// Send a message.
    Send {
        /// Destination.
        to: DeviceId,
        /// Message.
        msg: ElectionMsg,
    },
    /// This member now follows (or is) the coordinator of `term`.
    Coordinator {
        /// The term (naming the coordinator).
        term: Term,
    },
}

/// One member's election machine.
#[derive(Clone, Debug)]
pub struct Elector {
    me: DeviceId,
    /// Every member, ascending (the ring's order).
    members: Vec<DeviceId>,
    /// Members being retired (DESIGN §6): they rank below every other member and are
    /// never elected.
    retiring: BTreeSet<DeviceId>,
    settings: ElectionSettings,
    /// The coordinator followed and its term.
    current: Option<Term>,
    /// The highest term seen.
    term: Term,
    /// When the coordinator was last heard from (or this member became it).
    heard: Instant,
    /// The next heartbeat, while coordinator.
    next_alive: Instant,
    /// When each member that sent an Alive of an older term was last answered.
    answered: BTreeMap<DeviceId, Instant>,
    serial: u64,
    bully: bully::Bully,
    ring: ring::Ring,
    out: VecDeque<ElectorOut>,
    /// The highest term counter heard of in any election message.
    max_n: u64,
    /// Counted messages sent, by election.
    pub sent: BTreeMap<ElectionId, u64>,
    /// Planted bug (tests only): never start an election when the coordinator is silent.
    pub plant_no_restart: bool,
}

impl Elector {
    /// A member that just booted, with the highest term it had recorded (`Term::default()`
    /// on a first boot): it starts an election (§14.3.1: "a process initiates an election
    /// if it just recovered from failure").
    pub fn new(
        me: DeviceId,
        members: impl IntoIterator<Item = DeviceId>,
        retiring: impl IntoIterator<Item = DeviceId>,
        settings: ElectionSettings,
        term: Term,
        now: Instant,
    ) -> Elector {
        let mut members: Vec<DeviceId> = members.into_iter().collect();
        members.sort();
        members.dedup();
        let mut e = Elector {
            me,
            members,
            retiring: retiring.into_iter().collect(),
            settings,
            current: None,
            term,
            heard: now,
            next_alive: now,
            answered: BTreeMap::new(),
            serial: 0,
            bully: Default::default(),
            ring: Default::default(),
            out: VecDeque::new(),
            max_n: term.n,
            sent: BTreeMap::new(),
            plant_no_restart: false,
        };
        e.start_election(now);
        e
    }

    /// This member.
    pub fn id(&self) -> DeviceId {
        self.me
    }

    /// The coordinator this member follows, with its term.
    pub fn coordinator(&self) -> Option<Term> {
        self.current
    }

    /// Whether this member is the coordinator.
    pub fn is_coordinator(&self) -> bool {
        self.current.is_some_and(|t| t.leader == self.me)
    }

    /// The highest term seen.
    pub fn term(&self) -> Term {
        self.term
    }

    /// Whether an election this member takes part in is running.
    pub fn electing(&self) -> bool {
        self.bully.running() || self.ring.running()
    }

    /// Whether this device is a member (a device being admitted is not yet, a retired
    /// one no longer is: neither takes part in elections).
    pub fn is_member(&self) -> bool {
        self.members.binary_search(&self.me).is_ok()
    }

    /// The members changed (DESIGN §6). A device just admitted starts an election, as
    /// one that just booted; so does every member if the coordinator left.
    pub fn set_members(&mut self, now: Instant, members: impl IntoIterator<Item = DeviceId>) {
        let was = self.is_member();
        let mut members: Vec<DeviceId> = members.into_iter().collect();
        members.sort();
        members.dedup();
        self.members = members;
        if !self.is_member() {
            self.current = None;
            self.bully = Default::default();
            self.ring = Default::default();
            return;
        }
        let leader_left = self
            .current
            .is_some_and(|t| self.members.binary_search(&t.leader).is_err());
        if leader_left {
            self.current = None;
        }
        if (!was || leader_left) && !self.electing() {
            self.heard = now;
            self.start_election(now);
        }
    }

    /// The members being retired changed. They rank below every other member (bully
    /// asks and defers to members of higher rank; the ring picks the highest rank
    /// collected) and never claim a term, so a device being drained is not elected
    /// coordinator — it would be retired under the cluster it coordinates. A
    /// coordinator that learns it is being retired calls an election to hand over.
    pub fn set_retiring(&mut self, now: Instant, retiring: impl IntoIterator<Item = DeviceId>) {
        self.retiring = retiring.into_iter().collect();
        if self.is_coordinator()
            && self.retiring.contains(&self.me)
            && self.members.iter().any(|m| !self.retiring.contains(m))
            && !self.electing()
        {
            self.start_election(now);
        }
    }

    /// Whether this member may claim a term: a member being retired never does. It
    /// follows whoever is elected; were it to elect itself when no other member
    /// answers (cut off, or already retired by a record it has not received), its
    /// solitary terms would outrank the coordinator that is to tell it it retired.
    fn may_lead(&self) -> bool {
        !self.retiring.contains(&self.me)
    }

    /// Election rank: members not being retired first, then by id.
    fn rank(&self, d: DeviceId) -> (bool, DeviceId) {
        (!self.retiring.contains(&d), d)
    }

    /// Whether `a` outranks `b`.
    fn outranks(&self, a: DeviceId, b: DeviceId) -> bool {
        self.rank(a) > self.rank(b)
    }

    /// Start an election now, with a new id.
    pub fn start_election(&mut self, now: Instant) -> ElectionId {
        self.serial += 1;
        let id = ElectionId {
            initiator: self.me,
            serial: self.serial,
        };
        if !self.is_member() {
            return id;
        }
        match self.settings.algorithm {
            Algorithm::Bully => self.bully_start(now, id),
            Algorithm::Ring => self.ring_start(now, id),
        }
        id
    }

    /// A message from `from`.
    pub fn handle_msg(&mut self, now: Instant, from: DeviceId, msg: ElectionMsg) {
        // A coordinator hearing a coordinator of an older term (elected while cut off,
        // perhaps under a membership record this one's does not share) tells it the
        // newer term, so the two sides meet: it follows, or, outranking this one under
        // bully, elects itself above both terms.
        // At most once a heartbeat per member: while two coordinators depose each other,
        // each one's answer is, by the time it arrives, of an older term than the
        // other's, and every answer would be answered again — the Alives in flight grew
        // by thousands a second (simulator seed 3353).
        if let ElectionMsg::Alive { term } = msg
            && term < self.term
            && term.leader == from
            && self.is_coordinator()
            && (self.answered.get(&from)).is_none_or(|t| *t + self.settings.heartbeat <= now)
        {
            self.answered.insert(from, now);
            self.send(from, ElectionMsg::Alive { term: self.term });
        }
        if !self.members.contains(&from) || !self.is_member() {
            return;
        }
        let heard_n = match &msg {
            ElectionMsg::Election { max_n, .. }
            | ElectionMsg::Ok { max_n, .. }
            | ElectionMsg::RingElection { max_n, .. } => *max_n,
            ElectionMsg::Coordinator { term, .. }
            | ElectionMsg::RingCoordinator { term, .. }
            | ElectionMsg::Alive { term } => term.n,
            ElectionMsg::RingAck { .. } => 0,
        };
        self.max_n = self.max_n.max(heard_n);
        match msg {
            ElectionMsg::Alive { term } => {
                if self.current == Some(term) {
                    self.heard = now;
                } else if term > self.term && term.leader == from {
                    // A coordinator this member did not hear elected (it was down or
                    // cut off): follow it — unless this member outranks it under bully,
                    // in which case it bullies it out.
                    if self.settings.algorithm == Algorithm::Bully && self.outranks(self.me, from) {
                        if !self.electing() {
                            self.start_election(now);
                        }
                    } else {
                        self.follow(now, term);
                    }
                }
            }
            ElectionMsg::Election { id, max_n } => self.bully_on_election(now, from, id, max_n),
            ElectionMsg::Ok { id, .. } => self.bully_on_ok(now, id),
            ElectionMsg::Coordinator { id, term } => self.bully_on_coordinator(now, from, id, term),
            ElectionMsg::RingElection { id, ids, max_n } => {
                self.ring_on_election(now, from, id, ids, max_n)
            }
            ElectionMsg::RingCoordinator { id, term, seen } => {
                self.ring_on_coordinator(now, from, id, term, seen)
            }
            ElectionMsg::RingAck { id } => self.ring_on_ack(from, id),
        }
    }

    /// Fire every deadline due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if !self.is_member() {
            return;
        }
        self.bully_timeout(now);
        self.ring_timeout(now);
        if self.is_coordinator() {
            if self.next_alive <= now {
                self.next_alive = now + self.settings.heartbeat;
                let term = self.term;
                for m in self.others() {
                    self.send(m, ElectionMsg::Alive { term });
                }
            }
        } else if self.heard + self.settings.heartbeat * 3 <= now {
            // The coordinator is silent (or there is none): elect one, unless an
            // election is already running here (or the planted bug forgets to; it still
            // waits three heartbeats before looking again, rather than at once).
            self.heard = now;
            if !self.electing() && !self.plant_no_restart {
                self.start_election(now);
            }
        }
    }

    /// The earliest deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        use crate::time::earliest;
        if !self.is_member() {
            return None;
        }
        let mut t = earliest(self.bully.next_timeout(), self.ring.next_timeout());
        t = earliest(
            t,
            Some(if self.is_coordinator() {
                self.next_alive
            } else {
                self.heard + self.settings.heartbeat * 3
            }),
        );
        t
    }

    /// The next output, if any.
    pub fn poll_output(&mut self) -> Option<ElectorOut> {
        self.out.pop_front()
    }

    // ---- shared helpers ------------------------------------------------------------

    fn others(&self) -> Vec<DeviceId> {
        self.members
            .iter()
            .copied()
            .filter(|m| *m != self.me)
            .collect()
    }

    fn send(&mut self, to: DeviceId, msg: ElectionMsg) {
        let id = match &msg {
            ElectionMsg::Election { id, .. }
            | ElectionMsg::Ok { id, .. }
            | ElectionMsg::Coordinator { id, .. }
            | ElectionMsg::RingElection { id, .. }
            | ElectionMsg::RingCoordinator { id, .. } => Some(*id),
            ElectionMsg::RingAck { .. } | ElectionMsg::Alive { .. } => None,
        };
        if let Some(id) = id {
            *self.sent.entry(id).or_default() += 1;
        }
        self.out.push_back(ElectorOut::Send { to, msg });
    }

    /// The next term this member would start as coordinator.
    fn next_term(&self, leader: DeviceId) -> Term {
        Term {
            n: self.term.n.max(self.max_n) + 1,
            leader,
        }
    }

    /// Follow (or become) the coordinator of `term`, if it is not older than the
    /// highest term seen and its coordinator is a member.
    fn follow(&mut self, now: Instant, term: Term) -> bool {
        // A coordinator that is not a member here (retired, or admitted by a record this
        // member has not received yet) is not followed: an announcement forwarded by a
        // member with an older record can name a device already retired.
        if term < self.term || self.members.binary_search(&term.leader).is_err() {
            return false;
        }
        self.term = term;
        self.max_n = self.max_n.max(term.n);
        self.heard = now;
        if self.current != Some(term) {
            self.current = Some(term);
            self.out.push_back(ElectorOut::Coordinator { term });
        }
        if term.leader == self.me {
            self.next_alive = now;
        }
        true
    }
}
