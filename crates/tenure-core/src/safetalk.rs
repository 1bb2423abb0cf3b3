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

/// One chunk's copy: the LOCK table (confirmed changes applied) and the pending lists.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replica<Op, T> {
    /// The LOCK table: every confirmed change applied, in order.
    pub table: T,
    /// Highest sequence number applied to `table`.
    pub confirmed: Seq,
    /// L-list: accepted, unconfirmed grants.
    pub l_list: BTreeMap<Seq, Op>,
    /// R-list: accepted, unconfirmed releases.
    pub r_list: BTreeMap<Seq, Op>,
}

impl<Op, T: Default> Default for Replica<Op, T> {
    fn default() -> Self {
        Replica {
            table: T::default(),
            confirmed: Seq::default(),
            l_list: BTreeMap::new(),
            r_list: BTreeMap::new(),
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

    /// Take every pending change up to `upto` out of the L- and R-lists, in sequence
    /// order.
    fn take_pending_upto(&mut self, upto: Seq) -> Vec<(Seq, Op)> {
        let mut pending: Vec<(Seq, Op)> = Vec::new();
        for list in [&mut self.l_list, &mut self.r_list] {
            let rest = list.split_off(&Seq {
                epoch: upto.epoch,
                seq: upto.seq + 1,
            });
            pending.extend(std::mem::replace(list, rest));
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
    let Some(base) = replicas.iter().max_by_key(|r| r.confirmed) else {
        return Replica::default();
    };
    let mut table = base.table.clone();
    let mut confirmed = base.confirmed;
    let mut pending: BTreeMap<Seq, Op> = BTreeMap::new();
    for r in replicas {
        for (s, op) in r.pending() {
            if s > base.confirmed && s.epoch >= newest_committed {
                pending.insert(s, op);
            }
        }
    }
    for (s, op) in pending {
        table.apply(s, &op);
        confirmed = s;
    }
    for r in replicas {
        table.absorb(&r.table);
    }
    Replica {
        table,
        confirmed,
        l_list: BTreeMap::new(),
        r_list: BTreeMap::new(),
    }
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
}
