//! One-sided operations on an endpoint: RMA reads and writes, and atomics, with
//! the same buffer ownership as messages (the buffers go with the operation and
//! come back in its completion, on the transmit queue).

use crate::buf::{Buf, OpBuffers};
use crate::domain::Domain;
use crate::ep::{Endpoint, PostError, PostResult};
use fabric_core::prov::{AtomicDesc, IoVec, RmaOp};
use fabric_core::{AtomicKind, AtomicOp, Datatype, Error, FiAddr, OpFlags, Result, RmaIov};

/// Where an RMA goes in a peer's memory: an address (or offset, as the peer's
/// domain `mr_mode` says) in a region the peer registered, and that region's key.
/// The peer gets it from [`MemoryRegion::remote`](crate::MemoryRegion::remote)
/// or [`MemoryRegion::remote_at`](crate::MemoryRegion::remote_at).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remote {
    /// Address (or offset) in the peer's region.
    pub addr: u64,
    /// The region's key, as the peer's `MemoryRegion::key` gave it.
    pub key: u64,
}

/// A one-sided operation described in full (`struct fi_msg_rma`), for
/// [`Endpoint::writemsg`] and [`Endpoint::readmsg`].
#[derive(Debug)]
pub struct RmaMsg {
    /// Local buffers: written out in order, or filled in order.
    pub buffers: OpBuffers,
    /// The peer.
    pub addr: FiAddr,
    /// Where in the peer's memory.
    pub remote: Remote,
    /// Remote CQ data (writes with `OpFlags::REMOTE_CQ_DATA`).
    pub data: u64,
    /// The application's context.
    pub context: u64,
}

/// The flags the msg forms accept: remote CQ data (writes), and completion levels,
/// which tcp always meets at delivery (a write completes once the target has it).
const RMA_MSG_FLAGS: OpFlags = OpFlags::REMOTE_CQ_DATA
    .union(OpFlags::COMPLETION)
    .union(OpFlags::FENCE)
    .union(OpFlags::MORE)
    .union(OpFlags::INJECT_COMPLETE)
    .union(OpFlags::TRANSMIT_COMPLETE)
    .union(OpFlags::DELIVERY_COMPLETE);

impl Endpoint {
    /// Write with flags (`fi_writemsg`): `REMOTE_CQ_DATA` sends `msg.data` to the
    /// target's queue. Use [`Endpoint::inject_write`] for `FI_INJECT`; other flags
    /// are refused with `FI_EBADFLAGS` and the buffers given back.
    pub fn writemsg(&self, msg: RmaMsg, flags: OpFlags) -> PostResult {
        if !RMA_MSG_FLAGS.contains(flags) {
            return Err(PostError::new(Error::BadFlags, msg.buffers));
        }
        let data = flags.contains(OpFlags::REMOTE_CQ_DATA).then_some(msg.data);
        self.rma(false, msg.buffers, msg.addr, msg.remote, data, msg.context)
    }

    /// Read with flags (`fi_readmsg`); `REMOTE_CQ_DATA` does not apply to reads.
    pub fn readmsg(&self, msg: RmaMsg, flags: OpFlags) -> PostResult {
        if !RMA_MSG_FLAGS.contains(flags) || flags.contains(OpFlags::REMOTE_CQ_DATA) {
            return Err(PostError::new(Error::BadFlags, msg.buffers));
        }
        self.rma(true, msg.buffers, msg.addr, msg.remote, None, msg.context)
    }

    fn rma(
        &self,
        read: bool,
        buffers: OpBuffers,
        dest: FiAddr,
        at: Remote,
        data: Option<u64>,
        context: u64,
    ) -> PostResult {
        let ops = self.ops();
        let mut flags = OpFlags::COMPLETION;
        if data.is_some() {
            flags |= OpFlags::REMOTE_CQ_DATA;
        }
        self.post_with(false, false, false, buffers, context, |iov, key| {
            let rma = [RmaIov { addr: at.addr, len: IoVec::total(iov), key: at.key }];
            let op = RmaOp { iov, addr: dest, rma: &rma, context: key, user_context: context, data: data.unwrap_or(0) };
            // SAFETY: `post_with` hands IoVecs valid for reads and writes under the
            // provider contract until the completion for `key` (see there).
            unsafe {
                if read {
                    ops.post_read(&op, flags)
                } else {
                    ops.post_write(&op, flags)
                }
            }
        })
    }

    /// Write the contents of `buf` to a peer's registered memory (`fi_write`). The
    /// buffer comes back in the completion, which arrives once the target has the
    /// data (or an error such as `FI_EACCES` if the target refused the access).
    pub fn write(&self, buf: Buf, dest: FiAddr, at: Remote, context: u64) -> PostResult {
        self.rma(false, buf.into(), dest, at, None, context)
    }

    /// Write several buffers, one after the other, to one remote place (`fi_writev`).
    pub fn writev(&self, bufs: Vec<Buf>, dest: FiAddr, at: Remote, context: u64) -> PostResult {
        self.rma(false, OpBuffers::Many(bufs), dest, at, None, context)
    }

    /// Write with remote CQ data (`fi_writedata`): the target gets a completion
    /// carrying `data`, consuming one of its posted receives.
    pub fn writedata(&self, buf: Buf, data: u64, dest: FiAddr, at: Remote, context: u64) -> PostResult {
        self.rma(false, buf.into(), dest, at, Some(data), context)
    }

    /// Write a small buffer copied at once (`fi_inject_write`); no completion.
    pub fn inject_write(&self, data: &[u8], dest: FiAddr, at: Remote) -> Result<()> {
        let rma = [RmaIov { addr: at.addr, len: data.len(), key: at.key }];
        let op = RmaOp { iov: &[], addr: dest, rma: &rma, context: 0, user_context: 0, data: 0 };
        self.ops().inject_write(data, &op, OpFlags::INJECT)
    }

    /// Read `buf.len()` bytes of a peer's registered memory into `buf` (`fi_read`).
    pub fn read(&self, buf: Buf, src: FiAddr, at: Remote, context: u64) -> PostResult {
        self.rma(true, buf.into(), src, at, None, context)
    }

    /// Read into several buffers, in order, from one remote place (`fi_readv`).
    pub fn readv(&self, bufs: Vec<Buf>, src: FiAddr, at: Remote, context: u64) -> PostResult {
        self.rma(true, OpBuffers::Many(bufs), src, at, None, context)
    }

    #[allow(clippy::too_many_arguments)]
    fn atomic_common(
        &self,
        kind: AtomicKind,
        op: AtomicOp,
        datatype: Datatype,
        bufs: Vec<Buf>,
        dest: FiAddr,
        at: Remote,
        context: u64,
    ) -> PostResult {
        let size = datatype.size();
        let count = if op == AtomicOp::Read && kind != AtomicKind::Plain {
            bufs.last().map_or(0, |r| r.len() / size)
        } else {
            bufs.first().map_or(0, |b| b.len() / size)
        };
        if bufs
            .iter()
            .any(|b| b.len() % size != 0 || (b.len() / size != count && !(op == AtomicOp::Read && b.is_empty())))
        {
            return Err(PostError::new(Error::Inval, OpBuffers::Many(bufs)));
        }
        let ops = self.ops();
        self.post_with(false, false, false, OpBuffers::Many(bufs), context, |iov, key| {
            let null = IoVec { base: std::ptr::null_mut(), len: 0 };
            let (operand, compare, result) = match (kind, iov) {
                (AtomicKind::Plain, [o]) => (*o, null, null),
                (AtomicKind::Fetch, [o, r]) => (*o, null, *r),
                (AtomicKind::Compare, [o, c, r]) => (*o, *c, *r),
                _ => return Err(Error::Inval),
            };
            let desc = AtomicDesc {
                kind,
                op,
                datatype,
                count,
                operand,
                compare,
                result,
                addr: dest,
                rma: RmaIov { addr: at.addr, len: count * size, key: at.key },
                context: key,
                user_context: context,
            };
            // SAFETY: `post_with` hands IoVecs valid under the provider contract
            // until the completion for `key` (see there).
            unsafe { ops.post_atomic(&desc, OpFlags::COMPLETION) }
        })
    }

    /// An atomic on `operand.len() / size` elements of a peer's memory (`fi_atomic`).
    /// The buffer comes back in the completion.
    pub fn atomic(
        &self,
        operand: Buf,
        op: AtomicOp,
        datatype: Datatype,
        dest: FiAddr,
        at: Remote,
        context: u64,
    ) -> PostResult {
        self.atomic_common(AtomicKind::Plain, op, datatype, vec![operand], dest, at, context)
    }

    /// A fetching atomic (`fi_fetch_atomic`): `result` receives the prior values.
    /// For `FI_ATOMIC_READ` the operand may be empty and `result` sets the count.
    /// Both buffers come back in the completion, operand first.
    #[allow(clippy::too_many_arguments)]
    pub fn fetch_atomic(
        &self,
        operand: Buf,
        result: Buf,
        op: AtomicOp,
        datatype: Datatype,
        dest: FiAddr,
        at: Remote,
        context: u64,
    ) -> PostResult {
        self.atomic_common(AtomicKind::Fetch, op, datatype, vec![operand, result], dest, at, context)
    }

    /// A compare atomic (`fi_compare_atomic`): `result` receives the prior values.
    /// The buffers come back in the completion: operand, compare, result.
    #[allow(clippy::too_many_arguments)]
    pub fn compare_atomic(
        &self,
        operand: Buf,
        compare: Buf,
        result: Buf,
        op: AtomicOp,
        datatype: Datatype,
        dest: FiAddr,
        at: Remote,
        context: u64,
    ) -> PostResult {
        self.atomic_common(AtomicKind::Compare, op, datatype, vec![operand, compare, result], dest, at, context)
    }
}

impl Domain {
    /// The most elements one atomic of this kind, operation and datatype may carry
    /// (`fi_atomicvalid`, `fi_fetch_atomicvalid`, `fi_compare_atomicvalid`);
    /// `Err(OpNotSupp)` when the provider does not support it.
    pub fn atomic_valid(&self, op: AtomicOp, datatype: Datatype, kind: AtomicKind) -> Result<usize> {
        self.inner.ops.atomic_valid(op, datatype, kind)
    }
}
