//! `tenure chaos`: fault testing of real device processes on test hosts (network
//! namespaces on this machine; needs root and nftables). A seeded nemesis kills, pauses,
//! partitions, drops, delays and reorders peer traffic (through proxies on the peer
//! links), stalls disks (loop devices throttled through cgroup v1 block I/O, where the
//! machine has them) and steps and skews one device's clocks (libfaketime, where it is
//! installed) while lock, object and lookup clients record a history; at the end
//! the simulator's checkers run on it and a Jepsen-style summary is printed (`--json`
//! for scripts): operations, faults by kind (and the kinds this machine cannot inject),
//! each check, availability. Exit status: 0 when no check failed, 2 on a violation, 1 on
//! an error.

use clap::Args;
use std::process::ExitCode;
use std::time::Duration;
use tenure_chaos::ChaosConfig;

/// Exit status for a violation.
const EXIT_VIOLATION: u8 = 2;

#[derive(Args, Debug)]
#[command(after_help = "\
Faults, one at a time, each kind in every round: kill (-9 and restart), pause (SIGSTOP \
beyond the lease), isolate, split, one-way, loss, delay, reorder (peer links), \
disk-stall (where loop devices and blkio throttling exist), clock-step (one device's \
wall clock 30 s or 1 h forward or back, monotonic clocks untouched) and clock-drift \
(one device restarted with its clocks 500 ppm fast or slow) — the clock faults where \
libfaketime is installed (Debian package faketime), unless --no-clock.")]
pub struct ChaosArgs {
    /// How long faults are injected, in minutes (fractions allowed).
    #[arg(long, default_value_t = 1.0)]
    minutes: f64,
    /// Devices (one test host each).
    #[arg(long, default_value_t = 5)]
    devices: usize,
    /// Seed of every nemesis and workload choice [default: random, printed].
    #[arg(long)]
    seed: Option<u64>,
    /// Lock clients.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Object clients (0: none).
    #[arg(long, default_value_t = 2)]
    object_clients: usize,
    /// Lookup keys of each durability, persistent and volatile (0: no lookup workload).
    #[arg(long, default_value_t = 2)]
    lookup_keys: usize,
    /// Seconds the lock clients use one generation of the lock names before moving on to
    /// the next (`/chaos0/lock.0`, `/chaos0/lock.1`, …): each name's history stays short
    /// enough for the linearizability search, however long the run.
    #[arg(long, default_value_t = 60)]
    name_secs: u64,
    /// Keep the devices' data and logs even when every check passes.
    #[arg(long)]
    keep: bool,
    /// Machine-readable summary.
    #[arg(long)]
    json: bool,
    /// Plaintext devices (by default they serve TLS and peers use mutual TLS, with a CA
    /// made for the run, as `tenure cluster up` does).
    #[arg(long)]
    insecure: bool,
    /// Leave out the clock faults: clock-step (one device's wall clock stepped 30 s or
    /// 1 h, then back) and clock-drift (one device restarted with its clocks 500 ppm
    /// fast or slow, then restarted at true rate).
    #[arg(long)]
    no_clock: bool,
    /// Only these kinds of fault, comma-separated (e.g. `clock-step,clock-drift`), to
    /// attribute an outage to one kind [default: every kind]
    #[arg(long, value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(tenure_chaos::nemesis::KINDS))]
    faults: Vec<String>,
    /// Objects put before the faults and kept through the run (keys spread over every
    /// store), read back after the full restart: the run at a realistic size.
    #[arg(long, default_value_t = 0)]
    fill_objects: usize,
    /// Size of each of them, in bytes.
    #[arg(long, default_value_t = 256)]
    fill_size: usize,
    /// Locks taken before the faults and held through the run by sessions that only keep
    /// alive; after the full restart every one must still be held with its token, and no
    /// such session may have expired.
    #[arg(long, default_value_t = 0)]
    fill_locks: usize,
    /// Sessions holding the `--fill-locks`.
    #[arg(long, default_value_t = 100)]
    fill_sessions: usize,
    /// Session TTL of those sessions, in seconds.
    #[arg(long, default_value_t = 30)]
    fill_ttl_secs: u64,
}

pub fn run(a: ChaosArgs) -> anyhow::Result<ExitCode> {
    // The clients' logs (retries, redirects, failovers), when asked for with RUST_LOG.
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .try_init();
    }
    let bin = std::env::current_exe()?;
    let seed = a.seed.unwrap_or_else(tenure_chaos::random_seed);
    let mut cfg = ChaosConfig::new(
        bin,
        a.devices,
        seed,
        Duration::from_secs_f64(a.minutes.max(0.0) * 60.0),
    );
    cfg.clients = a.clients.max(1);
    cfg.object_clients = a.object_clients;
    cfg.lookup_keys = a.lookup_keys;
    cfg.name_period = Duration::from_secs(a.name_secs.max(1));
    cfg.keep_data = a.keep;
    cfg.tls = !a.insecure;
    cfg.clock_faults = !a.no_clock;
    cfg.only = a.faults;
    cfg.standing = tenure_chaos::standing::StandingConfig {
        objects: a.fill_objects,
        size: a.fill_size,
        locks: a.fill_locks,
        sessions: a.fill_sessions.max(1),
        ttl: Duration::from_secs(a.fill_ttl_secs.max(1)),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let summary = rt.block_on(tenure_chaos::run(&cfg))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{summary}");
    }
    Ok(if summary.violations() == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_VIOLATION)
    })
}
