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

use std::path::PathBuf;
use tenure_core::snapshot::SnapshotId;

mod api;
mod book;
mod files;

pub use api::SnapshotsApi;
pub use book::Book;
pub use files::{
    crc32, decode_part, encode_part, part_file_name, read_replay, take_replay, write_durably,
    write_replay,
};

/// Magic of a part file.
pub const PART_MAGIC: [u8; 8] = *b"TNRPART\0";
/// Magic of a replay file.
pub const REPLAY_MAGIC: [u8; 8] = *b"TNRRPLY\0";
/// Format of both files this build writes. Format 2 added inline object values and
/// format 3 sessions' child sessions, format 4 the stamp of a store's state
/// ([`tenure_core::generation`]); formats 1 to 3 are still read.
pub const FORMAT: u32 = 4;
/// The oldest format this build reads.
pub const OLDEST_FORMAT: u32 = 1;

/// The layout of the values in a file of `format`.
pub fn generation(format: u32) -> tenure_core::generation::Generation {
    tenure_core::generation::Generation::of(format.into(), 2, 3, 3, 3, 4, 4, 4)
}
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
    #[error("{what} file of format {found}; this build reads formats {OLDEST_FORMAT} to {FORMAT}")]
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

#[cfg(test)]
mod tests {
    use super::api::entry_to_proto;
    use super::book::{Job, PartState, held};
    use super::*;
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::time::Duration;
    use tenure_client::proto::{self, snapshots_server::Snapshots};
    use tenure_core::ids::DeviceId;
    use tenure_core::io::{DevicePersist, SnapshotSummary};
    use tenure_core::msg::Msg;
    use tenure_core::snapshot::{SnapMsg, SnapshotPart};
    use tokio::sync::mpsc;
    use tonic::Request as GrpcRequest;

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

    /// A part file of the build before inline object values (format 1, its chunks'
    /// manifests in that layout) is still read, as this build's parts are.
    #[test]
    fn a_part_of_the_previous_format_is_read() {
        use tenure_core::generation::{Generation, with};
        let mut p = part();
        let c = crate::storage::tests::chunk_with_objects(3, 0);
        p.state.chunks.insert(c.id, c);
        let body = with(Generation::BeforeInlineValues, || postcard::to_stdvec(&p)).unwrap();
        let mut old = Vec::new();
        old.extend_from_slice(&PART_MAGIC);
        old.extend_from_slice(&1u32.to_le_bytes());
        old.extend_from_slice(&crc32(&body).to_le_bytes());
        old.extend_from_slice(&(body.len() as u64).to_le_bytes());
        old.extend_from_slice(&body);
        assert_eq!(decode_part(&old).unwrap(), p);
        // Read as this format, the same bytes are not that part.
        old[8..12].copy_from_slice(&FORMAT.to_le_bytes());
        assert_ne!(decode_part(&old).ok(), Some(p.clone()));
        assert_eq!(decode_part(&encode_part(&p).unwrap()).unwrap(), p);
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
