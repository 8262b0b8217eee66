//! A turn's selection over the held messages: windows, the pending mark,
//! and token counts cached per record.

use bytes::Bytes;

use super::LiveReplay;
use super::held::{Held, HeldChunks, held_chunks, least_tokens, message_tokens};
use super::segments::{DROPPED, INPUT, NOT_COUNTED, OUTPUT, entry_offset};
use super::view::{self, Item, message_kind_is};
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
    ///     .with_fields(r#""model":"claude-sonnet-5-5","max_tokens":512"#)
    ///     .with_cache(CachePolicy::default());
    /// let (body, _report) = live.request_body_with(&spec, &Selection::default(), None, &mut CacheMemory::default())?;
    /// let body = String::from_utf8(body)?;
    /// assert!(body.starts_with(r#"{"model":"claude-sonnet-5-5","max_tokens":512,"system":[{"#));
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
        if !self.serves(sel) {
            return self.select_foreign(sel, prev, cache);
        }
        let (selected, below) = self.select_view(sel, prev, cache)?;
        if let Some(below) = below {
            self.let_go_before(below);
        }
        Ok(selected)
    }

    /// Whether the messages held can give `sel`'s: the state leaves out
    /// what its own selection never replays (every `wm_fact` with facts,
    /// what the newest summary covers with summaries, what lies before
    /// every window once let go), so another selection that would replay
    /// them cannot be made from it. (Filters are the state's own, always.)
    fn serves(&self, sel: &Selection) -> bool {
        let own = &self.selection;
        (!own.facts || sel.facts)
            && (!own.summaries || sel.summaries)
            && (!self.let_go || sel == own)
    }

    /// A selection the state cannot give from what it holds (see
    /// [`serves`](Self::serves)): made from a state of the same log that
    /// keeps every message (its filters apart), built for this call. It
    /// costs a replay of the log; the state itself is left as it is.
    fn select_foreign(
        &mut self,
        sel: &Selection,
        prev: Option<WindowStart>,
        cache: Option<(&CachePolicy, &mut CacheMemory)>,
    ) -> Result<(Vec<Bytes>, SelectReport, usize), Error> {
        let own = &self.selection;
        let filters = Selection {
            session: own.session.clone(),
            kinds: own.kinds.clone(),
            since: own.since,
            until: own.until,
            ..Selection::default()
        };
        let mut full =
            LiveReplay::new(&self.path, self.format, self.options.clone()).with_selection(filters);
        full.track = self.track;
        full.refresh_to(self.committed)?;
        let out = full.select_with(sel, prev, cache)?;
        self.facts = full.facts.take();
        self.selected = std::mem::take(&mut full.selected);
        self.visits += full.visits;
        Ok(out)
    }

    /// [`select_with`](Self::select_with), and, for the state's own
    /// selection with a window, where what no window can reach ends: the
    /// (key, offset) of the lowest record it can read.
    ///
    /// A selection the state is shaped for (its own summaries and facts)
    /// replays the held messages as they are, the newest summary moved
    /// first: its counts are kept as records arrive (the entries held, the
    /// newest input or output, segment starts), so the work is the window's
    /// messages and what was appended, not the log. Another (summaries or
    /// facts the state does not apply itself) walks every held message to
    /// build its view.
    #[allow(clippy::type_complexity)]
    fn select_view(
        &mut self,
        sel: &Selection,
        prev: Option<WindowStart>,
        cache: Option<(&CachePolicy, &mut CacheMemory)>,
    ) -> Result<((Vec<Bytes>, SelectReport, usize), Option<(u64, u64)>), Error> {
        if self.counted_with != Some(sel.tokenizer) {
            for s in &mut self.segments {
                for e in &mut s.entries {
                    e.tokens = NOT_COUNTED;
                }
            }
            self.counted_with = Some(sel.tokenizer);
        }
        self.update_starts();
        self.facts = if sel.facts {
            self.fact_table.message()
        } else {
            None
        };
        let shaped = sel.summaries == self.selection.summaries && sel.facts == self.selection.facts;
        let mview = (!shaped).then(|| view::build(&self.segments, sel, self.newest_summary()));
        if let Some(v) = &mview {
            self.visits += self.records;
            debug_assert!(v.items.len() as u64 <= self.records);
        }
        // The newest summary, replayed first: its index among the held
        // entries, which the messages skip.
        let skip = match (&mview, self.summary) {
            (None, Some(m)) if sel.summaries => self.index_of((m.key, m.at)),
            _ => None,
        };
        let held = Held {
            segments: &self.segments,
            starts: &self.starts,
            items: mview.as_ref().map(|v| v.items.as_slice()),
            skip,
            hint: std::cell::Cell::new(0),
        };
        let n = match &mview {
            Some(v) => v.items.len(),
            None => self.records as usize - usize::from(skip.is_some()),
        };
        let mut report = SelectReport {
            matched: n as u64,
            ..SelectReport::default()
        };
        // The pending prompt: the latest input with no output after it.
        let pending: Option<usize> = match &mview {
            Some(_) => {
                let mut found = None;
                for i in (0..n).rev() {
                    self.visits += 1;
                    let flags = held.entry(i).flags;
                    if flags & OUTPUT != 0 {
                        break;
                    }
                    if flags & INPUT != 0 {
                        found = Some(i);
                        break;
                    }
                }
                found
            }
            None => self
                .last_io
                .filter(|&(_, _, flags)| flags & INPUT != 0)
                .and_then(|(key, offset, _)| self.index_of((key, offset)))
                .map(|g| g - usize::from(skip.is_some_and(|s| s < g))),
        };
        if let Some(i) = pending {
            let e = *held.entry(i);
            report.pending = Some(Pending {
                line: self.pending_line(e.offset)?,
                offset: e.offset,
                ts_ms: order::key_ts(e.key),
            });
        }
        let held = Held {
            segments: &self.segments,
            starts: &self.starts,
            items: mview.as_ref().map(|v| v.items.as_slice()),
            skip,
            hint: std::cell::Cell::new(0),
        };
        let mark = if sel.mark_pending { pending } else { None };
        let format = self.format;
        let segments = &self.segments;
        // Counts made this call, cached once the window is chosen; entries
        // looked at.
        let mut counted: Vec<(usize, usize, u32)> = Vec::new();
        let visits = std::cell::Cell::new(0u64);
        let mut text = String::new();
        let (range, tokens, trimmed) = select::window(
            n,
            sel,
            prev,
            |i| {
                visits.set(visits.get() + 1);
                let e = held.entry(i);
                (e.key, e.offset)
            },
            |i| least_tokens(segments, held.at(i), sel),
            |i| {
                visits.set(visits.get() + 1);
                let at = held.at(i);
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
                visits.set(visits.get() + 1);
                let (si, ei) = held.at(i);
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
        // The state's own window: what lies before the lowest record any of
        // its windows can read is let go once this call's chunks are made.
        let below = if sel.has_window() && sel == &self.selection {
            let d = select::floor(
                n,
                sel,
                |i| least_tokens(segments, held.at(i), sel),
                |i| {
                    visits.set(visits.get() + 1);
                    let at = held.at(i);
                    let (t, fresh) = message_tokens(segments, at, format, sel, false, &mut text);
                    if let Some(c) = fresh {
                        counted.push((at.0, at.1, c));
                    }
                    t
                },
            );
            match d {
                0 => None,
                d if d >= n => Some((u64::MAX, u64::MAX)),
                d => {
                    let e = held.entry(d);
                    Some((e.key, e.offset))
                }
            }
        } else {
            None
        };
        let summary: Option<(usize, usize)> = match &mview {
            Some(v) => v.summary.map(|it| (it.si, it.ei)),
            None => skip.map(|g| held.locate(g)),
        };
        if self.track {
            let mut offsets: Vec<u64> = summary
                .map(|(si, ei)| segments[si].entries[ei].offset)
                .into_iter()
                .chain(range.clone().map(|i| held.entry(i).offset))
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
                let e = held.entry(range.start);
                Some(WindowStart {
                    key: e.key,
                    offset: e.offset,
                })
            };
        }
        // The messages: the newest summary (with summaries), then the
        // window's; cache breakpoints are indices among them.
        let shift = usize::from(summary.is_some());
        report.matched += shift as u64;
        report.selected += shift as u64;
        let msg_at = |m: usize| -> (usize, usize) {
            match summary {
                Some(s) if m == 0 => s,
                _ => held.at(range.start + m - shift),
            }
        };
        let member: &'static [u8] = cache.as_ref().map_or(b"", |(p, _)| p.ttl.member());
        let breakpoints = match cache {
            Some((policy, memory)) => cache::place(
                range.len() + shift,
                |m| {
                    let (si, ei) = msg_at(m);
                    let e = &segments[si].entries[ei];
                    (e.key, e.offset)
                },
                policy,
                memory,
            ),
            None => Vec::new(),
        };
        let mark = mark
            .filter(|m| range.contains(m))
            .map(|m| m - range.start + shift);
        let chunks = match &mview {
            Some(v) => {
                let msgs: Vec<Item> = v
                    .summary
                    .iter()
                    .copied()
                    .chain(v.items[range.clone()].iter().copied())
                    .collect();
                view::chunks(segments, &msgs, mark, &breakpoints, member, format)
            }
            None => held_chunks(HeldChunks {
                held: &held,
                range: range.clone(),
                summary,
                mark,
                breakpoints: &breakpoints,
                member,
                format,
            }),
        };
        let marks = breakpoints.len();
        self.visits += visits.get();
        for (si, ei, t) in counted {
            self.segments[si].entries[ei].tokens = t;
        }
        Ok(((chunks, report, marks), below))
    }

    /// The line number of a pending prompt's offset: counted once, then
    /// remembered while the same prompt is pending (lines before it never
    /// change in a state that only grows).
    fn pending_line(&mut self, offset: u64) -> Result<u64, Error> {
        if let Some((at, line)) = self.pending_line
            && at == offset
        {
            return Ok(line);
        }
        let line = self.line_of(offset)?;
        self.pending_line = Some((offset, line));
        Ok(line)
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

#[cfg(test)]
#[path = "selection_tests.rs"]
mod tests;
