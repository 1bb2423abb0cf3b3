//! Membership with real processes on 127.0.0.1 (DESIGN §6): `tenure cluster up` starts
//! three devices; clients acquire and release locks in a loop while `tenure cluster add`
//! joins a fourth device and `tenure cluster remove` drains and retires one of the first
//! three. No lock is lost (every acknowledged grant is released by its holder, one lock
//! held throughout keeps its holder and token, the holders of a name never overlap, the
//! tokens of a name increase), the clients see no error (the client library's retries
//! absorb redirects and the removed device going away), the new device ends up holding
//! chunks and the removed one retires. Every wait is bounded; a guard kills the processes
//! if a step fails.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tenure_client::{LockMode, Wait};

use crate::common::load::{Load, check_holds, client, worker};
use crate::common::{Guard, STORES, cluster_file, tenure, up, with_tls};

/// Lock names of the load: different first segments, so different stores.
const NAMES: usize = 8;
/// Clients acquiring and releasing.
const WORKERS: usize = 4;
/// Each phase (a membership change) is bounded by this.
const PHASE: Duration = Duration::from_secs(60);

fn run_json(args: &[&str]) -> serde_json::Value {
    let (ok, out, err) = tenure(args);
    assert!(ok, "tenure {args:?} failed:\n{out}\n{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("tenure {args:?}: {e}\n{out}"))
}

#[test]
fn membership_add_and_remove_under_lock_load_lose_no_lock() {
    let _turn = turn!();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let d = data.to_str().unwrap();
    let _guard = Guard(data.clone());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    up(&data);
    let file = cluster_file(&data);
    let endpoints: Vec<String> = (file["devices"].as_array().unwrap().iter())
        .map(|d| d["client_addr"].as_str().unwrap().to_string())
        .collect();
    let names: Vec<String> = (0..NAMES).map(|i| format!("/members{i}/lock")).collect();
    let load = Arc::new(Load::default());
    let stop = Arc::new(AtomicBool::new(false));

    let (add, remove, (add_took, remove_took)) = rt.block_on(async {
        // One lock held through both changes.
        let holder = client(&data, &endpoints);
        let kept = holder
            .lock("/members-kept/lock", LockMode::Exclusive, Wait::Forever)
            .await
            .expect("the kept lock");
        let workers: Vec<_> = (0..WORKERS)
            .map(|i| {
                let c = client(&data, &endpoints);
                tokio::spawn(worker(c, names.clone(), i, load.clone(), stop.clone()))
            })
            .collect();
        let ops = || load.holds.lock().unwrap().len();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let before = ops();
        assert!(before > 0, "the load runs");

        // Add a fourth device.
        let t = Instant::now();
        let add = tokio::task::spawn_blocking({
            let d = d.to_string();
            move || run_json(&["cluster", "add", "--data", &d, "--wait-secs", "60", "--json"])
        });
        let add = tokio::time::timeout(PHASE, add).await.expect("cluster add in time").unwrap();
        let add_took = t.elapsed();
        let during_add = ops() - before;
        eprintln!(
            "membership change duration: cluster add {:.1}s (admitted after {} ms, first chunk after {} ms; {during_add} lock cycles meanwhile)",
            add_took.as_secs_f64(),
            add["admitted_ms"],
            add["first_chunk_ms"],
        );
        tokio::time::sleep(Duration::from_secs(2)).await;

        // Remove device 2.
        let before = ops();
        let t = Instant::now();
        let remove = tokio::task::spawn_blocking({
            let d = d.to_string();
            move || run_json(&["cluster", "remove", "2", "--data", &d, "--wait-secs", "60", "--json"])
        });
        let remove = tokio::time::timeout(PHASE, remove)
            .await
            .expect("cluster remove in time")
            .unwrap();
        let remove_took = t.elapsed();
        let during_remove = ops() - before;
        eprintln!(
            "membership change duration: cluster remove {:.1}s (retired after {} ms; {} chunks moved, {} managers migrated; {during_remove} lock cycles meanwhile)",
            remove_took.as_secs_f64(),
            remove["retired_ms"],
            remove["chunks_before"],
            remove["managers_before"],
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            tokio::time::timeout(Duration::from_secs(40), w)
                .await
                .expect("workers stop")
                .unwrap();
        }
        assert!(ops() > during_add + during_remove, "the load ran throughout");

        // The lock held throughout is still held by its holder, with its token.
        let probe = client(&data, &endpoints);
        let s = probe.holders("/members-kept/lock").await.expect("holders");
        assert_eq!(s.holders.len(), 1, "{s:?}");
        assert_eq!(s.holders[0].session, kept.session(), "{s:?}");
        assert_eq!(s.holders[0].token, kept.token(), "{s:?}");
        kept.release().await.expect("the kept lock is released by its holder");
        (add, remove, (add_took, remove_took))
    });

    let errors = load.errors.lock().unwrap().clone();
    assert!(errors.is_empty(), "client errors: {errors:#?}");
    let holds = load.holds.lock().unwrap().clone();
    check_holds(&holds);
    eprintln!(
        "{} lock cycles, no error, no overlap; cluster add {:.1}s, cluster remove {:.1}s",
        holds.len(),
        add_took.as_secs_f64(),
        remove_took.as_secs_f64()
    );

    // The fourth device holds chunks; device 2 retired and stopped.
    assert_eq!(add["device"], 4, "{add}");
    assert!(add["chunks"].as_u64().unwrap() > 0, "{add}");
    assert_eq!(remove["device"], 2);
    assert!(
        remove["retired"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(2)),
        "{remove}"
    );
    let members: Vec<u64> = (remove["members"].as_array().unwrap().iter())
        .map(|m| m["id"].as_u64().unwrap())
        .collect();
    assert_eq!(members, vec![1, 3, 4]);
    let file = cluster_file(&data);
    let ids: Vec<u64> = (file["devices"].as_array().unwrap().iter())
        .map(|d| d["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, vec![1, 3, 4]);
    assert!(data.join("d2/server.toml.retired").exists());
    let status = run_json(&["cluster", "status", "--data", d, "--json"]);
    for dev in status["devices"].as_array().unwrap() {
        assert_eq!(dev["member"], "active", "{dev}");
        assert_eq!(dev["up"], true, "{dev}");
    }
    let d4 = (status["devices"].as_array().unwrap().iter())
        .find(|x| x["id"] == 4)
        .unwrap();
    assert!(d4["chunks"].as_u64().unwrap() > 0, "{d4}");
    let managed = (status["stores"].as_array().unwrap().iter())
        .filter(|s| !s["managers"].as_array().unwrap().is_empty())
        .count();
    assert_eq!(managed, STORES as usize, "{status}");

    // Manager hints name the device admitted at runtime: device 1, configured with
    // devices 1 to 3 only, resolves a name of a store device 4 manages to device 4's
    // client address, which it learned from the membership record (the hint it forwards
    // requests by, and that a large upload is redirected with).
    let d4_addr = add["client_addr"].as_str().unwrap().to_string();
    let d1_addr = format!("http://{}", endpoints[0]);
    rt.block_on(async {
        use tenure_client::proto::{self, resolve_response, tenure_client::TenureClient};
        let opts = with_tls(&data, Default::default());
        let mut c = TenureClient::new(tenure_client::channel(&d1_addr, &opts).unwrap());
        let start = Instant::now();
        'found: loop {
            // Names in every store (a store is a hash of the first segment).
            for i in 0..8 * STORES {
                let name = format!("/m{i}/x");
                let Ok(r) = c.resolve(proto::ResolveRequest { name }).await else {
                    continue;
                };
                if let Some(resolve_response::Result::Ok(r)) = r.into_inner().result
                    && r.manager == Some(4)
                {
                    assert_eq!(r.endpoint, d4_addr, "{r:?}");
                    break 'found;
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "device 1 never named device 4 as a manager"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let (ok, out, err) = tenure(&["cluster", "down", "--data", d]);
    assert!(ok, "cluster down failed:\n{out}\n{err}");
}
