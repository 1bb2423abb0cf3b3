//! A rolling restart with real processes on 127.0.0.1: `tenure cluster up` starts three
//! devices; clients take and release locks and write objects in a loop while each device
//! in turn is stopped (SIGTERM, as `systemctl restart` does) and started again with
//! `tenure cluster up`, the next one only once the cluster serves every store again. No
//! client sees an error (the client library's retries absorb the restarts), no lock is
//! lost (a lock held throughout keeps its holder and token; holders of a name never
//! overlap; tokens increase) and every acknowledged write reads back. The time each
//! device took from its stop to serving again is printed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tenure_client::{Client, LockMode, Wait};

mod common;
use common::load::{Load, check_holds, client, worker};
use common::{Guard, cluster_file, tenure, up};

/// Lock names of the load.
const NAMES: usize = 8;
/// Clients taking locks, and clients writing objects.
const WORKERS: usize = 3;

/// The last acknowledged content of each key.
type Acked = Arc<Mutex<BTreeMap<String, (u64, String)>>>;

/// Write a counter to this writer's keys in turn, until `stop`.
async fn writer(
    c: Client,
    id: usize,
    acked: Acked,
    errors: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let key = format!("/roll{}/w{id}/k{}", n % 4, n % 3);
        let value = format!("writer {id} write {n}");
        let limit = Duration::from_secs(30);
        match tokio::time::timeout(limit, c.objects().put(&key, value.clone().into_bytes())).await {
            Ok(Ok(w)) => {
                acked.lock().unwrap().insert(key, (w.revision, value));
            }
            Ok(Err(e)) => errors.lock().unwrap().push(format!("put {key}: {e}")),
            Err(_) => errors
                .lock()
                .unwrap()
                .push(format!("put {key}: no answer within {limit:?}")),
        }
    }
}

fn pids(data: &std::path::Path) -> BTreeMap<u64, u64> {
    (cluster_file(data)["devices"].as_array().unwrap().iter())
        .map(|d| (d["id"].as_u64().unwrap(), d["pid"].as_u64().unwrap()))
        .collect()
}

#[test]
fn a_rolling_restart_under_load_loses_nothing_and_shows_no_error() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let d = data.to_str().unwrap().to_string();
    let _guard = Guard(data.clone());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    up(&data);
    let endpoints: Vec<String> = (cluster_file(&data)["devices"].as_array().unwrap().iter())
        .map(|d| d["client_addr"].as_str().unwrap().to_string())
        .collect();
    let names: Vec<String> = (0..NAMES).map(|i| format!("/roll{i}/lock")).collect();
    let load = Arc::new(Load::default());
    let acked: Acked = Arc::default();
    let put_errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));

    let gaps = rt.block_on(async {
        let holder = client(&data, &endpoints);
        let kept = holder
            .lock("/roll-kept/lock", LockMode::Exclusive, Wait::Forever)
            .await
            .expect("the kept lock");
        let mut tasks: Vec<_> = (0..WORKERS)
            .map(|i| {
                let c = client(&data, &endpoints);
                tokio::spawn(worker(c, names.clone(), i, load.clone(), stop.clone()))
            })
            .collect();
        tasks.extend((0..WORKERS).map(|i| {
            let c = client(&data, &endpoints);
            tokio::spawn(writer(c, i, acked.clone(), put_errors.clone(), stop.clone()))
        }));
        let ops = || load.holds.lock().unwrap().len() + acked.lock().unwrap().len();
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(ops() > 0, "the load runs");

        let mut gaps = Vec::new();
        for (id, pid) in pids(&data) {
            let before = load.holds.lock().unwrap().len();
            let t = Instant::now();
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
            while std::path::Path::new(&format!("/proc/{pid}")).exists() {
                assert!(t.elapsed() < Duration::from_secs(30), "device {id} did not stop on SIGTERM");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let stopped = t.elapsed();
            let d = d.clone();
            let (ok, out, err) = tokio::task::spawn_blocking(move || {
                tenure(&["cluster", "up", "--data", &d, "--wait-secs", "60"])
            })
            .await
            .unwrap();
            assert!(ok, "restarting device {id}: {out}{err}");
            let gap = t.elapsed();
            tokio::time::sleep(Duration::from_secs(1)).await;
            let during = load.holds.lock().unwrap().len() - before;
            eprintln!(
                "rolling restart: device {id} stopped in {:.2}s, serving again {:.2}s after the stop; {during} lock cycles meanwhile",
                stopped.as_secs_f64(),
                gap.as_secs_f64()
            );
            gaps.push((id, gap));
        }
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            tokio::time::timeout(Duration::from_secs(40), t)
                .await
                .expect("the load stops")
                .unwrap();
        }

        // The lock held throughout keeps its holder and token.
        let probe = client(&data, &endpoints);
        let s = probe.holders("/roll-kept/lock").await.expect("holders");
        assert_eq!(s.holders.len(), 1, "{s:?}");
        assert_eq!(s.holders[0].session, kept.session(), "{s:?}");
        assert_eq!(s.holders[0].token, kept.token(), "{s:?}");
        kept.release().await.expect("the kept lock is released by its holder");

        // Every acknowledged write reads back (each key has one writer, which wrote it
        // in order: the last acknowledged content is the current one).
        let acked = acked.lock().unwrap().clone();
        assert!(!acked.is_empty(), "writes were acknowledged");
        for (key, (revision, value)) in &acked {
            let o = probe.objects().get(key).await.expect("an acknowledged key reads");
            assert_eq!(String::from_utf8_lossy(&o.data), *value, "{key}");
            assert_eq!(o.info.revision, *revision, "{key}");
        }
        gaps
    });

    let mut errors = load.errors.lock().unwrap().clone();
    errors.extend(put_errors.lock().unwrap().iter().cloned());
    assert!(errors.is_empty(), "client errors: {errors:#?}");
    let holds = load.holds.lock().unwrap().clone();
    check_holds(&holds);
    let worst = gaps.iter().map(|(_, g)| *g).max().unwrap();
    eprintln!(
        "rolling restart of {} devices: {} lock cycles, no error, no overlap, every write read back; worst stop-to-serving {:.2}s",
        gaps.len(),
        holds.len(),
        worst.as_secs_f64()
    );
}
