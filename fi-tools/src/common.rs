//! What `fi_pingpong` and `fi_perf` share: the common options and their parsing,
//! the entry point, the control connection's set-up and the fabric set-up of both
//! sides (listening or connecting on MSG endpoints, exchanging addresses on the
//! connectionless ones).

use crate::getopt::Opt;
use crate::link::{
    connect_addr, ctrl_recv, ctrl_send, eq_wait, field, open_connless_with, open_msg_with, Failure, Objects, Res,
};
use crate::oob::{self, Ctrl};
use crate::sizes::SizeSel;
use fabric::{
    Address, Caps, CqAttr, EpType, EqAttr, EqEvent, Error, EventQueue, Fabric, FiAddr, Hints, Info, Mode,
    PassiveEndpoint,
};
use fabric_core::tostr;
use std::fmt::Display;
use std::ops::Deref;
use std::time::Duration;

/// Debugging output on standard error, with `-v`: `[debug] <tool>: ...`.
macro_rules! debug {
    ($o:expr, $($arg:tt)*) => {
        if $o.verbose {
            eprintln!("[debug] {}: {}", $o.prog, format_args!($($arg)*));
        }
    };
}
pub(crate) use debug;

/// What a tool's command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Cmd<O> {
    /// Print the usage and exit successfully.
    Help,
    /// Run a test.
    Run(O),
}

/// The options both tools take (each tool's options extend these).
#[derive(Debug, Clone, PartialEq)]
pub struct CommonOpts {
    /// The tool's name, in messages.
    pub prog: &'static str,
    /// `-B`: the server's control port; the client's local control port.
    pub src_port: Option<u16>,
    /// `-P`: the port the client connects to.
    pub dst_port: Option<u16>,
    /// `-d`: domain name.
    pub domain: Option<String>,
    /// `-p`: provider name.
    pub provider: Option<String>,
    /// `-e`: endpoint type.
    pub ep_type: EpType,
    /// `-I`: (timed) iterations per size.
    pub iterations: u64,
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
}

impl CommonOpts {
    /// The defaults of a tool: its name, endpoint type and iterations.
    pub fn new(prog: &'static str, ep_type: EpType, iterations: u64) -> CommonOpts {
        CommonOpts {
            prog,
            src_port: None,
            dst_port: None,
            domain: None,
            provider: None,
            ep_type,
            iterations,
            verbose: false,
            ipv6: false,
            dst_addr: None,
            timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
        }
    }

    /// The control port the server listens on.
    pub fn server_port(&self) -> u16 {
        self.src_port.unwrap_or(oob::DEFAULT_PORT)
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
            (None, None) => (oob::DEFAULT_PORT, None),
        }
    }

    /// Apply one of the common options (`-B -P -d -p -e -v -6 --timeout
    /// --connect-timeout`); `false` if `name` is not one of them.
    pub(crate) fn apply(&mut self, name: &str, val: &str) -> Result<bool, String> {
        match name {
            "B" => self.src_port = Some(parse_port(val)?),
            "P" => self.dst_port = Some(parse_port(val)?),
            "d" => self.domain = Some(val.to_string()),
            "p" => self.provider = Some(val.to_string()),
            "e" => self.ep_type = parse_ep(val)?,
            "v" => self.verbose = true,
            "6" => self.ipv6 = true,
            "timeout" => self.timeout = parse_secs(val)?,
            "connect-timeout" => self.connect_timeout = parse_secs(val)?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// The options both tools declare; each adds its own.
pub(crate) const COMMON_OPTS: &[Opt] = &[
    Opt::short("B", 'B', true),
    Opt::short("P", 'P', true),
    Opt::short("d", 'd', true),
    Opt::short("p", 'p', true),
    Opt::short("e", 'e', true),
    Opt::short("I", 'I', true),
    Opt::short("S", 'S', true),
    Opt::both("h", 'h', "help", false),
    Opt::short("v", 'v', false),
    Opt::short("6", '6', false),
    Opt::long("timeout", "timeout", true),
    Opt::long("connect-timeout", "connect-timeout", true),
    Opt::long("warmup", "warmup", true),
];

/// The common options and a tool's own.
pub(crate) fn opts_with(own: &[Opt]) -> Vec<Opt> {
    [COMMON_OPTS, own].concat()
}

pub(crate) fn parse_port(v: &str) -> Result<u16, String> {
    v.trim().parse::<u16>().map_err(|_| format!("Error parsing \"{v}\": not a port number (0-65535)"))
}

/// A count from `min` to `max` (`u64::MAX`: no upper limit).
pub(crate) fn parse_count(v: &str, min: u64, max: u64) -> Result<u64, String> {
    match v.trim().parse::<u64>() {
        Ok(n) if n >= min && n <= max => Ok(n),
        Ok(_) if max == u64::MAX => Err(format!("Error parsing \"{v}\": must be at least {min}")),
        Ok(_) => Err(format!("Error parsing \"{v}\": must be between {min} and {max}")),
        Err(_) => Err(format!("Error parsing \"{v}\": not a number")),
    }
}

pub(crate) fn parse_secs(v: &str) -> Result<Duration, String> {
    match v.trim().parse::<f64>() {
        Ok(s) if s > 0.0 && s.is_finite() && s < 1e9 => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!("Error parsing \"{v}\": not a positive number of seconds")),
    }
}

pub(crate) fn parse_ep(v: &str) -> Result<EpType, String> {
    match v {
        "msg" => Ok(EpType::Msg),
        "rdm" => Ok(EpType::Rdm),
        "dgram" => Ok(EpType::Dgram),
        _ => Err(format!("Unknown endpoint : {v}")),
    }
}

/// `-S`: `all` or one size.
pub(crate) fn parse_size_sel(v: &str) -> Result<SizeSel, String> {
    if v.eq_ignore_ascii_case("all") {
        return Ok(SizeSel::All);
    }
    match fabric_core::param::parse_size(v) {
        Some(n) => Ok(SizeSel::One(n)),
        None => Err(format!("Error parsing \"{v}\": not a size")),
    }
}

// ---------------------------------------------------------------- entry point

/// Run a tool: `parsed` is its command line; the server or the client runs as
/// the options say. The exit status.
pub(crate) fn main_with<O: Deref<Target = CommonOpts>>(
    usage: &str,
    parsed: Result<Cmd<O>, String>,
    client: fn(&O) -> Res<()>,
    server: fn(&O) -> Res<()>,
) -> i32 {
    let o = match parsed {
        Ok(Cmd::Help) => {
            print!("{usage}");
            return 0;
        }
        Ok(Cmd::Run(o)) => o,
        Err(msg) => {
            eprintln!("{msg}");
            eprint!("{usage}");
            return 1;
        }
    };
    let r = if o.dst_addr.is_some() { client(&o) } else { server(&o) };
    match r {
        Ok(()) => 0,
        Err(f) => {
            eprintln!("[error] {}: {}", o.prog, f.msg);
            f.status
        }
    }
}

// ---------------------------------------------------------------- control connection

/// Receive a message that must start with `word`; an `ERR` from the peer becomes
/// the failure.
pub(crate) fn ctrl_expect(ctrl: &mut Ctrl, word: &str, prog: &str) -> Res<String> {
    let m = ctrl_recv(ctrl)?;
    let (w, rest) = m.split_once(' ').unwrap_or((m.as_str(), ""));
    if w == word {
        return Ok(rest.to_string());
    }
    if w == "ERR" {
        return Err(Failure::new(format!("the peer failed: {rest}")));
    }
    Err(Failure::new(format!("control connection: expected {word}, got {m:?} (is the peer a fabric {prog}?)")))
}

/// The client's HELLO, which must name `proto`: the rest of it.
pub(crate) fn expect_hello(ctrl: &mut Ctrl, proto: &str, prog: &str) -> Res<String> {
    let hello = ctrl_expect(ctrl, "HELLO", prog)?;
    if !hello.starts_with(proto) {
        return Err(Failure::new(format!("the client speaks {hello:?}, not {proto}")));
    }
    Ok(hello)
}

/// Tell the peer why `r` failed, if it still listens.
fn tell_peer(ctrl: &mut Ctrl, r: Res<()>) -> Res<()> {
    if let Err(f) = &r {
        let _ = ctrl.send(format!("ERR {}", f.msg).as_bytes());
    }
    r
}

/// The server: accept the client's control connection, then `run`.
pub(crate) fn serve_control(o: &CommonOpts, run: impl FnOnce(&mut Ctrl) -> Res<()>) -> Res<()> {
    let port = o.server_port();
    let listener =
        oob::listen(port, o.ipv6).map_err(|e| Failure::new(format!("control port {port}: cannot listen: {e}")))?;
    debug!(o, "SERVER: waiting for connection on port {port}");
    let (mut ctrl, peer) =
        Ctrl::accept(&listener, o.timeout).map_err(|e| Failure::new(format!("control port {port}: accept: {e}")))?;
    drop(listener);
    debug!(o, "SERVER: connected to {peer}");
    let r = run(&mut ctrl);
    tell_peer(&mut ctrl, r)
}

/// The client: connect to the server's control port, then `run`.
pub(crate) fn connect_control(o: &CommonOpts, run: impl FnOnce(&mut Ctrl) -> Res<()>) -> Res<()> {
    let host = o.dst_addr.as_deref().expect("a client has a server address");
    let (port, src_port) = o.client_ports();
    let addrs = oob::resolve(host, port, o.ipv6).map_err(Failure::new)?;
    debug!(o, "CLIENT: connecting to {host} port {port}");
    let mut ctrl = Ctrl::connect(&addrs, src_port, o.connect_timeout, o.timeout).map_err(Failure::new)?;
    debug!(o, "CLIENT: connected");
    let r = run(&mut ctrl);
    tell_peer(&mut ctrl, r)
}

// ---------------------------------------------------------------- fabric set-up

/// The hints of the options, asking for `caps`.
pub(crate) fn base_hints(o: &CommonOpts, caps: Caps) -> Hints {
    let mut h = Hints::new().ep_type(o.ep_type).caps(caps);
    h.prov_name = o.provider.clone();
    h.domain_name = o.domain.clone();
    h.mode = Some(Mode::CONTEXT | Mode::CONTEXT2);
    if o.ipv6 {
        h.addr_format = fabric::AddrFormat::SockaddrIn6;
    }
    h
}

/// The first entry for `h`; `nodata` adds to the failure when there is none.
pub(crate) fn getinfo(o: &CommonOpts, h: &Hints, test: &dyn Display, nodata: &dyn Fn(&mut Failure)) -> Res<Info> {
    debug!(o, "getinfo: {h:?}");
    let mut v = fabric::getinfo(h).map_err(|e| {
        let mut f = Failure::fabric("fi_getinfo", e);
        if e == Error::NoData {
            nodata(&mut f);
        }
        f
    })?;
    let info = v.remove(0);
    if o.verbose {
        eprintln!("[debug] {}: Running {test} test with fi_info:\n{}", o.prog, tostr::info_str(&info));
    }
    Ok(info)
}

/// The server's hints: for the fabric address on the interface the client
/// reached it on.
pub(crate) fn server_hints(ctrl: &Ctrl, mut hints: Hints) -> Res<Hints> {
    let local = ctrl.local_addr().map_err(|e| Failure::new(format!("control connection: {e}")))?;
    hints.node = Some(local.ip().to_string());
    hints.source = true;
    Ok(hints)
}

/// Completion-queue attributes for an entry.
pub(crate) type CqAttrFor<'a> = &'a dyn Fn(&Info) -> CqAttr;

/// The server's fabric side before the client's plan: a listening passive
/// endpoint (MSG) or open connectionless objects.
pub(crate) enum Listening {
    Msg(Fabric, EventQueue, PassiveEndpoint),
    Connless(Box<Objects>),
}

/// Listen (MSG) or open the endpoint (RDM, DGRAM) for `info`; the fabric address
/// to send the client.
pub(crate) fn server_listen(o: &CommonOpts, info: Info, cq_attr: CqAttrFor) -> Res<(Listening, Address)> {
    let (l, name) = if o.ep_type == EpType::Msg {
        let fabric = Fabric::open(&info).map_err(|e| Failure::fabric("fi_fabric", e))?;
        let eq = fabric.eq(EqAttr::default()).map_err(|e| Failure::fabric("fi_eq_open", e))?;
        let pep = fabric.passive_ep(&info).map_err(|e| Failure::fabric("fi_passive_ep", e))?;
        pep.bind_eq(&eq).map_err(|e| Failure::fabric("fi_pep_bind", e))?;
        pep.listen().map_err(|e| Failure::fabric("fi_listen", e))?;
        let name = pep.name().map_err(|e| Failure::fabric("fi_getname", e))?;
        (Listening::Msg(fabric, eq, pep), name)
    } else {
        let attr = cq_attr(&info);
        let ob = open_connless_with(info, attr)?;
        let name = ob.ep.name().map_err(|e| Failure::fabric("fi_getname", e))?;
        (Listening::Connless(Box::new(ob)), name)
    };
    debug!(o, "SERVER: fabric address {name}");
    Ok((l, name))
}

/// Wait for `FI_CONNECTED` on `eq`.
fn wait_connected(eq: &EventQueue, ctrl: &mut Ctrl, timeout: Duration, what: &str) -> Res<()> {
    match eq_wait(eq, ctrl, timeout, what)? {
        EqEvent::Connected { .. } => Ok(()),
        ev => Err(Failure::new(format!("expected FI_CONNECTED, got {}", ev.name()))),
    }
}

/// Accept the client's connection (MSG) or insert its fabric address
/// (`peer_name`, from its plan): the objects and the peer's address.
pub(crate) fn server_accept(
    o: &CommonOpts,
    ctrl: &mut Ctrl,
    l: Listening,
    peer_name: Option<String>,
    cq_attr: CqAttrFor,
) -> Res<(Objects, FiAddr)> {
    match l {
        Listening::Msg(fabric, eq, pep) => {
            let ev = eq_wait(&eq, ctrl, o.timeout, "waiting for the connection request")?;
            let EqEvent::ConnReq { info, .. } = ev else {
                return Err(Failure::new(format!("expected a connection request, got {}", ev.name())));
            };
            let attr = cq_attr(&info);
            let ob = open_msg_with(fabric, eq, *info, Some(pep), attr)?;
            ob.ep.accept(&[]).map_err(|e| Failure::fabric("fi_accept", e))?;
            let eq = ob.eq.as_ref().expect("msg objects have an event queue");
            wait_connected(eq, ctrl, o.timeout, "accepting the connection")?;
            debug!(o, "SERVER: connected");
            Ok((ob, FiAddr::UNSPEC))
        }
        Listening::Connless(ob) => {
            let ob = *ob;
            let peer_name = peer_name.ok_or_else(|| Failure::new("the client sent no fabric address"))?;
            let addr = Address::parse(&peer_name)
                .map_err(|_| Failure::new(format!("the client's fabric address {peer_name:?} is malformed")))?;
            let av = ob.av.as_ref().expect("connectionless objects have an address vector");
            let peer = av.insert_one(&addr).map_err(|e| Failure::fabric("fi_av_insert", e))?;
            debug!(o, "SERVER: inserted the client's address {addr}");
            Ok((ob, peer))
        }
    }
}

/// The server's reply to HELLO (`OK prov=.. max_msg=.. name=..`), read into the
/// client's hints: the hints, the server's maximum message size and its fabric
/// address.
pub(crate) fn client_hints(o: &CommonOpts, ctrl: &Ctrl, ok: &str, mut hints: Hints) -> Res<(Hints, usize, Address)> {
    let srv_max: usize = field(ok, "max_msg")
        .and_then(|m| m.parse().ok())
        .ok_or_else(|| Failure::new(format!("malformed reply from the server: {ok:?}")))?;
    let srv_name = field(ok, "name").unwrap_or("");
    let srv_addr = Address::parse(srv_name)
        .map_err(|_| Failure::new(format!("the server's fabric address {srv_name:?} is malformed")))?;
    debug!(o, "CLIENT: server's fabric address {srv_addr}");

    if hints.prov_name.is_none() {
        hints.prov_name = field(ok, "prov").map(str::to_string);
    }
    match srv_addr.sockaddr() {
        Some(sa) => {
            // A server listening on every address is reached at the host we reached.
            let ip =
                if sa.ip().is_unspecified() { ctrl.peer_addr().map(|p| p.ip()).unwrap_or(sa.ip()) } else { sa.ip() };
            hints.node = Some(ip.to_string());
            hints.service = Some(sa.port().to_string());
        }
        None => hints.dest_addr = Some(srv_addr.clone()),
    }
    Ok((hints, srv_max, srv_addr))
}

/// Send the plan (`plan(None)` on MSG, `plan(Some(our address))` otherwise) and
/// connect to the server (MSG) or insert its address: the objects and the peer's
/// address.
pub(crate) fn client_connect(
    o: &CommonOpts,
    ctrl: &mut Ctrl,
    info: Info,
    srv_addr: &Address,
    cq_attr: CqAttrFor,
    plan: &dyn Fn(Option<&Address>) -> String,
) -> Res<(Objects, FiAddr)> {
    let attr = cq_attr(&info);
    if o.ep_type == EpType::Msg {
        ctrl_send(ctrl, &plan(None))?;
        let fabric = Fabric::open(&info).map_err(|e| Failure::fabric("fi_fabric", e))?;
        let eq = fabric.eq(EqAttr::default()).map_err(|e| Failure::fabric("fi_eq_open", e))?;
        let ob = open_msg_with(fabric, eq, info, None, attr)?;
        let target = connect_addr(srv_addr, ctrl);
        ob.ep.connect(&target, &[]).map_err(|e| Failure::fabric("fi_connect", e))?;
        let eq = ob.eq.as_ref().expect("msg objects have an event queue");
        wait_connected(eq, ctrl, o.timeout, "connecting to the server")?;
        debug!(o, "CLIENT: connected to {target}");
        Ok((ob, FiAddr::UNSPEC))
    } else {
        let ob = open_connless_with(info, attr)?;
        let me = ob.ep.name().map_err(|e| Failure::fabric("fi_getname", e))?;
        let av = ob.av.as_ref().expect("connectionless objects have an address vector");
        let target = connect_addr(srv_addr, ctrl);
        let peer = av.insert_one(&target).map_err(|e| Failure::fabric("fi_av_insert", e))?;
        ctrl_send(ctrl, &plan(Some(&me)))?;
        Ok((ob, peer))
    }
}
