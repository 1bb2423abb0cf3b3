//! One crash of a store's manager in a calm run, measured: the messages about the store
//! and the time until a new manager serves it (Palladio regeneration, seed 000 §4.2, with
//! the reconciliation merge of DESIGN §3). The lab sets it beside Menasce's logical
//! component recovery (seed 004 §4.1, §8).

use super::World;
use serde::Serialize;
use std::collections::BTreeMap;
use tenure_core::msg::Msg;
use tenure_core::{DeviceId, StoreId};

/// The store whose manager crashes.
const STORE: StoreId = StoreId(0);

/// What one manager crash cost.
#[derive(Clone, Debug, Serialize)]
pub struct ManagerCrash {
    /// The store.
    pub store: StoreId,
    /// The crashed manager's device.
    pub crashed: DeviceId,
    /// Chunks of the store when it crashed.
    pub chunks: u64,
    /// When it crashed (µs since the start).
    pub at_us: u64,
    /// When a new manager served the store — quorum of its chunks in regular lease for
    /// its epoch (µs since the start).
    pub served_at_us: Option<u64>,
    /// The new manager.
    pub new_manager: Option<DeviceId>,
    /// Messages between devices about the store (seed 000 manager ↔ chunk and manager ↔
    /// manager messages) from the crash until it was served.
    pub messages: u64,
    /// The same, by message.
    pub by_kind: BTreeMap<String, u64>,
}

/// The variant name of a message's `Debug` form.
fn kind(debug: &str) -> String {
    let end = debug.find([' ', '{', '(']).unwrap_or(debug.len());
    debug[..end].to_string()
}

impl World {
    /// Crash the device managing [`STORE`] now (nothing happens if none does).
    pub(super) fn crash_manager(&mut self) {
        let found = self.nodes.iter().find_map(|(d, n)| {
            let dev = n.device.as_ref()?;
            let m = (dev.manager_views().into_iter())
                .find(|m| m.store == STORE && m.state == tenure_core::layout::MgrState::Manager)?;
            Some((*d, m.metadata.chunks.len() as u64))
        });
        let Some((d, chunks)) = found else {
            return;
        };
        self.crash(d, false);
        self.report.manager_crash = Some(ManagerCrash {
            store: STORE,
            crashed: d,
            chunks,
            at_us: self.since_start(),
            served_at_us: None,
            new_manager: None,
            messages: 0,
            by_kind: BTreeMap::new(),
        });
    }

    /// Count a message about the store while it has no new manager.
    pub(super) fn count_manager_crash(&mut self, from: DeviceId, to: DeviceId, msg: &Msg) {
        let Some(mc) = self.report.manager_crash.as_mut() else {
            return;
        };
        if mc.served_at_us.is_some() || from == to {
            return;
        }
        let name = match msg {
            Msg::ToChunk { store, msg, .. } if *store == mc.store => kind(&format!("{msg:?}")),
            Msg::ToManager { store, msg, .. } if *store == mc.store => kind(&format!("{msg:?}")),
            Msg::Mgr { store, msg } if *store == mc.store => kind(&format!("{msg:?}")),
            _ => return,
        };
        mc.messages += 1;
        *mc.by_kind.entry(name).or_default() += 1;
    }

    /// After every event while the store waits: is it served again?
    pub(super) fn probe_manager_crash(&mut self) {
        let waiting =
            (self.report.manager_crash.as_ref()).is_some_and(|m| m.served_at_us.is_none());
        if !waiting {
            return;
        }
        let served = self.managed().get(&STORE).is_some_and(|v| v.is_ok());
        if !served {
            return;
        }
        let new_manager = self.nodes.iter().find_map(|(d, n)| {
            let dev = n.device.as_ref()?;
            (dev.manager_views().into_iter())
                .any(|m| m.store == STORE && m.state == tenure_core::layout::MgrState::Manager)
                .then_some(*d)
        });
        let now = self.since_start();
        let mc = self.report.manager_crash.as_mut().expect("waiting");
        mc.served_at_us = Some(now);
        mc.new_manager = new_manager;
    }
}
