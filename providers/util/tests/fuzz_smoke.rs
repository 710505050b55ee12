//! The fuzz targets' bodies, and a stable-toolchain smoke run of them.
//!
//! Each `pub fn` here taking `&[u8]` is the whole body of one cargo-fuzz target
//! in `providers/util/fuzz/fuzz_targets/` (they include this file), so the code a
//! fuzzer runs on nightly is the code these tests run on stable: a few hundred
//! thousand seeded random and mutated inputs (bit flips, truncation, extension,
//! splicing, random lengths, mutations of valid datagrams and headers) through
//! every decoder of datagram bytes and through a [`Channel`], and fixed corpora of
//! valid and near-valid inputs plus seeded mutations through the decoders of
//! tcp's stream (`tcp_frames`), of RMA and atomic requests as the target applies
//! them (`rma_atomic`) and of verbs' private data and frames (`verbs_frames`).
//! Each body asserts that nothing panics, that an accepted datagram, header or
//! record re-encodes to the same bytes, and the invariants of what it drives.

use std::time::Duration;

use fabric_core::{AtomicKind, AtomicOp, Datatype, Error, MrAccess, MrMode};
use fabric_testkit::Rng;
use fabric_util::mr::MrRegistry;
use fabric_util::reliable::{
    Channel, Config, Event, Header, Kind, Nanos, FLAG_FIRST, FLAG_LAST, FLAG_SUMMED, HEADER_LEN,
};
use fabric_util::verbs_wire::{self, RtsPiece};
use fabric_util::wire::{self, AtomicHdr, HdrFlags, OpCode, RmaDesc};

/// Fuzz body of `reliable_header`: [`Header::decode`] on arbitrary bytes.
pub fn reliable_header(data: &[u8]) {
    check_reliable_datagram(data);
}

/// Decode `data`; if accepted, check the header against the bytes and that it
/// re-encodes to them. Returns the decoded header.
fn check_reliable_datagram(data: &[u8]) -> Option<(Header, &[u8])> {
    let (h, payload) = Header::decode(data).ok()?;
    assert_eq!(data.len(), HEADER_LEN + payload.len());
    assert_eq!(h.len as usize, payload.len());
    assert_eq!(&data[HEADER_LEN..], payload);
    if h.kind != Kind::Data {
        assert!(payload.is_empty(), "a {:?} with a payload", h.kind);
        assert_eq!(h.flags & !FLAG_SUMMED, 0, "a {:?} with data flags", h.kind);
        assert_eq!(h.seq, 0);
    }
    let mut again = vec![0u8; data.len()];
    again[HEADER_LEN..].copy_from_slice(payload);
    h.encode(&mut again);
    // The decoder ignores (and reports as 0) the sequence field of an ack or
    // probe, whose checksum covers whatever bytes the peer put there, so only
    // then may the re-encoding differ from the input.
    if h.kind == Kind::Data || data[16..24] == [0; 8] {
        assert_eq!(again, data, "{h:?} re-encodes differently");
    }
    assert_eq!(Header::decode(&again), Ok((h, payload)));
    // CRC-32C catches every one-bit error in what it covers: the header, and
    // the payload with FLAG_SUMMED. (Except, by chance only, one that clears
    // FLAG_SUMMED of a datagram with a payload: the check then covers other
    // bytes, and matches with probability 2^-32.)
    let covered = if h.flags & FLAG_SUMMED != 0 { data.len() } else { HEADER_LEN };
    let bit = data.iter().fold(0usize, |a, &b| a.wrapping_mul(31).wrapping_add(b as usize)) % (covered * 8);
    if bit != 3 * 8 + 2 || payload.is_empty() {
        let mut e = data.to_vec();
        e[bit / 8] ^= 1 << (bit % 8);
        assert!(Header::decode(&e).is_err(), "one-bit error at bit {bit} accepted");
    }
    Some((h, payload))
}

/// Fuzz body of `wire_header`: [`wire::Header::decode`] on the first
/// [`wire::HDR_LEN`] bytes (the next eight, if any, are the receiver's length
/// limit), and the payload descriptors on the rest.
pub fn wire_header(data: &[u8]) {
    let Some((head, rest)) = data.split_first_chunk::<{ wire::HDR_LEN }>() else {
        return;
    };
    let max_len = rest.first_chunk::<8>().map_or(1 << 20, |b| u64::from_le_bytes(*b));
    if let Ok(h) = wire::Header::decode(head, max_len) {
        assert_eq!(&h.encode(), head, "{h:?} re-encodes differently");
        assert_eq!(h.flags.0 & !HdrFlags::ALL, 0);
        assert!(
            !h.flags.has(HdrFlags::DC) || h.op == OpCode::Rts,
            "the delivery-complete flag only on a request to send"
        );
        let len = h.len;
        match h.op {
            OpCode::Cts | OpCode::Shutdown | OpCode::Nack | OpCode::Ack => assert_eq!(len, 0),
            OpCode::Hello => assert!(len <= wire::CONTROL_MAX && h.tag <= len && h.data <= len - h.tag),
            OpCode::HelloAck | OpCode::Reject => assert!(len <= wire::CONTROL_MAX),
            OpCode::Msg | OpCode::Rts | OpCode::Data => assert!(len <= max_len),
            OpCode::WriteReq => assert!((RmaDesc::LEN as u64..=(RmaDesc::LEN + wire::RMA_CHUNK) as u64).contains(&len)),
            OpCode::ReadReq | OpCode::RmaResp => assert!(len <= wire::RMA_CHUNK as u64),
            OpCode::AtomicReq => assert!(((RmaDesc::LEN + AtomicHdr::LEN) as u64
                ..=(RmaDesc::LEN + AtomicHdr::LEN + 2 * wire::ATOMIC_MAX) as u64)
                .contains(&len)),
        }
        assert!(h.payload_len() <= len);
    }
    if let Some(d) = RmaDesc::decode(rest) {
        assert_eq!(&d.encode()[..], &rest[..RmaDesc::LEN]);
    }
    if let Some(a) = AtomicHdr::decode(rest) {
        let e = a.encode();
        assert_eq!((&e[..3], &e[4..]), (&rest[..3], &rest[4..AtomicHdr::LEN]));
    }
}

/// Reads the fuzz input as a stream of small numbers; zeros once it runs out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from(self.u16()) | u32::from(self.u16()) << 16
    }
    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (b, rest) = self.0.split_at(n);
        self.0 = rest;
        b
    }
}

const CH_MSS: usize = 64;
const CH_WINDOW: u32 = 16;
const PEER_EPOCH: u32 = 0x00C0_FFEE;

/// Fuzz body of `reliable_channel`: a [`Channel`] driven by the input, a stream of
/// operations: queue a message, let time pass, drain its datagrams, feed it a
/// datagram from the input's raw bytes (through [`Header::decode`]) or one built
/// from the input's fields with a valid checksum (so the fuzzer gets past the
/// checksum to the protocol), and retry held segments. After every operation the
/// channel's invariants are checked: at most one event per message, and only for
/// messages given; `Acked` in order and only for messages whose last segment was
/// sent; at most `window` segments held; its own datagrams decode and re-encode;
/// a failed channel stays closed.
/// What a run of [`reliable_channel`] got through to (for the smoke tests).
#[derive(Debug, Default, Clone, Copy)]
pub struct ChannelRun {
    /// Datagrams the channel accepted.
    pub accepted: usize,
    /// Segments it handed over.
    pub delivered: usize,
    /// Messages acknowledged.
    pub acked: usize,
    /// The channel failed.
    pub failed: bool,
}

/// Fuzz body of `reliable_channel` (see [`reliable_channel_run`]).
pub fn reliable_channel(data: &[u8]) {
    reliable_channel_run(data);
}

/// The body of [`reliable_channel`], returning what it got through to.
pub fn reliable_channel_run(data: &[u8]) -> ChannelRun {
    let mut run = ChannelRun::default();
    let t0 = Nanos::ZERO;
    let cfg = Config { mss: CH_MSS, window: CH_WINDOW, ack_every: 4, ..Config::default() };
    let mut ch = Channel::new(cfg.clone(), 0x5EED, t0);
    let mut now = t0;
    let mut input = Input(data);
    let mut given: Vec<usize> = Vec::new();
    // Per message: 0 no event yet, 1 acked, 2 failed.
    let mut events: Vec<u8> = Vec::new();
    let mut next_acked = 0u64;
    // Segments we sent with FLAG_LAST (distinct), i.e. messages fully sent.
    let mut lasts = std::collections::BTreeSet::new();
    // The next new segment number, and the window the peer granted (the
    // initial one, or the largest `wnd` of a datagram the channel accepted).
    let mut next_new_seq = 0u64;
    let mut granted = u64::from(CH_WINDOW);
    let mut out = vec![0u8; HEADER_LEN + CH_MSS];
    let mut dgram = Vec::new();
    let mut steps = 0;
    while !input.0.is_empty() && steps < 4096 {
        steps += 1;
        let refuse = input.u8();
        let delivered = &mut run.delivered;
        let mut deliver = |s: fabric_util::reliable::Segment<'_>| {
            let _ = (s.first, s.last, s.bytes.len());
            *delivered += usize::from(refuse & 1 == 0);
            refuse & 1 == 0
        };
        match input.u8() % 7 {
            0 => {
                let len = usize::from(input.u16() % 700);
                let id = given.len() as u64;
                match ch.send(now, id, len) {
                    Ok(()) => {
                        given.push(len);
                        events.push(0);
                    }
                    Err(_) => assert!(ch.is_failed()),
                }
            }
            1 => {
                now += Duration::from_micros(u64::from(input.u16()) * 16);
                ch.handle_timeout(now);
            }
            2 => {
                // Jump to the channel's next timer.
                if let Some(t) = ch.poll_timeout() {
                    now = now.max(t);
                    ch.handle_timeout(now);
                }
            }
            3 => {
                for _ in 0..64 {
                    let Some(n) = ch.poll_transmit(now, &mut out, &mut |id, off, buf| {
                        buf.fill((id as usize).wrapping_add(off) as u8);
                    }) else {
                        break;
                    };
                    let (h, p) = check_reliable_datagram(&out[..n]).expect("own datagram decodes");
                    assert_eq!(h.epoch, 0x5EED);
                    assert!(p.len() <= CH_MSS);
                    if h.kind == Kind::Data {
                        // Numbered without gaps, and only within the window.
                        assert!(h.seq <= next_new_seq, "segment {} skips {next_new_seq}", h.seq);
                        next_new_seq = next_new_seq.max(h.seq + 1);
                        assert!(h.seq < granted, "segment {} beyond the window {granted}", h.seq);
                        if h.flags & FLAG_LAST != 0 {
                            lasts.insert(h.seq);
                        }
                    }
                }
            }
            4 => {
                let n = usize::from(input.u16() % 256);
                dgram.clear();
                dgram.extend_from_slice(input.bytes(n));
                if let Some((h, p)) = check_reliable_datagram(&dgram) {
                    if ch.handle(now, &h, p, &mut deliver).is_ok() {
                        run.accepted += 1;
                        granted = granted.max(h.wnd);
                    }
                }
            }
            5 => {
                let kind = match input.u8() % 3 {
                    0 => Kind::Data,
                    1 => Kind::Ack,
                    _ => Kind::Probe,
                };
                let mut flags = input.u8() & (FLAG_FIRST | FLAG_LAST | FLAG_SUMMED);
                if kind != Kind::Data {
                    flags &= FLAG_SUMMED;
                }
                let epoch = if input.u8() < 240 { PEER_EPOCH } else { input.u32() };
                // Mostly plausible numbers, so acknowledgements and segments land
                // in the channel's ranges; sometimes anything.
                let wide = input.u8() >= 224;
                let num = |input: &mut Input<'_>| if wide { input.u64() } else { u64::from(input.u8() % 64) };
                let seq = if kind == Kind::Data { num(&mut input) } else { 0 };
                let ack = num(&mut input);
                let sack = input.u64();
                let wnd = num(&mut input);
                let len = if kind == Kind::Data { usize::from(input.u8()) % (CH_MSS + 1) } else { 0 };
                dgram.clear();
                dgram.resize(HEADER_LEN, 0);
                dgram.extend_from_slice(input.bytes(len));
                let len = dgram.len() - HEADER_LEN;
                Header { kind, flags, epoch, len: len as u32, seq, ack, sack, wnd }.encode(&mut dgram);
                let (h, p) = check_reliable_datagram(&dgram).expect("a well-formed datagram decodes");
                let before = (ch.stats(), ch.peer_epoch(), ch.held(), ch.unacked());
                match ch.handle(now, &h, p, &mut deliver) {
                    Ok(()) => {
                        run.accepted += 1;
                        granted = granted.max(h.wnd);
                    }
                    // A refused datagram changes nothing.
                    Err(v) => assert_eq!((ch.stats(), ch.peer_epoch(), ch.held(), ch.unacked()), before, "{v:?}"),
                }
            }
            _ => ch.poll_deliver(&mut deliver),
        }
        // Invariants.
        assert!(ch.held() <= CH_WINDOW as usize);
        while let Some(e) = ch.poll_event() {
            let (id, what) = match e {
                Event::Acked(id) => (id, 1),
                Event::Failed(id) => (id, 2),
            };
            let k = usize::try_from(id).expect("id fits");
            assert!(k < given.len(), "event for message {id} never given");
            assert_eq!(events[k], 0, "second event for message {id}");
            events[k] = what;
            if what == 1 {
                assert_eq!(id, next_acked, "acks out of order");
                next_acked += 1;
                run.acked += 1;
                assert!(lasts.len() > k, "message {id} acked before its last segment was sent");
            }
        }
        let open = events.iter().filter(|&&e| e == 0).count();
        assert_eq!(ch.unacked(), open);
        if ch.is_failed() {
            assert_eq!(open, 0, "a failed channel owes no event");
            assert_eq!(ch.poll_timeout(), None);
            assert!(!ch.wants_transmit());
            assert_eq!(ch.poll_transmit(now, &mut out, &mut |_, _, _| {}), None);
        }
        if ch.is_idle() {
            assert_eq!(open, 0);
        }
    }
    run.failed = ch.is_failed();
    run
}

/// A random well-formed datagram of the reliable protocol.
fn valid_datagram(rng: &mut Rng) -> Vec<u8> {
    let kind = [Kind::Data, Kind::Ack, Kind::Probe][rng.index(3)];
    let len = if kind == Kind::Data { rng.index(200) } else { 0 };
    let mut flags = if rng.index(4) == 0 { 0 } else { FLAG_SUMMED };
    if kind == Kind::Data {
        flags |= rng.next() as u8 & (FLAG_FIRST | FLAG_LAST);
    }
    let small = |r: &mut Rng| if r.index(8) == 0 { r.next() } else { r.next() % 24 };
    let h = Header {
        kind,
        flags,
        epoch: if rng.index(8) != 0 { PEER_EPOCH } else { rng.next() as u32 },
        len: len as u32,
        seq: if kind == Kind::Data { small(rng) } else { 0 },
        ack: small(rng),
        sack: rng.next(),
        wnd: small(rng),
    };
    let mut d = vec![0u8; HEADER_LEN + len];
    rng.fill(&mut d[HEADER_LEN..]);
    h.encode(&mut d);
    d
}

/// Damage `d` the ways a fuzzer would: flip bits, truncate, extend, overwrite a
/// run, splice in part of `other`, or set a byte to an interesting value.
fn mutate(rng: &mut Rng, d: &mut Vec<u8>, other: &[u8]) {
    for _ in 0..=rng.index(3) {
        match rng.index(7) {
            0 if !d.is_empty() => {
                let i = rng.index(d.len());
                d[i] ^= 1 << rng.index(8);
            }
            1 => {
                let n = rng.index(d.len() + 1);
                d.truncate(n);
            }
            2 => {
                for _ in 0..=rng.index(8) {
                    d.push(rng.next() as u8);
                }
            }
            3 if !d.is_empty() => {
                let i = rng.index(d.len());
                let j = (i + 1 + rng.index(8)).min(d.len());
                rng.fill(&mut d[i..j]);
            }
            4 if !other.is_empty() => {
                let cut = rng.index(d.len() + 1);
                let from = rng.index(other.len());
                d.truncate(cut);
                d.extend_from_slice(&other[from..]);
            }
            5 if !d.is_empty() => {
                let i = rng.index(d.len());
                d[i] = [0, 1, 2, 3, 4, 7, 0x7F, 0x80, 0xFB, 0xFC, 0xFF][rng.index(11)];
            }
            _ => {}
        }
    }
}

#[test]
fn reliable_header_smoke() {
    let mut rng = Rng::new(1);
    let mut accepted = 0;
    let mut prev = valid_datagram(&mut rng);
    for i in 0..300_000 {
        let d = match i % 4 {
            // Random bytes of a random length.
            0 => {
                let mut d = vec![0u8; rng.index(HEADER_LEN + 80)];
                rng.fill(&mut d);
                if d.len() > 2 && rng.index(2) == 0 {
                    d[0] = 0xFC;
                    d[1] = 1;
                }
                d
            }
            // A valid datagram, as is (each must be accepted).
            1 => {
                let d = valid_datagram(&mut rng);
                assert!(Header::decode(&d).is_ok());
                d
            }
            // A mutated valid one.
            _ => {
                let mut d = valid_datagram(&mut rng);
                mutate(&mut rng, &mut d, &prev);
                d
            }
        };
        if Header::decode(&d).is_ok() {
            accepted += 1;
        }
        reliable_header(&d);
        prev = d;
    }
    // The valid quarter, and a few mutations that changed nothing checked.
    assert!(accepted >= 75_000, "{accepted}");
}

/// Every opcode of the wire protocol.
const OPS: [OpCode; 14] = [
    OpCode::Hello,
    OpCode::HelloAck,
    OpCode::Reject,
    OpCode::Msg,
    OpCode::Rts,
    OpCode::Cts,
    OpCode::Data,
    OpCode::Shutdown,
    OpCode::Nack,
    OpCode::WriteReq,
    OpCode::ReadReq,
    OpCode::AtomicReq,
    OpCode::RmaResp,
    OpCode::Ack,
];

/// Random flag bits a frame of `op` may carry (the delivery-complete flag only
/// on a request to send).
fn flags_for(op: OpCode, bits: u64) -> HdrFlags {
    let allowed = if op == OpCode::Rts { HdrFlags::ALL } else { HdrFlags::ALL & !HdrFlags::DC };
    HdrFlags(bits as u32 & allowed)
}

#[test]
fn wire_header_smoke() {
    let mut rng = Rng::new(2);
    let mut accepted = 0;
    let mut prev: Vec<u8> = Vec::new();
    for i in 0..300_000 {
        let mut d = if i % 3 == 0 {
            let mut d = vec![0u8; rng.index(wire::HDR_LEN + 40)];
            rng.fill(&mut d);
            d
        } else {
            let small = |r: &mut Rng| if r.index(3) == 0 { r.next() } else { r.next() % 5000 };
            let op = OPS[rng.index(OPS.len())];
            let h = wire::Header {
                op,
                flags: flags_for(op, rng.next()),
                len: small(&mut rng),
                tag: small(&mut rng),
                data: small(&mut rng),
                id: rng.next(),
            };
            let mut d = h.encode().to_vec();
            let mut tail = vec![0u8; rng.index(32)];
            rng.fill(&mut tail);
            d.extend_from_slice(&tail);
            if i % 3 == 2 {
                mutate(&mut rng, &mut d, &prev);
            }
            d
        };
        if d.len() >= wire::HDR_LEN && rng.index(4) == 0 {
            // A generous receive limit, so large messages decode too.
            d.truncate(wire::HDR_LEN);
            d.extend_from_slice(&(1u64 << 40).to_le_bytes());
        }
        if let Some(h) = d.first_chunk::<{ wire::HDR_LEN }>() {
            let max = d[wire::HDR_LEN..].first_chunk::<8>().map_or(1 << 20, |b| u64::from_le_bytes(*b));
            if wire::Header::decode(h, max).is_ok() {
                accepted += 1;
            }
        }
        wire_header(&d);
        prev = d;
    }
    assert!(accepted > 50_000, "{accepted}");
}

/// An operation stream for [`reliable_channel`] that a fuzzer would find in
/// time: mostly plausible operations in the encoding the body reads.
fn channel_ops(rng: &mut Rng) -> Vec<u8> {
    let mut v = Vec::new();
    for _ in 0..rng.index(300) {
        v.push(if rng.index(8) == 0 { 1 } else { 0 }); // refuse?
                                                       // Mostly sends, transmits and datagrams; timer jumps rarely (each may
                                                       // bring the peer's silence nearer to `unreachable_after`).
        let op: u8 = [0, 0, 1, 2, 3, 3, 4, 5, 5, 5, 6][rng.index(11)];
        let op = if op == 2 && rng.index(4) != 0 { 3 } else { op };
        v.push(op);
        match op {
            0 => v.extend_from_slice(&(rng.index(700) as u16).to_le_bytes()),
            1 => {
                let span = if rng.index(10) == 0 { 65536 } else { 200 };
                v.extend_from_slice(&(rng.index(span) as u16).to_le_bytes());
            }
            4 => {
                let mut d = valid_datagram(rng);
                if rng.index(2) == 0 {
                    let other = valid_datagram(rng);
                    mutate(rng, &mut d, &other);
                }
                d.truncate(255);
                v.extend_from_slice(&(d.len() as u16).to_le_bytes());
                v.extend_from_slice(&d);
            }
            5 => {
                // The fields in the order the body reads them; small numbers
                // mostly, so they land in the channel's ranges.
                let kind = rng.index(3) as u8;
                v.push(kind);
                v.push(rng.next() as u8);
                if rng.index(8) == 0 {
                    v.push(255);
                    v.extend_from_slice(&(rng.next() as u32).to_le_bytes());
                } else {
                    v.push(0);
                }
                let wide = rng.index(16) == 0;
                v.push(if wide { 255 } else { 0 });
                let num = |v: &mut Vec<u8>, r: &mut Rng| {
                    if wide {
                        v.extend_from_slice(&r.next().to_le_bytes());
                    } else {
                        v.push(r.index(24) as u8);
                    }
                };
                if kind == 0 {
                    num(&mut v, rng); // seq
                }
                num(&mut v, rng); // ack
                let sack = if rng.index(2) == 0 { 0 } else { rng.next() };
                v.extend_from_slice(&sack.to_le_bytes());
                num(&mut v, rng); // wnd
                if kind == 0 {
                    let len = rng.index(CH_MSS + 1);
                    v.push(len as u8);
                    let mut p = vec![0u8; len];
                    rng.fill(&mut p);
                    v.extend_from_slice(&p);
                }
            }
            _ => {}
        }
    }
    v
}

#[test]
fn reliable_channel_smoke() {
    let mut rng = Rng::new(3);
    let mut total = ChannelRun::default();
    let mut failed = 0;
    for i in 0..6_000 {
        let mut ops = channel_ops(&mut rng);
        if i % 5 == 4 {
            // Mutated streams.
            let other = channel_ops(&mut rng);
            mutate(&mut rng, &mut ops, &other);
        }
        if i % 50 == 49 {
            // Raw noise.
            ops = vec![0u8; rng.index(400)];
            rng.fill(&mut ops);
        }
        let r = reliable_channel_run(&ops);
        total.accepted += r.accepted;
        total.delivered += r.delivered;
        total.acked += r.acked;
        failed += usize::from(r.failed);
    }
    // The runs reached the protocol, not only the decoder.
    eprintln!("{total:?}, {failed} runs failed");
    assert!(total.accepted > 100_000 && total.delivered > 1_000 && total.acked > 5_000 && failed > 10, "{total:?}");
}

/// The body's crafted-datagram operation reaches the protocol: two messages
/// queued and sent, then a crafted acknowledgement of their four segments.
#[test]
fn reliable_channel_body_reaches_acks() {
    // (refuse, op, operands): send 100 bytes, send 100 bytes, transmit.
    let mut ops = vec![0, 0, 100, 0, 0, 0, 100, 0, 0, 3];
    // Crafted: kind 1 (Ack), flags, epoch byte < 240 (the peer's), narrow
    // numbers: ack 4, sack 0 (eight bytes), wnd 200.
    ops.extend_from_slice(&[0, 5, 1, FLAG_SUMMED, 0, 0, 4]);
    ops.extend_from_slice(&[0; 8]);
    ops.push(200);
    let r = reliable_channel_run(&ops);
    assert_eq!((r.accepted, r.acked, r.failed), (1, 2, false));
}

/// Write seed inputs for the cargo-fuzz targets into
/// `providers/util/fuzz/corpus/<target>/` (valid datagrams, headers and operation
/// streams, which a fuzzer would take long to find past the checksum). Run by
/// hand: `cargo test -p fabric-util --test fuzz_smoke -- --ignored write_fuzz_seeds`.
#[test]
#[ignore = "writes files; run by hand before fuzzing"]
fn write_fuzz_seeds() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let mut rng = Rng::new(4);
    for target in ["reliable_header", "reliable_channel", "wire_header", "tcp_frames", "rma_atomic", "verbs_frames"] {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir).expect("create the corpus directory");
        for i in 0..32 {
            let input = match target {
                "reliable_header" => valid_datagram(&mut rng),
                "reliable_channel" => channel_ops(&mut rng),
                "tcp_frames" => {
                    let mut d = vec![i as u8 | 1];
                    d.extend_from_slice(&valid_tcp_frame(&mut rng));
                    d
                }
                "rma_atomic" => {
                    let mut d = vec![8];
                    d.extend_from_slice(&atomic_payload(&mut rng));
                    d
                }
                "verbs_frames" => valid_verbs(&mut rng),
                _ => {
                    let h = wire::Header { len: i * 100, tag: i, ..wire::Header::new(OpCode::Msg) };
                    let mut d = h.encode().to_vec();
                    d.extend_from_slice(&(1u64 << 20).to_le_bytes());
                    d
                }
            };
            std::fs::write(dir.join(format!("seed-{i:02}")), input).expect("write a seed");
        }
    }
}

// ---------------------------------------------------------------- tcp's stream

/// Fuzz body of `tcp_frames`: what the tcp provider decodes from a socket, a
/// stream of frames. The first byte picks the reader: even, a passive endpoint
/// reading a connection request (length limit 0, only a hello expected); odd, an
/// endpoint (no limit of its own: `i64::MAX`). Then frames, each a
/// [`wire::Header`] and its payload, until one is refused or the input ends; each
/// payload goes to the decoder the provider gives it: [`wire::Hello`] and the name
/// in it, the [`RmaDesc`] of a write, the [`RmaDesc`], [`AtomicHdr`] and operands of
/// an atomic (applied as the target does, by [`rma_atomic_request`]).
pub fn tcp_frames(data: &[u8]) {
    tcp_frames_run(data);
}

/// The body of [`tcp_frames`]: how many frames were accepted.
pub fn tcp_frames_run(data: &[u8]) -> usize {
    let Some((&mode, mut rest)) = data.split_first() else { return 0 };
    let max_len = if mode & 1 == 0 { 0 } else { i64::MAX as u64 };
    let mut frames = 0;
    while let Some((head, after)) = rest.split_first_chunk::<{ wire::HDR_LEN }>() {
        let Ok(h) = wire::Header::decode(head, max_len) else { break };
        assert_eq!(&h.encode(), head);
        let n = h.payload_len();
        let Some(payload) = usize::try_from(n).ok().and_then(|n| after.get(..n)) else { break };
        rest = &after[payload.len()..];
        frames += 1;
        match h.op {
            OpCode::Hello => {
                assert!(h.len <= wire::CONTROL_MAX);
                let Ok(hello) = wire::Hello::decode(&h, payload) else {
                    // Refused only when the lengths do not add up exactly.
                    assert_ne!(h.tag + h.data, h.len);
                    continue;
                };
                assert_eq!((hello.name.len() as u64, hello.data.len() as u64), (h.tag, h.data));
                let (h2, p2) = hello.encode(h.id);
                assert_eq!((h2.len, h2.tag, h2.data, h2.id), (h.len, h.tag, h.data, h.id));
                assert_eq!(p2, payload);
                if let Some(a) = hello.name_addr() {
                    assert_eq!(a.to_string().parse(), Ok(a));
                    let ours = a.to_string();
                    let again = wire::Hello { name: ours.as_bytes(), data: hello.data };
                    assert_eq!(again.name_addr(), Some(a));
                }
            }
            OpCode::HelloAck | OpCode::Reject => assert!(payload.len() as u64 <= wire::CONTROL_MAX),
            OpCode::WriteReq => {
                let d = RmaDesc::decode(payload).expect("a write request carries its target");
                assert_eq!(&d.encode()[..], &payload[..RmaDesc::LEN]);
                assert!(payload.len() - RmaDesc::LEN <= wire::RMA_CHUNK);
            }
            OpCode::AtomicReq => {
                let r = rma_atomic_request(mode >> 1, payload);
                assert!(r.is_some(), "an atomic request carries its target and operation");
            }
            OpCode::ReadReq | OpCode::Rts | OpCode::Cts | OpCode::Shutdown | OpCode::Nack | OpCode::Ack => {
                assert!(payload.is_empty())
            }
            OpCode::Msg | OpCode::Data | OpCode::RmaResp => assert_eq!(payload.len() as u64, h.len),
        }
    }
    frames
}

// ---------------------------------------------------------------- RMA and atomics

/// Bytes of the region the RMA and atomic bodies target.
const REGION: usize = 512;
/// Its key.
const REGION_KEY: u64 = 0x5EED_0001;

/// Fuzz body of `rma_atomic`: an atomic request's payload as a target receives it
/// (an [`RmaDesc`], an [`AtomicHdr`], the operands), applied by
/// [`fabric_util::atomic::serve`] to a registry holding one region of `REGION`
/// bytes. The first byte sets the registry's mode and the region's access, and
/// whether the request's key and address are redirected into the region (so the
/// fuzzer reaches the arithmetic). Checks: a malformed request and a refused one
/// change nothing and return nothing; an applied one changes only the bytes it
/// names, exactly as [`fabric_util::atomic::apply_slice`] on a copy does, and
/// returns as many prior values as [`fabric_util::atomic::lens`] says.
pub fn rma_atomic(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    let _ = rma_atomic_request(mode, rest);
}

/// The body of [`rma_atomic`] (and of [`tcp_frames`]'s atomic requests): `None`
/// when `payload` is too short for the descriptors, else what `serve` answered
/// (`Err` malformed, `Ok(Err)` refused, `Ok(Ok)` applied).
pub fn rma_atomic_request(mode: u8, payload: &[u8]) -> Option<Result<Result<(), Error>, &'static str>> {
    let mut desc = RmaDesc::decode(payload)?;
    let ah = AtomicHdr::decode(&payload[RmaDesc::LEN..])?;
    assert_eq!(&desc.encode()[..], &payload[..RmaDesc::LEN]);
    let e = ah.encode();
    assert_eq!((&e[..3], &e[4..]), (&payload[RmaDesc::LEN..RmaDesc::LEN + 3], &payload[RmaDesc::LEN + 4..][..4]));
    let args = &payload[RmaDesc::LEN + AtomicHdr::LEN..];
    let virt = mode & 1 != 0;
    let access = match (mode >> 1) & 3 {
        0 => MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
        1 => MrAccess::REMOTE_READ,
        2 => MrAccess::REMOTE_WRITE,
        _ => MrAccess::empty(),
    };
    let mrs = MrRegistry::new(if virt { MrMode::VIRT_ADDR } else { MrMode::empty() });
    let mut region = vec![0u8; REGION];
    for (i, b) in region.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(37) ^ mode;
    }
    // SAFETY: `region` outlives `mr` (dropped at the end of this function, before
    // `region`), and is only accessed through the registry while it is registered.
    let mr = unsafe { mrs.register(region.as_mut_ptr(), REGION, access, REGION_KEY) }.expect("register");
    let base = region.as_ptr() as u64;
    if mode & 8 != 0 {
        // Into the region (or just past it): what a well-behaved peer names.
        desc.key = REGION_KEY;
        desc.addr = desc.addr % (REGION as u64 + 16) + if virt { base } else { 0 };
    }
    let before = region.clone();
    let serial = std::sync::Mutex::new(());
    let mut result = vec![0xAA; 3];
    let r = fabric_util::atomic::serve(&mrs, &serial, desc, ah, args, &mut result);
    drop(mr);
    match r {
        Ok(Ok(())) => {
            let op = AtomicOp::from_u8(ah.op).expect("applied: a known op");
            let dt = Datatype::from_u8(ah.datatype).expect("applied: a known datatype");
            let kind = [AtomicKind::Plain, AtomicKind::Fetch, AtomicKind::Compare][ah.kind as usize];
            let l = fabric_util::atomic::lens(op, dt, kind, ah.count as usize).expect("applied: valid lengths");
            assert_eq!(result.len(), l.result);
            assert_eq!(desc.key, REGION_KEY);
            let off = (desc.addr - if virt { base } else { 0 }) as usize;
            assert!(off + l.target <= REGION, "applied outside the region");
            assert_eq!(&region[..off], &before[..off]);
            assert_eq!(&region[off + l.target..], &before[off + l.target..]);
            // The same operation on a copy gives the same bytes and prior values.
            let mut copy = before[off..off + l.target].to_vec();
            let mut want = vec![0u8; l.result];
            let (operand, compare) = args.split_at(l.operand);
            fabric_util::atomic::apply_slice(op, dt, kind, &mut copy, operand, compare, &mut want)
                .expect("apply_slice agrees");
            assert!(same_bits(&copy, &region[off..off + l.target]));
            assert!(same_bits(&want, &result));
        }
        Ok(Err(_)) | Err(_) => {
            assert!(result.is_empty(), "a refused or malformed atomic returns nothing");
            assert_eq!(region, before, "a refused or malformed atomic changed the target");
        }
    }
    Some(r)
}

/// Byte equality (floats are compared as the bytes they leave).
fn same_bits(a: &[u8], b: &[u8]) -> bool {
    a == b
}

// ---------------------------------------------------------------- verbs

/// Fuzz body of `verbs_frames`: what the verbs provider decodes from a peer, all
/// on the same bytes: the private data of a connection event
/// ([`verbs_wire::strip_private`]), an RDM peer's name in it
/// ([`verbs_wire::decode_name`]), and a frame (a [`wire::Header`] with verbs' limit
/// of 1 GiB, then its body: a message's bytes, a rendezvous announcement
/// ([`verbs_wire::decode_rts`]), an atomic request). Checks that accepted private
/// data, names and announcements re-encode to the same bytes and that the pieces
/// add up to the announced length.
pub fn verbs_frames(data: &[u8]) {
    if let Some((kind, rest)) = verbs_wire::strip_private(data) {
        assert_eq!(rest.len(), usize::from(data[4]));
        assert_eq!(verbs_wire::private_data(kind, rest), &data[..verbs_wire::PD_HDR + rest.len()]);
        if let Some(a) = verbs_wire::decode_name(rest) {
            let e = verbs_wire::encode_name(a);
            assert_eq!(verbs_wire::decode_name(&e), Some(a));
            // What the decoder reads re-encodes to the same bytes.
            let used = if a.is_ipv4() { 8 } else { 20 };
            assert_eq!((e[0], &e[2..used]), (rest[0], &rest[2..used]));
        }
    }
    let _ = verbs_wire::decode_name(data);
    let Some((head, body)) = data.split_first_chunk::<{ wire::HDR_LEN }>() else { return };
    let Ok(h) = wire::Header::decode(head, 1 << 30) else { return };
    match h.op {
        OpCode::Rts => {
            if let Ok(pieces) = verbs_wire::decode_rts(body, h.len, fabric_util::rx::IOV_LIMIT) {
                assert!(pieces.len() <= fabric_util::rx::IOV_LIMIT);
                assert_eq!(pieces.iter().map(|p| u128::from(p.len)).sum::<u128>(), u128::from(h.len));
                let e = verbs_wire::encode_rts(&pieces);
                assert_eq!(e, &body[..e.len()]);
            }
        }
        OpCode::AtomicReq => {
            let _ = rma_atomic_request(body.first().copied().unwrap_or(0), body);
        }
        _ => {}
    }
}

// ---------------------------------------------------------------- smoke runs of the new bodies

/// A valid frame of every kind tcp reads, with a payload that fits its limits.
fn valid_tcp_frame(rng: &mut Rng) -> Vec<u8> {
    let op = rng.pick(&OPS).expect("opcodes");
    let mut payload = Vec::new();
    let mut h = wire::Header { id: rng.next(), ..wire::Header::new(op) };
    match op {
        OpCode::Hello => {
            let names = ["127.0.0.1:4000", "[::1]:9", "10.1.2.3:65535", "[fe80::1%2]:7", "not an address", ""];
            let name = names[rng.index(names.len())];
            let mut data = vec![0u8; rng.index(60)];
            rng.fill(&mut data);
            let (hh, p) = wire::Hello { name: name.as_bytes(), data: &data }.encode(h.id);
            h = hh;
            payload = p;
        }
        OpCode::WriteReq | OpCode::AtomicReq => {
            payload = atomic_payload(rng);
            if op == OpCode::WriteReq {
                payload.truncate(RmaDesc::LEN + rng.index(64));
            }
        }
        OpCode::Cts | OpCode::Shutdown | OpCode::Nack | OpCode::Ack => {}
        OpCode::Rts | OpCode::ReadReq => h.len = rng.index(1 << 20) as u64,
        _ => {
            payload = vec![0u8; rng.index(100)];
            rng.fill(&mut payload);
        }
    }
    if !matches!(op, OpCode::Hello | OpCode::Rts | OpCode::ReadReq) {
        h.len = payload.len() as u64;
    }
    h.flags = flags_for(op, rng.next());
    let mut d = h.encode().to_vec();
    d.extend_from_slice(&payload);
    d
}

/// A plausible atomic request payload: a target in or near the region, a mostly
/// known operation, and operands of about the right size.
fn atomic_payload(rng: &mut Rng) -> Vec<u8> {
    let dt = rng.index(11) as u8;
    let size = Datatype::from_u8(dt).map_or(1, |d| d.size());
    let op = rng.index(22) as u8;
    let kind = [0u8, 1, 2, 2, 1, 0, 3][rng.index(7)];
    let count = if rng.index(16) == 0 { rng.next() as u32 } else { rng.index(40) as u32 };
    let desc = RmaDesc { addr: if rng.index(4) == 0 { rng.next() } else { rng.index(600) as u64 }, key: REGION_KEY };
    let ah = AtomicHdr { op, datatype: dt, kind, count };
    let mut p = desc.encode().to_vec();
    p.extend_from_slice(&ah.encode());
    // Operand, and the compare operand for compare kinds; sometimes off by some.
    let per = (count as usize).min(64) * size;
    let n = per * if kind == 2 { 2 } else { 1 };
    let n = if rng.index(6) == 0 { rng.index(n + 9) } else { n };
    let mut args = vec![0u8; n];
    rng.fill(&mut args);
    p.extend_from_slice(&args);
    p
}

#[test]
fn tcp_frames_smoke() {
    let mut rng = Rng::new(5);
    let mut frames = 0;
    let mut prev = Vec::new();
    for i in 0..60_000 {
        let mut d = vec![(rng.next() as u8) | u8::from(i % 8 != 0)];
        for _ in 0..=rng.index(4) {
            d.extend_from_slice(&valid_tcp_frame(&mut rng));
        }
        if i % 3 == 2 {
            mutate(&mut rng, &mut d, &prev);
        }
        frames += tcp_frames_run(&d);
        prev = d;
    }
    for d in tcp_frames_corpus() {
        tcp_frames(&d);
    }
    // Most streams got past the header to the payload decoders.
    assert!(frames > 100_000, "{frames}");
}

/// Fixed inputs of `tcp_frames`: valid and near-valid hellos (and regressions).
fn tcp_frames_corpus() -> Vec<Vec<u8>> {
    let hello = |name: &[u8], data: &[u8], fix: &dyn Fn(&mut wire::Header)| {
        let (mut h, p) = wire::Hello { name, data }.encode(7);
        fix(&mut h);
        let mut d = vec![1u8];
        d.extend_from_slice(&h.encode());
        d.extend_from_slice(&p);
        d
    };
    vec![
        hello(b"127.0.0.1:4000", b"", &|_| {}),
        hello(b"[::ffff:1.2.3.4]:1", b"conn data", &|_| {}),
        hello(b"", b"msg data", &|_| {}),
        // Lengths that do not add up: data short of the payload, name past it.
        hello(b"127.0.0.1:4000", b"xyz", &|h| h.data = 1),
        hello(b"127.0.0.1:4000", b"", &|h| h.tag = 3),
        hello(b"\xff\xfe:1", b"", &|_| {}),
        vec![0u8; 41],
        vec![1u8],
    ]
}

#[test]
fn tcp_hello_lengths_must_add_up() {
    let (h, p) = wire::Hello { name: b"10.0.0.1:5", data: b"abc" }.encode(9);
    let got = wire::Hello::decode(&h, &p).unwrap();
    assert_eq!(got.name_addr(), Some("10.0.0.1:5".parse().unwrap()));
    assert_eq!(got.data, b"abc");
    assert!(wire::Hello::decode(&wire::Header { data: 2, ..h }, &p).is_err());
    assert!(wire::Hello::decode(&h, &p[..p.len() - 1]).is_err());
    assert!(wire::Hello::decode(&wire::Header { tag: 99, ..h }, &p).is_err());
    assert!(wire::Hello::decode(&wire::Header { op: OpCode::Reject, ..h }, &p).is_err());
}

#[test]
fn rma_atomic_smoke() {
    let mut rng = Rng::new(6);
    let (mut applied, mut refused, mut malformed) = (0, 0, 0);
    let mut prev = Vec::new();
    for i in 0..60_000 {
        let mut d = vec![if i % 4 == 0 { rng.next() as u8 } else { (rng.next() as u8) & !6 | 8 }];
        d.extend_from_slice(&atomic_payload(&mut rng));
        if i % 5 == 4 {
            mutate(&mut rng, &mut d, &prev);
        }
        if let Some((&m, p)) = d.split_first() {
            match rma_atomic_request(m, p) {
                Some(Ok(Ok(()))) => applied += 1,
                Some(Ok(Err(_))) => refused += 1,
                Some(Err(_)) => malformed += 1,
                None => {}
            }
        }
        prev = d;
    }
    eprintln!("{applied} applied, {refused} refused, {malformed} malformed");
    assert!(applied > 3_000 && refused > 3_000 && malformed > 3_000, "{applied} {refused} {malformed}");
}

/// A fetching sum of two u32 at offset 8, through the body: applied, and the
/// region's bytes change as the operation says.
#[test]
fn rma_atomic_body_applies() {
    let mut p = RmaDesc { addr: 8, key: REGION_KEY }.encode().to_vec();
    p.extend_from_slice(
        &AtomicHdr { op: AtomicOp::Sum as u8, datatype: Datatype::Uint32 as u8, kind: 1, count: 2 }.encode(),
    );
    p.extend_from_slice(&1u32.to_le_bytes());
    p.extend_from_slice(&2u32.to_le_bytes());
    assert_eq!(rma_atomic_request(8, &p), Some(Ok(Ok(()))));
    // Read-only region: refused.
    assert_eq!(rma_atomic_request(8 | 2, &p), Some(Ok(Err(Error::Access))));
    // Operands of the wrong size: malformed.
    assert!(matches!(rma_atomic_request(8, &p[..p.len() - 1]), Some(Err(_))));
}

/// Valid private data, names and rendezvous frames for `verbs_frames`.
fn valid_verbs(rng: &mut Rng) -> Vec<u8> {
    match rng.index(3) {
        0 => {
            let a: std::net::SocketAddr =
                ["10.0.2.15:7000", "[fe80::1]:9", "0.0.0.0:0"][rng.index(3)].parse().expect("address");
            let mut d = verbs_wire::private_data(verbs_wire::PD_RDM, &verbs_wire::encode_name(a));
            d.resize(d.len() + rng.index(40), 0);
            d
        }
        1 => {
            let mut data = vec![0u8; rng.index(60)];
            rng.fill(&mut data);
            verbs_wire::private_data(verbs_wire::PD_MSG, &data)
        }
        _ => {
            let n = rng.index(fabric_util::rx::IOV_LIMIT + 2);
            let pieces: Vec<RtsPiece> = (0..n)
                .map(|_| RtsPiece {
                    addr: rng.next(),
                    len: if rng.index(8) == 0 { rng.next() } else { rng.index(1 << 16) as u64 },
                    rkey: rng.next() as u32,
                })
                .collect();
            let len = pieces.iter().fold(0u64, |s, p| s.wrapping_add(p.len));
            let h = wire::Header { len: len & ((1 << 30) - 1), ..wire::Header::new(OpCode::Rts) };
            let mut d = h.encode().to_vec();
            d.extend_from_slice(&verbs_wire::encode_rts(&pieces));
            d
        }
    }
}

#[test]
fn verbs_frames_smoke() {
    let mut rng = Rng::new(7);
    let mut prev = Vec::new();
    let (mut pd, mut rts) = (0, 0);
    for i in 0..100_000 {
        let mut d = valid_verbs(&mut rng);
        if i % 2 == 1 {
            mutate(&mut rng, &mut d, &prev);
        }
        pd += usize::from(verbs_wire::strip_private(&d).is_some());
        if let Some(h) = d.first_chunk::<{ wire::HDR_LEN }>().and_then(|h| wire::Header::decode(h, 1 << 30).ok()) {
            rts += usize::from(verbs_wire::decode_rts(&d[wire::HDR_LEN..], h.len, 16).is_ok());
        }
        verbs_frames(&d);
        prev = d;
    }
    // Regression: piece lengths whose sum overflows (a panic in debug builds
    // before the decoder summed them checked).
    let big = [RtsPiece { addr: 0, len: u64::MAX, rkey: 0 }, RtsPiece { addr: 0, len: 2, rkey: 0 }];
    let mut d = wire::Header { len: 1, ..wire::Header::new(OpCode::Rts) }.encode().to_vec();
    d.extend_from_slice(&verbs_wire::encode_rts(&big));
    verbs_frames(&d);
    assert!(verbs_wire::decode_rts(&d[wire::HDR_LEN..], 1, 16).is_err());
    assert!(pd > 30_000 && rts > 5_000, "{pd} {rts}");
}
