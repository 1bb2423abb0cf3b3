//! # lincheck — a linearizability checker for lock (and register) histories
//!
//! DESIGN §9 invariant 5: "the lock history is linearizable (checked on histories, not
//! assumed)". A history is a set of [`Operation`]s, each with an invoke time, an input and,
//! unless the client never heard back, a response time and output. It is linearizable when
//! every operation can be given a single instant inside its interval so that, in that
//! order, a sequential specification ([`Model`]) produces every observed output. An
//! operation with no response may or may not have taken effect, at any time after its
//! invoke (Knossos' `:info`).
//!
//! The search is Wing & Gong's, with Lowe's memoization as in Porcupine: depth-first over
//! "which operation is linearized next", where an operation may go next only if no other
//! pending one *finished* before it *started*; a configuration (set of linearized
//! operations as a bitset, model state) that was already explored is never explored again.
//! If the model's inputs name independent objects ([`Model::partition_key`]), the history is
//! split per object and each part checked alone (linearizability is local, Herlihy & Wing);
//! objects that depend on each other ([`Model::keys_related`]: a lock name and its
//! ancestors and descendants) stay in one part.
//! Every search is bounded by [`Limits::max_steps`] and answers [`Verdict::Unknown`] rather
//! than hang CI.
//!
//! A failure comes with a [`Counterexample`]: the longest prefix the search could
//! linearize, the operations that could not follow it, and a *core* — a subset of the
//! completed operations that is non-linearizable on its own when every other operation is
//! relaxed to "may or may not have happened". Relaxing only adds linearizations, so the
//! core is a sound witness, and it is usually the two or three operations at fault.
//!
//! [`LockModel`] is the sequential specification of shared/exclusive locks on path names
//! (the LOCK table of seed 004 §2, whose controller "does not grant conflicting locks",
//! where a lock on a path covers its descendants, §9, with Chubby's sequencers — fencing
//! tokens — increasing per lock, seed 002 §14.4.5);
//! [`RegisterModel`] is a read/write/CAS register, to check the checker on a second model.
//!
//! This file holds the search; the models live in `lock` and `register`.

use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Debug};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use thiserror::Error;

mod indexed;
mod lock;
mod register;
#[cfg(test)]
mod tests;

pub use lock::{
    LockInput, LockModel, LockOutput, LockVerdict, NameState, check_locks, is_ancestor,
    locks_conflict, names_overlap,
};
pub use register::{RegisterInput, RegisterModel, RegisterOutput};

/// A sequential specification. The state is the model value itself.
pub trait Model: Clone + Eq + Hash + Debug {
    /// An operation's input.
    type Input: Clone + Debug;
    /// An operation's output.
    type Output: Clone + Debug;

    /// The state after `input` answered `output` at this state, or `None` if the
    /// specification cannot answer `output` here.
    fn step(&self, input: &Self::Input, output: &Self::Output) -> Option<Self>;

    /// The states `input` may lead to when its output is unknown (the client never heard
    /// back), in case it took effect. Not taking effect at all is always allowed and need
    /// not be listed.
    fn step_unknown(&self, input: &Self::Input) -> Vec<Self>;

    /// The object `input` touches, if operations on different objects are independent;
    /// `None` for any input disables partitioning.
    fn partition_key(_input: &Self::Input) -> Option<String> {
        None
    }

    /// Whether operations on objects `a` and `b` (two different partition keys) depend on
    /// each other, so that their histories must be checked together. Dependence is taken
    /// transitively: the history is split into the connected groups of keys.
    fn keys_related(_a: &str, _b: &str) -> bool {
        false
    }
}

/// One operation of a history. Times are on one clock (the simulator's virtual clock).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation<I, O> {
    /// Who issued it (for descriptions only).
    pub client: u64,
    /// The input.
    pub input: I,
    /// Invoke time.
    pub invoke: u64,
    /// Response time and output; `None` if no response was seen.
    pub response: Option<(u64, O)>,
}

/// Bounds of one check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Search steps (candidate linearizations tried) per partition before `Unknown`.
    pub max_steps: u64,
    /// Compute a counterexample core only for partitions with at most this many completed
    /// operations (each core step is a search of its own).
    pub core_max_ops: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_steps: 1_000_000,
            core_max_ops: 64,
        }
    }
}

/// A malformed history.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum HistoryError {
    /// An operation responded before it was invoked.
    #[error("operation {op} responds at {response} before its invoke at {invoke}")]
    ResponseBeforeInvoke {
        /// Index of the operation in the history.
        op: usize,
        /// Its invoke time.
        invoke: u64,
        /// Its response time.
        response: u64,
    },
}

/// Why a history is not linearizable. Indices refer to the checked history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counterexample {
    /// The partition (object) that failed, if the history was partitioned.
    pub partition: Option<String>,
    /// The longest sequence of operations the search could linearize, in order.
    pub linearized: Vec<usize>,
    /// Completed operations that could be next after `linearized` but whose outputs the
    /// model cannot produce there.
    pub stuck: Vec<usize>,
    /// A small set of completed operations that is non-linearizable even when every other
    /// operation may or may not have happened (empty if not computed).
    pub core: Vec<usize>,
    /// A human-readable account of the above.
    pub description: String,
}

/// The answer of [`check`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Some linearization explains every output.
    Linearizable,
    /// None does.
    NotLinearizable(Box<Counterexample>),
    /// The step limit was reached first.
    Unknown {
        /// Steps spent.
        steps: u64,
    },
}

impl Verdict {
    /// `true` for [`Verdict::Linearizable`].
    pub fn is_linearizable(&self) -> bool {
        matches!(self, Verdict::Linearizable)
    }
}

/// Checks `history` against `initial`.
pub fn check<M: Model>(
    initial: &M,
    history: &[Operation<M::Input, M::Output>],
    limits: &Limits,
) -> Result<Verdict, HistoryError> {
    for (op, o) in history.iter().enumerate() {
        if let Some((response, _)) = o.response.as_ref().filter(|(r, _)| *r < o.invoke) {
            return Err(HistoryError::ResponseBeforeInvoke {
                op,
                invoke: o.invoke,
                response: *response,
            });
        }
    }
    let mut unknown_steps = None;
    for (key, part) in partitions::<M>(history) {
        let relaxed = vec![false; part.len()];
        let mut budget = limits.max_steps;
        match search(initial, history, &part, &relaxed, &mut budget) {
            Search::Ok => {}
            Search::Unknown => {
                *unknown_steps.get_or_insert(0) += limits.max_steps;
            }
            Search::Fail { path, state } => {
                return Ok(Verdict::NotLinearizable(Box::new(counterexample(
                    initial, history, &part, key, path, state, limits,
                ))));
            }
        }
    }
    Ok(match unknown_steps {
        Some(steps) => Verdict::Unknown { steps },
        None => Verdict::Linearizable,
    })
}

/// Splits the history per [`Model::partition_key`], keys related by
/// [`Model::keys_related`] together, or keeps it whole. A group of several keys is named
/// by its keys in order, joined by `" + "`.
fn partitions<M: Model>(
    history: &[Operation<M::Input, M::Output>],
) -> Vec<(Option<String>, Vec<usize>)> {
    let keys: Option<Vec<String>> = history.iter().map(|o| M::partition_key(&o.input)).collect();
    let Some(keys) = keys else {
        return vec![(None, (0..history.len()).collect())];
    };
    let mut per_key: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, k) in keys.into_iter().enumerate() {
        per_key.entry(k).or_default().push(i);
    }
    // Union-find over the distinct keys (few: the names a run uses).
    let names: Vec<String> = per_key.keys().cloned().collect();
    let mut parent: Vec<usize> = (0..names.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for a in 0..names.len() {
        for b in a + 1..names.len() {
            if M::keys_related(&names[a], &names[b]) {
                let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
                parent[ra.max(rb)] = ra.min(rb);
            }
        }
    }
    let mut groups: BTreeMap<usize, (Vec<&str>, Vec<usize>)> = BTreeMap::new();
    for (i, (name, ops)) in per_key.iter().enumerate() {
        let g = groups.entry(root(&mut parent, i)).or_default();
        g.0.push(name);
        g.1.extend(ops);
    }
    groups
        .into_values()
        .map(|(names, mut ops)| {
            ops.sort_unstable();
            (Some(names.join(" + ")), ops)
        })
        .collect()
}

enum Search<M> {
    Ok,
    Unknown,
    /// The deepest path found (local indices) and the model state after it.
    Fail {
        path: Vec<usize>,
        state: M,
    },
}

/// A fast, deterministic hasher for the memo (FxHash's multiply-rotate): the memo is
/// only looked up, never iterated, so any hasher gives the same search.
#[derive(Default)]
struct FxHasher(u64);

impl FxHasher {
    const K: u64 = 0xf135_7aea_2e62_a9c5;

    fn add(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(26) ^ x).wrapping_mul(Self::K);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b) ^ ((rest.len() as u64) << 59));
        }
    }

    fn write_u8(&mut self, x: u8) {
        self.add(u64::from(x));
    }

    fn write_u32(&mut self, x: u32) {
        self.add(u64::from(x));
    }

    fn write_u64(&mut self, x: u64) {
        self.add(x);
    }

    fn write_usize(&mut self, x: usize) {
        self.add(x as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type FxBuild = BuildHasherDefault<FxHasher>;

/// Configurations explored, by model state and completed operations linearized: the
/// sets of unknown-outcome operations linearized with them. An unknown operation never
/// limits what may go next (it has no response) and may always be linearized later or
/// never, so a configuration is *subsumed* by an explored one with the same completed
/// operations and state whose linearized unknown operations are a subset of its own:
/// every continuation of the first is one of the second, which failed. Without this,
/// each unknown acquire granted and then released by its unknown close (a client that
/// gave up) makes another configuration equal in all but its bitset, and a history with
/// k of them 3^k. Keyed by state first, so that a lookup clones nothing; the bitsets
/// are kept short ([`first_visit`]).
type Memo<M> = HashMap<M, HashMap<Box<[u64]>, Vec<Box<[u64]>>, FxBuild>, FxBuild>;

/// Records configuration (`lin`, `state`) in `memo`; `false` if it was explored already or
/// is subsumed by one that was (see [`Memo`]). `required` is the mask of completed ops;
/// `done` and `unknown` are scratch space. The completed ops linearized are kept as the
/// number of leading words equal to `required`'s followed by the rest up to the last
/// non-zero word, and the unknown ones without their trailing zero words: a search's
/// bitsets are mostly full at the front and empty at the back.
fn first_visit<M: Model>(
    memo: &mut Memo<M>,
    required: &[u64],
    lin: &[u64],
    state: &M,
    scratch: &mut (Vec<u64>, Vec<u64>),
) -> bool {
    let (done, unknown) = scratch;
    let full = (lin.iter().zip(required))
        .take_while(|(l, r)| *l & *r == **r)
        .count();
    done.clear();
    done.push(full as u64);
    done.extend(
        lin[full..]
            .iter()
            .zip(&required[full..])
            .map(|(l, r)| l & r),
    );
    while done.len() > 1 && done.last() == Some(&0) {
        done.pop();
    }
    unknown.clear();
    unknown.extend(lin.iter().zip(required).map(|(l, r)| l & !r));
    while unknown.last() == Some(&0) {
        unknown.pop();
    }
    let by_done = match memo.get_mut(state) {
        Some(m) => m,
        None => memo.entry(state.clone()).or_default(),
    };
    // `a` ⊆ `b`, the words beyond either's end zero.
    let subset = |a: &[u64], b: &[u64]| {
        (a.iter().enumerate()).all(|(i, x)| x & !b.get(i).copied().unwrap_or(0) == 0)
    };
    match by_done.get_mut(done.as_slice()) {
        Some(seen) => {
            if seen.iter().any(|u| subset(u, unknown)) {
                return false;
            }
            seen.push(unknown.as_slice().into());
        }
        None => {
            by_done.insert(done.as_slice().into(), vec![unknown.as_slice().into()]);
        }
    }
    true
}

struct Node<M> {
    lin: Vec<u64>,
    /// The model state after `lin`.
    state: M,
    /// The ops still to try from here, in local order, the next one last. Their states
    /// are computed only when they are tried (a search that ends early, or hits its
    /// bound, never computes the rest).
    cands: Vec<usize>,
    /// Further states of the op being tried (an unknown outcome may lead to several),
    /// the next one last.
    more: Vec<(usize, M)>,
    /// The op linearized to reach this node.
    via: Option<usize>,
    /// Where the scans for this node's successors began ([`Part::candidates`]).
    cursor: Cursor,
}

impl<M: Model> Node<M> {
    /// The next successor to try: an op and the state it leads to.
    fn next(&mut self, p: &Part<'_, M>) -> Option<(usize, M)> {
        if let Some(x) = self.more.pop() {
            return Some(x);
        }
        while let Some(c) = self.cands.pop() {
            let mut states = p.step(&self.state, c);
            if states.is_empty() {
                continue;
            }
            let first = states.remove(0);
            self.more.extend(states.into_iter().rev().map(|s| (c, s)));
            return Some((c, first));
        }
        None
    }
}

fn bit(set: &[u64], i: usize) -> bool {
    set[i / 64] & (1 << (i % 64)) != 0
}

/// Calls `f` on every op in `from..to` not in `set`, in order, a word at a time.
fn zeros(set: &[u64], from: usize, to: usize, mut f: impl FnMut(usize)) {
    let mut w = from / 64;
    let mut bits = !set.get(w).copied().unwrap_or(u64::MAX) & (u64::MAX << (from % 64));
    while w * 64 < to {
        while bits != 0 {
            let c = w * 64 + bits.trailing_zeros() as usize;
            if c >= to {
                return;
            }
            f(c);
            bits &= bits - 1;
        }
        w += 1;
        bits = !set.get(w).copied().unwrap_or(u64::MAX);
    }
}

/// The first op at or after `from` not in `set` (`n` if none).
fn first_zero(set: &[u64], from: usize, n: usize) -> usize {
    let mut w = from / 64;
    let mut bits = !set.get(w).copied().unwrap_or(u64::MAX) & (u64::MAX << (from % 64));
    while w * 64 < n {
        if bits != 0 {
            return (w * 64 + bits.trailing_zeros() as usize).min(n);
        }
        w += 1;
        bits = !set.get(w).copied().unwrap_or(u64::MAX);
    }
    n
}

/// Response time of local op `i`, if it counts as completed.
fn resp<I, O>(
    history: &[Operation<I, O>],
    part: &[usize],
    relaxed: &[bool],
    i: usize,
) -> Option<u64> {
    if relaxed[i] {
        None
    } else {
        history[part[i]].response.as_ref().map(|(t, _)| *t)
    }
}

/// Positions before which every op is linearized: in [`Part::by_resp`], and in local
/// order (or [`Part::by_invoke`] if invokes are not in local order). Along a path of the
/// search the linearized set only grows, so a node's scans start where its parent's
/// stopped.
#[derive(Clone, Copy, Default)]
struct Cursor {
    resp: usize,
    invoke: usize,
}

/// One partition with the orders the search scans, computed once.
struct Part<'a, M: Model> {
    history: &'a [Operation<M::Input, M::Output>],
    part: &'a [usize],
    relaxed: &'a [bool],
    /// Invoke time per local op.
    invoke: Vec<u64>,
    /// Invokes are in local order (as a history recorded in invoke order is).
    sorted: bool,
    /// Local ops that count as completed, by (response time, local index).
    by_resp: Vec<(u64, usize)>,
    /// Every local op, by (invoke time, local index) (used when not `sorted`).
    by_invoke: Vec<(u64, usize)>,
}

impl<'a, M: Model> Part<'a, M> {
    fn new(
        history: &'a [Operation<M::Input, M::Output>],
        part: &'a [usize],
        relaxed: &'a [bool],
    ) -> Self {
        let invoke: Vec<u64> = part.iter().map(|i| history[*i].invoke).collect();
        let sorted = invoke.windows(2).all(|w| w[0] <= w[1]);
        let mut by_resp: Vec<(u64, usize)> = (0..part.len())
            .filter_map(|i| resp(history, part, relaxed, i).map(|r| (r, i)))
            .collect();
        by_resp.sort_unstable();
        let mut by_invoke: Vec<(u64, usize)> = Vec::new();
        if !sorted {
            by_invoke = invoke.iter().enumerate().map(|(i, t)| (*t, i)).collect();
            by_invoke.sort_unstable();
        }
        Part {
            history,
            part,
            relaxed,
            invoke,
            sorted,
            by_resp,
            by_invoke,
        }
    }

    /// Local ops that may be linearized next from `lin`, in local order; and the cursor
    /// for `lin`'s successors. An op `c` may go next iff no other unlinearized op
    /// responded before `c` was invoked: with the two earliest responses among
    /// unlinearized completed ops, `c` is bounded by the earliest, or by the second if
    /// `c` is the earliest itself.
    fn candidates(&self, lin: &[u64], from: Cursor) -> (Vec<usize>, Cursor) {
        let n = self.part.len();
        let mut r = from.resp;
        while r < self.by_resp.len() && bit(lin, self.by_resp[r].1) {
            r += 1;
        }
        let min1 = self.by_resp.get(r).copied();
        let min2 = min1.and_then(|_| {
            (self.by_resp[r + 1..].iter())
                .find(|(_, c)| !bit(lin, *c))
                .map(|(t, _)| *t)
        });
        let mut cands: Vec<usize> = Vec::new();
        if self.sorted {
            let i = first_zero(lin, from.invoke, n);
            let cursor = Cursor { resp: r, invoke: i };
            match min1 {
                None => zeros(lin, i, n, |c| cands.push(c)),
                Some((m, who)) => {
                    let k = self.invoke.partition_point(|t| *t <= m);
                    let who_ok = min2.is_none_or(|b| self.invoke[who] <= b);
                    zeros(lin, i, k.max(who + 1), |c| {
                        if (c == who && who_ok) || (c != who && c < k) {
                            cands.push(c);
                        }
                    });
                }
            }
            return (cands, cursor);
        }
        let mut i = from.invoke;
        while i < self.by_invoke.len() && bit(lin, self.by_invoke[i].1) {
            i += 1;
        }
        let cursor = Cursor { resp: r, invoke: i };
        match min1 {
            None => cands.extend(
                (self.by_invoke[i..].iter())
                    .map(|(_, c)| *c)
                    .filter(|c| !bit(lin, *c)),
            ),
            Some((m, who)) => {
                cands.extend(
                    (self.by_invoke[i..].iter())
                        .take_while(|(t, _)| *t <= m)
                        .map(|(_, c)| *c)
                        .filter(|c| *c != who && !bit(lin, *c)),
                );
                if min2.is_none_or(|b| self.invoke[who] <= b) {
                    cands.push(who);
                }
            }
        }
        cands.sort_unstable();
        (cands, cursor)
    }

    /// The states linearizing local op `c` at `state` may lead to, in order.
    fn step(&self, state: &M, c: usize) -> Vec<M> {
        let op = &self.history[self.part[c]];
        match (&op.response, self.relaxed[c]) {
            (Some((_, output)), false) => state.step(&op.input, output).into_iter().collect(),
            _ => state.step_unknown(&op.input),
        }
    }

    /// [`Part::candidates`] with their states, as [`successors`] states them.
    #[cfg(test)]
    fn successors(&self, state: &M, lin: &[u64], from: Cursor) -> (Vec<(usize, M)>, Cursor) {
        let (cands, cursor) = self.candidates(lin, from);
        let out = (cands.into_iter())
            .flat_map(|c| self.step(state, c).into_iter().map(move |s| (c, s)))
            .collect();
        (out, cursor)
    }

    /// A node of the search at `lin` and `state`, its scans starting at `from`.
    fn node(&self, lin: Vec<u64>, state: M, via: Option<usize>, from: Cursor) -> Node<M> {
        let (mut cands, cursor) = self.candidates(&lin, from);
        cands.reverse();
        Node {
            lin,
            state,
            cands,
            more: Vec::new(),
            via,
            cursor,
        }
    }
}

/// Local ops that may be linearized next from `lin`, with the states they lead to: the
/// plain statement of [`Part::successors`], which the tests hold it to.
#[cfg(test)]
fn successors<M: Model>(
    state: &M,
    lin: &[u64],
    history: &[Operation<M::Input, M::Output>],
    part: &[usize],
    relaxed: &[bool],
) -> Vec<(usize, M)> {
    // The two earliest responses among unlinearized completed ops: op c may go next iff
    // no other unlinearized op responded before c was invoked.
    let mut min1: Option<(u64, usize)> = None;
    let mut min2: Option<u64> = None;
    for i in (0..part.len()).filter(|i| !bit(lin, *i)) {
        if let Some(r) = resp(history, part, relaxed, i) {
            match min1 {
                Some((m, _)) if r >= m => min2 = Some(min2.map_or(r, |x| x.min(r))),
                _ => {
                    min2 = min1.map(|(m, _)| m);
                    min1 = Some((r, i));
                }
            }
        }
    }
    let mut out = Vec::new();
    for c in (0..part.len()).filter(|i| !bit(lin, *i)) {
        let op = &history[part[c]];
        let bound = match min1 {
            Some((_, who)) if who == c => min2,
            Some((m, _)) => Some(m),
            None => None,
        };
        if bound.is_some_and(|b| op.invoke > b) {
            continue;
        }
        match (&op.response, relaxed[c]) {
            (Some((_, output)), false) => {
                if let Some(s) = state.step(&op.input, output) {
                    out.push((c, s));
                }
            }
            _ => out.extend(state.step_unknown(&op.input).into_iter().map(|s| (c, s))),
        }
    }
    out
}

fn search<M: Model>(
    initial: &M,
    history: &[Operation<M::Input, M::Output>],
    part: &[usize],
    relaxed: &[bool],
    budget: &mut u64,
) -> Search<M> {
    let n = part.len();
    let required: Vec<usize> = (0..n)
        .filter(|i| resp(history, part, relaxed, *i).is_some())
        .collect();
    let empty = vec![0u64; n.div_ceil(64).max(1)];
    let mut mask = empty.clone();
    for i in &required {
        mask[i / 64] |= 1 << (i % 64);
    }
    let done = |lin: &[u64]| lin.iter().zip(&mask).all(|(l, m)| l & m == *m);
    if done(&empty) {
        return Search::Ok;
    }
    let p = Part::<M>::new(history, part, relaxed);
    let mut memo: Memo<M> = HashMap::default();
    let mut scratch = (Vec::new(), Vec::new());
    let mut stack = vec![p.node(empty, initial.clone(), None, Cursor::default())];
    let mut best: (usize, Vec<usize>, M) = (0, Vec::new(), initial.clone());
    // Frames `1..low` of the stack are those of `best`'s path (frame `i` reached by its
    // op `i - 1`): a new best path keeps them and copies only the frames above.
    let mut low = 1;
    while let Some(top) = stack.last_mut() {
        let Some((c, s)) = top.next(&p) else {
            stack.pop();
            low = low.min(stack.len());
            continue;
        };
        if *budget == 0 {
            return Search::Unknown;
        }
        *budget -= 1;
        let mut lin = top.lin.clone();
        let cursor = top.cursor;
        lin[c / 64] |= 1 << (c % 64);
        if done(&lin) {
            return Search::Ok;
        }
        if !first_visit(&mut memo, &mask, &lin, &s, &mut scratch) {
            continue;
        }
        let depth: usize = (lin.iter().zip(&mask))
            .map(|(l, m)| (l & m).count_ones() as usize)
            .sum();
        if depth > best.0 || best.1.is_empty() {
            let path = &mut best.1;
            path.truncate(low.max(1) - 1);
            path.extend(stack[low.max(1)..].iter().filter_map(|f| f.via));
            path.push(c);
            best.0 = depth;
            best.2 = s.clone();
            low = stack.len() + 1;
        }
        stack.push(p.node(lin, s, Some(c), cursor));
    }
    Search::Fail {
        path: best.1,
        state: best.2,
    }
}

fn counterexample<M: Model>(
    initial: &M,
    history: &[Operation<M::Input, M::Output>],
    part: &[usize],
    partition: Option<String>,
    path: Vec<usize>,
    state: M,
    limits: &Limits,
) -> Counterexample {
    let n = part.len();
    let mut lin = vec![0u64; n.div_ceil(64).max(1)];
    for c in &path {
        lin[c / 64] |= 1 << (c % 64);
    }
    // Completed ops allowed next by real time (whatever their output).
    let allowed: Vec<usize> = {
        let trivially = successors_ignoring_output(&lin, history, part);
        trivially
            .into_iter()
            .filter(|c| history[part[*c]].response.is_some())
            .collect()
    };
    let core = core(initial, history, part, limits);
    let linearized: Vec<usize> = path.iter().map(|c| part[*c]).collect();
    let stuck: Vec<usize> = allowed.iter().map(|c| part[*c]).collect();
    let mut d = String::new();
    if let Some(k) = &partition {
        d.push_str(&format!("object {k}: "));
    }
    d.push_str(&format!(
        "after linearizing {} operation(s) the model is in state {state:?}, and none of \
         the operations that may come next can produce its output:\n",
        linearized.len()
    ));
    for i in &stuck {
        d.push_str(&format!("  {}\n", Show(&history[*i], *i)));
    }
    if !core.is_empty() {
        d.push_str("core (non-linearizable even if every other operation is uncertain):\n");
        for i in &core {
            d.push_str(&format!("  {}\n", Show(&history[*i], *i)));
        }
    }
    Counterexample {
        partition,
        linearized,
        stuck,
        core,
        description: d,
    }
}

fn successors_ignoring_output<I, O>(
    lin: &[u64],
    history: &[Operation<I, O>],
    part: &[usize],
) -> Vec<usize> {
    let unl: Vec<usize> = (0..part.len()).filter(|i| !bit(lin, *i)).collect();
    unl.iter()
        .copied()
        .filter(|c| {
            unl.iter().all(|o| {
                o == c
                    || history[part[*o]]
                        .response
                        .as_ref()
                        .is_none_or(|(r, _)| *r >= history[part[*c]].invoke)
            })
        })
        .collect()
}

/// Greedily relaxes completed ops to "uncertain" while the partition stays
/// non-linearizable; what remains completed is the core.
fn core<M: Model>(
    initial: &M,
    history: &[Operation<M::Input, M::Output>],
    part: &[usize],
    limits: &Limits,
) -> Vec<usize> {
    let completed: Vec<usize> = (0..part.len())
        .filter(|i| history[part[*i]].response.is_some())
        .collect();
    if completed.len() > limits.core_max_ops {
        return Vec::new();
    }
    let mut relaxed = vec![false; part.len()];
    for c in completed.iter().copied() {
        relaxed[c] = true;
        let mut budget = limits.max_steps;
        if !matches!(
            search(initial, history, part, &relaxed, &mut budget),
            Search::Fail { .. }
        ) {
            relaxed[c] = false;
        }
    }
    completed
        .into_iter()
        .filter(|c| !relaxed[*c])
        .map(|c| part[c])
        .collect()
}

struct Show<'a, I, O>(&'a Operation<I, O>, usize);

impl<I: Debug, O: Debug> fmt::Display for Show<'_, I, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = self.0;
        match &o.response {
            Some((t, out)) => write!(
                f,
                "#{} client {} [{}, {}] {:?} -> {:?}",
                self.1, o.client, o.invoke, t, o.input, out
            ),
            None => write!(
                f,
                "#{} client {} [{}, ?] {:?} -> (no response)",
                self.1, o.client, o.invoke, o.input
            ),
        }
    }
}
