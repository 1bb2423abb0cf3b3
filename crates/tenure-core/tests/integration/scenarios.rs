//! Scenario tests for the recovery paths of seed 000 (Palladio layout control), driven
//! through whole devices in virtual time with `tenure_core::testkit::Cluster`.

use std::collections::BTreeSet;
use std::time::Duration;
use tenure_core::io::{EpochCause, Input, Observation, PolicyCommand, Response};
use tenure_core::layout::{ChunkState, Metadata};
use tenure_core::msg::{MgrMsg, Msg, ToChunk, ToManager};
use tenure_core::testkit::Cluster;
use tenure_core::{DeviceId, Epoch, StoreId};

const S: StoreId = StoreId(0);

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn settled(n: u64, stores: u32, policies: bool) -> Cluster {
    let mut c = Cluster::with(n, stores, |cfg| cfg.run_policies = policies);
    c.run_for(secs(3));
    assert!(c.all_managed(), "bootstrap did not settle");
    c
}

fn write_ok(c: &mut Cluster, via: DeviceId, key: u64, value: u64) {
    let r = c.write(via, S, key, value);
    c.run_for(Duration::from_millis(50));
    assert!(
        matches!(c.replies.get(&r), Some(Ok(Response::Written { .. }))),
        "write via {via} failed: {:?}",
        c.replies.get(&r)
    );
}

/// Every chunk of S regularly leased in `epoch` holds `key = value`.
fn chunks_hold(c: &Cluster, epoch: Epoch, key: u64, value: u64) {
    let mut n = 0;
    for d in c.devices.values() {
        for v in d
            .chunk_views()
            .into_iter()
            .filter(|v| v.store == S && v.epoch == epoch)
        {
            let rec = d.chunk_record(v.id).expect("record");
            assert_eq!(
                rec.data.table.registers.entries.get(&key).map(|e| e.1),
                Some(value)
            );
            n += 1;
        }
    }
    assert!(n >= 2, "fewer than a quorum of chunks in {epoch}");
}

fn help_from(c: &Cluster, chunk: tenure_core::ChunkId) -> Msg {
    let rec = c.devices[&chunk.device].chunk_record(chunk).expect("chunk");
    Msg::ToManager {
        store: S,
        chunk,
        msg: ToManager::Help {
            epoch: rec.epoch,
            metadata: rec.metadata.clone(),
        },
    }
}

fn is_help(m: &Msg) -> bool {
    matches!(
        m,
        Msg::ToManager {
            msg: ToManager::Help { .. },
            ..
        }
    )
}

// seed 000 §4.2.1 lease expiry → §4.2.6 help → §5.3.1 → §5.3.10–14: a crashed manager is
// regenerated elsewhere in a new epoch, and an acknowledged write survives.
#[test]
fn manager_crash_leases_expire_help_regenerates_new_epoch() {
    let mut c = settled(5, 4, false);
    let (m, e) = c.manager_of(S).expect("manager");
    write_ok(&mut c, m, 7, 70);
    let crash_at = c.now;
    c.crash(m);
    c.run_for(secs(8));
    let (m2, e2) = c.manager_of(S).expect("regenerated");
    assert_ne!(m2, m);
    assert!(e2 > e, "epoch must increase: {e} -> {e2}");
    let regen = c.observations.iter().any(|(t, d, o)| {
        *t > crash_at
            && *d == m2
            && matches!(o, Observation::BecameManager { store, cause: EpochCause::Regeneration, .. } if *store == S)
    });
    assert!(regen, "no regeneration observed");
    assert!(
        c.delivered
            .iter()
            .any(|(t, _, _, msg)| *t > crash_at && is_help(msg))
    );
    chunks_hold(&c, e2, 7, 70);
    write_ok(&mut c, m2, 8, 80);
}

// seed 000 §5.3.10 nack arbitration, §5.3.11 release, §5.3.12 transfer lease,
// §4.2.7 transfer lease → transfernotice: two managers contend; exactly one wins.
#[test]
fn two_managers_contend_precedence_wins_loser_releases_or_is_transferred() {
    let mut c = settled(5, 1, false);
    let (m, _) = c.manager_of(S).expect("manager");
    let ranked = c.configs[&m].cluster.ranked_devices(S);
    let others: Vec<DeviceId> = ranked.into_iter().filter(|d| *d != m).collect();
    let (a, b) = (others[0], others[1]); // a has precedence over b
    c.crash(m);
    // Let every lease expire while suppressing help, so nobody regenerates yet.
    c.drop = Some(Box::new(|_, _, msg| is_help(msg)));
    c.run_for(secs(3));
    let live: Vec<_> = c.chunks_of(S).into_iter().map(|v| v.id).collect();
    assert!(live.len() >= 2);
    assert!(
        c.chunks_of(S)
            .iter()
            .all(|v| v.state == ChunkState::NoLease)
    );
    // a's first acquire of cb and b's first acquire of ca are lost: each wins one chunk.
    let (ca, cb) = (live[0], live[1]);
    let mut dropped = BTreeSet::new();
    c.drop = Some(Box::new(move |from, _, msg| {
        if let Msg::ToChunk {
            chunk,
            msg: ToChunk::Acquire { .. },
            ..
        } = msg
        {
            let lose = (from == a && *chunk == cb) || (from == b && *chunk == ca);
            if lose && dropped.insert((from, *chunk)) {
                return true;
            }
        }
        false
    }));
    let ha = help_from(&c, ca);
    let hb = help_from(&c, cb);
    c.input(
        a,
        Input::Message {
            from: ca.device,
            msg: ha,
        },
    );
    c.input(
        b,
        Input::Message {
            from: cb.device,
            msg: hb,
        },
    );
    c.run_for(secs(5));
    let (winner, _) = c.manager_of(S).expect("a manager");
    assert_eq!(winner, a, "the higher-precedence contender must win");
    let managers: Vec<_> = c
        .devices
        .values()
        .filter_map(|d| d.manager_view(S))
        .collect();
    assert_eq!(managers.len(), 1, "loser must give up: {managers:?}");
    let nacks = c.count_delivered(|m| {
        matches!(
            m,
            Msg::ToManager {
                msg: ToManager::Nack { .. },
                ..
            }
        )
    });
    assert!(nacks > 0, "contention must produce nacks");
    let released = c.count_delivered(|m| {
        matches!(
            m,
            Msg::ToChunk {
                msg: ToChunk::Release { .. },
                ..
            }
        )
    });
    let transferred = c.count_delivered(|m| {
        matches!(
            m,
            Msg::ToChunk {
                msg: ToChunk::TransferLease { .. },
                ..
            }
        )
    });
    assert!(released > 0, "the lesser manager must release its chunk");
    let _ = transferred;
    assert!(
        c.chunks_of(S)
            .iter()
            .all(|v| v.state == ChunkState::RegularLease)
    );
}

// seed 000 §5.3.7 relayout, §4.2.4 garbage collect, §5.3.7 help → lose: a chunk whose
// device was down while it was replaced comes back, is told to lose, and collects itself.
#[test]
fn relayout_replaces_failed_chunk_and_returning_chunk_is_garbage_collected() {
    let mut c = settled(5, 1, true);
    let (m, e) = c.manager_of(S).expect("manager");
    let victim = c
        .chunks_of(S)
        .into_iter()
        .find(|v| v.id.device != m)
        .expect("a chunk off the manager")
        .id;
    write_ok(&mut c, m, 1, 10);
    c.crash(victim.device);
    c.run_for(secs(10));
    assert!(
        c.observed(|o| matches!(
            o,
            Observation::Relayout {
                committed: true,
                ..
            }
        )) >= 1
    );
    let (m2, e2) = c.manager_of(S).expect("manager");
    assert!(e2 > e);
    let md = c.devices[&m2].manager_view(S).expect("view").metadata;
    assert!(!md.contains(victim), "failed chunk still in layout");
    assert_eq!(md.chunks.len(), 3);
    chunks_hold(&c, e2, 1, 10);
    // The old chunk returns from an older epoch.
    c.restart(victim.device);
    c.run_for(secs(3));
    assert!(
        c.count_delivered(|m| matches!(
            m,
            Msg::ToChunk {
                msg: ToChunk::Lose,
                ..
            }
        )) >= 1
    );
    assert!(
        c.observed(|o| matches!(o, Observation::ChunkCollected { chunk } if *chunk == victim)) == 1
    );
    assert!(!c.disks[&victim.device].chunks.contains_key(&victim));
}

// seed 000 §4.2.6 acquire → ack-conditional, §5.3.10 ack-conditional: a recovery started
// from an old-epoch chunk's help moves forward to the newer epoch it learns of.
#[test]
fn ack_conditional_moves_recovering_manager_forward() {
    let mut c = settled(5, 1, false);
    let (m, e) = c.manager_of(S).expect("manager");
    let old = c
        .chunks_of(S)
        .into_iter()
        .find(|v| v.id.device != m)
        .expect("chunk")
        .id;
    c.crash(old.device);
    c.run_for(secs(3)); // the manager marks it failed
    // Migrate to a device holding nothing of S, so the old chunk misses epoch e+1.
    let holders: BTreeSet<DeviceId> = c.chunks_of(S).iter().map(|v| v.id.device).collect();
    let x = (1..=5)
        .map(DeviceId)
        .find(|d| *d != m && *d != old.device && !holders.contains(d))
        .expect("free device");
    c.policy(m, PolicyCommand::Migrate { store: S, to: x });
    c.run_for(secs(1));
    assert_eq!(c.manager_of(S), Some((x, e.next())));
    // New manager dies; the old chunk comes back; nobody regenerates until we say so.
    c.crash(x);
    c.restart(old.device);
    c.drop = Some(Box::new(|_, _, msg| is_help(msg)));
    c.run_for(secs(3));
    let y = (1..=5)
        .map(DeviceId)
        .find(|d| ![x, m, old.device].contains(d) && c.devices.contains_key(d))
        .expect("director");
    let h = help_from(&c, old);
    c.input(
        y,
        Input::Message {
            from: old.device,
            msg: h,
        },
    );
    c.run_for(secs(2));
    assert!(
        c.count_delivered(|m| matches!(
            m,
            Msg::ToManager {
                msg: ToManager::AckConditional { .. },
                ..
            }
        )) >= 2
    );
    let (m3, e3) = c.manager_of(S).expect("regenerated");
    assert_eq!(m3, y);
    assert_eq!(
        e3,
        e.next().next(),
        "recovery must move forward to e+1 and commit e+2"
    );
    let serving = c
        .chunks_of(S)
        .into_iter()
        .filter(|v| v.epoch == e3 && v.state == ChunkState::RegularLease)
        .count();
    assert_eq!(serving, 3, "the old chunk rejoins in the new epoch");
}

// seed 000 §5.3.11 quorum predicate; DESIGN §4 locality: under a partition, a store gets a
// manager only on the side holding a majority of its chunks, and never on the other.
#[test]
fn minority_partition_never_regenerates() {
    let mut c = settled(5, 8, false);
    let minority: BTreeSet<DeviceId> = [DeviceId(1), DeviceId(2)].into();
    let majority: BTreeSet<DeviceId> = [DeviceId(3), DeviceId(4), DeviceId(5)].into();
    c.groups = vec![minority.clone(), majority.clone()];
    let start = c.now;
    c.run_for(secs(12));
    for (t, d, o) in &c.observations {
        if let Observation::BecameManager { metadata, .. } = o
            && *t > start
        {
            let side = if minority.contains(d) {
                &minority
            } else {
                &majority
            };
            let n = metadata
                .chunks
                .iter()
                .filter(|ch| side.contains(&ch.device))
                .count();
            assert!(
                2 * n > metadata.chunks.len(),
                "{d} became manager without a majority: {o:?}"
            );
        }
    }
    for s in 0..8 {
        let store = StoreId(s);
        let chunks = c.chunks_of(store);
        let on_major = chunks
            .iter()
            .filter(|v| majority.contains(&v.id.device))
            .count();
        let managers: Vec<DeviceId> = c
            .devices
            .iter()
            .filter(|(_, d)| {
                d.manager_view(store)
                    .is_some_and(|m| m.state == tenure_core::layout::MgrState::Manager)
            })
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(managers.len(), 1, "store {s}: managers {managers:?}");
        let side = if 2 * on_major > chunks.len() {
            &majority
        } else {
            &minority
        };
        assert!(
            side.contains(&managers[0]),
            "store {s} managed on the wrong side"
        );
    }
    c.groups.clear();
    c.run_for(secs(8));
    assert!(c.all_managed());
}

// seed 000 §5.3.7 migrate, §5.3.1 handoff, §5.3.3–6: a migration commits.
#[test]
fn migration_commits() {
    let mut c = settled(5, 1, false);
    let (m, e) = c.manager_of(S).expect("manager");
    write_ok(&mut c, m, 3, 30);
    let to = (1..=5).map(DeviceId).find(|d| *d != m).expect("other");
    c.policy(m, PolicyCommand::Migrate { store: S, to });
    c.run_for(secs(1));
    assert_eq!(c.manager_of(S), Some((to, e.next())));
    assert_eq!(
        c.observed(|o| matches!(
            o,
            Observation::Migration {
                committed: true,
                ..
            }
        )),
        1
    );
    // the old manager forwards a request to the new one (DESIGN §8), which serves it
    let r = c.write(m, S, 4, 40);
    c.run_for(Duration::from_millis(50));
    assert!(
        matches!(
            c.replies.get(&r),
            Some(Ok(tenure_core::io::Response::Written { .. }))
        ),
        "{:?}",
        c.replies.get(&r)
    );
    chunks_hold(&c, e.next(), 3, 30);
    write_ok(&mut c, to, 4, 40);
}

// seed 000 §5.3.4 abort tx / §5.3.6 abort tx / §4.2.3 abort tx: a migration whose
// participant cannot vote aborts; the old manager resumes in its epoch.
#[test]
fn migration_aborts_and_old_manager_resumes() {
    let mut c = settled(5, 1, false);
    let (m, e) = c.manager_of(S).expect("manager");
    let deaf = c.chunks_of(S)[0].id;
    c.drop = Some(Box::new(
        move |_, _, msg| matches!(msg, Msg::ToChunk { chunk, msg: ToChunk::EpochTransition { .. }, .. } if *chunk == deaf),
    ));
    let to = (1..=5).map(DeviceId).find(|d| *d != m).expect("other");
    c.policy(m, PolicyCommand::Migrate { store: S, to });
    c.run_for(secs(1));
    c.drop = None;
    assert_eq!(
        c.observed(|o| matches!(
            o,
            Observation::Migration {
                committed: false,
                ..
            }
        )),
        1
    );
    assert!(
        c.count_delivered(|m| matches!(
            m,
            Msg::Mgr {
                msg: MgrMsg::HandoffAbort { .. },
                ..
            }
        )) == 1
    );
    assert_eq!(c.manager_of(S), Some((m, e)));
    c.run_for(secs(3));
    assert_eq!(
        c.manager_of(S),
        Some((m, e)),
        "old manager keeps its leases"
    );
    write_ok(&mut c, m, 5, 50);
}

// seed 000 §2 (the commit protocol terminates) and DESIGN §3 SafeTalk prepare log: the
// manager dies mid-transition; the chunks give up, regenerate, and the new manager
// commits an epoch above the prepared one, keeping every acknowledged write.
#[test]
fn crash_during_epoch_transition_regenerates_past_prepared_epoch() {
    let mut c = settled(5, 1, false);
    let (m, e) = c.manager_of(S).expect("manager");
    write_ok(&mut c, m, 9, 90);
    let md: Metadata = c.devices[&m].manager_view(S).expect("view").metadata;
    // Votes never reach the manager; then it crashes.
    c.drop = Some(Box::new(|_, _, msg| {
        matches!(
            msg,
            Msg::ToManager {
                msg: ToManager::Vote { .. },
                ..
            }
        )
    }));
    c.policy(
        m,
        PolicyCommand::Relayout {
            store: S,
            metadata: md,
        },
    );
    c.run_for(Duration::from_millis(5));
    assert!(
        c.chunks_of(S)
            .iter()
            .all(|v| v.state == ChunkState::RegularTransition || v.id.device == m)
    );
    c.crash(m);
    c.drop = None;
    c.run_for(secs(10));
    let (m2, e2) = c.manager_of(S).expect("regenerated");
    assert_ne!(m2, m);
    assert!(
        e2 > e.next(),
        "epoch {} was prepared; new epoch {e2} must be above it",
        e.next()
    );
    assert_eq!(
        c.observed(|o| matches!(o, Observation::BecameManager { epoch, .. } if *epoch == e.next())),
        0
    );
    chunks_hold(&c, e2, 9, 90);
}

// seed 004 §2 SafeTalk with group commit (DESIGN §4): many changes share one ACCEPT, so
// chunks persist once per batch, not once per change.
#[test]
fn safetalk_group_commit_batches_concurrent_writes() {
    let mut c = settled(5, 1, false);
    let (m, _) = c.manager_of(S).expect("manager");
    let before = c.count_delivered(|m| {
        matches!(
            m,
            Msg::ToChunk {
                msg: ToChunk::Accept { .. },
                ..
            }
        )
    });
    let reqs: Vec<u64> = (0..20).map(|k| c.write(m, S, k, k * 10)).collect();
    c.run_for(Duration::from_millis(50));
    for r in &reqs {
        assert!(matches!(
            c.replies.get(r),
            Some(Ok(Response::Written { .. }))
        ));
    }
    let accepts = c.count_delivered(|m| {
        matches!(
            m,
            Msg::ToChunk {
                msg: ToChunk::Accept { .. },
                ..
            }
        )
    }) - before;
    // first write alone, the other 19 in the second batch: 2 batches x 3 chunks
    assert_eq!(accepts, 6, "20 writes must travel in 2 batches to 3 chunks");
    let e = c.manager_of(S).expect("manager").1;
    for k in 0..20 {
        chunks_hold(&c, e, k, k * 10);
    }
}

// seed 004 §2 (up list): a chunk that does not answer ACCEPT within the ack timeout is
// marked failed; the manager goes on with quorum, and the write is acknowledged. Tenure:
// its device is still heard from (only its ACCEPTEDs are lost), so it counts as slow and
// is spared up to one lease from the batch's sending before it is blamed.
#[test]
fn safetalk_silent_chunk_is_marked_failed_and_manager_continues() {
    let mut c = settled(5, 1, false);
    let (m, _) = c.manager_of(S).expect("manager");
    let silent = c
        .chunks_of(S)
        .into_iter()
        .find(|v| v.id.device != m)
        .expect("chunk")
        .id;
    c.drop = Some(Box::new(move |from, _, msg| {
        from == silent.device
            && matches!(
                msg,
                Msg::ToManager {
                    msg: ToManager::Accepted { .. },
                    ..
                }
            )
    }));
    let r = c.write(m, S, 1, 1);
    let blamed = |c: &tenure_core::testkit::Cluster| {
        c.observed(|o| matches!(o, Observation::ChunkFailed { chunk, .. } if *chunk == silent))
    };
    c.run_for(Duration::from_millis(400));
    assert_eq!(blamed(&c), 0, "heard from: spared past the ack timeout");
    assert!(!c.replies.contains_key(&r));
    c.run_for(Duration::from_millis(2_000));
    assert!(matches!(
        c.replies.get(&r),
        Some(Ok(Response::Written { .. }))
    ));
    assert!(blamed(&c) >= 1);
    let view = c.devices[&m].manager_view(S).expect("still manager");
    assert!(view.failed.contains(&silent));
}
