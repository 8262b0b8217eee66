//! A chunk's lines in [`RecordMode::Js`](super::RecordMode): re-serialised as Node.js would,
//! then classified from the re-serialised bytes.

use std::ops::Range;

use super::chunk_result::ChunkResult;
use crate::input::lines::{self, Lines};
use crate::parse::js::JsStringifier;
use crate::parse::{LineParser, SkipReason};

/// The chunk loop in [`RecordMode::Js`](super::RecordMode): each line re-serialised as Node.js
/// would (blank, invalid and valid decided as Node decides them), then
/// classified by the line parser from the re-serialised bytes.
pub(super) fn parse_chunk_js(
    log: &[u8],
    range: Range<usize>,
    parser: &mut LineParser,
    js: &mut JsStringifier,
    max_skips: usize,
    out: &mut ChunkResult,
) {
    let ChunkResult {
        records,
        stats,
        lines,
        arena,
        ..
    } = out;
    let arena = arena.get_or_insert_with(Vec::new);
    let mut line_no = 0u64;
    for line in Lines::new(log, range) {
        line_no += 1;
        stats.unterminated_tail = !line.terminated;
        let raw = &log[line.range.clone()];
        let header = arena.len();
        // The offset raw mode gives the line (past ASCII whitespace), so a
        // record has the same offset in both modes.
        let origin = line.range.start + lines::trim(raw).start;
        arena.extend_from_slice(&(origin as u64).to_le_bytes());
        let at = arena.len();
        let outcome = match js.stringify(raw, arena) {
            Ok(false) => {
                arena.truncate(header);
                continue;
            }
            Err(e) => Err(SkipReason::InvalidJson {
                kind: e.kind,
                column: e.column as u32,
            }),
            Ok(true) => {
                let ts_if_null = js.top_level_number(b"ts_ms").filter(|x| x.is_infinite());
                parser.parse_canonical(&arena[at..], at as u64, ts_if_null)
            }
        };
        stats.total_lines += 1;
        match outcome {
            Ok(r) => records.push(r),
            Err(reason) => {
                arena.truncate(header);
                stats.skip(reason, line_no - 1, line.range.start as u64, max_skips);
            }
        }
    }
    stats.parsed_entries = records.len() as u64;
    *lines = line_no;
}
