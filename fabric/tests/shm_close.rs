//! A completed send over shm is not lost when its sender goes away: a sender process
//! posts [`N`] messages (tagged and untagged, alternately), waits for every send's
//! completion, then closes its endpoint (or exits without closing it), and only then
//! does the receiver, in the test's own process, post its receives. Each receive must
//! get its own message, byte for byte, in order.
//!
//! Cases (each run [`ROUNDS`] times, with a fresh sender process and receiver each
//! time, once with each [`Ending`]):
//!
//! - [`messages_survive_their_sender_idle_receiver`]: the receiver does not look at
//!   its segment at all until the sender has exited; the messages (inline and
//!   bounce-buffer sizes) fit the ring and the bounce buffers, so every send can
//!   complete at once. (Before the fix the receiver ignored a slot whose sender had
//!   closed before the receiver first saw it: every message was lost.)
//! - [`messages_survive_their_sender_polling_receiver`]: the receiver drives progress
//!   (slowly, with no receive posted) while the sender runs, and half the messages
//!   need bounce buffers, far more than a slot has: sends wait for room. (Before the
//!   fix such a send completed while its data was still queued in the sender's memory,
//!   and closing dropped it.)
//! - [`large_messages_complete_before_their_sender_leaves`] (and `_without_cma`):
//!   large messages (cross-memory attach, shared copies, or chunks through bounce
//!   buffers) complete only once the receiver has them, so the receiver posts its
//!   receives once the sender has posted its sends; the sender then waits for its
//!   completions and leaves, and the receiver reads its completions afterwards.
//!
//! The sender is this test binary run again (see `children`), its role in
//! [`ROLE_ENV`], the receiver's address in [`TO_ENV`].

#![cfg(feature = "shm")]

mod children;

use children::{say, Proc};
use fabric::*;
use fabric_shm::proto::INLINE_MAX;
use fabric_shm::segment::{BOUNCE_COUNT, BOUNCE_SIZE};
use fabric_testkit::mix;
use std::collections::BTreeSet;
use std::thread;
use std::time::{Duration, Instant};

/// The variable that makes [`child_entry`] a sender: `<case>:<ending>:<round>`.
const ROLE_ENV: &str = "FABRIC_SHM_CLOSE_ROLE";
/// The variable holding the receiver's address, for the sender.
const TO_ENV: &str = "FABRIC_SHM_CLOSE_TO";
/// The environment variable of the provider's `disable_cma` parameter.
const CMA_ENV: &str = "FI_SHM_DISABLE_CMA";
/// Messages per round.
const N: u64 = 64;
/// Rounds per case and ending.
const ROUNDS: u64 = 12;
/// How long one round may take before it fails as hung (or as lost messages).
const ROUND_LIMIT: Duration = Duration::from_secs(30);
/// Extra room in receive buffers, so that a message longer than sent shows.
const SLACK: usize = 16;
/// Tag bits of the tagged messages (ORed with the sequence number).
const TAG: u64 = 0x5e1 << 40;

/// How the sender leaves once its sends completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// Close the endpoint and everything else, then exit.
    Close,
    /// Exit at once, without closing anything.
    Exit,
}

/// What a round sends, and how the receiver behaves meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    /// Inline and bounce sizes that fit the ring and the bounce buffers; the receiver
    /// is idle until the sender exited.
    Idle,
    /// Inline and bounce sizes, more bounce messages than buffers; the receiver
    /// drives progress slowly while the sender runs.
    Polling,
    /// Large messages too; the receiver posts once the sender posted.
    Large,
}

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::Idle => "idle",
            Case::Polling => "polling",
            Case::Large => "large",
        }
    }

    fn parse(s: &str) -> Case {
        match s {
            "idle" => Case::Idle,
            "polling" => Case::Polling,
            "large" => Case::Large,
            _ => panic!("unknown case {s}"),
        }
    }

    /// The size of message `seq`.
    fn size(self, seq: u64) -> usize {
        const SMALL: [usize; 4] = [0, 1, 100, INLINE_MAX];
        const BOUNCE: [usize; 3] = [INLINE_MAX + 1, 4 << 10, BOUNCE_SIZE];
        const LARGE: [usize; 4] = [BOUNCE_SIZE + 1, 100 << 10, 1 << 20, (2 << 20) + 12345];
        let s = seq as usize;
        match self {
            // The last BOUNCE_COUNT messages go through bounce buffers: no more than
            // a slot has.
            Case::Idle if s >= N as usize - BOUNCE_COUNT => BOUNCE[s % BOUNCE.len()],
            Case::Idle => SMALL[s % SMALL.len()],
            Case::Polling if s % 2 == 0 => BOUNCE[(s / 2) % BOUNCE.len()],
            Case::Polling => SMALL[(s / 2) % SMALL.len()],
            Case::Large if s % 4 == 3 => LARGE[(s / 4) % LARGE.len()],
            Case::Large if s % 2 == 1 => BOUNCE[(s / 2) % BOUNCE.len()],
            Case::Large => SMALL[(s / 2) % SMALL.len()],
        }
    }
}

/// The payload of message `seq` of `round`: every byte depends on both.
fn payload(round: u64, seq: u64, len: usize) -> Vec<u8> {
    let seed = mix((round << 32) ^ seq ^ 0xc105e);
    (0..len).map(|i| (mix(seed ^ (i as u64 / 8)) >> (8 * (i % 8))) as u8).collect()
}

/// Message `seq` is tagged when even.
fn tagged(seq: u64) -> bool {
    seq % 2 == 0
}

struct Node {
    ep: Endpoint,
    cq: CompletionQueue,
    av: AddressVector,
    _domain: Domain,
    _fabric: Fabric,
}

impl Node {
    fn open() -> Node {
        let hints = Hints::new().provider("shm").ep_type(EpType::Rdm).caps(Caps::MSG | Caps::TAGGED);
        let info = getinfo(&hints).expect("getinfo for shm").remove(0);
        let fabric = Fabric::open(&info).expect("open fabric");
        let domain = fabric.domain(&info).expect("open domain");
        let cq =
            domain.cq(CqAttr { size: 4 * N as usize, format: CqFormat::Tagged, ..Default::default() }).expect("cq");
        let av = domain.av(AvAttr::default()).expect("open av");
        let ep = domain.endpoint(&info).expect("open endpoint");
        ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).expect("bind cq");
        ep.bind_av(&av).expect("bind av");
        ep.enable().expect("enable");
        Node { ep, cq, av, _domain: domain, _fabric: fabric }
    }

    fn name(&self) -> String {
        match self.ep.name().expect("endpoint name") {
            Address::Str(s) => s,
            a => panic!("an shm endpoint named by a non-string address {a:?}"),
        }
    }
}

/// The next completion within the deadline; a failed operation fails the test.
#[track_caller]
fn next(cq: &CompletionQueue, deadline: Instant, what: &str) -> Completion {
    let left = deadline.saturating_duration_since(Instant::now());
    match cq.wait_next(Some(left)).expect("wait on the cq") {
        Some(Ok(c)) => c,
        Some(Err(e)) => panic!("{what}: operation {} failed: {}", e.context, e.err),
        None => panic!("{what}: nothing completed in time"),
    }
}

/// The child's entry point: a sender when [`ROLE_ENV`] is set (else a test that
/// passes at once).
#[test]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE_ENV) else { return };
    thread::spawn(|| {
        thread::sleep(2 * ROUND_LIMIT);
        eprintln!("sender {}: watchdog: still running: exiting", std::process::id());
        std::process::exit(4);
    });
    let parts: Vec<&str> = role.split(':').collect();
    assert_eq!(parts.len(), 3, "role {role}");
    let case = Case::parse(parts[0]);
    let ending = match parts[1] {
        "close" => Ending::Close,
        "exit" => Ending::Exit,
        e => panic!("unknown ending {e}"),
    };
    let round: u64 = parts[2].parse().expect("round");
    let to = std::env::var(TO_ENV).expect("the receiver's address");
    sender(case, ending, round, &to);
}

/// Send [`N`] messages to `to`, wait for their completions, and leave.
fn sender(case: Case, ending: Ending, round: u64, to: &str) {
    let deadline = Instant::now() + ROUND_LIMIT;
    let n = Node::open();
    let dest = n.av.insert(&[Address::Str(to.to_string())]).expect("insert the receiver")[0];
    let mut done = BTreeSet::new();
    for seq in 0..N {
        let data = payload(round, seq, case.size(seq));
        loop {
            let buf = Buf::from(&data[..]);
            let r = if tagged(seq) { n.ep.tsend(buf, dest, TAG | seq, seq) } else { n.ep.send(buf, dest, seq) };
            match r {
                Ok(()) => break,
                Err(PostError { error: Error::Again, .. }) => {
                    if let Ok(c) = n.cq.read_one() {
                        assert!(done.insert(c.context), "send {} completed twice", c.context);
                    }
                }
                Err(e) => panic!("send {seq}: {e}"),
            }
        }
    }
    say("POSTED", "");
    while done.len() < N as usize {
        let c = next(&n.cq, deadline, "sender");
        assert!(c.flags.contains(Caps::SEND), "a send's completion: {:?}", c.flags);
        assert!(done.insert(c.context), "send {} completed twice", c.context);
    }
    say("SENT", "");
    match ending {
        Ending::Close => {
            let Node { ep, cq, av, _domain, _fabric } = n;
            ep.close().expect("close the endpoint");
            drop((cq, av, _domain, _fabric));
        }
        Ending::Exit => std::process::exit(0),
    }
}

/// One round: a sender process, then the receives, checked.
fn round(case: Case, ending: Ending, round: u64, disable_cma: bool) {
    let deadline = Instant::now() + ROUND_LIMIT;
    let rx = Node::open();
    let ending_name = match ending {
        Ending::Close => "close",
        Ending::Exit => "exit",
    };
    let role = format!("{}:{ending_name}:{round}", case.name());
    let to = rx.name();
    let mut child = Proc::spawn(&format!("sender {role}"), ROLE_ENV, &role, |c| {
        c.env(TO_ENV, &to);
        if disable_cma {
            c.env(CMA_ENV, "1");
        }
    });
    let what = format!("{role}{}", if disable_cma { " without cma" } else { "" });
    let post = |seq: u64| {
        let buf = Buf::new(case.size(seq) + SLACK);
        let r = if tagged(seq) {
            rx.ep.trecv(buf, FiAddr::UNSPEC, TAG | seq, 0, seq)
        } else {
            rx.ep.recv(buf, FiAddr::UNSPEC, seq)
        };
        r.unwrap_or_else(|e| panic!("{what}: post receive {seq}: {e}"));
    };
    // Completions read while waiting for the sender (the large case's).
    let mut early = Vec::new();
    match case {
        Case::Idle => child.expect("POSTED", deadline),
        Case::Polling => {
            // Progress, slowly, with no receive posted: whatever arrives is held.
            while !child.exited() {
                match rx.cq.read_one() {
                    Err(Error::Again) => {}
                    other => panic!("{what}: a completion with no receive posted: {other:?}"),
                }
                if Instant::now() > deadline {
                    child.fail("watchdog: did not exit in time");
                }
                thread::sleep(Duration::from_millis(1));
            }
            child.expect("POSTED", deadline)
        }
        Case::Large => {
            child.expect("POSTED", deadline);
            (0..N).for_each(post);
            // The receiver copies large messages: progress until the sender is done.
            while child.try_expect("SENT").is_none() {
                match rx.cq.read_one() {
                    Err(Error::Again) => {}
                    Ok(c) => early.push(c),
                    Err(e) => panic!("{what}: reading the cq: {e}"),
                }
                if Instant::now() > deadline {
                    child.fail("watchdog: no SENT line in time");
                }
            }
            String::new()
        }
    };
    if case != Case::Large {
        child.expect("SENT", deadline);
    }
    child.finish(deadline);
    if case != Case::Large {
        (0..N).for_each(post);
    }
    let mut got = Vec::new();
    let mut early = early.into_iter();
    for k in 0..N {
        let c = early.next().unwrap_or_else(|| next(&rx.cq, deadline, &format!("{what}: after {k} of {N} receives")));
        let seq = c.context;
        assert!(seq < N, "{what}: completion of an unknown context {seq}");
        assert!(c.flags.contains(Caps::RECV), "{what}: receive {seq}: flags {:?}", c.flags);
        assert_eq!(c.flags.contains(Caps::TAGGED), tagged(seq), "{what}: receive {seq}: flags {:?}", c.flags);
        if tagged(seq) {
            assert_eq!(c.tag, TAG | seq, "{what}: receive {seq}: tag");
        }
        let want = payload(round, seq, case.size(seq));
        assert!(
            c.bytes() == &want[..],
            "{what}: receive {seq}: {} bytes, not message {seq} ({} bytes)",
            c.len,
            want.len()
        );
        got.push(seq);
    }
    if case == Case::Large {
        // Large copies may finish out of order; every receive got its own message.
        got.sort_unstable();
    }
    assert_eq!(got, (0..N).collect::<Vec<_>>(), "{what}: receives in order, once each");
    assert!(matches!(rx.cq.read_one(), Err(Error::Again)), "{what}: nothing more");
}

fn rounds(case: Case, disable_cma: bool) {
    for r in 0..ROUNDS {
        for ending in [Ending::Close, Ending::Exit] {
            round(case, ending, r, disable_cma);
        }
    }
}

#[test]
fn messages_survive_their_sender_idle_receiver() {
    rounds(Case::Idle, false);
}

#[test]
fn messages_survive_their_sender_polling_receiver() {
    rounds(Case::Polling, false);
}

#[test]
fn large_messages_complete_before_their_sender_leaves() {
    rounds(Case::Large, false);
}

#[test]
fn large_messages_complete_before_their_sender_leaves_without_cma() {
    rounds(Case::Large, true);
}
