//! The generated configurations of a local cluster's devices: ports, data directories,
//! TLS certificates from the cluster's CA, and the admin token's `[auth]` section.

use super::UpArgs;
use super::file::{ca_dir, token_path};
use anyhow::{Context, bail};
use std::net::SocketAddr;
use std::path::Path;
use tenure_server::certs::Authority;
use tenure_server::config::{ClusterShape, PeerConfig, ServerConfig, TimingOverrides};
use tenure_server::tls::TlsFiles;

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

pub(super) fn new_configs(a: &UpArgs, data: &Path) -> anyhow::Result<Vec<ServerConfig>> {
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
        .collect())
}

pub(super) fn existing_configs(data: &Path) -> anyhow::Result<Option<Vec<ServerConfig>>> {
    let mut cfgs = Vec::new();
    // A device removed from the cluster keeps its directory, its configuration renamed
    // (`cluster remove`): it is not started again.
    for id in super::members::device_dirs(data)? {
        let p = data.join(format!("d{id}")).join("server.toml");
        if p.exists() {
            cfgs.push(ServerConfig::load(&p)?);
        }
    }
    Ok((!cfgs.is_empty()).then_some(cfgs))
}
