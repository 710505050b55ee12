//! The memory-key registry of a domain: which keys a peer may use, for which bytes
//! and which accesses.
//!
//! A provider registers memory through [`MrRegistry::register`] and checks every
//! RMA or atomic request that arrives from a peer with [`MrRegistry::lookup`]: the
//! peer controls the key, the address and the length, so every check is made with
//! overflow-safe arithmetic and every failure is the same `FI_EACCES` (a peer learns
//! nothing about which part was wrong).
//!
//! # Keys
//!
//! * With `FI_MR_PROV_KEY` in the registry's mode, the registry chooses the key:
//!   64 bits from the kernel's random source (`getrandom(2)`), never 0 and never
//!   `FI_KEY_NOTAVAIL` (`u64::MAX`), drawn again on a collision. Keys are
//!   unpredictable, so a peer cannot guess its way into a region it was not told
//!   about. The application's requested key is ignored.
//! * Without it, the application's requested key is used as is; a key that is
//!   already registered (and open) fails with `FI_ENOKEY`, as libfabric's util MR
//!   map does.
//!
//! # Addresses
//!
//! With `FI_MR_VIRT_ADDR` a peer's address is the virtual address of the target
//! bytes in this process; without it, an offset from the start of the region.
//!
//! # Lifetime
//!
//! The registry holds regions weakly: a region leaves it when it is closed or when
//! its last handle is dropped, whichever comes first, so a forgotten region never
//! stays reachable to peers. [`MrRegistry::lookup`] hands out a strong handle along
//! with the pointer, so the region's record outlives an access in progress; closing
//! makes every later lookup fail, but does not wait for accesses that have already
//! looked the key up. A provider that copies into registered memory on another
//! thread than the one that closes must therefore finish (or fence) its accesses
//! before telling the application the region is closed.

use fabric_core::prov::MrOps;
use fabric_core::{Error, MrAccess, MrMode, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};

/// How many random keys to draw before giving up (a collision among 64-bit random
/// keys is already vanishingly rare; the bound only guards a broken random source).
const KEY_TRIES: usize = 64;

/// The registered regions of one domain, by key. See the module docs.
#[derive(Debug)]
pub struct MrRegistry {
    /// The domain's registration mode (`PROV_KEY`, `VIRT_ADDR` matter here), fixed.
    mode: MrMode,
    /// Every open region by its key. An entry whose region is being dropped may
    /// linger, dead, until that region's `Drop` removes it; a dead entry counts as
    /// absent everywhere.
    regions: RwLock<HashMap<u64, Weak<UtilMr>>>,
}

/// A registered memory region.
#[derive(Debug)]
pub struct UtilMr {
    /// The registry the region is in (or was, once closed).
    registry: Arc<MrRegistry>,
    /// The key, fixed. Unique among the registry's open regions.
    key: u64,
    /// Start of the registered bytes, fixed. Non-null unless `len` is 0, and
    /// `base + len` does not wrap.
    base: *mut u8,
    /// Number of registered bytes, fixed.
    len: usize,
    /// What the region may be used for, fixed.
    access: MrAccess,
    /// `true` until `close`; once `false`, lookups of the key fail even if they
    /// found the region before it left the registry.
    open: AtomicBool,
    /// Held (shared) by every copy into or out of the region through
    /// [`MrRegistry::copy_in`] / [`MrRegistry::copy_out`], and (exclusive) by
    /// `close`: so `close` returns only once no copy is in progress, and after it
    /// no copy starts (they check `open` under the lock). The application may free
    /// the memory as soon as `close` returns.
    access_lock: std::sync::RwLock<()>,
}

// SAFETY: a `UtilMr` only records where registered memory is; it never reads or
// writes it. Registration (`MrRegistry::register`, an `unsafe fn`) makes the caller
// promise that the bytes stay valid until the region is closed and that the
// provider may access them from any thread while an operation allows it; whoever
// dereferences the pointer does so under that contract.
unsafe impl Send for UtilMr {}
// SAFETY: as above; every field other than the pointer is immutable or atomic, and
// sharing the description of a buffer is not access to it.
unsafe impl Sync for UtilMr {}

impl MrRegistry {
    /// An empty registry for a domain with registration mode `mode`.
    pub fn new(mode: MrMode) -> Arc<MrRegistry> {
        Arc::new(MrRegistry { mode, regions: RwLock::new(HashMap::new()) })
    }

    fn read(&self) -> RwLockReadGuard<'_, HashMap<u64, Weak<UtilMr>>> {
        // The map is consistent whenever the lock is released, even by a panic.
        self.regions.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashMap<u64, Weak<UtilMr>>> {
        self.regions.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The registration mode.
    pub fn mode(&self) -> MrMode {
        self.mode
    }

    /// Number of open regions.
    pub fn len(&self) -> usize {
        self.read().values().filter(|w| w.strong_count() > 0).count()
    }

    /// Whether no region is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Register `base..base+len` for `access`, under the provider's key
    /// (`FI_MR_PROV_KEY`) or `requested_key`.
    ///
    /// Errors: `FI_EINVAL` for a null `base` with a non-zero `len` or a range that
    /// wraps the address space; `FI_ENOKEY` for a requested key already in use (or,
    /// with provider keys, if no free key could be drawn); the system's error if the
    /// random source fails.
    ///
    /// # Safety
    /// `base..base+len` must stay valid (allocated, not moved) until the region is
    /// closed or dropped, and while it is registered the provider may read or write
    /// it, from any thread, whenever an operation that [`MrRegistry::lookup`]
    /// allows arrives: the caller must not hold Rust references to those bytes that
    /// assume exclusivity meanwhile.
    pub unsafe fn register(
        self: &Arc<Self>,
        base: *mut u8,
        len: usize,
        access: MrAccess,
        requested_key: u64,
    ) -> Result<Arc<UtilMr>> {
        if (base.is_null() && len > 0) || (base as usize).checked_add(len).is_none() {
            return Err(Error::Inval);
        }
        let mut map = self.write();
        let taken = |map: &HashMap<u64, Weak<UtilMr>>, k: u64| map.get(&k).is_some_and(|w| w.strong_count() > 0);
        let key = if self.mode.contains(MrMode::PROV_KEY) {
            let mut found = None;
            for _ in 0..KEY_TRIES {
                let k = crate::random::u64()?;
                if k != 0 && k != u64::MAX && !taken(&map, k) {
                    found = Some(k);
                    break;
                }
            }
            found.ok_or(Error::NoKey)?
        } else if taken(&map, requested_key) {
            return Err(Error::NoKey);
        } else {
            requested_key
        };
        let mr = Arc::new(UtilMr {
            registry: Arc::clone(self),
            key,
            base,
            len,
            access,
            open: AtomicBool::new(true),
            access_lock: std::sync::RwLock::new(()),
        });
        // A dead entry under the same key belongs to a region being dropped; its
        // `Drop` sees the entry is no longer its own and leaves it.
        map.insert(key, Arc::downgrade(&mr));
        Ok(mr)
    }

    /// Copy `bytes` into the region behind `key` at `addr` (a peer's RMA write or
    /// atomic result), after the same checks as [`MrRegistry::lookup`] with
    /// `need`; every failure is `Err(Access)` and leaves memory untouched. Safe to
    /// call while the application may close the region: the copy holds the
    /// region's access lock, which `close` waits for.
    pub fn copy_in(&self, key: u64, addr: u64, bytes: &[u8], need: MrAccess) -> Result<()> {
        self.with_region(key, addr, bytes.len(), need, |p| {
            // SAFETY: `p..p+len` lies inside an open region (checked under the
            // access lock, which `close` waits for), valid for writes under the
            // registration contract; `bytes` is our own buffer, distinct from it.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) }
        })
    }

    /// Copy bytes of the region behind `key` at `addr` into `out` (a peer's RMA
    /// read), as [`MrRegistry::copy_in`].
    pub fn copy_out(&self, key: u64, addr: u64, out: &mut [u8], need: MrAccess) -> Result<()> {
        self.with_region(key, addr, out.len(), need, |p| {
            // SAFETY: as in `copy_in`, for reads; `out` is distinct from the region.
            unsafe { std::ptr::copy_nonoverlapping(p as *const u8, out.as_mut_ptr(), out.len()) }
        })
    }

    /// Run `f` on the checked start of `len` bytes at `addr` in region `key`,
    /// holding the region's access lock (so `close` waits for `f`).
    pub fn with_region<T>(
        &self,
        key: u64,
        addr: u64,
        len: usize,
        need: MrAccess,
        f: impl FnOnce(*mut u8) -> T,
    ) -> Result<T> {
        let (p, mr) = self.lookup(key, addr, len, need)?;
        let _shared = mr.access_lock.read().unwrap_or_else(|e| e.into_inner());
        if !mr.open.load(Ordering::Acquire) {
            return Err(Error::Access);
        }
        Ok(f(p))
    }

    /// Check a peer's access to `len` bytes at `addr` (a virtual address with
    /// `FI_MR_VIRT_ADDR`, else an offset into the region) under `key`, needing
    /// `need`. On success, the local address of the first byte and the region
    /// (which the caller holds while it accesses the bytes).
    ///
    /// Every failure (no such key, a closed region, bytes outside the region,
    /// access not granted) is `FI_EACCES`. A zero-length access is allowed anywhere
    /// from the start of the region to its end inclusive.
    pub fn lookup(&self, key: u64, addr: u64, len: usize, need: MrAccess) -> Result<(*mut u8, Arc<UtilMr>)> {
        // Upgrade outside the lock: if the region is dropped meanwhile, its `Drop`
        // takes the lock itself.
        let weak = self.read().get(&key).cloned().ok_or(Error::Access)?;
        let mr = weak.upgrade().ok_or(Error::Access)?;
        if !mr.open.load(Ordering::Acquire) || !mr.access.contains(need) {
            return Err(Error::Access);
        }
        let off = if self.mode.contains(MrMode::VIRT_ADDR) {
            addr.checked_sub(mr.base as usize as u64).ok_or(Error::Access)?
        } else {
            addr
        };
        let size = u64::try_from(mr.len).map_err(|_| Error::Access)?;
        let want = u64::try_from(len).map_err(|_| Error::Access)?;
        // off <= size, then want <= size - off: no arithmetic can overflow.
        if off > size || want > size - off {
            return Err(Error::Access);
        }
        // `off <= mr.len`, so it fits in usize and the result is within the region
        // or one past its end; `wrapping_add` needs no unsafe for that.
        let p = mr.base.wrapping_add(off as usize);
        Ok((p, mr))
    }
}

impl UtilMr {
    /// What the region may be used for.
    pub fn access(&self) -> MrAccess {
        self.access
    }

    /// Number of registered bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Start of the registered bytes.
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    /// Whether the region is still open (not closed).
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Take the region out of the registry, if it is still the one under its key.
    fn unregister(&self) {
        let mut map = self.registry.write();
        if map.get(&self.key).is_some_and(|w| std::ptr::eq(w.as_ptr(), self)) {
            map.remove(&self.key);
        }
    }
}

impl MrOps for UtilMr {
    fn key(&self) -> u64 {
        self.key
    }

    /// The key doubles as the local descriptor.
    fn desc(&self) -> u64 {
        self.key
    }

    /// Nothing to re-read: the registry keeps no page state.
    fn refresh(&self) -> Result<()> {
        Ok(())
    }

    /// Close: later lookups of the key fail, and the key may be registered again.
    /// Closing twice is harmless.
    fn close(&self) -> Result<()> {
        // Wait for copies in progress; none starts after this (they check `open`).
        let _excl = self.access_lock.write().unwrap_or_else(|e| e.into_inner());
        if self.open.swap(false, Ordering::AcqRel) {
            self.unregister();
        }
        Ok(())
    }
}

impl Drop for UtilMr {
    fn drop(&mut self) {
        if *self.open.get_mut() {
            self.unregister();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    const RW: MrAccess = MrAccess::REMOTE_READ.union(MrAccess::REMOTE_WRITE);

    fn reg(r: &Arc<MrRegistry>, buf: &mut [u8], access: MrAccess, key: u64) -> Result<Arc<UtilMr>> {
        // SAFETY: every test keeps `buf` alive and untouched while the region is used.
        unsafe { r.register(buf.as_mut_ptr(), buf.len(), access, key) }
    }

    #[test]
    fn provider_keys_are_unpredictable() {
        let r = MrRegistry::new(MrMode::PROV_KEY);
        let mut buf = [0u8; 8];
        let mut keys = HashSet::new();
        let mut regions = Vec::new();
        for _ in 0..2000 {
            let mr = reg(&r, &mut buf, RW, 7).unwrap();
            assert_ne!(mr.key(), 0);
            assert_ne!(mr.key(), u64::MAX);
            assert_eq!(mr.desc(), mr.key());
            assert!(keys.insert(mr.key()), "duplicate key");
            regions.push(mr);
        }
        assert_eq!(r.len(), 2000);
        // Not a counter: consecutive keys are not close to each other, and the bits
        // are roughly balanced.
        let near = regions.windows(2).filter(|w| w[0].key().abs_diff(w[1].key()) < 1 << 32).count();
        assert!(near < 5, "{near} near-consecutive keys");
        let ones: u32 = regions.iter().map(|m| m.key().count_ones()).sum();
        assert!((60_000..68_000).contains(&ones), "bit balance {ones}");
        assert!(regions.iter().all(|m| m.key() != 7), "the requested key is ignored");
    }

    #[test]
    fn requested_keys_and_duplicates() {
        let r = MrRegistry::new(MrMode::empty());
        let mut a = [0u8; 8];
        let mut b = [0u8; 8];
        let ma = reg(&r, &mut a, RW, 0).unwrap();
        assert_eq!(ma.key(), 0);
        assert_eq!(reg(&r, &mut b, RW, 0).unwrap_err(), Error::NoKey);
        let mb = reg(&r, &mut b, RW, 1).unwrap();
        assert_eq!(mb.key(), 1);
        ma.close().unwrap();
        let ma2 = reg(&r, &mut a, RW, 0).unwrap();
        assert_eq!(ma2.key(), 0, "a closed key may be registered again");
        // The first region's late drop leaves the new registration in place.
        drop(ma);
        assert!(r.lookup(0, 0, 8, RW).is_ok());
    }

    #[test]
    fn bounds_in_offset_mode() {
        let r = MrRegistry::new(MrMode::empty());
        let mut buf = [0u8; 64];
        let base = buf.as_mut_ptr();
        let mr = reg(&r, &mut buf, RW, 5).unwrap();
        let ok = |addr: u64, len: usize| r.lookup(5, addr, len, MrAccess::REMOTE_WRITE).map(|(p, _)| p);
        assert_eq!(ok(0, 64), Ok(base));
        assert_eq!(ok(10, 54), Ok(base.wrapping_add(10)));
        assert_eq!(ok(64, 0), Ok(base.wrapping_add(64)), "zero-length at the end");
        assert_eq!(ok(0, 0), Ok(base));
        for (addr, len) in [
            (1, 64),
            (0, 65),
            (64, 1),
            (65, 0),
            (u64::MAX, 0),
            (u64::MAX, 1),
            (0, usize::MAX),
            (1, usize::MAX),
            (u64::MAX, usize::MAX),
            (63, usize::MAX),
        ] {
            assert_eq!(ok(addr, len), Err(Error::Access), "addr {addr} len {len}");
        }
        assert_eq!(r.lookup(6, 0, 1, MrAccess::REMOTE_WRITE).unwrap_err(), Error::Access, "unknown key");
        assert_eq!(mr.len(), 64);
        assert_eq!(mr.base(), base);
        assert!(!mr.is_empty());
    }

    #[test]
    fn bounds_in_virtual_address_mode() {
        let r = MrRegistry::new(MrMode::VIRT_ADDR | MrMode::PROV_KEY);
        let mut buf = vec![0u8; 100];
        let base = buf.as_mut_ptr();
        let va = base as usize as u64;
        let mr = reg(&r, &mut buf, RW, 0).unwrap();
        let k = mr.key();
        let ok = |addr: u64, len: usize| r.lookup(k, addr, len, MrAccess::REMOTE_READ).map(|(p, _)| p);
        assert_eq!(ok(va, 100), Ok(base));
        assert_eq!(ok(va + 99, 1), Ok(base.wrapping_add(99)));
        assert_eq!(ok(va + 100, 0), Ok(base.wrapping_add(100)));
        for (addr, len) in [
            (va - 1, 1),
            (va - 1, 0),
            (va, 101),
            (va + 100, 1),
            (va + 101, 0),
            (0, 1),
            (0, 0),
            (u64::MAX, 0),
            (u64::MAX, usize::MAX),
            (va, usize::MAX),
            (va + 1, usize::MAX),
        ] {
            assert_eq!(ok(addr, len), Err(Error::Access), "addr {addr:#x} len {len}");
        }
        // The pointer is usable: write through it and see the bytes.
        let (p, _mr) = r.lookup(k, va + 3, 2, MrAccess::REMOTE_WRITE).unwrap();
        // SAFETY: `p..p+2` lies inside `buf`, which is alive and not otherwise borrowed.
        unsafe { std::ptr::copy_nonoverlapping([7u8, 9].as_ptr(), p, 2) };
        assert_eq!(&buf[2..6], &[0, 7, 9, 0]);
    }

    #[test]
    fn access_flags() {
        let r = MrRegistry::new(MrMode::empty());
        let mut buf = [0u8; 16];
        let mr = reg(&r, &mut buf, MrAccess::REMOTE_READ, 1).unwrap();
        assert_eq!(mr.access(), MrAccess::REMOTE_READ);
        assert!(r.lookup(1, 0, 16, MrAccess::REMOTE_READ).is_ok());
        assert_eq!(r.lookup(1, 0, 16, MrAccess::REMOTE_WRITE).unwrap_err(), Error::Access);
        assert_eq!(r.lookup(1, 0, 16, RW).unwrap_err(), Error::Access, "all of `need` is required");
        assert!(r.lookup(1, 0, 16, MrAccess::empty()).is_ok());
        let local = reg(&r, &mut buf, MrAccess::SEND | MrAccess::RECV, 2).unwrap();
        assert_eq!(r.lookup(2, 0, 1, MrAccess::REMOTE_READ).unwrap_err(), Error::Access);
        assert!(r.lookup(2, 0, 1, MrAccess::SEND).is_ok());
        drop(local);
    }

    #[test]
    fn closed_and_dropped_regions_are_unreachable() {
        let r = MrRegistry::new(MrMode::empty());
        let mut buf = [0u8; 16];
        let mr = reg(&r, &mut buf, RW, 3).unwrap();
        // An access in progress holds the region...
        let (_, held) = r.lookup(3, 0, 1, RW).unwrap();
        mr.refresh().unwrap();
        mr.close().unwrap();
        assert!(!mr.is_open());
        // ...but after close no lookup succeeds, even through a held handle's key.
        assert_eq!(r.lookup(3, 0, 1, RW).unwrap_err(), Error::Access);
        mr.close().unwrap();
        drop(held);
        assert!(r.is_empty());

        let mr = reg(&r, &mut buf, RW, 4).unwrap();
        drop(mr);
        assert_eq!(r.lookup(4, 0, 1, RW).unwrap_err(), Error::Access, "dropped without close");
        assert!(r.is_empty());
        assert!(r.read().is_empty(), "the entry is gone");
    }

    #[test]
    fn invalid_ranges_are_refused() {
        let r = MrRegistry::new(MrMode::empty());
        // SAFETY: these registrations fail before anything is recorded.
        unsafe {
            assert_eq!(r.register(std::ptr::null_mut(), 1, RW, 0).unwrap_err(), Error::Inval);
            let top = usize::MAX as *mut u8;
            assert_eq!(r.register(top, 2, RW, 0).unwrap_err(), Error::Inval);
        }
        // A zero-length region: only a zero-length access at offset 0.
        let mut empty: [u8; 0] = [];
        let mr = reg(&r, &mut empty, RW, 9).unwrap();
        assert!(mr.is_empty());
        assert!(r.lookup(9, 0, 0, RW).is_ok());
        assert_eq!(r.lookup(9, 0, 1, RW).unwrap_err(), Error::Access);
        assert_eq!(r.lookup(9, 1, 0, RW).unwrap_err(), Error::Access);
        assert_eq!(r.mode(), MrMode::empty());
    }

    #[test]
    fn concurrent_lookups_and_closes() {
        let r = MrRegistry::new(MrMode::PROV_KEY);
        let mut buf = vec![0u8; 32];
        let mr = reg(&r, &mut buf, RW, 0).unwrap();
        let k = mr.key();
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    for _ in 0..2000 {
                        assert!(r.lookup(k, 0, 32, RW).is_ok());
                    }
                });
            }
            s.spawn(|| {
                let mut other = vec![0u8; 8];
                for _ in 0..500 {
                    let m = reg(&r, &mut other, RW, 0).unwrap();
                    if m.key() % 2 == 0 {
                        m.close().unwrap();
                    }
                }
            });
        });
        assert_eq!(r.len(), 1);
    }
}
