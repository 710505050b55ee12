//! The in-process round trip of `../shared/tools/inproc` through the safe Rust API:
//! one thread drives two RDM endpoints of one domain; A sends `size` bytes tagged to
//! B, B answers, every completion is read. The program `inproc` (same arguments as
//! libfabric's `lf_inproc`, so `instr.sh` counts both the same way) and the criterion
//! bench `inproc` run it.

use crate::bound_endpoint;
use fabric::{Buf, Caps, Completion, CompletionQueue, Endpoint, EpType, Error, Fabric, FiAddr, Hints};
use fabric::{OpBuffers, Result};

/// The tag every message carries.
const TAG: u64 = 7;

/// Slots of the four buffers, which are also the operations' contexts: 0 B's
/// receive, 1 A's send, 2 A's receive, 3 B's send.
type Slots = [Option<Buf>; 4];

/// Two RDM endpoints of one provider and domain, each with its own CQ and AV, and
/// the four buffers a round trip recycles.
pub struct InProc {
    a: Endpoint,
    b: Endpoint,
    qa: CompletionQueue,
    qb: CompletionQueue,
    to_a: FiAddr,
    to_b: FiAddr,
    slots: Slots,
    // Kept open for as long as the endpoints are used.
    _objects: (Fabric, fabric::Domain, fabric::AddressVector, fabric::AddressVector),
}

/// Read both queues until `na` completions came from `qa` and `nb` from `qb` (at
/// least one pass when both are 0, to drive progress); each completion's buffer
/// goes back to its slot. Inline into each half (as `read` is into it), so that
/// a round trip makes no call of the bench's own: what the count measures beyond
/// the providers is the API's work, not a call frame of this program.
#[inline(always)]
fn drive(qa: &CompletionQueue, mut na: usize, qb: &CompletionQueue, mut nb: usize, slots: &mut Slots) -> Result<()> {
    let mut once = na == 0 && nb == 0;
    while na > 0 || nb > 0 || once {
        once = false;
        na -= read(qa, slots)?.min(na);
        nb -= read(qb, slots)?.min(nb);
    }
    Ok(())
}

/// Read one completion of `q`, its buffer back to its slot: how many were read
/// (0 or 1).
#[inline(always)]
fn read(q: &CompletionQueue, slots: &mut Slots) -> Result<usize> {
    match q.read_one() {
        Ok(Completion { context, buffers: OpBuffers::One(b), .. }) => {
            slots[context as usize] = Some(b);
            Ok(1)
        }
        Ok(_) => Ok(1),
        Err(Error::Again) => Ok(0),
        Err(e) => Err(e),
    }
}

impl InProc {
    /// Open the pair on `prov` (shm, or a network provider on loopback) with
    /// `size`-byte buffers.
    pub fn open(prov: &str, size: usize) -> Result<InProc> {
        let mut hints = Hints::new().provider(prov).ep_type(EpType::Rdm).caps(Caps::TAGGED);
        if prov != "shm" {
            hints = hints.node("127.0.0.1").source(true);
        }
        let info = fabric::getinfo(&hints)?.remove(0);
        let fab = Fabric::open(&info)?;
        let dom = fab.domain(&info)?;
        let (a, qa, ava) = bound_endpoint(&dom, &info)?;
        let (b, qb, avb) = bound_endpoint(&dom, &info)?;
        let to_b = ava.insert_one(&b.name()?)?;
        let to_a = avb.insert_one(&a.name()?)?;
        let slots = std::array::from_fn(|_| Some(Buf::new(size)));
        Ok(InProc { a, b, qa, qb, to_a, to_b, slots, _objects: (fab, dom, ava, avb) })
    }

    /// One round trip: B posts a receive, A sends to it, A posts a receive, B
    /// answers; returns when all four completions were read.
    pub fn round_trip(&mut self) -> Result<()> {
        let InProc { a, b, qa, qb, to_a, to_b, slots, .. } = self;
        half(b, a, 0, 1, *to_b, qa, qb, slots)?;
        half(a, b, 2, 3, *to_a, qa, qb, slots)
    }
}

/// Half a round trip, as `lf_inproc` does it: `rx` posts a receive into slot
/// `rq`, `tx` sends slot `tq` to it at `dest` (driving both queues while the send
/// meets back-pressure), then both queues are read until each gave one
/// completion (A's queue first).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn half(
    rx: &Endpoint,
    tx: &Endpoint,
    rq: usize,
    tq: usize,
    dest: FiAddr,
    qa: &CompletionQueue,
    qb: &CompletionQueue,
    slots: &mut Slots,
) -> Result<()> {
    let buf = slots[rq].take().ok_or(Error::Inval)?;
    rx.trecv(buf, FiAddr::UNSPEC, TAG, 0, rq as u64).map_err(|e| e.error)?;
    let mut buf = slots[tq].take().ok_or(Error::Inval)?;
    loop {
        match tx.tsend(buf, dest, TAG, tq as u64) {
            Ok(()) => break,
            Err(e) if e.error == Error::Again => {
                let OpBuffers::One(back) = e.buffers else { return Err(Error::Inval) };
                buf = back;
                drive(qa, 0, qb, 0, slots)?;
            }
            Err(e) => return Err(e.error),
        }
    }
    drive(qa, 1, qb, 1, slots)
}
