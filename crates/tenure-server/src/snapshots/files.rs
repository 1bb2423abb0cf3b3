//! The snapshot files on disk: the framed part format (magic, version, length, CRC),
//! durable writes, and the replay file a restored device reads once.

use super::{
    FORMAT, HEADER_BYTES, OLDEST_FORMAT, PART_MAGIC, REPLAY_FILE, REPLAY_MAGIC, REPLAYED_FILE,
    SnapshotError, generation,
};
use std::path::{Path, PathBuf};
use tenure_core::ids::DeviceId;
use tenure_core::msg::Msg;
use tenure_core::snapshot::SnapshotPart;
use tracing::info;

pub(super) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SnapshotError + '_ {
    move |source| SnapshotError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// CRC-32 (IEEE) of `bytes`: the checksum of part files and of snapshot manifests.
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

pub(super) fn frame(magic: [u8; 8], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + body.len());
    out.extend_from_slice(&magic);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    out.extend_from_slice(&crc32(body).to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// The body of a framed file, and its format.
pub(super) fn unframe<'a>(
    magic: [u8; 8],
    what: &'static str,
    bytes: &'a [u8],
) -> Result<(&'a [u8], u32), SnapshotError> {
    if bytes.len() < HEADER_BYTES || bytes[..8] != magic {
        return Err(SnapshotError::Magic { what });
    }
    let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
    let format = u32_at(8);
    if !(OLDEST_FORMAT..=FORMAT).contains(&format) {
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
    Ok((body, format))
}

/// A part file's bytes.
pub fn encode_part(part: &SnapshotPart) -> Result<Vec<u8>, SnapshotError> {
    let body = postcard::to_stdvec(part).map_err(SnapshotError::Encode)?;
    Ok(frame(PART_MAGIC, &body))
}

/// Read a part file's bytes (header, length, checksum, content).
pub fn decode_part(bytes: &[u8]) -> Result<SnapshotPart, SnapshotError> {
    let what = "snapshot part";
    let (body, format) = unframe(PART_MAGIC, what, bytes)?;
    tenure_core::generation::with(generation(format), || postcard::from_bytes(body))
        .map_err(|source| SnapshotError::Decode { what, source })
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

pub(super) fn sync_dir(dir: &Path) -> Result<(), SnapshotError> {
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
    let (body, format) = unframe(REPLAY_MAGIC, what, &bytes)?;
    tenure_core::generation::with(generation(format), || postcard::from_bytes(body))
        .map_err(|source| SnapshotError::Decode { what, source })
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
