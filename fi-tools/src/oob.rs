//! The out-of-band control channel of `fi_pingpong`: one plain TCP connection
//! (std::net) between client and server, port 47592 by default, over which they
//! agree on the test, exchange fabric addresses and synchronise between sizes.
//!
//! Messages are framed as a 4-byte big-endian length and that many bytes. Every read
//! has a deadline, so a peer that stops answering is an error, never a hang, and a
//! peer that dies is seen at once as the end of the stream.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// libfabric's default control port.
pub const DEFAULT_PORT: u16 = 47592;

/// The largest control message accepted.
pub const MAX_MSG: usize = 1 << 20;

/// The frame of one control message: its length (4 bytes, big-endian), then the
/// message. `InvalidInput` for a message of more than [`MAX_MSG`] bytes.
pub fn encode_frame(msg: &[u8]) -> io::Result<Vec<u8>> {
    if msg.len() > MAX_MSG {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    let mut frame = Vec::with_capacity(4 + msg.len());
    frame.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    frame.extend_from_slice(msg);
    Ok(frame)
}

/// The first control message in `buf`, what the peer sent: `Ok(Some((message,
/// bytes it took)))`, `Ok(None)` if it is not all there yet, `InvalidData` if its
/// length is above [`MAX_MSG`] (a broken or hostile peer: nothing waits for more).
pub fn split_frame(buf: &[u8]) -> io::Result<Option<(&[u8], usize)>> {
    let Some(head) = buf.first_chunk::<4>() else { return Ok(None) };
    let len = u32::from_be_bytes(*head) as usize;
    if len > MAX_MSG {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("control message of {len} bytes")));
    }
    Ok(buf.get(4..4 + len).map(|m| (m, 4 + len)))
}

/// A control connection.
#[derive(Debug)]
pub struct Ctrl {
    stream: TcpStream,
    timeout: Duration,
    /// Bytes read from the socket and not yet taken by [`Ctrl::recv`] (read early by
    /// [`Ctrl::peer_state`]).
    pending: Vec<u8>,
    /// The peer closed its end (seen by [`Ctrl::peer_state`]).
    eof: bool,
}

/// What [`Ctrl::peer_state`] sees of the peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerState {
    /// Nothing wrong.
    Alive,
    /// The connection ended or broke.
    Gone,
    /// The peer sent an `ERR` message: its text.
    Failed(String),
}

/// Listen for the client: on every address of the family, `port`.
pub fn listen(port: u16, ipv6: bool) -> io::Result<TcpListener> {
    let ip = if ipv6 { IpAddr::V6(Ipv6Addr::UNSPECIFIED) } else { IpAddr::V4(Ipv4Addr::UNSPECIFIED) };
    let sock =
        socket2::Socket::new(socket2::Domain::for_address(SocketAddr::new(ip, port)), socket2::Type::STREAM, None)?;
    sock.set_reuse_address(true)?;
    sock.bind(&SocketAddr::new(ip, port).into())?;
    sock.listen(1)?;
    Ok(sock.into())
}

/// Resolve the server's address for the control connection.
pub fn resolve(host: &str, port: u16, ipv6: bool) -> Result<Vec<SocketAddr>, String> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .filter(|a| a.is_ipv6() == ipv6)
        .collect();
    if addrs.is_empty() {
        let fam = if ipv6 { "IPv6" } else { "IPv4" };
        return Err(format!("{host} has no {fam} address{}", if ipv6 { "" } else { " (use -6 for IPv6)" }));
    }
    Ok(addrs)
}

impl Ctrl {
    /// Accept the client on `listener`. Waits for as long as it takes (a server waits
    /// for its client).
    pub fn accept(listener: &TcpListener, timeout: Duration) -> io::Result<(Ctrl, SocketAddr)> {
        let (stream, peer) = listener.accept()?;
        Ok((Ctrl::new(stream, timeout)?, peer))
    }

    /// Connect to the server, retrying refused or failed attempts for up to
    /// `connect_timeout` in all (the server may not be listening yet). `src_port`
    /// binds the local end.
    pub fn connect(
        addrs: &[SocketAddr],
        src_port: Option<u16>,
        connect_timeout: Duration,
        timeout: Duration,
    ) -> Result<Ctrl, String> {
        let start = Instant::now();
        let mut last_err = String::from("no address to connect to");
        loop {
            for addr in addrs {
                let left = connect_timeout.saturating_sub(start.elapsed()).max(Duration::from_millis(100));
                match connect_one(addr, src_port, left) {
                    Ok(s) => return Ctrl::new(s, timeout).map_err(|e| format!("control connection: {e}")),
                    Err(e) => last_err = format!("{addr}: {e}"),
                }
            }
            if start.elapsed() >= connect_timeout {
                return Err(format!(
                    "cannot reach the server's control port ({last_err}); gave up after {:.1} s. \
                     Is the server running (same -B/-P port)?",
                    start.elapsed().as_secs_f64()
                ));
            }
            std::thread::sleep(Duration::from_millis(100).min(connect_timeout.saturating_sub(start.elapsed())));
        }
    }

    fn new(stream: TcpStream, timeout: Duration) -> io::Result<Ctrl> {
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
        stream.set_write_timeout(Some(timeout.max(Duration::from_millis(1))))?;
        Ok(Ctrl { stream, timeout, pending: Vec::new(), eof: false })
    }

    /// The local address of the connection (the address the peer reached us on).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.stream.local_addr()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.stream.peer_addr()
    }

    /// Send one message.
    pub fn send(&mut self, msg: &[u8]) -> io::Result<()> {
        let frame = encode_frame(msg)?;
        self.stream.write_all(&frame)
    }

    /// Receive one message, waiting at most the connection's time-out.
    pub fn recv(&mut self) -> io::Result<Vec<u8>> {
        self.fill(4)?;
        let len = u32::from_be_bytes([self.pending[0], self.pending[1], self.pending[2], self.pending[3]]) as usize;
        // A length above the limit is an error at once (split_frame's).
        split_frame(&self.pending)?;
        self.fill(4 + len)?;
        let (msg, took) = split_frame(&self.pending)?.expect("filled");
        let msg = msg.to_vec();
        self.pending.drain(..took);
        Ok(msg)
    }

    /// Have at least `n` bytes pending, reading from the socket.
    fn fill(&mut self, n: usize) -> io::Result<()> {
        let mut chunk = [0u8; 4096];
        while self.pending.len() < n {
            if self.eof {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the peer closed the control connection"));
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => self.eof = true,
                Ok(k) => self.pending.extend_from_slice(&chunk[..k]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "the peer sent nothing on the control connection for {:.0} s",
                            self.timeout.as_secs_f64()
                        ),
                    ))
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// A message, if a whole one has arrived, without waiting: `Ok(None)` when none
    /// has yet; the end of the connection is an error. For a side that drives
    /// progress while it waits for its peer's word.
    pub fn try_recv(&mut self) -> io::Result<Option<Vec<u8>>> {
        let state = self.peer_state();
        if !matches!(split_frame(&self.pending), Ok(None)) {
            // A whole message, or a length no message may have: recv says which.
            return self.recv().map(Some);
        }
        match state {
            PeerState::Gone => {
                Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the peer closed the control connection"))
            }
            PeerState::Alive | PeerState::Failed(_) => Ok(None),
        }
    }

    /// Whether the peer has closed the connection, or sent an `ERR` message, without
    /// waiting and without losing anything: bytes that arrived are kept for
    /// [`Ctrl::recv`]. For watchdogs in the data path's poll loops.
    pub fn peer_state(&mut self) -> PeerState {
        if !self.eof {
            if self.stream.set_nonblocking(true).is_err() {
                return PeerState::Gone;
            }
            let mut chunk = [0u8; 4096];
            let mut broken = false;
            loop {
                match self.stream.read(&mut chunk) {
                    Ok(0) => {
                        self.eof = true;
                        break;
                    }
                    Ok(k) => self.pending.extend_from_slice(&chunk[..k]),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        broken = true;
                        break;
                    }
                }
                if self.pending.len() > MAX_MSG + 4 {
                    break;
                }
            }
            if self.stream.set_nonblocking(false).is_err() || broken {
                return PeerState::Gone;
            }
        }
        // An ERR among the complete messages that wait?
        let mut off = 0;
        while let Ok(Some((msg, took))) = split_frame(&self.pending[off..]) {
            if let Some(why) = msg.strip_prefix(b"ERR ") {
                return PeerState::Failed(String::from_utf8_lossy(why).into_owned());
            }
            off += took;
        }
        if self.eof {
            PeerState::Gone
        } else {
            PeerState::Alive
        }
    }
}

fn connect_one(addr: &SocketAddr, src_port: Option<u16>, timeout: Duration) -> io::Result<TcpStream> {
    let Some(port) = src_port else {
        return TcpStream::connect_timeout(addr, timeout);
    };
    let sock = socket2::Socket::new(socket2::Domain::for_address(*addr), socket2::Type::STREAM, None)?;
    sock.set_reuse_address(true)?;
    let local: SocketAddr =
        if addr.is_ipv6() { (Ipv6Addr::UNSPECIFIED, port).into() } else { (Ipv4Addr::UNSPECIFIED, port).into() };
    sock.bind(&local.into())?;
    sock.connect_timeout(&(*addr).into(), timeout)?;
    Ok(sock.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_eof_is_seen() {
        let l = listen(0, false).unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            let (mut c, _) = Ctrl::accept(&l, Duration::from_secs(5)).unwrap();
            let m = c.recv().unwrap();
            c.send(&m).unwrap();
            c.send(b"").unwrap();
        });
        let addrs = resolve("127.0.0.1", port, false).unwrap();
        let mut c = Ctrl::connect(&addrs, None, Duration::from_secs(5), Duration::from_secs(5)).unwrap();
        c.send(b"hello").unwrap();
        assert_eq!(c.recv().unwrap(), b"hello");
        assert_eq!(c.recv().unwrap(), b"");
        t.join().unwrap();
        let start = Instant::now();
        while c.peer_state() != PeerState::Gone {
            assert!(start.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(c.recv().unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn early_reads_keep_messages_and_see_errors() {
        let l = listen(0, false).unwrap();
        let port = l.local_addr().unwrap().port();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            let (mut c, _) = Ctrl::accept(&l, Duration::from_secs(5)).unwrap();
            c.send(b"DONE 10").unwrap();
            rx.recv().unwrap();
            c.send(b"ERR it broke").unwrap();
            rx.recv().unwrap();
        });
        let addrs = resolve("127.0.0.1", port, false).unwrap();
        let mut c = Ctrl::connect(&addrs, None, Duration::from_secs(5), Duration::from_secs(5)).unwrap();
        let start = Instant::now();
        while c.pending.len() < 11 {
            assert_eq!(c.peer_state(), PeerState::Alive);
            assert!(start.elapsed() < Duration::from_secs(5));
        }
        tx.send(()).unwrap();
        while c.peer_state() == PeerState::Alive {
            assert!(start.elapsed() < Duration::from_secs(5));
        }
        assert_eq!(c.peer_state(), PeerState::Failed("it broke".into()));
        assert_eq!(c.recv().unwrap(), b"DONE 10");
        assert_eq!(c.recv().unwrap(), b"ERR it broke");
        tx.send(()).unwrap();
        t.join().unwrap();
    }

    #[test]
    fn messages_are_taken_without_waiting() {
        let l = listen(0, false).unwrap();
        let port = l.local_addr().unwrap().port();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            let (mut c, _) = Ctrl::accept(&l, Duration::from_secs(5)).unwrap();
            rx.recv().unwrap();
            c.send(b"DONE").unwrap();
            rx.recv().unwrap();
        });
        let addrs = resolve("127.0.0.1", port, false).unwrap();
        let mut c = Ctrl::connect(&addrs, None, Duration::from_secs(5), Duration::from_secs(5)).unwrap();
        assert_eq!(c.try_recv().unwrap(), None);
        tx.send(()).unwrap();
        let start = Instant::now();
        let m = loop {
            if let Some(m) = c.try_recv().unwrap() {
                break m;
            }
            assert!(start.elapsed() < Duration::from_secs(5));
        };
        assert_eq!(m, b"DONE");
        tx.send(()).unwrap();
        t.join().unwrap();
        while c.try_recv().is_ok() {
            assert!(start.elapsed() < Duration::from_secs(5));
        }
        assert_eq!(c.try_recv().unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn silence_times_out_and_absence_is_reported() {
        let l = listen(0, false).unwrap();
        let port = l.local_addr().unwrap().port();
        let addrs = resolve("127.0.0.1", port, false).unwrap();
        let mut c = Ctrl::connect(&addrs, None, Duration::from_secs(5), Duration::from_millis(50)).unwrap();
        assert_eq!(c.peer_state(), PeerState::Alive);
        let e = c.recv().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        drop(l);
        // Nobody listens on that port now: retried, then a clear error.
        let start = Instant::now();
        let e = Ctrl::connect(&addrs, None, Duration::from_millis(300), Duration::from_secs(1)).unwrap_err();
        assert!(e.contains("gave up after"), "{e}");
        assert!(start.elapsed() >= Duration::from_millis(300));
        assert!(resolve("127.0.0.1", 1, true).is_err());
    }
}
