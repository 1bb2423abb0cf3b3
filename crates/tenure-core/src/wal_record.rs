//! The record codec of the write-ahead log: how one durable group of persists is framed on
//! disk, and how recovery tells a whole record from one that was never written, torn by a
//! crash, or belongs to an older log generation. Pure byte manipulation, used by the
//! server's log (`tenure-server/src/wal.rs`) and the simulator's disks alike.
//!
//! ```text
//! len: u32 LE | crc: u32 LE | generation: u64 LE | seq: u64 LE | payload: len bytes
//! ```
//!
//! `crc` is CRC-32 (ISO-HDLC) over `generation`, `seq` and `payload`. A log *generation*
//! is the span between two checkpoints; `seq` numbers the records of a generation. A
//! record of length 0 is never written (a zero-filled log reads as empty).

/// Bytes before a record's payload.
pub const HEADER: usize = 4 + 4 + 8 + 8;

/// Why recovery refuses the bytes at a record's place: each means the log ends there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Fewer bytes than a header.
    #[error("record header cut short: {have} of {HEADER} bytes")]
    ShortHeader {
        /// Bytes there are.
        have: usize,
    },
    /// A zero length: nothing was written here.
    #[error("empty record (never written)")]
    Empty,
    /// A record of another log generation (an older one, overwritten since).
    #[error("record of generation {found}, expected {expected}")]
    Generation {
        /// The record's.
        found: u64,
        /// The one being read.
        expected: u64,
    },
    /// A record out of sequence.
    #[error("record number {found}, expected {expected}")]
    Seq {
        /// The record's.
        found: u64,
        /// The next one.
        expected: u64,
    },
    /// The payload is cut short: the write was torn.
    #[error("record torn: {have} of {need} bytes")]
    Torn {
        /// Bytes there are (header included).
        have: usize,
        /// Bytes the header announces (header included).
        need: usize,
    },
    /// The checksum does not match: torn or garbled.
    #[error("record checksum {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        /// The header's.
        stored: u32,
        /// Over the bytes read.
        computed: u32,
    },
}

/// One record read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// Its payload.
    pub payload: &'a [u8],
    /// Its bytes on disk, header included (where the next record starts).
    pub len: usize,
}

/// Write record `seq` of `generation` carrying `payload` into `buf` (cleared first).
pub fn encode(buf: &mut Vec<u8>, generation: u64, seq: u64, payload: &[u8]) {
    buf.clear();
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(&[0; 4]);
    buf.extend_from_slice(&generation.to_le_bytes());
    buf.extend_from_slice(&seq.to_le_bytes());
    buf.extend_from_slice(payload);
    let crc = crc32fast::hash(&buf[8..]);
    buf[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// Read the record at the start of `bytes`, which must be record `seq` of `generation`.
pub fn decode(bytes: &[u8], generation: u64, seq: u64) -> Result<Record<'_>, RecordError> {
    let Some(h) = bytes.get(..HEADER) else {
        return Err(RecordError::ShortHeader { have: bytes.len() });
    };
    let len = u32::from_le_bytes(h[0..4].try_into().expect("4 bytes")) as usize;
    let stored = u32::from_le_bytes(h[4..8].try_into().expect("4 bytes"));
    let g = u64::from_le_bytes(h[8..16].try_into().expect("8 bytes"));
    let s = u64::from_le_bytes(h[16..24].try_into().expect("8 bytes"));
    if len == 0 {
        return Err(RecordError::Empty);
    }
    if g != generation {
        return Err(RecordError::Generation {
            found: g,
            expected: generation,
        });
    }
    if s != seq {
        return Err(RecordError::Seq {
            found: s,
            expected: seq,
        });
    }
    let need = HEADER + len;
    let Some(covered) = bytes.get(8..need) else {
        return Err(RecordError::Torn {
            have: bytes.len(),
            need,
        });
    };
    let computed = crc32fast::hash(covered);
    if computed != stored {
        return Err(RecordError::Checksum { stored, computed });
    }
    Ok(Record {
        payload: &covered[HEADER - 8..],
        len: need,
    })
}

/// The payloads of the leading run of valid records of `generation` (numbered from 0),
/// and the offset after the last one: where the log ends and the next append goes.
pub fn scan(bytes: &[u8], generation: u64) -> (Vec<Vec<u8>>, u64) {
    let mut out = Vec::new();
    let mut at = 0usize;
    while let Ok(r) = decode(&bytes[at..], generation, out.len() as u64) {
        out.push(r.payload.to_vec());
        at += r.len;
    }
    (out, at as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(generation: u64, seq: u64, payload: &[u8]) -> Vec<u8> {
        let mut buf = Vec::new();
        encode(&mut buf, generation, seq, payload);
        buf
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let bytes = record(3, 9, b"payload");
        assert_eq!(bytes.len(), HEADER + 7);
        let r = decode(&bytes, 3, 9).unwrap();
        assert_eq!(r.payload, b"payload");
        assert_eq!(r.len, bytes.len());
        // Trailing bytes (the next record, zeros) are not part of it.
        let mut more = bytes.clone();
        more.extend_from_slice(&[0; 40]);
        assert_eq!(decode(&more, 3, 9).unwrap().len, bytes.len());
    }

    /// The layout is the server's on-disk format: existing logs must keep opening.
    #[test]
    fn the_layout_is_fixed() {
        let bytes = record(0x0102, 0x0304, b"ab");
        assert_eq!(&bytes[0..4], &2u32.to_le_bytes());
        assert_eq!(&bytes[8..16], &0x0102u64.to_le_bytes());
        assert_eq!(&bytes[16..24], &0x0304u64.to_le_bytes());
        assert_eq!(&bytes[24..], b"ab");
        let crc = crc32fast::hash(&bytes[8..]);
        assert_eq!(&bytes[4..8], &crc.to_le_bytes());
    }

    /// Every proper prefix of a record, however it was cut, is refused.
    #[test]
    fn a_torn_record_is_refused() {
        let bytes = record(1, 0, b"a record torn by a crash");
        for cut in 0..bytes.len() {
            let e = decode(&bytes[..cut], 1, 0).unwrap_err();
            assert!(
                matches!(
                    e,
                    RecordError::ShortHeader { .. } | RecordError::Torn { .. }
                ),
                "prefix of {cut} bytes: {e}"
            );
        }
        // A torn tail whose length field reads short: the checksum refuses it.
        let mut short = bytes.clone();
        short[0..4].copy_from_slice(&5u32.to_le_bytes());
        assert!(matches!(
            decode(&short, 1, 0),
            Err(RecordError::Checksum { .. })
        ));
    }

    /// A record with any one byte past its length flipped is refused.
    #[test]
    fn a_flipped_byte_is_refused() {
        let bytes = record(1, 4, b"garbled");
        for i in 4..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[i] ^= 0x20;
            assert!(decode(&flipped, 1, 4).is_err(), "byte {i} flipped");
        }
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(matches!(
            decode(&flipped, 1, 4),
            Err(RecordError::Checksum { .. })
        ));
    }

    #[test]
    fn other_generations_sequences_and_zeros_are_refused() {
        let bytes = record(2, 0, b"x");
        assert!(matches!(
            decode(&bytes, 3, 0),
            Err(RecordError::Generation { .. })
        ));
        assert!(matches!(decode(&bytes, 2, 1), Err(RecordError::Seq { .. })));
        assert_eq!(decode(&[0; 64], 0, 0), Err(RecordError::Empty));
    }

    #[test]
    fn a_scan_stops_at_the_first_refused_record() {
        let mut log = Vec::new();
        log.extend(record(5, 0, b"one"));
        log.extend(record(5, 1, b"two"));
        let end = log.len() as u64;
        log.extend(record(4, 2, b"older"));
        log.extend([0; 32]);
        let (records, at) = scan(&log, 5);
        assert_eq!(records, vec![b"one".to_vec(), b"two".to_vec()]);
        assert_eq!(at, end);
        assert_eq!(scan(&[], 5), (Vec::new(), 0));
    }
}
