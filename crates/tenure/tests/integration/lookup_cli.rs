//! `tenure lookup` against a local cluster of `tenure server` processes (seed 003): put,
//! get, ls, rm and their errors from the command line; `watch` prints one line per
//! change; a provider holding an entry while its command runs (`put -- sleep 60`) is
//! killed with SIGKILL and its entry disappears within its lifetime (measured, printed
//! and held to the bound). Every wait is bounded and polls a condition; guards kill the processes if a
//! step fails.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::lookup::{
    Proc, device_config, devices, expect_line, lines_of, rt, run, run_cmd, wait_lookup,
};
use crate::common::{Guard, kill9, up};

#[test]
fn put_get_ls_rm_and_their_errors_from_the_cli() {
    let _turn = turn!();
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
    let _turn = turn!();
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
    // The leader drops the entry one lifetime after the last refresh it got, and that
    // refresh came before the kill: 2 intervals (one lost refresh is masked) + a round
    // trip (seed 003, `LookupSettings::entry_lifetime`). The slack is the report's way
    // to this test — the leader's expiry timer, a peer message to the watch's device, its
    // gRPC stream, the CLI's output, a pipe and a reader thread: a few ms on an idle
    // machine, but each hop may wait out scheduler slices on a loaded 2-core CI machine
    // (other clusters, a simulator sweep). 400 ms, less than the interval: an entry kept
    // a whole interval too long is still likely to fail the bound.
    let settings = device_config(&devices(&data)[0]).lookup;
    let lifetime = settings.entry_lifetime(Duration::from_millis(500));
    let slack = Duration::from_millis(400);
    eprintln!(
        "the killed provider's entry (interval 500ms) was reported expired {gone:?} after \
         the kill; bound: its lifetime 2 x 500ms + {:?} = {lifetime:?} after the last \
         refresh + {slack:?} slack = {:?}",
        settings.roundtrip_delay,
        lifetime + slack
    );
    assert!(
        gone <= lifetime + slack,
        "the killed provider's entry was reported expired {gone:?} after the kill, past \
         its lifetime {lifetime:?} + {slack:?}"
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
