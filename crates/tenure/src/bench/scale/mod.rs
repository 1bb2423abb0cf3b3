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

use crate::client_cmds::Target;
use crate::cluster::file::ClusterFile;
use futures::StreamExt;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tenure_client::{Client, ClientOptions, LockGuard, LockMode, Wait};
use tenure_core::objects::Bytes;

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
    /// Session TTL of the lock clients, in seconds.
    #[arg(long, default_value_t = 30)]
    ttl_secs: u64,
    /// Fill and hold only: no kill, no restart.
    #[arg(long)]
    no_kill: bool,
    /// How long to watch after the kill before counting lost locks, in seconds (at least
    /// the TTL plus the grace, so that every session the failover let lapse has expired).
    #[arg(long, default_value_t = 45)]
    watch_secs: u64,
    /// The local cluster (`--data`); `--endpoints` is not enough, the benchmark kills and
    /// restarts a device.
    #[command(flatten)]
    target: Target,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// A device's footprint.
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
    /// Stores the killed device managed.
    stores: Vec<u32>,
    /// Seconds from the kill to a new lock granted in one of its stores.
    first_grant_s: Option<f64>,
    /// Seconds from the kill until every store has a manager among the survivors.
    all_managed_s: Option<f64>,
    /// Held locks whose session expired.
    locks_lost: u64,
    /// Sessions that expired.
    sessions_expired: u64,
    /// Held locks not certainly held at the end of the watch (their client's deadline
    /// passed without a keep-alive answered, or expired).
    locks_in_doubt: u64,
    /// Seconds `cluster up` took to start the killed device again until it serves.
    restart_s: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize)]
struct Report {
    objects: u64,
    size: usize,
    fill_s: f64,
    fill_errors: u64,
    tenths: Vec<Tenth>,
    sessions: u64,
    locks: u64,
    hold_s: f64,
    hold_errors: u64,
    /// Before the fill.
    before: Vec<Footprint>,
    after_hold: Vec<Footprint>,
    /// Resident memory per object and per held lock (its session's share included),
    /// averaged over the devices: the growth over the fill and over the hold, divided
    /// by the objects and the locks.
    memory: Memory,
    failover: Option<Failover>,
}

/// What one object and one held lock cost in resident memory, per device (bytes).
#[derive(Clone, Debug, Default, Serialize)]
struct Memory {
    per_object_b: Option<f64>,
    per_lock_b: Option<f64>,
}

/// The devices' average RSS, in MB.
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
    anyhow::ensure!(
        a.target.endpoints.is_empty(),
        "bench scale runs against the local cluster of --data (it kills and restarts a device); --endpoints is not enough"
    );
    anyhow::ensure!(
        a.clients > 0 && a.prefixes > 0,
        "--clients and --prefixes must be at least 1"
    );
    anyhow::ensure!(
        a.locks == 0 || a.sessions > 0,
        "--sessions must be at least 1 to hold locks"
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let report = rt.block_on(bench(&a))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print(&report);
    }
    Ok(())
}

fn print(r: &Report) {
    println!(
        "fill: {} objects of {} B in {:.1} s ({} errors)",
        r.objects, r.size, r.fill_s, r.fill_errors
    );
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
        "hold: {} sessions holding {} locks, acquired in {:.1} s ({} errors)",
        r.sessions, r.locks, r.hold_s, r.hold_errors
    );
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
    let Some(f) = &r.failover else {
        return;
    };
    let s = |x: Option<f64>| x.map_or("never".into(), |v| format!("{v:.2} s"));
    println!(
        "kill -9 of d{} (managing {} stores):",
        f.killed,
        f.stores.len()
    );
    println!("  first grant in its stores after {}", s(f.first_grant_s));
    println!("  every store managed after      {}", s(f.all_managed_s));
    println!(
        "  locks lost {}, sessions expired {}, locks in doubt at the end {}",
        f.locks_lost, f.sessions_expired, f.locks_in_doubt
    );
    println!(
        "  restart of d{} serving after    {}",
        f.killed,
        s(f.restart_s)
    );
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

fn footprints(file: &ClusterFile) -> Vec<Footprint> {
    file.devices
        .iter()
        .map(|d| Footprint {
            device: d.id,
            rss_mb: rss_mb(d.pid),
            disk_mb: disk_bytes(&d.data_dir) as f64 / (1 << 20) as f64,
        })
        .collect()
}

fn client(file: &ClusterFile, opts: ClientOptions) -> anyhow::Result<Client> {
    file.client(opts)
}

async fn bench(a: &ScaleArgs) -> anyhow::Result<Report> {
    let file = ClusterFile::load(&a.target.data)?;
    let mut report = Report {
        objects: a.objects,
        size: a.size,
        sessions: a.sessions,
        locks: a.locks,
        ..Default::default()
    };
    report.before = footprints(&file);
    fill(a, &file, &mut report).await?;
    let held = hold(a, &file, &mut report).await?;
    report.after_hold = footprints(&file);
    report.memory = Memory::measure(&report);
    if !a.no_kill {
        report.failover = Some(kill(a, &file, &held).await?);
    }
    drop(held);
    Ok(report)
}

/// Phase 1: put the objects, measuring each tenth.
async fn fill(a: &ScaleArgs, file: &ClusterFile, report: &mut Report) -> anyhow::Result<()> {
    if a.objects == 0 {
        return Ok(());
    }
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let value = Bytes::from(vec![b'v'; a.size]);
    let mut tasks = Vec::new();
    for _ in 0..a.clients {
        let c = client(file, ClientOptions::default())?;
        let (next, done, errors, value) =
            (next.clone(), done.clone(), errors.clone(), value.clone());
        let (n, prefixes) = (a.objects, a.prefixes);
        tasks.push(tokio::spawn(async move {
            let objects = c.objects();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let key = format!("/scale{}/k{i}", i % prefixes);
                let mut tries = 0;
                loop {
                    match objects.put(&key, value.clone()).await {
                        Ok(_) => break,
                        Err(e) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            tries += 1;
                            if tries >= 5 {
                                tracing::warn!("put {key} failed 5 times: {e}");
                                break;
                            }
                        }
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let bar = progress(a.json, a.objects, "fill");
    let started = Instant::now();
    let mut last = (started, 0u64);
    let tenth = a.objects.div_ceil(10);
    let mut mark = tenth.min(a.objects);
    while report.tenths.len() < 10 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let d = done.load(Ordering::Relaxed);
        bar.set_position(d);
        while d >= mark && report.tenths.len() < 10 {
            let now = Instant::now();
            let secs = now.duration_since(last.0).as_secs_f64().max(1e-6);
            report.tenths.push(Tenth {
                objects: mark,
                rate: (mark - last.1) as f64 / secs,
                devices: footprints(file),
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
    report.fill_errors = errors.load(Ordering::Relaxed);
    Ok(())
}

/// A lock client and the locks it holds.
struct Holder {
    _client: Client,
    guards: Vec<LockGuard>,
}

/// Phase 2: open the sessions and take the locks.
async fn hold(
    a: &ScaleArgs,
    file: &ClusterFile,
    report: &mut Report,
) -> anyhow::Result<Vec<Holder>> {
    if a.locks == 0 {
        return Ok(Vec::new());
    }
    let opts = ClientOptions {
        session_ttl: Duration::from_secs(a.ttl_secs),
        ..Default::default()
    };
    let bar = progress(a.json, a.locks, "hold");
    let started = Instant::now();
    let errors = Arc::new(AtomicU64::new(0));
    let taken = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for s in 0..a.sessions {
        let c = client(file, opts.clone())?;
        let per = a.locks / a.sessions + u64::from(s < a.locks % a.sessions);
        let prefix = s % a.prefixes;
        let (errors, taken, bar) = (errors.clone(), taken.clone(), bar.clone());
        tasks.push(tokio::spawn(async move {
            let names: Vec<String> = (0..per)
                .map(|k| format!("/scalelock{prefix}/c{s}/n{k}"))
                .collect();
            let guards: Vec<LockGuard> = futures::stream::iter(names)
                .map(|n| {
                    let c = c.clone();
                    async move { c.lock(&n, LockMode::Exclusive, Wait::Try).await }
                })
                .buffer_unordered(16)
                .filter_map(|r| {
                    let (errors, taken, bar) = (errors.clone(), taken.clone(), bar.clone());
                    async move {
                        match r {
                            Ok(g) => {
                                bar.set_position(taken.fetch_add(1, Ordering::Relaxed) + 1);
                                Some(g)
                            }
                            Err(e) => {
                                errors.fetch_add(1, Ordering::Relaxed);
                                tracing::warn!("acquire failed: {e}");
                                None
                            }
                        }
                    }
                })
                .collect()
                .await;
            Holder { _client: c, guards }
        }));
    }
    let mut held = Vec::new();
    for t in tasks {
        held.push(t.await?);
    }
    bar.finish_and_clear();
    report.hold_s = started.elapsed().as_secs_f64();
    report.hold_errors = errors.load(Ordering::Relaxed);
    Ok(held)
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

/// store → managing device, from every device of `file` but `skip` that answers.
async fn managers(c: &Client, file: &ClusterFile, skip: u64) -> BTreeMap<u32, (u64, u64)> {
    let survivors = ClusterFile {
        devices: file
            .devices
            .iter()
            .filter(|d| d.id != skip)
            .cloned()
            .collect(),
        ..file.clone()
    };
    crate::cluster::status::managers(&crate::cluster::status::statuses(c, &survivors).await)
}

/// A lock name in `store` not used by anything else.
fn probe_name(store: u32, stores: u32, k: &mut u64) -> String {
    loop {
        *k += 1;
        let n = format!("/scaleprobe{}", *k);
        if tenure_core::config::store_of(&n, stores).0 == store {
            return n;
        }
    }
}

/// Phase 3 and 4: kill the busiest device, watch, restart it.
async fn kill(a: &ScaleArgs, file: &ClusterFile, held: &[Holder]) -> anyhow::Result<Failover> {
    let quick = ClientOptions {
        request_timeout: Duration::from_secs(1),
        retry_deadline: Duration::from_secs(1),
        ..Default::default()
    };
    let status = client(file, quick.clone())?;
    let before = managers(&status, file, u64::MAX).await;
    let mut per: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    for (store, (dev, _)) in &before {
        per.entry(*dev).or_default().push(*store);
    }
    let (killed, stores) = per
        .into_iter()
        .max_by_key(|(_, s)| s.len())
        .ok_or_else(|| anyhow::anyhow!("no store has a manager"))?;
    let dev = file
        .devices
        .iter()
        .find(|d| d.id == killed)
        .ok_or_else(|| anyhow::anyhow!("device {killed} is not in cluster.json"))?;
    let mut out = Failover {
        killed,
        stores: stores.clone(),
        ..Default::default()
    };
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(dev.pid as i32).ok_or_else(|| anyhow::anyhow!("pid 0"))?,
        rustix::process::Signal::KILL,
    )?;
    let t0 = Instant::now();
    eprintln!(
        "killed d{killed} (pid {}), managing {} stores",
        dev.pid,
        stores.len()
    );
    // A new lock in each of its stores, tried over and over until one is granted.
    let prober = client(file, quick.clone())?;
    let total = file.stores;
    let probe = {
        let stores = stores.clone();
        tokio::spawn(async move {
            let mut k = 0u64;
            loop {
                for s in &stores {
                    let n = probe_name(*s, total, &mut k);
                    if let Ok(g) = prober.lock(&n, LockMode::Exclusive, Wait::Try).await {
                        let at = t0.elapsed().as_secs_f64();
                        let _ = g.release().await;
                        return at;
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let end = t0 + Duration::from_secs(a.watch_secs);
    let mut first = None;
    let mut probe = Some(probe);
    while Instant::now() < end {
        if out.all_managed_s.is_none() {
            let m = managers(&status, file, killed).await;
            if m.len() == total as usize && m.values().all(|(d, _)| *d != killed) {
                out.all_managed_s = Some(t0.elapsed().as_secs_f64());
            }
        }
        if let Some(p) = probe.as_ref()
            && p.is_finished()
        {
            first = probe.take();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some(p) = first {
        out.first_grant_s = p.await.ok();
    } else if let Some(p) = probe {
        p.abort();
    }
    let mut expired = BTreeSet::new();
    for h in held {
        for g in &h.guards {
            let s = *g.watch().borrow();
            if s.expired {
                out.locks_lost += 1;
                expired.insert((g.session_store(), g.session()));
            }
            if !g.is_held() {
                out.locks_in_doubt += 1;
            }
        }
    }
    out.sessions_expired = expired.len() as u64;
    // Restart the killed device as a user would.
    let exe = std::env::current_exe()?;
    let t1 = Instant::now();
    let st = tokio::process::Command::new(exe)
        .args(["cluster", "up", "--data"])
        .arg(&a.target.data)
        .stdout(std::process::Stdio::null())
        .status()
        .await?;
    if st.success() {
        out.restart_s = Some(t1.elapsed().as_secs_f64());
    }
    Ok(out)
}
