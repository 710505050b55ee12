//! The receive side of a message endpoint, transport-independent: posted receives,
//! multi-receive buffers, unexpected messages, peek/claim/discard, and where an
//! arriving message's bytes go and how its receive completes.
//!
//! Sans-IO: a transport tells the engine what arrived ([`RxEngine::arrive`],
//! [`RxEngine::match_arrival`]) and writes payload through [`RxEngine::write`] or the
//! pieces [`RxEngine::pieces`] gives; the engine completes receives on the bound
//! queues ([`Bindings`]). What needs the wire (a rendezvous message matched to a
//! receive, one discarded) comes back as [`RxAction`]s the transport drains with
//! [`RxEngine::take_action`] after every call.

use crate::bind::Bindings;
use crate::iov::{self, copy_into};
use crate::matcher::{Matcher, MsgSpec, PostedId, PostedMatch, RecvSpec, UnexpId};
use crate::wire::{HdrFlags, Header, OpCode};
use fabric_core::prov::{IoVec, Op};
use fabric_core::{Caps, CqEntry, Error, FiAddr, OpFlags, Result};
use std::collections::VecDeque;

/// Pieces in one operation's buffer list (`iov_limit`).
pub const IOV_LIMIT: usize = 8;

/// Buffers of unexpected eager messages kept for reuse.
const UNEXP_POOL: usize = 32;

/// A posted receive: a compact record (it moves from the posting call into the
/// matcher, out again to a [`Target`] and on to its completion). A buffer of one
/// piece is kept here; one of several pieces in the engine's piece lists, which
/// [`RxEngine::write`], [`RxEngine::pieces`] and the completion find.
#[derive(Debug)]
pub struct PostedRecv {
    /// Completion context.
    pub context: u64,
    /// The buffer's only piece (empty when it has none); unused with a list.
    first: IoVec,
    /// The engine's piece list holding the pieces, or [`NO_LIST`] for a buffer
    /// of at most one piece.
    list: u32,
    /// Pieces in use.
    niov: u32,
    /// Total bytes of the pieces.
    pub cap: usize,
    /// A tagged receive.
    pub tagged: bool,
    /// Posted with `FI_COMPLETION`: its success is reported even on a queue
    /// bound with `FI_SELECTIVE_COMPLETION` ([`Bindings::rx_done`]).
    pub completion: bool,
    /// Index into the engine's multi-receive buffers, or [`NO_MULTI`].
    multi: u32,
}

/// [`PostedRecv::list`] of a buffer whose pieces are kept in the record.
const NO_LIST: u32 = u32::MAX;

/// [`PostedRecv::multi`] of a receive that is not a multi-receive buffer.
const NO_MULTI: u32 = u32::MAX;

/// The receive flags [`RxEngine::post`]'s usual case has none of: a peek, claim
/// or discard, or a multi-receive buffer.
const SPECIAL_RECV: OpFlags = OpFlags::PEEK.union(OpFlags::CLAIM).union(OpFlags::DISCARD).union(OpFlags::MULTI_RECV);

/// What the matcher matches a receive posted by `op` (of kind `tagged`) on.
#[inline(always)]
fn recv_spec(op: &Op<'_>, tagged: bool, src: FiAddr) -> RecvSpec {
    RecvSpec { tagged, src, tag: op.tag, ignore: op.ignore, user_context: op.user_context }
}

impl PostedRecv {
    /// The record of a receive into one piece, `piece`.
    #[inline(always)]
    fn one(context: u64, piece: IoVec, tagged: bool, completion: bool) -> PostedRecv {
        PostedRecv {
            context,
            first: piece,
            list: NO_LIST,
            niov: 1,
            cap: piece.len,
            tagged,
            completion,
            multi: NO_MULTI,
        }
    }

    /// The multi-receive buffer this receive stands for, if it is one.
    #[inline]
    fn multi(&self) -> Option<usize> {
        (self.multi != NO_MULTI).then_some(self.multi as usize)
    }
}

/// State of a multi-receive buffer while it is posted.
#[derive(Debug)]
struct Multi {
    context: u64,
    /// Posted with `FI_COMPLETION` (see [`PostedRecv::completion`]).
    completion: bool,
    base: *mut u8,
    cap: usize,
    /// Bytes handed out to messages so far.
    off: usize,
    /// Messages placed in it whose data is still arriving.
    inflight: usize,
    /// No longer matched: released once `inflight` drops to zero.
    released: bool,
    /// Its entry on the posted queue, while it is there.
    pid: Option<PostedId>,
}

// SAFETY: `base` points into a buffer the application handed over under
// post_recv's contract; it is only dereferenced by the engine's owner, under its lock.
unsafe impl Send for Multi {}

/// An unexpected message; `R` is the transport's handle of a rendezvous message
/// (where its data waits).
#[derive(Debug)]
pub struct Unexp<R> {
    /// Where the payload is.
    pub body: UnexpBody<R>,
    /// Its length.
    pub len: u64,
    /// Remote CQ data, if it carries some.
    pub data: Option<u64>,
    /// Its tag.
    pub tag: u64,
    /// The remote CQ data of an RMA write, not a message.
    pub rma: bool,
}

/// Where an unexpected message's payload is.
#[derive(Debug)]
pub enum UnexpBody<R> {
    /// Here, in a buffer of ours.
    Eager(Vec<u8>),
    /// Still at the sender (rendezvous).
    Rts(R),
}

/// Where a message's payload goes.
#[derive(Debug)]
pub enum Target {
    /// A posted receive taken off the queue.
    Single(PostedRecv),
    /// A slice of a multi-receive buffer.
    Multi {
        /// Which buffer.
        idx: usize,
        /// Where the slice starts.
        off: usize,
        /// Its length.
        cap: usize,
    },
}

/// A rendezvous message matched to its receive: the transport fetches the data
/// into `target`, then calls [`RxEngine::complete`] (or [`RxEngine::fail`]).
#[derive(Debug)]
pub struct RtsMatch<R> {
    /// Where the data goes.
    pub target: Target,
    /// The message (op `Msg`, length, tag, CQ data).
    pub hdr: Header,
    /// Its source.
    pub src: FiAddr,
    /// The transport's handle.
    pub rts: R,
}

/// Something the transport must put on the wire. (Drained at once after each
/// call, never stored in bulk, so the size of the start variant does not matter.)
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum RxAction<R> {
    /// Fetch a rendezvous message's data.
    Start(RtsMatch<R>),
    /// Tell the sender its rendezvous message was discarded (its send completes).
    Discard(R),
}

/// Posted receives, multi-receive buffers and unexpected messages of one endpoint.
pub struct RxEngine<R> {
    matcher: Matcher<PostedRecv, Unexp<R>>,
    /// The pieces of posted receives with more than one ([`PostedRecv::list`]),
    /// from the posting until the receive completes or fails. A receive's
    /// [`Target`] dropped without either keeps its list until the engine goes.
    lists: Vec<[IoVec; IOV_LIMIT]>,
    /// Indices of the unused entries of `lists`, reused first.
    free_lists: Vec<u32>,
    multis: Vec<Option<Multi>>,
    /// Recycled buffers of unexpected eager messages (at most `UNEXP_POOL`, each no
    /// larger than `pool_cap`), so buffering them allocates nothing once warm.
    unexp_pool: Vec<Vec<u8>>,
    pool_cap: usize,
    /// `FI_OPT_MIN_MULTI_RECV`.
    min_multi_recv: usize,
    /// Whether the remote CQ data of an RMA write takes a posted receive (fabric's
    /// Rust API, and libfabric's `FI_RX_CQ_DATA` mode) or completes on its own
    /// with no context (libfabric's rule otherwise). See [`RxEngine::rma_data`].
    rma_data_takes_recv: bool,
    /// Work for the transport, drained by `take_action`.
    actions: VecDeque<RxAction<R>>,
}

/// The header of an eager message as its fields arrived (tagged or not, `len`
/// bytes, `tag`, CQ data `data`).
#[inline]
fn eager_header(tagged: bool, len: u64, tag: u64, data: Option<u64>) -> Header {
    Header {
        flags: HdrFlags(if tagged { HdrFlags::TAGGED } else { 0 } | if data.is_some() { HdrFlags::CQ_DATA } else { 0 }),
        len,
        tag,
        data: data.unwrap_or(0),
        id: 0,
        op: OpCode::Msg,
    }
}

/// Copy a whole message `body` into the only piece of `rec`, which holds it
/// (`body.len() <= rec.cap`, checked by the caller).
#[inline(always)]
fn fill_one(rec: &PostedRecv, body: &[u8]) {
    debug_assert!(rec.list == NO_LIST && body.len() <= rec.cap);
    if !body.is_empty() {
        // SAFETY: `body.len() <= cap`, the length of the receive's only piece,
        // which is valid for writes under post_recv's contract; `body` is a
        // distinct buffer of the caller's.
        unsafe { crate::iov::copy_bytes(body.as_ptr(), rec.first.base, body.len()) };
    }
}

/// The completion of a whole message of `len` bytes in the one-piece receive
/// `rec` (tagged or not, `tag`, CQ data `data`, from `src`).
#[inline(always)]
fn one_piece_done(b: &Bindings, rec: &PostedRecv, tagged: bool, tag: u64, data: Option<u64>, src: FiAddr, len: usize) {
    let flags = Caps::RECV | msg_flags(tagged) | if data.is_some() { Caps::REMOTE_CQ_DATA } else { Caps::empty() };
    let e = CqEntry { op_context: rec.context, flags, len, buf: 0, data: data.unwrap_or(0), tag, src };
    b.rx_done(e, rec.completion);
}

/// The completion flags that say which kind of message a completion is for:
/// [`Caps::TAGGED`] for a tagged one, [`Caps::MSG`] otherwise.
#[inline]
pub fn msg_flags(tagged: bool) -> Caps {
    if tagged {
        Caps::TAGGED
    } else {
        Caps::MSG
    }
}

impl<R> RxEngine<R> {
    /// An engine that keeps unexpected buffers of up to `pool_cap` bytes for reuse.
    pub fn new(pool_cap: usize) -> RxEngine<R> {
        RxEngine {
            matcher: Matcher::with_capacity(256, 256),
            lists: Vec::new(),
            free_lists: Vec::new(),
            multis: Vec::new(),
            unexp_pool: Vec::new(),
            pool_cap,
            min_multi_recv: 0,
            rma_data_takes_recv: true,
            actions: VecDeque::with_capacity(16),
        }
    }

    /// Set `FI_OPT_MIN_MULTI_RECV`.
    pub fn set_min_multi_recv(&mut self, bytes: usize) {
        self.min_multi_recv = bytes;
    }

    /// Whether the remote CQ data of RMA writes takes a posted receive (the
    /// default) or completes without one ([`RxEngine::rma_data`]).
    pub fn set_rma_data_takes_recv(&mut self, takes: bool) {
        self.rma_data_takes_recv = takes;
    }

    /// An RMA write from `src` carrying remote CQ data `data` has been applied.
    ///
    /// Where the data takes a receive (fabric's Rust API, whose completions give
    /// back the receive's buffer; libfabric's `FI_RX_CQ_DATA` mode), it matches
    /// the first untagged receive, or waits for one as an unexpected message of
    /// no bytes, and completes with that receive's context. Otherwise, as
    /// libfabric's providers do without that mode, it completes at once with no
    /// context and consumes nothing. Either way the completion's flags are
    /// `RMA | REMOTE_WRITE | REMOTE_CQ_DATA`; the receive counter counts it only
    /// when it took a receive (remote writes have their own counter).
    pub fn rma_data(&mut self, b: &Bindings, src: FiAddr, data: u64) {
        if self.rma_data_takes_recv {
            let m = MsgSpec { tagged: false, src, tag: 0 };
            let u = Unexp { body: UnexpBody::Eager(Vec::new()), len: 0, data: Some(data), tag: 0, rma: true };
            self.arrive(b, m, u);
            return;
        }
        let mut e = CqEntry::new(fabric_core::prov::NO_CONTEXT, Caps::RMA | Caps::REMOTE_WRITE | Caps::REMOTE_CQ_DATA);
        e.data = data;
        e.src = src;
        if let Some(cq) = &b.rx_cq {
            cq.push(e);
        }
    }

    /// Whether [`RxEngine::take_action`] has something to return.
    #[inline]
    pub fn has_actions(&self) -> bool {
        !self.actions.is_empty()
    }

    /// The next thing to put on the wire, if any.
    pub fn take_action(&mut self) -> Option<RxAction<R>> {
        self.actions.pop_front()
    }

    /// Post a receive (`fi_recv`, `fi_trecv`, `fi_recvmsg` with `flags`). `src` is
    /// the source filter already resolved (`FiAddr::UNSPEC` for any). More than
    /// [`IOV_LIMIT`] pieces is `FI_EINVAL`.
    #[inline(always)]
    pub fn post(&mut self, b: &Bindings, op: &Op<'_>, flags: OpFlags, src: FiAddr) -> Result<()> {
        let tagged = flags.contains(OpFlags::TAGGED);
        // The usual receive: one piece, no special flag, and no unexpected
        // message of its kind waiting, so it goes to the tail of its queue with
        // its record written straight into the matcher's slot.
        if let [piece] = op.iov {
            if !flags.intersects(SPECIAL_RECV) && !self.matcher.has_unexpected(tagged) {
                self.matcher.push_posted_with(tagged, || {
                    let rec = PostedRecv::one(op.context, *piece, tagged, flags.contains(OpFlags::COMPLETION));
                    (recv_spec(op, tagged, src), rec)
                });
                return Ok(());
            }
        }
        self.post_general(b, op, flags, src)
    }

    /// [`RxEngine::post`] past its usual case: several pieces (or none), a
    /// peek, claim, discard or multi-receive buffer, or unexpected messages
    /// waiting that it may match.
    #[inline(never)]
    fn post_general(&mut self, b: &Bindings, op: &Op<'_>, flags: OpFlags, src: FiAddr) -> Result<()> {
        if op.iov.len() > IOV_LIMIT {
            return Err(Error::Inval);
        }
        let tagged = flags.contains(OpFlags::TAGGED);
        let completion = flags.contains(OpFlags::COMPLETION);
        let spec = recv_spec(op, tagged, src);
        if flags.intersects(SPECIAL_RECV) {
            return self.post_special(b, op, flags, spec);
        }
        let rec = self.recv(op.context, op.iov, tagged, completion);
        match self.matcher.match_unexpected(&spec) {
            Some(uid) => self.post_unexpected(b, rec, uid),
            None => {
                self.matcher.push_posted(spec, rec);
            }
        }
        Ok(())
    }

    /// [`RxEngine::post`] of a receive an unexpected message was waiting for
    /// (out of line: the usual receive is posted before its message arrives).
    #[inline(never)]
    fn post_unexpected(&mut self, b: &Bindings, rec: PostedRecv, uid: UnexpId) {
        let (m, u) = self.matcher.remove_unexpected(uid).expect("matched id exists");
        self.deliver(b, Target::Single(rec), m, u);
    }

    /// A receive record for `iov` (at most [`IOV_LIMIT`] pieces): more than one
    /// piece go to a piece list, released when the receive completes or fails.
    #[inline]
    fn recv(&mut self, context: u64, iov: &[IoVec], tagged: bool, completion: bool) -> PostedRecv {
        let n = iov.len().min(IOV_LIMIT);
        let (first, list, cap) = match n {
            0 => (IoVec { base: std::ptr::null_mut(), len: 0 }, NO_LIST, 0),
            1 => return PostedRecv::one(context, iov[0], tagged, completion),
            _ => (IoVec { base: std::ptr::null_mut(), len: 0 }, self.store_list(&iov[..n]), IoVec::total(&iov[..n])),
        };
        PostedRecv { context, first, list, niov: n as u32, cap, tagged, completion, multi: NO_MULTI }
    }

    /// Keep the pieces of a receive of several in a piece list; its index.
    #[cold]
    fn store_list(&mut self, iov: &[IoVec]) -> u32 {
        let idx = match self.free_lists.pop() {
            Some(i) => i,
            None => {
                self.lists.push([IoVec { base: std::ptr::null_mut(), len: 0 }; IOV_LIMIT]);
                (self.lists.len() - 1) as u32
            }
        };
        self.lists[idx as usize][..iov.len()].copy_from_slice(iov);
        idx
    }

    /// The pieces of a receive's buffer.
    #[inline]
    fn iov<'a>(&'a self, rec: &'a PostedRecv) -> &'a [IoVec] {
        if rec.list == NO_LIST {
            &std::slice::from_ref(&rec.first)[..rec.niov.min(1) as usize]
        } else {
            &self.lists[rec.list as usize][..rec.niov as usize]
        }
    }

    /// A receive is done with its buffer (completed or failed): its piece list,
    /// if it has one, is free for the next.
    #[inline]
    fn release(&mut self, rec: &PostedRecv) {
        if rec.list != NO_LIST {
            self.free_lists.push(rec.list);
        }
    }

    /// [`RxEngine::post`] of a peek, claim or discard, or of a multi-receive buffer.
    #[cold]
    fn post_special(&mut self, b: &Bindings, op: &Op<'_>, flags: OpFlags, spec: RecvSpec) -> Result<()> {
        let tagged = spec.tagged;
        let completion = flags.contains(OpFlags::COMPLETION);
        if flags.intersects(OpFlags::PEEK | OpFlags::CLAIM | OpFlags::DISCARD) {
            if !tagged {
                return Err(Error::BadFlags);
            }
            return self.peek_claim(b, op, flags, spec);
        }
        // A multi-receive buffer.
        if tagged || op.iov.len() != 1 {
            return Err(Error::Inval);
        }
        let rec = self.recv(op.context, op.iov, tagged, completion);
        let idx = match self.multis.iter().position(|m| m.is_none()) {
            Some(i) => i,
            None => {
                self.multis.push(None);
                self.multis.len() - 1
            }
        };
        self.multis[idx] = Some(Multi {
            context: op.context,
            completion: rec.completion,
            base: op.iov[0].base,
            cap: rec.cap,
            off: 0,
            inflight: 0,
            released: false,
            pid: None,
        });
        let rec = PostedRecv { multi: idx as u32, ..rec };
        let pid = self.matcher.push_posted(spec, rec);
        self.multis[idx].as_mut().expect("just set").pid = Some(pid);
        // Unexpected messages first, in order, while room remains.
        loop {
            match self.multis[idx].as_ref() {
                Some(m) if !m.released => {}
                _ => break,
            }
            let Some(uid) = self.matcher.match_unexpected(&spec) else { break };
            let (ms, u) = self.matcher.remove_unexpected(uid).expect("matched id exists");
            let target = self.reserve_multi(idx, u.len);
            self.deliver(b, target, ms, u);
        }
        Ok(())
    }

    fn peek_claim(&mut self, b: &Bindings, op: &Op<'_>, flags: OpFlags, spec: RecvSpec) -> Result<()> {
        let completion = flags.contains(OpFlags::COMPLETION);
        let claim = flags.contains(OpFlags::CLAIM);
        let discard = flags.contains(OpFlags::DISCARD);
        if flags.contains(OpFlags::PEEK) {
            let Some(uid) = self.matcher.match_unexpected(&spec) else {
                let e = CqEntry::new(op.context, Caps::RECV | Caps::TAGGED);
                b.rx_err(e, 0, Error::NoMsg);
                return Ok(());
            };
            let (m, u) = self.matcher.unexpected(uid).expect("matched id exists");
            let mut e = CqEntry::new(op.context, Caps::RECV | Caps::TAGGED);
            e.len = u.len as usize;
            e.tag = m.tag;
            e.src = m.src;
            if let Some(d) = u.data {
                e.data = d;
                e.flags |= Caps::REMOTE_CQ_DATA;
            }
            if discard {
                let (_, u) = self.matcher.remove_unexpected(uid).expect("exists");
                self.discard(u);
            } else if claim {
                self.matcher.claim(uid, op.user_context);
            }
            // A peek's answer is what it was posted for: always reported.
            b.rx_done(e, true);
            return Ok(());
        }
        if claim {
            let uid = self.matcher.find_claimed(op.user_context).ok_or(Error::NoMsg)?;
            let (m, u) = self.matcher.remove_unexpected(uid).expect("claimed id exists");
            if discard {
                let mut e = CqEntry::new(op.context, Caps::RECV | Caps::TAGGED);
                e.tag = m.tag;
                e.src = m.src;
                self.discard(u);
                b.rx_done(e, completion);
                return Ok(());
            }
            let rec = self.recv(op.context, op.iov, true, completion);
            self.deliver(b, Target::Single(rec), m, u);
            return Ok(());
        }
        Err(Error::BadFlags)
    }

    fn discard(&mut self, u: Unexp<R>) {
        match u.body {
            UnexpBody::Rts(r) => self.actions.push_back(RxAction::Discard(r)),
            UnexpBody::Eager(buf) => self.recycle(buf),
        }
    }

    /// A buffer for an unexpected message of `len` bytes (recycled when possible).
    pub fn unexp_buf(&mut self, len: usize) -> Result<Vec<u8>> {
        let mut buf = self.unexp_pool.pop().unwrap_or_default();
        buf.clear();
        buf.try_reserve(len).map_err(|_| Error::NoMem)?;
        Ok(buf)
    }

    /// Keep an unexpected message's buffer for the next one.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if self.unexp_pool.len() < UNEXP_POOL && buf.capacity() <= self.pool_cap {
            self.unexp_pool.push(buf);
        }
    }

    /// Reserve room for a message of `len` in a multi-receive buffer; releases the
    /// buffer from matching when what is left falls below the minimum.
    fn reserve_multi(&mut self, idx: usize, len: u64) -> Target {
        let min = self.min_multi_recv;
        let m = self.multis[idx].as_mut().expect("multi exists while posted");
        let off = m.off;
        let room = m.cap - m.off;
        let take = (len.min(room as u64)) as usize;
        m.off += take;
        m.inflight += 1;
        if m.cap - m.off < min.max(1) || take < len as usize {
            m.released = true;
        }
        if m.released {
            if let Some(pid) = m.pid.take() {
                self.matcher.remove_posted(pid);
            }
        }
        Target::Multi { idx, off, cap: take }
    }

    /// A message placed in a multi-receive buffer finished (ok or with `err`).
    fn multi_finish(&mut self, b: &Bindings, idx: usize, done: Option<(CqEntry, usize)>, err: Error) {
        let Some(m) = self.multis[idx].as_mut() else { return };
        m.inflight = m.inflight.saturating_sub(1);
        let last = m.released && m.inflight == 0;
        let context = m.context;
        let completion = m.completion;
        if last {
            self.multis[idx] = None;
        }
        match done {
            Some((mut e, olen)) => {
                if last {
                    e.flags |= Caps::MULTI_RECV;
                }
                if olen > 0 {
                    b.rx_err(e, olen, Error::Trunc);
                } else {
                    // The buffer's release is always reported: the application
                    // learns from it that the buffer is its own again.
                    b.rx_done(e, completion || last);
                }
            }
            None => {
                let mut e = CqEntry::new(context, Caps::RECV | Caps::MSG);
                if last {
                    e.flags |= Caps::MULTI_RECV;
                }
                b.rx_err(e, 0, err);
            }
        }
    }

    /// Take a multi-receive buffer out of service: it completes (with `err`) once
    /// the messages already placed in it have.
    fn release_multi(&mut self, b: &Bindings, mi: usize, err: Error) {
        if let Some(m) = self.multis.get_mut(mi).and_then(|m| m.as_mut()) {
            m.released = true;
            m.inflight += 1;
            self.multi_finish(b, mi, None, err);
        }
    }

    /// The receive for a message that starts arriving now (its payload follows):
    /// the first matching posted receive, or `None` (the caller buffers it and
    /// hands it to [`RxEngine::arrive`] once complete).
    #[inline]
    pub fn match_arrival(&mut self, m: &MsgSpec, len: u64) -> Option<Target> {
        match self.matcher.take_posted(m, |r| r.multi != NO_MULTI)? {
            PostedMatch::Taken(rec) => Some(Target::Single(rec)),
            PostedMatch::Stays(pid) => Some(self.take_multi(pid, len)),
        }
    }

    /// A message whose payload is all here (`body`, of its `len` bytes; CQ data
    /// `data`), matched and delivered in one step: what [`RxEngine::match_arrival`],
    /// [`RxEngine::write`] and [`RxEngine::complete`] do one after the other,
    /// with a one-piece receive that holds it all filled and completed inline
    /// (no [`Target`] or [`Header`] built). `false` when no posted receive
    /// matches: the caller holds the message as unexpected.
    #[inline(always)]
    pub fn deliver_eager(&mut self, b: &Bindings, m: &MsgSpec, len: u64, data: Option<u64>, body: &[u8]) -> bool {
        // The usual case: the head of the queue, a plain one-piece receive that
        // holds the whole message, filled and completed from where it is stored
        // (its record is not moved out), then dropped from the queue.
        if let Some(rec) = self.matcher.posted_head(m) {
            if rec.multi == NO_MULTI && rec.list == NO_LIST && body.len() <= rec.cap && body.len() as u64 == len {
                fill_one(rec, body);
                one_piece_done(b, rec, m.tagged, m.tag, data, m.src, body.len());
                self.matcher.drop_posted_head(m.tagged);
                return true;
            }
        }
        self.deliver_eager_general(b, m, len, data, body)
    }

    /// [`RxEngine::deliver_eager`] past its usual case: a receive further down
    /// the queue, one of several pieces or a multi-receive buffer, a message
    /// that does not fit, or no receive at all.
    #[inline(never)]
    fn deliver_eager_general(&mut self, b: &Bindings, m: &MsgSpec, len: u64, data: Option<u64>, body: &[u8]) -> bool {
        match self.matcher.take_posted(m, |r| r.multi != NO_MULTI) {
            None => false,
            Some(PostedMatch::Taken(rec)) => {
                if rec.list == NO_LIST && body.len() <= rec.cap && body.len() as u64 == len {
                    fill_one(&rec, body);
                    one_piece_done(b, &rec, m.tagged, m.tag, data, m.src, body.len());
                } else {
                    self.deliver_eager_slow(b, Target::Single(rec), m, len, data, body);
                }
                true
            }
            Some(PostedMatch::Stays(pid)) => {
                let target = self.take_multi(pid, len);
                self.deliver_eager_slow(b, target, m, len, data, body);
                true
            }
        }
    }

    /// [`RxEngine::deliver_eager`] into anything but a one-piece receive that
    /// holds the whole message.
    #[inline(never)]
    fn deliver_eager_slow(
        &mut self,
        b: &Bindings,
        target: Target,
        m: &MsgSpec,
        len: u64,
        data: Option<u64>,
        body: &[u8],
    ) {
        let hdr = eager_header(m.tagged, len, m.tag, data);
        self.write(&target, 0, body);
        self.complete(b, target, &hdr, m.src, false);
    }

    /// The slice of the matched multi-receive buffer `pid` a message of `len`
    /// bytes gets.
    #[cold]
    fn take_multi(&mut self, pid: PostedId, len: u64) -> Target {
        let mi = self.matcher.posted(pid).and_then(|(_, r)| r.multi()).expect("a matched multi-receive buffer");
        self.reserve_multi(mi, len)
    }

    /// A complete message (eager payload in, or a rendezvous request) with no
    /// receive chosen yet: deliver it to the first matching posted receive, or queue
    /// it as unexpected.
    pub fn arrive(&mut self, b: &Bindings, m: MsgSpec, u: Unexp<R>) {
        match self.match_arrival(&m, u.len) {
            Some(target) => self.deliver(b, target, m, u),
            None => {
                self.matcher.push_unexpected(m, u);
            }
        }
    }

    /// A message whose payload is all here and that no posted receive takes
    /// ([`RxEngine::deliver_eager`] said so, and nothing was posted since): held
    /// as unexpected with a copy of `body`, without matching it again. Queues no
    /// action. `Err(NoMem)` when no buffer can hold it.
    #[inline(never)]
    pub fn hold_eager(&mut self, m: MsgSpec, len: u64, data: Option<u64>, body: &[u8]) -> Result<()> {
        let mut buf = self.unexp_buf(body.len())?;
        buf.extend_from_slice(body);
        self.matcher.push_unexpected(m, Unexp { body: UnexpBody::Eager(buf), len, data, tag: m.tag, rma: false });
        Ok(())
    }

    /// Deliver a complete unexpected message (or start its rendezvous).
    fn deliver(&mut self, b: &Bindings, target: Target, m: MsgSpec, u: Unexp<R>) {
        let hdr = eager_header(m.tagged, u.len, u.tag, u.data);
        match u.body {
            UnexpBody::Eager(buf) => {
                self.write(&target, 0, &buf);
                self.recycle(buf);
                self.complete(b, target, &hdr, m.src, u.rma);
            }
            UnexpBody::Rts(rts) => {
                self.actions.push_back(RxAction::Start(RtsMatch { target, hdr, src: m.src, rts }));
            }
        }
    }

    /// Write bytes of a message at offset `off` into its target (never past the
    /// receive's capacity, or the slice of a multi-receive buffer it was given).
    #[inline]
    pub fn write(&self, target: &Target, off: u64, bytes: &[u8]) {
        match target {
            Target::Single(rec) if rec.list == NO_LIST => {
                // One piece (or none: `cap` is 0), `cap` bytes long.
                let n = iov::clip(rec.cap as u64, off, bytes.len() as u64) as usize;
                if n > 0 {
                    // SAFETY: `off + n <= cap`, the length of the receive's only
                    // piece, which is valid for writes under post_recv's contract;
                    // `bytes` is a distinct buffer of the caller's.
                    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), rec.first.base.add(off as usize), n) };
                }
            }
            Target::Single(rec) => copy_into(self.iov(rec), rec.cap, off, bytes),
            Target::Multi { idx, off: base, cap } => {
                if let Some(m) = self.multis[*idx].as_ref() {
                    let iov = [IoVec { base: m.base, len: m.cap }];
                    let room = (*cap as u64).saturating_sub(off) as usize;
                    let n = bytes.len().min(room);
                    copy_into(&iov, *base + *cap, *base as u64 + off, &bytes[..n]);
                }
            }
        }
    }

    /// The pieces of memory where bytes `off..off + len` of a message go (clipped
    /// to what the target holds), for a transport that moves data straight into
    /// them (a socket read, a cross-memory copy). Returns how many of `out` are used.
    pub fn pieces(&self, target: &Target, off: u64, len: u64, out: &mut [IoVec; IOV_LIMIT]) -> usize {
        match target {
            Target::Single(rec) if rec.list == NO_LIST => {
                // One piece (or none: `cap` is 0), `cap` bytes long.
                let k = iov::clip(rec.cap as u64, off, len) as usize;
                if k == 0 {
                    return 0;
                }
                // SAFETY: off + k <= cap, the length of the piece: inside it.
                out[0] = IoVec { base: unsafe { rec.first.base.add(off as usize) }, len: k };
                1
            }
            Target::Single(rec) => iov::slice_into(self.iov(rec), off, iov::clip(rec.cap as u64, off, len), out),
            Target::Multi { idx, off: base, cap } => {
                let Some(m) = self.multis[*idx].as_ref() else { return 0 };
                if off >= *cap as u64 {
                    return 0;
                }
                let k = len.min(*cap as u64 - off) as usize;
                if k == 0 {
                    return 0;
                }
                // SAFETY: base + off + k <= base + cap <= m.cap: inside the buffer.
                out[0] = IoVec { base: unsafe { m.base.add(*base + off as usize) }, len: k };
                1
            }
        }
    }

    /// Complete a receive whose payload has been written (all of `hdr.len` seen).
    /// `rma`: the remote CQ data of an RMA write, reported as the write.
    #[inline]
    pub fn complete(&mut self, b: &Bindings, target: Target, hdr: &Header, src: FiAddr, rma: bool) {
        // The usual case inline: a whole message into a receive of one piece.
        if let Target::Single(rec) = &target {
            if rec.list == NO_LIST && hdr.len <= rec.cap as u64 && !rma {
                let data = hdr.flags.has(HdrFlags::CQ_DATA).then_some(hdr.data);
                one_piece_done(b, rec, hdr.flags.has(HdrFlags::TAGGED), hdr.tag, data, src, hdr.len as usize);
                return;
            }
        }
        self.complete_slow(b, target, hdr, src, rma)
    }

    /// [`RxEngine::complete`] of anything but a whole message into a receive of
    /// one piece: a piece list, a multi-receive buffer, a truncation, RMA data.
    #[inline(never)]
    fn complete_slow(&mut self, b: &Bindings, target: Target, hdr: &Header, src: FiAddr, rma: bool) {
        let tagged = hdr.flags.has(HdrFlags::TAGGED);
        let mut flags = if rma { Caps::RMA | Caps::REMOTE_WRITE } else { Caps::RECV | msg_flags(tagged) };
        let data = if hdr.flags.has(HdrFlags::CQ_DATA) {
            flags |= Caps::REMOTE_CQ_DATA;
            hdr.data
        } else {
            0
        };
        match target {
            Target::Single(rec) => {
                self.release(&rec);
                let got = (hdr.len.min(rec.cap as u64)) as usize;
                let mut e = CqEntry::new(rec.context, flags);
                e.len = got;
                e.data = data;
                e.tag = hdr.tag;
                e.src = src;
                if hdr.len > rec.cap as u64 {
                    b.rx_err(e, (hdr.len - got as u64).min(usize::MAX as u64) as usize, Error::Trunc);
                } else {
                    b.rx_done(e, rec.completion || rma);
                }
            }
            Target::Multi { idx, off, cap } => {
                let Some(m) = self.multis[idx].as_ref() else { return };
                let mut e = CqEntry::new(m.context, flags);
                e.len = cap;
                e.data = data;
                e.tag = hdr.tag;
                e.src = src;
                e.buf = m.base as usize + off;
                let olen = (hdr.len.saturating_sub(cap as u64)).min(usize::MAX as u64) as usize;
                self.multi_finish(b, idx, Some((e, olen)), Error::Trunc);
            }
        }
    }

    /// Fail a receive whose message will not arrive.
    pub fn fail(&mut self, b: &Bindings, target: Target, hdr: &Header, src: FiAddr, err: Error) {
        let tagged = hdr.flags.has(HdrFlags::TAGGED);
        match target {
            Target::Single(rec) => {
                self.release(&rec);
                let mut e = CqEntry::new(rec.context, Caps::RECV | msg_flags(tagged));
                e.tag = hdr.tag;
                e.src = src;
                b.rx_err(e, 0, err);
            }
            Target::Multi { idx, .. } => self.multi_finish(b, idx, None, err),
        }
    }

    /// Cancel the receives posted with `user_context`; false when there were none.
    pub fn cancel(&mut self, b: &Bindings, user_context: u64) -> bool {
        let mut found = false;
        while let Some((_, rec)) = self.matcher.cancel_posted(user_context) {
            found = true;
            self.fail_posted(b, rec, Error::Canceled);
        }
        found
    }

    /// Fail every posted receive with `err` (the endpoint closes, or a MSG
    /// endpoint's only connection ended).
    pub fn fail_all_posted(&mut self, b: &Bindings, err: Error) {
        for (_, rec) in self.matcher.drain_posted() {
            self.fail_posted(b, rec, err);
        }
    }

    fn fail_posted(&mut self, b: &Bindings, rec: PostedRecv, err: Error) {
        self.release(&rec);
        match rec.multi() {
            Some(mi) => self.release_multi(b, mi, err),
            None => b.rx_err(CqEntry::new(rec.context, Caps::RECV | msg_flags(rec.tagged)), 0, err),
        }
    }

    /// Forget every unexpected message; returns the rendezvous handles among them.
    pub fn drain_unexpected(&mut self) -> impl Iterator<Item = R> {
        self.matcher.drain_unexpected().into_iter().filter_map(|(_, u)| match u.body {
            UnexpBody::Rts(r) => Some(r),
            UnexpBody::Eager(_) => None,
        })
    }

    /// Forget the unexpected messages from `src` (a peer that went away);
    /// returns the rendezvous handles among them.
    pub fn drain_unexpected_from(&mut self, src: FiAddr) -> impl Iterator<Item = R> {
        self.matcher.remove_unexpected_from(src).into_iter().filter_map(|(_, u)| match u.body {
            UnexpBody::Rts(r) => Some(r),
            UnexpBody::Eager(_) => None,
        })
    }

    /// Unexpected messages waiting (for tests and diagnostics).
    pub fn unexpected_len(&self) -> usize {
        self.matcher.unexpected_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(buf: &mut [u8], iov: &mut [IoVec; 1], context: u64) -> Op<'static> {
        iov[0] = IoVec { base: buf.as_mut_ptr(), len: buf.len() };
        // SAFETY: (test) the slice outlives every use of the Op in these tests.
        let iov: &'static [IoVec] = unsafe { std::slice::from_raw_parts(iov.as_ptr(), 1) };
        Op { iov, addr: FiAddr::UNSPEC, context, user_context: context, data: 0, tag: 0, ignore: 0 }
    }

    fn bindings() -> Bindings {
        let attr = fabric_core::CqAttr::default();
        Bindings { rx_cq: Some(crate::cq::UtilCq::new(&attr).unwrap()), ..Bindings::default() }
    }

    fn read_one(b: &Bindings) -> Option<CqEntry> {
        use fabric_core::prov::CqOps;
        let mut out = [CqEntry::new(0, Caps::empty())];
        match b.rx_cq.as_ref().unwrap().read(&mut out) {
            Ok(1) => Some(out[0]),
            _ => None,
        }
    }

    fn spec() -> MsgSpec {
        MsgSpec { tagged: false, src: FiAddr(3), tag: 0 }
    }

    #[test]
    fn rma_data_takes_a_receive_or_none() {
        let b = bindings();
        let mut rx: RxEngine<u32> = RxEngine::new(1 << 16);
        // Taking a receive: nothing until one is posted, then its context.
        rx.rma_data(&b, FiAddr(3), 0xfeed);
        assert!(read_one(&b).is_none());
        let mut dst = [0u8; 8];
        let mut iov = [IoVec { base: std::ptr::null_mut(), len: 0 }];
        rx.post(&b, &op(&mut dst, &mut iov, 7), OpFlags::empty(), FiAddr::UNSPEC).unwrap();
        let e = read_one(&b).expect("completed into the receive");
        assert_eq!((e.op_context, e.len, e.data, e.src), (7, 0, 0xfeed, FiAddr(3)));
        assert!(e.flags.contains(Caps::RMA | Caps::REMOTE_WRITE | Caps::REMOTE_CQ_DATA));
        // Without: at once, no context, and a posted receive stays posted.
        rx.set_rma_data_takes_recv(false);
        rx.post(&b, &op(&mut dst, &mut iov, 8), OpFlags::empty(), FiAddr::UNSPEC).unwrap();
        rx.rma_data(&b, FiAddr(4), 0xbeef);
        let e = read_one(&b).expect("completed on its own");
        assert_eq!((e.op_context, e.data, e.src), (fabric_core::prov::NO_CONTEXT, 0xbeef, FiAddr(4)));
        assert!(e.flags.contains(Caps::RMA | Caps::REMOTE_WRITE | Caps::REMOTE_CQ_DATA));
        assert!(read_one(&b).is_none());
        rx.arrive(&b, spec(), Unexp { body: UnexpBody::Eager(Vec::new()), len: 0, data: None, tag: 0, rma: false });
        assert_eq!(read_one(&b).expect("the receive is still there").op_context, 8);
    }

    #[test]
    fn unexpected_eager_then_posted() {
        let b = bindings();
        let mut rx: RxEngine<u32> = RxEngine::new(1 << 16);
        let mut buf = rx.unexp_buf(5).unwrap();
        buf.extend_from_slice(b"hello");
        rx.arrive(&b, spec(), Unexp { body: UnexpBody::Eager(buf), len: 5, data: Some(9), tag: 0, rma: false });
        assert!(read_one(&b).is_none());
        let mut dst = [0u8; 8];
        let mut iov = [IoVec { base: std::ptr::null_mut(), len: 0 }];
        rx.post(&b, &op(&mut dst, &mut iov, 7), OpFlags::empty(), FiAddr::UNSPEC).unwrap();
        let e = read_one(&b).expect("completed");
        assert_eq!((e.op_context, e.len, e.data, e.src), (7, 5, 9, FiAddr(3)));
        assert!(e.flags.contains(Caps::REMOTE_CQ_DATA));
        assert_eq!(&dst[..5], b"hello");
    }

    #[test]
    fn receives_of_several_pieces_keep_them_in_reused_lists() {
        let b = bindings();
        let mut rx: RxEngine<u32> = RxEngine::new(1 << 16);
        let mut dst = [[0u8; 3]; 3];
        for round in 0..3u64 {
            let [d0, d1, d2] = &mut dst;
            let iov = [
                IoVec { base: d0.as_mut_ptr(), len: 3 },
                IoVec { base: d1.as_mut_ptr(), len: 3 },
                IoVec { base: d2.as_mut_ptr(), len: 3 },
            ];
            let o =
                Op { iov: &iov, addr: FiAddr::UNSPEC, context: round, user_context: round, data: 0, tag: 0, ignore: 0 };
            rx.post(&b, &o, OpFlags::empty(), FiAddr::UNSPEC).unwrap();
            let t = rx.match_arrival(&spec(), 8).expect("posted");
            let mut out = [IoVec { base: std::ptr::null_mut(), len: 0 }; IOV_LIMIT];
            assert_eq!(rx.pieces(&t, 2, 5, &mut out), 3, "bytes 2..7 span the three pieces");
            rx.write(&t, 0, b"abcdefgh");
            let hdr = Header { len: 8, ..Header::new(OpCode::Msg) };
            rx.complete(&b, t, &hdr, FiAddr(3), false);
            let e = read_one(&b).expect("completed");
            assert_eq!((e.op_context, e.len), (round, 8));
            assert_eq!(dst.concat(), b"abcdefgh\0");
            dst = [[0u8; 3]; 3];
        }
        assert_eq!((rx.lists.len(), rx.free_lists.len()), (1, 1), "one list, reused by every round");
        // A peek finding nothing takes no list.
        let mut d = [[0u8; 3]; 2];
        let [d0, d1] = &mut d;
        let iov = [IoVec { base: d0.as_mut_ptr(), len: 3 }, IoVec { base: d1.as_mut_ptr(), len: 3 }];
        let o = Op { iov: &iov, addr: FiAddr::UNSPEC, context: 9, user_context: 9, data: 0, tag: 0, ignore: 0 };
        rx.post(&b, &o, OpFlags::TAGGED | OpFlags::PEEK, FiAddr::UNSPEC).unwrap();
        assert_eq!(rx.free_lists.len(), 1);
        // A receive failed on close gives its list back too.
        rx.post(&b, &o, OpFlags::empty(), FiAddr::UNSPEC).unwrap();
        assert_eq!(rx.free_lists.len(), 0);
        rx.fail_all_posted(&b, Error::Canceled);
        assert_eq!(rx.free_lists.len(), 1);
    }

    #[test]
    fn deliver_eager_agrees_with_write_and_complete() {
        use fabric_core::prov::CqOps;
        // (capacity of each piece, pieces, message length, tagged, CQ data)
        let cases = [
            (8, 1, 8, false, false),
            (8, 1, 5, true, true),
            (8, 1, 0, true, false),
            (4, 1, 8, false, true),
            (3, 2, 5, true, false),
        ];
        for (cap, n, len, tagged, cq_data) in cases {
            let body: Vec<u8> = (1..=len as u8).collect();
            // 1: write then complete, 2: deliver_eager.
            let run = |how: u8| {
                let b = bindings();
                let mut rx: RxEngine<u32> = RxEngine::new(0);
                let mut dst = vec![0u8; cap * n];
                let iov: Vec<IoVec> =
                    dst.chunks_mut(cap).map(|c| IoVec { base: c.as_mut_ptr(), len: c.len() }).collect();
                let o = Op { iov: &iov, addr: FiAddr::UNSPEC, context: 7, user_context: 7, data: 0, tag: 5, ignore: 0 };
                let flags = if tagged { OpFlags::TAGGED } else { OpFlags::empty() };
                rx.post(&b, &o, flags, FiAddr::UNSPEC).unwrap();
                let m = MsgSpec { tagged, src: FiAddr(3), tag: 5 };
                let mut hf = if tagged { HdrFlags::TAGGED } else { 0 };
                if cq_data {
                    hf |= HdrFlags::CQ_DATA;
                }
                let hdr = Header { len: len as u64, tag: 5, data: 99, flags: HdrFlags(hf), ..Header::new(OpCode::Msg) };
                if how == 2 {
                    assert!(rx.deliver_eager(&b, &m, len as u64, cq_data.then_some(99), &body));
                } else {
                    let t = rx.match_arrival(&m, len as u64).expect("posted");
                    rx.write(&t, 0, &body);
                    rx.complete(&b, t, &hdr, FiAddr(3), false);
                }
                let cq = b.rx_cq.as_ref().unwrap();
                let mut out = [CqEntry::new(0, Caps::empty())];
                let r = cq.read(&mut out);
                let err = cq.readerr().ok();
                (format!("{r:?} {out:?} {err:?}"), dst)
            };
            let (got, bytes) = run(1);
            assert!(got.starts_with("Ok(1)") || got.contains("Trunc"), "cap {cap} x {n}, len {len}: {got}");
            assert_eq!(bytes.iter().filter(|&&x| x != 0).count(), len.min(cap * n), "bytes placed");
            assert_eq!(run(2), (got, bytes), "eager: cap {cap} x {n}, len {len}");
        }
    }

    #[test]
    fn deliver_eager_takes_the_first_match_in_posting_order() {
        let b = bindings();
        let mut rx: RxEngine<u32> = RxEngine::new(0);
        fn tagged(tag: u64, context: u64, iov: &[IoVec; 1]) -> Op<'_> {
            Op { iov, addr: FiAddr::UNSPEC, context, user_context: context, data: 0, tag, ignore: 0 }
        }
        let (mut d1, mut d2, mut d3) = ([0u8; 8], [0u8; 8], [0u8; 2]);
        let i1 = [IoVec { base: d1.as_mut_ptr(), len: 8 }];
        let i2 = [IoVec { base: d2.as_mut_ptr(), len: 8 }];
        let i3 = [IoVec { base: d3.as_mut_ptr(), len: 2 }];
        rx.post(&b, &tagged(1, 1, &i1), OpFlags::TAGGED, FiAddr::UNSPEC).unwrap();
        rx.post(&b, &tagged(2, 2, &i2), OpFlags::TAGGED, FiAddr::UNSPEC).unwrap();
        rx.post(&b, &tagged(2, 3, &i3), OpFlags::TAGGED, FiAddr::UNSPEC).unwrap();
        // Tag 2: not the head (tag 1), the first tag-2 receive below it.
        let m2 = MsgSpec { tagged: true, src: FiAddr(3), tag: 2 };
        assert!(rx.deliver_eager(&b, &m2, 3, None, b"abc"));
        assert_eq!(read_one(&b).map(|e| (e.op_context, e.len, e.tag)), Some((2, 3, 2)));
        assert_eq!(&d2[..3], b"abc");
        // Tag 1: the head, delivered in place; the untagged queue is untouched.
        let m1 = MsgSpec { tagged: true, src: FiAddr(3), tag: 1 };
        assert!(!rx.deliver_eager(&b, &spec(), 1, None, b"x"), "no untagged receive");
        assert!(rx.deliver_eager(&b, &m1, 4, Some(7), b"wxyz"));
        let e = read_one(&b).expect("completed");
        assert_eq!((e.op_context, e.len, e.data, e.flags), (1, 4, 7, Caps::RECV | Caps::TAGGED | Caps::REMOTE_CQ_DATA));
        assert_eq!(&d1[..4], b"wxyz");
        // The head now holds 2 bytes: a longer message goes the general way and
        // reports the truncation.
        assert!(rx.deliver_eager(&b, &m2, 3, None, b"abc"));
        assert!(read_one(&b).is_none());
        let err = fabric_core::prov::CqOps::readerr(&**b.rx_cq.as_ref().unwrap()).expect("truncated");
        assert_eq!((err.entry.op_context, err.err, err.olen), (3, Error::Trunc, 1));
        assert_eq!(&d3, b"ab");
        assert!(!rx.deliver_eager(&b, &m2, 1, None, b"z"), "every receive was taken once");
    }

    #[test]
    fn a_receive_takes_an_unexpected_message_of_its_own_kind_only() {
        let b = bindings();
        let mut rx: RxEngine<u32> = RxEngine::new(1 << 10);
        // An untagged message waits; a tagged receive does not take it (the
        // short path: nothing tagged is waiting) and stays posted.
        rx.hold_eager(spec(), 2, None, b"hi").unwrap();
        let (mut d1, mut d2) = ([0u8; 4], [0u8; 4]);
        let mut iov = [IoVec { base: std::ptr::null_mut(), len: 0 }];
        let o = op(&mut d1, &mut iov, 1);
        rx.post(&b, &Op { tag: 9, ..o }, OpFlags::TAGGED, FiAddr::UNSPEC).unwrap();
        assert!(read_one(&b).is_none());
        assert_eq!((rx.matcher.posted_len(), rx.matcher.unexpected_len()), (1, 1));
        // An untagged receive takes it at once.
        let mut iov2 = [IoVec { base: std::ptr::null_mut(), len: 0 }];
        rx.post(&b, &op(&mut d2, &mut iov2, 2), OpFlags::empty(), FiAddr::UNSPEC).unwrap();
        assert_eq!(read_one(&b).map(|e| (e.op_context, e.len)), Some((2, 2)));
        assert_eq!(&d2[..2], b"hi");
        assert_eq!((rx.matcher.posted_len(), rx.matcher.unexpected_len()), (1, 0));
        // The tagged receive is still there for its message.
        let m = MsgSpec { tagged: true, src: FiAddr(3), tag: 9 };
        assert!(rx.deliver_eager(&b, &m, 3, None, b"abc"));
        assert_eq!(read_one(&b).map(|e| (e.op_context, e.tag)), Some((1, 9)));
        assert_eq!(&d1[..3], b"abc");
    }

    #[test]
    fn deliver_eager_without_a_receive_leaves_the_message_to_the_caller() {
        let b = bindings();
        let mut rx: RxEngine<u32> = RxEngine::new(0);
        assert!(!rx.deliver_eager(&b, &spec(), 2, None, b"hi"));
        assert!(read_one(&b).is_none());
        // A multi-receive buffer takes it through the general path.
        let mut dst = [0u8; 8];
        let mut iov = [IoVec { base: std::ptr::null_mut(), len: 0 }];
        rx.post(&b, &op(&mut dst, &mut iov, 4), OpFlags::MULTI_RECV, FiAddr::UNSPEC).unwrap();
        assert!(rx.deliver_eager(&b, &spec(), 2, Some(1), b"hi"));
        let e = read_one(&b).expect("completed in the multi-receive buffer");
        assert_eq!((e.op_context, e.len, e.data, e.buf), (4, 2, 1, dst.as_ptr() as usize));
        assert_eq!(&dst[..2], b"hi");
    }

    #[test]
    fn rendezvous_becomes_an_action_and_discard_too() {
        let b = bindings();
        let mut rx: RxEngine<u32> = RxEngine::new(0);
        rx.arrive(&b, spec(), Unexp { body: UnexpBody::Rts(42), len: 1000, data: None, tag: 0, rma: false });
        assert!(rx.take_action().is_none());
        let mut dst = [0u8; 100];
        let mut iov = [IoVec { base: std::ptr::null_mut(), len: 0 }];
        rx.post(&b, &op(&mut dst, &mut iov, 1), OpFlags::empty(), FiAddr::UNSPEC).unwrap();
        let Some(RxAction::Start(m)) = rx.take_action() else { panic!("expected a start") };
        assert_eq!((m.rts, m.hdr.len), (42, 1000));
        let mut out = [IoVec { base: std::ptr::null_mut(), len: 0 }; IOV_LIMIT];
        assert_eq!(rx.pieces(&m.target, 0, 1000, &mut out), 1);
        assert_eq!(out[0].len, 100, "pieces are clipped to the receive");
        rx.complete(&b, m.target, &m.hdr, m.src, false);
        assert!(read_one(&b).is_none(), "a truncated receive completes in error");
        // Discard through peek.
        let tagged = MsgSpec { tagged: true, src: FiAddr(1), tag: 5 };
        rx.arrive(&b, tagged, Unexp { body: UnexpBody::Rts(7), len: 10, data: None, tag: 5, rma: false });
        let o = Op { tag: 5, ..op(&mut dst, &mut iov, 2) };
        rx.post(&b, &o, OpFlags::TAGGED | OpFlags::PEEK | OpFlags::DISCARD, FiAddr::UNSPEC).unwrap();
        assert!(matches!(rx.take_action(), Some(RxAction::Discard(7))));
        assert_eq!(rx.unexpected_len(), 0);
    }

    #[test]
    fn multi_recv_slices_and_releases() {
        let b = bindings();
        let mut rx: RxEngine<u32> = RxEngine::new(0);
        rx.set_min_multi_recv(4);
        let mut dst = [0u8; 10];
        let mut iov = [IoVec { base: std::ptr::null_mut(), len: 0 }];
        rx.post(&b, &op(&mut dst, &mut iov, 5), OpFlags::MULTI_RECV, FiAddr::UNSPEC).unwrap();
        for (i, msg) in [b"abc".as_slice(), b"defg"].iter().enumerate() {
            let t = rx.match_arrival(&spec(), msg.len() as u64).expect("multi matches");
            rx.write(&t, 0, msg);
            let hdr = Header { len: msg.len() as u64, ..Header::new(OpCode::Msg) };
            rx.complete(&b, t, &hdr, FiAddr(3), false);
            let e = read_one(&b).unwrap();
            assert_eq!(e.len, msg.len());
            assert_eq!(e.flags.contains(Caps::MULTI_RECV), i == 1, "released below the minimum");
        }
        assert_eq!(&dst[..7], b"abcdefg");
        assert!(rx.match_arrival(&spec(), 1).is_none());
    }

    #[test]
    fn selective_receives_report_only_what_asked() {
        let attr = fabric_core::CqAttr::default();
        let cq = crate::cq::UtilCq::new(&attr).unwrap();
        let mut b = Bindings::default();
        b.set_cq(&cq, fabric_core::BindFlags::RECV | fabric_core::BindFlags::SELECTIVE_COMPLETION).unwrap();
        let mut rx: RxEngine<u32> = RxEngine::new(1 << 16);
        let mut dst = [[0u8; 8]; 2];
        let mut iov = [IoVec { base: std::ptr::null_mut(), len: 0 }];
        let [d0, d1] = &mut dst;
        rx.post(&b, &op(d0, &mut iov, 1), OpFlags::empty(), FiAddr::UNSPEC).unwrap();
        rx.post(&b, &op(d1, &mut iov, 2), OpFlags::COMPLETION, FiAddr::UNSPEC).unwrap();
        for _ in 0..2 {
            let t = rx.match_arrival(&spec(), 2).expect("posted");
            rx.write(&t, 0, b"hi");
            let hdr = Header { len: 2, ..Header::new(OpCode::Msg) };
            rx.complete(&b, t, &hdr, FiAddr(3), false);
        }
        assert_eq!(&dst[0][..2], b"hi", "the silent receive got its data");
        assert_eq!(read_one(&b).map(|e| e.op_context), Some(2));
        assert!(read_one(&b).is_none(), "only the receive posted with FI_COMPLETION is reported");
        // A silent multi-receive buffer still reports its release.
        let mut m = [0u8; 4];
        rx.post(&b, &op(&mut m, &mut iov, 3), OpFlags::MULTI_RECV, FiAddr::UNSPEC).unwrap();
        for msg in [b"ab".as_slice(), b"cd"] {
            let t = rx.match_arrival(&spec(), 2).expect("multi matches");
            rx.write(&t, 0, msg);
            let hdr = Header { len: 2, ..Header::new(OpCode::Msg) };
            rx.complete(&b, t, &hdr, FiAddr(3), false);
        }
        let e = read_one(&b).expect("the release");
        assert!(e.flags.contains(Caps::MULTI_RECV));
        assert_eq!(e.op_context, 3);
        assert!(read_one(&b).is_none());
    }
}
