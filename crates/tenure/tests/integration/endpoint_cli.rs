//! `tenure endpoint health`, `tenure endpoint status` and `tenure check perf` against a
//! local cluster: every device healthy and listed; a short paced load judged with
//! PASS/FAIL lines; then, with one device killed, health names it unhealthy and exits
//! non-zero, and status names it silent and exits non-zero. Every wait is bounded.

use std::path::Path;
use std::time::Duration;

use crate::common;
use crate::common::{Guard, cluster_file, kill9, tenure, until, up};

fn data_args(data: &Path) -> [&str; 2] {
    ["--data", data.to_str().unwrap()]
}

/// Run `tenure args… --data data`: (success, stdout, stderr).
fn run(args: &[&str], data: &Path) -> (bool, String, String) {
    let mut all = args.to_vec();
    all.extend(data_args(data));
    tenure(&all)
}

/// How often a wait polls.
const POLL: Duration = Duration::from_millis(200);

#[test]
fn health_status_and_check_perf_against_a_local_cluster() {
    let _turn = turn!();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    up(&data);
    let devices = cluster_file(&data)["devices"].as_array().unwrap().clone();
    let endpoints: Vec<String> = (devices.iter())
        .map(|d| d["client_addr"].as_str().unwrap().to_string())
        .collect();

    // Health: every device, healthy, exit 0.
    let (ok, out, err) = run(&["endpoint", "health"], &data);
    assert!(ok, "endpoint health:\n{out}{err}");
    for e in &endpoints {
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("{e} is healthy: d"))
                    && l.contains("committed a write")),
            "{e} healthy in:\n{out}"
        );
    }
    let (ok, out, err) = run(&["endpoint", "health", "--json"], &data);
    assert!(ok, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 3, "{out}");
    assert!(
        rows.iter()
            .all(|r| r["health"] == true && r["commit_ms"].is_number()),
        "{out}"
    );

    // Status: a table of every device, one of which acts as the coordinator.
    let (ok, out, err) = run(&["endpoint", "status"], &data);
    assert!(ok, "endpoint status:\n{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("ENDPOINT") && lines[0].contains("COORDINATOR"),
        "{out}"
    );
    for (d, e) in devices.iter().zip(&endpoints) {
        let row = lines.iter().find(|l| l.starts_with(e.as_str()));
        let row = row.unwrap_or_else(|| panic!("{e} in:\n{out}"));
        assert!(row.contains(&format!("d{}", d["id"])), "{row}");
        assert!(row.contains(env!("CARGO_PKG_VERSION")), "{row}");
    }
    let rows = until(
        POLL,
        Duration::from_secs(30),
        "one acting coordinator",
        || {
            let (ok, out, _) = run(&["endpoint", "status", "--json"], &data);
            let v: serde_json::Value = serde_json::from_str(&out).ok()?;
            let rows = v.as_array()?.clone();
            let acting = rows.iter().filter(|r| r["is_coordinator"] == true).count();
            (ok && acting == 1).then_some(rows)
        },
    );
    assert_eq!(rows.len(), 3);
    let managed: u64 = rows
        .iter()
        .map(|r| r["stores_managed"].as_u64().unwrap())
        .sum();
    assert_eq!(managed, u64::from(common::STORES), "{rows:?}");
    for r in &rows {
        assert_eq!(r["membership_version"], 0, "{r}");
        assert!(r["data_bytes"].as_u64().unwrap() > 0, "{r}");
        assert!(r["chunks"].as_u64().unwrap() > 0, "{r}");
        assert!(r["lookup"].is_string(), "{r}");
    }

    // Check perf: a small load, a verdict line per check, the overall verdict last, and
    // the exit status agreeing with it (the shared machine may make it either).
    let (ok, out, err) = run(&["check", "perf", "--load", "s", "--seconds", "2"], &data);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("check perf, load s: 8 clients, 200 writes/s"),
        "{out}{err}"
    );
    for (line, what) in lines[1..4]
        .iter()
        .zip(["Throughput is ", "p99 latency is ", " errors in "])
    {
        assert!(
            (line.starts_with("PASS: ") || line.starts_with("FAIL: ")) && line.contains(what),
            "{line:?} in:\n{out}"
        );
    }
    let verdict = *lines.last().unwrap();
    assert!(verdict == "PASS" || verdict == "FAIL", "{out}");
    assert_eq!(
        ok,
        verdict == "PASS",
        "exit status and verdict:\n{out}{err}"
    );
    let (_, out, err) = run(&["check", "perf", "--seconds", "1", "--json"], &data);
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    assert_eq!(v["checks"].as_array().unwrap().len(), 3, "{out}");
    assert!(v["writes"].as_u64().unwrap() > 0, "{out}");

    // One device killed: it is unhealthy, and both commands say so and fail.
    let victim = &devices[2];
    kill9(victim["pid"].as_u64().unwrap());
    let dead = victim["client_addr"].as_str().unwrap();
    let (ok, out, err) = run(&["endpoint", "health", "--timeout", "3s"], &data);
    assert!(!ok, "health with a device killed must fail:\n{out}{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with(&format!("{dead} is unhealthy: "))),
        "{dead} unhealthy in:\n{out}"
    );
    assert!(err.contains("endpoints unhealthy"), "{err}");
    let (ok, out, err) = run(&["endpoint", "status", "--timeout", "3s"], &data);
    assert!(!ok, "status with a device killed must fail:\n{out}{err}");
    assert!(out.contains(&format!("{dead}: no answer")), "{out}");

    let (ok, out, err) = run(&["cluster", "down"], &data);
    assert!(ok, "cluster down: {out}{err}");
}
