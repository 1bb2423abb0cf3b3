//! Scenario tests of objects on a small cluster (DESIGN §5): uploads and reads through
//! the manager, collection under deletion leases, repair of a chunk that missed writes,
//! a manager crash in the middle of an upload, and watches.

use super::*;
use crate::config::{DeviceConfig, store_of};
use crate::error::ClientError;
use crate::ids::{DeviceId, StoreId};
use crate::io::Output;
use crate::io::request::ObjectRequest;
use crate::io::request::Request;
use crate::io::request::Response;
use crate::io::request::Writer;
use crate::msg::Msg;
use crate::testkit::Cluster;
use std::time::Duration;

pub(super) const STORES: u32 = 4;

/// Settings of the block workflow's scenarios: tiny blocks, and no inline values, so
/// that every put goes through the seed's upload (the one-change put of small objects
/// has its own scenarios, in `small_scenarios`).
pub(super) fn tweak(cfg: &mut DeviceConfig) {
    cfg.objects.inline_max = 0;
    cfg.objects.block_size = 4;
    cfg.objects.prune_after = Duration::from_secs(5);
    cfg.objects.lease_timeout = Duration::from_secs(2);
    cfg.objects.checkin_interval = Duration::from_millis(500);
    cfg.objects.writing_timeout = Duration::from_secs(3);
}

pub(super) fn cluster() -> Cluster {
    let mut c = Cluster::with(3, STORES, tweak);
    c.run_for(Duration::from_secs(3));
    assert!(c.all_managed());
    c
}

pub(super) fn store(key: &str) -> StoreId {
    store_of(key, STORES)
}

pub(super) fn mgr(c: &Cluster, key: &str) -> DeviceId {
    c.manager_of(store(key)).expect("managed").0
}

pub(super) fn ask(c: &mut Cluster, key: &str, req: ObjectRequest) -> Result<Response, ClientError> {
    ask_within(c, key, req, Duration::from_millis(200))
}

pub(super) fn ask_within(
    c: &mut Cluster,
    key: &str,
    req: ObjectRequest,
    wait: Duration,
) -> Result<Response, ClientError> {
    let d = mgr(c, key);
    let id = c.request(
        d,
        1,
        Request::Object {
            store: store(key),
            req,
        },
    );
    c.run_for(wait);
    c.replies.remove(&id).expect("answered")
}

/// A plain put of `data` under `key` by `writer`.
pub(super) fn put_req(key: &str, data: &[u8], writer: Writer) -> ObjectRequest {
    ObjectRequest::Put {
        key: key.into(),
        data: Bytes::copy_from_slice(data),
        writer,
        cond: Default::default(),
        ephemeral: false,
    }
}

pub(super) fn put(c: &mut Cluster, key: &str, data: &[u8]) -> Result<Response, ClientError> {
    ask(c, key, put_req(key, data, Writer::default()))
}

pub(super) fn get(c: &mut Cluster, key: &str) -> Result<Vec<u8>, ClientError> {
    match ask(c, key, ObjectRequest::Get { key: key.into() })? {
        Response::Object { data, .. } => Ok(data.to_vec()),
        other => panic!("{other:?}"),
    }
}

/// Every chunk of the key's store holds the active object's blocks.
fn blocks_everywhere(c: &Cluster, key: &str) -> bool {
    let d = mgr(c, key);
    let meta = c.devices[&d]
        .managed_tables(store(key))
        .and_then(|t| t.objects.meta(key))
        .expect("active");
    let chunks = c.chunks_of(store(key));
    chunks.iter().all(|ch| {
        let b = c.devices[&ch.id.device].chunk_blocks(ch.id).expect("chunk");
        meta.blocks
            .iter()
            .all(|(id, info)| b.data.get(id).is_some_and(|d| BlockInfo::of(d) == *info))
    })
}

#[test]
fn put_then_get_returns_the_bytes_from_every_chunk() {
    let mut c = cluster();
    let r = put(&mut c, "/cfg/app", b"hello, objects!");
    assert!(
        matches!(r, Ok(Response::ObjectWritten { revision: 1, .. })),
        "{r:?}"
    );
    assert_eq!(get(&mut c, "/cfg/app"), Ok(b"hello, objects!".to_vec()));
    assert!(blocks_everywhere(&c, "/cfg/app"));
    // Votes and ACCEPTs kept pending carry no block data: the chunks' records hold
    // manifests only.
    for ch in c.chunks_of(store("/cfg/app")) {
        let rec = c.devices[&ch.id.device].chunk_record(ch.id).unwrap();
        for (_, op) in rec.data.pending() {
            assert_eq!(op.data_len(), 0);
        }
    }
    assert_eq!(
        get(&mut c, "/cfg/none"),
        Err(ObjectError::NoSuchObject.into())
    );
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let mut c = cluster();
    assert!(matches!(
        put(&mut c, "no-slash", b"x"),
        Err(ClientError::InvalidName(_))
    ));
    let big = vec![0u8; (64 << 20) + 1];
    assert_eq!(
        put(&mut c, "/a/big", &big),
        Err(ClientError::TooLarge {
            size: big.len() as u64,
            limit: 64 << 20
        })
    );
    let long = format!("/{}", "k".repeat(2000));
    assert!(matches!(
        put(&mut c, &long, b"x"),
        Err(ClientError::InvalidName(_))
    ));
    let d = mgr(&c, "/a/x");
    let t = c.devices[&d].managed_tables(store("/a/x")).unwrap();
    assert!(t.objects.keys.is_empty() && t.objects.revision == 0);
}

#[test]
fn replacing_an_object_collects_the_old_blocks_then_prunes_the_tombstone() {
    let mut c = cluster();
    put(&mut c, "/gc/k", b"first version").unwrap();
    put(&mut c, "/gc/k", b"second").unwrap();
    let s = store("/gc/k");
    let old: Vec<BlockId> = {
        let t = c.devices[&mgr(&c, "/gc/k")].managed_tables(s).unwrap();
        let d = &t.objects.keys["/gc/k"];
        let m = d.values().find(|m| m.revision == 1).unwrap();
        assert_eq!(m.state, ManifestState::PendingDelete);
        m.blocks.iter().map(|(b, _)| *b).collect()
    };
    c.run_for(Duration::from_secs(2));
    {
        let t = c.devices[&mgr(&c, "/gc/k")].managed_tables(s).unwrap();
        let states: Vec<_> = t.objects.keys["/gc/k"].values().map(|m| m.state).collect();
        assert!(states.contains(&ManifestState::Deleted), "{states:?}");
    }
    for ch in c.chunks_of(s) {
        let b = c.devices[&ch.id.device].chunk_blocks(ch.id).unwrap();
        assert!(old.iter().all(|id| !b.data.contains_key(id)));
    }
    assert_eq!(get(&mut c, "/gc/k"), Ok(b"second".to_vec()));
    // The tombstone is pruned after prune_after (5 s).
    c.run_for(Duration::from_secs(7));
    let t = c.devices[&mgr(&c, "/gc/k")].managed_tables(s).unwrap();
    assert_eq!(t.objects.keys["/gc/k"].len(), 1);
    assert!(t.objects.attention.is_empty());
}

#[test]
fn a_chunk_that_missed_writes_repairs_from_a_peer_and_becomes_complete() {
    let mut c = cluster();
    let key = "/rep/k";
    let s = store(key);
    let (m, _) = c.manager_of(s).unwrap();
    // Cut one chunk's device off from the manager: its ACCEPTs are lost, it is marked
    // failed, and the write goes on with the other two.
    let lagging = c
        .chunks_of(s)
        .into_iter()
        .find(|ch| ch.id.device != m)
        .unwrap()
        .id;
    let cut = lagging.device;
    c.drop = Some(Box::new(move |from, to, _| {
        (from == cut && to == m) || (from == m && to == cut)
    }));
    let req = ObjectRequest::Put {
        key: key.into(),
        data: Bytes::from_static(b"written while a chunk was away"),
        writer: Writer::default(),
        cond: Default::default(),
        ephemeral: false,
    };
    let r = ask_within(&mut c, key, req, Duration::from_secs(2));
    assert!(matches!(r, Ok(Response::ObjectWritten { .. })), "{r:?}");
    c.run_for(Duration::from_secs(1));
    assert!(!c.devices[&m].complete_chunks(s).contains(&lagging));
    assert!(
        c.devices[&cut]
            .chunk_blocks(lagging)
            .unwrap()
            .data
            .is_empty()
    );
    // It comes back; the outside policy relayouts (or regeneration brings it back).
    c.drop = None;
    c.run_for(Duration::from_secs(20));
    let (m2, _) = c.manager_of(s).unwrap();
    let chunks = c.chunks_of(s);
    assert!(blocks_everywhere(&c, key), "every chunk repaired");
    let repair_reads = c.count_delivered(|m| {
        matches!(
            m,
            Msg::Blocks(crate::objects::msg::BlockMsg::Read {
                reply_to: crate::objects::msg::Requester::Chunk(_),
                ..
            })
        )
    });
    assert!(repair_reads > 0, "the blocks came by repair");
    let complete = c.devices[&m2].complete_chunks(s);
    assert_eq!(complete.len(), chunks.len(), "{complete:?} vs {chunks:?}");
    assert_eq!(
        get(&mut c, key),
        Ok(b"written while a chunk was away".to_vec())
    );
}

#[test]
fn an_upload_interrupted_by_a_manager_crash_is_finished_by_its_retry() {
    // Small batches: the upload takes many SafeTalk rounds.
    let mut c = Cluster::with(3, STORES, |cfg| {
        tweak(cfg);
        cfg.objects.max_batch_bytes = 16;
        cfg.objects.writing_timeout = Duration::from_secs(60);
    });
    c.run_for(Duration::from_secs(3));
    let key = "/crash/k";
    let s = store(key);
    let (m, _) = c.manager_of(s).unwrap();
    // Open a session for idempotent retries.
    let id = c.request(
        m,
        1,
        Request::OpenSession {
            store: s,
            ttl: Duration::from_secs(30),
        },
    );
    c.run_for(Duration::from_millis(100));
    let Ok(Response::SessionOpened { session, .. }) = c.replies.remove(&id).unwrap() else {
        panic!()
    };
    let data = b"0123456789abcdefghijklmnopqrstuvwxyz".repeat(4);
    let writer = Writer {
        session: Some(session),
        request_id: 77,
    };
    let req = || ObjectRequest::Put {
        key: key.into(),
        data: Bytes::copy_from_slice(&data),
        writer,
        cond: Default::default(),
        ephemeral: false,
    };
    let rid = c.request(
        m,
        1,
        Request::Object {
            store: s,
            req: req(),
        },
    );
    // Let the first batches (Begin and some blocks) reach the chunks, then crash.
    c.run_for(Duration::from_micros(5500));
    c.crash(m);
    c.run_for(Duration::from_secs(10));
    assert!(matches!(
        c.replies.remove(&rid),
        None | Some(Err(ClientError::Unavailable { .. }))
    ));
    let (m2, _) = c.manager_of(s).expect("a new manager");
    assert_ne!(m2, m);
    {
        let t = c.devices[&m2].managed_tables(s).unwrap();
        let w: Vec<_> = t.objects.keys[key].values().collect();
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].state, ManifestState::Writing, "interrupted mid-upload");
        assert!(!w[0].remaining_write.is_empty());
    }
    let r = ask(&mut c, key, req());
    assert!(matches!(r, Ok(Response::ObjectWritten { .. })), "{r:?}");
    // The retry is idempotent: again returns the same revision.
    let again = ask(&mut c, key, req());
    assert_eq!(r, again);
    assert_eq!(get(&mut c, key), Ok(data.clone()));
    // The retry finished the interrupted upload (the manifest the first attempt left
    // in writing) rather than starting another.
    let t = c.devices[&m2].managed_tables(s).unwrap();
    let states: Vec<ManifestState> = t.objects.keys[key].values().map(|m| m.state).collect();
    assert_eq!(states, vec![ManifestState::Active]);
}

#[test]
fn watch_delivers_every_change_in_order_and_resumes_from_a_revision() {
    let mut c = cluster();
    let key = "/w/a";
    let watch = |c: &mut Cluster, after| {
        ask(
            c,
            key,
            ObjectRequest::Watch {
                watch: 9,
                prefix: "/w".into(),
                after,
                values: false,
            },
        )
    };
    assert_eq!(watch(&mut c, None), Ok(Response::Watching { revision: 0 }));
    put(&mut c, "/w/a", b"1").unwrap();
    put(&mut c, "/w/b", b"2").unwrap();
    ask(
        &mut c,
        key,
        ObjectRequest::Delete {
            key: "/w/a".into(),
            writer: Writer::default(),
            cond: Default::default(),
        },
    )
    .unwrap();
    let revs = |c: &Cluster| -> Vec<u64> {
        (c.watch_outputs.iter())
            .flat_map(|(_, _, o)| match o {
                Output::ObjectEvents { changes, .. } => changes.clone(),
                _ => vec![],
            })
            .map(|ch| ch.revision)
            .collect()
    };
    // /w/a and /w/b may be in different stores: each store's revisions are its own.
    let same_store = store("/w/a") == store("/w/b");
    if same_store {
        assert_eq!(revs(&c), vec![1, 2, 3]);
    } else {
        assert_eq!(revs(&c), vec![1, 2]);
    }
    // Resuming from revision 1 replays what came after it.
    c.watch_outputs.clear();
    assert_eq!(
        watch(&mut c, Some(1)),
        Ok(Response::Watching { revision: 1 })
    );
    assert!(!revs(&c).is_empty() && revs(&c).iter().all(|r| *r > 1));
}

#[test]
fn multipart_upload_through_the_manager() {
    let mut c = cluster();
    let key = "/mp/obj";
    let Ok(Response::UploadStarted { upload }) = ask(
        &mut c,
        key,
        ObjectRequest::MultipartInitiate {
            key: key.into(),
            writer: Writer::default(),
        },
    ) else {
        panic!()
    };
    for (n, d) in [(2, &b"-second-"[..]), (1, b"first"), (3, b"unused")] {
        let r = ask(
            &mut c,
            key,
            ObjectRequest::MultipartPart {
                key: key.into(),
                upload,
                part: n,
                data: Bytes::copy_from_slice(d),
            },
        );
        assert!(matches!(r, Ok(Response::PartStored { .. })), "{r:?}");
    }
    let r = ask(
        &mut c,
        key,
        ObjectRequest::MultipartComplete {
            key: key.into(),
            upload,
            parts: vec![1, 2],
            writer: Writer::default(),
            cond: Default::default(),
        },
    );
    assert!(matches!(r, Ok(Response::ObjectWritten { .. })), "{r:?}");
    assert_eq!(get(&mut c, key), Ok(b"first-second-".to_vec()));
    // The unused part is collected and the manifest becomes multipart_clean.
    c.run_for(Duration::from_secs(3));
    let t = c.devices[&mgr(&c, key)].managed_tables(store(key)).unwrap();
    let m = t.objects.active(key).unwrap();
    assert!(m.props.multipart_clean, "{m:?}");
    for ch in c.chunks_of(store(key)) {
        let b = c.devices[&ch.id.device].chunk_blocks(ch.id).unwrap();
        assert!(b.data.keys().all(|id| id.part != 3));
    }
}

#[test]
fn block_data_never_travels_in_a_vote_or_commit() {
    let mut c = cluster();
    put(&mut c, "/v/k", b"some block data here").unwrap();
    // Force an epoch transition (a migration) and look at every vote and commit.
    let s = store("/v/k");
    let (m, _) = c.manager_of(s).unwrap();
    let to = c.configs.keys().copied().find(|d| *d != m).unwrap();
    c.policy(
        m,
        crate::io::policy::PolicyCommand::Migrate { store: s, to },
    );
    c.run_for(Duration::from_secs(3));
    assert_eq!(c.manager_of(s).unwrap().0, to);
    let carried = |msg: &Msg| match msg {
        Msg::ToManager {
            msg: crate::msg::ToManager::Vote { data, .. },
            ..
        }
        | Msg::ToChunk {
            msg: crate::msg::ToChunk::Commit { data, .. },
            ..
        } => data
            .pending()
            .iter()
            .map(|(_, o)| o.data_len())
            .sum::<usize>(),
        _ => 0,
    };
    let transitions = c.count_delivered(|m| {
        matches!(
            m,
            Msg::ToManager {
                msg: crate::msg::ToManager::Vote { .. },
                ..
            }
        )
    });
    assert!(transitions > 0);
    assert_eq!(
        (c.delivered.iter())
            .map(|(_, _, _, m)| carried(m))
            .sum::<usize>(),
        0
    );
    assert_eq!(get(&mut c, "/v/k"), Ok(b"some block data here".to_vec()));
}

#[test]
fn an_upload_left_writing_is_abandoned_and_collected() {
    let mut c = Cluster::with(3, STORES, |cfg| {
        tweak(cfg);
        cfg.objects.max_batch_bytes = 16;
    });
    c.run_for(Duration::from_secs(3));
    let key = "/stale/k";
    let s = store(key);
    let (m, _) = c.manager_of(s).unwrap();
    let req = ObjectRequest::Put {
        key: key.into(),
        data: Bytes::from(vec![7u8; 200]),
        writer: Writer::default(),
        cond: Default::default(),
        ephemeral: false,
    };
    c.request(m, 1, Request::Object { store: s, req });
    c.run_for(Duration::from_micros(5500));
    c.crash(m);
    // writing_timeout (3 s) passes; the new manager abandons the upload and collects
    // the blocks that were written.
    c.run_for(Duration::from_secs(8));
    let (m2, _) = c.manager_of(s).unwrap();
    let t = c.devices[&m2].managed_tables(s).unwrap();
    let states: Vec<ManifestState> = t.objects.keys[key].values().map(|m| m.state).collect();
    assert_eq!(states, vec![ManifestState::Deleted]);
    for ch in c.chunks_of(s) {
        assert!(
            c.devices[&ch.id.device]
                .chunk_blocks(ch.id)
                .unwrap()
                .data
                .is_empty()
        );
    }
}

#[test]
fn a_deletion_lease_not_checked_in_is_taken_over_by_the_next_manager() {
    let mut c = cluster();
    let key = "/lease/k";
    let s = store(key);
    put(&mut c, key, b"old content").unwrap();
    let (m, _) = c.manager_of(s).unwrap();
    // The collector's deletions never arrive: it holds the lease and keeps checking in.
    c.drop = Some(Box::new(|_, _, msg| {
        matches!(
            msg,
            Msg::Blocks(crate::objects::msg::BlockMsg::Delete { .. })
        )
    }));
    put(&mut c, key, b"new content").unwrap();
    c.run_for(Duration::from_millis(600));
    {
        let t = c.devices[&m].managed_tables(s).unwrap();
        let p = t.objects.keys[key]
            .values()
            .find(|m| m.revision == 1)
            .unwrap();
        assert_eq!(p.lease.map(|l| l.holder), Some(m), "lease taken");
    }
    // The collector dies with its manager; deletions flow again.
    c.drop = None;
    c.crash(m);
    c.run_for(Duration::from_secs(10));
    let (m2, _) = c.manager_of(s).unwrap();
    assert!(
        c.observed(|o| matches!(
            o,
            crate::io::observation::Observation::GcLeaseTakeover { .. }
        )) > 0
    );
    let t = c.devices[&m2].managed_tables(s).unwrap();
    // Collected (deleted, or already pruned: prune_after is 5 s here).
    let old = t.objects.keys[key].values().find(|m| m.revision == 1);
    assert!(
        old.is_none_or(|m| m.state == ManifestState::Deleted),
        "{old:?}"
    );
    for ch in c.chunks_of(s) {
        let b = c.devices[&ch.id.device].chunk_blocks(ch.id).unwrap();
        assert_eq!(b.data.len(), 3, "only the new content's 3 blocks are left");
    }
    assert_eq!(get(&mut c, key), Ok(b"new content".to_vec()));
}

pub(super) fn session(c: &mut Cluster, s: StoreId) -> crate::ids::SessionId {
    let (m, _) = c.manager_of(s).unwrap();
    let id = c.request(
        m,
        1,
        Request::OpenSession {
            store: s,
            ttl: Duration::from_secs(30),
        },
    );
    c.run_for(Duration::from_millis(100));
    match c.replies.remove(&id) {
        Some(Ok(Response::SessionOpened { session, .. })) => session,
        other => panic!("{other:?}"),
    }
}

fn lock_req(c: &mut Cluster, s: StoreId, req: Request) -> Result<Response, ClientError> {
    let (m, _) = c.manager_of(s).unwrap();
    let id = c.request(m, 1, req);
    c.run_for(Duration::from_millis(100));
    c.replies.remove(&id).expect("answered")
}

fn acquire(
    c: &mut Cluster,
    s: StoreId,
    session: crate::ids::SessionId,
    name: &str,
    id: u64,
) -> crate::lockctl::FencingToken {
    let r = lock_req(
        c,
        s,
        Request::Acquire {
            store: s,
            session,
            request_id: id,
            name: name.into(),
            mode: crate::lockctl::LockMode::Exclusive,
            wait: crate::io::request::WaitSpec::Try,
            lock_delay: None,
        },
    );
    match r {
        Ok(Response::Granted { token }) => token,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_fenced_put_with_a_stale_token_never_lands() {
    let mut c = cluster();
    let (key, lock) = ("/fence/data", "/fence/lock");
    let s = store(key);
    assert_eq!(s, store(lock));
    let (s1, s2) = (session(&mut c, s), session(&mut c, s));
    let old = acquire(&mut c, s, s1, lock, 1);
    let fenced = |token| crate::objects::Conditions {
        fence: Some(Fence {
            lock: lock.into(),
            token,
        }),
        ..Default::default()
    };
    let put_with = |c: &mut Cluster, token, data: &'static [u8]| {
        let req = ObjectRequest::Put {
            key: key.into(),
            data: Bytes::from_static(data),
            writer: Writer::default(),
            cond: fenced(token),
            ephemeral: false,
        };
        ask(c, key, req)
    };
    assert!(matches!(
        put_with(&mut c, old, b"by holder 1"),
        Ok(Response::ObjectWritten { .. })
    ));
    // The lock moves to session 2.
    let r = lock_req(
        &mut c,
        s,
        Request::Release {
            store: s,
            session: s1,
            request_id: 2,
            name: lock.into(),
        },
    );
    assert_eq!(r, Ok(Response::Released));
    c.run_for(Duration::from_secs(2));
    let new = acquire(&mut c, s, s2, lock, 3);
    assert!(new > old);
    assert_eq!(
        put_with(&mut c, old, b"late write by holder 1"),
        Err(ClientError::StaleToken { current: Some(new) })
    );
    assert!(matches!(
        put_with(&mut c, new, b"by holder 2"),
        Ok(Response::ObjectWritten { .. })
    ));
    assert_eq!(get(&mut c, key), Ok(b"by holder 2".to_vec()));
}

#[test]
fn a_fenced_release_checks_the_token_atomically() {
    let mut c = cluster();
    let lock = "/frel/lock";
    let s = store(lock);
    let s1 = session(&mut c, s);
    let token = acquire(&mut c, s, s1, lock, 1);
    let release = |token| Request::ReleaseFenced {
        store: s,
        session: s1,
        request_id: 0,
        name: lock.into(),
        token,
    };
    let stale = crate::lockctl::FencingToken {
        epoch: token.epoch,
        seq: token.seq + 1,
    };
    assert_eq!(
        lock_req(&mut c, s, release(stale)),
        Err(ClientError::StaleToken {
            current: Some(token)
        })
    );
    let holders = lock_req(
        &mut c,
        s,
        Request::Holders {
            store: s,
            name: lock.into(),
        },
    );
    assert!(matches!(holders, Ok(Response::Holders(h)) if h.len() == 1));
    assert_eq!(lock_req(&mut c, s, release(token)), Ok(Response::Released));
}

/// DESIGN §4, "Idempotent retries": an operator ended a hold, the holder's own release of
/// it failed `NotHeld` (not recorded), and the session was granted the name again. A late
/// retry of that first release, fenced by the old token, is refused and the new hold
/// stays; the same retry unfenced ends it (why clients fence).
#[test]
fn a_late_fenced_release_cannot_end_a_newer_hold() {
    let mut c = cluster();
    let lock = "/frel/late";
    let s = store(lock);
    let s1 = session(&mut c, s);
    let first = acquire(&mut c, s, s1, lock, 1);
    let release = |request_id, token: Option<crate::lockctl::FencingToken>| match token {
        Some(token) => Request::ReleaseFenced {
            store: s,
            session: s1,
            request_id,
            name: lock.into(),
            token,
        },
        None => Request::Release {
            store: s,
            session: s1,
            request_id,
            name: lock.into(),
        },
    };
    // The operator's unlock (another client's request id space: none here).
    assert_eq!(
        lock_req(&mut c, s, release(0, None)),
        Ok(Response::Released)
    );
    assert_eq!(
        lock_req(&mut c, s, release(2, Some(first))),
        Err(ClientError::NotHeld)
    );
    c.run_for(Duration::from_secs(2));
    let second = acquire(&mut c, s, s1, lock, 3);
    assert!(second > first);
    assert_eq!(
        lock_req(&mut c, s, release(2, Some(first))),
        Err(ClientError::StaleToken {
            current: Some(second)
        })
    );
    let holders = |c: &mut Cluster| {
        let h = lock_req(
            c,
            s,
            Request::Holders {
                store: s,
                name: lock.into(),
            },
        );
        match h {
            Ok(Response::Holders(h)) => h.len(),
            other => panic!("holders: {other:?}"),
        }
    };
    assert_eq!(holders(&mut c), 1);
    // Unfenced, the same late retry ends the newer hold.
    assert_eq!(
        lock_req(&mut c, s, release(2, None)),
        Ok(Response::Released)
    );
    assert_eq!(holders(&mut c), 0);
}

#[test]
fn a_small_put_is_one_safetalk_batch() {
    let mut c = cluster();
    let accepts = |c: &Cluster| {
        c.count_delivered(|m| {
            matches!(
                m,
                Msg::ToChunk {
                    msg: crate::msg::ToChunk::Accept { .. },
                    ..
                }
            )
        })
    };
    let before = accepts(&c);
    put(&mut c, "/one/k", b"256 bytes or so").unwrap();
    // Begin, the block and the activation travel in one ACCEPT to each of 3 chunks.
    assert_eq!(accepts(&c) - before, 3);
}

/// Seed 001 conditional writes, linearizable: a compare-and-set refused on a revision that
/// a put still in flight makes is answered only once that put is committed (and
/// acknowledged), never before — a client must not learn of a change before it is
/// acknowledged (found by `tenure chaos` with reordered peer links).
#[test]
fn a_refusal_judged_on_an_uncommitted_put_waits_for_its_commit() {
    let mut c = cluster();
    let key = "/cas/k";
    let first = match put(&mut c, key, b"one").expect("put") {
        Response::ObjectWritten { revision, .. } => revision,
        other => panic!("{other:?}"),
    };
    let d = mgr(&c, key);
    let object = |req| Request::Object {
        store: store(key),
        req,
    };
    let put_id = c.request(
        d,
        1,
        object(ObjectRequest::Put {
            key: key.into(),
            data: Bytes::from_static(b"two"),
            writer: Writer::default(),
            cond: Default::default(),
            ephemeral: false,
        }),
    );
    // At once, before the put's round: a compare-and-set on the first revision.
    let cas_id = c.request(
        d,
        2,
        object(ObjectRequest::Put {
            key: key.into(),
            data: Bytes::from_static(b"three"),
            writer: Writer::default(),
            cond: crate::objects::Conditions {
                if_revision: Some(first),
                ..Default::default()
            },
            ephemeral: false,
        }),
    );
    assert!(
        !c.replies.contains_key(&cas_id),
        "refused before the put it saw was committed: {:?}",
        c.replies.get(&cas_id)
    );
    c.run_for(Duration::from_millis(200));
    let second = match c.replies.get(&put_id) {
        Some(Ok(Response::ObjectWritten { revision, .. })) => *revision,
        other => panic!("{other:?}"),
    };
    match c.replies.get(&cas_id) {
        Some(Err(ClientError::Object(ObjectError::RevisionMismatch { current }))) => {
            assert_eq!(*current, Some(second))
        }
        other => panic!("{other:?}"),
    }
}
