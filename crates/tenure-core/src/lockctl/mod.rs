//! # lockctl — the LOCK table of a store's lock controller
//!
//! In Menasce, Popek & Muntz (seed 004 §2) a centralized lock controller (LC) keeps the
//! LOCK table, "a set of all the active locks", and decides whether each lock request is
//! granted; every change reaches the local lock controllers through SafeTalk (§3, L-lists
//! and R-lists) before it is applied. In Tenure the store's manager is the LC and
//! [`LockTable`] is its LOCK table: a pure, deterministic value — no I/O, no clock (time
//! comes in as [`Instant`](crate::time::Instant)), `BTreeMap`s only — that the manager
//! applies replicated operations to and that ships between replicas (Serialize, Clone,
//! PartialEq). The merge of tables after a crash (Appendix B, Table II) works on whole
//! operations and lives with SafeTalk; this module only defines the table those operations
//! produce. Because one controller sees every lock of its component, the locks it grants
//! never conflict (§2), and it can run deadlock detection alone (§7, §9).
//!
//! What the table implements (DESIGN §4):
//! - **Names** are paths ([`LockName`]); a lock on a path covers its descendants — the
//!   HCLC cover rule of §9: "x1 covers x2 if the portion of the DB specified by x2 is
//!   contained in the portion addressed by x1 and the mode of x1 is not weaker". A request
//!   covered by a lock its own session holds is granted at once, as in HCLC.
//! - **Modes**: [`LockMode::Shared`] and [`LockMode::Exclusive`]; intention modes IS/IX are
//!   held implicitly on every ancestor, and conflicts follow the multi-granularity matrix
//!   ([`GranularMode::compatible`], [`conflicts`]), so `/a` conflicts with `/a/b`.
//! - **Fair FIFO queues**: every wait gets a global [`Ticket`]; a wait is granted only when
//!   no other session holds a conflicting overlapping lock *and* no earlier conflicting wait
//!   is still queued, so a later compatible request never jumps an earlier one. §3.1 leaves
//!   "whether to preempt any transaction or to make the requester wait" open; Tenure waits.
//! - **Idempotency**: each request carries `(session, request_id)`; a replay returns the
//!   request's existing result (grant, queue position or error).
//! - **Fencing tokens** `(epoch, seq)` from one per-table counter: every grant's token is
//!   larger than every earlier one, so tokens strictly increase per lock across managers.
//! - **Deadlock detection** on the waits-for graph (edges from a waiter to the holders of
//!   conflicting locks and to the earlier conflicting waits ahead of it): the youngest wait
//!   on a cycle — always the one being added — gets [`AcquireError::Deadlock`].
//! - **Sessions** (Chubby, seed 002 §14.4.5; the lecture's "client process crashes while
//!   holding the lock"): [`LockTable::release_session`] releases an expired session's locks
//!   and ends its waits; each released name then stays unavailable for the lock-delay.

mod mode;
mod name;
mod table;

#[cfg(test)]
mod tests;

pub use mode::{GranularMode, LockMode, conflicts, mode_on};
pub use name::{InvalidName, LockName, NAME_DEPTH_MAX, NAME_LEN_MAX};
pub use table::{
    Acquire, AcquireError, Acquired, EndedWait, FencingToken, Grant, HolderInfo, LockInfo, LockOp,
    LockOpResult, LockTable, LockTableConfig, MAX_LOCK_DELAY, ReleaseError, Released, RequestId,
    SessionId, SessionRelease, StaleEpoch, Ticket, Wait, WaiterInfo, Wakeups,
};
