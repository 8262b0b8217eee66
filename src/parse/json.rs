//! Exact JSON on raw bytes: an RFC 8259 validator, a scanner that finds the
//! top-level `type` and `ts_ms` members of a line known to be valid, and the
//! decoding of number and string tokens with JavaScript's semantics.
//!
//! This is the engine's slow, exact path. The fast path (simd-json, in
//! [`crate::parse`]) decides most lines; whatever it rejects is decided here,
//! so numbers of any size, unpaired surrogate escapes and deep nesting are
//! accepted exactly as the grammar (and `JSON.parse`) accepts them. Nothing
//! here allocates except the validator's depth stack, which is a bit per level
//! and reused by the caller.

use std::fmt;

/// Why a line is not one valid JSON value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonErrorKind {
    /// The bytes are not UTF-8.
    InvalidUtf8,
    /// The line ended inside a value.
    UnexpectedEnd,
    /// A byte that cannot start or continue a value here.
    UnexpectedByte,
    /// A control character (below U+0020) inside a string.
    ControlCharacterInString,
    /// A backslash escape that JSON does not define.
    InvalidEscape,
    /// A malformed number (leading zero, missing digits, ...).
    InvalidNumber,
    /// Bytes after the end of the first value.
    TrailingCharacters,
    /// Nesting deeper than the configured limit.
    TooDeep,
    /// A line of 4 GiB or more (member positions are 32-bit).
    TooLong,
}

impl JsonErrorKind {
    /// A short, stable description used in skip reports.
    pub fn as_str(self) -> &'static str {
        match self {
            JsonErrorKind::InvalidUtf8 => "invalid UTF-8",
            JsonErrorKind::UnexpectedEnd => "unexpected end of line",
            JsonErrorKind::UnexpectedByte => "unexpected character",
            JsonErrorKind::ControlCharacterInString => "control character in string",
            JsonErrorKind::InvalidEscape => "invalid escape",
            JsonErrorKind::InvalidNumber => "invalid number",
            JsonErrorKind::TrailingCharacters => "trailing characters after the value",
            JsonErrorKind::TooDeep => "nesting deeper than the limit",
            JsonErrorKind::TooLong => "line of 4 GiB or more",
        }
    }
}

impl fmt::Display for JsonErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A validation failure: what and where (byte column within the line, 0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonError {
    /// What is wrong.
    pub kind: JsonErrorKind,
    /// Byte offset within the line where it was detected.
    pub column: usize,
}

#[cold]
fn err(kind: JsonErrorKind, column: usize) -> JsonError {
    JsonError { kind, column }
}

#[inline]
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

#[inline]
fn skip_ws(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && is_ws(s[i]) {
        i += 1;
    }
    i
}

/// Validates that `s` is exactly one JSON value (RFC 8259), with optional
/// surrounding JSON whitespace, nested at most `max_depth` levels.
///
/// `stack` is scratch space for the container stack (one entry per level); it
/// is cleared and reused, so a caller validating many lines allocates once.
pub fn validate(s: &[u8], max_depth: usize, stack: &mut Vec<bool>) -> Result<(), JsonError> {
    if let Err(e) = std::str::from_utf8(s) {
        return Err(err(JsonErrorKind::InvalidUtf8, e.valid_up_to()));
    }
    stack.clear();
    let n = s.len();
    let mut i = skip_ws(s, 0);
    // `true` on the stack = inside an object, `false` = inside an array.
    'value: loop {
        // Parse one value starting at i (after whitespace).
        if i >= n {
            return Err(err(JsonErrorKind::UnexpectedEnd, i));
        }
        match s[i] {
            b'{' => {
                if stack.len() >= max_depth {
                    return Err(err(JsonErrorKind::TooDeep, i));
                }
                i = skip_ws(s, i + 1);
                if i < n && s[i] == b'}' {
                    i += 1;
                } else {
                    stack.push(true);
                    i = object_key(s, i)?;
                    continue 'value;
                }
            }
            b'[' => {
                if stack.len() >= max_depth {
                    return Err(err(JsonErrorKind::TooDeep, i));
                }
                i = skip_ws(s, i + 1);
                if i < n && s[i] == b']' {
                    i += 1;
                } else {
                    stack.push(false);
                    continue 'value;
                }
            }
            b'"' => i = string_end(s, i)?,
            b'-' | b'0'..=b'9' => i = number_end(s, i)?,
            b't' => i = literal(s, i, b"true")?,
            b'f' => i = literal(s, i, b"false")?,
            b'n' => i = literal(s, i, b"null")?,
            _ => return Err(err(JsonErrorKind::UnexpectedByte, i)),
        }
        // After a value: close containers or move to the next element.
        loop {
            i = skip_ws(s, i);
            let Some(&in_object) = stack.last() else {
                return if i == n {
                    Ok(())
                } else {
                    Err(err(JsonErrorKind::TrailingCharacters, i))
                };
            };
            if i >= n {
                return Err(err(JsonErrorKind::UnexpectedEnd, i));
            }
            match (s[i], in_object) {
                (b',', true) => {
                    i = object_key(s, skip_ws(s, i + 1))?;
                    continue 'value;
                }
                (b',', false) => {
                    i = skip_ws(s, i + 1);
                    continue 'value;
                }
                (b'}', true) | (b']', false) => {
                    stack.pop();
                    i += 1;
                }
                _ => return Err(err(JsonErrorKind::UnexpectedByte, i)),
            }
        }
    }
}

/// Parses `"key" :` at `i` and returns the index after the colon and whitespace.
fn object_key(s: &[u8], i: usize) -> Result<usize, JsonError> {
    if i >= s.len() {
        return Err(err(JsonErrorKind::UnexpectedEnd, i));
    }
    if s[i] != b'"' {
        return Err(err(JsonErrorKind::UnexpectedByte, i));
    }
    let i = skip_ws(s, string_end(s, i)?);
    if i >= s.len() {
        return Err(err(JsonErrorKind::UnexpectedEnd, i));
    }
    if s[i] != b':' {
        return Err(err(JsonErrorKind::UnexpectedByte, i));
    }
    Ok(skip_ws(s, i + 1))
}

#[inline(always)]
pub(crate) fn literal(s: &[u8], i: usize, word: &[u8]) -> Result<usize, JsonError> {
    if s.get(i..i + word.len()) == Some(word) {
        Ok(i + word.len())
    } else {
        let matched = s[i..].iter().zip(word).take_while(|(a, b)| a == b).count();
        if i + matched == s.len() {
            Err(err(JsonErrorKind::UnexpectedEnd, s.len()))
        } else {
            Err(err(JsonErrorKind::UnexpectedByte, i + matched))
        }
    }
}

/// Given `s[i] == '"'`, returns the index just past the closing quote.
/// Validates escapes and rejects raw control characters. UTF-8 validity is
/// checked by the caller for the whole line.
pub(crate) fn string_end(s: &[u8], i: usize) -> Result<usize, JsonError> {
    let mut j = i + 1;
    loop {
        // Jump to the next quote or backslash; check the skipped bytes for
        // control characters.
        let Some(k) = memchr::memchr2(b'"', b'\\', &s[j..]) else {
            if let Some(c) = s[j..].iter().position(|&b| b < 0x20) {
                return Err(err(JsonErrorKind::ControlCharacterInString, j + c));
            }
            return Err(err(JsonErrorKind::UnexpectedEnd, s.len()));
        };
        if let Some(c) = s[j..j + k].iter().position(|&b| b < 0x20) {
            return Err(err(JsonErrorKind::ControlCharacterInString, j + c));
        }
        j += k;
        if s[j] == b'"' {
            return Ok(j + 1);
        }
        // Backslash escape.
        let Some(&e) = s.get(j + 1) else {
            return Err(err(JsonErrorKind::UnexpectedEnd, s.len()));
        };
        match e {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => j += 2,
            b'u' => {
                for d in 0..4 {
                    match s.get(j + 2 + d) {
                        Some(h) if h.is_ascii_hexdigit() => {}
                        Some(_) => return Err(err(JsonErrorKind::InvalidEscape, j)),
                        None => return Err(err(JsonErrorKind::UnexpectedEnd, s.len())),
                    }
                }
                j += 6;
            }
            _ => return Err(err(JsonErrorKind::InvalidEscape, j)),
        }
    }
}

/// Given a number starting at `i`, returns the index just past it.
#[inline(always)]
pub(crate) fn number_end(s: &[u8], mut i: usize) -> Result<usize, JsonError> {
    let start = i;
    let digits = |s: &[u8], mut i: usize| {
        let from = i;
        // Eight bytes at a time while they can be read (a timestamp has
        // 13 digits), then one at a time.
        while let Some(word) = s.get(i..).and_then(<[u8]>::first_chunk::<8>) {
            let m = non_digit_mask(u64::from_le_bytes(*word));
            if m != 0 {
                i += (m.trailing_zeros() / 8) as usize;
                return (i, i - from);
            }
            i += 8;
        }
        while matches!(s.get(i), Some(b'0'..=b'9')) {
            i += 1;
        }
        (i, i - from)
    };
    if s[i] == b'-' {
        i += 1;
    }
    match s.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => i = digits(s, i + 1).0,
        _ => return Err(err(JsonErrorKind::InvalidNumber, start)),
    }
    if s.get(i) == Some(&b'.') {
        let (j, n) = digits(s, i + 1);
        if n == 0 {
            return Err(err(JsonErrorKind::InvalidNumber, start));
        }
        i = j;
    }
    if matches!(s.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(s.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let (j, n) = digits(s, i);
        if n == 0 {
            return Err(err(JsonErrorKind::InvalidNumber, start));
        }
        i = j;
    }
    Ok(i)
}

/// High bit set in the bytes of `v` (little-endian) that are not ASCII
/// digits. Only the lowest set bit is exact: carries and borrows run
/// upwards, and a digit produces neither (`d + 0x46 <= 0x7F`,
/// `d - 0x30 >= 0`), so the first non-digit byte sees none. That byte has
/// its high bit set in `b + 0x46` when it is 0x3A..=0xB9 and in `b - 0x30`
/// when it is below 0x30 or 0xB0 and above.
#[inline(always)]
fn non_digit_mask(v: u64) -> u64 {
    const LO: u64 = 0x0101_0101_0101_0101;
    (v.wrapping_add(LO * 0x46) | v.wrapping_sub(LO * 0x30)) & (LO * 0x80)
}

/// What a top-level member's value was, for the two members the contract reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Member {
    /// Not present.
    Absent,
    /// A string; the span is the raw content between the quotes (escapes kept).
    String {
        /// Offset of the content in the line.
        start: u32,
        /// Length of the content.
        len: u32,
    },
    /// A number; the span is its raw text.
    Number {
        /// Offset of the number in the line.
        start: u32,
        /// Length of the number's text.
        len: u32,
    },
    /// Present with another JSON type.
    Other,
}

/// The `type` and `ts_ms` members of a top-level object (last duplicate wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fields {
    /// Whether the value is an object at all.
    pub is_object: bool,
    /// The last `type` member.
    pub kind: Member,
    /// The last `ts_ms` member.
    pub ts_ms: Member,
}

/// Finds the top-level `type` and `ts_ms` members of `s`, which must already be
/// known to be exactly one valid JSON value (on other input the answer is
/// meaningless, but it never panics). Keys are compared after unescaping, so
/// `"t\u0079pe"` is `type`, as in `JSON.parse`.
pub fn scan_fields(s: &[u8]) -> Fields {
    let mut fields = Fields {
        is_object: false,
        kind: Member::Absent,
        ts_ms: Member::Absent,
    };
    fields.is_object = for_each_member(s, |key, value| {
        if key_is(key, b"type") {
            fields.kind = member(s, value);
        } else if key_is(key, b"ts_ms") {
            fields.ts_ms = member(s, value);
        }
    });
    fields
}

/// The last top-level member of `s` named `name` (ASCII, compared after
/// unescaping the key), under the same terms as [`scan_fields`]; `Absent`
/// when `s` is not an object or has no such member.
pub fn top_level_member(s: &[u8], name: &[u8]) -> Member {
    let mut found = Member::Absent;
    for_each_member(s, |key, value| {
        if key_is(key, name) {
            found = member(s, value);
        }
    });
    found
}

/// The raw text of the last top-level member of `s` named `name`, under the
/// same terms as [`scan_fields`].
pub fn top_level_value<'a>(s: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let mut found = None;
    for_each_member(s, |key, value| {
        if key_is(key, name) {
            found = Some(value);
        }
    });
    found.map(|v| &s[v])
}

fn member(s: &[u8], value: std::ops::Range<usize>) -> Member {
    match s[value.start] {
        b'"' => Member::String {
            start: (value.start + 1) as u32,
            len: value.end.saturating_sub(value.start + 2) as u32,
        },
        b'-' | b'0'..=b'9' => Member::Number {
            start: value.start as u32,
            len: value.len() as u32,
        },
        _ => Member::Other,
    }
}

/// Calls `f(raw key, value range)` for each top-level member of `s` (a valid
/// JSON value), in order; returns whether `s` is an object.
fn for_each_member(s: &[u8], mut f: impl FnMut(&[u8], std::ops::Range<usize>)) -> bool {
    let mut i = skip_ws(s, 0);
    if s.get(i) != Some(&b'{') {
        return false;
    }
    i = skip_ws(s, i + 1);
    while i < s.len() && s[i] == b'"' {
        let key_end = skip_string(s, i);
        let key = s.get(i + 1..key_end.saturating_sub(1)).unwrap_or(&[]);
        i = skip_ws(s, key_end);
        i = skip_ws(s, i + 1); // the colon
        let value_start = i;
        if value_start >= s.len() {
            break;
        }
        let value_end = skip_value(s, i);
        f(key, value_start..value_end);
        i = skip_ws(s, value_end);
        if i < s.len() && s[i] == b',' {
            i = skip_ws(s, i + 1);
        } else {
            break;
        }
    }
    true
}

/// Skips a valid string starting at the quote; returns the index past it.
#[inline]
fn skip_string(s: &[u8], i: usize) -> usize {
    let mut j = i + 1;
    loop {
        match memchr::memchr2(b'"', b'\\', &s[j..]) {
            Some(k) if s[j + k] == b'"' => return j + k + 1,
            Some(k) => j = (j + k + 2).min(s.len()),
            None => return s.len(),
        }
    }
}

/// Skips a valid value starting at `i`; returns the index past it.
fn skip_value(s: &[u8], i: usize) -> usize {
    match s[i] {
        b'"' => skip_string(s, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                // The next opener or string; closers in the gap before it
                // are counted first.
                let next = memchr::memchr3(b'"', b'{', b'[', &s[j..]).map(|k| j + k);
                let gap_end = next.unwrap_or(s.len());
                for (k, &b) in s[j..gap_end].iter().enumerate() {
                    if b == b'}' || b == b']' {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            return j + k + 1;
                        }
                    }
                }
                let Some(p) = next else { return s.len() };
                if s[p] == b'"' {
                    j = skip_string(s, p);
                } else {
                    depth += 1;
                    j = p + 1;
                }
            }
        }
        _ => {
            let mut j = i;
            while j < s.len() && !matches!(s[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            {
                j += 1;
            }
            j
        }
    }
}

/// Whether the raw content of a valid JSON string (escapes kept) decodes to
/// `target`, compared as `JSON.parse`'s strings are: by UTF-16 code units.
pub fn string_equals(raw: &[u8], target: &str) -> bool {
    if memchr::memchr(b'\\', raw).is_none() {
        return raw == target.as_bytes();
    }
    StringUnits::new(raw).eq(target.encode_utf16())
}

/// The decoded value of the raw content of a valid JSON string, with
/// unpaired surrogates replaced by U+FFFD.
pub fn decode_string(raw: &[u8], out: &mut String) {
    if memchr::memchr(b'\\', raw).is_none() {
        out.push_str(&String::from_utf8_lossy(raw));
        return;
    }
    out.extend(char::decode_utf16(StringUnits::new(raw)).map(|c| c.unwrap_or('\u{FFFD}')));
}

/// Compares a raw (possibly escaped) key with an ASCII target.
pub(crate) fn key_is(raw: &[u8], target: &[u8]) -> bool {
    if memchr::memchr(b'\\', raw).is_none() {
        return raw == target;
    }
    let mut units = StringUnits::new(raw);
    for &t in target {
        if units.next() != Some(t as u16) {
            return false;
        }
    }
    units.next().is_none()
}

/// The UTF-16 code units of the raw content of a valid JSON string, decoded
/// as `JSON.parse` decodes them (unpaired surrogate escapes kept as is).
pub struct StringUnits<'a> {
    raw: &'a [u8],
    pos: usize,
    pending_low: Option<u16>,
}

impl<'a> StringUnits<'a> {
    /// Decodes `raw`, the bytes between the quotes of a valid JSON string.
    pub fn new(raw: &'a [u8]) -> Self {
        StringUnits {
            raw,
            pos: 0,
            pending_low: None,
        }
    }
}

impl Iterator for StringUnits<'_> {
    type Item = u16;

    fn next(&mut self) -> Option<u16> {
        if let Some(low) = self.pending_low.take() {
            return Some(low);
        }
        let raw = self.raw;
        let &b = raw.get(self.pos)?;
        if b == b'\\' {
            // Malformed input (a trailing backslash, a short \u escape)
            // decodes to something meaningless, never a panic.
            let Some(&e) = raw.get(self.pos + 1) else {
                self.pos += 1;
                return Some(b as u16);
            };
            self.pos += 2;
            return Some(match e {
                b'b' => 0x08,
                b'f' => 0x0C,
                b'n' => 0x0A,
                b'r' => 0x0D,
                b't' => 0x09,
                b'u' => {
                    let end = (self.pos + 4).min(raw.len());
                    let v = hex4(&raw[self.pos..end]);
                    self.pos = end;
                    v
                }
                other => other as u16,
            });
        }
        // One UTF-8 character (valid for valid JSON; a truncated sequence
        // decodes to U+FFFD).
        let width = match b {
            0x00..=0x7F => 1,
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            _ => 4,
        };
        let bytes = &raw[self.pos..(self.pos + width).min(raw.len())];
        let width = bytes.len();
        self.pos += width;
        let c = std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.chars().next())
            .unwrap_or('\u{FFFD}');
        let mut buf = [0u16; 2];
        let enc = c.encode_utf16(&mut buf);
        if enc.len() == 2 {
            self.pending_low = Some(enc[1]);
        }
        Some(enc[0])
    }
}

fn hex4(h: &[u8]) -> u16 {
    h.iter().fold(0u16, |acc, &d| {
        let v = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            b'A'..=b'F' => d - b'A' + 10,
            _ => 0,
        };
        (acc << 4) | v as u16
    })
}

/// The value of eight ASCII digits packed little-endian in a word (the first
/// digit in the lowest byte), or `None` if any byte is not a digit. SWAR, as
/// simdjson parses them: three multiplies instead of eight dependent steps.
#[inline]
fn eight_digits(word: u64) -> Option<u64> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> bool {
        validate(s.as_bytes(), 1000, &mut Vec::new()).is_ok()
    }

    #[test]
    fn validator_accepts_what_the_grammar_allows() {
        for s in [
            "1",
            "-0",
            "0e0",
            "1E+2",
            "1e400",
            "123456789012345678901234567890",
            "\"\\ud800\"",
            "\"\\/\"",
            "{\"a\":1,\"a\":2}",
            " [ 1 , {\"x\" : [ ] } ] ",
            "true",
            "null",
            "\"é😀\"",
        ] {
            assert!(ok(s), "{s}");
        }
    }

    #[test]
    fn validator_rejects_what_the_grammar_forbids() {
        for s in [
            "",
            " ",
            "{\"a\":1} x",
            "{\"a\":1}{\"b\":2}",
            "1 2",
            "{\"a\":\"x\u{1}y\"}",
            "{\"a\":\"\t\"}",
            "{\"a\":\"\\x\"}",
            "{\"a\":\"\\u12\"}",
            "{\"a\":01}",
            "-",
            "-01",
            "1.",
            ".5",
            "1e",
            "NaN",
            "Infinity",
            "[1,]",
            "{\"a\":1,}",
            "{,}",
            "{\"a\" 1}",
            "tru",
            "nul",
            "{\"a\":1]",
            "[\"a\"",
            "'a'",
            "\u{feff}{}",
            "{\"a\":\u{c}1}",
        ] {
            assert!(!ok(s), "{s:?}");
        }
        assert!(validate(b"\"\xff\"", 10, &mut Vec::new()).is_err());
    }

    #[test]
    fn digit_runs_end_at_the_first_non_digit_whatever_follows() {
        for b in 0..=255u8 {
            for at in 0..8 {
                for tail in [0x00u8, b'5', 0xFF, b'/', b':'] {
                    let mut w = [tail; 8];
                    w[..at].fill(b'7');
                    w[at] = b;
                    let m = non_digit_mask(u64::from_le_bytes(w));
                    let first = if m == 0 {
                        8
                    } else {
                        (m.trailing_zeros() / 8) as usize
                    };
                    let want = w.iter().position(|c| !c.is_ascii_digit()).unwrap_or(8);
                    assert_eq!(first, want, "{w:?}");
                }
            }
        }
        // Through `number_end`, across word boundaries and at the end.
        for n in [
            "1",
            "12345678",
            "123456789",
            "1763699971939",
            "-0.5e+10",
            "1.25E3",
        ] {
            for after in ["", ",", "}", " ", "x"] {
                let s = format!("{n}{after}");
                assert_eq!(number_end(s.as_bytes(), 0), Ok(n.len()), "{s}");
            }
        }
    }

    #[test]
    fn depth_limit_is_exact() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(validate(deep(1000).as_bytes(), 1000, &mut Vec::new()).is_ok());
        let e = validate(deep(1001).as_bytes(), 1000, &mut Vec::new()).unwrap_err();
        assert_eq!(e.kind, JsonErrorKind::TooDeep);
    }

    #[test]
    fn fields_last_duplicate_wins_and_escaped_keys_match() {
        let s = br#"{"type":"a","x":{"type":"no"},"t\u0079pe":"b","ts_ms":1,"ts_ms":"x"}"#;
        let f = scan_fields(s);
        assert!(f.is_object);
        let Member::String { start, len } = f.kind else {
            panic!("{f:?}")
        };
        assert_eq!(&s[start as usize..(start + len) as usize], b"b");
        // The last ts_ms is a string: the parser reports it as not a number.
        assert!(matches!(f.ts_ms, Member::String { .. }), "{f:?}");
    }

    /// Regression: scan_fields is documented never to panic, but a key with a
    /// short `\u` escape, a trailing backslash or a truncated UTF-8 sequence
    /// after an escape indexed past the key (found by review, session 1).
    #[test]
    fn scan_fields_never_panics_on_malformed_escaped_keys() {
        for s in [
            &b"{\"\\u\":1}"[..],
            b"{\"\\u12\":1}",
            b"{\"t\\u0079p\xf0\":1}",
            b"{\"a\\",
            b"{\"\\",
            b"{\"\\uzzzz\":1}",
        ] {
            let _ = scan_fields(s);
        }
        // Every prefix and every one-byte change of a valid line, too.
        let line = br#"{"t\u0079pe":"a\u00e9","ts_ms":1,"x":{"y":[1,"\ud800"]}}"#;
        for n in 0..=line.len() {
            let _ = scan_fields(&line[..n]);
            for b in [b'\\', b'"', b'{', b'}', 0xF0, b'u'] {
                let mut v = line.to_vec();
                if n < v.len() {
                    v[n] = b;
                    let _ = scan_fields(&v);
                }
            }
        }
    }

    #[test]
    fn integers_of_every_length_parse_exactly() {
        // Every length through the fast paths and past them, with a
        // non-digit at every position (a valid fraction or exponent there),
        // against Rust's correctly rounded parser.
        let digits = b"9876543210123456789";
        for n in 1..=digits.len() {
            for neg in [false, true] {
                let mut t = if neg { b"-".to_vec() } else { Vec::new() };
                t.extend_from_slice(&digits[..n]);
                let want: f64 = std::str::from_utf8(&t).unwrap().parse().unwrap();
                assert_eq!(number_value(&t), want, "{}", String::from_utf8_lossy(&t));
                // Copied as written exactly when the fast path takes it.
                assert_eq!(number_and_form(&t).1, n <= 15, "{n} digits");
                let at = t.len() - n;
                for k in 1..n {
                    for mark in [&b"."[..], b"e", b"E+"] {
                        let mut u = t.clone();
                        u.splice(at + k..at + k, mark.iter().copied());
                        let text = std::str::from_utf8(&u).unwrap();
                        let want: f64 = text.parse().unwrap();
                        assert_eq!(number_value(&u).to_bits(), want.to_bits(), "{text}");
                    }
                }
            }
        }
        for w in 0..=255u8 {
            let word = u64::from_le_bytes([b'1', b'2', b'3', w, b'5', b'6', b'7', b'8']);
            let want = w
                .is_ascii_digit()
                .then(|| 12_305_678 + u64::from(w - b'0') * 10_000);
            assert_eq!(eight_digits(word), want, "byte {w:#x}");
        }
    }

    #[test]
    fn each_digit_counts_at_every_place() {
        // One digit other than zero, every digit value at every place of
        // every length the two-word path takes: a digit read from the wrong
        // word, or at the wrong power of ten, changes the value.
        for n in 8..=15usize {
            for place in 0..n {
                for d in b'0'..=b'9' {
                    let mut t = vec![b'1'; 1];
                    t.extend(std::iter::repeat_n(b'0', n - 1));
                    t[place] = d;
                    if t[0] == b'0' {
                        continue;
                    }
                    let want: u64 = std::str::from_utf8(&t).unwrap().parse().unwrap();
                    assert_eq!(number_and_form(&t), (want as f64, true), "{t:?}");
                }
            }
        }
        assert_eq!(number_and_form(b"-0"), (-0.0, false));
        assert!(number_and_form(b"-0").0.is_sign_negative());
        assert_eq!(
            number_and_form(b"-1732200000123"),
            (-1_732_200_000_123.0, true)
        );
    }

    #[test]
    fn numbers_round_like_javascript() {
        assert_eq!(number_value(b"1e3"), 1000.0);
        assert_eq!(number_value(b"1e400"), f64::INFINITY);
        assert!(number_value(b"-0").is_sign_negative());
        assert_eq!(
            number_value(b"12345678901234567890"),
            12345678901234567890u64 as f64
        );
    }
}
