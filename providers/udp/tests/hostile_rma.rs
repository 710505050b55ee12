//! A hostile peer against the target side of RMA of udp RDM endpoints (issue 15):
//! a peer that opens RMA operations without end (requests without `LAST`) is cut
//! off once it holds more than the shared cap (`fabric_util::rma_target::OPS_MAX`)
//! open, and the endpoint goes on serving a well-behaved peer.
//!
//! The hostile peer is a raw `UdpSocket` that speaks the shared reliability
//! protocol through its own `reliable::Channel`, and the `wire` frames on top. It
//! works in lockstep (one request, then its answer), so every step waits for
//! something positive: an answer, or the endpoint's `Shutdown` when it drops the
//! peer. The only time limit is a guard against a hang.

use fabric_core::prov::{AvOps, CqOps, DomainOps, EndpointOps, IoVec, RmaOp};
use fabric_core::*;
use fabric_util::reliable::{self, Channel, Event, HEADER_LEN};
use fabric_util::rma_target::OPS_MAX;
use fabric_util::wire::{HdrFlags, Header, OpCode, RmaDesc, HDR_LEN};
use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Fail the test instead of hanging after this long in one step.
const STEP_LIMIT: Duration = Duration::from_secs(20);
/// The target region's length.
const REGION: usize = 4096;

/// The endpoint's progress, driven from a thread of the test (reads of its CQ,
/// which sleep on its socket): a panic in the provider shows up at `finish`.
struct Driver {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Vec<String>>>,
}

impl Driver {
    fn start(cq: Arc<dyn CqOps>) -> Driver {
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

    fn alive(&self) -> bool {
        self.handle.as_ref().is_some_and(|h| !h.is_finished())
    }

    /// Stop; the completions seen meanwhile.
    fn finish(mut self) -> Vec<String> {
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

/// The hostile peer: a socket and its reliability channel to the endpoint.
struct Hostile {
    sock: UdpSocket,
    target: SocketAddr,
    chan: Channel,
    /// Frames given to the channel, until acknowledged.
    sent: HashMap<u64, Vec<u8>>,
    next_msg: u64,
    /// The frame arriving, between its first and last segments.
    partial: Vec<u8>,
    /// Frames arrived and not yet looked at.
    frames: Vec<(Header, Vec<u8>)>,
    rbuf: Vec<u8>,
    sbuf: Vec<u8>,
}

impl Hostile {
    fn new(target: SocketAddr) -> Hostile {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(2))).unwrap();
        let cfg = reliable::Config {
            mss: 1400,
            window: 1024,
            ack_every: 1,
            payload_checksum: false,
            ..reliable::Config::default()
        };
        let chan = Channel::new(cfg, 0x0BAD_BEEF, Instant::now());
        Hostile {
            sock,
            target,
            chan,
            sent: HashMap::new(),
            next_msg: 1,
            partial: Vec::new(),
            frames: Vec::new(),
            rbuf: vec![0u8; 65536],
            sbuf: vec![0u8; 1400 + HEADER_LEN],
        }
    }

    /// Give a frame (header and payload) to the channel.
    fn send(&mut self, frame: Vec<u8>) {
        let id = self.next_msg;
        self.next_msg += 1;
        self.chan.send(Instant::now(), id, frame.len()).expect("the channel is open");
        self.sent.insert(id, frame);
    }

    /// Move datagrams both ways once: what the channel has due out, what the
    /// socket has in.
    fn pump_once(&mut self) {
        let now = Instant::now();
        if self.chan.poll_timeout().is_some_and(|t| t <= now) {
            self.chan.handle_timeout(now);
        }
        let sent = &self.sent;
        let mut fill = |id: u64, off: usize, buf: &mut [u8]| match sent.get(&id) {
            Some(f) => buf.copy_from_slice(&f[off..off + buf.len()]),
            None => buf.fill(0),
        };
        while let Some(n) = self.chan.poll_transmit(now, &mut self.sbuf, &mut fill) {
            self.sock.send_to(&self.sbuf[..n], self.target).expect("send a datagram");
        }
        while let Some(ev) = self.chan.poll_event() {
            let (Event::Acked(id) | Event::Failed(id)) = ev;
            self.sent.remove(&id);
        }
        let n = match self.sock.recv_from(&mut self.rbuf) {
            Ok((n, from)) if from == self.target => n,
            Ok(_) => return,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => return,
            Err(e) => panic!("receive: {e}"),
        };
        let Ok((h, payload)) = reliable::Header::decode(&self.rbuf[..n]) else { return };
        let Hostile { chan, partial, frames, .. } = self;
        let _ = chan.handle(Instant::now(), &h, payload, &mut |seg| {
            if seg.first {
                partial.clear();
            }
            partial.extend_from_slice(seg.bytes);
            if seg.last {
                let mut hb = [0u8; HDR_LEN];
                hb.copy_from_slice(&partial[..HDR_LEN]);
                let h = Header::decode(&hb, u64::MAX).expect("the endpoint sends well-formed frames");
                frames.push((h, partial[HDR_LEN..].to_vec()));
            }
            true
        });
    }

    /// Pump until a frame arrives that `pick` takes; fail after [`STEP_LIMIT`] or
    /// if the endpoint's progress dies.
    fn wait_for(&mut self, what: &str, driver: &Driver, mut pick: impl FnMut(&Header) -> bool) -> (Header, Vec<u8>) {
        let start = Instant::now();
        loop {
            if let Some(i) = self.frames.iter().position(|(h, _)| pick(h)) {
                return self.frames.remove(i);
            }
            assert!(driver.alive(), "{what}: the endpoint's progress died");
            assert!(start.elapsed() < STEP_LIMIT, "{what}: nothing came");
            self.pump_once();
        }
    }
}

/// A write request of one byte at `addr` of region `key`, of operation `id`,
/// without `LAST`: the operation stays open at the target.
fn open_write(id: u64, addr: u64, key: u64) -> Vec<u8> {
    let h = Header { len: RmaDesc::LEN as u64 + 1, tag: 1, id, flags: HdrFlags(0), ..Header::new(OpCode::WriteReq) };
    let mut f = h.encode().to_vec();
    f.extend_from_slice(&RmaDesc { addr, key }.encode());
    f.push(0xAB);
    f
}

/// An enabled RDM endpoint with its own CQ and AV.
struct Rdm {
    cq: Arc<dyn CqOps>,
    av: Arc<dyn AvOps>,
    ep: Arc<dyn EndpointOps>,
}

fn rdm(dom: &Arc<dyn DomainOps>, info: &Info) -> Rdm {
    let cq = dom.cq_open(&CqAttr::default()).unwrap();
    let av = dom.av_open(&AvAttr::default()).unwrap();
    let ep = dom.endpoint(info).unwrap();
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).unwrap();
    ep.bind_av(&av).unwrap();
    ep.enable().unwrap();
    Rdm { cq, av, ep }
}

fn open_domain() -> (Arc<dyn DomainOps>, Info) {
    let p = fabric_udp::provider();
    let info = p.getinfo(&Hints::new().ep_type(EpType::Rdm).node("127.0.0.1").source(true)).unwrap()[0].clone();
    let fabric = p.fabric(&info).unwrap();
    (fabric.domain(&info).unwrap(), info)
}

/// Wait for one completion on `cq`, driving `other` too.
fn wait(cq: &Arc<dyn CqOps>, other: &Arc<dyn CqOps>) -> std::result::Result<CqEntry, CqErrEntry> {
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

/// A well-behaved peer writes then reads back the region through the endpoint.
fn well_behaved_rma(dom: &Arc<dyn DomainOps>, info: &Info, t: &Rdm, addr: u64, key: u64) {
    let good = rdm(dom, info);
    let to_t = good.av.insert(&[t.ep.getname().unwrap()]).unwrap()[0];
    let mut src: Vec<u8> = (0..REGION).map(|i| (i * 31 + 7) as u8).collect();
    let mut seen = vec![0u8; REGION];
    let rma = [RmaIov { addr, len: REGION, key }];
    let wi = [IoVec { base: src.as_mut_ptr(), len: REGION }];
    let ri = [IoVec { base: seen.as_mut_ptr(), len: REGION }];
    let wop = RmaOp { iov: &wi, addr: to_t, rma: &rma, context: 1, user_context: 1, data: 0 };
    let rop = RmaOp { iov: &ri, addr: to_t, rma: &rma, context: 2, user_context: 2, data: 0 };
    // SAFETY: `src` and `seen` outlive the completions waited for below.
    unsafe { good.ep.post_write(&wop, OpFlags::empty()) }.unwrap();
    let w = wait(&good.cq, &t.cq).expect("the well-behaved write");
    assert_eq!(w.op_context, 1);
    // SAFETY: as above.
    unsafe { good.ep.post_read(&rop, OpFlags::empty()) }.unwrap();
    let r = wait(&good.cq, &t.cq).expect("the well-behaved read");
    assert_eq!(r.op_context, 2);
    assert!(seen == src, "the well-behaved read does not see the well-behaved write");
}

#[test]
fn a_peer_opening_operations_without_end_is_cut_off() {
    // The memory first, so it is freed after the domain.
    let mut mem = vec![0u8; REGION];
    let (dom, info) = open_domain();
    let t = rdm(&dom, &info);
    // SAFETY: `mem` outlives the domain and the test makes no reference to it
    // until the region is closed.
    let mr =
        unsafe { dom.mr_reg(mem.as_mut_ptr(), REGION, MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, 0) }.unwrap();
    let (addr, key) = (mem.as_ptr() as u64, mr.key());
    let driver = Driver::start(t.cq.clone());
    let mut h = Hostile::new(t.ep.getname().unwrap().sockaddr().unwrap());
    // Up to the cap, every request is served (and its operation stays open).
    for id in 1..=OPS_MAX as u64 {
        h.send(open_write(id, addr, key));
        let what = format!("request {id} of {OPS_MAX}");
        let (r, payload) = h.wait_for(&what, &driver, |f| f.op == OpCode::RmaResp || f.op == OpCode::Shutdown);
        assert_eq!((r.op, r.id, r.data), (OpCode::RmaResp, id, 0), "{what}: {r:?}");
        assert!(payload.is_empty(), "{what}: a write answered with bytes");
    }
    // One more operation, and the endpoint drops the peer and tells it so.
    h.send(open_write(u64::MAX, addr, key));
    let (r, _) =
        h.wait_for("the request over the cap", &driver, |f| f.op == OpCode::RmaResp || f.op == OpCode::Shutdown);
    assert_eq!(
        r.op,
        OpCode::Shutdown,
        "the endpoint answered operation {} of a peer holding {OPS_MAX} open ({r:?}): it is never cut off",
        OPS_MAX + 1
    );
    let odd = driver.finish();
    assert!(odd.is_empty(), "the hostile peer completed something on the target's queue: {odd:?}");

    // The endpoint still serves a well-behaved peer.
    well_behaved_rma(&dom, &info, &t, addr, key);
    mr.close().unwrap();
    drop(t);
    drop(dom);
    assert!(mem.iter().enumerate().all(|(i, &b)| b == (i * 31 + 7) as u8), "the region is not what was written");
}

/// A peer breaking the protocol (here: a write request whose header says it is
/// shorter than the target it carries) is dropped and told so (`Shutdown`), as
/// tcp closes the connection; the endpoint goes on serving others.
#[test]
fn a_peer_breaking_the_protocol_is_told_it_was_dropped() {
    let mut mem = vec![0u8; REGION];
    let (dom, info) = open_domain();
    let t = rdm(&dom, &info);
    // SAFETY: as in the test above.
    let mr =
        unsafe { dom.mr_reg(mem.as_mut_ptr(), REGION, MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, 0) }.unwrap();
    let (addr, key) = (mem.as_ptr() as u64, mr.key());
    let driver = Driver::start(t.cq.clone());
    let mut h = Hostile::new(t.ep.getname().unwrap().sockaddr().unwrap());
    for len in [0u64, RmaDesc::LEN as u64 - 1] {
        let hd = Header { len, tag: 1, id: 1, flags: HdrFlags(HdrFlags::LAST), ..Header::new(OpCode::WriteReq) };
        let mut f = hd.encode().to_vec();
        f.extend_from_slice(&RmaDesc { addr, key }.encode());
        h.send(f);
        let what = format!("a write request of {len} bytes carrying {}", RmaDesc::LEN);
        let (r, _) = h.wait_for(&what, &driver, |f| f.op == OpCode::RmaResp || f.op == OpCode::Shutdown);
        assert_eq!(r.op, OpCode::Shutdown, "{what}: {r:?}");
        h = Hostile::new(h.target);
    }
    assert!(driver.finish().is_empty());
    well_behaved_rma(&dom, &info, &t, addr, key);
    mr.close().unwrap();
}
