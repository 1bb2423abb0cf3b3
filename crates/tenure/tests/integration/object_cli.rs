//! Objects on real processes (seed 001, DESIGN §5): a local cluster of three `tenure
//! server` processes on 127.0.0.1 (`tenure cluster up`), driven through the `tenure
//! object` commands and the client library. The store's manager is killed with SIGKILL
//! in the middle of a 20 MiB upload and under a watch; the cluster is stopped and
//! restarted from its data. Every wait is bounded and polls a condition; a guard kills
//! the processes if a step fails.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tenure_client::objects::PutOptions;
use tenure_client::{Client, ClientOptions, LockMode, Wait};

use crate::common::{Guard, cluster_file, kill9, tenure, up, with_tls};

fn endpoints(data: &Path) -> Vec<String> {
    cluster_file(data)["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["client_addr"].as_str().unwrap().to_string())
        .collect()
}

fn client(data: &Path, eps: Vec<String>) -> Client {
    let opts = ClientOptions {
        request_timeout: Duration::from_secs(3),
        retry_deadline: Duration::from_secs(40),
        max_attempts: 400,
        ..Default::default()
    };
    Client::with_options(eps, with_tls(data, opts)).unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// `tenure` with `args` and `--data`.
fn cli(data: &Path, args: &[&str]) -> (bool, String, String) {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--data", data.to_str().unwrap()]);
    tenure(&all)
}

fn content(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(151).wrapping_add(seed) ^ (i >> 11) as u8)
        .collect()
}

/// The device that manages `store` now (every device asked; exactly one says so).
async fn manager_of(c: &Client, eps: &[String], store: u32, limit: Duration) -> u64 {
    let start = Instant::now();
    loop {
        let mut found = Vec::new();
        for e in eps {
            if let Ok(s) = c.status_of(e).await
                && s.managers
                    .iter()
                    .any(|m| m.store == store && m.is_manager())
            {
                found.push(s.device);
            }
        }
        if let [d] = found[..] {
            return d;
        }
        assert!(
            start.elapsed() < limit,
            "store {store}: managers {found:?} after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn pid_of(data: &Path, device: u64) -> u64 {
    cluster_file(data)["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"].as_u64() == Some(device))
        .and_then(|d| d["pid"].as_u64())
        .unwrap()
}

/// put/get/rm/ls through the CLI, conditions, a CAS race between two processes, a
/// fenced put refused after the lock moved, and a full restart that keeps every
/// acknowledged object.
#[test]
fn object_commands_conditions_fencing_and_full_restart() {
    let _turn = turn!();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    up(&data);
    let file = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p.to_str().unwrap().to_string()
    };
    let mut acked: BTreeMap<String, Vec<u8>> = BTreeMap::new();

    // Round trip.
    let a = content(5000, 1);
    let fa = file("a", &a);
    let (ok, out, err) = cli(&data, &["object", "put", "/app/a", &fa, "--json"]);
    assert!(ok, "put: {out} {err}");
    let w: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rev_a = w["revision"].as_u64().unwrap();
    acked.insert("/app/a".into(), a.clone());
    let got = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["object", "get", "/app/a", "--data", data.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(got.status.success());
    assert_eq!(got.stdout, a, "get writes the content to stdout");
    let (ok, out, _) = cli(&data, &["object", "get", "/app/a", "--json"]);
    assert!(ok);
    let meta: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(meta["revision"].as_u64(), Some(rev_a));
    assert_eq!(meta["size"].as_u64(), Some(5000));
    // From standard input.
    let mut put = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args([
            "object",
            "put",
            "/app/b",
            "-",
            "--data",
            data.to_str().unwrap(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(put.stdin.as_mut().unwrap(), b"from stdin").unwrap();
    drop(put.stdin.take());
    assert!(put.wait().unwrap().success());
    acked.insert("/app/b".into(), b"from stdin".to_vec());
    let (ok, out, err) = cli(&data, &["object", "ls", "/app"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("/app/a  5000 bytes") && out.contains("/app/b"),
        "{out}"
    );
    let (ok, out, _) = cli(&data, &["object", "ls", "/", "--json"]);
    assert!(ok);
    let l: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(l["objects"].as_array().unwrap().len(), 2);
    let (ok, out, err) = cli(&data, &["object", "rm", "/app/b"]);
    assert!(ok, "{out} {err}");
    acked.remove("/app/b");
    let (ok, _, err) = cli(&data, &["object", "get", "/app/b"]);
    assert!(!ok && err.contains("no object /app/b"), "{err}");

    // Conditions, with errors that say what failed and what to do.
    let (ok, _, err) = cli(&data, &["object", "put", "/app/a", &fa, "--if-absent"]);
    assert!(!ok && err.contains("already exists at revision"), "{err}");
    let (ok, _, err) = cli(
        &data,
        &["object", "put", "/app/a", &fa, "--if-version", "999999"],
    );
    assert!(
        !ok && err.contains(&format!("is at revision {rev_a}")),
        "{err}"
    );
    let (ok, _, err) = cli(&data, &["object", "put", "bad-key", &fa]);
    assert!(!ok && err.contains("invalid name"), "{err}");

    // Two processes race a compare-and-set on the same revision: exactly one wins.
    let fx = file("x", b"racer");
    let race: Vec<_> = (0..2)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_tenure"))
                .args(["object", "put", "/app/a", &fx, "--if-version"])
                .arg(rev_a.to_string())
                .args(["--data", data.to_str().unwrap()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let results: Vec<_> = race
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let winners = results.iter().filter(|o| o.status.success()).count();
    assert_eq!(winners, 1, "{results:?}");
    let loser = results.iter().find(|o| !o.status.success()).unwrap();
    assert!(String::from_utf8_lossy(&loser.stderr).contains("not the one given"));
    acked.insert("/app/a".into(), b"racer".to_vec());

    // A fenced put under `tenure lock`: the token comes from TENURE_FENCING_TOKEN.
    let ff = file("f", b"fenced one");
    let token_file = dir.path().join("token");
    let script = format!(
        "echo $TENURE_FENCING_TOKEN > {t} && {bin} object put /app/f {ff} --fenced-by \
         /app/lock --data {d}",
        t = token_file.display(),
        bin = env!("CARGO_BIN_EXE_tenure"),
        d = data.display()
    );
    let d = data.to_str().unwrap();
    let lock = [
        "lock",
        "/app/lock",
        "--try",
        "--data",
        d,
        "--",
        "sh",
        "-c",
        &script,
    ];
    let (ok, out, err) = tenure(&lock);
    assert!(ok, "fenced put under the lock: {out} {err}");
    acked.insert("/app/f".into(), b"fenced one".to_vec());
    let stale = std::fs::read_to_string(&token_file).unwrap();
    let stale = stale.trim();
    assert!(stale.contains('.'), "token {stale:?}");
    // The lock moves to another holder: the old token is refused, nothing changes.
    let rt = rt();
    let _in_rt = rt.enter();
    let c = client(&data, endpoints(&data));
    let guard = rt
        .block_on(c.lock("/app/lock", LockMode::Exclusive, Wait::Try))
        .unwrap();
    let f2 = file("f2", b"late write");
    let (ok, _, err) = cli(
        &data,
        &[
            "object",
            "put",
            "/app/f",
            &f2,
            "--fenced-by",
            "/app/lock",
            "--token",
            stale,
        ],
    );
    assert!(!ok && err.contains("fencing token is stale"), "{err}");
    let (ok, _, err) = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["object", "put", "/app/f", &f2, "--fenced-by", "/app/lock"])
        .args(["--data", data.to_str().unwrap()])
        .env_remove("TENURE_FENCING_TOKEN")
        .output()
        .map(|o| {
            (
                o.status.success(),
                (),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            )
        })
        .unwrap();
    assert!(!ok && err.contains("needs a fencing token"), "{err}");
    // The current holder's token is accepted.
    let current = guard.token().to_string();
    let (ok, _, err) = cli(
        &data,
        &[
            "object",
            "put",
            "/app/f",
            &f2,
            "--fenced-by",
            "/app/lock",
            "--token",
            &current,
        ],
    );
    assert!(ok, "{err}");
    acked.insert("/app/f".into(), b"late write".to_vec());
    rt.block_on(guard.release()).unwrap();
    rt.block_on(c.close()).ok();
    drop(c);

    // A larger object, and a full restart: every acknowledged object reads back.
    let big = content(5 << 20, 3);
    let fb = file("big", &big);
    let (ok, _, err) = cli(&data, &["object", "put", "/data/big", &fb]);
    assert!(ok, "{err}");
    acked.insert("/data/big".into(), big);
    let (ok, out, err) = cli(&data, &["cluster", "down"]);
    assert!(ok, "cluster down: {out} {err}");
    up(&data);
    let c = client(&data, endpoints(&data));
    for (key, want) in &acked {
        let got = rt.block_on(c.objects().get(key)).unwrap();
        assert!(got.data[..] == want[..], "{key} after a full restart");
    }
    let l = rt.block_on(c.objects().list("/")).unwrap();
    let keys: Vec<&str> = l.objects.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(keys, acked.keys().map(String::as_str).collect::<Vec<_>>());
}

/// A 20 MiB upload whose store manager is killed with SIGKILL right as the content has
/// been sent: the client retries on the new manager with the same session and request
/// id, and the object reads back identical (also after the device comes back).
#[test]
fn upload_survives_kill_9_of_the_manager() {
    let _turn = turn!();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    up(&data);
    let eps = endpoints(&data);
    let rt = rt();
    let _in_rt = rt.enter();
    let c = client(&data, eps.clone());
    let key = "/upload/blob";
    let store = rt.block_on(c.store_of(key)).unwrap();
    // An object first, so the session and the route to the manager exist.
    rt.block_on(c.objects().put("/upload/small", b"x".to_vec()))
        .unwrap();
    let victim = rt.block_on(manager_of(&c, &eps, store, Duration::from_secs(30)));
    let pid = pid_of(&data, victim);
    let blob = content(20 << 20, 9);
    let killed = Arc::new(AtomicBool::new(false));
    let k = killed.clone();
    let opts = PutOptions {
        progress: Some(Arc::new(move |sent, total| {
            if sent == total && !k.swap(true, Ordering::SeqCst) {
                kill9(pid);
            }
        })),
        ..Default::default()
    };
    let started = Instant::now();
    let w = rt
        .block_on(c.objects().put_with(key, blob.clone(), opts))
        .expect("the upload is retried on the new manager");
    assert!(killed.load(Ordering::SeqCst), "the manager was killed");
    eprintln!(
        "20 MiB upload acknowledged {:?} after it started (manager d{victim} killed)",
        started.elapsed()
    );
    let now = rt.block_on(manager_of(&c, &eps, store, Duration::from_secs(40)));
    assert_ne!(now, victim);
    let got = rt.block_on(c.objects().get(key)).unwrap();
    assert_eq!(got.info.revision, w.revision);
    assert!(got.data[..] == blob[..], "identical bytes");
    // Exactly one version was written.
    let l = rt.block_on(c.objects().list("/upload")).unwrap();
    assert_eq!(l.objects.len(), 2);
    // The killed device comes back and catches up; the object is still whole.
    up(&data);
    let got = rt.block_on(c.objects().get(key)).unwrap();
    assert!(got.data[..] == blob[..]);
    rt.block_on(c.close()).ok();
}

/// `tenure object watch` through a SIGKILL of the store's manager: every acknowledged
/// write appears exactly once, in revision order.
#[test]
fn watch_through_a_manager_failover_misses_nothing() {
    let _turn = turn!();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    up(&data);
    let eps = endpoints(&data);
    let rt = rt();
    let _in_rt = rt.enter();
    let c = client(&data, eps.clone());
    let store = rt.block_on(c.store_of("/watched")).unwrap();
    let mut watcher = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["object", "watch", "/watched", "--json"])
        .args(["--data", data.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = watcher.stdout.take().unwrap();
    let watcher = Kill(watcher);
    let (tx, rx) = std::sync::mpsc::channel::<serde_json::Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Ok(v) = serde_json::from_str(&line)
                && tx.send(v).is_err()
            {
                break;
            }
        }
    });
    let first = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("watch starts");
    let after = first["after"].as_u64().expect("the watch's start");

    let victim = rt.block_on(manager_of(&c, &eps, store, Duration::from_secs(30)));
    let mut acked = Vec::new();
    for i in 0..40 {
        if i == 15 {
            kill9(pid_of(&data, victim));
        }
        let key = format!("/watched/k{}", i % 7);
        let w = rt
            .block_on(c.objects().put(&key, format!("v{i}").into_bytes()))
            .expect("puts go on at the new manager");
        acked.push((w.revision, key));
    }
    let now = rt.block_on(manager_of(&c, &eps, store, Duration::from_secs(40)));
    assert_ne!(now, victim, "the manager moved");

    let mut seen: Vec<(u64, String)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !acked.iter().all(|a| seen.contains(a)) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(v) => {
                assert_ne!(v["event"], "reread", "no compaction expected: {v}");
                seen.push((
                    v["revision"].as_u64().unwrap(),
                    v["key"].as_str().unwrap().to_string(),
                ));
            }
            Err(_) => {
                panic!("the watch missed acknowledged writes: acked {acked:?}, seen {seen:?}")
            }
        }
    }
    assert!(seen.iter().all(|(r, _)| *r > after));
    assert!(
        seen.windows(2).all(|w| w[0].0 < w[1].0),
        "in revision order, each once: {seen:?}"
    );
    drop(watcher);
    rt.block_on(c.close()).ok();
}

/// A lock holder that is paused (SIGSTOP) longer than its session's TTL loses the lock
/// to another process; when it resumes, its fenced put with the token it was granted is
/// refused (the store checks the token atomically with the write), and the object keeps
/// the new holder's content.
#[test]
fn a_paused_lock_holders_fenced_put_is_refused_after_the_lock_moved() {
    let _turn = turn!();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    up(&data);
    let d = data.to_str().unwrap().to_string();
    let tok_file = dir.path().join("token");
    // Holder 1: takes the lock with a 2 s TTL and hands its token to the test, then
    // would go on working.
    let script = format!(
        "echo $TENURE_FENCING_TOKEN > {}; sleep 60",
        tok_file.display()
    );
    let mut holder = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args([
            "lock",
            "/pause/lock",
            "--ttl",
            "2s",
            "--data",
            &d,
            "--",
            "sh",
            "-c",
        ])
        .arg(&script)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let token = loop {
        if let Ok(t) = std::fs::read_to_string(&tok_file)
            && !t.trim().is_empty()
        {
            break t.trim().to_string();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "holder 1 got no lock"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    // Pause holder 1 (the process keeping its session alive) past its TTL.
    let pid = holder.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success()
    );
    // Holder 2 gets the lock once holder 1's session expired, and writes under it.
    let new = dir.path().join("new");
    std::fs::write(&new, b"holder 2").unwrap();
    let (ok, out, err) = tenure(&[
        "lock",
        "/pause/lock",
        "--timeout",
        "30s",
        "--data",
        &d,
        "--",
        env!("CARGO_BIN_EXE_tenure"),
        "object",
        "put",
        "/pause/data",
        new.to_str().unwrap(),
        "--fenced-by",
        "/pause/lock",
        "--data",
        &d,
    ]);
    assert!(ok, "holder 2: {out} {err}");
    // Holder 1 resumes and writes with the token it was granted: refused.
    assert!(
        Command::new("kill")
            .args(["-CONT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let old = dir.path().join("old");
    std::fs::write(&old, b"holder 1, late").unwrap();
    let (ok, out, err) = cli(
        &data,
        &[
            "object",
            "put",
            "/pause/data",
            old.to_str().unwrap(),
            "--fenced-by",
            "/pause/lock",
            "--token",
            &token,
        ],
    );
    assert!(!ok, "the stale fenced put must fail: {out}");
    assert!(err.contains("stale"), "{err}");
    let got = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["object", "get", "/pause/data", "--data", &d])
        .output()
        .unwrap();
    assert_eq!(got.stdout, b"holder 2");
    let _ = holder.kill();
    let _ = holder.wait();
}
