//! Line splitting: `\n`-separated lines found with memchr, trimmed of ASCII
//! whitespace, and cut into chunks at line boundaries so rayon can parse
//! chunks in parallel.
//!
//! Lines keep their byte offset in the file; line numbers are counted per
//! chunk and made absolute afterwards, so no chunk waits for another.

use std::ops::Range;

/// The UTF-8 byte-order mark, dropped from the start of a log.
pub const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The whitespace trimmed from each line: the ASCII characters JavaScript's
/// `String.prototype.trim` removes (space, tab, LF, VT, FF, CR).
#[inline]
pub fn is_trim_byte(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

/// Trims [`is_trim_byte`] bytes from both ends; returns the trimmed range
/// relative to `line`.
#[inline]
pub fn trim(line: &[u8]) -> Range<usize> {
    let mut start = 0;
    let mut end = line.len();
    while start < end && is_trim_byte(line[start]) {
        start += 1;
    }
    while end > start && is_trim_byte(line[end - 1]) {
        end -= 1;
    }
    start..end
}

/// Where the log's content starts: after a UTF-8 BOM, if there is one.
pub fn content_start(data: &[u8]) -> usize {
    if data.starts_with(BOM) { BOM.len() } else { 0 }
}

/// Cuts `data[range]` into consecutive chunks of about `target` bytes, each
/// ending just after a `\n` (or at the end of the range), so no line is split
/// between chunks.
pub fn chunks(data: &[u8], range: Range<usize>, target: usize) -> Vec<Range<usize>> {
    let target = target.max(1);
    let mut out = Vec::with_capacity((range.len() / target).saturating_add(1));
    let mut start = range.start;
    while start < range.end {
        let want = start.saturating_add(target);
        let end = if want >= range.end {
            range.end
        } else {
            match memchr::memchr(b'\n', &data[want..range.end]) {
                Some(k) => want + k + 1,
                None => range.end,
            }
        };
        out.push(start..end);
        start = end;
    }
    out
}

/// Iterates over the lines of a chunk: each item is the line's range in the
/// chunk's underlying buffer, without its `\n`, and whether it ended with one.
pub struct Lines<'a> {
    data: &'a [u8],
    pos: usize,
    end: usize,
}

impl<'a> Lines<'a> {
    /// Lines of `data[range]`.
    pub fn new(data: &'a [u8], range: Range<usize>) -> Self {
        Lines {
            data,
            pos: range.start,
            end: range.end,
        }
    }
}

/// One physical line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// Its bytes' range in the buffer, without the `\n`.
    pub range: Range<usize>,
    /// Whether a `\n` ended it (false only for an unterminated last line).
    pub terminated: bool,
}

impl Iterator for Lines<'_> {
    type Item = Line;

    #[inline]
    fn next(&mut self) -> Option<Line> {
        if self.pos >= self.end {
            return None;
        }
        let start = self.pos;
        match memchr::memchr(b'\n', &self.data[start..self.end]) {
            Some(k) => {
                self.pos = start + k + 1;
                Some(Line {
                    range: start..start + k,
                    terminated: true,
                })
            }
            None => {
                self.pos = self.end;
                Some(Line {
                    range: start..self.end,
                    terminated: false,
                })
            }
        }
    }
}

/// How many bytes at the start of `s` (which starts at a line) are known
/// valid UTF-8: a window of up to 1 MiB of whole lines (or the first line,
/// if it is longer), cut short by the first invalid byte.
pub(crate) fn utf8_window(s: &[u8]) -> usize {
    const WINDOW: usize = 1 << 20;
    let to = if s.len() <= WINDOW {
        s.len()
    } else if let Some(k) = memchr::memrchr(b'\n', &s[..WINDOW]) {
        k + 1
    } else {
        memchr::memchr(b'\n', &s[WINDOW..]).map_or(s.len(), |k| WINDOW + k + 1)
    };
    utf8_valid_prefix(&s[..to])
}

/// Length of the longest valid UTF-8 prefix of `s` (a sequence cut by the
/// end of `s` counts as invalid: the window is then re-checked later).
fn utf8_valid_prefix(s: &[u8]) -> usize {
    if simdutf8::basic::from_utf8(s).is_ok() {
        s.len()
    } else {
        simdutf8::compat::from_utf8(s).map_or_else(|e| e.valid_up_to(), |_| s.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_match_a_naive_split() {
        let data = b"a\n\nbb\r\nccc";
        let got: Vec<&[u8]> = Lines::new(data, 0..data.len())
            .map(|l| &data[l.range])
            .collect();
        let naive: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
        assert_eq!(got, naive);
        let last = Lines::new(data, 0..data.len()).last().unwrap();
        assert!(!last.terminated);
    }

    #[test]
    fn chunks_end_at_newlines_and_cover_everything() {
        let data = b"one\ntwo\nthree\nfour";
        for target in 1..20 {
            let cs = chunks(data, 0..data.len(), target);
            assert_eq!(cs.first().unwrap().start, 0);
            assert_eq!(cs.last().unwrap().end, data.len());
            for w in cs.windows(2) {
                assert_eq!(w[0].end, w[1].start);
                assert_eq!(data[w[0].end - 1], b'\n');
            }
        }
    }

    #[test]
    fn trim_uses_javascripts_ascii_whitespace() {
        let s = b" \t\x0b\x0c\r{}\r\n";
        assert_eq!(&s[trim(s)], b"{}");
        assert_eq!(trim(b"   ").len(), 0);
        assert_eq!(&b"\x00{}"[trim(b"\x00{}")], b"\x00{}");
    }
}
