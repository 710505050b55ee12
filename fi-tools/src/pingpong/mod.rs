//! `fi_pingpong`: libfabric's ping-pong latency test over fabric.
//!
//! Both processes are started with the same options; the server without an
//! address, the client with the server's. They meet on a plain TCP control
//! connection ([`crate::oob`], port 47592 by default), agree on the test there,
//! exchange fabric addresses (RDM, DGRAM) or connect (MSG: the server listens on a
//! passive endpoint whose address it sends), and synchronise before every size. For
//! each size the client sends, the server echoes, `-I` times; both time their loop
//! and print libfabric's table ([`report`]).
//!
//! The data path posts every receive before the matching send can arrive, reuses
//! the two buffers that come back in completions (sized once for the largest
//! message; registered with the domain where libfabric's `fi_pingpong` registers
//! them, see [`registers`]), busy-polls the completion queue with `read_one`, uses
//! `inject` below the provider's inject size as libfabric does, and allocates
//! nothing per iteration. A watchdog in every poll loop turns a dead peer (end of
//! the control connection, a shutdown event, an error completion) or a stall (no
//! completion for `--timeout`, 10 s) into a message and a non-zero exit, never a
//! hang.
//!
//! The control protocol (text messages, one per frame):
//!
//! ```text
//! C: HELLO fabric-pingpong/1 ep=rdm mode=msg            (what the client runs)
//! S: OK prov=tcp max_msg=N name=<server's address>      (or ERR <why>)
//! C: PLAN iters=10 warmup=0 check=0 sizes=64,256,... name=<client's address or ->
//!    (MSG: the client connects; the server accepts)
//! S: READY
//! per size:  C: SYNC <size>   S: GO   (ping-pong)   C: DONE <pongs received>   S: ACK
//! C: BYE     S: BYE
//! ```

pub mod opts;
pub mod report;

use self::opts::PpOpts;
use crate::common::{self, debug};
pub use crate::link::field;
use crate::link::{ctrl_send, ep_name, next_completion, Failure, Objects, Res, Watch};
use crate::oob::Ctrl;
use crate::pattern::Pattern;
use crate::sizes::{self, SizeSel};
use fabric::{
    Address, Buf, Caps, Completion, CompletionQueue, CqAttr, CqFormat, Endpoint, Error, EventQueue, FiAddr, Hints,
    Info, MrMode, OpBuffers, OpFlags, PostError, PostResult, RecvMsg, RegisteredBuf, SendMsg,
};
use std::time::{Duration, Instant};

/// The protocol name in `HELLO`.
const PROTO: &str = "fabric-pingpong/1";
/// Context of the send.
const TX_CTX: u64 = 1;
/// Context of the receive.
const RX_CTX: u64 = 2;
/// The tag of tagged messages.
const TAG: u64 = 0xC0DE;
/// Run `fi_pingpong` with these arguments (without the program name); the exit
/// status.
pub fn main_with_args(args: Vec<String>) -> i32 {
    common::main_with(opts::USAGE, opts::parse_args(args), client, server)
}

/// Receive a message that must start with `word`; an `ERR` from the peer becomes
/// the failure.
fn ctrl_expect(ctrl: &mut Ctrl, word: &str) -> Res<String> {
    common::ctrl_expect(ctrl, word, "fi_pingpong")
}

fn base_hints(o: &PpOpts) -> Hints {
    common::base_hints(o, if o.tagged { Caps::TAGGED } else { Caps::MSG })
}

fn getinfo(o: &PpOpts, h: &Hints) -> Res<Info> {
    common::getinfo(o, h, &"pingpong", &|_| {})
}

fn cq_attr(info: &Info) -> CqAttr {
    let size = info.tx_attr.size.max(info.rx_attr.size).clamp(16, 1024);
    CqAttr { size, format: CqFormat::Tagged, ..Default::default() }
}

/// The agreed test, as the client's `PLAN` message carries it. Public only for the
/// fuzz targets and tests of the control messages.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Iterations per size.
    pub iterations: u64,
    /// Warm-up iterations per size.
    pub warmup: u64,
    /// Whether data is checked.
    pub check: bool,
    /// The sizes, in order.
    pub sizes: Vec<usize>,
}

/// The most sizes a plan may list (`-S all` lists fewer).
const MAX_PLAN_SIZES: usize = 64;

impl Plan {
    /// The `PLAN` message, with the client's fabric address if it has one.
    pub fn encode(&self, name: Option<&Address>) -> String {
        let sizes: Vec<String> = self.sizes.iter().map(|s| s.to_string()).collect();
        let name = name.map(|a| a.to_uri()).unwrap_or_else(|| "-".into());
        format!(
            "PLAN iters={} warmup={} check={} sizes={} name={name}",
            self.iterations,
            self.warmup,
            u8::from(self.check),
            sizes.join(",")
        )
    }

    /// The plan and the client's fabric address in a `PLAN` message; `None` if it
    /// is malformed, lists more than 64 sizes or a size above `max_size` (the
    /// server's largest message: it allocates a buffer of the largest size, so
    /// nothing a peer sends may make it allocate more).
    pub fn decode(msg: &str, max_size: usize) -> Option<(Plan, Option<String>)> {
        let iterations = field(msg, "iters")?.parse().ok()?;
        let warmup = field(msg, "warmup")?.parse().ok()?;
        let check = field(msg, "check")? == "1";
        let s = field(msg, "sizes")?;
        if s.split(',').count() > MAX_PLAN_SIZES {
            return None;
        }
        let sizes = if s.is_empty() {
            Vec::new()
        } else {
            s.split(',').map(|x| x.parse().ok().filter(|&n| n <= max_size)).collect::<Option<_>>()?
        };
        let name = field(msg, "name").filter(|n| *n != "-").map(str::to_string);
        Some((Plan { iterations, warmup, check, sizes }, name))
    }
}

// ---------------------------------------------------------------- output

/// Print the row of one size on standard output, after the header if it is the
/// first (`header` says whether it has been printed), and flush.
fn print_row(header: &mut bool, size: usize, sent: u64, acked: u64, elapsed: Duration) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if !*header {
        let _ = writeln!(out, "{}", report::HEADER);
        *header = true;
    }
    if let Some(row) = report::perf_row(size, sent, acked, elapsed, 2) {
        let _ = writeln!(out, "{row}");
    }
    let _ = out.flush();
}

// ---------------------------------------------------------------- server

fn server(o: &PpOpts) -> Res<()> {
    common::serve_control(o, |ctrl| server_run(o, ctrl))
}

fn server_run(o: &PpOpts, ctrl: &mut Ctrl) -> Res<()> {
    let hello = common::expect_hello(ctrl, PROTO, "fi_pingpong")?;
    let (c_ep, c_mode) = (field(&hello, "ep").unwrap_or(""), field(&hello, "mode").unwrap_or(""));
    let my_mode = if o.tagged { "tagged" } else { "msg" };
    if c_ep != ep_name(o.ep_type) || c_mode != my_mode {
        return Err(Failure::new(format!(
            "the client runs -e {c_ep} -m {c_mode}, the server -e {} -m {my_mode}: give both the same options",
            ep_name(o.ep_type)
        )));
    }

    let info = getinfo(o, &common::server_hints(ctrl, base_hints(o))?)?;
    let max_msg = info.ep_attr.max_msg_size;
    let prov = info.fabric_attr.prov_name.clone();

    let (listening, name) = common::server_listen(o, info, &cq_attr)?;
    ctrl_send(ctrl, &format!("OK prov={prov} max_msg={max_msg} name={}", name.to_uri()))?;

    let plan_msg = ctrl_expect(ctrl, "PLAN")?;
    let (plan, peer_name) = Plan::decode(&plan_msg, max_msg)
        .ok_or_else(|| Failure::new(format!("malformed plan from the client: {plan_msg:?}")))?;
    warn_plan_differs(o, &plan, max_msg);

    let (objs, peer) = common::server_accept(o, ctrl, listening, peer_name, &cq_attr)?;

    let mut dp = DataPath::new(&objs, peer, o, &plan)?;
    ctrl_send(ctrl, "READY")?;
    let mut header = false;
    for &size in &plan.sizes {
        let sync = ctrl_expect(ctrl, "SYNC")?;
        if sync.parse::<usize>().ok() != Some(size) {
            return Err(Failure::new(format!("out of step with the client: it syncs {sync:?}, expected {size}")));
        }
        dp.set_size(size)?;
        ctrl_send(ctrl, "GO")?;
        dp.run(ctrl, plan.warmup, false)?;
        let start = Instant::now();
        dp.run(ctrl, plan.iterations, false)?;
        let elapsed = start.elapsed();
        let done = ctrl_expect(ctrl, "DONE")?;
        let acked: u64 = done.parse().map_err(|_| Failure::new(format!("malformed DONE {done:?}")))?;
        ctrl_send(ctrl, "ACK")?;
        print_row(&mut header, size, plan.iterations, acked, elapsed);
    }
    ctrl_expect(ctrl, "BYE")?;
    let _ = ctrl_send(ctrl, "BYE");
    debug!(o, "SERVER: done");
    Ok(())
}

/// The server follows the client's plan; say so when its own options differ.
fn warn_plan_differs(o: &PpOpts, plan: &Plan, max_msg: usize) {
    let mine = sizes::test_sizes(o.sizes, max_msg).unwrap_or_default();
    let mut diffs = Vec::new();
    if o.iterations != plan.iterations {
        diffs.push(format!("-I {} (server: {})", plan.iterations, o.iterations));
    }
    if mine != plan.sizes && !matches!(o.sizes, SizeSel::Default) {
        diffs.push("the client's -S".to_string());
    }
    if o.check != plan.check {
        diffs.push(format!("data checks {}", if plan.check { "on" } else { "off" }));
    }
    if !diffs.is_empty() {
        eprintln!("fi_pingpong: note: following the client's plan: {}", diffs.join(", "));
    }
}

// ---------------------------------------------------------------- client

fn client(o: &PpOpts) -> Res<()> {
    common::connect_control(o, |ctrl| client_run(o, ctrl))
}

fn client_run(o: &PpOpts, ctrl: &mut Ctrl) -> Res<()> {
    let mode = if o.tagged { "tagged" } else { "msg" };
    ctrl_send(ctrl, &format!("HELLO {PROTO} ep={} mode={mode}", ep_name(o.ep_type)))?;
    let ok = ctrl_expect(ctrl, "OK")?;
    let (hints, srv_max, srv_addr) = common::client_hints(o, ctrl, &ok, base_hints(o))?;
    let info = getinfo(o, &hints)?;
    let max_msg = info.ep_attr.max_msg_size.min(srv_max);
    let sizes = sizes::test_sizes(o.sizes, max_msg).map_err(Failure::new)?;
    let plan = Plan { iterations: o.iterations, warmup: o.warmup, check: o.check, sizes };

    let (objs, peer) = common::client_connect(o, ctrl, info, &srv_addr, &cq_attr, &|me| plan.encode(me))?;

    let mut dp = DataPath::new(&objs, peer, o, &plan)?;
    ctrl_expect(ctrl, "READY")?;
    let mut header = false;
    for &size in &plan.sizes {
        dp.set_size(size)?;
        ctrl_send(ctrl, &format!("SYNC {size}"))?;
        ctrl_expect(ctrl, "GO")?;
        dp.run(ctrl, plan.warmup, true)?;
        let start = Instant::now();
        let acked = dp.run(ctrl, plan.iterations, true)?;
        let elapsed = start.elapsed();
        ctrl_send(ctrl, &format!("DONE {acked}"))?;
        ctrl_expect(ctrl, "ACK")?;
        print_row(&mut header, size, plan.iterations, acked, elapsed);
    }
    ctrl_send(ctrl, "BYE")?;
    let _ = ctrl_expect(ctrl, "BYE");
    Ok(())
}

// ---------------------------------------------------------------- data path

/// The ping-pong loop of one side.
struct DataPath<'a> {
    ep: &'a Endpoint,
    cq: &'a CompletionQueue,
    eq: Option<&'a EventQueue>,
    peer: FiAddr,
    tagged: bool,
    inject_size: usize,
    timeout: Duration,
    check: bool,
    size: usize,
    /// Whether the buffers are registered ([`registers`]).
    register: bool,
    /// The send buffer, when not in flight.
    tx: Option<PpBuf>,
    /// A receive buffer that has completed, not yet re-posted.
    rx_done: Option<PpBuf>,
    fill: Pattern,
    verify: Pattern,
}

/// Buffers at least this long are registered over verbs ([`registers`]).
pub const VERBS_REGISTER_MIN: usize = 16 * 1024;

/// Whether the two buffers (`cap` bytes each) are registered with the domain
/// (`FI_SEND | FI_RECV`), as libfabric's `fi_pingpong` registers them: where the
/// domain's `mr_mode` has `FI_MR_LOCAL`, and over verbs for buffers of
/// [`VERBS_REGISTER_MIN`] bytes or more. Our verbs does not require local
/// registration: it finds a registered buffer by its address, and then a large
/// message is neither registered for each operation nor copied; up to 16 KiB it
/// goes through the provider's registered bounce buffers anyway. Measured in the
/// Soft-RoCE guest (usec per half round trip, medians of 5, plain against
/// registered): MSG 64 KiB 1188 against 1031 (direct path 1176 against 958),
/// 4 KiB 83.4 against 83.7, but 64 B 18.6 against 20.9 (direct 16.7 against
/// 17.5), hence the floor. Elsewhere the buffers stay plain (a registration
/// there saves nothing).
pub fn registers(info: &Info, cap: usize) -> bool {
    info.domain_attr.mr_mode.contains(MrMode::LOCAL)
        || (info.fabric_attr.prov_name.starts_with("verbs") && cap >= VERBS_REGISTER_MIN)
}

/// One of the two buffers: plain, or registered with the domain ([`registers`]).
enum PpBuf {
    Plain(Buf),
    Registered(RegisteredBuf),
}

impl PpBuf {
    fn new(ob: &Objects, cap: usize, register: bool) -> Res<PpBuf> {
        let b = Buf::new(cap);
        if !register {
            return Ok(PpBuf::Plain(b));
        }
        ob.ep.domain().register_buf(b).map(PpBuf::Registered).map_err(|e| Failure::fabric("fi_mr_reg", e))
    }

    fn bytes(&self) -> &[u8] {
        match self {
            PpBuf::Plain(b) => b,
            PpBuf::Registered(r) => r,
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            PpBuf::Plain(b) => b,
            PpBuf::Registered(r) => r,
        }
    }

    fn set_len(&mut self, n: usize) -> fabric::Result<()> {
        match self {
            PpBuf::Plain(b) => b.set_len(n),
            PpBuf::Registered(r) => r.set_len(n),
        }
    }

    /// The buffer an operation gave back (through its completion or its failed
    /// post), of the kind posted.
    fn back(bufs: OpBuffers, registered: bool, what: &str) -> Res<PpBuf> {
        let b =
            if registered { bufs.into_registered().map(PpBuf::Registered) } else { bufs.into_buf().map(PpBuf::Plain) };
        b.ok_or_else(|| Failure::new(format!("internal: {what} buffer lost")))
    }
}

impl<'a> DataPath<'a> {
    fn new(ob: &'a Objects, peer: FiAddr, o: &PpOpts, plan: &Plan) -> Res<DataPath<'a>> {
        let cap = plan.sizes.iter().copied().max().unwrap_or(0).max(1);
        let register = registers(&ob.info, cap);
        let mut dp = DataPath {
            ep: &ob.ep,
            cq: &ob.cq,
            eq: ob.eq.as_ref(),
            peer,
            tagged: o.tagged,
            inject_size: ob.info.tx_attr.inject_size,
            timeout: o.timeout,
            check: plan.check,
            size: 0,
            register,
            tx: Some(PpBuf::new(ob, cap, register)?),
            rx_done: None,
            fill: Pattern::new(),
            verify: Pattern::new(),
        };
        dp.post_recv(PpBuf::new(ob, cap, register)?)?;
        Ok(dp)
    }

    /// Prepare the send buffer for `size` bytes (between sizes, nothing in flight).
    fn set_size(&mut self, size: usize) -> Res<()> {
        let tx = self.tx.as_mut().ok_or_else(|| Failure::new("internal: send buffer in flight between sizes"))?;
        tx.set_len(size).map_err(|e| Failure::fabric("set_len", e))?;
        self.size = size;
        Ok(())
    }

    /// `n` round trips: the client sends first, the server echoes. The pongs (or
    /// pings) received.
    fn run(&mut self, ctrl: &mut Ctrl, n: u64, client: bool) -> Res<u64> {
        let mut w = Watch::new(self.timeout);
        let mut got = 0;
        for _ in 0..n {
            if client {
                self.send(ctrl, &mut w)?;
                self.recv_one(ctrl, &mut w)?;
            } else {
                self.recv_one(ctrl, &mut w)?;
                self.send(ctrl, &mut w)?;
            }
            got += 1;
        }
        // Have the send buffer back before the next size.
        while self.tx.is_none() {
            self.poll(ctrl, &mut w, "the last send's completion")?;
        }
        Ok(got)
    }

    /// Post `buf` as a receive (plain: `fi_recv`/`fi_trecv`; registered: their
    /// `*msg` forms, which take it).
    fn recv_op(&self, buf: PpBuf) -> PostResult {
        match (buf, self.tagged) {
            (PpBuf::Plain(b), true) => self.ep.trecv(b, FiAddr::UNSPEC, TAG, 0, RX_CTX),
            (PpBuf::Plain(b), false) => self.ep.recv(b, FiAddr::UNSPEC, RX_CTX),
            (PpBuf::Registered(r), tagged) => {
                let mut m = RecvMsg::new(r, RX_CTX);
                m.addr = FiAddr::UNSPEC;
                if tagged {
                    m.tag = TAG;
                    self.ep.trecvmsg(m, OpFlags::empty())
                } else {
                    self.ep.recvmsg(m, OpFlags::empty())
                }
            }
        }
    }

    /// Post `buf` as a send to the peer, as [`DataPath::recv_op`] does.
    fn send_op(&self, buf: PpBuf) -> PostResult {
        match (buf, self.tagged) {
            (PpBuf::Plain(b), true) => self.ep.tsend(b, self.peer, TAG, TX_CTX),
            (PpBuf::Plain(b), false) => self.ep.send(b, self.peer, TX_CTX),
            (PpBuf::Registered(r), tagged) => {
                let mut m = SendMsg::new(r, self.peer, TX_CTX);
                if tagged {
                    m.tag = TAG;
                    self.ep.tsendmsg(m, OpFlags::empty())
                } else {
                    self.ep.sendmsg(m, OpFlags::empty())
                }
            }
        }
    }

    fn post_recv(&mut self, buf: PpBuf) -> Res<()> {
        let mut buf = buf;
        // The clock is read only when the provider pushes back.
        let mut w: Option<Watch> = None;
        loop {
            match self.recv_op(buf) {
                Ok(()) => return Ok(()),
                Err(PostError { error: Error::Again, buffers, .. }) => {
                    buf = PpBuf::back(buffers, self.register, "receive")?;
                    w.get_or_insert_with(|| Watch::new(self.timeout)).tick_checked(
                        None,
                        self.eq,
                        "posting a receive",
                    )?;
                    self.drain()?;
                }
                Err(pe) => return Err(Failure::fabric(if self.tagged { "fi_trecv" } else { "fi_recv" }, pe.error)),
            }
        }
    }

    /// Read whatever completions are there without waiting (for back-pressure).
    fn drain(&mut self) -> Res<()> {
        while let Some(c) = self.next_completion()? {
            self.complete(c)?;
        }
        Ok(())
    }

    /// Send the current size to the peer: inject below the inject size, as
    /// libfabric's fi_pingpong does, else post the buffer.
    fn send(&mut self, ctrl: &mut Ctrl, w: &mut Watch) -> Res<()> {
        while self.tx.is_none() {
            self.poll(ctrl, w, "the previous send's completion")?;
        }
        let mut tx = self.tx.take().expect("send buffer present");
        if self.check {
            self.fill.fill(tx.bytes_mut());
        }
        if self.size < self.inject_size {
            loop {
                let b = tx.bytes();
                let r = if self.tagged { self.ep.tinject(b, self.peer, TAG) } else { self.ep.inject(b, self.peer) };
                match r {
                    Ok(()) => break,
                    Err(Error::Again) => {
                        w.tick_checked(Some(&mut *ctrl), self.eq, "injecting a message")?;
                        if let Err(f) = self.drain() {
                            self.tx = Some(tx);
                            return Err(f);
                        }
                    }
                    Err(e) => return Err(Failure::fabric(if self.tagged { "fi_tinject" } else { "fi_inject" }, e)),
                }
            }
            self.tx = Some(tx);
            return Ok(());
        }
        loop {
            match self.send_op(tx) {
                Ok(()) => return Ok(()),
                Err(PostError { error: Error::Again, buffers, .. }) => {
                    tx = PpBuf::back(buffers, self.register, "send")?;
                    w.tick_checked(Some(&mut *ctrl), self.eq, "posting a send")?;
                    self.drain()?;
                }
                Err(pe) => return Err(Failure::fabric(if self.tagged { "fi_tsend" } else { "fi_send" }, pe.error)),
            }
        }
    }

    /// Wait for the posted receive to complete, then post it again at once.
    fn recv_one(&mut self, ctrl: &mut Ctrl, w: &mut Watch) -> Res<()> {
        while self.rx_done.is_none() {
            self.poll(ctrl, w, "a message from the peer")?;
        }
        let rx = self.rx_done.take().expect("completed receive");
        self.post_recv(rx)
    }

    /// One busy poll of the completion queue, with the watchdog.
    #[inline]
    fn poll(&mut self, ctrl: &mut Ctrl, w: &mut Watch, what: &str) -> Res<()> {
        match self.next_completion()? {
            Some(c) => {
                w.progress();
                self.complete(c)
            }
            None => w.tick_checked(Some(&mut *ctrl), self.eq, what),
        }
    }

    fn complete(&mut self, c: Completion) -> Res<()> {
        match c.context {
            RX_CTX => {
                let buf = PpBuf::back(c.buffers, self.register, "receive")?;
                if c.len != self.size {
                    return Err(Failure::new(format!("received {} bytes, expected {}", c.len, self.size)));
                }
                if self.check {
                    self.verify.check(buf.bytes()).map_err(|m| Failure::new(format!("size {}: {m}", self.size)))?;
                }
                self.rx_done = Some(buf);
                Ok(())
            }
            TX_CTX => {
                self.tx = Some(PpBuf::back(c.buffers, self.register, "send")?);
                Ok(())
            }
            other => Err(Failure::new(format!("completion with unknown context {other}"))),
        }
    }

    /// The next completion, if any; an error completion fails the run.
    #[inline]
    fn next_completion(&self) -> Res<Option<Completion>> {
        next_completion(self.cq, |ctx| match ctx {
            RX_CTX => "receive",
            TX_CTX => "send",
            _ => "operation",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_registered_where_libfabric_registers_them() {
        let mut info = Info::default();
        info.fabric_attr.prov_name = "tcp".into();
        assert!(!registers(&info, 1 << 20));
        info.domain_attr.mr_mode = MrMode::LOCAL | MrMode::PROV_KEY;
        assert!(registers(&info, 64), "FI_MR_LOCAL");
        info.domain_attr.mr_mode = MrMode::PROV_KEY | MrMode::VIRT_ADDR;
        info.fabric_attr.prov_name = "verbs".into();
        assert!(registers(&info, VERBS_REGISTER_MIN), "verbs");
        assert!(!registers(&info, VERBS_REGISTER_MIN - 1), "verbs, a small buffer");
        info.fabric_attr.prov_name = "verbs;ofi_rxm".into();
        assert!(registers(&info, 1 << 20), "verbs RDM");
    }

    #[test]
    fn plan_round_trips() {
        let p = Plan { iterations: 1000, warmup: 2, check: true, sizes: vec![0, 1, 64, 6 << 20] };
        let a = Address::parse("127.0.0.1:4000").unwrap();
        let (q, name) = Plan::decode(&p.encode(Some(&a)), 6 << 20).unwrap();
        assert_eq!(q, p);
        assert_eq!(name.as_deref(), Some("fi_sockaddr_in://127.0.0.1:4000"));
        let p = Plan { iterations: 1, warmup: 0, check: false, sizes: vec![] };
        assert_eq!(Plan::decode(&p.encode(None), 0).unwrap(), (p, None));
        assert!(Plan::decode("PLAN iters=x", 0).is_none());
        // A size above the server's largest message (it would allocate it), or
        // too many sizes, is refused.
        let big = "PLAN iters=1 warmup=0 check=0 sizes=1,18446744073709551615 name=-";
        assert!(Plan::decode(big, 1 << 30).is_none());
        assert!(Plan::decode("PLAN iters=1 warmup=0 check=0 sizes=1,65 name=-", 64).is_none());
        let many = vec!["1"; 65].join(",");
        assert!(Plan::decode(&format!("PLAN iters=1 warmup=0 check=0 sizes={many} name=-"), 64).is_none());
        assert_eq!(field("OK prov=tcp max_msg=5 name=fi_x://a=b", "name"), Some("fi_x://a=b"));
        assert_eq!(field("OK prov=tcp", "max"), None);
    }
}
