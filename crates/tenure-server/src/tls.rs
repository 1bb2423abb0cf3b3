//! TLS on a device's two ports (DESIGN §8, Security), with rustls and its *ring* provider
//! chosen explicitly.
//!
//! - **Client port**: TLS with the device's certificate. A client may present a certificate
//!   of the cluster's CA (verified when presented; not required; one of another CA fails
//!   the handshake). Its subject common name reaches the services as the connection's
//!   [`ClientConnInfo`], which [`crate::auth`] takes as the caller's identity. A client that speaks
//!   plaintext HTTP/2 to it is answered with an HTTP/2 GOAWAY saying that TLS is required
//!   ([`tenure_client::tls::plaintext_refusal`]), so it fails with a reason.
//! - **Peer port**: mutual TLS. Both sides present a certificate signed by the cluster's
//!   CA; a peer without one (none, or one of another CA) fails the handshake, which is
//!   logged with its reason, and nothing else changes (see [`crate::transport`]).
//!
//! The files come from the `[tls]` section of the configuration ([`TlsFiles`]); without it
//! both ports are plaintext. `tenure cluster up` generates them ([`crate::certs`]).

use rustls::pki_types::{CertificateDer, ServerName};
use serde::{Deserialize, Serialize};
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tenure_client::tls::{Identity, TlsError, load_roots, provider};
use tenure_core::ids::DeviceId;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// The `[tls]` section: PEM files of the cluster's CA and of this device's certificate and
/// key. Relative paths are relative to the process's working directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// The cluster's CA certificate: peers (and client certificates) must be signed by it.
    pub ca: PathBuf,
    /// This device's certificate (chain), signed by the CA; presented on both ports.
    pub cert: PathBuf,
    /// This device's private key.
    pub key: PathBuf,
}

/// A device's loaded TLS configurations.
#[derive(Clone)]
pub struct DeviceTls {
    /// The client port's (client certificates optional).
    pub client_port: Arc<rustls::ServerConfig>,
    /// The peer port's accepting side (a peer certificate of the CA required).
    pub peer_accept: Arc<rustls::ServerConfig>,
    /// The peer port's dialing side (presents this device's certificate).
    pub peer_dial: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for DeviceTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceTls").finish_non_exhaustive()
    }
}

impl DeviceTls {
    /// Load the files of `[tls]`. Every failure names the file.
    pub fn load(files: &TlsFiles) -> Result<DeviceTls, TlsError> {
        let roots = Arc::new(load_roots(&files.ca)?);
        let identity = Identity::load(&files.cert, &files.key)?;
        let verifier = |optional: bool| {
            let b = rustls::server::WebPkiClientVerifier::builder_with_provider(
                roots.clone(),
                provider(),
            );
            let b = if optional {
                b.allow_unauthenticated()
            } else {
                b
            };
            b.build().map_err(|e| TlsError::Rejected {
                what: "CA certificate",
                path: files.ca.clone(),
                reason: e.to_string(),
            })
        };
        let server = |optional: bool, alpn: Vec<Vec<u8>>| -> Result<_, TlsError> {
            let mut c = rustls::ServerConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .map_err(|e| TlsError::Config(e.to_string()))?
                .with_client_cert_verifier(verifier(optional)?)
                .with_single_cert(identity.certs.clone(), identity.key.clone_key())
                .map_err(|e| identity.rejected(e))?;
            c.alpn_protocols = alpn;
            Ok(Arc::new(c))
        };
        let client_port = server(true, vec![b"h2".to_vec()])?;
        let peer_accept = server(false, Vec::new())?;
        let peer_dial = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_root_certificates(roots.clone())
            .with_client_auth_cert(identity.certs.clone(), identity.key.clone_key())
            .map_err(|e| identity.rejected(e))?;
        Ok(DeviceTls {
            client_port,
            peer_accept,
            peer_dial: Arc::new(peer_dial),
        })
    }

    /// The peer transport's side of it.
    pub fn peer(&self) -> PeerTls {
        PeerTls {
            acceptor: TlsAcceptor::from(self.peer_accept.clone()),
            connector: TlsConnector::from(self.peer_dial.clone()),
        }
    }
}

/// Mutual TLS on the peer port: how the transport accepts and dials.
#[derive(Clone)]
pub struct PeerTls {
    /// Accepts connections from peers (their certificate is required).
    pub acceptor: TlsAcceptor,
    /// Dials peers (presents this device's certificate).
    pub connector: TlsConnector,
}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerTls").finish_non_exhaustive()
    }
}

/// A connection on a TLS port, or on a plaintext one.
#[derive(Debug)]
pub enum Conn {
    /// Plaintext.
    Plain(TcpStream),
    /// TLS (either side of it).
    Tls(Box<tokio_rustls::TlsStream<TcpStream>>),
}

/// The name a device's certificate carries for its id (a DNS subject alternative name no
/// resolver is ever asked about). The peer port checks it both ways: a dialer verifies
/// that the device answering is the one it dialed, an acceptor that the certificate of
/// the device saying `Hello` names that device.
pub fn peer_name(id: DeviceId) -> String {
    format!("{id}.peers.tenure")
}

/// Whether `cert` (already verified against the CA by the handshake) names device `id`.
pub fn names_device(cert: &CertificateDer<'_>, id: DeviceId) -> bool {
    let Ok(name) = ServerName::try_from(peer_name(id)) else {
        return false;
    };
    webpki::EndEntityCert::try_from(cert)
        .is_ok_and(|ee| ee.verify_is_valid_for_subject_name(&name).is_ok())
}

impl Conn {
    /// The certificate the other side presented (TLS only).
    pub fn peer_certificate(&self) -> Option<&CertificateDer<'static>> {
        match self {
            Conn::Plain(_) => None,
            Conn::Tls(s) => s.get_ref().1.peer_certificates()?.first(),
        }
    }

    fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(s) => s.get_ref().0,
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, b),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, b),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(s) => s.is_write_vectored(),
            Conn::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// What the services know of a client port connection (a request extension).
#[derive(Clone, Debug)]
pub struct ClientConnInfo {
    /// Its addresses.
    pub tcp: tonic::transport::server::TcpConnectInfo,
    /// The subject common name of the certificate the client presented, which the
    /// handshake verified against the cluster's CA (empty when it names none); none
    /// without a certificate.
    pub cert_cn: Option<String>,
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = ClientConnInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        ClientConnInfo {
            tcp: self.tcp().connect_info(),
            cert_cn: (self.peer_certificate()).map(|c| common_name(c).unwrap_or_default()),
        }
    }
}

/// One DER element at the start of `b`: its tag, its contents and what follows it.
fn der(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, b) = b.split_first()?;
    let (&first, mut b) = b.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || b.len() < n {
            return None;
        }
        let len = b[..n].iter().fold(0, |l, &x| l << 8 | usize::from(x));
        b = &b[n..];
        len
    };
    (b.len() >= len).then(|| (tag, &b[..len], &b[len..]))
}

/// The subject common name (OID 2.5.4.3) of a certificate, in UTF-8 or printable
/// characters: what an identity is named by. Walks `Certificate → tbsCertificate →
/// subject` (RFC 5280 §4.1) and nothing more.
pub fn common_name(cert: &CertificateDer<'_>) -> Option<String> {
    const SEQUENCE: u8 = 0x30;
    let (SEQUENCE, cert, _) = der(cert)? else {
        return None;
    };
    let (SEQUENCE, mut tbs, _) = der(cert)? else {
        return None;
    };
    let mut next = || {
        let (tag, contents, rest) = der(tbs)?;
        tbs = rest;
        Some((tag, contents))
    };
    // [0] version (absent in v1), serial, signature algorithm, issuer, validity, subject.
    if next()?.0 == 0xa0 {
        next()?;
    }
    for _ in 0..3 {
        next()?;
    }
    let (SEQUENCE, mut rdns) = next()? else {
        return None;
    };
    while let Some((0x31, mut set, rest)) = der(rdns) {
        rdns = rest;
        while let Some((SEQUENCE, attr, rest)) = der(set) {
            set = rest;
            let (0x06, oid, value) = der(attr)? else {
                return None;
            };
            if oid == [0x55, 0x04, 0x03] {
                // UTF8String, PrintableString, IA5String.
                let (0x0c | 0x13 | 0x16, text, _) = der(value)? else {
                    return None;
                };
                return String::from_utf8(text.to_vec()).ok();
            }
        }
    }
    None
}

/// How long a client's TLS handshake may take before its connection is closed.
const CLIENT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes under way at once on the client port; more connections wait to be accepted.
const CLIENT_HANDSHAKES_MAX: usize = 256;

/// The client port's accepted connections, as tonic's `serve_with_incoming` takes them:
/// plain TCP, or TLS once each connection's handshake has completed. Handshakes run
/// concurrently, so a slow or silent client holds up no other; a failed one is logged and
/// its connection closed.
pub fn client_incoming(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    stop: CancellationToken,
) -> impl futures::Stream<Item = io::Result<Conn>> + Send + 'static {
    let (tx, rx) = mpsc::channel::<io::Result<Conn>>(64);
    let acceptor = tls.map(TlsAcceptor::from);
    let slots = Arc::new(tokio::sync::Semaphore::new(CLIENT_HANDSHAKES_MAX));
    tokio::spawn(async move {
        loop {
            let (tcp, remote) = tokio::select! {
                _ = stop.cancelled() => return,
                r = listener.accept() => match r {
                    Ok(x) => x,
                    Err(e) => {
                        warn!("client accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            // Small request/answer pairs: no Nagle delay on the client connections.
            let _ = tcp.set_nodelay(true);
            let Some(acceptor) = acceptor.clone() else {
                if tx.send(Ok(Conn::Plain(tcp))).await.is_err() {
                    return;
                }
                continue;
            };
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let _slot = slot;
                let r = tokio::time::timeout(
                    CLIENT_HANDSHAKE_TIMEOUT,
                    accept_client(acceptor, tcp, remote),
                )
                .await;
                match r {
                    Ok(Some(conn)) => {
                        let _ = tx.send(Ok(conn)).await;
                    }
                    Ok(None) => {}
                    Err(_) => debug!(%remote, "client TLS handshake timed out"),
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// The first bytes of an HTTP/2 client's connection preface.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0";

/// One client connection's handshake; a plaintext HTTP/2 client is told TLS is required.
async fn accept_client(
    acceptor: TlsAcceptor,
    mut tcp: TcpStream,
    remote: SocketAddr,
) -> Option<Conn> {
    let mut first = [0u8; 3];
    let n = tcp.peek(&mut first).await.ok()?;
    if n > 0 && H2_PREFACE.starts_with(&first[..n]) {
        metrics::counter!("tenure_client_tls_refused_total", "reason" => "plaintext").increment(1);
        info!(%remote, "plaintext client refused on the TLS client port");
        let _ = tcp
            .write_all(&tenure_client::tls::plaintext_refusal())
            .await;
        let _ = tcp.shutdown().await;
        // Read what the client sent until it closes (bounded), so that closing with
        // unread data does not reset the connection before the client reads the GOAWAY.
        let mut sink = [0u8; 1024];
        let drain = async {
            use tokio::io::AsyncReadExt;
            while matches!(tcp.read(&mut sink).await, Ok(n) if n > 0) {}
        };
        let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
        return None;
    }
    match acceptor.accept(tcp).await {
        Ok(s) => Some(Conn::Tls(Box::new(tokio_rustls::TlsStream::Server(s)))),
        Err(e) => {
            metrics::counter!("tenure_client_tls_refused_total", "reason" => "handshake")
                .increment(1);
            info!(%remote, "client TLS handshake failed: {e}");
            None
        }
    }
}
