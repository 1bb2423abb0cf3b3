//! A small ordered map kept as one sorted vector: for the maps a store holds by the
//! million that almost always have one or two entries (a key's manifests by upload, a
//! lock's holders). A `BTreeMap` with one entry allocates a whole leaf node (room for
//! eleven entries: 3.5 KB for one manifest); this allocates what it holds. Lookups are
//! binary searches; inserting and removing move the entries after the place, which for
//! a handful is cheaper than a tree. Serialized as a map, as a `BTreeMap` is.

use serde::de::{Deserialize, Deserializer};
use serde::ser::{Serialize, Serializer};
use std::borrow::Borrow;

/// An ordered map in a sorted vector.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct VecMap<K, V>(Vec<(K, V)>);

impl<K, V> Default for VecMap<K, V> {
    fn default() -> Self {
        VecMap(Vec::new())
    }
}

impl<K: std::fmt::Debug, V: std::fmt::Debug> std::fmt::Debug for VecMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| (k, v)))
            .finish()
    }
}

impl<K: Ord, V> VecMap<K, V> {
    /// An empty map.
    pub const fn new() -> Self {
        VecMap(Vec::new())
    }

    fn find<Q: Ord + ?Sized>(&self, k: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
    {
        self.0.binary_search_by(|(x, _)| x.borrow().cmp(k))
    }

    /// The value at `k`.
    pub fn get<Q: Ord + ?Sized>(&self, k: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.find(k).ok().map(|i| &self.0[i].1)
    }

    /// The value at `k`, to change.
    pub fn get_mut<Q: Ord + ?Sized>(&mut self, k: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        self.find(k).ok().map(|i| &mut self.0[i].1)
    }

    /// Whether `k` has a value.
    pub fn contains_key<Q: Ord + ?Sized>(&self, k: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.find(k).is_ok()
    }

    /// Set `k`'s value; the old one, if any.
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        match self.find(&k) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, v)),
            Err(i) => {
                self.0.reserve_exact(1);
                self.0.insert(i, (k, v));
                None
            }
        }
    }

    /// Take `k`'s value out.
    pub fn remove<Q: Ord + ?Sized>(&mut self, k: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        let v = self.find(k).ok().map(|i| self.0.remove(i).1);
        self.fit();
        v
    }

    /// Give back room no entry uses (a `Vec` grows to four at its first push: 1.3 KB for
    /// one manifest, held by the million).
    fn fit(&mut self) {
        if self.0.capacity() > self.0.len() {
            self.0.shrink_to_fit();
        }
    }

    /// Keep the entries `f` accepts.
    pub fn retain(&mut self, mut f: impl FnMut(&K, &mut V) -> bool) {
        let before = self.0.len();
        self.0.retain_mut(|(k, v)| f(k, v));
        if self.0.len() < before {
            self.fit();
        }
    }

    /// The value at `k`, inserted with `make` if there is none.
    pub fn get_or_insert_with(&mut self, k: K, make: impl FnOnce() -> V) -> &mut V {
        let i = match self.find(&k) {
            Ok(i) => i,
            Err(i) => {
                self.0.reserve_exact(1);
                self.0.insert(i, (k, make()));
                i
            }
        };
        &mut self.0[i].1
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Entries in key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&K, &V)> + ExactSizeIterator {
        self.0.iter().map(|(k, v)| (k, v))
    }

    /// Entries in key order, values to change.
    pub fn iter_mut(&mut self) -> impl DoubleEndedIterator<Item = (&K, &mut V)> {
        self.0.iter_mut().map(|(k, v)| (&*k, v))
    }

    /// Keys in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &K> + ExactSizeIterator {
        self.0.iter().map(|(k, _)| k)
    }

    /// Values in key order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + ExactSizeIterator {
        self.0.iter().map(|(_, v)| v)
    }

    /// Values in key order, to change.
    pub fn values_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut V> {
        self.0.iter_mut().map(|(_, v)| v)
    }

    /// The entry with the smallest key.
    pub fn first_key_value(&self) -> Option<(&K, &V)> {
        self.0.first().map(|(k, v)| (k, v))
    }

    /// The entry with the largest key.
    pub fn last_key_value(&self) -> Option<(&K, &V)> {
        self.0.last().map(|(k, v)| (k, v))
    }
}

impl<K: Ord + Borrow<Q>, Q: Ord + ?Sized, V> std::ops::Index<&Q> for VecMap<K, V> {
    type Output = V;
    /// The value at `k`; panics if there is none (as a `BTreeMap` does).
    fn index(&self, k: &Q) -> &V {
        self.get(k).expect("no entry for the key")
    }
}

impl<K: Ord, V> FromIterator<(K, V)> for VecMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut v: Vec<(K, V)> = iter.into_iter().collect();
        // Stable: of equal keys the last wins, as inserting them in turn would.
        v.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(K, V)> = Vec::with_capacity(v.len());
        for (k, x) in v {
            match out.last_mut() {
                Some(last) if last.0 == k => last.1 = x,
                _ => out.push((k, x)),
            }
        }
        VecMap(out)
    }
}

impl<K, V> IntoIterator for VecMap<K, V> {
    type Item = (K, V);
    type IntoIter = std::vec::IntoIter<(K, V)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a, K, V> IntoIterator for &'a VecMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = std::iter::Map<std::slice::Iter<'a, (K, V)>, fn(&'a (K, V)) -> (&'a K, &'a V)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

impl<K: Serialize, V: Serialize> Serialize for VecMap<K, V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

impl<'de, K: Deserialize<'de> + Ord, V: Deserialize<'de>> Deserialize<'de> for VecMap<K, V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let m = std::collections::BTreeMap::<K, V>::deserialize(d)?;
        Ok(VecMap(m.into_iter().collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A map holds room for what it holds: one manifest is one manifest's bytes, not a
    /// `Vec`'s first growth to four (which a table multiplies by its keys).
    #[test]
    fn room_follows_the_entries() {
        let mut m: VecMap<u32, [u8; 300]> = VecMap::new();
        m.insert(2, [0; 300]);
        assert_eq!(m.0.capacity(), 1);
        m.get_or_insert_with(1, || [1; 300]);
        m.insert(3, [3; 300]);
        assert_eq!(m.0.capacity(), 3);
        m.remove(&1);
        assert_eq!(m.0.capacity(), 2);
        m.retain(|k, _| *k == 3);
        assert_eq!(m.0.capacity(), 1);
        m.retain(|_, _| true);
        assert_eq!(m.0.capacity(), 1);
    }

    /// Same answers as a BTreeMap under the same inserts and removals, and the same
    /// encoding.
    #[test]
    fn behaves_and_encodes_as_a_btreemap() {
        let mut a: VecMap<u32, u32> = VecMap::new();
        let mut b: BTreeMap<u32, u32> = BTreeMap::new();
        let mut x = 7u32;
        for i in 0..500u32 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345) % 64;
            if i % 3 == 0 {
                assert_eq!(a.remove(&x), b.remove(&x));
            } else {
                assert_eq!(a.insert(x, i), b.insert(x, i));
            }
            assert_eq!(a.get(&x), b.get(&x));
            assert_eq!(a.len(), b.len());
        }
        assert!(a.iter().eq(b.iter()));
        a.retain(|k, _| k % 2 == 0);
        b.retain(|k, _| k % 2 == 0);
        assert!(a.iter().eq(b.iter()));
        let bytes = postcard::to_stdvec(&a).unwrap();
        assert_eq!(bytes, postcard::to_stdvec(&b).unwrap());
        let back: VecMap<u32, u32> = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, a);
        let collected: VecMap<u32, u32> = [(2, 1), (1, 1), (2, 3)].into_iter().collect();
        assert_eq!(
            collected.iter().collect::<Vec<_>>(),
            vec![(&1, &1), (&2, &3)]
        );
    }
}
