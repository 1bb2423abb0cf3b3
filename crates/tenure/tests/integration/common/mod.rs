//! Helpers shared by the process-level tests: run the `tenure` binary, read
//! `cluster.json`, bring a local cluster up, and kill its processes when a test ends.

#![allow(dead_code)]

pub mod load;
pub mod lookup;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Stores of the test clusters.
pub const STORES: u32 = 8;

/// Run `tenure` with `args`: (success, stdout, stderr).
pub fn tenure(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(args)
        .output()
        .expect("run tenure");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The cluster file `cluster up` wrote under `data`.
pub fn cluster_file(data: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(data.join("cluster.json")).unwrap()).unwrap()
}

/// The TLS settings of a client of the cluster under `data`: its CA (`cluster up` makes
/// TLS clusters by default), none when it is plaintext.
pub fn tls(data: &Path) -> Option<tenure_client::tls::ClientTls> {
    let file = cluster_file(data);
    let ca = file["ca"].as_str()?;
    Some(tenure_client::tls::ClientTls::from_files(Path::new(ca), None).expect("the cluster's CA"))
}

/// `opts` with the TLS settings of a client of the cluster under `data`.
pub fn with_tls(data: &Path, opts: tenure_client::ClientOptions) -> tenure_client::ClientOptions {
    tenure_client::ClientOptions {
        tls: tls(data),
        ..opts
    }
}

/// SIGKILL a process.
pub fn kill9(pid: u64) {
    let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
}

/// Lines of each device's log a failed test prints.
const LOG_TAIL: usize = 80;

/// Kills whatever `cluster.json` lists when the test ends, passed or not.
pub struct Guard(pub PathBuf);
impl Drop for Guard {
    fn drop(&mut self) {
        if let Ok(text) = std::fs::read_to_string(self.0.join("cluster.json"))
            && let Ok(v) = serde_json::from_str::<serde_json::Value>(&text)
        {
            for d in v["devices"].as_array().into_iter().flatten() {
                if let Some(pid) = d["pid"].as_u64() {
                    kill9(pid);
                }
            }
            // A failed test shows what the devices logged last.
            if std::thread::panicking() {
                for d in v["devices"].as_array().into_iter().flatten() {
                    let Some(log) = d["log"].as_str() else {
                        continue;
                    };
                    let text = std::fs::read_to_string(log).unwrap_or_default();
                    let lines: Vec<&str> = text.lines().collect();
                    eprintln!("---- last lines of d{} ({log}) ----", d["id"]);
                    for l in &lines[lines.len().saturating_sub(LOG_TAIL)..] {
                        eprintln!("{l}");
                    }
                }
            }
        }
    }
}

/// `tenure cluster up` with three devices and [`STORES`] stores under `data`.
pub fn up(data: &Path) -> serde_json::Value {
    let (ok, out, err) = tenure(&[
        "cluster",
        "up",
        "--devices",
        "3",
        "--stores",
        &STORES.to_string(),
        "--data",
        data.to_str().unwrap(),
        "--wait-secs",
        "60",
        "--json",
    ]);
    assert!(ok, "cluster up failed:\n{out}\n{err}");
    serde_json::from_str(&out).expect("cluster up --json prints JSON")
}

/// Every device's metrics address, from `cluster.json`.
pub fn metrics_addrs(data: &Path) -> Vec<String> {
    (cluster_file(data)["devices"].as_array().unwrap().iter())
        .map(|d| {
            d["metrics_addr"]
                .as_str()
                .expect("a metrics address")
                .to_string()
        })
        .collect()
}

/// Poll `f` every `every` until it returns `Some`, at most `limit` (then fail with
/// `what`).
pub fn until<T>(
    every: std::time::Duration,
    limit: std::time::Duration,
    what: &str,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(every);
    }
}

/// An HTTP answer: status, content type, body.
pub struct HttpAnswer {
    /// Status code (0: none read).
    pub status: u16,
    /// The Content-Type header's value ("" without one).
    pub content_type: String,
    /// The body.
    pub body: String,
}

/// A plain HTTP/1.1 GET of `path` at `addr` with extra `headers` (bounded by a 20 s
/// read timeout).
pub fn http_request(addr: &str, path: &str, headers: &[(&str, &str)]) -> HttpAnswer {
    use std::io::{Read, Write};
    let mut s =
        std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{extra}\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP answer from {addr}{path}: {text:?}"));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let content_type = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    HttpAnswer {
        status,
        content_type,
        body: body.to_string(),
    }
}

/// A plain HTTP/1.1 GET of `path` at `addr`: (status, body).
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    let a = http_request(addr, path, &[]);
    (a.status, a.body)
}

/// One keep-alive through the generated stub, as a stream of one request: the session's
/// remaining lease, or the answer that was not one.
pub async fn keep_alive(
    stub: &mut tenure_client::proto::tenure_client::TenureClient<tenure_client::Chan>,
    session: tenure_client::proto::SessionRef,
) -> Result<u64, String> {
    use tenure_client::proto::{self, keep_alive_response};
    let req = proto::KeepAliveRequest {
        session: Some(session),
    };
    let mut answers = (stub.keep_alive(tokio_stream::iter([req])).await)
        .map_err(|s| s.to_string())?
        .into_inner();
    match answers.message().await {
        Ok(Some(proto::KeepAliveResponse {
            result: Some(keep_alive_response::Result::Ok(a)),
        })) => Ok(a.ttl_ms),
        other => Err(format!("{other:?}")),
    }
}
