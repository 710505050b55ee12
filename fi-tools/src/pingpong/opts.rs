//! `fi_pingpong`'s command line: libfabric's options, plus a few long ones of our own.

use crate::common::{opts_with, parse_count, parse_size_sel, Cmd, CommonOpts};
use crate::getopt::{getopt, Item, Opt};
use crate::sizes::SizeSel;
use fabric_core::EpType;
use std::ops::{Deref, DerefMut};
#[cfg(test)]
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
pub type PpCmd = Cmd<PpOpts>;

/// `fi_pingpong`'s options: the common ones (dgram endpoints and 10 iterations
/// by default, as libfabric), and its own.
#[derive(Debug, Clone, PartialEq)]
pub struct PpOpts {
    /// `-B -P -d -p -e -I -v -6 --timeout --connect-timeout` and the server's address.
    pub common: CommonOpts,
    /// `-S`: sizes.
    pub sizes: SizeSel,
    /// `-c`: check every received byte.
    pub check: bool,
    /// `-m tagged`: tagged messages instead of untagged ones.
    pub tagged: bool,
    /// `--warmup`: untimed iterations before each size.
    pub warmup: u64,
}

impl Default for PpOpts {
    fn default() -> PpOpts {
        PpOpts {
            common: CommonOpts::new("fi_pingpong", EpType::Dgram, 10),
            sizes: SizeSel::Default,
            check: false,
            tagged: false,
            warmup: 0,
        }
    }
}

impl Deref for PpOpts {
    type Target = CommonOpts;
    fn deref(&self) -> &CommonOpts {
        &self.common
    }
}

impl DerefMut for PpOpts {
    fn deref_mut(&mut self) -> &mut CommonOpts {
        &mut self.common
    }
}

const OWN_OPTS: &[Opt] = &[Opt::short("c", 'c', false), Opt::short("m", 'm', true)];

/// Parse the arguments (without the program name). `Err` carries the message to
/// print before the usage.
pub fn parse_args<I, S>(args: I) -> Result<PpCmd, String>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let items = getopt("fi_pingpong", args, &opts_with(OWN_OPTS)).map_err(|e| e.0)?;
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
            "I" => o.iterations = parse_count(&val, 1, u64::MAX)?,
            "S" => o.sizes = parse_size_sel(&val)?,
            "c" => o.check = true,
            "m" => {
                o.tagged = match val.as_str() {
                    "msg" => false,
                    "tagged" => true,
                    _ => return Err(format!("Unknown transmit mode : {val} (msg or tagged)")),
                }
            }
            "h" => return Ok(PpCmd::Help),
            "warmup" => o.warmup = parse_count(&val, 0, u64::MAX)?,
            _ => {
                if !o.common.apply(name, &val)? {
                    unreachable!("option {name} declared but not handled")
                }
            }
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
