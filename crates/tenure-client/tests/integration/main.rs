//! The client's routing and lookup paths against scripted fake devices on 127.0.0.1: one
//! test binary, one module per topic.

/// Take the calling test's file's turn (see [`turn`]) for as long as the value lives.
macro_rules! turn {
    () => {
        crate::turn::take(module_path!())
    };
}

mod turn;

mod lookup_fake;
mod redirects;
