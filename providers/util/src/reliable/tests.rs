//! The channel driven against itself in memory, with loss, reordering,
//! duplication and corruption.

use super::header::{crc32c_sw, crc32c_update};
use super::*;

fn pair(cfg: Config) -> (Channel, Channel, Nanos) {
    let t = Nanos::ZERO;
    (Channel::new(cfg.clone(), 1, t), Channel::new(cfg, 2, t), t)
}

fn msg_bytes(id: u64, off: usize, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (id as usize * 31 + off + i) as u8;
    }
}

#[test]
fn header_round_trips_and_rejects_damage() {
    let mut d = vec![0u8; HEADER_LEN + 5];
    d[HEADER_LEN..].copy_from_slice(b"hello");
    let h = Header {
        kind: Kind::Data,
        flags: FLAG_FIRST | FLAG_SUMMED,
        epoch: 7,
        len: 5,
        seq: 9,
        ack: 3,
        sack: 5,
        wnd: 99,
    };
    h.encode(&mut d);
    let (g, p) = Header::decode(&d).unwrap();
    assert_eq!(g, h);
    assert_eq!(p, b"hello");
    for i in 0..d.len() {
        for bit in 0..8 {
            let mut e = d.clone();
            e[i] ^= 1 << bit;
            assert!(Header::decode(&e).is_err(), "flip of byte {i} bit {bit} accepted");
        }
    }
    assert_eq!(Header::decode(&d[..HEADER_LEN - 1]), Err(DecodeError::Short));
    assert_eq!(Header::decode(&d[..HEADER_LEN + 4]), Err(DecodeError::Length));
}

#[test]
fn crc32c_known_value_and_both_implementations_agree() {
    assert_eq!(checksum(&[b"123456789"]), 0xE306_9283);
    assert_eq!(checksum(&[b"1234", b"", b"56789"]), 0xE306_9283);
    assert_eq!(!crc32c_sw(!0, b"123456789"), 0xE306_9283);
    let data: Vec<u8> = (0..300u32).map(|i| (i * 131 + 7) as u8).collect();
    for start in 0..9 {
        for end in start..data.len() {
            let d = &data[start..end];
            assert_eq!(crc32c_update(!0, d), crc32c_sw(!0, d), "{start}..{end}");
            let mid = (end - start) / 3;
            assert_eq!(checksum(&[&d[..mid], &d[mid..]]), !crc32c_sw(!0, d));
        }
    }
}

/// Every one- and two-bit error in a datagram is caught: CRC-32C has Hamming
/// distance 4 at datagram sizes, so every 1-, 2- and 3-bit error is. (The
/// former Fletcher-style sum let about one 2-bit error in a thousand through.)
#[test]
fn every_two_bit_error_is_caught() {
    for (kind, payload) in [(Kind::Ack, &b""[..]), (Kind::Data, &b"hello, world: 21 byte"[..])] {
        let mut d = vec![0u8; HEADER_LEN + payload.len()];
        d[HEADER_LEN..].copy_from_slice(payload);
        let flags = if kind == Kind::Data { FLAG_FIRST | FLAG_SUMMED } else { FLAG_SUMMED };
        let seq = if kind == Kind::Data { 9 } else { 0 };
        let h = Header { kind, flags, epoch: 7, len: payload.len() as u32, seq, ack: 3, sack: 5, wnd: 99 };
        h.encode(&mut d);
        assert_eq!(Header::decode(&d).map(|(h, _)| h), Ok(h), "{kind:?} before the flips");
        let bits = d.len() * 8;
        for i in 0..bits {
            for j in i + 1..bits {
                let mut e = d.clone();
                e[i / 8] ^= 1 << (i % 8);
                e[j / 8] ^= 1 << (j % 8);
                assert!(Header::decode(&e).is_err(), "{kind:?}: flips of bits {i} and {j} accepted");
            }
        }
    }
}

/// Only data carry a segment number: an acknowledgement or probe with one
/// (checksum right) is malformed, not read as segment 0.
#[test]
fn seq_on_ack_or_probe_is_refused() {
    for kind in [Kind::Ack, Kind::Probe] {
        let mut d = vec![0u8; HEADER_LEN];
        let h = Header { kind, flags: FLAG_SUMMED, epoch: 1, len: 0, seq: 5, ack: 2, sack: 0, wnd: 8 };
        h.encode(&mut d);
        assert_eq!(Header::decode(&d).map(|(h, _)| h), Err(DecodeError::Seq), "{kind:?}");
        let h = Header { seq: 0, ..h };
        h.encode(&mut d);
        assert_eq!(Header::decode(&d).map(|(h, _)| h), Ok(h), "{kind:?} without one");
    }
}

#[test]
fn lossless_exchange_delivers_in_order_and_acks() {
    let cfg = Config { mss: 100, ..Config::default() };
    let (mut a, mut b, t) = pair(cfg);
    for id in 0..10u64 {
        a.send(t, id, id as usize * 70).unwrap();
    }
    let mut buf = vec![0u8; HEADER_LEN + 100];
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut cur = Vec::new();
    while let Some(n) = a.poll_transmit(t, &mut buf, &mut |id, off, out| msg_bytes(id, off, out)) {
        let (h, p) = Header::decode(&buf[..n]).unwrap();
        b.handle(t, &h, p, &mut |s| {
            if s.first {
                cur.clear();
            }
            cur.extend_from_slice(s.bytes);
            if s.last {
                got.push(std::mem::take(&mut cur));
            }
            true
        })
        .unwrap();
    }
    assert_eq!(got.len(), 10);
    for (id, m) in got.iter().enumerate() {
        let mut want = vec![0u8; id * 70];
        msg_bytes(id as u64, 0, &mut want);
        assert_eq!(m, &want);
    }
    // B owes an acknowledgement; once A has it, every message is acked.
    let n = b.poll_transmit(t, &mut buf, &mut |_, _, _| {}).expect("ack due");
    let (h, p) = Header::decode(&buf[..n]).unwrap();
    a.handle(t, &h, p, &mut |_| true).unwrap();
    let ev: Vec<Event> = std::iter::from_fn(|| a.poll_event()).collect();
    assert_eq!(ev, (0..10).map(Event::Acked).collect::<Vec<_>>());
    assert!(a.is_idle());
}

#[test]
fn an_awaited_message_is_acknowledged_at_once() {
    let (mut a, mut b, t) = pair(Config { mss: 100, ..Config::default() });
    let mut buf = vec![0u8; HEADER_LEN + 100];
    // A plain message: the receiver's acknowledgement waits for its delay.
    a.send(t, 1, 150).unwrap();
    while let Some(n) = a.poll_transmit(t, &mut buf, &mut |_, _, _| {}) {
        let (h, p) = Header::decode(&buf[..n]).unwrap();
        assert_eq!(h.flags & FLAG_ACK_NOW, 0);
        b.handle(t, &h, p, &mut |_| true).unwrap();
    }
    assert!(b.poll_transmit(t, &mut buf, &mut |_, _, _| {}).is_none(), "no acknowledgement before the delay");
    let late = t + b.config().ack_delay;
    b.handle_timeout(late);
    assert!(b.poll_transmit(late, &mut buf, &mut |_, _, _| {}).is_some());
    // An awaited one: its last segment (only) asks, and the receiver answers now.
    a.send_awaited(t, 2, 150).unwrap();
    while let Some(n) = a.poll_transmit(late, &mut buf, &mut |_, _, _| {}) {
        let (h, p) = Header::decode(&buf[..n]).unwrap();
        assert_eq!(h.flags & FLAG_ACK_NOW != 0, h.flags & FLAG_LAST != 0);
        b.handle(late, &h, p, &mut |_| true).unwrap();
    }
    let n = b.poll_transmit(late, &mut buf, &mut |_, _, _| {}).expect("acknowledged at once");
    let (h, p) = Header::decode(&buf[..n]).unwrap();
    a.handle(late, &h, p, &mut |_| true).unwrap();
    let ev: Vec<Event> = std::iter::from_fn(|| a.poll_event()).collect();
    assert_eq!(ev, vec![Event::Acked(1), Event::Acked(2)]);
}

#[test]
fn silent_peer_is_unreachable_and_fails_what_was_unacked() {
    let cfg = Config { unreachable_after: Duration::from_secs(2), ..Config::default() };
    let (mut a, _b, t) = pair(cfg);
    a.send(t, 5, 10).unwrap();
    a.send(t, 6, 10).unwrap();
    let mut buf = vec![0u8; 2048];
    while a.poll_transmit(t, &mut buf, &mut |_, _, _| {}).is_some() {}
    let mut now = t;
    let mut steps = 0;
    while !a.is_failed() {
        now = a.poll_timeout().expect("a timer while waiting");
        a.handle_timeout(now);
        while a.poll_transmit(now, &mut buf, &mut |_, _, _| {}).is_some() {}
        steps += 1;
        assert!(steps < 1000);
    }
    assert!(now.duration_since(t) >= Duration::from_secs(2));
    assert!(now.duration_since(t) < Duration::from_secs(3));
    let ev: Vec<Event> = std::iter::from_fn(|| a.poll_event()).collect();
    assert_eq!(ev, vec![Event::Failed(5), Event::Failed(6)]);
    assert!(a.stats().retransmits > 0);
}
