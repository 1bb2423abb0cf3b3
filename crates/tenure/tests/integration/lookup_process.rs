//! The lookup service (seed 003, DESIGN §7) on real `tenure server` processes, three
//! devices of a local cluster on 127.0.0.1, through the faults the seed's bounds are
//! about:
//!
//! - the lookup leader's device is killed with SIGKILL while a client keeps querying
//!   through another device: the outage it sees is measured and held to the bound the
//!   simulator's outage checker holds runs to, for the intervals the devices run with;
//! - a persistent entry (and a revoke of another) survives SIGKILL of every device and
//!   `cluster up` again;
//! - subscribers (`tenure lookup watch --json`) through a SIGKILL of the leader, with an
//!   entry revoked and another published during the failover, end with exactly the new
//!   leader's entries;
//! - the lookup metrics are exported on every device's metrics address and move.
//!
//! The tests take turns (one cluster at a time): the outage is a timing bound, and three
//! clusters on a 2-core machine would measure the machine. Every wait is bounded and
//! polls a condition; guards kill the processes if a step fails.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, mpsc};
use std::time::{Duration, Instant};
use tenure_client::lookup::LeaderId;

use crate::common::lookup::{
    Dev, Proc, client_of, device_config, devices, lines_of, rt, run, wait_lookup_among,
};
use crate::common::{Guard, cluster_file, http_get, kill9, up};

/// One test at a time (see the module's documentation).
fn serial() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// The probing querier's period (the simulator's prober uses the same).
const PROBE: Duration = Duration::from_millis(20);

/// `tenure ARGS` through one device only (`--endpoints`, with the cluster's CA).
fn run_via(data: &Path, endpoints: &[&str], args: &[&str]) -> (Option<i32>, String, String) {
    let ca = cluster_file(data)["ca"].as_str().unwrap().to_string();
    let eps = endpoints.join(",");
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--endpoints", &eps, "--ca", &ca]);
    run(data, &all)
}

/// `tenure lookup ls PREFIX --json` as key → value.
fn ls(data: &Path, prefix: &str) -> BTreeMap<String, String> {
    let (code, out, err) = run(data, &["lookup", "ls", prefix, "--json"]);
    assert_eq!(code, Some(0), "ls {prefix}: {out}{err}");
    let list: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    list.iter()
        .map(|e| {
            (
                e["key"].as_str().unwrap().to_string(),
                e["value"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The bounds of a leader crash, for the intervals a device runs with (µs-exact
/// durations), as the simulator's outage checker computes them
/// (`tenure_sim::lookup::checks::Bounds::of`): `3 HB + ℓ + δ_c` until the survivors
/// declare the leader down, then `probe + 2ℓc + 2ℓ` for a probe to be sent and answered
/// through the multicast. On one machine the deployment's promises stand in for the
/// simulator's drawn latencies: a one-way trip (ℓ, ℓc) is at most half of
/// `ROUNDTRIP_COMMUNICATION_DELAY`, and δ_c is the configured clock-drift bound.
struct OutageBound {
    /// `3 HB + ℓ + δ_c + probe + 2ℓc + 2ℓ`: crash → first answer of a probe sent after it.
    failover: Duration,
    /// `probe + 2ℓc + 2ℓ`: how long before the kill the querier's last answer may come
    /// (the probe sent a round trip before the kill is answered before it).
    before: Duration,
    /// The terms, for the report.
    terms: String,
}

fn outage_bound(dev: &Dev) -> OutageBound {
    let cfg = device_config(dev);
    let s = &cfg.lookup;
    let (hb, rtt, dc) = (
        s.heartbeat_interval,
        s.roundtrip_delay,
        cfg.timing.clock_drift,
    );
    let (l, lc) = (rtt / 2, rtt / 2);
    let before = PROBE + lc * 2 + l * 2;
    OutageBound {
        failover: hb * 3 + l + dc + before,
        before,
        terms: format!(
            "3 x HB {hb:?} + l {l:?} + dc {dc:?} + probe {PROBE:?} + 2 lc {:?} + 2 l {:?}",
            lc * 2,
            l * 2
        ),
    }
}

/// The device whose `<activeStartTime, id>` is the youngest among the active ones other
/// than `leader` in `view` (the one that will not lead after `leader`): queries through
/// it travel the multicast to the new leader and back.
fn youngest_other(view: &tenure_client::proto::NodeStatusResponse, leader: u64) -> u64 {
    view.up
        .iter()
        .filter(|p| p.device != leader)
        .max_by_key(|p| (p.start_micros.unwrap_or(u64::MAX), p.device))
        .expect("another device")
        .device
}

/// One probe: sent, answered (or failed), by which leader.
struct Probe {
    sent: Instant,
    done: Instant,
    answer: Result<(Option<Vec<u8>>, LeaderId), String>,
}

// Seed 003: "Leader failover occurs within (3 SS-heartbeat-interval) time" and "the
// maximum outage time is 3 SS-heartbeat-interval"; DESIGN §9.7. The leader's device is
// killed with SIGKILL while a client queries through the youngest other device every
// 20 ms (each probe its own request, as the simulator's prober): the first answer of a
// new leader comes within the simulator's outage bound of the kill, and the querier's gap
// (its last answer from the old leader → its first from the new one) within that bound
// plus the stretch before the kill in which its last answer may lie.
#[test]
fn a_leader_killed_with_sigkill_is_replaced_within_the_seeds_outage_bound() {
    let _turn = turn!();
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    let rt = rt();
    up(&data);
    let devs = devices(&data);
    let all: Vec<String> = devs.iter().map(|d| d.client.clone()).collect();
    let (old, views) = wait_lookup_among(&rt, &data, &all);
    let (code, out, err) = run(&data, &["lookup", "put", "/o/k", "v1", "--persistent"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let leader_view = views.iter().find(|v| v.device == old).unwrap();
    let via = youngest_other(leader_view, old);
    let via_dev = devs.iter().find(|d| d.id == via).unwrap().clone();
    let victim = devs.iter().find(|d| d.id == old).unwrap().clone();
    let bound = outage_bound(&victim);
    let client = client_of(&rt, &data, vec![via_dev.client.clone()]);

    let (killed, probes) = rt.block_on(async {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Probe>();
        let mut tick = tokio::time::interval(PROBE);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let started = Instant::now();
        let mut probes = Vec::new();
        let mut killed = None;
        let mut answered_new: Option<Instant> = None;
        loop {
            tick.tick().await;
            let (c, tx) = (client.clone(), tx.clone());
            tokio::spawn(async move {
                let sent = Instant::now();
                let r = c.get_from_leader("/o/k").await;
                let _ = tx.send(Probe {
                    sent,
                    done: Instant::now(),
                    answer: r
                        .map(|(e, l)| (e.map(|e| e.value), l))
                        .map_err(|e| e.to_string()),
                });
            });
            while let Ok(p) = rx.try_recv() {
                if answered_new.is_none() && matches!(&p.answer, Ok((_, l)) if l.device.0 != old) {
                    answered_new = Some(p.done);
                }
                probes.push(p);
            }
            let now = Instant::now();
            match killed {
                None if now - started >= Duration::from_secs(1) => {
                    // Taken just before the kill: the outage measured from it is, if
                    // anything, longer than the real one.
                    killed = Some(Instant::now());
                    kill9(victim.pid);
                }
                None => {}
                Some(k) => {
                    // Probe on for a while after the first answer of a new leader.
                    if answered_new.is_some_and(|t| now - t > Duration::from_millis(500)) {
                        break;
                    }
                    assert!(
                        now - k < Duration::from_secs(20),
                        "no new leader answered within 20 s of the kill"
                    );
                }
            }
        }
        // The probes in flight (each bounded by the client's retry deadline).
        drop(tx);
        while let Some(p) = rx.recv().await {
            probes.push(p);
        }
        (killed.unwrap(), probes)
    });
    let by = |p: &Probe, new: bool| matches!(&p.answer, Ok((_, l)) if (l.device.0 != old) == new);
    let last_old = probes
        .iter()
        .filter(|p| by(p, false))
        .map(|p| p.done)
        .max()
        .expect("answers before the kill");
    let first_new = probes
        .iter()
        .filter(|p| by(p, true))
        .min_by_key(|p| p.done)
        .expect("an answer from a new leader");
    let new = match &first_new.answer {
        Ok((_, l)) => l.device.0,
        Err(_) => unreachable!(),
    };
    for p in probes.iter().filter(|p| by(p, true)) {
        assert_eq!(
            p.answer.as_ref().unwrap().0.as_deref(),
            Some(&b"v1"[..]),
            "the new leader had the entry (a hot spare applies every update)"
        );
    }
    assert!(
        !probes
            .iter()
            .any(|p| by(p, false) && p.sent > killed + PROBE),
        "the killed leader answered a probe sent after its death"
    );
    let errors = probes.iter().filter(|p| p.answer.is_err()).count();
    let failover = first_new.done - killed;
    let gap = first_new.done - last_old;
    eprintln!(
        "lookup leader d{old} killed with SIGKILL; querier through d{via}: {} probes, {errors} \
         failed; first answer by the new leader d{new} {failover:?} after the kill (bound \
         {:?} = {}); querier's gap, last answer by d{old} -> first by d{new}: {gap:?} \
         (bound {:?} = that + probe + 2 lc + 2 l {:?})",
        probes.len(),
        bound.failover,
        bound.terms,
        bound.failover + bound.before,
        bound.before,
    );
    assert!(
        failover <= bound.failover,
        "failover {failover:?} past the seed's bound {:?}",
        bound.failover
    );
    assert!(
        gap <= bound.failover + bound.before,
        "the querier's outage {gap:?} past {:?}",
        bound.failover + bound.before
    );
    // The survivors agree on the new leader.
    let survivors: Vec<String> = (devs.iter())
        .filter(|d| d.id != old)
        .map(|d| d.client.clone())
        .collect();
    let (agreed, _) = wait_lookup_among(&rt, &data, &survivors);
    assert_eq!(agreed, new);
}

// Seed 003: persistent (low-frequency) state is "maintained in stable store" so that it
// is available "despite long-power outages"; DESIGN §7: persistent entries survive full
// restarts. An acknowledged entry, and the revoke of another, outlive SIGKILL of every
// device and `cluster up` again.
#[test]
fn a_persistent_entry_survives_sigkill_of_every_device_and_a_restart() {
    let _turn = turn!();
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    let rt = rt();
    up(&data);
    let all: Vec<String> = devices(&data).into_iter().map(|d| d.client).collect();
    wait_lookup_among(&rt, &data, &all);
    for (key, value) in [("/r/keep", "kept"), ("/r/gone", "revoked-soon")] {
        let (code, out, err) = run(
            &data,
            &["lookup", "put", key, value, "--persistent", "--json"],
        );
        assert_eq!(code, Some(0), "{out}{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["acknowledged"], true, "{v}");
    }
    let (code, _, err) = run(&data, &["lookup", "rm", "/r/gone"]);
    assert_eq!(code, Some(0), "{err}");

    for d in devices(&data) {
        kill9(d.pid);
    }
    let started = Instant::now();
    while devices(&data).iter().any(|d| alive(d.pid)) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "killed devices still run"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let summary = up(&data);
    assert_eq!(summary["restarted"], true, "{summary}");
    let all: Vec<String> = devices(&data).into_iter().map(|d| d.client).collect();
    let (leader, _) = wait_lookup_among(&rt, &data, &all);
    let (code, out, err) = run(&data, &["lookup", "get", "/r/keep"]);
    assert_eq!(
        (code, out.as_str()),
        (Some(0), "kept\n"),
        "after the restart, leader d{leader}: {err}"
    );
    let (code, out, err) = run(&data, &["lookup", "get", "/r/gone"]);
    assert_eq!(code, Some(1), "revoked before the restart: {out}{err}");
    assert!(err.contains("no entry at /r/gone"), "{err}");
    let left = ls(&data, "/r");
    assert_eq!(
        left,
        BTreeMap::from([("/r/keep".to_string(), "kept".to_string())])
    );
}

/// Whether a process runs (not a zombie).
fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let after = s.rsplit_once(')')?.1;
            after.split_whitespace().next().map(|st| st != "Z")
        })
        .unwrap_or(false)
}

/// A subscriber's view as it rebuilds it from `watch --json` lines: key → value, and
/// every removal it printed (key, cause).
#[derive(Default)]
struct Watched {
    view: BTreeMap<String, String>,
    removed: Vec<(String, String)>,
}

impl Watched {
    /// Apply every line printed so far.
    fn drain(&mut self, who: &str, rx: &mpsc::Receiver<String>) {
        while let Ok(line) = rx.try_recv() {
            let v: serde_json::Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("watch --json printed {line:?}: {e}"));
            let key = v["key"].as_str().unwrap().to_string();
            match v["event"].as_str() {
                Some("put") => {
                    let value = v["value"].as_str().unwrap_or_default().to_string();
                    self.view.insert(key, value);
                }
                Some("removed") => {
                    self.view.remove(&key);
                    self.removed
                        .push((key, v["cause"].as_str().unwrap_or_default().to_string()));
                }
                _ => panic!("{who}: unexpected line {line}"),
            }
            eprintln!("({who}: {line})");
        }
    }
}

/// `tenure lookup watch PREFIX --json` through `endpoints`, in that order.
fn watcher(data: &Path, prefix: &str, endpoints: &[&str]) -> (Proc, mpsc::Receiver<String>) {
    let ca = cluster_file(data)["ca"].as_str().unwrap().to_string();
    let mut p = Proc(
        Command::new(env!("CARGO_BIN_EXE_tenure"))
            .args(["lookup", "watch", prefix, "--json", "--ca", &ca])
            .arg("--endpoints")
            .arg(endpoints.join(","))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let lines = lines_of(&mut p.0);
    (p, lines)
}

// Seed 003 and DESIGN §7: a subscriber "through a leader failover ... ends with exactly
// the new leader's view"; every removal is announced, none is silent. Two watchers — one
// that connects to the leader's device first (its stream breaks: the client reconnects
// elsewhere and resumes), one on a surviving device (its subscription's origin survives; the new leader
// takes the subscription over) — see the leader killed with SIGKILL while an entry is
// revoked and another published. Once the survivors agree on a new leader, each watcher's
// rebuilt view equals `tenure lookup ls` and stays so, and each printed the revoke.
#[test]
fn watchers_through_a_leader_sigkill_end_with_exactly_the_new_leaders_view() {
    let _turn = turn!();
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    let rt = rt();
    up(&data);
    let devs = devices(&data);
    let all: Vec<String> = devs.iter().map(|d| d.client.clone()).collect();
    let (old, _) = wait_lookup_among(&rt, &data, &all);
    let victim = devs.iter().find(|d| d.id == old).unwrap().clone();
    let others: Vec<&Dev> = devs.iter().filter(|d| d.id != old).collect();
    let hb = device_config(&victim).lookup.heartbeat_interval;

    for (key, value) in [("/f/keep", "k1"), ("/f/gone", "g1")] {
        let (code, out, err) = run(&data, &["lookup", "put", key, value, "--persistent"]);
        assert_eq!(code, Some(0), "{out}{err}");
    }
    // A volatile entry kept by its provider while `sleep` runs (through any device).
    let _provider = Proc(
        Command::new(env!("CARGO_BIN_EXE_tenure"))
            .args([
                "lookup",
                "put",
                "/f/vol",
                "up",
                "--interval",
                "500ms",
                "--data",
            ])
            .arg(&data)
            .args(["--", "sleep", "120"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let on_leader = [
        victim.client.as_str(),
        others[0].client.as_str(),
        others[1].client.as_str(),
    ];
    let (_wa, la) = watcher(&data, "/f", &on_leader);
    let (_wb, lb) = watcher(&data, "/f", &[others[1].client.as_str()]);
    let mut a = Watched::default();
    let mut b = Watched::default();
    let want: BTreeMap<String, String> = [("/f/gone", "g1"), ("/f/keep", "k1"), ("/f/vol", "up")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let started = Instant::now();
    loop {
        a.drain("watch on the leader", &la);
        b.drain("watch on a survivor", &lb);
        if a.view == want && b.view == want {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the watchers never saw {want:?}: {:?} and {:?}",
            a.view,
            b.view
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // The kill, and at once a revoke and a publish through a surviving device: both are
    // sent before any survivor can have declared the leader down (that takes three
    // heartbeat intervals without one, and the last one left at most an interval before
    // the kill), so they happen during the failover; the CLI retries until the new
    // leader acknowledges them.
    let killed = Instant::now();
    kill9(victim.pid);
    let via = [others[0].client.as_str()];
    let (code, _, err) = run_via(&data, &via, &["lookup", "rm", "/f/gone"]);
    let rm_done = killed.elapsed();
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = run_via(
        &data,
        &via,
        &["lookup", "put", "/f/new", "n1", "--persistent"],
    );
    assert_eq!(code, Some(0), "{err}");
    eprintln!(
        "leader d{old} killed; rm /f/gone acknowledged {rm_done:?} and put /f/new {:?} after \
         the kill",
        killed.elapsed()
    );
    // Acknowledged by the new leader, hence not before two heartbeat intervals after the
    // kill (the earliest a survivor can declare the old leader down).
    assert!(
        rm_done > hb * 2,
        "the revoke was acknowledged {rm_done:?} after the kill: by the dead leader?"
    );
    let survivors: Vec<String> = others.iter().map(|d| d.client.clone()).collect();
    let (new, _) = wait_lookup_among(&rt, &data, &survivors);
    assert_ne!(new, old);

    // Converge (bounded), then hold: each watcher's view is exactly the new leader's.
    let started = Instant::now();
    let mut leader_view;
    loop {
        leader_view = ls(&data, "/f");
        a.drain("watch on the leader", &la);
        b.drain("watch on a survivor", &lb);
        if a.view == leader_view && b.view == leader_view {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the watchers' views never became the new leader d{new}'s {leader_view:?}: \
             {:?} and {:?}",
            a.view,
            b.view
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "watchers equal the new leader d{new}'s view {:?} after the agreement",
        started.elapsed()
    );
    let mut expected = want.clone();
    expected.remove("/f/gone");
    expected.insert("/f/new".into(), "n1".into());
    assert_eq!(leader_view, expected, "the new leader d{new}'s entries");
    std::thread::sleep(Duration::from_millis(1500));
    a.drain("watch on the leader", &la);
    b.drain("watch on a survivor", &lb);
    assert_eq!(ls(&data, "/f"), expected);
    assert_eq!(a.view, expected, "the watcher that was on the leader");
    assert_eq!(b.view, expected, "the watcher on a survivor");
    for (who, w) in [("on the leader", &a), ("on a survivor", &b)] {
        let gone: Vec<&(String, String)> =
            w.removed.iter().filter(|(k, _)| k == "/f/gone").collect();
        assert_eq!(
            gone.len(),
            1,
            "the watcher {who} announced the revoke once: {:?}",
            w.removed
        );
        // "revoked" when the new leader's event reached it; "missed" when the revoke
        // was applied before the new leader took the subscription over, and its sync no
        // longer had the entry.
        assert!(
            matches!(gone[0].1.as_str(), "revoked" | "missed"),
            "{:?}",
            gone[0]
        );
        eprintln!("the watcher {who} saw /f/gone removed ({})", gone[0].1);
    }
}

/// One device's Prometheus text: series (`name{labels}`) → value.
fn scrape(dev: &Dev) -> BTreeMap<String, f64> {
    let (status, body) = http_get(&dev.metrics, "/metrics");
    assert_eq!(status, 200, "d{} /metrics: {body}", dev.id);
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// The sum of every series of metric `name` whose labels contain `with` ("" for all).
fn sum(m: &BTreeMap<String, f64>, name: &str, with: &str) -> f64 {
    m.iter()
        .filter(|(series, _)| {
            let (n, labels) = series.split_once('{').unwrap_or((series, ""));
            n == name && labels.contains(with)
        })
        .map(|(_, v)| v)
        .sum::<f64>()
        + 0.0 // (an empty sum is -0.0)
}

/// Every device's scrape, by device id.
type Scrapes = BTreeMap<u64, BTreeMap<String, f64>>;

/// [`sum`] over every device.
fn total(at: &Scrapes, name: &str, with: &str) -> f64 {
    at.values().map(|m| sum(m, name, with)).sum::<f64>() + 0.0
}

// DESIGN §7 and §8 (observability): the lookup metrics — entries, publishes, expiries,
// leader changes, query latency and the measured age of answers — are exported on every
// device's metrics address (plain HTTP beside the TLS client port) and move with the
// service: publishes and queries count at the device that took them, every active node
// counts the expiry of an entry it kept, the entries gauge follows the node's entries,
// and a new leader counts its leader change.
#[test]
fn lookup_metrics_are_exported_and_move() {
    let _turn = turn!();
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    let rt = rt();
    up(&data);
    let devs = devices(&data);
    let all: Vec<String> = devs.iter().map(|d| d.client.clone()).collect();
    let (old, _) = wait_lookup_among(&rt, &data, &all);
    let before: Scrapes = devs.iter().map(|d| (d.id, scrape(d))).collect();
    for (id, m) in &before {
        for name in ["tenure_lookup_entries", "tenure_lookup_state"] {
            assert!(
                m.keys().any(|s| s.split('{').next() == Some(name)),
                "d{id} exports {name}"
            );
        }
    }
    let changes = |m: &BTreeMap<String, f64>| sum(m, "tenure_lookup_leader_changes_total", "");
    assert!(
        changes(&before[&old]) >= 1.0,
        "the leader d{old} counted its leader change"
    );
    let entries_before = sum(&before[&old], "tenure_lookup_entries", "");

    // Two publishes, a volatile one that lives 2 x 200 ms + a round trip, five gets and
    // a list (through the first device: the CLI's first endpoint).
    let (code, _, err) = run(&data, &["lookup", "put", "/m/p", "1", "--persistent"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = run(
        &data,
        &["lookup", "put", "/m/v", "1", "--interval", "200ms"],
    );
    assert_eq!(code, Some(0), "{err}");
    for _ in 0..5 {
        let (code, _, err) = run(&data, &["lookup", "get", "/m/p"]);
        assert_eq!(code, Some(0), "{err}");
    }
    assert!(ls(&data, "/m").contains_key("/m/p"));

    let started = Instant::now();
    let after = loop {
        let now: Scrapes = devs.iter().map(|d| (d.id, scrape(d))).collect();
        let grew = |name: &str, with: &str, by: f64| {
            total(&now, name, with) - total(&before, name, with) >= by
        };
        let volatile = "durability=\"volatile\"";
        let expired_everywhere = devs.iter().all(|d| {
            sum(&now[&d.id], "tenure_lookup_expiries_total", volatile)
                > sum(&before[&d.id], "tenure_lookup_expiries_total", volatile)
        });
        let ok = grew("tenure_lookup_publishes_total", "", 2.0)
            && grew("tenure_lookup_query_seconds_count", "kind=\"get\"", 5.0)
            && grew("tenure_lookup_query_seconds_count", "kind=\"list\"", 1.0)
            && grew("tenure_lookup_answer_age_seconds_count", "", 5.0)
            && expired_everywhere
            && sum(&now[&old], "tenure_lookup_entries", "") > entries_before;
        if ok {
            break now;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the lookup metrics did not move: before {before:?}, now {now:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    for (name, with) in [
        ("tenure_lookup_publishes_total", ""),
        ("tenure_lookup_query_seconds_count", "kind=\"get\""),
        ("tenure_lookup_query_seconds_count", "kind=\"list\""),
        ("tenure_lookup_answer_age_seconds_count", ""),
        ("tenure_lookup_expiries_total", "durability=\"volatile\""),
    ] {
        eprintln!(
            "{name} {with} over the devices: {} -> {}",
            total(&before, name, with),
            total(&after, name, with)
        );
    }
    eprintln!(
        "tenure_lookup_entries at the leader d{old}: {entries_before} -> {}",
        sum(&after[&old], "tenure_lookup_entries", "")
    );

    // A new leader counts its leader change.
    let victim = devs.iter().find(|d| d.id == old).unwrap();
    kill9(victim.pid);
    let survivors: Vec<String> = (devs.iter())
        .filter(|d| d.id != old)
        .map(|d| d.client.clone())
        .collect();
    let (new, _) = wait_lookup_among(&rt, &data, &survivors);
    let dev_new = devs.iter().find(|d| d.id == new).unwrap();
    let m = scrape(dev_new);
    assert!(
        changes(&m) > changes(&after[&new]),
        "d{new} became leader: leader changes {} -> {}",
        changes(&after[&new]),
        changes(&m)
    );
    assert_eq!(sum(&m, "tenure_lookup_leader", ""), 1.0, "d{new} leads");
}
