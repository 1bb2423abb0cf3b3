//! [`LockModel`](super::LockModel) for the search: the same specification over one group
//! of covering names, with the names numbered and which pairs cover one another worked
//! out once. A state is two short sorted vectors of numbers, so the search's clone, hash
//! and compare of a state per step copy no strings and walk no trees (with names as
//! strings in nested maps they were most of the simulator's time).

use super::Model;
use super::lock::{LockInput, LockOutput, input_name, names_overlap};
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::rc::Rc;
use tenure_core::lockctl::{FencingToken, LockMode, SessionId};

/// The names of one history, numbered in order of first use.
#[derive(Debug)]
pub(super) struct Names {
    /// The names by number.
    names: Vec<String>,
    /// The numbers by name.
    numbers: HashMap<String, u32>,
    /// `covers[a * n + b]`: name `a` and name `b` cover one another (or are the same).
    covers: Vec<bool>,
}

impl Names {
    /// Numbers `history`'s names.
    pub(super) fn new<'a>(inputs: impl Iterator<Item = &'a LockInput>) -> Self {
        let mut names: Vec<String> = Vec::new();
        let mut numbers: HashMap<String, u32> = HashMap::new();
        for i in inputs {
            let name = input_name(i);
            if !numbers.contains_key(name) {
                numbers.insert(name.to_owned(), names.len() as u32);
                names.push(name.to_owned());
            }
        }
        let n = names.len();
        let mut covers = vec![false; n * n];
        for a in 0..n {
            for b in 0..n {
                covers[a * n + b] = names_overlap(&names[a], &names[b]);
            }
        }
        Names {
            names,
            numbers,
            covers,
        }
    }

    /// The number of `name` (one of the history's).
    pub(super) fn number(&self, name: &str) -> u32 {
        self.numbers[name]
    }

    fn covers(&self, a: u32, b: u32) -> bool {
        self.covers[a as usize * self.names.len() + b as usize]
    }
}

/// An operation's input with its name's number (shown as the input alone).
#[derive(Clone)]
pub(super) struct IndexedInput {
    pub(super) name: u32,
    pub(super) input: LockInput,
}

impl fmt::Debug for IndexedInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.input.fmt(f)
    }
}

/// The state of [`super::LockModel`] over numbered names: the holders, by (name,
/// session), and each name's largest token granted so far, by name. Equal and hashed by
/// these alone (`names` is the same for every state of a search).
#[derive(Clone)]
pub(super) struct IndexedLockModel {
    names: Rc<Names>,
    holders: Vec<(u32, SessionId, LockMode)>,
    tokens: Vec<(u32, FencingToken)>,
}

impl PartialEq for IndexedLockModel {
    fn eq(&self, other: &Self) -> bool {
        self.holders == other.holders && self.tokens == other.tokens
    }
}

impl Eq for IndexedLockModel {}

impl Hash for IndexedLockModel {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_usize(self.holders.len());
        for (n, s, m) in &self.holders {
            state.write_u64(u64::from(*n) << 1 | u64::from(*m == LockMode::Exclusive));
            state.write_u64(s.0);
        }
        self.tokens.hash(state);
    }
}

impl fmt::Debug for IndexedLockModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |n: &u32| &self.names.names[*n as usize];
        f.debug_struct("LockModel")
            .field(
                "holders",
                &(self.holders.iter())
                    .map(|(n, s, m)| (name(n), s, m))
                    .collect::<Vec<_>>(),
            )
            .field(
                "tokens",
                &(self.tokens.iter())
                    .map(|(n, t)| (name(n), t))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl IndexedLockModel {
    /// The empty state: nothing held, no token granted.
    pub(super) fn new(names: Rc<Names>) -> Self {
        IndexedLockModel {
            names,
            holders: Vec::new(),
            tokens: Vec::new(),
        }
    }

    fn holder(&self, name: u32, session: SessionId) -> Result<usize, usize> {
        (self.holders).binary_search_by(|(n, s, _)| (*n, *s).cmp(&(name, session)))
    }

    /// As [`super::LockModel`]'s: `session` does not hold the name already, and no other
    /// session holds a lock that conflicts with it.
    fn grantable(&self, name: u32, session: SessionId, mode: LockMode) -> bool {
        self.holder(name, session).is_err()
            && self.holders.iter().all(|(n, s, m)| {
                *s == session
                    || !self.names.covers(*n, name)
                    || (*m == LockMode::Shared && mode == LockMode::Shared)
            })
    }

    fn token(&self, name: u32) -> Option<FencingToken> {
        let i = self.tokens.binary_search_by_key(&name, |(n, _)| *n).ok()?;
        Some(self.tokens[i].1)
    }

    fn grant(&self, name: u32, session: SessionId, mode: LockMode) -> Self {
        let mut m = self.clone();
        let at = self.holder(name, session).unwrap_or_else(|i| i);
        m.holders.insert(at, (name, session, mode));
        m
    }

    fn set_token(&mut self, name: u32, token: FencingToken) {
        match self.tokens.binary_search_by_key(&name, |(n, _)| *n) {
            Ok(i) => self.tokens[i].1 = token,
            Err(i) => self.tokens.insert(i, (name, token)),
        }
    }

    fn release(&self, name: u32, session: SessionId) -> Option<Self> {
        let at = self.holder(name, session).ok()?;
        let mut m = self.clone();
        m.holders.remove(at);
        Some(m)
    }
}

impl Model for IndexedLockModel {
    type Input = IndexedInput;
    type Output = LockOutput;

    fn step(&self, input: &IndexedInput, output: &LockOutput) -> Option<Self> {
        let name = input.name;
        match (&input.input, output) {
            (LockInput::Acquire { session, mode, .. }, LockOutput::Granted { token }) => {
                let fresh = self.token(name).is_none_or(|t| *token > t);
                (fresh && self.grantable(name, *session, *mode)).then(|| {
                    let mut m = self.grant(name, *session, *mode);
                    m.set_token(name, *token);
                    m
                })
            }
            (LockInput::Acquire { session, mode, .. }, LockOutput::Refused) => {
                (!self.grantable(name, *session, *mode)).then(|| self.clone())
            }
            (LockInput::Acquire { .. }, LockOutput::Failed) => Some(self.clone()),
            (LockInput::Release { session, .. }, LockOutput::Released) => {
                self.release(name, *session)
            }
            (LockInput::Release { session, .. }, LockOutput::NotHeld) => {
                self.holder(name, *session).is_err().then(|| self.clone())
            }
            (LockInput::Holders { .. }, LockOutput::Holders(seen)) => {
                let now = (self.holders.iter())
                    .filter(|(n, _, _)| *n == name)
                    .map(|(_, s, m)| (*s, *m));
                now.eq(seen.iter().copied()).then(|| self.clone())
            }
            _ => None,
        }
    }

    fn step_unknown(&self, input: &IndexedInput) -> Vec<Self> {
        let name = input.name;
        match &input.input {
            // Granted with a token never seen: it exceeded the name's last one, which
            // stays as a (weaker) lower bound for later grants.
            LockInput::Acquire { session, mode, .. } => (self.grantable(name, *session, *mode))
                .then(|| self.grant(name, *session, *mode))
                .into_iter()
                .collect(),
            LockInput::Release { session, .. } => {
                self.release(name, *session).into_iter().collect()
            }
            LockInput::Holders { .. } => vec![],
        }
    }

    fn partition_key(input: &IndexedInput) -> Option<String> {
        Some(input_name(&input.input).to_owned())
    }

    fn keys_related(a: &str, b: &str) -> bool {
        names_overlap(a, b)
    }
}

/// [`IndexedLockModel`] with every name checked alone, the hierarchy ignored (each
/// partition holds one name, so no other name's holders are in its states): the fallback for a
/// group of covering names whose joint search hits the step bound. The projection of a
/// history on one name is linearizable under this model whenever the history is under
/// [`super::LockModel`] (a grant legal along the path is legal on its name alone, and a release
/// or a read sees the same holders of the name), so a failure here is a real one —
/// provided the history has no `Refused` output, which only a conflict on a covering name
/// may justify (the simulator's clients record a refusal as `Failed`).
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct PerNameIndexed(pub(super) IndexedLockModel);

impl fmt::Debug for PerNameIndexed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Model for PerNameIndexed {
    type Input = IndexedInput;
    type Output = LockOutput;

    fn step(&self, input: &IndexedInput, output: &LockOutput) -> Option<Self> {
        self.0.step(input, output).map(PerNameIndexed)
    }

    fn step_unknown(&self, input: &IndexedInput) -> Vec<Self> {
        (self.0.step_unknown(input).into_iter())
            .map(PerNameIndexed)
            .collect()
    }

    fn partition_key(input: &IndexedInput) -> Option<String> {
        IndexedLockModel::partition_key(input)
    }
}

#[cfg(test)]
mod tests {
    use super::super::LockModel;
    use super::super::lock::NameState;
    use super::*;
    use tenure_core::Epoch;

    /// The numbered state as the plain specification's.
    fn plain(m: &IndexedLockModel) -> LockModel {
        let mut out = LockModel::default();
        for (n, s, mode) in &m.holders {
            let name = m.names.names[*n as usize].clone();
            out.names.entry(name).or_default().holders.insert(*s, *mode);
        }
        for (n, t) in &m.tokens {
            let name = m.names.names[*n as usize].clone();
            out.names.entry(name).or_default().last_token = Some(*t);
        }
        out.names.retain(|_, st| *st != NameState::default());
        out
    }

    // Every step of the numbered model is the plain specification's (the same answer,
    // the same next state), on random walks over covering names with every input and
    // output, known and unknown.
    #[test]
    fn numbered_steps_match_the_lock_model() {
        let mut rng = tenure_core::rng::Rng::new(41);
        let pool = ["/a", "/a/b", "/a/b/c", "/a/d", "/e", "/ab"];
        let inputs: Vec<LockInput> = (0..400)
            .map(|_| {
                let name = pool[rng.below(pool.len() as u64) as usize].to_string();
                let session = SessionId(1 + rng.below(3));
                match rng.below(3) {
                    0 => LockInput::Release { name, session },
                    1 => LockInput::Holders { name },
                    _ => LockInput::Acquire {
                        name,
                        session,
                        mode: if rng.below(2) == 0 {
                            LockMode::Shared
                        } else {
                            LockMode::Exclusive
                        },
                    },
                }
            })
            .collect();
        let names = Rc::new(Names::new(inputs.iter()));
        let mut a = LockModel::default();
        let mut b = IndexedLockModel::new(names.clone());
        let (mut granted, mut refused) = (0, 0);
        for (i, input) in inputs.iter().enumerate() {
            let ix = IndexedInput {
                name: names.number(input_name(input)),
                input: input.clone(),
            };
            let holders_now: Vec<_> = a
                .names
                .get(input_name(input))
                .map(|st| st.holders.iter().map(|(s, m)| (*s, *m)).collect())
                .unwrap_or_default();
            let token = FencingToken {
                epoch: Epoch(1),
                seq: 1 + rng.below(i as u64 + 2),
            };
            let outputs = [
                LockOutput::Granted { token },
                LockOutput::Refused,
                LockOutput::Failed,
                LockOutput::Released,
                LockOutput::NotHeld,
                LockOutput::Holders(holders_now),
                LockOutput::Holders(vec![(SessionId(1), LockMode::Shared)]),
            ];
            for out in &outputs {
                let (pa, pb) = (a.step(input, out), b.step(&ix, out));
                assert_eq!(pa, pb.as_ref().map(plain), "{input:?} -> {out:?} at {a:?}");
            }
            let ua = a.step_unknown(input);
            let ub: Vec<LockModel> = b.step_unknown(&ix).iter().map(plain).collect();
            assert_eq!(ua, ub, "{input:?} unknown at {a:?}");
            // Walk on by one of the answers the specification allows.
            let allowed: Vec<usize> = (0..outputs.len())
                .filter(|k| a.step(input, &outputs[*k]).is_some())
                .collect();
            if allowed.is_empty() {
                continue;
            }
            let k = allowed[rng.below(allowed.len() as u64) as usize];
            granted += usize::from(k == 0);
            refused += usize::from(k == 1);
            a = a.step(input, &outputs[k]).expect("allowed");
            b = b.step(&ix, &outputs[k]).expect("allowed");
            assert_eq!(plain(&b), a);
        }
        assert!(
            granted > 20 && refused > 20,
            "{granted} grants, {refused} refusals"
        );
    }
}
