//! The peer wire format: length-delimited frames (4-byte big-endian length, at most
//! [`MAX_FRAME_BYTES`]) whose body is one version byte followed by a postcard-encoded
//! [`Frame`]. A connection opens with a `Hello` each way naming both ends and the wire
//! versions each speaks; every later frame is a `Msg` at the newest version both speak,
//! carrying the sender's id, which must match the handshake.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tenure_core::generation::{self, Generation};
use tenure_core::ids::DeviceId;
use tenure_core::msg::Msg;

/// The newest wire version this build speaks: what a connection uses when the peer
/// speaks it too.
pub const WIRE_VERSION: u8 = 9;
/// The oldest wire version this build speaks. A build that changes a message's encoding
/// raises [`WIRE_VERSION`] and keeps writing the previous version to peers that do not
/// speak the new one, so devices of two consecutive builds serve side by side during a
/// rolling upgrade.
pub const OLDEST_WIRE_VERSION: u8 = 2;
/// The first version whose handshake carries the versions its sender speaks. A `Hello`
/// has this layout in every version from it on, so any two builds can read each other's
/// and tell why they cannot talk when they share no version.
pub const FIRST_NEGOTIATED_VERSION: u8 = 2;

/// Default largest frame accepted (and sent).
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// The wire versions a device speaks, oldest to newest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Versions {
    /// Oldest.
    pub oldest: u8,
    /// Newest.
    pub newest: u8,
}

impl Versions {
    /// What this build speaks.
    pub const THIS_BUILD: Versions = Versions {
        oldest: OLDEST_WIRE_VERSION,
        newest: WIRE_VERSION,
    };

    /// Whether `v` is among them.
    pub fn speaks(self, v: u8) -> bool {
        (self.oldest..=self.newest).contains(&v)
    }

    /// The version a connection between a device speaking `self` and a peer speaking
    /// `peer` uses: the newest both speak.
    pub fn common(self, peer: Versions) -> Result<u8, WireError> {
        let v = self.newest.min(peer.newest);
        if self.speaks(v) && peer.speaks(v) {
            Ok(v)
        } else {
            Err(WireError::NoCommonVersion { mine: self, peer })
        }
    }

    /// Parse `N` or `OLDEST-NEWEST`.
    pub fn parse(s: &str) -> Result<Versions, String> {
        let num = |x: &str| {
            x.trim()
                .parse::<u8>()
                .map_err(|_| format!("{x:?} is not a wire version"))
        };
        let v = match s.split_once('-') {
            Some((a, b)) => Versions {
                oldest: num(a)?,
                newest: num(b)?,
            },
            None => {
                let v = num(s)?;
                Versions {
                    oldest: v,
                    newest: v,
                }
            }
        };
        if v.oldest < FIRST_NEGOTIATED_VERSION || v.oldest > v.newest {
            return Err(format!(
                "{s:?}: wire versions start at {FIRST_NEGOTIATED_VERSION}, oldest first"
            ));
        }
        Ok(v)
    }
}

impl std::fmt::Display for Versions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.oldest == self.newest {
            write!(f, "{}", self.oldest)
        } else {
            write!(f, "{} to {}", self.oldest, self.newest)
        }
    }
}

/// One frame on a peer connection.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Frame {
    /// Handshake: `from` is the sender, `to` the device it believes it reached,
    /// `versions` the wire versions the sender speaks. Its layout never changes.
    Hello {
        /// Sender.
        from: DeviceId,
        /// Intended receiver.
        to: DeviceId,
        /// What the sender speaks.
        versions: Versions,
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
    /// A frame of another version than the connection agreed on.
    #[error("wire version {found} on a connection that agreed on version {expected}")]
    Version {
        /// The frame's.
        found: u8,
        /// The connection's.
        expected: u8,
    },
    /// A handshake of a build from before versions were negotiated.
    #[error(
        "wire version {0}: the peer runs a build older than version negotiation (wire version {FIRST_NEGOTIATED_VERSION}); upgrade it"
    )]
    BeforeNegotiation(u8),
    /// The two ends share no version.
    #[error("{}", no_common(*.mine, *.peer))]
    NoCommonVersion {
        /// What this device speaks.
        mine: Versions,
        /// What the peer speaks.
        peer: Versions,
    },
    /// A handshake whose versions make no sense: not written at the oldest one it names,
    /// or oldest after newest.
    #[error("handshake written at wire version {written} claims to speak {versions}")]
    BadHello {
        /// The version byte.
        written: u8,
        /// What it claims.
        versions: Versions,
    },
    /// The body does not decode.
    #[error("malformed frame: {0}")]
    Malformed(#[from] postcard::Error),
}

fn no_common(mine: Versions, peer: Versions) -> String {
    let (older, newer) = if peer.newest < mine.oldest {
        ("the peer", "this device")
    } else {
        ("this device", "the peer")
    };
    format!(
        "no wire version in common: this device speaks {mine}, the peer {peer}; {older} runs a build too old for {newer}'s: upgrade {older} first (a rolling upgrade goes one build at a time)"
    )
}

/// The layout of the values a wire version carries: version 3 added inline object
/// values (a manifest's `value`, the one-change put), version 4 forwarded client
/// requests (`Msg::Forward`), version 5 sessions spanning stores (a session's child
/// sessions, `StoreOp::SessionAttach`), version 6 the lease a chunk reports in ACCEPTED
/// (`ToManager::Accepted`'s `lease_left`, for reads under the manager's lease), version
/// 7 epoch transitions that ship what differs (a state's stamp, vote summaries, commit
/// patches), version 8 patches for chunks that rejoin (`Holds`, `ReconcilePatch`),
/// version 9 renewal echoes (`ToChunk::Renewal`'s `sent`, `ToManager::RenewalRequest`'s
/// `renewed`, for a read lease kept by renewals).
pub fn generation(version: u8) -> Generation {
    Generation::of(version.into(), 3, 4, 5, 6, 7, 8, 9)
}

/// Encode a frame body at wire `version` (the codec adds the length prefix). A value the
/// version cannot express (an inline object value, at version 2) is an encoding error.
pub fn encode(frame: &Frame, version: u8) -> Result<Bytes, postcard::Error> {
    let mut buf = vec![version];
    buf.extend_from_slice(&generation::with(generation(version), || {
        postcard::to_stdvec(frame)
    })?);
    Ok(Bytes::from(buf))
}

/// Encode the handshake of a device speaking `versions`: at the oldest of them, which
/// every build that can talk to it reads.
pub fn encode_hello(
    from: DeviceId,
    to: DeviceId,
    versions: Versions,
) -> Result<Bytes, postcard::Error> {
    encode(&Frame::Hello { from, to, versions }, versions.oldest)
}

fn body(rest: &[u8]) -> Result<Frame, WireError> {
    let (frame, tail) = postcard::take_from_bytes(rest)?;
    if tail.is_empty() {
        Ok(frame)
    } else {
        Err(WireError::Malformed(
            postcard::Error::DeserializeBadEncoding,
        ))
    }
}

/// Decode a frame body on a connection that agreed on wire `version`.
pub fn decode(body_bytes: &[u8], version: u8) -> Result<Frame, WireError> {
    match body_bytes.split_first() {
        None => Err(WireError::Empty),
        Some((&v, rest)) if v == version => generation::with(generation(version), || body(rest)),
        Some((&found, _)) => Err(WireError::Version {
            found,
            expected: version,
        }),
    }
}

/// Decode a handshake, of any version from [`FIRST_NEGOTIATED_VERSION`] on (its layout
/// is the same in all of them). Anything but a `Hello` is malformed here.
pub fn decode_hello(body_bytes: &[u8]) -> Result<(DeviceId, DeviceId, Versions), WireError> {
    match body_bytes.split_first() {
        None => Err(WireError::Empty),
        Some((&v, _)) if v < FIRST_NEGOTIATED_VERSION => Err(WireError::BeforeNegotiation(v)),
        Some((&v, rest)) => match body(rest)? {
            // Written at the oldest version it names, which starts at the first
            // negotiated one.
            Frame::Hello { versions, .. }
                if versions.oldest != v || versions.oldest > versions.newest =>
            {
                Err(WireError::BadHello {
                    written: v,
                    versions,
                })
            }
            Frame::Hello { from, to, versions } => Ok((from, to, versions)),
            Frame::Msg { .. } => Err(WireError::Malformed(
                postcard::Error::DeserializeBadEncoding,
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_core::ids::{ChunkId, Epoch, StoreId};
    use tenure_core::msg::ToChunk;

    const V: Versions = Versions::THIS_BUILD;

    #[test]
    fn round_trip() {
        let b = encode_hello(DeviceId(1), DeviceId(2), V).unwrap();
        assert_eq!(decode_hello(&b).unwrap(), (DeviceId(1), DeviceId(2), V));
    }

    #[test]
    fn garbage_is_rejected() {
        assert!(matches!(decode(&[], WIRE_VERSION), Err(WireError::Empty)));
        assert!(matches!(
            decode(&[WIRE_VERSION + 1, 1, 2], WIRE_VERSION),
            Err(WireError::Version { found, .. }) if found == WIRE_VERSION + 1
        ));
        assert!(matches!(
            decode(&[WIRE_VERSION, 0xff, 0xff, 0xff], WIRE_VERSION),
            Err(WireError::Malformed(_))
        ));
        let mut ok = encode_hello(DeviceId(1), DeviceId(2), V).unwrap().to_vec();
        ok.push(0);
        assert!(matches!(decode_hello(&ok), Err(WireError::Malformed(_))));
        // Versions that contradict the version byte, or run backwards.
        let odd = encode(
            &Frame::Hello {
                from: DeviceId(1),
                to: DeviceId(2),
                versions: Versions {
                    oldest: 3,
                    newest: 2,
                },
            },
            3,
        )
        .unwrap();
        assert!(matches!(
            decode_hello(&odd),
            Err(WireError::BadHello { .. })
        ));
        let mut wrong = encode_hello(DeviceId(1), DeviceId(2), V).unwrap().to_vec();
        wrong[0] = WIRE_VERSION + 1;
        assert!(matches!(
            decode_hello(&wrong),
            Err(WireError::BadHello { .. })
        ));
        // A build from before negotiation: its version byte says so.
        assert!(matches!(
            decode_hello(&[1, 1, 2]),
            Err(WireError::BeforeNegotiation(1))
        ));
    }

    /// A device of the next build (speaking this version and the next) talks to this
    /// one at this version; one that dropped this version is refused with the reason, in
    /// the handshake both can read.
    #[test]
    fn the_newest_version_both_speak_is_used_and_none_in_common_is_refused() {
        let next = Versions {
            oldest: WIRE_VERSION,
            newest: WIRE_VERSION + 1,
        };
        assert_eq!(V.common(next).unwrap(), WIRE_VERSION);
        assert_eq!(next.common(V).unwrap(), WIRE_VERSION);
        assert_eq!(next.common(next).unwrap(), WIRE_VERSION + 1);
        let later = Versions {
            oldest: WIRE_VERSION + 1,
            newest: WIRE_VERSION + 1,
        };
        let e = V.common(later).unwrap_err().to_string();
        assert!(e.contains("upgrade this device first"), "{e}");
        let e = later.common(V).unwrap_err().to_string();
        assert!(e.contains("upgrade the peer first"), "{e}");
        // Its handshake, written at its oldest version, still reads here.
        let b = encode_hello(DeviceId(3), DeviceId(1), later).unwrap();
        assert_eq!(decode_hello(&b).unwrap().2, later);
    }

    #[test]
    fn versions_parse() {
        assert_eq!(
            Versions::parse("2").unwrap(),
            Versions {
                oldest: 2,
                newest: 2
            }
        );
        assert_eq!(
            Versions::parse("2-3").unwrap(),
            Versions {
                oldest: 2,
                newest: 3
            }
        );
        assert!(Versions::parse("1-2").is_err());
        assert!(Versions::parse("3-2").is_err());
        assert!(Versions::parse("x").is_err());
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
                    sent: Some(tenure_core::time::Instant(5_000)),
                },
            }),
        };
        assert_eq!(
            decode(&encode(&f, WIRE_VERSION).unwrap(), WIRE_VERSION).unwrap(),
            f
        );
    }

    fn accept(op: tenure_core::objects::ObjectOp) -> Frame {
        use tenure_core::data::StoreOp;
        use tenure_core::objects::table::Access;
        Frame::Msg {
            from: DeviceId(1),
            msg: Box::new(Msg::ToChunk {
                store: StoreId(7),
                chunk: ChunkId {
                    device: DeviceId(2),
                    serial: 7,
                },
                msg: ToChunk::Accept {
                    epoch: Epoch(4),
                    ops: vec![(
                        Default::default(),
                        StoreOp::Object {
                            op,
                            acc: Access {
                                at: Default::default(),
                                prune_before: Default::default(),
                                history: 10,
                            },
                        },
                    )],
                    confirm: Default::default(),
                },
            }),
        }
    }

    /// Version 3 carries inline object values; for a peer of the previous build (version
    /// 2) a message without one is written in version 2's layout, and one with one cannot
    /// be written at all (the transport drops it rather than send what the peer misreads).
    #[test]
    fn inline_values_travel_from_version_3_and_version_2_is_still_written() {
        use tenure_core::objects::{Bytes, ObjectOp, SmallPut, Uuid};
        let put = accept(ObjectOp::Put(SmallPut {
            key: "/a/k".into(),
            uuid: Uuid(1),
            value: Bytes::from_static(b"v"),
            owner: None,
            request: None,
            cond: Default::default(),
        }));
        assert_eq!(decode(&encode(&put, 3).unwrap(), 3).unwrap(), put);
        assert!(encode(&put, 2).is_err());
        let plain = accept(ObjectOp::Prune { key: "/a/k".into() });
        for v in [2, 3] {
            assert_eq!(decode(&encode(&plain, v).unwrap(), v).unwrap(), plain);
        }
    }
    /// Version 6 carries the lease a chunk reports in ACCEPTED; to a peer of the previous
    /// build (version 5) the message is written in version 5's layout, without it, and
    /// read back as no lease (that manager answers its reads after a barrier).
    #[test]
    fn lease_left_travels_from_version_6_and_version_5_is_still_written() {
        use tenure_core::msg::ToManager;
        let accepted = |lease_left| Frame::Msg {
            from: DeviceId(2),
            msg: Box::new(Msg::ToManager {
                store: StoreId(7),
                chunk: ChunkId {
                    device: DeviceId(2),
                    serial: 7,
                },
                msg: ToManager::Accepted {
                    epoch: Epoch(4),
                    upto: Default::default(),
                    lease_left,
                },
            }),
        };
        let with = accepted(Some(std::time::Duration::from_millis(1_450)));
        assert_eq!(decode(&encode(&with, 6).unwrap(), 6).unwrap(), with);
        let v5 = encode(&with, 5).unwrap();
        assert_eq!(decode(&v5, 5).unwrap(), accepted(None));
        assert!(v5.len() < encode(&with, 6).unwrap().len());
        assert_eq!(v5, encode(&accepted(None), 5).unwrap());
    }

    /// Version 9 carries a renewal's send time and a renewal request's echo of it; to a
    /// peer of the previous build (version 8) both are written in version 8's layout,
    /// without them, and read back as none (that manager's read lease comes from
    /// ACCEPTED alone).
    #[test]
    fn renewal_echoes_travel_from_version_9_and_version_8_is_still_written() {
        use tenure_core::msg::{Renewed, ToManager};
        let chunk = ChunkId {
            device: DeviceId(2),
            serial: 7,
        };
        let request = |renewed| Frame::Msg {
            from: DeviceId(2),
            msg: Box::new(Msg::ToManager {
                store: StoreId(7),
                chunk,
                msg: ToManager::RenewalRequest {
                    epoch: Epoch(4),
                    renewed,
                },
            }),
        };
        let renewal = |sent| Frame::Msg {
            from: DeviceId(1),
            msg: Box::new(Msg::ToChunk {
                store: StoreId(7),
                chunk,
                msg: ToChunk::Renewal {
                    epoch: Epoch(4),
                    lease: std::time::Duration::from_secs(2),
                    sent,
                },
            }),
        };
        let echo = Some(Renewed {
            sent: tenure_core::time::Instant(1_000_000),
            lease_left: std::time::Duration::from_millis(1_350),
        });
        let stamp = Some(tenure_core::time::Instant(2_000_000));
        for (with, without) in [
            (request(echo), request(None)),
            (renewal(stamp), renewal(None)),
        ] {
            assert_eq!(decode(&encode(&with, 9).unwrap(), 9).unwrap(), with);
            let v8 = encode(&with, 8).unwrap();
            assert_eq!(decode(&v8, 8).unwrap(), without);
            assert_eq!(v8, encode(&without, 8).unwrap());
            assert!(v8.len() < encode(&with, 9).unwrap().len());
        }
    }
}
