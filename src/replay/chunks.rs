//! The parallel parse: the log cut into chunks at line ends, workers taking
//! chunks from a shared counter, each chunk's records joined into one
//! huge-page buffer in file order as soon as every earlier chunk is in,
//! and late records set aside for the sort.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use super::chunk_result::ChunkResult;
use super::js_chunk::parse_chunk_js;
use crate::buffers::{SLACK, try_grow_leaving};
use crate::input::lines;
use crate::order;
use crate::parse::js::JsStringifier;
use crate::parse::{LineParser, Record};

use super::rendered::{RenderJoin, RenderSpec, Rendered, render_chunk};
use super::*;

/// Records and stats of a range of a log.
pub struct Parsed {
    /// The records that are at least as new as every record before them, in
    /// file order (so also in `ts_ms` order). Their offsets point into the
    /// log, or into [`Parsed::arena`] when it is set.
    pub records: Vec<Record>,
    /// The other records (late arrivals), in file order: what
    /// [`order::merge_late`] merges into `records`. Empty for a log in order.
    pub late: Vec<Record>,
    /// In [`RecordMode::Js`], the re-serialised records, each preceded by its
    /// line's offset in the log (8 bytes, little-endian; see
    /// [`arena_origin`]).
    pub arena: Option<Vec<u8>>,
    /// Counts and skips (`bytes` and `already_ordered` are left to the caller).
    pub stats: ReplayStats,
    /// Physical lines seen (blank lines included).
    pub lines: u64,
    /// The messages, when they were rendered while parsing
    /// ([`parse_range_rendered`]).
    pub(crate) rendered: Option<Rendered>,
    /// Set when the joined records (or the js arena) could not grow: the
    /// allocation that failed. The parse then went on counting lines but
    /// kept no records (`records`, `late` and `arena` are empty): the
    /// caller reports the error ([`try_replay`](super::try_replay)) or
    /// aborts as an infallible allocation does ([`replay`](super::replay)).
    pub alloc_failed: Option<crate::AllocError>,
}

/// Parses `log[range]`, whose first line is line `first_line` of the file.
pub fn parse_range(
    log: &[u8],
    range: Range<usize>,
    first_line: u64,
    options: &ReplayOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Parsed {
    parse_range_rendered(log, range, first_line, options, None, true, progress)
}

/// Bytes parsed as one chunk, on the calling thread, whatever the thread
/// count: less than a pool's hand-off and wake-ups cost.
const SMALL_RANGE: usize = 64 << 10;

/// [`parse_range`], each chunk's messages also rendered by the worker that
/// parsed it when `render` is given ([`Parsed::rendered`]; see
/// `rendered.rs`); the records are joined only if `records` (the messages
/// do not need them).
pub(crate) fn parse_range_rendered(
    log: &[u8],
    range: Range<usize>,
    first_line: u64,
    options: &ReplayOptions,
    render: Option<&RenderSpec<'_>>,
    records: bool,
    progress: &(dyn Fn(u64) + Sync),
) -> Parsed {
    let js = options.record == RecordMode::Js;
    let estimate = range.len();
    let chunks = match options.chunk_size {
        // A little (an append to a live log): one chunk, parsed here.
        0 if range.len() <= SMALL_RANGE => vec![range.clone()],
        0 => {
            let threads = match options.threads {
                0 => rayon::current_num_threads(),
                n => n,
            };
            let size = (range.len() / (threads * 8).max(1)).clamp(64 << 10, 4 << 20);
            // The last `threads` chunks' worth in chunks an eighth the size:
            // the threads then finish within a small chunk of each other,
            // not a big one (up to 3 ms apart at 4 MiB).
            let tail = (threads * size).min(range.len() / 2);
            let split = match memchr::memchr(b'\n', &log[range.end - tail..range.end]) {
                Some(k) => range.end - tail + k + 1,
                None => range.end,
            };
            let mut chunks = lines::chunks(log, range.start..split, size);
            chunks.extend(lines::chunks(
                log,
                split..range.end,
                (size / 8).max(64 << 10),
            ));
            chunks
        }
        n => lines::chunks(log, range, n),
    };
    // Chunks are taken in file order from a shared counter and joined in
    // file order as they finish (a chunk that finishes before an earlier one
    // waits for it), straight into the final buffers. So a chunk's buffers
    // are free again as soon as it is joined, and the next chunk reuses them:
    // the parse touches fresh memory only for the joined records themselves
    // (in huge pages). Separate buffers per chunk, all alive until a final
    // gather, cost ~29 k page faults for a 1 GiB log, and a second copy of
    // every record in memory.
    let next = AtomicUsize::new(0);
    let join = Mutex::new(Join::new(
        chunks.len(),
        estimate,
        js,
        first_line,
        options.max_skips,
        records,
        render.is_some(),
    ));
    let run = |join: &Mutex<Join>| {
        let mut w = Worker {
            parser: LineParser::with_validator(options.max_depth, options.validator),
            js: js.then(|| JsStringifier::new(options.max_depth)),
            scratch: Vec::new(),
        };
        let mut out = ChunkResult::new(js);
        loop {
            let k = next.fetch_add(1, Ordering::Relaxed);
            let Some(chunk) = chunks.get(k) else { break };
            out.clear();
            match &mut w.js {
                Some(js) => parse_chunk_js(
                    log,
                    chunk.clone(),
                    &mut w.parser,
                    js,
                    options.max_skips,
                    &mut out,
                ),
                None => parse_chunk(
                    log,
                    chunk.clone(),
                    &mut w.parser,
                    options.max_skips,
                    &mut out,
                ),
            }
            if let Some(spec) = render {
                let data = out.arena.as_deref().unwrap_or(log);
                out.rendered = Some(render_chunk(&out.records, data, js, spec, &mut w.scratch));
                if let Some(done) = spec.done {
                    done(chunk.clone());
                }
            }
            progress(chunk.len() as u64);
            let mut j = join.lock().unwrap_or_else(PoisonError::into_inner);
            out = j.finish(k, out);
        }
    };
    // The workers, then the join's end (the late records' sort), in one
    // pool.
    let parallel = options.threads != 1;
    let count = chunks.len();
    if count <= 1 {
        // One chunk (a small append to a live log): here, on this thread.
        // Handing it to the pool costs two thread switches, and the pool's
        // threads spin a while after it.
        run(&join);
        return join
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
            .into_parsed(false);
    }
    run_in_pool(options.threads, move || {
        if parallel {
            let workers = rayon::current_num_threads().min(count);
            rayon::scope(|s| {
                for _ in 0..workers {
                    s.spawn(|_| run(&join));
                }
            });
        } else {
            run(&join);
        }
        join.into_inner()
            .unwrap_or_else(PoisonError::into_inner)
            .into_parsed(parallel)
    })
}

/// A worker thread's reusable parsers (and the sorted copy of a chunk's
/// records it renders from).
struct Worker {
    parser: LineParser,
    js: Option<JsStringifier>,
    scratch: Vec<Record>,
}

/// The chunks' results joined in file order (see [`parse_range`]).
struct Join {
    /// Finished chunks waiting for an earlier one, by chunk index.
    waiting: Vec<Option<ChunkResult>>,
    /// The next chunk to join.
    next: usize,
    /// Joined results whose buffers a worker can take again.
    spare: Vec<ChunkResult>,
    records: Vec<Record>,
    late: Vec<Record>,
    /// The order key of the newest record in `records`.
    newest: u64,
    arena: Option<Vec<u8>>,
    stats: ReplayStats,
    lines: u64,
    first_line: u64,
    max_skips: usize,
    /// Whether records are joined (not only rendered messages).
    keep_records: bool,
    /// The rendered messages joined, when rendering.
    render: Option<RenderJoin>,
    /// The allocation that failed, if one did ([`Parsed::alloc_failed`]).
    alloc_failed: Option<crate::AllocError>,
}

impl Join {
    /// For `chunks` chunks of a range of `len` bytes.
    fn new(
        chunks: usize,
        len: usize,
        js: bool,
        first_line: u64,
        max_skips: usize,
        keep_records: bool,
        rendering: bool,
    ) -> Self {
        let len = if keep_records { len } else { 0 };
        Join {
            waiting: (0..chunks).map(|_| None).collect(),
            next: 0,
            spare: Vec::new(),
            // Room for a record per 256 bytes (~1.4x what the generated
            // corpus needs), reserved, not touched: the pages are faulted in
            // (2 MiB at a time) only as records arrive, and a log of shorter
            // lines grows the buffer (with glibc, by moving its mapping
            // rather than copying it).
            records: crate::buffers::huge_vec_with_capacity(len / 256 + 1),
            late: Vec::new(),
            newest: 0,
            arena: js.then(|| crate::buffers::huge_vec_with_capacity(len + len / 16)),
            stats: ReplayStats::default(),
            lines: 0,
            first_line,
            max_skips,
            keep_records,
            render: rendering.then(RenderJoin::new),
            alloc_failed: None,
        }
    }

    /// Takes chunk `k`'s result, joins every chunk that is now next in file
    /// order, and returns a result whose buffers can hold the next chunk.
    fn finish(&mut self, k: usize, out: ChunkResult) -> ChunkResult {
        self.waiting[k] = Some(out);
        while let Some(mut p) = self.waiting.get_mut(self.next).and_then(Option::take) {
            if let (Some(r), Some(join)) = (p.rendered.take(), &mut self.render) {
                join.append(r);
            }
            self.append(&p);
            self.spare.push(p);
            self.next += 1;
        }
        self.spare
            .pop()
            .unwrap_or_else(|| ChunkResult::new(self.arena.is_some()))
    }

    fn append(&mut self, p: &ChunkResult) {
        let stats = &mut self.stats;
        stats.total_lines += p.stats.total_lines;
        stats.parsed_entries += p.stats.parsed_entries;
        stats.skipped_invalid_json += p.stats.skipped_invalid_json;
        stats.skipped_invalid_shape += p.stats.skipped_invalid_shape;
        stats.unterminated_tail = p.stats.unterminated_tail;
        let base = self.first_line + self.lines;
        for s in &p.stats.skips {
            if stats.skips.len() < self.max_skips {
                stats.skips.push(Skip {
                    line: base + s.line,
                    ..*s
                });
            }
        }
        self.lines += p.lines;
        if !self.keep_records {
            return;
        }
        // The joined buffers grow with the log: a log (or its re-serialised
        // records) too large for memory ends the keeping, not the process,
        // and they stop growing while the workers' buffers still have room.
        let grown = match (&mut self.arena, &p.arena) {
            (Some(arena), Some(bytes)) => try_grow_leaving(arena, bytes.len(), SLACK),
            _ => Ok(()),
        }
        .and_then(|()| try_grow_leaving(&mut self.records, p.records.len(), SLACK));
        if let Err(e) = grown {
            self.give_up(e);
            return;
        }
        let at = match (&mut self.arena, &p.arena) {
            (Some(arena), Some(bytes)) => {
                let at = arena.len() as u64;
                arena.extend_from_slice(bytes);
                at
            }
            _ => 0,
        };
        // Records that keep the running maximum go on in order; the others
        // are set aside, to be sorted and merged in once all are in. The
        // ones in order are copied a run at a time.
        let moved = |r: &Record| Record {
            offset: r.offset + at,
            ..*r
        };
        let mut copy_run = |run: &[Record]| {
            if at == 0 {
                self.records.extend_from_slice(run);
            } else {
                self.records.extend(run.iter().map(moved));
            }
        };
        let mut newest = self.newest;
        let mut run = 0;
        for (k, r) in p.records.iter().enumerate() {
            let key = order::ts_key(r.ts);
            if key >= newest {
                newest = key;
            } else {
                copy_run(&p.records[run..k]);
                if let Err(e) = try_grow_leaving(&mut self.late, 1, SLACK) {
                    self.give_up(e);
                    return;
                }
                self.late.push(moved(r));
                run = k + 1;
            }
        }
        copy_run(&p.records[run..]);
        self.newest = newest;
    }

    /// Stops keeping records after the allocation `e` failed, and frees
    /// what was kept (the counts go on).
    #[cold]
    fn give_up(&mut self, e: crate::AllocError) {
        self.alloc_failed = Some(e);
        self.keep_records = false;
        self.records = Vec::new();
        self.late = Vec::new();
        if let Some(arena) = &mut self.arena {
            *arena = Vec::new();
        }
    }

    fn into_parsed(self, parallel: bool) -> Parsed {
        debug_assert!(
            self.waiting.iter().all(Option::is_none),
            "a chunk was not joined"
        );
        Parsed {
            records: self.records,
            late: self.late,
            arena: self.arena,
            stats: self.stats,
            lines: self.lines,
            alloc_failed: self.alloc_failed,
            rendered: self.render.map(|mut r| Rendered {
                memos: std::mem::take(&mut r.memos),
                first: r.first,
                newest: r.newest,
                ordered: r.ordered,
                unrendered: r.unrendered,
                pieces: r.finish(parallel),
            }),
        }
    }
}

/// The offset in the log of the line whose re-serialised record starts at
/// `offset` of `arena`.
pub fn arena_origin(arena: &[u8], offset: u64) -> u64 {
    let o = offset as usize;
    arena
        .get(o.saturating_sub(8)..o)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

fn parse_chunk(
    log: &[u8],
    range: Range<usize>,
    parser: &mut LineParser,
    max_skips: usize,
    out: &mut ChunkResult,
) {
    #[cfg(all(target_arch = "x86_64", not(feature = "portable")))]
    if crate::parse::has_avx2() {
        // SAFETY: the CPU has AVX2 and BMI1 (what `parse_chunk_avx2` is
        // compiled for), checked just above.
        return unsafe { parse_chunk_avx2(log, range, parser, max_skips, out) };
    }
    parse_chunk_lines(log, range, parser, max_skips, out)
}

/// [`parse_chunk`]'s loop compiled with AVX2 and BMI1, the scanner inlined
/// into it: one feature check per chunk instead of a call per line.
#[cfg(all(target_arch = "x86_64", not(feature = "portable")))]
#[target_feature(enable = "avx2,bmi1")]
fn parse_chunk_avx2(
    log: &[u8],
    range: Range<usize>,
    parser: &mut LineParser,
    max_skips: usize,
    out: &mut ChunkResult,
) {
    parse_chunk_lines(log, range, parser, max_skips, out)
}

#[inline(always)]
fn parse_chunk_lines(
    log: &[u8],
    range: Range<usize>,
    parser: &mut LineParser,
    max_skips: usize,
    out: &mut ChunkResult,
) {
    let ChunkResult {
        records,
        stats,
        lines,
        ..
    } = out;
    let mut line_no = 0u64;
    // UTF-8 is checked in large windows rather than line by line: bytes
    // before `utf8_valid_to` are known valid. Each window starts at a line,
    // ends just after a `\n` (or at the chunk's end) and holds up to 1 MiB of
    // whole lines, or one longer line; an invalid byte ends it early, inside
    // its line, which is then checked (and reported) by the parser, and the
    // next line starts a new window.
    let mut utf8_valid_to = range.start;
    let end = range.end;
    let mut p = range.start;
    while p < end {
        if p >= utf8_valid_to {
            utf8_valid_to = p + lines::utf8_window(&log[p..end]);
        }
        // The common line, an object ending in `\n`, is found and scanned in
        // one pass, without looking for its `\n` first.
        if let Some((outcome, _, newline)) =
            parser.parse_next_line(&log[p..utf8_valid_to], p as u64)
        {
            line_no += 1;
            stats.unterminated_tail = false;
            stats.total_lines += 1;
            match outcome {
                Ok(r) => records.push(r),
                Err(reason) => stats.skip(reason, line_no - 1, p as u64, max_skips),
            }
            p += newline + 1;
            continue;
        }
        // Any other line: split it, trim it, and let the parser decide.
        let (line_end, terminated) = match memchr::memchr(b'\n', &log[p..end]) {
            Some(k) => (p + k, true),
            None => (end, false),
        };
        line_no += 1;
        stats.unterminated_tail = !terminated;
        let raw = &log[p..line_end];
        let start = p;
        p = if terminated { line_end + 1 } else { end };
        let t = lines::trim(raw);
        if t.is_empty() {
            continue;
        }
        stats.total_lines += 1;
        let offset = (start + t.start) as u64;
        let utf8 = line_end <= utf8_valid_to;
        match parser.parse_with(&raw[t], offset, utf8) {
            Ok(r) => records.push(r),
            Err(reason) => stats.skip(reason, line_no - 1, start as u64, max_skips),
        }
    }
    stats.parsed_entries = records.len() as u64;
    *lines = line_no;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::SkipReason;

    /// A chunk result holding one record at `offset` (chunk-relative in js
    /// mode), `lines` lines, and a skip on its line `skip_line` (0-based).
    fn chunk(offset: u64, lines: u64, skip_line: u64, arena: Option<&[u8]>) -> ChunkResult {
        let mut c = ChunkResult::new(arena.is_some());
        c.records.push(Record {
            ts: offset as f64,
            offset,
            len: 1,
            escape_extra: 0,
            flags: 0,
            kind: 0,
        });
        c.stats.total_lines = lines;
        c.stats.parsed_entries = 1;
        c.stats.skip(SkipReason::MissingType, skip_line, 0, 16);
        c.lines = lines;
        if let (Some(a), Some(bytes)) = (&mut c.arena, arena) {
            a.extend_from_slice(bytes);
        }
        c
    }

    #[test]
    fn chunks_finishing_out_of_order_are_joined_in_file_order() {
        let mut j = Join::new(3, 1 << 10, false, 10, 16, true, false);
        // Chunk 2 finishes first, then 0, then 1: nothing is joined until
        // chunk 0 is, and chunk 2 waits for chunk 1.
        let spare = j.finish(2, chunk(300, 5, 4, None));
        assert!(spare.records.is_empty() && j.records.is_empty());
        j.finish(0, chunk(100, 3, 0, None));
        assert_eq!(j.records.len(), 1);
        let spare = j.finish(1, chunk(200, 2, 1, None));
        // A joined chunk's buffers come back for the next chunk (the worker
        // empties them with `clear`), instead of fresh ones.
        assert!(spare.records.capacity() > 0);
        let p = j.into_parsed(false);
        let offsets: Vec<u64> = p.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, [100, 200, 300]);
        // Lines are numbered from line 10 across the chunks: 3 + 2 + 5.
        let lines: Vec<u64> = p.stats.skips.iter().map(|s| s.line).collect();
        assert_eq!(lines, [10, 14, 19]);
        assert_eq!(
            (p.lines, p.stats.total_lines, p.stats.parsed_entries),
            (10, 10, 3)
        );
        assert_eq!(p.stats.skipped_invalid_shape, 3);
    }

    #[test]
    fn js_records_point_into_the_joined_arena() {
        let mut j = Join::new(2, 1 << 10, true, 1, 16, true, false);
        j.finish(1, chunk(2, 1, 0, Some(b"cdef")));
        j.finish(0, chunk(1, 1, 0, Some(b"ab")));
        let p = j.into_parsed(false);
        assert_eq!(p.arena.as_deref(), Some(&b"abcdef"[..]));
        let offsets: Vec<u64> = p.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, [1, 2 + 2]);
    }

    #[test]
    fn a_reused_chunk_result_starts_empty() {
        let mut c = chunk(7, 4, 2, Some(b"xyz"));
        c.stats.unterminated_tail = true;
        c.clear();
        assert!(c.records.is_empty() && c.stats.skips.is_empty());
        assert_eq!(c.stats, ReplayStats::default());
        assert_eq!((c.lines, c.arena.as_deref()), (0, Some(&b""[..])));
    }
}
