//! Ctrl-C and SIGTERM for the commands that hold something in the cluster (`tenure lock`,
//! `tenure elect`): from the start of the run neither ends the process by itself, so
//! what it holds is given back first (released, resigned) and the next holder goes on at
//! once instead of after the session's TTL.

/// Ctrl-C and SIGTERM (a service manager stopping a holder or a leader). One listener
/// each, kept: a signal that arrives while no `select!` is waiting on it (between the
/// campaign and the lead, say) is kept for the next wait instead of lost, as it would be
/// with a listener made afresh for each wait (tokio delivers a signal only to listeners
/// that exist when it arrives).
pub(crate) struct StopSignals {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    pub(crate) fn new() -> StopSignals {
        use tokio::signal::unix::{SignalKind, signal};
        StopSignals {
            term: signal(SignalKind::terminate()).ok(),
            int: signal(SignalKind::interrupt()).ok(),
        }
    }

    /// The next Ctrl-C or SIGTERM.
    pub(crate) async fn recv(&mut self) -> &'static str {
        async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
            match s.as_mut() {
                Some(s) => {
                    s.recv().await;
                }
                None => futures::future::pending().await,
            }
        }
        tokio::select! {
            _ = next(&mut self.int) => "Ctrl-C",
            _ = next(&mut self.term) => "SIGTERM",
        }
    }
}

/// Sends SIGTERM to a command run under a hold, which then ends in its own time.
pub(crate) fn pass_on_sigterm(child: &tokio::process::Child) {
    if let Some(pid) = child.id() {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
    }
}
