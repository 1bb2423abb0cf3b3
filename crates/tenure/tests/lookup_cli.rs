//! `tenure lookup` against a local cluster of `tenure server` processes (seed 003): put,
//! get, ls, rm and their errors from the command line; `watch` prints one line per
//! change; a provider holding an entry while its command runs (`put -- sleep 60`) is
//! killed with SIGKILL and its entry disappears within its lifetime (measured and
//! printed). Every wait is bounded and polls a condition; guards kill the processes if a
//! step fails.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tenure_client::Client;

mod common;
use common::{Guard, cluster_file, kill9, up, with_tls};

/// `tenure ARGS --data DATA`: (exit code, stdout, stderr).
fn run(data: &std::path::Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(args)
        .arg("--data")
        .arg(data)
        .output()
        .expect("run tenure");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `tenure lookup ARGS --data DATA -- COMMAND`.
fn run_cmd(
    data: &std::path::Path,
    args: &[&str],
    command: &[&str],
) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(args)
        .arg("--data")
        .arg(data)
        .arg("--")
        .args(command)
        .output()
        .expect("run tenure");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn endpoints(data: &std::path::Path) -> Vec<String> {
    cluster_file(data)["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["client_addr"].as_str().unwrap().to_string())
        .collect()
}

/// Wait (bounded) until the devices agree on one lookup leader.
fn wait_lookup(rt: &tokio::runtime::Runtime, data: &std::path::Path) {
    let _in_rt = rt.enter();
    let client = Client::with_options(endpoints(data), with_tls(data, Default::default())).unwrap();
    let started = Instant::now();
    loop {
        let views: Vec<_> = rt
            .block_on(client.node_status_all())
            .into_iter()
            .filter_map(|(_, r)| r.ok())
            .collect();
        let leaders: Vec<u64> = views
            .iter()
            .filter(|v| v.state == "Leader")
            .map(|v| v.device)
            .collect();
        if views.len() == 3
            && leaders.len() == 1
            && views.iter().all(|v| v.leader == Some(leaders[0]))
        {
            eprintln!(
                "lookup leader d{} agreed {:?} after the cluster was up",
                leaders[0],
                started.elapsed()
            );
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no agreed lookup leader: {views:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A child process killed (by its pid) when the test ends, passed or not.
struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The lines a child prints, read on a thread.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// The next line that satisfies `pred` (bounded); lines before it are printed.
fn expect_line(
    rx: &mpsc::Receiver<String>,
    limit: Duration,
    what: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let started = Instant::now();
    loop {
        let left = limit.saturating_sub(started.elapsed());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("{what}: no such line within {limit:?}"));
        let v: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("watch --json printed {line:?}: {e}"));
        if pred(&v) {
            return v;
        }
        eprintln!("(watch: {line})");
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn put_get_ls_rm_and_their_errors_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    let rt = rt();
    up(&data);
    // At once: the lookup service is still starting (join, warm-up); put waits for a
    // leader before its unacknowledged publish, so the entry is not lost.
    let (code, out, err) = run(&data, &["lookup", "put", "/t/web", "10.0.0.1:80"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.starts_with("published /t/web (volatile"), "{out}");
    let (code, out, err) = run(&data, &["lookup", "get", "/t/web"]);
    assert_eq!((code, out.as_str()), (Some(0), "10.0.0.1:80\n"), "{err}");
    wait_lookup(&rt, &data);

    let (code, out, err) = run(
        &data,
        &[
            "lookup",
            "put",
            "/t/db",
            "primary=d2",
            "--persistent",
            "--json",
        ],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["acknowledged"], true, "{v}");
    assert_eq!(v["interval_ms"], 300_000, "default persistent interval 5m");

    let (code, out, err) = run(&data, &["lookup", "ls", "/t", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let list: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    let keys: Vec<&str> = list.iter().map(|e| e["key"].as_str().unwrap()).collect();
    assert!(keys.contains(&"/t/db"), "{out}");
    let (code, out, _) = run(&data, &["lookup", "ls", "/t"]);
    assert_eq!(code, Some(0));
    assert!(
        out.contains("/t/db = primary=d2  (persistent, every 5m"),
        "{out}"
    );
    let (_, out, _) = run(&data, &["lookup", "get", "/t/db", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["value"].as_str(), v["durability"].as_str()),
        (Some("primary=d2"), Some("persistent"))
    );

    let (code, out, err) = run(&data, &["lookup", "rm", "/t/db"]);
    assert_eq!((code, out.as_str()), (Some(0), "revoked /t/db\n"), "{err}");
    let (code, out, err) = run(&data, &["lookup", "get", "/t/db"]);
    assert_eq!(code, Some(1), "absent: exit 1; {out}{err}");
    assert!(
        out.is_empty() && err.contains("no entry at /t/db"),
        "{out}{err}"
    );
    let (code, out, _) = run(&data, &["lookup", "get", "/t/never", "--json"]);
    assert_eq!(code, Some(1));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["found"],
        false
    );

    // Bad input: clear errors, nothing published.
    let (code, _, err) = run(&data, &["lookup", "put", "no-slash", "v"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("invalid key"), "{err}");
    let (code, _, err) = run(&data, &["lookup", "get", "/a//b"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("invalid key"), "{err}");
    let big = "x".repeat(70_000);
    let (code, _, err) = run(&data, &["lookup", "put", "/t/big", &big]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("value is 70000 bytes, the limit is 65536"),
        "{err}"
    );
    let (code, _, err) = run(
        &data,
        &["lookup", "put", "/t/slow", "v", "--interval", "1m"],
    );
    assert_eq!(code, Some(1));
    assert!(err.contains("--persistent"), "a hint: {err}");
    let (code, _, _) = run(&data, &["lookup", "get", "/t/big"]);
    assert_eq!(code, Some(1), "the oversized value was not published");

    // Held while a command runs; revoked after it; the command's status passes on.
    let (code, out, err) = run_cmd(
        &data,
        &["lookup", "put", "/t/job", "running", "--interval", "500ms"],
        &["sh", "-c", "test \"$TENURE_LOOKUP_KEY\" = /t/job && exit 3"],
    );
    assert_eq!(code, Some(3), "{out}{err}");
    let (code, _, _) = run(&data, &["lookup", "get", "/t/job"]);
    assert_eq!(code, Some(1), "revoked once the command ended");

    // `tenure status` shows the lookup leader and the active nodes.
    let (code, out, err) = run(&data, &["status"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("lookup: leader d"), "{out}");
    let (_, out, _) = run(&data, &["status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["lookup"]["leader"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["lookup"]["nodes"].as_array().unwrap().len(), 3, "{v}");
    assert!(!v["lookup"]["active"].as_array().unwrap().is_empty(), "{v}");
}

#[test]
fn watch_prints_changes_and_a_killed_providers_entry_expires() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    let rt = rt();
    up(&data);
    wait_lookup(&rt, &data);

    let mut watch = Proc(
        Command::new(env!("CARGO_BIN_EXE_tenure"))
            .args(["lookup", "watch", "/w", "--json", "--data"])
            .arg(&data)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let lines = lines_of(&mut watch.0);
    let key_is = |event: &'static str, key: &'static str| {
        move |v: &serde_json::Value| v["event"] == event && v["key"] == key
    };

    let (code, _, err) = run(&data, &["lookup", "put", "/w/a", "one", "--persistent"]);
    assert_eq!(code, Some(0), "{err}");
    let v = expect_line(
        &lines,
        Duration::from_secs(20),
        "put /w/a",
        key_is("put", "/w/a"),
    );
    assert_eq!(v["value"], "one");
    let (code, _, err) = run(&data, &["lookup", "rm", "/w/a"]);
    assert_eq!(code, Some(0), "{err}");
    let v = expect_line(
        &lines,
        Duration::from_secs(10),
        "removed /w/a",
        key_is("removed", "/w/a"),
    );
    assert_eq!(v["cause"], "revoked");

    // A provider keeping /w/p while its command runs, killed with SIGKILL: nobody
    // revokes the entry; it expires 2 x 500 ms + a round trip after the last refresh.
    let pidfile = dir.path().join("sleep.pid");
    let script = format!(
        "echo $$ > {p}.tmp && mv {p}.tmp {p}; exec sleep 60",
        p = pidfile.display()
    );
    let mut provider = Proc(
        Command::new(env!("CARGO_BIN_EXE_tenure"))
            .args([
                "lookup",
                "put",
                "/w/p",
                "here",
                "--interval",
                "500ms",
                "--data",
            ])
            .arg(&data)
            .args(["--", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    expect_line(
        &lines,
        Duration::from_secs(20),
        "put /w/p",
        key_is("put", "/w/p"),
    );
    let started = Instant::now();
    let sleep_pid: u64 = loop {
        if let Ok(s) = std::fs::read_to_string(&pidfile) {
            break s.trim().parse().unwrap();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the command did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // Refreshed for a while: still there after several lifetimes.
    std::thread::sleep(Duration::from_millis(2500));
    let (code, out, _) = run(&data, &["lookup", "get", "/w/p"]);
    assert_eq!(
        (code, out.as_str()),
        (Some(0), "here\n"),
        "kept alive by its provider"
    );
    kill9(u64::from(provider.0.id()));
    let killed = Instant::now();
    let _ = provider.0.wait();
    let v = expect_line(
        &lines,
        Duration::from_secs(20),
        "removed /w/p",
        key_is("removed", "/w/p"),
    );
    let gone = killed.elapsed();
    assert_eq!(v["cause"], "expired", "{v}");
    eprintln!(
        "the killed provider's entry (interval 500ms) was reported expired {gone:?} after \
         the kill; its lifetime is 2 x 500ms + 100ms = 1.1s after the last refresh"
    );
    let (code, _, _) = run(&data, &["lookup", "get", "/w/p"]);
    assert_eq!(code, Some(1), "gone");
    kill9(sleep_pid);
    // The watch is still running and still sees changes.
    let (code, _, err) = run(&data, &["lookup", "put", "/w/z", "last"]);
    assert_eq!(code, Some(0), "{err}");
    expect_line(
        &lines,
        Duration::from_secs(10),
        "put /w/z",
        key_is("put", "/w/z"),
    );
    assert!(watch.0.try_wait().unwrap().is_none(), "watch still runs");
}
