//! The held messages: segments of rendered bytes in replay order, and
//! where a new record goes among them (late records split a segment).

use bytes::BytesMut;

use super::LiveReplay;

/// Segments smaller than this absorb the next in-order append by copying, so
/// a stream of one-record appends does not leave one segment per record.
const SMALL_SEGMENT: usize = 256 << 10;

pub(super) use crate::replay::rendered::{DROPPED, INPUT, NOT_COUNTED, OUTPUT, Piece as Segment};

impl LiveReplay {
    /// Segment and entry index where a record with `key` goes: after every
    /// held entry whose key is at most `key`.
    pub(super) fn position(&self, key: u64) -> (usize, usize) {
        let seg = self.segments.partition_point(|s| s.last_key() <= key);
        if seg == self.segments.len() {
            return (seg, 0);
        }
        let idx = self.segments[seg].entries.partition_point(|e| e.key <= key);
        (seg, idx)
    }

    /// The key of the held entry at (`seg`, `idx`), the first one after the
    /// insertion point, if any.
    pub(super) fn bound_after(&self, seg: usize, idx: usize) -> Option<u64> {
        self.segments.get(seg).map(|s| s.entries[idx].key)
    }

    /// Inserts `piece` before entry `idx` of segment `seg`, splitting it.
    pub(super) fn insert(&mut self, seg: usize, idx: usize, piece: Segment) {
        if seg == self.segments.len() {
            self.push(piece);
            return;
        }
        if idx == 0 {
            self.segments.insert(seg, piece);
            return;
        }
        let s = &mut self.segments[seg];
        // Byte offset of entry `idx`, summed from the nearer end (late
        // records usually land near the end of the last segment).
        let at = if idx <= s.entries.len() / 2 {
            s.entries[..idx].iter().map(|e| e.len).sum::<u64>()
        } else {
            s.bytes.len() as u64 - s.entries[idx..].iter().map(|e| e.len).sum::<u64>()
        } as usize;
        let right = Segment {
            bytes: s.bytes.slice(at..),
            entries: s.entries.split_off(idx),
        };
        s.bytes.truncate(at);
        self.segments.insert(seg + 1, piece);
        self.segments.insert(seg + 2, right);
    }

    /// Appends `piece` at the end, merging it into a small last segment.
    pub(super) fn push(&mut self, piece: Segment) {
        if let Some(last) = self.segments.last_mut()
            && last.bytes.len() < SMALL_SEGMENT
            && piece.bytes.len() < SMALL_SEGMENT
        {
            let mut b = BytesMut::with_capacity(last.bytes.len() + piece.bytes.len());
            b.extend_from_slice(&last.bytes);
            b.extend_from_slice(&piece.bytes);
            last.bytes = b.freeze();
            last.entries.extend_from_slice(&piece.entries);
            return;
        }
        self.segments.push(piece);
    }

    /// Late records leave small segments behind; when there are many, merge
    /// neighbours that are small (copying only small segments).
    pub(super) fn compact_if_needed(&mut self) {
        let budget = 1024 + (self.rendered / (4 << 20)) as usize;
        if self.segments.len() <= budget {
            return;
        }
        let old = std::mem::take(&mut self.segments);
        for s in old {
            self.push(s);
        }
    }
}

/// Byte offset of entry `idx` in its segment, summed from the nearer end.
pub(super) fn entry_offset(s: &Segment, idx: usize) -> u64 {
    if idx <= s.entries.len() / 2 {
        s.entries[..idx].iter().map(|e| e.len).sum()
    } else {
        s.bytes.len() as u64 - s.entries[idx..].iter().map(|e| e.len).sum::<u64>()
    }
}
