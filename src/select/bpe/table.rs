//! The layout of a vocabulary's compiled tables: written by `build.rs` from
//! tiktoken-rs's vocabularies, read in place by [`super::Vocabulary`], so
//! nothing is parsed, decoded or hashed when a process starts counting.
//!
//! Three little-endian byte arrays per vocabulary:
//! - `tokens`: every ordinary token's bytes, concatenated in rank order;
//! - `offsets`: `u32` × (n + 1): rank r is `tokens[offsets[r]..offsets[r + 1]]`;
//! - `slots`: `u32` × a power of two ≥ 2n (at most half full), an
//!   open-addressing hash table with linear probing: 0 is empty, r + 1 is
//!   rank r, at the slot its bytes' [`hash`] points to or the next free one.
//!
//! `build.rs` includes this file with `#[path]`: it uses nothing from the
//! crate, and both sides hash with the same function whatever the target.

/// The hash of a token's bytes: xxh3, the same on every platform, so tables
/// built on the host are read correctly on any target.
pub fn hash(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// Slots for `tokens` tokens: at most half of them used, so a miss (most
/// lookups while merging) ends after a probe or two.
pub fn slot_count(tokens: usize) -> usize {
    (tokens * 2).next_power_of_two()
}

/// The first slot to probe for `hash` in a table of `slots` slots.
pub fn home(hash: u64, slots: usize) -> usize {
    (hash as usize) & (slots - 1)
}

/// The hash table of `tokens` (in rank order), as its `u32` slots.
#[allow(dead_code)] // Only build.rs writes tables.
pub fn build_slots(tokens: &[&[u8]]) -> Vec<u32> {
    let n = slot_count(tokens.len());
    let mut slots = vec![0u32; n];
    for (rank, bytes) in tokens.iter().enumerate() {
        let mut i = home(hash(bytes), n);
        while slots[i] != 0 {
            let other = tokens[slots[i] as usize - 1];
            assert_ne!(other, *bytes, "rank {rank} repeats a token");
            i = (i + 1) & (n - 1);
        }
        slots[i] = u32::try_from(rank + 1).expect("fewer than 2^32 tokens");
    }
    slots
}
