//! Client commands against a running cluster: `tenure write`, `tenure status`.
//! Endpoints come from `--endpoints` or from the local cluster's `cluster.json`, and so
//! does the CA to trust: `--ca` (or `TENURE_CA`), else the local cluster's when its
//! endpoints are used; none means plaintext. The token for a cluster with authorization
//! on comes from `--auth-token` (or `TENURE_TOKEN`); it is never taken from the data
//! directory implicitly.

use crate::cluster::file::ClusterFile;
use anyhow::{Context, bail};
use std::path::PathBuf;
use tenure_client::tls::ClientTls;
use tenure_client::{Client, ClientOptions};

/// Where to find the cluster, and how to talk to it.
#[derive(clap::Args, Debug, Clone)]
pub struct Target {
    /// Comma-separated client endpoints (host:port); default: the local cluster's.
    #[arg(long, env = "TENURE_ENDPOINTS", value_delimiter = ',')]
    pub endpoints: Vec<String>,
    /// The local cluster's data directory (used when --endpoints is not given).
    #[arg(long, default_value = "tenure-data")]
    pub data: PathBuf,
    /// The cluster's CA certificate (PEM): connect with TLS and trust devices it signed.
    /// Default: the local cluster's (its data directory's tls/ca.pem) when --endpoints is
    /// not given; without either, plaintext.
    #[arg(long, env = "TENURE_CA")]
    pub ca: Option<PathBuf>,
    /// A client certificate (PEM) to present, signed by the cluster's CA (with
    /// --client-key; `tenure cert new` issues one). With authorization on, its subject
    /// common name is the caller's identity ([[auth.certs]]) when no token is given.
    #[arg(long, env = "TENURE_CLIENT_CERT", requires = "client_key")]
    pub client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, env = "TENURE_CLIENT_KEY", requires = "client_cert")]
    pub client_key: Option<PathBuf>,
    /// The token to present to a cluster with authorization on (`[auth]`; a local cluster
    /// made with `cluster up --auth` keeps its admin token in admin.token in its data
    /// directory). `--token` is the fencing token of the commands that take one.
    #[arg(long, env = "TENURE_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,
}

impl Target {
    /// The endpoints to use.
    pub fn endpoints(&self) -> anyhow::Result<Vec<String>> {
        if !self.endpoints.is_empty() {
            return Ok(self.endpoints.clone());
        }
        Ok(ClusterFile::load(&self.data)
            .context("no --endpoints and no local cluster")?
            .endpoints())
    }

    /// The TLS settings to use: `--ca` (and `--client-cert`/`--client-key`), else the local cluster's
    /// CA when its endpoints are used, else none (plaintext).
    pub fn tls(&self) -> anyhow::Result<Option<ClientTls>> {
        let identity = self.client_cert.as_deref().zip(self.client_key.as_deref());
        if let Some(ca) = &self.ca {
            return Ok(Some(ClientTls::from_files(ca, identity)?));
        }
        if self.endpoints.is_empty()
            && let Ok(file) = ClusterFile::load(&self.data)
            && let Some(ca) = &file.ca
        {
            return Ok(Some(
                ClientTls::from_files(ca, identity).context("loading the local cluster's CA")?,
            ));
        }
        if identity.is_some() {
            bail!("--client-cert and --client-key need the CA to trust: give --ca (or TENURE_CA)");
        }
        Ok(None)
    }

    /// `opts` with the TLS settings and the token to use.
    pub fn options(&self, opts: ClientOptions) -> anyhow::Result<ClientOptions> {
        Ok(ClientOptions {
            tls: self.tls()?,
            token: self.auth_token.clone().or(opts.token),
            ..opts
        })
    }

    /// A client of the target with default options.
    pub fn client(&self) -> anyhow::Result<Client> {
        self.client_with(ClientOptions::default())
    }

    /// A client of the target with `opts` (and the TLS settings to use).
    pub fn client_with(&self, opts: ClientOptions) -> anyhow::Result<Client> {
        Ok(Client::with_options(
            self.endpoints()?,
            self.options(opts)?,
        )?)
    }
}

/// Arguments of `tenure write`.
#[derive(clap::Args, Debug)]
pub struct WriteArgs {
    /// Store.
    #[arg(long)]
    store: u32,
    /// Register key.
    #[arg(long)]
    key: u64,
    /// Value.
    #[arg(long)]
    value: u64,
    #[command(flatten)]
    target: Target,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Write a test register (exercises a store's manager and chunks end to end).
pub fn write(a: WriteArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let client = a.target.client()?;
        let v = client.write(a.store, a.key, a.value).await?;
        if a.json {
            println!(
                "{}",
                serde_json::json!({"store": a.store, "key": a.key, "value": a.value,
                                   "version": {"epoch": v.epoch, "seq": v.seq}})
            );
        } else {
            println!(
                "wrote s{} key {} = {} at version e{}.{}",
                a.store, a.key, a.value, v.epoch, v.seq
            );
        }
        anyhow::Ok(())
    })
}
