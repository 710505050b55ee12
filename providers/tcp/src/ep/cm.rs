//! Connection management of a tcp endpoint: connecting on demand (RDM) or for
//! the application (MSG), the hello exchange, accepting and reaping unidentified
//! connections, simultaneous connects (the smaller name wins; the loser's
//! operations move to the winner), restarted peers, and failing a connection.

use super::*;
use fabric_core::log::or_unknown;

impl TcpEp {
    /// Fail every operation that depends on a connection, then forget it.
    pub(super) fn fail_conn(&self, g: &mut Inner, id: ConnId, err: Error, why: &str) {
        let Some(slot) = g.slots.get_mut(id.idx as usize) else { return };
        if slot.gen != id.gen {
            return;
        }
        let Some(mut conn) = slot.conn.take() else { return };
        let rx = std::mem::replace(&mut slot.rx, RxState::Header);
        let dir = if conn.outgoing { "to" } else { "from" };
        fi_log!(Level::Info, NAME, "ep_data", "connection {dir} {} closed: {why}", or_unknown(conn.peer));
        self.poll.del_fd(conn.fd());
        let _ = conn.sock.shutdown(std::net::Shutdown::Both);
        // A descriptor is free again: a listener that ran out of them may accept.
        if let Some(l) = g.listener.as_ref().filter(|_| g.acceptor.paused()) {
            g.acceptor.resume(l, &self.poll);
        }
        let _ = rx;
        Self::fail_frames(g, conn.txq.drain(..), id, err);
        // What the engine had in flight with this peer fails (a receive being
        // read into, operations waiting for answers, cleared messages).
        let cx = Ctx { b: &g.b, objs: &self.domain.objs };
        g.eng.peer_lost(cx, &mut conn.pr, id, err);
        if let Some(peer) = conn.peer {
            if g.by_name.get(&peer) == Some(&id) {
                g.by_name.remove(&peer);
            }
        }
        g.by_addr.retain(|_, c| *c != id);
        if self.ep_type == EpType::Msg {
            // A MSG endpoint has only this connection: its receives fail too, and
            // the application hears of it on the EQ.
            g.eng.rx.fail_all_posted(&g.b, err);
            if let Some(eq) = &g.b.eq {
                // A connection that was up ends with FI_SHUTDOWN; one that never came
                // up (refused, reset during set-up) with an error event.
                if err == Error::Shutdown || err == Error::Canceled || conn.state == ConnState::Ready {
                    eq.push(EqEvent::Shutdown { fid: self.fid });
                } else {
                    eq.push_err(EqErrEntry { fid: self.fid, err, prov_errno: 0, data: Vec::new() });
                }
            }
        }
    }

    /// Find (or start) the connection for a send to `dest`. A send to the last
    /// destination, whose connection lives and whose AV is unchanged, is found
    /// inline.
    #[inline]
    pub(super) fn conn_for(&self, g: &mut Inner, dest: FiAddr) -> Result<ConnId> {
        // Only an RDM endpoint has an AV (and a last destination).
        let last = g.last_addr;
        if last.addr == dest {
            if let Some(av) = g.b.av.as_ref() {
                if av.version() == g.cache_version && Self::conn_mut(g, last.id).is_some() {
                    return Ok(last.id);
                }
            }
        }
        self.conn_for_any(g, dest)
    }

    /// [`TcpEp::conn_for`] of any destination.
    #[inline(never)]
    fn conn_for_any(&self, g: &mut Inner, dest: FiAddr) -> Result<ConnId> {
        if self.ep_type == EpType::Msg {
            let i = g.slots.iter().position(|s| s.conn.is_some()).ok_or(Error::NotConn)?;
            let s = &g.slots[i];
            let c = s.conn.as_ref().expect("slot has a connection");
            if !matches!(c.state, ConnState::Ready | ConnState::HelloSent | ConnState::Connecting) {
                return Err(Error::NotConn);
            }
            return Ok(ConnId { idx: i as u32, gen: s.gen });
        }
        let av = g.b.av.as_ref().ok_or(Error::NoAv)?;
        if av.version() != g.cache_version {
            g.by_addr.clear();
            g.last_addr = LastDest::NONE;
            g.cache_version = av.version();
        }
        // The last destination first (a conversation repeats its peer), then the
        // cache; either names a connection that may have closed since.
        let last = g.last_addr;
        if last.addr == dest && Self::conn_mut(g, last.id).is_some() {
            return Ok(last.id);
        }
        if let Some(id) = g.by_addr.get(&dest).copied() {
            if Self::conn_mut(g, id).is_some() {
                g.last_addr = LastDest { addr: dest, id };
                return Ok(id);
            }
        }
        let av = g.b.av.clone().ok_or(Error::NoAv)?;
        let addr = av.get(dest).ok_or(Error::Inval)?;
        let sa = addr.sockaddr().ok_or(Error::Inval)?;
        let id = match g.by_name.get(&sa).copied() {
            Some(id) if Self::conn_mut(g, id).is_some() => id,
            _ => self.start_connect(g, sa, None)?,
        };
        g.by_addr.insert(dest, id);
        g.last_addr = LastDest { addr: dest, id };
        Ok(id)
    }

    /// Start a non-blocking connect and queue the hello.
    pub(super) fn start_connect(&self, g: &mut Inner, peer: SocketAddr, param: Option<&[u8]>) -> Result<ConnId> {
        let sock = match socket2::Socket::new(socket2::Domain::for_address(peer), socket2::Type::STREAM, None) {
            Ok(s) => {
                g.acceptor.starved.ok();
                s
            }
            Err(e) if out_of_descriptors(e.raw_os_error()) => {
                // Logged once per episode; the operation fails (an RDM send with an
                // error completion, see `unreachable`).
                g.acceptor.starved.fail("connect", &e);
                return Err(if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
                    Error::MFile
                } else {
                    e.into()
                });
            }
            Err(e) => return Err(e.into()),
        };
        sock.set_nonblocking(true)?;
        if config().nodelay {
            sock.set_nodelay(true)?;
        }
        match sock.connect(&peer.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return Err(e.into()),
        }
        let stream: TcpStream = sock.into();
        let mut conn = Conn::new(stream, ConnState::Connecting, true, 0)?;
        conn.peer = Some(peer);
        conn.want_write = true;
        // Hello: our name (RDM) then the connection data (MSG).
        let name = match g.name {
            Some(n) if self.ep_type == EpType::Rdm => n.to_string().into_bytes(),
            _ => Vec::new(),
        };
        let data = param.unwrap_or(&[]);
        let mut payload = name.clone();
        payload.extend_from_slice(data);
        let hdr = Header {
            len: payload.len() as u64,
            tag: name.len() as u64,
            data: data.len() as u64,
            id: self.epoch,
            ..Header::new(OpCode::Hello)
        };
        conn.txq.push_back(TxOp::control(&hdr, payload));
        let fd = conn.fd();
        let id = self.add_conn(g, conn)?;
        self.poll.set_write_interest(fd, true)?;
        if self.ep_type == EpType::Rdm {
            g.by_name.insert(peer, id);
        }
        Ok(id)
    }

    /// Take in the connections waiting on the listener (when it is ready or its
    /// back-off ended), and drop those that did not identify themselves in time or
    /// are the oldest beyond `FI_TCP_HANDSHAKE_MAX`.
    pub(super) fn accept_and_reap(&self, g: &mut Inner, listener_ready: bool, now: Instant) {
        let mut accepted: Vec<(TcpStream, SocketAddr)> = Vec::new();
        if let Some(l) = g.listener.as_ref().filter(|_| listener_ready || g.acceptor.paused()) {
            g.acceptor.accept(l, &self.poll, now, |s, peer| accepted.push((s, peer)));
        }
        let cfg = config();
        for (s, peer) in accepted {
            if cfg.nodelay {
                let _ = s.set_nodelay(true);
            }
            let Ok(mut c) = Conn::new(s, ConnState::AwaitHello, false, 0) else { continue };
            c.peer = Some(peer);
            if g.handshakes.len() >= cfg.handshake_max {
                // Forget the entries of connections that identified themselves or
                // closed; if that is not enough, the oldest makes room.
                let mut hs = std::mem::take(&mut g.handshakes);
                hs.retain(|&(id, _)| Self::handshaking(g, id));
                g.handshakes = hs;
                while g.handshakes.len() >= cfg.handshake_max {
                    let Some((old, _)) = g.handshakes.pop_front() else { break };
                    if !self.read_before_dropping(g, old) {
                        g.acceptor.drops.evicted();
                    }
                }
            }
            if let Ok(id) = self.add_conn(g, c) {
                g.handshakes.push_back((id, now + cfg.handshake_timeout));
            }
        }
        while let Some(&(id, deadline)) = g.handshakes.front() {
            if !Self::handshaking(g, id) {
                g.handshakes.pop_front();
                continue;
            }
            if deadline > now {
                break;
            }
            g.handshakes.pop_front();
            if !self.read_before_dropping(g, id) {
                g.acceptor.drops.timed_out();
            }
        }
        g.acceptor.drops.report(now, "rdm listener", false);
    }

    /// An unidentified connection is about to be dropped (its time is up, or it is
    /// the oldest at the cap): read what it sent first. Its hello may have been
    /// waiting in the socket all along, unread because this endpoint made no
    /// progress meanwhile (an application computing for longer than the
    /// handshake time-out); such a connection is kept. Returns whether it was
    /// kept (it identified itself), else it is dropped.
    pub(super) fn read_before_dropping(&self, g: &mut Inner, id: ConnId) -> bool {
        if Self::handshaking(g, id) {
            self.progress_conn(g, id);
        }
        if Self::handshaking(g, id) {
            self.drop_unidentified(g, id);
            false
        } else {
            true
        }
    }

    /// Whether `id` is an accepted connection still waiting for its hello.
    pub(super) fn handshaking(g: &mut Inner, id: ConnId) -> bool {
        Self::conn_mut(g, id).is_some_and(|c| c.state == ConnState::AwaitHello)
    }

    /// Close an accepted connection that never identified itself (it carries no
    /// operations and no name yet); counted by the caller, logged in summary.
    pub(super) fn drop_unidentified(&self, g: &mut Inner, id: ConnId) {
        if !Self::handshaking(g, id) {
            return;
        }
        let slot = &mut g.slots[id.idx as usize];
        if let Some(c) = slot.conn.take() {
            self.poll.del_fd(c.fd());
        }
        slot.rx = RxState::Header;
        g.by_addr.retain(|_, c| *c != id);
        if let Some(l) = g.listener.as_ref().filter(|_| g.acceptor.paused()) {
            g.acceptor.resume(l, &self.poll);
        }
    }

    /// Connection set-up frames.
    pub(super) fn on_control(
        &self,
        g: &mut Inner,
        id: ConnId,
        hdr: Header,
        buf: Vec<u8>,
    ) -> std::result::Result<(), (Error, String)> {
        let state = Self::conn_mut(g, id).map(|c| c.state).unwrap_or(ConnState::Closed);
        match (hdr.op, state) {
            (OpCode::Hello, ConnState::AwaitHello) if self.ep_type == EpType::Rdm => {
                let name = fabric_util::wire::Hello::decode(&hdr, &buf)
                    .ok()
                    .and_then(|h| h.name_addr())
                    .ok_or((Error::Io, "protocol error: hello without a valid name".to_string()))?;
                self.on_rdm_hello(g, id, name, hdr.id)
            }
            (OpCode::HelloAck, ConnState::HelloSent) => {
                let c = Self::conn_mut(g, id).expect("exists");
                c.state = ConnState::Ready;
                c.peer_epoch = hdr.id;
                if self.ep_type == EpType::Msg {
                    if let Some(eq) = &g.b.eq {
                        eq.push(EqEvent::Connected { fid: self.fid, data: buf });
                    }
                }
                self.flush_conn(g, id);
                Ok(())
            }
            (OpCode::Reject, ConnState::HelloSent) => {
                if self.ep_type == EpType::Msg {
                    if let Some(eq) = &g.b.eq {
                        eq.push_err(EqErrEntry { fid: self.fid, err: Error::ConnRefused, prov_errno: 0, data: buf });
                    }
                    let c = Self::conn_mut(g, id).expect("exists");
                    c.state = ConnState::Closed;
                    let ops: Vec<TxOp> = c.txq.drain(..).collect();
                    self.poll.del_fd(c.fd());
                    let mut conn = g.slots[id.idx as usize].conn.take().expect("exists");
                    Self::fail_frames(g, ops, id, Error::ConnRefused);
                    let cx = Ctx { b: &g.b, objs: &self.domain.objs };
                    g.eng.peer_lost(cx, &mut conn.pr, id, Error::ConnRefused);
                    return Ok(());
                }
                // RDM: we lost a simultaneous connect. Our queued operations move to
                // the peer's connection, now or when its hello arrives.
                let c = Self::conn_mut(g, id).expect("exists");
                c.state = ConnState::Lost;
                let peer = c.peer;
                let winner = peer.and_then(|p| g.by_name.get(&p).copied()).filter(|w| *w != id);
                fi_log!(
                    Level::Debug,
                    NAME,
                    "ep_ctrl",
                    "{id} to {} lost a simultaneous connect; the winner: {}",
                    or_unknown(peer),
                    or_unknown(winner)
                );
                match (winner, peer) {
                    (Some(w), _) => self.adopt_ops(g, id, w),
                    // The peer's connection has not arrived yet: the operations wait
                    // for it (the peer closes this one; its close must not fail them).
                    (None, Some(p)) => self.park(g, id, p),
                    (None, None) => self.fail_conn(g, id, Error::ConnRefused, "refused"),
                }
                Ok(())
            }
            (op, st) => Err((Error::Io, format!("protocol error: {op} frame while {st}"))),
        }
    }

    pub(super) fn on_rdm_hello(
        &self,
        g: &mut Inner,
        id: ConnId,
        name: SocketAddr,
        epoch: u64,
    ) -> std::result::Result<(), (Error, String)> {
        let ours = g.name.ok_or((Error::OpBadState, "endpoint has no name".to_string()))?;
        if name == ours {
            // Our own connection to ourselves: the outgoing side carries the sends
            // (and stays the one `by_name` knows); this incoming side the receives.
            self.accept_hello(g, id, name, epoch);
            self.flush_conn(g, id);
            return Ok(());
        }
        let existing = g.by_name.get(&name).copied().filter(|e| *e != id && Self::conn_mut(g, *e).is_some());
        let accept = match existing {
            None => true,
            Some(old) => {
                let c = Self::conn_mut(g, old).expect("checked");
                match c.state {
                    ConnState::Ready | ConnState::AwaitHello if c.peer_epoch != 0 && c.peer_epoch != epoch => {
                        // A restarted peer: its old connection is gone.
                        self.fail_conn(g, old, Error::ConnReset, "peer restarted");
                        true
                    }
                    ConnState::Ready => false,
                    ConnState::Connecting | ConnState::HelloSent | ConnState::Lost => {
                        // Simultaneous connect: the smaller name's connection wins.
                        ours > name
                    }
                    _ => true,
                }
            }
        };
        fi_log!(
            Level::Debug,
            NAME,
            "ep_ctrl",
            "hello from {name} (epoch {epoch:#x}) on {id}: existing {} ({}): {}",
            or_unknown(existing),
            or_unknown(existing.and_then(|e| Self::conn_mut(g, e).map(|c| c.state))),
            if accept { "accepted" } else { "rejected" }
        );
        if !accept {
            let rej = Header::new(OpCode::Reject);
            let c = Self::conn_mut(g, id).expect("exists");
            c.state = ConnState::Ready; // only to let the reject out; closed below
            c.txq.push_back(TxOp::control(&rej, Vec::new()));
            self.flush_conn(g, id);
            // The peer closes it on the reject; we drop it now.
            if let Some(c) = Self::conn_mut(g, id) {
                self.poll.del_fd(c.fd());
            }
            g.slots[id.idx as usize].conn = None;
            return Ok(());
        }
        self.accept_hello(g, id, name, epoch);
        g.by_name.insert(name, id);
        g.by_addr.retain(|_, c| Some(*c) != existing);
        self.unpark(g, name, id);
        if let Some(old) = existing {
            self.adopt_ops(g, old, id);
        }
        self.flush_conn(g, id);
        Ok(())
    }

    /// Accept the hello of `name` (epoch `epoch`) on connection `id`: it is
    /// ready, and our acceptance goes first in its queue.
    fn accept_hello(&self, g: &mut Inner, id: ConnId, name: SocketAddr, epoch: u64) {
        let c = Self::conn_mut(g, id).expect("a connection whose hello arrived exists");
        c.peer = Some(name);
        c.peer_epoch = epoch;
        c.state = ConnState::Ready;
        c.av_version = u64::MAX;
        let ack = Header { id: self.epoch, ..Header::new(OpCode::HelloAck) };
        c.txq.push_front(TxOp::control(&ack, Vec::new()));
    }

    /// Close a connection that lost a simultaneous connect before the winner
    /// arrived, keeping its operations ([`Parked`]) for the winner.
    pub(super) fn park(&self, g: &mut Inner, id: ConnId, peer: SocketAddr) {
        let Some(c) = Self::conn_mut(g, id) else { return };
        let ops: Vec<TxOp> = c
            .txq
            .drain(..)
            .filter(|op| op.movable())
            .map(|mut op| {
                // The loser never got past its hello: nothing of these was sent.
                op.sent = 0;
                op
            })
            .collect();
        self.poll.del_fd(c.fd());
        g.slots[id.idx as usize].conn = None;
        g.slots[id.idx as usize].rx = RxState::Header;
        if g.by_name.get(&peer) == Some(&id) {
            g.by_name.remove(&peer);
        }
        g.by_addr.retain(|_, c| *c != id);
        let deadline = Instant::now() + config().handshake_timeout;
        g.parked.push(Parked { peer, from: id, ops, deadline });
    }

    /// The peer's connection `to` is accepted: the operations parked for it
    /// (oldest first) move to it, and what named their old connections follows.
    pub(super) fn unpark(&self, g: &mut Inner, peer: SocketAddr, to: ConnId) {
        let mut i = 0;
        while i < g.parked.len() {
            if g.parked[i].peer != peer {
                i += 1;
                continue;
            }
            let p = g.parked.remove(i);
            g.eng.rekey(p.from, to);
            match Self::conn_mut(g, to) {
                Some(w) => w.txq.extend(p.ops),
                None => Self::fail_frames(g, p.ops, to, Error::ConnReset),
            }
        }
    }

    /// Parked operations whose peer never connected fail (all of them when the
    /// endpoint closes: `now` None).
    pub(super) fn expire_parked(&self, g: &mut Inner, now: Option<Instant>, err: Error) {
        let mut i = 0;
        while i < g.parked.len() {
            if now.is_some_and(|t| g.parked[i].deadline > t) {
                i += 1;
                continue;
            }
            let p = g.parked.remove(i);
            fi_log!(
                Level::Info,
                NAME,
                "ep_ctrl",
                "{} operations for {} failed: the peer did not connect after refusing our connection",
                p.ops.len(),
                p.peer
            );
            Self::fail_frames(g, p.ops, p.from, err);
            // Its operations waiting for answers on the closed connection fail.
            let cx = Ctx { b: &g.b, objs: &self.domain.objs };
            g.eng.peer_lost(cx, &mut PeerRx::new(), p.from, err);
        }
    }

    /// Move the user frames queued on a losing connection to the winner, in order,
    /// and drop the loser.
    pub(super) fn adopt_ops(&self, g: &mut Inner, from: ConnId, to: ConnId) {
        let Some(c) = Self::conn_mut(g, from) else { return };
        fi_log!(
            Level::Debug,
            NAME,
            "ep_ctrl",
            "{from} ({}, peer {}) gives its operations to {to} and closes",
            c.state,
            or_unknown(c.peer)
        );
        let ops: Vec<TxOp> = c.txq.drain(..).filter(|op| op.movable()).collect();
        let fd = c.fd();
        self.poll.del_fd(fd);
        g.slots[from.idx as usize].conn = None;
        g.slots[from.idx as usize].rx = RxState::Header;
        g.eng.rekey(from, to);
        match Self::conn_mut(g, to) {
            Some(w) => {
                for mut op in ops {
                    // The loser never got past its hello: nothing of these was sent.
                    op.sent = 0;
                    w.txq.push_back(op);
                }
            }
            None => Self::fail_frames(g, ops, to, Error::ConnReset),
        }
    }
}
