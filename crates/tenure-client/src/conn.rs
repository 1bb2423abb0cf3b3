//! The client's TCP connections, with the writes of one scheduler turn coalesced.
//!
//! hyper's HTTP/2 client sends a unary request in two flushes: the HEADERS frame first,
//! then the DATA frame once the stream has been given send capacity, which happens in a
//! later poll of the connection task. On a plain socket that is two `writev`s about
//! 100 µs apart, and the server wakes up and reads twice for one request.
//!
//! [`Coalesced`] accepts writes into a buffer and, at a flush, lets the task go round the
//! scheduler once before writing (it wakes itself and answers `Pending` a single time).
//! Whatever else became ready meanwhile — the DATA frame of the same request, frames of
//! other requests on the connection — joins the same `write`. It is Nagle's algorithm
//! without its timer: the delay is one turn of the runtime, not an ACK or 40 ms, and a
//! flush always completes on the second poll.
//!
//! With TLS ([`crate::tls::ClientTls`]) the coalescing sits above the encryption: one
//! flush is one TLS record (or a few, past 16 KiB) and one `write`.

use crate::tls::ClientTls;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, BufWriter, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::Uri;
use tower_service::Service;

/// Buffer size: writes up to this size wait for the flush; larger ones go out at once.
const HIGH_WATER: usize = 64 * 1024;

/// A stream whose flushes are deferred by one scheduler turn; see the module docs. The
/// buffering is tokio's [`BufWriter`]; this adds the one yield before a flush.
#[derive(Debug)]
pub struct Coalesced<S> {
    inner: BufWriter<S>,
    /// The pending flush has already yielded once.
    yielded: bool,
}

impl<S: AsyncWrite> Coalesced<S> {
    /// Wrap `inner`.
    pub fn new(inner: S) -> Coalesced<S> {
        Coalesced {
            inner: BufWriter::with_capacity(HIGH_WATER, inner),
            yielded: false,
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Coalesced<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Coalesced<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // One turn of the scheduler before bytes leave, so that what becomes ready
        // meanwhile joins them; an empty flush does not wait.
        if !self.inner.buffer().is_empty() && !self.yielded {
            self.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
        self.yielded = false;
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A connection to a device: plain TCP, or TLS over TCP.
#[derive(Debug)]
pub enum Stream {
    /// Plaintext.
    Plain(TcpStream),
    /// TLS (rustls).
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, data),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, data),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The channel's connector: hyper-util's `HttpConnector` (name resolution, TCP without
/// Nagle's delay), a TLS handshake when the client has TLS settings, and the connection's
/// writes [`Coalesced`].
#[derive(Clone)]
pub struct Connector {
    http: HttpConnector,
    tls: Option<tokio_rustls::TlsConnector>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Connector {
    /// A connector for `http://host:port` (and `https://host:port`) endpoints; TLS on
    /// every connection when `tls` is given, whatever the scheme.
    pub fn new(tls: Option<&ClientTls>) -> Connector {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.enforce_http(false);
        Connector {
            http,
            tls: tls.map(ClientTls::connector),
        }
    }
}

/// Why a connection could not be made (hyper-util does not export its error type).
type ConnectError = Box<dyn std::error::Error + Send + Sync>;

type Connecting = Pin<
    Box<dyn Future<Output = Result<TokioIo<Coalesced<Stream>>, ConnectError>> + Send + 'static>,
>;

impl Service<Uri> for Connector {
    type Response = TokioIo<Coalesced<Stream>>;
    type Error = ConnectError;
    type Future = Connecting;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Connecting {
        let tls = self.tls.clone();
        let host = uri.host().unwrap_or_default().to_string();
        let endpoint = uri.authority().map(|a| a.to_string()).unwrap_or_default();
        let connecting = self.http.call(uri);
        Box::pin(async move {
            let tcp = connecting.await?.into_inner();
            let stream = match tls {
                None => Stream::Plain(tcp),
                Some(tls) => {
                    let name = crate::tls::server_name(&host)
                        .ok_or_else(|| format!("{host:?} is not a valid TLS server name"))?;
                    let s = tls
                        .connect(name, tcp)
                        .await
                        .map_err(|e| crate::tls::HandshakeError::new(&endpoint, &e))?;
                    Stream::Tls(Box::new(s))
                }
            };
            Ok(TokioIo::new(Coalesced::new(stream)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Writes before a flush reach the peer as one read, after one yield.
    #[tokio::test]
    async fn writes_before_a_flush_leave_together() {
        let (a, mut b) = tokio::io::duplex(1024);
        let mut a = Coalesced::new(a);
        a.write_all(b"headers").await.unwrap();
        a.write_all(b"+data").await.unwrap();
        // Nothing leaves before the flush.
        let mut buf = [0u8; 64];
        let early = tokio::time::timeout(Duration::from_millis(20), b.read(&mut buf)).await;
        assert!(early.is_err(), "bytes left before the flush");
        a.flush().await.unwrap();
        let n = b.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"headers+data");
    }

    /// A flush yields exactly once: its second poll completes.
    #[tokio::test]
    async fn a_flush_yields_once() {
        let (a, _b) = tokio::io::duplex(1024);
        let mut a = Coalesced::new(a);
        a.write_all(b"x").await.unwrap();
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(Pin::new(&mut a).poll_flush(&mut cx).is_pending());
        assert!(matches!(
            Pin::new(&mut a).poll_flush(&mut cx),
            Poll::Ready(Ok(()))
        ));
        // An empty flush does not yield.
        assert!(matches!(
            Pin::new(&mut a).poll_flush(&mut cx),
            Poll::Ready(Ok(()))
        ));
    }

    /// Past the high-water mark, a write drains the buffer first.
    #[tokio::test]
    async fn a_full_buffer_is_written_without_a_flush() {
        let (a, mut b) = tokio::io::duplex(4 * HIGH_WATER);
        let mut a = Coalesced::new(a);
        a.write_all(&vec![7u8; HIGH_WATER]).await.unwrap();
        a.write_all(b"more").await.unwrap();
        let mut got = vec![0u8; HIGH_WATER];
        b.read_exact(&mut got).await.unwrap();
        assert!(got.iter().all(|&x| x == 7));
    }
}
