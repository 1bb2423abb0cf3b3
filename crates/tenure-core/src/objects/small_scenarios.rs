//! Scenario tests of small objects (DESIGN §5, "Small objects"): a put of at most
//! `inline_max` bytes is one SafeTalk change whose manifest carries the value, read from
//! the manager's committed table; replacing or deleting it retires the old version in the
//! same change; chunks that missed it get the value by reconciliation, as any change.

use super::scenarios::{STORES, ask, ask_within, get, mgr, put, put_req, session, store, tweak};
use super::*;
use crate::io::request::{ObjectRequest, Response, Writer};
use crate::msg::{Msg, ToChunk};
use crate::testkit::Cluster;
use std::time::Duration;

fn cluster_inline() -> Cluster {
    let mut c = Cluster::with(3, STORES, |cfg| {
        tweak(cfg);
        cfg.objects.inline_max = 64;
    });
    c.run_for(Duration::from_secs(3));
    assert!(c.all_managed());
    c
}

/// Object changes carried by the ACCEPTs delivered to the chunks of `key`'s store, per
/// chunk (the manager sends each change to every chunk once).
fn object_changes(c: &Cluster, key: &str) -> Vec<ObjectOp> {
    let first = c.chunks_of(store(key))[0].id;
    (c.delivered.iter())
        .filter_map(|(_, _, _, m)| match m {
            Msg::ToChunk {
                chunk,
                msg: ToChunk::Accept { ops, .. },
                ..
            } if *chunk == first => Some(ops),
            _ => None,
        })
        .flatten()
        .filter_map(|(_, op)| match op {
            crate::data::StoreOp::Object { op, .. } if op.key() == key => Some(op.clone()),
            _ => None,
        })
        .collect()
}

/// Every chunk of the key's store: the key's manifests, and whether its block store holds
/// any block.
fn chunk_copies(c: &Cluster, key: &str) -> Vec<(Vec<Manifest>, bool)> {
    (c.chunks_of(store(key)).iter())
        .map(|ch| {
            let dev = &c.devices[&ch.id.device];
            let rec = dev.chunk_record(ch.id).expect("chunk");
            let dict = rec.data.table.objects.keys.get(key);
            let blocks = dev.chunk_blocks(ch.id).is_some_and(|b| !b.data.is_empty());
            (
                dict.map(|d| d.values().cloned().collect())
                    .unwrap_or_default(),
                blocks,
            )
        })
        .collect()
}

#[test]
fn a_small_put_is_one_change_with_its_value_in_every_chunk_table() {
    let mut c = cluster_inline();
    let key = "/small/k";
    let r = put(&mut c, key, b"a small value");
    assert!(
        matches!(r, Ok(Response::ObjectWritten { revision: 1, .. })),
        "{r:?}"
    );
    let changes = object_changes(&c, key);
    assert!(
        matches!(changes.as_slice(), [ObjectOp::Put(p)] if p.value == b"a small value"[..]),
        "{changes:?}"
    );
    c.run_for(Duration::from_millis(500));
    for (manifests, blocks) in chunk_copies(&c, key) {
        assert!(!blocks, "an inline value is not a block");
        assert!(
            matches!(manifests.as_slice(), [m] if m.state == ManifestState::Active
                && m.value.as_deref() == Some(&b"a small value"[..]) && m.blocks.is_empty()),
            "{manifests:?}"
        );
    }
    assert_eq!(get(&mut c, key), Ok(b"a small value".to_vec()));
    // A value over the limit is written as blocks, through the seed's upload.
    put(&mut c, "/small/big", &[7u8; 65]).unwrap();
    let big = object_changes(&c, "/small/big");
    assert!(
        matches!(big.first(), Some(ObjectOp::Begin { .. })),
        "{big:?}"
    );
    assert!(
        matches!(big.last(), Some(ObjectOp::Activate { .. })),
        "{big:?}"
    );
    assert_eq!(get(&mut c, "/small/big"), Ok(vec![7u8; 65]));
}

#[test]
fn replacing_a_small_object_retires_the_old_version_in_the_same_change() {
    let mut c = cluster_inline();
    let key = "/small/r";
    put(&mut c, key, b"one").unwrap();
    put(&mut c, key, b"two").unwrap();
    assert_eq!(
        object_changes(&c, key).len(),
        2,
        "one change per put, no collection"
    );
    let s = store(key);
    let t = c.devices[&mgr(&c, key)].managed_tables(s).unwrap();
    let dict = &t.objects.keys[key];
    assert_eq!(dict.len(), 1, "the old version is gone: {dict:?}");
    assert!(t.objects.attention.is_empty(), "nothing to collect");
    assert_eq!(get(&mut c, key), Ok(b"two".to_vec()));
    // A large content replacing a small one retires it at activation too.
    put(&mut c, key, &[1u8; 100]).unwrap();
    let t = c.devices[&mgr(&c, key)].managed_tables(s).unwrap();
    assert_eq!(t.objects.keys[key].len(), 1);
    // And a small one replacing a large one leaves the large one's blocks to collect.
    put(&mut c, key, b"three").unwrap();
    let t = c.devices[&mgr(&c, key)].managed_tables(s).unwrap();
    let states: Vec<_> = t.objects.keys[key].values().map(|m| m.state).collect();
    assert!(states.contains(&ManifestState::PendingDelete), "{states:?}");
    c.run_for(Duration::from_secs(8));
    let t = c.devices[&mgr(&c, key)].managed_tables(s).unwrap();
    assert_eq!(t.objects.keys[key].len(), 1, "collected and pruned");
    assert_eq!(get(&mut c, key), Ok(b"three".to_vec()));
}

#[test]
fn deleting_a_small_object_is_one_change_and_its_retry_is_answered() {
    let mut c = cluster_inline();
    let key = "/small/d";
    let s = store(key);
    put(&mut c, key, b"bye").unwrap();
    let del = |writer| ObjectRequest::Delete {
        key: key.into(),
        writer,
        cond: Default::default(),
    };
    // Without a request id: nothing is left behind.
    let r = ask(&mut c, key, del(Writer::default()));
    assert!(
        matches!(r, Ok(Response::ObjectDeleted { revision: 2 })),
        "{r:?}"
    );
    let t = c.devices[&mgr(&c, key)].managed_tables(s).unwrap();
    assert!(
        !t.objects.keys.contains_key(key),
        "retired in the delete's change"
    );
    assert_eq!(get(&mut c, key), Err(ObjectError::NoSuchObject.into()));
    // With one: a tombstone (without the value) answers the retry until it is pruned.
    put(&mut c, key, b"again").unwrap();
    let writer = Writer {
        session: Some(session(&mut c, s)),
        request_id: 9,
    };
    let r = ask(&mut c, key, del(writer));
    assert!(
        matches!(r, Ok(Response::ObjectDeleted { revision: 4 })),
        "{r:?}"
    );
    let t = c.devices[&mgr(&c, key)].managed_tables(s).unwrap();
    let dict: Vec<_> = t.objects.keys[key].values().cloned().collect();
    assert!(
        matches!(dict.as_slice(), [m] if m.state == ManifestState::Deleted && m.value.is_none()),
        "{dict:?}"
    );
    assert_eq!(object_changes(&c, key).len(), 4, "put, delete, put, delete");
    let r = ask(&mut c, key, del(writer));
    assert!(
        matches!(r, Ok(Response::ObjectDeleted { revision: 4 })),
        "{r:?}"
    );
    assert_eq!(object_changes(&c, key).len(), 4, "a retry changes nothing");
    c.run_for(Duration::from_secs(7));
    let t = c.devices[&mgr(&c, key)].managed_tables(s).unwrap();
    assert!(!t.objects.keys.contains_key(key), "the tombstone is pruned");
}

#[test]
fn a_chunk_that_missed_a_small_put_gets_the_value_from_its_peers() {
    let mut c = cluster_inline();
    let key = "/small/m";
    let s = store(key);
    let m = mgr(&c, key);
    let other = (c.chunks_of(s).iter())
        .map(|ch| ch.id.device)
        .find(|d| *d != m)
        .expect("another chunk");
    c.crash(other);
    let req = put_req(key, b"missed", Writer::default());
    let r = ask_within(&mut c, key, req, Duration::from_secs(3));
    assert!(matches!(r, Ok(Response::ObjectWritten { .. })), "{r:?}");
    c.restart(other);
    c.run_for(Duration::from_secs(3));
    for (manifests, _) in chunk_copies(&c, key) {
        assert!(
            matches!(manifests.as_slice(), [m] if m.value.as_deref() == Some(&b"missed"[..])),
            "{manifests:?}"
        );
    }
    assert_eq!(get(&mut c, key), Ok(b"missed".to_vec()));
}

#[test]
fn with_a_peer_of_an_older_build_a_small_put_is_written_as_blocks() {
    let mut c = cluster_inline();
    for d in c.devices.values_mut() {
        d.set_peer_generation(crate::generation::Generation::BeforeInlineValues);
    }
    let key = "/small/old";
    put(&mut c, key, b"v").unwrap();
    let changes = object_changes(&c, key);
    assert!(
        matches!(changes.first(), Some(ObjectOp::Begin { .. })),
        "{changes:?}"
    );
    assert_eq!(get(&mut c, key), Ok(b"v".to_vec()));
}

#[test]
fn a_retried_put_overwritten_since_is_answered_and_not_written_again() {
    let mut c = cluster_inline();
    let key = "/small/retry";
    let s = store(key);
    let writer = Writer {
        session: Some(session(&mut c, s)),
        request_id: 5,
    };
    let first = ask(&mut c, key, put_req(key, b"one", writer));
    assert!(
        matches!(first, Ok(Response::ObjectWritten { revision: 1, .. })),
        "{first:?}"
    );
    put(&mut c, key, b"two").unwrap();
    // The retry of the first put (its answer was lost, say) finds its tombstone.
    assert_eq!(ask(&mut c, key, put_req(key, b"one", writer)), first);
    assert_eq!(get(&mut c, key), Ok(b"two".to_vec()));
    c.run_for(Duration::from_secs(7));
    let t = c.devices[&mgr(&c, key)].managed_tables(s).unwrap();
    assert_eq!(t.objects.keys[key].len(), 1, "the tombstone is pruned");
}

// Seed 150 of the bounded sweep: a read of a block object that no chunk answers is
// restarted on the key's current content; when that content is an inline value, the
// read answers the value (it once assembled it from the value's zero blocks: empty).
#[test]
fn a_read_restarted_on_a_small_object_that_replaced_its_content_answers_the_value() {
    let mut c = cluster_inline();
    let key = "/small/restart";
    put(&mut c, key, &[5u8; 100]).unwrap();
    // No chunk's block data reaches the manager: the read tries every chunk.
    c.drop = Some(Box::new(|_, _, m| {
        matches!(m, Msg::Blocks(crate::objects::msg::BlockMsg::Data { .. }))
    }));
    let d = mgr(&c, key);
    let get_id = c.request(
        d,
        1,
        crate::io::request::Request::Object {
            store: store(key),
            req: ObjectRequest::Get { key: key.into() },
        },
    );
    c.run_for(Duration::from_millis(50));
    put(&mut c, key, b"small now").unwrap();
    c.run_for(Duration::from_secs(3));
    let r = c.replies.remove(&get_id).expect("answered");
    assert!(
        matches!(&r, Ok(Response::Object { data, .. }) if data[..] == b"small now"[..]),
        "{r:?}"
    );
}
