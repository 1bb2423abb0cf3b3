//! What an output waits for before it leaves the device (DESIGN §10: durable before
//! acknowledged), shared by the server's driver (pipelined group commit) and the
//! simulator's asynchronous disks, which model it.
//!
//! A driver numbers its write groups from 1 in commit order; every persist of one input
//! joins one group. A `Send`, a reply or an event then waits until every persist it may
//! depend on is durable: per store, the store's persists and the device-wide ones
//! ([`Domain::Store`]); for the lookup node, its own and the device-wide ones
//! ([`Domain::Lookup`]); for elections and the coordinator's rounds (votes, members'
//! reports and its membership record), the device-wide ones ([`Domain::Coordination`]);
//! for anything else — store reports and commands, snapshots, policies — every persist
//! ([`Domain::Device`]). Other stores' outputs leave meanwhile.
//! Lease traffic — a chunk's renewal request and its manager's renewal — carries nothing
//! a persist made and waits for none ([`Domain::Lease`]): behind a busy store's write
//! groups (hundreds of milliseconds each under load) renewals came after the leases they
//! renew had run out, and healthy chunks were marked failed.
//!
//! One more rule keeps a peer channel FIFO where a snapshot needs it: nothing overtakes a
//! snapshot message to the same peer ([`Domain::Snapshot`]; simulator seed 11430: a
//! store's messages sent after a snapshot marker left before it, the marker waiting for
//! every persist, and the receiver recorded a message its sender's cut had not sent
//! yet). Only snapshot messages: when every device-wide send (a coordinator's heartbeat,
//! an election's) held every later send to its peer behind every persist of the device,
//! a slow flush silenced the device to its peers — they failed its chunks and elected
//! another coordinator (10,000 sessions taking locks).

use crate::ids::{ChunkId, DeviceId, StoreId};
use crate::io::persist::PersistOp;
use crate::msg::Msg;
use std::collections::BTreeMap;

/// The persists an output may depend on: those of one store, those of the lookup node,
/// or (`Device`) all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Domain {
    /// One store's.
    Store(StoreId),
    /// The lookup node's.
    Lookup,
    /// Every persist.
    Device,
    /// Every persist, and nothing sent after it to the same peer leaves before it: the
    /// snapshot protocol's messages, whose channels must stay FIFO.
    Snapshot,
    /// The device-wide persists (the term, the membership record, the chunk serial):
    /// elections and the coordinator's rounds, which state nothing a store's persist
    /// made. Waiting for every persist, a coordinator's round and a member's report
    /// waited behind every store's write groups: a group commit of a second (a
    /// checkpoint under 10,000 sessions taking locks, on every device at once) silenced
    /// the coordinator, every device elected another, and their peers' chunks were
    /// marked failed.
    Coordination,
    /// None: lease renewals (their requests and grants), which state nothing a persist
    /// made. The chunk's epoch they name is the one it serves in; a chunk that crashes
    /// forgets its lease (`Chunk::boot`), and a renewal acknowledges no change.
    Lease,
}

impl Domain {
    /// The domain of a message to a peer.
    pub fn of_msg(msg: &Msg) -> Domain {
        use crate::election::coordinator::CoordMsg;
        use crate::msg::{ToChunk, ToManager};
        use crate::objects::msg::BlockMsg as B;
        match msg {
            Msg::ToChunk {
                msg: ToChunk::Renewal { .. },
                ..
            }
            | Msg::ToManager {
                msg: ToManager::RenewalRequest { .. } | ToManager::RecoveryRenewalRequest { .. },
                ..
            } => Domain::Lease,
            Msg::ToChunk { store, .. } | Msg::ToManager { store, .. } | Msg::Mgr { store, .. } => {
                Domain::Store(*store)
            }
            Msg::Blocks(
                B::Read { store, .. }
                | B::Data { store, .. }
                | B::Delete { store, .. }
                | B::Deleted { store, .. }
                | B::Probe { store, .. }
                | B::Complete { store, .. },
            ) => Domain::Store(*store),
            Msg::Lookup(_) => Domain::Lookup,
            Msg::Forward(f) => Domain::Store(f.store()),
            Msg::Election(_)
            | Msg::Coord(
                CoordMsg::Member { .. } | CoordMsg::Members { .. } | CoordMsg::Request { .. },
            ) => Domain::Coordination,
            Msg::Policy(_) | Msg::Coord(CoordMsg::Store { .. } | CoordMsg::Command { .. }) => {
                Domain::Device
            }
            Msg::Snapshot(_) => Domain::Snapshot,
        }
    }
}

/// The newest write group of each domain, and the per-peer floors: the group each
/// output must wait for.
#[derive(Clone, Debug, Default)]
pub struct Gate {
    /// The newest group holding a persist: of any kind, device-wide, of the lookup node,
    /// per store.
    last_persist: u64,
    last_device: u64,
    last_lookup: u64,
    last_store: BTreeMap<StoreId, u64>,
    /// The store of each chunk (persists name chunks).
    chunk_store: BTreeMap<ChunkId, StoreId>,
    /// Per peer, the newest group a device-wide send to it waits for: later sends to
    /// that peer wait for it too.
    peer_floor: BTreeMap<DeviceId, u64>,
}

impl Gate {
    /// The gate of a device booting with `chunks` (chunk, its store) on disk.
    pub fn booted(chunks: impl IntoIterator<Item = (ChunkId, StoreId)>) -> Gate {
        Gate {
            chunk_store: chunks.into_iter().collect(),
            ..Gate::default()
        }
    }

    /// Persist `op` joins group `g` (groups handed out in increasing order).
    pub fn persist(&mut self, op: &PersistOp, g: u64) {
        self.last_persist = g;
        let store = match op {
            PersistOp::PutChunk(c) | PersistOp::PutChunkHead(c) => {
                self.chunk_store.insert(c.id, c.store);
                Some(c.store)
            }
            PersistOp::Accept { chunk, .. }
            | PersistOp::BlockPut { chunk, .. }
            | PersistOp::BlockDelete { chunk, .. } => self.chunk_store.get(chunk).copied(),
            PersistOp::RemoveChunk(chunk) => self.chunk_store.remove(chunk),
            PersistOp::LookupPut(_) | PersistOp::LookupRemove(_) => {
                self.last_lookup = g;
                return;
            }
            PersistOp::SetNextSerial(_)
            | PersistOp::SetTerm(_)
            | PersistOp::SetMembers(_)
            | PersistOp::SetSnapshots(_) => None,
        };
        match store {
            Some(s) => {
                self.last_store.insert(s, g);
            }
            None => self.last_device = g,
        }
    }

    /// The group an output of `domain` (a send to `to`, if it is one) produced now must
    /// wait for, every group up to `durable` being durable: it may leave once that group
    /// is (at once if it is 0 or not above `durable`).
    pub fn wait_for(&mut self, domain: Domain, to: Option<DeviceId>, durable: u64) -> u64 {
        let mut group = match domain {
            Domain::Store(s) => {
                (self.last_store.get(&s).copied().unwrap_or(0)).max(self.last_device)
            }
            Domain::Lookup => self.last_lookup.max(self.last_device),
            Domain::Coordination => self.last_device,
            Domain::Device | Domain::Snapshot => self.last_persist,
            Domain::Lease => 0,
        };
        if let Some(to) = to {
            if let Some(f) = self.peer_floor.get(&to).copied() {
                if f > durable {
                    group = group.max(f);
                } else {
                    self.peer_floor.remove(&to);
                }
            }
            if domain == Domain::Snapshot && group > durable {
                let f = self.peer_floor.entry(to).or_default();
                *f = (*f).max(group);
            }
        }
        group
    }

    /// Every group up to `durable` is durable: floors at or below it are spent.
    pub fn durable(&mut self, durable: u64) {
        self.peer_floor.retain(|_, f| *f > durable);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::Term;
    use crate::ids::Version;

    const S1: StoreId = StoreId(1);
    const S2: StoreId = StoreId(2);
    const P: DeviceId = DeviceId(2);

    fn chunk(serial: u64) -> ChunkId {
        ChunkId {
            device: DeviceId(1),
            serial,
        }
    }

    fn accept(c: ChunkId) -> PersistOp {
        PersistOp::Accept {
            chunk: c,
            ops: Vec::new(),
            confirm: Version::default(),
            after: Default::default(),
        }
    }

    // DESIGN §10: a store's output waits for its store's persists and the device-wide
    // ones, not for another store's; a device-wide output waits for every persist.
    #[test]
    fn an_output_waits_for_the_persists_of_its_domain_only() {
        let mut g = Gate::booted([(chunk(1), S1), (chunk(2), S2)]);
        g.persist(&accept(chunk(1)), 1);
        g.persist(&accept(chunk(2)), 2);
        assert_eq!(g.wait_for(Domain::Store(S1), None, 0), 1);
        assert_eq!(g.wait_for(Domain::Store(S2), None, 0), 2);
        assert_eq!(g.wait_for(Domain::Lookup, None, 0), 0);
        assert_eq!(g.wait_for(Domain::Device, None, 0), 2);
        assert_eq!(g.wait_for(Domain::Coordination, None, 0), 0);
        g.persist(&PersistOp::SetTerm(Term::default()), 3);
        assert_eq!(g.wait_for(Domain::Store(S1), None, 0), 3);
        assert_eq!(g.wait_for(Domain::Lookup, None, 0), 3);
        assert_eq!(g.wait_for(Domain::Coordination, None, 0), 3);
        g.persist(&accept(chunk(1)), 4);
        assert_eq!(g.wait_for(Domain::Coordination, None, 3), 3);
    }

    // DESIGN §10: votes, members' reports and the coordinator's membership record wait
    // for the device-wide persists (the term above all) and for no store's; a store
    // report and a coordinator's command still wait for every persist.
    #[test]
    fn elections_and_coordinator_rounds_wait_for_device_wide_persists_only() {
        use crate::election::coordinator::{CoordMsg, StoreReport};
        use crate::election::members::Members;
        let member = Msg::Coord(CoordMsg::Member {
            term: Term::default(),
            chunks: 1,
            members: Members::default(),
        });
        let report = Msg::Coord(CoordMsg::Store {
            term: Term::default(),
            report: StoreReport {
                store: S1,
                epoch: crate::ids::Epoch(1),
                chunks: vec![chunk(1)],
                failed: Vec::new(),
                managing_for: std::time::Duration::ZERO,
                busy: false,
            },
        });
        assert_eq!(Domain::of_msg(&member), Domain::Coordination);
        assert_eq!(Domain::of_msg(&report), Domain::Device);
        let mut g = Gate::booted([(chunk(1), S1)]);
        g.persist(&PersistOp::SetTerm(Term::default()), 1);
        g.persist(&accept(chunk(1)), 2);
        assert_eq!(g.wait_for(Domain::of_msg(&member), Some(P), 0), 1);
        assert_eq!(g.wait_for(Domain::of_msg(&report), Some(P), 0), 2);
    }

    // Lease renewals (their requests and grants) wait for no persist of their store,
    // whose write groups take hundreds of milliseconds under load; they still follow a
    // held device-wide send to the same peer.
    #[test]
    fn a_lease_renewal_waits_for_no_persist() {
        use crate::ids::Epoch;
        use crate::msg::{ToChunk, ToManager};
        let mut g = Gate::booted([(chunk(1), S1)]);
        g.persist(&accept(chunk(1)), 1);
        let renewal = Msg::ToChunk {
            store: S1,
            chunk: chunk(1),
            msg: ToChunk::Renewal {
                epoch: Epoch(1),
                lease: std::time::Duration::from_secs(2),
                sent: None,
            },
        };
        let request = Msg::ToManager {
            store: S1,
            chunk: chunk(1),
            msg: ToManager::RenewalRequest {
                epoch: Epoch(1),
                renewed: None,
            },
        };
        for m in [&renewal, &request] {
            assert_eq!(Domain::of_msg(m), Domain::Lease);
            assert_eq!(g.wait_for(Domain::of_msg(m), Some(P), 0), 0);
        }
        let ack = Msg::ToManager {
            store: S1,
            chunk: chunk(1),
            msg: ToManager::Refused { epoch: Epoch(1) },
        };
        assert_eq!(g.wait_for(Domain::of_msg(&ack), Some(P), 0), 1);
        g.persist(&PersistOp::SetTerm(Term::default()), 2);
        assert_eq!(g.wait_for(Domain::Snapshot, Some(P), 0), 2);
        assert_eq!(
            g.wait_for(Domain::of_msg(&renewal), Some(P), 0),
            2,
            "behind the held snapshot message"
        );
    }

    // Sim seed 11430: nothing overtakes a snapshot message (a marker) to the same peer,
    // until the group it waited for is durable. Other device-wide sends (a coordinator's
    // heartbeat) hold back nothing but themselves.
    #[test]
    fn nothing_overtakes_a_held_snapshot_message_to_the_same_peer() {
        let mut g = Gate::booted([(chunk(1), S1), (chunk(2), S2)]);
        g.persist(&accept(chunk(2)), 1);
        assert_eq!(g.wait_for(Domain::Device, Some(P), 0), 1);
        assert_eq!(
            g.wait_for(Domain::Store(S1), Some(P), 0),
            0,
            "a heartbeat holds back nothing"
        );
        assert_eq!(g.wait_for(Domain::Snapshot, Some(P), 0), 1);
        // S1 has nothing to wait for, but its send to P follows the marker.
        assert_eq!(g.wait_for(Domain::Store(S1), Some(P), 0), 1);
        assert_eq!(g.wait_for(Domain::Store(S1), Some(DeviceId(3)), 0), 0);
        g.durable(1);
        assert_eq!(g.wait_for(Domain::Store(S1), Some(P), 1), 0);
    }
}
