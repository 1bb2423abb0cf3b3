//! Object commands against a running cluster (seed 001; DESIGN §5, §8):
//! `tenure object put|get|rm|ls|watch`. Endpoints come from `--endpoints` or the local
//! cluster's `cluster.json`; requests go to the manager of the key's store.
//!
//! - `put KEY FILE|-` writes the file (or standard input) under KEY and prints the new
//!   revision, with a progress bar on large uploads. `--if-absent` creates only,
//!   `--if-version V` replaces only revision V, `--fenced-by LOCK` writes only while LOCK
//!   is held with the fencing token of `--token` (default: `TENURE_FENCING_TOKEN`, which
//!   `tenure lock LOCK -- COMMAND` gives COMMAND). `--ephemeral` ties the object to this
//!   command's session: it is deleted when a command run after `--` exits, or at Ctrl-C.
//! - `get KEY` writes the content to standard output (`--json`: the description).
//! - `rm KEY` deletes the object.
//! - `ls PREFIX` lists the objects at and under a path.
//! - `watch PREFIX [--after REV]` prints one line per change until Ctrl-C; when the
//!   store's history no longer reaches back to the watch's position it says so and
//!   prints the current objects (a re-read) before going on.

use crate::client_cmds::Target;
use crate::lock_cmds::parse_token;
use anyhow::{Context, bail};
use std::io::{Read, Write};
use std::process::ExitCode;
use std::sync::Arc;
use tenure_client::objects::{ObjectInfo, PutOptions, WatchEvent};
use tenure_client::{Error, FencingToken};

/// Arguments of `tenure object`.
#[derive(clap::Args, Debug)]
pub struct ObjectArgs {
    #[command(subcommand)]
    command: ObjectCommand,
}

#[derive(clap::Subcommand, Debug)]
enum ObjectCommand {
    /// Write FILE (or standard input, `-`) under KEY.
    Put(PutArgs),
    /// Write the content of KEY to standard output (`--json`: its description).
    Get(GetArgs),
    /// Delete the object under KEY.
    Rm(RmArgs),
    /// List the objects at and under a path.
    Ls(LsArgs),
    /// Print every change at and under a path until Ctrl-C.
    Watch(WatchArgs),
}

/// Arguments of `tenure object put`.
#[derive(clap::Args, Debug)]
#[command(after_help = PUT_EXIT_STATUSES)]
struct PutArgs {
    /// Key (a path, e.g. /app/config.json).
    key: String,
    /// File to upload (`-`: standard input).
    file: String,
    /// Create only: fail if KEY has an object.
    #[arg(long, conflicts_with = "if_version")]
    if_absent: bool,
    /// Replace only this revision of KEY (compare-and-set; 0: only if KEY has none).
    #[arg(long, value_name = "V")]
    if_version: Option<u64>,
    /// Write only while this lock (in KEY's store: same first path segment) is held with
    /// the fencing token of --token.
    #[arg(long, value_name = "LOCK")]
    fenced_by: Option<String>,
    /// Fencing token (epoch.seq) for --fenced-by; default: $TENURE_FENCING_TOKEN, which
    /// `tenure lock LOCK -- COMMAND` sets for COMMAND.
    #[arg(long, value_name = "T", requires = "fenced_by")]
    token: Option<String>,
    /// Delete the object when this command's session ends: when the command after `--`
    /// exits, or at Ctrl-C.
    #[arg(long)]
    ephemeral: bool,
    #[command(flatten)]
    target: Target,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
    /// With --ephemeral: the command to run while the object exists (after `--`).
    #[arg(last = true, requires = "ephemeral")]
    command: Vec<String>,
}

const PUT_EXIT_STATUSES: &str = "\
Exit status:
  0   written (with --ephemeral: and deleted again when the hold ended)
  1   not written: the reason is printed (condition failed, stale fencing token, too
      large, invalid key, no manager reachable)
  the command's status, with --ephemeral -- COMMAND";

/// Arguments of `tenure object get`.
#[derive(clap::Args, Debug)]
struct GetArgs {
    /// Key.
    key: String,
    #[command(flatten)]
    target: Target,
    /// Print the object's description (revision, size, checksum) as JSON instead of
    /// its content.
    #[arg(long)]
    json: bool,
}

/// Arguments of `tenure object rm`.
#[derive(clap::Args, Debug)]
struct RmArgs {
    /// Key.
    key: String,
    /// Delete only this revision (compare-and-set).
    #[arg(long, value_name = "V")]
    if_version: Option<u64>,
    #[command(flatten)]
    target: Target,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Arguments of `tenure object ls`.
#[derive(clap::Args, Debug)]
struct LsArgs {
    /// List objects at and under this path (`/`: every store).
    #[arg(default_value = "/")]
    prefix: String,
    #[command(flatten)]
    target: Target,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Arguments of `tenure object watch`.
#[derive(clap::Args, Debug)]
struct WatchArgs {
    /// Watch objects at and under this path (a path with a first segment, e.g. /app).
    prefix: String,
    /// Start after this revision of the prefix's store (default: from now).
    #[arg(long, value_name = "REV")]
    after: Option<u64>,
    #[command(flatten)]
    target: Target,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

/// Run `tenure object`.
pub fn run(a: ObjectArgs) -> anyhow::Result<ExitCode> {
    // The client library's logs, on request (RUST_LOG=tenure_client=debug).
    crate::logs_from_env();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        match a.command {
            ObjectCommand::Put(a) => put(a).await,
            ObjectCommand::Get(a) => get(a).await,
            ObjectCommand::Rm(a) => rm(a).await,
            ObjectCommand::Ls(a) => ls(a).await,
            ObjectCommand::Watch(a) => watch(a).await,
        }
    })
}

/// Uploads larger than this get a progress bar.
const PROGRESS_FROM: usize = 4 << 20;

/// What went wrong with a request on `key`, and what to do about it.
fn explain(e: Error, what: &str, key: &str) -> anyhow::Error {
    let hint = match &e {
        Error::ObjectExists { revision, .. } => format!(
            "{key} already exists at revision {revision} (--if-absent); drop --if-absent to \
             replace it, or use --if-version {revision}"
        ),
        Error::RevisionMismatch { current, .. } => match current {
            Some(r) => format!(
                "{key} is at revision {r}, not the one given with --if-version; read it again \
                 (tenure object get {key} --json) and retry with --if-version {r}"
            ),
            None => format!("{key} does not exist; use --if-version 0 or --if-absent to create it"),
        },
        Error::StaleToken => format!(
            "the fencing token is stale: the lock is no longer held with it (it was released, \
             expired or taken by someone else); {what} was refused and {key} is unchanged"
        ),
        Error::NoSuchObject(_) => format!("no object {key}"),
        Error::TooLarge { size, limit } => {
            format!("{size} bytes is more than the cluster's object limit of {limit} bytes")
        }
        Error::InvalidName { name, reason } => {
            let name = if name.is_empty() { key } else { name };
            format!("invalid name {name:?}: {reason} (keys are paths such as /app/config)")
        }
        Error::Compacted { asked, compacted } => format!(
            "revision {asked} is older than the history the store keeps (after {compacted}): \
             read the current state with `tenure object ls` and watch --after its revision"
        ),
        Error::GaveUp { .. } | Error::Unavailable { .. } | Error::NoEndpoints => {
            format!("{e}; is the cluster up? (`tenure cluster status`, or pass --endpoints)")
        }
        _ => e.to_string(),
    };
    anyhow::anyhow!("{what} {key}: {hint}")
}

fn info_json(i: &ObjectInfo) -> serde_json::Value {
    serde_json::json!({
        "key": i.key, "revision": i.revision, "uuid": i.uuid, "size": i.size,
        "checksum": format!("{:08x}", i.checksum), "ephemeral_session": i.owner_session,
    })
}

/// The fencing token for `--fenced-by`: `--token`, else the environment's.
fn fence_token(token: Option<&str>, lock: &str) -> anyhow::Result<FencingToken> {
    let (text, from) = match token {
        Some(t) => (t.to_string(), "--token"),
        None => match std::env::var("TENURE_FENCING_TOKEN") {
            Ok(t) => (t, "TENURE_FENCING_TOKEN"),
            Err(_) => bail!(
                "--fenced-by {lock} needs a fencing token: pass --token EPOCH.SEQ, or run this \
                 under `tenure lock {lock} -- ...`, which sets TENURE_FENCING_TOKEN"
            ),
        },
    };
    parse_token(text.trim()).map_err(|e| anyhow::anyhow!("{from}: {e}"))
}

fn read_input(file: &str) -> anyhow::Result<Vec<u8>> {
    if file == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .context("reading standard input")?;
        Ok(buf)
    } else {
        std::fs::read(file).with_context(|| format!("reading {file}"))
    }
}

async fn put(a: PutArgs) -> anyhow::Result<ExitCode> {
    let data = read_input(&a.file)?;
    let fence = match &a.fenced_by {
        Some(lock) => Some((lock.clone(), fence_token(a.token.as_deref(), lock)?)),
        None => None,
    };
    let client = a.target.client()?;
    let bar = if data.len() >= PROGRESS_FROM && !a.json {
        let bar = indicatif::ProgressBar::new(data.len() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} uploading {bar:30} {bytes}/{total_bytes} {bytes_per_sec} {msg}",
            )
            .expect("template"),
        );
        Some(bar)
    } else {
        None
    };
    let progress = bar.clone().map(|b| {
        Arc::new(move |sent: u64, _total: u64| b.set_position(sent))
            as tenure_client::objects::Progress
    });
    let opts = PutOptions {
        if_absent: a.if_absent,
        if_revision: a.if_version,
        fence,
        ephemeral: a.ephemeral,
        progress,
    };
    let size = data.len();
    let r = client.objects().put_with(&a.key, data, opts).await;
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let w = r.map_err(|e| explain(e, "writing", &a.key))?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({"key": w.key, "revision": w.revision, "uuid": w.uuid,
                "size": size, "ephemeral": a.ephemeral})
        );
    } else {
        println!("wrote {} ({size} bytes) at revision {}", w.key, w.revision);
    }
    if !a.ephemeral {
        return Ok(ExitCode::SUCCESS);
    }
    // Hold the session (and so the object) while the command runs, or until Ctrl-C.
    let status = if a.command.is_empty() {
        if !a.json {
            eprintln!("ephemeral: {} is deleted when this ends (Ctrl-C)", w.key);
        }
        let _ = tokio::signal::ctrl_c().await;
        0
    } else {
        let mut child = tokio::process::Command::new(&a.command[0])
            .args(&a.command[1..])
            .env("TENURE_OBJECT_KEY", &w.key)
            .env("TENURE_OBJECT_REVISION", w.revision.to_string())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {:?}", a.command[0]))?;
        tokio::select! {
            st = child.wait() => st?.code().map_or(1, |c| c.clamp(0, 255) as u8),
            _ = tokio::signal::ctrl_c() => {
                let _ = child.kill().await;
                0
            }
        }
    };
    if let Err(e) = client.close().await {
        eprintln!(
            "closing the session failed ({e}); {} is deleted when the session expires",
            w.key
        );
    }
    Ok(ExitCode::from(status))
}

async fn get(a: GetArgs) -> anyhow::Result<ExitCode> {
    let client = a.target.client()?;
    let o = client.objects();
    if a.json {
        let info = o
            .head(&a.key)
            .await
            .map_err(|e| explain(e, "reading", &a.key))?;
        println!("{}", info_json(&info));
        return Ok(ExitCode::SUCCESS);
    }
    let obj = o
        .get(&a.key)
        .await
        .map_err(|e| explain(e, "reading", &a.key))?;
    let mut out = std::io::stdout().lock();
    out.write_all(&obj.data)
        .and_then(|()| out.flush())
        .context("writing to standard output")?;
    Ok(ExitCode::SUCCESS)
}

async fn rm(a: RmArgs) -> anyhow::Result<ExitCode> {
    let client = a.target.client()?;
    let opts = PutOptions {
        if_revision: a.if_version,
        ..Default::default()
    };
    let revision = client
        .objects()
        .delete_with(&a.key, opts)
        .await
        .map_err(|e| explain(e, "deleting", &a.key))?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({"key": a.key, "deleted_at": revision})
        );
    } else {
        println!("deleted {} at revision {revision}", a.key);
    }
    let _ = client.close().await;
    Ok(ExitCode::SUCCESS)
}

async fn ls(a: LsArgs) -> anyhow::Result<ExitCode> {
    let client = a.target.client()?;
    let l = client
        .objects()
        .list(&a.prefix)
        .await
        .map_err(|e| explain(e, "listing", &a.prefix))?;
    if a.json {
        let objects: Vec<_> = l.objects.iter().map(info_json).collect();
        let revisions: serde_json::Map<String, serde_json::Value> = (l.revisions.iter())
            .map(|(s, r)| (s.to_string(), (*r).into()))
            .collect();
        println!(
            "{}",
            serde_json::json!({"objects": objects, "store_revisions": revisions})
        );
    } else if l.objects.is_empty() {
        eprintln!("no objects under {}", a.prefix);
    } else {
        for i in &l.objects {
            println!("{}  {} bytes  revision {}", i.key, i.size, i.revision);
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn watch(a: WatchArgs) -> anyhow::Result<ExitCode> {
    let client = a.target.client()?;
    let mut w = client
        .objects()
        .watch(&a.prefix, a.after)
        .await
        .map_err(|e| explain(e, "watching", &a.prefix))?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({"watching": a.prefix, "after": w.started_after()})
        );
    } else {
        eprintln!(
            "watching {} after revision {} (Ctrl-C to stop)",
            a.prefix,
            w.started_after()
        );
    }
    loop {
        let ev = tokio::select! {
            ev = w.next() => ev,
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
        };
        let ev = match ev {
            None => bail!("watching {}: the watch stopped", a.prefix),
            Some(Err(e)) => return Err(explain(e, "watching", &a.prefix)),
            Some(Ok(ev)) => ev,
        };
        let mut out = std::io::stdout().lock();
        match ev {
            WatchEvent::Changes(cs) => {
                for c in cs {
                    if a.json {
                        let v = match &c.put {
                            Some(p) => serde_json::json!({"revision": c.revision, "key": c.key,
                                "event": "put", "uuid": p.uuid, "size": p.size,
                                "checksum": format!("{:08x}", p.checksum)}),
                            None => serde_json::json!({"revision": c.revision, "key": c.key,
                                "event": "delete"}),
                        };
                        writeln!(out, "{v}")?;
                    } else {
                        match &c.put {
                            Some(p) => {
                                writeln!(out, "{} put {} ({} bytes)", c.revision, c.key, p.size)?
                            }
                            None => writeln!(out, "{} delete {}", c.revision, c.key)?,
                        }
                    }
                }
            }
            WatchEvent::Reset { revision, objects } => {
                if a.json {
                    let objs: Vec<_> = objects.iter().map(info_json).collect();
                    writeln!(
                        out,
                        "{}",
                        serde_json::json!({"event": "reread", "revision": revision,
                            "objects": objs})
                    )?;
                } else {
                    writeln!(
                        out,
                        "-- history compacted: changes may have been missed; current state at \
                         revision {revision}:"
                    )?;
                    for i in &objects {
                        writeln!(out, "{} {}  {} bytes", i.revision, i.key, i.size)?;
                    }
                    writeln!(out, "-- watching after revision {revision}")?;
                }
            }
        }
        out.flush()?;
    }
}
