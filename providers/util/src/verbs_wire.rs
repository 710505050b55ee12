//! The verbs provider's own encodings of what a peer sends: the private data of a
//! connection request, accept or reject, an RDM peer's name in it, and the pieces
//! a rendezvous announcement (`Rts`) lists. Pure functions, kept here rather than
//! in the verbs crate (which needs libibverbs to build) so that they are tested and
//! fuzzed on every machine.
//!
//! Private data: magic `FB 56`, version 1, kind ([`PD_MSG`] or [`PD_RDM`]), the
//! length of what follows (0 to 255), then that many bytes (the application's
//! connection data for MSG, the sender's name for RDM). The length is needed: the
//! connection manager reports an event's private data padded to the transport's
//! fixed size.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

/// The first bytes of our private data: magic, version, kind (MSG or RDM).
pub const PD_MAGIC: [u8; 2] = [0xFB, 0x56];
/// The private-data layout version.
pub const PD_VERSION: u8 = 1;
/// Private data of a MSG endpoint's connect, accept or reject.
pub const PD_MSG: u8 = 1;
/// Private data of an RDM endpoint's connection (its name, or nothing in an accept).
pub const PD_RDM: u8 = 2;
/// Bytes of our private-data header.
pub const PD_HDR: usize = 5;
/// Bytes of an RDM peer's encoded name.
pub const NAME_LEN: usize = 20;
/// Bytes of one piece in a rendezvous announcement: address, length, remote key.
pub const RTS_PIECE_LEN: usize = 20;

/// Our private-data header (magic, version, kind, length) followed by `data`
/// (at most 255 bytes; more is cut).
pub fn private_data(kind: u8, data: &[u8]) -> Vec<u8> {
    let n = data.len().min(255);
    let mut v = Vec::with_capacity(PD_HDR + n);
    v.extend_from_slice(&PD_MAGIC);
    v.push(PD_VERSION);
    v.push(kind);
    v.push(n as u8);
    v.extend_from_slice(&data[..n]);
    v
}

/// The kind and the application's part of private data, if it carries our header
/// and the length it gives fits (bytes after it are the transport's padding).
pub fn strip_private(data: &[u8]) -> Option<(u8, &[u8])> {
    if data.len() >= PD_HDR && data[..2] == PD_MAGIC && data[2] == PD_VERSION {
        let n = data[4] as usize;
        data.get(PD_HDR..PD_HDR + n).map(|d| (data[3], d))
    } else {
        None
    }
}

/// An RDM peer's name in connection private data: family (4 or 6), a reserved
/// byte, port (little-endian), 16 address bytes (IPv4 in the first four).
pub fn encode_name(a: SocketAddr) -> [u8; NAME_LEN] {
    let mut b = [0u8; NAME_LEN];
    match a {
        SocketAddr::V4(v4) => {
            b[0] = 4;
            b[4..8].copy_from_slice(&v4.ip().octets());
        }
        SocketAddr::V6(v6) => {
            b[0] = 6;
            b[4..20].copy_from_slice(&v6.ip().octets());
        }
    }
    b[2..4].copy_from_slice(&a.port().to_le_bytes());
    b
}

/// Decode [`encode_name`]'s bytes (the first [`NAME_LEN`] of `b`); `None` for an
/// unknown family or too few bytes. The bytes [`encode_name`] leaves zero are not
/// looked at.
pub fn decode_name(b: &[u8]) -> Option<SocketAddr> {
    let b = b.get(..NAME_LEN)?;
    let port = u16::from_le_bytes([b[2], b[3]]);
    match b[0] {
        4 => Some(SocketAddr::new(Ipv4Addr::new(b[4], b[5], b[6], b[7]).into(), port)),
        6 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&b[4..20]);
            Some(SocketAddr::new(Ipv6Addr::from(o).into(), port))
        }
        _ => None,
    }
}

/// One piece of a rendezvous message the receiver reads: the sender's address, its
/// length and the remote key of its registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtsPiece {
    /// The sender's address of the piece.
    pub addr: u64,
    /// Its length in bytes.
    pub len: u64,
    /// The remote key to read it with.
    pub rkey: u32,
}

/// The body of a rendezvous announcement: a count byte, then that many pieces of
/// [`RTS_PIECE_LEN`] bytes each (address, length, key; little-endian).
pub fn encode_rts(pieces: &[RtsPiece]) -> Vec<u8> {
    let n = pieces.len().min(u8::MAX as usize);
    let mut v = Vec::with_capacity(1 + n * RTS_PIECE_LEN);
    v.push(n as u8);
    for p in &pieces[..n] {
        v.extend_from_slice(&p.addr.to_le_bytes());
        v.extend_from_slice(&p.len.to_le_bytes());
        v.extend_from_slice(&p.rkey.to_le_bytes());
    }
    v
}

/// Decode a rendezvous announcement's body for a message of `len` bytes: at most
/// `max_pieces` pieces, whose lengths add up to `len` exactly (without overflow).
/// Bytes after the pieces are ignored. `Err` names what is wrong (a protocol error).
pub fn decode_rts(body: &[u8], len: u64, max_pieces: usize) -> Result<Vec<RtsPiece>, &'static str> {
    let cnt = body.first().copied().unwrap_or(0) as usize;
    if cnt > max_pieces || body.len() < 1 + cnt * RTS_PIECE_LEN {
        return Err("malformed rendezvous announcement");
    }
    let pieces: Vec<RtsPiece> = body[1..1 + cnt * RTS_PIECE_LEN]
        .chunks_exact(RTS_PIECE_LEN)
        .map(|p| {
            let u64_at = |i: usize| {
                let mut a = [0u8; 8];
                a.copy_from_slice(&p[i..i + 8]);
                u64::from_le_bytes(a)
            };
            RtsPiece { addr: u64_at(0), len: u64_at(8), rkey: u32::from_le_bytes([p[16], p[17], p[18], p[19]]) }
        })
        .collect();
    let total = pieces.iter().try_fold(0u64, |sum, p| sum.checked_add(p.len));
    if total != Some(len) {
        return Err("rendezvous pieces do not add up");
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_in_private_data() {
        for a in ["10.0.2.15:7000", "[fe80::1]:9"] {
            let a: SocketAddr = a.parse().unwrap();
            let pd = private_data(PD_RDM, &encode_name(a));
            assert!(pd.len() <= 56, "fits an RC connect's private data");
            let (k, rest) = strip_private(&pd).unwrap();
            assert_eq!(k, PD_RDM);
            assert_eq!(decode_name(rest), Some(a));
        }
        assert_eq!(strip_private(b"xx"), None);
        // Padded as the connection manager reports it: the length says where
        // the data ends.
        let mut padded = private_data(PD_MSG, b"abc");
        padded.resize(56, 0);
        assert_eq!(strip_private(&padded), Some((PD_MSG, &b"abc"[..])));
        padded[4] = 200;
        assert_eq!(strip_private(&padded), None, "a length past the end is refused");
        assert_eq!(decode_name(&[9u8; 20]), None);
        assert_eq!(decode_name(&[4u8; 3]), None);
    }

    #[test]
    fn rendezvous_pieces() {
        let p = [RtsPiece { addr: 1 << 40, len: 100, rkey: 7 }, RtsPiece { addr: 5, len: 28, rkey: u32::MAX }];
        let b = encode_rts(&p);
        assert_eq!(b.len(), 1 + 2 * RTS_PIECE_LEN);
        assert_eq!(decode_rts(&b, 128, 4), Ok(p.to_vec()));
        assert!(decode_rts(&b, 127, 4).is_err(), "lengths must add up");
        assert!(decode_rts(&b, 128, 1).is_err(), "more pieces than allowed");
        assert!(decode_rts(&b[..b.len() - 1], 128, 4).is_err(), "short");
        assert_eq!(decode_rts(&[0], 0, 4), Ok(Vec::new()));
        assert!(decode_rts(&[], 0, 4).is_err(), "no count");
        // Lengths whose sum overflows are refused, not wrapped (nor a panic).
        let big = [RtsPiece { addr: 0, len: u64::MAX, rkey: 0 }, RtsPiece { addr: 0, len: 2, rkey: 0 }];
        assert!(decode_rts(&encode_rts(&big), 1, 4).is_err());
    }
}
