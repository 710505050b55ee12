//! The table of in-flight operations a completion queue owns (see the crate docs,
//! "Memory safety").
//!
//! A slab: a vector of slots threaded by an intrusive free list, so that posting
//! and completing allocate nothing once the table has grown to the queue's depth.
//! A key names a slot and the slot's current stamp (its generation), so a stale or
//! foreign key finds nothing instead of another operation's buffers. Keys are also
//! mixed with a per-table salt (the index half is XORed with it, the stamps start
//! from it) so that a completion delivered to the wrong queue by a faulty provider
//! is not mistaken for one of this queue's operations.

use crate::buf::{Buf, OpBuffers};
use fabric_core::sync::{SpinGuard, SpinLock};
use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::sync::Arc;

/// A multi-receive buffer, shared between its in-flight record and the
/// [`RecvView`](crate::RecvView)s of the messages received into it.
///
/// Nobody holds a `&mut` to the `Buf` while it is shared: the provider writes the
/// free part through the pointer it was given at post time, and views read the
/// completed parts through [`Buf::raw_const_ptr`], which creates no reference to
/// the bytes outside the view's own range.
#[derive(Debug)]
pub(crate) struct MultiRecvBuf {
    pub(crate) buf: Buf,
}

/// What an in-flight record owns.
#[derive(Debug)]
pub(crate) enum RecBufs {
    /// The operation's own buffers, given back whole at its completion with
    /// their lengths as posted.
    Owned(OpBuffers),
    /// A receive's own buffers, given back whole at its completion; a single
    /// buffer's length becomes the bytes received.
    Recv(OpBuffers),
    /// A multi-receive buffer.
    Multi(Arc<MultiRecvBuf>),
}

impl RecBufs {
    /// An operation's own buffers: a receive's (`recv`) or another's.
    #[inline(always)]
    pub(crate) fn own(bufs: OpBuffers, recv: bool) -> RecBufs {
        if recv {
            RecBufs::Recv(bufs)
        } else {
            RecBufs::Owned(bufs)
        }
    }
}

/// One in-flight operation.
#[derive(Debug)]
pub(crate) struct Record {
    /// The application's context.
    pub(crate) user_context: u64,
    /// The buffers, owned until the provider's completion is read.
    pub(crate) bufs: RecBufs,
}

/// A buffer-released completion split off a provider completion that also carried
/// the last message of a multi-receive buffer; delivered by the next read.
#[derive(Debug)]
pub(crate) struct PendingRelease {
    pub(crate) context: u64,
    pub(crate) flags: fabric_core::Caps,
    pub(crate) shared: Arc<MultiRecvBuf>,
}

/// No slot (the end of the free list).
const NIL: u32 = u32::MAX;

// A key's high half is a stamp, never 0, so no key is the reserved context.
const _: () = assert!(fabric_core::prov::NO_CONTEXT == 0);

struct Slot {
    /// The key of the slot's record while it is live. While the slot is free, the
    /// key its next record will get with the lowest bit flipped ([`FREE`]): that
    /// value names another index, so no key that leads here equals it, and a
    /// lookup is one index and one compare. The high half (the stamp) is never 0,
    /// so no key is 0 (`NO_CONTEXT`, reserved for entries of no operation); it
    /// changes each time a record leaves, so the old key never finds the next.
    key: u64,
    /// The next free slot while this one is free.
    next_free: u32,
    /// The record, initialized exactly while the slot is live: while `key`'s
    /// index half, unsalted, is the slot's own index (see [`Table::is_live`]). No
    /// `Option` beside the key, so that filling and taking a slot write no
    /// second state and test none.
    rec: MaybeUninit<Record>,
}

/// XORed into a free slot's key (see [`Slot::key`]).
const FREE: u64 = 1;

/// The slab.
pub(crate) struct Table {
    slots: Vec<Slot>,
    /// The first free slot, or `NIL`.
    free: u32,
    /// XORed into a key's index half.
    salt_lo: u32,
    /// A new slot's first stamp (odd, so never 0; see [`next_key`]).
    first_stamp: u32,
    /// Buffer-released completions waiting to be read.
    pub(crate) pending: VecDeque<PendingRelease>,
}

/// A slot index found out of range where it cannot be. Aborts rather than
/// panics: a call that cannot unwind lets the caller build the record in its
/// slot, where an unwind would first need it kept on the stack to be dropped.
#[cold]
#[inline(never)]
extern "C" fn unreachable_slot() -> ! {
    eprintln!("fabric: a free slot index is not below the table's length");
    std::process::abort()
}

/// Mix a value into a salt (splitmix64's finalizer).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The key after `key` for the same slot: the next stamp in the high half, the
/// same index half. Stamps are odd (the first is, and each is the last plus 2,
/// wrapping), so one add gives the next and none is 0.
#[inline(always)]
fn next_key(key: u64) -> u64 {
    key.wrapping_add(2 << 32)
}

impl Table {
    /// A table with room for `capacity` operations before it grows.
    pub(crate) fn new(capacity: usize, seed: u64) -> Table {
        let capacity = capacity.clamp(16, 1 << 16);
        let salt = mix(seed);
        Table {
            slots: Vec::with_capacity(capacity),
            free: NIL,
            salt_lo: salt as u32,
            first_stamp: (salt >> 32) as u32 | 1,
            pending: VecDeque::new(),
        }
    }

    /// Whether slot `i` (below the length) holds a record: its key names it.
    #[inline(always)]
    fn is_live(&self, i: usize) -> bool {
        (self.slots[i].key as u32 ^ self.salt_lo) as usize == i
    }

    #[inline(always)]
    fn key(&self, idx: u32, stamp: u32) -> u64 {
        ((stamp as u64) << 32) | (idx ^ self.salt_lo) as u64
    }

    /// Insert a record; its key (never `NO_CONTEXT`).
    #[inline(always)]
    pub(crate) fn insert(&mut self, rec: Record) -> u64 {
        let idx = self.vacant();
        self.fill(idx, rec)
    }

    /// A free slot's index, growing the table when none is free: the first half
    /// of [`Table::insert`], the only one that may call out (to grow), so that a
    /// caller can build the record after it (no copy of the record kept for an
    /// unwind).
    #[inline(always)]
    pub(crate) fn vacant(&mut self) -> u32 {
        let idx = self.free;
        if idx as usize >= self.slots.len() {
            return self.grow();
        }
        idx
    }

    /// Put `rec` in the free slot `idx` (from [`Table::vacant`], no call in
    /// between); its key (never `NO_CONTEXT`).
    #[inline(always)]
    pub(crate) fn fill(&mut self, idx: u32, rec: Record) -> u64 {
        // `idx` is below the length (checked by `vacant`, or the slot `grow`
        // just pushed): the `else` is never taken.
        let Some(slot) = self.slots.get_mut(idx as usize) else { unreachable_slot() };
        self.free = slot.next_free;
        // A free slot holds no record (its key names another index): nothing is
        // overwritten that needs a drop, and flipping the key makes it live.
        slot.rec.write(rec);
        slot.key ^= FREE;
        slot.key
    }

    /// A new free slot (the free list is empty): its index.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) -> u32 {
        // An index is below NIL: beyond u32::MAX - 1 in-flight operations the
        // process is out of memory long before.
        let idx = self.slots.len() as u32;
        assert!(idx != NIL, "in-flight operation table full");
        let key = self.key(idx, self.first_stamp) ^ FREE;
        self.slots.push(Slot { key, next_free: self.free, rec: MaybeUninit::uninit() });
        idx
    }

    /// The slot of a live record under `key`: a slot whose key is `key`, which
    /// names that very slot, so it is live ([`Table::is_live`]).
    #[inline(always)]
    pub(crate) fn find(&self, key: u64) -> Option<Live> {
        let idx = (key as u32 ^ self.salt_lo) as usize;
        let slot = self.slots.get(idx)?;
        (slot.key == key).then_some(Live(idx))
    }

    /// The record in the live slot `i` (from [`Table::find`]).
    #[inline(always)]
    pub(crate) fn at(&self, i: &Live) -> &Record {
        debug_assert!(self.is_live(i.0));
        // SAFETY: `i` comes from `find` on this table, with no `take` since (a
        // `Live` is not `Copy`, and `take` consumes it): the slot is live, so its
        // record is initialized.
        unsafe { self.slots[i.0].rec.assume_init_ref() }
    }

    /// Take the record out of the live slot `i` (from [`Table::find`]).
    #[inline(always)]
    pub(crate) fn take(&mut self, i: Live) -> Record {
        let i = i.0;
        debug_assert!(self.is_live(i));
        let free = self.free;
        let slot = &mut self.slots[i];
        // SAFETY: as in `at`, the slot is live, so its record is initialized; the
        // key is changed below to name another index, so the slot is free and
        // nothing reads or drops the moved-out record again.
        let rec = unsafe { slot.rec.assume_init_read() };
        slot.key = next_key(slot.key) ^ FREE;
        slot.next_free = free;
        self.free = i as u32;
        rec
    }

    /// The record under `key`, if it is live.
    #[cfg(test)]
    pub(crate) fn get(&self, key: u64) -> Option<&Record> {
        self.find(key).map(|i| self.at(&i))
    }

    /// Remove the record under `key`, if it is live.
    #[inline]
    pub(crate) fn remove(&mut self, key: u64) -> Option<Record> {
        let i = self.find(key)?;
        Some(self.take(i))
    }

    /// Operations in flight (a walk over the slots: for diagnostics, not the
    /// data path, which keeps no count).
    pub(crate) fn live(&self) -> usize {
        (0..self.slots.len()).filter(|&i| self.is_live(i)).count()
    }
}

/// A live slot of a [`Table`], found by [`Table::find`]; consumed by
/// [`Table::take`], so that no slot is taken twice on one finding.
#[derive(Debug)]
pub(crate) struct Live(usize);

impl Drop for Table {
    fn drop(&mut self) {
        for i in 0..self.slots.len() {
            if self.is_live(i) {
                // SAFETY: the slot is live, so its record is initialized, and the
                // table is going: nothing reads it after this drop.
                unsafe { self.slots[i].rec.assume_init_drop() }
            }
        }
    }
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").field("slots", &self.slots.len()).field("live", &self.live()).finish()
    }
}

/// The lock around a queue's table. Posting on any endpoint bound to the queue and
/// reading the queue take it, for a few dozen instructions that never block (a table
/// call does not wait, and allocates only to grow) and run no caller code; the table
/// is consistent between any two of its calls, none of which can panic half-way.
pub(crate) type TableLock = SpinLock<Table>;

/// The held lock: the table, until dropped.
pub(crate) type TableGuard<'a> = SpinGuard<'a, Table>;

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ctx: u64) -> Record {
        Record { user_context: ctx, bufs: RecBufs::Owned(OpBuffers::None) }
    }

    #[test]
    fn keys_are_generation_checked() {
        let mut t = Table::new(4, 7);
        let a = t.insert(rec(1));
        let b = t.insert(rec(2));
        assert_ne!(a, b);
        assert_eq!(t.get(a).unwrap().user_context, 1);
        assert_eq!(t.remove(a).unwrap().user_context, 1);
        assert!(t.remove(a).is_none());
        let c = t.insert(rec(3));
        assert_ne!(a, c, "a reused slot gets a new key");
        assert!(t.get(a).is_none());
        assert_eq!(t.get(c).unwrap().user_context, 3);
        assert_eq!(t.live(), 2);
        assert!(t.get(u64::MAX).is_none());
        assert!(t.get(0).is_none());
    }

    #[test]
    fn tables_do_not_share_keys() {
        let mut t1 = Table::new(4, 1);
        let mut t2 = Table::new(4, 2);
        let k1 = t1.insert(rec(1));
        t2.insert(rec(2));
        assert!(t2.get(k1).is_none());
    }

    #[test]
    fn no_key_is_zero_and_free_slots_are_reused() {
        for seed in 0..64 {
            let mut t = Table::new(4, seed);
            let mut keys = Vec::new();
            for round in 0..8u64 {
                for i in 0..5 {
                    let k = t.insert(rec(round * 10 + i));
                    assert_ne!(k, fabric_core::prov::NO_CONTEXT);
                    keys.push(k);
                }
                for k in keys.drain(..) {
                    assert!(t.remove(k).is_some());
                    assert!(t.remove(k).is_none(), "a key finds its record once");
                }
            }
            assert_eq!(t.slots.len(), 5, "freed slots are reused");
            assert_eq!(t.live(), 0);
        }
    }

    #[test]
    fn a_free_slot_is_not_found_by_a_forged_key() {
        let mut t = Table::new(4, 9);
        let k = t.insert(rec(1));
        t.remove(k).unwrap();
        // A key naming the free slot with its current stamp still finds nothing.
        let idx = (k as u32 ^ t.salt_lo) as usize;
        let stored = t.slots[idx].key;
        for forged in [stored, stored ^ FREE, t.key(idx as u32, (stored >> 32) as u32)] {
            assert!(t.get(forged).is_none());
            assert!(t.remove(forged).is_none());
        }
        assert_eq!(t.live(), 0);
    }

    #[test]
    fn the_lock_excludes() {
        let l = Arc::new(TableLock::new(Table::new(16, 3)));
        let start = Arc::new(std::sync::Barrier::new(4));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (l, start) = (Arc::clone(&l), Arc::clone(&start));
                std::thread::spawn(move || {
                    start.wait();
                    for i in 0..1_000_000 {
                        let k = l.lock().insert(rec(i));
                        assert_eq!(l.lock().remove(k).map(|r| r.user_context), Some(i));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let t = l.lock();
        assert_eq!(t.live(), 0);
        assert!(t.slots.len() <= 4, "each thread holds at most one slot at a time");
    }

    #[test]
    fn a_dropped_table_drops_its_live_records_only() {
        let shared = Arc::new(MultiRecvBuf { buf: Buf::new(8) });
        let mut t = Table::new(4, 5);
        let keys: Vec<u64> =
            (0..6).map(|i| t.insert(Record { user_context: i, bufs: RecBufs::Multi(Arc::clone(&shared)) })).collect();
        assert_eq!(Arc::strong_count(&shared), 7);
        for k in &keys[..4] {
            drop(t.remove(*k).unwrap());
        }
        assert_eq!(Arc::strong_count(&shared), 3);
        assert_eq!(t.live(), 2);
        drop(t);
        assert_eq!(Arc::strong_count(&shared), 1, "the two live records dropped, the freed ones not again");
    }

    #[test]
    fn stamps_wrap_without_zero() {
        assert_eq!(next_key(0xffff_ffff_0000_0005), 0x1_0000_0005);
        assert_eq!(next_key(0x1_ffff_fffe), 0x3_ffff_fffe);
        for seed in 0..64 {
            assert_eq!(Table::new(4, seed).first_stamp % 2, 1, "stamps are odd");
        }
    }
}
