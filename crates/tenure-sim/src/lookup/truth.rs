//! The providers' true state over real time, and the staleness of an answer.
//!
//! Each key is owned by one provider slot; the slot's successive incarnations publish,
//! change, revoke and die. The *true state* of a key is the value its provider currently
//! announces, or absent: it changes at the real time the provider sends the update that
//! creates, changes or revokes the value, or at the real time the provider dies. Values
//! are unique per change (`p3i2c5`), so a value names one stretch of the history.
//!
//! **Staleness** of an answer (a value, or "absent", for one key) to a query issued at
//! real time `q` and answered at `r`: `max(0, q − t)`, where `t` is the latest real time
//! `≤ r` at which the key's true state equalled the answer (`t = r` when it still does).
//! An answer that never equalled the true state is fabricated.

use std::collections::BTreeMap;

/// One stretch of a key's history: from `since` (real µs) the true state was `value`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stretch {
    since: u64,
    value: Option<Vec<u8>>,
}

/// The true state of every key.
#[derive(Clone, Debug, Default)]
pub struct Truth {
    keys: BTreeMap<String, Vec<Stretch>>,
}

/// What the staleness of an answer came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Staleness {
    /// Stale by this many µs (0: fresh).
    Us(u64),
    /// The answer never was the key's true state.
    Fabricated,
}

impl Truth {
    /// The key's true state changes at real time `at`.
    pub fn set(&mut self, key: &str, at: u64, value: Option<Vec<u8>>) {
        let h = self.keys.entry(key.to_string()).or_default();
        if h.last().map(|s| &s.value) == Some(&value) {
            return;
        }
        if h.is_empty() && value.is_none() {
            return;
        }
        h.push(Stretch { since: at, value });
    }

    /// The key's true state now.
    pub fn current(&self, key: &str) -> Option<&[u8]> {
        (self.keys.get(key)?.last()?.value.as_deref()).map(|v| v as _)
    }

    /// Keys ever published under `prefix`.
    pub fn keys_under<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        (self.keys.keys())
            .filter(move |k| tenure_core::lookup::under(k, prefix))
            .map(|k| k.as_str())
    }

    /// Staleness of `answer` for `key`, to a query issued at `q` and answered at `r`.
    pub fn staleness(&self, key: &str, answer: Option<&[u8]>, q: u64, r: u64) -> Staleness {
        let empty = Vec::new();
        let h = self.keys.get(key).unwrap_or(&empty);
        // Before the first stretch the key was absent.
        let mut last_equal = None;
        let mut end = r;
        for s in h.iter().rev() {
            if s.since > r {
                end = s.since.min(end);
                continue;
            }
            if s.value.as_deref() == answer {
                last_equal = Some(end);
                break;
            }
            end = s.since;
        }
        if last_equal.is_none() && answer.is_none() {
            // Absent before the key's first value.
            last_equal = Some(h.first().map_or(r, |s| s.since.min(r)));
        }
        match last_equal {
            Some(t) => Staleness::Us(q.saturating_sub(t)),
            None => Staleness::Fabricated,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staleness_is_query_time_minus_the_last_time_the_answer_was_true() {
        let mut t = Truth::default();
        t.set("/a", 100, Some(b"v1".to_vec()));
        t.set("/a", 200, Some(b"v2".to_vec()));
        t.set("/a", 300, None);
        // Fresh answers.
        assert_eq!(t.staleness("/a", None, 350, 360), Staleness::Us(0));
        assert_eq!(t.staleness("/a", Some(b"v2"), 250, 260), Staleness::Us(0));
        // v1 stopped being true at 200.
        assert_eq!(t.staleness("/a", Some(b"v1"), 250, 260), Staleness::Us(50));
        // v2 stopped being true at 300 (the provider revoked it).
        assert_eq!(t.staleness("/a", Some(b"v2"), 400, 410), Staleness::Us(100));
        // Absent before the creation at 100.
        assert_eq!(t.staleness("/a", None, 150, 160), Staleness::Us(50));
        // A query answered before a change is judged at its answer time.
        assert_eq!(t.staleness("/a", Some(b"v1"), 190, 195), Staleness::Us(0));
        assert_eq!(
            t.staleness("/a", Some(b"nope"), 190, 195),
            Staleness::Fabricated
        );
        assert_eq!(t.staleness("/b", None, 190, 195), Staleness::Us(0));
    }
}
