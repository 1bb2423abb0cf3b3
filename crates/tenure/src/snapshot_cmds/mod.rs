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
use crate::cluster::runtime;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

mod remote;
mod restore;
mod verify;

use remote::{create, ls, rm};
use restore::restore;
use verify::verify_cmd;

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

#[cfg(test)]
mod tests {
    use super::restore::persists_of;
    use super::*;
    use tenure_core::ids::DeviceId;
    use tenure_core::io::DevicePersist;

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
