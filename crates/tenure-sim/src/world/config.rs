//! What a run is asked to do: its configuration ([`SimConfig`], checked by
//! [`SimConfig::validate`]), the world it simulates ([`WorldKind`]), and the messages and
//! records a run can keep for a fuzzing corpus ([`Captured`]).

use crate::knobs::{DiskModel, LockPaths, Pipelining};
use serde::Serialize;
use std::collections::BTreeMap;
use tenure_core::PlantedBugs;

/// Invalid simulator configuration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// Fewer than one device.
    #[error("a cluster needs at least one device")]
    NoDevices,
    /// No stores.
    #[error("a cluster needs at least one store")]
    NoStores,
    /// Replication factor out of range.
    #[error("replication {replication} must be between 1 and the number of devices ({devices})")]
    Replication {
        /// Requested replication.
        replication: usize,
        /// Devices.
        devices: u64,
    },
    /// The liveness phase must have room to converge.
    #[error("the liveness phase must last at least one second")]
    LivenessTooShort,
}

/// What a run is asked to do.
#[derive(Clone, Debug, Serialize)]
pub struct SimConfig {
    /// The seed.
    pub seed: u64,
    /// Devices.
    pub devices: u64,
    /// Stores.
    pub stores: u32,
    /// Chunks per store at bootstrap.
    pub replication: usize,
    /// Length of the safety phase (µs of simulated time).
    pub safety_us: u64,
    /// Bound on the liveness phase (µs).
    pub liveness_us: u64,
    /// Planted bugs.
    pub planted: PlantedBugs,
    /// A chunk persists its whole record after this many ACCEPT deltas in a row
    /// ([`DeviceConfig::whole_record_every`]; the server runs with `u32::MAX`).
    ///
    /// [`DeviceConfig::whole_record_every`]: tenure_core::DeviceConfig::whole_record_every
    pub whole_record_every: u32,
    /// Inject faults (nemesis, lossy network, operator commands, client pauses and
    /// crashes) in the safety phase; without them a run measures the calm path.
    pub faults: bool,
    /// Run the register-write workload beside the lock clients.
    pub writes: bool,
    /// Which lock clients pipeline requests on their session stream.
    pub pipelining: Pipelining,
    /// Whether lock names are paths that cover one another, or siblings.
    pub lock_paths: LockPaths,
    /// Whether disks are drawn by the seed (slow, stalling, losing and tearing unsynced
    /// writes at crashes) or synchronous.
    pub disk: DiskModel,
    /// Run the object clients and watchers beside the lock clients ([`crate::objects`]).
    pub objects: bool,
    /// Check every block deletion against the manifests active at that moment (object
    /// checker 3). Off only to show that checker 2 finds, at the end of a run, the loss
    /// checker 3 would report at once.
    pub objects_watch_deletes: bool,
    /// Membership changes in the store world (spare devices, adds and removes,
    /// [`crate::membership`]); off, the seed's runs are the ones it gave before them.
    pub membership: bool,
    /// Which world runs: the stores (layout, locks, registers) or the lookup service.
    pub world: WorldKind,
    /// The lookup world's failure class (drawn by the seed unless forced).
    pub lookup_profile: crate::lookup::knobs::ProfileChoice,
    /// Crash the manager of store 0 once, this long (µs) after the start, and measure
    /// what it takes until a new manager serves the store ([`ManagerCrash`]). Meant for
    /// calm runs (`faults` off): the crashed device stays down until the liveness phase.
    ///
    /// [`ManagerCrash`]: super::ManagerCrash
    pub crash_manager_at_us: Option<u64>,
    /// Migrate the manager of store 0 once, this long (µs) after the start, to a device
    /// holding none of the store's chunks, if there is one (the lab's update cost with
    /// the LC outside the k sites). Meant for calm runs; the coordinator later moves it
    /// back to its preferred device.
    pub migrate_manager_apart_at_us: Option<u64>,
    /// Wall-clock steps ([`crate::clock`]): `None` (the default) lets the seed draw them
    /// (a third of the runs with faults; DESIGN §3, "Clocks").
    pub clock_steps: Option<bool>,
    /// Record an event trace.
    #[serde(skip)]
    pub trace: bool,
    /// Return the lock history in the report.
    #[serde(skip)]
    pub keep_history: bool,
    /// Keep up to this many peer messages and persistence records of each shape in the
    /// report ([`Captured`]): real encodings for the decoders' fuzzing corpus.
    #[serde(skip)]
    pub capture: usize,
}

/// Peer messages and persistence records a run produced, a few of each shape (its
/// `Debug` text without digits).
#[derive(Clone, Debug, Default)]
pub struct Captured {
    /// Messages devices sent each other.
    pub msgs: Vec<tenure_core::msg::Msg>,
    /// Records devices persisted.
    pub persists: Vec<tenure_core::PersistOp>,
    shapes: BTreeMap<String, usize>,
}

impl Captured {
    /// Whether another value of this shape is kept (at most `per_shape`).
    pub(super) fn wants(&mut self, debug: String, per_shape: usize) -> bool {
        let shape: String = debug
            .chars()
            .filter(|c| !c.is_ascii_digit())
            .take(160)
            .collect();
        let n = self.shapes.entry(shape).or_default();
        *n += 1;
        *n <= per_shape
    }
}

impl SimConfig {
    /// Defaults for one seed: 5 devices, 16 stores of 3 chunks, 20 s of faults, then at
    /// most 30 s to converge.
    pub fn new(seed: u64) -> SimConfig {
        SimConfig {
            seed,
            devices: 5,
            stores: 16,
            replication: 3,
            safety_us: 20_000_000,
            liveness_us: 30_000_000,
            planted: PlantedBugs::default(),
            whole_record_every: tenure_core::io::CHECKPOINT_EVERY,
            faults: true,
            writes: true,
            pipelining: Pipelining::Drawn,
            lock_paths: LockPaths::Drawn,
            disk: DiskModel::Drawn,
            objects: true,
            objects_watch_deletes: true,
            membership: true,
            world: WorldKind::Stores,
            lookup_profile: Default::default(),
            crash_manager_at_us: None,
            migrate_manager_apart_at_us: None,
            clock_steps: None,
            trace: false,
            keep_history: false,
            capture: 0,
        }
    }

    /// Check the configuration.
    pub fn validate(&self) -> Result<(), SimError> {
        if self.devices == 0 {
            return Err(SimError::NoDevices);
        }
        if self.stores == 0 {
            return Err(SimError::NoStores);
        }
        if self.replication == 0 || self.replication as u64 > self.devices {
            return Err(SimError::Replication {
                replication: self.replication,
                devices: self.devices,
            });
        }
        if self.liveness_us < 1_000_000 {
            return Err(SimError::LivenessTooShort);
        }
        Ok(())
    }
}

/// Which world a run simulates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum WorldKind {
    /// Stores: layout control, locks and sessions, registers (every device also runs
    /// its lookup node, unchecked).
    #[default]
    Stores,
    /// The lookup service (seed 003) under its failure classes ([`crate::lookup`]).
    Lookup,
}
