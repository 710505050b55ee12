//! Stress test of the shm ring as the provider uses it: many producer threads, each with
//! its own ring, all drained by one consumer thread that polls every ring.

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use fabric_shm::ring::{Consumer, Producer, Ring, ENTRY_PAYLOAD, RING_ENTRIES};
use fabric_testkit::Rng;

/// Producers, one ring each.
const PRODUCERS: usize = 16;
/// Messages in all.
const MESSAGES: u64 = 200_000;
/// Messages per producer.
const PER_PRODUCER: u64 = MESSAGES / PRODUCERS as u64;
/// Give up (fail instead of hanging) after this long.
const DEADLINE: Duration = Duration::from_secs(120);

/// Where the header fields lie in a payload; the rest is a pattern derived from them.
const ID: usize = 0;
const SEQ: usize = 8;
const SUM: usize = 16;
const BODY: usize = 24;

/// Rings in zero-filled, aligned heap memory, initialised with `init`: as in a fresh
/// shared mapping.
struct Rings(Vec<NonNull<Ring>>);

impl Rings {
    fn new(n: usize) -> Rings {
        Rings(
            (0..n)
                .map(|_| {
                    // SAFETY: `Ring` is not zero-sized.
                    let raw = unsafe { alloc::alloc_zeroed(Layout::new::<Ring>()) }.cast::<Ring>();
                    let ring = NonNull::new(raw).expect("out of memory");
                    // SAFETY: zero bytes are a valid `Ring`; the memory is aligned for it and
                    // stays allocated until `drop`.
                    unsafe { ring.as_ref() }.init();
                    ring
                })
                .collect(),
        )
    }
}

impl Drop for Rings {
    fn drop(&mut self) {
        for ring in &self.0 {
            // SAFETY: allocated in `new` with this layout; the ends are gone.
            unsafe { alloc::dealloc(ring.as_ptr().cast(), Layout::new::<Ring>()) };
        }
    }
}

/// FNV-1a over the header identity and the body.
fn checksum(id: u64, seq: u64, body: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in id.to_le_bytes().iter().chain(&seq.to_le_bytes()).chain(body) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn fill(e: &mut [u8; ENTRY_PAYLOAD], id: u64, seq: u64) {
    e[ID..ID + 8].copy_from_slice(&id.to_le_bytes());
    e[SEQ..SEQ + 8].copy_from_slice(&seq.to_le_bytes());
    Rng::new(id << 40 ^ seq).fill(&mut e[BODY..]);
    let sum = checksum(id, seq, &e[BODY..]);
    e[SUM..SUM + 8].copy_from_slice(&sum.to_le_bytes());
}

/// `(producer id, sequence)` of an intact message.
fn check(e: &[u8; ENTRY_PAYLOAD]) -> (u64, u64) {
    let field = |at: usize| u64::from_le_bytes(e[at..at + 8].try_into().unwrap());
    let (id, seq) = (field(ID), field(SEQ));
    assert_eq!(field(SUM), checksum(id, seq, &e[BODY..]), "corrupt payload of producer {id} seq {seq}");
    (id, seq)
}

/// Sets `stop` when dropped, in particular when the consumer panics, so the producers do
/// not spin forever.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[test]
fn many_producers_one_consumer() {
    let rings = Rings::new(PRODUCERS);
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    thread::scope(|s| {
        for (id, &ring) in rings.0.iter().enumerate() {
            // SAFETY: initialised, outlives the scope; the only producer of this ring.
            let mut p = unsafe { Producer::new(ring) };
            let stop = &stop;
            s.spawn(move || {
                for seq in 0..PER_PRODUCER {
                    while !p.try_push(|e| fill(e, id as u64, seq)) {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        thread::yield_now();
                    }
                }
            });
        }

        // SAFETY: initialised, outlive the scope; the only consumer of each ring.
        let mut consumers: Vec<Consumer> = rings.0.iter().map(|&ring| unsafe { Consumer::new(ring) }).collect();
        let _stop = StopOnDrop(&stop);
        let mut next = [0u64; PRODUCERS];
        let mut received = 0u64;
        let mut max_batch = 0;
        while received < MESSAGES {
            let mut idle = true;
            for (ring, c) in consumers.iter_mut().enumerate() {
                // Drain at most one ring's worth per visit, as a fair poller would.
                let mut batch = 0;
                while batch < RING_ENTRIES {
                    let Some((id, seq)) = c.peek(check) else { break };
                    c.advance();
                    assert_eq!(id, ring as u64, "message of producer {id} in ring {ring}");
                    assert_eq!(seq, next[ring], "producer {id}: out of order, lost or duplicated");
                    next[ring] += 1;
                    received += 1;
                    batch += 1;
                }
                max_batch = max_batch.max(batch);
                idle &= batch == 0;
            }
            if idle {
                assert!(start.elapsed() < DEADLINE, "stuck at {received} of {MESSAGES} messages: {next:?}");
                thread::yield_now();
            }
        }
        // Nothing more arrives: every ring is empty once all producers are done.
        assert_eq!(next, [PER_PRODUCER; PRODUCERS]);
        assert!(max_batch > 1, "the rings never held more than one message");
    });
    let consumers_left = rings.0.iter().map(|&ring| {
        // SAFETY: the scope's consumers are gone; a fresh one at position 0 is the only one.
        unsafe { Consumer::new(ring) }
    });
    // A fresh consumer starts at position 0, which after wrapping around holds an already
    // consumed entry (sequence of a later lap): it must read as empty, not as a message.
    for c in consumers_left {
        assert!(c.is_empty());
        assert_eq!(c.peek(|_| ()), None);
    }
    eprintln!("{MESSAGES} messages through {PRODUCERS} rings in {:?}", start.elapsed());
}
