//! `wmreplay serve`: the respond path over one working-memory log.
//!
//! - `POST /respond` appends the user's turn (`text_input`), replays the log
//!   as it stood before that line into a request (system rule, every record,
//!   `CURRENT_USER_REQUEST`), sends it to the upstream model, and appends the
//!   answer (`text_output`) once it is complete (`turn.rs`, the upstream
//!   call in `call.rs`). With
//!   `"stream": true` the answer is relayed as server-sent events. Without an
//!   upstream it answers with the request it would send, and appends nothing.
//! - `POST /v1/context` returns that request body as is.
//! - `POST /v1/turn/prepare` `{"session_key", "format"?}` and
//!   `POST /v1/turn/ack` `{"prepare_id", "status"}`: session deltas (see
//!   [`crate::state`]); an unknown `prepare_id` is a 404.
//! - `GET /healthz`, `GET /v1/stats`.
//!
//! The configured [`Selection`](crate::Selection) applies to every replay: its filters as
//! records arrive, its windows and pending mark per request. With
//! cache-stable trimming the window's start is kept in memory and in the
//! state store next to the log, so it survives a restart.
//!
//! The replay is a [`LiveReplay`]: each request parses only what was appended
//! since the last one, and the response body reuses the rendered messages as
//! `Bytes` without copying them. One thread owns the log and appends whole
//! lines ([`writer`]). Errors are JSON, `{"error": {"code", "message"}}`.
//!
//! **Prompt caching** ([`Config::cache`], on by default): with Anthropic,
//! every request carries up to 4 `cache_control` breakpoints placed for an
//! append-only log (see [`crate::CachePolicy`]), so each turn reads the
//! previous turn's prefix from the provider's cache; with OpenAI, whose
//! caching is automatic, a `prompt_cache_key` routes one log's requests to
//! one cache. Token usage (input, cache read, cache write, output) is
//! relayed in every answer, logged per turn and summed in `/v1/stats`.
//!
//! Files: `config.rs` (settings), `settings.rs` (their parsers and checks),
//! `conn.rs` (connection bounds), `errors.rs` (JSON errors, reading
//! bodies), `context.rs` (the replay as routes see it, `/healthz`,
//! `/v1/stats`), `sessions.rs` (`/v1/turn/*`), `turn.rs` and `call.rs`
//! (`/respond`), [`writer`], [`upstream`], `anthropic.rs` and `openai.rs`
//! (each provider's shapes).

mod anthropic;
mod auth;
mod call;
mod config;
mod conn;
mod context;
mod errors;
mod logs;
mod openai;
mod records;
mod sessions;
pub mod settings;
mod turn;
pub mod upstream;
pub mod writer;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::state::Store;
use crate::{LiveReplay, WindowStart};
pub use upstream::{ApiKey, Provider, Usage};
use writer::Writer;

pub use config::Config;
use context::replay_failed;
use context::{Snapshot, snapshot, snapshot_of, stats_json};
use errors::{ApiError, internal, json_response, read_body};

/// One log served: its settings (`cfg.log` is the log), its live replay,
/// its single writer and its session state. With `--log` there is one; with
/// `--log-dir`, one per log asked for, kept in [`logs::LogDir`]'s LRU.
struct AppState {
    cfg: Config,
    /// The log's id under `--log-dir`.
    id: Option<String>,
    /// The upstream's endpoint, checked at start.
    upstream: Option<reqwest::Url>,
    system: String,
    live: Arc<Mutex<LiveReplay>>,
    /// The log's single writer, started on the first append.
    writer: std::sync::OnceLock<Writer>,
    /// Every writer thread started, joined at shutdown.
    threads: Arc<Mutex<Vec<writer::WriterThread>>>,
    /// Whether the first append may create the log.
    create: bool,
    /// Rendered bytes the live replay held at its last use.
    live_bytes: std::sync::atomic::AtomicU64,
    /// When the log was last used.
    used: Mutex<std::time::Instant>,
    replays: Arc<Semaphore>,
    client: reqwest::Client,
    /// The cache-stable window's start, as last replayed.
    window: Mutex<Option<WindowStart>>,
    /// The state store, once opened.
    store: Mutex<Option<Arc<Mutex<Store>>>>,
    /// Keyed turns running now.
    inflight: turn::InFlight,
    /// Tokens used since start.
    totals: Mutex<turn::Totals>,
    /// Where the last turn's Anthropic cache breakpoints were.
    cache: Mutex<crate::CacheMemory>,
    /// OpenAI's `prompt_cache_key`, when caching.
    cache_key: Option<String>,
}

impl AppState {
    /// Whether requests carry Anthropic cache breakpoints.
    fn marks_cache(&self) -> bool {
        self.cfg.cache && self.cfg.provider == Provider::Anthropic
    }

    fn cache_policy(&self) -> crate::CachePolicy {
        crate::CachePolicy {
            ttl: self.cfg.cache_ttl,
            ..Default::default()
        }
    }

    fn store_path(&self) -> PathBuf {
        self.cfg
            .state
            .clone()
            .unwrap_or_else(|| Store::path_for(&self.cfg.log))
    }

    /// The state store, opened on first use.
    fn store(&self) -> Result<Arc<Mutex<Store>>, crate::Error> {
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
    fn permit(&self) -> Result<OwnedSemaphorePermit, ApiError> {
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
    fn note_held(&self, live: &LiveReplay) {
        self.live_bytes.store(
            live.info().rendered_bytes,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The log's writer, started (and the log created) on first use.
    fn writer(&self) -> std::io::Result<&Writer> {
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
        let (w, thread) = Writer::start(&self.cfg.log, self.cfg.fsync)?;
        threads.retain(|t| !t.is_finished());
        threads.push(thread);
        Ok(self.writer.get_or_init(|| w))
    }

    fn append_failed(&self, e: &std::io::Error) -> ApiError {
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

/// The handlers of a log's routes, for the one `--log` (`$one`) and for
/// `/v1/logs/{id}/…` (`$at`).
macro_rules! per_log {
    ($one:ident, $at:ident, $f:path) => {
        async fn $one(State(server): State<Arc<logs::Server>>, req: Request) -> Response {
            match server.log(None) {
                Ok(state) => $f(state, req).await.into_response(),
                Err(e) => e.into_response(),
            }
        }
        async fn $at(
            State(server): State<Arc<logs::Server>>,
            Path(id): Path<String>,
            req: Request,
        ) -> Response {
            match server.log(Some(&id)) {
                Ok(state) => $f(state, req).await.into_response(),
                Err(e) => e.into_response(),
            }
        }
    };
}

per_log!(respond_one, respond_at, turn::respond);
per_log!(context_one, context_at, turn::context);
per_log!(stats_one, stats_at, context::stats);
per_log!(prepare_one, prepare_at, sessions::turn_prepare);
per_log!(ack_one, ack_at, sessions::turn_ack);
per_log!(records_one, records_at, records::append);

fn router(server: Arc<logs::Server>) -> Router {
    let routes = match server.logs {
        logs::Logs::One(_) => Router::new()
            .route("/respond", post(respond_one))
            .route("/v1/context", post(context_one))
            .route("/v1/stats", get(stats_one))
            .route("/v1/turn/prepare", post(prepare_one))
            .route("/v1/turn/ack", post(ack_one))
            .route("/v1/records", post(records_one)),
        logs::Logs::Dir(_) => Router::new()
            .route("/v1/logs", get(logs::list))
            .route("/v1/logs/{id}/respond", post(respond_at))
            .route("/v1/logs/{id}/context", post(context_at))
            .route("/v1/logs/{id}/stats", get(stats_at))
            .route("/v1/logs/{id}/turn/prepare", post(prepare_at))
            .route("/v1/logs/{id}/turn/ack", post(ack_at))
            .route("/v1/logs/{id}/records", post(records_at)),
    };
    let routes = match server.shared.cfg.auth_token.clone() {
        Some(token) => routes.route_layer(axum::middleware::from_fn(
            move |req: Request, next: axum::middleware::Next| {
                let token = token.clone();
                async move { auth::check(&token, req, next).await }
            },
        )),
        None => routes,
    };
    routes
        .route("/healthz", get(context::healthz))
        .fallback(errors::not_found)
        .method_not_allowed_fallback(errors::method_not_allowed)
        .layer(
            // One line per request at INFO: method, path, status, latency
            // (headers are never logged, so neither is a client's key).
            tower_http::trace::TraceLayer::new_for_http()
                .make_span_with(
                    tower_http::trace::DefaultMakeSpan::new().level(tracing::Level::INFO),
                )
                .on_response(
                    tower_http::trace::DefaultOnResponse::new().level(tracing::Level::INFO),
                ),
        )
        .with_state(server)
}

/// Errors starting the server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The log could not be opened or replayed.
    #[error(transparent)]
    Log(#[from] crate::Error),
    /// The log could not be opened for appending.
    #[error("cannot open {path} for appending: {source}")]
    Writer {
        /// The log.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A setting is not valid.
    #[error("{0}")]
    Config(String),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    /// Accepting connections failed.
    #[error("accepting connections: {0}")]
    Accept(std::io::Error),
}

/// Makes ring the process's TLS crypto provider. reqwest is built without one
/// (so that no C toolchain beyond a C compiler is needed), and every
/// `reqwest::Client` in the process needs one; a provider already installed
/// is left in place.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Binds `addr`; for callers that want the port before serving.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves until `shutdown` resolves, then stops accepting, lets open
/// requests finish (in-flight appends included), and waits for the writer.
pub async fn serve(
    cfg: Config,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    install_crypto_provider();
    cfg.validate().map_err(ServeError::Config)?;
    let upstream = match &cfg.upstream {
        None => None,
        Some(u) => Some(settings::parse_upstream(u).map_err(ServeError::Config)?),
    }
    .map(|u| cfg.provider.endpoint(&u));
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        // The key goes to the configured upstream only: a redirect is an
        // upstream error, never followed.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| ServeError::Client(e.to_string()))?;
    let shared = Arc::new(logs::Shared {
        upstream,
        client,
        system: crate::system_prompt(cfg.system.as_deref()),
        replays: Arc::new(Semaphore::new(cfg.max_concurrent.max(1))),
        threads: Arc::default(),
        cfg,
    });
    let logs = match &shared.cfg.log_dir {
        Some(dir) => {
            let dir = logs::LogDir::new(dir)
                .map_err(|e| ServeError::Config(format!("--log-dir {}: {e}", dir.display())))?;
            tracing::info!(dir = %shared.cfg.log_dir.as_ref().map_or(String::new(), |d| d.display().to_string()), "serving the logs of a directory");
            logs::Logs::Dir(dir)
        }
        None => logs::Logs::One(open_one(&shared).await?),
    };
    let server = Arc::new(logs::Server {
        shared: shared.clone(),
        logs,
    });
    if let Some(every) = server.sweep_every() {
        let weak = Arc::downgrade(&server);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                match weak.upgrade() {
                    Some(s) => s.sweep(),
                    None => return,
                }
            }
        });
    }
    let app = router(server.clone());
    let cfg = &shared.cfg;
    let bounds = conn::Bounds {
        header_timeout: cfg.header_timeout,
        keep_alive_timeout: cfg.keep_alive_timeout,
        write_timeout: cfg.write_timeout,
        shutdown_timeout: cfg.shutdown_timeout,
        max_connections: cfg.max_connections,
    };
    conn::accept_loop(listener, app, bounds, shutdown).await;
    // Turns still running (their answers not yet appended) hold their log's
    // state: they get what is left of the shutdown timeout.
    let deadline = tokio::time::Instant::now() + cfg.shutdown_timeout;
    let states = server.take_all();
    drop(server);
    let all_done = async {
        for st in states {
            drop(wait_for_last(st).await);
        }
    };
    match tokio::time::timeout_at(deadline, all_done).await {
        Ok(()) => {
            // Every writer handle is gone: the threads finish their queues.
            let threads =
                std::mem::take(&mut *shared.threads.lock().unwrap_or_else(|p| p.into_inner()));
            let joined = tokio::task::spawn_blocking(move || {
                for t in threads {
                    t.join();
                }
            });
            let _ = tokio::time::timeout_at(deadline + Duration::from_secs(1), joined).await;
            tracing::info!("stopped");
        }
        Err(_) => tracing::warn!("turns still running after the shutdown timeout; stopping anyway"),
    }
    Ok(())
}

/// The one `--log`: its writer started (the log created) and its replay
/// built before the server answers, its window start resumed.
async fn open_one(shared: &Arc<logs::Shared>) -> Result<Arc<AppState>, ServeError> {
    let state = Arc::new(shared.open(shared.cfg.log.clone(), None, true));
    state.writer().map_err(|source| ServeError::Writer {
        path: state.cfg.log.clone(),
        source,
    })?;
    let live = state.live.clone();
    let first = tokio::task::spawn_blocking(move || {
        let mut live = live.lock().unwrap_or_else(|p| p.into_inner());
        live.refresh().map(|r| (r, live.info().records))
    })
    .await
    .expect("the first replay does not panic");
    let (first, records) = first?;
    tracing::info!(
        log = %state.cfg.log.display(),
        records,
        bytes = first.bytes_committed,
        "log replayed"
    );
    if state.cfg.selection.trim_to.is_some() {
        // Resume the window where the last run left it.
        let st = state.clone();
        let start = tokio::task::spawn_blocking(move || {
            let store = st.store()?;
            let store = store.lock().unwrap_or_else(|p| p.into_inner());
            store.window_start(&st.cfg.log, &st.cfg.selection.window_key())
        })
        .await
        .expect("reading the window start does not panic")?;
        *state.window.lock().unwrap_or_else(|p| p.into_inner()) = start;
    }
    Ok(state)
}

/// A `prompt_cache_key` for the log and the selection: the same across
/// restarts, different for another log or another selection.
fn derived_cache_key(cfg: &Config) -> String {
    let path = std::fs::canonicalize(&cfg.log).unwrap_or_else(|_| cfg.log.clone());
    let ident = format!("{}\n{}", path.display(), cfg.selection.window_key());
    format!(
        "wmreplay-{:016x}",
        xxhash_rust::xxh3::xxh3_64(ident.as_bytes())
    )
}

async fn wait_for_last(state: Arc<AppState>) -> AppState {
    let mut state = state;
    loop {
        match Arc::try_unwrap(state) {
            Ok(s) => return s,
            Err(s) => {
                state = s;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}
