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
    /// of `max_tokens` (0 < F ≤ 1), or of `tail`'s count, and keep its start
    /// until the next overflow.
    pub trim_to: Option<f64>,
    /// Start a window (`tail` or `max_tokens`) on a record of this kind:
    /// when the window cuts the log, its start moves forward to the first
    /// such record inside it (usually `text_input`, so that the window never
    /// opens with an answer whose question was cut off). A window holding
    /// no such record is left as it is.
    pub start_on: Option<String>,
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

    /// Whether the window's start is reported (and can be remembered):
    /// token windows and cache-stable windows.
    pub fn reports_start(&self) -> bool {
        self.max_tokens.is_some() || (self.trim_to.is_some() && self.tail.is_some())
    }

    /// Checks the settings: `trim_to` needs a window and lies in (0, 1];
    /// `start_on` needs a window.
    pub fn validate(&self) -> Result<(), String> {
        if self.start_on.is_some() && !self.has_window() {
            return Err("--start-on needs --tail or --max-tokens".into());
        }
        if self.start_on.as_deref() == Some("") {
            return Err("--start-on needs a record type".into());
        }
        if let Some(f) = self.trim_to {
            if !self.has_window() {
                return Err("--trim-to needs --max-tokens or --tail".into());
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
            "session={:?};kinds={:?};since={:?};until={:?};tail={:?};max_tokens={:?};trim_to={:?};tokenizer={}{}",
            self.session,
            self.kinds,
            self.since,
            self.until,
            self.tail,
            self.max_tokens,
            self.trim_to,
            self.tokenizer.name(),
            // Absent from keys written before the setting existed.
            self.start_on
                .as_ref()
                .map_or(String::new(), |k| format!(";start_on={k:?}"))
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
/// the size of the records it leaves out. `starts_turn(i)` says whether item
/// i is of the kind [`Selection::start_on`] names.
pub fn window(
    n: usize,
    sel: &Selection,
    prev: Option<WindowStart>,
    key_of: impl Fn(usize) -> (u64, u64),
    least_tokens_of: impl Fn(usize) -> u64,
    mut tokens_of: impl FnMut(usize) -> u64,
    starts_turn: impl Fn(usize) -> bool,
) -> (Range<usize>, Option<u64>, bool) {
    // The remembered start, if its record is still there (a log replaced
    // since has no such record: start afresh).
    let remembered = || {
        prev.and_then(|p| {
            let target = (p.key, p.offset);
            let s = partition(n, &key_of, target);
            (s < n && key_of(s) == target).then_some(s)
        })
    };
    // `start_on`: the first item of that kind at or after `start`, when the
    // window cuts the log at all.
    let turn_start = |start: usize| -> usize {
        if sel.start_on.is_none() || start == 0 {
            return start;
        }
        (start..n).find(|&i| starts_turn(i)).unwrap_or(start)
    };
    // `tail`, cache-stable with `trim_to`: the remembered start while the
    // window holds at most N items, else a jump to hold F × N.
    let (lo, tail_trimmed) = match (sel.tail, sel.trim_to) {
        (None, _) => (0, false),
        (Some(t), None) => (turn_start(n - t.min(n)), false),
        (Some(t), Some(share)) => match remembered() {
            Some(p) if n - p <= t => (p, false),
            Some(_) => {
                let keep = ((t as f64 * share).floor() as usize).clamp(1, t.max(1));
                (turn_start(n - keep.min(n)), true)
            }
            None => (turn_start(n - t.min(n)), false),
        },
    };
    let Some(budget) = sel.max_tokens else {
        return (lo..n, None, tail_trimmed);
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
    // Moves a fitted window's start to a turn's start, less the tokens of
    // the items it leaves (all counted: they were inside).
    let on_turn = |(start, sum): (usize, u64), counted: &mut Vec<u64>| -> (usize, u64) {
        let moved = turn_start(start);
        let less: u64 = (start..moved).map(|i| counted[n - 1 - i]).sum();
        (moved, sum - less)
    };
    match sel.trim_to {
        None => {
            let fitted = fit(budget, lo, &mut counted);
            let (start, sum) = on_turn(fitted, &mut counted);
            (start..n, Some(sum), tail_trimmed)
        }
        Some(share) => {
            let from = remembered().map_or(lo, |s| s.max(lo));
            let (start, sum) = fit(budget, from, &mut counted);
            if start == from {
                return (from..n, Some(sum), tail_trimmed);
            }
            let limit = (budget as f64 * share).floor() as u64;
            let fitted = fit(limit, lo, &mut counted);
            let (start, sum) = on_turn(fitted, &mut counted);
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
        |i| {
            sel.start_on
                .as_deref()
                .is_some_and(|k| records[i].kind_is(log, k))
        },
    );
    if range.start > 0 || range.end < records.len() {
        records.drain(range.end..);
        records.drain(..range.start);
    }
    report.selected = records.len() as u64;
    report.tokens = tokens;
    report.trimmed = trimmed;
    if sel.reports_start() {
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
            |_| false,
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
            |_| false,
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
                |_| false,
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

    /// Items with token counts; `turns` marks the items that start a turn.
    fn win_turns(
        tokens: &[u64],
        turns: &[usize],
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
            |i| turns.contains(&i),
        )
    }

    fn at(i: usize) -> Option<WindowStart> {
        Some(WindowStart {
            key: i as u64,
            offset: i as u64,
        })
    }

    #[test]
    fn start_on_moves_a_cutting_window_to_the_next_turn() {
        let t = [10u64; 10];
        let mut s = sel(Some(6), None, None);
        s.start_on = Some("text_input".into());
        // The last 6 start at 4, an answer; the next question is at 6.
        assert_eq!(win_turns(&t, &[0, 3, 6, 8], &s, None).0, 6..10);
        // A window that keeps the whole log is not cut: it stays.
        s.tail = Some(10);
        assert_eq!(win_turns(&t, &[3, 6], &s, None).0, 0..10);
        // No question inside: the window stays as it is.
        s.tail = Some(3);
        assert_eq!(win_turns(&t, &[0, 3], &s, None).0, 7..10);
        // Token windows: the moved start's tokens are taken off the sum.
        let mut s = sel(None, Some(55), None);
        s.start_on = Some("text_input".into());
        assert_eq!(win_turns(&t, &[0, 7], &s, None), (7..10, Some(30), false));
    }

    #[test]
    fn a_tail_window_with_trim_to_keeps_its_start_until_it_overflows() {
        let s = sel(Some(10), None, Some(0.5));
        let t = [1u64; 30];
        // First turn: the last 10.
        assert_eq!(win(&t[..20], &s, None), (10..20, None, false));
        // The remembered start holds while the window has at most 10.
        assert_eq!(win(&t[..20], &s, at(10)), (10..20, None, false));
        // 25 items, 15 from the start: over 10, so it jumps to hold 5.
        assert_eq!(win(&t[..25], &s, at(10)), (20..25, None, true));
        // And stays there while the window holds at most 10.
        assert_eq!(win(&t[..30], &s, at(20)), (20..30, None, false));
        // A start that no longer exists: the plain tail.
        assert_eq!(win(&t[..30], &s, at(99)).0, 20..30);
        // With start_on, the jump lands on a turn's start.
        let mut s = s.clone();
        s.start_on = Some("text_input".into());
        assert_eq!(win_turns(&t[..25], &[18, 22], &s, at(10)).0, 22..25);
    }
}
