//! One log as the server holds it ([`AppState`]): its settings, live
//! replay, writer, state store, the keyed turns running on it and the tokens
//! its turns used; which log a request is for (`logs.rs`); and the replay
//! brought up to date as the routes see it (`snapshot.rs`). The routes and
//! the turn build on this module; it knows nothing of them.

pub(crate) mod logs;
pub(crate) mod snapshot;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use crate::server::config::Config;
use crate::server::errors::ApiError;
use crate::server::upstream::call::Upstream;
use crate::server::upstream::{Provider, Usage};
use crate::server::writer::{Writer, WriterThread};
use crate::state::Store;
use crate::{LiveReplay, WindowStart};

/// One log served: its settings (`cfg.log` is the log), its live replay,
/// its single writer and its session state. With `--log` there is one; with
/// `--log-dir`, one per log asked for, kept in `logs::LogDir`'s LRU.
pub(crate) struct AppState {
    pub(crate) cfg: Config,
    /// The log's id under `--log-dir`.
    pub(crate) id: Option<String>,
    /// The upstream model, when there is one.
    pub(crate) upstream: Option<Arc<Upstream>>,
    pub(crate) system: String,
    pub(crate) live: Arc<Mutex<LiveReplay>>,
    /// The log's single writer, started on the first append.
    pub(crate) writer: std::sync::OnceLock<Writer>,
    /// Every writer thread started, joined at shutdown.
    pub(crate) threads: Arc<Mutex<Vec<WriterThread>>>,
    /// Whether the first append may create the log.
    pub(crate) create: bool,
    /// Rendered bytes the live replay held at its last use.
    pub(crate) live_bytes: std::sync::atomic::AtomicU64,
    /// When the log was last used.
    pub(crate) used: Mutex<std::time::Instant>,
    pub(crate) replays: Arc<Semaphore>,
    /// The cache-stable window's start, as last replayed.
    pub(crate) window: Mutex<Option<WindowStart>>,
    /// The state store, once opened.
    pub(crate) store: Mutex<Option<Arc<Mutex<Store>>>>,
    /// Keyed turns running now.
    pub(crate) inflight: InFlight,
    /// Tokens used since start.
    pub(crate) totals: Mutex<Totals>,
    /// Where the last turn's Anthropic cache breakpoints were.
    pub(crate) cache: Mutex<crate::CacheMemory>,
    /// OpenAI's `prompt_cache_key`, when caching.
    pub(crate) cache_key: Option<String>,
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

    /// The state store, opened on first use.
    pub(crate) fn store(&self) -> Result<Arc<Mutex<Store>>, crate::Error> {
        let mut slot = self.store.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = slot.as_ref() {
            return Ok(s.clone());
        }
        let s = Arc::new(Mutex::new(Store::open(self.store_path())?));
        *slot = Some(s.clone());
        Ok(s)
    }
}

impl AppState {
    pub(crate) fn permit(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        self.replays.clone().try_acquire_owned().map_err(|_| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "busy",
                format!(
                    "{} replays are already running; retry shortly",
                    self.cfg.max_concurrent
                ),
            )
        })
    }

    /// Records the rendered bytes the log's live replay holds (what the
    /// `--log-dir` memory bound counts).
    pub(crate) fn note_held(&self, live: &LiveReplay) {
        self.live_bytes.store(
            live.info().rendered_bytes,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The log's writer, started (and the log created) on first use.
    pub(crate) fn writer(&self) -> std::io::Result<&Writer> {
        if let Some(w) = self.writer.get() {
            return Ok(w);
        }
        let mut threads = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = self.writer.get() {
            return Ok(w);
        }
        if !self.create && std::fs::symlink_metadata(&self.cfg.log).is_err() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the log does not exist (and --create-logs is off)",
            ));
        }
        let (w, thread) = Writer::start(&self.cfg.log, self.cfg.fsync, &self.store_path())?;
        threads.retain(|t| !t.is_finished());
        threads.push(thread);
        Ok(self.writer.get_or_init(|| w))
    }

    pub(crate) fn append_failed(&self, e: &std::io::Error) -> ApiError {
        if e.kind() == std::io::ErrorKind::NotFound {
            return ApiError::new(
                StatusCode::NOT_FOUND,
                "no_such_log",
                format!("{}: {e}", self.cfg.log.display()),
            );
        }
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "append_failed",
            format!("cannot append to {}: {e}", self.cfg.log.display()),
        )
    }
}

/// How a keyed turn ended: the answer's JSON, or the error answered.
pub(crate) type Outcome = Result<Value, ApiError>;

/// Turns running now, by idempotency key: repeats wait on them.
#[derive(Default)]
pub(crate) struct InFlight {
    pub(crate) turns: Mutex<HashMap<String, watch::Sender<Option<Outcome>>>>,
}

impl AppState {
    pub(crate) fn count_usage(&self, u: &Usage) {
        let mut t = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        t.turns += 1;
        t.usage.add(u);
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
