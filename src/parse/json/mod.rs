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

mod fields;
mod numbers;
mod strings;

pub use fields::*;
pub use numbers::*;
pub use strings::*;

use std::fmt;

/// Why a line is not one valid JSON value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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

#[cfg(test)]
mod tests {
    use super::numbers::eight_digits;
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
