//! RMA over RDM and MSG endpoints: writes read back at sizes from one byte to
//! several requests' worth, at offsets inside a region; vectored writes and
//! reads; writes with remote CQ data (posted and unexpected receives); injected
//! writes; counters of remote writes and reads at the target; and every access a
//! region does not grant (unknown or closed key, outside the region, wrapping
//! past `u64::MAX`, missing access rights), each refused with `FI_EACCES` on the
//! initiator's queue, the target's memory untouched and the connection usable.
//!
//! The target's memory is checked through the API only: by reading it back with
//! RMA, and at the end by closing the region, which gives its buffer back.

use crate::common::*;
use fabric::*;
use std::cell::RefCell;
use std::time::Instant;

/// Expect the success of a write (`flags` RMA | WRITE) with context `ctx`; give
/// the buffers back.
#[track_caller]
fn write_done(p: &Pair, ctx: u64, what: &str) -> Vec<Buf> {
    let c = ok(p.next_a(), what);
    assert_eq!(c.context, ctx, "{what}: context");
    assert!(c.flags.contains(Caps::RMA | Caps::WRITE), "{what}: flags {:?}", c.flags);
    c.buffers.into_vec()
}

/// Expect the success of a read (`flags` RMA | READ) with context `ctx`; give the
/// buffers back.
#[track_caller]
fn read_done(p: &Pair, ctx: u64, what: &str) -> Vec<Buf> {
    let c = ok(p.next_a(), what);
    assert_eq!(c.context, ctx, "{what}: context");
    assert!(c.flags.contains(Caps::RMA | Caps::READ), "{what}: flags {:?}", c.flags);
    c.buffers.into_vec()
}

/// Read `len` bytes at `at` (one buffer) and return them.
#[track_caller]
fn read_back(p: &Pair, at: Remote, len: usize, ctx: u64, what: &str) -> Vec<u8> {
    p.a.ep.read(Buf::from(vec![FILL; len]), p.a_to_b, at, ctx).expect("post read");
    let mut bufs = read_done(p, ctx, what);
    assert_eq!(bufs.len(), 1, "{what}: one buffer given back");
    let b = bufs.pop().expect("one buffer");
    assert_eq!(b.len(), len, "{what}: length of the buffer given back");
    b.into_vec()
}

/// Check the bytes around `[off, off + len)` (one more each side) against `model`.
#[track_caller]
fn check_window(p: &Pair, r: &Region, model: &[u8], off: usize, len: usize, ctx: u64, what: &str) {
    let lo = off.saturating_sub(1);
    let hi = (off + len + 1).min(model.len());
    let got = read_back(p, r.at(lo as u64), hi - lo, ctx, what);
    assert_bytes(&got, &model[lo..hi], what);
}

// ------------------------------------------------------------------ sizes

/// Region for the sizes test: room for 9 MiB at an offset well inside.
const SIZES_REGION: usize = 12 * MIB + 4096;

/// (bytes, offset): one byte at the start and at the end, odd sizes at odd
/// offsets, a page, 1 MiB, and 9 MiB (more than two 4 MiB requests).
const WRITES: &[(usize, usize)] = &[
    (1, 0),
    (1, SIZES_REGION - 1),
    (3, 7),
    (4093, 1001),
    (4096, 8192),
    (4096, SIZES_REGION - 4096),
    (MIB, 12_345),
    (9 * MIB, 2 * MIB + 17),
    (9 * MIB + 1, 3 * MIB - 1),
];

fn write_read_sizes(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::RMA) else { return };
    let max = p.info.ep_attr.max_msg_size;
    let mut model = pattern(SIZES_REGION, 1);
    let r = Region::new(&p.b, model.clone(), RW);
    for (i, &(size, off)) in WRITES.iter().enumerate() {
        if size > max {
            skip(format!("{size}-byte write: above max_msg_size {max}"));
            continue;
        }
        let what = format!("{t} write of {size} bytes at offset {off}");
        let data = pattern(size, 100 + i as u64);
        let ctx = 10 * i as u64;
        p.a.ep.write(Buf::from(data.clone()), p.a_to_b, r.at(off as u64), ctx).expect("post write");
        let back = write_done(&p, ctx, &what);
        assert_eq!(back.len(), 1, "{what}: one buffer given back");
        assert_bytes(&back[0], &data, &format!("{what}: buffer given back"));
        model[off..off + size].copy_from_slice(&data);
        // Read exactly what was written, then the bytes around it.
        let got = read_back(&p, r.at(off as u64), size, ctx + 1, &what);
        assert_bytes(&got, &data, &format!("{what}: read back"));
        check_window(&p, &r, &model, off, size, ctx + 2, &format!("{what}: neighbours"));
    }
    assert_eq!(p.a.cq.cq.in_flight(), 0, "every operation completed once");
    assert_quiet(&p.b.cq, &p.drivers(), "writes and reads give the target no completion");
    assert_bytes(&r.close(), &model, "the region after every write");
}

rdm_and_msg!(write_read_sizes: rdm_write_read_sizes, msg_write_read_sizes);

// ------------------------------------------------------------------ vectored

/// Lengths of `n` pieces of `total` bytes: `sizes` cycled, the last the rest.
fn cut(total: usize, sizes: &[usize], n: usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(n);
    let mut left = total;
    for i in 0..n {
        let take = if i + 1 == n { left } else { sizes[i % sizes.len()].min(left) };
        out.push(take);
        left -= take;
    }
    out
}

fn pieces(data: &[u8], lens: &[usize]) -> Vec<Buf> {
    let mut off = 0;
    lens.iter()
        .map(|&l| {
            let b = Buf::from(&data[off..off + l]);
            off += l;
            b
        })
        .collect()
}

fn vectored(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::RMA) else { return };
    let lim = p.info.tx_attr.iov_limit;
    if lim < 2 {
        skip(format!("tx iov_limit {lim}: no vectored RMA"));
        return;
    }
    let n = lim.min(4);
    let region = 8 * MIB;
    let mut model = pattern(region, 2);
    let r = Region::new(&p.b, model.clone(), RW);
    // Small pieces, and large ones whose sum crosses 4 MiB inside a piece.
    let cases: [(&[usize], &[usize], usize); 2] =
        [(&[1, 7, 4096, 3], &[2, 4000, 11, 5], 5), (&[3 * MIB, 1, 2 * MIB + 5, 7], &[4 * MIB - 1, 2, MIB, 3], MIB + 3)];
    for (k, &(wsizes, rsizes, off)) in cases.iter().enumerate() {
        let wlens = cut(wsizes.iter().take(n).sum(), wsizes, n);
        let total: usize = wlens.iter().sum();
        let what = format!("{t} writev of {n} pieces ({total} bytes) at offset {off}");
        let data = pattern(total, 200 + k as u64);
        let ctx = 10 * k as u64;
        p.a.ep.writev(pieces(&data, &wlens), p.a_to_b, r.at(off as u64), ctx).expect("post writev");
        let back = write_done(&p, ctx, &what);
        assert_eq!(back.len(), n, "{what}: every piece given back");
        let sent: Vec<u8> = back.iter().flat_map(|b| b.as_slice().iter().copied()).collect();
        assert_bytes(&sent, &data, &format!("{what}: pieces given back"));
        model[off..off + total].copy_from_slice(&data);
        // One read of the whole, then a readv cut differently.
        assert_bytes(&read_back(&p, r.at(off as u64), total, ctx + 1, &what), &data, &format!("{what}: read back"));
        let rlens = cut(total, rsizes, n);
        let bufs: Vec<Buf> = rlens.iter().map(|&l| Buf::from(vec![FILL; l])).collect();
        p.a.ep.readv(bufs, p.a_to_b, r.at(off as u64), ctx + 2).expect("post readv");
        let got = read_done(&p, ctx + 2, &what);
        assert_eq!(got.len(), n, "{what}: every readv piece given back");
        for (g, &l) in got.iter().zip(&rlens) {
            assert_eq!(g.len(), l, "{what}: readv piece length");
        }
        let joined: Vec<u8> = got.iter().flat_map(|b| b.as_slice().iter().copied()).collect();
        assert_bytes(&joined, &data, &format!("{what}: readv of {rlens:?}"));
        check_window(&p, &r, &model, off, total, ctx + 3, &format!("{what}: neighbours"));
    }
    // One piece more than the limit: refused at once, every buffer given back.
    if lim < 1024 {
        let bufs: Vec<Buf> = (0..lim + 1).map(|i| Buf::from(pattern(3, i as u64))).collect();
        let e = p.a.ep.writev(bufs, p.a_to_b, r.at(0), 90).expect_err("writev above iov_limit must fail");
        assert_ne!(e.error, Error::Again, "not back-pressure");
        assert_eq!(e.buffers.count(), lim + 1, "writev above iov_limit: every buffer given back");
        let bufs: Vec<Buf> = (0..lim + 1).map(|_| Buf::new(3)).collect();
        let e = p.a.ep.readv(bufs, p.a_to_b, r.at(0), 91).expect_err("readv above iov_limit must fail");
        assert_ne!(e.error, Error::Again, "not back-pressure");
        assert_eq!(e.buffers.count(), lim + 1, "readv above iov_limit: every buffer given back");
    }
    assert_quiet(&p.a.cq, &p.drivers(), "refused posts complete nothing");
    assert_quiet(&p.b.cq, &p.drivers(), "the target gets no completion");
    assert_bytes(&r.close(), &model, "the region after the vectored writes");
}

rdm_and_msg!(vectored: rdm_vectored, msg_vectored);

// ------------------------------------------------------------------ writedata

/// Check a target's completion of a write with remote CQ data.
#[track_caller]
fn check_cq_data(p: &Pair, c: Completion, ctx: u64, data: u64, what: &str) {
    assert_eq!(c.context, ctx, "{what}: the receive it consumed");
    assert!(
        c.flags.contains(Caps::RMA | Caps::REMOTE_WRITE | Caps::REMOTE_CQ_DATA),
        "{what}: target completion flags {:?}",
        c.flags
    );
    assert_eq!(c.data, data, "{what}: remote CQ data");
    p.check_src_at_b(&c);
    // The data went to the region, not to the receive buffer.
    let mut b = c.buffers.into_buf().expect("the receive buffer comes back");
    assert_eq!(b.capacity(), 64, "{what}: the posted buffer itself comes back");
    b.set_len(64).expect("within capacity");
    assert!(b.iter().all(|&x| x == FILL), "{what}: the receive buffer was written");
}

fn writedata(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::RMA | Caps::MSG | Caps::REMOTE_CQ_DATA) else { return };
    let mut model = pattern(8192, 3);
    let r = Region::new(&p.b, model.clone(), RW);
    // Only `cq_data_size` bytes of the data reach the target (4 over verbs:
    // immediate data): the values below differ in their low bytes.
    let size = p.info.domain_attr.cq_data_size;
    let mask = if size >= 8 { u64::MAX } else { (1u64 << (8 * size)) - 1 };
    let cut = |d: u64| d & mask;
    let mut post_write = |ctx: u64, off: usize, len: usize, data: u64| {
        let bytes = pattern(len, ctx);
        p.a.ep.writedata(Buf::from(bytes.clone()), data, p.a_to_b, r.at(off as u64), ctx).expect("post writedata");
        model[off..off + len].copy_from_slice(&bytes);
    };
    // A receive posted first is consumed by the write's data.
    p.b.ep.recv(Buf::from(vec![FILL; 64]), FiAddr::UNSPEC, 100).expect("post recv");
    post_write(1, 10, 100, 0xDA7A_0000_0000_0001);
    write_done(&p, 1, "writedata");
    check_cq_data(&p, p.ok_b(), 100, cut(0xDA7A_0000_0000_0001), "writedata to a posted receive");
    // No receive posted: nothing at the target until one is.
    post_write(2, 500, 4096, 0xDA7A_0000_0000_0002);
    post_write(3, 5000, 7, 0xDA7A_0000_0000_0003);
    write_done(&p, 2, "unexpected writedata");
    write_done(&p, 3, "unexpected writedata");
    assert_quiet(&p.b.cq, &p.drivers(), "remote CQ data with no receive posted");
    p.b.ep.recv(Buf::from(vec![FILL; 64]), FiAddr::UNSPEC, 101).expect("post recv");
    let c1 = p.ok_b();
    p.b.ep.recv(Buf::from(vec![FILL; 64]), FiAddr::UNSPEC, 102).expect("post recv");
    let c2 = p.ok_b();
    // The two writes' data, each once (the order of remote CQ data is not promised).
    let (d1, d2) = (c1.data, c2.data);
    let mut got = [d1, d2];
    got.sort_unstable();
    assert_eq!(
        got,
        [cut(0xDA7A_0000_0000_0002), cut(0xDA7A_0000_0000_0003)],
        "remote CQ data of the unexpected writes"
    );
    check_cq_data(&p, c1, 101, d1, "writedata waiting for a receive");
    check_cq_data(&p, c2, 102, d2, "writedata waiting for a receive");
    // A write of no bytes still carries its data.
    p.b.ep.recv(Buf::from(vec![FILL; 64]), FiAddr::UNSPEC, 103).expect("post recv");
    post_write(4, 0, 0, 0xDA7A_0000_0000_0004);
    write_done(&p, 4, "writedata of 0 bytes");
    check_cq_data(&p, p.ok_b(), 103, cut(0xDA7A_0000_0000_0004), "writedata of 0 bytes");
    assert_quiet(&p.b.cq, &p.drivers(), "one target completion per writedata");
    assert_bytes(&read_back(&p, r.at(0), 8192, 9, "read back"), &model, "the region after writedata");
    assert_bytes(&r.close(), &model, "the region after writedata");
}

rdm_and_msg!(writedata: rdm_writedata, msg_writedata);

// ------------------------------------------------------------------ inject

fn inject_write(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::RMA) else { return };
    let max = p.info.tx_attr.inject_size;
    if max == 0 {
        skip("inject_size is 0");
        return;
    }
    let big = max.min(4096);
    let len = big + 200;
    let mut model = pattern(len, 4);
    let r = Region::new(&p.b, model.clone(), RW);
    // The data is the caller's again as soon as inject_write returns.
    let mut buf = pattern(big, 5);
    p.a.ep.inject_write(&buf[..1], p.a_to_b, r.at(3)).expect("inject_write 1 byte");
    model[3] = buf[0];
    buf.copy_from_slice(&pattern(big, 6));
    p.a.ep.inject_write(&buf, p.a_to_b, r.at(100)).expect("inject_write of inject_size");
    model[100..100 + big].copy_from_slice(&buf);
    buf.copy_from_slice(&pattern(big, 7));
    drop(buf);
    assert_eq!(p.a.cq.cq.in_flight(), 0, "inject_write needs no operation record");
    assert_quiet(&p.a.cq, &p.drivers(), "inject_write generates no completion");
    assert_quiet(&p.b.cq, &p.drivers(), "inject_write gives the target no completion");
    assert_bytes(&read_back(&p, r.at(0), len, 1, "read back"), &model, "the region after inject_write");
    // Above the limit: refused at once.
    if max < 64 * MIB {
        let e = p.a.ep.inject_write(&vec![0u8; max + 1], p.a_to_b, r.at(0)).expect_err("inject above inject_size");
        assert_ne!(e, Error::Again, "an oversized inject is not back-pressure");
    }
    // A refused inject completes nothing (or reports FI_EACCES), and the
    // connection stays usable.
    if access_error_breaks_connection(&p.info) {
        assert_bytes(&r.close(), &model, "the region after inject_write");
        skip("a refused access ends an RC connection: the refused inject is not tried");
        return;
    }
    let bad = Remote { addr: r.base, key: unknown_key(&[&r]) };
    p.a.ep.inject_write(&[1, 2, 3], p.a_to_b, bad).expect("inject_write to an unknown key");
    p.settle(QUIET);
    p.a.ep.read(Buf::new(len), p.a_to_b, r.at(0), 2).expect("post read");
    let c = loop {
        match p.next_a() {
            Ok(c) => break c,
            Err(e) => assert_eq!(e.err, Error::Access, "a refused inject_write: {e:?}"),
        }
    };
    assert_eq!(c.context, 2);
    assert_bytes(c.bytes(), &model, "the region after a refused inject_write");
    assert_bytes(&r.close(), &model, "the region after inject_write");
}

rdm_and_msg!(inject_write: rdm_inject_write, msg_inject_write);

// ------------------------------------------------------------------ counters

/// Wait until `cntr` reaches `want`, driving `p`; then check it goes no further.
#[track_caller]
fn expect_count(p: &Pair, cntr: &Counter, want: u64, what: &str) {
    let start = Instant::now();
    while cntr.read() < want {
        settle(&p.drivers(), std::time::Duration::from_millis(1));
        assert!(start.elapsed() < WAIT, "watchdog: {what}: counter at {}, expected {want}", cntr.read());
    }
    p.settle(QUIET / 3);
    assert_eq!(cntr.read(), want, "{what}");
}

/// A pair whose `b` counts remote writes and remote reads on two counters.
fn counted_pair(prov: &'static str, t: EpType) -> Option<(Pair, Counter, Counter)> {
    let info = find_info(prov, t, Caps::RMA | Caps::RMA_EVENT)?;
    counters_offered(&info)?;
    let counters: RefCell<Option<(Counter, Counter)>> = RefCell::new(None);
    let p = Pair::with_setup(prov, t, Caps::RMA | Caps::RMA_EVENT, &|d: &Domain, ep: &Endpoint| {
        let (w, r) = (d.counter().expect("open counter"), d.counter().expect("open counter"));
        ep.bind_counter(&w, BindFlags::REMOTE_WRITE).expect("bind a counter for remote writes");
        ep.bind_counter(&r, BindFlags::REMOTE_READ).expect("bind a counter for remote reads");
        *counters.borrow_mut() = Some((w, r));
    })?;
    let (w, r) = counters.into_inner().expect("the setup ran");
    Some((p, w, r))
}

fn remote_counters(prov: &'static str, t: EpType) {
    let Some((p, wc, rc)) = counted_pair(prov, t) else { return };
    let r = Region::new(&p.b, pattern(65_536, 8), RW);
    assert_eq!((wc.read(), rc.read()), (0, 0), "counters start at 0");
    for (i, (len, off)) in [(1usize, 0u64), (4096, 100), (60_000, 5000)].into_iter().enumerate() {
        p.a.ep.write(Buf::from(pattern(len, i as u64)), p.a_to_b, r.at(off), i as u64).expect("post write");
        write_done(&p, i as u64, "write");
        expect_count(&p, &wc, i as u64 + 1, "one remote write counted per write");
    }
    assert_eq!(rc.read(), 0, "writes are not counted as reads");
    for i in 0..2u64 {
        p.a.ep.read(Buf::new(1000 + i as usize), p.a_to_b, r.at(7 * i), 10 + i).expect("post read");
        read_done(&p, 10 + i, "read");
        expect_count(&p, &rc, i + 1, "one remote read counted per read");
    }
    assert_eq!(wc.read(), 3, "reads are not counted as writes");
    // Refused accesses are not counted as successes.
    let bad = Remote { addr: r.base, key: unknown_key(&[&r]) };
    p.a.ep.write(Buf::new(8), p.a_to_b, bad, 20).expect("post write");
    assert_eq!(p.err_a().err, Error::Access);
    p.a.ep.read(Buf::new(8), p.a_to_b, bad, 21).expect("post read");
    assert_eq!(p.err_a().err, Error::Access);
    p.settle(QUIET);
    assert_eq!((wc.read(), rc.read()), (3, 2), "refused accesses counted as successes");
    // The application's own updates still work on a remote-event counter.
    wc.add(10);
    assert_eq!(wc.read(), 13);
    drop(r);
}

rdm_and_msg!(remote_counters: rdm_remote_counters, msg_remote_counters);

/// A write or read larger than any one request of the provider's protocol still
/// counts once.
fn remote_counters_large(prov: &'static str, t: EpType) {
    let Some((p, wc, rc)) = counted_pair(prov, t) else { return };
    let len = 9 * MIB + 5;
    let data = pattern(len, 9);
    let r = Region::new(&p.b, vec![0; len], RW);
    p.a.ep.write(Buf::from(data.clone()), p.a_to_b, r.at(0), 1).expect("post write");
    write_done(&p, 1, "9 MiB write");
    expect_count(&p, &wc, 1, "a 9 MiB write: the remote-write counter");
    assert_eq!(rc.read(), 0, "writes are not counted as reads");
    assert_bytes(&read_back(&p, r.at(0), len, 2, "9 MiB read"), &data, "9 MiB read back");
    expect_count(&p, &rc, 1, "a 9 MiB read: the remote-read counter");
    assert_eq!(wc.read(), 1, "reads are not counted as writes");
}

rdm_and_msg!(remote_counters_large: rdm_remote_counters_large, msg_remote_counters_large);

// ------------------------------------------------------------------ access errors

/// Which operations a refused access is tried with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ops {
    Both,
    Write,
    Read,
}

/// Post a write (if `write`) or read of `len` bytes at `at`, expect `FI_EACCES`
/// with the buffer given back (a written buffer unchanged).
#[track_caller]
fn expect_refused(p: &Pair, write: bool, at: Remote, len: usize, ctx: u64, what: &str) {
    let what = format!("{} {what}", if write { "write" } else { "read" });
    let data = pattern(len, ctx);
    if write {
        p.a.ep.write(Buf::from(data.clone()), p.a_to_b, at, ctx).expect("post write");
    } else {
        p.a.ep.read(Buf::from(vec![FILL; len]), p.a_to_b, at, ctx).expect("post read");
    }
    let e = err(p.next_a(), &what);
    assert_eq!(e.err, Error::Access, "{what}: {e:?}");
    assert_eq!(e.context, ctx, "{what}: context");
    let back = e.buffers.into_vec();
    assert_eq!(back.len(), 1, "{what}: the buffer given back");
    assert_eq!(back[0].capacity(), len, "{what}: the posted buffer itself");
    if write {
        assert_bytes(&back[0], &data, &format!("{what}: buffer given back"));
    }
}

const ACCESS_LEN: usize = 4096;

fn access_errors(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::RMA) else { return };
    if access_error_breaks_connection(&p.info) {
        skip("a refused access ends an RC connection (the QP goes to the error state)");
        return;
    }
    let n = ACCESS_LEN;
    let mut rw_model = pattern(n, 11);
    let rw = Region::new(&p.b, rw_model.clone(), RW);
    let ro = Region::new(&p.b, pattern(n, 12), MrAccess::REMOTE_READ);
    let mut wo_model = pattern(n, 13);
    let wo = Region::new(&p.b, wo_model.clone(), MrAccess::REMOTE_WRITE);
    let closed = Region::new(&p.b, pattern(n, 14), RW);
    let closed_at = closed.at(0);
    assert_bytes(&closed.close(), &pattern(n, 14), "a region closed before use");
    let unknown = Remote { addr: rw.base, key: unknown_key(&[&rw, &ro, &wo]) };
    let cases: Vec<(&str, Remote, usize, Ops)> = vec![
        ("with an unknown key", unknown, 8, Ops::Both),
        ("of a closed region", closed_at, 8, Ops::Both),
        ("one byte below the region, into it", beside(&rw, -1), 8, Ops::Both),
        ("wholly below the region", beside(&rw, -64), 16, Ops::Both),
        ("one byte past the end", rw.at(n as u64 - 7), 8, Ops::Both),
        ("at the end", rw.at(n as u64), 1, Ops::Both),
        ("far past the end", rw.at(1 << 40), 8, Ops::Both),
        ("of the whole region and one byte more", rw.at(0), n + 1, Ops::Both),
        ("wrapping past u64::MAX", Remote { addr: u64::MAX - 3, key: rw.key() }, 8, Ops::Both),
        ("ending at 2^64", Remote { addr: u64::MAX - 7, key: rw.key() }, 8, Ops::Both),
        ("whose end wraps past u64::MAX", Remote { addr: u64::MAX - 1000, key: rw.key() }, 2048, Ops::Both),
        ("of a region without REMOTE_READ", wo.at(0), 8, Ops::Read),
        ("of a region without REMOTE_WRITE", ro.at(0), 8, Ops::Write),
    ];
    // Linux's Soft-iWARP answers a READ of a region without REMOTE_READ (it
    // checks the region's key and bounds, not that permission, when it sends
    // the READ response: siw_qp_tx.c): that one case cannot be refused there.
    let read_perm_unchecked = p.info.domain_attr.name.starts_with("siw");
    let mut ctx = 0;
    for (what, at, len, ops) in cases {
        for write in [true, false] {
            if (write && ops == Ops::Read) || (!write && ops == Ops::Write) {
                continue;
            }
            if ops == Ops::Read && read_perm_unchecked {
                println!("not tried on {}: a read {what} (siw does not check REMOTE_READ)", p.info.domain_attr.name);
                continue;
            }
            ctx += 1;
            expect_refused(&p, write, at, len, ctx, what);
            // The connection is still usable: a good write and read.
            let off = (ctx as usize * 37) % (n - 16);
            let good = pattern(16, 1000 + ctx);
            p.a.ep.write(Buf::from(good.clone()), p.a_to_b, wo.at(off as u64), 5000 + ctx).expect("post write");
            write_done(&p, 5000 + ctx, &format!("a write after a refused access {what}"));
            wo_model[off..off + 16].copy_from_slice(&good);
            let got = read_back(&p, rw.at(0), n, 6000 + ctx, &format!("a read after a refused access {what}"));
            assert_bytes(&got, &rw_model, &format!("the region after a refused access {what}"));
        }
    }
    // Good accesses of what each region grants.
    assert_bytes(&read_back(&p, ro.at(0), n, 7000, "read-only region"), &pattern(n, 12), "read of a read-only region");
    p.a.ep.write(Buf::from(pattern(n, 15)), p.a_to_b, rw.at(0), 7001).expect("post write");
    write_done(&p, 7001, "write of the whole region");
    rw_model.copy_from_slice(&pattern(n, 15));
    assert_quiet(&p.b.cq, &p.drivers(), "refused accesses give the target no completion");
    assert_quiet(&p.a.cq, &p.drivers(), "one completion per operation");
    assert_bytes(&rw.close(), &rw_model, "the read-write region");
    assert_bytes(&ro.close(), &pattern(n, 12), "the read-only region");
    assert_bytes(&wo.close(), &wo_model, "the write-only region");
}

rdm_and_msg!(access_errors: rdm_access_errors, msg_access_errors);

/// Refused accesses larger than 4 MiB (several requests of the tcp protocol):
/// refused as a whole, no part of the target written, even where a part taken
/// alone would have been allowed.
fn access_errors_large(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::RMA) else { return };
    if access_error_breaks_connection(&p.info) {
        skip("a refused access ends an RC connection (the QP goes to the error state)");
        return;
    }
    let n = 5 * MIB;
    let model = pattern(n, 21);
    let r = Region::new(&p.b, model.clone(), RW);
    let cases: [(&str, Remote, usize); 3] = [
        ("of 6 MiB into a 5 MiB region", r.at(0), 6 * MIB),
        ("from 4 MiB below the region into it", beside(&r, -(4 * MIB as i64)), 4 * MIB + 4096),
        (
            "wrapping past u64::MAX into the region",
            Remote { addr: u64::MAX - (4 * MIB as u64 - 1), key: r.key() },
            4 * MIB + 4096,
        ),
    ];
    // Every case is tried (the region restored after one that wrote it), then
    // those that wrote are reported together.
    let mut written = Vec::new();
    for (i, (what, at, len)) in cases.into_iter().enumerate() {
        let ctx = 10 * i as u64;
        expect_refused(&p, true, at, len, ctx + 1, what);
        expect_refused(&p, false, at, len, ctx + 2, what);
        let got = read_back(&p, r.at(0), n, ctx + 3, "read after a refused access");
        if let Some(first) = got.iter().zip(&model).position(|(g, m)| g != m) {
            let last = n - 1 - got.iter().rev().zip(model.iter().rev()).position(|(g, m)| g != m).unwrap_or(0);
            written.push(format!("{what}: bytes {first}..={last} of the region written"));
            p.a.ep.write(Buf::from(model.clone()), p.a_to_b, r.at(0), ctx + 4).expect("post write");
            write_done(&p, ctx + 4, "restore the region");
        }
    }
    if is_iwarp(&p.info) {
        // iWARP (DDP, RFC 5041) checks each segment of a write as it arrives
        // and places it: what comes before the first refused segment is
        // written. The refusal itself is reported (above).
        println!("iWARP places a refused write's segments up to the refused one: {}", written.join("; "));
    } else {
        assert!(written.is_empty(), "refused accesses wrote the target: {}", written.join("; "));
    }
    assert_quiet(&p.b.cq, &p.drivers(), "refused accesses give the target no completion");
    assert_bytes(&r.close(), &model, "the region after refused accesses");
}

rdm_and_msg!(access_errors_large: rdm_access_errors_large, msg_access_errors_large);
