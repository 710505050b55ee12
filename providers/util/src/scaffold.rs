//! What every provider repeats, written once: the fabric object ([`UtilFabric`]:
//! event queues by fid, domains and passive endpoints opened through the
//! provider's [`FabricKind`]), the `Provider` entry points ([`provider_ops!`](crate::provider_ops)),
//! the domain's delegation to its shared objects ([`domain_ops!`](crate::domain_ops)), and the
//! endpoint's binding of queues, counters, event queues and AVs ([`Bound`], as
//! mio's `IoSource` wraps every source once).
//!
//! A provider then writes what is its own: how it opens a domain, a passive
//! endpoint and an endpoint, and how it moves bytes.

use crate::bind::Bindings;
use crate::cntr::UtilCntr;
use crate::cq::UtilCq;
use crate::domain::DomainObjects;
use crate::eq::UtilEq;
use crate::progress::{FidRegistry, Progress};
use fabric_core::prov::{AvOps, CntrOps, CqOps, DomainOps, EqOps, FabricOps, PassiveEpOps};
use fabric_core::{BindFlags, EqAttr, Error, Info, Result};
use std::marker::PhantomData;
use std::sync::{Arc, Weak};

/// What a provider's fabric opens; the rest of the fabric is [`UtilFabric`]'s.
pub trait FabricKind: Send + Sync + Sized + 'static {
    /// Open a domain on `fabric`.
    fn domain(fabric: Arc<UtilFabric<Self>>, info: &Info) -> Result<Arc<dyn DomainOps>>;

    /// Open a passive endpoint on `fabric` (providers without connections: not
    /// supported).
    fn passive_ep(fabric: Arc<UtilFabric<Self>>, info: &Info) -> Result<Arc<dyn PassiveEpOps>> {
        let _ = (fabric, info);
        Err(Error::OpNotSupp)
    }
}

/// A provider's fabric: its event queues, held by fid so endpoints can bind them,
/// and what it opens, by the provider's [`FabricKind`] `K`.
pub struct UtilFabric<K> {
    fid: u64,
    /// Event queues opened here.
    eqs: FidRegistry<UtilEq>,
    /// Itself, for the domains and passive endpoints it opens to hold.
    me: Weak<UtilFabric<K>>,
    kind: PhantomData<fn() -> K>,
}

impl<K: FabricKind> UtilFabric<K> {
    /// A new fabric (`info`: the entry it was opened for).
    pub fn new(info: &Info) -> Arc<UtilFabric<K>> {
        let _ = info;
        Arc::new_cyclic(|me| UtilFabric {
            fid: fabric_core::prov::next_fid(),
            eqs: FidRegistry::new(),
            me: me.clone(),
            kind: PhantomData,
        })
    }

    /// The event queue with this fid, if it was opened on this fabric and lives.
    pub fn find_eq(&self, fid: u64) -> Option<Arc<UtilEq>> {
        self.eqs.find(fid)
    }

    fn arc(&self) -> Arc<UtilFabric<K>> {
        self.me.upgrade().expect("a fabric method runs while the fabric lives")
    }
}

impl<K: FabricKind> FabricOps for UtilFabric<K> {
    fn fid(&self) -> u64 {
        self.fid
    }

    fn domain(&self, info: &Info) -> Result<Arc<dyn DomainOps>> {
        K::domain(self.arc(), info)
    }

    fn eq_open(&self, attr: &EqAttr) -> Result<Arc<dyn EqOps>> {
        let eq = UtilEq::new(attr)?;
        self.eqs.add(EqOps::fid(&*eq), &eq);
        Ok(eq)
    }

    fn passive_ep(&self, info: &Info) -> Result<Arc<dyn PassiveEpOps>> {
        K::passive_ep(self.arc(), info)
    }
}

/// Implement `fabric_core::prov::Provider` for a provider's unit struct: its name,
/// version, parameters, `getinfo` and the fabric it opens.
///
/// ```text
/// fabric_util::provider_ops!(TcpProvider {
///     name: NAME, version: VERSION, params: params(), getinfo: attr::getinfo,
///     fabric: fabric::TcpFabric::new,
/// });
/// ```
#[macro_export]
macro_rules! provider_ops {
    ($ty:ty { name: $name:expr, version: $version:expr, params: $params:expr, getinfo: $getinfo:path, fabric: $fabric:path $(,)? }) => {
        impl fabric_core::prov::Provider for $ty {
            fn name(&self) -> &'static str {
                $name
            }

            fn version(&self) -> u32 {
                $version
            }

            fn params(&self) -> Vec<fabric_core::Param> {
                $params
            }

            fn getinfo(&self, hints: &fabric_core::Hints) -> fabric_core::Result<Vec<fabric_core::Info>> {
                $getinfo(hints)
            }

            fn fabric(
                &self,
                info: &fabric_core::Info,
            ) -> fabric_core::Result<std::sync::Arc<dyn fabric_core::prov::FabricOps>> {
                Ok($fabric(info))
            }
        }
    };
}

/// Implement `fabric_core::prov::DomainOps` for a provider's domain whose fields
/// `fid`, `info` and `objs` (a [`DomainObjects`]) hold what every domain has:
/// queues, counters, AVs and memory registration go to `objs`, atomics are
/// checked by [`crate::atomic::valid`]; the provider gives how an endpoint
/// opens (`|domain, info| expression`).
#[macro_export]
macro_rules! domain_ops {
    ($ty:ty, endpoint: |$d:ident, $info:ident| $endpoint:expr) => {
        impl fabric_core::prov::DomainOps for $ty {
            fn fid(&self) -> u64 {
                self.fid
            }

            fn info(&self) -> &fabric_core::Info {
                &self.info
            }

            fn cq_open(
                &self,
                attr: &fabric_core::CqAttr,
            ) -> fabric_core::Result<std::sync::Arc<dyn fabric_core::prov::CqOps>> {
                self.objs.cq_open(attr)
            }

            fn cntr_open(&self) -> fabric_core::Result<std::sync::Arc<dyn fabric_core::prov::CntrOps>> {
                self.objs.cntr_open()
            }

            fn av_open(
                &self,
                attr: &fabric_core::AvAttr,
            ) -> fabric_core::Result<std::sync::Arc<dyn fabric_core::prov::AvOps>> {
                self.objs.av_open(attr)
            }

            fn endpoint(
                &self,
                $info: &fabric_core::Info,
            ) -> fabric_core::Result<std::sync::Arc<dyn fabric_core::prov::EndpointOps>> {
                let $d = self;
                $endpoint
            }

            fn atomic_valid(
                &self,
                op: fabric_core::AtomicOp,
                dt: fabric_core::Datatype,
                kind: fabric_core::AtomicKind,
            ) -> fabric_core::Result<usize> {
                $crate::atomic::valid(op, dt, kind)
            }

            unsafe fn mr_reg(
                &self,
                base: *mut u8,
                len: usize,
                access: fabric_core::MrAccess,
                requested_key: u64,
            ) -> fabric_core::Result<std::sync::Arc<dyn fabric_core::prov::MrOps>> {
                // SAFETY: the caller upholds mr_reg's contract, which is DomainObjects::mr_reg's.
                unsafe { self.objs.mr_reg(base, len, access, requested_key) }
            }
        }
    };
}

/// An endpoint as the shared binding code sees it: where its domain's objects
/// and its fabric's event queues are found, its bindings, and itself as the
/// progress its queues drive.
pub trait Bound {
    /// The domain's queues, counters, AVs.
    fn objs(&self) -> &DomainObjects;
    /// The fabric's event queue with this fid.
    fn find_eq(&self, fid: u64) -> Option<Arc<UtilEq>>;
    /// Run `f` on the endpoint's bindings (under its lock).
    fn with_bindings<T>(&self, f: impl FnOnce(&mut Bindings) -> T) -> T;
    /// The endpoint, as what a bound queue drives when it is read or waited on.
    fn as_progress(&self) -> Weak<dyn Progress>;
}

/// Implement [`Bound`] for an endpoint type with the fields and methods every
/// provider's endpoint has: `domain` (whose `objs` are its [`DomainObjects`] and
/// whose `fabric()` finds event queues), `lock()` (its state, with the
/// [`Bindings`] in field `b`) and `weak_progress()`.
#[macro_export]
macro_rules! bound {
    ($ty:ty) => {
        impl $crate::scaffold::Bound for $ty {
            fn objs(&self) -> &$crate::domain::DomainObjects {
                &self.domain.objs
            }

            fn find_eq(&self, fid: u64) -> Option<std::sync::Arc<$crate::eq::UtilEq>> {
                self.domain.fabric().find_eq(fid)
            }

            fn with_bindings<T>(&self, f: impl FnOnce(&mut $crate::bind::Bindings) -> T) -> T {
                f(&mut self.lock().b)
            }

            fn as_progress(&self) -> std::sync::Weak<dyn $crate::progress::Progress> {
                self.weak_progress()
            }
        }
    };
}

/// The tail of an endpoint's `EndpointOps` that every provider writes the same:
/// `cancel` (of posted receives, `FI_ENOENT` when none), `set_min_multi_recv`,
/// `set_rx_cq_data` (on the receive engine at the field path given, in the state
/// `lock()` guards, next to the bindings `b`) and `close` (`close_locked`). Use it
/// inside `impl EndpointOps`: `fabric_util::endpoint_tail!(eng.rx);`.
#[macro_export]
macro_rules! endpoint_tail {
    ($($rx:ident).+) => {
        fn cancel(&self, user_context: u64) -> fabric_core::Result<()> {
            let mut g = self.lock();
            let g = &mut *g;
            if g.$($rx).+.cancel(&g.b, user_context) {
                Ok(())
            } else {
                Err(fabric_core::Error::NoEnt)
            }
        }

        fn set_min_multi_recv(&self, bytes: usize) -> fabric_core::Result<()> {
            self.lock().$($rx).+.set_min_multi_recv(bytes);
            Ok(())
        }

        fn set_rx_cq_data(&self, takes_recv: bool) -> fabric_core::Result<()> {
            self.lock().$($rx).+.set_rma_data_takes_recv(takes_recv);
            Ok(())
        }

        fn close(&self) -> fabric_core::Result<()> {
            let cqs = {
                let mut g = self.lock();
                self.close_locked(&mut g);
                [g.b.tx_cq.clone(), g.b.rx_cq.clone()]
            };
            // Outside the lock: the queues let go of the endpoint they hold
            // since `scaffold::bind_cq`.
            $crate::scaffold::unbind_cqs(self, &cqs);
            Ok(())
        }
    };
}

/// An endpoint type that closes (`close_locked`, under `lock()`) when dropped.
#[macro_export]
macro_rules! close_on_drop {
    ($ty:ty) => {
        impl Drop for $ty {
            fn drop(&mut self) {
                let mut g = self.lock();
                self.close_locked(&mut g);
            }
        }
    };
}

/// `fi_ep_bind` of a completion queue: found among the domain's, recorded
/// with its flags, and driving the endpoint's progress. Returns the queue.
///
/// The queue holds the endpoint ([`UtilCq::bind_owned`]) until the endpoint's
/// close ([`endpoint_tail!`]'s, through [`unbind_cqs`]) unbinds it, so that a
/// read reaches the endpoint's progress without upgrading a `Weak`. A queue
/// this binding replaces in both directions lets go of the endpoint at once.
pub fn bind_cq<E: Bound + Progress>(ep: &E, cq: &Arc<dyn CqOps>, flags: BindFlags) -> Result<Arc<UtilCq>> {
    let ucq = ep.objs().find_cq(cq.fid()).ok_or(Error::Domain)?;
    let me = ep.as_progress().upgrade().ok_or(Error::OpBadState)?;
    let (old, now) = ep.with_bindings(|b| {
        let old = [b.tx_cq.clone(), b.rx_cq.clone()];
        b.set_cq(&ucq, flags).map(|()| (old, [b.tx_cq.clone(), b.rx_cq.clone()]))
    })?;
    ucq.bind_owned(me)?;
    // A queue no longer bound in either direction must not keep the endpoint.
    let replaced = old.map(|o| o.filter(|o| !now.iter().flatten().any(|n| Arc::ptr_eq(n, o))));
    unbind_cqs(ep, &replaced);
    Ok(ucq)
}

/// The endpoint `ep` is closing (or no longer uses these queues): each of
/// `cqs` lets go of it ([`UtilCq::unbind_addr`], by the endpoint's address).
pub fn unbind_cqs<E: Progress>(ep: &E, cqs: &[Option<Arc<UtilCq>>]) {
    let addr = ep as *const E as *const ();
    let fd = ep.wait_fd();
    for cq in cqs.iter().flatten() {
        cq.unbind_addr(addr, fd);
    }
}

/// `fi_ep_bind` of a counter.
pub fn bind_cntr<E: Bound>(ep: &E, cntr: &Arc<dyn CntrOps>, flags: BindFlags) -> Result<Arc<UtilCntr>> {
    let c = ep.objs().find_cntr(cntr.fid()).ok_or(Error::Domain)?;
    ep.with_bindings(|b| b.set_cntr(&c, flags));
    c.bind(ep.as_progress())?;
    Ok(c)
}

/// `fi_ep_bind` of an event queue.
pub fn bind_eq<E: Bound>(ep: &E, eq: &Arc<dyn EqOps>) -> Result<()> {
    let e = ep.find_eq(eq.fid()).ok_or(Error::Domain)?;
    ep.with_bindings(|b| b.eq = Some(e.clone()));
    e.bind(ep.as_progress())
}

/// `fi_ep_bind` of an address vector.
pub fn bind_av<E: Bound>(ep: &E, av: &Arc<dyn AvOps>) -> Result<()> {
    let a = ep.objs().find_av(av.fid()).ok_or(Error::Domain)?;
    ep.with_bindings(|b| b.av = Some(a));
    Ok(())
}
