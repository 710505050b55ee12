//! The tcp domain (one interface): completion queues, counters, address vectors,
//! memory registration and endpoints.

use crate::ep::TcpEp;
use crate::fabric::TcpFabric;
use fabric_core::prov::{AvOps, CntrOps, CqOps, DomainOps, EndpointOps, MrOps};
use fabric_core::Progress as ProgressModel;
use fabric_core::{Address, AvAttr, CqAttr, Info, MrAccess, Result};
use fabric_util::av::UtilAv;
use fabric_util::cntr::UtilCntr;
use fabric_util::cq::UtilCq;
use fabric_util::mr::MrRegistry;
use fabric_util::progress::{Progress, Waiter};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

/// Objects opened on a domain, by fid, held weakly so endpoints can find the
/// concrete object behind a `dyn` handle.
struct Registry<T> {
    items: Mutex<Vec<(u64, Weak<T>)>>,
}

impl<T> Registry<T> {
    fn new() -> Self {
        Registry { items: Mutex::new(Vec::new()) }
    }

    fn add(&self, fid: u64, obj: &Arc<T>) {
        let mut g = self.items.lock().unwrap_or_else(|e| e.into_inner());
        g.retain(|(_, w)| w.strong_count() > 0);
        g.push((fid, Arc::downgrade(obj)));
    }

    fn find(&self, fid: u64) -> Option<Arc<T>> {
        let g = self.items.lock().unwrap_or_else(|e| e.into_inner());
        g.iter().find(|(f, _)| *f == fid).and_then(|(_, w)| w.upgrade())
    }
}

/// A tcp domain.
pub(crate) struct TcpDomain {
    fid: u64,
    info: Info,
    fabric: Arc<TcpFabric>,
    cqs: Registry<UtilCq>,
    cntrs: Registry<UtilCntr>,
    avs: Registry<UtilAv>,
    mrs: Arc<MrRegistry>,
    /// With `FI_PROGRESS_AUTO`: the progress thread and what it waits on.
    auto: Option<AutoProgress>,
    /// Serializes the atomics applied to this domain's regions (every endpoint's).
    atomics: Mutex<()>,
    me: Weak<TcpDomain>,
}

/// The optional progress thread of a domain opened with `FI_PROGRESS_AUTO`: it
/// drives every endpoint of the domain, sleeping in epoll on their sockets when
/// there is nothing to do, so operations complete without the application reading
/// its queues.
struct AutoProgress {
    waiter: Arc<Waiter>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl AutoProgress {
    fn start() -> Result<AutoProgress> {
        let waiter = Arc::new(Waiter::new()?);
        let stop = Arc::new(AtomicBool::new(false));
        let (w, s) = (waiter.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("fabric-tcp-progress".into())
            .spawn(move || {
                while !s.load(Ordering::Acquire) {
                    let _ =
                        w.wait(Some(std::time::Duration::from_millis(100)), || s.load(Ordering::Acquire).then_some(()));
                }
            })
            .map_err(fabric_core::Error::from)?;
        Ok(AutoProgress { waiter, stop, thread: Mutex::new(Some(thread)) })
    }
}

impl Drop for AutoProgress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.waiter.signal();
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

fn accept_addr(a: &Address) -> bool {
    a.sockaddr().is_some()
}

impl TcpDomain {
    pub(crate) fn new(fabric: Arc<TcpFabric>, info: &Info) -> Result<Arc<TcpDomain>> {
        let auto = match info.domain_attr.data_progress {
            ProgressModel::Auto => Some(AutoProgress::start()?),
            _ => None,
        };
        Ok(Arc::new_cyclic(|me| TcpDomain {
            fid: fabric_core::prov::next_fid(),
            info: info.clone(),
            fabric,
            cqs: Registry::new(),
            cntrs: Registry::new(),
            avs: Registry::new(),
            mrs: MrRegistry::new(info.domain_attr.mr_mode),
            auto,
            atomics: Mutex::new(()),
            me: me.clone(),
        }))
    }

    pub(crate) fn fabric(&self) -> &Arc<TcpFabric> {
        &self.fabric
    }

    pub(crate) fn find_cq(&self, fid: u64) -> Option<Arc<UtilCq>> {
        self.cqs.find(fid)
    }

    pub(crate) fn find_cntr(&self, fid: u64) -> Option<Arc<UtilCntr>> {
        self.cntrs.find(fid)
    }

    pub(crate) fn find_av(&self, fid: u64) -> Option<Arc<UtilAv>> {
        self.avs.find(fid)
    }

    /// The domain's memory-key registry.
    pub(crate) fn mrs(&self) -> &MrRegistry {
        &self.mrs
    }

    /// Held while an atomic is applied to one of the domain's regions.
    pub(crate) fn atomic_lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.atomics.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl DomainOps for TcpDomain {
    fn fid(&self) -> u64 {
        self.fid
    }

    fn info(&self) -> &Info {
        &self.info
    }

    fn cq_open(&self, attr: &CqAttr) -> Result<Arc<dyn CqOps>> {
        let cq = UtilCq::new(attr)?;
        self.cqs.add(CqOps::fid(&*cq), &cq);
        Ok(cq)
    }

    fn cntr_open(&self) -> Result<Arc<dyn CntrOps>> {
        let c = UtilCntr::new()?;
        self.cntrs.add(CntrOps::fid(&*c), &c);
        Ok(c)
    }

    fn av_open(&self, attr: &AvAttr) -> Result<Arc<dyn AvOps>> {
        let av = UtilAv::new(attr, crate::NAME, accept_addr)?;
        self.avs.add(AvOps::fid(&*av), &av);
        Ok(av)
    }

    fn endpoint(&self, info: &Info) -> Result<Arc<dyn EndpointOps>> {
        let me = self.me.upgrade().expect("a domain method runs while the domain lives");
        let ep = TcpEp::new(me, info)?;
        if let Some(a) = &self.auto {
            let w: Weak<dyn Progress> = Arc::downgrade(&ep) as Weak<dyn Progress>;
            a.waiter.bind(w)?;
        }
        Ok(ep)
    }

    fn atomic_valid(
        &self,
        op: fabric_core::AtomicOp,
        dt: fabric_core::Datatype,
        kind: fabric_core::AtomicKind,
    ) -> Result<usize> {
        fabric_util::atomic::valid(op, dt, kind)
    }

    unsafe fn mr_reg(&self, base: *mut u8, len: usize, access: MrAccess, requested_key: u64) -> Result<Arc<dyn MrOps>> {
        // SAFETY: the caller upholds mr_reg's contract, which is register's.
        let mr = unsafe { self.mrs.register(base, len, access, requested_key)? };
        Ok(mr)
    }
}
