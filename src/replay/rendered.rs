//! The one-pass replay: each parse worker renders its chunk's messages right
//! after parsing them, while the chunk's bytes are still in the cache, and
//! the replay's output is the chunks' rendered bytes in replay order, shared
//! as [`Bytes`] slices (a writer hands them to `writev`; the live state keeps
//! them as its segments).
//!
//! A worker sorts its chunk's records by `ts_ms` (stably, so ties stay in
//! file order) before rendering them, so a record that arrives a little late
//! is put in place inside its chunk. The chunks are then joined in file
//! order: the records of a chunk at least as new as every record of the
//! chunks before it (a suffix of its sorted records) go on at the end, in
//! one piece; the others (a prefix) are late, set aside with their rendered
//! bytes, and merged in at the end. Nothing is rendered twice or copied
//! here: a late record splits the piece it lands in.
//!
//! The order is the two-pass replay's (a stable sort of every record by
//! `ts_ms`): chunk suffixes are sorted and each starts at or after the
//! newest record before it, so their concatenation is sorted; a late record
//! goes after every kept record with a key at most its own (a kept record
//! with the same key is earlier in the file), and late records keep their
//! order (key, then file order) through a stable sort.

use bytes::Bytes;

use crate::order::{self, ts_key};
use crate::parse::Record;
use crate::render::{self, Format};
use crate::select::{Selection, memory};

/// Where one rendered message sits in the replay order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Entry {
    /// `ts_key(ts_ms)`: the order of `ts_ms` as a double.
    pub(crate) key: u64,
    /// Byte offset of the line in the file: the tie-break (file order).
    pub(crate) offset: u64,
    /// Bytes of the rendered message, separator included.
    pub(crate) len: u64,
    /// [`INPUT`] or [`OUTPUT`], for the pending prompt.
    pub(crate) flags: u8,
    /// Tokens of the message text, once counted by a window
    /// ([`NOT_COUNTED`] before).
    pub(crate) tokens: u32,
}

/// Entry flag: a `text_input` record.
pub(crate) const INPUT: u8 = 1;
/// Entry flag: a `text_output` record.
pub(crate) const OUTPUT: u8 = 2;
/// Entry flag: a `wm_summary` record.
pub(crate) const SUMMARY: u8 = 4;
/// Entry flag: a `wm_fact` record.
pub(crate) const FACT: u8 = 8;
/// Entry flag: a live state let its message go (it lies before every
/// window its selection can take); the entry stays, with no bytes, for its
/// place in the order.
pub(crate) const DROPPED: u8 = 16;

/// What a live state keeps of a `wm_summary` or `wm_fact` record beside
/// its message, read once when the record is parsed (`at`: its line's
/// offset in the file).
#[derive(Debug, Clone)]
pub(crate) enum Memo {
    /// A valid summary (its `ts_key` `key`), covering up to `cover`
    /// (`ts_key`, offset).
    Summary {
        at: u64,
        key: u64,
        cover: (u64, u64),
    },
    /// A fact: `key` set to `value` (`None`: deleted) at `ts`.
    Fact {
        at: u64,
        ts: f64,
        key: String,
        value: Option<String>,
    },
}
/// [`Entry::tokens`] before a window counted it.
pub(crate) const NOT_COUNTED: u32 = u32::MAX;

/// Consecutive messages in replay order: their bytes and where each is.
#[derive(Debug, Clone)]
pub(crate) struct Piece {
    pub(crate) bytes: Bytes,
    pub(crate) entries: Vec<Entry>,
}

/// What to render while parsing.
#[derive(Clone, Copy)]
pub(crate) struct RenderSpec<'s> {
    pub(crate) format: Format,
    /// Only records that pass these filters are rendered (and kept).
    pub(crate) filter: Option<&'s Selection>,
    /// `(at, cover)`: the summary at offset `at` covering up to `cover`;
    /// the records it covers and the other summaries are not rendered
    /// (parsed and counted all the same).
    pub(crate) skip: Option<(u64, (u64, u64))>,
    /// Records never replayed one by one under the state's selection are
    /// not rendered (parsed, counted and remembered all the same): every
    /// `wm_fact` (with facts) and every `wm_summary` that is not valid
    /// (with summaries).
    pub(crate) drop_facts: bool,
    pub(crate) drop_invalid_summaries: bool,
    /// `(key, offset)`: the records ordered before it keep their entries
    /// (their place in the order, their flags) with no bytes, flagged
    /// [`DROPPED`]: a live state whose windows never reach them does not
    /// render them.
    pub(crate) drop_below: Option<(u64, u64)>,
    /// Added to every entry's offset (the range's place in the file).
    pub(crate) base: u64,
    /// Called with each chunk's range once its messages are rendered (the
    /// live state drops those pages of the log's map then).
    pub(crate) done: Option<&'s (dyn Fn(std::ops::Range<usize>) + Sync)>,
}

/// Messages rendered while parsing, and the order of all the records.
pub(crate) struct Rendered {
    /// The messages in replay order.
    pub(crate) pieces: Vec<Piece>,
    /// The summaries and facts among every record (filtered out or not),
    /// in file order.
    pub(crate) memos: Vec<Memo>,
    /// Key of the first record in file order (filtered out or not).
    pub(crate) first: Option<u64>,
    /// The newest key of all records.
    pub(crate) newest: Option<u64>,
    /// Whether every record was at least as new as all before it.
    pub(crate) ordered: bool,
    /// Bytes of messages that could not be rendered for want of memory
    /// (when not zero, `pieces` lacks them).
    pub(crate) unrendered: u64,
}

/// A rendered chunk: its messages sorted by `ts_ms`, and what the join
/// needs to know about the order of all its records.
pub(super) struct ChunkRender {
    bytes: Bytes,
    entries: Vec<Entry>,
    /// The chunk's summaries and facts, in file order.
    memos: Vec<Memo>,
    /// Key of the chunk's first record (file order, filtered out or not).
    first: Option<u64>,
    /// Newest key of all its records.
    newest: Option<u64>,
    /// Whether all its records were in order.
    ordered: bool,
    /// Bytes of messages not rendered for want of memory (then none are).
    unrendered: u64,
}

/// Renders `records` (a chunk's, in file order; offsets into `data`),
/// using `scratch` for the sorted copy.
pub(super) fn render_chunk(
    records: &[Record],
    data: &[u8],
    js: bool,
    spec: &RenderSpec<'_>,
    scratch: &mut Vec<Record>,
) -> ChunkRender {
    let mut newest: Option<u64> = None;
    let mut ordered = true;
    for r in records {
        let k = ts_key(r.ts);
        ordered &= newest.is_none_or(|n| k >= n);
        newest = Some(newest.map_or(k, |n| n.max(k)));
    }
    let origin = |r: &Record| {
        spec.base
            + if js {
                super::arena_origin(data, r.offset)
            } else {
                r.offset
            }
    };
    let mut memos = Vec::new();
    for r in records {
        if r.is_output() || r.kind_is(data, "text_input") {
            continue;
        }
        if r.kind_is(data, memory::SUMMARY) {
            if let Some(cover) = memory::cover_of(r, data) {
                memos.push(Memo::Summary {
                    at: origin(r),
                    key: ts_key(r.ts),
                    cover,
                });
            }
        } else if r.kind_is(data, memory::FACT)
            && let Some((key, value)) = memory::fact_of(r, data)
        {
            memos.push(Memo::Fact {
                at: origin(r),
                ts: r.ts,
                key,
                value,
            });
        }
    }
    scratch.clear();
    let covered = |r: &Record| {
        if spec.drop_facts && r.kind_is(data, memory::FACT) {
            return true;
        }
        if spec.drop_invalid_summaries
            && r.kind_is(data, memory::SUMMARY)
            && memory::cover_of(r, data).is_none()
        {
            return true;
        }
        spec.skip.is_some_and(|(at, cover)| {
            let o = origin(r);
            if r.kind_is(data, memory::SUMMARY) {
                return o != at;
            }
            memory::covered(at, cover, ts_key(r.ts), o)
        })
    };
    let shaped = spec.skip.is_some() || spec.drop_facts || spec.drop_invalid_summaries;
    match (spec.filter, shaped) {
        // With summaries, a summary is replayed whatever the filters say.
        (Some(sel), _) => scratch.extend(records.iter().filter(|r| {
            !covered(r)
                && (sel.matches(r, data) || (sel.summaries && r.kind_is(data, memory::SUMMARY)))
        })),
        (None, true) => scratch.extend(records.iter().filter(|r| !covered(r))),
        (None, false) => scratch.extend_from_slice(records),
    }
    if !ordered {
        order::sort_records(scratch, false);
    }
    let mut entries = Vec::with_capacity(scratch.len());
    let mut total = 0usize;
    let mut dropped = 0usize;
    for r in scratch.iter() {
        let (key, offset) = (ts_key(r.ts), origin(r));
        let drop = spec.drop_below.is_some_and(|b| (key, offset) < b);
        let len = match drop {
            true => 0,
            false => render::message_len(r, data, spec.format),
        };
        dropped += usize::from(drop);
        total += len;
        entries.push(Entry {
            key,
            offset,
            len: len as u64,
            flags: if drop { DROPPED } else { 0 }
                | if r.is_output() {
                    OUTPUT
                } else if r.kind_is(data, "text_input") {
                    INPUT
                } else if r.kind_is(data, memory::SUMMARY) {
                    SUMMARY
                } else if r.kind_is(data, memory::FACT) {
                    FACT
                } else {
                    0
                },
            tokens: NOT_COUNTED,
        });
    }
    // The records are in (key, offset) order: those dropped lead.
    debug_assert!(entries[..dropped].iter().all(|e| e.flags & DROPPED != 0));
    scratch.drain(..dropped);
    let (bytes, unrendered) = match render_into_fresh(scratch, data, spec.format, total) {
        Some(bytes) => (bytes, 0),
        None => {
            entries.clear();
            (Bytes::new(), total as u64)
        }
    };
    ChunkRender {
        bytes,
        entries,
        memos,
        unrendered,
        first: records.first().map(|r| ts_key(r.ts)),
        newest,
        ordered,
    }
}

/// Writes the messages into memory of their exact size (huge pages when
/// large), shared as `Bytes`; `None` when the memory cannot be had.
fn render_into_fresh(
    records: &[Record],
    data: &[u8],
    format: Format,
    total: usize,
) -> Option<Bytes> {
    const MAPPED: usize = 1 << 20;
    if total >= MAPPED {
        let mut map = crate::buffers::huge_buffer_exact(total).ok()?;
        render::write_each(records, data, format, &mut map[..total]);
        return Some(Bytes::from_owner(map).slice(..total));
    }
    let mut out = crate::buffers::try_zeroed(total)?;
    render::write_each(records, data, format, &mut out);
    Some(Bytes::from(out))
}

/// The chunks' rendered messages joined in file order (see the module
/// documentation).
#[derive(Default)]
pub(super) struct RenderJoin {
    /// Each chunk's rendered bytes, in file order.
    bufs: Vec<Bytes>,
    /// Kept runs, in replay order.
    kept: Vec<Span>,
    /// Late messages, in file order: entry, chunk and byte offset in it.
    late: Vec<(Entry, u32, usize)>,
    /// The summaries and facts, in file order.
    pub(super) memos: Vec<Memo>,
    /// Newest key among kept messages.
    newest_kept: Option<u64>,
    /// Over every record (filtered out or not): the first key, the newest,
    /// and whether they were in order.
    pub(super) first: Option<u64>,
    pub(super) newest: Option<u64>,
    pub(super) ordered: bool,
    pub(super) unrendered: u64,
}

/// Messages `entries`, rendered at `start..end` of chunk `chunk`'s bytes.
struct Span {
    chunk: u32,
    start: usize,
    end: usize,
    entries: Vec<Entry>,
}

impl Piece {
    /// The key of its last message.
    pub(crate) fn last_key(&self) -> u64 {
        self.entries.last().map_or(0, |e| e.key)
    }
}

impl RenderJoin {
    pub(super) fn new() -> Self {
        RenderJoin {
            ordered: true,
            ..RenderJoin::default()
        }
    }

    /// Joins the next chunk in file order.
    pub(super) fn append(&mut self, c: ChunkRender) {
        if let Some(first) = c.first {
            self.ordered &= c.ordered && self.newest.is_none_or(|n| first >= n);
            self.first.get_or_insert(first);
        }
        if let Some(n) = c.newest {
            self.newest = Some(self.newest.map_or(n, |m| m.max(n)));
        }
        self.unrendered += c.unrendered;
        let ChunkRender {
            bytes,
            mut entries,
            memos,
            ..
        } = c;
        self.memos.extend(memos);
        let chunk = self.bufs.len() as u32;
        let split = match self.newest_kept {
            Some(n) => entries.partition_point(|e| e.key < n),
            None => 0,
        };
        let mut at = 0usize;
        for e in &entries[..split] {
            self.late.push((*e, chunk, at));
            at += e.len as usize;
        }
        if split < entries.len() {
            self.newest_kept = entries.last().map(|e| e.key);
            let entries = if split == 0 {
                entries
            } else {
                entries.split_off(split)
            };
            self.kept.push(Span {
                chunk,
                start: at,
                end: bytes.len(),
                entries,
            });
        }
        self.bufs.push(bytes);
    }

    /// The messages in replay order.
    pub(super) fn finish(self, parallel: bool) -> Vec<Piece> {
        let RenderJoin {
            bufs,
            kept,
            mut late,
            ..
        } = self;
        let spans = if late.is_empty() {
            kept
        } else {
            if parallel {
                use rayon::slice::ParallelSliceMut;
                late.par_sort_by_key(|l| l.0.key);
            } else {
                late.sort_by_key(|l| l.0.key);
            }
            merge(kept, late)
        };
        spans
            .into_iter()
            .map(|s| Piece {
                bytes: bufs[s.chunk as usize].slice(s.start..s.end),
                entries: s.entries,
            })
            .collect()
    }
}

/// Kept spans and sorted late messages in replay order: each late message
/// after every kept one with a key at most its own, splitting a span.
fn merge(kept: Vec<Span>, late: Vec<(Entry, u32, usize)>) -> Vec<Span> {
    let mut out = Vec::with_capacity(kept.len() + 2 * late.len());
    let mut late = late.into_iter().peekable();
    for s in kept {
        let (mut idx, mut byte) = (0usize, s.start);
        while let Some((next, ..)) = late.peek() {
            let cut = idx + s.entries[idx..].partition_point(|e| e.key <= next.key);
            if cut == s.entries.len() {
                break;
            }
            let len: u64 = s.entries[idx..cut].iter().map(|e| e.len).sum();
            if cut > idx {
                out.push(Span {
                    chunk: s.chunk,
                    start: byte,
                    end: byte + len as usize,
                    entries: s.entries[idx..cut].to_vec(),
                });
            }
            byte += len as usize;
            idx = cut;
            let bound = s.entries[cut].key;
            while let Some(l) = late.next_if(|l| l.0.key < bound) {
                push_late(&mut out, l);
            }
        }
        if idx == 0 {
            out.push(s);
        } else {
            out.push(Span {
                chunk: s.chunk,
                start: byte,
                end: s.end,
                entries: s.entries[idx..].to_vec(),
            });
        }
    }
    for l in late {
        push_late(&mut out, l);
    }
    out
}

/// Appends one late message: into the last span when that span's bytes
/// end where the message's begin in the same chunk (late records of one
/// chunk that land together), else as a span of its own.
fn push_late(out: &mut Vec<Span>, (e, chunk, start): (Entry, u32, usize)) {
    let end = start + e.len as usize;
    if let Some(last) = out.last_mut()
        && last.chunk == chunk
        && last.end == start
    {
        last.end = end;
        last.entries.push(e);
        return;
    }
    out.push(Span {
        chunk,
        start,
        end,
        entries: vec![e],
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: u64, len: u64) -> Entry {
        Entry {
            key,
            offset: 0,
            len,
            flags: 0,
            tokens: NOT_COUNTED,
        }
    }

    /// A chunk whose messages are one byte each, the byte being the key's
    /// letter, in the given (sorted) key order.
    fn chunk(keys: &[u8]) -> ChunkRender {
        ChunkRender {
            memos: Vec::new(),
            bytes: Bytes::from(keys.to_vec()),
            entries: keys.iter().map(|&k| entry(k as u64, 1)).collect(),
            first: keys.first().map(|&k| k as u64),
            newest: keys.last().map(|&k| k as u64),
            ordered: true,
            unrendered: 0,
        }
    }

    fn joined(chunks: &[&[u8]]) -> Vec<u8> {
        let mut j = RenderJoin::new();
        for c in chunks {
            j.append(chunk(c));
        }
        let pieces = j.finish(false);
        for p in &pieces {
            assert_eq!(
                p.bytes.len() as u64,
                p.entries.iter().map(|e| e.len).sum::<u64>()
            );
        }
        pieces.iter().flat_map(|p| p.bytes.to_vec()).collect()
    }

    #[test]
    fn late_records_split_the_pieces_they_land_in() {
        assert_eq!(joined(&[b"acegi", b"bdfjk"]), b"abcdefgijk");
        assert_eq!(joined(&[b"mn", b"ab", b"op"]), b"abmnop");
        // Ties: a late record goes after the kept ones with its key.
        assert_eq!(joined(&[b"", b"ab", b"", b"aa"]), b"aaab");
        // Late records of one chunk that land together stay one piece.
        let mut j = RenderJoin::new();
        j.append(chunk(b"xyz"));
        j.append(chunk(b"abz"));
        let pieces = j.finish(false);
        let bytes: Vec<&[u8]> = pieces.iter().map(|p| &p.bytes[..]).collect();
        assert_eq!(bytes, [&b"ab"[..], b"xyz", b"z"]);
    }
}
