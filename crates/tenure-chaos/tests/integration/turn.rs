//! Turns: the tests of one file share the machine only with each other.
//!
//! Each file of this binary was a test binary of its own, and `cargo test` ran those one
//! after another, so a test shared the cores with tests of its own file only. Their
//! measured times and bounds assume it (files whose tests must not overlap at all still
//! make them take turns among themselves). Every test first takes its file's turn with
//! `turn!()`: the tests of one file run together, as the harness's threads allow, and a
//! test of another file waits until none of them runs.

use std::sync::{Condvar, Mutex};

/// The file (module path) whose tests run, and how many of them do.
static HOLDER: Mutex<(Option<&'static str>, usize)> = Mutex::new((None, 0));
/// Signalled when the last test of the running file ends.
static FREE: Condvar = Condvar::new();

/// A test's share of its file's turn, given back when dropped (also by a failing test).
pub struct Turn(());

/// Wait until no test of another file runs, then share `file`'s turn.
pub fn take(file: &'static str) -> Turn {
    let mut holder = HOLDER.lock().unwrap_or_else(|e| e.into_inner());
    while holder.0.is_some_and(|f| f != file) {
        holder = FREE.wait(holder).unwrap_or_else(|e| e.into_inner());
    }
    holder.0 = Some(file);
    holder.1 += 1;
    Turn(())
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut holder = HOLDER.lock().unwrap_or_else(|e| e.into_inner());
        holder.1 -= 1;
        if holder.1 == 0 {
            holder.0 = None;
            FREE.notify_all();
        }
    }
}
