//! One log as the server holds it ([`AppState`]): its settings, live
//! replay, writer, state store, the keyed turns running on it and the tokens
//! its turns used; which log a request is for (`logs.rs`); and the replay
//! brought up to date as the routes see it (`snapshot.rs`). The routes and
//! the turn build on this module; it knows nothing of them.

pub(crate) mod budget;
mod claims;
pub(crate) mod compact;
pub(crate) mod compactor;
pub(crate) mod facts;
pub(crate) mod files;
pub(crate) mod floors;
pub(crate) mod index;
pub(crate) mod logs;
pub(crate) mod memory_edit;
pub(crate) mod snapshot;
pub(crate) mod writes;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::server::config::Config;
use crate::server::errors::ApiError;
use crate::server::upstream::call::Upstream;
use crate::server::upstream::{Provider, Usage};
use crate::server::writer::{LogWriter, Writer, WriterThread};
use crate::state::Store;
use crate::{LiveReplay, WindowStart};

pub(crate) use claims::{Claim, Claimed, Outcome, Turns};
pub(crate) use floors::Floors;

tokio::task_local! {
    /// How stale (ms) the log a request read may be, when it was read from
    /// a cache its stream could not confirm; the router adds it to the
    /// response as `x-wmreplay-stale-ms`.
    pub(crate) static STALE: std::cell::Cell<Option<u64>>;
}

/// One log served: its settings (`cfg.log` is the log), its live replay,
/// its single writer and its session state. With `--log` there is one; with
/// `--log-dir`, one per log asked for, kept in `logs::LogDir`'s LRU.
pub(crate) struct AppState {
    pub(crate) cfg: Config,
    /// The log's id under `--log-dir`.
    pub(crate) id: Option<String>,
    /// The upstream model, when there is one.
    pub(crate) upstream: Option<Arc<Upstream>>,
    /// The embedding model of hybrid search (`--embed-upstream`), if any.
    pub(crate) embedder: Option<Arc<dyn crate::search::Embedder>>,
    pub(crate) system: String,
    pub(crate) live: Arc<Mutex<LiveReplay>>,
    /// The log's single writer, started on the first append.
    pub(crate) writer: std::sync::OnceLock<Box<dyn LogWriter>>,
    /// Held while the writer starts (it opens the log and its store, and
    /// may wait on them): this log's alone, so no other log's first append
    /// waits on it.
    pub(crate) writer_start: Mutex<()>,
    /// Every writer thread started, joined at shutdown.
    pub(crate) threads: Arc<Mutex<Vec<WriterThread>>>,
    /// Whether the first append may create the log.
    pub(crate) create: bool,
    /// Rendered bytes the live replay held at its last use.
    pub(crate) live_bytes: std::sync::atomic::AtomicU64,
    /// Bytes of the log the live replay had read at its last use.
    pub(crate) committed: std::sync::atomic::AtomicU64,
    /// When the log was last used.
    pub(crate) used: Mutex<std::time::Instant>,
    pub(crate) replays: Arc<Semaphore>,
    /// The cache-stable window's start, as last replayed.
    pub(crate) window: Mutex<Option<WindowStart>>,
    /// The state store, once opened.
    pub(crate) store: Mutex<Option<Arc<Mutex<Store>>>>,
    /// The turns the server runs (every log's: shared).
    pub(crate) turns: Arc<Turns>,
    /// The server's memory budget (shared).
    pub(crate) budget: Arc<budget::Budget>,
    /// Tokens used since start.
    pub(crate) totals: Mutex<Totals>,
    /// Where the last turn's Anthropic cache breakpoints were.
    pub(crate) cache: Mutex<crate::CacheMemory>,
    /// OpenAI's `prompt_cache_key`, when caching.
    pub(crate) cache_key: Option<String>,
    /// Folds into summaries (`--compact-at`).
    pub(crate) compactor: compactor::Compactor,
    /// The log's search index, opened on first use.
    pub(crate) search: Arc<Mutex<Option<crate::search::SearchIndex>>>,
    /// Whether the state store or search index is open (`files.rs`).
    pub(crate) files: files::Files,
    /// Held by a memory-tool command from reading the files to appending
    /// its writes, so that two commands never edit the same version.
    pub(crate) memory: tokio::sync::Mutex<()>,
    /// The inspector page's index of the log's records (`index.rs`), built
    /// on the page's first request.
    pub(crate) index: Arc<Mutex<index::LogIndex>>,
    /// Where the log's sessions begin, as the history lookups found.
    pub(crate) history_floors: floors::Floors,
    /// Set when the server starts to shut down (shared).
    pub(crate) closing: Arc<std::sync::atomic::AtomicBool>,
    /// With `--jetstream`: the stream the log lives in.
    #[cfg(feature = "jetstream")]
    pub(crate) fleet: Option<Arc<crate::server::writer::jetstream::Fleet>>,
}

impl AppState {
    /// Whether requests carry Anthropic cache breakpoints.
    pub(crate) fn marks_cache(&self) -> bool {
        self.cfg.cache && self.cfg.provider == Provider::Anthropic
    }

    pub(crate) fn cache_policy(&self) -> crate::CachePolicy {
        crate::CachePolicy {
            ttl: self.cfg.cache_ttl,
            ..Default::default()
        }
    }

    pub(crate) fn store_path(&self) -> PathBuf {
        self.cfg
            .state
            .clone()
            .unwrap_or_else(|| Store::path_for(&self.cfg.log))
    }

    /// Whether the log and its store may be symbolic links: not under
    /// `--log-dir`, whose files are opened without following any.
    pub(crate) fn follows_links(&self) -> bool {
        self.cfg.log_dir.is_none()
    }

    /// Opens the search index into `slot` unless open: kept open from the
    /// first search on (next to the log; under `--log-dir` no link is
    /// followed); hybrid with an embedding model (its vectors next to the
    /// index).
    fn open_search(&self, slot: &mut Option<crate::search::SearchIndex>) {
        if slot.is_none() {
            let mut index = crate::search::SearchIndex::in_language(
                &self.cfg.log,
                crate::search::SearchIndex::path_for(&self.cfg.log),
                &self.cfg.replay,
                self.cfg.language,
            );
            if let (Some(e), Some(c)) = (&self.embedder, &self.cfg.embed) {
                index = index.with_embedder(e.clone(), c.hybrid.clone());
            }
            *slot = Some(index);
            self.files.opened();
        }
    }

    /// `f` on the search index, for a search or recall of `text`;
    /// blocking. With an embedding model, `text` is embedded first,
    /// without the index's lock, so that other searches of this log do not
    /// wait on the model (up to --embed-timeout) while it answers.
    pub(crate) fn with_search_index<T>(
        &self,
        text: &str,
        f: impl FnOnce(&mut crate::search::SearchIndex) -> T,
    ) -> T {
        let embedder = {
            let mut slot = self.search.lock().unwrap_or_else(|p| p.into_inner());
            self.open_search(&mut slot);
            slot.as_ref().and_then(|i| i.query_embedder())
        };
        let prepared = embedder.map(|e| e.embed(text));
        // Opened again if its files were closed (`--max-open-logs`) while
        // the query was embedded.
        let mut slot = self.search.lock().unwrap_or_else(|p| p.into_inner());
        self.open_search(&mut slot);
        let idx = slot.as_mut().expect("open_search opens the index");
        if let Some(p) = prepared {
            idx.use_query_vector(p);
        }
        f(idx)
    }

    /// A 404 when the log does not exist and may not be made
    /// (`--create-logs false`): a route that would open its state store
    /// (and so make the store's files) answers this first. As for the
    /// writer, only a log this process writes alone: a log kept in a stream
    /// exists whether or not its local copy does yet.
    pub(crate) fn refuse_missing(&self) -> Result<(), ApiError> {
        if !self.missing_and_not_to_make() {
            return Ok(());
        }
        Err(self.append_failed(&std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the log does not exist (and --create-logs is off)",
        )))
    }

    /// The log does not exist, this process writes it alone, and it may
    /// not be made.
    fn missing_and_not_to_make(&self) -> bool {
        !self.create && self.writes_locally() && std::fs::symlink_metadata(&self.cfg.log).is_err()
    }

    /// The state store, opened on first use.
    pub(crate) fn store(&self) -> Result<Arc<Mutex<Store>>, crate::Error> {
        let mut slot = self.store.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = slot.as_ref() {
            return Ok(s.clone());
        }
        // A route that may meet a missing log refuses it first, as a 404
        // ([`refuse_missing`](Self::refuse_missing)); any other still makes
        // no state store beside a log that may not be made.
        if self.missing_and_not_to_make() {
            return Err(crate::Error::io(
                &self.cfg.log,
                "cannot open its state store",
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the log does not exist (and --create-logs is off)",
                ),
            ));
        }
        let s = Store::open_refusing_links(self.store_path(), !self.follows_links())?;
        let s = Arc::new(Mutex::new(s));
        *slot = Some(s.clone());
        self.files.opened();
        Ok(s)
    }
}

impl AppState {
    pub(crate) fn permit(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        self.replays.clone().try_acquire_owned().map_err(|_| {
            let mut e = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "busy",
                format!(
                    "{} replays are already running; retry shortly",
                    self.cfg.max_concurrent
                ),
            );
            e.retry_after = Some(std::time::Duration::from_secs(1));
            e
        })
    }

    /// Records the rendered bytes the log's live replay holds, and what
    /// its history lookups keep (what the `--log-dir` memory bound counts).
    pub(crate) fn note_held(&self, live: &LiveReplay) {
        let info = live.info();
        let held = info.rendered_bytes + self.history_floors.bytes();
        self.live_bytes
            .store(held, std::sync::atomic::Ordering::Relaxed);
        self.committed
            .store(info.committed_bytes, std::sync::atomic::Ordering::Relaxed);
    }

    fn log_len(&self) -> u64 {
        std::fs::metadata(&self.cfg.log).map_or(0, |m| m.len())
    }

    /// Memory for bringing the replay up to date (the log read since its
    /// last use), from the budget.
    pub(crate) fn admit_replay(&self) -> Result<budget::Reserved, ApiError> {
        let read = self.committed.load(std::sync::atomic::Ordering::Relaxed);
        let new = self.log_len().saturating_sub(read);
        self.budget.admit(
            new * budget::REPLAY_FACTOR,
            "bringing the replay up to date",
        )
    }

    /// Memory for replaying the log's first `bytes` afresh, from the budget.
    pub(crate) fn admit_fresh_replay(&self, bytes: u64) -> Result<budget::Reserved, ApiError> {
        self.budget
            .admit(bytes * budget::REPLAY_FACTOR, "replaying the log afresh")
    }

    /// Memory for a session delta (at most the whole log), from the budget.
    pub(crate) fn admit_prepare(&self) -> Result<budget::Reserved, ApiError> {
        self.budget
            .admit(self.log_len() * budget::PREPARE_FACTOR, "preparing a delta")
    }

    /// Reads a request's body within the body limits, its memory reserved
    /// from the budget first (held until the returned reservation drops).
    pub(crate) async fn read_body(
        &self,
        req: axum::extract::Request,
    ) -> Result<(bytes::Bytes, budget::Reserved), ApiError> {
        self.read_body_up_to(req, self.cfg.body_limit).await
    }

    /// [`read_body`](Self::read_body) with a limit of its own (the
    /// providers' routes take what the providers take).
    pub(crate) async fn read_body_up_to(
        &self,
        req: axum::extract::Request,
        limit: usize,
    ) -> Result<(bytes::Bytes, budget::Reserved), ApiError> {
        let (_, timeout) = self.cfg.body_limits();
        let declared = req
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let bytes = declared.unwrap_or(limit as u64).min(limit as u64);
        let held = self
            .budget
            .admit(bytes * budget::BODY_FACTOR, "reading the request body")?;
        let body = crate::server::errors::read_body((limit, timeout), req).await?;
        Ok((body, held))
    }

    /// Whether the log is this process's to write: its writer appends to
    /// the file (not to a stream other replicas write too).
    pub(crate) fn writes_locally(&self) -> bool {
        #[cfg(feature = "jetstream")]
        if self.fleet.is_some() && self.id.is_some() {
            return false;
        }
        true
    }

    /// The log's writer, started (and the log created) on first use.
    pub(crate) fn writer(&self) -> std::io::Result<&dyn LogWriter> {
        // The writer opens its files again for an append after a rest.
        self.files.opened();
        if let Some(w) = self.writer.get() {
            return Ok(w.as_ref());
        }
        let _starting = self.writer_start.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = self.writer.get() {
            return Ok(w.as_ref());
        }
        #[cfg(feature = "jetstream")]
        if let (Some(fleet), Some(id)) = (&self.fleet, &self.id) {
            let w = crate::server::writer::jetstream::JetStreamWriter::new(
                fleet.clone(),
                id,
                &self.cfg.log,
            );
            return Ok(self.writer.get_or_init(|| Box::new(w)).as_ref());
        }
        if !self.create && std::fs::symlink_metadata(&self.cfg.log).is_err() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the log does not exist (and --create-logs is off)",
            ));
        }
        let (w, thread) = Writer::start(
            &self.cfg.log,
            self.cfg.fsync,
            &self.store_path(),
            self.follows_links(),
        )?;
        let mut threads = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        threads.retain(|t| !t.is_finished());
        threads.push(thread);
        Ok(self.writer.get_or_init(|| Box::new(w)).as_ref())
    }

    /// Brings the log's file up to date with its home when the log lives
    /// in a stream (`--jetstream`); nothing otherwise. When the stream
    /// cannot be reached, a log synced before is read as its cache holds
    /// it, and the response says how stale it may be
    /// (`x-wmreplay-stale-ms`); one never synced is a 503.
    pub(crate) async fn catch_up(&self) -> Result<(), ApiError> {
        #[cfg(feature = "jetstream")]
        if self.fleet.is_some() {
            let w = self.writer().map_err(|e| self.append_failed(&e))?;
            if let Err(e) = w.catch_up().await {
                let Some(at) = w.synced_at().filter(|t| *t > 0) else {
                    return Err(self.append_failed(&e));
                };
                let age = crate::append::now_ms().saturating_sub(at);
                tracing::warn!(error = %e, stale_ms = age, "serving the log's cache: its stream is unreachable");
                let _ = STALE.try_with(|s| s.set(Some(age)));
            }
        }
        Ok(())
    }

    pub(crate) fn append_failed(&self, e: &std::io::Error) -> ApiError {
        #[cfg(feature = "jetstream")]
        if crate::server::writer::jetstream::Unavailable::of(e) {
            let mut a = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                e.to_string(),
            );
            a.retry_after = Some(std::time::Duration::from_secs(1));
            return a;
        }
        if e.kind() == std::io::ErrorKind::InvalidInput {
            return ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "batch_too_large",
                e.to_string(),
            );
        }
        if crate::os::is_link_refused(e) {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "log_is_a_link",
                "the log is a symbolic link; under --log-dir none is followed",
            );
        }
        if e.kind() == std::io::ErrorKind::NotFound {
            return ApiError::new(
                StatusCode::NOT_FOUND,
                "no_such_log",
                format!("{}: {e}", self.cfg.log.display()),
            );
        }
        // The path is the operator's to read (in the server's log), not the
        // client's: it tells how the machine is laid out.
        tracing::error!(log = %self.cfg.log.display(), error = %e, "an append failed");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "append_failed",
            format!(
                "cannot append to the log: {}",
                crate::Error::Query(e.to_string()).without_paths()
            ),
        )
    }
}

impl AppState {
    pub(crate) fn count_usage(&self, u: &Usage) {
        let mut t = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        t.turns += 1;
        t.usage.add(u);
        for (kind, n) in [
            ("input", u.input_tokens),
            ("cache_read", u.cache_read_input_tokens),
            ("cache_write", u.cache_creation_input_tokens),
            ("output", u.output_tokens),
        ] {
            if let Some(n) = n {
                metrics::counter!("wmreplay_tokens_total", "kind" => kind).increment(n);
            }
        }
    }
}

/// Token counts summed over the turns answered since the server started.
#[derive(Debug, Default)]
pub(crate) struct Totals {
    pub(crate) turns: u64,
    pub(crate) usage: Usage,
}

/// A `prompt_cache_key` for the log and the selection: the same across
/// restarts, different for another log or another selection.
pub(crate) fn derived_cache_key(cfg: &Config) -> String {
    let path = std::fs::canonicalize(&cfg.log).unwrap_or_else(|_| cfg.log.clone());
    let ident = format!("{}\n{}", path.display(), cfg.selection.window_key());
    format!(
        "wmreplay-{:016x}",
        xxhash_rust::xxh3::xxh3_64(ident.as_bytes())
    )
}

impl AppState {
    /// Takes the log's state store and search index to be closed, lets go
    /// of the inspector index's handle on the log, and tells its writer to
    /// close its files after its queued appends, unless a request is using
    /// the store or either index (`None`: nothing taken). Never waits: it
    /// runs under the lock on every log, and a store being opened (which
    /// may wait seconds on a busy database) or an index being built holds
    /// its lock meanwhile.
    pub(crate) fn close_files(&self) -> Option<files::Closed> {
        fn held<T>(m: &Mutex<T>) -> Option<std::sync::MutexGuard<'_, T>> {
            match m.try_lock() {
                Ok(g) => Some(g),
                Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => None,
            }
        }
        if !self.files.is_open() {
            return None;
        }
        let mut store = held(&self.store)?;
        if store.as_ref().is_some_and(|s| Arc::strong_count(s) > 1) {
            return None;
        }
        let mut search = held(&self.search)?;
        let mut index = held(&self.index)?;
        if let Some(w) = self.writer.get() {
            w.rest();
        }
        index.close_file();
        let closed = files::Closed {
            _store: store.take(),
            _search: search.take(),
        };
        self.files.closed();
        Some(closed)
    }

    /// Brings the inspector's index of the log up to date (`LogIndex::refresh`);
    /// the handle on the log it keeps counts among the log's open files.
    pub(crate) fn refresh_index(&self, idx: &mut index::LogIndex) -> Result<bool, crate::Error> {
        let r = idx.refresh(&self.cfg.log, &self.cfg.replay);
        if idx.file().is_some() {
            self.files.opened();
        }
        r
    }
}
