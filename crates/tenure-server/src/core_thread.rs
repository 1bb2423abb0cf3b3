//! The device's core thread: the driver (the sans-IO core and what feeds it) and the peer
//! transport run on a thread of their own, on a current-thread runtime, apart from the
//! runtime that serves clients.
//!
//! Why: a device flooded by clients (10,000 sessions taking locks on a 2-core machine)
//! spent its one runtime thread on client connections, and its driver and peer
//! connections waited their turn behind thousands of ready client tasks. ACCEPTED and
//! lease renewals then came late, healthy chunks were marked failed, and the cluster
//! stormed. On its own thread the core gets the processor from the kernel's scheduler
//! however many client tasks are ready: client work can slow clients down, not the
//! chunks' replication and leases. (Clients are pushed back by admission, see
//! [`crate::admission`].)

use crate::ServerError;
use crate::driver::Driver;
use crate::storage::Storage;
use crate::transport::{Inbound, Transport, TransportConfig};
use std::net::SocketAddr;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// What the core thread is made of, built on the caller's thread.
pub(crate) struct CoreParts {
    pub device_config: tenure_core::config::DeviceConfig,
    pub storage: Storage,
    pub state: tenure_core::io::DevicePersist,
    pub seed: u64,
    pub transport: TransportConfig,
    pub peer_listener: std::net::TcpListener,
    pub peer_addr: SocketAddr,
    pub inbox_tx: mpsc::Sender<Inbound>,
    pub inbox_rx: mpsc::Receiver<Inbound>,
    pub calls_rx: mpsc::Receiver<crate::driver::Call>,
    /// Calls that go before the rest: keep-alives and Status ([`Driver::with_urgent`]).
    pub urgent_rx: mpsc::Receiver<crate::driver::Call>,
    pub events: tokio::sync::broadcast::Sender<crate::driver::DeviceEvent>,
    pub sub_routes: crate::driver::routes::SubRoutes,
    pub watch_routes: crate::driver::routes::WatchRoutes,
    pub snapshot_book: crate::snapshots::Book,
    pub replay: Vec<(tenure_core::ids::DeviceId, tenure_core::msg::Msg)>,
    pub endpoints: crate::cluster_api::Endpoints,
    pub stop: CancellationToken,
}

/// Start the core thread and boot the driver on it. Returns once the device booted (or
/// why it could not); the handle ends with the driver.
pub(crate) async fn spawn(
    parts: CoreParts,
) -> Result<JoinHandle<Result<(), ServerError>>, ServerError> {
    let (boot_tx, boot_rx) = oneshot::channel();
    let (done_tx, done_rx) = oneshot::channel();
    std::thread::Builder::new()
        .name("tenure-driver".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = boot_tx.send(Err(ServerError::Task(format!("core runtime: {e}"))));
                    return;
                }
            };
            let r = rt.block_on(run(parts, boot_tx));
            let _ = done_tx.send(r);
        })
        .map_err(|e| ServerError::Task(format!("core thread: {e}")))?;
    boot_rx
        .await
        .map_err(|_| ServerError::Task("the core thread ended while booting".into()))??;
    Ok(tokio::spawn(async move {
        done_rx
            .await
            .unwrap_or_else(|_| Err(ServerError::Task("the core thread ended".into())))
    }))
}

async fn boot(p: CoreParts) -> Result<(Driver, CancellationToken), ServerError> {
    let listener =
        tokio::net::TcpListener::from_std(p.peer_listener).map_err(|source| ServerError::Bind {
            addr: p.peer_addr,
            source,
        })?;
    let transport = Transport::start(p.transport, listener, p.inbox_tx, p.stop.clone());
    let mut driver = Driver::boot(
        p.device_config,
        p.storage,
        p.state,
        p.seed,
        transport,
        p.inbox_rx,
        p.calls_rx,
    )
    .await?
    .with_events(p.events)
    .with_lookup_routes(p.sub_routes)
    .with_watch_routes(p.watch_routes)
    .with_snapshots(p.snapshot_book)
    .with_urgent(p.urgent_rx);
    driver.replay(p.replay).await?;
    Ok((driver.with_members(p.endpoints), p.stop))
}

async fn run(
    parts: CoreParts,
    booted: oneshot::Sender<Result<(), ServerError>>,
) -> Result<(), ServerError> {
    let stop = parts.stop.clone();
    let (driver, stop) = match boot(parts).await {
        Ok(d) => {
            let _ = booted.send(Ok(()));
            d
        }
        Err(e) => {
            stop.cancel();
            let _ = booted.send(Err(e));
            return Ok(());
        }
    };
    let r = tokio::select! {
        r = driver.run() => r.map_err(ServerError::from),
        _ = stop.cancelled() => Ok(()),
    };
    stop.cancel();
    r
}
