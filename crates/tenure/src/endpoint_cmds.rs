//! `tenure endpoint health` and `tenure endpoint status`: an operator's look at each
//! device of a cluster, in the shape of `etcdctl endpoint health|status`. Devices are
//! found as `tenure status` finds them (`--endpoints`, else the local cluster of
//! `--data`); every device is asked at once, each check bounded by `--timeout`.
//!
//! A device is healthy when it answers Status, every chunk it holds is in a regular
//! lease (seed 000 §4.2.1; the test `cluster up` waits for), every store it holds a
//! chunk of has a manager among the devices that answered, and a write of the test
//! register through it commits (in a store it manages, else in one it holds a chunk
//! of). The write is an admin call: with authorization on, give an admin token.

use crate::client_cmds::Target;
use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tenure_client::proto::StatusResponse;
use tenure_client::{Client, ClientOptions};

/// Arguments of `tenure endpoint`.
#[derive(clap::Args, Debug)]
pub struct EndpointArgs {
    #[command(subcommand)]
    cmd: EndpointCmd,
}

#[derive(clap::Subcommand, Debug)]
enum EndpointCmd {
    /// Whether each device answers, serves its chunks, has its stores managed and
    /// commits a write; exits 1 if any is unhealthy.
    Health(CommonArgs),
    /// A table of the devices: id, version, membership version, stores managed, chunks,
    /// whether it is the coordinator, its lookup role, data on disk; exits 1 if any
    /// device does not answer.
    Status(CommonArgs),
}

#[derive(clap::Args, Debug)]
struct CommonArgs {
    #[command(flatten)]
    target: Target,
    /// Bound on each device's checks.
    #[arg(long, default_value = "5s", value_parser = crate::lock_cmds::parse_duration)]
    timeout: Duration,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Run `tenure endpoint ...`.
pub fn run(a: EndpointArgs) -> anyhow::Result<ExitCode> {
    match a.cmd {
        EndpointCmd::Health(c) => health(c),
        EndpointCmd::Status(c) => status(c),
    }
}

/// Each endpoint's Status answer (or error) and how long it took.
type Answers = Vec<(String, Result<StatusResponse, String>, Duration)>;

async fn ask_all(client: &Client, endpoints: &[String], limit: Duration) -> Answers {
    let ask = |e: String| async move {
        let t = Instant::now();
        let r = match tokio::time::timeout(limit, client.status_of(&e)).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err(format!("no answer within {limit:?}")),
        };
        (e, r, t.elapsed())
    };
    futures::future::join_all(endpoints.iter().cloned().map(ask)).await
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One device's health.
#[derive(serde::Serialize)]
struct Health {
    endpoint: String,
    device: Option<u64>,
    health: bool,
    /// The Status round trip.
    status_ms: Option<f64>,
    /// The store written and how long the write took.
    store: Option<u32>,
    commit_ms: Option<f64>,
    error: Option<String>,
}

/// Why a device that answered `s` is not healthy, apart from the write: chunks not
/// serving, or stores it holds chunks of that no answering device manages.
fn serving_problem(s: &StatusResponse, managed: &BTreeSet<u32>) -> Option<String> {
    if let Err(why) = crate::cluster::up::serving(&Ok(s.clone())) {
        return Some(why);
    }
    let unmanaged: BTreeSet<u32> = (s.chunks.iter())
        .filter(|c| !c.is_collected() && !managed.contains(&c.store))
        .map(|c| c.store)
        .collect();
    (!unmanaged.is_empty()).then(|| {
        let names: Vec<String> = unmanaged.iter().map(|s| format!("s{s}")).collect();
        format!(
            "stores without a manager among the devices answering: {}",
            names.join(", ")
        )
    })
}

/// The store a health write goes to through the device of `s`: one it manages, else
/// one it holds a chunk of, else store 0.
fn health_store(s: &StatusResponse) -> u32 {
    (s.managers.iter().find(|m| m.is_manager()).map(|m| m.store))
        .or_else(|| s.chunks.iter().find(|c| !c.is_collected()).map(|c| c.store))
        .unwrap_or(0)
}

fn health(a: CommonArgs) -> anyhow::Result<ExitCode> {
    let rt = crate::lock_cmds::runtime()?;
    rt.block_on(async move {
        let endpoints = a.target.endpoints()?;
        let client = a.target.client()?;
        let answers = ask_all(&client, &endpoints, a.timeout).await;
        let managed: BTreeSet<u32> = (answers.iter())
            .filter_map(|(_, r, _)| r.as_ref().ok())
            .flat_map(|s| s.managers.iter().filter(|m| m.is_manager()).map(|m| m.store))
            .collect();
        let opts = a.target.options(ClientOptions::default())?;
        let check = |(endpoint, answer, took): (String, Result<StatusResponse, String>, Duration)| {
            let managed = &managed;
            let opts = opts.clone();
            async move {
                let mut h = Health {
                    endpoint: endpoint.clone(),
                    device: None,
                    health: false,
                    status_ms: None,
                    store: None,
                    commit_ms: None,
                    error: None,
                };
                let s = match answer {
                    Ok(s) => s,
                    Err(e) => {
                        h.error = Some(format!("no answer to Status: {e}"));
                        return h;
                    }
                };
                h.device = Some(s.device);
                h.status_ms = Some(ms(took));
                if let Some(why) = serving_problem(&s, managed) {
                    h.error = Some(why);
                    return h;
                }
                let store = health_store(&s);
                h.store = Some(store);
                let t = Instant::now();
                let wrote = async {
                    let c = Client::with_options(vec![endpoint], opts)?;
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_micros() as u64);
                    c.write(store, u64::MAX, now).await?;
                    anyhow::Ok(())
                };
                match tokio::time::timeout(a.timeout, wrote).await {
                    Ok(Ok(())) => {
                        h.commit_ms = Some(ms(t.elapsed()));
                        h.health = true;
                    }
                    Ok(Err(e)) => h.error = Some(format!("write to s{store} failed: {e:#}")),
                    Err(_) => {
                        h.error = Some(format!("write to s{store} not committed within {:?}", a.timeout))
                    }
                }
                h
            }
        };
        let all: Vec<Health> = futures::future::join_all(answers.into_iter().map(check)).await;
        let sick = all.iter().filter(|h| !h.health).count();
        if a.json {
            println!("{}", serde_json::to_string_pretty(&all)?);
        } else {
            for h in &all {
                let device = h.device.map_or(String::new(), |d| format!("d{d}, "));
                if h.health {
                    println!(
                        "{} is healthy: {device}status {:.1} ms, committed a write to s{} in {:.1} ms",
                        h.endpoint,
                        h.status_ms.unwrap_or(0.0),
                        h.store.unwrap_or(0),
                        h.commit_ms.unwrap_or(0.0)
                    );
                } else {
                    println!(
                        "{} is unhealthy: {device}{}",
                        h.endpoint,
                        h.error.as_deref().unwrap_or("")
                    );
                }
            }
        }
        if sick > 0 {
            eprintln!("{sick} of {} endpoints unhealthy", all.len());
            return Ok(ExitCode::FAILURE);
        }
        anyhow::Ok(ExitCode::SUCCESS)
    })
}

/// One row of `endpoint status` (default: nothing known).
#[derive(Default, serde::Serialize)]
struct Row {
    endpoint: String,
    device: Option<u64>,
    version: Option<String>,
    membership_version: Option<u64>,
    stores_managed: Option<usize>,
    chunks: Option<usize>,
    /// Whether this device acts as the cluster coordinator (raft's "is leader").
    is_coordinator: Option<bool>,
    coordinator: Option<u64>,
    coordinator_term: Option<u64>,
    lookup: Option<String>,
    data_bytes: Option<u64>,
    status_ms: Option<f64>,
    error: Option<String>,
}

fn status(a: CommonArgs) -> anyhow::Result<ExitCode> {
    let rt = crate::lock_cmds::runtime()?;
    rt.block_on(async move {
        let endpoints = a.target.endpoints()?;
        let client = a.target.client()?;
        let limit = a.timeout;
        let cluster = client.cluster();
        let (answers, members, nodes) = futures::future::join3(
            ask_all(&client, &endpoints, limit),
            futures::future::join_all(
                (endpoints.iter()).map(|e| tokio::time::timeout(limit, cluster.members_of(e))),
            ),
            futures::future::join_all(
                (endpoints.iter()).map(|e| tokio::time::timeout(limit, client.node_status(e))),
            ),
        )
        .await;
        let rows: Vec<Row> = (answers.into_iter().zip(members).zip(nodes))
            .map(|(((endpoint, answer, took), m), n)| match answer {
                Ok(s) => Row {
                    endpoint,
                    device: Some(s.device),
                    version: Some(s.version.clone()).filter(|v| !v.is_empty()),
                    membership_version: m.ok().and_then(Result::ok).map(|m| m.version),
                    stores_managed: Some(s.managers.iter().filter(|m| m.is_manager()).count()),
                    chunks: Some(s.chunks.iter().filter(|c| !c.is_collected()).count()),
                    is_coordinator: Some(s.acting_coordinator),
                    coordinator: s.coordinator,
                    coordinator_term: Some(s.coordinator_term),
                    lookup: n.ok().and_then(Result::ok).map(|n| n.state),
                    data_bytes: s.data_bytes,
                    status_ms: Some(ms(took)),
                    error: None,
                },
                Err(e) => Row {
                    endpoint,
                    error: Some(e),
                    ..Row::default()
                },
            })
            .collect();
        let failed = rows.iter().filter(|r| r.error.is_some()).count();
        if a.json {
            println!("{}", serde_json::to_string_pretty(&rows)?);
        } else {
            print!("{}", table(&rows));
        }
        if failed > 0 {
            eprintln!("{failed} of {} endpoints did not answer", rows.len());
            return Ok(ExitCode::FAILURE);
        }
        anyhow::Ok(ExitCode::SUCCESS)
    })
}

/// `n` bytes for people.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1000.0 && u + 1 < UNITS.len() {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// The rows as an aligned table with a header line.
fn table(rows: &[Row]) -> String {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let head = [
        "ENDPOINT",
        "ID",
        "VERSION",
        "MEMBERSHIP",
        "MANAGES",
        "CHUNKS",
        "COORDINATOR",
        "LOOKUP",
        "DATA",
        "ROUND",
    ];
    let mut cells: Vec<Vec<String>> = vec![head.iter().map(|h| h.to_string()).collect()];
    let mut errors = BTreeMap::new();
    for r in rows {
        if let Some(e) = &r.error {
            errors.insert(r.endpoint.clone(), e.clone());
        }
        cells.push(vec![
            r.endpoint.clone(),
            opt(r.device.map(|d| format!("d{d}"))),
            opt(r.version.clone()),
            opt(r.membership_version.map(|v| v.to_string())),
            opt(r.stores_managed.map(|v| v.to_string())),
            opt(r.chunks.map(|v| v.to_string())),
            opt(r.is_coordinator.map(|c| {
                if c {
                    format!("yes (term {})", r.coordinator_term.unwrap_or(0))
                } else {
                    "no".into()
                }
            })),
            opt(r.lookup.clone()),
            opt(r.data_bytes.map(human_bytes)),
            opt(r.status_ms.map(|m| format!("{m:.1} ms"))),
        ]);
    }
    let widths: Vec<usize> = (0..head.len())
        .map(|i| {
            cells
                .iter()
                .map(|row| row[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in &cells {
        let line: Vec<String> = (row.iter().zip(&widths))
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    for (e, why) in errors {
        out.push_str(&format!("{e}: no answer: {why}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_client::proto::{ChunkStatus, ManagerStatus};

    fn answer(device: u64, chunks: &[(u32, &str)], manages: &[u32]) -> StatusResponse {
        StatusResponse {
            device,
            chunks: (chunks.iter())
                .map(|(store, state)| ChunkStatus {
                    device,
                    store: *store,
                    state: state.to_string(),
                    ..Default::default()
                })
                .collect(),
            managers: (manages.iter())
                .map(|s| ManagerStatus {
                    store: *s,
                    state: "Manager".into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_device_is_unhealthy_while_a_store_of_its_chunks_has_no_manager() {
        let s = answer(1, &[(0, "RegularLease"), (1, "RegularLease")], &[0]);
        let managed: BTreeSet<u32> = [0, 1].into();
        assert_eq!(serving_problem(&s, &managed), None);
        assert_eq!(health_store(&s), 0);
        let only0: BTreeSet<u32> = [0].into();
        let why = serving_problem(&s, &only0).expect("s1 has no manager");
        assert!(why.contains("s1"), "{why}");
        let waking = answer(2, &[(1, "NewlyAwake")], &[]);
        assert!(serving_problem(&waking, &managed).is_some());
        assert_eq!(health_store(&waking), 1);
    }

    #[test]
    fn the_table_lines_up_and_names_the_silent() {
        let ok = Row {
            endpoint: "127.0.0.1:7101".into(),
            device: Some(1),
            version: Some("0.1.0".into()),
            membership_version: Some(0),
            stores_managed: Some(21),
            chunks: Some(64),
            is_coordinator: Some(true),
            coordinator: Some(1),
            coordinator_term: Some(3),
            lookup: Some("Leader".into()),
            data_bytes: Some(12_345_678),
            status_ms: Some(1.25),
            error: None,
        };
        let down = Row {
            endpoint: "127.0.0.1:7102".into(),
            error: Some("connection refused".into()),
            ..Row::default()
        };
        let t = table(&[ok, down]);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("ENDPOINT"), "{t}");
        assert!(
            lines[1].contains("yes (term 3)") && lines[1].contains("12.3 MB"),
            "{t}"
        );
        assert_eq!(lines[0].find("ID"), lines[1].find("d1"), "{t}");
        assert!(lines[3].contains("connection refused"), "{t}");
        assert_eq!(human_bytes(999), "999 B");
    }
}
