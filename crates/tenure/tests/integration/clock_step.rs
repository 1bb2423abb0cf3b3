//! A wall-clock step of a store's manager moves no session's expiry (DESIGN §3, "Clocks").
//!
//! A local cluster's first device is restarted under libfaketime (its wall clock read from
//! a control file, its monotonic and boot clocks untouched, as an NTP step leaves them).
//! A holder of a lock in a store that device manages is killed with SIGKILL, the device's
//! wall clock is stepped back or forward by an hour or 30 s at once, and the time until
//! the lock can be taken again is measured: it is the session's TTL counted from its last
//! keep-alive, step or no step. Skipped where libfaketime is not installed (`.ci/run`
//! installs it).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;
use crate::common::{Guard, cluster_file, tenure};

/// libfaketime's thread-safe library, where Debian installs it.
fn libfaketime() -> Option<PathBuf> {
    let dir = std::fs::read_dir("/usr/lib").ok()?;
    dir.flatten()
        .map(|e| e.path().join("faketime/libfaketimeMT.so.1"))
        .find(|p| p.exists())
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tenure")
}

/// Stores device `dev` manages.
fn managed_by(data: &Path, dev: u64) -> Vec<u64> {
    let (ok, out, err) = tenure(&["status", "--data", data.to_str().unwrap(), "--json"]);
    assert!(ok, "status: {err}");
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    s["managed"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["manager"].as_u64() == Some(dev))
        .map(|m| m["store"].as_u64().unwrap())
        .collect()
}

/// A `tenure lock` holding `name` (TTL 5 s, no lock-delay), and the store it is in.
fn hold(data: &Path, name: &str) -> (Child, u64) {
    let mut child = Command::new(bin())
        .args(["lock", name, "--ttl", "5s", "--lock-delay", "0s", "--data"])
        .arg(data)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let store = line
        .split("in store ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no store in {line:?}"));
    (child, store)
}

#[test]
fn a_wall_clock_step_of_the_manager_moves_no_session_expiry() {
    let _turn = turn!();
    let Some(lib) = libfaketime() else {
        eprintln!("libfaketime is not installed: skipped");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let fake = dir.path().join("faketime");
    std::fs::write(&fake, "+0\n").unwrap();
    let _guard = Guard(data.clone());
    let d = data.to_str().unwrap();
    let (ok, _, err) = tenure(&[
        "cluster",
        "up",
        "--insecure",
        "--devices",
        "3",
        "--stores",
        "8",
        "--data",
        d,
    ]);
    assert!(ok, "cluster up: {err}");
    // Device 1 again, under the clock shim: only the missing device is started.
    let pid = cluster_file(&data)["devices"][0]["pid"].as_u64().unwrap();
    common::kill9(pid);
    std::thread::sleep(Duration::from_millis(500));
    let up = Command::new(bin())
        .args(["cluster", "up", "--data", d])
        .env("LD_PRELOAD", &lib)
        .env("FAKETIME_TIMESTAMP_FILE", &fake)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env("FAKETIME_NO_CACHE", "1")
        .output()
        .unwrap();
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    // Managers move back to their preferred devices once the stores are stable.
    let start = Instant::now();
    while managed_by(&data, 1).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "d1 manages nothing"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let mut k = 0;
    let mut freed = Vec::new();
    for step in ["+0", "-3600", "+3600", "-30", "+30"] {
        std::fs::write(&fake, "+0\n").unwrap();
        std::thread::sleep(Duration::from_secs(2));
        // A lock in a store device 1 manages.
        let (mut holder, name) = loop {
            k += 1;
            let name = format!("/step{k}");
            let (mut child, store) = hold(&data, &name);
            if managed_by(&data, 1).contains(&store) {
                break (child, name);
            }
            child.kill().unwrap();
            child.wait().unwrap();
            assert!(k < 200, "no name lands in a store d1 manages");
        };
        // Keep-alives flow for a while; then the holder dies and d1's wall clock steps.
        std::thread::sleep(Duration::from_secs(3));
        holder.kill().unwrap();
        holder.wait().unwrap();
        let killed = Instant::now();
        std::fs::write(&fake, format!("{step}\n")).unwrap();
        loop {
            let (ok, _, _) = tenure(&[
                "lock", &name, "--try", "--ttl", "5s", "--data", d, "--", "true",
            ]);
            if ok {
                break;
            }
            assert!(
                killed.elapsed() < Duration::from_secs(30),
                "{name} never freed after a step of {step} s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let after = killed.elapsed().as_secs_f64();
        eprintln!(
            "step {step:>6} s: {name} free {after:.2} s after its holder was killed (TTL 5 s)"
        );
        freed.push(after);
    }
    std::fs::write(&fake, "+0\n").unwrap();
    // The session ends TTL after its last keep-alive (sent every TTL/3): between 3.3 and
    // 5 s after the kill, plus the tries' own latency; never an hour early or late, and
    // within a second of the run without a step.
    for (i, f) in freed.iter().enumerate() {
        assert!((2.5..8.0).contains(f), "run {i}: freed after {f:.2} s");
        assert!(
            (f - freed[0]).abs() < 2.0,
            "run {i}: {f:.2} s against {:.2} s",
            freed[0]
        );
    }
}
