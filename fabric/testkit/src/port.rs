//! Ports for tests' servers.

use std::sync::atomic::{AtomicU32, Ordering};

/// A TCP port for a test's server to listen on.
///
/// Outside the kernel's ephemeral range (`ip_local_port_range`, 32768-60999 by
/// default), so that no outgoing connection can hold it when the server binds
/// it: neither one open beside it (a client's control connection, a tcp
/// provider's data connection) nor one of the thousands the suite has closed,
/// whose ports stay in TIME_WAIT for a minute and refuse a listener's bind even
/// with `SO_REUSEADDR`. (One CI run failed so: `fi_perf`'s server could not
/// bind a port in that range, and its client gave up "cannot reach the
/// server's control port".) A port found by binding port 0 has the same flaw:
/// it is an ephemeral port, free only until the next connect takes it.
///
/// Distinct within the process (tests run in parallel) for as many calls as
/// the stretch holds (over 4000 by default), and spread by the process id for
/// processes running side by side.
pub fn port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let (lo, hi) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|w| w.parse::<u32>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32768, 60999));
    // Above the range when there is room for 1000 ports there, else from 10000 up
    // to the range.
    let (start, span) = if 65535u32.saturating_sub(hi) >= 1000 || lo <= 11000 {
        (hi + 1, 65535u32.saturating_sub(hi))
    } else {
        (10000, lo - 10000)
    };
    assert!(span >= 100, "no room for test ports outside the ephemeral range {lo}-{hi}");
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    (start + (std::process::id().wrapping_mul(211).wrapping_add(n)) % span) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_and_outside_the_ephemeral_range() {
        let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
        let mut it = range.split_whitespace().filter_map(|w| w.parse::<u16>().ok());
        let (lo, hi) = (it.next().unwrap_or(32768), it.next().unwrap_or(60999));
        let ports: Vec<u16> = (0..1000).map(|_| port()).collect();
        for p in &ports {
            assert!(!(lo..=hi).contains(p), "port {p} inside the ephemeral range {lo}-{hi}");
            assert!(*p >= 10000, "port {p} among the low ports");
        }
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), ports.len(), "a port handed out twice");
        // A handed-out port can be listened on (nothing else here holds it).
        std::net::TcpListener::bind(("0.0.0.0", port())).expect("bind a handed-out port");
    }
}
