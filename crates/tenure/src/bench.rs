//! `tenure bench`: load against a running cluster, with latency percentiles from
//! hdrhistogram. `bench writes` ([`writes`]) drives the test register (the store access
//! protocol: manager ordering, SafeTalk ACCEPT to every chunk, durable commit on each).
//! `bench locks` runs lock+unlock cycles: each simulated client is its own `Client` with
//! its own sessions, taking exclusive locks on K names (each its own store when K is at
//! most the number of stores), a name drawn at random for each cycle (or in turn, with
//! `--pick rotate`), and releasing them, so contention on a name is real.

mod lookup;
mod objects;
mod scale;
pub(crate) mod writes;

use crate::client_cmds::Target;
use hdrhistogram::Histogram;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tenure_client::Client;

/// Arguments of `tenure bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    cmd: BenchCmd,
}

#[derive(clap::Subcommand, Debug)]
enum BenchCmd {
    /// Write cycles: each client writes registers in turn across stores.
    Writes(writes::WritesArgs),
    /// Lock+unlock cycles: each client locks a name (waiting its turn) and releases it.
    Locks(LocksArgs),
    /// Lookup: providers keep entries refreshed, queriers read them (queries/s, latency,
    /// answer age, outage with --kill-leader).
    Lookup(lookup::LookupArgs),
    /// Objects: puts and gets of small values at several client counts, then large
    /// objects (MB/s); `--etcd` runs the same shapes against etcd.
    Objects(objects::ObjectsArgs),
    /// Scale: fill N objects (rate per tenth, RSS and disk per device), hold L locks in S
    /// sessions, kill -9 the busiest device (first grant in its stores, every store
    /// managed, locks lost, sessions expired) and restart it.
    Scale(scale::ScaleArgs),
}

#[derive(clap::Args, Debug)]
struct LocksArgs {
    /// Concurrent clients (each with its own sessions).
    #[arg(long, default_value_t = 16)]
    clients: u64,
    /// Connections per device the clients share (client c uses set c mod conns), as
    /// etcd's benchmark separates --conns from --clients. Defaults to one per client.
    #[arg(long)]
    conns: Option<u64>,
    /// Number of lock names the clients cycle over.
    #[arg(long, default_value_t = 16)]
    names: u64,
    /// How each cycle picks its name.
    #[arg(long, value_enum, default_value_t = Pick::Random)]
    pick: Pick,
    /// Unary RPCs (one per request, and a keep-alive stream per session) instead of the
    /// session stream.
    #[arg(long)]
    unary: bool,
    /// Duration of the measurement.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    #[command(flatten)]
    target: Target,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// How a lock cycle picks its name.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Pick {
    /// At random, from a fixed stream per client: clients collide on names by chance.
    Random,
    /// In turn, client c starting at name 7c: with no more clients than names, clients
    /// that keep pace never share a name. With more, the clients sharing a sequence move
    /// in convoys that grow (64 clients on 16 names: p99 ~200 ms), which measures the
    /// workload more than the service.
    Rotate,
}

/// Run `tenure bench ...`.
pub fn run(a: BenchArgs) -> anyhow::Result<()> {
    match a.cmd {
        BenchCmd::Writes(w) => writes::writes(w),
        BenchCmd::Locks(l) => locks(l),
        BenchCmd::Lookup(l) => lookup::run(l),
        BenchCmd::Objects(o) => objects::run(o),
        BenchCmd::Scale(s) => scale::run(s),
    }
}

fn locks(a: LocksArgs) -> anyhow::Result<()> {
    use tenure_client::{LockMode, Wait};
    anyhow::ensure!(a.clients > 0, "--clients must be at least 1");
    anyhow::ensure!(a.names > 0, "--names must be at least 1");
    anyhow::ensure!(a.seconds > 0, "--seconds must be at least 1");
    let conns = a.conns.unwrap_or(a.clients);
    anyhow::ensure!(
        (1..=a.clients).contains(&conns),
        "--conns must be between 1 and --clients"
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let endpoints = a.target.endpoints()?;
        let tls = a.target.tls()?;
        let names: Vec<String> = (0..a.names).map(|k| format!("/bench-{k}/lock")).collect();
        let mut clients: Vec<Client> = Vec::new();
        // Warm up outside the measurement: sessions opened, managers found.
        for i in 0..a.clients as usize {
            let c = if i < conns as usize {
                Client::with_options(
                    endpoints.clone(),
                    tenure_client::ClientOptions {
                        tls: tls.clone(),
                        token: a.target.auth_token.clone(),
                        ..options(a.unary)
                    },
                )?
            } else {
                clients[i % conns as usize].new_sharing()
            };
            for n in &names {
                c.lock(n, LockMode::Exclusive, Wait::Forever).await?.release().await?;
            }
            clients.push(c);
        }
        let done = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(AtomicU64::new(0));
        let bar = if a.json {
            indicatif::ProgressBar::hidden()
        } else {
            indicatif::ProgressBar::new(a.seconds)
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len}s {msg}")
                .expect("template"),
        );
        let cpu = CpuMeter::start(&a.target);
        let started = Instant::now();
        let end = started + Duration::from_secs(a.seconds);
        let mut tasks = Vec::new();
        for (c, client) in clients.iter().cloned().enumerate() {
            let done = done.clone();
            let errors = errors.clone();
            let names = names.clone();
            let pick = a.pick;
            tasks.push(tokio::spawn(async move {
                let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
                let mut rng = tenure_core::rng::Rng::new(c as u64);
                let mut i = 0usize;
                while Instant::now() < end {
                    let k = match pick {
                        Pick::Random => rng.below(names.len() as u64) as usize,
                        Pick::Rotate => (c * 7 + i) % names.len(),
                    };
                    i += 1;
                    let name = &names[k];
                    let t = Instant::now();
                    let r = match client.lock(name, LockMode::Exclusive, Wait::Forever).await {
                        Ok(g) => g.release().await,
                        Err(e) => Err(e),
                    };
                    match r {
                        Ok(()) => {
                            h.saturating_record(t.elapsed().as_micros() as u64);
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            tracing::debug!("lock cycle failed: {e}");
                        }
                    }
                }
                h
            }));
        }
        let mut last = 0;
        while Instant::now() < end {
            tokio::time::sleep(Duration::from_secs(1).min(end - Instant::now())).await;
            let n = done.load(Ordering::Relaxed);
            bar.set_position(started.elapsed().as_secs());
            bar.set_message(format!("{} cycles/s", n - last));
            last = n;
        }
        let mut total = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
        for t in tasks {
            total.add(t.await?)?;
        }
        let elapsed = started.elapsed().as_secs_f64();
        let n = total.len();
        let (cpu_json, cpu_text) = cpu.per_unit(n, "cycle");
        bar.finish_and_clear();
        for c in &clients {
            let _ = c.close().await;
        }
        let ms = |us: u64| us as f64 / 1000.0;
        let report = serde_json::json!({
            "bench": "locks",
            "transport": transport_name(a.unary),
            "clients": a.clients,
            "conns": conns,
            "names": a.names,
            "pick": crate::value_name(&a.pick),
            "seconds": elapsed,
            "cycles": n,
            "errors": errors.load(Ordering::Relaxed),
            "cycles_per_sec": n as f64 / elapsed,
            "p50_ms": ms(total.value_at_quantile(0.5)),
            "p99_ms": ms(total.value_at_quantile(0.99)),
            "max_ms": ms(total.max()),
            "cpu_us_per_cycle": cpu_json,
        });
        if a.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            println!(
                "locks ({}): {} clients on {} names (picked {}) for {:.1}s: {} lock+unlock cycles ({} errors), {:.0} cycles/s",
                transport_name(a.unary),
                a.clients,
                a.names,
                crate::value_name(&a.pick),
                elapsed,
                n,
                errors.load(Ordering::Relaxed),
                n as f64 / elapsed
            );
            println!(
                "cycle latency: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                ms(total.value_at_quantile(0.5)),
                ms(total.value_at_quantile(0.99)),
                ms(total.max())
            );
            if let Some(t) = cpu_text {
                println!("{t}");
            }
        }
        anyhow::Ok(())
    })
}

/// The client options of a benchmark: the session stream, or unary RPCs.
fn options(unary: bool) -> tenure_client::ClientOptions {
    tenure_client::ClientOptions {
        transport: if unary {
            tenure_client::Transport::Unary
        } else {
            tenure_client::Transport::Stream
        },
        ..Default::default()
    }
}

fn transport_name(unary: bool) -> &'static str {
    if unary { "unary" } else { "stream" }
}

/// CPU time (user + system) spent by this process and by the local cluster's device
/// processes during a measurement, read from `/proc` (Linux): what the work cost
/// beside how long it took. Device processes are known only for a local cluster
/// (`cluster.json`), not for `--endpoints`.
struct CpuMeter {
    devices: Vec<u32>,
    /// What the measured processes are ("device", "etcd").
    label: &'static str,
    start: Option<(Option<Duration>, Duration)>,
}

impl CpuMeter {
    /// Start measuring now.
    fn start(target: &crate::client_cmds::Target) -> CpuMeter {
        let devices = if target.endpoints.is_empty() {
            crate::cluster::file::ClusterFile::load(&target.data)
                .map(|f| f.devices.iter().map(|d| d.pid).collect())
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        let start = cpu_sample(&devices);
        CpuMeter {
            devices,
            label: "device",
            start,
        }
    }

    /// Start measuring etcd's processes `pids` (so that its CPU per operation stands
    /// beside Tenure's devices'), and this process.
    fn start_pids(pids: Vec<u32>) -> CpuMeter {
        let start = cpu_sample(&pids);
        CpuMeter {
            devices: pids,
            label: "etcd",
            start,
        }
    }

    /// Microseconds of CPU per unit of work since the start, as JSON
    /// (`{"devices": .., "bench": ..}`, `null` where unknown), and as a sentence.
    fn per_unit(&self, units: u64, unit: &str) -> (serde_json::Value, Option<String>) {
        let (Some((d0, b0)), Some((d1, b1))) = (self.start, cpu_sample(&self.devices)) else {
            return (serde_json::Value::Null, None);
        };
        let per = |d: Duration| d.as_secs_f64() * 1e6 / units.max(1) as f64;
        let devices = d0.zip(d1).map(|(a, b)| per(b.saturating_sub(a)));
        let bench = per(b1.saturating_sub(b0));
        let text = match devices {
            Some(d) => format!(
                "CPU per {unit}: {d:.0} µs in the {} {} processes, {bench:.0} µs in this one",
                self.devices.len(),
                self.label
            ),
            None => format!("CPU per {unit}: {bench:.0} µs in this process"),
        };
        (
            serde_json::json!({ "devices": devices, "bench": bench }),
            Some(text),
        )
    }
}

/// (`devices`, this process) CPU so far; devices `None` if there are none or any is
/// unreadable.
fn cpu_sample(devices: &[u32]) -> Option<(Option<Duration>, Duration)> {
    let devices = if devices.is_empty() {
        None
    } else {
        devices.iter().map(|p| process_cpu(&p.to_string())).sum()
    };
    Some((devices, process_cpu("self")?))
}

/// User + system CPU time of process `pid` (a number, or `self`), from
/// `/proc/<pid>/stat`; `None` where that cannot be read.
fn process_cpu(pid: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_cpu(&stat, rustix::param::clock_ticks_per_second())
}

/// `utime + stime` of a `/proc/<pid>/stat` line, in clock ticks of `hz` per second:
/// the 12th and 13th fields after the command name (the state is the first).
fn parse_cpu(stat: &str, hz: u64) -> Option<Duration> {
    let mut f = crate::cluster::stat_fields(stat)?.skip(11);
    let ticks = f.next()?.parse::<u64>().ok()? + f.next()?.parse::<u64>().ok()?;
    Some(Duration::from_secs_f64(ticks as f64 / hz.max(1) as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_read_after_the_command_name() {
        // A command name with spaces and a parenthesis; utime 250, stime 50 ticks.
        let stat = "4242 (tenure (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3";
        assert_eq!(parse_cpu(stat, 100), Some(Duration::from_secs(3)));
        assert_eq!(parse_cpu("garbage", 100), None);
        assert!(
            process_cpu("self").is_some(),
            "this process's own CPU is readable"
        );
    }
}
