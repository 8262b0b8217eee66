//! Which log a request is for: the one `--log`, or `DIR/<id>.log` under
//! `--log-dir`, each with its own single writer and live replay.
//!
//! Under `--log-dir`, ids match `[A-Za-z0-9][A-Za-z0-9._-]{0,127}` (so no id
//! names a path outside the directory), no log or state store is a symbolic
//! link (none is followed, even one swapped in mid-request), and the live replays are kept in an LRU bounded by
//! `--max-live-bytes` (the rendered bytes they hold) and dropped after
//! `--idle-timeout` unused; a log dropped and asked for again is rebuilt
//! from its file. Dropping a log's state never loses a write: requests in
//! flight hold it, and its writer finishes its queue before it stops.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use tokio::sync::Semaphore;

use super::{AppState, Totals, Turns, derived_cache_key};
use crate::server::config::Config;
use crate::server::errors::ApiError;
use crate::server::upstream::Provider;
use crate::server::upstream::call::Upstream;
use crate::server::writer::WriterThread;

/// Longest log id.
const MAX_ID: usize = 128;

/// What every log's state shares: the settings, the upstream, the HTTP
/// client, the replay permits and the writer threads.
pub(crate) struct Shared {
    pub(crate) cfg: Config,
    pub(crate) upstream: Option<Arc<Upstream>>,
    /// The embedding model of hybrid search, when there is one.
    pub(crate) embedder: Option<Arc<dyn crate::search::Embedder>>,
    pub(crate) system: String,
    pub(crate) replays: Arc<Semaphore>,
    pub(crate) threads: Arc<Mutex<Vec<WriterThread>>>,
    /// The turns running, over every log.
    pub(crate) turns: Arc<Turns>,
    /// The memory budget of every request's work.
    pub(crate) budget: Arc<super::budget::Budget>,
    /// With `--jetstream`: the stream every log lives in.
    #[cfg(feature = "jetstream")]
    pub(crate) fleet: Option<Arc<crate::server::writer::jetstream::Fleet>>,
    /// With `--token-file`: the scoped tokens.
    pub(crate) tokens: Option<Arc<crate::server::tokens::Tokens>>,
    /// How many logs hold their files open (`files.rs`).
    pub(crate) open_files: Arc<std::sync::atomic::AtomicUsize>,
    /// Set when the server starts to shut down: open event streams end.
    pub(crate) closing: Arc<std::sync::atomic::AtomicBool>,
}

impl Shared {
    /// A fresh state for the log at `log` (nothing read yet).
    pub(crate) fn open(&self, log: PathBuf, id: Option<String>, create: bool) -> AppState {
        let mut cfg = self.cfg.clone();
        cfg.log = log;
        if id.is_some() {
            // Each log keeps its state store next to itself, and no file
            // of the directory is read through a link.
            cfg.state = None;
            cfg.replay.refuse_links = true;
        }
        let live = cfg.live();
        AppState {
            id,
            upstream: self.upstream.clone(),
            embedder: self.embedder.clone(),
            system: self.system.clone(),
            live: Arc::new(Mutex::new(live)),
            writer: std::sync::OnceLock::new(),
            writer_start: Mutex::new(()),
            threads: self.threads.clone(),
            create,
            live_bytes: Default::default(),
            committed: Default::default(),
            used: Mutex::new(Instant::now()),
            replays: self.replays.clone(),
            window: Mutex::new(None),
            store: Mutex::new(None),
            turns: self.turns.clone(),
            budget: self.budget.clone(),
            totals: Mutex::new(Totals::default()),
            compactor: Default::default(),
            search: Default::default(),
            files: super::files::Files::counted_in(self.open_files.clone()),
            memory: Default::default(),
            index: Default::default(),
            history_floors: Default::default(),
            closing: self.closing.clone(),
            #[cfg(feature = "jetstream")]
            fleet: self.fleet.clone(),
            cache: Mutex::new(crate::CacheMemory::default()),
            cache_key: (cfg.cache && cfg.provider == Provider::OpenAi).then(|| {
                cfg.cache_key
                    .clone()
                    .unwrap_or_else(|| derived_cache_key(&cfg))
            }),
            cfg,
        }
    }
}

/// The logs a server serves.
pub(crate) enum Logs {
    /// `--log`: one log, always live.
    One(Arc<AppState>),
    /// `--log-dir`.
    Dir(LogDir),
}

/// Every `DIR/<id>.log`, their live states in an LRU.
pub(crate) struct LogDir {
    /// The directory, canonical.
    pub(crate) root: PathBuf,
    pub(crate) states: Mutex<lru::LruCache<String, Arc<AppState>>>,
    /// Most logs holding their files at once, `--max-open-logs` (each holds
    /// a few file descriptors: see [`open_logs_for`]); the least recently
    /// used close theirs past it.
    pub(crate) max_open: usize,
    /// Most logs holding their files at once that the open-files limit
    /// allows: past it, and none can close theirs, a request gets 503.
    pub(crate) most_open: usize,
    /// The file-descriptor limit that bound comes from.
    pub(crate) fd_limit: u64,
    /// How many logs hold their files now (`files.rs`).
    pub(crate) open_files: Arc<std::sync::atomic::AtomicUsize>,
}

/// File descriptors one open log may hold: the log and its journal's three
/// (the writer's, closed when idle), the state store's three, the replay's.
pub(crate) const FDS_PER_LOG: u64 = 8;

/// Raises the soft limit on open files to the hard one, and returns the
/// limit then in force.
#[cfg(unix)]
pub(crate) fn raise_fd_limit() -> u64 {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) != 0 {
            return 1024;
        }
        if l.rlim_cur < l.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: l.rlim_max,
                rlim_max: l.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                l.rlim_cur = l.rlim_max;
            }
        }
    }
    l.rlim_cur
}

/// Windows has no open-files limit of this kind (handles run to millions):
/// the figure used is the one a raised Unix limit commonly gives.
#[cfg(windows)]
pub(crate) fn raise_fd_limit() -> u64 {
    65_536
}

/// How many logs may be open at once under an open-files limit of `limit`,
/// with room kept for `connections` and 64 more (the runtime, the listener).
pub(crate) fn open_logs_for(limit: u64, connections: usize) -> usize {
    let kept = (connections as u64).min(limit / 2) + 64;
    usize::try_from(limit.saturating_sub(kept) / FDS_PER_LOG)
        .unwrap_or(usize::MAX)
        .max(4)
}

/// States and files let go under the lock on the logs, dropped after it.
#[derive(Default)]
struct LetGo {
    states: Vec<Arc<AppState>>,
    files: Vec<super::files::Closed>,
}

impl LetGo {
    /// Closes the files let go at once (what `--max-open-logs` counts is
    /// given back before the request goes on), and drops the states on a
    /// blocking thread when called from the runtime's (freeing a replay
    /// takes a while, and closing its store may checkpoint the WAL: neither
    /// holds up a worker of the runtime).
    fn release(self) {
        let LetGo { states, files } = self;
        drop(files);
        if states.is_empty() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(move || drop(states))),
            Err(_) => drop(states),
        }
    }
}

/// What the router holds.
pub(crate) struct Server {
    pub(crate) shared: Arc<Shared>,
    pub(crate) logs: Logs,
    /// Set when the one log's first replay has ended (`Err`: how it
    /// failed); under `--log-dir`, set at start (each log is replayed at
    /// its first request).
    pub(crate) ready: Arc<std::sync::OnceLock<Result<(), String>>>,
}

/// Whether `id` is a log id: `[A-Za-z0-9][A-Za-z0-9._-]{0,127}`.
pub(crate) fn valid_id(id: &str) -> bool {
    let b = id.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_ID
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
}

fn bad_id(id: &str) -> ApiError {
    let shown: String = id.chars().take(40).collect();
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_log_id",
        format!(
            "{shown:?} is not a log id: 1 to {MAX_ID} letters, digits, '.', '_' or '-', \
             starting with a letter or digit"
        ),
    )
}

impl LogDir {
    /// The directory `dir` (which must exist), with at most `max_open`
    /// logs holding their files at once (fewer if the open-files limit
    /// `fd_limit` allows fewer), counted in `open_files`.
    pub(crate) fn new(
        dir: &Path,
        max_open: usize,
        fd_limit: u64,
        connections: usize,
        open_files: Arc<std::sync::atomic::AtomicUsize>,
    ) -> std::io::Result<LogDir> {
        let root = std::fs::canonicalize(dir)?;
        if !root.is_dir() {
            return Err(std::io::Error::other(format!(
                "{} is not a directory",
                dir.display()
            )));
        }
        Ok(LogDir {
            root,
            states: Mutex::new(lru::LruCache::unbounded()),
            max_open: max_open.min(open_logs_for(fd_limit, connections)),
            most_open: open_logs_for(fd_limit, connections),
            fd_limit,
            open_files,
        })
    }

    /// The path of log `id`, checked: neither the log nor its state store
    /// may be a symbolic link (none is followed under `--log-dir`; the
    /// files are also opened with `O_NOFOLLOW`, so a link swapped in after
    /// this check is refused too).
    fn path_of(&self, id: &str) -> Result<PathBuf, ApiError> {
        if !valid_id(id) {
            return Err(bad_id(id));
        }
        let path = self.root.join(format!("{id}.log"));
        for p in [path.clone(), crate::state::Store::path_for(&path)] {
            if let Ok(meta) = std::fs::symlink_metadata(&p)
                && meta.file_type().is_symlink()
            {
                let outside = !std::fs::canonicalize(&p)
                    .map(|target| target.starts_with(&self.root))
                    .unwrap_or(false);
                let what = if p == path {
                    "log"
                } else {
                    "state store of log"
                };
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    if outside {
                        "log_outside_directory"
                    } else {
                        "log_is_a_link"
                    },
                    format!(
                        "the {what} {id:?} is a symbolic link{}; under --log-dir none is followed",
                        if outside { " out of the directory" } else { "" }
                    ),
                ));
            }
        }
        Ok(path)
    }
}

impl Server {
    /// The state of the log a request names (`None`: the one `--log`).
    pub(crate) fn log(&self, id: Option<&str>) -> Result<Arc<AppState>, ApiError> {
        let state = match (&self.logs, id) {
            (Logs::One(st), None) => st.clone(),
            (Logs::Dir(dir), Some(id)) => {
                let path = dir.path_of(id)?;
                // What is let go is dropped after the lock: closing a store
                // may checkpoint its WAL, and freeing a replay takes a while.
                let mut let_go = LetGo::default();
                let mut states = dir.states.lock().unwrap_or_else(|p| p.into_inner());
                let st = match states.get(id) {
                    Some(st) => st.clone(),
                    None => {
                        let st = Arc::new(self.shared.open(
                            path,
                            Some(id.to_string()),
                            self.shared.cfg.create_logs,
                        ));
                        states.put(id.to_string(), st.clone());
                        // A fold a stop left undone is due again.
                        super::compact::compact_soon(&st);
                        st
                    }
                };
                self.evict(&mut states, &mut let_go);
                // Past `--max-open-logs`, or at it with this log about to
                // open its files (else, with the bound at what the
                // open-files limit allows, every log without its files open
                // would be refused until some went idle): the least
                // recently used close theirs, down to nine tenths, so that
                // this pass is not made at every request.
                let open = dir.open_files.load(Ordering::Acquire);
                if open > dir.max_open || (!st.files.is_open() && open >= dir.max_open) {
                    let keep = (dir.max_open * 9 / 10).min(dir.max_open.saturating_sub(1));
                    Self::close_files(&states, keep, &dir.open_files, &mut let_go);
                }
                let full =
                    !st.files.is_open() && dir.open_files.load(Ordering::Acquire) >= dir.most_open;
                drop(states);
                let_go.release();
                if full {
                    let mut e = ApiError::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "too_many_open_logs",
                        format!(
                            "{} logs are in use at once, the most the open-files \
                             limit ({}) allows; retry shortly",
                            dir.most_open, dir.fd_limit
                        ),
                    );
                    e.retry_after = Some(Duration::from_secs(1));
                    return Err(e);
                }
                st
            }
            // The routes of one mode only exist in that mode.
            _ => {
                return Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    "no such endpoint",
                ));
            }
        };
        *state.used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        Ok(state)
    }

    /// Drops the least recently used states while their rendered bytes
    /// exceed `--max-live-bytes`, never the most recently used one (the log
    /// just asked for: [`log`](Self::log) has made it so) and never one in
    /// use: a state a request or a turn holds keeps its single writer and
    /// its live replay until it is let go (dropping it would start a second
    /// writer for the same file).
    fn evict(&self, states: &mut lru::LruCache<String, Arc<AppState>>, let_go: &mut LetGo) {
        // Past `--max-live-logs`, whatever they hold (a request for a log
        // that does not exist makes a state that holds nothing, and every
        // request's pass here walks them all): the least recently used
        // unused ones.
        let most = self.shared.cfg.max_live_logs.max(1);
        if states.len() > most {
            let over = states.len() - most;
            let unused: Vec<String> = states
                .iter()
                .rev()
                .take(states.len() - 1)
                .filter(|(_, s)| Arc::strong_count(s) == 1)
                .take(over)
                .map(|(k, _)| k.clone())
                .collect();
            for id in unused {
                let st = states.pop(&id).expect("just listed");
                metrics::counter!("wmreplay_log_evictions_total").increment(1);
                tracing::debug!(log = %id, "live state dropped (count bound)");
                let_go.states.push(st);
            }
        }
        let bound = self.shared.cfg.max_live_bytes;
        let mut total: u64 = states
            .iter()
            .map(|(_, s)| s.live_bytes.load(Ordering::Relaxed))
            .sum();
        if total <= bound {
            return;
        }
        // Least recently used first; the most recent one stays.
        let order: Vec<String> = states.iter().rev().map(|(k, _)| k.clone()).collect();
        for id in order.iter().take(order.len().saturating_sub(1)) {
            if total <= bound {
                break;
            }
            if states.peek(id).is_some_and(|s| Arc::strong_count(s) == 1) {
                let st = states.pop(id).expect("just peeked");
                total = total.saturating_sub(st.live_bytes.load(Ordering::Relaxed));
                metrics::counter!("wmreplay_log_evictions_total").increment(1);
                tracing::debug!(log = %id, "live state dropped (memory bound)");
                let_go.states.push(st);
            }
        }
    }

    /// Closes the files of the least recently used logs that hold them
    /// and are not in use until at most `keep` hold theirs.
    fn close_files(
        states: &lru::LruCache<String, Arc<AppState>>,
        keep: usize,
        open: &std::sync::atomic::AtomicUsize,
        let_go: &mut LetGo,
    ) {
        for (id, st) in states.iter().rev() {
            if open.load(Ordering::Acquire) <= keep {
                break;
            }
            if let Some(closed) = st.close_files() {
                metrics::counter!("wmreplay_log_files_closed_total").increment(1);
                tracing::debug!(log = %id, "files closed (--max-open-logs)");
                let_go.files.push(closed);
            }
        }
    }

    /// Drops the states unused for `--idle-timeout` that nothing holds.
    pub(crate) fn sweep(&self) {
        if let Logs::Dir(dir) = &self.logs {
            let idle = self.shared.cfg.idle_timeout;
            let mut let_go = LetGo::default();
            let mut states = dir.states.lock().unwrap_or_else(|p| p.into_inner());
            let old: Vec<String> = states
                .iter()
                .filter(|(_, s)| {
                    Arc::strong_count(s) == 1
                        && s.used.lock().unwrap_or_else(|p| p.into_inner()).elapsed() > idle
                })
                .map(|(k, _)| k.clone())
                .collect();
            for id in old {
                if let Some(st) = states.pop(&id) {
                    let_go.states.push(st);
                }
                metrics::counter!("wmreplay_log_evictions_total").increment(1);
                tracing::debug!(log = %id, "live state dropped (idle)");
            }
            drop(states);
            let_go.release();
        }
    }

    /// Every state held, taken out (at shutdown).
    pub(crate) fn take_all(&self) -> Vec<Arc<AppState>> {
        match &self.logs {
            Logs::One(st) => vec![st.clone()],
            Logs::Dir(dir) => {
                let mut states = dir.states.lock().unwrap_or_else(|p| p.into_inner());
                let mut out = Vec::with_capacity(states.len());
                while let Some((_, st)) = states.pop_lru() {
                    out.push(st);
                }
                out
            }
        }
    }

    /// How often idle states are looked for.
    pub(crate) fn sweep_every(&self) -> Option<Duration> {
        match &self.logs {
            Logs::One(_) => None,
            Logs::Dir(_) => {
                Some((self.shared.cfg.idle_timeout / 4).max(Duration::from_millis(100)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::valid_id;

    #[test]
    fn ids_never_name_a_path() {
        for ok in ["a", "agent-7", "A.b_c-9", &"x".repeat(128)] {
            assert!(valid_id(ok), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "-x",
            "a/b",
            "a\\b",
            "%2e%2e",
            "a b",
            "é",
            &"x".repeat(129),
            "a\0",
            "../etc/passwd",
        ] {
            assert!(!valid_id(bad), "{bad:?}");
        }
    }
}
