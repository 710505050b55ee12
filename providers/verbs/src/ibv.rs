//! The thin layer over libibverbs and librdmacm (through `rdma-sys`): each C object
//! the provider uses, owned by one Rust value that releases it on drop, and the
//! few calls the rest of the crate makes. Every `unsafe` block of the crate that
//! calls C is here or says why it is sound where it is.
//!
//! Thread safety: libibverbs and librdmacm objects may be used from any thread
//! (rdma-core serialises inside each call where the object needs it); the
//! provider calls them under its own locks anyway, so the `Send`/`Sync`
//! implementations below only say that the pointers may cross threads.

use rdma_sys as sys;
use std::ffi::CStr;
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::ptr;

/// `IBV_LINK_LAYER_INFINIBAND` (not in rdma-sys's bindings).
pub(crate) const LINK_LAYER_INFINIBAND: u8 = 1;
/// `IBV_LINK_LAYER_ETHERNET`.
pub(crate) const LINK_LAYER_ETHERNET: u8 = 2;

/// The errno of the last failed C call.
pub(crate) fn last_err() -> io::Error {
    io::Error::last_os_error()
}

/// A C call's integer result: 0 is success; otherwise the error (some calls return
/// the errno, others -1 with errno set).
fn check(r: i32) -> io::Result<()> {
    match r {
        0 => Ok(()),
        -1 => Err(last_err()),
        e if e > 0 => Err(io::Error::from_raw_os_error(e)),
        _ => Err(last_err()),
    }
}

/// Set `O_NONBLOCK` on a descriptor the C library owns.
fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor owned by a live verbs object; no pointers.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl < 0 || libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
            return Err(last_err());
        }
    }
    Ok(())
}

/// The name of a device.
fn device_name(dev: *mut sys::ibv_device) -> String {
    // SAFETY: `dev` comes from a live device list; the name is a NUL-terminated
    // string inside the device structure.
    unsafe {
        let p = sys::ibv_get_device_name(dev);
        if p.is_null() {
            return String::new();
        }
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// The RDMA devices of this node (`ibv_get_device_list`).
pub(crate) struct DeviceList {
    list: *mut *mut sys::ibv_device,
    n: usize,
}

impl DeviceList {
    /// The devices; the error says why there are none (ENOSYS: the kernel has no
    /// RDMA support; other errors from the library).
    pub(crate) fn get() -> io::Result<DeviceList> {
        let mut n = 0;
        // SAFETY: `n` is a valid out-pointer; the list is freed on drop.
        let list = unsafe { sys::ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(last_err());
        }
        Ok(DeviceList { list, n: n.max(0) as usize })
    }

    /// The devices' names, in the library's order.
    pub(crate) fn names(&self) -> Vec<String> {
        (0..self.n)
            .map(|i| {
                // SAFETY: i < n, the length the library reported.
                device_name(unsafe { *self.list.add(i) })
            })
            .collect()
    }

    /// Open device `i` (for queries).
    pub(crate) fn open(&self, i: usize) -> io::Result<Context> {
        if i >= self.n {
            return Err(io::Error::from_raw_os_error(libc::ENODEV));
        }
        // SAFETY: i < n; the device pointer is valid while the list lives, and the
        // context stays valid after the list is freed (libibverbs keeps a reference).
        let ctx = unsafe { sys::ibv_open_device(*self.list.add(i)) };
        if ctx.is_null() {
            return Err(last_err());
        }
        Ok(Context { ctx, owned: true })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the list came from ibv_get_device_list and is freed once.
        unsafe { sys::ibv_free_device_list(self.list) }
    }
}

/// One GID table entry of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GidEntry {
    /// The index in the port's table.
    pub index: u32,
    /// The GID.
    pub gid: [u8; 16],
    /// `IBV_GID_TYPE_IB`, `_ROCE_V1` or `_ROCE_V2`.
    pub gid_type: u32,
    /// The network interface the GID belongs to (RoCE), 0 if none.
    pub ndev_ifindex: u32,
}

impl GidEntry {
    /// The IP address a RoCE v2 GID encodes (an IPv4-mapped IPv6 address for IPv4).
    pub(crate) fn ip(&self) -> std::net::IpAddr {
        let v6 = std::net::Ipv6Addr::from(self.gid);
        match v6.to_ipv4_mapped() {
            Some(v4) => std::net::IpAddr::V4(v4),
            None => std::net::IpAddr::V6(v6),
        }
    }
}

extern "C" {
    // Exported by libibverbs since rdma-core 32; rdma-sys's bindings leave it out
    // (verbs.h wraps it in an inline function).
    fn _ibv_query_gid_ex(
        context: *mut sys::ibv_context,
        port_num: u32,
        gid_index: u32,
        entry: *mut sys::ibv_gid_entry,
        flags: u32,
        entry_size: usize,
    ) -> libc::c_int;
}

/// An open device (`ibv_context`): owned (opened by us, closed on drop) or
/// borrowed from librdmacm's device list.
pub(crate) struct Context {
    ctx: *mut sys::ibv_context,
    owned: bool,
}

// SAFETY: an ibv_context may be used from any thread (see the module docs).
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Context {
    /// The raw context.
    pub(crate) fn raw(&self) -> *mut sys::ibv_context {
        self.ctx
    }

    /// The device's name.
    pub(crate) fn name(&self) -> String {
        // SAFETY: a live context points at its device.
        device_name(unsafe { (*self.ctx).device })
    }

    /// `ibv_query_device`.
    pub(crate) fn query_device(&self) -> io::Result<sys::ibv_device_attr> {
        // SAFETY: ibv_device_attr is plain data; zeroed is a valid value and the
        // call fills it.
        let mut a: sys::ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: live context, valid out-pointer.
        check(unsafe { sys::ibv_query_device(self.ctx, &mut a) })?;
        Ok(a)
    }

    /// `ibv_query_port`.
    pub(crate) fn query_port(&self, port: u8) -> io::Result<sys::ibv_port_attr> {
        // SAFETY: plain data, filled by the call.
        let mut a: sys::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: live context, valid out-pointer of the size the wrapper passes.
        check(unsafe { sys::___ibv_query_port(self.ctx, port, &mut a) })?;
        Ok(a)
    }

    /// GID table entry `index` of `port`, or `None` when the slot is empty.
    pub(crate) fn gid(&self, port: u8, index: u32) -> Option<GidEntry> {
        // SAFETY: plain data, filled by the call.
        let mut e: sys::ibv_gid_entry = unsafe { std::mem::zeroed() };
        // SAFETY: live context; `e` is an out-pointer of the size we pass.
        let r = unsafe {
            _ibv_query_gid_ex(self.ctx, port as u32, index, &mut e, 0, std::mem::size_of::<sys::ibv_gid_entry>())
        };
        if r != 0 {
            return None;
        }
        // SAFETY: `raw` is the byte view of the 16-byte GID union.
        let gid = unsafe { e.gid.raw };
        if gid == [0u8; 16] {
            return None;
        }
        Some(GidEntry { index, gid, gid_type: e.gid_type, ndev_ifindex: e.ndev_ifindex })
    }

    /// The device's asynchronous event descriptor, made non-blocking.
    pub(crate) fn async_fd(&self) -> io::Result<RawFd> {
        // SAFETY: a live context.
        let fd = unsafe { (*self.ctx).async_fd };
        set_nonblocking(fd)?;
        Ok(fd)
    }

    /// The next asynchronous event (`ibv_get_async_event`, acknowledged at once):
    /// its type and the QP number it concerns (0 for port or device events).
    /// `None` when none is waiting (the descriptor must be non-blocking).
    pub(crate) fn async_event(&self) -> Option<(u32, u32)> {
        // SAFETY: plain data, filled by the call.
        let mut ev: sys::ibv_async_event = unsafe { std::mem::zeroed() };
        // SAFETY: live context, valid out-pointer.
        if unsafe { sys::ibv_get_async_event(self.ctx, &mut ev) } != 0 {
            return None;
        }
        // Read as the integer C wrote: rdma-sys declares the field as a Rust enum,
        // which a value unknown to it must not be read as.
        // SAFETY: the field is a 4-byte C enum inside `ev`.
        let t = unsafe { std::ptr::read(std::ptr::addr_of!(ev.event_type) as *const u32) };
        use sys::ibv_event_type as E;
        let qp_events = [
            E::IBV_EVENT_QP_FATAL,
            E::IBV_EVENT_QP_REQ_ERR,
            E::IBV_EVENT_QP_ACCESS_ERR,
            E::IBV_EVENT_COMM_EST,
            E::IBV_EVENT_SQ_DRAINED,
            E::IBV_EVENT_PATH_MIG,
            E::IBV_EVENT_PATH_MIG_ERR,
            E::IBV_EVENT_QP_LAST_WQE_REACHED,
        ];
        let qpn = match t {
            t if qp_events.iter().any(|e| *e as u32 == t) => {
                // SAFETY: for QP events the element is the QP, which lives until
                // the event is acknowledged (below).
                unsafe {
                    let qp = ev.element.qp;
                    if qp.is_null() {
                        0
                    } else {
                        (*qp).qp_num
                    }
                }
            }
            _ => 0,
        };
        // SAFETY: the event was returned by ibv_get_async_event and is acked once.
        unsafe { sys::ibv_ack_async_event(&mut ev) };
        Some((t, qpn))
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: we opened it and close it once.
            unsafe { sys::ibv_close_device(self.ctx) };
        }
    }
}

/// librdmacm's open devices (`rdma_get_devices`): the contexts its connection
/// identifiers use, so the domain's protection domain, queues and regions must
/// come from one of them.
pub(crate) struct CmDevices {
    list: *mut *mut sys::ibv_context,
    n: usize,
}

// SAFETY: the list is read-only after creation; contexts are thread-safe.
unsafe impl Send for CmDevices {}
// SAFETY: as above.
unsafe impl Sync for CmDevices {}

impl CmDevices {
    /// librdmacm's devices.
    pub(crate) fn get() -> io::Result<CmDevices> {
        let mut n = 0;
        // SAFETY: valid out-pointer; freed on drop.
        let list = unsafe { sys::rdma_get_devices(&mut n) };
        if list.is_null() {
            return Err(last_err());
        }
        Ok(CmDevices { list, n: n.max(0) as usize })
    }

    /// The context of the device called `name` (borrowed: valid while `self` lives).
    pub(crate) fn find(&self, name: &str) -> Option<Context> {
        (0..self.n).find_map(|i| {
            // SAFETY: i < n.
            let ctx = unsafe { *self.list.add(i) };
            // SAFETY: librdmacm's contexts are open and point at their devices.
            let n = device_name(unsafe { (*ctx).device });
            (n == name).then_some(Context { ctx, owned: false })
        })
    }
}

impl Drop for CmDevices {
    fn drop(&mut self) {
        // SAFETY: the list came from rdma_get_devices and is freed once.
        unsafe { sys::rdma_free_devices(self.list) }
    }
}

/// A protection domain.
pub(crate) struct Pd(*mut sys::ibv_pd);

// SAFETY: see the module docs.
unsafe impl Send for Pd {}
// SAFETY: see the module docs.
unsafe impl Sync for Pd {}

impl Pd {
    /// `ibv_alloc_pd`.
    pub(crate) fn new(ctx: &Context) -> io::Result<Pd> {
        // SAFETY: a live context.
        let pd = unsafe { sys::ibv_alloc_pd(ctx.raw()) };
        if pd.is_null() {
            return Err(last_err());
        }
        Ok(Pd(pd))
    }

    /// The raw protection domain.
    pub(crate) fn raw(&self) -> *mut sys::ibv_pd {
        self.0
    }

    /// Whether the device creates an RC QP on this PD (both queues on `cq`, one
    /// work request and one scatter-gather entry each way) with `inline` bytes of
    /// inline data: a probe of the device's limit (the QP is destroyed at once).
    pub(crate) fn rc_qp_accepts_inline(&self, cq: &Cq, inline: u32) -> bool {
        // SAFETY: plain data; all-zero is a valid value.
        let mut a: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        a.send_cq = cq.raw();
        a.recv_cq = cq.raw();
        a.qp_type = sys::ibv_qp_type::IBV_QPT_RC;
        a.sq_sig_all = 1;
        a.cap.max_send_wr = 1;
        a.cap.max_recv_wr = 1;
        a.cap.max_send_sge = 1;
        a.cap.max_recv_sge = 1;
        a.cap.max_inline_data = inline;
        // SAFETY: a live PD and a CQ of the same device; `a` is valid for the call.
        let qp = unsafe { sys::ibv_create_qp(self.0, &mut a) };
        if qp.is_null() {
            return false;
        }
        // SAFETY: created just above, unused, destroyed once.
        unsafe { sys::ibv_destroy_qp(qp) };
        true
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: allocated by us, freed once (after every region, QP of it).
        unsafe { sys::ibv_dealloc_pd(self.0) };
    }
}

/// A registered memory region (`ibv_reg_mr`).
pub(crate) struct Mr(*mut sys::ibv_mr);

// SAFETY: see the module docs.
unsafe impl Send for Mr {}
// SAFETY: see the module docs.
unsafe impl Sync for Mr {}

impl Mr {
    /// Register `len` bytes at `base` with `IBV_ACCESS_*` flags `access`.
    ///
    /// # Safety
    /// The memory must stay allocated until the region is dropped; the device
    /// may read or write it as `access` allows meanwhile.
    pub(crate) unsafe fn new(pd: &Pd, base: *mut u8, len: usize, access: u32) -> io::Result<Mr> {
        // SAFETY: the caller keeps the memory allocated; a live PD.
        let mr = unsafe { sys::ibv_reg_mr(pd.raw(), base.cast(), len.max(1), access as i32) };
        if mr.is_null() {
            return Err(last_err());
        }
        Ok(Mr(mr))
    }

    /// The local key.
    pub(crate) fn lkey(&self) -> u32 {
        // SAFETY: a live region.
        unsafe { (*self.0).lkey }
    }

    /// The remote key.
    pub(crate) fn rkey(&self) -> u32 {
        // SAFETY: a live region.
        unsafe { (*self.0).rkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered by us, deregistered once.
        unsafe { sys::ibv_dereg_mr(self.0) };
    }
}

/// A shared receive queue: one set of receive buffers for every QP of an
/// endpoint (instead of a set per connection). Drop destroys it; the QPs using
/// it are destroyed first (their owners drop before it).
pub(crate) struct Srq(*mut sys::ibv_srq);

// SAFETY: see the module docs.
unsafe impl Send for Srq {}
// SAFETY: see the module docs.
unsafe impl Sync for Srq {}

impl Srq {
    /// `ibv_create_srq` with room for `max_wr` one-SGE receives.
    pub(crate) fn new(pd: &Pd, max_wr: u32) -> io::Result<Srq> {
        // SAFETY: plain data.
        let mut a: sys::ibv_srq_init_attr = unsafe { std::mem::zeroed() };
        a.attr.max_wr = max_wr;
        a.attr.max_sge = 1;
        // SAFETY: a live PD; `a` valid for the call.
        let srq = unsafe { sys::ibv_create_srq(pd.raw(), &mut a) };
        if srq.is_null() {
            return Err(last_err());
        }
        Ok(Srq(srq))
    }

    /// Post one receive work request.
    ///
    /// # Safety
    /// The scatter-gather entries must describe registered memory that stays
    /// valid until the request completes.
    pub(crate) unsafe fn post_recv(&self, wr: *mut sys::ibv_recv_wr) -> io::Result<()> {
        let mut bad = ptr::null_mut();
        // SAFETY: the caller's contract; a live SRQ.
        check(unsafe { sys::ibv_post_srq_recv(self.0, wr, &mut bad) })
    }
}

impl Drop for Srq {
    fn drop(&mut self) {
        // SAFETY: created by us, destroyed once, after every QP using it.
        unsafe { sys::ibv_destroy_srq(self.0) };
    }
}

/// A completion queue with its own completion channel (for blocking waits).
pub(crate) struct Cq {
    cq: *mut sys::ibv_cq,
    chan: *mut sys::ibv_comp_channel,
    /// Events taken from the channel and not yet acknowledged.
    unacked: u32,
}

// SAFETY: see the module docs.
unsafe impl Send for Cq {}
// SAFETY: see the module docs.
unsafe impl Sync for Cq {}

impl Cq {
    /// A queue of `depth` entries on `ctx`, with a non-blocking completion channel.
    pub(crate) fn new(ctx: &Context, depth: u32) -> io::Result<Cq> {
        // SAFETY: a live context.
        let chan = unsafe { sys::ibv_create_comp_channel(ctx.raw()) };
        if chan.is_null() {
            return Err(last_err());
        }
        // SAFETY: `chan` was just created.
        let fd = unsafe { (*chan).fd };
        // SAFETY: a live context and channel.
        let cq = unsafe { sys::ibv_create_cq(ctx.raw(), depth as i32, ptr::null_mut(), chan, 0) };
        if cq.is_null() {
            let e = last_err();
            // SAFETY: created above, unused.
            unsafe { sys::ibv_destroy_comp_channel(chan) };
            return Err(e);
        }
        let q = Cq { cq, chan, unacked: 0 };
        set_nonblocking(fd)?;
        q.arm()?;
        Ok(q)
    }

    /// The raw queue.
    pub(crate) fn raw(&self) -> *mut sys::ibv_cq {
        self.cq
    }

    /// The channel's descriptor: readable after [`Cq::arm`] once a completion
    /// arrived.
    pub(crate) fn fd(&self) -> RawFd {
        // SAFETY: a live channel.
        unsafe { (*self.chan).fd }
    }

    /// Ask for an event on the channel at the next completion.
    pub(crate) fn arm(&self) -> io::Result<()> {
        // SAFETY: a live queue.
        check(unsafe { sys::ibv_req_notify_cq(self.cq, 0) })
    }

    /// Take the channel's events (non-blocking); acknowledged in batches. Each
    /// one used up an [`Cq::arm`].
    pub(crate) fn drain_events(&mut self) {
        loop {
            let mut cq = ptr::null_mut();
            let mut ctx = ptr::null_mut();
            // SAFETY: a live channel; valid out-pointers.
            if unsafe { sys::ibv_get_cq_event(self.chan, &mut cq, &mut ctx) } != 0 {
                break;
            }
            self.unacked += 1;
        }
        if self.unacked >= 64 {
            // SAFETY: the events were taken from this queue's channel.
            unsafe { sys::ibv_ack_cq_events(self.cq, self.unacked) };
            self.unacked = 0;
        }
    }

    /// Poll up to `wc.len()` completions; their number.
    pub(crate) fn poll(&self, wc: &mut [sys::ibv_wc]) -> io::Result<usize> {
        // SAFETY: `wc` has room for `len` entries.
        let n = unsafe { sys::ibv_poll_cq(self.cq, wc.len() as i32, wc.as_mut_ptr()) };
        if n < 0 {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        Ok(n as usize)
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: every QP using the queue is gone (the owner drops them first);
        // events are acknowledged before the queue is destroyed, and the channel
        // after it.
        unsafe {
            if self.unacked > 0 {
                sys::ibv_ack_cq_events(self.cq, self.unacked);
            }
            sys::ibv_destroy_cq(self.cq);
            sys::ibv_destroy_comp_channel(self.chan);
        }
    }
}

/// A zeroed work completion array element.
pub(crate) fn empty_wc() -> sys::ibv_wc {
    // SAFETY: ibv_wc is plain data; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

/// The text of a work completion status.
pub(crate) fn wc_status_str(status: u32) -> String {
    // SAFETY: returns a static string for any value.
    unsafe {
        let p = sys::ibv_wc_status_str(status);
        if p.is_null() {
            return format!("status {status}");
        }
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

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

/// The name of an asynchronous event type (`IBV_EVENT_*`), and whether it
/// reports a failure (else it is news: a port up, a GID table change).
pub(crate) fn async_event_str(t: u32) -> (&'static str, bool) {
    const NAMES: [(&str, bool); 20] = [
        ("IBV_EVENT_CQ_ERR", true),
        ("IBV_EVENT_QP_FATAL", true),
        ("IBV_EVENT_QP_REQ_ERR", true),
        ("IBV_EVENT_QP_ACCESS_ERR", true),
        ("IBV_EVENT_COMM_EST", false),
        ("IBV_EVENT_SQ_DRAINED", false),
        ("IBV_EVENT_PATH_MIG", false),
        ("IBV_EVENT_PATH_MIG_ERR", true),
        ("IBV_EVENT_DEVICE_FATAL", true),
        ("IBV_EVENT_PORT_ACTIVE", false),
        ("IBV_EVENT_PORT_ERR", true),
        ("IBV_EVENT_LID_CHANGE", false),
        ("IBV_EVENT_PKEY_CHANGE", false),
        ("IBV_EVENT_SM_CHANGE", false),
        ("IBV_EVENT_SRQ_ERR", true),
        ("IBV_EVENT_SRQ_LIMIT_REACHED", false),
        ("IBV_EVENT_QP_LAST_WQE_REACHED", false),
        ("IBV_EVENT_CLIENT_REREGISTER", false),
        ("IBV_EVENT_GID_CHANGE", false),
        ("IBV_EVENT_WQ_FATAL", true),
    ];
    NAMES.get(t as usize).copied().unwrap_or(("an unknown asynchronous event", true))
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
    /// Scatter-gather entries per work request.
    pub sge: u32,
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
                a.cap.max_recv_sge = 1;
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
    /// [`CmId::establish`]).
    pub(crate) fn ready(&self, path: &QpPath, infiniband: bool) -> io::Result<()> {
        if self.iwarp() {
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
