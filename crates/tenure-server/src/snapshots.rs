//! Snapshots at the server (DESIGN §6; seed 002 §14.1–§14.2): the files a device writes,
//! the book of the snapshots it took part in, and the gRPC API (`service Snapshots` in
//! `proto/snapshots.proto`).
//!
//! The core records a device's part of a snapshot ([`tenure_core::io::Output::SnapshotPart`]) and, at the
//! initiator, its result ([`tenure_core::io::Output::SnapshotEnded`]). The driver hands both to the
//! [`Book`] ([`Book::record`], [`Book::ended`]), whose thread writes them in order, off the
//! path of the storage commits: the stores go on committing while a part is written. The
//! part must be durable before the device tells its predecessor it is done, so the
//! driver passes every message through [`Book::pass`] as it leaves: a Done/Continue whose
//! part is still being written waits in the book and leaves from the writer thread once
//! the part is durable (it needs no place among the device's other messages: it closes
//! nothing, the channels' markers went out when the device recorded). A snapshot the
//! initiator reports complete is therefore on disk at every device of it. A part that
//! cannot be written (disk full) is not fatal: its Done/Continue never leaves, so the
//! snapshot fails at the initiator on its timeout, naming this device, and the service
//! goes on.
//!
//! The part holds the device's state as the core recorded it, which may include persists
//! of the open commit group: a Done/Continue is also a device-wide output, held until
//! every persist before it is durable, so a snapshot that completes never holds state
//! its device could lose in a crash.
//!
//! Files, under the device's data directory:
//!
//! ```text
//! snapshots/<id>/device-<n>.part   the part: header + postcard-encoded SnapshotPart
//! snapshots/<id>/result.bin        at the initiator: the outcome (postcard)
//! snapshot-replay.bin              a restored device's recorded channel messages
//! ```
//!
//! Retention: a device keeps its parts of the newest `[snapshot] keep` snapshots (10 by
//! default; 0 keeps every one). Once a part is durable, the writer thread removes the
//! directories of older ones. "Newest" is by the time the part was written here (the part
//! file's modification time; the directory's for a snapshot without a part, such as one
//! whose part could not be written): snapshot ids do not order snapshots of different
//! initiators, whose serials come from different clocks. A snapshot whose part is still
//! being written, or that this device initiated and is still running, is never removed
//! (it stays until a later part is written). `Delete` (`tenure snapshot rm`) removes one
//! snapshot's directory at once, under the same rule.
//!
//! Removal is crash-safe: the directory is renamed to `<id>.deleting` (which is not a
//! snapshot's name, so nothing lists it), the snapshots directory is fsynced, then the
//! renamed directory is removed; a crash in between leaves a `.deleting` directory, which
//! the next start removes ([`Book::open`]). A `FetchPart` reads the whole part before it
//! sends any of it: a removal during its read either leaves it the whole file (an open
//! file outlives its name) or makes it answer `no_such_part`.
//!
//! A part file and a replay file start with a 24-byte header: 8 bytes of magic, the
//! format (u32), the CRC-32 of the content (u32) and its length (u64), little-endian. A
//! file is written to a temporary name, fsynced, renamed, and its directory fsynced.
//!
//! Replay (`tenure snapshot restore`): a restored device's data directory holds the
//! messages its incoming channels had in flight at the cut. At boot, before any other
//! input, the server renames the file away (durably) and feeds the messages to the core
//! as `Input::Message`s ([`take_replay`], then `Driver::replay`). Renaming first makes
//! the replay happen at most once: a crash in between loses the messages, which the core
//! takes as a broken peer connection (peer channels may lose what was queued on them),
//! where a second replay would deliver them twice.

use crate::driver::Call;
use crate::transport::Transport;
use futures::Stream;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tenure_client::proto::{self, snapshots_server::Snapshots};
use tenure_core::ids::DeviceId;
use tenure_core::io::SnapshotSummary;
use tenure_core::msg::Msg;
use tenure_core::snapshot::{SnapMsg, SnapshotId, SnapshotPart};
use tokio::sync::{mpsc, oneshot, watch};
use tonic::{Request as GrpcRequest, Response as GrpcResponse, Status};
use tracing::{error, info, warn};

/// Magic of a part file.
pub const PART_MAGIC: [u8; 8] = *b"TNRPART\0";
/// Magic of a replay file.
pub const REPLAY_MAGIC: [u8; 8] = *b"TNRRPLY\0";
/// Format of both files this build writes and reads.
pub const FORMAT: u32 = 1;
/// Size of a file's header.
pub const HEADER_BYTES: usize = 24;
/// The replay file in a device's data directory.
pub const REPLAY_FILE: &str = "snapshot-replay.bin";
/// What the replay file is renamed to before it is replayed.
pub const REPLAYED_FILE: &str = "snapshot-replay.done";
/// The snapshots directory in a device's data directory.
pub const SNAPSHOTS_DIR: &str = "snapshots";
/// What a snapshot's directory is renamed to while it is removed (`<id>.deleting`).
pub const DELETING_SUFFIX: &str = ".deleting";
/// How much of a part one `FetchPart` message carries.
const CHUNK_BYTES: usize = 256 * 1024;

/// Snapshot file and service failures.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Encoding failed.
    #[error("encoding a snapshot file: {0}")]
    Encode(postcard::Error),
    /// The file does not start with the magic of its kind.
    #[error("not a {what} file (its first bytes are not the {what} magic)")]
    Magic {
        /// Part or replay.
        what: &'static str,
    },
    /// The file's format is not one this build reads.
    #[error("{what} file of format {found}; this build reads format {FORMAT}")]
    Format {
        /// Part or replay.
        what: &'static str,
        /// The format found.
        found: u32,
    },
    /// The file is shorter or longer than its header says.
    #[error(
        "{what} file is truncated or padded: its header announces {expected} bytes of content, {found} follow"
    )]
    Length {
        /// Part or replay.
        what: &'static str,
        /// Length in the header.
        expected: u64,
        /// Bytes present.
        found: u64,
    },
    /// The content's checksum is not the header's.
    #[error(
        "{what} file is corrupt: its content has CRC-32 {found:#010x}, its header says {expected:#010x}"
    )]
    Checksum {
        /// Part or replay.
        what: &'static str,
        /// CRC-32 in the header.
        expected: u32,
        /// CRC-32 of the content.
        found: u32,
    },
    /// The content does not decode.
    #[error("{what} file does not decode: {source}")]
    Decode {
        /// Part or replay.
        what: &'static str,
        /// Why.
        source: postcard::Error,
    },
    /// The book has no directory to write to.
    #[error("this device has no snapshot directory")]
    NoDir,
    /// A snapshot's files were not removed: its part is still being written, or it is
    /// still running at this device, its initiator.
    #[error("snapshot {id} is not removed: {why}")]
    Busy {
        /// The snapshot.
        id: SnapshotId,
        /// What it is still doing.
        why: &'static str,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SnapshotError + '_ {
    move |source| SnapshotError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// CRC-32 (IEEE) of `bytes`: the checksum of part files and of snapshot manifests.
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

fn frame(magic: [u8; 8], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + body.len());
    out.extend_from_slice(&magic);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    out.extend_from_slice(&crc32(body).to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(body);
    out
}

fn unframe<'a>(
    magic: [u8; 8],
    what: &'static str,
    bytes: &'a [u8],
) -> Result<&'a [u8], SnapshotError> {
    if bytes.len() < HEADER_BYTES || bytes[..8] != magic {
        return Err(SnapshotError::Magic { what });
    }
    let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
    let format = u32_at(8);
    if format != FORMAT {
        return Err(SnapshotError::Format {
            what,
            found: format,
        });
    }
    let expected_crc = u32_at(12);
    let len = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
    let body = &bytes[HEADER_BYTES..];
    if body.len() as u64 != len {
        return Err(SnapshotError::Length {
            what,
            expected: len,
            found: body.len() as u64,
        });
    }
    let found = crc32(body);
    if found != expected_crc {
        return Err(SnapshotError::Checksum {
            what,
            expected: expected_crc,
            found,
        });
    }
    Ok(body)
}

/// A part file's bytes.
pub fn encode_part(part: &SnapshotPart) -> Result<Vec<u8>, SnapshotError> {
    let body = postcard::to_stdvec(part).map_err(SnapshotError::Encode)?;
    Ok(frame(PART_MAGIC, &body))
}

/// Read a part file's bytes (header, length, checksum, content).
pub fn decode_part(bytes: &[u8]) -> Result<SnapshotPart, SnapshotError> {
    let what = "snapshot part";
    let body = unframe(PART_MAGIC, what, bytes)?;
    postcard::from_bytes(body).map_err(|source| SnapshotError::Decode { what, source })
}

/// The name of a device's part file in a snapshot's directory.
pub fn part_file_name(device: DeviceId) -> String {
    format!("device-{}.part", device.0)
}

/// Write `bytes` to `path` durably: a temporary file, fsync, rename, fsync of the
/// directory. A crash leaves the old file or the new one, never a mix.
pub fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), SnapshotError> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::File::create(&tmp).map_err(io_err(&tmp))?;
    f.write_all(bytes).map_err(io_err(&tmp))?;
    f.sync_all().map_err(io_err(&tmp))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io_err(path))?;
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> Result<(), SnapshotError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// Write a restored device's recorded channel messages (in the order it must receive
/// them) into its data directory, for the server to replay at boot.
pub fn write_replay(data_dir: &Path, msgs: &[(DeviceId, Msg)]) -> Result<(), SnapshotError> {
    let body = postcard::to_stdvec(msgs).map_err(SnapshotError::Encode)?;
    write_durably(&data_dir.join(REPLAY_FILE), &frame(REPLAY_MAGIC, &body))
}

/// Read a replay file's messages.
pub fn read_replay(path: &Path) -> Result<Vec<(DeviceId, Msg)>, SnapshotError> {
    let what = "snapshot replay";
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    let body = unframe(REPLAY_MAGIC, what, &bytes)?;
    postcard::from_bytes(body).map_err(|source| SnapshotError::Decode { what, source })
}

/// At boot: the messages a restored device must receive before anything else, taken out
/// of its data directory (renamed to [`REPLAYED_FILE`], durably, before they are handed
/// out: see the module documentation). None when there is nothing to replay.
pub fn take_replay(data_dir: &Path) -> Result<Vec<(DeviceId, Msg)>, SnapshotError> {
    let path = data_dir.join(REPLAY_FILE);
    if !path.exists() {
        return Ok(Vec::new());
    }
    let msgs = read_replay(&path)?;
    let done = data_dir.join(REPLAYED_FILE);
    std::fs::rename(&path, &done).map_err(io_err(&path))?;
    sync_dir(data_dir)?;
    info!(
        messages = msgs.len(),
        file = %done.display(),
        "replaying the channel messages recorded in the snapshot this device was restored from"
    );
    Ok(msgs)
}

/// The initiator's outcome of a snapshot, as kept on disk (`result.bin`).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Outcome {
    /// When it started (Unix ms).
    unix_ms: u64,
    /// How long it took (µs).
    duration_us: u64,
    result: Result<SnapshotSummary, String>,
}

/// This device's part of one snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
enum PartState {
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
struct Entry {
    initiated_here: bool,
    /// When it started here or the part was written (Unix ms).
    unix_ms: u64,
    /// When it started here (for its duration).
    started: Option<std::time::Instant>,
    part: PartState,
    /// Messages that leave once the part is durable (the device's Done/Continue).
    waiting: Vec<(DeviceId, Msg)>,
    outcome: Option<Outcome>,
}

/// The snapshots this device took part in, shared by the driver (which hands out parts,
/// results and its Done/Continue messages), the book's writer thread (which writes parts
/// and results) and the API (which waits for results and serves parts). Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Book {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
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
enum Job {
    Part(Box<SnapshotPart>),
    Ended(SnapshotId, Result<SnapshotSummary, String>),
    /// Answers once every job before it is done.
    #[cfg(test)]
    Flush(std::sync::mpsc::SyncSender<()>),
}

fn unix_ms(t: SystemTime) -> u64 {
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

    fn update<T>(&self, id: SnapshotId, f: impl FnOnce(&mut Entry) -> T) -> T {
        let mut m = self.inner.entries.lock().unwrap_or_else(|e| e.into_inner());
        let r = f(m.entry(id).or_default());
        drop(m);
        self.inner.changed.send_modify(|n| *n += 1);
        r
    }

    fn get(&self, id: SnapshotId) -> Option<Entry> {
        let m = self.inner.entries.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&id).cloned()
    }

    /// Hand a job to the writer thread, or do it here when there is none.
    fn queue(&self, job: Job) {
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
    async fn outcome(&self, id: SnapshotId) -> Outcome {
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
    fn list(&self) -> Vec<(SnapshotId, Entry)> {
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
    fn part_path(&self, id: SnapshotId) -> Option<PathBuf> {
        // The file name holds the device id, which the directory's only part file has.
        let dir = self.snapshot_dir(id)?;
        let rd = std::fs::read_dir(&dir).ok()?;
        rd.flatten()
            .map(|d| d.path())
            .find(|p| p.extension().is_some_and(|x| x == "part"))
    }
}

/// Remove what removals interrupted by a crash left in `root` (`<id>.deleting`).
fn clean_leftovers(root: &Path) {
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
fn held(root: &Path) -> std::io::Result<Vec<(SystemTime, SnapshotId)>> {
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

/// The snapshots service.
#[derive(Clone, Debug)]
pub struct SnapshotsApi {
    calls: mpsc::Sender<Call>,
    book: Book,
    device: DeviceId,
    /// How long `Create` waits for the result.
    wait: Duration,
    auth: crate::auth::Auth,
}

impl SnapshotsApi {
    /// A service that starts snapshots through the driver behind `calls` and reads their
    /// outcome from `book`; `Create` waits at most `wait` (the core fails a snapshot
    /// whose peers are silent past its `[snapshot] timeout`, so this is a backstop).
    pub fn new(calls: mpsc::Sender<Call>, book: Book, device: DeviceId, wait: Duration) -> Self {
        SnapshotsApi {
            calls,
            book,
            device,
            wait,
            auth: crate::auth::Auth::disabled(),
        }
    }

    /// Authorize calls with `auth`: every snapshot call needs `admin` on `/` (a part is
    /// a copy of everything the device holds).
    pub fn with_auth(mut self, auth: crate::auth::Auth) -> Self {
        self.auth = auth;
        self
    }

    #[allow(clippy::result_large_err)]
    fn admin<T>(&self, request: &GrpcRequest<T>) -> Result<(), Status> {
        self.auth
            .authorize(request, crate::auth::Perm::Admin, "/")
            .map(|_| ())
    }
}

fn snap_error(k: proto::snapshot_error::Kind) -> proto::SnapshotError {
    proto::SnapshotError { kind: Some(k) }
}

type FetchStream = Pin<Box<dyn Stream<Item = Result<proto::FetchPartResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Snapshots for SnapshotsApi {
    async fn create(
        &self,
        request: GrpcRequest<proto::CreateSnapshotRequest>,
    ) -> Result<GrpcResponse<proto::CreateSnapshotResponse>, Status> {
        self.admin(&request)?;
        use proto::create_snapshot_response::Result as R;
        use proto::snapshot_error::Kind as K;
        let gone = || Status::unavailable("device is shutting down");
        let (tx, rx) = oneshot::channel();
        (self.calls.send(Call::StartSnapshot { reply: tx }).await).map_err(|_| gone())?;
        let id = rx.await.map_err(|_| gone())?;
        let result = match tokio::time::timeout(self.wait, self.book.outcome(id)).await {
            Ok(Outcome {
                result: Ok(s),
                duration_us,
                ..
            }) => R::Ok(proto::SnapshotCreated {
                initiator: self.device.0,
                devices: s.devices.iter().map(|d| d.0).collect(),
                terminated: s.terminated,
                duration_us,
            }),
            Ok(Outcome {
                result: Err(why), ..
            }) => R::Error(snap_error(K::Failed(why))),
            Err(_) => R::Error(snap_error(K::Timeout(format!(
                "snapshot {id} did not end within {:?}",
                self.wait
            )))),
        };
        Ok(GrpcResponse::new(proto::CreateSnapshotResponse {
            id: id.to_string(),
            result: Some(result),
        }))
    }

    async fn list(
        &self,
        request: GrpcRequest<proto::ListSnapshotsRequest>,
    ) -> Result<GrpcResponse<proto::ListSnapshotsResponse>, Status> {
        self.admin(&request)?;
        let book = self.book.clone();
        let entries = tokio::task::spawn_blocking(move || book.list())
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        let snapshots = entries
            .into_iter()
            .map(|(id, e)| entry_to_proto(id, e))
            .collect();
        Ok(GrpcResponse::new(proto::ListSnapshotsResponse {
            device: self.device.0,
            snapshots,
        }))
    }

    async fn delete(
        &self,
        request: GrpcRequest<proto::DeleteSnapshotRequest>,
    ) -> Result<GrpcResponse<proto::DeleteSnapshotResponse>, Status> {
        self.admin(&request)?;
        let id = request.into_inner().id;
        Ok(GrpcResponse::new(self.delete_part(id).await?))
    }

    type FetchPartStream = FetchStream;

    async fn fetch_part(
        &self,
        request: GrpcRequest<proto::FetchPartRequest>,
    ) -> Result<GrpcResponse<Self::FetchPartStream>, Status> {
        use proto::fetch_part_response::Item;
        use proto::snapshot_error::Kind as K;
        let one = |k: K| -> FetchStream {
            let m = proto::FetchPartResponse {
                item: Some(Item::Error(snap_error(k))),
            };
            Box::pin(futures::stream::iter([Ok(m)]))
        };
        self.admin(&request)?;
        let raw = request.into_inner().id;
        let id: SnapshotId = match raw.parse() {
            Ok(id) => id,
            Err(e) => return Ok(GrpcResponse::new(one(K::InvalidId(e)))),
        };
        let book = self.book.clone();
        // The whole part is read before any of it is sent: a removal meanwhile (retention,
        // Delete) either leaves this read the whole file or takes its name away first.
        let read = tokio::task::spawn_blocking(move || {
            let path = book.part_path(id)?;
            match std::fs::read(&path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                r => Some(r.map_err(|e| format!("{}: {e}", path.display()))),
            }
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?;
        let bytes = match read {
            None => {
                let k = K::NoSuchPart(format!(
                    "device {} holds no part of snapshot {id}",
                    self.device.0
                ));
                return Ok(GrpcResponse::new(one(k)));
            }
            Some(Err(e)) => return Ok(GrpcResponse::new(one(K::Storage(e)))),
            Some(Ok(b)) => b,
        };
        let header = proto::FetchPartResponse {
            item: Some(Item::Header(proto::SnapshotPartHeader {
                id: id.to_string(),
                device: self.device.0,
                part: Some(proto::SnapshotPartInfo {
                    bytes: bytes.len() as u64,
                    crc32: crc32(&bytes),
                }),
            })),
        };
        let bytes = bytes::Bytes::from(bytes);
        let chunks = (0..bytes.len())
            .step_by(CHUNK_BYTES)
            .map(move |at| {
                let end = (at + CHUNK_BYTES).min(bytes.len());
                Ok(proto::FetchPartResponse {
                    item: Some(Item::Data(bytes.slice(at..end).to_vec())),
                })
            })
            .collect::<Vec<_>>();
        let all = std::iter::once(Ok(header)).chain(chunks);
        Ok(GrpcResponse::new(Box::pin(futures::stream::iter(all))))
    }
}

impl SnapshotsApi {
    /// `Delete` (see `proto/snapshots.proto`).
    async fn delete_part(&self, raw: String) -> Result<proto::DeleteSnapshotResponse, Status> {
        use proto::delete_snapshot_response::Result as R;
        use proto::snapshot_error::Kind as K;
        let answer = |r: R| proto::DeleteSnapshotResponse {
            device: self.device.0,
            result: Some(r),
        };
        let id: SnapshotId = match raw.parse() {
            Ok(id) => id,
            Err(e) => return Ok(answer(R::Error(snap_error(K::InvalidId(e))))),
        };
        let book = self.book.clone();
        let removed = tokio::task::spawn_blocking(move || book.remove(id, "deleted"))
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(answer(match removed {
            Ok(deleted) => R::Deleted(deleted),
            Err(e @ SnapshotError::Busy { .. }) => R::Error(snap_error(K::Busy(format!(
                "device {}: {e}; try again when it has ended",
                self.device.0
            )))),
            Err(e) => R::Error(snap_error(K::Storage(format!(
                "device {}: {e}",
                self.device.0
            )))),
        }))
    }
}

fn entry_to_proto(id: SnapshotId, e: Entry) -> proto::SnapshotEntry {
    let mut out = proto::SnapshotEntry {
        id: id.to_string(),
        initiated_here: e.initiated_here,
        unix_ms: e.unix_ms,
        ..Default::default()
    };
    if let PartState::Written { bytes, crc32 } = e.part {
        out.part = Some(proto::SnapshotPartInfo { bytes, crc32 });
    }
    let (status, error) = match (&e.outcome, &e.part) {
        (Some(o), _) => match &o.result {
            Ok(s) => {
                out.devices = s.devices.iter().map(|d| d.0).collect();
                out.terminated = s.terminated;
                ("complete", String::new())
            }
            Err(why) => ("failed", why.clone()),
        },
        (None, PartState::Failed(why)) => ("failed", why.clone()),
        (None, _) if e.initiated_here => ("running", String::new()),
        (None, PartState::Written { .. }) => ("recorded", String::new()),
        (None, PartState::Recording | PartState::Writing) => ("recording", String::new()),
    };
    out.status = status.to_string();
    out.error = error;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_core::io::DevicePersist;

    fn part() -> SnapshotPart {
        let mut channels = BTreeMap::new();
        channels.insert(
            DeviceId(2),
            vec![Msg::Snapshot(SnapMsg::MarkerAck {
                id: SnapshotId::default(),
            })],
        );
        SnapshotPart {
            id: SnapshotId {
                initiator: DeviceId(1),
                serial: 7,
            },
            device: DeviceId(3),
            state: DevicePersist {
                next_serial: 12,
                ..Default::default()
            },
            channels,
        }
    }

    #[test]
    fn part_round_trips_and_corruption_is_named() {
        let p = part();
        let mut bytes = encode_part(&p).unwrap();
        assert_eq!(decode_part(&bytes).unwrap(), p);
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        let e = decode_part(&bytes).unwrap_err();
        assert!(matches!(e, SnapshotError::Checksum { .. }), "{e}");
        assert!(e.to_string().contains("corrupt"), "{e}");
        bytes.truncate(bytes.len() - 1);
        assert!(matches!(
            decode_part(&bytes).unwrap_err(),
            SnapshotError::Length { .. }
        ));
        assert!(matches!(
            decode_part(b"not a part at all, not at all").unwrap_err(),
            SnapshotError::Magic { .. }
        ));
    }

    #[test]
    fn replay_is_taken_once() {
        let dir = tempfile::tempdir().unwrap();
        let msgs = vec![(
            DeviceId(2),
            Msg::Snapshot(SnapMsg::MarkerAck {
                id: SnapshotId::default(),
            }),
        )];
        write_replay(dir.path(), &msgs).unwrap();
        assert_eq!(take_replay(dir.path()).unwrap(), msgs);
        assert!(take_replay(dir.path()).unwrap().is_empty());
        assert!(dir.path().join(REPLAYED_FILE).exists());
    }

    /// The part's state once the writer thread is done with it.
    fn settled(book: &Book, id: SnapshotId) -> PartState {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let st = book.get(id).map(|e| e.part).unwrap_or_default();
            if st != PartState::Writing || std::time::Instant::now() > deadline {
                return st;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn the_answer_waits_for_the_part_and_never_leaves_when_it_cannot_be_written() {
        let p = part();
        let id = p.id;
        let done = Msg::Snapshot(SnapMsg::Done {
            id,
            devices: vec![DeviceId(3)],
            view: vec![DeviceId(1), DeviceId(3)],
        });
        let other = Msg::Snapshot(SnapMsg::MarkerAck { id });

        let dir = tempfile::tempdir().unwrap();
        // A file where the snapshots directory should be: nothing can be written under it.
        std::fs::write(dir.path().join(SNAPSHOTS_DIR), b"in the way").unwrap();
        let book = Book::open(dir.path(), 0);
        book.record(Box::new(p));
        assert_eq!(book.pass(DeviceId(1), done.clone()), None);
        assert!(matches!(settled(&book, id), PartState::Failed(_)));
        assert_eq!(book.pass(DeviceId(1), done.clone()), None);
        assert!(book.get(id).unwrap().waiting.is_empty());
        assert_eq!(book.pass(DeviceId(1), other.clone()), Some(other));

        // A written part lets the answer through, and is listed with its checksum.
        let ok = tempfile::tempdir().unwrap();
        let book = Book::open(ok.path(), 0);
        book.record(Box::new(part()));
        assert!(matches!(settled(&book, id), PartState::Written { .. }));
        assert_eq!(book.pass(DeviceId(1), done.clone()), Some(done));
        let listed = book.list();
        assert_eq!(listed.len(), 1);
        let e = entry_to_proto(listed[0].0, listed[0].1.clone());
        assert_eq!(e.status, "recorded");
        let bytes = std::fs::read(book.part_path(id).unwrap()).unwrap();
        assert_eq!(e.part.unwrap().crc32, crc32(&bytes));
    }

    fn part_of(initiator: u64, serial: u64) -> Box<SnapshotPart> {
        let mut p = part();
        p.id = SnapshotId {
            initiator: DeviceId(initiator),
            serial,
        };
        Box::new(p)
    }

    /// The snapshots with a directory under `data`, in id order.
    fn on_disk(data: &Path) -> Vec<SnapshotId> {
        let mut ids: Vec<SnapshotId> = held(&data.join(SNAPSHOTS_DIR))
            .unwrap()
            .into_iter()
            .map(|(_, id)| id)
            .collect();
        ids.sort();
        ids
    }

    /// Record `p` and wait until the writer thread wrote it (and applied retention).
    fn write(book: &Book, p: Box<SnapshotPart>) {
        let id = p.id;
        book.record(p);
        // Retention runs on the writer thread after the part is written.
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        book.queue(Job::Flush(tx));
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(matches!(settled(book, id), PartState::Written { .. }));
        // Part files' modification times order them; keep them apart.
        std::thread::sleep(Duration::from_millis(30));
    }

    #[test]
    fn retention_keeps_the_newest_parts_by_write_time() {
        let dir = tempfile::tempdir().unwrap();
        let book = Book::open(dir.path(), 2);
        // Written in this order; the ids order them otherwise (different initiators).
        let order = [(3, 100), (1, 900), (2, 50), (1, 10)];
        for (i, (init, serial)) in order.iter().enumerate() {
            write(&book, part_of(*init, *serial));
            assert_eq!(on_disk(dir.path()).len(), (i + 1).min(2));
        }
        let id = |i: u64, s: u64| SnapshotId {
            initiator: DeviceId(i),
            serial: s,
        };
        assert_eq!(on_disk(dir.path()), vec![id(1, 10), id(2, 50)]);
        // Forgotten, not only gone from the disk.
        let listed: Vec<SnapshotId> = book.list().into_iter().map(|(id, _)| id).collect();
        assert_eq!(listed, vec![id(1, 10), id(2, 50)]);
        let left: Vec<_> = std::fs::read_dir(dir.path().join(SNAPSHOTS_DIR))
            .unwrap()
            .flatten()
            .map(|d| d.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left.len(), 2, "{left:?}");

        // keep = 0 keeps every one.
        let all = tempfile::tempdir().unwrap();
        let book = Book::open(all.path(), 0);
        for (init, serial) in order {
            write(&book, part_of(init, serial));
        }
        assert_eq!(on_disk(all.path()).len(), 4);
    }

    #[test]
    fn retention_never_removes_a_part_being_written_or_a_snapshot_running_here() {
        let dir = tempfile::tempdir().unwrap();
        let book = Book::open(dir.path(), 1);
        let (a, b, c, d) = (part_of(1, 1), part_of(1, 2), part_of(1, 3), part_of(1, 4));
        let (a_id, b_id, c_id, d_id) = (a.id, b.id, c.id, d.id);
        // Started here, its part written: running until its result.
        book.started(a_id);
        write(&book, a);
        write(&book, b);
        assert_eq!(
            on_disk(dir.path()),
            vec![a_id, b_id],
            "the running one stays"
        );
        // B's part being written again (what `record` marks before the writer runs).
        book.update(b_id, |e| e.part = PartState::Writing);
        write(&book, c);
        assert_eq!(on_disk(dir.path()), vec![a_id, b_id, c_id]);
        assert!(matches!(
            book.remove(b_id, "test"),
            Err(SnapshotError::Busy { .. })
        ));
        // Both settle: the next part written removes them.
        book.update(b_id, |e| e.part = PartState::Failed("test".into()));
        book.ended(
            a_id,
            Ok(SnapshotSummary {
                devices: vec![DeviceId(3)],
                terminated: true,
            }),
        );
        write(&book, d);
        assert_eq!(on_disk(dir.path()), vec![d_id]);
    }

    #[test]
    fn leftover_deleting_directories_are_removed_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join(SNAPSHOTS_DIR);
        let doomed = root.join(format!("1-5{DELETING_SUFFIX}"));
        std::fs::create_dir_all(&doomed).unwrap();
        std::fs::write(doomed.join(part_file_name(DeviceId(3))), b"half removed").unwrap();
        let kept = part_of(1, 6);
        let kept_id = kept.id;
        write_durably(
            &root
                .join(kept_id.to_string())
                .join(part_file_name(DeviceId(3))),
            &encode_part(&kept).unwrap(),
        )
        .unwrap();
        let book = Book::open(dir.path(), 10);
        assert!(!doomed.exists());
        assert_eq!(on_disk(dir.path()), vec![kept_id]);
        let listed: Vec<SnapshotId> = book.list().into_iter().map(|(id, _)| id).collect();
        assert_eq!(listed, vec![kept_id]);
    }

    #[tokio::test]
    async fn delete_removes_a_part_once_and_fetch_then_answers_no_such_part() {
        use futures::StreamExt;
        use proto::delete_snapshot_response::Result as R;
        use proto::snapshot_error::Kind as K;
        let dir = tempfile::tempdir().unwrap();
        let book = Book::open(dir.path(), 10);
        let p = part_of(1, 7);
        let id = p.id;
        let b = book.clone();
        tokio::task::spawn_blocking(move || write(&b, p))
            .await
            .unwrap();
        let (calls, _rx) = mpsc::channel(1);
        let api = SnapshotsApi::new(calls, book.clone(), DeviceId(3), Duration::from_secs(1));
        let kind = |r: proto::DeleteSnapshotResponse| match r.result {
            Some(R::Error(proto::SnapshotError { kind: Some(k) })) => k,
            other => panic!("not an error: {other:?}"),
        };

        let r = api.delete_part("1-x".into()).await.unwrap();
        assert!(matches!(kind(r), K::InvalidId(_)));
        // Busy while its part is written.
        book.update(id, |e| e.part = PartState::Writing);
        let r = api.delete_part(id.to_string()).await.unwrap();
        assert!(matches!(kind(r), K::Busy(m) if m.contains("being written")));
        assert_eq!(on_disk(dir.path()), vec![id]);
        book.update(id, |e| e.part = PartState::Written { bytes: 0, crc32: 0 });

        let r = api.delete_part(id.to_string()).await.unwrap();
        assert_eq!((r.device, r.result), (3, Some(R::Deleted(true))));
        assert!(on_disk(dir.path()).is_empty());
        assert!(book.list().is_empty(), "no longer listed");
        let r = api.delete_part(id.to_string()).await.unwrap();
        assert_eq!(r.result, Some(R::Deleted(false)), "idempotent");

        let req = GrpcRequest::new(proto::FetchPartRequest { id: id.to_string() });
        let mut s = api.fetch_part(req).await.unwrap().into_inner();
        let first = s.next().await.unwrap().unwrap();
        assert!(
            matches!(
                first.item,
                Some(proto::fetch_part_response::Item::Error(
                    proto::SnapshotError {
                        kind: Some(K::NoSuchPart(_))
                    }
                ))
            ),
            "{first:?}"
        );
    }
}
