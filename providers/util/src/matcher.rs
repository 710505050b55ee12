//! Tag matching: the posted-receive and unexpected-message queues of an endpoint,
//! with libfabric's semantics (`fi_tagged(3)`, `fi_msg(3)`).
//!
//! The engine is sans-IO and generic: it stores a provider's own record for each
//! posted receive (`R`: buffers, contexts, flags) and for each unexpected message
//! (`U`: a bounce buffer, a rendezvous descriptor), and answers "which one matches".
//! It never moves data and never completes anything; the provider does that with what
//! it removes.
//!
//! # Matching
//!
//! A receive matches a message iff
//!
//! * both are tagged or both are untagged (tagged and untagged receives live in
//!   separate queues: an untagged message never matches a tagged receive, nor the
//!   other way round);
//! * for tagged ones, the tags agree on every bit the receive does not ignore:
//!   `(m.tag & !r.ignore) == (r.tag & !r.ignore)`;
//! * the receive takes any source (`r.src == FiAddr::UNSPEC`) or the message's
//!   source is exactly `r.src` (a directed receive, `FI_DIRECTED_RECV`). A message
//!   whose source is unknown (`FiAddr::NOTAVAIL`) only matches receives from any
//!   source.
//!
//! # Order
//!
//! An arriving message takes the *first posted* matching receive (posting order); a
//! newly posted receive takes the *first arrived* matching unexpected message (arrival
//! order). Together with in-order delivery per peer this gives MPI's non-overtaking
//! rule.
//!
//! # Peek and claim
//!
//! `FI_PEEK | FI_CLAIM` marks an unexpected message as claimed by the application's
//! context ([`Matcher::claim`]); a claimed message matches no ordinary receive and is
//! found again only by [`Matcher::find_claimed`] (the later `FI_CLAIM` receive).
//!
//! # Cost
//!
//! Entries live in slabs (a `Vec` of slots and an intrusive free list), linked into
//! intrusive doubly-linked queues, so in steady state (once the slabs have grown to
//! the high-water mark, or were sized by [`Matcher::with_capacity`]) pushing and
//! removing allocate nothing, and removing by id is O(1). Matching is a linear scan
//! of one queue in order, O(queue length), which is what libfabric's util layer
//! does too and is fast for the short queues real applications keep. An index by
//! exact tag (and by source) is a possible later optimisation; the ordering
//! contract above must then be kept with per-entry sequence numbers, which the
//! slots already carry.
//!
//! Ids carry a generation: an id whose entry was removed is *stale* and every call
//! given it returns `None` (or `false`), even after its slot is reused. Ids are only
//! meaningful to the matcher that issued them.

use fabric_core::FiAddr;
use std::fmt;

/// What a posted receive accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecvSpec {
    /// A tagged receive (`fi_trecv`) rather than an untagged one (`fi_recv`).
    pub tagged: bool,
    /// The source to accept, or `FiAddr::UNSPEC` for any source.
    pub src: FiAddr,
    /// The tag to match (tagged receives).
    pub tag: u64,
    /// Tag bits to ignore when matching (tagged receives).
    pub ignore: u64,
    /// The application's context, used by cancel and claim.
    pub user_context: u64,
}

/// What an arriving message offers for matching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MsgSpec {
    /// A tagged message.
    pub tagged: bool,
    /// The message's source, `FiAddr::NOTAVAIL` when unknown.
    pub src: FiAddr,
    /// The message's tag (tagged messages).
    pub tag: u64,
}

impl RecvSpec {
    /// Whether this receive matches message `m` (the rule of the module docs).
    #[inline]
    pub fn matches(&self, m: &MsgSpec) -> bool {
        self.tagged == m.tagged && self.matches_queued(m)
    }

    /// [`RecvSpec::matches`] for a receive found in the queue of `m`'s kind
    /// (tagged or untagged, the same as its own): the tag and the source only.
    #[inline(always)]
    fn matches_queued(&self, m: &MsgSpec) -> bool {
        (!self.tagged || (m.tag ^ self.tag) & !self.ignore == 0) && (self.src == FiAddr::UNSPEC || self.src == m.src)
    }
}

/// A posted receive as stored: its [`RecvSpec`] folded into one compact record
/// with the provider's (the queue it is in says whether it is tagged, so the flag
/// is not kept; an untagged receive keeps a `mask` of 0, which every tag passes,
/// so matching needs no test of the kind).
struct Posted<R> {
    /// The source to accept, or `FiAddr::UNSPEC` for any source.
    src: FiAddr,
    /// The tag to match (0 for untagged receives).
    tag: u64,
    /// The tag bits that must agree: `!ignore` for tagged receives, 0 for untagged.
    mask: u64,
    /// The application's context, used by cancel.
    user_context: u64,
    /// The provider's record.
    rec: R,
}

impl<R> Posted<R> {
    /// The compact record of a receive `r` with the provider's `rec`.
    #[inline(always)]
    fn new(r: &RecvSpec, rec: R) -> Self {
        let (tag, mask) = if r.tagged { (r.tag, !r.ignore) } else { (0, 0) };
        Posted { src: r.src, tag, mask, user_context: r.user_context, rec }
    }

    /// Whether this receive, found in the queue of `m`'s kind, matches `m`.
    #[inline(always)]
    fn matches_queued(&self, m: &MsgSpec) -> bool {
        (m.tag ^ self.tag) & self.mask == 0 && (self.src == FiAddr::UNSPEC || self.src == m.src)
    }

    /// The receive's spec again (it is in queue `q`), and its record.
    fn into_parts(self, q: usize) -> (RecvSpec, R) {
        (self.spec(q), self.rec)
    }

    /// The receive's spec (it is in queue `q`).
    fn spec(&self, q: usize) -> RecvSpec {
        let tagged = q == TAGGED_Q;
        let (tag, ignore) = if tagged { (self.tag, !self.mask) } else { (0, 0) };
        RecvSpec { tagged, src: self.src, tag, ignore, user_context: self.user_context }
    }
}

/// What [`Matcher::take_posted`] found.
#[derive(Debug)]
pub enum PostedMatch<R> {
    /// The receive's record, taken off the queue (its spec, which the caller
    /// matched against, is dropped there: no caller needs it back).
    Taken(R),
    /// A receive that stays posted.
    Stays(PostedId),
}

/// The id of a posted receive in a [`Matcher`].
#[derive(Copy, Clone, PartialEq, Eq, Debug, Hash)]
pub struct PostedId(Key);

/// The id of an unexpected message in a [`Matcher`].
#[derive(Copy, Clone, PartialEq, Eq, Debug, Hash)]
pub struct UnexpId(Key);

/// A slot index plus the generation the slot had when the entry was inserted.
#[derive(Copy, Clone, PartialEq, Eq, Debug, Hash)]
struct Key {
    /// Index of the slot in the slab.
    index: usize,
    /// The slot's generation when the entry was inserted.
    gen: u64,
}

/// End of a list (no slot).
const NIL: usize = usize::MAX;

/// One slot of a [`Slab`].
struct Slot<T> {
    /// Bumped each time the slot is vacated, so ids of earlier occupants go stale.
    /// An id is live iff its `gen` equals this and `val` is `Some`.
    gen: u64,
    /// Occupied: the previous entry of the same queue (`NIL` at the head).
    /// Vacant: unused.
    prev: usize,
    /// Occupied: the next entry of the same queue (`NIL` at the tail).
    /// Vacant: the next vacant slot of the free list (`NIL` at its end).
    next: usize,
    /// Occupied: the queue the entry is linked into (an index into `Slab::queues`).
    /// Vacant: unused.
    queue: usize,
    /// Occupied: the slab-wide insertion sequence number of the entry; strictly
    /// increasing in insertion order, so it orders entries across queues.
    /// Vacant: unused.
    seq: u64,
    /// The entry; `None` iff the slot is vacant (and then on the free list).
    val: Option<T>,
}

/// Head and tail of one intrusive queue.
#[derive(Clone, Copy)]
struct Queue {
    /// First (oldest) entry, `NIL` iff the queue is empty.
    head: usize,
    /// Last (newest) entry, `NIL` iff the queue is empty.
    tail: usize,
}

impl Queue {
    const EMPTY: Queue = Queue { head: NIL, tail: NIL };
}

/// A slab of entries, each linked into one of `Q` queues. Insertion appends to a
/// queue, so every queue is in insertion order, and entries' `seq` increase along it.
struct Slab<T, const Q: usize> {
    /// The slots. Never shrinks (so indices stay valid), grows only when the free
    /// list is empty.
    slots: Vec<Slot<T>>,
    /// Head of the free list of vacant slots, linked through `Slot::next`; `NIL`
    /// iff every slot is occupied.
    free: usize,
    /// The queues; every occupied slot is in exactly the queue its `queue` names,
    /// every vacant slot in none.
    queues: [Queue; Q],
    /// The `seq` the next inserted entry gets.
    next_seq: u64,
}

impl<T, const Q: usize> Slab<T, Q> {
    fn with_capacity(n: usize) -> Self {
        Slab { slots: Vec::with_capacity(n), free: NIL, queues: [Queue::EMPTY; Q], next_seq: 0 }
    }

    /// The occupied slot `key` names, if it is live.
    #[inline]
    fn slot(&self, key: Key) -> Option<&Slot<T>> {
        self.slots.get(key.index).filter(|s| s.gen == key.gen && s.val.is_some())
    }

    #[inline]
    fn get(&self, key: Key) -> Option<&T> {
        self.slot(key).and_then(|s| s.val.as_ref())
    }

    #[inline]
    fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        self.slots.get_mut(key.index).filter(|s| s.gen == key.gen).and_then(|s| s.val.as_mut())
    }

    /// The key of occupied slot `index`.
    #[inline]
    fn key(&self, index: usize) -> Key {
        Key { index, gen: self.slots.get(index).map_or(0, |s| s.gen) }
    }

    /// Append `index` (occupied, unlinked) to queue `q`.
    #[inline]
    fn link_tail(&mut self, q: usize, index: usize) {
        let tail = self.queues[q].tail;
        {
            let s = &mut self.slots[index];
            s.queue = q;
            s.prev = tail;
            s.next = NIL;
        }
        match self.slots.get_mut(tail) {
            Some(t) => t.next = index,
            None => self.queues[q].head = index,
        }
        self.queues[q].tail = index;
    }

    /// Take `index` (occupied, linked) out of its queue.
    #[inline]
    fn unlink(&mut self, index: usize) {
        let (q, prev, next) = {
            let s = &self.slots[index];
            (s.queue, s.prev, s.next)
        };
        match self.slots.get_mut(prev) {
            Some(p) => p.next = next,
            None => self.queues[q].head = next,
        }
        match self.slots.get_mut(next) {
            Some(n) => n.prev = prev,
            None => self.queues[q].tail = prev,
        }
    }

    /// Insert `val` at the tail of queue `q`. A vacant slot is made first when
    /// there is none (out of line), so that the entry is written straight into
    /// the one slot it goes to rather than built aside and copied there.
    #[inline(always)]
    fn insert(&mut self, q: usize, val: T) -> Key {
        self.insert_with(q, || val)
    }

    /// [`Slab::insert`] of the value `f` makes, once a vacant slot is sure:
    /// what `f` reads is not held across the call that grows the slab.
    #[inline(always)]
    fn insert_with(&mut self, q: usize, f: impl FnOnce() -> T) -> Key {
        if self.free == NIL {
            self.add_vacant();
        }
        let val = f();
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        let tail = self.queues[q].tail;
        let index = self.free;
        // Fill and link the slot through one access (link_tail and key would
        // each index it again).
        let s = &mut self.slots[index];
        self.free = s.next;
        s.val = Some(val);
        s.seq = seq;
        s.queue = q;
        s.prev = tail;
        s.next = NIL;
        let gen = s.gen;
        match self.slots.get_mut(tail) {
            Some(t) => t.next = index,
            None => self.queues[q].head = index,
        }
        self.queues[q].tail = index;
        Key { index, gen }
    }

    /// Add a vacant slot to the (empty) free list: the slab grows by one.
    #[cold]
    #[inline(never)]
    fn add_vacant(&mut self) {
        self.slots.push(Slot { gen: 0, prev: NIL, next: self.free, queue: 0, seq: 0, val: None });
        self.free = self.slots.len() - 1;
    }

    /// Remove the entry `key` names, if live.
    fn remove(&mut self, key: Key) -> Option<T> {
        self.slot(key)?;
        self.remove_at(key.index)
    }

    /// Remove the entry of occupied slot `index`.
    #[inline]
    fn remove_at(&mut self, index: usize) -> Option<T> {
        self.unlink(index);
        let s = &mut self.slots[index];
        let val = s.val.take();
        s.gen = s.gen.wrapping_add(1);
        s.next = self.free;
        self.free = index;
        val
    }

    /// Remove the first entry of queue `q` (as [`Slab::remove_at`] of it, with
    /// no predecessor to relink).
    #[inline(always)]
    fn pop_head(&mut self, q: usize) -> Option<T> {
        let index = self.queues[q].head;
        let free = self.free;
        let s = self.slots.get_mut(index)?;
        let next = s.next;
        let val = s.val.take();
        s.gen = s.gen.wrapping_add(1);
        s.next = free;
        self.free = index;
        self.queues[q].head = next;
        match self.slots.get_mut(next) {
            Some(n) => n.prev = NIL,
            None => self.queues[q].tail = NIL,
        }
        val
    }

    /// Move the live entry `key` names to the tail of queue `q`.
    fn move_to(&mut self, key: Key, q: usize) -> bool {
        if self.slot(key).is_none() {
            return false;
        }
        self.unlink(key.index);
        self.link_tail(q, key.index);
        true
    }

    /// The number of entries, counted by walking the queues (no count is kept:
    /// inserting and removing stay a few stores shorter).
    fn count(&self) -> usize {
        (0..Q).map(|q| self.iter(q).count()).sum()
    }

    /// The entries of queue `q`, oldest first, with their slot indices.
    fn iter(&self, q: usize) -> Iter<'_, T> {
        Iter { slots: &self.slots, cur: self.queues[q].head }
    }

    /// The key of the first entry of queue `q`, oldest first, for which `f` holds.
    #[inline]
    fn find(&self, q: usize, mut f: impl FnMut(&T) -> bool) -> Option<Key> {
        self.iter(q).find(|(_, v)| f(v)).map(|(i, _)| self.key(i))
    }

    /// Remove every entry for which `f` holds, returning them in insertion order
    /// (across queues), each with the queue it was in.
    fn remove_where(&mut self, mut f: impl FnMut(&T) -> bool) -> Vec<(usize, T)> {
        let mut hits: Vec<(u64, usize)> = Vec::new();
        for q in 0..Q {
            for (i, v) in self.iter(q) {
                if f(v) {
                    hits.push((self.slots[i].seq, i));
                }
            }
        }
        // `seq` wraps only after 2^64 insertions; until then it orders entries.
        hits.sort_unstable_by_key(|&(seq, _)| seq);
        let mut out = Vec::with_capacity(hits.len());
        for (_, i) in hits {
            let q = self.slots[i].queue;
            if let Some(v) = self.remove(self.key(i)) {
                out.push((q, v));
            }
        }
        out
    }
}

/// Iterator over one queue of a [`Slab`].
struct Iter<'a, T> {
    /// The slab's slots.
    slots: &'a [Slot<T>],
    /// The next slot to yield, `NIL` at the end.
    cur: usize,
}

impl<'a, T> Iterator for Iter<'a, T> {
    type Item = (usize, &'a T);

    #[inline]
    fn next(&mut self) -> Option<(usize, &'a T)> {
        let i = self.cur;
        let s = self.slots.get(i)?;
        self.cur = s.next;
        s.val.as_ref().map(|v| (i, v))
    }
}

/// Queue of untagged entries, in both slabs.
const MSG_Q: usize = 0;
/// Queue of tagged entries, in both slabs (unclaimed ones, for unexpected messages).
const TAGGED_Q: usize = 1;
/// Unexpected-slab queue of claimed messages (`FI_PEEK | FI_CLAIM`), in claim order.
const CLAIMED_Q: usize = 2;

/// The queue of a posted receive or of an unclaimed unexpected message.
#[inline]
fn queue_of(tagged: bool) -> usize {
    if tagged {
        TAGGED_Q
    } else {
        MSG_Q
    }
}

/// An unexpected message as stored.
struct Unexp<U> {
    /// What it matches on.
    spec: MsgSpec,
    /// `Some(context)` iff the message is claimed (and then in `CLAIMED_Q`).
    claimed: Option<u64>,
    /// The provider's record.
    rec: U,
}

/// The matching engine of one receive context: posted receives and unexpected
/// messages, tagged and untagged. See the module docs for the rules.
///
/// `R` is the provider's record of a posted receive, `U` its record of an unexpected
/// message.
pub struct Matcher<R, U> {
    /// Posted receives: untagged ones in queue `MSG_Q`, tagged ones in `TAGGED_Q`,
    /// each in posting order; an entry is in the queue of its `RecvSpec::tagged`.
    posted: Slab<Posted<R>, 2>,
    /// Unexpected messages: unclaimed untagged ones in `MSG_Q`, unclaimed tagged
    /// ones in `TAGGED_Q` (each in arrival order), claimed ones of either kind in
    /// `CLAIMED_Q` (in claim order).
    unexpected: Slab<Unexp<U>, 3>,
    /// Unexpected messages queued, claimed ones included (the posted receives
    /// are not counted: only tests and `Debug` ask, and they walk the queues).
    unexpected_len: usize,
}

impl<R, U> Default for Matcher<R, U> {
    fn default() -> Self {
        Self::new()
    }
}

impl<R, U> fmt::Debug for Matcher<R, U> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Matcher").field("posted", &self.posted_len()).field("unexpected", &self.unexpected_len).finish()
    }
}

impl<R, U> Matcher<R, U> {
    /// An empty matcher; its slabs grow on demand.
    pub fn new() -> Self {
        Self::with_capacity(0, 0)
    }

    /// An empty matcher with room for `posted` receives and `unexpected` messages
    /// before anything allocates.
    pub fn with_capacity(posted: usize, unexpected: usize) -> Self {
        Matcher { posted: Slab::with_capacity(posted), unexpected: Slab::with_capacity(unexpected), unexpected_len: 0 }
    }

    // ----- arrival side -----

    /// The first posted receive, in posting order, that matches an arriving message.
    pub fn match_posted(&self, m: &MsgSpec) -> Option<PostedId> {
        self.posted.find(queue_of(m.tagged), |p| p.matches_queued(m)).map(PostedId)
    }

    /// The first posted receive that matches an arriving message (as
    /// [`Matcher::match_posted`]), taken off the queue in the same search, unless
    /// `stays` says of its record that it stays posted (a multi-receive buffer
    /// with room left): then its id.
    ///
    /// Messages usually arrive in the order their receives were posted, so the
    /// queue's head is looked at first and taken without walking or relinking
    /// anything else; a match further down takes [`Matcher::take_posted_later`].
    #[inline]
    pub fn take_posted(&mut self, m: &MsgSpec, stays: impl FnOnce(&R) -> bool) -> Option<PostedMatch<R>> {
        let q = queue_of(m.tagged);
        let head = self.posted.queues[q].head;
        // NIL (an empty queue) is no slot.
        let s = self.posted.slots.get(head)?;
        let p = s.val.as_ref()?;
        if !p.matches_queued(m) {
            return self.take_posted_later(m, stays);
        }
        if stays(&p.rec) {
            return Some(PostedMatch::Stays(PostedId(Key { index: head, gen: s.gen })));
        }
        self.posted.pop_head(q).map(|p| PostedMatch::Taken(p.rec))
    }

    /// The record of the posted receive at the head of the queue of `m`'s kind,
    /// if that receive matches `m`: the usual first match (messages mostly
    /// arrive in the order their receives were posted), looked at where it is
    /// stored. The caller then takes it off with [`Matcher::drop_posted_head`]
    /// once done with the record, or uses [`Matcher::take_posted`].
    #[inline(always)]
    pub fn posted_head(&self, m: &MsgSpec) -> Option<&R> {
        let head = self.posted.queues[queue_of(m.tagged)].head;
        // NIL (an empty queue) is no slot.
        let p = self.posted.slots.get(head)?.val.as_ref()?;
        p.matches_queued(m).then_some(&p.rec)
    }

    /// Remove the posted receive at the head of the queue of `tagged` receives
    /// (the one [`Matcher::posted_head`] returned), dropping its record. Nothing
    /// happens when that queue is empty.
    #[inline(always)]
    pub fn drop_posted_head(&mut self, tagged: bool) {
        drop(self.posted.pop_head(queue_of(tagged)));
    }

    /// [`Matcher::take_posted`] past a queue head that does not match.
    #[inline(never)]
    fn take_posted_later(&mut self, m: &MsgSpec, stays: impl FnOnce(&R) -> bool) -> Option<PostedMatch<R>> {
        let (index, p) = self.posted.iter(queue_of(m.tagged)).skip(1).find(|(_, p)| p.matches_queued(m))?;
        if stays(&p.rec) {
            return Some(PostedMatch::Stays(PostedId(self.posted.key(index))));
        }
        self.posted.remove_at(index).map(|p| PostedMatch::Taken(p.rec))
    }

    /// A posted receive's spec (rebuilt from the stored record: an untagged
    /// receive's `tag` and `ignore` read 0) and record.
    pub fn posted(&self, id: PostedId) -> Option<(RecvSpec, &R)> {
        let q = self.posted.slot(id.0)?.queue;
        self.posted.get(id.0).map(|p| (p.spec(q), &p.rec))
    }

    /// A posted receive's record, to update it in place (a multi-receive buffer
    /// that was partly consumed).
    pub fn posted_mut(&mut self, id: PostedId) -> Option<&mut R> {
        self.posted.get_mut(id.0).map(|p| &mut p.rec)
    }

    /// Remove a posted receive (it matched, or is being completed).
    pub fn remove_posted(&mut self, id: PostedId) -> Option<(RecvSpec, R)> {
        self.remove_posted_at(id.0)
    }

    /// Remove the posted receive at `key`, its spec rebuilt from the queue it
    /// was in.
    fn remove_posted_at(&mut self, key: Key) -> Option<(RecvSpec, R)> {
        let q = self.posted.slot(key)?.queue;
        self.posted.remove(key).map(|p| p.into_parts(q))
    }

    /// Queue a message that matched no posted receive, at the end of arrival order.
    pub fn push_unexpected(&mut self, m: MsgSpec, u: U) -> UnexpId {
        self.unexpected_len += 1;
        UnexpId(self.unexpected.insert(queue_of(m.tagged), Unexp { spec: m, claimed: None, rec: u }))
    }

    // ----- posting side -----

    /// The first unexpected message, in arrival order, that matches a newly posted
    /// receive and is not claimed.
    #[inline]
    pub fn match_unexpected(&self, r: &RecvSpec) -> Option<UnexpId> {
        self.unexpected.find(queue_of(r.tagged), |u| r.matches_queued(&u.spec)).map(UnexpId)
    }

    /// An unexpected message's spec and record (claimed or not).
    pub fn unexpected(&self, id: UnexpId) -> Option<(&MsgSpec, &U)> {
        self.unexpected.get(id.0).map(|u| (&u.spec, &u.rec))
    }

    /// An unexpected message's record, to update it in place (more data of a
    /// message that is still arriving).
    pub fn unexpected_mut(&mut self, id: UnexpId) -> Option<&mut U> {
        self.unexpected.get_mut(id.0).map(|u| &mut u.rec)
    }

    /// Remove an unexpected message (claimed or not).
    pub fn remove_unexpected(&mut self, id: UnexpId) -> Option<(MsgSpec, U)> {
        let u = self.unexpected.remove(id.0)?;
        self.unexpected_len -= 1;
        Some((u.spec, u.rec))
    }

    /// Whether an unexpected message of this kind (tagged or not) that is not
    /// claimed is queued: if none is, a newly posted receive of this kind
    /// matches nothing and [`Matcher::match_unexpected`] need not look.
    #[inline(always)]
    pub fn has_unexpected(&self, tagged: bool) -> bool {
        self.unexpected.queues[queue_of(tagged)].head != NIL
    }

    /// [`Matcher::push_posted`] of the receive and record `f` makes (a
    /// receive of kind `tagged`, which must be the spec's), made once the
    /// matcher has a slot for them.
    #[inline(always)]
    pub fn push_posted_with(&mut self, tagged: bool, f: impl FnOnce() -> (RecvSpec, R)) -> PostedId {
        PostedId(self.posted.insert_with(queue_of(tagged), || {
            let (r, rec) = f();
            debug_assert_eq!(r.tagged, tagged, "a receive queued with the other kind");
            Posted::new(&r, rec)
        }))
    }

    /// Queue a receive that matched no unexpected message, at the end of posting
    /// order.
    #[inline(always)]
    pub fn push_posted(&mut self, r: RecvSpec, rec: R) -> PostedId {
        PostedId(self.posted.insert(queue_of(r.tagged), Posted::new(&r, rec)))
    }

    // ----- peek and claim -----

    /// Mark an unexpected message as claimed by `user_context` (`FI_PEEK |
    /// FI_CLAIM`): from now on it matches no ordinary receive, only
    /// [`Matcher::find_claimed`]. `false` if the id is stale or the message is
    /// already claimed.
    pub fn claim(&mut self, id: UnexpId, user_context: u64) -> bool {
        match self.unexpected.get_mut(id.0) {
            Some(u) if u.claimed.is_none() => u.claimed = Some(user_context),
            _ => return false,
        }
        self.unexpected.move_to(id.0, CLAIMED_Q)
    }

    /// The message claimed by `user_context` (the `FI_CLAIM` receive that follows a
    /// claiming peek). If several are, the earliest arrived. Linear in the number
    /// of claimed messages.
    pub fn find_claimed(&self, user_context: u64) -> Option<UnexpId> {
        let mut best: Option<(u64, usize)> = None;
        for (i, u) in self.unexpected.iter(CLAIMED_Q) {
            if u.claimed == Some(user_context) {
                let seq = self.unexpected.slots[i].seq;
                match best {
                    Some((s, _)) if s <= seq => {}
                    _ => best = Some((seq, i)),
                }
            }
        }
        best.map(|(_, i)| UnexpId(self.unexpected.key(i)))
    }

    // ----- cancel and close -----

    /// Remove the first posted receive, in posting order (tagged and untagged
    /// alike), whose `user_context` is `user_context` (`fi_cancel`).
    pub fn cancel_posted(&mut self, user_context: u64) -> Option<(RecvSpec, R)> {
        let a = self.posted.find(MSG_Q, |p| p.user_context == user_context);
        let b = self.posted.find(TAGGED_Q, |p| p.user_context == user_context);
        let seq = |k: Key| self.posted.slots[k.index].seq;
        let key = match (a, b) {
            (Some(a), Some(b)) => Some(if seq(a) < seq(b) { a } else { b }),
            (a, b) => a.or(b),
        }?;
        self.remove_posted_at(key)
    }

    /// Remove every posted receive, in posting order (closing the endpoint: each
    /// becomes an `FI_ECANCELED` completion).
    pub fn drain_posted(&mut self) -> Vec<(RecvSpec, R)> {
        self.posted.remove_where(|_| true).into_iter().map(|(q, p)| p.into_parts(q)).collect()
    }

    /// Remove every unexpected message, claimed or not, in arrival order.
    pub fn drain_unexpected(&mut self) -> Vec<(MsgSpec, U)> {
        self.unexpected_len = 0;
        self.unexpected.remove_where(|_| true).into_iter().map(|(_, u)| (u.spec, u.rec)).collect()
    }

    /// Number of posted receives, counted by walking the queues: linear in it
    /// (for tests and diagnostics, not the data path).
    pub fn posted_len(&self) -> usize {
        self.posted.count()
    }

    /// Number of unexpected messages, claimed ones included.
    pub fn unexpected_len(&self) -> usize {
        self.unexpected_len
    }

    /// Remove every unexpected message (claimed or not) whose source is `src`, in
    /// arrival order: the peer went away, or was removed from the address vector.
    pub fn remove_unexpected_from(&mut self, src: FiAddr) -> Vec<(MsgSpec, U)> {
        let gone = self.unexpected.remove_where(|u| u.spec.src == src);
        self.unexpected_len -= gone.len();
        gone.into_iter().map(|(_, u)| (u.spec, u.rec)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric_testkit::Rng;

    fn trecv(src: u64, tag: u64, ignore: u64, ctx: u64) -> RecvSpec {
        RecvSpec { tagged: true, src: FiAddr(src), tag, ignore, user_context: ctx }
    }

    fn recv(src: u64, ctx: u64) -> RecvSpec {
        RecvSpec { tagged: false, src: FiAddr(src), tag: 0, ignore: 0, user_context: ctx }
    }

    fn tmsg(src: u64, tag: u64) -> MsgSpec {
        MsgSpec { tagged: true, src: FiAddr(src), tag }
    }

    fn msg(src: u64) -> MsgSpec {
        MsgSpec { tagged: false, src: FiAddr(src), tag: 0 }
    }

    const ANY: u64 = u64::MAX;

    #[test]
    fn posted_order_is_posting_order() {
        let mut m: Matcher<u32, ()> = Matcher::new();
        let a = m.push_posted(trecv(ANY, 5, 0, 1), 1);
        let b = m.push_posted(trecv(ANY, 5, 0, 2), 2);
        assert_eq!(m.match_posted(&tmsg(0, 5)), Some(a));
        assert_eq!(m.remove_posted(a).map(|(_, r)| r), Some(1));
        assert_eq!(m.match_posted(&tmsg(0, 5)), Some(b));
        assert_eq!(m.match_posted(&tmsg(0, 6)), None);
        assert_eq!(m.posted_len(), 1);
    }

    #[test]
    fn take_posted_takes_the_first_match_or_leaves_it() {
        let mut m: Matcher<u32, ()> = Matcher::new();
        let a = m.push_posted(trecv(ANY, 5, 0, 1), 1);
        m.push_posted(trecv(ANY, 5, 0, 2), 2);
        assert!(matches!(m.take_posted(&tmsg(0, 5), |&r| r == 1), Some(PostedMatch::Stays(id)) if id == a));
        assert_eq!(m.posted_len(), 2);
        assert!(matches!(m.take_posted(&tmsg(0, 5), |_| false), Some(PostedMatch::Taken(1))));
        assert!(m.posted(a).is_none(), "its id is stale");
        assert!(m.take_posted(&tmsg(0, 6), |_| false).is_none());
        assert!(matches!(m.take_posted(&tmsg(0, 5), |_| false), Some(PostedMatch::Taken(2))));
        assert_eq!(m.posted_len(), 0);
    }

    #[test]
    fn unexpected_order_is_arrival_order() {
        let mut m: Matcher<(), u32> = Matcher::with_capacity(4, 4);
        let a = m.push_unexpected(tmsg(1, 7), 1);
        let b = m.push_unexpected(tmsg(2, 7), 2);
        let c = m.push_unexpected(tmsg(1, 7), 3);
        assert_eq!(m.match_unexpected(&trecv(ANY, 7, 0, 0)), Some(a));
        assert_eq!(m.match_unexpected(&trecv(2, 7, 0, 0)), Some(b));
        m.remove_unexpected(a);
        assert_eq!(m.match_unexpected(&trecv(1, 7, 0, 0)), Some(c));
        assert_eq!(m.unexpected(c).map(|(s, u)| (s.src, *u)), Some((FiAddr(1), 3)));
        *m.unexpected_mut(c).unwrap() = 30;
        assert_eq!(m.remove_unexpected(c), Some((tmsg(1, 7), 30)));
        assert_eq!(m.unexpected_len(), 1);
    }

    #[test]
    fn ignore_masks() {
        let mut m: Matcher<(), ()> = Matcher::new();
        let r = m.push_posted(trecv(ANY, 0xAB00, 0x00FF, 0), ());
        assert_eq!(m.match_posted(&tmsg(0, 0xAB12)), Some(r));
        assert_eq!(m.match_posted(&tmsg(0, 0xAB00)), Some(r));
        assert_eq!(m.match_posted(&tmsg(0, 0xAC12)), None);
        // Bits of the receive's tag under the ignore mask do not matter either.
        let mut m: Matcher<(), ()> = Matcher::new();
        let r = m.push_posted(trecv(ANY, 0xFFFF, 0x00FF, 0), ());
        assert_eq!(m.match_posted(&tmsg(0, 0xFF00)), Some(r));
        // Ignore everything: any tag.
        let mut m: Matcher<(), ()> = Matcher::new();
        let r = m.push_posted(trecv(ANY, 0, u64::MAX, 0), ());
        assert_eq!(m.match_posted(&tmsg(0, 0xDEAD_BEEF)), Some(r));
        assert!(r == m.match_posted(&tmsg(0, u64::MAX)).unwrap());
    }

    #[test]
    fn directed_receive() {
        let mut m: Matcher<u8, ()> = Matcher::new();
        let from3 = m.push_posted(trecv(3, 1, 0, 0), 3);
        let any = m.push_posted(trecv(ANY, 1, 0, 0), 0);
        assert_eq!(m.match_posted(&tmsg(3, 1)), Some(from3));
        assert_eq!(m.match_posted(&tmsg(4, 1)), Some(any));
        // An unknown source matches only an any-source receive.
        assert_eq!(m.match_posted(&MsgSpec { tagged: true, src: FiAddr::NOTAVAIL, tag: 1 }), Some(any));
        m.remove_posted(any);
        assert_eq!(m.match_posted(&MsgSpec { tagged: true, src: FiAddr::NOTAVAIL, tag: 1 }), None);
        assert_eq!(m.match_posted(&tmsg(4, 1)), None);

        let mut m: Matcher<(), ()> = Matcher::new();
        let u4 = m.push_unexpected(msg(4), ());
        let u3 = m.push_unexpected(msg(3), ());
        assert_eq!(m.match_unexpected(&recv(3, 0)), Some(u3));
        assert_eq!(m.match_unexpected(&recv(ANY, 0)), Some(u4));
        assert_eq!(m.match_unexpected(&recv(5, 0)), None);
    }

    #[test]
    fn tagged_and_untagged_are_separate() {
        let mut m: Matcher<&str, &str> = Matcher::new();
        let t = m.push_posted(trecv(ANY, 0, u64::MAX, 0), "t");
        assert_eq!(m.match_posted(&msg(0)), None);
        let u = m.push_posted(recv(ANY, 0), "u");
        assert_eq!(m.match_posted(&msg(0)), Some(u));
        assert_eq!(m.match_posted(&tmsg(0, 9)), Some(t));
        // Untagged matching ignores the tag fields entirely.
        assert_eq!(m.match_posted(&MsgSpec { tagged: false, src: FiAddr(1), tag: 77 }), Some(u));

        let um = m.push_unexpected(msg(0), "um");
        assert_eq!(m.match_unexpected(&trecv(ANY, 0, u64::MAX, 0)), None);
        assert_eq!(m.match_unexpected(&recv(ANY, 0)), Some(um));
        let ut = m.push_unexpected(tmsg(0, 0), "ut");
        assert_eq!(m.match_unexpected(&trecv(ANY, 0, 0, 0)), Some(ut));
    }

    #[test]
    fn claim_and_find_claimed() {
        let mut m: Matcher<(), u8> = Matcher::new();
        let a = m.push_unexpected(tmsg(0, 1), 1);
        let b = m.push_unexpected(tmsg(0, 1), 2);
        assert!(m.claim(a, 42));
        assert!(!m.claim(a, 43), "already claimed");
        // A claimed message matches no ordinary receive.
        assert_eq!(m.match_unexpected(&trecv(ANY, 1, 0, 0)), Some(b));
        assert!(m.claim(b, 42));
        assert_eq!(m.match_unexpected(&trecv(ANY, 1, 0, 0)), None);
        // The earliest arrived of those claimed by a context comes first.
        assert_eq!(m.find_claimed(42), Some(a));
        assert_eq!(m.find_claimed(7), None);
        assert_eq!(m.remove_unexpected(a), Some((tmsg(0, 1), 1)));
        assert_eq!(m.find_claimed(42), Some(b));
        assert!(!m.claim(a, 1), "stale id");
        assert_eq!(m.unexpected_len(), 1);
        assert_eq!(m.drain_unexpected(), vec![(tmsg(0, 1), 2)]);
        assert_eq!(m.find_claimed(42), None);
    }

    #[test]
    fn cancel_takes_first_in_posting_order() {
        let mut m: Matcher<u8, ()> = Matcher::new();
        m.push_posted(trecv(ANY, 1, 0, 9), 1);
        m.push_posted(recv(ANY, 9), 2);
        m.push_posted(recv(ANY, 8), 3);
        m.push_posted(trecv(ANY, 1, 0, 9), 4);
        assert_eq!(m.cancel_posted(9).map(|(_, r)| r), Some(1));
        assert_eq!(m.cancel_posted(9).map(|(_, r)| r), Some(2));
        assert_eq!(m.cancel_posted(9).map(|(_, r)| r), Some(4));
        assert_eq!(m.cancel_posted(9), None);
        assert_eq!(m.posted_len(), 1);
        assert_eq!(m.drain_posted().len(), 1);
        assert_eq!(m.posted_len(), 0);
    }

    #[test]
    fn stale_ids_return_none() {
        let mut m: Matcher<u8, u8> = Matcher::new();
        let a = m.push_posted(recv(ANY, 0), 1);
        assert!(m.remove_posted(a).is_some());
        // The slot is reused, with a new generation.
        let b = m.push_posted(recv(ANY, 0), 2);
        assert_ne!(a, b);
        assert!(m.posted(a).is_none());
        assert!(m.posted_mut(a).is_none());
        assert!(m.remove_posted(a).is_none());
        assert_eq!(m.posted(b).map(|(_, r)| *r), Some(2));

        let u = m.push_unexpected(msg(0), 1);
        assert!(m.remove_unexpected(u).is_some());
        assert!(m.unexpected(u).is_none());
        assert!(m.unexpected_mut(u).is_none());
        assert!(m.remove_unexpected(u).is_none());
        assert!(!m.claim(u, 0));
        let v = m.push_unexpected(msg(0), 2);
        assert!(m.unexpected(u).is_none());
        assert!(m.unexpected(v).is_some());
    }

    #[test]
    fn per_source_cleanup_and_drain_keep_arrival_order() {
        let mut m: Matcher<(), u8> = Matcher::new();
        m.push_unexpected(tmsg(1, 0), 1);
        m.push_unexpected(msg(1), 2);
        m.push_unexpected(msg(2), 3);
        let c = m.push_unexpected(tmsg(1, 0), 4);
        m.push_unexpected(msg(1), 5);
        assert!(m.claim(c, 0));
        let got: Vec<u8> = m.remove_unexpected_from(FiAddr(1)).into_iter().map(|(_, u)| u).collect();
        assert_eq!(got, [1, 2, 4, 5]);
        assert_eq!(m.unexpected_len(), 1);
        m.push_unexpected(tmsg(3, 0), 6);
        m.push_unexpected(msg(3), 7);
        let got: Vec<u8> = m.drain_unexpected().into_iter().map(|(_, u)| u).collect();
        assert_eq!(got, [3, 6, 7]);

        let mut m: Matcher<u8, ()> = Matcher::new();
        for i in 0..6u8 {
            if i % 2 == 0 {
                m.push_posted(recv(ANY, 0), i);
            } else {
                m.push_posted(trecv(ANY, 0, 0, 0), i);
            }
        }
        let got: Vec<u8> = m.drain_posted().into_iter().map(|(_, r)| r).collect();
        assert_eq!(got, [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn steady_state_reuses_slots() {
        let mut m: Matcher<u64, u64> = Matcher::with_capacity(8, 8);
        let (cap_p, cap_u) = (m.posted.slots.capacity(), m.unexpected.slots.capacity());
        for i in 0..10_000u64 {
            let p = m.push_posted(trecv(ANY, i, 0, i), i);
            let u = m.push_unexpected(tmsg(0, i), i);
            assert_eq!(m.match_posted(&tmsg(0, i)), Some(p));
            assert_eq!(m.match_unexpected(&trecv(ANY, i, 0, 0)), Some(u));
            m.remove_posted(p);
            m.remove_unexpected(u);
        }
        assert!(m.posted.slots.len() <= 8 && m.unexpected.slots.len() <= 8);
        assert_eq!((m.posted.slots.capacity(), m.unexpected.slots.capacity()), (cap_p, cap_u));
    }

    /// The reference model: plain vectors in order.
    #[derive(Default)]
    struct Model {
        /// (id, spec, record), posting order.
        posted: Vec<(PostedId, RecvSpec, u64)>,
        /// (id, spec, claimed by, record), arrival order.
        unexp: Vec<(UnexpId, MsgSpec, Option<u64>, u64)>,
    }

    fn random_recv(rng: &mut Rng) -> RecvSpec {
        RecvSpec {
            tagged: rng.below(3) != 0,
            src: if rng.below(2) == 0 { FiAddr::UNSPEC } else { FiAddr(rng.below(3)) },
            tag: rng.below(4),
            ignore: [0, 0, 1, 2, 3, u64::MAX][rng.below(6) as usize],
            user_context: rng.below(5),
        }
    }

    fn random_msg(rng: &mut Rng) -> MsgSpec {
        MsgSpec {
            tagged: rng.below(3) != 0,
            src: if rng.below(8) == 0 { FiAddr::NOTAVAIL } else { FiAddr(rng.below(3)) },
            tag: rng.below(4),
        }
    }

    fn check_one(seed: u64, ops: usize) {
        let mut rng = Rng::new(seed);
        let mut m: Matcher<u64, u64> = Matcher::with_capacity(4, 4);
        let mut model = Model::default();
        // Ids that were issued and removed, to check staleness.
        let mut dead_p: Vec<PostedId> = Vec::new();
        let mut dead_u: Vec<UnexpId> = Vec::new();
        for step in 0..ops as u64 {
            match rng.below(16) {
                // An arrival: match a posted receive or queue as unexpected.
                0..=3 => {
                    let s = random_msg(&mut rng);
                    let want = model.posted.iter().find(|(_, r, _)| r.matches(&s)).map(|e| e.0);
                    let got = m.match_posted(&s);
                    assert_eq!(got, want, "match_posted seed {seed} step {step}");
                    match got {
                        Some(id) => {
                            let pos = model.posted.iter().position(|e| e.0 == id).unwrap();
                            let (_, r, rec) = model.posted.remove(pos);
                            assert_eq!(m.remove_posted(id), Some((r, rec)));
                            dead_p.push(id);
                        }
                        None => {
                            let id = m.push_unexpected(s, step);
                            model.unexp.push((id, s, None, step));
                        }
                    }
                }
                // A post: match an unexpected message or queue as posted.
                4..=7 => {
                    let r = random_recv(&mut rng);
                    let want = model.unexp.iter().find(|(_, s, c, _)| c.is_none() && r.matches(s)).map(|e| e.0);
                    let got = m.match_unexpected(&r);
                    assert_eq!(got, want, "match_unexpected seed {seed} step {step}");
                    match got {
                        Some(id) => {
                            let pos = model.unexp.iter().position(|e| e.0 == id).unwrap();
                            let (_, s, _, rec) = model.unexp.remove(pos);
                            assert_eq!(m.remove_unexpected(id), Some((s, rec)));
                            dead_u.push(id);
                        }
                        None => {
                            let id = m.push_posted(r, step);
                            // An untagged receive's tag and ignore mean nothing
                            // and read back as 0.
                            let kept = if r.tagged { r } else { RecvSpec { tag: 0, ignore: 0, ..r } };
                            model.posted.push((id, kept, step));
                        }
                    }
                }
                // Peek and claim.
                8 => {
                    let r = random_recv(&mut rng);
                    if let Some(id) = m.match_unexpected(&r) {
                        assert!(m.claim(id, r.user_context));
                        let e = model.unexp.iter_mut().find(|e| e.0 == id).unwrap();
                        assert!(e.2.is_none());
                        e.2 = Some(r.user_context);
                    }
                }
                // A claiming receive.
                9 => {
                    let ctx = rng.below(5);
                    let want = model.unexp.iter().find(|e| e.2 == Some(ctx)).map(|e| e.0);
                    let got = m.find_claimed(ctx);
                    assert_eq!(got, want, "find_claimed seed {seed} step {step}");
                    if let Some(id) = got {
                        let pos = model.unexp.iter().position(|e| e.0 == id).unwrap();
                        let (_, s, _, rec) = model.unexp.remove(pos);
                        assert_eq!(m.remove_unexpected(id), Some((s, rec)));
                        dead_u.push(id);
                    }
                }
                // Cancel.
                10 => {
                    let ctx = rng.below(5);
                    let pos = model.posted.iter().position(|e| e.1.user_context == ctx);
                    let want = pos.map(|p| {
                        let (id, r, rec) = model.posted.remove(p);
                        dead_p.push(id);
                        (r, rec)
                    });
                    assert_eq!(m.cancel_posted(ctx), want, "cancel seed {seed} step {step}");
                }
                // Update a record in place.
                11 => {
                    if let Some((id, _, _)) = rng.pick(&model.posted) {
                        *m.posted_mut(id).unwrap() += 1000;
                        model.posted.iter_mut().find(|e| e.0 == id).unwrap().2 += 1000;
                    }
                    if let Some((id, _, _, _)) = rng.pick(&model.unexp) {
                        *m.unexpected_mut(id).unwrap() += 1000;
                        model.unexp.iter_mut().find(|e| e.0 == id).unwrap().3 += 1000;
                    }
                }
                // Remove by id, live or stale.
                12 => {
                    if rng.below(2) == 0 {
                        if let Some(id) = rng.pick(&dead_p) {
                            assert!(m.posted(id).is_none() && m.remove_posted(id).is_none());
                        }
                        if let Some(id) = rng.pick(&dead_u) {
                            assert!(m.unexpected(id).is_none() && m.remove_unexpected(id).is_none());
                            assert!(!m.claim(id, 0));
                        }
                    } else if let Some((id, r, rec)) = rng.pick(&model.posted) {
                        model.posted.retain(|e| e.0 != id);
                        assert_eq!(m.posted(id).map(|(a, b)| (a, *b)), Some((r, rec)));
                        assert_eq!(m.remove_posted(id), Some((r, rec)));
                        dead_p.push(id);
                    }
                }
                // A peer goes away.
                13 => {
                    let src = if rng.below(4) == 0 { FiAddr::NOTAVAIL } else { FiAddr(rng.below(3)) };
                    let want: Vec<(MsgSpec, u64)> =
                        model.unexp.iter().filter(|e| e.1.src == src).map(|e| (e.1, e.3)).collect();
                    dead_u.extend(model.unexp.iter().filter(|e| e.1.src == src).map(|e| e.0));
                    model.unexp.retain(|e| e.1.src != src);
                    assert_eq!(m.remove_unexpected_from(src), want, "per-source seed {seed} step {step}");
                }
                // Rarely, close everything.
                14 => {
                    if rng.below(64) == 0 {
                        let want: Vec<(RecvSpec, u64)> = model.posted.iter().map(|e| (e.1, e.2)).collect();
                        dead_p.extend(model.posted.drain(..).map(|e| e.0));
                        assert_eq!(m.drain_posted(), want);
                        let want: Vec<(MsgSpec, u64)> = model.unexp.iter().map(|e| (e.1, e.3)).collect();
                        dead_u.extend(model.unexp.drain(..).map(|e| e.0));
                        assert_eq!(m.drain_unexpected(), want);
                    }
                }
                // Look every live entry up.
                _ => {
                    for (id, r, rec) in &model.posted {
                        assert_eq!(m.posted(*id), Some((*r, rec)));
                    }
                    for (id, s, _, rec) in &model.unexp {
                        assert_eq!(m.unexpected(*id), Some((s, rec)));
                    }
                }
            }
            assert_eq!(m.posted_len(), model.posted.len());
            assert_eq!(m.unexpected_len(), model.unexp.len());
        }
    }

    #[test]
    fn randomized_against_reference_model() {
        for seed in 1..=40u64 {
            check_one(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15), 5_000);
        }
    }
}
