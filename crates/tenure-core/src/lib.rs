//! # tenure-core
//!
//! The sans-IO protocol core of Tenure. Nothing here opens sockets, spawns threads, reads
//! a clock, touches a filesystem or draws ambient randomness: time comes in as an
//! argument ([`time::Instant`]) and randomness from a seed in the device's constructor.
//! The same code runs in the deterministic simulator (`tenure-sim`) and in the server.
//!
//! A device is one [`Device`]. Its contract, in the manner of quinn-proto:
//! - **inputs**: [`Device::handle`] with the device's local `now` and one [`io::Input`]
//!   (a message, a client request, a policy command, or `Tick` when the timer is due);
//! - **outputs**: the returned [`io::Output`]s, in order. A driver must make every
//!   `Persist` durable before sending any later `Send`/`Reply` of the same batch;
//! - **timers**: [`Device::poll_timeout`] is the earliest deadline; call `handle(now,
//!   Tick)` at or after it (extra ticks are harmless);
//! - **getters**: views of chunks and manager roles for status and checkers.

pub mod config;
pub mod ctx;
pub mod data;
pub mod device;
pub mod duration;
pub mod election;
pub mod error;
pub mod gate;
pub mod generation;
pub mod ids;
pub mod io;
pub mod layout;
pub mod lockctl;
pub mod lookup;
pub mod menasce;
pub mod msg;
pub mod mutex;
pub mod objects;
pub mod persist_serde;
pub mod pipeline;
pub mod rng;
pub mod rows;
pub mod safetalk;
pub mod session;
pub mod snapshot;
pub mod testkit;
pub mod time;
pub mod vecmap;
pub mod wal_record;

pub use config::{ClusterConfig, DeviceConfig, PlantedBugs, Timing};
pub use device::Device;
pub use ids::{ChunkId, ClientId, DeviceId, Epoch, StoreId};
pub use io::{Input, Observation, Output, PersistOp};
pub use time::Instant;
