//! Snapshots on real processes (DESIGN §6): a local cluster under lock load takes
//! consistent snapshots with `tenure snapshot create`. Locks acknowledged before a snapshot
//! and released after it are in its cut with their holders and fencing tokens, locks
//! released before it are not, every holder of the cut is a grant some client received,
//! and the holders' sessions are open in it. `verify` passes, and fails with a clear
//! message on a damaged part. `restore` writes a new cluster's data directory that
//! `cluster up` starts beside the original, and every lock and session of the cut is
//! there. The load's throughput before and during each snapshot, and the snapshots'
//! durations, are printed: measured, never asserted (DESIGN §10). Retention and
//! `tenure snapshot rm`: a cluster that keeps two snapshots' parts, and a removal on every
//! device, with one of them down.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tenure_client::proto::tenure_client::TenureClient;
use tenure_client::proto::{self, KeepAliveRequest, SessionRef};
use tenure_client::{Client, ClientOptions, LockMode, Wait};

use crate::common;
use crate::common::{Guard, STORES, cluster_file, tenure, up, with_tls};

/// Locks held across the snapshots.
const HELD: usize = 12;
/// Locks taken and released before them.
const GONE: usize = 4;
/// Clients cycling lock+unlock meanwhile, each on names of its own (no waiting).
const LOAD_CLIENTS: usize = 6;
/// Snapshots taken under the load with `tenure snapshot create` (collected).
const SNAPSHOTS: usize = 2;
/// Snapshots taken under the load through the client library (recorded only): the load's
/// throughput during these is the cost of recording, without the command's start and the
/// parts' transfer.
const RECORDED: usize = 3;

/// A grant a client received: lock and fencing token (epoch, seq).
type Grant = (String, u64, u64);

fn endpoints(data: &Path) -> Vec<String> {
    cluster_file(data)["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["client_addr"].as_str().unwrap().to_string())
        .collect()
}

/// Sessions outlive everything the test does, in the original and in the restored cluster.
fn options() -> ClientOptions {
    ClientOptions {
        session_ttl: Duration::from_secs(60),
        ..Default::default()
    }
}

/// `tenure` with `args` in a blocking thread (the load keeps running meanwhile).
async fn tenure_bg(args: Vec<String>) -> (bool, String, String) {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        tenure(&args)
    })
    .await
    .unwrap()
}

/// Whether `session` of `store` is open in the cluster behind `client`: one keep-alive
/// to the store's manager (found in the devices' status), answered with its new TTL.
async fn session_open(client: &Client, store: u32, session: u64) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = String::new();
    while Instant::now() < deadline {
        let manager = client.status_all().await.into_iter().find_map(|(ep, s)| {
            let s = s.ok()?;
            (s.managers.iter())
                .any(|m| m.store == store && m.is_manager())
                .then_some(ep)
        });
        if let Some(ep) = manager {
            let req = KeepAliveRequest {
                session: Some(SessionRef { store, id: session }),
            };
            let answer = async {
                let mut c = TenureClient::new(tenure_client::channel(&ep, client.options()).ok()?);
                let mut s = c
                    .keep_alive(tokio_stream::iter([req]))
                    .await
                    .ok()?
                    .into_inner();
                s.message().await.ok()?
            };
            match answer.await.and_then(|r| r.result) {
                Some(proto::keep_alive_response::Result::Ok(_)) => return Ok(()),
                Some(proto::keep_alive_response::Result::Error(e)) => last = format!("{e:?}"),
                None => last = "no answer".into(),
            }
            if last.contains("SessionExpired") {
                return Err(last);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "no answer for session {session} of store {store}: {last}"
    ))
}

/// Cycles per second among `done` between `from` and `to`.
fn rate(done: &[Instant], from: Instant, to: Instant) -> f64 {
    let n = done.iter().filter(|t| **t >= from && **t < to).count();
    n as f64 / to.duration_since(from).as_secs_f64().max(1e-3)
}

/// Cycles per second among `done` in the 100 ms from `from`, or until `to` if later: a
/// snapshot's own window is a few dozen cycles, too few to count on.
fn rate_during(done: &[Instant], from: Instant, to: Instant) -> f64 {
    rate(done, from, to.max(from + Duration::from_millis(100)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_under_lock_load_then_restore_has_every_lock_and_session_of_the_cut() {
    let _turn = turn!();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    up(&data);
    let client = Client::with_options(endpoints(&data), with_tls(&data, options())).unwrap();

    // Acknowledged before the snapshots, released after them: in every cut.
    let mut held = Vec::new();
    for i in 0..HELD {
        let name = format!("/held{i}/lock");
        let g = client.lock(&name, LockMode::Exclusive, Wait::Try).await;
        held.push(g.unwrap_or_else(|e| panic!("lock {name}: {e}")));
    }
    // Released (acknowledged) before them: in no cut.
    for i in 0..GONE {
        let g = (client.lock(&format!("/gone{i}/lock"), LockMode::Exclusive, Wait::Try))
            .await
            .unwrap();
        g.release().await.unwrap();
    }

    // The load: lock+unlock cycles; every grant received and every cycle's end recorded.
    let stop = Arc::new(AtomicBool::new(false));
    let done: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let grants: Arc<Mutex<BTreeSet<Grant>>> = Arc::default();
    let mut load = Vec::new();
    for c in 0..LOAD_CLIENTS {
        let lc = Client::with_options(endpoints(&data), with_tls(&data, options())).unwrap();
        let (stop, done, grants) = (stop.clone(), done.clone(), grants.clone());
        load.push(tokio::spawn(async move {
            let mut errors = 0;
            for n in 0usize.. {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let name = format!("/load{c}s{}/x", n % 8);
                let wait = Wait::Timeout(Duration::from_secs(5));
                match lc.lock(&name, LockMode::Exclusive, wait).await {
                    Ok(g) => {
                        let t = g.token();
                        // A grant is its name and token (tokens are unique per store);
                        // its holder in the store may be the client's session's child.
                        grants.lock().unwrap().insert((name, t.epoch.0, t.seq));
                        if g.release().await.is_err() {
                            errors += 1;
                        }
                        done.lock().unwrap().push(Instant::now());
                    }
                    Err(e) => {
                        eprintln!("load client {c}: {name}: {e}");
                        errors += 1;
                    }
                }
            }
            errors
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let mut taken = Vec::new();
    for _ in 0..SNAPSHOTS {
        let args = [
            "snapshot",
            "create",
            "--data",
            data.to_str().unwrap(),
            "--json",
        ];
        let t0 = Instant::now();
        let (ok, out, err) = tenure_bg(args.iter().map(|s| s.to_string()).collect()).await;
        let t1 = Instant::now();
        assert!(ok, "snapshot create failed:\n{out}\n{err}");
        let m: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(m["devices"].as_array().unwrap().len(), 3, "{m}");
        taken.push((m, t0, t1));
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    let mut recorded = Vec::new();
    for _ in 0..RECORDED {
        let t0 = Instant::now();
        let created = client.snapshots().create().await.unwrap();
        recorded.push((created, t0, Instant::now()));
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for l in load {
        assert_eq!(l.await.unwrap(), 0, "the load saw errors (see above)");
    }
    for g in held.iter() {
        assert!(g.is_held(), "{} was lost during the test", g.name());
    }

    // Throughput before and during each snapshot, and its duration.
    let done = done.lock().unwrap().clone();
    // The second before the first snapshot (the first half second connects the sessions).
    let before = rate(&done, taken[0].1 - Duration::from_secs(1), taken[0].1);
    println!(
        "load: {LOAD_CLIENTS} clients, {:.0} lock+unlock cycles/s before the snapshots",
        before
    );
    for (m, t0, t1) in &taken {
        println!(
            "snapshot {}: recorded in {:.1} ms; `snapshot create` took {:.0} ms (with fetching {} parts, {} bytes); \
             load in the 100 ms from its start {:.0} cycles/s ({:.0}% of before); terminated: {}",
            m["id"].as_str().unwrap(),
            m["duration_ms"].as_f64().unwrap(),
            t1.duration_since(*t0).as_secs_f64() * 1e3,
            m["devices"].as_array().unwrap().len(),
            (m["devices"].as_array().unwrap().iter())
                .map(|d| d["bytes"].as_u64().unwrap())
                .sum::<u64>(),
            rate_during(&done, *t0, *t1),
            100.0 * rate_during(&done, *t0, *t1) / before.max(1e-3),
            m["terminated"]
        );
    }
    for (c, t0, t1) in &recorded {
        println!(
            "snapshot {} (Create only): recorded in {:.1} ms, answered in {:.1} ms; load in the 100 ms \
             from its start {:.0} cycles/s ({:.0}% of before)",
            c.id,
            c.duration.as_secs_f64() * 1e3,
            t1.duration_since(*t0).as_secs_f64() * 1e3,
            rate_during(&done, *t0, *t1),
            100.0 * rate_during(&done, *t0, *t1) / before.max(1e-3),
        );
    }

    // Release the held locks: the cut keeps them, held by the session the store lists
    // (the client's one session, or its child in a store other than its home).
    let mut released = Vec::new();
    for g in held {
        let t = g.token();
        let listed = client.holders(g.name()).await.unwrap().holders;
        assert_eq!(listed.len(), 1, "{}: {listed:?}", g.name());
        released.push((
            g.name().to_string(),
            listed[0].store,
            listed[0].session,
            t.epoch.0,
            t.seq,
        ));
        g.release().await.unwrap();
    }
    let held = released;

    let id = taken[0].0["id"].as_str().unwrap().to_string();
    let snap_dir = data.join("snapshots").join(&id);
    assert!(snap_dir.join("manifest.json").exists());

    // `ls` lists it, complete, with a part on every device, collected.
    let (ok, out, err) = tenure(&["snapshot", "ls", "--data", data.to_str().unwrap(), "--json"]);
    assert!(ok, "snapshot ls failed:\n{out}\n{err}");
    let ls: serde_json::Value = serde_json::from_str(&out).unwrap();
    let entry = (ls["snapshots"].as_array().unwrap().iter())
        .find(|s| s["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{id} not listed: {ls}"));
    assert_eq!(entry["status"], "complete", "{entry}");
    assert_eq!(entry["parts_on_devices"].as_array().unwrap().len(), 3);
    assert!(entry["collected"].is_string(), "{entry}");

    // `verify` passes; the cut's locks and sessions are what the clients knew.
    let (ok, out, err) = tenure(&[
        "snapshot",
        "verify",
        &id,
        "--data",
        data.to_str().unwrap(),
        "--json",
    ]);
    assert!(ok, "snapshot verify failed:\n{out}\n{err}");
    let cut: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(cut["problems"].as_array().unwrap().is_empty(), "{cut}");
    let holders: BTreeMap<String, (u64, u64, u64)> = (cut["holders"].as_array().unwrap().iter())
        .map(|h| {
            (
                h["name"].as_str().unwrap().to_string(),
                (
                    h["session"].as_u64().unwrap(),
                    h["token_epoch"].as_u64().unwrap(),
                    h["token_seq"].as_u64().unwrap(),
                ),
            )
        })
        .collect();
    let sessions: BTreeSet<(u32, u64)> = (cut["sessions"].as_array().unwrap().iter())
        .map(|s| {
            (
                s["store"].as_u64().unwrap() as u32,
                s["session"].as_u64().unwrap(),
            )
        })
        .collect();
    for (name, store, session, epoch, seq) in &held {
        assert_eq!(
            holders.get(name),
            Some(&(*session, *epoch, *seq)),
            "{name}, held across the snapshot, is not in its cut as granted"
        );
        assert!(
            sessions.contains(&(*store, *session)),
            "session {session} of {name}"
        );
    }
    for i in 0..GONE {
        let name = format!("/gone{i}/lock");
        assert!(!holders.contains_key(&name), "{name} was released before");
    }
    let grants = grants.lock().unwrap().clone();
    for (name, (session, epoch, seq)) in &holders {
        if name.starts_with("/load") {
            assert!(
                grants.contains(&(name.clone(), *epoch, *seq)),
                "{name} is held in the cut by session {session} with token {epoch}.{seq}, \
                 which no client was granted"
            );
        }
    }
    println!(
        "cut of {id}: {} locks held, {} sessions open, {} message(s) in flight",
        holders.len(),
        sessions.len(),
        cut["in_flight"]
    );

    // A damaged part fails verification, naming the file.
    let bad = dir.path().join("damaged");
    std::fs::create_dir_all(&bad).unwrap();
    for f in std::fs::read_dir(&snap_dir).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), bad.join(f.file_name())).unwrap();
    }
    let part = bad.join("device-2.part");
    let mut bytes = std::fs::read(&part).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&part, bytes).unwrap();
    let (ok, out, err) = tenure(&["snapshot", "verify", &id, "--dir", bad.to_str().unwrap()]);
    assert!(!ok, "a damaged snapshot passed verification:\n{out}");
    assert!(
        err.contains("FAILED verification") && err.contains("device-2.part: checksum mismatch"),
        "unclear verification failure:\n{err}"
    );
    println!("damaged part: {}", err.trim());

    // Restore into a fresh directory and start it beside the original.
    let restored = dir.path().join("restored");
    let _restored_guard = Guard(restored.clone());
    let (ok, out, err) = tenure(&[
        "snapshot",
        "restore",
        &id,
        "--data",
        data.to_str().unwrap(),
        "--into",
        restored.to_str().unwrap(),
    ]);
    assert!(ok, "snapshot restore failed:\n{out}\n{err}");
    println!("{}", out.trim());
    let (ok, out, err) = tenure(&[
        "cluster",
        "up",
        "--data",
        restored.to_str().unwrap(),
        "--wait-secs",
        "60",
        "--json",
    ]);
    assert!(
        ok,
        "cluster up of the restored snapshot failed:\n{out}\n{err}"
    );
    let original: BTreeSet<String> = endpoints(&data).into_iter().collect();
    let fresh = endpoints(&restored);
    assert!(fresh.iter().all(|e| !original.contains(e)), "ports reused");
    let rc = Client::with_options(fresh, with_tls(&restored, options())).unwrap();
    assert_eq!(rc.stores().await.unwrap(), STORES);

    // Every lock of the cut is held there by the same session with the same token, and
    // nothing else is.
    for (name, (session, epoch, seq)) in &holders {
        let st = rc.holders(name).await.unwrap();
        let found: Vec<(u64, u64, u64)> = (st.holders.iter())
            .map(|h| (h.session, h.token.epoch.0, h.token.seq))
            .collect();
        assert_eq!(
            found,
            vec![(*session, *epoch, *seq)],
            "{name} in the restored cluster"
        );
    }
    let all = rc.locks("/").await.unwrap();
    let names: BTreeSet<&str> = (all.iter())
        .filter(|l| !l.holders.is_empty())
        .map(|l| l.name.as_str())
        .collect();
    let cut_names: BTreeSet<&str> = holders.keys().map(String::as_str).collect();
    assert_eq!(names, cut_names, "held locks of the restored cluster");
    // Every session of the cut is open there.
    for (store, session) in &sessions {
        if let Err(e) = session_open(&rc, *store, *session).await {
            panic!("session {session} of store {store} is not open in the restored cluster: {e}");
        }
    }
    println!(
        "restored cluster: all {} locks (holders, tokens) and {} sessions of the cut are there",
        holders.len(),
        sessions.len()
    );
}

/// `tenure snapshot ls --json` of the cluster under `data`: each snapshot's id → the devices
/// holding their part of it, and whether it is collected under `data`.
fn listed(data: &str) -> BTreeMap<String, (Vec<u64>, bool)> {
    let (ok, out, err) = tenure(&["snapshot", "ls", "--data", data, "--json"]);
    assert!(ok, "ls failed:\n{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["unreachable"], serde_json::json!([]), "{v}");
    (v["snapshots"].as_array().unwrap().iter())
        .map(|s| {
            let mut parts: Vec<u64> = (s["parts_on_devices"].as_array().unwrap().iter())
                .map(|d| d.as_u64().unwrap())
                .collect();
            parts.sort_unstable();
            let id = s["id"].as_str().unwrap().to_string();
            (id, (parts, s.get("collected").is_some()))
        })
        .collect()
}

/// Retention and `rm` on real processes: with `--snapshot-keep 2`, the devices keep their
/// parts of the two newest of three snapshots (the oldest stays collected under --data);
/// `rm` removes a snapshot's parts on every device and its collected copy, so `ls` no
/// longer shows it, again is harmless, and leaves the newest verifiable; `rm` with a
/// device down removes the others' parts, names the device and fails.
#[test]
fn retention_keeps_the_newest_snapshots_and_rm_removes_one_everywhere() {
    let _turn = turn!();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    let d = data.to_str().unwrap();
    let stores = STORES.to_string();
    let (ok, out, err) = tenure(&[
        "cluster",
        "up",
        "--devices",
        "3",
        "--stores",
        &stores,
        "--data",
        d,
        "--snapshot-keep",
        "2",
        "--wait-secs",
        "60",
        "--json",
    ]);
    assert!(ok, "cluster up failed:\n{out}\n{err}");
    let toml = std::fs::read_to_string(data.join("d1/server.toml")).unwrap();
    assert!(
        toml.contains("[snapshot]") && toml.contains("keep = 2"),
        "{toml}"
    );

    let mut ids = Vec::new();
    for _ in 0..3 {
        let (ok, out, err) = tenure(&["snapshot", "create", "--data", d, "--json"]);
        assert!(ok, "snapshot create failed:\n{out}\n{err}");
        let m: serde_json::Value = serde_json::from_str(&out).unwrap();
        ids.push(m["id"].as_str().unwrap().to_string());
    }
    let all = vec![1, 2, 3];
    // A device removes the oldest part right after it wrote the newest; `create` may
    // return just before.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut ls = listed(d);
    while ls[&ids[0]].0 != Vec::<u64>::new() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        ls = listed(d);
    }
    assert_eq!(ls.len(), 3, "{ls:?}");
    assert_eq!(ls[&ids[0]], (vec![], true), "the oldest: collected only");
    assert_eq!(ls[&ids[1]], (all.clone(), true));
    assert_eq!(ls[&ids[2]], (all.clone(), true));
    let on_devices = |ls: &BTreeMap<String, (Vec<u64>, bool)>| {
        ls.values().filter(|(p, _)| !p.is_empty()).count()
    };
    assert_eq!(on_devices(&ls), 2);

    let (ok, out, err) = tenure(&["snapshot", "rm", &ids[1], "--data", d, "--json"]);
    assert!(ok, "rm failed:\n{out}\n{err}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    let outcomes: Vec<&str> = (r["devices"].as_array().unwrap().iter())
        .map(|x| x["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["removed"; 3], "{r}");
    assert_eq!(r["collected"], "removed");
    let ls = listed(d);
    assert!(!ls.contains_key(&ids[1]), "{ls:?}");
    assert_eq!(on_devices(&ls), 1);
    assert_eq!(ls[&ids[2]], (all.clone(), true));

    // Again: nothing left to remove, not an error.
    let (ok, out, err) = tenure(&["snapshot", "rm", &ids[1], "--data", d]);
    assert!(ok, "a second rm failed:\n{out}\n{err}");
    assert!(out.contains("no part on devices [1, 2, 3]"), "{out}");

    let (ok, out, err) = tenure(&["snapshot", "verify", &ids[2], "--data", d]);
    assert!(ok, "verify of the newest failed:\n{out}\n{err}");

    // A device down: the others remove their parts, the command names it and fails.
    let pid = cluster_file(&data)["devices"][2]["pid"].as_u64().unwrap();
    common::kill9(pid);
    let (ok, out, err) = tenure(&["snapshot", "rm", &ids[2], "--data", d]);
    assert!(!ok, "rm with a device down succeeded:\n{out}\n{err}");
    assert!(out.contains("part removed on devices [1, 2]"), "{out}");
    assert!(out.contains("unreachable"), "{out}");
    assert!(
        err.contains("1 device(s) could not remove their part"),
        "{err}"
    );
}

/// A cluster whose members changed (a fourth device added, the second removed) has gaps
/// in its device ids; its snapshot restores with the same ids, and the restored cluster
/// holds the lock of the cut. `snapshot create` prints the id alone on standard output,
/// so `ID=$(tenure snapshot create)` works.
#[test]
fn a_snapshot_after_membership_changes_restores_with_its_device_ids() {
    let _turn = turn!();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    let d = data.to_str().unwrap();
    up(&data);
    let (ok, out, err) = tenure(&["cluster", "add", "--data", d]);
    assert!(ok, "cluster add failed:\n{out}\n{err}");
    let (ok, out, err) = tenure(&["cluster", "remove", "2", "--data", d]);
    assert!(ok, "cluster remove failed:\n{out}\n{err}");

    let rt = tokio::runtime::Runtime::new().unwrap();
    let _enter = rt.enter();
    let client = Client::with_options(endpoints(&data), with_tls(&data, options())).unwrap();
    let guard = rt
        .block_on(client.lock("/kept/lock", LockMode::Exclusive, Wait::Try))
        .unwrap();
    let token = guard.token();

    let (ok, out, err) = tenure(&["snapshot", "create", "--data", d]);
    assert!(ok, "snapshot create failed:\n{out}\n{err}");
    let id = out.trim();
    assert!(
        !id.is_empty() && !id.contains(char::is_whitespace),
        "stdout is the id alone: {out:?}"
    );
    assert!(err.contains("recorded by 3 devices [1, 3, 4]"), "{err}");

    let restored = dir.path().join("restored");
    let _restored_guard = Guard(restored.clone());
    let r = restored.to_str().unwrap();
    let (ok, out, err) = tenure(&["snapshot", "restore", id, "--data", d, "--into", r]);
    assert!(ok, "snapshot restore failed:\n{out}\n{err}");
    let (ok, out, err) = tenure(&["cluster", "up", "--data", r, "--wait-secs", "60"]);
    assert!(
        ok,
        "cluster up of the restored snapshot failed:\n{out}\n{err}"
    );
    let ids: Vec<u64> = cluster_file(&restored)["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [1, 3, 4], "the restored devices keep their ids");
    let (ok, out, err) = tenure(&["locks", "/kept", "--data", r, "--json"]);
    assert!(ok, "locks in the restored cluster failed:\n{out}\n{err}");
    let locks: serde_json::Value = serde_json::from_str(&out).unwrap();
    let holder = &locks[0]["holders"][0];
    assert_eq!(locks[0]["name"], "/kept/lock", "{locks}");
    assert_eq!(holder["session"].as_u64(), Some(guard.session()), "{locks}");
    assert_eq!(
        holder["token"].as_str(),
        Some(token.to_string().as_str()),
        "{locks}"
    );
    drop(guard);
}
