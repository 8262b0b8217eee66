//! A first build that renders only what the state's windows can reach.
//!
//! A state whose own selection is a token window lets go of the messages
//! before its lowest reachable record once it has selected
//! ([`LiveReplay::let_go_before`]). A first build over a long log would
//! render them only to let them go: instead it looks at the log's end for
//! a bound — the `ts_ms` above which the records of its last bytes hold
//! half of them — and renders nothing ordered before it, keeping those
//! records' entries (their place in the order, their flags) as a let go
//! keeps them. The bound is then checked, not trusted: the messages kept
//! must hold more tokens than the window takes, so that no window can reach
//! past them (every window stops at the first message that does not fit,
//! from the newest back).
//! When they do not, the build is made again rendering everything.

use super::LiveReplay;
use super::held::message_tokens;
use crate::order::ts_key;
use crate::parse::LineParser;
use crate::replay::RecordMode;
use crate::replay::rendered::DROPPED;

/// How many bytes of the log's end are looked at per token of the window
/// (a token is about four bytes of text; a record's line also holds its
/// JSON): enough that the records there fill the window many times over.
const BYTES_PER_TOKEN: u64 = 16;

/// The least span looked at, and the least log (twice it) worth the look.
const LEAST_SPAN: u64 = 1 << 20;

impl LiveReplay {
    /// Where a first build of `bytes` (the log from its start) may stop
    /// rendering: `(key, 0)` for the `ts_ms` key from which the newest
    /// records of the log's last bytes hold half of those bytes. `None`
    /// unless the state's selection is a token window alone (no tail,
    /// filters or summaries; raw records) and the log is long enough for it
    /// to matter.
    pub(super) fn reach_bound(&self, bytes: &[u8]) -> Option<(u64, u64)> {
        let sel = &self.selection;
        let window = sel.max_tokens?;
        if sel.tail.is_some()
            || sel.has_filters()
            || sel.summaries
            || self.options.record != RecordMode::Raw
        {
            return None;
        }
        let span = usize::try_from(window.saturating_mul(BYTES_PER_TOKEN).max(LEAST_SPAN)).ok()?;
        let end = memchr::memrchr(b'\n', bytes)? + 1;
        if end / 2 <= span {
            return None;
        }
        let from = end - span;
        let from = from + memchr::memchr(b'\n', &bytes[from..end])? + 1;
        let mut parser = LineParser::new(self.options.max_depth);
        let mut seen: Vec<(u64, usize)> = Vec::new();
        let mut at = from;
        while at < end {
            let stop = at + memchr::memchr(b'\n', &bytes[at..end]).unwrap_or(end - at);
            if let Ok(r) = parser.parse(&bytes[at..stop], at as u64) {
                seen.push((ts_key(r.ts), stop + 1 - at));
            }
            at = stop + 1;
        }
        // The newest records holding half the span: a record that arrived
        // late, with a much older `ts_ms`, does not take the bound down.
        seen.sort_unstable_by_key(|&(key, _)| std::cmp::Reverse(key));
        let mut held = 0;
        let mut bound = None;
        for (key, len) in seen {
            bound = Some((key, 0));
            held += len;
            if held >= span / 2 {
                break;
            }
        }
        bound
    }

    /// After a first build that rendered nothing before `bound`: whether
    /// the messages kept hold more tokens than the window takes (counted
    /// from the newest back, as a window counts them, and kept for the
    /// first selection). If so, the state is as a let go at `bound` leaves
    /// it.
    pub(super) fn reached_within(&mut self, bound: (u64, u64)) -> bool {
        let Some(window) = self.selection.max_tokens else {
            return false;
        };
        let (format, sel) = (self.format, &self.selection);
        let mut text = String::new();
        let mut sum = 0u64;
        let mut fits = false;
        'segments: for si in (0..self.segments.len()).rev() {
            for ei in (0..self.segments[si].entries.len()).rev() {
                if self.segments[si].entries[ei].flags & DROPPED != 0 {
                    break 'segments;
                }
                let (t, fresh) =
                    message_tokens(&self.segments, (si, ei), format, sel, false, &mut text);
                if let Some(c) = fresh {
                    self.segments[si].entries[ei].tokens = c;
                }
                sum = sum.saturating_add(t);
                if sum > window {
                    fits = true;
                    break 'segments;
                }
            }
        }
        self.counted_with = Some(sel.tokenizer);
        if fits {
            self.let_go = true;
            self.let_go_to = Some(bound);
        }
        fits
    }
}
