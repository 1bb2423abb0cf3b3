//! Client commands against a running cluster: `tenure write`, `tenure status`.
//! Endpoints come from `--endpoints` or from the local cluster's `cluster.json`.

use crate::cluster::ClusterFile;
use anyhow::Context;
use std::path::PathBuf;
use tenure_client::Client;

/// Where to find the cluster.
#[derive(clap::Args, Debug, Clone)]
pub struct Target {
    /// Comma-separated client endpoints (host:port); default: the local cluster's.
    #[arg(long, value_delimiter = ',')]
    pub endpoints: Vec<String>,
    /// The local cluster's data directory (used when --endpoints is not given).
    #[arg(long, default_value = "tenure-data")]
    pub data: PathBuf,
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
        let client = Client::new(a.target.endpoints()?)?;
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
