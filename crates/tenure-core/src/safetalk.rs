//! SafeTalk replication of a store's state changes (seed 004 §2–§3, Appendix A) and the
//! recovery merge with maximum forward progress (seed 004 §4.1, Appendix B Table II).
//!
//! The manager (Menasce's LC) tags every state change with the next sequence number and
//! sends ACCEPT to every live chunk (LLC). A chunk keeps the change in its pending lists —
//! the **L-list** for grants (AL), the **R-list** for releases (AR) — durably, and answers
//! ACCEPTED (LA/RA). When every live chunk has answered, the manager applies the change,
//! answers the client, and CONFIRMs it (CL/CR), piggybacked on its next message; the
//! chunk then moves the change from its pending list into its LOCK table. Many changes
//! travel in one ACCEPT (group commit), so one fsync covers a batch.
//!
//! Recovery (a new manager after a crash): each chunk of the quorum ships its
//! [`Replica`]; [`merge`] builds Menasce's sets L and R by sequence number and applies
//! them, so that a change accepted by at least one chunk is applied and one confirmed is
//! never lost (Assertion 4). Per single lock, the eleven global states of Table II reduce
//! to: grants pending anywhere are installed, releases pending anywhere are applied, and
//! when both are pending the later sequence number decides.

use crate::ids::Epoch;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A pending list (L or R): a persistent map, so that a copy of a replica (a
/// checkpoint's, a summary) shares its nodes instead of copying every pending change.
pub type Pending<Op> = imbl::OrdMap<Seq, Op>;

/// A replicated state that changes are applied to in sequence order.
pub trait Apply<Op> {
    /// Apply one confirmed change.
    fn apply(&mut self, seq: Seq, op: &Op);
    /// Reconcile with another replica's table after the recovery merge (a state-based
    /// merge for parts of the state that have one; none by default).
    fn absorb(&mut self, _other: &Self) {}
}

/// A store-wide sequence number: the epoch it was assigned in, then a counter within the
/// epoch. Ordered, and strictly increasing across manager changes.
pub use crate::ids::Version as Seq;

/// Whether a change is a grant (kept in the L-list) or a release (the R-list).
pub trait Kind {
    /// True for releases (R-list), false for grants and everything else (L-list).
    fn is_release(&self) -> bool;
}

/// The epoch transition whose commit installed a replica's table (Tenure, DESIGN "State
/// at scale"). Every chunk that commits a transition installs the same merged table, and
/// after it applies only that epoch's changes, in sequence order without a gap (a chunk
/// refuses an ACCEPT that does not follow its last one): two replicas with the same
/// stamp and the same confirmed number hold the same table. So a vote to another device
/// can name its table by stamp and number instead of shipping it, and a commit can ship
/// only the rows in which the merged table differs from that one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Stamp {
    /// The epoch the transition committed.
    pub epoch: Epoch,
    /// The transition attempt.
    pub tx: u64,
}

/// One chunk's copy: the LOCK table (confirmed changes applied) and the pending lists.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(bound(
    serialize = "Op: Serialize + Clone, T: Serialize",
    deserialize = "Op: Deserialize<'de> + Clone, T: Deserialize<'de>"
))]
pub struct Replica<Op, T> {
    /// The LOCK table: every confirmed change applied, in order.
    pub table: T,
    /// Highest sequence number applied to `table`.
    pub confirmed: Seq,
    /// L-list: accepted, unconfirmed grants.
    #[serde(with = "crate::persist_serde::ord_map")]
    pub l_list: Pending<Op>,
    /// R-list: accepted, unconfirmed releases.
    #[serde(with = "crate::persist_serde::ord_map")]
    pub r_list: Pending<Op>,
    /// The commit that installed `table` ([`Stamp`]); none where the table was merged
    /// from several (a relayout's input) or read from an older format.
    #[serde(with = "crate::generation::stamp")]
    pub stamp: Option<Stamp>,
}

impl<Op: Clone, T: Default> Default for Replica<Op, T> {
    fn default() -> Self {
        Replica {
            table: T::default(),
            confirmed: Seq::default(),
            l_list: Pending::new(),
            r_list: Pending::new(),
            stamp: None,
        }
    }
}

impl<Op: Clone + Kind, T: Apply<Op>> Replica<Op, T> {
    /// ACCEPT (AL/AR): keep the change pending. Idempotent; stale changes are ignored.
    pub fn accept(&mut self, seq: Seq, op: Op) -> bool {
        if seq <= self.confirmed {
            return false;
        }
        let list = if op.is_release() {
            &mut self.r_list
        } else {
            &mut self.l_list
        };
        list.insert(seq, op);
        true
    }

    /// ACCEPT of a batch with its piggybacked CONFIRM: every change kept pending, then
    /// everything up to `confirm` moved into the LOCK table.
    pub fn accept_batch(&mut self, ops: &[(Seq, Op)], confirm: Seq) {
        for (seq, op) in ops {
            self.accept(*seq, op.clone());
        }
        if confirm > self.confirmed {
            self.confirm(confirm);
        }
    }

    /// [`Self::accept_batch`] on a copy of a chunk (its durable copy) whose own replica,
    /// after the same batch, is `after`: the pending lists are kept as `accept_batch`
    /// keeps them, and where the copy's confirmed number comes out as `after`'s, the
    /// table is taken from `after` (a persistent map, so the copy shares its nodes with
    /// the chunk's) instead of being built a second time by applying the same changes.
    /// Where the numbers differ (the chunk confirmed further on a CONFIRM of its own),
    /// the changes are applied.
    pub fn accept_batch_adopting(&mut self, ops: &[(Seq, Op)], confirm: Seq, after: &(Seq, T))
    where
        T: Clone,
    {
        for (seq, op) in ops {
            self.accept(*seq, op.clone());
        }
        if self.confirmed.max(confirm) != after.0 {
            if confirm > self.confirmed {
                self.confirm(confirm);
            }
            return;
        }
        if confirm > self.confirmed {
            self.take_pending_upto(confirm);
            self.confirmed = confirm;
        }
        self.table = after.1.clone();
    }

    /// [`Self::accept_batch_adopting`] for a durable copy that applies its confirmed
    /// changes only when its table is read: the changes this batch confirms are handed
    /// to `deferred` (after those already there, in sequence order) instead of being
    /// applied; where `after` names the confirmed number the copy comes out at, the
    /// table is taken from `after` and `deferred` emptied (`after`'s table has them all).
    /// Until [`Self::apply_deferred`] runs, `confirmed` counts changes the table lacks.
    /// A copy that is read only at checkpoints thus applies only the changes after the
    /// chunk last handed it its tables, where it applied every change before.
    pub fn accept_batch_deferring(
        &mut self,
        ops: &[(Seq, Op)],
        confirm: Seq,
        after: Option<&(Seq, T)>,
        deferred: &mut imbl::Vector<(Seq, Op)>,
    ) where
        T: Clone,
    {
        for (seq, op) in ops {
            self.accept(*seq, op.clone());
        }
        if confirm > self.confirmed {
            deferred.extend(self.take_pending_upto(confirm));
            self.confirmed = confirm;
        }
        if let Some((upto, table)) = after
            && *upto == self.confirmed
        {
            self.table = table.clone();
            deferred.clear();
        }
    }

    /// Apply the changes [`Self::accept_batch_deferring`] handed out, in order.
    pub fn apply_deferred(&mut self, deferred: &mut imbl::Vector<(Seq, Op)>) {
        for (s, op) in std::mem::take(deferred) {
            self.table.apply(s, &op);
        }
    }

    /// Take every pending change up to `upto` out of the L- and R-lists, in sequence
    /// order.
    fn take_pending_upto(&mut self, upto: Seq) -> Vec<(Seq, Op)> {
        let mut pending: Vec<(Seq, Op)> = Vec::new();
        for list in [&mut self.l_list, &mut self.r_list] {
            // From the smallest, each removal O(log n): imbl's `split` rebuilds the
            // whole map whatever it takes.
            while let Some(s) = list.get_min().map(|(s, _)| *s).filter(|s| *s <= upto) {
                pending.extend(list.remove(&s).map(|op| (s, op)));
            }
        }
        pending.sort_by_key(|(s, _)| *s);
        pending
    }

    /// CONFIRM (CL/CR) of every change up to `upto`: move it into the LOCK table.
    pub fn confirm(&mut self, upto: Seq) {
        for (s, op) in self.take_pending_upto(upto) {
            self.table.apply(s, &op);
            self.confirmed = self.confirmed.max(s);
        }
        self.confirmed = self.confirmed.max(upto);
    }

    /// Every pending change, in sequence order.
    pub fn pending(&self) -> Vec<(Seq, Op)> {
        let mut v: Vec<(Seq, Op)> = self
            .l_list
            .iter()
            .chain(self.r_list.iter())
            .map(|(s, o)| (*s, o.clone()))
            .collect();
        v.sort_by_key(|(s, _)| *s);
        v
    }
}

/// A replica named instead of shipped (Tenure, DESIGN "State at scale"): its stamp and
/// confirmed number, which name its table ([`Stamp`]), and its pending lists, which are
/// what the recovery merge takes from it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(bound(
    serialize = "Op: Serialize + Clone",
    deserialize = "Op: Deserialize<'de> + Clone"
))]
pub struct Summary<Op> {
    /// The commit that installed its table.
    pub stamp: Stamp,
    /// Highest sequence number applied to its table.
    pub confirmed: Seq,
    /// Its L-list.
    #[serde(with = "crate::persist_serde::ord_map")]
    pub l_list: Pending<Op>,
    /// Its R-list.
    #[serde(with = "crate::persist_serde::ord_map")]
    pub r_list: Pending<Op>,
}

impl<Op: Clone> Summary<Op> {
    /// The highest sequence number it holds, confirmed or pending.
    pub fn last_held(&self) -> Seq {
        last_held(self.confirmed, &self.l_list, &self.r_list)
    }
}

fn last_held<Op: Clone>(confirmed: Seq, l: &Pending<Op>, r: &Pending<Op>) -> Seq {
    let last = |m: &Pending<Op>| m.get_max().map(|(s, _)| *s).unwrap_or_default();
    confirmed.max(last(l)).max(last(r))
}

impl<Op: Clone, T> Replica<Op, T> {
    /// This replica as a [`Summary`], if its table has a stamp to be named by.
    pub fn summary(&self) -> Option<Summary<Op>> {
        Some(Summary {
            stamp: self.stamp?,
            confirmed: self.confirmed,
            l_list: self.l_list.clone(),
            r_list: self.r_list.clone(),
        })
    }

    /// The highest sequence number it holds, confirmed or pending.
    pub fn last_held(&self) -> Seq {
        last_held(self.confirmed, &self.l_list, &self.r_list)
    }
}

/// A reconciliation input: a replica shipped whole, or named by a [`Summary`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input<Op, T> {
    /// The whole replica.
    Whole(Replica<Op, T>),
    /// Its summary.
    Summary(Summary<Op>),
}

impl<Op, T> Input<Op, T> {
    fn confirmed(&self) -> Seq {
        match self {
            Input::Whole(r) => r.confirmed,
            Input::Summary(s) => s.confirmed,
        }
    }
}

/// What [`merge_inputs`] merged: the merged replica, and the replica whose table it
/// started from (an index into the inputs).
#[derive(Clone, Debug)]
pub struct Merged<Op, T> {
    /// The merged replica (no stamp: the transition that installs it gives one).
    pub data: Replica<Op, T>,
    /// The input whose table the merge started from (a whole one).
    pub base: usize,
}

impl<Op: Clone, T> Merged<Op, T> {
    /// Whether a replica named by `s` can take the merged state as a patch from the
    /// base's table: it is of the base's lineage (same stamp), behind or level with it,
    /// and holds every change up to it pending, so that confirming them brings its
    /// table to the base's.
    pub fn can_patch(&self, inputs: &[(Epoch, Input<Op, T>)], s: &Summary<Op>) -> bool {
        let Some((_, Input::Whole(base))) = inputs.get(self.base) else {
            return false;
        };
        is_prefix_of(s, base)
    }
}

/// Whether the table `s` names is a prefix of `base`'s, which confirming its pending
/// changes turns into `base`'s: the same stamp, behind or level with it, holding every
/// change up to it.
fn is_prefix_of<Op: Clone, T>(s: &Summary<Op>, base: &Replica<Op, T>) -> bool {
    base.stamp == Some(s.stamp) && s.confirmed <= base.confirmed && s.last_held() >= base.confirmed
}

/// Menasce's recovery merge ([`merge`]) over inputs some of which are summaries, each
/// with the epoch its holder last committed. The merge starts from a whole replica with
/// the highest confirmed number; a summary's table is then either one it has whole (the
/// same stamp and number) or a prefix of the base's (the same stamp, behind it, holding
/// the changes up to it pending: every change in that table is in the base's, so there is
/// nothing to reconcile from it). Its pending changes count like a whole replica's.
///
/// When a table the merge needs is not at hand — the most advanced replica is a summary,
/// or a summary of another lineage — the inputs to ask whole are returned instead.
pub fn merge_inputs<Op, T>(inputs: &[(Epoch, Input<Op, T>)]) -> Result<Merged<Op, T>, Vec<usize>>
where
    Op: Clone + Kind,
    T: Apply<Op> + Clone + Default,
{
    let newest_committed = inputs.iter().map(|(e, _)| *e).max().unwrap_or_default();
    let Some(top) = inputs.iter().map(|(_, i)| i.confirmed()).max() else {
        return Ok(Merged {
            data: Replica::default(),
            base: 0,
        });
    };
    fn whole<Op, T>(i: &Input<Op, T>) -> Option<&Replica<Op, T>> {
        match i {
            Input::Whole(r) => Some(r),
            Input::Summary(_) => None,
        }
    }
    let Some(base) = (inputs.iter().enumerate())
        .filter(|(_, (_, i))| whole(i).is_some_and(|r| r.confirmed == top))
        .map(|(n, _)| n)
        .next_back()
    else {
        let ask = inputs.iter().position(|(_, i)| i.confirmed() == top);
        return Err(ask.into_iter().collect());
    };
    let base_data = whole(&inputs[base].1).expect("a whole input");
    let known = |s: &Summary<Op>| {
        is_prefix_of(s, base_data)
            || inputs.iter().any(|(_, i)| {
                whole(i).is_some_and(|r| r.stamp == Some(s.stamp) && r.confirmed == s.confirmed)
            })
    };
    let ask: Vec<usize> = (inputs.iter().enumerate())
        .filter(|(_, (_, i))| matches!(i, Input::Summary(s) if !known(s)))
        .map(|(n, _)| n)
        .collect();
    if !ask.is_empty() {
        return Err(ask);
    }
    let mut table = base_data.table.clone();
    let mut confirmed = top;
    let mut pending: BTreeMap<Seq, Op> = BTreeMap::new();
    for (_, i) in inputs {
        let (l, r) = match i {
            Input::Whole(d) => (&d.l_list, &d.r_list),
            Input::Summary(s) => (&s.l_list, &s.r_list),
        };
        for (s, op) in l.iter().chain(r.iter()) {
            if *s > top && s.epoch >= newest_committed {
                pending.insert(*s, op.clone());
            }
        }
    }
    for (s, op) in pending {
        table.apply(s, &op);
        confirmed = s;
    }
    for (_, i) in inputs {
        if let Input::Whole(d) = i {
            table.absorb(&d.table);
        }
    }
    Ok(Merged {
        data: Replica {
            table,
            confirmed,
            l_list: Pending::new(),
            r_list: Pending::new(),
            stamp: None,
        },
        base,
    })
}

/// Menasce's recovery merge (LCR, seed 004 §4.1): start from the most advanced LOCK table
/// (the highest confirmed sequence number — every other table is a prefix of it), then
/// apply, in sequence order, every change pending at any chunk beyond it (the sets L and
/// R with maximum forward progress). The result has empty pending lists: it is what the
/// UPDATE TABLE message installs everywhere.
///
/// `newest_committed` is the newest epoch any voter has committed. A change pending from
/// an older epoch is dropped: that epoch's own merge already decided it — applied it if
/// any of its voters held it (then it is in the base table), or left it out because none
/// did, in which case it was never answered, and changes ordered since may contradict it
/// (a grant of the same lock to someone else). Replaying it now, because a chunk that
/// missed the newer epoch still holds it, would apply it over answered changes.
pub fn merge<Op, T>(replicas: &[Replica<Op, T>], newest_committed: Epoch) -> Replica<Op, T>
where
    Op: Clone + Kind,
    T: Apply<Op> + Clone + Default,
{
    let inputs: Vec<(Epoch, Input<Op, T>)> = (replicas.iter())
        .map(|r| (newest_committed, Input::Whole(r.clone())))
        .collect();
    merge_inputs(&inputs)
        .expect("whole inputs need nothing more")
        .data
}

#[cfg(test)]
mod tests {
    //! One test per case of seed 004 Appendix B, Table II. Each case is the set Q of
    //! LLC states (LOCK table, L-list, R-list) for one lock x at the chunks of the quorum
    //! when the LC crashed; the merge must take Table II's action.
    use super::*;
    use crate::ids::Epoch;
    use std::collections::BTreeSet;

    #[derive(Clone, Debug, PartialEq, Eq)]
    enum LockOp {
        Grant(u32),
        Release(u32),
    }
    impl Kind for LockOp {
        fn is_release(&self) -> bool {
            matches!(self, LockOp::Release(_))
        }
    }
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    struct Locks(BTreeSet<u32>);
    impl Apply<LockOp> for Locks {
        fn apply(&mut self, _: Seq, op: &LockOp) {
            match op {
                LockOp::Grant(x) => self.0.insert(*x),
                LockOp::Release(x) => self.0.remove(x),
            };
        }
    }

    const X: u32 = 7;
    const GRANT: Seq = Seq {
        epoch: Epoch(1),
        seq: 10,
    };
    const RELEASE: Seq = Seq {
        epoch: Epoch(1),
        seq: 11,
    };

    /// An LLC in state (a, b, c) for lock x, as Table I allows it to be reached: the
    /// grant was sequenced GRANT, the release (if any) RELEASE.
    fn llc(a: u8, b: u8, c: u8) -> Replica<LockOp, Locks> {
        let mut r = Replica::<LockOp, Locks>::default();
        r.confirm(Seq {
            epoch: Epoch(1),
            seq: 9,
        });
        match (a, b, c) {
            (0, 0, 0) => {}
            (0, 1, 0) => {
                r.accept(GRANT, LockOp::Grant(X));
            }
            (1, 0, 0) => {
                r.accept(GRANT, LockOp::Grant(X));
                r.confirm(GRANT);
            }
            (1, 0, 1) => {
                r.accept(GRANT, LockOp::Grant(X));
                r.confirm(GRANT);
                r.accept(RELEASE, LockOp::Release(X));
            }
            _ => unreachable!("not an LLC state of Table I"),
        }
        assert_eq!(
            (
                r.table.0.contains(&X) as u8,
                r.l_list.values().any(|o| *o == LockOp::Grant(X)) as u8,
                r.r_list.values().any(|o| *o == LockOp::Release(X)) as u8
            ),
            (a, b, c)
        );
        r
    }

    fn held_after(q: &[(u8, u8, u8)]) -> bool {
        let replicas: Vec<_> = q.iter().map(|&(a, b, c)| llc(a, b, c)).collect();
        let m = merge(&replicas, Epoch(1));
        assert!(m.l_list.is_empty() && m.r_list.is_empty());
        m.table.0.contains(&X)
    }

    // seed 004 Table II, case 1 (0,0,0): no action — x was never granted.
    #[test]
    fn table_ii_case_1_no_action() {
        assert!(!held_after(&[(0, 0, 0), (0, 0, 0)]));
    }
    // case 2 (1,0,0): no action — x stays granted everywhere.
    #[test]
    fn table_ii_case_2_no_action() {
        assert!(held_after(&[(1, 0, 0), (1, 0, 0)]));
    }
    // case 3 (0,1,0): add to L — accepted everywhere, install it.
    #[test]
    fn table_ii_case_3_add_to_l() {
        assert!(held_after(&[(0, 1, 0), (0, 1, 0)]));
    }
    // case 4 (1,0,1): add to R — release accepted everywhere, apply it.
    #[test]
    fn table_ii_case_4_add_to_r() {
        assert!(!held_after(&[(1, 0, 1), (1, 0, 1)]));
    }
    // case 5 (0,0,0; 0,1,0): add to L — accepted by at least one (forward progress).
    #[test]
    fn table_ii_case_5_add_to_l() {
        assert!(held_after(&[(0, 0, 0), (0, 1, 0)]));
    }
    // case 6 (0,1,0; 1,0,0): add to L — confirmed at one, pending at another.
    #[test]
    fn table_ii_case_6_add_to_l() {
        assert!(held_after(&[(0, 1, 0), (1, 0, 0)]));
    }
    // case 7 (0,0,0; 1,0,1): add to R.
    #[test]
    fn table_ii_case_7_add_to_r() {
        assert!(!held_after(&[(0, 0, 0), (1, 0, 1)]));
    }
    // case 8 (1,0,0; 1,0,1): add to R — release accepted by one.
    #[test]
    fn table_ii_case_8_add_to_r() {
        assert!(!held_after(&[(1, 0, 0), (1, 0, 1)]));
    }
    // case 9 (0,1,0; 1,0,1): seq(0,1,0) < seq(1,0,1) → add to R.
    #[test]
    fn table_ii_case_9_later_sequence_wins() {
        assert!(!held_after(&[(0, 1, 0), (1, 0, 1)]));
    }
    // case 10 (0,0,0; 0,1,0; 1,0,1): the release is later → add to R.
    #[test]
    fn table_ii_case_10_later_sequence_wins() {
        assert!(!held_after(&[(0, 0, 0), (0, 1, 0), (1, 0, 1)]));
    }
    // case 11 (0,1,0; 1,0,0; 1,0,1): the release is later → add to R.
    #[test]
    fn table_ii_case_11_later_sequence_wins() {
        assert!(!held_after(&[(0, 1, 0), (1, 0, 0), (1, 0, 1)]));
    }
    // cases 9–11 with a re-grant sequenced after the release (the L entry is later).
    #[test]
    fn table_ii_cases_9_to_11_regrant_after_release_adds_to_l() {
        let mut a = llc(1, 0, 1);
        let mut b = llc(1, 0, 1);
        b.confirm(RELEASE);
        let regrant = Seq {
            epoch: Epoch(1),
            seq: 12,
        };
        b.accept(regrant, LockOp::Grant(X));
        a.accept(regrant, LockOp::Grant(X));
        assert!(merge(&[a, b], Epoch(1)).table.0.contains(&X));
    }
    // A grant pending from epoch 3 at a chunk that missed epoch 4 (epoch 4's merge did not
    // see it, so it was never answered), while epoch 4 ordered a grant of the same lock to
    // someone else: the epoch-5 merge keeps epoch 4's grant and drops the stale one.
    #[test]
    fn merge_drops_pending_changes_of_epochs_older_than_the_newest_committed() {
        const Y: u32 = 8;
        let base = Seq {
            epoch: Epoch(3),
            seq: 5,
        };
        // The chunk that missed epoch 4: committed epoch 3, a grant of X to "A" pending.
        let mut stale = Replica::<LockOp, Locks>::default();
        stale.confirm(base);
        let stale_seq = Seq {
            epoch: Epoch(3),
            seq: 6,
        };
        stale.accept(stale_seq, LockOp::Grant(X));
        // Epoch 4's chunks: X was never granted there; epoch 4 granted Y (pending) and
        // released nothing. In the lock model, granting X in epoch 3 and then Y in epoch 4
        // is the contradiction (the test's two locks stand for "X to A" vs "X to B").
        let mut fresh = Replica::<LockOp, Locks>::default();
        fresh.confirm(base);
        fresh.accept(
            Seq {
                epoch: Epoch(4),
                seq: 1,
            },
            LockOp::Grant(Y),
        );
        let m = merge(&[stale.clone(), fresh.clone()], Epoch(4));
        assert!(m.table.0.contains(&Y), "epoch 4's pending grant is kept");
        assert!(
            !m.table.0.contains(&X),
            "the stale epoch-3 grant is dropped"
        );
        // Without the rule (every voter at epoch 3) the stale grant is replayed: the state
        // the test builds is the one the rule exists for.
        let m = merge(&[stale, fresh], Epoch(3));
        assert!(m.table.0.contains(&X));
    }
    // §2: ACCEPT then CONFIRM moves a change from the L-list into the LOCK table; a
    // replayed ACCEPT of a confirmed change is ignored.
    #[test]
    fn accept_then_confirm_applies_once() {
        let mut r = Replica::<LockOp, Locks>::default();
        assert!(r.accept(GRANT, LockOp::Grant(X)));
        r.confirm(GRANT);
        assert!(r.table.0.contains(&X) && r.l_list.is_empty());
        assert!(!r.accept(GRANT, LockOp::Grant(X)));
    }

    fn seq(n: u64) -> Seq {
        Seq {
            epoch: Epoch(1),
            seq: n,
        }
    }

    /// A chunk and its durable copy, both at `start`, take one batch (grants at 12 and 13,
    /// confirming 12); the chunk then does `then`. Returns the chunk, the copy that took
    /// the chunk's table as it stands then (`accept_batch_adopting`) and one that applied
    /// the batch.
    fn copy_after_batch(
        start: Replica<LockOp, Locks>,
        then: impl FnOnce(&mut Replica<LockOp, Locks>),
    ) -> (
        Replica<LockOp, Locks>,
        Replica<LockOp, Locks>,
        Replica<LockOp, Locks>,
    ) {
        let batch = [(seq(12), LockOp::Grant(8)), (seq(13), LockOp::Grant(9))];
        let (mut chunk, mut copy, mut applied) = (start.clone(), start.clone(), start);
        chunk.accept_batch(&batch, seq(12));
        then(&mut chunk);
        applied.accept_batch(&batch, seq(12));
        copy.accept_batch_adopting(&batch, seq(12), &(chunk.confirmed, chunk.table.clone()));
        (chunk, copy, applied)
    }

    // seed 004 §2 (ACCEPT with a piggybacked CONFIRM) at a chunk's durable copy: taking the
    // chunk's own table after the batch leaves the copy as applying the batch does.
    #[test]
    fn accept_with_confirm_adopted_equals_applied() {
        let (chunk, copy, applied) = copy_after_batch(llc(1, 0, 1), |_| {});
        assert_eq!(copy, applied);
        assert_eq!(copy, chunk);
        assert_eq!(
            copy.l_list.keys().copied().collect::<Vec<_>>(),
            vec![seq(13)]
        );
    }

    // A chunk that confirmed further on a CONFIRM of its own (not persisted) has a table
    // the copy must not take: the copy applies the batch instead.
    #[test]
    fn accept_after_an_unpersisted_confirm_is_applied_not_adopted() {
        let (_, copy, applied) = copy_after_batch(llc(0, 0, 0), |c| c.confirm(seq(13)));
        assert_eq!(copy, applied);
        assert!(
            !copy.table.0.contains(&9),
            "took the table confirmed further"
        );
    }

    // seed 004 §2 at a durable copy that defers its confirmed changes: batches without the
    // chunk's tables hand their confirmed changes out; once applied, the copy equals one
    // that applied each batch as it came.
    #[test]
    fn accept_deferred_then_applied_equals_applied() {
        let batches = [
            (vec![(seq(12), LockOp::Grant(8))], seq(11)),
            (vec![(seq(13), LockOp::Grant(9))], seq(12)),
            (vec![(seq(14), LockOp::Grant(7))], seq(13)),
        ];
        let (mut copy, mut applied) = (llc(1, 0, 1), llc(1, 0, 1));
        let mut deferred = imbl::Vector::new();
        for (ops, confirm) in &batches {
            copy.accept_batch_deferring(ops, *confirm, None, &mut deferred);
            applied.accept_batch(ops, *confirm);
        }
        assert_eq!(copy.confirmed, applied.confirmed);
        assert_eq!(
            deferred.len(),
            3,
            "the pending release and the grants the batches confirm"
        );
        assert_ne!(copy.table, applied.table, "not applied yet");
        copy.apply_deferred(&mut deferred);
        assert!(deferred.is_empty());
        assert_eq!(copy, applied);
    }

    // The chunk's tables after a batch supersede every change deferred before: the copy
    // takes them and has nothing left to apply. A chunk that confirmed further on its
    // own hands tables the copy must not take: they are left, and the changes deferred.
    #[test]
    fn accept_deferred_adopts_the_chunks_tables_where_the_numbers_agree() {
        let batch = [(seq(12), LockOp::Grant(8)), (seq(13), LockOp::Grant(9))];
        let mut chunk = llc(1, 0, 1);
        chunk.accept_batch(&batch, seq(12));
        let mut applied = llc(1, 0, 1);
        applied.accept_batch(&batch, seq(12));
        let mut copy = llc(1, 0, 1);
        let mut deferred = imbl::vector![(seq(11), LockOp::Grant(1))];
        let after = (chunk.confirmed, chunk.table.clone());
        copy.accept_batch_deferring(&batch, seq(12), Some(&after), &mut deferred);
        assert!(deferred.is_empty());
        assert_eq!(copy, applied);

        let mut ahead = llc(0, 0, 0);
        ahead.accept_batch(&batch, seq(12));
        ahead.confirm(seq(13));
        let (mut copy, mut applied) = (llc(0, 0, 0), llc(0, 0, 0));
        let mut deferred = imbl::Vector::new();
        let after = (ahead.confirmed, ahead.table.clone());
        copy.accept_batch_deferring(&batch, seq(12), Some(&after), &mut deferred);
        applied.accept_batch(&batch, seq(12));
        assert_eq!(deferred.len(), 1);
        copy.apply_deferred(&mut deferred);
        assert_eq!(copy, applied);
    }

    // ---- DESIGN "State at scale": summaries in the merge --------------------------

    const S1: Stamp = Stamp {
        epoch: Epoch(1),
        tx: 5,
    };

    fn stamped(a: u8, b: u8, c: u8, stamp: Stamp) -> Replica<LockOp, Locks> {
        let mut r = llc(a, b, c);
        r.stamp = Some(stamp);
        r
    }

    fn inputs(
        whole: &[Replica<LockOp, Locks>],
        named: &[Replica<LockOp, Locks>],
    ) -> Vec<(Epoch, Input<LockOp, Locks>)> {
        (whole.iter().map(|r| Input::Whole(r.clone())))
            .chain(named.iter().map(|r| Input::Summary(r.summary().unwrap())))
            .map(|i| (Epoch(1), i))
            .collect()
    }

    /// A summary of the base's lineage, behind it but holding its changes pending, merges
    /// to what its whole replica would, and can take the result as a patch of the base.
    #[test]
    fn a_summary_behind_the_base_merges_like_its_replica() {
        let ahead = stamped(1, 0, 1, S1);
        let behind = stamped(0, 1, 0, S1);
        let all = inputs(std::slice::from_ref(&ahead), std::slice::from_ref(&behind));
        let m = merge_inputs(&all).unwrap();
        assert_eq!(m.data, merge(&[ahead, behind.clone()], Epoch(1)));
        assert_eq!(m.base, 0);
        assert!(m.can_patch(&all, &behind.summary().unwrap()));
    }

    /// The most advanced replica only named: the merge needs its table, and asks it.
    #[test]
    fn a_summary_ahead_of_every_whole_replica_is_asked_for() {
        let ahead = stamped(1, 0, 0, S1);
        let behind = stamped(0, 1, 0, S1);
        let all = inputs(&[behind], &[ahead]);
        assert_eq!(merge_inputs(&all).err(), Some(vec![1]));
    }

    /// A summary of another lineage names a table the merge does not have: asked for,
    /// and never patched.
    #[test]
    fn a_summary_of_another_lineage_is_asked_for() {
        let other = Stamp {
            epoch: Epoch(1),
            tx: 6,
        };
        let base = stamped(1, 0, 0, S1);
        let stranger = stamped(0, 1, 0, other);
        let all = inputs(std::slice::from_ref(&base), std::slice::from_ref(&stranger));
        assert_eq!(merge_inputs(&all).err(), Some(vec![1]));
        let whole = inputs(&[base], &[]);
        let m = merge_inputs(&whole).unwrap();
        assert!(!m.can_patch(&whole, &stranger.summary().unwrap()));
    }

    /// A summary of the base's lineage that lacks changes up to the base's number cannot
    /// be brought to the base's table by confirming: it takes the commit whole.
    #[test]
    fn a_summary_missing_changes_takes_no_patch() {
        let base = stamped(1, 0, 0, S1);
        let mut bare = Replica::<LockOp, Locks>::default();
        bare.confirm(Seq {
            epoch: Epoch(1),
            seq: 9,
        });
        bare.stamp = Some(S1);
        let whole = inputs(&[base], &[]);
        let m = merge_inputs(&whole).unwrap();
        assert!(!m.can_patch(&whole, &bare.summary().unwrap()));
        let all = inputs(&whole_of(&whole), &[bare]);
        assert_eq!(merge_inputs(&all).err(), Some(vec![1]));
    }

    fn whole_of(i: &[(Epoch, Input<LockOp, Locks>)]) -> Vec<Replica<LockOp, Locks>> {
        (i.iter())
            .filter_map(|(_, i)| match i {
                Input::Whole(r) => Some(r.clone()),
                Input::Summary(_) => None,
            })
            .collect()
    }

    /// With every input whole, the merge needs nothing more and equals [`merge`].
    #[test]
    fn whole_inputs_merge_as_before() {
        let q = [llc(1, 0, 1), llc(0, 1, 0), llc(1, 0, 0)];
        let all = inputs(&q, &[]);
        assert_eq!(merge_inputs(&all).unwrap().data, merge(&q, Epoch(1)));
    }
}
