//! `verify`: reading a fetched snapshot's manifest and parts and checking that they form
//! a consistent cut (every lock and session agrees across the devices).

use super::{MANIFEST, MANIFEST_FORMAT, Manifest, VerifyArgs};
use anyhow::{Context, bail};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use tenure_core::ids::{DeviceId, StoreId};
use tenure_core::lockctl::LockMode;
use tenure_core::snapshot::SnapshotPart;
use tenure_server::snapshots::{crc32, decode_part};

pub(super) fn read_manifest(dir: &Path) -> anyhow::Result<Manifest> {
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
pub(super) fn check_cut(m: &Manifest, parts: &[SnapshotPart], v: &mut Verified) {
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
        check_store(chunks, v);
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

/// The store invariants in `chunks`, the records of one store: the core's
/// [`tenure_core::snapshot::records`], which the simulator checks every cut with too.
pub(super) fn check_store(chunks: &[&tenure_core::io::ChunkPersist], v: &mut Verified) {
    let problems = tenure_core::snapshot::check_records(chunks.iter().copied());
    v.problems.extend(problems.iter().map(ToString::to_string));
}

pub(super) fn mode_name(m: LockMode) -> &'static str {
    match m {
        LockMode::Shared => "shared",
        LockMode::Exclusive => "exclusive",
    }
}

pub(super) fn verify_cmd(a: VerifyArgs) -> anyhow::Result<()> {
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
            "  cut: {} stores, {} chunk records; one manager and one layout per epoch; the same tables where \
             the same changes were confirmed; no conflicting holders; no fencing token held twice; \
             {} locks held, {} sessions open; {} message(s) in flight",
            v.stores, v.chunks, v.locks_held, v.sessions_open, v.in_flight
        );
    }
    Ok(())
}
