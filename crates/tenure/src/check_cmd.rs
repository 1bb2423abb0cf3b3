//! `tenure check perf`: a short, bounded write load at a fixed rate, then PASS or FAIL
//! against thresholds for throughput, p99 latency and errors, in the shape of
//! `etcdctl check perf`. The load is `bench writes`' (the test register across every
//! store, through the session stream), each client paced to its share of the target
//! rate; it writes test-register keys 0..clients of every store, nothing else.

use crate::bench::writes::{WriteLoad, WriteResult, run_load, seconds_bar, store_count};
use crate::client_cmds::Target;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Arguments of `tenure check`.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    #[command(subcommand)]
    cmd: CheckCmd,
}

#[derive(clap::Subcommand, Debug)]
enum CheckCmd {
    /// A paced write load for --seconds, then PASS/FAIL for throughput, p99 latency and
    /// errors; exits 1 on any FAIL.
    Perf(PerfArgs),
}

/// The load's size.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Load {
    /// 8 clients, 200 writes/s, p99 at most 50 ms.
    S,
    /// 32 clients, 1000 writes/s, p99 at most 100 ms.
    M,
    /// 128 clients, 4000 writes/s, p99 at most 200 ms.
    L,
}

/// What a load asks for and what passes.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Profile {
    clients: u64,
    /// Target writes per second, all clients together.
    rate: u64,
    /// Pass at this share of `rate` or more.
    min_share: f64,
    /// Pass with a p99 latency at most this.
    p99_max_ms: f64,
    /// Pass with at most this share of writes failed.
    max_error_share: f64,
}

impl Load {
    fn profile(self) -> Profile {
        let (clients, rate, p99_max_ms) = match self {
            Load::S => (8, 200, 50.0),
            Load::M => (32, 1000, 100.0),
            Load::L => (128, 4000, 200.0),
        };
        Profile {
            clients,
            rate,
            min_share: 0.9,
            p99_max_ms,
            max_error_share: 0.01,
        }
    }
}

#[derive(clap::Args, Debug)]
struct PerfArgs {
    /// The load: s(mall), m(edium), l(arge).
    #[arg(long, value_enum, default_value_t = Load::S)]
    load: Load,
    /// How long the load runs.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    #[command(flatten)]
    target: Target,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Run `tenure check ...`.
pub fn run(a: CheckArgs) -> anyhow::Result<ExitCode> {
    match a.cmd {
        CheckCmd::Perf(p) => perf(p),
    }
}

/// One verdict: whether it passed, and the sentence saying so.
#[derive(Debug, serde::Serialize)]
struct Verdict {
    check: &'static str,
    pass: bool,
    line: String,
}

/// The verdicts on `r` for `p`.
fn judge(p: &Profile, r: &WriteResult) -> Vec<Verdict> {
    let rate = r.rate();
    let floor = p.rate as f64 * p.min_share;
    let p99 = if r.ops == 0 {
        f64::INFINITY
    } else {
        r.ms(0.99)
    };
    let tried = r.ops + r.errors;
    let error_share = if tried == 0 {
        1.0
    } else {
        r.errors as f64 / tried as f64
    };
    vec![
        Verdict {
            check: "throughput",
            pass: rate >= floor,
            line: format!(
                "Throughput is {rate:.0} writes/s (target {}, passes at {floor:.0} or more)",
                p.rate
            ),
        },
        Verdict {
            check: "p99",
            pass: p99 <= p.p99_max_ms,
            line: format!(
                "p99 latency is {p99:.2} ms (passes at {:.0} ms or less)",
                p.p99_max_ms
            ),
        },
        Verdict {
            check: "errors",
            pass: tried > 0 && error_share <= p.max_error_share,
            line: format!(
                "{} errors in {tried} writes (passes at {:.0}% or less)",
                r.errors,
                p.max_error_share * 100.0
            ),
        },
    ]
}

fn perf(a: PerfArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(a.seconds > 0, "--seconds must be at least 1");
    let p = a.load.profile();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let client = Arc::new(a.target.client()?);
        let stores = store_count(&client).await?;
        let load = WriteLoad {
            clients: p.clients,
            stores,
            duration: Duration::from_secs(a.seconds),
            // Each client's share of the rate.
            pace: Some(Duration::from_secs_f64(p.clients as f64 / p.rate as f64)),
        };
        if !a.json {
            println!(
                "check perf, load {}: {} clients, {} writes/s over {} stores for {} s",
                crate::value_name(&a.load),
                p.clients,
                p.rate,
                stores,
                a.seconds
            );
        }
        let bar = seconds_bar(a.seconds, a.json);
        let r = run_load(client, &load, &bar).await?;
        let verdicts = judge(&p, &r);
        let pass = verdicts.iter().all(|v| v.pass);
        if a.json {
            let report = serde_json::json!({
                "load": crate::value_name(&a.load), "clients": p.clients,
                "target_per_sec": p.rate, "stores": stores, "seconds": r.seconds,
                "writes": r.ops, "errors": r.errors, "writes_per_sec": r.rate(),
                "p50_ms": r.ms(0.5), "p99_ms": r.ms(0.99),
                "checks": verdicts, "pass": pass,
            });
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            for v in &verdicts {
                println!("{}: {}", if v.pass { "PASS" } else { "FAIL" }, v.line);
            }
            println!("{}", if pass { "PASS" } else { "FAIL" });
        }
        anyhow::Ok(if pass {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::Histogram;

    fn result(ops: u64, errors: u64, seconds: f64, latency_ms: u64) -> WriteResult {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        for _ in 0..ops {
            h.record(latency_ms * 1000).unwrap();
        }
        WriteResult {
            ops,
            errors,
            seconds,
            latency_us: h,
        }
    }

    fn passed(v: &[Verdict]) -> Vec<(&str, bool)> {
        v.iter().map(|v| (v.check, v.pass)).collect()
    }

    #[test]
    fn each_threshold_fails_on_its_own() {
        let p = Load::S.profile();
        let good = judge(&p, &result(2000, 0, 10.0, 5));
        assert!(good.iter().all(|v| v.pass), "{good:?}");
        let slow = judge(&p, &result(2000, 0, 10.0, 80));
        assert_eq!(
            passed(&slow),
            [("throughput", true), ("p99", false), ("errors", true)]
        );
        let short = judge(&p, &result(1000, 0, 10.0, 5));
        assert_eq!(
            passed(&short),
            [("throughput", false), ("p99", true), ("errors", true)]
        );
        let failing = judge(&p, &result(2000, 100, 10.0, 5));
        assert_eq!(
            passed(&failing),
            [("throughput", true), ("p99", true), ("errors", false)]
        );
        let nothing = judge(&p, &result(0, 0, 10.0, 5));
        assert!(nothing.iter().all(|v| !v.pass), "{nothing:?}");
    }

    #[test]
    fn loads_grow() {
        let [s, m, l] = [Load::S, Load::M, Load::L].map(Load::profile);
        assert!(s.rate < m.rate && m.rate < l.rate);
        assert!(s.clients < m.clients && m.clients < l.clients);
    }
}
