//! The udp provider's RDM endpoints across a lossy network: two processes exchange
//! 100 000 tagged messages through a relay that drops, reorders and duplicates
//! datagrams, and every message arrives exactly once, intact, in the right receive,
//! with its tag and source address; every send completes successfully.
//!
//! # Why a relay
//!
//! The reliability protocol of the shared layer (`fabric_util::reliable`: per-peer
//! sequence numbers, cumulative and selective acknowledgements, retransmission,
//! in-order exactly-once delivery, segmentation, flow control) only shows that it
//! works when datagrams really go missing, arrive late or arrive twice. Loopback
//! loses nothing, and this kernel has no `netem` (and tests cannot count on
//! `CAP_NET_ADMIN` anyway), so a relay stands in for the lossy network: a thread of
//! the test process with two plain [`UdpSocket`]s on 127.0.0.1,
//!
//! ```text
//!   sender ep  ──▶ front ═══ relay ═══ back ──▶ receiver ep
//!   sender ep  ◀── front ═══ relay ═══ back ◀── receiver ep
//! ```
//!
//! The sender's address vector holds the relay's `front` address as the receiver's;
//! the receiver's holds the relay's `back` address (which is where the sender's
//! datagrams come from, as far as the receiver can tell), so the source of every
//! receive completion can be checked against that handle. The relay learns the
//! sender's address from the first datagram reaching `front`. In each direction it
//! drops each datagram with probability `drop`, holds one back with probability
//! `reorder` and releases it after 1 to 3 later ones (or when traffic pauses), and
//! sends a delayed second copy with probability `duplicate`, from a seeded PRNG
//! (splitmix64; the seed is printed, and `FABRIC_UDP_RELAY_SEED` replaces it;
//! `FABRIC_UDP_RELAY_RATES=<drop>,<reorder>,<duplicate>` replaces the rates). It
//! counts what it did; the test fails if it dropped or reordered nothing (a relay
//! that did nothing proves nothing).
//!
//! # The processes
//!
//! The test binary runs itself again for each child (as `shm_processes.rs` does):
//! [`std::env::current_exe`] with `--exact child_entry --nocapture
//! --test-threads=1`, the role in [`ROLE_ENV`]: `receiver:<count>` or
//! `sender:<count>`. Children print protocol lines `@@KEY value` on standard output
//! (`@@NAME <ip:port>` of their endpoint, `@@READY`, `@@SENT ...`, `@@DONE ...`);
//! the parent writes commands on their standard input (`PEER <ip:port>`, `EXIT`).
//! A child exits when its standard input closes and after [`CHILD_LIMIT`]; the
//! parent kills every child it started when the test ends or fails, and fails the
//! test instead of hanging after [`TEST_LIMIT`]. Set `FI_LOG_LEVEL=debug` (and
//! `FI_LOG_PROV=udp`) in the environment to get the children's provider logs in a
//! failure's report.
//!
//! # What is asserted
//!
//! - the sender: every send completes once, successfully, with the send flags;
//! - the receiver (receives posted for exact tags, [`RECV_WINDOW`] ahead, fewer than
//!   the sender's [`SEND_WINDOW`], so some messages arrive before their receive):
//!   every message completes its own receive once (a bitmap over the indices), with
//!   tag = index, the message's length, every byte of its pattern, the source handle
//!   of the relay's `back` address, the receive flags; after the last one, a
//!   wildcard receive stays empty ([`QUIET`]): no message was delivered twice;
//! - both children exit with status 0;
//! - the relay dropped and reordered datagrams (and duplicated some), at roughly the
//!   configured rates, and the sender it learned is the sender's endpoint.
//!
//! Sizes: mostly 0..=2 KiB, 4 % 8..64 KiB, 0.05 % 64 KiB..1 MiB, and a few fixed
//! edge sizes (0, 1 MiB, 64 KiB ± 1): messages larger than one datagram, so
//! segmentation and reassembly under loss are exercised.

#![cfg(feature = "udp")]

mod children;

use children::{say, Commands, Proc};
use fabric::*;
use fabric_testkit::{mix, Rng};
use std::collections::VecDeque;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// The environment variable that makes [`child_entry`] a child, and says which:
/// `receiver:<count>` or `sender:<count>`.
const ROLE_ENV: &str = "FABRIC_UDP_RELAY_ROLE";
/// The environment variable that replaces the relay's PRNG seed.
const SEED_ENV: &str = "FABRIC_UDP_RELAY_SEED";
/// The environment variable that replaces the transfer tests' rates:
/// `<drop>,<reorder>,<duplicate>` (probabilities, e.g. `0.3,0.1,0.05`).
const RATES_ENV: &str = "FABRIC_UDP_RELAY_RATES";
/// How long one test may take before it fails as hung (children killed).
const TEST_LIMIT: Duration = Duration::from_secs(240);
/// How long a child lives at most, whatever happens (its own watchdog).
const CHILD_LIMIT: Duration = Duration::from_secs(270);
/// How long a child may see no completion at all before it calls the transfer
/// stalled (and says what it is waiting for).
const STALL_LIMIT: Duration = Duration::from_secs(60);
/// How long the receiver keeps a wildcard receive posted after the last message,
/// driving progress, to see that nothing arrives twice.
const QUIET: Duration = Duration::from_secs(1);
/// Sends the sender keeps posted at most.
const SEND_WINDOW: usize = 256;
/// Receives the receiver keeps posted ahead (fewer than [`SEND_WINDOW`]: some
/// messages arrive before their receive is posted).
const RECV_WINDOW: usize = 192;
/// Extra room in every receive buffer, so that a message longer than expected shows.
const SLACK: usize = 64;
/// The largest message.
const MAX_SIZE: usize = 1 << 20;
/// Context of the wildcard receive of the duplicate check.
const WILDCARD_CTX: u64 = u64::MAX - 7;

// ---------------------------------------------------------------------------------------
// Messages
// ---------------------------------------------------------------------------------------

/// Sizes of the first messages: edges (empty, the largest, around 64 KiB, which is
/// about one loopback datagram).
const EDGE_SIZES: [usize; 6] = [0, MAX_SIZE, (64 << 10) - 1, 64 << 10, (64 << 10) + 1, 2048];

/// The size of message `i`: see the module documentation.
fn msg_size(i: u64) -> usize {
    if let Some(&s) = EDGE_SIZES.get(i as usize) {
        return s;
    }
    let r = mix(i ^ 0x0051_57E5);
    let class = r % 10_000;
    let x = (r >> 16) as usize;
    if class < 5 {
        (64 << 10) + x % (MAX_SIZE - (64 << 10) + 1)
    } else if class < 405 {
        (8 << 10) + x % ((56 << 10) + 1)
    } else {
        x % 2049
    }
}

/// The payload of message `i`: 8-byte words, word `j` a function of `i` and `j` (a
/// piece moved by any offset or taken from another message shows), cut to the
/// message's size.
fn pattern(i: u64) -> Vec<u8> {
    let len = msg_size(i);
    let base = mix(i.wrapping_mul(0xA24B_AED4_963E_E407));
    let mut v = vec![0u8; len.next_multiple_of(8)];
    for (j, w) in v.chunks_exact_mut(8).enumerate() {
        let x = (base ^ (j as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93)).rotate_left((j % 61) as u32);
        w.copy_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Compare received bytes with message `i`'s; on a difference, say where.
fn check_bytes(got: &[u8], i: u64) -> std::result::Result<(), String> {
    let want = pattern(i);
    if got.len() != want.len() {
        return Err(format!("message {i}: {} bytes, expected {}", got.len(), want.len()));
    }
    if got == &want[..] {
        return Ok(());
    }
    let k = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
    let same_as = (0..i + 1000).find(|&o| o != i && msg_size(o) >= got.len() && pattern(o)[..got.len()] == *got);
    Err(format!(
        "message {i} ({} bytes): first difference at byte {k}: got {:#04x}, expected {:#04x}{}",
        want.len(),
        got[k],
        want[k],
        same_as.map(|o| format!(" (the bytes are those of message {o})")).unwrap_or_default()
    ))
}

/// Total bytes of messages `0..count`.
fn total_bytes(count: u64) -> u64 {
    (0..count).map(|i| msg_size(i) as u64).sum()
}

// ---------------------------------------------------------------------------------------
// The relay
// ---------------------------------------------------------------------------------------

/// How the relay mistreats datagrams (probabilities, each direction alike).
#[derive(Debug, Clone, Copy)]
struct Impairment {
    drop: f64,
    reorder: f64,
    duplicate: f64,
}

/// What the relay did in one direction.
#[derive(Default)]
struct Counters {
    /// Datagrams received from the expected peer.
    received: AtomicU64,
    /// Bytes in them.
    bytes: AtomicU64,
    /// Datagrams sent on (copies included).
    forwarded: AtomicU64,
    dropped: AtomicU64,
    /// Datagrams held back and released after later ones.
    reordered: AtomicU64,
    /// Second copies sent.
    duplicated: AtomicU64,
    /// Datagrams from an unexpected address, or with nowhere to go yet (ignored).
    strangers: AtomicU64,
    /// Failed sends and receives (other than time-outs).
    errors: AtomicU64,
}

/// A snapshot of [`Counters`].
#[derive(Debug, Clone, Copy, Default)]
struct Count {
    received: u64,
    bytes: u64,
    forwarded: u64,
    dropped: u64,
    reordered: u64,
    duplicated: u64,
    strangers: u64,
    errors: u64,
}

impl Counters {
    fn get(&self) -> Count {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Count {
            received: g(&self.received),
            bytes: g(&self.bytes),
            forwarded: g(&self.forwarded),
            dropped: g(&self.dropped),
            reordered: g(&self.reordered),
            duplicated: g(&self.duplicated),
            strangers: g(&self.strangers),
            errors: g(&self.errors),
        }
    }
}

fn bump(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

/// The relay: its two sockets' addresses, its threads (one per direction), what they
/// count.
struct Relay {
    front: SocketAddr,
    back: SocketAddr,
    /// The sender's address, learned from its first datagram.
    sender: Arc<OnceLock<SocketAddr>>,
    /// Sender to receiver, receiver to sender.
    counts: [Arc<Counters>; 2],
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<()>>,
}

/// A relay socket on 127.0.0.1 with a large receive buffer (what the kernel allows)
/// and a short read time-out (held datagrams are released when traffic pauses).
fn relay_socket() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind a relay socket");
    for opt in [libc::SO_RCVBUF, libc::SO_SNDBUF] {
        let val: libc::c_int = 8 << 20;
        // SAFETY: `val` is a valid c_int that outlives the call, and its size is given.
        let r = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                &val as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(r, 0, "setsockopt on a relay socket: {}", std::io::Error::last_os_error());
    }
    s.set_read_timeout(Some(Duration::from_millis(2))).expect("read time-out");
    s
}

/// Where one direction's datagrams go.
#[derive(Clone)]
enum Dest {
    /// Datagrams come from the sender (learned from the first one) and go to the
    /// receiver.
    ToReceiver { receiver: SocketAddr, sender: Arc<OnceLock<SocketAddr>> },
    /// Datagrams come from the receiver and go to the sender (once known).
    ToSender { receiver: SocketAddr, sender: Arc<OnceLock<SocketAddr>> },
}

impl Dest {
    /// Where a datagram from `src` goes, if it comes from the right peer.
    fn route(&self, src: SocketAddr) -> Option<SocketAddr> {
        match self {
            Dest::ToReceiver { receiver, sender } => (*sender.get_or_init(|| src) == src).then_some(*receiver),
            Dest::ToSender { receiver, sender } => {
                if src == *receiver {
                    sender.get().copied()
                } else {
                    None
                }
            }
        }
    }
}

/// One direction of the relay: read from `from`, mistreat, write to `to`.
fn relay_direction(
    from: UdpSocket,
    to: UdpSocket,
    dest: Dest,
    imp: Impairment,
    seed: u64,
    counts: Arc<Counters>,
    stop: Arc<AtomicBool>,
) {
    let mut rng = Rng::new(seed);
    let mut buf = vec![0u8; 65536];
    // Held datagrams: bytes, destination, how many later datagrams to let pass first.
    let mut held: VecDeque<(Vec<u8>, SocketAddr, u32)> = VecDeque::new();
    let send = |d: &[u8], to_addr: SocketAddr| match to.send_to(d, to_addr) {
        Ok(_) => bump(&counts.forwarded),
        Err(_) => bump(&counts.errors),
    };
    while !stop.load(Ordering::Relaxed) {
        match from.recv_from(&mut buf) {
            Ok((n, src)) => {
                let Some(to_addr) = dest.route(src) else {
                    bump(&counts.strangers);
                    continue;
                };
                bump(&counts.received);
                counts.bytes.fetch_add(n as u64, Ordering::Relaxed);
                let d = &buf[..n];
                if rng.chance(imp.duplicate) {
                    bump(&counts.duplicated);
                    held.push_back((d.to_vec(), to_addr, rng.range(1..=4) as u32));
                }
                if rng.chance(imp.drop) {
                    bump(&counts.dropped);
                    continue;
                }
                if rng.chance(imp.reorder) {
                    bump(&counts.reordered);
                    held.push_back((d.to_vec(), to_addr, rng.range(1..=3) as u32));
                    continue;
                }
                send(d, to_addr);
                // One more datagram passed every held one: release those whose turn
                // came (after this one: they arrive late).
                for h in held.iter_mut() {
                    h.2 = h.2.saturating_sub(1);
                }
                while let Some(i) = held.iter().position(|h| h.2 == 0) {
                    let (d, a, _) = held.remove(i).expect("in range");
                    send(&d, a);
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                // Traffic paused: release everything held.
                for (d, a, _) in held.drain(..) {
                    send(&d, a);
                }
            }
            Err(_) => {
                bump(&counts.errors);
                thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

impl Relay {
    /// Start relaying to `receiver`.
    fn start(receiver: SocketAddr, imp: Impairment, seed: u64) -> Relay {
        let front = relay_socket();
        let back = relay_socket();
        let (front_addr, back_addr) = (front.local_addr().expect("addr"), back.local_addr().expect("addr"));
        let sender = Arc::new(OnceLock::new());
        let counts = [Arc::new(Counters::default()), Arc::new(Counters::default())];
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let plan = [
            (
                front.try_clone().expect("clone"),
                back.try_clone().expect("clone"),
                Dest::ToReceiver { receiver, sender: Arc::clone(&sender) },
            ),
            (back, front, Dest::ToSender { receiver, sender: Arc::clone(&sender) }),
        ];
        for (k, (from, to, dest)) in plan.into_iter().enumerate() {
            let (c, s) = (Arc::clone(&counts[k]), Arc::clone(&stop));
            let dir_seed = mix(seed ^ (k as u64 + 1));
            threads.push(
                thread::Builder::new()
                    .name(format!("relay-{k}"))
                    .spawn(move || relay_direction(from, to, dest, imp, dir_seed, c, s))
                    .expect("spawn a relay thread"),
            );
        }
        Relay { front: front_addr, back: back_addr, sender, counts, stop, threads }
    }

    fn counts(&self) -> [Count; 2] {
        [self.counts[0].get(), self.counts[1].get()]
    }

    /// Stop the threads; the final counts.
    fn stop(mut self) -> [Count; 2] {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            t.join().expect("a relay thread panicked");
        }
        self.counts()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

// ---------------------------------------------------------------------------------------
// Parent side: the children
// ---------------------------------------------------------------------------------------

/// Wait for one protocol line from each child, `keys[i]` from `procs[i]`, in any
/// order; fails as soon as one exits without it, or at `deadline`. `tick` runs
/// every second or so (progress reports). The values, in order.
#[track_caller]
fn expect_each(procs: &mut [&mut Proc], keys: &[&str], deadline: Instant, tick: &mut dyn FnMut()) -> Vec<String> {
    let mut got: Vec<Option<String>> = vec![None; procs.len()];
    let mut last_tick = Instant::now();
    while got.iter().any(Option::is_none) {
        for (i, p) in procs.iter_mut().enumerate() {
            if got[i].is_none() {
                got[i] = p.try_expect(keys[i]);
                if got[i].is_none() && p.exited() {
                    thread::sleep(Duration::from_millis(50));
                    got[i] = p.try_expect(keys[i]);
                    if got[i].is_none() {
                        p.fail(&format!("exited before its {} line", keys[i]));
                    }
                }
            }
        }
        if got.iter().any(Option::is_none) {
            if Instant::now() > deadline {
                let i = got.iter().position(Option::is_none).expect("one missing");
                procs[i].fail(&format!("watchdog: no {} line within {TEST_LIMIT:?}", keys[i]));
            }
            if last_tick.elapsed() > Duration::from_secs(5) {
                tick();
                last_tick = Instant::now();
            }
            thread::sleep(Duration::from_millis(5));
        }
    }
    got.into_iter().map(|v| v.expect("all there")).collect()
}

/// Tests run one at a time (2 cores: two transfers at once would only slow both).
static SERIAL: Mutex<()> = Mutex::new(());

/// The relay's seed: [`SEED_ENV`] if set, else `default`.
fn seed_or(default: u64) -> u64 {
    match std::env::var(SEED_ENV) {
        Ok(s) => s.trim().parse().unwrap_or_else(|_| panic!("{SEED_ENV}={s}: not a number")),
        Err(_) => default,
    }
}

/// The rates: [`RATES_ENV`] if set, else `default`.
fn rates_or(default: Impairment) -> Impairment {
    let Ok(s) = std::env::var(RATES_ENV) else { return default };
    let v: Vec<f64> = s.split(',').map(|x| x.trim().parse().unwrap_or_else(|_| panic!("{RATES_ENV}={s}"))).collect();
    assert!(v.len() == 3 && v.iter().all(|p| (0.0..1.0).contains(p)), "{RATES_ENV}={s}: three probabilities");
    Impairment { drop: v[0], reorder: v[1], duplicate: v[2] }
}

/// One run: `count` messages from a sender process to a receiver process through a
/// relay that mistreats datagrams as `imp` says.
fn relay_run(count: u64, imp: Impairment, default_seed: u64) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let start = Instant::now();
    let deadline = start + TEST_LIMIT;
    let seed = seed_or(default_seed);
    let imp = rates_or(imp);
    println!(
        "{count} messages, {} MB, through a relay dropping {:.0} %, reordering {:.0} %, duplicating {:.0} % (seed {seed})",
        total_bytes(count) / 1_000_000,
        imp.drop * 100.0,
        imp.reorder * 100.0,
        imp.duplicate * 100.0
    );
    let mut receiver = Proc::spawn("receiver", ROLE_ENV, &format!("receiver:{count}"), |_| {});
    let mut sender = Proc::spawn("sender", ROLE_ENV, &format!("sender:{count}"), |_| {});
    let rname = receiver.expect("NAME", deadline);
    let sname = sender.expect("NAME", deadline);
    let raddr: SocketAddr = rname.parse().unwrap_or_else(|_| panic!("receiver's name {rname:?}"));
    let saddr: SocketAddr = sname.parse().unwrap_or_else(|_| panic!("sender's name {sname:?}"));
    let relay = Relay::start(raddr, imp, seed);
    println!("receiver {raddr}, sender {saddr}, relay front {} back {}", relay.front, relay.back);
    receiver.send(&format!("PEER {}", relay.back));
    receiver.expect("READY", deadline);
    sender.send(&format!("PEER {}", relay.front));
    let mut tick = || {
        let [f, b] = relay.counts();
        println!(
            "  {:>5.1} s: relay forwarded {} datagrams to the receiver ({} dropped), {} to the sender ({} dropped)",
            start.elapsed().as_secs_f64(),
            f.forwarded,
            f.dropped,
            b.forwarded,
            b.dropped
        );
    };
    let v = expect_each(&mut [&mut sender, &mut receiver], &["SENT", "DONE"], deadline, &mut tick);
    let elapsed = start.elapsed();
    println!("sender: {}\nreceiver: {}", v[0], v[1]);
    receiver.send("EXIT");
    sender.send("EXIT");
    let rlog = receiver.finish(deadline);
    let slog = sender.finish(deadline);
    let learned = relay.sender.get().copied();
    let counts = relay.stop();
    for (what, c) in [("sender -> receiver", counts[0]), ("receiver -> sender", counts[1])] {
        println!(
            "relay {what}: {} datagrams ({} MB) received, {} forwarded, {} dropped ({:.2} %), {} reordered, {} duplicated, {} from strangers, {} errors",
            c.received,
            c.bytes / 1_000_000,
            c.forwarded,
            c.dropped,
            100.0 * c.dropped as f64 / c.received.max(1) as f64,
            c.reordered,
            c.duplicated,
            c.strangers,
            c.errors
        );
    }
    println!("{count} messages delivered in {elapsed:?}");
    let warn = |log: &str| {
        log.lines().filter(|l| l.contains("warn") || l.contains("WARN")).take(20).collect::<Vec<_>>().join("\n")
    };
    let (rw, sw) = (warn(&rlog), warn(&slog));
    if !rw.is_empty() || !sw.is_empty() {
        println!("receiver warnings:\n{rw}\nsender warnings:\n{sw}");
    }

    assert_eq!(learned, Some(saddr), "the relay's sender is the sender's endpoint");
    let [f, b] = counts;
    assert!(f.bytes > total_bytes(count), "fewer bytes than the messages hold went to the receiver: {f:?}");
    assert!(b.received > 0, "the receiver never answered: {b:?}");
    for (what, c) in [("sender -> receiver", f), ("receiver -> sender", b)] {
        assert_eq!(c.strangers, 0, "{what}: datagrams from unexpected addresses: {c:?}");
        assert_eq!(c.errors, 0, "{what}: relay socket errors: {c:?}");
    }
    // The relay really did something (a relay that did nothing proves nothing), and
    // at about the configured rates (a loose band: not a statistics test).
    if imp.drop > 0.0 && imp.reorder > 0.0 {
        assert!(f.dropped > 0 && f.reordered > 0, "the relay dropped or reordered nothing: {f:?}");
    }
    if imp.duplicate > 0.0 {
        assert!(f.duplicated > 0, "the relay duplicated nothing: {f:?}");
    }
    if f.received >= 5000 && imp.drop > 0.0 {
        let rate = f.dropped as f64 / f.received as f64;
        assert!(
            rate > imp.drop / 2.0 && rate < imp.drop * 2.0,
            "drop rate {rate:.3} far from the configured {}: {f:?}",
            imp.drop
        );
    }
}

/// 100 000 messages through 5 % loss, 5 % reordering and 1 % duplication each way.
#[test]
fn rdm_100k_messages_through_5pct_loss_and_reordering() {
    relay_run(100_000, Impairment { drop: 0.05, reorder: 0.05, duplicate: 0.01 }, 0x05_dead_beef);
}

/// 10 000 messages through 20 % loss, 5 % reordering and 1 % duplication each way.
#[test]
fn rdm_10k_messages_through_20pct_loss() {
    relay_run(10_000, Impairment { drop: 0.20, reorder: 0.05, duplicate: 0.01 }, 0x20_feed_face);
}

/// The relay itself, with plain sockets on both ends (no provider): datagrams reach
/// the receiver from the relay's `back` address, answers reach the sender from
/// `front`; some are dropped, some arrive after later ones, some twice; every
/// datagram the relay forwarded arrives (bursts of 10, so the kernel drops none),
/// and its bytes are intact. So a failure of the transfer tests is not the relay's.
#[test]
fn relay_drops_reorders_and_duplicates() {
    const N: u32 = 5000;
    let imp = Impairment { drop: 0.1, reorder: 0.1, duplicate: 0.05 };
    let sender = relay_socket();
    let receiver = relay_socket();
    let relay = Relay::start(receiver.local_addr().expect("addr"), imp, seed_or(42));
    let (front, back) = (relay.front, relay.back);
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = Arc::clone(&stop);
    // The receiver: records sequence numbers in arrival order, answers each.
    let rx = thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        while !stop2.load(Ordering::Relaxed) {
            match receiver.recv_from(&mut buf) {
                Ok((n, src)) => {
                    assert_eq!(src, back, "datagrams reach the receiver from the relay's back address");
                    assert_eq!(n, 1000, "length");
                    let seq = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes"));
                    assert!(buf[4..n].iter().all(|&b| b == seq as u8), "datagram {seq}: bytes");
                    got.push(seq);
                    receiver.send_to(&buf[..4], src).expect("answer");
                }
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(e) => panic!("receiver: {e}"),
            }
        }
        got
    });
    let mut answers = 0u64;
    let mut buf = [0u8; 2048];
    let mut drain = |answers: &mut u64| {
        while let Ok((n, src)) = sender.recv_from(&mut buf) {
            assert_eq!(src, front, "answers reach the sender from the relay's front address");
            assert_eq!(n, 4);
            *answers += 1;
        }
    };
    sender.set_nonblocking(true).expect("non-blocking");
    for seq in 0..N {
        let mut d = vec![seq as u8; 1000];
        d[..4].copy_from_slice(&seq.to_le_bytes());
        sender.send_to(&d, front).expect("send to the relay");
        if seq % 10 == 9 {
            drain(&mut answers);
            thread::sleep(Duration::from_micros(300));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = (u64::MAX, 0);
    // Until nothing moves any more.
    while Instant::now() < deadline {
        drain(&mut answers);
        let c = relay.counts();
        let now = (c[0].forwarded + c[1].forwarded, answers);
        if now == last {
            break;
        }
        last = now;
        thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    let got = rx.join().expect("the receiver thread");
    assert_eq!(relay.sender.get().copied(), Some(sender.local_addr().expect("addr")), "the sender, as learned");
    let [f, b] = relay.stop();
    println!("relay self-test: to the receiver {f:?}\nto the sender {b:?}");
    assert_eq!(f.received, u64::from(N));
    assert_eq!(got.len() as u64, f.forwarded, "every datagram forwarded to the receiver arrives");
    assert_eq!(b.received, f.forwarded, "the receiver answered each");
    assert_eq!(answers, b.forwarded, "every answer forwarded arrives");
    assert_eq!(f.forwarded, f.received - f.dropped + f.duplicated, "forwarded = received - dropped + copies");
    let mut seen = Bitmap::new(u64::from(N));
    let dups = got.iter().filter(|&&s| !seen.mark(u64::from(s))).count() as u64;
    let missing = (0..u64::from(N)).filter(|&s| !seen.has(s)).count() as u64;
    let late = got.windows(2).filter(|w| w[0] > w[1]).count();
    println!("received {} datagrams: {missing} missing, {dups} twice, {late} after a later one", got.len());
    assert!(missing > 0 && missing <= f.dropped, "missing {missing}, dropped {}", f.dropped);
    assert!(dups > 0 && dups <= f.duplicated, "twice {dups}, duplicated {}", f.duplicated);
    assert!(late > 0, "nothing arrived out of order");
    for (c, p) in [(f.dropped, imp.drop), (f.reordered, imp.reorder), (f.duplicated, imp.duplicate)] {
        let rate = c as f64 / f64::from(N);
        assert!(rate > p / 2.0 && rate < p * 2.0, "rate {rate:.3}, configured {p}");
    }
}

// ---------------------------------------------------------------------------------------
// Child side
// ---------------------------------------------------------------------------------------

impl Commands {
    /// The `PEER` command: the address.
    #[track_caller]
    fn peer(&self, deadline: Instant) -> SocketAddr {
        let line = self.next(deadline);
        let rest = line.strip_prefix("PEER ").unwrap_or_else(|| panic!("expected PEER, got {line:?}"));
        rest.trim().parse().unwrap_or_else(|_| panic!("PEER {rest:?}: not a socket address"))
    }

    /// Wait for `EXIT`, making progress on `cq` meanwhile: nothing may complete.
    #[track_caller]
    fn wait_exit(&self, cq: &CompletionQueue, deadline: Instant, what: &str) {
        let mut spins = 0;
        loop {
            match self.try_next().as_deref() {
                Some("EXIT") => return,
                Some(other) => panic!("expected EXIT, got {other:?}"),
                None => {}
            }
            if let Some(r) = poll_cq(cq) {
                panic!("{what}: an unexpected completion while waiting to exit: {}", describe(&r));
            }
            assert!(Instant::now() < deadline, "no EXIT from the parent in time");
            pause(&mut spins);
        }
    }
}

/// The udp provider's RDM entry on 127.0.0.1 (an ephemeral port).
fn udp_info() -> Info {
    let hints = Hints::new()
        .provider("udp")
        .ep_type(EpType::Rdm)
        .caps(Caps::MSG | Caps::TAGGED | Caps::SOURCE)
        .node("127.0.0.1")
        .source(true);
    let v = getinfo(&hints).unwrap_or_else(|e| panic!("getinfo for udp RDM on 127.0.0.1: {e}"));
    v.into_iter()
        .find(|i| i.src_addr.as_ref().and_then(Address::sockaddr).is_some_and(|s| s.ip().is_loopback()))
        .expect("udp offers an RDM entry on 127.0.0.1")
}

/// One enabled endpoint with its own fabric, domain, completion queue and address
/// vector. Fields drop in order: the endpoint first.
struct Node {
    ep: Endpoint,
    cq: CompletionQueue,
    av: AddressVector,
    _domain: Domain,
    _fabric: Fabric,
}

impl Node {
    fn open() -> Node {
        let info = udp_info();
        let fabric = Fabric::open(&info).expect("open fabric");
        let domain = fabric.domain(&info).expect("open domain");
        let cq = domain.cq(CqAttr { size: 4096, format: CqFormat::Tagged, ..Default::default() }).expect("open cq");
        let av = domain.av(AvAttr::default()).expect("open av");
        let ep = domain.endpoint(&info).unwrap_or_else(|e| panic!("open a udp RDM endpoint: {e}"));
        ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).expect("bind cq");
        ep.bind_av(&av).expect("bind av");
        ep.enable().expect("enable");
        Node { ep, cq, av, _domain: domain, _fabric: fabric }
    }

    /// The endpoint's socket address.
    fn addr(&self) -> SocketAddr {
        let a = self.ep.name().expect("endpoint name");
        let s = a.sockaddr().unwrap_or_else(|| panic!("a udp endpoint named by a non-socket address {a:?}"));
        assert!(s.ip().is_loopback() && s.port() != 0, "the endpoint's name {s}: bound on 127.0.0.1");
        s
    }
}

/// An operation's outcome as read from a completion queue.
type Res = std::result::Result<Completion, CompletionError>;

/// Read one outcome from `cq`, if any (making progress).
fn poll_cq(cq: &CompletionQueue) -> Option<Res> {
    cq.next().unwrap_or_else(|e| panic!("cq read failed: {e}"))
}

fn describe(r: &Res) -> String {
    match r {
        Ok(c) => format!(
            "success: context {:#x}, tag {:#x}, len {}, flags {:?}, src {:?}",
            c.context, c.tag, c.len, c.flags, c.src
        ),
        Err(e) => format!(
            "error {} (prov_errno {}): context {:#x}, tag {:#x}, len {}, olen {}, flags {:?}, src {:?}",
            e.err, e.prov_errno, e.context, e.tag, e.len, e.olen, e.flags, e.src
        ),
    }
}

/// Yield, and now and then sleep a little: polling that does not take a core from
/// the other processes (2 cores: sender, receiver and relay share them).
fn pause(spins: &mut u32) {
    *spins += 1;
    if *spins % 16 == 0 {
        thread::sleep(Duration::from_micros(50));
    } else {
        thread::yield_now();
    }
}

/// The entry point of the child processes (see the module documentation). In a
/// normal run [`ROLE_ENV`] is not set and this returns at once.
#[test]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE_ENV) else { return };
    thread::spawn(|| {
        thread::sleep(CHILD_LIMIT);
        eprintln!("child {}: watchdog: still running after {CHILD_LIMIT:?}: exiting", std::process::id());
        std::process::exit(4);
    });
    let (kind, count) = role.split_once(':').unwrap_or_else(|| panic!("bad role {role}"));
    let count: u64 = count.parse().unwrap_or_else(|_| panic!("bad role {role}"));
    match kind {
        "receiver" => receiver_child(count),
        "sender" => sender_child(count),
        _ => panic!("unknown role {role}"),
    }
}

/// A set of indices `0..n`, each marked at most once.
struct Bitmap(Vec<u64>);

impl Bitmap {
    fn new(n: u64) -> Bitmap {
        Bitmap(vec![0; n.div_ceil(64) as usize])
    }

    /// Mark `i`; false if it was marked already.
    fn mark(&mut self, i: u64) -> bool {
        let (w, b) = ((i / 64) as usize, 1u64 << (i % 64));
        let fresh = self.0[w] & b == 0;
        self.0[w] |= b;
        fresh
    }

    fn has(&self, i: u64) -> bool {
        self.0[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    /// The first few unmarked indices below `n`.
    fn missing(&self, n: u64, k: usize) -> Vec<u64> {
        (0..n).filter(|&i| !self.has(i)).take(k).collect()
    }
}

/// The receiver: opens its endpoint, says `NAME`, takes the relay's `back` address
/// (`PEER`), keeps [`RECV_WINDOW`] receives posted for exact tags, and checks every
/// completion (see the module documentation); then the duplicate check, `DONE`, and
/// it waits for `EXIT`.
fn receiver_child(count: u64) {
    let deadline = Instant::now() + TEST_LIMIT;
    let node = Node::open();
    let cmds = Commands::start();
    say("NAME", &node.addr().to_string());
    let back = cmds.peer(deadline);
    let src = node.av.insert_one(&Address::Sockaddr(back)).expect("av insert");
    let post = |i: u64| {
        let mut buf = Buf::new(msg_size(i) + SLACK);
        let mut spins = 0;
        loop {
            match node.ep.trecv(buf, FiAddr::UNSPEC, i, 0, i) {
                Ok(()) => return,
                // The receive queue is full: cannot happen with fewer posted than
                // the queue holds, but retrying is what an application does.
                Err(e) if e.error == Error::Again => {
                    buf = e.buffers.into_buf().expect("the buffer comes back");
                    assert!(Instant::now() < deadline, "posting receive {i}: FI_EAGAIN until the deadline");
                    pause(&mut spins);
                }
                Err(e) => panic!("posting receive {i} failed: {}", e.error),
            }
        }
    };
    let mut next_post = 0u64;
    while next_post < count.min(RECV_WINDOW as u64) {
        post(next_post);
        next_post += 1;
    }
    say("READY", "");
    let start = Instant::now();
    let mut seen = Bitmap::new(count);
    let (mut received, mut bytes) = (0u64, 0u64);
    let mut last = Instant::now();
    let mut last_report = Instant::now();
    let mut out_of_order = 0u64;
    let mut prev: Option<u64> = None;
    let mut spins = 0;
    while received < count {
        let Some(r) = poll_cq(&node.cq) else {
            if last.elapsed() > STALL_LIMIT || Instant::now() > deadline {
                panic!(
                    "receiver stalled: nothing completed for {:?}; {received} of {count} messages received, receives posted up to {next_post}, first missing {:?}, {} operations in flight",
                    last.elapsed(),
                    seen.missing(count, 10),
                    node.cq.in_flight()
                );
            }
            pause(&mut spins);
            continue;
        };
        last = Instant::now();
        let c = match r {
            Ok(c) => c,
            Err(ref e) => panic!(
                "receiver: an error completion after {received} messages: {} (message {} is {} bytes)",
                describe(&r),
                e.context,
                if e.context < count { msg_size(e.context) } else { 0 }
            ),
        };
        let i = c.context;
        assert!(i < count, "receiver: a completion with an unknown context: {}", describe(&Ok(c)));
        let what = format!("message {i} ({} bytes)", msg_size(i));
        assert!(seen.mark(i), "{what}: completed twice: {}", describe(&Ok(c)));
        assert_eq!(c.tag, i, "{what}: tag");
        assert_eq!(c.len, msg_size(i), "{what}: length");
        assert_eq!(c.src, src, "{what}: source (the relay's back address {back} is {src:?})");
        assert!(c.flags.contains(Caps::RECV | Caps::TAGGED), "{what}: flags {:?}", c.flags);
        if let Err(e) = check_bytes(c.bytes(), i) {
            panic!("{e}");
        }
        if prev.is_some_and(|p| p > i) {
            out_of_order += 1;
        }
        prev = Some(i);
        received += 1;
        bytes += c.len as u64;
        drop(c);
        if next_post < count {
            post(next_post);
            next_post += 1;
        }
        if last_report.elapsed() > Duration::from_secs(5) {
            eprintln!("receiver: {received} of {count} messages, {} MB, {:?}", bytes / 1_000_000, start.elapsed());
            last_report = Instant::now();
        }
    }
    let elapsed = start.elapsed();
    // No message delivered twice: a wildcard receive stays empty while progress is
    // driven for a while.
    node.ep
        .trecv(Buf::new(MAX_SIZE + SLACK), FiAddr::UNSPEC, 0, u64::MAX, WILDCARD_CTX)
        .unwrap_or_else(|e| panic!("posting the wildcard receive failed: {}", e.error));
    let quiet = Instant::now();
    let mut spins = 0;
    while quiet.elapsed() < QUIET {
        if let Some(r) = poll_cq(&node.cq) {
            panic!("receiver: after all {count} messages, another completion (a duplicate?): {}", describe(&r));
        }
        pause(&mut spins);
    }
    say(
        "DONE",
        &format!(
            "{received} messages, {bytes} bytes, each once and intact, in {elapsed:?} ({:.1} MB/s); {out_of_order} completed out of order",
            bytes as f64 / elapsed.as_secs_f64() / 1e6
        ),
    );
    cmds.wait_exit(&node.cq, deadline, "receiver");
}

/// The sender: opens its endpoint, says `NAME`, takes the relay's `front` address
/// (`PEER`), sends messages `0..count` (tag and context = index) keeping at most
/// [`SEND_WINDOW`] posted, checks every send completion, says `SENT` and keeps
/// driving progress until `EXIT`.
fn sender_child(count: u64) {
    let deadline = Instant::now() + TEST_LIMIT;
    let node = Node::open();
    let cmds = Commands::start();
    say("NAME", &node.addr().to_string());
    let front = cmds.peer(deadline);
    let dest = node.av.insert_one(&Address::Sockaddr(front)).expect("av insert");
    let start = Instant::now();
    let mut done = Bitmap::new(count);
    let (mut next, mut completed, mut again) = (0u64, 0u64, 0u64);
    let mut last = Instant::now();
    let mut last_report = Instant::now();
    let mut spins = 0;
    let mut pending: Option<(u64, Buf)> = None;
    let mut complete = |r: Res, completed: &mut u64, last: &mut Instant| {
        let c = match r {
            Ok(c) => c,
            Err(_) => panic!("sender: an error completion after {completed} sends: {}", describe(&r)),
        };
        let i = c.context;
        assert!(i < count, "sender: a completion with an unknown context: {}", describe(&Ok(c)));
        assert!(done.mark(i), "sender: send {i} completed twice");
        assert!(c.flags.contains(Caps::SEND), "sender: send {i}: flags {:?}", c.flags);
        *completed += 1;
        *last = Instant::now();
    };
    while completed < count {
        let mut progressed = false;
        // Post while the window has room.
        while next < count && (next - completed) < SEND_WINDOW as u64 {
            let (i, buf) = pending.take().unwrap_or_else(|| (next, Buf::from(pattern(next))));
            match node.ep.tsend(buf, dest, i, i) {
                Ok(()) => {
                    next += 1;
                    progressed = true;
                }
                Err(e) if e.error == Error::Again => {
                    again += 1;
                    pending = Some((i, e.buffers.into_buf().expect("the buffer comes back")));
                    break;
                }
                Err(e) => panic!("sender: posting send {i} failed: {}", e.error),
            }
        }
        // Read completions (this is also what makes progress).
        while let Some(r) = poll_cq(&node.cq) {
            complete(r, &mut completed, &mut last);
            progressed = true;
        }
        if !progressed {
            if last.elapsed() > STALL_LIMIT || Instant::now() > deadline {
                panic!(
                    "sender stalled: no send completed for {:?}; {completed} of {count} completed, {next} posted, first not completed {:?}, {} operations in flight",
                    last.elapsed(),
                    done.missing(next, 10),
                    node.cq.in_flight()
                );
            }
            pause(&mut spins);
        }
        if last_report.elapsed() > Duration::from_secs(5) {
            eprintln!("sender: {completed} of {count} sends completed, {:?}", start.elapsed());
            last_report = Instant::now();
        }
    }
    let elapsed = start.elapsed();
    say(
        "SENT",
        &format!("{count} sends completed, all successful, in {elapsed:?} ({again} posts refused with FI_EAGAIN)"),
    );
    cmds.wait_exit(&node.cq, deadline, "sender");
}
