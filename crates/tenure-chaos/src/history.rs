//! The real-time history of a run: every client operation — locks, objects, lookup — as
//! invoke / ok / fail / unknown with its bounds on one clock (microseconds since the run
//! started), the lock clients' holding intervals, the stores' object histories read after
//! the full restart, and the faults.

use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tenure_core::lockctl::FencingToken;

/// What an operation asked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// Acquire (exclusive) with a timed wait.
    Acquire,
    /// An explicit release.
    Release,
    /// The end of a session the client learned of (or may have happened: its deadline
    /// passed unextended): it released every lock the session held. Invoked at the
    /// session's last conservative deadline.
    Expiry,
    /// A read of the lock's holders.
    Holders,
}

/// How an operation ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Acquire granted.
    Granted {
        /// Its token.
        token: FencingToken,
    },
    /// Release (or expiry) done.
    Released,
    /// Release found the lock not held by the session.
    NotHeld,
    /// Holders read: (session, token) of each holder.
    Holders(Vec<(u64, FencingToken)>),
    /// Definitely no effect (timeout in the queue, would block, session already ended).
    Fail(String),
    /// May or may not have taken effect (the client gave up, the connection broke).
    Unknown(String),
}

/// One operation.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Op {
    /// Worker (client) index.
    pub client: u64,
    /// What it asked.
    pub kind: OpKind,
    /// The lock.
    pub name: String,
    /// The lock's store.
    pub store: u32,
    /// The session it ran on (per store; 0 = none was open).
    pub session: u64,
    /// Invoke time (µs since the run started).
    pub invoke_us: u64,
    /// Response time (µs); none for `Unknown`.
    pub response_us: Option<u64>,
    /// The outcome.
    pub outcome: Outcome,
}

impl Op {
    /// Whether the operation succeeded (for availability).
    pub fn ok(&self) -> bool {
        matches!(
            self.outcome,
            Outcome::Granted { .. } | Outcome::Released | Outcome::Holders(_)
        ) && self.kind != OpKind::Expiry
    }
}

/// A client's belief that it holds a lock: from the grant's answer to the release sent
/// or the conservative deadline, whichever came first.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Hold {
    /// Worker.
    pub client: u64,
    /// Lock.
    pub name: String,
    /// Store.
    pub store: u32,
    /// Session.
    pub session: u64,
    /// Fencing token of the grant.
    pub token: FencingToken,
    /// Grant received (µs).
    pub start_us: u64,
    /// Stopped believing (µs); none: still held at the end.
    pub end_us: Option<u64>,
}

/// What an object operation asked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ObjKind {
    /// A plain put of `value`.
    Put,
    /// A compare-and-set put of `value` if the key's active revision is `expect`'s.
    Cas,
    /// A get.
    Get,
}

/// An object read: what the store described and what the content said.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ObjRead {
    /// The active revision.
    pub revision: u64,
    /// Its upload.
    pub uuid: String,
    /// Its description: length and CRC-32.
    pub size: u64,
    /// CRC-32 of the content, as described.
    pub checksum: u32,
    /// Length and CRC-32 of the content received.
    pub content: (u64, u32),
    /// The value the content carries (none: not a content any client wrote).
    pub value: Option<u64>,
}

/// How an object operation ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ObjOutcome {
    /// A put took effect at this revision, as this upload.
    Written {
        /// Revision.
        revision: u64,
        /// Upload.
        uuid: String,
    },
    /// A compare-and-set found another revision (no effect): the key's active revision
    /// as the store answered it (none: no object).
    Mismatch {
        /// The active revision the store reported.
        current: Option<u64>,
    },
    /// A get found this (none: no object).
    Read(Option<ObjRead>),
    /// Definitely no effect (a read that failed).
    Fail(String),
    /// May or may not have taken effect.
    Unknown(String),
}

/// One object operation.
#[derive(Clone, Debug, Serialize)]
pub struct ObjOp {
    /// Client.
    pub client: u64,
    /// What it asked.
    pub kind: ObjKind,
    /// Key.
    pub key: String,
    /// The key's store.
    pub store: u32,
    /// The value a put writes (unique in the run, never 0).
    pub value: Option<u64>,
    /// A compare-and-set's expectation: the revision, and the value the client saw at it
    /// (0: the key absent, revision 0).
    pub expect: Option<(u64, u64)>,
    /// Invoke time (µs).
    pub invoke_us: u64,
    /// Response time (µs); none for `Unknown`.
    pub response_us: Option<u64>,
    /// The outcome.
    pub outcome: ObjOutcome,
}

/// One change of a store's object history, as a watch delivered it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ObjChange {
    /// Revision.
    pub revision: u64,
    /// Key.
    pub key: String,
    /// The upload, length and CRC-32 that became active (none: a delete).
    pub put: Option<(String, u64, u32)>,
}

/// A store's object history after the full restart, read by a watch from `compacted`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ObjHistory {
    /// Changes up to this revision are not in `changes`.
    pub compacted: u64,
    /// The store's revision when read.
    pub revision: u64,
    /// The changes after `compacted`, in revision order.
    pub changes: Vec<ObjChange>,
}

/// What a lookup operation asked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LookupKind {
    /// Publish `value` (persistent: acknowledged by the leader; volatile: sent).
    Publish,
    /// The provider stopped refreshing (volatile): the entry must go within its bound.
    Stop,
    /// A get from the leader.
    Get,
}

/// How a lookup operation ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LookupOutcome {
    /// Published with this version (stamp, provider): acknowledged if persistent.
    Published {
        /// Version.
        version: (u64, u64),
    },
    /// The provider stopped.
    Stopped,
    /// The leader answered this entry (none: absent).
    Found {
        /// The entry: value, version (stamp, provider).
        entry: Option<(String, (u64, u64))>,
        /// The leader's device.
        leader: u64,
    },
    /// Definitely no effect.
    Fail(String),
    /// May or may not have taken effect.
    Unknown(String),
}

/// One lookup operation.
#[derive(Clone, Debug, Serialize)]
pub struct LookupOp {
    /// Client.
    pub client: u64,
    /// What it asked.
    pub kind: LookupKind,
    /// Key.
    pub key: String,
    /// Persistent (else volatile).
    pub persistent: bool,
    /// The refresh interval the provider asked for (ms).
    pub interval_ms: u64,
    /// The value published.
    pub value: Option<String>,
    /// Invoke time (µs).
    pub invoke_us: u64,
    /// Response time (µs); none for `Unknown`.
    pub response_us: Option<u64>,
    /// The outcome.
    pub outcome: LookupOutcome,
}

/// A fault the nemesis injected.
#[derive(Clone, Debug, Serialize)]
pub struct Fault {
    /// Kind (kill, pause, isolate, split, one-way, loss).
    pub kind: String,
    /// What exactly (devices, direction, percentage).
    pub detail: String,
    /// Devices affected.
    pub devices: Vec<u64>,
    /// Start (µs).
    pub start_us: u64,
    /// End (µs); none if the run ended first.
    pub end_us: Option<u64>,
}

/// The shared, growing history of a run.
#[derive(Clone, Debug)]
pub struct Recorder {
    origin: Instant,
    inner: Arc<Mutex<Recorded>>,
}

/// Everything recorded.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Recorded {
    /// Operations in the order they were recorded.
    pub ops: Vec<Op>,
    /// Holding intervals.
    pub holds: Vec<Hold>,
    /// Faults.
    pub faults: Vec<Fault>,
    /// Object operations.
    pub objects: Vec<ObjOp>,
    /// Per store, its object history after the full restart.
    pub object_histories: std::collections::BTreeMap<u32, ObjHistory>,
    /// Lookup operations.
    pub lookups: Vec<LookupOp>,
}

impl Recorder {
    /// A recorder whose clock starts at `origin`.
    pub fn new(origin: Instant) -> Recorder {
        Recorder {
            origin,
            inner: Arc::default(),
        }
    }

    /// Microseconds since the run started.
    pub fn us(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.origin).as_micros() as u64
    }

    /// Now, in microseconds since the run started.
    pub fn now(&self) -> u64 {
        self.us(Instant::now())
    }

    /// Record an operation.
    pub fn op(&self, op: Op) {
        self.inner.lock().expect("recorder").ops.push(op);
    }

    /// Record an object operation.
    pub fn obj(&self, op: ObjOp) {
        self.inner.lock().expect("recorder").objects.push(op);
    }

    /// Record a store's object history.
    pub fn obj_history(&self, store: u32, h: ObjHistory) {
        let mut r = self.inner.lock().expect("recorder");
        r.object_histories.insert(store, h);
    }

    /// Record a lookup operation.
    pub fn lookup(&self, op: LookupOp) {
        self.inner.lock().expect("recorder").lookups.push(op);
    }

    /// Record a holding interval; returns its index.
    pub fn hold(&self, h: Hold) -> usize {
        let mut r = self.inner.lock().expect("recorder");
        r.holds.push(h);
        r.holds.len() - 1
    }

    /// End holding interval `i` at `end_us`.
    pub fn unhold(&self, i: usize, end_us: u64) {
        let mut r = self.inner.lock().expect("recorder");
        let h = &mut r.holds[i];
        if h.end_us.is_none() {
            h.end_us = Some(end_us.max(h.start_us));
        }
    }

    /// Record the start of a fault; returns its index.
    pub fn fault(&self, kind: &str, detail: String, devices: Vec<u64>) -> usize {
        let mut r = self.inner.lock().expect("recorder");
        r.faults.push(Fault {
            kind: kind.to_string(),
            detail,
            devices,
            start_us: self.now(),
            end_us: None,
        });
        r.faults.len() - 1
    }

    /// Record the end of fault `i`.
    pub fn fault_end(&self, i: usize) {
        let now = self.now();
        self.inner.lock().expect("recorder").faults[i].end_us = Some(now);
    }

    /// A copy of everything recorded so far.
    pub fn snapshot(&self) -> Recorded {
        self.inner.lock().expect("recorder").clone()
    }
}
