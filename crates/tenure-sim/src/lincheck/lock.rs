//! The sequential specification of the lock service ([`LockModel`]): shared and
//! exclusive locks on path names, a lock covering its descendants, fencing tokens
//! increasing per name; and [`check_locks`], which checks a lock history one group of
//! covering names at a time.

use super::indexed::{IndexedInput, IndexedLockModel, Names, PerNameIndexed};
use super::{HistoryError, Limits, Model, Operation, Verdict, check, partitions};
use std::collections::BTreeMap;
use std::rc::Rc;
use tenure_core::lockctl::{FencingToken, LockMode, SessionId};

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

/// The name an operation is on.
pub(super) fn input_name(i: &LockInput) -> &str {
    match i {
        LockInput::Acquire { name, .. }
        | LockInput::Release { name, .. }
        | LockInput::Holders { name } => name,
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
/// ([`super::indexed::PerNameIndexed`]), so that nesting never checks less than names alone would. A
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
        // The search runs on the same specification with the group's names numbered
        // (`indexed`): a state is then two short vectors of numbers.
        let names = Names::new(part.iter().map(|i| &history[*i].input));
        let ops: Vec<Operation<IndexedInput, LockOutput>> = (part.iter())
            .map(|i| {
                let o = &history[*i];
                Operation {
                    client: o.client,
                    input: IndexedInput {
                        name: names.number(input_name(&o.input)),
                        input: o.input.clone(),
                    },
                    invoke: o.invoke,
                    response: o.response.clone(),
                }
            })
            .collect();
        let initial = IndexedLockModel::new(Rc::new(names));
        match check(&initial, &ops, limits)? {
            Verdict::Linearizable => out.ops_linearizable += ops.len() as u64,
            Verdict::NotLinearizable(c) => {
                out.verdict = Verdict::NotLinearizable(c);
                return Ok(out);
            }
            Verdict::Unknown { steps } => {
                out.groups_unknown += 1;
                match check(&PerNameIndexed(initial), &ops, limits)? {
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
