//! The model's nondeterministic steps: which actions a state enables, the properties
//! checked on every state, and what each action does.

use super::fidelity::Mirror;
use super::{Action, Dest, N_DEVICES, PalladioModel, STORE, State, dev_id, idx};
use stateright::{Model, Property};
use tenure_core::io::Request;
use tenure_core::layout::MgrState;
use tenure_core::{ClientId, Input};

impl Model for PalladioModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        self.init.clone()
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let can_glitch = s.glitches < self.cfg.max_glitches;
        let first = self.first_deliverable(s);
        for (i, e) in s.net.iter().enumerate() {
            if Some(i) == first || can_glitch {
                for to in self.receivers(s, e) {
                    actions.push(Action::Deliver {
                        msg: i,
                        from: e.from,
                        to,
                    });
                }
            }
            if can_glitch {
                actions.push(Action::Drop { msg: i });
            }
        }
        if s.earliest_deadline().is_some() && (first.is_none() || can_glitch) {
            actions.push(Action::Advance);
        }
        for (i, d) in s.devices.iter().enumerate() {
            let id = dev_id(i);
            if d.up && s.crashes < self.cfg.max_crashes && self.cfg.crashable.contains(&id) {
                actions.push(Action::Crash(id));
            }
            if !d.up {
                actions.push(Action::Restart(id));
            }
        }
        if s.writes < self.cfg.max_writes {
            // A write at a device that is not the manager is only answered `NotManager`.
            for (i, d) in s.devices.iter().enumerate() {
                if d.up
                    && d.manager
                        .as_ref()
                        .is_some_and(|m| m.state() == MgrState::Manager)
                {
                    actions.push(Action::Write(dev_id(i)));
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        self.apply(last, action, &mut None)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("at most one manager per (store, epoch)", |_, s: &State| {
                PalladioModel::one_manager_per_epoch(s)
            }),
            Property::always("manager epochs strictly increase", |_, s: &State| {
                !s.epoch_regressed
            }),
            Property::always(
                "a chunk serves only in regular lease for its epoch",
                |_, s: &State| s.bad_serve.is_none(),
            ),
            Property::sometimes(
                "a manager is regenerated after the first crashed",
                |_, s: &State| s.regenerated,
            ),
            Property::sometimes("a chunk serves a write", |_, s: &State| s.served),
            Property::sometimes("a store gets a manager", |_, s: &State| {
                !s.became.is_empty()
            }),
        ]
    }
}

impl PalladioModel {
    /// The state after `action`, if it is enabled (with the mirror, the long-lived
    /// devices take the same inputs).
    pub(super) fn apply(
        &self,
        last: &State,
        action: Action,
        mirror: &mut Option<&mut Mirror>,
    ) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Deliver { msg, to, .. } => {
                if self.first_deliverable(&s) != Some(msg) {
                    s.glitches += 1;
                }
                let e = s.net.remove(msg);
                self.step(
                    &mut s,
                    to,
                    Input::Message {
                        from: e.from,
                        msg: e.msg,
                    },
                    mirror,
                );
            }
            Action::Drop { msg } => {
                s.net.remove(msg);
                s.glitches += 1;
            }
            Action::Advance => {
                let t = s.earliest_deadline()?;
                if self.first_deliverable(&s).is_some() {
                    s.glitches += 1;
                }
                s.now = s.now.max(t);
                for i in 0..N_DEVICES {
                    if s.devices[i].up && s.devices[i].deadline.is_some_and(|x| x <= t) {
                        self.step(&mut s, dev_id(i), Input::Tick, mirror);
                    }
                }
            }
            Action::Crash(d) => {
                let snap = &mut s.devices[idx(d)];
                snap.up = false;
                snap.chunks.clear();
                snap.manager = None;
                snap.deadline = None;
                snap.reseal();
                s.net.retain(|e| e.to != Dest::Device(d));
                s.crashes += 1;
                if let Some(m) = mirror {
                    m.devs[idx(d)] = None;
                }
                if s.first_mgr == Some(d) {
                    s.first_mgr_crashed = true;
                }
            }
            Action::Restart(d) => self.boot(&mut s, d, mirror),
            Action::Write(d) => {
                s.writes += 1;
                let n = s.writes as u64;
                let req = Request::Write {
                    store: STORE,
                    key: 1,
                    value: n,
                };
                self.step(
                    &mut s,
                    d,
                    Input::Request {
                        client: ClientId(0),
                        req_id: n,
                        req,
                    },
                    mirror,
                );
            }
        }
        Some(s.seal())
    }
}
