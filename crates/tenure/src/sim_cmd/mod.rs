//! `tenure sim`: the deterministic simulator from the command line (DESIGN §10: any
//! failure prints its seed, and `tenure sim --seed N` replays it exactly).
//!
//! - `tenure sim --seed N [--trace]` runs one seed and prints its report (and, with
//!   `--trace`, every event: knobs, clocks, messages, observations, faults).
//! - `tenure sim --seeds 10000 [--from F]` sweeps seeds `F..F+N` on `--threads` workers
//!   with a progress bar and ends with the summary; every failing seed is printed with
//!   the exact command that replays it. `--threads` defaults to one worker per available
//!   core; the summary's speed line gives events per second of wall time and per core
//!   of CPU time, and the process's peak memory.
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
use tenure_sim::{DiskModel, LockPaths, Outcome, Pipelining, SimConfig, WorldKind};

mod perf;
mod print;

use perf::Perf;
use print::{print_run, print_summary};

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
    /// 003; its sim seed draws the cluster, so --devices, --stores and --replication do not
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
    /// Worker threads for a sweep [default: one per available core].
    #[arg(long)]
    threads: Option<usize>,
    /// Stop a sweep after this many failing seeds (0 = run them all).
    #[arg(long, default_value_t = 1)]
    stop_after: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Plant {
    /// The quorum predicate accepts any non-empty set of chunks.
    BrokenQuorum,
    /// A transition's patch loses one row on its way to a chunk.
    PatchDropsARow,
    /// A relayout's patch for a rejoining chunk loses one row.
    RejoinPatchDropsARow,
    /// Chunks serve operations whatever their lease state.
    ServeWithoutLease,
    /// Managers answer reads at once, without a read lease or a barrier.
    LeaseReadUnchecked,
    /// Managers take a renewal merely sent as proof of a chunk's lease.
    ReadLeaseFromSentRenewal,
    /// Chunks persist their record's head alone even when their tables changed.
    HeadRecordLosesRows,
    /// Managers answer reads from their speculative tables.
    LeaseReadSpeculative,
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
    /// A device acknowledges a register write forwarded to it without serving it.
    ForwardAckUnserved,
    /// A device answers a keep-alive of a session spanning stores without renewing its
    /// children.
    KeepAliveSkipsChildren,
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
    /// Object watches asked for values get each key's active value instead of the
    /// change's.
    ObjectsWatchActiveValue,
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
            patch_drops_a_row: self.plant.contains(&Plant::PatchDropsARow),
            rejoin_patch_drops_a_row: self.plant.contains(&Plant::RejoinPatchDropsARow),
            serve_without_lease: self.plant.contains(&Plant::ServeWithoutLease),
            lease_read_unchecked: self.plant.contains(&Plant::LeaseReadUnchecked),
            read_lease_from_sent_renewal: self.plant.contains(&Plant::ReadLeaseFromSentRenewal),
            head_record_loses_rows: self.plant.contains(&Plant::HeadRecordLosesRows),
            lease_read_speculative: self.plant.contains(&Plant::LeaseReadSpeculative),
            skip_conflict_check: self.plant.contains(&Plant::SkipConflictCheck),
            ignore_cover: self.plant.contains(&Plant::IgnoreCover),
            confirm_before_all_accepted: self.plant.contains(&Plant::ConfirmBeforeAllAccepted),
            accepted_before_persist: self.plant.contains(&Plant::AcceptedBeforePersist),
            expire_without_grace: self.plant.contains(&Plant::ExpireWithoutGrace),
            takeover_ignores_renewal: self.plant.contains(&Plant::TakeoverIgnoresRenewal),
            wall_clock_deadlines: self.plant.contains(&Plant::WallClockDeadlines),
            redirect_to_self: self.plant.contains(&Plant::RedirectToSelf),
            forward_ack_unserved: self.plant.contains(&Plant::ForwardAckUnserved),
            keep_alive_skips_children: self.plant.contains(&Plant::KeepAliveSkipsChildren),
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
            objects_watch_active_value: self.plant.contains(&Plant::ObjectsWatchActiveValue),
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
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let cpu0 = perf::cpu_now();
    let t = WallClock::now();
    let summary = tenure_sim::sweep(
        args.from,
        n,
        threads,
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
    let cost = Perf {
        wall_s: wall,
        cpu_s: cpu0
            .zip(perf::cpu_now())
            .map(|(a, b)| b.saturating_sub(a).as_secs_f64()),
        threads,
        peak_bytes: perf::peak_memory(),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_summary(&summary, &cost, args.replication, args.devices);
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
