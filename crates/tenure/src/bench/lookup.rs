//! `tenure bench lookup`: providers keep entries refreshed, queriers read them through
//! every device. Reports queries/s with latency percentiles and CPU per query, the age
//! of the answers (how old the value a query returned was when it came back — the
//! measured staleness, to set beside the seed's bound 2 × interval + δ), and, with
//! `--kill-leader`, the lookup outage: the longest time no query succeeded after the
//! lookup leader's device was killed with SIGKILL.

use super::CpuMeter;
use crate::client_cmds::Target;
use futures::StreamExt;
use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tenure_client::Client;
use tenure_client::lookup::PublishOptions;

/// Arguments of `tenure bench lookup`.
#[derive(clap::Args, Debug)]
pub struct LookupArgs {
    /// Providers (each its own client).
    #[arg(long, default_value_t = 8)]
    publishers: u64,
    /// Entries per provider.
    #[arg(long, default_value_t = 4)]
    keys: u64,
    /// Refresh interval of the entries (a new value every interval; e.g. 500ms, 2s; a bare
    /// number is seconds).
    #[arg(long, default_value = "1s", value_parser = crate::lock_cmds::parse_duration)]
    interval: Duration,
    /// Concurrent queriers (Get of a random entry, in a loop).
    #[arg(long, default_value_t = 16)]
    queriers: u64,
    /// Duration of the measurement.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// A third of the way in, kill the lookup leader's device (local cluster only) and
    /// report the outage.
    #[arg(long)]
    kill_leader: bool,
    /// Run the same shape against etcd at this endpoint instead (`host:port`): each
    /// provider keeps a lease alive and puts a new value under it every interval;
    /// queriers read with linearizable Range.
    #[arg(long)]
    etcd: Option<String>,
    /// With `--etcd`: the process ids of the etcd members (comma-separated, e.g.
    /// `$(pgrep -d, -x etcd)`), whose CPU per operation is then reported.
    #[arg(long, value_delimiter = ',', requires = "etcd")]
    etcd_pids: Vec<u32>,
    #[command(flatten)]
    target: Target,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Run the lookup benchmark.
pub fn run(a: LookupArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        a.publishers > 0 && a.keys > 0,
        "--publishers and --keys must be at least 1"
    );
    anyhow::ensure!(a.queriers > 0, "--queriers must be at least 1");
    anyhow::ensure!(a.seconds > 0, "--seconds must be at least 1");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(bench(a))
}

/// What the queriers read from.
#[derive(Clone)]
enum Backend {
    Tenure(Client),
    Etcd(etcd::kv_client::KvClient<tonic::transport::Channel>),
}

impl Backend {
    /// The value under `key` (`None`: absent).
    async fn get(&mut self, key: &str) -> anyhow::Result<Option<Vec<u8>>> {
        match self {
            Backend::Tenure(c) => Ok(c.get(key).await?.map(|e| e.value)),
            Backend::Etcd(kv) => etcd_get(kv, key).await,
        }
    }
}

/// The generated client of etcd's v3 API subset (`etcd/rpc.proto`).
#[allow(clippy::all, missing_docs)]
pub mod etcd {
    tonic::include_proto!("etcdserverpb");
}

/// A channel to etcd at `endpoint` (`host:port`, or a URL).
pub(super) async fn etcd_connect(endpoint: &str) -> anyhow::Result<tonic::transport::Channel> {
    let url = if endpoint.starts_with("http") {
        endpoint.to_string()
    } else {
        format!("http://{endpoint}")
    };
    Ok(tonic::transport::Endpoint::from_shared(url)?
        .connect()
        .await?)
}

/// The value under `key` in etcd (a linearizable Range; `None`: absent).
pub(super) async fn etcd_get(
    kv: &mut etcd::kv_client::KvClient<tonic::transport::Channel>,
    key: &str,
) -> anyhow::Result<Option<Vec<u8>>> {
    let r = kv
        .range(etcd::RangeRequest {
            key: key.as_bytes().to_vec(),
            ..Default::default()
        })
        .await?
        .into_inner();
    Ok(r.kvs.into_iter().next().map(|kv| kv.value))
}

/// Providers against etcd: one lease per provider (TTL two intervals, at least etcd's
/// minimum), kept alive and its keys put with a new value every interval.
async fn etcd_providers(
    a: &LookupArgs,
    endpoint: &str,
    keys: &[String],
) -> anyhow::Result<(Backend, tokio::task::JoinHandle<()>)> {
    let ch = etcd_connect(endpoint).await?;
    let kv = etcd::kv_client::KvClient::new(ch.clone());
    let mut lease = etcd::lease_client::LeaseClient::new(ch);
    let ttl = (a.interval * 2).as_secs().max(2) as i64;
    let mut leases = Vec::new();
    for p in 0..a.publishers as usize {
        let id = lease
            .lease_grant(etcd::LeaseGrantRequest { ttl, id: 0 })
            .await?
            .into_inner()
            .id;
        let mine: Vec<String> = keys[p * a.keys as usize..(p + 1) * a.keys as usize].to_vec();
        leases.push((id, mine));
    }
    let (interval, mut kv2) = (a.interval, kv.clone());
    let task = tokio::spawn(async move {
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        // etcd answers the stream's headers with its first answer: send first.
        for (id, _) in &leases {
            let _ = tx.send(etcd::LeaseKeepAliveRequest { id: *id }).await;
        }
        let keepalive = lease
            .lease_keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await;
        let mut answers = keepalive.ok().map(|r| r.into_inner());
        let mut tick = tokio::time::interval(interval);
        loop {
            tick.tick().await;
            for (id, keys) in &leases {
                let _ = tx.send(etcd::LeaseKeepAliveRequest { id: *id }).await;
                for k in keys {
                    let put = etcd::PutRequest {
                        key: k.as_bytes().to_vec(),
                        value: now_micros().to_string().into_bytes(),
                        lease: *id,
                        ..Default::default()
                    };
                    if let Err(e) = kv2.put(put).await {
                        tracing::debug!("etcd put failed: {e}");
                    }
                }
            }
            if let Some(s) = answers.as_mut() {
                while let Ok(Some(Ok(_))) =
                    tokio::time::timeout(Duration::from_millis(1), s.next()).await
                {}
            }
        }
    });
    Ok((Backend::Etcd(kv), task))
}

async fn bench(a: LookupArgs) -> anyhow::Result<()> {
    let keys: Vec<String> = (0..a.publishers)
        .flat_map(|p| (0..a.keys).map(move |k| format!("/bench-lookup/p{p}/k{k}")))
        .collect();
    if let Some(ep) = a.etcd.clone() {
        anyhow::ensure!(
            !a.kill_leader,
            "--kill-leader is for a Tenure local cluster"
        );
        let (backend, task) = etcd_providers(&a, &ep, &keys).await?;
        tokio::time::sleep(a.interval + Duration::from_millis(200)).await;
        let r = measure(&a, backend, keys).await;
        task.abort();
        return r;
    }
    let endpoints = a.target.endpoints()?;
    // Providers: one client each; every entry's value is the time it was produced.
    let mut handles = Vec::new();
    for p in 0..a.publishers as usize {
        let c = Client::with_options(endpoints.clone(), a.target.options(Default::default())?)?;
        for k in 0..a.keys as usize {
            let key = &keys[p * a.keys as usize + k];
            let h = c
                .publish(
                    key,
                    now_micros().to_string(),
                    PublishOptions::volatile(a.interval),
                )
                .await?;
            handles.push(h);
        }
    }
    let handles = Arc::new(handles);
    let updater = {
        let handles = handles.clone();
        let interval = a.interval;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            loop {
                tick.tick().await;
                for h in handles.iter() {
                    h.update(now_micros().to_string());
                }
            }
        })
    };
    // Let every entry reach the nodes before measuring.
    tokio::time::sleep(a.interval + Duration::from_millis(200)).await;
    let client = Client::with_options(endpoints.clone(), a.target.options(Default::default())?)?;
    let r = measure(&a, Backend::Tenure(client), keys).await;
    updater.abort();
    let _ = updater.await;
    for h in Arc::try_unwrap(handles).map_err(|_| anyhow::anyhow!("handles shared"))? {
        let _ = h.revoke().await;
    }
    r
}

/// Queriers read random keys for `--seconds` through `backend`; print the report.
async fn measure(a: &LookupArgs, backend: Backend, keys: Vec<String>) -> anyhow::Result<()> {
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let absent = Arc::new(AtomicU64::new(0));
    // Start of the measurement, and the last success of any querier (µs since start).
    let started = Instant::now();
    let last_ok = Arc::new(AtomicU64::new(0));
    let longest_gap = Arc::new(Mutex::new(Duration::ZERO));
    let cpu = if a.etcd.is_some() {
        CpuMeter::start_pids(a.etcd_pids.clone())
    } else {
        CpuMeter::start(&a.target)
    };
    let end = started + Duration::from_secs(a.seconds);
    let keys = Arc::new(keys);
    let mut tasks = Vec::new();
    for q in 0..a.queriers {
        let (mut client, keys, done, errors, absent) = (
            backend.clone(),
            keys.clone(),
            done.clone(),
            errors.clone(),
            absent.clone(),
        );
        let (last_ok, longest_gap) = (last_ok.clone(), longest_gap.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
            let mut age = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("bounds");
            let mut rng = tenure_core::rng::Rng::new(q + 1);
            while Instant::now() < end {
                let key = &keys[rng.below(keys.len() as u64) as usize];
                let t = Instant::now();
                match client.get(key).await {
                    Ok(entry) => {
                        lat.saturating_record(t.elapsed().as_micros() as u64);
                        done.fetch_add(1, Ordering::Relaxed);
                        let at = started.elapsed().as_micros() as u64;
                        let prev = last_ok.fetch_max(at, Ordering::Relaxed);
                        if at > prev {
                            let gap = Duration::from_micros(at - prev);
                            let mut g = longest_gap.lock().unwrap();
                            *g = (*g).max(gap);
                        }
                        match entry.and_then(|v| String::from_utf8(v).ok()) {
                            Some(v) => {
                                let produced: u64 = v.parse().unwrap_or(0);
                                age.saturating_record(now_micros().saturating_sub(produced));
                            }
                            None => {
                                absent.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    Err(e) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!("get failed: {e}");
                    }
                }
            }
            (lat, age)
        }));
    }
    let mut killed = None;
    if a.kill_leader {
        tokio::time::sleep(Duration::from_secs(a.seconds) / 3).await;
        let Backend::Tenure(client) = &backend else {
            anyhow::bail!("--kill-leader is for a Tenure local cluster");
        };
        killed = Some(kill_leader(client, &a.target).await?);
    }
    let bar = if a.json {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(a.seconds)
    };
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(500).min(end - Instant::now())).await;
        bar.set_position(started.elapsed().as_secs());
    }
    bar.finish_and_clear();
    let mut lat = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
    let mut age = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("bounds");
    for t in tasks {
        let (l, g) = t.await?;
        lat.add(l)?;
        age.add(g)?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let n = lat.len();
    let (cpu_json, cpu_text) = cpu.per_unit(n, "query");
    // A gap still open at the end counts too.
    let tail = Duration::from_micros(
        (started.elapsed().as_micros() as u64).saturating_sub(last_ok.load(Ordering::Relaxed)),
    );
    let outage = (*longest_gap.lock().unwrap()).max(tail);
    let ms = |us: u64| us as f64 / 1000.0;
    let report = serde_json::json!({
        "bench": "lookup",
        "publishers": a.publishers,
        "entries": a.publishers * a.keys,
        "interval_ms": a.interval.as_millis() as u64,
        "queriers": a.queriers,
        "seconds": elapsed,
        "queries": n,
        "errors": errors.load(Ordering::Relaxed),
        "absent": absent.load(Ordering::Relaxed),
        "queries_per_sec": n as f64 / elapsed,
        "p50_ms": ms(lat.value_at_quantile(0.5)),
        "p99_ms": ms(lat.value_at_quantile(0.99)),
        "max_ms": ms(lat.max()),
        "answer_age_p50_ms": ms(age.value_at_quantile(0.5)),
        "answer_age_max_ms": ms(age.max()),
        "staleness_bound_ms": (a.interval * 2).as_millis() as u64,
        "killed_device": killed,
        "longest_gap_ms": outage.as_secs_f64() * 1000.0,
        "cpu_us_per_op": cpu_json,
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "lookup: {} entries ({} providers, refreshed every {:?}), {} queriers for {:.1}s: {} queries ({} errors, {} absent), {:.0} queries/s",
        a.publishers * a.keys,
        a.publishers,
        a.interval,
        a.queriers,
        elapsed,
        n,
        errors.load(Ordering::Relaxed),
        absent.load(Ordering::Relaxed),
        n as f64 / elapsed
    );
    println!(
        "latency: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        ms(lat.value_at_quantile(0.5)),
        ms(lat.value_at_quantile(0.99)),
        ms(lat.max())
    );
    println!(
        "answer age (staleness): p50 {:.0} ms, max {:.0} ms (seed bound 2 × interval + δ = {} ms + δ)",
        ms(age.value_at_quantile(0.5)),
        ms(age.max()),
        (a.interval * 2).as_millis()
    );
    match killed {
        Some(d) => println!(
            "killed the lookup leader (device {d}): longest time without a successful query {:.0} ms",
            outage.as_secs_f64() * 1000.0
        ),
        None => println!(
            "longest time without a successful query: {:.0} ms",
            outage.as_secs_f64() * 1000.0
        ),
    }
    if let Some(t) = cpu_text {
        println!("{t}");
    }
    Ok(())
}

/// Kill the device whose lookup node is the leader (SIGKILL); returns its id.
async fn kill_leader(client: &Client, target: &Target) -> anyhow::Result<u64> {
    anyhow::ensure!(
        target.endpoints.is_empty(),
        "--kill-leader needs a local cluster (--data), not --endpoints"
    );
    let file = crate::cluster::file::ClusterFile::load(&target.data)?;
    let statuses = client.node_status_all().await;
    let leader = statuses
        .iter()
        .find_map(|(_, s)| {
            s.as_ref()
                .ok()
                .filter(|s| s.state == "Leader")
                .map(|s| s.device)
        })
        .ok_or_else(|| anyhow::anyhow!("no device reports being the lookup leader"))?;
    let dev = (file.devices.iter())
        .find(|d| d.id == leader)
        .ok_or_else(|| anyhow::anyhow!("device {leader} is not in the cluster file"))?;
    let status = std::process::Command::new("kill")
        .args(["-9", &dev.pid.to_string()])
        .status()?;
    anyhow::ensure!(
        status.success(),
        "killing device {leader} (pid {}) failed",
        dev.pid
    );
    Ok(leader)
}
