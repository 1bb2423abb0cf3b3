use super::super::harness::{MT, Net, d};
use super::*;

fn settings() -> VoteSettings {
    VoteSettings {
        backoff: Duration::from_micros(4 * MT),
        answer_timeout: Duration::from_micros(10 * MT),
    }
}

fn net(n: u64) -> Net<Decentralized> {
    Net::new((1..=n).map(|i| Decentralized::new(d(i), (1..=n).map(d), settings(), i)))
}

// seed 002 §14.4.2: "it has to be granted an OK ... from the strict majority of the
// processes", counted over all nodes, live or not.
#[test]
fn majority_is_strict_and_counts_every_coordinator() {
    for (n, m) in [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (8, 5)] {
        let p = Decentralized::new(d(1), (1..=n).map(d), settings(), 0);
        assert_eq!(p.majority(), m, "n = {n}");
    }
}

// §14.4.2 with Fig. 14.7: an uncontended entry asks every other coordinator, gets its
// answer, and gives the vote back on leaving — 3 messages per coordinator asked, the
// first attempt succeeding (k = 1), two message times before entry.
#[test]
fn uncontended_entry_costs_three_messages_per_coordinator_asked() {
    let mut n = net(5);
    n.request(d(2));
    n.run_for(20 * MT);
    assert_eq!(n.entries, vec![(2 * MT, d(2))]);
    assert_eq!(n.procs[&d(2)].attempt(), 1);
    n.release(d(2));
    n.run_for(20 * MT);
    assert_eq!(n.sent, 3 * 4);
    assert!(n.procs.values().all(|p| p.voted_for().is_none()));
}

// §14.4.2: "The majority guarantees that a lock is not granted twice": concurrent
// requesters never overlap, and each enters in the end.
#[test]
fn contending_requesters_never_both_enter() {
    let mut n = net(5);
    for i in 1..=5 {
        n.request(d(i));
    }
    for _ in 0..200 {
        n.run_for(MT);
        let inside: Vec<DeviceId> = n.inside.iter().copied().collect();
        for p in inside {
            n.release(p);
        }
    }
    assert_eq!(n.overlaps, 0);
    let mut who: Vec<DeviceId> = n.entries.iter().map(|e| e.1).collect();
    who.sort();
    assert_eq!(who, (1..=5).map(d).collect::<Vec<_>>());
    // Every vote of a failed attempt, and of every entry, was given back.
    assert!(n.procs.values().all(|p| p.voted_for().is_none()));
}

// §14.4.2 (Fig. 14.7 "starvation"): a refused requester gives its votes back, backs off
// and tries again: attempt k + 1.
#[test]
fn a_refused_requester_gives_its_votes_back_and_retries() {
    let mut n = net(3);
    n.request(d(1));
    n.run_for(3 * MT);
    n.request(d(2));
    n.run_for(3 * MT);
    // Every coordinator, d2's own among them, had voted for d1: d2 is refused and
    // holds no vote.
    assert_eq!(n.phase(d(2)), Phase::Wanting);
    assert!(n.procs.values().all(|p| p.voted_for() == Some(d(1))));
    n.run_for(100 * MT);
    assert!(n.procs[&d(2)].attempt() > 1);
    n.release(d(1));
    n.run_for(200 * MT);
    assert_eq!(n.phase(d(2)), Phase::Held);
}

// §14.4.2: "if some nodes go down, we can deal with it so long as the majority
// agrees": one crashed coordinator of five does not stop entries.
#[test]
fn a_crashed_minority_is_survived() {
    let mut n = net(5);
    n.crashed.insert(d(5));
    n.crashed.insert(d(4));
    n.request(d(1));
    n.run_for(20 * MT);
    assert_eq!(n.phase(d(1)), Phase::Held);
}

// An attempt left undecided by silent coordinators fails at its answer timeout.
#[test]
fn an_attempt_without_a_majority_of_answers_fails_at_its_timeout() {
    let mut n = net(5);
    for i in 3..=5 {
        n.crashed.insert(d(i));
    }
    n.request(d(1));
    n.run_for(11 * MT);
    assert_eq!(n.procs[&d(1)].attempt(), 1);
    assert_eq!(n.procs[&d(1)].voted_for(), None);
    n.run_for(100 * MT);
    assert!(n.procs[&d(1)].attempt() > 1);
    assert_eq!(n.phase(d(1)), Phase::Wanting);
}

#[test]
fn planted_bug_lets_two_in() {
    let mut n = net(3);
    for p in n.procs.values_mut() {
        p.plant_bug = true;
    }
    n.request(d(1));
    n.request(d(2));
    n.run_for(5 * MT);
    assert_eq!(n.overlaps, 1);
}
