//! The manager's side of objects: uploads (a manifest in `writing`, the blocks, the
//! activation, each a SafeTalk change), linearizable reads from complete chunks,
//! collectors under deletion leases (seed 001 workflow step 4), and watches.

mod gc;
mod lifecycle;
mod reads;
mod requests;
mod watches;

use super::table::GcWork;
use super::{BlockId, Bytes, ObjectMeta, ObjectOp, ObjectOutcome, Uuid};
use crate::ctx::Ctx;
use crate::data::StoreOp;
use crate::error::ClientError;
use crate::ids::{ChunkId, ClientId};
use crate::io::Output;
use crate::io::request::Response;
use crate::lockctl::LockName;
use crate::time::Instant;
use reads::inline_object;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How often the manager asks chunks not known complete whether they are.
const PROBE_EVERY: Duration = Duration::from_millis(500);

/// The manager's volatile object state.
#[derive(Clone, Debug, Default)]
pub struct ObjMgr {
    /// Chunks known to hold every live block (reads are served from these).
    pub complete: BTreeSet<ChunkId>,
    probe_at: Instant,
    reads: BTreeMap<u64, PendingRead>,
    gc: BTreeMap<(String, Uuid), GcTask>,
    gc_at: Instant,
    watches: BTreeMap<(ClientId, u64), Watch>,
    /// Waiting polls of forwarded watches: their key (also their watch id) → client.
    polls: BTreeMap<u64, ClientId>,
    /// The revision watches were last brought up to.
    watched: u64,
    tag: u64,
}

#[derive(Clone, Debug)]
struct PendingRead {
    client: ClientId,
    req_id: u64,
    meta: ObjectMeta,
    got: BTreeMap<BlockId, Bytes>,
    chunk: ChunkId,
    tried: BTreeSet<ChunkId>,
    deadline: Instant,
    restarted: bool,
}

#[derive(Clone, Debug)]
struct Watch {
    prefix: String,
    last: u64,
    /// Held until the change carrying its read barrier is confirmed: nothing is sent
    /// before the subscription's answer and its replay.
    held: Option<crate::ids::Version>,
    /// The `after` it was asked with (a retry asks the same).
    asked: Option<u64>,
    /// Whether its changes carry values.
    values: bool,
    /// A forwarded watch's round: answered once, then removed.
    poll: Option<Poll>,
}

#[derive(Clone, Copy, Debug)]
struct Poll {
    req_id: u64,
    deadline: Instant,
}

#[derive(Clone, Debug)]
struct GcTask {
    since: Instant,
    deleting: Option<Deleting>,
}

#[derive(Clone, Debug)]
struct Deleting {
    tag: u64,
    ids: Vec<BlockId>,
    waiting: BTreeSet<ChunkId>,
    deadline: Instant,
}

fn reply(ctx: &mut Ctx<'_>, client: ClientId, req_id: u64, result: Result<Response, ClientError>) {
    ctx.out.push(Output::Reply {
        client,
        req_id,
        result,
    });
}

/// Check an object key: a path of the store, within the length limit.
fn check_key(ctx: &Ctx<'_>, store: crate::ids::StoreId, key: &str) -> Result<(), ClientError> {
    let limit = ctx.cfg.objects.max_key_len;
    if key.len() > limit {
        return Err(ClientError::InvalidName(format!(
            "key is {} bytes long (limit {limit})",
            key.len()
        )));
    }
    LockName::parse(key).map_err(|e| ClientError::InvalidName(e.to_string()))?;
    if crate::config::store_of(key, ctx.cfg.cluster.stores) != store {
        return Err(ClientError::InvalidName(format!(
            "{key} does not belong to store {store}"
        )));
    }
    Ok(())
}

fn check_size(len: usize, limit: u64) -> Result<(), ClientError> {
    if len as u64 > limit {
        return Err(ClientError::TooLarge {
            size: len as u64,
            limit,
        });
    }
    Ok(())
}

/// The answer to an object change, from what it did.
pub(crate) fn object_response(
    op: &StoreOp,
    r: Result<ObjectOutcome, ClientError>,
) -> Result<Response, ClientError> {
    let StoreOp::Object { op, .. } = op else {
        return Err(ClientError::Rejected("not an object change".into()));
    };
    Ok(match (r?, op) {
        (ObjectOutcome::Written { revision, uuid }, _) => {
            Response::ObjectWritten { revision, uuid }
        }
        (ObjectOutcome::Deleted { revision }, _) => Response::ObjectDeleted { revision },
        (ObjectOutcome::Begun, ObjectOp::Begin { uuid, .. }) => {
            Response::UploadStarted { upload: *uuid }
        }
        (ObjectOutcome::BlocksWritten, ObjectOp::Blocks { part: Some(p), .. }) => {
            Response::PartStored {
                part: p.number,
                checksum: p.checksum,
            }
        }
        (_, ObjectOp::Abandon { .. }) => Response::UploadAborted,
        _ => Response::Unwatched,
    })
}

fn work_id(w: &GcWork) -> (String, Uuid) {
    match w {
        GcWork::Collect { key, uuid, .. }
        | GcWork::Finish { key, uuid }
        | GcWork::Abandon { key, uuid } => (key.clone(), *uuid),
        GcWork::Prune { key } => (key.clone(), Uuid(0)),
    }
}

/// A new upload id, time-ordered like a version 7 UUID: the device's clock (µs) in the
/// high half, the seeded generator's draw in the low half. A device restarted with the
/// same configured seed (`rng_seed`) draws the same numbers again; the clock has moved
/// on, so its ids do not repeat the ones its previous life gave.
fn new_uuid(ctx: &mut Ctx<'_>) -> Uuid {
    Uuid(((ctx.now.0 as u128) << 64) | ctx.rng.next_u64() as u128)
}

fn assemble(read: &PendingRead) -> Bytes {
    if let [(id, _)] = read.meta.blocks.as_slice() {
        return read.got[id].clone();
    }
    let mut v = Vec::with_capacity(read.meta.size as usize);
    for (id, _) in &read.meta.blocks {
        v.extend_from_slice(&read.got[id]);
    }
    Bytes::from(v)
}

#[cfg(test)]
mod uuid_tests {
    use super::*;
    use crate::config::{ClusterConfig, DeviceConfig};
    use crate::ids::DeviceId;
    use crate::rng::Rng;
    use std::collections::BTreeMap;

    fn ids(now: Instant, seed: u64) -> Vec<Uuid> {
        let cfg = DeviceConfig::new(DeviceId(1), ClusterConfig::new(3, 1, 3));
        let (mut rng, mut out) = (Rng::new(seed), Vec::new());
        let (heard, hints, epochs) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        let mut ctx = Ctx {
            now,
            cfg: &cfg,
            rng: &mut rng,
            out: &mut out,
            heard: &heard,
            hints: &hints,
            epochs: &epochs,
            inline_values: true,
            diff_transitions: true,
            rejoin_patches: true,
        };
        (0..3).map(|_| new_uuid(&mut ctx)).collect()
    }

    /// Seed 001 keys manifests by upload id: a device restarted with the same configured
    /// seed must not give an id its previous life gave (found by `tenure chaos` before its
    /// devices were seeded anew at each start).
    #[test]
    fn upload_ids_of_a_restart_with_the_same_seed_do_not_repeat() {
        let first = ids(Instant(5_000_000), 7);
        let again = ids(Instant(9_000_000), 7);
        assert!(
            first.iter().all(|u| !again.contains(u)),
            "{first:?} {again:?}"
        );
        let distinct: std::collections::BTreeSet<_> = first.iter().collect();
        assert_eq!(distinct.len(), 3, "ids drawn at the same instant differ");
    }
}
