//! `tenure lock NAME -- COMMAND` against a local cluster when the session expires under a
//! command that then finishes: the `tenure` process is stopped (SIGSTOP) while the command
//! runs, so no keep-alive reaches the manager; the command finishes, the manager expires
//! the session and frees the lock; then `tenure` continues, finds the command finished,
//! and its release finds the session expired. It says so and exits with 120, not with
//! the command's status, and does not claim to kill the command. Every wait is bounded
//! and polls a condition (no fixed sleeps); a guard kills the processes if a step fails.

use std::process::{Command, Stdio};
use std::time::Duration;
use tenure_client::{Client, LockMode, Wait};

use crate::common::{Guard, cluster_file, until, up, with_tls};

const NAME: &str = "/cli/expiring";

/// How often a wait polls.
const POLL: Duration = Duration::from_millis(20);

fn signal(sig: &str, pid: u32) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// The state letter of a process in /proc (`Z` for an exited child not yet reaped).
fn proc_state(pid: &str) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().next().map(str::to_string)
}

/// A local cluster in `data`, and a client of it.
fn start(data: &std::path::Path) -> Client {
    up(data);
    let endpoints: Vec<String> = cluster_file(data)["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["client_addr"].as_str().unwrap().to_string())
        .collect();
    Client::with_options(endpoints, with_tls(data, Default::default())).unwrap()
}

#[test]
fn command_that_outlives_its_session_exits_with_the_expiry_status() {
    let _turn = turn!();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _in_rt = rt.enter();
    let client = start(&data);

    // The command records its pid, waits for `go`, and exits with 7.
    let started = dir.path().join("started");
    let go = dir.path().join("go");
    let script = format!(
        "echo $$ > {s}.tmp && mv {s}.tmp {s}; while [ ! -e {g} ]; do sleep 0.02; done; exit 7",
        s = started.display(),
        g = go.display()
    );
    let mut lock = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["lock", NAME, "--try", "--ttl", "2s", "--data"])
        .arg(&data)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let cmd_pid = until(POLL, Duration::from_secs(20), "the command starts", || {
        let pid = std::fs::read_to_string(&started).ok()?;
        Some(pid.trim().to_string())
    });
    let held = rt.block_on(client.holders(NAME)).unwrap();
    assert_eq!(held.holders.len(), 1, "{held:?}");

    // Stop `tenure`, let the command finish: it stays a zombie while its parent is stopped.
    signal("-STOP", lock.id());
    std::fs::write(&go, "").unwrap();
    until(POLL, Duration::from_secs(10), "the command exits", || {
        (proc_state(&cmd_pid)? == "Z").then_some(())
    });
    // No keep-alive: the manager expires the session and frees the lock.
    until(POLL, Duration::from_secs(30), "the session expires", || {
        let s = rt.block_on(client.holders(NAME)).ok()?;
        s.holders.is_empty().then_some(())
    });
    signal("-CONT", lock.id());

    let status = until(POLL, Duration::from_secs(30), "tenure lock ends", || {
        lock.try_wait().unwrap()
    });
    let out = lock.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(status.code(), Some(120), "stderr: {stderr}");
    assert!(
        stderr.contains("the command finished (status 7)"),
        "stderr: {stderr}"
    );
    assert!(
        stderr.contains("expired") && stderr.contains("another session may have taken it"),
        "stderr: {stderr}"
    );
    assert!(!stderr.contains("killing"), "stderr: {stderr}");
    // The next holder gets the lock (after the expiry's lock-delay).
    let wait = Wait::Timeout(Duration::from_secs(30));
    let next = rt
        .block_on(client.lock(NAME, LockMode::Exclusive, wait))
        .unwrap();
    rt.block_on(next.release()).unwrap();
    rt.block_on(client.close()).ok();
}

/// A SIGTERM (a service manager stopping the holder) releases the lock at once: the next
/// holder does not wait for the session's TTL (60 s here), and `tenure lock` exits with 0.
/// Sent right after the lock line, so it also checks that no signal between the wait and
/// the hold is lost.
#[test]
fn sigterm_releases_the_lock_held_without_a_command() {
    let _turn = turn!();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _in_rt = rt.enter();
    let client = start(&data);
    let name = "/cli/terminated";
    let mut lock = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["lock", name, "--try", "--ttl", "60s", "--data"])
        .arg(&data)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(lock.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert!(line.starts_with("locked /cli/terminated"), "{line}");
    signal("-TERM", lock.id());
    let status = until(POLL, Duration::from_secs(30), "tenure lock ends", || {
        lock.try_wait().unwrap()
    });
    assert_eq!(status.code(), Some(0));
    let held = rt.block_on(client.holders(name)).unwrap();
    assert!(held.holders.is_empty(), "{held:?}");
    let next = rt
        .block_on(client.lock(name, LockMode::Exclusive, Wait::Try))
        .unwrap();
    rt.block_on(next.release()).unwrap();
    rt.block_on(client.close()).ok();
}
