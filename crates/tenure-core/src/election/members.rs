//! Membership (DESIGN §6): the set of devices is replicated state, changed only by the
//! coordinator.
//!
//! A [`Members`] record carries a version `(n, term)`: the coordinator of `term` makes
//! change `n`. Every device persists the newest record it has seen and adopts any newer
//! one, so records only move forward; a new coordinator starts from the newest record
//! among its own and its members' reports (a change a majority holds is not lost when
//! its coordinator fails).
//!
//! - **Admit** (`tenure cluster add`): an operator asks any device to add a device with
//!   its addresses; the request reaches the coordinator, which adds it as
//!   [`MemberState::Active`]. The newcomer, started with `join`, has no chunks and takes
//!   no part in elections until the record names it; from then on the coordinator's
//!   balancing moves chunks onto it and its preferred stores' managers migrate to it.
//! - **Retire** (`tenure cluster remove`): the device becomes [`MemberState::Retiring`]:
//!   it is no longer a candidate for chunks or managers, its chunks are replaced
//!   elsewhere and its managers migrate away; once it holds no chunk and manages no store
//!   the coordinator removes it from the record and lists it as retired.

use super::Term;
use crate::ids::DeviceId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A member's standing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum MemberState {
    /// Serves: a candidate for chunks, managers and coordinator.
    Active,
    /// Being drained: keeps serving what it has until it has moved away.
    Retiring,
}

/// One member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberInfo {
    /// Its standing.
    pub state: MemberState,
    /// Where its peer transport listens (opaque to the core; empty when unknown).
    pub peer_addr: String,
    /// Where its client API listens (opaque to the core; empty when unknown).
    pub client_addr: String,
}

/// A membership record's version: the change counter and the term that made it.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct MembersVersion {
    /// Change counter.
    pub n: u64,
    /// The coordinator's term that made the change (zero for the bootstrap record).
    pub term: Term,
}

/// The cluster's membership.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Members {
    /// Its version.
    pub version: MembersVersion,
    /// The members.
    pub devices: BTreeMap<DeviceId, MemberInfo>,
    /// Devices that retired (they are never members again under the same id).
    pub retired: BTreeSet<DeviceId>,
}

impl Members {
    /// The bootstrap record: every configured device active, version zero.
    pub fn bootstrap(devices: &[DeviceId]) -> Members {
        Members {
            version: MembersVersion::default(),
            devices: (devices.iter())
                .map(|d| {
                    let info = MemberInfo {
                        state: MemberState::Active,
                        peer_addr: String::new(),
                        client_addr: String::new(),
                    };
                    (*d, info)
                })
                .collect(),
            retired: BTreeSet::new(),
        }
    }

    /// Every member (active or retiring), ascending.
    pub fn ids(&self) -> Vec<DeviceId> {
        self.devices.keys().copied().collect()
    }

    /// Active members, ascending.
    pub fn active(&self) -> Vec<DeviceId> {
        (self.devices.iter())
            .filter(|(_, i)| i.state == MemberState::Active)
            .map(|(d, _)| *d)
            .collect()
    }

    /// Members being retired, ascending.
    pub fn retiring(&self) -> Vec<DeviceId> {
        (self.devices.iter())
            .filter(|(_, i)| i.state == MemberState::Retiring)
            .map(|(d, _)| *d)
            .collect()
    }

    /// Whether `d` is a member.
    pub fn contains(&self, d: DeviceId) -> bool {
        self.devices.contains_key(&d)
    }

    /// Whether `d` is an active member.
    pub fn is_active(&self, d: DeviceId) -> bool {
        self.devices
            .get(&d)
            .is_some_and(|i| i.state == MemberState::Active)
    }

    /// A new version of this record, made by the coordinator of `term`.
    fn bump(&mut self, term: Term) {
        self.version = MembersVersion {
            n: self.version.n + 1,
            term,
        };
    }

    /// Admit `d` (idempotent); false if it cannot be (it retired, or is retiring).
    pub fn admit(&mut self, term: Term, d: DeviceId, peer_addr: &str, client_addr: &str) -> bool {
        if self.retired.contains(&d) {
            return false;
        }
        match self.devices.get(&d) {
            Some(i) if i.state == MemberState::Active => {
                // Already in: only addresses may be new.
                if (!peer_addr.is_empty() && i.peer_addr != peer_addr)
                    || (!client_addr.is_empty() && i.client_addr != client_addr)
                {
                    let i = self.devices.get_mut(&d).expect("member");
                    i.peer_addr = peer_addr.to_string();
                    i.client_addr = client_addr.to_string();
                    self.bump(term);
                }
                true
            }
            Some(_) => false,
            None => {
                self.devices.insert(
                    d,
                    MemberInfo {
                        state: MemberState::Active,
                        peer_addr: peer_addr.to_string(),
                        client_addr: client_addr.to_string(),
                    },
                );
                self.bump(term);
                true
            }
        }
    }

    /// Start retiring `d` (idempotent); false if `d` is not a member or if too few
    /// active members would remain (`min_active`).
    pub fn start_retiring(&mut self, term: Term, d: DeviceId, min_active: usize) -> bool {
        match self.devices.get(&d).map(|i| i.state) {
            Some(MemberState::Retiring) => true,
            Some(MemberState::Active) if self.active().len() > min_active => {
                self.devices.get_mut(&d).expect("member").state = MemberState::Retiring;
                self.bump(term);
                true
            }
            _ => false,
        }
    }

    /// Whether this record holds a decision `newer` lacks: a member `newer` neither lists
    /// nor retired, or a retirement it does not list.
    pub fn ahead_of(&self, newer: &Members) -> bool {
        (self.devices.keys()).any(|d| !newer.contains(*d) && !newer.retired.contains(d))
            || self.retired.iter().any(|d| !newer.retired.contains(d))
    }

    /// Take in what another record decided (the coordinator of `term`, on a member's
    /// report): the newer of the two is the base, and the other's decisions it lacks are
    /// carried over — a device it admitted that the base neither lists nor retired, a
    /// retirement, a device it made retiring (while `min_active` allows). Records are
    /// versioned by `(n, term)`, not by lineage: two coordinators of a partitioned cluster
    /// can each make change `n`, and the one made under the older term would otherwise
    /// vanish with the device it admitted (simulator seed 10213: d7 admitted in the
    /// record (1, term 12), then a coordinator of term 15 that had not heard of it admitted
    /// d6 as (1, term 15), and d7 was never a member again). Returns whether the result
    /// differs from this record.
    pub fn merge(&mut self, term: Term, other: &Members, min_active: usize) -> bool {
        let before = self.clone();
        let extra = if other.version > self.version {
            std::mem::replace(self, other.clone())
        } else {
            other.clone()
        };
        let mut changed = false;
        for d in &extra.retired {
            if self.devices.remove(d).is_some() | self.retired.insert(*d) {
                changed = true;
            }
        }
        for (d, info) in &extra.devices {
            if self.retired.contains(d) {
                continue;
            }
            match self.devices.get(d).map(|i| i.state) {
                None => {
                    self.devices.insert(*d, info.clone());
                    changed = true;
                }
                Some(MemberState::Active)
                    if info.state == MemberState::Retiring && self.active().len() > min_active =>
                {
                    self.devices.get_mut(d).expect("member").state = MemberState::Retiring;
                    changed = true;
                }
                _ => {}
            }
        }
        if changed {
            self.bump(term);
        }
        *self != before
    }

    /// `d` has drained: it leaves the record.
    pub fn retire(&mut self, term: Term, d: DeviceId) {
        if self.devices.remove(&d).is_some() {
            self.retired.insert(d);
            self.bump(term);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(n: u64) -> Term {
        Term {
            n,
            leader: DeviceId(9),
        }
    }

    #[test]
    fn members_admit_retiring_and_retire_each_make_one_new_version() {
        let mut m = Members::bootstrap(&[DeviceId(1), DeviceId(2), DeviceId(3)]);
        assert!(m.admit(term(1), DeviceId(4), "a:1", "a:2"));
        assert_eq!(m.version.n, 1);
        assert!(m.admit(term(1), DeviceId(4), "a:1", "a:2"), "idempotent");
        assert_eq!(m.version.n, 1, "no change, no new version");
        assert!(m.start_retiring(term(2), DeviceId(2), 3));
        assert_eq!(m.version.n, 2);
        assert_eq!(m.active(), vec![DeviceId(1), DeviceId(3), DeviceId(4)]);
        assert!(
            !m.start_retiring(term(2), DeviceId(3), 3),
            "would leave fewer than 3 active"
        );
        m.retire(term(2), DeviceId(2));
        assert_eq!(m.version.n, 3);
        assert!(!m.contains(DeviceId(2)));
        assert!(
            !m.admit(term(3), DeviceId(2), "", ""),
            "a retired id stays out"
        );
    }

    /// DESIGN §6, coordinator gathering reports: two coordinators of a partitioned
    /// cluster each made change 1; the one under the newer term is the base, and the
    /// device the other admitted is carried over in a new version (simulator seed 10213).
    #[test]
    fn members_merge_keeps_an_admission_made_in_a_record_that_lost() {
        let boot = Members::bootstrap(&[DeviceId(1), DeviceId(2), DeviceId(3)]);
        let mut older = boot.clone();
        assert!(older.admit(term(12), DeviceId(7), "p7", "c7"));
        let mut newer = boot.clone();
        assert!(newer.admit(term(15), DeviceId(6), "p6", "c6"));
        assert!(older.version < newer.version);
        for (mut base, other) in [(newer.clone(), &older), (older.clone(), &newer)] {
            assert!(base.merge(term(16), other, 3));
            assert!(base.is_active(DeviceId(6)) && base.is_active(DeviceId(7)));
            assert_eq!(base.devices[&DeviceId(7)].peer_addr, "p7");
            assert!(
                base.version > newer.version,
                "a new version: {:?}",
                base.version
            );
            assert_eq!(base.version.term, term(16));
            let v = base.version;
            assert!(
                !base.merge(term(16), other, 3),
                "merging again changes nothing"
            );
            assert_eq!(base.version, v);
        }
    }

    /// A retirement, and a device made retiring, in the record that lost still hold; a
    /// retiring state is carried only while enough active members remain.
    #[test]
    fn members_merge_keeps_retirements_and_retiring_within_min_active() {
        let boot = Members::bootstrap(&[DeviceId(1), DeviceId(2), DeviceId(3), DeviceId(4)]);
        let mut older = boot.clone();
        assert!(older.start_retiring(term(3), DeviceId(4), 3));
        older.retire(term(3), DeviceId(4));
        assert!(older.start_retiring(term(3), DeviceId(3), 2));
        let mut newer = boot.clone();
        assert!(newer.admit(term(5), DeviceId(5), "", ""));
        assert!(newer.admit(term(5), DeviceId(6), "", ""));
        assert!(newer.admit(term(5), DeviceId(7), "", ""));
        let mut m = newer.clone();
        assert!(m.merge(term(6), &older, 3));
        assert!(!m.contains(DeviceId(4)) && m.retired.contains(&DeviceId(4)));
        assert_eq!(m.retiring(), vec![DeviceId(3)]);
        assert!(m.is_active(DeviceId(7)));
        // With only three active members left, the retiring state is not carried.
        let mut other = boot.clone();
        assert!(other.start_retiring(term(3), DeviceId(3), 2));
        let mut small = boot.clone();
        assert!(small.start_retiring(term(5), DeviceId(4), 3));
        assert!(!small.merge(term(6), &other, 3));
        assert_eq!(small.active(), vec![DeviceId(1), DeviceId(2), DeviceId(3)]);
    }

    #[test]
    fn members_versions_order_by_change_then_term() {
        let a = MembersVersion {
            n: 2,
            term: term(1),
        };
        let b = MembersVersion {
            n: 2,
            term: term(3),
        };
        let c = MembersVersion {
            n: 3,
            term: term(1),
        };
        assert!(a < b && b < c);
    }
}
