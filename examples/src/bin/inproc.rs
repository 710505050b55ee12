//! The in-process round trip of `../shared/tools/inproc` through the safe Rust API:
//! one thread drives two RDM endpoints of one domain; A sends SIZE bytes tagged to
//! B, B answers, every completion is read. Same arguments as `lf_inproc`
//! (`inproc PROVIDER ITERS SIZE`), so `instr.sh` counts its instructions per round
//! trip the same way: `cargo run --release -p fabric-examples --bin inproc shm 1000 64`.

#![forbid(unsafe_code)]

use fabric::{AvAttr, BindFlags, Buf, Caps, CompletionQueue, CqAttr, EpType, Error, Fabric, FiAddr, Hints, OpBuffers};

/// Read both queues until `na` and `nb` completions came; each completion's
/// buffer goes back to its slot (the context is the slot's index).
fn drive(qa: &CompletionQueue, mut na: usize, qb: &CompletionQueue, mut nb: usize, slots: &mut [Option<Buf>; 4]) {
    let mut once = na == 0 && nb == 0;
    while na > 0 || nb > 0 || once {
        once = false;
        for (q, n) in [(qa, &mut na), (qb, &mut nb)] {
            match q.read_one() {
                Ok(c) => {
                    *n = n.saturating_sub(1);
                    if let OpBuffers::One(b) = c.buffers {
                        slots[c.context as usize] = Some(b);
                    }
                }
                Err(Error::Again) => {}
                Err(e) => panic!("completion queue: {e}"),
            }
        }
    }
}

fn main() -> fabric::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let prov = args.get(1).map_or("shm", String::as_str);
    let iters: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let size: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(64);
    let mut hints = Hints::new().provider(prov).ep_type(EpType::Rdm).caps(Caps::TAGGED);
    if prov != "shm" {
        hints = hints.node("127.0.0.1").source(true);
    }
    let info = fabric::getinfo(&hints)?.remove(0);
    let fab = Fabric::open(&info)?;
    let dom = fab.domain(&info)?;
    let mk = || -> fabric::Result<_> {
        let cq = dom.cq(CqAttr::default())?;
        let av = dom.av(AvAttr::default())?;
        let ep = dom.endpoint(&info)?;
        ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)?;
        ep.bind_av(&av)?;
        ep.enable()?;
        Ok((ep, cq, av))
    };
    let (a, qa, ava) = mk()?;
    let (b, qb, avb) = mk()?;
    let to_b = ava.insert_one(&b.name()?)?;
    let to_a = avb.insert_one(&a.name()?)?;
    // Slots: 0 B's receive, 1 A's send, 2 A's receive, 3 B's send.
    let mut slots: [Option<Buf>; 4] = std::array::from_fn(|_| Some(Buf::new(size)));
    let start = std::time::Instant::now();
    for _ in 0..iters {
        for (rx, tx, rq, tq, dest, r, s) in [(&b, &a, 0, 1, to_b, &qb, &qa), (&a, &b, 2, 3, to_a, &qa, &qb)] {
            let buf = slots[rq].take().expect("receive buffer back");
            rx.trecv(buf, FiAddr::UNSPEC, 7, 0, rq as u64).map_err(|e| e.error)?;
            let mut buf = slots[tq].take().expect("send buffer back");
            loop {
                match tx.tsend(buf, dest, 7, tq as u64) {
                    Ok(()) => break,
                    Err(e) if e.error == Error::Again => {
                        let OpBuffers::One(back) = e.buffers else { unreachable!("one buffer posted") };
                        buf = back;
                        drive(&qa, 0, &qb, 0, &mut slots);
                    }
                    Err(e) => return Err(e.error),
                }
            }
            drive(s, 1, r, 1, &mut slots);
        }
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / iters as f64;
    println!("{prov} size {size}: {us:.3} usec per round trip ({iters} iterations)");
    Ok(())
}
