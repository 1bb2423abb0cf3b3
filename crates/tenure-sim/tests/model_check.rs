//! Exhaustive, depth-bounded model checks of Palladio layout control (seed 000 §4–§5;
//! DESIGN §9 invariants 1–2). See `tenure_sim::model` for the model.

use stateright::{Checker, Model};
use std::time::Instant as WallClock;
use tenure_sim::model::{ModelConfig, PalladioModel, Start};

fn depth_from_env(default: usize) -> usize {
    std::env::var("MODEL_DEPTH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
#[ignore]
fn explore() {
    let depth = depth_from_env(8);
    let starts = match std::env::var("MODEL_START").as_deref() {
        Ok("boot") => vec![Start::Bootstrap],
        Ok("managed") => vec![Start::Managed],
        _ => vec![Start::Bootstrap, Start::Managed],
    };
    let env = |k: &str, d: u8| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let mut cfg = ModelConfig {
        starts,
        max_glitches: env("MODEL_GLITCHES", 1),
        max_crashes: env("MODEL_CRASHES", 1),
        max_writes: env("MODEL_WRITES", 1),
        ..ModelConfig::default()
    };
    if env("MODEL_CRASH_ALL", 0) == 0 {
        cfg.crashable = tenure_sim::model::DIRECTORS.to_vec();
    }
    let t = WallClock::now();
    let c = PalladioModel::new(cfg)
        .checker()
        .threads(2)
        .target_max_depth(depth)
        .spawn_bfs()
        .join();
    eprintln!(
        "depth {depth}: states {} unique {} max depth {} in {:?}; discoveries {:?}",
        c.state_count(),
        c.unique_state_count(),
        c.max_depth(),
        t.elapsed(),
        c.discoveries().keys().collect::<Vec<_>>()
    );
}
