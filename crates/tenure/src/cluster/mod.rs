//! `tenure cluster up|down|status|add|remove`: a local cluster of `tenure server` processes on
//! 127.0.0.1, each with its own data directory and generated configuration under the
//! cluster's data directory (default `./tenure-data`):
//!
//! ```text
//! tenure-data/cluster.json      pids and addresses of the running devices
//! tenure-data/d1/server.toml    device 1's configuration (reused on the next `up`)
//! tenure-data/d1/server.log     device 1's log
//! tenure-data/d1/tenure.redb    device 1's durable state
//! tenure-data/tls/ca.pem        the cluster's CA certificate (clients trust it)
//! tenure-data/tls/ca.key        the CA's key (issues `cluster add`'s certificates)
//! tenure-data/d1/tls/device.pem device 1's certificate (and device.key, its key)
//! tenure-data/admin.token       the admin token's secret (`--auth` only; mode 0600)
//! ```
//!
//! A new cluster is TLS by default: clients use TLS on the client port, devices mutual
//! TLS between them; `--insecure` makes a plaintext one. `--auth` turns authorization
//! on (`[auth]` in every device's configuration, see `tenure_server::auth`) with one
//! token, `admin`, allowed everything: its secret is written to `admin.token`, readable
//! by its owner only. The `cluster` commands present it themselves; other commands are
//! given it with `--auth-token` or `TENURE_TOKEN`.
//!
//! `up` returns when every device it started serves and every store has a manager, or
//! fails (non-zero exit) when that takes longer than `--wait-secs`. A device serves when
//! it answers a Status request and every chunk it reports is back in a regular lease
//! (seed 000 §4.2.1; a restarted device's chunks start newly awake, §4.2.5) or is being
//! deleted because the layout dropped it while the device was down (§4.2.4). A device
//! started beside running ones (killed, crashed) has then rejoined: without this wait,
//! the survivors still managing every store would let `up` return before the restarted
//! device listens.
//!
//! This file holds the arguments, `down` and small helpers; [`file`] `cluster.json` and
//! where a cluster keeps its files, [`configs`] the devices' generated configurations,
//! `up` starting devices and waiting until they serve, [`status`] the Status answers
//! and `cluster status`, `members` `cluster add` and `cluster remove`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

pub mod configs;
pub mod file;
mod members;
pub(crate) use members::describe as describe_members;
pub mod status;
pub(crate) mod up;

use file::ClusterFile;

/// Arguments of `tenure cluster`.
#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    #[command(subcommand)]
    cmd: ClusterCmd,
}

#[derive(clap::Subcommand, Debug)]
enum ClusterCmd {
    /// Start a local cluster, restart the one whose data is in --data, or start the devices
    /// of it that are not running.
    Up(UpArgs),
    /// Stop the local cluster.
    Down(CommonArgs),
    /// Show every store's manager and epoch.
    Status(CommonArgs),
    /// Start a new device and join it to the running cluster (stores relayout onto it).
    Add(members::AddArgs),
    /// Drain a device (its chunks move, its managers migrate), then retire it.
    Remove(members::RemoveArgs),
}

#[derive(clap::Args, Debug)]
struct CommonArgs {
    /// The cluster's data directory.
    #[arg(long, default_value = "tenure-data")]
    data: PathBuf,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct UpArgs {
    /// Number of devices (ignored when restarting an existing cluster).
    #[arg(long, default_value_t = 3)]
    devices: u64,
    /// Number of stores (new clusters only).
    #[arg(long, default_value_t = 64)]
    stores: u32,
    /// Chunks per store (new clusters only).
    #[arg(long, default_value_t = 3)]
    replication: usize,
    /// How many snapshots each device keeps its part of; older ones are removed as new
    /// ones are written (0: all). New clusters only: it is `[snapshot] keep` in each
    /// device's dN/server.toml, where it can be changed for the next start.
    #[arg(long, default_value_t = tenure_server::config::DEFAULT_SNAPSHOT_KEEP)]
    snapshot_keep: usize,
    /// First port: device i uses base+i (peer), base+100+i (client), base+200+i (metrics).
    /// 0 picks free ports (below the kernel's ephemeral range, so a restarted device gets its
    /// ports back).
    #[arg(long, default_value_t = 0)]
    base_port: u16,
    /// A plaintext cluster: no CA, no certificates, no TLS on either port (new clusters
    /// only; a cluster is TLS by default).
    #[arg(long)]
    insecure: bool,
    /// Authorization on (new clusters only): every call needs a token. An admin token is
    /// generated and its secret written to admin.token in the data directory (mode
    /// 0600); give it to commands with `--auth-token` or TENURE_TOKEN, and add tokens with
    /// narrower rules to each dN/server.toml's [auth] section (`tenure token new`).
    #[arg(long)]
    auth: bool,
    /// How long to wait for every started device to serve (answer Status, its chunks back
    /// in a regular lease) and every store to have a manager; past it, `up` fails.
    #[arg(long, default_value_t = 60)]
    wait_secs: u64,
    #[command(flatten)]
    common: CommonArgs,
}

/// Run `tenure cluster ...`.
pub fn run(args: ClusterArgs) -> anyhow::Result<()> {
    match args.cmd {
        ClusterCmd::Up(a) => up::up(a),
        ClusterCmd::Down(a) => down(a),
        ClusterCmd::Status(a) => status::status(a),
        ClusterCmd::Add(a) => members::add(a),
        ClusterCmd::Remove(a) => members::remove(a),
    }
}

/// The fields of a `/proc/<pid>/stat` line after the command name, which may hold spaces
/// and parentheses: the state is the first.
pub fn stat_fields(stat: &str) -> Option<std::str::SplitWhitespace<'_>> {
    Some(stat.rsplit_once(')')?.1.split_whitespace())
}

fn pid_alive(pid: u32) -> bool {
    // A zombie has no cmdline; a live process has a /proc entry with a state other than Z.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| stat_fields(&s)?.next().map(|state| state != "Z"))
        .unwrap_or(false)
}

/// A current-thread runtime for one command's client calls.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

fn down(a: CommonArgs) -> anyhow::Result<()> {
    let file = ClusterFile::load(&a.data)?;
    let signal = |sig: &str, pid: u32| {
        let _ = std::process::Command::new("kill")
            .arg(sig)
            .arg(pid.to_string())
            .status();
    };
    for d in &file.devices {
        if pid_alive(d.pid) {
            signal("-TERM", d.pid);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && file.devices.iter().any(|d| pid_alive(d.pid)) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut killed = Vec::new();
    for d in &file.devices {
        if pid_alive(d.pid) {
            signal("-KILL", d.pid);
            killed.push(d.id);
        }
    }
    std::fs::remove_file(a.data.join("cluster.json"))?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({"stopped": file.devices.iter().map(|d| d.id).collect::<Vec<_>>(), "killed": killed})
        );
    } else {
        println!(
            "stopped {} devices{}; data kept in {}",
            file.devices.len(),
            if killed.is_empty() {
                String::new()
            } else {
                format!(" ({killed:?} needed SIGKILL)")
            },
            a.data.display()
        );
    }
    Ok(())
}
