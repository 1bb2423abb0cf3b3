//! What the simulator's test files share.

/// Seeds a bounded sweep runs: `default`, or the number in the environment variable
/// `var` (e.g. `SIM_SEEDS=2000` for a long sweep from `cargo test`).
pub fn seeds_from_env(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}
