//! Choosing which records to replay: filters, the pending prompt, and
//! windows (the last N turns, a token budget, cache-stable trimming).
//!
//! A [`Selection`] is applied to the records after ordering, in this order:
//! 1. **Filters** keep records by session, kind and time.
//! 2. The **pending prompt** is found among the kept records: the latest
//!    `text_input` with no `text_output` after it in replay order.
//! 3. **Windows** keep the newest records: `tail` the last N, then
//!    `max_tokens` the newest whose message texts fit T tokens. With
//!    `trim_to` F the window is *cache-stable*: it starts where it started
//!    last time ([`WindowStart`]) as long as the records from there fit T;
//!    when they overflow, the start jumps forward so the window holds at most
//!    F × T, and stays there on later turns. The replayed prefix, and so a
//!    provider's prompt cache, survives many turns instead of shifting on
//!    every one.
//!
//! Tokens are counted only from the newest record backwards, until the
//! budget is spent: a window on a huge log costs no more than its size.

pub(crate) mod tokens;

use std::ops::Range;

use crate::order::ts_key;
use crate::parse::Record;
use crate::parse::json::{self, Member};
use crate::render;
use crate::select::tokens::Tokenizer;

/// Which records to replay. The default keeps everything.
///
/// ```
/// use wmreplay::{Format, ReplayOptions, Selection, Tokenizer, replay};
///
/// let log = b"{\"type\":\"text_input\",\"ts_ms\":1,\"session_id\":\"a\"}\n\
///             {\"type\":\"text_input\",\"ts_ms\":2,\"session_id\":\"b\"}\n\
///             {\"type\":\"text_output\",\"ts_ms\":3,\"session_id\":\"a\"}\n";
/// // One session's records, within a token budget (the newest kept).
/// let mut sel = Selection::default();
/// sel.session = Some("a".into());
/// sel.max_tokens = Some(10_000);
/// sel.tokenizer = Tokenizer::Bytes;
/// sel.validate()?;
///
/// let mut replayed = replay(log, &ReplayOptions::default());
/// let report = replayed.select(&sel, None);
/// assert_eq!((report.matched, report.selected), (2, 2));
/// assert!(report.tokens.is_some_and(|t| t > 0));
/// // The window's start, to pass back next turn so the prefix stays put.
/// let start = report.window_start;
/// assert!(start.is_some());
/// # let _ = Format::OpenAi;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Selection {
    /// Keep records whose `session_id` is this string, and records without a
    /// `session_id` (absent or `null`). A `session_id` of another type never
    /// matches.
    pub session: Option<String>,
    /// Keep records whose `type` is one of these.
    pub kinds: Option<Vec<String>>,
    /// Keep records with `ts_ms` at least this.
    pub since: Option<f64>,
    /// Keep records with `ts_ms` at most this.
    pub until: Option<f64>,
    /// Keep only the last N records (after the filters).
    pub tail: Option<usize>,
    /// Keep the newest records whose message texts fit this many tokens.
    pub max_tokens: Option<u64>,
    /// How tokens are counted.
    pub tokenizer: Tokenizer,
    /// Cache-stable trimming: on overflow, shrink the window to this share
    /// of `max_tokens` (0 < F ≤ 1) and keep its start until the next one.
    pub trim_to: Option<f64>,
    /// Render the pending `text_input` with a first line
    /// `PENDING_USER_INPUT`.
    pub mark_pending: bool,
}

impl Selection {
    /// Whether any filter is set.
    pub fn has_filters(&self) -> bool {
        self.session.is_some()
            || self.kinds.is_some()
            || self.since.is_some()
            || self.until.is_some()
    }

    /// Whether any window is set.
    pub fn has_window(&self) -> bool {
        self.tail.is_some() || self.max_tokens.is_some()
    }

    /// Whether the selection keeps every record as it is.
    pub fn is_everything(&self) -> bool {
        !self.has_filters() && !self.has_window() && !self.mark_pending
    }

    /// Checks the settings: `trim_to` needs `max_tokens` and lies in (0, 1].
    pub fn validate(&self) -> Result<(), String> {
        if let Some(f) = self.trim_to {
            if self.max_tokens.is_none() {
                return Err("--trim-to needs --max-tokens".into());
            }
            if !(f > 0.0 && f <= 1.0) {
                return Err(format!("--trim-to must be in (0, 1], not {f}"));
            }
        }
        for (name, v) in [("--since", self.since), ("--until", self.until)] {
            if let Some(v) = v
                && !v.is_finite()
            {
                return Err(format!("{name} must be a finite number of ms, not {v}"));
            }
        }
        if let (Some(a), Some(b)) = (self.since, self.until)
            && a > b
        {
            return Err(format!("--since {a} is after --until {b}"));
        }
        Ok(())
    }

    /// A stable description of what decides a window's start (filters,
    /// budget, share, tokenizer): the key a remembered [`WindowStart`] is
    /// stored under.
    pub fn window_key(&self) -> String {
        format!(
            "session={:?};kinds={:?};since={:?};until={:?};tail={:?};max_tokens={:?};trim_to={:?};tokenizer={}",
            self.session,
            self.kinds,
            self.since,
            self.until,
            self.tail,
            self.max_tokens,
            self.trim_to,
            self.tokenizer.name()
        )
    }

    /// Whether `r` passes the filters.
    pub fn matches(&self, r: &Record, log: &[u8]) -> bool {
        if let Some(since) = self.since
            && r.ts < since
        {
            return false;
        }
        if let Some(until) = self.until
            && r.ts > until
        {
            return false;
        }
        if let Some(kinds) = &self.kinds
            && !kinds.iter().any(|k| r.kind_is(log, k))
        {
            return false;
        }
        if let Some(session) = &self.session {
            let line = r.line(log);
            match json::top_level_member(line, b"session_id") {
                Member::Absent => {}
                Member::String { start, len } => {
                    let raw = &line[start as usize..(start + len) as usize];
                    if !json::string_equals(raw, session) {
                        return false;
                    }
                }
                Member::Other => {
                    // `null` counts as no session; other types never match.
                    if !null_member(line) {
                        return false;
                    }
                }
                Member::Number { .. } => return false,
            }
        }
        true
    }
}

/// Whether the last top-level `session_id` of `line` is `null`.
fn null_member(line: &[u8]) -> bool {
    json::top_level_value(line, b"session_id").is_some_and(|v| v == b"null")
}

/// Where a window starts: its first record's sort key and file offset, which
/// find it again among later appends (late records included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowStart {
    /// `ts_key` of the record's `ts_ms`.
    pub key: u64,
    /// The record's byte offset in the log.
    pub offset: u64,
}

/// The unanswered prompt: the latest `text_input` with no later
/// `text_output`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pending {
    /// 1-based line number in the log.
    pub line: u64,
    /// Byte offset of the line.
    pub offset: u64,
    /// Its `ts_ms`.
    pub ts_ms: f64,
}

/// What a selection did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct SelectReport {
    /// Records that passed the filters.
    pub matched: u64,
    /// Records in the window (what is replayed).
    pub selected: u64,
    /// Tokens of the window's message texts, when `max_tokens` is set.
    pub tokens: Option<u64>,
    /// Where the window starts (with `max_tokens`).
    pub window_start: Option<WindowStart>,
    /// Whether the window's start moved forward because the budget
    /// overflowed (or was set for the first time on an overflowing log).
    pub trimmed: bool,
    /// The pending prompt, if any.
    pub pending: Option<Pending>,
}

impl SelectReport {
    /// The report as compact JSON members (no braces), for stats output.
    pub fn json_members(&self) -> String {
        let pending = match self.pending {
            Some(p) => format!(
                "{{\"line\":{},\"offset\":{},\"ts_ms\":{}}}",
                p.line,
                p.offset,
                // JSON has no Infinity (a `ts_ms` of 1e400 is one): null.
                if p.ts_ms.is_finite() {
                    String::from_utf8_lossy(crate::escape::JsNumber::new(p.ts_ms).as_bytes())
                        .into_owned()
                } else {
                    "null".into()
                }
            ),
            None => "null".into(),
        };
        let tokens = self.tokens.map_or("null".into(), |t| t.to_string());
        let start = match self.window_start {
            Some(s) => format!("{{\"offset\":{}}}", s.offset),
            None => "null".into(),
        };
        format!(
            "\"matched_records\":{},\"selected_records\":{},\"window_tokens\":{tokens},\"window_start\":{start},\"window_trimmed\":{},\"pending_input\":{pending}",
            self.matched, self.selected, self.trimmed
        )
    }
}

/// The latest `text_input` in `records` (replay order) with no
/// `text_output` after it: its index.
pub fn pending_index(records: &[Record], log: &[u8]) -> Option<usize> {
    for (i, r) in records.iter().enumerate().rev() {
        if r.is_output() {
            return None;
        }
        if r.kind_is(log, "text_input") {
            return Some(i);
        }
    }
    None
}

/// The window over `n` items in replay order: `key_of(i)` is item i's
/// (`ts_key`, offset) and `tokens_of(i)` its message's tokens (called only
/// for items from the newest back, each at most once). `prev` is the start
/// remembered from the last turn (used with `trim_to`). Returns the range
/// kept, its tokens (with `max_tokens`) and whether the start jumped.
///
/// `least_tokens_of(i)` is a cheap lower bound of item i's tokens: an item
/// whose bound alone overflows what is left of the budget ends the window
/// without being counted, so a window's cost depends on its budget, not on
/// the size of the records it leaves out.
pub fn window(
    n: usize,
    sel: &Selection,
    prev: Option<WindowStart>,
    key_of: impl Fn(usize) -> (u64, u64),
    least_tokens_of: impl Fn(usize) -> u64,
    mut tokens_of: impl FnMut(usize) -> u64,
) -> (Range<usize>, Option<u64>, bool) {
    let lo = n - sel.tail.unwrap_or(n).min(n);
    let Some(budget) = sel.max_tokens else {
        return (lo..n, None, false);
    };
    // Tokens of items from the newest back, counted once each.
    let mut counted: Vec<u64> = Vec::new();
    let mut tokens = |i: usize, counted: &mut Vec<u64>| -> u64 {
        let back = n - 1 - i;
        while counted.len() <= back {
            let j = n - 1 - counted.len();
            counted.push(tokens_of(j));
        }
        counted[back]
    };
    // The newest items fitting `limit`, not before `from`.
    let mut fit = |limit: u64, from: usize, counted: &mut Vec<u64>| -> (usize, u64) {
        let mut start = n;
        let mut sum = 0u64;
        while start > from {
            let back = n - start;
            if back >= counted.len() && sum + least_tokens_of(start - 1) > limit {
                break;
            }
            let t = tokens(start - 1, counted);
            if sum + t > limit {
                break;
            }
            sum += t;
            start -= 1;
        }
        (start, sum)
    };
    match sel.trim_to {
        None => {
            let (start, sum) = fit(budget, lo, &mut counted);
            (start..n, Some(sum), false)
        }
        Some(share) => {
            // The remembered start, if its record is still there (a log
            // replaced since has no such record: start afresh).
            let from = prev
                .and_then(|p| {
                    let target = (p.key, p.offset);
                    let s = partition(n, &key_of, target);
                    (s < n && key_of(s) == target).then_some(s.max(lo))
                })
                .unwrap_or(lo);
            let (start, sum) = fit(budget, from, &mut counted);
            if start == from {
                return (from..n, Some(sum), false);
            }
            let limit = (budget as f64 * share).floor() as u64;
            let (start, sum) = fit(limit, lo, &mut counted);
            (start..n, Some(sum), true)
        }
    }
}

/// The first index whose key is at least `target`.
fn partition(n: usize, key_of: &impl Fn(usize) -> (u64, u64), target: (u64, u64)) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if key_of(mid) < target {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Applies `sel` to `records` (in replay order) in place. `origin(offset)`
/// gives the log offset a record's `offset` stands for (itself, or in
/// [`crate::RecordMode::Js`] the source line's offset), and `line_of(origin)`
/// that offset's 1-based line number (for the pending prompt); `prev` is the
/// window start remembered from the last turn. Reported offsets are log
/// offsets.
pub fn apply(
    records: &mut Vec<Record>,
    log: &[u8],
    sel: &Selection,
    prev: Option<WindowStart>,
    origin: impl Fn(u64) -> u64,
    line_of: impl Fn(u64) -> u64,
) -> SelectReport {
    use rayon::prelude::*;
    if sel.has_filters() {
        let kept: Vec<Record> = if records.len() > 65_536 {
            records
                .par_iter()
                .filter(|r| sel.matches(r, log))
                .copied()
                .collect()
        } else {
            records
                .iter()
                .filter(|r| sel.matches(r, log))
                .copied()
                .collect()
        };
        *records = kept;
    }
    let mut report = SelectReport {
        matched: records.len() as u64,
        ..SelectReport::default()
    };
    let pending = pending_index(records, log);
    if let Some(i) = pending {
        let r = &records[i];
        report.pending = Some(Pending {
            line: line_of(origin(r.offset)),
            offset: origin(r.offset),
            ts_ms: r.ts,
        });
        if sel.mark_pending {
            records[i].flags |= Record::PENDING;
        }
    }
    let mut text = String::new();
    let (range, tokens, trimmed) = window(
        records.len(),
        sel,
        prev,
        |i| (ts_key(records[i].ts), origin(records[i].offset)),
        // The message text holds the whole line.
        |i| sel.tokenizer.least_tokens(records[i].len as u64),
        |i| {
            text.clear();
            render::message_text(&records[i], log, &mut text);
            sel.tokenizer.count(&text)
        },
    );
    if range.start > 0 || range.end < records.len() {
        records.drain(range.end..);
        records.drain(..range.start);
    }
    report.selected = records.len() as u64;
    report.tokens = tokens;
    report.trimmed = trimmed;
    if sel.max_tokens.is_some() {
        report.window_start = records.first().map(|r| WindowStart {
            key: ts_key(r.ts),
            offset: origin(r.offset),
        });
        if report.window_start.is_none() && !trimmed {
            report.window_start = prev;
        }
    }
    report
}

/// The 1-based line number of byte `offset` of `log`, counting newlines from
/// whichever end is nearer: `newlines` is the total count of `\n` in `log`.
pub fn line_number(log: &[u8], offset: u64, newlines: u64) -> u64 {
    let offset = (offset as usize).min(log.len());
    if offset <= log.len() / 2 {
        count_newlines(&log[..offset]) + 1
    } else {
        // Saturating: a mapped log rewritten under us may have more.
        newlines.saturating_sub(count_newlines(&log[offset..])) + 1
    }
}

/// `\n` bytes in `s`.
pub fn count_newlines(s: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', s).count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(tail: Option<usize>, max: Option<u64>, trim: Option<f64>) -> Selection {
        Selection {
            tail,
            max_tokens: max,
            trim_to: trim,
            tokenizer: Tokenizer::Bytes,
            ..Selection::default()
        }
    }

    /// Items with the given token counts; keys are their indices.
    fn win(
        tokens: &[u64],
        s: &Selection,
        prev: Option<WindowStart>,
    ) -> (Range<usize>, Option<u64>, bool) {
        window(
            tokens.len(),
            s,
            prev,
            |i| (i as u64, i as u64),
            |_| 0,
            |i| tokens[i],
        )
    }

    #[test]
    fn tail_keeps_the_last_n() {
        let t = [1; 10];
        assert_eq!(win(&t, &sel(Some(3), None, None), None).0, 7..10);
        assert_eq!(win(&t, &sel(Some(0), None, None), None).0, 10..10);
        assert_eq!(win(&t, &sel(Some(99), None, None), None).0, 0..10);
    }

    #[test]
    fn max_tokens_keeps_the_newest_that_fit() {
        let t = [5, 5, 5, 5];
        assert_eq!(
            win(&t, &sel(None, Some(12), None), None),
            (2..4, Some(10), false)
        );
        // A budget smaller than the newest message keeps nothing.
        assert_eq!(
            win(&t, &sel(None, Some(4), None), None),
            (4..4, Some(0), false)
        );
        // Contiguous: an old small message does not sneak in past a big one.
        let t = [1, 100, 5];
        assert_eq!(win(&t, &sel(None, Some(50), None), None).0, 2..3);
    }

    #[test]
    fn only_the_tail_is_tokenized() {
        let mut calls = 0;
        let n = 1_000_000;
        let (r, _, _) = window(
            n,
            &sel(None, Some(100), None),
            None,
            |i| (i as u64, i as u64),
            |_| 0,
            |_| {
                calls += 1;
                10
            },
        );
        assert_eq!(r, n - 10..n);
        assert_eq!(calls, 11);
    }

    /// A 40 MB newest record under a 100-token budget took 42 s and 2 GB
    /// to count: now a record whose lower bound overflows the budget ends
    /// the window uncounted, with the same answer.
    #[test]
    fn a_record_whose_bound_overflows_the_budget_is_not_counted() {
        let mut calls = 0;
        let t = [10u64, 10, 1_000_000, 10, 10];
        for budget in [25, 100, 2_000_000] {
            let exact = win(&t, &sel(None, Some(budget), None), None);
            let bounded = window(
                t.len(),
                &sel(None, Some(budget), None),
                None,
                |i| (i as u64, i as u64),
                |i| t[i] / 2,
                |i| {
                    calls += 1;
                    t[i]
                },
            );
            assert_eq!(bounded, exact, "budget {budget}");
        }
        // Budget 25: counts 10, 10, then the big one is refused by its
        // bound; budget 100: the same; 2,000,000: counted, all five.
        assert_eq!(calls, 2 + 2 + 5);
    }

    #[test]
    fn trimming_keeps_its_start_until_overflow() {
        let s = sel(None, Some(100), Some(0.5));
        let mut tokens = vec![10u64; 8]; // 80: fits
        let (r, _, trimmed) = win(&tokens, &s, None);
        assert_eq!((r.clone(), trimmed), (0..8, false));
        let mut prev = Some(WindowStart { key: 0, offset: 0 });
        // Appends up to the budget keep the start.
        tokens.extend([10, 10]); // 100
        let (r, _, trimmed) = win(&tokens, &s, prev);
        assert_eq!((r, trimmed), (0..10, false));
        // One more overflows: the window shrinks to 50 tokens.
        tokens.push(10);
        let (r, t, trimmed) = win(&tokens, &s, prev);
        assert_eq!((r.clone(), t, trimmed), (6..11, Some(50), true));
        prev = Some(WindowStart {
            key: r.start as u64,
            offset: r.start as u64,
        });
        // And stays there while later appends fit.
        for k in 0..5 {
            tokens.push(10);
            let (r, _, trimmed) = win(&tokens, &s, prev);
            assert_eq!((r.start, trimmed), (6, false), "append {k}");
        }
    }
}
