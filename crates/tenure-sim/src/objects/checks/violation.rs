//! The broken object invariants the checkers report, and how each reads.

use serde::Serialize;
use tenure_core::StoreId;
use tenure_core::lockctl::FencingToken;
use tenure_core::objects::Uuid;

/// A broken object invariant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum ObjectViolation {
    /// Checker 1: a read returned an older revision than a change acknowledged before
    /// it was sent (`returned: None`: `NoSuchObject` with no later delete).
    ReadStale {
        /// Store.
        store: StoreId,
        /// Key.
        key: String,
        /// The revision read (none: no object).
        returned: Option<u64>,
        /// The newest change acknowledged before the read was sent.
        acked: u64,
        /// When the read was sent (µs).
        sent_us: u64,
    },
    /// Checker 1: a read's content does not match its description or its upload.
    ReadCorrupt {
        /// Store.
        store: StoreId,
        /// Key.
        key: String,
        /// The upload.
        uuid: Uuid,
        /// What was wrong.
        why: String,
    },
    /// Checker 1: a compare-and-set won although the key had changed since the revision
    /// it named.
    CasBroken {
        /// Store.
        store: StoreId,
        /// Key.
        key: String,
        /// The revision the put required (none: the key absent).
        expected: Option<u64>,
        /// The revision it was written at.
        revision: u64,
        /// The key's previous change in the history.
        previous: String,
    },
    /// Two sources disagree on what a revision of a store was.
    RevisionConflict {
        /// Store.
        store: StoreId,
        /// Revision.
        revision: u64,
        /// What the first source said, and which.
        first: String,
        /// What the other said.
        second: String,
    },
    /// An acknowledged change is missing from the store's final history.
    AckLost {
        /// Store.
        store: StoreId,
        /// Revision acknowledged.
        revision: u64,
        /// What was acknowledged.
        change: String,
        /// The final history's revision.
        final_revision: u64,
    },
    /// Checker 2: a block of an active manifest is on too few chunks, or missing from a
    /// chunk the manager counts complete.
    BlockLost {
        /// Store.
        store: StoreId,
        /// Key.
        key: String,
        /// The upload.
        uuid: Uuid,
        /// Which block, and where it is missing.
        why: String,
    },
    /// Checker 3: a block of an active manifest was deleted.
    ActiveBlockCollected {
        /// Store.
        store: StoreId,
        /// Key.
        key: String,
        /// The upload.
        uuid: Uuid,
        /// Who deleted it.
        by: String,
        /// When (µs).
        at_us: u64,
    },
    /// Checker 4 (liveness): a manifest was not collected, pruned or abandoned after
    /// faults stopped.
    NotCollected {
        /// Store.
        store: StoreId,
        /// Key.
        key: String,
        /// The upload.
        uuid: Uuid,
        /// Its state.
        state: String,
    },
    /// Checker 2 (liveness): a chunk of a layout still lacks blocks after faults stopped.
    RepairIncomplete {
        /// Store.
        store: StoreId,
        /// The chunk and what it lacks.
        why: String,
    },
    /// Checker 5: a fenced put with a superseded token landed.
    FencedStale {
        /// Store.
        store: StoreId,
        /// Key.
        key: String,
        /// The lock.
        lock: String,
        /// The token presented.
        token: FencingToken,
        /// When the token was known no longer held (µs).
        superseded_us: u64,
        /// When the put was sent (µs).
        sent_us: u64,
    },
    /// Checker 6: a watcher saw a gap, a duplicate, a change out of order or outside
    /// its prefix.
    WatchBroken {
        /// Store.
        store: StoreId,
        /// The watcher.
        watcher: usize,
        /// What happened.
        why: String,
    },
    /// Checker 6 (liveness): a watcher had not caught up when the run settled.
    WatchBehind {
        /// Store.
        store: StoreId,
        /// The watcher.
        watcher: usize,
        /// Its last revision.
        last: u64,
        /// The store's.
        current: u64,
    },
    /// The manifest merge broke a law on real manifests.
    MergeLaw {
        /// Store.
        store: StoreId,
        /// Key.
        key: String,
        /// The upload.
        uuid: Uuid,
        /// The law.
        law: &'static str,
    },
    /// An oversized put was not refused with `TooLarge`.
    TooLargeAccepted {
        /// Store.
        store: StoreId,
        /// The answer.
        answer: String,
    },
    /// Liveness: an object client got no answer after faults stopped.
    ClientStuck {
        /// The client.
        client: usize,
        /// What it was waiting for.
        why: String,
    },
}

impl ObjectViolation {
    /// Whether a violation is of liveness (else of safety).
    pub fn is_liveness(&self) -> bool {
        matches!(
            self,
            ObjectViolation::NotCollected { .. }
                | ObjectViolation::RepairIncomplete { .. }
                | ObjectViolation::WatchBehind { .. }
                | ObjectViolation::ClientStuck { .. }
        )
    }
}

impl std::fmt::Display for ObjectViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use ObjectViolation as V;
        match self {
            V::ReadStale {
                store,
                key,
                returned,
                acked,
                sent_us,
            } => write!(
                f,
                "objects {store} {key}: a read sent at {sent_us}us returned revision {returned:?}, older than revision {acked} acknowledged before"
            ),
            V::ReadCorrupt {
                store,
                key,
                uuid,
                why,
            } => write!(f, "objects {store} {key}: read of upload {uuid}: {why}"),
            V::CasBroken {
                store,
                key,
                expected,
                revision,
                previous,
            } => write!(
                f,
                "objects {store} {key}: compare-and-set on {expected:?} won at revision {revision}, but the key's previous change was {previous}"
            ),
            V::RevisionConflict {
                store,
                revision,
                first,
                second,
            } => write!(
                f,
                "objects {store} revision {revision}: {first} but {second}"
            ),
            V::AckLost {
                store,
                revision,
                change,
                final_revision,
            } => write!(
                f,
                "objects {store}: acknowledged {change} at revision {revision} is not in the final history (at revision {final_revision})"
            ),
            V::BlockLost {
                store,
                key,
                uuid,
                why,
            } => write!(
                f,
                "objects {store} {key}: active upload {uuid} lost a block: {why}"
            ),
            V::ActiveBlockCollected {
                store,
                key,
                uuid,
                by,
                at_us,
            } => write!(
                f,
                "objects {store} {key}: a block of active upload {uuid} deleted by {by} at {at_us}us"
            ),
            V::NotCollected {
                store,
                key,
                uuid,
                state,
            } => write!(
                f,
                "objects {store} {key}: upload {uuid} still {state} after faults stopped"
            ),
            V::RepairIncomplete { store, why } => {
                write!(f, "objects {store}: repair unfinished: {why}")
            }
            V::FencedStale {
                store,
                key,
                lock,
                token,
                superseded_us,
                sent_us,
            } => write!(
                f,
                "objects {store} {key}: a put fenced by {lock} {token:?} sent at {sent_us}us landed, but the token was superseded at {superseded_us}us"
            ),
            V::WatchBroken {
                store,
                watcher,
                why,
            } => write!(f, "objects {store}: watcher {watcher}: {why}"),
            V::WatchBehind {
                store,
                watcher,
                last,
                current,
            } => write!(
                f,
                "objects {store}: watcher {watcher} stayed at revision {last}, the store is at {current}"
            ),
            V::MergeLaw {
                store,
                key,
                uuid,
                law,
            } => write!(
                f,
                "objects {store} {key}: manifest merge of upload {uuid} is not {law}"
            ),
            V::TooLargeAccepted { store, answer } => {
                write!(f, "objects {store}: an oversized put was answered {answer}")
            }
            V::ClientStuck { client, why } => write!(
                f,
                "object client {client} got no answer after faults stopped: {why}"
            ),
        }
    }
}
