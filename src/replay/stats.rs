//! What a replay counts and locates: [`ReplayStats`] and its first
//! [`Skip`]s, as JSON for the CLI and the server.

use crate::parse::SkipReason;

/// A skipped line: where it is and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Skip {
    /// 1-based line number in the file (blank lines count).
    pub line: u64,
    /// Byte offset of the start of the line in the file.
    pub offset: u64,
    /// Why it was skipped.
    pub reason: SkipReason,
}

/// What a replay saw (contract item 10).
///
/// ```
/// use wmreplay::{ReplayOptions, SkipReason, replay};
///
/// let log = b"{\"type\":\"a\",\"ts_ms\":1}\n\
///             {\"type\":\"a\",\"ts_ms\":2,}\n\
///             {\"type\":\"a\"}\n";
/// let stats = replay(log, &ReplayOptions::default()).stats().clone();
/// assert_eq!(stats.total_lines, 3);
/// assert_eq!(
///     stats.total_lines,
///     stats.parsed_entries + stats.skipped_invalid_json + stats.skipped_invalid_shape
/// );
/// // Each skip says where and why.
/// assert_eq!(stats.skips[0].line, 2);
/// assert!(matches!(stats.skips[0].reason, SkipReason::InvalidJson { .. }));
/// assert_eq!(stats.skips[1].line, 3);
/// assert_eq!(stats.skips[1].reason, SkipReason::MissingTsMs);
/// println!("line {}: {}", stats.skips[1].line, stats.skips[1].reason);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ReplayStats {
    /// Non-empty lines.
    pub total_lines: u64,
    /// Lines replayed as messages.
    pub parsed_entries: u64,
    /// Lines that are not one valid JSON value.
    pub skipped_invalid_json: u64,
    /// Valid JSON without a string `type` and a number `ts_ms` in an object.
    pub skipped_invalid_shape: u64,
    /// Bytes of the log.
    pub bytes: u64,
    /// Whether the last line had no `\n` (possibly a write in progress).
    pub unterminated_tail: bool,
    /// Whether the records were already in `ts_ms` order in the file.
    pub already_ordered: bool,
    /// The first skipped lines, in file order (at most
    /// [`ReplayOptions::max_skips`](crate::ReplayOptions::max_skips)).
    pub skips: Vec<Skip>,
}

impl ReplayStats {
    /// The stats as one compact JSON object; `skips` lists at most
    /// `max_skips` of the recorded skips.
    pub fn to_json(&self, max_skips: usize) -> String {
        use std::fmt::Write as _;
        let mut s = format!(
            "{{\"total_lines\":{},\"parsed_entries\":{},\"skipped_invalid_json\":{},\"skipped_invalid_shape\":{},\"bytes\":{},\"unterminated_tail\":{},\"already_ordered\":{}",
            self.total_lines,
            self.parsed_entries,
            self.skipped_invalid_json,
            self.skipped_invalid_shape,
            self.bytes,
            self.unterminated_tail,
            self.already_ordered
        );
        if max_skips > 0 {
            s.push_str(",\"skips\":[");
            for (i, k) in self.skips.iter().take(max_skips).enumerate() {
                if i > 0 {
                    s.push(',');
                }
                let _ = write!(
                    s,
                    "{{\"line\":{},\"offset\":{},\"category\":\"{}\",\"reason\":{}}}",
                    k.line,
                    k.offset,
                    k.reason.category(),
                    json_string(&k.reason.to_string())
                );
            }
            s.push(']');
        }
        s.push('}');
        s
    }
}

impl ReplayStats {
    /// Counts a skipped line and records where it is, while fewer than
    /// `max_skips` are recorded.
    pub(crate) fn skip(&mut self, reason: SkipReason, line: u64, offset: u64, max_skips: usize) {
        if reason.is_invalid_json() {
            self.skipped_invalid_json += 1;
        } else {
            self.skipped_invalid_shape += 1;
        }
        if self.skips.len() < max_skips {
            self.skips.push(Skip {
                line,
                offset,
                reason,
            });
        }
    }
}

fn json_string(s: &str) -> String {
    let mut out = vec![0u8; s.len() + crate::escape::escaped_extra(s.as_bytes())];
    crate::escape::write_escaped(s.as_bytes(), &mut out);
    format!("\"{}\"", String::from_utf8_lossy(&out))
}
