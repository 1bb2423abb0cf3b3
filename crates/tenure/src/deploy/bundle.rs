//! A bundle on the operator's machine:
//!
//! ```text
//! <out>/bundle.json            the cluster's shape, ports, paths and hosts (deploy add-host reads it)
//! <out>/ca/ca.pem, ca.key      the cluster's CA; the key stays here (owner only)
//! <out>/hosts/<name>/          copied to the host: server.toml, tls/{ca.pem,device.pem,device.key},
//!                              tenure.service, INSTALL.txt
//! <out>/client/                ca.pem; with authorization: admin.token and admin.env (the
//!                              admin token), prometheus.token (read, for scraping the
//!                              metrics), app.pem, app.key and app.env (a client
//!                              certificate that may lock and write); without: client.env
//! ```
//!
//! Keys, the token and the environment file holding it are written owner-only.

use super::hosts::{HostSpec, expand};
use super::unit;
use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tenure_core::ids::DeviceId;
use tenure_server::auth::{AuthConfig, CertConfig, Perm, Rule, TokenConfig};
use tenure_server::certs::Authority;
use tenure_server::config::{PeerConfig, ServerConfig};
use tenure_server::tls::TlsFiles;

/// The cluster's shape.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Stores.
    pub stores: u32,
    /// Chunks per store.
    pub replication: usize,
    /// Authorization on (an admin token and a client certificate).
    pub auth: bool,
}

/// Ports and on-host paths, the same for every host.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Paths {
    /// Client port.
    pub client_port: u16,
    /// Peer port.
    pub peer_port: u16,
    /// Metrics port.
    pub metrics_port: u16,
    /// Configuration directory (`{host}` expanded).
    pub config_dir: String,
    /// Data directory (`{host}` expanded).
    pub data_dir: String,
    /// The binary the unit runs.
    pub binary: String,
    /// The user the unit runs as.
    pub user: String,
}

/// One host of the bundle and its device.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HostEntry {
    /// Its device's id.
    pub id: u64,
    /// The host.
    pub host: HostSpec,
    /// Added to a running cluster (its device joins).
    pub join: bool,
    /// Retired from the cluster (`deploy retire`): no longer an endpoint or a peer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retired: bool,
}

impl HostEntry {
    /// Its configuration directory.
    pub fn config_dir(&self, p: &Paths) -> String {
        expand(&p.config_dir, &self.host.name)
    }

    /// Its data directory.
    pub fn data_dir(&self, p: &Paths) -> String {
        expand(&p.data_dir, &self.host.name)
    }

    /// Its device's addresses.
    pub fn peer(&self, p: &Paths) -> PeerConfig {
        PeerConfig {
            id: self.id,
            peer_addr: SocketAddr::new(self.host.addr, p.peer_port),
            client_addr: SocketAddr::new(self.host.addr, p.client_port),
            metrics_addr: Some(SocketAddr::new(self.host.addr, p.metrics_port)),
        }
    }

    /// Issue its device a certificate of `ca` naming the host and its address, into
    /// `cert` and `key`.
    fn issue(&self, ca: &Authority, cert: &Path, key: &Path) -> anyhow::Result<()> {
        let (names, addrs) = (self.host.dns_names(), [self.host.addr]);
        ca.issue_host_device(DeviceId(self.id), &names, &addrs, cert, key)
            .with_context(|| format!("issuing device {}'s certificate", self.id))
    }

    /// Its device's client endpoint.
    pub fn client_endpoint(&self, p: &Paths) -> String {
        SocketAddr::new(self.host.addr, p.client_port).to_string()
    }
}

/// `bundle.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Bundle {
    #[serde(skip)]
    dir: PathBuf,
    stores: u32,
    replication: usize,
    /// Every device's `[auth]` section (hashes only).
    auth: AuthConfig,
    paths: Paths,
    hosts: Vec<HostEntry>,
}

/// The client certificate's name (and identity in `[auth]`).
const APP_CERT: &str = "app";

/// Write `text` to `path` (owner-only when `secret`), refusing to replace a file.
fn write_new(path: &Path, text: &str, secret: bool) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", path.display()))
}

/// Write `text` to `path`, replacing it (owner-only when `secret`).
fn write_over(path: &Path, text: &str, secret: bool) -> anyhow::Result<()> {
    let tmp = path.with_extension("new");
    let _ = std::fs::remove_file(&tmp);
    write_new(&tmp, text, secret)?;
    std::fs::rename(&tmp, path).with_context(|| format!("replacing {}", path.display()))
}

fn mkdir(path: &Path, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
        .with_context(|| format!("creating {}", path.display()))
}

impl Bundle {
    /// Write a new cluster's bundle into `out`.
    pub fn create(
        out: &Path,
        hosts: &[HostSpec],
        shape: Shape,
        paths: Paths,
    ) -> anyhow::Result<Bundle> {
        if out.exists() && std::fs::read_dir(out)?.next().is_some() {
            bail!("{} exists and is not empty", out.display());
        }
        check_hosts(hosts)?;
        check_paths(&paths)?;
        if shape.replication == 0 || shape.replication > hosts.len() {
            bail!(
                "--replication {} needs at least that many hosts ({} given)",
                shape.replication,
                hosts.len()
            );
        }
        let dir = std::path::absolute(out)?;
        mkdir(&dir, 0o755)?;
        mkdir(&dir.join("ca"), 0o700)?;
        mkdir(&dir.join("client"), 0o700)?;
        let ca = Authority::create(&dir.join("ca")).context("making the cluster's CA")?;
        let auth = if shape.auth {
            admin_and_app(&dir, &ca)?
        } else {
            AuthConfig::default()
        };
        std::fs::copy(&ca.cert_path, dir.join("client/ca.pem"))?;
        let b = Bundle {
            dir,
            stores: shape.stores,
            replication: shape.replication,
            auth,
            paths,
            hosts: (hosts.iter().zip(1u64..))
                .map(|(h, id)| HostEntry {
                    id,
                    host: h.clone(),
                    join: false,
                    retired: false,
                })
                .collect(),
        };
        for h in &b.hosts {
            b.write_host(&ca, h)?;
        }
        b.write_env()?;
        b.save()?;
        Ok(b)
    }

    /// Add `host` to the bundle in `out`: its directory (a device that joins) and the
    /// client environment files naming its endpoint too. Returns the bundle and the new
    /// device's id.
    pub fn add_host(out: &Path, host: &HostSpec) -> anyhow::Result<(Bundle, u64)> {
        let mut b = Bundle::load(out)?;
        let mut all: Vec<HostSpec> = b.hosts.iter().map(|h| h.host.clone()).collect();
        all.push(host.clone());
        check_hosts(&all)?;
        let ca = Authority::load(&b.dir.join("ca"))
            .context("loading the bundle's CA to issue the new device's certificate")?;
        let id = b.hosts.iter().map(|h| h.id).max().unwrap_or(0) + 1;
        let entry = HostEntry {
            id,
            host: host.clone(),
            join: true,
            retired: false,
        };
        b.hosts.push(entry.clone());
        b.write_host(&ca, &entry)?;
        b.write_env()?;
        b.save()?;
        Ok((b, id))
    }

    /// Issue host `name`'s device a new certificate and key (replacing the ones in its
    /// bundle directory), for its host to install and restart with.
    pub fn renew_host(out: &Path, name: &str) -> anyhow::Result<(Bundle, u64)> {
        let b = Bundle::load(out)?;
        let h = b.host(name)?;
        let ca = Authority::load(&b.dir.join("ca"))
            .context("loading the bundle's CA to issue the certificate")?;
        let tls = b.dir.join("hosts").join(name).join("tls");
        let (cert, key) = (tls.join("device.pem.new"), tls.join("device.key.new"));
        h.issue(&ca, &cert, &key)?;
        std::fs::rename(&key, tls.join("device.key"))?;
        std::fs::rename(&cert, tls.join("device.pem"))?;
        let id = h.id;
        Ok((b, id))
    }

    /// Mark host `name` retired: the client environment files no longer name it.
    pub fn mark_retired(out: &Path, name: &str) -> anyhow::Result<()> {
        let mut b = Bundle::load(out)?;
        for h in b.hosts.iter_mut().filter(|h| h.host.name == name) {
            h.retired = true;
        }
        b.write_env()?;
        b.save()
    }

    /// The bundle in `out`.
    pub fn load(out: &Path) -> anyhow::Result<Bundle> {
        let dir = std::path::absolute(out)?;
        let p = dir.join("bundle.json");
        let text = std::fs::read_to_string(&p)
            .with_context(|| format!("no bundle at {} (run `tenure deploy new`)", p.display()))?;
        let mut b: Bundle =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", p.display()))?;
        b.dir = dir;
        Ok(b)
    }

    fn save(&self) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)? + "\n";
        write_over(&self.dir.join("bundle.json"), &text, false)
    }

    /// Host `name`.
    pub fn host(&self, name: &str) -> anyhow::Result<&HostEntry> {
        (self.hosts.iter().find(|h| h.host.name == name))
            .with_context(|| format!("the bundle in {} has no host {name}", self.dir.display()))
    }

    /// The client endpoints of every host but `h` (what is asked about it).
    pub fn endpoints_but(&self, h: &HostEntry) -> Vec<String> {
        let mine = h.client_endpoint(&self.paths);
        (self.endpoints(true).into_iter())
            .filter(|e| *e != mine)
            .collect()
    }

    /// The bundle's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Ports and paths.
    pub fn paths(&self) -> &Paths {
        &self.paths
    }

    /// The client endpoints of the hosts that are not joining (already members), or of
    /// every host when `all`.
    pub fn endpoints(&self, all: bool) -> Vec<String> {
        (self.hosts.iter())
            .filter(|h| !h.retired && (all || !h.join))
            .map(|h| h.client_endpoint(&self.paths))
            .collect()
    }

    /// The configuration of host `h`'s device, as it reads it on its host.
    pub fn config(&self, h: &HostEntry) -> anyhow::Result<ServerConfig> {
        let p = &self.paths;
        // Peers: the founding hosts; a joining device also lists the hosts added before
        // it and itself.
        let peers: Vec<PeerConfig> = (self.hosts.iter())
            .filter(|x| !x.join || (h.join && x.id <= h.id))
            .filter(|x| !x.retired || x.id == h.id)
            .map(|x| x.peer(p))
            .collect();
        let mut c = crate::cluster::configs::local_configs(
            &[h.id],
            self.stores,
            self.replication,
            1,
            Path::new("/"),
        )?
        .remove(0);
        let me = h.peer(p);
        let tls_dir = PathBuf::from(h.config_dir(p)).join("tls");
        c = ServerConfig {
            data_dir: PathBuf::from(h.data_dir(p)),
            peer_listen: me.peer_addr,
            client_listen: me.client_addr,
            metrics_listen: me.metrics_addr,
            peers,
            join: h.join,
            // The host's cores are its own.
            worker_threads: None,
            tls: Some(TlsFiles {
                ca: tls_dir.join("ca.pem"),
                cert: tls_dir.join("device.pem"),
                key: tls_dir.join("device.key"),
            }),
            auth: self.auth.clone(),
            ..c
        };
        c.validate()
            .with_context(|| format!("device {}'s configuration", h.id))?;
        Ok(c)
    }

    fn write_host(&self, ca: &Authority, h: &HostEntry) -> anyhow::Result<()> {
        let dir = self.dir.join("hosts").join(&h.host.name);
        if dir.exists() {
            bail!("{} exists", dir.display());
        }
        mkdir(&dir.join("tls"), 0o700)?;
        let cfg = self.config(h)?;
        let header = format!(
            "# Tenure device {} on {} ({}): written by `tenure deploy`.\n",
            h.id, h.host.name, h.host.addr
        );
        write_new(&dir.join("server.toml"), &(header + &cfg.to_toml()), false)?;
        h.issue(ca, &dir.join("tls/device.pem"), &dir.join("tls/device.key"))?;
        std::fs::copy(&ca.cert_path, dir.join("tls/ca.pem"))?;
        write_new(
            &dir.join("tenure.service"),
            &unit::systemd_unit(h, &self.paths),
            false,
        )?;
        write_new(
            &dir.join("INSTALL.txt"),
            &unit::install_steps(h, &self.paths, h.join),
            false,
        )
    }

    /// The environment files the CLI (and any client) reads: endpoints, the CA, and the
    /// credentials.
    fn write_env(&self) -> anyhow::Result<()> {
        let client = self.dir.join("client");
        let ca = client.join("ca.pem");
        let common = format!(
            "TENURE_ENDPOINTS={}\nTENURE_CA={}\n",
            self.endpoints(true).join(","),
            ca.display()
        );
        if !self.auth.enabled {
            return write_over(&client.join("client.env"), &common, false);
        }
        let token = std::fs::read_to_string(client.join("admin.token"))
            .context("reading the bundle's admin token")?;
        write_over(
            &client.join("admin.env"),
            &format!("{common}TENURE_TOKEN={}\n", token.trim()),
            true,
        )?;
        write_over(
            &client.join("app.env"),
            &format!(
                "{common}TENURE_CLIENT_CERT={}\nTENURE_CLIENT_KEY={}\n",
                client.join(format!("{APP_CERT}.pem")).display(),
                client.join(format!("{APP_CERT}.key")).display()
            ),
            false,
        )
    }

    /// Print what was written (and, after add-host, what to do next).
    pub fn report(&self, json: bool, added: Option<u64>) -> anyhow::Result<()> {
        let shown: Vec<&HostEntry> = (self.hosts.iter())
            .filter(|h| added.is_none_or(|id| h.id == id))
            .collect();
        if json {
            let hosts: Vec<serde_json::Value> = (shown.iter())
                .map(|h| {
                    serde_json::json!({
                        "id": h.id, "name": h.host.name, "addr": h.host.addr, "join": h.join,
                        "dir": self.dir.join("hosts").join(&h.host.name),
                        "client": h.client_endpoint(&self.paths),
                    })
                })
                .collect();
            let out = serde_json::json!({
                "bundle": self.dir, "hosts": hosts, "endpoints": self.endpoints(true),
                "auth": self.auth.enabled,
            });
            println!("{}", serde_json::to_string_pretty(&out)?);
            return Ok(());
        }
        let d = self.dir.display();
        match added {
            None => println!(
                "bundle for {} hosts in {d} ({} stores, {} chunks each; TLS{})",
                self.hosts.len(),
                self.stores,
                self.replication,
                if self.auth.enabled {
                    ", authorization on"
                } else {
                    ", authorization off"
                }
            ),
            Some(id) => println!("device {id} added to the bundle in {d} (it joins the cluster)"),
        }
        for h in &shown {
            println!(
                "  d{}  {:<20} {}  ->  {d}/hosts/{}/ (server.toml, tls/, tenure.service, INSTALL.txt)",
                h.id,
                h.host.name,
                h.client_endpoint(&self.paths),
                h.host.name
            );
        }
        println!("  CA key (keep it safe; add-host needs it): {d}/ca/ca.key");
        if self.auth.enabled {
            println!(
                "  clients: {d}/client/admin.env (admin token), {d}/client/app.env (certificate '{APP_CERT}': lock and write), {d}/client/prometheus.token (read: metrics)"
            );
        } else {
            println!("  clients: {d}/client/client.env");
        }
        match added {
            None => println!(
                "next: copy each hosts/<name>/ to its host and follow its INSTALL.txt; then `set -a; . {d}/client/{}; set +a; tenure status`",
                if self.auth.enabled {
                    "admin.env"
                } else {
                    "client.env"
                }
            ),
            Some(_) => println!(
                "next: install {d}/hosts/{}/ on its host (INSTALL.txt), start it, then `tenure deploy admit {} --out {d}`",
                shown[0].host.name, shown[0].host.name
            ),
        }
        Ok(())
    }
}

/// Names and addresses must differ between hosts.
fn check_hosts(hosts: &[HostSpec]) -> anyhow::Result<()> {
    for (i, a) in hosts.iter().enumerate() {
        for b in &hosts[i + 1..] {
            if a.name == b.name {
                bail!("host {} is given twice", a.name);
            }
            if a.addr == b.addr {
                bail!(
                    "hosts {} and {} have the same address {} (one device per host)",
                    a.name,
                    b.name,
                    a.addr
                );
            }
        }
    }
    Ok(())
}

fn check_paths(p: &Paths) -> anyhow::Result<()> {
    for (what, v) in [
        ("--config-dir", &p.config_dir),
        ("--data-dir", &p.data_dir),
        ("--binary", &p.binary),
    ] {
        if !v.starts_with('/') {
            bail!("{what} must be an absolute path on the hosts ({v:?})");
        }
    }
    let ports = [p.client_port, p.peer_port, p.metrics_port];
    if ports.contains(&0) || ports[0] == ports[1] || ports[1] == ports[2] || ports[0] == ports[2] {
        bail!("the client, peer and metrics ports must be three different ports above 0");
    }
    Ok(())
}

/// A new admin token (its secret in client/admin.token), a read-only token for
/// Prometheus (client/prometheus.token: the metrics need read) and a client certificate
/// (client/app.pem) that may lock and write everywhere: the `[auth]` section naming them.
fn admin_and_app(dir: &Path, ca: &Authority) -> anyhow::Result<AuthConfig> {
    use tenure_server::auth::{hash_secret, new_secret};
    let secret = new_secret()?;
    write_new(
        &dir.join("client/admin.token"),
        &format!("{secret}\n"),
        true,
    )?;
    // What Prometheus presents to read the metrics (read only).
    let scraper = new_secret()?;
    write_new(
        &dir.join("client/prometheus.token"),
        &format!("{scraper}\n"),
        true,
    )?;
    let client = dir.join("client");
    ca.issue_client(
        APP_CERT,
        &client.join(format!("{APP_CERT}.pem")),
        &client.join(format!("{APP_CERT}.key")),
    )?;
    let auth = AuthConfig {
        enabled: true,
        tokens: vec![
            TokenConfig {
                name: "admin".into(),
                sha256: hash_secret(&secret),
                rules: vec![Rule {
                    prefix: "/".into(),
                    perms: vec![Perm::Admin],
                }],
            },
            TokenConfig {
                name: "prometheus".into(),
                sha256: hash_secret(&scraper),
                rules: vec![Rule {
                    prefix: "/".into(),
                    perms: vec![Perm::Read],
                }],
            },
        ],
        certs: vec![CertConfig {
            cn: APP_CERT.into(),
            rules: vec![Rule {
                prefix: "/".into(),
                perms: vec![Perm::Lock, Perm::Write],
            }],
        }],
    };
    auth.validate()?;
    Ok(auth)
}
