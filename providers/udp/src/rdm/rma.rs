//! RMA: writes and reads, posted to the engine as requests of at most
//! `RMA_CHUNK` bytes, answered by the target.

use super::{UdpRdmEp, MAX_MSG};
use fabric_core::prov::{IoVec, RmaOp};
use fabric_core::{Error, OpFlags, Result};
use fabric_util::reliable::Nanos;
use fabric_util::rx::IOV_LIMIT;

impl UdpRdmEp {
    pub(super) fn rma_common(&self, op: &RmaOp<'_>, flags: OpFlags, inject: Option<&[u8]>, read: bool) -> Result<()> {
        if op.rma.len() != 1 || op.iov.len() > IOV_LIMIT {
            return Err(Error::Inval);
        }
        let len = inject.map_or_else(|| IoVec::total(op.iov), |d| d.len());
        if op.rma[0].len != len {
            return Err(Error::Inval);
        }
        if len > MAX_MSG {
            return Err(Error::MsgSize);
        }
        let mut g = self.lock();
        let g = &mut *g;
        let now = Nanos::now();
        let peer = self.check_ready(g, inject.is_none(), op.addr, now)?;
        g.eng.post_rma(&g.b, peer, op, flags, read, inject)?;
        self.pump(g, now);
        Ok(())
    }
}
