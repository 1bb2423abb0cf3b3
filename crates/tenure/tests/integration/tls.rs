//! TLS on a local cluster (DESIGN §8, Security): `tenure cluster up` makes a CA and
//! device certificates by default; a lock is taken over TLS, by the CLI (which finds the
//! CA in the data directory) and by the Rust client; a plaintext client is refused with a
//! clear error at once; and on the peer port, a device certificate of another CA, no
//! certificate and plaintext are refused, logged with the reason, and change nothing.
//! `--insecure` makes a plaintext cluster.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use tenure_client::{Client, ClientOptions, LockMode, Wait};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{Guard, cluster_file, tenure, up, with_tls};

fn endpoints(data: &Path) -> Vec<String> {
    cluster_file(data)["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["client_addr"].as_str().unwrap().to_string())
        .collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Poll `f` every 50 ms until it is true, at most `limit`.
fn until(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How many lines of device 1's log mention `needle`.
fn log_count(data: &Path, needle: &str) -> usize {
    std::fs::read_to_string(data.join("d1/server.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

/// A length-delimited `Hello` frame as a peer's first frame (4-byte length, then the
/// encoded frame): what an impostor sends after its handshake.
fn hello_frame(from: u64, to: u64) -> Vec<u8> {
    use tenure_core::ids::DeviceId;
    let body = tenure_server::wire::encode_hello(
        DeviceId(from),
        DeviceId(to),
        tenure_server::wire::Versions::THIS_BUILD,
    )
    .unwrap();
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

/// Connect to a peer port with `tls` (a device's dialing side), send a `Hello` and read:
/// true when the device answered (the connection was accepted).
async fn peer_answers(addr: SocketAddr, tls: &tenure_server::tls::PeerTls, from: u64) -> bool {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = tenure_client::tls::server_name(&addr.ip().to_string()).unwrap();
    let Ok(mut s) = tls.connector.connect(name, tcp).await else {
        return false;
    };
    if s.write_all(&hello_frame(from, 1)).await.is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await,
        Ok(Ok(n)) if n > 0
    )
}

#[test]
fn a_tls_cluster_serves_tls_clients_and_refuses_plaintext_and_foreign_peers() {
    let _turn = turn!();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    let summary = up(&data);
    assert_eq!(summary["tls"], true, "TLS by default: {summary}");
    let ca = summary["ca"]
        .as_str()
        .expect("the CA in the summary")
        .to_string();
    assert!(Path::new(&ca).exists());
    assert!(data.join("d1/tls/device.pem").exists());
    assert!(data.join("d1/tls/device.key").exists());
    let eps = endpoints(&data);
    let rt = runtime();

    // The CLI finds the CA in the data directory.
    let (ok, out, err) = tenure(&[
        "lock",
        "/tls/cli",
        "--data",
        data.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert!(ok, "lock over TLS:\n{out}\n{err}");
    assert!(out.contains("locked /tls/cli"), "{out}");
    // With --endpoints, the CA is given with --ca.
    let list = eps.join(",");
    let (ok, out, err) = tenure(&[
        "lock",
        "/tls/cli",
        "--endpoints",
        &list,
        "--ca",
        &ca,
        "--",
        "true",
    ]);
    assert!(ok, "lock with --ca:\n{out}\n{err}");

    // The Rust client, with the CA.
    let token = rt.block_on(async {
        let c =
            Client::with_options(eps.clone(), with_tls(&data, ClientOptions::default())).unwrap();
        let g = c
            .lock("/tls/rust", LockMode::Exclusive, Wait::Try)
            .await
            .unwrap();
        let t = g.token();
        g.release().await.unwrap();
        t
    });
    eprintln!("lock over TLS from the Rust client: token {token}");

    // A plaintext client is refused at once with a reason.
    let started = Instant::now();
    let (ok, out, err) = tenure(&["lock", "/tls/plain", "--endpoints", &list, "--", "true"]);
    let took = started.elapsed();
    assert!(!ok, "a plaintext client must be refused:\n{out}");
    assert!(err.contains("requires TLS"), "a clear error: {err}");
    assert!(err.contains("--ca"), "says what to do: {err}");
    assert!(
        took < Duration::from_secs(5),
        "refused at once, not retried: {took:?}"
    );
    eprintln!("plaintext client: {} after {took:?}", err.trim());
    let plain_err = rt.block_on(async {
        let c = Client::with_options(eps.clone(), ClientOptions::default()).unwrap();
        c.lock("/tls/plain", LockMode::Exclusive, Wait::Try)
            .await
            .map(|_| ())
            .unwrap_err()
    });
    assert!(
        plain_err.to_string().contains("requires TLS"),
        "{plain_err}"
    );
    // A client trusting another CA refuses the devices.
    let other = dir.path().join("other-ca");
    let foreign = tenure_server::certs::Authority::create(&other).unwrap();
    let (ok, out, err) = tenure(&[
        "status",
        "--endpoints",
        &list,
        "--ca",
        foreign.cert_path.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        out.contains("not signed by the CA given"),
        "each device says why:\n{out}\n{err}"
    );

    // The peer port: a device certificate of another CA is refused.
    let d1_peer: SocketAddr = cluster_file(&data)["devices"][0]["peer_addr"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let (cert, key) = (other.join("d9.pem"), other.join("d9.key"));
    foreign.issue("tenure device 9", &[], &cert, &key).unwrap();
    // It trusts the cluster's CA (so the device's certificate passes) but presents the
    // foreign one; and one presenting a real device's certificate, for contrast.
    let impostor = tenure_server::tls::DeviceTls::load(&tenure_server::tls::TlsFiles {
        ca: ca.clone().into(),
        cert: cert.clone(),
        key: key.clone(),
    })
    .unwrap()
    .peer();
    let before = log_count(&data, "closing peer connection: TLS handshake failed");
    assert!(
        !rt.block_on(peer_answers(d1_peer, &impostor, 2)),
        "a peer of another CA must not be answered"
    );
    until(Duration::from_secs(5), "the refusal is logged", || {
        log_count(&data, "closing peer connection: TLS handshake failed") > before
    });
    let log = std::fs::read_to_string(data.join("d1/server.log")).unwrap();
    let line = log
        .lines()
        .rfind(|l| l.contains("closing peer connection: TLS handshake failed"))
        .unwrap();
    eprintln!("device 1 logged: {line}");
    assert!(
        line.contains("UnknownIssuer") || line.contains("certificate"),
        "{line}"
    );

    // No certificate at all: refused, with the reason logged.
    let before = log_count(&data, "peer sent no certificate");
    let anonymous = {
        let roots = tenure_client::tls::load_roots(Path::new(&ca)).unwrap();
        let config = rustls::ClientConfig::builder_with_provider(tenure_client::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
    };
    let answered = rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(d1_peer).await.unwrap();
        let name = tenure_client::tls::server_name("127.0.0.1").unwrap();
        let Ok(mut s) = anonymous.connect(name, tcp).await else {
            return false;
        };
        let _ = s.write_all(&hello_frame(2, 1)).await;
        let mut buf = [0u8; 64];
        matches!(
            tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await,
            Ok(Ok(n)) if n > 0
        )
    });
    assert!(
        !answered,
        "a peer without a certificate must not be answered"
    );
    until(Duration::from_secs(5), "the refusal is logged", || {
        log_count(&data, "peer sent no certificate") > before
    });

    // Plaintext: the device answers a plaintext Hello with nothing but a TLS alert.
    let plain = rt.block_on(async {
        let mut tcp = tokio::net::TcpStream::connect(d1_peer).await.unwrap();
        tcp.write_all(&hello_frame(2, 1)).await.unwrap();
        let mut buf = [0u8; 64];
        match tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => Some(buf[0]),
            _ => None,
        }
    });
    assert!(
        matches!(plain, None | Some(0x15)),
        "nothing, or a TLS alert, is sent back to a plaintext peer: {plain:?}"
    );

    // Nothing changed: the devices still form one cluster and serve.
    let (ok, out, err) = tenure(&["cluster", "status", "--data", data.to_str().unwrap()]);
    assert!(ok, "cluster status:\n{out}\n{err}");
    assert!(!out.contains("DOWN"), "{out}");
    let (ok, out, err) = tenure(&[
        "lock",
        "/tls/after",
        "--data",
        data.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert!(ok, "still serving:\n{out}\n{err}");
}

#[test]
fn an_insecure_cluster_is_plaintext() {
    let _turn = turn!();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    let (ok, out, err) = tenure(&[
        "cluster",
        "up",
        "--devices",
        "3",
        "--stores",
        "4",
        "--insecure",
        "--data",
        data.to_str().unwrap(),
        "--json",
    ]);
    assert!(ok, "cluster up --insecure:\n{out}\n{err}");
    let summary: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["tls"], false, "{summary}");
    assert!(!data.join("tls").exists(), "no CA is made");
    let list = endpoints(&data).join(",");
    let (ok, out, err) = tenure(&["lock", "/plain/a", "--endpoints", &list, "--", "true"]);
    assert!(
        ok,
        "a plaintext client of a plaintext cluster:\n{out}\n{err}"
    );
    // A TLS client of a plaintext cluster is told why it fails.
    let other = dir.path().join("ca");
    let ca = tenure_server::certs::Authority::create(&other).unwrap();
    let (ok, _, err) = tenure(&[
        "lock",
        "/plain/a",
        "--endpoints",
        &list,
        "--ca",
        ca.cert_path.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert!(!ok);
    assert!(err.contains("TLS handshake"), "{err}");
    eprintln!("TLS client of a plaintext cluster: {}", err.trim());
    // Restarting it with TLS flags changes nothing; --insecure on a TLS cluster is refused
    // (see the other test's cluster): here, a restart keeps it plaintext.
    let (ok, out, err) = tenure(&["cluster", "down", "--data", data.to_str().unwrap()]);
    assert!(ok, "{out}\n{err}");
    let (ok, out, err) = tenure(&["cluster", "up", "--data", data.to_str().unwrap(), "--json"]);
    assert!(ok, "{out}\n{err}");
    let summary: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["tls"], false, "{summary}");
}
