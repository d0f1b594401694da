//! Listen ports for nodes that restart on the same endpoints (shared by the mesh tests and
//! the root crate's process tests).

use std::net::TcpListener;

/// A free listen port BELOW the kernel's ephemeral range. Ports from the ephemeral range (what
/// binding port 0 returns) are unsafe for a node that restarts: while it is down, its peer keeps
/// dialling the port, and a dial whose kernel-chosen source port equals it connects to itself
/// (TCP simultaneous open) and holds the port, so the restarted node cannot bind it.
pub fn free_port() -> u16 {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // Chosen once per process: the walk below then never hands out one port twice within a
    // process (7919 is prime and does not divide the range), so two nodes of one test (or of
    // two tests running side by side) never get the same port before either has bound it. A
    // seed read per call made that a random collision: about one setup in a hundred started a
    // node whose port another node also took, which then died at bind and left its peer "not
    // ready".
    static SEED: OnceLock<u32> = OnceLock::new();
    let eph_lo: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    let (lo, hi) = (
        eph_lo.saturating_sub(12_000).max(1024),
        eph_lo.max(2048) - 1,
    );
    // Spread concurrent test processes over the range: start from the pid and the clock.
    let seed = *SEED.get_or_init(|| {
        std::process::id()
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
    });
    let span = hi - lo;
    let stride = if span % 7919 == 0 { 7907 } else { 7919 };
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = lo + (seed % span + (n % span) * stride % span) % span;
        if TcpListener::bind(("127.0.0.1", port as u16)).is_ok() {
            return port as u16;
        }
    }
    panic!("no free port in {lo}..{hi}");
}
