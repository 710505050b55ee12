//! The connection manager of the verbs provider: RDM connections made on
//! demand (address and route resolution, QP, connect with our name in the
//! private data) and accepted from peers, the MSG endpoint's connect and accept,
//! the QP moved to RTS with the depths both sides allow, and connections that
//! fail or go down.

use super::conn::ConnState;
use super::*;
use crate::ibv::{CmEvent, QpPath};
use fabric_core::{EqErrEntry, EqEvent};
use fabric_util::verbs_wire::{decode_name, encode_name, PD_RDM};

impl VerbsEp {
    /// RDM: our outgoing connection to `peer`, made if needed.
    pub(super) fn conn_to(&self, g: &mut Inner, peer: SocketAddr) -> Result<u64> {
        if let Some(&cid) = g.by_peer.get(&peer) {
            if g.conns.get(cid).is_some() {
                return Ok(cid);
            }
        }
        let name = self.name.expect("an RDM endpoint has a name");
        let cid = self.start_connect(g, peer, private_data(PD_RDM, &encode_name(name)))?;
        g.by_peer.insert(peer, cid);
        Ok(cid)
    }

    /// Start a connection to `peer` (address resolution; the route, the QP and
    /// the connect with `connect_data` follow as the connection manager answers).
    pub(super) fn start_connect(&self, g: &mut Inner, peer: SocketAddr, connect_data: Vec<u8>) -> Result<u64> {
        let id = CmId::new(&self.cm)?;
        let src = SocketAddr::new(self.domain.port.iface.addr, 0);
        let src = (src.is_ipv4() == peer.is_ipv4()).then_some(src);
        id.resolve_addr(src, peer, RESOLVE_MS).map_err(|e| {
            fi_log!(Level::Info, NAME, "ep_ctrl", "rdma_resolve_addr({peer}) failed: {e}");
            Error::from(e)
        })?;
        let cid = Self::add_conn(g, id, ConnState::Resolving, Some(peer));
        if let Some(c) = g.conns.get_mut(cid) {
            c.connect_data = connect_data;
        }
        Ok(cid)
    }

    /// iWARP, active side, address resolved: if a TCP socket holds the port
    /// the connection manager gave the identifier (it chooses from its own
    /// port space, blind to TCP's), the device's connect would fail with
    /// `EADDRINUSE` (see [`CmId::listening`]); start the connection over on a
    /// new identifier, so a new port, up to [`crate::ibv::LISTEN_TRIES`]
    /// times. Returns whether it did.
    fn repick_port(&self, g: &mut Inner, cid: u64) -> bool {
        let Some(c) = g.conns.get(cid) else { return false };
        let (Some(local), Some(peer)) = (c.id.local_addr(), c.peer) else { return false };
        if c.port_tries + 1 >= crate::ibv::LISTEN_TRIES || tcp_port_free(local) {
            return false;
        }
        let Ok(id) = CmId::new(&self.cm) else { return false };
        if let Err(e) = id.resolve_addr(Some(SocketAddr::new(local.ip(), 0)), peer, RESOLVE_MS) {
            fi_log!(Level::Info, NAME, "ep_ctrl", "rdma_resolve_addr({peer}) failed: {e}");
            return false;
        }
        fi_log!(Level::Info, NAME, "ep_ctrl", "connecting to {peer}: TCP holds port {local}, trying another port");
        let c = g.conns.get_mut(cid).expect("present");
        g.by_id.remove(&(c.id.raw() as usize));
        let old = std::mem::replace(&mut c.id, id);
        g.by_id.insert(c.id.raw() as usize, cid);
        c.port_tries += 1;
        drop(old);
        true
    }

    /// The connection a user operation to `addr` goes over.
    pub(super) fn conn_for(&self, g: &mut Inner, addr: FiAddr) -> Result<u64> {
        if !self.rdm() {
            return match g.msg_conn {
                Some(c) if g.conns.get(c).is_some() => Ok(c),
                _ => Err(Error::NotConn),
            };
        }
        let av = g.b.av.as_ref().ok_or(Error::NoAv)?;
        let peer = av.with_addr(addr, |a| a.sockaddr()).flatten().ok_or_else(|| {
            fi_log!(Level::Info, NAME, "ep_data", "no address for fi_addr {addr}");
            Error::AddrNotAvail
        })?;
        self.conn_to(g, peer)
    }

    pub(super) fn handle_cm(&self, g: &mut Inner, ev: CmEvent) {
        use sys::rdma_cm_event_type::*;
        if ev.kind == RDMA_CM_EVENT_CONNECT_REQUEST {
            // SAFETY: the identifier a connection request created is ours to own.
            let id = unsafe { CmId::from_request(&ev) };
            self.incoming(g, id, &ev.data);
            return;
        }
        let Some(&cid) = g.by_id.get(&(ev.id as usize)) else {
            if ev.kind != RDMA_CM_EVENT_TIMEWAIT_EXIT {
                fi_log!(Level::Debug, NAME, "ep_ctrl", "{} for no connection", ibv::cm_event_str(ev.kind));
            }
            return;
        };
        fi_log!(
            Level::Debug,
            NAME,
            "ep_ctrl",
            "{} on connection {cid} (status {})",
            ibv::cm_event_str(ev.kind),
            ev.status
        );
        match ev.kind {
            RDMA_CM_EVENT_ADDR_RESOLVED => {
                if self.domain.port.iwarp && self.repick_port(g, cid) {
                    return;
                }
                let r = g.conns.get(cid).map(|c| c.id.resolve_route(RESOLVE_MS));
                if let Some(Err(e)) = r {
                    self.connect_failed(g, cid, Error::from(e), 0, Vec::new());
                }
            }
            RDMA_CM_EVENT_ROUTE_RESOLVED => {
                if let Err(e) = self.setup_qp(g, cid) {
                    self.connect_failed(g, cid, e, 0, Vec::new());
                    return;
                }
                let c = g.conns.get_mut(cid).expect("present");
                c.state = ConnState::Connecting;
                let port = &self.domain.port;
                if let Err(e) = c.id.connect(&c.connect_data, port.max_rd_atomic, port.max_init_rd_atomic) {
                    fi_log!(Level::Info, NAME, "ep_ctrl", "rdma_connect failed: {e}");
                    self.connect_failed(g, cid, Error::from(e), 0, Vec::new());
                }
            }
            RDMA_CM_EVENT_CONNECT_RESPONSE => {
                // Active side: our QP goes to RTS, then the passive side hears
                // we are ready (librdmacm reports no ESTABLISHED after this).
                let offered = (ev.responder_resources, ev.initiator_depth);
                // The data path the peer took (`direct.rs`), before our QP
                // moves on: its receives go to the QP now.
                let peer_direct = matches!(strip_private(&ev.data), Some((PD_MSG_DIRECT, _)));
                if !self.rdm() {
                    self.choose_path(g, cid, peer_direct);
                }
                let r = self.ready_qp(g, cid, offered).and_then(|_| {
                    let c = g.conns.get(cid).ok_or(Error::NotConn)?;
                    c.id.establish().map_err(|e| {
                        fi_log!(Level::Info, NAME, "ep_ctrl", "rdma_establish failed: {e}");
                        Error::from(e)
                    })
                });
                match r {
                    Ok(()) => self.established(g, cid, &ev.data),
                    Err(e) => self.connect_failed(g, cid, e, 0, Vec::new()),
                }
            }
            RDMA_CM_EVENT_ESTABLISHED => self.established(g, cid, &ev.data),
            RDMA_CM_EVENT_REJECTED => {
                let data = strip_private(&ev.data).map(|(_, d)| d.to_vec()).unwrap_or_default();
                self.connect_failed(g, cid, Error::ConnRefused, ev.status, data);
            }
            RDMA_CM_EVENT_ADDR_ERROR
            | RDMA_CM_EVENT_ROUTE_ERROR
            | RDMA_CM_EVENT_UNREACHABLE
            | RDMA_CM_EVENT_CONNECT_ERROR => {
                fi_log!(Level::Info, NAME, "ep_ctrl", "{} (status {})", ibv::cm_event_str(ev.kind), ev.status);
                let e = if ev.kind == RDMA_CM_EVENT_CONNECT_ERROR { Error::ConnRefused } else { Error::HostUnreach };
                self.connect_failed(g, cid, e, ev.status, Vec::new());
            }
            RDMA_CM_EVENT_DISCONNECTED | RDMA_CM_EVENT_DEVICE_REMOVAL => {
                // Completions of this connection already in the CQ (the
                // answer to a send the peer received before it left) come
                // first: dropping the connection fails what is in flight.
                self.poll_cq(g);
                if self.rdm() {
                    self.drop_conn(g, cid, Error::ConnReset, 0);
                } else {
                    self.msg_down(g, Error::ConnReset, 0);
                }
            }
            _ => {}
        }
    }

    /// Connection `cid` is up (`data`: the private data that came with it).
    pub(super) fn established(&self, g: &mut Inner, cid: u64, data: &[u8]) {
        let iwarp = self.domain.port.iwarp;
        let mut marker = false;
        if let Some(c) = g.conns.get_mut(cid) {
            if c.state == ConnState::Up {
                return;
            }
            // iWARP (MPA): the active side sends first; the passive side waits
            // for its first message before sending anything.
            c.state = if iwarp && !c.active && !c.peer_spoke { ConnState::AwaitPeer } else { ConnState::Up };
            marker = iwarp && c.active;
        }
        if marker {
            fi_log!(Level::Debug, NAME, "ep_ctrl", "connection {cid}: sending the first message (iWARP, active side)");
            self.send_marker(g, cid);
        }
        if !self.rdm() && g.msg_conn == Some(cid) && !g.connected {
            g.connected = true;
            let data = strip_private(data).map(|(_, d)| d.to_vec()).unwrap_or_default();
            if let Some(eq) = &g.b.eq {
                eq.push(EqEvent::Connected { fid: self.fid, data });
            }
        }
        self.drain_backlog(g, cid);
    }

    /// The active side's first message arrived on connection `cid` (iWARP): the
    /// passive side may send now.
    pub(super) fn peer_spoke(&self, g: &mut Inner, cid: u64) {
        let Some(c) = g.conns.get_mut(cid) else { return };
        c.peer_spoke = true;
        fi_log!(
            Level::Debug,
            NAME,
            "ep_ctrl",
            "connection {cid}: the active side's first message arrived (iWARP){}",
            if c.state == ConnState::AwaitPeer { ": sends may start" } else { "" }
        );
        if c.state == ConnState::AwaitPeer {
            c.state = ConnState::Up;
            self.drain_backlog(g, cid);
        }
    }

    /// Move connection `cid`'s QP to RTS with the domain's GID index and the
    /// read/atomic depths both sides allow (`offered`: the peer's, from our side:
    /// responder resources, initiator depth); the depths used.
    pub(super) fn ready_qp(&self, g: &mut Inner, cid: u64, offered: (u8, u8)) -> Result<QpPath> {
        let port = &self.domain.port;
        let want = QpPath {
            sgid_index: port.gid_index.min(u8::MAX as u32) as u8,
            cm_sgid_index: 0,
            responder_resources: port.max_rd_atomic.min(offered.0),
            initiator_depth: port.max_init_rd_atomic.min(offered.1),
        };
        let c = g.conns.get(cid).ok_or(Error::NotConn)?;
        c.id.ready(&want, port.infiniband, port.iwarp).map_err(|e| {
            fi_log!(
                Level::Warn,
                NAME,
                "ep_ctrl",
                "QP {:#x}: cannot move it to RTS (GID index {}, reads/atomics {} in, {} out): {e}",
                c.qpn,
                want.sgid_index,
                want.responder_resources,
                want.initiator_depth
            );
            Error::from(e)
        })?;
        match c.id.path() {
            Ok(p) => fi_log!(
                Level::Info,
                NAME,
                "ep_ctrl",
                "QP {:#x} to {}: GID index {} (the connection manager's: {}), reads/atomics {} in, {} out, inline {}",
                c.qpn,
                c.peer.map_or_else(|| "?".to_string(), |p| p.to_string()),
                p.sgid_index,
                p.cm_sgid_index,
                p.responder_resources,
                p.initiator_depth,
                c.caps.inline
            ),
            Err(e) => fi_log!(Level::Debug, NAME, "ep_ctrl", "ibv_query_qp failed: {e}"),
        }
        Ok(want)
    }

    /// A connection attempt failed: fail what waits on it; MSG reports an EQ error.
    pub(super) fn connect_failed(&self, g: &mut Inner, cid: u64, err: Error, status: i32, data: Vec<u8>) {
        let established_before =
            g.conns.get(cid).is_some_and(|c| matches!(c.state, ConnState::Up | ConnState::AwaitPeer));
        if self.rdm() {
            self.drop_conn(g, cid, err, status);
            return;
        }
        if established_before {
            self.msg_down(g, err, status);
            return;
        }
        if let Some(c) = g.msg_conn.take() {
            self.drop_conn(g, c, err, status);
        }
        if let Some(eq) = &g.b.eq {
            eq.push_err(EqErrEntry { fid: self.fid, err, prov_errno: status, data });
        }
    }

    /// Passive side: ready connection `cid`'s QP (set up) and accept with `data`.
    pub(super) fn accept_conn(&self, g: &mut Inner, cid: u64, data: &[u8]) -> Result<()> {
        let offered = g.conns.get(cid).ok_or(Error::NotConn)?.id.offered();
        let path = self.ready_qp(g, cid, offered)?;
        let c = g.conns.get(cid).ok_or(Error::NotConn)?;
        c.id.accept(data, path.responder_resources, path.initiator_depth).map_err(|e| {
            fi_log!(Level::Warn, NAME, "ep_ctrl", "rdma_accept failed: {e}");
            Error::from(e)
        })
    }

    /// RDM: a peer connects to us.
    pub(super) fn incoming(&self, g: &mut Inner, id: CmId, data: &[u8]) {
        let peer = match strip_private(data) {
            Some((PD_RDM, rest)) => decode_name(rest),
            _ => None,
        };
        if !self.rdm() || peer.is_none() || g.closed {
            let _ = id.reject(&[]);
            return;
        }
        let cid = Self::add_conn(g, id, ConnState::Connecting, peer);
        if let Err(e) = self.setup_qp(g, cid) {
            fi_log!(Level::Warn, NAME, "ep_ctrl", "cannot accept a connection: {e}");
            if let Some(c) = g.conns.get(cid) {
                let _ = c.id.reject(&[]);
            }
            self.drop_conn(g, cid, e, 0);
            return;
        }
        let r = self.accept_conn(g, cid, &private_data(PD_RDM, &[]));
        if let Err(e) = r {
            self.drop_conn(g, cid, e, 0);
        }
    }

    /// Connection `cid` broke: RDM forgets it (the next operation reconnects); MSG
    /// reports a shutdown.
    pub(super) fn conn_failed(&self, g: &mut Inner, cid: u64, err: Error, prov_errno: i32) {
        if self.rdm() {
            self.drop_conn(g, cid, err, prov_errno);
        } else {
            self.msg_down(g, err, prov_errno);
        }
    }

    /// The MSG connection is gone: report `FI_SHUTDOWN` once and fail what is in flight.
    pub(super) fn msg_down(&self, g: &mut Inner, err: Error, prov_errno: i32) {
        if let Some(cid) = g.msg_conn.take() {
            self.drop_conn(g, cid, err, prov_errno);
        }
        if g.connected && !g.shut {
            g.shut = true;
            if let Some(eq) = &g.b.eq {
                eq.push(EqEvent::Shutdown { fid: self.fid });
            }
        }
    }
}

/// Whether a TCP socket could bind `addr` as the iWARP device's socket does
/// (with `SO_REUSEADDR`): the probe binds and closes, and leaves nothing behind.
fn tcp_port_free(addr: SocketAddr) -> bool {
    use socket2::{Domain, Socket, Type};
    let Ok(s) = Socket::new(Domain::for_address(addr), Type::STREAM, None) else { return true };
    if s.set_reuse_address(true).is_err() {
        return true;
    }
    !matches!(s.bind(&addr.into()), Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE))
}
