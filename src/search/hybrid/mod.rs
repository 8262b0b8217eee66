//! Hybrid search: when an embedding model is at hand
//! ([`SearchIndex::with_embedder`]), records are also found by meaning. Each
//! record's prose is embedded once (`job.rs`, batched, on the caller's
//! thread or in the background: at most [`MAX_CATCH_UPS`] indexes at once
//! in a process, the others in turn), its vector kept quantised in a file beside the
//! index (`store.rs`, `quant.rs`); a query is embedded too, and the
//! records nearest to it, by brute-force cosine, are fused with the
//! lexical ranking by reciprocal rank fusion (`fuse.rs`).
//!
//! Nothing here blocks a search on the model: a query whose embedding
//! fails or times out is answered lexically, and a record not embedded
//! yet is found by its words until a later catch-up embeds it. No HTTP
//! either: the model is an [`Embedder`].

mod embedder;
mod fuse;
mod job;
mod pool;
mod quant;
mod store;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

pub use embedder::{EmbedError, Embedder, HybridOptions};

use super::analysis::Terms;
use super::{Hit, Read, SearchIndex, SearchOptions, TIE_MARGIN, read_hit};
use crate::error::Error;
use crate::parse::LineParser;
use pool::{MAX_CATCH_UPS, catch_ups, embed_in_turn};
use store::Store;

/// With a bounded [`HybridOptions::wait`], a search waits for a catch-up
/// of at most this many log bytes (what turns append between searches);
/// a longer one (a first embedding) runs on without it.
const WAIT_FOR_BYTES: u64 = 1 << 20;

/// What [`SearchIndex::embed_pending`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Embedded {
    /// The vectors were made again from the start (none yet, another model,
    /// another log, a damaged file).
    pub rebuilt: bool,
    /// Records added to the vectors.
    pub records: u64,
    /// Log bytes the vectors now cover that they did not.
    pub bytes: u64,
    /// Why embedding stopped short, if it did: the records it did not
    /// reach are found by their words until a later search embeds them.
    pub failed: Option<String>,
}

/// The vectors of a hybrid index, as [`SearchIndex::vectors`] reports them.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct VectorsStatus {
    /// The vectors file.
    pub path: PathBuf,
    /// The model, as [`Embedder::model`] names it.
    pub model: String,
    /// Values per vector (0 before the first).
    pub dimensions: usize,
    /// Records kept with a vector.
    pub records: u64,
    /// Records the model refused, kept without one.
    pub refused: u64,
    /// Log bytes whose records all have an entry.
    pub covered: u64,
    /// A catch-up is running, or waits for one of the process's threads
    /// that embed in the background (a few, however many indexes).
    pub embedding: bool,
    /// Why the last catch-up stopped short, if it did.
    pub last_error: Option<String>,
}

/// A catch-up's state, shared by the searches and the background thread.
#[derive(Default)]
struct Jobs {
    /// A catch-up runs, or waits in the process's [`Pool`] for a thread.
    running: bool,
    /// It waits for a thread (it has not begun).
    queued: bool,
    /// When the last catch-up failed, and why.
    failed: Option<(Instant, String)>,
}

/// What the searches and the background catch-up share.
struct Shared {
    embedder: Arc<dyn Embedder>,
    options: HybridOptions,
    log: PathBuf,
    refuse_links: bool,
    max_depth: usize,
    store: Mutex<Store>,
    jobs: Mutex<Jobs>,
    finished: Condvar,
    /// Set when the index is dropped: a catch-up stops after its round.
    stop: AtomicBool,
}

/// The hybrid part of a [`SearchIndex`].
pub(crate) struct Hybrid {
    shared: Arc<Shared>,
    /// A query's embedding made beforehand ([`QueryEmbedder`]), with its
    /// text: taken by the next search of that text.
    prepared: Option<(String, Option<Vec<f32>>)>,
}

/// Embeds a query without the [`SearchIndex`]: a caller that keeps the
/// index behind a lock embeds first (the model's time, up to the query
/// timeout), then locks it and hands the vector over
/// ([`SearchIndex::use_query_vector`]), so that other searches of the
/// log do not wait on the model.
pub(crate) struct QueryEmbedder(Arc<Shared>);

impl QueryEmbedder {
    /// `text`'s embedding (`None` when it failed or timed out: the search
    /// is then lexical), for a search or recall of `text`.
    pub(crate) fn embed(&self, text: &str) -> (String, Option<Vec<f32>>) {
        let text = super::query_text(text);
        (text.to_string(), self.0.query_vector(text))
    }
}

impl Drop for Hybrid {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
    }
}

impl Shared {
    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn jobs(&self) -> std::sync::MutexGuard<'_, Jobs> {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs a catch-up here, once [`claim`](Self::claim)ed.
    fn catch_up(&self, progress: &mut dyn FnMut(u64, u64)) -> Result<job::Done, Error> {
        let source = job::Source {
            log: &self.log,
            refuse_links: self.refuse_links,
            max_depth: self.max_depth,
        };
        let r = job::catch_up(
            &source,
            &self.store,
            self.embedder.as_ref(),
            &self.options,
            &self.stop,
            progress,
        );
        self.end(match &r {
            Ok(d) => d.failed.clone(),
            Err(e) => Some(e.to_string()),
        });
        r
    }

    /// Ends a catch-up: the index is free again, and `why` it stopped
    /// short, if it did, is kept (for the retry pause and the status).
    fn end(&self, why: Option<String>) {
        let mut jobs = self.jobs();
        jobs.running = false;
        jobs.failed = why.map(|w| {
            warn_failed(&w);
            (Instant::now(), w)
        });
        drop(jobs);
        self.finished.notify_all();
    }

    /// The log bytes the vectors do not cover, when they hold a whole
    /// line (0 otherwise). Brings the store up to date with its file and
    /// the log first.
    fn pending(&self) -> Result<u64, Error> {
        let Some((file, meta)) = crate::input::open_regular(&self.log, self.refuse_links)? else {
            return Ok(0);
        };
        let mut st = self.store();
        let path = st.path().to_path_buf();
        st.sync().map_err(|e| super::meta::err(&path, e))?;
        job::check_log(&mut st, &file, &meta, &self.log)?;
        let covered = st.head.covered;
        drop(st);
        let whole = super::write::has_line(&file, &self.log, covered, meta.len())?;
        Ok(if whole { meta.len() - covered } else { 0 })
    }

    /// Starts a catch-up on a thread of its own when records wait for one
    /// and none runs (nor failed within the retry pause): the log bytes it
    /// has to embed (0 when none is needed or none can start now).
    fn start(self: &Arc<Self>) -> u64 {
        let pending = match self.pending() {
            Ok(p) => p,
            Err(e) => {
                warn_failed(&e.to_string());
                0
            }
        };
        let mut jobs = self.jobs();
        if jobs.running {
            return pending;
        }
        let paused = jobs
            .failed
            .as_ref()
            .is_some_and(|(t, _)| t.elapsed() < self.options.retry_pause);
        if pending == 0 || paused {
            return 0;
        }
        jobs.running = true;
        // Queued when every thread of the pool is taken; both locks are
        // held so that a thread ending now cannot miss it.
        let mut pool = catch_ups();
        if pool.running >= MAX_CATCH_UPS {
            jobs.queued = true;
            pool.queue.push_back(Arc::downgrade(self));
            return pending;
        }
        pool.running += 1;
        drop(pool);
        drop(jobs);
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("wmreplay-embed".into())
            .spawn(move || embed_in_turn(me));
        if spawned.is_err() {
            catch_ups().running -= 1;
            self.jobs().running = false;
            self.finished.notify_all();
            return 0;
        }
        pending
    }

    /// Waits for the running catch-up until `until` (`None`: its end).
    fn wait(&self, until: Option<Instant>) {
        let mut jobs = self.jobs();
        while jobs.running {
            jobs = match until {
                None => self.finished.wait(jobs).unwrap_or_else(|p| p.into_inner()),
                Some(t) => {
                    let left = t.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return;
                    }
                    self.finished
                        .wait_timeout(jobs, left)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
        }
    }

    /// The query's vector; `None` when the model failed or took too long
    /// (the search is then lexical).
    fn query_vector(&self, text: &str) -> Option<Vec<f32>> {
        let mut t = text.trim().to_string();
        job::cut(&mut t, self.options.max_text_bytes);
        if t.is_empty() {
            return None;
        }
        let deadline = Instant::now() + self.options.query_timeout;
        match job::call(self.embedder.as_ref(), &[t], deadline) {
            Ok(mut v) => v.pop(),
            Err(e) => {
                warn_query(&e.to_string());
                None
            }
        }
    }

    /// `v` quantised, when it has the length of the vectors kept.
    fn quantize(&self, v: &[f32]) -> Option<Vec<i8>> {
        let dims = self.store().head.dims as usize;
        let mut q = Vec::new();
        (dims != 0 && v.len() == dims && quant::quantize(v, &mut q).is_some()).then_some(q)
    }

    /// The `m` records nearest to `query`: (offset, cosine without the
    /// query's scale), best first, ties in log order.
    fn nearest(&self, query: &[i8], m: usize) -> Vec<(u64, f64)> {
        let st = self.store();
        if st.head.dims as usize != query.len() {
            return Vec::new();
        }
        quant::top(query, &st.data, &st.scales, m)
            .into_iter()
            .map(|(i, s)| (st.offsets[i], f64::from(s)))
            .collect()
    }
}

impl Hybrid {
    pub(crate) fn new(
        embedder: Arc<dyn Embedder>,
        options: HybridOptions,
        log: &Path,
        path: PathBuf,
        refuse_links: bool,
        max_depth: usize,
    ) -> Hybrid {
        let store = Store::new(path, embedder.model(), max_depth as u64, refuse_links);
        Hybrid {
            shared: Arc::new(Shared {
                embedder,
                options,
                log: log.to_path_buf(),
                refuse_links,
                max_depth,
                store: Mutex::new(store),
                jobs: Mutex::default(),
                finished: Condvar::new(),
                stop: AtomicBool::new(false),
            }),
            prepared: None,
        }
    }
}

impl SearchIndex {
    /// What embeds this index's queries without it: `None` for a lexical
    /// index.
    pub(crate) fn query_embedder(&self) -> Option<QueryEmbedder> {
        let h = self.hybrid.as_ref()?;
        Some(QueryEmbedder(h.shared.clone()))
    }

    /// Hands over a query's embedding made by [`query_embedder`]
    /// (Self::query_embedder): the next search or recall of that text uses
    /// it instead of asking the model.
    pub(crate) fn use_query_vector(&mut self, prepared: (String, Option<Vec<f32>>)) {
        if let Some(h) = self.hybrid.as_mut() {
            h.prepared = Some(prepared);
        }
    }

    /// Makes this a hybrid index: records are also embedded by `embedder`
    /// (their prose, batched) and kept as vectors beside the index
    /// ([`vectors_path_for`](Self::vectors_path_for)); a search fuses the
    /// lexical ranking with the records nearest to the query's vector
    /// (reciprocal rank fusion, k = 60, the vectors' ranks weighted by
    /// [`HybridOptions::vector_weight`]), and a hit's score is then the
    /// fused score. A query whose embedding fails is answered lexically.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Instant;
    /// use wmreplay::search::{EmbedError, Embedder, HybridOptions, SearchIndex, SearchOptions};
    ///
    /// /// A toy model: "car" and "automobile" mean the same thing.
    /// struct Synonyms;
    /// impl Embedder for Synonyms {
    ///     fn model(&self) -> &str { "synonyms-2" }
    ///     fn embed(&self, texts: &[String], _: Instant) -> Result<Vec<Vec<f32>>, EmbedError> {
    ///         Ok(texts.iter().map(|t| {
    ///             let car = t.contains("car") || t.contains("automobile");
    ///             vec![if car { 1.0 } else { 0.0 }, 0.1]
    ///         }).collect())
    ///     }
    /// }
    ///
    /// let dir = std::env::temp_dir().join(format!("wmreplay-doc-hybrid-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let log = dir.join("wm.log");
    /// std::fs::write(&log, concat!(
    ///     "{\"type\":\"text_input\",\"ts_ms\":1,\"text\":\"my car needs new tyres\"}\n",
    ///     "{\"type\":\"text_input\",\"ts_ms\":2,\"text\":\"the invoice is paid\"}\n",
    /// ))?;
    /// let mut index = SearchIndex::new(&log)
    ///     .with_embedder(Arc::new(Synonyms), HybridOptions::default());
    /// // No word in common, found by meaning:
    /// let hits = index.search("automobile repair", &SearchOptions::default())?;
    /// assert_eq!(hits[0].offset, 0);
    /// assert!(SearchIndex::vectors_path_for(index.path()).exists());
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_embedder(mut self, embedder: Arc<dyn Embedder>, options: HybridOptions) -> Self {
        self.hybrid = Some(Hybrid::new(
            embedder,
            options,
            &self.log,
            SearchIndex::vectors_path_for(self.index.path()),
            self.refuse_links,
            self.max_depth,
        ));
        self
    }

    /// Where the vectors of the index at `index` are kept: its path with
    /// `.vec` appended (`LOG.wmreplay.idx.vec`).
    pub fn vectors_path_for(index: &Path) -> PathBuf {
        let mut p = index.as_os_str().to_owned();
        p.push(".vec");
        PathBuf::from(p)
    }

    /// Embeds, on this thread, the records the vectors do not cover yet
    /// (after a catch-up already running), calling `progress(done, total)`
    /// in log bytes; nothing without an embedder. The model failing is not
    /// an error: [`Embedded::failed`] says why, and the records left are
    /// embedded by a later search.
    pub fn embed_pending(&mut self, progress: &mut dyn FnMut(u64, u64)) -> Result<Embedded, Error> {
        let Some(h) = &self.hybrid else {
            return Ok(Embedded::default());
        };
        h.shared.claim();
        let d = h.shared.catch_up(progress)?;
        Ok(Embedded {
            rebuilt: d.rebuilt,
            records: d.records,
            bytes: d.bytes,
            failed: d.failed,
        })
    }

    /// The vectors' state, for a hybrid index (`None` otherwise).
    pub fn vectors(&self) -> Option<VectorsStatus> {
        let h = self.hybrid.as_ref()?;
        let s = &h.shared;
        let jobs = s.jobs();
        let (embedding, last_error) = (jobs.running, jobs.failed.as_ref().map(|f| f.1.clone()));
        drop(jobs);
        let st = s.store();
        let refused = st.scales.iter().filter(|x| **x == 0.0).count() as u64;
        Some(VectorsStatus {
            path: st.path().to_path_buf(),
            model: s.embedder.model().to_string(),
            dimensions: st.head.dims as usize,
            records: st.offsets.len() as u64 - refused,
            refused,
            covered: st.head.covered,
            embedding,
            last_error,
        })
    }

    /// The hybrid search for `query` (its `terms`, checked with the limit
    /// by the caller, the index refreshed): the lexical and the vector
    /// rankings, `depth × limit` deep each, with the filters and `skip`,
    /// fused. Lexical only when the query's embedding fails.
    pub(super) fn hybrid_search(
        &mut self,
        query: &str,
        terms: &Terms,
        options: &SearchOptions,
        skip: &dyn Fn(u64) -> bool,
    ) -> Result<Vec<Hit>, Error> {
        let hybrid = self.hybrid.as_mut().expect("a hybrid index");
        let shared = hybrid.shared.clone();
        let prepared = hybrid.prepared.take().filter(|(t, _)| t == query);
        let pending = shared.start();
        // A bounded wait is for what was appended since the last search; a
        // long catch-up (a first embedding) goes on without holding it up.
        // Nor for one still waiting for a thread (others' first embeddings
        // may hold them for long).
        let until = match shared.options.wait {
            Some(_) if pending > WAIT_FOR_BYTES || shared.jobs().queued => Some(Instant::now()),
            w => w.map(|w| Instant::now() + w),
        };
        // The query is embedded while the records appended are, unless it
        // was beforehand.
        let query_vector = match prepared {
            Some((_, v)) => v,
            None => shared.query_vector(query),
        };
        shared.wait(until);
        let n = options.limit.max(fuse::DEPTH);
        let mut deep = options.clone();
        deep.limit = n;
        let mut lexical = self.search_terms(terms, &deep, skip)?;
        let Some(q) = query_vector.and_then(|v| shared.quantize(&v)) else {
            lexical.truncate(options.limit);
            return Ok(lexical);
        };
        let vector = self.vector_hits(&shared, &q, n, options, skip)?;
        let lex: Vec<(u64, f64)> = lexical.iter().map(|h| (h.offset, h.score)).collect();
        let vec: Vec<(u64, f64)> = vector.iter().map(|h| (h.offset, h.score)).collect();
        let mut by_offset: std::collections::HashMap<u64, Hit> = vector
            .into_iter()
            .chain(lexical)
            .map(|h| (h.offset, h))
            .collect();
        Ok(fuse::fuse(&lex, &vec, shared.options.vector_weight)
            .into_iter()
            .take(options.limit)
            .filter_map(|(offset, score)| {
                let mut h = by_offset.remove(&offset)?;
                h.score = score;
                Some(h)
            })
            .collect())
    }

    /// The `n` records nearest to `query` that pass the filters and
    /// `skip`, best first. Vectors that point where no record is are
    /// another log's: they start over, and none is used.
    fn vector_hits(
        &mut self,
        shared: &Shared,
        query: &[i8],
        n: usize,
        options: &SearchOptions,
        skip: &dyn Fn(u64) -> bool,
    ) -> Result<Vec<Hit>, Error> {
        let Some((file, _)) = crate::input::open_regular(&self.log, self.refuse_links)? else {
            return Ok(Vec::new());
        };
        let filters = options.filters();
        let mut parser = LineParser::new(self.max_depth);
        let mut buf = Vec::new();
        let mut want = n + TIE_MARGIN;
        loop {
            let top = shared.nearest(query, want);
            let mut hits = Vec::new();
            for &(offset, score) in &top {
                if hits.len() == n {
                    break;
                }
                if skip(offset) {
                    continue;
                }
                let read = read_hit(
                    &file,
                    &self.log,
                    offset,
                    score,
                    &filters,
                    None,
                    &mut self.analyzer,
                    &mut parser,
                    &mut buf,
                )?;
                match read {
                    Read::Hit(h, _) => hits.push(h),
                    Read::Filtered => {}
                    Read::Wrong(why) => {
                        let mut st = shared.store();
                        warn_failed(&format!(
                            "the vectors point where no record is ({why}); embedding the log again"
                        ));
                        st.start_over();
                        return Ok(Vec::new());
                    }
                }
            }
            if hits.len() == n || top.len() < want {
                return Ok(hits);
            }
            want = want.saturating_mul(4);
        }
    }
}

/// Logs a catch-up that stopped short.
fn warn_failed(why: &str) {
    #[cfg(feature = "server")]
    tracing::warn!(
        reason = why,
        "embedding records failed; they are found by their words until a later try"
    );
    #[cfg(not(feature = "server"))]
    let _ = why;
}

/// Logs a query answered lexically because its embedding failed.
fn warn_query(why: &str) {
    #[cfg(feature = "server")]
    tracing::warn!(
        reason = why,
        "the query's embedding failed; searching by words only"
    );
    #[cfg(not(feature = "server"))]
    let _ = why;
}
