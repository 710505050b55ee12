//! Multi-process tests of the shm provider (issue 4): endpoints in separate processes
//! exchanging tagged messages all-to-all (with and without cross-memory attach), peers
//! killed with `SIGKILL` in the middle of 64 MiB transfers in either direction, the
//! removal of a killed process's segment, and one endpoint receiving from 256 peers.
//!
//! # How the processes are made
//!
//! The test binary runs itself again for every child: [`std::env::current_exe`] with
//! `--exact child_entry --nocapture --test-threads=1`, the child's role in the
//! environment variable [`ROLE_ENV`]. [`child_entry`] is that entry point; in a normal
//! run the variable is absent and it returns at once (a test that trivially passes).
//!
//! Parent and child talk through pipes, one line at a time:
//!
//! - the child prints protocol lines `@@KEY value` on standard output: `@@NAME <its
//!   endpoint name>` (the string of `Endpoint::name()`, which `AddressVector::insert`
//!   takes), `@@DONE ...`, and so on. The test harness's own lines are kept apart for
//!   the diagnostics;
//! - the parent writes commands to the child's standard input: `PEERS <name> <name>
//!   ...`, then `CHECK`, `EXIT`.
//!
//! A child reports success by exiting with status 0 (the harness says `ok`); a failure
//! panics, which makes the harness exit with 101, the reason on standard error. Every
//! child started is owned by a [`Proc`], which kills it (`SIGKILL`) and reaps it when
//! dropped, so a failing test leaves no process behind; a child also exits on its own
//! when its standard input closes (its parent died) and after [`CHILD_LIMIT`].
//!
//! Every wait has a deadline: a hang fails the test instead of blocking the run. No
//! test asserts anything about timing, beyond the stall watchdog of the blocking-wait
//! tests (one `sread` may wait [`STALL_LIMIT`], 30 s, for a transfer that takes well
//! under a second).
//!
//! # What is asserted (details on each test)
//!
//! - [`all_to_all_2_processes`], [`all_to_all_8_processes`] and their
//!   `_without_cma` twins: every message arrives exactly once, byte for byte, with its
//!   tag and source; sizes cover the inline, bounce-buffer and large paths.
//! - [`receiver_killed_mid_transfer_with_cma`] and `_without_cma`: a receiver killed
//!   while 64 MiB messages stream to it; [`sender_killed_mid_transfer_with_cma`] and
//!   `_without_cma`: a sender killed while streaming 64 MiB messages. The survivor's
//!   operations end with an outcome each, in order, never hang; the dead peer's segment
//!   is removed; the survivor then exchanges intact data with a new process.
//! - [`killed_process_segment_removed_when_a_domain_opens`]: the other moment stale
//!   segments go.
//! - [`one_endpoint_receives_from_256_peers`]: the segment's 256 slots, all in use.
//! - [`blocking_waits_64mib_with_cma`] and `_without_cma`: a 64 MiB message whose two
//!   ends only ever wait in `sread`.
//!
//! Tests marked `#[ignore = "bug: ..."]` expose a known bug of the provider: run them
//! with `cargo test -p fabric --test shm_processes -- --ignored`.

#![cfg(feature = "shm")]

mod children;

use children::{expect_all, say, Commands, Proc};
use fabric::*;
use fabric_shm::proto::INLINE_MAX;
use fabric_shm::segment::{BOUNCE_SIZE, HEADER_SIZE, PREFIX, SHM_DIR, SLOTS, SLOT_SIZE};
use fabric_testkit::mix;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

/// The environment variable that makes [`child_entry`] a child, and says which:
/// `alltoall:<rank>:<n>`, `sink`, `source`, `echo`, `idle`, `senders:<first>:<count>`,
/// `killtest:<receiver|sender>` or `blocking:<recv|send>`.
pub const ROLE_ENV: &str = "FABRIC_SHM_TEST_ROLE";
/// The environment variable of the provider's `disable_cma` parameter.
const CMA_ENV: &str = "FI_SHM_DISABLE_CMA";
/// How long a child lives at most, whatever happens (its own watchdog).
const CHILD_LIMIT: Duration = Duration::from_secs(150);
/// How long one test (or one child's part) may take before it fails as hung.
const TEST_LIMIT: Duration = Duration::from_secs(120);
/// The scheme of shm addresses.
const SCHEME: &str = "fi_shm://";
/// Extra room in receive buffers, so that a message longer than expected shows.
const SLACK: usize = 64;

/// One message's size in the all-to-all exchanges: inline (up to [`INLINE_MAX`]),
/// bounce buffer (up to [`BOUNCE_SIZE`]) and large (cross-memory attach, or chunks),
/// each path's edges included.
const SIZES: [usize; 12] = [
    0,
    1,
    100,
    INLINE_MAX,
    INLINE_MAX + 1,
    4 << 10,
    BOUNCE_SIZE,
    BOUNCE_SIZE + 1,
    100 << 10,
    1 << 20,
    4 << 20,
    (3 << 20) + 12345,
];
/// Messages each process sends to every process (itself included) in an all-to-all.
const MESSAGES_PER_PAIR: u64 = SIZES.len() as u64;

/// The size of the messages of the kill tests.
const BIG: usize = 64 << 20;
/// Sends (or receives) the kill tests keep in flight.
const DEPTH: u64 = 2;
/// Tag bits of the kill tests' big messages (ORed with the sequence number).
const KILL_TAG: u64 = 0x4b1 << 52;
/// Tag of the message the survivor sends to a killed peer to learn that it noticed.
const PROBE_TAG: u64 = 0x9b0 << 52;
/// Context of that message.
const PROBE_CTX: u64 = u64::MAX - 1;
/// How often a kill test tries again when the kill left nothing in flight.
const ATTEMPTS: usize = 3;
/// Identities in the kill tests, for the payload seeds.
const SURVIVOR: u64 = 1000;
/// See [`SURVIVOR`].
const VICTIM: u64 = 1001;
/// See [`SURVIVOR`].
const ECHOER: u64 = 1002;
/// The sizes of the exchange with the echo process, after a kill.
const ECHO_SIZES: [usize; 6] = [0, 100, INLINE_MAX + 1, 8 << 10, 1 << 20, 8 << 20];
/// Tag bits of messages to the echo process.
const ECHO_TAG: u64 = 0xec0 << 52;
/// Tag bits of its replies.
const REPLY_TAG: u64 = 0xec1 << 52;

/// How long one blocking read may return nothing before the blocking test calls the
/// transfer stalled (a 64 MiB message takes well under a second otherwise).
const STALL_LIMIT: Duration = Duration::from_secs(30);

/// Processes sending to the receiver of the scale test.
const SENDER_PROCS: usize = 4;
/// Endpoints in each of them: together, one per slot of the receiver's segment.
const SENDERS_PER_PROC: usize = SLOTS / SENDER_PROCS;
/// What each of those endpoints sends: inline, bounce buffer, large.
const SCALE_SIZES: [usize; 3] = [64, 4 << 10, BOUNCE_SIZE + 4000];

// ---------------------------------------------------------------------------------------
// Payloads
// ---------------------------------------------------------------------------------------

/// The seed of message `seq` from `sender` to `receiver`.
fn seed(sender: u64, receiver: u64, seq: u64) -> u64 {
    mix((sender << 42) ^ (receiver << 21) ^ seq)
}

/// The tag of message `seq` from `sender`: the sender in the high half, the sequence
/// number in the low one.
fn tag(sender: u64, seq: u64) -> u64 {
    (sender << 32) | seq
}

/// The payload of `len` bytes for `seed`: a 64 KiB block of 8-byte words (word `i` is a
/// function of the seed and `i`) repeated, and the first 8 bytes of every 4 KiB page
/// replaced by a function of the seed and the page's index. So every byte depends on the
/// seed, a piece moved by any offset or taken from another message shows, and 64 MiB is
/// built with copies (cheap in debug builds).
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    const BLOCK: usize = 64 << 10;
    const PAGE: usize = 4096;
    let base = mix(seed);
    let mut block = vec![0u8; BLOCK.min(len.next_multiple_of(8))];
    for (i, w) in block.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&(base ^ (i as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93)).to_le_bytes());
    }
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        let k = (len - v.len()).min(block.len());
        v.extend_from_slice(&block[..k]);
    }
    for (p, page) in v.chunks_mut(PAGE).enumerate() {
        let stamp = mix(seed ^ ((p as u64) << 32) ^ 0x5a5a).to_le_bytes();
        let k = page.len().min(8);
        page[..k].copy_from_slice(&stamp[..k]);
    }
    v
}

/// Compare received bytes with the expected ones; on a difference, say where (not
/// megabytes of bytes).
fn check_bytes(got: &[u8], want: &[u8], what: &str) -> std::result::Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{what}: {} bytes, expected {}", got.len(), want.len()));
    }
    if got == want {
        return Ok(());
    }
    let i = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
    Err(format!(
        "{what}: first difference at byte {i} of {}: got {:#04x}, expected {:#04x}",
        want.len(),
        got[i],
        want[i]
    ))
}

// ---------------------------------------------------------------------------------------
// Endpoints
// ---------------------------------------------------------------------------------------

/// The shm provider's RDM entry.
fn shm_info() -> Info {
    let hints = Hints::new().provider("shm").ep_type(EpType::Rdm).caps(Caps::MSG | Caps::TAGGED);
    let mut v = getinfo(&hints).expect("getinfo for shm");
    assert!(!v.is_empty(), "shm offers no RDM endpoint");
    v.remove(0)
}

/// The string of an endpoint's name, as printed to other processes.
fn name_of(ep: &Endpoint) -> String {
    match ep.name().expect("endpoint name") {
        Address::Str(s) => s,
        a => panic!("an shm endpoint named by a non-string address {a:?}"),
    }
}

/// The file of the segment of the endpoint named `name` (`fi_shm://<file name>`).
fn segment_path(name: &str) -> PathBuf {
    let file = name.strip_prefix(SCHEME).unwrap_or_else(|| panic!("{name}: not an shm address"));
    assert!(file.starts_with(PREFIX), "{name}: segment names start with {PREFIX}");
    PathBuf::from(SHM_DIR).join(file)
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
    /// Open one (`cq_size` 0: the default queue size).
    fn open(info: &Info, cq_size: usize) -> Node {
        let fabric = Fabric::open(info).expect("open fabric");
        let domain = fabric.domain(info).expect("open domain");
        let cq = domain.cq(CqAttr { size: cq_size, format: CqFormat::Tagged, ..Default::default() }).expect("cq");
        let av = domain.av(AvAttr::default()).expect("open av");
        let ep = domain.endpoint(info).expect("open endpoint");
        ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).expect("bind cq");
        ep.bind_av(&av).expect("bind av");
        ep.enable().expect("enable");
        Node { ep, cq, av, _domain: domain, _fabric: fabric }
    }

    fn name(&self) -> String {
        name_of(&self.ep)
    }

    /// Insert peers' names; their handles, in order.
    fn insert(&self, names: &[String]) -> Vec<FiAddr> {
        let addrs: Vec<Address> = names.iter().map(|n| Address::Str(n.clone())).collect();
        let v = self.av.insert(&addrs).expect("av insert");
        assert_eq!(v.len(), names.len(), "one handle per name");
        v
    }
}

// ---------------------------------------------------------------------------------------
// Completions
// ---------------------------------------------------------------------------------------

/// An operation's outcome as read from a completion queue.
type Res = std::result::Result<Completion, CompletionError>;

/// Read one outcome from `cq`, if any (making progress).
fn poll_cq(cq: &CompletionQueue) -> Option<Res> {
    cq.next().unwrap_or_else(|e| panic!("cq read failed: {e}"))
}

/// Yield, and now and then sleep a little: polling that neither burns a core that the
/// other processes need nor depends on any wake-up.
fn pause(spins: &mut u32) {
    *spins += 1;
    if *spins % 16 == 0 {
        thread::sleep(Duration::from_micros(100));
    } else {
        thread::yield_now();
    }
}

/// A completion queue read one outcome at a time, keeping what is read while posting
/// (a post refused with `Again` drives progress before it is retried).
struct Queue<'a> {
    cq: &'a CompletionQueue,
    kept: VecDeque<Res>,
}

impl<'a> Queue<'a> {
    fn new(cq: &'a CompletionQueue) -> Queue<'a> {
        Queue { cq, kept: VecDeque::new() }
    }

    /// The next outcome, if any: kept ones first.
    fn poll(&mut self) -> Option<Res> {
        self.kept.pop_front().or_else(|| poll_cq(self.cq))
    }

    /// The next outcome; fails the test at `deadline` (a hang), saying `what` it waited
    /// for.
    #[track_caller]
    fn next(&mut self, deadline: Instant, what: &dyn Fn() -> String) -> Res {
        let mut spins = 0;
        loop {
            if let Some(r) = self.poll() {
                return r;
            }
            if Instant::now() > deadline {
                panic!("watchdog: no completion while waiting for {} ({} in flight)", what(), self.cq.in_flight());
            }
            pause(&mut spins);
        }
    }

    /// Post with `f`, retrying while the provider answers `Again` (back-pressure).
    #[track_caller]
    fn post(&mut self, deadline: Instant, what: &str, mut buf: Buf, mut f: impl FnMut(Buf) -> PostResult) {
        let mut spins = 0;
        loop {
            match f(buf) {
                Ok(()) => return,
                Err(e) if e.error == Error::Again && Instant::now() < deadline => {
                    buf = e.buffers.into_buf().expect("the buffer comes back");
                    if let Some(r) = poll_cq(self.cq) {
                        self.kept.push_back(r);
                    }
                    pause(&mut spins);
                }
                Err(e) => panic!("posting {what} failed: {}", e.error),
            }
        }
    }
}

/// Expect a success.
#[track_caller]
fn ok(r: Res, what: &str) -> Completion {
    match r {
        Ok(c) => c,
        Err(e) => panic!("{what}: error completion {} (context {:#x}, tag {:#x})", e.err, e.context, e.tag),
    }
}

/// The buffer an outcome gives back.
fn buffer_of(r: Res) -> Buf {
    let b = match r {
        Ok(c) => c.buffers,
        Err(e) => e.buffers,
    };
    b.into_buf().expect("a single buffer comes back")
}

// ---------------------------------------------------------------------------------------
// Parent side: the children
// ---------------------------------------------------------------------------------------

/// How a child's environment sets cross-memory attach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cma {
    /// As the parent's environment says.
    Inherit,
    /// Allowed (`FI_SHM_DISABLE_CMA` removed).
    On,
    /// Disabled (`FI_SHM_DISABLE_CMA=1`).
    Off,
}

/// Start the test binary as a child in `role`, with cross-memory attach as `cma`
/// says and the shm provider's log at level info.
fn spawn(label: &str, role: &str, cma: Cma) -> Proc {
    Proc::spawn(label, ROLE_ENV, role, |cmd| {
        cmd.env("FI_LOG_LEVEL", "info").env("FI_LOG_PROV", "shm");
        match cma {
            Cma::Inherit => {}
            Cma::On => {
                cmd.env_remove(CMA_ENV);
            }
            Cma::Off => {
                cmd.env(CMA_ENV, "1");
            }
        }
    })
}

/// Whether a child's log says that cross-memory attach was not possible with a peer
/// (the provider then falls back to chunks, which is correct, but then a "with CMA"
/// test did not test CMA).
fn cma_fell_back(log: &str) -> bool {
    log.contains("no cross-memory attach")
}

// ---------------------------------------------------------------------------------------
// Child side
// ---------------------------------------------------------------------------------------

impl Commands {
    /// The `PEERS` command: the names.
    #[track_caller]
    fn peers(&self, deadline: Instant) -> Vec<String> {
        let line = self.next(deadline);
        let rest = line.strip_prefix("PEERS ").unwrap_or_else(|| panic!("expected PEERS, got {line:?}"));
        rest.split_whitespace().map(str::to_string).collect()
    }

    /// Wait for `EXIT`, making progress on `cq` meanwhile: nothing may complete.
    #[track_caller]
    fn wait_exit(&self, cq: &CompletionQueue, deadline: Instant) {
        let mut spins = 0;
        loop {
            match self.try_next().as_deref() {
                Some("EXIT") => return,
                Some(other) => panic!("expected EXIT, got {other:?}"),
                None => {}
            }
            if let Some(r) = poll_cq(cq) {
                panic!("an unexpected completion while waiting to exit: {r:?}");
            }
            assert!(Instant::now() < deadline, "no EXIT from the parent in time");
            pause(&mut spins);
            if spins > 1000 {
                thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// The entry point of the child processes (see the module documentation). In a normal
/// run [`ROLE_ENV`] is not set and this returns at once: a test that trivially passes.
#[test]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE_ENV) else { return };
    thread::spawn(|| {
        thread::sleep(CHILD_LIMIT);
        eprintln!("child {}: watchdog: still running after {CHILD_LIMIT:?}: exiting", std::process::id());
        std::process::exit(4);
    });
    let parts: Vec<&str> = role.split(':').collect();
    let num = |i: usize| -> usize { parts[i].parse().unwrap_or_else(|_| panic!("bad role {role}")) };
    match parts[0] {
        "alltoall" => alltoall_child(num(1), num(2)),
        "sink" => sink_child(),
        "source" => source_child(),
        "echo" => echo_child(),
        "idle" => idle_child(),
        "senders" => senders_child(num(1), num(2)),
        "killtest" => survivor(parts[1]),
        "blocking" => blocking_child(parts[1]),
        _ => panic!("unknown role {role}"),
    }
}

// ---------------------------------------------------------------------------------------
// All-to-all
// ---------------------------------------------------------------------------------------

/// The size of message `seq` from `sender` to `receiver`: every size of [`SIZES`] once
/// per pair, in an order that differs between pairs (so that sizes interleave).
fn size_of(sender: usize, receiver: usize, seq: u64) -> usize {
    SIZES[(seq as usize + 3 * sender + 5 * receiver) % SIZES.len()]
}

/// One process of an all-to-all exchange among `n`: rank `rank`.
///
/// Receives for even sequence numbers are posted before any send, those for odd ones
/// after all sends are posted (so some messages arrive before their receive, and take
/// the unexpected-message path). Receives match exact tags (sender, sequence number);
/// their buffers have [`SLACK`] bytes of room more than the message. Checked for each
/// receive: one completion, success, the length, every byte, the tag, the source
/// address (the sender's handle), the flags; for each send: one successful completion.
/// Then, once every process is done (`CHECK`), a wildcard receive must stay empty: no
/// message arrived twice.
fn alltoall_child(rank: usize, n: usize) {
    let deadline = Instant::now() + TEST_LIMIT;
    let info = shm_info();
    let node = Node::open(&info, 0);
    let me = node.name();
    let cmds = Commands::start();
    say("NAME", &me);
    let peers = cmds.peers(deadline);
    assert_eq!(peers.len(), n, "one name per process");
    assert_eq!(peers[rank], me, "my own name at my rank");
    let addrs = node.insert(&peers);
    let mut q = Queue::new(&node.cq);
    // context -> (is a receive, peer, seq)
    let mut pending: HashMap<u64, (bool, usize, u64)> = HashMap::new();
    let ctx = |recv: bool, peer: usize, seq: u64| ((recv as u64) << 62) | ((peer as u64) << 32) | seq;
    let post_recvs = |q: &mut Queue, pending: &mut HashMap<u64, (bool, usize, u64)>, parity: u64| {
        for s in 0..n {
            for seq in (0..MESSAGES_PER_PAIR).filter(|x| x % 2 == parity) {
                let c = ctx(true, s, seq);
                let buf = Buf::new(size_of(s, rank, seq) + SLACK);
                q.post(deadline, "a receive", buf, |b| node.ep.trecv(b, FiAddr::UNSPEC, tag(s as u64, seq), 0, c));
                assert!(pending.insert(c, (true, s, seq)).is_none());
            }
        }
    };
    post_recvs(&mut q, &mut pending, 0);
    for seq in 0..MESSAGES_PER_PAIR {
        for (r, &dest) in addrs.iter().enumerate() {
            let c = ctx(false, r, seq);
            let buf = Buf::from(pattern(size_of(rank, r, seq), seed(rank as u64, r as u64, seq)));
            q.post(deadline, "a send", buf, |b| node.ep.tsend(b, dest, tag(rank as u64, seq), c));
            assert!(pending.insert(c, (false, r, seq)).is_none());
        }
    }
    post_recvs(&mut q, &mut pending, 1);
    let (mut received, mut bytes) = (0usize, 0usize);
    while !pending.is_empty() {
        let left = pending.len();
        let c = ok(q.next(deadline, &|| format!("{left} operations")), "rank {rank}");
        let Some((recv, peer, seq)) = pending.remove(&c.context) else {
            panic!("a completion for context {:#x}, which is not in flight (twice?)", c.context);
        };
        if recv {
            let size = size_of(peer, rank, seq);
            let what = format!("message {seq} from rank {peer} to rank {rank} ({size} bytes)");
            assert!(c.flags.contains(Caps::RECV | Caps::TAGGED), "{what}: flags {:?}", c.flags);
            assert_eq!(c.tag, tag(peer as u64, seq), "{what}: tag");
            assert_eq!(c.len, size, "{what}: length");
            assert_eq!(c.src, addrs[peer], "{what}: source address");
            if let Err(e) = check_bytes(c.bytes(), &pattern(size, seed(peer as u64, rank as u64, seq)), &what) {
                panic!("{e}");
            }
            received += 1;
            bytes += size;
        } else {
            assert!(c.flags.contains(Caps::SEND), "send {seq} to rank {peer}: flags {:?}", c.flags);
        }
    }
    assert_eq!(received, n * MESSAGES_PER_PAIR as usize);
    assert_eq!(node.cq.in_flight(), 0);
    say("DONE", &format!("rank {rank}: {received} messages, {bytes} bytes received intact"));

    // Every process has all its sends completed: a message sent twice would be in our
    // rings (or our unexpected queue) by now.
    let line = cmds.next(deadline);
    assert_eq!(line, "CHECK");
    const ANY: u64 = u64::MAX;
    node.ep.trecv(Buf::new(8 << 20), FiAddr::UNSPEC, 0, u64::MAX, ANY).expect("post a wildcard receive");
    let until = Instant::now() + Duration::from_millis(100);
    let mut spins = 0;
    while Instant::now() < until || spins < 200 {
        if let Some(r) = q.poll() {
            match r {
                Ok(c) => panic!("rank {rank}: a message arrived twice (or was never expected): tag {:#x}", c.tag),
                Err(e) => panic!("rank {rank}: an error completion after the exchange: {}", e.err),
            }
        }
        pause(&mut spins);
    }
    node.ep.cancel(ANY).expect("cancel the wildcard receive");
    let e = q.next(deadline, &|| "the canceled wildcard receive".into()).expect_err("a canceled receive");
    assert_eq!((e.context, e.err), (ANY, Error::Canceled));
    say("CHECKED", "");
    cmds.wait_exit(&node.cq, deadline);
}

/// Run an all-to-all among `n` child processes, cross-memory attach as `cma` says.
fn all_to_all(n: usize, cma: Cma) {
    let start = Instant::now();
    let deadline = start + TEST_LIMIT;
    let mut procs: Vec<Proc> =
        (0..n).map(|r| spawn(&format!("rank {r} of {n}"), &format!("alltoall:{r}:{n}"), cma)).collect();
    let names = expect_all(&mut procs, "NAME", deadline);
    let line = format!("PEERS {}", names.join(" "));
    for p in &mut procs {
        p.send(&line);
    }
    for d in expect_all(&mut procs, "DONE", deadline) {
        println!("{d}");
    }
    for p in &mut procs {
        p.send("CHECK");
    }
    expect_all(&mut procs, "CHECKED", deadline);
    for p in &mut procs {
        p.send("EXIT");
    }
    let logs: Vec<String> = procs.into_iter().map(|p| p.finish(deadline)).collect();
    for name in &names {
        assert!(!segment_path(name).exists(), "{name}: a closed endpoint removes its segment");
    }
    if cma == Cma::On && logs.iter().any(|l| cma_fell_back(l)) {
        println!("note: cross-memory attach between these processes is not allowed here: the fallback ran instead");
    }
    println!("{n} processes all-to-all ({cma:?} CMA): {:?}", start.elapsed());
}

/// Two processes, each sending [`SIZES`] (one message of each size) to both (itself
/// included), with cross-memory attach: see [`alltoall_child`] for what is checked.
#[test]
fn all_to_all_2_processes() {
    all_to_all(2, Cma::On);
}

/// [`all_to_all_2_processes`] with eight processes.
#[test]
fn all_to_all_8_processes() {
    all_to_all(8, Cma::On);
}

/// [`all_to_all_2_processes`] with `FI_SHM_DISABLE_CMA=1` in the children: large
/// messages travel as chunks through the bounce buffers.
#[test]
fn all_to_all_2_processes_without_cma() {
    all_to_all(2, Cma::Off);
}

/// [`all_to_all_8_processes`] with `FI_SHM_DISABLE_CMA=1` in the children.
#[test]
fn all_to_all_8_processes_without_cma() {
    all_to_all(8, Cma::Off);
}

// ---------------------------------------------------------------------------------------
// Killed peers
// ---------------------------------------------------------------------------------------

/// The victim that receives: keeps [`DEPTH`] receives of [`BIG`] bytes posted (exact
/// tags `KILL_TAG | seq`), checks every message byte for byte, says `GOT <seq>` for each,
/// until it is killed. A wrong message fails it (and its parent sees why).
fn sink_child() {
    let deadline = Instant::now() + CHILD_LIMIT;
    let node = Node::open(&shm_info(), 0);
    let cmds = Commands::start();
    say("NAME", &node.name());
    let _peer = node.insert(&cmds.peers(deadline));
    let mut q = Queue::new(&node.cq);
    let mut next = 0;
    let post = |q: &mut Queue, seq: u64| {
        q.post(deadline, "a receive", Buf::new(BIG), |b| node.ep.trecv(b, FiAddr::UNSPEC, KILL_TAG | seq, 0, seq));
    };
    while next < DEPTH {
        post(&mut q, next);
        next += 1;
    }
    loop {
        let c = ok(q.next(deadline, &|| "a big message".into()), "sink");
        let seq = c.context;
        if let Err(e) = check_bytes(c.bytes(), &pattern(BIG, seed(SURVIVOR, VICTIM, seq)), &format!("message {seq}")) {
            say("BAD", &e);
            panic!("{e}");
        }
        say("GOT", &seq.to_string());
        drop(c);
        post(&mut q, next);
        next += 1;
    }
}

/// The victim that sends: keeps [`DEPTH`] sends of [`BIG`] bytes in flight (tags
/// `KILL_TAG | seq`), says `SENT <seq>` as each completes, until it is killed.
fn source_child() {
    let deadline = Instant::now() + CHILD_LIMIT;
    let node = Node::open(&shm_info(), 0);
    let cmds = Commands::start();
    say("NAME", &node.name());
    let peer = node.insert(&cmds.peers(deadline))[0];
    let mut q = Queue::new(&node.cq);
    let mut next = 0;
    let post = |q: &mut Queue, seq: u64| {
        let buf = Buf::from(pattern(BIG, seed(VICTIM, SURVIVOR, seq)));
        q.post(deadline, "a send", buf, |b| node.ep.tsend(b, peer, KILL_TAG | seq, seq));
    };
    while next < DEPTH {
        post(&mut q, next);
        next += 1;
    }
    loop {
        let c = ok(q.next(deadline, &|| "a big send".into()), "source");
        say("SENT", &c.context.to_string());
        drop(c);
        post(&mut q, next);
        next += 1;
    }
}

/// The process the survivor exchanges with after a kill: receives [`ECHO_SIZES`]
/// messages (exact tags `ECHO_TAG | i`), checks each byte for byte and sends it back
/// (`REPLY_TAG | i`); says `DONE` when every reply completed, then waits for `EXIT`.
fn echo_child() {
    let deadline = Instant::now() + TEST_LIMIT;
    let node = Node::open(&shm_info(), 0);
    let cmds = Commands::start();
    say("NAME", &node.name());
    let peer = node.insert(&cmds.peers(deadline))[0];
    let mut q = Queue::new(&node.cq);
    let n = ECHO_SIZES.len() as u64;
    for (i, &size) in ECHO_SIZES.iter().enumerate() {
        let i = i as u64;
        q.post(deadline, "a receive", Buf::new(size + SLACK), |b| node.ep.trecv(b, FiAddr::UNSPEC, ECHO_TAG | i, 0, i));
    }
    let (mut received, mut replied) = (0, 0);
    while received < n || replied < n {
        let c = ok(q.next(deadline, &|| "an echo".into()), "echo");
        if c.flags.contains(Caps::RECV) {
            let i = c.context;
            let size = ECHO_SIZES[i as usize];
            if let Err(e) = check_bytes(c.bytes(), &pattern(size, seed(SURVIVOR, ECHOER, i)), &format!("echo {i}")) {
                panic!("{e}");
            }
            let buf = c.buffers.into_buf().expect("the receive buffer");
            q.post(deadline, "a reply", buf, |b| node.ep.tsend(b, peer, REPLY_TAG | i, n + i));
            received += 1;
        } else {
            replied += 1;
        }
    }
    say("DONE", "");
    cmds.wait_exit(&node.cq, deadline);
}

/// A process with one endpoint that only waits for `EXIT`.
fn idle_child() {
    let deadline = Instant::now() + TEST_LIMIT;
    let node = Node::open(&shm_info(), 0);
    let cmds = Commands::start();
    say("NAME", &node.name());
    cmds.wait_exit(&node.cq, deadline);
}

/// How one of the survivor's operations ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Completed successfully (and, for a receive, with every byte right).
    Done,
    /// Completed with an error.
    Failed(Error),
    /// Never matched: still posted after the kill, then canceled.
    Posted,
}

impl End {
    /// Its rank in the order outcomes must follow by sequence number.
    fn rank(self) -> u8 {
        match self {
            End::Done => 0,
            End::Failed(_) => 1,
            End::Posted => 2,
        }
    }
}

/// Check that outcomes, by sequence number, are successes, then failures, then
/// still-posted receives (`S* E* P*`); a compact description.
fn check_order(ends: &BTreeMap<u64, End>, what: &str) -> String {
    let desc: Vec<String> = ends
        .iter()
        .map(|(s, e)| match e {
            End::Done => format!("{s}:ok"),
            End::Failed(err) => format!("{s}:{err:?}"),
            End::Posted => format!("{s}:posted"),
        })
        .collect();
    let desc = desc.join(" ");
    let ranks: Vec<u8> = ends.values().map(|e| e.rank()).collect();
    assert!(ranks.windows(2).all(|w| w[0] <= w[1]), "{what}: outcomes out of order: {desc}");
    desc
}

/// Kill the victim (`SIGKILL`, then reap it) from another thread while this one keeps
/// driving progress, so that the kill can land in the middle of a copy this process
/// makes (with cross-memory attach, the receiver copies); the outcomes read meanwhile
/// are kept in `q`. The victim's protocol lines not read yet.
fn kill_while_progressing(victim: &mut Proc, q: &mut Queue) -> Vec<String> {
    thread::scope(|s| {
        let killer = s.spawn(|| victim.kill());
        let mut spins = 0;
        while !killer.is_finished() {
            if let Some(r) = poll_cq(q.cq) {
                q.kept.push_back(r);
            }
            pause(&mut spins);
        }
        killer.join().expect("the killer thread")
    })
}

/// Learn that the survivor has noticed the death of the peer at `addr`: send it a
/// message too large for a bounce buffer, which only the peer's answer could complete.
/// Either the post is refused (the peer was already found dead and forgotten) or the
/// send completes with an error once the survivor finds it dead (which also fails
/// whatever else was in flight with it, in the same step). A success is a bug.
fn probe_dead(node: &Node, q: &mut Queue, addr: FiAddr, deadline: Instant, others: &mut Vec<Res>) -> String {
    let buf = Buf::from(pattern(BOUNCE_SIZE * 4, 7));
    let mut spins = 0;
    let mut buf = Some(buf);
    loop {
        match node.ep.tsend(buf.take().expect("buffer"), addr, PROBE_TAG, PROBE_CTX) {
            Ok(()) => break,
            Err(e) if e.error == Error::Again => {
                buf = Some(e.buffers.into_buf().expect("buffer back"));
                if let Some(r) = poll_cq(q.cq) {
                    others.push(r);
                }
                assert!(Instant::now() < deadline, "watchdog: a send to a dead peer stays refused with Again");
                pause(&mut spins);
            }
            Err(e) => return format!("refused at post ({})", e.error),
        }
    }
    loop {
        let r = q.next(deadline, &|| "the probe sent to the dead peer".into());
        let ctx = match &r {
            Ok(c) => c.context,
            Err(e) => e.context,
        };
        if ctx != PROBE_CTX {
            others.push(r);
            continue;
        }
        match r {
            Ok(_) => panic!("a send to a killed process completed successfully"),
            Err(e) => return format!("error completion ({})", e.err),
        }
    }
}

/// The survivor's side of a kill test, in a process of its own (so that cross-memory
/// attach is set for it as for its peers): `receiver` kills the receiving peer, `sender`
/// the sending one. Tries up to [`ATTEMPTS`] times while a receiver was killed with
/// nothing in flight (possible only if the kill takes effect after the victim copied
/// both 64 MiB messages in flight, the one just posted included); says
/// `RESULT <summary>`.
fn survivor(dir: &str) {
    let deadline = Instant::now() + TEST_LIMIT;
    let _cmds = Commands::start();
    let node = Node::open(&shm_info(), 0);
    let me = node.name();
    let mut summary = Vec::new();
    for attempt in 1..=ATTEMPTS {
        // The helper starts while the big messages flow.
        let helper = spawn("echo process", "echo", Cma::Inherit);
        let mut victim = spawn("victim", if dir == "receiver" { "sink" } else { "source" }, Cma::Inherit);
        let vname = victim.expect("NAME", deadline);
        victim.send(&format!("PEERS {me}"));
        let vaddr = node.insert(std::slice::from_ref(&vname))[0];
        let seg = segment_path(&vname);
        let (ends, probe) = match dir {
            "receiver" => receiver_killed(&node, &mut victim, vaddr, deadline),
            "sender" => sender_killed(&node, &mut victim, vaddr, deadline),
            _ => panic!("unknown direction {dir}"),
        };
        let desc = check_order(&ends, &format!("attempt {attempt}"));
        // The survivor found the peer dead: the step that does so removes the segments
        // of dead processes (`check_peers` -> `cleanup_stale`).
        assert!(
            !seg.exists(),
            "attempt {attempt}: the killed peer's segment {} is still there after the survivor found it dead",
            seg.display()
        );
        assert_eq!(node.cq.in_flight(), 0, "every operation came back");
        echo_exchange(&node, helper, deadline);
        let line = format!("attempt {attempt}: {desc}; probe: {probe}");
        eprintln!("{line}");
        summary.push(line);
        let failed = ends.values().any(|e| matches!(e, End::Failed(_)));
        if dir == "sender" || failed {
            break;
        }
        assert!(attempt < ATTEMPTS, "the kill never left a send in flight in {ATTEMPTS} attempts: {summary:?}");
    }
    say("RESULT", &summary.join(" | "));
}

/// (a) The survivor streams [`BIG`] messages to the victim, [`DEPTH`] in flight; once
/// one completed (the victim has it: a large send completes when the receiver copied
/// it), it posts the next one and kills the victim ([`kill_while_progressing`]).
///
/// Asserted: before the kill, every send succeeds; after it, every send in flight
/// completes exactly once, successes (the victim had copied them) then errors, in
/// order, none hangs; every error gives the buffer back; every message the victim
/// confirmed (`GOT`) is a success here, and the victim saw no wrong byte.
fn receiver_killed(node: &Node, victim: &mut Proc, vaddr: FiAddr, deadline: Instant) -> (BTreeMap<u64, End>, String) {
    let mut q = Queue::new(&node.cq);
    let mut ends = BTreeMap::new();
    let mut in_flight = 0;
    let mut next = 0;
    let post = |q: &mut Queue, seq: u64| {
        let buf = Buf::from(pattern(BIG, seed(SURVIVOR, VICTIM, seq)));
        q.post(deadline, "a big send", buf, |b| node.ep.tsend(b, vaddr, KILL_TAG | seq, seq));
    };
    while next < DEPTH {
        post(&mut q, next);
        next += 1;
        in_flight += 1;
    }
    let c = ok(q.next(deadline, &|| "the first big send".into()), "a big send before the kill");
    ends.insert(c.context, End::Done);
    in_flight -= 1;
    drop(c);
    post(&mut q, next);
    next += 1;
    in_flight += 1;
    let lines = kill_while_progressing(victim, &mut q);
    let mut others = Vec::new();
    while in_flight > 0 {
        let r = q.next(deadline, &|| format!("{in_flight} sends to the killed receiver"));
        let end = match &r {
            Ok(c) => (c.context, End::Done),
            Err(e) => (e.context, End::Failed(e.err)),
        };
        assert!(end.0 < next && !ends.contains_key(&end.0), "a completion for send {} (twice?)", end.0);
        assert_eq!(buffer_of(r).capacity(), BIG, "send {}: its buffer comes back", end.0);
        ends.insert(end.0, end.1);
        in_flight -= 1;
    }
    let probe = probe_dead(node, &mut q, vaddr, deadline, &mut others);
    assert!(others.is_empty(), "completions for nothing in flight: {others:?}");
    for l in &lines {
        if let Some(v) = l.strip_prefix("BAD ") {
            panic!("the victim received a wrong message: {v}");
        }
        if let Some(seq) = l.strip_prefix("GOT ") {
            let seq: u64 = seq.parse().expect("a sequence number");
            assert_eq!(ends.get(&seq), Some(&End::Done), "the victim confirmed message {seq}, which failed here");
        }
    }
    (ends, probe)
}

/// (b) The victim streams [`BIG`] messages to the survivor, [`DEPTH`] in flight; the
/// survivor keeps [`DEPTH`] receives posted (exact tags), and once one completed (and
/// was checked byte for byte), posts the next one and kills the victim
/// ([`kill_while_progressing`]).
///
/// What is asserted follows libfabric: a receive is tied to a message only once
/// matched. A receive whose message was fully delivered completes successfully, intact;
/// one matched to a message whose data can no longer come completes with an error; one
/// that nothing matched stays posted (a peer's death does not fail receives in general:
/// they may match any sender), which cancel shows (`FI_ECANCELED`). So, after the
/// survivor has noticed the death (the probe), each remaining receive is canceled: a
/// cancel that succeeds proves it was still posted; one refused means it was matched,
/// and then its completion must come (a hang fails). By sequence number, the outcomes
/// must be successes, then errors, then still-posted receives (messages of one sender
/// arrive in order); every message the victim saw completed (`SENT`) is a success here.
fn sender_killed(node: &Node, victim: &mut Proc, vaddr: FiAddr, deadline: Instant) -> (BTreeMap<u64, End>, String) {
    let mut q = Queue::new(&node.cq);
    let mut ends: BTreeMap<u64, End> = BTreeMap::new();
    let mut next = 0;
    let post = |q: &mut Queue, seq: u64| {
        q.post(deadline, "a big receive", Buf::new(BIG), |b| node.ep.trecv(b, FiAddr::UNSPEC, KILL_TAG | seq, 0, seq));
    };
    while next < DEPTH {
        post(&mut q, next);
        next += 1;
    }
    let record = |ends: &mut BTreeMap<u64, End>, r: Res, next: u64| {
        let (seq, end) = match &r {
            Ok(c) => {
                let what = format!("big message {}", c.context);
                assert_eq!(c.tag, KILL_TAG | c.context, "{what}: tag");
                if let Err(e) = check_bytes(c.bytes(), &pattern(BIG, seed(VICTIM, SURVIVOR, c.context)), &what) {
                    panic!("{e}");
                }
                (c.context, End::Done)
            }
            Err(e) if e.err == Error::Canceled => (e.context, End::Posted),
            Err(e) => (e.context, End::Failed(e.err)),
        };
        assert!(seq < next && !ends.contains_key(&seq), "a completion for receive {seq} (twice?)");
        assert_eq!(buffer_of(r).capacity(), BIG, "receive {seq}: its buffer comes back");
        ends.insert(seq, end);
    };
    let first = q.next(deadline, &|| "the first big message".into());
    let first = ok(first, "a big message before the kill");
    record(&mut ends, Ok(first), next);
    post(&mut q, next);
    next += 1;
    let lines = kill_while_progressing(victim, &mut q);
    let mut others = Vec::new();
    let probe = probe_dead(node, &mut q, vaddr, deadline, &mut others);
    for r in others {
        record(&mut ends, r, next);
    }
    // What is left: canceled if still posted, else (matched) its completion must come.
    for seq in 0..next {
        if ends.contains_key(&seq) {
            continue;
        }
        let _ = node.ep.cancel(seq);
    }
    while (ends.len() as u64) < next {
        let r = q.next(deadline, &|| format!("the receives left after the kill ({} of {next} ended)", ends.len()));
        record(&mut ends, r, next);
    }
    for l in &lines {
        if let Some(seq) = l.strip_prefix("SENT ") {
            let seq: u64 = seq.parse().expect("a sequence number");
            assert_eq!(ends.get(&seq), Some(&End::Done), "the victim saw send {seq} complete, not received here");
        }
    }
    (ends, probe)
}

/// After a kill: a fresh exchange with a new process (`helper`, already started), sizes
/// [`ECHO_SIZES`], every byte checked on the way back.
fn echo_exchange(node: &Node, mut helper: Proc, deadline: Instant) {
    let hname = helper.expect("NAME", deadline);
    helper.send(&format!("PEERS {}", node.name()));
    let haddr = node.insert(&[hname])[0];
    let mut q = Queue::new(&node.cq);
    let n = ECHO_SIZES.len() as u64;
    const BASE: u64 = 1 << 40;
    for (i, &size) in ECHO_SIZES.iter().enumerate() {
        let i = i as u64;
        q.post(deadline, "a receive", Buf::new(size + SLACK), |b| {
            node.ep.trecv(b, FiAddr::UNSPEC, REPLY_TAG | i, 0, BASE + i)
        });
        let buf = Buf::from(pattern(size, seed(SURVIVOR, ECHOER, i)));
        q.post(deadline, "a send", buf, |b| node.ep.tsend(b, haddr, ECHO_TAG | i, BASE + n + i));
    }
    let mut seen = vec![false; 2 * n as usize];
    for _ in 0..2 * n {
        let c = ok(q.next(deadline, &|| "the exchange with a new process".into()), "after the kill");
        let k = (c.context - BASE) as usize;
        assert!(!std::mem::replace(&mut seen[k], true), "two completions for context {}", c.context);
        if (k as u64) < n {
            let size = ECHO_SIZES[k];
            let want = pattern(size, seed(SURVIVOR, ECHOER, k as u64));
            if let Err(e) = check_bytes(c.bytes(), &want, &format!("echoed message {k}")) {
                panic!("{e}");
            }
        }
    }
    helper.expect("DONE", deadline);
    helper.send("EXIT");
    helper.finish(deadline);
}

/// Run a kill test's survivor in a child process with cross-memory attach as `cma`
/// says (its peers inherit the setting), and require it to succeed.
fn kill_test(dir: &str, cma: Cma) {
    let start = Instant::now();
    let deadline = start + TEST_LIMIT;
    let mut p = spawn(&format!("survivor ({dir} killed)"), &format!("killtest:{dir}"), cma);
    let result = p.expect("RESULT", deadline);
    let log = p.finish(deadline);
    if cma == Cma::On && cma_fell_back(&log) {
        println!("note: cross-memory attach between these processes is not allowed here: the fallback ran instead");
    }
    println!("{dir} killed ({cma:?} CMA): {result} ({:?})", start.elapsed());
}

/// A receiving peer killed while 64 MiB messages stream to it (cross-memory attach: the
/// receiver copies them out of the survivor): see [`receiver_killed`] and [`survivor`].
#[test]
fn receiver_killed_mid_transfer_with_cma() {
    kill_test("receiver", Cma::On);
}

/// [`receiver_killed_mid_transfer_with_cma`] without cross-memory attach (the survivor
/// streams chunks through its bounce buffers).
#[test]
fn receiver_killed_mid_transfer_without_cma() {
    kill_test("receiver", Cma::Off);
}

/// A sending peer killed while streaming 64 MiB messages (cross-memory attach: the
/// survivor copies them out of the victim): see [`sender_killed`] and [`survivor`].
#[test]
fn sender_killed_mid_transfer_with_cma() {
    kill_test("sender", Cma::On);
}

/// [`sender_killed_mid_transfer_with_cma`] without cross-memory attach (the victim
/// streams chunks).
#[test]
fn sender_killed_mid_transfer_without_cma() {
    kill_test("sender", Cma::Off);
}

/// The other moment the provider removes the segments of dead processes: when a domain
/// opens (`ShmDomain::new` calls `cleanup_stale`; opening an endpoint does not).
///
/// Two processes each open an endpoint; one is killed (`SIGKILL`, nothing closed). Then
/// this process opens a domain: the killed one's segment is gone, the live one's is
/// still there; once the live one exits normally, its segment is gone too. (That the
/// killed one's segment outlived it until then is not asserted: another test's process
/// opening a domain at the same time may remove it first.)
#[test]
fn killed_process_segment_removed_when_a_domain_opens() {
    let deadline = Instant::now() + TEST_LIMIT;
    let mut dead = spawn("to be killed", "idle", Cma::Inherit);
    let mut live = spawn("live", "idle", Cma::Inherit);
    let dead_seg = segment_path(&dead.expect("NAME", deadline));
    let live_seg = segment_path(&live.expect("NAME", deadline));
    assert!(dead_seg.exists(), "{}: a live endpoint's segment exists", dead_seg.display());
    assert!(live_seg.exists(), "{}: a live endpoint's segment exists", live_seg.display());
    dead.kill();
    let info = shm_info();
    let fabric = Fabric::open(&info).expect("open fabric");
    let _domain = fabric.domain(&info).expect("open domain");
    assert!(!dead_seg.exists(), "{}: a killed process's segment outlives a domain open", dead_seg.display());
    assert!(live_seg.exists(), "{}: a live process's segment was removed", live_seg.display());
    live.send("EXIT");
    live.finish(deadline);
    assert!(!live_seg.exists(), "{}: an endpoint closed at exit leaves its segment", live_seg.display());
}

// ---------------------------------------------------------------------------------------
// Scale
// ---------------------------------------------------------------------------------------

/// A process with `count` sending endpoints (global indices `first..first + count`),
/// sharing one domain, completion queue and address vector: says `NAMES <their names>`,
/// takes the receiver's name (`PEERS`), sends [`SCALE_SIZES`] from each endpoint (tags
/// `(index, seq)`), says `SENT` once every send completed, and keeps every endpoint
/// open until `EXIT` (so that all of them hold their slot in the receiver's segment at
/// once).
fn senders_child(first: usize, count: usize) {
    let deadline = Instant::now() + TEST_LIMIT;
    let info = shm_info();
    let fabric = Fabric::open(&info).expect("open fabric");
    let domain = fabric.domain(&info).expect("open domain");
    let cq = domain.cq(CqAttr { size: 4096, format: CqFormat::Tagged, ..Default::default() }).expect("open cq");
    let av = domain.av(AvAttr::default()).expect("open av");
    let eps: Vec<Endpoint> = (0..count)
        .map(|_| {
            let ep = domain.endpoint(&info).expect("open endpoint");
            ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).expect("bind cq");
            ep.bind_av(&av).expect("bind av");
            ep.enable().expect("enable");
            ep
        })
        .collect();
    let cmds = Commands::start();
    let names: Vec<String> = eps.iter().map(name_of).collect();
    say("NAMES", &names.join(" "));
    let peers = cmds.peers(deadline);
    assert_eq!(peers.len(), 1);
    let dest = av.insert_one(&Address::Str(peers[0].clone())).expect("av insert");
    let mut q = Queue::new(&cq);
    let mut left = 0;
    for (seq, &size) in SCALE_SIZES.iter().enumerate() {
        for (i, ep) in eps.iter().enumerate() {
            let g = (first + i) as u64;
            let seq = seq as u64;
            let buf = Buf::from(pattern(size, seed(g, 0, seq)));
            q.post(deadline, "a send", buf, |b| ep.tsend(b, dest, tag(g, seq), tag(g, seq)));
            left += 1;
        }
    }
    while left > 0 {
        ok(q.next(deadline, &|| format!("{left} sends to the receiver")), "a send to the receiver");
        left -= 1;
    }
    say("SENT", "");
    cmds.wait_exit(&cq, deadline);
    drop(eps);
}

/// One endpoint receives from 256 others: 4 processes of 64 endpoints, each sending one
/// inline, one bounce-buffer and one large message ([`SCALE_SIZES`]). The receiver's
/// segment has [`SLOTS`] (256) sender slots and each sending endpoint takes one (an
/// endpoint sending to itself would take one too, leaving 255 for others; the receiver
/// here sends to nobody but answers large messages through slots in the senders'
/// segments).
///
/// Asserted: every message arrives once, intact, with its tag and source address; the
/// receiver's segment file has memory for all 256 slots (a slot's memory is allocated
/// when claimed, and the lowest free slot is claimed first, so slot 255 is only ever
/// claimed while the other 255 are held: 256 peers at once); a 257th sender is refused
/// with `Again` (back-pressure, buffer given back) while all 256 hold their slots, and
/// gets through once 64 of them have closed.
#[test]
fn one_endpoint_receives_from_256_peers() {
    let start = Instant::now();
    let deadline = start + TEST_LIMIT;
    let info = shm_info();
    let node = Node::open(&info, 4096);
    let me = node.name();
    let mut procs: Vec<Proc> = (0..SENDER_PROCS)
        .map(|p| {
            let first = p * SENDERS_PER_PROC;
            spawn(&format!("senders {first}.."), &format!("senders:{first}:{SENDERS_PER_PROC}"), Cma::Inherit)
        })
        .collect();
    let names: Vec<String> = expect_all(&mut procs, "NAMES", deadline)
        .iter()
        .flat_map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .collect();
    assert_eq!(names.len(), SLOTS, "one name per sending endpoint");
    let addrs = node.insert(&names);
    let mut q = Queue::new(&node.cq);
    let mut pending: HashMap<u64, (usize, usize)> = HashMap::new();
    for (seq, &size) in SCALE_SIZES.iter().enumerate() {
        for g in 0..SLOTS {
            let t = tag(g as u64, seq as u64);
            q.post(deadline, "a receive", Buf::new(size + SLACK), |b| node.ep.trecv(b, FiAddr::UNSPEC, t, 0, t));
            pending.insert(t, (g, seq));
        }
    }
    for p in &mut procs {
        p.send(&format!("PEERS {me}"));
    }
    while !pending.is_empty() {
        let left = pending.len();
        let c = ok(q.next(deadline, &|| format!("{left} messages from 256 peers")), "a message from a peer");
        let Some((g, seq)) = pending.remove(&c.context) else { panic!("a second completion for {:#x}", c.context) };
        let size = SCALE_SIZES[seq];
        let what = format!("message {seq} of sender {g} ({size} bytes)");
        assert_eq!(c.tag, tag(g as u64, seq as u64), "{what}: tag");
        assert_eq!(c.src, addrs[g], "{what}: source address");
        if let Err(e) = check_bytes(c.bytes(), &pattern(size, seed(g as u64, 0, seq as u64)), &what) {
            panic!("{e}");
        }
    }
    expect_all(&mut procs, "SENT", deadline);
    let seg = std::fs::metadata(segment_path(&me)).expect("the receiver's segment");
    let allocated = seg.blocks() * 512;
    assert!(
        allocated >= (HEADER_SIZE + SLOTS * SLOT_SIZE) as u64,
        "the receiver's segment has {allocated} bytes allocated: fewer than {SLOTS} slots were ever claimed"
    );

    // A 257th sender, while the 256 hold their slots.
    let extra = Node::open(&info, 0);
    let dest = extra.insert(std::slice::from_ref(&me))[0];
    let payload = pattern(1000, 257);
    let e = extra.ep.tsend(Buf::from(payload.clone()), dest, tag(SLOTS as u64, 0), 1).expect_err("a 257th sender");
    assert_eq!(e.error, Error::Again, "a 257th sender is told to retry");
    let mut buf = e.buffers.into_buf().expect("the buffer comes back");
    assert_eq!(buf.as_slice(), &payload[..], "untouched");
    let t = tag(SLOTS as u64, 0);
    node.ep.trecv(Buf::new(1000 + SLACK), FiAddr::UNSPEC, t, 0, t).expect("post a receive");
    // 64 senders close (their process exits): their slots come free once the receiver
    // sees them closed.
    let mut first = procs.remove(0);
    first.send("EXIT");
    first.finish(deadline);
    let mut spins = 0;
    loop {
        if let Some(r) = q.poll() {
            panic!("a completion while the 257th sender waits: {r:?}");
        }
        match extra.ep.tsend(buf, dest, t, 1) {
            Ok(()) => break,
            Err(e) if e.error == Error::Again => buf = e.buffers.into_buf().expect("the buffer comes back"),
            Err(e) => panic!("the 257th sender, after 64 peers left: {}", e.error),
        }
        assert!(Instant::now() < deadline, "watchdog: the 257th sender never gets a slot");
        pause(&mut spins);
    }
    let c = ok(q.next(deadline, &|| "the 257th sender's message".into()), "the 257th sender's message");
    assert_eq!(c.context, t);
    if let Err(e) = check_bytes(c.bytes(), &payload, "the 257th sender's message") {
        panic!("{e}");
    }
    let mut xq = Queue::new(&extra.cq);
    ok(xq.next(deadline, &|| "the 257th sender's send".into()), "the 257th sender's send");
    for p in &mut procs {
        p.send("EXIT");
    }
    for p in procs {
        p.finish(deadline);
    }
    println!("256 peers: {:?}", start.elapsed());
}

// ---------------------------------------------------------------------------------------
// Blocking waits
// ---------------------------------------------------------------------------------------

/// One side of a [`BIG`] message whose two ends wait only in blocking reads
/// ([`CompletionQueue::sread`]), as applications that sleep instead of polling do:
/// `recv` posts the receive, `send` the send; each then waits for its completion in one
/// `sread` of at most [`STALL_LIMIT`], and fails if it returns empty-handed (nothing
/// completed for that long: the transfer stalled). The receiver checks every byte.
fn blocking_child(side: &str) {
    let deadline = Instant::now() + TEST_LIMIT;
    let node = Node::open(&shm_info(), 0);
    let cmds = Commands::start();
    say("NAME", &node.name());
    let peer = node.insert(&cmds.peers(deadline))[0];
    let start = Instant::now();
    let posted = match side {
        "recv" => node.ep.trecv(Buf::new(BIG), FiAddr::UNSPEC, KILL_TAG, 0, 1),
        "send" => node.ep.tsend(Buf::from(pattern(BIG, seed(VICTIM, SURVIVOR, 0))), peer, KILL_TAG, 1),
        _ => panic!("unknown side {side}"),
    };
    posted.unwrap_or_else(|e| panic!("{side}: post failed: {}", e.error));
    let c = match node.cq.wait_next(Some(STALL_LIMIT)) {
        Ok(Some(Ok(c))) => c,
        Ok(Some(Err(e))) => panic!("{side}: error completion {e:?}"),
        Ok(None) => panic!(
            "{side}: stalled: nothing completed after {:?} with the {BIG}-byte transfer still in flight",
            start.elapsed()
        ),
        Err(e) => panic!("{side}: sread failed: {e}"),
    };
    assert_eq!(c.context, 1);
    if side == "recv" {
        if let Err(e) = check_bytes(c.bytes(), &pattern(BIG, seed(VICTIM, SURVIVOR, 0)), "the big message") {
            panic!("{e}");
        }
    }
    drop(c);
    say("DONE", &format!("{side} done in {:?}", start.elapsed()));
    cmds.wait_exit(&node.cq, deadline);
}

/// A [`BIG`] message between two processes that both wait in `sread` (see
/// [`blocking_child`]), cross-memory attach as `cma` says.
fn blocking_waits(cma: Cma) {
    let deadline = Instant::now() + TEST_LIMIT;
    let mut procs = vec![spawn("receiver", "blocking:recv", cma), spawn("sender", "blocking:send", cma)];
    let names = expect_all(&mut procs, "NAME", deadline);
    procs[0].send(&format!("PEERS {}", names[1]));
    procs[1].send(&format!("PEERS {}", names[0]));
    for d in expect_all(&mut procs, "DONE", deadline) {
        println!("{d} ({cma:?} CMA)");
    }
    for p in &mut procs {
        p.send("EXIT");
    }
    for p in procs {
        p.finish(deadline);
    }
}

/// A 64 MiB message with both ends asleep in `sread` between wake-ups, with
/// cross-memory attach: it completes (the receiver's copy and its acknowledgement wake
/// the sender).
#[test]
fn blocking_waits_64mib_with_cma() {
    blocking_waits(Cma::On);
}

/// [`blocking_waits_64mib_with_cma`] without cross-memory attach: the sender streams
/// the message through its 8 bounce buffers of 16 KiB, and must be told when the
/// receiver has emptied them.
#[test]
fn blocking_waits_64mib_without_cma() {
    blocking_waits(Cma::Off);
}
