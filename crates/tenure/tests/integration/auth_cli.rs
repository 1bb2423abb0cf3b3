//! Authorization from the command line: `cluster up --auth` makes a TLS cluster that
//! needs a token, writes its admin token (owner only), and `tenure` commands take a token
//! from `--auth-token` or `TENURE_TOKEN`; a token from `tenure token new` added to the devices'
//! configurations gets what its rules grant, and nothing else; so does a client
//! certificate from `tenure cert new`, presented with `--client-cert` and `--client-key`.
//! SIGHUP makes a device re-read its `[auth]` section: a token added works and a token
//! removed is unknown, without a restart.

use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

/// Run `tenure` with `args` and `TENURE_TOKEN` set to `token` (or unset).
fn tenure_as(token: Option<&str>, args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tenure"));
    cmd.args(args);
    match token {
        Some(t) => cmd.env("TENURE_TOKEN", t),
        None => cmd.env_remove("TENURE_TOKEN"),
    };
    let out = cmd.output().expect("run tenure");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_cluster_up_with_auth_needs_a_token_and_grants_what_rules_say() {
    let _turn = turn!();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let d = data.to_str().unwrap();
    let _guard = Guard(data.clone());
    let up_args = [
        "cluster",
        "up",
        "--devices",
        "3",
        "--stores",
        "4",
        "--auth",
        "--data",
        d,
        "--json",
    ];
    let (ok, out, err) = tenure_as(None, &up_args);
    assert!(ok, "cluster up --auth:\n{out}\n{err}");
    let summary: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["tls"], true, "{summary}");
    assert_eq!(summary["auth"], true, "{summary}");
    let token_file = data.join("admin.token");
    assert_eq!(summary["token_file"], token_file.to_str().unwrap());
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the admin token is its owner's only");
    let admin = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_string();

    // No token: refused, saying what to do.
    let (ok, out, err) = tenure_as(None, &["lock", "/jobs/a", "--data", d, "--", "true"]);
    assert!(!ok, "{out}");
    assert!(err.contains("not authenticated"), "{err}");
    assert!(
        err.contains("--auth-token") && err.contains("TENURE_TOKEN"),
        "{err}"
    );
    // A wrong token: refused as unknown.
    let (ok, _, err) = tenure_as(
        None,
        &[
            "lock",
            "/jobs/a",
            "--data",
            d,
            "--auth-token",
            "nope",
            "--",
            "true",
        ],
    );
    assert!(!ok);
    assert!(err.contains("unknown token"), "{err}");
    // The admin token, from the environment or the flag.
    let (ok, out, err) = tenure_as(
        Some(&admin),
        &["lock", "/jobs/a", "--data", d, "--", "true"],
    );
    assert!(ok, "with TENURE_TOKEN:\n{out}\n{err}");
    let (ok, out, err) = tenure_as(
        None,
        &[
            "object",
            "put",
            "/cfg/a",
            "-",
            "--data",
            d,
            "--auth-token",
            &admin,
        ],
    );
    assert!(ok, "with --auth-token:\n{out}\n{err}");
    // The cluster commands use the admin token of the data directory themselves.
    let (ok, out, err) = tenure_as(None, &["cluster", "status", "--data", d]);
    assert!(ok, "cluster status:\n{out}\n{err}");

    // A narrower token, made with `tenure token new` and added to every device.
    let (ok, out, err) = tenure_as(
        None,
        &["token", "new", "worker", "--rule", "/jobs/=lock", "--json"],
    );
    assert!(ok, "token new:\n{out}\n{err}");
    let new: serde_json::Value = serde_json::from_str(&out).unwrap();
    let worker = new["secret"].as_str().unwrap().to_string();
    let snippet = new["toml"].as_str().unwrap();
    // A client certificate, made with `tenure cert new` from the cluster's CA.
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    let cert_args = [
        "cert",
        "new",
        "billing",
        "--data",
        d,
        "--out",
        certs.to_str().unwrap(),
        "--rule",
        "/billing/=lock",
        "--json",
    ];
    let (ok, out, err) = tenure_as(None, &cert_args);
    assert!(ok, "cert new:\n{out}\n{err}");
    let cert: serde_json::Value = serde_json::from_str(&out).unwrap();
    let (crt, key) = (
        cert["cert"].as_str().unwrap(),
        cert["key"].as_str().unwrap(),
    );
    let mode = std::fs::metadata(key).unwrap().permissions().mode();
    assert_eq!(
        mode & 0o777,
        0o600,
        "the certificate's key is its owner's only"
    );
    let (ok, _, err) = tenure_as(None, &cert_args);
    assert!(
        !ok && err.contains("exists"),
        "an existing key is not overwritten: {err}"
    );
    let cert_snippet = cert["toml"].as_str().unwrap();
    let (ok, out, err) = tenure_as(None, &["cluster", "down", "--data", d]);
    assert!(ok, "{out}\n{err}");
    for id in 1..=3 {
        let p = data.join(format!("d{id}")).join("server.toml");
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::write(&p, format!("{text}\n{snippet}\n{cert_snippet}")).unwrap();
    }
    let (ok, out, err) = tenure_as(None, &up_args);
    assert!(ok, "restart:\n{out}\n{err}");
    let (ok, out, err) = tenure_as(
        Some(&worker),
        &["lock", "/jobs/b", "--data", d, "--", "true"],
    );
    assert!(ok, "the worker locks under /jobs/:\n{out}\n{err}");
    let (ok, out, err) = tenure_as(
        Some(&worker),
        &["lock", "/other", "--data", d, "--", "true"],
    );
    assert!(!ok, "{out}");
    assert!(err.contains("permission denied"), "{err}");
    assert!(
        err.contains("worker") && err.contains("lock") && err.contains("/other"),
        "{err}"
    );
    // It may not write objects either, and the refused put changed nothing.
    let (ok, _, err) = tenure_as(Some(&worker), &["object", "rm", "/cfg/a", "--data", d]);
    assert!(!ok);
    assert!(err.contains("permission denied"), "{err}");
    let (ok, out, err) = tenure_as(Some(&admin), &["object", "ls", "/cfg", "--data", d]);
    assert!(ok && out.contains("/cfg/a"), "{out}\n{err}");

    // The certificate, without a token, gets what its entry grants.
    let as_cert = |name: &str| {
        let args = [
            "lock",
            name,
            "--data",
            d,
            "--client-cert",
            crt,
            "--client-key",
            key,
        ];
        tenure_as(None, &[&args[..], &["--", "true"]].concat())
    };
    let (ok, out, err) = as_cert("/billing/a");
    assert!(ok, "the certificate locks under /billing/:\n{out}\n{err}");
    let (ok, _, err) = as_cert("/other");
    assert!(!ok);
    assert!(
        err.contains("permission denied") && err.contains("certificate \"billing\""),
        "{err}"
    );

    // Without a restart: the worker's entry is replaced by a new token's in every
    // device's configuration, and SIGHUP makes each device re-read its [auth].
    let (ok, out, err) = tenure_as(
        None,
        &["token", "new", "nightly", "--rule", "/jobs/=lock", "--json"],
    );
    assert!(ok, "token new:\n{out}\n{err}");
    let nightly: serde_json::Value = serde_json::from_str(&out).unwrap();
    let secret = nightly["secret"].as_str().unwrap();
    for id in 1..=3 {
        let p = data.join(format!("d{id}")).join("server.toml");
        let text = std::fs::read_to_string(&p).unwrap();
        let text = text.replace(snippet, nightly["toml"].as_str().unwrap());
        std::fs::write(&p, text).unwrap();
    }
    for d in cluster_file(&data)["devices"].as_array().unwrap() {
        let pid = d["pid"].as_u64().unwrap().to_string();
        assert!(
            Command::new("kill")
                .args(["-HUP", &pid])
                .status()
                .unwrap()
                .success()
        );
    }
    let lock_as = |t: &str| tenure_as(Some(t), &["lock", "/jobs/c", "--data", d, "--", "true"]);
    let start = std::time::Instant::now();
    while !lock_as(secret).0 {
        assert!(
            start.elapsed().as_secs() < 20,
            "the new token never worked: {:?}",
            lock_as(secret)
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (ok, _, err) = lock_as(&worker);
    assert!(!ok && err.contains("unknown token"), "{err}");
    let (ok, out, err) = tenure_as(None, &["cluster", "status", "--data", d]);
    assert!(ok, "the devices still run:\n{out}\n{err}");
}
