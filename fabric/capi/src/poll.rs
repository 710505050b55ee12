//! `fi_poll_open` and the poll set (`struct fid_poll`), over the shared engine
//! in `fabric_core::wait`: `fi_poll_add` takes completion queues and counters
//! (as libfabric's, event queues are refused), `fi_poll` drives their progress
//! and returns the `context` (as given at their open) of each that has
//! something to read: a CQ with entries or an error entry, a counter whose
//! counts changed since the set last reported it. A member that is closed
//! leaves the set; closing the set leaves its members as they are.

use crate::cntr::Cntr;
use crate::cq::Cq;
use crate::domain::Domain;
use crate::fid::{self, CObject, EINVAL};
use crate::{abi, exports::guard};
use fabric_core::wait::{CntrMember, CqMember, Set};
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// A poll set as C holds it.
#[repr(C)]
pub(crate) struct PollSet {
    c: abi::fid_poll,
    /// The members and their contexts.
    set: Arc<Set>,
}

// SAFETY: repr(C), first field `fid_poll`, whose first field is `struct fid`.
unsafe impl CObject for PollSet {
    const CLASS: usize = abi::FI_CLASS_POLL;
}

static FID_OPS: abi::fi_ops = fid::fi_ops!(close);

static POLL_OPS: abi::fi_ops_poll = abi::fi_ops_poll {
    size: std::mem::size_of::<abi::fi_ops_poll>(),
    poll: Some(poll),
    poll_add: Some(poll_add),
    poll_del: Some(poll_del),
};

/// `fi_poll_open` (`domain->ops->poll_open`): any flag is `-FI_EINVAL`.
pub(crate) unsafe extern "C" fn fi_poll_open(
    domain: *mut abi::fid_domain,
    attr: *mut abi::fi_poll_attr,
    pollset: *mut *mut abi::fid_poll,
) -> c_int {
    guard("fi_poll_open", EINVAL, || {
        // SAFETY: the caller's out-pointer and domain, class-checked.
        if let Err(e) = unsafe { fid::open_under::<Domain, _>(pollset, domain as *const c_void) } {
            return e;
        }
        // SAFETY: the caller's attributes, when given.
        if !attr.is_null() && unsafe { (*attr).flags } != 0 {
            return EINVAL;
        }
        let obj = PollSet {
            c: abi::fid_poll {
                fid: fid::fid(abi::FI_CLASS_POLL, std::ptr::null_mut(), &FID_OPS),
                ops: &POLL_OPS as *const _ as *mut _,
            },
            set: Arc::new(Set::poll_set()),
        };
        // SAFETY: checked by open_under above.
        unsafe { fid::hand_out(pollset, obj) }
    })
}

unsafe extern "C" fn close(f: *mut abi::fid) -> c_int {
    guard("fi_close", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        match unsafe { fid::reclaim::<PollSet>(f) } {
            Some(_) => 0,
            None => EINVAL,
        }
    })
}

/// The poll set behind `p`.
///
/// # Safety
/// `p` is NULL or a live fid.
unsafe fn get<'a>(p: *mut abi::fid_poll) -> Option<&'a PollSet> {
    // SAFETY: as the caller guarantees; class-checked.
    unsafe { fid::get::<PollSet>(p as *const c_void) }
}

/// `fi_poll_add`: a completion queue or a counter; `flags` are ignored, as
/// libfabric's are. Adding a member again changes nothing but its context.
unsafe extern "C" fn poll_add(pollset: *mut abi::fid_poll, event_fid: *mut abi::fid, _flags: u64) -> c_int {
    guard("fi_poll_add", EINVAL, || {
        // SAFETY: the caller's poll set, class-checked.
        let Some(ps) = (unsafe { get(pollset) }) else {
            return EINVAL;
        };
        let p = event_fid as *const c_void;
        // SAFETY: the caller's fid, class-checked (twice).
        if let Some(cq) = unsafe { fid::get::<Cq>(p) } {
            // SAFETY: a live CQ's `struct fid`.
            let context = unsafe { (*event_fid).context };
            return cq.sets.join(&ps.set, Arc::new(CqMember(Arc::clone(&cq.ops))), context);
        }
        // SAFETY: as above.
        if let Some(c) = unsafe { fid::get::<Cntr>(p) } {
            // SAFETY: a live counter's `struct fid`.
            let context = unsafe { (*event_fid).context };
            return c.sets.join(&ps.set, Arc::new(CntrMember::new(Arc::clone(&c.ops))), context);
        }
        EINVAL
    })
}

/// `fi_poll_del`: 0 also for an object that is not a member (as libfabric);
/// `-FI_EINVAL` for one that is neither a CQ nor a counter.
unsafe extern "C" fn poll_del(pollset: *mut abi::fid_poll, event_fid: *mut abi::fid, _flags: u64) -> c_int {
    guard("fi_poll_del", EINVAL, || {
        // SAFETY: the caller's poll set, class-checked.
        let Some(ps) = (unsafe { get(pollset) }) else {
            return EINVAL;
        };
        let p = event_fid as *const c_void;
        // SAFETY: the caller's fid, class-checked.
        let cq = unsafe { fid::get::<Cq>(p) };
        // SAFETY: as above.
        let cntr = unsafe { fid::get::<Cntr>(p) };
        let id = match (cq, cntr) {
            (Some(q), _) => q.ops.fid(),
            (None, Some(c)) => c.ops.fid(),
            (None, None) => return EINVAL,
        };
        let _ = ps.set.remove(id);
        0
    })
}

/// `fi_poll`: the contexts of up to `count` members with something to read,
/// into `context`; how many (0: none).
unsafe extern "C" fn poll(pollset: *mut abi::fid_poll, context: *mut *mut c_void, count: c_int) -> c_int {
    guard("fi_poll", EINVAL, || {
        // SAFETY: the caller's poll set, class-checked.
        let Some(ps) = (unsafe { get(pollset) }) else {
            return EINVAL;
        };
        if count < 0 || (count > 0 && context.is_null()) {
            return EINVAL;
        }
        let mut got = vec![0u64; (count as usize).min(ps.set.len())];
        match ps.set.poll(&mut got) {
            Ok(n) => {
                for (i, &c) in got[..n].iter().enumerate() {
                    // SAFETY: `context` holds `count` pointers and `n <= count`.
                    unsafe { *context.add(i) = c as *mut c_void };
                }
                n as c_int
            }
            Err(e) => fid::err(e),
        }
    })
}
