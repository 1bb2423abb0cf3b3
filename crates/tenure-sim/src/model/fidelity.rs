//! The fidelity check of the snapshot/rebuild scheme: long-lived devices run beside the
//! rebuilt ones, and their outputs and views must match.

use super::{N_DEVICES, PalladioModel, dev_id, idx};
use stateright::Model;
use std::collections::BTreeMap;
use tenure_core::msg::{Msg, ToManager};
use tenure_core::{Device, DeviceId, Input, Output};

impl PalladioModel {
    /// Fidelity check of the snapshot/rebuild scheme: a pseudo-random walk of `steps`
    /// model actions from every initial state, with long-lived devices run beside the
    /// rebuilt ones. After every input the outputs must match (`SetTimer` aside, and a
    /// `help`'s destination, which the model chooses) and so must the chunk and manager
    /// views and `poll_timeout`. Returns the number of inputs compared.
    pub fn fidelity_walk(&self, steps: usize, seed: u64) -> Result<usize, String> {
        let mut compared = 0;
        let mut rng = seed | 1;
        for init in &self.init {
            let mut mirror = Mirror {
                devs: (0..N_DEVICES).map(|_| None).collect(),
                err: None,
                compared: 0,
                tx_map: BTreeMap::new(),
            };
            // Long-lived twins of the initial devices: boot them where the model did, then
            // replay the state into them (their first inputs are compared from there on).
            for i in 0..N_DEVICES {
                if init.devices[i].up {
                    mirror.devs[i] = Some(self.rebuild(init, dev_id(i)));
                }
            }
            let mut s = init.clone();
            for _ in 0..steps {
                let mut acts = Vec::new();
                self.actions(&s, &mut acts);
                if acts.is_empty() {
                    break;
                }
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let a = acts[(rng % acts.len() as u64) as usize].clone();
                s = self.apply(&s, a, &mut Some(&mut mirror)).expect("step");
                if let Some(e) = mirror.err.take() {
                    return Err(e);
                }
            }
            compared += mirror.compared;
        }
        Ok(compared)
    }
}

/// Long-lived devices run beside the rebuilt ones ([`PalladioModel::fidelity_walk`]).
pub(super) struct Mirror {
    /// The long-lived devices (`None` while down).
    pub(super) devs: Vec<Option<Device>>,
    /// The first divergence found.
    pub(super) err: Option<String>,
    /// Inputs compared so far.
    pub(super) compared: usize,
    /// Transaction nonces: the model's (rebuilt devices') → the long-lived devices'.
    tx_map: BTreeMap<u64, u64>,
}

/// The transaction nonces a message carries: its transaction's, then the stamps (the
/// transaction that installed a table) of the states it carries or names. (If the core
/// adds a nonce to another message, the fidelity walk reports a divergence until it is
/// listed here.)
fn nonces(msg: &mut Msg) -> Vec<&mut u64> {
    use tenure_core::msg::{MgrMsg, ToChunk};
    fn stamp(s: &mut Option<tenure_core::safetalk::Stamp>) -> Option<&mut u64> {
        s.as_mut().map(|s| &mut s.tx)
    }
    match msg {
        Msg::ToChunk { msg, .. } => match msg {
            ToChunk::EpochTransition { tx, data, .. } => {
                let d = data.as_mut().and_then(|d| stamp(&mut d.stamp));
                [Some(tx)].into_iter().chain([d]).flatten().collect()
            }
            ToChunk::Commit { tx, data, .. } => [Some(tx), stamp(&mut data.stamp)]
                .into_iter()
                .flatten()
                .collect(),
            ToChunk::CommitPatch(c) => vec![&mut c.tx, &mut c.patch.from.tx],
            ToChunk::ReconcilePatch(r) => [Some(&mut r.tx), Some(&mut r.patch.from.tx)]
                .into_iter()
                .chain([stamp(&mut r.stamp)])
                .flatten()
                .collect(),
            ToChunk::Abort { tx, .. } => vec![tx],
            ToChunk::SendState(s) => vec![&mut s.tx],
            _ => Vec::new(),
        },
        Msg::ToManager { msg, .. } => match msg {
            ToManager::Vote { tx, data, .. } => [Some(tx), stamp(&mut data.stamp)]
                .into_iter()
                .flatten()
                .collect(),
            ToManager::VoteSummary(v) => vec![&mut v.tx, &mut v.summary.stamp.tx],
            ToManager::Holds(h) => vec![&mut h.stamp.tx],
            ToManager::VoteAbort { tx, .. } => vec![tx],
            _ => Vec::new(),
        },
        Msg::Mgr {
            msg: MgrMsg::Handoff { tx, data, .. },
            ..
        } => [Some(tx), stamp(&mut data.stamp)]
            .into_iter()
            .flatten()
            .collect(),
        Msg::Mgr {
            msg:
                MgrMsg::HandoffReady { tx, .. }
                | MgrMsg::HandoffVote { tx, .. }
                | MgrMsg::HandoffCommit { tx, .. }
                | MgrMsg::HandoffAbort { tx, .. },
            ..
        } => vec![tx],
        _ => Vec::new(),
    }
}

impl Mirror {
    /// A message for a long-lived device, with the model's nonces replaced by its own.
    pub(super) fn translate(&self, input: Input) -> Input {
        let Input::Message { from, mut msg } = input else {
            return input;
        };
        for tx in nonces(&mut msg) {
            if let Some(live) = self.tx_map.get(tx) {
                *tx = *live;
            }
        }
        Input::Message { from, msg }
    }

    /// Pair up the nonces of matching sends.
    fn learn(&mut self, out: &[Output], live_out: &[Output]) {
        let sends = |o: &[Output]| -> Vec<Msg> {
            o.iter()
                .filter_map(|o| match o {
                    Output::Send { msg, .. } => Some(msg.clone()),
                    _ => None,
                })
                .collect()
        };
        for (mut a, mut b) in sends(out).into_iter().zip(sends(live_out)) {
            for (x, y) in nonces(&mut a).into_iter().zip(nonces(&mut b)) {
                self.tx_map.entry(*x).or_insert(*y);
            }
        }
    }

    /// `tx: 123` → `tx: _` (nonces differ between the two worlds by construction).
    fn blank_tx(s: &str) -> String {
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(i) = rest.find("tx: ") {
            out.push_str(&rest[..i + 4]);
            rest = &rest[i + 4..];
            let digits = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            if digits > 0 {
                out.push('_');
                rest = &rest[digits..];
            }
        }
        out.push_str(rest);
        out
    }

    /// Outputs as compared: timers left out, nonces and a `help`'s destination blanked.
    fn normalize(out: &[Output]) -> Vec<String> {
        out.iter()
            .filter(|o| !matches!(o, Output::SetTimer(_)))
            .map(|o| match o {
                Output::Send {
                    msg:
                        m @ Msg::ToManager {
                            msg: ToManager::Help { .. },
                            ..
                        },
                    ..
                } => Self::blank_tx(&format!("help {m:?}")),
                o => Self::blank_tx(&format!("{o:?}")),
            })
            .collect()
    }

    /// Compare the rebuilt device's outputs and views with the long-lived one's.
    pub(super) fn compare(
        &mut self,
        d: DeviceId,
        rebuilt: &Device,
        out: &[Output],
        live_out: &[Output],
    ) {
        self.compared += 1;
        self.learn(out, live_out);
        let live = self.devs[idx(d)].as_ref().expect("mirror device up");
        let same = Self::normalize(out) == Self::normalize(live_out)
            && rebuilt.chunk_views() == live.chunk_views()
            && rebuilt.manager_views() == live.manager_views()
            && rebuilt.poll_timeout() == live.poll_timeout();
        if !same && self.err.is_none() {
            self.err = Some(format!(
                "{d}: rebuilt device diverged\nrebuilt: {:?}\nlive:    {:?}",
                Self::normalize(out),
                Self::normalize(live_out)
            ));
        }
    }
}
