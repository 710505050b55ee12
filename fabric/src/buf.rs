//! Owned, address-stable byte buffers, and the buffers of one operation.

use crate::mr::RegisteredBuf;
use fabric_core::{Error, Result};
use std::fmt;
use std::ops::{Deref, DerefMut};

/// An owned heap byte buffer whose bytes never move while it exists.
///
/// A `Buf` has a *capacity* (the size of its heap allocation, every byte of it
/// initialized) and a *length* (how many of those bytes are the contents: what a
/// send transmits, what [`Deref`] shows). Posting a receive offers the whole
/// capacity, and the completion sets the length to the bytes received.
///
/// Operations take `Buf`s by value and give them back through their completion
/// (or through [`PostError`](crate::PostError) when the post fails): while the
/// fabric may read or write the bytes, nobody else can reach them. The heap
/// allocation does not move when the `Buf` value is moved, which is what lets the
/// provider keep pointers into it.
#[derive(Default)]
pub struct Buf {
    // Invariant: the vector's length is the buffer's length, its capacity the
    // buffer's capacity, and every byte up to the capacity is initialized (the
    // spare capacity too: only this module changes the vector, and it never
    // uninitializes a byte nor grows the allocation). One vector and no separate
    // length, so that a `Buf` is three words, moved in three loads and stores
    // each time an operation takes it or a completion gives it back. Pointers
    // handed to providers are taken with `Vec::as_mut_ptr`, which creates no
    // reference to the bytes, so moving the `Vec` (a pointer, a length and a
    // capacity) does not disturb them.
    data: Vec<u8>,
}

impl Buf {
    /// A zeroed buffer of `capacity` bytes, its length equal to its capacity.
    pub fn new(capacity: usize) -> Buf {
        Buf::with_len(vec![0; capacity], capacity)
    }

    /// A buffer over `v`'s allocation, its length `len` (at most `v`'s length):
    /// the bytes of `v` are kept, and any spare capacity is zeroed first, so that
    /// every byte up to the capacity is initialized.
    fn with_len(mut v: Vec<u8>, len: usize) -> Buf {
        v.resize(v.capacity(), 0);
        v.truncate(len);
        Buf { data: v }
    }

    /// The length: the bytes that are the buffer's contents.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether the length is zero.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The capacity: the bytes the allocation holds, all initialized.
    #[inline(always)]
    pub fn capacity(&self) -> usize {
        self.data.capacity()
    }

    /// Set the length. `Err(Inval)` if `n` is above the capacity. The bytes up to
    /// the capacity are always initialized (zero or earlier contents), so any
    /// length is safe to read.
    pub fn set_len(&mut self, n: usize) -> Result<()> {
        if n > self.data.capacity() {
            return Err(Error::Inval);
        }
        self.set_len_within(n);
        Ok(())
    }

    /// Set the length to `n`, at most the capacity (a larger `n` is clamped).
    #[inline(always)]
    pub(crate) fn set_len_within(&mut self, n: usize) {
        let n = n.min(self.data.capacity());
        // SAFETY: `n` is at most the capacity, and every byte up to the capacity
        // is initialized (the type's invariant); `u8` needs no drop, so bytes
        // beyond a shorter length need none either.
        unsafe { self.data.set_len(n) }
    }

    /// Replace the contents with `src`: copies it to the start of the buffer and
    /// sets the length. `Err(Inval)` (and no change) if `src` exceeds the capacity.
    pub fn copy_from(&mut self, src: &[u8]) -> Result<()> {
        if src.len() > self.data.capacity() {
            return Err(Error::Inval);
        }
        self.set_len_within(src.len());
        self.data.copy_from_slice(src);
        Ok(())
    }

    /// The contents (`..len`).
    pub fn as_slice(&self) -> &[u8] {
        &self.data
    }

    /// The contents (`..len`), mutable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.data
    }

    /// The whole capacity, whatever the length (every byte of it initialized).
    fn whole(&self) -> &[u8] {
        // SAFETY: the pointer is the vector's allocation, valid for its capacity,
        // and every byte up to the capacity is initialized (the type's invariant).
        unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.data.capacity()) }
    }

    /// The contents as a `Vec<u8>` of length `len()`, keeping the allocation (its
    /// spare capacity included).
    pub fn into_vec(self) -> Vec<u8> {
        self.data
    }

    /// Start of the allocation, for a provider: creates no reference to the bytes.
    pub(crate) fn raw_ptr(&mut self) -> *mut u8 {
        self.data.as_mut_ptr()
    }

    /// Start of the allocation, read-only, without creating a reference to the bytes.
    pub(crate) fn raw_const_ptr(&self) -> *const u8 {
        self.data.as_ptr()
    }
}

impl Clone for Buf {
    /// A copy of the whole buffer: the same length, capacity and bytes (beyond the
    /// length too).
    fn clone(&self) -> Buf {
        Buf::with_len(self.whole().to_vec(), self.len())
    }
}

impl PartialEq for Buf {
    /// Equal lengths and equal bytes up to the capacity (the capacities equal).
    fn eq(&self, other: &Buf) -> bool {
        self.len() == other.len() && self.whole() == other.whole()
    }
}

impl Eq for Buf {}

impl From<Vec<u8>> for Buf {
    /// Take a vector's allocation: the length is the vector's length, and the
    /// capacity its capacity (spare capacity is zeroed, so all of it is
    /// initialized). `Buf::from(Vec::with_capacity(4096))` is an empty buffer that
    /// can receive 4096 bytes.
    fn from(v: Vec<u8>) -> Buf {
        let len = v.len();
        Buf::with_len(v, len)
    }
}

impl From<&[u8]> for Buf {
    /// Copy a slice: length and capacity are the slice's length.
    fn from(s: &[u8]) -> Buf {
        Buf::with_len(s.to_vec(), s.len())
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
        f.debug_struct("Buf").field("len", &self.len()).field("capacity", &self.capacity()).finish()
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
    /// One buffer registered with the domain ([`RegisteredBuf`]).
    Registered(RegisteredBuf),
}

impl OpBuffers {
    /// The single buffer: that of `One`, or the only element of a one-element
    /// `Many`. `None` otherwise (the buffers are dropped; use
    /// [`OpBuffers::into_vec`] to keep several).
    /// A registered buffer is deregistered first ([`RegisteredBuf::into_buf`];
    /// `None` if that fails).
    pub fn into_buf(self) -> Option<Buf> {
        match self {
            OpBuffers::One(b) => Some(b),
            OpBuffers::Many(mut v) if v.len() == 1 => v.pop(),
            OpBuffers::Registered(r) => deregistered(r),
            _ => None,
        }
    }

    /// The registered buffer, if that is what the operation had (else `None`,
    /// and the buffers are dropped).
    pub fn into_registered(self) -> Option<RegisteredBuf> {
        match self {
            OpBuffers::Registered(r) => Some(r),
            _ => None,
        }
    }

    /// All the buffers, in order (a registered one deregistered, as by
    /// [`OpBuffers::into_buf`]).
    pub fn into_vec(self) -> Vec<Buf> {
        match self {
            OpBuffers::None => Vec::new(),
            OpBuffers::One(b) => vec![b],
            OpBuffers::Many(v) => v,
            OpBuffers::Registered(r) => r.into_buf().into_iter().collect(),
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
            OpBuffers::One(_) | OpBuffers::Registered(_) => 1,
            OpBuffers::Many(v) => v.len(),
        }
    }

    /// The buffers as a slice.
    pub fn as_slice(&self) -> &[Buf] {
        match self {
            OpBuffers::None => &[],
            OpBuffers::One(b) => std::slice::from_ref(b),
            OpBuffers::Many(v) => v,
            OpBuffers::Registered(r) => std::slice::from_ref(r.buf()),
        }
    }

    /// The buffers as a mutable slice (for posting and completing, which neither
    /// replace a buffer nor move its allocation).
    pub(crate) fn as_mut_slice(&mut self) -> &mut [Buf] {
        match self {
            OpBuffers::None => &mut [],
            OpBuffers::One(b) => std::slice::from_mut(b),
            OpBuffers::Many(v) => v,
            OpBuffers::Registered(r) => std::slice::from_mut(r.buf_mut()),
        }
    }
}

impl From<Buf> for OpBuffers {
    fn from(b: Buf) -> OpBuffers {
        OpBuffers::One(b)
    }
}

/// [`OpBuffers::into_buf`] of a registered buffer, out of the common path.
#[cold]
#[inline(never)]
fn deregistered(r: RegisteredBuf) -> Option<Buf> {
    r.into_buf().ok()
}

impl From<RegisteredBuf> for OpBuffers {
    fn from(r: RegisteredBuf) -> OpBuffers {
        OpBuffers::Registered(r)
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
    fn bytes_beyond_the_length_are_kept() {
        let mut b = Buf::from(b"abcdef");
        b.set_len(2).unwrap();
        assert_eq!(&*b, b"ab");
        // A clone is the whole buffer: its bytes past the length come along.
        let mut c = b.clone();
        assert_eq!((c.len(), c.capacity()), (2, 6));
        assert_eq!(c, b);
        c.set_len(6).unwrap();
        assert_eq!(&*c, b"abcdef");
        // Equality looks past the length too.
        let mut d = Buf::from(b"abXdef");
        d.set_len(2).unwrap();
        assert_ne!(d, b);
        // copy_from grows the length within the capacity over earlier contents.
        b.copy_from(b"xyz").unwrap();
        assert_eq!(&*b, b"xyz");
        b.set_len(6).unwrap();
        assert_eq!(&*b, b"xyzdef");
        assert_eq!(b.copy_from(&[0; 7]), Err(Error::Inval));
        assert_eq!(&*b, b"xyzdef");
        // A vector's spare capacity is zeroed and reachable.
        let mut v = Vec::with_capacity(8);
        v.push(1u8);
        let mut e = Buf::from(v);
        assert_eq!(e.len(), 1);
        e.set_len(e.capacity()).unwrap();
        assert_eq!(e[0], 1);
        assert!(e[1..].iter().all(|&x| x == 0));
        assert_eq!(Buf::default().capacity(), 0);
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
}
