//! `tenure chaos --fill-objects/--fill-locks`: the standing state's checks on a local
//! cluster, without faults. Kept state passes; an object deleted and a standing lock
//! released behind the standing sessions' backs (an operator's `unlock`) are both caught:
//! a checker that cannot fail proves nothing.

use std::time::{Duration, Instant};
use tenure_chaos::devices::Target;
use tenure_chaos::standing::{Standing, StandingConfig, object_key};
use tenure_client::{Client, ClientOptions};

use crate::common::{Guard, cluster_file, tls, up};

#[test]
fn standing_checks_pass_on_kept_state_and_catch_a_deleted_object_and_a_lock_taken_away() {
    let _turn = turn!();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    up(&data);
    let endpoints: Vec<String> = (cluster_file(&data)["devices"].as_array().unwrap().iter())
        .map(|d| d["client_addr"].as_str().unwrap().to_string())
        .collect();
    let target = Target {
        endpoints,
        tls: tls(&data),
    };
    let cfg = StandingConfig {
        objects: 300,
        size: 256,
        locks: 200,
        sessions: 10,
        ttl: Duration::from_secs(30),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let standing = Standing::fill(&target, &cfg).await.expect("fill");
        // The sessions' last renewal is after "the restart" (there was none): no wait.
        let since = Instant::now() - cfg.ttl;
        let checks = standing.check(&target, since).await;
        assert_eq!(checks.len(), 2, "{checks:?}");
        for c in &checks {
            assert_eq!(c.status, "pass", "{c:?}");
        }

        // Planted: one object deleted, one standing lock released by an operator.
        let other: Client = target.client(ClientOptions::default()).unwrap();
        other
            .objects()
            .delete(&object_key(7))
            .await
            .expect("delete");
        let (name, store, session) = standing
            .locks()
            .nth(3)
            .map(|(n, st, s)| (n.to_string(), st, s))
            .unwrap();
        other
            .release_raw(store, session, &name, None)
            .await
            .expect("unlock");
        let checks = standing.check(&target, since).await;
        let by = |n: &str| checks.iter().find(|c| c.name == n).unwrap();
        let locks = by("standing locks kept");
        assert_eq!(locks.status, "fail", "{locks:?}");
        assert!(
            locks.violations.iter().any(|v| v.starts_with(&name)),
            "{locks:?}"
        );
        let objects = by("standing objects intact");
        assert_eq!(objects.status, "fail", "{objects:?}");
        assert_eq!(
            objects.violations,
            vec![format!("{}: missing", object_key(7))],
            "{objects:?}"
        );
        let _ = other.close().await;
        standing.release().await;
    });
}
