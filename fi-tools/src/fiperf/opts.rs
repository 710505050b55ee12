//! `fi_perf`'s command line: the operation and the measure (`send bw`), then
//! `fi_pingpong`'s options, perftest's transmit and receive depths, and `--json`.

use crate::common::{opts_with, parse_count, parse_ep, parse_size_sel, Cmd, CommonOpts};
use crate::getopt::{getopt, Item, Opt};
use crate::sizes::SizeSel;
use fabric_core::EpType;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::time::Duration;

/// The usage text.
pub const USAGE: &str = "Usage:
  fi_perf <send|write|read|atomic> <bw|lat> [OPTIONS]\t\tstart server
  fi_perf <send|write|read|atomic> <bw|lat> [OPTIONS] <srv_addr>\tconnect to server

perftest's ib_{send,write,read,atomic}_{bw,lat} over any provider: start the server
without an address and the client with the server's, both with the same test and
options. Both print perftest's result columns; the client's are the usual ones.

Options:
 -B <src_port>        source control port number (server: 47592, client: auto)
 -P <dst_port>        destination control port number (client: 47592)
 -d <domain>          domain name
 -p <provider>        specific provider name eg tcp, verbs
 -e <ep_type>         endpoint type: msg|rdm (rdm)
 -I <number>          number of timed iterations per size (1000)
 -S <size>            specific transfer size or 'all' (bw: 65536, lat: 2; atomic: 8)
 -t <tx_depth>        operations in flight in bw tests (128)
 -r <rx_depth>        server: receives kept posted in send bw (512)
 -h                   display this help output
 -v                   enable debugging output
 -6                   use IPv6 address
 --json               print the results as one JSON object per size and line

fabric additions:
 --timeout <secs>          give up when a transfer makes no progress for this long (10)
 --connect-timeout <secs>  client: keep retrying the control connection this long (5)
 --warmup <number>         untimed iterations before each size (bw: tx depth, lat: 16)

-S all tests 0, 1, 2, 3, 4, 6, 8, 12, ... up to 6m (within the endpoint's maximum
message size), as fi_pingpong. Bandwidth is in MB/sec of 2^20 bytes, as perftest's.
Latency is in microseconds: one way (half a round trip) for send; from post to
completion of each operation for write, read and atomic (FI_SUM on one FI_UINT64,
fetched). The server of write, read and atomic tests is their passive target: the
client reports. A client given -B but not -P connects to that port.
";

/// The data-transfer operation measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// Messages (`fi_send` / `fi_recv`): ib_send_*.
    Send,
    /// RMA writes: ib_write_*.
    Write,
    /// RMA reads: ib_read_*.
    Read,
    /// Fetching atomics (`FI_SUM` on a `FI_UINT64`): ib_atomic_*.
    Atomic,
}

impl Verb {
    /// The word on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Verb::Send => "send",
            Verb::Write => "write",
            Verb::Read => "read",
            Verb::Atomic => "atomic",
        }
    }

    fn parse(s: &str) -> Option<Verb> {
        match s {
            "send" => Some(Verb::Send),
            "write" => Some(Verb::Write),
            "read" => Some(Verb::Read),
            "atomic" => Some(Verb::Atomic),
            _ => None,
        }
    }

    /// perftest's name of the test, as in its banner (`Send BW Test`).
    pub fn title(self) -> &'static str {
        match self {
            Verb::Send => "Send",
            Verb::Write => "RDMA_Write",
            Verb::Read => "RDMA_Read",
            Verb::Atomic => "Atomic FETCH_AND_ADD",
        }
    }
}

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// Bandwidth and message rate, many operations in flight.
    Bw,
    /// Latency, one operation at a time.
    Lat,
}

impl Measure {
    /// The word on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Measure::Bw => "bw",
            Measure::Lat => "lat",
        }
    }

    fn parse(s: &str) -> Option<Measure> {
        match s {
            "bw" => Some(Measure::Bw),
            "lat" => Some(Measure::Lat),
            _ => None,
        }
    }
}

/// A test: an operation and a measure (`send bw`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Test {
    /// The operation.
    pub verb: Verb,
    /// The measure.
    pub measure: Measure,
}

impl fmt::Display for Test {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb.name(), self.measure.name())
    }
}

/// What the command line asks for.
pub type PerfCmd = Cmd<PerfOpts>;

/// `fi_perf`'s options: the common ones (RDM endpoints and 1000 iterations by
/// default: the tests need reliable endpoints), and its own.
#[derive(Debug, Clone, PartialEq)]
pub struct PerfOpts {
    /// The test.
    pub test: Test,
    /// `-B -P -d -p -e -I -v -6 --timeout --connect-timeout` and the server's address.
    pub common: CommonOpts,
    /// `-S`: sizes; `None` for the test's default size.
    pub sizes: Option<SizeSel>,
    /// `-t`: operations in flight (bw tests).
    pub tx_depth: usize,
    /// `-r`: receives the server keeps posted (send bw).
    pub rx_depth: usize,
    /// `--json`: one JSON object per size instead of the table.
    pub json: bool,
    /// `--warmup`: untimed iterations before each size; `None` for the default.
    pub warmup: Option<u64>,
    /// perftest's banner, table and output options (the `fi_send_lat` family);
    /// `None` for `fi_perf`'s own.
    pub perftest: Option<PerftestStyle>,
}

/// What perftest's `--output` prints for each size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputLevel {
    /// The banner and the table (no `--output`).
    Full,
    /// `--output=bandwidth`: the average bandwidth alone, as `%lf`.
    Bandwidth,
    /// `--output=message_rate`: the message rate alone (Mpps), as `%lf`.
    MessageRate,
    /// `--output=latency`: the average latency alone (usec), as `%lf`.
    Latency,
}

/// How the perftest-style tools print: perftest's banner and table, shaped by the
/// perftest options that change them.
#[derive(Debug, Clone, PartialEq)]
pub struct PerftestStyle {
    /// `--report_gbits`: bandwidth in Gbit/s (10^9 bits) instead of MB/s (2^20 bytes).
    pub report_gbits: bool,
    /// `--output`.
    pub output: OutputLevel,
    /// `-N`: no peak bandwidth (printed as 0.00, as perftest does).
    pub no_peak: bool,
    /// `-R`: connected (MSG) endpoints, shown as `rdma_cm QPs : ON`.
    pub rdma_cm: bool,
    /// `-Q`: shown as `CQ Moderation` (every operation completes here).
    pub cq_mod: u32,
    /// `-m`: shown as `Mtu`; `None` shows the endpoint's maximum message size.
    pub mtu: Option<u32>,
    /// `-D`: duration mode: each size runs as many iterations as a probe run's
    /// pace fits in this time; latency reports its average and transactions per
    /// second, bandwidth no peak.
    pub duration: Option<Duration>,
    /// `-b`: bidirectional bandwidth: both sides post the test's operation to
    /// each other at once and each size's row is the sum of both directions.
    pub bidirectional: bool,
    /// `--report-both` (with `-b`, one size): after the summed row, this side's
    /// and the peer's rows, as perftest's "Local results" and "Remote results".
    pub report_both: bool,
}

impl Default for PerftestStyle {
    fn default() -> PerftestStyle {
        PerftestStyle {
            report_gbits: false,
            output: OutputLevel::Full,
            no_peak: false,
            rdma_cm: false,
            cq_mod: 1,
            mtu: None,
            duration: None,
            bidirectional: false,
            report_both: false,
        }
    }
}

impl Deref for PerfOpts {
    type Target = CommonOpts;
    fn deref(&self) -> &CommonOpts {
        &self.common
    }
}

impl DerefMut for PerfOpts {
    fn deref_mut(&mut self) -> &mut CommonOpts {
        &mut self.common
    }
}

/// perftest's default size of bandwidth tests.
pub const DEFAULT_SIZE_BW: usize = 65536;
/// perftest's default size of latency tests.
pub const DEFAULT_SIZE_LAT: usize = 2;
/// The size of an atomic operand (a `FI_UINT64`).
pub const ATOMIC_SIZE: usize = 8;
/// perftest's default transmit depth of bandwidth tests.
pub const DEFAULT_TX_DEPTH: usize = 128;
/// perftest's default receive depth of send tests.
pub const DEFAULT_RX_DEPTH: usize = 512;
/// Warm-up round trips of latency tests by default.
pub const DEFAULT_WARMUP_LAT: u64 = 16;
/// The most iterations (perftest's limit).
pub const MAX_ITERS: u64 = 100_000_000;
/// The most iterations of a latency test, which keeps every sample.
pub const MAX_ITERS_LAT: u64 = 10_000_000;
/// The deepest queue `-t` and `-r` accept (perftest's limits).
pub const MAX_DEPTH: usize = 16384;
/// The largest transfer size `-S` accepts (perftest's is 8 MiB).
pub const MAX_SIZE: usize = 1 << 32;

impl PerfOpts {
    /// `fi_perf`'s defaults for `test`.
    pub fn new(test: Test) -> PerfOpts {
        PerfOpts {
            test,
            common: CommonOpts::new("fi_perf", EpType::Rdm, 1000),
            sizes: None,
            tx_depth: DEFAULT_TX_DEPTH,
            rx_depth: DEFAULT_RX_DEPTH,
            json: false,
            warmup: None,
            perftest: None,
        }
    }

    /// The size selection: `-S`, or the test's default size.
    pub fn size_sel(&self) -> SizeSel {
        if self.test.verb == Verb::Atomic {
            return SizeSel::One(ATOMIC_SIZE);
        }
        self.sizes.unwrap_or(SizeSel::One(match self.test.measure {
            Measure::Bw => DEFAULT_SIZE_BW,
            Measure::Lat => DEFAULT_SIZE_LAT,
        }))
    }

    /// Operations in flight: `-t` for bandwidth tests, one for latency tests.
    pub fn depth(&self) -> usize {
        match self.test.measure {
            Measure::Bw => self.tx_depth,
            Measure::Lat => 1,
        }
    }

    /// Untimed iterations before each size: `--warmup`, or the transmit depth
    /// (bw) or 16 (lat).
    pub fn warmup_iters(&self) -> u64 {
        self.warmup.unwrap_or(match self.test.measure {
            Measure::Bw => self.tx_depth as u64,
            Measure::Lat => DEFAULT_WARMUP_LAT,
        })
    }
}

const OWN_OPTS: &[Opt] = &[Opt::short("t", 't', true), Opt::short("r", 'r', true), Opt::long("json", "json", false)];

/// Parse the arguments (without the program name). `Err` carries the message to
/// print before the usage.
pub fn parse_args<I, S>(args: I) -> Result<PerfCmd, String>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let items = getopt("fi_perf", args, &opts_with(OWN_OPTS)).map_err(|e| e.0)?;
    if items.iter().any(|i| matches!(i, Item::Opt("h", _))) {
        return Ok(PerfCmd::Help);
    }
    let mut operands = items.iter().filter_map(|i| match i {
        Item::Operand(a) => Some(a.as_str()),
        Item::Opt(..) => None,
    });
    let verb = match operands.next() {
        None => return Err("fi_perf: give the test: send, write, read or atomic, then bw or lat".into()),
        Some(v) => {
            Verb::parse(v).ok_or_else(|| format!("fi_perf: unknown operation '{v}': send, write, read or atomic"))?
        }
    };
    let measure = match operands.next() {
        None => return Err(format!("fi_perf {}: give the measure: bw or lat", verb.name())),
        Some(m) => {
            Measure::parse(m).ok_or_else(|| format!("fi_perf {}: unknown measure '{m}': bw or lat", verb.name()))?
        }
    };
    let mut o = PerfOpts::new(Test { verb, measure });
    o.dst_addr = operands.next().map(str::to_string);
    if let Some(extra) = operands.next() {
        return Err(format!("fi_perf: unexpected argument '{extra}': give one server address"));
    }
    let mut tx_depth_given = false;
    for item in items {
        let Item::Opt(name, val) = item else { continue };
        let val = val.unwrap_or_default();
        match name {
            "e" => {
                o.ep_type = match parse_ep(&val)? {
                    EpType::Dgram => {
                        return Err("fi_perf: dgram endpoints are unreliable: the tests need -e msg or -e rdm".into())
                    }
                    ep => ep,
                }
            }
            "I" => o.iterations = parse_count(&val, 1, MAX_ITERS)?,
            "S" => {
                o.sizes = Some(match parse_size_sel(&val)? {
                    SizeSel::One(n) if n > MAX_SIZE => {
                        return Err(format!("Error parsing \"{val}\": at most {MAX_SIZE} bytes (4g)"))
                    }
                    sel => sel,
                })
            }
            "t" => {
                o.tx_depth = parse_count(&val, 1, MAX_DEPTH as u64)? as usize;
                tx_depth_given = true;
            }
            "r" => o.rx_depth = parse_count(&val, 1, MAX_DEPTH as u64)? as usize,
            "json" => o.json = true,
            "warmup" => o.warmup = Some(parse_count(&val, 1, MAX_ITERS)?),
            _ => {
                if !o.common.apply(name, &val)? {
                    unreachable!("option {name} declared but not handled")
                }
            }
        }
    }
    if o.test.measure == Measure::Lat {
        if o.iterations > MAX_ITERS_LAT {
            return Err(format!(
                "Error parsing \"{}\": latency tests keep every sample: at most {MAX_ITERS_LAT} iterations",
                o.iterations
            ));
        }
        if tx_depth_given && o.tx_depth != 1 {
            return Err("fi_perf: latency tests run one operation at a time: -t applies to bw tests".into());
        }
    }
    if o.test.verb == Verb::Atomic && matches!(o.sizes, Some(s) if s != SizeSel::One(ATOMIC_SIZE)) {
        return Err(format!("fi_perf atomic: the operand is one FI_UINT64: -S must be {ATOMIC_SIZE} (or absent)"));
    }
    Ok(PerfCmd::Run(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> PerfOpts {
        match parse_args(args.iter().copied()).unwrap() {
            PerfCmd::Run(o) => o,
            PerfCmd::Help => panic!("help"),
        }
    }

    #[test]
    fn defaults_are_perftests() {
        let o = run(&["send", "bw"]);
        assert_eq!(o.test, Test { verb: Verb::Send, measure: Measure::Bw });
        assert_eq!(o.ep_type, EpType::Rdm);
        assert_eq!(o.iterations, 1000);
        assert_eq!(o.size_sel(), SizeSel::One(65536));
        assert_eq!((o.depth(), o.rx_depth, o.warmup_iters()), (128, 512, 128));
        assert_eq!(o.server_port(), 47592);
        assert!(o.dst_addr.is_none() && !o.json && !o.verbose);
        let o = run(&["send", "lat"]);
        assert_eq!(o.size_sel(), SizeSel::One(2));
        assert_eq!((o.depth(), o.warmup_iters()), (1, 16));
        assert_eq!(run(&["atomic", "bw"]).size_sel(), SizeSel::One(8));
        assert_eq!(run(&["atomic", "lat", "-S", "8"]).size_sel(), SizeSel::One(8));
        assert_eq!(run(&["send", "bw", "-t", "16"]).warmup_iters(), 16);
        assert_eq!(Test { verb: Verb::Read, measure: Measure::Lat }.to_string(), "read lat");
    }

    #[test]
    fn options_in_any_spelling_and_order() {
        let o =
            run(&["-ptcp", "send", "-e", "msg", "bw", "-I100", "-S", "4k", "127.0.0.1", "-t", "8", "--json", "-v6"]);
        assert_eq!(o.provider.as_deref(), Some("tcp"));
        assert_eq!(o.ep_type, EpType::Msg);
        assert_eq!(o.iterations, 100);
        assert_eq!(o.size_sel(), SizeSel::One(4096));
        assert_eq!(o.dst_addr.as_deref(), Some("127.0.0.1"));
        assert_eq!(o.tx_depth, 8);
        assert!(o.json && o.verbose && o.ipv6);
        assert_eq!(run(&["send", "lat", "-S", "all"]).size_sel(), SizeSel::All);
        assert_eq!(run(&["send", "lat", "-S", "0"]).size_sel(), SizeSel::One(0));
        let o =
            run(&["write", "lat", "--timeout", "2.5", "--connect-timeout=1", "--warmup", "3", "-d", "lo", "-r", "64"]);
        assert_eq!(o.test, Test { verb: Verb::Write, measure: Measure::Lat });
        assert_eq!(o.timeout, Duration::from_millis(2500));
        assert_eq!(o.connect_timeout, Duration::from_secs(1));
        assert_eq!((o.warmup_iters(), o.rx_depth), (3, 64));
        assert_eq!(o.domain.as_deref(), Some("lo"));
        assert_eq!(run(&["send", "lat", "-t", "1"]).depth(), 1);
        // Help wins over everything, even a missing test.
        assert_eq!(parse_args(["-h"]).unwrap(), PerfCmd::Help);
        assert_eq!(parse_args(["send", "--help"]).unwrap(), PerfCmd::Help);
    }

    #[test]
    fn control_ports() {
        assert_eq!(run(&["send", "bw", "-B", "5000"]).server_port(), 5000);
        assert_eq!(run(&["send", "bw", "-B", "5000"]).client_ports(), (5000, None));
        assert_eq!(run(&["send", "bw", "-B", "6000", "-P", "5000"]).client_ports(), (5000, Some(6000)));
    }

    #[test]
    fn bad_options_are_refused() {
        for args in [
            &[][..],
            &["send"],
            &["sned", "bw"],
            &["send", "bandwidth"],
            &["send", "bw", "a", "b"],
            &["send", "bw", "-e", "dgram"],
            &["send", "bw", "-e", "foo"],
            &["send", "bw", "-I", "0"],
            &["send", "bw", "-I", "x"],
            &["send", "bw", "-S", "x"],
            &["send", "bw", "-S", "5g"],
            &["send", "bw", "-t", "0"],
            &["send", "bw", "-t", "100000"],
            &["send", "bw", "-r", "0"],
            &["send", "bw", "-B", "70000"],
            &["send", "bw", "-Z"],
            &["send", "bw", "-p"],
            &["send", "bw", "--timeout", "0"],
            &["send", "bw", "--warmup", "0"],
            &["send", "bw", "--jsn"],
            &["send", "lat", "-t", "4"],
            &["send", "lat", "-I", "20000000"],
            &["atomic", "bw", "-S", "64"],
        ] {
            assert!(parse_args(args.iter().copied()).is_err(), "{args:?}");
        }
        assert_eq!(parse_args(["send", "bw", "-e", "foo"]).unwrap_err(), "Unknown endpoint : foo");
        assert_eq!(
            parse_args(["sned", "bw"]).unwrap_err(),
            "fi_perf: unknown operation 'sned': send, write, read or atomic"
        );
        assert_eq!(parse_args(["send", "-Z"]).unwrap_err(), "fi_perf: invalid option -- 'Z'");
    }
}
