//! Standing state: objects put and locks taken before the faults begin, left in the
//! cluster through the whole run (`--fill-objects`, `--fill-locks`, `--fill-sessions`),
//! so that every fault, recovery and the full restart happen at a realistic size instead
//! of on an almost empty cluster.
//!
//! The locks are held by sessions of their own that do nothing but keep alive (the
//! client library's keep-alives), with a session TTL far longer than any single fault:
//! a coordination service must keep every one of them. After the full restart two checks
//! read the state back:
//!
//! - **standing locks kept**: no standing session expired (the client was never told its
//!   session ended), and every standing lock is held by its session alone, with the token
//!   of its grant;
//! - **standing objects intact**: every standing object reads back with the content it
//!   was put with.
//!
//! Reads that do not finish within their time bound leave the check `unchecked`, never
//! passed.

use crate::check::CheckResult;
use crate::devices::Target;
use anyhow::{Context, bail};
use futures::StreamExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tenure_client::{Client, ClientOptions, FencingToken, LockGuard, LockMode, Wait};

/// First path segments the standing keys and lock names are spread over (so over every
/// store).
const PREFIXES: usize = 500;
/// Concurrent puts of the fill, and concurrent reads of the checks.
const CONCURRENCY: usize = 64;
/// Acquires in flight per standing session.
const PER_SESSION: usize = 16;
/// Tries of one put or acquire of the fill before the run gives up (the cluster is
/// fault-free then).
const TRIES: usize = 5;
/// How long the checks' reads may take, each.
const READ_LIMIT: Duration = Duration::from_secs(180);
/// Violations listed by name (the rest are counted).
const LISTED: usize = 20;

/// How much standing state a run holds.
#[derive(Clone, Debug)]
pub struct StandingConfig {
    /// Objects put before the faults.
    pub objects: usize,
    /// Size of each object, in bytes.
    pub size: usize,
    /// Locks held through the run.
    pub locks: usize,
    /// Sessions holding them.
    pub sessions: usize,
    /// Their session TTL.
    pub ttl: Duration,
}

impl Default for StandingConfig {
    fn default() -> Self {
        StandingConfig {
            objects: 0,
            size: 256,
            locks: 0,
            sessions: 100,
            ttl: Duration::from_secs(30),
        }
    }
}

impl StandingConfig {
    /// Whether there is any standing state.
    pub fn any(&self) -> bool {
        self.objects > 0 || self.locks > 0
    }
}

/// The key of standing object `i`.
pub fn object_key(i: usize) -> String {
    format!("/standing{}/o{i}", i % PREFIXES)
}

/// The content of standing object `i`: its number, then padding to `size`.
pub fn object_content(i: usize, size: usize) -> Vec<u8> {
    let mut c = format!("standing object {i}:").into_bytes();
    c.resize(size.max(c.len()), b'0' + (i % 10) as u8);
    c
}

/// The names standing session `s` holds, `n` of them.
fn lock_names(s: usize, n: usize) -> Vec<String> {
    (0..n)
        .map(|j| format!("/standinglock{}/s{s}/l{j}", (s + j) % PREFIXES))
        .collect()
}

/// One standing session and the locks it holds.
struct Holder {
    client: Client,
    guards: Vec<LockGuard>,
}

/// The standing state of a run, held until [`Standing::check`].
pub struct Standing {
    cfg: StandingConfig,
    holders: Vec<Holder>,
    /// Seconds the objects took to put.
    pub fill_s: f64,
    /// Seconds the locks took to take.
    pub hold_s: f64,
}

impl Standing {
    /// Nothing standing.
    pub fn none() -> Standing {
        Standing {
            cfg: StandingConfig::default(),
            holders: Vec::new(),
            fill_s: 0.0,
            hold_s: 0.0,
        }
    }

    /// Put the objects and take the locks of `cfg` (the cluster must be up and
    /// fault-free). Fails if any put or acquire fails [`TRIES`] times.
    pub async fn fill(target: &Target, cfg: &StandingConfig) -> anyhow::Result<Standing> {
        let started = Instant::now();
        put_objects(target, cfg).await?;
        let fill_s = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let holders = take_locks(target, cfg).await?;
        Ok(Standing {
            cfg: cfg.clone(),
            holders,
            fill_s,
            hold_s: started.elapsed().as_secs_f64(),
        })
    }

    /// The checks (none without standing state), after the full restart that began at
    /// `restart`: first every standing session is given until a TTL (and ten seconds)
    /// after the restart to be kept alive again, or told it expired.
    pub async fn check(&self, target: &Target, restart: Instant) -> Vec<CheckResult> {
        let mut out = Vec::new();
        if self.cfg.locks > 0 {
            let drift = ClientOptions::default().clock_drift;
            let renewed = |h: &Holder| {
                h.guards.first().is_none_or(|g| {
                    let st = *g.watch().borrow();
                    st.expired || st.deadline > restart + self.cfg.ttl - drift
                })
            };
            let until = Instant::now().max(restart + self.cfg.ttl) + Duration::from_secs(10);
            while !self.holders.iter().all(renewed) && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            out.push(self.check_locks(target).await);
        }
        if self.cfg.objects > 0 {
            out.push(check_objects(target, &self.cfg).await);
        }
        out
    }

    /// The standing locks: name, and the (home store, id) of the session holding it.
    pub fn locks(&self) -> impl Iterator<Item = (&str, u32, u64)> {
        (self.holders.iter())
            .flat_map(|h| h.guards.iter())
            .map(|g| (g.name(), g.session_store(), g.session()))
    }

    /// Release the locks and close the sessions.
    pub async fn release(self) {
        let closes = self.holders.into_iter().map(|h| async move {
            for g in h.guards {
                let _ = tokio::time::timeout(Duration::from_secs(5), g.release()).await;
            }
            let _ = tokio::time::timeout(Duration::from_secs(5), h.client.close()).await;
        });
        futures::stream::iter(closes)
            .buffer_unordered(CONCURRENCY)
            .collect::<Vec<()>>()
            .await;
    }

    async fn check_locks(&self, target: &Target) -> CheckResult {
        const NAME: &str = "standing locks kept";
        let mut violations = Vec::new();
        let mut expired = 0;
        for h in &self.holders {
            let Some(g) = h.guards.first() else { continue };
            if g.watch().borrow().expired {
                expired += 1;
                if violations.len() < LISTED {
                    violations.push(format!(
                        "standing session {} of store {} expired, with {} locks",
                        g.session(),
                        g.store(),
                        h.guards.len()
                    ));
                }
            }
        }
        let Ok(reader) = target.client(ClientOptions::default()) else {
            return CheckResult::new(NAME, violations, true, "no client to read".into());
        };
        // A lock held in another store than its session's home is held by that session's
        // child there, under an id of that store: the grant's token (unique per name) is
        // what identifies it.
        let wanted: Vec<(String, FencingToken)> = (self.holders.iter())
            .flat_map(|h| h.guards.iter())
            .map(|g| (g.name().to_string(), g.token()))
            .collect();
        let deadline = Instant::now() + READ_LIMIT;
        let results: Vec<Option<Result<(), String>>> = futures::stream::iter(wanted.iter())
            .map(|(name, token)| {
                let reader = reader.clone();
                async move {
                    if Instant::now() >= deadline {
                        return None;
                    }
                    let read = tokio::time::timeout_at(deadline.into(), reader.holders(name));
                    let st = read.await.ok()?.ok()?;
                    let tokens: Vec<FencingToken> = st.holders.iter().map(|h| h.token).collect();
                    Some(if tokens == [*token] {
                        Ok(())
                    } else {
                        let tokens: Vec<String> = tokens.iter().map(|t| t.to_string()).collect();
                        Err(format!(
                            "{name}: held with tokens {tokens:?}, granted with {token}"
                        ))
                    })
                }
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let _ = reader.close().await;
        let (unread, wrong) = tally(results, &mut violations);
        let detail = format!(
            "{} locks in {} sessions: {} read back, {wrong} not held as granted, {unread} not read in time; {expired} sessions expired",
            wanted.len(),
            self.holders.len(),
            wanted.len() - unread,
        );
        CheckResult::new(NAME, violations, unread > 0, detail)
    }
}

/// The reads of a check: (not read in time, read but wrong); the first wrong ones (up to
/// [`LISTED`] in all) go into `violations`.
fn tally(results: Vec<Option<Result<(), String>>>, violations: &mut Vec<String>) -> (usize, usize) {
    let unread = results.iter().filter(|r| r.is_none()).count();
    let mut wrong = 0;
    for e in results.into_iter().flatten().filter_map(Result::err) {
        wrong += 1;
        if violations.len() < LISTED {
            violations.push(e);
        }
    }
    (unread, wrong)
}

fn client(target: &Target, name: &str, ttl: Option<Duration>) -> anyhow::Result<Client> {
    let mut opts = ClientOptions {
        client_name: name.to_string(),
        ..Default::default()
    };
    if let Some(ttl) = ttl {
        opts.session_ttl = ttl;
    }
    Ok(target.client(opts)?)
}

async fn put_objects(target: &Target, cfg: &StandingConfig) -> anyhow::Result<()> {
    if cfg.objects == 0 {
        return Ok(());
    }
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for w in 0..CONCURRENCY {
        let c = client(target, &format!("standing-fill-{w}"), None)?;
        let (next, n, size) = (next.clone(), cfg.objects, cfg.size);
        tasks.push(tokio::spawn(async move {
            let objects = c.objects();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let (key, value) = (object_key(i), object_content(i, size));
                let mut tries = 0;
                while let Err(e) = objects.put(&key, value.clone()).await {
                    tries += 1;
                    if tries >= TRIES {
                        let _ = c.close().await;
                        bail!("putting standing object {key}: {e}");
                    }
                }
            }
            let _ = c.close().await;
            Ok(())
        }));
    }
    for t in tasks {
        t.await.context("a fill task panicked")??;
    }
    Ok(())
}

async fn take_locks(target: &Target, cfg: &StandingConfig) -> anyhow::Result<Vec<Holder>> {
    if cfg.locks == 0 {
        return Ok(Vec::new());
    }
    let sessions = cfg.sessions.clamp(1, cfg.locks);
    let mut tasks = Vec::new();
    for s in 0..sessions {
        let n = cfg.locks / sessions + usize::from(s < cfg.locks % sessions);
        let c = client(target, &format!("standing-{s}"), Some(cfg.ttl))?;
        tasks.push(tokio::spawn(async move {
            let guards: Vec<anyhow::Result<LockGuard>> = futures::stream::iter(lock_names(s, n))
                .map(|name| {
                    let c = c.clone();
                    async move {
                        let mut tries = 0;
                        loop {
                            match c.lock(&name, LockMode::Exclusive, Wait::Try).await {
                                Ok(g) => return Ok(g),
                                Err(e) if tries + 1 >= TRIES => {
                                    bail!("taking standing lock {name}: {e}")
                                }
                                Err(_) => tries += 1,
                            }
                        }
                    }
                })
                .buffer_unordered(PER_SESSION)
                .collect()
                .await;
            let guards = guards.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
            Ok::<Holder, anyhow::Error>(Holder { client: c, guards })
        }));
    }
    let mut holders = Vec::new();
    for t in tasks {
        holders.push(t.await.context("a lock task panicked")??);
    }
    Ok(holders)
}

async fn check_objects(target: &Target, cfg: &StandingConfig) -> CheckResult {
    const NAME: &str = "standing objects intact";
    let Ok(reader) = target.client(ClientOptions::default()) else {
        return CheckResult::new(NAME, Vec::new(), true, "no client to read".into());
    };
    let deadline = Instant::now() + READ_LIMIT;
    let size = cfg.size;
    let results: Vec<Option<Result<(), String>>> = futures::stream::iter(0..cfg.objects)
        .map(|i| {
            let objects = reader.objects();
            async move {
                if Instant::now() >= deadline {
                    return None;
                }
                let key = object_key(i);
                let read = tokio::time::timeout_at(deadline.into(), objects.get(&key));
                Some(match read.await.ok()? {
                    Ok(o) if o.data.as_ref() == object_content(i, size).as_slice() => Ok(()),
                    Ok(o) => Err(format!(
                        "{key}: read {} bytes of other content",
                        o.data.len()
                    )),
                    Err(tenure_client::Error::NoSuchObject(_)) => Err(format!("{key}: missing")),
                    // Another error (unavailable, timed out): not read.
                    Err(_) => return None,
                })
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let _ = reader.close().await;
    let mut violations = Vec::new();
    let (unread, wrong) = tally(results, &mut violations);
    let detail = format!(
        "{} objects: {} read back, {wrong} missing or changed, {unread} not read in time",
        cfg.objects,
        cfg.objects - unread
    );
    CheckResult::new(NAME, violations, unread > 0, detail)
}
