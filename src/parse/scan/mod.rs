//! The fast path: one pass over a line that validates it exactly (RFC 8259
//! grammar and UTF-8), finds the top-level `type` and `ts_ms` members, and
//! counts how many bytes JSON-escaping the line will add.
//!
//! UTF-8 is validated for the whole line first (simdutf8). String content,
//! most of a log's bytes, is then skipped eight bytes at a time (SWAR on
//! `u64` words, safe code): a word is examined further only when it holds a
//! quote, a backslash or a control character. Everything
//! else is a small scalar state machine with an explicit container stack, so
//! no input can overflow the call stack.
//!
//! On x86-64 the scanner is compiled twice, as is and with AVX2 and BMI1
//! enabled, and the CPU picks at run time: the same code then uses
//! three-operand vector instructions and `tzcnt`, about 8% fewer instructions
//! (3% less time in the criterion one-thread parse of a log in memory).
//!
//! The replay calls it through [`scan_next_line`], which also finds the end
//! of the line: the scan stops at the `\n` after the value, so most lines are
//! never searched for their `\n` separately (anything unusual falls back to
//! splitting the line first and [`scan_line_with`]).
//!
//! [`crate::parse::json::validate`] is the simple, obviously-correct version of the
//! same grammar; the tests hold this scanner to it.

use crate::parse::json::{self, JsonError, JsonErrorKind, Member, StringUnits};
use crate::simd;

/// What one pass over a valid line found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineScan {
    /// Whether the value is an object.
    pub is_object: bool,
    /// The last top-level `type` member.
    pub kind: Member,
    /// The last top-level `ts_ms` member.
    pub ts_ms: Member,
    /// Bytes JSON-escaping the whole line adds (one per quote, backslash,
    /// and tab/CR/LF between tokens).
    pub escape_extra: u64,
}

impl LineScan {
    /// The members the record is made of.
    #[inline]
    pub fn fields(&self) -> json::Fields {
        json::Fields {
            is_object: self.is_object,
            kind: self.kind,
            ts_ms: self.ts_ms,
        }
    }
}

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

#[cold]
fn fail(kind: JsonErrorKind, column: usize) -> JsonError {
    JsonError { kind, column }
}

/// High bit set in bytes of `v` that are `"`, `\`, or below 0x20. Only the
/// lowest set bit is exact (borrows propagate upwards). Non-ASCII bytes do
/// not stop the scan: the whole line's UTF-8 was validated first.
#[inline(always)]
fn string_stop_mask(v: u64) -> u64 {
    let q = v ^ (LO * b'"' as u64);
    let b = v ^ (LO * b'\\' as u64);
    ((q.wrapping_sub(LO) & !q) | (b.wrapping_sub(LO) & !b) | (v.wrapping_sub(LO * 0x20) & !v)) & HI
}

/// Skips JSON whitespace. With `LINE`, a `\n` is not whitespace but the end
/// of the line.
#[inline(always)]
fn ws<const LINE: bool>(s: &[u8], mut i: usize, extra: &mut u64) -> usize {
    // Compact JSON has no whitespace: one test for the common case (every
    // byte that can follow is above 0x20).
    match s.get(i) {
        Some(&c) if c > b' ' => return i,
        None => return i,
        _ => {}
    }
    while let Some(&c) = s.get(i) {
        match c {
            b' ' => {}
            b'\t' | b'\r' => *extra += 1,
            b'\n' if !LINE => *extra += 1,
            _ => break,
        }
        i += 1;
    }
    i
}

/// Scans a string whose opening quote is at `i - 1`; returns the index past
/// the closing quote and whether it held escapes. Counts escape overhead.
#[inline(always)]
fn string(s: &[u8], mut i: usize, extra: &mut u64) -> Result<(usize, bool), JsonError> {
    let n = s.len();
    let mut escaped = false;
    loop {
        // Skip to the next quote, backslash or control character: 32 bytes
        // at a time, then 8 near the end of the line, then single bytes.
        'skip: {
            while i + simd::BLOCK <= n {
                let block = s[i..i + simd::BLOCK].try_into().expect("a whole block");
                let m = simd::stop_mask(block);
                if m != 0 {
                    i += m.trailing_zeros() as usize;
                    break 'skip;
                }
                i += simd::BLOCK;
            }
            while i + 8 <= n {
                let mut w = [0u8; 8];
                w.copy_from_slice(&s[i..i + 8]);
                let m = string_stop_mask(u64::from_le_bytes(w));
                if m != 0 {
                    i += (m.trailing_zeros() / 8) as usize;
                    break 'skip;
                }
                i += 8;
            }
        }
        let Some(&c) = s.get(i) else {
            return Err(fail(JsonErrorKind::UnexpectedEnd, n));
        };
        match c {
            b'"' => {
                *extra += 1;
                return Ok((i + 1, escaped));
            }
            b'\\' => {
                escaped = true;
                // One lookup instead of a branch per kind of escape: which
                // kind is next is data, and was a mispredicted jump.
                let Some(&next) = s.get(i + 1) else {
                    return Err(fail(JsonErrorKind::UnexpectedEnd, n));
                };
                match ESCAPES[next as usize] {
                    Escape::Invalid => return Err(fail(JsonErrorKind::InvalidEscape, i)),
                    Escape::Unicode => {
                        match s.get(i + 2..i + 6) {
                            Some(h) if h.iter().all(u8::is_ascii_hexdigit) => {}
                            Some(_) => return Err(fail(JsonErrorKind::InvalidEscape, i)),
                            None if s[i + 2..].iter().all(u8::is_ascii_hexdigit) => {
                                return Err(fail(JsonErrorKind::UnexpectedEnd, n));
                            }
                            None => return Err(fail(JsonErrorKind::InvalidEscape, i)),
                        }
                        *extra += 1;
                        i += 6;
                    }
                    // `\"` and `\\` gain two bytes when escaped again, the
                    // others one (their backslash).
                    e => {
                        *extra += e as u64;
                        i += 2;
                    }
                }
            }
            0x00..=0x1F => return Err(fail(JsonErrorKind::ControlCharacterInString, i)),
            _ => i += 1,
        }
    }
}

/// What a byte after a backslash makes of the escape. A valid two-byte
/// escape's value is the bytes escaping it again adds.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Escape {
    Invalid = 0,
    /// `\/`, `\b`, `\f`, `\n`, `\r`, `\t`: the backslash is escaped.
    Short = 1,
    /// `\"` and `\\`: both bytes are.
    Doubled = 2,
    /// `\u` and four hex digits.
    Unicode = 3,
}

static ESCAPES: [Escape; 256] = {
    let mut t = [Escape::Invalid; 256];
    t[b'/' as usize] = Escape::Short;
    t[b'b' as usize] = Escape::Short;
    t[b'f' as usize] = Escape::Short;
    t[b'n' as usize] = Escape::Short;
    t[b'r' as usize] = Escape::Short;
    t[b't' as usize] = Escape::Short;
    t[b'"' as usize] = Escape::Doubled;
    t[b'\\' as usize] = Escape::Doubled;
    t[b'u' as usize] = Escape::Unicode;
    t
};

/// Which top-level member a key names.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    None,
    Kind,
    TsMs,
}

#[inline(always)]
fn target_of(raw: &[u8], escaped: bool) -> Target {
    match raw {
        b"type" => Target::Kind,
        b"ts_ms" => Target::TsMs,
        _ if escaped && raw.len() <= 30 => {
            if StringUnits::new(raw).eq("type".encode_utf16()) {
                Target::Kind
            } else if StringUnits::new(raw).eq("ts_ms".encode_utf16()) {
                Target::TsMs
            } else {
                Target::None
            }
        }
        _ => Target::None,
    }
}

/// Scans one line: exactly one JSON value with optional JSON whitespace
/// around it, nested at most `max_depth` levels. `stack` is reused scratch.
pub fn scan_line(s: &[u8], max_depth: usize, stack: &mut Vec<bool>) -> Result<LineScan, JsonError> {
    scan_line_with(s, max_depth, stack, false)
}

/// [`scan_line`], skipping the UTF-8 check when the caller has already
/// validated `s` as UTF-8 (for example a whole chunk of lines at once: a
/// `\n` never falls inside a multi-byte sequence, so every line of a valid
/// chunk is valid).
pub fn scan_line_with(
    s: &[u8],
    max_depth: usize,
    stack: &mut Vec<bool>,
    utf8_known_valid: bool,
) -> Result<LineScan, JsonError> {
    // Member positions are u32: a line of 4 GiB or more is not scanned.
    // (Checked here, outside the hot function: inside it, this one branch
    // changed its code generation and cost 7% more instructions.)
    if u32::try_from(s.len()).is_err() {
        return Err(fail(JsonErrorKind::TooLong, 0));
    }
    #[cfg(all(target_arch = "x86_64", not(feature = "portable")))]
    if has_avx2() {
        // SAFETY: the CPU has AVX2 and BMI1, checked just above.
        return unsafe { scan_line_avx2(s, max_depth, stack, utf8_known_valid) };
    }
    scan_core::<false>(s, max_depth, stack, utf8_known_valid).map(|(scan, _, _)| scan)
}

/// A line found and scanned by [`scan_next_line`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextLine {
    /// The scan of the line's content.
    pub scan: LineScan,
    /// Where the content ends: past the value, before the spaces, tabs and
    /// CRs that may follow it (what trimming the line leaves).
    pub end: usize,
    /// Where the line's `\n` is.
    pub newline: usize,
}

/// The line splitter and the scanner in one pass: scans the object that
/// starts at `s[0]` and expects only spaces, tabs and CRs after it, then a
/// `\n`. `s` must be valid UTF-8 (its lines are not checked again).
///
/// `None` whenever that is not what `s` starts with: no `{`, an invalid value, a
/// value followed by anything else (such as a second value or a vertical
/// tab, which trimming would remove), or no `\n` in `s`. The caller then
/// finds the line's end itself and scans the line with [`scan_line_with`],
/// which reports the exact error. So the fast path never decides anything
/// the line-by-line path would decide differently.
pub fn scan_next_line(s: &[u8], max_depth: usize, stack: &mut Vec<bool>) -> Option<NextLine> {
    #[cfg(all(target_arch = "x86_64", not(feature = "portable")))]
    if has_avx2() {
        // SAFETY: the CPU has AVX2 and BMI1, checked just above.
        return unsafe { scan_next_line_avx2(s, max_depth, stack) };
    }
    next_line(s, max_depth, stack)
}

#[cfg(all(target_arch = "x86_64", not(feature = "portable")))]
#[target_feature(enable = "avx2,bmi1")]
fn scan_next_line_avx2(s: &[u8], max_depth: usize, stack: &mut Vec<bool>) -> Option<NextLine> {
    next_line(s, max_depth, stack)
}

/// Whether this CPU has what the scanner's AVX2 copy needs (AVX2 and BMI1).
/// A caller that loops over many lines can check once and run its whole loop
/// in a function compiled with those features, calling [`next_line`]: the
/// scanner is then inlined into the loop instead of called per line.
#[cfg(all(target_arch = "x86_64", not(feature = "portable")))]
#[inline]
pub(crate) fn has_avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("bmi1")
}

/// [`scan_next_line`] compiled into its caller, with the caller's target
/// features (see [`has_avx2`]).
#[inline(always)]
pub(crate) fn next_line(s: &[u8], max_depth: usize, stack: &mut Vec<bool>) -> Option<NextLine> {
    if s.first() != Some(&b'{') {
        return None;
    }
    // Positions are u32: a longer line fails to find its `\n` here.
    let s = &s[..s.len().min(u32::MAX as usize)];
    let (scan, end, newline) = scan_core::<true>(s, max_depth, stack, true).ok()?;
    Some(NextLine { scan, end, newline })
}

#[cfg(all(target_arch = "x86_64", not(feature = "portable")))]
#[target_feature(enable = "avx2,bmi1")]
fn scan_line_avx2(
    s: &[u8],
    max_depth: usize,
    stack: &mut Vec<bool>,
    utf8_known_valid: bool,
) -> Result<LineScan, JsonError> {
    scan_core::<false>(s, max_depth, stack, utf8_known_valid).map(|(scan, _, _)| scan)
}

/// The scanner. Returns the scan, where the value's content ends and where
/// the input ends: with `LINE`, a `\n` ends the input (see
/// [`scan_next_line`]); without, the end of `s` does (the end and the input's
/// end are then both `s.len()`).
#[inline(always)]
fn scan_core<const LINE: bool>(
    s: &[u8],
    max_depth: usize,
    stack: &mut Vec<bool>,
    utf8_known_valid: bool,
) -> Result<(LineScan, usize, usize), JsonError> {
    // UTF-8 first, for the whole line, with SIMD: string scanning then only
    // stops at quotes, backslashes and control characters, and a non-ASCII
    // byte outside a string is a grammar error below.
    if !utf8_known_valid && simdutf8::basic::from_utf8(s).is_err() {
        let at = simdutf8::compat::from_utf8(s).map_or_else(|e| e.valid_up_to(), |_| 0);
        return Err(fail(JsonErrorKind::InvalidUtf8, at));
    }
    stack.clear();
    let n = s.len();
    let mut extra = 0u64;
    let mut out = LineScan {
        is_object: false,
        kind: Member::Absent,
        ts_ms: Member::Absent,
        escape_extra: 0,
    };
    let mut i = ws::<LINE>(s, 0, &mut extra);
    out.is_object = s.get(i) == Some(&b'{');
    // The member the next value belongs to, when it is at the top level.
    let mut target = Target::None;
    'value: loop {
        let Some(&c) = s.get(i) else {
            return Err(fail(JsonErrorKind::UnexpectedEnd, n));
        };
        let start = i;
        match c {
            b'{' | b'[' => {
                if target != Target::None {
                    set(&mut out, target, Member::Other);
                    target = Target::None;
                }
                if stack.len() >= max_depth {
                    return Err(fail(JsonErrorKind::TooDeep, i));
                }
                let close = if c == b'{' { b'}' } else { b']' };
                i = ws::<LINE>(s, i + 1, &mut extra);
                if s.get(i) == Some(&close) {
                    i += 1;
                } else {
                    stack.push(c == b'{');
                    if c == b'{' {
                        (i, target) = key::<LINE>(s, i, stack.len() == 1, &mut extra)?;
                    }
                    continue 'value;
                }
            }
            b'"' => {
                extra += 1;
                i = string(s, i + 1, &mut extra)?.0;
                if target != Target::None {
                    let m = Member::String {
                        start: (start + 1) as u32,
                        len: (i - start - 2) as u32,
                    };
                    set(&mut out, target, m);
                }
            }
            b'-' | b'0'..=b'9' => {
                i = json::number_end(s, i)?;
                if target != Target::None {
                    let m = Member::Number {
                        start: start as u32,
                        len: (i - start) as u32,
                    };
                    set(&mut out, target, m);
                }
            }
            b't' | b'f' | b'n' => {
                i = json::literal(
                    s,
                    i,
                    match c {
                        b't' => b"true",
                        b'f' => b"false",
                        _ => b"null",
                    },
                )?;
                if target != Target::None {
                    set(&mut out, target, Member::Other);
                }
            }
            _ => return Err(fail(JsonErrorKind::UnexpectedByte, i)),
        }
        target = Target::None;
        // After a value: close containers or go on to the next element.
        loop {
            i = ws::<LINE>(s, i, &mut extra);
            let Some(&in_object) = stack.last() else {
                if LINE {
                    if s.get(i) != Some(&b'\n') {
                        return Err(fail(JsonErrorKind::TrailingCharacters, i));
                    }
                    // The spaces, tabs and CRs before the `\n` are trimmed
                    // off the line: they are not part of its content.
                    let mut end = i;
                    while let Some(&c @ (b' ' | b'\t' | b'\r')) = end.checked_sub(1).map(|e| &s[e])
                    {
                        extra -= u64::from(c != b' ');
                        end -= 1;
                    }
                    out.escape_extra = extra;
                    return Ok((out, end, i));
                }
                if i != n {
                    return Err(fail(JsonErrorKind::TrailingCharacters, i));
                }
                out.escape_extra = extra;
                return Ok((out, n, n));
            };
            let Some(&c) = s.get(i) else {
                return Err(fail(JsonErrorKind::UnexpectedEnd, n));
            };
            match (c, in_object) {
                (b',', true) => {
                    (i, target) = key::<LINE>(
                        s,
                        ws::<LINE>(s, i + 1, &mut extra),
                        stack.len() == 1,
                        &mut extra,
                    )?;
                    continue 'value;
                }
                (b',', false) => {
                    i = ws::<LINE>(s, i + 1, &mut extra);
                    continue 'value;
                }
                (b'}', true) | (b']', false) => {
                    stack.pop();
                    i += 1;
                }
                _ => return Err(fail(JsonErrorKind::UnexpectedByte, i)),
            }
        }
    }
}

#[inline(always)]
fn set(out: &mut LineScan, target: Target, m: Member) {
    match target {
        Target::Kind => out.kind = m,
        Target::TsMs => out.ts_ms = m,
        Target::None => {}
    }
}

/// Parses `"key" :` at `i`; returns the index of the value and, for
/// top-level keys, which member it names.
#[inline(always)]
fn key<const LINE: bool>(
    s: &[u8],
    i: usize,
    top: bool,
    extra: &mut u64,
) -> Result<(usize, Target), JsonError> {
    match s.get(i) {
        Some(b'"') => {}
        Some(_) => return Err(fail(JsonErrorKind::UnexpectedByte, i)),
        None => return Err(fail(JsonErrorKind::UnexpectedEnd, s.len())),
    }
    *extra += 1;
    let (end, escaped) = string(s, i + 1, extra)?;
    let target = if top {
        target_of(&s[i + 1..end - 1], escaped)
    } else {
        Target::None
    };
    let j = ws::<LINE>(s, end, extra);
    match s.get(j) {
        Some(b':') => Ok((ws::<LINE>(s, j + 1, extra), target)),
        Some(_) => Err(fail(JsonErrorKind::UnexpectedByte, j)),
        None => Err(fail(JsonErrorKind::UnexpectedEnd, s.len())),
    }
}

#[cfg(test)]
mod tests;
