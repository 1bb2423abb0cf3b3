//! The soft-state store (SSS) of seed 003: what one node believes about the others.
//!
//! Every node sends its `(bIsActive, activeStartTime)` — the seed's `SSS_PutValue` and the
//! `LS_start_time` entry — to every other node each `SS_HEARTBEAT_INTERVAL`. A node's
//! entry here is refreshed by each heartbeat and times out three intervals after the last
//! one ("node down", masking one lost heartbeat). Values are soft: a fake age planted by
//! state corruption is overwritten by the node's next heartbeat, or disappears with its
//! entry when the node sends none.

use crate::ids::DeviceId;
use crate::time::Instant;
use std::collections::BTreeMap;
use std::time::Duration;

/// What the SSS holds for one other node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Local time of the last heartbeat.
    pub heard: Instant,
    /// Its `LS_start_time` (`None`: INFINITE, the node is passive).
    pub start: Option<Instant>,
    /// Whether it said it is the leader (status only).
    pub leader: bool,
}

/// A change the maintainer must look at (the seed's `stateMayNeedToChangeEvent`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SssChange {
    /// A node appeared, or its `LS_start_time` changed.
    Start(DeviceId),
    /// "node down(k)": no heartbeat for three intervals.
    Down(DeviceId),
}

/// The soft-state store of one node (its own entry is the node's state, not kept here).
#[derive(Clone, Debug, Default)]
pub struct Sss {
    peers: BTreeMap<DeviceId, Peer>,
}

impl Sss {
    /// Record a heartbeat. Returns the change it makes to `LS_start_time`, if any.
    pub fn heartbeat(
        &mut self,
        now: Instant,
        from: DeviceId,
        start: Option<Instant>,
        leader: bool,
    ) -> Option<SssChange> {
        let prev = self.peers.insert(
            from,
            Peer {
                heard: now,
                start,
                leader,
            },
        );
        match prev {
            Some(p) if p.start == start => None,
            _ => Some(SssChange::Start(from)),
        }
    }

    /// Time out entries not refreshed within `down_after`: each is a "node down".
    pub fn expire(&mut self, now: Instant, down_after: Duration) -> Vec<SssChange> {
        // A heartbeat heard in the future is corrupt state: count it as heard now, so a
        // fake entry for a node that sends no heartbeat (down, absent, or this node
        // itself) goes within three intervals, as seed 003's stabilisation proof has it.
        for p in self.peers.values_mut() {
            p.heard = p.heard.min(now);
        }
        let down: Vec<DeviceId> = (self.peers.iter())
            .filter(|(_, p)| p.heard + down_after <= now)
            .map(|(d, _)| *d)
            .collect();
        for d in &down {
            self.peers.remove(d);
        }
        down.into_iter().map(SssChange::Down).collect()
    }

    /// When the next entry times out.
    pub fn next_expiry(&self, down_after: Duration) -> Option<Instant> {
        self.peers.values().map(|p| p.heard + down_after).min()
    }

    /// `set_of_up_nodes` (others only).
    pub fn up(&self) -> impl Iterator<Item = DeviceId> + '_ {
        self.peers.keys().copied()
    }

    /// Whether `d` is up.
    pub fn is_up(&self, d: DeviceId) -> bool {
        self.peers.contains_key(&d)
    }

    /// `set_of_LS_active_nodes` (others only), as `<activeStartTime, id>`.
    pub fn active(&self) -> impl Iterator<Item = (Instant, DeviceId)> + '_ {
        (self.peers.iter()).filter_map(|(d, p)| p.start.map(|s| (s, *d)))
    }

    /// Every entry (status, checkers).
    pub fn peers(&self) -> &BTreeMap<DeviceId, Peer> {
        &self.peers
    }

    /// Overwrite an entry as state corruption would (tests and the simulator's
    /// self-stabilisation runs only).
    pub fn corrupt(&mut self, d: DeviceId, peer: Option<Peer>) {
        match peer {
            Some(p) => self.peers.insert(d, p),
            None => self.peers.remove(&d),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Seed 003 self-stabilisation: "fake age values of any node j in the SSS of any other
    // node disappear within (3 SSS-heartbeat-interval) time". Found by the simulator's
    // lookup world (rare profile): a fake entry "heard" an hour ahead, for a node that
    // sends no heartbeat, stayed for the hour and no leader was elected meanwhile.
    #[test]
    fn a_fake_entry_heard_in_the_future_goes_within_three_intervals() {
        let mut s = Sss::default();
        let hb = Duration::from_millis(300);
        let now = Instant(10_000_000);
        let fake = Peer {
            heard: now + Duration::from_secs(3600),
            start: Some(Instant(1)),
            leader: false,
        };
        s.corrupt(DeviceId(9), Some(fake));
        assert!(s.expire(now, hb * 3).is_empty());
        let later = now + hb * 3;
        assert_eq!(s.expire(later, hb * 3), vec![SssChange::Down(DeviceId(9))]);
    }
}
