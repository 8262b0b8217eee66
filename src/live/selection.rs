//! A turn's selection over the held messages: windows, the pending mark,
//! and token counts cached per record.

use bytes::Bytes;

use super::LiveReplay;
use super::segments::{DROPPED, INPUT, NOT_COUNTED, OUTPUT, Segment, entry_offset};
use super::view::{self, Item, mark_pending, message_kind_is, message_text_of};
use crate::input::read_from;

use crate::error::Error;
use crate::order;
use crate::render::Format;
use crate::render::cache::{self, CacheMemory, CachePolicy};
use crate::select::{self, Pending, SelectReport, Selection, WindowStart};

impl LiveReplay {
    /// The messages `sel` selects, as [`chunks`](Self::chunks) gives them
    /// all: its windows and pending mark applied to the records held (its
    /// filters were applied as they arrived, by
    /// [`with_selection`](Self::with_selection)). `prev` is the window start
    /// remembered from the last turn. Token counts are cached per record, so
    /// a turn counts only records it has not counted before. Tokens are those
    /// of each message's text, as in a one-shot [`crate::Replay::select`];
    /// for [`Format::Xml`] (not a server format) the element as rendered is
    /// counted instead, so its windows can differ from a one-shot replay's.
    pub fn select(
        &mut self,
        sel: &Selection,
        prev: Option<WindowStart>,
    ) -> Result<(Vec<Bytes>, SelectReport), Error> {
        self.select_with(sel, prev, None)
            .map(|(chunks, report, _)| (chunks, report))
    }

    /// Brings the state up to date ([`refresh`](Self::refresh)), then the
    /// request body `spec` describes over the messages `sel` selects (see
    /// [`select`](Self::select)): its leading fields, system prompt and
    /// current request, and, when `spec.cache` is set (Anthropic bodies),
    /// prompt-cache breakpoints placed as the respond server places them,
    /// `memory` carrying the last request's mark to the next. The bytes are
    /// a one-shot [`Replay::render_request_with`](crate::Replay::render_request_with)'s
    /// for the same log, selection and spec. Also returns the selection's
    /// report: its window start is the `prev` of the next turn.
    ///
    /// ```
    /// use wmreplay::{CacheMemory, CachePolicy, CurrentRequest, Format, LiveReplay, ReplayOptions, RequestSpec, Selection, SYSTEM_RULE};
    ///
    /// let dir = std::env::temp_dir().join(format!("wmreplay-doc-live-spec-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let path = dir.join("wm.log");
    /// std::fs::write(&path, "{\"type\":\"text_input\",\"ts_ms\":1,\"text\":\"hi\"}\n")?;
    /// let mut live = LiveReplay::new(&path, Format::Anthropic, ReplayOptions::default());
    /// let spec = RequestSpec::new(Format::Anthropic, SYSTEM_RULE, CurrentRequest { text: "next?", session_id: None })
    ///     .with_fields(r#""model":"claude-sonnet-4-5","max_tokens":512"#)
    ///     .with_cache(CachePolicy::default());
    /// let (body, _report) = live.request_body_with(&spec, &Selection::default(), None, &mut CacheMemory::default())?;
    /// let body = String::from_utf8(body)?;
    /// assert!(body.starts_with(r#"{"model":"claude-sonnet-4-5","max_tokens":512,"system":[{"#));
    /// assert_eq!(body.matches("cache_control").count(), 2);
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn request_body_with(
        &mut self,
        spec: &crate::RequestSpec<'_>,
        sel: &Selection,
        prev: Option<WindowStart>,
        memory: &mut CacheMemory,
    ) -> Result<(Vec<u8>, SelectReport), Error> {
        self.refresh()?;
        let cache = spec.cache.filter(|_| self.format == Format::Anthropic);
        let (chunks, report, marks) =
            self.select_with(sel, prev, cache.as_ref().map(|p| (p, &mut *memory)))?;
        let (head, tail) = match &cache {
            Some(policy) => {
                let member: &[u8] = if marks < policy.max_breakpoints {
                    policy.ttl.member()
                } else {
                    b""
                };
                crate::render::request::cached_envelope(
                    crate::render::request::Lead {
                        fields: spec.fields,
                        facts: self.facts.as_deref(),
                        recall: spec.recall,
                    },
                    spec.system,
                    &spec.current,
                    member,
                )
            }
            None => crate::render::request::lead_envelope(
                self.format,
                crate::render::request::Lead {
                    fields: spec.fields,
                    facts: self.facts.as_deref(),
                    recall: spec.recall,
                },
                spec.system,
                &spec.current,
            ),
        };
        let len = head.len() + tail.len() + chunks.iter().map(Bytes::len).sum::<usize>();
        let mut body = Vec::new();
        body.try_reserve_exact(len)
            .map_err(|_| Error::out_of_memory(&self.path, len as u64))?;
        body.extend_from_slice(&head);
        for c in &chunks {
            body.extend_from_slice(c);
        }
        body.extend_from_slice(&tail);
        Ok((body, report))
    }

    /// [`select`](Self::select) with Anthropic prompt-cache breakpoints
    /// spliced into the chunks (see [`crate::CachePolicy`]); also returns how
    /// many were placed, so the caller can mark the system block with one
    /// left over. Positions count from the window's start, so a window
    /// that stays put keeps its marks.
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn select_cached(
        &mut self,
        sel: &Selection,
        prev: Option<WindowStart>,
        policy: &CachePolicy,
        memory: &mut CacheMemory,
    ) -> Result<(Vec<Bytes>, SelectReport, usize), Error> {
        debug_assert_eq!(self.format, Format::Anthropic, "markers are Anthropic's");
        self.select_with(sel, prev, Some((policy, memory)))
    }

    fn select_with(
        &mut self,
        sel: &Selection,
        prev: Option<WindowStart>,
        cache: Option<(&CachePolicy, &mut CacheMemory)>,
    ) -> Result<(Vec<Bytes>, SelectReport, usize), Error> {
        if self.let_go && sel != &self.selection {
            // Messages were let go for the state's own window; this
            // selection may replay them: build again from the file.
            let limit = self.committed;
            self.reset();
            self.refresh_to(limit)?;
        }
        let (selected, below) = self.select_view(sel, prev, cache)?;
        if let Some(below) = below {
            self.let_go_before(below);
        }
        Ok(selected)
    }

    /// [`select_with`](Self::select_with), and, for the state's own
    /// selection with a window, where what no window can reach ends: the
    /// (key, offset) of the lowest record it can read.
    #[allow(clippy::type_complexity)]
    fn select_view(
        &mut self,
        sel: &Selection,
        prev: Option<WindowStart>,
        cache: Option<(&CachePolicy, &mut CacheMemory)>,
    ) -> Result<((Vec<Bytes>, SelectReport, usize), Option<(u64, u64)>), Error> {
        // With summaries or facts, the messages replayed are a view of
        // those held (the newest summary apart, to go first).
        let mview =
            (sel.summaries || sel.facts).then(|| view::build(&self.segments, sel, &self.memos));
        self.facts = mview.as_ref().and_then(|v| v.facts.clone());
        let items: &[Item] = mview.as_ref().map_or(&[], |v| &v.items);
        let n: usize = match &mview {
            Some(v) => v.items.len(),
            None => self.segments.iter().map(|s| s.entries.len()).sum(),
        };
        let mut report = SelectReport {
            matched: n as u64,
            ..SelectReport::default()
        };
        if self.counted_with != Some(sel.tokenizer) {
            for s in &mut self.segments {
                for e in &mut s.entries {
                    e.tokens = NOT_COUNTED;
                }
            }
            self.counted_with = Some(sel.tokenizer);
        }
        // Global index i -> (segment, entry): segment starts, in order.
        let starts: Vec<usize> = self
            .segments
            .iter()
            .scan(0, |acc, s| {
                let at = *acc;
                *acc += s.entries.len();
                Some(at)
            })
            .collect();
        let locate = |i: usize| -> (usize, usize) {
            if mview.is_some() {
                return (items[i].si, items[i].ei);
            }
            let seg = starts.partition_point(|&st| st <= i) - 1;
            (seg, i - starts[seg])
        };
        // The pending prompt: the latest input with no output after it.
        let mut pending: Option<usize> = None;
        if mview.is_some() {
            for i in (0..n).rev() {
                let (si, ei) = locate(i);
                let flags = self.segments[si].entries[ei].flags;
                if flags & OUTPUT != 0 {
                    break;
                }
                if flags & INPUT != 0 {
                    pending = Some(i);
                    break;
                }
            }
        }
        'find: for (si, s) in self.segments.iter().enumerate().rev() {
            if mview.is_some() {
                break;
            }
            for (ei, e) in s.entries.iter().enumerate().rev() {
                if e.flags & OUTPUT != 0 {
                    break 'find;
                }
                if e.flags & INPUT != 0 {
                    pending = Some(starts[si] + ei);
                    break 'find;
                }
            }
        }
        if let Some(i) = pending {
            let (si, ei) = locate(i);
            let e = self.segments[si].entries[ei];
            report.pending = Some(Pending {
                line: self.line_of(e.offset)?,
                offset: e.offset,
                ts_ms: order::key_ts(e.key),
            });
        }
        let mark = if sel.mark_pending { pending } else { None };
        let format = self.format;
        let segments = &self.segments;
        // Counts made this call, cached once the window is chosen.
        let mut counted: Vec<(usize, usize, u32)> = Vec::new();
        let mut text = String::new();
        let (range, tokens, trimmed) = select::window(
            n,
            sel,
            prev,
            |i| {
                let (si, ei) = locate(i);
                let e = &segments[si].entries[ei];
                (e.key, e.offset)
            },
            |i| least_tokens(segments, locate(i), sel),
            |i| {
                let at = locate(i);
                let (t, fresh) =
                    message_tokens(segments, at, format, sel, mark == Some(i), &mut text);
                if let Some(c) = fresh {
                    counted.push((at.0, at.1, c));
                }
                t
            },
            |i| {
                let Some(kind) = sel.start_on.as_deref() else {
                    return false;
                };
                let (si, ei) = locate(i);
                let seg = &segments[si];
                let e = seg.entries[ei];
                if kind == "text_input" {
                    return e.flags & INPUT != 0;
                }
                debug_assert_eq!(e.flags & DROPPED, 0, "a window looked before its floor");
                let at = entry_offset(seg, ei);
                let msg = &seg.bytes[at as usize..(at + e.len) as usize];
                message_kind_is(msg, format, e.flags & OUTPUT != 0, kind)
            },
        );
        for (si, ei, t) in counted {
            self.segments[si].entries[ei].tokens = t;
        }
        // The state's own window: what lies before the lowest record any of
        // its windows can read is let go once this call's chunks are made.
        let below = if sel.has_window() && sel == &self.selection {
            let segments = &self.segments;
            let mut fresh: Vec<(usize, usize, u32)> = Vec::new();
            let d = select::floor(
                n,
                sel,
                |i| least_tokens(segments, locate(i), sel),
                |i| {
                    let at = locate(i);
                    let (t, counted) = message_tokens(segments, at, format, sel, false, &mut text);
                    if let Some(c) = counted {
                        fresh.push((at.0, at.1, c));
                    }
                    t
                },
            );
            let below = match d {
                0 => None,
                d if d >= n => Some((u64::MAX, u64::MAX)),
                d => {
                    let (si, ei) = locate(d);
                    let e = &segments[si].entries[ei];
                    Some((e.key, e.offset))
                }
            };
            for (si, ei, t) in fresh {
                self.segments[si].entries[ei].tokens = t;
            }
            below
        } else {
            None
        };
        if self.track {
            let mut offsets: Vec<u64> = mview
                .as_ref()
                .and_then(|v| v.summary)
                .map(|it| self.segments[it.si].entries[it.ei].offset)
                .into_iter()
                .chain(range.clone().map(|i| {
                    let (si, ei) = locate(i);
                    self.segments[si].entries[ei].offset
                }))
                .collect();
            offsets.sort_unstable();
            self.selected = offsets;
        }
        report.selected = range.len() as u64;
        report.tokens = tokens;
        report.trimmed = trimmed;
        if sel.reports_start() {
            report.window_start = if range.is_empty() {
                if trimmed { None } else { prev }
            } else {
                let (si, ei) = locate(range.start);
                let e = &self.segments[si].entries[ei];
                Some(WindowStart {
                    key: e.key,
                    offset: e.offset,
                })
            };
        }
        // Cache breakpoints: message indices from the window's start.
        let member: &'static [u8] = cache.as_ref().map_or(b"", |(p, _)| p.ttl.member());
        if let Some(v) = &mview {
            // The messages: the newest summary, then the window's.
            let msgs: Vec<Item> = v
                .summary
                .iter()
                .copied()
                .chain(items[range.clone()].iter().copied())
                .collect();
            let shift = usize::from(v.summary.is_some());
            report.matched += shift as u64;
            report.selected += shift as u64;
            let id = |i: usize| {
                let e = &self.segments[msgs[i].si].entries[msgs[i].ei];
                (e.key, e.offset)
            };
            let breakpoints = match cache {
                Some((policy, memory)) => cache::place(msgs.len(), id, policy, memory),
                None => Vec::new(),
            };
            let mark = mark
                .filter(|m| range.contains(m))
                .map(|m| m - range.start + shift);
            let chunks = view::chunks(&self.segments, &msgs, mark, &breakpoints, member, format);
            return Ok(((chunks, report, breakpoints.len()), below));
        }
        let breakpoints: Vec<usize> = match cache {
            Some((policy, memory)) => {
                let marks = cache::place(
                    range.len(),
                    |i| {
                        let (si, ei) = locate(range.start + i);
                        let e = &self.segments[si].entries[ei];
                        (e.key, e.offset)
                    },
                    policy,
                    memory,
                );
                marks.into_iter().map(|i| range.start + i).collect()
            }
            None => Vec::new(),
        };
        // The chunks from the window's start, with the pending message
        // patched and the breakpoints' messages split, if inside.
        let mut chunks = Vec::with_capacity(self.segments.len() + 2 + 3 * breakpoints.len());
        if range.is_empty() {
            return Ok(((chunks, report, 0), below));
        }
        let (first_seg, first_entry) = locate(range.start);
        let mut global = starts[first_seg];
        for (si, s) in self.segments.iter().enumerate().skip(first_seg) {
            let skip = if si == first_seg { first_entry } else { 0 };
            let here = global + skip..global + s.entries.len();
            // The messages of this segment that are not copied as they are.
            let mut special: Vec<usize> = breakpoints
                .iter()
                .copied()
                .chain(mark)
                .filter(|g| here.contains(g))
                .collect();
            special.sort_unstable();
            special.dedup();
            let mut from = entry_offset(s, skip);
            for g in special {
                let ei = g - global;
                let at = entry_offset(s, ei);
                let len = s.entries[ei].len;
                if at > from {
                    chunks.push(s.bytes.slice(from as usize..at as usize));
                }
                let mut msg = s.bytes.slice(at as usize..(at + len) as usize);
                if mark == Some(g) {
                    msg = mark_pending(&msg, format, s.entries[ei].flags & OUTPUT != 0);
                }
                if breakpoints.contains(&g) {
                    let tail = msg.split_off(msg.len() - cache::MARKER_FROM_END);
                    chunks.push(msg);
                    chunks.push(Bytes::from_static(member));
                    chunks.push(tail);
                } else {
                    chunks.push(msg);
                }
                from = at + len;
            }
            if (from as usize) < s.bytes.len() {
                chunks.push(s.bytes.slice(from as usize..));
            }
            global += s.entries.len();
        }
        Ok(((chunks, report, breakpoints.len()), below))
    }

    /// The 1-based line number of a committed offset: committed lines minus
    /// the newlines from there to the committed end (read from the file).
    pub(super) fn line_of(&self, offset: u64) -> Result<u64, Error> {
        let file = crate::input::open_regular(&self.path, self.options.refuse_links)?
            .map(|(f, _)| f)
            .ok_or_else(|| {
                Error::io(
                    &self.path,
                    "cannot open",
                    std::io::Error::from(std::io::ErrorKind::NotFound),
                )
            })?;
        let mut newlines = 0u64;
        let mut at = offset;
        let mut buf = Vec::with_capacity(1 << 20);
        while at < self.committed {
            buf.clear();
            let want = (self.committed - at).min(1 << 20);
            read_from(&file, at, want, &mut buf)
                .map_err(|e| Error::io(&self.path, "cannot read", e))?;
            if buf.is_empty() {
                break;
            }
            newlines += select::count_newlines(&buf);
            at += buf.len() as u64;
        }
        Ok((self.lines + 1).saturating_sub(newlines))
    }
}

/// Tokens a let-go message answers a window with: more than any budget.
const LET_GO_TOKENS: u64 = u64::MAX / 4;

/// The tokens of the message at (segment, entry), and the count to cache
/// when it was counted now: more than any budget for a message let go (it
/// lies before every window, see `let_go_before`); the cached count, unless
/// `marked` (the pending mark's first line is counted with the text, and
/// that count is not kept).
fn message_tokens(
    segments: &[Segment],
    (si, ei): (usize, usize),
    format: Format,
    sel: &Selection,
    marked: bool,
    text: &mut String,
) -> (u64, Option<u32>) {
    let seg = &segments[si];
    let e = seg.entries[ei];
    if e.flags & DROPPED != 0 {
        return (LET_GO_TOKENS, None);
    }
    if e.tokens != NOT_COUNTED && !marked {
        return (e.tokens as u64, None);
    }
    let at = entry_offset(seg, ei);
    let msg = &seg.bytes[at as usize..(at + e.len) as usize];
    text.clear();
    if marked {
        text.push_str("PENDING_USER_INPUT\n");
    }
    message_text_of(msg, format, e.flags & OUTPUT != 0, text);
    let t = sel.tokenizer.count(text);
    (t, (!marked).then(|| t.min(NOT_COUNTED as u64 - 1) as u32))
}

/// A cheap lower bound of the tokens of the message at (segment, entry):
/// its text is at least a sixth of the rendered message, less the
/// message's wrapping (JSON escapes write at most 6 bytes a byte).
fn least_tokens(segments: &[Segment], (si, ei): (usize, usize), sel: &Selection) -> u64 {
    let e = &segments[si].entries[ei];
    if e.flags & DROPPED != 0 {
        return LET_GO_TOKENS;
    }
    sel.tokenizer.least_tokens(e.len.saturating_sub(64) / 6)
}

#[cfg(test)]
#[path = "selection_tests.rs"]
mod tests;
