//! # tenure-chaos
//!
//! Fault testing of real `tenure server` processes, in the manner of Jepsen: test hosts
//! (network namespaces, [`net`]) whose peer links pass through proxies ([`proxy`]) and
//! whose data directories are disks that can stall ([`disk`]), one device per host
//! ([`devices`]) under a clock shim that can step or skew its clocks ([`clock`]), a
//! seeded nemesis that kills, pauses, partitions, drops, delays and reorders packets,
//! stalls disks and steps and skews clocks ([`nemesis`]), a workload of lock clients
//! ([`workload`]), object clients ([`objects`]) and lookup providers and readers
//! ([`lookup`]) recording a real-time history ([`history`]), and at the end the
//! simulator's checkers run on that history ([`check`], [`objects`], [`lookup`]) and a
//! summary is printed ([`summary`]).
//!
//! A run has four phases: faults for the configured time; heal and a fault-free settle
//! while the workload goes on (recovery); stop the workload with some locks held, kill
//! every device and start them all again; read every lock's holders, every object and
//! every lookup key, and the stores' object histories, and compare them with what the
//! clients were told. One seed drives every choice of the nemesis and the workload
//! (timing of real processes still varies between runs of one seed).
//!
//! Needs root (namespaces) and `nft`; [`net::unsupported`] says why not when it cannot
//! run, so tests can skip. Disk stalls need loop devices and cgroup v1 block-I/O
//! throttling ([`disk::unsupported`]); without them a run goes on without that fault.
//! Clock faults need libfaketime ([`clock::find`]); without it, likewise.

pub mod check;
pub mod clock;
pub mod devices;
pub mod disk;
pub mod history;
pub mod lookup;
pub mod nemesis;
pub mod net;
pub mod objects;
pub mod proxy;
pub mod standing;
pub mod summary;
pub mod workload;

use anyhow::{Context, bail};
use check::FinalRead;
use devices::Devices;
use history::{Op, OpKind, Outcome, Recorder};
use net::TestNet;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use summary::Summary;
use tenure_client::ClientOptions;
use tenure_core::lockctl::FencingToken;
use tenure_core::rng::Rng;
use workload::{HeldAtEnd, WorkloadConfig};

/// What a run does.
#[derive(Clone, Debug)]
pub struct ChaosConfig {
    /// Devices (test hosts).
    pub devices: usize,
    /// Lock clients.
    pub clients: usize,
    /// The seed.
    pub seed: u64,
    /// How long faults are injected.
    pub duration: Duration,
    /// The `tenure` binary the devices run.
    pub bin: PathBuf,
    /// Stores of the cluster.
    pub stores: u32,
    /// Lock names (spread over stores by their first segment).
    pub names: usize,
    /// How long the clients use one generation of the lock names before moving on to the
    /// next ([`WorkloadConfig::period`]).
    pub name_period: Duration,
    /// Object clients (0: no object workload).
    pub object_clients: usize,
    /// Object keys (all in one store).
    pub object_keys: usize,
    /// Lookup keys of each durability (0: no lookup workload).
    pub lookup_keys: usize,
    /// Fault-free time with the workload after the last fault.
    pub settle: Duration,
    /// Session TTL of the clients.
    pub ttl: Duration,
    /// Step bound of the linearizability search per name.
    pub max_steps: u64,
    /// Time bound of all the linearizability searches of a run together: names left
    /// when it passes are reported unchecked (never passed). Default: the run's duration,
    /// at least two minutes.
    pub check_time: Duration,
    /// Keep the data directory (logs) even when nothing failed.
    pub keep_data: bool,
    /// Devices serve TLS on the client port and mutual TLS between peers, with a CA made
    /// for the run (as `tenure cluster up` does by default).
    pub tls: bool,
    /// A fault lasts this long (ms, inclusive range; pauses outlast the lease instead).
    pub fault_ms: (u64, u64),
    /// Quiet time after each fault (ms, inclusive range).
    pub gap_ms: (u64, u64),
    /// Clock faults (`clock-step`, `clock-drift`), where libfaketime is installed.
    pub clock_faults: bool,
    /// Only these kinds of fault ([`nemesis::KINDS`]); empty: every kind.
    pub only: Vec<String>,
    /// Objects and locks put in the cluster before the faults and kept through the run
    /// ([`standing`]).
    pub standing: standing::StandingConfig,
}

impl ChaosConfig {
    /// Defaults for `devices` devices running `bin`.
    pub fn new(bin: PathBuf, devices: usize, seed: u64, duration: Duration) -> ChaosConfig {
        ChaosConfig {
            devices,
            clients: 4,
            seed,
            duration,
            bin,
            stores: 16,
            names: 3,
            name_period: Duration::from_secs(60),
            object_clients: 2,
            object_keys: 3,
            lookup_keys: 2,
            settle: Duration::from_secs(5),
            ttl: Duration::from_secs(5),
            max_steps: 2_000_000,
            check_time: duration.max(Duration::from_secs(120)),
            keep_data: false,
            tls: true,
            fault_ms: (2000, 5000),
            gap_ms: (1000, 2500),
            clock_faults: true,
            only: Vec::new(),
            standing: standing::StandingConfig::default(),
        }
    }
}

/// A fresh seed (from the clock and the process id) when none is given.
pub fn random_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    tenure_core::rng::mix64(t ^ ((std::process::id() as u64) << 32))
}

/// Resolves on Ctrl-C or SIGTERM.
async fn interrupted() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match term.as_mut() {
                Some(t) => { t.recv().await; }
                None => std::future::pending::<()>().await,
            }
        } => {}
    }
}

/// Run one chaos test. The test hosts and processes are gone when this returns (or
/// panics, or is interrupted by Ctrl-C / SIGTERM).
pub async fn run(cfg: &ChaosConfig) -> anyhow::Result<Summary> {
    if cfg.devices < 3 {
        bail!("at least 3 devices: a minority must be able to fail");
    }
    if let Some(why) = net::unsupported() {
        bail!("cannot make test hosts here: {why}");
    }
    println!(
        "chaos: seed {} ({} devices, {} clients, {:?} of faults)",
        cfg.seed, cfg.devices, cfg.clients, cfg.duration
    );
    let net = TestNet::create(cfg.devices)?;
    let data = std::env::temp_dir().join(format!("tenure-chaos-{}", net.tag));
    std::fs::create_dir_all(&data)?;
    let result = tokio::select! {
        r = inner(cfg, &net, &data) => r,
        _ = interrupted() => Err(anyhow::anyhow!("interrupted")),
    };
    let keep = cfg.keep_data || !matches!(&result, Ok(s) if s.violations() == 0);
    drop(net);
    match result {
        Ok(mut s) => {
            if keep {
                s.data_dir = Some(data.display().to_string());
            } else {
                let _ = std::fs::remove_dir_all(&data);
            }
            Ok(s)
        }
        Err(e) => Err(anyhow::anyhow!("{e:#} (logs kept in {})", data.display())),
    }
}

async fn inner(
    cfg: &ChaosConfig,
    net: &TestNet,
    data: &std::path::Path,
) -> anyhow::Result<Summary> {
    let proxies = proxy::Proxies::start(net, cfg.seed).context("starting the link proxies")?;
    let disks = disk::Disks::create(net, data).context("making the devices' disks")?;
    if let Some(why) = &disks.unavailable {
        println!("chaos: no disk-stall faults: {why}");
    }
    let mut cfgs = devices::configs(net, cfg.stores, cfg.devices.min(3), data, cfg.seed, true);
    let tls = if cfg.tls {
        Some(devices::secure(&mut cfgs, data)?)
    } else {
        None
    };
    let faketime = if cfg.clock_faults {
        clock::find()
    } else {
        Err("turned off (--no-clock)".to_string())
    };
    if let Err(why) = &faketime {
        println!("chaos: no clock faults: {why}");
    }
    let mut devices = Devices::start(
        &cfg.bin,
        net,
        &cfgs,
        tls,
        |id| disks.procs_file(id),
        faketime.clone().ok(),
    )?;
    devices
        .wait_ready(Duration::from_secs(60))
        .await
        .context("starting the cluster")?;
    let standing = if cfg.standing.any() {
        let s = standing::Standing::fill(devices.target(), &cfg.standing)
            .await
            .context("putting the standing state")?;
        println!(
            "chaos: standing state: {} objects put in {:.1} s, {} locks in {} sessions taken in {:.1} s",
            cfg.standing.objects, s.fill_s, cfg.standing.locks, cfg.standing.sessions, s.hold_s
        );
        s
    } else {
        standing::Standing::none()
    };
    let rec = Recorder::new(Instant::now());
    let mut rng = Rng::new(cfg.seed);
    let nemesis_rng = rng.fork();
    let names: Vec<String> = (0..cfg.names).map(|i| format!("/chaos{i}/lock")).collect();
    let wl = WorkloadConfig {
        names,
        period: cfg.name_period,
        stores: cfg.stores,
        ttl: cfg.ttl,
        acquire_wait: Duration::from_secs(3),
        hold_max: Duration::from_millis(300),
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let target = devices.target().clone();
    let workers: Vec<_> = (0..cfg.clients as u64)
        .map(|i| {
            tokio::spawn(workload::worker(
                i,
                target.clone(),
                wl.clone(),
                rec.clone(),
                rng.fork(),
                stop_rx.clone(),
            ))
        })
        .collect();
    // Object and lookup clients: ids from 100 and 200 (the final readers 150 and 250).
    let obj_keys = objects::keys(cfg.object_keys);
    let mut others: Vec<tokio::task::JoinHandle<anyhow::Result<()>>> = (0..cfg.object_clients
        as u64)
        .map(|i| {
            tokio::spawn(objects::worker(
                100 + i,
                target.clone(),
                obj_keys.clone(),
                cfg.stores,
                rec.clone(),
                rng.fork(),
                stop_rx.clone(),
            ))
        })
        .collect();
    let (persistent, volatile) = lookup::keys(cfg.lookup_keys);
    if cfg.lookup_keys > 0 {
        others.push(tokio::spawn(lookup::providers(
            200,
            target.clone(),
            persistent.clone(),
            volatile.clone(),
            rec.clone(),
            rng.fork(),
            stop_rx.clone(),
        )));
        others.push(tokio::spawn(lookup::reader(
            201,
            target.clone(),
            persistent.clone(),
            volatile.clone(),
            rec.clone(),
            rng.fork(),
            stop_rx.clone(),
        )));
    }

    // Phase 1: faults.
    let started = Instant::now();
    let lease = tenure_core::config::Timing::default().lease;
    let targets = nemesis::Targets {
        net,
        proxies: &proxies,
        disks: &disks,
        devices: &mut devices,
        rec: &rec,
    };
    let pace = nemesis::Pace {
        lease,
        ttl: cfg.ttl,
        fault_ms: cfg.fault_ms,
        gap_ms: cfg.gap_ms,
        only: cfg.only.clone(),
    };
    let nem = nemesis::run(targets, nemesis_rng, started + cfg.duration, pace).await;
    let fault_secs = started.elapsed().as_secs_f64();
    // Phase 2: heal, settle.
    net.heal()?;
    proxies.clear();
    disks.release_all();
    devices.reset_clocks();
    nem?;
    tokio::time::sleep(cfg.settle).await;

    // Phase 3: stop with locks held, full restart.
    let stop_us = rec.now();
    let _ = stop_tx.send(true);
    let mut held: Vec<HeldAtEnd> = Vec::new();
    for w in workers {
        match tokio::time::timeout(Duration::from_secs(60), w).await {
            Ok(Ok(Ok(Some(h)))) => held.push(h),
            Ok(Ok(Ok(None))) => {}
            Ok(Ok(Err(e))) => bail!("a client failed: {e:#}"),
            Ok(Err(e)) => bail!("a client panicked: {e}"),
            Err(_) => bail!("a client did not stop within 60 s"),
        }
    }
    for w in others {
        match tokio::time::timeout(Duration::from_secs(60), w).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => bail!("a client failed: {e:#}"),
            Ok(Err(e)) => bail!("a client panicked: {e}"),
            Err(_) => bail!("a client did not stop within 60 s"),
        }
    }
    let restart_at = Instant::now();
    for id in 1..=devices.len() as u64 {
        devices.kill(id)?;
    }
    for id in 1..=devices.len() as u64 {
        devices.spawn(id)?;
    }
    devices
        .wait_ready(Duration::from_secs(90))
        .await
        .context("full restart")?;
    // Serving, as a user sees it: every name's holders can be read.
    let names = wl.names_up_to(rec.now());
    let probe = target.client(ClientOptions::default())?;
    for name in names.iter().rev().take(cfg.names) {
        let _ = tokio::time::timeout(Duration::from_secs(60), probe.holders(name)).await;
    }
    let restart = restart_at.elapsed();
    let _ = probe.close().await;

    // Phase 4: every held lock's session confirmed alive after the restart, or ended.
    let drift = ClientOptions::default().clock_drift;
    let confirmed = |h: &HeldAtEnd| {
        let st = *h.guard.watch().borrow();
        st.expired || st.deadline > restart_at + cfg.ttl - drift
    };
    let wait_until = Instant::now() + cfg.ttl + Duration::from_secs(10);
    while !held.iter().all(confirmed) && Instant::now() < wait_until {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let final_read = read_holders(&rec, &target, &names, &held, cfg.clients as u64).await;
    let standing_checks = standing.check(&target, restart_at).await;
    standing.release().await;
    for h in held {
        let _ = tokio::time::timeout(Duration::from_secs(5), h.guard.release()).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), h.client.close()).await;
    }
    if cfg.object_clients > 0 {
        objects::final_reads(&rec, &target, &obj_keys, 150).await;
    }
    if cfg.lookup_keys > 0 {
        lookup::final_reads(&rec, &target, &persistent, &volatile, 250).await;
    }

    // Checks. The history goes beside the logs (kept when something failed, or with
    // `keep_data`) for a look at what the clients saw.
    let recorded = rec.snapshot();
    std::fs::write(data.join("history.json"), serde_json::to_vec(&recorded)?)?;
    let bound = check::SearchBound {
        steps: cfg.max_steps,
        deadline: None,
    };
    let check_time = cfg.check_time;
    let restart_us = rec.us(restart_at);
    let lookup_settings = cfgs.first().map(|c| c.lookup.clone()).unwrap_or_default();
    let r = recorded.clone();
    let checks = tokio::task::spawn_blocking(move || {
        let bound = check::SearchBound {
            deadline: Some(std::time::Instant::now() + check_time),
            ..bound
        };
        let mut c = check::run_checks(&r.ops, &r.holds, Some(&final_read), bound);
        if !r.objects.is_empty() {
            c.extend(objects::checks(
                &r.objects,
                &r.object_histories,
                Some(restart_us),
                bound,
            ));
        }
        if !r.lookups.is_empty() {
            c.extend(lookup::checks(&r.lookups, &r.faults, &lookup_settings));
        }
        c
    })
    .await?;
    let mut checks = checks;
    checks.extend(standing_checks);
    let (op_counts, fault_counts) = summary::counts(&recorded);
    let mut unavailable: std::collections::BTreeMap<String, String> = (disks.unavailable.iter())
        .map(|why| ("disk-stall".to_string(), why.clone()))
        .collect();
    if let Err(why) = &faketime {
        for kind in ["clock-step", "clock-drift"] {
            unavailable.insert(kind.to_string(), why.clone());
        }
    }
    let spans = summary::spans(&recorded);
    let steps = summary::clock_steps(&recorded, &spans, stop_us);
    Ok(Summary {
        seed: cfg.seed,
        devices: cfg.devices,
        tls: cfg.tls,
        clients: cfg.clients,
        fault_secs,
        ops: op_counts,
        faults: fault_counts,
        unavailable,
        unavailability: summary::unavailability(&spans, stop_us),
        recovery: summary::recovery(&spans, &recorded.faults),
        clock_steps: steps,
        reasons: summary::reasons(&recorded),
        fault_log: recorded.faults,
        checks,
        full_restart_ms: Some(restart.as_millis() as u64),
        data_dir: None,
    })
}

/// Read every name's holders after the full restart (recorded in the history too) and
/// note which held locks' sessions are known to live.
async fn read_holders(
    rec: &Recorder,
    target: &devices::Target,
    names: &[String],
    held: &[HeldAtEnd],
    reader: u64,
) -> FinalRead {
    let mut fr = FinalRead {
        at_us: rec.now(),
        ..Default::default()
    };
    let Ok(client) = target.client(ClientOptions::default()) else {
        return fr;
    };
    let stores = client.stores().await.unwrap_or(0);
    for name in names {
        let invoke = rec.now();
        if let Ok(Ok(st)) =
            tokio::time::timeout(Duration::from_secs(20), client.holders(name)).await
        {
            let h: Vec<(u64, FencingToken)> =
                st.holders.iter().map(|h| (h.session, h.token)).collect();
            rec.op(Op {
                client: reader,
                kind: OpKind::Holders,
                name: name.clone(),
                store: tenure_core::config::store_of(name, stores).0,
                session: 0,
                invoke_us: invoke,
                response_us: Some(rec.now()),
                outcome: Outcome::Holders(h.clone()),
            });
            fr.holders.insert(name.clone(), h);
        }
    }
    // Sessions alive throughout the reads: deadline still ahead after them.
    let now = Instant::now();
    for h in held {
        let st = *h.guard.watch().borrow();
        if !st.expired && st.deadline > now {
            fr.live
                .insert((h.guard.store(), h.guard.session()), rec.us(st.deadline));
        }
    }
    let _ = client.close().await;
    fr
}
