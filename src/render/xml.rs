//! The XML injection format: a memory document an agent prepends
//! to its prompt.
//!
//! ```text
//! <memory_context>
//! <record kind="text_input" ts_ms="1700000000000">{"type":"text_input",…}</record>
//! <record kind="wm_event" ts_ms="1700000000001" pending="true">…</record>
//! </memory_context>
//! ```
//!
//! A session delta is a `<memory_delta from="…" to="…">` document
//! of the same elements. Each element's text is the record's line as written
//! (or as re-serialised by the record mode). The output is well-formed XML
//! 1.0 for any log: `&`, `<` and `>` become entities (and `"` in the
//! attribute), a raw carriage
//! return (legal between JSON tokens) becomes `&#13;` so a parser keeps it,
//! and the two characters XML forbids that valid JSON text can hold raw,
//! U+FFFE and U+FFFF (only ever inside JSON strings), are written as the JSON
//! escapes `\ufffe` and `\uffff`, which keep the JSON value the same. The
//! `kind` attribute is the `type` as `JSON.stringify` escapes it (control
//! characters as `\u00xx`), then XML-escaped.

use crate::escape::{self, JsNumber, put};
use crate::parse::Record;

const OPEN: &[u8] = b"<record kind=\"";
const TS: &[u8] = b"\" ts_ms=\"";
const PENDING: &[u8] = b"\" pending=\"true";
const CLOSE_TAG: &[u8] = b"\">";
const END: &[u8] = b"</record>\n";

/// Extra bytes [`write_text`] adds to `s` (`attr`: for an attribute value,
/// where `"` is escaped too).
pub fn text_extra(s: &[u8], attr: bool) -> usize {
    let mut extra = 0;
    for (k, &b) in s.iter().enumerate() {
        extra += match b {
            b'&' | b'\r' => 4,
            b'<' | b'>' => 3,
            b'"' if attr => 5,
            0xEF if is_nonchar(s, k) => 3,
            _ => 0,
        };
    }
    extra
}

/// Whether `s[k..]` starts with U+FFFE or U+FFFF in UTF-8.
#[inline]
fn is_nonchar(s: &[u8], k: usize) -> bool {
    s.len() >= k + 3 && s[k + 1] == 0xBF && (s[k + 2] == 0xBE || s[k + 2] == 0xBF)
}

/// Writes `s` (UTF-8) escaped for XML text, or with `attr` for a
/// double-quoted attribute value; `out` holds `s.len() + text_extra(s, attr)`
/// bytes (less only if `s` changed since it was measured: the output is then
/// cut, never a panic).
pub fn write_text(s: &[u8], out: &mut [u8], attr: bool) -> usize {
    let mut w = 0;
    let mut i = 0;
    while i < s.len() {
        let b = s[i];
        let esc: &[u8] = match b {
            b'&' => b"&amp;",
            b'<' => b"&lt;",
            b'>' => b"&gt;",
            b'"' if attr => b"&quot;",
            b'\r' => b"&#13;",
            0xEF if is_nonchar(s, i) => {
                i += 3;
                w = put(
                    out,
                    w,
                    if s[i - 1] == 0xBE {
                        b"\\ufffe"
                    } else {
                        b"\\uffff"
                    },
                );
                continue;
            }
            _ => {
                // A run of bytes that need nothing.
                let run = s[i..]
                    .iter()
                    .position(|&c| {
                        matches!(c, b'&' | b'<' | b'>' | b'\r' | 0xEF) || (attr && c == b'"')
                    })
                    .unwrap_or(s.len() - i)
                    .max(1);
                w = put(out, w, &s[i..i + run]);
                i += run;
                continue;
            }
        };
        w = put(out, w, esc);
        i += 1;
    }
    w
}

/// The `type` as `JSON.stringify` escapes it, in `buf` (an escaped kind is
/// decoded and re-escaped; a plain one is used as it is).
fn kind_json<'a>(r: &Record, log: &'a [u8], buf: &'a mut Vec<u8>) -> &'a [u8] {
    let raw = r.kind_raw(log);
    if !r.kind_escaped() {
        return raw;
    }
    buf.clear();
    buf.resize(escape::transcoded_len(raw), 0);
    let n = escape::write_transcoded(raw, buf);
    &buf[..n]
}

/// Bytes of one record's element, its newline included.
pub(crate) fn element_len(r: &Record, log: &[u8]) -> usize {
    let mut buf = Vec::new();
    let kind = kind_json(r, log, &mut buf);
    let line = r.line(log);
    OPEN.len()
        + kind.len()
        + text_extra(kind, true)
        + TS.len()
        + JsNumber::len_of(r.ts)
        + if r.is_pending() { PENDING.len() } else { 0 }
        + CLOSE_TAG.len()
        + line.len()
        + text_extra(line, false)
        + END.len()
}

/// Writes one record's element; returns bytes written.
pub(crate) fn write_element(r: &Record, log: &[u8], out: &mut [u8]) -> usize {
    let mut buf = Vec::new();
    let kind = kind_json(r, log, &mut buf);
    let mut w = put(out, 0, OPEN);
    w += write_text(kind, &mut out[w..], true);
    w = put(out, w, TS);
    w = put(out, w, JsNumber::new(r.ts).as_bytes());
    if r.is_pending() {
        w = put(out, w, PENDING);
    }
    w = put(out, w, CLOSE_TAG);
    w += write_text(r.line(log), &mut out[w..], false);
    put(out, w, END)
}

/// Which document the elements go in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Document {
    /// `<memory_context>`: the whole (selected) memory.
    Context,
    /// `<memory_delta from="A" to="B">`: the records appended
    /// between byte offsets `from` and `to` of the log.
    Delta {
        /// Offset the delta starts at.
        from: u64,
        /// Offset it ends at (the log's committed length).
        to: u64,
    },
}

impl Document {
    /// The opening tag and its newline.
    pub fn head(self) -> String {
        match self {
            Document::Context => "<memory_context>\n".into(),
            Document::Delta { from, to } => format!("<memory_delta from=\"{from}\" to=\"{to}\">\n"),
        }
    }

    /// The closing tag and its newline.
    pub fn tail(self) -> &'static str {
        match self {
            Document::Context => "</memory_context>\n",
            Document::Delta { .. } => "</memory_delta>\n",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn esc(s: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; s.len() + text_extra(s, false)];
        let n = write_text(s, &mut out, false);
        assert_eq!(n, out.len());
        out
    }

    fn attr(s: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; s.len() + text_extra(s, true)];
        let n = write_text(s, &mut out, true);
        assert_eq!(n, out.len());
        out
    }

    #[test]
    fn escapes_markup_quotes_returns_and_nonchars() {
        assert_eq!(esc(b"a&b<c>d\"e\rf"), b"a&amp;b&lt;c&gt;d\"e&#13;f");
        assert_eq!(attr(b"a&b<c>d\"e\rf"), b"a&amp;b&lt;c&gt;d&quot;e&#13;f");
        assert_eq!(
            esc("x\u{FFFE}y\u{FFFF}z\u{FFFD}".as_bytes()),
            "x\\ufffey\\uffffz\u{FFFD}".as_bytes()
        );
        assert_eq!(esc("plain é".as_bytes()), "plain é".as_bytes());
        assert_eq!(esc(b""), b"");
        // A lone 0xEF (not UTF-8 of a nonchar) passes through.
        assert_eq!(esc(&[0xEF, 0xBF]), vec![0xEF, 0xBF]);
    }
}
