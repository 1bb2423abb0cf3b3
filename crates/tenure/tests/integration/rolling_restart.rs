//! Rolling restarts and upgrades with real processes on 127.0.0.1.
//!
//! `tenure cluster up` starts three devices as the previous build ran them: speaking
//! only wire version 2 ([`WIRE_VERSIONS_ENV`]), so that small objects are written as
//! blocks. Clients take and release locks and write objects in a loop while each device
//! in turn is stopped (SIGTERM, as `systemctl restart` does), its data directory
//! rewritten in the previous on-disk format (6, no inline values), and started again as
//! this build with `tenure cluster up`, which upgrades the directory in place; the next
//! device only once the cluster serves every store again. Mid-way, devices of both
//! builds serve side by side at version 2; at the end the devices speak this build's
//! version with each other: small puts become one change with the value inline, and
//! requests are forwarded to their store's manager. No client sees an
//! error (the client library's retries absorb the restarts), no lock is lost (a lock held
//! throughout keeps its holder and token; holders of a name never overlap; tokens
//! increase) and every acknowledged write, of either kind, reads back. The time each
//! device took from its stop to serving again is printed.
//!
//! A device of a build that no longer speaks this build's wire version is refused by
//! the others, and says why in its log and theirs.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tenure_client::{Client, LockMode, Wait};

use crate::common;
use crate::common::load::{Load, check_holds, client, worker};
use crate::common::lookup::{devices, endpoints};
use crate::common::{Guard, up};
use tenure_server::WIRE_VERSIONS_ENV;
use tenure_server::wire::WIRE_VERSION;

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

/// `tenure ARGS` with `env`: (success, stdout and stderr).
fn tenure_with(args: &[&str], env: &[(&str, String)]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("run tenure");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// `tenure cluster up --data DATA` (starting the devices that are not running) with
/// `env`: (success, stdout and stderr).
fn up_with(data: &str, wait_secs: &str, env: &[(&str, String)]) -> (bool, String) {
    let args = ["cluster", "up", "--data", data, "--wait-secs", wait_secs];
    tenure_with(&args, env)
}

/// `tenure cluster up` of a new 3-device cluster at `data`, with `env`.
fn up_new(data: &str, env: &[(&str, String)]) -> (bool, String) {
    let stores = common::STORES.to_string();
    let args = [
        "cluster",
        "up",
        "--devices",
        "3",
        "--stores",
        &stores,
        "--data",
        data,
    ];
    tenure_with(&[&args[..], &["--wait-secs", "60"]].concat(), env)
}

/// Whether process `pid` runs: it has a /proc entry that is not a zombie (a device
/// whose parent is gone is reaped by whatever adopted it, which may take a while).
fn running(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let state = s.rsplit_once(')')?.1.split_whitespace().next()?.to_string();
            Some(state != "Z")
        })
        .unwrap_or(false)
}

/// SIGTERM device `pid` and wait until it has exited.
async fn stop_device(id: u64, pid: u64) {
    let t = Instant::now();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    while running(pid) {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "device {id} did not stop on SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn log_of(data: &std::path::Path, id: u64) -> String {
    std::fs::read_to_string(data.join(format!("d{id}/server.log"))).unwrap_or_default()
}

fn pids(data: &std::path::Path) -> BTreeMap<u64, u64> {
    devices(data).into_iter().map(|d| (d.id, d.pid)).collect()
}

/// The wire versions the previous build spoke.
const PREVIOUS: &str = "2";

#[test]
fn a_rolling_upgrade_under_load_loses_nothing_and_shows_no_error() {
    let _turn = turn!();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let d = data.to_str().unwrap().to_string();
    let _guard = Guard(data.clone());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (ok, out) = up_new(&d, &[(WIRE_VERSIONS_ENV, PREVIOUS.to_string())]);
    assert!(ok, "starting the previous build's cluster: {out}");
    let endpoints = endpoints(&data);
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
            stop_device(id, pid).await;
            let stopped = t.elapsed();
            // Its data as the previous build left it (no inline value was written while
            // a device of that build was in the cluster): this build upgrades it in place.
            tenure_server::storage::rewrite_as_format_6(
                &data.join(format!("d{id}")),
                tenure_core::ids::DeviceId(id),
            )
            .expect("rewrite as format 6");
            let d = d.clone();
            let (ok, out) = tokio::task::spawn_blocking(move || up_with(&d, "60", &[]))
                .await
                .unwrap();
            assert!(ok, "restarting device {id} as this build: {out}");
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
        // Writes go on for a while with every device of this build: inline values now.
        let before = acked.lock().unwrap().clone();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after = acked.lock().unwrap().clone();
        let rewritten = (after.iter())
            .filter(|(k, v)| before.get(*k) != Some(*v))
            .count();
        eprintln!(
            "rolling restart: {rewritten} of {} keys written again after the upgrade",
            after.len()
        );
        assert!(rewritten > 0, "writes go on after the upgrade");
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
    // Mid-way the upgraded device spoke the previous build's version with the others;
    // at the end, the upgraded devices speak this build's version with each other.
    let (previous, this) = (
        format!("wire_version={PREVIOUS}"),
        format!("wire_version={WIRE_VERSION}"),
    );
    for id in 1..=3 {
        assert!(
            log_of(&data, id).contains("upgraded in place from format 6"),
            "device {id} did not upgrade its data directory"
        );
    }
    assert!(
        log_of(&data, 1).contains(&previous),
        "device 1 never spoke version {PREVIOUS}"
    );
    for id in 1..=3 {
        assert!(
            log_of(&data, id).contains(&this),
            "device {id} never spoke version {WIRE_VERSION} with an upgraded peer"
        );
    }
    let worst = gaps.iter().map(|(_, g)| *g).max().unwrap();
    eprintln!(
        "rolling restart of {} devices: {} lock cycles, no error, no overlap, every write read back; worst stop-to-serving {:.2}s",
        gaps.len(),
        holds.len(),
        worst.as_secs_f64()
    );
}

#[test]
fn a_device_that_no_longer_speaks_this_wire_version_is_refused_and_says_why() {
    let _turn = turn!();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let d = data.to_str().unwrap().to_string();
    let _guard = Guard(data.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    up(&data);
    let pid3 = pids(&data)[&3];
    rt.block_on(stop_device(3, pid3));
    // A device of a build two versions on speaks only the newer version.
    let later = format!("{}", WIRE_VERSION + 1);
    let (ok, out) = up_with(&d, "4", &[(WIRE_VERSIONS_ENV, later)]);
    assert!(
        !ok,
        "a device sharing no wire version with its peers served: {out}"
    );
    let why = "no wire version in common";
    let start = Instant::now();
    while !(log_of(&data, 1).contains(why) && log_of(&data, 3).contains(why)) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the refusal is not in the logs:\n{}\n{}",
            log_of(&data, 1),
            log_of(&data, 3)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let line = |id| {
        log_of(&data, id)
            .lines()
            .find(|l| l.contains(why))
            .unwrap_or_default()
            .to_string()
    };
    eprintln!("device 1: {}\ndevice 3: {}", line(1), line(3));
    assert!(line(1).contains("upgrade this device first"), "{}", line(1));
    assert!(line(3).contains("upgrade the peer first"), "{}", line(3));
    // The others serve meanwhile; the device of this build rejoins.
    let endpoints = endpoints(&data);
    rt.block_on(async {
        let c = client(&data, &endpoints);
        let g = c
            .lock("/refused/lock", LockMode::Exclusive, Wait::Forever)
            .await
            .expect("the others serve");
        g.release().await.unwrap();
    });
    let pid3 = pids(&data)[&3];
    rt.block_on(stop_device(3, pid3));
    let (ok, out) = up_with(&d, "60", &[]);
    assert!(ok, "device 3 of this build rejoins: {out}");
}
