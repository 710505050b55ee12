//! Memory regions: registered memory that peers may read or write.

use crate::buf::Buf;
use crate::domain::Domain;
use crate::rma::Remote;
use fabric_core::fi_log;
use fabric_core::log::Level;
use fabric_core::prov::MrOps;
use fabric_core::{Error, MrAccess, MrMode, Result};
use std::fmt;
use std::sync::Arc;

/// A registered memory region (`fid_mr`). It owns the registered [`Buf`], so the
/// memory cannot be freed or reused while it is registered; [`MemoryRegion::close`]
/// deregisters it and gives the buffer back (dropping the region deregisters and
/// frees it).
///
/// While registered with remote access, peers may write the buffer at any time an
/// operation allows, so the safe API gives no `&[u8]` or `&mut [u8]` of it:
/// coordinating reads of registered memory with peers' writes belongs to the RMA
/// operations (their completions). [`MemoryRegion::remote`] says where peers
/// reach it; [`MemoryRegion::as_ptr`] gives the address for code that
/// coordinates by itself.
pub struct MemoryRegion {
    ops: Arc<dyn MrOps>,
    /// `Some` until closed.
    buf: Option<Buf>,
    base: BasePtr,
    len: usize,
    access: MrAccess,
    /// Whether peers address the region by virtual address (the domain's mr_mode
    /// has `FI_MR_VIRT_ADDR`) rather than by offset from its start.
    virt_addr: bool,
    _domain: Domain,
}

/// The registered address, as given to the provider.
struct BasePtr(*mut u8);

// SAFETY: the pointer is only an address handed out by `MemoryRegion::as_ptr`
// (an unsafe fn whose caller takes the aliasing duty); the region never
// dereferences it, and the `Buf` it points into is `Send + Sync`.
unsafe impl Send for BasePtr {}
// SAFETY: as above.
unsafe impl Sync for BasePtr {}

impl fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("key", &self.ops.key())
            .field("len", &self.len)
            .field("access", &self.access)
            .finish()
    }
}

impl MemoryRegion {
    pub(crate) fn register(domain: &Domain, mut buf: Buf, access: MrAccess, key: u64) -> Result<MemoryRegion> {
        let len = buf.capacity();
        let base = buf.raw_ptr();
        // SAFETY: `base..base+len` is the `Buf`'s heap allocation, which the region
        // owns from here until the provider's `close` has returned (or forever if
        // it fails, see `Drop`); moving the `Buf` does not move its bytes. The safe
        // API creates no reference to those bytes while they are registered.
        let ops = unsafe { domain.inner.ops.mr_reg(base, len, access, key)? };
        let virt_addr = domain.info().domain_attr.mr_mode.contains(MrMode::VIRT_ADDR);
        Ok(MemoryRegion { ops, buf: Some(buf), base: BasePtr(base), len, access, virt_addr, _domain: domain.clone() })
    }

    /// The key a peer uses to reach the region.
    pub fn key(&self) -> u64 {
        self.ops.key()
    }

    /// The local descriptor (`fi_mr_desc`), as an opaque value.
    pub fn desc(&self) -> u64 {
        self.ops.desc()
    }

    /// The access granted.
    pub fn access(&self) -> MrAccess {
        self.access
    }

    /// Bytes registered: the buffer's capacity.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where a peer reaches the start of the region, to send it (address and key)
    /// for its RMA and atomics: the region's virtual address when the domain's
    /// `mr_mode` has `FI_MR_VIRT_ADDR`, else offset 0, as libfabric's peers
    /// address a target region.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use fabric::{Buf, MrAccess};
    /// # fn f(domain: &fabric::Domain) -> fabric::Result<()> {
    /// let mr = domain.register(Buf::new(4096), MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE)?;
    /// let whole = mr.remote();
    /// let tail = mr.remote_at(4000, 96)?; // the last 96 bytes
    /// assert_eq!(tail.addr, whole.addr + 4000);
    /// assert!(mr.remote_at(4000, 97).is_err()); // past the end
    /// // Tell the peer `whole.addr` and `whole.key`; it writes with `Endpoint::write`.
    /// # Ok(())
    /// # }
    /// ```
    pub fn remote(&self) -> Remote {
        let addr = if self.virt_addr { self.base.0 as u64 } else { 0 };
        Remote { addr, key: self.key() }
    }

    /// Where a peer reaches the `len` bytes from byte `offset` of the region (see
    /// [`MemoryRegion::remote`]); `Err(Inval)` when they do not lie inside it.
    pub fn remote_at(&self, offset: usize, len: usize) -> Result<Remote> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => {
                let r = self.remote();
                Ok(Remote { addr: r.addr + offset as u64, ..r })
            }
            _ => Err(Error::Inval),
        }
    }

    /// Re-read the region's pages (`fi_mr_refresh`).
    pub fn refresh(&self) -> Result<()> {
        self.ops.refresh()
    }

    /// The start of the registered memory. To tell a peer where the region is, use
    /// [`MemoryRegion::remote`], which needs no `unsafe` and honours the domain's
    /// addressing.
    ///
    /// # Safety
    /// Calling this is harmless; it is `unsafe` because using the pointer is not:
    /// the provider may write the memory whenever a peer's operation allows (remote
    /// write access) or a local operation does, so any read or write through the
    /// pointer must be ordered with those accesses by the application (for example
    /// only after the completion of the operation that filled it, and never while
    /// a peer may be writing the bytes read), and it must not be used after the
    /// region is closed or dropped.
    pub unsafe fn as_ptr(&self) -> *mut u8 {
        self.base.0
    }

    /// Deregister and give the buffer back. If the provider fails to close the
    /// region, the error is returned and the buffer is leaked rather than freed,
    /// since the provider might still access it.
    pub fn close(mut self) -> Result<Buf> {
        match self.ops.close() {
            Ok(()) => Ok(self.buf.take().unwrap_or_default()),
            Err(e) => {
                self.leak(e);
                Err(e)
            }
        }
    }

    fn leak(&mut self, e: fabric_core::Error) {
        fi_log!(Level::Warn, "core", "mr", "closing memory region {:#x} failed ({}): buffer leaked", self.ops.key(), e);
        std::mem::forget(self.buf.take());
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        if self.buf.is_some() {
            if let Err(e) = self.ops.close() {
                self.leak(e);
            }
        }
    }
}

/// A buffer registered with a domain for the local end of its own sends and
/// receives (`fi_mr_reg` with `FI_SEND | FI_RECV`, what libfabric's applications
/// do where a domain's `mr_mode` has `FI_MR_LOCAL`). A provider that needs
/// registered memory (verbs) then finds the registration by the buffer's
/// address instead of copying the bytes through its bounce buffers or
/// registering the buffer for each operation; to the others it costs the
/// registration alone.
///
/// Peers get no access to it, so unlike a [`MemoryRegion`] its bytes can be
/// read and written (it dereferences to `[u8]`, the contents), and it is posted
/// as a [`Buf`] is: in [`OpBuffers::Registered`](crate::OpBuffers::Registered),
/// through [`Endpoint::sendmsg`](crate::Endpoint::sendmsg) and the other
/// `*msg` calls, and given back by the operation's completion
/// ([`OpBuffers::into_registered`](crate::OpBuffers::into_registered)).
/// Dropping it deregisters the buffer and frees it;
/// [`RegisteredBuf::into_buf`] deregisters it and gives the buffer back.
///
/// # Example
///
/// ```no_run
/// # use fabric::{Buf, FiAddr, OpBuffers, OpFlags, SendMsg};
/// # fn f(domain: &fabric::Domain, ep: &fabric::Endpoint, peer: FiAddr) -> fabric::Result<()> {
/// let mut tx = domain.register_buf(Buf::new(4096))?;
/// tx.set_len(5)?;
/// tx.copy_from_slice(b"hello");
/// ep.sendmsg(SendMsg::new(tx, peer, 7), OpFlags::empty()).map_err(|e| e.error)?;
/// // ... and the completion of context 7 gives it back:
/// # let c: fabric::Completion = unimplemented!();
/// let tx = c.buffers.into_registered().expect("the buffer");
/// # Ok(())
/// # }
/// ```
pub struct RegisteredBuf {
    /// Boxed, so that a registered buffer is one word: [`OpBuffers`](crate::OpBuffers),
    /// which operations and completions move, stays the size of a `Buf`.
    r: Box<Registration>,
}

/// What a [`RegisteredBuf`] holds.
struct Registration {
    // Invariant: `reg` (while `Some`) registers the whole allocation of `buf`
    // (from its start, for its capacity) with local access only. `buf` is never
    // replaced nor given out by value while registered (no `DerefMut` to the
    // `Buf` itself), and a `Buf`'s allocation neither moves nor grows, so the
    // registration covers exactly this memory until it is closed; it is closed
    // before the buffer is freed (`Drop`), or the buffer is leaked.
    /// The buffer.
    buf: Buf,
    /// Its registration; `None` once closed.
    reg: Option<Arc<dyn MrOps>>,
    /// The domain, kept open while the buffer is registered with it.
    _domain: Domain,
}

impl RegisteredBuf {
    pub(crate) fn register(domain: &Domain, mut buf: Buf) -> Result<RegisteredBuf> {
        /// Keys asked for where the domain does not choose them: a range of its
        /// own, one per registration, so that two never clash.
        static NEXT_KEY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0x7fab_0000_0000_0000);
        let key = if domain.info().domain_attr.mr_mode.contains(MrMode::PROV_KEY) {
            0
        } else {
            NEXT_KEY.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        };
        let (base, len) = (buf.raw_ptr(), buf.capacity());
        // SAFETY: `base..base+len` is the `Buf`'s allocation, which stays where it
        // is, and this value owns it, until the registration is closed (type
        // invariant); with local access only, the provider touches the memory
        // only within operations this buffer is posted to, which own it until
        // their completion.
        let reg = unsafe { domain.inner.ops.mr_reg(base, len, MrAccess::SEND | MrAccess::RECV, key)? };
        Ok(RegisteredBuf { r: Box::new(Registration { buf, reg: Some(reg), _domain: domain.clone() }) })
    }

    /// The buffer (length, capacity).
    pub fn buf(&self) -> &Buf {
        &self.r.buf
    }

    /// The capacity, all of it registered (the length, the contents', is that of
    /// the `[u8]` it dereferences to).
    pub fn capacity(&self) -> usize {
        self.r.buf.capacity()
    }

    /// Set the length ([`Buf::set_len`]).
    pub fn set_len(&mut self, n: usize) -> Result<()> {
        self.r.buf.set_len(n)
    }

    /// The local descriptor (`fi_mr_desc`), as an opaque value.
    pub fn desc(&self) -> u64 {
        self.r.reg.as_ref().map_or(0, |r| r.desc())
    }

    /// Deregister and give the buffer back. If the provider fails to close the
    /// registration, the error is returned and the buffer is leaked rather than
    /// freed, as [`MemoryRegion::close`] does.
    pub fn into_buf(mut self) -> Result<Buf> {
        self.deregister()?;
        Ok(std::mem::take(&mut self.r.buf))
    }

    /// The buffer, for the crate's posting and completing (which neither
    /// replaces it nor moves its allocation).
    pub(crate) fn buf_mut(&mut self) -> &mut Buf {
        &mut self.r.buf
    }

    fn deregister(&mut self) -> Result<()> {
        let Some(reg) = self.r.reg.take() else { return Ok(()) };
        reg.close().inspect_err(|&e| {
            fi_log!(
                Level::Warn,
                "core",
                "mr",
                "deregistering a {}-byte buffer failed ({}): leaked",
                self.capacity(),
                e
            );
            std::mem::forget(std::mem::take(&mut self.r.buf));
        })
    }
}

impl Drop for RegisteredBuf {
    fn drop(&mut self) {
        let _ = self.deregister();
    }
}

impl std::ops::Deref for RegisteredBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.r.buf
    }
}

impl std::ops::DerefMut for RegisteredBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.r.buf
    }
}

impl fmt::Debug for RegisteredBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredBuf").field("len", &self.len()).field("capacity", &self.capacity()).finish()
    }
}

/// Equal when the contents are.
impl PartialEq for RegisteredBuf {
    fn eq(&self, other: &RegisteredBuf) -> bool {
        self.r.buf == other.r.buf
    }
}

impl Eq for RegisteredBuf {}
