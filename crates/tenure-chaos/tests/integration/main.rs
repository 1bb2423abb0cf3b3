//! Chaos tests: the bounded run on real processes, the checkers on made-up histories, and
//! the clock shim: one test binary, one module per topic.

/// Take the calling test's file's turn (see [`turn`]) for as long as the value lives.
macro_rules! turn {
    () => {
        crate::turn::take(module_path!())
    };
}

mod turn;

mod chaos;
mod clock;
