//! A peer that asks for RMA answers and never acknowledges them (issue 15): over
//! its own `reliable::Channel` it sends read requests of `RMA_CHUNK` bytes each,
//! then goes silent. The target must not queue their answers without bound
//! (before the fix it queued all of them, hundreds of MiB): it keeps at most
//! `rma_target::ANSWER_BYTES_MAX` of answers unacknowledged for the peer and
//! answers the rest as the peer acknowledges; meanwhile a well-behaved peer is
//! served.

use fabric_core::prov::{AvOps, CqOps, DomainOps, EndpointOps, IoVec, RmaOp};
use fabric_core::*;
use fabric_util::reliable::{self, Channel, Event, HEADER_LEN};
use fabric_util::rma_target::{answer_bytes_high_water, ANSWER_BYTES_MAX};
use fabric_util::wire::{HdrFlags, Header, OpCode, HDR_LEN, RMA_CHUNK};
use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Fail the test instead of hanging after this long in one step.
const STEP_LIMIT: Duration = Duration::from_secs(20);
/// Read requests the hostile peer sends.
const REQUESTS: u64 = 200;

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

#[test]
fn answers_a_peer_does_not_acknowledge_stay_bounded() {
    // The memory first, so it is freed after the domain.
    let mut mem: Vec<u8> = (0..RMA_CHUNK).map(|i| (i * 7 + 3) as u8).collect();
    let expect = mem.clone();
    let (dom, info) = open_domain();
    let t = rdm(&dom, &info);
    // SAFETY: `mem` outlives the domain; the test reads it only through `expect`.
    let mr = unsafe { dom.mr_reg(mem.as_mut_ptr(), RMA_CHUNK, MrAccess::REMOTE_READ, 0) }.unwrap();
    let (addr, key) = (mem.as_ptr() as u64, mr.key());
    let driver = Driver::start(t.cq.clone());

    // The hostile peer sends its requests, and from then on neither reads nor
    // acknowledges anything.
    let mut bad = Hostile::new(t.ep.getname().unwrap().sockaddr().unwrap());
    for id in 1..=REQUESTS {
        let h = Header {
            len: RMA_CHUNK as u64,
            flags: HdrFlags(HdrFlags::LAST),
            tag: addr,
            data: key,
            id,
            ..Header::new(OpCode::ReadReq)
        };
        bad.send(h.encode().to_vec());
    }
    let now = Instant::now();
    let sent = &bad.sent;
    let mut fill = |id: u64, off: usize, buf: &mut [u8]| match sent.get(&id) {
        Some(f) => buf.copy_from_slice(&f[off..off + buf.len()]),
        None => buf.fill(0),
    };
    while let Some(n) = bad.chan.poll_transmit(now, &mut bad.sbuf, &mut fill) {
        bad.sock.send_to(&bad.sbuf[..n], bad.target).expect("send a datagram");
    }

    // Meanwhile a well-behaved peer reads the same region.
    let good = rdm(&dom, &info);
    let to_t = good.av.insert(&[t.ep.getname().unwrap()]).unwrap()[0];
    let mut seen = vec![0u8; RMA_CHUNK];
    let ri = [IoVec { base: seen.as_mut_ptr(), len: RMA_CHUNK }];
    let rma = [RmaIov { addr, len: RMA_CHUNK, key }];
    let rop = RmaOp { iov: &ri, addr: to_t, rma: &rma, context: 9, user_context: 9, data: 0 };
    // SAFETY: `seen` outlives the completion waited for below.
    unsafe { good.ep.post_read(&rop, OpFlags::empty()) }.unwrap();
    let r = wait(&good.cq, &t.cq).expect("a well-behaved read next to a peer that acknowledges nothing");
    assert_eq!(r.op_context, 9);
    assert!(seen == expect, "the well-behaved read got other bytes");

    // Give the target time to take every request it is willing to take (before
    // the fix: all of them, 800 MiB of answers), well within the time after which
    // it gives a silent peer up.
    std::thread::sleep(Duration::from_secs(2));
    let high = answer_bytes_high_water();
    assert!(high <= ANSWER_BYTES_MAX, "{high} bytes of answers queued for one peer (bound {ANSWER_BYTES_MAX})");

    // Once the peer acknowledges, every request is answered, in order, with the
    // bytes.
    for id in 1..=REQUESTS {
        let (h, payload) = bad.wait_for("an answer", &driver, |_| true);
        assert_eq!((h.op, h.id, h.data), (OpCode::RmaResp, id, 0), "answer {id}");
        assert!(payload == expect, "answer {id} carries other bytes");
    }
    assert!(answer_bytes_high_water() <= ANSWER_BYTES_MAX);
    assert!(driver.finish().is_empty(), "the hostile peer completed something on the target's queue");
    mr.close().unwrap();
}
