//! Encoding generations: which layout of the encoded values a frame or a stored row uses.
//!
//! A build that adds a field to a value that travels between devices or lives on disk
//! still has to read the older layout (a data directory written by the previous build,
//! a peer of the previous build during a rolling upgrade) and to write it for a peer that
//! speaks only that one. The encoder and decoder (postcard, which writes fields in order
//! and nothing else) are told the generation by [`with`]: the added fields' serde
//! functions read it and, at an older generation, write and read nothing. A value the
//! older layout cannot express (an inline object value) fails to encode there rather
//! than being dropped in silence.
//!
//! The generation is a per-thread setting around one encode or decode: the core never
//! encodes, so its state machines are unaffected.

use std::cell::Cell;

/// A layout of the encoded values, oldest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Generation {
    /// Before small objects carried their value in their manifest (wire version 2,
    /// storage format 6 and older).
    BeforeInlineValues,
    /// Manifests carry an inline value; [`crate::objects::ObjectOp::Put`] exists (wire
    /// version 3, storage format 7, snapshot format 2).
    InlineValues,
    /// A device forwards a client request to the store's manager
    /// ([`crate::msg::Msg::Forward`], wire version 4). Files are unchanged.
    Forwarding,
    /// One client session spans stores: a session's record names its child sessions in
    /// other stores ([`crate::data::StoreOp::SessionAttach`], DESIGN §4; wire version 5,
    /// storage format 8, snapshot format 3).
    SessionGroups,
    /// A chunk's ACCEPTED says how long its lease from the manager still runs
    /// ([`crate::msg::ToManager::Accepted`]'s `lease_left`), which lets a manager answer
    /// reads under its leases (DESIGN §4, reads; wire version 6). Files are unchanged.
    LeaseReads,
    /// Epoch transitions ship what differs: a store's state names the commit it was
    /// installed by ([`crate::safetalk::Replica`]'s `stamp`), votes to another device
    /// may be summaries and commits patches ([`crate::msg::ToManager::VoteSummary`],
    /// [`crate::msg::ToChunk::CommitPatch`]; DESIGN "State at scale"; wire version 7,
    /// storage format 9, snapshot format 4).
    DiffTransitions,
    /// A relayout brings a chunk that rejoins up to date with a patch of a table it holds
    /// ([`crate::msg::ToManager::Holds`], [`crate::msg::ToChunk::ReconcilePatch`]; DESIGN
    /// "State at scale"; wire version 8). Files are unchanged.
    RejoinPatches,
    /// A renewal names when its manager sent it, and a chunk's renewal request echoes
    /// the last one it applied with the lease it has left, which extends the manager's
    /// read lease without a batch ([`crate::msg::ToManager::RenewalRequest`]'s
    /// `renewed`; DESIGN §4, reads; wire version 9). Files are unchanged.
    RenewalEchoes,
}

impl Generation {
    /// The newest layout: what this build writes unless told otherwise.
    pub const CURRENT: Generation = Generation::RenewalEchoes;

    /// The layout of a numbered wire version or file format, whose numbering gained
    /// inline values at `inline_from`, forwarding at `forwarding_from` (for a file
    /// format, which never holds a forwarded request, the same as `groups_from`) and
    /// session groups at `groups_from`, lease reads at `lease_from` (for a file format,
    /// which never holds a message, the same as `groups_from`), stamped states with
    /// summaries and patches at `diff_from`, patches for rejoining chunks at
    /// `rejoin_from` (for a file format, the same as `diff_from`), and renewal echoes at
    /// `echo_from` (for a file format, the same as `diff_from`).
    #[allow(clippy::too_many_arguments)]
    pub fn of(
        version: u64,
        inline_from: u64,
        forwarding_from: u64,
        groups_from: u64,
        lease_from: u64,
        diff_from: u64,
        rejoin_from: u64,
        echo_from: u64,
    ) -> Generation {
        if version >= echo_from {
            Generation::RenewalEchoes
        } else if version >= rejoin_from {
            Generation::RejoinPatches
        } else if version >= diff_from {
            Generation::DiffTransitions
        } else if version >= lease_from {
            Generation::LeaseReads
        } else if version >= groups_from {
            Generation::SessionGroups
        } else if version >= forwarding_from {
            Generation::Forwarding
        } else if version >= inline_from {
            Generation::InlineValues
        } else {
            Generation::BeforeInlineValues
        }
    }

    /// Whether manifests carry their inline value in this layout.
    pub fn inline_values(self) -> bool {
        self >= Generation::InlineValues
    }
}

thread_local! {
    static GENERATION: Cell<Generation> = const { Cell::new(Generation::CURRENT) };
}

/// Run `f` (an encode or a decode) at generation `g`.
pub fn with<R>(g: Generation, f: impl FnOnce() -> R) -> R {
    struct Restore(Generation);
    impl Drop for Restore {
        fn drop(&mut self) {
            GENERATION.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(GENERATION.with(|c| c.replace(g)));
    f()
}

/// The generation being encoded or decoded on this thread.
pub fn current() -> Generation {
    GENERATION.with(|c| c.get())
}

/// `#[serde(with = "crate::generation::inline_value")]` for a manifest's inline value:
/// absent from the encoding before [`Generation::InlineValues`].
pub mod inline_value {
    use super::current;
    use bytes::Bytes;
    use serde::de::{Deserialize, Deserializer};
    use serde::ser::{Error, Serialize, Serializer};

    /// Write the value, or nothing at an older generation (where only `None` fits).
    pub fn serialize<S: Serializer>(v: &Option<Bytes>, s: S) -> Result<S::Ok, S::Error> {
        match (current().inline_values(), v) {
            (true, v) => v.serialize(s),
            (false, None) => s.serialize_unit(),
            (false, Some(_)) => Err(S::Error::custom(
                "an object with an inline value cannot be encoded for a peer or format from before inline values",
            )),
        }
    }

    /// Read the value; nothing at an older generation.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Bytes>, D::Error> {
        if current().inline_values() {
            Option::<Bytes>::deserialize(d)
        } else {
            <()>::deserialize(d)?;
            Ok(None)
        }
    }
}

/// `#[serde(with = "crate::generation::lease_left")]` for the lease a chunk's ACCEPTED
/// reports: absent from the encoding before [`Generation::LeaseReads`], where it is
/// left out (a manager of an older build does not read it) and read as `None`.
pub mod lease_left {
    use super::Generation;
    use serde::{Deserializer, Serializer};
    use std::time::Duration;

    /// Write the length, or nothing at an older generation.
    pub fn serialize<S: Serializer>(v: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        super::write_since(Generation::LeaseReads, v, s)
    }

    /// Read the length; `None` at an older generation.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        super::read_since(Generation::LeaseReads, d)
    }
}

/// `#[serde(serialize_with = "crate::generation::only_inline")]` on a value (a change)
/// that exists only from [`Generation::InlineValues`] on: it refuses to encode earlier.
pub fn only_inline<T: serde::Serialize, S: serde::Serializer>(
    v: &T,
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::Error;
    match current().inline_values() {
        true => v.serialize(s),
        false => Err(S::Error::custom(
            "a one-change put cannot be encoded for a peer or format from before inline values",
        )),
    }
}

/// `#[serde(with = "crate::generation::session_children")]` for a session's child
/// sessions in other stores: absent from the encoding before
/// [`Generation::SessionGroups`] (where only an empty map fits).
pub mod session_children {
    use super::{Generation, current};
    use crate::ids::{SessionId, StoreId};
    use serde::de::{Deserialize, Deserializer};
    use serde::ser::{Error, Serialize, Serializer};
    use std::collections::BTreeMap;

    /// Write the map, or nothing at an older generation (where only an empty one fits).
    pub fn serialize<S: Serializer>(
        v: &BTreeMap<StoreId, SessionId>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match (current() >= Generation::SessionGroups, v.is_empty()) {
            (true, _) => v.serialize(s),
            (false, true) => s.serialize_unit(),
            (false, false) => Err(S::Error::custom(
                "a session with child sessions cannot be encoded for a peer or format from before session groups",
            )),
        }
    }

    /// Read the map; empty at an older generation.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<StoreId, SessionId>, D::Error> {
        if current() >= Generation::SessionGroups {
            BTreeMap::deserialize(d)
        } else {
            <()>::deserialize(d)?;
            Ok(BTreeMap::new())
        }
    }
}

/// `#[serde(serialize_with = "crate::generation::only_groups")]` on a value that exists
/// only from [`Generation::SessionGroups`] on: an older peer or file could not decode it.
pub fn only_groups<T: serde::Serialize, S: serde::Serializer>(
    v: &T,
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::Error;
    if current() >= Generation::SessionGroups {
        v.serialize(s)
    } else {
        Err(S::Error::custom(
            "a session attach cannot be encoded for a peer or format from before session groups",
        ))
    }
}

/// An optional field that exists from generation `from` on: written as it is from
/// then, as nothing before (where it is dropped).
fn write_since<T: serde::Serialize, S: serde::Serializer>(
    from: Generation,
    v: &Option<T>,
    s: S,
) -> Result<S::Ok, S::Error> {
    if current() >= from {
        serde::Serialize::serialize(v, s)
    } else {
        s.serialize_unit()
    }
}

/// [`write_since`]'s reading: `None` before generation `from`.
fn read_since<'de, T: serde::Deserialize<'de>, D: serde::Deserializer<'de>>(
    from: Generation,
    d: D,
) -> Result<Option<T>, D::Error> {
    if current() >= from {
        <Option<T> as serde::Deserialize>::deserialize(d)
    } else {
        <() as serde::Deserialize>::deserialize(d)?;
        Ok(None)
    }
}

/// `#[serde(with = "crate::generation::stamp")]` for the commit a store's state was
/// installed by: absent from the encoding before [`Generation::DiffTransitions`], where
/// it is left out and read as `None` (a state without a stamp is shipped whole).
pub mod stamp {
    use super::Generation;
    use serde::de::{Deserialize, Deserializer};
    use serde::ser::{Serialize, Serializer};

    /// Write the stamp, or nothing at an older generation.
    pub fn serialize<T: Serialize, S: Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
        super::write_since(Generation::DiffTransitions, v, s)
    }

    /// Read the stamp; `None` at an older generation.
    pub fn deserialize<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<T>, D::Error> {
        super::read_since(Generation::DiffTransitions, d)
    }
}

/// `#[serde(with = "crate::generation::renewal_echo")]` for a renewal's send time and a
/// renewal request's echo of it: absent from the encoding before
/// [`Generation::RenewalEchoes`], where it is left out and read as `None` (an older
/// manager does not read it; from an older chunk the read lease comes from ACCEPTED
/// alone).
pub mod renewal_echo {
    use super::Generation;
    use serde::de::{Deserialize, Deserializer};
    use serde::ser::{Serialize, Serializer};

    /// Write the value, or nothing at an older generation.
    pub fn serialize<T: Serialize, S: Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
        super::write_since(Generation::RenewalEchoes, v, s)
    }

    /// Read the value; `None` at an older generation.
    pub fn deserialize<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<T>, D::Error> {
        super::read_since(Generation::RenewalEchoes, d)
    }
}

/// `#[serde(serialize_with = "crate::generation::only_diff")]` on a message that exists
/// only from [`Generation::DiffTransitions`] on: an older peer could not decode it.
pub fn only_diff<T: serde::Serialize, S: serde::Serializer>(
    v: &T,
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::Error;
    if current() >= Generation::DiffTransitions {
        v.serialize(s)
    } else {
        Err(S::Error::custom(
            "a vote summary or commit patch cannot be encoded for a peer from before diff transitions",
        ))
    }
}

/// `#[serde(serialize_with = "crate::generation::only_rejoin")]` on a message that exists
/// only from [`Generation::RejoinPatches`] on: an older peer could not decode it.
pub fn only_rejoin<T: serde::Serialize, S: serde::Serializer>(
    v: &T,
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::Error;
    if current() >= Generation::RejoinPatches {
        v.serialize(s)
    } else {
        Err(S::Error::custom(
            "a rejoin patch cannot be encoded for a peer from before rejoin patches",
        ))
    }
}

/// `#[serde(serialize_with = "crate::generation::only_forwarding")]` on a message that
/// exists only from [`Generation::Forwarding`] on: an older peer could not decode it.
pub fn only_forwarding<T: serde::Serialize, S: serde::Serializer>(
    v: &T,
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::Error;
    if current() >= Generation::Forwarding {
        v.serialize(s)
    } else {
        Err(S::Error::custom(
            "a forwarded request cannot be encoded for a peer from before forwarding",
        ))
    }
}
