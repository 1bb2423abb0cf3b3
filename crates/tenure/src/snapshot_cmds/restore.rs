//! `restore`: writing a verified snapshot's parts into fresh data directories, with the
//! channel messages each device replays on its first start.

use super::RestoreArgs;
use super::verify::verify;
use anyhow::{Context, bail};
use std::collections::BTreeSet;
use tenure_core::ids::DeviceId;
use tenure_core::io::DevicePersist;
use tenure_core::msg::Msg;
use tenure_core::snapshot::SnapshotPart;
use tenure_server::snapshots::{write_durably, write_replay};
use tenure_server::storage::Storage;

/// The persists that write `state` into an empty storage.
pub(super) fn persists_of(state: &DevicePersist) -> Vec<tenure_core::io::PersistOp> {
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
pub(super) fn replay_of(part: &SnapshotPart) -> Vec<(DeviceId, Msg)> {
    (part.channels.iter())
        .flat_map(|(from, msgs)| msgs.iter().map(|m| (*from, m.clone())))
        .collect()
}

pub(super) fn restore(a: RestoreArgs) -> anyhow::Result<()> {
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
    let mut cfgs =
        crate::cluster::configs::local_configs(&ids, m.stores, m.replication.max(1), 0, into)?;
    if !a.insecure {
        crate::cluster::configs::secure(&mut cfgs, into)?;
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
pub(super) fn readdressed(
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

pub(super) fn sorted(parts: &[SnapshotPart]) -> Vec<&SnapshotPart> {
    let mut v: Vec<&SnapshotPart> = parts.iter().collect();
    v.sort_by_key(|p| p.device);
    v
}
