//! Lock modes and the multi-granularity compatibility matrix.
//!
//! Sessions ask for [`LockMode::Shared`] or [`LockMode::Exclusive`] on a name. Holding a
//! lock on `/a/b` in mode `m` implicitly holds the intention mode [`GranularMode::IS`]
//! (for shared) or [`GranularMode::IX`] (for exclusive) on every ancestor (`/a`), so that
//! a lock on an ancestor — which covers its descendants (seed 004 §9, HCLC cover rule) —
//! is checked against locks below it without scanning them. Two locks conflict iff on
//! some node both place a mode, and those modes are incompatible in [`GranularMode::compatible`].

use super::name::LockName;
use serde::{Deserialize, Serialize};

/// The mode a session requests and holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum LockMode {
    /// Readers: any number of sessions may hold a shared lock together.
    Shared,
    /// A writer: no other session holds an overlapping lock.
    Exclusive,
}

impl LockMode {
    /// The mode placed on the named node itself.
    pub fn granular(self) -> GranularMode {
        match self {
            LockMode::Shared => GranularMode::S,
            LockMode::Exclusive => GranularMode::X,
        }
    }

    /// The intention mode implicitly placed on every proper ancestor.
    pub fn intention(self) -> GranularMode {
        match self {
            LockMode::Shared => GranularMode::IS,
            LockMode::Exclusive => GranularMode::IX,
        }
    }

    /// `self` is not weaker than `other` (the mode half of the HCLC cover relation).
    pub fn covers(self, other: LockMode) -> bool {
        self >= other
    }
}

/// Modes of the multi-granularity protocol (Gray's IS, IX, S, X).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum GranularMode {
    /// Intention shared: a shared lock is held somewhere below.
    IS,
    /// Intention exclusive: an exclusive lock is held somewhere below.
    IX,
    /// Shared.
    S,
    /// Exclusive.
    X,
}

impl GranularMode {
    /// The standard compatibility matrix:
    ///
    /// ```text
    ///        IS  IX  S   X
    ///   IS   y   y   y   n
    ///   IX   y   y   n   n
    ///   S    y   n   y   n
    ///   X    n   n   n   n
    /// ```
    pub fn compatible(self, other: GranularMode) -> bool {
        use GranularMode::*;
        matches!(
            (self, other),
            (IS, IS) | (IS, IX) | (IS, S) | (IX, IS) | (IX, IX) | (S, IS) | (S, S)
        )
    }
}

/// The mode lock `(name, mode)` places on node `node`, if any: `mode` itself on the name,
/// its intention mode on proper ancestors, nothing elsewhere.
pub fn mode_on(name: &LockName, mode: LockMode, node: &LockName) -> Option<GranularMode> {
    if name == node {
        Some(mode.granular())
    } else if node.is_ancestor_of(name) {
        Some(mode.intention())
    } else {
        None
    }
}

/// Locks `(a, ma)` and `(b, mb)` held by different sessions conflict: on the deepest node
/// both place a mode on, the two modes are incompatible. Only that node matters, because
/// above it both place intention modes, which are always compatible with each other.
pub fn conflicts(a: &LockName, ma: LockMode, b: &LockName, mb: LockMode) -> bool {
    let node = if a == b || a.is_ancestor_of(b) {
        a
    } else if b.is_ancestor_of(a) {
        b
    } else {
        // Disjoint names share only intention modes on common ancestors.
        return false;
    };
    match (mode_on(a, ma, node), mode_on(b, mb, node)) {
        (Some(x), Some(y)) => !x.compatible(y),
        _ => false,
    }
}
