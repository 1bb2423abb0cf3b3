//! `tenure bench writes`, and the write load it runs, which `tenure check perf` runs too
//! (at a paced rate): clients writing the test register across stores (the store access
//! protocol: manager ordering, SafeTalk ACCEPT to every chunk, durable commit on each).

use super::{CpuMeter, options, transport_name};
use crate::client_cmds::Target;
use hdrhistogram::Histogram;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tenure_client::Client;

#[derive(clap::Args, Debug)]
pub(super) struct WritesArgs {
    /// Concurrent clients.
    #[arg(long, default_value_t = 16)]
    clients: u64,
    /// Duration of the measurement.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Spread writes over this many stores (0 = every store of the cluster; 1 = store 0).
    #[arg(long, default_value_t = 0)]
    stores: u32,
    /// Unary RPCs instead of the session stream of each store.
    #[arg(long)]
    unary: bool,
    #[command(flatten)]
    target: Target,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// The shape of a write load.
pub(crate) struct WriteLoad {
    /// Concurrent clients (tasks sharing one `Client`).
    pub clients: u64,
    /// Stores written, in turn.
    pub stores: u32,
    /// How long.
    pub duration: Duration,
    /// At most one write per client per `pace` (none: each writes as fast as it can).
    pub pace: Option<Duration>,
}

/// What a write load measured.
pub(crate) struct WriteResult {
    /// Acknowledged writes.
    pub ops: u64,
    pub errors: u64,
    /// How long it ran.
    pub seconds: f64,
    /// Latency of each acknowledged write, µs.
    pub latency_us: Histogram<u64>,
}

impl WriteResult {
    /// Acknowledged writes per second.
    pub fn rate(&self) -> f64 {
        self.ops as f64 / self.seconds.max(1e-9)
    }

    /// The latency at quantile `q`, in milliseconds.
    pub fn ms(&self, q: f64) -> f64 {
        self.latency_us.value_at_quantile(q) as f64 / 1000.0
    }
}

/// The number of stores of the cluster, from the first device that answers Status.
pub(crate) async fn store_count(client: &Client) -> anyhow::Result<u32> {
    let eps = client.endpoints();
    for e in &eps {
        if let Ok(s) = client.status_of(e).await {
            return Ok(s.stores);
        }
    }
    anyhow::bail!("no device answered Status at {eps:?}")
}

/// Run `load` through `client` (after finding every store's manager once, outside the
/// measurement), showing progress on `bar`.
pub(crate) async fn run_load(
    client: Arc<Client>,
    load: &WriteLoad,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<WriteResult> {
    anyhow::ensure!(
        load.clients > 0 && load.stores > 0,
        "no clients or no stores"
    );
    for s in 0..load.stores {
        client.write(s, u64::MAX, 0).await?;
    }
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let end = started + load.duration;
    let mut tasks = Vec::new();
    for c in 0..load.clients {
        let client = client.clone();
        let done = done.clone();
        let errors = errors.clone();
        let (clients, stores, pace) = (load.clients, load.stores, load.pace);
        tasks.push(tokio::spawn(async move {
            let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
            let mut tick = pace.map(|p| {
                let mut t = tokio::time::interval(p);
                // A write slower than the pace is not made up for by a burst.
                t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                t
            });
            let mut i = 0u64;
            while Instant::now() < end {
                if let Some(t) = &mut tick {
                    t.tick().await;
                    if Instant::now() >= end {
                        break;
                    }
                }
                let store = ((c + i * clients) % u64::from(stores)) as u32;
                let t = Instant::now();
                match client.write(store, c, i).await {
                    Ok(_) => {
                        h.saturating_record(t.elapsed().as_micros() as u64);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!("write failed: {e}");
                    }
                }
                i += 1;
            }
            h
        }));
    }
    let mut last = 0;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_secs(1).min(end - Instant::now())).await;
        let n = done.load(Ordering::Relaxed);
        bar.set_position(started.elapsed().as_secs());
        bar.set_message(format!("{} writes/s", n - last));
        last = n;
    }
    let mut total = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
    for t in tasks {
        total.add(t.await?)?;
    }
    bar.finish_and_clear();
    Ok(WriteResult {
        ops: total.len(),
        errors: errors.load(Ordering::Relaxed),
        seconds: started.elapsed().as_secs_f64(),
        latency_us: total,
    })
}

/// A progress bar of `seconds`, hidden when `hidden`.
pub(crate) fn seconds_bar(seconds: u64, hidden: bool) -> indicatif::ProgressBar {
    let bar = if hidden {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(seconds)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len}s {msg}").expect("template"),
    );
    bar
}

pub(super) fn writes(a: WritesArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.clients > 0, "--clients must be at least 1");
    anyhow::ensure!(a.seconds > 0, "--seconds must be at least 1");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let client = Arc::new(a.target.client_with(options(a.unary))?);
        let stores = if a.stores > 0 {
            a.stores
        } else {
            store_count(&client).await?
        };
        let load = WriteLoad {
            clients: a.clients,
            stores,
            duration: Duration::from_secs(a.seconds),
            pace: None,
        };
        let bar = seconds_bar(a.seconds, a.json);
        let cpu = CpuMeter::start(&a.target);
        let r = run_load(client, &load, &bar).await?;
        let (cpu_json, cpu_text) = cpu.per_unit(r.ops, "write");
        let report = serde_json::json!({
            "bench": "writes",
            "transport": transport_name(a.unary),
            "clients": a.clients,
            "stores": stores,
            "seconds": r.seconds,
            "ops": r.ops,
            "errors": r.errors,
            "ops_per_sec": r.rate(),
            "p50_ms": r.ms(0.5),
            "p99_ms": r.ms(0.99),
            "max_ms": r.latency_us.max() as f64 / 1000.0,
            "cpu_us_per_op": cpu_json,
        });
        if a.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            println!(
                "writes ({}): {} clients over {} stores for {:.1}s: {} ops ({} errors), {:.0} ops/s",
                transport_name(a.unary),
                a.clients,
                stores,
                r.seconds,
                r.ops,
                r.errors,
                r.rate()
            );
            println!(
                "latency: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                r.ms(0.5),
                r.ms(0.99),
                r.latency_us.max() as f64 / 1000.0
            );
            if let Some(t) = cpu_text {
                println!("{t}");
            }
        }
        anyhow::Ok(())
    })
}
