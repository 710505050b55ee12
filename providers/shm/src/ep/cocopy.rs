//! Shared copies of large messages ([`segment::Job`]): the receiver asks the sender
//! to help (`Help`) and both copy chunks across address spaces at once, the receiver
//! reading, the sender writing.

use super::{local_pieces, CoCopy, Inner, OpKind, PeerId, Rts, ShmEp, Violation, NULL_IOV};
use crate::attr::IOV_LIMIT;
use crate::proto::{self, Entry, Kind, Mode};
use crate::ring::ENTRY_PAYLOAD;
use crate::segment;
use crate::NAME;
use fabric_core::log::Level;
use fabric_core::prov::IoVec;
use fabric_core::{fi_log, Error, FiAddr};
use fabric_util::iov;
use fabric_util::rx::Target;
use fabric_util::wire::Header;

/// Smallest message whose copy the sender is asked to share ([`segment::Job`]).
pub(super) const COCOPY_MIN: u64 = 256 << 10;
/// Bytes of one chunk of a shared copy.
const COCOPY_CHUNK: u64 = 128 << 10;

/// The errno a chunk's copy leaves in its job: 0 when all `len` bytes moved.
fn chunk_status(res: std::result::Result<usize, segment::CmaError>, len: u64) -> u32 {
    match res {
        Ok(n) if n as u64 == len => 0,
        _ => Error::Io.errno() as u32,
    }
}

impl ShmEp {
    /// A job of the slot `peer` sends through that no shared copy of ours uses:
    /// `(slot, job)`.
    pub(super) fn free_job(g: &mut Inner, peer: PeerId) -> Option<(usize, usize)> {
        let rx = Self::peer(g, peer)?.rx.as_ref()?;
        Some((rx.slot, rx.jobs_busy.iter().position(|b| !b)?))
    }

    /// The job of a shared copy that ended is free for the next one.
    fn free_job_of(g: &mut Inner, c: &CoCopy) {
        if let Some(rx) = Self::peer(g, c.peer).and_then(|p| p.rx.as_mut()).filter(|rx| rx.slot == c.slot) {
            rx.jobs_busy[c.job] = false;
        }
    }

    /// Copy a large message together with its sender ([`segment::Job`]): ask it to
    /// help (`Help`, with the receive's pieces), then claim chunks ourselves until
    /// none is left. The receive completes once every chunk is copied, ours and the
    /// sender's ([`ShmEp::check_cocopies`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_cocopy(
        &self,
        g: &mut Inner,
        (slot, job): (usize, usize),
        target: Target,
        hdr: Header,
        src: FiAddr,
        r: Rts,
        local: &[IoVec],
    ) {
        let total = IoVec::total(local) as u64;
        let chunks = total.div_ceil(COCOPY_CHUNK) as u32;
        g.cocopy_gen = g.cocopy_gen.wrapping_add(1).max(1);
        let gen = g.cocopy_gen;
        let Some(p) = Self::peer(g, r.peer) else {
            // free_job found it; never lose the receive all the same.
            g.rx.fail(&g.b, target, &hdr, src, Error::ConnReset);
            return;
        };
        let (pid, start) = (p.pid, p.start);
        if let Some(rx) = p.rx.as_mut() {
            rx.jobs_busy[job] = true;
        }
        let j = self.seg.slot(slot).job(job).expect("free_job names a job");
        j.start(gen);
        let mut help = Entry::new(Kind::Help);
        help.mode = Mode::Iov;
        help.id = r.id;
        help.key = job as u64;
        help.tag = gen as u64;
        help.addr = COCOPY_CHUNK;
        help.len = total;
        let (pieces, pn) = local_pieces(local);
        help.aux = pn as u32;
        self.send_entry(g, r.peer, &help, |b| proto::put_pieces(b, &pieces[..pn]));
        // Our share: chunks from the front, as long as there are any.
        let rx = &g.rx;
        j.work(gen, chunks, COCOPY_CHUNK, total, |off, len| {
            let mut lp = [NULL_IOV; IOV_LIMIT];
            let ln = rx.pieces(&target, off, len, &mut lp);
            let (rp, rpn) = iov::slice(&r.pieces[..r.n], off, len);
            // SAFETY: the local pieces lie in the matched receive (valid for writes
            // under post_recv's contract), which stays ours until check_cocopies or
            // abandon_cocopy completes it; the sender writes only the chunks it
            // claimed, never this one.
            chunk_status(unsafe { segment::cma_read(pid, &lp[..ln], &rp[..rpn]) }, len)
        });
        g.cocopies.push(CoCopy { peer: r.peer, pid, start, slot, job, gen, chunks, id: r.id, target, hdr, src });
        self.note_work();
        self.check_cocopies(g);
    }

    /// Complete the shared copies whose every chunk is in, and acknowledge them.
    pub(super) fn check_cocopies(&self, g: &mut Inner) {
        let mut i = 0;
        while i < g.cocopies.len() {
            let c = &g.cocopies[i];
            let (done, err) = self.seg.slot(c.slot).job(c.job).map_or((u64::MAX, 0), |j| j.progress());
            if done < c.chunks as u64 {
                i += 1;
                continue;
            }
            let c = g.cocopies.remove(i);
            let err = (err != 0).then_some(Error::Io);
            self.end_cocopy(g, c, err);
        }
    }

    /// A shared copy is over: free its job, complete (or fail) the receive and tell
    /// the sender.
    fn end_cocopy(&self, g: &mut Inner, c: CoCopy, err: Option<Error>) {
        Self::free_job_of(g, &c);
        let mut ack = Entry::new(Kind::Ack);
        ack.id = c.id;
        match err {
            None => g.rx.complete(&g.b, c.target, &c.hdr, c.src, false),
            Some(e) => {
                fi_log!(Level::Info, NAME, "ep_data", "shared copy of a {} byte message failed: {e}", c.hdr.len);
                g.rx.fail(&g.b, c.target, &c.hdr, c.src, e);
                ack.aux = e.errno() as u32;
            }
        }
        self.send_entry(g, c.peer, &ack, |_| {});
    }

    /// Stop a shared copy before its end (its peer is gone or misbehaved, or we
    /// close): claim every chunk left, wait until the sender has finished the chunks
    /// it is writing (unless it is dead), so that the receive's buffer is ours alone
    /// again, then fail the receive with `err`.
    pub(super) fn abandon_cocopy(&self, g: &mut Inner, c: CoCopy, err: Error) {
        if let Some(j) = self.seg.slot(c.slot).job(c.job) {
            j.finish_many(j.claim_rest(c.gen, c.chunks), 0);
            let mut spins = 0u32;
            while j.progress().0 < c.chunks as u64 {
                spins = spins.wrapping_add(1);
                if spins % 1024 == 0 {
                    if !segment::alive(c.pid, c.start) {
                        break;
                    }
                    std::thread::yield_now();
                }
                std::hint::spin_loop();
            }
        }
        Self::free_job_of(g, &c);
        g.rx.fail(&g.b, c.target, &c.hdr, c.src, err);
    }

    /// The receiver of a large message of ours asks us to copy chunks of it too.
    pub(super) fn on_help(
        &self,
        g: &mut Inner,
        peer: PeerId,
        e: &Entry,
        raw: &[u8; ENTRY_PAYLOAD],
    ) -> std::result::Result<(), Violation> {
        let Some(op) = g.ops.get_mut(e.id).filter(|o| o.peer == peer && o.kind == OpKind::Send && o.sent.is_none())
        else {
            // Ended meanwhile: the receiver copies alone.
            return Ok(());
        };
        if e.len > op.len as u64 || e.tag > u32::MAX as u64 {
            return Err("help for more than the message".into());
        }
        let chunks = u32::try_from(e.len.div_ceil(e.addr)).map_err(|_| "help in too many chunks".to_string())?;
        let (iov, niov, oplen) = (op.iov, op.niov, op.len);
        if !self.cma_ok(g, peer) {
            return Ok(());
        }
        let mut remote = [(0u64, 0u64); IOV_LIMIT];
        let rn = e.pieces(raw, &mut remote);
        let Some(p) = Self::peer(g, peer) else { return Ok(()) };
        let Some(t) = p.tx.as_ref() else { return Ok(()) };
        let job = t.seg.slot(t.slot).job(e.key as usize).ok_or("help names no job")?;
        let (pid, gen) = (p.pid, e.tag as u32);
        job.work(gen, chunks, e.addr, e.len, |off, len| {
            let mut lp = [NULL_IOV; IOV_LIMIT];
            let ln = iov::slice_into(&iov[..niov], off, iov::clip(oplen as u64, off, len), &mut lp);
            let (rp, rpn) = iov::slice(&remote[..rn], off, len);
            // SAFETY: the local pieces lie in the send's source, valid for reads
            // while the operation is in flight (post_send's contract); it is until
            // the receiver's Ack, which comes after every chunk is finished.
            chunk_status(unsafe { segment::cma_write(pid, &lp[..ln], &rp[..rpn]) }, len)
        });
        Ok(())
    }
}
