//! A plain two-phase commit (seed 004 §3: "a variant ... described in [8] and [9] ...
//! has an additional acknowledgment message at the end from each destination to the
//! sender"), as small sans-IO machines, so that its message count is measured by a run
//! rather than written down: PREPARE, VOTE (yes), COMMIT, ACK per participant.

use std::collections::{BTreeSet, VecDeque};

/// Two-phase commit messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TwoPcMsg {
    /// Coordinator → participant: prepare the update.
    Prepare,
    /// Participant → coordinator: prepared (yes).
    Vote,
    /// Coordinator → participant: commit.
    Commit,
    /// Participant → coordinator: committed.
    Ack,
}

/// The coordinator of one update.
#[derive(Clone, Debug, Default)]
pub struct TwoPcCoordinator {
    participants: Vec<u64>,
    votes: BTreeSet<u64>,
    acks: BTreeSet<u64>,
    out: VecDeque<(u64, TwoPcMsg)>,
}

impl TwoPcCoordinator {
    /// Start an update at `participants`.
    pub fn start(participants: &[u64]) -> TwoPcCoordinator {
        let mut c = TwoPcCoordinator {
            participants: participants.to_vec(),
            ..Default::default()
        };
        for p in participants {
            c.out.push_back((*p, TwoPcMsg::Prepare));
        }
        c
    }

    /// A participant's message.
    pub fn handle(&mut self, from: u64, msg: TwoPcMsg) {
        match msg {
            TwoPcMsg::Vote => {
                self.votes.insert(from);
                if self.votes.len() == self.participants.len() {
                    for p in self.participants.clone() {
                        self.out.push_back((p, TwoPcMsg::Commit));
                    }
                }
            }
            TwoPcMsg::Ack => {
                self.acks.insert(from);
            }
            _ => {}
        }
    }

    /// Whether every participant acknowledged the commit.
    pub fn done(&self) -> bool {
        self.acks.len() == self.participants.len()
    }

    /// The next message to send.
    pub fn poll(&mut self) -> Option<(u64, TwoPcMsg)> {
        self.out.pop_front()
    }
}

/// A participant's answer to a coordinator's message.
pub fn participant(msg: TwoPcMsg) -> Option<TwoPcMsg> {
    match msg {
        TwoPcMsg::Prepare => Some(TwoPcMsg::Vote),
        TwoPcMsg::Commit => Some(TwoPcMsg::Ack),
        _ => None,
    }
}

/// Run one update at `k` participants; the messages exchanged.
pub fn messages_for_one_update(k: u64) -> u64 {
    let ids: Vec<u64> = (1..=k).collect();
    let mut c = TwoPcCoordinator::start(&ids);
    let mut in_flight: VecDeque<(u64, bool, TwoPcMsg)> = VecDeque::new();
    let mut sent = 0;
    loop {
        while let Some((to, m)) = c.poll() {
            sent += 1;
            in_flight.push_back((to, true, m));
        }
        let Some((who, to_participant, m)) = in_flight.pop_front() else {
            break;
        };
        if to_participant {
            if let Some(reply) = participant(m) {
                sent += 1;
                in_flight.push_back((who, false, reply));
            }
        } else {
            c.handle(who, m);
        }
    }
    assert!(c.done(), "two-phase commit finished");
    sent
}
