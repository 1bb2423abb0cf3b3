//! The search of [`super::check`]: Wing & Gong's depth-first search over "which
//! operation is linearized next", with Lowe's memo of explored configurations
//! ([`Memo`]) and the per-partition scan orders ([`Part`]) that keep each step cheap.

use super::{Model, Operation};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

pub(super) enum Search<M> {
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

pub(super) fn bit(set: &[u64], i: usize) -> bool {
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
pub(super) struct Cursor {
    resp: usize,
    invoke: usize,
}

/// One partition with the orders the search scans, computed once.
pub(super) struct Part<'a, M: Model> {
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
    pub(super) fn new(
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
    pub(super) fn successors(
        &self,
        state: &M,
        lin: &[u64],
        from: Cursor,
    ) -> (Vec<(usize, M)>, Cursor) {
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
pub(super) fn successors<M: Model>(
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

pub(super) fn search<M: Model>(
    initial: &M,
    history: &[Operation<M::Input, M::Output>],
    part: &[usize],
    relaxed: &[bool],
    budget: &mut u64,
    deadline: Option<std::time::Instant>,
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
    if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
        return Search::Unknown;
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
        // The clock is read once every 4,096 steps: a step costs well under a microsecond.
        if budget.is_multiple_of(4096) && deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            return Search::Unknown;
        }
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
