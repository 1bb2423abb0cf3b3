//! Serde for the persistent collections of the stores' tables ([`imbl`]), as the
//! standard collections encode them (a map, a set as a sequence, a vector as a
//! sequence). imbl's own serde support reserves room for the length an input declares,
//! which lets a malformed frame abort the process; these read into the standard
//! collections first, whose decoding never trusts a declared length.

use serde::de::{Deserialize, Deserializer};
use serde::ser::{Serialize, Serializer};
use std::collections::{BTreeMap, BTreeSet};

/// `#[serde(with = "crate::persist_serde::ord_map")]`
pub mod ord_map {
    use super::*;

    /// As a map.
    pub fn serialize<K: Serialize + Ord, V: Serialize, S: Serializer>(
        m: &imbl::OrdMap<K, V>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_map(m.iter())
    }

    /// From a map.
    pub fn deserialize<'de, K, V, D>(d: D) -> Result<imbl::OrdMap<K, V>, D::Error>
    where
        K: Deserialize<'de> + Ord + Clone,
        V: Deserialize<'de> + Clone,
        D: Deserializer<'de>,
    {
        Ok(BTreeMap::<K, V>::deserialize(d)?.into_iter().collect())
    }
}

/// `#[serde(with = "crate::persist_serde::ord_set")]`
pub mod ord_set {
    use super::*;

    /// As a sequence.
    pub fn serialize<K: Serialize + Ord, S: Serializer>(
        m: &imbl::OrdSet<K>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(m.iter())
    }

    /// From a sequence.
    pub fn deserialize<'de, K, D>(d: D) -> Result<imbl::OrdSet<K>, D::Error>
    where
        K: Deserialize<'de> + Ord + Clone,
        D: Deserializer<'de>,
    {
        Ok(BTreeSet::<K>::deserialize(d)?.into_iter().collect())
    }
}

/// `#[serde(with = "crate::persist_serde::vector")]`
pub mod vector {
    use super::*;

    /// As a sequence.
    pub fn serialize<T: Serialize + Clone, S: Serializer>(
        v: &imbl::Vector<T>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter())
    }

    /// From a sequence.
    pub fn deserialize<'de, T, D>(d: D) -> Result<imbl::Vector<T>, D::Error>
    where
        T: Deserialize<'de> + Clone,
        D: Deserializer<'de>,
    {
        Ok(Vec::<T>::deserialize(d)?.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    /// A map, set or vector that declares more entries than its input holds is an
    /// error, not an allocation of that size.
    #[test]
    fn a_declared_length_is_not_trusted() {
        #[derive(serde::Deserialize, Debug)]
        struct T {
            #[serde(with = "super::ord_map")]
            _m: imbl::OrdMap<u64, u64>,
        }
        #[derive(serde::Deserialize, Debug)]
        struct S {
            #[serde(with = "super::ord_set")]
            _s: imbl::OrdSet<u64>,
        }
        #[derive(serde::Deserialize, Debug)]
        struct V {
            #[serde(with = "super::vector")]
            _v: imbl::Vector<u64>,
        }
        // postcard: a varint length of 2^62, then nothing.
        let bytes = [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40];
        assert!(postcard::from_bytes::<T>(&bytes).is_err());
        assert!(postcard::from_bytes::<S>(&bytes).is_err());
        assert!(postcard::from_bytes::<V>(&bytes).is_err());
    }
}
