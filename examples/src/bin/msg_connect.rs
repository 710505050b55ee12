//! Connected (MSG) endpoints: a server listens and accepts, a client connects;
//! then one request and its answer over the connection.
//!
//! ```text
//! msg_connect server [--provider P]          # prints `listening <uri>`
//! msg_connect client <server address> [--provider P]
//! ```
//!
//! The server opens a passive endpoint, prints `listening <uri>` and waits on
//! its event queue for a connection request (`FI_CONNREQ`, with the client's
//! connection data). It opens an endpoint for the request, posts a receive,
//! accepts, and waits for `FI_CONNECTED`. It answers the client's message with
//! the same text in capitals, then waits for the client to shut down
//! (`FI_SHUTDOWN`). The client connects with connection data, waits for
//! `FI_CONNECTED`, sends `hello over a connection`, prints the answer and shuts
//! down. The provider is tcp unless `--provider` says otherwise (MSG endpoints:
//! tcp, verbs).

#![forbid(unsafe_code)]

use fabric::{
    Address, BindFlags, Buf, Caps, CompletionQueue, CqAttr, EpType, EqAttr, EqEvent, EventQueue, Fabric, FiAddr, Hints,
};
use std::process::ExitCode;
use std::time::Duration;

/// How long either side waits for an event or a completion.
const TIMEOUT: Duration = Duration::from_secs(30);
/// What the client sends along with its connection request.
const CONN_DATA: &[u8] = b"msg_connect client";

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn hints(provider: Option<&str>) -> Hints {
    Hints::new().provider(provider.unwrap_or("tcp")).ep_type(EpType::Msg).caps(Caps::MSG)
}

/// The next event within [`TIMEOUT`]; an error event is an error.
fn event(eq: &EventQueue) -> Res<EqEvent> {
    match eq.sread(Some(TIMEOUT)) {
        Ok(ev) => Ok(ev),
        Err(fabric::Error::Avail) => {
            let e = eq.readerr()?;
            Err(format!("connection error: {}", e.err).into())
        }
        Err(e) => Err(format!("waiting for an event: {e}").into()),
    }
}

/// The next completion within [`TIMEOUT`]; a failed operation is an error.
fn completion(cq: &CompletionQueue) -> Res<fabric::Completion> {
    match cq.wait_next(Some(TIMEOUT))? {
        Some(Ok(c)) => Ok(c),
        Some(Err(e)) => Err(format!("operation {} failed: {e}", e.context).into()),
        None => Err(format!("nothing completed within {TIMEOUT:?}").into()),
    }
}

fn server(provider: Option<&str>) -> Res<()> {
    let info = fabric::getinfo(&hints(provider).node("127.0.0.1").source(true))?.remove(0);
    let fabric = Fabric::open(&info)?;
    let eq = fabric.eq(EqAttr::default())?;
    let pep = fabric.passive_ep(&info)?;
    pep.bind_eq(&eq)?;
    pep.listen()?;
    println!("listening {}", pep.name()?.to_uri());

    let req = match event(&eq)? {
        EqEvent::ConnReq { info, data, .. } => {
            println!("connection request with data {:?}", String::from_utf8_lossy(&data));
            info
        }
        other => return Err(format!("expected a connection request, got {other:?}").into()),
    };
    // The connection's endpoint comes from the request's info.
    let domain = fabric.domain(&req)?;
    let cq = domain.cq(CqAttr::default())?;
    let ep = domain.endpoint(&req)?;
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)?;
    ep.bind_eq(&eq)?;
    ep.enable()?;
    ep.recv(Buf::new(256), FiAddr::UNSPEC, 1)?; // before accepting: nothing arrives unexpected
    ep.accept(b"")?;
    match event(&eq)? {
        EqEvent::Connected { .. } => println!("connected"),
        other => return Err(format!("expected FI_CONNECTED, got {other:?}").into()),
    }
    let request = completion(&cq)?;
    let answer = String::from_utf8_lossy(request.bytes()).to_uppercase();
    ep.send(Buf::from(answer.as_bytes()), FiAddr::UNSPEC, 2)?;
    completion(&cq)?;
    match event(&eq)? {
        EqEvent::Shutdown { .. } => println!("the client shut down"),
        other => return Err(format!("expected FI_SHUTDOWN, got {other:?}").into()),
    }
    Ok(())
}

fn client(to: &str, provider: Option<&str>) -> Res<()> {
    let addr = Address::parse(to).map_err(|e| format!("server address {to:?}: {e}"))?;
    let info = fabric::getinfo(&hints(provider))?.remove(0);
    let fabric = Fabric::open(&info)?;
    let domain = fabric.domain(&info)?;
    let eq = fabric.eq(EqAttr::default())?;
    let cq = domain.cq(CqAttr::default())?;
    let ep = domain.endpoint(&info)?;
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)?;
    ep.bind_eq(&eq)?;
    ep.enable()?;
    ep.recv(Buf::new(256), FiAddr::UNSPEC, 1)?;
    ep.connect(&addr, CONN_DATA)?;
    match event(&eq)? {
        EqEvent::Connected { .. } => {}
        other => return Err(format!("expected FI_CONNECTED, got {other:?}").into()),
    }
    ep.send(Buf::from(&b"hello over a connection"[..]), FiAddr::UNSPEC, 2)?;
    let mut answer = None;
    for _ in 0..2 {
        let c = completion(&cq)?;
        if c.context == 1 {
            answer = Some(String::from_utf8_lossy(c.bytes()).into_owned());
        }
    }
    let answer = answer.ok_or("no answer")?;
    println!("answer {answer:?}");
    ep.shutdown()?;
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let provider = args.iter().position(|a| a == "--provider").and_then(|i| args.get(i + 1)).map(String::as_str);
    let r = match args.first().map(String::as_str) {
        Some("server") => server(provider),
        Some("client") => match args.get(1).filter(|a| !a.starts_with("--")) {
            Some(to) => client(to, provider),
            None => Err("client needs the server's address".into()),
        },
        _ => Err("usage: msg_connect server [--provider P] | msg_connect client <address> [--provider P]".into()),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("msg_connect: {e}");
            ExitCode::FAILURE
        }
    }
}
