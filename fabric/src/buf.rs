//! Owned, address-stable byte buffers, and the buffers of one operation.

use fabric_core::{Error, Result};
use std::fmt;
use std::ops::{Deref, DerefMut};

/// An owned heap byte buffer whose bytes never move while it exists.
///
/// A `Buf` has a *capacity* (the size of its heap allocation, or of the aligned
/// part of it, every byte of it initialized) and a *length* (how many of those bytes are the contents: what a
/// send transmits, what [`Deref`] shows). Posting a receive offers the whole
/// capacity, and the completion sets the length to the bytes received.
///
/// Operations take `Buf`s by value and give them back through their completion
/// (or through [`PostError`](crate::PostError) when the post fails): while the
/// fabric may read or write the bytes, nobody else can reach them. The heap
/// allocation does not move when the `Buf` value is moved, which is what lets the
/// provider keep pointers into it.
///
/// [`Buf::aligned`] makes a buffer whose first byte lies at a chosen alignment (a
/// page, as libfabric's tools allocate theirs): the kernel copies a large message
/// faster between page-aligned buffers (a 64 KiB `process_vm_readv` pins 16 pages
/// instead of 17, and its copy runs aligned).
#[derive(Eq)]
pub struct Buf {
    // Invariant: `data[off..off + capacity]` is the buffer, `capacity` being
    // `data.len() - (align - 1)`; every byte of `data` is initialized;
    // `len <= capacity`; `off < align`, `align` a power of two (1 unless made by
    // `aligned`, so that a plain buffer is its whole allocation). Pointers handed
    // to providers are taken with `addr_of!` through the box, which creates no
    // reference to the bytes, so moving the box (a pointer and a length) does not
    // disturb them. A box rather than a `Vec` keeps a `Buf` at four words.
    data: Box<[u8]>,
    off: u32,
    align: u32,
    len: usize,
}

impl Buf {
    /// A zeroed buffer of `capacity` bytes, its length equal to its capacity.
    pub fn new(capacity: usize) -> Buf {
        Buf { data: vec![0; capacity].into_boxed_slice(), off: 0, align: 1, len: capacity }
    }

    /// A zeroed buffer of `capacity` bytes whose first byte lies at a multiple of
    /// `align` (a power of two, at most 2^31), its length equal to its capacity:
    /// `Buf::aligned(n, 4096)` is page-aligned, as libfabric's tools allocate their
    /// buffers. The allocation holds up to `align - 1` bytes more, unused. Its
    /// clones are aligned alike. `Err(Inval)` for another `align`, or a size that
    /// overflows.
    pub fn aligned(capacity: usize, align: usize) -> Result<Buf> {
        if !align.is_power_of_two() || align > 1 << 31 {
            return Err(Error::Inval);
        }
        let total = capacity.checked_add(align - 1).ok_or(Error::Inval)?;
        let data = vec![0; total].into_boxed_slice();
        // The distance from the allocation's start up to the next multiple of align.
        let off = (data.as_ptr() as usize).wrapping_neg() & (align - 1);
        Ok(Buf { data, off: off as u32, align: align as u32, len: capacity })
    }

    /// The offset of the buffer in `data`.
    #[inline(always)]
    fn off(&self) -> usize {
        self.off as usize
    }

    /// The length: the bytes that are the buffer's contents.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the length is zero.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The capacity: the bytes the allocation holds, all initialized.
    pub fn capacity(&self) -> usize {
        self.data.len() - (self.align as usize - 1)
    }

    /// Set the length. `Err(Inval)` if `n` is above the capacity. The bytes up to
    /// the capacity are always initialized (zero or earlier contents), so any
    /// length is safe to read.
    pub fn set_len(&mut self, n: usize) -> Result<()> {
        if n > self.capacity() {
            return Err(Error::Inval);
        }
        self.len = n;
        Ok(())
    }

    /// Replace the contents with `src`: copies it to the start of the buffer and
    /// sets the length. `Err(Inval)` (and no change) if `src` exceeds the capacity.
    pub fn copy_from(&mut self, src: &[u8]) -> Result<()> {
        if src.len() > self.capacity() {
            return Err(Error::Inval);
        }
        let o = self.off();
        self.data[o..o + src.len()].copy_from_slice(src);
        self.len = src.len();
        Ok(())
    }

    /// The contents (`..len`).
    pub fn as_slice(&self) -> &[u8] {
        let o = self.off();
        &self.data[o..o + self.len]
    }

    /// The contents (`..len`), mutable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let o = self.off();
        &mut self.data[o..o + self.len]
    }

    /// The contents as a `Vec<u8>` of length `len()`, keeping the allocation (its
    /// spare capacity included). The contents of an aligned buffer that does not
    /// start its allocation are moved to the start first.
    pub fn into_vec(self) -> Vec<u8> {
        let o = self.off();
        let mut v = Vec::from(self.data);
        v.truncate(o + self.len);
        if o > 0 {
            v.drain(..o);
        }
        v
    }

    /// Start of the allocation, for a provider: creates no reference to the bytes.
    pub(crate) fn raw_ptr(&mut self) -> *mut u8 {
        // Within the allocation: off <= data.len().
        std::ptr::addr_of_mut!(*self.data).cast::<u8>().wrapping_add(self.off())
    }

    /// Start of the allocation, read-only, without creating a reference to the bytes.
    pub(crate) fn raw_const_ptr(&self) -> *const u8 {
        // Within the allocation: off <= data.len().
        std::ptr::addr_of!(*self.data).cast::<u8>().wrapping_add(self.off())
    }
}

impl Default for Buf {
    /// An empty buffer (no capacity).
    fn default() -> Buf {
        Buf::new(0)
    }
}

impl Clone for Buf {
    /// The same length and capacity, every byte of the capacity copied; a buffer
    /// made by [`Buf::aligned`] clones into one aligned alike.
    fn clone(&self) -> Buf {
        if self.align == 1 {
            return Buf { data: self.data.clone(), off: 0, align: 1, len: self.len };
        }
        let mut b = Buf::aligned(self.capacity(), self.align as usize).expect("the alignment was accepted once");
        let o = b.off();
        let (so, n) = (self.off(), self.capacity());
        b.data[o..o + n].copy_from_slice(&self.data[so..so + n]);
        b.len = self.len;
        b
    }
}

impl PartialEq for Buf {
    /// Equal lengths and equal bytes over the whole capacity (as before alignment:
    /// where the allocation starts does not count).
    fn eq(&self, other: &Buf) -> bool {
        let (a, b) = (self.off(), other.off());
        self.len == other.len
            && self.capacity() == other.capacity()
            && self.data[a..a + self.capacity()] == other.data[b..b + other.capacity()]
    }
}

impl From<Vec<u8>> for Buf {
    /// Take a vector's allocation: the length is the vector's length, and the
    /// capacity its capacity (spare capacity is zeroed, so all of it is
    /// initialized). `Buf::from(Vec::with_capacity(4096))` is an empty buffer that
    /// can receive 4096 bytes.
    fn from(mut v: Vec<u8>) -> Buf {
        let len = v.len();
        v.resize(v.capacity(), 0);
        // No reallocation: the length is the capacity.
        Buf { data: v.into_boxed_slice(), off: 0, align: 1, len }
    }
}

impl From<&[u8]> for Buf {
    /// Copy a slice: length and capacity are the slice's length.
    fn from(s: &[u8]) -> Buf {
        Buf { data: s.into(), off: 0, align: 1, len: s.len() }
    }
}

impl<const N: usize> From<&[u8; N]> for Buf {
    /// Copy an array: length and capacity are `N`.
    fn from(s: &[u8; N]) -> Buf {
        Buf::from(&s[..])
    }
}

impl Deref for Buf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl DerefMut for Buf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl AsRef<[u8]> for Buf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsMut<[u8]> for Buf {
    fn as_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl fmt::Debug for Buf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buf").field("len", &self.len).field("capacity", &self.capacity()).finish()
    }
}

/// The buffers of one operation, as posted and as given back.
#[derive(Debug, Default, PartialEq, Eq)]
pub enum OpBuffers {
    /// No buffer (a zero-length send, a peek, a discard).
    #[default]
    None,
    /// One buffer.
    One(Buf),
    /// A vector of buffers (`sendv`, `recvv`).
    Many(Vec<Buf>),
}

impl OpBuffers {
    /// The single buffer: that of `One`, or the only element of a one-element
    /// `Many`. `None` otherwise (the buffers are dropped; use
    /// [`OpBuffers::into_vec`] to keep several).
    pub fn into_buf(self) -> Option<Buf> {
        match self {
            OpBuffers::One(b) => Some(b),
            OpBuffers::Many(mut v) if v.len() == 1 => v.pop(),
            _ => None,
        }
    }

    /// All the buffers, in order.
    pub fn into_vec(self) -> Vec<Buf> {
        match self {
            OpBuffers::None => Vec::new(),
            OpBuffers::One(b) => vec![b],
            OpBuffers::Many(v) => v,
        }
    }

    /// Whether there is no buffer.
    pub fn is_none(&self) -> bool {
        matches!(self, OpBuffers::None)
    }

    /// The number of buffers.
    pub fn count(&self) -> usize {
        match self {
            OpBuffers::None => 0,
            OpBuffers::One(_) => 1,
            OpBuffers::Many(v) => v.len(),
        }
    }

    /// The buffers as a slice.
    pub fn as_slice(&self) -> &[Buf] {
        match self {
            OpBuffers::None => &[],
            OpBuffers::One(b) => std::slice::from_ref(b),
            OpBuffers::Many(v) => v,
        }
    }

    /// The buffers as a mutable slice.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [Buf] {
        match self {
            OpBuffers::None => &mut [],
            OpBuffers::One(b) => std::slice::from_mut(b),
            OpBuffers::Many(v) => v,
        }
    }
}

impl From<Buf> for OpBuffers {
    fn from(b: Buf) -> OpBuffers {
        OpBuffers::One(b)
    }
}

impl From<Vec<Buf>> for OpBuffers {
    fn from(v: Vec<Buf>) -> OpBuffers {
        OpBuffers::Many(v)
    }
}

impl From<Option<Buf>> for OpBuffers {
    fn from(b: Option<Buf>) -> OpBuffers {
        b.map_or(OpBuffers::None, OpBuffers::One)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_and_capacity() {
        let mut b = Buf::new(8);
        assert_eq!((b.len(), b.capacity()), (8, 8));
        assert_eq!(&b[..], &[0; 8]);
        b.set_len(3).unwrap();
        assert_eq!(b.len(), 3);
        assert_eq!(b.set_len(9), Err(Error::Inval));
        b.copy_from(b"hey").unwrap();
        assert_eq!(&*b, b"hey");
        assert_eq!(b.copy_from(&[1; 9]), Err(Error::Inval));
        b.set_len(8).unwrap();
        assert_eq!(&b[3..], &[0; 5]);
        assert_eq!(b.into_vec(), b"hey\0\0\0\0\0");
    }

    #[test]
    fn from_vec_keeps_spare_capacity() {
        let b = Buf::from(Vec::with_capacity(64));
        assert_eq!(b.len(), 0);
        assert!(b.capacity() >= 64);
        let mut v = Vec::with_capacity(16);
        v.extend_from_slice(b"abc");
        let mut b = Buf::from(v);
        assert_eq!(&*b, b"abc");
        b.set_len(b.capacity()).unwrap();
        assert!(b[3..].iter().all(|&x| x == 0));
        b.set_len(3).unwrap();
        let v = b.into_vec();
        assert_eq!(v, b"abc");
        assert!(v.capacity() >= 16);
        assert_eq!(&*Buf::from(&b"xy"[..]), b"xy");
        assert_eq!(Buf::from(b"xyz").capacity(), 3);
    }

    #[test]
    fn op_buffers() {
        assert_eq!(OpBuffers::One(Buf::new(1)).into_buf(), Some(Buf::new(1)));
        assert_eq!(OpBuffers::Many(vec![Buf::new(2)]).into_buf(), Some(Buf::new(2)));
        assert_eq!(OpBuffers::Many(vec![Buf::new(2), Buf::new(1)]).into_buf(), None);
        assert_eq!(OpBuffers::None.into_vec().len(), 0);
        assert_eq!(OpBuffers::Many(vec![Buf::new(2), Buf::new(1)]).into_vec().len(), 2);
        assert_eq!(OpBuffers::from(Buf::new(1)).count(), 1);
    }

    #[test]
    fn aligned_buffers_start_at_their_alignment_and_behave_as_any() {
        for align in [1usize, 2, 64, 4096, 1 << 16] {
            for cap in [0usize, 1, 100, 65536] {
                let mut b = Buf::aligned(cap, align).unwrap();
                assert_eq!((b.raw_ptr() as usize) % align, 0, "align {align} cap {cap}");
                assert_eq!((b.raw_const_ptr() as usize) % align, 0);
                assert_eq!((b.len(), b.capacity()), (cap, cap));
                assert!(b.iter().all(|&x| x == 0));
                if cap >= 3 {
                    b.copy_from(b"abc").unwrap();
                    assert_eq!(&b[..], b"abc");
                    // Clones are aligned alike, equal, and their own bytes.
                    let mut c = b.clone();
                    assert_eq!((c.raw_ptr() as usize) % align, 0);
                    assert_eq!(c, b);
                    assert_ne!(c.raw_ptr(), b.raw_ptr());
                    c.set_len(cap).unwrap();
                    assert_eq!(c.capacity(), cap);
                    c[0] = b'z';
                    assert_eq!(&b[..1], b"a");
                    // Equal to an unaligned buffer of the same bytes.
                    let mut u = Buf::new(cap);
                    u.copy_from(b"abc").unwrap();
                    assert_eq!(u, b);
                    let v = b.into_vec();
                    assert_eq!(v, b"abc");
                }
                assert_eq!(Buf::aligned(cap, align).unwrap().set_len(cap + 1), Err(Error::Inval));
            }
        }
        for bad in [0usize, 3, 48, 1 << 32] {
            assert_eq!(Buf::aligned(8, bad).err(), Some(Error::Inval));
        }
        assert_eq!(Buf::aligned(usize::MAX, 4096).err(), Some(Error::Inval));
        assert_eq!(Buf::default().capacity(), 0);
    }
}
