//! The command line's behaviour that needs no cluster.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

// `tenure ... | head`: when the reader goes away, tenure stops quietly with the status of
// a command killed by SIGPIPE, instead of panicking with a backtrace.
#[test]
fn closed_stdout_ends_quietly() {
    let _turn = turn!();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["sim", "--seed", "1", "--trace"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tenure");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("a first line");
    assert!(!first.is_empty());
    // The reader is dropped here: stdout is a closed pipe from now on.
    let out = child.wait_with_output().expect("tenure ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "stderr: {stderr}");
}

// `bench locks` refuses a connection count it cannot use before it looks for a cluster.
#[test]
fn bench_refuses_more_connections_than_clients() {
    let _turn = turn!();
    for conns in ["0", "5"] {
        let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
            .args(["bench", "locks", "--clients", "4", "--conns", conns])
            .args(["--data", "/nonexistent/tenure-data"])
            .output()
            .expect("run tenure");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--conns {conns} accepted");
        assert!(
            stderr.contains("--conns must be between 1 and --clients"),
            "--conns {conns}: {stderr}"
        );
    }
}

/// DESIGN §8 (bad input): `tenure fuzz` feeds mutated real encodings (a simulator run's
/// messages and records, and the repository's corpus under `fuzz/corpus`) to every
/// decoder; none panics or decodes wrongly, and each both accepts and rejects inputs
/// (mutations that never get through are no evidence).
#[test]
fn fuzz_command_finds_no_failure_in_any_decoder() {
    let _turn = turn!();
    let corpus = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/corpus");
    assert!(
        std::path::Path::new(corpus).join("wire").is_dir(),
        "the repository keeps a corpus in {corpus}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args([
            "fuzz", "--inputs", "50000", "--seed", "3", "--corpus", corpus,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let rows: Vec<Vec<&str>> = (text.lines().skip(2))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let names: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(
        names,
        [
            "wire",
            "wal",
            "wal-record",
            "snapshot-part",
            "snapshot-body",
            "lock-name",
            "grpc-publish",
            "grpc-watch",
            "grpc-put"
        ],
        "{text}"
    );
    for r in &rows {
        assert_eq!(r[1], "50000", "{text}");
        assert!(r[3].parse::<u64>().unwrap() > 0, "nothing accepted: {text}");
        assert_eq!(r[4], "0", "failures: {text}");
    }
}
