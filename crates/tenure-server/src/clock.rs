//! The device's clock (DESIGN §3, "Clocks").
//!
//! Every lease, session deadline and timer of a device is timed on `CLOCK_BOOTTIME`: a
//! monotonic clock that no wall-clock step moves (an NTP step, `date -s`) and that, unlike
//! `CLOCK_MONOTONIC`, goes on counting while the host is suspended — a manager whose host
//! slept through its lease must see the lease as passed when it wakes.
//!
//! A device's `tenure_core::Instant` is an origin plus the boot clock. The origin is the
//! wall clock's reading minus the boot clock's at the first start of the device on this
//! boot of its host, kept in the data directory with the host's boot id (`clock`): a
//! device restarted on the same host boot reads on from where its previous life stopped,
//! whatever its wall clock did meanwhile, so the times it persisted (lookup entries'
//! deadlines, the serials its ids are made from) keep their meaning across the restart,
//! neither extended nor cut. Only after the host rebooted (another boot id) is the origin
//! taken from the wall clock again. Nothing that decides safety compares these readings
//! across devices (leases travel as lengths, a store's tables hold the store's own time);
//! the wall-clock origin keeps them near wall time for what people and other hosts read.

use std::path::Path;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// µs to add to the boot clock.
static ORIGIN: OnceLock<u64> = OnceLock::new();

/// `CLOCK_BOOTTIME` in µs.
fn boottime_us() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

/// The wall clock in µs since the Unix epoch (for people and other hosts only).
pub fn wall_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// The host's boot id (a new one at every boot), if the kernel tells it.
fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_string()).filter(|s| !s.is_empty())
}

/// The origin kept in a `clock` file's `text`, if it was written on the host's boot
/// `boot`.
fn kept_origin(text: Option<&str>, boot: Option<&str>) -> Option<u64> {
    let (id, origin) = text?.trim().split_once(' ')?;
    if Some(id) != boot {
        return None;
    }
    origin.parse().ok()
}

/// The origin this data directory's device reads its clock from: the one kept in
/// `dir/clock` if it was written on this boot of the host, else a new one from the wall
/// clock, written (and synced) there. Call once, before the device's first reading;
/// later calls and readings keep the first origin.
pub fn init(dir: &Path) -> std::io::Result<u64> {
    let path = dir.join("clock");
    let boot = boot_id();
    let text = std::fs::read_to_string(&path).ok();
    if let Some(o) = kept_origin(text.as_deref(), boot.as_deref()) {
        return Ok(*ORIGIN.get_or_init(|| o));
    }
    let o = *ORIGIN.get_or_init(|| wall_us().saturating_sub(boottime_us()));
    if let Some(id) = &boot {
        // A new device's data directory is made here, before its storage opens.
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join("clock.tmp");
        let mut f = std::fs::File::create(&tmp)?;
        std::io::Write::write_all(&mut f, format!("{id} {o}\n").as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
    }
    Ok(o)
}

/// The device's time now, in µs: monotonic, never moved by the wall clock.
pub fn now_us() -> u64 {
    let origin = *ORIGIN.get_or_init(|| wall_us().saturating_sub(boottime_us()));
    origin + boottime_us()
}

/// The device's clock as the core reads it.
#[derive(Debug, Default)]
pub struct Clock {
    last: u64,
}

impl Clock {
    /// Local time now (never behind an earlier reading).
    pub fn now(&mut self) -> tenure_core::Instant {
        self.last = self.last.max(now_us());
        tenure_core::Instant(self.last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // DESIGN §3, "Clocks": readings start near the wall clock and go on at the boot
    // clock's rate, never backwards; a device restarted on the same host boot reads on
    // from the origin its data directory keeps.
    #[test]
    fn readings_start_at_the_wall_clock_and_never_go_back() {
        let a = now_us();
        assert!(a.abs_diff(wall_us()) < 60_000_000, "{a} vs {}", wall_us());
        let mut c = Clock::default();
        let mut last = c.now();
        for _ in 0..1000 {
            let t = c.now();
            assert!(t >= last);
            last = t;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(c.now().0 >= a + 20_000);
    }

    #[test]
    fn a_restart_on_the_same_boot_keeps_the_origin() {
        let (this, other) = (Some("b-1"), Some("b-2"));
        // Kept an hour back by an earlier life on this boot: read on from it.
        assert_eq!(kept_origin(Some("b-1 3600\n"), this), Some(3600));
        // Written on another boot, unreadable, or no boot id: a new origin.
        assert_eq!(kept_origin(Some("b-1 3600\n"), other), None);
        assert_eq!(kept_origin(Some("b-1 x\n"), this), None);
        assert_eq!(kept_origin(Some("b-1 3600\n"), None), None);
        assert_eq!(kept_origin(None, this), None);
        // A device's data directory gets the record of this boot.
        // (a directory that does not exist yet, as a new device's)
        let dir = std::env::temp_dir().join(format!("tenure-clock-{}", std::process::id()));
        let origin = init(&dir.join("d1")).unwrap();
        let dir = dir.join("d1");
        if let Some(id) = boot_id() {
            let text = std::fs::read_to_string(dir.join("clock")).unwrap();
            assert_eq!(kept_origin(Some(&text), Some(&id)), Some(origin));
        }
        std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
    }
}
