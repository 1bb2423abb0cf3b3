//! Elections on a small deterministic network: seed 002 §14.3.1 (bully), §14.3.2 (ring)
//! and the message counts of §14.3.3.

use super::*;
use std::collections::BTreeSet;

const MS: Duration = Duration::from_millis(1);

struct Net {
    n: u64,
    now: Instant,
    alg: Algorithm,
    nodes: BTreeMap<DeviceId, Elector>,
    down: BTreeSet<DeviceId>,
    queue: BTreeMap<(Instant, u64), (DeviceId, DeviceId, ElectionMsg)>,
    seq: u64,
    /// Every (time, device, term) a device announced it follows.
    follows: Vec<(Instant, DeviceId, Term)>,
}

fn ids(n: u64) -> Vec<DeviceId> {
    (1..=n).map(DeviceId).collect()
}

impl Net {
    fn new(n: u64, alg: Algorithm) -> Net {
        let mut net = Net {
            n,
            now: Instant(1_000_000),
            alg,
            nodes: BTreeMap::new(),
            down: BTreeSet::new(),
            queue: BTreeMap::new(),
            seq: 0,
            follows: Vec::new(),
        };
        for d in ids(n) {
            net.boot(d);
        }
        net
    }

    fn settings(&self) -> ElectionSettings {
        ElectionSettings {
            algorithm: self.alg,
            ..Default::default()
        }
    }

    fn boot(&mut self, d: DeviceId) {
        let members = ids(self.n);
        let e = Elector::new(d, members, [], self.settings(), Term::default(), self.now);
        self.nodes.insert(d, e);
        self.down.remove(&d);
        self.drain(d);
    }

    fn drain(&mut self, d: DeviceId) {
        let Some(e) = self.nodes.get_mut(&d) else {
            return;
        };
        while let Some(o) = e.poll_output() {
            match o {
                ElectorOut::Send { to, msg } => {
                    self.seq += 1;
                    self.queue.insert((self.now + MS, self.seq), (d, to, msg));
                }
                ElectorOut::Coordinator { term } => self.follows.push((self.now, d, term)),
            }
        }
    }

    fn crash(&mut self, d: DeviceId) {
        self.down.insert(d);
    }

    fn run_for(&mut self, dt: Duration) {
        let end = self.now + dt;
        loop {
            let next_msg = self.queue.keys().next().map(|k| k.0);
            let next_timer = (self.nodes.iter())
                .filter(|(d, _)| !self.down.contains(d))
                .filter_map(|(_, e)| e.poll_timeout())
                .min();
            let Some(t) = crate::time::earliest(next_msg, next_timer).filter(|t| *t <= end) else {
                break;
            };
            self.now = self.now.max(t);
            if next_msg == Some(t) {
                let (_, (from, to, msg)) = self.queue.pop_first().expect("message");
                if !self.down.contains(&to) && !self.down.contains(&from) {
                    let now = self.now;
                    if let Some(e) = self.nodes.get_mut(&to) {
                        e.handle_msg(now, from, msg);
                    }
                    self.drain(to);
                }
            } else {
                let due: Vec<DeviceId> = (self.nodes.iter())
                    .filter(|(d, e)| {
                        !self.down.contains(d) && e.poll_timeout().is_some_and(|x| x <= t)
                    })
                    .map(|(d, _)| *d)
                    .collect();
                for d in due {
                    let now = self.now;
                    self.nodes.get_mut(&d).expect("node").handle_timeout(now);
                    self.drain(d);
                }
            }
        }
        self.now = end;
    }

    fn up(&self) -> impl Iterator<Item = (&DeviceId, &Elector)> {
        self.nodes.iter().filter(|(d, _)| !self.down.contains(d))
    }

    /// The coordinator every live member follows, if they agree.
    fn agreed(&self) -> Option<Term> {
        let terms: BTreeSet<Option<Term>> = self.up().map(|(_, e)| e.coordinator()).collect();
        match terms.into_iter().collect::<Vec<_>>().as_slice() {
            [Some(t)] => Some(*t),
            _ => None,
        }
    }

    /// Counted messages of one election, by id.
    fn counted(&self, id: ElectionId) -> u64 {
        self.nodes
            .values()
            .map(|e| e.sent.get(&id).copied().unwrap_or(0))
            .sum()
    }

    /// Start an election at `d`; returns its id.
    fn elect_at(&mut self, d: DeviceId) -> ElectionId {
        let now = self.now;
        let id = self.nodes.get_mut(&d).expect("node").start_election(now);
        self.drain(d);
        id
    }

    /// Every term named one coordinator (two devices never claimed the same term).
    fn one_coordinator_per_term(&self) -> bool {
        let mut by_term: BTreeMap<Term, BTreeSet<DeviceId>> = BTreeMap::new();
        for (_, d, t) in &self.follows {
            if t.leader == *d {
                by_term.entry(*t).or_default().insert(*d);
            }
        }
        by_term.values().all(|s| s.len() == 1)
    }
}

// ---- bully (§14.3.1) ----

#[test]
fn bully_elects_the_highest_live_id_after_boot() {
    let mut net = Net::new(5, Algorithm::Bully);
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.agreed().map(|t| t.leader), Some(DeviceId(5)));
    assert!(net.one_coordinator_per_term());
}

#[test]
fn bully_coordinator_crash_elects_the_next_highest_with_a_larger_term() {
    let mut net = Net::new(5, Algorithm::Bully);
    net.run_for(Duration::from_secs(2));
    let before = net.agreed().unwrap();
    net.crash(DeviceId(5));
    net.run_for(Duration::from_secs(3));
    let after = net.agreed().expect("agreement");
    assert_eq!(after.leader, DeviceId(4));
    assert!(after > before);
    assert!(net.one_coordinator_per_term());
}

#[test]
fn bully_best_case_highest_live_initiates_n_minus_2_messages_to_live_processes() {
    // §14.3.3: the highest live process initiates. It sends ELECTION to the crashed
    // coordinator (the only higher id), hears no OK, and sends "I won" to every other
    // process: n messages, of which n − 2 reach live processes (the lecture's count).
    let n = 8;
    let mut net = Net::new(n, Algorithm::Bully);
    net.run_for(Duration::from_secs(2));
    net.crash(DeviceId(n));
    let id = net.elect_at(DeviceId(n - 1));
    net.run_for(Duration::from_millis(500));
    let to_the_crashed = 2;
    assert_eq!(net.counted(id), n);
    assert_eq!(net.counted(id) - to_the_crashed, n - 2);
    assert_eq!(net.agreed().unwrap().leader, DeviceId(n - 1));
}

#[test]
fn bully_worst_case_lowest_initiates_quadratic_messages() {
    // §14.3.3: the lowest id initiates: every process holds an election of its own.
    let n: u64 = 8;
    let mut net = Net::new(n, Algorithm::Bully);
    net.run_for(Duration::from_secs(2));
    net.crash(DeviceId(n));
    let first = net.nodes[&DeviceId(1)].serial + 1;
    net.elect_at(DeviceId(1));
    net.run_for(Duration::from_secs(2));
    // Every election started after the crash, counted: ELECTIONs to higher ids, OKs
    // back, and the winner's COORDINATORs.
    let total: u64 = (net.nodes.values())
        .flat_map(|e| e.sent.iter())
        .filter(|(id, _)| id.initiator != DeviceId(1) || id.serial >= first)
        .filter(|(id, _)| id.initiator == DeviceId(1) || id.serial > 1)
        .map(|(_, c)| *c)
        .sum();
    let live = n - 1;
    assert!(
        total >= live * (live - 1) / 2,
        "{total} messages: at least quadratic"
    );
    assert_eq!(net.agreed().unwrap().leader, DeviceId(n - 1));
}

#[test]
fn bully_a_recovered_higher_id_bullies_its_way_back() {
    let mut net = Net::new(4, Algorithm::Bully);
    net.run_for(Duration::from_secs(2));
    net.crash(DeviceId(4));
    net.run_for(Duration::from_secs(3));
    assert_eq!(net.agreed().unwrap().leader, DeviceId(3));
    net.boot(DeviceId(4));
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.agreed().unwrap().leader, DeviceId(4));
    assert!(net.one_coordinator_per_term());
}

#[test]
fn bully_concurrent_elections_end_with_one_coordinator() {
    let mut net = Net::new(6, Algorithm::Bully);
    net.run_for(Duration::from_secs(2));
    net.crash(DeviceId(6));
    for d in [1, 2, 3] {
        net.elect_at(DeviceId(d));
    }
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.agreed().unwrap().leader, DeviceId(5));
    assert!(net.one_coordinator_per_term());
}

#[test]
fn bully_winner_crash_mid_election_is_replaced() {
    let mut net = Net::new(5, Algorithm::Bully);
    net.run_for(Duration::from_secs(2));
    net.crash(DeviceId(5));
    net.elect_at(DeviceId(1));
    // 4 will win; it crashes as soon as it has answered OK.
    net.run_for(Duration::from_millis(3));
    net.crash(DeviceId(4));
    net.run_for(Duration::from_secs(4));
    assert_eq!(net.agreed().unwrap().leader, DeviceId(3));
}

// ---- ring (§14.3.2) ----

#[test]
fn ring_elects_the_highest_live_id_after_boot() {
    let mut net = Net::new(5, Algorithm::Ring);
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.agreed().map(|t| t.leader), Some(DeviceId(5)));
    assert!(net.one_coordinator_per_term());
}

#[test]
fn ring_takes_2_n_minus_1_messages() {
    // §14.3.3: n − 1 for the election, n − 1 for the announcement.
    for n in [3u64, 5, 8] {
        let mut net = Net::new(n, Algorithm::Ring);
        net.run_for(Duration::from_secs(2));
        for initiator in 1..=n {
            let id = net.elect_at(DeviceId(initiator));
            net.run_for(Duration::from_millis(200));
            assert_eq!(
                net.counted(id),
                2 * (n - 1),
                "n = {n}, initiator {initiator}"
            );
        }
        assert_eq!(net.agreed().unwrap().leader, DeviceId(n));
    }
}

#[test]
fn ring_skips_a_dead_successor() {
    let mut net = Net::new(6, Algorithm::Ring);
    net.run_for(Duration::from_secs(2));
    net.crash(DeviceId(3));
    net.crash(DeviceId(6));
    let id = net.elect_at(DeviceId(2));
    net.run_for(Duration::from_secs(1));
    assert_eq!(net.agreed().unwrap().leader, DeviceId(5));
    // Live members: 4; 2(4 − 1) messages, plus one to each dead successor tried, in
    // each of the two rounds.
    assert_eq!(net.counted(id), 2 * 3 + 2 * 2);
}

#[test]
fn ring_initiator_crash_mid_election_still_completes() {
    let mut net = Net::new(5, Algorithm::Ring);
    net.run_for(Duration::from_secs(2));
    net.crash(DeviceId(5));
    net.elect_at(DeviceId(1));
    // The election message left 1; 1 crashes.
    net.run_for(Duration::from_micros(500));
    net.crash(DeviceId(1));
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.agreed().unwrap().leader, DeviceId(4));
}

#[test]
fn ring_concurrent_elections_agree() {
    let mut net = Net::new(6, Algorithm::Ring);
    net.run_for(Duration::from_secs(2));
    net.crash(DeviceId(6));
    for d in [1, 3, 4] {
        net.elect_at(DeviceId(d));
    }
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.agreed().unwrap().leader, DeviceId(5));
    assert!(net.one_coordinator_per_term());
}

#[test]
fn ring_coordinator_crash_is_detected_by_missed_heartbeats() {
    let mut net = Net::new(4, Algorithm::Ring);
    net.run_for(Duration::from_secs(2));
    let before = net.agreed().unwrap();
    net.crash(DeviceId(4));
    net.run_for(Duration::from_secs(3));
    let after = net.agreed().unwrap();
    assert_eq!(after.leader, DeviceId(3));
    assert!(after > before);
}

#[test]
fn messages_from_strangers_are_ignored() {
    let mut e = Elector::new(
        DeviceId(1),
        ids(3),
        [],
        ElectionSettings::default(),
        Term::default(),
        Instant(0),
    );
    let before = e.coordinator();
    let term = Term {
        n: 99,
        leader: DeviceId(9),
    };
    e.handle_msg(Instant(1), DeviceId(9), ElectionMsg::Alive { term });
    assert_eq!(e.coordinator(), before);
}

#[test]
fn planted_no_restart_waits_for_a_new_coordinator_without_spinning() {
    // The planted bug (tests only) never starts an election on a silent coordinator, but
    // its deadline still moves on: a deadline left in the past is a timer that fires at
    // once, forever (the simulator saw millions of events per second of such a device).
    let mut e = Elector::new(
        DeviceId(1),
        ids(3),
        [],
        ElectionSettings::default(),
        Term::default(),
        Instant(0),
    );
    e.plant_no_restart = true;
    e.handle_msg(
        Instant(1),
        DeviceId(3),
        ElectionMsg::Coordinator {
            id: ElectionId {
                initiator: DeviceId(3),
                serial: 1,
            },
            term: Term {
                n: 1,
                leader: DeviceId(3),
            },
        },
    );
    while e.poll_output().is_some() {}
    let late = Instant(10_000_000);
    e.handle_timeout(late);
    assert!(e.poll_timeout().is_some_and(|t| t > late));
    assert!(e.poll_output().is_none(), "no election started");
}

// ---- members being retired (DESIGN §6) ----

impl Net {
    fn set_retiring(&mut self, retiring: &[u64]) {
        let now = self.now;
        let ds: Vec<DeviceId> = self.nodes.keys().copied().collect();
        for d in ds {
            let r = retiring.iter().map(|i| DeviceId(*i));
            self.nodes.get_mut(&d).expect("node").set_retiring(now, r);
            self.drain(d);
        }
    }
}

fn retiring_member_is_not_elected(alg: Algorithm) {
    // d5 and d4 are being drained: d3 is the highest member that may coordinate. The
    // election runs with every member up, started by a retiring one (d5 knows it is
    // being retired and does not claim the term for itself).
    let mut net = Net::new(5, alg);
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.agreed().map(|t| t.leader), Some(DeviceId(5)));
    net.set_retiring(&[4, 5]);
    net.run_for(Duration::from_secs(3));
    assert_eq!(net.agreed().map(|t| t.leader), Some(DeviceId(3)));
    net.elect_at(DeviceId(5));
    net.run_for(Duration::from_secs(3));
    assert_eq!(net.agreed().map(|t| t.leader), Some(DeviceId(3)));
    assert!(net.one_coordinator_per_term());
    // With every other member down, the retiring ones elect nobody: no term is ever
    // claimed by a member being retired.
    let since = net.now;
    for d in 1..=3 {
        net.crash(DeviceId(d));
    }
    net.run_for(Duration::from_secs(5));
    let claimed =
        (net.follows.iter()).filter(|(t, _, term)| *t >= since && term.leader > DeviceId(3));
    assert_eq!(claimed.count(), 0);
}

#[test]
fn bully_a_member_being_retired_ranks_below_every_other_member() {
    retiring_member_is_not_elected(Algorithm::Bully);
}

#[test]
fn ring_a_member_being_retired_ranks_below_every_other_member() {
    retiring_member_is_not_elected(Algorithm::Ring);
}

#[test]
fn an_announcement_naming_a_device_that_is_not_a_member_is_not_followed() {
    // DESIGN §6: d3 retired (it is no longer in d1's members); a ring announcement
    // forwarded by d2, which still counts d3 a member, names d3 coordinator.
    let mut e = Elector::new(
        DeviceId(1),
        ids(3),
        [],
        ElectionSettings {
            algorithm: Algorithm::Ring,
            ..Default::default()
        },
        Term::default(),
        Instant(0),
    );
    e.set_members(Instant(1), [DeviceId(1), DeviceId(2)]);
    let before = e.coordinator();
    let term = Term {
        n: 50,
        leader: DeviceId(3),
    };
    let id = ElectionId {
        initiator: DeviceId(2),
        serial: 9,
    };
    let seen = vec![DeviceId(2)];
    e.handle_msg(
        Instant(2),
        DeviceId(2),
        ElectionMsg::RingCoordinator { id, term, seen },
    );
    assert_eq!(e.coordinator(), before);
    assert_ne!(e.term(), term);
}

/// Two coordinators that never heard of each other (a device elected itself while cut
/// off, under a record the others do not share, so they do not count it as a member):
/// the one of the newer term answers the other's Alive with its own, and the older one
/// — outranking it under bully — elects itself above both terms.
#[test]
fn bully_coordinator_answers_an_older_coordinators_alive_with_its_term() {
    let mut net = Net::new(3, Algorithm::Bully);
    net.run_for(Duration::from_secs(3));
    let t = net.agreed().expect("d3 coordinates");
    assert_eq!(t.leader, DeviceId(3));
    // d3 only knows d1..d3; a device d5 elected itself under an older term elsewhere.
    let d5 = DeviceId(5);
    let old = Term {
        n: t.n - 1,
        leader: d5,
    };
    assert!(old < t);
    let now = net.now;
    let e3 = net.nodes.get_mut(&DeviceId(3)).expect("d3");
    e3.handle_msg(now, d5, ElectionMsg::Alive { term: old });
    let mut sent = Vec::new();
    while let Some(o) = e3.poll_output() {
        sent.push(o);
    }
    assert_eq!(
        sent,
        vec![ElectorOut::Send {
            to: d5,
            msg: ElectionMsg::Alive { term: t },
        }]
    );
    // Answered at most once a heartbeat: two coordinators deposing each other would
    // otherwise answer every answer (simulator seed 3353).
    e3.handle_msg(now, d5, ElectionMsg::Alive { term: old });
    assert!(e3.poll_output().is_none(), "answered already");
    let later = now + ElectionSettings::default().heartbeat;
    e3.handle_msg(later, d5, ElectionMsg::Alive { term: old });
    assert!(e3.poll_output().is_some(), "a heartbeat later");
    // A follower stays quiet; so does the coordinator for a newer or its own term.
    let e1 = net.nodes.get_mut(&DeviceId(1)).expect("d1");
    e1.handle_msg(now, d5, ElectionMsg::Alive { term: old });
    assert!(e1.poll_output().is_none());
}
