//! The metrics address of a live local cluster (DESIGN §8): `/metrics` serves the
//! Prometheus text, `/status.json` the status data, and `/` the status page, which a
//! headless Chromium loads: the rendered page names the store, its manager, the lock,
//! its holder and its queue, and a screenshot of it is kept as a test artifact
//! (`<target dir>/test-artifacts/status.png`).
//!
//! Without Chromium the browser test skips with a message, except under CI (`CI` set),
//! where `.ci/run` installs it and its absence fails the test. Every wait is bounded.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tenure_client::{Client, LockMode, Wait};

use crate::common;
use crate::common::{Guard, STORES, cluster_file, metrics_addrs, until, up, with_tls};

/// Two locks of one store (a name's store is its first segment's): one whose name is
/// markup, which the page must show as text.
const LOCK: &str = "/orders/batch-7";
const MARKUP_LOCK: &str = "/orders/<b>x</b>&co";
const SHARED_LOCK: &str = "/orders/reports";

/// How often a wait polls.
const POLL: Duration = Duration::from_millis(50);

/// A plain HTTP/1.1 GET: (status, content type, body).
fn get(addr: &str, path: &str) -> (u16, String, String) {
    let a = common::http_request(addr, path, &[]);
    (a.status, a.content_type, a.body)
}

fn client_of(data: &Path) -> Client {
    let endpoints: Vec<String> = cluster_file(data)["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["client_addr"].as_str().unwrap().to_string())
        .collect();
    Client::with_options(endpoints, with_tls(data, Default::default())).unwrap()
}

/// The status page (metrics address) whose JSON lists `name` among its locks, once the
/// lock has `holders` holders and `waiters` waiters there; and that JSON.
fn page_listing(
    data: &Path,
    name: &str,
    holders: usize,
    waiters: usize,
) -> (String, serde_json::Value) {
    until(
        POLL,
        Duration::from_secs(30),
        "a status page lists the lock",
        || {
            metrics_addrs(data).into_iter().find_map(|addr| {
                let (status, _, body) = get(&addr, "/status.json");
                if status != 200 {
                    return None;
                }
                let v: serde_json::Value = serde_json::from_str(&body).ok()?;
                let lock = v["locks"].as_array()?.iter().find(|l| l["name"] == name)?;
                let ok = lock["holders"].as_array()?.len() == holders
                    && lock["waiters"].as_array()?.len() == waiters;
                ok.then_some((addr, v))
            })
        },
    )
}

#[test]
fn metrics_address_serves_prometheus_text_status_json_and_the_page() {
    let _turn = turn!();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _in_rt = rt.enter();
    up(&data);
    let client = client_of(&data);
    let guard = rt
        .block_on(client.lock(LOCK, LockMode::Exclusive, Wait::Try))
        .unwrap();

    let addrs = metrics_addrs(&data);
    assert_eq!(addrs.len(), 3);
    for addr in &addrs {
        let (status, ctype, body) = get(addr, "/metrics");
        assert_eq!(status, 200, "/metrics at {addr}");
        assert!(ctype.starts_with("text/plain"), "{ctype}");
        assert!(
            body.contains("# TYPE tenure_"),
            "Prometheus text at {addr}:\n{body}"
        );
        let (status, ctype, body) = get(addr, "/");
        assert_eq!(status, 200, "/ at {addr}");
        assert!(ctype.starts_with("text/html"), "{ctype}");
        assert!(body.contains(r#"<meta http-equiv="refresh""#), "{body}");
        assert_eq!(get(addr, "/no-such-page").0, 404);
    }
    // The acquire was timed by the device that answered it.
    let counted = addrs.iter().any(|a| {
        let body = get(a, "/metrics").2;
        body.lines()
            .any(|l| l.starts_with(r#"tenure_request_seconds_count{kind="acquire"} "#))
    });
    assert!(counted, "some device's metrics count the acquire");

    let (addr, v) = page_listing(&data, LOCK, 1, 0);
    let me = v["device"]["id"].as_u64().unwrap();
    assert_eq!(v["device"]["metrics_addr"], addr.as_str());
    assert_eq!(v["stores_total"], STORES);
    assert_eq!(v["stores"].as_array().unwrap().len(), STORES as usize);
    assert_eq!(v["devices"].as_array().unwrap().len(), 3);
    let store = &v["stores"][guard.store() as usize];
    assert_eq!(store["manager"], me, "{store}");
    assert_eq!(store["source"], "manager");
    let lock = v["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == LOCK)
        .unwrap();
    assert_eq!(lock["store"], guard.store());
    assert_eq!(lock["holders"][0]["session"], guard.session());
    assert_eq!(lock["holders"][0]["mode"], "exclusive");
    assert_eq!(lock["holders"][0]["token"], guard.token().to_string());
    let session = v["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == guard.session())
        .expect("the holder's session is listed");
    assert_eq!(session["locks_held"], 1);
    // Every device links to the others' pages.
    for d in v["devices"].as_array().unwrap() {
        assert!(d["status_page"].is_string(), "{d}");
    }
    rt.block_on(guard.release()).unwrap();
}

/// Chromium's command, if installed.
fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TENURE_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ]
    .iter()
    .flat_map(|name| std::env::split_paths(&path).map(move |d| d.join(name)))
    .find(|p| p.is_file())
}

/// Where test artifacts go: `test-artifacts` in the target directory this test was built
/// in (so `CARGO_TARGET_DIR` is followed).
fn artifacts_dir() -> PathBuf {
    let exe = Path::new(env!("CARGO_BIN_EXE_tenure"));
    let target = exe
        .parent()
        .and_then(Path::parent)
        .expect("the binary lies in <target>/<profile>/");
    target.join("test-artifacts")
}

/// Run headless Chromium with `args` on `url`, at most a minute: its stdout.
fn run_chromium(browser: &Path, profile: &Path, args: &[&str], url: &str) -> String {
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--no-first-run",
            "--window-size=1280,900",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", browser.display()));
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium {args:?} {url} did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "chromium {args:?} {url}: {status}");
    reader.join().unwrap()
}

#[test]
fn status_page_of_a_live_cluster_renders_in_headless_chromium() {
    let _turn = turn!();
    let Some(browser) = chromium() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but Chromium is not installed (.ci/run installs it as root with apt-get)"
        );
        eprintln!(
            "SKIPPED: Chromium is not installed (apt-get install chromium); the status page \
             was not loaded in a browser"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let _in_rt = rt.enter();
    up(&data);

    // Something to show: a held lock with a queue, a lock whose name is markup, a shared
    // lock with two holders, an election, an object and a snapshot.
    let holder = client_of(&data);
    let waiter = client_of(&data);
    let reader = client_of(&data);
    let held = rt
        .block_on(holder.lock(LOCK, LockMode::Exclusive, Wait::Try))
        .unwrap();
    let markup = rt
        .block_on(holder.lock(MARKUP_LOCK, LockMode::Exclusive, Wait::Try))
        .unwrap();
    let shared = [&holder, &reader].map(|c| {
        rt.block_on(c.lock(SHARED_LOCK, LockMode::Shared, Wait::Try))
            .unwrap()
    });
    let queued = {
        let waiter = waiter.clone();
        rt.spawn(async move {
            let wait = Wait::Timeout(Duration::from_secs(120));
            waiter.lock(LOCK, LockMode::Exclusive, wait).await
        })
    };
    let leader = rt
        .block_on(holder.elections().campaign("/orders/primary", "node-a"))
        .unwrap();
    rt.block_on(
        holder
            .objects()
            .put("/orders/config.json", &b"{\"batch\":7}"[..]),
    )
    .unwrap();
    let snapshot = rt.block_on(holder.snapshots().create()).unwrap();

    let (addr, v) = page_listing(&data, LOCK, 1, 1);
    // The screenshot is of a settled cluster: its lookup nodes have chosen a leader (a
    // few seconds after start). Not a condition of the test: it goes on after the bound.
    let settled = Instant::now();
    while settled.elapsed() < Duration::from_secs(30) {
        let (_, _, body) = get(&addr, "/status.json");
        let leader = serde_json::from_str::<serde_json::Value>(&body)
            .is_ok_and(|v| v["lookup"]["leader"].is_u64());
        if leader {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let me = v["device"]["id"].as_u64().unwrap();
    let store = held.store();
    let waiting = v["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == LOCK)
        .unwrap()["waiters"][0]["session"]
        .as_u64()
        .unwrap();
    let url = format!("http://{addr}/");
    let profile = dir.path().join("chromium-profile");

    let dom = run_chromium(&browser, &profile, &["--dump-dom"], &url);
    for text in [
        format!("Tenure · device d{me}"),
        format!("<td>s{store}</td>"),
        ">Manager<".to_string(),
        LOCK.to_string(),
        format!("session {} · token {}", held.session(), held.token()),
        format!("1. session {waiting}"),
        // Shared holders, the election and its leader.
        format!(
            "session {} · token {}",
            shared[1].session(),
            shared[1].token()
        ),
        "/orders/primary".to_string(),
        format!("session {} · token {}", leader.session(), leader.token()),
        // The markup name is text, not markup.
        "/orders/&lt;b&gt;x&lt;/b&gt;&amp;co".to_string(),
        // The snapshot: every device of it recorded its part.
        snapshot.id.clone(),
    ] {
        assert!(dom.contains(&text), "the page shows {text:?}:\n{dom}");
    }
    assert!(
        !dom.contains("<b>x</b>"),
        "a lock name became markup:\n{dom}"
    );

    let out = artifacts_dir();
    std::fs::create_dir_all(&out).unwrap();
    let png = out.join("status.png");
    let _ = std::fs::remove_file(&png);
    run_chromium(
        &browser,
        &profile,
        &[&format!("--screenshot={}", png.display())],
        &url,
    );
    let bytes = std::fs::read(&png).expect("the screenshot was written");
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 10_000,
        "a PNG screenshot ({} bytes)",
        bytes.len()
    );
    eprintln!("screenshot of {url}: {}", png.display());

    queued.abort();
    drop((markup, shared, leader));
}
