//! Devices: the device list, a device context (its ports, GID table, limits),
//! and the connection manager's view of the devices.

use super::*;

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
