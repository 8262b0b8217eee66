//! Writing text the way JavaScript writes it: `JSON.stringify` string escaping
//! and `String(number)` number formatting.
//!
//! Every function comes as a pair: one that measures the output and one that
//! writes it into a slice, so the renderer can size its buffer exactly before
//! writing and then write in parallel at precomputed offsets.

use crate::simd;

mod number;
mod units;

pub use number::JsNumber;
pub use units::StringUnits;

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

/// Writes `src` (UTF-8 text) escaped as `JSON.stringify` escapes string
/// content into `out`, which must hold `src.len() + escaped_extra(src)` bytes.
/// Returns the number of bytes written. Bytes of `out` past that count may
/// be overwritten (whole 32-byte blocks are stored): pass an exactly-sized
/// slice, or write what follows afterwards, as the renderer does.
///
/// If `out` is too short (which happens only when `src` changed after it was
/// measured: a log rewritten or truncated under its memory map), the output
/// is cut where `out` ends instead of panicking; the caller learns of the
/// change from [`crate::LogBytes::verify`].
pub fn write_escaped(src: &[u8], out: &mut [u8]) -> usize {
    write_escaped_in(src, 0..src.len(), out)
}

/// [`write_escaped`] of `text[range]`, reading (never escaping) bytes of
/// `text` past the range's end where that lets the range's last, partial
/// 32-byte block go through the block path instead of a byte loop: the
/// renderer passes the whole log, so a line's tail is one more block.
pub fn write_escaped_in(text: &[u8], range: std::ops::Range<usize>, out: &mut [u8]) -> usize {
    write_escaped_with(text, range, out, simd::Shuffle::Avx512)
}

/// [`write_escaped_in`] with the shuffle fast paths up to `widest` (the tests
/// hold every path to the same answers).
fn write_escaped_with(
    text: &[u8],
    range: std::ops::Range<usize>,
    out: &mut [u8],
    widest: simd::Shuffle,
) -> usize {
    const B: usize = simd::BLOCK;
    let end = range.end.min(text.len());
    let mut w = 0;
    let mut i = range.start.min(end);
    // The fast path where the CPU has one: branch-free per 32 or 16 bytes,
    // however many quotes they hold. It leaves at most a short tail.
    if let Some((ni, nw)) = simd::escape_quotes(text, i, end, out, w, write_unit_clipped, widest) {
        (i, w) = (ni, nw);
    }
    // Otherwise (no fast path on this CPU, or what it left), blocks of 32
    // bytes while the output has room for a block's worst case plus one
    // block of overrun: store the block, then for each byte to escape (most
    // blocks of a JSON line have a few quotes), put a backslash before it
    // and store the rest of the block again after it. The last block may
    // hold bytes past `end`: they are stored (and overwritten by whatever
    // the caller writes next) but never counted or escaped.
    while i < end && i + B <= text.len() && w + 3 * B <= out.len() {
        let block: &[u8; B] = text[i..i + B].try_into().expect("a whole block");
        let len = (end - i).min(B);
        let valid = if len == B {
            u32::MAX
        } else {
            (1u32 << len) - 1
        };
        let mut m = simd::stop_mask(block) & valid;
        out[w..w + B].copy_from_slice(block);
        if m == 0 {
            i += len;
            w += len;
            continue;
        }
        if simd::control_mask(block) & valid != 0 {
            // Rare (raw tabs and newlines): this block a byte at a time.
            for &b in &block[..len] {
                w += write_unit_clipped(b, &mut out[w..]);
            }
            i += len;
            continue;
        }
        // The rest of the block from any offset is one fixed-size copy: from
        // the source while a whole block follows this one (a copy from a
        // stack buffer just written would stall on store forwarding), else
        // from the block padded with zeros.
        let padded: [u8; 2 * B];
        let ahead: &[u8] = if i + 2 * B <= text.len() {
            &text[i..i + 2 * B]
        } else {
            let mut p = [0u8; 2 * B];
            p[..B].copy_from_slice(block);
            padded = p;
            &padded
        };
        let mut prev = 0;
        while m != 0 {
            let k = m.trailing_zeros() as usize;
            w += k - prev;
            out[w] = b'\\';
            w += 1;
            out[w..w + B].copy_from_slice(&ahead[k..k + B]);
            prev = k;
            m &= m - 1;
        }
        w += len - prev;
        i += len;
    }
    // The tail, a byte at a time.
    while i < end {
        let b = text[i];
        if needs_escape(b) {
            w += write_unit_clipped(b, &mut out[w..]);
        } else {
            let Some(slot) = out.get_mut(w) else { break };
            *slot = b;
            w += 1;
        }
        i += 1;
    }
    w
}

/// Writes one byte escaped, cut short if `out` ends first.
#[inline]
fn write_unit_clipped(b: u8, out: &mut [u8]) -> usize {
    if out.len() >= 6 {
        return write_escaped_unit(b as u16, out);
    }
    let mut buf = [0u8; 6];
    let n = write_escaped_unit(b as u16, &mut buf).min(out.len());
    out[..n].copy_from_slice(&buf[..n]);
    n
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
    /// Writes what fits: the slice was sized from the same input, so only a
    /// source changed under a memory map can make it short (see
    /// [`write_escaped`]).
    fn put(&mut self, bytes: &[u8]) {
        let n = bytes.len().min(self.out.len() - self.w);
        self.out[self.w..self.w + n].copy_from_slice(&bytes[..n]);
        self.w += n;
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
                j += if raw.get(j + 1) == Some(&b'u') { 6 } else { 2 };
            }
            j.min(raw.len())
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
        let n = raw.len().min(out.len());
        out[..n].copy_from_slice(&raw[..n]);
        return n;
    }
    let mut s = SliceSink { out, w: 0 };
    transcode(raw, &mut s);
    s.w
}

/// `dst.copy_from_slice(src)` for the short pieces of a message (prefixes,
/// kinds, timestamps) without a call to `memcpy`: two overlapping fixed-size
/// copies cover any length in a power-of-two band. A message has eight such
/// pieces, and the calls were 3% of a replay.
#[inline(always)]
pub(crate) fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    assert_eq!(dst.len(), n, "copy_short needs equal lengths");
    if n > 32 {
        dst.copy_from_slice(src);
    } else if n >= 16 {
        dst[..16].copy_from_slice(&src[..16]);
        dst[n - 16..].copy_from_slice(&src[n - 16..]);
    } else if n >= 8 {
        dst[..8].copy_from_slice(&src[..8]);
        dst[n - 8..].copy_from_slice(&src[n - 8..]);
    } else if n >= 4 {
        dst[..4].copy_from_slice(&src[..4]);
        dst[n - 4..].copy_from_slice(&src[n - 4..]);
    } else {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = *s;
        }
    }
}
/// Writes `bytes` at `at`, cut short where `out` ends (only a log changed
/// under its memory map makes a message outgrow the size measured for it).
#[inline]
pub(crate) fn put(out: &mut [u8], at: usize, bytes: &[u8]) -> usize {
    let n = bytes.len().min(out.len() - at);
    copy_short(&mut out[at..at + n], &bytes[..n]);
    at + n
}

/// Bytes of `text` as a JSON string, its quotes included.
pub(crate) fn json_len(text: &str) -> usize {
    serde_json::to_string(text).map_or(text.len() + 2, |s| s.len())
}

/// The longest start of `text`, cut at a character, whose JSON string (its
/// quotes included, escaped as `serde_json` escapes it) takes at most
/// `room` bytes.
pub(crate) fn fit_json(text: &str, room: usize) -> &str {
    let mut used = 2;
    for (at, c) in text.char_indices() {
        used += match c {
            '"' | '\\' | '\u{8}' | '\u{c}' | '\n' | '\r' | '\t' => 2,
            c if (c as u32) < 0x20 => 6,
            c => c.len_utf8(),
        };
        if used > room {
            return &text[..at];
        }
    }
    text
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

    /// `JSON.stringify`'s escaping of one byte at a time: the oracle.
    fn naive_escape(src: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for &b in src {
            match b {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                0x08 => out.extend_from_slice(b"\\b"),
                0x0C => out.extend_from_slice(b"\\f"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\t' => out.extend_from_slice(b"\\t"),
                0..=0x1F => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
                _ => out.push(b),
            }
        }
        out
    }

    /// Every escaper path (on a CPU without one, asking for it falls back
    /// to the next narrower).
    const PATHS: [simd::Shuffle; 4] = [
        simd::Shuffle::Avx512,
        simd::Shuffle::Avx2,
        simd::Shuffle::Ssse3,
        simd::Shuffle::Off,
    ];

    #[test]
    fn block_escaper_matches_a_byte_at_a_time_escaper() {
        // Every byte value at every position of a few blocks, alone and next
        // to quotes, written into an exact buffer and into one with room to
        // spare (the block path), in both cases checking what follows.
        for b in 0..=255u8 {
            for pos in 0..100 {
                for fill in [b'a', b'"', 0xC3] {
                    let mut s = vec![fill; 100];
                    s[pos] = b;
                    let want = naive_escape(&s);
                    assert_eq!(escaped_extra(&s), want.len() - s.len());
                    for (spare, shuffle) in [0, 200].into_iter().flat_map(|n| PATHS.map(|p| (n, p)))
                    {
                        let mut out = vec![b'#'; want.len() + spare];
                        let n = write_escaped_with(&s, 0..s.len(), &mut out, shuffle);
                        assert_eq!(
                            &out[..n],
                            &want[..],
                            "byte {b:#x} at {pos} in {fill:#x}, {shuffle:?}"
                        );
                    }
                }
            }
        }
        // High bytes (UTF-8) next to escapes must not hide them.
        let s = "é\"ü\\\u{1}x".as_bytes();
        assert_eq!(esc(s), "é\\\"ü\\\\\\u0001x".as_bytes());
    }

    #[test]
    fn escaping_a_range_reads_past_it_but_writes_only_its_bytes() {
        // Text with quotes, backslashes, controls and non-ASCII; every range
        // end near a block edge, with and without bytes after the range, and
        // outputs from exactly sized to roomy.
        let mut text = Vec::new();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..400 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            text.extend_from_slice(match x % 9 {
                0 => b"\"",
                1 => b"\\",
                2 => b"\n",
                3 => "é".as_bytes(),
                4 if x.is_multiple_of(7) => b"\t",
                _ => b"abcdefg",
            });
        }
        for start in [0usize, 1, 5, 31, 32, 33, 100] {
            for len in (0..140).chain([200, 250, 300]) {
                let end = (start + len).min(text.len());
                let want = naive_escape(&text[start..end]);
                for room in [0usize, 1, 31, 32, 40, 63, 64, 65, 200] {
                    for shuffle in PATHS {
                        let mut out = vec![0xAAu8; want.len() + room];
                        let n = write_escaped_with(&text, start..end, &mut out, shuffle);
                        let at = format!("{start}..{end}, room {room}, {shuffle:?}");
                        assert_eq!(&out[..n], &want[..], "{at}");
                        // And with nothing after the range to read.
                        let mut out = vec![0xAAu8; want.len() + room];
                        let n = write_escaped_with(&text[..end], start..end, &mut out, shuffle);
                        assert_eq!(&out[..n], &want[..], "{at}, at the end");
                    }
                }
            }
        }
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
    fn short_copies_copy_every_length_exactly() {
        let src: Vec<u8> = (1..=80).collect();
        for n in 0..=80 {
            let mut dst = vec![0u8; n + 2];
            copy_short(&mut dst[1..n + 1], &src[..n]);
            assert_eq!(&dst[1..n + 1], &src[..n], "length {n}");
            assert_eq!((dst[0], dst[n + 1]), (0, 0), "length {n} wrote outside");
        }
    }
}
