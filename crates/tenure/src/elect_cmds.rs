//! Election commands against a running cluster (DESIGN §6, §8): `tenure elect` and
//! `tenure leader`. Endpoints come from `--endpoints` or the local cluster's
//! `cluster.json`.
//!
//! - `elect NAME VALUE [-- COMMAND]` campaigns in the election NAME (a path) with VALUE,
//!   waits until elected, prints the leadership (its fencing token), then leads while
//!   COMMAND runs — or until Ctrl-C without one — and resigns. COMMAND sees
//!   TENURE_ELECTION, TENURE_LEADER_VALUE, TENURE_FENCING_TOKEN (epoch.seq),
//!   TENURE_SESSION and TENURE_LOCK_NAME (the election's lock, for
//!   `tenure object put --fenced-by "$TENURE_LOCK_NAME"`). When leadership may be lost
//!   (the session's conservative deadline is near and no keep-alive extended it, or the
//!   session expired) COMMAND is killed. A campaign whose session expires fails; it does
//!   not stand again under a new session. Ctrl-C or SIGTERM resigns (after passing
//!   SIGTERM on to COMMAND and waiting for it), so the next candidate leads at once.
//! - `leader NAME` prints the current leader (value, token, session), or "no leader" and
//!   exits with status 1 (as `lookup get` does for an absent key: scripts can test it);
//!   `--watch` prints every change until Ctrl-C, "no leader" included.
//!
//! Exit statuses of `tenure elect` are those of `tenure lock` (see [`ELECT_EXIT_STATUSES`]).

use crate::client_cmds::Target;
use crate::lock_cmds::{EXIT_EXPIRED_AT_RELEASE, command_status, parse_duration, runtime};
use crate::signals::StopSignals;
use anyhow::bail;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tenure_client::elections::{Leader, LeaderChange};
use tenure_client::{ClientOptions, Error, Wait};

/// Arguments of `tenure elect`.
#[derive(clap::Args, Debug)]
#[command(after_help = ELECT_EXIT_STATUSES)]
pub struct ElectArgs {
    /// Election name (a path, e.g. /billing/primary).
    name: String,
    /// The value to publish as leader (e.g. this process's address).
    value: String,
    /// Fail at once if another session leads or campaigns first.
    #[arg(long = "try", conflicts_with = "timeout")]
    try_: bool,
    /// Campaign at most this long (e.g. 500ms, 3s, 1m; a bare number is seconds).
    #[arg(long, value_parser = parse_duration)]
    timeout: Option<Duration>,
    /// Session TTL: how long after this process dies (or stops answering) another
    /// candidate can lead (e.g. 10s, 2m; a bare number is seconds).
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    ttl: Duration,
    #[command(flatten)]
    target: Target,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
    /// Command to run while leading (after `--`). It sees TENURE_ELECTION,
    /// TENURE_LEADER_VALUE, TENURE_FENCING_TOKEN (epoch.seq), TENURE_SESSION and
    /// TENURE_LOCK_NAME; it is killed if leadership may be lost. Without a command, lead
    /// until Ctrl-C.
    #[arg(last = true)]
    command: Vec<String>,
}

/// `tenure elect`'s help after the options: its exit statuses.
pub const ELECT_EXIT_STATUSES: &str = "\
Exit status:
  the command's  the command finished and leadership was resigned after it (1 if a signal
                 killed the command; 0 without a command, when Ctrl-C ends the leadership)
  1              not elected (timeout, --try, the session expired while campaigning); or
                 leadership may have been lost while leading (a running command is
                 killed); or the resignation failed
  120            the command finished (or Ctrl-C ended the leadership), but the session had
                 expired by the resignation: leadership had already ended, perhaps while
                 the command ran, and another candidate may have led meanwhile";

/// Arguments of `tenure leader`.
#[derive(clap::Args, Debug)]
pub struct LeaderArgs {
    /// Election name.
    name: String,
    /// Print every change (new leaders, new values, "no leader") until Ctrl-C.
    #[arg(long)]
    watch: bool,
    #[command(flatten)]
    target: Target,
    /// Machine-readable output (one JSON object per line with --watch).
    #[arg(long)]
    json: bool,
}

/// What failed, and what to do about it.
fn explain(e: Error, what: &str, name: &str) -> anyhow::Error {
    let hint = match &e {
        Error::SessionExpired(s) => format!(
            "session {s} expired (this process did not keep it alive: paused, overloaded, or \
             cut off from the cluster); its campaign or leadership of {name} ended with it. \
             Run the command again to stand again"
        ),
        Error::WouldBlock(_) => {
            format!(
                "{name} has a leader or an earlier candidate (--try); see `tenure leader {name}`"
            )
        }
        Error::Timeout(_) => format!("not elected leader of {name} in time (--timeout)"),
        Error::StaleToken => format!("this session no longer leads {name}"),
        Error::InvalidName { name: n, reason } => {
            let n = if n.is_empty() { name } else { n };
            format!("invalid election name {n:?}: {reason} (names are paths such as /app/primary)")
        }
        Error::TooLarge { size, limit } => {
            format!("a value of {size} bytes is more than the limit of {limit} bytes")
        }
        Error::GrantUnconfirmed(_) => format!(
            "elected leader of {name} too close to the session's deadline, and no keep-alive \
             could confirm the session: leadership was resigned, not taken"
        ),
        Error::GaveUp { .. } | Error::Unavailable { .. } | Error::NoEndpoints => {
            format!("{e}; is the cluster up? (`tenure cluster status`, or pass --endpoints)")
        }
        _ => e.to_string(),
    };
    anyhow::anyhow!("{what} {name}: {hint}")
}

fn leader_json(l: &Leader) -> serde_json::Value {
    serde_json::json!({
        "value": l.value_str(), "token": l.token.to_string(), "session": l.session,
        "store": l.store, "revision": l.revision,
    })
}

fn leader_line(l: &Leader) -> String {
    format!(
        "{} (token {}, session {} in store {}, revision {})",
        l.value_str(),
        l.token,
        l.session,
        l.store,
        l.revision
    )
}

/// `tenure elect`.
pub fn elect(a: ElectArgs) -> anyhow::Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(async move {
        let mut stops = StopSignals::new();
        let opts = ClientOptions {
            session_ttl: a.ttl,
            ..Default::default()
        };
        let client = a.target.client_with(opts)?;
        let elections = client.elections();
        let wait = match (a.try_, a.timeout) {
            (true, _) => Wait::Try,
            (false, Some(d)) => Wait::Timeout(d),
            (false, None) => Wait::Forever,
        };
        let started = Instant::now();
        // Who leads now, for people: worth a second at most (the campaign reports what
        // is wrong with the cluster if anything is).
        let current = tokio::time::timeout(Duration::from_secs(1), elections.leader(&a.name));
        if !a.json
            && let Ok(Ok(Some(l))) = current.await
        {
            eprintln!("{} is led by {}; campaigning", a.name, leader_line(&l));
        }
        let leadership = tokio::select! {
            l = elections.campaign_with(&a.name, a.value.as_bytes(), wait) => {
                l.map_err(|e| explain(e, "campaigning for", &a.name))?
            }
            how = stops.recv() => {
                // Closing the session ends the campaign's wait in the store at once.
                let _ = client.close().await;
                bail!("interrupted ({how}) while campaigning for {}", a.name)
            }
        };
        let waited = started.elapsed();
        if a.json {
            println!(
                "{}",
                serde_json::json!({"name": a.name, "elected": true, "value": a.value,
                    "token": leadership.token().to_string(), "session": leadership.session(),
                    "store": leadership.store(), "waited_ms": waited.as_millis() as u64})
            );
        } else {
            println!(
                "elected leader of {} as {:?}: token {} session {} in store {} after {:.1?}",
                a.name,
                a.value,
                leadership.token(),
                leadership.session(),
                leadership.store(),
                waited
            );
        }
        let _ = std::io::stdout().flush();
        // What ran while leading, once it is over: its status and how to describe it, or
        // None when leadership may have been lost while it ran.
        let finished = if a.command.is_empty() {
            tokio::select! {
                how = stops.recv() => Some((0, how.to_string())),
                loss = leadership.lost() => {
                    eprintln!("leadership of {} may be lost ({loss:?}); stopping", a.name);
                    None
                }
            }
        } else {
            let mut child = tokio::process::Command::new(&a.command[0])
                .args(&a.command[1..])
                .env("TENURE_ELECTION", &a.name)
                .env("TENURE_LEADER_VALUE", &a.value)
                .env("TENURE_FENCING_TOKEN", leadership.token().to_string())
                .env("TENURE_SESSION", leadership.session().to_string())
                .env("TENURE_LOCK_NAME", leadership.lock_name())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| anyhow::anyhow!("starting {:?}: {e}", a.command[0]))?;
            // A command that has exited is not killed: when this process wakes late (paused,
            // overloaded) both may be ready, and the command's end comes first. A SIGTERM
            // (or Ctrl-C) for this process is passed on to the command, which ends in its
            // own time, still killed if leadership may be lost meanwhile.
            let mut stopping = false;
            loop {
                tokio::select! {
                    biased;
                    st = child.wait() => break Some(command_status(st?)),
                    loss = leadership.lost() => match child.try_wait()? {
                        Some(st) => break Some(command_status(st)),
                        None => {
                            eprintln!("leadership of {} may be lost ({loss:?}); killing the command", a.name);
                            let _ = child.kill().await;
                            break None;
                        }
                    },
                    how = stops.recv(), if !stopping => {
                        stopping = true;
                        eprintln!("{how}: stopping the command, then resigning {}", a.name);
                        crate::signals::pass_on_sigterm(&child);
                    }
                }
            }
        };
        let expired = leadership.watch().borrow().expired;
        let session = leadership.session();
        let (status, outcome) = match finished {
            None => {
                if !expired {
                    let _ = leadership.resign().await;
                }
                (1, "lost")
            }
            Some((status, how)) => {
                let resigned = if expired {
                    Err(Error::SessionExpired(session))
                } else {
                    leadership.resign().await.map(|_| ())
                };
                match resigned {
                    Ok(()) => (status, "resigned"),
                    Err(Error::SessionExpired(_)) => {
                        let what = if a.command.is_empty() {
                            format!("leadership ended ({how})")
                        } else {
                            format!("the command finished ({how})")
                        };
                        eprintln!(
                            "{what}, but session {session} had expired by the resignation: \
                             leadership of {} had already ended, perhaps while the command \
                             still ran, and another candidate may have led meanwhile (exit \
                             status {EXIT_EXPIRED_AT_RELEASE})",
                            a.name
                        );
                        (EXIT_EXPIRED_AT_RELEASE, "expired_at_resignation")
                    }
                    Err(e) => return Err(explain(e, "resigning", &a.name)),
                }
            }
        };
        if a.json {
            println!(
                "{}",
                serde_json::json!({"name": a.name, "outcome": outcome, "exit_status": status})
            );
        }
        let _ = client.close().await;
        Ok(ExitCode::from(status))
    })
}

fn change_json(c: &LeaderChange) -> serde_json::Value {
    serde_json::json!({"revision": c.revision, "leader": c.leader.as_ref().map(leader_json)})
}

/// `tenure leader`: exit status 1 when there is no leader (without `--watch`).
pub fn leader(a: LeaderArgs) -> anyhow::Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(async move {
        let client = a.target.client()?;
        let elections = client.elections();
        if !a.watch {
            let l = elections
                .leader(&a.name)
                .await
                .map_err(|e| explain(e, "reading the leader of", &a.name))?;
            if a.json {
                println!(
                    "{}",
                    serde_json::json!({"name": a.name, "leader": l.as_ref().map(leader_json)})
                );
            } else {
                match &l {
                    Some(l) => println!("{}: {}", a.name, leader_line(l)),
                    None => println!("{}: no leader", a.name),
                }
            }
            let _ = client.close().await;
            return anyhow::Ok(if l.is_some() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            });
        }
        let mut o = elections
            .observe(&a.name)
            .await
            .map_err(|e| explain(e, "observing", &a.name))?;
        if !a.json {
            eprintln!("observing {} (Ctrl-C to stop)", a.name);
        }
        loop {
            let c = tokio::select! {
                c = o.next() => c,
                _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
            };
            let c = match c {
                None => bail!("observing {}: the observation stopped", a.name),
                Some(Err(e)) => return Err(explain(e, "observing", &a.name)),
                Some(Ok(c)) => c,
            };
            let mut out = std::io::stdout().lock();
            if a.json {
                writeln!(out, "{}", change_json(&c))?;
            } else {
                match &c.leader {
                    Some(l) => writeln!(out, "{} leader {}", c.revision, leader_line(l))?,
                    None => writeln!(out, "{} no leader", c.revision)?,
                }
            }
            out.flush()?;
        }
    })
}
