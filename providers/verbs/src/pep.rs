//! The passive endpoint: listens (librdmacm) for MSG connection requests and
//! reports each on the event queue with the peer's connection data; `reject`
//! answers one with reject data, and an endpoint opened with the request's info
//! takes its identifier over for `accept`.

use crate::ep::{private_data, strip_private, CM_DATA_MAX, PD_MSG_DIRECT};
use crate::fabric::VerbsFabric;
use crate::ibv::{CmId, EventChannel};
use crate::NAME;
use fabric_core::log::Level;
use fabric_core::prov::{EqOps, PassiveEpOps};
use fabric_core::{fi_log, Address, ConnHandle, EqEvent, Error, Info, Result};
use fabric_util::eq::UtilEq;
use fabric_util::progress::Progress;
use fabric_util::verbs_wire::PD_MSG;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, Weak};

/// A pending connection request, carried in the `Info::handle` of the event.
pub(crate) struct ConnReq {
    id: Mutex<Option<CmId>>,
    /// The active side offers the direct data path (`ep/direct.rs`).
    pub(crate) direct: bool,
}

impl ConnReq {
    /// Take the request's identifier (once).
    pub(crate) fn take(&self) -> Option<CmId> {
        self.id.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

struct Inner {
    listener: Option<CmId>,
    name: Option<SocketAddr>,
    eq: Option<Arc<UtilEq>>,
    closed: bool,
}

/// A verbs passive endpoint.
pub(crate) struct VerbsPep {
    fid: u64,
    info: Info,
    fabric: Arc<VerbsFabric>,
    inner: Mutex<Inner>,
    // Declared after `inner`: the listener is destroyed before its channel.
    cm: EventChannel,
    me: Weak<VerbsPep>,
}

impl VerbsPep {
    pub(crate) fn new(fabric: Arc<VerbsFabric>, info: &Info) -> Result<Arc<VerbsPep>> {
        let cm = EventChannel::new()?;
        let name = info.src_addr.as_ref().and_then(|a| a.sockaddr());
        Ok(Arc::new_cyclic(|me| VerbsPep {
            fid: fabric_core::prov::next_fid(),
            info: info.clone(),
            fabric,
            inner: Mutex::new(Inner { listener: None, name, eq: None, closed: false }),
            cm,
            me: me.clone(),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Progress for VerbsPep {
    fn progress(&self) {
        let g = self.lock();
        while let Some(ev) = self.cm.next() {
            if ev.kind != rdma_sys::rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST {
                continue;
            }
            // SAFETY: a connection request's new identifier is ours to own.
            let id = unsafe { CmId::from_request(&ev) };
            let (data, direct) = match strip_private(&ev.data) {
                Some((k @ (PD_MSG | PD_MSG_DIRECT), d)) if !g.closed => (d.to_vec(), k == PD_MSG_DIRECT),
                _ => {
                    let _ = id.reject(&[]);
                    continue;
                }
            };
            let Some(eq) = g.eq.clone() else {
                let _ = id.reject(&[]);
                continue;
            };
            let mut info = self.info.clone();
            info.dest_addr = id.peer_addr().map(Address::from);
            info.src_addr = id.local_addr().map(Address::from);
            info.handle = Some(ConnHandle(Arc::new(ConnReq { id: Mutex::new(Some(id)), direct })));
            eq.push(EqEvent::ConnReq { fid: self.fid, info: Box::new(info), data });
        }
    }

    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.cm.fd())
    }
}

impl PassiveEpOps for VerbsPep {
    fn fid(&self) -> u64 {
        self.fid
    }

    fn bind_eq(&self, eq: &Arc<dyn EqOps>) -> Result<()> {
        let e = self.fabric.find_eq(eq.fid()).ok_or(Error::Domain)?;
        self.lock().eq = Some(e.clone());
        e.bind(self.me.clone() as Weak<dyn Progress>)
    }

    fn listen(&self) -> Result<()> {
        let mut g = self.lock();
        if g.closed {
            return Err(Error::OpBadState);
        }
        if g.listener.is_some() {
            return Ok(());
        }
        if g.eq.is_none() {
            return Err(Error::NoEq);
        }
        let want = g.name.unwrap_or_else(|| SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), 0));
        let id = listening(&self.cm, want)?;
        g.name = id.local_addr().or(g.name);
        g.listener = Some(id);
        Ok(())
    }

    fn getname(&self) -> Result<Address> {
        self.lock().name.map(Address::from).ok_or(Error::NotConn)
    }

    fn setname(&self, addr: &Address) -> Result<()> {
        let mut g = self.lock();
        if g.listener.is_some() {
            return Err(Error::OpBadState);
        }
        g.name = Some(addr.sockaddr().ok_or(Error::Inval)?);
        Ok(())
    }

    fn reject(&self, handle: &ConnHandle, data: &[u8]) -> Result<()> {
        if data.len() > CM_DATA_MAX {
            return Err(Error::Inval);
        }
        let req = handle.0.downcast_ref::<ConnReq>().ok_or(Error::Inval)?;
        let id = req.take().ok_or(Error::Inval)?;
        id.reject(&private_data(1, data)).map_err(|e| {
            fi_log!(Level::Info, NAME, "ep_ctrl", "rdma_reject failed: {e}");
            Error::from(e)
        })
    }

    fn cm_data_size(&self) -> usize {
        CM_DATA_MAX
    }

    fn close(&self) -> Result<()> {
        let mut g = self.lock();
        g.closed = true;
        g.listener = None;
        Ok(())
    }
}

/// A listening identifier on `ch` at `want` (a passive endpoint's, or an RDM
/// endpoint's), its failures and retries logged.
pub(crate) fn listening(ch: &EventChannel, want: SocketAddr) -> Result<CmId> {
    CmId::listening(ch, want, 1024, |port, e| {
        let port = port.map_or_else(|| "?".to_string(), |p| p.to_string());
        fi_log!(Level::Info, NAME, "ep_ctrl", "listening at {port} failed ({e}): trying another port");
    })
    .map_err(|e| {
        fi_log!(Level::Warn, NAME, "ep_ctrl", "listening at {want} failed: {e}");
        Error::from(e)
    })
}
