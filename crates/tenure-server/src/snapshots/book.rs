//! The [`Book`]: the snapshots this device took part in, the writer thread that makes
//! parts durable before their Done/Continue leaves, and retention of old parts.

use super::files::{crc32, encode_part, io_err, part_file_name, sync_dir, write_durably};
use super::{DELETING_SUFFIX, SNAPSHOTS_DIR, SnapshotError};
use crate::transport::Transport;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};
use tenure_core::ids::DeviceId;
use tenure_core::io::SnapshotSummary;
use tenure_core::msg::Msg;
use tenure_core::snapshot::{SnapMsg, SnapshotId, SnapshotPart};
use tokio::sync::watch;
use tracing::{error, info, warn};

/// The initiator's outcome of a snapshot, as kept on disk (`result.bin`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct Outcome {
    /// When it started (Unix ms).
    unix_ms: u64,
    /// How long it took (µs).
    pub(super) duration_us: u64,
    pub(super) result: Result<SnapshotSummary, String>,
}

impl Outcome {
    /// When it ended (Unix seconds).
    fn completed_secs(&self) -> f64 {
        self.unix_ms as f64 / 1e3 + self.duration_us as f64 / 1e6
    }
}

/// When the newest complete snapshot whose outcome is kept under `root` (the
/// initiator's `result.bin`) ended (Unix seconds).
fn last_success_on_disk(root: &Path) -> Option<f64> {
    std::fs::read_dir(root)
        .ok()?
        .flatten()
        .filter_map(|d| {
            let b = std::fs::read(d.path().join("result.bin")).ok()?;
            let o = postcard::from_bytes::<Outcome>(&b).ok()?;
            o.result.is_ok().then(|| o.completed_secs())
        })
        .max_by(f64::total_cmp)
}

/// This device's part of one snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) enum PartState {
    /// Not handed out by the core (yet).
    #[default]
    Recording,
    /// Being written: its Done/Continue waits in [`Entry::waiting`].
    Writing,
    /// On disk.
    Written { bytes: u64, crc32: u32 },
    /// Could not be written.
    Failed(String),
}

/// What this device knows of one snapshot.
#[derive(Clone, Debug, Default)]
pub(super) struct Entry {
    pub(super) initiated_here: bool,
    /// When it started here or the part was written (Unix ms).
    pub(super) unix_ms: u64,
    /// When it started here (for its duration).
    started: Option<std::time::Instant>,
    pub(super) part: PartState,
    /// Messages that leave once the part is durable (the device's Done/Continue).
    pub(super) waiting: Vec<(DeviceId, Msg)>,
    pub(super) outcome: Option<Outcome>,
}

/// The snapshots this device took part in, shared by the driver (which hands out parts,
/// results and its Done/Continue messages), the book's writer thread (which writes parts
/// and results) and the API (which waits for results and serves parts). Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Book {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
pub(super) struct Inner {
    /// `<data_dir>/snapshots` (none: parts cannot be written).
    dir: Option<PathBuf>,
    entries: Mutex<BTreeMap<SnapshotId, Entry>>,
    /// Bumped at every change (waiters look again).
    changed: watch::Sender<u64>,
    /// The writer thread's queue (none without a directory).
    writer: Option<Mutex<std::sync::mpsc::Sender<Job>>>,
    /// Where held messages go once their part is durable.
    transport: std::sync::OnceLock<Transport>,
    /// How many snapshots' directories are kept (0: all).
    keep: usize,
    /// Held while a snapshot's directory is removed (retention and `Delete` take turns).
    removing: Mutex<()>,
}

/// Work for the writer thread, done in order.
pub(super) enum Job {
    Part(Box<SnapshotPart>),
    Ended(SnapshotId, Result<SnapshotSummary, String>),
    /// Answers once every job before it is done.
    #[cfg(test)]
    Flush(std::sync::mpsc::SyncSender<()>),
}

pub(super) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Book {
    /// The book of the device whose data directory is `data_dir`: snapshots live in its
    /// `snapshots` directory, written by a thread of the book's own (it stops when the
    /// last clone of the book is dropped), which keeps the newest `keep` of them (0: all).
    /// Directories left half removed by a crash (`<id>.deleting`) are removed now.
    pub fn open(data_dir: &Path, keep: usize) -> Book {
        let dir = data_dir.join(SNAPSHOTS_DIR);
        clean_leftovers(&dir);
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let book = Book {
            inner: Arc::new(Inner {
                dir: Some(dir),
                writer: Some(Mutex::new(tx)),
                keep,
                ..Default::default()
            }),
        };
        // The age of the newest snapshot survives a restart of the device.
        if let Some(t) = book.inner.dir.as_deref().and_then(last_success_on_disk) {
            metrics::gauge!("tenure_snapshot_last_success_timestamp_seconds").set(t);
        }
        let weak = Arc::downgrade(&book.inner);
        let spawned = std::thread::Builder::new()
            .name("tenure-snapshots".into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    let Some(inner) = weak.upgrade() else {
                        return;
                    };
                    Book { inner }.run(job);
                }
            });
        if let Err(e) = spawned {
            error!("snapshot writer not started, snapshots will fail here: {e}");
        }
        book
    }

    /// Send the messages held for durable parts through `transport`.
    pub fn attach(&self, transport: Transport) {
        let _ = self.inner.transport.set(transport);
    }

    /// The directory of snapshot `id`.
    fn snapshot_dir(&self, id: SnapshotId) -> Option<PathBuf> {
        Some(self.inner.dir.as_ref()?.join(id.to_string()))
    }

    pub(super) fn update<T>(&self, id: SnapshotId, f: impl FnOnce(&mut Entry) -> T) -> T {
        let mut m = self.inner.entries.lock().unwrap_or_else(|e| e.into_inner());
        let r = f(m.entry(id).or_default());
        drop(m);
        self.inner.changed.send_modify(|n| *n += 1);
        r
    }

    pub(super) fn get(&self, id: SnapshotId) -> Option<Entry> {
        let m = self.inner.entries.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&id).cloned()
    }

    /// Hand a job to the writer thread, or do it here when there is none.
    pub(super) fn queue(&self, job: Job) {
        let sent = match &self.inner.writer {
            Some(w) => {
                let tx = w.lock().unwrap_or_else(|e| e.into_inner());
                tx.send(job).map_err(|e| e.0)
            }
            None => Err(job),
        };
        if let Err(job) = sent {
            self.run(job);
        }
    }

    fn run(&self, job: Job) {
        match job {
            Job::Part(p) => self.write_part(&p),
            Job::Ended(id, result) => self.end(id, result),
            #[cfg(test)]
            Job::Flush(done) => {
                let _ = done.send(());
            }
        }
    }

    /// The core started snapshot `id` here (`Output::SnapshotStarted`).
    pub fn started(&self, id: SnapshotId) {
        info!(snapshot = %id, "snapshot started");
        metrics::counter!("tenure_snapshots_started_total").increment(1);
        self.update(id, |e| {
            e.initiated_here = true;
            e.unix_ms = unix_ms(SystemTime::now());
            e.started = Some(std::time::Instant::now());
        });
    }

    /// This device's part of a snapshot (`Output::SnapshotPart`): written durably by the
    /// writer thread; until then the device's Done/Continue for it waits ([`Self::pass`]).
    pub fn record(&self, part: Box<SnapshotPart>) {
        self.update(part.id, |e| e.part = PartState::Writing);
        self.queue(Job::Part(part));
    }

    /// The initiator's result (`Output::SnapshotEnded`), recorded after its own part.
    pub fn ended(&self, id: SnapshotId, result: Result<SnapshotSummary, String>) {
        self.queue(Job::Ended(id, result));
    }

    /// What the driver sends to `to`: `msg`, unless it is the Done/Continue of a
    /// snapshot whose part is not durable yet (it leaves when the part is) or could not be
    /// written (it never leaves, so the snapshot fails at its initiator).
    pub fn pass(&self, to: DeviceId, msg: Msg) -> Option<Msg> {
        let (Msg::Snapshot(SnapMsg::Done { id, .. }) | Msg::Snapshot(SnapMsg::Continue { id, .. })) =
            &msg
        else {
            return Some(msg);
        };
        let id = *id;
        let mut m = self.inner.entries.lock().unwrap_or_else(|e| e.into_inner());
        match m.get_mut(&id) {
            Some(e) if e.part == PartState::Writing => {
                e.waiting.push((to, msg));
                None
            }
            Some(Entry {
                part: PartState::Failed(_),
                ..
            }) => None,
            _ => Some(msg),
        }
    }

    fn write_part(&self, part: &SnapshotPart) {
        let started = std::time::Instant::now();
        let id = part.id;
        let written = (|| {
            let dir = self.snapshot_dir(id).ok_or(SnapshotError::NoDir)?;
            let bytes = encode_part(part)?;
            write_durably(&dir.join(part_file_name(part.device)), &bytes)?;
            Ok::<_, SnapshotError>(PartState::Written {
                bytes: bytes.len() as u64,
                crc32: crc32(&bytes),
            })
        })();
        let seconds = started.elapsed().as_secs_f64();
        let state = match written {
            Ok(w) => {
                let in_flight: usize = part.channels.values().map(Vec::len).sum();
                if let PartState::Written { bytes, .. } = &w {
                    info!(snapshot = %id, bytes, chunks = part.state.chunks.len(), in_flight, seconds, "snapshot part written");
                    metrics::histogram!("tenure_snapshot_part_seconds").record(seconds);
                    metrics::gauge!("tenure_snapshot_part_bytes").set(*bytes as f64);
                }
                w
            }
            Err(e) => {
                // Its Done/Continue never leaves: the snapshot fails at its initiator, and
                // this device goes on serving.
                error!(snapshot = %id, "snapshot part not written, the snapshot will fail: {e}");
                metrics::counter!("tenure_snapshot_part_failures_total").increment(1);
                PartState::Failed(e.to_string())
            }
        };
        let durable = matches!(state, PartState::Written { .. });
        let waiting = self.update(id, |e| {
            if e.unix_ms == 0 {
                e.unix_ms = unix_ms(SystemTime::now());
            }
            e.part = state;
            std::mem::take(&mut e.waiting)
        });
        if durable && let Some(t) = self.inner.transport.get() {
            for (to, msg) in waiting {
                t.send(to, msg);
            }
        }
        if durable {
            self.retain();
        }
    }

    /// Remove the directories of the snapshots older than the newest `keep` (see the
    /// module documentation), except those still being written or running.
    fn retain(&self) {
        let keep = self.inner.keep;
        let Some(root) = &self.inner.dir else {
            return;
        };
        if keep == 0 {
            return;
        }
        let mut held = match held(root) {
            Ok(h) => h,
            Err(e) => {
                warn!(dir = %root.display(), "old snapshots not removed: {e}");
                return;
            }
        };
        if held.len() <= keep {
            return;
        }
        // Newest first: by the time written here, then by id.
        held.sort_by(|a, b| b.cmp(a));
        for (_, id) in held.into_iter().skip(keep) {
            match self.remove(id, "retention") {
                Ok(_) => {}
                Err(e @ SnapshotError::Busy { .. }) => {
                    info!(snapshot = %id, keep, "old snapshot kept for now: {e}")
                }
                Err(e) => warn!(snapshot = %id, keep, "old snapshot not removed: {e}"),
            }
        }
    }

    /// Remove this device's files of snapshot `id` (crash-safe: see the module
    /// documentation) and forget it. True when there were files to remove; `Busy` when
    /// its part is being written or it is running here. `reason` names the caller in the
    /// log and in `tenure_snapshots_removed_total`.
    pub fn remove(&self, id: SnapshotId, reason: &'static str) -> Result<bool, SnapshotError> {
        let _one_at_a_time = self
            .inner
            .removing
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let busy = |e: &Entry| -> Option<&'static str> {
            if e.part == PartState::Writing {
                Some("this device's part is still being written")
            } else if e.initiated_here && e.outcome.is_none() {
                Some("it is still running (this device initiated it)")
            } else {
                None
            }
        };
        if let Some(why) = self.get(id).as_ref().and_then(busy) {
            return Err(SnapshotError::Busy { id, why });
        }
        let forget = || {
            let mut m = self.inner.entries.lock().unwrap_or_else(|e| e.into_inner());
            if m.get(&id).is_some_and(|e| busy(e).is_none()) {
                m.remove(&id);
            }
            drop(m);
            self.inner.changed.send_modify(|n| *n += 1);
        };
        let Some(root) = &self.inner.dir else {
            forget();
            return Ok(false);
        };
        let dir = root.join(id.to_string());
        let doomed = root.join(format!("{id}{DELETING_SUFFIX}"));
        if doomed.exists() {
            // An earlier removal of the same snapshot that did not finish.
            std::fs::remove_dir_all(&doomed).map_err(io_err(&doomed))?;
        }
        match std::fs::rename(&dir, &doomed) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                forget();
                return Ok(false);
            }
            Err(e) => return Err(io_err(&dir)(e)),
        }
        // From here on the snapshot is gone, after a crash too.
        sync_dir(root)?;
        forget();
        if let Err(e) = std::fs::remove_dir_all(&doomed) {
            warn!(snapshot = %id, dir = %doomed.display(), "snapshot's files not all removed (the next start removes them): {e}");
        }
        info!(snapshot = %id, reason, keep = self.inner.keep, "snapshot's files removed from this device");
        metrics::counter!("tenure_snapshots_removed_total", "reason" => reason).increment(1);
        Ok(true)
    }

    fn end(&self, id: SnapshotId, result: Result<SnapshotSummary, String>) {
        let e = self.get(id).unwrap_or_default();
        // Every other part is durable when the result says complete; this device's own
        // part is the one the core cannot know about.
        let result = match (result, &e.part) {
            (Ok(_), PartState::Failed(why)) => Err(format!(
                "this device (the initiator) could not write its part: {why}"
            )),
            (Ok(_), PartState::Recording | PartState::Writing) => {
                Err("this device's part was not recorded".into())
            }
            (r, _) => r,
        };
        let outcome = Outcome {
            unix_ms: e.unix_ms,
            duration_us: e.started.map_or(0, |s| s.elapsed().as_micros() as u64),
            result,
        };
        match &outcome.result {
            Ok(s) => {
                info!(snapshot = %id, devices = s.devices.len(), terminated = s.terminated, ms = outcome.duration_us / 1000, "snapshot complete");
                metrics::counter!("tenure_snapshots_total", "result" => "complete").increment(1);
                metrics::histogram!("tenure_snapshot_seconds")
                    .record(outcome.duration_us as f64 / 1e6);
                metrics::gauge!("tenure_snapshot_last_success_timestamp_seconds")
                    .set(outcome.completed_secs());
            }
            Err(why) => {
                warn!(snapshot = %id, "snapshot failed: {why}");
                metrics::counter!("tenure_snapshots_total", "result" => "failed").increment(1);
            }
        }
        if let Some(dir) = self.snapshot_dir(id) {
            let saved = postcard::to_stdvec(&outcome)
                .map_err(SnapshotError::Encode)
                .and_then(|b| write_durably(&dir.join("result.bin"), &b));
            if let Err(e) = saved {
                warn!(snapshot = %id, "snapshot result not saved: {e}");
            }
        }
        self.update(id, |e| e.outcome = Some(outcome));
    }

    /// Wait until snapshot `id`, started here, has ended.
    pub(super) async fn outcome(&self, id: SnapshotId) -> Outcome {
        let mut rx = self.inner.changed.subscribe();
        loop {
            if let Some(o) = self.get(id).and_then(|e| e.outcome) {
                return o;
            }
            // The sender lives as long as `self`.
            let _ = rx.changed().await;
        }
    }

    /// Every snapshot this device knows of: the ones in memory, and those whose
    /// directories are on disk (from before a restart).
    pub(super) fn list(&self) -> Vec<(SnapshotId, Entry)> {
        let mut all: BTreeMap<SnapshotId, Entry> = {
            let m = self.inner.entries.lock().unwrap_or_else(|e| e.into_inner());
            m.clone()
        };
        let Some(dir) = &self.inner.dir else {
            return all.into_iter().collect();
        };
        let Ok(rd) = std::fs::read_dir(dir) else {
            return all.into_iter().collect();
        };
        for d in rd.flatten() {
            let Some(id) = (d.file_name().to_str()).and_then(|s| s.parse::<SnapshotId>().ok())
            else {
                continue;
            };
            let e = all.entry(id).or_default();
            if e.outcome.is_none()
                && let Ok(b) = std::fs::read(d.path().join("result.bin"))
                && let Ok(o) = postcard::from_bytes::<Outcome>(&b)
            {
                e.initiated_here = true;
                e.unix_ms = o.unix_ms;
                e.outcome = Some(o);
            }
            if e.part == PartState::Recording
                && let Some(path) = self.part_path(id)
                && let Ok(bytes) = std::fs::read(&path)
            {
                e.part = PartState::Written {
                    bytes: bytes.len() as u64,
                    crc32: crc32(&bytes),
                };
                if e.unix_ms == 0 {
                    e.unix_ms = (std::fs::metadata(&path).and_then(|m| m.modified()))
                        .map(unix_ms)
                        .unwrap_or(0);
                }
            }
        }
        all.into_iter().collect()
    }

    /// Where this device's part of `id` is (whether or not it exists).
    pub(super) fn part_path(&self, id: SnapshotId) -> Option<PathBuf> {
        // The file name holds the device id, which the directory's only part file has.
        let dir = self.snapshot_dir(id)?;
        let rd = std::fs::read_dir(&dir).ok()?;
        rd.flatten()
            .map(|d| d.path())
            .find(|p| p.extension().is_some_and(|x| x == "part"))
    }
}

/// Remove what removals interrupted by a crash left in `root` (`<id>.deleting`).
pub(super) fn clean_leftovers(root: &Path) {
    let Ok(rd) = std::fs::read_dir(root) else {
        return;
    };
    for d in rd.flatten() {
        let name = d.file_name();
        if !name.to_string_lossy().ends_with(DELETING_SUFFIX) {
            continue;
        }
        let path = d.path();
        match std::fs::remove_dir_all(&path) {
            Ok(()) => {
                info!(dir = %path.display(), "removed a snapshot's directory whose removal a crash interrupted")
            }
            Err(e) => warn!(dir = %path.display(), "a half-removed snapshot directory stays: {e}"),
        }
    }
}

/// The snapshots whose directories are in `root`, each with the time it was written here:
/// its part file's modification time, or the directory's when it holds no part.
pub(super) fn held(root: &Path) -> std::io::Result<Vec<(SystemTime, SnapshotId)>> {
    let mut out = Vec::new();
    for d in std::fs::read_dir(root)?.flatten() {
        let Some(id) = (d.file_name().to_str()).and_then(|s| s.parse::<SnapshotId>().ok()) else {
            continue;
        };
        let dir = d.path();
        // Not a directory, or removed meanwhile (`Delete`): not held.
        let Ok(files) = std::fs::read_dir(&dir) else {
            continue;
        };
        let part = (files.flatten())
            .map(|f| f.path())
            .find(|p| p.extension().is_some_and(|x| x == "part"));
        let written = part
            .and_then(|p| std::fs::metadata(p).ok())
            .or_else(|| std::fs::metadata(&dir).ok())
            .and_then(|m| m.modified().ok())
            .unwrap_or(UNIX_EPOCH);
        out.push((written, id));
    }
    Ok(out)
}
