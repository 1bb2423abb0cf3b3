//! What a device tells Prometheus about itself beyond what its subsystems record:
//! [`catalog`], the list of every exported metric (described and registered at start),
//! and [`process`], the process's memory, CPU and descriptors read at each scrape.

pub mod catalog;
pub mod process;
