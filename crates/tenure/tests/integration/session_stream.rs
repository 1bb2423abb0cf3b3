//! The session stream (DESIGN §8) with real processes on 127.0.0.1, under the faults it
//! exists to ride out:
//!
//! - 32 acquires pipelined on one client's stream to one store, 8 of them queued behind
//!   another client, while the store's manager is killed with SIGKILL: every call
//!   returns once, granted, with distinct fencing tokens, and the store's lock table
//!   shows each name held once by the one session — also after the killed device is
//!   restarted (requests re-sent with their ids are idempotent, DESIGN §4);
//! - a held lock whose manager is paused (SIGSTOP): the guard reports the lock may be
//!   lost before the deadline it had at the pause (DESIGN §4, sessions);
//! - a paused device that does not manage a store costs a new client of that store
//!   little (endpoints are raced): a free lock is granted within two seconds (the
//!   store's manager blames the paused device's chunk once the device has been silent
//!   for `Timing::silence`, 1.2 s: a device still heard from is slow, not gone), also when
//!   the paused device is the first endpoint, and `tenure lock --timeout 2s` on a held
//!   lock gives up within 2.5 s of wall time.
//!
//! Every wait is bounded. The cluster's guard kills its processes when a test ends, and
//! a paused process is continued on every path. The tests take turns (their timings
//! must not share the cores with another cluster), and print what they measure.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tenure_client::{Client, ClientOptions, LockGuard, LockMode, Loss, Wait};

use crate::common::{Guard, STORES, cluster_file, tenure, up, with_tls};

/// The tests run one at a time, whatever the harness's thread count.
static SERIAL: Mutex<()> = Mutex::new(());

fn options() -> ClientOptions {
    ClientOptions {
        request_timeout: Duration::from_secs(3),
        retry_deadline: Duration::from_secs(40),
        max_attempts: 1000,
        session_ttl: Duration::from_secs(3),
        loss_warning: Duration::from_millis(500),
        wait_poll: Duration::from_secs(5),
        ..Default::default()
    }
}

fn client(data: &Path, endpoints: &[String]) -> Client {
    Client::with_options(endpoints.to_vec(), with_tls(data, options())).unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A local cluster of three devices, killed when dropped (the guard is dropped first,
/// while its data directory still exists).
struct Cluster {
    _guard: Guard,
    _dir: tempfile::TempDir,
    data: PathBuf,
    devices: Vec<serde_json::Value>,
    endpoints: Vec<String>,
}

impl Cluster {
    fn up() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("tenure-data");
        let guard = Guard(data.clone());
        let started = Instant::now();
        up(&data);
        eprintln!("cluster up in {:?}", started.elapsed());
        let devices = cluster_file(&data)["devices"].as_array().unwrap().clone();
        let endpoints = devices
            .iter()
            .map(|d| d["client_addr"].as_str().unwrap().to_string())
            .collect();
        Cluster {
            _guard: guard,
            _dir: dir,
            data,
            devices,
            endpoints,
        }
    }

    fn device(&self, id: u64) -> &serde_json::Value {
        self.devices
            .iter()
            .find(|d| d["id"].as_u64() == Some(id))
            .unwrap()
    }

    fn pid(&self, id: u64) -> u64 {
        self.device(id)["pid"].as_u64().unwrap()
    }

    fn endpoint(&self, id: u64) -> String {
        self.device(id)["client_addr"].as_str().unwrap().to_string()
    }

    /// The endpoints of every device but `id`.
    fn others(&self, id: u64) -> Vec<String> {
        let e = self.endpoint(id);
        self.endpoints
            .iter()
            .filter(|x| **x != e)
            .cloned()
            .collect()
    }
}

/// A process paused with SIGSTOP, continued with SIGCONT when dropped (a failed
/// assertion included) unless continued before.
struct Stopped {
    pid: u64,
    running: bool,
}

impl Stopped {
    fn new(pid: u64) -> Stopped {
        let ok = Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -STOP {pid}");
        Stopped {
            pid,
            running: false,
        }
    }

    fn cont(&mut self) {
        if !self.running {
            let _ = Command::new("kill")
                .args(["-CONT", &self.pid.to_string()])
                .status();
            self.running = true;
        }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        self.cont();
    }
}

/// Poll `f` every `every` until it returns `Some`, at most `limit`.
async fn until<T, F, Fut>(limit: Duration, every: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(every).await;
    }
}

/// The manager (device, epoch) of every store, as the devices at `endpoints` report
/// (the largest epoch wins).
async fn managers(c: &Client, endpoints: &[String]) -> BTreeMap<u32, (u64, u64)> {
    let mut out: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for e in endpoints {
        if let Ok(s) = c.status_of(e).await {
            for m in s.managers.iter().filter(|m| m.is_manager()) {
                let best = out.entry(m.store).or_insert((s.device, m.epoch));
                if best.1 < m.epoch {
                    *best = (s.device, m.epoch);
                }
            }
        }
    }
    out
}

async fn manager_of(c: &Client, endpoints: &[String], store: u32) -> Option<(u64, u64)> {
    managers(c, endpoints).await.get(&store).copied()
}

/// A name whose store is `store`, under a first segment starting with `prefix`.
fn name_in(store: u32, prefix: &str, leaf: &str) -> String {
    (0..)
        .map(|k| format!("/{prefix}{k}"))
        .find(|first| tenure_core::config::store_of(first, STORES).0 == store)
        .map(|first| format!("{first}/{leaf}"))
        .unwrap()
}

const PIPELINED: usize = 32;
const QUEUED: usize = 8;
const FIRST_WAVE: usize = 20;

#[test]
fn pipelined_acquires_through_a_manager_kill_9_are_answered_exactly_once() {
    let _turn = turn!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rt = runtime();
    let cluster = Cluster::up();
    let eps = cluster.endpoints.clone();
    let names: Vec<String> = (0..PIPELINED).map(|i| format!("/pipe/{i}")).collect();

    rt.block_on(async {
        let (a, b) = (client(&cluster.data, &eps), client(&cluster.data, &eps));
        let store = a.store_of("/pipe").await.unwrap();
        // B holds the first names: A's acquires of them wait in their queues.
        let mut held_by_b = Vec::new();
        for n in &names[..QUEUED] {
            held_by_b.push(b.lock(n, LockMode::Exclusive, Wait::Try).await.unwrap());
        }
        let (victim, old_epoch) = until(
            Duration::from_secs(10),
            Duration::from_millis(50),
            "the store's manager",
            || manager_of(&a, &eps, store),
        )
        .await;

        // A shell waits to kill the manager the moment it reads a line (quicker than
        // starting `kill` then). A's session is open and its stream started (a lock taken
        // and released): the acquires below go straight onto the stream.
        let mut killer = Command::new("sh")
            .args(["-c", &format!("read _ && kill -9 {}", cluster.pid(victim))])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let mut trigger = killer.stdin.take().unwrap();
        a.lock("/pipe/warm", LockMode::Exclusive, Wait::Try)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();

        // A's acquires, concurrent on one session stream, in two waves: the 8 names B
        // holds and 12 free ones; when the first answer comes, the shell kills the manager
        // as the last 12 are sent. At the kill, some acquires are answered, some wait in
        // a queue at the manager, and some are on their way (received, being replicated,
        // or lost with the process).
        let spawn = |n: &String| {
            let (a, n) = (a.clone(), n.clone());
            tokio::spawn(async move {
                let r = a.lock(&n, LockMode::Exclusive, Wait::Forever).await;
                (r, Instant::now())
            })
        };
        let sent_at = Instant::now();
        let mut calls: Vec<_> = names[..FIRST_WAVE].iter().map(spawn).collect();
        let first = until(
            Duration::from_secs(10),
            Duration::from_micros(100),
            "a first grant",
            || async { calls.iter().any(|h| h.is_finished()).then_some(Instant::now()) },
        )
        .await;
        calls.extend(names[FIRST_WAVE..].iter().map(spawn));
        trigger.write_all(b"\n").unwrap();
        drop(trigger);
        assert!(killer.wait().unwrap().success(), "kill -9 of d{victim}");
        let killed_at = Instant::now();
        let done_before = calls.iter().filter(|h| h.is_finished()).count();
        eprintln!(
            "d{victim} (manager of store {store}, epoch {old_epoch}) killed {:?} after the first acquires were sent, {:?} after the first answer; {done_before}/{PIPELINED} answered by then",
            killed_at - sent_at,
            killed_at - first
        );

        // B lets go of its names once a new manager serves the store.
        let survivors = cluster.others(victim);
        let probe = client(&cluster.data, &survivors);
        let (new_mgr, new_epoch) = until(
            Duration::from_secs(40),
            Duration::from_millis(50),
            "a new manager",
            || async {
                manager_of(&probe, &survivors, store)
                    .await
                    .filter(|(_, e)| *e > old_epoch)
            },
        )
        .await;
        eprintln!(
            "store {store} managed by d{new_mgr} (epoch {new_epoch}) {:?} after the kill",
            killed_at.elapsed()
        );
        assert_ne!(new_mgr, victim);
        for g in held_by_b {
            tokio::time::timeout(Duration::from_secs(20), g.release())
                .await
                .expect("B's release answered in time")
                .unwrap();
        }

        // Every call returns once, granted; tokens differ; one session holds them all.
        let mut guards: Vec<LockGuard> = Vec::new();
        let mut last_answer = killed_at;
        for (i, h) in calls.into_iter().enumerate() {
            let (r, at) = tokio::time::timeout(Duration::from_secs(30), h)
                .await
                .unwrap_or_else(|_| panic!("the acquire of {} not answered in time", names[i]))
                .unwrap();
            let g = r.unwrap_or_else(|e| panic!("the acquire of {} failed: {e}", names[i]));
            assert_eq!(g.name(), names[i]);
            last_answer = last_answer.max(at);
            guards.push(g);
        }
        eprintln!(
            "all {PIPELINED} acquires granted {:?} after the kill ({:?} after they were sent)",
            last_answer - killed_at,
            last_answer - sent_at
        );
        let session = guards[0].session();
        assert!(guards.iter().all(|g| g.session() == session && g.store() == store));
        let tokens: BTreeSet<_> = guards.iter().map(|g| g.token()).collect();
        assert_eq!(tokens.len(), PIPELINED, "fencing tokens repeat");
        let expected: BTreeMap<String, _> = guards
            .iter()
            .map(|g| (g.name().to_string(), g.token()))
            .collect();
        let table = |c: Client| async move {
            let locks = c.locks("/pipe").await.unwrap();
            let mut got = BTreeMap::new();
            // (A lock neither held nor waited for, such as /pipe/warm, may be listed.)
            for l in locks.iter().filter(|l| !(l.holders.is_empty() && l.waiters.is_empty())) {
                assert_eq!(l.holders.len(), 1, "{l:?}");
                assert!(l.waiters.is_empty(), "{l:?}");
                assert_eq!(l.holders[0].session, session, "{l:?}");
                assert!(got.insert(l.name.clone(), l.holders[0].token).is_none());
            }
            got
        };
        assert_eq!(table(a.clone()).await, expected);
        assert!(guards.iter().all(|g| g.is_held()));

        // The killed device restarts (`cluster up` starts the devices not running) and
        // rejoins; the table is the same.
        let restart = Instant::now();
        let dir = cluster.data.to_str().unwrap();
        let (ok, out, err) = tenure(&["cluster", "up", "--data", dir, "--wait-secs", "40", "--json"]);
        assert!(ok, "cluster up (restart) failed:\n{out}\n{err}");
        let summary: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(summary["started_devices"], serde_json::json!([victim]), "{out}");
        eprintln!("d{victim} restarted and serving in {:?}", restart.elapsed());
        assert_eq!(table(a.clone()).await, expected);
        assert_eq!(table(client(&cluster.data, &eps)).await, expected);
        until(
            Duration::from_secs(10),
            Duration::from_millis(50),
            "A's session kept alive",
            || async {
                (guards[0].deadline() > Instant::now() + Duration::from_secs(1)).then_some(())
            },
        )
        .await;
        assert!(guards.iter().all(|g| g.is_held()));
        for g in guards {
            g.release().await.unwrap();
        }
        assert!(a.locks("/pipe").await.unwrap().iter().all(|l| l.holders.is_empty()));
        for c in [&a, &b, &probe] {
            let _ = c.close().await;
        }
    });
}

#[test]
fn may_be_lost_arrives_before_the_deadline_when_the_manager_is_paused() {
    let _turn = turn!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rt = runtime();
    let cluster = Cluster::up();
    let eps = cluster.endpoints.clone();

    rt.block_on(async {
        // The warning is due 2 s before the deadline, about 0.95 s after the pause: before
        // a new manager can have taken over the store (the paused one's leases at the
        // chunks outlast the pause by at least the lease less a renewal period, 1.4 s) and
        // resumed the session, which would move the deadline. (At 1 s before it, 1.95 s
        // after the pause, a failover had sometimes resumed the session first, since
        // forwards to a replaced manager end at once.)
        let opts = ClientOptions {
            loss_warning: Duration::from_secs(2),
            ..options()
        };
        let c = Client::with_options(eps.clone(), with_tls(&cluster.data, opts)).unwrap();
        let g = c
            .lock("/paused/job", LockMode::Exclusive, Wait::Try)
            .await
            .unwrap();
        let store = g.store();
        let (victim, old_epoch) = until(
            Duration::from_secs(10),
            Duration::from_millis(50),
            "the store's manager",
            || manager_of(&c, &eps, store),
        )
        .await;
        // Pause just after a keep-alive was answered: the deadline is as far ahead as it
        // gets.
        let mut w = g.watch();
        w.borrow_and_update();
        tokio::time::timeout(Duration::from_secs(5), w.changed())
            .await
            .expect("a keep-alive answered")
            .unwrap();
        let mut paused = Stopped::new(cluster.pid(victim));
        let paused_at = Instant::now();
        let deadline = g.deadline();
        let ahead = deadline - paused_at;
        let bound = ahead + Duration::from_secs(5);
        let loss = tokio::time::timeout(bound, g.lost())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "lost() did not resolve within {bound:?} of the pause (deadline now {:?} after the pause)",
                    g.deadline() - paused_at
                )
            });
        let at = Instant::now();
        eprintln!(
            "manager d{victim} of store {store} paused with the deadline {ahead:?} ahead: lost() = {loss:?} {:?} after the pause, {:?} before the deadline",
            at - paused_at,
            deadline.saturating_duration_since(at)
        );
        assert!(
            at < deadline,
            "lost() resolved {:?} after the deadline at the pause",
            at - deadline
        );
        // The deadline may have moved by now, but not by the paused manager: the chunks'
        // leases of the paused manager end at most a lease after their last renewal, which
        // can be less than a lease after the pause, and a new manager may then have
        // resumed the session (seen once, 1.95 s after the pause).
        if g.deadline() > deadline {
            eprintln!(
                "a new manager resumed the session {:?} after the pause, before this check",
                Instant::now() - paused_at
            );
        }

        // A new manager takes the store over and the session resumes there: the lock is
        // held again, with its token.
        assert_eq!(loss, Loss::DeadlineNear, "the session expired");
        until(
            Duration::from_secs(20),
            Duration::from_millis(20),
            "the session kept alive by a new manager",
            || async { (g.deadline() > Instant::now() + Duration::from_secs(1)).then_some(()) },
        )
        .await;
        eprintln!(
            "the session was kept alive again {:?} after the pause",
            paused_at.elapsed()
        );
        let others = cluster.others(victim);
        // The status page may name the new manager a moment after its first keep-alive
        // answer (seen once: the session resumed 1.45 s after the pause, and the status
        // pages asked at once named no manager of the store yet).
        let (new_mgr, new_epoch) = until(
            Duration::from_secs(10),
            Duration::from_millis(50),
            "a new manager in the survivors' status",
            || async {
                manager_of(&c, &others, store)
                    .await
                    .filter(|&(_, e)| e > old_epoch)
            },
        )
        .await;
        assert!(new_mgr != victim && new_epoch > old_epoch);
        let s = c.holders("/paused/job").await.unwrap();
        assert_eq!(s.holders.len(), 1, "{s:?}");
        assert_eq!((s.holders[0].session, s.holders[0].token), (g.session(), g.token()));
        paused.cont();
        g.release().await.unwrap();
        let _ = c.close().await;
    });
}

#[test]
fn a_stopped_device_does_not_stall_other_stores() {
    let _turn = turn!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rt = runtime();
    let cluster = Cluster::up();
    let eps = cluster.endpoints.clone();

    rt.block_on(async {
        let probe = client(&cluster.data, &eps);
        let mgrs = managers(&probe, &eps).await;
        assert_eq!(mgrs.len(), STORES as usize, "{mgrs:?}");
        // Pause the first device; S is a store it does not manage.
        let stopped_id = cluster.devices[0]["id"].as_u64().unwrap();
        let (&store, &(manager, _)) = mgrs
            .iter()
            .find(|(_, (d, _))| *d != stopped_id)
            .expect("a store d1 does not manage");
        // Another client holds a name in S (taken before the pause).
        let held = name_in(store, "s", "held");
        let holder = client(&cluster.data, &cluster.others(stopped_id));
        let hg = holder
            .lock(&held, LockMode::Exclusive, Wait::Try)
            .await
            .unwrap();
        let mut paused = Stopped::new(cluster.pid(stopped_id));
        eprintln!("d{stopped_id} paused; store {store} is managed by d{manager}");

        let stopped_ep = cluster.endpoint(stopped_id);
        let mut last = cluster.others(stopped_id);
        last.push(stopped_ep.clone());
        let mut first = vec![stopped_ep.clone()];
        first.extend(cluster.others(stopped_id));
        for (order, list, leaf) in [("last", &last, "a"), ("first", &first, "b")] {
            let name = name_in(store, "s", leaf);
            let started = Instant::now();
            let fresh = client(&cluster.data, list);
            let in_store = tokio::time::timeout(Duration::from_secs(10), fresh.store_of(&name))
                .await
                .expect("the store count within 10 s")
                .unwrap();
            let found = started.elapsed();
            assert_eq!(in_store, store);
            let g = tokio::time::timeout(
                Duration::from_secs(10),
                fresh.lock(&name, LockMode::Exclusive, Wait::Try),
            )
            .await
            .unwrap_or_else(|_| panic!("{name} not granted within 10 s"))
            .unwrap();
            let took = started.elapsed();
            eprintln!(
                "paused device {order} in the list: a new client found the store count in {found:?} and locked {name} {took:?} after it was made"
            );
            // The manager marks the paused device's chunk failed once the device has
            // been silent for `Timing::silence` (1.2 s after its last message), then
            // commits without it.
            assert!(
                took < Duration::from_secs(2),
                "a new client took {took:?} to lock a free name with the paused device {order}"
            );
            g.release().await.unwrap();
            let _ = fresh.close().await;
        }

        // `tenure lock --timeout 2s` on the held name gives up in time.
        let list = first.join(",");
        // Endpoints given: the CA is not found in the data directory but given.
        let ca = cluster_file(&cluster.data)["ca"].as_str().unwrap_or("").to_string();
        let started = Instant::now();
        let out = tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_tenure"))
                .env("TENURE_CA", ca)
                .args([
                    "lock",
                    &held,
                    "--timeout",
                    "2s",
                    "--endpoints",
                    &list,
                    "--",
                    "true",
                ])
                .output()
                .unwrap()
        });
        let out = tokio::time::timeout(Duration::from_secs(10), out)
            .await
            .expect("tenure lock returned within 10 s")
            .unwrap();
        let took = started.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        eprintln!(
            "tenure lock --timeout 2s on a held name: {} after {took:?}: {}",
            out.status,
            err.trim()
        );
        assert!(
            !out.status.success(),
            "tenure lock of a held name succeeded"
        );
        assert!(err.contains("timed out"), "{err}");
        assert!(
            took < Duration::from_millis(2500),
            "tenure lock --timeout 2s took {took:?}"
        );
        paused.cont();
        hg.release().await.unwrap();
        for c in [&probe, &holder] {
            let _ = c.close().await;
        }
    });
}
