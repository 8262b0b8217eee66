//! Embedding the live replay in your own axum `/respond` handler.
//!
//! ```text
//! cargo run --example axum_respond -- examples/working_memory.log 127.0.0.1:8788
//! curl -s localhost:8788/respond -d '{"text":"What next?","session_id":"s-42"}'
//! ```
//!
//! The handler answers with the request body it would send to the model
//! (Anthropic Messages shape): the system rule, every record of the log in
//! `ts_ms` order as a `WM_KIND=…` message, and the `CURRENT_USER_REQUEST`.
//! A [`LiveReplay`] is kept across requests, so each one parses only what
//! was appended to the log since the last; its messages are shared `Bytes`,
//! so the body is streamed out without copying the replay. A real handler
//! would send the same bytes upstream (for example as a `reqwest::Body`).
//! `wmreplay serve` is this, plus the writer, the providers and the limits.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tokio::sync::Mutex;
use wmreplay::{CurrentRequest, Format, LiveReplay, ReplayOptions, SYSTEM_RULE, request_envelope};

type Live = Arc<Mutex<LiveReplay>>;

/// The app: `POST /respond` with `{"text": "…", "session_id": "…"}`
/// (`session_id` optional) over the log at `log`.
pub fn app(log: impl Into<PathBuf>) -> Router {
    let live = LiveReplay::new(log, Format::Anthropic, ReplayOptions::default());
    Router::new()
        .route("/respond", post(respond))
        .with_state(Arc::new(Mutex::new(live)))
}

async fn respond(State(live): State<Live>, body: Bytes) -> Response {
    let request: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("the body is not JSON: {e}"),
            );
        }
    };
    let Some(text) = request.get("text").and_then(|v| v.as_str()) else {
        return error(StatusCode::BAD_REQUEST, "`text` must be a string".into());
    };
    let session_id = match request.get("session_id") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(s.as_str()),
        Some(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "`session_id` must be a string".into(),
            );
        }
    };

    // Bring the replay up to date with the file (it reads the file: off the
    // async workers), and take its messages: cloning `Bytes` copies nothing.
    let refreshed = tokio::task::spawn_blocking(move || {
        let mut live = live.blocking_lock();
        live.refresh().map(|_| live.chunks())
    })
    .await;
    let chunks = match refreshed {
        Ok(Ok(chunks)) => chunks,
        Ok(Err(e)) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };

    // The body is the envelope's head, the replayed messages, and its tail
    // (which holds the current request).
    let current = CurrentRequest { text, session_id };
    let (head, tail) = request_envelope(Format::Anthropic, "", SYSTEM_RULE, &current);
    let mut parts = Vec::with_capacity(chunks.len() + 2);
    parts.push(Bytes::from(head));
    parts.extend(chunks);
    parts.push(Bytes::from(tail));
    let len: usize = parts.iter().map(Bytes::len).sum();
    let stream = futures_util::stream::iter(parts.into_iter().map(Ok::<_, Infallible>));
    (
        [
            (header::CONTENT_TYPE, "application/json".to_string()),
            (header::CONTENT_LENGTH, len.to_string()),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

/// A JSON error: `{"error":{"message":"…"}}`.
fn error(status: StatusCode, message: String) -> Response {
    let body = serde_json::json!({ "error": { "message": message } });
    (status, axum::Json(body)).into_response()
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let log = args
        .next()
        .unwrap_or_else(|| "examples/working_memory.log".to_string());
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:8788".to_string());
    let listener = match tokio::net::TcpListener::bind(&addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("axum_respond: cannot listen on {addr}: {e}");
            std::process::exit(1);
        }
    };
    eprintln!("axum_respond: POST http://{addr}/respond replays {log}");
    if let Err(e) = axum::serve(listener, app(log)).await {
        eprintln!("axum_respond: {e}");
        std::process::exit(1);
    }
}
