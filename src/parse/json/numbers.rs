//! JSON number tokens to JavaScript's doubles, correctly rounded, with a
//! fast path for the plain integers most timestamps are.

use super::*;

/// The value of eight ASCII digits packed little-endian in a word (the first
/// digit in the lowest byte), or `None` if any byte is not a digit. SWAR, as
/// simdjson parses them: three multiplies instead of eight dependent steps.
#[inline]
pub(super) fn eight_digits(word: u64) -> Option<u64> {
    if non_digit_mask(word) != 0 {
        return None;
    }
    let v = ((word & 0x0F0F_0F0F_0F0F_0F0F).wrapping_mul(2561)) >> 8;
    let v = ((v & 0x00FF_00FF_00FF_00FF).wrapping_mul(6_553_601)) >> 16;
    Some(((v & 0x0000_FFFF_0000_FFFF).wrapping_mul(42_949_672_960_001)) >> 32)
}

/// Parses the raw text of a valid JSON number as JavaScript does: the
/// nearest double, `±Infinity` on overflow, `-0` kept.
pub fn number_value(raw: &[u8]) -> f64 {
    number_and_form(raw).0
}

/// [`number_value`], and whether JavaScript's `String(value)` is `raw`
/// itself: true for an integer of at most 15 digits other than `-0` (exact
/// in a double, and printed in full), false for anything else (some of
/// which may print the same; false only means "format the value").
#[inline]
pub fn number_and_form(raw: &[u8]) -> (f64, bool) {
    match plain_integer(raw) {
        Some(v) => v,
        None => number_text(raw),
    }
}

/// [`number_and_form`]'s fast path: a plain integer of at most 15 digits,
/// exact in a double. `None` for anything else.
#[inline(always)]
fn plain_integer(raw: &[u8]) -> Option<(f64, bool)> {
    let (neg, digits) = match raw.first() {
        Some(b'-') => (true, &raw[1..]),
        _ => (false, raw),
    };
    // Each byte is read once (checked and added in the same step): a mapped
    // log can change under the replay, and a second read must not be able to
    // disagree with the check.
    let v = match digits.len() {
        // A millisecond timestamp has 13 digits: two overlapping words, the
        // first 8 bytes and the last 8, converted side by side. The first
        // word gives only the digits before the last word's, moved to its
        // top and led by `'0'`s; its other bytes are shifted out unused.
        8..=15 => {
            let first = u64::from_le_bytes(*digits.first_chunk::<8>()?);
            let last = u64::from_le_bytes(*digits.last_chunk::<8>()?);
            let lead = (digits.len() - 8) as u32;
            // `first << (8 * (8 - lead))`, which is 0 for `lead == 0`
            // (a shift by 64 is not allowed, so it is done in two steps).
            let moved = (first << 1) << (63 - 8 * lead);
            let zeros = u64::from_le_bytes(*b"00000000") >> (8 * lead);
            eight_digits(moved | zeros)? * 100_000_000 + eight_digits(last)?
        }
        1..=7 => {
            let mut v = 0u64;
            for &d in digits {
                let x = d.wrapping_sub(b'0');
                if x > 9 {
                    return None;
                }
                v = v * 10 + x as u64;
            }
            v
        }
        _ => return None,
    };
    // At most 15 digits: below 2^53, so exact, and signed conversion is one
    // instruction.
    let x = v as i64 as f64;
    Some(if neg { (-x, v != 0) } else { (x, true) })
}

/// [`number_and_form`] for anything but a plain integer of at most 15
/// digits: the text is parsed, and never copied as written.
#[cold]
#[inline(never)]
fn number_text(raw: &[u8]) -> (f64, bool) {
    // The grammar's number text is a subset of what Rust's correctly
    // rounded parser accepts.
    let x = std::str::from_utf8(raw)
        .ok()
        .and_then(|t| t.parse::<f64>().ok())
        .unwrap_or(f64::NAN);
    (x, false)
}
