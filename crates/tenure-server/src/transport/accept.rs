//! The accepting side: the listener loop, the hello a dialer must send first, and the
//! frame codec both sides use.

use super::{Conn, Shared};
use crate::tls::{Conn as Stream, names_device};
use crate::wire::{self, Versions};
use futures::{SinkExt, StreamExt};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tenure_core::ids::DeviceId;
use tokio::net::TcpListener;
use tokio_util::codec::{Framed, LengthDelimitedCodec};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

pub(super) fn codec(max: usize) -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(max)
        .length_field_length(4)
        .new_codec()
}

pub(super) async fn accept_loop(
    shared: Arc<Shared>,
    listener: TcpListener,
    stop: CancellationToken,
) {
    loop {
        let (stream, remote) = tokio::select! {
            _ = stop.cancelled() => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    warn!("peer accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let cfg = &shared.cfg;
            let _ = stream.set_nodelay(true);
            let stream = match &cfg.tls {
                None => Stream::Plain(stream),
                Some(tls) => {
                    let accepted =
                        tokio::time::timeout(cfg.handshake_timeout, tls.acceptor.accept(stream))
                            .await;
                    match accepted {
                        Ok(Ok(s)) => Stream::Tls(Box::new(s.into())),
                        Ok(Err(e)) => {
                            reject(remote, &format!("TLS handshake failed: {e}"));
                            return;
                        }
                        Err(_) => {
                            reject(remote, "TLS handshake timed out");
                            return;
                        }
                    }
                }
            };
            let mut conn = Framed::new(stream, codec(cfg.max_frame_bytes));
            let hello =
                tokio::time::timeout(cfg.handshake_timeout, read_hello(&mut conn, cfg.me)).await;
            let (peer, theirs) = match hello {
                Ok(Ok(p)) => p,
                Ok(Err(reason)) => {
                    reject(remote, &reason);
                    return;
                }
                Err(_) => {
                    reject(remote, "handshake timed out");
                    return;
                }
            };
            // With mutual TLS, the certificate must name the device the `Hello` claims.
            if cfg.tls.is_some()
                && !(conn.get_ref().peer_certificate()).is_some_and(|c| names_device(c, peer))
            {
                metrics::counter!("tenure_peer_tls_failures_total").increment(1);
                let why = format!(
                    "its certificate does not name device {peer} (a device speaks only for itself)"
                );
                reject(remote, &why);
                return;
            }
            let (slot, removed) = {
                let table = shared.table();
                let slot = table.peers.get(&peer).map(|p| p.accepted.clone());
                (slot, table.removed.contains(&peer))
            };
            let Some(slot) = slot else {
                let why = if removed {
                    format!("device {peer} left the cluster")
                } else {
                    format!(
                        "unknown device {peer} (neither configured nor in the membership record)"
                    )
                };
                reject(remote, &why);
                return;
            };
            // The answer says what this device speaks, also when the two share no
            // version: the dialer then knows why as well.
            let Ok(body) = wire::encode_hello(cfg.me, peer, cfg.versions) else {
                return;
            };
            if conn.send(body).await.is_err() {
                return;
            }
            let version = match cfg.versions.common(theirs) {
                Ok(v) => v,
                Err(e) => {
                    reject(remote, &format!("device {peer}: {e}"));
                    return;
                }
            };
            debug!(%peer, %remote, "accepted peer connection");
            let _ = slot.send((conn, version)).await;
        });
    }
}

pub(super) fn reject(remote: SocketAddr, reason: &str) {
    metrics::counter!("tenure_peer_frames_rejected_total").increment(1);
    warn!(%remote, "closing peer connection: {reason}");
}

/// Read the first frame; it must be a `Hello` addressed to `me`: its sender and the
/// versions it speaks.
pub(super) async fn read_hello(
    conn: &mut Conn,
    me: DeviceId,
) -> Result<(DeviceId, Versions), String> {
    match conn.next().await {
        None => Err("closed before handshake".into()),
        Some(Err(e)) => Err(format!("bad frame: {e}")),
        Some(Ok(body)) => match wire::decode_hello(&body) {
            Ok((from, to, versions)) if to == me => Ok((from, versions)),
            Ok((_, to, _)) => Err(format!("hello addressed to {to}, this is {me}")),
            Err(e) => Err(e.to_string()),
        },
    }
}
