//! Peer transport: one ordered TCP connection per device pair.
//!
//! The device with the lower id dials, the higher one accepts, so each pair shares exactly
//! one connection and messages between two devices arrive in the order they were sent
//! (FIFO channels, as SafeTalk and Chandy-Lamport snapshots need). Messages lost when a
//! connection breaks are lost, never reordered: the protocol core tolerates loss.
//!
//! Each peer has a task that owns the connection: it dials with exponential backoff (or
//! waits for the accepted connection), then writes the peer's outbound queue while a reader
//! task forwards incoming frames to the device driver. The outbound queue is bounded; when
//! it is full (peer down for long) new messages are dropped and counted.
//!
//! The set of peers changes at runtime (cluster membership, DESIGN §6). The configured
//! peers are known from the start; the driver adds every member the membership record
//! names as soon as it adopts the record ([`Transport::set_peer`], with the record's peer
//! address: an admitted device always has one) and removes the ones that retired
//! ([`Transport::remove_peer`]). A device started to join knows every member from its
//! configuration. So when the coordinator admits a device, the members with lower ids
//! dial it as soon as they hold the record naming it, and a joining device with a lower
//! id than a member keeps dialing that member, which accepts it once its record names
//! the newcomer (until then the connection is refused, as is any device that is neither
//! configured nor in the record). A message for a device whose address is not known
//! yet waits in its queue until the address or a connection arrives. A removed peer is
//! closed after [`TransportConfig::linger`] (the message telling it that it retired
//! leaves first) and its connections are refused from then on.
//!
//! With TLS ([`TransportConfig::tls`]; [`crate::tls`]) every connection is mutual TLS
//! before anything else: the dialer checks the accepting device's certificate against the
//! cluster's CA and its address, the acceptor requires a certificate of the same CA. A
//! connection whose handshake fails (no certificate, one of another CA, plaintext) is
//! closed with a logged reason and counted; nothing else changes.
//!
//! Frames are length-delimited with a maximum size ([`crate::wire`]). A connection opens
//! with a `Hello` each way; a frame that is oversized, malformed, of another wire version,
//! or claims another sender closes that connection with a logged reason and changes
//! nothing else.

use crate::tls::{Conn as Stream, PeerTls};
use crate::wire;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tenure_core::ids::DeviceId;
use tenure_core::msg::Msg;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_util::codec::{Framed, LengthDelimitedCodec};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

mod accept;
mod peer;

use accept::accept_loop;
use peer::PeerTask;

/// A message that arrived from a peer (or from this device to itself).
pub type Inbound = (DeviceId, Msg);

/// Transport settings.
#[derive(Clone, Debug)]
pub struct TransportConfig {
    /// This device.
    pub me: DeviceId,
    /// The devices known at start and their peer addresses.
    pub peers: Vec<(DeviceId, SocketAddr)>,
    /// Largest frame accepted or sent.
    pub max_frame_bytes: usize,
    /// Outbound queue length per peer.
    pub queue_len: usize,
    /// First reconnect delay; doubles up to `backoff_max`.
    pub backoff_min: Duration,
    /// Largest reconnect delay.
    pub backoff_max: Duration,
    /// How long a handshake may take.
    pub handshake_timeout: Duration,
    /// How long a removed peer stays reachable, so what was sent to it last leaves.
    pub linger: Duration,
    /// Mutual TLS on every connection (none: plaintext).
    pub tls: Option<PeerTls>,
    /// The wire versions this device speaks ([`wire::Versions::THIS_BUILD`]).
    pub versions: wire::Versions,
}

impl TransportConfig {
    /// Defaults for `me` with these peers.
    pub fn new(me: DeviceId, peers: Vec<(DeviceId, SocketAddr)>) -> TransportConfig {
        TransportConfig {
            me,
            peers,
            max_frame_bytes: wire::MAX_FRAME_BYTES,
            queue_len: 8192,
            backoff_min: Duration::from_millis(20),
            backoff_max: Duration::from_millis(1000),
            handshake_timeout: Duration::from_secs(3),
            linger: Duration::from_secs(5),
            tls: None,
            versions: wire::Versions::THIS_BUILD,
        }
    }
}

type Conn = Framed<Stream, LengthDelimitedCodec>;

/// One peer's task handles.
#[derive(Debug)]
struct Peer {
    queue: mpsc::Sender<Msg>,
    accepted: mpsc::Sender<(Conn, u8)>,
    addr: watch::Sender<Option<SocketAddr>>,
    stop: CancellationToken,
    /// A removal under way (its serial): the peer goes when it is due.
    leaving: Option<u64>,
    /// The wire version of its latest connection (0: never connected).
    version: Arc<std::sync::atomic::AtomicU8>,
}

/// The peers, shared by the sending side, the accept loop and removals.
#[derive(Debug, Default)]
struct Table {
    peers: HashMap<DeviceId, Peer>,
    /// Devices that left the cluster: never a peer again.
    removed: HashSet<DeviceId>,
    next_removal: u64,
}

#[derive(Debug)]
struct Shared {
    cfg: TransportConfig,
    inbox: mpsc::Sender<Inbound>,
    stop: CancellationToken,
    table: Mutex<Table>,
    /// The runtime the transport's tasks run on (the device's core thread), whichever
    /// thread adds a peer.
    rt: tokio::runtime::Handle,
}

impl Shared {
    fn table(&self) -> MutexGuard<'_, Table> {
        // Every change to the table is a single insert or remove: a panic elsewhere
        // cannot leave it half-changed.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The peer `id`, started if new (at `addr`, or waiting for an address or a
    /// connection), its address updated if `addr` is newer. None for this device and for
    /// a removed one once its linger time is over.
    fn peer<'a>(
        self: &Arc<Self>,
        table: &'a mut Table,
        id: DeviceId,
        addr: Option<SocketAddr>,
    ) -> Option<&'a Peer> {
        if let Some(p) = table.peers.get(&id) {
            if addr.is_some() && *p.addr.borrow() != addr && p.leaving.is_none() {
                info!(peer = %id, addr = ?addr, "peer address updated");
                p.addr.send_replace(addr);
            }
            return table.peers.get(&id);
        }
        if id == self.cfg.me || table.removed.contains(&id) {
            return None;
        }
        let (qtx, qrx) = mpsc::channel(self.cfg.queue_len);
        let (ctx, crx) = mpsc::channel(4);
        let (atx, arx) = watch::channel(addr);
        let stop = self.stop.child_token();
        let version = Arc::new(std::sync::atomic::AtomicU8::new(0));
        let task = PeerTask {
            version: version.clone(),
            cfg: self.cfg.clone(),
            peer: id,
            addr: arx,
            queue: qrx,
            accepted: crx,
            inbox: self.inbox.clone(),
            stop: stop.clone(),
        };
        self.rt.spawn(task.run());
        table.peers.insert(
            id,
            Peer {
                queue: qtx,
                accepted: ctx,
                addr: atx,
                stop,
                leaving: None,
                version,
            },
        );
        table.peers.get(&id)
    }
}

/// Sending side of the transport (cheap to clone), and the peer set's controls.
#[derive(Clone, Debug)]
pub struct Transport {
    shared: Arc<Shared>,
}

impl Transport {
    /// Start the transport on `listener`; incoming messages go to `inbox`. Its tasks run
    /// on the current runtime and stop when `stop` is cancelled.
    pub fn start(
        cfg: TransportConfig,
        listener: TcpListener,
        inbox: mpsc::Sender<Inbound>,
        stop: CancellationToken,
    ) -> Transport {
        let shared = Arc::new(Shared {
            cfg: cfg.clone(),
            inbox,
            stop: stop.clone(),
            table: Mutex::new(Table::default()),
            rt: tokio::runtime::Handle::current(),
        });
        {
            let mut table = shared.table();
            for &(peer, addr) in &cfg.peers {
                shared.peer(&mut table, peer, Some(addr));
            }
        }
        tokio::spawn(accept_loop(shared.clone(), listener, stop));
        Transport { shared }
    }

    /// Reach `peer` at `addr` from now on: a new peer (a member admitted at runtime), or
    /// a known one's new address. Ignored for this device and removed ones.
    pub fn set_peer(&self, peer: DeviceId, addr: SocketAddr) {
        let mut table = self.shared.table();
        let known = table.peers.contains_key(&peer);
        if self.shared.peer(&mut table, peer, Some(addr)).is_some() && !known {
            info!(%peer, %addr, "peer added");
        }
    }

    /// `peer` left the cluster: close it after the linger time (what was queued for it
    /// leaves first), and refuse its connections from then on.
    pub fn remove_peer(&self, peer: DeviceId) {
        if peer == self.shared.cfg.me {
            return;
        }
        let serial = {
            let mut table = self.shared.table();
            if !table.removed.insert(peer) {
                return;
            }
            let serial = table.next_removal;
            table.next_removal += 1;
            match table.peers.get_mut(&peer) {
                Some(p) => p.leaving = Some(serial),
                None => return,
            }
            serial
        };
        info!(%peer, linger = ?self.shared.cfg.linger, "peer left the cluster; closing its connection");
        let shared = self.shared.clone();
        self.shared.rt.clone().spawn(async move {
            tokio::select! {
                _ = shared.stop.cancelled() => return,
                _ = tokio::time::sleep(shared.cfg.linger) => {}
            }
            let mut table = shared.table();
            if table
                .peers
                .get(&peer)
                .is_some_and(|p| p.leaving == Some(serial))
                && let Some(p) = table.peers.remove(&peer)
            {
                p.stop.cancel();
                debug!(%peer, "peer closed");
            }
        });
    }

    /// The oldest wire version among the peers' latest connections: 0 while a peer has
    /// never connected, this device's newest with no peer at all. Features a version
    /// adds are used once every peer speaks it (a rolling upgrade is over).
    pub fn oldest_peer_version(&self) -> u8 {
        let table = self.shared.table();
        (table.peers.values())
            .filter(|p| p.leaving.is_none())
            .map(|p| p.version.load(std::sync::atomic::Ordering::Relaxed))
            .min()
            .unwrap_or(self.shared.cfg.versions.newest)
    }

    /// [`Self::oldest_peer_version`] over the peers that have connected (the newest
    /// version this device speaks if none has).
    pub fn oldest_connected_peer_version(&self) -> u8 {
        let table = self.shared.table();
        (table.peers.values())
            .filter(|p| p.leaving.is_none())
            .map(|p| p.version.load(std::sync::atomic::Ordering::Relaxed))
            .filter(|v| *v != 0)
            .min()
            .unwrap_or(self.shared.cfg.versions.newest)
    }

    /// The current peers and their addresses (none: reached only over connections they
    /// open), ascending.
    pub fn peers(&self) -> Vec<(DeviceId, Option<SocketAddr>)> {
        let table = self.shared.table();
        let mut out: Vec<_> = (table.peers.iter())
            .map(|(d, p)| (*d, *p.addr.borrow()))
            .collect();
        out.sort();
        out
    }

    /// Queue a message for `to`. Never blocks: returns false when it was dropped (a removed
    /// device, or a full queue). A device not known yet gets a queue that waits for its
    /// address or its connection.
    pub fn send(&self, to: DeviceId, msg: Msg) -> bool {
        let shared = &self.shared;
        let sent = if to == shared.cfg.me {
            shared.inbox.try_send((to, msg)).is_ok()
        } else {
            let mut table = shared.table();
            let Some(p) = shared.peer(&mut table, to, None) else {
                debug!(peer = %to, "message for a device that left the cluster dropped");
                return false;
            };
            let sent = p.queue.try_send(msg).is_ok();
            if !sent {
                debug!(peer = %to, "outbound queue full or closed; message dropped");
            }
            sent
        };
        if !sent {
            metrics::counter!("tenure_peer_dropped_total").increment(1);
        }
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::peer::dial;
    use super::*;
    use tenure_core::election::{ElectionMsg, Term};

    fn alive(n: u64) -> Msg {
        Msg::Election(ElectionMsg::Alive {
            term: Term {
                n,
                leader: DeviceId(1),
            },
        })
    }

    struct Node {
        t: Transport,
        addr: SocketAddr,
        inbox: mpsc::Receiver<Inbound>,
    }

    async fn node(me: u64, peers: Vec<(u64, SocketAddr)>, stop: &CancellationToken) -> Node {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        node_on(l, me, peers, stop)
    }

    fn node_on(
        l: TcpListener,
        me: u64,
        peers: Vec<(u64, SocketAddr)>,
        stop: &CancellationToken,
    ) -> Node {
        let addr = l.local_addr().unwrap();
        let peers = peers.into_iter().map(|(d, a)| (DeviceId(d), a)).collect();
        let mut cfg = TransportConfig::new(DeviceId(me), peers);
        cfg.linger = Duration::from_millis(200);
        let (tx, inbox) = mpsc::channel(64);
        let t = Transport::start(cfg, l, tx, stop.clone());
        Node { t, addr, inbox }
    }

    /// Mutual TLS settings for device `id` with a certificate of the CA in `ca_dir`,
    /// trusting the CA in `trust_dir`.
    fn peer_tls(ca_dir: &std::path::Path, trust_dir: &std::path::Path, id: u64) -> PeerTls {
        peer_tls_naming(ca_dir, trust_dir, id, id)
    }

    /// Device `id`'s settings with a certificate naming device `named`.
    fn peer_tls_naming(
        ca_dir: &std::path::Path,
        trust_dir: &std::path::Path,
        id: u64,
        named: u64,
    ) -> PeerTls {
        let ca = crate::certs::Authority::load(ca_dir).unwrap();
        let (cert, key) = (
            ca_dir.join(format!("d{id}-as-d{named}.pem")),
            ca_dir.join(format!("d{id}-as-d{named}.key")),
        );
        ca.issue_device(DeviceId(named), &[], &cert, &key).unwrap();
        crate::tls::DeviceTls::load(&crate::tls::TlsFiles {
            ca: trust_dir.join(crate::certs::CA_CERT),
            cert,
            key,
        })
        .unwrap()
        .peer()
    }

    fn tls_node(
        me: u64,
        peers: Vec<(u64, SocketAddr)>,
        l: TcpListener,
        tls: PeerTls,
        stop: &CancellationToken,
    ) -> Node {
        let addr = l.local_addr().unwrap();
        let peers = peers.into_iter().map(|(d, a)| (DeviceId(d), a)).collect();
        let mut cfg = TransportConfig::new(DeviceId(me), peers);
        cfg.tls = Some(tls);
        let (tx, inbox) = mpsc::channel(64);
        let t = Transport::start(cfg, l, tx, stop.clone());
        Node { t, addr, inbox }
    }

    /// With mutual TLS, two devices of the cluster's CA talk; a device whose certificate
    /// is of another CA is refused in both directions (it neither reaches a member nor is
    /// reached), and the members go on talking.
    #[tokio::test]
    async fn transport_with_mutual_tls_refuses_a_device_of_another_ca() {
        let (ours, theirs) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        crate::certs::Authority::create(ours.path()).unwrap();
        crate::certs::Authority::create(theirs.path()).unwrap();
        let stop = CancellationToken::new();
        let ls: Vec<TcpListener> =
            futures::future::join_all((0..3).map(|_| TcpListener::bind("127.0.0.1:0")))
                .await
                .into_iter()
                .map(Result::unwrap)
                .collect();
        let addrs: Vec<SocketAddr> = ls.iter().map(|l| l.local_addr().unwrap()).collect();
        let all = |me: u64| -> Vec<(u64, SocketAddr)> {
            (1..=3u64)
                .filter(|d| *d != me)
                .map(|d| (d, addrs[d as usize - 1]))
                .collect()
        };
        let mut ls = ls.into_iter();
        let (o, t) = (ours.path(), theirs.path());
        let mut a = tls_node(1, all(1), ls.next().unwrap(), peer_tls(o, o, 1), &stop);
        let mut b = tls_node(2, all(2), ls.next().unwrap(), peer_tls(o, o, 2), &stop);
        // Device 3 holds a certificate of another CA but trusts ours.
        let mut c = tls_node(3, all(3), ls.next().unwrap(), peer_tls(t, o, 3), &stop);
        assert!(a.t.send(DeviceId(2), alive(1)));
        assert_eq!(recv(&mut b).await, (DeviceId(1), alive(1)));
        assert!(b.t.send(DeviceId(1), alive(2)));
        assert_eq!(recv(&mut a).await, (DeviceId(2), alive(2)));
        // Device 3 has the highest id: the members dial it, and refuse the certificate
        // it answers with. (The accepting side's refusal of a foreign dialer is in the
        // process test, `crates/tenure/tests/integration/tls.rs`.)
        assert!(c.t.send(DeviceId(1), alive(3)));
        assert!(a.t.send(DeviceId(3), alive(4)));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            a.inbox.try_recv().is_err(),
            "nothing from the foreign device"
        );
        assert!(
            c.inbox.try_recv().is_err(),
            "nothing reaches the foreign device"
        );
        // The members still talk.
        assert!(a.t.send(DeviceId(2), alive(5)));
        assert_eq!(recv(&mut b).await, (DeviceId(1), alive(5)));
        stop.cancel();
    }

    /// A certificate of the cluster's CA speaks only for the device it names: device 1
    /// holding device 2's certificate is refused by the devices it dials (its `Hello`
    /// says d1), and device 4 holding device 3's is refused by the devices dialing it
    /// (they dialed d4); the genuine devices go on talking.
    #[tokio::test]
    async fn transport_with_mutual_tls_refuses_a_certificate_naming_another_device() {
        let ca = tempfile::tempdir().unwrap();
        crate::certs::Authority::create(ca.path()).unwrap();
        let stop = CancellationToken::new();
        let ls: Vec<TcpListener> =
            futures::future::join_all((0..4).map(|_| TcpListener::bind("127.0.0.1:0")))
                .await
                .into_iter()
                .map(Result::unwrap)
                .collect();
        let addrs: Vec<SocketAddr> = ls.iter().map(|l| l.local_addr().unwrap()).collect();
        let all = |me: u64| -> Vec<(u64, SocketAddr)> {
            (1..=4u64)
                .filter(|d| *d != me)
                .map(|d| (d, addrs[d as usize - 1]))
                .collect()
        };
        let mut ls = ls.into_iter();
        let o = ca.path();
        let mut n1 = tls_node(
            1,
            all(1),
            ls.next().unwrap(),
            peer_tls_naming(o, o, 1, 2),
            &stop,
        );
        let mut n2 = tls_node(2, all(2), ls.next().unwrap(), peer_tls(o, o, 2), &stop);
        let mut n3 = tls_node(3, all(3), ls.next().unwrap(), peer_tls(o, o, 3), &stop);
        let mut n4 = tls_node(
            4,
            all(4),
            ls.next().unwrap(),
            peer_tls_naming(o, o, 4, 3),
            &stop,
        );
        assert!(n2.t.send(DeviceId(3), alive(1)));
        assert_eq!(recv(&mut n3).await, (DeviceId(2), alive(1)));
        assert!(n3.t.send(DeviceId(2), alive(2)));
        assert_eq!(recv(&mut n2).await, (DeviceId(3), alive(2)));
        // Lower ids dial: device 1 dials 2 and 3; 2 and 3 dial device 4.
        assert!(n1.t.send(DeviceId(2), alive(3)));
        assert!(n1.t.send(DeviceId(3), alive(4)));
        assert!(n2.t.send(DeviceId(4), alive(5)));
        assert!(n3.t.send(DeviceId(4), alive(6)));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(n2.inbox.try_recv().is_err(), "nothing from device 1 to 2");
        assert!(n3.inbox.try_recv().is_err(), "nothing from device 1 to 3");
        assert!(n4.inbox.try_recv().is_err(), "nothing reaches device 4");
        assert!(n1.inbox.try_recv().is_err(), "nothing reaches device 1");
        assert!(n2.t.send(DeviceId(3), alive(7)));
        assert_eq!(recv(&mut n3).await, (DeviceId(2), alive(7)));
        stop.cancel();
    }

    async fn recv(n: &mut Node) -> Inbound {
        tokio::time::timeout(Duration::from_secs(5), n.inbox.recv())
            .await
            .expect("a message in time")
            .expect("inbox open")
    }

    /// A member admitted at runtime: device 1 learns device 2's address from the record
    /// and dials it; what device 2 queued for device 1 before then arrives, in order.
    #[tokio::test]
    async fn transport_reaches_a_peer_added_at_runtime() {
        let stop = CancellationToken::new();
        let mut a = node(1, vec![], &stop).await;
        let mut b = node(2, vec![(1, a.addr)], &stop).await;
        assert!(
            b.t.send(DeviceId(1), alive(1)),
            "queued until device 1 dials"
        );
        assert!(b.t.send(DeviceId(1), alive(2)));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(a.inbox.try_recv().is_err(), "device 1 does not dial yet");
        a.t.set_peer(DeviceId(2), b.addr);
        assert_eq!(recv(&mut a).await, (DeviceId(2), alive(1)));
        assert_eq!(recv(&mut a).await, (DeviceId(2), alive(2)));
        assert!(a.t.send(DeviceId(2), alive(3)));
        assert_eq!(recv(&mut b).await, (DeviceId(1), alive(3)));
        stop.cancel();
    }

    /// A device not known yet (a joining one with a lower id) dials: refused until the
    /// membership record names it, then accepted and answered over.
    #[tokio::test]
    async fn transport_accepts_a_device_once_the_record_names_it() {
        let stop = CancellationToken::new();
        let mut b = node(2, vec![], &stop).await;
        let mut a = node(1, vec![(2, b.addr)], &stop).await;
        assert!(a.t.send(DeviceId(2), alive(1)));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(b.inbox.try_recv().is_err(), "an unknown device is refused");
        assert_eq!(b.t.peers(), vec![]);
        b.t.set_peer(DeviceId(1), a.addr);
        assert_eq!(recv(&mut b).await, (DeviceId(1), alive(1)));
        assert!(b.t.send(DeviceId(1), alive(2)));
        assert_eq!(recv(&mut a).await, (DeviceId(2), alive(2)));
        stop.cancel();
    }

    /// A removed peer still gets what was sent within the linger time, then it is
    /// closed, nothing more is sent to it and its connections are refused.
    #[tokio::test]
    async fn transport_closes_a_removed_peer_after_the_linger_and_refuses_it() {
        let stop = CancellationToken::new();
        let lb = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let b_addr = lb.local_addr().unwrap();
        let mut a = node(1, vec![(2, b_addr)], &stop).await;
        let mut b = node_on(lb, 2, vec![(1, a.addr)], &stop);
        assert!(a.t.send(DeviceId(2), alive(1)));
        assert_eq!(recv(&mut b).await, (DeviceId(1), alive(1)));
        b.t.remove_peer(DeviceId(1));
        assert!(b.t.send(DeviceId(1), alive(2)), "within the linger time");
        assert_eq!(recv(&mut a).await, (DeviceId(2), alive(2)));
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(b.t.peers(), vec![]);
        assert!(
            !b.t.send(DeviceId(1), alive(3)),
            "nothing is sent to a removed peer"
        );
        let r = dial(
            &TransportConfig::new(DeviceId(1), vec![]),
            DeviceId(2),
            b_addr,
        )
        .await;
        assert!(r.is_err(), "a removed device's connection is refused");
        stop.cancel();
    }
}
