//! One TCP connection: its socket, its ordered transmit queue of frames, and a
//! receive staging buffer so that a small message (header and payload) costs one
//! `recv`. What a frame means is decided by the endpoint (`ep.rs`); this file only
//! moves bytes.

use crate::attr::IOV_LIMIT;
use fabric_core::prov::IoVec;
use fabric_core::{Error, FiAddr, Result};
use fabric_util::rdm::{Done, Frame, PeerRx};
use fabric_util::wire::{Header, HDR_LEN};

use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};

/// Size of the receive staging buffer. Payloads at least half this long that find
/// the stage empty are read straight into the destination.
pub(crate) const STAGE: usize = 64 * 1024;

/// A message at least this long is big: its payload is read straight into its
/// receive, and the next read into the stage asks for less than the stage
/// ([`Conn::expect_next`]).
pub(crate) const BIG_MSG: u64 = 16 * 1024;

/// What the first read of a big frame asks for when the frame is longer than one
/// TCP segment ([`Conn::expect_next`]).
pub(crate) const FIRST_CHUNK: usize = 4096;
const _: () = assert!(FIRST_CHUNK <= STAGE && HDR_LEN <= STAGE);

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

impl std::fmt::Display for ConnState {
    /// The state as log lines give it (`connecting`, `ready`, ...).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ConnState::Connecting => "connecting",
            ConnState::HelloSent => "hello sent",
            ConnState::AwaitHello => "awaiting hello",
            ConnState::AwaitAccept => "awaiting accept",
            ConnState::Ready => "ready",
            ConnState::Lost => "lost a simultaneous connect",
            ConnState::Closed => "closed",
        })
    }
}

/// A frame in the transmit queue: the engine's frame (or a connection-control
/// frame of our own) and how much of it is written.
#[derive(Debug)]
pub(crate) struct TxOp {
    /// The frame.
    pub f: Frame,
    /// Bytes written so far.
    pub sent: usize,
    /// Connection control (hello, accept, reject, shutdown): written even before
    /// the connection is `Ready`, and never moved to another connection.
    pub control: bool,
}

impl TxOp {
    /// A frame of the engine's.
    pub fn data(f: Frame) -> TxOp {
        TxOp { f, sent: 0, control: false }
    }

    /// A connection-control frame: `hdr` and its payload.
    pub fn control(hdr: &Header, payload: Vec<u8>) -> TxOp {
        TxOp { f: Frame::owned(hdr, &[], payload, Done::Nothing), sent: 0, control: true }
    }

    /// Whether it moves with the user's operations to a connection that replaces
    /// this one (an engine frame that is not an answer to the peer).
    pub fn movable(&self) -> bool {
        !self.control && !matches!(self.f.done, Done::Answer)
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
    /// How many bytes the next read into the (empty) stage asks for: all it
    /// holds, a first chunk or a header alone ([`Conn::expect_next`]). Never more
    /// than the stage's length: set only there and in `Conn::new`.
    fill_want: usize,
    /// The socket's maximum segment size (`TCP_MAXSEG`), asked the first time a
    /// big message comes; 0 until then.
    mss: u32,
    /// What the RDM engine keeps about the peer: the frame arriving, its RMA
    /// operations in progress here, the answers it is owed.
    pub pr: PeerRx,
    /// The peer is owed `ANSWERS_MAX` answers: its next request waits (the
    /// socket is not read, nor watched for reading) until it takes some.
    pub paused: bool,
    /// The `msghdr` a message written at once is sent with ([`send_frame`]).
    pub msg: MsgHdr,
}

impl Conn {
    /// Wrap a connected or connecting socket, made non-blocking here (if it is
    /// not already) so that no read or write of the connection ever waits:
    /// [`Conn::fill`] relies on it.
    pub fn new(sock: TcpStream, state: ConnState, outgoing: bool, gen: u32) -> Result<Conn> {
        sock.set_nonblocking(true)?;
        Ok(Conn {
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
            fill_want: STAGE,
            mss: 0,
            pr: PeerRx::new(),
            paused: false,
            msg: MsgHdr::default(),
        })
    }

    /// Set what the next read into an empty stage asks for from the length of
    /// the message whose header just came (a ping-pong's next message is most
    /// likely as long):
    /// - below [`BIG_MSG`]: the whole stage, so that small messages arrive header
    ///   and payload in one read;
    /// - big, in one TCP segment with its header: a header alone, so that the
    ///   payload after it is read straight into its receive instead of partly
    ///   staged and copied;
    /// - big and longer than a segment: a first chunk of [`FIRST_CHUNK`] bytes
    ///   (the header and the payload's start, staged and copied), then the rest
    ///   straight into the receive. Over loopback (a 64 KiB segment), a 64 KiB
    ///   ping-pong took 9.6 us this way against 10.7 us reading a header alone
    ///   (128 KiB: 15.3 against 17.8; libfabric 2.6.0, which always reads a first
    ///   9000 bytes: 9.4 and 14.4), while a 32 KiB one (one segment) took 7.2
    ///   against 6.1 with a first chunk, hence the two cases. Any chunk from 1 to
    ///   16 KiB measured the same.
    #[inline]
    pub fn expect_next(&mut self, len: u64) {
        self.fill_want = if len < BIG_MSG {
            self.stage.len()
        } else if len.saturating_add(HDR_LEN as u64) > u64::from(self.mss()) {
            FIRST_CHUNK
        } else {
            HDR_LEN
        };
    }

    /// Whether the last header announced a big message ([`Conn::expect_next`]):
    /// then its payload is read straight into its receive, however little of it
    /// is left, and never through a read of the (shortened) stage.
    #[inline]
    pub fn big(&self) -> bool {
        self.fill_want < self.stage.len()
    }

    /// The socket's maximum segment size, asked once; where the system does
    /// not say, a header alone is read before every big message (as if every
    /// frame fit in one segment).
    fn mss(&mut self) -> u32 {
        if self.mss == 0 {
            self.mss = socket2::SockRef::from(&self.sock).mss().unwrap_or(u32::MAX).max(1);
        }
        self.mss
    }

    /// How many bytes the next read into the (empty) stage asks for (see
    /// [`Conn::expect_next`]).
    #[inline]
    pub fn fill_want(&self) -> usize {
        self.fill_want
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
    #[inline(always)]
    pub fn fill(&mut self) -> Result<usize> {
        // `fill_want` is the stage's length, `FIRST_CHUNK` or `HDR_LEN`
        // (`expect_next`): never more than the stage holds.
        self.read_stage(self.fill_want)
    }

    /// [`Conn::fill`] asking for `want` bytes (the stage's length if that is less).
    #[inline(always)]
    pub fn fill_upto(&mut self, want: usize) -> Result<usize> {
        self.read_stage(want.min(self.stage.len()))
    }

    /// Receive up to `want` bytes into the (empty) stage; `want` is at most the
    /// stage's length (both callers see to it).
    #[inline(always)]
    fn read_stage(&mut self, want: usize) -> Result<usize> {
        debug_assert_eq!(self.staged(), 0);
        debug_assert!(want <= self.stage.len());
        self.stage_lo = 0;
        self.stage_hi = 0;
        // A plain `read` (fewer arguments than `recv`'s, and the same bytes): the
        // socket is non-blocking (`Conn::new`), so it never waits.
        // SAFETY: the stage is valid for writes of its length, and `want` is at
        // most that (`fill`: the invariant of `fill_want`; `fill_upto`: clamped).
        let r = unsafe { libc::read(self.fd(), self.stage.as_mut_ptr() as *mut libc::c_void, want) };
        let n = if r > 0 { r as usize } else { self.fill_failed(r, want)? };
        self.stage_hi = n;
        // A short read drained the socket: the next read would most likely find
        // nothing, so this progress call stops once the staged bytes are used.
        self.drained = n < want;
        Ok(n)
    }

    /// [`Conn::fill`] whose `read` returned `r` (0 or less): end of stream, no
    /// data yet, an error; interrupted, it receives again (as many bytes).
    #[cold]
    #[inline(never)]
    fn fill_failed(&mut self, r: isize, want: usize) -> Result<usize> {
        if r == 0 {
            return Err(Error::ConnReset);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            return recv(self.fd(), &mut self.stage[..want]);
        }
        Err(e.into())
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
            if !ready && !op.control {
                return Ok(());
            }
            // Build the iovec list of what is left of this frame, plus following
            // frames while there is room (one syscall for several small frames).
            let mut iov: [libc::iovec; 16] = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; 16];
            let mut n = 0;
            let mut frames = 0;
            for op in self.txq.iter() {
                if !ready && !op.control {
                    break;
                }
                let f = &op.f;
                if n + 1 + f.payload().len() > iov.len() {
                    break;
                }
                let mut skip = op.sent;
                // The header bytes still to send.
                if skip < f.head_len {
                    iov[n] = libc::iovec {
                        iov_base: f.head[skip..].as_ptr() as *mut libc::c_void,
                        iov_len: f.head_len - skip,
                    };
                    n += 1;
                    skip = 0;
                } else {
                    skip -= f.head_len;
                }
                // The payload bytes still to send, from `skip` on.
                fabric_util::iov::walk(f.payload(), skip as u64, u64::MAX, |v| {
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
                let rest = op.f.total - op.sent;
                if left >= rest {
                    left -= rest;
                    op.sent = op.f.total;
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

/// `sendmsg` of a frame's header and payload pieces (at most `IOV_LIMIT`): the
/// bytes the socket took, as [`sendv`].
///
/// # Safety
/// Every piece must be valid for reads of its length.
#[inline(always)]
pub(crate) unsafe fn send_frame(msg: &mut MsgHdr, fd: RawFd, head: &[u8; HDR_LEN], payload: &[IoVec]) -> Result<usize> {
    const NONE: MaybeUninit<libc::iovec> = MaybeUninit::uninit();
    let piece = |p: &IoVec| libc::iovec { iov_base: p.base as *mut libc::c_void, iov_len: p.len };
    // Only the pieces used are written (and read by the kernel).
    let mut iov = [NONE; 1 + IOV_LIMIT];
    iov[0].write(libc::iovec { iov_base: head.as_ptr() as *mut libc::c_void, iov_len: HDR_LEN });
    let n = match payload {
        // A message in one piece (the common case): no loop.
        [p] => {
            iov[1].write(piece(p));
            2
        }
        _ => {
            let k = payload.len().min(IOV_LIMIT);
            for (o, p) in iov[1..].iter_mut().zip(&payload[..k]) {
                o.write(piece(p));
            }
            1 + k
        }
    };
    // SAFETY: the first n pieces were written just above.
    let iov = unsafe { std::slice::from_raw_parts(iov.as_ptr() as *const libc::iovec, n) };
    // Only the pieces are set: the rest of the kept header stays zero.
    msg.0.msg_iov = iov.as_ptr() as *mut libc::iovec;
    msg.0.msg_iovlen = n;
    // SAFETY: every piece points to memory valid for reads (the caller's
    // contract, and the header above); the msghdr points at them for the call.
    let r = unsafe { libc::sendmsg(fd, &msg.0, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
    if r >= 0 {
        return Ok(r as usize);
    }
    sendv_failed(fd, iov)
}

/// A connection's `msghdr` for [`send_frame`], zeroed once (no name, no
/// control data, no flags): each send sets only its pieces.
pub(crate) struct MsgHdr(libc::msghdr);

// SAFETY: the pointer it holds is set to a caller's pieces for one `sendmsg`
// and never read (by us or the kernel) after that call: moving it to another
// thread moves nothing it points at.
unsafe impl Send for MsgHdr {}

impl Default for MsgHdr {
    fn default() -> MsgHdr {
        // SAFETY: all-zero is a valid msghdr (null pointers, zero lengths).
        MsgHdr(unsafe { std::mem::zeroed() })
    }
}

/// `sendmsg` of pieces, never raising SIGPIPE.
#[inline(always)]
fn sendv(fd: RawFd, iov: &[libc::iovec]) -> Result<usize> {
    // SAFETY: every piece points to memory valid for reads (see `flush`); the
    // msghdr points at the slice for the duration of the call.
    let r = unsafe { libc::sendmsg(fd, &msghdr(iov), libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
    if r >= 0 {
        return Ok(r as usize);
    }
    sendv_failed(fd, iov)
}

/// A `msghdr` of pieces `iov` alone (no name, no control data, no flags).
#[inline(always)]
fn msghdr(iov: &[libc::iovec]) -> libc::msghdr {
    // SAFETY: all-zero is a valid msghdr (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = iov.len();
    msg
}

/// [`sendv`] whose `sendmsg` failed: the error, or (interrupted) the bytes a
/// `sendmsg` again takes.
#[cold]
#[inline(never)]
fn sendv_failed(fd: RawFd, iov: &[libc::iovec]) -> Result<usize> {
    let e = std::io::Error::last_os_error();
    if e.kind() != std::io::ErrorKind::Interrupted {
        return Err(e.into());
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;

    /// A connection over loopback and the peer's end of it.
    fn pair() -> (Conn, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (ours, _) = l.accept().unwrap();
        (Conn::new(ours, ConnState::Ready, false, 0).unwrap(), peer)
    }

    /// Fill until something arrives (the peer's bytes may still be in flight).
    fn fill_some(c: &mut Conn) -> usize {
        let want = c.fill_want();
        fill_some_upto(c, want)
    }

    /// [`fill_some`] asking for `want` bytes ([`Conn::fill_upto`]).
    fn fill_some_upto(c: &mut Conn, want: usize) -> usize {
        for _ in 0..5000 {
            match c.fill_upto(want) {
                Ok(n) => return n,
                Err(Error::Again) => std::thread::sleep(std::time::Duration::from_millis(1)),
                Err(e) => panic!("fill: {e}"),
            }
        }
        panic!("nothing arrived");
    }

    #[test]
    fn a_connection_never_waits_to_read_even_from_a_socket_that_was_blocking() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut peer = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (ours, _) = l.accept().unwrap();
        // Accepted sockets block by default; the connection makes it not.
        let mut c = Conn::new(ours, ConnState::Ready, false, 0).unwrap();
        // Should a read wait after all, the peer's late bytes end it (and the
        // time taken fails the test) rather than hang it.
        let late = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs(2));
            let _ = peer.write_all(b"late");
            peer
        });
        let t = std::time::Instant::now();
        assert_eq!(c.fill().err(), Some(Error::Again));
        assert!(t.elapsed() < std::time::Duration::from_secs(1), "the read waited");
        drop(late.join());
    }

    #[test]
    fn what_a_read_asks_for_follows_the_last_message_length() {
        let (mut c, mut peer) = pair();
        let bytes: Vec<u8> = (0..3 * FIRST_CHUNK).map(|i| (i % 251) as u8).collect();
        // Read everything there, however many reads it takes.
        fn take(c: &mut Conn, n: usize) {
            let mut got = 0;
            while got < n {
                c.stage_lo = c.stage_hi;
                got += fill_some(c);
            }
            assert_eq!(got, n);
            c.stage_lo = c.stage_hi;
        }
        // As usual: everything there, in one read.
        peer.write_all(&bytes).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!c.big());
        take(&mut c, bytes.len());
        // After a big message's header, a message that fits in one segment with
        // its header (loopback's segments hold 64 KiB): the next read stops at a
        // header's length, leaving the rest for a read straight into the receive.
        c.expect_next(BIG_MSG);
        assert!(c.big());
        peer.write_all(&bytes).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(fill_some(&mut c), HDR_LEN);
        assert_eq!(&c.stage[..HDR_LEN], &bytes[..HDR_LEN]);
        assert!(!c.drained, "a full header read does not mean the socket is drained");
        take(&mut c, bytes.len() - HDR_LEN);
        // After one longer than any segment: a first chunk.
        c.expect_next(1 << 30);
        assert!(c.big());
        peer.write_all(&bytes).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(fill_some(&mut c), FIRST_CHUNK);
        assert_eq!(&c.stage[..FIRST_CHUNK], &bytes[..FIRST_CHUNK]);
        assert!(!c.drained);
        take(&mut c, bytes.len() - FIRST_CHUNK);
        // After a small one: the whole stage again.
        c.expect_next(BIG_MSG - 1);
        assert!(!c.big());
        peer.write_all(&bytes).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        take(&mut c, bytes.len());
        // Whatever the last message, a read of the whole stage can be asked for.
        c.expect_next(BIG_MSG);
        peer.write_all(&bytes).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut got = 0;
        while got < bytes.len() {
            c.stage_lo = c.stage_hi;
            got += fill_some_upto(&mut c, STAGE);
        }
        assert_eq!(got, bytes.len());
    }
}
