//! The passive endpoint: listens for MSG connection requests and reports each on
//! the event queue once the peer's hello (with its connection data) has arrived.

use crate::accept::Acceptor;
use crate::fabric::TcpFabric;
use crate::{config, NAME};
use fabric_core::log::Level;
use fabric_core::prov::{EqOps, PassiveEpOps};
use fabric_core::{fi_log, Address, ConnHandle, EqEvent, Error, Info, Result};
use fabric_util::eq::UtilEq;
use fabric_util::progress::Progress;
use fabric_util::wire::{Header, OpCode, HDR_LEN};
use std::collections::VecDeque;
use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

/// The most connection data a connect, accept or reject carries (libfabric's
/// `FI_OPT_CM_DATA_SIZE` for tcp is 256 bytes; so is ours).
pub const CM_DATA_MAX: usize = 256;

/// A pending connection request, carried in the `Info::handle` of the event.
pub(crate) struct Pending {
    inner: Mutex<Option<(TcpStream, SocketAddr)>>,
}

impl Pending {
    /// Take the socket (once).
    pub(crate) fn take(&self) -> Option<(TcpStream, SocketAddr)> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

struct Incoming {
    sock: TcpStream,
    peer: SocketAddr,
    buf: Vec<u8>,
    /// When it is dropped if its hello is not complete.
    deadline: Instant,
}

struct Inner {
    listener: Option<TcpListener>,
    name: Option<SocketAddr>,
    eq: Option<Arc<UtilEq>>,
    /// Connections whose hello is not complete yet, oldest first.
    incoming: VecDeque<Incoming>,
    acceptor: Acceptor,
    closed: bool,
}

/// A tcp passive endpoint.
pub(crate) struct TcpPep {
    fid: u64,
    info: Info,
    fabric: Arc<TcpFabric>,
    inner: Mutex<Inner>,
    poll: fabric_util::progress::Waiter,
    me: Weak<TcpPep>,
}

/// Bind a listening socket, honouring `FI_TCP_PORT_LOW_RANGE`/`HIGH_RANGE` when the
/// address asks for any port.
pub(crate) fn bind_listener(want: SocketAddr) -> Result<TcpListener> {
    let bind = |a: SocketAddr| -> std::io::Result<TcpListener> {
        let s = socket2::Socket::new(socket2::Domain::for_address(a), socket2::Type::STREAM, None)?;
        s.set_reuse_address(true)?;
        s.bind(&a.into())?;
        s.listen(1024)?;
        s.set_nonblocking(true)?;
        Ok(s.into())
    };
    crate::accept::reserve_init();
    if want.port() == 0 {
        if let Some((lo, hi)) = config().port_range {
            for p in lo..=hi {
                if let Ok(l) = bind(SocketAddr::new(want.ip(), p)) {
                    return Ok(l);
                }
            }
            fi_log!(Level::Warn, NAME, "ep_ctrl", "no free port in {lo}..={hi} on {}", want.ip());
            return Err(Error::AddrInUse);
        }
    }
    Ok(bind(want)?)
}

impl TcpPep {
    pub(crate) fn new(fabric: Arc<TcpFabric>, info: &Info) -> Arc<TcpPep> {
        let name = info.src_addr.as_ref().and_then(|a| a.sockaddr());
        Arc::new_cyclic(|me| TcpPep {
            fid: fabric_core::prov::next_fid(),
            info: info.clone(),
            fabric,
            inner: Mutex::new(Inner {
                listener: None,
                name,
                eq: None,
                incoming: VecDeque::new(),
                acceptor: Acceptor::default(),
                closed: false,
            }),
            poll: fabric_util::progress::Waiter::new().expect("epoll and eventfd are available"),
            me: me.clone(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Progress for TcpPep {
    fn progress(&self) {
        let mut g = self.lock();
        if g.closed {
            return;
        }
        let g = &mut *g;
        let cfg = config();
        let now = (g.listener.is_some() && (g.acceptor.paused() || !g.incoming.is_empty())).then(Instant::now);
        if let Some(l) = g.listener.as_ref().filter(|l| g.acceptor.paused() || crate::conn::readable(l.as_raw_fd())) {
            let now = now.unwrap_or_else(Instant::now);
            let mut fresh = Vec::new();
            g.acceptor.accept(l, &self.poll, now, |s, peer| fresh.push((s, peer)));
            for (s, peer) in fresh {
                if s.set_nonblocking(true).is_err() {
                    continue;
                }
                if cfg.nodelay {
                    let _ = s.set_nodelay(true);
                }
                if g.incoming.len() >= cfg.handshake_max {
                    // The oldest unidentified connection makes room for this one.
                    if let Some(old) = g.incoming.pop_front() {
                        self.poll.del_fd(old.sock.as_raw_fd());
                        g.acceptor.drops.evicted();
                    }
                }
                if self.poll.add_fd(s.as_raw_fd()).is_ok() {
                    g.incoming.push_back(Incoming {
                        sock: s,
                        peer,
                        buf: Vec::new(),
                        deadline: now + cfg.handshake_timeout,
                    });
                }
            }
        }
        // Read hellos, then drop the connections whose time is up: a hello that
        // waited in its socket while this endpoint made no progress (an
        // application computing for longer than the handshake time-out) still
        // counts. A request is complete once header and payload are in; the hello
        // is read byte-exactly (no read-ahead), so the endpoint that adopts the
        // socket starts at the next frame; each connection is read until it has
        // nothing more.
        let mut i = 0;
        while i < g.incoming.len() {
            let inc = &mut g.incoming[i];
            let want = if inc.buf.len() < HDR_LEN {
                HDR_LEN
            } else {
                match Header::decode(inc.buf[..HDR_LEN].try_into().expect("40 bytes"), 0) {
                    Ok(h) if h.op == OpCode::Hello => HDR_LEN + h.len as usize,
                    Ok(h) => {
                        fi_log!(
                            Level::Info,
                            NAME,
                            "ep_ctrl",
                            "dropping connection from {}: {} frame instead of hello",
                            inc.peer,
                            h.op
                        );
                        let inc = g.incoming.remove(i).expect("in range");
                        self.poll.del_fd(inc.sock.as_raw_fd());
                        continue;
                    }
                    Err(e) => {
                        fi_log!(Level::Info, NAME, "ep_ctrl", "dropping connection from {}: {e}", inc.peer);
                        let inc = g.incoming.remove(i).expect("in range");
                        self.poll.del_fd(inc.sock.as_raw_fd());
                        continue;
                    }
                }
            };
            let mut tmp = [0u8; 512];
            let need = (want - inc.buf.len()).min(tmp.len());
            match inc.sock.read(&mut tmp[..need]) {
                Ok(0) => {
                    let inc = g.incoming.remove(i).expect("in range");
                    self.poll.del_fd(inc.sock.as_raw_fd());
                    continue;
                }
                Ok(n) => {
                    inc.buf.extend_from_slice(&tmp[..n]);
                    let complete = inc.buf.len() >= HDR_LEN
                        && Header::decode(inc.buf[..HDR_LEN].try_into().expect("40 bytes"), 0)
                            .is_ok_and(|h| inc.buf.len() == HDR_LEN + h.len as usize);
                    if !complete {
                        // More may be there: read this connection again.
                        continue;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => {
                    let inc = g.incoming.remove(i).expect("in range");
                    self.poll.del_fd(inc.sock.as_raw_fd());
                    continue;
                }
            }
            let inc = &g.incoming[i];
            if inc.buf.len() >= HDR_LEN {
                let h = Header::decode(inc.buf[..HDR_LEN].try_into().expect("40 bytes"), 0).expect("checked above");
                if inc.buf.len() == HDR_LEN + h.len as usize {
                    let inc = g.incoming.remove(i).expect("in range");
                    self.poll.del_fd(inc.sock.as_raw_fd());
                    let Ok(hello) = fabric_util::wire::Hello::decode(&h, &inc.buf[HDR_LEN..]) else {
                        fi_log!(Level::Info, NAME, "ep_ctrl", "dropping connection from {}: malformed hello", inc.peer);
                        continue;
                    };
                    let data = hello.data.to_vec();
                    let mut info = self.info.clone();
                    info.dest_addr = Some(Address::Sockaddr(inc.peer));
                    info.handle = Some(ConnHandle(Arc::new(Pending { inner: Mutex::new(Some((inc.sock, inc.peer))) })));
                    if let Some(eq) = &g.eq {
                        eq.push(EqEvent::ConnReq { fid: self.fid, info: Box::new(info), data });
                    }
                    continue;
                }
            }
            i += 1;
        }
        if let Some(now) = now {
            while g.incoming.front().is_some_and(|i| i.deadline <= now) {
                let old = g.incoming.pop_front().expect("checked");
                self.poll.del_fd(old.sock.as_raw_fd());
                g.acceptor.drops.timed_out();
            }
            g.acceptor.drops.report(now, "passive endpoint", false);
        }
    }

    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.poll.fd())
    }

    fn next_deadline(&self) -> Option<Instant> {
        let g = self.lock();
        let hello = g.incoming.front().map(|i| i.deadline);
        match (hello, g.acceptor.deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

impl PassiveEpOps for TcpPep {
    fn fid(&self) -> u64 {
        self.fid
    }

    fn bind_eq(&self, eq: &Arc<dyn EqOps>) -> Result<()> {
        let e = self.fabric.find_eq(eq.fid()).ok_or(Error::Domain)?;
        self.lock().eq = Some(e.clone());
        let w: Weak<dyn Progress> = self.me.clone();
        e.bind(w)
    }

    fn listen(&self) -> Result<()> {
        let mut g = self.lock();
        if g.eq.is_none() {
            return Err(Error::NoEq);
        }
        if g.listener.is_some() {
            return Ok(());
        }
        let want = g.name.unwrap_or_else(|| "0.0.0.0:0".parse().expect("literal"));
        let l = bind_listener(want)?;
        g.name = Some(l.local_addr()?);
        self.poll.add_fd(l.as_raw_fd())?;
        g.listener = Some(l);
        Ok(())
    }

    fn getname(&self) -> Result<Address> {
        self.lock().name.map(Address::Sockaddr).ok_or(Error::OpBadState)
    }

    fn setname(&self, addr: &Address) -> Result<()> {
        let mut g = self.lock();
        if g.listener.is_some() {
            return Err(Error::OpBadState);
        }
        g.name = Some(addr.sockaddr().ok_or(Error::Inval)?);
        Ok(())
    }

    fn reject(&self, handle: &ConnHandle, data: &[u8]) -> Result<()> {
        if data.len() > CM_DATA_MAX {
            return Err(Error::Inval);
        }
        let pending = handle.0.clone().downcast::<Pending>().map_err(|_| Error::Inval)?;
        let (mut sock, _) = pending.take().ok_or(Error::Inval)?;
        let h = Header { len: data.len() as u64, ..Header::new(OpCode::Reject) };
        let mut frame = h.encode().to_vec();
        frame.extend_from_slice(data);
        // A small frame on a fresh socket: the send buffer takes it whole.
        let _ = sock.set_nonblocking(false);
        let _ = sock.set_write_timeout(Some(std::time::Duration::from_secs(1)));
        use std::io::Write;
        let _ = sock.write_all(&frame);
        Ok(())
    }

    fn close(&self) -> Result<()> {
        let mut g = self.lock();
        g.closed = true;
        g.acceptor.drops.report(Instant::now(), "passive endpoint", true);
        g.listener = None;
        g.incoming.clear();
        Ok(())
    }
}
