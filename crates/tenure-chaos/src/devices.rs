//! The devices: one `tenure server` process per test host, started with
//! `ip netns exec HOST tenure server --config dN/server.toml` (`ip netns exec` execs the
//! server, so the child's pid is the server's and signals reach it directly). The
//! configurations are those of `tenure cluster up` (`local_configs`), with the hosts'
//! addresses and fixed ports instead of 127.0.0.1 and free ones. Device `N`'s
//! configuration and log are in `dN/` of the run's directory, its data in `dN/data`
//! (where [`crate::disk`] mounts its disk), and its process joins the cgroup its disk is
//! stalled through. With clock faults, every device runs under the clock shim of
//! [`crate::clock`] with its control file `dN/faketime` (true time until a fault).

use crate::clock::Clocks;
use crate::net::{CLIENT_PORT, PEER_PORT, TestNet};
use anyhow::{Context, bail};
use rustix::process::{Pid, Signal, kill_process};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tenure_client::tls::ClientTls;
use tenure_client::{Client, ClientOptions};
use tenure_server::config::{ClusterShape, PeerConfig, ServerConfig, TimingOverrides};

/// Where the run's clients connect: the devices' client endpoints, and the cluster's CA
/// when the devices serve TLS.
#[derive(Clone)]
pub struct Target {
    /// Client endpoints, device 1 first.
    pub endpoints: Vec<String>,
    /// The TLS settings of every client (none: plaintext).
    pub tls: Option<ClientTls>,
}

impl Target {
    /// A client of every device with `opts` and the run's TLS settings.
    pub fn client(&self, opts: ClientOptions) -> Result<Client, tenure_client::Error> {
        let opts = ClientOptions {
            tls: self.tls.clone(),
            ..opts
        };
        Client::with_options(self.endpoints.clone(), opts)
    }
}

/// Make the run's CA under `data/tls` and give every device a certificate of it, as
/// `tenure cluster up` does: client ports serve TLS and peers authenticate each other
/// with it (mutual TLS). Returns what the clients trust.
pub fn secure(cfgs: &mut [ServerConfig], data: &Path) -> anyhow::Result<ClientTls> {
    let ca = tenure_server::certs::Authority::create(&data.join("tls"))
        .context("making the run's CA")?;
    for c in cfgs.iter_mut() {
        let files = (ca.issue_config(c))
            .with_context(|| format!("issuing device {}'s certificate", c.id))?;
        c.tls = Some(files);
    }
    ClientTls::from_files(&ca.cert_path, None).context("loading the run's CA")
}

/// The devices of a run and their processes.
pub struct Devices {
    bin: PathBuf,
    cfgs: Vec<(String, PathBuf, PathBuf)>,
    /// Per device, its configuration and how often it was started.
    servers: Vec<(ServerConfig, u64)>,
    procs: Vec<Option<Child>>,
    /// Per device, the `cgroup.procs` file its process is written to after each start.
    cgroups: Vec<Option<PathBuf>>,
    /// The devices' clocks, when clock faults are on.
    clocks: Option<Clocks>,
    target: Target,
    stores: u32,
}

/// Server configurations for the hosts of `net` (stores, replication, data under `data`).
/// With `proxied`, each device reaches every other device through its host's proxy
/// towards it ([`crate::proxy`]): the peer's address in its configuration is the proxy's.
pub fn configs(
    net: &TestNet,
    stores: u32,
    replication: usize,
    data: &Path,
    seed: u64,
    proxied: bool,
) -> Vec<ServerConfig> {
    let peers: Vec<PeerConfig> = net
        .hosts
        .iter()
        .map(|h| PeerConfig {
            id: h.id,
            peer_addr: SocketAddr::from((h.addr, PEER_PORT)),
            client_addr: SocketAddr::from((h.addr, CLIENT_PORT)),
            metrics_addr: None,
        })
        .collect();
    // The devices share this machine's cores.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = (cores / net.hosts.len()).max(1);
    peers
        .iter()
        .map(|p| ServerConfig {
            id: p.id,
            data_dir: data.join(format!("d{}", p.id)).join("data"),
            peer_listen: p.peer_addr,
            client_listen: p.client_addr,
            metrics_listen: None,
            cluster: ClusterShape {
                stores,
                replication,
            },
            peers: peers
                .iter()
                .map(|q| PeerConfig {
                    peer_addr: if proxied && q.id != p.id {
                        crate::proxy::peer_addr(q.id)
                    } else {
                        q.peer_addr
                    },
                    ..q.clone()
                })
                .collect(),
            timing: TimingOverrides::default(),
            run_policies: true,
            join: false,
            rng_seed: Some(tenure_core::rng::mix64(seed ^ p.id)),
            request_timeout_ms: 5000,
            max_client_requests: tenure_server::admission::DEFAULT_MAX_CLIENT_REQUESTS,
            stream_admission_wait_ms: tenure_server::admission::STREAM_ADMISSION_WAIT.as_millis()
                as u64,
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
        .collect()
}

impl Devices {
    /// Write the configurations and start every device; device `id`'s process joins the
    /// cgroup whose `cgroup.procs` is `cgroups(id)`, if any. With `faketime` (the clock
    /// shim, [`crate::clock`]), every device runs under it, reading true time until a
    /// clock fault.
    pub fn start(
        bin: &Path,
        net: &TestNet,
        cfgs: &[ServerConfig],
        tls: Option<ClientTls>,
        cgroups: impl Fn(u64) -> Option<PathBuf>,
        faketime: Option<PathBuf>,
    ) -> anyhow::Result<Devices> {
        let mut d = Devices {
            bin: bin.to_path_buf(),
            cfgs: Vec::new(),
            servers: Vec::new(),
            procs: Vec::new(),
            cgroups: Vec::new(),
            clocks: None,
            target: Target {
                endpoints: Vec::new(),
                tls,
            },
            stores: cfgs.first().map_or(0, |c| c.cluster.stores),
        };
        for (c, h) in cfgs.iter().zip(&net.hosts) {
            std::fs::create_dir_all(&c.data_dir)?;
            let dir = c.data_dir.parent().unwrap_or(&c.data_dir);
            let path = dir.join("server.toml");
            d.cfgs.push((h.ns.clone(), path, dir.join("server.log")));
            d.servers.push((c.clone(), 0));
            d.procs.push(None);
            d.cgroups.push(cgroups(h.id));
            d.target.endpoints.push(net.client_endpoint(h.id));
        }
        if let Some(lib) = faketime {
            let dirs: Vec<PathBuf> = (d.cfgs.iter())
                .map(|(_, cfg, _)| cfg.parent().unwrap_or(Path::new(".")).to_path_buf())
                .collect();
            d.clocks = Some(Clocks::new(lib, &dirs)?);
        }
        for id in 1..=cfgs.len() as u64 {
            d.spawn(id)?;
        }
        Ok(d)
    }

    /// Where clients connect.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Number of devices.
    pub fn len(&self) -> usize {
        self.procs.len()
    }

    /// Whether there are no devices.
    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }

    /// Log file of device `id`.
    pub fn log(&self, id: u64) -> &Path {
        &self.cfgs[(id - 1) as usize].2
    }

    /// Start device `id` (its process must not be running). Each start seeds the core's
    /// PRNG anew, from the configured seed and the start's number, as a device of a real
    /// deployment does from its boot time: a seed that came back at every restart would
    /// replay the PRNG's draws (upload ids among them).
    pub fn spawn(&mut self, id: u64) -> anyhow::Result<()> {
        let (server, boots) = &mut self.servers[(id - 1) as usize];
        let mut c = server.clone();
        c.rng_seed = c
            .rng_seed
            .map(|s| tenure_core::rng::mix64(s ^ (*boots << 48)));
        *boots += 1;
        let (ns, cfg, log) = &self.cfgs[(id - 1) as usize];
        std::fs::write(cfg, c.to_toml())?;
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let mut cmd = Command::new("ip");
        // `ip` runs under the shim too, harmlessly, and passes its environment on.
        if let Some(c) = &self.clocks {
            crate::clock::apply(&mut cmd, &c.env(id));
        }
        let child = cmd
            .args(["netns", "exec", ns])
            .arg(&self.bin)
            .arg("server")
            .arg("--config")
            .arg(cfg)
            // The run's own RUST_LOG is for the clients.
            .env(
                "RUST_LOG",
                std::env::var("TENURE_CHAOS_SERVER_LOG").unwrap_or("info".into()),
            )
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting device {id}"))?;
        let pid = child.id();
        self.procs[(id - 1) as usize] = Some(child);
        // `ip netns exec` execs the server: this pid is the server's.
        if let Some(procs) = &self.cgroups[(id - 1) as usize] {
            std::fs::write(procs, pid.to_string())
                .with_context(|| format!("putting device {id} into {}", procs.display()))?;
        }
        Ok(())
    }

    fn signal(&self, id: u64, sig: Signal) -> anyhow::Result<()> {
        let child = self.procs[(id - 1) as usize]
            .as_ref()
            .with_context(|| format!("device {id} is not running"))?;
        let pid = Pid::from_raw(child.id() as i32).context("pid")?;
        kill_process(pid, sig).with_context(|| format!("signal to device {id}"))?;
        Ok(())
    }

    /// kill -9 device `id` and reap it.
    pub fn kill(&mut self, id: u64) -> anyhow::Result<()> {
        // A stopped process dies of SIGKILL too.
        self.signal(id, Signal::KILL)?;
        if let Some(mut c) = self.procs[(id - 1) as usize].take() {
            c.wait()?;
            if self.clocks.is_some() {
                crate::clock::forget(c.id());
            }
        }
        Ok(())
    }

    /// Whether the devices run under the clock shim (clock faults are possible).
    pub fn has_clocks(&self) -> bool {
        self.clocks.is_some()
    }

    /// Step device `id`'s wall clock to `offset_s` seconds from true time (0: back to
    /// true time); its monotonic clocks do not move. In effect within
    /// [`crate::clock::until_read`].
    pub fn step_clock(&mut self, id: u64, offset_s: i64) -> anyhow::Result<()> {
        match &mut self.clocks {
            Some(c) => c.step(id, offset_s),
            None => bail!("no clock shim"),
        }
    }

    /// kill -9 device `id` and start it again with every clock of its process running at
    /// `1 + ppm/10⁶` of true rate (0: true rate) — a rate cannot change in a running
    /// process without jumping its clocks ([`crate::clock`]).
    pub fn restart_drifting(&mut self, id: u64, ppm: i64) -> anyhow::Result<()> {
        if self.clocks.is_none() {
            bail!("no clock shim");
        }
        self.kill(id)?;
        if let Some(c) = &mut self.clocks {
            c.set_drift(id, ppm)?;
        }
        self.spawn(id)
    }

    /// Every device's wall clock back to true time, and every later start at true rate.
    pub fn reset_clocks(&mut self) {
        if let Some(c) = &mut self.clocks {
            c.reset();
        }
    }

    /// SIGSTOP device `id`.
    pub fn pause(&self, id: u64) -> anyhow::Result<()> {
        self.signal(id, Signal::STOP)
    }

    /// SIGCONT device `id`.
    pub fn resume(&self, id: u64) -> anyhow::Result<()> {
        self.signal(id, Signal::CONT)
    }

    /// Whether device `id`'s process runs (not killed by the nemesis, not exited).
    pub fn running(&mut self, id: u64) -> bool {
        match self.procs[(id - 1) as usize].as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Devices whose process exited on its own (not killed by the nemesis).
    pub fn exited(&mut self) -> Vec<(u64, String)> {
        let mut out = Vec::new();
        for (i, p) in self.procs.iter_mut().enumerate() {
            if let Some(c) = p
                && let Ok(Some(st)) = c.try_wait()
            {
                out.push((i as u64 + 1, st.to_string()));
            }
        }
        out
    }

    /// Wait until every device answers Status with every chunk in a regular lease and
    /// every store has a manager (what `tenure cluster up` waits for), at most `limit`.
    pub async fn wait_ready(&mut self, limit: Duration) -> anyhow::Result<Duration> {
        let opts = ClientOptions {
            request_timeout: Duration::from_secs(1),
            ..Default::default()
        };
        let client = self.target.client(opts)?;
        let started = Instant::now();
        loop {
            let mut ready = true;
            let mut managed = BTreeSet::new();
            let mut why = String::new();
            for (e, r) in client.status_all().await {
                match r {
                    Ok(s) => {
                        let waiting = s
                            .chunks
                            .iter()
                            .filter(|c| !c.is_collected() && !c.is_serving())
                            .count();
                        if waiting > 0 {
                            ready = false;
                            why = format!("{e}: {waiting} chunks not in a regular lease");
                        }
                        managed.extend(
                            s.managers
                                .iter()
                                .filter(|m| m.is_manager())
                                .map(|m| m.store),
                        );
                    }
                    Err(err) => {
                        ready = false;
                        why = format!("{e}: {err}");
                    }
                }
            }
            if ready && managed.len() == self.stores as usize {
                return Ok(started.elapsed());
            }
            if let Some((id, st)) = self.exited().into_iter().next() {
                bail!("device {id} exited ({st}); see {}", self.log(id).display());
            }
            if started.elapsed() > limit {
                bail!(
                    "cluster not ready after {limit:?}: {why}; {}/{} stores managed",
                    managed.len(),
                    self.stores
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Devices {
    fn drop(&mut self) {
        for c in self.procs.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
            if self.clocks.is_some() {
                crate::clock::forget(c.id());
            }
        }
    }
}
