//! `tenure server`: run one device from a TOML configuration, with flag overrides.

use anyhow::Context;
use std::net::SocketAddr;
use std::path::PathBuf;
use tenure_server::config::ServerConfig;

/// Arguments of `tenure server`.
#[derive(clap::Args, Debug)]
pub struct ServerArgs {
    /// Configuration file (TOML).
    #[arg(long, short)]
    pub config: PathBuf,
    /// Override the device id.
    #[arg(long)]
    pub id: Option<u64>,
    /// Override the data directory.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Override the peer listen address.
    #[arg(long)]
    pub peer_listen: Option<SocketAddr>,
    /// Override the client (gRPC) listen address.
    #[arg(long)]
    pub client_listen: Option<SocketAddr>,
    /// Override the Prometheus metrics listen address.
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
    /// Log filter (tracing `EnvFilter` syntax); `RUST_LOG` wins when set.
    #[arg(long, default_value = "info")]
    pub log: String,
}

/// Run a device until SIGINT/SIGTERM.
pub fn run(args: ServerArgs) -> anyhow::Result<()> {
    // No transparent huge pages for this process: mimalloc asks for them on its arenas,
    // and under a write load the storage thread spent 40% of its time in the kernel
    // zeroing fresh 2 MiB pages (perf, 10,000 sessions taking locks), where 4 KiB pages
    // zero only what is touched. Best effort: a kernel without the setting changes
    // nothing.
    let _ = rustix::thread::disable_transparent_huge_pages(true);
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&args.log));
    // Colours only on a terminal: `cluster up` sends the log to dN/server.log.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    let mut cfg = ServerConfig::load(&args.config)?;
    if let Some(v) = args.id {
        cfg.id = v;
    }
    if let Some(v) = args.data_dir {
        cfg.data_dir = v;
    }
    if let Some(v) = args.peer_listen {
        cfg.peer_listen = v;
    }
    if let Some(v) = args.client_listen {
        cfg.client_listen = v;
    }
    if let Some(v) = args.metrics_listen {
        cfg.metrics_listen = Some(v);
    }
    cfg.validate()?;
    let mut rt = match cfg.worker_threads {
        Some(0) => anyhow::bail!("worker_threads must be at least 1"),
        // One thread: the current-thread scheduler, which runs every task on the thread
        // that polls the driver (no work-stealing queues, no cross-thread wake-ups).
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        Some(n) => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(n);
            b
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    };
    let rt = rt
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    rt.block_on(async move {
        let handle = tenure_server::start(cfg).await?;
        handle
            .reload_auth_on_hangup(args.config)
            .context("installing the SIGHUP handler (reloads [auth])")?;
        let stop = handle.stop_token();
        tokio::spawn(async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM handler");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            tracing::info!("signal received; stopping");
            stop.cancel();
        });
        handle.wait().await?;
        anyhow::Ok(())
    })
}
