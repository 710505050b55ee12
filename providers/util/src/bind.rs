//! What an endpoint is bound to, and how it reports an operation's outcome there.
//!
//! Every provider reports completions the same way: an entry (or error entry) on the
//! bound completion queue, and one tick (or error tick) of the bound counter.

use crate::av::UtilAv;
use crate::cntr::UtilCntr;
use crate::cq::UtilCq;
use crate::eq::UtilEq;
use fabric_core::{BindFlags, CqEntry, CqErrEntry, Error};
use std::sync::Arc;

/// The queues, counters and address vector an endpoint is bound to.
#[derive(Default)]
pub struct Bindings {
    /// Completions of transmit operations (sends, RMA, atomics).
    pub tx_cq: Option<Arc<UtilCq>>,
    /// Completions of receives.
    pub rx_cq: Option<Arc<UtilCq>>,
    /// Counts transmit completions.
    pub tx_cntr: Option<Arc<UtilCntr>>,
    /// Counts receive completions.
    pub rx_cntr: Option<Arc<UtilCntr>>,
    /// Connection events (MSG endpoints).
    pub eq: Option<Arc<UtilEq>>,
    /// Peer addresses (RDM endpoints).
    pub av: Option<Arc<UtilAv>>,
    /// Counts remote writes (and atomics) into our regions (`FI_RMA_EVENT`).
    pub rma_write_cntr: Option<Arc<UtilCntr>>,
    /// Counts remote reads of our regions.
    pub rma_read_cntr: Option<Arc<UtilCntr>>,
}

impl Bindings {
    /// Bind a completion queue for the directions `flags` names (`FI_TRANSMIT`,
    /// `FI_RECV`, or both); `FI_EBADFLAGS` when it names neither.
    pub fn set_cq(&mut self, cq: &Arc<UtilCq>, flags: BindFlags) -> Result<(), Error> {
        if !flags.intersects(BindFlags::TRANSMIT | BindFlags::RECV) {
            return Err(Error::BadFlags);
        }
        if flags.contains(BindFlags::TRANSMIT) {
            self.tx_cq = Some(cq.clone());
        }
        if flags.contains(BindFlags::RECV) {
            self.rx_cq = Some(cq.clone());
        }
        Ok(())
    }

    /// What `fi_enable` requires of the bindings: a completion queue, and an
    /// address vector where the endpoint addresses peers through one (`need_av`).
    pub fn check_enable(&self, need_av: bool) -> Result<(), Error> {
        if self.tx_cq.is_none() && self.rx_cq.is_none() {
            return Err(Error::NoCq);
        }
        if need_av && self.av.is_none() {
            return Err(Error::NoAv);
        }
        Ok(())
    }

    /// Bind a counter to the events `flags` names: transmit and receive
    /// completions, remote writes and remote reads of our regions.
    pub fn set_cntr(&mut self, c: &Arc<UtilCntr>, flags: BindFlags) {
        if flags.contains(BindFlags::TRANSMIT) {
            self.tx_cntr = Some(c.clone());
        }
        if flags.contains(BindFlags::RECV) {
            self.rx_cntr = Some(c.clone());
        }
        if flags.contains(BindFlags::REMOTE_WRITE) {
            self.rma_write_cntr = Some(c.clone());
        }
        if flags.contains(BindFlags::REMOTE_READ) {
            self.rma_read_cntr = Some(c.clone());
        }
    }

    /// A transmit operation completed.
    pub fn tx_done(&self, e: CqEntry) {
        if let Some(cq) = &self.tx_cq {
            cq.push(e);
        }
        if let Some(c) = &self.tx_cntr {
            c.inc();
        }
    }

    /// A transmit operation failed with `err`.
    pub fn tx_err(&self, e: CqEntry, err: Error) {
        self.tx_err_prov(e, err, 0)
    }

    /// A transmit operation failed with `err`, and the provider's own error
    /// number `prov_errno` (for verbs, the work completion's `IBV_WC_*` status).
    pub fn tx_err_prov(&self, e: CqEntry, err: Error, prov_errno: i32) {
        if let Some(cq) = &self.tx_cq {
            cq.push_err(CqErrEntry { entry: e, olen: 0, err, prov_errno });
        }
        if let Some(c) = &self.tx_cntr {
            c.inc_err();
        }
    }

    /// A receive completed.
    pub fn rx_done(&self, e: CqEntry) {
        if let Some(cq) = &self.rx_cq {
            cq.push(e);
        }
        if let Some(c) = &self.rx_cntr {
            c.inc();
        }
    }

    /// A receive failed with `err`; `olen` bytes did not fit (`FI_ETRUNC`).
    pub fn rx_err(&self, e: CqEntry, olen: usize, err: Error) {
        if let Some(cq) = &self.rx_cq {
            cq.push_err(CqErrEntry { entry: e, olen, err, prov_errno: 0 });
        }
        if let Some(c) = &self.rx_cntr {
            c.inc_err();
        }
    }
}
