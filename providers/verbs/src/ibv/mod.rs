//! The thin layer over libibverbs and librdmacm (through `rdma-sys`): each C object
//! the provider uses, owned by one Rust value that releases it on drop, and the
//! few calls the rest of the crate makes. Every `unsafe` block of the crate that
//! calls C is here or says why it is sound where it is.
//!
//! Thread safety: libibverbs and librdmacm objects may be used from any thread
//! (rdma-core serialises inside each call where the object needs it); the
//! provider calls them under its own locks anyway, so the `Send`/`Sync`
//! implementations below only say that the pointers may cross threads.
//!
//! Here: devices, their contexts and ports, protection domains, memory
//! regions, shared receive queues and completion queues (libibverbs); in
//! `cm.rs`: event channels, connection identifiers and their QPs (librdmacm).

use rdma_sys as sys;
use std::ffi::CStr;
use std::io;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::ptr;

mod cm;

pub(crate) use cm::{cm_event_str, CmEvent, CmId, EventChannel, QpCaps, QpPath, LISTEN_TRIES};

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

    /// Whether the device is iWARP (`IBV_TRANSPORT_IWARP`: Soft-iWARP, cxgb4,
    /// irdma in iWARP mode), whose GIDs encode no IP address.
    pub(crate) fn iwarp(&self) -> bool {
        // SAFETY: a live context points at its live device.
        unsafe {
            let d = (*self.ctx).device;
            !d.is_null() && (*d).transport_type == sys::ibv_transport_type::IBV_TRANSPORT_IWARP
        }
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

    /// Poll up to `wc.len()` work completions into `wc`: those written, in
    /// order (the entries are not read before, so need no initializing: a poll
    /// finding nothing costs no clearing of the array).
    pub(crate) fn poll<'a>(&self, wc: &'a mut [MaybeUninit<sys::ibv_wc>]) -> io::Result<&'a [sys::ibv_wc]> {
        // SAFETY: `wc` has room for `len` entries, which ibv_poll_cq only writes.
        let n = unsafe { sys::ibv_poll_cq(self.cq, wc.len() as i32, wc.as_mut_ptr().cast()) };
        if n < 0 {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        let n = (n as usize).min(wc.len());
        // SAFETY: ibv_poll_cq wrote the first `n` entries (at most the room it
        // was given), each a complete work completion.
        Ok(unsafe { std::slice::from_raw_parts(wc.as_ptr().cast(), n) })
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
