//! `wmreplay serve`: the respond path over one working-memory log.
//!
//! - `POST /respond` appends the user's turn (`text_input`), replays the log
//!   as it stood before that line into a request (system rule, every record,
//!   `CURRENT_USER_REQUEST`), sends it to the upstream model, and appends the
//!   answer (`text_output`) once it is complete (`turn/`). With
//!   `"stream": true` the answer is relayed as server-sent events. Without an
//!   upstream it answers with the request it would send, and appends nothing.
//! - `POST /v1/context` returns that request body as is.
//! - `POST /v1/turn/prepare` `{"session_key", "format"?}` and
//!   `POST /v1/turn/ack` `{"prepare_id", "status"}`: session deltas (see
//!   [`crate::state`]); an unknown `prepare_id` is a 404.
//! - `POST /v1/records`: records of any kind, through the one writer.
//! - `GET /healthz`, `GET /v1/stats`; under `--log-dir`, `GET /v1/logs` and
//!   every route of a log as `/v1/logs/{id}/…`.
//!
//! The configured [`Selection`](crate::Selection) applies to every replay: its filters as
//! records arrive, its windows and pending mark per request. With
//! cache-stable trimming the window's start is kept in memory and in the
//! state store next to the log, so it survives a restart.
//!
//! The replay is a [`LiveReplay`](crate::LiveReplay): each request parses only what was appended
//! since the last one, and the response body reuses the rendered messages as
//! `Bytes` without copying them. One thread (of a small pool shared by every
//! log) owns the log and appends whole lines ([`writer`]). A turn runs in a
//! task of its own, whatever its client does. Errors are JSON, `{"error": {"code", "message"}}`.
//!
//! **Prompt caching** ([`Config::cache`], on by default): with Anthropic,
//! every request carries up to 4 `cache_control` breakpoints placed for an
//! append-only log (see [`crate::CachePolicy`]), so each turn reads the
//! previous turn's prefix from the provider's cache; with OpenAI, whose
//! caching is automatic, a `prompt_cache_key` routes one log's requests to
//! one cache. Token usage (input, cache read, cache write, output) is
//! relayed in every answer, logged per turn and summed in `/v1/stats`.
//!
//! Layout, from the bottom up (each folder imports only what is below it):
//! `config.rs` and `settings.rs` (the settings and their parsers),
//! `errors.rs` (JSON errors, reading bodies), `sse.rs`, [`upstream`] (the
//! shared types, one file per provider, the call with its retries),
//! [`writer`] (the [`writer::LogWriter`] trait and the local single writer),
//! `app/` (a log's state, the logs served, the replay as routes see it),
//! `turn/` (one `/respond` turn), `mcp/` (the MCP server: stdio, and the
//! streamable HTTP service), `routes/` (one file per group of routes, and
//! the router), `auth.rs`, `conn.rs` (connection bounds), and this file
//! (start-up and shutdown).

mod app;
mod auth;
mod browser;
mod compact;
mod compat;
mod config;
mod conn;
mod errors;
pub(crate) mod failpoint;
mod logging;
mod mcp;
mod metrics;
mod routes;
pub mod settings;
mod sse;
mod tokens;
mod turn;
mod ui;
pub mod upstream;
pub mod writer;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;

pub use browser::BrowserRules;
pub use compact::{CompactError, CompactReport, compact_once};
pub use config::{Compaction, Config, Tools};
pub use logging::{StderrLine, StderrLog, dropped_log_lines};
pub use mcp::{McpStdioError, mcp_stdio};
pub use tokens::{Access, Grant, TokenFile, token_line_hash};
pub use upstream::{ApiKey, EmbedConfig, HttpEmbedder, Provider, Usage};
#[cfg(feature = "jetstream")]
pub use writer::jetstream::JetStreamConfig;

use app::AppState;
use app::logs::{LogDir, Logs, Server, Shared};
use upstream::call::Upstream;

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
    /// The JetStream stream could not be reached or opened.
    #[error("JetStream: {0}")]
    JetStream(String),
}

/// Makes ring the process's TLS crypto provider. reqwest is built without one
/// (so that no C toolchain beyond a C compiler is needed), and every
/// `reqwest::Client` in the process needs one; a provider already installed
/// is left in place.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Reads the token file again on each SIGHUP (Unix; elsewhere a restart
/// reads it).
fn reload_on_hangup(tokens: Arc<tokens::Tokens>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            tracing::warn!("cannot listen for SIGHUP: the token file is read at start only");
            return;
        };
        let weak = Arc::downgrade(&tokens);
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                match weak.upgrade() {
                    Some(t) => t.reload(),
                    None => return,
                }
            }
        });
    }
    #[cfg(not(unix))]
    let _ = tokens;
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
    let upstream = upstream_of(&cfg)?;
    let embedder = upstream::embed::embedder_for(cfg.embed.as_ref()).map_err(ServeError::Config)?;
    #[cfg(feature = "jetstream")]
    let fleet = match &cfg.jetstream {
        Some(js) => Some(
            writer::jetstream::Fleet::connect(js)
                .await
                .map_err(ServeError::JetStream)?,
        ),
        None => None,
    };
    let tokens = match &cfg.token_file {
        Some(path) => Some(Arc::new(
            tokens::Tokens::open(path).map_err(ServeError::Config)?,
        )),
        None => None,
    };
    if let Some(t) = &tokens {
        tracing::info!(
            tokens = t.current().len(),
            "scoped tokens read (SIGHUP reads them again)"
        );
        reload_on_hangup(t.clone());
    }
    let shared = Arc::new(Shared {
        open_files: Arc::default(),
        closing: Arc::default(),
        tokens,
        #[cfg(feature = "jetstream")]
        fleet,
        upstream,
        embedder,
        system: crate::system_prompt(cfg.system.as_deref()),
        replays: Arc::new(Semaphore::new(cfg.max_concurrent.max(1))),
        threads: Arc::default(),
        turns: Arc::default(),
        budget: Arc::new(app::budget::Budget::new(cfg.max_memory)),
        cfg,
    });
    let ready: Arc<OnceLock<Result<(), String>>> = Arc::default();
    let logs = match &shared.cfg.log_dir {
        Some(dir) => {
            let fd_limit = app::logs::raise_fd_limit();
            let dir = LogDir::new(
                dir,
                shared.cfg.max_open_logs,
                fd_limit,
                shared.cfg.max_connections,
                shared.open_files.clone(),
            )
            .map_err(|e| ServeError::Config(format!("--log-dir {}: {e}", dir.display())))?;
            tracing::info!(
                fd_limit,
                max_open = dir.max_open,
                "logs holding their files open at once (--max-open-logs, and the open-files limit)"
            );
            tracing::info!(dir = %shared.cfg.log_dir.as_ref().map_or(String::new(), |d| d.display().to_string()), "serving the logs of a directory");
            Logs::Dir(dir)
        }
        None => Logs::One(open_one(&shared, &ready)?),
    };
    if matches!(logs, Logs::Dir(_)) {
        let _ = ready.set(Ok(()));
    }
    let server = Arc::new(Server {
        shared: shared.clone(),
        logs,
        ready,
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
    // MCP's host check follows the address listened on (`mcp/http.rs`).
    let app = routes::router(server.clone())
        .layer(axum::Extension(mcp::Listening(listener.local_addr().ok())));
    let cfg = &shared.cfg;
    let bounds = conn::Bounds {
        header_timeout: cfg.header_timeout,
        keep_alive_timeout: cfg.keep_alive_timeout,
        write_timeout: cfg.write_timeout,
        shutdown_timeout: cfg.shutdown_timeout,
        max_connections: cfg.max_connections,
    };
    // One deadline for the whole shutdown, from the moment it is asked for:
    // connections drain and turns finish within it; turns still running a
    // little before it are cut (each appends what it has, marked
    // `interrupted`), and the writers finish their queues by it.
    let asked: Arc<OnceLock<tokio::time::Instant>> = Arc::default();
    let shutdown = {
        let asked = asked.clone();
        let turns = shared.turns.clone();
        let timeout = cfg.shutdown_timeout;
        let closing = shared.closing.clone();
        async move {
            shutdown.await;
            closing.store(true, std::sync::atomic::Ordering::Relaxed);
            let t0 = tokio::time::Instant::now();
            asked.get_or_init(|| t0);
            tokio::spawn(async move {
                tokio::time::sleep_until(t0 + timeout - cut_margin(timeout)).await;
                turns.cut_all();
            });
        }
    };
    conn::accept_loop(
        listener,
        app,
        bounds,
        shutdown,
        cut_margin(cfg.shutdown_timeout) / 2,
    )
    .await;
    let deadline = *asked.get_or_init(tokio::time::Instant::now) + cfg.shutdown_timeout;
    let states = server.take_all();
    drop(server);
    let all_done = async {
        for st in states {
            drop(wait_for_last(st).await);
        }
    };
    if tokio::time::timeout_at(deadline, all_done).await.is_err() {
        tracing::warn!("requests still running at the shutdown deadline; stopping anyway");
        return Ok(());
    }
    // Every writer handle is gone: the threads finish their queues.
    let threads = std::mem::take(&mut *shared.threads.lock().unwrap_or_else(|p| p.into_inner()));
    let joined = tokio::task::spawn_blocking(move || {
        for t in threads {
            t.join();
        }
    });
    match tokio::time::timeout_at(deadline, joined).await {
        Ok(_) => tracing::info!("stopped"),
        Err(_) => tracing::warn!("writers still busy at the shutdown deadline; stopping anyway"),
    }
    Ok(())
}

/// The upstream `cfg` names, with its client, if it names one.
pub(crate) fn upstream_of(cfg: &Config) -> Result<Option<Arc<Upstream>>, ServeError> {
    let endpoint = match &cfg.upstream {
        None => None,
        Some(u) => Some(settings::parse_upstream(u).map_err(ServeError::Config)?),
    }
    .map(|u| cfg.provider.endpoint(&u));
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        // Nagle off, as reqwest has it by default: said, not assumed.
        .tcp_nodelay(true)
        .user_agent(concat!("wmreplay/", env!("CARGO_PKG_VERSION")))
        // The key goes to the configured upstream only: a redirect is an
        // upstream error, never followed.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| ServeError::Client(e.to_string()))?;
    let upstream = endpoint.map(|endpoint| {
        Arc::new(Upstream {
            client,
            endpoint,
            provider: cfg.provider,
            headers: {
                let mut h = cfg
                    .provider
                    .headers(cfg.api_key.as_ref(), &cfg.upstream_headers);
                if cfg.tools.memory && cfg.provider == Provider::Anthropic {
                    upstream::tools::add_beta(&mut h, upstream::tools::MEMORY_BETA);
                }
                h
            },
            key: cfg.api_key.clone(),
            retries: cfg.upstream_retries,
            retry_min_delay: cfg.retry_min_delay,
            timeout: cfg.upstream_timeout,
            responses: false,
        })
    });
    Ok(upstream)
}

/// How long before the shutdown deadline running turns are cut, so that
/// their closing records are written within it.
fn cut_margin(timeout: Duration) -> Duration {
    (timeout / 4).min(Duration::from_secs(1))
}

/// The one `--log`: its writer started (the log created) and its replay
/// built before the server answers, its window start resumed.
/// The one log's state, its writer open; its first replay runs in the
/// background (a request that needs it waits on the replay's lock), and
/// `ready` says when it has ended.
fn open_one(
    shared: &Arc<Shared>,
    ready: &Arc<OnceLock<Result<(), String>>>,
) -> Result<Arc<AppState>, ServeError> {
    let state = Arc::new(shared.open(shared.cfg.log.clone(), None, true));
    state.writer().map_err(|source| ServeError::Writer {
        path: state.cfg.log.clone(),
        source,
    })?;
    // A request that comes first takes the replay's lock and replays the
    // log itself; either way the other waits on the lock, and the log is
    // replayed once.
    let live = state.live.clone();
    let (st, ready) = (state.clone(), ready.clone());
    let first = std::thread::Builder::new()
        .name("wmreplay-first-replay".into())
        .spawn(move || {
            let mut guard = live.lock().unwrap_or_else(|p| p.into_inner());
            let replayed = guard.refresh().map(|r| (r, guard.info().records));
            drop(guard);
            let outcome = replayed.and_then(|(first, records)| {
                tracing::info!(
                    log = %st.cfg.log.display(),
                    records,
                    bytes = first.bytes_committed,
                    "log replayed: ready"
                );
                if st.cfg.selection.trim_to.is_some() {
                    // Resume the window where the last run left it.
                    let store = st.store()?;
                    let start = (store.lock().unwrap_or_else(|p| p.into_inner()))
                        .window_start(&st.cfg.log, &st.cfg.selection.window_key())?;
                    *st.window.lock().unwrap_or_else(|p| p.into_inner()) = start;
                }
                Ok(())
            });
            if let Err(e) = &outcome {
                tracing::error!(log = %st.cfg.log.display(), error = %e, "the first replay failed");
            }
            let ok = outcome.is_ok();
            let _ = ready.set(outcome.map_err(|e| e.to_string()));
            // The inspector's index of the log, so that the page's first
            // request finds it built (its parse costs about as much as the
            // replay's).
            if ok && st.cfg.ui {
                let mut idx = st.index.lock().unwrap_or_else(|p| p.into_inner());
                if let Err(e) = st.refresh_index(&mut idx) {
                    tracing::warn!(error = %e, "the inspector's index of the log was not built");
                }
            }
        });
    if let Err(e) = first {
        return Err(ServeError::Config(format!(
            "cannot start the first replay: {e}"
        )));
    }
    // A fold a stop left undone is due again.
    app::compact::compact_soon(&state);
    Ok(state)
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
