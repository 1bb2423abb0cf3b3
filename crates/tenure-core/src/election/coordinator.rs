//! The coordinator (DESIGN §6): the device the election made coordinator runs the outside
//! policies for the whole cluster (seed 000 §3), instead of each store's manager for
//! itself.
//!
//! Every member reports to the coordinator it follows, once a renewal period: how many
//! chunks it holds ([`CoordMsg::Member`]) and, for each store it manages, the store's
//! layout and failed chunks ([`CoordMsg::Store`]). From the latest reports the
//! coordinator decides, a round per renewal period:
//!
//! - **replace failed chunks**: a chunk failed for two lease lengths is replaced by a new
//!   chunk on the live device holding the fewest chunks that does not hold one of the
//!   store's chunks already (spreading chunks over devices);
//! - **spread managers**: a store whose layout is whole and that has been stable for
//!   `migrate_after` migrates to its preferred device when that device is live;
//! - **admit and retire devices** ([`super::members`]): operators' requests change the
//!   membership record, which the coordinator sends every member each round; a retiring
//!   device's chunks are replaced and its managers migrate; a drained one retires;
//! - **balance**: a chunk moves from a device holding at least [`BALANCE_GAP`] more chunks
//!   than the least loaded live active device onto it (so a newcomer, or a device back
//!   from a long outage, takes its share), [`BALANCE_AT_ONCE`] stores at a time.
//!
//! Each decision is a [`CoordMsg::Command`] to the store's manager, carrying the
//! coordinator's [`Term`]. A device refuses a command whose term is older than the
//! newest term it has seen (and persisted), so a deposed coordinator can do no harm; the
//! commands are idempotent (the manager re-checks their preconditions), so a command
//! repeated, or sent by two coordinators of different terms, changes nothing twice.

use super::Term;
use super::members::{MemberState, Members};
use crate::config::DeviceConfig;
use crate::ids::{ChunkId, DeviceId, Epoch, StoreId};
use crate::io::policy::PolicyCommand;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Messages between members and the coordinator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CoordMsg {
    /// A member's report to the coordinator of `term`.
    Member {
        /// The term the member follows.
        term: Term,
        /// Chunks the member holds.
        chunks: u32,
        /// The newest membership record the member has.
        members: Members,
    },
    /// The coordinator's membership record, sent to every member each round (and to
    /// devices being admitted or just retired).
    Members {
        /// The coordinator's term.
        term: Term,
        /// The record.
        members: Members,
    },
    /// An operator's membership request, forwarded to the coordinator.
    Request {
        /// `AddDevice` or `RemoveDevice`.
        cmd: PolicyCommand,
    },
    /// A store manager's report to the coordinator of `term`.
    Store {
        /// The term the manager follows.
        term: Term,
        /// The report.
        report: StoreReport,
    },
    /// A decision of the coordinator of `term`, to the store's manager.
    Command {
        /// The coordinator's term.
        term: Term,
        /// The decision.
        cmd: PolicyCommand,
    },
}

/// What a manager tells the coordinator about its store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreReport {
    /// The store.
    pub store: StoreId,
    /// Its epoch.
    pub epoch: Epoch,
    /// Its layout.
    pub chunks: Vec<ChunkId>,
    /// Chunks marked failed, with how long ago.
    pub failed: Vec<(ChunkId, Duration)>,
    /// How long this device has managed the store.
    pub managing_for: Duration,
    /// Whether a layout change is in progress (a chunk being created, a recovered chunk
    /// to rejoin, a transition): no new command until it is done.
    pub busy: bool,
}

/// The coordinator's view, kept on every device and used while it is coordinator.
#[derive(Clone, Debug, Default)]
pub struct Coordinator {
    /// Latest report per store: (from, received, report).
    stores: BTreeMap<StoreId, (DeviceId, Instant, StoreReport)>,
    /// Latest member report: (received, chunks held).
    reports: BTreeMap<DeviceId, (Instant, u32)>,
    /// No new command for a store before this time (the last one is under way), and
    /// the device it moves a chunk or the manager to.
    pending: BTreeMap<StoreId, (Instant, Option<DeviceId>)>,
    /// When this coordinator first saw each retiring device retiring: it is drained
    /// only by reports sent after that.
    retiring_since: BTreeMap<DeviceId, Instant>,
    /// The term the view was gathered in (reports of another term are not used).
    term: Option<Term>,
    /// The next decision round.
    next_round: Option<Instant>,
    /// The newest membership record known.
    pub members: Members,
    /// Operators' membership requests not applied yet.
    requests: Vec<PolicyCommand>,
    /// Stores with a balancing move under way.
    balancing: BTreeMap<StoreId, Instant>,
    /// Fewest active members a retirement may leave (the replication factor).
    min_active: usize,
    /// Members this coordinator found silent at a round (no fresh report).
    away: BTreeSet<DeviceId>,
    /// Members that reported again after being [`Coordinator::away`], and when: for
    /// [`RETURN_GRACE`] leases such a device is no target for a replacement of a failed
    /// chunk of its own, whose rejoin it may still be asking for.
    returned: BTreeMap<DeviceId, Instant>,
}

/// Leases a device back from silence (a restart, a partition healed) has before the
/// coordinator replaces a failed chunk of its own with a new chunk on it. Its chunks ask
/// their store's manager to rejoin as it boots (within the boot hold), and a rejoining
/// chunk is sent the rows it lacks; a new chunk in its place would be sent the store's
/// whole state, 64 of them at once when a device of a 3-device cluster comes back (at a
/// million held locks the survivors stalled shipping them, measured). A device that
/// lost the chunk (a wiped disk) still gets its replacement, after the grace.
pub const RETURN_GRACE: u32 = 2;

/// Leases a chunk must have been failed before a new chunk replaces it on its own device
/// (when no other device is free). A device that still holds the chunk has it rejoin, by
/// patch, once the fault that cut it off ends; only a device that lost it (a wiped disk,
/// a torn write) needs the new chunk and the store's whole state. Before this, in a
/// 3-device cluster under a stream of faults at 100,000 locks, every chunk failed for
/// two leases was replaced on its own device with a whole state each, the survivors
/// stalled shipping them, and sessions expired (`tenure chaos --fill-locks`, measured).
pub const SAME_DEVICE_AFTER: u32 = 5;

/// A device holding this many more chunks than the least loaded live active device
/// gives it one.
pub const BALANCE_GAP: u32 = 3;
/// At most this many stores move a chunk for balance at once.
pub const BALANCE_AT_ONCE: usize = 2;

/// What a decision round produced.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Round {
    /// Commands to stores' managers.
    pub decisions: Vec<Decision>,
    /// The membership record to send, and to whom.
    pub members: Option<(Members, Vec<DeviceId>)>,
}

/// A decision: send `cmd` to `to`.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The store's manager.
    pub to: DeviceId,
    /// The command.
    pub cmd: PolicyCommand,
}

impl Coordinator {
    /// Start (or keep) acting as coordinator of `term` at `now`. A new term starts from an
    /// empty view: reports gathered for another term may be out of date.
    pub fn start(&mut self, term: Term, now: Instant, cfg: &DeviceConfig, members: &Members) {
        if self.term != Some(term) {
            // The first round waits for a full set of reports. A coordinator elected
            // again under a new term keeps its schedule: when terms follow each other
            // faster than that wait, rounds would never come, and the record that would
            // end the elections — each round sends it to every member — would never be
            // sent (simulator seed 3353: two devices each holding a record that made the
            // other retiring deposed each other for 15 s after faults stopped, terms into
            // the thousands, and neither ran a round).
            let first = now + cfg.timing.renewal_period * 2;
            let next_round = match self.next_round {
                Some(t) if self.term.is_some() => t.min(first),
                _ => first,
            };
            *self = Coordinator {
                term: Some(term),
                next_round: Some(next_round),
                members: members.clone(),
                min_active: cfg.cluster.replication.max(1),
                ..Coordinator::default()
            };
        }
    }

    /// Stop acting as coordinator.
    pub fn stop(&mut self) {
        *self = Coordinator::default();
    }

    /// An operator's membership request (kept until applied).
    pub fn on_request(&mut self, cmd: PolicyCommand) {
        if self.term.is_some() && !self.requests.contains(&cmd) {
            self.requests.push(cmd);
        }
    }

    /// The term acted in, if coordinator.
    pub fn term(&self) -> Option<Term> {
        self.term
    }

    /// The next decision round.
    pub fn next_timeout(&self) -> Option<Instant> {
        self.next_round
    }

    /// A member's report.
    pub fn on_member(
        &mut self,
        now: Instant,
        from: DeviceId,
        term: Term,
        chunks: u32,
        members: &Members,
    ) {
        if self.term == Some(term) {
            self.reports.insert(from, (now, chunks));
            // The newer record, with what the other decided that it lacks: a retirement
            // another coordinator decided (in a record that lost to a newer one) still
            // holds, that device has stopped for good; and a device it admitted stays
            // admitted.
            self.members.merge(term, members, self.min_active);
        }
    }

    /// A manager's report.
    pub fn on_store(&mut self, now: Instant, from: DeviceId, term: Term, report: StoreReport) {
        if self.term != Some(term) {
            return;
        }
        let newer = self
            .stores
            .get(&report.store)
            .is_none_or(|(_, _, old)| old.epoch <= report.epoch);
        if newer {
            self.stores.insert(report.store, (from, now, report));
        }
    }

    /// Run a decision round if one is due.
    pub fn on_tick(&mut self, now: Instant, cfg: &DeviceConfig) -> Round {
        let Some(round) = self.next_round else {
            return Round::default();
        };
        let Some(term) = self.term else {
            return Round::default();
        };
        if round > now {
            return Round::default();
        }
        let t = &cfg.timing;
        self.next_round = Some(now + t.renewal_period);
        if !cfg.run_policies {
            return Round::default();
        }
        let fresh = t.renewal_period * 3;
        let me = cfg.id;
        // Live devices: this one, and those that reported recently.
        let live: BTreeMap<DeviceId, u32> = (self.reports.iter())
            .filter(|(d, (at, _))| **d == me || now.saturating_since(*at) <= fresh)
            .map(|(d, (_, n))| (*d, *n))
            .chain([(me, self.reports.get(&me).map_or(0, |m| m.1))])
            .collect();
        for d in self.members.ids() {
            if !live.contains_key(&d) {
                self.away.insert(d);
                self.returned.remove(&d);
            } else if self.away.remove(&d) {
                self.returned.insert(d, now);
            }
        }
        self.returned
            .retain(|_, since| now.saturating_since(*since) < t.lease * RETURN_GRACE);
        let before = self.members.clone();
        self.pending.retain(|_, (until, _)| *until > now);
        self.balancing.retain(|_, until| *until > now);
        self.apply_requests(term, cfg);
        let p = &cfg.planted;
        if !p.members_never_retire {
            let stores = cfg.cluster.stores;
            self.retire_drained(term, now, stores, fresh, p.members_retire_undrained);
        }
        if p.members_same_version && self.members != before {
            self.members.version = before.version;
        }
        let mut view = View {
            cfg,
            members: &self.members,
            live: &live,
            returned: &self.returned,
            load: live.clone(),
            balancing: self.balancing.len(),
        };
        let mut out = Vec::new();
        for (store, (from, at, r)) in &self.stores {
            if now.saturating_since(*at) > fresh || r.busy || self.pending.contains_key(store) {
                continue;
            }
            if let Some((d, balance)) = view.decide(*from, r) {
                if let PolicyCommand::ReplaceChunk { device, .. } = &d.cmd {
                    *view.load.entry(*device).or_default() += 1;
                }
                if balance {
                    view.balancing += 1;
                    self.balancing
                        .insert(*store, now + t.msg_timeout * 4 + t.lease * 2);
                }
                out.push(d);
            }
        }
        for d in &out {
            // A chunk creation takes up to four message timeouts and a relayout; a
            // migration a transition.
            let onto = match &d.cmd {
                PolicyCommand::ReplaceChunk { device, .. } => Some(*device),
                PolicyCommand::Migrate { to, .. } => Some(*to),
                _ => None,
            };
            self.pending.insert(
                d.cmd.store().expect("store command"),
                (now + t.msg_timeout * 4 + t.lease + t.renewal_period, onto),
            );
        }
        // Everyone in the record hears it each round, and so does every retired device
        // (one that missed the record retiring it learns it at the next round).
        let mut to: Vec<DeviceId> = self.members.ids();
        to.extend(self.members.retired.iter().copied());
        to.extend(
            before
                .ids()
                .into_iter()
                .filter(|d| !self.members.contains(*d) && !self.members.retired.contains(d)),
        );
        to.retain(|d| *d != me);
        Round {
            decisions: out,
            members: Some((self.members.clone(), to)),
        }
    }

    /// Apply the operators' membership requests.
    fn apply_requests(&mut self, term: Term, cfg: &DeviceConfig) {
        let min_active = cfg.cluster.replication.max(1);
        for cmd in std::mem::take(&mut self.requests) {
            match cmd {
                PolicyCommand::AddDevice {
                    device,
                    peer_addr,
                    client_addr,
                } => {
                    self.members.admit(term, device, &peer_addr, &client_addr);
                }
                PolicyCommand::RemoveDevice { device } => {
                    self.members.start_retiring(term, device, min_active);
                }
                _ => {}
            }
        }
    }

    /// A retiring device that holds no chunk and manages no store retires (any retiring
    /// device with `undrained`, a planted bug).
    fn retire_drained(
        &mut self,
        term: Term,
        now: Instant,
        stores: u32,
        fresh: std::time::Duration,
        undrained: bool,
    ) {
        let retiring: Vec<DeviceId> = (self.members.devices.iter())
            .filter(|(_, i)| i.state == MemberState::Retiring)
            .map(|(d, _)| *d)
            .collect();
        // Drained is judged on fresh reports only: the device's own (this one's too — a
        // coordinator that has not reported to itself yet does not count as empty) and
        // one from the manager of every store, or a chunk of a store not heard from yet
        // could be left behind (simulator seed 1300: a coordinator 1.8 s into its term
        // retired itself holding two chunks).
        //
        // The reports must also be newer than the retirement (as this coordinator saw
        // it start), and no command moving something onto the device may be under way:
        // a store's report from before a relayout that put a chunk on the device is
        // still fresh for a while (simulator seed 3598: a coordinator retired itself
        // 46 ms after the request, holding two chunks it had just asked for).
        self.retiring_since.retain(|d, _| retiring.contains(d));
        for d in &retiring {
            self.retiring_since.entry(*d).or_insert(now);
        }
        for d in retiring {
            let since = self.retiring_since[&d];
            let heard = |at: &Instant| now.saturating_since(*at) <= fresh && *at > since;
            let every_store = (0..stores)
                .all(|s| (self.stores.get(&StoreId(s))).is_some_and(|(_, at, _)| heard(at)));
            let moving = (self.pending.values()).any(|(_, onto)| *onto == Some(d));
            let empty = every_store
                && !moving
                && (self.reports.get(&d)).is_some_and(|(at, chunks)| heard(at) && *chunks == 0);
            let holds = (self.stores.values()).any(|(from, at, r)| {
                now.saturating_since(*at) <= fresh
                    && (*from == d || r.chunks.iter().any(|c| c.device == d))
            });
            if (empty && !holds) || undrained {
                self.members.retire(term, d);
            }
        }
    }
}

/// What a round's decisions look at.
struct View<'a> {
    cfg: &'a DeviceConfig,
    members: &'a Members,
    live: &'a BTreeMap<DeviceId, u32>,
    /// Devices back from silence within [`RETURN_GRACE`].
    returned: &'a BTreeMap<DeviceId, Instant>,
    /// Chunks per device, counting the moves decided this round.
    load: BTreeMap<DeviceId, u32>,
    /// Balancing moves under way.
    balancing: usize,
}

impl View<'_> {
    /// Whether `d` can take new chunks and managers: live and active.
    fn candidate(&self, d: DeviceId) -> bool {
        self.live.contains_key(&d) && self.members.is_active(d)
    }

    fn load(&self, d: DeviceId) -> u32 {
        self.load.get(&d).copied().unwrap_or(0)
    }

    /// The least loaded candidate for a new chunk of a store held by `holders`.
    fn target(&self, store: StoreId, holders: &BTreeSet<DeviceId>) -> Option<DeviceId> {
        let ranked = self.cfg.cluster.ranked_devices(store);
        (ranked.iter().enumerate())
            .filter(|(_, d)| self.candidate(**d) && !holders.contains(d))
            .min_by_key(|(rank, d)| (self.load(**d), *rank))
            .map(|(_, d)| *d)
    }

    /// The candidate to hold a new chunk replacing the failed chunk `old`: a device holding
    /// none of the store's other chunks, one other than `old`'s own preferred. `old`'s
    /// device is the last resort — a live device that lost the chunk (a torn write, a
    /// wiped disk) can hold its replacement, and when every other active member already
    /// holds a chunk it is the only place one can go (simulator seed 1352: four members,
    /// one retiring, a store's chunk lost on a device holding it — no other target, so the
    /// store stayed on two chunks and its retiring manager was never migrated). Only once
    /// the chunk has been failed for [`SAME_DEVICE_AFTER`] leases, and not while that
    /// device is just back from silence ([`RETURN_GRACE`]): until then its chunk may
    /// rejoin.
    fn replacement(
        &self,
        store: StoreId,
        chunks: &[ChunkId],
        old: ChunkId,
        failed_for: Duration,
    ) -> Option<DeviceId> {
        let others: BTreeSet<DeviceId> = (chunks.iter())
            .filter(|c| **c != old)
            .map(|c| c.device)
            .collect();
        let ranked = self.cfg.cluster.ranked_devices(store);
        let own_ok = failed_for >= self.cfg.timing.lease * SAME_DEVICE_AFTER
            && !self.returned.contains_key(&old.device);
        (ranked.iter().enumerate())
            .filter(|(_, d)| self.candidate(**d) && !others.contains(d))
            .filter(|(_, d)| **d != old.device || own_ok)
            .min_by_key(|(rank, d)| (**d == old.device, self.load(**d), *rank))
            .map(|(_, d)| *d)
    }

    /// The decision for one store, if any, and whether it is a balancing move.
    fn decide(&self, manager: DeviceId, r: &StoreReport) -> Option<(Decision, bool)> {
        let t = &self.cfg.timing;
        let holders: BTreeSet<DeviceId> = r.chunks.iter().map(|c| c.device).collect();
        let replace = |old: ChunkId, device: DeviceId| Decision {
            to: manager,
            cmd: PolicyCommand::ReplaceChunk {
                store: r.store,
                old,
                device,
            },
        };
        // A chunk failed for two lease lengths.
        if let Some((old, age)) = r.failed.iter().find(|(_, age)| *age >= t.lease * 2) {
            return Some((
                replace(*old, self.replacement(r.store, &r.chunks, *old, *age)?),
                false,
            ));
        }
        if !r.failed.is_empty() {
            return None;
        }
        // A chunk on a device that is retiring or no longer a member.
        if let Some(old) = (r.chunks.iter()).find(|c| !self.members.is_active(c.device)) {
            return Some((replace(*old, self.target(r.store, &holders)?), false));
        }
        // The manager is retiring: migrate to the best live active device.
        let ranked = self.cfg.cluster.ranked_devices(r.store);
        let best = ranked.iter().copied().find(|d| self.candidate(*d));
        if !self.members.is_active(manager) {
            let to = best?;
            let cmd = PolicyCommand::Migrate { store: r.store, to };
            return Some((Decision { to: manager, cmd }, false));
        }
        // Balance.
        if self.balancing < BALANCE_AT_ONCE
            && let Some(old) = (r.chunks.iter()).max_by_key(|c| (self.load(c.device), c.device))
            && let Some(to) = self.target(r.store, &holders)
            && self.load(old.device) >= self.load(to) + BALANCE_GAP
        {
            return Some((replace(*old, to), true));
        }
        // Spread managers: the store's preferred active device, when it is live and
        // things are quiet.
        let preferred = ranked.iter().copied().find(|d| self.members.is_active(*d));
        if preferred.is_some_and(|p| p != manager && self.candidate(p))
            && r.managing_for >= t.migrate_after
        {
            let to = preferred?;
            let cmd = PolicyCommand::Migrate { store: r.store, to };
            return Some((Decision { to: manager, cmd }, false));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClusterConfig;

    fn d(i: u64) -> DeviceId {
        DeviceId(i)
    }

    fn report(store: u32, chunks: &[u64]) -> StoreReport {
        StoreReport {
            store: StoreId(store),
            epoch: Epoch(1),
            chunks: (chunks.iter())
                .map(|i| ChunkId {
                    device: d(*i),
                    serial: u64::from(store),
                })
                .collect(),
            failed: Vec::new(),
            managing_for: Duration::from_secs(5),
            busy: false,
        }
    }

    // DESIGN §6: a device being retired is retired once drained — judged on a fresh
    // report of its own and one from the manager of every store (simulator seed 1300: a
    // coordinator early in its term retired a device, itself, that still held chunks of
    // stores it had not heard from yet).
    #[test]
    fn coordinator_retires_a_device_only_after_every_store_reported_it_drained() {
        let cfg = DeviceConfig::new(d(1), ClusterConfig::new(4, 2, 3));
        let term = Term { n: 3, leader: d(1) };
        let mut members = Members::bootstrap(&[d(1), d(2), d(3), d(4)]);
        assert!(members.start_retiring(term, d(1), 3));
        let mut c = Coordinator::default();
        let t0 = Instant(1_000_000);
        c.start(term, t0, &cfg, &members);
        let at = t0 + Duration::from_secs(2);
        for i in 1..=4 {
            c.on_member(at, d(i), term, if i == 1 { 0 } else { 2 }, &members);
        }
        c.on_store(at, d(2), term, report(0, &[2, 3, 4]));
        let round = c.on_tick(at + Duration::from_millis(1), &cfg);
        assert!(round.members.is_some());
        assert!(
            c.members.contains(d(1)),
            "store 1 not heard from: d1 may still hold one of its chunks"
        );
        let later = at + Duration::from_millis(500);
        c.on_member(later, d(1), term, 0, &members);
        c.on_store(later, d(2), term, report(0, &[2, 3, 4]));
        c.on_store(later, d(3), term, report(1, &[2, 3, 4]));
        c.on_tick(later + Duration::from_millis(200), &cfg);
        assert!(c.members.retired.contains(&d(1)));
        members = c.members.clone();
        assert!(!members.contains(d(1)));
    }

    // DESIGN §6: drained is judged on reports sent after the retirement started, and not
    // while a command moving a chunk onto the device is under way (simulator seed 3598:
    // a coordinator retired itself 46 ms after the request, holding two chunks it had
    // just asked for; the stores' reports from before those relayouts were still fresh).
    #[test]
    fn coordinator_retires_only_on_reports_newer_than_the_retirement_and_no_move_onto_it() {
        let cfg = DeviceConfig::new(d(1), ClusterConfig::new(4, 1, 3));
        let term = Term { n: 3, leader: d(1) };
        let members = Members::bootstrap(&[d(1), d(2), d(3), d(4)]);
        let mut c = Coordinator::default();
        let t0 = Instant(1_000_000);
        c.start(term, t0, &cfg, &members);
        let at = t0 + Duration::from_secs(2);
        // d4 is active and reports empty; store 0 lost its chunk on d3: the round moves
        // it onto d4.
        for i in 1..=4 {
            c.on_member(at, d(i), term, if i == 4 { 0 } else { 1 }, &members);
        }
        let mut r = report(0, &[1, 2, 3]);
        let lost = r.chunks[2];
        r.failed = vec![(lost, cfg.timing.lease * SAME_DEVICE_AFTER)];
        c.on_store(at, d(1), term, r);
        let round = c.on_tick(at + Duration::from_millis(1), &cfg);
        assert!(
            matches!(round.decisions[..], [Decision { cmd: PolicyCommand::ReplaceChunk { device, .. }, .. }] if device == d(4)),
            "{round:?}"
        );
        // Now d4 is to be removed. Its report and the store's are fresh but older than
        // the request, and the replacement onto it is under way.
        c.on_request(PolicyCommand::RemoveDevice { device: d(4) });
        let t1 = at + Duration::from_millis(400);
        c.on_tick(t1, &cfg);
        assert!(
            c.members.contains(d(4)),
            "reports older than the retirement"
        );
        let t2 = t1 + Duration::from_millis(10);
        c.on_member(t2, d(4), term, 0, &members);
        c.on_store(t2, d(1), term, report(0, &[1, 2, 3]));
        c.on_tick(t2 + cfg.timing.renewal_period, &cfg);
        assert!(c.members.contains(d(4)), "a chunk is being moved onto it");
        // Once the move is no longer under way, fresh empty reports retire it.
        let t3 = at + cfg.timing.msg_timeout * 4 + cfg.timing.lease + cfg.timing.renewal_period * 2;
        c.on_member(t3, d(4), term, 0, &members);
        c.on_store(t3, d(1), term, report(0, &[1, 2, 3]));
        c.on_tick(t3 + Duration::from_millis(1), &cfg);
        assert!(c.members.retired.contains(&d(4)), "{:?}", c.members);
    }
    // DESIGN §6: a coordinator elected again under a new term keeps its round schedule
    // (simulator seed 3353: terms followed each other faster than the first round's
    // wait, and no round — the one sending the record that would end the elections —
    // ever ran); a coordinator newly started waits two renewal periods for reports.
    #[test]
    fn coordinator_elected_again_keeps_its_round_schedule() {
        let cfg = DeviceConfig::new(d(1), ClusterConfig::new(3, 1, 3));
        let members = Members::bootstrap(&[d(1), d(2), d(3)]);
        let mut c = Coordinator::default();
        let t0 = Instant(1_000_000);
        c.start(Term { n: 3, leader: d(1) }, t0, &cfg, &members);
        let first = c.next_timeout().expect("a round");
        assert_eq!(first, t0 + cfg.timing.renewal_period * 2);
        let t1 = t0 + cfg.timing.renewal_period;
        c.start(Term { n: 4, leader: d(1) }, t1, &cfg, &members);
        assert_eq!(c.next_timeout(), Some(first), "the schedule is kept");
        assert_eq!(c.term(), Some(Term { n: 4, leader: d(1) }));
        let round = c.on_tick(first, &cfg);
        assert!(round.members.is_some(), "the round sends the record");
        c.stop();
        c.start(Term { n: 5, leader: d(1) }, t1, &cfg, &members);
        assert_eq!(c.next_timeout(), Some(t1 + cfg.timing.renewal_period * 2));
    }

    // DESIGN §6: a lost chunk is replaced even when every other active member holds one
    // of the store's chunks — on the device that lost it (simulator seed 1352), once it
    // has been failed for `SAME_DEVICE_AFTER` leases (until then it may rejoin).
    #[test]
    fn coordinator_replaces_a_lost_chunk_on_its_own_device_when_no_other_is_free() {
        let cfg = DeviceConfig::new(d(1), ClusterConfig::new(4, 1, 3));
        let term = Term { n: 3, leader: d(1) };
        let mut members = Members::bootstrap(&[d(1), d(2), d(3), d(4)]);
        assert!(members.start_retiring(term, d(4), 3));
        let mut c = Coordinator::default();
        let t0 = Instant(1_000_000);
        c.start(term, t0, &cfg, &members);
        let at = t0 + Duration::from_secs(2);
        for i in 1..=4 {
            c.on_member(at, d(i), term, if i == 4 { 0 } else { 1 }, &members);
        }
        let mut r = report(0, &[1, 2, 3]);
        let lost = r.chunks[1];
        // Failed for two leases: the chunk may still rejoin, its own device waits.
        r.failed = vec![(lost, cfg.timing.lease * 2)];
        c.on_store(at, d(4), term, r.clone());
        let round = c.on_tick(at + Duration::from_millis(1), &cfg);
        assert_eq!(round.decisions, vec![], "not yet on its own device");
        let at = at + cfg.timing.renewal_period;
        for i in 1..=4 {
            c.on_member(at, d(i), term, if i == 4 { 0 } else { 1 }, &members);
        }
        r.failed = vec![(lost, cfg.timing.lease * SAME_DEVICE_AFTER)];
        c.on_store(at, d(4), term, r);
        let round = c.on_tick(at + Duration::from_millis(1), &cfg);
        assert_eq!(
            round.decisions,
            vec![Decision {
                to: d(4),
                cmd: PolicyCommand::ReplaceChunk {
                    store: StoreId(0),
                    old: lost,
                    device: d(2),
                },
            }]
        );
    }

    // DESIGN §6: a device back from silence keeps its failed chunk for a grace: the
    // chunk asks to rejoin as the device boots and is sent the rows it lacks, where a new
    // chunk on that device would be sent the store's whole state (at a million held
    // locks, 64 of them at once stalled the survivors). After the grace a chunk still
    // failed is replaced there (a device that lost it).
    #[test]
    fn coordinator_gives_a_device_back_from_silence_a_grace_before_replacing_its_chunk_on_it() {
        let cfg = DeviceConfig::new(d(1), ClusterConfig::new(3, 1, 3));
        let term = Term { n: 3, leader: d(1) };
        let members = Members::bootstrap(&[d(1), d(2), d(3)]);
        let mut c = Coordinator::default();
        let t0 = Instant(1_000_000);
        c.start(term, t0, &cfg, &members);
        let period = cfg.timing.renewal_period;
        let mut at = t0 + period * 2;
        // d3 is silent at the first rounds (crashed).
        let mut r = report(0, &[1, 2, 3]);
        let lost = r.chunks[2];
        r.failed = vec![(lost, cfg.timing.lease * SAME_DEVICE_AFTER)];
        for _ in 0..3 {
            for i in 1..=2 {
                c.on_member(at, d(i), term, 1, &members);
            }
            c.on_store(at, d(1), term, r.clone());
            assert_eq!(
                c.on_tick(at, &cfg).decisions,
                vec![],
                "no other device to go to"
            );
            at = at + period;
        }
        // d3 is back: no replacement onto it within the grace...
        let back = at;
        while at < back + cfg.timing.lease * RETURN_GRACE {
            for i in 1..=3 {
                c.on_member(at, d(i), term, 1, &members);
            }
            c.on_store(at, d(1), term, r.clone());
            assert_eq!(c.on_tick(at, &cfg).decisions, vec![], "within the grace");
            at = at + period;
        }
        // ...and after it, the chunk still failed, it is replaced there.
        for i in 1..=3 {
            c.on_member(at, d(i), term, 1, &members);
        }
        c.on_store(at, d(1), term, r.clone());
        assert_eq!(
            c.on_tick(at, &cfg).decisions,
            vec![Decision {
                to: d(1),
                cmd: PolicyCommand::ReplaceChunk {
                    store: StoreId(0),
                    old: lost,
                    device: d(3),
                },
            }]
        );
    }
}
