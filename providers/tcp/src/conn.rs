//! One TCP connection: its socket, its ordered transmit queue of frames, and a
//! receive staging buffer so that a small message (header and payload) costs one
//! `recv`. What a frame means is decided by the endpoint (`ep.rs`); this file only
//! moves bytes.

use crate::attr::IOV_LIMIT;
use fabric_core::prov::IoVec;
use fabric_core::{Caps, Error, FiAddr, Result};
use fabric_util::rma_target::{Answers, RmaTarget};
use fabric_util::wire::HDR_LEN;

/// Most bytes of inline prefix after a header (RMA target and atomic header).
pub(crate) const PREFIX_MAX: usize = 24;
/// Room for a header and its prefix.
pub(crate) const HEAD_MAX: usize = HDR_LEN + PREFIX_MAX;

fn head_of(hdr: [u8; HDR_LEN], prefix: &[u8]) -> ([u8; HEAD_MAX], usize) {
    let mut h = [0u8; HEAD_MAX];
    h[..HDR_LEN].copy_from_slice(&hdr);
    let n = prefix.len().min(PREFIX_MAX);
    h[HDR_LEN..HDR_LEN + n].copy_from_slice(&prefix[..n]);
    (h, HDR_LEN + n)
}
use std::collections::VecDeque;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};

/// Size of the receive staging buffer. Payloads at least half this long that find
/// the stage empty are read straight into the destination.
pub(crate) const STAGE: usize = 64 * 1024;

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnState {
    /// Our non-blocking `connect` is in progress; the hello is queued.
    Connecting,
    /// Our hello is (being) sent; waiting for the acceptance.
    HelloSent,
    /// Accepted socket; waiting for the peer's hello.
    AwaitHello,
    /// (MSG, passive side) hello received, waiting for the application's accept.
    AwaitAccept,
    /// Exchanging data.
    Ready,
    /// (RDM) our connect lost a simultaneous-connect race; its queued operations
    /// wait for the peer's connection.
    Lost,
    /// Closed; kept only until its operations are flushed.
    Closed,
}

/// What a queued frame is, and what to do once it is written.
#[derive(Debug)]
pub(crate) enum TxKind {
    /// An eager user send: complete on the transmit queue once written.
    /// `comp`: posted with `FI_COMPLETION` ([`fabric_util::bind::Bindings::tx_done`]).
    Send { context: u64, flags: Caps, len: usize, comp: bool },
    /// A request whose outcome arrives later (a rendezvous request, an RMA or
    /// atomic request): nothing to do once written; the operation waits in the
    /// endpoint (`RndvSend`, the RMA table) for the peer's answer.
    Request,
    /// Rendezvous data: complete once written.
    Data { context: u64, flags: Caps, len: usize, comp: bool },
    /// An inject: its own copy of the data, recycled once written.
    Inject(Vec<u8>),
    /// A control frame; the `Vec` owns the payload bytes the frame's iov points at.
    Control(#[allow(dead_code)] Vec<u8>),
    /// An answer to the peer's RMA or atomic request, counted in the
    /// connection's [`Answers`] until written; the `Vec` owns its payload.
    Answer(Vec<u8>),
}

/// A frame in the transmit queue: header plus payload pieces.
#[derive(Debug)]
pub(crate) struct TxOp {
    /// Encoded header, followed by up to `PREFIX_MAX` bytes of inline prefix (an
    /// RMA request's target); `head` of them are sent.
    pub hdr: [u8; HEAD_MAX],
    /// Bytes of `hdr` in the frame: `HDR_LEN` plus the prefix.
    pub head: usize,
    /// Payload pieces (user memory, or the `Vec` of `Inject`/`Control`).
    pub iov: [IoVec; IOV_LIMIT],
    /// Pieces in use.
    pub niov: usize,
    /// Header plus payload bytes of this frame.
    pub total: usize,
    /// Bytes written so far.
    pub sent: usize,
    /// What the frame is.
    pub kind: TxKind,
}

const NULL_IOV: IoVec = IoVec { base: std::ptr::null_mut(), len: 0 };

impl TxOp {
    /// A frame whose payload is user memory.
    pub fn user(hdr: [u8; HDR_LEN], iov: &[IoVec], with_payload: bool, kind: TxKind) -> TxOp {
        TxOp::user_prefixed(hdr, &[], iov, with_payload, kind)
    }

    /// A frame whose payload is an inline prefix then user memory.
    pub fn user_prefixed(hdr: [u8; HDR_LEN], prefix: &[u8], iov: &[IoVec], with_payload: bool, kind: TxKind) -> TxOp {
        let mut a = [NULL_IOV; IOV_LIMIT];
        let n = iov.len().min(IOV_LIMIT);
        a[..n].copy_from_slice(&iov[..n]);
        let payload = if with_payload { IoVec::total(&a[..n]) } else { 0 };
        let (hdr, head) = head_of(hdr, prefix);
        TxOp { hdr, head, iov: a, niov: if with_payload { n } else { 0 }, total: head + payload, sent: 0, kind }
    }

    /// A frame whose payload is owned bytes (inject or control).
    pub fn owned(hdr: [u8; HDR_LEN], data: Vec<u8>, inject: bool) -> TxOp {
        TxOp::owned_prefixed(hdr, &[], data, inject)
    }

    /// An answer to a peer's request, its payload owned.
    pub fn answer(hdr: [u8; HDR_LEN], data: Vec<u8>) -> TxOp {
        let mut op = TxOp::owned(hdr, data, false);
        if let TxKind::Control(v) = std::mem::replace(&mut op.kind, TxKind::Request) {
            // Moving the Vec does not move its heap buffer: the iov stays valid.
            op.kind = TxKind::Answer(v);
        }
        op
    }

    /// A frame whose payload is an inline prefix then owned bytes.
    pub fn owned_prefixed(hdr: [u8; HDR_LEN], prefix: &[u8], mut data: Vec<u8>, inject: bool) -> TxOp {
        let mut a = [NULL_IOV; IOV_LIMIT];
        a[0] = IoVec { base: data.as_mut_ptr(), len: data.len() };
        let (hdr, head) = head_of(hdr, prefix);
        let total = head + data.len();
        // Moving the Vec into the op does not move its heap buffer, so a[0] stays valid.
        let kind = if inject { TxKind::Inject(data) } else { TxKind::Control(data) };
        TxOp { hdr, head, iov: a, niov: 1, total, sent: 0, kind }
    }
}

/// One connection.
pub(crate) struct Conn {
    /// The socket (non-blocking).
    pub sock: TcpStream,
    /// Where the connection is.
    pub state: ConnState,
    /// The peer's listening name (RDM) or socket address (MSG).
    pub peer: Option<SocketAddr>,
    /// The peer's epoch (a random value per endpoint instance), from its hello.
    pub peer_epoch: u64,
    /// The peer's handle in the bound AV, reported as the source of receives.
    pub fi_addr: FiAddr,
    /// AV version `fi_addr` was resolved at.
    pub av_version: u64,
    /// Whether we initiated the connection.
    pub outgoing: bool,
    /// Frames to write, in order. While not `Ready`, only control frames at the
    /// head are written (`hold` counts the user frames behind them).
    pub txq: VecDeque<TxOp>,
    /// Whether epoll is watching for writability.
    pub want_write: bool,
    /// The receive staging buffer; bytes `stage_lo..stage_hi` are unread.
    pub stage: Box<[u8]>,
    /// Start of unread staged bytes.
    pub stage_lo: usize,
    /// End of unread staged bytes.
    pub stage_hi: usize,
    /// Bytes of the current header gathered so far.
    pub hdr_buf: [u8; HDR_LEN],
    /// How many of `hdr_buf` are filled.
    pub hdr_got: usize,
    /// Generation of this slot, so a stale reference is detected.
    pub gen: u32,
    /// The last receive found the socket drained (returned less than asked).
    pub drained: bool,
    /// The peer's RMA operations arriving in several requests, in progress here
    /// (at most [`fabric_util::rma_target::OPS_MAX`]; a peer opening more is
    /// disconnected).
    pub rma: RmaTarget,
    /// The answers the peer is owed: queued and not yet written, or read
    /// requests waiting for room (`fabric_util::rma_target::Answers`).
    pub answers: Answers,
    /// The peer is owed `ANSWERS_MAX` answers: its next request waits (the
    /// socket is not read, nor watched for reading) until it takes some.
    pub paused: bool,
}

impl Conn {
    /// Wrap a connected or connecting non-blocking socket.
    pub fn new(sock: TcpStream, state: ConnState, outgoing: bool, gen: u32) -> Conn {
        Conn {
            sock,
            state,
            peer: None,
            peer_epoch: 0,
            fi_addr: FiAddr::NOTAVAIL,
            av_version: u64::MAX,
            outgoing,
            txq: VecDeque::with_capacity(64),
            want_write: false,
            stage: vec![0u8; STAGE].into_boxed_slice(),
            stage_lo: 0,
            stage_hi: 0,
            hdr_buf: [0; HDR_LEN],
            hdr_got: 0,
            gen,
            drained: false,
            rma: RmaTarget::new(),
            answers: Answers::new(),
            paused: false,
        }
    }

    /// The socket's descriptor.
    pub fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Unread staged bytes.
    pub fn staged(&self) -> usize {
        self.stage_hi - self.stage_lo
    }

    /// Receive into the (empty) stage. `Ok(0)` is never returned: end of stream is
    /// `Err(ConnReset)`; no data yet is `Err(Again)`.
    pub fn fill(&mut self) -> Result<usize> {
        debug_assert_eq!(self.staged(), 0);
        self.stage_lo = 0;
        self.stage_hi = 0;
        let n = recv(self.fd(), &mut self.stage)?;
        self.stage_hi = n;
        // A short read drained the socket: the next read would most likely find
        // nothing, so this progress call stops once the staged bytes are used.
        self.drained = n < self.stage.len();
        Ok(n)
    }

    /// Gather the header from staged bytes; `true` once all 40 bytes are in.
    pub fn gather_header(&mut self) -> bool {
        let need = HDR_LEN - self.hdr_got;
        let n = need.min(self.staged());
        let (lo, got) = (self.stage_lo, self.hdr_got);
        self.hdr_buf[got..got + n].copy_from_slice(&self.stage[lo..lo + n]);
        self.stage_lo += n;
        self.hdr_got += n;
        self.hdr_got == HDR_LEN
    }

    /// Write as much of the queue as the socket takes. Frames fully written are
    /// handed to `done` in order. While the connection is not `Ready`, stops at the
    /// first non-control frame.
    pub fn flush(&mut self, mut done: impl FnMut(&mut Conn, TxOp)) -> Result<()> {
        loop {
            let ready = self.state == ConnState::Ready;
            let Some(op) = self.txq.front_mut() else { return Ok(()) };
            if !ready && !matches!(op.kind, TxKind::Control(_)) {
                return Ok(());
            }
            // Build the iovec list of what is left of this frame, plus following
            // frames while there is room (one syscall for several small frames).
            let mut iov: [libc::iovec; 16] = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; 16];
            let mut n = 0;
            let mut frames = 0;
            for op in self.txq.iter() {
                if !ready && !matches!(op.kind, TxKind::Control(_)) {
                    break;
                }
                if n + 1 + op.niov > iov.len() {
                    break;
                }
                let mut skip = op.sent;
                // The header bytes still to send.
                if skip < op.head {
                    iov[n] =
                        libc::iovec { iov_base: op.hdr[skip..].as_ptr() as *mut libc::c_void, iov_len: op.head - skip };
                    n += 1;
                    skip = 0;
                } else {
                    skip -= op.head;
                }
                // The payload bytes still to send, from `skip` on.
                fabric_util::iov::walk(&op.iov[..op.niov], skip as u64, u64::MAX, |v| {
                    iov[n] = libc::iovec { iov_base: v.base as *mut libc::c_void, iov_len: v.len };
                    n += 1;
                    true
                });
                frames += 1;
                if frames >= 8 {
                    break;
                }
            }
            let wrote = match sendv(self.fd(), &iov[..n]) {
                Ok(w) => w,
                Err(Error::Again) => return Ok(()),
                Err(e) => return Err(e),
            };
            // Account the bytes to frames in order.
            let mut left = wrote;
            while left > 0 {
                let op = self.txq.front_mut().expect("bytes were written for a queued frame");
                let rest = op.total - op.sent;
                if left >= rest {
                    left -= rest;
                    op.sent = op.total;
                    let op = self.txq.pop_front().expect("front exists");
                    done(self, op);
                } else {
                    op.sent += left;
                    left = 0;
                }
            }
            // A frame with nothing at all (impossible: headers are 40 bytes) would
            // loop; every iteration wrote at least one byte or returned.
            if wrote == 0 {
                return Err(Error::ConnReset);
            }
        }
    }
}

/// `recv` into a buffer: `Err(Again)` when nothing is there, `Err(ConnReset)` at
/// end of stream.
pub(crate) fn recv(fd: RawFd, buf: &mut [u8]) -> Result<usize> {
    loop {
        // SAFETY: `buf` is valid for writes of its length.
        let r = unsafe { libc::recv(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), libc::MSG_DONTWAIT) };
        if r > 0 {
            return Ok(r as usize);
        }
        if r == 0 {
            return Err(if buf.is_empty() { Error::Again } else { Error::ConnReset });
        }
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return Err(e.into());
    }
}

/// `readv` into pieces of memory: as [`recv`].
///
/// # Safety
/// Every piece must be valid for writes of its length.
pub(crate) unsafe fn recvv(fd: RawFd, iov: &[libc::iovec]) -> Result<usize> {
    loop {
        // SAFETY: the caller guarantees every piece is writable; the msghdr points
        // at the slice for the duration of the call.
        let r = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
            msg.msg_iovlen = iov.len();
            libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT)
        };
        if r > 0 {
            return Ok(r as usize);
        }
        if r == 0 {
            return Err(Error::ConnReset);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return Err(e.into());
    }
}

/// `sendmsg` of pieces, never raising SIGPIPE.
fn sendv(fd: RawFd, iov: &[libc::iovec]) -> Result<usize> {
    loop {
        // SAFETY: every piece points to memory valid for reads (see `flush`); the
        // msghdr points at the slice for the duration of the call.
        let r = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
            msg.msg_iovlen = iov.len();
            libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
        };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return Err(e.into());
    }
}

/// Whether a descriptor is readable now (`poll` with no wait). A failing `accept`
/// costs far more than this on Linux (it allocates a socket before finding the
/// queue empty), so listeners are polled before they are accepted from.
pub(crate) fn readable(fd: RawFd) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, zero time-out.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    r > 0 && p.revents & libc::POLLIN != 0
}
