//! The device: every protocol state machine of one node behind one entry point.
//! (Implementation in progress; the public surface below is stable.)

use crate::config::DeviceConfig;
use crate::ids::{ChunkId, DeviceId, StoreId};
use crate::io::{DevicePersist, Input, Output};
use crate::layout::{ChunkView, ManagerView};
use crate::time::Instant;

/// One device's protocol core.
pub struct Device {
    cfg: DeviceConfig,
    disk: DevicePersist,
}

impl Device {
    /// Boot a device from its persistent state (empty on first boot: bootstrap).
    pub fn new(
        cfg: DeviceConfig,
        disk: DevicePersist,
        _now: Instant,
        _rng_seed: u64,
    ) -> (Device, Vec<Output>) {
        (Device { cfg, disk }, Vec::new())
    }
    /// Handle one input at local time `now`.
    pub fn handle(&mut self, _now: Instant, _input: Input) -> Vec<Output> {
        Vec::new()
    }
    /// Earliest timer deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    /// This device.
    pub fn id(&self) -> DeviceId {
        self.cfg.id
    }
    /// Configuration.
    pub fn config(&self) -> &DeviceConfig {
        &self.cfg
    }
    /// Current persistent state.
    pub fn persistent(&self) -> DevicePersist {
        self.disk.clone()
    }
    /// View of one chunk.
    pub fn chunk_view(&self, _id: ChunkId) -> Option<ChunkView> {
        None
    }
    /// Views of all chunks.
    pub fn chunk_views(&self) -> Vec<ChunkView> {
        Vec::new()
    }
    /// View of this device's manager role for a store (None if it has none).
    pub fn manager_view(&self, _store: StoreId) -> Option<ManagerView> {
        None
    }
    /// Views of all manager roles that are not in the `None` state.
    pub fn manager_views(&self) -> Vec<ManagerView> {
        Vec::new()
    }
}
