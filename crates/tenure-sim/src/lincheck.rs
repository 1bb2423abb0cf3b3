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
//! This file holds the interface and the counterexample; the search lives in `search`,
//! the models in `lock` and `register`.

use std::collections::BTreeMap;
use std::fmt::{self, Debug};
use std::hash::Hash;
use thiserror::Error;

mod indexed;
mod lock;
mod register;
mod search;
#[cfg(test)]
mod tests;

pub use lock::{
    LockInput, LockModel, LockOutput, LockVerdict, NameState, check_locks, is_ancestor,
    locks_conflict, names_overlap,
};
pub use register::{RegisterInput, RegisterModel, RegisterOutput};
#[cfg(test)]
use search::{Cursor, Part, successors};
use search::{Search, bit, search};

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
    /// Wall-clock bound of the whole check, for callers outside the simulator (the chaos
    /// run's checks): past it every search stops as `Unknown`. The simulator leaves it
    /// `None`, so its verdicts depend on the seed alone.
    pub deadline: Option<std::time::Instant>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_steps: 1_000_000,
            core_max_ops: 64,
            deadline: None,
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
        match search(
            initial,
            history,
            &part,
            &relaxed,
            &mut budget,
            limits.deadline,
        ) {
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
            search(
                initial,
                history,
                part,
                &relaxed,
                &mut budget,
                limits.deadline
            ),
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
