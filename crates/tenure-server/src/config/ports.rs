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
    // Start somewhere different in each process; step through the span from there.
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0)
        ^ u64::from(std::process::id()).wrapping_mul(7919);
    for _ in 0..span {
        let port = floor + ((start + NEXT.fetch_add(1, Ordering::Relaxed)) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(std::io::ErrorKind::AddrNotAvailable.into())
}
