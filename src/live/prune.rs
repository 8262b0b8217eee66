//! With summaries, the held messages follow what can still be replayed:
//! once a summary covers records, their rendered messages are let go (the
//! parse has read them; a one-shot replay with summaries leaves them out
//! too), so the state holds the uncovered tail, the newest summary and the
//! memos (summaries and facts), not the whole log.

use bytes::BytesMut;

use super::LiveReplay;
use super::segments::Segment;
use crate::ReplayOptions;
use crate::parse::LineParser;
use crate::replay::rendered::{Entry, Memo, SUMMARY};
use crate::select::memory;

/// The newest valid summary among the whole lines of `bytes` (a log from
/// its start), looked for from the end: its offset and cover. A first
/// build with summaries skips rendering what it covers (the parse checks
/// that it found the same one).
pub(super) fn newest_summary(bytes: &[u8], options: &ReplayOptions) -> Option<(u64, (u64, u64))> {
    let end = memchr::memrchr(b'\n', bytes)? + 1;
    let data = &bytes[..end];
    let mut parser = LineParser::new(options.max_depth);
    let mut seen = usize::MAX;
    for hit in memchr::memmem::rfind_iter(data, memory::SUMMARY.as_bytes()) {
        let start = memchr::memrchr(b'\n', &data[..hit]).map_or(0, |i| i + 1);
        if start == seen {
            continue;
        }
        seen = start;
        let stop = start + memchr::memchr(b'\n', &data[start..])?;
        let line = &data[start..stop];
        if let Ok(r) = parser.parse(line, 0)
            && r.kind_is(line, memory::SUMMARY)
            && let Some(cover) = memory::cover_of(&r, line)
        {
            return Some((start as u64, cover));
        }
    }
    None
}

impl LiveReplay {
    /// Drops the messages the newest summary covers, and the summaries
    /// other than it, when the state's selection has
    /// [`crate::Selection::summaries`] and the newest summary changed since
    /// the last look. Segments partly covered are copied, so their bytes
    /// are freed. A newer summary that covers less than the last one asks
    /// for a fresh build instead (`regressed`).
    pub(super) fn prune_covered(&mut self) {
        if !self.selection.summaries {
            return;
        }
        let newest = self.memos.iter().rev().find_map(|m| match m {
            Memo::Summary { at, cover } => Some((*at, *cover)),
            Memo::Fact { .. } => None,
        });
        let Some((n, cover)) = newest else {
            return;
        };
        match self.pruned_for {
            Some((at, _)) if at == n => return,
            // A newer summary that covers less than the one pruned for:
            // records let go are replayed again, so the state is built
            // afresh from the file (by the caller).
            Some((_, old)) if cover < old => {
                self.regressed = true;
                return;
            }
            _ => {}
        }
        self.pruned_for = Some((n, cover));
        let gone = |e: &Entry| {
            if e.flags & SUMMARY != 0 {
                return e.offset != n;
            }
            memory::covered(n, cover, e.key, e.offset)
        };
        let mut removed = (0u64, 0u64);
        let mut kept_segments = Vec::with_capacity(self.segments.len());
        for s in std::mem::take(&mut self.segments) {
            let drop_count = s.entries.iter().filter(|e| gone(e)).count();
            if drop_count == 0 {
                kept_segments.push(s);
                continue;
            }
            if drop_count == s.entries.len() {
                removed.0 += s.entries.len() as u64;
                removed.1 += s.bytes.len() as u64;
                continue;
            }
            let mut bytes = BytesMut::new();
            let mut entries = Vec::with_capacity(s.entries.len() - drop_count);
            let mut at = 0usize;
            for e in &s.entries {
                let len = e.len as usize;
                if gone(e) {
                    removed.0 += 1;
                    removed.1 += e.len;
                } else {
                    bytes.extend_from_slice(&s.bytes[at..at + len]);
                    entries.push(*e);
                }
                at += len;
            }
            kept_segments.push(Segment {
                bytes: bytes.freeze(),
                entries,
            });
        }
        self.segments = kept_segments;
        self.records -= removed.0;
        self.rendered -= removed.1;
        // Only the newest summary's memo matters from now on.
        self.memos
            .retain(|m| !matches!(m, Memo::Summary { at, .. } if *at != n));
    }
}
