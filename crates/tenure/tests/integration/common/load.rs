//! A lock load for process tests: clients acquire, hold briefly and release locks in a
//! loop, recording every acknowledged grant and every error; [`check_holds`] then checks
//! that the holders of a name never overlapped and that its tokens increased.

use super::with_tls;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tenure_client::{Client, ClientOptions, FencingToken, LockMode, Wait};

/// A client of the cluster under `data` that retries through failovers and restarts.
pub fn client(data: &std::path::Path, endpoints: &[String]) -> Client {
    let opts = ClientOptions {
        request_timeout: Duration::from_secs(3),
        retry_deadline: Duration::from_secs(30),
        max_attempts: 1000,
        session_ttl: Duration::from_secs(5),
        ..Default::default()
    };
    Client::with_options(endpoints.to_vec(), with_tls(data, opts)).unwrap()
}

/// One acknowledged grant and its release, as the holder saw them.
#[derive(Clone, Debug)]
pub struct Hold {
    pub name: String,
    pub session: u64,
    pub token: FencingToken,
    /// The grant's answer arrived.
    pub granted: Instant,
    /// The release was sent (the holder held the lock at least until then).
    pub releasing: Instant,
}

#[derive(Default)]
pub struct Load {
    /// Acknowledged grants, released.
    pub holds: Mutex<Vec<Hold>>,
    /// What went wrong.
    pub errors: Mutex<Vec<String>>,
}

/// Acquire, hold briefly, release, over and over, until `stop`.
pub async fn worker(
    c: Client,
    names: Vec<String>,
    first: usize,
    load: Arc<Load>,
    stop: Arc<AtomicBool>,
) {
    let mut k = first;
    while !stop.load(Ordering::Relaxed) {
        let name = names[k % names.len()].clone();
        k += 1;
        let limit = Duration::from_secs(30);
        let g = match tokio::time::timeout(limit, c.lock(&name, LockMode::Exclusive, Wait::Forever))
            .await
        {
            Ok(Ok(g)) => g,
            Ok(Err(e)) => {
                load.errors
                    .lock()
                    .unwrap()
                    .push(format!("lock {name}: {e}"));
                continue;
            }
            Err(_) => {
                load.errors
                    .lock()
                    .unwrap()
                    .push(format!("lock {name}: no answer within {limit:?}"));
                continue;
            }
        };
        let granted = Instant::now();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let (session, token) = (g.session(), g.token());
        let releasing = Instant::now();
        match tokio::time::timeout(limit, g.release()).await {
            Ok(Ok(())) => load.holds.lock().unwrap().push(Hold {
                name,
                session,
                token,
                granted,
                releasing,
            }),
            Ok(Err(e)) => load
                .errors
                .lock()
                .unwrap()
                .push(format!("release {name} (token {token}): {e}")),
            Err(_) => load
                .errors
                .lock()
                .unwrap()
                .push(format!("release {name}: no answer within {limit:?}")),
        }
    }
}

/// Per name: holders never overlap (one's grant comes after the previous one's release
/// was sent) and tokens increase in grant order.
pub fn check_holds(holds: &[Hold]) {
    let mut by_name: BTreeMap<&str, Vec<&Hold>> = BTreeMap::new();
    for h in holds {
        by_name.entry(&h.name).or_default().push(h);
    }
    for (name, mut hs) in by_name {
        hs.sort_by_key(|h| h.granted);
        for w in hs.windows(2) {
            let (a, b) = (w[0], w[1]);
            assert!(
                b.granted > a.releasing,
                "{name}: session {} was granted (token {}) while session {} held it (token {})",
                b.session,
                b.token,
                a.session,
                a.token
            );
            assert!(
                b.token > a.token,
                "{name}: token {} granted after token {}",
                b.token,
                a.token
            );
        }
    }
}
