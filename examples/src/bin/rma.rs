//! RMA into a registered region: one endpoint writes into memory another
//! registered, reads it back, and the owner finds the bytes in its buffer.
//!
//! ```text
//! rma [--provider P]      # tcp unless told otherwise
//! ```
//!
//! The target registers a 4 KiB buffer for remote reads and writes and hands
//! its description ([`fabric::Remote`]: address and key, what an application
//! sends its peer) to the initiator, which writes a text at offset 100
//! (`fi_write`), then reads 64 bytes from there (`fi_read`) into a buffer of its
//! own. Both endpoints are driven from this one thread: progress is manual, so
//! the loop that waits for the initiator's completion reads the target's queue
//! too. Finally the target closes the region, gets its buffer back, and checks
//! that the text is where the initiator wrote it.

#![forbid(unsafe_code)]

use fabric::{AvAttr, BindFlags, Buf, Caps, CompletionQueue, CqAttr, EpType, Fabric, Hints, MrAccess};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How long one operation may take.
const TIMEOUT: Duration = Duration::from_secs(30);
/// Where in the region the initiator writes.
const OFFSET: usize = 100;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

struct Side {
    ep: fabric::Endpoint,
    cq: CompletionQueue,
    av: fabric::AddressVector,
    domain: fabric::Domain,
}

/// Wait for the one operation in flight on `cq`, driving `other`'s progress
/// meanwhile (reading a queue drives the endpoints bound to it).
fn complete(cq: &CompletionQueue, other: &CompletionQueue) -> Res<fabric::Completion> {
    let start = Instant::now();
    loop {
        match cq.next()? {
            Some(Ok(c)) => return Ok(c),
            Some(Err(e)) => return Err(format!("operation {} failed: {e}", e.context).into()),
            None => {}
        }
        if let Some(r) = other.next()? {
            return Err(format!("unexpected entry on the target's queue: {r:?}").into());
        }
        if start.elapsed() > TIMEOUT {
            return Err(format!("nothing completed within {TIMEOUT:?}").into());
        }
    }
}

fn run(provider: &str) -> Res<()> {
    let hints = Hints::new().provider(provider).ep_type(EpType::Rdm).caps(Caps::RMA | Caps::MSG);
    let info = match fabric::getinfo(&hints.clone().node("127.0.0.1").source(true)) {
        Ok(mut v) if !v.is_empty() => v.remove(0),
        _ => fabric::getinfo(&hints)?.remove(0),
    };
    let fabric = Fabric::open(&info)?;
    let side = || -> Res<Side> {
        let domain = fabric.domain(&info)?;
        let cq = domain.cq(CqAttr::default())?;
        let av = domain.av(AvAttr::default())?;
        let ep = domain.endpoint(&info)?;
        ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)?;
        ep.bind_av(&av)?;
        ep.enable()?;
        Ok(Side { ep, cq, av, domain })
    };
    let (initiator, target) = (side()?, side()?);
    let to_target = initiator.av.insert_one(&target.ep.name()?)?;
    target.av.insert_one(&initiator.ep.name()?)?;

    // The target's region: the buffer belongs to the region until it is closed.
    let region = target.domain.register(Buf::new(4096), MrAccess::REMOTE_WRITE | MrAccess::REMOTE_READ)?;
    let at = region.remote_at(OFFSET, 64)?; // what the target would send its peer

    let text = b"written by the initiator, straight into the target's memory";
    initiator.ep.write(Buf::from(&text[..]), to_target, at, 1)?;
    complete(&initiator.cq, &target.cq)?;
    println!("wrote {} bytes at offset {OFFSET}", text.len());

    initiator.ep.read(Buf::new(64), to_target, at, 2)?;
    let c = complete(&initiator.cq, &target.cq)?;
    let back = c.buffers.into_buf().ok_or("the read's buffer back")?;
    if &back[..text.len()] != text {
        return Err(format!("read back {:?}", String::from_utf8_lossy(&back)).into());
    }
    println!("read back {:?}", String::from_utf8_lossy(&back[..text.len()]));

    let buf = region.close()?; // the region's buffer, the target's again
    if &buf[OFFSET..OFFSET + text.len()] != text || buf[..OFFSET].iter().any(|&b| b != 0) {
        return Err("the target's buffer does not hold the text where it was written".into());
    }
    println!("the target's buffer holds it at offset {OFFSET}");
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let provider = match args.as_slice() {
        [] => "tcp".to_string(),
        [flag, p] if flag == "--provider" => p.clone(),
        _ => {
            eprintln!("usage: rma [--provider P]");
            return ExitCode::from(2);
        }
    };
    match run(&provider) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rma ({provider}): {e}");
            ExitCode::FAILURE
        }
    }
}
