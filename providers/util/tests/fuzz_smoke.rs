//! The fuzz targets' bodies, and a stable-toolchain smoke run of them.
//!
//! Each `pub fn` here taking `&[u8]` is the whole body of one cargo-fuzz target
//! in `providers/util/fuzz/fuzz_targets/` (they include this file), so the code a
//! fuzzer runs on nightly is the code these tests run on stable: a few hundred
//! thousand seeded random and mutated inputs (bit flips, truncation, extension,
//! splicing, random lengths, mutations of valid datagrams and headers) through
//! every decoder of datagram bytes and through a [`Channel`]. Each body asserts
//! that nothing panics, that an accepted datagram or header re-encodes to the same
//! bytes, and the channel's invariants.

use std::time::{Duration, Instant};

use fabric_util::reliable::{Channel, Config, Event, Header, Kind, FLAG_FIRST, FLAG_LAST, FLAG_SUMMED, HEADER_LEN};
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
        let len = h.len;
        match h.op {
            OpCode::Cts | OpCode::Shutdown | OpCode::Nack => assert_eq!(len, 0),
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
    let t0 = Instant::now();
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

/// SplitMix64, for the smoke runs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn fill(&mut self, b: &mut [u8]) {
        for x in b {
            *x = self.next() as u8;
        }
    }
}

/// A random well-formed datagram of the reliable protocol.
fn valid_datagram(rng: &mut Rng) -> Vec<u8> {
    let kind = [Kind::Data, Kind::Ack, Kind::Probe][rng.below(3)];
    let len = if kind == Kind::Data { rng.below(200) } else { 0 };
    let mut flags = if rng.below(4) == 0 { 0 } else { FLAG_SUMMED };
    if kind == Kind::Data {
        flags |= rng.next() as u8 & (FLAG_FIRST | FLAG_LAST);
    }
    let small = |r: &mut Rng| if r.below(8) == 0 { r.next() } else { r.next() % 24 };
    let h = Header {
        kind,
        flags,
        epoch: if rng.below(8) != 0 { PEER_EPOCH } else { rng.next() as u32 },
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
    for _ in 0..=rng.below(3) {
        match rng.below(7) {
            0 if !d.is_empty() => {
                let i = rng.below(d.len());
                d[i] ^= 1 << rng.below(8);
            }
            1 => {
                let n = rng.below(d.len() + 1);
                d.truncate(n);
            }
            2 => {
                for _ in 0..=rng.below(8) {
                    d.push(rng.next() as u8);
                }
            }
            3 if !d.is_empty() => {
                let i = rng.below(d.len());
                let j = (i + 1 + rng.below(8)).min(d.len());
                rng.fill(&mut d[i..j]);
            }
            4 if !other.is_empty() => {
                let cut = rng.below(d.len() + 1);
                let from = rng.below(other.len());
                d.truncate(cut);
                d.extend_from_slice(&other[from..]);
            }
            5 if !d.is_empty() => {
                let i = rng.below(d.len());
                d[i] = [0, 1, 2, 3, 4, 7, 0x7F, 0x80, 0xFB, 0xFC, 0xFF][rng.below(11)];
            }
            _ => {}
        }
    }
}

#[test]
fn reliable_header_smoke() {
    let mut rng = Rng(1);
    let mut accepted = 0;
    let mut prev = valid_datagram(&mut rng);
    for i in 0..300_000 {
        let d = match i % 4 {
            // Random bytes of a random length.
            0 => {
                let mut d = vec![0u8; rng.below(HEADER_LEN + 80)];
                rng.fill(&mut d);
                if d.len() > 2 && rng.below(2) == 0 {
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

#[test]
fn wire_header_smoke() {
    let mut rng = Rng(2);
    let mut accepted = 0;
    let ops = [
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
    ];
    let mut prev: Vec<u8> = Vec::new();
    for i in 0..300_000 {
        let mut d = if i % 3 == 0 {
            let mut d = vec![0u8; rng.below(wire::HDR_LEN + 40)];
            rng.fill(&mut d);
            d
        } else {
            let small = |r: &mut Rng| if r.below(3) == 0 { r.next() } else { r.next() % 5000 };
            let h = wire::Header {
                op: ops[rng.below(ops.len())],
                flags: HdrFlags(rng.next() as u32 & HdrFlags::ALL),
                len: small(&mut rng),
                tag: small(&mut rng),
                data: small(&mut rng),
                id: rng.next(),
            };
            let mut d = h.encode().to_vec();
            let mut tail = vec![0u8; rng.below(32)];
            rng.fill(&mut tail);
            d.extend_from_slice(&tail);
            if i % 3 == 2 {
                mutate(&mut rng, &mut d, &prev);
            }
            d
        };
        if d.len() >= wire::HDR_LEN && rng.below(4) == 0 {
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
    for _ in 0..rng.below(300) {
        v.push(if rng.below(8) == 0 { 1 } else { 0 }); // refuse?
                                                       // Mostly sends, transmits and datagrams; timer jumps rarely (each may
                                                       // bring the peer's silence nearer to `unreachable_after`).
        let op: u8 = [0, 0, 1, 2, 3, 3, 4, 5, 5, 5, 6][rng.below(11)];
        let op = if op == 2 && rng.below(4) != 0 { 3 } else { op };
        v.push(op);
        match op {
            0 => v.extend_from_slice(&(rng.below(700) as u16).to_le_bytes()),
            1 => {
                let span = if rng.below(10) == 0 { 65536 } else { 200 };
                v.extend_from_slice(&(rng.below(span) as u16).to_le_bytes());
            }
            4 => {
                let mut d = valid_datagram(rng);
                if rng.below(2) == 0 {
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
                let kind = rng.below(3) as u8;
                v.push(kind);
                v.push(rng.next() as u8);
                if rng.below(8) == 0 {
                    v.push(255);
                    v.extend_from_slice(&(rng.next() as u32).to_le_bytes());
                } else {
                    v.push(0);
                }
                let wide = rng.below(16) == 0;
                v.push(if wide { 255 } else { 0 });
                let num = |v: &mut Vec<u8>, r: &mut Rng| {
                    if wide {
                        v.extend_from_slice(&r.next().to_le_bytes());
                    } else {
                        v.push(r.below(24) as u8);
                    }
                };
                if kind == 0 {
                    num(&mut v, rng); // seq
                }
                num(&mut v, rng); // ack
                let sack = if rng.below(2) == 0 { 0 } else { rng.next() };
                v.extend_from_slice(&sack.to_le_bytes());
                num(&mut v, rng); // wnd
                if kind == 0 {
                    let len = rng.below(CH_MSS + 1);
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
    let mut rng = Rng(3);
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
            ops = vec![0u8; rng.below(400)];
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
    let mut rng = Rng(4);
    for target in ["reliable_header", "reliable_channel", "wire_header"] {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir).expect("create the corpus directory");
        for i in 0..32 {
            let input = match target {
                "reliable_header" => valid_datagram(&mut rng),
                "reliable_channel" => channel_ops(&mut rng),
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
