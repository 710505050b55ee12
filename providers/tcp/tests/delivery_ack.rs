//! A raw peer against the sender side of `FI_DELIVERY_COMPLETE`: such a send is
//! announced (`Rts` with `HdrFlags::DC`) whatever its size, its data follows the
//! receiver's `Cts`, and it completes on the receiver's `Ack`. An `Ack` the
//! endpoint is not waiting for (an id never announced, one not yet cleared, a
//! second one) is the peer's protocol error: its connection is closed, and what
//! was in flight with it fails; nothing panics or completes twice.

mod common;

use common::*;
use fabric_core::prov::{IoVec, Op, Provider};
use fabric_core::{Address, Caps, CqEntry, Error, FiAddr, OpFlags};
use fabric_util::wire::{HdrFlags, Header, OpCode, HDR_LEN};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn read_frame(s: &mut TcpStream) -> (Header, Vec<u8>) {
    let mut hb = [0u8; HDR_LEN];
    s.read_exact(&mut hb).expect("a frame from the endpoint");
    let h = Header::decode(&hb, u64::MAX).expect("a valid frame from the endpoint");
    let mut payload = vec![0u8; h.payload_len() as usize];
    s.read_exact(&mut payload).expect("the frame's payload");
    (h, payload)
}

/// A raw connection that said hello as `name`.
fn connect(target: SocketAddr, name: &str, epoch: u64) -> TcpStream {
    let mut sock = TcpStream::connect(target).expect("connect to the endpoint");
    sock.set_nodelay(true).unwrap();
    sock.set_read_timeout(Some(STEP_LIMIT)).unwrap();
    let h = Header { len: name.len() as u64, tag: name.len() as u64, id: epoch, ..Header::new(OpCode::Hello) };
    sock.write_all(&h.encode()).unwrap();
    sock.write_all(name.as_bytes()).unwrap();
    let (ack, _) = read_frame(&mut sock);
    assert_eq!(ack.op, OpCode::HelloAck, "{ack:?}");
    sock
}

/// Wait until the endpoint closes the connection; nothing may come before.
fn expect_closed(sock: &mut TcpStream, what: &str) {
    let mut b = [0u8; 64];
    match sock.read(&mut b) {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Ok(n) => panic!("{what}: the endpoint sent {n} bytes instead of closing"),
        Err(e) => panic!("{what}: the connection stayed open ({e})"),
    }
}

fn ack(id: u64) -> [u8; HDR_LEN] {
    Header { id, ..Header::new(OpCode::Ack) }.encode()
}

/// The announcement of a delivery-complete send of 64 bytes.
fn expect_dc_rts(sock: &mut TcpStream) -> u64 {
    let (h, _) = read_frame(sock);
    assert_eq!((h.op, h.len), (OpCode::Rts, 64), "{h:?}");
    assert!(h.flags.has(HdrFlags::DC), "a delivery-complete send is announced with DC: {h:?}");
    h.id
}

#[test]
fn acknowledgements_the_sender_did_not_ask_for_close_the_connection() {
    let p: Arc<dyn Provider> = fabric_tcp::provider();
    let (dom, info) = open_rdm_domain(&p);
    let t = rdm_endpoint(&dom, &info);
    let target = t.ep.getname().unwrap().sockaddr().unwrap();
    // The raw peer's name: a port held but never accepted on.
    let hold = TcpListener::bind("127.0.0.1:0").unwrap();
    let name = hold.local_addr().unwrap().to_string();
    let to_peer = t.av.insert(&[Address::Sockaddr(name.parse().unwrap())]).unwrap()[0];

    // The raw peer's side, step by step; `go` says when it is connected and
    // waits for a send, `done` when the script is over.
    let (go_tx, go_rx) = mpsc::channel::<u32>();
    let script = std::thread::spawn(move || {
        // An acknowledgement of nothing.
        let mut s = connect(target, &name, 1);
        s.write_all(&ack(77)).unwrap();
        expect_closed(&mut s, "an ack for an id never announced");
        // An acknowledgement before the data was cleared.
        let mut s = connect(target, &name, 2);
        go_tx.send(1).unwrap();
        let id = expect_dc_rts(&mut s);
        s.write_all(&ack(id)).unwrap();
        expect_closed(&mut s, "an ack before the clear to send");
        // The protocol as it goes, then a second acknowledgement.
        let mut s = connect(target, &name, 3);
        go_tx.send(2).unwrap();
        let id = expect_dc_rts(&mut s);
        s.write_all(&Header { id, ..Header::new(OpCode::Cts) }.encode()).unwrap();
        let (d, payload) = read_frame(&mut s);
        assert_eq!((d.op, d.id, d.flags.has(HdrFlags::DC)), (OpCode::Data, id, false), "{d:?}");
        assert_eq!(payload, [7u8; 64]);
        s.write_all(&ack(id)).unwrap();
        s.write_all(&ack(id)).unwrap();
        expect_closed(&mut s, "a second ack");
    });

    let mut data = [7u8; 64];
    let iov = [IoVec { base: data.as_mut_ptr(), len: data.len() }];
    let mut got: Vec<(u64, Option<Error>)> = Vec::new();
    let start = Instant::now();
    let mut out = [CqEntry::new(0, Caps::empty())];
    while !(script.is_finished() && got.len() == 2) {
        if let Ok(ctx) = go_rx.try_recv() {
            let op = Op { iov: &iov, addr: to_peer, context: ctx.into(), user_context: 0, data: 0, tag: 0, ignore: 0 };
            // SAFETY: `data` outlives the completion waited for below.
            unsafe { t.ep.post_send(&op, OpFlags::COMPLETION | OpFlags::DELIVERY_COMPLETE) }.unwrap();
        }
        match t.cq.sread(&mut out, Some(Duration::from_millis(5))) {
            Ok(1) => got.push((out[0].op_context, None)),
            Err(Error::Avail) => {
                let e = t.cq.readerr().unwrap();
                got.push((e.entry.op_context, Some(e.err)));
            }
            _ => {}
        }
        assert!(start.elapsed() < 3 * STEP_LIMIT, "watchdog: completions so far {got:?}");
    }
    script.join().expect("the raw peer's script");
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].0, 1);
    assert!(got[0].1.is_some(), "the send whose connection broke fails: {got:?}");
    assert_eq!(got[1], (2, None), "the acknowledged send completes, once");
    assert_ne!(to_peer, FiAddr::NOTAVAIL);
    drop(hold);
}
