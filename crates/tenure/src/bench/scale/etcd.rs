//! `bench scale --system etcd`: the same shapes against three etcd members started here.
//!
//! Objects are `Put`s. A session is a lease (TTL `--ttl-secs`) kept alive every third of
//! its TTL by its own client loop, which, as etcd's clientv3 does, moves to another member
//! when one fails; a lock is the lock recipe's `Txn` (the key's create revision is 0, then
//! put the key under the lease). The killed member is the leader (`Maintenance.Status`).

use super::peers::{Member, Members, free_ports, wait_until, watch_failover};
use super::{
    Errors, Failover, FillCounters, Memory, Report, ScaleArgs, lock_names, locks_of, progress,
    put_all, watch_fill,
};
use crate::bench::lookup::{etcd, etcd_connect};
use etcd::compare::{CompareResult, CompareTarget, TargetUnion};
use etcd::kv_client::KvClient;
use etcd::lease_client::LeaseClient;
use etcd::maintenance_client::MaintenanceClient;
use futures::StreamExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// Start three members, wait until they have a leader.
async fn start(a: &ScaleArgs) -> anyhow::Result<Members> {
    let (root, remove) = Members::root(a.peer_data.as_deref(), "etcd")?;
    let ports = free_ports(6)?;
    let peers: Vec<String> = (0..3)
        .map(|i| format!("m{}=http://127.0.0.1:{}", i + 1, ports[2 * i + 1]))
        .collect();
    let members = (0..3)
        .map(|i| {
            let (client, peer) = (ports[2 * i], ports[2 * i + 1]);
            let dir = root.join(format!("m{}", i + 1));
            Member::new(dir.clone(), format!("127.0.0.1:{client}"), &a.etcd_bin)
                .arg(format!("--name=m{}", i + 1))
                .arg(format!("--data-dir={}", dir.join("data").display()))
                .arg(format!("--listen-client-urls=http://127.0.0.1:{client}"))
                .arg(format!("--advertise-client-urls=http://127.0.0.1:{client}"))
                .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
                .arg(format!(
                    "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
                ))
                .arg(format!("--initial-cluster={}", peers.join(",")))
                .arg(format!(
                    "--initial-cluster-token=bench-{}",
                    std::process::id()
                ))
                .arg("--initial-cluster-state=new")
                .arg("--log-level=warn")
        })
        .collect();
    let mut m = Members::new(root, remove, members);
    m.start_all()?;
    let clients = m.clients();
    wait_until(Duration::from_secs(60), "etcd", || {
        let clients = clients.clone();
        async move {
            for c in &clients {
                if status(c).await.is_none_or(|(_, leader)| leader == 0) {
                    return false;
                }
            }
            true
        }
    })
    .await?;
    eprintln!(
        "etcd: 3 members at {} (fsync on: the default)",
        clients.join(",")
    );
    Ok(m)
}

/// A member's (id, leader id), or `None` when it does not answer within a second.
async fn status(client: &str) -> Option<(u64, u64)> {
    let go = async {
        let mut m = MaintenanceClient::new(etcd_connect(client).await.ok()?);
        let r = m.status(etcd::StatusRequest {}).await.ok()?.into_inner();
        Some((r.header?.member_id, r.leader))
    };
    tokio::time::timeout(Duration::from_secs(1), go)
        .await
        .ok()
        .flatten()
}

/// One channel to each member.
async fn channels(m: &Members) -> anyhow::Result<Vec<Channel>> {
    let mut out = Vec::new();
    for c in m.clients() {
        out.push(etcd_connect(&c).await?);
    }
    Ok(out)
}

pub(super) async fn bench(a: &ScaleArgs) -> anyhow::Result<Report> {
    let mut m = start(a).await?;
    let mut report = Report::new(a);
    report.before = m.footprints();
    let chans = channels(&m).await?;
    // Phase 1: puts, clients spread over the members as clientv3 spreads them.
    if a.objects > 0 {
        let counters = Arc::new(FillCounters::default());
        let value = vec![b'v'; a.size];
        let mut tasks = Vec::new();
        for c in 0..a.clients as usize {
            let kv = KvClient::new(chans[c % chans.len()].clone());
            let (counters, value) = (counters.clone(), value.clone());
            let (n, prefixes) = (a.objects, a.prefixes);
            tasks.push(tokio::spawn(async move {
                put_all(&counters, n, prefixes, |key| {
                    let (mut kv, value) = (kv.clone(), value.clone());
                    async move {
                        kv.put(etcd::PutRequest {
                            key: key.into_bytes(),
                            value,
                            ..Default::default()
                        })
                        .await
                        .map(|_| ())
                    }
                })
                .await;
            }));
        }
        watch_fill(a, &counters, &|| m.footprints(), tasks, &mut report).await?;
    }
    // Phase 2: leases and locks.
    let sessions = hold(a, &chans, &mut report).await?;
    report.after_hold = m.footprints();
    report.memory = Memory::measure(&report);
    if !a.no_kill {
        report.failover = Some(kill(a, &mut m, &chans, &sessions, report.locks_held).await?);
    }
    for s in &sessions {
        s.keeper.abort();
    }
    Ok(report)
}

/// A lease, its keep-alive loop and whether etcd said it expired.
struct Session {
    id: i64,
    expired: Arc<AtomicBool>,
    keeper: tokio::task::JoinHandle<()>,
}

async fn hold(
    a: &ScaleArgs,
    chans: &[Channel],
    report: &mut Report,
) -> anyhow::Result<Vec<Session>> {
    if a.locks == 0 {
        return Ok(Vec::new());
    }
    let bar = progress(a.json, a.locks, "hold");
    let started = Instant::now();
    let errors = Arc::new(Errors::default());
    let taken = Arc::new(AtomicU64::new(0));
    let ttl = a.ttl_secs.max(2) as i64;
    let gate = Arc::new(tokio::sync::Semaphore::new(a.inflight.max(1)));
    let mut tasks = Vec::new();
    for s in 0..a.sessions {
        let ch = chans[s as usize % chans.len()].clone();
        let names = lock_names(s, locks_of(s, a.locks, a.sessions), a.prefixes);
        let (errors, taken, bar, gate) = (errors.clone(), taken.clone(), bar.clone(), gate.clone());
        let all = chans.to_vec();
        tasks.push(tokio::spawn(async move {
            let id = LeaseClient::new(ch.clone())
                .lease_grant(etcd::LeaseGrantRequest { ttl, id: 0 })
                .await?
                .into_inner()
                .id;
            let expired = Arc::new(AtomicBool::new(false));
            let keeper = tokio::spawn(keep_alive(all, s as usize, id, ttl, expired.clone()));
            let kv = KvClient::new(ch);
            futures::stream::iter(names)
                .for_each_concurrent(16, |n| {
                    let (mut kv, errors, taken, bar, gate) = (
                        kv.clone(),
                        errors.clone(),
                        taken.clone(),
                        bar.clone(),
                        gate.clone(),
                    );
                    async move {
                        let _turn = gate.acquire().await;
                        // Tried again after an error, as clientv3's retrying client does
                        // (etcd pushes back with "too many requests" when its apply lags).
                        for tries in 1..=5 {
                            match kv.txn(lock_txn(&n, id)).await {
                                Ok(r) if mine(r.get_ref(), id) => {
                                    bar.set_position(taken.fetch_add(1, Ordering::Relaxed) + 1);
                                    return;
                                }
                                Ok(_) => {
                                    errors.record(&format!("lock {n}"), "held by another lease");
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
            anyhow::Ok(Session {
                id,
                expired,
                keeper,
            })
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

/// The lock recipe's acquire (clientv3 `concurrency.Mutex`): if the key was never
/// created, put it under the session's lease.
fn lock_txn(name: &str, lease: i64) -> etcd::TxnRequest {
    etcd::TxnRequest {
        compare: vec![etcd::Compare {
            result: CompareResult::Equal as i32,
            target: CompareTarget::Create as i32,
            key: name.as_bytes().to_vec(),
            target_union: Some(TargetUnion::CreateRevision(0)),
            range_end: Vec::new(),
        }],
        success: vec![etcd::RequestOp {
            request: Some(etcd::request_op::Request::RequestPut(etcd::PutRequest {
                key: name.as_bytes().to_vec(),
                lease,
                ..Default::default()
            })),
        }],
        failure: vec![etcd::RequestOp {
            request: Some(etcd::request_op::Request::RequestRange(
                etcd::RangeRequest {
                    key: name.as_bytes().to_vec(),
                    ..Default::default()
                },
            )),
        }],
    }
}

/// Whether the lock transaction left the lock with `lease`: it put the key, or the key
/// was there already under this lease (an earlier try that answered too late).
fn mine(r: &etcd::TxnResponse, lease: i64) -> bool {
    r.succeeded
        || r.responses.iter().any(|op| match &op.response {
            Some(etcd::response_op::Response::ResponseRange(rr)) => {
                rr.kvs.iter().any(|kv| kv.lease == lease)
            }
            _ => false,
        })
}

/// Renew lease `id` every third of its TTL, through member `first` and, when one fails,
/// the next (clientv3 moves to another endpoint too); stop once etcd says it expired.
async fn keep_alive(
    chans: Vec<Channel>,
    first: usize,
    id: i64,
    ttl: i64,
    expired: Arc<AtomicBool>,
) {
    let at = AtomicUsize::new(first);
    let every = Duration::from_millis(ttl as u64 * 1000 / 3);
    loop {
        tokio::time::sleep(every).await;
        let deadline = Instant::now() + every;
        loop {
            let ch = chans[at.load(Ordering::Relaxed) % chans.len()].clone();
            let once = async {
                let req = futures::stream::iter([etcd::LeaseKeepAliveRequest { id }])
                    .chain(futures::stream::pending());
                let mut answers = LeaseClient::new(ch)
                    .lease_keep_alive(req)
                    .await?
                    .into_inner();
                match answers.next().await {
                    Some(r) => Ok(r?.ttl),
                    None => Err(tonic::Status::unavailable("no answer")),
                }
            };
            match tokio::time::timeout(Duration::from_secs(1), once).await {
                Ok(Ok(left)) if left <= 0 => {
                    expired.store(true, Ordering::Relaxed);
                    return;
                }
                Ok(Ok(_)) => break,
                _ => {
                    at.fetch_add(1, Ordering::Relaxed);
                    if Instant::now() > deadline {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

/// Phase 3 and 4: kill the leader, watch, start it again.
async fn kill(
    a: &ScaleArgs,
    m: &mut Members,
    chans: &[Channel],
    sessions: &[Session],
    acquired: u64,
) -> anyhow::Result<Failover> {
    let clients = m.clients();
    let mut ids = Vec::new();
    for c in &clients {
        ids.push(
            status(c)
                .await
                .ok_or_else(|| anyhow::anyhow!("etcd at {c} does not answer"))?,
        );
    }
    let leader = ids[0].1;
    let i = ids
        .iter()
        .position(|(id, _)| *id == leader)
        .ok_or_else(|| anyhow::anyhow!("no member is the leader"))?;
    let mut out = Failover {
        killed: i as u64 + 1,
        ..Default::default()
    };
    m.members[i].kill()?;
    let t0 = Instant::now();
    eprintln!("killed etcd member {} (the leader)", i + 1);
    let survivors: Vec<usize> = (0..3).filter(|j| *j != i).collect();
    (out.first_grant_s, out.all_managed_s) = watch_failover(
        t0,
        Duration::from_secs(a.watch_secs),
        |k| {
            let mut kv = KvClient::new(chans[survivors[(k % 2) as usize]].clone());
            async move {
                let put = etcd::PutRequest {
                    key: format!("/scaleprobe{k}").into_bytes(),
                    ..Default::default()
                };
                kv.put(put).await.is_ok()
            }
        },
        || async {
            for j in &survivors {
                if let Some((_, l)) = status(&clients[*j]).await
                    && l != 0
                    && l != leader
                {
                    return true;
                }
            }
            false
        },
    )
    .await;
    // What is left: lock keys still there, leases etcd still keeps.
    let j = survivors[0];
    let count = KvClient::new(chans[j].clone())
        .range(etcd::RangeRequest {
            key: b"/scalelock".to_vec(),
            range_end: b"/scalelocl".to_vec(),
            count_only: true,
            ..Default::default()
        })
        .await?
        .into_inner()
        .count as u64;
    out.locks_lost = acquired.saturating_sub(count);
    let mut lease = LeaseClient::new(chans[j].clone());
    for s in sessions {
        let ttl = lease
            .lease_time_to_live(etcd::LeaseTimeToLiveRequest {
                id: s.id,
                keys: false,
            })
            .await
            .map(|r| r.into_inner().ttl)
            .unwrap_or(-1);
        if ttl < 0 || s.expired.load(Ordering::Relaxed) {
            out.sessions_expired += 1;
        }
    }
    // Restart it, and wait until it answers a linearizable read.
    out.restart_s = m
        .restart(i, |me| async move {
            let Ok(ch) = etcd_connect(&me).await else {
                return false;
            };
            let mut kv = KvClient::new(ch);
            let get = kv.range(etcd::RangeRequest {
                key: b"/scaleprobe1".to_vec(),
                ..Default::default()
            });
            matches!(
                tokio::time::timeout(Duration::from_secs(1), get).await,
                Ok(Ok(_))
            )
        })
        .await?;
    Ok(out)
}
