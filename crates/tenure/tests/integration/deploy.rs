//! Deployment bundles on test hosts: `tenure deploy new` for three hosts (network
//! namespaces, each with its own address), each device started from its host's bundle
//! directory exactly as its unit would start it, TLS and authorization on; then a lock,
//! an object and a lookup entry through the client credentials of the bundle, a call
//! without credentials refused, a fourth host added with `deploy add-host` and
//! admitted with `deploy admit`, a device's certificate renewed, and a host retired.
//! Skipped where namespaces cannot be made (not root).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tenure_chaos::net::{self, TestNet};

use crate::common;

fn skipped(test: &str, why: &str) {
    use std::io::Write;
    eprintln!("SKIPPED {test}: {why}");
    let _ = writeln!(std::io::stderr().lock(), "test {test} ... SKIPPED: {why}");
}

/// `KEY=VALUE` lines of an environment file.
fn env_file(path: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Run `tenure` with `env` (and no TENURE_* of this process): (success, stdout, stderr).
fn tenure(env: &BTreeMap<String, String>, args: &[&str]) -> (bool, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tenure"));
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("TENURE_")) {
        c.env_remove(k);
    }
    let out = c
        .envs(env)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run tenure");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `tenure deploy CMD --out BUNDLE ARGS...` (no client environment): (success, stdout,
/// stderr).
fn deploy(bundle: &Path, cmd: &str, args: &[&str]) -> (bool, String, String) {
    let out = bundle.to_str().unwrap();
    let all: Vec<&str> = ["deploy", cmd, "--out", out]
        .iter()
        .chain(args)
        .copied()
        .collect();
    tenure(&BTreeMap::new(), &all)
}

/// Start host `ns`'s device from its bundle directory, as its systemd unit would.
fn start(ns: &str, host_dir: &Path) -> std::process::Child {
    let log = std::fs::File::create(host_dir.join("server.log")).unwrap();
    Command::new("ip")
        .args(["netns", "exec", ns, env!("CARGO_BIN_EXE_tenure"), "server"])
        .arg("--config")
        .arg(host_dir.join("server.toml"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start a device")
}

/// GET /metrics from `addr`, with `token` as a bearer token: the body.
fn scrape(addr: &str, token: Option<&str>) -> String {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = bearer
        .iter()
        .map(|b| ("Authorization", b.as_str()))
        .collect();
    common::http_request(addr, "/metrics", &headers).body
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// Stores of the bundle's cluster.
const STORES: usize = 8;

/// Whether `tenure status` (with `env`) sees `devices` devices up and every store
/// managed; what it sees when not.
fn serving(env: &BTreeMap<String, String>, devices: usize) -> Result<(), String> {
    let (ok, out, err) = tenure(env, &["status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).map_err(|e| format!("{e}: {err}"))?;
    let managed = v["managed"].as_array().map_or(0, Vec::len);
    let up = v["devices"]
        .as_array()
        .map_or(0, |d| d.iter().filter(|d| d["up"] == true).count());
    (ok && managed == STORES && up == devices)
        .then_some(())
        .ok_or(format!(
            "{up} of {devices} devices up, {managed} of {STORES} stores managed: {err}"
        ))
}

/// Retry `f` until it returns Some, or panic after `limit` with `what`.
fn until<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let start = Instant::now();
    loop {
        match f() {
            Ok(t) => return t,
            Err(e) if start.elapsed() > limit => panic!("{what} within {limit:?}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(300)),
        }
    }
}

#[test]
fn a_cluster_boots_from_its_bundle_on_three_hosts_and_admits_a_fourth() {
    let _turn = turn!();
    const NAME: &str = "a_cluster_boots_from_its_bundle_on_three_hosts_and_admits_a_fourth";
    if let Some(why) = net::unsupported() {
        skipped(NAME, &why);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("bundle");
    let net = TestNet::create(4).expect("test hosts");
    let host = |i: usize| format!("h{}={}", i, net.hosts[i - 1].addr);
    let hosts_dir = bundle.join("hosts");
    // The bundle's directory of each host is where its configuration lives (as
    // /etc/tenure would on a real host); data under the test's directory.
    let config_dir = format!("{}/{{host}}", hosts_dir.display());
    let data_dir = format!("{}/data/{{host}}", tmp.path().display());
    let (ok, out, err) = deploy(
        &bundle,
        "new",
        &[
            "--host",
            &host(1),
            "--host",
            &host(2),
            "--host",
            &host(3),
            "--stores",
            &STORES.to_string(),
            "--config-dir",
            &config_dir,
            "--data-dir",
            &data_dir,
            "--binary",
            env!("CARGO_BIN_EXE_tenure"),
        ],
    );
    assert!(ok, "deploy new: {out}{err}");
    println!("{out}");
    assert!(out.contains("bundle for 3 hosts"), "{out}");

    // Secrets are owner-only; what goes to the hosts is there.
    for secret in [
        "ca/ca.key",
        "client/admin.token",
        "client/admin.env",
        "client/prometheus.token",
        "client/app.key",
        "hosts/h1/tls/device.key",
    ] {
        assert_eq!(mode(&bundle.join(secret)), 0o600, "{secret}");
    }
    for f in [
        "server.toml",
        "tls/ca.pem",
        "tls/device.pem",
        "tenure.service",
        "INSTALL.txt",
    ] {
        assert!(hosts_dir.join("h2").join(f).exists(), "hosts/h2/{f}");
    }
    let unit = std::fs::read_to_string(hosts_dir.join("h2/tenure.service")).unwrap();
    assert!(
        unit.contains(&format!(
            "ExecStart={} server --config {}/h2/server.toml",
            env!("CARGO_BIN_EXE_tenure"),
            hosts_dir.display()
        )),
        "{unit}"
    );
    // systemd accepts the unit, where its tools are installed.
    if let Ok(out) = Command::new("systemd-analyze")
        .arg("verify")
        .arg(hosts_dir.join("h2/tenure.service"))
        .output()
    {
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success() && said.trim().is_empty(),
            "systemd-analyze verify: {said}"
        );
    }
    // A second bundle into the same directory is refused.
    let (ok, _, err) = deploy(&bundle, "new", &["--host", &host(1)]);
    assert!(!ok && err.contains("not empty"), "{err}");

    let mut devices: Vec<_> = (1..=3)
        .map(|i| start(&net.hosts[i - 1].ns, &hosts_dir.join(format!("h{i}"))))
        .collect();
    let admin = env_file(&bundle.join("client/admin.env"));
    let app = env_file(&bundle.join("client/app.env"));
    let started = Instant::now();
    until(Duration::from_secs(60), "every store managed", || {
        serving(&admin, 3)
    });
    println!(
        "serving {:.1}s after the start",
        started.elapsed().as_secs_f64()
    );

    // Prometheus scrapes each host's metrics address from the bundle; with
    // authorization on, the metrics need read: the bundle's prometheus token.
    let scraper = std::fs::read_to_string(bundle.join("client/prometheus.token")).unwrap();
    for h in &net.hosts[..3] {
        let addr = format!("{}:7402", h.addr);
        let text = scrape(&addr, Some(scraper.trim()));
        assert!(
            text.contains("tenure_"),
            "no Tenure metrics at {addr}: {text:.200}"
        );
        let refused = scrape(&addr, None);
        assert!(
            !refused.contains("tenure_"),
            "metrics without a token at {addr}"
        );
    }

    // A lock, an object and a lookup entry, as the application's certificate.
    let (ok, out, err) = tenure(&app, &["lock", "/jobs/nightly", "--", "true"]);
    assert!(ok, "lock: {out}{err}");
    let value = tmp.path().join("v.json");
    std::fs::write(&value, b"{\"on\": true}").unwrap();
    let (ok, out, err) = tenure(
        &app,
        &["object", "put", "/app/config.json", value.to_str().unwrap()],
    );
    assert!(ok, "object put: {out}{err}");
    let (ok, out, err) = tenure(&app, &["object", "get", "/app/config.json"]);
    assert!(ok && out == "{\"on\": true}", "object get: {out}{err}");
    let (ok, out, err) = tenure(
        &app,
        &[
            "lookup",
            "put",
            "/svc/api/1",
            "10.0.0.1:8080",
            "--persistent",
        ],
    );
    assert!(ok, "lookup put: {out}{err}");
    let (ok, out, err) = tenure(&app, &["lookup", "get", "/svc/api/1"]);
    assert!(
        ok && out.trim() == "10.0.0.1:8080",
        "lookup get: {out}{err}"
    );

    // Without a credential (TLS only) nothing is allowed; the application's certificate
    // may not take a snapshot (admin), the admin token may.
    let mut anonymous = admin.clone();
    anonymous.remove("TENURE_TOKEN");
    let (ok, _, err) = tenure(&anonymous, &["object", "get", "/app/config.json"]);
    assert!(!ok, "a call without a credential was served: {err}");
    println!("without a credential: {err}");
    let (ok, _, err) = tenure(
        &app,
        &[
            "snapshot",
            "create",
            "--out",
            tmp.path().join("s").to_str().unwrap(),
        ],
    );
    assert!(!ok, "the app certificate took a snapshot: {err}");

    // A fourth host joins.
    let (ok, out, err) = deploy(&bundle, "add-host", &["--host", &host(4)]);
    assert!(ok, "add-host: {out}{err}");
    println!("{out}");
    let cfg = std::fs::read_to_string(hosts_dir.join("h4/server.toml")).unwrap();
    assert!(
        cfg.contains("join = true") && cfg.contains("id = 4"),
        "{cfg}"
    );
    let admin = env_file(&bundle.join("client/admin.env"));
    assert_eq!(admin["TENURE_ENDPOINTS"].split(',').count(), 4);
    devices.push(start(&net.hosts[3].ns, &hosts_dir.join("h4")));
    let (ok, out, err) = deploy(&bundle, "admit", &["h4", "--timeout", "90s"]);
    assert!(ok, "admit: {out}{err}");
    println!("{out}");
    assert!(out.contains("d4 active"), "{out}");
    let (ok, out, err) = tenure(&app, &["object", "get", "/app/config.json"]);
    assert!(
        ok && out == "{\"on\": true}",
        "object get after the join: {out}{err}"
    );
    // Certificate rotation: host 1's device gets a new certificate and restarts with it.
    let before = std::fs::read(hosts_dir.join("h1/tls/device.pem")).unwrap();
    let (ok, out, err) = deploy(&bundle, "renew", &["h1"]);
    assert!(ok, "renew: {out}{err}");
    assert_ne!(
        std::fs::read(hosts_dir.join("h1/tls/device.pem")).unwrap(),
        before
    );
    assert_eq!(mode(&hosts_dir.join("h1/tls/device.key")), 0o600);
    devices[0].kill().unwrap();
    devices[0].wait().unwrap();
    devices[0] = start(&net.hosts[0].ns, &hosts_dir.join("h1"));
    until(
        Duration::from_secs(60),
        "device 1 serving with its new certificate",
        || serving(&admin, 4),
    );
    let (ok, out, err) = tenure(&app, &["lock", "/jobs/nightly", "--", "true"]);
    assert!(ok, "lock after the rotation: {out}{err}");

    // Host 2 retires: its device hands everything over and stops by itself.
    let (ok, out, err) = deploy(&bundle, "retire", &["h2", "--timeout", "90s"]);
    assert!(ok, "retire: {out}{err}");
    println!("{out}");
    assert!(out.contains("retired d2"), "{out}");
    let start = Instant::now();
    while devices[1].try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "device 2 still runs after it retired"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let admin = env_file(&bundle.join("client/admin.env"));
    assert_eq!(admin["TENURE_ENDPOINTS"].split(',').count(), 3, "{admin:?}");
    let (ok, out, err) = tenure(&app, &["object", "get", "/app/config.json"]);
    assert!(
        ok && out == "{\"on\": true}",
        "object get after the retirement: {out}{err}"
    );

    // Deleting the test hosts kills their devices.
    drop(net);
    for mut d in devices {
        let _ = d.wait();
    }
}
