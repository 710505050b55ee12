//! Helpers shared by the two-process tests of the tools.

use std::process::{Child, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Wait for a child with a watchdog, killing it on time-out.
pub fn wait_output(mut child: Child, limit: Duration) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "timed out after {limit:?}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A control port for one two-process run.
///
/// Outside the kernel's ephemeral range (`ip_local_port_range`, 32768-60999 by
/// default), so that no outgoing connection of a test running beside it (a
/// client's control connection, a tcp provider's data connection) can hold it
/// when the server binds it: that made a server fail with `EADDRINUSE` and its
/// client give up "cannot reach the server's control port". Distinct within
/// the process (tests run in parallel) for as many runs as the span holds, and
/// spread by the process id for processes running side by side.
pub fn port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let (lo, hi) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|w| w.parse::<u32>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32768, 60999));
    // The larger of the two free stretches: above the range, or from 10000 below it.
    let (start, span) = if 65535u32.saturating_sub(hi) >= lo.saturating_sub(10000) {
        (hi + 1, 65535u32.saturating_sub(hi))
    } else {
        (10000, lo - 10000)
    };
    assert!(span >= 100, "no room for test ports outside the ephemeral range {lo}-{hi}");
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    (start + (std::process::id().wrapping_mul(211).wrapping_add(n)) % span) as u16
}

/// Write both sides' output to the test's captured output, which the harness
/// shows only when the test fails: a client's failure often has its cause on
/// the server's side.
pub fn show(server: &Output, client: &Output) {
    for (who, out) in [("server", server), ("client", client)] {
        println!(
            "--- {who}: {:?}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
