//! Identities beyond bearer tokens (DESIGN §8, Security; `tenure_server::auth`), against an
//! in-process TLS cluster with `[auth]` on: a client certificate of the cluster's CA is
//! known by its subject CN and gets what its `[[auth.certs]]` rules grant; a CN no entry
//! names is `UNAUTHENTICATED`; a certificate of another CA fails the handshake; a bearer
//! token still works, and takes precedence over a certificate. The `[auth]` section is
//! reloaded from the configuration file without a restart: a new token works at once, a
//! removed one is `UNAUTHENTICATED` (and refused on a session stream it opened before),
//! and a file with an invalid section changes nothing. The metrics address asks for a
//! token with `read` on `/` for the status page and its JSON, and for `/metrics` unless
//! `[metrics] public = true`.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tenure_client::tls::ClientTls;
use tenure_client::{Client, ClientOptions, Error, LockMode, Wait};
use tenure_server::auth::{AuthConfig, CertConfig, Perm, Rule};
use tenure_server::certs::{Authority, CA_CERT};
use tenure_server::tls::TlsFiles;

const ROOT: &str = "secret-root";

/// A cluster CA under `dir` with device certificates for devices 1..=3, client
/// certificates `billing` and `stranger`, and a `billing` of another CA (`other/`).
fn make_certs(dir: &Path) {
    let ca = Authority::create(dir).unwrap();
    for id in 1..=3 {
        let (cert, key) = (
            dir.join(format!("d{id}.pem")),
            dir.join(format!("d{id}.key")),
        );
        ca.issue_device(tenure_core::ids::DeviceId(id), &[], &cert, &key)
            .unwrap();
    }
    for name in ["billing", "stranger"] {
        let p = |ext: &str| dir.join(format!("{name}.{ext}"));
        ca.issue_client(name, &p("crt"), &p("key")).unwrap();
    }
    let other = Authority::create(&dir.join("other")).unwrap();
    let p = |ext: &str| dir.join(format!("other/billing.{ext}"));
    other.issue_client("billing", &p("crt"), &p("key")).unwrap();
}

/// TLS with the certificates of [`make_certs`], and `[auth]` with a root token and the
/// `billing` certificate, allowed to lock under `/billing/`.
fn secured(dir: PathBuf) -> impl Fn(&mut tenure_server::config::ServerConfig) {
    move |c| {
        c.tls = Some(TlsFiles {
            ca: dir.join(CA_CERT),
            cert: dir.join(format!("d{}.pem", c.id)),
            key: dir.join(format!("d{}.key", c.id)),
        });
        c.auth = AuthConfig {
            enabled: true,
            tokens: vec![token("root", ROOT, &[("/", &[Perm::Admin])])],
            certs: vec![CertConfig {
                cn: "billing".into(),
                rules: vec![Rule {
                    prefix: "/billing/".into(),
                    perms: vec![Perm::Lock],
                }],
            }],
        };
    }
}

/// A client of `c` over TLS trusting `dir`'s CA, presenting the certificate `cert`
/// (`dir/<cert>.crt`) if given, and `token` if given.
fn tls_client(c: &Cluster, dir: &Path, cert: Option<&str>, token: Option<&str>) -> Client {
    let files = cert.map(|n| (dir.join(format!("{n}.crt")), dir.join(format!("{n}.key"))));
    let identity = files.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
    let tls = ClientTls::from_files(&dir.join(CA_CERT), identity).unwrap();
    let opts = ClientOptions {
        tls: Some(tls),
        ..opts(token)
    };
    Client::with_options(c.endpoints(), opts).unwrap()
}

#[test]
fn a_client_certificate_is_an_identity_by_its_cn() {
    let _turn = turn!();
    let certs = tempfile::tempdir().unwrap();
    let dir = certs.path().to_path_buf();
    make_certs(&dir);
    let c = Cluster::start_with(3, secured(dir.clone()));
    rt().block_on(async {
        let root = tls_client(&c, &dir, None, Some(ROOT));
        wait_all_managed(&root, &c.endpoints(), Duration::from_secs(30)).await;

        // The certificate's CN is the caller: it locks where its rules say, not elsewhere.
        let billing = tls_client(&c, &dir, Some("billing"), None);
        let g = (billing
            .lock("/billing/a", LockMode::Exclusive, Wait::Try)
            .await)
            .unwrap();
        denied(
            billing.lock("/other", LockMode::Exclusive, Wait::Try).await,
            &["certificate", "billing", "lock", "/other"],
        );
        assert!(root.holders("/other").await.unwrap().holders.is_empty());
        g.release().await.unwrap();

        // A certificate of the CA whose CN no entry names; TLS with neither a token nor a
        // certificate: unknown.
        for (cert, says) in [(Some("stranger"), "\"stranger\""), (None, "no token")] {
            match tls_client(&c, &dir, cert, None).first_status().await {
                Err(Error::Unauthenticated(m)) => assert!(m.contains(says), "{m}"),
                other => panic!("{cert:?}: expected Unauthenticated, got {other:?}"),
            }
        }

        // A token takes precedence over the certificate presented with it.
        let both = tls_client(&c, &dir, Some("billing"), Some(ROOT));
        let g = (both.lock("/other", LockMode::Exclusive, Wait::Try).await).unwrap();
        g.release().await.unwrap();

        // A certificate of another CA fails the handshake: no call gets through.
        let other = ClientTls::from_files(
            &dir.join(CA_CERT),
            Some((
                &dir.join("other/billing.crt"),
                &dir.join("other/billing.key"),
            )),
        )
        .unwrap();
        let stranger = Client::with_options(
            c.endpoints(),
            ClientOptions {
                tls: Some(other),
                retry_deadline: Duration::from_secs(2),
                max_attempts: 3,
                ..opts(None)
            },
        )
        .unwrap();
        match stranger.first_status().await {
            Err(Error::Unauthenticated(m)) | Err(Error::PermissionDenied(m)) => {
                panic!("the handshake should have failed, not the call: {m}")
            }
            Err(_) => {}
            Ok(s) => panic!("a certificate of another CA was accepted: {s:?}"),
        }
    });
}

#[test]
fn a_reloaded_auth_section_applies_without_a_restart() {
    let _turn = turn!();
    const WORKER: &str = "secret-worker";
    const NEW: &str = "secret-new";
    let auth = |tokens| AuthConfig {
        enabled: true,
        tokens,
        ..Default::default()
    };
    let root = || token("root", ROOT, &[("/", &[Perm::Admin])]);
    let first = auth(vec![
        root(),
        token("worker", WORKER, &[("/jobs/", &[Perm::Lock])]),
    ]);
    let c = Cluster::start_with(3, |cfg| cfg.auth = first.clone());
    let files = tempfile::tempdir().unwrap();
    // Each device's configuration file: the configuration it runs, with `section`.
    let write_all = |section: &AuthConfig| -> Vec<PathBuf> {
        let section = section.clone();
        (c.cfgs.iter())
            .map(|cfg| {
                let path = files.path().join(format!("d{}.toml", cfg.id));
                let cfg = tenure_server::config::ServerConfig {
                    auth: section.clone(),
                    ..cfg.clone()
                };
                std::fs::write(&path, cfg.to_toml()).unwrap();
                path
            })
            .collect()
    };
    let reload_all = |section: &AuthConfig| {
        let paths = write_all(section);
        (c.nodes.iter().zip(&paths))
            .map(|(n, p)| n.handle().reload_auth(p))
            .collect::<Vec<_>>()
    };
    rt().block_on(async {
        let admin = Client::with_options(c.endpoints(), opts(Some(ROOT))).unwrap();
        wait_all_managed(&admin, &c.endpoints(), Duration::from_secs(30)).await;
        let worker = Client::with_options(c.endpoints(), opts(Some(WORKER))).unwrap();
        let g = (worker.lock("/jobs/a", LockMode::Exclusive, Wait::Try).await).unwrap();
        g.release().await.unwrap();
        let new = Client::with_options(c.endpoints(), opts(Some(NEW))).unwrap();
        assert!(matches!(
            new.first_status().await,
            Err(Error::Unauthenticated(_))
        ));

        // The worker goes, a new token comes.
        let second = auth(vec![root(), token("new", NEW, &[("/new/", &[Perm::Lock])])]);
        for r in reload_all(&second) {
            r.unwrap();
        }
        let g = (new.lock("/new/a", LockMode::Exclusive, Wait::Try).await).unwrap();
        g.release().await.unwrap();
        // The worker's session stream, opened before, is refused its next request...
        let r = worker.lock("/jobs/b", LockMode::Exclusive, Wait::Try).await;
        assert!(
            matches!(
                r,
                Err(Error::PermissionDenied(_) | Error::Unauthenticated(_))
            ),
            "{r:?}"
        );
        assert!(admin.holders("/jobs/b").await.unwrap().holders.is_empty());
        // ...and a new call of it is unknown.
        let again = Client::with_options(c.endpoints(), opts(Some(WORKER))).unwrap();
        match again.first_status().await {
            Err(Error::Unauthenticated(m)) => assert!(m.contains("unknown token"), "{m}"),
            other => panic!("expected Unauthenticated, got {other:?}"),
        }

        // A file whose section is invalid (on, with nothing in it) is refused: the rules
        // stay as they were.
        for r in reload_all(&auth(Vec::new())) {
            let e = r.unwrap_err().to_string();
            assert!(e.contains("auth"), "{e}");
        }
        let g = (new.lock("/new/b", LockMode::Exclusive, Wait::Try).await).unwrap();
        g.release().await.unwrap();
        assert!(matches!(
            again.first_status().await,
            Err(Error::Unauthenticated(_))
        ));
    });
}

/// A plain HTTP/1.1 GET with `authorization` if given: (status, headers, body).
fn http_get(
    addr: std::net::SocketAddr,
    path: &str,
    authorization: Option<&str>,
) -> (u16, String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, head.to_string(), body.to_string())
}

#[test]
fn the_status_page_needs_a_token_that_reads_everything() {
    let _turn = turn!();
    const READER: &str = "secret-reader";
    const WORKER: &str = "secret-worker";
    // Device 1's /metrics needs a token; device 2's is public.
    let c = Cluster::start_with(3, |cfg| {
        cfg.metrics_listen = Some(free_addr());
        cfg.metrics.public = cfg.id == 2;
        cfg.auth = AuthConfig {
            enabled: true,
            tokens: vec![
                token("reader", READER, &[("/", &[Perm::Read])]),
                token("worker", WORKER, &[("/jobs/", &[Perm::Lock])]),
            ],
            ..Default::default()
        };
    });
    let metrics = |i: usize| c.nodes[i].handle().metrics_addr.expect("a metrics address");
    let (one, two) = (metrics(0), metrics(1));
    for path in ["/", "/status.json", "/metrics"] {
        // No token, or an unknown one: 401, with a challenge a browser answers.
        for auth in [None, Some("Bearer nope"), Some("Basic dTpub3Bl")] {
            let (status, head, body) = http_get(one, path, auth);
            assert_eq!(status, 401, "{path} {auth:?}: {body}");
            assert!(head.contains("Basic realm="), "{head}");
            assert!(
                body.contains("read on /") && body.contains("Bearer"),
                "{body}"
            );
        }
        // A token without read on `/`: 403, naming it.
        let (status, _, body) = http_get(one, path, Some(&format!("Bearer {WORKER}")));
        assert_eq!(status, 403, "{path}: {body}");
        assert!(
            body.contains("\"worker\" has no read permission on /"),
            "{body}"
        );
        // A reader, as a bearer token or as a browser's Basic password ("me:<token>").
        let basic = format!("Basic {}", "bWU6c2VjcmV0LXJlYWRlcg==");
        for auth in [format!("Bearer {READER}"), basic] {
            let (status, _, body) = http_get(one, path, Some(&auth));
            assert_eq!(status, 200, "{path} {auth}: {body}");
        }
    }
    let (_, _, json) = http_get(one, "/status.json", Some(&format!("Bearer {READER}")));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["device"]["id"], 1, "{v}");
    // `[metrics] public`: /metrics to anyone, the page still not.
    assert_eq!(http_get(two, "/metrics", None).0, 200);
    assert_eq!(http_get(two, "/status.json", None).0, 401);
    assert_eq!(http_get(two, "/", None).0, 401);
}
