//! The context a state machine handler runs in: local time, configuration, the device's
//! deterministic random generator, and the output queue.

use crate::config::DeviceConfig;
use crate::ids::DeviceId;
use crate::io::Output;
use crate::io::observation::Observation;
use crate::io::persist::PersistOp;
use crate::msg::Msg;
use crate::rng::Rng;
use crate::time::Instant;
use std::collections::BTreeMap;

/// Handler context.
pub struct Ctx<'a> {
    /// Local time.
    pub now: Instant,
    /// Device configuration.
    pub cfg: &'a DeviceConfig,
    /// The device's random generator.
    pub rng: &'a mut Rng,
    /// Outputs produced so far (in order).
    pub out: &'a mut Vec<Output>,
    /// When each other device was last heard from (local clock), for outside policies.
    pub heard: &'a BTreeMap<DeviceId, Instant>,
    /// Each store's manager as this device's lookup node last saw it published (DESIGN
    /// §3: chunks in the no-lease loop try it first).
    pub hints: &'a BTreeMap<crate::ids::StoreId, DeviceId>,
    /// When this device first saw each recent epoch of each store (its chunks' epoch
    /// changes; [`crate::session::EpochsSeen`]).
    pub epochs: &'a BTreeMap<crate::ids::StoreId, crate::session::EpochsSeen>,
    /// Every peer reads manifests with inline values ([`crate::generation`]): a small
    /// put may be written as one change. False while a peer of an older build is in the
    /// cluster (a rolling upgrade).
    pub inline_values: bool,
    /// Every peer reads vote summaries and commit patches ([`crate::generation`]): an
    /// epoch transition may ship what differs instead of whole tables. False while a
    /// peer of an older build is in the cluster.
    pub diff_transitions: bool,
    /// Whether every peer reads the messages that bring a rejoining chunk up to date by
    /// a patch ([`crate::msg::ToManager::Holds`], [`crate::msg::ToChunk::ReconcilePatch`]).
    pub rejoin_patches: bool,
}

impl Ctx<'_> {
    /// This device.
    pub fn me(&self) -> DeviceId {
        self.cfg.id
    }
    /// Whether `d` has fallen silent: this device heard from it before, but not for
    /// [`crate::config::Timing::silence`]. A device never heard from is not silent (at a
    /// cluster's start nobody has been heard yet), nor is this device. Only a hint for
    /// whom to ask and how long to wait: safety never depends on it.
    pub fn silent(&self, d: DeviceId) -> bool {
        self.silent_at(d).is_some_and(|t| self.now >= t)
    }
    /// When `d` falls silent if nothing more is heard from it ([`Self::silent`]); none
    /// for this device and for a device never heard from.
    pub fn silent_at(&self, d: DeviceId) -> Option<Instant> {
        if d == self.cfg.id {
            return None;
        }
        (self.heard.get(&d)).map(|t| *t + self.cfg.timing.silence())
    }
    /// Queue a message.
    pub fn send(&mut self, to: DeviceId, msg: Msg) {
        self.out.push(Output::Send { to, msg });
    }
    /// Queue a durable change (durable before any later send of the batch).
    pub fn persist(&mut self, op: PersistOp) {
        self.out.push(Output::Persist(op));
    }
    /// Queue an observation.
    pub fn observe(&mut self, o: Observation) {
        self.out.push(Output::Observe(o));
    }
}
