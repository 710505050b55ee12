//! The target side of atomics, for every provider that emulates them (tcp; udp,
//! shm, and verbs where the device lacks an operation): which operations are
//! supported ([`valid`], libfabric's `fi_atomicvalid`, `fi_fetch_atomicvalid` and
//! `fi_compare_atomicvalid`) and applying one to local memory ([`apply`],
//! [`apply_slice`]), as libfabric's `prov/util` atomics do. No I/O, no locks, no
//! allocation: the provider looks the target up in its
//! [`MrRegistry`](crate::mr::MrRegistry), serializes atomics (one lock per
//! domain is enough) and calls [`apply`].
//!
//! # What is supported
//!
//! | operations | `Plain` | `Fetch` | `Compare` | datatypes |
//! |---|:-:|:-:|:-:|---|
//! | `MIN`, `MAX`, `SUM`, `PROD`, `ATOMIC_WRITE` | yes | yes | no | all ten |
//! | `LOR`, `LAND`, `LXOR` | yes | yes | no | all ten |
//! | `BOR`, `BAND`, `BXOR` | yes | yes | no | integers only |
//! | `ATOMIC_READ` | no | yes | no | all ten |
//! | `CSWAP`, `CSWAP_NE`, `_LE`, `_LT`, `_GE`, `_GT` | no | no | yes | all ten |
//! | `MSWAP` | no | no | yes | integers only |
//!
//! A supported combination carries at most [`MAX_ATOMIC_BYTES`] bytes of target
//! per operation, so [`valid`] answers `MAX_ATOMIC_BYTES / size` elements.
//!
//! # Semantics (fi_atomic(3), libfabric's `ofi_atomic.c`)
//!
//! For each element, with `t` the target, `o` the operand and `c` the compare value:
//!
//! * `MIN`: if `t > o` then `t = o`; `MAX`: if `t < o` then `t = o`. On floats these
//!   are C's comparisons: a NaN operand never replaces the target, a NaN target
//!   stays NaN, and `-0.0` and `+0.0` compare equal, so the target keeps its sign.
//! * `SUM`, `PROD`: integers wrap (two's complement, as C's unsigned arithmetic and
//!   libfabric's signed arithmetic on every real compiler); floats are IEEE 754.
//! * `LOR`, `LAND`, `LXOR`: nonzero is true (a NaN is true, `-0.0` is false); the
//!   target becomes 1 or 0 of its datatype.
//! * `BOR`, `BAND`, `BXOR`: bitwise.
//! * `ATOMIC_READ`: nothing is written; `ATOMIC_WRITE`: `t = o`.
//! * `CSWAP`: if `c == t`; `CSWAP_NE`: if `c != t`; `CSWAP_LE`: if `c <= t`;
//!   `CSWAP_LT`: if `c < t`; `CSWAP_GE`: if `c >= t`; `CSWAP_GT`: if `c > t`; then
//!   `t = o`. On floats these are C's comparisons: a NaN matches nothing under
//!   `CSWAP` (and everything under `CSWAP_NE`), and `-0.0` equals `+0.0`.
//!   (libfabric built with compiler atomics compares `CSWAP` bit patterns instead;
//!   the two differ only for NaN and signed zeros.)
//! * `MSWAP`: `t = (o & c) | (t & !c)`.
//!
//! Fetching and compare calls return every element's prior target value. An element
//! whose value does not change (`ATOMIC_READ`, a failed `CSWAP`, a `MIN` that keeps
//! the target) is not written, so `ATOMIC_READ` works on memory registered for
//! remote reads only.
//!
//! # Byte order
//!
//! Every buffer holds elements in the host's byte order (little-endian on every
//! target fabric supports), at any alignment. As in libfabric, peers are assumed to
//! share the byte order: operands travel as the sender's bytes.

use fabric_core::{AtomicKind, AtomicOp, Datatype, Error, MrAccess};
use std::mem::size_of;

/// The most target bytes one atomic operation may cover: 4096 (one page, and one
/// eager segment of every emulating provider). [`valid`] reports it as a count of
/// elements, `MAX_ATOMIC_BYTES / size`, and [`apply`] refuses larger counts.
pub const MAX_ATOMIC_BYTES: usize = 4096;

/// Whether `op` on `dt` is supported for the kind of call, as libfabric's
/// `fi_atomicvalid` (`Plain`), `fi_fetch_atomicvalid` (`Fetch`) and
/// `fi_compare_atomicvalid` (`Compare`) answer it.
///
/// `Ok(count)` is the most elements one operation may carry
/// (`MAX_ATOMIC_BYTES / dt.size()`); `Err(Error::OpNotSupp)` when the kind of call
/// does not take the operation ([`AtomicOp::kind_allows`]) or the operation is
/// bitwise (`BOR`, `BAND`, `BXOR`, `MSWAP`) and the datatype a float. The
/// [module documentation](self) has the whole table.
pub fn valid(op: AtomicOp, dt: Datatype, kind: AtomicKind) -> Result<usize, Error> {
    if !op.kind_allows(kind) {
        return Err(Error::OpNotSupp);
    }
    let bitwise = matches!(op, AtomicOp::Bor | AtomicOp::Band | AtomicOp::Bxor | AtomicOp::Mswap);
    if bitwise && dt.is_float() {
        return Err(Error::OpNotSupp);
    }
    Ok(MAX_ATOMIC_BYTES / dt.size())
}

/// The byte lengths of the buffers that go with one atomic operation of `count`
/// elements: what a provider expects on the wire, and what [`apply`] checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicLens {
    /// Bytes of the target (`count * size`).
    pub target: usize,
    /// Bytes of operand: `count * size`, or 0 for `ATOMIC_READ`.
    pub operand: usize,
    /// Bytes of compare values: `count * size` for `Compare` calls, else 0.
    pub compare: usize,
    /// Bytes of prior values returned: `count * size` for `Fetch` and `Compare`
    /// calls, 0 for `Plain`.
    pub result: usize,
}

/// The buffer lengths for `count` elements of `op` on `dt` in a call of `kind`.
///
/// Errors: `FI_EOPNOTSUPP` when [`valid`] refuses the combination, `FI_EINVAL`
/// when `count` is above the limit [`valid`] reports. A `count` of 0 is allowed
/// (every length is then 0).
pub fn lens(op: AtomicOp, dt: Datatype, kind: AtomicKind, count: usize) -> Result<AtomicLens, Error> {
    let max = valid(op, dt, kind)?;
    if count > max {
        return Err(Error::Inval);
    }
    // count <= MAX_ATOMIC_BYTES / size: the product cannot overflow.
    let bytes = count * dt.size();
    Ok(AtomicLens {
        target: bytes,
        operand: if op == AtomicOp::Read { 0 } else { bytes },
        compare: if kind == AtomicKind::Compare { bytes } else { 0 },
        result: if kind == AtomicKind::Plain { 0 } else { bytes },
    })
}

/// A copy of an atomic's operand then compare values (`l.operand` and
/// `l.compare` bytes), for a provider that must let go of the caller's buffers
/// when the call returns (`FI_INJECT`).
///
/// # Safety
/// `a.operand` and `a.compare` are valid for reads of `l.operand` and
/// `l.compare` bytes.
pub unsafe fn copy_operands(a: &fabric_core::prov::AtomicDesc, l: &AtomicLens) -> Vec<u8> {
    let mut v = Vec::with_capacity(l.operand + l.compare);
    for (p, n) in [(a.operand.base, l.operand), (a.compare.base, l.compare)] {
        if n > 0 {
            // SAFETY: as the caller guarantees; `n > 0`, so `p` is a real buffer.
            v.extend_from_slice(unsafe { std::slice::from_raw_parts(p, n) });
        }
    }
    v
}

/// Apply `op` element-wise to the `count` elements of type `dt` at `target`,
/// writing each element's prior value into `result` for `Fetch` and `Compare`
/// calls. The [module documentation](self) gives the semantics.
///
/// Everything is checked before the target is touched; on an error nothing is read
/// or written:
///
/// * `FI_EOPNOTSUPP`: [`valid`] refuses `op` on `dt` for `kind`;
/// * `FI_EINVAL`: `count` above the limit [`valid`] reports; a buffer whose length
///   is not the one [`lens`] gives (`operand` is `count * size` bytes, empty for
///   `ATOMIC_READ`; `compare` is `count * size` bytes for `Compare` calls, else
///   empty; `result` is `count * size` bytes for `Fetch` and `Compare` calls, empty
///   for `Plain`); a null `target` with a non-zero `count`.
///
/// # Safety
///
/// * `target` must be valid for reads and writes of `count * dt.size()` bytes (any
///   alignment) and must not overlap `operand`, `compare` or `result`. For
///   `ATOMIC_READ`, and for compare calls whose comparisons all fail, only reads
///   happen, but the caller must not rely on that to pass read-only memory for any
///   other operation.
/// * No other call of this module may access those bytes meanwhile: the provider
///   serializes the atomics it applies (a lock per domain, say), which is what makes
///   each operation atomic with respect to the others.
/// * The application's own CPU access to the same bytes while an operation is
///   applied is the application's race, as in libfabric, which makes no atomicity
///   promise against CPU access to a target of fabric atomics; the caller
///   (provider) passes that contract on to the application.
#[allow(clippy::too_many_arguments)]
pub unsafe fn apply(
    op: AtomicOp,
    dt: Datatype,
    kind: AtomicKind,
    count: usize,
    target: *mut u8,
    operand: &[u8],
    compare: &[u8],
    result: &mut [u8],
) -> Result<(), Error> {
    let want = lens(op, dt, kind, count)?;
    if operand.len() != want.operand || compare.len() != want.compare || result.len() != want.result {
        return Err(Error::Inval);
    }
    if count == 0 {
        return Ok(());
    }
    if target.is_null() {
        return Err(Error::Inval);
    }
    // SAFETY: (every arm) the caller's contract, passed on unchanged; the lengths
    // were checked against `count` above.
    unsafe {
        match dt {
            Datatype::Int8 => run::<i8>(op, count, target, operand, compare, result),
            Datatype::Uint8 => run::<u8>(op, count, target, operand, compare, result),
            Datatype::Int16 => run::<i16>(op, count, target, operand, compare, result),
            Datatype::Uint16 => run::<u16>(op, count, target, operand, compare, result),
            Datatype::Int32 => run::<i32>(op, count, target, operand, compare, result),
            Datatype::Uint32 => run::<u32>(op, count, target, operand, compare, result),
            Datatype::Int64 => run::<i64>(op, count, target, operand, compare, result),
            Datatype::Uint64 => run::<u64>(op, count, target, operand, compare, result),
            Datatype::Float => run::<f32>(op, count, target, operand, compare, result),
            Datatype::Double => run::<f64>(op, count, target, operand, compare, result),
        }
    }
    Ok(())
}

/// [`apply`] to a target the caller holds as a slice (a provider's own copy, a
/// test): the element count is `target.len() / dt.size()`.
///
/// Errors as [`apply`], plus `FI_EINVAL` when `target.len()` is not a multiple of
/// the datatype's size. On an error the target is untouched.
pub fn apply_slice(
    op: AtomicOp,
    dt: Datatype,
    kind: AtomicKind,
    target: &mut [u8],
    operand: &[u8],
    compare: &[u8],
    result: &mut [u8],
) -> Result<(), Error> {
    if target.len() % dt.size() != 0 {
        return Err(Error::Inval);
    }
    let count = target.len() / dt.size();
    // SAFETY: `target` is an exclusive borrow of exactly `count * size` bytes, so it
    // is valid for reads and writes, overlaps none of the other buffers, and no
    // other code can access it during the call.
    unsafe { apply(op, dt, kind, count, target.as_mut_ptr(), operand, compare, result) }
}

/// Apply `op` to `count` elements of `T`; lengths already checked.
///
/// # Safety
/// As [`apply`], with `operand`, `compare` and `result` each either empty or
/// `count * size_of::<T>()` bytes, and `count * size_of::<T>()` not overflowing.
unsafe fn run<T: Elem>(op: AtomicOp, count: usize, target: *mut u8, operand: &[u8], compare: &[u8], result: &mut [u8]) {
    let size = size_of::<T>();
    for i in 0..count {
        let off = i * size;
        // SAFETY: `off + size <= count * size`, inside the target's valid range.
        let p = unsafe { target.add(off) }.cast::<T>();
        // SAFETY: `p` is valid for reads of `size` bytes (any alignment, hence
        // `read_unaligned`), and every bit pattern is a valid integer or float.
        let prior = unsafe { p.read_unaligned() };
        if let Some(out) = result.get_mut(off..off + size) {
            prior.store(out);
        }
        if let Some(new) = compute(op, prior, elem(operand, off), elem(compare, off)) {
            // SAFETY: `p` is valid for writes of `size` bytes, at any alignment.
            unsafe { p.write_unaligned(new) };
        }
    }
}

/// The element at byte `off` of `buf`, or zero when `buf` is empty (an operand or
/// compare value the operation does not take).
#[inline(always)]
fn elem<T: Elem>(buf: &[u8], off: usize) -> T {
    buf.get(off..off + size_of::<T>()).and_then(T::load).unwrap_or(T::ZERO)
}

/// The new value of a target element `t` under `op` with operand `o` and compare
/// value `c`, or `None` when it keeps its value.
#[inline(always)]
fn compute<T: Elem>(op: AtomicOp, t: T, o: T, c: T) -> Option<T> {
    use AtomicOp::*;
    match op {
        Min => (t > o).then_some(o),
        Max => (t < o).then_some(o),
        Sum => Some(t.sum(o)),
        Prod => Some(t.prod(o)),
        Lor => Some(T::of_bool(t.truth() || o.truth())),
        Land => Some(T::of_bool(t.truth() && o.truth())),
        Lxor => Some(T::of_bool(t.truth() != o.truth())),
        Bor | Band | Bxor | Mswap => T::bitwise(op, t, o, c),
        Read => None,
        Write => Some(o),
        Cswap => (c == t).then_some(o),
        CswapNe => (c != t).then_some(o),
        CswapLe => (c <= t).then_some(o),
        CswapLt => (c < t).then_some(o),
        CswapGe => (c >= t).then_some(o),
        CswapGt => (c > t).then_some(o),
    }
}

/// An element type of an atomic datatype.
trait Elem: Copy + PartialOrd {
    /// Zero of the type.
    const ZERO: Self;
    /// The value in `b` (host byte order), if `b` has exactly the type's size.
    fn load(b: &[u8]) -> Option<Self>;
    /// Write the value to `out` (host byte order) if `out` has exactly its size.
    fn store(self, out: &mut [u8]);
    /// C's truth: nonzero.
    fn truth(self) -> bool;
    /// 1 or 0.
    fn of_bool(b: bool) -> Self;
    /// `SUM`: wrapping for integers.
    fn sum(self, o: Self) -> Self;
    /// `PROD`: wrapping for integers.
    fn prod(self, o: Self) -> Self;
    /// `BOR`, `BAND`, `BXOR`, `MSWAP`; `None` (no change) for floats, which
    /// [`valid`] refuses before this is reached.
    fn bitwise(op: AtomicOp, t: Self, o: Self, c: Self) -> Option<Self>;
}

macro_rules! elem_common {
    ($t:ty) => {
        const ZERO: Self = 0 as $t;

        #[inline(always)]
        fn load(b: &[u8]) -> Option<Self> {
            b.try_into().ok().map(<$t>::from_ne_bytes)
        }

        #[inline(always)]
        fn store(self, out: &mut [u8]) {
            if let Ok(a) = <&mut [u8; size_of::<$t>()]>::try_from(out) {
                *a = self.to_ne_bytes();
            }
        }
    };
}

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            elem_common!($t);

            #[inline(always)]
            fn truth(self) -> bool {
                self != 0
            }

            #[inline(always)]
            fn of_bool(b: bool) -> Self {
                <$t>::from(b)
            }

            #[inline(always)]
            fn sum(self, o: Self) -> Self {
                self.wrapping_add(o)
            }

            #[inline(always)]
            fn prod(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }

            #[inline(always)]
            fn bitwise(op: AtomicOp, t: Self, o: Self, c: Self) -> Option<Self> {
                match op {
                    AtomicOp::Bor => Some(t | o),
                    AtomicOp::Band => Some(t & o),
                    AtomicOp::Bxor => Some(t ^ o),
                    AtomicOp::Mswap => Some((o & c) | (t & !c)),
                    _ => None,
                }
            }
        }
    )*};
}

macro_rules! float_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            elem_common!($t);

            #[inline(always)]
            fn truth(self) -> bool {
                self != 0.0
            }

            #[inline(always)]
            fn of_bool(b: bool) -> Self {
                <$t>::from(b)
            }

            #[inline(always)]
            fn sum(self, o: Self) -> Self {
                self + o
            }

            #[inline(always)]
            fn prod(self, o: Self) -> Self {
                self * o
            }

            #[inline(always)]
            fn bitwise(_: AtomicOp, _: Self, _: Self, _: Self) -> Option<Self> {
                None
            }
        }
    )*};
}

int_elem!(i8, u8, i16, u16, i32, u32, i64, u64);
float_elem!(f32, f64);

/// Serve a peer's atomic request on this domain's regions: `ah` says what to do,
/// `args` holds the operand then the compare operand, exactly as many bytes as
/// `ah.count` elements need. Applies it under `serial` (one lock per domain, so
/// atomics from every peer are applied one at a time) and fills `result` with the
/// prior values (fetch and compare kinds).
///
/// `Err(reason)` is a malformed request (a protocol error: drop the peer);
/// `Ok(Err(e))` a refused one (answer the peer with `e`, nothing touched).
pub fn serve(
    mrs: &crate::mr::MrRegistry,
    serial: &std::sync::Mutex<()>,
    desc: crate::wire::RmaDesc,
    ah: crate::wire::AtomicHdr,
    args: &[u8],
    result: &mut Vec<u8>,
) -> Result<Result<(), Error>, &'static str> {
    result.clear();
    let (Some(op), Some(dt)) = (AtomicOp::from_u8(ah.op), Datatype::from_u8(ah.datatype)) else {
        return Ok(Err(Error::OpNotSupp));
    };
    let kind = match ah.kind {
        0 => AtomicKind::Plain,
        1 => AtomicKind::Fetch,
        2 => AtomicKind::Compare,
        _ => return Err("unknown atomic kind"),
    };
    // Operands that do not match the count are malformed, whatever the count.
    let count = ah.count as usize;
    let bytes = count.checked_mul(dt.size()).ok_or("atomic count overflows")?;
    let operand_len = if op == AtomicOp::Read { 0 } else { bytes };
    let compare_len = if kind == AtomicKind::Compare { bytes } else { 0 };
    if Some(args.len()) != operand_len.checked_add(compare_len) {
        return Err("atomic operands do not match their count");
    }
    // The count comes from the peer (an atomic read carries no operand to bound
    // it): check it against the limit before anything is sized by it.
    let l = match lens(op, dt, kind, count) {
        Ok(l) => l,
        Err(e) => return Ok(Err(e)),
    };
    let (operand, compare) = args.split_at(l.operand);
    result.resize(l.result, 0);
    let need = match (kind, op) {
        (AtomicKind::Plain, _) => MrAccess::REMOTE_WRITE,
        (_, AtomicOp::Read) => MrAccess::REMOTE_READ,
        _ => MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
    };
    let r = {
        let _serial = serial.lock().unwrap_or_else(|e| e.into_inner());
        mrs.with_region(desc.key, desc.addr, l.target, need, |p| {
            // SAFETY: `p` starts `l.target` checked bytes of an open region, held
            // open by the access lock for this call; atomics are serialized by
            // `serial`.
            unsafe { apply(op, dt, kind, count, p, operand, compare, result) }
        })
    };
    match r {
        Ok(Ok(())) => Ok(Ok(())),
        Ok(Err(e)) | Err(e) => {
            result.clear();
            Ok(Err(e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Debug;
    use std::sync::Mutex;
    use AtomicKind::{Compare, Fetch, Plain};
    use AtomicOp::*;
    use Datatype::*;

    const KINDS: [AtomicKind; 3] = [Plain, Fetch, Compare];

    // ---------------------------------------------------------------- validity

    /// The rules, written out independently of `kind_allows`.
    fn expected_valid(op: AtomicOp, dt: Datatype, kind: AtomicKind) -> bool {
        let compare_op = matches!(op, Cswap | CswapNe | CswapLe | CswapLt | CswapGe | CswapGt | Mswap);
        let kind_ok = match kind {
            Plain => !compare_op && op != Read,
            Fetch => !compare_op,
            Compare => compare_op,
        };
        let int_only = matches!(op, Bor | Band | Bxor | Mswap);
        kind_ok && !(int_only && matches!(dt, Float | Double))
    }

    #[test]
    fn validity_table() {
        let mut supported = 0;
        for &op in AtomicOp::ALL {
            for &dt in Datatype::ALL {
                for kind in KINDS {
                    let got = valid(op, dt, kind);
                    if expected_valid(op, dt, kind) {
                        assert_eq!(got, Ok(MAX_ATOMIC_BYTES / dt.size()), "{op} {dt} {kind:?}");
                        supported += 1;
                    } else {
                        assert_eq!(got, Err(Error::OpNotSupp), "{op} {dt} {kind:?}");
                    }
                }
            }
        }
        // Plain: 11 ops (8 on floats); Fetch: 12 (9); Compare: 7 (6).
        assert_eq!(supported, 8 * (11 + 12 + 7) + 2 * (8 + 9 + 6));
        assert_eq!(valid(Sum, Uint64, Plain), Ok(512));
        assert_eq!(valid(Read, Int8, Fetch), Ok(4096));
        assert_eq!(valid(Cswap, Float, Compare), Ok(1024));
        assert_eq!(valid(Lxor, Double, Plain), Ok(512));
        assert_eq!(valid(Mswap, Double, Compare), Err(Error::OpNotSupp));
        assert_eq!(valid(Bor, Float, Fetch), Err(Error::OpNotSupp));
        assert_eq!(valid(Read, Uint32, Plain), Err(Error::OpNotSupp));
        assert_eq!(valid(Sum, Uint32, Compare), Err(Error::OpNotSupp));
        assert_eq!(valid(Cswap, Uint32, Fetch), Err(Error::OpNotSupp));
    }

    #[test]
    fn buffer_lengths() {
        let l = lens(Sum, Int32, Fetch, 3).unwrap();
        assert_eq!(l, AtomicLens { target: 12, operand: 12, compare: 0, result: 12 });
        let l = lens(Read, Double, Fetch, 2).unwrap();
        assert_eq!(l, AtomicLens { target: 16, operand: 0, compare: 0, result: 16 });
        let l = lens(CswapGt, Uint16, Compare, 5).unwrap();
        assert_eq!(l, AtomicLens { target: 10, operand: 10, compare: 10, result: 10 });
        let l = lens(Write, Uint8, Plain, 4096).unwrap();
        assert_eq!(l, AtomicLens { target: 4096, operand: 4096, compare: 0, result: 0 });
        assert_eq!(lens(Write, Uint8, Plain, 4097), Err(Error::Inval));
        assert_eq!(lens(Write, Uint64, Plain, 513), Err(Error::Inval));
        assert_eq!(lens(Write, Uint64, Plain, usize::MAX), Err(Error::Inval));
        assert_eq!(lens(Bxor, Float, Plain, 1), Err(Error::OpNotSupp));
        assert_eq!(lens(Min, Int8, Plain, 0).unwrap().target, 0);
    }

    // ------------------------------------------- every op x datatype x kind

    /// A value of any datatype, for an oracle written independently of `Elem`.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum V {
        I(i128),
        F(f64),
    }

    fn bits_of(dt: Datatype) -> u32 {
        dt.size() as u32 * 8
    }

    fn signed(dt: Datatype) -> bool {
        matches!(dt, Int8 | Int16 | Int32 | Int64)
    }

    /// Reduce an integer to `dt`'s range, as a C cast does.
    fn wrap(dt: Datatype, v: i128) -> i128 {
        let sh = 128 - bits_of(dt);
        if signed(dt) {
            (v << sh) >> sh
        } else {
            ((v as u128) << sh >> sh) as i128
        }
    }

    fn encode(dt: Datatype, v: V) -> Vec<u8> {
        match (dt, v) {
            (Float, V::F(f)) => (f as f32).to_ne_bytes().to_vec(),
            (Double, V::F(f)) => f.to_ne_bytes().to_vec(),
            (_, V::I(i)) => {
                let i = wrap(dt, i);
                match dt {
                    Int8 => (i as i8).to_ne_bytes().to_vec(),
                    Uint8 => (i as u8).to_ne_bytes().to_vec(),
                    Int16 => (i as i16).to_ne_bytes().to_vec(),
                    Uint16 => (i as u16).to_ne_bytes().to_vec(),
                    Int32 => (i as i32).to_ne_bytes().to_vec(),
                    Uint32 => (i as u32).to_ne_bytes().to_vec(),
                    Int64 => (i as i64).to_ne_bytes().to_vec(),
                    Uint64 => (i as u64).to_ne_bytes().to_vec(),
                    Float | Double => unreachable!(),
                }
            }
            _ => unreachable!("{dt} {v:?}"),
        }
    }

    fn decode(dt: Datatype, b: &[u8]) -> V {
        match dt {
            Int8 => V::I(i8::from_ne_bytes(b.try_into().unwrap()).into()),
            Uint8 => V::I(u8::from_ne_bytes(b.try_into().unwrap()).into()),
            Int16 => V::I(i16::from_ne_bytes(b.try_into().unwrap()).into()),
            Uint16 => V::I(u16::from_ne_bytes(b.try_into().unwrap()).into()),
            Int32 => V::I(i32::from_ne_bytes(b.try_into().unwrap()).into()),
            Uint32 => V::I(u32::from_ne_bytes(b.try_into().unwrap()).into()),
            Int64 => V::I(i64::from_ne_bytes(b.try_into().unwrap()).into()),
            Uint64 => V::I(u64::from_ne_bytes(b.try_into().unwrap()).into()),
            Float => V::F(f32::from_ne_bytes(b.try_into().unwrap()).into()),
            Double => V::F(f64::from_ne_bytes(b.try_into().unwrap())),
        }
    }

    /// Same value, NaNs equal to each other, `-0.0` distinct from `+0.0`.
    fn same(a: V, b: V) -> bool {
        match (a, b) {
            (V::F(x), V::F(y)) => (x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits(),
            _ => a == b,
        }
    }

    /// `o` when `cond`, else `t`.
    fn pick<T>(cond: bool, o: T, t: T) -> T {
        if cond {
            o
        } else {
            t
        }
    }

    /// fi_atomic(3)'s definition of each operation, on the oracle's values.
    fn oracle(op: AtomicOp, dt: Datatype, t: V, o: V, c: V) -> V {
        match (t, o, c) {
            (V::I(t), V::I(o), V::I(c)) => V::I(wrap(
                dt,
                match op {
                    Min => t.min(o),
                    Max => t.max(o),
                    Sum => t + o,
                    Prod => t.wrapping_mul(o),
                    Lor => ((t != 0) || (o != 0)) as i128,
                    Land => ((t != 0) && (o != 0)) as i128,
                    Lxor => ((t != 0) ^ (o != 0)) as i128,
                    Bor => t | o,
                    Band => t & o,
                    Bxor => t ^ o,
                    Read => t,
                    Write => o,
                    Cswap => pick(c == t, o, t),
                    CswapNe => pick(c != t, o, t),
                    CswapLe => pick(c <= t, o, t),
                    CswapLt => pick(c < t, o, t),
                    CswapGe => pick(c >= t, o, t),
                    CswapGt => pick(c > t, o, t),
                    Mswap => (o & c) | (t & !c),
                },
            )),
            (V::F(t), V::F(o), V::F(c)) => {
                let b = |x: bool| if x { 1.0 } else { 0.0 };
                let tt = t != 0.0;
                let ot = o != 0.0;
                V::F(match op {
                    Min => pick(o < t, o, t),
                    Max => pick(o > t, o, t),
                    Sum => t + o,
                    Prod => t * o,
                    Lor => b(tt || ot),
                    Land => b(tt && ot),
                    Lxor => b(tt != ot),
                    Read => t,
                    Write => o,
                    Cswap => pick(c == t, o, t),
                    CswapNe => pick(c != t, o, t),
                    CswapLe => pick(c <= t, o, t),
                    CswapLt => pick(c < t, o, t),
                    CswapGe => pick(c >= t, o, t),
                    CswapGt => pick(c > t, o, t),
                    Bor | Band | Bxor | Mswap => unreachable!(),
                })
            }
            _ => unreachable!(),
        }
    }

    /// Representative values: the limits, signed negatives, zeros, a bit pattern;
    /// for floats, small values whose sums and products are exact in `f32`, both
    /// zeros, infinities and NaN.
    fn samples(dt: Datatype) -> Vec<V> {
        if dt.is_float() {
            return [-2.5, -1.0, -0.0, 0.0, 0.5, 3.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN]
                .into_iter()
                .map(V::F)
                .collect();
        }
        let w = bits_of(dt);
        let (min, max) = if signed(dt) { (-(1i128 << (w - 1)), (1i128 << (w - 1)) - 1) } else { (0, (1i128 << w) - 1) };
        let mut v = vec![min, min + 1, 0, 1, 2, 3, 0x5a, max - 1, max];
        if signed(dt) {
            v.extend([-1, -2, -3]);
        }
        v.into_iter().map(|x| V::I(wrap(dt, x))).collect()
    }

    fn rotate(v: &[V], by: usize) -> Vec<V> {
        (0..v.len()).map(|i| v[(i + by) % v.len()]).collect()
    }

    fn enc_all(dt: Datatype, v: &[V]) -> Vec<u8> {
        v.iter().flat_map(|&x| encode(dt, x)).collect()
    }

    /// Every operation, datatype and kind: refused combinations report
    /// `FI_EOPNOTSUPP` and leave everything alone; supported ones, over every pair
    /// (and for compare calls every triple) of representative values, at once as
    /// one multi-element operation, give the oracle's target and the prior values.
    #[test]
    fn every_op_datatype_and_kind() {
        let mut checked = 0usize;
        for &op in AtomicOp::ALL {
            for &dt in Datatype::ALL {
                let s = samples(dt);
                let n = s.len();
                let size = dt.size();
                for kind in KINDS {
                    let before = enc_all(dt, &s);
                    if valid(op, dt, kind).is_err() {
                        let mut target = before.clone();
                        let mut result = vec![0xeeu8; n * size];
                        let res = if kind == Plain { &mut [][..] } else { &mut result[..] };
                        let operand = if op == Read { vec![] } else { before.clone() };
                        let compare = if kind == Compare { before.clone() } else { vec![] };
                        let r = apply_slice(op, dt, kind, &mut target, &operand, &compare, res);
                        assert_eq!(r, Err(Error::OpNotSupp), "{op} {dt} {kind:?}");
                        assert_eq!(target, before);
                        assert!(result.iter().all(|&b| b == 0xee));
                        continue;
                    }
                    let compare_rots = if kind == Compare { n } else { 1 };
                    for ro in 0..n {
                        for rc in 0..compare_rots {
                            let o = rotate(&s, ro);
                            let c = rotate(&s, rc);
                            let mut target = before.clone();
                            let operand = if op == Read { vec![] } else { enc_all(dt, &o) };
                            let compare = if kind == Compare { enc_all(dt, &c) } else { vec![] };
                            let mut result = if kind == Plain { vec![] } else { vec![0xeeu8; n * size] };
                            apply_slice(op, dt, kind, &mut target, &operand, &compare, &mut result)
                                .unwrap_or_else(|e| panic!("{op} {dt} {kind:?}: {e}"));
                            for i in 0..n {
                                let got = decode(dt, &target[i * size..][..size]);
                                let want = oracle(op, dt, s[i], o[i], c[i]);
                                assert!(
                                    same(got, want),
                                    "{op} {dt} {kind:?}: t={:?} o={:?} c={:?}: got {got:?}, want {want:?}",
                                    s[i],
                                    o[i],
                                    c[i]
                                );
                                if kind != Plain {
                                    let prior = decode(dt, &result[i * size..][..size]);
                                    assert!(same(prior, s[i]), "{op} {dt} {kind:?}: prior {prior:?} of {:?}", s[i]);
                                }
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 10_000, "{checked}");
    }

    // ------------------------------------------------- literal, per type

    /// A literal element type for the table below.
    trait Lit: Elem + Debug {
        const DT: Datatype;
        fn bits(self) -> u64;
    }

    macro_rules! lit {
        ($($t:ty => $dt:ident, $bits:expr);* $(;)?) => {$(
            impl Lit for $t {
                const DT: Datatype = $dt;
                #[allow(clippy::redundant_closure_call)]
                fn bits(self) -> u64 {
                    ($bits)(self)
                }
            }
        )*};
    }

    lit!(
        i8 => Int8, |x: i8| x as u8 as u64;
        u8 => Uint8, |x: u8| x as u64;
        i16 => Int16, |x: i16| x as u16 as u64;
        u16 => Uint16, |x: u16| x as u64;
        i32 => Int32, |x: i32| x as u32 as u64;
        u32 => Uint32, |x: u32| x as u64;
        i64 => Int64, |x: i64| x as u64;
        u64 => Uint64, |x: u64| x;
        f32 => Float, |x: f32| x.to_bits() as u64;
        f64 => Double, |x: f64| x.to_bits();
    );

    fn bytes<T: Lit>(v: T) -> Vec<u8> {
        let mut b = vec![0; size_of::<T>()];
        v.store(&mut b);
        b
    }

    fn same_lit<T: Lit>(a: T, b: T) -> bool {
        let nan = |x: T| x.partial_cmp(&x).is_none();
        a.bits() == b.bits() || (nan(a) && nan(b))
    }

    /// Run `op` on one element in every kind of call that takes it; check the new
    /// target and that fetching and compare calls return `t`.
    #[track_caller]
    fn check<T: Lit>(op: AtomicOp, t: T, o: T, c: T, want: T) {
        let mut kinds = 0;
        for kind in KINDS {
            if valid(op, T::DT, kind).is_err() {
                continue;
            }
            kinds += 1;
            let mut target = bytes(t);
            let operand = if op == Read { vec![] } else { bytes(o) };
            let compare = if kind == Compare { bytes(c) } else { vec![] };
            let mut result = if kind == Plain { vec![] } else { vec![0; size_of::<T>()] };
            apply_slice(op, T::DT, kind, &mut target, &operand, &compare, &mut result).unwrap();
            let got = T::load(&target).unwrap();
            assert!(same_lit(got, want), "{op} {kind:?} on {t:?}, {o:?}, {c:?}: got {got:?}, want {want:?}");
            if kind != Plain {
                let prior = T::load(&result).unwrap();
                assert!(same_lit(prior, t), "{op} {kind:?}: prior {prior:?}, want {t:?}");
            }
        }
        assert!(kinds > 0, "{op} is not valid on {}", T::DT);
    }

    #[test]
    fn signed_integers() {
        check::<i8>(Sum, -128, -1, 0, 127);
        check::<i8>(Sum, 127, 1, 0, -128);
        check::<i8>(Prod, -128, -1, 0, -128);
        check::<i8>(Prod, 16, 16, 0, 0);
        check::<i16>(Prod, -300, 200, 0, (-60_000i32) as i16);
        check::<i32>(Sum, i32::MAX, i32::MAX, 0, -2);
        check::<i32>(Prod, i32::MIN, -1, 0, i32::MIN);
        check::<i64>(Sum, i64::MIN, -1, 0, i64::MAX);
        check::<i64>(Prod, -7, 6, 0, -42);
        check::<i32>(Min, -5, 3, 0, -5);
        check::<i32>(Min, 3, -5, 0, -5);
        check::<i32>(Max, -5, 3, 0, 3);
        check::<i8>(Max, -1, -128, 0, -1);
        check::<i16>(Lor, 0, -4, 0, 1);
        check::<i16>(Lor, 0, 0, 0, 0);
        check::<i16>(Land, -1, 7, 0, 1);
        check::<i16>(Land, -1, 0, 0, 0);
        check::<i64>(Lxor, 3, 5, 0, 0);
        check::<i64>(Lxor, 0, -5, 0, 1);
        check::<i8>(Bor, 0x0f, -0x80, 0, -0x71);
        check::<i8>(Band, -1, 0x35, 0, 0x35);
        check::<i8>(Bxor, -1, 0x0f, 0, -0x10);
        check::<i32>(Read, -9, 99, 0, -9);
        check::<i32>(Write, -9, 99, 0, 99);
        // Compare ops, with compare equal to, less than and greater than the target.
        for (op, eq, lt, gt) in [
            (Cswap, true, false, false),
            (CswapNe, false, true, true),
            (CswapLe, true, true, false),
            (CswapLt, false, true, false),
            (CswapGe, true, false, true),
            (CswapGt, false, false, true),
        ] {
            let after = |swap: bool| if swap { 42i32 } else { -10 };
            check::<i32>(op, -10, 42, -10, after(eq));
            check::<i32>(op, -10, 42, -11, after(lt));
            check::<i32>(op, -10, 42, -9, after(gt));
            // Signed order: -1 < 0, not 0xffff_ffff > 0.
            check::<i32>(op, 0, 42, -1, if lt { 42 } else { 0 });
        }
        check::<i16>(Mswap, 0x0f0f, -0x5556, 0x00ff, 0x0faa);
    }

    #[test]
    fn unsigned_integers() {
        check::<u8>(Sum, 255, 1, 0, 0);
        check::<u8>(Prod, 16, 17, 0, 16);
        check::<u16>(Sum, 0, u16::MAX, 0, u16::MAX);
        check::<u32>(Sum, u32::MAX, u32::MAX, 0, u32::MAX - 1);
        check::<u64>(Prod, u64::MAX, 2, 0, u64::MAX - 1);
        check::<u64>(Prod, 1 << 32, 1 << 32, 0, 0);
        check::<u64>(Min, u64::MAX, 1, 0, 1);
        check::<u64>(Max, 1 << 63, 1, 0, 1 << 63);
        check::<u32>(Lor, 0, 0x8000_0000, 0, 1);
        check::<u32>(Land, 2, 4, 0, 1);
        check::<u32>(Lxor, 2, 0, 0, 1);
        check::<u16>(Bor, 0xf000, 0x000f, 0, 0xf00f);
        check::<u16>(Band, 0xf0f0, 0xff00, 0, 0xf000);
        check::<u16>(Bxor, 0xffff, 0x1234, 0, 0xedcb);
        check::<u64>(Read, 5, 0, 0, 5);
        check::<u64>(Write, 5, u64::MAX, 0, u64::MAX);
        // Unsigned order: 0xffff_ffff is the largest.
        check::<u32>(CswapLt, 0, 7, u32::MAX, 0);
        check::<u32>(CswapGt, 0, 7, u32::MAX, 7);
        check::<u32>(Cswap, 100, 7, 100, 7);
        check::<u32>(Cswap, 100, 7, 101, 100);
        check::<u32>(CswapNe, 100, 7, 100, 100);
        check::<u32>(CswapLe, 100, 7, 100, 7);
        check::<u32>(CswapGe, 100, 7, 99, 100);
        // MSWAP: the operand's bits where the mask is set, the target's elsewhere.
        check::<u16>(Mswap, 0xf0f0, 0x1234, 0x00ff, 0xf034);
        check::<u64>(Mswap, 0, u64::MAX, 0, 0);
        check::<u64>(Mswap, 0, u64::MAX, u64::MAX, u64::MAX);
        check::<u8>(Mswap, 0b1010_1010, 0b0101_0101, 0b1111_0000, 0b0101_1010);
    }

    #[test]
    fn floats() {
        let nan32 = f32::NAN;
        let nan = f64::NAN;
        check::<f32>(Sum, 1.5, 2.25, 0.0, 3.75);
        check::<f32>(Sum, f32::MAX, f32::MAX, 0.0, f32::INFINITY);
        check::<f64>(Sum, -0.0, -0.0, 0.0, -0.0);
        check::<f64>(Sum, -0.0, 0.0, 0.0, 0.0);
        check::<f64>(Prod, -2.0, 0.5, 0.0, -1.0);
        check::<f64>(Prod, 0.0, -3.0, 0.0, -0.0);
        check::<f64>(Prod, f64::INFINITY, 0.0, 0.0, nan);
        // MIN/MAX: C's `t > o` / `t < o`: the zeros compare equal and the target
        // keeps its sign; a NaN operand is ignored, a NaN target stays.
        check::<f64>(Min, 1.0, -2.0, 0.0, -2.0);
        check::<f64>(Max, 1.0, -2.0, 0.0, 1.0);
        check::<f64>(Min, 0.0, -0.0, 0.0, 0.0);
        check::<f64>(Min, -0.0, 0.0, 0.0, -0.0);
        check::<f32>(Max, -0.0, 0.0, 0.0, -0.0);
        check::<f32>(Min, 1.0, nan32, 0.0, 1.0);
        check::<f32>(Max, 1.0, nan32, 0.0, 1.0);
        check::<f64>(Min, nan, 1.0, 0.0, nan);
        check::<f64>(Max, nan, 1.0, 0.0, nan);
        check::<f64>(Min, f64::INFINITY, f64::MAX, 0.0, f64::MAX);
        // Logical: nonzero is true; NaN is nonzero, -0.0 is zero.
        check::<f32>(Lor, 0.0, -0.0, 0.0, 0.0);
        check::<f32>(Lor, 0.0, nan32, 0.0, 1.0);
        check::<f64>(Land, 2.5, -0.0, 0.0, 0.0);
        check::<f64>(Land, nan, -7.0, 0.0, 1.0);
        check::<f64>(Lxor, 0.25, 3.0, 0.0, 0.0);
        check::<f64>(Lxor, -0.0, 3.0, 0.0, 1.0);
        check::<f64>(Read, -0.0, 1.0, 0.0, -0.0);
        check::<f64>(Write, 1.0, -0.0, 0.0, -0.0);
        check::<f32>(Write, 1.0, nan32, 0.0, nan32);
        // Compare: C's comparisons. -0.0 == 0.0; NaN equals nothing, not even NaN.
        check::<f64>(Cswap, 0.0, 5.0, -0.0, 5.0);
        check::<f64>(Cswap, nan, 5.0, nan, nan);
        check::<f64>(CswapNe, nan, 5.0, nan, 5.0);
        check::<f64>(CswapNe, 0.0, 5.0, -0.0, 0.0);
        check::<f32>(CswapLe, 1.0, 5.0, 1.0, 5.0);
        check::<f32>(CswapLe, 1.0, 5.0, nan32, 1.0);
        check::<f32>(CswapLt, 1.0, 5.0, -1.0, 5.0);
        check::<f32>(CswapLt, 1.0, 5.0, 1.0, 1.0);
        check::<f64>(CswapGe, -1.0, 5.0, -1.0, 5.0);
        check::<f64>(CswapGe, nan, 5.0, 1.0, nan);
        check::<f64>(CswapGt, -1.0, 5.0, 0.0, 5.0);
        check::<f64>(CswapGt, -1.0, 5.0, -2.0, -1.0);
    }

    // ---------------------------------------------------- memory handling

    #[test]
    fn unaligned_targets() {
        // u64 elements at an odd offset, via the raw pointer.
        let mut buf = vec![0xaau8; 1 + 3 * 8 + 1];
        let vals = [1u64, u64::MAX, 1 << 40];
        for (i, v) in vals.iter().enumerate() {
            buf[1 + i * 8..][..8].copy_from_slice(&v.to_ne_bytes());
        }
        let operand: Vec<u8> = [2u64, 1, 3].iter().flat_map(|v| v.to_ne_bytes()).collect();
        let mut result = vec![0u8; 24];
        let p = buf.as_mut_ptr().wrapping_add(1);
        // SAFETY: `p..p+24` lies inside `buf`, which nothing else touches meanwhile.
        unsafe { apply(Sum, Uint64, Fetch, 3, p, &operand, &[], &mut result) }.unwrap();
        let got: Vec<u64> = buf[1..25].chunks(8).map(|c| u64::from_ne_bytes(c.try_into().unwrap())).collect();
        assert_eq!(got, [3, 0, (1 << 40) + 3]);
        let prior: Vec<u64> = result.chunks(8).map(|c| u64::from_ne_bytes(c.try_into().unwrap())).collect();
        assert_eq!(prior, vals);
        assert_eq!((buf[0], buf[25]), (0xaa, 0xaa), "neighbours untouched");

        // Doubles at offset 3, through a compare call.
        let mut buf = [0u8; 3 + 16];
        buf[3..11].copy_from_slice(&1.5f64.to_ne_bytes());
        buf[11..19].copy_from_slice(&(-4.0f64).to_ne_bytes());
        let operand: Vec<u8> = [9.0f64, 9.0].iter().flat_map(|v| v.to_ne_bytes()).collect();
        let compare: Vec<u8> = [1.5f64, 0.0].iter().flat_map(|v| v.to_ne_bytes()).collect();
        let mut result = vec![0u8; 16];
        apply_slice(Cswap, Double, Compare, &mut buf[3..], &operand, &compare, &mut result).unwrap();
        assert_eq!(f64::from_ne_bytes(buf[3..11].try_into().unwrap()), 9.0);
        assert_eq!(f64::from_ne_bytes(buf[11..19].try_into().unwrap()), -4.0);
        assert_eq!(&result[..8], &1.5f64.to_ne_bytes());

        // Every offset within a word, u32 MAX.
        for off in 0..8 {
            let mut buf = vec![0u8; off + 8];
            buf[off..off + 4].copy_from_slice(&7u32.to_ne_bytes());
            buf[off + 4..off + 8].copy_from_slice(&9u32.to_ne_bytes());
            let operand: Vec<u8> = [8u32, 8].iter().flat_map(|v| v.to_ne_bytes()).collect();
            apply_slice(Max, Uint32, Plain, &mut buf[off..], &operand, &[], &mut []).unwrap();
            assert_eq!(&buf[off..], [8u32.to_ne_bytes(), 9u32.to_ne_bytes()].concat(), "offset {off}");
        }
    }

    #[test]
    fn refusals_leave_everything_untouched() {
        let t8 = [0x11u8, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88];
        let b8 = [1u8; 8];
        /// Op, datatype, kind, target length, operand, compare, result length, error.
        type Case<'a> = (AtomicOp, Datatype, AtomicKind, usize, &'a [u8], &'a [u8], usize, Error);
        let cases: &[Case] = &[
            // Not supported.
            (Read, Uint64, Plain, 8, &[], &[], 0, Error::OpNotSupp),
            (Cswap, Uint64, Fetch, 8, &b8, &[], 8, Error::OpNotSupp),
            (Sum, Uint64, Compare, 8, &b8, &b8, 8, Error::OpNotSupp),
            (Bor, Double, Plain, 8, &b8, &[], 0, Error::OpNotSupp),
            (Mswap, Float, Compare, 8, &b8, &b8, 8, Error::OpNotSupp),
            // Wrong operand lengths.
            (Sum, Uint64, Plain, 8, &b8[..7], &[], 0, Error::Inval),
            (Sum, Uint32, Plain, 8, &b8[..4], &[], 0, Error::Inval),
            (Sum, Uint32, Plain, 8, &[], &[], 0, Error::Inval),
            (Write, Uint8, Fetch, 8, &[1; 9], &[], 8, Error::Inval),
            (Read, Uint64, Fetch, 8, &b8, &[], 8, Error::Inval),
            // Wrong compare lengths.
            (Sum, Uint64, Fetch, 8, &b8, &b8, 8, Error::Inval),
            (Cswap, Uint64, Compare, 8, &b8, &[], 8, Error::Inval),
            (Cswap, Uint32, Compare, 8, &b8, &b8[..4], 8, Error::Inval),
            // Wrong result lengths.
            (Sum, Uint64, Plain, 8, &b8, &[], 8, Error::Inval),
            (Sum, Uint64, Fetch, 8, &b8, &[], 0, Error::Inval),
            (Read, Uint16, Fetch, 8, &[], &[], 6, Error::Inval),
            (Cswap, Int64, Compare, 8, &b8, &b8, 16, Error::Inval),
            // A target that is not a whole number of elements.
            (Sum, Uint64, Plain, 7, &b8[..7], &[], 0, Error::Inval),
            (Sum, Int32, Plain, 6, &b8[..6], &[], 0, Error::Inval),
        ];
        for &(op, dt, kind, tlen, operand, compare, rlen, err) in cases {
            let mut target = t8[..tlen].to_vec();
            let mut result = vec![0xeeu8; rlen];
            let r = apply_slice(op, dt, kind, &mut target, operand, compare, &mut result);
            assert_eq!(r, Err(err), "{op} {dt} {kind:?} t{tlen} o{} c{} r{rlen}", operand.len(), compare.len());
            assert_eq!(target, &t8[..tlen], "{op} {dt} {kind:?}: target touched");
            assert!(result.iter().all(|&b| b == 0xee), "{op} {dt} {kind:?}: result touched");
        }

        // Too many elements: one past the limit, through both entry points.
        let mut big = vec![0x5au8; MAX_ATOMIC_BYTES + 8];
        let operand = vec![1u8; MAX_ATOMIC_BYTES + 8];
        assert_eq!(apply_slice(Sum, Uint64, Plain, &mut big, &operand, &[], &mut []), Err(Error::Inval));
        assert!(big.iter().all(|&b| b == 0x5a));
        let p = big.as_mut_ptr();
        // SAFETY: refused before the target is touched; `big` is valid anyway.
        let r = unsafe { apply(Sum, Uint8, Plain, MAX_ATOMIC_BYTES + 1, p, &operand[..4097], &[], &mut []) };
        assert_eq!(r, Err(Error::Inval));
        assert!(big.iter().all(|&b| b == 0x5a));
        // A count that would overflow `count * size`.
        // SAFETY: refused before the target is touched.
        let r = unsafe { apply(Sum, Uint64, Plain, usize::MAX / 4, p, &[], &[], &mut []) };
        assert_eq!(r, Err(Error::Inval));
        // Exactly the limit is fine.
        assert_eq!(apply_slice(Sum, Uint64, Plain, &mut big[..4096], &operand[..4096], &[], &mut []), Ok(()));
        assert!(big[..4096].chunks(8).all(|c| c == [0x5b; 8]));

        // A null target with elements; with none, nothing is touched at all.
        // SAFETY: refused before any access; a count of 0 accesses nothing.
        unsafe {
            let r = apply(Write, Uint32, Plain, 1, std::ptr::null_mut(), &[0; 4], &[], &mut []);
            assert_eq!(r, Err(Error::Inval));
            assert_eq!(apply(Write, Uint32, Plain, 0, std::ptr::null_mut(), &[], &[], &mut []), Ok(()));
            assert_eq!(apply(Write, Uint32, Plain, 0, std::ptr::null_mut(), &[0; 4], &[], &mut []), Err(Error::Inval));
        }
        assert_eq!(apply_slice(Read, Double, Fetch, &mut [], &[], &[], &mut []), Ok(()));
    }

    #[test]
    fn read_never_writes() {
        // A fetching READ leaves the bytes alone even where they are not a
        // canonical value (a signalling-NaN pattern).
        let snan = 0x7ff0_0000_0000_0001u64.to_ne_bytes();
        let mut target = snan;
        let mut result = [0u8; 8];
        apply_slice(Read, Double, Fetch, &mut target, &[], &[], &mut result).unwrap();
        assert_eq!(target, snan);
        assert_eq!(result, snan);
    }

    #[test]
    fn serialized_sums_from_many_threads() {
        const THREADS: u64 = 8;
        const ITERS: u64 = 10_000;

        /// The target as a provider holds it: a raw pointer into registered memory.
        struct Target(*mut u8);
        // SAFETY: the pointer is only dereferenced through `apply` while `LOCK`
        // below is held, and the memory outlives the threads.
        unsafe impl Sync for Target {}

        static LOCK: Mutex<()> = Mutex::new(());
        // Unaligned on purpose: bytes 3..11 of the buffer.
        let mut mem = vec![0u8; 16];
        let target = Target(mem.as_mut_ptr().wrapping_add(3));
        let mut priors: Vec<u64> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    let target = &target;
                    s.spawn(move || {
                        let one = 1u64.to_ne_bytes();
                        let mut seen = Vec::with_capacity(ITERS as usize);
                        for _ in 0..ITERS {
                            let mut prior = [0u8; 8];
                            let _g = LOCK.lock().unwrap();
                            // SAFETY: 8 bytes inside `mem`, accessed only under `LOCK`.
                            unsafe { apply(Sum, Uint64, Fetch, 1, target.0, &one, &[], &mut prior) }.unwrap();
                            seen.push(u64::from_ne_bytes(prior));
                        }
                        seen
                    })
                })
                .collect();
            handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(u64::from_ne_bytes(mem[3..11].try_into().unwrap()), THREADS * ITERS);
        assert!(mem[..3].iter().chain(&mem[11..]).all(|&b| b == 0));
        // Every fetch saw a distinct prior value: no update was lost or repeated.
        priors.sort_unstable();
        assert!(priors.iter().copied().eq(0..THREADS * ITERS));
    }
}
