//! Finding members of a line known to be valid JSON: the top-level `type`
//! and `ts_ms`, or any top-level member by name, without building a tree.

use super::*;

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
