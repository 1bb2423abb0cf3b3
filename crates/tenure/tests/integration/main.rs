//! The `tenure` command's tests on real processes (local clusters on 127.0.0.1, test
//! hosts in network namespaces), and the command line's own behaviour: one test binary,
//! one module per topic (`cargo test --release -p tenure --test integration monitoring::`
//! runs one of them).

/// Take the calling test's file's turn (see [`turn`]) for as long as the value lives.
macro_rules! turn {
    () => {
        crate::turn::take(module_path!())
    };
}

mod common;
mod turn;

mod any_device;
mod auth_cli;
mod bench_scale;
mod cli;
mod clock_step;
mod deploy;
mod elect_cli;
mod endpoint_cli;
mod local_cluster;
mod lock_cli;
mod lock_service;
mod lookup_cli;
mod lookup_process;
mod membership;
mod monitoring;
mod object_cli;
mod one_session;
mod rolling_restart;
mod session_stream;
mod snapshot_cli;
mod standing_state;
mod status_page;
mod tls;
