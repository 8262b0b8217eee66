//! A turn's selection over the held messages: windows, the pending mark,
//! and token counts cached per record.

use bytes::{Bytes, BytesMut};

use super::segments::{INPUT, NOT_COUNTED, OUTPUT, entry_offset};
use super::{LiveReplay, read_from};
use std::fs::File;

use crate::error::Error;
use crate::order;
use crate::render::{self, Format};
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
        let n: usize = self.segments.iter().map(|s| s.entries.len()).sum();
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
            let seg = starts.partition_point(|&st| st <= i) - 1;
            (seg, i - starts[seg])
        };
        // The pending prompt: the latest input with no output after it.
        let mut pending: Option<usize> = None;
        'find: for (si, s) in self.segments.iter().enumerate().rev() {
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
            // The text is at least a sixth of its rendered message, less the
            // message's wrapping (JSON escapes write at most 6 bytes a byte).
            |i| {
                let (si, ei) = locate(i);
                let len = segments[si].entries[ei].len;
                sel.tokenizer.least_tokens(len.saturating_sub(64) / 6)
            },
            |i| {
                let (si, ei) = locate(i);
                let seg = &segments[si];
                let e = seg.entries[ei];
                if e.tokens != NOT_COUNTED && mark != Some(i) {
                    return e.tokens as u64;
                }
                let at = entry_offset(seg, ei);
                let msg = &seg.bytes[at as usize..(at + e.len) as usize];
                text.clear();
                if mark == Some(i) {
                    text.push_str("PENDING_USER_INPUT\n");
                }
                message_text_of(msg, format, e.flags & OUTPUT != 0, &mut text);
                let t = sel.tokenizer.count(&text);
                if mark != Some(i) {
                    counted.push((si, ei, t.min(NOT_COUNTED as u64 - 1) as u32));
                }
                t
            },
        );
        for (si, ei, t) in counted {
            self.segments[si].entries[ei].tokens = t;
        }
        report.selected = range.len() as u64;
        report.tokens = tokens;
        report.trimmed = trimmed;
        if sel.max_tokens.is_some() {
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
        // The chunks from the window's start, with the pending message
        // patched if it is inside.
        let mut chunks = Vec::with_capacity(self.segments.len() + 2);
        if range.is_empty() {
            return Ok((chunks, report));
        }
        let (first_seg, first_entry) = locate(range.start);
        let mut global = starts[first_seg];
        for (si, s) in self.segments.iter().enumerate().skip(first_seg) {
            let skip = if si == first_seg { first_entry } else { 0 };
            let from = entry_offset(s, skip);
            match mark {
                Some(p) if p >= global + skip && p < global + s.entries.len() => {
                    let pi = p - global;
                    let at = entry_offset(s, pi);
                    let len = s.entries[pi].len;
                    let msg = s.bytes.slice(at as usize..(at + len) as usize);
                    if at > from {
                        chunks.push(s.bytes.slice(from as usize..at as usize));
                    }
                    chunks.push(mark_pending(
                        &msg,
                        format,
                        s.entries[pi].flags & OUTPUT != 0,
                    ));
                    if ((at + len) as usize) < s.bytes.len() {
                        chunks.push(s.bytes.slice((at + len) as usize..));
                    }
                }
                _ => chunks.push(s.bytes.slice(from as usize..)),
            }
            global += s.entries.len();
        }
        Ok((chunks, report))
    }

    /// The 1-based line number of a committed offset: committed lines minus
    /// the newlines from there to the committed end (read from the file).
    pub(super) fn line_of(&self, offset: u64) -> Result<u64, Error> {
        let file = File::open(&self.path).map_err(|e| Error::io(&self.path, "cannot open", e))?;
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

/// Appends a rendered message's text (its JSON string content, unescaped) to
/// `out`.
fn message_text_of(msg: &[u8], format: Format, output: bool, out: &mut String) {
    if format == Format::Xml {
        // The element as the model reads it.
        out.push_str(&String::from_utf8_lossy(msg));
        return;
    }
    let role = if output {
        render::Role::Assistant
    } else {
        render::Role::User
    };
    let open = format.open(role).len();
    let close = format.close().len() + format.separator().len();
    let content = msg
        .get(open..msg.len().saturating_sub(close))
        .unwrap_or(&[]);
    crate::parse::json::decode_string(content, out);
}

/// A rendered message with `PENDING_USER_INPUT\n` as its first line.
fn mark_pending(msg: &Bytes, format: Format, output: bool) -> Bytes {
    if format == Format::Xml {
        // `" pending="true` before the end of the start tag (the first `">`:
        // the kind attribute has its quotes escaped).
        let Some(k) = memchr::memmem::find(msg, b"\">") else {
            return msg.clone();
        };
        let mut b = BytesMut::with_capacity(msg.len() + 16);
        b.extend_from_slice(&msg[..k]);
        b.extend_from_slice(b"\" pending=\"true");
        b.extend_from_slice(&msg[k..]);
        return b.freeze();
    }
    let role = if output {
        render::Role::Assistant
    } else {
        render::Role::User
    };
    let open = format.open(role).len().min(msg.len());
    let mut b = BytesMut::with_capacity(msg.len() + 20);
    b.extend_from_slice(&msg[..open]);
    b.extend_from_slice(b"PENDING_USER_INPUT\\n");
    b.extend_from_slice(&msg[open..]);
    b.freeze()
}
