//! The messages a selection reads (the held entries, or a view built for
//! a selection the state is not shaped for), their token counts, and the
//! chunks a window's messages are handed out as.

use bytes::Bytes;

use super::segments::{DROPPED, NOT_COUNTED, OUTPUT, Segment, entry_offset};
use super::view::{Item, mark_pending, message_text_of};
use crate::render::Format;
use crate::render::cache;
use crate::replay::rendered::Entry;
use crate::select::Selection;

/// The messages a selection reads, by index: the held entries (the newest
/// summary's, `skip`, apart), or the items of a view built for a selection
/// the state is not shaped for.
pub(super) struct Held<'a> {
    pub(super) segments: &'a [Segment],
    pub(super) starts: &'a [usize],
    pub(super) items: Option<&'a [Item]>,
    pub(super) skip: Option<usize>,
    /// The segment found last: windows walk indices one by one.
    pub(super) hint: std::cell::Cell<usize>,
}

impl Held<'_> {
    /// Message `i`'s (segment, entry).
    pub(super) fn at(&self, i: usize) -> (usize, usize) {
        if let Some(items) = self.items {
            return (items[i].si, items[i].ei);
        }
        let g = if self.skip.is_some_and(|s| i >= s) {
            i + 1
        } else {
            i
        };
        self.locate(g)
    }

    /// Held entry `g`'s (segment, entry).
    pub(super) fn locate(&self, g: usize) -> (usize, usize) {
        let h = self.hint.get();
        let inside =
            |k: usize| k + 1 < self.starts.len() && self.starts[k] <= g && g < self.starts[k + 1];
        let seg = if inside(h) {
            h
        } else if h > 0 && inside(h - 1) {
            h - 1
        } else {
            self.starts.partition_point(|&st| st <= g) - 1
        };
        self.hint.set(seg);
        (seg, g - self.starts[seg])
    }

    pub(super) fn entry(&self, i: usize) -> &Entry {
        let (si, ei) = self.at(i);
        &self.segments[si].entries[ei]
    }
}

/// What [`held_chunks`] writes.
pub(super) struct HeldChunks<'a, 'h> {
    pub(super) held: &'a Held<'h>,
    /// The window's messages (indices among the held messages).
    pub(super) range: std::ops::Range<usize>,
    /// The newest summary's (segment, entry), written first.
    pub(super) summary: Option<(usize, usize)>,
    /// The pending message and the breakpoints, as indices among the
    /// messages written (the summary first).
    pub(super) mark: Option<usize>,
    pub(super) breakpoints: &'a [usize],
    pub(super) member: &'static [u8],
    pub(super) format: Format,
}

/// The chunks of the held messages a window keeps: runs of each segment as
/// they are, the summary first, the pending message and the breakpoints'
/// messages split out and patched, the summary's place in the order left
/// out. Work in proportion to the segments and special messages inside the
/// window.
pub(super) fn held_chunks(c: HeldChunks<'_, '_>) -> Vec<Bytes> {
    let held = c.held;
    let segments = held.segments;
    let shift = usize::from(c.summary.is_some());
    let mut chunks = Vec::new();
    // One message, patched.
    let message = |(si, ei): (usize, usize), m: usize, chunks: &mut Vec<Bytes>| {
        let s = &segments[si];
        let e = s.entries[ei];
        let at = entry_offset(s, ei) as usize;
        let mut msg = s.bytes.slice(at..at + e.len as usize);
        if c.mark == Some(m) {
            msg = mark_pending(&msg, c.format, e.flags & OUTPUT != 0);
        }
        if c.breakpoints.contains(&m) {
            let tail = msg.split_off(msg.len() - cache::MARKER_FROM_END);
            chunks.push(msg);
            chunks.push(Bytes::from_static(c.member));
            chunks.push(tail);
        } else {
            chunks.push(msg);
        }
    };
    if let Some(s) = c.summary {
        message(s, 0, &mut chunks);
    }
    if c.range.is_empty() {
        return chunks;
    }
    // Held entries g0..g1 hold the window (and maybe the skipped summary).
    let to_global = |i: usize| {
        if held.skip.is_some_and(|s| i >= s) {
            i + 1
        } else {
            i
        }
    };
    let (g0, g1) = (to_global(c.range.start), to_global(c.range.end - 1) + 1);
    // Special held entries: the messages patched, and the summary's place.
    let mut special: Vec<(usize, Option<usize>)> = c
        .breakpoints
        .iter()
        .copied()
        .chain(c.mark)
        .filter(|&m| m >= shift)
        .map(|m| (to_global(c.range.start + m - shift), Some(m)))
        .chain(
            held.skip
                .filter(|s| (g0..g1).contains(s))
                .map(|s| (s, None)),
        )
        .collect();
    special.sort_unstable();
    special.dedup_by_key(|(g, _)| *g);
    let (first_seg, first_entry) = held.locate(g0);
    let mut next = special.iter().peekable();
    let mut global = held.starts[first_seg];
    for (si, s) in segments.iter().enumerate().skip(first_seg) {
        if global >= g1 {
            break;
        }
        let lo = if si == first_seg { first_entry } else { 0 };
        let hi = (g1 - global).min(s.entries.len());
        let mut from = entry_offset(s, lo);
        while let Some(&&(g, m)) = next.peek() {
            if g >= global + hi {
                break;
            }
            next.next();
            let ei = g - global;
            let at = entry_offset(s, ei);
            if at > from {
                chunks.push(s.bytes.slice(from as usize..at as usize));
            }
            if let Some(m) = m {
                message((si, ei), m, &mut chunks);
            }
            from = at + s.entries[ei].len;
        }
        let end = if hi == s.entries.len() {
            s.bytes.len() as u64
        } else {
            entry_offset(s, hi)
        };
        if end > from {
            chunks.push(s.bytes.slice(from as usize..end as usize));
        }
        global += s.entries.len();
    }
    chunks
}

/// Tokens a let-go message answers a window with: more than any budget.
const LET_GO_TOKENS: u64 = u64::MAX / 4;

/// The tokens of the message at (segment, entry), and the count to cache
/// when it was counted now: more than any budget for a message let go (it
/// lies before every window, see `let_go_before`); the cached count, unless
/// `marked` (the pending mark's first line is counted with the text, and
/// that count is not kept).
pub(super) fn message_tokens(
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
pub(super) fn least_tokens(segments: &[Segment], (si, ei): (usize, usize), sel: &Selection) -> u64 {
    let e = &segments[si].entries[ei];
    if e.flags & DROPPED != 0 {
        return LET_GO_TOKENS;
    }
    sel.tokenizer.least_tokens(e.len.saturating_sub(64) / 6)
}
