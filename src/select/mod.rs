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

#[cfg(feature = "tiktoken")]
pub(crate) mod bpe;
pub(crate) mod fold;
pub(crate) mod memory;
pub(crate) mod tokens;
mod window;

use crate::order::ts_key;
use crate::parse::Record;
use crate::parse::json::{self, Member};
use crate::render;
use crate::select::tokens::Tokenizer;
pub(crate) use window::floor;
pub use window::window;

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
    /// Replay the newest valid `wm_summary` first, in place of the records
    /// it covers (see the `memory` rules in `docs/contract.md`); filters and
    /// windows apply to the records left.
    pub summaries: bool,
    /// Replay the `wm_fact` records as one `WM_KIND=wm_facts` message of the
    /// latest value of every live key, just before `CURRENT_USER_REQUEST`.
    pub facts: bool,
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
        !self.has_filters()
            && !self.has_window()
            && !self.mark_pending
            && !self.summaries
            && !self.facts
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

/// Applies `sel` to `records` (in replay order) in place. `origin(offset)`
/// gives the log offset a record's `offset` stands for (itself, or in
/// [`crate::RecordMode::Js`] the source line's offset), and `line_of(origin)`
/// that offset's 1-based line number (for the pending prompt); `prev` is the
/// window start remembered from the last turn. Reported offsets are log
/// offsets.
///
/// With `sel.facts`, the `wm_facts` message text (if any key is live) is
/// put in `facts`; with `sel.summaries`, the newest summary comes first in
/// `records`, outside the filters and windows.
pub fn apply(
    records: &mut Vec<Record>,
    log: &[u8],
    sel: &Selection,
    prev: Option<WindowStart>,
    origin: impl Fn(u64) -> u64,
    line_of: impl Fn(u64) -> u64,
    facts: &mut Option<String>,
) -> SelectReport {
    use rayon::prelude::*;
    // Facts first: read from every record, whatever covers or filters them.
    *facts = if sel.facts {
        memory::take_facts(records, log)
    } else {
        None
    };
    let summary = if sel.summaries {
        memory::take_summary(records, log, &origin)
    } else {
        None
    };
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
    if let Some(s) = summary {
        // The summary is replayed: it counts as matched and selected.
        records.insert(0, s);
        report.matched += 1;
        report.selected += 1;
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
