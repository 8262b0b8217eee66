//! The lexical half of the JavaScript-exact record: strings copied as
//! `JSON.stringify` writes them (invalid UTF-8 replaced as Node decodes it,
//! lone surrogates escaped), whitespace as `JSON.parse` and
//! `String.prototype.trim` see it, and array-index keys.

use std::ops::Range;

use super::{JsError, Member, err};
use crate::parse::json::JsonErrorKind;
use crate::simd;

/// A member's key as written, without its quotes.
#[inline]
pub(super) fn name<'a>(text: &'a [u8], m: &Member) -> &'a [u8] {
    &text[m.key_start + 1..m.key_end - 1]
}

/// The array index a key (as written, without quotes) stands for: the
/// canonical decimal form of an integer from 0 to 2^32 − 2. JavaScript lists
/// such keys first, in ascending order.
pub fn array_index(key: &[u8]) -> Option<u32> {
    if key.is_empty() || key.len() > 10 || (key[0] == b'0' && key.len() > 1) {
        return None;
    }
    let mut v = 0u64;
    for &d in key {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (d - b'0') as u64;
    }
    (v <= 4_294_967_294).then_some(v as u32)
}

#[inline]
pub(super) fn skip_ws(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && matches!(s[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// Parses the string at `s[i] == '"'` and writes it as `JSON.stringify`
/// writes its value; returns the index after the closing quote.
pub(super) fn string(s: &[u8], i: usize, out: &mut Vec<u8>) -> Result<usize, JsError> {
    out.push(b'"');
    let mut j = i + 1;
    // A high surrogate escape waiting to see whether a low one follows.
    let mut high: Option<u16> = None;
    loop {
        let k = stop(s, j);
        match s.get(k) {
            None => return Err(err(JsonErrorKind::UnexpectedEnd, s.len())),
            Some(0x00..=0x1F) => {
                return Err(err(JsonErrorKind::ControlCharacterInString, k));
            }
            Some(_) => {}
        }
        if k > j {
            if let Some(h) = high.take() {
                push_u_escape(out, h);
            }
            push_lossy(out, &s[j..k]);
        }
        j = k;
        if s[j] == b'"' {
            if let Some(h) = high.take() {
                push_u_escape(out, h);
            }
            out.push(b'"');
            return Ok(j + 1);
        }
        let Some(&e) = s.get(j + 1) else {
            return Err(err(JsonErrorKind::UnexpectedEnd, s.len()));
        };
        if e == b'u' {
            let u = hex4(s, j)?;
            j += 6;
            if let Some(h) = high.take() {
                if (0xDC00..=0xDFFF).contains(&u) {
                    let c = 0x10000 + (((h as u32) - 0xD800) << 10) + (u as u32 - 0xDC00);
                    push_char(out, c);
                    continue;
                }
                push_u_escape(out, h);
            }
            if (0xD800..=0xDBFF).contains(&u) {
                high = Some(u);
            } else {
                push_unit(out, u);
            }
            continue;
        }
        if let Some(h) = high.take() {
            push_u_escape(out, h);
        }
        let short: &[u8] = match e {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'/' => b"/",
            b'b' => b"\\b",
            b'f' => b"\\f",
            b'n' => b"\\n",
            b'r' => b"\\r",
            b't' => b"\\t",
            _ => return Err(err(JsonErrorKind::InvalidEscape, j)),
        };
        out.extend_from_slice(short);
        j += 2;
    }
}

/// The index of the first `"`, `\` or control character in `s` from `j`,
/// or `s.len()`: a block at a time while a whole block is left.
#[inline]
fn stop(s: &[u8], mut j: usize) -> usize {
    while let Some(block) = s.get(j..j + simd::BLOCK) {
        let m = simd::stop_mask(block.try_into().expect("a whole block"));
        if m != 0 {
            return j + m.trailing_zeros() as usize;
        }
        j += simd::BLOCK;
    }
    while j < s.len() && !matches!(s[j], b'"' | b'\\' | 0x00..=0x1F) {
        j += 1;
    }
    j
}

/// The code unit of the `\uXXXX` escape at `s[j] == '\\'`.
fn hex4(s: &[u8], j: usize) -> Result<u16, JsError> {
    let mut u = 0u16;
    for d in 0..4 {
        let Some(&h) = s.get(j + 2 + d) else {
            return Err(err(JsonErrorKind::UnexpectedEnd, s.len()));
        };
        let v = match h {
            b'0'..=b'9' => h - b'0',
            b'a'..=b'f' => h - b'a' + 10,
            b'A'..=b'F' => h - b'A' + 10,
            _ => return Err(err(JsonErrorKind::InvalidEscape, j)),
        };
        u = (u << 4) | v as u16;
    }
    Ok(u)
}

/// Writes raw string content (no quotes, backslashes or control characters)
/// with each maximal ill-formed UTF-8 subsequence replaced by U+FFFD.
#[inline]
fn push_lossy(out: &mut Vec<u8>, run: &[u8]) {
    if run.is_ascii() || simdutf8::basic::from_utf8(run).is_ok() {
        out.extend_from_slice(run);
        return;
    }
    for chunk in run.utf8_chunks() {
        out.extend_from_slice(chunk.valid().as_bytes());
        if !chunk.invalid().is_empty() {
            out.extend_from_slice("\u{FFFD}".as_bytes());
        }
    }
}

/// Writes one code unit from a `\u` escape (not a high surrogate awaiting
/// its pair) as `JSON.stringify` writes it.
fn push_unit(out: &mut Vec<u8>, u: u16) {
    let short: &[u8] = match u {
        0x22 => b"\\\"",
        0x5C => b"\\\\",
        0x08 => b"\\b",
        0x0C => b"\\f",
        0x0A => b"\\n",
        0x0D => b"\\r",
        0x09 => b"\\t",
        0x00..=0x1F | 0xD800..=0xDFFF => return push_u_escape(out, u),
        _ => return push_char(out, u as u32),
    };
    out.extend_from_slice(short);
}

/// Writes a Unicode scalar value as UTF-8.
fn push_char(out: &mut Vec<u8>, c: u32) {
    let c = char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER);
    out.extend_from_slice(c.encode_utf8(&mut [0u8; 4]).as_bytes());
}

/// Writes `\u` and four lowercase hex digits.
fn push_u_escape(out: &mut Vec<u8>, u: u16) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.extend_from_slice(&[
        b'\\',
        b'u',
        HEX[(u >> 12) as usize],
        HEX[((u >> 8) & 0xF) as usize],
        HEX[((u >> 4) & 0xF) as usize],
        HEX[(u & 0xF) as usize],
    ]);
}

/// Length of the `String.prototype.trim` whitespace character that starts at
/// `s[i]`, or 0. `i` must be where a character starts (it is, for every
/// position the trim reaches: a byte that is not a UTF-8 continuation byte
/// always starts a character, or a replaced sequence, in Node's decoding).
#[inline]
fn ws_at(s: &[u8], i: usize) -> usize {
    match s[i] {
        b'\t' | b'\n' | 0x0B | 0x0C | b'\r' | b' ' => 1,
        0xC2 if s.get(i + 1) == Some(&0xA0) => 2,
        0xE1 if s.get(i + 1..i + 3) == Some(&[0x9A, 0x80]) => 3,
        0xE2 => match s.get(i + 1..i + 3) {
            Some([0x80, 0x80..=0x8A | 0xA8 | 0xA9 | 0xAF] | [0x81, 0x9F]) => 3,
            _ => 0,
        },
        0xE3 if s.get(i + 1..i + 3) == Some(&[0x80, 0x80]) => 3,
        0xEF if s.get(i + 1..i + 3) == Some(&[0xBB, 0xBF]) => 3,
        _ => 0,
    }
}

/// Length of the whitespace character that ends `s`, or 0.
#[inline]
fn ws_before(s: &[u8]) -> usize {
    let n = s.len();
    match s[n - 1] {
        b'\t' | b'\n' | 0x0B | 0x0C | b'\r' | b' ' => 1,
        0x00..=0x7F => 0,
        _ if n >= 2 && s[n - 2] == 0xC2 && s[n - 1] == 0xA0 => 2,
        _ if n >= 3 && ws_at(s, n - 3) == 3 => 3,
        _ => 0,
    }
}

/// The range of `line` left by JavaScript's `String.prototype.trim` on the
/// line as Node decodes it (UTF-8, invalid sequences replaced): leading and
/// trailing ASCII whitespace, U+00A0, U+1680, U+2000–U+200A, U+2028, U+2029,
/// U+202F, U+205F, U+3000 and U+FEFF removed. Empty when the line is blank.
pub fn js_trim(line: &[u8]) -> Range<usize> {
    let mut start = 0;
    let mut end = line.len();
    while start < end {
        match ws_at(line, start) {
            0 => break,
            w => start += w,
        }
    }
    while end > start {
        match ws_before(&line[start..end]) {
            0 => break,
            w => end -= w,
        }
    }
    start..end
}
