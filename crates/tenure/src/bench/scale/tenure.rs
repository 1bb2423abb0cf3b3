//! `bench scale` against Tenure's local cluster (`--data`).

use super::{
    ClusterRestart, Errors, Failover, FillCounters, Footprint, Memory, Report, ScaleArgs,
    disk_bytes, lock_names, locks_of, object_key, progress, put_all, rss_mb, watch_fill,
};
use crate::cluster::file::ClusterFile;
use futures::StreamExt;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tenure_client::{Client, ClientOptions, LockGuard, LockMode, Wait};
use tenure_core::objects::Bytes;

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

pub(super) async fn bench(a: &ScaleArgs) -> anyhow::Result<Report> {
    let file = ClusterFile::load(&a.target.data)?;
    let mut report = Report::new(a);
    report.before = footprints(&file);
    fill(a, &file, &mut report).await?;
    let held = hold(a, &file, &mut report).await?;
    report.after_hold = footprints(&file);
    report.memory = Memory::measure(&report);
    if a.snapshot {
        match super::snapshot::snapshot(a, &held).await {
            Ok(n) => report.snapshot = Some(n),
            Err(e) => report.snapshot_error = Some(format!("{e:#}")),
        }
    }
    if !a.no_kill {
        match kill(a, &file, &held).await {
            Ok(f) => report.failover = Some(f),
            Err(e) => report.failover_error = Some(format!("{e:#}")),
        }
    }
    drop(held);
    if a.restart_cluster {
        report.cluster_restart = Some(restart_cluster(a).await?);
    }
    Ok(report)
}

/// Phase 5: stop the whole cluster and start it again, as a user would; time until
/// every store grants a lock, then read a sample of the objects back.
async fn restart_cluster(a: &ScaleArgs) -> anyhow::Result<ClusterRestart> {
    let exe = std::env::current_exe()?;
    let data = a.target.data.clone();
    let run = move |what: &'static str| {
        let (exe, data) = (exe.clone(), data.clone());
        async move {
            let st = tokio::process::Command::new(exe)
                .args(["cluster", what, "--data"])
                .arg(&data)
                .stdout(std::process::Stdio::null())
                .status()
                .await?;
            anyhow::ensure!(st.success(), "cluster {what} failed: {st}");
            anyhow::Ok(())
        }
    };
    // The devices keep their addresses (`down` removes cluster.json, `up` writes it
    // again): the probes start with `cluster up`, so that serving again is timed as a
    // client sees it, whatever `up` itself waits for.
    let file = ClusterFile::load(&a.target.data)?;
    run("down").await?;
    eprintln!("cluster down; starting it again");
    let t0 = Instant::now();
    let up = run("up");
    let up = tokio::spawn(async move { up.await.map(|()| t0.elapsed().as_secs_f64()) });
    let quick = ClientOptions {
        request_timeout: Duration::from_secs(1),
        retry_deadline: Duration::from_secs(1),
        ..Default::default()
    };
    let c = client(&file, quick)?;
    let mut waiting: BTreeSet<u32> = (0..file.stores).collect();
    let mut k = 0u64;
    let end = t0 + Duration::from_secs(a.watch_secs.max(60));
    let mut serving_s = None;
    while !waiting.is_empty() && Instant::now() < end {
        for s in waiting.clone() {
            let n = probe_name(s, file.stores, &mut k);
            if let Ok(g) = c.lock(&n, LockMode::Exclusive, Wait::Try).await {
                let _ = g.release().await;
                waiting.remove(&s);
            }
        }
        if waiting.is_empty() {
            serving_s = Some(t0.elapsed().as_secs_f64());
        } else {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let mut out = ClusterRestart {
        up_s: up.await??,
        serving_s,
        ..Default::default()
    };
    let file = ClusterFile::load(&a.target.data)?;
    for addr in file.devices.iter().filter_map(|d| d.metrics_addr) {
        for (k, v) in restart_counters(addr).await {
            *out.transitions.entry(k).or_default() += v;
        }
    }
    let c = client(&file, ClientOptions::default())?;
    let objects = c.objects();
    let step = (a.objects / 1000).max(1);
    for i in (0..a.objects).step_by(step as usize) {
        out.objects_checked += 1;
        if objects.get(&object_key(i, a.prefixes)).await.is_err() {
            out.objects_missing += 1;
        }
    }
    Ok(out)
}

/// The counters of a restart's epoch transitions at one device's metrics endpoint (none
/// if it does not answer): the series of [`RESTART_COUNTERS`], by name and label.
async fn restart_counters(addr: std::net::SocketAddr) -> Vec<(String, u64)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let get = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: tenure\r\n\r\n")
            .await?;
        let mut body = String::new();
        s.read_to_string(&mut body).await?;
        std::io::Result::Ok(body)
    };
    let Ok(Ok(body)) = tokio::time::timeout(Duration::from_secs(2), get).await else {
        return Vec::new();
    };
    (body.lines())
        .filter(|l| RESTART_COUNTERS.iter().any(|c| l.starts_with(c)))
        .filter_map(|l| {
            let (series, v) = l.rsplit_once(' ')?;
            let name = series.trim_start_matches("tenure_").replace('"', "");
            Some((name, v.parse::<f64>().ok()? as u64))
        })
        .collect()
}

/// The counters a cluster restart reports ([`restart_counters`]).
const RESTART_COUNTERS: [&str; 4] = [
    "tenure_epochs_total",
    "tenure_relayouts_total",
    "tenure_chunk_failures_total",
    "tenure_peer_store_states_total",
];

/// Phase 1: put the objects, measuring each tenth.
async fn fill(a: &ScaleArgs, file: &ClusterFile, report: &mut Report) -> anyhow::Result<()> {
    if a.objects == 0 {
        return Ok(());
    }
    let counters = Arc::new(FillCounters::default());
    let value = Bytes::from(vec![b'v'; a.size]);
    let mut tasks = Vec::new();
    for _ in 0..a.clients {
        let c = client(file, ClientOptions::default())?;
        let (counters, value) = (counters.clone(), value.clone());
        let (n, prefixes) = (a.objects, a.prefixes);
        tasks.push(tokio::spawn(async move {
            let objects = c.objects();
            put_all(&counters, n, prefixes, |key| {
                let (objects, value) = (&objects, value.clone());
                async move { objects.put(&key, value).await.map(|_| ()) }
            })
            .await;
        }));
    }
    watch_fill(a, &counters, &|| footprints(file), tasks, report).await
}

/// A lock client and the locks it holds.
pub(super) struct Holder {
    _client: Client,
    pub(super) guards: Vec<LockGuard>,
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
    let errors = Arc::new(Errors::default());
    let taken = Arc::new(AtomicU64::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(a.inflight.max(1)));
    let mut tasks = Vec::new();
    for s in 0..a.sessions {
        let c = client(file, opts.clone())?;
        let names = lock_names(s, locks_of(s, a.locks, a.sessions), a.prefixes);
        let (errors, taken, bar, gate) = (errors.clone(), taken.clone(), bar.clone(), gate.clone());
        tasks.push(tokio::spawn(async move {
            let guards: Vec<LockGuard> = futures::stream::iter(names)
                .map(|n| {
                    let (c, gate) = (c.clone(), gate.clone());
                    async move {
                        let _turn = gate.acquire().await;
                        c.lock(&n, LockMode::Exclusive, Wait::Try).await
                    }
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
                                errors.record("acquire", e);
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
    report.locks_held = taken.load(Ordering::Relaxed);
    report.hold_errors = errors.count();
    report.hold_error = errors.first();
    Ok(held)
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

/// After the kill at `t0`: a new lock in each of `stores`, tried over and over until one
/// is granted (for at most `watch_secs`); the seconds from `t0` to each store's first
/// grant. The probe is a client of its own on a thread and runtime of its own, as a user
/// starting after the kill would be: in the bench's runtime its tries queued behind the
/// thousands of held sessions' tasks, all busy reconnecting at that moment.
fn probe_grants(
    file: ClusterFile,
    opts: ClientOptions,
    stores: Vec<u32>,
    t0: Instant,
    watch_secs: u64,
) -> std::thread::JoinHandle<Vec<f64>> {
    std::thread::spawn(move || {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("the grant probe has no runtime: {e}");
                return Vec::new();
            }
        };
        rt.block_on(async move {
            let prober = match client(&file, opts) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("the grant probe has no client: {e:#}");
                    return Vec::new();
                }
            };
            let total = file.stores;
            let end = t0 + Duration::from_secs(watch_secs);
            let tries = stores.iter().enumerate().map(|(i, &s)| {
                let prober = prober.clone();
                async move {
                    // Each store's names apart from the others' (a counter of its own).
                    let mut k = i as u64 * 1_000_000_000;
                    while Instant::now() < end {
                        let n = probe_name(s, total, &mut k);
                        let tried = prober.lock(&n, LockMode::Exclusive, Wait::Try);
                        if let Ok(Ok(g)) = tokio::time::timeout_at(end.into(), tried).await {
                            let at = t0.elapsed().as_secs_f64();
                            let _ = g.release().await;
                            return Some(at);
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    None
                }
            });
            futures::future::join_all(tries)
                .await
                .into_iter()
                .flatten()
                .collect()
        })
    })
}

/// Phase 3 and 4: kill the busiest device, watch, restart it.
async fn kill(a: &ScaleArgs, file: &ClusterFile, held: &[Holder]) -> anyhow::Result<Failover> {
    let quick = ClientOptions {
        request_timeout: Duration::from_secs(1),
        retry_deadline: Duration::from_secs(1),
        ..Default::default()
    };
    // Status waits for the device's pending writes to be durable: under the hold
    // phase's load that takes seconds, past the default attempt of one.
    let status = client(
        file,
        ClientOptions {
            attempt_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(10),
            retry_deadline: Duration::from_secs(10),
            ..quick.clone()
        },
    )?;
    // Under the hold phase's load a device may not answer Status within a second, or
    // a store may be between managers: ask again, for up to a minute, until every store
    // names one, so the busiest device is chosen from a whole picture.
    let asking = Instant::now();
    let mut before = managers(&status, file, u64::MAX).await;
    while before.len() < file.stores as usize && asking.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = managers(&status, file, u64::MAX).await;
        if now.len() >= before.len() {
            before = now;
        }
    }
    if asking.elapsed() >= Duration::from_secs(1) {
        eprintln!(
            "managers of {}/{} stores known after {:.1} s",
            before.len(),
            file.stores,
            asking.elapsed().as_secs_f64()
        );
    }
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
    let probe = probe_grants(
        file.clone(),
        quick.clone(),
        stores.clone(),
        t0,
        a.watch_secs,
    );
    let end = t0 + Duration::from_secs(a.watch_secs);
    while Instant::now() < end {
        if out.all_managed_s.is_none() {
            let m = managers(&status, file, killed).await;
            if m.len() == file.stores as usize && m.values().all(|(d, _)| *d != killed) {
                out.all_managed_s = Some(t0.elapsed().as_secs_f64());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The probe gives up at the end of the watch: it is joined, not left behind.
    let grants = tokio::task::spawn_blocking(move || probe.join())
        .await?
        .unwrap_or_default();
    out.first_grant_s = grants.iter().copied().reduce(f64::min);
    if grants.len() == stores.len() {
        out.all_granted_s = grants.iter().copied().reduce(f64::max);
    }
    let mut expired = BTreeSet::new();
    let mut in_doubt = 0;
    for h in held {
        for g in &h.guards {
            let s = *g.watch().borrow();
            if s.expired {
                out.locks_lost += 1;
                expired.insert((g.session_store(), g.session()));
            }
            if !g.is_held() {
                in_doubt += 1;
            }
        }
    }
    out.sessions_expired = expired.len() as u64;
    out.locks_in_doubt = Some(in_doubt);
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
