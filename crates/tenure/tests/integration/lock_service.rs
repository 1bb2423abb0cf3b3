//! The lock service with real processes on 127.0.0.1: `tenure cluster up` starts three
//! devices; clients contend for a lock (FIFO hand-over), the manager of the held lock's
//! store is killed with SIGKILL (the holder keeps the lock through keep-alive, the next
//! holder's token is larger), the killed device restarts and rejoins, every device is
//! killed and the cluster restarted (the granted lock and its session survive), and bad
//! input on both ports gets errors while the cluster keeps serving. Every wait is
//! bounded; a guard kills the processes if a step fails.

use std::future::Future;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use tenure_client::{Client, ClientOptions, Error, LockGuard, LockMode, Wait};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{Guard, STORES, cluster_file, kill9, tenure, up, with_tls};
const NAME: &str = "/orders/batch";

fn client(data: &std::path::Path, endpoints: &[String]) -> Client {
    let opts = ClientOptions {
        request_timeout: Duration::from_secs(3),
        retry_deadline: Duration::from_secs(40),
        max_attempts: 1000,
        session_ttl: Duration::from_secs(3),
        loss_warning: Duration::from_millis(500),
        wait_poll: Duration::from_secs(5),
        ..Default::default()
    };
    Client::with_options(endpoints.to_vec(), with_tls(data, opts)).unwrap()
}

/// Poll `f` every 50 ms until it returns `Some`, at most `limit`.
async fn until<T, F, Fut>(limit: Duration, what: &str, mut f: F) -> T
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
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The device (id, epoch) that reports managing `store`, among `endpoints`.
async fn manager_of(c: &Client, endpoints: &[String], store: u32) -> Option<(u64, u64)> {
    let mut best = None;
    for e in endpoints {
        if let Ok(s) = c.status_of(e).await {
            for m in s
                .managers
                .iter()
                .filter(|m| m.is_manager() && m.store == store)
            {
                if best.is_none_or(|(_, ep)| ep < m.epoch) {
                    best = Some((s.device, m.epoch));
                }
            }
        }
    }
    best
}

/// Wait until a keep-alive has moved `g`'s conservative deadline at least a second
/// ahead of now, at most `limit`.
async fn kept_alive(g: &LockGuard, limit: Duration, what: &str) {
    until(limit, what, || async {
        (g.deadline() > Instant::now() + Duration::from_secs(1)).then_some(())
    })
    .await
}

async fn queue_len(c: &Client, n: usize) {
    until(Duration::from_secs(10), "queue length", || async {
        let s = c.holders(NAME).await.ok()?;
        (s.waiters.len() == n).then_some(())
    })
    .await
}

fn spawn_lock(c: &Client) -> tokio::task::JoinHandle<Result<LockGuard, Error>> {
    let c = c.clone();
    tokio::spawn(async move { c.lock(NAME, LockMode::Exclusive, Wait::Forever).await })
}

async fn granted(
    h: tokio::task::JoinHandle<Result<LockGuard, Error>>,
    limit: Duration,
) -> LockGuard {
    tokio::time::timeout(limit, h)
        .await
        .expect("granted in time")
        .unwrap()
        .unwrap()
}

#[test]
fn lock_service_survives_kill_9_restarts_and_bad_input() {
    let _turn = turn!();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    up(&data);
    let file = cluster_file(&data);
    let devices = file["devices"].as_array().unwrap().clone();
    let endpoints: Vec<String> = devices
        .iter()
        .map(|d| d["client_addr"].as_str().unwrap().to_string())
        .collect();

    rt.block_on(async {
        let (a, b, c, d) = (
            client(&data, &endpoints),
            client(&data, &endpoints),
            client(&data, &endpoints),
            client(&data, &endpoints),
        );

        // (a) Contention: exactly one holder; release hands over in FIFO order.
        let ga = a.lock(NAME, LockMode::Exclusive, Wait::Forever).await.unwrap();
        let err = b.lock(NAME, LockMode::Exclusive, Wait::Try).await.unwrap_err();
        assert!(matches!(err, Error::WouldBlock(_)), "{err}");
        let wb = spawn_lock(&b);
        queue_len(&a, 1).await;
        let wc = spawn_lock(&c);
        queue_len(&a, 2).await;
        let s = a.holders(NAME).await.unwrap();
        assert_eq!(s.holders.len(), 1, "{s:?}");
        assert_eq!(s.holders[0].session, ga.session());
        let t_a = ga.token();
        ga.release().await.unwrap();
        let gb = granted(wb, Duration::from_secs(10)).await;
        assert!(gb.token() > t_a);
        assert!(!wc.is_finished(), "C queued after B is not granted before B releases");
        let s = a.holders(NAME).await.unwrap();
        assert_eq!(s.holders.len(), 1, "{s:?}");
        assert_eq!(s.holders[0].session, gb.session());
        let t_b = gb.token();
        gb.release().await.unwrap();
        let gc = granted(wc, Duration::from_secs(10)).await;
        assert!(gc.token() > t_b);

        // (b) kill -9 the manager of the lock's store while C holds it and D waits.
        let store = c.store_of(NAME).await.unwrap();
        let wd = spawn_lock(&d);
        queue_len(&a, 1).await;
        let (victim, old_epoch) = manager_of(&a, &endpoints, store).await.unwrap();
        let victim_entry = devices
            .iter()
            .find(|x| x["id"].as_u64() == Some(victim))
            .unwrap()
            .clone();
        kill9(victim_entry["pid"].as_u64().unwrap());
        let killed_at = Instant::now();
        let survivors: Vec<String> = endpoints
            .iter()
            .filter(|e| **e != victim_entry["client_addr"].as_str().unwrap())
            .cloned()
            .collect();
        let probe = client(&data, &survivors);
        let (new_mgr, new_epoch) = until(Duration::from_secs(40), "a new manager", || async {
            manager_of(&probe, &survivors, store).await
        })
        .await;
        // A lock operation succeeds at the new manager.
        let after = probe.holders(NAME).await.unwrap();
        let failover = killed_at.elapsed();
        eprintln!(
            "failover: store {store} managed by d{new_mgr} (epoch {old_epoch} -> {new_epoch}) and serving {failover:?} after kill -9 of d{victim}"
        );
        assert_ne!(new_mgr, victim);
        assert!(new_epoch > old_epoch);
        assert_eq!(after.holders.len(), 1, "{after:?}");
        assert_eq!(after.holders[0].session, gc.session());
        // The holder keeps the lock through keep-alive, past its TTL. (Its conservative
        // deadline may lapse while no manager answers: a failover longer than the TTL
        // less a keep-alive period leaves the client unsure, not the lock lost.)
        tokio::time::sleep(gc.ttl().saturating_sub(killed_at.elapsed()) + Duration::from_secs(1))
            .await;
        kept_alive(&gc, Duration::from_secs(10), "C's keep-alive answered by the new manager").await;
        assert!(gc.is_held(), "C's session is kept alive across the failover");
        let s = probe.holders(NAME).await.unwrap();
        assert_eq!(s.holders.len(), 1, "{s:?}");
        assert_eq!(s.holders[0].session, gc.session());
        assert_eq!(s.holders[0].token, gc.token());
        assert!(!wd.is_finished());
        let t_c = gc.token();
        gc.release().await.unwrap();
        let gd = granted(wd, Duration::from_secs(20)).await;
        assert!(gd.token() > t_c, "{:?} after {t_c:?}", gd.token());
        assert!(gd.token().epoch > t_c.epoch, "granted by the new manager");

        // (c) Restart the killed device: it rejoins (every chunk it holds serves again).
        let cfg = Path::new(victim_entry["data_dir"].as_str().unwrap()).join("server.toml");
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(victim_entry["log"].as_str().unwrap())
            .unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_tenure"))
            .args(["server", "--config", cfg.to_str().unwrap()])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut f = cluster_file(&data);
        for x in f["devices"].as_array_mut().unwrap() {
            if x["id"].as_u64() == Some(victim) {
                x["pid"] = serde_json::json!(child.id());
            }
        }
        std::fs::write(data.join("cluster.json"), f.to_string()).unwrap();
        let rejoined = victim_entry["client_addr"].as_str().unwrap().to_string();
        until(Duration::from_secs(40), "the restarted device rejoins", || async {
            let s = probe.status_of(&rejoined).await.ok()?;
            (!s.chunks.is_empty() && s.chunks.iter().all(|ch| ch.is_serving()))
                .then_some(())
        })
        .await;

        // Kill every device and restart the cluster: D's grant and session survive.
        let f = cluster_file(&data);
        for x in f["devices"].as_array().unwrap() {
            kill9(x["pid"].as_u64().unwrap());
        }
        // Reap the restarted device (killed above with the others).
        let _ = child.wait();
        std::thread::sleep(Duration::from_millis(300));
        let summary = up(&data);
        assert_eq!(summary["restarted"], true);
        let s = until(Duration::from_secs(30), "the lock table after restart", || async {
            probe.holders(NAME).await.ok()
        })
        .await;
        assert_eq!(s.holders.len(), 1, "{s:?}");
        assert_eq!(s.holders[0].session, gd.session());
        assert_eq!(s.holders[0].token, gd.token());
        kept_alive(&gd, Duration::from_secs(20), "D's keep-alive answered again").await;
        let err = a.lock(NAME, LockMode::Exclusive, Wait::Try).await.unwrap_err();
        assert!(matches!(err, Error::WouldBlock(_)), "{err}");
        let t_d = gd.token();
        gd.release().await.unwrap();
        let ga = a.lock(NAME, LockMode::Exclusive, Wait::Try).await.unwrap();
        assert!(ga.token() > t_d);

        // (d) Bad input: garbage on a peer port, invalid and oversized requests on a client
        // port; each refused, and the cluster keeps serving.
        let f = cluster_file(&data);
        let peer = f["devices"][0]["peer_addr"].as_str().unwrap().to_string();
        let mut sock = tokio::net::TcpStream::connect(&peer).await.unwrap();
        sock.write_all(&[0, 0, 0, 6, 0xde, 0xad, 0xbe, 0xef, 0, 1])
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(5), sock.read(&mut buf))
            .await
            .expect("the device closes a garbage peer connection");
        // Closed, or (the peer port speaks TLS) a TLS alert record first.
        assert!(
            matches!(n, Ok(0) | Err(_)) || buf[0] == 0x15,
            "got {n:?}: {:?}",
            &buf[..8]
        );
        let err = a
            .lock("/orders//../x", LockMode::Exclusive, Wait::Try)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidName { .. }), "{err}");
        let mut raw = tenure_client::proto::tenure_client::TenureClient::new(
            tenure_client::channel(&endpoints[0], &with_tls(&data, Default::default())).unwrap(),
        );
        let huge = tenure_client::proto::AcquireRequest {
            session: Some(tenure_client::proto::SessionRef { store, id: 1 }),
            name: format!("/{}", "y".repeat(100 * 1024)),
            request_id: 1,
            ..Default::default()
        };
        let st = raw.acquire(huge).await.unwrap_err();
        assert_eq!(st.code(), tonic::Code::OutOfRange, "{st}");
        let long = b.lock(&format!("/{}", "z".repeat(600)), LockMode::Shared, Wait::Try).await;
        assert!(matches!(long, Err(Error::InvalidName { .. })), "{long:?}");
        ga.release().await.unwrap();
        let again = b.lock(NAME, LockMode::Exclusive, Wait::Try).await.unwrap();
        assert!(again.token() > t_d);
        again.release().await.unwrap();

        // The CLI holds a lock while a command runs, with the token in its environment.
        let (ok, out, err) = tenure(&[
            "lock", "/cli/job", "--try", "--data", data.to_str().unwrap(), "--json", "--",
            "sh", "-c", "test -n \"$TENURE_FENCING_TOKEN\" && test \"$TENURE_LOCK_NAME\" = /cli/job",
        ]);
        assert!(ok, "tenure lock -- COMMAND failed:\n{out}\n{err}");
        let s = a.holders("/cli/job").await.unwrap();
        assert!(s.holders.is_empty(), "released after the command: {s:?}");

        // An operator lists the locks under a path and releases one for its holder.
        let dir = data.to_str().unwrap();
        let held = a.lock("/cli/stuck", LockMode::Exclusive, Wait::Try).await.unwrap();
        let (ok, out, err) = tenure(&["locks", "/cli", "--data", dir, "--json"]);
        assert!(ok, "locks failed:\n{out}\n{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let listed = v
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == "/cli/stuck")
            .unwrap_or_else(|| panic!("/cli/stuck not listed: {out}"));
        assert_eq!(listed["holders"][0]["token"], held.token().to_string());
        let (ok, out, err) = tenure(&["unlock", "/cli/stuck", "--data", dir, "--json"]);
        assert!(ok, "unlock failed:\n{out}\n{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["released"], true);
        assert_eq!(v["token"], held.token().to_string());
        let s = a.holders("/cli/stuck").await.unwrap();
        assert!(s.holders.is_empty(), "released by the operator: {s:?}");
        let (ok, _, err) = tenure(&["unlock", "/cli/stuck", "--data", dir]);
        assert!(!ok && err.contains("not held"), "unlock of a free lock: {err}");
        let (ok, out, _) = tenure(&["locks", "/cli", "--data", dir]);
        assert!(ok && !out.contains("/cli/stuck  held by session"), "held after release: {out}");
        drop(held);

        // The CLI sees the cluster: status lists every store managed.
        let (ok, out, err) = tenure(&["status", "--data", data.to_str().unwrap(), "--json"]);
        assert!(ok, "status failed:\n{out}\n{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["stores"], STORES);
        for x in [&a, &b, &c, &d, &probe] {
            let _ = x.close().await;
        }
    });
    let (ok, out, err) = tenure(&["cluster", "down", "--data", data.to_str().unwrap()]);
    assert!(ok, "cluster down failed:\n{out}\n{err}");
}
