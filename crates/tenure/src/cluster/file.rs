//! `cluster.json` (the devices' pids and addresses, the CA, the admin token) and where a
//! local cluster keeps its files under its data directory.

use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tenure_client::tls::ClientTls;
use tenure_client::{Client, ClientOptions};

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

/// Where a local cluster keeps its admin token's secret.
pub fn token_path(data: &Path) -> PathBuf {
    data.join("admin.token")
}
