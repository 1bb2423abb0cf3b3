//! Mutual exclusion among processes (lecture, seed 002 §14.4; Fig. 14.7): the four
//! algorithms the lecture compares, as sans-IO machines.
//!
//! - [`centralized::Centralized`] (§14.4.1): a coordinator queues requests and grants the
//!   lock to one process at a time: request, grant, release.
//! - [`decentralized::Decentralized`] (§14.4.2): every process runs a coordinator that
//!   votes; a requester enters with the votes of a strict majority `m` of the `n`
//!   coordinators, and on refusal gives its votes back, backs off and tries again.
//! - [`ricart_agrawala::RicartAgrawala`] (§14.4.3): a request stamped with a Lamport
//!   clock goes to every other process; a process enters when all have replied.
//! - [`token_ring::TokenRing`] (§14.4.4): a token circulates on a logical ring; its holder
//!   may enter.
//!
//! Every machine has the same contract, in the manner of quinn-proto (see
//! [`MutualExclusion`]): the application's commands [`MutualExclusion::request`] and
//! [`MutualExclusion::release`]; inputs [`MutualExclusion::handle_msg`] and
//! [`MutualExclusion::handle_timeout`] with the local time; outputs
//! [`MutualExclusion::poll_output`] (messages to send, and [`MutexOut::Enter`] when the
//! process may enter its critical section) and [`MutualExclusion::poll_timeout`]. A
//! driver drains `poll_output` after every call. Randomness (the decentralized
//! algorithm's back-off) comes from a seed handed to the constructor.
//!
//! Each machine has a `plant_bug` switch that breaks it on purpose; the lab's
//! mutual-exclusion checker must catch every one of them.

pub mod centralized;
pub mod decentralized;
pub mod ricart_agrawala;
pub mod token_ring;

#[cfg(test)]
mod harness;

use crate::ids::DeviceId;
use crate::time::Instant;

/// What a machine asks its driver to do, or tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum MutexOut<M> {
    /// Send a message.
    Send {
        /// Destination.
        to: DeviceId,
        /// Message.
        msg: M,
    },
    /// The process may now enter its critical section.
    Enter,
}

/// Where a process stands with respect to its critical section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Neither in nor wanting the critical section.
    Idle,
    /// Asked to enter, not yet allowed.
    Wanting,
    /// In the critical section.
    Held,
}

/// A command the application gave at the wrong moment.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MutexError {
    /// `request` while already wanting or holding the critical section.
    #[error("process {0} already wants or holds the critical section")]
    AlreadyRequested(DeviceId),
    /// `release` while not in the critical section.
    #[error("process {0} is not in the critical section")]
    NotHeld(DeviceId),
}

/// One process's mutual-exclusion machine.
pub trait MutualExclusion {
    /// The algorithm's messages.
    type Msg: Clone + std::fmt::Debug;
    /// This process.
    fn id(&self) -> DeviceId;
    /// Where this process stands.
    fn phase(&self) -> Phase;
    /// The application wants to enter its critical section.
    fn request(&mut self, now: Instant) -> Result<(), MutexError>;
    /// The application leaves its critical section.
    fn release(&mut self, now: Instant) -> Result<(), MutexError>;
    /// A message from `from`.
    fn handle_msg(&mut self, now: Instant, from: DeviceId, msg: Self::Msg);
    /// Fire every deadline due at `now` (extra calls are harmless). Algorithms without
    /// timers keep the default, which does nothing.
    fn handle_timeout(&mut self, _now: Instant) {}
    /// The next output, if any.
    fn poll_output(&mut self) -> Option<MutexOut<Self::Msg>>;
    /// The earliest deadline, if any (none, by default: no timers).
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
}

/// The members other than `me`, ascending.
pub(crate) fn others(members: &[DeviceId], me: DeviceId) -> Vec<DeviceId> {
    members.iter().copied().filter(|m| *m != me).collect()
}

/// Members sorted and deduplicated.
pub(crate) fn sorted(members: impl IntoIterator<Item = DeviceId>) -> Vec<DeviceId> {
    let mut v: Vec<DeviceId> = members.into_iter().collect();
    v.sort();
    v.dedup();
    v
}
