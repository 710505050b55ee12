//! Tagged messages between two processes: a receiver takes messages by tag,
//! whatever order they arrive in.
//!
//! ```text
//! tagged receiver [--provider P]            # prints `address <uri>`, then what it receives
//! tagged sender <receiver address> [--provider P]
//! ```
//!
//! The receiver posts one receive per tag (1, 2, 3, in that order) and prints
//! `address <uri>`. The sender introduces itself (tag [`HELLO`], its address),
//! then sends tag 3, then 2, then 1, each carrying a text naming its tag. Tags
//! match receives, not arrival order: the receive posted for tag 1 gets the
//! message sent last. The receiver prints `tag <t>: <text>` for each, in the
//! order the receives were posted, checks that each text names its tag, and
//! tells the sender it has them all (tag [`DONE`]).
//!
//! Why that last message: a send's completion says that its buffer is the
//! application's again, not that the peer has the message. A sender that
//! closed its endpoint right after its completions could take undelivered
//! messages with it (shm does today: without the answer, the receiver missed
//! the messages in more than half of the runs).

#![forbid(unsafe_code)]

use fabric::{Address, AvAttr, BindFlags, Buf, Caps, CompletionQueue, CqAttr, EpType, Fabric, FiAddr, Hints};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The tag of the sender's introduction.
const HELLO: u64 = 100;
/// The tag of the receiver's "received them all".
const DONE: u64 = 101;
/// How long either side waits for the other before giving up.
const TIMEOUT: Duration = Duration::from_secs(30);
/// How long the receiver goes on driving progress after the last message, so
/// that the acknowledgements of reliable-datagram providers leave.
const LINGER: Duration = Duration::from_millis(300);

type Res<T> = Result<T, Box<dyn std::error::Error>>;

struct Node {
    ep: fabric::Endpoint,
    cq: CompletionQueue,
    av: fabric::AddressVector,
    _domain: fabric::Domain,
    _fabric: Fabric,
}

/// An RDM endpoint with tagged messages, on loopback for providers that take a
/// node.
fn open(provider: Option<&str>) -> Res<Node> {
    let mut hints = Hints::new().ep_type(EpType::Rdm).caps(Caps::TAGGED);
    if let Some(p) = provider {
        hints = hints.provider(p);
    }
    let info = match fabric::getinfo(&hints.clone().node("127.0.0.1").source(true)) {
        Ok(mut v) if !v.is_empty() => v.remove(0),
        _ => fabric::getinfo(&hints)?.remove(0),
    };
    let fabric = Fabric::open(&info)?;
    let domain = fabric.domain(&info)?;
    let cq = domain.cq(CqAttr::default())?;
    let av = domain.av(AvAttr::default())?;
    let ep = domain.endpoint(&info)?;
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)?;
    ep.bind_av(&av)?;
    ep.enable()?;
    Ok(Node { ep, cq, av, _domain: domain, _fabric: fabric })
}

/// The next completion within [`TIMEOUT`]; a failed operation is an error.
fn next(cq: &CompletionQueue) -> Res<fabric::Completion> {
    match cq.wait_next(Some(TIMEOUT))? {
        Some(Ok(c)) => Ok(c),
        Some(Err(e)) => Err(format!("operation {} failed: {e}", e.context).into()),
        None => Err(format!("nothing completed within {TIMEOUT:?}").into()),
    }
}

fn receiver(provider: Option<&str>) -> Res<()> {
    let n = open(provider)?;
    for tag in [HELLO, 1, 2, 3] {
        // Context = tag; ignore mask 0: only this exact tag matches.
        n.ep.trecv(Buf::new(256), FiAddr::UNSPEC, tag, 0, tag)?;
    }
    println!("address {}", n.ep.name()?.to_uri());
    let mut got = BTreeMap::new();
    let mut sender = None;
    while got.len() < 3 || sender.is_none() {
        let c = next(&n.cq)?;
        if c.tag == HELLO {
            sender = Some(n.av.insert_one(&Address::from_bytes(c.bytes())?)?);
            continue;
        }
        let text = String::from_utf8_lossy(c.bytes()).into_owned();
        if c.tag != c.context || !text.contains(&format!("tag {}", c.tag)) {
            return Err(format!("the receive for tag {} got tag {}: {text:?}", c.context, c.tag).into());
        }
        got.insert(c.tag, text);
    }
    for (tag, text) in &got {
        println!("tag {tag}: {text}");
    }
    let sender = sender.ok_or("no introduction from the sender")?;
    n.ep.tsend(Buf::from(&b"received them all"[..]), sender, DONE, DONE)?;
    next(&n.cq)?;
    let end = Instant::now() + LINGER;
    while Instant::now() < end {
        let _ = n.cq.read_one();
    }
    Ok(())
}

fn sender(to: &str, provider: Option<&str>) -> Res<()> {
    let n = open(provider)?;
    let dest =
        Address::parse(to).and_then(|a| n.av.insert_one(&a)).map_err(|e| format!("receiver address {to:?}: {e}"))?;
    n.ep.trecv(Buf::new(64), FiAddr::UNSPEC, DONE, 0, DONE)?;
    n.ep.tsend(Buf::from(n.ep.name()?.to_bytes()), dest, HELLO, HELLO)?;
    next(&n.cq)?;
    let mut done = false;
    for tag in [3u64, 2, 1] {
        let text = format!("this message has tag {tag}");
        n.ep.tsend(Buf::from(text.as_bytes()), dest, tag, tag)?;
        // The send's completion: its buffer is ours again.
        loop {
            let c = next(&n.cq)?;
            if c.context == tag {
                break;
            }
            done |= c.context == DONE;
        }
        println!("sent tag {tag}");
    }
    // Exit only once the receiver has them all (see the module docs).
    while !done {
        done = next(&n.cq)?.context == DONE;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let provider = args.iter().position(|a| a == "--provider").and_then(|i| args.get(i + 1)).map(String::as_str);
    let r = match args.first().map(String::as_str) {
        Some("receiver") => receiver(provider),
        Some("sender") => match args.get(1).filter(|a| !a.starts_with("--")) {
            Some(to) => sender(to, provider),
            None => Err("sender needs the receiver's address".into()),
        },
        _ => Err("usage: tagged receiver [--provider P] | tagged sender <address> [--provider P]".into()),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tagged: {e}");
            ExitCode::FAILURE
        }
    }
}
