//! The peer wire format: length-delimited frames (4-byte big-endian length, at most
//! [`MAX_FRAME_BYTES`]) whose body is one version byte followed by a postcard-encoded
//! [`Frame`]. A connection opens with a `Hello` each way naming both ends; every later
//! frame is a `Msg` carrying the sender's id, which must match the handshake.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tenure_core::ids::DeviceId;
use tenure_core::msg::Msg;

/// Wire format version this build speaks.
pub const WIRE_VERSION: u8 = 1;

/// Default largest frame accepted (and sent).
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// One frame on a peer connection.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Frame {
    /// Handshake: `from` is the sender, `to` the device it believes it reached.
    Hello {
        /// Sender.
        from: DeviceId,
        /// Intended receiver.
        to: DeviceId,
    },
    /// A protocol message.
    Msg {
        /// Sender.
        from: DeviceId,
        /// Message (boxed: messages are large; the encoding is the same as unboxed).
        msg: Box<Msg>,
    },
}

/// Why a frame was rejected.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// An empty frame.
    #[error("empty frame")]
    Empty,
    /// The peer speaks another wire version.
    #[error("wire version {0}, expected {WIRE_VERSION}")]
    Version(u8),
    /// The body does not decode.
    #[error("malformed frame: {0}")]
    Malformed(#[from] postcard::Error),
}

/// Encode a frame body (the codec adds the length prefix).
pub fn encode(frame: &Frame) -> Result<Bytes, postcard::Error> {
    let mut buf = vec![WIRE_VERSION];
    buf.extend_from_slice(&postcard::to_stdvec(frame)?);
    Ok(Bytes::from(buf))
}

/// Decode a frame body.
pub fn decode(body: &[u8]) -> Result<Frame, WireError> {
    match body.split_first() {
        None => Err(WireError::Empty),
        Some((&WIRE_VERSION, rest)) => {
            let (frame, tail) = postcard::take_from_bytes(rest)?;
            if tail.is_empty() {
                Ok(frame)
            } else {
                Err(WireError::Malformed(
                    postcard::Error::DeserializeBadEncoding,
                ))
            }
        }
        Some((&v, _)) => Err(WireError::Version(v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_core::ids::{ChunkId, Epoch, StoreId};
    use tenure_core::msg::ToChunk;

    #[test]
    fn round_trip() {
        let f = Frame::Hello {
            from: DeviceId(1),
            to: DeviceId(2),
        };
        assert_eq!(decode(&encode(&f).unwrap()).unwrap(), f);
    }

    #[test]
    fn garbage_is_rejected() {
        assert!(matches!(decode(&[]), Err(WireError::Empty)));
        assert!(matches!(decode(&[9, 1, 2]), Err(WireError::Version(9))));
        assert!(matches!(
            decode(&[WIRE_VERSION, 0xff, 0xff, 0xff]),
            Err(WireError::Malformed(_))
        ));
        let mut ok = encode(&Frame::Hello {
            from: DeviceId(1),
            to: DeviceId(2),
        })
        .unwrap()
        .to_vec();
        ok.push(0);
        assert!(matches!(decode(&ok), Err(WireError::Malformed(_))));
    }

    #[test]
    fn protocol_message_round_trip() {
        let f = Frame::Msg {
            from: DeviceId(3),
            msg: Box::new(Msg::ToChunk {
                store: StoreId(7),
                chunk: ChunkId {
                    device: DeviceId(2),
                    serial: 7,
                },
                msg: ToChunk::Renewal {
                    epoch: Epoch(4),
                    lease: std::time::Duration::from_secs(2),
                },
            }),
        };
        assert_eq!(decode(&encode(&f).unwrap()).unwrap(), f);
    }
}
