//! Replay state kept across calls: a log that only grows is parsed once, and
//! each later call parses only the bytes appended since.
//!
//! [`LiveReplay::refresh`] reads what was appended, commits it only up to the
//! last `\n` (a line without one may be a write in progress: it is read
//! again, whole, on a later call and never counted twice), parses it, and
//! renders each new record's message once. Rendered messages are kept as
//! [`Bytes`] segments in replay order; [`LiveReplay::chunks`] hands them out
//! without copying, so a request costs work in proportion to what was
//! appended, not to the log.
//!
//! Records that arrive late (a `ts_ms` below the newest record's) are placed
//! where a one-shot replay puts them: after every record with a key at most
//! theirs, since their file offset is larger than every record already held.
//! A segment is split (zero-copy) to make room. If the file shrinks, is
//! replaced (another device or inode: a rotation) or disappears, the state is
//! rebuilt from scratch; so it is when the bytes already parsed changed (a
//! rewrite in place, even one that also grows the file): whenever the
//! file's length or change times moved, the committed prefix's
//! fingerprint (`input::fingerprint_bytes`: the whole prefix up to 64 KiB;
//! beyond, its first and last 4 KiB and 15 blocks spread between, 68 KiB
//! read whatever the log's size) is checked before anything is appended to
//! the state. So a rewrite is noticed when it touches a small log anywhere,
//! or a larger one's start, end or a sampled block, or shifts the bytes
//! after it (an edit that adds or removes bytes); a same-length change in
//! the middle of a larger log between sampled blocks is not, nor a rewrite
//! that leaves the length and the change times as they were (one within
//! the file system's timestamp granularity of the last look). The check
//! runs when the length, the modification time or the status-change time
//! moved: the last cannot be set back, so a rewrite whose modification
//! time was restored (`cp -p`, `rsync -t`) is checked too.
//!
//! The result is held to a one-shot replay of the committed bytes by tests:
//! same stats, and the same bytes for every message, in the same order.

mod absorb;
#[cfg(feature = "server")]
mod fold;
mod held;
mod prune;
mod reach;
mod segments;
mod selection;
mod view;

use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::error::Error;
use crate::input::{FileIdentity, LogBytes, ReadMode, read_from};
use crate::render::Format;
use crate::replay::{ReplayOptions, ReplayStats};
use crate::select::Selection;
use crate::select::tokens::Tokenizer;
use segments::Segment;

/// What one [`LiveReplay::refresh`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Refresh {
    /// Whether the state was thrown away and rebuilt (first call, shrink,
    /// rotation, or the file disappeared).
    pub rebuilt: bool,
    /// Bytes read from the file in this call.
    pub bytes_read: u64,
    /// Bytes newly committed (up to the last `\n`).
    pub bytes_committed: u64,
    /// Records added.
    pub records_added: u64,
    /// Of those, records placed before the newest record already held.
    pub late_records: u64,
}

impl Refresh {
    /// The report of a build made again: nothing it counted stands.
    fn started_again(self) -> Refresh {
        Refresh {
            rebuilt: self.rebuilt,
            ..Refresh::default()
        }
    }
}

/// What the state holds, for `GET /v1/stats` and the like.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LiveInfo {
    /// File length at the last refresh.
    pub file_len: u64,
    /// Bytes committed (parsed): up to and including the last `\n`.
    pub committed_bytes: u64,
    /// Bytes after the last `\n`, not yet committed.
    pub pending_bytes: u64,
    /// Records held.
    pub records: u64,
    /// Rendered message bytes held.
    pub rendered_bytes: u64,
    /// `Bytes` segments the messages are kept in.
    pub segments: u64,
    /// Times the state was rebuilt from scratch.
    pub rebuilds: u64,
    /// Records that arrived late and were placed before newer ones.
    pub late_records: u64,
}

/// The newest valid summary: its line's offset, its `ts_ms` key, and the
/// (key, offset) its cover ends at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SummaryMemo {
    pub(crate) at: u64,
    pub(crate) key: u64,
    pub(crate) cover: (u64, u64),
}

/// The replay of one log, kept between calls.
///
/// ```
/// use std::io::Write;
/// use wmreplay::{CurrentRequest, Format, LiveReplay, ReplayOptions};
///
/// let dir = std::env::temp_dir().join(format!("wmreplay-doc-live-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let path = dir.join("working_memory.log");
/// std::fs::write(&path, "{\"type\":\"text_input\",\"ts_ms\":1,\"text\":\"hi\"}\n")?;
///
/// let mut live = LiveReplay::new(&path, Format::Anthropic, ReplayOptions::default());
/// let first = live.refresh()?;
/// assert!(first.rebuilt);
/// assert_eq!(first.records_added, 1);
///
/// // Another writer appends; the next refresh parses only the new bytes.
/// let mut f = std::fs::OpenOptions::new().append(true).open(&path)?;
/// f.write_all(b"{\"type\":\"text_output\",\"ts_ms\":2,\"text\":\"hello\"}\n")?;
/// let next = live.refresh()?;
/// assert!(!next.rebuilt);
/// assert_eq!(next.records_added, 1);
/// assert_eq!(live.stats().parsed_entries, 2);
///
/// // The messages are shared `Bytes`: a request body is envelope + chunks.
/// let (head, tail) = wmreplay::request_envelope(
///     Format::Anthropic,
///     "",
///     wmreplay::SYSTEM_RULE,
///     &CurrentRequest { text: "and now?", session_id: None },
/// );
/// let mut body = head;
/// for chunk in live.chunks() {
///     body.extend_from_slice(&chunk);
/// }
/// body.extend_from_slice(&tail);
/// let body = String::from_utf8(body)?;
/// assert!(body.contains("WM_KIND=text_output"));
/// assert!(body.ends_with(r#"user_text: and now?"}]}]}"#));
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct LiveReplay {
    path: PathBuf,
    format: Format,
    options: ReplayOptions,
    identity: Option<(u64, u64)>,
    file_len: u64,
    committed: u64,
    /// Physical lines committed (for line numbers of later skips).
    lines: u64,
    stats: ReplayStats,
    segments: Vec<Segment>,
    records: u64,
    rendered: u64,
    rebuilds: u64,
    late: u64,
    /// Filters applied as records arrive.
    selection: Selection,
    /// The tokenizer the cached entry token counts are for.
    counted_with: Option<Tokenizer>,
    /// Key of the last record parsed (filtered out or not), for
    /// `already_ordered`.
    last_key: Option<u64>,
    /// The newest valid summary parsed (the last in the file).
    summary: Option<SummaryMemo>,
    /// The keyed facts of every record parsed, kept up to date as records
    /// arrive.
    fact_table: crate::select::memory::FactTable,
    /// The facts message of the last selection with facts.
    facts: Option<String>,
    /// `starts[k]`: the index of segment k's first entry among all held
    /// entries (and, last, their count); the first `starts_ok + 1` are
    /// up to date (see [`LiveReplay::starts`]).
    starts: Vec<usize>,
    starts_ok: usize,
    /// The newest `text_input` or `text_output` held (key, offset, flags):
    /// the pending prompt, without a look back over the held entries.
    last_io: Option<(u64, u64, u8)>,
    /// The line number of a pending prompt's offset, once counted.
    pending_line: Option<(u64, u64)>,
    /// Every held message before this (key, offset) was let go for the
    /// state's own window, but the newest summary's.
    let_go_to: Option<(u64, u64)>,
    /// How far past `let_go_to` messages were looked at for the next let
    /// go, and the bytes that would free.
    let_go_seen: Option<((u64, u64), u64)>,
    /// Late records held below `let_go_to` (see `note_stragglers`).
    stragglers: Vec<(u64, u64)>,
    /// Held entries looked at by selections (and let go), for the tests
    /// that hold a turn's work to what was appended and what is sent.
    visits: u64,
    /// [`crate::input::fingerprint_bytes`] of the committed bytes.
    fingerprint: u64,
    /// The file's length and change times at the last refresh.
    seen: Option<(u64, crate::input::Stamp)>,
    /// The summary (offset, cover) the held messages were last pruned for.
    pruned_for: Option<(u64, (u64, u64))>,
    /// A newer summary covers less than the one pruned for: build afresh.
    regressed: bool,
    /// Messages before the own selection's window were let go.
    let_go: bool,
    /// Whether a selection notes the offsets of the records it replays
    /// (for recall), and those of the last one, sorted.
    track: bool,
    selected: Vec<u64>,
    /// During a first build with summaries: the newest summary found by a
    /// look from the end, whose covered records are not rendered.
    skip: Option<(u64, (u64, u64))>,
    /// During a first build with a token window: the records ordered
    /// before this are not rendered (see `reach.rs`).
    drop_below: Option<(u64, u64)>,
}

impl LiveReplay {
    /// A state for the log at `path`, rendering messages in `format`.
    /// Nothing is read until [`refresh`](Self::refresh).
    pub fn new(path: impl Into<PathBuf>, format: Format, options: ReplayOptions) -> Self {
        LiveReplay {
            path: path.into(),
            format,
            options,
            identity: None,
            file_len: 0,
            committed: 0,
            lines: 0,
            stats: ReplayStats {
                already_ordered: true,
                ..ReplayStats::default()
            },
            segments: Vec::new(),
            records: 0,
            rendered: 0,
            rebuilds: 0,
            late: 0,
            selection: Selection::default(),
            counted_with: None,
            last_key: None,
            summary: None,
            fact_table: Default::default(),
            facts: None,
            starts: vec![0],
            starts_ok: 0,
            last_io: None,
            pending_line: None,
            let_go_to: None,
            let_go_seen: None,
            stragglers: Vec::new(),
            visits: 0,
            fingerprint: 0,
            seen: None,
            pruned_for: None,
            regressed: false,
            let_go: false,
            track: false,
            selected: Vec::new(),
            skip: None,
            drop_below: None,
        }
    }

    /// Keeps only the records that pass `selection`'s filters (its windows
    /// and pending mark apply per call, in [`select`](Self::select)), and
    /// shapes what it holds for this selection, so that a turn with it
    /// costs what was appended and what is sent, not the log: with
    /// [`Selection::summaries`], the state lets go of the messages the
    /// newest summary covers (it holds the uncovered tail, not the whole
    /// log); with [`Selection::facts`], `wm_fact` records are held as the
    /// latest value of each key, not as messages; with a window (`tail` or
    /// `max_tokens`), selecting with this same selection lets go of the
    /// messages before the lowest record any of its windows can reach
    /// (about 32 bytes a record stay, for the order); with `max_tokens`
    /// alone (no tail, filters or summaries) a first build over a long log
    /// never renders them (it renders from a bound found at the log's end,
    /// checked to fill the window). A call with a
    /// selection that would replay what was let go is made from a state
    /// of the same log built for that call (a replay of the log), and
    /// leaves this one as it is.
    pub fn with_selection(mut self, selection: Selection) -> Self {
        self.selection = selection;
        self
    }

    /// Has each selection note the offsets of the records it replays
    /// ([`selected_offsets`](Self::selected_offsets)).
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn tracking_selected(mut self) -> Self {
        self.track = true;
        self
    }

    /// The log offsets of the records the last selection replayed (the
    /// newest summary among them), sorted; empty unless tracked.
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn selected_offsets(&self) -> &[u64] {
        &self.selected
    }

    /// The newest valid summary's offset and cover.
    pub(super) fn newest_summary(&self) -> Option<(u64, (u64, u64))> {
        self.summary.map(|m| (m.at, m.cover))
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The format messages are rendered in.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Stats of the committed bytes, as a one-shot replay of them reports
    /// (`bytes` is the committed length; `unterminated_tail` is always false,
    /// since nothing past the last `\n` is committed).
    pub fn stats(&self) -> &ReplayStats {
        &self.stats
    }

    /// What the state holds.
    pub fn info(&self) -> LiveInfo {
        LiveInfo {
            file_len: self.file_len,
            committed_bytes: self.committed,
            pending_bytes: self.file_len.saturating_sub(self.committed),
            records: self.records,
            rendered_bytes: self.rendered,
            segments: self.segments.len() as u64,
            rebuilds: self.rebuilds,
            late_records: self.late,
        }
    }

    /// The rendered messages, in replay order, each followed by the format's
    /// separator: concatenated, they are exactly what a one-shot replay
    /// writes between a request's head and its current-request message —
    /// of what the state holds: with a window selection, the messages no
    /// window reaches are let go (see [`with_selection`](Self::with_selection)).
    /// Cloning a `Bytes` copies nothing.
    pub fn chunks(&self) -> Vec<Bytes> {
        self.segments.iter().map(|s| s.bytes.clone()).collect()
    }

    /// The `wm_facts` message text of the last selection made with
    /// [`Selection::facts`] (`None` without a live key): a body writes it
    /// just before the current request.
    pub fn facts_text(&self) -> Option<&str> {
        self.facts.as_deref()
    }

    /// The `wm_facts` message text of the facts held now, whatever the
    /// selection (`None` without a live key): read from what was parsed,
    /// without a replay. Call [`refresh`](Self::refresh) first.
    pub fn current_facts(&self) -> Option<String> {
        self.fact_table.message_now()
    }

    /// The newest `ts_ms` among the latest facts of `keys` (see
    /// [`Selection::facts`]), from what was parsed. Call
    /// [`refresh`](Self::refresh) first.
    pub(crate) fn newest_fact_ts<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k str>,
    ) -> Option<f64> {
        keys.into_iter()
            .filter_map(|k| self.fact_table.latest_ts(k))
            .reduce(f64::max)
    }

    /// Rendered bytes held (the sum of the chunks' lengths).
    pub fn rendered_len(&self) -> u64 {
        self.rendered
    }

    /// Brings the state up to date ([`refresh`](Self::refresh)), then the
    /// whole request body in one buffer: the envelope of
    /// [`request_envelope`](crate::request_envelope) around every message
    /// held, in this replay's format. A server that streams its responses
    /// would send [`chunks`](Self::chunks) instead, without the copy.
    pub fn request_body(
        &mut self,
        system: &str,
        current: &crate::CurrentRequest<'_>,
    ) -> Result<Vec<u8>, Error> {
        self.refresh()?;
        let (head, tail) = crate::request_envelope(self.format, "", system, current);
        let chunks = self.chunks();
        let len = head.len() + tail.len() + chunks.iter().map(Bytes::len).sum::<usize>();
        let mut body = Vec::new();
        body.try_reserve_exact(len)
            .map_err(|_| Error::out_of_memory(&self.path, len as u64))?;
        body.extend_from_slice(&head);
        for c in &chunks {
            body.extend_from_slice(c);
        }
        body.extend_from_slice(&tail);
        Ok(body)
    }

    fn reset(&mut self) {
        let rebuilds = self.rebuilds + 1;
        let track = self.track;
        let visits = self.visits;
        *self = LiveReplay::new(
            std::mem::take(&mut self.path),
            self.format,
            self.options.clone(),
        )
        .with_selection(std::mem::take(&mut self.selection));
        self.rebuilds = rebuilds;
        self.track = track;
        self.visits = visits;
    }

    /// Brings the state up to date with the file: parses what was appended
    /// since the last call, or rebuilds from scratch when the file shrank,
    /// was replaced or disappeared.
    pub fn refresh(&mut self) -> Result<Refresh, Error> {
        self.refresh_to(u64::MAX)
    }

    /// Like [`refresh`](Self::refresh), but reads nothing at or past byte
    /// `limit`: the state becomes the replay of the file's first `limit`
    /// bytes (up to their last `\n`). The server uses it to replay the log
    /// exactly as it stood before a turn's own line, whatever was appended
    /// after it. A state already committed past `limit` stays as it is.
    ///
    /// A file rewritten or truncated while it is read
    /// ([`Error::Changed`]) is read again as it is then, up to
    /// three times in all, before the error is returned.
    pub fn refresh_to(&mut self, limit: u64) -> Result<Refresh, Error> {
        let mut tries = 1;
        loop {
            match self.refresh_once(limit) {
                Err(Error::Changed { .. }) if tries < 3 => tries += 1,
                r => return r,
            }
        }
    }

    fn refresh_once(&mut self, limit: u64) -> Result<Refresh, Error> {
        let mut report = Refresh::default();
        let Some((file, meta)) = crate::input::open_regular(&self.path, self.options.refuse_links)?
        else {
            if self.identity.is_some() || self.committed > 0 {
                self.reset();
                report.rebuilt = true;
            }
            return Ok(report);
        };
        let identity = crate::input::identity_of(&meta);
        let id = (identity.dev, identity.inode);
        if self.identity != Some(id) || meta.len() < self.committed {
            if self.identity.is_some() {
                self.reset();
            }
            report.rebuilt = true;
            self.identity = Some(id);
            return self.build(report, limit);
        }
        // Grown or touched since the last look: the bytes already held must
        // still be the file's (a rewrite in place is not an append).
        let seen = (meta.len(), crate::input::Stamp::of(&meta));
        if self.committed > 0 && self.seen != Some(seen) {
            let now = crate::input::fingerprint_file(&file, self.committed)
                .map_err(|e| Error::io(&self.path, "cannot read", e))?;
            if now != Some(self.fingerprint) {
                self.reset();
                report.rebuilt = true;
                self.identity = Some(id);
                return self.build(report, limit);
            }
        }
        self.seen = Some(seen);
        self.file_len = meta.len();
        let end = meta.len().min(limit);
        if end <= self.committed {
            return Ok(report);
        }
        let base = self.committed;
        let want = end - base;
        let mut buf = Vec::new();
        usize::try_from(want)
            .ok()
            .and_then(|w| buf.try_reserve_exact(w).ok())
            .ok_or_else(|| Error::out_of_memory(&self.path, want))?;
        read_from(&file, base, want, &mut buf)
            .map_err(|e| Error::io(&self.path, "cannot read", e))?;
        report.bytes_read = buf.len() as u64;
        self.file_len = base + buf.len() as u64;
        // Nothing committed yet: the file's start, where a byte-order mark
        // is dropped (it may have been written before the first line ended).
        let start = if base == 0 {
            crate::input::lines::content_start(&buf)
        } else {
            0
        };
        if let Err(e) = self.absorb(&buf, start, base, &mut report, None) {
            // Counted but not placed: start over on the next call.
            self.reset();
            return Err(e);
        }
        if report.bytes_committed > 0 {
            self.fingerprint = crate::input::fingerprint_file(&file, self.committed)
                .map_err(|e| Error::io(&self.path, "cannot read", e))?
                .unwrap_or(0);
        }
        if self.regressed {
            // Records let go for an earlier summary are replayed again.
            self.reset();
            report.rebuilt = true;
            self.identity = Some(id);
            return self.build(report, limit);
        }
        Ok(report)
    }

    /// A first (or fresh) build: the whole file, mapped.
    fn build(&mut self, report: Refresh, limit: u64) -> Result<Refresh, Error> {
        self.build_with(report, limit, true)
    }

    /// [`build`](Self::build); `skip`: with summaries, leave what the newest
    /// one covers unrendered.
    fn build_with(
        &mut self,
        mut report: Refresh,
        limit: u64,
        skip: bool,
    ) -> Result<Refresh, Error> {
        let log = LogBytes::open_with(&self.path, ReadMode::Auto, self.options.refuse_links)?;
        let all = log.bytes();
        let bytes = &all[..all.len().min(usize::try_from(limit).unwrap_or(usize::MAX))];
        if let Some(FileIdentity { dev, inode, .. }) = log.identity() {
            self.identity = Some((dev, inode));
        }
        report.bytes_read = bytes.len() as u64;
        self.file_len = all.len() as u64;
        let start = crate::input::lines::content_start(bytes);
        // Each chunk's pages of the map are dropped once its messages are
        // rendered: the map and the messages are not both held whole.
        let release = |r: std::ops::Range<usize>| log.release_range(r);
        // With summaries, what the newest one covers is never rendered.
        self.skip = (skip && self.selection.summaries)
            .then(|| prune::newest_summary(bytes, &self.options))
            .flatten();
        // With a token window, what no window can reach is not rendered.
        self.drop_below = skip.then(|| self.reach_bound(bytes)).flatten();
        let absorbed = self.absorb(bytes, start, 0, &mut report, Some(&release));
        let skipped = self.skip.take();
        let dropped = self.drop_below.take();
        if let Err(e) = absorbed {
            self.reset();
            return Err(e);
        }
        if let Some(bound) = dropped
            && !self.reached_within(bound)
        {
            // The kept messages do not fill the window: render them all.
            self.reset();
            return self.build_with(report.started_again(), limit, false);
        }
        if skipped.is_some() && skipped != self.pruned_for {
            // The parse found another newest summary than the look from the
            // end did: build again, rendering everything.
            self.reset();
            return self.build_with(report.started_again(), limit, false);
        }
        self.fingerprint = crate::input::fingerprint_bytes(&bytes[..self.committed as usize]);
        if let Ok(m) = std::fs::metadata(&self.path) {
            self.seen = Some((m.len(), crate::input::Stamp::of(&m)));
        }
        if let Err(e) = log.verify() {
            // Read from a file that changed under the map: start over on the
            // next call rather than keep a mix.
            self.reset();
            return Err(e);
        }
        Ok(report)
    }
}
