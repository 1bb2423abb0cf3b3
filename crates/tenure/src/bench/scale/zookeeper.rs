//! `bench scale --system zookeeper`: the same shapes against three ZooKeeper servers
//! started here.
//!
//! Objects are persistent znodes. A session is a ZooKeeper session (timeout `--ttl-secs`)
//! of its own client, which pings and moves to another server by itself; a lock is an
//! ephemeral znode of the session (what the lock recipe leaves while a lock is held). The
//! killed server is the leader (the `srvr` four-letter word's `Mode: leader`).

use super::peers::{Member, Members, free_ports, wait_until, watch_failover};
use super::{
    Errors, Failover, FillCounters, Memory, Report, ScaleArgs, lock_names, locks_of, progress,
    put_all, watch_fill,
};
use futures::StreamExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zookeeper_client as zk;

/// Start three servers, wait until each is a leader or a follower.
async fn start(a: &ScaleArgs) -> anyhow::Result<Members> {
    anyhow::ensure!(
        a.zk_server.exists(),
        "no ZooKeeper server script at {} (Debian: apt-get install zookeeper; or --zk-server)",
        a.zk_server.display()
    );
    let (root, remove) = Members::root(a.peer_data.as_deref(), "zookeeper")?;
    let ports = free_ports(9)?;
    let servers: Vec<String> = (0..3)
        .map(|i| {
            format!(
                "server.{}=127.0.0.1:{}:{}",
                i + 1,
                ports[3 * i + 1],
                ports[3 * i + 2]
            )
        })
        .collect();
    let mut members = Vec::new();
    for i in 0..3 {
        let dir = root.join(format!("m{}", i + 1));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("myid"), format!("{}\n", i + 1))?;
        let cfg = dir.join("zoo.cfg");
        let mut text = format!(
            "tickTime=2000\ninitLimit=10\nsyncLimit=5\ndataDir={}\nclientPort={}\n\
             clientPortAddress=127.0.0.1\nmaxClientCnxns=0\nadmin.enableServer=false\n\
             4lw.commands.whitelist=srvr,ruok\nforceSync=yes\nmaxSessionTimeout={}\n",
            dir.display(),
            ports[3 * i],
            (a.ttl_secs.max(4) * 1000).max(40_000),
        );
        for s in &servers {
            text.push_str(s);
            text.push('\n');
        }
        std::fs::write(&cfg, text)?;
        // The Debian package's script: start-foreground execs java, so the child is the
        // JVM itself (its RSS is the server's, and SIGKILL reaches it).
        members.push(
            Member::new(
                dir.clone(),
                format!("127.0.0.1:{}", ports[3 * i]),
                &a.zk_server,
            )
            .arg("start-foreground")
            .arg(cfg.display().to_string())
            .env("JMXDISABLE", "true")
            .env(
                "ZOOPIDFILE",
                dir.join("zookeeper_server.pid").display().to_string(),
            )
            .env(
                "JVMFLAGS",
                format!(
                    "{} -Dzookeeper.root.logger=WARN,CONSOLE -Dzookeeper.console.threshold=WARN",
                    a.zk_jvm_flags
                ),
            ),
        );
    }
    let mut m = Members::new(root, remove, members);
    m.start_all()?;
    let clients = m.clients();
    wait_until(Duration::from_secs(90), "zookeeper", || {
        let clients = clients.clone();
        async move {
            for c in &clients {
                if mode(c).await.is_none() {
                    return false;
                }
            }
            true
        }
    })
    .await?;
    eprintln!(
        "zookeeper: 3 servers at {} (forceSync=yes: the default)",
        clients.join(",")
    );
    Ok(m)
}

/// The server's `Mode` (`leader`, `follower`), from the `srvr` four-letter word.
async fn mode(client: &str) -> Option<String> {
    let go = async {
        let mut s = tokio::net::TcpStream::connect(client).await.ok()?;
        s.write_all(b"srvr").await.ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).await.ok()?;
        out.lines()
            .find_map(|l| l.strip_prefix("Mode: "))
            .map(str::to_string)
            .filter(|m| m == "leader" || m == "follower")
    };
    tokio::time::timeout(Duration::from_secs(1), go)
        .await
        .ok()
        .flatten()
}

fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

fn ephemeral() -> zk::CreateOptions<'static> {
    zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all())
}

async fn connect(cluster: &str, ttl: Duration) -> anyhow::Result<zk::Client> {
    Ok(zk::Client::connector()
        .with_session_timeout(ttl)
        .connect(cluster)
        .await?)
}

pub(super) async fn bench(a: &ScaleArgs) -> anyhow::Result<Report> {
    let mut m = start(a).await?;
    let cluster = m.clients().join(",");
    let mut report = Report::new(a);
    report.before = m.footprints();
    let ttl = Duration::from_secs(a.ttl_secs.max(4));
    // Phase 1: persistent znodes under `/scale<p>` (made first).
    if a.objects > 0 {
        let admin = connect(&cluster, ttl).await?;
        for p in 0..a.prefixes.min(a.objects) {
            admin.mkdir(&format!("/scale{p}"), &persistent()).await?;
        }
        let counters = Arc::new(FillCounters::default());
        let value = vec![b'v'; a.size];
        // Every client connected before the first put, so the first tenth's rate is puts'.
        let mut conns = Vec::new();
        for _ in 0..a.clients {
            conns.push(connect(&cluster, ttl).await?);
        }
        let mut tasks = Vec::new();
        for c in conns {
            let (counters, value) = (counters.clone(), value.clone());
            let (n, prefixes) = (a.objects, a.prefixes);
            tasks.push(tokio::spawn(async move {
                put_all(&counters, n, prefixes, |key| {
                    let (c, value) = (&c, &value);
                    async move { c.create(&key, value, &persistent()).await.map(|_| ()) }
                })
                .await;
            }));
        }
        watch_fill(a, &counters, &|| m.footprints(), tasks, &mut report).await?;
    }
    // Phase 2: sessions and their ephemeral znodes.
    let sessions = hold(a, &cluster, ttl, &mut report).await?;
    report.after_hold = m.footprints();
    report.memory = Memory::measure(&report);
    if !a.no_kill {
        report.failover = Some(kill(a, &mut m, &cluster, &sessions, report.locks_held).await?);
    }
    Ok(report)
}

/// A session's client and the parent of its locks.
struct Session {
    client: zk::Client,
    parent: String,
}

async fn hold(
    a: &ScaleArgs,
    cluster: &str,
    ttl: Duration,
    report: &mut Report,
) -> anyhow::Result<Vec<Session>> {
    if a.locks == 0 {
        return Ok(Vec::new());
    }
    let bar = progress(a.json, a.locks, "hold");
    let started = Instant::now();
    let errors = Arc::new(Errors::default());
    let taken = Arc::new(AtomicU64::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(a.inflight.max(1)));
    let mut tasks = Vec::new();
    for s in 0..a.sessions {
        let names = lock_names(s, locks_of(s, a.locks, a.sessions), a.prefixes);
        let parent = format!("/scalelock{}/c{s}", s % a.prefixes);
        let (errors, taken, bar, gate) = (errors.clone(), taken.clone(), bar.clone(), gate.clone());
        let cluster = cluster.to_string();
        tasks.push(tokio::spawn(async move {
            let client = connect(&cluster, ttl).await?;
            client.mkdir(&parent, &persistent()).await?;
            futures::stream::iter(names)
                .for_each_concurrent(16, |n| {
                    let (client, errors, taken, bar, gate) = (
                        &client,
                        errors.clone(),
                        taken.clone(),
                        bar.clone(),
                        gate.clone(),
                    );
                    async move {
                        let _turn = gate.acquire().await;
                        // Tried again after an error; a node already there from an earlier
                        // try that answered too late is this session's own.
                        for tries in 1..=5u64 {
                            let r = match client.create(&n, &[], &ephemeral()).await {
                                Err(zk::Error::NodeExists) if tries > 1 => {
                                    match client.check_stat(&n).await {
                                        Ok(Some(st))
                                            if st.ephemeral_owner == client.session_id().0 =>
                                        {
                                            Ok(())
                                        }
                                        _ => Err(zk::Error::NodeExists),
                                    }
                                }
                                r => r.map(|_| ()),
                            };
                            match r {
                                Ok(()) => {
                                    bar.set_position(taken.fetch_add(1, Ordering::Relaxed) + 1);
                                    return;
                                }
                                Err(e) => {
                                    errors.record(&format!("lock {n} (try {tries} of 5)"), e);
                                    tokio::time::sleep(Duration::from_millis(50 * tries)).await;
                                }
                            }
                        }
                    }
                })
                .await;
            anyhow::Ok(Session { client, parent })
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await??);
    }
    bar.finish_and_clear();
    report.hold_s = started.elapsed().as_secs_f64();
    report.locks_held = taken.load(Ordering::Relaxed);
    report.hold_errors = errors.count();
    report.hold_error = errors.first();
    Ok(out)
}

/// Phase 3 and 4: kill the leader, watch, start it again.
async fn kill(
    a: &ScaleArgs,
    m: &mut Members,
    cluster: &str,
    sessions: &[Session],
    acquired: u64,
) -> anyhow::Result<Failover> {
    let clients = m.clients();
    let mut i = None;
    for (j, c) in clients.iter().enumerate() {
        if mode(c).await.as_deref() == Some("leader") {
            i = Some(j);
        }
    }
    let i = i.ok_or_else(|| anyhow::anyhow!("no ZooKeeper server says it is the leader"))?;
    let prober = connect(cluster, Duration::from_secs(a.ttl_secs.max(4))).await?;
    let mut out = Failover {
        killed: i as u64 + 1,
        ..Default::default()
    };
    m.members[i].kill()?;
    let t0 = Instant::now();
    eprintln!("killed ZooKeeper server {} (the leader)", i + 1);
    let survivors: Vec<usize> = (0..3).filter(|j| *j != i).collect();
    (out.first_grant_s, out.all_managed_s) = watch_failover(
        t0,
        Duration::from_secs(a.watch_secs),
        |k| {
            let prober = &prober;
            async move {
                let path = format!("/scaleprobe{k}");
                prober.create(&path, &[], &persistent()).await.is_ok()
            }
        },
        || async {
            for j in &survivors {
                if mode(&clients[*j]).await.as_deref() == Some("leader") {
                    return true;
                }
            }
            false
        },
    )
    .await;
    // What is left: each session's ephemeral znodes, and its state.
    let mut held = 0u64;
    for s in sessions {
        if s.client.state() == zk::SessionState::Expired {
            out.sessions_expired += 1;
        }
        held += prober
            .count_descendants_number(&s.parent)
            .await
            .unwrap_or(0) as u64;
    }
    out.locks_lost = acquired.saturating_sub(held);
    out.restart_s = m
        .restart(i, |me| async move { mode(&me).await.is_some() })
        .await?;
    Ok(out)
}
