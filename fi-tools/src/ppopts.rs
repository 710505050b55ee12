//! `fi_pingpong`'s command line: libfabric's options, plus a few long ones of our own.

use crate::getopt::{getopt, Item, Opt};
use crate::perf::SizeSel;
use fabric_core::EpType;
use std::time::Duration;

/// The usage text (libfabric's, with our additions at the end).
pub const USAGE: &str = "Usage:
  fi_pingpong [OPTIONS]\t\tstart server
  fi_pingpong [OPTIONS] <srv_addr>\tconnect to server

Ping pong client and server

Options:
 -B <src_port>        source control port number (server: 47592, client: auto)
 -P <dst_port>        destination control port number (client: 47592)
 -d <domain>          domain name
 -p <provider>        specific provider name eg sockets, verbs
 -e <ep_type>         endpoint type: msg|rdm|dgram (dgram)
 -I <number>          number of iterations (10)
 -S <size>            specific transfer size or 'all' (all)
 -c                   enables data_integrity checks
 -m <transmit mode>   transmit mode type: msg|tagged (msg)
 -h                   display this help output
 -v                   enable debugging output
 -6                   use IPv6 address

fabric additions:
 --timeout <secs>          give up when a transfer makes no progress for this long (10)
 --connect-timeout <secs>  client: keep retrying the control connection this long (5)
 --warmup <number>         untimed iterations before each size (0, as libfabric)

Without -S, the sizes 64, 256, 1k, 4k, 64k and 1m are tested (those within the
endpoint's maximum message size); -S all tests 0, 1, 2, 3, 4, 6, 8, 12, ... up to 6m.
A client given -B but not -P connects to that port.
";

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum PpCmd {
    /// Print the usage and exit successfully.
    Help,
    /// Run a test.
    Run(PpOpts),
}

/// `fi_pingpong`'s options.
#[derive(Debug, Clone, PartialEq)]
pub struct PpOpts {
    /// `-B`: the server's control port; the client's local control port.
    pub src_port: Option<u16>,
    /// `-P`: the port the client connects to.
    pub dst_port: Option<u16>,
    /// `-d`: domain name.
    pub domain: Option<String>,
    /// `-p`: provider name.
    pub provider: Option<String>,
    /// `-e`: endpoint type (dgram by default, as libfabric).
    pub ep_type: EpType,
    /// `-I`: iterations per size.
    pub iterations: u64,
    /// `-S`: sizes.
    pub sizes: SizeSel,
    /// `-c`: check every received byte.
    pub check: bool,
    /// `-m tagged`: tagged messages instead of untagged ones.
    pub tagged: bool,
    /// `-v`: debugging output on standard error.
    pub verbose: bool,
    /// `-6`: IPv6.
    pub ipv6: bool,
    /// The server's address: given, this process is the client.
    pub dst_addr: Option<String>,
    /// `--timeout`: longest wait without progress.
    pub timeout: Duration,
    /// `--connect-timeout`: how long the client retries the control connection.
    pub connect_timeout: Duration,
    /// `--warmup`: untimed iterations before each size.
    pub warmup: u64,
}

impl Default for PpOpts {
    fn default() -> PpOpts {
        PpOpts {
            src_port: None,
            dst_port: None,
            domain: None,
            provider: None,
            ep_type: EpType::Dgram,
            iterations: 10,
            sizes: SizeSel::Default,
            check: false,
            tagged: false,
            verbose: false,
            ipv6: false,
            dst_addr: None,
            timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            warmup: 0,
        }
    }
}

impl PpOpts {
    /// The control port the server listens on.
    pub fn server_port(&self) -> u16 {
        self.src_port.unwrap_or(crate::oob::DEFAULT_PORT)
    }

    /// The client's control connection: the port to connect to and the local port
    /// to bind, if any. libfabric's meaning (`-P` the server's port, `-B` the local
    /// one), except that a client given only `-B` connects to that port, which is
    /// what one writes when giving both processes the same options.
    pub fn client_ports(&self) -> (u16, Option<u16>) {
        match (self.dst_port, self.src_port) {
            (Some(p), Some(b)) if p != b => (p, Some(b)),
            (Some(p), _) => (p, None),
            (None, Some(b)) => (b, None),
            (None, None) => (crate::oob::DEFAULT_PORT, None),
        }
    }
}

const OPTS: &[Opt] = &[
    Opt::short("B", 'B', true),
    Opt::short("P", 'P', true),
    Opt::short("d", 'd', true),
    Opt::short("p", 'p', true),
    Opt::short("e", 'e', true),
    Opt::short("I", 'I', true),
    Opt::short("S", 'S', true),
    Opt::short("c", 'c', false),
    Opt::short("m", 'm', true),
    Opt::both("h", 'h', "help", false),
    Opt::short("v", 'v', false),
    Opt::short("6", '6', false),
    Opt::long("timeout", "timeout", true),
    Opt::long("connect-timeout", "connect-timeout", true),
    Opt::long("warmup", "warmup", true),
];

fn parse_port(v: &str) -> Result<u16, String> {
    v.trim().parse::<u16>().map_err(|_| format!("Error parsing \"{v}\": not a port number (0-65535)"))
}

fn parse_count(v: &str, min: u64) -> Result<u64, String> {
    match v.trim().parse::<u64>() {
        Ok(n) if n >= min => Ok(n),
        Ok(_) => Err(format!("Error parsing \"{v}\": must be at least {min}")),
        Err(_) => Err(format!("Error parsing \"{v}\": not a number")),
    }
}

fn parse_secs(v: &str) -> Result<Duration, String> {
    match v.trim().parse::<f64>() {
        Ok(s) if s > 0.0 && s.is_finite() && s < 1e9 => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!("Error parsing \"{v}\": not a positive number of seconds")),
    }
}

/// Parse the arguments (without the program name). `Err` carries the message to
/// print before the usage.
pub fn parse_args<I, S>(args: I) -> Result<PpCmd, String>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let items = getopt("fi_pingpong", args, OPTS).map_err(|e| e.0)?;
    let mut o = PpOpts::default();
    for item in items {
        let (name, val) = match item {
            Item::Operand(a) => {
                if o.dst_addr.is_some() {
                    return Err(format!("fi_pingpong: unexpected argument '{a}': give one server address"));
                }
                o.dst_addr = Some(a);
                continue;
            }
            Item::Opt(name, val) => (name, val.unwrap_or_default()),
        };
        match name {
            "B" => o.src_port = Some(parse_port(&val)?),
            "P" => o.dst_port = Some(parse_port(&val)?),
            "d" => o.domain = Some(val),
            "p" => o.provider = Some(val),
            "e" => {
                o.ep_type = match val.as_str() {
                    "msg" => EpType::Msg,
                    "rdm" => EpType::Rdm,
                    "dgram" => EpType::Dgram,
                    _ => return Err(format!("Unknown endpoint : {val}")),
                }
            }
            "I" => o.iterations = parse_count(&val, 1)?,
            "S" => {
                o.sizes = if val.eq_ignore_ascii_case("all") {
                    SizeSel::All
                } else {
                    match fabric_core::param::parse_size(&val) {
                        Some(n) => SizeSel::One(n),
                        None => return Err(format!("Error parsing \"{val}\": not a size")),
                    }
                }
            }
            "c" => o.check = true,
            "m" => {
                o.tagged = match val.as_str() {
                    "msg" => false,
                    "tagged" => true,
                    _ => return Err(format!("Unknown transmit mode : {val} (msg or tagged)")),
                }
            }
            "h" => return Ok(PpCmd::Help),
            "v" => o.verbose = true,
            "6" => o.ipv6 = true,
            "timeout" => o.timeout = parse_secs(&val)?,
            "connect-timeout" => o.connect_timeout = parse_secs(&val)?,
            "warmup" => o.warmup = parse_count(&val, 0)?,
            _ => unreachable!("option {name} declared but not handled"),
        }
    }
    Ok(PpCmd::Run(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> PpOpts {
        match parse_args(args.iter().copied()).unwrap() {
            PpCmd::Run(o) => o,
            PpCmd::Help => panic!("help"),
        }
    }

    #[test]
    fn libfabric_defaults() {
        let o = run(&[]);
        assert_eq!(o.ep_type, EpType::Dgram);
        assert_eq!(o.iterations, 10);
        assert_eq!(o.sizes, SizeSel::Default);
        assert_eq!(o.server_port(), 47592);
        assert_eq!(o.client_ports(), (47592, None));
        assert!(o.dst_addr.is_none() && !o.check && !o.tagged && o.warmup == 0);
    }

    #[test]
    fn options_in_any_spelling_and_order() {
        let o = run(&["-ptcp", "-e", "rdm", "-I1000", "-S", "64", "127.0.0.1", "-c", "-m", "tagged", "-v6"]);
        assert_eq!(o.provider.as_deref(), Some("tcp"));
        assert_eq!(o.ep_type, EpType::Rdm);
        assert_eq!(o.iterations, 1000);
        assert_eq!(o.sizes, SizeSel::One(64));
        assert_eq!(o.dst_addr.as_deref(), Some("127.0.0.1"));
        assert!(o.check && o.tagged && o.verbose && o.ipv6);
        assert_eq!(run(&["-S", "all"]).sizes, SizeSel::All);
        assert_eq!(run(&["-S", "4k"]).sizes, SizeSel::One(4096));
        assert_eq!(run(&["-S", "0"]).sizes, SizeSel::One(0));
        let o = run(&["--timeout", "2.5", "--connect-timeout=1", "--warmup", "3", "-d", "lo"]);
        assert_eq!(o.timeout, Duration::from_millis(2500));
        assert_eq!(o.connect_timeout, Duration::from_secs(1));
        assert_eq!(o.warmup, 3);
        assert_eq!(o.domain.as_deref(), Some("lo"));
        assert_eq!(parse_args(["-h"]).unwrap(), PpCmd::Help);
        assert_eq!(parse_args(["--help"]).unwrap(), PpCmd::Help);
    }

    #[test]
    fn control_ports() {
        assert_eq!(run(&["-B", "5000"]).server_port(), 5000);
        assert_eq!(run(&["-P", "5000"]).client_ports(), (5000, None));
        assert_eq!(run(&["-B", "5000"]).client_ports(), (5000, None));
        assert_eq!(run(&["-B", "6000", "-P", "5000"]).client_ports(), (5000, Some(6000)));
        assert_eq!(run(&["-B", "5000", "-P", "5000"]).client_ports(), (5000, None));
    }

    #[test]
    fn bad_options_are_refused() {
        for args in [
            &["-e", "foo"][..],
            &["-I", "0"],
            &["-I", "abc"],
            &["-S", "-5"],
            &["-S", "x"],
            &["-m", "rma"],
            &["-B", "70000"],
            &["-Z"],
            &["-p"],
            &["a", "b"],
            &["--timeout", "0"],
        ] {
            assert!(parse_args(args.iter().copied()).is_err(), "{args:?}");
        }
        assert_eq!(parse_args(["-e", "foo"]).unwrap_err(), "Unknown endpoint : foo");
    }
}
