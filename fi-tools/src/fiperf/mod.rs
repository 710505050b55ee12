//! `fi_perf`: perftest's bandwidth and latency tests (`ib_send_bw`, `ib_send_lat`,
//! `ib_write_*`, `ib_read_*`, `ib_atomic_*`) over any provider.
//!
//! `fi_perf send bw -p tcp -e rdm` starts a server; the same command with the
//! server's address starts the client. As in `fi_pingpong` (with which it
//! shares the control connection and fabric set-up of [`crate::common`] and the
//! endpoints and watchdogs of [`crate::link`]), the two meet on a plain
//! TCP control connection, agree on the test there, exchange fabric addresses
//! (RDM) or connect (MSG), and synchronise before every size; both print
//! perftest's columns ([`report`]), or one JSON object per size with `--json`.
//!
//! - `send lat`: ping-pong. Each side keeps one receive posted and re-posts it
//!   before answering; messages below the provider's inject size are injected
//!   (perftest's inline sends). A sample is one round trip, reported halved; the
//!   client times from its send to the answer, the server between two arrivals.
//! - `send bw`: the client keeps up to `-t` sends in flight; the server keeps
//!   `-r` receives posted, re-posts each as it completes and returns credits (the
//!   size's number, the receives re-posted so far and the server's clock) every
//!   quarter of its depth, at the end of the warm-up and at the end, so the client
//!   never sends to a receive not yet posted. Both time delivered data, as a send
//!   completion may only mean the provider took the bytes: the client from the
//!   credit that says the warm-up arrived to the one that says all did, the server
//!   from sending the former to the last arrival. The average is bytes over that
//!   time; the peak the best window of [`report::Windows`] (the client's windows
//!   end at credits, on the server's clock); the message rate messages per
//!   second.
//!
//! - `write`, `read`, `atomic` (`bw` and `lat`): the server registers a region
//!   for remote reads and writes (the largest size, at least one `u64`) and sends
//!   its address (or offset 0, as the domain's `mr_mode` says) and key with
//!   READY; then it only drives progress until the client is done. The client
//!   writes, reads or adds one to the region's first `u64` with a fetching
//!   `FI_SUM` on `FI_UINT64` (8 bytes): `lat` one operation at a time, each
//!   sample from its post to its completion; `bw` up to `-t` in flight, timed
//!   from the warm-up's last completion to the last one.
//!
//! Every size has an untimed warm-up (`--warmup`: the transmit depth for bw, 16
//! for lat; at least one, which also gives the server its first timestamp).
//! Buffers are allocated between sizes, never in a timed loop; at most 256 MiB of
//! them per side, so large sizes may have a shallower depth than `-t` or `-r`
//! asked for (said with `-v`).
//!
//! The control protocol (text messages, one per frame):
//!
//! ```text
//! C: HELLO fabric-perf/1 test=send_bw ep=rdm
//! S: OK prov=tcp max_msg=N name=<server's address>      (or ERR <why>)
//! C: PLAN iters=N warmup=N depth=N sizes=64,256,... name=<client's address or ->
//!    (MSG: the client connects; the server accepts)
//! S: READY                           (write, read, atomic: READY addr=0x.. key=0x..)
//! per size:  C: SYNC <n> <size> [iters=N]   S: GO credits=<receives posted>
//!            (the test)           C: DONE [peak=.. avg=.. mpps=..]   S: ACK
//!            (iters: duration mode, whose plan says probe=1 and lists each size
//!            twice, a probe run and the measured one; DONE's figures: the
//!            client's bandwidth, which the target of one-sided operations
//!            prints in perftest's output)
//! C: BYE     S: BYE
//! ```
//!
//! perftest's `-b` (bidirectional, the perftest-style bw tools only): HELLO says
//! `bidir=1` (the server refuses a client that differs); both sides post the
//! operation. Send: each side posts its receives before naming them (the client's
//! `SYNC .. credits=N`, the server's `GO credits=N`) and credits go on the control
//! connection as `CREDIT <n> <receives re-posted> <clock>` (both receive queues
//! carry data). One-sided: after the server's READY the client sends its own
//! `READY addr=.. key=..`. Each side ends a size with `DONE peak=.. avg=.. mpps=..`
//! (its direction's figures) and drives progress until the peer's; both print
//! the sum.

pub mod opts;
pub mod report;

use self::opts::{Measure, OutputLevel, PerfOpts, PerftestStyle, Test, Verb};
use self::report::{BwStats, LatStats, PerftestBanner, RunInfo, Windows};
use crate::common::{self, debug};
use crate::link::{ctrl_send, ep_name, field, next_completion, Failure, Objects, Res, Watch};
use crate::oob::Ctrl;
use crate::sizes;
use fabric::{
    Address, AtomicKind, AtomicOp, Buf, Caps, Completion, CompletionQueue, CqAttr, CqFormat, Datatype, Endpoint,
    EqEvent, Error, EventQueue, FiAddr, Hints, Info, MemoryRegion, MrAccess, MrMode, Remote,
};
use std::io::Write;
use std::time::{Duration, Instant};

/// The protocol name in `HELLO`.
const PROTO: &str = "fabric-perf/1";
/// Context of data sends.
const TX_CTX: u64 = 1;
/// Context of data receives.
const RX_CTX: u64 = 2;
/// Context of credit receives (client, send bw).
const CREDIT_RX_CTX: u64 = 3;
/// Context of credit sends posted with a buffer (server, send bw, when the
/// provider cannot inject them).
const CREDIT_TX_CTX: u64 = 4;
/// Context of fetching atomics (their operand and result come back together).
const ATOMIC_CTX: u64 = 5;
/// Bytes of a credit message: the size's number, the receives re-posted and the
/// server's clock (nanoseconds), little-endian u64s.
pub const CREDIT_LEN: usize = 24;
/// Credit receives the client keeps posted.
const CREDIT_RECVS: usize = 8;
/// Credit send buffers of a server that cannot inject.
const CREDIT_SENDS: usize = 4;
/// The most bytes of data buffers one side allocates for a size.
const BUF_BUDGET: usize = 256 << 20;
/// The key the server asks for when the domain does not choose keys.
const TARGET_KEY: u64 = 0xF1_9E4F;
/// The most sizes a plan may list (`-S all` lists 46).
const MAX_PLAN_SIZES: usize = 64;
/// How many empty polls a passive side makes between looks at the control
/// connection.
const SPINS_PER_CTRL_CHECK: u32 = 1024;
/// How many loop turns a bidirectional stream makes between looks for credits on
/// the control connection, and how many when it waits for them.
const CREDIT_CHECK: u32 = 256;
const CREDIT_CHECK_STARVED: u32 = 16;

/// Run `fi_perf` with these arguments (without the program name); the exit status.
pub fn main_with_args(args: Vec<String>) -> i32 {
    common::main_with(opts::USAGE, opts::parse_args(args), client, server)
}

/// Run a test from a parsed command line (the perftest-style tools' entry), with
/// this usage text for help and errors; the exit status.
pub(crate) fn run_parsed(usage: &str, parsed: Result<opts::PerfCmd, String>) -> i32 {
    common::main_with(usage, parsed, client, server)
}

/// The test's name in `HELLO` and in JSON output (`send_bw`).
fn test_id(t: Test) -> String {
    format!("{}_{}", t.verb.name(), t.measure.name())
}

/// Receive a message that must start with `word`; an `ERR` from the peer becomes
/// the failure.
fn ctrl_expect(ctrl: &mut Ctrl, word: &str) -> Res<String> {
    common::ctrl_expect(ctrl, word, "fi_perf")
}

fn base_hints(o: &PerfOpts) -> Hints {
    let caps = match o.test.verb {
        Verb::Send => Caps::MSG,
        Verb::Write | Verb::Read => Caps::RMA,
        Verb::Atomic => Caps::ATOMIC,
    };
    common::base_hints(o, caps)
}

fn getinfo(o: &PerfOpts, h: &Hints) -> Res<Info> {
    common::getinfo(o, h, &o.test, &|f| {
        let what = match o.test.verb {
            Verb::Send => "messages",
            Verb::Write | Verb::Read => "RMA",
            Verb::Atomic => "atomics",
        };
        f.msg.push_str(&format!(": no provider offers {what} on {} endpoints here", ep_name(o.ep_type)));
    })
}

/// A completion queue deep enough for everything one side has in flight.
fn cq_attr(o: &PerfOpts) -> CqAttr {
    let size = o.depth() + o.rx_depth + CREDIT_RECVS + CREDIT_SENDS + 64;
    CqAttr { size, format: CqFormat::Data, ..Default::default() }
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
    /// Operations in flight.
    pub depth: usize,
    /// The sizes, in order.
    pub sizes: Vec<usize>,
    /// Duration mode (perftest's `-D`): the sizes come in pairs, a probe run of
    /// `iterations` (not reported) and the measured run, whose iterations the
    /// client chooses from the probe and names in its `SYNC`.
    pub probe: bool,
}

impl Plan {
    /// The `PLAN` message, with the client's fabric address if it has one.
    pub fn encode(&self, name: Option<&Address>) -> String {
        let sizes: Vec<String> = self.sizes.iter().map(|s| s.to_string()).collect();
        let name = name.map(|a| a.to_uri()).unwrap_or_else(|| "-".into());
        format!(
            "PLAN iters={} warmup={} depth={} sizes={}{} name={name}",
            self.iterations,
            self.warmup,
            self.depth,
            sizes.join(","),
            if self.probe { " probe=1" } else { "" }
        )
    }

    /// The plan and the client's fabric address in a PLAN message; `None` if it is
    /// malformed or asks for more than the options allow (nothing a peer sends may
    /// make this side allocate without bound).
    pub fn decode(msg: &str) -> Option<(Plan, Option<String>)> {
        let count = |k: &str, max: u64| field(msg, k)?.parse::<u64>().ok().filter(|&n| (1..=max).contains(&n));
        let iterations = count("iters", opts::MAX_ITERS)?;
        let warmup = count("warmup", opts::MAX_ITERS)?;
        let depth = count("depth", opts::MAX_DEPTH as u64)? as usize;
        let s = field(msg, "sizes")?;
        if s.split(',').count() > MAX_PLAN_SIZES {
            return None;
        }
        let sizes: Vec<usize> =
            s.split(',').map(|x| x.parse().ok().filter(|&n| n <= opts::MAX_SIZE)).collect::<Option<_>>()?;
        let name = field(msg, "name").filter(|n| *n != "-").map(str::to_string);
        let probe = match field(msg, "probe") {
            None => false,
            Some("1") if sizes.len() % 2 == 0 => true,
            Some(_) => return None,
        };
        Some((Plan { iterations, warmup, depth, sizes, probe }, name))
    }

    /// Whether the size at `idx` is a probe run, not reported.
    pub fn is_probe(&self, idx: usize) -> bool {
        self.probe && idx % 2 == 0
    }
}

/// How many buffers of `size` bytes to allocate when `want` are asked for: at
/// most the provider's queue size and what fits in [`BUF_BUDGET`], at least one.
fn buffers_for(size: usize, want: usize, queue: usize) -> usize {
    let queue = if queue == 0 { want } else { queue };
    want.min(queue).min(BUF_BUDGET / size.max(1)).max(1)
}

// ---------------------------------------------------------------- output

/// Prints the table (banner and header before the first row) or JSON lines.
struct Printer {
    json: bool,
    started: bool,
    /// The banner is out (before the table, or alone on a passive server).
    bannered: bool,
    title: String,
    banner: Vec<(&'static str, String)>,
    test: String,
    side: &'static str,
    provider: String,
    endpoint: &'static str,
    /// perftest's output (the `fi_send_lat` family): its style, banner and the
    /// lines naming the two ends.
    perftest: Option<(PerftestStyle, String)>,
    /// A send test with `-b` in duration mode, whose row perftest prints per side
    /// (counting what the side sent and received).
    send_duration: bool,
}

impl Printer {
    /// The printer of one side; `remote` names the peer where this side knows
    /// its address (perftest's output shows both ends).
    fn new(o: &PerfOpts, side: &'static str, objs: &Objects, remote: Option<String>, plan: &Plan) -> Printer {
        let t = o.test;
        let provider = objs.info.fabric_attr.prov_name.as_str();
        let bidir = bidirectional(o);
        let measure = match t.measure {
            Measure::Bw if bidir => "Bidirectional BW",
            Measure::Bw => "BW",
            Measure::Lat => "Latency",
        };
        let mut banner = vec![
            ("Provider", provider.to_string()),
            ("Endpoint", ep_name(o.ep_type).to_string()),
            ("Iterations", plan.iterations.to_string()),
            ("Warm-up", plan.warmup.to_string()),
        ];
        if t.measure == Measure::Bw {
            banner.push(("TX depth", plan.depth.to_string()));
            if t.verb == Verb::Send && side == "server" {
                banner.push(("RX depth", o.rx_depth.to_string()));
            }
        }
        banner.push(("Side", side.to_string()));
        let title = format!("{} {measure} Test", t.verb.title());
        let perftest = o.perftest.as_ref().map(|style| {
            let info = &objs.info;
            let pb = PerftestBanner {
                title: title.clone(),
                device: info.domain_attr.name.clone(),
                transport: provider.to_string(),
                connection: ep_name(o.ep_type).to_uppercase(),
                // With -b both sides send (and, in send tests, receive).
                tx_depth: (side == "client" || bidir).then_some(plan.depth),
                rx_depth: (t.verb == Verb::Send && (side == "server" || bidir)).then_some(o.rx_depth),
                cq_mod: (t.measure == Measure::Bw).then_some(style.cq_mod),
                mtu: style.mtu.map_or(info.ep_attr.max_msg_size, |m| m as usize),
                link: info.fabric_attr.name.clone(),
                inline_or_outstanding: match t.verb {
                    Verb::Send | Verb::Write => (true, info.tx_attr.inject_size),
                    Verb::Read | Verb::Atomic => (false, plan.depth),
                },
                rdma_cm: style.rdma_cm,
                server: side == "server",
            };
            let uri = |a: fabric::Result<Address>| a.map(|a| a.to_uri()).unwrap_or_else(|_| "-".into());
            let local = uri(objs.ep.name());
            let remote = remote.unwrap_or_else(|| uri(objs.ep.peer()));
            let text = format!("{}\n{}", pb.render(), report::perftest_addresses(&local, &remote));
            (style.clone(), text)
        });
        Printer {
            json: o.json,
            started: false,
            bannered: false,
            title,
            banner,
            test: test_id(t),
            side,
            provider: provider.to_string(),
            endpoint: ep_name(o.ep_type),
            send_duration: bidir && t.verb == Verb::Send && o.perftest.as_ref().is_some_and(|p| p.duration.is_some()),
            perftest,
        }
    }

    fn run_info(&self) -> RunInfo<'_> {
        RunInfo { test: &self.test, side: self.side, provider: &self.provider, endpoint: self.endpoint }
    }

    /// Whether only one number per size is printed (perftest's `--output`).
    fn terse(&self) -> Option<OutputLevel> {
        self.perftest.as_ref().map(|(s, _)| s.output).filter(|&l| l != OutputLevel::Full)
    }

    /// The banner (perftest's with the two ends, or fi_perf's).
    fn banner_text(&self) -> String {
        match &self.perftest {
            Some((_, text)) => text.clone(),
            None => report::banner(&self.title, &self.banner),
        }
    }

    fn start(&mut self, out: &mut impl Write, header: &str) {
        if !self.started && !self.json && self.terse().is_none() {
            if !self.bannered {
                let _ = writeln!(out, "{}", self.banner_text());
            }
            let _ = writeln!(out, "{header}");
        }
        self.bannered = true;
        self.started = true;
    }

    /// Duration mode (perftest's `-D`).
    fn duration_mode(&self) -> bool {
        self.perftest.as_ref().is_some_and(|(s, _)| s.duration.is_some())
    }

    /// The client's bandwidth results, on the target of its one-sided
    /// operations: perftest's servers print them; fi_perf's did not.
    fn bw_of_client(&mut self, size: usize, iterations: u64, s: &BwStats) {
        if self.perftest.is_some() {
            self.bw(size, iterations, s);
        }
    }

    /// The bandwidth table's header.
    fn bw_header(&self) -> &'static str {
        if self.perftest.as_ref().is_some_and(|(st, _)| st.report_gbits) {
            report::HEADER_BW_G
        } else {
            report::HEADER_BW
        }
    }

    fn bw(&mut self, size: usize, iterations: u64, s: &BwStats) {
        let mut out = std::io::stdout().lock();
        self.start(&mut out, self.bw_header());
        let line = self.bw_line(size, iterations, s, s.avg_mb);
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }

    /// A bandwidth row; `own_avg_mb` is this side's average, which chooses
    /// perftest's format of small Gbit/s figures (the summed row of `-b` too).
    fn bw_line(&self, size: usize, iterations: u64, s: &BwStats, own_avg_mb: f64) -> String {
        if self.json {
            return report::bw_json(&self.run_info(), size, iterations, s);
        }
        let Some((st, _)) = &self.perftest else { return report::bw_row(size, iterations, s) };
        // perftest's units: MB of 2^20 bytes, or Gb of 10^9 bits; -N: no peak.
        let unit = if st.report_gbits { report::MB / report::GBIT } else { 1.0 };
        // perftest reports no peak in duration mode either.
        let peak = if st.no_peak || st.duration.is_some() { 0.0 } else { s.peak_mb * unit };
        let avg = s.avg_mb * unit;
        match st.output {
            OutputLevel::Bandwidth => format!("{avg:.6}"),
            OutputLevel::MessageRate => format!("{:.6}", s.mpps),
            OutputLevel::Latency | OutputLevel::Full if st.report_gbits && own_avg_mb * unit < 0.1 => {
                report::bw_row_ext(size, iterations, peak, avg, s.mpps)
            }
            OutputLevel::Latency | OutputLevel::Full => {
                report::bw_row(size, iterations, &BwStats { peak_mb: peak, avg_mb: avg, mpps: s.mpps })
            }
        }
    }

    /// The results of `-b`, this side's and the peer's: perftest's row of their
    /// sum (send tests in duration mode: one side's row, which counts the
    /// messages it sent and received), then with `--report-both` each side's.
    fn bw_bidir(&mut self, size: usize, iterations: u64, mine: &BwStats, peer: &BwStats) {
        let mut out = std::io::stdout().lock();
        self.start(&mut out, self.bw_header());
        let sum = report::bidir_sum(mine, peer);
        let rows = if self.send_duration { iterations * 2 } else { iterations };
        let _ = writeln!(out, "{}", self.bw_line(size, rows, &sum, mine.avg_mb));
        if self.perftest.as_ref().is_some_and(|(st, _)| st.report_both) {
            for (title, s) in [("Local", mine), ("Remote", peer)] {
                let _ = writeln!(out, "{}\n\n {title} results: \n{}", report::RESULT_LINE, report::RESULT_LINE);
                let _ = writeln!(out, "{}\n{}", self.bw_header(), self.bw_line(size, iterations, s, s.avg_mb));
            }
        }
        let _ = out.flush();
    }

    /// A latency result; `divisor` is what a sample was divided by (2: half a
    /// round trip), for the transactions per second of duration mode.
    fn lat(&mut self, size: usize, iterations: u64, s: &LatStats, divisor: f64) {
        let mut out = std::io::stdout().lock();
        let duration = self.duration_mode();
        self.start(&mut out, if duration { report::HEADER_LAT_DUR } else { report::HEADER_LAT });
        let line = if self.json {
            report::lat_json(&self.run_info(), size, iterations, s)
        } else if self.terse().is_some() {
            format!("{:.6}", s.avg)
        } else if duration {
            let tps = if s.avg > 0.0 { 1e6 / (s.avg * divisor) } else { 0.0 };
            report::lat_dur_row(size, iterations, s.avg, tps)
        } else {
            report::lat_row(size, iterations, s)
        };
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }

    /// The server of a one-sided test measures nothing: say so under the banner
    /// (perftest's output: the banner and the two ends alone).
    fn passive(&mut self) {
        if self.json || self.terse().is_some() {
            return;
        }
        self.bannered = true;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", self.banner_text());
        if self.perftest.is_none() {
            let _ =
                writeln!(out, " This side is the target of the client's operations: the client reports the results.");
        }
        let _ = out.flush();
    }

    fn finish(&self) {
        if self.started && !self.json && self.terse().is_none() {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", report::RESULT_LINE);
            let _ = out.flush();
        }
    }
}

// ---------------------------------------------------------------- server

fn server(o: &PerfOpts) -> Res<()> {
    if o.perftest.as_ref().is_some_and(|p| p.output == OutputLevel::Full) && !o.json {
        println!("{}", report::WAITING_BOX);
    }
    common::serve_control(o, |ctrl| server_run(o, ctrl))
}

fn server_run(o: &PerfOpts, ctrl: &mut Ctrl) -> Res<()> {
    let hello = common::expect_hello(ctrl, PROTO, "fi_perf")?;
    let (c_test, c_ep) = (field(&hello, "test").unwrap_or(""), field(&hello, "ep").unwrap_or(""));
    let my_test = test_id(o.test);
    if c_test != my_test || c_ep != ep_name(o.ep_type) {
        return Err(Failure::new(format!(
            "the client runs {} -e {c_ep}, the server {} -e {}: give both the same test and options",
            c_test.replace('_', " "),
            o.test,
            ep_name(o.ep_type)
        )));
    }
    let bidir = bidirectional(o);
    if (field(&hello, "bidir") == Some("1")) != bidir {
        let (with, without) = if bidir { ("server", "client") } else { ("client", "server") };
        return Err(Failure::new(format!(
            "the {with} runs with -b (bidirectional), the {without} without: give both the same options"
        )));
    }

    let info = getinfo(o, &common::server_hints(ctrl, base_hints(o))?)?;
    let max_msg = info.ep_attr.max_msg_size;
    let prov = info.fabric_attr.prov_name.clone();

    let cq_attr = |_: &Info| cq_attr(o);
    let (listening, name) = common::server_listen(o, info, &cq_attr)?;
    ctrl_send(ctrl, &format!("OK prov={prov} max_msg={max_msg} name={}", name.to_uri()))?;

    let plan_msg = ctrl_expect(ctrl, "PLAN")?;
    let (plan, peer_name) =
        Plan::decode(&plan_msg).ok_or_else(|| Failure::new(format!("malformed plan from the client: {plan_msg:?}")))?;
    if plan.sizes.iter().any(|&s| s > max_msg) {
        return Err(Failure::new(format!("the client's sizes exceed the server's maximum message size {max_msg}")));
    }
    if o.test.measure == Measure::Lat && plan.iterations > opts::MAX_ITERS_LAT {
        return Err(Failure::new(format!("the client asks for {} latency samples", plan.iterations)));
    }
    if plan.iterations != o.iterations {
        let opt = if o.perftest.is_some() { "-n" } else { "-I" };
        eprintln!(
            "{}: note: following the client's plan: {opt} {} (server: {})",
            o.prog, plan.iterations, o.iterations
        );
    }

    let peer_uri = peer_name.clone();
    let (objs, peer) = common::server_accept(o, ctrl, listening, peer_name, &cq_attr)?;

    let mut dp = DataPath::new(&objs, peer, o.timeout, o.test.verb);
    let max_size = plan.sizes.iter().copied().max().unwrap_or(0);
    // The target of one-sided operations: registered for the client, who learns
    // where it is and its key.
    let mut _target = None;
    if o.test.verb == Verb::Send {
        if o.test.measure == Measure::Lat {
            dp.post_data_recv(Buf::new(max_size.max(1)))?;
        }
        ctrl_send(ctrl, "READY")?;
    } else {
        check_atomics(&objs, o.test.verb)?;
        let (mr, at) = register_target(&objs, max_size)?;
        debug!(o, "SERVER: registered {} bytes at {:#x}, key {:#x}", mr.len(), at.addr, at.key);
        _target = Some(mr);
        ctrl_send(ctrl, &format!("READY addr={:#x} key={:#x}", at.addr, at.key))?;
        if bidir {
            // Both sides are targets: the client's region, for this side's operations.
            dp.remote = parse_ready(&ctrl_expect(ctrl, "READY")?, "client")?;
            debug!(o, "SERVER: the client's region is at {:#x}, key {:#x}", dp.remote.addr, dp.remote.key);
        }
    }
    let mut printer = Printer::new(o, "server", &objs, peer_uri, &plan);
    if o.test.verb != Verb::Send && !bidir {
        printer.passive();
    }
    let mut scratch = Vec::new();
    for (idx, &size) in plan.sizes.iter().enumerate() {
        let sync = ctrl_expect(ctrl, "SYNC")?;
        let iters = sync_iterations(&sync, idx, size, &plan, o.test.measure)?;
        let report = !plan.is_probe(idx);
        dp.begin_size(idx as u64, size);
        if bidir {
            // Both sides post the operation (-b): as the client does, in step
            // with it; each side's results go to the other with DONE.
            let (elapsed, best) = if o.test.verb == Verb::Send {
                let posted = dp.prepare_recvs(ctrl, size, o.rx_depth)?;
                let credits = credits_in(&sync, "SYNC")?;
                dp.prepare_sends(size, plan.depth);
                ctrl_send(ctrl, &format!("GO credits={posted}"))?;
                dp.bw_bidir(ctrl, plan.warmup, iters, credits, posted, plan.depth)?
            } else {
                dp.prepare_sends(size, plan.depth);
                ctrl_send(ctrl, "GO credits=1")?;
                dp.rma_bw(ctrl, plan.warmup, iters, plan.depth)?
            };
            let mine = BwStats::new(size, iters, elapsed, best);
            let peer = dp.exchange_results(ctrl, &mine)?;
            if report {
                printer.bw_bidir(size, iters, &mine, &peer);
            }
            continue;
        }
        if o.test.verb != Verb::Send {
            // The client's operations need no help but progress here; bandwidth
            // results come with its DONE (perftest's servers print them).
            ctrl_send(ctrl, "GO credits=1")?;
            let done = dp.serve(ctrl)?;
            ctrl_send(ctrl, "ACK")?;
            if let (true, Some(st)) = (report, BwStats::decode(&done)) {
                printer.bw_of_client(size, iters, &st);
            }
            continue;
        }
        match o.test.measure {
            Measure::Lat => {
                ctrl_send(ctrl, "GO credits=1")?;
                let mut samples = Vec::with_capacity(iters as usize);
                dp.lat_server(ctrl, plan.warmup, iters, &mut samples)?;
                dp.finish(ctrl, false, "")?;
                if let (true, Some(st)) = (report, LatStats::from_nanos(&samples, 2.0, &mut scratch)) {
                    printer.lat(size, iters, &st, 2.0);
                }
            }
            Measure::Bw => {
                let posted = dp.prepare_recvs(ctrl, size, o.rx_depth)?;
                if posted < o.rx_depth {
                    debug!(o, "SERVER: size {size}: {posted} receives posted (-r {})", o.rx_depth);
                }
                ctrl_send(ctrl, &format!("GO credits={posted}"))?;
                let (elapsed, best) = dp.bw_server(ctrl, plan.warmup, iters, posted, plan.depth)?;
                dp.finish(ctrl, false, "")?;
                if report {
                    printer.bw(size, iters, &BwStats::new(size, iters, elapsed, best));
                }
            }
        }
    }
    printer.finish();
    ctrl_expect(ctrl, "BYE")?;
    let _ = ctrl_send(ctrl, "BYE");
    debug!(o, "SERVER: done");
    Ok(())
}

/// The iterations of the size at `idx` from the client's `SYNC <idx> <size>
/// [iters=N]` (duration mode names them; the plan's otherwise), checked against
/// the plan and the limits.
fn sync_iterations(sync: &str, idx: usize, size: usize, plan: &Plan, m: Measure) -> Res<u64> {
    let mut words = sync.split(' ');
    let expected = (idx.to_string(), size.to_string());
    if words.next() != Some(expected.0.as_str()) || words.next() != Some(expected.1.as_str()) {
        return Err(Failure::new(format!("out of step with the client: it syncs {sync:?}, expected {idx} {size}")));
    }
    let max = if m == Measure::Lat { opts::MAX_ITERS_LAT } else { opts::MAX_ITERS };
    match field(sync, "iters") {
        None => Ok(plan.iterations),
        Some(v) => v
            .parse::<u64>()
            .ok()
            .filter(|n| (1..=max).contains(n))
            .ok_or_else(|| Failure::new(format!("malformed SYNC from the client: {sync:?}"))),
    }
}

/// The iterations a measured run of duration mode takes: as many as the probe's
/// pace fits in `duration` (at least perftest's 5, at most the limit).
fn iterations_for(duration: Duration, probe_iters: u64, probe_time: Duration, max: u64) -> u64 {
    let per = probe_time.as_secs_f64() / probe_iters.max(1) as f64;
    let n = if per > 0.0 { (duration.as_secs_f64() / per).ceil() } else { max as f64 };
    (n.min(max as f64) as u64).max(5)
}

// ---------------------------------------------------------------- client

fn client(o: &PerfOpts) -> Res<()> {
    common::connect_control(o, |ctrl| client_run(o, ctrl))
}

fn client_run(o: &PerfOpts, ctrl: &mut Ctrl) -> Res<()> {
    let bidir = bidirectional(o);
    ctrl_send(
        ctrl,
        &format!(
            "HELLO {PROTO} test={} ep={}{}",
            test_id(o.test),
            ep_name(o.ep_type),
            if bidir { " bidir=1" } else { "" }
        ),
    )?;
    let ok = ctrl_expect(ctrl, "OK")?;
    let (hints, srv_max, srv_addr) = common::client_hints(o, ctrl, &ok, base_hints(o))?;
    let info = getinfo(o, &hints)?;
    let max_msg = info.ep_attr.max_msg_size.min(srv_max);
    let sizes = sizes::test_sizes(o.size_sel(), max_msg).map_err(Failure::new)?;
    // Duration mode: each size twice, a probe run and the measured one.
    let duration = o.perftest.as_ref().and_then(|p| p.duration);
    let sizes = if duration.is_some() { sizes.iter().flat_map(|&s| [s, s]).collect() } else { sizes };
    let plan =
        Plan { iterations: o.iterations, warmup: o.warmup_iters(), depth: o.depth(), sizes, probe: duration.is_some() };

    let cq_attr = |_: &Info| cq_attr(o);
    let (objs, peer) = common::client_connect(o, ctrl, info, &srv_addr, &cq_attr, &|me| plan.encode(me))?;

    let mut dp = DataPath::new(&objs, peer, o.timeout, o.test.verb);
    let max_size = plan.sizes.iter().copied().max().unwrap_or(0);
    match (o.test.verb, o.test.measure) {
        (Verb::Send, Measure::Lat) => dp.post_data_recv(Buf::new(max_size.max(1)))?,
        // With -b, credits come on the control connection: a receive posted for
        // them would take the server's data.
        (Verb::Send, Measure::Bw) if !bidir => {
            for _ in 0..CREDIT_RECVS {
                dp.post_credit_recv(Buf::new(CREDIT_LEN))?;
            }
        }
        (Verb::Send, _) => {}
        _ => check_atomics(&objs, o.test.verb)?,
    }
    let ready = ctrl_expect(ctrl, "READY")?;
    // The client's region, the target of the server's operations with -b.
    let mut _target = None;
    if o.test.verb != Verb::Send {
        dp.remote = parse_ready(&ready, "server")?;
        debug!(o, "CLIENT: the server's region is at {:#x}, key {:#x}", dp.remote.addr, dp.remote.key);
        if bidir {
            let (mr, at) = register_target(&objs, max_size)?;
            debug!(o, "CLIENT: registered {} bytes at {:#x}, key {:#x}", mr.len(), at.addr, at.key);
            _target = Some(mr);
            ctrl_send(ctrl, &format!("READY addr={:#x} key={:#x}", at.addr, at.key))?;
        }
    }
    // A connected endpoint knows its peer; a connectionless one talks to the
    // address the server gave.
    let remote = objs.ep.peer().unwrap_or(srv_addr).to_uri();
    let mut printer = Printer::new(o, "client", &objs, Some(remote), &plan);
    let mut scratch = Vec::new();
    let mut probe_time = Duration::ZERO;
    for (idx, &size) in plan.sizes.iter().enumerate() {
        dp.begin_size(idx as u64, size);
        let report = !plan.is_probe(idx);
        let send = o.test.verb == Verb::Send;
        // -b with messages: this side's receives, posted before the server may send.
        let posted = if bidir && send { Some(dp.prepare_recvs(ctrl, size, o.rx_depth)?) } else { None };
        let credits_word = posted.map(|n| format!(" credits={n}")).unwrap_or_default();
        let iters = match duration {
            Some(d) if report => {
                let max = if o.test.measure == Measure::Lat { opts::MAX_ITERS_LAT } else { opts::MAX_ITERS };
                let n = iterations_for(d, plan.iterations, probe_time, max);
                debug!(o, "CLIENT: size {size}: {n} iterations fill {d:?} at the probe's pace");
                ctrl_send(ctrl, &format!("SYNC {idx} {size} iters={n}{credits_word}"))?;
                n
            }
            _ => {
                ctrl_send(ctrl, &format!("SYNC {idx} {size}{credits_word}"))?;
                plan.iterations
            }
        };
        let go = ctrl_expect(ctrl, "GO")?;
        let credits = credits_in(&go, "GO")?;
        match o.test.measure {
            Measure::Lat => {
                let mut samples = Vec::with_capacity(iters as usize);
                // A send sample is a round trip, reported halved.
                let divisor = if send {
                    dp.lat_client(ctrl, plan.warmup, iters, &mut samples)?;
                    2.0
                } else {
                    dp.prepare_sends(size, 1);
                    dp.rma_lat(ctrl, plan.warmup, iters, &mut samples)?;
                    1.0
                };
                dp.finish(ctrl, true, "")?;
                let stats = LatStats::from_nanos(&samples, divisor, &mut scratch);
                // The pace of duration mode: the probe's typical operation (its
                // first, cold ones would make the measured run short).
                probe_time = stats
                    .map_or(Duration::ZERO, |st| Duration::from_secs_f64(st.typical * divisor * iters as f64 / 1e6));
                if let (true, Some(st)) = (report, stats) {
                    printer.lat(size, iters, &st, divisor);
                }
            }
            Measure::Bw => {
                let n = dp.prepare_sends(size, plan.depth);
                if n < plan.depth {
                    let what = if send { "sends" } else { "operations" };
                    debug!(o, "CLIENT: size {size}: {n} {what} in flight at most (-t {})", plan.depth);
                }
                let (elapsed, best) = match posted {
                    Some(posted) => dp.bw_bidir(ctrl, plan.warmup, iters, credits, posted, plan.depth)?,
                    None if send => dp.bw_client(ctrl, plan.warmup, iters, credits, plan.depth)?,
                    None => dp.rma_bw(ctrl, plan.warmup, iters, plan.depth)?,
                };
                probe_time = elapsed;
                let stats = BwStats::new(size, iters, elapsed, best);
                if bidir {
                    let peer = dp.exchange_results(ctrl, &stats)?;
                    if report {
                        printer.bw_bidir(size, iters, &stats, &peer);
                    }
                    continue;
                }
                // The target of one-sided operations prints the client's results.
                let extra = if send { String::new() } else { stats.encode() };
                dp.finish(ctrl, true, &extra)?;
                if report {
                    printer.bw(size, iters, &stats);
                }
            }
        }
    }
    printer.finish();
    ctrl_send(ctrl, "BYE")?;
    let _ = ctrl_expect(ctrl, "BYE");
    Ok(())
}

/// A number as the control messages write it: decimal or `0x` hexadecimal.
#[doc(hidden)]
pub fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Whether both sides post the test's operation (perftest's `-b`).
fn bidirectional(o: &PerfOpts) -> bool {
    o.perftest.as_ref().is_some_and(|p| p.bidirectional)
}

/// The region named in a `READY addr=.. key=..` message from `who`.
fn parse_ready(msg: &str, who: &str) -> Res<Remote> {
    let num = |k: &str| field(msg, k).and_then(parse_u64);
    match (num("addr"), num("key")) {
        (Some(addr), Some(key)) => Ok(Remote { addr, key }),
        _ => Err(Failure::new(format!("malformed READY from the {who}: {msg:?}"))),
    }
}

/// The receives a `GO` (or, with `-b`, a `SYNC`) says the peer has posted: at least one.
fn credits_in(msg: &str, what: &str) -> Res<u64> {
    field(msg, "credits")
        .and_then(|c| c.parse().ok())
        .filter(|&c| c >= 1)
        .ok_or_else(|| Failure::new(format!("malformed {what} from the peer: {msg:?}")))
}

/// A credit on the control connection (`-b`: the receive queues carry both
/// directions' data, so credits cannot share them): `CREDIT <size's number>
/// <receives re-posted> <clock, ns>`.
#[doc(hidden)]
pub fn encode_ctrl_credit(idx: u64, reposted: u64, ns: u64) -> String {
    format!("CREDIT {idx} {reposted} {ns}")
}

/// Decode [`encode_ctrl_credit`]'s message: `None` unless it is one.
#[doc(hidden)]
pub fn decode_ctrl_credit(msg: &str) -> Option<(u64, u64, u64)> {
    let mut w = msg.strip_prefix("CREDIT ")?.split(' ').map(|x| x.parse::<u64>().ok());
    let got = (w.next()??, w.next()??, w.next()??);
    w.next().is_none().then_some(got)
}

/// A credit message: the size's number, the receives re-posted and the server's
/// clock (nanoseconds).
#[doc(hidden)]
pub fn encode_credit(idx: u64, reposted: u64, ns: u64) -> [u8; CREDIT_LEN] {
    let mut msg = [0u8; CREDIT_LEN];
    msg[..8].copy_from_slice(&idx.to_le_bytes());
    msg[8..16].copy_from_slice(&reposted.to_le_bytes());
    msg[16..].copy_from_slice(&ns.to_le_bytes());
    msg
}

/// Decode [`encode_credit`]'s bytes: `None` unless exactly [`CREDIT_LEN`] of them.
#[doc(hidden)]
pub fn decode_credit(b: &[u8]) -> Option<(u64, u64, u64)> {
    let b: &[u8; CREDIT_LEN] = b.try_into().ok()?;
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[i * 8..i * 8 + 8]);
        u64::from_le_bytes(w)
    };
    Some((word(0), word(1), word(2)))
}

/// Refuse an atomic test on a provider without fetching `FI_SUM` on `FI_UINT64`.
fn check_atomics(ob: &Objects, verb: Verb) -> Res<()> {
    if verb != Verb::Atomic {
        return Ok(());
    }
    match ob.ep.domain().atomic_valid(AtomicOp::Sum, Datatype::Uint64, AtomicKind::Fetch) {
        Ok(n) if n >= 1 => Ok(()),
        Ok(_) | Err(Error::OpNotSupp) => Err(Failure {
            msg: format!(
                "provider {} does not support fetching FI_SUM atomics on FI_UINT64",
                ob.info.fabric_attr.prov_name
            ),
            status: Error::OpNotSupp.errno(),
        }),
        Err(e) => Err(Failure::fabric("fi_fetch_atomicvalid", e)),
    }
}

/// Register the server's region (`size` bytes, at least one `u64`) for remote
/// reads and writes; where the client reaches it: its address, or offset 0 where
/// the domain addresses regions by offset, and its key.
fn register_target(ob: &Objects, size: usize) -> Res<(MemoryRegion, Remote)> {
    let domain = ob.ep.domain();
    let access = MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE;
    let buf = Buf::new(size.max(opts::ATOMIC_SIZE));
    let mr_mode = ob.info.domain_attr.mr_mode;
    let mr = if mr_mode.contains(MrMode::PROV_KEY) {
        domain.register(buf, access)
    } else {
        domain.register_with_key(buf, access, TARGET_KEY)
    }
    .map_err(|e| Failure::fabric("fi_mr_reg", e))?;
    let remote = mr.remote();
    Ok((mr, remote))
}

// ---------------------------------------------------------------- data path

/// The operations of one side, and the buffers that are not in flight.
struct DataPath<'a> {
    /// The operation of the test.
    verb: Verb,
    /// Where one-sided operations go (the server's region).
    remote: Remote,
    ep: &'a Endpoint,
    cq: &'a CompletionQueue,
    eq: Option<&'a EventQueue>,
    peer: FiAddr,
    inject_size: usize,
    tx_queue: usize,
    rx_queue: usize,
    timeout: Duration,
    /// The size's number (credits of other sizes are stale) and its bytes.
    idx: u64,
    size: usize,
    /// Send buffers not in flight.
    tx_free: Vec<Buf>,
    /// Send buffers allocated (in flight or free).
    tx_total: usize,
    /// The bytes injected (latency tests below the inject size).
    inject_buf: Vec<u8>,
    /// Send completions of this size.
    tx_done: u64,
    /// Completed data receives, not yet re-posted.
    rx_done: Vec<Buf>,
    /// Data receives posted.
    rx_posted: usize,
    /// Data receive completions of this size.
    rx_count: u64,
    /// Completed credit receives, not yet re-posted (client).
    credit_rx_done: Vec<Buf>,
    /// The receives the server has re-posted during this size, as last reported,
    /// and the server's clock then.
    credited: u64,
    credited_ns: u64,
    /// The origin of the clock in credits (server).
    epoch: Instant,
    /// Credit send buffers not in flight (server, without inject).
    credit_tx_free: Vec<Buf>,
    /// Credit send buffers allocated.
    credit_tx_total: usize,
    /// Result buffers of fetching atomics not in flight (the operands are in
    /// `tx_free`).
    atomic_results: Vec<Buf>,
    /// What followed the peer's `DONE` when it came during a bidirectional
    /// stream (the peer finished first).
    peer_done: Option<String>,
}

impl<'a> DataPath<'a> {
    fn new(ob: &'a Objects, peer: FiAddr, timeout: Duration, verb: Verb) -> DataPath<'a> {
        DataPath {
            verb,
            remote: Remote { addr: 0, key: 0 },
            ep: &ob.ep,
            cq: &ob.cq,
            eq: ob.eq.as_ref(),
            peer,
            inject_size: ob.info.tx_attr.inject_size,
            tx_queue: ob.info.tx_attr.size,
            rx_queue: ob.info.rx_attr.size,
            timeout,
            idx: 0,
            size: 0,
            tx_free: Vec::new(),
            tx_total: 0,
            inject_buf: Vec::new(),
            tx_done: 0,
            rx_done: Vec::new(),
            rx_posted: 0,
            rx_count: 0,
            credit_rx_done: Vec::new(),
            credited: 0,
            credited_ns: 0,
            epoch: Instant::now(),
            credit_tx_free: Vec::new(),
            credit_tx_total: 0,
            atomic_results: Vec::new(),
            peer_done: None,
        }
    }

    /// Start a size: nothing of the previous one is in flight but receives.
    fn begin_size(&mut self, idx: u64, size: usize) {
        self.idx = idx;
        self.size = size;
        self.tx_done = 0;
        self.rx_count = 0;
        self.credited = 0;
        if size < self.inject_size {
            self.inject_buf.resize(size, 0);
        }
    }

    // ---- posting

    /// Post a data receive, retrying while the provider pushes back.
    fn post_data_recv(&mut self, buf: Buf) -> Res<()> {
        self.post_recv(buf, RX_CTX)?;
        self.rx_posted += 1;
        Ok(())
    }

    /// Post a credit receive (client), retrying while the provider pushes back.
    fn post_credit_recv(&mut self, buf: Buf) -> Res<()> {
        self.post_recv(buf, CREDIT_RX_CTX)
    }

    /// Post a receive with context `ctx`, retrying while the provider pushes back.
    fn post_recv(&mut self, buf: Buf, ctx: u64) -> Res<()> {
        let mut buf = buf;
        let mut w: Option<Watch> = None;
        loop {
            match self.ep.recv(buf, FiAddr::UNSPEC, ctx) {
                Ok(()) => return Ok(()),
                Err(pe) if pe.error == Error::Again => {
                    buf = pe.buffers.into_buf().ok_or_else(|| Failure::new("internal: receive buffer lost"))?;
                    w.get_or_insert_with(|| Watch::new(self.timeout)).tick_checked(
                        None,
                        self.eq,
                        "posting a receive",
                    )?;
                    self.drain()?;
                }
                Err(pe) => return Err(Failure::fabric("fi_recv", pe.error)),
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

    /// One busy poll of the completion queue, with the watchdog: the context of
    /// the completion handled, if any.
    #[inline]
    fn poll(&mut self, ctrl: &mut Ctrl, w: &mut Watch, what: &str) -> Res<Option<u64>> {
        match self.next_completion()? {
            Some(c) => {
                w.progress();
                let ctx = c.context;
                self.complete(c)?;
                Ok(Some(ctx))
            }
            None => {
                w.tick_checked(Some(ctrl), self.eq, what)?;
                Ok(None)
            }
        }
    }

    fn complete(&mut self, c: Completion) -> Res<()> {
        if c.context == ATOMIC_CTX {
            let mut bufs = c.buffers.into_vec().into_iter();
            let (Some(operand), Some(result)) = (bufs.next(), bufs.next()) else {
                return Err(Failure::new("internal: an atomic's completion without its buffers"));
            };
            self.tx_free.push(operand);
            self.atomic_results.push(result);
            self.tx_done += 1;
            return Ok(());
        }
        let buf = c.buffers.into_buf().ok_or_else(|| Failure::new("internal: a completion without its buffer"))?;
        match c.context {
            TX_CTX => {
                self.tx_free.push(buf);
                self.tx_done += 1;
            }
            RX_CTX => {
                self.rx_posted = self.rx_posted.saturating_sub(1);
                if c.len != self.size {
                    return Err(Failure::new(format!("received {} bytes, expected {}", c.len, self.size)));
                }
                self.rx_done.push(buf);
                self.rx_count += 1;
            }
            CREDIT_RX_CTX => {
                if buf.len() != CREDIT_LEN {
                    return Err(Failure::new(format!("a credit message of {} bytes from the server", buf.len())));
                }
                let (idx, n, ns) = decode_credit(&buf)
                    .ok_or_else(|| Failure::new(format!("a credit message of {} bytes from the server", buf.len())))?;
                if idx == self.idx && n > self.credited {
                    self.credited = n;
                    self.credited_ns = ns;
                }
                self.credit_rx_done.push(buf);
            }
            CREDIT_TX_CTX => self.credit_tx_free.push(buf),
            other => return Err(Failure::new(format!("completion with unknown context {other}"))),
        }
        Ok(())
    }

    /// The next completion, if any; an error completion fails the run.
    #[inline]
    fn next_completion(&self) -> Res<Option<Completion>> {
        let verb = self.verb.name();
        next_completion(self.cq, |ctx| match ctx {
            RX_CTX | CREDIT_RX_CTX => "receive",
            TX_CTX => verb,
            CREDIT_TX_CTX => "send",
            ATOMIC_CTX => "atomic",
            _ => "operation",
        })
    }

    // ---- latency

    /// Send one message of the current size: injected below the inject size, else
    /// posted from the send buffer (waiting for it to come back first).
    fn send_one(&mut self, ctrl: &mut Ctrl, w: &mut Watch) -> Res<()> {
        if self.size < self.inject_size {
            loop {
                match self.ep.inject(&self.inject_buf, self.peer) {
                    Ok(()) => return Ok(()),
                    Err(Error::Again) => {
                        w.tick_checked(Some(&mut *ctrl), self.eq, "injecting a message")?;
                        self.drain()?;
                    }
                    Err(e) => return Err(Failure::fabric("fi_inject", e)),
                }
            }
        }
        if self.tx_total == 0 {
            self.tx_free.push(Buf::new(self.size));
            self.tx_total = 1;
        }
        while self.tx_free.is_empty() {
            self.poll(ctrl, w, "the previous send's completion")?;
        }
        let mut tx = self.tx_free.pop().expect("a send buffer");
        if tx.capacity() < self.size {
            // The first send of a larger size (a warm-up one): a buffer that fits.
            tx = Buf::new(self.size);
        }
        tx.set_len(self.size).map_err(|e| Failure::fabric("set_len", e))?;
        loop {
            match self.ep.send(tx, self.peer, TX_CTX) {
                Ok(()) => return Ok(()),
                Err(pe) if pe.error == Error::Again => {
                    tx = pe.buffers.into_buf().ok_or_else(|| Failure::new("internal: send buffer lost"))?;
                    w.tick_checked(Some(&mut *ctrl), self.eq, "posting a send")?;
                    self.drain()?;
                }
                Err(pe) => return Err(Failure::fabric("fi_send", pe.error)),
            }
        }
    }

    /// Wait for the one posted receive to complete, then post it again.
    fn recv_one(&mut self, ctrl: &mut Ctrl, w: &mut Watch) -> Res<()> {
        while self.rx_done.is_empty() {
            self.poll(ctrl, w, "a message from the peer")?;
        }
        let rx = self.rx_done.pop().expect("a completed receive");
        self.post_data_recv(rx)
    }

    /// Have every send buffer back (between sizes).
    fn settle_sends(&mut self, ctrl: &mut Ctrl, w: &mut Watch) -> Res<()> {
        while self.tx_free.len() < self.tx_total {
            self.poll(ctrl, w, "the last send's completion")?;
        }
        Ok(())
    }

    /// The client's ping-pong: `warmup` untimed round trips, then one sample
    /// (nanoseconds) per timed round trip, from its send to the answer.
    fn lat_client(&mut self, ctrl: &mut Ctrl, warmup: u64, iters: u64, samples: &mut Vec<u64>) -> Res<()> {
        let mut w = Watch::new(self.timeout);
        let mut prev = Instant::now();
        for i in 0..warmup + iters {
            if i == warmup {
                prev = Instant::now();
            }
            self.send_one(ctrl, &mut w)?;
            self.recv_one(ctrl, &mut w)?;
            if i >= warmup {
                let now = Instant::now();
                samples.push(nanos(now - prev));
                prev = now;
            }
        }
        self.settle_sends(ctrl, &mut w)
    }

    /// The server's ping-pong: echo every message; one sample per timed message,
    /// the time since the previous one arrived (the last warm-up message starts the
    /// clock).
    fn lat_server(&mut self, ctrl: &mut Ctrl, warmup: u64, iters: u64, samples: &mut Vec<u64>) -> Res<()> {
        let mut w = Watch::new(self.timeout);
        let mut prev = Instant::now();
        for i in 0..warmup + iters {
            self.recv_one(ctrl, &mut w)?;
            let now = Instant::now();
            if i >= warmup {
                samples.push(nanos(now - prev));
            }
            prev = now;
            self.send_one(ctrl, &mut w)?;
        }
        self.settle_sends(ctrl, &mut w)
    }

    // ---- bandwidth

    /// Have send buffers for `size` (between sizes, all back): up to `depth`
    /// within the budget and the provider's queue. How many.
    fn prepare_sends(&mut self, size: usize, depth: usize) -> usize {
        let n = buffers_for(size, depth, self.tx_queue);
        self.tx_free.retain(|b| b.capacity() >= size);
        self.tx_free.truncate(n);
        while self.tx_free.len() < n {
            self.tx_free.push(Buf::new(size));
        }
        for b in &mut self.tx_free {
            // Cannot fail: every buffer holds at least `size` bytes.
            let _ = b.set_len(size);
            if self.verb == Verb::Atomic {
                // The operand of FI_SUM: add one.
                let _ = b.copy_from(&1u64.to_le_bytes());
            }
        }
        if self.verb == Verb::Atomic {
            self.atomic_results.resize_with(n, || Buf::new(opts::ATOMIC_SIZE));
        }
        self.tx_total = n;
        n
    }

    /// Post fresh receives for `size` (server, send bw): cancel those of the
    /// previous size, then post up to `depth` within the budget and the provider's
    /// queue. How many are posted.
    fn prepare_recvs(&mut self, ctrl: &mut Ctrl, size: usize, depth: usize) -> Res<usize> {
        if self.rx_posted > 0 {
            match self.ep.cancel(RX_CTX) {
                Ok(()) | Err(Error::NoEnt) => {}
                Err(e) => return Err(Failure::fabric("fi_cancel", e)),
            }
            let mut w = Watch::new(self.timeout);
            while self.rx_posted > 0 {
                match self.cq.next() {
                    Ok(Some(Ok(c))) => {
                        w.progress();
                        self.complete(c)?;
                    }
                    Ok(Some(Err(ce))) => {
                        if ce.context != RX_CTX || ce.err != Error::Canceled {
                            return Err(Failure::new(format!("receive failed: {} ({})", ce, -ce.err.errno())));
                        }
                        w.progress();
                        self.rx_posted = self.rx_posted.saturating_sub(1);
                        if let Some(b) = ce.buffers.into_buf() {
                            self.rx_done.push(b);
                        }
                    }
                    Ok(None) => w.tick_checked(Some(&mut *ctrl), self.eq, "canceled receives")?,
                    Err(e) => return Err(Failure::fabric("fi_cq_read", e)),
                }
            }
        }
        let n = buffers_for(size, depth, self.rx_queue);
        let mut bufs = std::mem::take(&mut self.rx_done);
        bufs.retain(|b| b.capacity() >= size.max(1));
        bufs.truncate(n);
        while bufs.len() < n {
            bufs.push(Buf::new(size.max(1)));
        }
        for b in bufs {
            self.post_data_recv(b)?;
        }
        Ok(n)
    }

    /// The client's stream: up to the send buffers in flight, never more than the
    /// receives the server has posted (`credits` at the start, plus those it
    /// re-posted since). Timed from the credit that says the warm-up arrived to the
    /// one that says everything did (send completions may only mean the provider
    /// took the data): the duration and the best window's rate, the windows ending
    /// at credits.
    fn bw_client(
        &mut self,
        ctrl: &mut Ctrl,
        warmup: u64,
        iters: u64,
        credits: u64,
        depth: usize,
    ) -> Res<(Duration, f64)> {
        let total = warmup + iters;
        let mut w = Watch::new(self.timeout);
        let mut sent = 0u64;
        let mut timed: Option<(Instant, Windows)> = None;
        let mut elapsed = None;
        while elapsed.is_none() || self.tx_done < total {
            // The timed part starts once the warm-up has arrived.
            let limit = if timed.is_some() { total } else { warmup };
            while sent < limit && sent < credits.saturating_add(self.credited) {
                let Some(buf) = self.tx_free.pop() else { break };
                match self.ep.send(buf, self.peer, TX_CTX) {
                    Ok(()) => sent += 1,
                    Err(pe) if pe.error == Error::Again => {
                        let buf = pe.buffers.into_buf().ok_or_else(|| Failure::new("internal: send buffer lost"))?;
                        self.tx_free.push(buf);
                        break;
                    }
                    Err(pe) => return Err(Failure::fabric("fi_send", pe.error)),
                }
            }
            while let Some(b) = self.credit_rx_done.pop() {
                self.post_credit_recv(b)?;
            }
            if self.poll(ctrl, &mut w, "send completions and credits")? != Some(CREDIT_RX_CTX) {
                continue;
            }
            match &mut timed {
                None if self.credited >= warmup => {
                    let w = Windows::size_for(iters, depth);
                    timed = Some((Instant::now(), Windows::at(w, self.credited_ns)));
                }
                None => {}
                Some((start, windows)) => {
                    windows.advance_to(self.credited.min(total) - warmup, self.credited_ns);
                    if elapsed.is_none() && self.credited >= total {
                        elapsed = Some(start.elapsed());
                    }
                }
            }
        }
        let best = timed.map_or(0.0, |(_, windows)| windows.best());
        Ok((elapsed.unwrap_or_default(), best))
    }

    /// The server's side of the stream: re-post each receive as it completes and
    /// tell the client every quarter of `posted` re-posted receives, at the end of
    /// the warm-up and at the end. Timed from the credit that lets the client start
    /// the timed part to the last message: the duration and the best window's rate.
    fn bw_server(
        &mut self,
        ctrl: &mut Ctrl,
        warmup: u64,
        iters: u64,
        posted: usize,
        depth: usize,
    ) -> Res<(Duration, f64)> {
        let total = warmup + iters;
        let batch = (posted as u64 / 4).max(1);
        let mut w = Watch::new(self.timeout);
        let mut reposted = 0u64;
        let mut reported = 0u64;
        let mut timed: Option<(Instant, Windows)> = None;
        let mut elapsed = None;
        while reported < total {
            if self.rx_count < total && self.poll(ctrl, &mut w, "messages from the client")? == Some(RX_CTX) {
                if let Some((start, windows)) = &mut timed {
                    windows.tick();
                    if self.rx_count == total {
                        elapsed = Some(start.elapsed());
                    }
                }
            }
            while let Some(b) = self.rx_done.pop() {
                self.post_data_recv(b)?;
                reposted += 1;
            }
            let due = reposted - reported >= batch || reposted == warmup || reposted == total;
            if reposted > reported && due {
                if self.send_credit(reposted)? {
                    reported = reposted;
                    if timed.is_none() && reported >= warmup {
                        timed = Some((Instant::now(), Windows::new(Windows::size_for(iters, depth))));
                    }
                } else {
                    w.tick_checked(Some(&mut *ctrl), self.eq, "sending credits")?;
                    self.drain()?;
                }
            }
        }
        let best = timed.map_or(0.0, |(_, windows)| windows.best());
        Ok((elapsed.unwrap_or_default(), best))
    }

    /// Both directions at once (`-b`): this side streams to its peer as
    /// [`DataPath::bw_client`] does, within the receives the peer posted (`credits`
    /// at the start, plus those it says it re-posted since), while it receives the
    /// peer's stream as [`DataPath::bw_server`] does, re-posting each receive and
    /// saying so every quarter of its `posted` receives, at the end of the warm-up
    /// and at the end. Credits go on the control connection (a fabric receive
    /// posted for them would take the peer's data). This side's direction is
    /// timed on the peer's clock, from the credit that says the warm-up arrived to
    /// the one that says all did: the duration and the best window's rate.
    fn bw_bidir(
        &mut self,
        ctrl: &mut Ctrl,
        warmup: u64,
        iters: u64,
        credits: u64,
        posted: usize,
        depth: usize,
    ) -> Res<(Duration, f64)> {
        let total = warmup + iters;
        let batch = (posted as u64 / 4).max(1);
        let mut w = Watch::new(self.timeout);
        let mut sent = 0u64;
        let (mut reposted, mut reported) = (0u64, 0u64);
        // The peer's clock when the warm-up had arrived, and the windows since.
        let mut timed: Option<(u64, Windows)> = None;
        let mut elapsed = None;
        let mut spins = 0u32;
        while elapsed.is_none() || self.tx_done < total || reported < total {
            let limit = if timed.is_some() { total } else { warmup };
            let window = credits.saturating_add(self.credited);
            while sent < limit && sent < window {
                let Some(buf) = self.tx_free.pop() else { break };
                match self.ep.send(buf, self.peer, TX_CTX) {
                    Ok(()) => sent += 1,
                    Err(pe) if pe.error == Error::Again => {
                        let buf = pe.buffers.into_buf().ok_or_else(|| Failure::new("internal: send buffer lost"))?;
                        self.tx_free.push(buf);
                        break;
                    }
                    Err(pe) => return Err(Failure::fabric("fi_send", pe.error)),
                }
            }
            let starved = sent < limit && sent >= window;
            self.poll(ctrl, &mut w, "the peer's messages, send completions and credits")?;
            // One receive at a time, so that no credit the peer's timing needs
            // (the warm-up's last, the last) is skipped.
            while let Some(b) = self.rx_done.pop() {
                self.post_data_recv(b)?;
                reposted += 1;
                if reposted - reported >= batch || reposted == warmup || reposted == total {
                    ctrl_send(ctrl, &encode_ctrl_credit(self.idx, reposted, nanos(self.epoch.elapsed())))?;
                    reported = reposted;
                }
            }
            // The control connection costs system calls: look often only when
            // this side waits for credits.
            spins += 1;
            if spins < if starved { CREDIT_CHECK_STARVED } else { CREDIT_CHECK } {
                continue;
            }
            spins = 0;
            while let Some(msg) = ctrl.try_recv().map_err(|e| Failure::new(format!("control connection: {e}")))? {
                let msg = String::from_utf8_lossy(&msg);
                if let Some(why) = msg.strip_prefix("ERR ") {
                    return Err(Failure::new(format!("the peer failed: {why}")));
                }
                // The peer finished first: its credits all came before.
                if let (Some(rest), None) = (msg.strip_prefix("DONE"), &self.peer_done) {
                    self.peer_done = Some(rest.to_string());
                    continue;
                }
                let (idx, n, ns) = decode_ctrl_credit(&msg)
                    .ok_or_else(|| Failure::new(format!("control connection: expected CREDIT, got {msg:?}")))?;
                if idx != self.idx || n <= self.credited {
                    continue;
                }
                if n > total {
                    return Err(Failure::new(format!("the peer credits {n} receives of {total} messages")));
                }
                w.progress();
                self.credited = n;
                self.credited_ns = ns;
                match &mut timed {
                    None if n >= warmup => {
                        timed = Some((ns, Windows::at(Windows::size_for(iters, depth), ns)));
                    }
                    None => {}
                    Some((start, windows)) => {
                        windows.advance_to(n - warmup, ns);
                        if n == total {
                            elapsed = Some(Duration::from_nanos(ns.saturating_sub(*start)));
                        }
                    }
                }
            }
        }
        let best = timed.map_or(0.0, |(_, windows)| windows.best());
        Ok((elapsed.unwrap_or_default(), best))
    }

    /// The end of a size with `-b`: send this side's results in `DONE`, then drive
    /// progress (the peer may still need it) until the peer's `DONE`: its results.
    fn exchange_results(&mut self, ctrl: &mut Ctrl, mine: &BwStats) -> Res<BwStats> {
        ctrl_send(ctrl, &format!("DONE{}", mine.encode()))?;
        let rest = match self.peer_done.take() {
            Some(rest) => rest,
            None => self.serve(ctrl)?,
        };
        BwStats::decode(&rest).ok_or_else(|| Failure::new(format!("malformed DONE from the peer: DONE{rest}")))
    }

    // ---- one-sided operations

    /// Post the test's one-sided operation on `buf` (written out, read into, or
    /// the operand of a fetching atomic) to the server's region. `false` when the
    /// provider pushes back (the buffers are kept for later).
    fn post_one_sided(&mut self, buf: Buf) -> Res<bool> {
        let (peer, at) = (self.peer, self.remote);
        let r = match self.verb {
            Verb::Write => self.ep.write(buf, peer, at, TX_CTX),
            Verb::Read => self.ep.read(buf, peer, at, TX_CTX),
            Verb::Atomic => {
                let result = self.atomic_results.pop().unwrap_or_else(|| Buf::new(opts::ATOMIC_SIZE));
                self.ep.fetch_atomic(buf, result, AtomicOp::Sum, Datatype::Uint64, peer, at, ATOMIC_CTX)
            }
            Verb::Send => unreachable!("messages are not one-sided"),
        };
        match r {
            Ok(()) => Ok(true),
            Err(pe) if pe.error == Error::Again => {
                let mut bufs = pe.buffers.into_vec().into_iter();
                let buf = bufs.next().ok_or_else(|| Failure::new("internal: operation buffer lost"))?;
                self.tx_free.push(buf);
                self.atomic_results.extend(bufs);
                Ok(false)
            }
            Err(pe) => {
                let call = match self.verb {
                    Verb::Write => "fi_write",
                    Verb::Read => "fi_read",
                    _ => "fi_fetch_atomic",
                };
                Err(Failure::fabric(call, pe.error))
            }
        }
    }

    /// One-sided operations one at a time: `warmup` untimed, then one sample
    /// (nanoseconds) per operation, from its post to its completion.
    fn rma_lat(&mut self, ctrl: &mut Ctrl, warmup: u64, iters: u64, samples: &mut Vec<u64>) -> Res<()> {
        let mut w = Watch::new(self.timeout);
        for i in 0..warmup + iters {
            let start = Instant::now();
            let buf = self.tx_free.pop().ok_or_else(|| Failure::new("internal: no operation buffer"))?;
            let mut buf = Some(buf);
            while let Some(b) = buf.take() {
                if !self.post_one_sided(b)? {
                    w.tick_checked(Some(&mut *ctrl), self.eq, "posting an operation")?;
                    self.drain()?;
                    buf = self.tx_free.pop();
                }
            }
            while self.tx_done <= i {
                self.poll(ctrl, &mut w, "the operation's completion")?;
            }
            if i >= warmup {
                samples.push(nanos(start.elapsed()));
            }
        }
        Ok(())
    }

    /// One-sided operations, up to the buffers prepared in flight: `warmup`
    /// untimed (all complete before the timed part starts), then `iters` timed from
    /// the warm-up's last completion to the last one. The duration and the best
    /// window's rate.
    fn rma_bw(&mut self, ctrl: &mut Ctrl, warmup: u64, iters: u64, depth: usize) -> Res<(Duration, f64)> {
        let total = warmup + iters;
        let mut w = Watch::new(self.timeout);
        let mut posted = 0u64;
        let mut timed: Option<(Instant, Windows)> = None;
        let mut elapsed = Duration::ZERO;
        while self.tx_done < total {
            let limit = if self.tx_done < warmup { warmup } else { total };
            while posted < limit {
                let Some(buf) = self.tx_free.pop() else { break };
                if !self.post_one_sided(buf)? {
                    break;
                }
                posted += 1;
            }
            if !matches!(self.poll(ctrl, &mut w, "completions")?, Some(TX_CTX | ATOMIC_CTX)) {
                continue;
            }
            match &mut timed {
                None if self.tx_done == warmup => {
                    timed = Some((Instant::now(), Windows::new(Windows::size_for(iters, depth))));
                }
                None => {}
                Some((start, windows)) => {
                    windows.tick();
                    if self.tx_done == total {
                        elapsed = start.elapsed();
                    }
                }
            }
        }
        Ok((elapsed, timed.map_or(0.0, |(_, windows)| windows.best())))
    }

    /// The passive side of one-sided operations: drive progress (the provider may
    /// serve the client's operations only when its queue is read) until the client
    /// says DONE on the control connection (what follows DONE is returned). No
    /// completion is expected here.
    fn serve(&mut self, ctrl: &mut Ctrl) -> Res<String> {
        self.progress_until(ctrl, "DONE", false)
    }

    /// The end of a size: the client says DONE (with `extra`: its results for a
    /// passive server) and the server ACK, each side driving progress until it
    /// has the other's word. A side whose part is over may still owe its peer
    /// work only progress does (answers to the peer's rendezvous sends waiting
    /// for the peer's receive credits, say): waiting on the control connection
    /// alone left such a peer stalled.
    fn finish(&mut self, ctrl: &mut Ctrl, client: bool, extra: &str) -> Res<()> {
        if client {
            ctrl_send(ctrl, &format!("DONE{extra}"))?;
            self.progress_until(ctrl, "ACK", true)?;
        } else {
            self.progress_until(ctrl, "DONE", true)?;
            ctrl_send(ctrl, "ACK")?;
        }
        Ok(())
    }

    /// Drive progress until the peer's control message `word` arrives; what
    /// follows the word is returned. Completions are handled as the data path's
    /// when `completions` (the end of a size: the credit messages', say), else
    /// any is an error. An error completion, a shutdown, the peer's ERR or the
    /// end of the control connection ends the wait.
    fn progress_until(&mut self, ctrl: &mut Ctrl, word: &str, completions: bool) -> Res<String> {
        let mut spins = 0u32;
        loop {
            if let Some(c) = self.next_completion()? {
                if !completions {
                    return Err(Failure::new(format!("unexpected completion with context {}", c.context)));
                }
                self.complete(c)?;
                continue;
            }
            spins += 1;
            if spins < SPINS_PER_CTRL_CHECK {
                continue;
            }
            spins = 0;
            if let Some(eq) = self.eq {
                match eq.read() {
                    Ok(EqEvent::Shutdown { .. }) => {
                        return Err(Failure::new("the peer shut the connection down during the test"))
                    }
                    Ok(ev) => return Err(Failure::new(format!("unexpected event {} during the test", ev.name()))),
                    Err(Error::Again) => {}
                    Err(e) => return Err(Failure::fabric("fi_eq_read", e)),
                }
            }
            let msg = ctrl.try_recv().map_err(|e| Failure::new(format!("control connection: {e}")))?;
            let Some(msg) = msg else { continue };
            let msg = String::from_utf8_lossy(&msg);
            if let Some(rest) = msg.strip_prefix(word) {
                return Ok(rest.to_string());
            }
            if let Some(why) = msg.strip_prefix("ERR ") {
                return Err(Failure::new(format!("the peer failed: {why}")));
            }
            return Err(Failure::new(format!("control connection: expected {word}, got {msg:?}")));
        }
    }

    /// Tell the client that `reposted` receives of this size were re-posted:
    /// injected, or sent from a credit buffer. Whether it went (not when the
    /// provider pushes back: the caller tries again later).
    fn send_credit(&mut self, reposted: u64) -> Res<bool> {
        let msg = encode_credit(self.idx, reposted, nanos(self.epoch.elapsed()));
        if self.inject_size >= CREDIT_LEN {
            return match self.ep.inject(&msg, self.peer) {
                Ok(()) => Ok(true),
                Err(Error::Again) => Ok(false),
                Err(e) => Err(Failure::fabric("fi_inject", e)),
            };
        }
        if self.credit_tx_free.is_empty() && self.credit_tx_total < CREDIT_SENDS {
            self.credit_tx_free.push(Buf::new(CREDIT_LEN));
            self.credit_tx_total += 1;
        }
        let Some(mut b) = self.credit_tx_free.pop() else { return Ok(false) };
        b.copy_from(&msg).map_err(|e| Failure::fabric("copy", e))?;
        match self.ep.send(b, self.peer, CREDIT_TX_CTX) {
            Ok(()) => Ok(true),
            Err(pe) if pe.error == Error::Again => {
                let b = pe.buffers.into_buf().ok_or_else(|| Failure::new("internal: credit buffer lost"))?;
                self.credit_tx_free.push(b);
                Ok(false)
            }
            Err(pe) => Err(Failure::fabric("fi_send", pe.error)),
        }
    }
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_round_trips() {
        let p = Plan { iterations: 1000, warmup: 128, depth: 128, sizes: vec![0, 1, 64, 6 << 20], probe: false };
        let a = Address::parse("127.0.0.1:4000").unwrap();
        let (q, name) = Plan::decode(&p.encode(Some(&a))).unwrap();
        assert_eq!(q, p);
        assert_eq!(name.as_deref(), Some("fi_sockaddr_in://127.0.0.1:4000"));
        let p = Plan { iterations: 1, warmup: 1, depth: 1, sizes: vec![2], probe: false };
        assert_eq!(Plan::decode(&p.encode(None)).unwrap(), (p, None));
        // Duration mode: probe and measured runs in pairs.
        let p = Plan { iterations: 100, warmup: 1, depth: 1, sizes: vec![2, 2], probe: true };
        assert!(p.encode(None).contains(" probe=1 "));
        assert_eq!(Plan::decode(&p.encode(None)).unwrap(), (p.clone(), None));
        assert!(p.is_probe(0) && !p.is_probe(1));
        assert!(Plan::decode("PLAN iters=1 warmup=1 depth=1 sizes=2 probe=1 name=-").is_none());
        assert!(Plan::decode("PLAN iters=1 warmup=1 depth=1 sizes=2,2 probe=2 name=-").is_none());
        assert!(Plan::decode("PLAN iters=x").is_none());
        assert!(Plan::decode("PLAN iters=1 warmup=0 depth=1 sizes=2 name=-").is_none());
        assert!(Plan::decode("PLAN iters=1 warmup=1 depth=1 sizes= name=-").is_none());
        // Nothing unbounded from the peer.
        assert!(Plan::decode("PLAN iters=1000000000000 warmup=1 depth=1 sizes=2 name=-").is_none());
        assert!(Plan::decode("PLAN iters=1 warmup=1 depth=100000 sizes=2 name=-").is_none());
        assert!(Plan::decode("PLAN iters=1 warmup=1 depth=1 sizes=1099511627776 name=-").is_none());
        let many = vec!["1"; 65].join(",");
        assert!(Plan::decode(&format!("PLAN iters=1 warmup=1 depth=1 sizes={many} name=-")).is_none());
    }

    #[test]
    fn control_credits_round_trip() {
        let m = encode_ctrl_credit(3, 512, 1_234_567_890);
        assert_eq!(m, "CREDIT 3 512 1234567890");
        assert_eq!(decode_ctrl_credit(&m), Some((3, 512, 1_234_567_890)));
        assert_eq!(decode_ctrl_credit("CREDIT 1 2"), None);
        assert_eq!(decode_ctrl_credit("CREDIT 1 2 3 4"), None);
        assert_eq!(decode_ctrl_credit("CREDIT 1 x 3"), None);
        assert_eq!(decode_ctrl_credit("DONE peak=1 avg=1 mpps=1"), None);
        assert_eq!(credits_in("GO credits=128", "GO").ok(), Some(128));
        assert!(credits_in("SYNC 0 64 credits=0", "SYNC").is_err());
        assert!(credits_in("SYNC 0 64", "SYNC").is_err());
        assert_eq!(
            parse_ready("READY addr=0x10 key=0xf19e4f", "client").ok(),
            Some(Remote { addr: 16, key: 0xF1_9E4F })
        );
        assert!(parse_ready("READY addr=0x10", "client").unwrap_err().msg.contains("from the client"));
    }

    #[test]
    fn duration_mode_iterations() {
        let ms = Duration::from_millis;
        // 100 probe iterations in 10 ms: 10000 fill one second.
        assert_eq!(iterations_for(ms(1000), 100, ms(10), 1_000_000), 10_000);
        assert_eq!(iterations_for(ms(2500), 100, ms(10), 1_000_000), 25_000);
        // Bounded by the limit, at least perftest's 5; a probe that took no
        // time runs the limit.
        assert_eq!(iterations_for(ms(1000), 100, ms(1), 50_000), 50_000);
        assert_eq!(iterations_for(ms(1), 10, ms(1000), 1_000_000), 5);
        assert_eq!(iterations_for(ms(1000), 10, Duration::ZERO, 77), 77);
    }

    #[test]
    fn buffer_counts() {
        assert_eq!(buffers_for(65536, 128, 1024), 128);
        assert_eq!(buffers_for(6 << 20, 128, 1024), 42);
        assert_eq!(buffers_for(0, 512, 1024), 512);
        assert_eq!(buffers_for(64, 512, 256), 256);
        assert_eq!(buffers_for(64, 512, 0), 512);
        assert_eq!(buffers_for(1 << 30, 128, 1024), 1);
    }
}
