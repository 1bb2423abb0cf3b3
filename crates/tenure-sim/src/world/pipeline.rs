//! Pipelining lock clients: the session stream of DESIGN §8 as the client library uses
//! it. A pipelining client keeps up to `n` requests in flight on its session (acquires,
//! releases and holder reads, each on a lock name no other of its outstanding requests
//! is about, each acquire and release with its own request id), plus its keep-alives;
//! the manager answers them in any order. The stream ends when any answer is a
//! redirect (`NotManager`) or `Unavailable`, or when a request goes unanswered past its
//! client-side timeout: the client then resumes the session on the hinted (or a random)
//! device and re-sends every unanswered request there with its original request id, and
//! whatever the left stream still delivers is not heard.
//!
//! The history stays truthful: a re-sent request whose earlier attempt went unanswered
//! may have taken effect where that attempt went, so it counts as a lost attempt (its
//! failure, if it fails, is an unknown outcome), exactly as for a client-side timeout of
//! a one-at-a-time client. Everything else — the session deadline, what the client
//! believes it holds, how answers enter the history — is the one-at-a-time client's
//! ([`super::clients`]), so every checker keeps its meaning.

use super::clients::{Kind, LockReq};
use super::{CLIENT_TIMEOUT_US, World};
use std::collections::BTreeSet;
use tenure_core::DeviceId;
use tenure_core::io::{Request, WaitSpec};
use tenure_core::lockctl::SessionId;

impl World {
    /// A pipelining client's next actions: a burst of requests, as many as it has room
    /// for at most. It opens a session only with nothing in flight, and sends nothing
    /// while its session is being opened or closed.
    pub(super) fn pipe_step(&mut self, c: usize, depth: usize) {
        let cl = &self.lock_clients[c];
        let settling = self
            .requests_of(c)
            .any(|r| matches!(r.kind, Kind::Open | Kind::Close));
        if cl.inflight.len() >= depth || settling || self.now < cl.burst_at {
            return;
        }
        if self.client_fault(c) {
            return;
        }
        let cl = &self.lock_clients[c];
        let Some(session) = cl.session.as_ref().map(|s| s.id) else {
            if cl.inflight.is_empty() {
                self.open(c);
            }
            return;
        };
        let room = depth - cl.inflight.len();
        let burst = 1 + self.lock_rng.below(room as u64);
        for _ in 0..burst {
            if !self.pipe_action(c, session) {
                break;
            }
        }
        // The next burst after a think time shared by the requests it may keep in
        // flight (about the rate of a client that thinks once per answer); answers
        // arriving earlier wait for it.
        let think = (self.lock_knobs.think_mean_us / (4 * depth as u64)).max(1_000);
        let gap = super::exp(&mut self.lock_rng, think);
        self.lock_clients[c].burst_at = self.now + gap;
        self.schedule(self.now + gap, super::Event::LockStep(c));
    }

    /// One request on a name with nothing else in flight: release a held lock, read the
    /// holders, close the session (only with nothing in flight) or acquire a free
    /// name. Returns whether the burst may go on.
    fn pipe_action(&mut self, c: usize, session: SessionId) -> bool {
        let busy = self.busy_names(c);
        let cl = &self.lock_clients[c];
        let held: Vec<String> = cl
            .held
            .keys()
            .filter(|n| !busy.contains(*n))
            .cloned()
            .collect();
        let idle: Vec<String> = cl
            .names
            .iter()
            .filter(|n| !busy.contains(*n))
            .cloned()
            .collect();
        let free: Vec<String> = idle
            .iter()
            .filter(|n| !cl.held.contains_key(*n) && !cl.tainted.contains(*n))
            .cloned()
            .collect();
        let empty = cl.inflight.is_empty();
        let (holders_p, close_p) = (self.lock_knobs.holders_p, self.lock_knobs.close_p);
        let r = &mut self.lock_rng;
        if !held.is_empty() && (free.is_empty() || r.chance(0.6)) {
            let name = held[r.below(held.len() as u64) as usize].clone();
            self.release(c, name);
            return true;
        }
        if idle.is_empty() {
            return false;
        }
        if r.chance(holders_p) || free.is_empty() {
            let name = idle[r.below(idle.len() as u64) as usize].clone();
            self.holders(c, name);
            return true;
        }
        if empty && r.chance(close_p) {
            self.close(c, session);
            return false;
        }
        let name = free[r.below(free.len() as u64) as usize].clone();
        self.acquire(c, session, name);
        true
    }

    /// The client's requests in flight, keep-alive aside.
    fn requests_of(&self, c: usize) -> impl Iterator<Item = &LockReq> {
        self.lock_clients[c]
            .inflight
            .iter()
            .filter_map(|id| self.lock_reqs.get(id))
    }

    /// The names the client's requests in flight are about.
    fn busy_names(&self, c: usize) -> BTreeSet<String> {
        self.requests_of(c)
            .filter_map(|r| r.kind.name().map(str::to_string))
            .collect()
    }

    /// The client's stream to its target ended (a redirect or `Unavailable` answered
    /// `refused`) or went quiet (a client-side timeout, `refused` is `None`): resume the
    /// session on the hinted device, or a random one, and re-send every unanswered
    /// request there with its request id. Every attempt but the refused one may have
    /// taken effect where it went.
    pub(super) fn resume_stream(&mut self, c: usize, hint: Option<DeviceId>, refused: Option<u64>) {
        self.retarget(c, hint);
        let cl = &self.lock_clients[c];
        let ids: Vec<u64> = cl.inflight.iter().copied().chain(cl.keepalive).collect();
        let to = cl.target;
        self.report.locks.stream_resumes += 1;
        self.trace(|| format!("lock client {c} resumes its stream on {to}, re-sending {ids:?}"));
        for id in ids {
            if Some(id) != refused
                && let Some(r) = self.lock_reqs.get_mut(&id)
            {
                r.lost_attempt = true;
                self.report.locks.resent += 1;
            }
            self.lock_retry(id);
        }
    }

    /// How long the client waits for an answer to one attempt: a pipelining client
    /// leaves a waiting acquire its wait on top.
    pub(super) fn request_timeout_us(&self, c: usize, req: &Request) -> u64 {
        match req {
            Request::Acquire {
                wait: WaitSpec::Timeout(d),
                ..
            } if self.lock_clients[c].pipeline.is_some() => {
                CLIENT_TIMEOUT_US + d.as_micros() as u64
            }
            _ => CLIENT_TIMEOUT_US,
        }
    }

    /// A request (not a keep-alive) is about to be sent: count it as pipelined if
    /// another is in flight, and make sure no other is about the same name.
    pub(super) fn note_pipelined(&mut self, c: usize, kind: &Kind) {
        if self.lock_clients[c].inflight.is_empty() {
            return;
        }
        self.report.locks.pipelined += 1;
        if let Some(name) = kind.name() {
            assert!(
                !self.busy_names(c).contains(name),
                "simulator bug: lock client {c} sent a second request on {name}"
            );
        }
    }

    /// Request `id` was answered: count it if a request sent earlier is still waiting
    /// (keep-alives aside).
    pub(super) fn note_out_of_order(&mut self, c: usize, id: u64) {
        let inflight = &self.lock_clients[c].inflight;
        if inflight.contains(&id) && inflight.range(..id).next().is_some() {
            self.report.locks.out_of_order += 1;
        }
    }
}
