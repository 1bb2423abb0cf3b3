//! Forwarding, DESIGN §8 "Any device serves any request": one test per rule of the
//! module's documentation.

use crate::error::ClientError;
use crate::generation::Generation;
use crate::ids::{ClientId, DeviceId, SessionId, StoreId};
use crate::io::Input;
use crate::io::request::{ObjectRequest, Request, Response, WaitSpec};
use crate::lockctl::LockMode;
use crate::msg::{ForwardMsg, Msg};
use crate::testkit::Cluster;
use std::time::Duration;

const STORE: StoreId = StoreId(0);

/// A settled cluster of three, the manager of [`STORE`] and two other devices.
fn settled() -> (Cluster, DeviceId, DeviceId, DeviceId) {
    let mut c = Cluster::new(3, 2);
    c.run_for(Duration::from_secs(5));
    let (m, _) = c.manager_of(STORE).expect("managed");
    let mut others = c.devices.keys().copied().filter(|d| *d != m);
    let (a, b) = (others.next().unwrap(), others.next().unwrap());
    (c, m, a, b)
}

fn forwards(c: &Cluster) -> (usize, usize) {
    let req = c.count_delivered(|m| matches!(m, Msg::Forward(ForwardMsg::Request { .. })));
    let ans = c.count_delivered(|m| matches!(m, Msg::Forward(ForwardMsg::Answer { .. })));
    (req, ans)
}

fn open_session(c: &mut Cluster, via: DeviceId) -> SessionId {
    let r = c.request(
        via,
        1,
        Request::OpenSession {
            store: STORE,
            ttl: Duration::from_secs(10),
        },
    );
    c.run_for(Duration::from_millis(200));
    match &c.replies[&r] {
        Ok(Response::SessionOpened { session, .. }) => *session,
        other => panic!("open through {via}: {other:?}"),
    }
}

fn acquire(session: SessionId, request_id: u64) -> Request {
    Request::Acquire {
        store: STORE,
        session,
        request_id,
        name: "/a/lock".into(),
        mode: LockMode::Exclusive,
        wait: WaitSpec::Try,
        lock_delay: None,
    }
}

#[test]
fn a_request_at_a_device_that_does_not_manage_the_store_is_answered_by_the_manager() {
    let (mut c, _, a, _) = settled();
    let r = c.write(a, STORE, 1, 10);
    c.run_for(Duration::from_millis(200));
    assert!(
        matches!(c.replies[&r], Ok(Response::Written { .. })),
        "{:?}",
        c.replies[&r]
    );
    assert_eq!(forwards(&c), (1, 1), "one request there, one answer back");
    assert_eq!(c.devices[&a].forwards_pending(), 0);
}

#[test]
fn a_lock_taken_through_other_devices_is_one_grant_and_its_retry_is_answered_the_same() {
    let (mut c, _, a, b) = settled();
    let session = open_session(&mut c, a);
    let first = c.request(a, 1, acquire(session, 7));
    c.run_for(Duration::from_millis(200));
    let Ok(Response::Granted { token }) = c.replies[&first].clone() else {
        panic!("{:?}", c.replies[&first]);
    };
    // The retry comes through another device: the manager recognises it.
    let retry = c.request(b, 1, acquire(session, 7));
    c.run_for(Duration::from_millis(200));
    assert_eq!(c.replies[&retry], Ok(Response::Granted { token }));
    let holders = c.request(
        b,
        2,
        Request::Holders {
            store: STORE,
            name: "/a/lock".into(),
        },
    );
    c.run_for(Duration::from_millis(200));
    let Ok(Response::Holders(h)) = &c.replies[&holders] else {
        panic!("{:?}", c.replies[&holders]);
    };
    assert_eq!(h.len(), 1, "{h:?}");
}

#[test]
fn a_forwarded_request_is_served_or_refused_where_it_arrives_never_forwarded_again() {
    let (mut c, m, a, b) = settled();
    // `a` receives a request forwarded by `b`: it does not manage the store, so it
    // answers with its hint instead of forwarding it on.
    c.input(
        a,
        crate::io::Input::Message {
            from: b,
            msg: Msg::Forward(ForwardMsg::Request {
                id: 5,
                req: Request::Write {
                    store: STORE,
                    key: 1,
                    value: 1,
                },
            }),
        },
    );
    let sent: Vec<_> = (c.queue.values())
        .filter(|(from, _, msg)| *from == a && matches!(msg, Msg::Forward(_)))
        .collect();
    assert_eq!(sent.len(), 1, "{sent:?}");
    let (_, to, msg) = sent[0];
    assert_eq!(*to, b);
    assert_eq!(
        *msg,
        Msg::Forward(ForwardMsg::Answer {
            id: 5,
            store: STORE,
            result: Err(ClientError::NotManager { hint: Some(m) }),
        })
    );
}

#[test]
fn a_not_manager_answer_is_followed_to_the_device_it_names() {
    let (mut c, m, a, b) = settled();
    // Nothing reaches the manager from `a`: `a`'s forward waits.
    c.drop = Some(Box::new(move |from, to, msg| {
        from == a && to == m && matches!(msg, Msg::Forward(_))
    }));
    let r = c.write(a, STORE, 1, 10);
    c.run_for(Duration::from_millis(50));
    c.drop = None;
    // A stale answer naming `b` arrives from the device `a` forwarded to.
    c.input(
        a,
        crate::io::Input::Message {
            from: m,
            msg: Msg::Forward(ForwardMsg::Answer {
                id: 1,
                store: STORE,
                result: Err(ClientError::NotManager { hint: Some(b) }),
            }),
        },
    );
    assert!(!c.replies.contains_key(&r), "not answered yet");
    let again = c
        .queue
        .values()
        .filter(|(from, to, msg)| {
            *from == a && *to == b && matches!(msg, Msg::Forward(ForwardMsg::Request { .. }))
        })
        .count();
    assert_eq!(again, 1, "forwarded to the named device");
    // `b` does not manage the store either: it names the manager, and `a` follows
    // that too (its second hop), which serves it.
    c.run_for(Duration::from_millis(300));
    assert!(
        matches!(c.replies[&r], Ok(Response::Written { .. })),
        "{:?}",
        c.replies[&r]
    );
}

#[test]
fn an_answer_from_another_device_than_the_one_asked_changes_nothing() {
    let (mut c, m, a, b) = settled();
    c.drop = Some(Box::new(move |_, _, msg| matches!(msg, Msg::Forward(_))));
    let r = c.write(a, STORE, 1, 10);
    c.run_for(Duration::from_millis(50));
    c.input(
        a,
        crate::io::Input::Message {
            from: b,
            msg: Msg::Forward(ForwardMsg::Answer {
                id: 1,
                store: STORE,
                result: Ok(Response::SessionClosed),
            }),
        },
    );
    assert!(!c.replies.contains_key(&r));
    assert_eq!(c.devices[&a].forwards_pending(), 1);
    let _ = m;
}

#[test]
fn a_forward_the_manager_never_answers_ends_unavailable_at_its_deadline() {
    let (mut c, _, a, _) = settled();
    // The manager is alive (heard from) but the forward and its answer are lost.
    c.drop = Some(Box::new(|_, _, msg| matches!(msg, Msg::Forward(_))));
    let r = c.write(a, STORE, 1, 10);
    let lease = c.configs[&a].timing.lease;
    c.run_for(lease - Duration::from_millis(100));
    assert!(!c.replies.contains_key(&r), "before the deadline");
    c.run_for(Duration::from_millis(200));
    assert_eq!(
        c.replies[&r],
        Err(ClientError::Unavailable { store: STORE }),
        "a lease after it was sent"
    );
    assert_eq!(c.devices[&a].forwards_pending(), 0);
}

#[test]
fn a_forward_to_a_manager_that_went_silent_ends_unavailable() {
    let (mut c, m, a, _) = settled();
    let session = open_session(&mut c, a);
    // A wait without a deadline has no deadline of its own but the longest one.
    let mut req = acquire(session, 9);
    if let Request::Acquire { wait, .. } = &mut req {
        *wait = WaitSpec::Forever;
    }
    c.drop = Some(Box::new(|_, _, msg| matches!(msg, Msg::Forward(_))));
    let r = c.request(a, 1, req);
    c.run_for(Duration::from_millis(10));
    c.crash(m);
    let window = c.configs[&a].timing.liveness_window;
    c.run_for(window + Duration::from_millis(100));
    assert_eq!(
        c.replies[&r],
        Err(ClientError::Unavailable { store: STORE })
    );
}

#[test]
fn nothing_is_forwarded_before_every_peer_reads_forwarded_requests() {
    let (mut c, m, a, _) = settled();
    (c.devices.get_mut(&a).unwrap()).set_peer_generation(Generation::InlineValues);
    let r = c.write(a, STORE, 1, 10);
    assert_eq!(
        c.replies[&r],
        Err(ClientError::NotManager { hint: Some(m) }),
        "redirected at once"
    );
    assert_eq!(forwards(&c), (0, 0));
}

#[test]
fn forwarding_turned_off_redirects() {
    let mut c = Cluster::with(3, 2, |cfg| cfg.forward = false);
    c.run_for(Duration::from_secs(5));
    let (m, _) = c.manager_of(STORE).expect("managed");
    let a = *c.devices.keys().find(|d| **d != m).unwrap();
    let r = c.write(a, STORE, 1, 10);
    assert_eq!(
        c.replies[&r],
        Err(ClientError::NotManager { hint: Some(m) })
    );
}

#[test]
fn a_payload_above_a_block_is_redirected_not_forwarded() {
    let (mut c, m, a, _) = settled();
    let block = c.configs[&a].objects.block_size as usize;
    let big = c.request(
        a,
        1,
        Request::Object {
            store: STORE,
            req: ObjectRequest::Put {
                key: "/a/big".into(),
                data: crate::objects::Bytes::from(vec![0u8; block + 1]),
                writer: Default::default(),
                cond: Default::default(),
                ephemeral: false,
            },
        },
    );
    assert_eq!(
        c.replies[&big],
        Err(ClientError::NotManager { hint: Some(m) })
    );
    assert_eq!(forwards(&c), (0, 0));
}

fn object(req: ObjectRequest) -> Request {
    Request::Object { store: STORE, req }
}

fn watch_req(watch: u64, after: Option<u64>) -> Request {
    object(ObjectRequest::Watch {
        watch,
        prefix: "/a".into(),
        after,
        values: true,
    })
}

fn put_at(c: &mut Cluster, via: DeviceId, key: &str, value: &[u8]) {
    let r = c.request(
        via,
        2,
        object(ObjectRequest::Put {
            key: key.into(),
            data: crate::objects::Bytes::copy_from_slice(value),
            writer: Default::default(),
            cond: Default::default(),
            ephemeral: false,
        }),
    );
    c.run_for(Duration::from_millis(300));
    assert!(
        matches!(c.replies[&r], Ok(Response::ObjectWritten { .. })),
        "{:?}",
        c.replies[&r]
    );
}

/// The changes (revision, key, value) `client`'s watch `watch` got at `at`, in order.
fn watched(c: &Cluster, at: DeviceId, client: u64) -> Vec<(u64, String, Option<Vec<u8>>)> {
    (c.watch_outputs.iter())
        .filter(|(_, d, _)| *d == at)
        .filter_map(|(_, _, o)| match o {
            crate::io::Output::ObjectEvents {
                client: cl,
                changes,
                values,
                ..
            } if cl.0 == client => Some(
                (changes.iter().enumerate())
                    .map(|(i, ch)| {
                        let v = values.get(i).cloned().flatten().map(|b| b.to_vec());
                        (ch.revision, ch.key.to_string(), v)
                    })
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        })
        .flatten()
        .collect()
}

// A watch at a device that does not manage the store is carried by polls: answered
// `Watching`, then every change in order, with its value; an unwatch there ends it.
#[test]
fn a_watch_at_a_device_that_does_not_manage_the_store_is_carried_by_polls() {
    let (mut c, m, a, _) = settled();
    let w = c.request(a, 5, watch_req(1, None));
    c.run_for(Duration::from_millis(200));
    assert_eq!(c.replies[&w], Ok(Response::Watching { revision: 0 }));
    assert_eq!(c.devices[&a].watches_forwarded(), 1);
    put_at(&mut c, m, "/a/x", b"one");
    put_at(&mut c, a, "/a/y", b"two");
    let other = (b'b'..=b'z')
        .map(|ch| format!("/{}/elsewhere", ch as char))
        .find(|k| crate::config::store_of(k, 2) == STORE)
        .expect("another path of the store");
    put_at(&mut c, m, &other, b"no");
    put_at(&mut c, m, "/a/x", b"three");
    assert_eq!(
        watched(&c, a, 5),
        vec![
            (1, "/a/x".into(), Some(b"one".to_vec())),
            (2, "/a/y".into(), Some(b"two".to_vec())),
            (4, "/a/x".into(), Some(b"three".to_vec())),
        ]
    );
    let u = c.request(a, 5, object(ObjectRequest::Unwatch { watch: 1 }));
    assert_eq!(c.replies[&u], Ok(Response::Unwatched));
    assert_eq!(c.devices[&a].watches_forwarded(), 0);
    put_at(&mut c, m, "/a/z", b"after");
    c.run_for(Duration::from_secs(3));
    assert_eq!(watched(&c, a, 5).len(), 3, "nothing after the unwatch");
}

// Polls and their answers lost on the way: the next poll asks again from the last
// revision given, so no change is skipped or given twice.
#[test]
fn a_carried_watch_loses_nothing_when_polls_and_answers_are_lost() {
    let (mut c, m, a, _) = settled();
    let w = c.request(a, 5, watch_req(1, Some(0)));
    c.run_for(Duration::from_millis(200));
    assert_eq!(c.replies[&w], Ok(Response::Watching { revision: 0 }));
    let mut n = 0u32;
    c.drop = Some(Box::new(move |_, _, msg| {
        let poll = matches!(
            msg,
            Msg::Forward(ForwardMsg::Answer {
                result: Ok(Response::Polled { .. }),
                ..
            }) | Msg::Forward(ForwardMsg::Request {
                req: Request::Object {
                    req: ObjectRequest::Poll { .. },
                    ..
                },
                ..
            })
        );
        n += u32::from(poll);
        poll && n.is_multiple_of(3)
    }));
    for i in 0..6u8 {
        put_at(&mut c, m, &format!("/a/{i}"), &[i]);
    }
    c.run_for(Duration::from_secs(10));
    let got: Vec<u64> = watched(&c, a, 5).iter().map(|(r, _, _)| *r).collect();
    assert_eq!(got, (1..=6).collect::<Vec<u64>>());
}

// The manager fails: the carried watch polls the next manager and goes on from its last
// revision (or, when none is known, ends with NotManager for its client to watch again).
#[test]
fn a_carried_watch_follows_a_failover_of_the_manager() {
    let (mut c, m, a, _) = settled();
    let w = c.request(a, 5, watch_req(1, Some(0)));
    c.run_for(Duration::from_millis(200));
    assert_eq!(c.replies[&w], Ok(Response::Watching { revision: 0 }));
    put_at(&mut c, m, "/a/before", b"1");
    c.crash(m);
    c.run_for(Duration::from_secs(8));
    let (m2, _) = c.manager_of(STORE).expect("a new manager");
    put_at(&mut c, m2, "/a/after", b"2");
    c.run_for(Duration::from_secs(3));
    let got: Vec<String> = watched(&c, a, 5).into_iter().map(|(_, k, _)| k).collect();
    let ended = (c.watch_outputs.iter())
        .any(|(_, d, o)| *d == a && matches!(o, crate::io::Output::WatchEnded { .. }));
    if ended {
        assert_eq!(got, vec!["/a/before".to_string()]);
    } else {
        assert_eq!(got, vec!["/a/before".to_string(), "/a/after".to_string()]);
    }
}

// A timed wait in the lock's queue, taken through another device, is granted when the
// lock is released (not when its timer fires).
#[test]
fn a_timed_wait_through_another_device_is_granted_at_the_release() {
    let (mut c, m, a, _) = settled();
    for via in [m, a] {
        let s1 = open_session(&mut c, m);
        let s2 = open_session(&mut c, via);
        let first = c.request(m, 1, acquire(s1, 1));
        c.run_for(Duration::from_millis(200));
        let Ok(Response::Granted { token }) = c.replies[&first].clone() else {
            panic!("{:?}", c.replies[&first]);
        };
        let mut wait = acquire(s2, 1);
        if let Request::Acquire { wait: w, .. } = &mut wait {
            *w = WaitSpec::Timeout(Duration::from_secs(10));
        }
        let waiting = c.request(via, 2, wait);
        c.run_for(Duration::from_millis(300));
        assert!(!c.replies.contains_key(&waiting));
        let rel = c.request(
            m,
            1,
            Request::ReleaseFenced {
                store: STORE,
                session: s1,
                request_id: 2,
                name: "/a/lock".into(),
                token,
            },
        );
        c.run_for(Duration::from_millis(300));
        assert!(
            matches!(c.replies[&rel], Ok(Response::Released)),
            "{:?}",
            c.replies[&rel]
        );
        assert!(
            matches!(c.replies.get(&waiting), Some(Ok(Response::Granted { .. }))),
            "via {via} (manager {m}): {:?}",
            c.replies.get(&waiting)
        );
        let rel2 = c.request(
            m,
            1,
            Request::Release {
                store: STORE,
                session: s2,
                request_id: 2,
                name: "/a/lock".into(),
            },
        );
        c.run_for(Duration::from_millis(300));
        assert!(matches!(c.replies[&rel2], Ok(Response::Released)));
    }
}

// A client that asks for its watch again (same watch, request id and revision) because
// the answer was slow is given the watch already carried, answered again: a second one
// would give every change twice (simulator seed 1149 of `tenure sim` found it).
#[test]
fn a_retried_watch_is_the_watch_already_carried() {
    let (mut c, m, a, _) = settled();
    put_at(&mut c, m, "/a/x", b"one");
    let w = c.request(a, 5, watch_req(1, Some(0)));
    c.run_for(Duration::from_millis(200));
    assert_eq!(c.replies[&w], Ok(Response::Watching { revision: 0 }));
    let again = Input::Request {
        client: ClientId(5),
        req_id: w,
        req: watch_req(1, Some(0)),
    };
    c.replies.remove(&w);
    c.input(a, again.clone());
    c.run_for(Duration::from_millis(200));
    assert_eq!(c.replies[&w], Ok(Response::Watching { revision: 0 }));
    assert_eq!(c.devices[&a].watches_forwarded(), 1);
    put_at(&mut c, m, "/a/y", b"two");
    c.run_for(Duration::from_secs(1));
    let got: Vec<u64> = watched(&c, a, 5).iter().map(|(r, _, _)| *r).collect();
    assert_eq!(got, vec![1, 2], "each change once");
    // A new request for the same watch id (its client watches again) replaces it.
    let w2 = c.request(a, 5, watch_req(1, Some(1)));
    c.run_for(Duration::from_millis(200));
    assert_eq!(c.replies[&w2], Ok(Response::Watching { revision: 1 }));
    let got: Vec<u64> = watched(&c, a, 5).iter().map(|(r, _, _)| *r).collect();
    assert_eq!(got, vec![1, 2, 2], "from the revision asked");
}
