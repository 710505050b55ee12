//! Single-producer single-consumer ring of fixed-size entries placed in shared memory.
//!
//! # Design
//!
//! This is Dmitry Vyukov's bounded queue cut down to one producer and one consumer. There
//! are no shared head or tail counters: every entry carries a sequence number that says
//! whose turn it is, and each end keeps its own position (a `u64` that only grows; the
//! entry of position `pos` is `entries[pos % RING_ENTRIES]`) in its own memory.
//!
//! For the entry of position `pos` the sequence number goes through
//!
//! * `pos` — free: the producer at `pos` may fill it;
//! * `pos + 1` — published by the producer (Release, after filling): the consumer at `pos`
//!   may read it (after an Acquire load);
//! * `pos + RING_ENTRIES` — freed by the consumer (Release, after reading): this is the
//!   "free" value of the same entry one lap later.
//!
//! [`Ring::init`] sets entry `i` to `i`, the "free" value of lap 0. An entry is 256 bytes,
//! 64-byte aligned, with the sequence number first: a message of up to 56 bytes travels
//! to the consumer in the same cache line as the flag that publishes it.
//!
//! # A peer that breaks the protocol
//!
//! The other end may be another process, and that process may be buggy, hostile or killed
//! half-way through a write. Each end accepts exactly one sequence value (`pos` for the
//! producer, `pos + 1` for the consumer) and treats anything else as "full" or "empty";
//! entry indices are always reduced modulo [`RING_ENTRIES`], and the payload is plain bytes
//! for which every value is valid. So a misbehaving peer can stall the ring or feed it
//! garbage bytes, but it cannot make this end read or write out of bounds or panic.

use std::alloc::{self, Layout};
use std::cell::Cell;
use std::mem;
use std::ptr::{self, NonNull};

use crate::sync::{AtomicU64, Ordering, UnsafeCell};

/// Bytes of one entry a producer fills and a consumer reads.
pub const ENTRY_PAYLOAD: usize = 248;
/// Entries in one ring (a power of two).
pub const RING_ENTRIES: usize = 64;

/// [`RING_ENTRIES`] as a position delta: the distance between two laps over one entry.
const LAP: u64 = RING_ENTRIES as u64;
/// Reduces a position to the index of its entry.
const INDEX_MASK: u64 = LAP - 1;
/// How far ahead of its position the producer looks for freed entries: one Acquire
/// load that finds the entry of `pos + LOOKAHEAD` free proves all of `pos ..= pos +
/// LOOKAHEAD` free (the consumer frees in order), so the next `LOOKAHEAD + 1` pushes
/// load no sequence number at all. In a ping-pong the entry at `pos` is the very
/// cache line the consumer spins on; loading it before each write would pull the
/// line over once more on every message, on the message's critical path.
const LOOKAHEAD: u64 = LAP / 4;
const _: () = assert!(LOOKAHEAD < LAP);

const _: () = assert!(RING_ENTRIES.is_power_of_two());
// The shared-memory layout: 256-byte, 64-byte aligned entries, sequence number first. The
// loom build of this file (tests/loom_ring.rs) uses bigger model types and skips this.
const _: () = assert!(
    !crate::sync::PLAIN_LAYOUT
        || (mem::size_of::<Entry>() == 256
            && mem::align_of::<Entry>() == 64
            && mem::offset_of!(Entry, seq) == 0
            && mem::offset_of!(Entry, payload) == 8
            && mem::size_of::<Ring>() == RING_ENTRIES * 256
            && mem::align_of::<Ring>() == 64)
);

/// One slot of the ring: one 256-byte block of four cache lines.
#[repr(C, align(64))]
struct Entry {
    /// Whose turn it is, for the entry of position `pos` (`pos % RING_ENTRIES` = this
    /// entry's index): `pos` when it is free for the producer at `pos`, `pos + 1` once that
    /// producer has published it, `pos + RING_ENTRIES` once the consumer has freed it again.
    /// Only the end whose turn it is stores to it, and it stores with Release after its
    /// last access to `payload`; the other end loads it with Acquire before its first.
    seq: AtomicU64,
    /// The message. Written only by the producer while `seq` says "free for `pos`", read
    /// only by the consumer while `seq` says "published at `pos`": never both at once. Any
    /// byte pattern is valid, so garbage from a broken peer is harmless to read.
    payload: UnsafeCell<[u8; ENTRY_PAYLOAD]>,
}

impl Entry {
    /// An entry that is free for the producer at position `seq` (its lap-0 state when
    /// `seq` is its index).
    fn new(seq: u64) -> Entry {
        Entry { seq: AtomicU64::new(seq), payload: UnsafeCell::new([0; ENTRY_PAYLOAD]) }
    }
}

/// The ring as it lies in shared memory: [`RING_ENTRIES`] entries of 256 bytes, nothing
/// else (no pointers, no heap), so it works at any address of a mapping shared between
/// processes.
///
/// All-zero bytes are valid memory for a `Ring` (it may be placed in a freshly created,
/// zero-filled mapping) but NOT an empty ring: call [`Ring::init`] once before the first
/// producer or consumer attaches. ([`Ring::new_boxed`] makes an initialised one on the heap.)
#[repr(C, align(64))]
pub struct Ring {
    /// The entries; position `pos` uses `entries[pos % RING_ENTRIES]`. Each entry's `seq`
    /// is the only thing that synchronises the two ends (see [`Entry`]).
    entries: [Entry; RING_ENTRIES],
}

// SAFETY: the only things `&Ring` allows without `unsafe` are `init` and the layout: `init`
// only stores to atomics. The payload cells are reached only through a `Producer` or a
// `Consumer`, whose unsafe constructors make the caller promise one end of each kind,
// and those ends follow the sequence protocol, so sharing a `Ring` between threads (as it
// is shared between processes anyway) allows no unsynchronised access.
unsafe impl Sync for Ring {}

impl Ring {
    /// Reset to empty: both ends restart at position 0.
    ///
    /// Call it only while no producer or consumer uses the ring, and attach new ends
    /// afterwards. (Calling it while ends are attached stores only to atomics and gives
    /// them no way to access a payload at the same time, but they keep their old
    /// positions, so the queue is broken: it looks full or empty, or loses messages.)
    pub fn init(&self) {
        for (i, entry) in self.entries.iter().enumerate() {
            // Release, although whoever attaches next must synchronise with this thread by
            // other means anyway (it has to learn that the ring exists): cheap insurance.
            entry.seq.store(i as u64, Ordering::Release);
        }
    }

    /// A new, initialised (empty) ring on the heap, aligned as a `Ring` must be.
    ///
    /// For tests and for in-process use; shared-memory rings are placed in a mapping and
    /// [`init`](Ring::init)ialised instead.
    pub fn new_boxed() -> Box<Ring> {
        let layout = Layout::new::<Ring>();
        // SAFETY: the layout is that of `Ring`, which is not zero-sized.
        let raw = unsafe { alloc::alloc(layout) }.cast::<Ring>();
        if raw.is_null() {
            alloc::handle_alloc_error(layout);
        }
        // Built entry by entry in place: the whole ring is too big for the small stacks of
        // loom's model threads (and needs no 16 KiB temporary in the std build either).
        for i in 0..RING_ENTRIES {
            // SAFETY: `raw` is non-null, aligned for `Ring` and valid for writes of a whole
            // `Ring`; `addr_of_mut!` forms no reference to the still uninitialised memory;
            // `entries` is an array of `Entry`, so its element `i < RING_ENTRIES` lies at
            // `i` entries past its start, in bounds of the allocation.
            unsafe { ptr::addr_of_mut!((*raw).entries).cast::<Entry>().add(i).write(Entry::new(i as u64)) };
        }
        // SAFETY: every entry, hence the whole `Ring` (it has no other field), has been
        // initialised above, and `raw` was allocated by the global allocator with the
        // layout of `Ring`, as `Box` requires.
        unsafe { Box::from_raw(raw) }
    }

    /// Whether the entry of position `pos` is free for the producer at `pos`: no entry
    /// of `pos` published yet (Acquire). A consumer whose position is `pos` finds its
    /// ring empty then; for any other position (a consumer that moved past `pos`
    /// meanwhile, a producer that published at `pos`) the answer is false.
    #[inline]
    pub fn free_at(&self, pos: u64) -> bool {
        self.entry(pos).seq.load(Ordering::Acquire) == pos
    }

    /// The entry that position `pos` uses. Always in bounds, whatever `pos` is.
    #[inline(always)]
    fn entry(&self, pos: u64) -> &Entry {
        &self.entries[(pos & INDEX_MASK) as usize]
    }
}

/// The producing end (one per ring).
#[derive(Debug)]
pub struct Producer {
    /// The ring. Valid, initialised and mapped for as long as this producer lives, and no
    /// other producer uses it (the contract of [`Producer::new`]).
    ring: NonNull<Ring>,
    /// The position of the next entry to fill (0 after [`Ring::init`]). Every position
    /// below it has been published; its entry is ours to fill once its `seq` equals `pos`,
    /// and stays ours until we store `pos + 1` there.
    pos: u64,
    /// How many entries from `pos` on are known free for us: their `seq` has been seen
    /// (with Acquire) to equal their position, directly or through a later entry of the
    /// same lap (the consumer frees in order). At most `LOOKAHEAD + 1`; 0 means look.
    known_free: u64,
}

// SAFETY: a `Producer` is only a pointer into the ring plus a private position. Everything
// it touches through the pointer is either atomic or a payload it owns by the sequence
// protocol (with Release/Acquire hand-over), never thread-local state, so it may be used
// from whatever thread it is moved to. (It is not `Sync`: `try_push` needs `&mut self`.)
unsafe impl Send for Producer {}

impl Producer {
    /// The producing end of `ring`, starting at position 0.
    ///
    /// # Safety
    ///
    /// `ring` points to a [`Ring`] that has been [`init`](Ring::init)ialised and stays
    /// mapped while the producer lives, and there is at most one producer for it at a time
    /// (in any process) since that `init`. (A peer that breaks the protocol cannot make this
    /// producer misbehave; see the [module documentation](self).)
    pub unsafe fn new(ring: NonNull<Ring>) -> Producer {
        Producer { ring, pos: 0, known_free: 0 }
    }

    #[inline(always)]
    fn ring(&self) -> &Ring {
        // SAFETY: by the contract of `new` the ring is valid for as long as `self` lives. A
        // shared reference is fine although the consumer (maybe in another process) writes
        // to the ring meanwhile: all of `Ring` is interior-mutable (atomics and cells).
        unsafe { self.ring.as_ref() }
    }

    /// Whether [`try_push`](Producer::try_push) would find room now. (It may still find
    /// room later: the consumer frees entries at any time.)
    #[inline]
    pub fn has_room(&self) -> bool {
        self.known_free > 0 || self.ring().entry(self.pos).seq.load(Ordering::Acquire) == self.pos
    }

    /// Whether the entry of `pos` is free for us, learning how many are: `known_free`
    /// is left at least 1 when true. Looks `LOOKAHEAD` entries ahead first, then at
    /// `pos` itself.
    ///
    /// Acquire on either load: pairs with the consumer's Release store that freed
    /// the entry loaded, which comes after its reads of every earlier entry (it
    /// frees in order), so those reads happen before our writes to any entry up to
    /// the one loaded. (A broken consumer that stores a "free" value early only
    /// spoils its own reads: we write nothing outside the ring.)
    #[inline(always)]
    fn look(&mut self) -> bool {
        if self.known_free > 0 {
            return true;
        }
        let pos = self.pos;
        let ahead = pos.wrapping_add(LOOKAHEAD);
        if self.ring().entry(ahead).seq.load(Ordering::Acquire) == ahead {
            self.known_free = LOOKAHEAD + 1;
            return true;
        }
        self.look_here()
    }

    /// [`Producer::look`] at `pos` alone, when the entry ahead was not free yet.
    #[inline(never)]
    fn look_here(&mut self) -> bool {
        let pos = self.pos;
        // `pos - LAP + 1` there: the consumer has not freed it yet, i.e. full. Anything
        // else is a broken peer; treat it as full as well.
        let free = self.ring().entry(pos).seq.load(Ordering::Acquire) == pos;
        self.known_free = u64::from(free);
        free
    }

    /// Reserve the next free entry (see [`Reserved`]); `None` when the ring is full.
    #[inline(always)]
    pub fn reserve(&mut self) -> Option<Reserved<'_>> {
        // As in `try_push`: the entry is ours once `look` saw it free (Acquire).
        if !self.look() {
            return None;
        }
        let pos = self.pos;
        // The entry, by pointer: it lies in the ring, not in `self`, which the handle
        // borrows mutably.
        let entry = NonNull::from(self.ring().entry(pos));
        Some(Reserved { prod: self, entry, pos })
    }

    /// Fill the next free entry with `fill` and publish it (with Release, after `fill`
    /// returns); false when the ring is full, in which case `fill` is not called.
    ///
    /// `fill` gets the entry as the previous message through it left it (or zeroes): it
    /// must write every byte the consumer will look at. If `fill` panics, nothing is
    /// published and the next push reuses the same entry.
    #[inline(always)]
    pub fn try_push(&mut self, fill: impl FnOnce(&mut [u8; ENTRY_PAYLOAD])) -> bool {
        // Acquire (in `look`): pairs with the Release store by which the consumer freed
        // the entry (or a later one), so its reads of the previous message happen before
        // our writes below.
        if !self.look() {
            return false;
        }
        let pos = self.pos;
        let entry = self.ring().entry(pos);
        entry.payload.with_mut(|payload| {
            // SAFETY: `seq == pos` (seen by `look`, directly or through a later entry the
            // consumer freed after this one) makes the entry ours: the consumer reads it
            // only once `seq == pos + 1`, which only we store, below, after `fill` returns,
            // and we are the only producer (contract of `new`). Its previous reads of the
            // entry happen before this write by the Acquire/Release pair on `seq`. The
            // pointer is valid (the ring is mapped, `entry` is in bounds) and aligned, and
            // the `&mut` lives only for the call to `fill`.
            fill(unsafe { &mut *payload })
        });
        // Release: our writes of the payload happen before the consumer's Acquire load that
        // sees `pos + 1`, hence before its reads.
        entry.seq.store(pos.wrapping_add(1), Ordering::Release);
        self.pos = pos.wrapping_add(1);
        self.known_free -= 1;
        true
    }
}

/// The next free entry of a ring, reserved by [`Producer::reserve`]: fill it through
/// [`payload`](Reserved::payload), then [`publish`](Reserved::publish) it. Dropped
/// without `publish`, it publishes nothing (the next push reuses the entry), as
/// [`Producer::try_push`] when its `fill` panics.
///
/// (For callers whose fill would be a closure the compiler does not inline; under
/// loom the payload accesses through it are not tracked, so the model in
/// `tests/loom_ring.rs` checks `try_push`, which shares its protocol.)
pub struct Reserved<'a> {
    prod: &'a mut Producer,
    /// The entry of `pos`, in the producer's ring (valid while `prod` is borrowed).
    entry: NonNull<Entry>,
    /// The producer's position.
    pos: u64,
}

impl Reserved<'_> {
    /// The entry's payload, as the previous message through it left it (or
    /// zeroes): write every byte the consumer will look at.
    #[inline(always)]
    pub fn payload(&mut self) -> &mut [u8; ENTRY_PAYLOAD] {
        // SAFETY: `entry` is the entry of `pos` in the ring, mapped while the producer
        // (borrowed by `self`) lives. As in `try_push`: `reserve` saw `seq == pos` (through `look`),
        // which makes the entry ours (the consumer reads it only once
        // `seq == pos + 1`, which only `publish` stores, and we are the only producer,
        // borrowed mutably by `self` for as long as the reference lives). The pointer
        // is valid (the ring is mapped, the entry in bounds) and aligned.
        unsafe { self.entry.as_ref().payload.with_mut(|payload| &mut *payload) }
    }

    /// Publish the entry (with Release, after the writes through
    /// [`payload`](Reserved::payload)).
    #[inline(always)]
    pub fn publish(self) {
        let pos = self.pos;
        // Release: as in `try_push`.
        // SAFETY: `entry` is valid while the producer is borrowed (see `payload`).
        unsafe { self.entry.as_ref() }.seq.store(pos.wrapping_add(1), Ordering::Release);
        self.prod.pos = pos.wrapping_add(1);
        // `reserve` made it at least 1.
        self.prod.known_free -= 1;
    }
}

/// The oldest published entry of a ring, found by [`Consumer::front`]: the
/// consumer's to read through [`ptr`](Front::ptr) until [`consume`](Front::consume)
/// hands it back to the producer.
pub struct Front<'a> {
    cons: &'a mut Consumer,
    at: NonNull<[u8; ENTRY_PAYLOAD]>,
}

impl<'a> Front<'a> {
    /// The entry's payload. Reading it is the caller's `unsafe`: sound while the ring
    /// stays mapped and until [`consume`](Front::consume) (the entry is published and
    /// this consumer, borrowed by the handle, has not advanced past it).
    #[inline(always)]
    pub fn ptr(&self) -> NonNull<[u8; ENTRY_PAYLOAD]> {
        self.at
    }

    /// Consume the entry, handing it back to the producer (with Release).
    #[inline(always)]
    pub fn consume(self) {
        self.cons.free_front();
    }

    /// [`consume`](Front::consume), then [`Consumer::front`] again: the next published
    /// entry, or `None`. The ring and position are read once, before the store that
    /// frees the entry (which the compiler cannot tell from a store to the consumer),
    /// not again after it.
    #[inline(always)]
    pub fn consume_next(self) -> Option<Front<'a>> {
        let cons = self.cons;
        let (ring, pos) = (cons.ring, cons.pos);
        // SAFETY: by the contract of `Consumer::new` the ring is valid for as long as
        // the consumer lives, borrowed by the handle; all of `Ring` is
        // interior-mutable.
        let ring = unsafe { ring.as_ref() };
        // Release: as in `free_front`.
        ring.entry(pos).seq.store(pos.wrapping_add(LAP), Ordering::Release);
        let next = pos.wrapping_add(1);
        cons.pos = next;
        let entry = ring.entry(next);
        // Acquire: as in `published`.
        if entry.seq.load(Ordering::Acquire) != next.wrapping_add(1) {
            return None;
        }
        // The cell's pointer is never null.
        let at = NonNull::new(entry.payload.with(|p| p.cast_mut()))?;
        Some(Front { cons, at })
    }
}

/// The consuming end (one per ring).
#[derive(Debug)]
pub struct Consumer {
    /// The ring. Valid, initialised and mapped for as long as this consumer lives, and no
    /// other consumer uses it (the contract of [`Consumer::new`]).
    ring: NonNull<Ring>,
    /// The position of the next entry to read (0 after [`Ring::init`]). Every position
    /// below it has been read and freed; its entry is ours to read once its `seq` equals
    /// `pos + 1`, and stays ours until we store `pos + RING_ENTRIES` there.
    pos: u64,
    /// Whether the last [`peek`](Consumer::peek) since the last [`advance`](Consumer::advance)
    /// found the entry of `pos` published. Only then does `advance` free it, so that it
    /// never frees an entry this consumer has not seen published (nor one still the
    /// producer's). Set only through `&self` in `peek`, hence a `Cell`.
    peeked: Cell<bool>,
}

// SAFETY: a `Consumer` is only a pointer into the ring plus private state (`pos`, the
// `peeked` cell, which moves with it). Everything it touches through the pointer is either
// atomic or a payload it owns by the sequence protocol (with Release/Acquire hand-over),
// never thread-local state, so it may be used from whatever thread it is moved to. (It is
// not `Sync`, which the `Cell` ensures.)
unsafe impl Send for Consumer {}

impl Consumer {
    /// The consuming end of `ring`, starting at position 0.
    ///
    /// # Safety
    ///
    /// As [`Producer::new`], for the one consumer: `ring` points to an
    /// [`init`](Ring::init)ialised [`Ring`] that stays mapped while the consumer lives, and
    /// there is at most one consumer for it at a time (in any process) since that `init`.
    pub unsafe fn new(ring: NonNull<Ring>) -> Consumer {
        Consumer { ring, pos: 0, peeked: Cell::new(false) }
    }

    #[inline(always)]
    fn ring(&self) -> &Ring {
        // SAFETY: by the contract of `new` the ring is valid for as long as `self` lives. A
        // shared reference is fine although the producer (maybe in another process) writes
        // to the ring meanwhile: all of `Ring` is interior-mutable (atomics and cells).
        unsafe { self.ring.as_ref() }
    }

    /// The position of the next entry to read (0 after [`Ring::init`]).
    #[inline]
    pub fn pos(&self) -> u64 {
        self.pos
    }

    /// Whether there is no published entry to read now (a later
    /// [`peek`](Consumer::peek) may find one: the producer publishes at any time).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.ring().entry(self.pos).seq.load(Ordering::Acquire) != self.pos.wrapping_add(1)
    }

    /// Look at the oldest published entry without consuming it: `Some(f(entry))`, or `None`
    /// (without calling `f`) when the ring is empty. Peeking again shows the same entry
    /// until [`advance`](Consumer::advance) consumes it.
    #[inline]
    pub fn peek<R>(&self, f: impl FnOnce(&[u8; ENTRY_PAYLOAD]) -> R) -> Option<R> {
        let entry = self.ring().entry(self.pos);
        // Acquire: pairs with the producer's Release store of `pos + 1`, so its writes of
        // the payload happen before our reads below.
        if entry.seq.load(Ordering::Acquire) != self.pos.wrapping_add(1) {
            // `pos` (not yet published) is empty; anything else is a broken peer: empty too.
            self.peeked.set(false);
            return None;
        }
        // Before `f`: if `f` panics, the caller may still `advance` past this entry.
        self.peeked.set(true);
        Some(entry.payload.with(|payload| {
            // SAFETY: `seq == pos + 1` (loaded above) makes the entry ours to read: the
            // producer writes it again only after seeing `pos + RING_ENTRIES`, which only we
            // store (in `advance`, which needs `&mut self`, so not while this borrow lives),
            // and we are the only consumer (contract of `new`). Its writes happen before
            // these reads by the Release/Acquire pair on `seq`. The pointer is valid and
            // aligned, and the shared reference lives only for the call to `f`.
            f(unsafe { &*payload })
        }))
    }

    /// The oldest published entry, as a pointer to its payload, or `None` when the ring
    /// is empty; like [`peek`](Consumer::peek), it marks the entry seen, and
    /// [`advance`](Consumer::advance) consumes it.
    ///
    /// The payload is the consumer's to read (after the Acquire load done here) until
    /// `advance` hands it back; reading it through the pointer is the caller's `unsafe`,
    /// sound while the ring stays mapped and this consumer has not advanced past it.
    #[inline]
    pub fn peek_ptr(&self) -> Option<NonNull<[u8; ENTRY_PAYLOAD]>> {
        let at = self.published();
        self.peeked.set(at.is_some());
        at
    }

    /// The oldest published entry, held until [`Front::consume`] hands it back (or the
    /// handle drops, leaving it in place), or `None` when the ring is empty. The same
    /// protocol as [`peek_ptr`](Consumer::peek_ptr) then [`advance`](Consumer::advance),
    /// without the `peeked` bookkeeping per entry: the handle itself says the entry was
    /// seen published (and a `peek` before it no longer lets `advance` free anything).
    #[inline(always)]
    pub fn front(&mut self) -> Option<Front<'_>> {
        // A pending `peek` is moot once its entry is consumed through the handle
        // (cleared here, once, rather than by every `consume`).
        self.peeked.set(false);
        let at = self.published()?;
        Some(Front { cons: self, at })
    }

    /// The payload of the entry at our position if it is published (Acquire, as in
    /// `peek`), else `None`: [`peek_ptr`](Consumer::peek_ptr)'s and
    /// [`front`](Consumer::front)'s test.
    #[inline(always)]
    fn published(&self) -> Option<NonNull<[u8; ENTRY_PAYLOAD]>> {
        let entry = self.ring().entry(self.pos);
        if entry.seq.load(Ordering::Acquire) != self.pos.wrapping_add(1) {
            return None;
        }
        // The cell's pointer is never null.
        NonNull::new(entry.payload.with(|p| p.cast_mut()))
    }

    /// Hand the entry at our position, seen published, back to the producer and move
    /// on: [`advance`](Consumer::advance)'s and [`Front::consume`]'s store.
    #[inline(always)]
    fn free_front(&mut self) {
        let pos = self.pos;
        // Release: our reads of the payload happen before the producer's Acquire load
        // that sees this value, hence before it writes the entry again.
        self.ring().entry(pos).seq.store(pos.wrapping_add(LAP), Ordering::Release);
        self.pos = pos.wrapping_add(1);
    }

    /// Consume the entry the last successful [`peek`](Consumer::peek) saw, handing it back
    /// to the producer (with Release). A no-op when that peek found the ring empty, when
    /// there was no peek, or when the entry has been consumed already: it never frees an
    /// entry this consumer has not seen published.
    #[inline]
    pub fn advance(&mut self) {
        if self.peeked.replace(false) {
            self.free_front();
        }
    }
}

#[cfg(test)]
crate::sync::std_only! {
    mod tests {
        use super::*;

        /// A ring in zero-filled heap memory, initialised with `init`, as in a fresh mapping.
        struct ZeroedRing(NonNull<Ring>);

        impl ZeroedRing {
            fn new() -> ZeroedRing {
                // SAFETY: `Ring` is not zero-sized.
                let raw = unsafe { alloc::alloc_zeroed(Layout::new::<Ring>()) }.cast::<Ring>();
                let ring = NonNull::new(raw).expect("out of memory");
                // SAFETY: zero bytes are a valid `Ring` (atomics and plain bytes), the memory
                // is aligned and stays allocated until `drop`.
                unsafe { ring.as_ref() }.init();
                ZeroedRing(ring)
            }

            fn ends(&self) -> (Producer, Consumer) {
                // SAFETY: initialised, lives as long as the test keeps `self`, one end each.
                unsafe { (Producer::new(self.0), Consumer::new(self.0)) }
            }

            /// Overwrite the raw bytes of the ring with a pseudo-random pattern.
            fn scribble(&self, seed: u64) {
                let mut x = seed | 1;
                let bytes = self.0.as_ptr().cast::<u8>();
                for i in 0..mem::size_of::<Ring>() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // SAFETY: in bounds of the allocation; no reference into the ring is
                    // alive across this call and no other thread uses it.
                    unsafe { bytes.add(i).write(x as u8) };
                }
            }

            /// Store `value` as the sequence number of entry `index`.
            fn set_seq(&self, index: usize, value: u64) {
                // SAFETY: the ring is valid while `self` lives.
                unsafe { self.0.as_ref() }.entries[index].seq.store(value, Ordering::Relaxed);
            }
        }

        impl Drop for ZeroedRing {
            fn drop(&mut self) {
                // SAFETY: allocated in `new` with this layout.
                unsafe { alloc::dealloc(self.0.as_ptr().cast(), Layout::new::<Ring>()) };
            }
        }

        fn push(p: &mut Producer, value: u64) -> bool {
            p.try_push(|e| {
                e[..8].copy_from_slice(&value.to_le_bytes());
                e[ENTRY_PAYLOAD - 8..].copy_from_slice(&(!value).to_le_bytes());
            })
        }

        fn pop(c: &mut Consumer) -> Option<u64> {
            let v = c.peek(|e| {
                let v = u64::from_le_bytes(e[..8].try_into().unwrap());
                assert_eq!(u64::from_le_bytes(e[ENTRY_PAYLOAD - 8..].try_into().unwrap()), !v);
                v
            })?;
            c.advance();
            Some(v)
        }

        #[test]
        fn layout_is_the_shared_one() {
            assert_eq!(mem::size_of::<Ring>(), RING_ENTRIES * 256);
            assert_eq!(mem::align_of::<Ring>(), 64);
            assert_eq!(mem::size_of::<Entry>(), 256);
            assert_eq!(mem::offset_of!(Entry, payload), 8);
        }

        #[test]
        fn auto_traits() {
            fn send<T: Send>() {}
            fn sync<T: Sync>() {}
            send::<Producer>();
            send::<Consumer>();
            send::<Ring>();
            sync::<Ring>();
        }

        #[test]
        fn front_reads_then_consumes_in_order() {
            let ring = ZeroedRing::new();
            let (mut p, mut c) = ring.ends();
            assert!(c.front().is_none());
            for v in 0..3 {
                assert!(push(&mut p, v));
            }
            // A handle dropped without `consume` leaves the entry in place.
            let _ = c.front().expect("published");
            for v in 0..3 {
                let f = c.front().expect("published");
                // SAFETY: the entry is published and not consumed yet; the ring lives.
                let raw = unsafe { f.ptr().as_ref() };
                assert_eq!(u64::from_le_bytes(raw[..8].try_into().unwrap()), v);
                f.consume();
            }
            assert!(c.front().is_none());
            assert!(c.is_empty());
            // The freed entries are the producer's again: a whole lap fits.
            for v in 0..RING_ENTRIES as u64 {
                assert!(push(&mut p, v));
            }
            assert!(!push(&mut p, 99));
        }

        #[test]
        fn consume_next_walks_the_published_entries() {
            let ring = ZeroedRing::new();
            let (mut p, mut c) = ring.ends();
            for v in 0..3 {
                assert!(push(&mut p, v));
            }
            let mut seen = Vec::new();
            let mut next = c.front();
            while let Some(f) = next {
                // SAFETY: the entry is published and not consumed yet; the ring lives.
                seen.push(u64::from_le_bytes(unsafe { f.ptr().as_ref() }[..8].try_into().unwrap()));
                next = f.consume_next();
            }
            assert_eq!(seen, [0, 1, 2]);
            assert_eq!(c.pos(), 3);
            assert!(c.is_empty());
            // Published later: found by the next `front`.
            assert!(push(&mut p, 3));
            let f = c.front().expect("published");
            assert!(f.consume_next().is_none());
            assert_eq!(c.pos(), 4);
            // Every entry consumed is the producer's again: a whole lap fits.
            for v in 0..RING_ENTRIES as u64 {
                assert!(push(&mut p, v));
            }
            assert!(!push(&mut p, 99));
        }

        #[test]
        fn front_after_peek_leaves_advance_nothing_unseen() {
            let ring = ZeroedRing::new();
            let (mut p, mut c) = ring.ends();
            assert!(push(&mut p, 1));
            assert!(push(&mut p, 2));
            assert_eq!(c.peek(|e| e[0]), Some(1));
            c.front().expect("published").consume();
            // The peek saw entry 1, consumed through the handle: `advance` must not
            // free entry 2, which nobody has seen.
            c.advance();
            assert_eq!(pop(&mut c), Some(2));
            assert_eq!(pop(&mut c), None);
        }

        #[test]
        fn push_peek_advance_in_order() {
            let ring = ZeroedRing::new();
            let (mut p, mut c) = ring.ends();
            assert!(c.is_empty());
            assert_eq!(c.peek(|_| ()), None);
            for v in 0..10 {
                assert!(push(&mut p, v));
                assert!(!c.is_empty());
            }
            // Peeking does not consume.
            assert_eq!(c.peek(|e| e[0]), Some(0));
            assert_eq!(c.peek(|e| e[0]), Some(0));
            for v in 0..10 {
                assert_eq!(pop(&mut c), Some(v));
            }
            assert!(c.is_empty());
            assert_eq!(pop(&mut c), None);
        }

        #[test]
        fn full_at_ring_entries() {
            let ring = ZeroedRing::new();
            let (mut p, mut c) = ring.ends();
            for v in 0..RING_ENTRIES as u64 {
                assert!(p.has_room());
                assert!(push(&mut p, v), "push {v}");
            }
            assert!(!p.has_room());
            let mut called = false;
            assert!(!p.try_push(|_| called = true));
            assert!(!called, "fill called on a full ring");
            // Peeking alone frees nothing.
            assert_eq!(c.peek(|e| e[0]), Some(0));
            assert!(!p.has_room());
            c.advance();
            assert!(p.has_room());
            assert!(push(&mut p, 1000));
            assert!(!push(&mut p, 1001));
            for v in 1..RING_ENTRIES as u64 {
                assert_eq!(pop(&mut c), Some(v));
            }
            assert_eq!(pop(&mut c), Some(1000));
            assert_eq!(pop(&mut c), None);
        }

        #[test]
        fn wrap_around_many_laps() {
            let ring = ZeroedRing::new();
            let (mut p, mut c) = ring.ends();
            let (mut next_in, mut next_out) = (0u64, 0u64);
            // Varying batch sizes so that the full and empty points fall on every index.
            for round in 0..2_000u64 {
                let batch = 1 + (round * 7) % RING_ENTRIES as u64;
                for _ in 0..batch {
                    if !push(&mut p, next_in) {
                        break;
                    }
                    next_in += 1;
                }
                assert!(next_in - next_out <= RING_ENTRIES as u64);
                for _ in 0..(round * 5) % (RING_ENTRIES as u64 + 1) {
                    match pop(&mut c) {
                        Some(v) => {
                            assert_eq!(v, next_out);
                            next_out += 1;
                        }
                        None => {
                            assert_eq!(next_out, next_in);
                            break;
                        }
                    }
                }
            }
            while let Some(v) = pop(&mut c) {
                assert_eq!(v, next_out);
                next_out += 1;
            }
            assert_eq!(next_out, next_in);
            assert!(next_in > 100 * RING_ENTRIES as u64, "only {next_in} messages");
        }

        #[test]
        fn advance_on_empty_is_a_noop() {
            let ring = ZeroedRing::new();
            let (mut p, mut c) = ring.ends();
            c.advance();
            c.advance();
            assert!(push(&mut p, 7));
            // No peek since the push: nothing to advance past.
            c.advance();
            assert_eq!(c.peek(|e| e[0]), Some(7));
            c.advance();
            // Already consumed: a second advance does nothing either.
            c.advance();
            assert!(push(&mut p, 8));
            assert_eq!(pop(&mut c), Some(8));
            // A failed peek after a successful one forgets it.
            assert!(push(&mut p, 9));
            assert_eq!(c.peek(|e| e[0]), Some(9));
            c.advance();
            assert_eq!(c.peek(|_| ()), None);
            c.advance();
            assert!(push(&mut p, 10));
            assert_eq!(pop(&mut c), Some(10));
            for _ in 0..RING_ENTRIES {
                assert!(p.has_room());
                assert!(push(&mut p, 11));
            }
            assert!(!p.has_room());
        }

        #[test]
        fn reserve_publish_and_drop() {
            let ring = ZeroedRing::new();
            let (mut p, mut c) = ring.ends();
            // Dropped without publishing: nothing shows, the entry is reused.
            p.reserve().expect("room").payload()[..8].copy_from_slice(&99u64.to_le_bytes());
            assert!(c.is_empty());
            for v in 0..RING_ENTRIES as u64 {
                let mut r = p.reserve().expect("room");
                let e = r.payload();
                e[..8].copy_from_slice(&v.to_le_bytes());
                e[ENTRY_PAYLOAD - 8..].copy_from_slice(&(!v).to_le_bytes());
                r.publish();
            }
            assert!(p.reserve().is_none(), "full");
            assert_eq!(pop(&mut c), Some(0));
            assert!(push(&mut p, 1000));
            for v in 1..RING_ENTRIES as u64 {
                assert_eq!(pop(&mut c), Some(v));
            }
            assert_eq!(pop(&mut c), Some(1000));
            assert_eq!(pop(&mut c), None);
        }

        #[test]
        fn fill_that_panics_publishes_nothing() {
            let ring = ZeroedRing::new();
            let (mut p, mut c) = ring.ends();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                p.try_push(|e| {
                    e[0] = 1;
                    panic!("fill fails");
                })
            }));
            assert!(r.is_err());
            assert!(c.is_empty());
            assert!(push(&mut p, 2));
            assert_eq!(pop(&mut c), Some(2));
            assert_eq!(pop(&mut c), None);
        }

        #[test]
        fn new_boxed_is_an_empty_ring() {
            let ring = Ring::new_boxed();
            let ptr = NonNull::from(&*ring);
            // SAFETY: initialised; the box outlives both ends; one end each.
            let (mut p, mut c) = unsafe { (Producer::new(ptr), Consumer::new(ptr)) };
            assert!(c.is_empty());
            for v in 0..3 * RING_ENTRIES as u64 {
                assert!(push(&mut p, v));
                assert_eq!(pop(&mut c), Some(v));
            }
        }

        #[test]
        fn init_resets_a_used_ring() {
            let ring = ZeroedRing::new();
            {
                let (mut p, mut c) = ring.ends();
                for v in 0..RING_ENTRIES as u64 + 5 {
                    assert!(push(&mut p, v));
                    assert_eq!(pop(&mut c), Some(v));
                }
                assert!(push(&mut p, 99));
            }
            // SAFETY: valid while `ring` lives (no end is attached any more).
            unsafe { ring.0.as_ref() }.init();
            let (mut p, mut c) = ring.ends();
            assert!(c.is_empty());
            assert!(push(&mut p, 1));
            assert_eq!(pop(&mut c), Some(1));
        }

        #[test]
        fn garbage_sequences_read_as_empty_and_full() {
            for seed in 1..200u64 {
                let ring = ZeroedRing::new();
                ring.scribble(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
                let (mut p, mut c) = ring.ends();
                // A random 64-bit sequence number equals the one expected with odds 2^-64.
                assert!(c.is_empty());
                assert_eq!(c.peek(|_| ()), None);
                c.advance();
                assert!(!p.has_room());
                assert!(!p.try_push(|_| unreachable!()));
            }
        }

        #[test]
        fn hostile_sequences_never_go_out_of_bounds() {
            let ring = ZeroedRing::new();
            let (mut p, mut c) = ring.ends();
            let hostile = [0, 1, 2, RING_ENTRIES as u64, RING_ENTRIES as u64 + 1, u64::MAX, u64::MAX - 1, 1 << 63];
            let mut x = 0x1234_5678_9abc_def0u64;
            for round in 0..5_000 {
                // Scribble garbage over a few sequence numbers and payloads, as a broken
                // peer would, then keep both ends going.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let index = (x % RING_ENTRIES as u64) as usize;
                let value = if round % 3 == 0 { x } else { hostile[(x >> 8) as usize % hostile.len()] };
                ring.set_seq(index, value);
                if round % 97 == 0 {
                    ring.scribble(x);
                }
                for _ in 0..(x >> 20) % 4 {
                    let _ = push(&mut p, round);
                }
                for _ in 0..(x >> 30) % 4 {
                    let _ = c.is_empty();
                    let _ = p.has_room();
                    // Garbage payloads are just bytes: no panic, whatever they hold.
                    let _ = c.peek(|e| e.iter().fold(0u8, |a, b| a ^ b));
                    c.advance();
                }
            }
        }

        #[test]
        fn positions_wrap_at_u64_max() {
            let ring = ZeroedRing::new();
            let (mut p, mut c) = ring.ends();
            // Pretend both ends have been running for 2^64 - 3 messages.
            let start = u64::MAX - 2;
            for pos in start..=u64::MAX {
                ring.set_seq((pos & INDEX_MASK) as usize, pos);
            }
            ring.set_seq(0, 0);
            p.pos = start;
            c.pos = start;
            for v in 0..2 * RING_ENTRIES as u64 {
                assert!(push(&mut p, v), "push {v}");
                assert_eq!(pop(&mut c), Some(v));
            }
            assert_eq!(p.pos, start.wrapping_add(2 * RING_ENTRIES as u64));
        }
    }
}
