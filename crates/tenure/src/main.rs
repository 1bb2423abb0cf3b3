//! The `tenure` command. `main` only parses the command line and dispatches: each
//! subcommand lives in its own module with its own `clap::Args` struct, so new
//! subcommands are one enum variant and one module.

mod bench;
mod cert_cmd;
mod chaos_cmd;
mod check_cmd;
mod client_cmds;
mod cluster;
mod deploy;
mod elect_cmds;
mod endpoint_cmds;
mod fuzz_cmd;
mod lab_cmd;
mod lab_svg;
mod lock_cmds;
mod lookup_cmds;
mod object_cmds;
mod server_cmd;
mod signals;
mod sim_cmd;
mod snapshot_cmds;
mod token_cmd;

/// mimalloc: the server allocates and frees many small buffers per request (frames, messages,
/// futures); glibc malloc cost about 6% of its CPU under lock load. The feature
/// `system-alloc` leaves it out, for heap profilers that follow malloc (heaptrack).
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Tenure: a fault-tolerant coordination service.
#[derive(Parser)]
#[command(name = "tenure", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the deterministic simulator: replay one seed, or sweep many.
    Sim(sim_cmd::SimArgs),
    /// The seeds' tables measured: mutual exclusion, elections, SafeTalk, update cost.
    Lab(lab_cmd::LabArgs),
    /// Mutated inputs against the decoders of untrusted bytes (peer frames, the log,
    /// snapshot parts, lock names).
    Fuzz(fuzz_cmd::FuzzArgs),
    /// Run one device (server process) from a TOML configuration.
    Server(server_cmd::ServerArgs),
    /// A local cluster of device processes on 127.0.0.1: up, down, status, add, remove.
    Cluster(cluster::ClusterArgs),
    /// Write a test register in a store (checks a store end to end).
    Write(client_cmds::WriteArgs),
    /// Take a lock; hold it while a command runs (after `--`), or until Ctrl-C.
    Lock(lock_cmds::LockArgs),
    /// Release a lock on behalf of its holder (operators).
    Unlock(lock_cmds::UnlockArgs),
    /// List locks, their holders and queues, under a path.
    Locks(lock_cmds::LocksArgs),
    /// Campaign in an election; lead while a command runs (after `--`), or until Ctrl-C.
    Elect(elect_cmds::ElectArgs),
    /// The current leader of an election (value, fencing token); --watch prints every
    /// change.
    Leader(elect_cmds::LeaderArgs),
    /// The lookup service: publish (and keep while a command runs), get, list, watch,
    /// revoke entries.
    Lookup(lookup_cmds::LookupArgs),
    /// The object store: put (conditional, fenced, ephemeral), get, rm, ls, watch.
    Object(object_cmds::ObjectArgs),
    /// Stores, managers, epochs, sessions, held locks and the lookup nodes of a running
    /// cluster.
    Status(lock_cmds::StatusArgs),
    /// Each device's health (answers, serves, its stores managed, commits a write) or
    /// status (a table: version, membership, stores, chunks, roles, data size).
    Endpoint(endpoint_cmds::EndpointArgs),
    /// Checks of a running cluster: `check perf` runs a short paced write load and says
    /// PASS or FAIL for throughput, p99 latency and errors.
    Check(check_cmd::CheckArgs),
    /// Benchmarks against a running cluster.
    Bench(bench::BenchArgs),
    /// Consistent snapshots of the cluster: create, ls, verify, restore, rm.
    Snapshot(snapshot_cmds::SnapshotArgs),
    /// Fault testing of real devices on test hosts (network namespaces; root and nft).
    Chaos(chaos_cmd::ChaosArgs),
    /// Tokens for a cluster's authorization ([auth]): a new one, or the hash of a secret.
    Token(token_cmd::TokenArgs),
    /// Client certificates from the local cluster's CA, named in [auth] as identities.
    Cert(cert_cmd::CertArgs),
    /// Deployment bundles for real hosts: per-host configuration, certificates and
    /// systemd units; client credentials; adding a host.
    Deploy(deploy::DeployArgs),
}

/// `println!` panics when stdout is a closed pipe (`tenure status | head`). Rust ignores
/// SIGPIPE, and restoring it needs `unsafe`; so such a panic ends the process quietly
/// with the status a shell gives a command killed by SIGPIPE (128 + 13). Every other
/// panic reports as usual.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}

/// The name a command-line value takes, as clap spells it (for JSON, summaries and
/// replay commands).
pub(crate) fn value_name(v: &impl clap::ValueEnum) -> String {
    let v = v.to_possible_value().expect("no value is skipped");
    v.get_name().to_string()
}

/// Log to stderr what `RUST_LOG` asks for (nothing without it): the commands whose
/// client-side retries and failures are worth seeing on request.
fn logs_from_env() {
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .try_init();
    }
}

fn main() -> ExitCode {
    quiet_on_closed_stdout();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(args) => sim_cmd::run(args),
        Command::Lab(args) => lab_cmd::run_lab(args),
        Command::Fuzz(args) => fuzz_cmd::run(args),
        Command::Server(args) => server_cmd::run(args).map(|()| ExitCode::SUCCESS),
        Command::Cluster(args) => cluster::run(args).map(|()| ExitCode::SUCCESS),
        Command::Write(args) => client_cmds::write(args).map(|()| ExitCode::SUCCESS),
        Command::Lock(args) => lock_cmds::lock(args),
        Command::Unlock(args) => lock_cmds::unlock(args).map(|()| ExitCode::SUCCESS),
        Command::Locks(args) => lock_cmds::locks(args).map(|()| ExitCode::SUCCESS),
        Command::Elect(args) => elect_cmds::elect(args),
        Command::Leader(args) => elect_cmds::leader(args),
        Command::Lookup(args) => lookup_cmds::run(args),
        Command::Object(args) => object_cmds::run(args),
        Command::Status(args) => lock_cmds::status(args).map(|()| ExitCode::SUCCESS),
        Command::Endpoint(args) => endpoint_cmds::run(args),
        Command::Check(args) => check_cmd::run(args),
        Command::Bench(args) => bench::run(args).map(|()| ExitCode::SUCCESS),
        Command::Snapshot(args) => snapshot_cmds::run(args).map(|()| ExitCode::SUCCESS),
        Command::Chaos(args) => chaos_cmd::run(args),
        Command::Token(args) => token_cmd::run(args).map(|()| ExitCode::SUCCESS),
        Command::Cert(args) => cert_cmd::run(args).map(|()| ExitCode::SUCCESS),
        Command::Deploy(args) => deploy::run(args).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    /// clap's own checks of the whole command line (duplicate argument names, flags
    /// shared through flattened structs, `requires` naming an argument that exists),
    /// which release builds skip at run time.
    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
