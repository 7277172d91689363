//! A table of entries addressed by index and generation.
//!
//! The generation makes a stale key harmless: an event for a connection
//! that has since ended and whose slot was reused finds nothing, instead of
//! reaching the stranger now in that slot.

use std::num::NonZeroU32;

/// A key into a [`Slab`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub index: u32,
    /// Never 0, so that an `Option<Key>` is as small as a `Key`.
    pub generation: NonZeroU32,
}

impl Key {
    /// The key a slot's first entry gets.
    pub const fn first(index: u32) -> Key {
        Key {
            index,
            generation: NonZeroU32::MIN,
        }
    }
}

/// Entries and their generations are in two arrays side by side: in one
/// array of pairs a 4 B generation would pad each entry to its alignment.
pub struct Slab<T> {
    slots: Vec<Option<T>>,
    generations: Vec<NonZeroU32>,
    free: Vec<u32>,
    len: usize,
    capacity: usize,
}

impl<T> Slab<T> {
    /// A table that never holds more than `capacity` entries, its storage
    /// reserved at once so that it never reallocates.
    pub fn with_capacity(capacity: usize) -> Slab<T> {
        assert!(capacity <= u32::MAX as usize);
        Slab {
            slots: Vec::with_capacity(capacity),
            generations: Vec::with_capacity(capacity),
            free: Vec::with_capacity(capacity),
            len: 0,
            capacity,
        }
    }

    /// A table bounded by `capacity` that grows as it fills, for tables
    /// whose bound is far above what they usually hold.
    pub fn growable(capacity: usize) -> Slab<T> {
        assert!(capacity <= u32::MAX as usize);
        Slab {
            slots: Vec::new(),
            generations: Vec::new(),
            free: Vec::new(),
            len: 0,
            capacity,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_full(&self) -> bool {
        self.len == self.capacity
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Inserts a value built from its own key, or gives it back when full.
    pub fn insert_with(&mut self, make: impl FnOnce(Key) -> T) -> Option<Key> {
        if self.is_full() {
            return None;
        }
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                self.slots.push(None);
                self.generations.push(NonZeroU32::MIN);
                (self.slots.len() - 1) as u32
            }
        };
        let key = Key {
            index,
            generation: self.generations[index as usize],
        };
        let slot = &mut self.slots[index as usize];
        debug_assert!(slot.is_none());
        *slot = Some(make(key));
        self.len += 1;
        Some(key)
    }

    fn is_current(&self, key: Key) -> bool {
        self.generations.get(key.index as usize) == Some(&key.generation)
    }

    pub fn get(&self, key: Key) -> Option<&T> {
        if !self.is_current(key) {
            return None;
        }
        self.slots[key.index as usize].as_ref()
    }

    pub fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        if !self.is_current(key) {
            return None;
        }
        self.slots[key.index as usize].as_mut()
    }

    pub fn contains(&self, key: Key) -> bool {
        self.get(key).is_some()
    }

    pub fn remove(&mut self, key: Key) -> Option<T> {
        if !self.is_current(key) {
            return None;
        }
        let value = self.slots[key.index as usize].take()?;
        let generation = &mut self.generations[key.index as usize];
        // Past u32::MAX the generation starts again at 1, skipping 0.
        *generation = generation.checked_add(1).unwrap_or(NonZeroU32::MIN);
        self.free.push(key.index);
        self.len -= 1;
        Some(value)
    }

    pub fn iter(&self) -> impl Iterator<Item = (Key, &T)> {
        let generations = self.generations.iter();
        (0..)
            .zip(self.slots.iter().zip(generations))
            .filter_map(|(index, (slot, &generation))| {
                let key = Key { index, generation };
                slot.as_ref().map(|value| (key, value))
            })
    }

    pub fn keys(&self) -> Vec<Key> {
        self.iter().map(|(key, _)| key).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_past_capacity_and_reuses_slots() {
        let mut slab = Slab::with_capacity(2);
        let a = slab.insert_with(|_| 'a').unwrap();
        let _b = slab.insert_with(|_| 'b').unwrap();
        assert!(slab.insert_with(|_| 'c').is_none());
        assert_eq!(slab.remove(a), Some('a'));
        let c = slab.insert_with(|_| 'c').unwrap();
        assert_eq!(c.index, a.index);
        assert_ne!(c.generation, a.generation);
        assert_eq!(
            slab.get(a),
            None,
            "a stale key must not reach the new entry"
        );
        assert_eq!(slab.get(c), Some(&'c'));
    }

    #[test]
    fn an_optional_key_is_as_small_as_a_key() {
        assert_eq!(
            std::mem::size_of::<Option<Key>>(),
            std::mem::size_of::<Key>()
        );
    }

    #[test]
    fn a_generation_past_its_maximum_starts_again_at_one() {
        let mut slab = Slab::with_capacity(1);
        let a = slab.insert_with(|_| 'a').unwrap();
        slab.generations[a.index as usize] = NonZeroU32::MAX;
        let old = Key {
            generation: NonZeroU32::MAX,
            ..a
        };
        assert_eq!(slab.remove(old), Some('a'));
        let b = slab.insert_with(|_| 'b').unwrap();
        assert_eq!(b.generation, NonZeroU32::MIN);
        assert_eq!(slab.get(old), None);
        assert_eq!(slab.get(b), Some(&'b'));
    }
}
