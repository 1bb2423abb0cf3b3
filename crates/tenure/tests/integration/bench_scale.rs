//! `tenure bench scale`, bounded: a local cluster fills a few thousand objects, holds a
//! few thousand locks in a few dozen sessions, loses its busiest device to `kill -9` and
//! gets it back with `cluster up`, then is stopped whole and started again; before the
//! kill, a snapshot taken under the held locks is verified, restored and started beside
//! it. The report must show every phase happened, and no lock lost: the restored cluster
//! has the sampled locks and objects; a session that kept renewing through the failover
//! never expires; after the restart every store grants and the objects read back.

use crate::common::{Guard, tenure, up};

#[test]
fn bench_scale_fills_holds_and_survives_kill_9_of_the_busiest_device() {
    let _turn = turn!();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    up(&data);
    let (ok, out, err) = tenure(&[
        "bench",
        "scale",
        "--objects",
        "3000",
        "--clients",
        "16",
        "--sessions",
        "24",
        "--locks",
        "3000",
        "--ttl-secs",
        "10",
        "--watch-secs",
        "20",
        "--restart-cluster",
        "--snapshot",
        "--data",
        data.to_str().unwrap(),
        "--json",
    ]);
    assert!(ok, "bench scale failed:\n{out}\n{err}");
    let r: serde_json::Value = serde_json::from_str(&out).expect("--json prints JSON");
    let tenths = r["tenths"].as_array().unwrap();
    assert_eq!(tenths.len(), 10, "{r}");
    assert_eq!(tenths[9]["objects"], 3000, "{r}");
    assert!(
        tenths.iter().all(|t| t["rate"].as_f64().unwrap() > 0.0),
        "{r}"
    );
    for d in r["after_hold"].as_array().unwrap() {
        assert!(d["rss_mb"].as_f64().unwrap() > 1.0, "{r}");
        assert!(d["disk_mb"].as_f64().unwrap() > 0.0, "{r}");
    }
    let n = &r["snapshot"];
    assert!(n["size_mb"].as_f64().unwrap() > 0.0, "{r}");
    assert!(n["locks_checked"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(
        n["locks_missing"], 0,
        "every sampled lock in the restored cluster: {r}"
    );
    assert!(n["objects_checked"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(n["objects_missing"], 0, "{r}");
    let f = &r["failover"];
    assert!(!f["stores"].as_array().unwrap().is_empty(), "{r}");
    let first = f["first_grant_s"]
        .as_f64()
        .expect("a grant in the killed device's stores");
    let managed = f["all_managed_s"]
        .as_f64()
        .expect("every store managed again");
    assert!(first < 20.0 && managed < 20.0, "{r}");
    assert!(
        f["restart_s"].as_f64().is_some(),
        "the killed device serves again: {r}"
    );
    assert_eq!(f["locks_lost"], 0, "{r}");
    assert_eq!(f["sessions_expired"], 0, "{r}");
    let c = &r["cluster_restart"];
    assert!(
        c["serving_s"].as_f64().is_some(),
        "every store grants again: {r}"
    );
    assert!(c["objects_checked"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(c["objects_missing"], 0, "{r}");
    eprintln!(
        "bench scale: fill {:.1} s, hold {:.1} s, first grant {first:.2} s, all managed {managed:.2} s, restart {:.2} s",
        r["fill_s"].as_f64().unwrap(),
        r["hold_s"].as_f64().unwrap(),
        f["restart_s"].as_f64().unwrap()
    );
}

/// `bench scale --system <peer>`, bounded, where the peer is installed: the benchmark
/// starts three members on 127.0.0.1 itself, runs every phase, and stops them.
fn peer_run(system: &str) -> Option<serde_json::Value> {
    let dir = tempfile::tempdir().unwrap();
    let peers = dir.path().join("peers");
    let (ok, out, err) = tenure(&[
        "bench",
        "scale",
        "--system",
        system,
        "--objects",
        "2000",
        "--clients",
        "8",
        "--sessions",
        "8",
        "--locks",
        "800",
        "--ttl-secs",
        "10",
        "--watch-secs",
        "12",
        "--peer-data",
        peers.to_str().unwrap(),
        "--json",
    ]);
    assert!(ok, "bench scale --system {system} failed:\n{out}\n{err}");
    let r: serde_json::Value = serde_json::from_str(&out).expect("--json prints JSON");
    assert_eq!(r["system"], system, "{r}");
    assert_eq!(r["tenths"].as_array().unwrap().len(), 10, "{r}");
    assert_eq!(r["fill_errors"], 0, "{r}");
    assert_eq!(r["hold_errors"], 0, "{r}");
    for d in r["after_hold"].as_array().unwrap() {
        assert!(d["rss_mb"].as_f64().unwrap() > 1.0, "{r}");
    }
    let f = &r["failover"];
    assert!(
        f["first_grant_s"].as_f64().is_some(),
        "a write after the kill: {r}"
    );
    assert!(f["all_managed_s"].as_f64().is_some(), "a new leader: {r}");
    assert!(
        f["restart_s"].as_f64().is_some(),
        "the member serves again: {r}"
    );
    // The members were stopped: no process names their directory any more.
    let dir_text = peers.to_str().unwrap();
    let running: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(dir_text))
        .collect();
    assert!(running.is_empty(), "members still running: {running:?}");
    Some(r)
}

fn installed(program: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn bench_scale_runs_the_same_shapes_against_etcd_when_installed() {
    let _turn = turn!();
    if !installed("etcd") {
        eprintln!("etcd is not installed (Debian: etcd-server): skipped");
        return;
    }
    let r = peer_run("etcd").unwrap();
    assert_eq!(r["failover"]["locks_lost"], 0, "{r}");
}

#[test]
fn bench_scale_runs_the_same_shapes_against_zookeeper_when_installed() {
    let _turn = turn!();
    if !std::path::Path::new("/usr/share/zookeeper/bin/zkServer.sh").exists() {
        eprintln!("ZooKeeper is not installed (Debian: zookeeper): skipped");
        return;
    }
    let r = peer_run("zookeeper").unwrap();
    assert_eq!(r["failover"]["locks_lost"], 0, "{r}");
}
