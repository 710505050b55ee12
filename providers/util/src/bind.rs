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
    /// The transmit queue was bound with `FI_SELECTIVE_COMPLETION`: a transmit
    /// writes a successful entry only if it was posted with `FI_COMPLETION`.
    pub tx_selective: bool,
    /// The same for receives.
    pub rx_selective: bool,
}

impl Bindings {
    /// Bind a completion queue for the directions `flags` names (`FI_TRANSMIT`,
    /// `FI_RECV`, or both), selectively with `FI_SELECTIVE_COMPLETION` (see
    /// [`Bindings::tx_done`]); `FI_EBADFLAGS` when it names neither direction.
    pub fn set_cq(&mut self, cq: &Arc<UtilCq>, flags: BindFlags) -> Result<(), Error> {
        if !flags.intersects(BindFlags::TRANSMIT | BindFlags::RECV) {
            return Err(Error::BadFlags);
        }
        let selective = flags.contains(BindFlags::SELECTIVE_COMPLETION);
        if flags.contains(BindFlags::TRANSMIT) {
            self.tx_cq = Some(cq.clone());
            self.tx_selective = selective;
        }
        if flags.contains(BindFlags::RECV) {
            self.rx_cq = Some(cq.clone());
            self.rx_selective = selective;
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

    /// What posting a receive requires: an endpoint enabled and not closed
    /// (`ready`; else `FI_EOPBADSTATE`), and a receive queue (`FI_ENOCQ`).
    pub fn check_recv(&self, ready: bool) -> Result<(), Error> {
        if !ready {
            return Err(Error::OpBadState);
        }
        if self.rx_cq.is_none() {
            return Err(Error::NoCq);
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

    /// A transmit operation completed. `completion`: it was posted with
    /// `FI_COMPLETION`; without it, a queue bound with `FI_SELECTIVE_COMPLETION`
    /// gets no entry (the counter still counts it, and failures are always
    /// reported: [`Bindings::tx_err`]).
    #[inline(always)]
    pub fn tx_done(&self, e: CqEntry, completion: bool) {
        if let Some(cq) = &self.tx_cq {
            if completion || !self.tx_selective {
                cq.push(e);
            }
        }
        if let Some(c) = &self.tx_cntr {
            c.inc();
        }
    }

    /// A transmit operation that writes no entry (an inject) completed, or
    /// failed (`failed`): the counter counts it, as libfabric's do.
    #[inline]
    pub fn tx_count(&self, failed: bool) {
        if let Some(c) = &self.tx_cntr {
            if failed {
                c.inc_err();
            } else {
                c.inc();
            }
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

    /// A receive completed; `completion` as for [`Bindings::tx_done`], against
    /// the receive queue's binding.
    #[inline(always)]
    pub fn rx_done(&self, e: CqEntry, completion: bool) {
        if let Some(cq) = &self.rx_cq {
            if completion || !self.rx_selective {
                cq.push(e);
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use fabric_core::prov::{CntrOps, CqOps};
    use fabric_core::{Caps, CqAttr};

    fn read(cq: &UtilCq) -> Result<usize, Error> {
        let mut out = [CqEntry::new(0, Caps::empty()); 4];
        cq.read(&mut out)
    }

    #[test]
    fn selective_completion_writes_only_what_asked_and_counts_everything() {
        let cq = UtilCq::new(&CqAttr::default()).unwrap();
        let cntr = UtilCntr::new().unwrap();
        let mut b = Bindings::default();
        b.set_cq(&cq, BindFlags::TRANSMIT | BindFlags::SELECTIVE_COMPLETION).unwrap();
        b.set_cq(&cq, BindFlags::RECV).unwrap();
        b.set_cntr(&cntr, BindFlags::TRANSMIT);
        assert!(b.tx_selective && !b.rx_selective);
        b.tx_done(CqEntry::new(1, Caps::SEND), false);
        assert_eq!(read(&cq), Err(Error::Again), "no entry without FI_COMPLETION");
        assert_eq!(cntr.read(), 1, "but the counter counts it");
        b.tx_done(CqEntry::new(2, Caps::SEND), true);
        assert_eq!(read(&cq), Ok(1));
        b.tx_err(CqEntry::new(3, Caps::SEND), Error::Io);
        assert_eq!(read(&cq), Err(Error::Avail), "failures are always reported");
        assert_eq!(cq.readerr().unwrap().entry.op_context, 3);
        assert_eq!((cntr.read(), cntr.readerr()), (2, 1));
        b.tx_count(false);
        b.tx_count(true);
        assert_eq!((cntr.read(), cntr.readerr()), (3, 2));
        assert_eq!(read(&cq), Err(Error::Again), "an inject writes no entry");
        // Receives are not selective here: every one is reported.
        b.rx_done(CqEntry::new(4, Caps::RECV), false);
        assert_eq!(read(&cq), Ok(1));
        // Binding again without the flag ends it.
        b.set_cq(&cq, BindFlags::TRANSMIT).unwrap();
        b.tx_done(CqEntry::new(5, Caps::SEND), false);
        assert_eq!(read(&cq), Ok(1));
    }
}
