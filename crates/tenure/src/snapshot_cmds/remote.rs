//! `create`, `ls` and `rm`: the snapshot commands that ask a running cluster.

use super::verify::read_manifest;
use super::{
    CreateArgs, LsArgs, MANIFEST, MANIFEST_FORMAT, Manifest, ManifestPart, RmArgs, human_bytes,
    rfc3339,
};
use anyhow::{Context, bail};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tenure_core::ids::DeviceId;
use tenure_core::snapshot::SnapshotId;
use tenure_server::snapshots::{decode_part, part_file_name, write_durably};

pub(super) async fn create(a: CreateArgs) -> anyhow::Result<()> {
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
pub(super) struct Listed {
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

pub(super) async fn ls(a: LsArgs) -> anyhow::Result<()> {
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
pub(super) struct RmAnswer {
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
pub(super) fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e;
    while let Some(s) = last.source() {
        last = s;
    }
    last.to_string()
}

pub(super) async fn rm(a: RmArgs) -> anyhow::Result<()> {
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
