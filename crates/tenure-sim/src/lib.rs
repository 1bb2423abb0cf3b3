//! # tenure-sim
//!
//! The deterministic simulator for Tenure: the real `tenure-core` devices under a virtual
//! clock, a faulty network, crashes, pauses and partitions, with invariant checkers on
//! every event. One seed replays a run exactly. See [`world`] for the model, [`checks`]
//! for the invariants and [`sweep`] for running many seeds.

pub mod checks;
pub mod clock;
pub mod election;
pub mod knobs;
pub mod lab;
pub mod lincheck;
pub mod lockcheck;
pub mod lookup;
pub mod membership;
pub mod model;
pub mod net;
pub mod objects;
pub mod snapshot;
pub mod sweep;
pub mod world;

pub use checks::{Violation, ViolationKind};
pub use knobs::{DiskModel, LockPaths, Pipelining};
pub use sweep::{Summary, sweep};
pub use world::{Captured, Outcome, RunReport, SimConfig, SimError, WorldKind, run};
