//! Redis Cluster hash slots: which slot a resource lives in, and the short tag that puts a key
//! there.
//!
//! In a Cluster group every key of a resource starts with `{T}`, where `T` is the tag of the
//! resource's slot: `crc16(name) mod 16384`. The slot depends on the whole name, so a name
//! with braces of its own (`}x`, `a{b}c`) still maps onto its own slot, and every key of one
//! resource, its admission marker and its policy share that slot, so each script touches one.

use std::sync::LazyLock;

/// How many hash slots a Redis Cluster has.
pub(crate) const SLOTS: u16 = 16_384;

/// One of the 16,384 hash slots of a Redis Cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct HashSlot(u16);

impl HashSlot {
    /// The slot of a resource (a lock or a semaphore), from its whole name.
    pub fn of_resource(name: &str) -> Self {
        HashSlot(crc16(name.as_bytes()) % SLOTS)
    }

    /// The slot Redis Cluster puts `key` in: the hash tag's, when the key has a non-empty one.
    #[cfg(test)]
    pub fn of_key(key: &[u8]) -> Self {
        let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        });
        HashSlot(crc16(tagged.unwrap_or(key)) % SLOTS)
    }

    /// The slot numbered `index`, when it is one.
    pub fn new(index: u16) -> Option<Self> {
        (index < SLOTS).then_some(HashSlot(index))
    }

    pub fn index(self) -> u16 {
        self.0
    }

    /// Every slot, in order.
    #[cfg(test)]
    pub fn all() -> impl Iterator<Item = HashSlot> {
        (0..SLOTS).map(HashSlot)
    }

    /// The shortest alphanumeric text that hashes to this slot.
    pub fn tag(self) -> &'static str {
        &TAGS[usize::from(self.0)]
    }

    /// `key` moved into this slot: `{T}` before it. Redis reads the first braces of a key as
    /// its hash tag, so whatever braces `key` holds after the prefix do not count.
    pub fn key(self, key: &[u8]) -> Vec<u8> {
        let tag = self.tag().as_bytes();
        let mut moved = Vec::with_capacity(key.len() + tag.len() + 2);
        moved.push(b'{');
        moved.extend_from_slice(tag);
        moved.push(b'}');
        moved.extend_from_slice(key);
        moved
    }
}

/// CRC16-XMODEM (polynomial 0x1021, initial value 0), the hash of Redis Cluster.
fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &byte| {
        (0..8).fold(crc ^ (u16::from(byte) << 8), |crc, _| {
            if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            }
        })
    })
}

/// The tag of each slot: the first text of one, two or three alphanumerics, in a fixed order,
/// that hashes to it. Every slot has one (checked by a test); found in a few milliseconds.
static TAGS: LazyLock<Vec<String>> = LazyLock::new(|| {
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let mut tags = vec![String::new(); usize::from(SLOTS)];
    let mut missing = usize::from(SLOTS);
    let mut claim = |text: &[u8]| {
        let slot = usize::from(crc16(text) % SLOTS);
        if tags[slot].is_empty() {
            tags[slot] = String::from_utf8_lossy(text).into_owned();
            missing -= 1;
        }
        missing == 0
    };
    'search: for length in 1..=3 {
        let mut digits = vec![0usize; length];
        loop {
            let text: Vec<u8> = digits.iter().map(|&digit| ALPHABET[digit]).collect();
            if claim(&text) {
                break 'search;
            }
            // The next text of this length, as a counter in base 62.
            let mut position = length;
            loop {
                if position == 0 {
                    continue 'search;
                }
                position -= 1;
                digits[position] += 1;
                if digits[position] < ALPHABET.len() {
                    break;
                }
                digits[position] = 0;
            }
        }
    }
    tags
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_redis_cluster_specification() {
        // The check value the Cluster specification gives for "123456789".
        assert_eq!(crc16(b"123456789"), 0x31C3);
        // Slots redis-cli's CLUSTER KEYSLOT answers.
        assert_eq!(HashSlot::of_key(b"foo").index(), 12182);
        // An empty tag does not count: the whole key is hashed.
        assert_eq!(
            HashSlot::of_key(b"foo{}{bar}"),
            HashSlot(crc16(b"foo{}{bar}") % SLOTS)
        );
        assert_eq!(
            HashSlot::of_key(b"foo{{bar}}zap"),
            HashSlot::of_key(b"{bar")
        );
    }

    #[test]
    fn every_slot_has_a_tag_that_hashes_to_it() {
        for slot in HashSlot::all() {
            let tag = slot.tag();
            assert!((1..=3).contains(&tag.len()), "slot {slot:?} tag {tag:?}");
            assert!(tag.bytes().all(|b| b.is_ascii_alphanumeric()));
            assert_eq!(HashSlot::of_key(tag.as_bytes()), slot);
        }
    }

    #[test]
    fn a_resource_with_braces_of_its_own_keeps_every_key_in_its_own_slot() {
        for name in [
            "}x",
            "{",
            "}",
            "{}",
            "a{b}c",
            "{b}",
            "x{}y",
            "db:migrations",
            "ü{ñ}",
        ] {
            let slot = HashSlot::of_resource(name);
            assert_eq!(slot, HashSlot(crc16(name.as_bytes()) % SLOTS), "{name}");
            for suffix in ["lock", "fence", "permit:3", "admission", "policy"] {
                let key = format!("ql:{{{name}}}:{suffix}");
                assert_eq!(HashSlot::of_key(&slot.key(key.as_bytes())), slot, "{key}");
            }
        }
        // Two names whose own braces would share a hash tag still land on their own slots.
        assert_ne!(HashSlot::of_resource("{b}1"), HashSlot::of_resource("{b}2"));
    }
}
