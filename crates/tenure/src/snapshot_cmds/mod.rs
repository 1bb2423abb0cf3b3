//! `tenure snapshot create|ls|verify|restore|rm`: consistent snapshots of a running cluster
//! (DESIGN §6, §8; seed 002 §14.1–§14.2).
//!
//! `create` asks one device to initiate a Chandy-Lamport snapshot, waits until
//! termination detection tells it the whole snapshot is recorded (every device's part is
//! durable in its own data directory by then), then fetches every device's part into a
//! local snapshot directory, by default `<data>/snapshots/<id>/`:
//!
//! ```text
//! manifest.json     id, initiator, creation time, devices with size and CRC-32 of
//!                   each part, stores, terminated (no message was in flight)
//! device-1.part     device 1's part: its persistent state at the cut and the messages
//! device-2.part     recorded in flight on each of its incoming channels
//! ```
//!
//! `verify` checks a collected snapshot: every file of the manifest present with its size
//! and checksum, every part decodes and names the snapshot and its device, and the cut is
//! consistent as far as its records show (per store: at most one manager per epoch, one
//! layout per epoch, chunks that confirmed the same sequence number hold the same tables,
//! no two sessions hold conflicting locks, a fencing token names one grant; every store
//! has a chunk; recorded messages come from devices of the snapshot). `restore` writes a
//! new local cluster's data directory from it (the layout `tenure cluster up` makes, on
//! fresh ports, so it can run beside the original): each device's storage holds its
//! part's state, and its recorded channel messages wait in `snapshot-replay.bin`, which the
//! server replays before anything else at its first boot.
//!
//! `rm` removes a snapshot: every device's part (each device also removes its oldest parts
//! on its own beyond `[snapshot] keep`) and the copy collected under `--data`, unless
//! `--keep-collected`.

use crate::client_cmds::Target;
use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tenure_core::ids::{DeviceId, StoreId};
use tenure_core::io::DevicePersist;
use tenure_core::lockctl::{LockMode, conflicts};
use tenure_core::msg::Msg;
use tenure_core::snapshot::{SnapshotId, SnapshotPart};
use tenure_server::snapshots::{crc32, decode_part, part_file_name, write_durably, write_replay};
use tenure_server::storage::Storage;

/// The manifest's file name in a snapshot directory.
pub const MANIFEST: &str = "manifest.json";
/// Format of the manifest this build writes.
const MANIFEST_FORMAT: u32 = 1;

/// Arguments of `tenure snapshot`.
#[derive(clap::Args, Debug)]
pub struct SnapshotArgs {
    #[command(subcommand)]
    cmd: SnapshotCmd,
}

#[derive(clap::Subcommand, Debug)]
enum SnapshotCmd {
    /// Take a consistent snapshot of the running cluster and collect it into a directory
    /// (prints its id).
    Create(CreateArgs),
    /// The snapshots the devices took part in, and those collected under --data.
    Ls(LsArgs),
    /// Check a collected snapshot: files, checksums, parts, and the consistency of the cut.
    Verify(VerifyArgs),
    /// Write a new local cluster's data directory from a collected snapshot; start it with
    /// `tenure cluster up --data DIR`.
    Restore(RestoreArgs),
    /// Remove a snapshot: every device's part of it, and its copy collected under --data.
    /// Fails (non-zero exit) when a device could not be reached or refused, after the
    /// others removed theirs.
    Rm(RmArgs),
}

#[derive(clap::Args, Debug)]
struct CreateArgs {
    #[command(flatten)]
    target: Target,
    /// Where to collect the snapshot (default: <data>/snapshots/<id>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The device that initiates it (default: the first that answers).
    #[arg(long)]
    device: Option<u64>,
    /// Machine-readable output (the manifest).
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct LsArgs {
    #[command(flatten)]
    target: Target,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct RmArgs {
    /// The snapshot's id (`<initiator>-<serial>`, as `create` and `ls` print it).
    id: String,
    #[command(flatten)]
    target: Target,
    /// Leave the copy collected under --data (<data>/snapshots/<id>) in place.
    #[arg(long)]
    keep_collected: bool,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Where a collected snapshot is.
#[derive(clap::Args, Debug)]
struct Located {
    /// The snapshot's id (`<initiator>-<serial>`, as `create` printed it).
    id: String,
    /// The snapshot's directory (default: <data>/snapshots/<id>).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The local cluster's data directory the snapshot was collected under.
    #[arg(long, default_value = "tenure-data")]
    data: PathBuf,
}

impl Located {
    fn dir(&self) -> PathBuf {
        (self.dir.clone()).unwrap_or_else(|| self.data.join("snapshots").join(&self.id))
    }
}

#[derive(clap::Args, Debug)]
struct VerifyArgs {
    #[command(flatten)]
    at: Located,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct RestoreArgs {
    #[command(flatten)]
    at: Located,
    /// The new cluster's data directory (must not exist, or be empty).
    #[arg(long)]
    into: PathBuf,
    /// A plaintext cluster (by default the restored cluster gets a CA of its own and TLS,
    /// as `tenure cluster up` makes).
    #[arg(long)]
    insecure: bool,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// `manifest.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Manifest format.
    pub format: u32,
    /// The snapshot.
    pub id: String,
    /// The device that initiated it.
    pub initiator: u64,
    /// When it was created (RFC 3339, UTC).
    pub created: String,
    /// The same, in Unix milliseconds.
    pub created_unix_ms: u64,
    /// From its start to the initiator's result, in milliseconds.
    pub duration_ms: f64,
    /// Termination detection found no message in flight in the cut.
    pub terminated: bool,
    /// The cluster's number of stores.
    pub stores: u32,
    /// Chunks per store (the largest layout in the parts).
    pub replication: usize,
    /// One file per device.
    pub devices: Vec<ManifestPart>,
}

/// One device's file in a manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ManifestPart {
    /// The device.
    pub device: u64,
    /// The file, in the snapshot's directory.
    pub file: String,
    /// Its size.
    pub bytes: u64,
    /// Its CRC-32 (IEEE).
    pub crc32: u32,
}

/// Run `tenure snapshot ...`.
pub fn run(args: SnapshotArgs) -> anyhow::Result<()> {
    match args.cmd {
        SnapshotCmd::Create(a) => runtime()?.block_on(create(a)),
        SnapshotCmd::Ls(a) => runtime()?.block_on(ls(a)),
        SnapshotCmd::Verify(a) => verify_cmd(a),
        SnapshotCmd::Restore(a) => restore(a),
        SnapshotCmd::Rm(a) => runtime()?.block_on(rm(a)),
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// `1970-01-01T00:00:00.000Z` for a Unix time in milliseconds.
fn rfc3339(unix_ms: u64) -> String {
    let (secs, ms) = (unix_ms / 1000, unix_ms % 1000);
    let (days, sod) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}

fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / (1 << 10) as f64),
        n => format!("{n} B"),
    }
}

async fn create(a: CreateArgs) -> anyhow::Result<()> {
    let client = a.target.client()?;
    // Which endpoint is which device: parts are fetched from each device of the snapshot.
    let mut endpoint_of: BTreeMap<u64, String> = BTreeMap::new();
    let mut stores = 0;
    for (ep, s) in client.status_all().await {
        if let Ok(s) = s {
            stores = s.stores;
            endpoint_of.insert(s.device, ep);
        }
    }
    if endpoint_of.is_empty() {
        bail!(
            "no device answered ({}); is the cluster running?",
            client.endpoints().join(", ")
        );
    }
    let initiator = match a.device {
        Some(d) => endpoint_of.get(&d).cloned().with_context(|| {
            format!(
                "device {d} did not answer (devices answering: {:?})",
                endpoint_of.keys()
            )
        })?,
        None => endpoint_of.values().next().cloned().expect("one answered"),
    };
    let bar = if a.json {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new_spinner()
    };
    bar.enable_steady_tick(Duration::from_millis(100));
    bar.set_message(format!("recording a snapshot from {initiator}"));
    let started = Instant::now();
    let created_unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let snaps = client.snapshots();
    let created = snaps
        .create_on(&initiator)
        .await
        .inspect_err(|_| bar.finish_and_clear())
        .context("taking the snapshot")?;
    let recorded = started.elapsed();
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| a.target.data.join("snapshots").join(&created.id));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let mut parts = Vec::new();
    let mut replication = 0;
    for d in &created.devices {
        bar.set_message(format!("fetching the part of device {d}"));
        let ep = endpoint_of.get(d).with_context(|| {
            format!(
                "device {d} recorded a part of snapshot {} but did not answer Status; \
                 its part stays in its data directory (snapshots/{}/)",
                created.id, created.id
            )
        })?;
        let part = snaps
            .fetch_part(ep, &created.id)
            .await
            .with_context(|| format!("fetching the part of device {d} from {ep}"))?;
        let decoded = decode_part(&part.bytes)
            .with_context(|| format!("the part of device {d} fetched from {ep}"))?;
        if decoded.id.to_string() != created.id || decoded.device.0 != *d {
            bail!(
                "{ep} sent the part of device {} for snapshot {}, not device {d}'s of {}",
                decoded.device.0,
                decoded.id,
                created.id
            );
        }
        for c in decoded.state.chunks.values() {
            replication = replication.max(c.metadata.chunks.len());
        }
        let file = part_file_name(DeviceId(*d));
        write_durably(&out.join(&file), &part.bytes)?;
        parts.push(ManifestPart {
            device: *d,
            file,
            bytes: part.bytes.len() as u64,
            crc32: part.crc32,
        });
    }
    let manifest = Manifest {
        format: MANIFEST_FORMAT,
        id: created.id.clone(),
        initiator: created.initiator,
        created: rfc3339(created_unix_ms),
        created_unix_ms,
        duration_ms: created.duration.as_secs_f64() * 1e3,
        terminated: created.terminated,
        stores,
        replication,
        devices: parts,
    };
    let text = serde_json::to_string_pretty(&manifest)?;
    write_durably(&out.join(MANIFEST), text.as_bytes())?;
    bar.finish_and_clear();
    if a.json {
        let mut v = serde_json::to_value(&manifest)?;
        v["dir"] = serde_json::json!(std::path::absolute(&out)?);
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let total: u64 = manifest.devices.iter().map(|p| p.bytes).sum();
    println!("{}", manifest.id);
    // The id alone on standard output, so that `ID=$(tenure snapshot create)` works; what
    // happened on standard error.
    eprintln!(
        "  recorded by {} devices {:?} in {:.0} ms (initiator device {}; {:.0} ms with the request)",
        manifest.devices.len(),
        created.devices,
        manifest.duration_ms,
        manifest.initiator,
        recorded.as_secs_f64() * 1e3,
    );
    eprintln!(
        "  {}",
        if manifest.terminated {
            "terminated: no message was in flight in the cut"
        } else {
            "messages were in flight in the cut: recorded, replayed on restore"
        }
    );
    eprintln!(
        "  collected into {} ({} parts, {}) with {MANIFEST}",
        out.display(),
        manifest.devices.len(),
        human_bytes(total)
    );
    Ok(())
}

/// One snapshot as `ls` shows it.
#[derive(Clone, Debug, Default, Serialize)]
struct Listed {
    id: String,
    initiator: u64,
    /// The initiator's word ("complete", "failed", "running"), or "unknown" when it did
    /// not answer.
    status: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    error: String,
    /// Devices of a complete snapshot.
    devices: Vec<u64>,
    terminated: bool,
    /// Devices holding their part on disk.
    parts_on_devices: Vec<u64>,
    created: String,
    /// Where it is collected (a local directory with a manifest), if it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    collected: Option<PathBuf>,
}

async fn ls(a: LsArgs) -> anyhow::Result<()> {
    let mut all: BTreeMap<SnapshotId, Listed> = BTreeMap::new();
    let mut unreachable = Vec::new();
    let endpoints = a.target.endpoints();
    if endpoints.is_ok() {
        let client = a.target.client()?;
        for (ep, r) in client.snapshots().list_all().await {
            let r = match r {
                Ok(r) => r,
                Err(e) => {
                    unreachable.push(format!("{ep}: {e}"));
                    continue;
                }
            };
            for s in r.snapshots {
                let Ok(id) = s.id.parse::<SnapshotId>() else {
                    continue;
                };
                let l = all.entry(id).or_insert_with(|| Listed {
                    id: s.id.clone(),
                    initiator: id.initiator.0,
                    status: "unknown".into(),
                    ..Default::default()
                });
                if s.part.is_some() {
                    l.parts_on_devices.push(r.device);
                }
                if s.initiated_here {
                    l.status = s.status.clone();
                    l.error = s.error.clone();
                    l.devices = s.devices.clone();
                    l.terminated = s.terminated;
                }
                if l.created.is_empty() || s.initiated_here {
                    l.created = rfc3339(s.unix_ms);
                }
            }
        }
    }
    // Collected snapshots (also of clusters that are not running).
    if let Ok(rd) = std::fs::read_dir(a.target.data.join("snapshots")) {
        for d in rd.flatten() {
            let Ok(m) = read_manifest(&d.path()) else {
                continue;
            };
            let Ok(id) = m.id.parse::<SnapshotId>() else {
                continue;
            };
            let l = all.entry(id).or_insert_with(|| Listed {
                id: m.id.clone(),
                initiator: m.initiator,
                status: "collected".into(),
                devices: m.devices.iter().map(|p| p.device).collect(),
                terminated: m.terminated,
                created: m.created.clone(),
                ..Default::default()
            });
            l.collected = Some(d.path());
        }
    }
    if endpoints.is_err() && all.is_empty() {
        endpoints?;
    }
    let rows: Vec<Listed> = all.into_values().collect();
    if a.json {
        let v = serde_json::json!({"snapshots": rows, "unreachable": unreachable});
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    if rows.is_empty() {
        println!("no snapshots (take one with `tenure snapshot create`)");
    } else {
        println!(
            "{:<22} {:>4} {:<9} {:<10} {:<5} {:<24} collected",
            "id", "init", "status", "parts", "quiet", "created"
        );
        for r in &rows {
            let n = r.devices.len().max(r.parts_on_devices.len());
            println!(
                "{:<22} {:>4} {:<9} {:<10} {:<5} {:<24} {}",
                r.id,
                r.initiator,
                r.status,
                format!("{}/{n}", r.parts_on_devices.len()),
                if r.status == "complete" || r.status == "collected" {
                    if r.terminated { "yes" } else { "no" }
                } else {
                    "-"
                },
                r.created,
                r.collected
                    .as_ref()
                    .map_or("-".to_string(), |p| p.display().to_string())
            );
            if !r.error.is_empty() {
                println!("{:<22} {}", "", r.error);
            }
        }
    }
    for u in &unreachable {
        eprintln!("not listed: {u}");
    }
    Ok(())
}

/// One device's answer to `rm`.
#[derive(Debug, Serialize)]
struct RmAnswer {
    endpoint: String,
    /// The device (when it answered).
    #[serde(skip_serializing_if = "Option::is_none")]
    device: Option<u64>,
    /// "removed", "absent" (it held no part), "refused" (busy, storage), "unreachable" or
    /// "failed" (another RPC failure).
    outcome: &'static str,
    #[serde(skip_serializing_if = "String::is_empty")]
    error: String,
}

/// The innermost error of `e`'s chain ("Connection refused (os error 111)" rather than the
/// whole transport error), or `e` itself.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e;
    while let Some(s) = last.source() {
        last = s;
    }
    last.to_string()
}

async fn rm(a: RmArgs) -> anyhow::Result<()> {
    let id: SnapshotId = a.id.parse().map_err(|e: String| anyhow::anyhow!(e))?;
    let id = id.to_string();
    let client = a.target.client()?;
    let mut answers = Vec::new();
    for (endpoint, r) in client.snapshots().delete_all(&id).await {
        use tenure_client::snapshots::SnapshotError as E;
        let (device, outcome, error) = match r {
            Ok(d) if d.deleted => (Some(d.device), "removed", String::new()),
            Ok(d) => (Some(d.device), "absent", String::new()),
            Err(E::Client(tenure_client::Error::Rpc(s)))
                if matches!(
                    s.code(),
                    tonic::Code::Unavailable | tonic::Code::DeadlineExceeded
                ) =>
            {
                let why = match std::error::Error::source(s.as_ref()) {
                    Some(inner) => root_cause(inner),
                    None => s.message().to_string(),
                };
                (None, "unreachable", why)
            }
            Err(E::Client(e)) => (None, "failed", e.to_string()),
            Err(e) => (None, "refused", e.to_string()),
        };
        answers.push(RmAnswer {
            endpoint,
            device,
            outcome,
            error,
        });
    }
    // The copy `create` collected, where `ls` finds it.
    let local = a.target.data.join("snapshots").join(&id);
    let collected = read_manifest(&local).is_ok_and(|m| m.id == id);
    let removed_local = collected && !a.keep_collected;
    if removed_local {
        std::fs::remove_dir_all(&local).with_context(|| format!("removing {}", local.display()))?;
    }
    let failed: Vec<&RmAnswer> = answers
        .iter()
        .filter(|r| matches!(r.outcome, "unreachable" | "refused" | "failed"))
        .collect();
    if a.json {
        let v = serde_json::json!({
            "id": id,
            "devices": answers,
            "collected": if removed_local { "removed" } else if collected { "kept" } else { "none" },
            "collected_dir": std::path::absolute(&local)?,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let with = |o: &str| -> Vec<u64> {
            (answers.iter())
                .filter(|r| r.outcome == o)
                .filter_map(|r| r.device)
                .collect()
        };
        let (removed, absent) = (with("removed"), with("absent"));
        println!("snapshot {id}:");
        if !removed.is_empty() {
            println!("  part removed on devices {removed:?}");
        }
        if !absent.is_empty() {
            println!("  no part on devices {absent:?} (never recorded, or removed before)");
        }
        for r in &failed {
            println!("  {} {}: {}", r.endpoint, r.outcome, r.error);
        }
        if removed_local {
            println!("  collected copy removed: {}", local.display());
        } else if collected {
            println!("  collected copy kept: {}", local.display());
        }
    }
    if !failed.is_empty() {
        bail!(
            "snapshot {id} is not removed everywhere: {} device(s) could not remove their part ({}); \
             run `tenure snapshot rm {id}` again when they are back",
            failed.len(),
            failed
                .iter()
                .map(|r| format!("{} {}", r.endpoint, r.outcome))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}

fn read_manifest(dir: &Path) -> anyhow::Result<Manifest> {
    let p = dir.join(MANIFEST);
    let text = std::fs::read_to_string(&p)
        .with_context(|| format!("no snapshot manifest at {}", p.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not a snapshot manifest", p.display()))
}

/// What `verify` found.
#[derive(Debug, Default, Serialize)]
pub struct Verified {
    /// The snapshot.
    pub id: String,
    /// Devices whose parts were read.
    pub devices: Vec<u64>,
    /// Stores with at least one chunk in the snapshot.
    pub stores: usize,
    /// Chunk records.
    pub chunks: usize,
    /// Locks held at the cut, as a restore recovers them.
    pub locks_held: usize,
    /// Sessions open at the cut, as a restore recovers them.
    pub sessions_open: usize,
    /// Messages recorded in flight.
    pub in_flight: usize,
    /// Everything wrong, in words.
    pub problems: Vec<String>,
    /// The holders of every lock held at the cut, as a restore recovers them: per store,
    /// the chunk records merged with maximum forward progress (the most advanced table,
    /// then every change accepted anywhere beyond it, seed 004 §4.1).
    pub holders: Vec<CutHolder>,
    /// The sessions open at the cut, the same way.
    pub sessions: Vec<CutSession>,
}

/// A lock holder in the cut.
#[derive(Debug, Serialize)]
pub struct CutHolder {
    /// The store.
    pub store: u32,
    /// The lock.
    pub name: String,
    /// The holding session.
    pub session: u64,
    /// "shared" or "exclusive".
    pub mode: &'static str,
    /// The grant's fencing token: epoch.
    pub token_epoch: u64,
    /// The grant's fencing token: sequence number.
    pub token_seq: u64,
}

/// A session open in the cut.
#[derive(Debug, Serialize)]
pub struct CutSession {
    /// The store.
    pub store: u32,
    /// The session.
    pub session: u64,
    /// Its TTL in milliseconds.
    pub ttl_ms: u64,
}

/// Read and check the snapshot in `dir` (see the module documentation); the parts are
/// returned when they all decoded.
pub fn verify(dir: &Path, id: &str) -> anyhow::Result<(Manifest, Verified, Vec<SnapshotPart>)> {
    let m = read_manifest(dir)?;
    let mut v = Verified {
        id: m.id.clone(),
        ..Default::default()
    };
    if m.id != id {
        v.problems
            .push(format!("the manifest is of snapshot {}, not {id}", m.id));
    }
    if m.format != MANIFEST_FORMAT {
        v.problems.push(format!(
            "manifest format {} (this build reads {MANIFEST_FORMAT})",
            m.format
        ));
    }
    let mut parts = Vec::new();
    let mut seen = BTreeSet::new();
    for p in &m.devices {
        if !seen.insert(p.device) {
            v.problems.push(format!(
                "device {} is listed twice in the manifest",
                p.device
            ));
            continue;
        }
        let path = dir.join(&p.file);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) => {
                v.problems.push(format!(
                    "{}: the part of device {} is missing or unreadable: {e}",
                    p.file, p.device
                ));
                continue;
            }
        };
        let crc = crc32(&bytes);
        if bytes.len() as u64 != p.bytes || crc != p.crc32 {
            v.problems.push(format!(
                "{}: checksum mismatch: the file has {} bytes with CRC-32 {crc:#010x}, the manifest \
                 says {} bytes with CRC-32 {:#010x} (the file was changed or damaged after it was \
                 collected)",
                p.file,
                bytes.len(),
                p.bytes,
                p.crc32
            ));
        }
        match decode_part(&bytes) {
            Ok(part) => {
                if part.id.to_string() != m.id {
                    v.problems.push(format!(
                        "{}: a part of snapshot {}, not of {}",
                        p.file, part.id, m.id
                    ));
                }
                if part.device.0 != p.device {
                    v.problems.push(format!(
                        "{}: the part of device {}, where the manifest says device {}",
                        p.file, part.device.0, p.device
                    ));
                }
                v.devices.push(p.device);
                parts.push(part);
            }
            Err(e) => v.problems.push(format!("{}: {e}", p.file)),
        }
    }
    if m.devices.is_empty() {
        v.problems.push("the manifest lists no device".into());
    }
    if let Ok(rd) = std::fs::read_dir(dir) {
        for d in rd.flatten() {
            let name = d.file_name().to_string_lossy().into_owned();
            if name.ends_with(".part") && !m.devices.iter().any(|p| p.file == name) {
                v.problems.push(format!(
                    "{name} is in the directory but not in the manifest"
                ));
            }
        }
    }
    if v.problems.is_empty() {
        check_cut(&m, &parts, &mut v);
    }
    Ok((m, v, parts))
}

/// The consistency of the cut, as far as the records show it (see the module
/// documentation).
fn check_cut(m: &Manifest, parts: &[SnapshotPart], v: &mut Verified) {
    use tenure_core::io::ChunkPersist;
    let members: BTreeSet<DeviceId> = parts.iter().map(|p| p.device).collect();
    let mut by_store: BTreeMap<StoreId, Vec<&ChunkPersist>> = BTreeMap::new();
    for p in parts {
        for (from, msgs) in &p.channels {
            v.in_flight += msgs.len();
            if !members.contains(from) && !msgs.is_empty() {
                v.problems.push(format!(
                    "device {} recorded {} message(s) in flight from device {}, which has no part",
                    p.device.0,
                    msgs.len(),
                    from.0
                ));
            }
        }
        for c in p.state.chunks.values() {
            if c.id.device != p.device {
                v.problems.push(format!(
                    "device {} holds chunk {} of another device",
                    p.device.0, c.id
                ));
            }
            by_store.entry(c.store).or_default().push(c);
        }
    }
    v.chunks = by_store.values().map(Vec::len).sum();
    v.stores = by_store.len();
    for s in 0..m.stores {
        if !by_store.contains_key(&StoreId(s)) {
            v.problems
                .push(format!("store {s} has no chunk in the snapshot"));
        }
    }
    for (store, chunks) in &by_store {
        check_store(*store, chunks, v);
        let records: Vec<_> = chunks.iter().map(|c| c.data.clone()).collect();
        let newest = chunks.iter().map(|c| c.epoch).max().unwrap_or_default();
        let t = tenure_core::safetalk::merge(&records, newest).table;
        for l in t.locks.locks_under("/").unwrap_or_default() {
            for h in &l.holders {
                v.holders.push(CutHolder {
                    store: store.0,
                    name: l.name.to_string(),
                    session: h.session.0,
                    mode: mode_name(h.mode),
                    token_epoch: h.token.epoch.0,
                    token_seq: h.token.seq,
                });
            }
            v.locks_held += usize::from(!l.holders.is_empty());
        }
        for (s, r) in &t.sessions.open {
            v.sessions.push(CutSession {
                store: store.0,
                session: s.0,
                ttl_ms: r.ttl.as_millis() as u64,
            });
        }
    }
    v.sessions_open = v.sessions.len();
}

fn check_store(store: StoreId, chunks: &[&tenure_core::io::ChunkPersist], v: &mut Verified) {
    use tenure_core::ids::Epoch;
    use tenure_core::layout::Metadata;
    let mut epochs: BTreeMap<Epoch, (BTreeSet<DeviceId>, Vec<&Metadata>)> = BTreeMap::new();
    for c in chunks {
        let e = epochs.entry(c.epoch).or_default();
        e.0.extend(c.lease_mgr);
        if !e.1.contains(&&c.metadata) {
            e.1.push(&c.metadata);
        }
    }
    for (epoch, (managers, layouts)) in &epochs {
        if managers.len() > 1 {
            let ids: Vec<u64> = managers.iter().map(|d| d.0).collect();
            v.problems.push(format!(
                "store {store}: epoch {epoch} has {} managers in the chunk records (devices {ids:?})",
                ids.len()
            ));
        }
        if layouts.len() > 1 {
            v.problems.push(format!(
                "store {store}: the chunk records of epoch {epoch} disagree on its layout"
            ));
        }
    }
    // SafeTalk applies the same changes in the same order everywhere.
    let mut tables: BTreeMap<_, &tenure_core::io::ChunkPersist> = BTreeMap::new();
    for c in chunks {
        match tables.get(&(c.epoch, c.data.confirmed)) {
            Some(other) if other.data.table != c.data.table => v.problems.push(format!(
                "store {store}: chunks {} and {} confirmed the same changes (epoch {}, up to {:?}) \
                 but hold different tables",
                other.id, c.id, c.epoch, c.data.confirmed
            )),
            Some(_) => {}
            None => {
                tables.insert((c.epoch, c.data.confirmed), c);
            }
        }
    }
    // Mutual exclusion in every record, and one grant per fencing token.
    let mut grants: BTreeMap<(String, tenure_core::lockctl::FencingToken), u64> = BTreeMap::new();
    for c in chunks {
        let locks = c.data.table.locks.locks_under("/").unwrap_or_default();
        let held: Vec<_> = (locks.iter())
            .flat_map(|l| l.holders.iter().map(move |h| (&l.name, h)))
            .collect();
        for (i, (na, a)) in held.iter().enumerate() {
            for (nb, b) in &held[i + 1..] {
                if a.session != b.session && conflicts(na, a.mode, nb, b.mode) {
                    v.problems.push(format!(
                        "store {store}: chunk {} records conflicting holders: session {} holds {na} \
                         {}, session {} holds {nb} {}",
                        c.id,
                        a.session.0,
                        mode_name(a.mode),
                        b.session.0,
                        mode_name(b.mode)
                    ));
                }
            }
            let key = (na.to_string(), a.token);
            if let Some(s) = grants.insert(key, a.session.0)
                && s != a.session.0
            {
                v.problems.push(format!(
                    "store {store}: fencing token {:?} of {na} is held by session {s} in one chunk \
                     and by session {} in another",
                    a.token, a.session.0
                ));
            }
        }
    }
}

fn mode_name(m: LockMode) -> &'static str {
    match m {
        LockMode::Shared => "shared",
        LockMode::Exclusive => "exclusive",
    }
}

fn verify_cmd(a: VerifyArgs) -> anyhow::Result<()> {
    let dir = a.at.dir();
    let (m, v, _) = verify(&dir, &a.at.id)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    }
    if !v.problems.is_empty() {
        bail!(
            "snapshot {} in {} FAILED verification:\n  - {}",
            a.at.id,
            dir.display(),
            v.problems.join("\n  - ")
        );
    }
    if !a.json {
        println!("snapshot {} in {}: OK", m.id, dir.display());
        println!(
            "  {} parts, sizes and CRC-32 checksums match the manifest; every part decodes and names its device",
            v.devices.len()
        );
        println!(
            "  cut: {} stores, {} chunk records; one manager and one layout per epoch; no conflicting holders; \
             {} locks held, {} sessions open; {} message(s) in flight",
            v.stores, v.chunks, v.locks_held, v.sessions_open, v.in_flight
        );
    }
    Ok(())
}

/// The persists that write `state` into an empty storage.
fn persists_of(state: &DevicePersist) -> Vec<tenure_core::io::PersistOp> {
    use tenure_core::io::PersistOp;
    let mut ops = vec![
        PersistOp::SetNextSerial(state.next_serial),
        PersistOp::SetTerm(state.term),
    ];
    ops.extend((state.members.iter()).map(|m| PersistOp::SetMembers(Box::new(m.clone()))));
    // The snapshots the device had recorded (a device that took part in an earlier
    // snapshot records them all; without them the restored state did not read back as
    // the part's).
    if !state.snapshots.is_empty() {
        ops.push(PersistOp::SetSnapshots(state.snapshots.clone()));
    }
    ops.extend((state.chunks.values()).map(|c| PersistOp::PutChunk(Box::new(c.clone()))));
    ops.extend((state.lookup.values()).map(|e| PersistOp::LookupPut(Box::new(e.clone()))));
    for (chunk, blocks) in &state.blocks {
        for (id, data) in blocks {
            ops.push(PersistOp::BlockPut {
                chunk: *chunk,
                id: *id,
                data: data.clone(),
            });
        }
    }
    ops
}

/// A restored device's channel messages in the order it receives them (each channel's
/// messages in order; the channels one after another, which FIFO per channel allows).
fn replay_of(part: &SnapshotPart) -> Vec<(DeviceId, Msg)> {
    (part.channels.iter())
        .flat_map(|(from, msgs)| msgs.iter().map(|m| (*from, m.clone())))
        .collect()
}

fn restore(a: RestoreArgs) -> anyhow::Result<()> {
    let dir = a.at.dir();
    let (m, v, parts) = verify(&dir, &a.at.id)?;
    if !v.problems.is_empty() {
        bail!(
            "not restoring snapshot {}: it fails verification (`tenure snapshot verify {}`):\n  - {}",
            a.at.id,
            a.at.id,
            v.problems.join("\n  - ")
        );
    }
    let into = &a.into;
    if into.exists()
        && std::fs::read_dir(into)
            .with_context(|| format!("reading {}", into.display()))?
            .next()
            .is_some()
    {
        bail!(
            "{} is not empty: restore writes a new cluster's data directory",
            into.display()
        );
    }
    let n = parts.len() as u64;
    // The devices keep their ids (a cluster that changed its members has gaps in them):
    // the recorded state names them.
    let ids: Vec<u64> = parts
        .iter()
        .map(|p| p.device.0)
        .collect::<BTreeSet<u64>>()
        .into_iter()
        .collect();
    let mut cfgs = crate::cluster::local_configs(&ids, m.stores, m.replication.max(1), 0, into)?;
    if !a.insecure {
        crate::cluster::secure(&mut cfgs, into)?;
    }
    let mut restored = Vec::new();
    for (cfg, part) in cfgs.iter().zip(sorted(&parts)) {
        let dev = part.device;
        let state = readdressed(&part.state, &cfgs);
        std::fs::create_dir_all(&cfg.data_dir)
            .with_context(|| format!("creating {}", cfg.data_dir.display()))?;
        let (mut storage, empty) = Storage::open(&cfg.data_dir, dev)
            .with_context(|| format!("creating the storage of device {}", dev.0))?;
        if empty != DevicePersist::default() {
            bail!("{} already holds a device's state", cfg.data_dir.display());
        }
        storage
            .commit(persists_of(&state))
            .with_context(|| format!("writing the state of device {}", dev.0))?;
        drop(storage);
        // Read it back as the server will.
        let (_, back) = Storage::open(&cfg.data_dir, dev)?;
        if back != state {
            bail!(
                "the restored storage of device {} does not read back as the snapshot's state",
                dev.0
            );
        }
        let replay = replay_of(part);
        if !replay.is_empty() {
            write_replay(&cfg.data_dir, &replay)?;
        }
        std::fs::write(cfg.data_dir.join("server.toml"), cfg.to_toml())?;
        restored.push(serde_json::json!({
            "device": dev.0,
            "data_dir": cfg.data_dir,
            "client_addr": cfg.client_listen,
            "chunks": part.state.chunks.len(),
            "replay_messages": replay.len(),
        }));
    }
    let from = serde_json::json!({"snapshot": m, "dir": std::path::absolute(&dir)?});
    write_durably(
        &into.join("restored-from.json"),
        serde_json::to_string_pretty(&from)?.as_bytes(),
    )?;
    if a.json {
        let out = serde_json::json!({"id": m.id, "into": std::path::absolute(into)?, "devices": restored});
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let msgs: u64 = restored
        .iter()
        .map(|r| r["replay_messages"].as_u64().unwrap_or(0))
        .sum();
    println!(
        "restored snapshot {} into {}: {} devices, {} chunk records, {} locks held and {} sessions open at the cut",
        m.id,
        into.display(),
        n,
        v.chunks,
        v.locks_held,
        v.sessions_open
    );
    println!(
        "  {msgs} recorded channel message(s) to replay at first boot; fresh ports (clients: {})",
        cfgs.iter()
            .map(|c| c.client_listen.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("start it with: tenure cluster up --data {}", into.display());
    Ok(())
}

/// `state` with the addresses its membership record gives the restored devices replaced
/// by their new ones (the restored cluster runs on fresh ports).
fn readdressed(
    state: &DevicePersist,
    cfgs: &[tenure_server::config::ServerConfig],
) -> DevicePersist {
    let mut state = state.clone();
    if let Some(m) = &mut state.members {
        for c in cfgs {
            if let Some(info) = m.devices.get_mut(&DeviceId(c.id)) {
                if !info.peer_addr.is_empty() {
                    info.peer_addr = c.peer_listen.to_string();
                }
                if !info.client_addr.is_empty() {
                    info.client_addr = c.client_listen.to_string();
                }
            }
        }
    }
    state
}

fn sorted(parts: &[SnapshotPart]) -> Vec<&SnapshotPart> {
    let mut v: Vec<&SnapshotPart> = parts.iter().collect();
    v.sort_by_key(|p| p.device);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    // A part's state written as persists reads back as itself, the snapshots its device
    // recorded before included (a device's second snapshot could not be restored).
    #[test]
    fn a_state_written_as_persists_reads_back_whole() {
        use tenure_core::snapshot::SnapshotId;
        let state = DevicePersist {
            next_serial: 7,
            snapshots: vec![SnapshotId {
                initiator: DeviceId(1),
                serial: 42,
            }],
            ..Default::default()
        };
        let mut back = DevicePersist::default();
        for op in persists_of(&state) {
            back.apply(&op);
        }
        assert_eq!(back, state);
    }

    #[test]
    fn dates_are_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339(1_798_761_599_000), "2026-12-31T23:59:59.000Z");
    }
}
