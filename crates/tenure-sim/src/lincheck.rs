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

use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Debug};
use std::hash::{BuildHasherDefault, DefaultHasher, Hash};
use tenure_core::lockctl::{FencingToken, LockMode, SessionId};
use thiserror::Error;

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

/// Configurations explored, by (completed operations linearized, model state): the sets of
/// unknown-outcome operations linearized with them. An unknown operation never limits
/// what may go next (it has no response) and may always be linearized later or never, so
/// a configuration is *subsumed* by an explored one with the same completed operations and
/// state whose linearized unknown operations are a subset of its own: every continuation
/// of the first is one of the second, which failed. Without this, each unknown acquire
/// granted and then released by its unknown close (a client that gave up) makes another
/// configuration equal in all but its bitset, and a history with k of them 3^k.
type Memo<M> = HashMap<(Vec<u64>, M), Vec<Vec<u64>>, BuildHasherDefault<DefaultHasher>>;

/// Records configuration (`lin`, `state`) in `memo`; `false` if it was explored already or
/// is subsumed by one that was (see [`Memo`]). `required` is the mask of completed ops.
fn first_visit<M: Model>(memo: &mut Memo<M>, required: &[u64], lin: &[u64], state: &M) -> bool {
    let done: Vec<u64> = lin.iter().zip(required).map(|(l, r)| l & r).collect();
    let unknown: Vec<u64> = lin.iter().zip(required).map(|(l, r)| l & !r).collect();
    let seen = memo.entry((done, state.clone())).or_default();
    let subset = |a: &[u64], b: &[u64]| a.iter().zip(b).all(|(x, y)| x & !y == 0);
    if seen.iter().any(|u| subset(u, &unknown)) {
        return false;
    }
    seen.push(unknown);
    true
}

struct Node<M> {
    lin: Vec<u64>,
    succ: Vec<(usize, M)>,
    next: usize,
    /// The op linearized to reach this node.
    via: Option<usize>,
}

fn bit(set: &[u64], i: usize) -> bool {
    set[i / 64] & (1 << (i % 64)) != 0
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

/// Local ops that may be linearized next from `lin`, with the states they lead to.
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
    let mut memo: Memo<M> = HashMap::default();
    let mut stack = vec![Node {
        succ: successors(initial, &empty, history, part, relaxed),
        lin: empty,
        next: 0,
        via: None,
    }];
    let mut best: (usize, Vec<usize>, M) = (0, Vec::new(), initial.clone());
    while let Some(top) = stack.last_mut() {
        if top.next >= top.succ.len() {
            stack.pop();
            continue;
        }
        if *budget == 0 {
            return Search::Unknown;
        }
        *budget -= 1;
        let (c, s) = top.succ[top.next].clone();
        top.next += 1;
        let mut lin = top.lin.clone();
        lin[c / 64] |= 1 << (c % 64);
        if done(&lin) {
            return Search::Ok;
        }
        if !first_visit(&mut memo, &mask, &lin, &s) {
            continue;
        }
        let depth: usize = (lin.iter().zip(&mask))
            .map(|(l, m)| (l & m).count_ones() as usize)
            .sum();
        if depth > best.0 || best.1.is_empty() {
            let mut path: Vec<usize> = stack.iter().filter_map(|f| f.via).collect();
            path.push(c);
            best = (depth, path, s.clone());
        }
        let succ = successors(&s, &lin, history, part, relaxed);
        stack.push(Node {
            lin,
            succ,
            next: 0,
            via: Some(c),
        });
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

// ---- the lock model ----

/// An operation on the lock service, as a client saw it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LockInput {
    /// Acquire `name` in `mode` for `session`.
    Acquire {
        /// The lock.
        name: String,
        /// The session.
        session: SessionId,
        /// The mode.
        mode: LockMode,
    },
    /// Release `session`'s lock on `name` (an expiry-release is recorded as one per lock).
    Release {
        /// The lock.
        name: String,
        /// The session.
        session: SessionId,
    },
    /// Who holds `name`?
    Holders {
        /// The lock.
        name: String,
    },
}

/// What the client was told.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LockOutput {
    /// Acquire granted with this fencing token.
    Granted {
        /// The token.
        token: FencingToken,
    },
    /// Acquire refused because of a conflicting holder or because the session already held
    /// it. Only valid when that is so at the linearization point.
    Refused,
    /// Acquire ended without a grant for a reason the specification does not see (timeout,
    /// lock-delay, deadlock, fairness behind a waiter, unavailable). Always valid; no
    /// effect.
    Failed,
    /// Release succeeded.
    Released,
    /// Release found no such lock.
    NotHeld,
    /// Holders of the lock, sorted by session.
    Holders(Vec<(SessionId, LockMode)>),
}

/// One name's state in [`LockModel`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NameState {
    /// Holders and modes.
    pub holders: BTreeMap<SessionId, LockMode>,
    /// The largest token granted so far (lower bound if some grant's token is unknown).
    pub last_token: Option<FencingToken>,
}

/// `a` is a proper ancestor of `b` in the path hierarchy (`/a` of `/a/b`, not of `/ab`).
pub fn is_ancestor(a: &str, b: &str) -> bool {
    b.len() > a.len() && b.starts_with(a) && b.as_bytes()[a.len()] == b'/'
}

/// One name covers the other (seed 004 §9): they are equal, or one is an ancestor of the
/// other.
pub fn names_overlap(a: &str, b: &str) -> bool {
    a == b || is_ancestor(a, b) || is_ancestor(b, a)
}

/// The specification's conflict rule, stated on its own (not borrowed from the lock
/// table): locks of two sessions conflict when one name covers the other and they are
/// not both shared. A lock on a path covers its descendants (HCLC cover, seed 004 §9),
/// and the intention modes it places on its ancestors (IS for shared, IX for exclusive)
/// are compatible only with shared-under-shared (Gray's matrix: IS–S yes, IX–S no, X–any
/// no), so the deepest common node always decides the same way.
pub fn locks_conflict(a: &str, ma: LockMode, b: &str, mb: LockMode) -> bool {
    names_overlap(a, b) && !(ma == LockMode::Shared && mb == LockMode::Shared)
}

/// Sequential specification of shared/exclusive locks on path names, with fencing
/// tokens strictly increasing per name. A grant is legal only if no other session holds
/// a conflicting lock on the name, an ancestor or a descendant ([`locks_conflict`]), so
/// names that cover one another are checked together ([`Model::keys_related`]); other
/// names are independent (partition key = name).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LockModel {
    /// State per name; absent = free, no token yet.
    pub names: BTreeMap<String, NameState>,
}

impl LockModel {
    /// `session` may be granted `(name, mode)` here: it does not hold the name already,
    /// and no other session holds a lock that conflicts with it.
    fn grantable(&self, name: &str, session: SessionId, mode: LockMode) -> bool {
        if (self.names.get(name)).is_some_and(|st| st.holders.contains_key(&session)) {
            return false;
        }
        self.names
            .iter()
            .filter(|(n, _)| names_overlap(n, name))
            .all(|(n, st)| {
                st.holders
                    .iter()
                    .all(|(s, m)| *s == session || !locks_conflict(n, *m, name, mode))
            })
    }

    fn with(&self, name: &str, f: impl FnOnce(&mut NameState)) -> LockModel {
        let mut m = self.clone();
        let st = m.names.entry(name.to_owned()).or_default();
        f(st);
        if *st == NameState::default() {
            m.names.remove(name);
        }
        m
    }

    fn get(&self, name: &str) -> NameState {
        self.names.get(name).cloned().unwrap_or_default()
    }
}

impl Model for LockModel {
    type Input = LockInput;
    type Output = LockOutput;

    fn step(&self, input: &LockInput, output: &LockOutput) -> Option<Self> {
        match (input, output) {
            (
                LockInput::Acquire {
                    name,
                    session,
                    mode,
                },
                LockOutput::Granted { token },
            ) => {
                let st = self.get(name);
                (self.grantable(name, *session, *mode) && st.last_token.is_none_or(|t| *token > t))
                    .then(|| {
                        self.with(name, |st| {
                            st.holders.insert(*session, *mode);
                            st.last_token = Some(*token);
                        })
                    })
            }
            (
                LockInput::Acquire {
                    name,
                    session,
                    mode,
                },
                LockOutput::Refused,
            ) => (!self.grantable(name, *session, *mode)).then(|| self.clone()),
            (LockInput::Acquire { .. }, LockOutput::Failed) => Some(self.clone()),
            (LockInput::Release { name, session }, LockOutput::Released) => {
                self.get(name).holders.contains_key(session).then(|| {
                    self.with(name, |st| {
                        st.holders.remove(session);
                    })
                })
            }
            (LockInput::Release { name, session }, LockOutput::NotHeld) => {
                (!self.get(name).holders.contains_key(session)).then(|| self.clone())
            }
            (LockInput::Holders { name }, LockOutput::Holders(seen)) => {
                let now: Vec<(SessionId, LockMode)> = self.get(name).holders.into_iter().collect();
                (now == *seen).then(|| self.clone())
            }
            _ => None,
        }
    }

    fn step_unknown(&self, input: &LockInput) -> Vec<Self> {
        match input {
            LockInput::Acquire {
                name,
                session,
                mode,
            } => {
                if self.grantable(name, *session, *mode) {
                    // Granted with a token we never saw: it exceeded `last_token`, which
                    // stays as a (weaker) lower bound for later grants.
                    vec![self.with(name, |st| {
                        st.holders.insert(*session, *mode);
                    })]
                } else {
                    vec![]
                }
            }
            LockInput::Release { name, session } => {
                if self.get(name).holders.contains_key(session) {
                    vec![self.with(name, |st| {
                        st.holders.remove(session);
                    })]
                } else {
                    vec![]
                }
            }
            LockInput::Holders { .. } => vec![],
        }
    }

    fn partition_key(input: &LockInput) -> Option<String> {
        match input {
            LockInput::Acquire { name, .. }
            | LockInput::Release { name, .. }
            | LockInput::Holders { name } => Some(name.clone()),
        }
    }

    fn keys_related(a: &str, b: &str) -> bool {
        names_overlap(a, b)
    }
}

/// [`LockModel`] with every name checked alone, the hierarchy ignored: the fallback for a
/// group of covering names whose joint search hits the step bound. The projection of a
/// history on one name is linearizable under this model whenever the history is under
/// [`LockModel`] (a grant legal along the path is legal on its name alone, and a release
/// or a read sees the same holders of the name), so a failure here is a real one —
/// provided the history has no `Refused` output, which only a conflict on a covering name
/// may justify (the simulator's clients record a refusal as `Failed`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PerNameLockModel(pub LockModel);

impl Model for PerNameLockModel {
    type Input = LockInput;
    type Output = LockOutput;

    fn step(&self, input: &LockInput, output: &LockOutput) -> Option<Self> {
        self.0.step(input, output).map(PerNameLockModel)
    }

    fn step_unknown(&self, input: &LockInput) -> Vec<Self> {
        (self.0.step_unknown(input).into_iter())
            .map(PerNameLockModel)
            .collect()
    }

    fn partition_key(input: &LockInput) -> Option<String> {
        LockModel::partition_key(input)
    }
}

/// The verdict on a lock history, and what it rests on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockVerdict {
    /// Linearizable, not, or unknown (some group's searches all hit the step bound).
    pub verdict: Verdict,
    /// Operations in groups found linearizable together (the cover rule judged).
    pub ops_linearizable: u64,
    /// Groups of covering names whose joint search hit the step bound.
    pub groups_unknown: u64,
    /// Operations of those groups found linearizable name by name instead.
    pub ops_linearizable_alone: u64,
}

/// Checks a lock history against [`LockModel`], one group of covering names at a time; a
/// group whose search hits the step bound is checked again name by name
/// ([`PerNameLockModel`]), so that nesting never checks less than names alone would. A
/// counterexample's indices refer to its group's operations, in history order.
pub fn check_locks(
    history: &[Operation<LockInput, LockOutput>],
    limits: &Limits,
) -> Result<LockVerdict, HistoryError> {
    let mut out = LockVerdict {
        verdict: Verdict::Linearizable,
        ops_linearizable: 0,
        groups_unknown: 0,
        ops_linearizable_alone: 0,
    };
    let mut unknown_steps = None;
    for (_, part) in partitions::<LockModel>(history) {
        let ops: Vec<Operation<LockInput, LockOutput>> =
            part.iter().map(|i| history[*i].clone()).collect();
        match check(&LockModel::default(), &ops, limits)? {
            Verdict::Linearizable => out.ops_linearizable += ops.len() as u64,
            Verdict::NotLinearizable(c) => {
                out.verdict = Verdict::NotLinearizable(c);
                return Ok(out);
            }
            Verdict::Unknown { steps } => {
                out.groups_unknown += 1;
                match check(&PerNameLockModel::default(), &ops, limits)? {
                    Verdict::Linearizable => out.ops_linearizable_alone += ops.len() as u64,
                    Verdict::NotLinearizable(c) => {
                        out.verdict = Verdict::NotLinearizable(c);
                        return Ok(out);
                    }
                    Verdict::Unknown { steps: more } => {
                        *unknown_steps.get_or_insert(0) += steps + more;
                    }
                }
            }
        }
    }
    if let Some(steps) = unknown_steps {
        out.verdict = Verdict::Unknown { steps };
    }
    Ok(out)
}

// ---- the register model ----

/// A register operation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RegisterInput {
    /// Read the value.
    Read,
    /// Write a value.
    Write(i64),
    /// Compare-and-set.
    Cas {
        /// Expected value.
        expect: i64,
        /// New value.
        new: i64,
    },
}

/// A register answer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RegisterOutput {
    /// A read's value.
    Value(i64),
    /// A write, or a successful CAS.
    Ok,
    /// A CAS whose expectation did not hold.
    CasFailed,
}

/// A single read/write/CAS register.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RegisterModel(pub i64);

impl Model for RegisterModel {
    type Input = RegisterInput;
    type Output = RegisterOutput;

    fn step(&self, input: &RegisterInput, output: &RegisterOutput) -> Option<Self> {
        match (input, output) {
            (RegisterInput::Read, RegisterOutput::Value(v)) => (*v == self.0).then_some(*self),
            (RegisterInput::Write(v), RegisterOutput::Ok) => Some(RegisterModel(*v)),
            (RegisterInput::Cas { expect, new }, RegisterOutput::Ok) => {
                (*expect == self.0).then_some(RegisterModel(*new))
            }
            (RegisterInput::Cas { expect, .. }, RegisterOutput::CasFailed) => {
                (*expect != self.0).then_some(*self)
            }
            _ => None,
        }
    }

    fn step_unknown(&self, input: &RegisterInput) -> Vec<Self> {
        match input {
            RegisterInput::Read => vec![],
            RegisterInput::Write(v) => vec![RegisterModel(*v)],
            RegisterInput::Cas { expect, new } if *expect == self.0 => vec![RegisterModel(*new)],
            RegisterInput::Cas { .. } => vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_core::Epoch;
    use tenure_core::lockctl::{
        Acquire, AcquireError, Acquired, LockTable, LockTableConfig, RequestId, Wait,
    };

    type LockOp = Operation<LockInput, LockOutput>;

    const A: SessionId = SessionId(1);
    const B: SessionId = SessionId(2);
    const X: LockMode = LockMode::Exclusive;
    const S: LockMode = LockMode::Shared;

    fn tok(seq: u64) -> FencingToken {
        FencingToken {
            epoch: Epoch(1),
            seq,
        }
    }

    fn op(client: u64, input: LockInput, invoke: u64, resp: Option<(u64, LockOutput)>) -> LockOp {
        Operation {
            client,
            input,
            invoke,
            response: resp,
        }
    }

    fn acq(s: SessionId, mode: LockMode, at: (u64, u64), out: LockOutput) -> LockOp {
        let input = LockInput::Acquire {
            name: "/l".into(),
            session: s,
            mode,
        };
        op(s.0, input, at.0, Some((at.1, out)))
    }

    fn rel(s: SessionId, at: (u64, u64)) -> LockOp {
        let input = LockInput::Release {
            name: "/l".into(),
            session: s,
        };
        op(s.0, input, at.0, Some((at.1, LockOutput::Released)))
    }

    fn holders(client: u64, at: (u64, u64), seen: Vec<(SessionId, LockMode)>) -> LockOp {
        let input = LockInput::Holders { name: "/l".into() };
        op(client, input, at.0, Some((at.1, LockOutput::Holders(seen))))
    }

    fn granted(seq: u64) -> LockOutput {
        LockOutput::Granted { token: tok(seq) }
    }

    fn verdict(h: &[LockOp]) -> Verdict {
        check(&LockModel::default(), h, &Limits::default()).unwrap()
    }

    fn violation(h: &[LockOp]) -> Counterexample {
        match verdict(h) {
            Verdict::NotLinearizable(c) => *c,
            v => panic!("expected a violation, got {v:?}"),
        }
    }

    #[test]
    fn planted_bug_double_exclusive_grant_is_rejected() {
        // seed 004 §2: "locks granted by an LC do not conflict with one another". Two
        // sessions are granted the same exclusive lock with overlapping intervals and
        // neither released before the other's grant.
        let h = vec![
            acq(A, X, (0, 2), granted(1)),
            acq(B, X, (1, 4), granted(2)),
            rel(A, (6, 7)),
            rel(B, (8, 9)),
        ];
        let c = violation(&h);
        assert_eq!(c.partition.as_deref(), Some("/l"));
        // The core is two operations (B's grant and one of A's, whose grant the release
        // implies); everything else may be uncertain.
        assert_eq!(c.core.len(), 2, "{c:?}");
        assert!(c.core.contains(&1), "{c:?}");
        assert!(c.description.contains("core"), "{}", c.description);
    }

    /// A holds the lock and closes its client after an unknown outcome (an unknown
    /// release); meanwhile 24 clients each try, give up (an unknown acquire) and close (an
    /// unknown release), as a chaos run's clients do while a failover keeps A's session
    /// alive. Reads see A holding throughout. Each of the 24 pairs could be granted and
    /// released between any two reads, all giving the same state: without subsumption
    /// the search visits ~3^24 configurations.
    fn abandoned(tail: Vec<LockOp>) -> Vec<LockOp> {
        let mut h = vec![acq(A, X, (0, 1), granted(1))];
        h.push(op(
            A.0,
            LockInput::Release {
                name: "/l".into(),
                session: A,
            },
            2,
            None,
        ));
        for i in 0..24u64 {
            let s = SessionId(10 + i);
            let input = LockInput::Acquire {
                name: "/l".into(),
                session: s,
                mode: X,
            };
            h.push(op(s.0, input, 3 + 2 * i, None));
            h.push(op(
                s.0,
                LockInput::Release {
                    name: "/l".into(),
                    session: s,
                },
                4 + 2 * i,
                None,
            ));
        }
        h.push(holders(99, (100, 101), vec![(A, X)]));
        h.extend(tail);
        h
    }

    #[test]
    fn unknown_outcomes_of_clients_that_gave_up_are_subsumed() {
        let limits = Limits {
            max_steps: 200_000,
            ..Default::default()
        };
        // A's close takes effect after the read; B is granted a newer token.
        let ok = abandoned(vec![acq(B, X, (200, 201), granted(5))]);
        assert_eq!(
            check(&LockModel::default(), &ok, &limits),
            Ok(Verdict::Linearizable)
        );
        // B is granted, then a read sees A holding again: A's only acquire was long
        // linearized, so no order explains it.
        let bad = abandoned(vec![
            acq(B, X, (200, 201), granted(5)),
            holders(99, (202, 203), vec![(A, X)]),
        ]);
        let v = check(&LockModel::default(), &bad, &limits).unwrap();
        assert!(matches!(v, Verdict::NotLinearizable(_)), "{v:?}");
    }

    #[test]
    fn grant_respecting_real_time_order_passes() {
        // B's grant overlaps A's release in real time: the release linearizes first.
        let h = vec![
            acq(A, X, (0, 2), granted(1)),
            rel(A, (3, 6)),
            acq(B, X, (4, 8), granted(2)),
            rel(B, (9, 10)),
            acq(A, S, (11, 12), granted(3)),
            acq(B, S, (11, 13), granted(4)),
        ];
        assert_eq!(verdict(&h), Verdict::Linearizable);
    }

    #[test]
    fn grant_before_release_started_is_rejected() {
        // B's grant completed before A's release was even invoked.
        let h = vec![
            acq(A, X, (0, 1), granted(1)),
            acq(B, X, (2, 3), granted(2)),
            rel(A, (4, 5)),
        ];
        assert!(!verdict(&h).is_linearizable());
    }

    #[test]
    fn planted_bug_stale_holder_read_is_rejected() {
        // DESIGN §4 "reads from a manager that may have been replaced": a holder query
        // that starts after a release completed must not return the old holder.
        let stale = vec![
            acq(A, X, (0, 1), granted(1)),
            rel(A, (2, 3)),
            holders(9, (4, 5), vec![(A, X)]),
        ];
        let c = violation(&stale);
        assert!(c.stuck.contains(&2), "{c:?}");
        // Concurrent with the release, the old holder is a legal answer.
        let concurrent = vec![
            acq(A, X, (0, 1), granted(1)),
            rel(A, (2, 4)),
            holders(9, (3, 5), vec![(A, X)]),
            holders(9, (6, 7), vec![]),
        ];
        assert_eq!(verdict(&concurrent), Verdict::Linearizable);
    }

    #[test]
    fn fencing_tokens_must_increase_per_lock() {
        // seed 002 §14.4.5 (Chubby sequencers) / DESIGN §4 fencing: a later grant with a
        // smaller token is not linearizable.
        let h = vec![
            acq(A, X, (0, 1), granted(5)),
            rel(A, (2, 3)),
            acq(B, X, (4, 5), granted(3)),
        ];
        assert!(!verdict(&h).is_linearizable());
    }

    #[test]
    fn refused_only_while_a_conflicting_holder_exists() {
        let ok = vec![
            acq(A, X, (0, 1), granted(1)),
            acq(B, S, (2, 3), LockOutput::Refused),
            acq(B, S, (2, 3), LockOutput::Failed),
        ];
        assert_eq!(verdict(&ok), Verdict::Linearizable);
        let bad = vec![acq(B, S, (2, 3), LockOutput::Refused)];
        assert!(!verdict(&bad).is_linearizable());
    }

    #[test]
    fn pending_operations_may_or_may_not_take_effect() {
        // A's release never answered, yet B was granted later: the release took effect.
        let mut h = vec![acq(A, X, (0, 1), granted(1)), acq(B, X, (5, 6), granted(2))];
        h.push(op(
            1,
            LockInput::Release {
                name: "/l".into(),
                session: A,
            },
            2,
            None,
        ));
        assert_eq!(verdict(&h), Verdict::Linearizable);
        // B's acquire never answered and A was granted afterwards: it did not take effect.
        let h = vec![
            op(
                2,
                LockInput::Acquire {
                    name: "/l".into(),
                    session: B,
                    mode: X,
                },
                0,
                None,
            ),
            acq(A, X, (1, 2), granted(1)),
            holders(9, (3, 4), vec![(A, X)]),
        ];
        assert_eq!(verdict(&h), Verdict::Linearizable);
    }

    #[test]
    fn names_are_checked_independently() {
        let mut h = vec![acq(A, X, (0, 1), granted(1))];
        h.push(op(
            2,
            LockInput::Acquire {
                name: "/m".into(),
                session: B,
                mode: X,
            },
            0,
            Some((1, granted(1))),
        ));
        assert_eq!(verdict(&h), Verdict::Linearizable);
        assert_eq!(partitions::<LockModel>(&h).len(), 2);
    }

    fn acq_on(name: &str, s: SessionId, mode: LockMode, at: (u64, u64), out: LockOutput) -> LockOp {
        let input = LockInput::Acquire {
            name: name.into(),
            session: s,
            mode,
        };
        op(s.0, input, at.0, Some((at.1, out)))
    }

    #[test]
    fn planted_bug_conflicting_grants_on_a_path_are_rejected() {
        // seed 004 §9 (HCLC cover): an exclusive lock on /l covers /l/c, so a second
        // session's grant on /l/c while the first still holds /l is not linearizable,
        // although each name's history alone is.
        let h = vec![
            acq_on("/l", A, X, (0, 2), granted(1)),
            acq_on("/l/c", B, S, (3, 4), granted(2)),
            acq_on("/m", B, X, (3, 4), granted(3)),
        ];
        let c = violation(&h);
        assert_eq!(c.partition.as_deref(), Some("/l + /l/c"));
        assert_eq!(c.core, vec![0, 1], "{c:?}");
        // Each name's history alone passes: only the hierarchy catches it.
        for name in ["/l", "/l/c"] {
            let alone: Vec<LockOp> = h
                .iter()
                .filter(|o| LockModel::partition_key(&o.input).as_deref() == Some(name))
                .cloned()
                .collect();
            assert_eq!(verdict(&alone), Verdict::Linearizable);
        }
    }

    #[test]
    fn shared_under_shared_and_siblings_pass() {
        // IS on /l is compatible with S on /l; /l/c and /l/d are disjoint.
        let h = vec![
            acq_on("/l", A, S, (0, 2), granted(1)),
            acq_on("/l/c", B, S, (3, 4), granted(2)),
            acq_on("/l/c/e", B, S, (3, 4), granted(3)),
            acq_on("/l/d", A, X, (5, 6), granted(4)),
            // The same session may hold overlapping locks.
            acq_on("/l/d/f", A, X, (7, 8), granted(5)),
        ];
        assert_eq!(verdict(&h), Verdict::Linearizable);
        // But an exclusive lock under another session's shared one is refused.
        let mut bad = h.clone();
        bad.push(acq_on("/l/c/g", SessionId(3), X, (9, 10), granted(6)));
        assert!(!verdict(&bad).is_linearizable());
        let mut ok = h;
        ok.push(acq_on(
            "/l/c/g",
            SessionId(3),
            X,
            (9, 10),
            LockOutput::Refused,
        ));
        assert_eq!(verdict(&ok), Verdict::Linearizable);
    }

    #[test]
    fn overlapping_names_share_a_partition_and_others_do_not() {
        let names = ["/a/x", "/b", "/a", "/a/x/1", "/c/y", "/ab"];
        let h: Vec<LockOp> = names
            .iter()
            .enumerate()
            .map(|(i, n)| acq_on(n, SessionId(i as u64), S, (0, 1), LockOutput::Failed))
            .collect();
        let parts: Vec<Option<String>> = partitions::<LockModel>(&h)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(
            parts,
            vec![
                Some("/a + /a/x + /a/x/1".to_string()),
                Some("/ab".to_string()),
                Some("/b".to_string()),
                Some("/c/y".to_string()),
            ]
        );
    }

    // The specification's conflict rule agrees with the lock table's compatibility matrix
    // and cover rule on every pair of a small tree of names and every pair of modes.
    #[test]
    fn the_conflict_rule_agrees_with_the_lock_tables() {
        use tenure_core::lockctl::{LockName, conflicts};
        let names = ["/a", "/a/b", "/a/b/c", "/a/d", "/ab", "/e"];
        for a in names {
            for b in names {
                for ma in [S, X] {
                    for mb in [S, X] {
                        let (na, nb) = (LockName::parse(a).unwrap(), LockName::parse(b).unwrap());
                        assert_eq!(
                            locks_conflict(a, ma, b, mb),
                            conflicts(&na, ma, &nb, mb),
                            "{a} {ma:?} / {b} {mb:?}"
                        );
                    }
                }
            }
        }
    }

    // A group whose joint search hits the step bound is checked name by name: a
    // violation on one name is still found, and the group counts as unknown.
    #[test]
    fn a_group_beyond_the_bound_is_checked_name_by_name() {
        // Concurrent shared grants on /l and /l/c: 24 operations to linearize together,
        // more than the bound allows, 12 on each name alone.
        let mut h = Vec::new();
        for s in 1..=12u64 {
            h.push(acq_on("/l", SessionId(s), S, (0, 100), granted(s)));
            h.push(acq_on("/l/c", SessionId(s), S, (0, 100), granted(100 + s)));
        }
        let limits = Limits {
            max_steps: 20,
            core_max_ops: 0,
        };
        let v = check_locks(&h, &limits).unwrap();
        assert_eq!(v.verdict, Verdict::Linearizable);
        assert_eq!((v.groups_unknown, v.ops_linearizable_alone), (1, 24));
        // With room to search, the group is judged together.
        let v = check_locks(&h, &Limits::default()).unwrap();
        assert_eq!((v.verdict, v.ops_linearizable), (Verdict::Linearizable, 24));
        // Two exclusive grants of /m/d without a release between them, in a group beyond
        // the bound: still found.
        for s in 1..=12u64 {
            h.push(acq_on("/m", SessionId(s), S, (0, 100), granted(200 + s)));
            h.push(acq_on("/m/e", SessionId(s), S, (0, 100), granted(300 + s)));
        }
        h.push(acq_on("/m/d", SessionId(20), X, (200, 201), granted(400)));
        h.push(acq_on("/m/d", SessionId(21), X, (202, 203), granted(401)));
        let v = check_locks(&h, &limits).unwrap();
        match v.verdict {
            Verdict::NotLinearizable(c) => assert_eq!(c.partition.as_deref(), Some("/m/d")),
            other => panic!("expected a violation, got {other:?}"),
        }
    }

    #[test]
    fn malformed_history_is_an_error() {
        let h = vec![acq(A, X, (5, 1), granted(1))];
        assert_eq!(
            check(&LockModel::default(), &h, &Limits::default()),
            Err(HistoryError::ResponseBeforeInvoke {
                op: 0,
                invoke: 5,
                response: 1
            })
        );
    }

    #[test]
    fn step_limit_answers_unknown() {
        // Many fully concurrent shared grants and holder reads: a large search space.
        let mut h = Vec::new();
        for s in 1..=12u64 {
            h.push(acq(SessionId(s), S, (0, 100), granted(s)));
        }
        h.push(holders(99, (0, 100), vec![(SessionId(13), S)]));
        let limits = Limits {
            max_steps: 50,
            core_max_ops: 0,
        };
        assert!(matches!(
            check(&LockModel::default(), &h, &limits).unwrap(),
            Verdict::Unknown { .. }
        ));
    }

    fn reg(
        client: u64,
        input: RegisterInput,
        at: (u64, u64),
        out: RegisterOutput,
    ) -> Operation<RegisterInput, RegisterOutput> {
        Operation {
            client,
            input,
            invoke: at.0,
            response: Some((at.1, out)),
        }
    }

    #[test]
    fn register_histories() {
        use RegisterInput::*;
        use RegisterOutput as O;
        let ok = vec![
            reg(1, Write(1), (0, 10), O::Ok),
            reg(2, Read, (1, 2), O::Value(0)),
            reg(3, Read, (3, 4), O::Value(1)),
            reg(2, Read, (5, 6), O::Value(1)),
            reg(4, Cas { expect: 1, new: 2 }, (11, 12), O::Ok),
            reg(5, Cas { expect: 1, new: 3 }, (13, 14), O::CasFailed),
        ];
        let r = check(&RegisterModel(0), &ok, &Limits::default()).unwrap();
        assert_eq!(r, Verdict::Linearizable);
        // Stale read: 1 was read, then a later read saw 0 again.
        let stale = vec![
            reg(1, Write(1), (0, 10), O::Ok),
            reg(3, Read, (3, 4), O::Value(1)),
            reg(2, Read, (5, 6), O::Value(0)),
        ];
        match check(&RegisterModel(0), &stale, &Limits::default()).unwrap() {
            Verdict::NotLinearizable(c) => {
                assert_eq!(c.partition, None);
                assert_eq!(c.core, vec![1, 2]);
            }
            v => panic!("expected a violation, got {v:?}"),
        }
    }

    /// Drives the real lock table (tenure-core lockctl) sequentially on a small tree of
    /// names, giving each operation an interval around its instant of execution; every
    /// such history is linearizable by construction, so the checker must accept it (no
    /// false alarms, cover rule included).
    #[test]
    fn histories_of_the_real_lock_table_pass() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        for _round in 0..30 {
            let mut table = LockTable::new(LockTableConfig::default(), Epoch(1));
            let mut h: Vec<LockOp> = Vec::new();
            for i in 0..24u64 {
                let at = 10 * i + 5;
                let (lo, hi) = (at - next(6), at + next(6));
                let s = SessionId(1 + next(3));
                let name = ["/p", "/q", "/p/x", "/p/x/y", "/p/z"][next(5) as usize].to_string();
                let now = tenure_core::Instant(at);
                let (input, out) = match next(3) {
                    0 => {
                        let mode = if next(2) == 0 { S } else { X };
                        let r = table.acquire(
                            &Acquire {
                                session: s,
                                request_id: RequestId(i),
                                name: name.clone(),
                                mode,
                                wait: Wait::Try,
                                lock_delay: None,
                            },
                            now,
                        );
                        let out = match r {
                            Ok(Acquired::Granted(g)) => LockOutput::Granted { token: g.token },
                            Err(AcquireError::WouldBlock | AcquireError::AlreadyHeld { .. }) => {
                                LockOutput::Refused
                            }
                            other => panic!("unexpected {other:?}"),
                        };
                        (
                            LockInput::Acquire {
                                name,
                                session: s,
                                mode,
                            },
                            out,
                        )
                    }
                    1 => {
                        let out = match table.release(&name, s, now) {
                            Ok(_) => LockOutput::Released,
                            Err(_) => LockOutput::NotHeld,
                        };
                        (LockInput::Release { name, session: s }, out)
                    }
                    _ => {
                        let seen = table
                            .holders(&name)
                            .unwrap()
                            .into_iter()
                            .map(|h| (h.session, h.mode))
                            .collect();
                        (LockInput::Holders { name }, LockOutput::Holders(seen))
                    }
                };
                h.push(op(s.0, input, lo, Some((hi, out))));
            }
            let v = check(&LockModel::default(), &h, &Limits::default()).unwrap();
            assert_eq!(v, Verdict::Linearizable, "{h:#?}");
            // The table ships between replicas: it survives a serde round trip.
            let json = serde_json::to_string(&table).unwrap();
            assert_eq!(serde_json::from_str::<LockTable>(&json).unwrap(), table);
        }
    }
}
