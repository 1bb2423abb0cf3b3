//! The core's share of one lock operation, in steady state: what the manager's LOCK table
//! does per acquire and release, what each chunk does per SafeTalk change (ACCEPT into the
//! L/R-list, CONFIRM into its own LOCK table), and the encoding of the delta it persists.
//!
//! `cargo bench -p tenure-core --bench lock_path`. Steady state means 16 sessions on 16
//! names with full idempotency windows, as `tenure bench locks` leaves a store after a
//! while.

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::time::Duration;
use tenure_core::data::{StoreData, StoreOp};
use tenure_core::ids::Version;
use tenure_core::ids::{ChunkId, DeviceId, Epoch};
use tenure_core::io::PersistOp;
use tenure_core::lockctl::{
    Acquire, LockMode, LockOp, LockTable, LockTableConfig, RequestId, SessionId, Wait,
};
use tenure_core::time::Instant;

const SESSIONS: u64 = 16;

fn names() -> Vec<String> {
    (0..SESSIONS).map(|k| format!("/bench-{k}/lock")).collect()
}

fn acquire(session: u64, request: u64, name: &str) -> LockOp {
    LockOp::Acquire(Acquire {
        session: SessionId(session),
        request_id: RequestId(request),
        name: name.to_string(),
        mode: LockMode::Exclusive,
        wait: Wait::Forever,
        lock_delay: None,
    })
}

fn release(session: u64, request: u64, name: &str) -> LockOp {
    LockOp::ReleaseRequest {
        name: name.to_string(),
        session: SessionId(session),
        request_id: RequestId(request),
    }
}

/// The i-th lock cycle of the workload: session i mod 16 on name (i + session) mod 16.
fn cycle(i: u64, names: &[String]) -> (LockOp, LockOp) {
    let s = i % SESSIONS + 1;
    let name = &names[((i + s) % SESSIONS) as usize];
    (acquire(s, 2 * i + 1, name), release(s, 2 * i + 2, name))
}

fn lock_table(c: &mut Criterion) {
    let names = names();
    let mut t = LockTable::new(LockTableConfig::default(), Epoch(1));
    let warm = 2 * 1024 * SESSIONS;
    for i in 0..warm {
        let (a, r) = cycle(i, &names);
        let _ = t.apply(&a, Instant(i));
        let _ = t.apply(&r, Instant(i));
    }
    let mut i = warm;
    c.bench_function("lock_table/acquire+release", |b| {
        b.iter(|| {
            let (a, r) = cycle(i, &names);
            let _ = black_box(t.apply(&a, Instant(i)));
            let _ = black_box(t.apply(&r, Instant(i)));
            i += 1;
        })
    });
}

fn chunk_replica(c: &mut Criterion) {
    let names = names();
    let mut replica = StoreData::default();
    let mut seq = 0u64;
    let v = |seq| Version {
        epoch: Epoch(1),
        seq,
    };
    let next = |replica: &mut StoreData, op: StoreOp, seq: &mut u64| {
        *seq += 1;
        // ACCEPT of this change with the CONFIRM of the previous one piggybacked, as the
        // manager sends them.
        replica.accept_batch(&[(v(*seq), op)], v(*seq - 1));
    };
    for _ in 0..SESSIONS {
        next(
            &mut replica,
            StoreOp::SessionOpen {
                ttl: Duration::from_secs(10),
            },
            &mut seq,
        );
    }
    replica.confirm(v(seq));
    let sessions: Vec<u64> = replica.table.sessions.open.keys().map(|s| s.0).collect();
    let lock = |op, i| StoreOp::Lock { op, at: Instant(i) };
    let warm = 2 * 1024 * SESSIONS;
    for i in 0..warm {
        let (a, r) = cycle(i, &names);
        next(&mut replica, lock(remap(a, &sessions), i), &mut seq);
        next(&mut replica, lock(remap(r, &sessions), i), &mut seq);
    }
    let mut i = warm;
    c.bench_function("chunk_replica/accept+confirm, acquire+release", |b| {
        b.iter(|| {
            let (a, r) = cycle(i, &names);
            next(&mut replica, lock(remap(a, &sessions), i), &mut seq);
            next(&mut replica, lock(remap(r, &sessions), i), &mut seq);
            i += 1;
        })
    });
}

/// The workload's session k (1-based) as the id the store gave its k-th session.
fn remap(op: LockOp, sessions: &[u64]) -> LockOp {
    let id = |s: SessionId| SessionId(sessions[(s.0 - 1) as usize]);
    match op {
        LockOp::Acquire(mut a) => {
            a.session = id(a.session);
            LockOp::Acquire(a)
        }
        LockOp::ReleaseRequest {
            name,
            session,
            request_id,
        } => LockOp::ReleaseRequest {
            name,
            session: id(session),
            request_id,
        },
        other => other,
    }
}

fn delta_encoding(c: &mut Criterion) {
    let names = names();
    let (a, _) = cycle(7, &names);
    let delta = PersistOp::Accept {
        chunk: ChunkId {
            device: DeviceId(1),
            serial: 3,
        },
        ops: vec![(
            Version {
                epoch: Epoch(1),
                seq: 1_000,
            },
            StoreOp::Lock {
                op: a,
                at: Instant(1_000_000),
            },
        )],
        confirm: Version {
            epoch: Epoch(1),
            seq: 999,
        },
        after: Default::default(),
    };
    c.bench_function("persist/encode acquire delta", |b| {
        b.iter(|| black_box(postcard::to_stdvec(black_box(&delta)).expect("encodes")))
    });
}

criterion_group!(benches, lock_table, chunk_replica, delta_encoding);
criterion_main!(benches);
