//! `tenure cluster up`: start the devices that are not running and wait until every one
//! serves and every store has a manager.

use super::configs::{existing_configs, new_configs};
use super::file::{ClusterFile, DeviceEntry, token_path};
use super::status::{managers, statuses};
use super::{UpArgs, pid_alive, runtime};
use anyhow::{Context, bail};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tenure_client::ClientOptions;
use tenure_client::proto::StatusResponse;

pub(super) fn up(a: UpArgs) -> anyhow::Result<()> {
    let data = a.common.data.clone();
    // Devices of this cluster still running: kept as they are. When some are running and
    // others are not (killed, crashed), `up` starts only the missing ones, which rejoin.
    let mut running: BTreeMap<u64, DeviceEntry> = BTreeMap::new();
    if let Ok(f) = ClusterFile::load(&data) {
        let total = f.devices.len();
        running = f
            .devices
            .into_iter()
            .filter(|d| pid_alive(d.pid))
            .map(|d| (d.id, d))
            .collect();
        if !running.is_empty() && running.len() == total {
            bail!(
                "the cluster in {} is already running (devices {:?}); stop it with `tenure cluster down --data {}`",
                data.display(),
                running.keys().collect::<Vec<_>>(),
                data.display()
            );
        }
    }
    std::fs::create_dir_all(&data).with_context(|| format!("creating {}", data.display()))?;
    let (cfgs, restarted) = match existing_configs(&data)? {
        Some(c) => (c, true),
        None if !running.is_empty() => bail!(
            "devices {:?} of the cluster in {} are running but its configurations (dN/server.toml) are gone",
            running.keys().collect::<Vec<_>>(),
            data.display()
        ),
        None => (new_configs(&a, &data)?, false),
    };
    if restarted && a.insecure && cfgs.iter().any(|c| c.tls.is_some()) {
        bail!(
            "the cluster in {} was made with TLS; --insecure applies to new clusters only",
            data.display()
        );
    }
    if restarted && a.auth && !cfgs.iter().any(|c| c.auth.enabled) {
        bail!(
            "the cluster in {} was made without --auth, which applies to new clusters only; \
             add an [auth] section to each dN/server.toml instead (`tenure token new`)",
            data.display()
        );
    }
    let exe = std::env::current_exe().context("locating the tenure binary")?;
    let started = Instant::now();
    let mut entries = Vec::new();
    let mut started_ids = Vec::new();
    for cfg in &cfgs {
        if let Some(e) = running.get(&cfg.id) {
            entries.push(e.clone());
            continue;
        }
        started_ids.push(cfg.id);
        std::fs::create_dir_all(&cfg.data_dir)?;
        let cfg_path = cfg.data_dir.join("server.toml");
        if !restarted {
            std::fs::write(&cfg_path, cfg.to_toml())?;
        }
        let log = cfg.data_dir.join("server.log");
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)?;
        let mut cmd = std::process::Command::new(&exe);
        cmd.arg("server")
            .arg("--config")
            .arg(&cfg_path)
            .stdin(std::process::Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        {
            use std::os::unix::process::CommandExt;
            // Own process group: a Ctrl-C meant for the shell does not stop the cluster.
            cmd.process_group(0);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting device {}", cfg.id))?;
        entries.push(DeviceEntry {
            id: cfg.id,
            pid: child.id(),
            peer_addr: cfg.peer_listen,
            client_addr: cfg.client_listen,
            metrics_addr: cfg.metrics_listen,
            data_dir: cfg.data_dir.clone(),
            log,
        });
    }
    let file = ClusterFile {
        stores: cfgs[0].cluster.stores,
        devices: entries,
        ca: cfgs
            .iter()
            .find_map(|c| c.tls.as_ref().map(|t| t.ca.clone())),
        token: cfgs
            .iter()
            .any(|c| c.auth.enabled)
            .then(|| std::path::absolute(token_path(&data)))
            .transpose()?
            .filter(|p| p.exists()),
    };
    std::fs::write(
        data.join("cluster.json"),
        serde_json::to_string_pretty(&file)?,
    )?;

    let rt = runtime()?;
    let ready = rt.block_on(wait_ready(
        &file,
        &started_ids,
        Duration::from_secs(a.wait_secs),
        !a.common.json,
    ))?;
    let managers = ready.managers;
    let elapsed = started.elapsed();
    if a.common.json {
        let out = serde_json::json!({
            "data": std::path::absolute(&data)?,
            "restarted": restarted,
            "tls": file.ca.is_some(),
            "ca": file.ca,
            "auth": cfgs.iter().any(|c| c.auth.enabled),
            "token_file": file.token,
            "started_devices": started_ids,
            "serving": ready.serving,
            "elapsed_ms": elapsed.as_millis() as u64,
            "stores": file.stores,
            "devices": file.devices,
            "managers": managers.iter().map(|(s, (d, e))| serde_json::json!({"store": s, "device": d, "epoch": e})).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        if running.is_empty() {
            println!(
                "{} cluster of {} devices in {:.1}s: every device serving, all {} stores have a manager",
                if restarted { "restarted" } else { "started" },
                file.devices.len(),
                elapsed.as_secs_f64(),
                file.stores
            );
        } else {
            println!(
                "restarted device(s) {started_ids:?} of the running cluster in {:.1}s: serving again, all {} stores have a manager",
                elapsed.as_secs_f64(),
                file.stores
            );
            for s in &ready.serving {
                println!(
                    "device {} serves: {} chunks of {} stores in a regular lease, manages {} stores",
                    s.device, s.chunks, s.stores, s.manages
                );
            }
        }
        println!(
            "{:>6} {:>8} {:>22} {:>22} {:>8}",
            "device", "pid", "client", "metrics", "manages"
        );
        for d in &file.devices {
            let n = managers.values().filter(|(m, _)| *m == d.id).count();
            println!(
                "{:>6} {:>8} {:>22} {:>22} {:>8}",
                d.id,
                d.pid,
                d.client_addr,
                d.metrics_addr.map(|m| m.to_string()).unwrap_or_default(),
                n
            );
        }
        println!("data in {}; logs in dN/server.log", data.display());
        match &file.ca {
            Some(ca) => println!(
                "TLS on: clients trust {} (found there by `tenure` commands with --data; elsewhere --ca or TENURE_CA)",
                ca.display()
            ),
            None => println!("plaintext (--insecure): no TLS on the client or peer ports"),
        }
        match &file.token {
            Some(t) => println!(
                "authorization on: the admin token is in {} (owner only); give it to commands with\n  export TENURE_TOKEN=$(cat {})",
                t.display(),
                t.display()
            ),
            None if cfgs.iter().any(|c| c.auth.enabled) => {
                println!("authorization on: commands need --auth-token or TENURE_TOKEN")
            }
            None => println!("authorization off (--auth turns it on for a new cluster)"),
        }
        println!("stop with: tenure cluster down --data {}", data.display());
    }
    Ok(())
}

/// A device that serves: it answered Status with every chunk it holds in a regular lease
/// (or being deleted).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Serving {
    device: u64,
    /// Chunks in a regular lease.
    chunks: usize,
    /// Stores those chunks belong to.
    stores: usize,
    /// Stores it manages.
    manages: usize,
}

/// Whether the device behind `status` serves, or what it still waits for.
pub(crate) fn serving(status: &Result<StatusResponse, String>) -> Result<Serving, String> {
    let s = status
        .as_ref()
        .map_err(|e| format!("no answer to Status ({e})"))?;
    // A chunk the layout dropped while its device was down is deleted, not rejoined.
    let kept = || s.chunks.iter().filter(|c| !c.is_collected());
    let mut waiting: BTreeMap<&str, usize> = BTreeMap::new();
    for c in kept().filter(|c| !c.is_serving()) {
        *waiting.entry(c.state.as_str()).or_default() += 1;
    }
    if !waiting.is_empty() {
        let n: usize = waiting.values().sum();
        let states: Vec<String> = waiting.iter().map(|(k, v)| format!("{k} {v}")).collect();
        return Err(format!(
            "{n} of {} chunks not in a regular lease ({})",
            kept().count(),
            states.join(", ")
        ));
    }
    let stores: std::collections::BTreeSet<u32> = kept().map(|c| c.store).collect();
    Ok(Serving {
        device: s.device,
        chunks: kept().count(),
        stores: stores.len(),
        manages: s.managers.iter().filter(|m| m.is_manager()).count(),
    })
}

/// What `up` waited for: the devices it started, serving, and every store's manager.
struct Ready {
    serving: Vec<Serving>,
    managers: BTreeMap<u32, (u64, u64)>,
}

/// Wait until every device in `started` serves and every store has a manager, at most
/// `limit`; fail at once when a device's process exits.
async fn wait_ready(
    file: &ClusterFile,
    started: &[u64],
    limit: Duration,
    progress: bool,
) -> anyhow::Result<Ready> {
    // A local device answers Status in milliseconds; one that does not within a second
    // counts as not serving this round, so a hung device cannot stretch the bound much.
    let opts = ClientOptions {
        request_timeout: Duration::from_secs(1),
        ..Default::default()
    };
    let client = file.client(opts)?;
    let bar = if progress {
        indicatif::ProgressBar::new(file.stores as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} waiting for managers {bar:30} {pos}/{len} stores {msg}",
        )
        .expect("template"),
    );
    let started_at = Instant::now();
    loop {
        let st = statuses(&client, file).await;
        let m = managers(&st);
        let (serving, waiting): (Vec<_>, Vec<_>) = started
            .iter()
            .map(|id| (*id, st.get(id).map_or(Err("not listed".into()), serving)))
            .partition(|(_, r)| r.is_ok());
        bar.set_position(m.len() as u64);
        bar.set_message(format!(
            "{}/{} started devices serving ({:.0}s)",
            serving.len(),
            started.len(),
            started_at.elapsed().as_secs_f64()
        ));
        if m.len() == file.stores as usize && waiting.is_empty() {
            bar.finish_and_clear();
            return Ok(Ready {
                serving: serving.into_iter().filter_map(|(_, r)| r.ok()).collect(),
                managers: m,
            });
        }
        for d in &file.devices {
            if !pid_alive(d.pid) {
                bar.finish_and_clear();
                bail!(
                    "device {} (pid {}) exited; see {}",
                    d.id,
                    d.pid,
                    d.log.display()
                );
            }
        }
        if started_at.elapsed() > limit {
            bar.finish_and_clear();
            let mut why = Vec::new();
            for (id, r) in &waiting {
                if let Err(e) = r {
                    why.push(format!("device {id} does not serve: {e}"));
                }
            }
            if m.len() < file.stores as usize {
                let unreachable: Vec<String> = st
                    .iter()
                    .filter_map(|(id, r)| r.as_ref().err().map(|e| format!("d{id}: {e}")))
                    .collect();
                why.push(format!(
                    "only {}/{} stores have a manager (unreachable: {unreachable:?})",
                    m.len(),
                    file.stores
                ));
            }
            bail!(
                "not ready after {limit:?}: {}; see the logs in dN/server.log",
                why.join("; ")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
