//! Helpers of the lookup service's process tests (seed 003): run `tenure lookup …`, find
//! the devices of a local cluster, wait for one lookup leader the devices agree on, and
//! read what a child process prints.

use super::{cluster_file, with_tls};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tenure_client::Client;

/// `tenure ARGS --data DATA`: (exit code, stdout, stderr).
pub fn run(data: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(args)
        .arg("--data")
        .arg(data)
        .output()
        .expect("run tenure");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `tenure ARGS --data DATA -- COMMAND`.
pub fn run_cmd(data: &Path, args: &[&str], command: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(args)
        .arg("--data")
        .arg(data)
        .arg("--")
        .args(command)
        .output()
        .expect("run tenure");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One device of the local cluster, as `cluster.json` lists it.
#[derive(Clone, Debug)]
pub struct Dev {
    /// Device id.
    pub id: u64,
    /// Client address.
    pub client: String,
    /// Metrics address (plain HTTP).
    pub metrics: String,
    /// Process id.
    pub pid: u64,
    /// Data directory (its `server.toml` is the device's configuration).
    pub dir: PathBuf,
}

/// The devices `cluster.json` lists.
pub fn devices(data: &Path) -> Vec<Dev> {
    cluster_file(data)["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| Dev {
            id: d["id"].as_u64().unwrap(),
            client: d["client_addr"].as_str().unwrap().to_string(),
            metrics: d["metrics_addr"].as_str().unwrap_or_default().to_string(),
            pid: d["pid"].as_u64().unwrap(),
            dir: PathBuf::from(d["data_dir"].as_str().unwrap()),
        })
        .collect()
}

/// The core's configuration a device runs with (its `server.toml`): the lookup
/// service's intervals (`[lookup]`) and the timing constants.
pub fn device_config(dev: &Dev) -> tenure_core::DeviceConfig {
    tenure_server::config::ServerConfig::load(&dev.dir.join("server.toml"))
        .expect("the device's configuration")
        .device_config()
}

/// Every device's client address.
pub fn endpoints(data: &Path) -> Vec<String> {
    devices(data).into_iter().map(|d| d.client).collect()
}

/// A client of the cluster under `data` that talks to `endpoints` only.
pub fn client_of(rt: &tokio::runtime::Runtime, data: &Path, endpoints: Vec<String>) -> Client {
    let _in_rt = rt.enter();
    Client::with_options(endpoints, with_tls(data, Default::default())).unwrap()
}

/// Wait (bounded) until every device at `endpoints` answers NodeStatus, exactly one of
/// them leads, and all of them name it as their leader; its device id and every view.
pub fn wait_lookup_among(
    rt: &tokio::runtime::Runtime,
    data: &Path,
    endpoints: &[String],
) -> (u64, Vec<tenure_client::proto::NodeStatusResponse>) {
    let client = client_of(rt, data, endpoints.to_vec());
    let started = Instant::now();
    loop {
        let views: Vec<_> = rt
            .block_on(client.node_status_all())
            .into_iter()
            .filter_map(|(_, r)| r.ok())
            .collect();
        let leaders: Vec<u64> = views
            .iter()
            .filter(|v| v.state == "Leader")
            .map(|v| v.device)
            .collect();
        if views.len() == endpoints.len()
            && leaders.len() == 1
            && views.iter().all(|v| v.leader == Some(leaders[0]))
        {
            eprintln!(
                "lookup leader d{} agreed by {} devices {:?} after the wait began",
                leaders[0],
                views.len(),
                started.elapsed()
            );
            return (leaders[0], views);
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no agreed lookup leader: {views:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Wait (bounded) until every device of the cluster agrees on one lookup leader.
pub fn wait_lookup(rt: &tokio::runtime::Runtime, data: &Path) -> u64 {
    wait_lookup_among(rt, data, &endpoints(data)).0
}

/// A child process killed (by its pid) when the test ends, passed or not.
pub struct Proc(pub Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The lines a child prints, read on a thread.
pub fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// The next JSON line that satisfies `pred` (bounded); lines before it are printed.
pub fn expect_line(
    rx: &mpsc::Receiver<String>,
    limit: Duration,
    what: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let started = Instant::now();
    loop {
        let left = limit.saturating_sub(started.elapsed());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("{what}: no such line within {limit:?}"));
        let v: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("watch --json printed {line:?}: {e}"));
        if pred(&v) {
            return v;
        }
        eprintln!("(watch: {line})");
    }
}

/// A runtime for the Rust client.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}
