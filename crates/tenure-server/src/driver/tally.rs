//! The sizes of the managed stores' tables (active objects, their bytes, the collector's
//! backlog, held locks) for the gauges and status answers, counted a slice per tick.
//!
//! Counting a table means visiting every key, and the driver's loop is where every
//! message and request of the device is handled: a whole scan there once a second grew
//! with the state held (at 380,000 objects it was a fifth of a device's CPU, and its
//! pauses made peers' managers mark the device's chunks failed). [`Tallies::tick`] visits
//! at most [`BUDGET`] keys and lock names per tick, resuming where the last tick stopped
//! (the tables are persistent maps, so a resumed range is cheap), and each store's count
//! is the last complete pass over it. A table no larger than the budget is counted whole
//! in one tick, so a small cluster's figures are exact every second, as before.

use std::collections::BTreeMap;
use std::ops::AddAssign;
use std::sync::Arc;
use tenure_core::Device;
use tenure_core::ids::StoreId;
use tenure_core::lockctl::LockName;
use tenure_core::objects::ObjectTally;

/// Keys and lock names visited per tick, over every managed store.
pub(super) const BUDGET: usize = 20_000;

/// The passes over each managed store's tables.
#[derive(Default)]
pub(super) struct Tallies {
    stores: BTreeMap<StoreId, StoreTally>,
    /// The store the next tick starts with (where the last one ran out of budget).
    turn: Option<StoreId>,
}

#[derive(Default)]
struct StoreTally {
    objects: Pass<Arc<str>, ObjectTally>,
    locks: Pass<LockName, usize>,
}

/// One table's count, a slice at a time.
struct Pass<K, T> {
    /// The last key counted, while a pass is under way.
    cursor: Option<K>,
    /// The count of the pass under way.
    partial: T,
    /// The count of the last complete pass.
    last: Option<T>,
}

impl<K, T: Default> Default for Pass<K, T> {
    fn default() -> Self {
        Pass {
            cursor: None,
            partial: T::default(),
            last: None,
        }
    }
}

impl<K, T: Default + AddAssign + Copy> Pass<K, T> {
    /// Count the next slice of a table of `len` keys with `count(after, at_most)` (the
    /// slice's count and the last key counted if keys remain), spending `left`.
    fn step(
        &mut self,
        len: usize,
        left: &mut usize,
        count: impl FnOnce(Option<&K>, usize) -> (T, Option<K>),
    ) {
        if *left == 0 {
            return;
        }
        let n = if self.cursor.is_none() && len <= *left {
            len
        } else {
            *left
        };
        *left -= n;
        let (t, next) = count(self.cursor.as_ref(), n);
        self.partial += t;
        self.cursor = next;
        if self.cursor.is_none() {
            self.last = Some(std::mem::take(&mut self.partial));
        }
    }

    /// The last complete pass's count (before the first completes, the count so far).
    fn value(&self) -> T {
        self.last.unwrap_or(self.partial)
    }
}

impl Tallies {
    /// Count the next slices of the managed stores' tables, at most `budget` keys and
    /// names in all; stores no longer managed here are forgotten.
    pub(super) fn tick(&mut self, device: &Device, budget: usize) {
        let managed: Vec<StoreId> = (device.manager_views().iter())
            .map(|m| m.store)
            .filter(|s| device.managed_tables(*s).is_some())
            .collect();
        self.stores.retain(|s, _| managed.contains(s));
        if managed.is_empty() {
            return;
        }
        let start = (managed.iter())
            .position(|s| Some(*s) == self.turn)
            .unwrap_or(0);
        let mut left = budget;
        for i in 0..managed.len() {
            let store = managed[(start + i) % managed.len()];
            let t = device.managed_tables(store).expect("managed");
            let st = self.stores.entry(store).or_default();
            let objects = &t.objects;
            st.objects.step(objects.keys.len(), &mut left, |after, n| {
                objects.tally_after(after.map(|k| &**k), n)
            });
            let locks = &t.locks;
            st.locks.step(locks.entry_count(), &mut left, |after, n| {
                locks.held_count_after(after, n)
            });
            let unfinished = st.objects.cursor.is_some() || st.locks.cursor.is_some();
            if left == 0 && unfinished {
                self.turn = Some(store);
                return;
            }
        }
        self.turn = None;
    }

    /// The object gauges summed over the managed stores.
    pub(super) fn objects(&self) -> ObjectTally {
        let mut sum = ObjectTally::default();
        for st in self.stores.values() {
            sum += st.objects.value();
        }
        sum
    }

    /// Locks with a holder, summed over the managed stores.
    pub(super) fn locks_held(&self) -> usize {
        self.stores.values().map(|st| st.locks.value()).sum()
    }

    /// Locks with a holder in `store`, as last counted (none if it was not counted yet).
    pub(super) fn store_locks_held(&self, store: StoreId) -> Option<usize> {
        self.stores.get(&store).map(|st| st.locks.value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table of 10 keys counted 4 at a time: the count is the last complete pass's,
    /// and a change shows once a pass has gone over it.
    #[test]
    fn a_pass_resumes_where_the_budget_ran_out() {
        let mut keys: Vec<u32> = (0..10).collect();
        let mut pass: Pass<u32, usize> = Pass::default();
        let count = |keys: &[u32], after: Option<&u32>, n: usize| {
            let rest: Vec<u32> = (keys.iter())
                .copied()
                .filter(|k| after.is_none_or(|a| k > a))
                .collect();
            let slice = &rest[..n.min(rest.len())];
            let more = rest.len() > slice.len();
            (slice.len(), slice.last().copied().filter(|_| more))
        };
        let mut ticks = 0;
        while pass.last.is_none() {
            let mut left = 4;
            pass.step(keys.len(), &mut left, |a, n| count(&keys, a, n));
            ticks += 1;
        }
        assert_eq!((pass.value(), ticks), (10, 3));
        keys.truncate(5);
        let mut left = 4;
        pass.step(keys.len(), &mut left, |a, n| count(&keys, a, n));
        assert_eq!(pass.value(), 10, "the pass under way is not shown");
        let mut left = 4;
        pass.step(keys.len(), &mut left, |a, n| count(&keys, a, n));
        assert_eq!(pass.value(), 5);
        // A table within the budget is counted whole at once.
        let mut left = 100;
        pass.step(keys.len(), &mut left, |a, n| count(&keys, a, n));
        assert_eq!((pass.value(), left), (5, 95));
    }
}
