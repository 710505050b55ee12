//! librdmacm's objects: an event channel and its events, a connection
//! identifier with its RC QP (created on the endpoint's PD and CQ, moved to RTS
//! by the provider), and socket addresses as C wants them.

use super::*;

/// How many ephemeral ports [`CmId::listening`] tries before it gives up.
pub(crate) const LISTEN_TRIES: u32 = 16;

/// An rdmacm event channel, non-blocking.
pub(crate) struct EventChannel(*mut sys::rdma_event_channel);

// SAFETY: see the module docs.
unsafe impl Send for EventChannel {}
// SAFETY: see the module docs.
unsafe impl Sync for EventChannel {}

/// One connection-manager event, copied out and acknowledged.
#[derive(Debug)]
pub(crate) struct CmEvent {
    /// `RDMA_CM_EVENT_*`.
    pub kind: u32,
    /// The identifier the event is about (for a connection request: the new one).
    pub id: *mut sys::rdma_cm_id,
    /// The status (negative errno, or the reject reason).
    pub status: i32,
    /// The private data that came with it.
    pub data: Vec<u8>,
    /// RDMA reads and atomics the peer may have outstanding towards us
    /// (connection request and response events; else 0).
    pub responder_resources: u8,
    /// RDMA reads and atomics we may have outstanding towards the peer
    /// (connection request and response events; else 0).
    pub initiator_depth: u8,
}

impl EventChannel {
    /// `rdma_create_event_channel`, made non-blocking.
    pub(crate) fn new() -> io::Result<EventChannel> {
        // SAFETY: no arguments.
        let ch = unsafe { sys::rdma_create_event_channel() };
        if ch.is_null() {
            return Err(last_err());
        }
        let c = EventChannel(ch);
        set_nonblocking(c.fd())?;
        Ok(c)
    }

    /// The channel's descriptor.
    pub(crate) fn fd(&self) -> RawFd {
        // SAFETY: a live channel.
        unsafe { (*self.0).fd }
    }

    /// The raw channel.
    pub(crate) fn raw(&self) -> *mut sys::rdma_event_channel {
        self.0
    }

    /// The next event, if any (acknowledged before it is returned: its data is
    /// copied).
    pub(crate) fn next(&self) -> Option<CmEvent> {
        let mut ev = ptr::null_mut();
        // SAFETY: a live channel; valid out-pointer.
        if unsafe { sys::rdma_get_cm_event(self.0, &mut ev) } != 0 {
            return None;
        }
        // SAFETY: `ev` is a live event until acknowledged below; the private data
        // pointer and length describe bytes inside it.
        unsafe {
            let e = &*ev;
            let (p, n) = (e.param.conn.private_data, e.param.conn.private_data_len as usize);
            let data =
                if p.is_null() || n == 0 { Vec::new() } else { std::slice::from_raw_parts(p as *const u8, n).to_vec() };
            let out = CmEvent {
                kind: e.event,
                id: e.id,
                status: e.status,
                data,
                responder_resources: e.param.conn.responder_resources,
                initiator_depth: e.param.conn.initiator_depth,
            };
            sys::rdma_ack_cm_event(ev);
            Some(out)
        }
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: every identifier on the channel is destroyed first (owners drop
        // them before the channel).
        unsafe { sys::rdma_destroy_event_channel(self.0) }
    }
}

/// The text of an rdmacm event type.
pub(crate) fn cm_event_str(kind: u32) -> String {
    // SAFETY: returns a static string for any value.
    unsafe {
        let p = sys::rdma_event_str(kind);
        if p.is_null() {
            return format!("event {kind}");
        }
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// A socket address as C wants it.
pub(crate) fn to_sockaddr(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; zeroed is valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(v4.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and suitably aligned.
            unsafe { ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr { s6_addr: v6.ip().octets() },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: as above for sockaddr_in6.
            unsafe { ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// A C socket address, if it is IPv4 or IPv6.
///
/// # Safety
/// `sa` must point at a socket address of its family's size (or be null).
pub(crate) unsafe fn from_sockaddr(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: the caller's contract.
    unsafe {
        match (*sa).sa_family as i32 {
            libc::AF_INET => {
                let sin = &*(sa as *const libc::sockaddr_in);
                let ip = std::net::Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
                Some(SocketAddr::new(ip.into(), u16::from_be(sin.sin_port)))
            }
            libc::AF_INET6 => {
                let s = &*(sa as *const libc::sockaddr_in6);
                let ip = std::net::Ipv6Addr::from(s.sin6_addr.s6_addr);
                Some(SocketAddr::V6(std::net::SocketAddrV6::new(
                    ip,
                    u16::from_be(s.sin6_port),
                    s.sin6_flowinfo,
                    s.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

/// An rdmacm connection identifier with (once created) its RC queue pair. Drop
/// destroys the QP and the identifier.
///
/// The QP is ours, not librdmacm's (`ibv_create_qp`, not `rdma_create_qp`): the
/// connection manager fills in the attributes of each state (`rdma_init_qp_attr`)
/// and we make the transitions, so that the source GID index is the one the
/// domain chose (`FI_VERBS_GID_IDX`, or the RoCE v2 GID of its address) rather
/// than the one librdmacm derives from the bound address, and the RDMA read and
/// atomic depths stay within the device's limits.
pub(crate) struct CmId {
    /// The identifier; owned, destroyed on drop (after the QP).
    id: *mut sys::rdma_cm_id,
    /// Our QP, or null before [`CmId::create_qp`]; owned, destroyed on drop.
    qp: *mut sys::ibv_qp,
    /// What the peer's connection request offered, from our side:
    /// `(responder_resources, initiator_depth)`; `(0, 0)` on an active identifier.
    offered: (u8, u8),
    /// Whether the QP receives through a shared receive queue.
    srq: bool,
}

// SAFETY: see the module docs.
unsafe impl Send for CmId {}
// SAFETY: see the module docs.
unsafe impl Sync for CmId {}

/// What a new QP asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QpCaps {
    /// Send queue depth.
    pub send_wr: u32,
    /// Receive queue depth.
    pub recv_wr: u32,
    /// Scatter-gather entries per send work request.
    pub sge: u32,
    /// Scatter-gather entries per receive work request (1 for the endpoint's
    /// own buffers; a MSG endpoint's direct path posts the application's
    /// pieces and a scratch entry).
    pub recv_sge: u32,
    /// Inline bytes wanted.
    pub inline: u32,
}

/// How a connected QP is set up: what [`CmId::ready`] asks for, and what
/// [`CmId::path`] reads back from the QP (`ibv_query_qp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QpPath {
    /// The source GID index (`ah_attr.grh.sgid_index`; used where the path is
    /// global, as on RoCE).
    pub sgid_index: u8,
    /// The index the connection manager proposed (read back only).
    pub cm_sgid_index: u8,
    /// RDMA reads and atomics the QP answers at once (`max_dest_rd_atomic`).
    pub responder_resources: u8,
    /// RDMA reads and atomics the QP has outstanding at once (`max_rd_atomic`).
    pub initiator_depth: u8,
}

/// `IBV_QP_*` attribute bits (21-23) the kernel's `rdma_init_qp_attr` may set
/// for RoCE only; an InfiniBand port refuses them (librdmacm clears them too).
const ROCE_ONLY_MASK: i32 = 0x00e0_0000;

impl CmId {
    /// A new identifier on `ch` (RDMA_PS_TCP: reliable connections).
    pub(crate) fn new(ch: &EventChannel) -> io::Result<CmId> {
        let mut id = ptr::null_mut();
        // SAFETY: a live channel; valid out-pointer.
        check(unsafe { sys::rdma_create_id(ch.raw(), &mut id, ptr::null_mut(), sys::rdma_port_space::RDMA_PS_TCP) })?;
        Ok(CmId { id, qp: ptr::null_mut(), offered: (0, 0), srq: false })
    }

    /// Take ownership of the identifier a connection request `ev` created.
    ///
    /// # Safety
    /// `ev` must be an `RDMA_CM_EVENT_CONNECT_REQUEST` whose identifier is owned
    /// by nobody else.
    pub(crate) unsafe fn from_request(ev: &CmEvent) -> CmId {
        CmId { id: ev.id, qp: ptr::null_mut(), offered: (ev.responder_resources, ev.initiator_depth), srq: false }
    }

    /// The raw identifier.
    pub(crate) fn raw(&self) -> *mut sys::rdma_cm_id {
        self.id
    }

    /// `rdma_bind_addr`.
    pub(crate) fn bind(&self, a: SocketAddr) -> io::Result<()> {
        let (mut ss, _) = to_sockaddr(a);
        // SAFETY: a live identifier; `ss` holds a valid address.
        check(unsafe { sys::rdma_bind_addr(self.id, &mut ss as *mut _ as *mut _) })
    }

    /// `rdma_listen`.
    pub(crate) fn listen(&self, backlog: i32) -> io::Result<()> {
        // SAFETY: a live, bound identifier.
        check(unsafe { sys::rdma_listen(self.id, backlog) })
    }

    /// A new identifier on `ch`, bound to `want` and listening.
    ///
    /// On iWARP the connection manager's port is also a kernel TCP port, and
    /// the connection manager chooses a free port of its own space without
    /// looking at TCP's: an ephemeral choice (`want` with port 0) can fall on
    /// a port a TCP socket holds (a socket in TIME_WAIT, an unrelated
    /// listener), and then binding or listening fails with `EADDRINUSE`. That
    /// failure of an ephemeral choice is retried with a fresh identifier (so a
    /// fresh random port), up to [`LISTEN_TRIES`] times; `retried` hears the
    /// port that failed and the error. A port the caller asked for is not
    /// retried.
    pub(crate) fn listening(
        ch: &EventChannel,
        want: SocketAddr,
        backlog: i32,
        mut retried: impl FnMut(Option<SocketAddr>, &io::Error),
    ) -> io::Result<CmId> {
        let mut tries = 0;
        loop {
            let id = CmId::new(ch)?;
            let r = id.bind(want).and_then(|()| id.listen(backlog));
            match r {
                Ok(()) => return Ok(id),
                Err(e)
                    if want.port() == 0 && e.raw_os_error() == Some(libc::EADDRINUSE) && tries + 1 < LISTEN_TRIES =>
                {
                    tries += 1;
                    retried(id.local_addr(), &e);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// `rdma_resolve_addr` from `src` (if any) to `dst`.
    pub(crate) fn resolve_addr(&self, src: Option<SocketAddr>, dst: SocketAddr, timeout_ms: i32) -> io::Result<()> {
        let (mut d, _) = to_sockaddr(dst);
        let mut s = src.map(|s| to_sockaddr(s).0);
        let sp: *mut libc::sockaddr_storage = s.as_mut().map_or(ptr::null_mut(), |s| s as *mut _);
        let dp: *mut libc::sockaddr_storage = &mut d;
        // SAFETY: a live identifier; both addresses valid for the call.
        check(unsafe { sys::rdma_resolve_addr(self.id, sp.cast(), dp.cast(), timeout_ms) })
    }

    /// `rdma_resolve_route`.
    pub(crate) fn resolve_route(&self, timeout_ms: i32) -> io::Result<()> {
        // SAFETY: a live identifier with its address resolved.
        check(unsafe { sys::rdma_resolve_route(self.id, timeout_ms) })
    }

    /// Whether the identifier's device is iWARP (whose connection manager moves
    /// the QP itself).
    fn iwarp(&self) -> bool {
        // SAFETY: a live identifier bound to a device (route or request known):
        // `verbs` and its `device` are live while the identifier is.
        unsafe {
            let v = (*self.id).verbs;
            !v.is_null()
                && !(*v).device.is_null()
                && (*(*v).device).transport_type == sys::ibv_transport_type::IBV_TRANSPORT_IWARP
        }
    }

    /// The name of the device the connection manager bound the identifier to
    /// (by its address), if it has bound one.
    pub(crate) fn device_name(&self) -> Option<String> {
        // SAFETY: a live identifier; `verbs` and its `device` are live while the
        // identifier is, and a device's name is a NUL-terminated array.
        unsafe {
            let v = (*self.id).verbs;
            if v.is_null() || (*v).device.is_null() {
                return None;
            }
            let name = std::ffi::CStr::from_ptr((*(*v).device).name.as_ptr());
            Some(name.to_string_lossy().into_owned())
        }
    }

    /// Move the QP to `state` with the attributes the connection manager gives for
    /// it, changed by `edit` (which may also change the mask).
    fn transition(&self, state: u32, edit: impl FnOnce(&mut sys::ibv_qp_attr, &mut i32)) -> io::Result<()> {
        // SAFETY: plain data.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = state;
        let mut mask = 0;
        // SAFETY: a live identifier with its route (or request) known; `a` and
        // `mask` valid out-parameters.
        check(unsafe { sys::rdma_init_qp_attr(self.id, &mut a, &mut mask) })?;
        edit(&mut a, &mut mask);
        // SAFETY: our live QP; `a` holds the attributes `mask` names.
        check(unsafe { sys::ibv_modify_qp(self.qp, &mut a, mask) })
    }

    /// Create the identifier's RC QP on `pd`, both queues completing on `cq`,
    /// receiving through `srq` if given (else into its own receive queue), and
    /// move it to INIT (receives may be posted); the capabilities granted
    /// (inline lowered until the device accepts it).
    ///
    /// The SRQ must outlive the QP (the owner drops the identifier first).
    pub(crate) fn create_qp(&mut self, pd: &Pd, cq: &Cq, srq: Option<&Srq>, want: QpCaps) -> io::Result<QpCaps> {
        if !self.qp.is_null() {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        let mut inline = want.inline;
        let (qp, caps) = loop {
            // SAFETY: plain data.
            let mut a: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
            a.send_cq = cq.raw();
            a.recv_cq = cq.raw();
            a.qp_type = sys::ibv_qp_type::IBV_QPT_RC;
            a.sq_sig_all = 0;
            a.cap.max_send_wr = want.send_wr;
            if let Some(srq) = srq {
                a.srq = srq.0;
            } else {
                a.cap.max_recv_wr = want.recv_wr;
                a.cap.max_recv_sge = want.recv_sge.max(1);
            }
            a.cap.max_send_sge = want.sge;
            a.cap.max_inline_data = inline;
            // SAFETY: a live PD and CQ of the identifier's device; `a` valid.
            let qp = unsafe { sys::ibv_create_qp(pd.raw(), &mut a) };
            if !qp.is_null() {
                let c = a.cap;
                let caps = QpCaps {
                    send_wr: c.max_send_wr,
                    recv_wr: c.max_recv_wr,
                    sge: c.max_send_sge,
                    recv_sge: c.max_recv_sge,
                    inline: c.max_inline_data,
                };
                break (qp, caps);
            }
            let e = last_err();
            if inline == 0 {
                return Err(e);
            }
            inline /= 2;
            if inline < 16 {
                inline = 0;
            }
        };
        self.qp = qp;
        self.srq = srq.is_some();
        if let Err(e) = self.transition(sys::ibv_qp_state::IBV_QPS_INIT, |_, _| {}) {
            // SAFETY: the QP just created, unused; forgotten here.
            unsafe { sys::ibv_destroy_qp(self.qp) };
            self.qp = ptr::null_mut();
            return Err(e);
        }
        Ok(caps)
    }

    /// Move the QP to RTR and RTS with the connection manager's attributes
    /// changed by `path`; on iWARP the connection manager does this itself and
    /// nothing happens. Called on the passive side before [`CmId::accept`], on the
    /// active side when the connect response arrives (before
    /// [`CmId::establish`]). `iwarp`: the port is iWARP (discovery's word; the
    /// identifier's own device is also asked, but a request's may not say it).
    pub(crate) fn ready(&self, path: &QpPath, infiniband: bool, iwarp: bool) -> io::Result<()> {
        if iwarp || self.iwarp() {
            return Ok(());
        }
        // INIT again: now that the connection exists, the connection manager
        // gives the access flags it negotiated (remote reads and atomics with
        // responder resources), which it could not when the QP was created.
        self.transition(sys::ibv_qp_state::IBV_QPS_INIT, |_, _| {})?;
        self.transition(sys::ibv_qp_state::IBV_QPS_RTR, |a, mask| {
            if infiniband {
                // libibverbs refuses the RoCE-only bits on InfiniBand ports.
                *mask &= !ROCE_ONLY_MASK;
            }
            if a.ah_attr.is_global != 0 {
                a.ah_attr.grh.sgid_index = path.sgid_index;
            }
            a.max_dest_rd_atomic = path.responder_resources;
        })?;
        self.transition(sys::ibv_qp_state::IBV_QPS_RTS, |a, _| a.max_rd_atomic = path.initiator_depth)
    }

    /// The connection manager's proposed source GID index (what librdmacm would
    /// have used), if the path is global.
    fn cm_sgid_index(&self) -> Option<u8> {
        // SAFETY: plain data.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = sys::ibv_qp_state::IBV_QPS_RTR;
        let mut mask = 0;
        // SAFETY: as `transition`; nothing is modified.
        let r = unsafe { sys::rdma_init_qp_attr(self.id, &mut a, &mut mask) };
        (r == 0 && a.ah_attr.is_global != 0).then_some(a.ah_attr.grh.sgid_index)
    }

    /// How the connected QP is set up (for the log and the tests).
    pub(crate) fn path(&self) -> io::Result<QpPath> {
        if self.qp.is_null() {
            return Err(io::Error::from_raw_os_error(libc::ENOTCONN));
        }
        // SAFETY: plain data.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: plain data.
        let mut init: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        let mask = (sys::ibv_qp_attr_mask::IBV_QP_AV
            | sys::ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC
            | sys::ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC)
            .0 as i32;
        // SAFETY: our live QP; valid out-parameters.
        check(unsafe { sys::ibv_query_qp(self.qp, &mut a, mask, &mut init) })?;
        let sgid = a.ah_attr.grh.sgid_index;
        Ok(QpPath {
            sgid_index: sgid,
            cm_sgid_index: self.cm_sgid_index().unwrap_or(sgid),
            responder_resources: a.max_dest_rd_atomic,
            initiator_depth: a.max_rd_atomic,
        })
    }

    /// The QP's state (`IBV_QPS_*`), if it has one and the device answers.
    pub(crate) fn qp_state(&self) -> Option<u32> {
        if self.qp.is_null() {
            return None;
        }
        // SAFETY: plain data.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: plain data.
        let mut init: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        let mask = sys::ibv_qp_attr_mask::IBV_QP_STATE.0 as i32;
        // SAFETY: our live QP; valid out-parameters.
        check(unsafe { sys::ibv_query_qp(self.qp, &mut a, mask, &mut init) }).ok()?;
        Some(a.qp_state)
    }

    /// What the peer's connection request offered, from our side:
    /// `(responder_resources, initiator_depth)`.
    pub(crate) fn offered(&self) -> (u8, u8) {
        self.offered
    }

    /// The QP's number (0 without a QP).
    pub(crate) fn qp_num(&self) -> u32 {
        if self.qp.is_null() {
            0
        } else {
            // SAFETY: our live QP.
            unsafe { (*self.qp).qp_num }
        }
    }

    fn conn_param(&self, data: &[u8], responder_resources: u8, initiator_depth: u8) -> sys::rdma_conn_param {
        sys::rdma_conn_param {
            private_data: data.as_ptr().cast(),
            private_data_len: data.len().min(255) as u8,
            responder_resources,
            initiator_depth,
            flow_control: 1,
            retry_count: 7,
            // Infinite RNR retries: a sender waits for the receiver to post.
            rnr_retry_count: 7,
            srq: self.srq as u8,
            qp_num: self.qp_num(),
        }
    }

    /// `rdma_connect` with private data, offering the given read/atomic depths.
    pub(crate) fn connect(&self, data: &[u8], responder_resources: u8, initiator_depth: u8) -> io::Result<()> {
        let mut p = self.conn_param(data, responder_resources, initiator_depth);
        // SAFETY: a live identifier with its route resolved and its QP created;
        // `p` points at `data`, valid for the call.
        check(unsafe { sys::rdma_connect(self.id, &mut p) })
    }

    /// `rdma_establish`: tell the passive side we are ready (after the connect
    /// response, with the QP moved by [`CmId::ready`]).
    pub(crate) fn establish(&self) -> io::Result<()> {
        // SAFETY: a live identifier whose connect response arrived; it has no
        // librdmacm QP, as rdma_establish requires.
        check(unsafe { sys::rdma_establish(self.id) })
    }

    /// `rdma_accept` with private data and the read/atomic depths the QP was
    /// readied with.
    pub(crate) fn accept(&self, data: &[u8], responder_resources: u8, initiator_depth: u8) -> io::Result<()> {
        let mut p = self.conn_param(data, responder_resources, initiator_depth);
        // SAFETY: a live identifier of a connection request with its QP created;
        // `p` points at `data`, valid for the call.
        check(unsafe { sys::rdma_accept(self.id, &mut p) })
    }

    /// `rdma_reject` with private data.
    pub(crate) fn reject(&self, data: &[u8]) -> io::Result<()> {
        // SAFETY: a live identifier of a connection request; `data` valid.
        check(unsafe { sys::rdma_reject(self.id, data.as_ptr().cast(), data.len().min(255) as u8) })
    }

    /// Move the QP to the error state (outstanding work requests flush), then
    /// `rdma_disconnect`; errors ignored: the connection may be gone already.
    /// (librdmacm moves only a QP of its own.)
    pub(crate) fn disconnect(&self) {
        if !self.qp.is_null() && !self.iwarp() {
            // SAFETY: plain data.
            let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
            a.qp_state = sys::ibv_qp_state::IBV_QPS_ERR;
            // SAFETY: our live QP; `a` holds the state the mask names.
            unsafe { sys::ibv_modify_qp(self.qp, &mut a, sys::ibv_qp_attr_mask::IBV_QP_STATE.0 as i32) };
        }
        // SAFETY: a live identifier.
        unsafe { sys::rdma_disconnect(self.id) };
    }

    /// `rdma_notify(IBV_EVENT_COMM_EST)`: data arrived on the QP before the
    /// connection manager heard the connection is up (its last message lost or
    /// late); it completes the connection now.
    pub(crate) fn notify_established(&self) {
        // SAFETY: a live identifier; the event is a valid enumerator.
        unsafe { sys::rdma_notify(self.id, sys::ibv_event_type::IBV_EVENT_COMM_EST) };
    }

    /// `rdma_migrate_id` to another channel.
    pub(crate) fn migrate(&self, ch: &EventChannel) -> io::Result<()> {
        // SAFETY: a live identifier and channel.
        check(unsafe { sys::rdma_migrate_id(self.id, ch.raw()) })
    }

    /// The local address.
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: a live identifier; the route's source address is a sockaddr of
        // its family.
        unsafe { from_sockaddr(&(*self.id).route.addr.src_addr_union.src_addr) }
    }

    /// The peer's address.
    pub(crate) fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: as `local_addr`.
        unsafe { from_sockaddr(&(*self.id).route.addr.dst_addr_union.dst_addr) }
    }

    /// Post a list of send work requests.
    ///
    /// # Safety
    /// Every request's scatter-gather entries must describe memory registered on
    /// the QP's PD (or be inline) and stay valid until the request completes.
    pub(crate) unsafe fn post_send(&self, wr: *mut sys::ibv_send_wr) -> io::Result<()> {
        if self.qp.is_null() {
            return Err(io::Error::from_raw_os_error(libc::ENOTCONN));
        }
        let mut bad = ptr::null_mut();
        // SAFETY: the caller's contract; our live QP.
        check(unsafe { sys::ibv_post_send(self.qp, wr, &mut bad) })
    }

    /// Post one receive work request.
    ///
    /// # Safety
    /// The scatter-gather entries must describe registered memory that stays
    /// valid until the request completes.
    pub(crate) unsafe fn post_recv(&self, wr: *mut sys::ibv_recv_wr) -> io::Result<()> {
        if self.qp.is_null() {
            return Err(io::Error::from_raw_os_error(libc::ENOTCONN));
        }
        let mut bad = ptr::null_mut();
        // SAFETY: the caller's contract; our live QP.
        check(unsafe { sys::ibv_post_recv(self.qp, wr, &mut bad) })
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: both owned by us; the QP (if any) is destroyed before the
        // identifier, and no event of it is held unacknowledged (events are
        // acknowledged as they are read).
        unsafe {
            if !self.qp.is_null() {
                sys::ibv_destroy_qp(self.qp);
            }
            sys::rdma_destroy_id(self.id);
        }
    }
}
