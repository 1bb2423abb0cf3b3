//! Objects under faults: clients putting (some by compare-and-set on the revision they
//! last saw) and getting a few keys of one store, every operation recorded; after the
//! full restart each key is read again and the store's object history is read back with
//! a watch. The checks reuse the simulator's: [`lincheck`] with its register model, and
//! [`ObjectChecker`] (seed 001, DESIGN §5 and §9.6).
//!
//! Every put writes a content of its own, `v<value>:` and padding, whose value is unique
//! in the run, so a read names the put it saw. Per key the object is then a register
//! (absent = 0), a compare-and-set on revision `r` is a compare-and-set on the value the
//! client saw at `r` (one revision, one put), and the history can be checked for
//! linearizability against [`RegisterModel`]. A put the client gave up on is unknown: it
//! may land at any later time. The checks:
//!
//! - **linearizable**: per key, the puts, compare-and-sets and gets against the register
//!   model (bounded search; a key whose search hits the bound is reported unchecked);
//! - **reads**: a get returns no revision older than a put acknowledged before it was
//!   sent, a content matching its description and the upload that wrote it, and a value
//!   some put wrote; every source agrees on what each revision was;
//! - **upload ids unique**: no two acknowledged puts of different contents were given
//!   one upload id (the store's manifests are keyed by it);
//! - **compare-and-set**: at most one compare-and-set wins on a revision of a key, and
//!   the one that wins followed exactly the revision it named in the store's history;
//! - **no acknowledged put lost after the full restart**: every acknowledged put is in
//!   the store's history read back after the restart, and no read after the restart
//!   returns less than the last acknowledged put.

use crate::check::{CheckResult, SearchBound};
use crate::devices::Target;
use crate::history::{ObjChange, ObjHistory, ObjKind, ObjOp, ObjOutcome, ObjRead, Recorder};
use std::collections::BTreeMap;
use std::time::Duration;
use tenure_client::objects::Condition;
use tenure_client::{Client, ClientOptions, Error};
use tenure_core::StoreId;
use tenure_core::objects::{ChangeKind, ObjectTable, Uuid};
use tenure_core::rng::Rng;
use tenure_sim::lincheck::{
    self, Operation, RegisterInput, RegisterModel, RegisterOutput, Verdict,
};
use tenure_sim::objects::checks::{ObjectChecker, ObjectViolation};
use tokio::sync::watch;

/// A client gives up on an object call after this long.
const CALL_LIMIT: Duration = Duration::from_secs(15);
/// How far back the history is read after the restart (the store keeps 10 000 changes).
const HISTORY_BACK: u64 = 9_000;

/// The object keys of a run (one store: the first segment is shared).
pub fn keys(n: usize) -> Vec<String> {
    (0..n.max(1)).map(|i| format!("/chaosobj/k{i}")).collect()
}

/// The prefix the keys share.
pub const PREFIX: &str = "/chaosobj";

/// The content a put of `value` writes: unique per value, of a length that varies.
pub fn content(value: u64) -> Vec<u8> {
    let mut c = format!("v{value}:").into_bytes();
    c.resize(c.len() + (value % 997) as usize, b'.');
    c
}

/// The value a content carries, if it is exactly what a put of that value writes.
pub fn value_of(data: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(data).ok()?;
    let v: u64 = s.strip_prefix('v')?.split(':').next()?.parse().ok()?;
    (content(v) == data).then_some(v)
}

fn crc(data: &[u8]) -> u32 {
    tenure_core::objects::BlockInfo::of(data).checksum
}

fn new_client(target: &Target, name: String) -> anyhow::Result<Client> {
    let opts = ClientOptions {
        client_name: name,
        ..Default::default()
    };
    Ok(target.client(opts)?)
}

struct Worker {
    idx: u64,
    rec: Recorder,
    client: Client,
    stores: u32,
    seq: u64,
    /// Per key, the last (revision, value) this client saw.
    seen: BTreeMap<String, (u64, u64)>,
}

impl Worker {
    fn op(
        &self,
        kind: ObjKind,
        key: &str,
        value: Option<u64>,
        expect: Option<(u64, u64)>,
    ) -> ObjOp {
        ObjOp {
            client: self.idx,
            kind,
            key: key.to_string(),
            store: tenure_core::config::store_of(key, self.stores).0,
            value,
            expect,
            invoke_us: self.rec.now(),
            response_us: None,
            outcome: ObjOutcome::Unknown(String::new()),
        }
    }

    fn done(&self, mut op: ObjOp, outcome: ObjOutcome) {
        if !matches!(outcome, ObjOutcome::Unknown(_)) {
            op.response_us = Some(self.rec.now());
        }
        op.outcome = outcome;
        self.rec.obj(op);
    }

    async fn put(&mut self, key: &str, cas: bool) {
        self.seq += 1;
        let value = ((self.idx + 1) << 32) | self.seq;
        let expect = if cas {
            Some(self.seen.get(key).copied().unwrap_or((0, 0)))
        } else {
            None
        };
        let kind = if cas { ObjKind::Cas } else { ObjKind::Put };
        let op = self.op(kind, key, Some(value), expect);
        let objects = self.client.objects();
        let data = content(value);
        let call = async {
            match expect {
                Some((r, _)) => objects.put_if(key, data, Condition::Revision(r)).await,
                None => objects.put(key, data).await,
            }
        };
        let outcome = match tokio::time::timeout(CALL_LIMIT, call).await {
            Ok(Ok(w)) => {
                self.seen.insert(key.to_string(), (w.revision, value));
                ObjOutcome::Written {
                    revision: w.revision,
                    uuid: w.uuid,
                }
            }
            Ok(Err(Error::RevisionMismatch { current, .. })) if cas => {
                self.seen.remove(key);
                ObjOutcome::Mismatch { current }
            }
            Ok(Err(e)) => ObjOutcome::Unknown(e.to_string()),
            Err(_) => ObjOutcome::Unknown(format!("no answer in {CALL_LIMIT:?}")),
        };
        self.done(op, outcome);
    }

    async fn get(&mut self, key: &str) {
        let op = self.op(ObjKind::Get, key, None, None);
        let outcome = match get(&self.client, key).await {
            Ok(r) => {
                match &r {
                    Some(o) => {
                        if let Some(v) = o.value {
                            self.seen.insert(key.to_string(), (o.revision, v));
                        }
                    }
                    None => {
                        self.seen.insert(key.to_string(), (0, 0));
                    }
                }
                ObjOutcome::Read(r)
            }
            Err(e) => ObjOutcome::Fail(e),
        };
        self.done(op, outcome);
    }
}

/// One get, as the history keeps it (an error: what failed).
async fn get(client: &Client, key: &str) -> Result<Option<ObjRead>, String> {
    match tokio::time::timeout(CALL_LIMIT, client.objects().get(key)).await {
        Ok(Ok(o)) => Ok(Some(ObjRead {
            revision: o.info.revision,
            uuid: o.info.uuid,
            size: o.info.size,
            checksum: o.info.checksum,
            content: (o.data.len() as u64, crc(&o.data)),
            value: value_of(&o.data),
        })),
        Ok(Err(Error::NoSuchObject(_))) => Ok(None),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer in {CALL_LIMIT:?}")),
    }
}

/// Run object client `idx` on `keys` until `stop` turns true.
pub async fn worker(
    idx: u64,
    target: Target,
    keys: Vec<String>,
    stores: u32,
    rec: Recorder,
    mut rng: Rng,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let client = new_client(&target, format!("chaos-objects-{idx}"))?;
    let mut w = Worker {
        idx,
        rec,
        client,
        stores,
        seq: 0,
        seen: BTreeMap::new(),
    };
    while !*stop.borrow() {
        let key = keys[rng.below(keys.len() as u64) as usize].clone();
        match rng.below(10) {
            0..=3 => w.put(&key, false).await,
            4..=6 => w.put(&key, true).await,
            _ => w.get(&key).await,
        }
        tokio::time::sleep(Duration::from_millis(20 + rng.below(80))).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), w.client.close()).await;
    Ok(())
}

/// After the full restart: read every key (recorded as client `reader`), then the
/// store's object history back to what it still keeps (recorded per store).
pub async fn final_reads(rec: &Recorder, target: &Target, keys: &[String], reader: u64) {
    let Ok(client) = new_client(target, "chaos-objects-final".into()) else {
        return;
    };
    let stores = client.stores().await.unwrap_or(1);
    for key in keys {
        let invoke_us = rec.now();
        let r = get(&client, key).await;
        rec.obj(ObjOp {
            client: reader,
            kind: ObjKind::Get,
            key: key.clone(),
            store: tenure_core::config::store_of(key, stores).0,
            value: None,
            expect: None,
            invoke_us,
            response_us: Some(rec.now()),
            outcome: match r {
                Ok(r) => ObjOutcome::Read(r),
                Err(e) => ObjOutcome::Fail(e),
            },
        });
    }
    let store = tenure_core::config::store_of(PREFIX, stores).0;
    match tokio::time::timeout(Duration::from_secs(30), history(&client)).await {
        Ok(Ok(h)) => rec.obj_history(store, h),
        Ok(Err(e)) => tracing::warn!("object history not read: {e}"),
        Err(_) => tracing::warn!("object history not read within 30 s"),
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), client.close()).await;
}

/// The store's object history under [`PREFIX`]: a watch from as far back as the store
/// keeps, read up to the store's revision.
async fn history(client: &Client) -> tenure_client::Result<ObjHistory> {
    let objects = client.objects();
    let listing = objects.list(PREFIX).await?;
    let revision = listing.revisions.first().map_or(0, |(_, r)| *r);
    let mut from = revision.saturating_sub(HISTORY_BACK);
    let mut w = match objects.watch(PREFIX, Some(from)).await {
        Ok(w) => w,
        Err(Error::Compacted { compacted, .. }) => {
            from = compacted;
            objects.watch(PREFIX, Some(from)).await?
        }
        Err(e) => return Err(e),
    };
    let mut h = ObjHistory {
        compacted: from,
        revision,
        changes: Vec::new(),
    };
    let mut last = from;
    while last < revision {
        match w.next().await {
            Some(Ok(tenure_client::objects::WatchEvent::Changes(cs))) => {
                for c in cs {
                    last = last.max(c.revision);
                    h.changes.push(ObjChange {
                        revision: c.revision,
                        key: c.key,
                        put: c.put.map(|p| (p.uuid, p.size, p.checksum)),
                    });
                }
            }
            Some(Ok(tenure_client::objects::WatchEvent::Reset { .. })) => {
                return Err(Error::Rejected(
                    "the history was compacted while it was read".into(),
                ));
            }
            Some(Err(e)) => return Err(e),
            None => return Err(Error::Closed),
        }
    }
    Ok(h)
}

fn uuid(s: &str) -> Option<Uuid> {
    s.parse().ok()
}

/// The register history of one key (values as the register's; absent = 0).
fn register_ops(ops: &[&ObjOp]) -> Vec<Operation<RegisterInput, RegisterOutput>> {
    let mut out = Vec::new();
    for o in ops {
        let v = o.value.unwrap_or(0) as i64;
        let (input, output) = match (&o.kind, &o.outcome) {
            (_, ObjOutcome::Fail(_)) => continue,
            (ObjKind::Get, ObjOutcome::Read(r)) => {
                // A content no put wrote reads as a value no put wrote.
                let seen = r.as_ref().map_or(0, |r| r.value.map_or(-1, |v| v as i64));
                (RegisterInput::Read, Some(RegisterOutput::Value(seen)))
            }
            (ObjKind::Get, _) => continue,
            (ObjKind::Put, ObjOutcome::Written { .. }) => {
                (RegisterInput::Write(v), Some(RegisterOutput::Ok))
            }
            (ObjKind::Put, _) => (RegisterInput::Write(v), None),
            (ObjKind::Cas, outcome) => {
                let input = RegisterInput::Cas {
                    expect: o.expect.map_or(0, |(_, e)| e as i64),
                    new: v,
                };
                let output = match outcome {
                    ObjOutcome::Written { .. } => Some(RegisterOutput::Ok),
                    ObjOutcome::Mismatch { .. } => Some(RegisterOutput::CasFailed),
                    _ => None,
                };
                (input, output)
            }
        };
        out.push(Operation {
            client: o.client,
            input,
            invoke: o.invoke_us,
            response: match (o.response_us, output) {
                (Some(t), Some(out)) => Some((t.max(o.invoke_us), out)),
                _ => None,
            },
        });
    }
    out.sort_by_key(|o| o.invoke);
    out
}

fn linearizable(ops: &[ObjOp], bound: SearchBound) -> CheckResult {
    let mut by_key: BTreeMap<&str, Vec<&ObjOp>> = BTreeMap::new();
    for o in ops {
        by_key.entry(&o.key).or_default().push(o);
    }
    let limits = bound.limits();
    let (mut violations, mut unchecked, mut checked) = (Vec::new(), Vec::new(), 0);
    for (key, ops) in &by_key {
        let h = register_ops(ops);
        // As for locks: without the unknown puts first (cheap); with them only if needed.
        let completed: Vec<_> = h.iter().filter(|o| o.response.is_some()).cloned().collect();
        if completed.len() < h.len()
            && matches!(
                lincheck::check(&RegisterModel(0), &completed, &limits),
                Ok(Verdict::Linearizable)
            )
        {
            checked += h.len();
            continue;
        }
        match lincheck::check(&RegisterModel(0), &h, &limits) {
            Ok(Verdict::Linearizable) => checked += h.len(),
            Ok(Verdict::Unknown { steps }) => {
                unchecked.push(format!("{key} ({} ops, {steps} steps)", h.len()))
            }
            Ok(Verdict::NotLinearizable(c)) => violations.push(format!("{key}: {}", c.description)),
            Err(e) => violations.push(format!("{key}: malformed history: {e}")),
        }
    }
    let mut detail = format!(
        "{checked} operations on {} keys linearizable (register per key)",
        by_key.len() - unchecked.len()
    );
    if !unchecked.is_empty() {
        detail += &format!("; search bound reached on {}", unchecked.join(", "));
    }
    CheckResult::new(
        "objects linearizable",
        violations,
        !unchecked.is_empty(),
        detail,
    )
}

/// The object checks on a run's object operations and the stores' histories read after
/// the full restart (at `restart_us`; none: no restart was made).
pub fn checks(
    ops: &[ObjOp],
    histories: &BTreeMap<u32, ObjHistory>,
    restart_us: Option<u64>,
    bound: impl Into<SearchBound>,
) -> Vec<CheckResult> {
    let mut results = vec![linearizable(ops, bound.into())];
    // Upload ids: one per put. The store names each upload by a UUID; two acknowledged
    // puts of different contents under one UUID would make their manifests one (and a
    // collector of the older one delete the newer one's blocks).
    let mut uploads: BTreeMap<&str, Vec<&ObjOp>> = BTreeMap::new();
    for o in ops {
        if let ObjOutcome::Written { uuid: u, .. } = &o.outcome {
            uploads.entry(u).or_default().push(o);
        }
    }
    let mut reused_ids = Vec::new();
    let mut reused = std::collections::BTreeSet::new();
    for (u, puts) in &uploads {
        let mut values: Vec<u64> = puts.iter().filter_map(|o| o.value).collect();
        values.sort_unstable();
        values.dedup();
        if values.len() > 1 {
            reused.insert(u.to_string());
            let each: Vec<String> = (puts.iter())
                .map(|o| match &o.outcome {
                    ObjOutcome::Written { revision, .. } => format!(
                        "{} at revision {revision} ({}us)",
                        o.key,
                        o.response_us.unwrap_or(0)
                    ),
                    _ => String::new(),
                })
                .collect();
            reused_ids.push(format!(
                "upload {u} acknowledged for {} different puts: {}",
                values.len(),
                each.join(", ")
            ));
        }
    }
    results.push(CheckResult::new(
        "object upload ids unique",
        reused_ids,
        false,
        format!("{} uploads acknowledged", uploads.len()),
    ));
    let mut c = ObjectChecker::default();
    let mut unwritten = Vec::new();
    // Acknowledged puts first: a read is judged against every put acknowledged before it.
    for o in ops {
        if let (ObjOutcome::Written { revision, uuid: u }, Some(value), Some(t)) =
            (&o.outcome, o.value, o.response_us)
        {
            let data = content(value);
            let Some(u) = uuid(u) else {
                unwritten.push(format!(
                    "{}: put acknowledged with a malformed upload id {u:?}",
                    o.key
                ));
                continue;
            };
            c.put_acked(
                StoreId(o.store),
                &o.key,
                *revision,
                u,
                (crc(&data), data.len() as u64),
                t,
            );
            if o.kind == ObjKind::Cas {
                let expected = o.expect.map(|(r, _)| r).filter(|r| *r > 0);
                c.cas_won(StoreId(o.store), &o.key, expected, *revision);
            }
        }
    }
    let written: BTreeMap<u64, u64> = (ops.iter())
        .filter_map(|o| Some((o.value?, o.invoke_us)))
        .collect();
    let mut reads = 0;
    for o in ops {
        let ObjOutcome::Read(r) = &o.outcome else {
            continue;
        };
        reads += 1;
        let found = match r {
            Some(r) => {
                // A value some put wrote, invoked before the read answered.
                let by = r.value.and_then(|v| written.get(&v));
                if by.is_none_or(|t| *t > o.response_us.unwrap_or(u64::MAX)) {
                    unwritten.push(format!(
                        "{}: a read at {}us returned revision {} with a content no put wrote before it ({:?})",
                        o.key, o.invoke_us, r.revision, r.value
                    ));
                }
                let Some(u) = uuid(&r.uuid) else {
                    unwritten.push(format!(
                        "{}: a read returned a malformed upload id {:?}",
                        o.key, r.uuid
                    ));
                    continue;
                };
                Some((r.revision, u, r.checksum, r.size))
            }
            None => None,
        };
        let content = r.as_ref().map(|r| (r.content.1, r.content.0));
        c.read(StoreId(o.store), &o.key, o.invoke_us, found, content);
    }
    // Compare-and-set wins, per (key, revision named): at most one.
    let mut wins: BTreeMap<(&str, u64), Vec<&ObjOp>> = BTreeMap::new();
    for o in ops {
        if o.kind == ObjKind::Cas
            && matches!(o.outcome, ObjOutcome::Written { .. })
            && let Some((r, _)) = o.expect
        {
            wins.entry((&o.key, r)).or_default().push(o);
        }
    }
    let mut cas = Vec::new();
    for ((key, r), w) in &wins {
        if w.len() > 1 {
            let at: Vec<String> = (w.iter())
                .filter_map(|o| match &o.outcome {
                    ObjOutcome::Written { revision, .. } => Some(revision.to_string()),
                    _ => None,
                })
                .collect();
            cas.push(format!(
                "{key}: {} compare-and-sets on revision {r} won (written at revisions {})",
                w.len(),
                at.join(", ")
            ));
        }
    }
    // The stores' histories after the restart.
    let stores: std::collections::BTreeSet<u32> = ops.iter().map(|o| o.store).collect();
    let mut missing = Vec::new();
    for store in &stores {
        match histories.get(store) {
            Some(h) => c.final_history(StoreId(*store), &table(h)),
            None => missing.push(*store),
        }
    }
    let restart = restart_us.unwrap_or(u64::MAX);
    let (mut stale, mut lost) = (Vec::new(), Vec::new());
    for v in &c.violations {
        match v {
            ObjectViolation::ReadStale { sent_us, .. } if *sent_us >= restart => {
                lost.push(v.to_string())
            }
            ObjectViolation::AckLost { .. } => lost.push(v.to_string()),
            ObjectViolation::CasBroken { .. } => cas.push(v.to_string()),
            // Another put's content under a reused upload id: reported above.
            ObjectViolation::ReadCorrupt { uuid: u, why, .. }
                if reused.contains(&u.to_string()) && why.starts_with("described as") => {}
            _ => stale.push(v.to_string()),
        }
    }
    stale.extend(unwritten);
    let counts = &c.counts;
    results.push(CheckResult::new(
        "object reads fresh and written",
        stale,
        false,
        format!(
            "{reads} reads, {} compared with acknowledged puts, {} revisions compared between sources",
            counts.read_checks, counts.revision_checks
        ),
    ));
    let won: usize = wins.values().map(|w| w.len()).sum();
    results.push(CheckResult::new(
        "compare-and-set wins unique",
        cas,
        !missing.is_empty(),
        format!(
            "{won} wins on {} revisions, {} checked against the store's history",
            wins.len(),
            counts.cas_checks
        ),
    ));
    let after = ops
        .iter()
        .filter(|o| o.invoke_us >= restart && matches!(o.outcome, ObjOutcome::Read(_)))
        .count();
    let mut detail = format!(
        "{} acknowledged changes found in the history after the restart, {after} reads after it",
        counts.ack_checks
    );
    if !missing.is_empty() {
        detail += &format!("; no history read of store {missing:?}");
    }
    results.push(CheckResult::new(
        "no acknowledged put lost",
        lost,
        !missing.is_empty() || restart_us.is_none(),
        detail,
    ));
    results
}

/// A store's history in the form the simulator's checker reads.
fn table(h: &ObjHistory) -> ObjectTable {
    let history: imbl::Vector<tenure_core::objects::table::Change> = (h.changes.iter())
        .filter_map(|c| {
            let kind = match &c.put {
                Some((u, size, checksum)) => ChangeKind::Put {
                    uuid: uuid(u)?,
                    size: *size,
                    checksum: *checksum,
                },
                None => ChangeKind::Delete,
            };
            Some(tenure_core::objects::table::Change {
                revision: c.revision,
                key: c.key.clone(),
                kind,
            })
        })
        .collect();
    ObjectTable {
        revision: h.revision,
        history,
        compacted: h.compacted,
        ..Default::default()
    }
}
