//! The three members of a peer system (etcd or ZooKeeper) that `bench scale --system`
//! starts on 127.0.0.1, each in a directory of its own, and stops (SIGKILL) when the run
//! ends, whatever way it ends.

use super::{Footprint, disk_bytes, rss_mb};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How a member is started again after its kill: the same command, the same directory.
pub(super) struct Member {
    /// Its data directory.
    pub dir: PathBuf,
    /// Its client address (`127.0.0.1:port`).
    pub client: String,
    program: PathBuf,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    child: Option<Child>,
}

/// A peer's members, stopped on drop.
pub(super) struct Members {
    pub members: Vec<Member>,
    /// The directory the members live under; removed on drop unless given by the user.
    root: PathBuf,
    remove_root: bool,
}

impl Member {
    pub fn new(dir: PathBuf, client: String, program: impl Into<PathBuf>) -> Member {
        Member {
            dir,
            client,
            program: program.into(),
            args: Vec::new(),
            envs: Vec::new(),
            child: None,
        }
    }

    pub fn arg(mut self, a: impl Into<String>) -> Member {
        self.args.push(a.into());
        self
    }

    pub fn env(mut self, k: &str, v: impl Into<String>) -> Member {
        self.envs.push((k.into(), v.into()));
        self
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Start it (its output goes to `member.log` in its directory).
    pub fn start(&mut self) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("member.log"))?;
        let child = Command::new(&self.program)
            .args(&self.args)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start {}: {e}", self.program.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// `kill -9`, and reap it.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut c) = self.child.take() {
            c.kill()?;
            c.wait()?;
        }
        Ok(())
    }
}

impl Members {
    /// Members under `root` (`None`: a new directory under the temporary directory,
    /// removed at the end).
    pub fn root(given: Option<&Path>, system: &str) -> anyhow::Result<(PathBuf, bool)> {
        let (root, remove) = match given {
            Some(p) => (p.to_path_buf(), false),
            None => (
                std::env::temp_dir().join(format!("tenure-bench-{system}-{}", std::process::id())),
                true,
            ),
        };
        anyhow::ensure!(
            !root.join("m1").exists(),
            "{} already holds members of another run: remove it or name another --peer-data",
            root.display()
        );
        std::fs::create_dir_all(&root)?;
        Ok((root, remove))
    }

    pub fn new(root: PathBuf, remove_root: bool, members: Vec<Member>) -> Members {
        Members {
            members,
            root,
            remove_root,
        }
    }

    /// Start every member.
    pub fn start_all(&mut self) -> anyhow::Result<()> {
        for m in &mut self.members {
            m.start()?;
        }
        Ok(())
    }

    /// Client addresses of the members, comma-separated.
    pub fn clients(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client.clone()).collect()
    }

    /// Each running member's RSS and data size (`device` is the member's number, 1-3).
    pub fn footprints(&self) -> Vec<Footprint> {
        self.members
            .iter()
            .enumerate()
            .map(|(i, m)| Footprint {
                device: i as u64 + 1,
                rss_mb: m.pid().map_or(0.0, rss_mb),
                disk_mb: disk_bytes(&m.dir) as f64 / (1 << 20) as f64,
            })
            .collect()
    }
}

impl Drop for Members {
    fn drop(&mut self) {
        for m in &mut self.members {
            let _ = m.kill();
        }
        if self.remove_root {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// `n` free TCP ports on 127.0.0.1 (bound, read, released).
pub(super) fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

/// Poll `ready` every 100 ms until it holds or `limit` passes.
pub(super) async fn wait_until<F, Fut>(
    limit: Duration,
    what: &str,
    mut ready: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if ready().await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("{what} not ready after {} s", limit.as_secs())
}

/// After a member's kill at `t0`, until `watch` has passed: try a write with `write(k)`
/// (`k` counts the tries; each has a second) until one succeeds, and ask `led()` whether
/// a survivor names a new leader. Seconds from `t0` to each, if they happened.
pub(super) async fn watch_failover<W, WF, L, LF>(
    t0: Instant,
    watch: Duration,
    mut write: W,
    mut led: L,
) -> (Option<f64>, Option<f64>)
where
    W: FnMut(u64) -> WF,
    WF: std::future::Future<Output = bool>,
    L: FnMut() -> LF,
    LF: std::future::Future<Output = bool>,
{
    let (mut first_write, mut new_leader) = (None, None);
    let end = t0 + watch;
    let mut k = 0u64;
    while Instant::now() < end {
        if first_write.is_none() {
            k += 1;
            if let Ok(true) = tokio::time::timeout(Duration::from_secs(1), write(k)).await {
                first_write = Some(t0.elapsed().as_secs_f64());
            }
        }
        if new_leader.is_none() && led().await {
            new_leader = Some(t0.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (first_write, new_leader)
}

impl Members {
    /// Start member `i` again with its own command; seconds until `serving` says it
    /// serves (`None`: not within two minutes).
    pub async fn restart<F, Fut>(&mut self, i: usize, mut serving: F) -> anyhow::Result<Option<f64>>
    where
        F: FnMut(String) -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let t1 = Instant::now();
        self.members[i].start()?;
        let me = self.members[i].client.clone();
        let ok = wait_until(Duration::from_secs(120), "the restarted member", || {
            serving(me.clone())
        })
        .await;
        Ok(ok.is_ok().then(|| t1.elapsed().as_secs_f64()))
    }
}
