//! The versioned wire header shared by the stream and datagram transports.
//!
//! Every frame starts with a fixed 40-byte header, little-endian:
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 0 | magic | `0xFB` |
//! | 1 | version | [`WIRE_VERSION`] |
//! | 2 | op | [`OpCode`] |
//! | 3 | reserved | 0 |
//! | 4..8 | flags | [`HdrFlags`] |
//! | 8..16 | len | payload bytes after the header (for `Rts`: the message size) |
//! | 16..24 | tag | tag of a tagged message |
//! | 24..32 | data | remote CQ data, or a control value |
//! | 32..40 | id | rendezvous id, or a control value |
//!
//! Decoding checks everything a peer controls: magic, version, op code, flag bits,
//! and the length against the limit the receiver allows. A frame that fails is a
//! protocol error: the connection is closed with the reason logged.

use std::fmt;

/// The header's size in bytes.
pub const HDR_LEN: usize = 40;
/// The magic first byte.
pub const MAGIC: u8 = 0xFB;
/// The protocol version this build speaks.
pub const WIRE_VERSION: u8 = 1;

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum OpCode {
    /// Connection set-up: payload is the sender's name; `id` its epoch, `data` the
    /// length of connection data following the name, `tag` the name's length.
    Hello = 1,
    /// Connection accepted: payload is accept data; `id` the acceptor's epoch.
    HelloAck = 2,
    /// Connection refused: payload is reject data.
    Reject = 3,
    /// An eager message: payload is the message.
    Msg = 4,
    /// Request to send a large message: `len` is its size, `id` the sender's
    /// rendezvous id; no payload.
    Rts = 5,
    /// Clear to send: `id` echoes the sender's rendezvous id; no payload.
    Cts = 6,
    /// Rendezvous data: `id` the sender's rendezvous id; payload the message.
    Data = 7,
    /// Orderly shutdown.
    Shutdown = 8,
    /// The receiver discarded a rendezvous message (`FI_DISCARD`, truncation to
    /// nothing, cancel): `id` the sender's rendezvous id. The sender completes.
    Nack = 9,
    /// RMA write: payload is an [`RmaDesc`] then up to [`RMA_CHUNK`] bytes; `id`
    /// the operation's request id (the same for all its requests); `tag` the whole
    /// operation's length (so its first request lets the target check the whole
    /// range before any byte lands); `data` remote CQ data with `CQ_DATA`; the
    /// operation's last request has `LAST`.
    WriteReq = 10,
    /// RMA read of `len` bytes (at most [`RMA_CHUNK`]) at `tag` (address) in region
    /// `data` (key); `id` the operation's request id; `LAST` on its last request;
    /// no payload.
    ReadReq = 11,
    /// Atomic: payload is an [`RmaDesc`], an [`AtomicHdr`], the operand and the
    /// compare operand; `id` the request id.
    AtomicReq = 12,
    /// Answer to a request: `id` echoes it, `data` is 0 or the libfabric error
    /// number; payload is the data read or the atomic's prior values.
    RmaResp = 13,
    /// Delivery acknowledgement of a rendezvous message announced with
    /// [`HdrFlags::DC`]: `id` echoes its rendezvous id; its data is in the
    /// receive (or it was discarded, or truncated). `data` is 0 or the libfabric
    /// error number of a receive that failed. No payload. The sender's
    /// `FI_DELIVERY_COMPLETE` send completes on it.
    Ack = 14,
}

/// The most bytes one RMA request carries or asks for; larger operations go in
/// several requests, answered in order.
pub const RMA_CHUNK: usize = 4 << 20;
/// The most bytes of operand (and of compare operand) in one atomic request.
pub const ATOMIC_MAX: usize = 4096;

/// Where an RMA request goes: the remote address (or offset) and the region's key,
/// 16 bytes little-endian at the start of a write or atomic request's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RmaDesc {
    /// Address (or offset) in the target's region.
    pub addr: u64,
    /// The region's key.
    pub key: u64,
}

impl RmaDesc {
    /// Encoded size.
    pub const LEN: usize = 16;

    /// Encode.
    pub fn encode(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..].copy_from_slice(&self.key.to_le_bytes());
        b
    }

    /// Decode from at least 16 bytes.
    pub fn decode(b: &[u8]) -> Option<RmaDesc> {
        let addr = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
        let key = u64::from_le_bytes(b.get(8..16)?.try_into().ok()?);
        Some(RmaDesc { addr, key })
    }
}

/// An atomic request's operation, 8 bytes after its [`RmaDesc`]: op, datatype and
/// kind numbers, a reserved byte, and the element count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicHdr {
    /// `enum fi_op` number.
    pub op: u8,
    /// `enum fi_datatype` number.
    pub datatype: u8,
    /// 0 plain, 1 fetch, 2 compare.
    pub kind: u8,
    /// Elements.
    pub count: u32,
}

impl AtomicHdr {
    /// Encoded size.
    pub const LEN: usize = 8;

    /// Encode.
    pub fn encode(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.op;
        b[1] = self.datatype;
        b[2] = self.kind;
        b[4..].copy_from_slice(&self.count.to_le_bytes());
        b
    }

    /// Decode from at least 8 bytes.
    pub fn decode(b: &[u8]) -> Option<AtomicHdr> {
        let b = b.get(..8)?;
        Some(AtomicHdr { op: b[0], datatype: b[1], kind: b[2], count: u32::from_le_bytes(b[4..8].try_into().ok()?) })
    }
}

impl fmt::Display for OpCode {
    /// The frame's name as log lines give it (`hello`, `rts`, `write-req`, ...).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OpCode::Hello => "hello",
            OpCode::HelloAck => "hello-ack",
            OpCode::Reject => "reject",
            OpCode::Msg => "msg",
            OpCode::Rts => "rts",
            OpCode::Cts => "cts",
            OpCode::Data => "data",
            OpCode::Shutdown => "shutdown",
            OpCode::Nack => "nack",
            OpCode::WriteReq => "write-req",
            OpCode::ReadReq => "read-req",
            OpCode::AtomicReq => "atomic-req",
            OpCode::RmaResp => "rma-resp",
            OpCode::Ack => "ack",
        })
    }
}

impl OpCode {
    fn from_u8(v: u8) -> Option<OpCode> {
        Some(match v {
            1 => OpCode::Hello,
            2 => OpCode::HelloAck,
            3 => OpCode::Reject,
            4 => OpCode::Msg,
            5 => OpCode::Rts,
            6 => OpCode::Cts,
            7 => OpCode::Data,
            8 => OpCode::Shutdown,
            9 => OpCode::Nack,
            10 => OpCode::WriteReq,
            11 => OpCode::ReadReq,
            12 => OpCode::AtomicReq,
            13 => OpCode::RmaResp,
            14 => OpCode::Ack,
            _ => return None,
        })
    }
}

/// Header flag bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HdrFlags(pub u32);

impl HdrFlags {
    /// The message is tagged.
    pub const TAGGED: u32 = 1;
    /// `data` carries remote CQ data.
    pub const CQ_DATA: u32 = 2;
    /// The last request of an RMA operation sent as several.
    pub const LAST: u32 = 4;
    /// On an `Rts` only: the sender asks for an [`OpCode::Ack`] once the data is
    /// in the receive (`FI_DELIVERY_COMPLETE`).
    pub const DC: u32 = 8;
    /// Every defined bit.
    pub const ALL: u32 = 15;

    /// Whether a bit is set.
    pub fn has(self, bit: u32) -> bool {
        self.0 & bit != 0
    }
}

/// A decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header {
    /// Frame kind.
    pub op: OpCode,
    /// Flags.
    pub flags: HdrFlags,
    /// Payload length (or message size for `Rts`).
    pub len: u64,
    /// Tag.
    pub tag: u64,
    /// Remote CQ data or control value.
    pub data: u64,
    /// Rendezvous id or control value.
    pub id: u64,
}

/// Why a header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// The first byte is not [`MAGIC`].
    BadMagic(u8),
    /// A version this build does not speak.
    BadVersion(u8),
    /// An unknown op code.
    BadOp(u8),
    /// Unknown flag bits.
    BadFlags(u32),
    /// A length above the allowed limit.
    TooLong {
        /// The length in the header.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// A control frame with a payload it may not have, or a reserved byte set.
    Malformed(&'static str),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::BadMagic(m) => write!(f, "bad magic byte {m:#04x}"),
            WireError::BadVersion(v) => write!(f, "unsupported wire version {v} (this build speaks {WIRE_VERSION})"),
            WireError::BadOp(o) => write!(f, "unknown op code {o}"),
            WireError::BadFlags(b) => write!(f, "unknown header flags {b:#x}"),
            WireError::TooLong { len, max } => write!(f, "length {len} above the limit {max}"),
            WireError::Malformed(why) => write!(f, "malformed frame: {why}"),
        }
    }
}

impl std::error::Error for WireError {}

impl Header {
    /// A header with the given op and everything else zero.
    pub fn new(op: OpCode) -> Header {
        Header { op, flags: HdrFlags(0), len: 0, tag: 0, data: 0, id: 0 }
    }

    /// Encode into 40 bytes.
    #[inline]
    pub fn encode(&self) -> [u8; HDR_LEN] {
        let mut b = [0u8; HDR_LEN];
        self.encode_into(&mut b);
        b
    }

    /// Encode into the first 40 bytes of `b` (which has at least as many).
    #[inline]
    pub fn encode_into(&self, b: &mut [u8]) {
        let b = &mut b[..HDR_LEN];
        b[0] = MAGIC;
        b[1] = WIRE_VERSION;
        b[2] = self.op as u8;
        b[3] = 0;
        b[4..8].copy_from_slice(&self.flags.0.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..24].copy_from_slice(&self.tag.to_le_bytes());
        b[24..32].copy_from_slice(&self.data.to_le_bytes());
        b[32..40].copy_from_slice(&self.id.to_le_bytes());
    }

    /// Decode and validate 40 bytes from a peer; `max_len` bounds `len` for frames
    /// that carry a payload or announce a message.
    #[inline]
    pub fn decode(b: &[u8; HDR_LEN], max_len: u64) -> Result<Header, WireError> {
        // A message with no flags but TAGGED and CQ_DATA (the common frame) is
        // recognised by one compare of its first eight bytes under a mask; any
        // other frame takes the general decode.
        const MSG_MASK: u64 = !(((HdrFlags::TAGGED | HdrFlags::CQ_DATA) as u64) << 32);
        const MSG_WORD: u64 = MAGIC as u64 | (WIRE_VERSION as u64) << 8 | (OpCode::Msg as u64) << 16;
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let first = u64_at(0);
        let len = u64_at(8);
        if first & MSG_MASK == MSG_WORD && len <= max_len {
            return Ok(Header {
                op: OpCode::Msg,
                flags: HdrFlags((first >> 32) as u32),
                len,
                tag: u64_at(16),
                data: u64_at(24),
                id: u64_at(32),
            });
        }
        Self::decode_any(b, max_len)
    }

    /// [`Header::decode`] of any frame.
    #[inline(never)]
    fn decode_any(b: &[u8; HDR_LEN], max_len: u64) -> Result<Header, WireError> {
        if b[0] != MAGIC {
            return Err(WireError::BadMagic(b[0]));
        }
        if b[1] != WIRE_VERSION {
            return Err(WireError::BadVersion(b[1]));
        }
        let op = OpCode::from_u8(b[2]).ok_or(WireError::BadOp(b[2]))?;
        if b[3] != 0 {
            return Err(WireError::Malformed("reserved byte set"));
        }
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let mut f = [0u8; 4];
        f.copy_from_slice(&b[4..8]);
        let flags = u32::from_le_bytes(f);
        if flags & !HdrFlags::ALL != 0 {
            return Err(WireError::BadFlags(flags));
        }
        let h =
            Header { op, flags: HdrFlags(flags), len: u64_at(8), tag: u64_at(16), data: u64_at(24), id: u64_at(32) };
        if h.flags.has(HdrFlags::DC) && op != OpCode::Rts {
            return Err(WireError::Malformed("delivery-complete flag on a frame other than a request to send"));
        }
        match op {
            OpCode::Cts | OpCode::Shutdown | OpCode::Nack | OpCode::Ack if h.len != 0 => {
                return Err(WireError::Malformed("control frame with a payload"))
            }
            OpCode::Hello | OpCode::HelloAck | OpCode::Reject if h.len > CONTROL_MAX => {
                return Err(WireError::TooLong { len: h.len, max: CONTROL_MAX })
            }
            OpCode::Hello if h.tag > h.len || h.data > h.len - h.tag => {
                return Err(WireError::Malformed("hello lengths do not add up"))
            }
            OpCode::Msg | OpCode::Rts | OpCode::Data if h.len > max_len => {
                return Err(WireError::TooLong { len: h.len, max: max_len })
            }
            OpCode::WriteReq if h.len < RmaDesc::LEN as u64 => {
                return Err(WireError::Malformed("write without its target"))
            }
            OpCode::WriteReq if h.len > (RmaDesc::LEN + RMA_CHUNK) as u64 => {
                return Err(WireError::TooLong { len: h.len, max: (RmaDesc::LEN + RMA_CHUNK) as u64 })
            }
            OpCode::ReadReq | OpCode::RmaResp if h.len > RMA_CHUNK as u64 => {
                return Err(WireError::TooLong { len: h.len, max: RMA_CHUNK as u64 })
            }
            OpCode::AtomicReq if h.len < (RmaDesc::LEN + AtomicHdr::LEN) as u64 => {
                return Err(WireError::Malformed("atomic without its target"))
            }
            OpCode::AtomicReq if h.len > (RmaDesc::LEN + AtomicHdr::LEN + 2 * ATOMIC_MAX) as u64 => {
                return Err(WireError::TooLong {
                    len: h.len,
                    max: (RmaDesc::LEN + AtomicHdr::LEN + 2 * ATOMIC_MAX) as u64,
                })
            }
            _ => {}
        }
        Ok(h)
    }

    /// Bytes of payload that follow this header on the stream.
    pub fn payload_len(&self) -> u64 {
        match self.op {
            OpCode::Rts | OpCode::Cts | OpCode::Shutdown | OpCode::Nack | OpCode::ReadReq | OpCode::Ack => 0,
            _ => self.len,
        }
    }
}

/// The most bytes a connection-control frame (hello, accept, reject) may carry.
pub const CONTROL_MAX: u64 = 4096;

/// A hello's payload split into its parts: the sender's name (RDM endpoints; empty
/// for MSG) and the connection data that follows it. Both are the peer's bytes: the
/// name is checked only for its length here ([`Hello::name_addr`] parses it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello<'a> {
    /// The sender's name, `tag` bytes.
    pub name: &'a [u8],
    /// The connection data, `data` bytes.
    pub data: &'a [u8],
}

impl<'a> Hello<'a> {
    /// Split the payload of a decoded [`OpCode::Hello`] header `h`: `payload` must
    /// be exactly `h.len` bytes, the name's `h.tag` bytes then the data's `h.data`,
    /// nothing else.
    pub fn decode(h: &Header, payload: &'a [u8]) -> Result<Hello<'a>, WireError> {
        if h.op != OpCode::Hello {
            return Err(WireError::Malformed("not a hello"));
        }
        if payload.len() as u64 != h.len {
            return Err(WireError::Malformed("hello payload of another length than its header's"));
        }
        // `Header::decode` checked `tag <= len` and `data <= len - tag`; a header
        // built otherwise is checked again here.
        let name_len = usize::try_from(h.tag).ok().filter(|&n| n <= payload.len());
        let name_len = name_len.ok_or(WireError::Malformed("hello lengths do not add up"))?;
        let (name, data) = payload.split_at(name_len);
        if data.len() as u64 != h.data {
            return Err(WireError::Malformed("hello lengths do not add up"));
        }
        Ok(Hello { name, data })
    }

    /// The header and payload of a hello with this name and data, from a sender of
    /// epoch `epoch`.
    pub fn encode(&self, epoch: u64) -> (Header, Vec<u8>) {
        let mut payload = Vec::with_capacity(self.name.len() + self.data.len());
        payload.extend_from_slice(self.name);
        payload.extend_from_slice(self.data);
        let h = Header {
            len: payload.len() as u64,
            tag: self.name.len() as u64,
            data: self.data.len() as u64,
            id: epoch,
            ..Header::new(OpCode::Hello)
        };
        (h, payload)
    }

    /// The name as an RDM endpoint's socket address (its text form, as
    /// `SocketAddr`'s `Display` writes it), if it is one.
    pub fn name_addr(&self) -> Option<std::net::SocketAddr> {
        std::str::from_utf8(self.name).ok()?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let h = Header { op: OpCode::Msg, flags: HdrFlags(HdrFlags::TAGGED), len: 99, tag: u64::MAX, data: 7, id: 3 };
        assert_eq!(Header::decode(&h.encode(), 1 << 20), Ok(h));
        let r = Header { op: OpCode::Rts, len: 1 << 30, ..Header::new(OpCode::Rts) };
        assert_eq!(r.payload_len(), 0);
        assert_eq!(Header::decode(&r.encode(), 1 << 40).unwrap().len, 1 << 30);
    }

    #[test]
    fn refuses_what_a_peer_should_not_send() {
        let good = Header::new(OpCode::Msg).encode();
        let mut b = good;
        b[0] = 0;
        assert!(matches!(Header::decode(&b, 10), Err(WireError::BadMagic(0))));
        let mut b = good;
        b[1] = 9;
        assert!(matches!(Header::decode(&b, 10), Err(WireError::BadVersion(9))));
        let mut b = good;
        b[2] = 200;
        assert!(matches!(Header::decode(&b, 10), Err(WireError::BadOp(200))));
        let mut b = good;
        b[4] = 0x80;
        assert!(matches!(Header::decode(&b, 10), Err(WireError::BadFlags(_))));
        let long = Header { len: 11, ..Header::new(OpCode::Msg) }.encode();
        assert!(matches!(Header::decode(&long, 10), Err(WireError::TooLong { .. })));
        let cts = Header { len: 1, ..Header::new(OpCode::Cts) }.encode();
        assert!(matches!(Header::decode(&cts, 10), Err(WireError::Malformed(_))));
        let hello = Header { len: 4, tag: 3, data: 2, ..Header::new(OpCode::Hello) }.encode();
        assert!(matches!(Header::decode(&hello, 10), Err(WireError::Malformed(_))));
        let w = Header { len: 15, ..Header::new(OpCode::WriteReq) }.encode();
        assert!(matches!(Header::decode(&w, 1 << 40), Err(WireError::Malformed(_))));
        let w = Header { len: (RMA_CHUNK + 17) as u64, ..Header::new(OpCode::WriteReq) }.encode();
        assert!(matches!(Header::decode(&w, 1 << 40), Err(WireError::TooLong { .. })));
        let r = Header { len: (RMA_CHUNK + 1) as u64, ..Header::new(OpCode::ReadReq) }.encode();
        assert!(matches!(Header::decode(&r, 1 << 40), Err(WireError::TooLong { .. })));
        let a = Header { len: 23, ..Header::new(OpCode::AtomicReq) }.encode();
        assert!(matches!(Header::decode(&a, 1 << 40), Err(WireError::Malformed(_))));
        assert_eq!(Header { len: 99, ..Header::new(OpCode::ReadReq) }.payload_len(), 0);
        let d = RmaDesc { addr: 1 << 40, key: 7 };
        assert_eq!(RmaDesc::decode(&d.encode()), Some(d));
        assert_eq!(RmaDesc::decode(&[0u8; 15]), None);
        let ah = AtomicHdr { op: 2, datatype: 7, kind: 1, count: 9 };
        assert_eq!(AtomicHdr::decode(&ah.encode()), Some(ah));
    }

    #[test]
    fn delivery_acknowledgements() {
        let rts =
            Header { flags: HdrFlags(HdrFlags::DC | HdrFlags::TAGGED), len: 64, id: 5, ..Header::new(OpCode::Rts) };
        assert_eq!(Header::decode(&rts.encode(), 1 << 20), Ok(rts));
        let ack = Header { id: 5, data: 0, ..Header::new(OpCode::Ack) };
        assert_eq!(Header::decode(&ack.encode(), 0), Ok(ack));
        assert_eq!(ack.payload_len(), 0);
        // An acknowledgement with a payload, or the flag on anything but a request
        // to send, is a protocol error.
        let long = Header { len: 1, ..ack }.encode();
        assert!(matches!(Header::decode(&long, 1 << 20), Err(WireError::Malformed(_))));
        for op in [OpCode::Msg, OpCode::Data, OpCode::Cts, OpCode::Ack] {
            let h = Header { flags: HdrFlags(HdrFlags::DC), ..Header::new(op) }.encode();
            assert!(matches!(Header::decode(&h, 1 << 20), Err(WireError::Malformed(_))), "{op:?}");
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut x: u64 = 0x9E3779B97F4A7C15;
        for _ in 0..100_000 {
            let mut b = [0u8; HDR_LEN];
            for c in b.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *c = x as u8;
            }
            if x % 3 == 0 {
                b[0] = MAGIC;
                b[1] = WIRE_VERSION;
                b[2] = (x % 16) as u8;
                b[3] = 0;
            }
            let _ = Header::decode(&b, 1 << 30);
        }
    }

    #[test]
    fn message_fast_path_agrees_with_the_general_decode() {
        let mut x: u64 = 0x2545F4914F6CDD1D;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..200_000u32 {
            let mut b = [0u8; HDR_LEN];
            for c in b.chunks_mut(8) {
                c.copy_from_slice(&next().to_le_bytes());
            }
            // Mostly near-messages: valid first bytes, a few bits of the flags and
            // the first word disturbed, lengths around the limit.
            if i % 4 != 0 {
                let r = next();
                b[0] = MAGIC;
                b[1] = WIRE_VERSION;
                b[2] = OpCode::Msg as u8;
                b[3] = 0;
                b[4..8].copy_from_slice(&((r & 0xff) as u32 & if r & 0x100 == 0 { 3 } else { 0xff }).to_le_bytes());
                b[8..16].copy_from_slice(&((r >> 16) % 2048).to_le_bytes());
                if r & 0x200 != 0 {
                    let k = ((r >> 10) % 8) as usize;
                    b[k] ^= 1 << ((r >> 13) % 8);
                }
            }
            assert_eq!(Header::decode(&b, 1024), Header::decode_any(&b, 1024), "{b:?}");
        }
    }
}
