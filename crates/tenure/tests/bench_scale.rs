//! `tenure bench scale`, bounded: a local cluster fills a few thousand objects, holds a
//! few thousand locks in a few dozen sessions, loses its busiest device to `kill -9` and
//! gets it back with `cluster up`. The report must show every phase happened, and no
//! lock lost: a session that kept renewing through the failover never expires.

mod common;
use common::{Guard, tenure, up};

#[test]
fn bench_scale_fills_holds_and_survives_kill_9_of_the_busiest_device() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    up(&data);
    let (ok, out, err) = tenure(&[
        "bench",
        "scale",
        "--objects",
        "3000",
        "--clients",
        "16",
        "--sessions",
        "24",
        "--locks",
        "3000",
        "--ttl-secs",
        "10",
        "--watch-secs",
        "20",
        "--data",
        data.to_str().unwrap(),
        "--json",
    ]);
    assert!(ok, "bench scale failed:\n{out}\n{err}");
    let r: serde_json::Value = serde_json::from_str(&out).expect("--json prints JSON");
    let tenths = r["tenths"].as_array().unwrap();
    assert_eq!(tenths.len(), 10, "{r}");
    assert_eq!(tenths[9]["objects"], 3000, "{r}");
    assert!(
        tenths.iter().all(|t| t["rate"].as_f64().unwrap() > 0.0),
        "{r}"
    );
    for d in r["after_hold"].as_array().unwrap() {
        assert!(d["rss_mb"].as_f64().unwrap() > 1.0, "{r}");
        assert!(d["disk_mb"].as_f64().unwrap() > 0.0, "{r}");
    }
    let f = &r["failover"];
    assert!(!f["stores"].as_array().unwrap().is_empty(), "{r}");
    let first = f["first_grant_s"]
        .as_f64()
        .expect("a grant in the killed device's stores");
    let managed = f["all_managed_s"]
        .as_f64()
        .expect("every store managed again");
    assert!(first < 20.0 && managed < 20.0, "{r}");
    assert!(
        f["restart_s"].as_f64().is_some(),
        "the killed device serves again: {r}"
    );
    assert_eq!(f["locks_lost"], 0, "{r}");
    assert_eq!(f["sessions_expired"], 0, "{r}");
    eprintln!(
        "bench scale: fill {:.1} s, hold {:.1} s, first grant {first:.2} s, all managed {managed:.2} s, restart {:.2} s",
        r["fill_s"].as_f64().unwrap(),
        r["hold_s"].as_f64().unwrap(),
        f["restart_s"].as_f64().unwrap()
    );
}
