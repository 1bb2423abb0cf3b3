//! One group commit of the device storage: the write-ahead log record, written durably,
//! for a group of one lock-acquire delta and for a group of eight (what group commit
//! gathers under load). The figure is this disk's durable-write floor, which every lock
//! operation pays once per replica.
//!
//! `cargo bench -p tenure-server --bench storage_commit`. The data directory is created
//! under the system temporary directory (set `TMPDIR` to measure another disk).

use criterion::{Criterion, criterion_group, criterion_main};
use tenure_core::data::StoreOp;
use tenure_core::ids::Version;
use tenure_core::ids::{ChunkId, DeviceId, Epoch};
use tenure_core::io::{DevicePersist, Output, PersistOp};
use tenure_core::lockctl::{Acquire, LockMode, LockOp, RequestId, SessionId, Wait};
use tenure_core::time::Instant;
use tenure_core::{ClusterConfig, Device, DeviceConfig};
use tenure_server::storage::Storage;

fn acquire_delta(chunk: ChunkId, seq: u64) -> PersistOp {
    let v = |seq| Version {
        epoch: Epoch(1),
        seq,
    };
    PersistOp::Accept {
        chunk,
        ops: vec![(
            v(seq),
            StoreOp::Lock {
                op: LockOp::Acquire(Acquire {
                    session: SessionId(1),
                    request_id: RequestId(seq),
                    name: format!("/bench-{}/lock", seq % 16),
                    mode: LockMode::Exclusive,
                    wait: Wait::Forever,
                    lock_delay: None,
                }),
                at: Instant(seq),
            },
        )],
        confirm: v(seq - 1),
        after: Default::default(),
    }
}

fn commit(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (mut storage, _) = Storage::open(dir.path(), DeviceId(1)).expect("storage opens");
    // The chunks a booting device creates, so that deltas land on real records.
    let cfg = DeviceConfig::new(DeviceId(1), ClusterConfig::new(1, 4, 1));
    let (_device, boot) = Device::new(cfg, DevicePersist::default(), Instant(0), 1);
    let boot: Vec<PersistOp> = boot
        .into_iter()
        .filter_map(|o| match o {
            Output::Persist(p) => Some(p),
            _ => None,
        })
        .collect();
    let chunk = boot
        .iter()
        .find_map(|p| match p {
            PersistOp::PutChunk(c) => Some(c.id),
            _ => None,
        })
        .unwrap_or(ChunkId {
            device: DeviceId(1),
            serial: 0,
        });
    storage.commit(boot).expect("boot records commit");
    let mut seq = 1;
    for group in [1u64, 8] {
        c.bench_function(&format!("storage/commit group of {group} deltas"), |b| {
            b.iter(|| {
                let ops = (0..group)
                    .map(|_| {
                        seq += 1;
                        acquire_delta(chunk, seq)
                    })
                    .collect();
                storage.commit(ops).expect("commit");
            })
        });
    }
}

criterion_group!(benches, commit);
criterion_main!(benches);
