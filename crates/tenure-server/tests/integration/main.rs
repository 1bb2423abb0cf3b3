//! The server's tests on in-process clusters on 127.0.0.1: one test binary, one module per
//! topic (`cargo test --release -p tenure-server --test integration lookup::` runs one of
//! them).

/// Take the calling test's file's turn (see [`turn`]) for as long as the value lives.
macro_rules! turn {
    () => {
        crate::turn::take(module_path!())
    };
}

mod common;
mod turn;

mod auth;
mod cluster;
mod elections;
mod lookup;
mod lookup_client;
mod objects;
mod security;
mod session_stream;
