//! `tenure fuzz`: mutated inputs against the decoders of untrusted bytes
//! ([`tenure_server::fuzz`]). The corpus is real: the peer messages and persistence
//! records of a simulator run (a few of each shape), plus the files of `--corpus DIR`
//! (`DIR/<target>/*`, e.g. inputs a run saved). Exit status 2 when an input makes a
//! decoder panic or decode wrongly; `--save DIR` keeps those inputs.

use anyhow::Context;
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use tenure_server::fuzz::{self, Target};

/// Exit status when a decoder failed.
const EXIT_FAILS: u8 = 2;

/// A decoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Which {
    /// Peer frames (the peer port).
    Wire,
    /// The write-ahead log, read back at start.
    Wal,
    /// One log record's content (behind a valid checksum).
    WalRecord,
    /// Snapshot part files (`snapshot verify`, `restore`).
    SnapshotPart,
    /// A snapshot part's content (behind a valid header and checksum).
    SnapshotBody,
    /// Lock names, as clients send them.
    LockName,
    /// Lookup publishes (gRPC), into the core's requests.
    GrpcPublish,
    /// Lookup watch requests (gRPC), into the core's requests.
    GrpcWatch,
    /// Object puts (gRPC): key and write conditions.
    GrpcPut,
    /// Every decoder.
    All,
}

#[derive(Args, Debug)]
pub struct FuzzArgs {
    /// The decoder.
    #[arg(value_enum, default_value = "all")]
    which: Which,
    /// Inputs per decoder.
    #[arg(long, default_value_t = 1_000_000)]
    inputs: u64,
    /// Seed of the mutations (and of the simulator run the corpus comes from).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// More corpus: `DIR/<decoder>/*` files.
    #[arg(long, value_name = "DIR")]
    corpus: Option<PathBuf>,
    /// Write each failing input to `DIR/<decoder>/failure-N`.
    #[arg(long, value_name = "DIR")]
    save: Option<PathBuf>,
    /// Write each decoder's corpus (the simulator's shapes and `--corpus` files) to
    /// `DIR/<decoder>/<crc32>` before fuzzing: how the repository's `fuzz/corpus` is made.
    #[arg(long, value_name = "DIR")]
    write_corpus: Option<PathBuf>,
}

/// Real messages and records: a short simulator run, keeping a few of each shape.
fn captured(seed: u64) -> tenure_sim::Captured {
    let mut cfg = tenure_sim::SimConfig::new(seed);
    cfg.safety_us = 5_000_000;
    cfg.liveness_us = 10_000_000;
    cfg.capture = 4;
    tenure_sim::run(cfg).captured
}

pub fn run(args: FuzzArgs) -> anyhow::Result<ExitCode> {
    let t0 = Instant::now();
    let c = captured(args.seed);
    let mut targets: Vec<Target> = vec![
        fuzz::wire_target(&c.msgs),
        fuzz::wal_target(&c.persists),
        fuzz::wal_record_target(&c.persists),
        fuzz::snapshot_part_target(&c.msgs, &c.persists),
        fuzz::snapshot_body_target(&c.msgs, &c.persists),
        fuzz::lock_name_target(),
        fuzz::grpc_publish_target(),
        fuzz::grpc_watch_target(),
        fuzz::grpc_put_target(),
    ];
    let wanted = |t: &Target| args.which == Which::All || crate::value_name(&args.which) == t.name;
    targets.retain(wanted);
    println!(
        "corpus from simulator seed {}: {} messages, {} records ({:.1} s)",
        args.seed,
        c.msgs.len(),
        c.persists.len(),
        t0.elapsed().as_secs_f64()
    );
    println!(
        "{:<14} {:>10} {:>8} {:>10} {:>9} {:>9}  rejected by kind",
        "decoder", "inputs", "corpus", "accepted", "failures", "inputs/s"
    );
    let mut failed = false;
    for t in &mut targets {
        if let Some(dir) = &args.corpus {
            let dir = dir.join(t.name);
            if dir.is_dir() {
                for e in std::fs::read_dir(&dir).with_context(|| format!("reading {dir:?}"))? {
                    let p = e?.path();
                    t.corpus
                        .push(std::fs::read(&p).with_context(|| format!("reading {p:?}"))?);
                }
            }
        }
        if let Some(dir) = &args.write_corpus {
            let dir = dir.join(t.name);
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {dir:?}"))?;
            for input in &t.corpus {
                let p = dir.join(format!("{:08x}", crc32fast::hash(input)));
                std::fs::write(&p, input).with_context(|| format!("writing {p:?}"))?;
            }
        }
        let start = Instant::now();
        let r = fuzz::run(t, args.inputs, args.seed);
        let secs = start.elapsed().as_secs_f64().max(1e-9);
        let kinds: Vec<String> = (r.rejected.iter())
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        println!(
            "{:<14} {:>10} {:>8} {:>10} {:>9} {:>9.0}  {}",
            t.name,
            r.inputs,
            t.corpus.len(),
            r.accepted,
            r.failed,
            r.inputs as f64 / secs,
            kinds.join(", ")
        );
        for (i, f) in r.failures.iter().enumerate() {
            failed = true;
            println!(
                "  FAILURE {}: {} ({} bytes)",
                i + 1,
                f.reason,
                f.input.len()
            );
            if let Some(dir) = &args.save {
                let dir = dir.join(t.name);
                std::fs::create_dir_all(&dir).with_context(|| format!("creating {dir:?}"))?;
                let p = dir.join(format!("failure-{}", i + 1));
                std::fs::write(&p, &f.input).with_context(|| format!("writing {p:?}"))?;
                println!("    saved to {}", p.display());
            }
        }
    }
    Ok(if failed {
        ExitCode::from(EXIT_FAILS)
    } else {
        ExitCode::SUCCESS
    })
}
