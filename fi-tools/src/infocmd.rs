//! `fi_info`'s command line and its output formats, as libfabric 1.17's: the options
//! become [`Hints`]; entries print as the short block, or with `-v` as the full
//! `fi_tostr` dump; `-l` lists providers; `-e`/`-g` list parameters.

use crate::getopt::{getopt, Item, Opt};
use fabric_core::flags::{name_to_bit, CAP_NAMES, MODE_NAMES};
use fabric_core::tostr;
use fabric_core::{AddrFormat, Caps, EpType, Hints, Info, Mode, Param};
use std::fmt::Write;

/// The usage text, as libfabric's (tabs included; `-i` names its argument, which
/// libfabric's text leaves out).
pub const USAGE: &str = "Usage: fi_info
  -h, --help\t\t\tdisplay this help and exit
  -s, --src_addr=ADDR\t\tsource name or address
  -n, --node=NAME\t\tdest node name or address
  -P, --port=PNUM\t\tport number
  -c, --caps=CAP1|CAP2..\tone or more capabilities: FI_MSG|FI_RMA...
  -m, --mode=MOD1|MOD2..\tone or more modes, default all modes
  -t, --ep_type=EPTYPE\t\tspecify single endpoint type: FI_EP_MSG, FI_EP_DGRAM...
  -d, --domain=DOMAIN\t\tspecify the domain name
  -f, --fabric=FABRIC\t\tspecify the fabric name
  -a, --addr_format=FMT\t\tspecify accepted address format: FI_FORMAT_UNSPEC, FI_SOCKADDR...
  -p, --provider=PROV\t\tspecify provider explicitly
  -e, --env\t\t\tprint libfabric environment variables
  -g, --getenv=SUBSTR\t\tprint libfabric environment variables with substr
  -i, --info=SUBSTR\t\tprint fi_info structures containing substr
  -l, --list\t\t\tlist available libfabric providers
  -v, --verbose\t\t\tverbose output
  --version\t\t\tprint version info and exit
";

/// What `fi_info` was asked to do.
#[derive(Debug, Clone)]
pub enum InfoCmd {
    /// `-h`.
    Help,
    /// `--version`.
    Version,
    /// `-l`.
    List,
    /// `-e`, or `-g SUBSTR` (the filter).
    Env(Option<String>),
    /// Query with hints; `verbose` for the full dump.
    Query {
        /// The hints the options describe.
        hints: Box<Hints>,
        /// `-v` (or `-i`, which implies it).
        verbose: bool,
        /// `-i SUBSTR`: print only the entries whose full dump contains SUBSTR
        /// (case-insensitive), as libfabric's `fi_info -i`.
        filter: Option<String>,
    },
}

/// A refused command line: the message and the exit status libfabric gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoError {
    /// What to print on standard error.
    pub msg: String,
    /// Whether to print the usage after it.
    pub usage: bool,
    /// The exit status.
    pub status: i32,
}

const OPTS: &[Opt] = &[
    Opt::both("help", 'h', "help", false),
    Opt::both("src_addr", 's', "src_addr", true),
    Opt::both("node", 'n', "node", true),
    Opt::both("port", 'P', "port", true),
    Opt::both("caps", 'c', "caps", true),
    Opt::both("mode", 'm', "mode", true),
    Opt::both("ep_type", 't', "ep_type", true),
    Opt::both("domain", 'd', "domain", true),
    Opt::both("fabric", 'f', "fabric", true),
    Opt::both("addr_format", 'a', "addr_format", true),
    Opt::both("provider", 'p', "provider", true),
    Opt::both("env", 'e', "env", false),
    Opt::both("getenv", 'g', "getenv", true),
    Opt::both("info", 'i', "info", true),
    Opt::both("list", 'l', "list", false),
    Opt::both("verbose", 'v', "verbose", false),
    Opt::long("version", "version", false),
];

/// `EINVAL`, the status libfabric's fi_info exits with for a bad value.
const EINVAL: i32 = 22;

fn bad_value(what: &str, v: &str) -> InfoError {
    InfoError { msg: format!("error: Unrecognized {what}: {v}"), usage: false, status: EINVAL }
}

/// Parse pipe-separated flag names (`FI_MSG|FI_RMA`) against a name table.
fn parse_flags(v: &str, table: &[(u64, &str)], what: &str) -> Result<u64, InfoError> {
    let mut bits = 0;
    for tok in v.split('|').map(str::trim).filter(|t| !t.is_empty()) {
        bits |= name_to_bit(tok, table).ok_or_else(|| bad_value(what, tok))?;
    }
    Ok(bits)
}

/// Parse `fi_info`'s arguments (without the program name).
pub fn parse_args<I, S>(args: I) -> Result<InfoCmd, InfoError>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let items = getopt("fi_info", args, OPTS).map_err(|e| InfoError { msg: e.0, usage: true, status: 1 })?;
    let mut hints = Hints::new();
    let (mut list, mut verbose, mut env, mut filter) = (false, false, false, None);
    for item in items {
        let (name, v) = match item {
            Item::Opt(n, v) => (n, v.unwrap_or_default()),
            Item::Operand(a) => {
                return Err(InfoError { msg: format!("fi_info: unexpected argument '{a}'"), usage: true, status: 1 })
            }
        };
        match name {
            "help" => return Ok(InfoCmd::Help),
            "version" => return Ok(InfoCmd::Version),
            "node" => {
                hints.node = Some(v);
                hints.source = false;
            }
            "src_addr" => {
                hints.node = Some(v);
                hints.source = true;
            }
            "port" => hints.service = Some(v),
            "caps" => hints.caps |= Caps::from_bits_retain(parse_flags(&v, CAP_NAMES, "capability")?),
            "mode" => {
                let m = Mode::from_bits_retain(parse_flags(&v, MODE_NAMES, "mode")?);
                hints.mode = Some(hints.mode.unwrap_or_default() | m);
            }
            "ep_type" => hints.ep_type = EpType::parse(&v).ok_or_else(|| bad_value("endpoint type", &v))?,
            "addr_format" => {
                hints.addr_format = AddrFormat::parse(&v).ok_or_else(|| bad_value("address format", &v))?
            }
            "domain" => hints.domain_name = Some(v),
            "fabric" => hints.fabric_name = Some(v),
            "provider" => hints.prov_name = Some(v),
            "env" => env = true,
            // libfabric keeps one string for -g and -i: the last given filters
            // what is printed, the variables with -e/-g, the entries otherwise.
            "getenv" => {
                env = true;
                filter = Some(v);
            }
            "info" => {
                verbose = true;
                filter = Some(v);
            }
            "list" => list = true,
            "verbose" => verbose = true,
            _ => unreachable!("option {name} declared but not handled"),
        }
    }
    Ok(if env {
        InfoCmd::Env(filter)
    } else if list {
        InfoCmd::List
    } else {
        InfoCmd::Query { hints: Box::new(hints), verbose, filter }
    })
}

/// The short block `fi_info` prints per entry.
pub fn short_info(info: &Info) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "provider: {}", info.fabric_attr.prov_name);
    let _ = writeln!(out, "    fabric: {}", info.fabric_attr.name);
    let _ = writeln!(out, "    domain: {}", info.domain_attr.name);
    let _ = writeln!(out, "    version: {}", tostr::version_str(info.fabric_attr.prov_version));
    let _ = writeln!(out, "    type: {}", info.ep_attr.ep_type);
    let _ = writeln!(out, "    protocol: {}", info.ep_attr.protocol);
    out
}

/// What `fi_info` prints for a list of entries: short blocks, or with `verbose`
/// `---` and the full dump per entry.
pub fn format_infos(infos: &[Info], verbose: bool) -> String {
    format_infos_matching(infos, verbose, None)
}

/// [`format_infos`] keeping, when `filter` is given (`fi_info -i SUBSTR`), only the
/// entries whose full dump (`fi_info -v`'s text, without the `---` line) contains
/// it, compared without regard to case, as libfabric's `strcasestr`. `-i`
/// implies `-v`, so the entries kept print in full.
pub fn format_infos_matching(infos: &[Info], verbose: bool, filter: Option<&str>) -> String {
    let want = filter.map(str::to_ascii_lowercase);
    let mut out = String::new();
    for i in infos {
        // Named as libfabric names it: an RDM entry over connections is
        // `tcp;ofi_rxm` (`udp;ofi_rxd`, `verbs;ofi_rxm`), as the C ABI reports it.
        let layered = fabric::layered_name(i);
        let named;
        let i = if layered != i.fabric_attr.prov_name {
            let mut c = i.clone();
            c.fabric_attr.prov_name = layered;
            named = c;
            &named
        } else {
            i
        };
        if verbose || want.is_some() {
            let text = tostr::info_str(i);
            if want.as_deref().map_or(true, |w| text.to_ascii_lowercase().contains(w)) {
                out.push_str("---\n");
                out.push_str(&text);
            }
        } else {
            out.push_str(&short_info(i));
        }
    }
    out
}

/// One provider of `fi_info -l`.
pub fn list_entry(name: &str, version: u32) -> String {
    format!("{name}:\n    version: {}\n", tostr::version_str(version))
}

/// One parameter of `fi_info -e`: its variable and type, its help (a provider's
/// prefixed with the provider's name, as libfabric does; the default appended when
/// the help does not mention one), its value when set, and a blank line. `value` is
/// the environment's value (quoted when it holds a space, as libfabric means to).
pub fn env_entry(p: &Param, value: Option<&str>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {}: {}", p.env_name(), p.kind.name());
    let _ = writeln!(out, "# {}", p.help_text());
    if let Some(v) = value {
        if v.contains(' ') {
            let _ = writeln!(out, "{}=\"{v}\"", p.env_name());
        } else {
            let _ = writeln!(out, "{}={v}", p.env_name());
        }
    }
    out.push('\n');
    out
}

/// Whether a parameter passes `-g SUBSTR` (case-insensitive, on the variable name).
pub fn env_matches(p: &Param, filter: Option<&str>) -> bool {
    filter.map_or(true, |f| p.env_name().to_ascii_lowercase().contains(&f.to_ascii_lowercase()))
}

/// `fi_info --version`: this tool's version, fabric's, and the API version.
pub fn version_text(tool: &str, fabric: &str) -> String {
    let api = fabric_core::info::API_VERSION;
    format!("fi_info: {tool}\nfabric: {fabric}\nfabric api: {}\n", tostr::version_str(api))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric_core::info::version;
    use fabric_core::{ParamType, Protocol};

    fn query(args: &[&str]) -> (Hints, bool) {
        match parse_args(args.iter().copied()).unwrap() {
            InfoCmd::Query { hints, verbose, .. } => (*hints, verbose),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn options_become_hints() {
        let (h, v) = query(&[
            "-p",
            "tcp",
            "--ep_type=FI_EP_RDM",
            "-c",
            "FI_MSG|FI_TAGGED",
            "-m",
            "FI_CONTEXT",
            "-aFI_SOCKADDR_IN",
            "-n",
            "127.0.0.1",
            "-P",
            "4000",
            "-d",
            "lo",
            "--fabric",
            "127.0.0.0/8",
            "-v",
        ]);
        assert!(v);
        assert_eq!(h.prov_name.as_deref(), Some("tcp"));
        assert_eq!(h.ep_type, EpType::Rdm);
        assert_eq!(h.caps, Caps::MSG | Caps::TAGGED);
        assert_eq!(h.mode, Some(Mode::CONTEXT));
        assert_eq!(h.addr_format, AddrFormat::SockaddrIn);
        assert_eq!((h.node.as_deref(), h.service.as_deref(), h.source), (Some("127.0.0.1"), Some("4000"), false));
        assert_eq!(h.domain_name.as_deref(), Some("lo"));
        assert_eq!(h.fabric_name.as_deref(), Some("127.0.0.0/8"));
        let (h, v) = query(&["-s", "10.0.0.1"]);
        assert!(!v);
        assert_eq!((h.node.as_deref(), h.source), (Some("10.0.0.1"), true));
        // No -m: every mode is supported, as libfabric's fi_info says.
        assert_eq!(query(&[]).0.mode, None);
        assert_eq!(query(&["-t", "msg"]).0.ep_type, EpType::Msg);
    }

    #[test]
    fn info_substring_as_libfabric() {
        // -i implies -v and keeps the substring; combined with other filters.
        match parse_args(["-p", "tcp", "-i", "FI_EP_RDM"]).unwrap() {
            InfoCmd::Query { hints, verbose, filter } => {
                assert!(verbose);
                assert_eq!(filter.as_deref(), Some("FI_EP_RDM"));
                assert_eq!(hints.prov_name.as_deref(), Some("tcp"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(parse_args(["--info=rxm"]), Ok(InfoCmd::Query { filter: Some(f), .. }) if f == "rxm"));
        assert!(matches!(parse_args(["-v"]), Ok(InfoCmd::Query { filter: None, .. })));
        // One string for -g and -i, as libfabric's: with -e the last one filters
        // the variables.
        assert!(matches!(parse_args(["-g", "tcp", "-i", "udp"]), Ok(InfoCmd::Env(Some(f))) if f == "udp"));
        assert!(matches!(parse_args(["-e", "-i", "udp"]), Ok(InfoCmd::Env(Some(f))) if f == "udp"));

        let mut rdm = Info::default();
        rdm.fabric_attr.prov_name = "tcp".into();
        rdm.ep_attr.ep_type = EpType::Rdm;
        rdm.ep_attr.protocol = Protocol::Rxm;
        let mut msg = rdm.clone();
        msg.ep_attr.ep_type = EpType::Msg;
        msg.ep_attr.protocol = Protocol::SockTcp;
        let both = [rdm.clone(), msg.clone()];
        // The RDM entry prints under libfabric's layered name.
        let mut named = rdm.clone();
        named.fabric_attr.prov_name = "tcp;ofi_rxm".into();
        let want_rdm = format!("---\n{}", tostr::info_str(&named));
        assert!(want_rdm.contains("prov_name: tcp;ofi_rxm"), "{want_rdm}");
        assert!(format_infos(&both, false).starts_with("provider: tcp;ofi_rxm\n"));
        assert!(format_infos(&both, false).contains("provider: tcp\n"), "the MSG entry keeps its name");
        assert_eq!(format_infos_matching(&both, true, Some("ofi_rxm")), want_rdm);
        // Case-insensitive, on the full text (not only the short block's lines).
        assert_eq!(format_infos_matching(&both, true, Some("fi_ep_rdm")), want_rdm);
        assert_eq!(format_infos_matching(&both, false, Some("FI_PROTO_RXM")), want_rdm);
        assert!(format_infos_matching(&both, true, Some("max_msg_size")).matches("---\n").count() == 2);
        assert_eq!(format_infos_matching(&both, true, Some("no such text")), "");
        assert_eq!(format_infos_matching(&both, true, None), format_infos(&both, true));
        assert_eq!(format_infos_matching(&both, false, None), format_infos(&both, false));
    }

    #[test]
    fn commands() {
        assert!(matches!(parse_args(["-l"]), Ok(InfoCmd::List)));
        assert!(matches!(parse_args(["--version"]), Ok(InfoCmd::Version)));
        assert!(matches!(parse_args(["-h"]), Ok(InfoCmd::Help)));
        assert!(matches!(parse_args(["-e"]), Ok(InfoCmd::Env(None))));
        assert!(matches!(parse_args(["-g", "tcp"]), Ok(InfoCmd::Env(Some(f))) if f == "tcp"));
        assert!(matches!(parse_args(["--getenv=tcp", "-l"]), Ok(InfoCmd::Env(Some(_)))));
    }

    #[test]
    fn errors_as_libfabric() {
        let e = parse_args(["-c", "FI_MSG|FI_FOO"]).unwrap_err();
        assert_eq!((e.msg.as_str(), e.usage, e.status), ("error: Unrecognized capability: FI_FOO", false, 22));
        assert_eq!(parse_args(["-t", "FI_EP_FOO"]).unwrap_err().msg, "error: Unrecognized endpoint type: FI_EP_FOO");
        assert_eq!(parse_args(["-m", "FOO"]).unwrap_err().msg, "error: Unrecognized mode: FOO");
        assert_eq!(parse_args(["-a", "FOO"]).unwrap_err().msg, "error: Unrecognized address format: FOO");
        let e = parse_args(["--bogus"]).unwrap_err();
        assert_eq!((e.msg.as_str(), e.usage, e.status), ("fi_info: unrecognized option '--bogus'", true, 1));
        assert_eq!(parse_args(["-p"]).unwrap_err().msg, "fi_info: option requires an argument -- 'p'");
        assert!(parse_args(["extra"]).is_err());
    }

    #[test]
    fn short_block_as_libfabric() {
        let mut i = Info::default();
        i.fabric_attr.prov_name = "tcp".into();
        i.fabric_attr.name = "127.0.0.1/32".into();
        i.fabric_attr.prov_version = version(117, 0);
        i.domain_attr.name = "lo".into();
        i.ep_attr.ep_type = EpType::Msg;
        i.ep_attr.protocol = Protocol::SockTcp;
        let want = "provider: tcp\n    fabric: 127.0.0.1/32\n    domain: lo\n    version: 117.0\n    \
                    type: FI_EP_MSG\n    protocol: FI_PROTO_SOCK_TCP\n";
        assert_eq!(short_info(&i), want);
        assert_eq!(format_infos(&[i.clone(), i.clone()], false), format!("{want}{want}"));
        let v = format_infos(&[i], true);
        assert!(v.starts_with("---\nfi_info:\n    caps: [  ]\n"), "{v}");
        assert!(v.ends_with("    nic: (nil)\n"));
        assert_eq!(list_entry("tcp", version(117, 0)), "tcp:\n    version: 117.0\n");
        assert_eq!(version_text("0.1.0", "0.1.0"), "fi_info: 0.1.0\nfabric: 0.1.0\nfabric api: 1.17\n");
        assert_eq!(USAGE.lines().count(), 18);
    }

    #[test]
    fn env_entries_as_libfabric() {
        let p = Param { prov: "tcp", name: "iface", kind: ParamType::Str, help: "Specify interface name", default: "" };
        assert_eq!(env_entry(&p, None), "# FI_TCP_IFACE: String\n# tcp: Specify interface name\n\n");
        assert_eq!(
            env_entry(&p, Some("lo")),
            "# FI_TCP_IFACE: String\n# tcp: Specify interface name\nFI_TCP_IFACE=lo\n\n"
        );
        assert_eq!(env_entry(&p, Some("a b")).lines().nth(2), Some("FI_TCP_IFACE=\"a b\""));
        let core =
            Param { prov: "core", name: "log_level", kind: ParamType::Str, help: "Specify logging level", default: "" };
        assert_eq!(env_entry(&core, None), "# FI_LOG_LEVEL: String\n# Specify logging level\n\n");
        let d = Param { prov: "tcp", name: "nodelay", kind: ParamType::Bool, help: "Set TCP_NODELAY", default: "1" };
        assert_eq!(
            env_entry(&d, None),
            "# FI_TCP_NODELAY: Boolean (0/1, on/off, true/false, yes/no)\n# tcp: Set TCP_NODELAY (default: 1)\n\n"
        );
        assert!(env_matches(&p, Some("tcp_IF")));
        assert!(env_matches(&p, None));
        assert!(!env_matches(&core, Some("tcp")));
    }
}
