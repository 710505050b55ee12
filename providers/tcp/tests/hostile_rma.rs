//! A hostile peer against the target side of RMA and atomics (issue 3): "a peer
//! sending hostile RMA requests (random keys, offsets, lengths) never gets bytes it
//! was not granted and never changes target memory it was not granted."
//!
//! A raw socket speaks the wire protocol to a tcp RDM endpoint: a valid hello,
//! then thousands of seeded random requests (right, wrong and closed keys;
//! addresses inside, around, across and far from the regions; lengths from 0 to
//! the wire limits and beyond; atomics with every operation, datatype, kind and
//! count, valid numbers or not). The test keeps a model of every region and
//! predicts each answer exactly: a granted request must succeed with exactly the
//! model's bytes, any other must fail with a nonzero status and no payload, a
//! frame outside the wire limits must get the connection closed. At the end the
//! canary bytes around every region, the read-only and closed regions and the
//! modelled regions are compared byte for byte, and the endpoint must still serve
//! a well-behaved peer.
//!
//! Reproduce a failure with its seed: `HOSTILE_RMA_SEED=<seed> cargo test -p
//! fabric-tcp --test hostile_rma`.

mod common;

use common::{wait, Driver};

use fabric_core::prov::{AvOps, CqOps, DomainOps, EndpointOps, IoVec, MrOps, Op, RmaOp};
use fabric_core::*;
use fabric_testkit::Rng;
use fabric_util::atomic::{apply_slice, lens};
use fabric_util::rma_target::OPS_MAX;
use fabric_util::wire::{AtomicHdr, HdrFlags, Header, OpCode, RmaDesc, ATOMIC_MAX, HDR_LEN, RMA_CHUNK};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Requests the hostile peer sends.
const REQUESTS: usize = 20_000;
/// The default seed of the request generator.
const SEED: u64 = 0x5EED_0F15_50E0_0003;
/// Canary bytes on each side of every registered region.
const GUARD: usize = 4096;
/// The size of the read-write region R.
const R_LEN: usize = 4096;
/// How long one answer (or one close) may take before the endpoint counts as hung.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(20);
/// The most bytes of request header plus payload of an atomic the wire allows.
const ATOMIC_FRAME_MAX: u64 = (RmaDesc::LEN + AtomicHdr::LEN + 2 * ATOMIC_MAX) as u64;

/// The canary byte at offset `i` of an allocation (never a region's byte: the
/// comparisons are exact anyway, this only makes a leak easy to recognise).
fn canary(i: usize) -> u8 {
    ((i as u32).wrapping_mul(2_654_435_761) >> 24) as u8 | 0x80
}

/// Memory the test holds only through a raw pointer (registered bytes must not sit
/// behind a Rust reference while the provider may write them): `GUARD` canary
/// bytes, the region's `len` bytes, `GUARD` canary bytes.
struct Guarded {
    base: *mut u8,
    total: usize,
    len: usize,
    /// What the whole allocation held at the start.
    init: Vec<u8>,
}

impl Guarded {
    fn new(len: usize, fill: impl Fn(usize) -> u8) -> Guarded {
        let total = GUARD + len + GUARD;
        let init: Vec<u8> =
            (0..total).map(|i| if (GUARD..GUARD + len).contains(&i) { fill(i - GUARD) } else { canary(i) }).collect();
        let base = Box::into_raw(init.clone().into_boxed_slice()).cast::<u8>();
        Guarded { base, total, len, init }
    }

    /// The first registered byte.
    fn start(&self) -> *mut u8 {
        self.base.wrapping_add(GUARD)
    }

    /// The registered bytes' initial contents.
    fn init_region(&self) -> &[u8] {
        &self.init[GUARD..GUARD + self.len]
    }

    /// A copy of the whole allocation.
    ///
    /// # Safety
    /// No region over these bytes may be open (nothing else may write them).
    unsafe fn snapshot(&self) -> Vec<u8> {
        // SAFETY: `base..base+total` is our live allocation; the caller guarantees
        // nobody writes it meanwhile.
        unsafe { std::slice::from_raw_parts(self.base, self.total) }.to_vec()
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: `base` and `total` come from `Box::into_raw` of a boxed slice of
        // that length in `new`, freed only here. Every `Guarded` is declared before
        // the domain and endpoint in the tests, so it is dropped after them (even
        // when unwinding) and no region over it can be reached any more.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.base, self.total)) });
    }
}

/// What the test knows of one region: where it is, its key and access, whether it
/// is open, and what its bytes must be.
struct Region {
    name: &'static str,
    key: u64,
    addr: u64,
    len: usize,
    access: MrAccess,
    open: bool,
    model: Vec<u8>,
}

/// The region and offset a request may touch, if the registry's documented rule
/// grants it: an open region with this key, all of `need`, and
/// `addr - base <= len` and `want <= len - (addr - base)` without wrapping.
fn grant(regions: &[Region], key: u64, addr: u64, want: u64, need: MrAccess) -> Option<(usize, usize)> {
    let i = regions.iter().position(|r| r.open && r.key == key)?;
    let r = &regions[i];
    if !r.access.contains(need) {
        return None;
    }
    let off = addr.checked_sub(r.addr)?;
    let size = r.len as u64;
    if off > size || want > size - off {
        return None;
    }
    Some((i, off as usize))
}

/// What the endpoint must do with a request.
#[derive(Debug)]
enum Expect {
    /// Answer with status 0 and exactly these bytes.
    Ok(Vec<u8>),
    /// Answer with a nonzero status and no payload.
    Refused,
    /// Close the connection without answering.
    Closed,
}

/// One request: its frame, a description for failure messages, and the answer the
/// model predicts. Effects of a granted request are applied to the model when the
/// request is made.
struct Req {
    frame: Vec<u8>,
    id: u64,
    what: String,
    expect: Expect,
}

/// The hostile peer's request generator and model.
struct Hostile {
    rng: Rng,
    regions: Vec<Region>,
    /// Random bytes that huge write payloads are cut from.
    noise: Vec<u8>,
    next_id: u64,
}

impl Hostile {
    /// A key, and the region whose addresses go with it: mostly a real region's key,
    /// sometimes a random one, a near miss, or a well-known value.
    fn pick_key(&mut self) -> (u64, usize) {
        let i = match self.rng.below(20) {
            0..=11 => 0,
            12..=14 => 1,
            15..=17 => 2,
            _ => 3,
        };
        let real = self.regions[i].key;
        let key = match self.rng.below(24) {
            0..=19 => real,
            20 => self.rng.next(),
            21 => real ^ (1u64 << self.rng.below(64)),
            22 => real.wrapping_add(1),
            _ => [0, u64::MAX, 1, real.rotate_left(32)][self.rng.below(4) as usize],
        };
        (key, i)
    }

    /// An address for `want` bytes around region `i`: inside, flush with its end,
    /// just below, just above, straddling its start, near `u64::MAX`, or anywhere.
    fn pick_addr(&mut self, i: usize, want: u64) -> u64 {
        let (base, len) = (self.regions[i].addr, self.regions[i].len as u64);
        match self.rng.below(28) {
            0..=13 => base + self.rng.below(len + 1),
            14..=15 => base.wrapping_sub(1 + self.rng.below(16)),
            16..=17 => base + len + self.rng.below(17),
            18..=19 => base.wrapping_sub(self.rng.below(want.saturating_add(1))),
            20..=23 => (base + len).wrapping_sub(want),
            24 => u64::MAX - self.rng.below(8193),
            25 => self.rng.below(1 << 20),
            26 => base.wrapping_add(self.rng.next() >> self.rng.below(64)),
            _ => self.rng.next(),
        }
    }

    /// A length: mostly 0..=8192, sometimes tiny, the whole region, around it, or
    /// (one in `huge_odds`) anything up to `max`.
    fn pick_len(&mut self, i: usize, max: u64, huge_odds: u64) -> u64 {
        let len = self.regions[i].len as u64;
        if self.rng.chance(1.0 / huge_odds as f64) {
            return max - self.rng.below(max.min(1 << 16));
        }
        match self.rng.below(20) {
            0..=5 => self.rng.below(8193),
            6..=10 => self.rng.below(len + 1),
            11..=13 => self.rng.below(17),
            14..=15 => len,
            16..=17 => len + 1 - self.rng.below(3).min(len),
            _ => self.rng.below(len + 2),
        }
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn next_req(&mut self) -> Req {
        match self.rng.below(200) {
            0..=71 => self.write_req(),
            72..=143 => self.read_req(),
            144..=196 => self.atomic_req(),
            _ => self.bad_frame(),
        }
    }

    fn write_req(&mut self) -> Req {
        let id = self.id();
        let (key, i) = self.pick_key();
        let n = self.pick_len(i, RMA_CHUNK as u64, 400);
        let addr = self.pick_addr(i, n);
        let n = n as usize;
        let mut data = vec![0u8; n];
        if n <= 8192 {
            self.rng.fill(&mut data);
        } else {
            let from = self.rng.below((self.noise.len() - n + 1) as u64) as usize;
            data.copy_from_slice(&self.noise[from..from + n]);
        }
        let cq_data = self.rng.chance(0.1);
        // A single-request operation, as the protocol sends one: LAST, and the
        // whole length in `tag`.
        let h = Header {
            len: (RmaDesc::LEN + n) as u64,
            flags: HdrFlags(HdrFlags::LAST | if cq_data { HdrFlags::CQ_DATA } else { 0 }),
            tag: n as u64,
            data: if cq_data { self.rng.next() } else { 0 },
            id,
            ..Header::new(OpCode::WriteReq)
        };
        let mut frame = h.encode().to_vec();
        frame.extend_from_slice(&RmaDesc { addr, key }.encode());
        frame.extend_from_slice(&data);
        let expect = match grant(&self.regions, key, addr, n as u64, MrAccess::REMOTE_WRITE) {
            Some((r, off)) => {
                self.regions[r].model[off..off + n].copy_from_slice(&data);
                Expect::Ok(Vec::new())
            }
            None => Expect::Refused,
        };
        let what = format!("write of {n} bytes at {addr:#x} key {key:#x} (near {})", self.regions[i].name);
        Req { frame, id, what, expect }
    }

    fn read_req(&mut self) -> Req {
        let id = self.id();
        let (key, i) = self.pick_key();
        let n = self.pick_len(i, RMA_CHUNK as u64, 100);
        let addr = self.pick_addr(i, n);
        let h = Header {
            len: n,
            flags: HdrFlags(HdrFlags::LAST),
            tag: addr,
            data: key,
            id,
            ..Header::new(OpCode::ReadReq)
        };
        let expect = match grant(&self.regions, key, addr, n, MrAccess::REMOTE_READ) {
            Some((r, off)) => Expect::Ok(self.regions[r].model[off..off + n as usize].to_vec()),
            None => Expect::Refused,
        };
        let what = format!("read of {n} bytes at {addr:#x} key {key:#x} (near {})", self.regions[i].name);
        Req { frame: h.encode().to_vec(), id, what, expect }
    }

    fn atomic_req(&mut self) -> Req {
        let id = self.id();
        let (key, i) = self.pick_key();
        let kind_n = if self.rng.chance(39.0 / 40.0) { self.rng.below(3) as u8 } else { 3 + self.rng.below(253) as u8 };
        // Mostly an operation the kind of call takes, sometimes any, sometimes none.
        let op_n = match self.rng.below(10) {
            0..=6 => match kind_n {
                0 => [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11][self.rng.below(11) as usize],
                1 => self.rng.below(12) as u8,
                _ => 12 + self.rng.below(7) as u8,
            },
            7..=8 => self.rng.below(19) as u8,
            _ => self.rng.next() as u8,
        };
        let dt_n = if self.rng.chance(0.9) { self.rng.below(10) as u8 } else { self.rng.next() as u8 };
        let (op, dt) = (AtomicOp::from_u8(op_n), Datatype::from_u8(dt_n));
        let size = dt.map_or(1 + self.rng.below(8), |d| d.size() as u64);
        let max = 4096 / size;
        let count: u32 = match self.rng.below(20) {
            0..=1 => 0,
            2..=13 => 1 + self.rng.below(8) as u32,
            14..=15 => 1 + self.rng.below(max + 1) as u32,
            16..=17 => (max + self.rng.below(16)) as u32,
            _ => self.rng.next() as u32 >> self.rng.below(32),
        };
        let bytes = u64::from(count) * size;
        let addr = self.pick_addr(i, bytes);
        // The operands the request must carry for its count, and sometimes not.
        let operand_len = if op == Some(AtomicOp::Read) { 0 } else { bytes };
        let compare_len = if kind_n == 2 { bytes } else { 0 };
        let mut args_len = operand_len + compare_len;
        let honest = self.rng.chance(0.95);
        if !honest {
            args_len = (args_len + 1 + self.rng.below(16)).saturating_sub(self.rng.below(32));
        }
        let frame_len = (RmaDesc::LEN + AtomicHdr::LEN) as u64 + args_len;
        let mut args = vec![0u8; args_len.min(ATOMIC_FRAME_MAX) as usize];
        self.rng.fill(&mut args);
        let need = match (kind_n, op) {
            (0, _) => MrAccess::REMOTE_WRITE,
            (_, Some(AtomicOp::Read)) => MrAccess::REMOTE_READ,
            _ => MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
        };
        let target = grant(&self.regions, key, addr, bytes, need);
        if let (Some((r, off)), true, true) = (target, kind_n == 2, args.len() as u64 == args_len) {
            // Compare with the current value half of the time, so swaps happen.
            if self.rng.chance(0.5) && operand_len + compare_len == args_len {
                let cur = &self.regions[r].model[off..off + bytes as usize];
                args[operand_len as usize..].copy_from_slice(cur);
            }
        }
        let what = format!(
            "atomic op {op_n} datatype {dt_n} kind {kind_n} count {count} with {args_len} bytes of operands at \
             {addr:#x} key {key:#x} (near {})",
            self.regions[i].name
        );
        let ah = AtomicHdr { op: op_n, datatype: dt_n, kind: kind_n, count };
        let h = Header { len: frame_len, id, ..Header::new(OpCode::AtomicReq) };
        let mut frame = h.encode().to_vec();
        if frame_len > ATOMIC_FRAME_MAX {
            // Over the wire limit: the header alone must get the connection closed.
            return Req { frame, id, what, expect: Expect::Closed };
        }
        frame.extend_from_slice(&RmaDesc { addr, key }.encode());
        frame.extend_from_slice(&ah.encode());
        frame.extend_from_slice(&args);
        let expect = match (op, dt) {
            (Some(op), Some(dt)) => {
                if kind_n > 2 || args_len != operand_len + compare_len {
                    Expect::Closed
                } else {
                    let kind = [AtomicKind::Plain, AtomicKind::Fetch, AtomicKind::Compare][kind_n as usize];
                    match (lens(op, dt, kind, count as usize), target) {
                        (Ok(l), Some((r, off))) => {
                            let (operand, compare) = args.split_at(l.operand);
                            let mut result = vec![0u8; l.result];
                            let t = &mut self.regions[r].model[off..off + l.target];
                            apply_slice(op, dt, kind, t, operand, compare, &mut result).expect("the model's atomic");
                            Expect::Ok(result)
                        }
                        _ => Expect::Refused,
                    }
                }
            }
            // An operation or datatype number that does not exist: refused (before
            // the kind and the operands are looked at).
            _ => Expect::Refused,
        };
        Req { frame, id, what, expect }
    }

    /// A frame outside the wire's limits or the protocol: the endpoint must close
    /// the connection.
    fn bad_frame(&mut self) -> Req {
        let id = self.id();
        let big = |rng: &mut Rng, min: u64| min + (rng.next() >> rng.below(64)).min(u64::MAX - min);
        let (h, what) = match self.rng.below(8) {
            0 => {
                let len = big(&mut self.rng, (RmaDesc::LEN + RMA_CHUNK) as u64 + 1);
                (Header { len, id, ..Header::new(OpCode::WriteReq) }, format!("write frame of {len} bytes"))
            }
            1 => {
                let len = self.rng.below(RmaDesc::LEN as u64);
                (Header { len, id, ..Header::new(OpCode::WriteReq) }, format!("write frame of {len} bytes"))
            }
            2 => {
                let len = big(&mut self.rng, RMA_CHUNK as u64 + 1);
                (Header { len, id, ..Header::new(OpCode::ReadReq) }, format!("read of {len} bytes"))
            }
            3 => {
                let len = big(&mut self.rng, ATOMIC_FRAME_MAX + 1);
                (Header { len, id, ..Header::new(OpCode::AtomicReq) }, format!("atomic frame of {len} bytes"))
            }
            4 => {
                let len = self.rng.below((RmaDesc::LEN + AtomicHdr::LEN) as u64);
                (Header { len, id, ..Header::new(OpCode::AtomicReq) }, format!("atomic frame of {len} bytes"))
            }
            5 => {
                // Bits above every defined flag (TAGGED, CQ_DATA, LAST).
                let flags = 8 << self.rng.below(28);
                let h = Header { len: 16, flags: HdrFlags(flags), id, ..Header::new(OpCode::WriteReq) };
                (h, format!("write with flags {flags:#x}"))
            }
            6 => (Header { id: id | 1 << 63, ..Header::new(OpCode::RmaResp) }, "answer to no request".to_string()),
            _ => (Header { id: 77, ..Header::new(OpCode::HelloAck) }, "second hello ack".to_string()),
        };
        let mut frame = h.encode().to_vec();
        if h.op == OpCode::WriteReq && h.len == 16 {
            frame.extend_from_slice(&[0u8; 16]);
        }
        Req { frame, id, what, expect: Expect::Closed }
    }
}

/// Read one frame: header and payload.
fn read_frame(s: &mut TcpStream) -> std::io::Result<(Header, Vec<u8>)> {
    let mut hb = [0u8; HDR_LEN];
    s.read_exact(&mut hb)?;
    let h = Header::decode(&hb, u64::MAX)
        .map_err(|e| std::io::Error::new(ErrorKind::InvalidData, format!("bad frame from the endpoint: {e}")))?;
    let mut payload = vec![0u8; h.payload_len() as usize];
    s.read_exact(&mut payload)?;
    Ok((h, payload))
}

/// The hostile peer's connection: a raw socket that said hello under a made-up
/// name.
struct Peer {
    target: SocketAddr,
    name: String,
    epoch: u64,
    sock: TcpStream,
}

impl Peer {
    fn connect(target: SocketAddr, name: String, epoch: u64) -> Peer {
        let mut sock = TcpStream::connect(target).expect("connect to the endpoint");
        sock.set_nodelay(true).unwrap();
        sock.set_read_timeout(Some(ANSWER_TIMEOUT)).unwrap();
        let h =
            Header { len: name.len() as u64, tag: name.len() as u64, data: 0, id: epoch, ..Header::new(OpCode::Hello) };
        sock.write_all(&h.encode()).unwrap();
        sock.write_all(name.as_bytes()).unwrap();
        let (ack, _) = read_frame(&mut sock).expect("the endpoint answers the hello");
        assert_eq!(ack.op, OpCode::HelloAck, "{ack:?}");
        Peer { target, name, epoch, sock }
    }

    fn reconnect(&mut self) {
        *self = Peer::connect(self.target, self.name.clone(), self.epoch + 1);
    }

    /// Wait until the endpoint closes the connection; nothing may come before.
    fn expect_closed(&mut self, what: &str, driver: &Driver) {
        let start = Instant::now();
        self.sock.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let mut b = [0u8; 64];
        loop {
            match self.sock.read(&mut b) {
                Ok(0) => break,
                Ok(n) => panic!("{what}: the endpoint answered ({n} bytes: {:?}) instead of closing", &b[..n]),
                Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) => panic!("{what}: {e}"),
            }
            assert!(driver.alive(), "{what}: the endpoint's progress died");
            assert!(start.elapsed() < ANSWER_TIMEOUT, "{what}: the endpoint did not close the connection");
        }
    }
}

/// The endpoint under attack and its regions, opened through the provider traits.
struct Target {
    dom: Arc<dyn DomainOps>,
    cq: Arc<dyn CqOps>,
    av: Arc<dyn AvOps>,
    ep: Arc<dyn EndpointOps>,
}

fn open_rdm(fabric: &Arc<dyn prov::FabricOps>, info: &Info) -> Target {
    let dom = fabric.domain(info).unwrap();
    let common::Rdm { cq, av, ep } = common::rdm_endpoint(&dom, info);
    Target { dom, cq, av, ep }
}

fn rdm_info() -> (Arc<dyn prov::FabricOps>, Info) {
    let p = fabric_tcp::provider();
    let info = p.getinfo(&Hints::new().ep_type(EpType::Rdm).node("127.0.0.1").source(true)).unwrap()[0].clone();
    (p.fabric(&info).unwrap(), info)
}

/// Register `mem`'s region.
fn register(dom: &Arc<dyn DomainOps>, mem: &Guarded, access: MrAccess) -> Arc<dyn MrOps> {
    // SAFETY: the bytes are `mem`'s allocation, which outlives the domain (declared
    // before it, see `Guarded`'s drop); the test makes no reference to them until
    // the region is closed.
    unsafe { dom.mr_reg(mem.start(), mem.len, access, 0) }.unwrap()
}

/// A made-up name for the hostile peer: a port we hold but never accept on.
fn made_up_name() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let name = format!("127.0.0.1:{}", l.local_addr().unwrap().port());
    (l, name)
}

#[test]
fn hostile_rma_requests_stay_inside_what_was_granted() {
    let seed = std::env::var("HOSTILE_RMA_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(SEED);
    println!("seed {seed} (set HOSTILE_RMA_SEED to replay)");
    // The memory first, so it is freed after everything that could reach it.
    let r_mem = Guarded::new(R_LEN, |i| (i * 7 + 3) as u8);
    let ro_mem = Guarded::new(1000, |i| (i * 13 + 1) as u8);
    let wo_mem = Guarded::new(777, |i| (i * 17 + 5) as u8);
    let closed_mem = Guarded::new(512, |_| 0x5A);
    let (fabric, info) = rdm_info();
    let t = open_rdm(&fabric, &info);
    let rw = MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE;
    let r_mr = register(&t.dom, &r_mem, rw);
    let ro_mr = register(&t.dom, &ro_mem, MrAccess::REMOTE_READ);
    let wo_mr = register(&t.dom, &wo_mem, MrAccess::REMOTE_WRITE);
    let closed_mr = register(&t.dom, &closed_mem, rw);
    closed_mr.close().unwrap();
    let region = |name, mr: &Arc<dyn MrOps>, mem: &Guarded, access, open| Region {
        name,
        key: mr.key(),
        addr: mem.start() as u64,
        len: mem.len,
        access,
        open,
        model: mem.init_region().to_vec(),
    };
    let mut noise = vec![0u8; RMA_CHUNK + 8192];
    let mut rng = Rng::new(seed);
    rng.fill(&mut noise);
    let mut h = Hostile {
        rng,
        regions: vec![
            region("R", &r_mr, &r_mem, rw, true),
            region("read-only", &ro_mr, &ro_mem, MrAccess::REMOTE_READ, true),
            region("write-only", &wo_mr, &wo_mem, MrAccess::REMOTE_WRITE, true),
            region("closed", &closed_mr, &closed_mem, rw, false),
        ],
        noise,
        next_id: 0,
    };

    let driver = Driver::start(t.cq.clone());
    let target = t.ep.getname().unwrap().sockaddr().unwrap();
    let (_hold, name) = made_up_name();
    let mut peer = Peer::connect(target, name, 1000);
    // Answers by request kind (write, read, atomic, other) and outcome (granted,
    // refused, closed).
    let mut tally = [[0usize; 3]; 4];
    for n in 0..REQUESTS {
        let req = h.next_req();
        let what = format!("request {n} (seed {seed}): {}", req.what);
        let kind = match req.frame[2] {
            k if k == OpCode::WriteReq as u8 => 0,
            k if k == OpCode::ReadReq as u8 => 1,
            k if k == OpCode::AtomicReq as u8 => 2,
            _ => 3,
        };
        let sent = peer.sock.write_all(&req.frame);
        match req.expect {
            Expect::Closed => {
                // The endpoint may close before it has read all of the frame.
                let _ = sent;
                peer.expect_closed(&what, &driver);
                peer.reconnect();
                tally[kind][2] += 1;
                continue;
            }
            _ => sent.unwrap_or_else(|e| panic!("{what}: sending failed: {e}")),
        }
        let (resp, payload) = match read_frame(&mut peer.sock) {
            Ok(x) => x,
            Err(e) if !driver.alive() => panic!("{what}: the endpoint's progress died ({e})"),
            Err(e) => panic!("{what}: no answer ({e}); expected {:?}", req.expect),
        };
        assert_eq!(resp.op, OpCode::RmaResp, "{what}: {resp:?}");
        assert_eq!(resp.id, req.id, "{what}: answer to another request");
        match req.expect {
            Expect::Ok(want) => {
                assert_eq!(resp.data, 0, "{what}: refused (status {}) although granted", resp.data);
                assert!(payload == want, "{what}: answered {} bytes that are not the region's", payload.len());
                tally[kind][0] += 1;
            }
            Expect::Refused => {
                assert!(
                    resp.data != 0,
                    "{what}: NOT GRANTED but answered with success and {} bytes, starting {:02x?}",
                    payload.len(),
                    &payload[..payload.len().min(16)]
                );
                assert!(payload.is_empty(), "{what}: refused (status {}) with {} bytes", resp.data, payload.len());
                tally[kind][1] += 1;
            }
            Expect::Closed => unreachable!(),
        }
    }
    println!("[granted, refused, closed] of writes, reads, atomics, other frames: {tally:?}");
    for (kind, t) in tally.iter().enumerate().take(3) {
        assert!(t[0] >= 500 && t[1] >= 500, "the mix tests too little: {kind} {t:?}");
    }
    assert!(tally.iter().map(|t| t[2]).sum::<usize>() >= 100, "the mix closes too few connections");
    let odd = driver.finish();
    assert!(odd.is_empty(), "hostile requests completed something on the target's queue: {odd:?}");

    // A well-behaved peer is still served: a tagged message, and a read of R that
    // must see the model.
    let good = open_rdm(&fabric, &info);
    let to_t = good.av.insert(&[t.ep.getname().unwrap()]).unwrap()[0];
    let mut msg = b"still serving".to_vec();
    let mut got = vec![0u8; 64];
    let si = [IoVec { base: msg.as_mut_ptr(), len: msg.len() }];
    let ri = [IoVec { base: got.as_mut_ptr(), len: got.len() }];
    let op = |iov, addr, context| Op { iov, addr, context, user_context: context, data: 0, tag: 0x600D, ignore: 0 };
    // SAFETY: both buffers outlive the completions waited for below.
    unsafe {
        t.ep.post_recv(&op(&ri, FiAddr::UNSPEC, 1), OpFlags::TAGGED).unwrap();
        good.ep.post_send(&op(&si, to_t, 2), OpFlags::TAGGED).unwrap();
    }
    let r = wait(&t.cq, &good.cq).expect("the well-behaved peer's message");
    assert_eq!(&got[..r.len], b"still serving");
    wait(&good.cq, &t.cq).expect("the well-behaved send completes");
    let mut seen = vec![0u8; R_LEN];
    let li = [IoVec { base: seen.as_mut_ptr(), len: R_LEN }];
    let rma = [RmaIov { addr: h.regions[0].addr, len: R_LEN, key: h.regions[0].key }];
    let rop = RmaOp { iov: &li, addr: to_t, rma: &rma, context: 3, user_context: 3, data: 0 };
    // SAFETY: `seen` outlives the completion waited for below.
    unsafe { good.ep.post_read(&rop, OpFlags::empty()) }.unwrap();
    wait(&good.cq, &t.cq).expect("the well-behaved read");
    assert!(seen == h.regions[0].model, "a well-behaved read of R does not see what was written");

    // Nothing outside what was granted changed.
    for mr in [&r_mr, &ro_mr, &wo_mr] {
        mr.close().unwrap();
    }
    for (mem, reg) in [(&r_mem, 0), (&ro_mem, 1), (&wo_mem, 2), (&closed_mem, 3)] {
        let name = h.regions[reg].name;
        // SAFETY: every region is closed: nobody writes the memory any more.
        let now = unsafe { mem.snapshot() };
        let (before, rest) = now.split_at(GUARD);
        let (inside, after) = rest.split_at(mem.len);
        assert!(before == &mem.init[..GUARD], "canary before {name} changed");
        assert!(after == &mem.init[GUARD + mem.len..], "canary after {name} changed");
        assert!(inside == h.regions[reg].model, "{name} differs from the model");
    }
    assert!(h.regions[1].model == ro_mem.init_region(), "the model wrote the read-only region");
    assert!(h.regions[3].model == closed_mem.init_region(), "the model wrote the closed region");
    drop(peer);
}

/// An atomic read (a fetch of `FI_ATOMIC_READ`, which carries no operands) with a
/// count far above what any region or the atomic limit allows must be refused, and
/// the endpoint must keep working.
#[test]
fn atomic_read_with_a_huge_count_is_refused() {
    let r_mem = Guarded::new(R_LEN, |i| i as u8);
    let (fabric, info) = rdm_info();
    let t = open_rdm(&fabric, &info);
    let r_mr = register(&t.dom, &r_mem, MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE);
    let driver = Driver::start(t.cq.clone());
    let (_hold, name) = made_up_name();
    let mut peer = Peer::connect(t.ep.getname().unwrap().sockaddr().unwrap(), name, 1);
    for (id, count) in [(1u64, u32::MAX), (2, 1 << 31), (3, 1 << 29), (4, 513)] {
        let ah = AtomicHdr { op: AtomicOp::Read as u8, datatype: Datatype::Uint64 as u8, kind: 1, count };
        let h = Header { len: (RmaDesc::LEN + AtomicHdr::LEN) as u64, id, ..Header::new(OpCode::AtomicReq) };
        let mut frame = h.encode().to_vec();
        frame.extend_from_slice(&RmaDesc { addr: r_mem.start() as u64, key: r_mr.key() }.encode());
        frame.extend_from_slice(&ah.encode());
        peer.sock.write_all(&frame).unwrap();
        let (resp, payload) =
            read_frame(&mut peer.sock).unwrap_or_else(|e| panic!("no answer to an atomic read of {count}: {e}"));
        assert_eq!((resp.op, resp.id), (OpCode::RmaResp, id));
        assert!(resp.data != 0 && payload.is_empty(), "count {count}: {resp:?}");
    }
    assert!(driver.alive());
    driver.finish();
    r_mr.close().unwrap();
}

/// A peer opening RMA operations without end (requests without `LAST`) may keep
/// `rma_target::OPS_MAX` open, without costing any other peer anything: a
/// well-behaved peer meanwhile writes an operation of several requests. One more
/// and the hostile peer is disconnected; the well-behaved one is still served.
#[test]
fn a_peer_opening_operations_without_end_is_disconnected() {
    const LEN: usize = RMA_CHUNK + 4096;
    // The memory first, so it is freed after the domain.
    let mut mem = vec![0u8; LEN];
    let (fabric, info) = rdm_info();
    let t = open_rdm(&fabric, &info);
    // SAFETY: `mem` outlives the domain, and the test makes no reference to it
    // until the region is closed.
    let mr = unsafe { t.dom.mr_reg(mem.as_mut_ptr(), LEN, MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, 0) }.unwrap();
    let (addr, key) = (mem.as_ptr() as u64, mr.key());
    let driver = Driver::start(t.cq.clone());
    let (_hold, name) = made_up_name();
    let mut peer = Peer::connect(t.ep.getname().unwrap().sockaddr().unwrap(), name, 1);
    // A read request of one byte that leaves its operation open.
    let open_read = |id: u64| Header { len: 1, tag: addr, data: key, id, ..Header::new(OpCode::ReadReq) }.encode();
    for id in 1..=OPS_MAX as u64 {
        peer.sock.write_all(&open_read(id)).unwrap();
        let (resp, payload) = read_frame(&mut peer.sock).unwrap_or_else(|e| panic!("no answer to request {id}: {e}"));
        assert_eq!((resp.op, resp.id, resp.data, payload.len()), (OpCode::RmaResp, id, 0, 1), "request {id}");
    }

    // Meanwhile a well-behaved peer's operations in several requests go through.
    let good = open_rdm(&fabric, &info);
    let to_t = good.av.insert(&[t.ep.getname().unwrap()]).unwrap()[0];
    let mut src: Vec<u8> = (0..LEN).map(|i| (i * 31 + 7) as u8).collect();
    let mut seen = vec![0u8; LEN];
    let rma = [RmaIov { addr, len: LEN, key }];
    let wi = [IoVec { base: src.as_mut_ptr(), len: LEN }];
    let ri = [IoVec { base: seen.as_mut_ptr(), len: LEN }];
    let wop = RmaOp { iov: &wi, addr: to_t, rma: &rma, context: 1, user_context: 1, data: 0 };
    // SAFETY: `src` outlives the completion waited for below.
    unsafe { good.ep.post_write(&wop, OpFlags::empty()) }.unwrap();
    let w = wait(&good.cq, &t.cq).expect("a well-behaved write of several requests, next to a peer at the cap");
    assert_eq!(w.op_context, 1);

    // One more operation, and the hostile peer is disconnected.
    let _ = peer.sock.write_all(&open_read(u64::MAX));
    peer.expect_closed("operation over the cap", &driver);
    assert!(driver.finish().is_empty(), "the hostile peer completed something on the target's queue");

    // The well-behaved peer is still served, and sees what it wrote.
    let rop = RmaOp { iov: &ri, addr: to_t, rma: &rma, context: 2, user_context: 2, data: 0 };
    // SAFETY: `seen` outlives the completion waited for below.
    unsafe { good.ep.post_read(&rop, OpFlags::empty()) }.unwrap();
    let r = wait(&good.cq, &t.cq).expect("a well-behaved read after the hostile peer was cut off");
    assert_eq!(r.op_context, 2);
    assert!(seen == src, "the well-behaved read does not see the well-behaved write");
    mr.close().unwrap();
}
