//! The objects of a protection domain: the domain itself, memory regions,
//! shared receive queues and completion queues (with their channels).

use super::*;

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
pub(crate) struct Srq(pub(super) *mut sys::ibv_srq);

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
