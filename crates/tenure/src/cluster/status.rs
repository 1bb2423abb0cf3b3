//! Every device's Status answer, the managers and the coordinator they report, and
//! `tenure cluster status`.

use super::file::ClusterFile;
use super::{CommonArgs, runtime};
use std::collections::BTreeMap;
use tenure_client::proto::{ChunkRef, ManagerStatus, StatusResponse};
use tenure_client::{Client, ClientOptions};

/// What a device's Status answer says about it, or why there is none.
pub(crate) type Statuses = BTreeMap<u64, Result<StatusResponse, String>>;

/// Every device's Status answer, or the error that stood for it.
pub(crate) async fn statuses(client: &Client, file: &ClusterFile) -> Statuses {
    let mut out = BTreeMap::new();
    for d in &file.devices {
        let s = client.status_of(&d.client_addr.to_string()).await;
        out.insert(d.id, s.map_err(|e| e.to_string()));
    }
    out
}

/// store → (device, epoch) for every store some device reports managing.
pub(crate) fn managers(statuses: &Statuses) -> BTreeMap<u32, (u64, u64)> {
    let mut out = BTreeMap::new();
    for s in statuses.values().flatten() {
        for m in s.managers.iter().filter(|m| m.is_manager()) {
            let e = out.entry(m.store).or_insert((s.device, m.epoch));
            if m.epoch > e.1 {
                *e = (s.device, m.epoch);
            }
        }
    }
    out
}

/// The coordinator as a cluster's devices report it (DESIGN §6): JSON, and one line for
/// people. The coordinator is the one named with the highest term; the devices that name
/// another (or none) are listed, as is whether the named device acts as coordinator.
pub(crate) fn coordinator_summary(answers: &[&StatusResponse]) -> (serde_json::Value, String) {
    let views: Vec<serde_json::Value> = answers
        .iter()
        .map(|s| {
            serde_json::json!({"device": s.device, "coordinator": s.coordinator,
                "term": s.coordinator_term, "acting": s.acting_coordinator})
        })
        .collect();
    let best = answers
        .iter()
        .filter_map(|s| Some((s.coordinator_term, s.coordinator?)))
        .max();
    let Some((term, leader)) = best else {
        let line = format!(
            "coordinator: none known ({} devices answered; an election may be running)",
            answers.len()
        );
        return (serde_json::json!({"device": null, "views": views}), line);
    };
    let agree: Vec<u64> = answers
        .iter()
        .filter(|s| s.coordinator == Some(leader) && s.coordinator_term == term)
        .map(|s| s.device)
        .collect();
    let others: Vec<String> = answers
        .iter()
        .filter(|s| !agree.contains(&s.device))
        .map(|s| match s.coordinator {
            Some(c) => format!("d{} follows d{c} (term {})", s.device, s.coordinator_term),
            None => format!("d{} knows none", s.device),
        })
        .collect();
    let acting = answers
        .iter()
        .any(|s| s.device == leader && s.acting_coordinator);
    let mut line = format!(
        "coordinator: d{leader} (term {term}){}, followed by {} of {} devices answering",
        if acting { ", acting" } else { "" },
        agree.len(),
        answers.len()
    );
    if !others.is_empty() {
        line.push_str(&format!(" ({})", others.join("; ")));
    }
    let json = serde_json::json!({"device": leader, "term": term, "acting": acting,
        "followed_by": agree, "views": views});
    (json, line)
}

pub(super) fn status(a: CommonArgs) -> anyhow::Result<()> {
    let file = ClusterFile::load(&a.data)?;
    let rt = runtime()?;
    rt.block_on(async {
        let client = file.client(ClientOptions::default())?;
        let mut devices = Vec::new();
        // store → (device, its manager role) for every device that reports a role.
        let mut stores: BTreeMap<u32, Vec<(u64, ManagerStatus)>> = BTreeMap::new();
        let mut answers = Vec::new();
        for d in &file.devices {
            match client.status_of(&d.client_addr.to_string()).await {
                Ok(s) => {
                    answers.push(s.clone());
                    for m in &s.managers {
                        stores.entry(m.store).or_default().push((s.device, m.clone()));
                    }
                    devices.push(serde_json::json!({
                        "id": d.id, "pid": d.pid, "up": true, "client": d.client_addr,
                        "chunks": s.chunks.len(),
                        "managing": s.managers.iter().filter(|m| m.is_manager()).count(),
                    }));
                }
                Err(e) => devices.push(serde_json::json!({
                    "id": d.id, "pid": d.pid, "up": false, "client": d.client_addr, "error": e.to_string(),
                })),
            }
        }
        let membership = super::members::annotate(&client, &mut devices).await;
        let (coordinator, coordinator_line) =
            coordinator_summary(&answers.iter().collect::<Vec<_>>());
        if a.json {
            let stores: Vec<_> = (0..file.stores)
                .map(|s| {
                    let roles = stores.get(&s).map_or(&[][..], Vec::as_slice);
                    let managers: Vec<_> = roles.iter().map(|(d, m)| role_json(*d, m)).collect();
                    serde_json::json!({"store": s, "managers": managers})
                })
                .collect();
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({"devices": devices,
                    "coordinator": coordinator, "stores": stores}))?
            );
            return anyhow::Ok(());
        }
        println!("{membership}");
        println!("devices:");
        for d in &devices {
            if d["up"] == true {
                println!(
                    "  d{} pid {} at {}: up, {} chunks, manages {} stores",
                    d["id"], d["pid"], d["client"].as_str().unwrap_or(""), d["chunks"], d["managing"]
                );
            } else {
                println!(
                    "  d{} pid {} at {}: DOWN ({})",
                    d["id"], d["pid"], d["client"].as_str().unwrap_or(""), d["error"].as_str().unwrap_or("")
                );
            }
        }
        println!("{coordinator_line}");
        println!("stores:");
        let mut unmanaged = 0;
        for s in 0..file.stores {
            let roles = stores.get(&s).map_or(&[][..], Vec::as_slice);
            let managers: Vec<_> = roles.iter().filter(|(_, m)| m.is_manager()).collect();
            match managers.as_slice() {
                [(device, m)] => println!(
                    "  s{s:<4} manager d{device} epoch {:<4} chunks {}{}",
                    m.epoch,
                    chunk_names(&m.chunks).join(","),
                    if m.failed.is_empty() {
                        String::new()
                    } else {
                        format!(" (failed: {})", chunk_names(&m.failed).join(","))
                    }
                ),
                [] => {
                    unmanaged += 1;
                    let other: Vec<String> =
                        roles.iter().map(|(d, m)| format!("d{d} {}", m.state)).collect();
                    println!("  s{s:<4} NO MANAGER {}", other.join(", "));
                }
                many => println!(
                    "  s{s:<4} {} devices claim it: {}",
                    many.len(),
                    many.iter()
                        .map(|(d, m)| format!("d{d} e{}", m.epoch))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
        println!(
            "{} of {} stores have a manager",
            file.stores - unmanaged,
            file.stores
        );
        anyhow::Ok(())
    })
}

/// A chunk's name in `cluster status`: `c<device>.<serial>`.
fn chunk_names(chunks: &[ChunkRef]) -> Vec<String> {
    chunks
        .iter()
        .map(|c| format!("c{}.{}", c.device, c.serial))
        .collect()
}

/// One device's manager role for a store, as `cluster status --json` lists it.
fn role_json(device: u64, m: &ManagerStatus) -> serde_json::Value {
    serde_json::json!({
        "device": device, "state": m.state, "epoch": m.epoch,
        "chunks": chunk_names(&m.chunks), "failed": chunk_names(&m.failed),
    })
}
