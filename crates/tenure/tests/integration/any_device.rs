//! Any device serves any request (DESIGN §8), with real processes on 127.0.0.1: a thin
//! client that uses only the generated stubs talks to one device, which does not manage
//! its lock's store. It opens a session, takes the lock and keeps the session alive
//! there; the store's manager is killed with SIGKILL; the client goes on with the same
//! device (asking again, with the same request ids, whatever fails meanwhile) and keeps
//! its lock, then releases it. Every wait is bounded; a guard kills the processes.

use std::time::{Duration, Instant};
use tenure_client::proto::{
    self, acquire_response, holder_response, open_session_response, release_response,
    resolve_response, tenure_client::TenureClient,
};

use crate::common::{Guard, STORES, cluster_file, keep_alive, kill9, up, with_tls};

const NAME: &str = "/thin/lock";
const TTL_MS: u64 = 6_000;

type Stub = TenureClient<tenure_client::Chan>;

/// Where [`NAME`] lives, as the device behind `stub` knows it.
async fn resolve(stub: &mut Stub) -> proto::Resolved {
    let r = (stub.resolve(proto::ResolveRequest { name: NAME.into() }))
        .await
        .unwrap()
        .into_inner();
    match r.result {
        Some(resolve_response::Result::Ok(r)) => r,
        other => panic!("resolve: {other:?}"),
    }
}

/// Who holds [`NAME`], as the device behind `stub` answers.
async fn holders(stub: &mut Stub) -> proto::Holders {
    let r = (stub.holder(proto::HolderRequest { name: NAME.into() }))
        .await
        .unwrap()
        .into_inner();
    match r.result {
        Some(holder_response::Result::Ok(h)) => h,
        other => panic!("holders: {other:?}"),
    }
}

fn acquire(session: proto::SessionRef) -> proto::AcquireRequest {
    proto::AcquireRequest {
        session: Some(session),
        name: NAME.into(),
        mode: proto::LockMode::Exclusive as i32,
        no_wait: true,
        request_id: 1,
        ..Default::default()
    }
}

#[test]
fn a_thin_client_on_one_device_keeps_its_lock_through_a_kill_9_of_the_manager() {
    let _turn = turn!();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    up(&data);
    let file = cluster_file(&data);
    let devices: Vec<(u64, String, u64)> = (file["devices"].as_array().unwrap().iter())
        .map(|d| {
            let addr = d["client_addr"].as_str().unwrap().to_string();
            (d["id"].as_u64().unwrap(), addr, d["pid"].as_u64().unwrap())
        })
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let opts = with_tls(&data, Default::default());
    rt.block_on(async {
        let mut stubs: Vec<(u64, Stub)> = (devices.iter())
            .map(|(id, addr, _)| {
                let chan = tenure_client::channel(addr, &opts).unwrap();
                (*id, TenureClient::new(chan))
            })
            .collect();
        // Where the lock lives, asked of the first device.
        let store = tenure_core::config::store_of(NAME, STORES).0;
        let start = Instant::now();
        let resolved = loop {
            let r = resolve(&mut stubs[0].1).await;
            if r.manager.is_some() {
                break r;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "no manager");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(resolved.store, store);
        let manager = resolved.manager.unwrap();
        let (_, manager_addr, _) = devices.iter().find(|(d, ..)| *d == manager).unwrap();
        assert_eq!(resolved.endpoint, *manager_addr, "{resolved:?}");
        let (via, mut stub) = stubs.into_iter().find(|(d, _)| *d != manager).unwrap();

        // A session and the lock, through a device that does not manage the store.
        let opened = (stub.open_session(proto::OpenSessionRequest {
            store: Some(store),
            ttl_ms: TTL_MS,
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner();
        let Some(open_session_response::Result::Ok(opened)) = opened.result else {
            panic!("open through d{via}: {opened:?}");
        };
        let session = opened.session.unwrap();
        let granted = stub.acquire(acquire(session)).await.unwrap().into_inner();
        let Some(acquire_response::Result::Ok(granted)) = granted.result else {
            panic!("acquire through d{via}: {granted:?}");
        };
        let token = granted.token.unwrap();
        eprintln!("d{via} serves {NAME} of s{store}, managed by d{manager}: token {token:?}");

        // The manager dies; the client keeps to its device, keeping the session alive
        // every second and asking again after anything that failed.
        let (_, _, pid) = devices.iter().find(|(d, ..)| *d == manager).unwrap();
        kill9(*pid);
        let killed = Instant::now();
        let mut last_alive = Instant::now();
        let mut first_after = None;
        while killed.elapsed() < Duration::from_secs(8) {
            match keep_alive(&mut stub, session).await {
                Ok(_) => {
                    first_after.get_or_insert(killed.elapsed());
                    last_alive = Instant::now();
                }
                Err(e) => eprintln!("{:?} after the kill: {e}", killed.elapsed()),
            }
            assert!(
                last_alive.elapsed() < Duration::from_millis(TTL_MS),
                "the session went a TTL without a keep-alive through d{via}"
            );
            tokio::time::sleep(Duration::from_millis(1_000)).await;
        }
        let first_after = first_after.expect("a keep-alive answered after the kill");
        eprintln!("first keep-alive answered {first_after:?} after the kill");

        // Still the holder, with the same grant: the retry of the acquire (same id)
        // answers it, and the holder read shows it.
        let again = loop {
            let a = stub.acquire(acquire(session)).await.unwrap().into_inner();
            match a.result {
                Some(acquire_response::Result::Ok(g)) => break g,
                other => {
                    assert!(killed.elapsed() < Duration::from_secs(30), "{other:?}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        assert_eq!(again.token.unwrap(), token, "the same grant");
        let h = holders(&mut stub).await;
        assert_eq!(h.holders.len(), 1, "{h:?}");
        assert_eq!(h.holders[0].session, Some(session));

        let released = (stub.release(proto::ReleaseRequest {
            session: Some(session),
            name: NAME.into(),
            request_id: 2,
            token: Some(token),
        }))
        .await
        .unwrap()
        .into_inner();
        assert!(
            matches!(released.result, Some(release_response::Result::Ok(_))),
            "{released:?}"
        );
        let h = holders(&mut stub).await;
        assert!(h.holders.is_empty(), "{h:?}");
        // The device now names a survivor as the store's manager.
        let now = resolve(&mut stub).await;
        assert!(now.manager.is_some_and(|m| m != manager), "{now:?}");
    });
}
