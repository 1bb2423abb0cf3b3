//! The group-commit pipeline between a device's core and its disk, sans IO: durable before
//! acknowledged (DESIGN §10). The server's driver runs it with a storage thread and
//! sockets, the simulator with its simulated disks and their faults.
//!
//! - Every `Persist` joins the *open group* ([`Pipeline::persist`]). At the end of each
//!   input's (or batch's) outputs the driver closes the group ([`Pipeline::close_group`])
//!   and hands it to its disk. Groups are numbered from 1 in the order they are closed;
//!   the disk makes them durable in that order, several at once if it likes, and the
//!   driver reports the newest group durable ([`Pipeline::synced`]).
//! - Every output that leaves the device (a message, an answer, an event) is handed to
//!   [`Pipeline::hold`] with its [`Domain`]: it leaves at once when every persist it may
//!   depend on is durable ([`crate::gate`] decides which group that is), and is held
//!   otherwise, until [`Pipeline::ready`] or [`Pipeline::next_ready`] give it back after
//!   the group it waits for is durable.
//!
//! How held outputs are released is the driver's choice ([`Release`]): per domain in output
//! order (the server), or each as soon as its own group is durable (the simulator). Both
//! keep every domain's outputs to one peer in output order, and both let out only what is
//! durable; they differ only in whether an output may overtake an earlier one of its
//! domain that waits for a later group (one raised by a device-wide send to its peer).

use crate::gate::{Domain, Gate};
use crate::ids::{ChunkId, DeviceId, StoreId};
use crate::io::PersistOp;
use std::collections::{BTreeMap, VecDeque};

/// In what order held outputs leave once the groups they wait for are durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Release {
    /// Per domain in output order: an output also waits for every earlier held output of
    /// its domain. Outputs freed together leave in output order. The server's driver.
    #[default]
    DomainOrder,
    /// Each output as soon as the group it waits for is durable, whatever is still held
    /// before it. Outputs freed together leave in output order. The simulator.
    OwnGroup,
}

/// A durability report that does not fit the groups handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PipelineError {
    /// The group is durable already, or was never handed to the disk.
    #[error("commit of group {group} reported; durable {durable}, sent {sent}")]
    Synced {
        /// The group reported.
        group: u64,
        /// The newest group durable before.
        durable: u64,
        /// The newest group handed out.
        sent: u64,
    },
}

/// An output held until the group it waits for is durable.
#[derive(Clone, Debug)]
struct Waiting<H> {
    group: u64,
    /// Output number: outputs freed together leave in this order.
    seq: u64,
    out: H,
}

/// One device's group-commit pipeline; `H` is what the driver lets out (sends, replies,
/// events).
#[derive(Clone, Debug)]
pub struct Pipeline<H> {
    /// Persists of the open group.
    open: Vec<PersistOp>,
    /// The newest group handed out (0: none in this boot); the open group is the next.
    sent: u64,
    /// Every group up to this one is durable.
    durable: u64,
    /// The group each output waits for.
    gate: Gate,
    /// Held outputs per domain, in output order.
    held: BTreeMap<Domain, VecDeque<Waiting<H>>>,
    /// Number of held outputs.
    held_len: usize,
    /// Numbers outputs as they are held.
    seq: u64,
    release: Release,
}

impl<H> Default for Pipeline<H> {
    fn default() -> Pipeline<H> {
        Pipeline::booted([], Release::default())
    }
}

impl<H> Pipeline<H> {
    /// The pipeline of a device booting with `chunks` (chunk, its store) on disk.
    pub fn booted(chunks: impl IntoIterator<Item = (ChunkId, StoreId)>, release: Release) -> Self {
        Pipeline {
            open: Vec::new(),
            sent: 0,
            durable: 0,
            gate: Gate::booted(chunks),
            held: BTreeMap::new(),
            held_len: 0,
            seq: 0,
            release,
        }
    }

    /// `op` joins the open group.
    pub fn persist(&mut self, op: PersistOp) {
        self.gate.persist(&op, self.sent + 1);
        self.open.push(op);
    }

    /// Whether the open group holds a persist.
    pub fn has_open(&self) -> bool {
        !self.open.is_empty()
    }

    /// Close the open group, if it holds a persist: its number and persists, for the disk.
    pub fn close_group(&mut self) -> Option<(u64, Vec<PersistOp>)> {
        if self.open.is_empty() {
            return None;
        }
        self.sent += 1;
        Some((self.sent, std::mem::take(&mut self.open)))
    }

    /// The newest group closed (0: none in this boot).
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Every group up to this one is durable (0: none in this boot).
    pub fn durable(&self) -> u64 {
        self.durable
    }

    /// Whether every closed group is durable.
    pub fn all_durable(&self) -> bool {
        self.durable == self.sent
    }

    /// Every group up to `group` is durable. Held outputs it frees are given back by
    /// [`Self::ready`] or [`Self::next_ready`].
    pub fn synced(&mut self, group: u64) -> Result<(), PipelineError> {
        if group <= self.durable || group > self.sent {
            return Err(PipelineError::Synced {
                group,
                durable: self.durable,
                sent: self.sent,
            });
        }
        self.durable = group;
        self.gate.durable(group);
        Ok(())
    }

    /// An output of `domain` (a send to `to`, if it is one): given back if it may leave
    /// now, held otherwise.
    pub fn hold(&mut self, domain: Domain, to: Option<DeviceId>, out: H) -> Option<H> {
        let group = self.gate.wait_for(domain, to, self.durable);
        // `held` keeps no empty queue.
        let behind = self.release == Release::DomainOrder && self.held.contains_key(&domain);
        if group <= self.durable && !behind {
            return Some(out);
        }
        self.seq += 1;
        self.held.entry(domain).or_default().push_back(Waiting {
            group,
            seq: self.seq,
            out,
        });
        self.held_len += 1;
        None
    }

    /// Number of held outputs.
    pub fn held(&self) -> usize {
        self.held_len
    }

    /// Every held output free to leave, in output order.
    pub fn ready(&mut self) -> Vec<H> {
        if self.held_len == 0 {
            return Vec::new();
        }
        let durable = self.durable;
        let mut ready = Vec::new();
        for queue in self.held.values_mut() {
            match self.release {
                Release::DomainOrder => {
                    while queue.front().is_some_and(|w| w.group <= durable) {
                        ready.push(queue.pop_front().expect("checked"));
                    }
                }
                Release::OwnGroup => {
                    let (free, wait): (VecDeque<_>, VecDeque<_>) = std::mem::take(queue)
                        .into_iter()
                        .partition(|w| w.group <= durable);
                    ready.extend(free);
                    *queue = wait;
                }
            }
        }
        self.held.retain(|_, q| !q.is_empty());
        self.held_len -= ready.len();
        ready.sort_by_key(|w| w.seq);
        ready.into_iter().map(|w| w.out).collect()
    }

    /// The first held output, in output order, free to leave.
    pub fn next_ready(&mut self) -> Option<H> {
        let durable = self.durable;
        let release = self.release;
        let (domain, at, _) = (self.held.iter())
            .filter_map(|(d, q)| {
                let at = match release {
                    Release::DomainOrder => q.front().filter(|w| w.group <= durable).map(|_| 0),
                    Release::OwnGroup => q.iter().position(|w| w.group <= durable),
                }?;
                Some((*d, at, q[at].seq))
            })
            .min_by_key(|(_, _, seq)| *seq)?;
        let queue = self.held.get_mut(&domain).expect("found");
        let w = queue.remove(at).expect("found");
        if queue.is_empty() {
            self.held.remove(&domain);
        }
        self.held_len -= 1;
        Some(w.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::Version;

    const S1: StoreId = StoreId(1);
    const S2: StoreId = StoreId(2);
    const P: DeviceId = DeviceId(2);
    const Q: DeviceId = DeviceId(3);

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

    fn booted(release: Release) -> Pipeline<&'static str> {
        Pipeline::booted([(chunk(1), S1), (chunk(2), S2)], release)
    }

    // Durable before acknowledged: an output waits for the persists of its domain, and
    // leaves once their group is reported durable.
    #[test]
    fn an_output_leaves_once_its_persists_are_durable() {
        for release in [Release::DomainOrder, Release::OwnGroup] {
            let mut p = booted(release);
            assert_eq!(p.hold(Domain::Store(S1), None, "early"), Some("early"));
            p.persist(accept(chunk(1)));
            assert_eq!(p.hold(Domain::Store(S1), None, "s1"), None);
            // Another store's output does not wait for it.
            assert_eq!(p.hold(Domain::Store(S2), None, "s2"), Some("s2"));
            assert_eq!(p.hold(Domain::Device, None, "dev"), None);
            assert_eq!(p.held(), 2);
            assert!(p.all_durable());
            assert_eq!(p.close_group().map(|(g, ops)| (g, ops.len())), Some((1, 1)));
            assert_eq!(p.close_group(), None);
            assert!(!p.all_durable());
            assert!(p.ready().is_empty());
            assert_eq!(p.next_ready(), None);
            p.synced(1).unwrap();
            assert_eq!(p.ready(), vec!["s1", "dev"]);
            assert_eq!(p.held(), 0);
        }
    }

    #[test]
    fn a_report_must_fit_the_groups_handed_out() {
        let mut p = booted(Release::DomainOrder);
        assert!(p.synced(1).is_err(), "nothing handed out");
        p.persist(accept(chunk(1)));
        p.close_group();
        p.persist(accept(chunk(2)));
        p.close_group();
        p.synced(2).unwrap();
        assert_eq!(
            p.synced(1),
            Err(PipelineError::Synced {
                group: 1,
                durable: 2,
                sent: 2
            })
        );
    }

    // A snapshot message to P raises what S1's later send to P waits for (group 2), and
    // S1's send to Q after it waits for group 1 only: `DomainOrder` keeps it behind the
    // send to P, `OwnGroup` lets it out once group 1 is durable.
    #[test]
    fn the_release_orders_differ_only_in_overtaking_within_a_domain() {
        let run = |release| {
            let mut p = booted(release);
            p.persist(accept(chunk(1)));
            p.close_group();
            p.persist(accept(chunk(2)));
            assert_eq!(p.hold(Domain::Snapshot, Some(P), "marker"), None);
            assert_eq!(p.hold(Domain::Store(S1), Some(P), "s1-to-p"), None);
            assert_eq!(p.hold(Domain::Store(S1), Some(Q), "s1-to-q"), None);
            p.close_group();
            p.synced(1).unwrap();
            let first = p.ready();
            p.synced(2).unwrap();
            (first, p.ready())
        };
        assert_eq!(
            run(Release::DomainOrder),
            (vec![], vec!["marker", "s1-to-p", "s1-to-q"])
        );
        assert_eq!(
            run(Release::OwnGroup),
            (vec!["s1-to-q"], vec!["marker", "s1-to-p"])
        );
    }

    // `next_ready` gives back what `ready` would, one at a time, in output order.
    #[test]
    fn next_ready_takes_the_ready_outputs_one_by_one() {
        for release in [Release::DomainOrder, Release::OwnGroup] {
            let mut p = booted(release);
            p.persist(accept(chunk(2)));
            p.persist(accept(chunk(1)));
            assert_eq!(p.hold(Domain::Store(S2), None, "a"), None);
            assert_eq!(p.hold(Domain::Store(S1), None, "b"), None);
            assert_eq!(p.hold(Domain::Store(S2), None, "c"), None);
            p.close_group();
            p.persist(accept(chunk(1)));
            assert_eq!(p.hold(Domain::Store(S1), None, "d"), None);
            p.close_group();
            p.synced(1).unwrap();
            let got: Vec<_> = std::iter::from_fn(|| p.next_ready()).collect();
            assert_eq!(got, vec!["a", "b", "c"]);
            assert_eq!(p.held(), 1);
            p.synced(2).unwrap();
            assert_eq!(p.next_ready(), Some("d"));
            assert_eq!(p.next_ready(), None);
        }
    }
}
