//! What a sweep cost this process: wall time, CPU time, threads and peak memory, for the
//! summary's speed line (events per second overall and per core of CPU time spent).

use std::time::Duration;

/// The cost of a sweep.
#[derive(Clone, Copy, Debug)]
pub(super) struct Perf {
    /// Wall time of the sweep (s).
    pub wall_s: f64,
    /// CPU time (user + system) the process spent during it (s), if readable.
    pub cpu_s: Option<f64>,
    /// Worker threads.
    pub threads: usize,
    /// Peak resident memory of the process (bytes), if readable.
    pub peak_bytes: Option<u64>,
}

impl Perf {
    /// The speed line: events per second of wall time and per core (per second of CPU
    /// time), the threads, and the peak resident memory.
    pub fn line(&self, events: u64) -> String {
        let per_wall = events as f64 / self.wall_s.max(1e-9);
        let mut s = format!("speed: {per_wall:.0} events/s on {} threads", self.threads);
        if let Some(cpu) = self.cpu_s {
            s.push_str(&format!(
                ", {:.0} events/s per core ({cpu:.1} s CPU)",
                events as f64 / cpu.max(1e-9)
            ));
        }
        match self.peak_bytes {
            Some(b) => s.push_str(&format!("; peak memory {} MB", b / (1 << 20))),
            None => s.push_str("; peak memory unknown"),
        }
        s
    }
}

/// User + system CPU time of this process so far, from `/proc/self/stat`.
pub(super) fn cpu_now() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let mut f = crate::cluster::stat_fields(&stat)?.skip(11);
    let ticks = f.next()?.parse::<u64>().ok()? + f.next()?.parse::<u64>().ok()?;
    let hz = rustix::param::clock_ticks_per_second().max(1);
    Some(Duration::from_secs_f64(ticks as f64 / hz as f64))
}

/// Peak resident memory of this process (`VmHWM` of `/proc/self/status`), in bytes.
pub(super) fn peak_memory() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_hwm(&status)
}

fn parse_hwm(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_memory_is_read_from_vmhwm() {
        let status = "Name:\ttenure\nVmPeak:\t  2000 kB\nVmHWM:\t    1536 kB\nVmRSS:\t 1000 kB\n";
        assert_eq!(parse_hwm(status), Some(1536 * 1024));
        assert_eq!(parse_hwm("Name:\ttenure\n"), None);
        assert!(peak_memory().is_some_and(|b| b > 0));
        assert!(cpu_now().is_some());
    }

    #[test]
    fn the_speed_line_reports_wall_and_per_core_rates() {
        let p = Perf {
            wall_s: 2.0,
            cpu_s: Some(4.0),
            threads: 2,
            peak_bytes: Some(300 << 20),
        };
        assert_eq!(
            p.line(1000),
            "speed: 500 events/s on 2 threads, 250 events/s per core (4.0 s CPU); peak memory 300 MB"
        );
    }
}
