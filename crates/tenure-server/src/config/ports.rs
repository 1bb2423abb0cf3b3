//! Free local ports, for configurations and tests that pick their own.

/// Lowest port of the kernel's ephemeral range (the source ports of outgoing
/// connections), from `/proc/sys/net/ipv4/ip_local_port_range`; 32768 where unknown.
pub(super) fn ephemeral_floor() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

/// A port that is free on 127.0.0.1 now, for a local device to listen on, chosen below
/// the kernel's ephemeral range. A port from that range (what binding port 0 gives) can
/// be taken as the source port of any outgoing connection while its device is down, and
/// the device then cannot listen on it again when it restarts.
pub fn free_local_port() -> std::io::Result<u16> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let top = ephemeral_floor();
    let floor = 10_000.min(top / 2);
    let span = u64::from(top - floor);
    // Start somewhere different in each process, once; step through the span from there,
    // so one process never hands out the same port twice (a start drawn at every call let
    // two devices of one cluster get the same port, one as its peer port and the other as
    // its metrics port, and the loser failed to bind on the next restart).
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let start = *START.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos() as u64)
            .unwrap_or(0)
            ^ u64::from(std::process::id()).wrapping_mul(7919)
    });
    for _ in 0..span {
        let port = floor + ((start + NEXT.fetch_add(1, Ordering::Relaxed)) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(std::io::ErrorKind::AddrNotAvailable.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_process_never_gets_the_same_port_twice() {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..300 {
            let p = free_local_port().expect("a free port");
            assert!(p < ephemeral_floor(), "{p} is in the ephemeral range");
            assert!(seen.insert(p), "port {p} handed out twice");
        }
    }
}
