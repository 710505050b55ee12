//! The body of the `shm_entry` fuzz target, and a stable-toolchain smoke run of it.
//!
//! `shm_entry` (in `providers/util/fuzz/fuzz_targets/`, which includes this file)
//! feeds what a peer process writes into shared memory to the decoders that read
//! it: a ring entry's bytes to [`Entry::decode`] and the accessors of a decoded
//! entry (inline payload, pieces, an atomic's operation), and a slot's sender name to
//! [`valid_name`]. The smoke test here runs the same body on valid entries of
//! every kind and mode, near-valid ones and seeded mutations.

use fabric_shm::proto::{self, flags, Entry, Kind, Mode, HDR, INLINE_MAX};
use fabric_shm::ring::ENTRY_PAYLOAD;
use fabric_shm::segment::{valid_name, BOUNCE_COUNT, BOUNCE_SIZE, JOBS, NAME_MAX};
use fabric_testkit::Rng;
use fabric_util::rx::IOV_LIMIT;

/// Fuzz body of `shm_entry`: the first [`ENTRY_PAYLOAD`] bytes (zero-padded) are a
/// ring entry, the rest a slot's sender name. Checks: no panic; an accepted
/// entry re-encodes to the same header bytes (but the reserved byte, which the
/// decoder ignores), its inline payload fits the entry, a bounce index names a
/// buffer and its length fits one, an `Iov` list's lengths add up to `len`
/// (and re-encode), a help names a job and a chunk size, an atomic's operation
/// packs back into `data`; an accepted name has the allowed characters and length.
pub fn shm_entry(data: &[u8]) {
    let mut raw = [0u8; ENTRY_PAYLOAD];
    let n = data.len().min(ENTRY_PAYLOAD);
    raw[..n].copy_from_slice(&data[..n]);
    check_entry(&raw);
    if let Ok(name) = std::str::from_utf8(&data[n..]) {
        if valid_name(name) {
            assert!(!name.is_empty() && name.len() <= NAME_MAX && !name.starts_with('.'));
            assert!(name.bytes().all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c)));
        }
    }
}

/// Decode one entry and check what a receiver relies on; whether it was accepted.
fn check_entry(raw: &[u8; ENTRY_PAYLOAD]) -> bool {
    let Ok(e) = Entry::decode(raw) else { return false };
    let mut again = *raw;
    e.encode(&mut again);
    assert_eq!((&again[..3], &again[4..HDR]), (&raw[..3], &raw[4..HDR]), "{e:?} re-encodes differently");
    assert_eq!(e.flags & !flags::ALL, 0);
    match e.mode {
        Mode::Inline => {
            assert!(e.len <= INLINE_MAX as u64);
            assert_eq!(e.inline(raw).len() as u64, e.len);
        }
        Mode::Bounce => assert!((e.aux as usize) < BOUNCE_COUNT && e.len <= BOUNCE_SIZE as u64),
        Mode::Iov => {
            let mut pieces = [(0u64, 0u64); IOV_LIMIT];
            let n = e.pieces(raw, &mut pieces);
            assert_eq!(n, e.aux as usize);
            assert!(n <= IOV_LIMIT);
            assert_eq!(pieces[..n].iter().map(|p| u128::from(p.1)).sum::<u128>(), u128::from(e.len));
            let mut put = *raw;
            proto::put_pieces(&mut put, &pieces[..n]);
            assert_eq!(put, *raw);
        }
        Mode::None | Mode::Stream => {}
    }
    if e.kind == Kind::Data {
        assert_eq!(e.mode, Mode::Bounce);
    }
    if e.kind == Kind::Help {
        assert!(e.mode == Mode::Iov && (e.key as usize) < JOBS && (1..=u64::from(u32::MAX)).contains(&e.addr));
    }
    if let Ok(word) = u32::try_from(e.data) {
        let (op, dt, kind) = proto::atomic_unaux(word);
        assert_eq!(proto::atomic_aux(op, dt, kind), word & 0x00FF_FFFF);
    }
    true
}

/// A valid entry of a random kind and mode, as a sender writes it.
fn valid_entry(rng: &mut Rng) -> [u8; ENTRY_PAYLOAD] {
    let kinds = [
        Kind::Msg,
        Kind::Cts,
        Kind::Data,
        Kind::Ack,
        Kind::Write,
        Kind::Read,
        Kind::Atomic,
        Kind::AtomicResp,
        Kind::Help,
    ];
    let kind = kinds[rng.index(kinds.len())];
    let mut e = Entry::new(kind);
    e.flags = rng.next() as u8 & flags::ALL;
    e.tag = rng.next();
    e.data = rng.next();
    e.id = rng.next();
    e.key = rng.next();
    e.addr = rng.next();
    let mut b = [0u8; ENTRY_PAYLOAD];
    for x in b.iter_mut() {
        *x = rng.next() as u8;
    }
    e.mode = match kind {
        Kind::Data => Mode::Bounce,
        Kind::Help => Mode::Iov,
        _ => [Mode::None, Mode::Inline, Mode::Bounce, Mode::Iov, Mode::Stream][rng.index(5)],
    };
    match e.mode {
        Mode::Inline => e.len = rng.index(INLINE_MAX + 1) as u64,
        Mode::Bounce => {
            e.aux = rng.index(BOUNCE_COUNT) as u32;
            e.len = rng.index(BOUNCE_SIZE + 1) as u64;
        }
        Mode::Iov => {
            let n = rng.index(IOV_LIMIT + 1);
            let pieces: Vec<(u64, u64)> = (0..n).map(|_| (rng.next(), rng.index(1 << 20) as u64)).collect();
            e.aux = n as u32;
            e.len = pieces.iter().map(|p| p.1).sum();
            proto::put_pieces(&mut b, &pieces);
        }
        Mode::None | Mode::Stream => e.len = rng.next() >> rng.index(64),
    }
    if kind == Kind::Help {
        e.key = rng.index(JOBS) as u64;
        e.addr = 1 + rng.index(1 << 20) as u64;
    }
    if kind == Kind::Atomic {
        e.data = u64::from(proto::atomic_aux(rng.index(20) as u8, rng.index(10) as u8, rng.index(3) as u8));
    }
    e.encode(&mut b);
    b
}

#[test]
fn shm_entry_smoke() {
    let mut rng = Rng::new(8);
    let mut accepted = 0;
    for i in 0..200_000 {
        let mut d = valid_entry(&mut rng).to_vec();
        if i % 2 == 0 {
            assert!(check_entry(&d[..].try_into().expect("an entry")), "a valid entry refused");
        } else {
            // Damage one to four bytes of the header or the piece list, with bias
            // to the fields the decoder checks.
            for _ in 0..=rng.index(3) {
                let at = if rng.index(2) == 0 { rng.index(8) } else { rng.index(HDR + 16 * IOV_LIMIT) };
                d[at] = match rng.index(4) {
                    0 => d[at] ^ (1 << rng.index(8)),
                    1 => [0, 1, 2, 3, 4, 5, 8, 9, 10, 0x7F, 0x80, 0xFF][rng.index(12)],
                    _ => rng.next() as u8,
                };
            }
            if rng.index(8) == 0 {
                d.truncate(rng.index(ENTRY_PAYLOAD));
            }
        }
        if rng.index(4) == 0 {
            d.resize(ENTRY_PAYLOAD, 0);
            let names = ["fabric-shm-0-1-00ff", ".hidden", "a/b", "", "x", "é"];
            d.extend_from_slice(names[rng.index(names.len())].as_bytes());
        }
        let mut raw = [0u8; ENTRY_PAYLOAD];
        let n = d.len().min(ENTRY_PAYLOAD);
        raw[..n].copy_from_slice(&d[..n]);
        accepted += usize::from(Entry::decode(&raw).is_ok());
        shm_entry(&d);
    }
    // The valid half, and damage to bytes the decoder does not check.
    assert!(accepted > 100_000 && accepted < 190_000, "{accepted}");
    // Regressions and edge cases: an Iov list whose lengths overflow, a help
    // naming a job past the last, the longest name.
    let mut e = Entry::new(Kind::Msg);
    e.mode = Mode::Iov;
    e.aux = 2;
    e.len = 1;
    let mut b = [0u8; ENTRY_PAYLOAD];
    e.encode(&mut b);
    proto::put_pieces(&mut b, &[(0, u64::MAX), (0, 2)]);
    assert!(Entry::decode(&b).is_err());
    shm_entry(&b);
    let mut h = Entry::new(Kind::Help);
    h.mode = Mode::Iov;
    h.key = JOBS as u64;
    h.addr = 1;
    h.encode(&mut b);
    assert!(Entry::decode(&b).is_err());
    let mut d = vec![0u8; ENTRY_PAYLOAD];
    d.extend(std::iter::repeat(b'a').take(NAME_MAX + 1));
    shm_entry(&d);
    assert!(!valid_name(&"a".repeat(NAME_MAX + 1)) && valid_name(&"a".repeat(NAME_MAX)));
}

/// Write seed inputs for the `shm_entry` fuzz target into
/// `providers/util/fuzz/corpus/shm_entry/`. Run by hand:
/// `cargo test -p fabric-shm --test fuzz_smoke -- --ignored write_fuzz_seeds`.
#[test]
#[ignore = "writes files; run by hand before fuzzing"]
fn write_fuzz_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../util/fuzz/corpus/shm_entry");
    std::fs::create_dir_all(&dir).expect("create the corpus directory");
    let mut rng = Rng::new(9);
    for i in 0..32 {
        std::fs::write(dir.join(format!("seed-{i:02}")), valid_entry(&mut rng)).expect("write a seed");
    }
}
