//! The core's scenario tests on the sans-IO test kit, and its layering check: one test
//! binary, one module per topic.

mod layers;
mod locks;
mod scenarios;
mod smoke;
