//! Elections on real processes (DESIGN §6): a local cluster of three `tenure server`
//! processes on 127.0.0.1 (`tenure cluster up`), driven through `tenure elect`,
//! `tenure leader` and the client library.
//!
//! - two `tenure elect` processes campaign; the leader's is killed with SIGKILL: the other
//!   leads with a larger fencing token once the dead one's session has expired (TTL 2 s,
//!   plus the store's 1 s lock-delay after an expiry), and `tenure leader --watch` reports
//!   the leader, the "no leader" gap, and the new leader, in revision order;
//! - a campaigner paused (SIGSTOP) past its session's TTL loses its place in the queue
//!   with its session, and its `tenure elect` fails when it resumes: no zombie candidate
//!   ever leads;
//! - a leader whose store's manager is paused learns that leadership may be lost before
//!   its conservative deadline;
//! - the store's manager is killed with SIGKILL under a leader, a waiting campaign and an
//!   observer: the leader keeps leading with its token, the campaign keeps its place (and
//!   leads, with a token of the new epoch, when the leader resigns), and the observer
//!   resumes at the new manager without a missed or repeated change;
//! - the coordinator device is killed with SIGKILL: the others elect a new one, with a
//!   larger term, and `tenure status` shows it.
//!
//! The measured times are printed. Every wait is bounded and polls a condition; guards
//! kill the processes if a step fails.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tenure_client::elections::election_key;
use tenure_client::{Client, ClientOptions, Loss, Wait};

use crate::common::{Guard, cluster_file, kill9, tenure, up, with_tls};

/// The tests run one at a time, whatever the harness's thread count: their timings are
/// measured.
static SERIAL: Mutex<()> = Mutex::new(());

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn options() -> ClientOptions {
    ClientOptions {
        request_timeout: Duration::from_secs(3),
        retry_deadline: Duration::from_secs(40),
        max_attempts: 1000,
        session_ttl: Duration::from_secs(3),
        loss_warning: Duration::from_millis(500),
        wait_poll: Duration::from_secs(5),
        ..Default::default()
    }
}

/// A local cluster of three devices, killed when dropped.
struct Cluster {
    _guard: Guard,
    dir: tempfile::TempDir,
    data: PathBuf,
    endpoints: Vec<String>,
}

impl Cluster {
    fn up() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("tenure-data");
        let guard = Guard(data.clone());
        let started = Instant::now();
        up(&data);
        eprintln!("cluster up in {:?}", started.elapsed());
        let endpoints = devices(&data)
            .iter()
            .map(|d| d["client_addr"].as_str().unwrap().to_string())
            .collect();
        Cluster {
            _guard: guard,
            dir,
            data,
            endpoints,
        }
    }

    fn client(&self) -> Client {
        Client::with_options(self.endpoints.clone(), with_tls(&self.data, options())).unwrap()
    }

    fn pid(&self, id: u64) -> u64 {
        devices(&self.data)
            .iter()
            .find(|d| d["id"].as_u64() == Some(id))
            .and_then(|d| d["pid"].as_u64())
            .unwrap()
    }

    /// A file in the test's directory.
    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Start `tenure SUBCOMMAND --data DIR ARGS...`, its stdout and stderr in files named
    /// `tag`.
    fn spawn(&self, tag: &str, args: &[&str]) -> Proc {
        let out = std::fs::File::create(self.file(&format!("{tag}.out"))).unwrap();
        let err = std::fs::File::create(self.file(&format!("{tag}.err"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_tenure"))
            .arg(args[0])
            .arg("--data")
            .arg(&self.data)
            .args(&args[1..])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap();
        Proc {
            child,
            out: self.file(&format!("{tag}.out")),
            err: self.file(&format!("{tag}.err")),
        }
    }
}

fn devices(data: &Path) -> Vec<serde_json::Value> {
    cluster_file(data)["devices"].as_array().unwrap().clone()
}

/// A `tenure` process of the test, killed when dropped.
struct Proc {
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Proc {
    fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its JSON lines so far.
    fn json_lines(&self) -> Vec<serde_json::Value> {
        self.stdout()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn signal(sig: &str, pid: u64) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// Poll `f` every 20 ms until it returns `Some`, at most `limit`.
async fn until<T, F, Fut>(limit: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The `elected` line of a `tenure elect --json`, once printed.
fn elected(p: &Proc) -> Option<serde_json::Value> {
    p.json_lines().into_iter().find(|v| v["elected"] == true)
}

fn token(s: &str) -> (u64, u64) {
    let (e, q) = s.split_once('.').unwrap();
    (e.parse().unwrap(), q.parse().unwrap())
}

/// A command for `tenure elect ... --`: runs until its `tenure elect` parent is gone (so
/// a SIGKILL of the parent leaves nothing behind), or until SIGTERM.
const WHILE_PARENT_LIVES: &[&str] = &[
    "sh",
    "-c",
    "trap 'exit 143' TERM; while kill -0 $PPID 2>/dev/null; do sleep 0.05; done",
];

#[test]
fn the_other_campaigner_leads_with_a_larger_token_after_kill_9_of_the_leader() {
    let _turn = turn!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rt = runtime();
    let _in_rt = rt.enter();
    let cluster = Cluster::up();
    let c = cluster.client();
    let name = "/e2e/primary";
    let key = election_key(name);

    rt.block_on(async {
        let watch = cluster.spawn("watch", &["leader", name, "--watch", "--json"]);
        until(Duration::from_secs(20), "the observer starts", || async {
            (!watch.json_lines().is_empty()).then_some(())
        })
        .await;
        let elect = |tag: &str, value: &str| {
            let mut args = vec!["elect", name, value, "--ttl", "2s", "--json", "--"];
            args.extend(WHILE_PARENT_LIVES);
            cluster.spawn(tag, &args)
        };
        let a = elect("a", "A");
        let a_won = until(Duration::from_secs(20), "A is elected", || async {
            elected(&a)
        })
        .await;
        let b = elect("b", "B");
        // B waits in the election's queue behind A.
        until(Duration::from_secs(20), "B campaigns", || async {
            let s = c.holders(&key).await.ok()?;
            (s.waiters.len() == 1).then_some(())
        })
        .await;
        assert!(elected(&b).is_none(), "B leads beside A: {}", b.stdout());
        let leader = c.elections().leader(name).await.unwrap().unwrap();
        assert_eq!(
            (leader.value_str().as_ref(), leader.token.to_string()),
            ("A", a_won["token"].as_str().unwrap().to_string())
        );

        let killed_at = Instant::now();
        kill9(a.pid() as u64);
        let b_won = until(Duration::from_secs(30), "B is elected", || async {
            elected(&b)
        })
        .await;
        let handover = killed_at.elapsed();
        let (ta, tb) = (
            token(a_won["token"].as_str().unwrap()),
            token(b_won["token"].as_str().unwrap()),
        );
        eprintln!(
            "leader A (token {ta:?}) killed: B elected with token {tb:?} {handover:?} later \
             (session TTL 2 s + lock-delay 1 s)"
        );
        assert!(tb > ta, "B's token {tb:?} is not above A's {ta:?}");
        assert!(
            handover < Duration::from_secs(8),
            "handover took {handover:?}, beyond TTL + lock-delay + slack"
        );

        // The observer saw A, then nobody, then B, in revision order.
        let changes = until(Duration::from_secs(10), "the observer sees B", || async {
            let lines = watch.json_lines();
            lines
                .iter()
                .any(|v| v["leader"]["value"] == "B")
                .then_some(lines)
        })
        .await;
        eprintln!("observed: {changes:?}");
        let revisions: Vec<u64> = changes
            .iter()
            .map(|v| v["revision"].as_u64().unwrap())
            .collect();
        assert!(revisions.windows(2).all(|w| w[0] < w[1]), "{revisions:?}");
        let shape: Vec<String> = changes
            .iter()
            .map(|v| v["leader"]["value"].as_str().unwrap_or("none").to_string())
            .collect();
        let at_a = shape.iter().position(|s| s == "A").expect("A observed");
        assert_eq!(
            &shape[at_a..],
            ["A", "none", "B"],
            "after A: the gap, then B ({changes:?})"
        );
        assert_eq!(
            changes.last().unwrap()["leader"]["token"].as_str(),
            b_won["token"].as_str()
        );

        // B is stopped (SIGTERM): it passes it on to its command, resigns, and the
        // observer sees nobody lead at once, long before B's session would expire.
        let stopped_at = Instant::now();
        signal("-TERM", b.pid() as u64);
        until(
            Duration::from_secs(10),
            "the observer sees B resign",
            || async {
                let lines = watch.json_lines();
                (lines.last()?["leader"].is_null()).then_some(())
            },
        )
        .await;
        eprintln!(
            "B resigned on SIGTERM: no leader {:?} later",
            stopped_at.elapsed()
        );
        assert!(
            stopped_at.elapsed() < Duration::from_secs(2),
            "a resignation, not an expiry"
        );
        assert_eq!(c.elections().leader(name).await.unwrap(), None);
        let mut b = b;
        let status = b.child.wait().unwrap();
        assert_eq!(status.code(), Some(143), "stderr: {}", b.stderr());
        let _ = c.close().await;
    });
}

#[test]
fn a_campaign_whose_session_expires_fails_and_leaves_no_candidate() {
    let _turn = turn!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rt = runtime();
    let _in_rt = rt.enter();
    let cluster = Cluster::up();
    let c = cluster.client();
    let name = "/e2e/zombie";
    let key = election_key(name);

    rt.block_on(async {
        let mut args = vec!["elect", name, "A", "--json", "--"];
        args.extend(WHILE_PARENT_LIVES);
        let a = cluster.spawn("a", &args);
        until(Duration::from_secs(20), "A is elected", || async {
            elected(&a)
        })
        .await;
        let mut b = cluster.spawn("b", &["elect", name, "B", "--ttl", "2s", "--json"]);
        let b_session = until(Duration::from_secs(20), "B campaigns", || async {
            let s = c.holders(&key).await.ok()?;
            s.waiters.first().copied()
        })
        .await;

        // B is paused past its TTL: its session expires, and its place in the queue goes
        // with it.
        signal("-STOP", b.pid() as u64);
        let paused_at = Instant::now();
        until(
            Duration::from_secs(30),
            "B's campaign leaves the queue",
            || async {
                let s = c.holders(&key).await.ok()?;
                s.waiters.is_empty().then_some(())
            },
        )
        .await;
        eprintln!(
            "B's session {b_session} expired and its campaign left the queue {:?} after the pause",
            paused_at.elapsed()
        );
        signal("-CONT", b.pid() as u64);
        let ends = Instant::now();
        let status = loop {
            if let Some(st) = b.child.try_wait().unwrap() {
                break st;
            }
            assert!(
                ends.elapsed() < Duration::from_secs(20),
                "B's tenure elect ends"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let err = b.stderr();
        assert_eq!(status.code(), Some(1), "stderr: {err}");
        assert!(
            err.contains("expired") && err.contains("campaigning for /e2e/zombie"),
            "stderr: {err}"
        );
        assert!(elected(&b).is_none(), "{}", b.stdout());

        // A resigns: nobody leads, nobody is queued — the expired campaign never leads.
        signal("-TERM", a.pid() as u64);
        until(Duration::from_secs(10), "A resigns", || async {
            let s = c.holders(&key).await.ok()?;
            (s.holders.is_empty() && s.waiters.is_empty()).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(c.elections().leader(name).await.unwrap(), None);
        let s = c.holders(&key).await.unwrap();
        assert!(s.holders.is_empty() && s.waiters.is_empty(), "{s:?}");
        let (ok, out, _) = tenure(&["leader", name, "--data", cluster.data.to_str().unwrap()]);
        // No leader: said so, with exit status 1 for scripts.
        assert!(!ok && out.contains("no leader"), "{out}");

        // The client library: a campaign fails with SessionExpired when its session ends
        // (closed here) while it waits, and stands again only when asked.
        let holder = cluster.client();
        let l = holder.elections().campaign(name, "C").await.unwrap();
        let waiting = cluster.client();
        let e = waiting.elections();
        let campaign = tokio::spawn(async move { e.campaign(name, "D").await });
        until(Duration::from_secs(10), "D campaigns", || async {
            let s = c.holders(&key).await.ok()?;
            (s.waiters.len() == 1).then_some(())
        })
        .await;
        waiting.close().await.unwrap();
        let r = tokio::time::timeout(Duration::from_secs(10), campaign)
            .await
            .expect("the campaign ends with its session")
            .unwrap();
        assert!(
            matches!(r, Err(tenure_client::Error::SessionExpired(_))),
            "{r:?}"
        );
        let s = c.holders(&key).await.unwrap();
        assert!(s.waiters.is_empty(), "{s:?}");
        assert!(l.resign().await.unwrap());
        assert_eq!(c.elections().leader(name).await.unwrap(), None);
        let _ = holder.close().await;
        let _ = c.close().await;
    });
}

#[test]
fn a_leader_learns_it_may_have_lost_leadership_before_its_deadline() {
    let _turn = turn!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rt = runtime();
    let cluster = Cluster::up();
    let eps = cluster.endpoints.clone();

    rt.block_on(async {
        // The warning is due about 0.95 s after the pause, before a new manager can have
        // taken over (at least 1.4 s) and resumed the session, moving the deadline.
        let opts = ClientOptions {
            loss_warning: Duration::from_secs(2),
            ..options()
        };
        let c = Client::with_options(eps.clone(), with_tls(&cluster.data, opts)).unwrap();
        let name = "/e2e/paused";
        let l = c
            .elections()
            .campaign_with(name, "leader-1", Wait::Try)
            .await
            .unwrap();
        let store = l.store();
        let victim = until(Duration::from_secs(10), "the store's manager", || async {
            for e in &eps {
                if let Ok(s) = c.status_of(e).await
                    && s.managers
                        .iter()
                        .any(|m| m.store == store && m.is_manager())
                {
                    return Some(s.device);
                }
            }
            None
        })
        .await;
        // Pause the manager just after a keep-alive was answered.
        let mut w = l.watch();
        w.borrow_and_update();
        tokio::time::timeout(Duration::from_secs(5), w.changed())
            .await
            .expect("a keep-alive answered")
            .unwrap();
        signal("-STOP", cluster.pid(victim));
        let paused_at = Instant::now();
        let deadline = l.deadline();
        let ahead = deadline - paused_at;
        let loss = tokio::time::timeout(ahead + Duration::from_secs(5), l.lost()).await;
        let at = Instant::now();
        signal("-CONT", cluster.pid(victim));
        let loss = loss.expect("lost() resolves");
        eprintln!(
            "manager d{victim} of store {store} paused with the deadline {ahead:?} ahead: \
             lost() = {loss:?} {:?} after the pause, {:?} before the deadline",
            at - paused_at,
            deadline.saturating_duration_since(at)
        );
        assert!(
            at < deadline,
            "lost() resolved {:?} after the deadline",
            at - deadline
        );
        assert_eq!(loss, Loss::DeadlineNear);
        // The leadership survives the manager's pause (the session is resumed wherever the
        // store is managed now): the same leader, with the same token.
        let now = until(Duration::from_secs(30), "the leader read again", || async {
            c.elections().leader(name).await.ok().flatten()
        })
        .await;
        assert_eq!(now.token, l.token());
        assert!(l.resign().await.unwrap());
        let _ = c.close().await;
    });
}

#[test]
fn a_new_coordinator_is_elected_after_kill_9_of_the_coordinator() {
    let _turn = turn!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rt = runtime();
    let cluster = Cluster::up();
    let data = cluster.data.to_str().unwrap().to_string();
    let status = || {
        let (ok, out, err) = tenure(&["status", "--json", "--data", &data]);
        assert!(ok, "{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    rt.block_on(async {
        let (old, old_term) = until(Duration::from_secs(20), "a coordinator", || async {
            let s = status();
            let c = &s["coordinator"];
            (c["followed_by"].as_array()?.len() == 3 && c["acting"] == true)
                .then(|| (c["device"].as_u64().unwrap(), c["term"].as_u64().unwrap()))
        })
        .await;
        let c = cluster.client();
        let killed_at = Instant::now();
        kill9(cluster.pid(old));
        // The survivors elect a new coordinator with a larger term and agree on it.
        let survivors: Vec<String> = devices(&cluster.data)
            .iter()
            .filter(|d| d["id"].as_u64() != Some(old))
            .map(|d| d["client_addr"].as_str().unwrap().to_string())
            .collect();
        let (new, term) = until(Duration::from_secs(20), "a new coordinator", || async {
            let mut seen = Vec::new();
            for e in &survivors {
                let s = c.status_of(e).await.ok()?;
                seen.push((
                    s.coordinator?,
                    s.coordinator_term,
                    s.acting_coordinator,
                    s.device,
                ));
            }
            let (new, term, ..) = seen[0];
            let agreed = seen.iter().all(|v| (v.0, v.1) == (new, term));
            let acts = seen.iter().any(|v| v.3 == new && v.2);
            (agreed && acts && new != old && term > old_term).then_some((new, term))
        })
        .await;
        let failover = killed_at.elapsed();
        eprintln!(
            "coordinator d{old} (term {old_term}) killed: d{new} coordinates in term {term} \
             {failover:?} later (heartbeat 300 ms, 3 missed, then the bully election)"
        );
        assert!(failover < Duration::from_secs(10), "{failover:?}");
        let s = status();
        assert_eq!(s["coordinator"]["device"].as_u64(), Some(new), "{s}");
        let (ok, out, _) = tenure(&["cluster", "status", "--data", &data]);
        assert!(ok);
        let line = out.lines().find(|l| l.starts_with("coordinator:")).unwrap();
        eprintln!("tenure cluster status: {line}");
        assert!(line.starts_with(&format!("coordinator: d{new} (term {term}), acting")));
        let _ = c.close().await;
    });
}

#[test]
fn leadership_a_waiting_campaign_and_an_observer_survive_kill_9_of_the_store_manager() {
    let _turn = turn!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rt = runtime();
    let _in_rt = rt.enter();
    let cluster = Cluster::up();
    let c = cluster.client();
    let name = "/e2e/failover";
    let key = election_key(name);

    rt.block_on(async {
        let watch = cluster.spawn("watch", &["leader", name, "--watch", "--json"]);
        until(Duration::from_secs(20), "the observer starts", || async {
            (!watch.json_lines().is_empty()).then_some(())
        })
        .await;
        // The default TTL (10 s) outlasts the store's failover.
        let elect = |tag: &str, value: &str| {
            let mut args = vec!["elect", name, value, "--json", "--"];
            args.extend(WHILE_PARENT_LIVES);
            cluster.spawn(tag, &args)
        };
        let a = elect("a", "A");
        let a_won = until(Duration::from_secs(20), "A is elected", || async {
            elected(&a)
        })
        .await;
        let b = elect("b", "B");
        until(Duration::from_secs(20), "B campaigns", || async {
            let s = c.holders(&key).await.ok()?;
            (s.waiters.len() == 1).then_some(())
        })
        .await;
        let store = a_won["store"].as_u64().unwrap() as u32;
        let manager = until(Duration::from_secs(10), "the store's manager", || async {
            for e in &cluster.endpoints {
                if let Ok(s) = c.status_of(e).await
                    && s.managers
                        .iter()
                        .any(|m| m.store == store && m.is_manager())
                {
                    return Some(s.device);
                }
            }
            None
        })
        .await;
        let killed_at = Instant::now();
        kill9(cluster.pid(manager));

        // A still leads with its token, B still waits: both sessions were resumed at the
        // new manager, and B's campaign kept its place.
        let a_token = a_won["token"].as_str().unwrap().to_string();
        until(
            Duration::from_secs(30),
            "the store served again",
            || async {
                let l = c.elections().leader(name).await.ok()??;
                let s = c.holders(&key).await.ok()?;
                (l.token.to_string() == a_token && s.waiters.len() == 1).then_some(())
            },
        )
        .await;
        eprintln!(
            "manager d{manager} of store {store} killed: the election served again {:?} later, \
             A still leading",
            killed_at.elapsed()
        );
        assert!(elected(&b).is_none(), "{}", b.stdout());
        assert!(
            !a.stderr().contains("may be lost"),
            "A gave up: {}",
            a.stderr()
        );

        // A resigns: B leads, with a token of the new epoch.
        signal("-TERM", a.pid() as u64);
        let b_won = until(Duration::from_secs(20), "B is elected", || async {
            elected(&b)
        })
        .await;
        let (ta, tb) = (token(&a_token), token(b_won["token"].as_str().unwrap()));
        assert!(
            tb.0 > ta.0,
            "B's token {tb:?} is not of a newer epoch than {ta:?}"
        );
        let lines = until(Duration::from_secs(10), "the observer sees B", || async {
            let lines = watch.json_lines();
            lines
                .iter()
                .any(|v| v["leader"]["value"] == "B")
                .then_some(lines)
        })
        .await;
        let shape: Vec<String> = lines
            .iter()
            .map(|v| v["leader"]["value"].as_str().unwrap_or("none").to_string())
            .collect();
        assert_eq!(shape, ["none", "A", "none", "B"], "{lines:?}");
        let _ = c.close().await;
    });
}
