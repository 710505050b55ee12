//! The command line of the perftest-style tools: perftest's options with
//! perftest's meanings, mapped onto [`PerfOpts`]; those with no meaning over a
//! provider are accepted with a note or refused with the reason.

use crate::common::{parse_count, parse_port, parse_secs, Cmd};
use crate::fiperf::opts::{
    Measure, OutputLevel, PerfOpts, PerftestStyle, Test, Verb, ATOMIC_SIZE, MAX_DEPTH, MAX_ITERS, MAX_ITERS_LAT,
};
use crate::getopt::{getopt, Item, Opt};
use crate::sizes::SizeSel;
use fabric_core::EpType;
use std::time::Duration;

/// perftest's default control port.
pub const DEFAULT_PORT: u16 = 18515;
/// perftest's least number of iterations.
pub const MIN_ITERS: u64 = 5;
/// perftest's default iterations (`ib_write_bw`: [`DEFAULT_ITERS_WRITE_BW`]).
pub const DEFAULT_ITERS: u64 = 1000;
/// `ib_write_bw`'s default iterations.
pub const DEFAULT_ITERS_WRITE_BW: u64 = 5000;
/// The largest `-s` (perftest's `UINT_MAX / 2`).
pub const MAX_MSG_SIZE: u64 = (u32::MAX / 2) as u64;
/// The longest `-D`, in seconds (a day).
pub const MAX_DURATION: u64 = 86_400;
/// The largest `-Q` (perftest's).
pub const MAX_CQ_MOD: u64 = 1024;

/// The name of the tool running `test`: `fi_send_lat`, `fi_atomic_bw`, ...
pub fn prog_name(test: Test) -> &'static str {
    match (test.verb, test.measure) {
        (Verb::Send, Measure::Lat) => "fi_send_lat",
        (Verb::Send, Measure::Bw) => "fi_send_bw",
        (Verb::Write, Measure::Lat) => "fi_write_lat",
        (Verb::Write, Measure::Bw) => "fi_write_bw",
        (Verb::Read, Measure::Lat) => "fi_read_lat",
        (Verb::Read, Measure::Bw) => "fi_read_bw",
        (Verb::Atomic, Measure::Lat) => "fi_atomic_lat",
        (Verb::Atomic, Measure::Bw) => "fi_atomic_bw",
    }
}

/// What the tools do with a perftest option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// It has a meaning here (handled by [`parse_args`]).
    Used,
    /// Accepted; it has no meaning over a provider: the note says why.
    Ignored(&'static str),
    /// Refused, for this reason.
    Refused(&'static str),
}

/// One perftest option: short letter, long name, whether it takes an argument,
/// and what the tools do with it.
struct PtOpt(Option<char>, Option<&'static str>, bool, Kind);

use Kind::{Ignored, Refused, Used};

const NO_IB: &str = "an InfiniBand setting the provider chooses";
const POLLED: &str = "the tools poll their completion queues";
const NOT_HERE: &str = "not supported by the fabric tools";

/// Every option of perftest 6.06's `ib_*_{lat,bw}` tools, and the tools' own.
const TABLE: &[PtOpt] = &[
    PtOpt(Some('a'), Some("all"), false, Used),
    PtOpt(Some('b'), Some("bidirectional"), false, Used),
    PtOpt(Some('c'), Some("connection"), true, Used),
    PtOpt(Some('d'), Some("ib-dev"), true, Used),
    PtOpt(Some('D'), Some("duration"), true, Used),
    PtOpt(Some('F'), Some("CPU-freq"), false, Used),
    PtOpt(Some('h'), Some("help"), false, Used),
    PtOpt(Some('m'), Some("mtu"), true, Used),
    PtOpt(Some('n'), Some("iters"), true, Used),
    PtOpt(Some('N'), Some("noPeak"), false, Used),
    PtOpt(Some('p'), Some("port"), true, Used),
    PtOpt(Some('q'), Some("qp"), true, Used),
    PtOpt(Some('Q'), Some("cq-mod"), true, Used),
    PtOpt(Some('R'), Some("rdma_cm"), false, Used),
    PtOpt(Some('r'), Some("rx-depth"), true, Used),
    PtOpt(Some('s'), Some("size"), true, Used),
    PtOpt(Some('t'), Some("tx-depth"), true, Used),
    PtOpt(Some('V'), Some("version"), false, Used),
    PtOpt(Some('A'), Some("atomic_type"), true, Used),
    PtOpt(Some('x'), Some("gid-index"), true, Ignored("the domain (-d) selects the address")),
    PtOpt(None, Some("report_gbits"), false, Used),
    PtOpt(None, Some("output"), true, Used),
    PtOpt(None, Some("provider"), true, Used),
    PtOpt(None, Some("timeout"), true, Used),
    PtOpt(None, Some("connect-timeout"), true, Used),
    PtOpt(None, Some("debug"), false, Used),
    PtOpt(Some('i'), Some("ib-port"), true, Ignored("the domain (-d) selects the port")),
    PtOpt(Some('I'), Some("inline_size"), true, Ignored("the provider's inject size applies")),
    PtOpt(Some('e'), Some("events"), false, Ignored(POLLED)),
    PtOpt(Some('X'), Some("vector"), true, Ignored(POLLED)),
    PtOpt(Some('S'), Some("sl"), true, Ignored(NO_IB)),
    PtOpt(Some('T'), Some("tos"), true, Ignored(NO_IB)),
    PtOpt(Some('u'), Some("qp-timeout"), true, Ignored(NO_IB)),
    PtOpt(Some('L'), Some("hop_limit"), true, Ignored(NO_IB)),
    PtOpt(None, Some("pkey_index"), true, Ignored(NO_IB)),
    PtOpt(None, Some("retry_count"), true, Ignored(NO_IB)),
    PtOpt(None, Some("tclass"), true, Ignored(NO_IB)),
    PtOpt(None, Some("force-link"), true, Ignored(NO_IB)),
    PtOpt(None, Some("ipv6"), false, Ignored("the provider's addresses apply (-6 is not perftest's)")),
    PtOpt(None, Some("source_ip"), true, Ignored("the provider's addresses apply")),
    PtOpt(None, Some("disable_pcie_relaxed"), false, Ignored(NO_IB)),
    PtOpt(Some('l'), Some("post_list"), true, Ignored("operations are posted one at a time")),
    PtOpt(None, Some("recv_post_list"), true, Ignored("receives are posted one at a time")),
    PtOpt(Some('o'), Some("outs"), true, Ignored("-t sets the operations in flight")),
    PtOpt(Some('f'), Some("margin"), true, Ignored("-D measures the whole duration")),
    PtOpt(
        Some('z'),
        Some("com_rdma_cm"),
        false,
        Ignored("the tools exchange addresses over their own control connection"),
    ),
    PtOpt(None, Some("dont_xchg_versions"), false, Ignored("the control connection always checks the peer")),
    PtOpt(Some('w'), Some("limit_bw"), true, Ignored("no result verifier")),
    PtOpt(Some('y'), Some("limit_msgrate"), true, Ignored("no result verifier")),
    PtOpt(None, Some("perform_warm_up"), false, Ignored("every size is warmed up")),
    PtOpt(None, Some("use_old_post_send"), false, Ignored("the provider posts")),
    PtOpt(None, Some("use_hugepages"), false, Ignored("buffers come from the allocator")),
    PtOpt(None, Some("odp"), false, Ignored("the provider registers memory as it needs")),
    PtOpt(None, Some("use-srq"), false, Ignored("one endpoint, one receive queue")),
    PtOpt(None, Some("mr_per_qp"), false, Ignored("one endpoint")),
    PtOpt(None, Some("inline_recv"), true, Ignored(NO_IB)),
    PtOpt(None, Some("wait_destroy"), true, Ignored("resources are released at once")),
    PtOpt(Some('C'), Some("report-cycles"), false, Refused("times are reported in microseconds only")),
    PtOpt(Some('H'), Some("report-histogram"), false, Refused("per-sample output is not implemented")),
    PtOpt(Some('U'), Some("report-unsorted"), false, Refused("per-sample output is not implemented")),
    PtOpt(Some('g'), Some("mcg"), false, Refused("multicast is not part of these tests")),
    PtOpt(Some('M'), Some("MGID"), true, Refused("multicast is not part of these tests")),
    PtOpt(Some('O'), Some("dualport"), false, Refused("each side has one endpoint")),
    PtOpt(Some('W'), Some("report-counters"), true, Refused("there are no port counters through fabric")),
    PtOpt(None, Some("cpu_util"), false, Refused(NOT_HERE)),
    PtOpt(None, Some("out_json"), false, Refused("use fi_perf --json")),
    PtOpt(None, Some("out_json_file"), true, Refused("use fi_perf --json")),
    PtOpt(None, Some("run_infinitely"), false, Refused(NOT_HERE)),
    PtOpt(None, Some("reversed"), false, Refused("the client always initiates")),
    PtOpt(None, Some("report-both"), false, Used),
    PtOpt(None, Some("report-per-port"), false, Refused("each side has one endpoint")),
    PtOpt(None, Some("latency_gap"), true, Refused(NOT_HERE)),
    PtOpt(None, Some("mmap"), true, Refused(NOT_HERE)),
    PtOpt(None, Some("mmap-offset"), true, Refused(NOT_HERE)),
    PtOpt(None, Some("dlid"), true, Refused(NO_IB)),
    PtOpt(None, Some("burst_size"), true, Refused("there is no rate limiter")),
    PtOpt(None, Some("typical_pkt_size"), true, Refused("there is no rate limiter")),
    PtOpt(None, Some("rate_limit"), true, Refused("there is no rate limiter")),
    PtOpt(None, Some("rate_units"), true, Refused("there is no rate limiter")),
    PtOpt(None, Some("rate_limit_type"), true, Refused("there is no rate limiter")),
    PtOpt(None, Some("log_dci_streams"), true, Refused(NO_IB)),
    PtOpt(None, Some("log_active_dci_streams"), true, Refused(NO_IB)),
    PtOpt(None, Some("aes_xts"), false, Refused(NOT_HERE)),
    PtOpt(None, Some("encrypt_on_tx"), false, Refused(NOT_HERE)),
    PtOpt(None, Some("sig_before"), false, Refused(NOT_HERE)),
    PtOpt(None, Some("aes_block_size"), true, Refused(NOT_HERE)),
    PtOpt(None, Some("data_enc_keys_number"), true, Refused(NOT_HERE)),
    PtOpt(None, Some("kek_path"), true, Refused(NOT_HERE)),
    PtOpt(None, Some("credentials_path"), true, Refused(NOT_HERE)),
    PtOpt(None, Some("data_enc_key_app_path"), true, Refused(NOT_HERE)),
];

/// The key getopt reports an option by: its long name (every option has one).
fn key(o: &PtOpt) -> &'static str {
    o.1.unwrap_or("")
}

fn getopt_table() -> Vec<Opt> {
    TABLE.iter().map(|o| Opt { name: key(o), short: o.0, long: o.1, has_arg: o.2 }).collect()
}

/// How the option is spelled in messages: `-x (--gid-index)` or `--odp`.
fn spelled(name: &str) -> String {
    match TABLE.iter().find(|o| key(o) == name).and_then(|o| o.0) {
        Some(c) => format!("-{c} (--{name})"),
        None => format!("--{name}"),
    }
}

/// What the command line asks for, and the notes about options it ignores (to
/// print on standard error).
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// Help, version or a run.
    pub cmd: PtCmd,
    /// One line per ignored option.
    pub notes: Vec<String>,
}

/// Help, the version or a run.
#[derive(Debug, Clone, PartialEq)]
pub enum PtCmd {
    /// `-h`: print the usage.
    Help,
    /// `-V`: print the version.
    Version,
    /// Run the test with these options.
    Run(Box<PerfOpts>),
}

impl PtCmd {
    /// The engine's command: help or a run (the version is printed before).
    pub fn into_cmd(self) -> Cmd<PerfOpts> {
        match self {
            PtCmd::Run(o) => Cmd::Run(*o),
            PtCmd::Help | PtCmd::Version => Cmd::Help,
        }
    }
}

/// Parse the arguments of the tool running `test` (without the program name).
/// `Err` carries the message to print before the usage.
pub fn parse_args<I, S>(test: Test, args: I) -> Result<Parsed, String>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let prog = prog_name(test);
    let items = getopt(prog, args, &getopt_table()).map_err(|e| e.0)?;
    if items.iter().any(|i| matches!(i, Item::Opt("help", _))) {
        return Ok(Parsed { cmd: PtCmd::Help, notes: Vec::new() });
    }
    if items.iter().any(|i| matches!(i, Item::Opt("version", _))) {
        return Ok(Parsed { cmd: PtCmd::Version, notes: Vec::new() });
    }
    let mut o = PerfOpts::new(test);
    o.common.prog = prog;
    o.common.src_port = Some(DEFAULT_PORT);
    o.iterations =
        if test == (Test { verb: Verb::Write, measure: Measure::Bw }) { DEFAULT_ITERS_WRITE_BW } else { DEFAULT_ITERS };
    let mut style = PerftestStyle::default();
    let mut notes = Vec::new();
    let lat = test.measure == Measure::Lat;
    let mut all = false;
    let mut size = None;
    let mut report_both = false;
    for item in items {
        let (name, val) = match item {
            Item::Operand(a) => {
                if o.dst_addr.is_some() {
                    return Err(format!("{prog}: unexpected argument '{a}': give one server address"));
                }
                o.dst_addr = Some(a);
                continue;
            }
            Item::Opt(name, val) => (name, val.unwrap_or_default()),
        };
        let kind = TABLE.iter().find(|t| key(t) == name).map_or(Used, |t| t.3);
        match kind {
            Ignored(why) => {
                notes.push(format!("{prog}: note: {} ignored: {why}", spelled(name)));
                continue;
            }
            Refused(why) => return Err(format!("{prog}: {} is not supported: {why}", spelled(name))),
            Used => {}
        }
        match name {
            "all" if test.verb == Verb::Atomic => {
                return Err(format!("{prog}: -a (--all) does not apply: an atomic operand is {ATOMIC_SIZE} bytes"))
            }
            "all" => all = true,
            "bidirectional" if lat => return Err(" Bidirectional is only available in BW test".into()),
            "bidirectional" => style.bidirectional = true,
            // perftest prints both sides' rows only with -b, and not with -a.
            "report-both" => report_both = true,
            "connection" => match val.to_ascii_uppercase().as_str() {
                "RC" => {}
                "UC" | "UD" | "XRC" | "DC" | "SRD" => {
                    return Err(format!(
                        "{prog}: -c {val} is not supported: the tests run on reliable endpoints (RDM, or MSG with -R), \
                         which are RC's"
                    ))
                }
                _ => return Err(" Invalid Connection type. Please choose from {RC,UC,UD,XRC,DC,SRD}".into()),
            },
            "ib-dev" => o.domain = Some(val),
            "duration" => {
                style.duration = Some(Duration::from_secs(parse_count(&val, 1, MAX_DURATION)?));
            }
            // perftest's -F silences its CPU frequency warning, which these tools never print.
            "CPU-freq" => {}
            "mtu" => {
                let m = val.trim().parse::<u32>().ok().filter(|m| [256, 512, 1024, 2048, 4096].contains(m));
                let Some(m) = m else { return Err(format!(" Invalid MTU - {val} ")) };
                style.mtu = Some(m);
                notes.push(format!("{prog}: note: -m (--mtu) {m} only shown: the provider chooses its packet size"));
            }
            "iters" => o.iterations = parse_count(&val, MIN_ITERS, if lat { MAX_ITERS_LAT } else { MAX_ITERS })?,
            "noPeak" if lat => return Err(" NoPeak only valid for BW tests".into()),
            "noPeak" => style.no_peak = true,
            "port" => o.common.src_port = Some(parse_port(&val)?),
            "qp" => {
                if parse_count(&val, 1, u64::MAX)? != 1 {
                    return Err(format!("{prog}: -q {val} is not supported: each side has one endpoint (-q 1)"));
                }
            }
            "cq-mod" => {
                style.cq_mod = parse_count(&val, 1, MAX_CQ_MOD)? as u32;
                notes.push(format!("{prog}: note: -Q (--cq-mod) only shown: every operation completes"));
            }
            "rdma_cm" => {
                o.ep_type = EpType::Msg;
                style.rdma_cm = true;
            }
            "rx-depth" => o.rx_depth = parse_count(&val, 1, MAX_DEPTH as u64)? as usize,
            "size" => size = Some(parse_count(&val, 1, MAX_MSG_SIZE)? as usize),
            "tx-depth" if lat => {
                return Err(format!("{prog}: -t (--tx-depth) applies to bw tests: latency tests run one at a time"))
            }
            "tx-depth" => o.tx_depth = parse_count(&val, 1, MAX_DEPTH as u64)? as usize,
            "atomic_type" if test.verb != Verb::Atomic => {
                return Err(format!("{prog}: -A (--atomic_type) applies to fi_atomic_lat and fi_atomic_bw"))
            }
            "atomic_type" => match val.as_str() {
                "FETCH_AND_ADD" => {}
                "CMP_AND_SWAP" => {
                    return Err(format!(
                        "{prog}: -A CMP_AND_SWAP is not supported: the tests run fetching FI_SUM (FETCH_AND_ADD)"
                    ))
                }
                _ => return Err(" Invalid Atomic type! please choose from {CMP_AND_SWAP,FETCH_AND_ADD}".into()),
            },
            "report_gbits" => style.report_gbits = true,
            "output" => {
                style.output = match val.as_str() {
                    "bandwidth" | "message_rate" if lat => {
                        return Err(format!("{prog}: --output={val} applies to bw tests: use --output=latency"))
                    }
                    "latency" if !lat => {
                        return Err(format!(
                            "{prog}: --output=latency applies to latency tests: use bandwidth or message_rate"
                        ))
                    }
                    "bandwidth" => OutputLevel::Bandwidth,
                    "message_rate" => OutputLevel::MessageRate,
                    "latency" => OutputLevel::Latency,
                    _ => {
                        return Err(
                            " Invalid verbosity level output flag. Please use bandwidth, latency, message_rate".into()
                        )
                    }
                }
            }
            "provider" => o.provider = Some(val),
            "timeout" => o.timeout = parse_secs(&val)?,
            "connect-timeout" => o.connect_timeout = parse_secs(&val)?,
            "debug" => o.verbose = true,
            _ => unreachable!("option {name} declared but not handled"),
        }
    }
    if style.duration.is_some() && all {
        return Err("Duration mode currently doesn't support running on all sizes.".into());
    }
    if test.verb == Verb::Atomic {
        if let Some(s) = size.filter(|&s| s != ATOMIC_SIZE) {
            return Err(format!("{prog}: -s {s} does not apply: an atomic operand is {ATOMIC_SIZE} bytes"));
        }
    }
    o.sizes = if all { Some(SizeSel::PowersOfTwo) } else { size.map(SizeSel::One) };
    style.report_both = report_both && style.bidirectional && !all;
    o.perftest = Some(style);
    Ok(Parsed { cmd: PtCmd::Run(Box::new(o)), notes })
}

/// The usage text of the tool running `test`.
pub fn usage(test: Test) -> String {
    let prog = prog_name(test);
    let lat = test.measure == Measure::Lat;
    let mut u = format!(
        "Usage:
  {prog}            start a server and wait for connection
  {prog} <host>     connect to server at <host>

perftest's ib_{}_{} over any fabric provider: the same options, meanings and
output. Options:
",
        test.verb.name(),
        test.measure.name()
    );
    let default_size = match (test.verb, test.measure) {
        (Verb::Atomic, _) => None,
        (_, Measure::Bw) => Some(65536),
        (_, Measure::Lat) => Some(2),
    };
    let iters =
        if test == (Test { verb: Verb::Write, measure: Measure::Bw }) { DEFAULT_ITERS_WRITE_BW } else { DEFAULT_ITERS };
    if default_size.is_some() {
        u.push_str("  -a, --all  Run sizes from 2 till 2^23\n");
    }
    if test.verb == Verb::Atomic {
        u.push_str("  -A, --atomic_type=<type>  FETCH_AND_ADD (fetching FI_SUM on a FI_UINT64; the default)\n");
    }
    if !lat {
        u.push_str("  -b, --bidirectional  Both sides post the operation; each row is the sum of both directions\n");
    }
    u.push_str("  -c, --connection=<RC>  Connection type: RC (reliable endpoints; the default)\n");
    u.push_str("  -d, --ib-dev=<dev>  Use domain <dev> (default the provider's first)\n");
    u.push_str(
        "  -D, --duration  Run test for a customized period of seconds (a probe of -n iterations sets the pace).\n",
    );
    u.push_str("  -F, --CPU-freq  Accepted (no CPU frequency warning is printed)\n");
    u.push_str("  -h, --help  Show this help screen.\n");
    u.push_str("  -m, --mtu=<mtu>  MTU size : 256 - 4096 (shown only: the provider chooses)\n");
    let _ = std::fmt::Write::write_fmt(
        &mut u,
        format_args!("  -n, --iters=<iters>  Number of exchanges (at least {MIN_ITERS}, default {iters})\n"),
    );
    if !lat {
        u.push_str("  -N, --noPeak Cancel peak-bw calculation (printed as 0.00)\n");
    }
    u.push_str("  -p, --port=<port>  Listen on/connect to port <port> (default 18515)\n");
    u.push_str("  -q, --qp=<num of qp's>  Num of qp's: 1\n");
    if !lat {
        u.push_str("  -Q, --cq-mod  Shown only: every operation completes\n");
    }
    u.push_str("  -R, --rdma_cm  Connect with connected (MSG) endpoints instead of RDM ones\n");
    if test.verb == Verb::Send {
        u.push_str("  -r, --rx-depth=<dep>  Rx queue size (default 512)\n");
    }
    if let Some(s) = default_size {
        let _ = std::fmt::Write::write_fmt(
            &mut u,
            format_args!("  -s, --size=<size>  Size of message to exchange (default {s})\n"),
        );
    }
    if !lat {
        u.push_str("  -t, --tx-depth=<dep>  Size of tx queue (default 128)\n");
    }
    u.push_str("  -V, --version  Display version number\n");
    u.push_str("  -x, --gid-index=<index>  Ignored: the domain (-d) selects the address\n");
    if lat {
        u.push_str("      --output=<units> Print only the average latency: latency\n");
    } else {
        u.push_str("      --output=<units> Print only the average: bandwidth, message_rate\n");
        u.push_str("      --report_gbits  Report Max/Average BW of test in Gbit/sec (instead of MiB/sec)\n");
        u.push_str("      --report-both  With -b (one size): also each side's results, local and remote\n");
    }
    u.push_str(
        "
fabric's own:
      --provider=<name>  Use this provider (tcp, udp, shm, verbs; default the first that fits)
      --timeout=<secs>  Give up when a transfer makes no progress for this long (10)
      --connect-timeout=<secs>  Client: keep retrying the control connection this long (5)
      --debug  Debugging output on standard error

perftest's InfiniBand options (-i -I -e -X -S -T -u -L -l -o -w -y --pkey_index ...)
are accepted and ignored with a note; its options with no counterpart here (-C -H
-U -g -M -O -W --run_infinitely ...) are refused with the reason.
",
    );
    u
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEND_LAT: Test = Test { verb: Verb::Send, measure: Measure::Lat };
    const SEND_BW: Test = Test { verb: Verb::Send, measure: Measure::Bw };
    const WRITE_BW: Test = Test { verb: Verb::Write, measure: Measure::Bw };
    const ATOMIC_LAT: Test = Test { verb: Verb::Atomic, measure: Measure::Lat };

    fn run(test: Test, args: &[&str]) -> (PerfOpts, Vec<String>) {
        let p = parse_args(test, args.iter().copied()).unwrap();
        match p.cmd {
            PtCmd::Run(o) => (*o, p.notes),
            c => panic!("{c:?}"),
        }
    }

    fn style(o: &PerfOpts) -> &PerftestStyle {
        o.perftest.as_ref().unwrap()
    }

    #[test]
    fn defaults_are_perftests() {
        let (o, notes) = run(SEND_LAT, &[]);
        assert!(notes.is_empty());
        assert_eq!((o.prog, o.server_port(), o.iterations), ("fi_send_lat", 18515, 1000));
        assert_eq!((o.ep_type, o.size_sel(), o.depth()), (EpType::Rdm, SizeSel::One(2), 1));
        assert_eq!(style(&o), &PerftestStyle::default());
        assert!(o.dst_addr.is_none());
        let (o, _) = run(SEND_BW, &["server.example"]);
        assert_eq!((o.size_sel(), o.depth(), o.rx_depth, o.iterations), (SizeSel::One(65536), 128, 512, 1000));
        assert_eq!(o.dst_addr.as_deref(), Some("server.example"));
        assert_eq!(o.client_ports(), (18515, None));
        assert_eq!(run(WRITE_BW, &[]).0.iterations, 5000);
        assert_eq!(run(ATOMIC_LAT, &[]).0.size_sel(), SizeSel::One(8));
        for (t, name) in [(SEND_BW, "fi_send_bw"), (WRITE_BW, "fi_write_bw"), (ATOMIC_LAT, "fi_atomic_lat")] {
            assert_eq!(prog_name(t), name);
            assert!(usage(t).starts_with(&format!("Usage:\n  {name}            start a server")));
        }
    }

    #[test]
    fn each_option_means_what_it_means_in_perftest() {
        let (o, notes) = run(
            SEND_BW,
            &["-s", "4096", "-n", "200", "-p", "20000", "-d", "lo", "-F", "-t", "16", "-r", "64", "-N", "host"],
        );
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!((o.size_sel(), o.iterations, o.server_port()), (SizeSel::One(4096), 200, 20000));
        assert_eq!((o.domain.as_deref(), o.tx_depth, o.rx_depth), (Some("lo"), 16, 64));
        assert_eq!(o.client_ports(), (20000, None));
        assert!(style(&o).no_peak);
        // Long forms, with = or a separate argument.
        let (o, _) = run(
            SEND_BW,
            &["--size=128", "--iters", "10", "--port=20001", "--ib-dev=d0", "--CPU-freq", "--report_gbits"],
        );
        assert_eq!((o.size_sel(), o.iterations, o.server_port()), (SizeSel::One(128), 10, 20001));
        assert_eq!(o.domain.as_deref(), Some("d0"));
        assert!(style(&o).report_gbits);
        let (o, _) = run(SEND_LAT, &["-a", "--provider", "tcp", "-R", "-q", "1", "-c", "RC"]);
        assert_eq!((o.size_sel(), o.provider.as_deref(), o.ep_type), (SizeSel::PowersOfTwo, Some("tcp"), EpType::Msg));
        assert!(style(&o).rdma_cm);
        assert_eq!(run(SEND_LAT, &["--all", "-s", "64"]).0.size_sel(), SizeSel::PowersOfTwo);
        let (o, _) = run(SEND_LAT, &["--output=latency", "--timeout", "2", "--connect-timeout=1", "--debug"]);
        assert_eq!(style(&o).output, OutputLevel::Latency);
        assert_eq!((o.timeout, o.connect_timeout, o.verbose), (Duration::from_secs(2), Duration::from_secs(1), true));
        assert_eq!(style(&run(SEND_BW, &["--output", "bandwidth"]).0).output, OutputLevel::Bandwidth);
        assert_eq!(style(&run(SEND_LAT, &["-D", "3"]).0).duration, Some(Duration::from_secs(3)));
        assert_eq!(style(&run(SEND_BW, &["--duration=1"]).0).duration, Some(Duration::from_secs(1)));
        assert_eq!(style(&run(SEND_BW, &["--output=message_rate"]).0).output, OutputLevel::MessageRate);
        let (o, notes) = run(SEND_BW, &["-m", "1024", "-Q", "4", "--mtu=2048"]);
        assert_eq!((style(&o).mtu, style(&o).cq_mod), (Some(2048), 4));
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert_eq!(run(ATOMIC_LAT, &["-A", "FETCH_AND_ADD", "-s", "8"]).0.size_sel(), SizeSel::One(8));
        assert_eq!(parse_args(SEND_LAT, ["-h"]).unwrap().cmd, PtCmd::Help);
        assert_eq!(parse_args(SEND_LAT, ["--version", "-s", "x"]).unwrap().cmd, PtCmd::Version);
    }

    #[test]
    fn bidirectional_as_perftest() {
        for t in [SEND_BW, WRITE_BW, Test { verb: Verb::Read, measure: Measure::Bw }] {
            let (o, notes) = run(t, &["-b", "-n", "10"]);
            assert!(notes.is_empty(), "{notes:?}");
            assert!(style(&o).bidirectional && !style(&o).report_both);
            assert!(usage(t).contains("-b, --bidirectional"), "{}", usage(t));
        }
        let (o, _) = run(Test { verb: Verb::Atomic, measure: Measure::Bw }, &["--bidirectional"]);
        assert!(style(&o).bidirectional);
        assert!(!style(&run(SEND_BW, &[]).0).bidirectional);
        // --report-both: with -b, on one size (perftest prints it nowhere else).
        assert!(style(&run(SEND_BW, &["-b", "--report-both"]).0).report_both);
        assert!(style(&run(WRITE_BW, &["--report-both", "-b", "-D", "2"]).0).report_both);
        assert!(!style(&run(SEND_BW, &["--report-both"]).0).report_both);
        let (o, _) = run(SEND_BW, &["-b", "--report-both", "-a"]);
        assert!(style(&o).bidirectional && !style(&o).report_both);
        assert_eq!(o.size_sel(), SizeSel::PowersOfTwo);
        assert!(!usage(SEND_LAT).contains("--bidirectional"));
        assert!(!usage(SEND_BW).contains("(-b"), "-b is no longer listed as refused");
    }

    #[test]
    fn options_without_meaning_are_ignored_with_a_note() {
        let (o, notes) =
            run(SEND_BW, &["-x", "3", "-i", "1", "-I", "64", "-e", "--pkey_index=0", "--use_hugepages", "-S", "0"]);
        assert_eq!(notes.len(), 7, "{notes:?}");
        assert_eq!(notes[0], "fi_send_bw: note: -x (--gid-index) ignored: the domain (-d) selects the address");
        assert!(notes[4].starts_with("fi_send_bw: note: --pkey_index ignored: "), "{}", notes[4]);
        // Ignored options change nothing.
        let (plain, _) = run(SEND_BW, &[]);
        assert_eq!(o, plain);
    }

    #[test]
    fn bad_values_and_unsupported_options_are_refused_clearly() {
        let cases: &[(Test, &[&str], &str)] = &[
            (SEND_LAT, &["-s", "x"], "not a number"),
            (SEND_LAT, &["-s", "0"], "between 1 and"),
            (SEND_LAT, &["-n", "4"], "between 5 and"),
            (SEND_LAT, &["-n", "100000000"], "between 5 and 10000000"),
            (SEND_LAT, &["-p", "70000"], "not a port number"),
            (SEND_LAT, &["-t", "4"], "applies to bw tests"),
            (SEND_LAT, &["-b"], "Bidirectional is only available in BW test"),
            (SEND_LAT, &["--bidirectional", "-s", "8"], "Bidirectional is only available in BW test"),
            (ATOMIC_LAT, &["-b"], "Bidirectional is only available in BW test"),
            (SEND_LAT, &["-N"], "NoPeak only valid for BW tests"),
            (SEND_BW, &["-t", "0"], "between 1 and 16384"),
            (SEND_BW, &["-q", "2"], "each side has one endpoint"),
            (SEND_BW, &["-c", "UD"], "reliable endpoints"),
            (SEND_BW, &["-c", "XY"], "Invalid Connection type"),
            (SEND_BW, &["-m", "1000"], "Invalid MTU - 1000"),
            (SEND_BW, &["-D", "0"], "between 1 and 86400"),
            (SEND_BW, &["-D", "2", "-a"], "Duration mode currently doesn't support running on all sizes."),
            (SEND_BW, &["--output=latency"], "applies to latency tests"),
            (SEND_LAT, &["--output=bandwidth"], "applies to bw tests"),
            (SEND_BW, &["--output=fast"], "Invalid verbosity level"),
            (SEND_BW, &["-C"], "-C (--report-cycles) is not supported: times are reported in microseconds"),
            (SEND_BW, &["--run_infinitely"], "--run_infinitely is not supported"),
            (SEND_BW, &["-Q", "0"], "between 1 and 1024"),
            (SEND_BW, &["--bogus"], "unrecognized option '--bogus'"),
            (SEND_BW, &["-s"], "requires an argument"),
            (SEND_BW, &["a", "b"], "give one server address"),
            (SEND_BW, &["-A", "FETCH_AND_ADD"], "applies to fi_atomic_lat and fi_atomic_bw"),
            (ATOMIC_LAT, &["-A", "CMP_AND_SWAP"], "CMP_AND_SWAP is not supported"),
            (ATOMIC_LAT, &["-A", "XOR"], "Invalid Atomic type"),
            (ATOMIC_LAT, &["-s", "16"], "-s 16 does not apply"),
            (ATOMIC_LAT, &["-a"], "-a (--all) does not apply"),
        ];
        for (test, args, want) in cases {
            let e = parse_args(*test, args.iter().copied()).unwrap_err();
            assert!(e.contains(want), "{args:?}: {e:?} lacks {want:?}");
        }
    }
}
