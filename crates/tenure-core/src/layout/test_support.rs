//! Helpers shared by the layout unit tests (`chunk_tests`, `manager_tests`): a handler
//! context over a fixed five-device cluster, state machines built directly in the state
//! under test, and filters over the outputs a handler produced.
//!
//! The cluster is `ClusterConfig::new(5, 4, 3)` with default timing and the outside
//! policies switched off (they are not seed 000 rows). Store 0's layout is `c(1), c(2),
//! c(3)`: chunk serial 0 on devices 1, 2 and 3. The manager under test, or the lease
//! manager of the chunk under test, is device 4 ([`M`]); device 5 ([`N`]) is another
//! manager.

use crate::config::{ClusterConfig, DeviceConfig, Timing};
use crate::ctx::Ctx;
use crate::data::StoreData;
use crate::ids::{ChunkId, DeviceId, Epoch, StoreId};
use crate::io::Output;
use crate::io::observation::Observation;
use crate::io::persist::PersistOp;
use crate::layout::chunk::{Chunk, TransitionLog};
use crate::layout::manager::{Incoming, Manager, Outgoing, Regeneration, Stage, Tx, TxKind};
use crate::layout::{ChunkState, Metadata, MgrState, Prepared};
use crate::msg::{MgrMsg, Msg, ToChunk, ToManager};
use crate::rng::Rng;
use crate::time::Instant;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// The store every test uses.
pub(crate) const STORE: StoreId = StoreId(0);
/// When the state under test was entered (leases granted, timers set).
pub(crate) const T0: Instant = Instant(10_000_000);
/// The manager under test / the chunk's lease manager.
pub(crate) const M: DeviceId = DeviceId(4);
/// Another manager.
pub(crate) const N: DeviceId = DeviceId(5);
/// The identity of the transition attempt a test's messages belong to.
pub(crate) const TX: u64 = 77;

/// Device `n`.
pub(crate) fn d(n: u64) -> DeviceId {
    DeviceId(n)
}

/// The store's chunk on device `n` (serial 0).
pub(crate) fn c(n: u64) -> ChunkId {
    ChunkId {
        device: DeviceId(n),
        serial: 0,
    }
}

/// Epoch `n`.
pub(crate) fn e(n: u64) -> Epoch {
    Epoch(n)
}

/// Metadata over the chunks on these devices.
pub(crate) fn md(devices: &[u64]) -> Metadata {
    Metadata::new(devices.iter().map(|n| c(*n)))
}

/// The store's layout: chunks on devices 1, 2 and 3.
pub(crate) fn layout() -> Metadata {
    md(&[1, 2, 3])
}

/// A set of chunks, by device.
pub(crate) fn set(devices: &[u64]) -> BTreeSet<ChunkId> {
    devices.iter().map(|n| c(*n)).collect()
}

/// `n` milliseconds.
pub(crate) fn ms(n: u64) -> std::time::Duration {
    std::time::Duration::from_millis(n)
}

/// A store holding one confirmed register write (`key` = `value`, ordered in `epoch`).
pub(crate) fn data_with(epoch: u64, key: u64, value: u64) -> StoreData {
    let v = crate::ids::Version {
        epoch: e(epoch),
        seq: 1,
    };
    let mut s = StoreData::default();
    s.accept(v, crate::data::StoreOp::Register { key, value });
    s.confirm(v);
    s
}

/// Default timing (what every test's configuration uses).
pub(crate) fn timing() -> Timing {
    Timing::default()
}

/// Everything a [`Ctx`] borrows.
pub(crate) struct Env {
    pub cfg: DeviceConfig,
    pub rng: Rng,
    pub out: Vec<Output>,
    pub heard: BTreeMap<DeviceId, Instant>,
    /// Lookup hints (store → manager) handed to handlers.
    pub hints: BTreeMap<crate::ids::StoreId, DeviceId>,
    /// Epochs seen per store.
    pub epochs: BTreeMap<crate::ids::StoreId, crate::session::EpochsSeen>,
}

impl Env {
    /// The context parts of device `me`.
    pub fn new(me: DeviceId) -> Env {
        let mut cfg = DeviceConfig::new(me, ClusterConfig::new(5, 4, 3));
        cfg.run_policies = false;
        Env {
            cfg,
            rng: Rng::new(7),
            out: Vec::new(),
            heard: BTreeMap::new(),
            hints: BTreeMap::new(),
            epochs: BTreeMap::new(),
        }
    }

    /// A handler context at local time `now`.
    pub fn ctx(&mut self, now: Instant) -> Ctx<'_> {
        Ctx {
            now,
            cfg: &self.cfg,
            rng: &mut self.rng,
            out: &mut self.out,
            heard: &self.heard,
            hints: &self.hints,
            epochs: &self.epochs,
            inline_values: true,
            diff_transitions: true,
            rejoin_patches: true,
        }
    }

    /// The outputs so far, clearing them.
    pub fn take(&mut self) -> Vec<Output> {
        std::mem::take(&mut self.out)
    }
}

// ---- building state machines ---------------------------------------------------------

/// Chunk `c(1)` (on device 1) of [`layout`] in `state` at `epoch`, last leased from
/// `mgr`. Leased states hold a lease granted at [`T0`]; no lease is waiting for an answer
/// to a help sent at `T0`; other states hold no lease timers. Transition states need a
/// log: see [`in_transition`].
pub(crate) fn chunk(env: &mut Env, state: ChunkState, epoch: u64, mgr: DeviceId) -> Chunk {
    let t = timing();
    let mut k = {
        let mut ctx = env.ctx(T0);
        Chunk::created(&mut ctx, c(1), STORE, mgr, e(epoch), T0 + t.lease)
    };
    env.out.clear();
    k.record.metadata = layout();
    k.state = state;
    match state {
        ChunkState::RegularLease | ChunkState::RecoveryLease => {}
        ChunkState::NoLease => {
            k.lease_expiry = None;
            k.lease_renewal = None;
            k.help_at = Some(T0 + t.help_wait);
        }
        _ => {
            k.lease_expiry = None;
            k.lease_renewal = None;
        }
    }
    k
}

/// The log of an epoch transition to `new_epoch` with layout `metadata`, coordinated by
/// `new_mgr`, starting from `new_epoch - 1`.
pub(crate) fn tlog(new_epoch: u64, metadata: Metadata, new_mgr: DeviceId) -> TransitionLog {
    TransitionLog {
        old_epoch: e(new_epoch - 1),
        new_epoch: e(new_epoch),
        metadata,
        new_mgr,
        tx: TX,
    }
}

/// Chunk `c(1)` at `epoch`, leased from `mgr`, in a transition state (reconciling or
/// transition, regular or recovery) with `log`. In the transition states (after `done`)
/// the vote is durable as `prepared`, as `done` leaves it.
pub(crate) fn in_transition(
    env: &mut Env,
    state: ChunkState,
    epoch: u64,
    mgr: DeviceId,
    log: TransitionLog,
) -> Chunk {
    let t = timing();
    let mut k = chunk(env, state, epoch, mgr);
    if matches!(
        state,
        ChunkState::RegularTransition | ChunkState::RecoveryTransition
    ) {
        k.record.prepared = Some(Prepared {
            new_epoch: log.new_epoch,
            metadata: log.metadata.clone(),
            new_mgr: log.new_mgr,
        });
    }
    if state == ChunkState::RegularTransition {
        // The regular lease it held when the transition began is still running.
        k.lease_expiry = Some(T0 + t.lease);
    }
    k.log = Some(log);
    k.transition_deadline = Some(T0 + t.transition_wait);
    k
}

/// The role's `state` with empty data (a migration out to [`N`], attempt [`TX`], giving
/// up a `transition_wait` after `T0`; a relayout to [`layout`]).
pub(crate) fn stage(state: MgrState) -> Stage {
    use MgrState as S;
    let regen = Regeneration::default;
    let incoming = || Incoming { old_mgr: None };
    let outgoing = || Outgoing {
        new_mgr: N,
        tx: TX,
        deadline: T0 + timing().transition_wait,
    };
    match state {
        S::None => Stage::None(Vec::new()),
        S::NewlyAwake => Stage::NewlyAwake,
        S::IntoReconciling => Stage::IntoReconciling(incoming()),
        S::IntoTransition => Stage::IntoTransition(incoming()),
        S::OutOfReconciling => Stage::OutOfReconciling(outgoing()),
        S::OutOfTransition => Stage::OutOfTransition(outgoing()),
        S::Manager => Stage::Manager,
        S::RelayoutReconciling => Stage::RelayoutReconciling(layout()),
        S::RelayoutTransition => Stage::RelayoutTransition(layout()),
        S::GatheringChunks => Stage::GatheringChunks(regen()),
        S::Gathered => Stage::Gathered(regen()),
        S::GatheringLeases => Stage::GatheringLeases(regen()),
        S::RecoveryReconciling => Stage::RecoveryReconciling(regen()),
        S::RecoveryTransition => Stage::RecoveryTransition(regen()),
    }
}

/// A manager role for the store in `state` at `epoch` over [`layout`], all else empty.
pub(crate) fn manager(state: MgrState, epoch: u64) -> Manager {
    let mut m = Manager::new(STORE);
    m.stage = stage(state);
    m.epoch = e(epoch);
    m.metadata = layout();
    m
}

/// The manager of [`layout`] at `epoch`: every chunk leased until `T0 + lease`.
pub(crate) fn managing(epoch: u64) -> Manager {
    let mut m = manager(MgrState::Manager, epoch);
    for k in layout().chunks {
        m.chunkfail.insert(k, T0 + timing().lease);
    }
    m.stable_since = T0;
    m.entered_at = T0;
    // Every chunk is known to hold every object block (no completeness probes due).
    m.objects.complete = layout().chunks;
    m
}

/// A regenerating manager at `epoch`, in its first round, waiting for `outstanding`
/// (acquires sent at `T0`) and holding recovery leases on `won` (granted at `T0`).
pub(crate) fn gathering(epoch: u64, outstanding: &[u64], won: &[u64]) -> Manager {
    let t = timing();
    let mut m = manager(MgrState::GatheringChunks, epoch);
    m.regen_mut().rounds = 1;
    for k in set(outstanding) {
        m.regen_mut().outstanding.insert(k);
        m.timeout.insert(k, T0 + t.msg_timeout);
    }
    for k in set(won) {
        m.regen_mut().won.insert(k);
        m.chunkfail.insert(k, T0 + t.lease);
    }
    m
}

/// A manager at `epoch` that won the chunks `won` and sent `transfer lease` at `T0` to
/// `iffy`, over `metadata`.
pub(crate) fn gathering_leases(
    epoch: u64,
    metadata: Metadata,
    won: &[u64],
    iffy: &[u64],
) -> Manager {
    let t = timing();
    let mut m = manager(MgrState::GatheringLeases, epoch);
    m.metadata = metadata;
    m.regen_mut().rounds = 1;
    for k in set(won) {
        m.regen_mut().won.insert(k);
        m.chunkfail.insert(k, T0 + t.lease);
    }
    for k in set(iffy) {
        m.regen_mut().renewal_iffy.insert(k);
        m.chunkfail.insert(k, T0 + t.lease);
        m.timeout.insert(k, T0 + t.msg_timeout);
    }
    m
}

/// An epoch transition begun at `T0`, coordinated by the manager under test.
pub(crate) fn tx(
    kind: TxKind,
    new_epoch: u64,
    metadata: Metadata,
    participants: BTreeSet<ChunkId>,
) -> Tx {
    Tx {
        id: TX,
        kind,
        new_epoch: e(new_epoch),
        metadata,
        participants,
        votes: BTreeSet::new(),
        inputs: Tx::own_input(Epoch::default(), StoreData::default()),
        sources: vec![None],
        asked: BTreeSet::new(),
        await_mgr: None,
        begun: T0,
        deadline: T0 + timing().transition_timeout,
    }
}

/// Deliver `msg` from chunk `c(n)` (sent by its device) to manager `m` at `now`.
pub(crate) fn from_chunk(m: &mut Manager, env: &mut Env, now: Instant, n: u64, msg: ToManager) {
    m.on_msg(&mut env.ctx(now), d(n), c(n), msg);
}

/// A vote for `new_epoch` carrying an empty store.
pub(crate) fn vote(new_epoch: u64) -> ToManager {
    vote_of(new_epoch, TX)
}

/// A vote for `new_epoch` in transition attempt `tx`, carrying an empty store.
pub(crate) fn vote_of(new_epoch: u64, tx: u64) -> ToManager {
    ToManager::Vote {
        new_epoch: e(new_epoch),
        tx,
        data: Box::default(),
        committed: Epoch::default(),
    }
}

/// A vote to abort the transition to `new_epoch` (attempt [`TX`]).
pub(crate) fn vote_abort(new_epoch: u64) -> ToManager {
    ToManager::VoteAbort {
        new_epoch: e(new_epoch),
        tx: TX,
    }
}

/// `epoch transition(old, new, metadata, new mgr)` (attempt [`TX`]).
pub(crate) fn et(old: u64, new: u64, metadata: Metadata, new_mgr: DeviceId) -> ToChunk {
    ToChunk::EpochTransition {
        old_epoch: e(old),
        new_epoch: e(new),
        tx: TX,
        metadata,
        new_mgr,
        data: None,
    }
}

/// `commit tx` of the transition to `new_epoch` (attempt [`TX`]), its table stamped with
/// the transition that commits it (DESIGN "State at scale").
pub(crate) fn commit_msg(new_epoch: u64, data: StoreData, lease: Duration) -> ToChunk {
    ToChunk::Commit {
        new_epoch: e(new_epoch),
        tx: TX,
        data: Box::new(stamped(data, new_epoch)),
        lease,
    }
}

/// `data` stamped with the transition to `new_epoch` (attempt [`TX`]) that commits it.
pub(crate) fn stamped(mut data: StoreData, new_epoch: u64) -> StoreData {
    data.stamp = Some(crate::safetalk::Stamp {
        epoch: e(new_epoch),
        tx: TX,
    });
    data
}

/// `abort tx` of the transition to `new_epoch` (attempt [`TX`]).
pub(crate) fn abort_msg(new_epoch: u64, lease: Duration) -> ToChunk {
    ToChunk::Abort {
        new_epoch: e(new_epoch),
        tx: TX,
        lease,
    }
}

// ---- reading outputs -----------------------------------------------------------------

/// Every message sent, with its destination.
/// The layout messages sent (object block traffic, which rides beside them, left out).
pub(crate) fn sends(out: &[Output]) -> Vec<(DeviceId, Msg)> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send { to, msg } if !matches!(msg, Msg::Blocks(_)) => Some((*to, msg.clone())),
            _ => None,
        })
        .collect()
}

/// Messages from a chunk to managers: (destination, message). Checks they are the
/// store's and from `c(1)` (the chunk under test).
pub(crate) fn to_mgrs(out: &[Output]) -> Vec<(DeviceId, ToManager)> {
    sends(out)
        .into_iter()
        .filter_map(|(to, m)| match m {
            Msg::ToManager { store, chunk, msg } => {
                assert_eq!((store, chunk), (STORE, c(1)), "sender of {msg:?}");
                Some((to, msg))
            }
            _ => None,
        })
        .collect()
}

/// Messages from a manager to chunks: (chunk, message). Checks each goes to the chunk's
/// device and is for the store.
pub(crate) fn to_chunks(out: &[Output]) -> Vec<(ChunkId, ToChunk)> {
    sends(out)
        .into_iter()
        .filter_map(|(to, m)| match m {
            Msg::ToChunk { store, chunk, msg } => {
                assert_eq!((store, chunk.device), (STORE, to), "address of {msg:?}");
                Some((chunk, msg))
            }
            _ => None,
        })
        .collect()
}

/// Manager-to-manager messages: (destination, message).
pub(crate) fn mgr_msgs(out: &[Output]) -> Vec<(DeviceId, MgrMsg)> {
    sends(out)
        .into_iter()
        .filter_map(|(to, m)| match m {
            Msg::Mgr { store, msg } => {
                assert_eq!(store, STORE);
                Some((to, msg))
            }
            _ => None,
        })
        .collect()
}

/// Durable changes.
pub(crate) fn persists(out: &[Output]) -> Vec<PersistOp> {
    out.iter()
        .filter_map(|o| match o {
            Output::Persist(p) => Some(p.clone()),
            _ => None,
        })
        .collect()
}

/// Observations.
pub(crate) fn observations(out: &[Output]) -> Vec<Observation> {
    out.iter()
        .filter_map(|o| match o {
            Output::Observe(x) => Some(x.clone()),
            _ => None,
        })
        .collect()
}

/// The chunks that were sent `msg`-kind messages matching `f`, in order.
pub(crate) fn chunks_sent(out: &[Output], f: impl Fn(&ToChunk) -> bool) -> BTreeSet<ChunkId> {
    to_chunks(out)
        .into_iter()
        .filter(|(_, m)| f(m))
        .map(|(k, _)| k)
        .collect()
}
