//! The target side of RMA and atomics: requests checked against the domain's
//! memory-key registry (key, bounds, access) and refused with `FI_EACCES`
//! otherwise, leaving memory untouched and the peer usable; bytes go in and out of
//! a region only through the registry's `copy_in`/`copy_out`, which hold the
//! region's access lock, so an application closing a region never frees memory a
//! copy is using. An operation sent as several requests is checked once, at its
//! first (a write's carries the whole length), and tracked per peer
//! ([`crate::rma_target::RmaTarget`], capped); the counters and remote CQ data
//! count operations, not requests.

use super::{Ctx, Done, Engine, Frame, PeerRx, Violation};
use crate::rma_target::RmaTarget;
use crate::wire::{AtomicHdr, HdrFlags, Header, OpCode, RmaDesc};
use fabric_core::log::Level;
use fabric_core::{fi_log, Error, FiAddr, MrAccess};
use std::fmt;

impl<P: Copy + PartialEq + fmt::Debug> Engine<P> {
    /// Bytes `off..` of a write request's payload: the target's 16 bytes first
    /// (gathered in `pre`; once complete the operation is checked), then data,
    /// copied in unless the operation was refused.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn write_req_bytes(
        cx: Ctx<'_>,
        rma: &mut RmaTarget,
        hdr: &Header,
        off: u64,
        mut bytes: &[u8],
        pre: &mut [u8; RmaDesc::LEN],
        desc: &mut Option<RmaDesc>,
        err: &mut Option<Error>,
    ) -> Result<(), Violation> {
        let mut off = off as usize;
        if off < RmaDesc::LEN {
            let k = (RmaDesc::LEN - off).min(bytes.len());
            pre[off..off + k].copy_from_slice(&bytes[..k]);
            bytes = &bytes[k..];
            off += k;
            if off == RmaDesc::LEN {
                let d = RmaDesc::decode(pre).expect("16 bytes");
                *desc = Some(d);
                let n = (hdr.len - RmaDesc::LEN as u64) as usize;
                let mrs = cx.objs.mrs();
                // The first request of an operation checks its whole range (`tag`
                // is the operation's length), so a refused write lands nowhere; a
                // later one shares that outcome, and its own range is checked.
                let mut first = false;
                let shared = rma
                    .begin(hdr.id, hdr.flags.has(HdrFlags::LAST), || {
                        first = true;
                        let whole = usize::try_from(hdr.tag).unwrap_or(usize::MAX).max(n);
                        mrs.lookup(d.key, d.addr, whole, MrAccess::REMOTE_WRITE).err()
                    })
                    .map_err(Violation::proto)?;
                *err = match first {
                    true => shared,
                    false => shared.or_else(|| mrs.lookup(d.key, d.addr, n, MrAccess::REMOTE_WRITE).err()),
                };
            }
        }
        if let (Some(d), None, false) = (desc.as_ref(), err.as_ref(), bytes.is_empty()) {
            let at = d.addr.wrapping_add((off - RmaDesc::LEN) as u64);
            if let Err(e) = cx.objs.mrs().copy_in(d.key, at, bytes, MrAccess::REMOTE_WRITE) {
                *err = Some(e);
            }
        }
        Ok(())
    }

    /// A write request is complete (`err`: refused or failed).
    pub(super) fn end_write(
        &mut self,
        cx: Ctx<'_>,
        pr: &mut PeerRx,
        peer: P,
        src: FiAddr,
        hdr: &Header,
        err: Option<Error>,
    ) {
        if let Some(e) = err {
            fi_log!(Level::Info, self.cfg.name, "ep_data", "refused a remote write of {} bytes: {e}", hdr.len);
        }
        // Counted, and its CQ data delivered, once per operation that went well.
        if pr.rma.end(hdr.id, hdr.flags.has(HdrFlags::LAST), err) == Some(Ok(())) {
            if let Some(c) = &cx.b.rma_write_cntr {
                c.inc();
            }
            if hdr.flags.has(HdrFlags::CQ_DATA) {
                self.rx.rma_data(cx.b, src, hdr.data);
                self.run_rx_actions();
            }
        }
        self.answer(pr, peer, hdr.id, err, Vec::new());
    }

    /// Answer read request `hdr` with the bytes, or with the error.
    pub(super) fn answer_read(&mut self, cx: Ctx<'_>, pr: &mut PeerRx, peer: P, hdr: Header) -> Result<(), Violation> {
        let n = hdr.len as usize;
        let last = hdr.flags.has(HdrFlags::LAST);
        // A read's requests are checked one by one; once one is refused, the rest
        // of the operation is too.
        let refused = pr.rma.begin(hdr.id, last, || None).map_err(Violation::proto)?;
        let mut out =
            self.rx.unexp_buf(n).map_err(|_| Violation { err: Error::NoMem, why: "no memory for a read".into() })?;
        out.resize(n, 0);
        let r = match refused {
            Some(e) => Err(e),
            None => cx.objs.mrs().copy_out(hdr.data, hdr.tag, &mut out, MrAccess::REMOTE_READ),
        };
        // Counted once per operation that went well as a whole.
        if pr.rma.end(hdr.id, last, r.err()) == Some(Ok(())) {
            if let Some(c) = &cx.b.rma_read_cntr {
                c.inc();
            }
        }
        match r {
            Ok(()) => self.answer(pr, peer, hdr.id, None, out),
            Err(e) => {
                fi_log!(Level::Info, self.cfg.name, "ep_data", "refused a remote read of {n} bytes: {e}");
                self.rx.recycle(out);
                self.answer(pr, peer, hdr.id, Some(e), Vec::new());
            }
        }
        Ok(())
    }

    /// Answer a peer's read requests that waited for it to take its answers, as
    /// far as there is room now.
    pub(super) fn serve_waiting(&mut self, cx: Ctx<'_>, pr: &mut PeerRx, peer: P) {
        while let Some(h) = pr.answers.next_read() {
            if let Err(v) = self.answer_read(cx, pr, peer, h) {
                // Only a peer past the caps gets here; it is answered with the
                // error and its next frame tells the transport.
                fi_log!(Level::Warn, self.cfg.name, "ep_data", "{v}");
                self.answer(pr, peer, h.id, Some(v.err), Vec::new());
            }
        }
    }

    /// An atomic request is complete: apply it and answer the prior values.
    pub(super) fn serve_atomic(
        &mut self,
        cx: Ctx<'_>,
        pr: &mut PeerRx,
        peer: P,
        hdr: &Header,
        buf: &[u8],
    ) -> Result<(), Violation> {
        let desc = RmaDesc::decode(buf).ok_or_else(|| Violation::proto("atomic without its target"))?;
        let rest = &buf[RmaDesc::LEN..];
        let ah = AtomicHdr::decode(rest).ok_or_else(|| Violation::proto("atomic without its operation"))?;
        let mut result = Vec::new();
        let r =
            crate::atomic::serve(cx.objs.mrs(), cx.objs.atomic_lock(), desc, ah, &rest[AtomicHdr::LEN..], &mut result)
                .map_err(Violation::proto)?;
        match r {
            Ok(()) => {
                if let Some(c) = &cx.b.rma_write_cntr {
                    c.inc();
                }
                self.answer(pr, peer, hdr.id, None, result);
            }
            Err(e) => {
                fi_log!(Level::Info, self.cfg.name, "ep_data", "refused a remote atomic: {e}");
                self.answer(pr, peer, hdr.id, Some(e), Vec::new());
            }
        }
        Ok(())
    }

    /// Queue the answer to request `id` of `peer`, counted until sent.
    fn answer(&mut self, pr: &mut PeerRx, peer: P, id: u64, err: Option<Error>, payload: Vec<u8>) {
        let h = Header {
            len: payload.len() as u64,
            data: err.map_or(0, |e| e.errno() as u64),
            id,
            ..Header::new(OpCode::RmaResp)
        };
        let f = Frame::owned(&h, &[], payload, Done::Answer);
        pr.answers.queued(f.total);
        self.out.push_back((peer, f));
    }
}
