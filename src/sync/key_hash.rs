//! The hashing of the syncer's own tables of services: memory, the desired
//! state's index and record of changes, the keys a dump listed, the
//! services whose state is unknown and the rolling verification record.
//!
//! A resync looks every service up in several tables while the kernel dumps
//! the next part of the table, and with the standard library's SipHash the
//! hashing was the largest single cost of that work (about an eighth of the
//! calling thread's samples under `perf`, 5,000 services on 6.1). A
//! [`ServiceKey`](crate::model::ServiceKey) hashes as one write of 24
//! bytes, so a few multiplications do: each 8-byte word is mixed into the
//! state by a 64 x 64 -> 128-bit multiply whose halves are folded together,
//! with keys drawn at random once per process, so that which keys collide
//! cannot be known from outside (the standard library's `RandomState` draws
//! the keys). Tables the crate hands out (such as
//! [`Ledger::owned`](super::Ledger::owned)) keep the standard hasher.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

/// Builds [`KeyHasher`]s with this process's keys.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyHashing {
    keys: [u64; 3],
}

impl Default for KeyHashing {
    fn default() -> Self {
        static KEYS: OnceLock<[u64; 3]> = OnceLock::new();
        let keys = *KEYS.get_or_init(|| {
            let random = RandomState::new();
            // Odd multipliers keep the low bits of a word in play.
            [
                random.hash_one(1u8),
                random.hash_one(2u8) | 1,
                random.hash_one(3u8) | 1,
            ]
        });
        KeyHashing { keys }
    }
}

impl BuildHasher for KeyHashing {
    type Hasher = KeyHasher;

    fn build_hasher(&self) -> KeyHasher {
        KeyHasher {
            state: self.keys[0],
            keys: self.keys,
        }
    }
}

/// The hasher of [`KeyHashing`]: any bytes, best at a few words.
#[derive(Clone, Debug)]
pub(crate) struct KeyHasher {
    state: u64,
    keys: [u64; 3],
}

/// The two halves of `a * b` (128 bits) folded into one word.
fn folded_multiply(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    // Truncations on purpose: the low and the high half.
    (product as u64) ^ ((product >> 64) as u64)
}

impl KeyHasher {
    fn mix(&mut self, word: u64) {
        self.state = folded_multiply(self.state ^ word, self.keys[1]);
    }
}

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            let mut w = [0u8; 8];
            w.copy_from_slice(word);
            self.mix(u64::from_le_bytes(w));
        }
        let rest = words.remainder();
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        // The length ends every write, so that "ab" + "c" and "a" + "bc"
        // differ.
        self.mix(u64::from_le_bytes(w) ^ ((bytes.len() as u64) << 56));
    }

    fn finish(&self) -> u64 {
        folded_multiply(self.state ^ self.keys[0], self.keys[2])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ServiceKey;
    use crate::model::keys_differing_in_one_field;
    use std::collections::HashSet;

    fn hash(k: &ServiceKey) -> u64 {
        KeyHashing::default().hash_one(k)
    }

    /// Keys that differ in one field each hash differently, and equal keys
    /// equally.
    #[test]
    fn keys_that_differ_in_one_field_hash_differently() {
        let keys = keys_differing_in_one_field();
        for (i, a) in keys.iter().enumerate() {
            let same = *a;
            assert_eq!(hash(a), hash(&same));
            for b in &keys[i + 1..] {
                assert_ne!(hash(a), hash(b), "{a} and {b}");
            }
        }
    }

    /// A table's keys as agents make them (consecutive addresses, a few
    /// ports) spread over the bits a hash table uses: the low bits pick the
    /// bucket, the top seven tag it. 65,536 keys into 4,096 buckets: the
    /// fullest holds less than three times the mean of 16 (a random
    /// function does that but once in millions of runs), and each tag value
    /// is used within five standard deviations of the mean.
    #[test]
    fn consecutive_keys_spread_over_buckets_and_tags() {
        let mut buckets = vec![0u32; 4096];
        let mut tags = [0u32; 128];
        let mut seen = HashSet::new();
        for i in 0u32..16_384 {
            for port in [80, 443, 8080, 53] {
                let ip = std::net::Ipv4Addr::from(0x0a60_0000 + i);
                let key = ServiceKey::tcp(std::net::SocketAddr::new(ip.into(), port));
                let h = hash(&key);
                assert!(seen.insert(h), "{key}: a full 64-bit collision");
                buckets[(h & 4095) as usize] += 1;
                tags[(h >> 57) as usize] += 1;
            }
        }
        let fullest = *buckets.iter().max().unwrap();
        assert!(fullest < 48, "fullest bucket {fullest}");
        let (least, most) = (tags.iter().min().unwrap(), tags.iter().max().unwrap());
        // 512 per tag on average.
        assert!(*least > 400 && *most < 640, "tags {least}..{most}");
    }
}
