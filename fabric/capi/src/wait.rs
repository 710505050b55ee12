//! `fi_wait_open` and the wait set (`struct fid_wait`), over the shared engine
//! in `fabric_core::wait`: CQs, counters and EQs opened with
//! `wait_obj = FI_WAIT_SET` and `wait_set = <the set>` are its members;
//! `fi_wait` blocks until one has something to read (driving their progress),
//! `fi_control(FI_GETWAIT)` gives an epoll descriptor for the caller's own
//! `poll`/`epoll` after `fi_trywait`. The membership of a queue or counter
//! ([`Memberships`]) ends when it is closed; a wait set that still has members
//! refuses to close (`-FI_EBUSY`), as libfabric's does.

use crate::fabric::Fabric;
use crate::fid::{self, CObject, EINVAL};
use crate::{abi, exports::guard};
use fabric_core::wait::{Set, Waitable};
use fabric_core::Error;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex, Weak};

/// A wait set as C holds it.
#[repr(C)]
pub(crate) struct WaitSet {
    c: abi::fid_wait,
    /// The members and their epoll set.
    set: Arc<Set>,
}

// SAFETY: repr(C), first field `fid_wait`, whose first field is `struct fid`.
unsafe impl CObject for WaitSet {
    const CLASS: usize = abi::FI_CLASS_WAIT;
}

static FID_OPS: abi::fi_ops = fid::fi_ops!(close, fid::no_bind, control);

static WAIT_OPS: abi::fi_ops_wait =
    abi::fi_ops_wait { size: std::mem::size_of::<abi::fi_ops_wait>(), wait: Some(wait) };

/// The sets (wait sets, poll sets) a C queue or counter belongs to: it leaves
/// them all when it is dropped, that is when the object is closed.
pub(crate) struct Memberships {
    /// The provider object's id, by which the sets know it.
    fid: u64,
    sets: Mutex<Vec<Weak<Set>>>,
}

impl Memberships {
    /// No membership yet, for the provider object `fid`.
    pub(crate) fn new(fid: u64) -> Memberships {
        Memberships { fid, sets: Mutex::new(Vec::new()) }
    }

    /// Add `member` (whose id is this object's) to `set`, reporting `context`:
    /// 0, or the negative error number.
    pub(crate) fn join(&self, set: &Arc<Set>, member: Arc<dyn Waitable>, context: *mut c_void) -> c_int {
        if let Err(e) = set.add(member, context as u64) {
            return fid::err(e);
        }
        let mut g = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        g.retain(|w| w.strong_count() > 0);
        if !g.iter().any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(set))) {
            g.push(Arc::downgrade(set));
        }
        0
    }
}

impl Drop for Memberships {
    fn drop(&mut self) {
        let g = self.sets.get_mut().unwrap_or_else(|e| e.into_inner());
        for s in g.drain(..).filter_map(|w| w.upgrade()) {
            // Already removed by `fi_poll_del`: nothing to do.
            let _ = s.remove(self.fid);
        }
    }
}

/// The wait set a queue or counter joins at open: `None` unless `wait_obj` is
/// `FI_WAIT_SET`, which needs a live wait set in `wait_set` (`-FI_EINVAL`
/// otherwise). The member's own wait object is then an fd, which the set
/// watches.
///
/// # Safety
/// `wait_set` is NULL or a live fid (as for [`fid::get`]).
pub(crate) unsafe fn wait_set_of(
    wait_obj: abi::fi_wait_obj,
    wait_set: *mut abi::fid_wait,
) -> Result<Option<Arc<Set>>, c_int> {
    if wait_obj != abi::FI_WAIT_SET {
        return Ok(None);
    }
    // SAFETY: as the caller guarantees; class-checked.
    match unsafe { fid::get::<WaitSet>(wait_set as *const c_void) } {
        Some(w) => Ok(Some(Arc::clone(&w.set))),
        None => Err(EINVAL),
    }
}

/// `fi_wait_open` (`fabric->ops->wait_open`): `FI_WAIT_UNSPEC` and
/// `FI_WAIT_FD` give an epoll-based set; the other kinds answer `-FI_ENOSYS`,
/// unknown ones and any flag `-FI_EINVAL`.
pub(crate) unsafe extern "C" fn fi_wait_open(
    fabric: *mut abi::fid_fabric,
    attr: *mut abi::fi_wait_attr,
    waitset: *mut *mut abi::fid_wait,
) -> c_int {
    guard("fi_wait_open", EINVAL, || {
        // SAFETY: the caller's out-pointer and fabric, class-checked.
        if let Err(e) = unsafe { fid::open_under::<Fabric, _>(waitset, fabric as *const c_void) } {
            return e;
        }
        if attr.is_null() {
            return EINVAL;
        }
        // SAFETY: the caller's attributes, non-NULL.
        let a = unsafe { &*attr };
        if a.flags != 0 {
            return EINVAL;
        }
        match a.wait_obj {
            abi::FI_WAIT_UNSPEC | abi::FI_WAIT_FD => {}
            abi::FI_WAIT_POLLFD | abi::FI_WAIT_MUTEX_COND | abi::FI_WAIT_YIELD => return fid::err(Error::NoSys),
            _ => return EINVAL,
        }
        let set = match Set::wait_set() {
            Ok(s) => Arc::new(s),
            Err(e) => return fid::err(e),
        };
        let obj = WaitSet {
            c: abi::fid_wait {
                fid: fid::fid(abi::FI_CLASS_WAIT, std::ptr::null_mut(), &FID_OPS),
                ops: &WAIT_OPS as *const _ as *mut _,
            },
            set,
        };
        // SAFETY: checked by open_under above.
        unsafe { fid::hand_out(waitset, obj) }
    })
}

/// `fi_close`: `-FI_EBUSY` while queues or counters opened on the set are open.
unsafe extern "C" fn close(f: *mut abi::fid) -> c_int {
    guard("fi_close", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        match unsafe { fid::get::<WaitSet>(f as *const c_void) } {
            None => return EINVAL,
            Some(w) if !w.set.is_empty() => return fid::err(Error::Busy),
            Some(_) => {}
        }
        // SAFETY: as above; checked live and of this class.
        match unsafe { fid::reclaim::<WaitSet>(f) } {
            Some(_) => 0,
            None => EINVAL,
        }
    })
}

/// `fi_control`: `FI_GETWAIT` gives the set's epoll descriptor (`int *`).
unsafe extern "C" fn control(f: *mut abi::fid, command: c_int, arg: *mut c_void) -> c_int {
    guard("fi_control", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        let Some(w) = (unsafe { fid::get::<WaitSet>(f as *const c_void) }) else {
            return EINVAL;
        };
        match command {
            abi::FI_GETWAIT => {
                if arg.is_null() {
                    return EINVAL;
                }
                match w.set.fd() {
                    Some(fd) => {
                        // SAFETY: FI_GETWAIT's argument is an `int *` for an fd wait object.
                        unsafe { *(arg as *mut c_int) = fd };
                        0
                    }
                    None => fid::err(Error::NoSys),
                }
            }
            _ => fid::err(Error::NoSys),
        }
    })
}

/// `fi_wait`: 0 once a member has something to read, `-FI_ETIMEDOUT` after
/// `timeout` milliseconds (negative: no limit).
unsafe extern "C" fn wait(waitset: *mut abi::fid_wait, timeout: c_int) -> c_int {
    guard("fi_wait", EINVAL, || {
        // SAFETY: the caller's wait set, class-checked.
        let Some(w) = (unsafe { fid::get::<WaitSet>(waitset as *const c_void) }) else {
            return EINVAL;
        };
        fid::ret(w.set.wait(fid::timeout(timeout)))
    })
}

/// `fi_trywait` for one object: a wait set, a completion queue, an event queue
/// or a counter (others answer `-FI_EINVAL`).
///
/// # Safety
/// `f` is NULL or a live fid.
pub(crate) unsafe fn trywait_fid(f: *mut abi::fid) -> c_int {
    let p = f as *const c_void;
    // SAFETY: as the caller guarantees; class-checked.
    if let Some(w) = unsafe { fid::get::<WaitSet>(p) } {
        return fid::ret(w.set.trywait());
    }
    // SAFETY: as above.
    if let Some(q) = unsafe { fid::get::<crate::eq::Eq>(p) } {
        return fid::ret(q.ops.trywait());
    }
    // SAFETY: as above.
    if let Some(c) = unsafe { fid::get::<crate::cntr::Cntr>(p) } {
        return fid::ret(c.ops.trywait());
    }
    // SAFETY: as above.
    unsafe { crate::cq::trywait_fid(f) }
}
