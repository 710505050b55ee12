//! The body of the `fi_control` fuzz target, and a stable-toolchain smoke run of it.
//!
//! `fi_control` (in `providers/util/fuzz/fuzz_targets/`, which includes this file)
//! feeds what the peer of `fi_pingpong` or `fi_perf` sends to the decoders that
//! read it: the control connection's framing ([`oob::split_frame`]), the messages'
//! words and fields, both tools' `PLAN`, numbers and fabric addresses in the
//! replies, and `fi_perf`'s credit messages (which travel over the fabric).

#![forbid(unsafe_code)]

use fabric::Address;
use fi_tools::fiperf;
use fi_tools::oob::{self, MAX_MSG};
use fi_tools::pingpong::{self, field};

/// The largest message size the smoke server offers (as a provider's
/// `max_msg_size`), for `fi_pingpong`'s plan.
const SERVER_MAX: usize = 1 << 30;

/// Fuzz body of `fi_control`: `data` as the bytes of a control connection, split
/// into messages as `Ctrl::recv` does, each decoded as the tools decode what the
/// peer sends; the whole of `data` as a credit message too. Checks: no panic, a
/// frame re-encodes to the same bytes and is within [`MAX_MSG`], an oversized one
/// is an error at once; accepted plans are within their caps and round-trip;
/// fields are parts of the message; numbers and addresses round-trip.
pub fn fi_control(data: &[u8]) {
    check_credit(data);
    let mut rest = data;
    loop {
        match oob::split_frame(rest) {
            Ok(Some((msg, took))) => {
                assert_eq!(took, 4 + msg.len());
                assert!(msg.len() <= MAX_MSG);
                assert_eq!(oob::encode_frame(msg).expect("a frame's message re-encodes"), &rest[..took]);
                check_message(msg);
                rest = &rest[took..];
            }
            Ok(None) => {
                // Not all there: the length, if any, is within the limit.
                if let Some(h) = rest.first_chunk::<4>() {
                    assert!(u32::from_be_bytes(*h) as usize <= MAX_MSG);
                    assert!(rest.len() < 4 + u32::from_be_bytes(*h) as usize);
                }
                break;
            }
            Err(_) => {
                let h = rest.first_chunk::<4>().expect("an error needs a length");
                assert!(u32::from_be_bytes(*h) as usize > MAX_MSG);
                break;
            }
        }
    }
}

/// One control message, as either tool reads it.
fn check_message(msg: &[u8]) {
    // fi_perf's server reads DONE and ERR lossily while it polls.
    let _ = String::from_utf8_lossy(msg).strip_prefix("ERR ");
    let Ok(m) = std::str::from_utf8(msg) else { return };
    let (word, rest) = m.split_once(' ').unwrap_or((m, ""));
    assert!(!word.contains(' '));
    if let Some((plan, name)) = pingpong::Plan::decode(rest, SERVER_MAX) {
        assert!(plan.sizes.len() <= 64 && plan.sizes.iter().all(|&s| s <= SERVER_MAX));
        let again = plan.encode(None);
        let (back, none) = pingpong::Plan::decode(again.strip_prefix("PLAN ").expect("PLAN"), SERVER_MAX)
            .expect("an encoded plan decodes");
        assert_eq!((back, none), (plan, None));
        check_address(name.as_deref());
    }
    if let Some((plan, name)) = fiperf::Plan::decode(rest) {
        assert!(plan.sizes.len() <= 64 && plan.sizes.iter().all(|&s| s <= fiperf::opts::MAX_SIZE));
        assert!((1..=fiperf::opts::MAX_ITERS).contains(&plan.iterations));
        assert!((1..=fiperf::opts::MAX_DEPTH).contains(&plan.depth));
        let again = plan.encode(None);
        let (back, none) =
            fiperf::Plan::decode(again.strip_prefix("PLAN ").expect("PLAN")).expect("an encoded plan decodes");
        assert_eq!((back, none), (plan, None));
        check_address(name.as_deref());
    }
    for key in ["name", "max_msg", "prov", "addr", "key", "credits", "ep", "mode", "test", "iters"] {
        if let Some(v) = field(rest, key) {
            // A value is part of the message, after its key.
            assert!(rest.contains(&format!("{key}={v}")));
            if let Some(n) = fiperf::parse_u64(v) {
                assert_eq!(fiperf::parse_u64(&n.to_string()), Some(n));
            }
            if key == "name" {
                check_address(Some(v));
            }
        }
    }
    // SYNC and DONE carry a number.
    let _ = rest.parse::<usize>();
}

/// A peer's fabric address: one that parses prints back to itself.
fn check_address(name: Option<&str>) {
    if let Some(a) = name.and_then(|n| Address::parse(n).ok()) {
        assert_eq!(Address::parse(&a.to_uri()).ok(), Some(a));
    }
}

/// fi_perf's credit message: exactly 24 bytes, which re-encode.
fn check_credit(data: &[u8]) {
    match fiperf::decode_credit(data) {
        Some((idx, n, ns)) => assert_eq!(&fiperf::encode_credit(idx, n, ns)[..], data),
        None => assert_ne!(data.len(), fiperf::CREDIT_LEN),
    }
}

/// The messages the tools send each other, and near misses.
fn messages() -> Vec<String> {
    let mut v: Vec<String> = [
        "HELLO fabric-pingpong/1 ep=rdm mode=msg",
        "HELLO fabric-perf/1 test=send_bw ep=msg",
        "OK prov=tcp max_msg=1073741824 name=fi_sockaddr_in://127.0.0.1:4000",
        "OK prov=shm max_msg=5 name=fi_shm://fabric-shm-0-1-00ff",
        "OK prov=udp max_msg=x name=fi_sockaddr_in6://[::1]:9",
        "PLAN iters=1000 warmup=10 check=1 sizes=1,2,4,8192 name=fi_sockaddr_in://10.0.0.1:5",
        "PLAN iters=1000 warmup=10 depth=128 sizes=64,65536 name=-",
        "PLAN iters=1 warmup=0 check=0 sizes= name=-",
        "PLAN iters=1 warmup=1 depth=1 sizes=1,18446744073709551615 name=-",
        "PLAN iters=1 warmup=0 check=0 sizes=1,18446744073709551615 name=-",
        "PLAN iters=99999999999999999999 warmup=1 depth=1 sizes=1 name=-",
        "READY addr=0x7f0000001000 key=0xf19e4f",
        "READY addr=12 key=0x",
        "GO credits=64",
        "GO credits=0",
        "SYNC 4096",
        "SYNC 0 4096",
        "DONE 1000",
        "ACK",
        "BYE",
        "ERR it broke",
        "name=fi_sockaddr_in://256.0.0.1:1 name=fi_sockaddr://[::1]:1",
        "",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let many = vec!["1"; 65].join(",");
    v.push(format!("PLAN iters=1 warmup=1 depth=1 sizes={many} name=-"));
    v
}

fn frame(m: &[u8]) -> Vec<u8> {
    let mut f = (m.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(m);
    f
}

#[test]
fn fi_control_smoke() {
    let msgs = messages();
    let mut rng = fabric_testkit::Rng::new(10);
    let mut plans = 0;
    for i in 0..100_000 {
        let mut d = Vec::new();
        for _ in 0..=rng.index(3) {
            d.extend_from_slice(&frame(msgs[rng.index(msgs.len())].as_bytes()));
        }
        if i % 2 == 1 {
            for _ in 0..=rng.index(3) {
                if d.is_empty() {
                    break;
                }
                let at = rng.index(d.len());
                match rng.index(5) {
                    0 => d[at] ^= 1 << rng.index(8),
                    1 => d[at] = b" =,-x0123456789"[rng.index(15)],
                    2 => d.truncate(at),
                    3 => d.insert(at, rng.next() as u8),
                    _ => d[at] = rng.next() as u8,
                }
            }
        }
        if i % 16 == 0 {
            d = vec![0u8; fiperf::CREDIT_LEN];
            d.iter_mut().for_each(|b| *b = rng.next() as u8);
        }
        if let Ok(Some((m, _))) = oob::split_frame(&d) {
            let m = String::from_utf8_lossy(m);
            let rest = m.split_once(' ').map_or("", |r| r.1);
            plans += usize::from(pingpong::Plan::decode(rest, SERVER_MAX).is_some());
        }
        fi_control(&d);
    }
    assert!(plans > 2_000, "{plans}");
    // Oversized frames are an error at once, whatever follows.
    let huge = ((MAX_MSG + 1) as u32).to_be_bytes();
    assert!(oob::split_frame(&huge).is_err());
    fi_control(&huge);
    assert_eq!(oob::split_frame(&(MAX_MSG as u32).to_be_bytes()).ok(), Some(None));
}

/// Write seed inputs for the `fi_control` fuzz target into
/// `providers/util/fuzz/corpus/fi_control/`. Run by hand:
/// `cargo test -p fi-tools --test fuzz_smoke -- --ignored write_fuzz_seeds`.
#[test]
#[ignore = "writes files; run by hand before fuzzing"]
fn write_fuzz_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../providers/util/fuzz/corpus/fi_control");
    std::fs::create_dir_all(&dir).expect("create the corpus directory");
    for (i, m) in messages().iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{i:02}")), frame(m.as_bytes())).expect("write a seed");
    }
}
