//! Test set-up shared by the providers' test binaries over the provider traits
//! alone (RDM endpoints, waiting for completions, driving an endpoint's progress
//! from a thread) and the `wire` frames hostile peers send. Not a test binary of its own: a provider's `tests/common/mod.rs`
//! includes it with `#[path = "../../../util/tests/shared/endpoint.rs"] mod endpoint;`.

use fabric_core::prov::{AvOps, CqOps, DomainOps, EndpointOps, IoVec, Provider, RmaOp};
use fabric_core::{AvAttr, BindFlags, Caps, CqAttr, CqEntry, CqErrEntry, EpType, Error, Hints, Info, OpFlags, RmaIov};
use fabric_util::wire::{HdrFlags, Header, OpCode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Fail the test instead of hanging after this long in one step.
pub const STEP_LIMIT: Duration = Duration::from_secs(20);

/// An enabled RDM endpoint with its own CQ (transmit and receive) and AV.
pub struct Rdm {
    pub cq: Arc<dyn CqOps>,
    pub av: Arc<dyn AvOps>,
    pub ep: Arc<dyn EndpointOps>,
}

/// Open, bind and enable an RDM endpoint on `dom` for `info`.
pub fn rdm_endpoint(dom: &Arc<dyn DomainOps>, info: &Info) -> Rdm {
    let cq = dom.cq_open(&CqAttr::default()).unwrap();
    let av = dom.av_open(&AvAttr::default()).unwrap();
    let ep = dom.endpoint(info).unwrap();
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).unwrap();
    ep.bind_av(&av).unwrap();
    ep.enable().unwrap();
    Rdm { cq, av, ep }
}

/// A domain of `p` for RDM endpoints on 127.0.0.1, and the `Info` it was opened
/// for.
pub fn open_rdm_domain(p: &Arc<dyn Provider>) -> (Arc<dyn DomainOps>, Info) {
    let info = p.getinfo(&Hints::new().ep_type(EpType::Rdm).node("127.0.0.1").source(true)).unwrap()[0].clone();
    let fabric = p.fabric(&info).unwrap();
    (fabric.domain(&info).unwrap(), info)
}

/// Wait for one completion (or error completion) on `cq`, driving `other` too;
/// fails the test after [`STEP_LIMIT`].
pub fn wait(cq: &Arc<dyn CqOps>, other: &Arc<dyn CqOps>) -> Result<CqEntry, CqErrEntry> {
    let mut out = [CqEntry::new(0, Caps::empty())];
    let start = Instant::now();
    loop {
        let _ = other.read(&mut []);
        match cq.read(&mut out) {
            Ok(1) => return Ok(out[0]),
            Err(Error::Avail) => return Err(cq.readerr().unwrap()),
            _ => {}
        }
        assert!(start.elapsed() < STEP_LIMIT, "no completion");
    }
}

/// A well-behaved peer: a new endpoint on `dom` reads `len` bytes at `addr` of
/// region `key` of `t` (operation context 9) and returns them. Fails the test
/// with `what` if the read completes in error.
pub fn well_behaved_read(
    dom: &Arc<dyn DomainOps>,
    info: &Info,
    t: &Rdm,
    (addr, key, len): (u64, u64, usize),
    what: &str,
) -> Vec<u8> {
    let good = rdm_endpoint(dom, info);
    let to_t = good.av.insert(&[t.ep.getname().unwrap()]).unwrap()[0];
    let mut seen = vec![0u8; len];
    let ri = [IoVec { base: seen.as_mut_ptr(), len }];
    let rma = [RmaIov { addr, len, key }];
    let rop = RmaOp { iov: &ri, addr: to_t, rma: &rma, context: 9, user_context: 9, data: 0 };
    // SAFETY: `seen` outlives the completion waited for below.
    unsafe { good.ep.post_read(&rop, OpFlags::empty()) }.unwrap();
    let r = wait(&good.cq, &t.cq).expect(what);
    assert_eq!(r.op_context, 9);
    seen
}

/// The header of a read request (with `LAST`, a whole operation) of `len` bytes
/// at `addr` of region `key`, operation `id`: the frame is the header alone.
pub fn read_request(id: u64, len: u64, addr: u64, key: u64) -> Header {
    Header { len, flags: HdrFlags(HdrFlags::LAST), tag: addr, data: key, id, ..Header::new(OpCode::ReadReq) }
}

/// The endpoint's progress, driven from a thread of the test (reads of its CQ,
/// which sleep on its sockets): a panic in the provider shows up at `finish`.
pub struct Driver {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Vec<String>>>,
}

impl Driver {
    /// Start driving `cq`; whatever completes on it meanwhile is kept for
    /// [`Driver::finish`].
    pub fn start(cq: Arc<dyn CqOps>) -> Driver {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::spawn(move || {
            // Nothing the hostile peer does may complete anything on this queue.
            let mut odd = Vec::new();
            let mut out = [CqEntry::new(0, Caps::empty())];
            while !s.load(Ordering::Acquire) {
                match cq.sread(&mut out, Some(Duration::from_millis(5))) {
                    Ok(n) if n > 0 => odd.push(format!("{:?}", out[0])),
                    Err(Error::Avail) => odd.push(format!("{:?}", cq.readerr())),
                    _ => {}
                }
            }
            odd
        });
        Driver { stop, handle: Some(handle) }
    }

    /// Whether the thread is still running (it stops only when told, or panics).
    pub fn alive(&self) -> bool {
        self.handle.as_ref().is_some_and(|h| !h.is_finished())
    }

    /// Stop; the completions seen meanwhile.
    pub fn finish(mut self) -> Vec<String> {
        self.stop.store(true, Ordering::Release);
        let h = self.handle.take().expect("running");
        h.join().unwrap_or_else(|_| panic!("the endpoint's progress panicked (see the output above)"))
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
