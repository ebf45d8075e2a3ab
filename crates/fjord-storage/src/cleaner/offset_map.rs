//! The cleaner's key → last offset map, bounded by `log.cleaner.dedupe.buffer.size`.
//!
//! Keys are not stored: each is reduced to a 128-bit SipHash-1-3 under a key drawn at random
//! for every map, so a producer cannot make two of its keys collide on purpose, and chance
//! collisions are out of reach (24 bytes a slot, as Kafka's MD5-based map). The table starts
//! small and doubles up to the bound, so a log with few keys costs little memory.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

use siphasher::sip128::SipHasher13;

/// Bytes one slot takes: the key's 128-bit hash and an offset.
pub const BYTES_PER_ENTRY: u64 = 24;
/// A table this small is not worth growing from.
const MIN_SLOTS: usize = 1024;

#[derive(Debug, Clone, Copy)]
struct Slot {
    hash: [u64; 2],
    /// -1: empty. Offsets in a log are never negative.
    offset: i64,
}

const EMPTY: Slot = Slot {
    hash: [0, 0],
    offset: -1,
};

/// See the module docs.
#[derive(Debug)]
pub struct OffsetMap {
    hasher: SipHasher13,
    slots: Vec<Slot>,
    max_slots: usize,
    load_factor: f64,
    len: usize,
    /// The last offset of the last batch fully mapped; -1 when none.
    latest_offset: i64,
}

/// `put` found no room: the map holds all it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapFull;

impl OffsetMap {
    /// A map of at most `memory_bytes` (at least one slot), filled to at most `load_factor`.
    pub fn new(memory_bytes: u64, load_factor: f64) -> OffsetMap {
        let max_slots = usize::try_from(memory_bytes / BYTES_PER_ENTRY)
            .unwrap_or(usize::MAX)
            .max(1);
        let random = |salt: u64| {
            let mut hasher = RandomState::new().build_hasher();
            hasher.write_u64(salt);
            hasher.finish()
        };
        OffsetMap {
            hasher: SipHasher13::new_with_keys(random(0), random(1)),
            slots: vec![EMPTY; MIN_SLOTS.min(max_slots)],
            max_slots,
            load_factor: load_factor.clamp(0.01, 1.0),
            len: 0,
            latest_offset: -1,
        }
    }

    /// The most keys the map will hold.
    pub fn max_entries(&self) -> usize {
        ((self.max_slots as f64 * self.load_factor) as usize).max(1)
    }

    fn hash(&self, key: &[u8]) -> [u64; 2] {
        let (a, b) = self.hasher.hash(key).as_u64();
        [a, b]
    }

    /// The slot holding `hash`, or the empty slot where it would go (linear probing); `None`
    /// when the key is absent and no slot is free.
    fn find(slots: &[Slot], hash: [u64; 2]) -> Option<usize> {
        let n = slots.len();
        // Multiply-shift maps the hash onto any table size, not only powers of two.
        let mut i = ((u128::from(hash[0]) * n as u128) >> 64) as usize;
        for _ in 0..n {
            let slot = slots.get(i)?;
            if slot.offset < 0 || slot.hash == hash {
                return Some(i);
            }
            i = if i + 1 == n { 0 } else { i + 1 };
        }
        None
    }

    /// Records `offset` as the latest of `key`; a key already present takes no new room.
    pub fn put(&mut self, key: &[u8], offset: i64) -> Result<(), MapFull> {
        debug_assert!(offset >= 0);
        let hash = self.hash(key);
        if let Some(slot) = Self::find(&self.slots, hash).and_then(|i| self.slots.get_mut(i)) {
            if slot.offset >= 0 {
                slot.offset = offset;
                return Ok(());
            }
        }
        if self.len + 1 > self.max_entries() {
            return Err(MapFull);
        }
        if (self.len + 1) as f64 > self.slots.len() as f64 * self.load_factor {
            self.grow();
        }
        let slot = Self::find(&self.slots, hash)
            .and_then(|i| self.slots.get_mut(i))
            .ok_or(MapFull)?;
        *slot = Slot { hash, offset };
        self.len += 1;
        Ok(())
    }

    fn grow(&mut self) {
        let size = self.slots.len().saturating_mul(2).min(self.max_slots);
        if size <= self.slots.len() {
            return;
        }
        let mut slots = vec![EMPTY; size];
        for slot in self.slots.iter().filter(|s| s.offset >= 0) {
            if let Some(target) = Self::find(&slots, slot.hash).and_then(|i| slots.get_mut(i)) {
                *target = *slot;
            }
        }
        self.slots = slots;
    }

    /// The latest offset recorded for `key`.
    pub fn get(&self, key: &[u8]) -> Option<i64> {
        let slot = self.slots.get(Self::find(&self.slots, self.hash(key))?)?;
        (slot.offset >= 0).then_some(slot.offset)
    }

    pub fn set_latest_offset(&mut self, offset: i64) {
        debug_assert!(offset >= self.latest_offset, "the map only moves forward");
        self.latest_offset = offset;
    }

    pub fn latest_offset(&self) -> i64 {
        self.latest_offset
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes the table takes now.
    pub fn memory_bytes(&self) -> u64 {
        self.slots.len() as u64 * BYTES_PER_ENTRY
    }

    /// Share of the bound in use, as Kafka reports buffer utilization.
    pub fn utilization(&self) -> f64 {
        self.len as f64 / self.max_slots as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_latest_offset_of_each_key_while_growing() {
        let mut map = OffsetMap::new(24 * 100_000, 0.9);
        for round in 0..3i64 {
            for key in 0..20_000i64 {
                map.put(format!("k{key}").as_bytes(), round * 20_000 + key)
                    .unwrap();
            }
        }
        assert_eq!(map.len(), 20_000);
        for key in 0..20_000i64 {
            assert_eq!(map.get(format!("k{key}").as_bytes()), Some(40_000 + key));
        }
        assert_eq!(map.get(b"absent"), None);
        assert!(map.memory_bytes() <= 24 * 100_000);
    }

    #[test]
    fn refuses_new_keys_beyond_its_bound_but_updates_old_ones() {
        let mut map = OffsetMap::new(24 * 100, 0.9);
        assert_eq!(map.max_entries(), 90);
        for key in 0..90i64 {
            map.put(&key.to_be_bytes(), key).unwrap();
        }
        assert_eq!(map.put(b"one more", 91), Err(MapFull));
        map.put(&5i64.to_be_bytes(), 500).unwrap();
        assert_eq!(map.get(&5i64.to_be_bytes()), Some(500));
        assert_eq!(map.memory_bytes(), 24 * 100);
    }

    #[test]
    fn a_tiny_bound_still_holds_one_key() {
        let mut map = OffsetMap::new(1, 0.9);
        map.put(b"a", 1).unwrap();
        assert_eq!(map.put(b"b", 2), Err(MapFull));
        assert_eq!(map.get(b"a"), Some(1));
    }
}
