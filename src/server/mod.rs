//! `wmreplay serve`: the respond path over one working-memory log.
//!
//! - `POST /respond` appends the user's turn (`text_input`), replays the log
//!   as it stood before that line into a request (system rule, every record,
//!   `CURRENT_USER_REQUEST`), sends it to the upstream model, and appends the
//!   answer (`text_output`) once it is complete ([`turn`]). With
//!   `"stream": true` the answer is relayed as server-sent events. Without an
//!   upstream it answers with the request it would send, and appends nothing.
//! - `POST /v1/context` returns that request body as is.
//! - `POST /v1/turn/prepare` `{"session_key", "format"?}` and
//!   `POST /v1/turn/ack` `{"prepare_id", "status"}`: session deltas (see
//!   [`crate::state`]); an unknown `prepare_id` is a 404.
//! - `GET /healthz`, `GET /v1/stats`.
//!
//! The configured [`Selection`] applies to every replay: its filters as
//! records arrive, its windows and pending mark per request. With
//! cache-stable trimming the window's start is kept in memory and in the
//! state store next to the log, so it survives a restart.
//!
//! The replay is a [`LiveReplay`]: each request parses only what was appended
//! since the last one, and the response body reuses the rendered messages as
//! `Bytes` without copying them. One thread owns the log and appends whole
//! lines ([`writer`]). Errors are JSON, `{"error": {"code", "message"}}`.

mod anthropic;
mod conn;
mod openai;
pub mod settings;
mod turn;
pub mod upstream;
pub mod writer;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::state::{self, Store};
use crate::{
    Format, LiveInfo, LiveReplay, ReplayOptions, ReplayStats, SelectReport, Selection, WindowStart,
};
pub use upstream::{ApiKey, Provider, Usage};
use writer::Writer;

/// Everything `serve` needs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The working-memory log.
    pub log: PathBuf,
    /// The model API's base URL (or full endpoint); `None`: answer with the
    /// request instead of calling a model.
    pub upstream: Option<String>,
    /// The API the upstream speaks.
    pub provider: Provider,
    /// Model name sent upstream.
    pub model: String,
    /// `max_tokens` sent upstream (Anthropic requires it).
    pub max_tokens: u32,
    /// The API key, if any.
    pub api_key: Option<ApiKey>,
    /// Text placed before the system rule.
    pub system: Option<String>,
    /// Sync each append to disk before acknowledging it.
    pub fsync: bool,
    /// Largest request body accepted (413 beyond).
    pub body_limit: usize,
    /// Replays (and upstream calls) running at once; more get 503.
    pub max_concurrent: usize,
    /// Open connections at once; more wait to be accepted.
    pub max_connections: usize,
    /// Time allowed to send the request headers.
    pub header_timeout: Duration,
    /// Time allowed to send the request body.
    pub body_timeout: Duration,
    /// Time allowed for the upstream's answer, retries included (504
    /// beyond), and between two pieces of a streamed answer.
    pub upstream_timeout: Duration,
    /// Times a failed upstream call is tried again (rate limits, overload,
    /// connection failures), with exponential backoff and jitter.
    pub upstream_retries: u32,
    /// The first retry's wait (it doubles with each, up to 30 s), unless the
    /// upstream's `retry-after` says otherwise.
    pub retry_min_delay: Duration,
    /// Extra request fields sent upstream (`--upstream-field`), after the
    /// defaults and before a request's own `params`.
    pub upstream_fields: Vec<(String, Value)>,
    /// How long an idempotency key is remembered.
    pub idempotency_ttl: Duration,
    /// A client that reads nothing of a response for this long is let go
    /// (a streamed answer is still read to its end and appended).
    pub write_timeout: Duration,
    /// A connection with no request in flight for this long is closed.
    pub keep_alive_timeout: Duration,
    /// On shutdown, the time open requests get to finish before their
    /// connections are closed.
    pub shutdown_timeout: Duration,
    /// Engine options for the replay.
    pub replay: ReplayOptions,
    /// Filters, windows and the pending mark for every replay.
    pub selection: Selection,
    /// The state store (session positions, window starts) [default: the
    /// log's path with `.wmreplay.db` appended]; opened on first use.
    pub state: Option<PathBuf>,
}

impl Config {
    /// Defaults for a log, without an upstream.
    pub fn new(log: impl Into<PathBuf>) -> Self {
        Config {
            log: log.into(),
            upstream: None,
            provider: Provider::Anthropic,
            model: Provider::Anthropic.default_model().to_string(),
            max_tokens: 1024,
            api_key: None,
            system: None,
            fsync: true,
            body_limit: 1 << 20,
            max_concurrent: 64,
            max_connections: 1024,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            upstream_timeout: Duration::from_secs(300),
            upstream_retries: 2,
            retry_min_delay: Duration::from_millis(500),
            upstream_fields: Vec::new(),
            idempotency_ttl: Duration::from_secs(24 * 3600),
            write_timeout: Duration::from_secs(30),
            keep_alive_timeout: Duration::from_secs(60),
            shutdown_timeout: Duration::from_secs(10),
            replay: ReplayOptions::default(),
            selection: Selection::default(),
            state: None,
        }
    }
}

struct AppState {
    cfg: Config,
    /// The upstream's endpoint, checked at start.
    upstream: Option<reqwest::Url>,
    system: String,
    live: Arc<Mutex<LiveReplay>>,
    writer: Writer,
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
}

impl AppState {
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

/// An error answered as JSON with its status.
#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    upstream_status: Option<u16>,
    upstream_code: Option<String>,
    retry_after: Option<Duration>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            upstream_status: None,
            upstream_code: None,
            retry_after: None,
        }
    }

    fn json(&self) -> Value {
        let mut e = json!({"code": self.code, "message": self.message});
        if let Some(s) = self.upstream_status {
            e["upstream_status"] = json!(s);
        }
        if let Some(c) = &self.upstream_code {
            e["upstream_code"] = json!(c);
        }
        if let Some(r) = self.retry_after {
            e["retry_after"] = json!(retry_after_secs(r));
        }
        json!({ "error": e })
    }
}

/// Whole seconds to wait, rounded up (a `retry-after` header's unit).
fn retry_after_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.json().to_string();
        let mut r = (self.status, body).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(d) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs(d)));
        }
        r
    }
}

/// Reads a request body up to the limit, within the body timeout.
async fn read_body(state: &AppState, req: Request) -> Result<Bytes, ApiError> {
    let limit = state.cfg.body_limit;
    if let Some(len) = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && len > limit as u64
    {
        return Err(too_large(limit));
    }
    let mut stream = req.into_body().into_data_stream();
    let read = async {
        let mut buf = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_body",
                    format!("reading the body: {e}"),
                )
            })?;
            if buf.len() + chunk.len() > limit {
                return Err(too_large(limit));
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(buf))
    };
    match tokio::time::timeout(state.cfg.body_timeout, read).await {
        Ok(r) => r,
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "the request body did not arrive in time",
        )),
    }
}

fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        format!("the request body is larger than {limit} bytes"),
    )
}

/// The replayed log, brought up to date.
struct Snapshot {
    chunks: Vec<Bytes>,
    stats: ReplayStats,
    info: LiveInfo,
    select: Option<SelectReport>,
}

/// The selection applied to `live` as it stands. `report`: also find the
/// pending prompt (and report the selection) when the selection does not
/// ask for it.
fn snapshot_of(
    st: &AppState,
    live: &mut LiveReplay,
    report: bool,
) -> Result<Snapshot, crate::Error> {
    let sel = &st.cfg.selection;
    let (chunks, select) = if sel.is_everything() && !report {
        (live.chunks(), None)
    } else {
        let mut window = st.window.lock().unwrap_or_else(|p| p.into_inner());
        let (chunks, report) = live.select(sel, *window)?;
        if sel.trim_to.is_some() && report.window_start != *window {
            *window = report.window_start;
            let store = st.store()?;
            let store = store.lock().unwrap_or_else(|p| p.into_inner());
            store.set_window_start(&st.cfg.log, &sel.window_key(), report.window_start)?;
        }
        (chunks, Some(report))
    };
    Ok(Snapshot {
        chunks,
        stats: live.stats().clone(),
        info: live.info(),
        select,
    })
}

fn replay_failed(e: crate::Error) -> ApiError {
    tracing::error!(error = %e, "replay failed");
    match e {
        // The server keeps serving; this log needs more memory than there is.
        crate::Error::OutOfMemory { .. } => ApiError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "insufficient_memory",
            e.to_string(),
        ),
        e => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "replay_failed",
            e.to_string(),
        ),
    }
}

/// The log replayed up to its end.
async fn snapshot(state: &Arc<AppState>, report: bool) -> Result<Snapshot, ApiError> {
    let st = state.clone();
    let res = tokio::task::spawn_blocking(move || {
        let mut live = st.live.lock().unwrap_or_else(|p| p.into_inner());
        if live.refresh()?.rebuilt {
            // Another file now: a remembered window start means nothing.
            *st.window.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        snapshot_of(&st, &mut live, report)
    })
    .await;
    match res {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(replay_failed(e)),
        Err(e) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "replay_failed",
            format!("the replay task failed: {e}"),
        )),
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

    fn append_failed(&self, e: &std::io::Error) -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "append_failed",
            format!("cannot append to {}: {e}", self.cfg.log.display()),
        )
    }
}

fn stats_json(stats: &ReplayStats, max_skips: usize) -> Value {
    serde_json::from_str(&stats.to_json(max_skips)).expect("stats are JSON")
}

fn json_response(status: StatusCode, body: impl Into<Body>) -> Response {
    let mut r = Response::new(body.into());
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

async fn healthz() -> Response {
    json_response(StatusCode::OK, json!({"status": "ok"}).to_string())
}

async fn stats(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    let _permit = state.permit()?;
    let snap = snapshot(&state, true).await?;
    let i = snap.info;
    let totals = {
        let t = state.totals.lock().unwrap_or_else(|p| p.into_inner());
        turn::Totals {
            turns: t.turns,
            usage: t.usage,
        }
    };
    let selection = match &snap.select {
        Some(r) => serde_json::from_str::<Value>(&format!("{{{}}}", r.json_members()))
            .unwrap_or(Value::Null),
        None => Value::Null,
    };
    let body = json!({
        "log": state.cfg.log.display().to_string(),
        "log_bytes": i.file_len,
        "stats": stats_json(&snap.stats, state.cfg.replay.max_skips),
        "selection": selection,
        "live": {
            "committed_bytes": i.committed_bytes,
            "pending_bytes": i.pending_bytes,
            "records": i.records,
            "rendered_bytes": i.rendered_bytes,
            "segments": i.segments,
            "rebuilds": i.rebuilds,
            "late_records": i.late_records,
        },
        "turns": {
            "answered": totals.turns,
            "usage": totals.usage.to_json(),
        },
    });
    Ok(json_response(StatusCode::OK, body.to_string()))
}

fn internal(code: &'static str, e: impl std::fmt::Display) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, code, e.to_string())
}

fn json_object(body: &[u8]) -> Result<serde_json::Map<String, Value>, ApiError> {
    let bad = |msg: String| ApiError::new(StatusCode::BAD_REQUEST, "invalid_json", msg);
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err(bad("the body must be a JSON object".into())),
        Err(e) => Err(bad(format!("the body is not valid JSON: {e}"))),
    }
}

fn string_field<'a>(
    obj: &'a serde_json::Map<String, Value>,
    name: &str,
    code: &'static str,
) -> Result<Option<&'a str>, ApiError> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            code,
            format!("`{name}` must be a string"),
        )),
    }
}

async fn turn_prepare(
    State(state): State<Arc<AppState>>,
    req: Request,
) -> Result<Response, ApiError> {
    let body = read_body(&state, req).await?;
    let obj = json_object(&body)?;
    let key = string_field(&obj, "session_key", "invalid_session_key")?
        .filter(|k| !k.is_empty())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "missing_session_key",
                "`session_key` is required (a non-empty string)",
            )
        })?
        .to_string();
    let format = match string_field(&obj, "format", "invalid_format")? {
        None => Format::Xml,
        Some(f) => f
            .parse::<Format>()
            .map_err(|m| ApiError::new(StatusCode::BAD_REQUEST, "invalid_format", m))?,
    };
    let _permit = state.permit()?;
    let st = state.clone();
    let prepared = tokio::task::spawn_blocking(move || {
        let store = st.store()?;
        state::prepare(
            &store,
            &state::PrepareRequest {
                log: &st.cfg.log,
                session_key: &key,
                format,
                selection: &st.cfg.selection,
                options: &st.cfg.replay,
            },
        )
    })
    .await
    .map_err(|e| internal("prepare_failed", e))?
    .map_err(|e| match e {
        e @ crate::Error::OutOfMemory { .. } => replay_failed(e),
        e => {
            tracing::error!(error = %e, "prepare failed");
            internal("prepare_failed", e)
        }
    })?;
    Ok(json_response(StatusCode::OK, prepared.to_json()))
}

async fn turn_ack(State(state): State<Arc<AppState>>, req: Request) -> Result<Response, ApiError> {
    let body = read_body(&state, req).await?;
    let obj = json_object(&body)?;
    let id = string_field(&obj, "prepare_id", "invalid_prepare_id")?
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "missing_prepare_id",
                "`prepare_id` is required",
            )
        })?
        .to_string();
    let success = match string_field(&obj, "status", "invalid_status")? {
        Some("success") => true,
        Some("failed") => false,
        _ => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_status",
                "`status` must be \"success\" or \"failed\"",
            ));
        }
    };
    let st = state.clone();
    let acked = tokio::task::spawn_blocking(move || {
        let store = st.store()?;
        let mut store = store.lock().unwrap_or_else(|p| p.into_inner());
        store.ack(&id, success)
    })
    .await
    .map_err(|e| internal("ack_failed", e))?;
    match acked {
        Ok(a) => Ok(json_response(
            StatusCode::OK,
            json!({"ok": true, "status": if success {"success"} else {"failed"}, "position": a.position, "repeated": a.repeated}).to_string(),
        )),
        Err(e @ crate::Error::UnknownPrepare(_)) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_prepare_id",
            e.to_string(),
        )),
        Err(e) => Err(internal("ack_failed", e)),
    }
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this endpoint does not take that method",
    )
}

fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/respond", post(turn::respond))
        .route("/v1/context", post(turn::context))
        .route("/v1/stats", get(stats))
        .route("/v1/turn/prepare", post(turn_prepare))
        .route("/v1/turn/ack", post(turn_ack))
        .route("/healthz", get(healthz))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
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
        .with_state(state)
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
        Some(u) => Some(upstream::parse_upstream(u).map_err(ServeError::Config)?),
    }
    .map(|u| cfg.provider.endpoint(&u));
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        // The key goes to the configured upstream only: a redirect is an
        // upstream error, never followed.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| ServeError::Client(e.to_string()))?;
    let (writer, writer_thread) =
        Writer::start(&cfg.log, cfg.fsync).map_err(|source| ServeError::Writer {
            path: cfg.log.clone(),
            source,
        })?;
    let live = LiveReplay::new(&cfg.log, cfg.provider.format(), cfg.replay.clone())
        .with_selection(cfg.selection.clone());
    let (live, first) = tokio::task::spawn_blocking(move || {
        let mut live = live;
        let r = live.refresh();
        (live, r)
    })
    .await
    .expect("the first replay does not panic");
    let first = first?;
    tracing::info!(
        log = %cfg.log.display(),
        records = live.info().records,
        bytes = first.bytes_committed,
        "log replayed"
    );
    let state = Arc::new(AppState {
        upstream,
        inflight: turn::InFlight::default(),
        totals: Mutex::new(turn::Totals::default()),
        window: Mutex::new(None),
        store: Mutex::new(None),
        system: crate::system_prompt(cfg.system.as_deref()),
        replays: Arc::new(Semaphore::new(cfg.max_concurrent.max(1))),
        live: Arc::new(Mutex::new(live)),
        writer,
        client,
        cfg,
    });
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
    let app = router(state.clone());
    let bounds = conn::Bounds {
        header_timeout: state.cfg.header_timeout,
        keep_alive_timeout: state.cfg.keep_alive_timeout,
        write_timeout: state.cfg.write_timeout,
        shutdown_timeout: state.cfg.shutdown_timeout,
        max_connections: state.cfg.max_connections,
    };
    conn::accept_loop(listener, app, bounds, shutdown).await;
    // Turns still running (their answers not yet appended) hold the state:
    // they get what is left of the shutdown timeout.
    let deadline = tokio::time::Instant::now() + state.cfg.shutdown_timeout;
    match tokio::time::timeout_at(deadline, wait_for_last(state)).await {
        Ok(state) => {
            drop(state);
            let joined = tokio::task::spawn_blocking(move || writer_thread.join());
            let _ = tokio::time::timeout_at(deadline + Duration::from_secs(1), joined).await;
            tracing::info!("stopped");
        }
        Err(_) => tracing::warn!("turns still running after the shutdown timeout; stopping anyway"),
    }
    Ok(())
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
