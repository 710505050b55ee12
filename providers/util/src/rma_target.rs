//! The target side of RMA: the operations a peer sent as several requests and that
//! are still in progress here, as sans-IO state (no sockets, no locks, no time).
//!
//! An RMA write or read larger than [`RMA_CHUNK`](crate::wire::RMA_CHUNK) reaches
//! the target as several requests under one request id, the last marked `LAST`
//! (atomics and smaller operations are one request, and are never tracked). The
//! target checks the operation once, at its first request (for a write, whose
//! first request carries the whole length, the whole range, so a refused write
//! lands nowhere); every later request of the operation shares that outcome, and
//! the operation as a whole succeeds only if each of its requests did (the counters
//! and remote CQ data count operations, not requests).
//!
//! A transport keeps one [`RmaTarget`] per peer (a connection, a channel) and
//! drops it with the peer. What one peer may keep open is capped at [`OPS_MAX`]
//! operations, the same for every provider: a peer opening more gets
//! [`TooManyOps`], which the transport treats as a protocol error of that peer
//! (it is disconnected or dropped, with the reason logged; other peers are not
//! affected). A well-behaved initiator sends the requests of an operation back to
//! back on its connection or channel, so it has at most a few in progress.

use fabric_core::Error;
use std::fmt;

/// The most operations sent as several requests that one peer may have in
/// progress at a target. Each costs 16 bytes of tracking, so a peer holds at most
/// 64 KiB of the target's memory this way. Opening one more is a protocol error
/// ([`TooManyOps`]).
pub const OPS_MAX: usize = 4096;

/// A peer opened more than [`OPS_MAX`] operations at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooManyOps;

impl fmt::Display for TooManyOps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "more than {OPS_MAX} RMA operations in progress")
    }
}

impl std::error::Error for TooManyOps {}

/// One peer's operations in progress at the target, keyed by request id.
///
/// For each request of a peer: [`RmaTarget::begin`] says whether it may proceed,
/// and [`RmaTarget::end`] records how it went and, on the operation's last
/// request, how the whole operation went. Memory grows with the most operations in
/// progress at once (at most [`OPS_MAX`]) and is reused after.
#[derive(Debug, Default)]
pub struct RmaTarget {
    /// (request id, the operation's first refusal).
    ops: Vec<(u64, Option<Error>)>,
}

impl RmaTarget {
    /// No operation in progress.
    pub fn new() -> RmaTarget {
        RmaTarget::default()
    }

    /// A request of operation `id` begins (`last`: it is the operation's last
    /// request). If it starts an operation, `check` decides whether the operation
    /// is refused (the error) or may go ahead (`None`); a later request of an
    /// operation shares what its first one got, or what an earlier request failed
    /// with. Returns the refusal this request shares, `None` to go ahead.
    ///
    /// An operation of several requests is tracked from its first request to its
    /// last; starting one more than [`OPS_MAX`] is [`TooManyOps`], and changes
    /// nothing.
    pub fn begin(
        &mut self,
        id: u64,
        last: bool,
        check: impl FnOnce() -> Option<Error>,
    ) -> Result<Option<Error>, TooManyOps> {
        if let Some(t) = self.ops.iter().find(|t| t.0 == id) {
            return Ok(t.1);
        }
        if !last && self.ops.len() >= OPS_MAX {
            return Err(TooManyOps);
        }
        let err = check();
        if !last {
            self.ops.push((id, err));
        }
        Ok(err)
    }

    /// A request of operation `id` is done (`err`: why it failed). On the
    /// operation's last request (`last`) the operation is over: returns its outcome,
    /// the first error of any of its requests. Before that, `None`.
    pub fn end(&mut self, id: u64, last: bool, err: Option<Error>) -> Option<Result<(), Error>> {
        let pos = self.ops.iter().position(|t| t.0 == id);
        if let (Some(i), Some(e)) = (pos, err) {
            self.ops[i].1.get_or_insert(e);
        }
        if !last {
            return None;
        }
        let first = match pos {
            Some(i) => self.ops.swap_remove(i).1,
            None => err,
        };
        Some(first.map_or(Ok(()), Err))
    }

    /// Operations in progress.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether no operation is in progress.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Forget every operation (the peer is gone).
    pub fn clear(&mut self) {
        self.ops.clear();
    }
}

/// The most bytes of read answers one peer may have queued at the target and not
/// yet taken (tcp: written to its socket; udp: acknowledged by its channel):
/// four [`RMA_CHUNK`](crate::wire::RMA_CHUNK)s, 16 MiB. A read request that
/// would go beyond it waits, as its header, until the peer takes what it was sent
/// ([`Answers`]). A single answer always goes, so one operation never waits.
pub const ANSWER_BYTES_MAX: usize = 4 * crate::wire::RMA_CHUNK;

/// The most answers one peer may be owed by the target at once: queued and not
/// yet taken, or waiting for room (read requests beyond [`ANSWER_BYTES_MAX`]).
/// At the cap the target stops taking that peer's requests (tcp stops reading
/// its connection, udp leaves its request frames with the channel, whose window
/// closes) until the peer takes its answers: back-pressure, as TCP's own flow
/// control. Answers other than reads are at most
/// [`MAX_ATOMIC_BYTES`](crate::atomic::MAX_ATOMIC_BYTES) plus a header, so a peer
/// makes the target hold at most `ANSWER_BYTES_MAX` plus about 16 MiB of
/// answers, and 4096 waiting request headers.
pub const ANSWERS_MAX: usize = 4096;

static HIGH_WATER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The most bytes of answers any one peer had queued at once in this process
/// ([`Answers::bytes`]'s high-water mark). A diagnostic for tests.
#[doc(hidden)]
pub fn answer_bytes_high_water() -> usize {
    HIGH_WATER.load(std::sync::atomic::Ordering::Relaxed)
}

/// The bytes of a read request's answer: a header and the bytes asked for.
pub fn read_answer_len(h: &crate::wire::Header) -> usize {
    crate::wire::HDR_LEN + usize::try_from(h.len).unwrap_or(usize::MAX)
}

/// What one peer is owed by the target: the answers queued for it and not yet
/// taken, and its read requests waiting for room. Sans-IO bookkeeping; the
/// transport calls [`Answers::queued`] when it queues an answer,
/// [`Answers::taken`] when the peer took it, offers every read request to
/// [`Answers::read`], serves [`Answers::next_read`] once answers were taken, and
/// stops taking requests while [`Answers::full`].
#[derive(Debug, Default)]
pub struct Answers {
    /// Bytes of answers queued and not yet taken.
    bytes: usize,
    /// Answers queued and not yet taken.
    count: usize,
    /// Read requests waiting for room, in arrival order (a multi-request read's
    /// answers go back in order).
    waiting: std::collections::VecDeque<crate::wire::Header>,
}

impl Answers {
    /// Nothing owed.
    pub fn new() -> Answers {
        Answers::default()
    }

    /// Bytes of answers queued and not yet taken (at most [`ANSWER_BYTES_MAX`]
    /// of read answers plus the small answers).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Answers owed: queued and not taken, or waiting.
    pub fn owed(&self) -> usize {
        self.count + self.waiting.len()
    }

    /// Read requests waiting for room.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Whether the peer is owed [`ANSWERS_MAX`] answers: take none of its
    /// requests until it takes some.
    pub fn full(&self) -> bool {
        self.owed() >= ANSWERS_MAX
    }

    fn room_for(&self, n: usize) -> bool {
        self.bytes == 0 || self.bytes.saturating_add(n) <= ANSWER_BYTES_MAX
    }

    /// A read request arrived: `true` to answer it now, `false` if it waits
    /// (the header is kept; [`Answers::next_read`] gives it back once there is
    /// room). The caller checks [`Answers::full`] before taking a request.
    pub fn read(&mut self, h: crate::wire::Header) -> bool {
        if self.waiting.is_empty() && self.room_for(read_answer_len(&h)) {
            return true;
        }
        self.waiting.push_back(h);
        false
    }

    /// The oldest waiting read request, if its answer fits now.
    pub fn next_read(&mut self) -> Option<crate::wire::Header> {
        let h = self.waiting.front()?;
        if !self.room_for(read_answer_len(h)) {
            return None;
        }
        self.waiting.pop_front()
    }

    /// An answer of `n` bytes (header included) was queued for the peer.
    pub fn queued(&mut self, n: usize) {
        self.bytes += n;
        self.count += 1;
        HIGH_WATER.fetch_max(self.bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// The peer took an answer of `n` bytes.
    pub fn taken(&mut self, n: usize) {
        self.bytes = self.bytes.saturating_sub(n);
        self.count = self.count.saturating_sub(1);
    }

    /// Forget everything (the peer is gone).
    pub fn clear(&mut self) {
        *self = Answers::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_req(len: usize) -> crate::wire::Header {
        crate::wire::Header { len: len as u64, ..crate::wire::Header::new(crate::wire::OpCode::ReadReq) }
    }

    #[test]
    fn read_answers_wait_beyond_the_byte_bound() {
        use crate::wire::{HDR_LEN, RMA_CHUNK};
        let mut a = Answers::new();
        let per = HDR_LEN + RMA_CHUNK;
        // A first answer always goes, however large.
        assert!(a.read(read_req(RMA_CHUNK)));
        a.queued(per);
        let mut now = 1;
        while a.read(read_req(RMA_CHUNK)) {
            a.queued(per);
            now += 1;
        }
        assert!(a.bytes() <= ANSWER_BYTES_MAX, "{} queued", a.bytes());
        assert_eq!(now, ANSWER_BYTES_MAX / per);
        // Once one waits, later ones (even small) wait behind it: in order.
        assert!(!a.read(read_req(1)));
        assert_eq!(a.waiting(), 2);
        assert_eq!(a.next_read(), None);
        a.taken(per);
        assert_eq!(a.next_read().map(|h| h.len), Some(RMA_CHUNK as u64));
        a.queued(per);
        assert_eq!(a.next_read().map(|h| h.len), Some(1));
        assert_eq!(a.waiting(), 0);
        // Small answers always queue; the count caps what is owed.
        while !a.full() {
            a.queued(HDR_LEN);
        }
        assert_eq!(a.owed(), ANSWERS_MAX);
        a.taken(HDR_LEN);
        assert!(!a.full());
        a.clear();
        assert_eq!((a.bytes(), a.owed()), (0, 0));
    }

    #[test]
    fn a_single_request_is_never_tracked() {
        let mut t = RmaTarget::new();
        assert_eq!(t.begin(7, true, || None), Ok(None));
        assert!(t.is_empty());
        assert_eq!(t.end(7, true, None), Some(Ok(())));
        assert_eq!(t.begin(8, true, || Some(Error::Access)), Ok(Some(Error::Access)));
        assert_eq!(t.end(8, true, Some(Error::Access)), Some(Err(Error::Access)));
        assert!(t.is_empty());
    }

    #[test]
    fn later_requests_share_the_first_refusal() {
        let mut t = RmaTarget::new();
        assert_eq!(t.begin(1, false, || Some(Error::Access)), Ok(Some(Error::Access)));
        assert_eq!(t.end(1, false, Some(Error::Access)), None);
        // Not checked again: the first request's outcome stands.
        assert_eq!(t.begin(1, false, || panic!("checked twice")), Ok(Some(Error::Access)));
        t.end(1, false, Some(Error::Access));
        assert_eq!(t.begin(1, true, || panic!("checked twice")), Ok(Some(Error::Access)));
        assert_eq!(t.end(1, true, Some(Error::Access)), Some(Err(Error::Access)));
        assert!(t.is_empty());
    }

    #[test]
    fn one_failed_request_fails_the_operation() {
        let mut t = RmaTarget::new();
        assert_eq!(t.begin(5, false, || None), Ok(None));
        assert_eq!(t.end(5, false, None), None);
        // A middle request fails (the region was closed meanwhile, say).
        assert_eq!(t.begin(5, false, || None), Ok(None));
        assert_eq!(t.end(5, false, Some(Error::Access)), None);
        // Later ones are refused, and the operation failed as a whole even if its
        // last request went well.
        assert_eq!(t.begin(5, true, || None), Ok(Some(Error::Access)));
        assert_eq!(t.end(5, true, None), Some(Err(Error::Access)));
        assert!(t.is_empty());
    }

    #[test]
    fn operations_of_different_ids_are_apart() {
        let mut t = RmaTarget::new();
        assert_eq!(t.begin(1, false, || None), Ok(None));
        assert_eq!(t.begin(2, false, || Some(Error::Access)), Ok(Some(Error::Access)));
        assert_eq!(t.len(), 2);
        assert_eq!(t.begin(1, true, || None), Ok(None));
        assert_eq!(t.end(1, true, None), Some(Ok(())));
        assert_eq!(t.end(2, true, None), Some(Err(Error::Access)));
        assert!(t.is_empty());
    }

    #[test]
    fn a_peer_may_keep_at_most_the_cap_open() {
        let mut t = RmaTarget::new();
        for id in 0..OPS_MAX as u64 {
            assert_eq!(t.begin(id, false, || None), Ok(None), "operation {id}");
        }
        assert_eq!(t.len(), OPS_MAX);
        // One more is refused, unchecked, and changes nothing.
        assert_eq!(t.begin(u64::MAX, false, || panic!("checked")), Err(TooManyOps));
        assert_eq!(t.len(), OPS_MAX);
        // Requests of operations already open, and single requests, still go.
        assert_eq!(t.begin(3, false, || None), Ok(None));
        assert_eq!(t.begin(u64::MAX, true, || None), Ok(None));
        // Once one ends, another may start.
        assert_eq!(t.end(3, true, None), Some(Ok(())));
        assert_eq!(t.begin(u64::MAX, false, || None), Ok(None));
        assert_eq!(t.len(), OPS_MAX);
        assert!(TooManyOps.to_string().contains(&OPS_MAX.to_string()));
        // What the cap's documentation says it costs.
        assert_eq!(std::mem::size_of::<(u64, Option<Error>)>() * OPS_MAX, 64 << 10);
        t.clear();
        assert!(t.is_empty());
    }
}
