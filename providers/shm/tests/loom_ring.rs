//! Loom model checking of the shm ring: `src/ring.rs` itself, compiled against loom's
//! atomics and cell (which also checks that no payload access races with another).
//!
//! Runs under plain `cargo test`; no `--cfg loom` needed.

/// The loom counterpart of the crate's `sync` module (`src/sync.rs`): same names, same
/// signatures.
mod sync {
    pub(crate) use loom::cell::UnsafeCell;
    pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};

    /// The loom types are not plain data: no shared-memory layout to check.
    pub(crate) const PLAIN_LAYOUT: bool = false;

    /// Drops the std-only unit tests of `ring.rs`.
    macro_rules! std_only {
        ($($item:item)*) => {};
    }
    pub(crate) use std_only;
}

#[path = "../src/ring.rs"]
mod ring;

use std::ptr::NonNull;

use loom::thread;
use ring::{Consumer, Producer, Ring, ENTRY_PAYLOAD, RING_ENTRIES};

/// A heap ring shared by one producer and one consumer thread of a loom execution; freed
/// on drop (after the threads have been joined).
struct TestRing(NonNull<Ring>);

impl TestRing {
    fn new() -> TestRing {
        TestRing(NonNull::from(Box::leak(Ring::new_boxed())))
    }

    fn ends(&self) -> (Producer, Consumer) {
        // SAFETY: initialised by `new_boxed`; the caller keeps `self` until both ends are
        // gone (the threads they move into are joined before `self` drops); one end each.
        unsafe { (Producer::new(self.0), Consumer::new(self.0)) }
    }
}

impl Drop for TestRing {
    fn drop(&mut self) {
        // SAFETY: came from `Box::leak` in `new`; no end is left.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

/// Write `value` at both ends of the payload (two different cache lines of the entry).
fn fill(e: &mut [u8; ENTRY_PAYLOAD], value: u64) {
    e[..8].copy_from_slice(&value.to_le_bytes());
    e[ENTRY_PAYLOAD - 8..].copy_from_slice(&(!value).to_le_bytes());
}

/// The value of a payload written by [`fill`], checking that it is intact.
fn read(e: &[u8; ENTRY_PAYLOAD]) -> u64 {
    let v = u64::from_le_bytes(e[..8].try_into().unwrap());
    assert_eq!(u64::from_le_bytes(e[ENTRY_PAYLOAD - 8..].try_into().unwrap()), !v, "torn payload");
    v
}

fn push_spin(p: &mut Producer, value: u64) {
    while !p.try_push(|e| fill(e, value)) {
        thread::yield_now();
    }
}

fn pop_spin(c: &mut Consumer) -> u64 {
    loop {
        if let Some(v) = c.peek(read) {
            c.advance();
            return v;
        }
        thread::yield_now();
    }
}

/// Entries go from the producer thread to the consumer thread in order and intact (the
/// producer's Release publication / the consumer's Acquire).
#[test]
fn loom_push_pop_in_order() {
    loom::model(|| {
        let ring = TestRing::new();
        let (mut p, mut c) = ring.ends();
        let producer = thread::spawn(move || {
            for v in 0..4 {
                push_spin(&mut p, v);
            }
        });
        let consumer = thread::spawn(move || {
            for v in 0..4 {
                assert_eq!(pop_spin(&mut c), v);
            }
            assert!(c.is_empty());
        });
        producer.join().unwrap();
        consumer.join().unwrap();
    });
}

/// A full ring: the producer thread waits until the consumer thread frees entries, then
/// reuses them while the consumer may still be reading the next ones (the consumer's
/// Release free / the producer's Acquire: the reads of a message happen before the writes
/// of the next message in the same entry).
#[test]
fn loom_full_then_consumer_frees() {
    loom::model(|| {
        let ring = TestRing::new();
        let (mut p, mut c) = ring.ends();
        // Filled before the threads start (no interleavings to explore there).
        for v in 0..RING_ENTRIES as u64 {
            assert!(p.try_push(|e| fill(e, v)));
        }
        assert!(!p.has_room());
        assert!(!p.try_push(|_| unreachable!("fill called on a full ring")));
        let producer = thread::spawn(move || {
            for v in 0..3 {
                push_spin(&mut p, 1000 + v);
            }
            p
        });
        let consumer = thread::spawn(move || {
            for v in 0..4 {
                assert_eq!(pop_spin(&mut c), v);
            }
            c
        });
        let p = producer.join().unwrap();
        let mut c = consumer.join().unwrap();
        // Left: positions 4..64 of the first lap, then the producer's three.
        assert!(p.has_room());
        for v in (4..RING_ENTRIES as u64).chain(1000..1003) {
            assert_eq!(c.peek(read), Some(v));
            c.advance();
        }
        assert!(c.is_empty());
        // And `init` makes it a fresh, empty ring again (the old ends are not used again).
        // SAFETY: valid until `ring` drops.
        unsafe { ring.0.as_ref() }.init();
        let (mut p, c) = ring.ends();
        assert!(c.is_empty());
        assert!(p.try_push(|e| fill(e, 7)));
        assert_eq!(c.peek(read), Some(7));
    });
}

/// The producer's look ahead: on a full ring it may learn that an entry is free from a
/// LATER entry of the same lap, which the consumer thread freed after it, and then write
/// the earlier entry without loading its own sequence number. The consumer's reads of
/// the earlier entry must still happen before those writes (loom's cell tracking fails
/// the model otherwise), and nothing is lost or torn.
#[test]
fn loom_lookahead_reuses_entries_freed_in_order() {
    loom::model(|| {
        let ring = TestRing::new();
        let (mut p, mut c) = ring.ends();
        for v in 0..RING_ENTRIES as u64 {
            assert!(p.try_push(|e| fill(e, v)));
        }
        // The first lap's entries up to the one looked ahead at are read in the thread.
        let ahead = RING_ENTRIES as u64 / 4;
        let producer = thread::spawn(move || {
            push_spin(&mut p, 1000);
            p
        });
        let consumer = thread::spawn(move || {
            for v in 0..=ahead {
                assert_eq!(pop_spin(&mut c), v);
            }
            c
        });
        let mut p = producer.join().unwrap();
        let mut c = consumer.join().unwrap();
        // Whichever way the producer found room, the rest of the first lap's freed
        // entries are its to fill, in order.
        for v in 1..=ahead {
            assert!(p.try_push(|e| fill(e, 1000 + v)));
        }
        assert!(!p.has_room());
        for v in (ahead + 1..RING_ENTRIES as u64).chain(1000..=1000 + ahead) {
            assert_eq!(c.peek(read), Some(v));
            c.advance();
        }
        assert!(c.is_empty());
    });
}

/// `reserve` then `publish` hands entries over as `try_push` does: in order and intact,
/// with the producer reusing entries the consumer thread frees meanwhile; a reservation
/// dropped unpublished shows nothing.
#[test]
fn loom_reserve_publish() {
    loom::model(|| {
        let ring = TestRing::new();
        let (mut p, mut c) = ring.ends();
        // Filled but one entry before the threads start.
        for v in 0..RING_ENTRIES as u64 - 1 {
            let mut r = p.reserve().expect("room");
            fill(r.payload(), v);
            r.publish();
        }
        fill(p.reserve().expect("room").payload(), 999);
        let producer = thread::spawn(move || {
            for v in 0..2 {
                loop {
                    if let Some(mut r) = p.reserve() {
                        fill(r.payload(), 1000 + v);
                        r.publish();
                        break;
                    }
                    thread::yield_now();
                }
            }
        });
        let consumer = thread::spawn(move || {
            for v in 0..2 {
                assert_eq!(pop_spin(&mut c), v);
            }
            c
        });
        producer.join().unwrap();
        let mut c = consumer.join().unwrap();
        for v in 2..RING_ENTRIES as u64 - 1 {
            assert_eq!(pop_spin(&mut c), v);
        }
        assert_eq!(pop_spin(&mut c), 1000);
        assert_eq!(pop_spin(&mut c), 1001);
        assert!(c.is_empty());
    });
}

/// `peek_ptr` sees what `peek` sees, marks it seen for `advance`, and finds an empty ring
/// empty.
#[test]
fn loom_peek_ptr_then_advance() {
    loom::model(|| {
        let ring = TestRing::new();
        let (mut p, mut c) = ring.ends();
        assert!(c.peek_ptr().is_none());
        assert!(p.try_push(|e| fill(e, 3)));
        let at = c.peek_ptr().expect("published");
        // SAFETY: published and not yet advanced past; the ring lives until `ring` drops.
        assert_eq!(read(unsafe { at.as_ref() }), 3);
        c.advance();
        assert!(c.peek_ptr().is_none());
        assert!(c.is_empty());
    });
}

/// `front` hands out the oldest published entry, and `consume` frees it, against a
/// producer publishing concurrently: every message once, in order, intact. (Loom does
/// not track reads through the handle's pointer; `read` checks the payload is whole.)
#[test]
fn loom_front_then_consume() {
    loom::model(|| {
        let ring = TestRing::new();
        let (mut p, mut c) = ring.ends();
        let producer = thread::spawn(move || {
            for v in 0..2 {
                push_spin(&mut p, v);
            }
        });
        let consumer = thread::spawn(move || {
            for v in 0..2 {
                let f = loop {
                    if let Some(f) = c.front() {
                        break f;
                    }
                    thread::yield_now();
                };
                // SAFETY: published and not consumed yet; the ring lives until `ring`
                // drops, after the join.
                assert_eq!(read(unsafe { f.ptr().as_ref() }), v);
                f.consume();
            }
            assert!(c.front().is_none());
            assert!(c.is_empty());
        });
        producer.join().unwrap();
        consumer.join().unwrap();
    });
}

/// `consume_next` frees the entry and hands out the next published one, against a
/// producer that waits on a full ring and reuses the entries freed meanwhile (the Release
/// free / the producer's Acquire, as for `advance`): every message once, in order,
/// intact.
#[test]
fn loom_front_then_consume_next() {
    loom::model(|| {
        let ring = TestRing::new();
        let (mut p, mut c) = ring.ends();
        // Filled before the threads start, but for one entry.
        for v in 0..RING_ENTRIES as u64 - 1 {
            assert!(p.try_push(|e| fill(e, v)));
        }
        let producer = thread::spawn(move || {
            for v in 0..3 {
                push_spin(&mut p, 1000 + v);
            }
        });
        let consumer = thread::spawn(move || {
            let mut want = (0..RING_ENTRIES as u64 - 1).chain(1000..1003);
            let mut left = RING_ENTRIES + 2;
            while left > 0 {
                let mut next = c.front();
                while let Some(f) = next {
                    // SAFETY: published and not consumed yet; the ring lives until
                    // `ring` drops, after the join.
                    assert_eq!(Some(read(unsafe { f.ptr().as_ref() })), want.next());
                    left -= 1;
                    next = f.consume_next();
                }
                thread::yield_now();
            }
            assert!(c.front().is_none());
            assert!(c.is_empty());
        });
        producer.join().unwrap();
        consumer.join().unwrap();
    });
}

/// `advance` without a successful `peek` does nothing, even while the producer publishes
/// concurrently: no message is ever skipped or freed unseen.
#[test]
fn loom_advance_on_empty_is_noop() {
    loom::model(|| {
        let ring = TestRing::new();
        let (mut p, mut c) = ring.ends();
        let producer = thread::spawn(move || {
            for v in 0..2 {
                push_spin(&mut p, v);
            }
        });
        let consumer = thread::spawn(move || {
            // Never peeked: a no-op, whether or not the producer has published yet.
            c.advance();
            match c.peek(read) {
                // Empty: a no-op, even if the producer publishes right now.
                None => c.advance(),
                Some(v) => assert_eq!(v, 0),
            }
            assert_eq!(pop_spin(&mut c), 0);
            // Advancing again after the consumed entry: still nothing skipped.
            c.advance();
            assert_eq!(pop_spin(&mut c), 1);
            c.advance();
            assert!(c.is_empty());
        });
        producer.join().unwrap();
        consumer.join().unwrap();
    });
}

/// The endpoint's lock-free idle check (`ShmEp::idle`) against a sender and another
/// thread's progress: a sender publishes, fences (SeqCst) and wakes the receiver if it
/// sees it sleeping; a second consumer-side thread (progress under the endpoint's lock)
/// consumes and mirrors its position with a Relaxed store; the checker announces its
/// sleep, fences, and finds the ring `free_at` the mirrored position (idle) or not. Never
/// all three of: idle, no wake-up, the entry not consumed (a lost wake-up). A stale
/// mirror (the consumer moved past it) reads as not idle.
#[test]
fn loom_idle_check_loses_no_wakeup() {
    use loom::sync::atomic::{fence, AtomicU64, Ordering};
    use loom::sync::Arc;
    loom::model(|| {
        let ring = TestRing::new();
        let (mut p, mut c) = ring.ends();
        let mirror = Arc::new(AtomicU64::new(c.pos()));
        let sleepers = Arc::new(AtomicU64::new(0));
        let producer = {
            let sleepers = sleepers.clone();
            thread::spawn(move || {
                push_spin(&mut p, 5);
                fence(Ordering::SeqCst);
                sleepers.load(Ordering::Relaxed) != 0
            })
        };
        let consumer = {
            let mirror = mirror.clone();
            thread::spawn(move || match c.peek(read) {
                Some(v) => {
                    assert_eq!(v, 5);
                    c.advance();
                    mirror.store(c.pos(), Ordering::Relaxed);
                    true
                }
                None => false,
            })
        };
        sleepers.store(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let pos = mirror.load(Ordering::Relaxed);
        // SAFETY: the ring lives until `ring` drops, after the joins below.
        let idle = unsafe { ring.0.as_ref() }.free_at(pos);
        let woken = producer.join().unwrap();
        let consumed = consumer.join().unwrap();
        assert!(!idle || woken || consumed, "lost wake-up");
    });
}
