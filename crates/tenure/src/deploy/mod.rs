//! `tenure deploy`: deployment bundles for a cluster on real hosts.
//!
//! `deploy new` writes, for hosts given by name and/or address, one directory per host
//! (its device's `server.toml`, its certificate naming the host, the CA certificate, a
//! systemd unit and the steps to install them), the client credentials (an admin token,
//! a client certificate, environment files the CLI reads) and the cluster's CA, whose key
//! stays with the operator. `deploy add-host` writes the bundle of one more host of the
//! same cluster (a device that joins), and `deploy admit` asks the running cluster to
//! admit it; `deploy retire` drains and retires a host's device, `deploy renew` issues
//! a device a new certificate. See `docs/deployment.md`.

mod admit;
mod bundle;
mod hosts;
mod unit;

use anyhow::Context;
use std::path::PathBuf;

pub use hosts::HostSpec;

/// Arguments of `tenure deploy`.
#[derive(clap::Args, Debug)]
pub struct DeployArgs {
    #[command(subcommand)]
    cmd: DeployCmd,
}

#[derive(clap::Subcommand, Debug)]
enum DeployCmd {
    /// Write a new cluster's bundle: one directory per host, client credentials, the CA.
    New(NewArgs),
    /// Write the bundle of one more host of the bundle's cluster (its device joins).
    AddHost(AddHostArgs),
    /// Ask the running cluster to admit an added host's device, and wait until it holds
    /// chunks.
    Admit(AdmitArgs),
    /// Issue a host's device a new certificate (rotation): install it, then restart the
    /// device.
    Renew(RenewArgs),
    /// Retire a host's device: the cluster moves its chunks and stores to the others,
    /// and the process stops by itself.
    Retire(AdmitArgs),
}

#[derive(clap::Args, Debug)]
struct RenewArgs {
    /// The host's name.
    host: String,
    /// The bundle of the cluster.
    #[arg(long, default_value = "tenure-bundle")]
    out: PathBuf,
}

/// Where the devices listen and keep their files on their hosts.
#[derive(clap::Args, Debug, Clone)]
struct Layout {
    /// Client (gRPC) port of every device.
    #[arg(long, default_value_t = 7400)]
    client_port: u16,
    /// Peer port of every device.
    #[arg(long, default_value_t = 7401)]
    peer_port: u16,
    /// Prometheus metrics port of every device (plain HTTP).
    #[arg(long, default_value_t = 7402)]
    metrics_port: u16,
    /// Where a host keeps the configuration and the TLS files (`{host}` is replaced by
    /// the host's name).
    #[arg(long, default_value = "/etc/tenure")]
    config_dir: String,
    /// A device's data directory on its host (`{host}` is replaced by the host's name).
    #[arg(long, default_value = "/var/lib/tenure")]
    data_dir: String,
    /// The tenure binary on the hosts (the systemd unit runs it).
    #[arg(long, default_value = "/usr/local/bin/tenure")]
    binary: String,
    /// The system user the unit runs the device as.
    #[arg(long, default_value = "tenure")]
    user: String,
}

#[derive(clap::Args, Debug)]
struct NewArgs {
    /// A host: NAME=ADDRESS, an address, or a name to resolve now. Repeat for each host;
    /// device ids follow the order given.
    #[arg(long = "host", required = true, value_parser = hosts::parse_host)]
    hosts: Vec<HostSpec>,
    /// The directory to write the bundle into (must not exist, or be empty).
    #[arg(long, default_value = "tenure-bundle")]
    out: PathBuf,
    /// Number of stores (fixed for the cluster's life).
    #[arg(long, default_value_t = 64)]
    stores: u32,
    /// Chunks per store (at most the number of hosts).
    #[arg(long, default_value_t = 3)]
    replication: usize,
    /// No authorization: every client with a certificate-valid TLS connection may do
    /// anything (TLS stays on). Default: an admin token and a client certificate.
    #[arg(long)]
    no_auth: bool,
    #[command(flatten)]
    layout: Layout,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct AddHostArgs {
    /// The new host: NAME=ADDRESS, an address, or a name to resolve now.
    #[arg(long = "host", value_parser = hosts::parse_host)]
    host: HostSpec,
    /// The bundle of the cluster (written by `deploy new`).
    #[arg(long, default_value = "tenure-bundle")]
    out: PathBuf,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct AdmitArgs {
    /// The host's name (as the bundle records it).
    host: String,
    /// The bundle of the cluster.
    #[arg(long, default_value = "tenure-bundle")]
    out: PathBuf,
    /// How long to wait (admit: for the device to answer, be admitted and hold chunks;
    /// retire: for it to hand everything over and retire).
    #[arg(long, default_value = "120s", value_parser = crate::lock_cmds::parse_duration)]
    timeout: std::time::Duration,
}

/// Run `tenure deploy ...`.
pub fn run(args: DeployArgs) -> anyhow::Result<()> {
    match args.cmd {
        DeployCmd::New(a) => {
            let b = bundle::Bundle::create(
                &a.out,
                &a.hosts,
                bundle::Shape {
                    stores: a.stores,
                    replication: a.replication,
                    auth: !a.no_auth,
                },
                a.layout.into(),
            )
            .with_context(|| format!("writing the bundle in {}", a.out.display()))?;
            b.report(a.json, None)
        }
        DeployCmd::AddHost(a) => {
            let (b, id) = bundle::Bundle::add_host(&a.out, &a.host)
                .with_context(|| format!("adding a host to the bundle in {}", a.out.display()))?;
            b.report(a.json, Some(id))
        }
        DeployCmd::Admit(a) => admit::run(&a.out, &a.host, a.timeout),
        DeployCmd::Retire(a) => admit::retire(&a.out, &a.host, a.timeout),
        DeployCmd::Renew(a) => {
            let (b, id) = bundle::Bundle::renew_host(&a.out, &a.host)?;
            let dir = b.dir().join("hosts").join(&a.host).join("tls");
            println!(
                "device {id} ({}): new certificate and key in {}/device.pem and device.key; install them as INSTALL.txt says, then restart the device (`systemctl restart tenure`; one device at a time)",
                a.host,
                dir.display()
            );
            Ok(())
        }
    }
}

impl From<Layout> for bundle::Paths {
    fn from(l: Layout) -> bundle::Paths {
        bundle::Paths {
            client_port: l.client_port,
            peer_port: l.peer_port,
            metrics_port: l.metrics_port,
            config_dir: l.config_dir,
            data_dir: l.data_dir,
            binary: l.binary,
            user: l.user,
        }
    }
}
