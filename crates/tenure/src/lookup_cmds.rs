//! Lookup commands against a running cluster (seed 003; DESIGN §7–§8):
//! `tenure lookup put|get|ls|watch|rm`. Endpoints come from `--endpoints` or the local
//! cluster's `cluster.json`; any device serves lookup requests.
//!
//! - `put KEY VALUE` publishes once and returns (a persistent entry once the lookup
//!   leader acknowledged it; a volatile one once a leader answered a query, so that the
//!   unacknowledged publish has an active node to reach); the entry then lives out its
//!   lifetime (two refresh intervals and a round trip) unless someone refreshes it. With `-- COMMAND`, the
//!   entry is kept refreshed while the command runs and revoked after it, and `put`
//!   exits with the command's status (1 if a signal killed it; 0 when Ctrl-C ends a
//!   hold). If `tenure` itself dies, the entry expires within its lifetime.
//! - `get KEY` prints the value; it exits 1 when there is no entry.
//! - `ls [PREFIX]` lists the entries at and under a path.
//! - `watch PREFIX` prints the entries present, then one line per change, until Ctrl-C.
//! - `rm KEY` revokes an entry (acknowledged by the leader).
//!
//! Human output by default, `--json` for scripts (`watch --json`: one object per line).
//! Values are bytes: shown as text when they are UTF-8; in JSON, non-UTF-8 values go in
//! `value_hex` instead of `value`.

use crate::client_cmds::Target;
use crate::lock_cmds::parse_duration;
use anyhow::Context;
use futures::StreamExt;
use std::process::ExitCode;
use std::time::Duration;
use tenure_client::Client;
use tenure_client::lookup::{
    Durability, EntryView, LookupError, PublishOptions, Removal, WatchChange, WatchOptions,
};

/// Arguments of `tenure lookup`.
#[derive(clap::Args, Debug)]
pub struct LookupArgs {
    #[command(subcommand)]
    command: LookupCommand,
}

#[derive(clap::Subcommand, Debug)]
enum LookupCommand {
    /// Publish KEY → VALUE; keep it refreshed while a command runs (after `--`).
    Put(PutArgs),
    /// Print the value of KEY (exit status 1 when there is none).
    Get(GetArgs),
    /// List the entries at and under a path.
    Ls(LsArgs),
    /// Print the entries under a path, then every change, until Ctrl-C.
    Watch(WatchArgs),
    /// Revoke an entry.
    Rm(RmArgs),
}

/// Arguments of `tenure lookup put`.
#[derive(clap::Args, Debug)]
#[command(after_help = PUT_EXIT_STATUSES)]
struct PutArgs {
    /// Key (a path, e.g. /services/api/1).
    key: String,
    /// Value (`-`: read it from standard input).
    value: String,
    /// Acknowledged by the lookup leader, kept in stable storage, survives full restarts.
    #[arg(long)]
    persistent: bool,
    /// Refresh interval (default 1s volatile, 5m persistent; e.g. 500ms, 30s, 5m; a bare
    /// number is seconds). The entry lives two intervals and a round trip after its last
    /// refresh.
    #[arg(long, value_parser = parse_duration)]
    interval: Option<Duration>,
    #[command(flatten)]
    target: Target,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
    /// Command to run while the entry is kept (after `--`); it sees TENURE_LOOKUP_KEY.
    /// The entry is revoked when it exits. Without a command, publish once and return.
    #[arg(last = true)]
    command: Vec<String>,
}

/// `tenure lookup put`'s help after the options.
const PUT_EXIT_STATUSES: &str = "\
Exit status:
  0              published (without a command); or Ctrl-C ended the hold
  the command's  the command finished; the entry was revoked after it (1 if a signal
                 killed the command)
  1              the entry could not be published (invalid key, value too large,
                 interval out of range, no lookup leader in time, no device reachable)";

/// Arguments of `tenure lookup get`.
#[derive(clap::Args, Debug)]
struct GetArgs {
    /// Key.
    key: String,
    #[command(flatten)]
    target: Target,
    /// Machine-readable output (with version, interval, durability, age).
    #[arg(long)]
    json: bool,
}

/// Arguments of `tenure lookup ls`.
#[derive(clap::Args, Debug)]
struct LsArgs {
    /// List entries at and under this path.
    #[arg(default_value = "/")]
    prefix: String,
    #[command(flatten)]
    target: Target,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Arguments of `tenure lookup watch`.
#[derive(clap::Args, Debug)]
struct WatchArgs {
    /// Watch entries at and under this path.
    #[arg(default_value = "/")]
    prefix: String,
    /// The subscription's refresh interval (e.g. 500ms, 2s; a bare number is seconds).
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    interval: Duration,
    #[command(flatten)]
    target: Target,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

/// Arguments of `tenure lookup rm`.
#[derive(clap::Args, Debug)]
struct RmArgs {
    /// Key.
    key: String,
    #[command(flatten)]
    target: Target,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Run `tenure lookup`.
pub fn run(a: LookupArgs) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        match a.command {
            LookupCommand::Put(a) => put(a).await,
            LookupCommand::Get(a) => get(a).await,
            LookupCommand::Ls(a) => ls(a).await.map(|()| ExitCode::SUCCESS),
            LookupCommand::Watch(a) => watch(a).await,
            LookupCommand::Rm(a) => rm(a).await.map(|()| ExitCode::SUCCESS),
        }
    })
}

/// A duration as people write it: `5m`, `2s`, `300ms`.
pub fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms >= 60_000 && ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms >= 1000 && ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else if ms >= 1000 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        format!("{ms}ms")
    }
}

fn durability_name(d: Durability) -> &'static str {
    match d {
        Durability::Volatile => "volatile",
        Durability::Persistent => "persistent",
    }
}

fn removal_name(r: Removal) -> &'static str {
    match r {
        Removal::Revoked => "revoked",
        Removal::Expired => "expired",
        Removal::Resync => "missed",
    }
}

/// The value as text (lossy for non-UTF-8).
fn text(v: &[u8]) -> String {
    String::from_utf8_lossy(v).into_owned()
}

fn hex(v: &[u8]) -> String {
    v.iter().map(|b| format!("{b:02x}")).collect()
}

/// The value field(s) of a JSON object: `value` for UTF-8, else `value_hex`.
fn value_json(obj: &mut serde_json::Map<String, serde_json::Value>, v: &[u8]) {
    match std::str::from_utf8(v) {
        Ok(s) => obj.insert("value".into(), s.into()),
        Err(_) => obj.insert("value_hex".into(), hex(v).into()),
    };
}

fn entry_json(e: &EntryView) -> serde_json::Value {
    let mut o = serde_json::Map::new();
    o.insert("key".into(), e.key.clone().into());
    value_json(&mut o, &e.value);
    o.insert("durability".into(), durability_name(e.durability).into());
    o.insert("interval_ms".into(), (e.interval.as_millis() as u64).into());
    o.insert("age_ms".into(), (e.age.as_millis() as u64).into());
    o.insert(
        "version".into(),
        serde_json::json!({"stamp": e.version.stamp, "provider": e.version.provider}),
    );
    serde_json::Value::Object(o)
}

fn entry_line(e: &EntryView) -> String {
    format!(
        "{} = {}  ({}, every {}, refreshed {} ago)",
        e.key,
        text(&e.value),
        durability_name(e.durability),
        human(e.interval),
        human(e.age)
    )
}

/// The status a finished command passes on (1 for a signal).
fn command_status(st: std::process::ExitStatus) -> u8 {
    st.code().map_or(1, |c| c.clamp(0, 255) as u8)
}

async fn put(a: PutArgs) -> anyhow::Result<ExitCode> {
    let client = a.target.client()?;
    let value = if a.value == "-" {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf).context("reading stdin")?;
        buf
    } else {
        a.value.clone().into_bytes()
    };
    let interval = a.interval.unwrap_or(if a.persistent {
        Duration::from_secs(300)
    } else {
        Duration::from_secs(1)
    });
    let opts = if a.persistent {
        PublishOptions::persistent(interval)
    } else {
        PublishOptions::volatile(interval)
    };
    if !a.persistent && a.command.is_empty() {
        // A volatile publish is not acknowledged: with no lookup leader yet (the service
        // starts a few seconds after its devices), it would reach no active node and be
        // lost. A query answered first means a leader is there to apply it.
        client
            .get_from_leader(&a.key)
            .await
            .with_context(|| format!("publishing {}", a.key))?;
    }
    let handle = match client.publish(&a.key, value, opts).await {
        Ok(h) => h,
        Err(tenure_client::Error::Lookup(e @ LookupError::BadInterval { max, .. }))
            if !a.persistent && interval > max =>
        {
            anyhow::bail!(
                "publishing {}: {e}; volatile entries are refreshed at least every {} \
                 (use --persistent for longer intervals)",
                a.key,
                human(max)
            )
        }
        Err(e) => return Err(e).with_context(|| format!("publishing {}", a.key)),
    };
    let durability = handle.durability();
    let acked = durability == Durability::Persistent && handle.healthy();
    if a.json {
        let v = handle.version();
        println!(
            "{}",
            serde_json::json!({"key": a.key, "durability": durability_name(durability),
                "interval_ms": handle.interval().as_millis() as u64, "acknowledged": acked,
                "version": {"stamp": v.stamp, "provider": v.provider},
                "held": !a.command.is_empty()})
        );
    } else {
        println!(
            "published {} ({}{}, refreshed every {})",
            a.key,
            durability_name(durability),
            if acked { ", acknowledged" } else { "" },
            human(handle.interval())
        );
    }
    if a.command.is_empty() {
        // Not revoked: the entry lives out its lifetime at the nodes.
        handle.abandon().await;
        return Ok(ExitCode::SUCCESS);
    }
    let mut child = tokio::process::Command::new(&a.command[0])
        .args(&a.command[1..])
        .env("TENURE_LOOKUP_KEY", &a.key)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {:?}", a.command[0]))?;
    let status = tokio::select! {
        st = child.wait() => command_status(st?),
        _ = tokio::signal::ctrl_c() => {
            let _ = child.kill().await;
            0
        }
    };
    if let Err(e) = handle.revoke().await {
        eprintln!(
            "revoking {} failed ({e}); it expires on its own within two intervals",
            a.key
        );
    }
    Ok(ExitCode::from(status))
}

async fn get(a: GetArgs) -> anyhow::Result<ExitCode> {
    let client = a.target.client()?;
    let (entry, leader) = client
        .get_from_leader(&a.key)
        .await
        .with_context(|| format!("looking up {}", a.key))?;
    match entry {
        Some(e) => {
            if a.json {
                let mut v = entry_json(&e);
                v["leader"] = leader.device.0.into();
                println!("{v}");
            } else {
                println!("{}", text(&e.value));
            }
            Ok(ExitCode::SUCCESS)
        }
        None => {
            if a.json {
                println!("{}", serde_json::json!({"key": a.key, "found": false}));
            } else {
                eprintln!("no entry at {}", a.key);
            }
            Ok(ExitCode::from(1))
        }
    }
}

async fn ls(a: LsArgs) -> anyhow::Result<()> {
    let client = a.target.client()?;
    let entries = client
        .list(&a.prefix)
        .await
        .with_context(|| format!("listing {}", a.prefix))?;
    if a.json {
        let v: Vec<_> = entries.iter().map(entry_json).collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    if entries.is_empty() {
        println!("no entries under {}", a.prefix);
    }
    for e in &entries {
        println!("{}", entry_line(e));
    }
    Ok(())
}

fn change_json(c: &WatchChange) -> serde_json::Value {
    match c {
        WatchChange::Put(e) => {
            let mut v = entry_json(e);
            v["event"] = "put".into();
            v
        }
        WatchChange::Removed { key, cause } => {
            serde_json::json!({"event": "removed", "key": key, "cause": removal_name(*cause)})
        }
        WatchChange::Alert { key, silent_for } => serde_json::json!({"event": "alert",
            "key": key, "silent_for_ms": silent_for.as_millis() as u64}),
    }
}

fn change_line(c: &WatchChange) -> String {
    match c {
        WatchChange::Put(e) => format!("put {} = {}", e.key, text(&e.value)),
        WatchChange::Removed { key, cause } => {
            format!("removed {key} ({})", removal_name(*cause))
        }
        WatchChange::Alert { key, silent_for } => {
            format!("alert {key}: not refreshed for {}", human(*silent_for))
        }
    }
}

async fn watch(a: WatchArgs) -> anyhow::Result<ExitCode> {
    let client = a.target.client()?;
    let opts = WatchOptions {
        interval: a.interval,
    };
    let mut w = client
        .watch_with(&a.prefix, opts)
        .with_context(|| format!("watching {}", a.prefix))?;
    loop {
        let change = tokio::select! {
            c = w.next() => c,
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
        };
        match change {
            Some(Ok(c)) => {
                if a.json {
                    println!("{}", change_json(&c));
                } else {
                    println!("{}", change_line(&c));
                }
            }
            Some(Err(e)) => {
                return Err(e).with_context(|| format!("watching {}", a.prefix));
            }
            None => return Ok(ExitCode::SUCCESS),
        }
    }
}

async fn rm(a: RmArgs) -> anyhow::Result<()> {
    let client = a.target.client()?;
    client
        .revoke(&a.key)
        .await
        .with_context(|| format!("revoking {}", a.key))?;
    if a.json {
        println!("{}", serde_json::json!({"key": a.key, "revoked": true}));
    } else {
        println!("revoked {}", a.key);
    }
    Ok(())
}

/// The lookup service as `tenure status` shows it: every device's node, asked at once.
/// Returns the JSON and the human lines.
pub async fn status(client: &Client) -> (serde_json::Value, Vec<String>) {
    let all = client.node_status_all().await;
    let mut nodes = Vec::new();
    let mut leaders = std::collections::BTreeSet::new();
    let mut active = Vec::new();
    for (_, r) in &all {
        if let Ok(n) = r {
            if n.state == "Leader" {
                leaders.insert(n.device);
            }
            if matches!(n.state.as_str(), "Active" | "Leader") {
                active.push(n.device);
            }
            nodes.push(serde_json::json!({"device": n.device, "state": n.state,
                "leader": n.leader, "entries": n.entries, "subscriptions": n.subscriptions,
                "up": n.up.iter().map(|p| p.device).collect::<Vec<_>>()}));
        }
    }
    active.sort_unstable();
    let leader: Vec<u64> = leaders.into_iter().collect();
    let mut lines = Vec::new();
    let names = |v: &[u64]| {
        v.iter()
            .map(|d| format!("d{d}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    lines.push(format!(
        "lookup: leader {}; active nodes {}",
        match leader.as_slice() {
            [] => "none".to_string(),
            [d] => format!("d{d}"),
            many => format!("{} (several: the maintainer will settle it)", names(many)),
        },
        if active.is_empty() {
            "none".to_string()
        } else {
            names(&active)
        }
    ));
    for n in &nodes {
        lines.push(format!(
            "  d{}: {}, {} entries, {} subscriptions",
            n["device"],
            n["state"].as_str().unwrap_or(""),
            n["entries"],
            n["subscriptions"]
        ));
    }
    let json = serde_json::json!({"leader": leader, "active": active, "nodes": nodes});
    (json, lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_values_print_as_people_write_them() {
        assert_eq!(human(Duration::from_secs(300)), "5m");
        assert_eq!(human(Duration::from_secs(2)), "2s");
        assert_eq!(human(Duration::from_millis(1500)), "1.5s");
        assert_eq!(human(Duration::from_millis(300)), "300ms");
        let mut o = serde_json::Map::new();
        value_json(&mut o, b"text");
        assert_eq!(o["value"], "text");
        let mut o = serde_json::Map::new();
        value_json(&mut o, &[0xff, 0x01]);
        assert_eq!(o["value_hex"], "ff01");
    }
}
