//! The smallest complete fabric program: one RDM endpoint on loopback sends a
//! message to itself and receives it.

#![forbid(unsafe_code)]

use fabric::{AvAttr, BindFlags, Buf, CqAttr, EpType, Fabric, FiAddr, Hints};

fn main() -> fabric::Result<()> {
    let info = fabric::getinfo(&Hints::new().ep_type(EpType::Rdm).node("127.0.0.1").source(true))?.remove(0);
    let fabric = Fabric::open(&info)?;
    let domain = fabric.domain(&info)?;
    let cq = domain.cq(CqAttr::default())?;
    let av = domain.av(AvAttr::default())?;
    let ep = domain.endpoint(&info)?;
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)?;
    ep.bind_av(&av)?;
    ep.enable()?;

    let me = av.insert_one(&ep.name()?)?; // a peer's address, here our own
    ep.recv(Buf::new(4096), FiAddr::UNSPEC, 1)?; // the Buf is the library's until its completion
    ep.send(Buf::from(&b"hello"[..]), me, 3)?;
    let mut seen = 0;
    while seen < 2 {
        let c = cq.sread(None)?; // ...and comes back with it
        if c.context == 1 {
            assert_eq!(c.bytes(), b"hello");
            println!("received {:?} from {}", String::from_utf8_lossy(c.bytes()), c.src);
        }
        seen += 1;
    }
    Ok(())
}
