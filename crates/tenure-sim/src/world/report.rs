//! What a run reports ([`RunReport`]): its outcome, the faults injected, the lock clients'
//! and SafeTalk's figures, the windows after wall-clock steps; and the end of a run, which
//! orders the checkers' violations (correctness first) and fills the report.

use super::{Captured, ManagerCrash, START_US, UpdateDelay, World};
use crate::checks::{CheckCounts, Violation, ViolationKind};
use crate::clock::Clock;
use crate::knobs::{DiskKnobs, Knobs, LockKnobs};
use crate::lockcheck::LockCheckCounts;
use serde::Serialize;
use std::collections::BTreeMap;

/// Faults injected, by kind.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Faults {
    /// Partitions into random halves.
    pub partitions_halves: u64,
    /// Partitions isolating one device.
    pub partitions_isolate: u64,
    /// One-way partitions among them.
    pub one_way: u64,
    /// Heals by the nemesis (not counting partitions that ended by themselves).
    pub heals: u64,
    /// Crashes.
    pub crashes: u64,
    /// Among them, crashes in the middle of an output batch (only a prefix of the
    /// outputs of the device's last input happened).
    pub torn_crashes: u64,
    /// Groups of persists lost at crashes before their sync completed (lost unsynced
    /// writes; nothing acknowledged depended on them).
    pub unsynced_lost: u64,
    /// Commits in flight at a crash whose record reached the disk torn (a prefix of its
    /// bytes), refused by recovery's checksum.
    pub torn_records: u64,
    /// Commits in flight at a crash whose record reached the disk whole, though their
    /// sync never returned.
    pub unsynced_survived: u64,
    /// Commits that stalled (up to three leases) before becoming durable.
    pub disk_stalls: u64,
    /// Chunk records written whole (rows included).
    pub records_whole: u64,
    /// Chunk records written as their head alone (`PutChunkHead`: the rows stay).
    pub record_heads: u64,
    /// Pauses.
    pub pauses: u64,
    /// Messages lost (random loss and partitions).
    pub lost: u64,
    /// Messages duplicated.
    pub duplicated: u64,
    /// Wall-clock steps forward ([`crate::clock`]).
    pub clock_steps_forward: u64,
    /// Wall-clock steps back.
    pub clock_steps_back: u64,
    /// Boots of a device whose wall clock had stepped: its clock reads from an origin off
    /// the others' by the steps.
    pub boots_after_step: u64,
}

impl Faults {
    /// Add another run's counts.
    pub fn add(&mut self, o: &Faults) {
        self.clock_steps_forward += o.clock_steps_forward;
        self.clock_steps_back += o.clock_steps_back;
        self.boots_after_step += o.boots_after_step;
        self.partitions_halves += o.partitions_halves;
        self.partitions_isolate += o.partitions_isolate;
        self.one_way += o.one_way;
        self.heals += o.heals;
        self.crashes += o.crashes;
        self.torn_crashes += o.torn_crashes;
        self.unsynced_lost += o.unsynced_lost;
        self.torn_records += o.torn_records;
        self.unsynced_survived += o.unsynced_survived;
        self.disk_stalls += o.disk_stalls;
        self.records_whole += o.records_whole;
        self.record_heads += o.record_heads;
        self.pauses += o.pauses;
        self.lost += o.lost;
        self.duplicated += o.duplicated;
    }
}

/// How a run ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum Outcome {
    /// Every invariant held and every store converged.
    #[default]
    Passed,
    /// A safety invariant broke.
    Correctness,
    /// A store did not regain a manager within the liveness bound.
    Liveness,
}

/// What one run did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunReport {
    /// The seed.
    pub seed: u64,
    /// How it ended.
    pub outcome: Outcome,
    /// The knobs the seed chose.
    pub knobs: Option<Knobs>,
    /// Each device's clock.
    pub clocks: BTreeMap<u64, Clock>,
    /// Simulated time (µs).
    pub sim_us: u64,
    /// Events processed.
    pub events: u64,
    /// Faults injected.
    pub faults: Faults,
    /// Manager regenerations (`BecameManager` with cause `Regeneration`).
    pub regenerations: u64,
    /// Whether the run's devices forward requests for stores they do not manage (drawn
    /// per seed: three runs in four).
    pub forward: bool,
    /// Client requests a device forwarded to another (`Msg::Forward` requests sent).
    pub forwarded: u64,
    /// Committed migrations.
    pub migrations: u64,
    /// Committed relayouts.
    pub relayouts: u64,
    /// Operator policy commands sent.
    pub policy_commands: u64,
    /// Client writes issued.
    pub writes_issued: u64,
    /// Writes acknowledged (observed at managers).
    pub writes_acked: u64,
    /// Longest time a store was without a working manager, ended by regaining one (µs).
    pub max_failover_us: u64,
    /// Time the liveness phase took to converge (µs).
    pub liveness_converged_us: Option<u64>,
    /// How often each checker compared something.
    pub checks: CheckCounts,
    /// The lock workload this seed chose.
    pub lock_knobs: Option<LockKnobs>,
    /// The disks this seed chose.
    pub disk_knobs: Option<DiskKnobs>,
    /// What the lock clients did.
    pub locks: LockStats,
    /// How often the lock checkers compared something.
    pub lock_checks: LockCheckCounts,
    /// SafeTalk messages sent by managers holding a chunk of their store.
    pub safetalk: SafeTalkCost,
    /// SafeTalk messages sent by managers on a device holding none of their store's
    /// chunks.
    pub safetalk_apart: SafeTalkCost,
    /// Epoch transitions' votes and commits between devices, whole or by difference.
    pub transitions: TransitionCost,
    /// Update delays under managers holding a chunk of their store.
    pub update_delay: UpdateDelay,
    /// Update delays under managers holding none.
    pub update_delay_apart: UpdateDelay,
    /// The windows after each wall-clock step the seed drew ([`StepWindow`]).
    pub step_windows: Vec<StepWindow>,
    /// Violations (empty on success).
    pub violations: Vec<Violation>,
    /// Simulated time of the first violation (µs since the start).
    pub failed_at_us: Option<u64>,
    /// The event trace, if asked for.
    #[serde(skip)]
    pub trace: String,
    /// Messages and records kept for a fuzzing corpus ([`SimConfig::capture`]).
    ///
    /// [`SimConfig::capture`]: super::SimConfig::capture
    #[serde(skip)]
    pub captured: Captured,
    /// The lock history (operations as clients saw them), if asked for.
    #[serde(skip)]
    pub lock_history:
        Vec<crate::lincheck::Operation<crate::lincheck::LockInput, crate::lincheck::LockOutput>>,
    /// A hash of every event and observation (determinism check).
    pub fingerprint: u64,
    /// The object workload this seed chose (when object clients ran).
    pub object_knobs: Option<crate::objects::ObjectKnobs>,
    /// What the object clients and watchers did, and how often the object checkers
    /// compared something.
    pub objects: crate::objects::ObjectStats,
    /// The election knobs this seed chose.
    pub election_knobs: Option<crate::election::ElectionKnobs>,
    /// What the elections did, and how often the election checkers looked.
    pub elections: crate::election::ElectionStats,
    /// The snapshot knobs this seed chose.
    pub snapshot_knobs: Option<crate::snapshot::SnapshotKnobs>,
    /// What the snapshots did, and how often the snapshot checkers looked.
    pub snapshots: crate::snapshot::SnapshotStats,
    /// The membership knobs this seed chose.
    pub membership_knobs: Option<crate::membership::MembershipKnobs>,
    /// What the membership changes did, and how often the membership checkers looked.
    pub membership: crate::membership::MembershipStats,
    /// The measured manager crash ([`SimConfig::crash_manager_at_us`]).
    ///
    /// [`SimConfig::crash_manager_at_us`]: super::SimConfig::crash_manager_at_us
    pub manager_crash: Option<ManagerCrash>,
    /// The lookup world's knobs.
    pub lookup_knobs: Option<crate::lookup::knobs::LookupKnobs>,
    /// What the lookup world measured.
    pub lookup: Option<crate::lookup::LookupStats>,
}

/// How long after a wall-clock step its window is measured: five leases, past the
/// step's possible effects on the stepped device's timers (none, its deadlines being on
/// its monotonic clock) and on a failover it might start.
pub const STEP_WINDOW_US: u64 = 10_000_000;

/// The [`STEP_WINDOW_US`] after one wall-clock step the seed drew.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct StepWindow {
    /// The device whose clock stepped.
    pub device: u64,
    /// When (µs since the start).
    pub at_us: u64,
    /// By how much (µs; negative is back).
    pub jump_us: i64,
    /// Whether the step was taken (else the same window without it).
    pub taken: bool,
    /// The longest any store was without a working manager within the window (µs),
    /// whatever the cause (the run's other faults go on meanwhile).
    pub longest_outage_us: u64,
    /// Lock grants that reached their clients within the window, in every store.
    pub grants: u64,
}

/// What the lock clients did in a run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LockStats {
    /// Sessions opened.
    pub sessions_opened: u64,
    /// Grants received.
    pub grants: u64,
    /// Acknowledged releases.
    pub releases: u64,
    /// Of those, acknowledged to a retry (the same request id after a lost attempt).
    pub releases_retried: u64,
    /// Acquires answered without a grant (try, timeout, deadlock...).
    pub acquire_failures: u64,
    /// Session ends applied by managers (expiries and closes).
    pub session_ends: u64,
    /// Client deadlines that passed (the client dropped its session).
    pub deadlines_passed: u64,
    /// Client pauses.
    pub client_pauses: u64,
    /// Client crashes.
    pub client_crashes: u64,
    /// Operations in the history.
    pub history_ops: u64,
    /// Requests sent while another request of the same client was in flight (keep-alives
    /// aside): pipelining at work.
    pub pipelined: u64,
    /// Answers that arrived while a request the client sent earlier was still unanswered.
    pub out_of_order: u64,
    /// Session streams resumed on another target with requests in flight (after a
    /// redirect, `Unavailable` or a client-side timeout).
    pub stream_resumes: u64,
    /// Requests re-sent, with their request ids, on a resumed stream.
    pub resent: u64,
}

impl LockStats {
    /// Add another run's figures.
    pub fn add(&mut self, o: &LockStats) {
        self.sessions_opened += o.sessions_opened;
        self.grants += o.grants;
        self.releases += o.releases;
        self.releases_retried += o.releases_retried;
        self.acquire_failures += o.acquire_failures;
        self.session_ends += o.session_ends;
        self.deadlines_passed += o.deadlines_passed;
        self.client_pauses += o.client_pauses;
        self.client_crashes += o.client_crashes;
        self.history_ops += o.history_ops;
        self.pipelined += o.pipelined;
        self.out_of_order += o.out_of_order;
        self.stream_resumes += o.stream_resumes;
        self.resent += o.resent;
    }
}

/// The votes and commits of epoch transitions that crossed devices: whole states, or
/// summaries and patches (DESIGN "State at scale").
#[derive(Clone, Debug, Default, Serialize)]
pub struct TransitionCost {
    /// Votes carrying a chunk's whole state.
    pub votes_whole: u64,
    /// Votes naming a chunk's state by stamp and confirmed number.
    pub votes_summary: u64,
    /// Chunks asked for their whole state after a summary.
    pub states_asked: u64,
    /// Commits carrying the whole merged state.
    pub commits_whole: u64,
    /// Commits carrying a patch.
    pub commits_patch: u64,
    /// Rows those patches carried.
    pub patch_rows: u64,
    /// Relayouts' epoch transitions carrying the whole state to a chunk that lacked it.
    pub reconciles_whole: u64,
    /// The same, carrying a patch of a table the rejoining chunk held.
    pub reconciles_patch: u64,
    /// Rows those patches carried.
    pub reconcile_rows: u64,
}

impl TransitionCost {
    /// Add another run's counts.
    pub fn add(&mut self, o: &TransitionCost) {
        self.votes_whole += o.votes_whole;
        self.votes_summary += o.votes_summary;
        self.states_asked += o.states_asked;
        self.commits_whole += o.commits_whole;
        self.commits_patch += o.commits_patch;
        self.patch_rows += o.patch_rows;
        self.reconciles_whole += o.reconciles_whole;
        self.reconciles_patch += o.reconciles_patch;
        self.reconcile_rows += o.reconcile_rows;
    }
}

/// SafeTalk messages (seed 004 §3): ACCEPT, ACCEPTED and standalone CONFIRM, to or from a
/// chunk on another device (remote) or on the manager's own device (local).
#[derive(Clone, Debug, Default, Serialize)]
pub struct SafeTalkCost {
    /// ACCEPT messages to remote chunks.
    pub accept_remote: u64,
    /// ACCEPTED messages from remote chunks.
    pub accepted_remote: u64,
    /// Standalone CONFIRM messages to remote chunks.
    pub confirm_remote: u64,
    /// SafeTalk messages between a manager and its own device's chunk.
    pub local: u64,
    /// Batches (ACCEPT rounds), counted once per manager.
    pub batches: u64,
    /// Changes carried by those batches.
    pub ops: u64,
}

impl SafeTalkCost {
    /// Add another run's counts.
    pub fn add(&mut self, o: &SafeTalkCost) {
        self.accept_remote += o.accept_remote;
        self.accepted_remote += o.accepted_remote;
        self.confirm_remote += o.confirm_remote;
        self.local += o.local;
        self.batches += o.batches;
        self.ops += o.ops;
    }

    /// Remote messages per batch and remote chunk.
    pub fn per_batch_per_chunk(&self) -> f64 {
        let m = (self.accept_remote + self.accepted_remote + self.confirm_remote) as f64;
        m / self.accept_remote.max(1) as f64
    }
}

impl World {
    /// What happened in the [`STEP_WINDOW_US`] after each wall-clock step the seed drew
    /// (taken, or with `--clock-steps off` the same instants without a step).
    fn step_windows(&self) -> Vec<StepWindow> {
        let open = self
            .avail
            .unmanaged_since
            .values()
            .map(|&since| (since, self.now));
        let outages: Vec<(u64, u64)> = self.avail.outages.iter().copied().chain(open).collect();
        let stepped = self.nodes.values().any(|n| !n.clock.steps.is_empty());
        (self.avail.drawn_steps.iter())
            .filter(|&&(_, at, _)| at < self.now)
            .map(|&(device, at, jump_us)| {
                let end = at + STEP_WINDOW_US;
                let longest_outage_us = (outages.iter())
                    .map(|&(since, until)| until.min(end).saturating_sub(since.max(at)))
                    .max()
                    .unwrap_or(0);
                let grants = (self.avail.grant_times.iter())
                    .filter(|&&t| (at..end).contains(&t))
                    .count() as u64;
                StepWindow {
                    device,
                    at_us: at - START_US,
                    jump_us,
                    taken: stepped,
                    longest_outage_us,
                    grants,
                }
            })
            .collect()
    }

    /// End the run: order the violations (correctness first) and fill the report.
    pub(super) fn finish(mut self) -> RunReport {
        self.report.sim_us = self.since_start();
        self.checker
            .violations
            .extend(std::mem::take(&mut self.locks.violations));
        // Correctness before liveness: the first violation decides the outcome.
        let (live, safe): (Vec<_>, Vec<_>) = std::mem::take(&mut self.obj.check.violations)
            .into_iter()
            .partition(|v| v.is_liveness());
        let (el_live, el_safe): (Vec<_>, Vec<_>) = std::mem::take(&mut self.elections.violations)
            .into_iter()
            .partition(|v| v.is_liveness());
        let (snap_live, snap_safe): (Vec<_>, Vec<_>) = std::mem::take(&mut self.cuts.violations)
            .into_iter()
            .partition(|v| v.is_liveness());
        let (mem_live, mem_safe): (Vec<_>, Vec<_>) = std::mem::take(&mut self.members.violations)
            .into_iter()
            .partition(|v| v.is_liveness());
        (self.checker.violations).extend(mem_safe.into_iter().map(Violation::Membership));
        (self.checker.violations).extend(el_safe.into_iter().map(Violation::Election));
        (self.checker.violations).extend(snap_safe.into_iter().map(Violation::Snapshot));
        (self.checker.violations).extend(safe.into_iter().map(Violation::Objects));
        (self.checker.violations).extend(live.into_iter().map(Violation::Objects));
        (self.checker.violations).extend(el_live.into_iter().map(Violation::Election));
        (self.checker.violations).extend(snap_live.into_iter().map(Violation::Snapshot));
        (self.checker.violations).extend(mem_live.into_iter().map(Violation::Membership));
        // Correctness first, in the order found.
        let (safe, live): (Vec<_>, Vec<_>) = std::mem::take(&mut self.checker.violations)
            .into_iter()
            .partition(|v| v.kind() == ViolationKind::Correctness);
        self.checker.violations = safe.into_iter().chain(live).collect();
        self.elections.finish();
        self.report.elections = self.elections.stats.clone();
        self.report.snapshots = self.cuts.stats.clone();
        self.report.membership = self.members.stats.clone();
        self.report.objects.checks = self.obj.check.counts.clone();
        self.report.lock_checks = self.locks.counts.clone();
        self.report.locks.history_ops = self.locks.ops.len() as u64;
        if self.cfg.keep_history {
            self.report.lock_history = self.locks.history();
        }
        self.report.violations = std::mem::take(&mut self.checker.violations);
        self.report.checks = self.checker.counts.clone();
        self.report.step_windows = self.step_windows();
        if let Some(v) = self.report.violations.first() {
            self.report.failed_at_us = Some(self.now - START_US);
            self.report.outcome = match v.kind() {
                ViolationKind::Correctness => Outcome::Correctness,
                ViolationKind::Liveness => Outcome::Liveness,
            };
            let vs: Vec<String> = self
                .report
                .violations
                .iter()
                .map(|v| v.to_string())
                .collect();
            for v in vs {
                self.trace(|| format!("VIOLATION {v}"));
            }
        }
        self.report.fingerprint = self.hash;
        self.report
    }
}
