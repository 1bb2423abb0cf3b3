//! Clock faults on real processes: a per-device wall-clock step, and a rate error of a
//! device's clocks. The test hosts are network namespaces of one kernel, so they share
//! its clocks — `CLOCK_REALTIME` as well as `CLOCK_MONOTONIC` — and stepping the real
//! wall clock would step every device (and the run) at once. Each device process
//! therefore runs under libfaketime (Debian package `faketime`), an `LD_PRELOAD` shim
//! that answers the C library's clock calls (`clock_gettime`, `gettimeofday`, `time`,
//! and the timed waits) from the real clocks plus an offset, at a rate:
//!
//! - `FAKETIME_TIMESTAMP_FILE` names the device's control file (`dN/faketime`), whose one
//!   line is a [`Spec`] such as `+0`, `-30s` or `+0 x1.000500`. It is replaced whole
//!   (written beside and renamed), so a reader sees the old line or the new one.
//! - `FAKETIME_CACHE_DURATION=0`: the shim reads the file again at the first clock call
//!   of each new second of the real wall clock, so a new line is in effect within a
//!   second ([`until_read`]). (`FAKETIME_NO_CACHE=1` would read it at every call, but
//!   that costs about 5 µs a call, measured here, against 0.4 µs, on every clock read of
//!   a server that reads its clocks all the time.)
//! - `FAKETIME_DONT_FAKE_MONOTONIC=1` for a step: only the wall clock
//!   (`CLOCK_REALTIME`, `time`, `gettimeofday`) moves, `CLOCK_MONOTONIC` and
//!   `CLOCK_BOOTTIME` read as the kernel's, as under an NTP step or a `date -s`.
//! - The multi-threaded build, `libfaketimeMT.so.1`: it takes a lock around each faked
//!   clock read, so a thread re-reading the control file never tears the offset another
//!   thread is reading.
//! - `NO_FAKE_STAT=1`: file times are the kernel's.
//!
//! A rate (`x1.000500`) is counted from the process's start: changing it in a running
//! process jumps its clocks by the time elapsed × the change (measured: a rate changed
//! from `x1` to `x2` four seconds into a process moved its clocks four seconds at once).
//! So a drifting clock is set at a start
//! ([`crate::devices::Devices::restart_drifting`]) and taken away by another.
//!
//! What libfaketime 0.9.10 (Debian 12's) does to the monotonic clocks when it fakes them
//! (the drift fault; measured): they run at the rate, but read as the faked *wall* clock
//! does — seconds since 1970, not since boot — since it computes every faked clock as
//! the faked wall time at the process's start plus the time elapsed on that clock × the
//! rate. A process that hands a deadline it computed on the faked monotonic clock to
//! the kernel as an absolute `CLOCK_MONOTONIC` time behind the C library's back waits
//! for decades: Rust's `std` does that in its futex-based timed waits
//! (`Condvar::wait_timeout`, `thread::park_timeout` and `mpsc::Receiver::recv_timeout`
//! never time out under it). Sleeps and `epoll_wait` and `poll` timeouts (tokio's
//! timers) are relative, and the shim scales them by the rate, so they keep time.

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

/// The rate error of a drifting device's clocks, in parts per million.
///
/// Why 500 ppm is within the bound the devices assume: a device trusts a lease (2 s)
/// and a session's TTL (the run's TTL, 5 s by default) only up to a drift allowance δ_c
/// (`[timing] clock_drift_ms`, 50 ms by default): a holder stops trusting a lease
/// `δ_c` before its end by its own clock. Two clocks whose rates differ from true by at
/// most ε each disagree on an interval T by at most 2·ε·T, so the allowance holds while
/// 2·ε·T ≤ δ_c, i.e. for T ≤ δ_c / (2·ε) = 50 ms / 0.001 = 50 s at ε = 500 ppm — ten
/// times the longest interval trusted here (see the `drift_is_within_the_bound` test).
pub const DRIFT_PPM: i64 = 500;

/// Where Debian and others put the shim, multi-threaded build first.
const LIBRARIES: [&str; 2] = ["libfaketimeMT.so.1", "libfaketime.so.1"];

/// What a device's clocks read: an offset of its wall clock, and a rate error of all
/// its clocks. Its text is a line of libfaketime's control file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Spec {
    /// Offset of the wall clock (seconds).
    pub offset_s: i64,
    /// Rate error (parts per million; 0: true rate).
    pub rate_ppm: i64,
}

impl std::fmt::Display for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // libfaketime reads the offset with atof() and scales it by the first of
        // 'm', 'h', 'd', 'y' anywhere in the line: seconds carry none of them.
        if self.offset_s == 0 {
            f.write_str("+0")?;
        } else {
            write!(f, "{:+}s", self.offset_s)?;
        }
        if self.rate_ppm != 0 {
            // The C library's atof() in the C locale: a '.' decimal point.
            let ppm = self.rate_ppm.clamp(-999_999, 999_999);
            let (whole, frac) = if ppm >= 0 {
                (1, ppm)
            } else {
                (0, 1_000_000 + ppm)
            };
            write!(f, " x{whole}.{frac:06}")?;
        }
        Ok(())
    }
}

/// An offset as a fault describes it: `+30s`, `-1h`.
pub fn describe_offset(secs: i64) -> String {
    if secs != 0 && secs % 3600 == 0 {
        format!("{:+}h", secs / 3600)
    } else {
        format!("{secs:+}s")
    }
}

/// The shim: `TENURE_CHAOS_FAKETIME` if set, else the first installed of
/// `/usr/lib/<triplet>/faketime/libfaketimeMT.so.1` (or `libfaketime.so.1`),
/// `/usr/lib/faketime/…`, `/usr/local/lib/faketime/…`.
pub fn library() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TENURE_CHAOS_FAKETIME") {
        return Some(PathBuf::from(p)).filter(|p| p.exists());
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/usr/lib") {
        let mut triplets: Vec<PathBuf> = (entries.flatten())
            .map(|e| e.path().join("faketime"))
            .filter(|p| p.is_dir())
            .collect();
        triplets.sort();
        dirs.extend(triplets);
    }
    dirs.push("/usr/local/lib/faketime".into());
    for lib in LIBRARIES {
        if let Some(p) = dirs.iter().map(|d| d.join(lib)).find(|p| p.exists()) {
            return Some(p);
        }
    }
    None
}

/// The shim, or why clock faults cannot be made here: it must be installed and move
/// the wall clock of a program run under it (`date`, offset by an hour).
pub fn find() -> Result<PathBuf, String> {
    let Some(lib) = library() else {
        return Err("libfaketime is not installed (Debian package faketime)".into());
    };
    let real = |c: &mut Command| -> Result<i64, String> {
        let out = c
            .arg("+%s")
            .output()
            .map_err(|e| format!("running date: {e}"))?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|_| "date printed no time".to_string())
    };
    let before = real(&mut Command::new("date"))?;
    let faked = real(
        Command::new("date")
            .env("LD_PRELOAD", &lib)
            .env("FAKETIME", "+3600s")
            .env_remove("FAKETIME_TIMESTAMP_FILE"),
    )?;
    if (faked - before - 3600).abs() > 5 {
        return Err(format!(
            "{} does not move the wall clock of a program run under it",
            lib.display()
        ));
    }
    Ok(lib)
}

/// Replace the control file `path` with `spec` (written beside it and renamed, so a
/// reader never sees a partial line).
pub fn write_spec(path: &Path, spec: Spec) -> std::io::Result<()> {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, format!("{spec}\n"))?;
    std::fs::rename(&tmp, path)
}

/// The environment of a process run under the shim `lib` with control file `file`;
/// with `monotonic`, its monotonic clocks are faked too (a rate), else only its wall
/// clock. The variables that would override the file are removed (`None`).
pub fn env(lib: &Path, file: &Path, monotonic: bool) -> Vec<(&'static str, Option<String>)> {
    let s = |p: &Path| Some(p.display().to_string());
    vec![
        ("LD_PRELOAD", s(lib)),
        ("FAKETIME_TIMESTAMP_FILE", s(file)),
        ("FAKETIME_CACHE_DURATION", Some("0".into())),
        ("NO_FAKE_STAT", Some("1".into())),
        (
            "FAKETIME_DONT_FAKE_MONOTONIC",
            (!monotonic).then(|| "1".into()),
        ),
        ("DONT_FAKE_MONOTONIC", None),
        ("FAKETIME", None),
        ("FAKETIME_NO_CACHE", None),
        ("FAKETIME_SHARED", None),
    ]
}

/// Apply [`env`] to a command.
pub fn apply(cmd: &mut Command, vars: &[(&'static str, Option<String>)]) {
    for (k, v) in vars {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
}

/// How long after a control file's change every process under the shim has read it:
/// to the next second of the wall clock, and a margin for the process's next clock read.
pub fn until_read() -> Duration {
    let into = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    Duration::from_nanos(1_000_000_000 - into as u64) + Duration::from_millis(100)
}

/// Remove the semaphore and shared memory the shim made for process `pid` (it removes
/// them itself only at a clean exit, and a later process of the same pid fails to start
/// while they are left).
pub fn forget(pid: u32) {
    let _ = std::fs::remove_file(format!("/dev/shm/faketime_shm_{pid}"));
    let _ = std::fs::remove_file(format!("/dev/shm/sem.faketime_sem_{pid}"));
}

/// Remove what the shim left for processes that are gone (killed runs' devices).
pub fn forget_dead() {
    let Ok(entries) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let pid = (name.strip_prefix("faketime_shm_"))
            .or_else(|| name.strip_prefix("sem.faketime_sem_"))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The devices' clocks: the shim, each device's control file and what it says.
#[derive(Debug)]
pub struct Clocks {
    lib: PathBuf,
    files: Vec<PathBuf>,
    specs: Vec<Spec>,
}

impl Clocks {
    /// Control files `dirs[i]/faketime` for devices 1..=dirs.len(), all reading true
    /// time.
    pub fn new(lib: PathBuf, dirs: &[PathBuf]) -> anyhow::Result<Clocks> {
        forget_dead();
        let files: Vec<PathBuf> = dirs.iter().map(|d| d.join("faketime")).collect();
        for f in &files {
            write_spec(f, Spec::default()).with_context(|| format!("writing {}", f.display()))?;
        }
        Ok(Clocks {
            lib,
            specs: vec![Spec::default(); files.len()],
            files,
        })
    }

    /// What device `id`'s clocks read.
    pub fn spec(&self, id: u64) -> Spec {
        self.specs[(id - 1) as usize]
    }

    /// The environment device `id` starts with: its monotonic clocks are faked only when
    /// they drift.
    pub fn env(&self, id: u64) -> Vec<(&'static str, Option<String>)> {
        let i = (id - 1) as usize;
        env(&self.lib, &self.files[i], self.specs[i].rate_ppm != 0)
    }

    /// Step device `id`'s wall clock to `offset_s` from true time, in effect within
    /// [`until_read`]. A drifting device's rate is kept (it cannot change in a running
    /// process), but a step of a drifting device moves its monotonic clocks too.
    pub fn step(&mut self, id: u64, offset_s: i64) -> anyhow::Result<()> {
        let i = (id - 1) as usize;
        let spec = Spec {
            offset_s,
            ..self.specs[i]
        };
        write_spec(&self.files[i], spec)
            .with_context(|| format!("writing {}", self.files[i].display()))?;
        self.specs[i] = spec;
        Ok(())
    }

    /// Device `id`'s clocks run at `1 + ppm/10⁶` from its next start (0: true rate).
    pub fn set_drift(&mut self, id: u64, ppm: i64) -> anyhow::Result<()> {
        let i = (id - 1) as usize;
        if ppm.abs() >= 1_000_000 {
            bail!("a rate error of {ppm} ppm stops or reverses the clock");
        }
        let spec = Spec {
            rate_ppm: ppm,
            ..self.specs[i]
        };
        write_spec(&self.files[i], spec)
            .with_context(|| format!("writing {}", self.files[i].display()))?;
        self.specs[i] = spec;
        Ok(())
    }

    /// Every wall clock back to true time (the rates of running processes stay until
    /// their next start, which is at the true rate).
    pub fn reset(&mut self) {
        for id in 1..=self.files.len() as u64 {
            let _ = self.step(id, 0);
            let _ = self.set_drift(id, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_are_libfaketime_lines() {
        let s = |offset_s, rate_ppm| Spec { offset_s, rate_ppm }.to_string();
        assert_eq!(s(0, 0), "+0");
        assert_eq!(s(30, 0), "+30s");
        assert_eq!(s(-30, 0), "-30s");
        assert_eq!(s(-3600, 0), "-3600s");
        assert_eq!(s(0, 500), "+0 x1.000500");
        assert_eq!(s(0, -500), "+0 x0.999500");
        assert_eq!(s(-30, 250_000), "-30s x1.250000");
        // No unit letter libfaketime would scale the offset by.
        for line in [s(3600, 0), s(-3600, -500)] {
            assert!(!line.contains(['m', 'h', 'd', 'y']), "{line}");
        }
        assert_eq!(describe_offset(-30), "-30s");
        assert_eq!(describe_offset(3600), "+1h");
        assert_eq!(describe_offset(-3600), "-1h");
    }

    #[test]
    fn control_files_are_replaced_whole() {
        let dir = std::env::temp_dir().join(format!("tenure-chaos-clock-{}", std::process::id()));
        let dirs = [dir.join("d1"), dir.join("d2")];
        for d in &dirs {
            std::fs::create_dir_all(d).unwrap();
        }
        let read = |id: usize| std::fs::read_to_string(dirs[id - 1].join("faketime")).unwrap();
        let mut c = Clocks::new("/nonexistent/libfaketime.so.1".into(), &dirs).unwrap();
        assert_eq!((read(1).as_str(), read(2).as_str()), ("+0\n", "+0\n"));
        c.step(2, -30).unwrap();
        assert_eq!((read(1).as_str(), read(2).as_str()), ("+0\n", "-30s\n"));
        c.set_drift(1, DRIFT_PPM).unwrap();
        assert_eq!(read(1), "+0 x1.000500\n");
        // A step only, with the wall clock alone faked; a drift fakes the monotonic
        // clocks too.
        let dont = |id| {
            (c.env(id).into_iter())
                .find(|(k, _)| *k == "FAKETIME_DONT_FAKE_MONOTONIC")
                .and_then(|(_, v)| v)
        };
        assert_eq!(dont(2), Some("1".to_string()));
        assert_eq!(dont(1), None);
        let env = c.env(2);
        let get = |k: &str| {
            env.iter()
                .find(|(n, _)| *n == k)
                .and_then(|(_, v)| v.clone())
        };
        assert_eq!(
            get("FAKETIME_TIMESTAMP_FILE"),
            Some(dirs[1].join("faketime").display().to_string())
        );
        assert_eq!(get("FAKETIME"), None, "FAKETIME would override the file");
        c.reset();
        assert_eq!((read(1).as_str(), read(2).as_str()), ("+0\n", "+0\n"));
        assert!(c.set_drift(1, -1_000_000).is_err());
        assert!(!dir.join("d1").join("faketime.new").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn drift_is_within_the_bound() {
        // 2·ε·T ≤ δ_c for every interval a device trusts: the lease and the chaos TTL,
        // and up to 50 s.
        let drift = tenure_core::config::Timing::default().clock_drift;
        let lease = tenure_core::config::Timing::default().lease;
        let ttl = crate::ChaosConfig::new("tenure".into(), 3, 1, Duration::ZERO).ttl;
        for t in [lease, ttl, Duration::from_secs(50)] {
            let error = t.as_secs_f64() * 2.0 * DRIFT_PPM as f64 / 1e6;
            assert!(
                error <= drift.as_secs_f64() + 1e-9,
                "{t:?}: {error} s > {drift:?}"
            );
        }
    }

    #[test]
    fn until_read_reaches_the_next_second() {
        let d = until_read();
        assert!(d > Duration::from_millis(100) && d <= Duration::from_millis(1100));
    }
}
