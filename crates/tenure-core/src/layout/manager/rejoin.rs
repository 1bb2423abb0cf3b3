//! A chunk that rejoins, brought up to date by a patch (Tenure, DESIGN "State at scale").
//!
//! A relayout (§5.3.8) sends the store's state to the participants that do not hold it:
//! new chunks, and failed chunks that have recovered. A recovered chunk holds most of
//! it already: the table of the epoch it left, stamped ([`crate::safetalk::Stamp`]). It
//! names that table with each `ack` ([`crate::msg::ToManager::Holds`]), and the manager
//! keeps, for a while, the tables such a chunk may hold: the one each chunk was marked
//! failed at (the chunk has accepted every change of it), and the base of each merge it
//! committed, and the manager's own table as it was when a relayout began that aborted
//! (its rejoining chunks may have taken it). A rejoining chunk whose table is one of
//! those, or the manager's own, gets
//! the rows in which the manager's state differs from it ([`crate::rows::diff`]: the
//! tables share structure, so its cost follows what changed), not the state whole.

use super::*;
use crate::msg::{Holding, Patch};
use crate::safetalk::{Seq, Stamp};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How many earlier tables a manager keeps for chunks that may rejoin.
pub const ANCESTORS_KEPT: usize = 4;

/// How long a manager keeps an earlier table (it holds the rows changed since alive).
pub const ANCESTOR_KEEP: Duration = Duration::from_secs(120);

/// A table a rejoining chunk may hold: the store's tables as stamped `stamp` at
/// `confirmed`.
#[derive(Clone, Debug)]
pub struct Ancestor {
    /// The commit that installed the table.
    pub stamp: Stamp,
    /// The sequence number it is at.
    pub confirmed: Seq,
    /// The tables (sharing structure with the manager's).
    pub table: Tables,
    /// When the manager took it.
    pub at: Instant,
}

/// What a manager knows for patching rejoining chunks.
#[derive(Clone, Debug, Default)]
pub struct Rejoin {
    /// Earlier tables, oldest first.
    pub ancestors: Vec<Ancestor>,
    /// The table each chunk of the layout last said it holds.
    pub holding: BTreeMap<ChunkId, Holding>,
    /// Chunks that refused a patch (they no longer held the table it named): the next
    /// attempt sends them the state whole.
    pub whole_next: BTreeSet<ChunkId>,
}

impl Rejoin {
    /// Keep the tables stamped `stamp` at `confirmed` (nothing without a stamp).
    pub fn keep(&mut self, stamp: Option<Stamp>, confirmed: Seq, table: &Tables, now: Instant) {
        let Some(stamp) = stamp else { return };
        if (self.ancestors.iter()).any(|a| a.stamp == stamp && a.confirmed == confirmed) {
            return;
        }
        if self.ancestors.len() >= ANCESTORS_KEPT {
            self.ancestors.remove(0);
        }
        self.ancestors.push(Ancestor {
            stamp,
            confirmed,
            table: table.clone(),
            at: now,
        });
    }

    /// Drop the tables kept longer than [`ANCESTOR_KEEP`].
    pub fn expire(&mut self, now: Instant) {
        self.ancestors
            .retain(|a| now.saturating_since(a.at) < ANCESTOR_KEEP);
    }

    /// Forget everything about chunks that now hold the current state.
    pub fn committed(&mut self, chunks: &BTreeSet<ChunkId>) {
        for c in chunks {
            self.holding.remove(c);
            self.whole_next.remove(c);
        }
    }
}

/// Whether a chunk holding `h` can be brought to the table stamped `stamp` at
/// `confirmed` by confirming its own pending changes (the condition of
/// [`crate::safetalk::Merged::can_patch`]).
fn reaches(h: &Holding, stamp: Stamp, confirmed: Seq) -> bool {
    h.stamp == stamp && h.confirmed <= confirmed && h.last_held >= confirmed
}

/// Why a chunk that lacks the store's state is sent it whole rather than as a patch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RejoinMiss {
    /// A peer of an older build could not read the patch.
    OlderPeer,
    /// It refused a patch sent to it before.
    Retried,
    /// It named no table (a new chunk, or its `Holds` did not reach this manager).
    NothingNamed,
    /// The manager's state has pending changes (never so after a commit's batches).
    Pending,
    /// It named a table this manager does not keep.
    NotKept,
    /// A row did not encode.
    Encoding,
}

impl std::fmt::Display for RejoinMiss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RejoinMiss::OlderPeer => "older peer",
            RejoinMiss::Retried => "retried",
            RejoinMiss::NothingNamed => "nothing named",
            RejoinMiss::Pending => "pending changes",
            RejoinMiss::NotKept => "table not kept",
            RejoinMiss::Encoding => "encoding",
        })
    }
}

impl Manager {
    /// A chunk named the table it holds.
    pub(super) fn note_holding(&mut self, c: ChunkId, h: Holding) {
        if self.metadata.contains(c) {
            self.rejoin.holding.insert(c, h);
        }
    }

    /// The store's state as a patch for rejoining chunk `c`: none unless it named a
    /// table the manager still has (its own, or one kept), or if a row does not encode.
    pub(super) fn rejoin_patch(&self, ctx: &Ctx<'_>, c: ChunkId) -> Result<Patch, RejoinMiss> {
        if !ctx.rejoin_patches {
            return Err(RejoinMiss::OlderPeer);
        }
        if self.rejoin.whole_next.contains(&c) {
            return Err(RejoinMiss::Retried);
        }
        let h = (self.rejoin.holding.get(&c)).ok_or(RejoinMiss::NothingNamed)?;
        let now = &self.host.data;
        if !(now.l_list.is_empty() && now.r_list.is_empty()) {
            return Err(RejoinMiss::Pending);
        }
        let (from, upto, table) = match now.stamp {
            Some(s) if reaches(h, s, now.confirmed) => (s, now.confirmed, &now.table),
            _ => {
                let a = (self.rejoin.ancestors.iter().rev())
                    .find(|a| reaches(h, a.stamp, a.confirmed))
                    .ok_or(RejoinMiss::NotKept)?;
                (a.stamp, a.confirmed, &a.table)
            }
        };
        let mut rows = Vec::new();
        crate::rows::diff(table, &now.table, &mut rows).map_err(|_| RejoinMiss::Encoding)?;
        if ctx.cfg.planted.rejoin_patch_drops_a_row {
            rows.pop();
        }
        Ok(Patch {
            from,
            upto,
            confirmed: now.confirmed,
            head: Box::new(crate::rows::head(&now.table)),
            rows,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::Version;

    fn stamp(tx: u64) -> Stamp {
        Stamp {
            epoch: Epoch(2),
            tx,
        }
    }

    fn v(seq: u64) -> Version {
        Version {
            epoch: Epoch(2),
            seq,
        }
    }

    #[test]
    fn ancestors_kept_are_bounded_deduplicated_and_expire() {
        let mut r = Rejoin::default();
        let t = Tables::default();
        r.keep(None, v(1), &t, Instant(0));
        assert!(r.ancestors.is_empty(), "an unstamped table names nothing");
        for n in 0..6 {
            r.keep(Some(stamp(1)), v(n), &t, Instant(0));
            r.keep(Some(stamp(1)), v(n), &t, Instant(0));
        }
        assert_eq!(r.ancestors.len(), ANCESTORS_KEPT);
        assert_eq!(r.ancestors[0].confirmed, v(2), "the oldest go first");
        r.expire(Instant(0) + ANCESTOR_KEEP);
        assert!(r.ancestors.is_empty());
    }

    #[test]
    fn a_holding_reaches_a_table_of_its_stamp_it_can_confirm_up_to() {
        let h = Holding {
            stamp: stamp(1),
            confirmed: v(3),
            last_held: v(5),
        };
        assert!(reaches(&h, stamp(1), v(3)));
        assert!(reaches(&h, stamp(1), v(5)));
        assert!(!reaches(&h, stamp(1), v(6)), "it lacks change 6");
        assert!(!reaches(&h, stamp(1), v(2)), "it confirmed past 2");
        assert!(!reaches(&h, stamp(2), v(4)), "another lineage");
    }
}
