//! A tagged echo server serving many peers from one tokio task, and its client.
//!
//! ```text
//! async_echo server [--provider P] [--node ADDR] [--clients N]
//! async_echo client <server address> [--provider P] [--node ADDR] [--rounds R] [--size BYTES]
//! ```
//!
//! The server opens one RDM endpoint with tagged messages, prints
//! `listening <address>` and serves every client from a single task awaiting one
//! completion queue ([`fabric_tokio::AsyncCq`]): no thread per peer, no thread
//! per queue. With `--clients N` it exits after N clients said goodbye, printing
//! `served <clients> clients, <messages> messages`.
//!
//! The protocol, all in tagged messages:
//!
//! - a client says hello (tag [`HELLO`]) with its own address; the server puts
//!   it in its address vector and answers (tag [`HELLO`]) with the client's id;
//! - each message the client then sends with tag `id` comes back with the same
//!   tag and the same bytes;
//! - a client leaves with a message of tag [`BYE`] carrying its id (answered
//!   with the same, so that the client knows it arrived).
//!
//! A client sends `R` messages of varying lengths up to `BYTES`, one at a time,
//! checks each echo byte for byte, and prints `ok <R> round trips` and exits 0.
//!
//! `--provider` (`tcp`, `udp`, `shm`, `verbs` when built with the `verbs`
//! feature) picks the provider, as `FI_PROVIDER` does; `--node` the address to
//! bind (default `127.0.0.1`; providers that take no node ignore it).

#![forbid(unsafe_code)]

use fabric::{Address, AvAttr, BindFlags, Buf, Caps, CqAttr, EpType, Fabric, FiAddr, Hints, Info};
use fabric_tokio::AsyncCq;
use std::collections::{HashMap, VecDeque};
use std::process::ExitCode;
use std::time::Duration;

/// The tag of a hello and of its answer.
const HELLO: u64 = 1 << 62;
/// The tag of a goodbye and of its answer.
const BYE: u64 = (1 << 62) + 1;
/// The largest message the server takes.
const MAX_MSG: usize = 64 * 1024;
/// Receives the server keeps posted.
const RECVS: u64 = 64;
/// How long a client waits for one answer before it gives up.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Command-line options.
struct Opts {
    provider: Option<String>,
    node: String,
    clients: Option<u64>,
    rounds: u64,
    size: usize,
    server: Option<String>,
}

fn usage() -> String {
    "usage: async_echo server [--provider P] [--node ADDR] [--clients N]\n       \
     async_echo client <server address> [--provider P] [--node ADDR] [--rounds R] [--size BYTES]"
        .to_string()
}

fn parse(args: &[String]) -> Result<(String, Opts), String> {
    let mode = args.first().cloned().ok_or_else(usage)?;
    let mut o = Opts { provider: None, node: "127.0.0.1".into(), clients: None, rounds: 100, size: 4096, server: None };
    let mut it = args[1..].iter();
    while let Some(a) = it.next() {
        let mut val = |name: &str| it.next().cloned().ok_or_else(|| format!("{name} needs a value\n{}", usage()));
        let num = |name: &str, v: String| v.parse::<u64>().map_err(|_| format!("{name}: not a number: {v:?}"));
        match a.as_str() {
            "--provider" => o.provider = Some(val("--provider")?),
            "--node" => o.node = val("--node")?,
            "--clients" => o.clients = Some(num("--clients", val("--clients")?)?),
            "--rounds" => o.rounds = num("--rounds", val("--rounds")?)?,
            "--size" => {
                let s = num("--size", val("--size")?)? as usize;
                if s == 0 || s > MAX_MSG {
                    return Err(format!("--size must be 1 to {MAX_MSG} bytes, not {s}"));
                }
                o.size = s;
            }
            s if !s.starts_with('-') && o.server.is_none() && mode == "client" => o.server = Some(s.to_string()),
            other => return Err(format!("unknown argument {other:?}\n{}", usage())),
        }
    }
    match mode.as_str() {
        "server" => {}
        "client" if o.server.is_some() => {}
        "client" => return Err(format!("client needs the server's address\n{}", usage())),
        other => return Err(format!("unknown mode {other:?}\n{}", usage())),
    }
    Ok((mode, o))
}

/// The first RDM entry with tagged messages of the chosen provider, bound to
/// `--node` when the provider takes one.
fn find(o: &Opts) -> Res<Info> {
    let mut base = Hints::new().ep_type(EpType::Rdm).caps(Caps::TAGGED);
    if let Some(p) = &o.provider {
        base = base.provider(p);
    }
    for h in [base.clone().node(&o.node).source(true), base] {
        if let Ok(mut v) = fabric::getinfo(&h) {
            if !v.is_empty() {
                return Ok(v.remove(0));
            }
        }
    }
    let which = o.provider.as_deref().unwrap_or("any provider");
    Err(format!("{which} offers no RDM endpoint with tagged messages here").into())
}

/// An enabled RDM endpoint with its awaited queue and address vector.
struct Node {
    ep: fabric::Endpoint,
    cq: AsyncCq,
    av: fabric::AddressVector,
    _domain: fabric::Domain,
    _fabric: Fabric,
}

fn open(o: &Opts) -> Res<Node> {
    let info = find(o)?;
    let fabric = Fabric::open(&info)?;
    let domain = fabric.domain(&info)?;
    let cq = AsyncCq::open(&domain, CqAttr::default())?;
    let av = domain.av(AvAttr::default())?;
    let ep = domain.endpoint(&info)?;
    ep.bind_cq(cq.queue(), BindFlags::TRANSMIT | BindFlags::RECV)?;
    ep.bind_av(&av)?;
    ep.enable()?;
    Ok(Node { ep, cq, av, _domain: domain, _fabric: fabric })
}

/// Sends refused for back-pressure, retried after the next completion.
#[derive(Default)]
struct Backlog(VecDeque<(Buf, FiAddr, u64)>);

impl Backlog {
    /// Send `buf` to `dest` with `tag` (its context: `RECVS` and up, so that
    /// send completions are told from receives), or queue it if the provider
    /// pushes back.
    fn send(&mut self, ep: &fabric::Endpoint, buf: Buf, dest: FiAddr, tag: u64) -> fabric::Result<()> {
        if !self.0.is_empty() {
            self.0.push_back((buf, dest, tag));
            return Ok(());
        }
        match ep.tsend(buf, dest, tag, RECVS) {
            Ok(()) => Ok(()),
            Err(e) if e.error == fabric::Error::Again => {
                let buf = e.buffers.into_buf().ok_or(fabric::Error::Again)?;
                self.0.push_back((buf, dest, tag));
                Ok(())
            }
            Err(e) => Err(e.error),
        }
    }

    /// Retry the queued sends in order, as far as the provider takes them.
    fn flush(&mut self, ep: &fabric::Endpoint) -> fabric::Result<()> {
        while let Some((buf, dest, tag)) = self.0.pop_front() {
            match ep.tsend(buf, dest, tag, RECVS) {
                Ok(()) => {}
                Err(e) if e.error == fabric::Error::Again => {
                    let buf = e.buffers.into_buf().ok_or(fabric::Error::Again)?;
                    self.0.push_front((buf, dest, tag));
                    return Ok(());
                }
                Err(e) => return Err(e.error),
            }
        }
        Ok(())
    }
}

/// The server: one task, one completion queue, every client.
async fn server(o: Opts) -> Res<()> {
    let n = open(&o)?;
    println!("listening {}", n.ep.name()?.to_uri());
    for r in 0..RECVS {
        n.ep.trecv(Buf::new(MAX_MSG), FiAddr::UNSPEC, 0, u64::MAX, r)?;
    }
    // Clients by id: their address in the address vector.
    let mut clients: HashMap<u64, FiAddr> = HashMap::new();
    let mut next_id = 0u64;
    let (mut gone, mut echoed) = (0u64, 0u64);
    let mut backlog = Backlog::default();
    let mut sends_in_flight = 0u64;
    loop {
        if o.clients.is_some_and(|want| gone >= want) && sends_in_flight == 0 && backlog.0.is_empty() {
            break;
        }
        let c = match n.cq.next().await? {
            Ok(c) => c,
            Err(e) => return Err(format!("operation {} failed: {e}", e.context).into()),
        };
        if c.context >= RECVS {
            // A send done: its buffer is free, and there may be room now.
            sends_in_flight -= 1;
            backlog.flush(&n.ep)?;
            continue;
        }
        let bytes = c.bytes().to_vec();
        let slot = c.context;
        let (tag, answer) = match c.tag {
            HELLO => {
                let addr = Address::from_bytes(&bytes)?;
                let fi = n.av.insert_one(&addr)?;
                let id = next_id;
                next_id += 1;
                clients.insert(id, fi);
                (HELLO, Some((fi, id.to_le_bytes().to_vec())))
            }
            BYE => {
                let id = u64::from_le_bytes(bytes.as_slice().try_into().map_err(|_| "a goodbye without an id")?);
                let fi = clients.remove(&id).ok_or_else(|| format!("goodbye from unknown client {id}"))?;
                gone += 1;
                (BYE, Some((fi, bytes)))
            }
            id => match clients.get(&id) {
                Some(&fi) => {
                    echoed += 1;
                    (id, Some((fi, bytes)))
                }
                None => {
                    eprintln!("message with tag {id:#x} from no known client: dropped");
                    (id, None)
                }
            },
        };
        // The receive buffer goes back to work at once.
        let mut buf = c.buffers.into_buf().unwrap_or_else(|| Buf::new(MAX_MSG));
        buf.set_len(buf.capacity())?;
        n.ep.trecv(buf, FiAddr::UNSPEC, 0, u64::MAX, slot)?;
        if let Some((dest, data)) = answer {
            sends_in_flight += 1;
            backlog.send(&n.ep, Buf::from(&data[..]), dest, tag)?;
        }
    }
    println!("served {gone} clients, {echoed} messages");
    Ok(())
}

/// One exchange: send `data` with `tag`, await the answer with the same tag
/// (and the send's completion); the answer's bytes.
async fn exchange(n: &Node, server: FiAddr, tag: u64, data: &[u8]) -> Res<Vec<u8>> {
    n.ep.trecv(Buf::new(MAX_MSG), FiAddr::UNSPEC, tag, 0, 1)?;
    n.ep.tsend(Buf::from(data), server, tag, 2)?;
    let mut answer = None;
    let mut sent = false;
    while answer.is_none() || !sent {
        let c = match tokio::time::timeout(ANSWER_TIMEOUT, n.cq.next()).await {
            Ok(r) => r?.map_err(|e| format!("operation {} failed: {e}", e.context))?,
            Err(_) => return Err(format!("no answer to tag {tag:#x} within {ANSWER_TIMEOUT:?}").into()),
        };
        match c.context {
            1 => answer = Some(c.bytes().to_vec()),
            _ => sent = true,
        }
    }
    Ok(answer.unwrap_or_default())
}

/// The bytes of round `r` of client `id`: `len` bytes no other round has.
fn payload(id: u64, r: u64, len: usize) -> Vec<u8> {
    let mut x = id.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ r.wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

async fn client(o: Opts) -> Res<()> {
    let n = open(&o)?;
    let text = o.server.as_deref().unwrap_or_default();
    let server =
        Address::parse(text).and_then(|a| n.av.insert_one(&a)).map_err(|e| format!("server address {text:?}: {e}"))?;
    let hello = exchange(&n, server, HELLO, &n.ep.name()?.to_bytes()).await?;
    let id = u64::from_le_bytes(hello.as_slice().try_into().map_err(|_| "the hello's answer is not an id")?);
    for r in 0..o.rounds {
        let len = 1 + (r as usize * 7919) % o.size;
        let data = payload(id, r, len);
        let echo = exchange(&n, server, id, &data).await?;
        if echo != data {
            return Err(format!("round {r}: the echo of {len} bytes differs ({} bytes back)", echo.len()).into());
        }
    }
    let bye = exchange(&n, server, BYE, &id.to_le_bytes()).await?;
    if bye != id.to_le_bytes() {
        return Err("the goodbye's answer is not our id".into());
    }
    println!("ok {} round trips", o.rounds);
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, opts) = match parse(&args) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("async_echo: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("async_echo: a tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let r = if mode == "server" { rt.block_on(server(opts)) } else { rt.block_on(client(opts)) };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("async_echo {mode}: {e}");
            ExitCode::FAILURE
        }
    }
}
