//! The clock shim on a real process, as the chaos devices run under it: a child (this
//! test binary, run again) reads its clocks the way the server does (Rust's
//! `SystemTime` and `Instant`), while the test steps its control file — its wall clock
//! must move and its monotonic clock must not — or starts it with a rate. Skipped with
//! a `SKIPPED` line on stderr where libfaketime is not installed.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tenure_chaos::clock::{self, Clocks};

/// Set in the child's environment.
const CHILD: &str = "TENURE_CHAOS_CLOCK_CHILD";

fn skipped(test: &str, why: &str) {
    eprintln!("SKIPPED {test}: {why}");
    let _ = writeln!(std::io::stderr().lock(), "test {test} ... SKIPPED: {why}");
}

fn wall_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// What starts the child's answers (the test harness may print before them on a line).
const MARK: &str = "@clocks ";

/// The child's side (a test that does nothing unless run as the child): answer each line
/// on stdin with `@clocks <wall s since 1970> <monotonic s since its start>`.
#[test]
fn child_reports_its_clocks() {
    let _turn = turn!();
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let start = Instant::now();
    for line in std::io::stdin().lines() {
        if line.is_err() {
            break;
        }
        println!("{MARK}{:.6} {:.6}", wall_s(), start.elapsed().as_secs_f64());
    }
}

struct Child {
    proc: std::process::Child,
    stdin: Option<ChildStdin>,
    out: BufReader<ChildStdout>,
    /// Set once the child is reaped (its pid may be reused).
    done: Arc<AtomicBool>,
}

impl Child {
    fn spawn(c: &Clocks) -> Child {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "clock::child_reports_its_clocks",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
        clock::apply(&mut cmd, &c.env(1));
        let mut proc = cmd.spawn().expect("starting the child");
        // A child that stops answering is killed, so the test fails instead of hanging.
        let pid = rustix::process::Pid::from_raw(proc.id() as i32).unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let watched = done.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(60));
            if !watched.load(Ordering::SeqCst) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        });
        let stdin = proc.stdin.take();
        let out = BufReader::new(proc.stdout.take().unwrap());
        Child {
            proc,
            stdin,
            out,
            done,
        }
    }

    /// The child's (wall, monotonic) clocks, and the true wall clock when it read them
    /// (the middle of the exchange; it takes well under a millisecond).
    fn clocks(&mut self) -> (f64, f64, f64) {
        let before = wall_s();
        writeln!(self.stdin.as_mut().unwrap()).unwrap();
        let mut line = String::new();
        loop {
            line.clear();
            assert!(self.out.read_line(&mut line).unwrap() > 0, "child ended");
            if let Some(at) = line.find(MARK) {
                let rest = line[at + MARK.len()..].trim();
                let after = wall_s();
                let v: Vec<f64> = rest.split(' ').map(|x| x.parse().unwrap()).collect();
                return (v[0], v[1], (before + after) / 2.0);
            }
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.proc.wait();
        self.done.store(true, Ordering::SeqCst);
        clock::forget(self.proc.id());
    }
}

fn setup(test: &str) -> Option<(Clocks, PathBuf)> {
    let lib = match clock::find() {
        Ok(lib) => lib,
        Err(why) => {
            skipped(test, &why);
            return None;
        }
    };
    let dir = std::env::temp_dir().join(format!("tenure-chaos-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    Some((Clocks::new(lib, std::slice::from_ref(&dir)).unwrap(), dir))
}

#[test]
fn a_step_moves_the_wall_clock_and_not_the_monotonic_clock() {
    let _turn = turn!();
    let Some((mut c, dir)) = setup("a_step_moves_the_wall_clock_and_not_the_monotonic_clock")
    else {
        return;
    };
    let mut child = Child::spawn(&c);
    let start = Instant::now();
    let (wall0, mono0, true0) = child.clocks();
    assert!((wall0 - true0).abs() < 0.2, "unstepped: {wall0} vs {true0}");
    let mut check = |offset: i64| {
        let (wall, mono, truth) = child.clocks();
        let elapsed = start.elapsed().as_secs_f64();
        assert!(
            (wall - truth - offset as f64).abs() < 0.2,
            "stepped {offset:+} s: the child's wall clock is {:+.3} s off",
            wall - truth
        );
        assert!(
            (mono - mono0 - elapsed).abs() < 0.2,
            "stepped {offset:+} s: the child's monotonic clock moved {:.3} s in {elapsed:.3} s",
            mono - mono0
        );
    };
    for offset in [-30, 3600, -3600, 0] {
        c.step(1, offset).unwrap();
        std::thread::sleep(clock::until_read());
        check(offset);
    }
    drop(child);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_drift_runs_both_clocks_at_its_rate() {
    let _turn = turn!();
    let Some((mut c, dir)) = setup("a_drift_runs_both_clocks_at_its_rate") else {
        return;
    };
    // 20 % fast, to be seen in a second; the chaos runs use DRIFT_PPM.
    c.set_drift(1, 200_000).unwrap();
    let mut child = Child::spawn(&c);
    let (wall0, mono0, true0) = child.clocks();
    std::thread::sleep(Duration::from_millis(1500));
    let (wall1, mono1, true1) = child.clocks();
    let real = true1 - true0;
    for (clock, d) in [("wall", wall1 - wall0), ("monotonic", mono1 - mono0)] {
        assert!(
            (d / real - 1.2).abs() < 0.03,
            "{clock} clock moved {d:.3} s in {real:.3} s"
        );
    }
    drop(child);
    let _ = std::fs::remove_dir_all(&dir);
}
