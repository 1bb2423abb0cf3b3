//! The in-process cluster harness of the server's tests: devices on 127.0.0.1 with
//! ephemeral ports, each on its own tokio runtime, so "crash" is dropping that runtime
//! without any shutdown step (what `kill -9` does to a process).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tenure_client::{Client, ClientOptions, Error};
use tenure_server::auth::{Perm, Rule, TokenConfig, hash_secret};
use tenure_server::config::{ClusterShape, PeerConfig, ServerConfig, TimingOverrides};
use tenure_server::{ServerHandle, start_with_listeners};

pub const STORES: u32 = 8;

pub fn free_addr() -> SocketAddr {
    let port = tenure_server::config::free_local_port().unwrap();
    SocketAddr::from(([127, 0, 0, 1], port))
}

pub struct Node {
    pub cfg: ServerConfig,
    rt: Option<tokio::runtime::Runtime>,
    handle: Option<ServerHandle>,
}

impl Node {
    pub fn start(cfg: ServerConfig) -> Node {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(4)
            .enable_all()
            .build()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let handle = loop {
            let c = cfg.clone();
            let r = rt.block_on(async move {
                let p = tokio::net::TcpListener::bind(c.peer_listen).await;
                let l = tokio::net::TcpListener::bind(c.client_listen).await;
                match (p, l) {
                    (Ok(p), Ok(l)) => start_with_listeners(c, p, l)
                        .await
                        .map_err(|e| e.to_string()),
                    (p, l) => Err(format!("bind: {:?} {:?}", p.err(), l.err())),
                }
            });
            match r {
                Ok(h) => break h,
                // The previous incarnation's database may still be closing.
                Err(e) if Instant::now() < deadline => {
                    eprintln!("retrying start of d{}: {e}", cfg.id);
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("device {} did not start: {e}", cfg.id),
            }
        };
        Node {
            cfg,
            rt: Some(rt),
            handle: Some(handle),
        }
    }

    /// Crash: drop the runtime and every task on it, with no shutdown step.
    pub fn crash(&mut self) {
        self.handle.take();
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_millis(500));
        }
    }

    /// The running device.
    pub fn handle(&self) -> &ServerHandle {
        self.handle.as_ref().expect("the device runs")
    }

    pub fn client_endpoint(&self) -> String {
        self.cfg.client_listen.to_string()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.crash();
    }
}

pub struct Cluster {
    pub _dir: tempfile::TempDir,
    pub nodes: Vec<Node>,
    pub cfgs: Vec<ServerConfig>,
}

pub fn configs(n: u64, root: &std::path::Path) -> Vec<ServerConfig> {
    let peers: Vec<PeerConfig> = (1..=n)
        .map(|id| PeerConfig {
            id,
            peer_addr: free_addr(),
            client_addr: free_addr(),
            metrics_addr: None,
        })
        .collect();
    peers
        .iter()
        .map(|p| ServerConfig {
            id: p.id,
            data_dir: root.join(format!("d{}", p.id)),
            peer_listen: p.peer_addr,
            client_listen: p.client_addr,
            metrics_listen: None,
            cluster: ClusterShape {
                stores: STORES,
                replication: 3,
            },
            peers: peers.clone(),
            timing: TimingOverrides::default(),
            run_policies: true,
            join: false,
            rng_seed: Some(p.id),
            request_timeout_ms: 5000,
            max_client_requests: tenure_server::admission::DEFAULT_MAX_CLIENT_REQUESTS,
            stream_admission_wait_ms: tenure_server::admission::STREAM_ADMISSION_WAIT.as_millis()
                as u64,
            max_frame_bytes: tenure_server::wire::MAX_FRAME_BYTES,
            worker_threads: None,
            lookup: Default::default(),
            objects: Default::default(),
            election: Default::default(),
            snapshot: Default::default(),
            tls: None,
            auth: Default::default(),
            metrics: Default::default(),
        })
        .collect()
}

impl Cluster {
    pub fn start(n: u64) -> Cluster {
        Cluster::start_with(n, |_| {})
    }

    /// A cluster of `n` devices whose configurations `tweak` adjusts.
    pub fn start_with(n: u64, tweak: impl Fn(&mut ServerConfig)) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let mut cfgs = configs(n, dir.path());
        cfgs.iter_mut().for_each(tweak);
        let nodes = cfgs.iter().cloned().map(Node::start).collect();
        Cluster {
            _dir: dir,
            nodes,
            cfgs,
        }
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.cfgs
            .iter()
            .map(|c| c.client_listen.to_string())
            .collect()
    }

    pub fn data_dir(&self, i: usize) -> PathBuf {
        self.cfgs[i].data_dir.clone()
    }
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

pub fn client(endpoints: Vec<String>) -> Client {
    let opts = ClientOptions {
        request_timeout: Duration::from_secs(3),
        retry_deadline: Duration::from_secs(30),
        max_attempts: 200,
        ..Default::default()
    };
    Client::with_options(endpoints, opts).unwrap()
}

/// store → (device, epoch) of every device that reports itself `Manager`.
pub async fn managers(c: &Client, endpoints: &[String]) -> BTreeMap<u32, Vec<(u64, u64)>> {
    let mut out: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    for e in endpoints {
        if let Ok(s) = c.status_of(e).await {
            for m in s.managers.iter().filter(|m| m.is_manager()) {
                out.entry(m.store).or_default().push((s.device, m.epoch));
            }
        }
    }
    out
}

/// Wait (bounded) until every store has exactly one manager among `endpoints`.
pub async fn wait_all_managed(
    c: &Client,
    endpoints: &[String],
    limit: Duration,
) -> BTreeMap<u32, (u64, u64)> {
    let start = Instant::now();
    loop {
        let m = managers(c, endpoints).await;
        if m.len() == STORES as usize && m.values().all(|v| v.len() == 1) {
            return m.into_iter().map(|(s, v)| (s, v[0])).collect();
        }
        assert!(
            start.elapsed() < limit,
            "stores without exactly one manager after {limit:?}: {m:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A `[[auth.tokens]]` entry of `name` for `secret` with `rules`.
pub fn token(name: &str, secret: &str, rules: &[(&str, &[Perm])]) -> TokenConfig {
    TokenConfig {
        name: name.into(),
        sha256: hash_secret(secret),
        rules: rules
            .iter()
            .map(|(p, perms)| Rule {
                prefix: p.to_string(),
                perms: perms.to_vec(),
            })
            .collect(),
    }
}

/// Client options of the authorization tests, with `token` if given.
pub fn opts(token: Option<&str>) -> ClientOptions {
    ClientOptions {
        request_timeout: Duration::from_secs(3),
        retry_deadline: Duration::from_secs(30),
        max_attempts: 200,
        token: token.map(str::to_string),
        ..Default::default()
    }
}

/// `r` is a refusal (`PermissionDenied`) whose message names each of `what`.
pub fn denied(r: Result<impl std::fmt::Debug, Error>, what: &[&str]) {
    match r {
        Err(Error::PermissionDenied(m)) => {
            for w in what {
                assert!(m.contains(w), "{m:?} does not name {w:?}");
            }
        }
        other => panic!("expected PermissionDenied naming {what:?}, got {other:?}"),
    }
}
