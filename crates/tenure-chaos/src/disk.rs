//! Disks that stall: each device's data directory is an ext4 file system on a loop
//! device of its own (a sparse image in the run's directory), and each device process
//! runs in a block-I/O cgroup of its own. A stall throttles that cgroup's reads and
//! writes on that loop device to one byte a second (`blkio.throttle.*_bps_device`):
//! every write the process submits — the writeback an `fsync` of the WAL or the store's
//! files starts — and every read that misses the page cache waits in the kernel's block
//! layer, while the process itself runs on and its sockets answer. Writing 0 lifts the
//! limit and the held requests go through at once.
//!
//! This machine's kernel has no device-mapper (no `dm-delay`), and its cgroup v2
//! hierarchy has no `io` controller (the `blkio` controller is mounted as cgroup v1), so
//! v1 throttling is the most real stall available: the kernel, not the server, holds the
//! I/O. Where it is missing (no loop devices, no `blkio` hierarchy, no `mkfs.ext4`),
//! [`Disks`] says why and the run goes on without the `disk-stall` fault.
//!
//! Names carry the run's tag (which starts with the creating process's id), so a later
//! run removes what a killed run left: mounts, loop devices, cgroups.

use crate::net::{PREFIX, TestNet, sh};
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};

/// The cgroup v1 `blkio` hierarchy.
const BLKIO: &str = "/sys/fs/cgroup/blkio";
/// Size of each device's (sparse) disk image.
const IMAGE_BYTES: u64 = 1 << 30;

/// One device's disk.
struct Disk {
    /// Where it is mounted (the device's data directory).
    mount: PathBuf,
    /// The loop device (`/dev/loopN`).
    loop_dev: String,
    /// Its `major:minor`.
    dev: String,
    /// The device process's cgroup.
    cgroup: PathBuf,
}

/// The devices' disks, or why there are none. Dropping it unmounts and detaches them
/// (the device processes must be gone first).
pub struct Disks {
    disks: Vec<Disk>,
    /// Why disks cannot stall here (then data directories are plain directories).
    pub unavailable: Option<String>,
}

/// Why disks cannot stall here.
pub fn unsupported() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not root".into());
    }
    if !Path::new(&format!("{BLKIO}/blkio.throttle.write_bps_device")).exists() {
        return Some(format!(
            "no cgroup v1 blkio throttling ({BLKIO}/blkio.throttle.write_bps_device)"
        ));
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("no loop devices (/dev/loop-control)".into());
    }
    for tool in ["losetup", "mkfs.ext4", "mount", "umount"] {
        if sh("sh", &["-c", &format!("command -v {tool}")]).is_err() {
            return Some(format!("{tool} is not installed"));
        }
    }
    None
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The pid in a name `…tenure-chaos-<pid>-…` or `tchaos-<pid>-…`, if it has one.
fn run_pid(name: &str, marker: &str) -> Option<u32> {
    let rest = &name[name.find(marker)? + marker.len()..];
    rest.split('-').next()?.parse().ok()
}

/// Remove the disks and cgroups of runs whose process is gone (their device processes
/// are killed with their namespaces, [`crate::net::remove_leftovers`], which runs
/// first). Returns what was removed.
pub fn remove_leftovers() -> Vec<String> {
    let mut removed = Vec::new();
    let marker = "/tenure-chaos-";
    // Mounts first: a loop device is detached once nothing uses it.
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    for line in mounts.lines() {
        let mut f = line.split_whitespace();
        let (Some(src), Some(at)) = (f.next(), f.next()) else {
            continue;
        };
        if src.starts_with("/dev/loop")
            && let Some(pid) = run_pid(at, marker)
            && !pid_alive(pid)
        {
            let _ = sh("umount", &["-l", at]);
            removed.push(at.to_string());
        }
    }
    let loops = sh("losetup", &["-l", "-n", "-O", "NAME,BACK-FILE"]).unwrap_or_default();
    for line in loops.lines() {
        let mut f = line.split_whitespace();
        let (Some(dev), Some(file)) = (f.next(), f.next()) else {
            continue;
        };
        if let Some(pid) = run_pid(file, marker)
            && !pid_alive(pid)
        {
            let _ = sh("losetup", &["-d", dev]);
            removed.push(dev.to_string());
        }
    }
    if let Ok(dir) = std::fs::read_dir(BLKIO) {
        let cmarker = format!("{PREFIX}-");
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(&cmarker)
                && let Some(pid) = run_pid(&name, &cmarker)
                && !pid_alive(pid)
            {
                let _ = std::fs::remove_dir(e.path());
                removed.push(e.path().display().to_string());
            }
        }
    }
    removed
}

impl Disks {
    /// A disk for every host of `net`, mounted at `data/d<id>/data` — or none, with the
    /// reason, where disks cannot stall here.
    pub fn create(net: &TestNet, data: &Path) -> anyhow::Result<Disks> {
        let mut disks = Disks {
            disks: Vec::new(),
            unavailable: unsupported(),
        };
        if disks.unavailable.is_some() {
            return Ok(disks);
        }
        for what in remove_leftovers() {
            tracing::info!(%what, "removed a disk left by a dead run");
        }
        for h in &net.hosts {
            // From here on, drop undoes whatever was made.
            disks.add(net, h.id, data)?;
        }
        Ok(disks)
    }

    fn add(&mut self, net: &TestNet, id: u64, data: &Path) -> anyhow::Result<()> {
        let image = data.join(format!("d{id}.img"));
        let mount = data.join(format!("d{id}")).join("data");
        std::fs::create_dir_all(&mount)?;
        std::fs::File::create(&image)?.set_len(IMAGE_BYTES)?;
        let image_s = image.display().to_string();
        let loop_dev = sh("losetup", &["-f", "--show", &image_s])?
            .trim()
            .to_string();
        if !loop_dev.starts_with("/dev/loop") {
            bail!("losetup gave {loop_dev:?}");
        }
        let name = loop_dev.trim_start_matches("/dev/");
        let dev = std::fs::read_to_string(format!("/sys/block/{name}/dev"))
            .with_context(|| format!("major:minor of {loop_dev}"))?
            .trim()
            .to_string();
        let cgroup = PathBuf::from(format!("{BLKIO}/{PREFIX}-{}-h{id}", net.tag));
        self.disks.push(Disk {
            mount: mount.clone(),
            loop_dev: loop_dev.clone(),
            dev,
            cgroup: cgroup.clone(),
        });
        sh(
            "mkfs.ext4",
            &[
                "-q",
                "-F",
                "-E",
                "lazy_itable_init=1,lazy_journal_init=1",
                &loop_dev,
            ],
        )?;
        sh("mount", &[&loop_dev, &mount.display().to_string()])?;
        std::fs::create_dir_all(&cgroup)
            .with_context(|| format!("creating {}", cgroup.display()))?;
        Ok(())
    }

    /// Whether disks can stall in this run.
    pub fn available(&self) -> bool {
        self.unavailable.is_none() && !self.disks.is_empty()
    }

    fn disk(&self, id: u64) -> Option<&Disk> {
        self.disks.get((id - 1) as usize)
    }

    /// Where device `id`'s process must be put (its cgroup's `cgroup.procs`), if disks
    /// can stall.
    pub fn procs_file(&self, id: u64) -> Option<PathBuf> {
        self.disk(id).map(|d| d.cgroup.join("cgroup.procs"))
    }

    fn throttle(&self, id: u64, bps: u64) -> anyhow::Result<()> {
        let d = self.disk(id).context("no disk to stall")?;
        for f in [
            "blkio.throttle.write_bps_device",
            "blkio.throttle.read_bps_device",
        ] {
            let path = d.cgroup.join(f);
            std::fs::write(&path, format!("{} {bps}\n", d.dev))
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }

    /// Stall device `id`'s disk: its reads and writes wait until [`Disks::release`].
    pub fn stall(&self, id: u64) -> anyhow::Result<()> {
        self.throttle(id, 1)
    }

    /// Let device `id`'s held and later I/O through.
    pub fn release(&self, id: u64) -> anyhow::Result<()> {
        self.throttle(id, 0)
    }

    /// Release every disk.
    pub fn release_all(&self) {
        for i in 0..self.disks.len() {
            let _ = self.release(i as u64 + 1);
        }
    }

    /// Describe device `id`'s disk (for the fault log).
    pub fn describe(&self, id: u64) -> String {
        self.disk(id)
            .map_or("-".into(), |d| format!("{} ({})", d.loop_dev, d.dev))
    }
}

impl Drop for Disks {
    fn drop(&mut self) {
        self.release_all();
        for d in self.disks.drain(..) {
            let m = d.mount.display().to_string();
            if sh("umount", &[&m]).is_err() {
                let _ = sh("umount", &["-l", &m]);
            }
            let _ = sh("losetup", &["-d", &d.loop_dev]);
            let _ = std::fs::remove_dir(&d.cgroup);
        }
    }
}
