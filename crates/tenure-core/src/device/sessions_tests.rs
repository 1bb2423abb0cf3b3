//! One session per client, DESIGN §4: one test per rule of the module's documentation.

use crate::error::ClientError;
use crate::ids::{DeviceId, SessionId, StoreId};
use crate::io::request::{Request, Response, Under, WaitSpec};
use crate::lockctl::LockMode;
use crate::testkit::Cluster;
use std::time::Duration;

const HOME: StoreId = StoreId(0);
const OTHER: StoreId = StoreId(1);
const STORES: u32 = 2;
const TTL: Duration = Duration::from_secs(2);

/// A name whose first segment puts it in `store`.
fn name_in(store: StoreId) -> String {
    (0..)
        .map(|i| format!("/n{i}/lock"))
        .find(|n| crate::config::store_of(n, STORES) == store)
        .expect("some name")
}

/// A settled cluster of three and a device that manages neither store, if any, else
/// any device.
fn settled() -> (Cluster, DeviceId) {
    let (c, via, managers) = settled_of(3);
    (c, via.unwrap_or(managers[0]))
}

/// A settled cluster of `n`, a device that manages neither store (if any), and the two
/// stores' managers.
fn settled_of(n: u64) -> (Cluster, Option<DeviceId>, Vec<DeviceId>) {
    let mut c = Cluster::new(n, STORES);
    c.run_for(Duration::from_secs(5));
    let managers: Vec<DeviceId> = [HOME, OTHER]
        .iter()
        .filter_map(|s| c.manager_of(*s).map(|(d, _)| d))
        .collect();
    assert_eq!(managers.len(), 2, "both stores managed");
    let via = (c.devices.keys().copied()).find(|d| !managers.contains(d));
    (c, via, managers)
}

fn answer(c: &mut Cluster, via: DeviceId, req: Request) -> Result<Response, ClientError> {
    let r = c.request(via, 1, req);
    c.run_for(Duration::from_millis(300));
    c.replies
        .remove(&r)
        .unwrap_or_else(|| panic!("no answer through {via}"))
}

fn open(c: &mut Cluster, via: DeviceId) -> SessionId {
    match answer(
        c,
        via,
        Request::OpenSession {
            store: HOME,
            ttl: TTL,
        },
    ) {
        Ok(Response::SessionOpened { session, .. }) => session,
        other => panic!("open: {other:?}"),
    }
}

fn under(session: SessionId, req_id: u64, name: &str) -> Request {
    Request::Under(Under {
        home: HOME,
        req: Box::new(Request::Acquire {
            store: crate::config::store_of(name, STORES),
            session,
            request_id: req_id,
            name: name.into(),
            mode: LockMode::Exclusive,
            wait: WaitSpec::Try,
            lock_delay: Some(Duration::ZERO),
        }),
    })
}

fn keep_alive(c: &mut Cluster, via: DeviceId, session: SessionId) -> Result<Response, ClientError> {
    answer(
        c,
        via,
        Request::KeepAlive {
            store: HOME,
            session,
        },
    )
}

/// The sessions holding `name` (a linearizable read).
fn holders(c: &mut Cluster, via: DeviceId, name: &str) -> Vec<SessionId> {
    let store = crate::config::store_of(name, STORES);
    match answer(
        c,
        via,
        Request::Holders {
            store,
            name: name.into(),
        },
    ) {
        Ok(Response::Holders(h)) => h.iter().map(|h| h.session).collect(),
        other => panic!("holders: {other:?}"),
    }
}

/// The children home's manager records for `session`.
fn children(c: &Cluster, session: SessionId) -> Vec<(StoreId, SessionId)> {
    let (m, _) = c.manager_of(HOME).expect("home managed");
    let t = c.devices[&m].managed_tables(HOME).expect("tables");
    t.sessions.open[&session]
        .children
        .iter()
        .map(|(s, c)| (*s, *c))
        .collect()
}

// DESIGN §4 "Children": a lock in another store is taken under the session's child,
// which home records before the request runs; the home session itself holds nothing
// there.
#[test]
fn a_lock_in_another_store_is_held_by_the_child_that_home_records() {
    let (mut c, via) = settled();
    let s = open(&mut c, via);
    let name = name_in(OTHER);
    let r = answer(&mut c, via, under(s, 1, &name));
    assert!(matches!(r, Ok(Response::Granted { .. })), "{r:?}");
    let kids = children(&c, s);
    assert_eq!(kids.len(), 1, "{kids:?}");
    assert_eq!(kids[0].0, OTHER);
    assert_eq!(holders(&mut c, via, &name), vec![kids[0].1]);
    // A name in home runs under the session itself.
    let home_name = name_in(HOME);
    let r = answer(&mut c, via, under(s, 2, &home_name));
    assert!(matches!(r, Ok(Response::Granted { .. })), "{r:?}");
    assert_eq!(holders(&mut c, via, &home_name), vec![s]);
    assert_eq!(c.devices[&via].session_jobs(), 0);
}

// DESIGN §4 "Children": the first child recorded is the only one; a device that does
// not know it (another device, or one that forgot) asks home and uses it, and a retry
// with the same request id is the same grant.
#[test]
fn every_device_uses_the_child_home_recorded_and_a_retry_is_the_same_grant() {
    let (mut c, via) = settled();
    let s = open(&mut c, via);
    let name = name_in(OTHER);
    let first = answer(&mut c, via, under(s, 7, &name));
    let Ok(Response::Granted { token }) = first else {
        panic!("{first:?}")
    };
    for d in c.devices.keys().copied().collect::<Vec<_>>() {
        assert_eq!(
            answer(&mut c, d, under(s, 7, &name)),
            Ok(Response::Granted { token })
        );
    }
    assert_eq!(children(&c, s).len(), 1);
}

// DESIGN §4 "Children": two devices opening a child at once end with one child
// recorded; the other is closed.
#[test]
fn two_devices_opening_a_child_at_once_record_one() {
    let (mut c, _) = settled();
    let devs: Vec<DeviceId> = c.devices.keys().copied().collect();
    let s = open(&mut c, devs[0]);
    let (a, b) = (name_in(OTHER), format!("{}2", name_in(OTHER)));
    let ra = c.request(devs[1], 1, under(s, 1, &a));
    let rb = c.request(devs[2], 2, under(s, 2, &b));
    c.run_for(Duration::from_millis(500));
    assert!(
        matches!(c.replies[&ra], Ok(Response::Granted { .. })),
        "{:?}",
        c.replies[&ra]
    );
    assert!(
        matches!(c.replies[&rb], Ok(Response::Granted { .. })),
        "{:?}",
        c.replies[&rb]
    );
    let kids = children(&c, s);
    assert_eq!(kids.len(), 1);
    assert_eq!(holders(&mut c, devs[0], &a), vec![kids[0].1]);
    assert_eq!(holders(&mut c, devs[0], &b), vec![kids[0].1]);
    // The loser's child is closed: OTHER's table holds only the recorded one.
    let (m, _) = c.manager_of(OTHER).unwrap();
    let open_there: Vec<_> = (c.devices[&m].managed_tables(OTHER).unwrap().sessions.open)
        .keys()
        .copied()
        .collect();
    assert_eq!(open_there, vec![kids[0].1]);
}

// DESIGN §4 "Keep-alives": the client's keep-alives of home renew the children too;
// without them the child expires and its lock is released.
#[test]
fn keep_alives_of_home_keep_the_children_and_silence_ends_them() {
    let (mut c, via) = settled();
    let s = open(&mut c, via);
    let name = name_in(OTHER);
    assert!(matches!(
        answer(&mut c, via, under(s, 1, &name)),
        Ok(Response::Granted { .. })
    ));
    let child = children(&c, s)[0].1;
    for _ in 0..12 {
        let r = keep_alive(&mut c, via, s);
        let Ok(Response::KeptAlive { children, .. }) = r else {
            panic!("{r:?}")
        };
        assert_eq!(
            children.into_iter().collect::<Vec<_>>(),
            vec![(OTHER, child)]
        );
        c.run_for(Duration::from_millis(400));
    }
    assert_eq!(
        holders(&mut c, via, &name),
        vec![child],
        "held 6 s on a 2 s TTL"
    );
    c.run_for(Duration::from_secs(6));
    assert!(
        holders(&mut c, via, &name).is_empty(),
        "released after silence"
    );
    assert_eq!(keep_alive(&mut c, via, s), Err(ClientError::SessionExpired));
}

// DESIGN §4 "Expiry": a child that ended makes the session expired, and the device
// renews it no more (home then ends at its own deadline).
#[test]
fn a_child_that_ended_expires_the_session() {
    let (mut c, via) = settled();
    let s = open(&mut c, via);
    let name = name_in(OTHER);
    assert!(matches!(
        answer(&mut c, via, under(s, 1, &name)),
        Ok(Response::Granted { .. })
    ));
    let child = children(&c, s)[0].1;
    let closed = answer(
        &mut c,
        via,
        Request::CloseSession {
            store: OTHER,
            session: child,
        },
    );
    assert_eq!(closed, Ok(Response::SessionClosed));
    assert_eq!(keep_alive(&mut c, via, s), Err(ClientError::SessionExpired));
    // A request under the session in that store is refused too.
    let r = answer(&mut c, via, under(s, 2, &name));
    assert_eq!(r, Err(ClientError::SessionExpired));
    // Not renewed again: home expires within its TTL (plus the manager's tick).
    for _ in 0..8 {
        assert_eq!(keep_alive(&mut c, via, s), Err(ClientError::SessionExpired));
        c.run_for(Duration::from_millis(300));
    }
    assert!(children_gone(&c, s), "home expired");
}

fn children_gone(c: &Cluster, session: SessionId) -> bool {
    let (m, _) = c.manager_of(HOME).expect("home managed");
    !c.devices[&m]
        .managed_tables(HOME)
        .unwrap()
        .sessions
        .open
        .contains_key(&session)
}

// DESIGN §4 "Close": closing the session closes its children (their locks are released
// at once) and then home.
#[test]
fn close_ends_every_child_then_home() {
    let (mut c, via) = settled();
    let s = open(&mut c, via);
    let name = name_in(OTHER);
    assert!(matches!(
        answer(&mut c, via, under(s, 1, &name)),
        Ok(Response::Granted { .. })
    ));
    let r = answer(
        &mut c,
        via,
        Request::CloseSession {
            store: HOME,
            session: s,
        },
    );
    assert_eq!(r, Ok(Response::SessionClosed));
    assert!(holders(&mut c, via, &name).is_empty());
    assert!(children_gone(&c, s));
    assert_eq!(keep_alive(&mut c, via, s), Err(ClientError::SessionExpired));
}

// DESIGN §4: a session without children is kept alive exactly as before.
#[test]
fn a_session_of_one_store_is_kept_alive_as_before() {
    let (mut c, via) = settled();
    let s = open(&mut c, via);
    let r = keep_alive(&mut c, via, s);
    assert_eq!(
        r,
        Ok(Response::KeptAlive {
            ttl: TTL,
            children: Default::default()
        })
    );
    assert_eq!(c.devices[&via].session_jobs(), 0);
}

// DESIGN §4: the child's store loses its manager; the lock and the session survive the
// failover while the client keeps renewing through a surviving device.
#[test]
fn a_lock_under_a_child_survives_the_failover_of_its_store() {
    let (mut c, _) = settled();
    let (m, _) = c.manager_of(OTHER).unwrap();
    let via = (c.devices.keys().copied()).find(|d| *d != m).unwrap();
    let s = open(&mut c, via);
    let name = name_in(OTHER);
    let granted = answer(&mut c, via, under(s, 1, &name));
    assert!(
        matches!(granted, Ok(Response::Granted { .. })),
        "{granted:?}"
    );
    let child = children(&c, s)[0].1;
    c.crash(m);
    // A keep-alive every 600 ms (TTL / 3), each given its time to be answered.
    let asked: Vec<u64> = (0..30)
        .map(|_| {
            let r = c.request(
                via,
                1,
                Request::KeepAlive {
                    store: HOME,
                    session: s,
                },
            );
            c.run_for(Duration::from_millis(600));
            r
        })
        .collect();
    c.run_for(Duration::from_secs(1));
    let alive = (asked.iter())
        .filter(|r| matches!(c.replies.get(r), Some(Ok(Response::KeptAlive { .. }))))
        .count();
    let expired = (asked.iter())
        .filter(|r| matches!(c.replies.get(r), Some(Err(ClientError::SessionExpired))))
        .count();
    assert_eq!(expired, 0, "never expired");
    assert!(alive > 20, "renewed after the failover ({alive} of 30)");
    assert_eq!(holders(&mut c, via, &name), vec![child]);
}

// DESIGN §4 "Children": a device runs requests under a child without a fresh renewal
// only once it renewed that child after home named it. A keep-alive whose renewal of
// the child failed leaves it unknown here: the child's deadline may still be its open's,
// before the deadline its client counts from an earlier keep-alive (simulator seed 1031
// of `tenure sim` found a child's renewals failing while its store changed epoch).
#[test]
fn a_child_whose_renewal_failed_is_not_used_without_renewing_it() {
    let (mut c, via, _) = settled_of(4);
    let via = via.expect("a device managing neither store");
    let other = (c.devices.keys().copied())
        .find(|d| *d != via)
        .expect("another device");
    // A TTL that outlasts the renewals given up below.
    let s = match answer(
        &mut c,
        via,
        Request::OpenSession {
            store: HOME,
            ttl: Duration::from_secs(10),
        },
    ) {
        Ok(Response::SessionOpened { session, .. }) => session,
        other => panic!("open: {other:?}"),
    };
    let name = name_in(OTHER);
    // The child is made through another device: `via` has not met it.
    assert!(matches!(
        answer(&mut c, other, under(s, 1, &name)),
        Ok(Response::Granted { .. })
    ));
    let child = children(&c, s)[0].1;
    let known = |c: &Cluster| {
        c.devices[&via]
            .groups
            .children
            .get(&((HOME, s), OTHER))
            .copied()
    };
    assert_eq!(known(&c), None);
    // `via`'s renewals of the child are lost: home answers, the child does not.
    c.drop = Some(Box::new(move |from, _, msg| {
        from == via
            && matches!(
                msg,
                crate::msg::Msg::Forward(crate::msg::ForwardMsg::Request {
                    req: Request::KeepAlive { store: OTHER, .. },
                    ..
                })
            )
    }));
    let r = c.request(
        via,
        1,
        Request::KeepAlive {
            store: HOME,
            session: s,
        },
    );
    c.run_for(Duration::from_secs(5));
    let got = c.replies.remove(&r).expect("answered");
    assert!(
        !matches!(got, Ok(Response::KeptAlive { .. })),
        "alive without the child's renewal: {got:?}"
    );
    assert_eq!(known(&c), None, "a child not renewed is not remembered");
    // Once the child answers, it is.
    c.drop = None;
    assert!(matches!(
        keep_alive(&mut c, via, s),
        Ok(Response::KeptAlive { .. })
    ));
    assert_eq!(known(&c), Some(child));
}
