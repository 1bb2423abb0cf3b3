//! The device process's own metrics, read from `/proc/self` when `/metrics` is scraped
//! (Linux; elsewhere they stay at zero), under the names Prometheus's client libraries
//! use, and the size of a data directory.

use std::path::Path;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// Record the process start (call once, when the recorder is installed).
pub fn started() {
    static START: OnceLock<f64> = OnceLock::new();
    let t = *START.get_or_init(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    });
    metrics::gauge!("process_start_time_seconds").set(t);
}

/// Read the process's memory, CPU time and open descriptors now.
pub fn sample() {
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        if let Some(kb) = status_kb(&status, "VmRSS:") {
            metrics::gauge!("process_resident_memory_bytes").set((kb * 1024) as f64);
        }
        if let Some(kb) = status_kb(&status, "VmSize:") {
            metrics::gauge!("process_virtual_memory_bytes").set((kb * 1024) as f64);
        }
    }
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat")
        && let Some(ticks) = cpu_ticks(&stat)
    {
        let hz = rustix::param::clock_ticks_per_second().max(1);
        metrics::counter!("process_cpu_seconds_total").absolute(ticks / hz);
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        metrics::gauge!("process_open_fds").set(fds.count() as f64);
    }
}

/// The value in kB of a `/proc/<pid>/status` line such as `VmRSS:   1234 kB`.
fn status_kb(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].split_whitespace().next()?.parse().ok()
}

/// `utime + stime` of a `/proc/<pid>/stat` line in clock ticks: the 12th and 13th fields
/// after the command name (which may hold spaces and parentheses).
fn cpu_ticks(stat: &str) -> Option<u64> {
    let mut f = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    Some(f.next()?.parse::<u64>().ok()? + f.next()?.parse::<u64>().ok()?)
}

/// Bytes of the files under `dir` (sub-directories included, links not followed).
pub fn dir_bytes(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let t = e.file_type()?;
        if t.is_dir() {
            total += dir_bytes(&e.path()).unwrap_or(0);
        } else if t.is_file() {
            total += e.metadata().map_or(0, |m| m.len());
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_lines_are_read() {
        let status = "Name:\ttenure\nVmSize:\t  204800 kB\nVmRSS:\t   40960 kB\n";
        assert_eq!(status_kb(status, "VmRSS:"), Some(40960));
        assert_eq!(status_kb(status, "VmSize:"), Some(204800));
        assert_eq!(status_kb(status, "VmSwap:"), None);
        let stat = "4242 (tenure (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3";
        assert_eq!(cpu_ticks(stat), Some(300));
        assert_eq!(cpu_ticks("garbage"), None);
    }

    #[test]
    fn a_directory_counts_its_files_and_theirs() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), [0u8; 100]).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b"), [0u8; 23]).unwrap();
        assert_eq!(dir_bytes(dir.path()).unwrap(), 123);
        assert!(dir_bytes(&dir.path().join("none")).is_err());
    }
}
