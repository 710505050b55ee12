//! Multicast groups (`fi_join`, `struct fid_mc`, `fi_mc_addr`): an endpoint
//! whose provider offers `FI_MULTICAST` (udp's DGRAM) joins a group at its
//! socket address; the group is a `fid_mc` whose `fi_addr` names it as the
//! destination of sends posted with `FI_MULTICAST` (or by an endpoint whose
//! `tx_attr.op_flags` has it), and whose `fi_close` leaves it. As libfabric's
//! udp, the join completes at once and reports `FI_JOIN_COMPLETE` (an
//! `fi_eq_entry` naming the `fid_mc` and its context) on the endpoint's event
//! queue when one is bound.

use crate::ep::Ep;
use crate::fid::{self, CObject, EINVAL};
use crate::{abi, exports::guard};
use fabric_core::prov::McOps;
use fabric_core::EqEvent;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// A joined group as C holds it.
#[repr(C)]
pub(crate) struct Mc {
    c: abi::fid_mc,
    /// The provider's membership.
    ops: Arc<dyn McOps>,
}

// SAFETY: repr(C), first field `fid_mc`, whose first field is `struct fid`.
unsafe impl CObject for Mc {
    const CLASS: usize = abi::FI_CLASS_MC;
}

static FID_OPS: abi::fi_ops = fid::fi_ops!(close, fid::no_bind, fid::no_control);

/// `fi_join`: join the group at `addr` (a `struct sockaddr_in`); `flags` may
/// name the directions (`FI_SEND`, `FI_RECV`), which changes nothing here.
/// `-FI_EINVAL` for a NULL argument or other flags; what the provider refuses
/// (`-FI_EOPNOTSUPP` without multicast, `-FI_EINVAL` for an address that is no
/// group) as it answers.
pub(crate) unsafe extern "C" fn join(
    ep: *mut abi::fid_ep,
    addr: *const c_void,
    flags: u64,
    mc: *mut *mut abi::fid_mc,
    context: *mut c_void,
) -> c_int {
    guard("fi_join", EINVAL, || {
        // SAFETY: the caller's out-pointer and endpoint, class-checked.
        let e = match unsafe { fid::open_under::<Ep, _>(mc, ep as *const c_void) } {
            Ok(e) => e,
            Err(err) => return err,
        };
        if addr.is_null() || flags & !(abi::FI_SEND | abi::FI_RECV) != 0 {
            return EINVAL;
        }
        // SAFETY: the caller's address, read by its family (a sockaddr).
        let group = match unsafe { crate::addr::from_c(addr as *const u8, usize::MAX) } {
            Ok((a, _)) => a,
            Err(err) => return fid::err(err),
        };
        let ops = match e.ops.join(&group) {
            Ok(m) => m,
            Err(err) => return fid::err(err),
        };
        let obj =
            Mc { c: abi::fid_mc { fid: fid::fid(abi::FI_CLASS_MC, context, &FID_OPS), fi_addr: ops.addr().0 }, ops };
        // SAFETY: `mc` was checked by open_under.
        let r = unsafe { fid::hand_out(mc, obj) };
        // SAFETY: just handed out: a live fid_mc.
        let c_fid = unsafe { *mc } as *mut abi::fid;
        if let Some(eq) = e.eq() {
            let entry = abi::fi_eq_entry { fid: c_fid, context, data: 0 };
            // SAFETY: a plain C struct read as its bytes.
            let bytes = unsafe {
                std::slice::from_raw_parts(
                    &entry as *const abi::fi_eq_entry as *const u8,
                    std::mem::size_of::<abi::fi_eq_entry>(),
                )
            };
            if let Err(err) = eq.write(EqEvent::User { event: abi::FI_JOIN_COMPLETE, data: bytes.to_vec() }) {
                fabric_core::fi_log!(
                    fabric_core::log::Level::Warn,
                    "capi",
                    "ep_ctrl",
                    "fi_join: FI_JOIN_COMPLETE not queued: {err}"
                );
            }
        }
        r
    })
}

/// `fi_close` on a group: leave it.
unsafe extern "C" fn close(f: *mut abi::fid) -> c_int {
    guard("fi_close", EINVAL, || {
        // SAFETY: the caller's fid, class-checked.
        let Some(m) = (unsafe { fid::get::<Mc>(f as *const c_void) }) else {
            return EINVAL;
        };
        if let Err(e) = m.ops.close() {
            return fid::err(e);
        }
        // SAFETY: checked above.
        drop(unsafe { fid::reclaim::<Mc>(f) });
        0
    })
}
