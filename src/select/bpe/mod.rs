//! Counting tokens with tiktoken's byte-pair encodings, from tables compiled
//! into the binary.
//!
//! `build.rs` writes each vocabulary's ranks as a ready hash table
//! ([`table`]'s layout), taken from tiktoken-rs; [`Vocabulary::count`] splits
//! text with tiktoken's pre-tokenizer pattern ([`split`]: the `regex`
//! crate's automata, the pattern's one look-ahead done by hand) and merges
//! each piece that is not a token ([`merge`]).
//! The first count in a process builds only that regex (a few milliseconds);
//! tiktoken-rs's `CoreBPE` also parsed and hashed the vocabulary, built its
//! decoder and sorted token list, which took 0.1–0.8 s.
//!
//! It counts; it does not encode or decode. The counts are tiktoken-rs's
//! `count_ordinary`, held to it by `tests/tokens_oracle.rs`.

mod merge;
mod split;
mod table;

use std::sync::OnceLock;

/// One of tiktoken's vocabularies, compiled in.
pub(crate) struct Vocabulary {
    /// Ordinary tokens' bytes, concatenated in rank order.
    tokens: &'static [u8],
    /// `u32` LE × (n + 1): where each rank's bytes start in `tokens`.
    offsets: &'static [u8],
    /// `u32` LE hash slots: 0 empty, else rank + 1.
    slots: &'static [u8],
    /// tiktoken's pre-tokenizer pattern for this vocabulary.
    pattern: &'static str,
    splitter: OnceLock<split::Splitter>,
    longest: OnceLock<u64>,
}

macro_rules! compiled {
    ($name:literal) => {
        (
            include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".tokens")),
            include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".offsets")),
            include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".slots")),
        )
    };
}

/// `o200k_base`'s pattern, as tiktoken-rs writes it (`O200K_BASE_PAT_STR`).
pub(crate) const O200K_PATTERN: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    "|",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    "|",
    r"\p{N}{1,3}",
    "|",
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    "|",
    r"\s*[\r\n]+",
    "|",
    r"\s+(?!\S)",
    "|",
    r"\s+"
);

/// `cl100k_base`'s pattern, as tiktoken-rs's `cl100k_base()` writes it.
pub(crate) const CL100K_PATTERN: &str = r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s";

pub(crate) static O200K: Vocabulary = Vocabulary::new(compiled!("o200k_base"), O200K_PATTERN);
pub(crate) static CL100K: Vocabulary = Vocabulary::new(compiled!("cl100k_base"), CL100K_PATTERN);

/// The `i`th little-endian `u32` of `bytes`.
fn u32_at(bytes: &[u8], i: usize) -> u32 {
    let at = i * 4;
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

impl Vocabulary {
    const fn new(
        (tokens, offsets, slots): (&'static [u8], &'static [u8], &'static [u8]),
        pattern: &'static str,
    ) -> Self {
        Vocabulary {
            tokens,
            offsets,
            slots,
            pattern,
            splitter: OnceLock::new(),
            longest: OnceLock::new(),
        }
    }

    /// Ordinary tokens (ranks 0 to n − 1).
    pub(crate) fn len(&self) -> usize {
        self.offsets.len() / 4 - 1
    }

    /// The bytes of rank `rank`.
    pub(crate) fn token(&self, rank: u32) -> &'static [u8] {
        let r = rank as usize;
        &self.tokens[u32_at(self.offsets, r) as usize..u32_at(self.offsets, r + 1) as usize]
    }

    /// The rank of `bytes`, if they are a token.
    pub(crate) fn rank(&self, bytes: &[u8]) -> Option<u32> {
        let slots = self.slots.len() / 4;
        let mut i = table::home(table::hash(bytes), slots);
        loop {
            match u32_at(self.slots, i) {
                0 => return None,
                s if self.token(s - 1) == bytes => return Some(s - 1),
                _ => i = (i + 1) & (slots - 1),
            }
        }
    }

    /// Bytes of the longest token (at least 1).
    pub(crate) fn longest(&self) -> u64 {
        *self.longest.get_or_init(|| {
            (0..self.len() as u32)
                .map(|r| self.token(r).len() as u64)
                .max()
                .unwrap_or(1)
                .max(1)
        })
    }

    /// Tokens in `text`: what tiktoken-rs's `count_ordinary` returns.
    pub(crate) fn count(&self, text: &str) -> usize {
        let splitter = self
            .splitter
            .get_or_init(|| split::Splitter::new(self.pattern));
        let mut n = 0;
        splitter.split(text, |piece| {
            let piece = piece.as_bytes();
            n += if piece.len() == 1 || self.rank(piece).is_some() {
                1
            } else {
                merge::count(piece, |b| self.rank(b))
            };
        });
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The compiled tables hold exactly tiktoken-rs's ordinary tokens.
    fn assert_tables_match(v: &Vocabulary, oracle: &tiktoken_rs::CoreBPE, n: usize) {
        assert_eq!(v.len(), n);
        let mut longest = 0;
        for r in 0..n as u32 {
            let bytes = oracle.decode_bytes(&[r]).expect("an ordinary rank");
            assert_eq!(v.token(r), bytes.as_slice(), "rank {r}");
            assert_eq!(v.rank(&bytes), Some(r), "rank {r}");
            longest = longest.max(bytes.len() as u64);
        }
        assert_eq!(v.longest(), longest);
        // Every byte is a token (so a one-byte piece counts 1 without a
        // lookup), and what is not a token is not found.
        for b in 0..=255u8 {
            assert!(v.rank(&[b]).is_some(), "byte {b}");
        }
        for missing in [
            &b"<|endoftext|>"[..],
            b"\xff\xfe\xfd\xfc",
            b"zzzzzzzzzzzzzzzzzzzzzzzzzzzz",
        ] {
            assert_eq!(v.rank(missing), None);
        }
    }

    #[test]
    fn the_compiled_tables_are_tiktoken_rs_vocabularies() {
        // Ordinary ranks end where the special tokens begin.
        assert_tables_match(&O200K, tiktoken_rs::o200k_base_singleton(), 199_998);
        assert_tables_match(&CL100K, tiktoken_rs::cl100k_base_singleton(), 100_256);
    }

    #[test]
    fn the_patterns_are_tiktoken_rs_patterns() {
        assert_eq!(O200K_PATTERN, tiktoken_rs::O200K_BASE_PAT_STR);
        // cl100k's is not exported: `tests/tokens.rs` holds it to
        // tiktoken-rs by the counts.
    }
}
