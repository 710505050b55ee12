//! The reliable-datagram (RDM) protocol engine, free of I/O as quinn-proto's
//! `Connection` is: one per endpoint, shared by every transport that carries
//! `wire` frames (tcp's connections, udp's reliable channels).
//!
//! The engine owns the operations posted and not yet complete, dispatches every
//! frame kind a peer sends (eager messages, rendezvous, RMA requests and answers,
//! atomics, remote CQ data, delivery acknowledgements), runs the target side of
//! RMA and atomics with one cap per peer, feeds the matching engine
//! ([`crate::rx::RxEngine`]), and fails what a lost peer had in flight. Bytes go
//! in and frames come out; completions go to the bound queues ([`Bindings`]).
//! A transport connects, frames and moves bytes:
//!
//! | the transport | calls | the engine |
//! |---|---|---|
//! | posts for the user | [`Engine::post_send`], [`Engine::post_rma`], [`Engine::post_atomic`], [`Engine::post_recv`] | records the operation, queues its frames |
//! | sends | [`Engine::poll_transmit`] | hands out the next `(peer, Frame)` |
//! | (a stream with nothing queued to the peer) posts a send and writes at once | [`Engine::send_now`] | hands an eager message's header and pieces to the transport's write; complete once written whole, no frame kept |
//! | has sent (tcp: written; udp: acknowledged) | [`Engine::frame_done`] | completes what waited for that frame |
//! | could not send | [`Engine::frame_failed`] (or `frame_failed_prov`) | fails what waited for it |
//! | has a frame's header | [`Engine::begin`] | decides where its payload goes ([`Begin`]) |
//! | has payload bytes | [`Engine::write`] (or [`Engine::pieces`] + [`Engine::advance`]) | puts them there |
//! | has the whole payload | [`Engine::end`] | completes, answers |
//! | lost a peer | [`Engine::peer_lost`] (or `peer_lost_prov`, with its own error number) | fails everything in flight with it |
//! | has a whole frame (frames arrive whole: one receive completion each) | [`Engine::frame`] | `begin`, `write` and `end` at once; a fetch-mode `Rts` keeps its payload |
//! | (fetch mode) fetches | [`Engine::poll_fetch`], then [`Engine::fetched`] | completes the receive, answers `Cts` |
//!
//! Per-peer state the engine needs ([`PeerRx`]: the frame arriving, the RMA
//! operations in progress at this target, the answers owed) lives with the
//! transport's peer (a connection, a channel) and is passed in, so one engine can be
//! fed by several transports at once (the next step: same-host peers over shm,
//! the rest over the network, behind one endpoint and one matching engine).
//!
//! Every input from a peer is checked: an unknown id, a second answer, a length
//! past what was announced or asked, a request past the per-peer caps is a
//! [`Violation`]; the transport drops that peer (and only that peer) with the
//! reason logged. Tests (`tests.rs`) drive two engines against each other in
//! memory, with a seeded fault injector and no sockets.
//!
//! | frame | sent by | payload | the receiver |
//! |---|---|---|---|
//! | `Msg` | sender of a message up to `eager_max` | the message | matches a receive, or buffers it as unexpected |
//! | `Rts` | sender of a larger (or delivery-complete) message | none; `len` the size, `id` the operation | matches; answers `Cts` (then takes `Data`) or `Nack` (discarded) |
//! | `Cts` / `Nack` | receiver | none | sends `Data` / completes the send |
//! | `Data` | sender | the message | completes the receive; `Ack` if asked (`DC`) |
//! | `Ack` | receiver of a `DC` message | none; `data` 0 or an errno | completes the send |
//! | `WriteReq` | RMA writer | [`RmaDesc`] + up to `RMA_CHUNK` bytes | copies in, answers `RmaResp` |
//! | `ReadReq` | RMA reader | none | answers `RmaResp` with the bytes |
//! | `AtomicReq` | atomic initiator | desc, [`AtomicHdr`], operands | applies, answers `RmaResp` with prior values |
//! | `RmaResp` | target | data read, prior values | fills and completes the operation |
//!
//! Connection control (`Hello`, `HelloAck`, `Reject`, `Shutdown`) is the
//! transport's own: [`Begin::Control`].
//!
//! ## Fetch mode
//!
//! A transport that can read its peer's memory (verbs: RDMA READ) runs the
//! rendezvous natively ([`Engine::with_fetch`]): the receiver fetches the data
//! and no `Data` frame is sent.
//!
//! | step | the sender | the receiver |
//! |---|---|---|
//! | post | [`Engine::post_send_with`] asks the transport for the `Rts` payload ([`RtsPayload`]: where the data is, e.g. addresses and remote keys; and what to keep until the send completes, e.g. the registrations) | |
//! | `Rts` (header, then that payload; the frame arrives whole through [`Engine::frame`]) | | keeps the payload with the message, expected or unexpected |
//! | match | | [`Engine::poll_fetch`] hands out a [`Fetch`]: the receive's pieces, the message, the payload, the peer and id |
//! | fetched | | the transport reports [`Engine::fetched`] (with its error, if any): the receive completes and `Cts` goes back with the errno in `data` |
//! | `Cts` | the send completes, with the receiver's error if any (a delivery-complete send too: the data is in the receive by then) | |
//! | discard | `Nack` completes the send | answers `Nack`, as in the other mode |

mod rx;
mod target;
#[cfg(test)]
mod tests;
mod tx;

use crate::bind::Bindings;
use crate::domain::DomainObjects;
use crate::rma_target::{Answers, RmaTarget};
use crate::rndv::RndvRecv;
use crate::rx::{RxEngine, Target, IOV_LIMIT};
use crate::slab::Slab;
use crate::wire::{AtomicHdr, Header, OpCode, RmaDesc, HDR_LEN};
use fabric_core::prov::IoVec;
use fabric_core::{Caps, Error, FiAddr};
use std::any::Any;
use std::collections::VecDeque;
use std::fmt;

pub use rx::Begin;
pub use tx::{check_atomic, SendNow};

/// Room for a header and its inline prefix (an RMA target and an atomic header).
pub const HEAD_MAX: usize = HDR_LEN + RmaDesc::LEN + AtomicHdr::LEN;

const NULL_IOV: IoVec = IoVec { base: std::ptr::null_mut(), len: 0 };

/// What the engine needs to know of its transport.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// The provider's name, for its log lines.
    pub name: &'static str,
    /// The largest message sent eagerly (one `Msg` frame); larger ones go by
    /// rendezvous.
    pub eager_max: usize,
    /// The largest unexpected eager message buffered.
    pub unexp_max_one: u64,
    /// The most unexpected messages buffered at once.
    pub unexp_max_count: usize,
}

/// What a fetch-mode transport puts in a rendezvous announcement
/// ([`Engine::post_send_with`]).
#[derive(Default)]
pub struct RtsPayload {
    /// The `Rts` frame's payload: what the receiver needs to fetch the data.
    pub bytes: Vec<u8>,
    /// Kept with the send until it completes, and dropped before its completion
    /// is reported (the transport's registrations of the send's memory).
    pub keep: Option<Box<dyn Any + Send>>,
}

impl fmt::Debug for RtsPayload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RtsPayload").field("bytes", &self.bytes.len()).field("keep", &self.keep.is_some()).finish()
    }
}

/// A rendezvous message matched to a receive, for a fetch-mode transport to
/// fetch ([`Engine::poll_fetch`]) and report ([`Engine::fetched`]).
#[derive(Debug)]
pub struct Fetch<P> {
    /// The sender.
    pub peer: P,
    /// The sender's operation id (what [`Engine::fetched`] names).
    pub id: u64,
    /// The message as announced (length, tag, CQ data).
    pub hdr: Header,
    /// Where the data goes: the receive's pieces, clipped to the receive (a
    /// longer message is truncated; the engine reports it).
    pub iov: [IoVec; IOV_LIMIT],
    /// Pieces in use.
    pub niov: usize,
    /// The `Rts` payload the sender's transport gave ([`RtsPayload::bytes`]).
    pub payload: Vec<u8>,
}

impl<P> Fetch<P> {
    /// The pieces the data goes to.
    pub fn pieces(&self) -> &[IoVec] {
        &self.iov[..self.niov]
    }
}

/// A peer broke the protocol; the transport drops it with this reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The error its operations fail with.
    pub err: Error,
    /// What it did.
    pub why: String,
}

impl Violation {
    /// A protocol error (`FI_EIO`) saying `why`.
    pub fn proto(why: impl fmt::Display) -> Violation {
        Violation { err: Error::Io, why: format!("protocol error: {why}") }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.why)
    }
}

impl std::error::Error for Violation {}

/// What the engine uses of the endpoint around it: the queues and counters bound,
/// and the domain's regions (the target side of RMA and atomics).
#[derive(Clone, Copy)]
pub struct Ctx<'a> {
    /// The endpoint's bindings.
    pub b: &'a Bindings,
    /// The domain's memory regions and atomic serialization.
    pub objs: &'a DomainObjects,
}

/// What to do once a frame is sent (or could not be).
#[derive(Debug)]
pub enum Done {
    /// Nothing (a request or control frame: its operation waits for an answer).
    Nothing,
    /// An eager send: complete it (`comp`: posted with `FI_COMPLETION`).
    Send {
        /// Completion context.
        context: u64,
        /// Completion flags.
        flags: Caps,
        /// Bytes sent.
        len: usize,
        /// Posted with `FI_COMPLETION`.
        comp: bool,
    },
    /// A frame of operation `id` (rendezvous data, an RMA or atomic request): one
    /// of the steps it waits for.
    Op(u64),
    /// A send completed when posted from our copy, of this many bytes
    /// ([`Engine::copied`]).
    Copied(usize),
    /// The answer to a request of the peer, counted in its [`PeerRx`] until sent.
    Answer,
    /// `Cts` of rendezvous message `id` of the peer: if it cannot be sent, the
    /// receive waiting for the data fails.
    Cleared(u64),
}

/// A frame to send: its header and inline prefix, then its payload pieces.
#[derive(Debug)]
pub struct Frame {
    /// The header's op code (what the frame is).
    pub op: OpCode,
    /// The encoded header and up to 24 bytes of prefix; `head_len` are sent.
    pub head: [u8; HEAD_MAX],
    /// Bytes of `head` in the frame.
    pub head_len: usize,
    /// The payload's piece when it has one (the common case), kept inline.
    one: IoVec,
    /// The payload's pieces when it has several (`one` is then unused); empty
    /// otherwise. The engine recycles these lists.
    more: Vec<IoVec>,
    /// Owns the bytes the payload's piece points at, for a frame with a payload
    /// of its own (an inject, an answer). Moving the `Vec` does not move its
    /// heap buffer.
    pub owned: Option<Vec<u8>>,
    /// Header, prefix and payload bytes.
    pub total: usize,
    /// What its sending completes.
    pub done: Done,
}

impl Frame {
    /// A frame of `hdr`, `prefix` and the payload `iov` (`hdr.len` is the
    /// caller's to set). Payload pieces are user memory (valid until the
    /// operation completes, which it does not before [`Engine::frame_done`] or
    /// [`Engine::frame_failed`] of this frame); empty pieces are left out.
    #[inline(always)]
    pub fn new(hdr: &Header, prefix: &[u8], iov: &[IoVec], done: Done) -> Frame {
        Frame::build(hdr, prefix, iov, done, &mut Vec::new())
    }

    /// [`Frame::new`], taking a list for several pieces from `spare`.
    #[inline]
    fn build(hdr: &Header, prefix: &[u8], iov: &[IoVec], done: Done, spare: &mut Vec<Vec<IoVec>>) -> Frame {
        let mut head = [0u8; HEAD_MAX];
        hdr.encode_into(&mut head);
        let n = prefix.len().min(HEAD_MAX - HDR_LEN);
        head[HDR_LEN..HDR_LEN + n].copy_from_slice(&prefix[..n]);
        let (one, more, len) = match iov {
            [] => (NULL_IOV, Vec::new(), 0),
            [v] => (*v, Vec::new(), v.len),
            _ => Frame::pieces(iov, spare),
        };
        Frame { op: hdr.op, head, head_len: HDR_LEN + n, one, more, owned: None, total: HDR_LEN + n + len, done }
    }

    /// Several pieces: the only non-empty one inline, or all the non-empty ones
    /// in a list from `spare`; and their total.
    #[cold]
    fn pieces(iov: &[IoVec], spare: &mut Vec<Vec<IoVec>>) -> (IoVec, Vec<IoVec>, usize) {
        let iov = &iov[..iov.len().min(IOV_LIMIT)];
        let len = IoVec::total(iov);
        let mut nonempty = iov.iter().filter(|v| v.len > 0);
        match (nonempty.next(), nonempty.next()) {
            (None, _) => (NULL_IOV, Vec::new(), 0),
            (Some(v), None) => (*v, Vec::new(), len),
            _ => {
                let mut more = spare.pop().unwrap_or_default();
                more.extend(iov.iter().filter(|v| v.len > 0));
                (NULL_IOV, more, len)
            }
        }
    }

    /// A frame of `hdr` and `prefix` whose payload is `data`, owned.
    #[inline]
    pub fn owned(hdr: &Header, prefix: &[u8], mut data: Vec<u8>, done: Done) -> Frame {
        let piece = IoVec { base: data.as_mut_ptr(), len: data.len() };
        let mut f = Frame::new(hdr, prefix, &[piece], done);
        f.owned = Some(data);
        f
    }

    /// A frame of a header alone.
    pub fn control(hdr: &Header) -> Frame {
        Frame::new(hdr, &[], &[], Done::Nothing)
    }

    /// The payload pieces (none empty).
    pub fn payload(&self) -> &[IoVec] {
        if !self.more.is_empty() {
            &self.more
        } else if self.one.len > 0 {
            std::slice::from_ref(&self.one)
        } else {
            &[]
        }
    }
}

/// What a user operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpKind {
    Send,
    Write,
    Read,
    Atomic,
}

/// A user operation in flight: a send by rendezvous, an RMA, an atomic. (Eager
/// sends are not kept: their frame carries their completion, [`Done::Send`].)
struct TxOp<P> {
    peer: P,
    kind: OpKind,
    context: u64,
    flags: Caps,
    len: usize,
    /// A rendezvous send's pieces (its data frame is cut from them).
    src: [IoVec; IOV_LIMIT],
    nsrc: usize,
    /// Where a read's bytes, or an atomic's prior values, go.
    dst: [IoVec; IOV_LIMIT],
    ndst: usize,
    /// A rendezvous send's message header (tag, CQ data, flags).
    hdr: Header,
    /// No completion (an inject): a failure is only counted.
    silent: bool,
    /// Posted with `FI_COMPLETION`.
    comp: bool,
    /// Sent with `FI_DELIVERY_COMPLETE`: it also waits for the receiver's `Ack`.
    dc: bool,
    /// Announced (`Rts` sent) and not yet answered.
    announced: bool,
    /// Steps still to come: frames not yet sent, answers not yet in.
    pending: u32,
    /// Bytes of a read answered so far.
    got: usize,
    /// The first error a step reported.
    err: Option<Error>,
    /// The transport's error number of that error ([`Engine::frame_failed_prov`]).
    prov_errno: i32,
    /// The transport's, dropped before the completion ([`RtsPayload::keep`]).
    keep: Option<Box<dyn Any + Send>>,
}

// SAFETY: the pieces point into buffers the application handed over under the
// post methods' contracts (valid until the completion); the engine's owner only
// dereferences them under its lock.
unsafe impl<P: Send> Send for TxOp<P> {}

/// A rendezvous message announced to us: its peer and the operation id on the
/// sender (what `Cts`/`Nack` echo), whether it asked for an `Ack`, and (fetch
/// mode) the payload of its `Rts`.
#[derive(Debug, Clone)]
pub struct RtsRef<P> {
    peer: P,
    id: u64,
    dc: bool,
    payload: Vec<u8>,
}

/// A rendezvous message matched and cleared: where its data goes.
struct RndvIn {
    target: Target,
    /// The message as announced (tag, CQ data, length; `DC` and `id` when it
    /// asked for an `Ack`).
    hdr: Header,
    src: FiAddr,
}

/// Where the payload of the frame arriving from a peer goes.
enum Dest {
    /// Into a posted receive.
    Recv(Target),
    /// Into an unexpected buffer.
    Unexp(Vec<u8>),
    /// Into the receive a rendezvous message was matched to.
    Rndv(RndvIn),
    /// Into a region (a write request): the target's first 16 bytes are gathered
    /// in `pre`, then checked, then the rest is copied in unless refused.
    Write { pre: [u8; RmaDesc::LEN], desc: Option<RmaDesc>, err: Option<Error> },
    /// Gathered here (an atomic request, applied whole).
    Stage(Vec<u8>),
    /// An answer: into operation `op`'s destination from byte `base`.
    Resp { op: u64, base: usize },
    /// Nowhere: a frame without payload (`Rts`, `Cts`, `Nack`, `Ack`, `ReadReq`).
    Skip,
}

/// The frame arriving from a peer: its header, source, destination and bytes seen.
struct InFrame {
    hdr: Header,
    src: FiAddr,
    dest: Dest,
    off: u64,
}

/// What the engine keeps per peer; owned by the transport's peer (a connection, a
/// channel) and passed to every call about it.
#[derive(Default)]
pub struct PeerRx {
    /// The frame arriving, between its header and the end of its payload.
    arriving: Option<InFrame>,
    /// Its RMA operations arriving as several requests, in progress here (at
    /// most [`crate::rma_target::OPS_MAX`]).
    pub rma: RmaTarget,
    /// The answers it is owed; at [`crate::rma_target::ANSWERS_MAX`] its requests
    /// wait ([`Begin::Hold`]).
    pub answers: Answers,
    /// What happens to an unexpected message beyond the engine's buffering limits
    /// ([`Config::unexp_max_one`], [`Config::unexp_max_count`]): `true` leaves it
    /// with the transport ([`Begin::Hold`]: a channel's window closes and the
    /// sender waits); `false` is the peer's protocol error (a stream, which cannot
    /// leave bytes unread without stopping the connection). Per peer, so that one
    /// engine can be fed by transports of both kinds.
    hold: bool,
}

impl PeerRx {
    /// A peer over a stream: nothing arriving, nothing owed; an unexpected
    /// message past the limits is its protocol error.
    pub fn new() -> PeerRx {
        PeerRx::default()
    }

    /// A peer over a channel that can hold what the engine does not take yet:
    /// an unexpected message past the limits waits there ([`Begin::Hold`]).
    pub fn holding() -> PeerRx {
        PeerRx { hold: true, ..PeerRx::default() }
    }

    /// Whether a frame's payload is arriving.
    pub fn arriving(&self) -> bool {
        self.arriving.is_some()
    }

    /// Payload bytes of the arriving frame still to come (0 when none arrives).
    pub fn remaining(&self) -> u64 {
        self.arriving.as_ref().map_or(0, |f| f.hdr.payload_len() - f.off)
    }
}

/// The RDM protocol engine of one endpoint; `P` is the transport's handle of a
/// peer (a generation-checked connection or channel id, never reused).
pub struct Engine<P> {
    cfg: Config,
    /// Posted receives, multi-receive buffers, unexpected messages.
    pub rx: RxEngine<RtsRef<P>>,
    /// Operations in flight; their ids go on the wire (`Rts`, requests).
    ops: Slab<TxOp<P>>,
    /// Rendezvous messages we cleared, waiting for their data.
    rndv_in: RndvRecv<P, RndvIn>,
    /// Frames to send, in order per peer.
    out: VecDeque<(P, Frame)>,
    /// Bytes of sends completed from our copy and not yet sent ([`Done::Copied`]).
    copied: usize,
    /// Recycled buffers of injected data.
    pool: Vec<Vec<u8>>,
    /// Recycled piece lists of frames with several payload pieces.
    spare: Vec<Vec<IoVec>>,
    /// Fetch mode ([`Engine::with_fetch`]).
    fetch: bool,
    /// Matched rendezvous messages for the transport to fetch.
    fetches: VecDeque<Fetch<P>>,
}

impl<P: Copy + PartialEq + fmt::Debug> Engine<P> {
    /// An engine for a transport with `cfg`.
    pub fn new(cfg: Config) -> Engine<P> {
        Engine {
            cfg,
            rx: RxEngine::new(cfg.eager_max),
            ops: Slab::new(),
            rndv_in: RndvRecv::new(),
            out: VecDeque::with_capacity(16),
            copied: 0,
            pool: Vec::new(),
            spare: Vec::new(),
            fetch: false,
            fetches: VecDeque::new(),
        }
    }

    /// Fetch mode: the receiver of a rendezvous message fetches its data itself
    /// (an RDMA READ of what the `Rts` payload names) and no `Data` frame is sent
    /// (see the module's "Fetch mode"). For transports whose frames arrive whole
    /// ([`Engine::frame`]).
    pub fn with_fetch(mut self) -> Engine<P> {
        self.fetch = true;
        self
    }

    /// The next matched rendezvous message to fetch (fetch mode).
    pub fn poll_fetch(&mut self) -> Option<Fetch<P>> {
        self.fetches.pop_front()
    }

    /// The next frame to send, and its peer.
    pub fn poll_transmit(&mut self) -> Option<(P, Frame)> {
        self.out.pop_front()
    }

    /// Whether frames wait in [`Engine::poll_transmit`].
    pub fn wants_transmit(&self) -> bool {
        !self.out.is_empty()
    }

    /// Operations in flight (rendezvous sends, RMA, atomics).
    pub fn in_flight(&self) -> usize {
        self.ops.len()
    }

    /// Bytes of sends completed from our copy whose frames are not yet sent.
    pub fn copied(&self) -> usize {
        self.copied
    }

    /// The peers operations wait on for an answer (an announced send, an RMA or
    /// atomic request, a delivery acknowledgement), each once.
    pub fn awaiting(&self) -> Vec<P> {
        let mut peers: Vec<P> = Vec::new();
        for id in self.ops.ids(|_| true) {
            if let Some(o) = self.ops.get(id) {
                if !peers.contains(&o.peer) {
                    peers.push(o.peer);
                }
            }
        }
        peers
    }

    /// The operations and cleared messages of peer `from` now belong to `to` (a
    /// connection was replaced by another to the same peer).
    pub fn rekey(&mut self, from: P, to: P) {
        for id in self.ops.ids(|o| o.peer == from) {
            if let Some(o) = self.ops.get_mut(id) {
                o.peer = to;
            }
        }
        for (p, _) in self.out.iter_mut().filter(|(p, _)| *p == from) {
            *p = to;
        }
    }

    /// Peer `peer` is gone (`err` says why): its arriving frame's receive, its
    /// operations in flight, the messages it was cleared to send and its queued
    /// frames fail; its per-peer state is reset.
    pub fn peer_lost(&mut self, cx: Ctx<'_>, pr: &mut PeerRx, peer: P, err: Error) {
        self.peer_lost_prov(cx, pr, peer, err, 0);
    }

    /// [`Engine::peer_lost`] with the transport's own error number (verbs: the
    /// work completion's status that broke the connection), reported with the
    /// error completions of the operations it fails.
    pub fn peer_lost_prov(&mut self, cx: Ctx<'_>, pr: &mut PeerRx, peer: P, err: Error, prov_errno: i32) {
        self.abandon(cx.b, pr, err);
        pr.rma.clear();
        pr.answers.clear();
        for id in self.ops.ids(|o| o.peer == peer) {
            self.fail_op(cx.b, id, err, prov_errno);
        }
        self.fetches.retain(|f| f.peer != peer);
        for w in self.rndv_in.drain_peer(peer) {
            self.rx.fail(cx.b, w.target, &w.hdr, w.src, err);
        }
        let mut i = 0;
        while i < self.out.len() {
            if self.out[i].0 == peer {
                let (_, f) = self.out.remove(i).expect("index in range");
                self.frame_failed_prov(cx.b, peer, f, err, prov_errno);
            } else {
                i += 1;
            }
        }
    }

    fn drop_arriving(&mut self, b: &Bindings, f: InFrame, err: Error) {
        match f.dest {
            Dest::Recv(target) => self.rx.fail(b, target, &f.hdr, f.src, err),
            Dest::Rndv(w) => self.rx.fail(b, w.target, &w.hdr, w.src, err),
            Dest::Unexp(buf) | Dest::Stage(buf) => self.rx.recycle(buf),
            Dest::Write { .. } | Dest::Resp { .. } | Dest::Skip => {}
        }
    }

    /// The endpoint closes: every operation, posted receive and cleared message
    /// fails with `err`; queued frames are dropped; unexpected messages are
    /// forgotten. Per-peer state is the transport's to drop.
    pub fn close(&mut self, b: &Bindings, err: Error) {
        while let Some((peer, f)) = self.out.pop_front() {
            self.frame_failed(b, peer, f, err);
        }
        for id in self.ops.ids(|_| true) {
            self.fail_op(b, id, err, 0);
        }
        self.fetches.clear();
        let waits: Vec<RndvIn> = self.rndv_in.drain().collect();
        for w in waits {
            self.rx.fail(b, w.target, &w.hdr, w.src, err);
        }
        self.rx.fail_all_posted(b, err);
        self.rx.drain_unexpected().for_each(drop);
    }

    /// The arriving frame of a peer fails (the endpoint closes with it arriving).
    pub fn abandon(&mut self, b: &Bindings, pr: &mut PeerRx, err: Error) {
        if let Some(f) = pr.arriving.take() {
            self.drop_arriving(b, f, err);
        }
    }
}
