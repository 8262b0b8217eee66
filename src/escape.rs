//! Writing text the way JavaScript writes it: `JSON.stringify` string escaping
//! and `String(number)` number formatting.
//!
//! Every function comes as a pair: one that measures the output and one that
//! writes it into a slice, so the renderer can size its buffer exactly before
//! writing and then write in parallel at precomputed offsets.

use crate::json::StringUnits;

/// Extra bytes `JSON.stringify` adds when escaping one byte of UTF-8 text.
#[inline]
fn escape_extra(b: u8) -> usize {
    match b {
        b'"' | b'\\' | 0x08 | 0x0C | b'\n' | b'\r' | b'\t' => 1,
        0x00..=0x1F => 5,
        _ => 0,
    }
}

#[inline]
fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// How many bytes longer `src` (UTF-8 text) gets when escaped as a JSON
/// string's content by `JSON.stringify`.
pub fn escaped_extra(src: &[u8]) -> usize {
    // Count the common cases with a loop the compiler vectorises; control
    // characters are rare, so they are counted exactly only when present.
    let mut quotes = 0usize;
    let mut controls = 0usize;
    for block in src.chunks(64) {
        let mut q = 0u8;
        let mut c = 0u8;
        for &b in block {
            q += (b == b'"') as u8 | (b == b'\\') as u8;
            c += (b < 0x20) as u8;
        }
        quotes += q as usize;
        controls += c as usize;
    }
    if controls == 0 {
        quotes
    } else {
        src.iter().map(|&b| escape_extra(b)).sum()
    }
}

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// A mask with the high bit set in each byte of `v` that needs escaping
/// (`"`, `\\`, or below 0x20). Bits above the lowest set one may be false
/// positives (borrows propagate upwards), so only the lowest is used.
#[inline(always)]
fn escape_mask(v: u64) -> u64 {
    let quote = v ^ (LO * b'"' as u64);
    let backslash = v ^ (LO * b'\\' as u64);
    let zero_quote = quote.wrapping_sub(LO) & !quote;
    let zero_backslash = backslash.wrapping_sub(LO) & !backslash;
    let control = v.wrapping_sub(LO * 0x20) & !v;
    (zero_quote | zero_backslash | control) & HI
}

/// Index of the first byte of `src[from..]` that needs escaping, or
/// `src.len()`.
#[cfg(test)]
fn next_to_escape(src: &[u8], mut i: usize) -> usize {
    while i + 8 <= src.len() {
        let mut word = [0u8; 8];
        word.copy_from_slice(&src[i..i + 8]);
        let m = escape_mask(u64::from_le_bytes(word));
        if m != 0 {
            return i + (m.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < src.len() && !needs_escape(src[i]) {
        i += 1;
    }
    i
}

/// Writes `src` (UTF-8 text) escaped as `JSON.stringify` escapes string
/// content into `out`, which must hold `src.len() + escaped_extra(src)` bytes.
/// Returns the number of bytes written. Bytes of `out` past that count may
/// be overwritten (whole 8-byte words are stored): pass an exactly-sized
/// slice, or write what follows afterwards, as the renderer does.
pub fn write_escaped(src: &[u8], out: &mut [u8]) -> usize {
    let mut w = 0;
    let mut i = 0;
    // Whole words while both sides have eight bytes of room: store the word,
    // then advance past its clean prefix (the rest is rewritten next).
    while i + 8 <= src.len() && w + 8 <= out.len() {
        let mut word = [0u8; 8];
        word.copy_from_slice(&src[i..i + 8]);
        out[w..w + 8].copy_from_slice(&word);
        let m = escape_mask(u64::from_le_bytes(word));
        if m == 0 {
            i += 8;
            w += 8;
            continue;
        }
        let k = (m.trailing_zeros() / 8) as usize;
        i += k;
        w += k;
        let b = src[i];
        if b == b'"' || b == b'\\' {
            // The common case, inline: a backslash before the byte.
            out[w] = b'\\';
            out[w + 1] = b;
            w += 2;
        } else {
            w += write_escaped_unit(b as u16, &mut out[w..]);
        }
        i += 1;
    }
    // The tail, a byte at a time.
    while i < src.len() {
        let b = src[i];
        if needs_escape(b) {
            w += write_escaped_unit(b as u16, &mut out[w..]);
        } else {
            out[w] = b;
            w += 1;
        }
        i += 1;
    }
    w
}

/// Writes one code unit below 0x80, or one raw UTF-8 byte, escaped.
#[inline]
fn write_escaped_unit(u: u16, out: &mut [u8]) -> usize {
    let short = match u {
        0x22 => b'"',
        0x5C => b'\\',
        0x08 => b'b',
        0x0C => b'f',
        0x0A => b'n',
        0x0D => b'r',
        0x09 => b't',
        0x00..=0x1F => return write_u_escape(u, out),
        _ => {
            out[0] = u as u8;
            return 1;
        }
    };
    out[0] = b'\\';
    out[1] = short;
    2
}

fn write_u_escape(u: u16, out: &mut [u8]) -> usize {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out[..2].copy_from_slice(b"\\u");
    for k in 0..4 {
        out[2 + k] = HEX[((u >> (12 - 4 * k)) & 0xF) as usize];
    }
    6
}

/// Something escaped text can be written to: a counter or a slice.
trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

struct Counter(usize);
impl Sink for Counter {
    fn put(&mut self, bytes: &[u8]) {
        self.0 += bytes.len();
    }
}

struct SliceSink<'a> {
    out: &'a mut [u8],
    w: usize,
}
impl Sink for SliceSink<'_> {
    fn put(&mut self, bytes: &[u8]) {
        self.out[self.w..self.w + bytes.len()].copy_from_slice(bytes);
        self.w += bytes.len();
    }
}

/// Re-escapes the raw content of a valid JSON string (between its quotes) as
/// `JSON.stringify` would escape the decoded string: `\/` becomes `/`,
/// `\u00e9` becomes `é`, a surrogate pair becomes its UTF-8 character, and an
/// unpaired surrogate becomes a lowercase `\udxxx` escape.
fn transcode(raw: &[u8], sink: &mut impl Sink) {
    // Copy runs without backslashes as they are: valid JSON string content has
    // no raw quotes or control characters, and non-ASCII passes through.
    let mut i = 0;
    while i < raw.len() {
        let Some(k) = memchr::memchr(b'\\', &raw[i..]) else {
            sink.put(&raw[i..]);
            return;
        };
        sink.put(&raw[i..i + k]);
        i += k;
        // Decode escapes until the next raw byte that is not a backslash.
        let esc_end = {
            let mut j = i;
            while j < raw.len() && raw[j] == b'\\' {
                j += if raw[j + 1] == b'u' { 6 } else { 2 };
            }
            j
        };
        let mut units = StringUnits::new(&raw[i..esc_end]).peekable();
        while let Some(u) = units.next() {
            let mut buf = [0u8; 6];
            if (0xD800..0xDC00).contains(&u) {
                if let Some(&low) = units.peek()
                    && (0xDC00..0xE000).contains(&low)
                {
                    units.next();
                    let c = char::decode_utf16([u, low])
                        .next()
                        .and_then(Result::ok)
                        .unwrap_or('\u{FFFD}');
                    sink.put(c.encode_utf8(&mut [0u8; 4]).as_bytes());
                    continue;
                }
                let n = write_u_escape(u, &mut buf);
                sink.put(&buf[..n]);
            } else if (0xDC00..0xE000).contains(&u) {
                let n = write_u_escape(u, &mut buf);
                sink.put(&buf[..n]);
            } else if u < 0x80 {
                let n = write_escaped_unit(u, &mut buf);
                sink.put(&buf[..n]);
            } else {
                let c = char::from_u32(u as u32).unwrap_or('\u{FFFD}');
                sink.put(c.encode_utf8(&mut [0u8; 4]).as_bytes());
            }
        }
        i = esc_end;
    }
}

/// Length of [`write_transcoded`]'s output for `raw`.
pub fn transcoded_len(raw: &[u8]) -> usize {
    if memchr::memchr(b'\\', raw).is_none() {
        return raw.len();
    }
    let mut c = Counter(0);
    transcode(raw, &mut c);
    c.0
}

/// Writes the raw content of a valid JSON string re-escaped as
/// `JSON.stringify` escapes its decoded value. `out` must hold
/// [`transcoded_len`] bytes. Returns the number of bytes written.
pub fn write_transcoded(raw: &[u8], out: &mut [u8]) -> usize {
    if memchr::memchr(b'\\', raw).is_none() {
        out[..raw.len()].copy_from_slice(raw);
        return raw.len();
    }
    let mut s = SliceSink { out, w: 0 };
    transcode(raw, &mut s);
    s.w
}

/// A number formatted as JavaScript's `String(x)` formats it.
pub struct JsNumber {
    buf: [u8; 32],
    len: usize,
}

impl JsNumber {
    /// Formats `x` (never NaN: JSON cannot express it).
    pub fn new(x: f64) -> Self {
        let mut buf = [0u8; 32];
        let len = if x == 0.0 {
            buf[0] = b'0'; // also -0, as JavaScript prints it
            1
        } else if x.is_infinite() {
            let t: &[u8] = if x > 0.0 { b"Infinity" } else { b"-Infinity" };
            buf[..t.len()].copy_from_slice(t);
            t.len()
        } else if x.fract() == 0.0 && x.abs() < 9007199254740992.0 {
            // Exactly representable integers print as all their digits.
            let mut b = itoa::Buffer::new();
            let t = b.format(x as i64).as_bytes();
            buf[..t.len()].copy_from_slice(t);
            t.len()
        } else {
            let mut b = ryu_js::Buffer::new();
            let t = b.format(x).as_bytes();
            buf[..t.len()].copy_from_slice(t);
            t.len()
        };
        JsNumber { buf, len }
    }

    /// The formatted text (ASCII).
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn esc(s: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; s.len() + escaped_extra(s)];
        let n = write_escaped(s, &mut out);
        assert_eq!(n, out.len());
        out
    }

    fn tc(s: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; transcoded_len(s)];
        let n = write_transcoded(s, &mut out);
        assert_eq!(n, out.len());
        out
    }

    #[test]
    fn word_writes_match_a_byte_loop_for_every_slack() {
        let src = "ab\"cdé\\\u{1}efgh\tijklmnopq\"rstuvwxyz0123456789\"\"".as_bytes();
        let want: Vec<u8> = {
            let mut v = Vec::new();
            for &b in src {
                let mut buf = [0u8; 6];
                let n = write_escaped_unit(b as u16, &mut buf);
                v.extend_from_slice(&buf[..n]);
            }
            v
        };
        for start in 0..src.len() {
            let s = &src[start..];
            let mut out = vec![0u8; s.len() + escaped_extra(s)];
            let n = write_escaped(s, &mut out);
            assert_eq!(n, out.len());
            let mut w = Vec::new();
            for &b in s {
                let mut buf = [0u8; 6];
                let k = write_escaped_unit(b as u16, &mut buf);
                w.extend_from_slice(&buf[..k]);
            }
            assert_eq!(out, w, "from {start}");
        }
        assert_eq!(esc(src), want);
    }

    #[test]
    fn escapes_like_json_stringify() {
        assert_eq!(esc(b"a\"b\\c/d"), b"a\\\"b\\\\c/d");
        assert_eq!(
            esc(b"\x08\x0c\n\r\t\x01\x1f\x7f"),
            b"\\b\\f\\n\\r\\t\\u0001\\u001f\x7f"
        );
        let long = "é\"x".repeat(40);
        assert_eq!(esc(long.as_bytes()), "é\\\"x".repeat(40).as_bytes());
    }

    #[test]
    fn swar_scan_finds_every_byte_that_needs_escaping() {
        // Every byte value at every position of a word, against a naive scan.
        for b in 0..=255u8 {
            for pos in 0..20 {
                let mut s = vec![b'a'; 20];
                s[pos] = b;
                let want = s.iter().position(|&c| needs_escape(c)).unwrap_or(s.len());
                assert_eq!(next_to_escape(&s, 0), want, "byte {b:#x} at {pos}");
            }
        }
        // High bytes (UTF-8) next to escapes must not hide them.
        let s = "é\"ü\\\u{1}x".as_bytes();
        assert_eq!(esc(s), "é\\\"ü\\\\\\u0001x".as_bytes());
    }

    #[test]
    fn transcodes_escapes_like_parse_then_stringify() {
        assert_eq!(tc(br"a\/b\u00e9\n\u0001"), "a/bé\\n\\u0001".as_bytes());
        assert_eq!(tc(br"\ud83d\ude00"), "😀".as_bytes());
        assert_eq!(tc(br"\uD800x"), b"\\ud800x");
        assert_eq!(tc(br"\udc00\ud800"), b"\\udc00\\ud800");
        assert_eq!(tc(br#"\"\\"#), br#"\"\\"#);
        assert_eq!(tc("plain é".as_bytes()), "plain é".as_bytes());
    }

    #[test]
    fn formats_numbers_like_javascript() {
        let f = |x: f64| String::from_utf8(JsNumber::new(x).as_bytes().to_vec()).unwrap();
        assert_eq!(f(-0.0), "0");
        assert_eq!(f(1000.0), "1000");
        assert_eq!(f(1.5), "1.5");
        assert_eq!(f(1e21), "1e+21");
        assert_eq!(f(1e20), "100000000000000000000");
        assert_eq!(f(12345678901234567890.0), "12345678901234567000");
        assert_eq!(f(f64::INFINITY), "Infinity");
        assert_eq!(f(-1e-7), "-1e-7");
        assert_eq!(f(1700000000123.0), "1700000000123");
    }
}
