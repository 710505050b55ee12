//! A slab of values with generation-checked `u64` ids (`gen << 32 | index`,
//! the generation never 0, so an id is never below 2^32): an id handed to a
//! peer or a queue and coming back after its value was removed finds nothing,
//! even if the slot was reused. Operations in flight are kept this way by the
//! providers.

/// A generation-checked slab: ids are `gen << 32 | index`, never 0.
pub struct Slab<T> {
    /// Each slot's current generation and value; an id is valid while its
    /// generation matches and the value is there.
    slots: Vec<(u32, Option<T>)>,
    /// Indices of the empty slots, reused first.
    free: Vec<u32>,
    /// Values stored (`slots` with a value).
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Slab<T> {
    /// An empty slab.
    pub fn new() -> Self {
        Slab { slots: Vec::new(), free: Vec::new(), len: 0 }
    }

    /// Values stored.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Store `v`; its id.
    pub fn insert(&mut self, v: T) -> u64 {
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push((0, None));
                (self.slots.len() - 1) as u32
            }
        };
        let s = &mut self.slots[idx as usize];
        s.0 = s.0.wrapping_add(1).max(1);
        s.1 = Some(v);
        self.len += 1;
        (s.0 as u64) << 32 | idx as u64
    }

    /// The value of `id`, if it is still there.
    pub fn get(&self, id: u64) -> Option<&T> {
        let s = self.slots.get((id & 0xffff_ffff) as usize)?;
        (s.0 as u64 == id >> 32).then_some(())?;
        s.1.as_ref()
    }

    /// The value of `id`, mutably, if it is still there.
    pub fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        let s = self.slots.get_mut((id & 0xffff_ffff) as usize)?;
        (s.0 as u64 == id >> 32).then_some(())?;
        s.1.as_mut()
    }

    /// Take the value of `id` out (its id is never valid again).
    pub fn remove(&mut self, id: u64) -> Option<T> {
        let idx = (id & 0xffff_ffff) as usize;
        let s = self.slots.get_mut(idx)?;
        if s.0 as u64 != id >> 32 {
            return None;
        }
        let v = s.1.take()?;
        self.free.push(idx as u32);
        self.len -= 1;
        Some(v)
    }

    /// The ids of the values `keep` selects.
    pub fn ids(&self, mut keep: impl FnMut(&T) -> bool) -> Vec<u64> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.1.as_ref().is_some_and(&mut keep))
            .map(|(i, s)| (s.0 as u64) << 32 | i as u64)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slab_ids_are_generation_checked() {
        let mut s = Slab::new();
        let a = s.insert(1);
        assert_eq!(s.remove(a), Some(1));
        let b = s.insert(2);
        assert_ne!(a, b);
        assert!(s.get(a).is_none());
        assert_eq!(s.get(b), Some(&2));
        assert_ne!(a, 0);
    }

    /// Ids leave the values below 2^32 to their users (verbs tags work
    /// requests that have no record with such a value): the generation is never
    /// 0, also when it wraps.
    #[test]
    fn slab_ids_are_never_below_two_to_the_32() {
        let mut s = Slab::new();
        let a = s.insert(1);
        assert!(a >= 1 << 32);
        s.remove(a);
        s.slots[0].0 = u32::MAX;
        let b = s.insert(2);
        assert_eq!(b, 1 << 32, "the generation wraps to 1, not 0");
        assert_eq!(s.get(b), Some(&2));
    }
}
