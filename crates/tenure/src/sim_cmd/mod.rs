//! `tenure sim`: the deterministic simulator from the command line (DESIGN §10: any
//! failure prints its seed, and `tenure sim --seed N` replays it exactly).
//!
//! - `tenure sim --seed N [--trace]` runs one seed and prints its report (and, with
//!   `--trace`, every event: knobs, clocks, messages, observations, faults).
//! - `tenure sim --seeds 10000 [--from F]` sweeps seeds `F..F+N` on `--threads` workers
//!   with a progress bar and ends with the summary; every failing seed is printed with
//!   the exact command that replays it.
//! - `--plant broken-quorum|serve-without-lease|…` turns on a planted bug, to show the
//!   checkers catch it.
//! - `--pipelining off|forced` overrides the seed's choice of lock clients that pipeline
//!   requests on their session stream.
//! - `--lock-paths flat|nested` overrides the seed's choice of lock names: siblings, or
//!   paths of a small tree per store that cover one another.
//! - `--disk synchronous` overrides the seed's disks (slow group commits that stall, lose
//!   unsynced writes and tear their last record at crashes) with ones where every persist
//!   is durable at once.
//! - Object clients and watchers (seed 001) run beside the lock clients in every run of
//!   the stores' world (`--no-objects` leaves them out); reports and summaries print
//!   what they did and how often the object checkers compared something.
//! - `--world lookup` runs the lookup service's world (seed 003) instead of the stores':
//!   the seed draws the cluster, the seed's intervals and the failure class (common:
//!   the seed's bounds are asserted; rare: safety and self-stabilisation), unless
//!   `--lookup-profile common|rare` forces it. Summaries print the measured outage,
//!   staleness, divergence and stabilisation maxima beside the bounds of their runs.
//!
//! Exit status: 0 when every run passed, 2 on a correctness violation, 3 on a liveness
//! failure (and no correctness violation), 1 on a usage or internal error.

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use std::process::ExitCode;
use std::time::Instant as WallClock;
use tenure_core::PlantedBugs;
use tenure_sim::lookup::knobs::ProfileChoice;
use tenure_sim::lookup::summary::{Extreme, LookupSummary};
use tenure_sim::{
    DiskModel, LockPaths, Outcome, Pipelining, RunReport, SimConfig, Summary, WorldKind,
};

/// Exit status for a correctness violation.
const EXIT_CORRECTNESS: u8 = 2;
/// Exit status for a liveness failure.
const EXIT_LIVENESS: u8 = 3;

#[derive(Args, Debug)]
pub struct SimArgs {
    /// Replay exactly this seed.
    #[arg(long, conflicts_with_all = ["seeds", "from"])]
    seed: Option<u64>,
    /// Sweep this many seeds.
    #[arg(long)]
    seeds: Option<u64>,
    /// First seed of a sweep.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Devices in the cluster.
    #[arg(long, default_value_t = 5)]
    devices: u64,
    /// Stores.
    #[arg(long, default_value_t = 16)]
    stores: u32,
    /// Chunks per store.
    #[arg(long, default_value_t = 3)]
    replication: usize,
    /// Length of the safety phase (faults on), in simulated seconds [default: 20, or 60
    /// for the lookup world].
    #[arg(long)]
    safety_secs: Option<u64>,
    /// Liveness bound: every store must regain a manager within this many simulated
    /// seconds after faults stop.
    #[arg(long, default_value_t = 30)]
    liveness_secs: u64,
    /// Plant a known bug (the checkers must catch it). Repeatable.
    #[arg(long, value_enum)]
    plant: Vec<Plant>,
    /// A chunk persists its whole record after this many ACCEPT deltas in a row
    /// (`4294967295`: never, as the server runs).
    #[arg(long, default_value_t = tenure_core::io::CHECKPOINT_EVERY)]
    whole_record_every: u32,
    /// No faults at all (no nemesis, loss, operator commands or client failures): the
    /// calm path, for measuring message cost.
    #[arg(long)]
    calm: bool,
    /// Lock clients only (no register-write workload).
    #[arg(long)]
    no_writes: bool,
    /// No object clients or watchers in the stores' world.
    #[arg(long)]
    no_objects: bool,
    /// No membership changes (spare devices, adds and removes) in the stores' world:
    /// the runs of the simulator tests that leave them out.
    #[arg(long)]
    no_membership: bool,
    /// Which lock clients pipeline requests on their session stream.
    #[arg(long, value_enum, default_value_t = Pipeline::Drawn)]
    pipelining: Pipeline,
    /// Whether lock names are paths that cover one another (nested) or siblings (flat).
    #[arg(long, value_enum, default_value_t = Paths::Drawn)]
    lock_paths: Paths,
    /// Whether the seed draws the disks (slow commits, stalls, unsynced writes lost and
    /// records torn at crashes) or every persist is durable at once (synchronous).
    #[arg(long, value_enum, default_value_t = Disk::Drawn)]
    disk: Disk,
    /// Whether devices' wall clocks step (once or twice each, forward and back by 30 s, an
    /// hour, or beyond the lease and session TTL; a device restarted after a step reads
    /// its clock that far off the others'): on, off, or drawn by the seed (the default:
    /// one run in three with faults).
    #[arg(long, value_enum, default_value_t = Steps::Drawn)]
    clock_steps: Steps,
    /// Which world: the stores (layout, locks, registers) or the lookup service (seed
    /// 003; its seed draws the cluster, so --devices, --stores and --replication do not
    /// apply).
    #[arg(long, value_enum, default_value_t = World::Stores)]
    world: World,
    /// The lookup world's failure class.
    #[arg(long, value_enum, default_value_t = LookupProfile::Drawn)]
    lookup_profile: LookupProfile,
    /// Print the event trace of a single run.
    #[arg(long)]
    trace: bool,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
    /// Worker threads for a sweep.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Stop a sweep after this many failing seeds (0 = run them all).
    #[arg(long, default_value_t = 1)]
    stop_after: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Plant {
    /// The quorum predicate accepts any non-empty set of chunks.
    BrokenQuorum,
    /// Chunks serve operations whatever their lease state.
    ServeWithoutLease,
    /// The lock table grants without checking for conflicts.
    SkipConflictCheck,
    /// The lock table checks conflicts on the requested name only (no cover rule).
    IgnoreCover,
    /// Managers answer a SafeTalk batch after the first ACCEPTED instead of all.
    ConfirmBeforeAllAccepted,
    /// Chunks output ACCEPTED before persisting the changes they accept.
    AcceptedBeforePersist,
    /// A new manager expires every session at once instead of granting grace.
    ExpireWithoutGrace,
    /// A new manager ignores the sessions' renewal notes (counts from the first epoch seen).
    TakeoverIgnoresRenewal,
    /// A device times its deadlines on its wall clock, steps and all
    WallClockDeadlines,
    /// A device that does not manage a store redirects clients to itself.
    RedirectToSelf,
    /// The lookup service keeps no t + 1 bound (every join admitted, no step-down).
    LookupAdmitAll,
    /// A lookup leader keeps its leadership when an older active node appears.
    LookupKeepLeadership,
    /// Lookup nodes react to "node down" only at their next LONG_TIMEOUT.
    LookupLazyFailover,
    /// Volatile lookup entries live four intervals.
    LookupLongVolatileLifetime,
    /// Persistent lookup entries live two intervals and a round trip.
    LookupLongPersistentLifetime,
    /// A booting lookup node ignores the persistent entries on its disk.
    LookupForgetOnRestart,
    /// A lookup leader drops expired entries without telling subscribers.
    LookupSilentExpiry,
    /// A lookup leader restarts a subscription's sequence with every Sync.
    LookupSyncRestartsSeq,
    /// The lookup maintainer never runs on LONG_TIMEOUT.
    LookupNoLongTimeout,
    /// A lookup leader answers a get with a value nobody published.
    LookupFabricatedAnswer,
    /// A lookup leader answers queries without asking a node that came back for its
    /// persistent store.
    LookupNoPull,
    /// The object collector also deletes the blocks of active objects.
    ObjectsCollectActive,
    /// Fenced object writes are applied without checking the token.
    ObjectsIgnoreFence,
    /// A get returns the object's superseded content when there is one.
    ObjectsReadSuperseded,
    /// Object watches skip every change with an even revision.
    ObjectsWatchDrop,
    /// The object collector never runs.
    ObjectsNeverCollect,
    /// Coordinator commands are applied whatever their term.
    ElectionIgnoreTerm,
    /// A member that follows a coordinator acts as coordinator too.
    ElectionFollowerActs,
    /// Members never start an election when the coordinator falls silent.
    ElectionNoRestart,
    /// A device processes a message tagged with a snapshot marker before recording.
    SnapshotRecordLate,
    /// A restarted device forgets which snapshots it recorded (and records one again).
    SnapshotForgetRecorded,
    /// A device adopts membership records older than its own.
    MembersAdoptOlder,
    /// The coordinator retires a device before its chunks have moved.
    MembersRetireUndrained,
    /// The coordinator never retires a drained device.
    MembersNeverRetire,
    /// The coordinator changes the membership record without a new version.
    MembersSameVersion,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum World {
    /// Layout control, locks and sessions, registers.
    Stores,
    /// The lookup service (seed 003).
    Lookup,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LookupProfile {
    /// The seed decides.
    Drawn,
    /// Common failures only, one at a time: the seed's bounds are asserted.
    Common,
    /// Rare failures: safety and self-stabilisation are asserted.
    Rare,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Steps {
    /// The seed decides (one run in three with faults).
    Drawn,
    /// Every device's wall clock steps once or twice.
    On,
    /// No wall clock steps.
    Off,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Disk {
    /// The seed decides (synchronous in one run out of four).
    Drawn,
    /// Every persist is durable as the core outputs it.
    Synchronous,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Paths {
    /// The seed decides (nested in three runs out of four).
    Drawn,
    /// Sibling names only: no name covers another.
    Flat,
    /// Names from a small tree per store, some ancestors of others.
    Nested,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Pipeline {
    /// The seed decides (none, half or all of the clients; 1 to 8 requests in flight).
    Drawn,
    /// One request at a time per session.
    Off,
    /// Every client pipelines, 2 to 8 requests in flight.
    Forced,
}

impl SimArgs {
    fn safety_secs(&self) -> u64 {
        let default = match self.world {
            World::Stores => 20,
            World::Lookup => 60,
        };
        self.safety_secs.unwrap_or(default)
    }

    fn config(&self, seed: u64) -> anyhow::Result<SimConfig> {
        let mut c = SimConfig::new(seed);
        c.devices = self.devices;
        c.stores = self.stores;
        c.replication = self.replication;
        c.safety_us = self.safety_secs() * 1_000_000;
        c.liveness_us = self.liveness_secs * 1_000_000;
        c.planted = PlantedBugs {
            broken_quorum: self.plant.contains(&Plant::BrokenQuorum),
            serve_without_lease: self.plant.contains(&Plant::ServeWithoutLease),
            skip_conflict_check: self.plant.contains(&Plant::SkipConflictCheck),
            ignore_cover: self.plant.contains(&Plant::IgnoreCover),
            confirm_before_all_accepted: self.plant.contains(&Plant::ConfirmBeforeAllAccepted),
            accepted_before_persist: self.plant.contains(&Plant::AcceptedBeforePersist),
            expire_without_grace: self.plant.contains(&Plant::ExpireWithoutGrace),
            takeover_ignores_renewal: self.plant.contains(&Plant::TakeoverIgnoresRenewal),
            wall_clock_deadlines: self.plant.contains(&Plant::WallClockDeadlines),
            redirect_to_self: self.plant.contains(&Plant::RedirectToSelf),
            lookup_admit_all: self.plant.contains(&Plant::LookupAdmitAll),
            lookup_keep_leadership: self.plant.contains(&Plant::LookupKeepLeadership),
            lookup_lazy_failover: self.plant.contains(&Plant::LookupLazyFailover),
            lookup_long_volatile_lifetime: self.plant.contains(&Plant::LookupLongVolatileLifetime),
            lookup_long_persistent_lifetime: self
                .plant
                .contains(&Plant::LookupLongPersistentLifetime),
            lookup_forget_on_restart: self.plant.contains(&Plant::LookupForgetOnRestart),
            lookup_silent_expiry: self.plant.contains(&Plant::LookupSilentExpiry),
            lookup_sync_restarts_seq: self.plant.contains(&Plant::LookupSyncRestartsSeq),
            lookup_no_long_timeout: self.plant.contains(&Plant::LookupNoLongTimeout),
            lookup_fabricated_answer: self.plant.contains(&Plant::LookupFabricatedAnswer),
            lookup_no_pull: self.plant.contains(&Plant::LookupNoPull),
            objects_collect_active: self.plant.contains(&Plant::ObjectsCollectActive),
            objects_ignore_fence: self.plant.contains(&Plant::ObjectsIgnoreFence),
            objects_read_superseded: self.plant.contains(&Plant::ObjectsReadSuperseded),
            objects_watch_drop: self.plant.contains(&Plant::ObjectsWatchDrop),
            objects_never_collect: self.plant.contains(&Plant::ObjectsNeverCollect),
            election_ignore_term: self.plant.contains(&Plant::ElectionIgnoreTerm),
            election_follower_acts: self.plant.contains(&Plant::ElectionFollowerActs),
            election_no_restart: self.plant.contains(&Plant::ElectionNoRestart),
            snapshot_record_late: self.plant.contains(&Plant::SnapshotRecordLate),
            snapshot_forget_recorded: self.plant.contains(&Plant::SnapshotForgetRecorded),
            members_adopt_older: self.plant.contains(&Plant::MembersAdoptOlder),
            members_retire_undrained: self.plant.contains(&Plant::MembersRetireUndrained),
            members_never_retire: self.plant.contains(&Plant::MembersNeverRetire),
            members_same_version: self.plant.contains(&Plant::MembersSameVersion),
        };
        c.world = match self.world {
            World::Stores => WorldKind::Stores,
            World::Lookup => WorldKind::Lookup,
        };
        c.lookup_profile = match self.lookup_profile {
            LookupProfile::Drawn => ProfileChoice::Drawn,
            LookupProfile::Common => ProfileChoice::Common,
            LookupProfile::Rare => ProfileChoice::Rare,
        };
        c.whole_record_every = self.whole_record_every;
        c.faults = !self.calm;
        c.writes = !self.no_writes;
        c.objects = !self.no_objects;
        c.membership = !self.no_membership;
        c.pipelining = match self.pipelining {
            Pipeline::Drawn => Pipelining::Drawn,
            Pipeline::Off => Pipelining::Off,
            Pipeline::Forced => Pipelining::Forced,
        };
        c.lock_paths = match self.lock_paths {
            Paths::Drawn => LockPaths::Drawn,
            Paths::Flat => LockPaths::Flat,
            Paths::Nested => LockPaths::Nested,
        };
        c.disk = match self.disk {
            Disk::Drawn => DiskModel::Drawn,
            Disk::Synchronous => DiskModel::Synchronous,
        };
        c.clock_steps = match self.clock_steps {
            Steps::Drawn => None,
            Steps::On => Some(true),
            Steps::Off => Some(false),
        };
        c.trace = self.trace;
        c.validate().context("invalid simulator configuration")?;
        Ok(c)
    }

    /// The command that replays `seed` with these settings.
    fn replay_command(&self, seed: u64) -> String {
        let mut s = match self.world {
            World::Stores => format!(
                "tenure sim --seed {seed} --devices {} --stores {} --replication {} --safety-secs {} --liveness-secs {}",
                self.devices,
                self.stores,
                self.replication,
                self.safety_secs(),
                self.liveness_secs
            ),
            World::Lookup => format!(
                "tenure sim --world lookup --seed {seed} --safety-secs {}",
                self.safety_secs()
            ),
        };
        if self.lookup_profile != LookupProfile::Drawn {
            s.push_str(" --lookup-profile ");
            s.push_str(&crate::value_name(&self.lookup_profile));
        }
        if self.whole_record_every != tenure_core::io::CHECKPOINT_EVERY {
            s.push_str(&format!(
                " --whole-record-every {}",
                self.whole_record_every
            ));
        }
        if self.calm {
            s.push_str(" --calm");
        }
        if self.no_writes {
            s.push_str(" --no-writes");
        }
        if self.no_objects && self.world == World::Stores {
            s.push_str(" --no-objects");
        }
        if self.no_membership && self.world == World::Stores {
            s.push_str(" --no-membership");
        }
        if self.pipelining != Pipeline::Drawn {
            s.push_str(" --pipelining ");
            s.push_str(&crate::value_name(&self.pipelining));
        }
        if self.lock_paths != Paths::Drawn && self.world == World::Stores {
            s.push_str(" --lock-paths ");
            s.push_str(&crate::value_name(&self.lock_paths));
        }
        if self.disk != Disk::Drawn && self.world == World::Stores {
            s.push_str(" --disk ");
            s.push_str(&crate::value_name(&self.disk));
        }
        if self.clock_steps != Steps::Drawn && self.world == World::Stores {
            s.push_str(" --clock-steps ");
            s.push_str(&crate::value_name(&self.clock_steps));
        }
        for p in &self.plant {
            s.push_str(" --plant ");
            s.push_str(&crate::value_name(p));
        }
        s.push_str(" --trace");
        s
    }
}

fn exit_code(o: Outcome) -> ExitCode {
    match o {
        Outcome::Passed => ExitCode::SUCCESS,
        Outcome::Correctness => ExitCode::from(EXIT_CORRECTNESS),
        Outcome::Liveness => ExitCode::from(EXIT_LIVENESS),
    }
}

/// Run `tenure sim`.
pub fn run(args: SimArgs) -> anyhow::Result<ExitCode> {
    match (args.seed, args.seeds) {
        (Some(seed), _) => single(&args, seed),
        (None, Some(n)) => many(&args, n),
        (None, None) => bail!("give --seed N to replay one run or --seeds N to sweep"),
    }
}

fn secs(us: u64) -> f64 {
    us as f64 / 1e6
}

fn single(args: &SimArgs, seed: u64) -> anyhow::Result<ExitCode> {
    let cfg = args.config(seed)?;
    let t = WallClock::now();
    let r = tenure_sim::run(cfg);
    let wall = t.elapsed();
    if args.trace {
        // A closed pipe (`| head`) is not an error worth a panic.
        let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), r.trace.as_bytes());
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print_run(&r, wall.as_secs_f64(), args.replication, args.devices);
        if r.outcome != Outcome::Passed {
            println!("replay: {}", args.replay_command(seed));
        }
    }
    Ok(exit_code(r.outcome))
}

fn print_run(r: &RunReport, wall_s: f64, k: usize, n: u64) {
    if r.lookup.is_some() {
        return print_lookup_run(r, wall_s);
    }
    println!(
        "seed {}: {:?} — {:.1} s simulated, {} events in {:.2} s ({:.0} events/s)",
        r.seed,
        r.outcome,
        secs(r.sim_us),
        r.events,
        wall_s,
        r.events as f64 / wall_s.max(1e-9)
    );
    if let Some(k) = &r.knobs {
        println!("  knobs: {k:?}");
    }
    for (d, c) in &r.clocks {
        println!("  clock d{d}: {c:?}");
    }
    println!("  faults: {:?}", r.faults);
    println!(
        "  regenerations {}, migrations {}, relayouts {}, operator commands {}, writes acked {}/{}",
        r.regenerations,
        r.migrations,
        r.relayouts,
        r.policy_commands,
        r.writes_acked,
        r.writes_issued
    );
    println!(
        "  max failover {:.3} s, liveness converged in {}",
        secs(r.max_failover_us),
        r.liveness_converged_us
            .map(|u| format!("{:.3} s", secs(u)))
            .unwrap_or_else(|| "—".into())
    );
    if let Some(k) = &r.lock_knobs {
        println!("  lock knobs: {k:?}");
    }
    if let Some(k) = &r.disk_knobs {
        println!("  disk knobs: {k:?}");
    }
    println!("  locks: {:?}", r.locks);
    println!("  checks: {:?}", r.checks);
    println!("  lock checks: {:?}", r.lock_checks);
    if let Some(k) = &r.object_knobs {
        println!("  object knobs: {k:?}");
        print_objects(&r.objects, "  ");
    }
    if let Some(k) = &r.election_knobs {
        println!("  election knobs: {k:?}");
    }
    print_elections(&r.elections, n, "  ");
    if let Some(k) = &r.snapshot_knobs {
        println!("  snapshot knobs: {k:?}");
    }
    print_snapshots(&r.snapshots, "  ");
    if let Some(k) = &r.membership_knobs {
        println!("  membership knobs: {k:?}");
    }
    print_membership(&r.membership, "  ");
    print_cost(&r.safetalk, r.locks.grants, k);
    for v in &r.violations {
        println!("  VIOLATION ({:?}): {v}", v.kind());
    }
}

fn many(args: &SimArgs, n: u64) -> anyhow::Result<ExitCode> {
    if args.trace {
        bail!("--trace needs a single --seed");
    }
    let template = args.config(args.from)?;
    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(n)
    };
    bar.set_style(ProgressStyle::with_template(
        "{bar:40} {pos}/{len} seeds {per_sec} eta {eta} {msg}",
    )?);
    let t = WallClock::now();
    let summary = tenure_sim::sweep(
        args.from,
        n,
        args.threads,
        &template,
        args.stop_after,
        |done, r| {
            bar.set_position(done);
            if r.outcome != Outcome::Passed {
                bar.println(format!("seed {} failed: {:?}", r.seed, r.outcome));
            }
        },
    );
    bar.finish_and_clear();
    let wall = t.elapsed().as_secs_f64();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_summary(&summary, wall, args.replication, args.devices);
        for f in &summary.failures {
            println!(
                "FAILED seed {} ({:?} at {:.3} s): {}",
                f.seed,
                f.outcome,
                secs(f.at_us),
                f.message
            );
            println!("  replay: {}", args.replay_command(f.seed));
        }
    }
    Ok(exit_code(summary.outcome()))
}

fn print_summary(s: &Summary, wall_s: f64, k: usize, n: u64) {
    if s.lookup.common_runs + s.lookup.rare_runs > 0 {
        return print_lookup_summary(s, wall_s);
    }
    println!(
        "{} runs, {:.0} s simulated, {} events in {:.1} s wall ({:.0} runs/min, {:.0} events/s)",
        s.runs,
        secs(s.sim_us),
        s.events,
        wall_s,
        s.runs as f64 * 60.0 / wall_s.max(1e-9),
        s.events as f64 / wall_s.max(1e-9)
    );
    let f = &s.faults;
    println!(
        "faults: partitions {} halves + {} isolate-one ({} one-way), heals {}, crashes {} ({} mid-batch), pauses {}, messages lost {}, duplicated {}; disks: {} unsynced groups lost, {} torn records refused, {} unsynced commits kept whole, {} stalled commits; wall clocks: {} steps forward, {} back, {} boots after a step",
        f.partitions_halves,
        f.partitions_isolate,
        f.one_way,
        f.heals,
        f.crashes,
        f.torn_crashes,
        f.pauses,
        f.lost,
        f.duplicated,
        f.unsynced_lost,
        f.torn_records,
        f.unsynced_survived,
        f.disk_stalls,
        f.clock_steps_forward,
        f.clock_steps_back,
        f.boots_after_step
    );
    for (label, f) in [
        ("after a wall-clock step", &s.step_windows.taken),
        (
            "at a drawn step's instant, none taken",
            &s.step_windows.not_taken,
        ),
    ] {
        if f.is_empty() {
            continue;
        }
        let (om, ox, gm, total) = f.figures();
        println!(
            "{} s windows {label}: {}; longest a store had no manager within one: median {:.3} s, max {:.3} s; lock grants: {total} (median {gm} per window)",
            tenure_sim::world::STEP_WINDOW_US / 1_000_000,
            f.len(),
            secs(om),
            secs(ox),
        );
    }
    println!(
        "regenerations {}, migrations {}, relayouts {}, operator commands {}, writes acked {}/{}",
        s.regenerations,
        s.migrations,
        s.relayouts,
        s.policy_commands,
        s.writes_acked,
        s.writes_issued
    );
    println!(
        "max failover {:.3} s, max liveness convergence {:.3} s",
        secs(s.max_failover_us),
        secs(s.max_liveness_us)
    );
    let l = &s.locks;
    println!(
        "locks: {} sessions opened, {} grants, {} releases acked ({} to a retry), {} acquires refused/timed out, {} session ends, {} client deadlines passed, {} client pauses, {} client crashes, {} history ops",
        l.sessions_opened,
        l.grants,
        l.releases,
        l.releases_retried,
        l.acquire_failures,
        l.session_ends,
        l.deadlines_passed,
        l.client_pauses,
        l.client_crashes,
        l.history_ops
    );
    println!(
        "pipelining: {} requests sent with others in flight, {} answered out of order, {} session streams resumed elsewhere, re-sending {} requests",
        l.pipelined, l.out_of_order, l.stream_resumes, l.resent
    );
    println!(
        "checks: {} manager, {} served-under-lease, {} acked-write-present, {} accepted-durable",
        s.checks.manager_checks,
        s.checks.served_checks,
        s.checks.write_checks,
        s.checks.durable_checks
    );
    let c = &s.lock_checks;
    println!(
        "lock checks: {} mutual-exclusion pairs, {} fencing pairs, {} takeover lookups, {} ops linearizable ({} more name by name, in {} groups of covering names beyond the search bound), {} histories beyond the search bound",
        c.exclusion_checks,
        c.fencing_checks,
        c.takeover_checks,
        c.linearizable_ops,
        c.linearizable_ops_alone,
        c.linearizability_groups_unknown,
        c.linearizability_unknown
    );
    if s.objects.puts + s.objects.gets + s.objects.watch_events > 0 {
        print_objects(&s.objects, "");
    }
    print_elections(&s.elections, n, "");
    print_snapshots(&s.snapshots, "");
    print_membership(&s.membership, "");
    print_cost(&s.safetalk, s.locks.grants, k);
    println!(
        "violations: {} correctness, {} liveness",
        s.correctness_failures, s.liveness_failures
    );
}

/// What the object clients and watchers did (seed 001), and how often the object
/// checkers compared something.
fn print_objects(o: &tenure_sim::objects::ObjectStats, indent: &str) {
    println!(
        "{indent}objects: {} puts ({} multi-block, {} ephemeral), {} gets ({} missing, {} data unavailable), {} heads, {} deletes, multipart {} started / {} parts ({} again) / {} completed / {} aborted, CAS {} wins / {} losses, fenced {} landed / {} refused, {} oversized refused, {} sessions lapsed, watch events {} ({} resumes, {} re-reads after compaction), GC'd manifests {} ({} block deletions sent), {} requests given up, longest settle {:.3} s",
        o.puts,
        o.multi_block,
        o.ephemeral,
        o.gets,
        o.get_missing,
        o.get_unavailable,
        o.heads,
        o.deletes,
        o.multipart_started,
        o.parts,
        o.parts_again,
        o.multipart_completed,
        o.multipart_aborted,
        o.cas_wins,
        o.cas_losses,
        o.fenced_landed,
        o.fenced_refused,
        o.too_large,
        o.sessions_lapsed,
        o.watch_events,
        o.watch_resumes,
        o.watch_compacted,
        o.gc_manifests,
        o.blocks_deleted,
        o.gave_up,
        secs(o.settle_us)
    );
    let k = &o.checks;
    println!(
        "{indent}object checks: {} reads, {} CAS wins, {} revisions cross-checked, {} acks in the final history, {} active blocks on chunks, {} deletions vs active manifests, {} stores collected, {} fenced puts, {} watch events, {} manifest merges",
        k.read_checks,
        k.cas_checks,
        k.revision_checks,
        k.ack_checks,
        k.block_checks,
        k.delete_checks,
        k.collect_checks,
        k.fence_checks,
        k.watch_checks,
        k.merge_checks
    );
}

/// What the elections did, and the counted messages per election beside the lecture's
/// figures (seed 002 §14.3.3) for n devices.
fn print_elections(e: &tenure_sim::election::ElectionStats, n: u64, indent: &str) {
    if e.bully.runs + e.ring.runs == 0 {
        return;
    }
    let bound = tenure_sim::election::convergence_bound_us(&Default::default(), n);
    println!(
        "{indent}elections: {} terms followed, {} commands sent ({} applied, {} refused as stale), {} crashes and pauses aimed at the coordinator, {} coordinators paused with a command decided but not yet sent, {} liveness phases with the coordinator kept down, longest convergence {:.3} s (bound {:.3} s)",
        e.terms,
        e.commands_sent,
        e.commands_applied,
        e.commands_refused,
        e.coordinator_faults,
        e.paused_at_command,
        e.coordinator_kept_down,
        secs(e.max_convergence_us),
        secs(bound)
    );
    let h = |h: &tenure_sim::election::Histogram| match (h.median(), h.max()) {
        (Some(m), Some(x)) => format!("median {m}, max {x} ({} counted)", h.count()),
        _ => "none counted".to_string(),
    };
    if e.bully.runs > 0 {
        let b = &e.bully;
        println!(
            "{indent}  bully ({} runs): messages per election {}; when the highest running device initiated: {} — lecture best case n − 2 = {} to live processes (the highest live initiates after the coordinator crashed; {n} in all with its ELECTION and COORDINATOR to the crashed one)",
            b.runs,
            h(&b.per_election),
            h(&b.per_election_highest),
            n.saturating_sub(2)
        );
        println!(
            "{indent}    per episode (every election until the next quiet spell) {}; begun by the lowest device with all running: {} — lecture worst case O(n²): n² − 1 = {} when the lowest initiates with all live",
            h(&b.per_episode),
            h(&b.per_episode_lowest),
            (n * n).saturating_sub(1)
        );
    }
    if e.ring.runs > 0 {
        let r = &e.ring;
        println!(
            "{indent}  ring ({} runs): messages per election {} — lecture 2(n − 1) = {} with every process live (more when successors are skipped or messages lost); per episode {}",
            r.runs,
            h(&r.per_election),
            2 * n.saturating_sub(1),
            h(&r.per_episode)
        );
    }
    println!(
        "{indent}election checks: {} commands and roles against their term's coordinator, {} applied commands against the newest term seen, {} convergence samples",
        e.coordinator_checks, e.fencing_checks, e.convergence_checks
    );
}

/// What the snapshots did, and how often the snapshot checkers compared something.
fn print_snapshots(s: &tenure_sim::snapshot::SnapshotStats, indent: &str) {
    if s.started == 0 {
        return;
    }
    println!(
        "{indent}snapshots: {} started, {} completed ({} terminated: nothing in flight), {} failed; {} parts, {} messages recorded in flight, {} records by a restarted device; {} restored ({} events, every store managed within {:.3} s)",
        s.started,
        s.completed,
        s.terminated,
        s.failed,
        s.parts,
        s.channel_messages,
        s.rerecords,
        s.restores,
        s.restore_events,
        secs(s.restore_max_us)
    );
    println!(
        "{indent}snapshot checks: {} channel pairs (processed ≤ sent), {} recorded messages matched, {} recorded chunks, {} restored facts",
        s.pair_checks, s.channel_checks, s.state_checks, s.restore_checks
    );
}

/// What the membership changes did (DESIGN §6), with the simulated time each took, and
/// how often the membership checkers looked.
fn print_membership(m: &tenure_sim::membership::MembershipStats, indent: &str) {
    if m.adds_requested + m.removes_requested + m.runs_with_spares == 0 {
        return;
    }
    let h = |h: &tenure_sim::election::Histogram| match (h.median(), h.max()) {
        (Some(med), Some(x)) => format!(
            "median {:.3} s, max {:.3} s",
            med as f64 / 1e3,
            x as f64 / 1e3
        ),
        _ => "none".to_string(),
    };
    println!(
        "{indent}membership: {} runs with spares; {} adds asked ({} admitted: {}), {} removes asked ({} retired: {}), {} retired processes stopped, {} requests sent (repeats included), {} liveness phases began with a change pending, longest settle after faults stopped {:.3} s",
        m.runs_with_spares,
        m.adds_requested,
        m.adds_admitted,
        h(&m.add_ms),
        m.removes_requested,
        m.removes_retired,
        h(&m.remove_ms),
        m.retirements,
        m.requests_sent,
        m.pending_at_liveness,
        secs(m.max_settle_us)
    );
    println!(
        "{indent}membership checks: {} records against their device's previous one and their version, {} actions and chunks against retirements, {} settle samples",
        m.record_checks, m.retired_checks, m.convergence_checks
    );
}

/// Measured SafeTalk message cost next to Menasce's formulas (seed 004 §8), for stores of
/// k chunks (the replication) whose manager holds one of them.
fn print_cost(c: &tenure_sim::world::SafeTalkCost, grants: u64, k: usize) {
    if c.batches == 0 {
        return;
    }
    let remote = c.accept_remote + c.accepted_remote + c.confirm_remote;
    println!(
        "safetalk: {} batches carrying {} changes ({:.2} per batch); remote messages: {} ACCEPT, {} ACCEPTED, {} standalone CONFIRM",
        c.batches,
        c.ops,
        c.ops as f64 / c.batches as f64,
        c.accept_remote,
        c.accepted_remote,
        c.confirm_remote
    );
    let per_change = remote as f64 / c.ops.max(1) as f64;
    println!(
        "  per batch and remote chunk: {:.2} messages (SafeTalk: 3 = ACCEPT, ACCEPTED, CONFIRM; two-phase commit: 4)",
        c.per_batch_per_chunk()
    );
    println!(
        "  per change: {per_change:.2} remote SafeTalk messages + request + answer = {:.2} M; Menasce C_updt for k = {k} chunks: (3k-1)M = {} M with the LC among the k sites, (3k+2)M = {} M otherwise",
        per_change + 2.0,
        3 * k - 1,
        3 * k + 2
    );
    println!(
        "  per grant: {:.2} remote SafeTalk messages (every change of the run, register writes and barriers included, over the grants)",
        remote as f64 / grants.max(1) as f64
    );
}

/// One lookup run: its knobs, what it did, and its measured maxima beside its bounds.
fn print_lookup_run(r: &RunReport, wall_s: f64) {
    let Some(l) = &r.lookup else { return };
    println!(
        "seed {}: {:?} — lookup world, {:?} profile — {:.1} s simulated, {} events in {:.2} s",
        r.seed,
        r.outcome,
        l.profile,
        secs(r.sim_us),
        r.events,
        wall_s
    );
    if let Some(k) = &r.lookup_knobs {
        println!("  knobs: {k:?}");
    }
    println!(
        "  faults: {} crashes ({} of the leader), {} power outages, {} full restarts, {} messages lost, {} partitions, {} pauses, {} corruptions",
        l.crashes,
        l.leader_crashes,
        l.power_outages,
        l.full_restarts,
        l.lost,
        l.partitions,
        l.pauses,
        l.corruptions
    );
    print_lookup_work(l);
    let b = &l.bounds;
    let row = |name: &str, n: u64, max: u64, bound: u64| {
        println!(
            "  {name}: {n} measured, max {:.3} s (bound {:.3} s)",
            secs(max),
            secs(bound)
        );
    };
    row(
        "outage after a leader crash",
        l.outages,
        l.max_outage_us,
        b.outage_us,
    );
    row(
        "volatile staleness",
        l.volatile_checks,
        l.max_volatile_staleness_us,
        b.volatile_us,
    );
    row(
        "persistent staleness",
        l.persistent_checks,
        l.max_persistent_staleness_us,
        b.persistent_us,
    );
    row(
        "subscriber divergence",
        l.view_checks,
        l.max_divergence_us,
        b.subscriber_us,
    );
    row(
        "stabilisation",
        l.stabilisations,
        l.max_stabilisation_us,
        b.stabilisation_us,
    );
    for v in &r.violations {
        println!("  VIOLATION ({:?}): {v}", v.kind());
    }
}

fn print_lookup_work(l: &tenure_sim::lookup::LookupStats) {
    println!(
        "  workload: {} updates ({} persistent acked), {} provider deaths, {} answers, {} NoLeader, {} failed connections, {} events applied ({} syncs), {} resubscribes, {} moves",
        l.updates,
        l.acks,
        l.deaths,
        l.answers,
        l.no_leader,
        l.failed,
        l.events_applied,
        l.syncs,
        l.resubscribes,
        l.moves
    );
    println!(
        "  checks: {} leader samples after quiet, {} acked-persistent answers, {} subscriber views",
        l.leader_checks, l.acked_checks, l.view_checks
    );
}

/// A lookup sweep: totals, then each measure's maximum beside its run's bound, and the
/// worst measured/bound ratio.
fn print_lookup_summary(s: &Summary, wall_s: f64) {
    let l: &LookupSummary = &s.lookup;
    let t = &l.totals;
    println!(
        "{} lookup runs ({} common, {} rare), {:.0} s simulated, {} events in {:.1} s wall ({:.0} runs/min)",
        s.runs,
        l.common_runs,
        l.rare_runs,
        secs(t.sim_us),
        t.events,
        wall_s,
        s.runs as f64 * 60.0 / wall_s.max(1e-9)
    );
    println!(
        "faults: {} crashes ({} of the leader), {} power outages, {} full restarts, {} messages lost, {} partitions, {} pauses, {} corruptions",
        t.crashes,
        t.leader_crashes,
        t.power_outages,
        t.full_restarts,
        t.lost,
        t.partitions,
        t.pauses,
        t.corruptions
    );
    print_lookup_work(t);
    let row = |name: &str, e: &Extreme| {
        println!(
            "{name}: max {:.3} s (seed {}, its bound {:.3} s); worst ratio {:.2} of the bound (seed {}); {} runs measured it",
            secs(e.max_us),
            e.seed,
            secs(e.bound_us),
            e.ratio,
            e.ratio_seed,
            e.runs
        );
    };
    row(
        "outage after a leader crash (bound 3 HB + detection slack + query round trip)",
        &l.outage,
    );
    row("volatile staleness (bound 2 MVRI + δ)", &l.volatile);
    row(
        "persistent staleness (bound MPRI + 3 HB + Θ + RTT + δ)",
        &l.persistent,
    );
    row("subscriber divergence (bound 2 MVRI + δ)", &l.divergence);
    row(
        "stabilisation (bound 3 (3 HB + LONG_TIMEOUT + MVRI) + 3 RTT + δ_c)",
        &l.stabilisation,
    );
    println!(
        "violations: {} correctness, {} liveness",
        s.correctness_failures, s.liveness_failures
    );
}
