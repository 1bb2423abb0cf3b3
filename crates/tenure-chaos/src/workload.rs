//! The workload: clients (one `tenure_client::Client` each, so one session per store
//! each) taking exclusive locks on a few names, holding them briefly and releasing them,
//! now and then reading a lock's holders. Every operation is recorded with its outcome:
//!
//! - an acquire answered with a grant is `Granted`; one refused by the store (the wait
//!   timed out in the queue, the session had ended) is `Fail`; one the client gave up on
//!   itself (its own bound on a timed wait, retries exhausted, a broken connection) is
//!   `Unknown` — it may still be granted later. The client's own bound on a timed wait
//!   ends `wait + wait_slack` after the call, so a `Timeout` that late is the client's.
//! - after any `Unknown`, the worker closes its client and starts a new one, recording an
//!   unknown release of the name on the old session (closing ends the session and frees
//!   what it holds, or it expires): nothing the history does not know stays held.
//! - a grant starts a holding interval, which ends when the worker sends the release or
//!   when [`LockGuard::lost`] fires (the session's conservative deadline is near), at the
//!   earlier of that moment and the deadline.
//! - a release answered `NotHeld` or `SessionExpired` on a session whose end the client
//!   learned of, or whose deadline had passed, is preceded by an `Expiry`: the session's
//!   end released the lock some time after its last conservative deadline.

use crate::devices::Target;
use crate::history::{Hold, Op, OpKind, Outcome, Recorder};
use std::time::{Duration, Instant};
use tenure_client::{Client, ClientOptions, Error, LockGuard, LockMode, Wait};
use tenure_core::rng::Rng;
use tokio::sync::watch;

/// Workload settings.
#[derive(Clone, Debug)]
pub struct WorkloadConfig {
    /// Lock names: the bases of the names used (see [`WorkloadConfig::name`]).
    pub names: Vec<String>,
    /// How long one generation of the names is used: then every worker moves on to the
    /// next (`/chaos0/lock.0`, `/chaos0/lock.1`, …, in the same store). Each name's
    /// history stays short enough for the linearizability search, whatever the run's
    /// length — Jepsen's independent keys. An operation whose outcome is unknown stays a
    /// candidate to the end of its name's history, so on one name for a whole long run
    /// their number makes the search exponential.
    pub period: Duration,
    /// Stores of the cluster.
    pub stores: u32,
    /// Session TTL the clients ask for.
    pub ttl: Duration,
    /// Timed wait of an acquire.
    pub acquire_wait: Duration,
    /// Longest hold.
    pub hold_max: Duration,
}

impl WorkloadConfig {
    /// Generation of the names at `us` (µs since the run started).
    pub fn generation(&self, us: u64) -> u64 {
        us / (self.period.as_micros() as u64).max(1)
    }

    /// Name `i` of generation `generation`.
    pub fn name(&self, i: usize, generation: u64) -> String {
        format!("{}.{generation}", self.names[i % self.names.len()])
    }

    /// Every name used up to `us`, generation by generation.
    pub fn names_up_to(&self, us: u64) -> Vec<String> {
        (0..=self.generation(us))
            .flat_map(|g| (0..self.names.len()).map(move |i| (i, g)))
            .map(|(i, g)| self.name(i, g))
            .collect()
    }
}

/// A lock a worker still holds when the workload stops.
pub struct HeldAtEnd {
    /// Worker.
    pub client_index: u64,
    /// The guard (keeps the lock; its watch tells whether the session lives).
    pub guard: LockGuard,
    /// The worker's client (its keep-alives keep the session).
    pub client: Client,
}

fn new_client(target: &Target, idx: u64, ttl: Duration) -> anyhow::Result<Client> {
    let opts = ClientOptions {
        session_ttl: ttl,
        client_name: format!("chaos-{idx}"),
        ..Default::default()
    };
    Ok(target.client(opts)?)
}

/// Whether an acquire's error means the store refused it (no effect).
fn refused(e: &Error, elapsed: Duration, wait: Duration, slack: Duration) -> bool {
    match e {
        Error::Timeout(_) => elapsed + Duration::from_millis(20) < wait + slack,
        Error::WouldBlock(_) | Error::Deadlock(_) | Error::SessionExpired(_) => true,
        _ => false,
    }
}

struct Worker {
    idx: u64,
    target: Target,
    cfg: WorkloadConfig,
    rec: Recorder,
    rng: Rng,
    /// One client per store of the names: each client's one session is homed in its
    /// store, so a hold is recorded under the session the store itself names (a session
    /// of another store would hold through its child, whose id the history cannot know).
    clients: std::collections::HashMap<u32, Client>,
}

impl Worker {
    /// The client for names of `store`.
    fn client(&mut self, store: u32) -> anyhow::Result<Client> {
        if let Some(c) = self.clients.get(&store) {
            return Ok(c.clone());
        }
        let c = new_client(&self.target, self.idx, self.cfg.ttl)?;
        self.clients.insert(store, c.clone());
        Ok(c)
    }

    fn store(&self, name: &str) -> u32 {
        tenure_core::config::store_of(name, self.cfg.stores).0
    }

    async fn session_id(&self, store: u32) -> u64 {
        let Some(c) = self.clients.get(&store) else {
            return 0;
        };
        c.session_state().await.map_or(0, |(_, id, _)| id)
    }

    fn op(&self, kind: OpKind, name: &str, session: u64, invoke: u64, outcome: Outcome) {
        let response_us = match outcome {
            Outcome::Unknown(_) => None,
            _ => Some(self.rec.now()),
        };
        self.rec.op(Op {
            client: self.idx,
            kind,
            name: name.to_string(),
            store: self.store(name),
            session,
            invoke_us: invoke,
            response_us,
            outcome,
        });
    }

    /// Close the client (its sessions end, freeing what they hold) and start another.
    fn reset(&mut self, name: &str, session: u64) -> anyhow::Result<()> {
        if session != 0 {
            let now = self.rec.now();
            self.op(
                OpKind::Release,
                name,
                session,
                now,
                Outcome::Unknown("client closed after an unknown outcome".into()),
            );
        }
        let store = self.store(name);
        if let Some(old) = self.clients.remove(&store) {
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(5), old.close()).await;
            });
        }
        Ok(())
    }

    /// One acquire; a grant is returned with its holding interval's index.
    async fn acquire(&mut self, name: &str) -> anyhow::Result<Option<(LockGuard, usize)>> {
        let store = self.store(name);
        let invoke = self.rec.now();
        let started = Instant::now();
        let wait = self.cfg.acquire_wait;
        let client = self.client(store)?;
        let r = client
            .lock(name, LockMode::Exclusive, Wait::Timeout(wait))
            .await;
        match r {
            Ok(g) => {
                let now = self.rec.now();
                let token = g.token();
                self.op(
                    OpKind::Acquire,
                    name,
                    g.session(),
                    invoke,
                    Outcome::Granted { token },
                );
                let h = self.rec.hold(Hold {
                    client: self.idx,
                    name: name.to_string(),
                    store,
                    session: g.session(),
                    token,
                    start_us: now,
                    end_us: None,
                });
                Ok(Some((g, h)))
            }
            Err(e) => {
                let session = self.session_id(store).await;
                let slack = client.options().wait_slack;
                if refused(&e, started.elapsed(), wait, slack) {
                    self.op(
                        OpKind::Acquire,
                        name,
                        session,
                        invoke,
                        Outcome::Fail(e.to_string()),
                    );
                } else {
                    self.op(
                        OpKind::Acquire,
                        name,
                        session,
                        invoke,
                        Outcome::Unknown(e.to_string()),
                    );
                    self.reset(name, session)?;
                }
                Ok(None)
            }
        }
    }

    /// Hold until the hold time passes, the lock may be lost, or the workload stops
    /// (then the guard is handed back).
    async fn hold(
        &mut self,
        g: LockGuard,
        h: usize,
        stop: &mut watch::Receiver<bool>,
    ) -> anyhow::Result<Option<LockGuard>> {
        let hold_for = Duration::from_millis(
            10 + self
                .rng
                .below(self.cfg.hold_max.as_millis().max(11) as u64 - 10),
        );
        let w = g.watch();
        tokio::select! {
            _ = tokio::time::sleep(hold_for) => {}
            _ = g.lost() => {}
            _ = stop.wait_for(|s| *s) => return Ok(Some(g)),
        }
        let st = *w.borrow();
        let end = Instant::now().min(st.deadline);
        self.rec.unhold(h, self.rec.us(end));
        let (name, session) = (g.name().to_string(), g.session());
        let invoke = self.rec.now();
        let r = g.release().await;
        let st = *w.borrow();
        let expired_or_lapsed = st.expired || Instant::now() >= st.deadline;
        let expiry = |me: &Self, known: bool| {
            let at = me.rec.us(st.deadline).min(invoke);
            me.rec.op(Op {
                client: me.idx,
                kind: OpKind::Expiry,
                name: name.clone(),
                store: me.store(&name),
                session,
                invoke_us: at,
                response_us: known.then(|| me.rec.now()),
                outcome: if known {
                    Outcome::Released
                } else {
                    Outcome::Unknown("deadline passed".into())
                },
            });
        };
        match r {
            Ok(()) => self.op(OpKind::Release, &name, session, invoke, Outcome::Released),
            Err(Error::NotHeld(_)) => {
                if expired_or_lapsed {
                    expiry(self, st.expired);
                }
                self.op(OpKind::Release, &name, session, invoke, Outcome::NotHeld);
            }
            Err(Error::SessionExpired(_)) => expiry(self, true),
            Err(e) => {
                self.op(
                    OpKind::Release,
                    &name,
                    session,
                    invoke,
                    Outcome::Unknown(e.to_string()),
                );
                self.reset(&name, 0)?;
            }
        }
        Ok(None)
    }

    async fn read(&mut self, name: &str) {
        let store = self.store(name);
        let invoke = self.rec.now();
        let Ok(client) = self.client(store) else {
            return;
        };
        if let Ok(Ok(st)) =
            tokio::time::timeout(Duration::from_secs(10), client.holders(name)).await
        {
            let holders = st.holders.iter().map(|h| (h.session, h.token)).collect();
            self.op(
                OpKind::Holders,
                name,
                self.session_id(store).await,
                invoke,
                Outcome::Holders(holders),
            );
        }
    }
}

/// Run worker `idx` until `stop` turns true; then take one lock and hand it back held
/// (for the final check), if granted.
pub async fn worker(
    idx: u64,
    target: Target,
    cfg: WorkloadConfig,
    rec: Recorder,
    rng: Rng,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<Option<HeldAtEnd>> {
    let mut w = Worker {
        idx,
        target,
        cfg,
        rec,
        rng,
        clients: Default::default(),
    };
    while !*stop.borrow() {
        let i = w.rng.below(w.cfg.names.len() as u64) as usize;
        let name = w.cfg.name(i, w.cfg.generation(w.rec.now()));
        if w.rng.below(5) == 0 {
            w.read(&name).await;
            continue;
        }
        if let Some((g, h)) = w.acquire(&name).await?
            && let Some(g) = w.hold(g, h, &mut stop).await?
        {
            let client = w.client(w.store(g.name()))?;
            return Ok(Some(HeldAtEnd {
                client_index: idx,
                guard: g,
                client,
            }));
        }
    }
    let name = w.cfg.name(idx as usize, w.cfg.generation(w.rec.now()));
    let Some((g, _)) = w.acquire(&name).await? else {
        return Ok(None);
    };
    let client = w.client(w.store(&name))?;
    Ok(Some(HeldAtEnd {
        client_index: idx,
        guard: g,
        client,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_move_to_the_next_generation_in_the_same_store() {
        let cfg = WorkloadConfig {
            names: vec!["/chaos0/lock".into(), "/chaos1/lock".into()],
            period: Duration::from_secs(60),
            stores: 16,
            ttl: Duration::from_secs(5),
            acquire_wait: Duration::from_secs(3),
            hold_max: Duration::from_millis(300),
        };
        assert_eq!(cfg.generation(59_999_999), 0);
        assert_eq!(cfg.generation(60_000_000), 1);
        assert_eq!(cfg.name(1, 2), "/chaos1/lock.2");
        let all = cfg.names_up_to(125_000_000);
        assert_eq!(all.len(), 6);
        assert_eq!(all[4], "/chaos0/lock.2");
        for n in &all {
            assert!(tenure_core::lockctl::LockName::parse(n).is_ok(), "{n}");
            let base = &cfg.names[usize::from(n.starts_with("/chaos1"))];
            assert_eq!(
                tenure_core::config::store_of(n, 16),
                tenure_core::config::store_of(base, 16)
            );
        }
    }
}
