//! Objects in the store world (seed 001; DESIGN §5, §9.6): what the object clients draw
//! from the seed, what they did, and the checkers that judge them ([`checks`]).
//!
//! The object clients run beside the lock clients in every run of the stores' world
//! (`SimConfig::objects`, on by default), under every fault the nemesis injects. Each
//! client works in one of the stores the lock clients contend in, on a few keys in two
//! directories of the store (`/gN/a/…`, `/gN/b/…`), one request at a time, following
//! redirects and retrying on `Unavailable` and on client-side timeouts with the same
//! request id. It draws its next operation from the seed's weights:
//!
//! - **put** of 0 to 10 blocks (the simulator's block size is 64 bytes, so most puts are
//!   multi-block and SafeTalk batches are cut by `max_batch_bytes`), sometimes
//!   **ephemeral** (owned by the client's session, deleted when it ends — clients let
//!   their sessions lapse now and then), sometimes too large (it must be refused);
//! - **compare-and-set**: `if_revision` with the last revision the client saw of the
//!   key, or `if_absent`;
//! - **fenced put**: `Conditions.fence` with a fencing token the lock clients were
//!   granted on a lock of the same store — the newest one known, or an older one after
//!   the lock moved on (it must then be refused);
//! - **multipart upload**: initiate, parts in any order (some uploaded again), complete
//!   with a subset, or abort; **delete**; **get** and **head**.
//!
//! Watchers follow each store the clients use: one on the whole store (`/`, so every
//! revision must arrive, in order, exactly once) and one on the store's `a` directory.
//! A watcher resumes from the last revision it saw when its watch ends (a redirect), when
//! its manager goes quiet (a crash or a partition ends no stream explicitly), or, after a
//! `Compacted` answer, from a re-read (`List`): the one gap a watcher may see, and it is
//! explicit.
//!
//! After the liveness phase the clients stop starting operations and the world waits
//! until every store's objects are quiet — no upload writing, nothing pending_delete or
//! deleted (collected and pruned), every chunk of every layout complete, every watcher
//! caught up — then runs the end-of-run checks.

pub mod checks;

use serde::Serialize;
use std::time::Duration;
use tenure_core::objects::ObjectSettings;
use tenure_core::rng::Rng;

pub use checks::{ObjectCheckCounts, ObjectChecker, ObjectViolation};

/// The simulator's object settings: tiny blocks so that objects span many of them, and
/// short collection intervals so that the end of a run sees every collection through.
pub fn sim_settings(history: u32, inline_max: u32) -> ObjectSettings {
    ObjectSettings {
        block_size: BLOCK_SIZE,
        max_object_size: MAX_OBJECT_SIZE,
        max_value_size: MAX_OBJECT_SIZE,
        max_key_len: 256,
        prune_after: Duration::from_millis(1_000),
        lease_timeout: Duration::from_millis(1_000),
        checkin_interval: Duration::from_millis(500),
        writing_timeout: Duration::from_millis(3_000),
        history,
        max_batch_bytes: 4 * BLOCK_SIZE as usize,
        inline_max,
    }
}

/// Block size in the simulator (bytes).
pub const BLOCK_SIZE: u32 = 64;
/// Largest object in the simulator (bytes).
pub const MAX_OBJECT_SIZE: u64 = 1_024;

/// The object workload of one run.
#[derive(Clone, Debug, Serialize)]
pub struct ObjectKnobs {
    /// Object clients.
    pub clients: usize,
    /// Keys per directory of a store.
    pub keys_per_dir: usize,
    /// Mean think time between a client's operations (µs).
    pub think_mean_us: u64,
    /// Largest put (bytes, at most [`MAX_OBJECT_SIZE`]).
    pub put_max: usize,
    /// Weights of the operations: put, get, delete, CAS, fenced put, ephemeral put,
    /// multipart step, head.
    pub weights: [u32; 8],
    /// Share of the clients that hold a session (idempotent retries, ephemeral puts).
    pub session_p: f64,
    /// Session TTL (ms).
    pub ttl_ms: u64,
    /// Probability per operation that a client with a session stops its keep-alives for
    /// two TTLs (its session expires; its ephemeral objects go).
    pub lapse_p: f64,
    /// Probability a fenced put uses an older token than the newest one known.
    pub stale_fence_p: f64,
    /// The watch history kept per store (small in some seeds, so watchers must re-read).
    pub history: u32,
    /// Largest put written as one change with its value inline: none in some runs (every
    /// put is blocks), a few blocks' worth in others (a mix), every put in the rest.
    pub inline_max: u32,
}

impl ObjectKnobs {
    /// Draw the object workload from its own generator.
    pub fn draw(rng: &mut Rng) -> ObjectKnobs {
        ObjectKnobs {
            clients: 2 + rng.below(4) as usize,
            keys_per_dir: 1 + rng.below(3) as usize,
            think_mean_us: 20_000 + rng.below(300_000),
            put_max: [64, 256, 640][rng.below(3) as usize],
            weights: [
                2 + rng.below(4) as u32,
                2 + rng.below(4) as u32,
                rng.below(3) as u32,
                rng.below(3) as u32,
                rng.below(3) as u32,
                rng.below(2) as u32,
                rng.below(4) as u32,
                rng.below(2) as u32,
            ],
            session_p: [0.5, 1.0][rng.below(2) as usize],
            ttl_ms: [1_000, 2_000, 4_000][rng.below(3) as usize],
            lapse_p: [0.0, 0.01, 0.03][rng.below(3) as usize],
            stale_fence_p: [0.3, 0.7][rng.below(2) as usize],
            history: [10_000, 10_000, 8][rng.below(3) as usize],
            inline_max: [0, 4 * BLOCK_SIZE, MAX_OBJECT_SIZE as u32][rng.below(3) as usize],
        }
    }
}

/// What the object clients and watchers did in a run (or a sweep).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ObjectStats {
    /// Puts acknowledged (plain, CAS, fenced and ephemeral).
    pub puts: u64,
    /// Of those, objects of more than one block.
    pub multi_block: u64,
    /// Of those, small objects written in one change with the value inline.
    pub inline: u64,
    /// Gets answered with an object.
    pub gets: u64,
    /// Gets and heads answered `NoSuchObject`.
    pub get_missing: u64,
    /// Gets answered `DataUnavailable` (no complete chunk answered in time).
    pub get_unavailable: u64,
    /// Heads answered.
    pub heads: u64,
    /// Deletes acknowledged.
    pub deletes: u64,
    /// Multipart uploads initiated.
    pub multipart_started: u64,
    /// Parts stored (acknowledged).
    pub parts: u64,
    /// Parts uploaded again.
    pub parts_again: u64,
    /// Multipart uploads completed.
    pub multipart_completed: u64,
    /// Multipart uploads aborted.
    pub multipart_aborted: u64,
    /// Compare-and-set puts that won.
    pub cas_wins: u64,
    /// Compare-and-set puts refused (`Exists`, `RevisionMismatch`).
    pub cas_losses: u64,
    /// Fenced puts that landed.
    pub fenced_landed: u64,
    /// Fenced puts refused with `StaleToken`.
    pub fenced_refused: u64,
    /// Ephemeral puts acknowledged.
    pub ephemeral: u64,
    /// Oversized puts refused with `TooLarge`.
    pub too_large: u64,
    /// Object sessions that expired under their client (lapses).
    pub sessions_lapsed: u64,
    /// Changes delivered to watchers.
    pub watch_events: u64,
    /// Watches resumed (redirect, quiet manager, re-read).
    pub watch_resumes: u64,
    /// Watches that had to re-read after `Compacted`.
    pub watch_compacted: u64,
    /// Manifests seen collected (`deleted`) by a manager.
    pub gc_manifests: u64,
    /// Block deletions sent by collectors.
    pub blocks_deleted: u64,
    /// Requests that gave up without an answer.
    pub gave_up: u64,
    /// Simulated time the end-of-run settling took, longest (µs).
    pub settle_us: u64,
    /// How often the checkers compared something.
    pub checks: ObjectCheckCounts,
}

impl ObjectStats {
    /// Add another run's figures.
    pub fn add(&mut self, o: &ObjectStats) {
        self.puts += o.puts;
        self.multi_block += o.multi_block;
        self.inline += o.inline;
        self.gets += o.gets;
        self.get_missing += o.get_missing;
        self.get_unavailable += o.get_unavailable;
        self.heads += o.heads;
        self.deletes += o.deletes;
        self.multipart_started += o.multipart_started;
        self.parts += o.parts;
        self.parts_again += o.parts_again;
        self.multipart_completed += o.multipart_completed;
        self.multipart_aborted += o.multipart_aborted;
        self.cas_wins += o.cas_wins;
        self.cas_losses += o.cas_losses;
        self.fenced_landed += o.fenced_landed;
        self.fenced_refused += o.fenced_refused;
        self.ephemeral += o.ephemeral;
        self.too_large += o.too_large;
        self.sessions_lapsed += o.sessions_lapsed;
        self.watch_events += o.watch_events;
        self.watch_resumes += o.watch_resumes;
        self.watch_compacted += o.watch_compacted;
        self.gc_manifests += o.gc_manifests;
        self.blocks_deleted += o.blocks_deleted;
        self.gave_up += o.gave_up;
        self.settle_us = self.settle_us.max(o.settle_us);
        self.checks.add(&o.checks);
    }
}
