//! Search over the whole log: the records best matching a query, ranked by
//! BM25 over their terms (a record's terms are those of its JSON string
//! values but the top-level `type` and `session_id`: the words of its
//! prose, stemmed in the index's [`Language`], and its identifiers apart;
//! the rules are in `docs/contract.md`, "Search"), each record given a
//! share of the scores of the records beside it (`rank.rs`), from an index
//! kept next to the log and brought up to date before each search. With an embedding
//! model ([`SearchIndex::with_embedder`]) the search is hybrid: records are
//! also found by meaning, and the two rankings fused (`hybrid/`).
//!
//! ```
//! use wmreplay::search::{SearchIndex, SearchOptions};
//!
//! let dir = std::env::temp_dir().join(format!("wmreplay-doc-search-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let log = dir.join("wm.log");
//! std::fs::write(&log, concat!(
//!     "{\"type\":\"text_input\",\"ts_ms\":1,\"text\":\"Pay the Lisbon invoice on Friday\"}\n",
//!     "{\"type\":\"wm_event\",\"ts_ms\":2,\"e\":\"calendar synced\"}\n",
//! ))?;
//! let mut index = SearchIndex::new(&log);
//! let hits = index.search("lisbon invoice", &SearchOptions::default())?;
//! assert_eq!(hits.len(), 1);
//! assert_eq!((hits[0].offset, hits[0].kind.as_str()), (0, "text_input"));
//! assert!(hits[0].line.contains("Friday"));
//! // Appended lines are found by the next search.
//! std::fs::OpenOptions::new().append(true).open(&log)?
//!     .write_all(b"{\"type\":\"wm_insight\",\"ts_ms\":3,\"text\":\"the invoice was paid\"}\n")?;
//! let hits = index.search("invoice", &SearchOptions::default())?;
//! assert_eq!(hits.len(), 2);
//! # use std::io::Write;
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod analysis;
mod dir;
mod hybrid;
mod index;
mod meta;
pub(crate) mod naive;
mod prior;
mod query;
mod rank;
mod recall;
mod stop_words;
#[cfg(test)]
mod tests;
pub(crate) mod text;
mod when;
mod write;

use std::fs::File;
use std::path::{Path, PathBuf};

pub use analysis::Language;
use analysis::{Analyzer, Terms};
pub use hybrid::{EmbedError, Embedded, Embedder, HybridOptions, VectorsStatus};
pub use index::Refreshed;
use index::{Damaged, Index};
pub use recall::recall_text;
pub(crate) use recall::{query_text, recall_json};

use crate::error::Error;
use crate::parse::LineParser;
use crate::select::Selection;

/// The longest query accepted, in bytes.
pub const MAX_QUERY_BYTES: usize = 4096;
/// The most distinct words a query may have.
pub const MAX_QUERY_WORDS: usize = 64;
/// The most records one search returns.
pub const MAX_LIMIT: usize = 1000;
/// Hits fetched past the limit, so that ties at the cut go in log order.
const TIE_MARGIN: usize = 16;

/// What to look for besides the words, and how many.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SearchOptions {
    /// The most records returned (1 to [`MAX_LIMIT`]; default 10).
    pub limit: usize,
    /// Only records whose `type` is one of these.
    pub kinds: Option<Vec<String>>,
    /// Only records of this `session_id`, or with none.
    pub session: Option<String>,
    /// Only records with `ts_ms` at least this.
    pub since: Option<f64>,
    /// Only records with `ts_ms` at most this.
    pub until: Option<f64>,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            limit: 10,
            kinds: None,
            session: None,
            since: None,
            until: None,
        }
    }
}

impl SearchOptions {
    /// [`SearchOptions::default`] with `limit`.
    pub fn with_limit(limit: usize) -> Self {
        SearchOptions {
            limit,
            ..SearchOptions::default()
        }
    }

    fn filters(&self) -> Selection {
        Selection {
            kinds: self.kinds.clone(),
            session: self.session.clone(),
            since: self.since,
            until: self.until,
            ..Selection::default()
        }
    }
}

/// One record found.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Hit {
    /// Byte offset of its line in the log.
    pub offset: u64,
    /// Its `ts_ms`.
    pub ts_ms: f64,
    /// Its `type`.
    pub kind: String,
    /// Its score, higher is better: its BM25 score plus the shares its
    /// neighbours gave it (`docs/contract.md`, "Search"); in a hybrid
    /// search whose query was embedded, the fused score (its lexical score
    /// over the best one, plus the weight times its cosine's place among
    /// the vectors' candidates).
    pub score: f64,
    /// The line as written (invalid UTF-8 replaced).
    pub line: String,
}

impl Hit {
    /// The hit as a JSON object: `{"offset","ts_ms","type","score","record"}`,
    /// `record` being the line's JSON itself.
    pub fn to_json(&self) -> String {
        let ts = crate::escape::JsNumber::new(self.ts_ms);
        let ts = std::str::from_utf8(ts.as_bytes()).unwrap_or("null");
        let ts = if self.ts_ms.is_finite() { ts } else { "null" };
        let record = record_json(&self.line);
        format!(
            "{{\"offset\":{},\"ts_ms\":{ts},\"type\":{},\"score\":{},\"record\":{record}}}",
            self.offset,
            serde_json::to_string(&self.kind).expect("a string serialises"),
            serde_json::Number::from_f64(self.score).map_or("0".into(), |n| n.to_string()),
        )
    }
}

/// A hit's line as JSON: itself (a record's line is JSON), or, should it
/// have been replaced by invalid bytes, a JSON string of it.
fn record_json(line: &str) -> String {
    if serde_json::from_str::<serde::de::IgnoredAny>(line).is_ok() {
        line.to_string()
    } else {
        serde_json::to_string(line).expect("a string serialises")
    }
}

/// The words searched for in `query` (runs of letters and digits,
/// lowercased), each once, in order:
/// an [`Error::Query`] when there is none, or the query is too long.
pub fn query_words(query: &str) -> Result<Vec<String>, Error> {
    if query.len() > MAX_QUERY_BYTES {
        return Err(Error::Query(format!(
            "the query is {} bytes long; at most {MAX_QUERY_BYTES} are searched",
            query.len()
        )));
    }
    let words = distinct_words(query);
    if words.is_empty() {
        return Err(Error::Query(
            "the query has no word to search for (letters or digits)".into(),
        ));
    }
    if words.len() > MAX_QUERY_WORDS {
        return Err(Error::Query(format!(
            "the query has {} distinct words; at most {MAX_QUERY_WORDS} are searched",
            words.len()
        )));
    }
    Ok(words)
}

/// The words of `text`, each once, in order of first appearance.
fn distinct_words(text: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    text::words(text, false, &mut String::new(), |w| {
        if !words.iter().any(|x| x == w) {
            words.push(w.to_string());
        }
    });
    words
}

fn check_limit(limit: usize) -> Result<(), Error> {
    if limit == 0 || limit > MAX_LIMIT {
        return Err(Error::Query(format!(
            "limit must be 1 to {MAX_LIMIT}, not {limit}"
        )));
    }
    Ok(())
}

/// A log's search index, kept open across searches.
pub struct SearchIndex {
    log: PathBuf,
    index: Index,
    max_depth: usize,
    refuse_links: bool,
    /// The queries' analyser, in the index's language.
    analyzer: Analyzer,
    /// With an embedding model: the vectors, and how they are made.
    hybrid: Option<hybrid::Hybrid>,
}

impl SearchIndex {
    /// The index of `log`, at [`SearchIndex::path_for`]`(log)`. Nothing is
    /// read or made until the first search or [`refresh`](Self::refresh).
    pub fn new(log: impl Into<PathBuf>) -> SearchIndex {
        let log = log.into();
        let path = SearchIndex::path_for(&log);
        SearchIndex::at(log, path, &crate::ReplayOptions::default())
    }

    /// The index of `log` kept at `path`, reading lines as `options` says
    /// (`max_depth`; `refuse_links` refuses a log or an index that is a
    /// symbolic link).
    pub fn at(
        log: impl Into<PathBuf>,
        path: impl Into<PathBuf>,
        options: &crate::ReplayOptions,
    ) -> SearchIndex {
        SearchIndex::in_language(log, path, options, Language::default())
    }

    /// [`at`](Self::at), its words analysed in `language` (an index made
    /// in another is built again at the first search).
    pub fn in_language(
        log: impl Into<PathBuf>,
        path: impl Into<PathBuf>,
        options: &crate::ReplayOptions,
        language: Language,
    ) -> SearchIndex {
        let log = log.into();
        SearchIndex {
            index: Index::new(
                &log,
                path.into(),
                options.max_depth.max(1),
                options.refuse_links,
                language,
            ),
            log,
            max_depth: options.max_depth.max(1),
            refuse_links: options.refuse_links,
            analyzer: Analyzer::new(language),
            hybrid: None,
        }
    }

    /// Where the index of `log` is kept by default: its path with
    /// `.wmreplay.idx` appended.
    pub fn path_for(log: &Path) -> PathBuf {
        let mut p = log.as_os_str().to_owned();
        p.push(".wmreplay.idx");
        PathBuf::from(p)
    }

    /// The index file.
    pub fn path(&self) -> &Path {
        self.index.path()
    }

    /// The log.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Brings the index up to date with the log: indexes the lines
    /// appended since the last call, or the whole log when it was replaced,
    /// truncated or rewritten (or the index cannot be used).
    pub fn refresh(&mut self) -> Result<Refreshed, Error> {
        self.index.refresh(&mut |_, _| {})
    }

    /// [`refresh`](Self::refresh), calling `progress(bytes_done, bytes_total)`
    /// as it goes.
    pub fn refresh_with_progress(
        &mut self,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Refreshed, Error> {
        self.index.refresh(progress)
    }

    /// The best `options.limit` records for `query` that pass the filters,
    /// best first (ties in log order), after a [`refresh`](Self::refresh).
    pub fn search(&mut self, query: &str, options: &SearchOptions) -> Result<Vec<Hit>, Error> {
        // Refused before anything is read or made.
        check_limit(options.limit)?;
        query_words(query)?;
        let terms = self.analyzer.query(query);
        self.refresh()?;
        if self.hybrid.is_some() {
            return self.hybrid_search(query, &terms, options, &|_| false);
        }
        self.search_terms(&terms, options, &|_| false)
    }

    /// Builds the index again after it was found damaged (logged, with why).
    fn rebuild_damaged(&mut self, why: &Damaged) -> Result<(), Error> {
        warn_damaged(self.index.path(), &why.0);
        self.index.discard();
        self.index.refresh(&mut |_, _| {})?;
        Ok(())
    }
}

/// Searches `log` for `query` with its default index (see
/// [`SearchIndex`]).
pub fn search(
    log: impl Into<PathBuf>,
    query: &str,
    options: &SearchOptions,
) -> Result<Vec<Hit>, Error> {
    SearchIndex::new(log).search(query, options)
}

/// What [`read_hit`] found at a hit's offset.
enum Read {
    /// A hit, and what it holds of the words searched for.
    Hit(Hit, prior::Held),
    /// A record the filters leave out.
    Filtered,
    /// Not a record holding any of the words: the index that named it is
    /// damaged (its offsets or postings), or is another log's.
    Wrong(String),
}

/// The record whose line starts at `offset`: a hit if it passes `filters`;
/// [`Read::Wrong`] when `offset` is not where a line starts, the line is
/// not a record, or the record holds none of `terms` (the index said it
/// does; a vector's hit is not held to any).
#[allow(clippy::too_many_arguments)]
fn read_hit(
    file: &File,
    log: &Path,
    offset: u64,
    score: f64,
    filters: &Selection,
    terms: Option<&Terms>,
    analyzer: &mut Analyzer,
    parser: &mut LineParser,
    buf: &mut Vec<u8>,
) -> Result<Read, Error> {
    // From the byte before: a line starts after a `\n` (or at 0).
    let from = offset.saturating_sub(1);
    let mut want = 4096u64;
    loop {
        buf.clear();
        crate::input::read_from(file, from, want, buf)
            .map_err(|e| Error::io(log, "cannot read", e))?;
        let body = &buf[(offset - from) as usize..];
        if memchr::memchr(b'\n', body).is_some() || (buf.len() as u64) < want {
            break;
        }
        want *= 4;
    }
    let wrong = |why: &str| Ok(Read::Wrong(format!("offset {offset}: {why}")));
    // A line's offset is where its record starts: after a `\n`, the
    // whitespace it is trimmed of, or the file's byte-order mark.
    let starts_line = offset == 0
        || buf.first().is_some_and(u8::is_ascii_whitespace)
        || (offset == crate::input::lines::BOM.len() as u64 && {
            let mut head = Vec::new();
            crate::input::read_from(file, 0, offset, &mut head)
                .map_err(|e| Error::io(log, "cannot read", e))?;
            crate::input::lines::content_start(&head) == head.len()
        });
    if !starts_line {
        return wrong("not the start of a line");
    }
    let body = &buf[(offset - from) as usize..];
    let Some(end) = memchr::memchr(b'\n', body) else {
        return wrong("past the log's last whole line");
    };
    let line = &body[crate::input::lines::trim(&body[..end])];
    Ok(judge_line(
        offset, line, score, filters, terms, analyzer, parser,
    ))
}

/// What the record `line` (trimmed, starting at `offset`) is to a search:
/// [`read_hit`] once the line is read.
fn judge_line(
    offset: u64,
    line: &[u8],
    score: f64,
    filters: &Selection,
    terms: Option<&Terms>,
    analyzer: &mut Analyzer,
    parser: &mut LineParser,
) -> Read {
    let wrong = |why: &str| Read::Wrong(format!("offset {offset}: {why}"));
    let Ok(r) = parser.parse(line, 0) else {
        return wrong("not a record");
    };
    let mut held = prior::Held::default();
    if let Some(terms) = terms {
        analyzer.record(line, &mut text::Scratch::default(), |field, t| {
            held.note(terms, field, t);
        });
    }
    if terms.is_some() && !held.any() {
        return wrong("a record holding none of the words searched for");
    }
    if !filters.matches(&r, line) {
        return Read::Filtered;
    }
    Read::Hit(
        Hit {
            offset,
            ts_ms: r.ts_ms(),
            kind: r.kind(line),
            score,
            line: String::from_utf8_lossy(line).into_owned(),
        },
        held,
    )
}

/// Logs an index found damaged (the server's log and stderr may name the
/// path; what a client or a model is told does not).
fn warn_damaged(path: &Path, why: &str) {
    #[cfg(feature = "server")]
    tracing::warn!(index = %path.display(), reason = why, "the search index is damaged; building it again");
    #[cfg(not(feature = "server"))]
    let _ = (path, why);
}
