//! Each store checker fires on a hand-built bad history.

use super::*;
use std::time::Duration;
use tenure_core::data::StoreOp;

const S: StoreId = StoreId(0);
fn chunk() -> ChunkId {
    ChunkId {
        device: DeviceId(1),
        serial: 0,
    }
}

// DESIGN §9.1: two devices becoming manager of the same epoch is caught.
#[test]
fn two_managers_in_one_epoch_fire() {
    let mut c = Checker::default();
    c.became_manager(DeviceId(1), S, Epoch(2));
    c.became_manager(DeviceId(2), S, Epoch(3));
    assert!(c.violations.is_empty());
    c.became_manager(DeviceId(3), S, Epoch(3));
    assert!(matches!(c.violations[0], Violation::TwoManagers { .. }));
}

// DESIGN §9.1: epochs must strictly increase.
#[test]
fn epoch_regression_fires() {
    let mut c = Checker::default();
    c.became_manager(DeviceId(1), S, Epoch(4));
    c.became_manager(DeviceId(1), S, Epoch(3));
    assert!(matches!(
        c.violations[0],
        Violation::EpochNotIncreasing { .. }
    ));
}

fn view(state: ChunkState, epoch: u64, expiry: u64) -> ChunkView {
    ChunkView {
        id: chunk(),
        store: S,
        state,
        epoch: Epoch(epoch),
        lease_expiry: Some(Instant(expiry)),
        lease_mgr: Some(DeviceId(2)),
    }
}

// DESIGN §9.2: serving outside the regular lease, in another epoch, or past
// expiry − δ_c is caught; serving inside it is not.
#[test]
fn serving_without_lease_fires() {
    let d = Duration::from_millis(50);
    let mut c = Checker::default();
    c.chunk_served(
        chunk(),
        Epoch(2),
        Some(view(ChunkState::RegularLease, 2, 1_000_000)),
        Instant(900_000),
        d,
    );
    assert!(c.violations.is_empty());
    c.chunk_served(
        chunk(),
        Epoch(2),
        Some(view(ChunkState::NoLease, 2, 1_000_000)),
        Instant(900_000),
        d,
    );
    c.chunk_served(
        chunk(),
        Epoch(3),
        Some(view(ChunkState::RegularLease, 2, 1_000_000)),
        Instant(900_000),
        d,
    );
    c.chunk_served(
        chunk(),
        Epoch(2),
        Some(view(ChunkState::RegularLease, 2, 1_000_000)),
        Instant(960_000),
        d,
    );
    assert_eq!(c.violations.len(), 3);
}

fn record(epoch: u64, data: StoreData) -> ChunkPersist {
    ChunkPersist {
        id: chunk(),
        store: S,
        epoch: Epoch(epoch),
        metadata: Default::default(),
        lease_mgr: None,
        prepared: None,
        known: None,
        data,
    }
}

// DESIGN §9.4 (seed 004 §4.1, maximum forward progress): a write acked by the manager
// of epoch e must be in every chunk that commits an epoch > e — whether the commit
// comes after the ack, or came before it (then the acking manager was stale).
#[test]
fn lost_acknowledged_write_fires() {
    let v = Version {
        epoch: Epoch(2),
        seq: 1,
    };
    let mut holding = StoreData::default();
    holding.table.registers.apply(7, v, 70);
    let empty = StoreData::default();
    let mut c = Checker::default();
    c.chunk_committed(chunk(), S, Epoch(2), &empty);
    c.write_acked(S, 7, v, std::iter::once(&record(2, empty.clone())));
    assert!(c.violations.is_empty(), "same epoch: not yet required");
    c.chunk_committed(chunk(), S, Epoch(3), &holding);
    assert!(c.violations.is_empty());
    c.chunk_committed(chunk(), S, Epoch(3), &empty);
    assert_eq!(c.violations.len(), 1);
    // A stale manager of epoch 2 acks a write after a chunk committed epoch 4.
    let mut c = Checker::default();
    c.chunk_committed(chunk(), S, Epoch(4), &empty);
    c.write_acked(S, 7, v, std::iter::once(&record(4, empty.clone())));
    assert!(matches!(c.violations[0], Violation::LostWrite { .. }));
    // A newer version of the key satisfies an older ack.
    let mut newer = StoreData::default();
    newer.table.registers.apply(
        7,
        Version {
            epoch: Epoch(3),
            seq: 9,
        },
        1,
    );
    let mut c = Checker::default();
    c.write_acked(S, 7, v, std::iter::empty());
    c.chunk_committed(chunk(), S, Epoch(4), &newer);
    assert!(c.violations.is_empty());
}

// DESIGN §10 durable before acknowledged: volatile "persistent" state that never
// reached the disk is caught at a crash.
#[test]
fn persist_divergence_fires() {
    let mut c = Checker::default();
    let mut disk = DevicePersist::default();
    disk.apply(&tenure_core::PersistOp::PutChunk(Box::new(record(
        2,
        StoreData::default(),
    ))));
    let mut memory = disk.clone();
    c.persisted(DeviceId(1), &memory, &disk);
    assert!(c.violations.is_empty());
    // A CONFIRM not yet on disk is allowed: the change is durable in the L-list.
    let v = |seq| Version {
        epoch: Epoch(2),
        seq,
    };
    let accept = |seq| tenure_core::PersistOp::Accept {
        chunk: chunk(),
        ops: vec![(v(seq), StoreOp::Register { key: 1, value: seq })],
        confirm: Version::default(),
        after: Default::default(),
    };
    disk.apply(&accept(1));
    memory.apply(&accept(1));
    memory
        .chunks
        .get_mut(&chunk())
        .expect("chunk")
        .data
        .confirm(v(1));
    c.persisted(DeviceId(1), &memory, &disk);
    assert!(c.violations.is_empty(), "{:?}", c.violations);
    // A confirmed change whose ACCEPT never reached the disk is not.
    memory.apply(&accept(2));
    memory
        .chunks
        .get_mut(&chunk())
        .expect("chunk")
        .data
        .confirm(v(2));
    c.persisted(DeviceId(1), &memory, &disk);
    assert_eq!(c.violations.len(), 1);
    c.violations.clear();
    memory = disk.clone();
    memory.chunks.get_mut(&chunk()).expect("chunk").epoch = Epoch(3);
    c.persisted(DeviceId(1), &memory, &disk);
    assert_eq!(
        c.violations,
        vec![Violation::PersistDivergence {
            device: DeviceId(1),
            chunk: Some(chunk()),
            what: "chunk records".into(),
        }]
    );
}

// DESIGN §9.1 from manager roles: a second device in the Manager state for an
// (store, epoch) already managed elsewhere is caught even without an announcement.
#[test]
fn two_manager_roles_fire() {
    let mut c = Checker::default();
    c.became_manager(DeviceId(1), S, Epoch(5));
    c.manager_role(DeviceId(1), S, Epoch(5));
    assert!(c.violations.is_empty());
    c.manager_role(DeviceId(2), S, Epoch(5));
    assert!(matches!(c.violations[0], Violation::TwoManagers { .. }));
    assert_eq!(c.violations[0].kind(), ViolationKind::Correctness);
}

fn stamped(epoch: u64, tx: u64, key: u64) -> StoreData {
    let mut d = StoreData::default();
    d.table.registers.apply(key, Version::default(), 7);
    d.stamp = Some(tenure_core::safetalk::Stamp {
        epoch: Epoch(epoch),
        tx,
    });
    d
}

// DESIGN "State at scale": two chunks committing one stamp into different tables are
// caught; equal tables, and a later stamp, are not.
#[test]
fn one_stamp_two_tables_fires() {
    let other = ChunkId {
        device: DeviceId(2),
        serial: 0,
    };
    let mut c = Checker::default();
    c.chunk_committed(chunk(), S, Epoch(3), &stamped(3, 1, 5));
    c.chunk_committed(other, S, Epoch(3), &stamped(3, 1, 5));
    c.chunk_committed(other, S, Epoch(4), &stamped(4, 1, 6));
    assert!(c.violations.is_empty());
    assert_eq!(c.counts.stamp_checks, 1);
    c.chunk_committed(chunk(), S, Epoch(4), &stamped(4, 1, 7));
    assert!(
        matches!(c.violations[0], Violation::StampDiverged { .. }),
        "{:?}",
        c.violations
    );
}
