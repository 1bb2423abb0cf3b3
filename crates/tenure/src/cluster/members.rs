//! `tenure cluster add|remove`: membership changes of a local cluster (DESIGN §6).
//!
//! `add` gives the new device the next unused id (one above every `dN/` directory, so a
//! retired id is never reused) and free ports, writes `dN/server.toml` with `join = true`
//! and every device among its peers, adds it to `cluster.json`, starts it, asks the
//! cluster to admit it (`AddDevice`, repeated until the membership record names it
//! active), and returns once it holds chunks in a regular lease: the coordinator then
//! goes on moving chunks onto it, a few stores at a time, until the devices hold about as
//! many each (`--balanced` waits for that too).
//!
//! `remove DEVICE` asks the cluster to drain the device (`RemoveDevice`): its chunks are
//! replaced on the other devices and the stores it manages migrate away; then the
//! coordinator takes it out of the record, lists it as retired, and the device stops by
//! itself. `remove` waits for that, makes sure the process is gone, drops the device from
//! `cluster.json` and keeps its directory with the configuration renamed to
//! `server.toml.retired`, so `cluster up` does not start it again.
//!
//! Both print how long the change took.

use super::file::{ClusterFile, DeviceEntry};
use super::{pid_alive, runtime};
use anyhow::{Context, bail};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tenure_client::cluster::{ClusterError, Membership};
use tenure_client::proto::StatusResponse;
use tenure_client::{Client, ClientOptions};
use tenure_server::config::{PeerConfig, ServerConfig};

/// Arguments of `tenure cluster add`.
#[derive(clap::Args, Debug)]
pub struct AddArgs {
    /// The cluster's data directory.
    #[arg(long, default_value = "tenure-data")]
    data: PathBuf,
    /// How long to wait for the device to be admitted and to hold chunks.
    #[arg(long, default_value_t = 120)]
    wait_secs: u64,
    /// Also wait until the chunks are balanced: the new device holds within
    /// BALANCE_GAP of every other device's count (takes about a minute for 64 stores).
    #[arg(long)]
    balanced: bool,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Arguments of `tenure cluster remove`.
#[derive(clap::Args, Debug)]
pub struct RemoveArgs {
    /// The device to drain and retire.
    device: u64,
    /// The cluster's data directory.
    #[arg(long, default_value = "tenure-data")]
    data: PathBuf,
    /// How long to wait for the device to retire.
    #[arg(long, default_value_t = 120)]
    wait_secs: u64,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Ids of the devices with a directory (`dN/`) under `data`, ascending: running,
/// stopped and retired ones.
pub(crate) fn device_dirs(data: &Path) -> anyhow::Result<Vec<u64>> {
    let mut ids = Vec::new();
    let rd = match std::fs::read_dir(data) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ids),
        Err(e) => return Err(e).with_context(|| format!("reading {}", data.display())),
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(id) = (name.to_str())
            .and_then(|n| n.strip_prefix('d'))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        if e.path().is_dir() {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

fn save(data: &Path, file: &ClusterFile) -> anyhow::Result<()> {
    let p = data.join("cluster.json");
    std::fs::write(&p, serde_json::to_string_pretty(file)?)
        .with_context(|| format!("writing {}", p.display()))
}

/// Start `tenure server` with `cfg_path`, logging to `log`, in its own process group.
fn spawn(cfg_path: &Path, log: &Path) -> anyhow::Result<u32> {
    let exe = std::env::current_exe().context("locating the tenure binary")?;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("server")
        .arg("--config")
        .arg(cfg_path)
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    {
        use std::os::unix::process::CommandExt;
        // Own process group: a Ctrl-C meant for the shell does not stop the device.
        cmd.process_group(0);
    }
    Ok(cmd.spawn().context("starting the device")?.id())
}

/// A client of the local cluster's devices, with short attempts (they are local).
fn client(file: &ClusterFile, endpoints: Vec<String>) -> anyhow::Result<Client> {
    let opts = file.options(ClientOptions {
        request_timeout: Duration::from_secs(2),
        attempt_timeout: Duration::from_secs(1),
        ..Default::default()
    })?;
    Ok(Client::with_options(endpoints, opts)?)
}

/// Chunks of a device in a regular lease (what it serves), and stores it manages.
fn load(s: &StatusResponse) -> (usize, usize) {
    let chunks = (s.chunks.iter()).filter(|c| c.is_serving()).count();
    let manages = (s.managers.iter()).filter(|m| m.is_manager()).count();
    (chunks, manages)
}

fn bar(show: bool, template: &str) -> indicatif::ProgressBar {
    let b = if show {
        indicatif::ProgressBar::new_spinner()
    } else {
        indicatif::ProgressBar::hidden()
    };
    b.set_style(indicatif::ProgressStyle::with_template(template).expect("template"));
    b.enable_steady_tick(Duration::from_millis(200));
    b
}

/// One line about a record: members and their states, retired devices.
pub(crate) fn describe(m: &Membership) -> String {
    let members: Vec<String> = (m.members.iter())
        .map(|x| format!("d{} {}", x.id, x.state))
        .collect();
    let mut line = format!("membership version {}: {}", m.version, members.join(", "));
    if !m.retired.is_empty() {
        let r: Vec<String> = m.retired.iter().map(|d| format!("d{d}")).collect();
        line.push_str(&format!("; retired {}", r.join(", ")));
    }
    line
}

/// Add each device's membership state to its `cluster status` entry (`member`: active,
/// retiring, joining — not admitted yet — or retired) and say it in one line.
pub(crate) async fn annotate(client: &Client, devices: &mut [serde_json::Value]) -> String {
    let m = match client.cluster().members().await {
        Ok(m) => m,
        Err(e) => return format!("membership: unknown ({e})"),
    };
    for d in devices.iter_mut() {
        let Some(id) = d["id"].as_u64() else {
            continue;
        };
        let state = match m.member(id) {
            Some(x) => x.state.to_string(),
            None if m.has_retired(id) => "retired".into(),
            None => "joining".into(),
        };
        d["member"] = serde_json::Value::String(state);
    }
    describe(&m)
}

/// Run `tenure cluster add`.
pub fn add(a: AddArgs) -> anyhow::Result<()> {
    let data = a.data.clone();
    let mut file = ClusterFile::load(&data)?;
    let running: Vec<&DeviceEntry> = file.devices.iter().filter(|d| pid_alive(d.pid)).collect();
    let Some(first) = running.first() else {
        bail!(
            "no device of the cluster in {} is running; start it with `tenure cluster up --data {}`",
            data.display(),
            data.display()
        );
    };
    let template_path = first.data_dir.join("server.toml");
    let template = ServerConfig::load(&template_path)
        .with_context(|| format!("reading device {}'s configuration", first.id))?;
    let rt = runtime()?;
    let endpoints: Vec<String> = running.iter().map(|d| d.client_addr.to_string()).collect();
    let c = rt.block_on(async { client(&file, endpoints) })?;
    let record = rt.block_on(c.cluster().members()).context(
        "asking the cluster for its membership record (is it serving? see `tenure cluster status`)",
    )?;

    // The next id: above every device directory (retired ones included) and every id
    // the record knows.
    let id = (device_dirs(&data)?.into_iter())
        .chain(record.members.iter().map(|m| m.id))
        .chain(record.retired.iter().copied())
        .chain(file.devices.iter().map(|d| d.id))
        .max()
        .unwrap_or(0)
        + 1;
    let port = || -> anyhow::Result<SocketAddr> {
        let p = tenure_server::config::free_local_port().context("finding a free port")?;
        Ok(SocketAddr::from(([127, 0, 0, 1], p)))
    };
    let (peer_addr, client_addr, metrics_addr) = (port()?, port()?, port()?);
    let mut peers: Vec<PeerConfig> = (file.devices.iter())
        .map(|d| PeerConfig {
            id: d.id,
            peer_addr: d.peer_addr,
            client_addr: d.client_addr,
            metrics_addr: d.metrics_addr,
        })
        .collect();
    peers.push(PeerConfig {
        id,
        peer_addr,
        client_addr,
        metrics_addr: Some(metrics_addr),
    });
    let dir = std::path::absolute(&data)?.join(format!("d{id}"));
    let mut cfg = ServerConfig {
        id,
        data_dir: dir.clone(),
        peer_listen: peer_addr,
        client_listen: client_addr,
        metrics_listen: Some(metrics_addr),
        peers,
        join: true,
        rng_seed: None,
        tls: None,
        ..template.clone()
    };
    cfg.validate()?;
    // A TLS cluster's new device gets a certificate of the same CA, whose key sits
    // beside its certificate.
    if let Some(t) = &template.tls {
        let ca_dir = t.ca.parent().unwrap_or(Path::new("."));
        let ca = tenure_server::certs::Authority::load(ca_dir)
            .context("loading the cluster's CA to issue the new device's certificate")?;
        cfg.tls = Some(super::configs::issue(&ca, &cfg)?);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let cfg_path = dir.join("server.toml");
    std::fs::write(&cfg_path, cfg.to_toml())
        .with_context(|| format!("writing {}", cfg_path.display()))?;
    let log = dir.join("server.log");
    let started = Instant::now();
    let pid = spawn(&cfg_path, &log).with_context(|| format!("starting device {id}"))?;
    file.devices.push(DeviceEntry {
        id,
        pid,
        peer_addr,
        client_addr,
        metrics_addr: Some(metrics_addr),
        data_dir: dir.clone(),
        log: log.clone(),
    });
    save(&data, &file)?;
    let limit = Duration::from_secs(a.wait_secs);
    let trouble = |what: String| {
        anyhow::anyhow!(
            "{what}; device {id} (pid {pid}) was started and stays in the local cluster: see {} \
             and `tenure cluster status --data {}` (it shows whether the device was admitted \
             later; `tenure cluster remove {id}` retires it once admitted)",
            log.display(),
            data.display()
        )
    };

    let outcome = rt.block_on(async {
        let b = bar(!a.json, "{spinner} {msg}");
        let mine = client_addr.to_string();
        // The device listens.
        b.set_message(format!("starting device {id}"));
        loop {
            if c.status_of(&mine).await.is_ok() {
                break;
            }
            if !pid_alive(pid) {
                b.finish_and_clear();
                return Err(trouble(format!("device {id} exited at start")));
            }
            if started.elapsed() > limit {
                b.finish_and_clear();
                return Err(trouble(format!(
                    "device {id} did not answer within {limit:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Admitted.
        b.set_message(format!("asking the coordinator to admit device {id}"));
        let asked = Instant::now();
        let left = limit.saturating_sub(started.elapsed());
        let admitted = c
            .cluster()
            .wait_admitted(id, &peer_addr.to_string(), &mine, left)
            .await
            .map_err(|e| trouble(format!("device {id} was not admitted: {e}")))?;
        let admitted_after = asked.elapsed();
        // Holding chunks (and balanced, if asked).
        let gap = tenure_core::election::coordinator::BALANCE_GAP as usize;
        let mut first_chunk = None;
        let (chunks, others) = loop {
            let all = c.status_all().await;
            let mine_status = all.iter().find_map(|(e, s)| {
                (tenure_client_normalize(e) == tenure_client_normalize(&mine))
                    .then(|| s.as_ref().ok())
                    .flatten()
            });
            let n = mine_status.map_or(0, |s| load(s).0);
            let others: Vec<(u64, usize)> = (all.iter())
                .filter_map(|(_, s)| s.as_ref().ok())
                .filter(|s| s.device != id && admitted.is_active(s.device))
                .map(|s| (s.device, load(s).0))
                .collect();
            if n > 0 && first_chunk.is_none() {
                first_chunk = Some(asked.elapsed());
            }
            let most = others.iter().map(|(_, n)| *n).max().unwrap_or(0);
            let done = n > 0 && (!a.balanced || most < n + gap);
            b.set_message(format!(
                "device {id} admitted; it holds {n} chunks (the most loaded device {most})"
            ));
            if done {
                break (n, others);
            }
            if !pid_alive(pid) {
                b.finish_and_clear();
                return Err(trouble(format!("device {id} exited after it was admitted")));
            }
            if started.elapsed() > limit {
                b.finish_and_clear();
                return Err(trouble(format!(
                    "device {id} was admitted but holds {n} chunks after {limit:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        b.finish_and_clear();
        let record = c.cluster().members().await.unwrap_or(admitted);
        Ok((
            admitted_after,
            first_chunk,
            asked.elapsed(),
            chunks,
            others,
            record,
        ))
    });
    let (admitted_after, first_chunk, took, chunks, others, record) = outcome?;
    let first_chunk = first_chunk.unwrap_or(took);
    if a.json {
        let out = serde_json::json!({
            "device": id, "pid": pid, "peer_addr": peer_addr, "client_addr": client_addr,
            "metrics_addr": metrics_addr, "data_dir": dir,
            "admitted_ms": admitted_after.as_millis() as u64,
            "first_chunk_ms": first_chunk.as_millis() as u64,
            "elapsed_ms": took.as_millis() as u64,
            "chunks": chunks,
            "others": others.iter().map(|(d, n)| serde_json::json!({"device": d, "chunks": n})).collect::<Vec<_>>(),
            "balanced": a.balanced,
            "membership_version": record.version,
            "members": record.members.iter().map(|m| serde_json::json!({"id": m.id, "state": m.state.to_string()})).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "device {id} joined the cluster in {:.1}s: admitted after {:.1}s, first chunk in a regular lease after {:.1}s; it holds {chunks} chunks{}",
        took.as_secs_f64(),
        admitted_after.as_secs_f64(),
        first_chunk.as_secs_f64(),
        if a.balanced {
            " (balanced)".to_string()
        } else {
            " and takes more as the coordinator balances (a few stores at a time)".to_string()
        }
    );
    let others: Vec<String> = others.iter().map(|(d, n)| format!("d{d} {n}")).collect();
    println!("chunks held by the other members: {}", others.join(", "));
    println!("{}", describe(&record));
    println!(
        "d{id}: pid {pid}, client {client_addr}, metrics {metrics_addr}, data in {}",
        dir.display()
    );
    Ok(())
}

/// Endpoints as the client normalizes them (`http://` prefix).
fn tenure_client_normalize(e: &str) -> String {
    if e.contains("://") {
        e.to_string()
    } else {
        format!("http://{e}")
    }
}

/// Run `tenure cluster remove`.
pub fn remove(a: RemoveArgs) -> anyhow::Result<()> {
    let data = a.data.clone();
    let id = a.device;
    let mut file = ClusterFile::load(&data)?;
    let Some(target) = file.devices.iter().find(|d| d.id == id).cloned() else {
        let ids: Vec<u64> = file.devices.iter().map(|d| d.id).collect();
        bail!(
            "device {id} is not in the local cluster in {} (devices {ids:?})",
            data.display()
        );
    };
    if !pid_alive(target.pid) {
        bail!(
            "device {id} (pid {}) is not running; start it with `tenure cluster up --data {}` \
             first: a device hands its chunks and managers over before it retires",
            target.pid,
            data.display()
        );
    }
    let others: Vec<String> = (file.devices.iter())
        .filter(|d| d.id != id && pid_alive(d.pid))
        .map(|d| d.client_addr.to_string())
        .collect();
    if others.is_empty() {
        bail!("device {id} is the only running device; nothing could take its chunks");
    }
    let rt = runtime()?;
    let c = rt.block_on(async { client(&file, others) })?;
    let target_ep = target.client_addr.to_string();
    let limit = Duration::from_secs(a.wait_secs);
    let started = Instant::now();
    let result = rt.block_on(async {
        let b = bar(!a.json, "{spinner} {msg}");
        // Device `id`'s chunks and managers, as it last reported them.
        let before = c.status_of(&target_ep).await.ok().map(|s| load(&s));
        let last = std::cell::Cell::new(before);
        let progress = async {
            loop {
                if let Ok(s) = c.status_of(&target_ep).await {
                    let (n, m) = load(&s);
                    last.set(Some((n, m)));
                    b.set_message(format!(
                        "draining device {id}: {n} chunks and {m} managers left ({:.0}s)",
                        started.elapsed().as_secs_f64()
                    ));
                } else {
                    b.set_message(format!(
                        "device {id} no longer answers; waiting for the record to list it retired ({:.0}s)",
                        started.elapsed().as_secs_f64()
                    ));
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        };
        let api = c.cluster();
        let wait = api.wait_retired(id, &[], limit, |_| {});
        let record = tokio::select! {
            r = wait => r,
            _ = progress => unreachable!("the progress loop never ends"),
        };
        b.finish_and_clear();
        let record = record.map_err(|e| match e {
            ClusterError::TooFewDevices(why) => anyhow::anyhow!("{why} (`tenure cluster add`)"),
            ClusterError::NotMember(why) => anyhow::anyhow!(
                "{why}; if it never was admitted, stop it with `tenure cluster down` or kill pid {}",
                target.pid
            ),
            e => anyhow::anyhow!(
                "device {id} did not retire: {e}; it keeps running (pid {}); see {} and `tenure cluster status --data {}`",
                target.pid,
                target.log.display(),
                data.display()
            ),
        })?;
        anyhow::Ok((record, before, last.get()))
    });
    let (record, before, last) = result?;
    let retired_after = started.elapsed();
    // The device stops by itself once it learns it retired; make sure it is gone.
    let stopped = stop(target.pid);
    let took = started.elapsed();
    file.devices.retain(|d| d.id != id);
    save(&data, &file)?;
    let cfg = target.data_dir.join("server.toml");
    if cfg.exists() {
        let to = target.data_dir.join("server.toml.retired");
        std::fs::rename(&cfg, &to).with_context(|| format!("renaming {}", cfg.display()))?;
    }
    let said = std::fs::read_to_string(&target.log).ok().and_then(|t| {
        t.lines()
            .rev()
            .find(|l| l.contains("retired from the cluster"))
            .map(plain)
    });
    let (chunks_before, managers_before) = before.unwrap_or_default();
    if a.json {
        let out = serde_json::json!({
            "device": id,
            "retired_ms": retired_after.as_millis() as u64,
            "elapsed_ms": took.as_millis() as u64,
            "chunks_before": chunks_before, "managers_before": managers_before,
            "last_seen": last.map(|(c, m)| serde_json::json!({"chunks": c, "managers": m})),
            "stopped": stopped,
            "membership_version": record.version,
            "members": record.members.iter().map(|m| serde_json::json!({"id": m.id, "state": m.state.to_string()})).collect::<Vec<_>>(),
            "retired": record.retired,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "device {id} retired in {:.1}s: its {chunks_before} chunks moved and its {managers_before} managers migrated; the process {stopped}",
        retired_after.as_secs_f64()
    );
    if let Some(line) = said {
        println!("its log: {}", line.trim());
    }
    println!("{}", describe(&record));
    println!(
        "its data stays in {} (configuration renamed server.toml.retired)",
        target.data_dir.display()
    );
    Ok(())
}

/// A log line without its terminal colours.
fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters, ended by a letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Wait for `pid` to exit by itself (a retired device stops), then SIGTERM, then SIGKILL;
/// how it went.
fn stop(pid: u32) -> &'static str {
    let wait = |d: Duration| {
        let until = Instant::now() + d;
        while Instant::now() < until {
            if !pid_alive(pid) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        !pid_alive(pid)
    };
    let signal = |sig: &str| {
        let _ = std::process::Command::new("kill")
            .arg(sig)
            .arg(pid.to_string())
            .status();
    };
    if wait(Duration::from_secs(10)) {
        return "stopped by itself";
    }
    signal("-TERM");
    if wait(Duration::from_secs(5)) {
        return "was stopped with SIGTERM";
    }
    signal("-KILL");
    "was killed with SIGKILL"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_strips_terminal_colours() {
        let l = "\u{1b}[2m2026\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m retired";
        assert_eq!(plain(l), "2026  INFO retired");
    }

    #[test]
    fn device_dirs_lists_dn_directories_in_order() {
        let t = tempfile::tempdir().unwrap();
        for d in ["d1", "d10", "d2", "dx", "other"] {
            std::fs::create_dir(t.path().join(d)).unwrap();
        }
        std::fs::write(t.path().join("d3"), "a file").unwrap();
        assert_eq!(device_dirs(t.path()).unwrap(), vec![1, 2, 10]);
        assert!(device_dirs(&t.path().join("missing")).unwrap().is_empty());
    }
}
