//! Lock names: slash-separated paths such as `/billing/invoices/42`.
//!
//! A name denotes a portion of the store's resources; a lock on a name *covers* the
//! portions named by its descendants (seed 004 §9, the HCLC cover rule: "the portion of the
//! DB specified by x2 is contained in the portion of the DB addressed by x1"). Names are
//! validated once, here, and every other part of the lock table works on [`LockName`].

use serde::{Deserialize, Serialize};
use std::fmt;
use thiserror::Error;

/// Longest accepted name, in bytes.
pub const NAME_LEN_MAX: usize = 512;
/// Deepest accepted name, in segments (`/a/b/c` has depth 3).
pub const NAME_DEPTH_MAX: usize = 32;

/// Why a string is not a valid lock name. Bad input changes nothing (DESIGN §10).
#[derive(Clone, Debug, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum InvalidName {
    /// The empty string.
    #[error("name is empty")]
    Empty,
    /// The name does not begin with `/`.
    #[error("name must start with '/'")]
    NoLeadingSlash,
    /// `/` alone names the whole store and cannot be locked.
    #[error("the root '/' is not a name (it stands for the whole store)")]
    Root,
    /// Two consecutive slashes, or a trailing slash.
    #[error("name has an empty segment at position {segment}")]
    EmptySegment {
        /// Zero-based index of the empty segment.
        segment: usize,
    },
    /// A `.` or `..` segment.
    #[error("name has a '.' or '..' segment at position {segment}")]
    DotSegment {
        /// Zero-based index of the offending segment.
        segment: usize,
    },
    /// Longer than [`NAME_LEN_MAX`] bytes.
    #[error("name is {len} bytes long, the maximum is {max}")]
    TooLong {
        /// Length of the rejected name, in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Deeper than [`NAME_DEPTH_MAX`] segments.
    #[error("name has {depth} segments, the maximum is {max}")]
    TooDeep {
        /// Number of segments of the rejected name.
        depth: usize,
        /// The limit.
        max: usize,
    },
    /// A control or whitespace character other than a plain space.
    #[error("name has a non-printable character at byte {byte}")]
    NotPrintable {
        /// Byte offset of the offending character.
        byte: usize,
    },
}

/// A validated lock name.
///
/// Ordering is byte order of the path, so the descendants of `/a` (`/a/…`) form one
/// contiguous range of a `BTreeMap<LockName, _>` (see [`LockName::descendant_range`]).
///
/// Shared, not copied: a held lock's name sits in the lock's entry, its session's set of
/// held names, the request's record and the grant; a clone is a reference count.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct LockName(std::sync::Arc<str>);

impl LockName {
    /// Validates `s` as a lockable name (not the root).
    pub fn parse(s: &str) -> Result<LockName, InvalidName> {
        Self::check(s, false)?;
        Ok(LockName(s.into()))
    }

    /// Validates `s` as a prefix for listings: a lockable name, or the root `/`.
    pub fn parse_prefix(s: &str) -> Result<Option<LockName>, InvalidName> {
        if s == "/" {
            return Ok(None);
        }
        Self::parse(s).map(Some)
    }

    fn check(s: &str, root_ok: bool) -> Result<(), InvalidName> {
        if s.is_empty() {
            return Err(InvalidName::Empty);
        }
        if s.len() > NAME_LEN_MAX {
            return Err(InvalidName::TooLong {
                len: s.len(),
                max: NAME_LEN_MAX,
            });
        }
        let Some(rest) = s.strip_prefix('/') else {
            return Err(InvalidName::NoLeadingSlash);
        };
        if rest.is_empty() {
            return if root_ok {
                Ok(())
            } else {
                Err(InvalidName::Root)
            };
        }
        if let Some((byte, _)) = s
            .char_indices()
            .find(|(_, c)| c.is_control() || (c.is_whitespace() && *c != ' '))
        {
            return Err(InvalidName::NotPrintable { byte });
        }
        let mut depth = 0;
        for (segment, part) in rest.split('/').enumerate() {
            depth += 1;
            if part.is_empty() {
                return Err(InvalidName::EmptySegment { segment });
            }
            if part == "." || part == ".." {
                return Err(InvalidName::DotSegment { segment });
            }
        }
        if depth > NAME_DEPTH_MAX {
            return Err(InvalidName::TooDeep {
                depth,
                max: NAME_DEPTH_MAX,
            });
        }
        Ok(())
    }

    /// The path as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Number of segments.
    pub fn depth(&self) -> usize {
        self.0.bytes().filter(|b| *b == b'/').count()
    }

    /// Proper ancestors, outermost first: `/a/b/c` → `/a`, `/a/b`. The root is not a name.
    pub fn ancestors(&self) -> impl Iterator<Item = LockName> + '_ {
        self.0
            .char_indices()
            .skip(1)
            .filter(|(_, c)| *c == '/')
            .map(|(i, _)| LockName(self.0[..i].into()))
    }

    /// `self` is a proper ancestor of `other` (`/a` of `/a/b`, not of `/ab`).
    pub fn is_ancestor_of(&self, other: &LockName) -> bool {
        other.0.len() > self.0.len()
            && other.0.starts_with(&*self.0)
            && other.0.as_bytes()[self.0.len()] == b'/'
    }

    /// The two names overlap: equal, or one covers the other.
    pub fn overlaps(&self, other: &LockName) -> bool {
        self == other || self.is_ancestor_of(other) || other.is_ancestor_of(self)
    }

    /// Bounds of the `BTreeMap` range holding exactly the proper descendants of `self`:
    /// keys `k` with `lo <= k < hi` (`/a/` ≤ k < `/a0`, since `'0'` follows `'/'`).
    pub fn descendant_range(&self) -> (String, String) {
        (format!("{}/", self.0), format!("{}0", self.0))
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for LockName {
    type Error = InvalidName;
    fn try_from(s: String) -> Result<Self, InvalidName> {
        LockName::check(&s, false)?;
        Ok(LockName(s.into()))
    }
}

impl From<LockName> for String {
    fn from(n: LockName) -> String {
        n.0.to_string()
    }
}

impl std::borrow::Borrow<str> for LockName {
    fn borrow(&self) -> &str {
        &self.0
    }
}
