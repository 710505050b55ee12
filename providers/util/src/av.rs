//! Address vectors for any provider: peer addresses to compact [`FiAddr`] handles.
//!
//! # Handles
//!
//! * [`AvType::Table`]: handles are consecutive indices `0, 1, 2, ...` in insertion
//!   order, across calls. A removed index is never reused, so a stale handle never
//!   reaches a different peer; the table keeps one (empty) slot per removed index.
//! * [`AvType::Map`] (and [`AvType::Unspec`], which behaves as a map): handles are
//!   opaque, `(generation << 32) | slot`. A removed slot is reused, but with the next
//!   generation, so the old handle stays invalid. A slot whose generation would wrap
//!   is retired instead of reused. A handle is never `FI_ADDR_UNSPEC`.
//!
//! The same address may be inserted more than once; each insert gives a handle of
//! its own, and every such handle works until it is removed. [`UtilAv::find`] (the
//! reverse lookup that reports the source of received messages) gives the oldest
//! live handle of an address.
//!
//! # Errors
//!
//! * An insert with any address the provider refuses (`accept` returns `false`)
//!   fails with `FI_EINVAL` and inserts nothing.
//! * `lookup` and `remove` of a handle that was never given out (out of range,
//!   malformed, `FI_ADDR_UNSPEC`) fail with `FI_EINVAL`; of a handle that was given
//!   out and has since been removed, with `FI_ENOENT` (as libfabric's util AV does
//!   for a removed entry). A `remove` with any such handle removes nothing; a handle
//!   named twice in one `remove` is removed once.
//! * An AV map that has used 2^32 - 1 slots fails inserts with `FI_ENOSPC`.
//!
//! # Concurrency and caching
//!
//! The table sits behind an `RwLock`: lookups from many endpoints proceed in
//! parallel; inserts and removes are exclusive. [`UtilAv::version`] changes on every
//! insert or remove that changes the table, so an endpoint can cache what it looked
//! up (a connection per handle, say) and revalidate with one atomic load. Read the
//! version *before* looking up (or use [`UtilAv::get_versioned`]): then a cached
//! entry is at worst refreshed once too often, never kept stale.

use fabric_core::prov::{next_fid, AvOps};
use fabric_core::{fi_log, log::Level};
use fabric_core::{Address, AvAttr, AvType, Error, FiAddr, Result};
use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The most slots reserved up front from `AvAttr::count` (a hint, which may be
/// anything); the table grows past it on demand.
const MAX_PREALLOC: usize = 1 << 16;

/// The most slots an AV map uses: slot indices fit in the handle's low 32 bits,
/// and the all-ones handle stays `FI_ADDR_UNSPEC`.
const MAP_MAX_SLOTS: usize = u32::MAX as usize;

/// One slot of the table.
#[derive(Debug)]
struct Slot {
    /// The address, `None` iff the slot is vacant (removed, or never used).
    addr: Option<Address>,
    /// Map only: the generation in the high half of the slot's current (or next)
    /// handle. Bumped on removal, except past `u32::MAX`. Always 0 for a table.
    gen: u32,
    /// Map only: the slot was vacated with generation `u32::MAX` and is never used
    /// again (so no handle is ever given out twice).
    retired: bool,
}

/// The live handles of one address, oldest first.
#[derive(Debug)]
struct Handles {
    /// The oldest live handle: what [`UtilAv::find`] gives.
    first: FiAddr,
    /// Younger live handles of the same address, oldest first (usually empty, and
    /// then unallocated).
    more: Vec<FiAddr>,
}

/// The state behind the lock.
#[derive(Debug)]
struct Inner {
    /// Slot `i` holds the address of table index `i` / of map slot `i`.
    slots: Vec<Slot>,
    /// Map only: vacant slots that may be reused (their `gen` already bumped).
    /// Always empty for a table.
    free: Vec<u32>,
    /// Reverse index: every live address maps to all its live handles, and nothing
    /// else is in it.
    rev: HashMap<Address, Handles>,
    /// Number of live handles (occupied slots).
    live: usize,
}

/// Why a handle does not name a live entry.
fn handle_error(never_issued: bool) -> Error {
    if never_issued {
        Error::Inval
    } else {
        Error::NoEnt
    }
}

/// An address vector shared by a provider's endpoints. See the module docs.
#[derive(Debug)]
pub struct UtilAv {
    /// Object id, fixed.
    fid: u64,
    /// The owning provider's name, for logs.
    prov: &'static str,
    /// `Table` or `Map` (`Unspec` was resolved to `Map`), fixed.
    av_type: AvType,
    /// Whether the provider takes an address, fixed.
    accept: fn(&Address) -> bool,
    /// The table.
    inner: RwLock<Inner>,
    /// Incremented (under the write lock) by every insert or remove that changed
    /// the table.
    version: AtomicU64,
}

impl UtilAv {
    /// Open an address vector for provider `prov`, which takes the addresses for
    /// which `accept` returns `true`. `attr.count` is a sizing hint.
    pub fn new(attr: &AvAttr, prov: &'static str, accept: fn(&Address) -> bool) -> Result<Arc<UtilAv>> {
        let av_type = match attr.av_type {
            AvType::Table => AvType::Table,
            _ => AvType::Map,
        };
        let n = attr.count.min(MAX_PREALLOC);
        let inner = Inner { slots: Vec::with_capacity(n), free: Vec::new(), rev: HashMap::with_capacity(n), live: 0 };
        Ok(Arc::new(UtilAv {
            fid: next_fid(),
            prov,
            av_type,
            accept,
            inner: RwLock::new(inner),
            version: AtomicU64::new(0),
        }))
    }

    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        // A panic elsewhere while holding the lock leaves the table consistent (every
        // mutation below is completed before anything can panic), so poisoning is
        // ignored.
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// `Table` or `Map` (an AV opened as `Unspec` is a map).
    pub fn av_type(&self) -> AvType {
        self.av_type
    }

    /// The table's version: changes on every insert or remove that changed it.
    #[inline]
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Number of live handles.
    pub fn len(&self) -> usize {
        self.read().live
    }

    /// Whether there are no live handles.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The slot index of a handle, or the error for it.
    fn slot_of(&self, inner: &Inner, a: FiAddr) -> Result<usize> {
        if a.is_unspec() {
            return Err(Error::Inval);
        }
        match self.av_type {
            AvType::Table => {
                let i = usize::try_from(a.0).map_err(|_| Error::Inval)?;
                match inner.slots.get(i) {
                    Some(s) if s.addr.is_some() => Ok(i),
                    Some(_) => Err(Error::NoEnt),
                    None => Err(Error::Inval),
                }
            }
            _ => {
                let i = (a.0 & u64::from(u32::MAX)) as usize;
                let gen = (a.0 >> 32) as u32;
                match inner.slots.get(i) {
                    Some(s) if s.gen == gen && s.addr.is_some() => Ok(i),
                    // Generations below the slot's current one were given out and
                    // removed; so was the current one of a retired slot.
                    Some(s) => Err(handle_error(if s.retired { gen > s.gen } else { gen >= s.gen })),
                    None => Err(Error::Inval),
                }
            }
        }
    }

    /// The handle of occupied slot `i`.
    fn handle(&self, inner: &Inner, i: usize) -> FiAddr {
        match self.av_type {
            AvType::Table => FiAddr(i as u64),
            _ => FiAddr((u64::from(inner.slots[i].gen) << 32) | i as u64),
        }
    }

    /// The address behind a live handle (a clone: free for socket addresses).
    pub fn get(&self, a: FiAddr) -> Option<Address> {
        self.with_addr(a, Address::clone)
    }

    /// The address behind a live handle together with the version it was read at,
    /// consistent with each other.
    pub fn get_versioned(&self, a: FiAddr) -> (Option<Address>, u64) {
        let g = self.read();
        let v = self.version.load(Ordering::Acquire);
        (self.slot_of(&g, a).ok().and_then(|i| g.slots[i].addr.clone()), v)
    }

    /// Apply `f` to the address behind a live handle, under the read lock, without
    /// cloning it (string addresses would allocate).
    pub fn with_addr<T>(&self, a: FiAddr, f: impl FnOnce(&Address) -> T) -> Option<T> {
        let g = self.read();
        let i = self.slot_of(&g, a).ok()?;
        g.slots[i].addr.as_ref().map(f)
    }

    /// The oldest live handle of an address (reverse lookup, to report the source
    /// of a received message); `None` when the address is not in the AV (report
    /// `FI_ADDR_NOTAVAIL`).
    pub fn find(&self, addr: &Address) -> Option<FiAddr> {
        self.read().rev.get(addr).map(|h| h.first)
    }

    fn do_insert(&self, addrs: &[Address]) -> Result<Vec<FiAddr>> {
        if let Some(bad) = addrs.iter().find(|a| !(self.accept)(a)) {
            fi_log!(Level::Warn, self.prov, "av", "address {} ({}) refused by the provider", bad, bad.format().name());
            return Err(Error::Inval);
        }
        let mut out = Vec::with_capacity(addrs.len());
        if addrs.is_empty() {
            return Ok(out);
        }
        let mut g = self.write();
        let inner = &mut *g;
        if self.av_type != AvType::Table {
            let fresh = addrs.len().saturating_sub(inner.free.len());
            if inner.slots.len().saturating_add(fresh) > MAP_MAX_SLOTS {
                fi_log!(Level::Warn, self.prov, "av", "address vector full");
                return Err(Error::NoSpc);
            }
        }
        for a in addrs {
            let reuse = if self.av_type == AvType::Table { None } else { inner.free.pop() };
            let i = match reuse {
                Some(i) => {
                    let i = i as usize;
                    inner.slots[i].addr = Some(a.clone());
                    i
                }
                None => {
                    inner.slots.push(Slot { addr: Some(a.clone()), gen: 0, retired: false });
                    inner.slots.len() - 1
                }
            };
            let h = self.handle(inner, i);
            match inner.rev.get_mut(a) {
                Some(hs) => hs.more.push(h),
                None => {
                    inner.rev.insert(a.clone(), Handles { first: h, more: Vec::new() });
                }
            }
            inner.live += 1;
            out.push(h);
        }
        self.version.fetch_add(1, Ordering::AcqRel);
        Ok(out)
    }

    fn do_remove(&self, handles: &[FiAddr]) -> Result<()> {
        if handles.is_empty() {
            return Ok(());
        }
        let mut g = self.write();
        let inner = &mut *g;
        // Validate everything first: all or nothing.
        for &h in handles {
            self.slot_of(inner, h)?;
        }
        for &h in handles {
            // A handle named twice was removed the first time: skip it.
            let Ok(i) = self.slot_of(inner, h) else { continue };
            let slot = &mut inner.slots[i];
            let Some(addr) = slot.addr.take() else { continue };
            if self.av_type != AvType::Table {
                if let Some(g) = slot.gen.checked_add(1) {
                    slot.gen = g;
                    // `i` < MAP_MAX_SLOTS, so it fits.
                    inner.free.push(i as u32);
                } else {
                    // Reusing the slot would wrap the generation and revive old
                    // handles: retire it.
                    slot.retired = true;
                }
            }
            if let Some(hs) = inner.rev.get_mut(&addr) {
                if hs.first == h {
                    if hs.more.is_empty() {
                        inner.rev.remove(&addr);
                    } else {
                        hs.first = hs.more.remove(0);
                    }
                } else {
                    hs.more.retain(|&x| x != h);
                }
            }
            inner.live -= 1;
        }
        self.version.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}

impl AvOps for UtilAv {
    fn fid(&self) -> u64 {
        self.fid
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn insert(&self, addrs: &[Address]) -> Result<Vec<FiAddr>> {
        self.do_insert(addrs)
    }

    fn remove(&self, addrs: &[FiAddr]) -> Result<()> {
        self.do_remove(addrs)
    }

    fn lookup(&self, addr: FiAddr) -> Result<Address> {
        let g = self.read();
        let i = self.slot_of(&g, addr)?;
        g.slots[i].addr.clone().ok_or(Error::NoEnt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn sa(port: u16) -> Address {
        Address::Sockaddr(SocketAddr::from(([127, 0, 0, 1], port)))
    }

    fn only_sockaddr(a: &Address) -> bool {
        a.sockaddr().is_some()
    }

    fn open(t: AvType) -> Arc<UtilAv> {
        UtilAv::new(&AvAttr { av_type: t, count: 4 }, "test", only_sockaddr).unwrap()
    }

    #[test]
    fn table_indices_are_consecutive_and_not_reused() {
        let av = open(AvType::Table);
        assert_eq!(av.av_type(), AvType::Table);
        let h = av.insert(&[sa(1), sa(2), sa(3)]).unwrap();
        assert_eq!(h, [FiAddr(0), FiAddr(1), FiAddr(2)]);
        assert_eq!(av.insert(&[sa(4)]).unwrap(), [FiAddr(3)]);
        av.remove(&[FiAddr(1)]).unwrap();
        assert_eq!(av.insert(&[sa(5)]).unwrap(), [FiAddr(4)]);
        assert_eq!(av.lookup(FiAddr(1)), Err(Error::NoEnt));
        assert_eq!(av.lookup(FiAddr(2)), Ok(sa(3)));
        assert_eq!(av.lookup(FiAddr(5)), Err(Error::Inval));
        assert_eq!(av.lookup(FiAddr::UNSPEC), Err(Error::Inval));
        assert_eq!(av.get(FiAddr(4)), Some(sa(5)));
        assert_eq!(av.get(FiAddr(1)), None);
        assert_eq!(av.len(), 4);
    }

    #[test]
    fn map_handles_change_when_a_slot_is_reused() {
        for t in [AvType::Map, AvType::Unspec] {
            let av = open(t);
            assert_eq!(av.av_type(), AvType::Map);
            let a = av.insert(&[sa(1)]).unwrap()[0];
            av.remove(&[a]).unwrap();
            let b = av.insert(&[sa(2)]).unwrap()[0];
            assert_ne!(a, b);
            assert_eq!(a.0 & 0xFFFF_FFFF, b.0 & 0xFFFF_FFFF, "slot reused");
            assert_eq!(av.lookup(a), Err(Error::NoEnt));
            assert_eq!(av.remove(&[a]), Err(Error::NoEnt));
            assert_eq!(av.lookup(b), Ok(sa(2)));
            // Malformed: a generation from the future, a slot never used.
            assert_eq!(av.lookup(FiAddr(b.0 + (1 << 32))), Err(Error::Inval));
            assert_eq!(av.lookup(FiAddr(b.0 + 7)), Err(Error::Inval));
            assert!(av.with_addr(b, |x| x.sockaddr().unwrap().port()) == Some(2));
        }
    }

    #[test]
    fn refused_address_inserts_nothing() {
        let av = open(AvType::Table);
        let v = av.version();
        let r = av.insert(&[sa(1), Address::Str("fi_shm://1/0".into())]);
        assert_eq!(r, Err(Error::Inval));
        assert!(av.is_empty());
        assert_eq!(av.find(&sa(1)), None);
        assert_eq!(av.version(), v);
        assert_eq!(av.insert(&[sa(1)]).unwrap(), [FiAddr(0)], "nothing was consumed");
    }

    #[test]
    fn reverse_lookup_and_duplicates() {
        let av = open(AvType::Table);
        let h = av.insert(&[sa(9), sa(8), sa(9)]).unwrap();
        assert_eq!(av.find(&sa(9)), Some(h[0]));
        assert_eq!(av.find(&sa(8)), Some(h[1]));
        assert_eq!(av.lookup(h[0]), Ok(sa(9)));
        assert_eq!(av.lookup(h[2]), Ok(sa(9)));
        av.remove(&[h[0]]).unwrap();
        assert_eq!(av.find(&sa(9)), Some(h[2]), "the other handle still works");
        av.remove(&[h[2]]).unwrap();
        assert_eq!(av.find(&sa(9)), None);
        assert_eq!(av.find(&sa(7)), None);
    }

    #[test]
    fn remove_is_all_or_nothing() {
        let av = open(AvType::Map);
        let h = av.insert(&[sa(1), sa(2)]).unwrap();
        let v = av.version();
        assert_eq!(av.remove(&[h[0], FiAddr(12345)]), Err(Error::Inval));
        assert_eq!(av.version(), v);
        assert_eq!(av.len(), 2);
        av.remove(&[h[0], h[0]]).unwrap();
        assert_eq!(av.len(), 1);
        assert!(av.version() > v);
        av.remove(&[]).unwrap();
    }

    #[test]
    fn version_tracks_changes() {
        let av = open(AvType::Map);
        let v0 = av.version();
        let h = av.insert(&[sa(1)]).unwrap();
        let v1 = av.version();
        assert_ne!(v0, v1);
        assert_eq!(av.get_versioned(h[0]), (Some(sa(1)), v1));
        av.insert(&[]).unwrap();
        assert_eq!(av.version(), v1, "an empty insert changes nothing");
        av.remove(&h).unwrap();
        assert_ne!(av.version(), v1);
        assert_eq!(av.get_versioned(h[0]).0, None);
    }

    #[test]
    fn retired_generation_is_never_reused() {
        let av = open(AvType::Map);
        let a = av.insert(&[sa(1)]).unwrap()[0];
        let a_last = FiAddr((u64::from(u32::MAX) << 32) | (a.0 & 0xFFFF_FFFF));
        {
            // Pretend the slot went through 2^32 - 1 reuses.
            let mut g = av.write();
            g.slots[0].gen = u32::MAX;
            g.rev.get_mut(&sa(1)).unwrap().first = a_last;
        }
        assert_eq!(av.lookup(a_last), Ok(sa(1)));
        av.remove(&[a_last]).unwrap();
        let b = av.insert(&[sa(2)]).unwrap()[0];
        assert_ne!(b.0 & 0xFFFF_FFFF, 0, "the slot was retired");
        assert_eq!(av.lookup(a_last), Err(Error::NoEnt));
        assert_eq!(av.lookup(a), Err(Error::NoEnt));
        assert_eq!(av.find(&sa(1)), None);
    }

    #[test]
    fn huge_count_hint_does_not_allocate_it() {
        let av = UtilAv::new(&AvAttr { av_type: AvType::Table, count: usize::MAX }, "test", only_sockaddr).unwrap();
        assert_eq!(av.insert(&[sa(1)]).unwrap(), [FiAddr(0)]);
        assert_eq!(av.straddr(&sa(1)), "fi_sockaddr_in://127.0.0.1:1");
        assert!(av.as_any().downcast_ref::<UtilAv>().is_some());
        assert_ne!(av.fid(), 0);
    }

    #[test]
    fn concurrent_readers_and_writers() {
        let av = open(AvType::Map);
        let h = av.insert(&[sa(1)]).unwrap()[0];
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    for _ in 0..2000 {
                        assert_eq!(av.get(h), Some(sa(1)));
                    }
                });
            }
            s.spawn(|| {
                for p in 0..500 {
                    let x = av.insert(&[sa(100 + p)]).unwrap();
                    av.remove(&x).unwrap();
                }
            });
        });
        assert_eq!(av.len(), 1);
    }
}
