//! `tenure bench scale`: a local cluster at scale, and a failover under it.
//!
//! Against the local cluster of `--data` (it needs the devices' process ids):
//!
//! 1. **Fill**: `--clients` concurrent clients put `--objects` distinct values of `--size`
//!    bytes, keys spread over `--prefixes` first segments (so over every store). The put
//!    rate of each tenth, and each device's RSS and data directory size after it.
//! 2. **Hold**: `--sessions` clients (each its own connections and session, TTL
//!    `--ttl-secs`) acquire `--locks` distinct locks between them and keep holding them
//!    (each client's names share a first segment, so each client has one session).
//! 3. **Kill**: `kill -9` of the device managing the most stores. Time until a new lock is
//!    granted in one of its stores, time until every store has a manager on the survivors,
//!    and, after `--watch-secs`, the held locks whose sessions expired (lost) and the
//!    sessions that did.
//! 4. **Restart**: `tenure cluster up` starts the killed device again; the time until it
//!    serves.
//!
//! With `--system etcd` or `--system zookeeper` the same shapes run against a 3-member
//! cluster of that system, started here on 127.0.0.1 in a directory of its own and stopped
//! at the end ([`peers`]): puts (etcd `Put`, ZooKeeper persistent znodes), sessions holding
//! locks (etcd leases kept alive, each lock the lock recipe's `Txn` putting a key under the
//! lease; ZooKeeper sessions, each lock an ephemeral znode), `kill -9` of the leader, the
//! first write after it and the time until the survivors have a leader, the locks and
//! sessions lost, and the restart of the killed member.

mod etcd;
mod peers;
mod snapshot;
mod tenure;
mod zookeeper;

use crate::client_cmds::Target;
use serde::Serialize;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Arguments of `tenure bench scale`.
#[derive(clap::Args, Debug)]
pub struct ScaleArgs {
    /// Objects to put.
    #[arg(long, default_value_t = 100_000)]
    objects: u64,
    /// Size of each object, in bytes.
    #[arg(long, default_value_t = 256)]
    size: usize,
    /// Concurrent clients of the fill.
    #[arg(long, default_value_t = 64)]
    clients: u64,
    /// First path segments the keys and lock names are spread over.
    #[arg(long, default_value_t = 500)]
    prefixes: u64,
    /// Lock clients, each with its own session.
    #[arg(long, default_value_t = 500)]
    sessions: u64,
    /// Locks held between them.
    #[arg(long, default_value_t = 100_000)]
    locks: u64,
    /// Acquires in flight at once over all the lock clients (each has at most 16): more
    /// than the cluster grants in a few seconds only lengthens every acquire's wait.
    #[arg(long, default_value_t = 2048)]
    inflight: usize,
    /// Session TTL of the lock clients, in seconds.
    #[arg(long, default_value_t = 30)]
    ttl_secs: u64,
    /// Fill and hold only: no kill, no restart.
    #[arg(long)]
    no_kill: bool,
    /// At the end, stop the whole cluster (`cluster down`) and start it again (`cluster
    /// up`): time until every store grants a lock again, and a sample of the objects read
    /// back (Tenure only).
    #[arg(long)]
    restart_cluster: bool,
    /// While the locks are held, take a snapshot of the cluster (`snapshot create`),
    /// verify it, restore it into a new data directory and start that cluster on fresh
    /// ports: each step timed, the snapshot's size, and a sample of the locks and
    /// objects read back from the restored cluster (Tenure only; both are removed after).
    #[arg(long)]
    snapshot: bool,
    /// How long to watch after the kill before counting lost locks, in seconds (at least
    /// the TTL plus the grace, so that every session the failover let lapse has expired).
    #[arg(long, default_value_t = 45)]
    watch_secs: u64,
    /// The system measured: Tenure (the local cluster of `--data`), or a 3-member cluster
    /// of etcd or ZooKeeper that the benchmark starts on 127.0.0.1 and stops.
    #[arg(long, value_enum, default_value_t = System::Tenure)]
    system: System,
    /// With `--system etcd`: the etcd binary.
    #[arg(long, default_value = "etcd")]
    etcd_bin: String,
    /// With `--system zookeeper`: the ZooKeeper server script (`start-foreground` runs it).
    #[arg(long, default_value = "/usr/share/zookeeper/bin/zkServer.sh")]
    zk_server: PathBuf,
    /// With `--system zookeeper`: the JVM's flags.
    #[arg(long, default_value = "-Xms256m -Xmx2g")]
    zk_jvm_flags: String,
    /// With `--system etcd|zookeeper`: where the members keep their data (default: a new
    /// directory under the system's temporary directory, removed at the end).
    #[arg(long)]
    peer_data: Option<PathBuf>,
    /// The local cluster (`--data`); `--endpoints` is not enough, the benchmark kills and
    /// restarts a device.
    #[command(flatten)]
    target: Target,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// The system a run measures.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum System {
    /// Tenure's local cluster.
    Tenure,
    /// etcd, three members started by the benchmark.
    Etcd,
    /// ZooKeeper, three servers started by the benchmark.
    Zookeeper,
}

/// A device's (or a peer member's) footprint.
#[derive(Clone, Debug, Serialize)]
struct Footprint {
    device: u64,
    rss_mb: f64,
    disk_mb: f64,
}

/// One tenth of the fill.
#[derive(Clone, Debug, Serialize)]
struct Tenth {
    /// Objects stored at its end.
    objects: u64,
    /// Puts per second over the tenth.
    rate: f64,
    devices: Vec<Footprint>,
}

/// What the kill cost.
#[derive(Clone, Debug, Default, Serialize)]
struct Failover {
    killed: u64,
    /// Stores the killed device managed (Tenure).
    stores: Vec<u32>,
    /// Seconds from the kill to a new lock granted in one of its stores (a peer: to the
    /// first write, a put or a znode created, that succeeds).
    first_grant_s: Option<f64>,
    /// Seconds from the kill until every store has a manager among the survivors (a peer:
    /// until a survivor reports itself or another survivor as the leader).
    all_managed_s: Option<f64>,
    /// Seconds from the kill until a new lock was granted in every store it managed
    /// (Tenure).
    all_granted_s: Option<f64>,
    /// Held locks whose session expired (a peer: acquired locks whose key or znode is
    /// gone at the end).
    locks_lost: u64,
    /// Sessions that expired.
    sessions_expired: u64,
    /// Held locks not certainly held at the end of the watch (their client's deadline
    /// passed without a keep-alive answered, or expired). Tenure's client knows it; the
    /// peers' clients used here do not say.
    locks_in_doubt: Option<u64>,
    /// Seconds `cluster up` took to start the killed device again until it serves.
    restart_s: Option<f64>,
}

/// The stopped cluster started again.
#[derive(Clone, Debug, Default, Serialize)]
struct ClusterRestart {
    /// Seconds `cluster up` took (it also waits for every chunk to be back in a regular
    /// lease).
    up_s: f64,
    /// Seconds from the start of `cluster up` until every store granted a lock (probed
    /// from the start, as a client would).
    serving_s: Option<f64>,
    /// Objects read back after it (a sample spread over the fill).
    objects_checked: u64,
    /// Of those, not found or not read.
    objects_missing: u64,
    /// What the devices did meanwhile, summed over their metrics endpoints: epochs by
    /// cause, relayouts committed and abandoned, chunks marked failed, and the store
    /// states epoch transitions sent to other devices, whole or named.
    transitions: std::collections::BTreeMap<String, u64>,
}

/// `--snapshot`: the snapshot of the loaded cluster, and the cluster restored from it.
#[derive(Clone, Debug, Default, Serialize)]
struct SnapshotRun {
    id: String,
    /// Seconds `snapshot create` took (the cut, and collecting every device's part).
    create_s: f64,
    /// The collected snapshot on disk, in MB.
    size_mb: f64,
    /// Seconds `snapshot verify` took.
    verify_s: f64,
    /// Seconds `snapshot restore` took (writing the new cluster's data directories).
    restore_s: f64,
    /// Seconds `cluster up` of the restored cluster took.
    up_s: f64,
    /// Held locks sampled in the restored cluster, and those not held there with their
    /// token.
    locks_checked: u64,
    locks_missing: u64,
    /// Objects sampled in the restored cluster, and those not read.
    objects_checked: u64,
    objects_missing: u64,
}

#[derive(Clone, Debug, Serialize)]
struct Report {
    system: System,
    objects: u64,
    size: usize,
    fill_s: f64,
    fill_errors: u64,
    /// The first failed put's error.
    fill_error: Option<String>,
    tenths: Vec<Tenth>,
    sessions: u64,
    locks: u64,
    hold_s: f64,
    /// Locks acquired and held (the locks asked for, less those that failed).
    locks_held: u64,
    hold_errors: u64,
    /// The first failed acquire's error.
    hold_error: Option<String>,
    /// Before the fill.
    before: Vec<Footprint>,
    after_hold: Vec<Footprint>,
    /// Resident memory per object and per held lock (its session's share included),
    /// averaged over the devices: the growth over the fill and over the hold, divided
    /// by the objects and the locks.
    memory: Memory,
    failover: Option<Failover>,
    /// Why the kill phase did not run (the figures before it are still reported).
    #[serde(skip_serializing_if = "Option::is_none")]
    failover_error: Option<String>,
    cluster_restart: Option<ClusterRestart>,
    #[serde(skip_serializing_if = "Option::is_none")]
    snapshot: Option<SnapshotRun>,
    /// Why the snapshot phase failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    snapshot_error: Option<String>,
}

/// What one object and one held lock cost in resident memory, per device (bytes).
#[derive(Clone, Debug, Default, Serialize)]
struct Memory {
    per_object_b: Option<f64>,
    per_lock_b: Option<f64>,
}

/// The devices' average RSS, in MB.
/// Every lock client keeps a connection to each device it reaches (three each, and
/// more while they reconnect after the kill): 10,000 clients need more descriptors than
/// a shell's usual limit. Raise the limit as far as allowed; a failure leaves it as is
/// (the bench then fails with "too many open files", naming it).
fn raise_open_files() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let now = getrlimit(Resource::Nofile);
    let ceiling = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(1 << 20);
    let want = Rlimit {
        current: Some(ceiling),
        maximum: Some(ceiling),
    };
    if setrlimit(Resource::Nofile, want).is_err() {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: now.maximum,
                maximum: now.maximum,
            },
        );
    }
}

fn mean_rss(f: &[Footprint]) -> f64 {
    f.iter().map(|d| d.rss_mb).sum::<f64>() / f.len().max(1) as f64
}

impl Memory {
    fn measure(r: &Report) -> Memory {
        let mb = (1u64 << 20) as f64;
        let filled = r.tenths.last().map(|t| mean_rss(&t.devices));
        let grown = |from: f64, to: f64, n: u64| (n > 0).then(|| (to - from) * mb / n as f64);
        Memory {
            per_object_b: filled.and_then(|f| grown(mean_rss(&r.before), f, r.objects)),
            per_lock_b: grown(
                filled.unwrap_or_else(|| mean_rss(&r.before)),
                mean_rss(&r.after_hold),
                r.locks,
            ),
        }
    }
}

/// Run the scale benchmark.
pub fn run(a: ScaleArgs) -> anyhow::Result<()> {
    raise_open_files();
    anyhow::ensure!(
        a.system != System::Tenure || a.target.endpoints.is_empty(),
        "bench scale runs against the local cluster of --data (it kills and restarts a device); --endpoints is not enough"
    );
    anyhow::ensure!(
        a.system == System::Tenure || !(a.snapshot || a.restart_cluster),
        "--snapshot and --restart-cluster are Tenure's (--system tenure)"
    );
    anyhow::ensure!(
        a.clients > 0 && a.prefixes > 0,
        "--clients and --prefixes must be at least 1"
    );
    anyhow::ensure!(
        a.locks == 0 || a.sessions > 0,
        "--sessions must be at least 1 to hold locks"
    );
    // Every failed operation is logged, when asked for with RUST_LOG (e.g. RUST_LOG=warn).
    crate::logs_from_env();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let report = rt.block_on(async {
        match a.system {
            System::Tenure => tenure::bench(&a).await,
            System::Etcd => etcd::bench(&a).await,
            System::Zookeeper => zookeeper::bench(&a).await,
        }
    })?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print(&report);
    }
    if let Some(e) = &report.failover_error {
        anyhow::bail!("the kill phase did not run: {e}");
    }
    if let Some(e) = &report.snapshot_error {
        anyhow::bail!("the snapshot phase failed: {e}");
    }
    Ok(())
}

fn print(r: &Report) {
    println!(
        "fill: {} objects of {} B in {:.1} s ({} errors)",
        r.objects, r.size, r.fill_s, r.fill_errors
    );
    if let Some(e) = &r.fill_error {
        println!("  first error: {e}");
    }
    for t in &r.tenths {
        let dev: Vec<String> = t
            .devices
            .iter()
            .map(|d| {
                format!(
                    "d{} {:.0} MB RSS {:.0} MB disk",
                    d.device, d.rss_mb, d.disk_mb
                )
            })
            .collect();
        println!(
            "  to {:>9}: {:>8.0} puts/s   {}",
            t.objects,
            t.rate,
            dev.join(", ")
        );
    }
    if let (Some(first), Some(last)) = (r.tenths.first(), r.tenths.last()) {
        println!(
            "  last tenth / first: {:.2}",
            last.rate / first.rate.max(1e-9)
        );
    }
    println!(
        "hold: {} sessions holding {} of {} locks, acquired in {:.1} s ({} errors)",
        r.sessions, r.locks_held, r.locks, r.hold_s, r.hold_errors
    );
    if let Some(e) = &r.hold_error {
        println!("  first error: {e}");
    }
    for d in &r.after_hold {
        println!(
            "  d{}: {:.0} MB RSS, {:.0} MB disk",
            d.device, d.rss_mb, d.disk_mb
        );
    }
    let per = |x: Option<f64>| x.map_or("-".into(), |b| format!("{b:.0} B"));
    println!(
        "memory per device (RSS growth, averaged): {} per object, {} per held lock (its session's share included); before the fill {:.0} MB",
        per(r.memory.per_object_b),
        per(r.memory.per_lock_b),
        mean_rss(&r.before)
    );
    if let Some(n) = &r.snapshot {
        println!(
            "snapshot {}: create {:.2} s, {:.0} MB, verify {:.2} s, restore {:.2} s, restored cluster up {:.2} s; {} of {} sampled locks and {} of {} sampled objects missing there",
            n.id,
            n.create_s,
            n.size_mb,
            n.verify_s,
            n.restore_s,
            n.up_s,
            n.locks_missing,
            n.locks_checked,
            n.objects_missing,
            n.objects_checked
        );
    }
    if let Some(e) = &r.snapshot_error {
        println!("snapshot: failed: {e}");
    }
    let s = |x: Option<f64>| x.map_or("never".into(), |v| format!("{v:.2} s"));
    if let Some(f) = &r.failover {
        print_failover(r.system, f);
    }
    if let Some(c) = &r.cluster_restart {
        println!(
            "cluster down, then up: up in {:.2} s, every store granting after {}; {} of {} sampled objects missing",
            c.up_s,
            s(c.serving_s),
            c.objects_missing,
            c.objects_checked
        );
        if !c.transitions.is_empty() {
            let t: Vec<String> = (c.transitions.iter())
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            println!("  meanwhile, over the devices: {}", t.join(", "));
        }
    }
}

fn print_failover(system: System, f: &Failover) {
    let s = |x: Option<f64>| x.map_or("never".into(), |v| format!("{v:.2} s"));
    if system == System::Tenure {
        println!(
            "kill -9 of d{} (managing {} stores):",
            f.killed,
            f.stores.len()
        );
        println!("  first grant in its stores after {}", s(f.first_grant_s));
        println!("  every store managed after      {}", s(f.all_managed_s));
        println!("  a grant in every one after     {}", s(f.all_granted_s));
    } else {
        println!("kill -9 of d{} (the leader):", f.killed);
        println!("  first write after              {}", s(f.first_grant_s));
        println!("  a leader among the survivors   {}", s(f.all_managed_s));
    }
    let doubt = f.locks_in_doubt.map_or(String::new(), |d| {
        format!(", locks in doubt at the end {d}")
    });
    println!(
        "  locks lost {}, sessions expired {}{doubt}",
        f.locks_lost, f.sessions_expired
    );
    println!(
        "  restart of d{} serving after    {}",
        f.killed,
        s(f.restart_s)
    );
}

/// Failed operations of a phase: how many, and the first one's error (an example for
/// the report).
#[derive(Default)]
struct Errors {
    count: AtomicU64,
    first: std::sync::Mutex<Option<String>>,
}

impl Errors {
    fn record(&self, what: &str, e: impl std::fmt::Display) {
        if self.count.fetch_add(1, Ordering::Relaxed) == 0 {
            *self.first.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("{what}: {e}"));
        }
        tracing::warn!("{what}: {e}");
    }

    fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn first(&self) -> Option<String> {
        self.first.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The fill's shared counters: the next object's number, puts done, puts that failed.
#[derive(Default)]
struct FillCounters {
    next: AtomicU64,
    done: AtomicU64,
    errors: Errors,
}

/// The key of object `i` (`/scale<i mod prefixes>/k<i>`: every system gets the same keys).
fn object_key(i: u64, prefixes: u64) -> String {
    format!("/scale{}/k{i}", i % prefixes)
}

/// The lock names of session `s` (`/scalelock<p>/c<s>/n<k>`: one first segment per
/// session, so a Tenure client keeps one session).
fn lock_names(s: u64, per: u64, prefixes: u64) -> Vec<String> {
    (0..per)
        .map(|k| format!("/scalelock{}/c{s}/n{k}", s % prefixes))
        .collect()
}

/// How many of `locks` session `s` of `sessions` holds.
fn locks_of(s: u64, locks: u64, sessions: u64) -> u64 {
    locks / sessions + u64::from(s < locks % sessions)
}

/// One fill client's loop: take the next object's number until `objects` are taken, and
/// put it with `put` (up to five tries).
async fn put_all<F, Fut, E>(c: &FillCounters, objects: u64, prefixes: u64, mut put: F)
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    loop {
        let i = c.next.fetch_add(1, Ordering::Relaxed);
        if i >= objects {
            break;
        }
        let key = object_key(i, prefixes);
        for tries in 1..=5 {
            match put(key.clone()).await {
                Ok(()) => break,
                Err(e) => {
                    c.errors.record(&format!("put {key} (try {tries} of 5)"), e);
                }
            }
        }
        c.done.fetch_add(1, Ordering::Relaxed);
    }
}

/// Watch the fill's clients until they are done, recording each tenth's put rate with
/// the footprints read then.
async fn watch_fill(
    a: &ScaleArgs,
    c: &FillCounters,
    footprints: &dyn Fn() -> Vec<Footprint>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    report: &mut Report,
) -> anyhow::Result<()> {
    let bar = progress(a.json, a.objects, "fill");
    let started = Instant::now();
    let mut last = (started, 0u64);
    let tenth = a.objects.div_ceil(10);
    let mut mark = tenth.min(a.objects);
    while report.tenths.len() < 10 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let d = c.done.load(Ordering::Relaxed);
        bar.set_position(d);
        while d >= mark && report.tenths.len() < 10 {
            let now = Instant::now();
            let secs = now.duration_since(last.0).as_secs_f64().max(1e-6);
            report.tenths.push(Tenth {
                objects: mark,
                rate: (mark - last.1) as f64 / secs,
                devices: footprints(),
            });
            last = (now, mark);
            if mark == a.objects {
                break;
            }
            mark = (mark + tenth).min(a.objects);
        }
        if mark == a.objects && d >= a.objects {
            break;
        }
    }
    for t in tasks {
        t.await?;
    }
    bar.finish_and_clear();
    report.fill_s = started.elapsed().as_secs_f64();
    report.fill_errors = c.errors.count();
    report.fill_error = c.errors.first();
    Ok(())
}

impl Report {
    fn new(a: &ScaleArgs) -> Report {
        Report {
            system: a.system,
            objects: a.objects,
            size: a.size,
            fill_s: 0.0,
            fill_errors: 0,
            fill_error: None,
            tenths: Vec::new(),
            sessions: a.sessions,
            locks: a.locks,
            hold_s: 0.0,
            locks_held: 0,
            hold_errors: 0,
            hold_error: None,
            before: Vec::new(),
            after_hold: Vec::new(),
            memory: Memory::default(),
            failover: None,
            failover_error: None,
            cluster_restart: None,
            snapshot: None,
            snapshot_error: None,
        }
    }
}

/// Resident memory of a process, in MB.
fn rss_mb(pid: u32) -> f64 {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return 0.0;
    };
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Bytes under `dir`.
fn disk_bytes(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

fn progress(hidden: bool, len: u64, what: &str) -> indicatif::ProgressBar {
    let bar = if hidden {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(len)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{what} {{bar:30}} {{pos}}/{{len}} {{per_sec}}"
        ))
        .expect("template"),
    );
    bar
}
