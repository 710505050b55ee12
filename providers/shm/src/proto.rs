//! The entries that cross a ring: a fixed 56-byte header, little-endian, then up to
//! [`INLINE_MAX`] bytes of inline payload (or a list of remote buffer pieces).
//!
//! Decoding is checked: an entry comes from another process, which may be buggy,
//! hostile or killed half-way through writing it. [`Entry::decode`] refuses unknown
//! kinds, modes and flags, and every length that could index anything.
//!
//! | bytes | field |
//! |---|---|
//! | 0 | kind ([`Kind`]) |
//! | 1 | flags ([`flags`]) |
//! | 2 | payload mode ([`Mode`]) |
//! | 3 | reserved, 0 |
//! | 4..8 | aux: bounce index or piece count (by mode), errno (`Ack`) |
//! | 8..16 | len: payload bytes |
//! | 16..24 | tag (messages), atomic element count, or job generation (help) |
//! | 24..32 | remote CQ data, an atomic's operation ([`atomic_aux`]) or its answer's errno |
//! | 32..40 | id: the sender's operation (or the one answered) |
//! | 40..48 | key (RMA and atomics), job (help) |
//! | 48..56 | remote address (RMA, atomics), offset (data chunks) or chunk size (help) |
//! | 56..248 | inline payload, or pieces `(addr, len)` as 2 x u64 each |

use crate::ring::ENTRY_PAYLOAD;
use crate::segment::{BOUNCE_COUNT, BOUNCE_SIZE};
use fabric_util::rx::IOV_LIMIT;

/// Version of this layout (reported as the endpoint's protocol version).
/// 2: an atomic's operation, and its answer's errno, are in `data` (they were in
/// `aux`, which a `Bounce` payload overwrote with its index).
pub const VERSION: u8 = 2;
/// Header bytes of an entry.
pub const HDR: usize = 56;
/// Most payload bytes carried inline.
pub const INLINE_MAX: usize = ENTRY_PAYLOAD - HDR;

/// Entry flags.
pub mod flags {
    /// A tagged message.
    pub const TAGGED: u8 = 1;
    /// Carries remote CQ data.
    pub const CQ_DATA: u8 = 2;
    /// A data chunk answers a read (it belongs to an operation of the receiver).
    pub const RESP: u8 = 4;
    /// Every flag defined.
    pub const ALL: u8 = 7;
}

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A message (payload by mode).
    Msg = 1,
    /// The receiver of a large message (or write) asks for it as chunks: `id`.
    Cts = 2,
    /// A chunk of a streamed transfer: `id`, offset in `addr`, `len` bytes in
    /// bounce buffer `aux`.
    Data = 3,
    /// Operation `id` of the receiver of this entry ended: errno in `aux` (0: done).
    Ack = 4,
    /// RMA write of `len` bytes to `addr` in region `key` (payload by mode).
    Write = 5,
    /// RMA read of `len` bytes at `addr` in region `key`, into the pieces given
    /// (mode `Iov`) or streamed back as chunks (mode `Stream`).
    Read = 6,
    /// Atomic on `addr` in region `key`: op/datatype/kind in `data` ([`atomic_aux`];
    /// not in `aux`, which a `Bounce` payload needs for its index), count in `tag`,
    /// operand then compare operand as payload.
    Atomic = 7,
    /// Answer to atomic `id`: errno in `data` (not in `aux`, which a `Bounce`
    /// payload needs), prior values as payload.
    AtomicResp = 8,
    /// The receiver of large message `id` copies it in chunks of `addr` bytes under
    /// job `key` of the sender's slot, generation `tag`, and asks the sender to claim
    /// chunks too: the receive's pieces (mode `Iov`) for the sender to write into.
    Help = 9,
}

/// Where an entry's payload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// No payload.
    None = 0,
    /// In the entry.
    Inline = 1,
    /// In bounce buffer `aux` of the sender's slot.
    Bounce = 2,
    /// In the sender's memory: `aux` pieces listed inline, for cross-memory copy.
    Iov = 3,
    /// In the sender's memory, sent as chunks when asked (`Cts`) or right away.
    Stream = 4,
}

/// A decoded entry header (the payload stays in the ring or bounce buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// What it is.
    pub kind: Kind,
    /// [`flags`].
    pub flags: u8,
    /// Where its payload is.
    pub mode: Mode,
    /// Bounce index or piece count (by mode), or an `Ack`'s errno.
    pub aux: u32,
    /// Payload bytes.
    pub len: u64,
    /// Tag, or an atomic's element count.
    pub tag: u64,
    /// Remote CQ data, an atomic's operation, or an atomic answer's errno.
    pub data: u64,
    /// Operation id.
    pub id: u64,
    /// Region key.
    pub key: u64,
    /// Remote address or chunk offset.
    pub addr: u64,
}

/// Why an entry was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// Unknown kind byte.
    Kind(u8),
    /// Unknown mode byte.
    Mode(u8),
    /// Undefined flag bits.
    Flags(u8),
    /// A length or index out of range for its mode.
    Range,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Kind(k) => write!(f, "unknown entry kind {k}"),
            DecodeError::Mode(m) => write!(f, "unknown payload mode {m}"),
            DecodeError::Flags(x) => write!(f, "undefined flags {x:#x}"),
            DecodeError::Range => f.write_str("length or index out of range"),
        }
    }
}

#[inline(always)]
fn u64_at(b: &[u8; ENTRY_PAYLOAD], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

impl Entry {
    /// An entry of `kind` with everything else zero.
    pub fn new(kind: Kind) -> Entry {
        Entry { kind, flags: 0, mode: Mode::None, aux: 0, len: 0, tag: 0, data: 0, id: 0, key: 0, addr: 0 }
    }

    /// Write the header into an entry's first [`HDR`] bytes.
    pub fn encode(&self, b: &mut [u8; ENTRY_PAYLOAD]) {
        b[0] = self.kind as u8;
        b[1] = self.flags;
        b[2] = self.mode as u8;
        b[3] = 0;
        b[4..8].copy_from_slice(&self.aux.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..24].copy_from_slice(&self.tag.to_le_bytes());
        b[24..32].copy_from_slice(&self.data.to_le_bytes());
        b[32..40].copy_from_slice(&self.id.to_le_bytes());
        b[40..48].copy_from_slice(&self.key.to_le_bytes());
        b[48..56].copy_from_slice(&self.addr.to_le_bytes());
    }

    /// Decode and check an entry's header: after this, an `Inline` payload fits in
    /// the entry, a `Bounce` index names a buffer and its length fits in one, and
    /// an `Iov` list has at most [`IOV_LIMIT`] pieces whose lengths sum to `len`.
    #[inline]
    pub fn decode(b: &[u8; ENTRY_PAYLOAD]) -> Result<Entry, DecodeError> {
        let kind = match b[0] {
            1 => Kind::Msg,
            2 => Kind::Cts,
            3 => Kind::Data,
            4 => Kind::Ack,
            5 => Kind::Write,
            6 => Kind::Read,
            7 => Kind::Atomic,
            8 => Kind::AtomicResp,
            9 => Kind::Help,
            k => return Err(DecodeError::Kind(k)),
        };
        let mode = match b[2] {
            0 => Mode::None,
            1 => Mode::Inline,
            2 => Mode::Bounce,
            3 => Mode::Iov,
            4 => Mode::Stream,
            m => return Err(DecodeError::Mode(m)),
        };
        if b[1] & !flags::ALL != 0 {
            return Err(DecodeError::Flags(b[1]));
        }
        let mut a = [0u8; 4];
        a.copy_from_slice(&b[4..8]);
        let e = Entry {
            kind,
            flags: b[1],
            mode,
            aux: u32::from_le_bytes(a),
            len: u64_at(b, 8),
            tag: u64_at(b, 16),
            data: u64_at(b, 24),
            id: u64_at(b, 32),
            key: u64_at(b, 40),
            addr: u64_at(b, 48),
        };
        let ok = match mode {
            Mode::None | Mode::Stream => true,
            Mode::Inline => e.len <= INLINE_MAX as u64,
            Mode::Bounce => (e.aux as usize) < BOUNCE_COUNT && e.len <= BOUNCE_SIZE as u64,
            Mode::Iov => {
                let n = e.aux as usize;
                n <= IOV_LIMIT && {
                    let mut sum = 0u64;
                    let mut fine = true;
                    for i in 0..n {
                        let l = u64_at(b, HDR + 16 * i + 8);
                        match sum.checked_add(l) {
                            Some(s) => sum = s,
                            None => fine = false,
                        }
                    }
                    fine && sum == e.len
                }
            }
        };
        // Data chunks always come in a bounce buffer.
        let ok = ok && (kind != Kind::Data || mode == Mode::Bounce);
        // Help lists the pieces to write into, and names a job and a chunk size.
        let ok = ok
            && (kind != Kind::Help
                || (mode == Mode::Iov
                    && e.key < crate::segment::JOBS as u64
                    && e.addr > 0
                    && e.addr <= u32::MAX as u64));
        if !ok {
            return Err(DecodeError::Range);
        }
        Ok(e)
    }

    /// [`decode`](Entry::decode) for the most common entry only: a message with an
    /// inline payload (`Some` exactly when `decode` accepts the entry as one; other
    /// entries are `None`, whether valid or not).
    #[inline]
    pub fn decode_inline_msg(b: &[u8; ENTRY_PAYLOAD]) -> Option<Entry> {
        Self::decode_msg_in(b, Mode::Inline)
    }

    /// [`decode`](Entry::decode) for a message with its payload in a bounce buffer
    /// (`Some` exactly when `decode` accepts the entry as one; other entries are
    /// `None`, whether valid or not).
    #[inline]
    pub fn decode_bounce_msg(b: &[u8; ENTRY_PAYLOAD]) -> Option<Entry> {
        Self::decode_msg_in(b, Mode::Bounce)
    }

    /// The two fast decodes above: a message entry whose payload travels in
    /// `mode` (`Inline` or `Bounce`; a constant, so the checks of the other mode
    /// fold away).
    #[inline(always)]
    fn decode_msg_in(b: &[u8; ENTRY_PAYLOAD], mode: Mode) -> Option<Entry> {
        // Kind, flags and mode in one test of the first word's low bytes (the
        // reserved byte 3 is ignored, as by `decode`); `aux` is its high half.
        let word = u64_at(b, 0);
        let head = word as u32 & 0x00ff_ffff;
        let want = Kind::Msg as u32 | (mode as u32) << 16;
        if head & !((flags::ALL as u32) << 8) != want {
            return None;
        }
        let aux = (word >> 32) as u32;
        let len = u64_at(b, 8);
        let fits = match mode {
            Mode::Inline => len <= INLINE_MAX as u64,
            Mode::Bounce => (aux as usize) < BOUNCE_COUNT && len <= BOUNCE_SIZE as u64,
            _ => false,
        };
        if !fits {
            return None;
        }
        Some(Entry {
            kind: Kind::Msg,
            flags: (head >> 8) as u8,
            mode,
            aux,
            len,
            tag: u64_at(b, 16),
            data: u64_at(b, 24),
            id: u64_at(b, 32),
            key: u64_at(b, 40),
            addr: u64_at(b, 48),
        })
    }

    /// The inline payload of a decoded `Inline` entry.
    pub fn inline<'a>(&self, b: &'a [u8; ENTRY_PAYLOAD]) -> &'a [u8] {
        let n = (self.len as usize).min(INLINE_MAX);
        &b[HDR..HDR + n]
    }

    /// The pieces of a decoded `Iov` entry: `(addr, len)` each.
    pub fn pieces(&self, b: &[u8; ENTRY_PAYLOAD], out: &mut [(u64, u64); IOV_LIMIT]) -> usize {
        let n = (self.aux as usize).min(IOV_LIMIT);
        for (i, o) in out.iter_mut().enumerate().take(n) {
            *o = (u64_at(b, HDR + 16 * i), u64_at(b, HDR + 16 * i + 8));
        }
        n
    }
}

/// Write pieces `(addr, len)` after the header (at most [`IOV_LIMIT`]).
pub fn put_pieces(b: &mut [u8; ENTRY_PAYLOAD], pieces: &[(u64, u64)]) {
    for (i, (a, l)) in pieces.iter().take(IOV_LIMIT).enumerate() {
        b[HDR + 16 * i..HDR + 16 * i + 8].copy_from_slice(&a.to_le_bytes());
        b[HDR + 16 * i + 8..HDR + 16 * i + 16].copy_from_slice(&l.to_le_bytes());
    }
}

/// Pack an atomic's op, datatype and kind numbers (an `Atomic` entry's `data`).
pub fn atomic_aux(op: u8, datatype: u8, kind: u8) -> u32 {
    op as u32 | (datatype as u32) << 8 | (kind as u32) << 16
}

/// Unpack [`atomic_aux`].
pub fn atomic_unaux(aux: u32) -> (u8, u8, u8) {
    (aux as u8, (aux >> 8) as u8, (aux >> 16) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let e = Entry {
            kind: Kind::Write,
            flags: flags::CQ_DATA,
            mode: Mode::Iov,
            aux: 2,
            len: 30,
            tag: 1,
            data: 2,
            id: 3,
            key: 4,
            addr: 5,
        };
        let mut b = [0u8; ENTRY_PAYLOAD];
        e.encode(&mut b);
        put_pieces(&mut b, &[(100, 10), (200, 20)]);
        assert_eq!(Entry::decode(&b), Ok(e));
        let mut p = [(0, 0); IOV_LIMIT];
        assert_eq!(e.pieces(&b, &mut p), 2);
        assert_eq!(&p[..2], &[(100, 10), (200, 20)]);
    }

    #[test]
    fn refuses_what_could_index_anything() {
        let mut b = [0u8; ENTRY_PAYLOAD];
        let mut e = Entry::new(Kind::Msg);
        e.mode = Mode::Inline;
        e.len = INLINE_MAX as u64 + 1;
        e.encode(&mut b);
        assert_eq!(Entry::decode(&b), Err(DecodeError::Range));
        e.mode = Mode::Bounce;
        e.len = 1;
        e.aux = BOUNCE_COUNT as u32;
        e.encode(&mut b);
        assert_eq!(Entry::decode(&b), Err(DecodeError::Range));
        e.mode = Mode::Iov;
        e.aux = 1;
        e.len = 5;
        e.encode(&mut b);
        put_pieces(&mut b, &[(0, 4)]);
        assert_eq!(Entry::decode(&b), Err(DecodeError::Range), "pieces must sum to len");
        put_pieces(&mut b, &[(0, u64::MAX)]);
        e.aux = 2;
        e.encode(&mut b);
        put_pieces(&mut b, &[(0, u64::MAX), (0, 6)]);
        assert_eq!(Entry::decode(&b), Err(DecodeError::Range), "sums may not wrap");
        b[0] = 99;
        assert_eq!(Entry::decode(&b), Err(DecodeError::Kind(99)));
    }

    /// Random bytes never panic the decoder, and what it accepts stays in range.
    #[test]
    fn random_entries() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut b = [0u8; ENTRY_PAYLOAD];
        for _ in 0..200_000 {
            for c in b.iter_mut().take(64) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *c = x as u8;
            }
            // Bias towards valid kinds and modes so the range checks run.
            b[0] %= 10;
            b[2] %= 5;
            b[1] &= 0xf;
            // And towards small lengths, half of the time.
            if x & 1 == 0 {
                b[9..16].fill(0);
            }
            let fast = Entry::decode_inline_msg(&b);
            let full = Entry::decode(&b).ok();
            assert_eq!(fast, full.filter(|e| e.kind == Kind::Msg && e.mode == Mode::Inline));
            let bounce = Entry::decode_bounce_msg(&b);
            assert_eq!(bounce, full.filter(|e| e.kind == Kind::Msg && e.mode == Mode::Bounce));
            if let Some(e) = full {
                match e.mode {
                    Mode::Inline => assert!(e.inline(&b).len() as u64 == e.len),
                    Mode::Bounce => assert!((e.aux as usize) < BOUNCE_COUNT),
                    Mode::Iov => {
                        let mut p = [(0, 0); IOV_LIMIT];
                        let n = e.pieces(&b, &mut p);
                        assert_eq!(p[..n].iter().map(|q| q.1).sum::<u64>(), e.len);
                    }
                    _ => {}
                }
                if e.kind == Kind::Help {
                    assert!(e.mode == Mode::Iov && (e.key as usize) < crate::segment::JOBS && e.addr > 0);
                }
            }
        }
    }
}
