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

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tenure_client::proto::StatusResponse;
use tenure_client::tls::ClientTls;
use tenure_client::{Client, ClientOptions};
use tenure_server::certs::Authority;
use tenure_server::config::{ClusterShape, PeerConfig, ServerConfig, TimingOverrides};
use tenure_server::tls::TlsFiles;

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
    Add(crate::cluster_members::AddArgs),
    /// Drain a device (its chunks move, its managers migrate), then retire it.
    Remove(crate::cluster_members::RemoveArgs),
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

/// What `cluster.json` records about one device.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeviceEntry {
    /// Device id.
    pub id: u64,
    /// Process id.
    pub pid: u32,
    /// Peer address.
    pub peer_addr: SocketAddr,
    /// gRPC address.
    pub client_addr: SocketAddr,
    /// Metrics address.
    pub metrics_addr: Option<SocketAddr>,
    /// Data directory.
    pub data_dir: PathBuf,
    /// Log file.
    pub log: PathBuf,
}

/// `cluster.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClusterFile {
    /// Number of stores.
    pub stores: u32,
    /// Devices.
    pub devices: Vec<DeviceEntry>,
    /// The CA certificate clients trust (none: a plaintext cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<PathBuf>,
    /// The file holding the admin token's secret (none: authorization is off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<PathBuf>,
}

impl ClusterFile {
    /// Read `<data>/cluster.json`.
    pub fn load(data: &Path) -> anyhow::Result<ClusterFile> {
        let p = data.join("cluster.json");
        let text = std::fs::read_to_string(&p)
            .with_context(|| format!("no cluster at {} (run `tenure cluster up`)", p.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", p.display()))
    }

    /// Client endpoints of every device.
    pub fn endpoints(&self) -> Vec<String> {
        self.devices
            .iter()
            .map(|d| d.client_addr.to_string())
            .collect()
    }

    /// The TLS settings a client of this cluster uses: its CA (none when plaintext).
    pub fn tls(&self) -> anyhow::Result<Option<ClientTls>> {
        self.ca
            .as_ref()
            .map(|ca| ClientTls::from_files(ca, None).context("loading the local cluster's CA"))
            .transpose()
    }

    /// The admin token of a cluster with authorization on.
    pub fn token(&self) -> anyhow::Result<Option<String>> {
        self.token
            .as_ref()
            .map(|p| {
                std::fs::read_to_string(p)
                    .map(|s| s.trim().to_string())
                    .with_context(|| format!("reading the cluster's admin token {}", p.display()))
            })
            .transpose()
    }

    /// `opts` with this cluster's TLS settings and admin token.
    pub fn options(&self, opts: ClientOptions) -> anyhow::Result<ClientOptions> {
        Ok(ClientOptions {
            tls: self.tls()?,
            token: self.token()?.or(opts.token),
            ..opts
        })
    }

    /// A client of every device, with `opts` and this cluster's TLS settings.
    pub fn client(&self, opts: ClientOptions) -> anyhow::Result<Client> {
        Ok(Client::with_options(self.endpoints(), self.options(opts)?)?)
    }
}

/// Where a local cluster's CA lives under its data directory.
pub fn ca_dir(data: &Path) -> PathBuf {
    data.join("tls")
}

/// Make a new CA under `data` and give each configuration TLS: a certificate for its
/// device (SAN localhost, 127.0.0.1 and its addresses) under its data directory.
pub(crate) fn secure(cfgs: &mut [ServerConfig], data: &Path) -> anyhow::Result<()> {
    let ca = Authority::create(&ca_dir(&std::path::absolute(data)?))
        .context("making the cluster's CA")?;
    for c in cfgs {
        c.tls = Some(issue(&ca, c)?);
    }
    Ok(())
}

/// Issue `cfg`'s device a certificate of `ca` in its data directory.
pub(crate) fn issue(ca: &Authority, cfg: &ServerConfig) -> anyhow::Result<TlsFiles> {
    ca.issue_config(cfg)
        .with_context(|| format!("issuing device {}'s certificate", cfg.id))
}

/// Run `tenure cluster ...`.
pub fn run(args: ClusterArgs) -> anyhow::Result<()> {
    match args.cmd {
        ClusterCmd::Up(a) => up(a),
        ClusterCmd::Down(a) => down(a),
        ClusterCmd::Status(a) => status(a),
        ClusterCmd::Add(a) => crate::cluster_members::add(a),
        ClusterCmd::Remove(a) => crate::cluster_members::remove(a),
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

fn new_configs(a: &UpArgs, data: &Path) -> anyhow::Result<Vec<ServerConfig>> {
    let ids: Vec<u64> = (1..=a.devices).collect();
    let mut cfgs = local_configs(&ids, a.stores, a.replication, a.base_port, data)?;
    for c in &mut cfgs {
        c.snapshot.keep = a.snapshot_keep;
    }
    if !a.insecure {
        secure(&mut cfgs, data)?;
    }
    if a.auth {
        let auth = admin_token(data)?;
        for c in &mut cfgs {
            c.auth = auth.clone();
        }
    }
    Ok(cfgs)
}

/// Where a local cluster keeps its admin token's secret.
pub fn token_path(data: &Path) -> PathBuf {
    data.join("admin.token")
}

/// A new admin token: its secret written to [`token_path`] (mode 0600, never
/// overwritten), and the `[auth]` section that knows it.
fn admin_token(data: &Path) -> anyhow::Result<tenure_server::auth::AuthConfig> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    use tenure_server::auth::{AuthConfig, Perm, Rule, TokenConfig, hash_secret, new_secret};
    let secret = new_secret()?;
    let path = token_path(data);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    writeln!(f, "{secret}").with_context(|| format!("writing {}", path.display()))?;
    Ok(AuthConfig {
        enabled: true,
        tokens: vec![TokenConfig {
            name: "admin".into(),
            sha256: hash_secret(&secret),
            rules: vec![Rule {
                prefix: "/".into(),
                perms: vec![Perm::Admin],
            }],
        }],
        certs: Vec::new(),
    })
}

/// The configurations of a new local cluster of devices 1..=`devices` whose data lives
/// under `data` (`dN/`), on ports from `base_port` (0: free ports).
pub(crate) fn local_configs(
    ids: &[u64],
    stores: u32,
    replication: usize,
    base_port: u16,
    data: &Path,
) -> anyhow::Result<Vec<ServerConfig>> {
    if ids.is_empty() {
        bail!("--devices must be at least 1");
    }
    let port = |offset: u64, id: u64| -> anyhow::Result<u16> {
        if base_port == 0 {
            Ok(tenure_server::config::free_local_port()?)
        } else {
            u16::try_from(base_port as u64 + offset + id).context("port out of range")
        }
    };
    let mut peers = Vec::new();
    let mut metrics = Vec::new();
    for &id in ids {
        let m = SocketAddr::from(([127, 0, 0, 1], port(200, id)?));
        peers.push(PeerConfig {
            id,
            peer_addr: SocketAddr::from(([127, 0, 0, 1], port(0, id)?)),
            client_addr: SocketAddr::from(([127, 0, 0, 1], port(100, id)?)),
            metrics_addr: Some(m),
        });
        metrics.push(m);
    }
    let data = std::path::absolute(data)?;
    // The devices share this machine's cores.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = (cores / ids.len()).max(1);
    Ok(peers
        .iter()
        .zip(metrics)
        .map(|(p, m)| ServerConfig {
            id: p.id,
            data_dir: data.join(format!("d{}", p.id)),
            peer_listen: p.peer_addr,
            client_listen: p.client_addr,
            metrics_listen: Some(m),
            cluster: ClusterShape {
                stores,
                replication,
            },
            peers: peers.clone(),
            timing: TimingOverrides::default(),
            run_policies: true,
            join: false,
            rng_seed: None,
            request_timeout_ms: 5000,
            max_client_requests: tenure_server::admission::DEFAULT_MAX_CLIENT_REQUESTS,
            max_frame_bytes: tenure_server::wire::MAX_FRAME_BYTES,
            worker_threads: Some(workers),
            lookup: Default::default(),
            objects: Default::default(),
            election: Default::default(),
            snapshot: Default::default(),
            tls: None,
            auth: Default::default(),
            metrics: Default::default(),
        })
        .collect())
}

fn existing_configs(data: &Path) -> anyhow::Result<Option<Vec<ServerConfig>>> {
    let mut cfgs = Vec::new();
    // A device removed from the cluster keeps its directory, its configuration renamed
    // (`cluster remove`): it is not started again.
    for id in crate::cluster_members::device_dirs(data)? {
        let p = data.join(format!("d{id}")).join("server.toml");
        if p.exists() {
            cfgs.push(ServerConfig::load(&p)?);
        }
    }
    Ok((!cfgs.is_empty()).then_some(cfgs))
}

fn up(a: UpArgs) -> anyhow::Result<()> {
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

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// What a device's Status answer says about it, or why there is none.
pub(crate) type Statuses = BTreeMap<u64, Result<StatusResponse, String>>;

/// Every device's Status answer, or the error that stood for it.
pub(crate) async fn statuses(client: &Client, file: &ClusterFile) -> Statuses {
    let mut out = BTreeMap::new();
    for d in &file.devices {
        let s = client.status_of(&d.client_addr.to_string()).await;
        out.insert(d.id, s.map_err(|e| e.to_string()));
    }
    out
}

/// store → (device, epoch) for every store some device reports managing.
pub(crate) fn managers(statuses: &Statuses) -> BTreeMap<u32, (u64, u64)> {
    let mut out = BTreeMap::new();
    for s in statuses.values().flatten() {
        for m in s.managers.iter().filter(|m| m.is_manager()) {
            let e = out.entry(m.store).or_insert((s.device, m.epoch));
            if m.epoch > e.1 {
                *e = (s.device, m.epoch);
            }
        }
    }
    out
}

/// A device that serves: it answered Status with every chunk it holds in a regular lease
/// (or being deleted).
#[derive(Clone, Debug, Serialize)]
struct Serving {
    device: u64,
    /// Chunks in a regular lease.
    chunks: usize,
    /// Stores those chunks belong to.
    stores: usize,
    /// Stores it manages.
    manages: usize,
}

/// Whether the device behind `status` serves, or what it still waits for.
fn serving(status: &Result<StatusResponse, String>) -> Result<Serving, String> {
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

/// The coordinator as a cluster's devices report it (DESIGN §6): JSON, and one line for
/// people. The coordinator is the one named with the highest term; the devices that name
/// another (or none) are listed, as is whether the named device acts as coordinator.
pub(crate) fn coordinator_summary(answers: &[&StatusResponse]) -> (serde_json::Value, String) {
    let views: Vec<serde_json::Value> = answers
        .iter()
        .map(|s| {
            serde_json::json!({"device": s.device, "coordinator": s.coordinator,
                "term": s.coordinator_term, "acting": s.acting_coordinator})
        })
        .collect();
    let best = answers
        .iter()
        .filter_map(|s| Some((s.coordinator_term, s.coordinator?)))
        .max();
    let Some((term, leader)) = best else {
        let line = format!(
            "coordinator: none known ({} devices answered; an election may be running)",
            answers.len()
        );
        return (serde_json::json!({"device": null, "views": views}), line);
    };
    let agree: Vec<u64> = answers
        .iter()
        .filter(|s| s.coordinator == Some(leader) && s.coordinator_term == term)
        .map(|s| s.device)
        .collect();
    let others: Vec<String> = answers
        .iter()
        .filter(|s| !agree.contains(&s.device))
        .map(|s| match s.coordinator {
            Some(c) => format!("d{} follows d{c} (term {})", s.device, s.coordinator_term),
            None => format!("d{} knows none", s.device),
        })
        .collect();
    let acting = answers
        .iter()
        .any(|s| s.device == leader && s.acting_coordinator);
    let mut line = format!(
        "coordinator: d{leader} (term {term}){}, followed by {} of {} devices answering",
        if acting { ", acting" } else { "" },
        agree.len(),
        answers.len()
    );
    if !others.is_empty() {
        line.push_str(&format!(" ({})", others.join("; ")));
    }
    let json = serde_json::json!({"device": leader, "term": term, "acting": acting,
        "followed_by": agree, "views": views});
    (json, line)
}

fn status(a: CommonArgs) -> anyhow::Result<()> {
    let file = ClusterFile::load(&a.data)?;
    let rt = runtime()?;
    rt.block_on(async {
        let client = file.client(ClientOptions::default())?;
        let mut devices = Vec::new();
        let mut stores: BTreeMap<u32, Vec<serde_json::Value>> = BTreeMap::new();
        let mut answers = Vec::new();
        for d in &file.devices {
            match client.status_of(&d.client_addr.to_string()).await {
                Ok(s) => {
                    answers.push(s.clone());
                    for m in &s.managers {
                        stores.entry(m.store).or_default().push(serde_json::json!({
                            "device": s.device, "state": m.state, "epoch": m.epoch,
                            "chunks": m.chunks.iter().map(|c| format!("c{}.{}", c.device, c.serial)).collect::<Vec<_>>(),
                            "failed": m.failed.iter().map(|c| format!("c{}.{}", c.device, c.serial)).collect::<Vec<_>>(),
                        }));
                    }
                    devices.push(serde_json::json!({
                        "id": d.id, "pid": d.pid, "up": true, "client": d.client_addr,
                        "chunks": s.chunks.len(),
                        "managing": s.managers.iter().filter(|m| m.is_manager()).count(),
                    }));
                }
                Err(e) => devices.push(serde_json::json!({
                    "id": d.id, "pid": d.pid, "up": false, "client": d.client_addr, "error": e.to_string(),
                })),
            }
        }
        let membership = crate::cluster_members::annotate(&client, &mut devices).await;
        let (coordinator, coordinator_line) =
            coordinator_summary(&answers.iter().collect::<Vec<_>>());
        if a.json {
            let stores: Vec<_> = (0..file.stores)
                .map(|s| serde_json::json!({"store": s, "managers": stores.get(&s).cloned().unwrap_or_default()}))
                .collect();
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({"devices": devices,
                    "coordinator": coordinator, "stores": stores}))?
            );
            return anyhow::Ok(());
        }
        println!("{membership}");
        println!("devices:");
        for d in &devices {
            if d["up"] == true {
                println!(
                    "  d{} pid {} at {}: up, {} chunks, manages {} stores",
                    d["id"], d["pid"], d["client"].as_str().unwrap_or(""), d["chunks"], d["managing"]
                );
            } else {
                println!(
                    "  d{} pid {} at {}: DOWN ({})",
                    d["id"], d["pid"], d["client"].as_str().unwrap_or(""), d["error"].as_str().unwrap_or("")
                );
            }
        }
        println!("{coordinator_line}");
        println!("stores:");
        let mut unmanaged = 0;
        for s in 0..file.stores {
            let roles = stores.get(&s).cloned().unwrap_or_default();
            let managers: Vec<_> = roles.iter().filter(|r| r["state"] == "Manager").collect();
            match managers.as_slice() {
                [m] => println!(
                    "  s{s:<4} manager d{} epoch {:<4} chunks {}{}",
                    m["device"],
                    m["epoch"],
                    m["chunks"].as_array().map(|c| c.iter().map(|x| x.as_str().unwrap_or("")).collect::<Vec<_>>().join(",")).unwrap_or_default(),
                    match m["failed"].as_array() {
                        Some(f) if !f.is_empty() => format!(" (failed: {})", f.iter().map(|x| x.as_str().unwrap_or("")).collect::<Vec<_>>().join(",")),
                        _ => String::new(),
                    }
                ),
                [] => {
                    unmanaged += 1;
                    let other: Vec<String> = roles.iter().map(|r| format!("d{} {}", r["device"], r["state"].as_str().unwrap_or(""))).collect();
                    println!("  s{s:<4} NO MANAGER {}", other.join(", "));
                }
                many => println!(
                    "  s{s:<4} {} devices claim it: {}",
                    many.len(),
                    many.iter().map(|m| format!("d{} e{}", m["device"], m["epoch"])).collect::<Vec<_>>().join(", ")
                ),
            }
        }
        println!(
            "{} of {} stores have a manager",
            file.stores - unmanaged,
            file.stores
        );
        anyhow::Ok(())
    })
}
