//! A shared counter incremented by fetching atomics from many processes.
//!
//! ```text
//! atomic_counter server <expected-total> [timeout-seconds]
//! atomic_counter client <increments> <server line>
//! ```
//!
//! The server registers one `u64` (zero) for remote reads and writes and prints one
//! line, `<address> <remote address> <key>` (for example
//! `fi_sockaddr_in://127.0.0.1:40123 0x55d0c8a0 0x1f2e...`), then serves: it drives
//! progress by reading its completion queue and looks at the counter now and then
//! with an `FI_ATOMIC_READ` of its own (so its reads are ordered with the peers'
//! atomics), until the counter reaches the expected total or the time-out. It
//! prints `final <value>` and exits 0 if the value is the expected one.
//!
//! A client does `FI_SUM` of 1 on `FI_UINT64` with `fetch_atomic`, one at a time,
//! each waited for; the values fetched (the counter just before each increment)
//! must increase strictly. It prints them on one line, `fetched <v1> <v2> ...`, and
//! exits 0. Run one server and several clients at once: the fetched values of all
//! clients together are then exactly `0..total`, each once.

#![forbid(unsafe_code)]

use fabric::{
    Address, AtomicOp, AvAttr, BindFlags, Buf, CompletionQueue, CqAttr, Datatype, Endpoint, EpType, Fabric, Hints,
    MrAccess, Remote,
};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How long one atomic may take before the client gives up.
const OP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the server goes on serving once the counter is complete, so that the
/// answers to the last increments leave before it exits.
const LINGER: Duration = Duration::from_millis(300);

/// An RDM endpoint over tcp on loopback, with its queue and address vector.
struct Node {
    ep: Endpoint,
    cq: CompletionQueue,
    av: fabric::AddressVector,
    domain: fabric::Domain,
}

fn open() -> fabric::Result<Node> {
    let hints = Hints::new().provider("tcp").ep_type(EpType::Rdm).node("127.0.0.1").source(true);
    let info = fabric::getinfo(&hints)?.remove(0);
    let fabric = Fabric::open(&info)?;
    let domain = fabric.domain(&info)?;
    let cq = domain.cq(CqAttr::default())?;
    let av = domain.av(AvAttr::default())?;
    let ep = domain.endpoint(&info)?;
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)?;
    ep.bind_av(&av)?;
    ep.enable()?;
    Ok(Node { ep, cq, av, domain })
}

/// Wait for the completion of the one operation in flight; its buffers, or why it
/// failed.
fn complete(cq: &CompletionQueue) -> Result<Vec<Buf>, String> {
    match cq.wait_next(Some(OP_TIMEOUT)) {
        Ok(Some(Ok(c))) => Ok(c.buffers.into_vec()),
        Ok(Some(Err(e))) => Err(format!("the atomic failed: {}", e.err)),
        Ok(None) => Err(format!("no completion within {OP_TIMEOUT:?}")),
        Err(e) => Err(format!("reading the queue failed: {e}")),
    }
}

/// The `u64` at the start of a buffer.
fn u64_of(b: &Buf) -> Result<u64, String> {
    b.get(..8).and_then(|s| s.try_into().ok()).map(u64::from_le_bytes).ok_or_else(|| "short result".to_string())
}

fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

fn server(expected: u64, timeout: Duration) -> Result<u64, String> {
    let n = open().map_err(|e| format!("opening the endpoint: {e}"))?;
    let counter = n
        .domain
        .register(Buf::from(&0u64.to_le_bytes()[..]), MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE)
        .map_err(|e| format!("registering the counter: {e}"))?;
    // Where the clients reach the counter: its address (or offset 0, on a domain
    // that addresses regions by offset) and its key.
    let remote = counter.remote();
    let name = n.ep.name().map_err(|e| format!("the endpoint's name: {e}"))?;
    println!("{name} {:#x} {:#x}", remote.addr, remote.key);
    // The server looks at its counter through its own endpoint: an atomic read is
    // serialized with the clients' atomics, a plain load would race with them.
    let me = n.av.insert_one(&name).map_err(|e| format!("inserting our own address: {e}"))?;
    let start = Instant::now();
    let mut reading = false;
    let mut done_at: Option<Instant> = None;
    let mut last = 0;
    loop {
        if done_at.is_some_and(|t| t.elapsed() >= LINGER) {
            break;
        }
        if start.elapsed() >= timeout {
            eprintln!("server: time-out after {timeout:?} with the counter at {last} of {expected}");
            break;
        }
        if !reading && done_at.is_none() {
            n.ep.fetch_atomic(Buf::new(0), Buf::new(8), AtomicOp::Read, Datatype::Uint64, me, remote, 1)
                .map_err(|e| format!("reading the counter: {}", e.error))?;
            reading = true;
        }
        // Serves the clients meanwhile: reading the queue drives progress.
        match n.cq.wait_next(Some(Duration::from_millis(20))) {
            Ok(Some(Ok(c))) => {
                reading = false;
                last = u64_of(&c.buffers.into_vec()[1])?;
                if last >= expected && done_at.is_none() {
                    done_at = Some(Instant::now());
                }
            }
            Ok(Some(Err(e))) => return Err(format!("reading the counter failed: {}", e.err)),
            Ok(None) => {}
            Err(e) => return Err(format!("reading the queue: {e}")),
        }
    }
    // Closing the region waits for any access in progress; its bytes are then ours.
    let buf = counter.close().map_err(|e| format!("closing the counter: {e}"))?;
    u64_of(&buf)
}

fn client(count: u64, line: &str) -> Result<Vec<u64>, String> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [name, addr, key] = fields[..] else {
        return Err(format!("expected `<address> <remote address> <key>`, got {line:?}"));
    };
    let name = Address::parse(name).map_err(|e| format!("bad address {name:?}: {e}"))?;
    let remote = match (parse_u64(addr), parse_u64(key)) {
        (Some(addr), Some(key)) => Remote { addr, key },
        _ => return Err(format!("bad remote address or key in {line:?}")),
    };
    let n = open().map_err(|e| format!("opening the endpoint: {e}"))?;
    let server = n.av.insert_one(&name).map_err(|e| format!("inserting the server's address: {e}"))?;
    let mut fetched = Vec::with_capacity(count as usize);
    for i in 0..count {
        let one = Buf::from(&1u64.to_le_bytes()[..]);
        n.ep.fetch_atomic(one, Buf::new(8), AtomicOp::Sum, Datatype::Uint64, server, remote, i)
            .map_err(|e| format!("increment {i}: {}", e.error))?;
        let bufs = complete(&n.cq).map_err(|e| format!("increment {i}: {e}"))?;
        let prior = u64_of(&bufs[1])?;
        if let Some(&before) = fetched.last() {
            if prior <= before {
                return Err(format!("increment {i} fetched {prior} after {before}: not strictly increasing"));
            }
        }
        fetched.push(prior);
    }
    Ok(fetched)
}

fn usage() -> ExitCode {
    eprintln!("usage: atomic_counter server <expected-total> [timeout-seconds]");
    eprintln!("       atomic_counter client <increments> <server line>");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("server") => {
            let Some(expected) = args.get(1).and_then(|s| parse_u64(s)) else { return usage() };
            let secs = args.get(2).map_or(Some(60), |s| parse_u64(s));
            let Some(secs) = secs else { return usage() };
            match server(expected, Duration::from_secs(secs)) {
                Ok(v) => {
                    println!("final {v}");
                    if v == expected {
                        ExitCode::SUCCESS
                    } else {
                        eprintln!("server: the counter is {v}, expected {expected}");
                        ExitCode::FAILURE
                    }
                }
                Err(e) => {
                    eprintln!("server: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Some("client") => {
            let Some(count) = args.get(1).and_then(|s| parse_u64(s)) else { return usage() };
            match client(count, &args[2..].join(" ")) {
                Ok(fetched) => {
                    let list: Vec<String> = fetched.iter().map(u64::to_string).collect();
                    println!("fetched {}", list.join(" "));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("client: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        _ => usage(),
    }
}
