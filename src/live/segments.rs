//! The held messages: segments of rendered bytes in replay order, and
//! where a new record goes among them (late records split a segment).

use bytes::BytesMut;

use super::LiveReplay;

/// Segments smaller than this are merged at the end (see `push`), so a
/// stream of one-record appends does not leave one segment per record.
const SMALL_SEGMENT: usize = 256 << 10;

/// Segments held before small neighbours are merged (plus one per 4 MiB
/// held); a handful in the crate's tests, so that they merge often there.
const SEGMENT_BUDGET: usize = if cfg!(test) { 8 } else { 1024 };

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
        self.starts_ok = self.starts_ok.min(seg);
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

    /// Appends `piece` at the end; small segments at the end are merged
    /// as a binary counter merges its digits: the last two when the newer
    /// is at least as large as the older, both under [`SMALL_SEGMENT`]. A
    /// stream of small appends so leaves a handful of segments per
    /// [`SMALL_SEGMENT`] of messages, and copies each byte a few times
    /// (about log2 of [`SMALL_SEGMENT`] over an append's size), not the
    /// whole last segment on every append.
    pub(super) fn push(&mut self, piece: Segment) {
        self.segments.push(piece);
        // Messages let go (no bytes) merge only with their like: a segment
        // of entries let go, held for the order, is never copied again for
        // the messages held after it.
        while let [.., older, newer] = self.segments.as_slice()
            && older.bytes.len() < SMALL_SEGMENT
            && newer.bytes.len() < SMALL_SEGMENT
            && newer.bytes.len() >= older.bytes.len()
            && older.bytes.is_empty() == newer.bytes.is_empty()
        {
            let newer = self.segments.pop().expect("two segments");
            let k = self.segments.len() - 1;
            self.starts_ok = self.starts_ok.min(k);
            let older = &mut self.segments[k];
            let mut b = BytesMut::with_capacity(older.bytes.len() + newer.bytes.len());
            b.extend_from_slice(&older.bytes);
            b.extend_from_slice(&newer.bytes);
            older.bytes = b.freeze();
            older.entries.extend_from_slice(&newer.entries);
        }
    }

    /// Late records leave small segments behind; when there are many, merge
    /// neighbours that are small (copying only small segments).
    pub(super) fn compact_if_needed(&mut self) {
        let budget = SEGMENT_BUDGET + (self.rendered / (4 << 20)) as usize;
        if self.segments.len() <= budget {
            return;
        }
        let old = std::mem::take(&mut self.segments);
        self.starts_ok = 0;
        for s in old {
            self.push(s);
        }
    }

    /// `starts` brought up to date: work in proportion to the segments
    /// changed since the last call (an append changes the last).
    pub(super) fn update_starts(&mut self) {
        let ok = self.starts_ok.min(self.segments.len());
        self.starts.truncate(ok + 1);
        for k in ok..self.segments.len() {
            let next = self.starts[k] + self.segments[k].entries.len();
            self.starts.push(next);
        }
        self.starts_ok = self.segments.len();
        debug_assert_eq!(self.starts.last().copied(), Some(self.records as usize));
    }

    /// The global index of the held entry with this (key, offset), if one
    /// is held. `starts` must be up to date.
    pub(super) fn index_of(&self, id: (u64, u64)) -> Option<usize> {
        let seg = self
            .segments
            .partition_point(|s| s.entries.last().is_some_and(|e| (e.key, e.offset) < id));
        let s = self.segments.get(seg)?;
        let ei = s.entries.partition_point(|e| (e.key, e.offset) < id);
        let e = s.entries.get(ei)?;
        ((e.key, e.offset) == id).then(|| self.starts[seg] + ei)
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
