//! The replay driver: cut the log into chunks, parse them in parallel,
//! join the records and stats in file order, and sort.
//!
//! Works on any byte slice with a base offset, so the same code replays a
//! whole log or only the bytes appended to one.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::error::AllocError;
use crate::input::lines::{self};
use crate::order;
use crate::parse::{DEFAULT_MAX_DEPTH, Record, Validator};
use crate::render::request;
use crate::render::{Format, Sequence};
use crate::select::{self, SelectReport, Selection, WindowStart};

mod chunk_result;
mod chunks;
mod js_chunk;
pub(crate) mod rendered;
mod requests;
mod stats;

pub(crate) use chunks::parse_range_rendered;
pub use chunks::{Parsed, arena_origin, parse_range};
pub use stats::{ReplayStats, Skip};

/// Settings of a replay, with documented defaults.
///
/// ```
/// use wmreplay::{RecordMode, ReplayOptions, replay};
///
/// let mut options = ReplayOptions::default();
/// options.threads = 1; // parse on the calling thread
/// options.record = RecordMode::Js; // WM_JSON as JSON.stringify(JSON.parse(line))
/// let log = b"{\"ts_ms\":1e0, \"type\":\"wm_event\"}\n";
/// let replayed = replay(log, &options);
/// let messages = String::from_utf8(replayed.render_messages(wmreplay::Format::OpenAi))?;
/// assert!(messages.contains(r#"WM_JSON: {\"ts_ms\":1,\"type\":\"wm_event\"}"#));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ReplayOptions {
    /// Worker threads: 0 uses rayon's global pool (one per core), 1 parses on
    /// the calling thread, N > 1 uses a pool of N threads, at most
    /// [`MAX_THREADS_PER_CORE`] per core (more are no faster, and cost a
    /// thread each). Default 0.
    pub threads: usize,
    /// Bytes per parallel chunk (cut at line ends); 0 picks a size from the
    /// input and the thread count (about 8 chunks per thread, between 64 KiB
    /// and 4 MiB). Default 0.
    pub chunk_size: usize,
    /// Deepest nesting accepted in a line. Default [`DEFAULT_MAX_DEPTH`].
    pub max_depth: usize,
    /// How many skipped lines to report in detail ([`ReplayStats::skips`]).
    /// Default 16.
    pub max_skips: usize,
    /// How lines are validated (both are exact). Default [`Validator::Scan`].
    pub validator: Validator,
    /// What `WM_JSON` holds: the line as written, or the record re-serialised
    /// as Node.js would. Default [`RecordMode::Raw`].
    pub record: RecordMode,
    /// Keep the late records (those older than a record before them in the
    /// file) apart, sorted, instead of merging them into one list, which
    /// moves every record after the first late one. [`Replay::write_request`]
    /// and [`Replay::write_messages`] read the two lists merged as they
    /// render, so a caller that only streams the replay skips the merge
    /// (about 20 ms of `respond` on the 1 GiB bench log). [`Replay::select`] merges
    /// first, in place; [`Replay::records`] and the `render_*` methods read a
    /// merged copy, made once. Default false.
    pub defer_merge: bool,
    /// Refuse a log that is a symbolic link: it is opened with `O_NOFOLLOW`,
    /// so a link swapped in at any moment is an error, never read through
    /// (for logs in a directory others can write to). Default false.
    pub refuse_links: bool,
}

/// What a message's `WM_JSON: <record>` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecordMode {
    /// The trimmed line exactly as written (contract item 6): byte-stable.
    #[default]
    Raw,
    /// `JSON.stringify(JSON.parse(line.trim()))` exactly as Node.js writes it
    /// for the file read with `fs.readFileSync(path, 'utf8')`: invalid UTF-8
    /// decoded to U+FFFD and lines trimmed of JavaScript's whitespace (so the
    /// lines Node accepts are the ones accepted), duplicate keys collapsed,
    /// V8's key order, JavaScript's numbers. Records are
    /// re-serialised into a buffer the replay owns.
    Js,
}

impl RecordMode {
    /// `raw` or `js`.
    pub fn name(self) -> &'static str {
        match self {
            RecordMode::Raw => "raw",
            RecordMode::Js => "js",
        }
    }
}

impl std::str::FromStr for RecordMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "raw" => Ok(RecordMode::Raw),
            "js" => Ok(RecordMode::Js),
            _ => Err(format!("unknown record mode {s:?} (expected raw or js)")),
        }
    }
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            threads: 0,
            chunk_size: 0,
            max_depth: DEFAULT_MAX_DEPTH,
            max_skips: 16,
            validator: Validator::default(),
            record: RecordMode::Raw,
            defer_merge: false,
            refuse_links: false,
        }
    }
}

/// How long each stage of a replay took.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct StageTimings {
    /// Splitting and parsing lines, and joining records in file order.
    pub parse: Duration,
    /// Ordering records by `ts_ms`.
    pub sort: Duration,
}

/// A replayed log: records in `ts_ms` order, borrowing the log's bytes (or,
/// in [`RecordMode::Js`], pointing into the re-serialised records it owns).
///
/// ```
/// use wmreplay::{Format, ReplayOptions, Selection, replay};
///
/// let log = b"{\"type\":\"text_input\",\"ts_ms\":3,\"text\":\"third\"}\n\
///             {\"type\":\"text_output\",\"ts_ms\":1,\"text\":\"first\"}\n\
///             {\"type\":\"wm_event\",\"ts_ms\":2}\n";
/// let mut replayed = replay(log, &ReplayOptions::default());
/// // Records in `ts_ms` order, each pointing into the log.
/// let order: Vec<f64> = replayed.records().iter().map(|r| r.ts_ms()).collect();
/// assert_eq!(order, [1.0, 2.0, 3.0]);
///
/// // Keep the last two records only, then render them as OpenAI messages.
/// let mut last_two = Selection::default();
/// last_two.tail = Some(2);
/// let report = replayed.select(&last_two, None);
/// assert_eq!(report.selected, 2);
/// let messages = String::from_utf8(replayed.render_messages(Format::OpenAi))?;
/// assert!(messages.starts_with(r#"[{"role":"user","content":"WM_KIND=wm_event\nts_ms: 2\n"#));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Replay<'a> {
    log: &'a [u8],
    /// The re-serialised records ([`RecordMode::Js`]), each preceded by its
    /// line's offset in the log (8 bytes, little-endian).
    arena: Option<Vec<u8>>,
    /// `\n` bytes in the log (for line numbers).
    newlines: u64,
    /// The records in replay order, or with `late` not empty, the records
    /// that were in order in the log.
    records: Vec<Record>,
    /// The late records, sorted, while the merge is deferred
    /// ([`ReplayOptions::defer_merge`]); empty otherwise.
    pub(crate) late: Vec<Record>,
    /// `records` and `late` merged, for [`Replay::records`] while the merge
    /// is deferred.
    merged: std::sync::OnceLock<Vec<Record>>,
    /// Whether merging may use the thread pool.
    parallel: bool,
    stats: ReplayStats,
    timings: StageTimings,
    /// The `wm_facts` message text, once selected with
    /// [`Selection::facts`]: written just before the current request.
    facts: Option<String>,
}

impl<'a> Replay<'a> {
    /// The records, in replay order.
    pub fn records(&self) -> &[Record] {
        if self.late.is_empty() {
            return &self.records;
        }
        self.merged.get_or_init(|| {
            let mut all = Vec::with_capacity(self.records.len() + self.late.len());
            all.extend_from_slice(&self.records);
            order::merge_sorted_late(&mut all, &self.late, self.parallel);
            all
        })
    }

    /// Merges deferred late records into the records, in place.
    fn settle(&mut self) {
        if !self.late.is_empty() {
            order::merge_sorted_late(&mut self.records, &self.late, self.parallel);
            self.late = Vec::new();
            self.merged = std::sync::OnceLock::new();
        }
    }

    /// The records as the render reads them: one list, or two merged.
    pub(crate) fn sequence(&self) -> Sequence<'_> {
        Sequence {
            kept: &self.records,
            late: &self.late,
        }
    }

    /// The `wm_facts` message text the last [`select`](Self::select) with
    /// [`Selection::facts`] made (`None` without live facts): request bodies
    /// write it as a user message just before the current request.
    pub fn facts_text(&self) -> Option<&str> {
        self.facts.as_deref()
    }

    /// The stats.
    pub fn stats(&self) -> &ReplayStats {
        &self.stats
    }

    /// Keeps only the records `sel` selects (filters, then windows), marks
    /// the pending prompt if asked, and reports what it did. `prev` is the
    /// window start remembered from the last turn, for cache-stable trimming
    /// (see [`Selection`]).
    pub fn select(&mut self, sel: &Selection, prev: Option<WindowStart>) -> SelectReport {
        self.settle();
        let (log, newlines) = (self.log, self.newlines);
        let data = self.arena.as_deref().unwrap_or(log);
        let js = self.arena.is_some();
        select::apply(
            &mut self.records,
            data,
            sel,
            prev,
            |o| if js { arena_origin(data, o) } else { o },
            |o| match newlines {
                // Not counted: from the start.
                UNCOUNTED => select::count_newlines(&log[..(o as usize).min(log.len())]) + 1,
                n => select::line_number(log, o, n),
            },
            &mut self.facts,
        )
    }

    /// A replay of `log` whose records, in replay order, are already known
    /// (a parse of the same bytes kept elsewhere: the server's index of a
    /// log, its records before a point). Their offsets are `log`'s; the
    /// stats count them alone. Selection and rendering are the replay's
    /// own.
    #[cfg(feature = "server")]
    pub(crate) fn of_records(log: &'a [u8], records: Vec<Record>) -> Replay<'a> {
        let stats = ReplayStats {
            total_lines: records.len() as u64,
            parsed_entries: records.len() as u64,
            bytes: log.len() as u64,
            already_ordered: true,
            ..ReplayStats::default()
        };
        Replay {
            log,
            arena: None,
            newlines: UNCOUNTED,
            records,
            late: Vec::new(),
            merged: std::sync::OnceLock::new(),
            parallel: true,
            stats,
            timings: StageTimings::default(),
            facts: None,
        }
    }

    /// The offset in the log of the line a record came from (its `offset`
    /// points into the replay's own buffer in [`RecordMode::Js`]).
    pub fn source_offset(&self, r: &Record) -> u64 {
        match &self.arena {
            Some(a) => arena_origin(a, r.offset),
            None => r.offset,
        }
    }

    /// The bytes records point into: the log, or in [`RecordMode::Js`] the
    /// re-serialised records.
    pub fn data(&self) -> &[u8] {
        self.arena.as_deref().unwrap_or(self.log)
    }

    /// The 1-based line number of a byte offset of the log.
    pub fn line_number(&self, offset: u64) -> u64 {
        select::line_number(self.log, offset, self.newlines)
    }

    /// The log's bytes.
    pub fn log(&self) -> &'a [u8] {
        self.log
    }

    /// How long parsing and sorting took.
    pub fn timings(&self) -> StageTimings {
        self.timings
    }

    /// Appends the text of record `r`'s message (what the model reads:
    /// `WM_KIND=…\nts_ms: …\nWM_JSON: …`, unescaped) to `out`; its role is
    /// `assistant` when [`Record::is_output`], else `user`. For embedders that
    /// build their own message objects (the Node.js and Python packages).
    ///
    /// ```
    /// use wmreplay::{ReplayOptions, replay};
    ///
    /// let replayed = replay(b"{\"type\":\"wm_event\",\"ts_ms\":1}\n", &ReplayOptions::default());
    /// let mut text = String::new();
    /// replayed.message_text(&replayed.records()[0], &mut text);
    /// assert_eq!(text, "WM_KIND=wm_event\nts_ms: 1\nWM_JSON: {\"type\":\"wm_event\",\"ts_ms\":1}");
    /// ```
    pub fn message_text(&self, r: &Record, out: &mut String) {
        crate::render::message_text(r, self.data(), out);
    }

    /// The replayed messages alone (JSON array or NDJSON).
    ///
    /// After a selection with [`Selection::facts`], the facts message comes
    /// last (where it stands before the current request in a body); an XML
    /// document does not carry it.
    pub fn render_messages(&self, format: Format) -> Vec<u8> {
        self.try_render_messages(format)
            .unwrap_or_else(|e| e.abort())
    }

    /// [`render_messages`](Self::render_messages), with the [`AllocError`]
    /// instead of an abort when they do not fit in memory.
    pub fn try_render_messages(&self, format: Format) -> Result<Vec<u8>, AllocError> {
        let mut out = request::try_render_messages(self.records(), self.data(), format)?;
        if let Some(facts) = self.facts_message(format) {
            let (_, close) = request::replay_brackets(format);
            out.truncate(out.len() - close.len());
            if !self.records().is_empty() {
                out.extend_from_slice(format.separator());
            }
            out.extend_from_slice(&facts);
            out.extend_from_slice(close);
        }
        Ok(out)
    }

    /// The facts message as a message of `format` (none in XML).
    fn facts_message(&self, format: Format) -> Option<Vec<u8>> {
        let text = self.facts.as_deref().filter(|_| format != Format::Xml)?;
        let mut m = format.open(crate::render::Role::User).to_vec();
        m.extend_from_slice(&request::escaped(text));
        m.extend_from_slice(format.close());
        Some(m)
    }

    /// Streams the replayed messages alone to `w`.
    pub fn write_messages(&self, format: Format, w: &mut dyn Write) -> std::io::Result<()> {
        let Some(facts) = self.facts_message(format) else {
            return request::write_messages(self.sequence(), self.data(), format, w);
        };
        let (open, close) = request::replay_brackets(format);
        w.write_all(open)?;
        crate::render::stream_messages(
            self.sequence(),
            self.data(),
            format,
            true,
            crate::render::STREAM_BATCH,
            w,
        )?;
        if !self.records().is_empty() {
            w.write_all(format.separator())?;
        }
        w.write_all(&facts)?;
        w.write_all(close)
    }
}

/// Most worker threads per core a replay uses, whatever it asks for.
pub const MAX_THREADS_PER_CORE: usize = 4;

/// The worker threads a replay asking for `threads` gets: at most
/// [`MAX_THREADS_PER_CORE`] per core.
pub(crate) fn capped_threads(threads: usize) -> usize {
    threads.min(cores() * MAX_THREADS_PER_CORE)
}

/// The cores this process may use, asked once: the answer is a fact of the
/// process (std reads the cgroup's quota files for it), not of a call.
pub(crate) fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Runs `f` in a pool of `threads` threads (0: rayon's global pool; 1: here),
/// capped ([`capped_threads`]). Each pool size is built once and kept, so
/// replays running at once share it instead of each starting threads.
pub(super) fn run_in_pool<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> = OnceLock::new();
    let threads = capped_threads(threads);
    if threads <= 1 || threads == rayon::current_num_threads() {
        return f();
    }
    let pool = {
        let mut pools = POOLS
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match pools.get(&threads) {
            Some(p) => Some(p.clone()),
            None => match rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
                Ok(p) => {
                    let p = Arc::new(p);
                    pools.insert(threads, p.clone());
                    Some(p)
                }
                Err(_) => None,
            },
        }
    };
    match pool {
        Some(pool) => pool.install(f),
        None => f(),
    }
}

/// [`Replay::newlines`] when the log's `\n` were not counted.
const UNCOUNTED: u64 = u64::MAX;

/// Replays a whole log held in memory.
///
/// The records it keeps take memory in proportion to the log (and, in
/// [`RecordMode::Js`], their re-serialised text about as much as the log):
/// when that cannot be had, the process aborts, as a failed infallible
/// allocation does. [`try_replay`] returns the error instead.
pub fn replay<'a>(log: &'a [u8], options: &ReplayOptions) -> Replay<'a> {
    replay_with_progress(log, options, &|_| {})
}

/// Replays a whole log, calling `progress(bytes)` as chunks finish (from
/// worker threads; the sum of all calls is the log's length). Aborts when
/// its records do not fit in memory, as [`replay`] does.
pub fn replay_with_progress<'a>(
    log: &'a [u8],
    options: &ReplayOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Replay<'a> {
    try_replay_with_progress(log, options, progress).unwrap_or_else(|e| e.abort())
}

/// [`replay`], with the [`AllocError`] instead of an abort when the records
/// it keeps do not fit in memory (a log larger than what is left of memory
/// or of an address-space limit).
///
/// ```
/// use wmreplay::{ReplayOptions, try_replay};
///
/// let log = b"{\"type\":\"wm_event\",\"ts_ms\":1}\n";
/// let replayed = try_replay(log, &ReplayOptions::default())?;
/// assert_eq!(replayed.records().len(), 1);
/// # Ok::<(), wmreplay::AllocError>(())
/// ```
pub fn try_replay<'a>(log: &'a [u8], options: &ReplayOptions) -> Result<Replay<'a>, AllocError> {
    try_replay_with_progress(log, options, &|_| {})
}

/// [`replay_with_progress`], with the [`AllocError`] instead of an abort
/// (see [`try_replay`]).
pub fn try_replay_with_progress<'a>(
    log: &'a [u8],
    options: &ReplayOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Replay<'a>, AllocError> {
    let t0 = Instant::now();
    let start = lines::content_start(log);
    if start > 0 {
        progress(start as u64);
    }
    let parsed = parse_range(log, start..log.len(), 1, options, progress);
    if let Some(e) = parsed.alloc_failed {
        return Err(e);
    }
    let mut records = parsed.records;
    let arena = parsed.arena;
    let mut stats = parsed.stats;
    stats.bytes = log.len() as u64;
    let newlines = parsed.lines - stats.unterminated_tail as u64;
    let t1 = Instant::now();
    stats.already_ordered = parsed.late.is_empty();
    let parallel = options.threads != 1;
    let mut late = parsed.late;
    if !options.defer_merge {
        // The merge grows the records by the late ones.
        crate::buffers::try_grow(&mut records, late.len())?;
    }
    run_in_pool(options.threads, || {
        order::sort_late(&mut late, parallel);
        if !options.defer_merge {
            order::merge_sorted_late(&mut records, &late, parallel);
            late = Vec::new();
        }
    });
    let timings = StageTimings {
        parse: t1 - t0,
        sort: t1.elapsed(),
    };
    Ok(Replay {
        log,
        arena,
        newlines,
        records,
        late,
        merged: std::sync::OnceLock::new(),
        parallel,
        stats,
        timings,
        facts: None,
    })
}
