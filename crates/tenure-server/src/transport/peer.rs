//! One peer's connection task: dialing (with TLS when configured), writing batches of
//! queued messages, and reconnecting after a failure.

use super::accept::{codec, read_hello};
use super::{Conn, Inbound, TransportConfig};
use crate::tls::{Conn as Stream, peer_name};
use crate::wire::{self, Frame};
use futures::{SinkExt, StreamExt};
use std::net::SocketAddr;
use tenure_core::ids::DeviceId;
use tenure_core::msg::Msg;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

pub(super) struct PeerTask {
    pub(super) cfg: TransportConfig,
    pub(super) peer: DeviceId,
    /// Its address (none: not known yet).
    pub(super) addr: watch::Receiver<Option<SocketAddr>>,
    pub(super) queue: mpsc::Receiver<Msg>,
    pub(super) accepted: mpsc::Receiver<(Conn, u8)>,
    pub(super) inbox: mpsc::Sender<Inbound>,
    pub(super) stop: CancellationToken,
    /// Where the version of each new connection is recorded ([`super::Transport::oldest_peer_version`]).
    pub(super) version: std::sync::Arc<std::sync::atomic::AtomicU8>,
}

impl PeerTask {
    fn dials(&self) -> bool {
        self.cfg.me < self.peer
    }

    pub(super) async fn run(mut self) {
        let mut backoff = self.cfg.backoff_min;
        let mut next: Option<(Conn, u8)> = None;
        let mut tls_warned: Option<String> = None;
        loop {
            let conn = match next.take() {
                Some(c) => c,
                None if self.dials() => {
                    let known = *self.addr.borrow_and_update();
                    let Some(addr) = known else {
                        // Not known yet: wait for its address, or its connection.
                        tokio::select! {
                            _ = self.stop.cancelled() => return,
                            c = self.accepted.recv() => match c {
                                Some(c) => next = Some(c),
                                None => return,
                            },
                            r = self.addr.changed() => if r.is_err() { return },
                        }
                        continue;
                    };
                    let dial = dial(&self.cfg, self.peer, addr);
                    let attempt = tokio::select! {
                        _ = self.stop.cancelled() => return,
                        c = self.accepted.recv() => c.ok_or_else(|| "closed".to_string()),
                        r = tokio::time::timeout(self.cfg.handshake_timeout, dial) => {
                            r.unwrap_or_else(|_| Err("handshake timed out".into()))
                        }
                    };
                    match attempt {
                        Ok(c) => {
                            backoff = self.cfg.backoff_min;
                            c
                        }
                        Err(e) => {
                            // A refused TLS handshake is a configuration problem (another
                            // CA, a certificate not naming the address): said once.
                            if (e.starts_with(TLS_REFUSED) || e.starts_with(VERSION_REFUSED))
                                && tls_warned.as_deref() != Some(e.as_str())
                            {
                                warn!(peer = %self.peer, %addr, "dial failed: {e}; retrying");
                                tls_warned = Some(e.clone());
                            }
                            debug!(peer = %self.peer, %addr, "dial failed: {e}; retrying in {backoff:?}");
                            tokio::select! {
                                _ = self.stop.cancelled() => return,
                                _ = tokio::time::sleep(backoff) => {}
                                // A new address is dialed at once.
                                r = self.addr.changed() => if r.is_err() { return },
                            }
                            backoff = (backoff * 2).min(self.cfg.backoff_max);
                            continue;
                        }
                    }
                }
                None => tokio::select! {
                    _ = self.stop.cancelled() => return,
                    c = self.accepted.recv() => match c {
                        Some(c) => c,
                        None => return,
                    },
                },
            };
            info!(peer = %self.peer, wire_version = conn.1, "peer connected");
            (self.version).store(conn.1, std::sync::atomic::Ordering::Relaxed);
            match self.serve(conn).await {
                Served::Stop => return,
                Served::Replaced(c) => next = Some(c),
                Served::Broken => {
                    info!(peer = %self.peer, "peer connection lost");
                }
            }
        }
    }

    /// Run one connection until it breaks, is replaced, or the transport stops.
    async fn serve(&mut self, (conn, version): (Conn, u8)) -> Served {
        let (mut sink, mut stream) = conn.split();
        let peer = self.peer;
        let inbox = self.inbox.clone();
        let reader_stop = CancellationToken::new();
        let reader_done = reader_stop.clone();
        let reader = tokio::spawn(async move {
            let _guard = reader_done.drop_guard();
            while let Some(item) = stream.next().await {
                let body = match item {
                    Ok(b) => b,
                    // A TLS peer that went away without closing its session (a crash, a
                    // kill): a lost connection, as a plain TCP close is.
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                        debug!(%peer, "peer connection ended: {e}");
                        return;
                    }
                    Err(e) => {
                        metrics::counter!("tenure_peer_frames_rejected_total").increment(1);
                        warn!(%peer, "closing peer connection: {e}");
                        return;
                    }
                };
                match wire::decode(&body, version) {
                    Ok(Frame::Msg { from, msg }) if from == peer => {
                        if inbox.send((from, *msg)).await.is_err() {
                            return;
                        }
                    }
                    Ok(other) => {
                        metrics::counter!("tenure_peer_frames_rejected_total").increment(1);
                        warn!(%peer, "closing peer connection: unexpected frame {other:?}");
                        return;
                    }
                    Err(e) => {
                        metrics::counter!("tenure_peer_frames_rejected_total").increment(1);
                        warn!(%peer, "closing peer connection: {e}");
                        return;
                    }
                }
            }
        });
        let me = self.cfg.me;
        let max = self.cfg.max_frame_bytes;
        let sent = metrics::counter!("tenure_peer_messages_sent_total");
        let flushes = metrics::counter!("tenure_peer_writes_total");
        let outcome = loop {
            tokio::select! {
                _ = self.stop.cancelled() => break Served::Stop,
                _ = reader_stop.cancelled() => break Served::Broken,
                c = self.accepted.recv() => match c {
                    Some(c) => break Served::Replaced(c),
                    None => break Served::Stop,
                },
                m = self.queue.recv() => {
                    let Some(first) = m else { break Served::Stop };
                    let mut batch = vec![first];
                    // One turn of the runtime first: what the driver sends to this
                    // peer in its next turn joins the same write (peer writes per lock
                    // operation: 2.1 -> 1.8 under `bench locks` 16/16).
                    tokio::task::yield_now().await;
                    while batch.len() < 256 {
                        match self.queue.try_recv() {
                            Ok(m) => batch.push(m),
                            Err(_) => break,
                        }
                    }
                    sent.increment(batch.len() as u64);
                    count_store_states(&batch);
                    flushes.increment(1);
                    if let Err(e) = write_batch(&mut sink, me, batch, max, version).await {
                        info!(peer = %self.peer, "peer write failed: {e}");
                        break Served::Broken;
                    }
                }
            }
        };
        reader.abort();
        outcome
    }
}

/// `tenure_peer_store_states_total`: the store states of epoch transitions among `batch`,
/// whole or named (DESIGN "State at scale").
fn count_store_states(batch: &[Msg]) {
    use tenure_core::msg::{ToChunk, ToManager};
    for m in batch {
        let how = match m {
            Msg::ToManager { msg, .. } => match msg {
                ToManager::Vote { .. } => "vote_whole",
                ToManager::VoteSummary(_) => "vote_summary",
                _ => continue,
            },
            Msg::ToChunk { msg, .. } => match msg {
                ToChunk::Commit { .. } => "commit_whole",
                ToChunk::CommitPatch(_) => "commit_patch",
                ToChunk::EpochTransition { data: Some(_), .. } => "reconcile_whole",
                ToChunk::ReconcilePatch(_) => "reconcile_patch",
                _ => continue,
            },
            _ => continue,
        };
        metrics::counter!("tenure_peer_store_states_total", "how" => how).increment(1);
    }
}

pub(super) async fn write_batch<S>(
    sink: &mut S,
    me: DeviceId,
    batch: Vec<Msg>,
    max: usize,
    version: u8,
) -> Result<(), String>
where
    S: futures::Sink<bytes::Bytes, Error = std::io::Error> + Unpin,
{
    for msg in batch {
        let frame = Frame::Msg {
            from: me,
            msg: Box::new(msg),
        };
        let body = match wire::encode(&frame, version) {
            Ok(body) => body,
            Err(e) => {
                // A value this connection's version cannot carry (an inline object value
                // for a peer of an older build): drop this message only, as a lost one.
                warn!(wire_version = version, "outbound message dropped: {e}");
                continue;
            }
        };
        if body.len() > max {
            // Never send what the peer would reject: drop this message only.
            warn!(
                size = body.len(),
                "outbound message larger than the frame limit dropped"
            );
            continue;
        }
        sink.feed(body).await.map_err(|e| e.to_string())?;
    }
    sink.flush().await.map_err(|e| e.to_string())
}

/// How a dial's error starts when the TLS handshake itself was refused.
pub(super) const TLS_REFUSED: &str = "TLS handshake refused";
/// How a dial's error starts when the peer shares no wire version with this device.
pub(super) const VERSION_REFUSED: &str = "no wire version in common";

/// Connect to `peer` (with TLS when configured: its certificate must be of the CA and
/// name `peer`, [`peer_name`]) and exchange `Hello`s.
pub(super) async fn dial(
    cfg: &TransportConfig,
    peer: DeviceId,
    addr: SocketAddr,
) -> Result<(Conn, u8), String> {
    let me = cfg.me;
    let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    let stream = match &cfg.tls {
        None => Stream::Plain(stream),
        Some(tls) => {
            // The device answering must be the one dialed: its certificate names it.
            let name = rustls::pki_types::ServerName::try_from(peer_name(peer))
                .map_err(|e| format!("{TLS_REFUSED}: {e}"))?;
            let s = tls.connector.connect(name, stream).await.map_err(|e| {
                metrics::counter!("tenure_peer_tls_failures_total").increment(1);
                // A TLS error (a certificate of another CA, plaintext) rather than a
                // connection that broke (a peer killed mid-handshake).
                let tls_error = e
                    .get_ref()
                    .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some());
                if tls_error {
                    format!("{TLS_REFUSED} by {addr}: {e}")
                } else {
                    format!("TLS handshake with {addr} broke off: {e}")
                }
            })?;
            Stream::Tls(Box::new(s.into()))
        }
    };
    let mut conn = Framed::new(stream, codec(cfg.max_frame_bytes));
    let hello = wire::encode_hello(me, peer, cfg.versions).map_err(|e| e.to_string())?;
    conn.send(hello).await.map_err(|e| e.to_string())?;
    let (from, theirs) = read_hello(&mut conn, me).await?;
    if from != peer {
        return Err(format!("expected {peer} but {from} answered"));
    }
    let version = cfg
        .versions
        .common(theirs)
        .map_err(|e| format!("{e} (device {peer})"))?;
    Ok((conn, version))
}

pub(super) enum Served {
    Stop,
    Broken,
    Replaced((Conn, u8)),
}
