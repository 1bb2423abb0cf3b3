//! Lock commands against a running cluster: `tenure lock`, `tenure unlock`,
//! `tenure locks`, `tenure status` (which also shows the lookup nodes, from
//! [`crate::lookup_cmds::status`]). Endpoints come from `--endpoints` or the local
//! cluster's `cluster.json`.
//!
//! Exit statuses of `tenure lock` ([`Outcome::exit_status`]):
//!
//! - the command's own status when it finished and the lock was released after it (1 for
//!   a command killed by a signal; 0 without a command, when Ctrl-C or SIGTERM ends the
//!   hold);
//! - 1 when the lock could not be taken, the lock may have been lost while the command
//!   ran (the command is killed), or the release failed for another reason;
//! - [`EXIT_EXPIRED_AT_RELEASE`] (120) when the command finished (or Ctrl-C or SIGTERM
//!   ended the hold) but the release found the session expired: the lock had already been released
//!   by the session's expiry, perhaps while the command still ran, and another session
//!   may have taken it meanwhile. The command's own status is printed on stderr.
//!
//! 120 lies above the statuses programs commonly use and below the shell's (126, 127,
//! 128 + signal); a command that itself exits with 120 is told apart by the message only.
//! (141, for a closed stdout, is every subcommand's: see `main`.)

use crate::client_cmds::Target;
use crate::signals::StopSignals;
use anyhow::{Context, bail};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tenure_client::{ClientOptions, FencingToken, LockMode, LockOptions, LockState, Wait};

/// Arguments of `tenure lock`.
#[derive(clap::Args, Debug)]
#[command(after_help = LOCK_EXIT_STATUSES)]
pub struct LockArgs {
    /// Lock name (a path, e.g. /billing/invoices/42).
    name: String,
    /// Take the lock shared (default: exclusive).
    #[arg(long)]
    shared: bool,
    /// Fail at once if the lock is not free.
    #[arg(long = "try", conflicts_with = "timeout")]
    try_: bool,
    /// Wait at most this long (e.g. 500ms, 3s, 1m; a bare number is seconds).
    #[arg(long, value_parser = parse_duration)]
    timeout: Option<Duration>,
    /// Session TTL (e.g. 10s, 2m; a bare number is seconds).
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    ttl: Duration,
    /// If the session expires while holding the lock, nobody gets it for this long
    /// (e.g. 0s, 500ms, 5s; at most 60s; a bare number is seconds). Default: the server's
    /// (`[timing] lock_delay_ms`, 1 s).
    #[arg(long, value_parser = parse_duration)]
    lock_delay: Option<Duration>,
    #[command(flatten)]
    target: Target,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
    /// Command to run while holding the lock (after `--`). It sees TENURE_LOCK_NAME,
    /// TENURE_FENCING_TOKEN (epoch.seq) and TENURE_SESSION; it is killed if the lock may be
    /// lost. Without a command, hold the lock until Ctrl-C or SIGTERM; with one, either is
    /// passed on to the command as SIGTERM. Then the lock is released.
    #[arg(last = true)]
    command: Vec<String>,
}

/// `tenure lock`'s help after the options: its exit statuses.
pub const LOCK_EXIT_STATUSES: &str = "\
Exit status:
  the command's  the command finished and the lock was released after it (1 if a signal
                 killed the command; 0 without a command, when Ctrl-C or SIGTERM ends the
                 hold)
  1              the lock was not taken; or it may have been lost while held (a running
                 command is killed); or the release failed
  120            the command finished (or Ctrl-C or SIGTERM ended the hold), but the
                 release found the session expired: the lock was already released by
                 expiry, perhaps while the command ran, and another session may have taken
                 it meanwhile. The command's own status is printed on stderr; a command
                 that itself exits with 120 is told apart by that message only
  141            stdout was closed (tenure lock ... | head) before the lock line was
                 printed
";

/// The exit status of `tenure lock` when the command finished but its session had
/// expired by the release (see the module docs).
pub const EXIT_EXPIRED_AT_RELEASE: u8 = 120;

/// How `tenure lock` ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// The command finished with this status (0 without a command) and the lock was
    /// released after it.
    Released(u8),
    /// The lock may have been lost while it was held: the command was killed.
    Lost,
    /// The command finished with this status, but the release found the session expired.
    ExpiredAtRelease(u8),
}

impl Outcome {
    fn exit_status(self) -> u8 {
        match self {
            Outcome::Released(status) => status,
            Outcome::Lost => 1,
            Outcome::ExpiredAtRelease(_) => EXIT_EXPIRED_AT_RELEASE,
        }
    }
}

/// The status a finished command passes on, and how to describe it.
pub(crate) fn command_status(st: std::process::ExitStatus) -> (u8, String) {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(c), _) => (c.clamp(0, 255) as u8, format!("status {c}")),
        (None, Some(sig)) => (1, format!("signal {sig}")),
        (None, None) => (1, format!("{st}")),
    }
}

/// Arguments of `tenure unlock`.
#[derive(clap::Args, Debug)]
pub struct UnlockArgs {
    /// Lock name.
    name: String,
    /// The holding session (default: the lock's only holder).
    #[arg(long)]
    session: Option<u64>,
    /// Release only if the grant carries this fencing token (epoch.seq).
    #[arg(long, value_parser = parse_token)]
    token: Option<FencingToken>,
    #[command(flatten)]
    target: Target,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Arguments of `tenure locks`.
#[derive(clap::Args, Debug)]
pub struct LocksArgs {
    /// List locks at and under this path (`/` lists every store).
    #[arg(default_value = "/")]
    prefix: String,
    #[command(flatten)]
    target: Target,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Arguments of `tenure status`.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    target: Target,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// A duration given on the command line. A bare number is seconds (`--ttl 30`, `0.5`);
/// with a unit it is read as configuration files read it ([`tenure_core::duration::parse`]:
/// a whole number with `ms`, `s`, `m` or `h`). The two differ only in the bare number,
/// which is milliseconds in a configuration file (`heartbeat_interval = 300`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.is_empty() || !t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return tenure_core::duration::parse(t);
    }
    let secs: f64 = t.parse().map_err(|_| format!("invalid duration {s:?}"))?;
    Duration::try_from_secs_f64(secs).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

pub(crate) fn parse_token(s: &str) -> Result<FencingToken, String> {
    let (e, q) = s
        .split_once('.')
        .ok_or_else(|| format!("token {s:?} is not epoch.seq"))?;
    Ok(FencingToken {
        epoch: tenure_core::Epoch(e.parse().map_err(|_| format!("bad epoch in {s:?}"))?),
        seq: q.parse().map_err(|_| format!("bad seq in {s:?}"))?,
    })
}

pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

fn mode_str(m: LockMode) -> &'static str {
    match m {
        LockMode::Shared => "shared",
        LockMode::Exclusive => "exclusive",
    }
}

fn state_json(l: &LockState) -> serde_json::Value {
    serde_json::json!({
        "name": l.name,
        "holders": l.holders.iter().map(|h| serde_json::json!({
            "store": h.store, "session": h.session, "mode": mode_str(h.mode),
            "token": h.token.to_string(),
        })).collect::<Vec<_>>(),
        "waiters": l.waiters,
    })
}

/// `tenure lock`.
pub fn lock(a: LockArgs) -> anyhow::Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(async move {
        let opts = ClientOptions {
            session_ttl: a.ttl,
            ..Default::default()
        };
        let mut stops = StopSignals::new();
        let client = a.target.client_with(opts)?;
        let mode = if a.shared {
            LockMode::Shared
        } else {
            LockMode::Exclusive
        };
        let wait = match (a.try_, a.timeout) {
            (true, _) => Wait::Try,
            (false, Some(d)) => Wait::Timeout(d),
            (false, None) => Wait::Forever,
        };
        let started = Instant::now();
        let guard = tokio::select! {
            g = client.lock_with(&a.name, mode, wait, LockOptions { lock_delay: a.lock_delay }) =>
                g.with_context(|| format!("locking {}", a.name))?,
            how = stops.recv() => {
                // Closing the session ends the wait in the store at once.
                let _ = client.close().await;
                bail!("interrupted ({how}) while waiting for {}", a.name)
            }
        };
        let waited = started.elapsed();
        if a.json {
            println!(
                "{}",
                serde_json::json!({"name": a.name, "mode": mode_str(mode), "token": guard.token().to_string(),
                    "store": guard.store(), "session": guard.session(), "waited_ms": waited.as_millis() as u64})
            );
        } else {
            println!(
                "locked {} ({}) token {} session {} in store {} after {:.1?}",
                a.name,
                mode_str(mode),
                guard.token(),
                guard.session(),
                guard.store(),
                waited
            );
        }
        // What ran under the lock, once it is over: its status and how to describe it, or
        // None when the lock may have been lost while it ran.
        let finished = if a.command.is_empty() {
            tokio::select! {
                how = stops.recv() => Some((0, how.to_string())),
                loss = guard.lost() => {
                    eprintln!("the lock may be lost ({loss:?}); stopping");
                    None
                }
            }
        } else {
            let mut child = tokio::process::Command::new(&a.command[0])
                .args(&a.command[1..])
                .env("TENURE_LOCK_NAME", &a.name)
                .env("TENURE_FENCING_TOKEN", guard.token().to_string())
                .env("TENURE_SESSION", guard.session().to_string())
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("starting {:?}", a.command[0]))?;
            // A command that has exited is not killed: when this process wakes late (paused,
            // overloaded) both may be ready, and the command's end comes first. A SIGTERM
            // (or Ctrl-C) for this process is passed on to the command, which ends in its
            // own time, still killed if the lock may be lost meanwhile; then the lock is
            // released.
            let mut stopping = false;
            loop {
                tokio::select! {
                    biased;
                    st = child.wait() => break Some(command_status(st?)),
                    loss = guard.lost() => match child.try_wait()? {
                        Some(st) => break Some(command_status(st)),
                        None => {
                            eprintln!("the lock may be lost ({loss:?}); killing the command");
                            let _ = child.kill().await;
                            break None;
                        }
                    },
                    how = stops.recv(), if !stopping => {
                        stopping = true;
                        eprintln!("{how}: stopping the command, then releasing {}", a.name);
                        crate::signals::pass_on_sigterm(&child);
                    }
                }
            }
        };
        let expired = guard.watch().borrow().expired;
        let session = guard.session();
        let outcome = match finished {
            None => {
                // Already reported; a release the expiry made unnecessary is no news.
                if !expired {
                    match guard.release().await {
                        Ok(()) | Err(tenure_client::Error::SessionExpired(_)) => {}
                        Err(e) => {
                            return Err(e).with_context(|| {
                                format!("releasing {} (session {session})", a.name)
                            });
                        }
                    }
                }
                Outcome::Lost
            }
            Some((status, _)) if !expired => match guard.release().await {
                Ok(()) => Outcome::Released(status),
                Err(tenure_client::Error::SessionExpired(_)) => Outcome::ExpiredAtRelease(status),
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("releasing {} (session {session})", a.name));
                }
            },
            Some((status, _)) => Outcome::ExpiredAtRelease(status),
        };
        if let (Outcome::ExpiredAtRelease(_), Some((_, how))) = (outcome, &finished) {
            let what = if a.command.is_empty() {
                format!("the hold ended ({how})")
            } else {
                format!("the command finished ({how})")
            };
            eprintln!(
                "{what}, but the release found session {session} expired: {} was already released by \
                 the session's expiry, perhaps while it was still in use, and another session may \
                 have taken it meanwhile (exit status {EXIT_EXPIRED_AT_RELEASE})",
                a.name
            );
        }
        let _ = client.close().await;
        Ok(ExitCode::from(outcome.exit_status()))
    })
}

/// `tenure unlock`.
pub fn unlock(a: UnlockArgs) -> anyhow::Result<()> {
    let rt = runtime()?;
    rt.block_on(async move {
        let client = a.target.client()?;
        let state = client.holders(&a.name).await?;
        let holder = match a.session {
            Some(s) => state
                .holders
                .iter()
                .find(|h| h.session == s)
                .with_context(|| format!("session {s} does not hold {}", a.name))?,
            None => match state.holders.as_slice() {
                [h] => h,
                [] => bail!("{} is not held", a.name),
                many => bail!(
                    "{} has {} holders; choose one with --session ({})",
                    a.name,
                    many.len(),
                    many.iter()
                        .map(|h| h.session.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
        };
        client
            .release_raw(holder.store, holder.session, &a.name, a.token)
            .await?;
        if a.json {
            println!(
                "{}",
                serde_json::json!({"name": a.name, "session": holder.session, "token": holder.token.to_string(), "released": true})
            );
        } else {
            println!(
                "released {} (session {}, token {})",
                a.name, holder.session, holder.token
            );
        }
        anyhow::Ok(())
    })
}

/// `tenure locks`.
pub fn locks(a: LocksArgs) -> anyhow::Result<()> {
    let rt = runtime()?;
    rt.block_on(async move {
        let client = a.target.client()?;
        let list = client.locks(&a.prefix).await?;
        if a.json {
            let v: Vec<_> = list.iter().map(state_json).collect();
            println!("{}", serde_json::to_string_pretty(&v)?);
            return anyhow::Ok(());
        }
        if list.is_empty() {
            println!("no locks under {}", a.prefix);
        }
        for l in &list {
            let holders: Vec<String> = l
                .holders
                .iter()
                .map(|h| {
                    format!(
                        "session {} {} token {}",
                        h.session,
                        mode_str(h.mode),
                        h.token
                    )
                })
                .collect();
            println!(
                "{}  held by {}{}",
                l.name,
                if holders.is_empty() {
                    "nobody".to_string()
                } else {
                    holders.join("; ")
                },
                if l.waiters.is_empty() {
                    String::new()
                } else {
                    format!("  ({} waiting)", l.waiters.len())
                }
            );
        }
        anyhow::Ok(())
    })
}

/// `tenure status`: every device's view, merged per store.
pub fn status(a: StatusArgs) -> anyhow::Result<()> {
    let rt = runtime()?;
    rt.block_on(async move {
        let endpoints = a.target.endpoints()?;
        let client = a.target.client()?;
        let mut devices = Vec::new();
        let mut stores: BTreeMap<u32, serde_json::Value> = BTreeMap::new();
        let mut n_stores = 0;
        // Every device is asked at once: a device that does not answer costs the
        // command one attempt bound (1 s), not one per device.
        let (answers, (lookup_json, lookup_lines)) = futures::future::join(
            futures::future::join_all(endpoints.iter().map(|e| client.status_of(e))),
            crate::lookup_cmds::status(&client),
        )
        .await;
        let coordinator = crate::cluster::status::coordinator_summary(
            &answers.iter().filter_map(|a| a.as_ref().ok()).collect::<Vec<_>>(),
        );
        for (e, answer) in endpoints.iter().zip(answers) {
            match answer {
                Ok(s) => {
                    n_stores = s.stores;
                    for m in s.managers.iter().filter(|m| m.is_manager()) {
                        let newer = stores
                            .get(&m.store)
                            .is_none_or(|v| v["epoch"].as_u64().unwrap_or(0) < m.epoch);
                        if newer {
                            stores.insert(
                                m.store,
                                serde_json::json!({"store": m.store, "manager": s.device, "epoch": m.epoch,
                                    "chunks": m.chunks.len(), "failed": m.failed.len(),
                                    "sessions": m.sessions, "locks_held": m.locks_held}),
                            );
                        }
                    }
                    devices.push(serde_json::json!({"device": s.device, "endpoint": e, "up": true,
                        "chunks": s.chunks.len(),
                        "manages": s.managers.iter().filter(|m| m.is_manager()).count()}));
                }
                Err(err) => devices.push(
                    serde_json::json!({"endpoint": e, "up": false, "error": err.to_string()}),
                ),
            }
        }
        if a.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({
                    "devices": devices, "stores": n_stores,
                    "managed": stores.values().collect::<Vec<_>>(),
                    "coordinator": coordinator.0,
                    "lookup": lookup_json,
                }))?
            );
            return none_answered(&devices);
        }
        for d in &devices {
            if d["up"] == true {
                println!(
                    "device {} at {}: up, {} chunks, manages {} stores",
                    d["device"],
                    d["endpoint"].as_str().unwrap_or(""),
                    d["chunks"],
                    d["manages"]
                );
            } else {
                println!(
                    "{}: DOWN ({})",
                    d["endpoint"].as_str().unwrap_or(""),
                    d["error"].as_str().unwrap_or("")
                );
            }
        }
        none_answered(&devices)?;
        println!("{}", coordinator.1);
        println!(
            "{:>6} {:>8} {:>6} {:>9} {:>6}",
            "store", "manager", "epoch", "sessions", "locks"
        );
        for s in 0..n_stores {
            match stores.get(&s) {
                Some(v) => println!(
                    "{:>6} {:>8} {:>6} {:>9} {:>6}{}",
                    s,
                    // (a JSON value ignores the width: print numbers)
                    format!("d{}", v["manager"]),
                    v["epoch"].as_u64().unwrap_or(0),
                    v["sessions"].as_u64().unwrap_or(0),
                    v["locks_held"].as_u64().unwrap_or(0),
                    if v["failed"].as_u64().unwrap_or(0) > 0 {
                        format!("  ({} chunks failed)", v["failed"])
                    } else {
                        String::new()
                    }
                ),
                None => println!("{s:>6} {:>8}", "none"),
            }
        }
        let sessions: u64 = stores
            .values()
            .map(|v| v["sessions"].as_u64().unwrap_or(0))
            .sum();
        let locks: u64 = stores
            .values()
            .map(|v| v["locks_held"].as_u64().unwrap_or(0))
            .sum();
        println!(
            "{} of {} stores managed; {} sessions, {} locks held",
            stores.len(),
            n_stores,
            sessions,
            locks
        );
        for l in &lookup_lines {
            println!("{l}");
        }
        anyhow::Ok(())
    })
}

/// `tenure status` fails (exit status 1) when no device answered: there is nothing to show.
fn none_answered(devices: &[serde_json::Value]) -> anyhow::Result<()> {
    if devices.iter().any(|d| d["up"] == true) {
        return Ok(());
    }
    anyhow::bail!(
        "no device answered ({} endpoint(s) tried); start the cluster (`tenure cluster up`) \
         or check --endpoints",
        devices.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_tokens_parse() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("3 weeks").is_err());
        assert!(parse_duration("").is_err());
        assert_eq!(
            parse_token("4.17"),
            Ok(FencingToken {
                epoch: tenure_core::Epoch(4),
                seq: 17
            })
        );
        assert!(parse_token("417").is_err());
    }

    // A bare number on the command line is seconds; in a configuration file
    // (tenure_core::duration::parse) it is milliseconds. With a unit both read alike.
    #[test]
    fn a_bare_duration_is_seconds_on_the_command_line() {
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration(" 30 "), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(
            tenure_core::duration::parse("30"),
            Ok(Duration::from_millis(30))
        );
        for s in ["0s", "500ms", "3s", "2m", "1h", "3 s"] {
            assert_eq!(parse_duration(s), tenure_core::duration::parse(s), "{s}");
            assert!(parse_duration(s).is_ok(), "{s}");
        }
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
    }

    #[test]
    fn a_duration_that_is_not_one_is_refused() {
        // A unit takes a whole number, as in configuration files.
        for s in [
            "", " ", "s", "ms", "1.5s", "-1", "-1s", "1.2.3", ".", "3 weeks", "2d", "1e3",
        ] {
            assert!(parse_duration(s).is_err(), "{s:?}");
        }
        // Too large for a Duration: refused, not a panic.
        assert!(parse_duration(&"9".repeat(400)).is_err());
    }

    #[test]
    fn each_lock_outcome_has_its_exit_status() {
        assert_eq!(Outcome::Released(0).exit_status(), 0);
        assert_eq!(Outcome::Released(7).exit_status(), 7);
        assert_eq!(Outcome::Lost.exit_status(), 1);
        // Whatever the command's status, an expiry found at release gives its own status.
        for status in [0, 1, 7, 255] {
            assert_eq!(
                Outcome::ExpiredAtRelease(status).exit_status(),
                EXIT_EXPIRED_AT_RELEASE
            );
        }
        assert!(![0, 1, 141].contains(&EXIT_EXPIRED_AT_RELEASE));
        assert!(LOCK_EXIT_STATUSES.contains(&format!("  {EXIT_EXPIRED_AT_RELEASE} ")));
    }

    #[test]
    fn command_statuses_pass_through_and_signals_give_1() {
        use std::os::unix::process::ExitStatusExt;
        let exited = |code: i32| std::process::ExitStatus::from_raw(code << 8);
        assert_eq!(command_status(exited(0)), (0, "status 0".to_string()));
        assert_eq!(command_status(exited(7)), (7, "status 7".to_string()));
        let killed = std::process::ExitStatus::from_raw(9);
        assert_eq!(command_status(killed), (1, "signal 9".to_string()));
    }
}
