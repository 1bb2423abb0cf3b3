//! `bench scale --snapshot`: while the sessions hold their locks, a consistent snapshot of
//! the whole cluster is taken (`snapshot create`), checked (`snapshot verify`), written
//! into a new cluster's data directory (`snapshot restore`), and that cluster started
//! (`cluster up`) on fresh ports beside the original: each step timed as a user runs it
//! (the same binary, as a subprocess), the snapshot's size on disk, and a sample of the
//! held locks and of the objects read back from the restored cluster. The restored
//! cluster and the snapshot are removed at the end.

use super::tenure::Holder;
use super::{ScaleArgs, SnapshotRun, disk_bytes, object_key};
use crate::cluster::file::ClusterFile;
use anyhow::{Context, ensure};
use std::path::Path;
use std::time::{Duration, Instant};
use tenure_client::ClientOptions;

/// Locks and objects read back from the restored cluster, at most.
const SAMPLE: usize = 1000;

/// Run `tenure args…` to its end: seconds taken and stdout.
async fn tenure(args: &[&str]) -> anyhow::Result<(f64, String)> {
    let started = Instant::now();
    let out = tokio::process::Command::new(std::env::current_exe()?)
        .args(args)
        .stderr(std::process::Stdio::inherit())
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "`tenure {}` failed: {}",
        args.join(" "),
        out.status
    );
    Ok((
        started.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    ))
}

fn utf8(p: &Path) -> anyhow::Result<&str> {
    p.to_str()
        .context("a data directory whose path is not UTF-8")
}

pub(super) async fn snapshot(a: &ScaleArgs, held: &[Holder]) -> anyhow::Result<SnapshotRun> {
    let data = a.target.data.clone();
    let d = utf8(&data)?;
    eprintln!("snapshot: create");
    let (create_s, out) = tenure(&["snapshot", "create", "--data", d]).await?;
    let id = out
        .lines()
        .last()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .context("`snapshot create` printed no id")?
        .to_string();
    let size_mb = disk_bytes(&data.join("snapshots").join(&id)) as f64 / (1 << 20) as f64;
    eprintln!("snapshot: {id} ({size_mb:.0} MB) verify");
    let (verify_s, _) = tenure(&["snapshot", "verify", "--data", d, &id]).await?;
    let into = data.with_file_name(format!(
        "{}-restored-{id}",
        data.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("tenure-data")
    ));
    let _ = std::fs::remove_dir_all(&into);
    let i = utf8(&into)?;
    let file = ClusterFile::load(&data)?;
    let mut restore = vec!["snapshot", "restore", "--data", d, "--into", i, &id];
    if file.ca.is_none() {
        restore.push("--insecure");
    }
    eprintln!("snapshot: restore");
    let (restore_s, _) = tenure(&restore).await?;
    eprintln!("snapshot: cluster up of the restored cluster");
    let up = tenure(&["cluster", "up", "--data", i]).await;
    let result = match up {
        Ok((up_s, _)) => read_back(a, held, &into)
            .await
            .map(|(locks, objects)| (up_s, locks, objects)),
        Err(e) => Err(e),
    };
    let _ = tenure(&["cluster", "down", "--data", i]).await;
    let _ = std::fs::remove_dir_all(&into);
    let _ = tenure(&["snapshot", "rm", "--data", d, &id]).await;
    let (up_s, locks, objects) = result?;
    Ok(SnapshotRun {
        id,
        create_s,
        size_mb,
        verify_s,
        restore_s,
        up_s,
        locks_checked: locks.0,
        locks_missing: locks.1,
        objects_checked: objects.0,
        objects_missing: objects.1,
    })
}

/// A sample of the held locks (held with the same token) and of the objects, read from
/// the restored cluster under `into`: (checked, missing) of each.
async fn read_back(
    a: &ScaleArgs,
    held: &[Holder],
    into: &Path,
) -> anyhow::Result<((u64, u64), (u64, u64))> {
    let file = ClusterFile::load(into)?;
    let c = file.client(ClientOptions::default())?;
    let guards: Vec<_> = held.iter().flat_map(|h| h.guards.iter()).collect();
    let step = guards.len().div_ceil(SAMPLE).max(1);
    let mut locks = (0, 0);
    for g in guards.iter().step_by(step) {
        locks.0 += 1;
        let read = tokio::time::timeout(Duration::from_secs(10), c.holders(g.name())).await;
        let kept = matches!(read, Ok(Ok(st)) if st.holders.iter().any(|h| h.token == g.token()));
        if !kept {
            locks.1 += 1;
        }
    }
    let objects_c = c.objects();
    let step = (a.objects as usize).div_ceil(SAMPLE).max(1);
    let mut objects = (0, 0);
    for i in (0..a.objects).step_by(step) {
        objects.0 += 1;
        if objects_c.get(&object_key(i, a.prefixes)).await.is_err() {
            objects.1 += 1;
        }
    }
    let _ = c.close().await;
    Ok((locks, objects))
}
