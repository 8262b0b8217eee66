//! `wmreplay serve`: the respond path over one working-memory log.
//!
//! - `POST /respond` appends the user's turn (`text_input`), replays the log
//!   into a request (system rule, every record, `CURRENT_USER_REQUEST`), sends
//!   it to the upstream model, and appends the answer (`text_output`) once it
//!   is complete. With `"stream": true` the answer is relayed as server-sent
//!   events. Without an upstream it answers with the request it would send,
//!   and appends nothing.
//! - `POST /v1/context` returns that request body as is.
//! - `POST /v1/turn/prepare` `{"session_key", "format"?}` and
//!   `POST /v1/turn/ack` `{"prepare_id", "status"}`: seed 003's session
//!   deltas (see [`crate::state`]); an unknown `prepare_id` is a 404.
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

pub mod upstream;
pub mod writer;

use std::convert::Infallible;
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
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::state::{self, Store};
use crate::{
    CurrentRequest, Format, LiveInfo, LiveReplay, ReplayOptions, ReplayStats, SelectReport,
    Selection, WindowStart,
};
use upstream::StreamEvent;
pub use upstream::{ApiKey, Provider};
use writer::{Turn, Writer};

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
    /// Time allowed for the upstream's answer (504 beyond).
    pub upstream_timeout: Duration,
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
            replay: ReplayOptions::default(),
            selection: Selection::default(),
            state: None,
        }
    }
}

struct AppState {
    cfg: Config,
    system: String,
    live: Arc<Mutex<LiveReplay>>,
    writer: Writer,
    replays: Arc<Semaphore>,
    client: reqwest::Client,
    /// The cache-stable window's start, as last replayed.
    window: Mutex<Option<WindowStart>>,
    /// The state store, once opened.
    store: Mutex<Option<Arc<Mutex<Store>>>>,
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
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    upstream_status: Option<u16>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            upstream_status: None,
        }
    }

    fn json(&self) -> Value {
        let mut e = json!({"code": self.code, "message": self.message});
        if let Some(s) = self.upstream_status {
            e["upstream_status"] = json!(s);
        }
        json!({ "error": e })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.json().to_string();
        let mut r = (self.status, body).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        r
    }
}

/// A client's `/respond` or `/v1/context` input.
struct Input {
    text: String,
    session_id: Option<String>,
    stream: bool,
}

fn parse_input(body: &[u8]) -> Result<Input, ApiError> {
    let bad = |code, msg: &str| ApiError::new(StatusCode::BAD_REQUEST, code, msg);
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| bad("invalid_json", &format!("the body is not valid JSON: {e}")))?;
    let Some(obj) = v.as_object() else {
        return Err(bad("invalid_json", "the body must be a JSON object"));
    };
    let text = match obj.get("text") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(bad("invalid_text", "`text` must be a string")),
        None => return Err(bad("missing_text", "`text` is required")),
    };
    let session_id = match obj.get("session_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(bad("invalid_session_id", "`session_id` must be a string")),
    };
    let stream = match obj.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(bad("invalid_stream", "`stream` must be a boolean")),
    };
    Ok(Input {
        text,
        session_id,
        stream,
    })
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

/// `report`: also find the pending prompt (and report the selection) when
/// the selection does not ask for it.
async fn snapshot(state: &Arc<AppState>, report: bool) -> Result<Snapshot, ApiError> {
    let st = state.clone();
    let res = tokio::task::spawn_blocking(move || {
        let mut live = st.live.lock().unwrap_or_else(|p| p.into_inner());
        if live.refresh()?.rebuilt {
            // Another file now: a remembered window start means nothing.
            *st.window.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
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
        Ok::<_, crate::Error>(Snapshot {
            chunks,
            stats: live.stats().clone(),
            info: live.info(),
            select,
        })
    })
    .await;
    match res {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "replay failed");
            Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "replay_failed",
                e.to_string(),
            ))
        }
        Err(e) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "replay_failed",
            format!("the replay task failed: {e}"),
        )),
    }
}

impl AppState {
    /// The request body's pieces: head, the rendered messages, tail.
    fn body_parts(&self, snap: &Snapshot, input: &Input, stream: bool) -> Vec<Bytes> {
        let p = self.cfg.provider;
        let fields = p.fields(&self.cfg.model, self.cfg.max_tokens, stream);
        let current = CurrentRequest {
            text: &input.text,
            session_id: input.session_id.as_deref(),
        };
        let (head, tail) = crate::request_envelope(p.format(), &fields, &self.system, &current);
        let mut parts = Vec::with_capacity(snap.chunks.len() + 2);
        parts.push(Bytes::from(head));
        parts.extend(snap.chunks.iter().cloned());
        parts.push(Bytes::from(tail));
        parts
    }

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

    async fn append(&self, turn: Turn) -> Result<writer::Appended, ApiError> {
        self.writer.append(turn).await.map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "append_failed",
                format!("cannot append to {}: {e}", self.cfg.log.display()),
            )
        })
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

fn stream_body(parts: Vec<Bytes>) -> Body {
    Body::from_stream(futures_util::stream::iter(
        parts.into_iter().map(Ok::<_, Infallible>),
    ))
}

async fn context(State(state): State<Arc<AppState>>, req: Request) -> Result<Response, ApiError> {
    let body = read_body(&state, req).await?;
    let input = parse_input(&body)?;
    let _permit = state.permit()?;
    let snap = snapshot(&state, false).await?;
    let parts = state.body_parts(&snap, &input, input.stream);
    Ok(json_response(StatusCode::OK, stream_body(parts)))
}

async fn respond(State(state): State<Arc<AppState>>, req: Request) -> Result<Response, ApiError> {
    let body = read_body(&state, req).await?;
    let input = parse_input(&body)?;
    let permit = state.permit()?;
    let Some(base) = state.cfg.upstream.clone() else {
        // No model to call: show the request, append nothing.
        let snap = snapshot(&state, false).await?;
        let mut parts = vec![Bytes::from_static(b"{\"request\":")];
        parts.extend(state.body_parts(&snap, &input, input.stream));
        let stats = stats_json(&snap.stats, state.cfg.replay.max_skips);
        parts.push(Bytes::from(format!(",\"stats\":{stats}}}")));
        return Ok(json_response(StatusCode::OK, stream_body(parts)));
    };
    state
        .append(Turn {
            kind: "text_input",
            session_id: input.session_id.clone(),
            text: input.text.clone(),
        })
        .await?;
    let snap = snapshot(&state, false).await?;
    let parts = state.body_parts(&snap, &input, input.stream);
    let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
    let provider = state.cfg.provider;
    let request = state
        .client
        .post(provider.endpoint(&base))
        .headers(provider.headers(state.cfg.api_key.as_ref()))
        .header(header::CONTENT_LENGTH, len)
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            parts.into_iter().map(Ok::<_, Infallible>),
        )));
    let sent = tokio::time::timeout(state.cfg.upstream_timeout, request.send()).await;
    let resp = match sent {
        Err(_) => return Err(upstream_timeout(&state)),
        Ok(Err(e)) if e.is_timeout() => return Err(upstream_timeout(&state)),
        Ok(Err(e)) => {
            return Err(ApiError::new(
                StatusCode::BAD_GATEWAY,
                "upstream_unreachable",
                format!("cannot reach the upstream: {}", without_url(&e)),
            ));
        }
        Ok(Ok(r)) => r,
    };
    let status = resp.status();
    if !status.is_success() {
        let body = tokio::time::timeout(state.cfg.upstream_timeout, resp.bytes())
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        let mut e = ApiError::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            format!(
                "the upstream answered {}: {}",
                status.as_u16(),
                upstream::upstream_error_message(&body)
            ),
        );
        e.upstream_status = Some(status.as_u16());
        return Err(e);
    }
    let max_skips = state.cfg.replay.max_skips;
    if input.stream {
        // The permit moves into the relay task: the turn is running until
        // the answer is complete.
        return Ok(relay_stream(
            state.clone(),
            input,
            resp,
            snap.stats,
            permit,
            max_skips,
        ));
    }
    drop(permit);
    let body = match tokio::time::timeout(state.cfg.upstream_timeout, resp.bytes()).await {
        Err(_) => return Err(upstream_timeout(&state)),
        Ok(Err(e)) => {
            return Err(ApiError::new(
                StatusCode::BAD_GATEWAY,
                "upstream_error",
                format!("reading the upstream's answer: {}", without_url(&e)),
            ));
        }
        Ok(Ok(b)) => b,
    };
    let text = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| provider.answer_text(&v))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_GATEWAY,
                "upstream_bad_answer",
                "the upstream's answer has no text in the provider's format",
            )
        })?;
    state
        .append(Turn {
            kind: "text_output",
            session_id: input.session_id,
            text: text.clone(),
        })
        .await?;
    let out = json!({"text": text, "stats": stats_json(&snap.stats, max_skips)});
    Ok(json_response(StatusCode::OK, out.to_string()))
}

fn upstream_timeout(state: &AppState) -> ApiError {
    ApiError::new(
        StatusCode::GATEWAY_TIMEOUT,
        "upstream_timeout",
        format!(
            "the upstream did not answer within {} s",
            state.cfg.upstream_timeout.as_secs()
        ),
    )
}

/// A reqwest error's text without its URL (which could carry credentials).
fn without_url(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    if let Some(u) = e.url() {
        s = s.replace(u.as_str(), "<upstream>");
    }
    s
}

fn sse(event: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}

/// Relays the upstream's streamed answer as server-sent events (`delta`,
/// then `done` with the whole text and the stats, or `error`), and appends
/// the answer once it is complete.
fn relay_stream(
    state: Arc<AppState>,
    input: Input,
    resp: reqwest::Response,
    stats: ReplayStats,
    permit: OwnedSemaphorePermit,
    max_skips: usize,
) -> Response {
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let provider = state.cfg.provider;
    tokio::spawn(async move {
        let _permit = permit;
        let mut upstream = resp.bytes_stream();
        let mut parser = upstream::SseParser::default();
        let mut text = String::new();
        let idle = state.cfg.upstream_timeout;
        let outcome: Result<(), ApiError> = 'relay: loop {
            let next = match tokio::time::timeout(idle, upstream.next()).await {
                Err(_) => break 'relay Err(upstream_timeout(&state)),
                Ok(None) => {
                    break 'relay Err(ApiError::new(
                        StatusCode::BAD_GATEWAY,
                        "upstream_incomplete",
                        "the upstream's stream ended before the answer was complete",
                    ));
                }
                Ok(Some(Err(e))) => {
                    break 'relay Err(ApiError::new(
                        StatusCode::BAD_GATEWAY,
                        "upstream_error",
                        format!("reading the upstream's stream: {}", without_url(&e)),
                    ));
                }
                Ok(Some(Ok(b))) => b,
            };
            for data in parser.feed(&next) {
                match provider.stream_event(&data) {
                    StreamEvent::Text(t) => {
                        text.push_str(&t);
                        // A client that went away does not stop the turn.
                        let _ = tx.send(sse("delta", &json!({ "text": t }))).await;
                    }
                    StreamEvent::Done => break 'relay Ok(()),
                    StreamEvent::Error(m) => {
                        break 'relay Err(ApiError::new(
                            StatusCode::BAD_GATEWAY,
                            "upstream_error",
                            format!("the upstream reported an error: {m}"),
                        ));
                    }
                    StreamEvent::Ignore => {}
                }
            }
        };
        let last = match outcome {
            Ok(()) => match state
                .append(Turn {
                    kind: "text_output",
                    session_id: input.session_id,
                    text: text.clone(),
                })
                .await
            {
                Ok(_) => sse(
                    "done",
                    &json!({"text": text, "stats": stats_json(&stats, max_skips)}),
                ),
                Err(e) => sse("error", &e.json()),
            },
            Err(e) => {
                tracing::warn!(code = e.code, message = %e.message, "streamed answer failed");
                sse("error", &e.json())
            }
        };
        let _ = tx.send(last).await;
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    let mut r = Response::new(Body::from_stream(stream));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

async fn healthz() -> Response {
    json_response(StatusCode::OK, json!({"status": "ok"}).to_string())
}

async fn stats(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    let _permit = state.permit()?;
    let snap = snapshot(&state, true).await?;
    let i = snap.info;
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
    .map_err(|e| {
        tracing::error!(error = %e, "prepare failed");
        internal("prepare_failed", e)
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
        .route("/respond", post(respond))
        .route("/v1/context", post(context))
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
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
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
    let connections = Arc::new(Semaphore::new(state.cfg.max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder =
        hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(state.cfg.header_timeout);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = connections.clone().acquire_owned() => p.expect("never closed"),
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: wait, go on.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let header_timeout = state.cfg.header_timeout;
        tokio::spawn(async move {
            // A connection that sends nothing at all is dropped after the
            // header timeout too (hyper's timer covers headers once they
            // start), so silent connections cannot hold every slot.
            // (`peek` waits for a byte; `readable` may report readiness
            // before any arrives.)
            let mut first = [0u8; 1];
            match tokio::time::timeout(header_timeout, stream.peek(&mut first)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => {
                    tracing::debug!(%peer, "connection sent nothing in time; closed");
                    return;
                }
            }
            let conn = builder
                .serve_connection_with_upgrades(hyper_util::rt::TokioIo::new(stream), service);
            if let Err(e) = watcher.watch(conn.into_owned()).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    tracing::info!("shutting down: finishing open requests");
    drop(listener);
    graceful.shutdown().await;
    drop(app);
    // Streams still relaying hold the state; wait for them to let go.
    let state = wait_for_last(state).await;
    drop(state);
    let _ = tokio::task::spawn_blocking(move || writer_thread.join()).await;
    tracing::info!("stopped");
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
