//! Sessions (Chubby, seed 002 §14.4.5; DESIGN §4): a client's lease in one store.
//!
//! A session's existence and TTL are replicated store state ([`Sessions`], changed only
//! through SafeTalk). Its liveness is the manager's volatile business ([`Liveness`]):
//! keep-alives extend a deadline on the manager's clock; when it passes, the manager
//! replicates an expiry, which releases the session's locks. After a manager change the
//! new manager extends every session by a grace period before expiring any, so clients
//! whose keep-alives went to the old manager are not cut off by the failover.
//!
//! That extension counts from the first epoch change *after the session's last renewal*,
//! not from every takeover: a manager answers a session's first keep-alive of its epoch
//! only once a replicated note of it, `renewed` (the epoch), is committed, and every
//! device notes when it first saw each epoch of a store ([`EpochsSeen`]). No keep-alive
//! answered in epoch `e` or before was sent after any device learned of an epoch past `e`
//! (a later epoch is made only once a quorum of `e`'s chunks stopped serving `e`, or by
//! `e`'s manager after it stopped answering), so a session last renewed in `e` needs
//! `TTL + grace` from the moment this device first saw a later epoch, and no more. A
//! client that gave up (closed after an unknown outcome, or crashed) thus loses its
//! locks `TTL + grace` after the first failover, however many follow; before, each
//! takeover granted it a fresh `TTL + grace`, and under back-to-back faults its lock
//! stayed held for tens of seconds (chaos seed 41: 30 s on a 5 s TTL). A relayout keeps
//! the manager's own deadlines ([`Liveness::relayout`]).
//!
//! The client keeps its own conservative deadline, [`client_deadline`]: the local time
//! at which it *sent* the keep-alive that was answered, plus the TTL, minus `δ_c`. The
//! manager's deadline is set on receipt (later than the send) on a clock at most `δ_c`
//! away, so the client's deadline never falls after the manager's in real time: a client
//! that stops using its locks at its deadline never overlaps a successor holder.

use crate::ids::{Epoch, SessionId, StoreId};
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Replicated record of one session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// Time to live between keep-alives.
    pub ttl: Duration,
    /// The newest epoch in which a keep-alive of the session was answered (or it was
    /// opened): committed before that answer left.
    pub renewed: Epoch,
    /// The session's child sessions in other stores, one per store, each recorded
    /// before any request ran under it and never replaced (DESIGN §4, "One session per
    /// client"): the keep-alives of this session renew them too.
    #[serde(with = "crate::generation::session_children")]
    pub children: BTreeMap<StoreId, SessionId>,
}

/// When this device first saw each recent epoch of one store (its own clock; volatile: a
/// restarted device knows only what it saw since). Any such time is after the epoch was
/// made, so the earliest of the epochs past `e` bounds every keep-alive answered in `e`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EpochsSeen(BTreeMap<Epoch, Instant>);

impl EpochsSeen {
    /// Epochs remembered per store; older ones are forgotten (which only makes the bound
    /// later, never unsafe).
    pub const KEPT: usize = 64;

    /// `epoch` was seen at `now` (the first sighting counts).
    pub fn saw(&mut self, epoch: Epoch, now: Instant) {
        self.0.entry(epoch).or_insert(now);
        while self.0.len() > Self::KEPT {
            self.0.pop_first();
        }
    }

    /// The first time an epoch after `e` was seen, if any was.
    pub fn first_after(&self, e: Epoch) -> Option<Instant> {
        self.0.range(e.next()..).map(|(_, t)| *t).min()
    }
}

/// The replicated session table of a store.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sessions {
    /// Open sessions.
    #[serde(with = "crate::persist_serde::ord_map")]
    pub open: imbl::OrdMap<SessionId, SessionRecord>,
}

/// Typed session errors.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum SessionError {
    /// The session expired (or never existed in this store).
    #[error("session {} expired", .0.0)]
    Expired(SessionId),
    /// The requested TTL is outside the allowed range.
    #[error("ttl {0:?} out of range (500ms..=3600s)")]
    BadTtl(Duration),
}

/// Smallest and largest TTL a session may ask for.
pub const TTL_MIN: Duration = Duration::from_millis(500);
/// Largest TTL.
pub const TTL_MAX: Duration = Duration::from_secs(3600);

/// Check a requested TTL.
pub fn check_ttl(ttl: Duration) -> Result<(), SessionError> {
    if (TTL_MIN..=TTL_MAX).contains(&ttl) {
        Ok(())
    } else {
        Err(SessionError::BadTtl(ttl))
    }
}

/// The client-side deadline rule: `local send time + TTL − δ_c`.
pub fn client_deadline(sent_at: Instant, ttl: Duration, clock_drift: Duration) -> Instant {
    (sent_at + ttl).saturating_sub(clock_drift)
}

/// The manager's volatile view of session liveness.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Liveness {
    /// Deadline of each session on the manager's clock.
    pub deadline: BTreeMap<SessionId, Instant>,
    /// Expiries already submitted for replication (not submitted twice).
    pub expiring: std::collections::BTreeSet<SessionId>,
}

impl Liveness {
    /// A manager took over: every session gets its TTL plus the grace period, before any
    /// is expired, counted from the first epoch after its last renewal that this device
    /// saw (at the latest, now).
    pub fn take_over(
        sessions: &Sessions,
        now: Instant,
        grace: Duration,
        seen: &EpochsSeen,
    ) -> Liveness {
        Liveness {
            deadline: sessions
                .open
                .iter()
                .map(|(id, r)| {
                    let since = seen.first_after(r.renewed).map_or(now, |t| t.min(now));
                    (*id, since + r.ttl + grace)
                })
                .collect(),
            expiring: Default::default(),
        }
    }

    /// A relayout by this manager ended: the deadlines it kept stand (it answered every
    /// keep-alive behind them), but none ends before `grace` from now, for keep-alives
    /// refused while the store was in transition. Sessions opened in the transition's
    /// merge get TTL + grace; expiries not committed are due again.
    pub fn relayout(&mut self, sessions: &Sessions, now: Instant, grace: Duration) {
        let old = std::mem::take(&mut self.deadline);
        self.expiring.clear();
        self.deadline = sessions
            .open
            .iter()
            .map(|(id, r)| {
                let d = old
                    .get(id)
                    .map_or(now + r.ttl + grace, |d| (*d).max(now + grace));
                (*id, d)
            })
            .collect();
    }

    /// Planted bug (tests only): every session is due now, as if the new manager gave no
    /// grace and no TTL.
    pub fn plant_no_grace(&mut self, now: Instant) {
        for d in self.deadline.values_mut() {
            *d = now;
        }
    }

    /// A session was opened (its open was applied).
    pub fn opened(&mut self, id: SessionId, ttl: Duration, now: Instant) {
        self.deadline.insert(id, now + ttl);
    }

    /// A keep-alive arrived: extend the deadline. Expired or expiring sessions stay dead.
    pub fn keep_alive(
        &mut self,
        sessions: &Sessions,
        id: SessionId,
        now: Instant,
    ) -> Result<Instant, SessionError> {
        let rec = sessions.open.get(&id).ok_or(SessionError::Expired(id))?;
        if self.expiring.contains(&id) {
            return Err(SessionError::Expired(id));
        }
        let d = self.deadline.entry(id).or_insert(now);
        if *d < now {
            // Past its deadline: the expiry is due even if not yet replicated.
            return Err(SessionError::Expired(id));
        }
        *d = (*d).max(now + rec.ttl);
        Ok(*d)
    }

    /// Whether a session is alive at `now` (for grants: a wait that ends after the
    /// session's deadline is not a grant).
    pub fn alive(&self, id: SessionId, now: Instant) -> bool {
        !self.expiring.contains(&id) && self.deadline.get(&id).is_some_and(|d| *d >= now)
    }

    /// Sessions whose deadline has passed and whose expiry is not yet submitted; marks
    /// them as expiring.
    pub fn due(&mut self, now: Instant) -> Vec<SessionId> {
        let due: Vec<SessionId> = self
            .deadline
            .iter()
            .filter(|(id, d)| **d < now && !self.expiring.contains(id))
            .map(|(id, _)| *id)
            .collect();
        self.expiring.extend(due.iter().copied());
        due
    }

    /// The session's expiry was applied.
    pub fn expired(&mut self, id: SessionId) {
        self.deadline.remove(&id);
        self.expiring.remove(&id);
    }

    /// The first instant at which a session not yet handled is past its deadline (a
    /// session is alive *at* its deadline, and due just after it).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadline
            .iter()
            .filter(|(id, _)| !self.expiring.contains(id))
            .map(|(_, d)| *d + Duration::from_micros(1))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::Version;

    fn table(ids: &[u64]) -> Sessions {
        Sessions {
            open: ids
                .iter()
                .map(|i| {
                    (
                        SessionId(*i),
                        SessionRecord {
                            ttl: Duration::from_secs(10),
                            renewed: Epoch(3),
                            children: Default::default(),
                        },
                    )
                })
                .collect(),
        }
    }

    // seed 002 §14.4.5 (Chubby): keep-alives extend a session; without them it expires.
    #[test]
    fn keep_alive_extends_and_silence_expires() {
        let s = table(&[1]);
        let mut l = Liveness::default();
        l.opened(SessionId(1), Duration::from_secs(10), Instant(0));
        let d = l.keep_alive(&s, SessionId(1), Instant(5_000_000)).unwrap();
        assert_eq!(d, Instant(15_000_000));
        assert!(l.due(Instant(14_000_000)).is_empty());
        assert_eq!(l.due(Instant(15_000_001)), vec![SessionId(1)]);
        assert!(l.due(Instant(16_000_000)).is_empty(), "not submitted twice");
        assert_eq!(
            l.keep_alive(&s, SessionId(1), Instant(16_000_000)),
            Err(SessionError::Expired(SessionId(1)))
        );
    }

    // DESIGN §4: a new manager extends every session by the grace period first.
    #[test]
    fn take_over_grants_grace_before_any_expiry() {
        let s = table(&[1, 2]);
        let seen = EpochsSeen::default();
        let mut l = Liveness::take_over(&s, Instant(100_000_000), Duration::from_secs(5), &seen);
        assert!(l.due(Instant(114_000_000)).is_empty());
        assert_eq!(l.due(Instant(115_000_001)).len(), 2);
    }

    // DESIGN §4, sessions across failovers: a session last renewed in epoch 3 gets TTL +
    // grace from the first later epoch this device saw, not from each takeover; one
    // renewed in the epoch just ended (no later epoch seen before now) from now.
    #[test]
    fn take_over_counts_from_the_first_epoch_after_the_last_renewal() {
        let mut s = table(&[1, 2]);
        s.open.get_mut(&SessionId(2)).unwrap().renewed = Epoch(5);
        let mut seen = EpochsSeen::default();
        seen.saw(Epoch(3), Instant(1_000_000));
        seen.saw(Epoch(4), Instant(20_000_000));
        seen.saw(Epoch(5), Instant(40_000_000));
        seen.saw(Epoch(4), Instant(45_000_000)); // the first sighting counts
        let grace = Duration::from_secs(5);
        let l = Liveness::take_over(&s, Instant(50_000_000), grace, &seen);
        assert_eq!(l.deadline[&SessionId(1)], Instant(35_000_000));
        assert_eq!(l.deadline[&SessionId(2)], Instant(65_000_000));
        // Without sightings, every session counts from now.
        let l = Liveness::take_over(&s, Instant(50_000_000), grace, &EpochsSeen::default());
        assert_eq!(l.deadline[&SessionId(1)], Instant(65_000_000));
    }

    #[test]
    fn epochs_seen_keeps_the_newest() {
        let mut seen = EpochsSeen::default();
        for e in 0..(EpochsSeen::KEPT as u64 + 10) {
            seen.saw(Epoch(e), Instant(e));
        }
        assert_eq!(seen.first_after(Epoch(0)), Some(Instant(10)));
        assert_eq!(seen.first_after(Epoch(100)), None);
    }

    // A relayout keeps the manager's deadlines, with the grace as a floor.
    #[test]
    fn relayout_keeps_deadlines_with_a_floor_of_grace() {
        let s = table(&[1, 2, 3]);
        let mut l = Liveness::default();
        l.opened(SessionId(1), Duration::from_secs(10), Instant(0));
        l.opened(SessionId(2), Duration::from_secs(10), Instant(50_000_000));
        l.deadline.insert(SessionId(9), Instant(0)); // ended in the transition
        l.expiring.insert(SessionId(1));
        l.relayout(&s, Instant(55_000_000), Duration::from_secs(2));
        assert_eq!(l.deadline[&SessionId(1)], Instant(57_000_000));
        assert_eq!(l.deadline[&SessionId(2)], Instant(60_000_000));
        assert_eq!(l.deadline[&SessionId(3)], Instant(67_000_000));
        assert!(!l.deadline.contains_key(&SessionId(9)));
        assert!(l.expiring.is_empty());
    }

    // DESIGN §4: the client's deadline (send time + TTL − δ_c) is never after the
    // manager's (receipt time + TTL on a clock at most δ_c behind).
    #[test]
    fn client_deadline_is_conservative() {
        let drift = Duration::from_millis(50);
        let ttl = Duration::from_secs(10);
        for (send, delay, skew) in [(0u64, 0u64, 0i64), (1000, 30_000, 50_000), (7, 1, -50_000)] {
            let client = client_deadline(Instant(send), ttl, drift);
            // manager clock = client clock + skew, |skew| <= drift; receipt after delay
            let mgr_now = (send + delay) as i64 + skew;
            let mgr_deadline_in_client_time = mgr_now + ttl.as_micros() as i64 - skew;
            assert!(client.0 as i64 <= mgr_deadline_in_client_time);
        }
    }

    #[test]
    fn ids_are_unique_per_version() {
        let a = SessionId::from_version(Version {
            epoch: Epoch(2),
            seq: 1,
        });
        let b = SessionId::from_version(Version {
            epoch: Epoch(3),
            seq: 1,
        });
        assert_ne!(a, b);
        assert!(check_ttl(Duration::from_millis(10)).is_err());
    }
}
