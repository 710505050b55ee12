//! The table of in-flight operations a completion queue owns (see the crate docs,
//! "Memory safety").
//!
//! A slab: a vector of slots and a free list, so that posting and completing
//! allocate nothing once the table has grown to the queue's depth. A key names a
//! slot and the slot's generation, so a stale or foreign key finds nothing instead
//! of another operation's buffers; keys are also mixed with a per-table salt so that
//! a completion delivered to the wrong queue by a faulty provider is not mistaken
//! for one of this queue's operations.

use crate::buf::{Buf, OpBuffers};
use std::collections::VecDeque;
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
    /// The operation's own buffers, given back whole at its completion.
    Owned(OpBuffers),
    /// A multi-receive buffer.
    Multi(Arc<MultiRecvBuf>),
}

/// One in-flight operation.
#[derive(Debug)]
pub(crate) struct Record {
    /// The application's context.
    pub(crate) user_context: u64,
    /// The buffers, owned until the provider's completion is read.
    pub(crate) bufs: RecBufs,
    /// A receive (the completion sets a single buffer's length).
    pub(crate) recv: bool,
}

/// A buffer-released completion split off a provider completion that also carried
/// the last message of a multi-receive buffer; delivered by the next read.
#[derive(Debug)]
pub(crate) struct PendingRelease {
    pub(crate) context: u64,
    pub(crate) flags: fabric_core::Caps,
    pub(crate) shared: Arc<MultiRecvBuf>,
}

#[derive(Debug)]
struct Slot {
    gen: u32,
    rec: Option<Record>,
}

/// The slab.
#[derive(Debug)]
pub(crate) struct Table {
    slots: Vec<Slot>,
    free: Vec<u32>,
    live: usize,
    salt: u64,
    /// Buffer-released completions waiting to be read.
    pub(crate) pending: VecDeque<PendingRelease>,
}

/// Mix a value into a salt (splitmix64's finalizer).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Table {
    /// A table with room for `capacity` operations before it grows.
    pub(crate) fn new(capacity: usize, seed: u64) -> Table {
        let capacity = capacity.clamp(16, 1 << 16);
        Table {
            slots: Vec::with_capacity(capacity),
            free: Vec::with_capacity(capacity),
            live: 0,
            salt: mix(seed),
            pending: VecDeque::new(),
        }
    }

    /// Insert a record; its key.
    pub(crate) fn insert(&mut self, rec: Record) -> u64 {
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                // Beyond u32::MAX in-flight operations the process is out of memory
                // long before; the index still fits a u32 by construction then.
                let i = self.slots.len() as u32;
                self.slots.push(Slot { gen: 1, rec: None });
                i
            }
        };
        let salt = self.salt;
        let slot = &mut self.slots[idx as usize];
        slot.rec = Some(rec);
        self.live += 1;
        // Context 0 is reserved for entries that belong to no operation (a CQ
        // overrun report): never hand it out.
        while (((slot.gen as u64) << 32) | idx as u64) ^ salt == fabric_core::prov::NO_CONTEXT {
            slot.gen = slot.gen.wrapping_add(1).max(1);
        }
        (((slot.gen as u64) << 32) | idx as u64) ^ salt
    }

    fn index(&self, key: u64) -> Option<usize> {
        let k = key ^ self.salt;
        let idx = (k & 0xffff_ffff) as usize;
        let gen = (k >> 32) as u32;
        let slot = self.slots.get(idx)?;
        (slot.gen == gen && slot.rec.is_some()).then_some(idx)
    }

    /// The record under `key`, if it is live.
    pub(crate) fn get(&self, key: u64) -> Option<&Record> {
        let i = self.index(key)?;
        self.slots[i].rec.as_ref()
    }

    /// Remove the record under `key`, if it is live.
    pub(crate) fn remove(&mut self, key: u64) -> Option<Record> {
        let i = self.index(key)?;
        let slot = &mut self.slots[i];
        let rec = slot.rec.take();
        // A new generation: the old key never finds the slot's next record. Skip 0
        // so that a key is never all-salt.
        slot.gen = slot.gen.wrapping_add(1).max(1);
        self.free.push(i as u32);
        self.live -= 1;
        rec
    }

    /// Operations in flight.
    pub(crate) fn live(&self) -> usize {
        self.live
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ctx: u64) -> Record {
        Record { user_context: ctx, bufs: RecBufs::Owned(OpBuffers::None), recv: false }
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
}
