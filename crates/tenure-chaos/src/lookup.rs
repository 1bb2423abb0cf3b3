//! The lookup service under faults (seed 003, DESIGN §7): providers publishing
//! persistent and volatile entries, a reader asking the leader for them, every operation
//! recorded; after the full restart every key is read again. The checks reuse the
//! simulator's [`Truth`] (a key's true state over real time, and an answer's staleness)
//! and its [`LookupViolation`]s:
//!
//! - **acknowledged persistent entries kept**: a get issued after the leader acknowledged
//!   version `v` of a persistent entry answers `v` or a newer version — through
//!   failovers, faults and the full restart — unless the provider's last acknowledged
//!   refresh is older than the entry's lifetime (then it may be gone, but never older).
//!   While a fault separates nodes, and for [`converge`] after it ends, an older answer
//!   is the seed's own behaviour, not a loss: a leader cut off (isolated, paused, behind
//!   a one-way link) keeps leading its side — seed 003's weak leader — and a client that
//!   reaches it directly reads what that side has, until the heal brings the nodes back
//!   into its soft-state store and it takes their persistent stores in;
//! - **volatile entries gone within their bound**: once a volatile provider stops
//!   refreshing, no get issued later than the bound after that answers its value. The
//!   bound is the entry's lifetime (two intervals and a round trip), a round trip and a
//!   second of slack for this machine, plus how long faults could hold the last refresh
//!   back: the length (and a second) of every fault overlapping the time from a lifetime
//!   before the stop to the query — a paused or partitioned node receives a refresh late
//!   (TCP delivers it after the partition heals) and counts the lifetime from then;
//! - **no answer its provider never published**: every value answered was published for
//!   that key before the answer.
//!
//! Each publish writes a value of its own. A persistent provider publishes each new value
//! with a new handle (after abandoning the last one: dropping a handle revokes), so every
//! acknowledgement is one recorded operation; a volatile provider publishes, keeps the
//! entry refreshed for a while, abandons it, and later starts again with a new value.

use crate::check::CheckResult;
use crate::devices::Target;
use crate::history::{Fault, LookupKind, LookupOp, LookupOutcome, Recorder};
use std::collections::BTreeMap;
use std::time::Duration;
use tenure_client::lookup::{LookupError, PublishHandle, PublishOptions};
use tenure_client::{Client, ClientOptions, Error};
use tenure_core::lookup::{Durability, EntryVersion, LookupSettings};
use tenure_core::rng::Rng;
use tenure_sim::lookup::checks::LookupViolation;
use tenure_sim::lookup::truth::{Staleness, Truth};
use tokio::sync::watch;

/// A client gives up on a lookup call after this long.
const CALL_LIMIT: Duration = Duration::from_secs(15);
/// Refresh interval of the persistent entries: each is published again long before.
pub const PERSISTENT_INTERVAL: Duration = Duration::from_secs(60);
/// Refresh interval of the volatile entries.
pub const VOLATILE_INTERVAL: Duration = Duration::from_millis(500);
/// Slack of the volatile bound for this machine's scheduling (two cores, many processes).
const SLACK: Duration = Duration::from_secs(1);

/// The lookup keys of a run: persistent ones, then volatile ones.
pub fn keys(n: usize) -> (Vec<String>, Vec<String>) {
    let n = n.max(1);
    (
        (0..n).map(|i| format!("/chaos/lookup/p{i}")).collect(),
        (0..n).map(|i| format!("/chaos/lookup/v{i}")).collect(),
    )
}

fn new_client(target: &Target, name: String) -> anyhow::Result<Client> {
    let opts = ClientOptions {
        client_name: name,
        ..Default::default()
    };
    Ok(target.client(opts)?)
}

fn version(v: EntryVersion) -> (u64, u64) {
    (v.stamp, v.provider)
}

struct Provider {
    idx: u64,
    rec: Recorder,
    client: Client,
    seq: u64,
}

impl Provider {
    fn op(&self, kind: LookupKind, key: &str, persistent: bool, value: Option<String>) -> LookupOp {
        let interval = if persistent {
            PERSISTENT_INTERVAL
        } else {
            VOLATILE_INTERVAL
        };
        LookupOp {
            client: self.idx,
            kind,
            key: key.to_string(),
            persistent,
            interval_ms: interval.as_millis() as u64,
            value,
            invoke_us: self.rec.now(),
            response_us: None,
            outcome: LookupOutcome::Stopped,
        }
    }

    fn done(&self, mut op: LookupOp, outcome: LookupOutcome) {
        if !matches!(outcome, LookupOutcome::Unknown(_)) {
            op.response_us = Some(self.rec.now());
        }
        op.outcome = outcome;
        self.rec.lookup(op);
    }

    /// Publish a new value of `key`; the handle if it was acknowledged (persistent) or
    /// sent (volatile).
    async fn publish(&mut self, key: &str, persistent: bool) -> Option<PublishHandle> {
        self.seq += 1;
        let value = format!("c{}-{}", self.idx, self.seq);
        let op = self.op(LookupKind::Publish, key, persistent, Some(value.clone()));
        let opts = if persistent {
            PublishOptions::persistent(PERSISTENT_INTERVAL)
        } else {
            PublishOptions::volatile(VOLATILE_INTERVAL)
        };
        let call = self.client.publish(key, value, opts);
        match tokio::time::timeout(CALL_LIMIT, call).await {
            Ok(Ok(h)) => {
                let v = version(h.version());
                self.done(op, LookupOutcome::Published { version: v });
                Some(h)
            }
            Ok(Err(e)) => {
                self.done(op, LookupOutcome::Unknown(e.to_string()));
                None
            }
            Err(_) => {
                self.done(
                    op,
                    LookupOutcome::Unknown(format!("no answer in {CALL_LIMIT:?}")),
                );
                None
            }
        }
    }

    /// The volatile provider of `key` stopped refreshing (`h`, if it had a handle).
    async fn stop(&self, key: &str, h: Option<PublishHandle>) {
        let op = self.op(LookupKind::Stop, key, false, None);
        if let Some(h) = h {
            h.abandon().await;
        }
        self.done(op, LookupOutcome::Stopped);
    }
}

/// Run the providers (client `idx`): a new persistent value every 0.5–1.5 s on one of
/// `persistent`, and volatile entries on `volatile` that live 1–4 s, then stop for
/// 1–3 s. When `stop` turns true every handle is abandoned, not revoked: the persistent
/// entries must survive the full restart.
pub async fn providers(
    idx: u64,
    target: Target,
    persistent: Vec<String>,
    volatile: Vec<String>,
    rec: Recorder,
    mut rng: Rng,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let client = new_client(&target, format!("chaos-lookup-{idx}"))?;
    let mut p = Provider {
        idx,
        rec,
        client,
        seq: 0,
    };
    let mut held: BTreeMap<String, PublishHandle> = BTreeMap::new();
    // Volatile keys: when each changes next (start or stop), and its handle.
    let now = tokio::time::Instant::now();
    let mut next: BTreeMap<String, tokio::time::Instant> =
        volatile.iter().map(|k| (k.clone(), now)).collect();
    let mut live: BTreeMap<String, Option<PublishHandle>> = BTreeMap::new();
    let mut next_persistent = now;
    while !*stop.borrow() {
        let now = tokio::time::Instant::now();
        if now >= next_persistent {
            let key = &persistent[rng.below(persistent.len() as u64) as usize];
            if let Some(old) = held.remove(key) {
                old.abandon().await;
            }
            if let Some(h) = p.publish(key, true).await {
                held.insert(key.clone(), h);
            }
            next_persistent =
                tokio::time::Instant::now() + Duration::from_millis(500 + rng.below(1001));
        }
        for key in &volatile {
            if tokio::time::Instant::now() < next[key] {
                continue;
            }
            let wait = match live.remove(key) {
                Some(h) => {
                    p.stop(key, h).await;
                    1000 + rng.below(2001)
                }
                None => {
                    let h = p.publish(key, false).await;
                    live.insert(key.clone(), h);
                    1000 + rng.below(3001)
                }
            };
            next.insert(
                key.clone(),
                tokio::time::Instant::now() + Duration::from_millis(wait),
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for (key, h) in live {
        p.stop(&key, h).await;
    }
    for (_, h) in held {
        h.abandon().await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), p.client.close()).await;
    Ok(())
}

/// One get from the leader, as the history keeps it.
async fn get(client: &Client, key: &str) -> LookupOutcome {
    match tokio::time::timeout(CALL_LIMIT, client.get_from_leader(key)).await {
        Ok(Ok((entry, leader))) => LookupOutcome::Found {
            entry: entry.map(|e| {
                (
                    String::from_utf8_lossy(&e.value).into_owned(),
                    version(e.version),
                )
            }),
            leader: leader.device.0,
        },
        Ok(Err(Error::Lookup(LookupError::NoLeader))) => LookupOutcome::Fail("no leader".into()),
        Ok(Err(e)) => LookupOutcome::Fail(e.to_string()),
        Err(_) => LookupOutcome::Fail(format!("no answer in {CALL_LIMIT:?}")),
    }
}

/// Read the keys (client `idx`), one at a time in random order, until `stop`.
pub async fn reader(
    idx: u64,
    target: Target,
    persistent: Vec<String>,
    volatile: Vec<String>,
    rec: Recorder,
    mut rng: Rng,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let client = new_client(&target, format!("chaos-lookup-reader-{idx}"))?;
    let keys: Vec<(String, bool)> = (persistent.iter().map(|k| (k.clone(), true)))
        .chain(volatile.iter().map(|k| (k.clone(), false)))
        .collect();
    while !*stop.borrow() {
        let (key, persistent) = &keys[rng.below(keys.len() as u64) as usize];
        read(&client, &rec, idx, key, *persistent).await;
        tokio::time::sleep(Duration::from_millis(100 + rng.below(200))).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), client.close()).await;
    Ok(())
}

async fn read(client: &Client, rec: &Recorder, idx: u64, key: &str, persistent: bool) {
    let interval = if persistent {
        PERSISTENT_INTERVAL
    } else {
        VOLATILE_INTERVAL
    };
    let invoke_us = rec.now();
    let outcome = get(client, key).await;
    rec.lookup(LookupOp {
        client: idx,
        kind: LookupKind::Get,
        key: key.to_string(),
        persistent,
        interval_ms: interval.as_millis() as u64,
        value: None,
        invoke_us,
        response_us: Some(rec.now()),
        outcome,
    });
}

/// After the full restart: read every key once (client `idx`).
pub async fn final_reads(
    rec: &Recorder,
    target: &Target,
    persistent: &[String],
    volatile: &[String],
    idx: u64,
) {
    let Ok(client) = new_client(target, "chaos-lookup-final".into()) else {
        return;
    };
    for k in persistent {
        read(&client, rec, idx, k, true).await;
    }
    for k in volatile {
        read(&client, rec, idx, k, false).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), client.close()).await;
}

/// A persistent publish the leader acknowledged.
struct Ack {
    /// When the acknowledgement arrived (µs).
    at_us: u64,
    /// The version acknowledged (stamp, provider).
    version: (u64, u64),
    /// When the publish was sent (µs).
    sent_us: u64,
    /// Its refresh interval (ms).
    interval_ms: u64,
}

/// How long faults overlapping `[from, to]` could have held a message back (µs): each
/// one's length and a second.
fn held_back(faults: &[Fault], from: u64, to: u64, end_us: u64) -> u64 {
    (faults.iter())
        .filter(|f| f.start_us <= to && f.end_us.unwrap_or(end_us) >= from)
        .map(|f| f.end_us.unwrap_or(end_us).saturating_sub(f.start_us) + 1_000_000)
        .sum()
}

/// How long after a fault ends a leader that was cut off may still answer from its own
/// persistent store: the nodes see each other again (the peer transport redials within
/// its largest backoff, 1 s, and a node is down or back within three heartbeats), and
/// it asks them for their stores (two round trips, one retry) and holds queries meanwhile.
fn converge(settings: &LookupSettings) -> Duration {
    const REDIAL: Duration = Duration::from_secs(1);
    settings.heartbeat_interval * 3 + REDIAL + settings.roundtrip_delay * 2
}

/// Whether some fault overlapping `[from, to]` ends less than `within` before `to` (or
/// has not ended).
fn recent_fault(faults: &[Fault], from: u64, to: u64, within: u64) -> bool {
    (faults.iter()).any(|f| {
        let end = f.end_us.unwrap_or(u64::MAX);
        f.start_us <= to && end >= from && to <= end.saturating_add(within)
    })
}

fn us(d: Duration) -> u64 {
    d.as_micros() as u64
}

/// The lookup checks on a run's lookup operations, under `faults`, for devices running
/// `settings`.
pub fn checks(ops: &[LookupOp], faults: &[Fault], settings: &LookupSettings) -> Vec<CheckResult> {
    let end_us = (ops.iter())
        .map(|o| o.response_us.unwrap_or(o.invoke_us))
        .max()
        .unwrap_or(0);
    // The true state of each key: a value from its publish's invoke, absent from a
    // volatile provider's stop (or its failed publish's answer: it has no handle).
    let mut events: Vec<(u64, &str, Option<&str>)> = Vec::new();
    for o in ops {
        match (&o.kind, &o.outcome) {
            (LookupKind::Publish, outcome) => {
                events.push((o.invoke_us, &o.key, o.value.as_deref()));
                if !o.persistent && !matches!(outcome, LookupOutcome::Published { .. }) {
                    events.push((o.response_us.unwrap_or(o.invoke_us), &o.key, None));
                }
            }
            (LookupKind::Stop, _) => {
                events.push((o.response_us.unwrap_or(o.invoke_us), &o.key, None));
            }
            _ => {}
        }
    }
    events.sort_by_key(|e| e.0);
    let mut truth = Truth::default();
    for (t, key, v) in &events {
        truth.set(key, *t, v.map(|v| v.as_bytes().to_vec()));
    }
    // Persistent acknowledgements per key.
    let mut acks: BTreeMap<&str, Vec<Ack>> = BTreeMap::new();
    for o in ops {
        if let (LookupKind::Publish, true, LookupOutcome::Published { version }, Some(t)) =
            (&o.kind, o.persistent, &o.outcome, o.response_us)
        {
            acks.entry(&o.key).or_default().push(Ack {
                at_us: t,
                version: *version,
                sent_us: o.invoke_us,
                interval_ms: o.interval_ms,
            });
        }
    }
    let (mut lost, mut stale, mut fabricated) = (Vec::new(), Vec::new(), Vec::new());
    let (mut lost_checks, mut stale_checks, mut answers) = (0, 0, 0);
    for o in ops {
        let (LookupKind::Get, LookupOutcome::Found { entry, leader }, Some(r)) =
            (&o.kind, &o.outcome, o.response_us)
        else {
            continue;
        };
        answers += 1;
        let (q, leader) = (o.invoke_us, tenure_core::DeviceId(*leader));
        let show = |v: &str, ver: (u64, u64)| format!("{v:?} at version {}.{:x}", ver.0, ver.1);
        // Integrity: the value was published for this key.
        if let Some((v, _)) = entry
            && truth.staleness(&o.key, Some(v.as_bytes()), q, r) == Staleness::Fabricated
        {
            fabricated.push(
                LookupViolation::Fabricated {
                    at_us: r,
                    key: o.key.clone(),
                    answer: v.clone(),
                }
                .to_string(),
            );
        }
        if o.persistent {
            let Some(before) = acks.get(o.key.as_str()) else {
                continue;
            };
            let before: Vec<&Ack> = before.iter().filter(|a| a.at_us < q).collect();
            let Some(floor) = before.iter().map(|a| a.version).max() else {
                continue;
            };
            // The leader that acknowledged the last refresh received it after its
            // invoke, and keeps it a lifetime from receipt.
            let last = before.iter().max_by_key(|a| a.at_us).expect("one");
            let (sent, interval) = (last.sent_us, Duration::from_millis(last.interval_ms));
            let life = settings.lifetime(interval, Durability::Persistent);
            lost_checks += 1;
            let answered = entry.as_ref().map(|(_, v)| *v);
            let ok = match answered {
                Some(v) => {
                    v >= floor || recent_fault(faults, last.at_us, q, us(converge(settings)))
                }
                // Gone: only once the provider's refreshes stopped for a lifetime.
                None => q > sent + us(life),
            };
            if !ok {
                let ev = |v: (u64, u64)| EntryVersion {
                    stamp: v.0,
                    provider: v.1,
                };
                lost.push(format!(
                    "{} (answer {})",
                    LookupViolation::LostPersistent {
                        at_us: r,
                        key: o.key.clone(),
                        acked: ev(floor),
                        answer: answered.map(ev),
                        leader,
                    },
                    entry
                        .as_ref()
                        .map_or("absent".into(), |(v, ver)| show(v, *ver))
                ));
            }
        } else if let Some((v, ver)) = entry
            && let Staleness::Us(s) = truth.staleness(&o.key, Some(v.as_bytes()), q, r)
            && s > 0
        {
            stale_checks += 1;
            let interval = Duration::from_millis(o.interval_ms);
            let life = settings.lifetime(interval, Durability::Volatile);
            // The value stopped being true at q - s.
            let stopped = q - s;
            let bound = us(life + settings.roundtrip_delay + SLACK)
                + held_back(faults, stopped.saturating_sub(us(life)), q, end_us);
            if s > bound {
                stale.push(format!(
                    "{} ({})",
                    LookupViolation::Stale {
                        at_us: r,
                        key: o.key.clone(),
                        durability: Durability::Volatile,
                        staleness_us: s,
                        bound_us: bound,
                        answer: v.clone(),
                        leader,
                    },
                    show(v, *ver)
                ));
            }
        }
    }
    let persistent_acks: usize = acks.values().map(|a| a.len()).sum();
    vec![
        CheckResult::new(
            "lookup persistent entries kept",
            lost,
            false,
            format!(
                "{persistent_acks} acknowledged publishes, {lost_checks} later answers compared"
            ),
        ),
        CheckResult::new(
            "lookup volatile entries expire",
            stale,
            false,
            format!("{stale_checks} answers of a stopped provider's value judged"),
        ),
        CheckResult::new(
            "lookup answers were published",
            fabricated,
            false,
            format!("{answers} answers"),
        ),
    ]
}
