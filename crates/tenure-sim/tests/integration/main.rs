//! The simulator's tests: bounded sweeps, planted bugs, replays of seeds and model checks,
//! one test binary with one module per world (`cargo test --release -p tenure-sim --test
//! integration sim::` runs one of them).

mod common;

mod election;
mod lab;
mod lookup;
mod membership;
mod model_check;
mod objects;
mod sim;
mod snapshot;
