//! Proxies on the peer links: delay with jitter, reordering across connections, and cut
//! connections, which this kernel cannot do with `tc netem`.
//!
//! Every host runs one proxy per other device, inside the host's own namespace: a thread
//! of the test process enters the namespace (`setns`), binds `127.0.0.1:PROXY_BASE + j`
//! for every other device `j`, and runs a current-thread tokio runtime there. Each
//! device's configuration names that loopback address as peer `j`'s address, so when
//! device `i` dials `j` it reaches its own host's proxy, which dials `j`'s real address
//! from `i`'s address. The packets between hosts are still the hosts' own, so the
//! nftables faults ([`crate::net`]) apply to them exactly as without the proxy.
//!
//! ```text
//!   ns h1: device 1 ──dial 127.0.0.1:7302──▶ proxy(1→2) ──10.213.X.11 → 10.213.X.12:7100──▶ ns h2: device 2
//! ```
//!
//! What a proxy can do, honestly:
//! - **delay** every byte of a direction (`i→j`) by a base and a uniform jitter. Within a
//!   TCP connection order is kept: a chunk is released no earlier than the one before
//!   it, so jitter spreads the delay but never reorders bytes (it cannot: the transport
//!   is one ordered stream per device pair).
//! - **reorder** across connections: every direction gets a delay of its own, so a
//!   message that `a` sends `b` after one it sent `c` can arrive first, and a reply can
//!   overtake the message it answers on a third link. That is the only reordering an
//!   ordered transport lets through, and the one the protocols must tolerate.
//! - **cut** a link's connection: both sides are closed with a reset and whatever the
//!   proxy still held is lost; the devices see a broken connection and dial again.
//!
//! Nothing the proxy does reaches the clients: their traffic comes from the root
//! namespace to the devices' client ports and never passes through it.

use anyhow::{Context, bail};
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tenure_core::rng::Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::net::{PEER_PORT, TestNet};

/// Port of host `i`'s proxy towards device `j`: `PROXY_BASE + j`, on 127.0.0.1 of `i`.
pub const PROXY_BASE: u16 = 7300;

/// How long a proxy waits for the real peer to accept (a partitioned host's SYNs are
/// dropped; the device's own handshake timeout gives up first).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest chunk read at once.
const CHUNK: usize = 64 * 1024;
/// Chunks held per direction before the proxy stops reading (back-pressure, as TCP).
const HELD_CHUNKS: usize = 64;

/// How one direction of a link is shaped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    /// Added to every chunk.
    pub delay: Duration,
    /// Uniform in `-jitter..=jitter` around `delay` (never below zero, never reordering).
    pub jitter: Duration,
}

/// What the proxies share with the nemesis.
#[derive(Default)]
struct Links {
    /// (from, to) → shape; missing: no delay.
    shapes: Mutex<BTreeMap<(u64, u64), Shape>>,
    /// (lower, higher) → generation; a change cuts the pair's connections.
    cuts: BTreeMap<(u64, u64), watch::Sender<u64>>,
}

impl Links {
    fn shape(&self, from: u64, to: u64) -> Shape {
        let s = self.shapes.lock().unwrap_or_else(|e| e.into_inner());
        s.get(&(from, to)).copied().unwrap_or_default()
    }
}

/// The proxies of every host (threads of this process, one per host). Dropping it stops
/// them and closes every proxied connection.
pub struct Proxies {
    links: Arc<Links>,
    stop: watch::Sender<bool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    devices: u64,
}

/// The address device `i`'s configuration gives peer `j` when the links are proxied.
pub fn peer_addr(j: u64) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, PROXY_BASE + j as u16))
}

impl Proxies {
    /// Start a proxy towards every other device in every host of `net`.
    pub fn start(net: &TestNet, seed: u64) -> anyhow::Result<Proxies> {
        let n = net.hosts.len() as u64;
        let mut links = Links::default();
        for a in 1..=n {
            for b in a + 1..=n {
                links.cuts.insert((a, b), watch::channel(0).0);
            }
        }
        let links = Arc::new(links);
        let (stop, _) = watch::channel(false);
        let mut p = Proxies {
            links,
            stop,
            threads: Vec::new(),
            devices: n,
        };
        for h in &net.hosts {
            let targets: Vec<(u64, SocketAddr)> = (net.hosts.iter())
                .filter(|o| o.id != h.id)
                .map(|o| (o.id, SocketAddr::from((o.addr, PEER_PORT))))
                .collect();
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            let (links, stop, ns, me) = (p.links.clone(), p.stop.subscribe(), h.ns.clone(), h.id);
            let rng = Rng::new(tenure_core::rng::mix64(seed ^ (me << 40)));
            let t = std::thread::Builder::new()
                .name(format!("chaos-proxy-h{me}"))
                .spawn(move || host_thread(&ns, me, targets, links, stop, rng, ready_tx))
                .context("starting a proxy thread")?;
            // Pushed first: a failed start still joins it on drop.
            p.threads.push(t);
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => bail!("proxy in {}: {e}", h.ns),
                Err(_) => bail!("proxy in {} stopped before it was ready", h.ns),
            }
        }
        Ok(p)
    }

    /// Shape the direction `from → to` (bytes device `from` sends device `to`).
    pub fn set(&self, from: u64, to: u64, shape: Shape) {
        let mut s = self.links.shapes.lock().unwrap_or_else(|e| e.into_inner());
        s.insert((from, to), shape);
    }

    /// Shape every direction of every link alike.
    pub fn set_all(&self, shape: Shape) {
        for a in 1..=self.devices {
            for b in 1..=self.devices {
                if a != b {
                    self.set(a, b, shape);
                }
            }
        }
    }

    /// Cut the connection between `a` and `b` (both sides reset; what was held is lost).
    pub fn cut(&self, a: u64, b: u64) {
        if let Some(c) = self.links.cuts.get(&(a.min(b), a.max(b))) {
            c.send_modify(|g| *g += 1);
        }
    }

    /// No delay on any link.
    pub fn clear(&self) {
        let mut s = self.links.shapes.lock().unwrap_or_else(|e| e.into_inner());
        s.clear();
    }
}

impl Drop for Proxies {
    fn drop(&mut self) {
        self.stop.send_replace(true);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Enter `ns` (this thread only) and serve its proxies until `stop`.
fn host_thread(
    ns: &str,
    me: u64,
    targets: Vec<(u64, SocketAddr)>,
    links: Arc<Links>,
    mut stop: watch::Receiver<bool>,
    mut rng: Rng,
    ready: std::sync::mpsc::Sender<anyhow::Result<()>>,
) {
    let setup = || -> anyhow::Result<(tokio::runtime::Runtime, Vec<std::net::TcpListener>)> {
        let path = format!("/run/netns/{ns}");
        let f = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&f),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .with_context(|| format!("entering {ns}"))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let mut ls = Vec::new();
        for (j, _) in &targets {
            let l = std::net::TcpListener::bind(peer_addr(*j))
                .with_context(|| format!("binding {}", peer_addr(*j)))?;
            l.set_nonblocking(true)?;
            ls.push(l);
        }
        Ok((rt, ls))
    };
    let (rt, listeners) = match setup() {
        Ok(x) => x,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let _ = ready.send(Ok(()));
    rt.block_on(async move {
        for ((j, target), l) in targets.into_iter().zip(listeners) {
            let Ok(l) = TcpListener::from_std(l) else {
                continue;
            };
            tokio::spawn(accept(l, me, j, target, links.clone(), rng.fork()));
        }
        let _ = stop.wait_for(|s| *s).await;
    });
    // Dropping the runtime drops every connection task, closing their sockets.
}

async fn accept(
    l: TcpListener,
    me: u64,
    peer: u64,
    target: SocketAddr,
    links: Arc<Links>,
    mut rng: Rng,
) {
    loop {
        let Ok((s, _)) = l.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        tokio::spawn(serve(s, me, peer, target, links.clone(), rng.fork()));
    }
}

/// One proxied connection: `inbound` from device `me`, onward to device `peer`.
async fn serve(
    mut inbound: TcpStream,
    me: u64,
    peer: u64,
    target: SocketAddr,
    links: Arc<Links>,
    mut rng: Rng,
) {
    let Some(mut cut) = links
        .cuts
        .get(&(me.min(peer), me.max(peer)))
        .map(|c| c.subscribe())
    else {
        return;
    };
    cut.borrow_and_update();
    let connect = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target));
    let mut outbound = tokio::select! {
        r = connect => match r {
            Ok(Ok(s)) => s,
            _ => return,
        },
        _ = cut.changed() => return,
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let cut_off = {
        let (ir, iw) = inbound.split();
        let (or, ow) = outbound.split();
        let up = pump(ir, ow, me, peer, &links, rng.fork());
        let down = pump(or, iw, peer, me, &links, rng.fork());
        // Both directions until both end, or until the first fails.
        tokio::select! {
            _ = async { tokio::try_join!(up, down) } => false,
            _ = cut.changed() => true,
        }
    };
    if cut_off {
        // A reset, as a broken network shows it: nothing more is delivered.
        let _ = inbound.set_zero_linger();
        let _ = outbound.set_zero_linger();
    }
}

/// Copy one direction, each chunk released at its arrival plus the direction's delay,
/// and never before the chunk ahead of it. EOF is passed on after the last chunk.
async fn pump(
    mut r: impl tokio::io::AsyncRead + Unpin,
    mut w: impl tokio::io::AsyncWrite + Unpin,
    from: u64,
    to: u64,
    links: &Links,
    mut rng: Rng,
) -> std::io::Result<()> {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(HELD_CHUNKS);
    let read = async move {
        let mut last = Instant::now();
        loop {
            let mut buf = vec![0u8; CHUNK];
            let n = r.read(&mut buf).await?;
            if n == 0 {
                return Ok(());
            }
            buf.truncate(n);
            let s = links.shape(from, to);
            let mut at = Instant::now() + s.delay;
            let j = s.jitter.as_micros() as u64;
            if j > 0 {
                let d = rng.below(2 * j + 1);
                at = if d >= j {
                    at + Duration::from_micros(d - j)
                } else {
                    at.checked_sub(Duration::from_micros(j - d)).unwrap_or(at)
                };
            }
            at = at.max(last);
            last = at;
            if tx.send((at, buf)).await.is_err() {
                return Ok(());
            }
        }
    };
    let write = async move {
        while let Some((at, buf)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            w.write_all(&buf).await?;
        }
        w.shutdown().await
    };
    tokio::try_join!(read, write).map(|_| ())
}
