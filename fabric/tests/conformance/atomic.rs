//! Atomics over RDM and MSG endpoints: which operations `atomic_valid` accepts
//! for each datatype and kind of call; every accepted combination run on two
//! elements of a target initialised with known values, the target's new values
//! and the prior values fetched checked against a reference model written here
//! (fi_atomic(3): C's arithmetic and comparisons, integers wrapping); and
//! accesses a region does not grant, refused with `FI_EACCES`, the target
//! untouched and the connection usable.

use super::PROV;
use crate::common::*;
use fabric::*;
use std::fmt::Debug;

const KINDS: [AtomicKind; 3] = [AtomicKind::Plain, AtomicKind::Fetch, AtomicKind::Compare];

/// The compare-and-swap family, which only compare calls take.
fn compare_family(op: AtomicOp) -> bool {
    use AtomicOp::*;
    matches!(op, Cswap | CswapNe | CswapLe | CswapLt | CswapGe | CswapGt | Mswap)
}

/// Bitwise operations, which only integer datatypes take.
fn bitwise(op: AtomicOp) -> bool {
    matches!(op, AtomicOp::Bor | AtomicOp::Band | AtomicOp::Bxor | AtomicOp::Mswap)
}

/// Whether fi_atomic(3) allows `op` on `dt` in a call of `kind`: `ATOMIC_READ`
/// only fetching, the CSWAP family and `MSWAP` only in compare calls, bitwise
/// operations only on integers.
fn allowed(op: AtomicOp, dt: Datatype, kind: AtomicKind) -> bool {
    let by_kind = match kind {
        AtomicKind::Plain => !compare_family(op) && op != AtomicOp::Read,
        AtomicKind::Fetch => !compare_family(op),
        AtomicKind::Compare => compare_family(op),
    };
    by_kind && !(bitwise(op) && dt.is_float())
}

/// `atomic_valid` answers a count of at least one for what the provider
/// supports, and `FI_EOPNOTSUPP` for everything else, including every
/// combination fi_atomic(3) does not allow.
#[test]
fn atomic_valid_rules() {
    run(PROV, |prov| {
        for t in [EpType::Rdm, EpType::Msg] {
            let Some(info) = find_info(prov, t, Caps::ATOMIC) else { continue };
            let f = Fabric::open(&info).expect("open fabric");
            let d = f.domain(&info).expect("open domain");
            let (mut supported, mut unsupported) = (0, Vec::new());
            for &dt in Datatype::ALL {
                for &op in AtomicOp::ALL {
                    for kind in KINDS {
                        let what = format!("{t} atomic_valid({op}, {dt}, {kind:?})");
                        let answer = d.atomic_valid(op, dt, kind);
                        assert_eq!(d.atomic_valid(op, dt, kind), answer, "{what}: asked twice");
                        match answer {
                            Ok(n) => {
                                assert!(
                                    allowed(op, dt, kind),
                                    "{what}: Ok({n}) for a combination fi_atomic(3) forbids"
                                );
                                assert!(n >= 1, "{what}: Ok({n}): a supported operation carries at least one element");
                                supported += 1;
                            }
                            Err(Error::OpNotSupp) => {
                                if allowed(op, dt, kind) {
                                    unsupported.push(format!("{op}/{dt}/{kind:?}"));
                                }
                            }
                            Err(e) => panic!("{what}: {e}: expected a count or FI_EOPNOTSUPP"),
                        }
                    }
                }
            }
            assert!(supported > 0, "{t}: the entry has FI_ATOMIC but atomic_valid accepts nothing");
            if !unsupported.is_empty() {
                skip(format!(
                    "{t}: {} allowed combinations not supported: {}",
                    unsupported.len(),
                    unsupported.join(" ")
                ));
            }
        }
    });
}

// ------------------------------------------------------------------ model

/// An element type of a datatype, for the reference model.
trait El: Copy + PartialOrd + Debug {
    /// The value `v` in this type: integers through `i64`, wrapping (so -1 is
    /// all ones in an unsigned type).
    fn from_f64(v: f64) -> Self;
    fn load(b: &[u8]) -> Self;
    fn store(self, out: &mut Vec<u8>);
    fn is_nan(self) -> bool;
    /// C's truth: nonzero.
    fn truth(self) -> bool;
    fn of_bool(b: bool) -> Self;
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn bits(op: AtomicOp, t: Self, o: Self, c: Self) -> Self;
}

macro_rules! int_el {
    ($($t:ty),*) => {$(
        impl El for $t {
            fn from_f64(v: f64) -> Self {
                v as i64 as $t
            }
            fn load(b: &[u8]) -> Self {
                <$t>::from_ne_bytes(b.try_into().expect("one element"))
            }
            fn store(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_ne_bytes())
            }
            fn is_nan(self) -> bool {
                false
            }
            fn truth(self) -> bool {
                self != 0
            }
            fn of_bool(b: bool) -> Self {
                <$t>::from(b)
            }
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            fn bits(op: AtomicOp, t: Self, o: Self, c: Self) -> Self {
                match op {
                    AtomicOp::Bor => t | o,
                    AtomicOp::Band => t & o,
                    AtomicOp::Bxor => t ^ o,
                    AtomicOp::Mswap => (o & c) | (t & !c),
                    _ => unreachable!("{op} is not bitwise"),
                }
            }
        }
    )*};
}

macro_rules! float_el {
    ($($t:ty),*) => {$(
        impl El for $t {
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn load(b: &[u8]) -> Self {
                <$t>::from_ne_bytes(b.try_into().expect("one element"))
            }
            fn store(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_ne_bytes())
            }
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            fn truth(self) -> bool {
                self != 0.0
            }
            fn of_bool(b: bool) -> Self {
                if b { 1.0 } else { 0.0 }
            }
            fn add(self, o: Self) -> Self {
                self + o
            }
            fn mul(self, o: Self) -> Self {
                self * o
            }
            fn bits(op: AtomicOp, _: Self, _: Self, _: Self) -> Self {
                unreachable!("{op} on a float")
            }
        }
    )*};
}

int_el!(i8, u8, i16, u16, i32, u32, i64, u64);
float_el!(f32, f64);

/// The target's new value under `op` (fi_atomic(3)), for target `t`, operand `o`
/// and compare value `c`.
fn model<T: El>(op: AtomicOp, t: T, o: T, c: T) -> T {
    use AtomicOp::*;
    let swap_if = |cond: bool| if cond { o } else { t };
    match op {
        Min => swap_if(o < t),
        Max => swap_if(o > t),
        Sum => t.add(o),
        Prod => t.mul(o),
        Lor => T::of_bool(t.truth() || o.truth()),
        Land => T::of_bool(t.truth() && o.truth()),
        Lxor => T::of_bool(t.truth() != o.truth()),
        Bor | Band | Bxor | Mswap => T::bits(op, t, o, c),
        Read => t,
        Write => o,
        Cswap => swap_if(c == t),
        CswapNe => swap_if(c != t),
        CswapLe => swap_if(c <= t),
        CswapLt => swap_if(c < t),
        CswapGe => swap_if(c >= t),
        CswapGt => swap_if(c > t),
    }
}

/// (target, operand, compare) of each element.
type Elems = [(f64, f64, f64)];

/// The bytes of one case: initial target, operand, compare, expected new target.
#[derive(Debug, Default)]
struct Vals {
    t: Vec<u8>,
    o: Vec<u8>,
    c: Vec<u8>,
    new: Vec<u8>,
}

fn vals_of<T: El>(op: AtomicOp, elems: &Elems) -> Vals {
    let mut v = Vals::default();
    for &(t, o, c) in elems {
        let (t, o, c) = (T::from_f64(t), T::from_f64(o), T::from_f64(c));
        t.store(&mut v.t);
        o.store(&mut v.o);
        c.store(&mut v.c);
        model(op, t, o, c).store(&mut v.new);
    }
    v
}

macro_rules! by_type {
    ($dt:expr, $f:ident ( $($arg:expr),* )) => {
        match $dt {
            Datatype::Int8 => $f::<i8>($($arg),*),
            Datatype::Uint8 => $f::<u8>($($arg),*),
            Datatype::Int16 => $f::<i16>($($arg),*),
            Datatype::Uint16 => $f::<u16>($($arg),*),
            Datatype::Int32 => $f::<i32>($($arg),*),
            Datatype::Uint32 => $f::<u32>($($arg),*),
            Datatype::Int64 => $f::<i64>($($arg),*),
            Datatype::Uint64 => $f::<u64>($($arg),*),
            Datatype::Float => $f::<f32>($($arg),*),
            Datatype::Double => $f::<f64>($($arg),*),
        }
    };
}

fn vals(dt: Datatype, op: AtomicOp, elems: &Elems) -> Vals {
    by_type!(dt, vals_of(op, elems))
}

fn same_of<T: El>(a: &[u8], b: &[u8]) -> bool {
    let n = std::mem::size_of::<T>();
    a.len() == b.len()
        && a.chunks(n).zip(b.chunks(n)).all(|(x, y)| x == y || (T::load(x).is_nan() && T::load(y).is_nan()))
}

/// Equal element by element (any NaN equals any NaN).
fn same(dt: Datatype, a: &[u8], b: &[u8]) -> bool {
    by_type!(dt, same_of(a, b))
}

fn show_of<T: El>(b: &[u8]) -> String {
    let v: Vec<T> = b.chunks(std::mem::size_of::<T>()).map(T::load).collect();
    format!("{v:?}")
}

/// The elements, for messages.
fn show(dt: Datatype, b: &[u8]) -> String {
    by_type!(dt, show_of(b))
}

// ------------------------------------------------------------------ every operation

type Set = [(f64, f64, f64); 2];

/// Two elements each, (target, operand, compare). Across the sets, every
/// comparison of compare to target (<, ==, >) and of operand to target comes
/// out both ways, logical operations see every truth pair, and the integer
/// values are negative too (large, in unsigned types) and overflow on PROD.
const SETS: &[Set] = &[
    [(5.0, 7.0, 5.0), (9.0, 3.0, 4.0)],
    [(-2.0, 6.0, 3.0), (0.0, -5.0, 0.0)],
    [(0.0, 0.0, -1.0), (100.0, -100.0, 101.0)],
    [(3.0, 0.0, 3.0), (-128.0, 127.0, -128.0)],
];

/// More for floats: fractions, signed zeros, NaN, infinity.
const FLOAT_SETS: &[Set] = &[
    [(1.5, 0.25, 1.5), (-0.0, 0.0, 0.0)],
    [(f64::NAN, 1.0, f64::NAN), (2.0, f64::NAN, 2.0)],
    [(f64::INFINITY, -1.0, 3.0), (-0.5, -0.0, -0.75)],
];

/// Bytes between the starts of two cases' targets.
const STRIDE: usize = 32;

struct Case {
    dt: Datatype,
    op: AtomicOp,
    kind: AtomicKind,
    count: usize,
    off: usize,
    vals: Vals,
}

impl Case {
    fn what(&self, t: EpType) -> String {
        format!(
            "{t} {:?} {} on {} x{} (target {}, operand {}, compare {})",
            self.kind,
            self.op,
            self.dt,
            self.count,
            show(self.dt, &self.vals.t),
            show(self.dt, &self.vals.o),
            show(self.dt, &self.vals.c)
        )
    }
}

/// Post one atomic of the kind asked for.
#[allow(clippy::too_many_arguments)]
fn post(
    p: &Pair,
    kind: AtomicKind,
    op: AtomicOp,
    dt: Datatype,
    operand: Buf,
    compare: Buf,
    result: Buf,
    at: Remote,
    ctx: u64,
) -> PostResult {
    match kind {
        AtomicKind::Plain => p.a.ep.atomic(operand, op, dt, p.a_to_b, at, ctx),
        AtomicKind::Fetch => p.a.ep.fetch_atomic(operand, result, op, dt, p.a_to_b, at, ctx),
        AtomicKind::Compare => p.a.ep.compare_atomic(operand, compare, result, op, dt, p.a_to_b, at, ctx),
    }
}

/// How many buffers an atomic of `kind` takes and gives back.
fn nbufs(kind: AtomicKind) -> usize {
    match kind {
        AtomicKind::Plain => 1,
        AtomicKind::Fetch => 2,
        AtomicKind::Compare => 3,
    }
}

fn every_operation(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::ATOMIC) else { return };
    let mut cases = Vec::new();
    for &dt in Datatype::ALL {
        for &op in AtomicOp::ALL {
            for kind in KINDS {
                let Ok(max) = p.a.domain.atomic_valid(op, dt, kind) else { continue };
                let count = max.min(2);
                let extra = if dt.is_float() { FLOAT_SETS } else { &[] };
                for set in SETS.iter().chain(extra) {
                    let off = STRIDE * cases.len() + 8;
                    cases.push(Case { dt, op, kind, count, off, vals: vals(dt, op, &set[..count]) });
                }
            }
        }
    }
    if cases.is_empty() {
        skip("atomic_valid accepts nothing");
        return;
    }
    let mut init = vec![FILL; STRIDE * cases.len() + 64];
    for c in &cases {
        init[c.off..c.off + c.vals.t.len()].copy_from_slice(&c.vals.t);
    }
    let r = Region::new(&p.b, init, RW);
    for (i, c) in cases.iter().enumerate() {
        let what = c.what(t);
        let bytes = c.count * c.dt.size();
        let operand = if c.op == AtomicOp::Read { Vec::new() } else { c.vals.o.clone() };
        let ctx = i as u64;
        let posted = post(
            &p,
            c.kind,
            c.op,
            c.dt,
            Buf::from(operand.clone()),
            Buf::from(c.vals.c.clone()),
            Buf::from(vec![FILL; bytes]),
            r.at(c.off as u64),
            ctx,
        );
        if let Err(e) = posted {
            panic!("{what}: post failed: {}", e.error);
        }
        let done = ok(p.next_a(), &what);
        assert_eq!(done.context, ctx, "{what}: context");
        let dir = if c.kind == AtomicKind::Plain { Caps::WRITE } else { Caps::READ };
        assert!(done.flags.contains(Caps::ATOMIC | dir), "{what}: flags {:?}", done.flags);
        let back = done.buffers.into_vec();
        assert_eq!(back.len(), nbufs(c.kind), "{what}: every buffer given back");
        assert_eq!(back[0].as_slice(), &operand[..], "{what}: operand given back unchanged");
        if c.kind == AtomicKind::Compare {
            assert_eq!(back[1].as_slice(), &c.vals.c[..], "{what}: compare values given back unchanged");
        }
        if c.kind != AtomicKind::Plain {
            let prior = back.last().expect("result buffer").as_slice();
            assert!(
                same(c.dt, prior, &c.vals.t),
                "{what}: fetched {}, expected the prior values {}",
                show(c.dt, prior),
                show(c.dt, &c.vals.t)
            );
        }
    }
    assert_quiet(&p.b.cq, &p.drivers(), "atomics give the target no completion");
    let mut got = r.close();
    let mut want = got.clone();
    want.iter_mut().for_each(|b| *b = FILL);
    for c in &cases {
        let n = c.vals.new.len();
        let g = &mut got[c.off..c.off + n];
        assert!(
            same(c.dt, g, &c.vals.new),
            "{}: target became {}, expected {}",
            c.what(t),
            show(c.dt, g),
            show(c.dt, &c.vals.new)
        );
        g.fill(FILL);
    }
    assert_bytes(&got, &want, "bytes around the atomics' targets");
    println!("{t}: {} atomic operations checked", cases.len());
}

rdm_and_msg!(every_operation: rdm_every_operation, msg_every_operation);

// ------------------------------------------------------------------ access errors

fn u64s(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn access_errors(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::ATOMIC) else { return };
    let dt = Datatype::Uint64;
    let d = &p.a.domain;
    let ops: Vec<(AtomicKind, AtomicOp)> = [
        (AtomicKind::Plain, AtomicOp::Sum),
        (AtomicKind::Fetch, AtomicOp::Sum),
        (AtomicKind::Compare, AtomicOp::Cswap),
    ]
    .into_iter()
    .filter(|&(k, op)| d.atomic_valid(op, dt, k).is_ok_and(|n| n >= 2))
    .collect();
    if ops.is_empty() {
        skip("none of SUM, fetching SUM and CSWAP on two UINT64");
        return;
    }
    let probe_read = d.atomic_valid(AtomicOp::Read, dt, AtomicKind::Fetch).is_ok_and(|n| n >= 2);
    let init = u64s(&[1, 2, 3, 4, 5, 6, 7, 8]);
    let rw = Region::new(&p.b, init.clone(), RW);
    let ro_init = u64s(&[11, 12, 13, 14]);
    let ro = Region::new(&p.b, ro_init.clone(), MrAccess::REMOTE_READ);
    let closed = Region::new(&p.b, init.clone(), RW);
    let closed_at = closed.at(0);
    assert_bytes(&closed.close(), &init, "a region closed before use");
    let unknown = Remote { addr: rw.base, key: unknown_key(&[&rw, &ro]) };
    let n = init.len() as i64;
    // Where, and compare values that match what is there where there is
    // something, so that a wrongful swap would show.
    let cases: [(&str, Remote, [u64; 2]); 7] = [
        ("with an unknown key", unknown, [1, 2]),
        ("of a closed region", closed_at, [1, 2]),
        ("one element past the end", beside(&rw, n - 8), [8, 0]),
        ("at the end", beside(&rw, n), [0, 0]),
        ("one element below the region, into it", beside(&rw, -8), [0, 1]),
        ("wrapping past u64::MAX", Remote { addr: u64::MAX - 7, key: rw.key() }, [0, 1]),
        ("of a region without REMOTE_WRITE", ro.at(0), [11, 12]),
    ];
    let mut ctx = 0;
    for (what, at, current) in cases {
        for &(kind, op) in &ops {
            ctx += 1;
            let what = format!("{t} {kind:?} {op} {what}");
            let operand = u64s(&[1000, 2000]);
            let compare = u64s(&current);
            let r = post(&p, kind, op, dt, Buf::from(operand.clone()), Buf::from(compare), Buf::new(16), at, ctx);
            if let Err(e) = r {
                panic!("{what}: post failed: {}", e.error);
            }
            let e = err(p.next_a(), &what);
            assert_eq!(e.err, Error::Access, "{what}: {e:?}");
            assert_eq!(e.context, ctx, "{what}: context");
            let back = e.buffers.into_vec();
            assert_eq!(back.len(), nbufs(kind), "{what}: every buffer given back");
            assert_eq!(back[0].as_slice(), &operand[..], "{what}: operand given back unchanged");
            // The connection is still usable, and the target untouched.
            if probe_read {
                let r = post(
                    &p,
                    AtomicKind::Fetch,
                    AtomicOp::Read,
                    dt,
                    Buf::new(0),
                    Buf::new(0),
                    Buf::new(16),
                    rw.at(0),
                    9000,
                );
                if let Err(e) = r {
                    panic!("{what}: post of a read failed: {}", e.error);
                }
                let c = ok(p.next_a(), &format!("an atomic read after a refused {what}"));
                assert_eq!(c.buffers.into_vec()[1].as_slice(), &init[..16], "the target after a refused {what}");
            } else {
                let (k, op) = ops[0];
                let zero = u64s(&[0, 0]);
                let compare = if op == AtomicOp::Cswap { u64s(&[u64::MAX, u64::MAX]) } else { Vec::new() };
                post(&p, k, op, dt, Buf::from(zero), Buf::from(compare), Buf::new(16), rw.at(0), 9000)
                    .unwrap_or_else(|e| panic!("{what}: post of an atomic failed: {}", e.error));
                ok(p.next_a(), &format!("an atomic after a refused {what}"));
            }
        }
    }
    assert_quiet(&p.b.cq, &p.drivers(), "refused atomics give the target no completion");
    assert_quiet(&p.a.cq, &p.drivers(), "one completion per atomic");
    assert_bytes(&rw.close(), &init, "the read-write region after refused atomics");
    assert_bytes(&ro.close(), &ro_init, "the read-only region after refused atomics");
}

rdm_and_msg!(access_errors: rdm_access_errors, msg_access_errors);

// ------------------------------------------------------------------ large operands

/// Atomics whose operands do not fit a small message (512 bytes of operand, and as
/// much of compare values): a fetching SUM of 64 UINT64 and a CSWAP of 64, half of
/// whose compare values match. The operation must be the one asked for whatever
/// way the provider carries the operands.
fn large_operands(prov: &'static str, t: EpType) {
    let Some(p) = Pair::new(prov, t, Caps::ATOMIC) else { return };
    let dt = Datatype::Uint64;
    const N: usize = 64;
    let d = &p.a.domain;
    let fits = |op, k| d.atomic_valid(op, dt, k).is_ok_and(|n| n >= N);
    if !fits(AtomicOp::Sum, AtomicKind::Fetch) || !fits(AtomicOp::Cswap, AtomicKind::Compare) {
        skip("fetching SUM and CSWAP of 64 UINT64");
        return;
    }
    let t0: Vec<u64> = (0..N as u64).map(|i| 1000 + i).collect();
    let r = Region::new(&p.b, u64s(&t0), RW);
    let add: Vec<u64> = (0..N as u64).map(|i| i * 3).collect();
    let posted = post(
        &p,
        AtomicKind::Fetch,
        AtomicOp::Sum,
        dt,
        Buf::from(u64s(&add)),
        Buf::from(Vec::new()),
        Buf::from(vec![FILL; N * 8]),
        r.at(0),
        1,
    );
    if let Err(e) = posted {
        panic!("{t} fetching SUM x{N}: post failed: {}", e.error);
    }
    let done = ok(p.next_a(), &format!("{t} fetching SUM x{N}"));
    let back = done.buffers.into_vec();
    assert_bytes(back.last().expect("result").as_slice(), &u64s(&t0), "fetching SUM x64: prior values");
    let t1: Vec<u64> = t0.iter().zip(&add).map(|(a, b)| a + b).collect();
    let swap: Vec<u64> = (0..N as u64).map(|i| 7_000 + i).collect();
    let cmp: Vec<u64> = t1.iter().enumerate().map(|(i, &v)| if i % 2 == 0 { v } else { v + 1 }).collect();
    let posted = post(
        &p,
        AtomicKind::Compare,
        AtomicOp::Cswap,
        dt,
        Buf::from(u64s(&swap)),
        Buf::from(u64s(&cmp)),
        Buf::from(vec![FILL; N * 8]),
        r.at(0),
        2,
    );
    if let Err(e) = posted {
        panic!("{t} CSWAP x{N}: post failed: {}", e.error);
    }
    let done = ok(p.next_a(), &format!("{t} CSWAP x{N}"));
    let back = done.buffers.into_vec();
    assert_bytes(back.last().expect("result").as_slice(), &u64s(&t1), "CSWAP x64: prior values");
    let t2: Vec<u64> = (0..N).map(|i| if i % 2 == 0 { swap[i] } else { t1[i] }).collect();
    assert_bytes(&r.close(), &u64s(&t2), "the target after SUM and CSWAP x64");
}

rdm_and_msg!(large_operands: rdm_large_operands, msg_large_operands);
