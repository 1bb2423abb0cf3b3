//! `tenure bench objects`: puts and gets of small values at several client counts, then
//! large objects (MB/s), with latency percentiles and CPU per operation — against
//! Tenure, or with `--etcd host:port` the same shapes against etcd (Put, and
//! linearizable Range).
//!
//! Every client is its own connection set (its own `Client`, sessions and streams).
//! Keys are spread over the stores by their first path segment (`/bo<i>/k<j>`), so the
//! load reaches every store's manager, as a user's keyspace would.

use super::CpuMeter;
use super::lookup::{etcd, etcd_connect, etcd_get};
use crate::client_cmds::Target;
use hdrhistogram::Histogram;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tenure_client::Client;
use tenure_core::objects::Bytes;

/// Arguments of `tenure bench objects`.
#[derive(clap::Args, Debug)]
pub struct ObjectsArgs {
    /// Client counts to measure small values at (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    clients: Vec<u64>,
    /// Size of the small values, in bytes.
    #[arg(long, default_value_t = 256)]
    size: usize,
    /// Size of the large objects, in bytes (0: skip the large phase).
    #[arg(long, default_value_t = 1 << 20)]
    large: usize,
    /// Clients of the large phase.
    #[arg(long, default_value_t = 4)]
    large_clients: u64,
    /// Distinct keys per client.
    #[arg(long, default_value_t = 16)]
    keys: u64,
    /// Duration of each phase, in seconds.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Run the same shapes against etcd at this endpoint (`host:port`).
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

/// Run the objects benchmark.
pub fn run(a: ObjectsArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        !a.clients.is_empty() && a.clients.iter().all(|c| *c > 0),
        "--clients needs one or more counts, each at least 1"
    );
    anyhow::ensure!(a.seconds > 0, "--seconds must be at least 1");
    anyhow::ensure!(a.keys > 0, "--keys must be at least 1");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(bench(a))
}

/// Where the operations go.
#[derive(Clone)]
enum Backend {
    Tenure(Client),
    Etcd(etcd::kv_client::KvClient<tonic::transport::Channel>),
}

impl Backend {
    async fn connect(a: &ObjectsArgs) -> anyhow::Result<Backend> {
        Ok(match &a.etcd {
            Some(ep) => Backend::Etcd(
                etcd::kv_client::KvClient::new(etcd_connect(ep).await?)
                    .max_decoding_message_size(64 << 20),
            ),
            None => Backend::Tenure(a.target.client()?),
        })
    }

    async fn put(&mut self, key: String, value: Bytes) -> anyhow::Result<()> {
        match self {
            Backend::Tenure(c) => {
                let objects = c.objects();
                objects.put(&key, value).await?;
            }
            Backend::Etcd(kv) => {
                kv.put(etcd::PutRequest {
                    key: key.as_bytes().to_vec(),
                    value: value.to_vec(),
                    ..Default::default()
                })
                .await?;
            }
        }
        Ok(())
    }

    /// Read `key`; returns its length.
    async fn get(&mut self, key: String) -> anyhow::Result<usize> {
        match self {
            Backend::Tenure(c) => {
                let objects = c.objects();
                Ok(objects.get(&key).await?.data.len())
            }
            Backend::Etcd(kv) => etcd_get(kv, &key)
                .await?
                .map(|v| v.len())
                .ok_or_else(|| anyhow::anyhow!("{key} is absent")),
        }
    }
}

fn key(client: u64, k: u64) -> String {
    format!("/bo{}/c{client}/k{k}", (client * 7 + k) % 64)
}

/// One phase's outcome.
struct Phase {
    name: String,
    clients: u64,
    size: usize,
    ops: u64,
    errors: u64,
    seconds: f64,
    lat: Histogram<u64>,
    cpu: (serde_json::Value, Option<String>),
}

impl Phase {
    fn json(&self) -> serde_json::Value {
        let ms = |us: u64| us as f64 / 1000.0;
        serde_json::json!({
            "phase": self.name,
            "clients": self.clients,
            "size": self.size,
            "ops": self.ops,
            "errors": self.errors,
            "ops_per_sec": self.ops as f64 / self.seconds,
            "mb_per_sec": (self.ops as f64 * self.size as f64) / self.seconds / 1e6,
            "p50_ms": ms(self.lat.value_at_quantile(0.5)),
            "p99_ms": ms(self.lat.value_at_quantile(0.99)),
            "max_ms": ms(self.lat.max()),
            "cpu_us_per_op": self.cpu.0,
        })
    }

    fn line(&self) -> String {
        let ms = |us: u64| us as f64 / 1000.0;
        let rate = self.ops as f64 / self.seconds;
        let mb = rate * self.size as f64 / 1e6;
        format!(
            "{:<4} {:>6} B x {:>3} clients: {:>9.0} ops/s {:>8.2} MB/s  p50 {:>7.2} ms  p99 {:>7.2} ms  ({} ops, {} errors){}",
            self.name,
            self.size,
            self.clients,
            rate,
            mb,
            ms(self.lat.value_at_quantile(0.5)),
            ms(self.lat.value_at_quantile(0.99)),
            self.ops,
            self.errors,
            self.cpu
                .1
                .as_ref()
                .map(|t| format!("; {t}"))
                .unwrap_or_default()
        )
    }
}

/// Run `clients` loops of `op` (put or get) on their keys for `seconds`.
async fn phase(a: &ObjectsArgs, put: bool, clients: u64, size: usize) -> anyhow::Result<Phase> {
    let mut backends = Vec::new();
    for _ in 0..clients {
        backends.push(Backend::connect(a).await?);
    }
    let value = Bytes::from(vec![b'x'; size]);
    // Every key exists before a get phase, and every connection has found its managers.
    for (c, b) in backends.iter_mut().enumerate() {
        for k in 0..a.keys {
            b.put(key(c as u64, k), value.clone()).await?;
        }
    }
    let errors = Arc::new(AtomicU64::new(0));
    let cpu = if a.etcd.is_some() {
        (!a.etcd_pids.is_empty()).then(|| CpuMeter::start_pids(a.etcd_pids.clone()))
    } else {
        Some(CpuMeter::start(&a.target))
    };
    let started = Instant::now();
    let end = started + Duration::from_secs(a.seconds);
    let mut tasks = Vec::new();
    for (c, mut b) in backends.into_iter().enumerate() {
        let (errors, value, keys) = (errors.clone(), value.clone(), a.keys);
        tasks.push(tokio::spawn(async move {
            let mut lat = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
            let mut i = 0u64;
            while Instant::now() < end {
                let k = key(c as u64, i % keys);
                i += 1;
                let t = Instant::now();
                let r = if put {
                    b.put(k, value.clone()).await
                } else {
                    b.get(k).await.map(|_| ())
                };
                match r {
                    Ok(()) => lat.saturating_record(t.elapsed().as_micros() as u64),
                    Err(e) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!("{e}");
                    }
                }
            }
            lat
        }));
    }
    let mut lat = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
    for t in tasks {
        lat.add(t.await?)?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let ops = lat.len();
    let unit = if put { "put" } else { "get" };
    Ok(Phase {
        name: unit.into(),
        clients,
        size,
        ops,
        errors: errors.load(Ordering::Relaxed),
        seconds,
        cpu: cpu
            .map(|m| m.per_unit(ops, unit))
            .unwrap_or((serde_json::Value::Null, None)),
        lat,
    })
}

async fn bench(a: ObjectsArgs) -> anyhow::Result<()> {
    let target = match &a.etcd {
        Some(ep) => format!("etcd at {ep}"),
        None => "tenure".to_string(),
    };
    let mut phases = Vec::new();
    let mut shapes: Vec<(u64, usize)> = a.clients.iter().map(|c| (*c, a.size)).collect();
    if a.large > 0 {
        shapes.push((a.large_clients.max(1), a.large));
    }
    let bar = if a.json {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(shapes.len() as u64 * 2)
    };
    for (clients, size) in shapes {
        for put in [true, false] {
            let p = phase(&a, put, clients, size).await?;
            bar.inc(1);
            if !a.json {
                bar.suspend(|| println!("{}", p.line()));
            }
            phases.push(p);
        }
    }
    bar.finish_and_clear();
    if a.json {
        let report = serde_json::json!({
            "bench": "objects",
            "target": target,
            "seconds_per_phase": a.seconds,
            "keys_per_client": a.keys,
            "phases": phases.iter().map(Phase::json).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "objects against {target}: {} phases of {} s, {} keys per client",
            phases.len(),
            a.seconds,
            a.keys
        );
    }
    Ok(())
}
