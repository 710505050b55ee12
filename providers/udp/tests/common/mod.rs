//! Set-up shared by the udp provider's tests (each test binary uses part of it):
//! what every provider's tests share, from `providers/util/tests/shared`, and
//! [`Hostile`], a peer speaking the reliability protocol over a raw `UdpSocket`.

#![allow(dead_code)]

#[path = "../../../util/tests/shared/endpoint.rs"]
mod endpoint;

pub use endpoint::*;

use fabric_core::prov::DomainOps;
use fabric_core::Info;
use fabric_util::reliable::{self, Channel, Event, Nanos, HEADER_LEN};
use fabric_util::wire::{Header, HDR_LEN};
use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A domain of the udp provider for RDM endpoints on 127.0.0.1, and its `Info`.
pub fn open_domain() -> (Arc<dyn DomainOps>, Info) {
    open_rdm_domain(&fabric_udp::provider())
}

/// A hostile peer: a raw socket and its own reliability channel to the endpoint,
/// with the `wire` frames on top.
pub struct Hostile {
    pub sock: UdpSocket,
    pub target: SocketAddr,
    pub chan: Channel,
    /// Frames given to the channel, until acknowledged.
    pub sent: HashMap<u64, Vec<u8>>,
    next_msg: u64,
    /// The frame arriving, between its first and last segments.
    partial: Vec<u8>,
    /// Frames arrived and not yet looked at.
    frames: Vec<(Header, Vec<u8>)>,
    rbuf: Vec<u8>,
    sbuf: Vec<u8>,
}

impl Hostile {
    /// A new peer (its own socket, a fresh channel) speaking to `target`.
    pub fn new(target: SocketAddr) -> Hostile {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(2))).unwrap();
        let cfg = reliable::Config {
            mss: 1400,
            window: 1024,
            ack_every: 1,
            payload_checksum: false,
            ..reliable::Config::default()
        };
        let chan = Channel::new(cfg, 0x0BAD_BEEF, Nanos::now());
        Hostile {
            sock,
            target,
            chan,
            sent: HashMap::new(),
            next_msg: 1,
            partial: Vec::new(),
            frames: Vec::new(),
            rbuf: vec![0u8; 65536],
            sbuf: vec![0u8; 1400 + HEADER_LEN],
        }
    }

    /// Give a frame (header and payload) to the channel.
    pub fn send(&mut self, frame: Vec<u8>) {
        let id = self.next_msg;
        self.next_msg += 1;
        self.chan.send(Nanos::now(), id, frame.len()).expect("the channel is open");
        self.sent.insert(id, frame);
    }

    /// Send what the channel has due out (first transmissions and
    /// retransmissions), and nothing else: no timeouts, no receiving.
    pub fn transmit(&mut self, now: Nanos) {
        let sent = &self.sent;
        let mut fill = |id: u64, off: usize, buf: &mut [u8]| match sent.get(&id) {
            Some(f) => buf.copy_from_slice(&f[off..off + buf.len()]),
            None => buf.fill(0),
        };
        while let Some(n) = self.chan.poll_transmit(now, &mut self.sbuf, &mut fill) {
            self.sock.send_to(&self.sbuf[..n], self.target).expect("send a datagram");
        }
    }

    /// Move datagrams both ways once: what the channel has due out, what the
    /// socket has in.
    pub fn pump_once(&mut self) {
        let now = Nanos::now();
        if self.chan.poll_timeout().is_some_and(|t| t <= now) {
            self.chan.handle_timeout(now);
        }
        self.transmit(now);
        while let Some(ev) = self.chan.poll_event() {
            let (Event::Acked(id) | Event::Failed(id)) = ev;
            self.sent.remove(&id);
        }
        let n = match self.sock.recv_from(&mut self.rbuf) {
            Ok((n, from)) if from == self.target => n,
            Ok(_) => return,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => return,
            Err(e) => panic!("receive: {e}"),
        };
        let Ok((h, payload)) = reliable::Header::decode_with(&self.rbuf[..n], false) else { return };
        let Hostile { chan, partial, frames, .. } = self;
        let _ = chan.handle(Nanos::now(), &h, payload, &mut |seg| {
            if seg.first {
                partial.clear();
            }
            partial.extend_from_slice(seg.bytes);
            if seg.last {
                let mut hb = [0u8; HDR_LEN];
                hb.copy_from_slice(&partial[..HDR_LEN]);
                let h = Header::decode(&hb, u64::MAX).expect("the endpoint sends well-formed frames");
                frames.push((h, partial[HDR_LEN..].to_vec()));
            }
            true
        });
    }

    /// Pump until a frame arrives that `pick` takes; fail after [`STEP_LIMIT`] or
    /// if the endpoint's progress dies.
    pub fn wait_for(
        &mut self,
        what: &str,
        driver: &Driver,
        mut pick: impl FnMut(&Header) -> bool,
    ) -> (Header, Vec<u8>) {
        let start = Instant::now();
        loop {
            if let Some(i) = self.frames.iter().position(|(h, _)| pick(h)) {
                return self.frames.remove(i);
            }
            assert!(driver.alive(), "{what}: the endpoint's progress died");
            assert!(start.elapsed() < STEP_LIMIT, "{what}: nothing came");
            self.pump_once();
        }
    }
}
